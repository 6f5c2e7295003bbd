import type { Statement } from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { calculationStatements } from '../../src/storage/statements/calculations.js';
import { type ByNumber, ledgerStatements } from '../../src/storage/statements/ledger.js';
import { velocityStatements } from '../../src/storage/statements/velocity.js';
import { viewStatements } from '../../src/storage/statements/views.js';
import { newEngine, ON_POSTGRES } from '../helpers/engine.js';

/**
 * Every read the ledger makes goes through an index (the reference ledger's rule): no statement's
 * query plan scans a whole table. A plan step "SCAN t" without an index is a table scan; SQLite
 * writes "SCAN t USING INDEX" or "SEARCH t USING ..." for indexed access. Statements listed in
 * WHOLE_TABLE read a table that is bounded by a limit or that a count needs whole; each says why.
 */
const WHOLE_TABLE: Record<string, string> = {
  lastEntrySeq: 'max(seq) is answered from the rowid b-tree end, not a scan',
  entriesBeyond: 'counts the rows of a subquery of at most LIMIT ? rows (is there more than n?)',
  transactionsBeyond: 'counts the rows of a subquery of at most LIMIT ? rows (is there more than n?)',
};

function statementsOf(group: Record<string, unknown>, prefix: string): Array<[string, Statement]> {
  const out: Array<[string, Statement]> = [];
  for (const [name, value] of Object.entries(group)) {
    if (value && typeof value === 'object' && 'source' in value && 'reader' in value)
      out.push([`${prefix}${name}`, value as Statement]);
    // Statements by a number (byColumns, byRows), prepared on first use: each prepared here.
    else if (typeof value === 'function' && 'all' in value)
      (value as unknown as ByNumber<Statement>).all().forEach((s, i) => out.push([`${prefix}${name}(${i + 1})`, s]));
    else if (value && typeof value === 'object')
      out.push(...statementsOf(value as Record<string, unknown>, `${prefix}${name}.`));
  }
  return out;
}

describe('query plans', () => {
  // SQLite's query plans; on PostgreSQL, test/storage/pg.test.ts checks every statement prepares.
  it.skipIf(ON_POSTGRES)('no ledger, velocity, calculation or view statement scans a whole table', async () => {
    const engine = await newEngine();
    const groups = {
      ...ledgerStatements(engine.db),
      vel: velocityStatements(engine.db),
      calc: calculationStatements(engine.db),
      views: viewStatements(engine.db),
    };
    const scans: string[] = [];
    let checked = 0;
    for (const [name, statement] of statementsOf(groups as Record<string, unknown>, '')) {
      const source = statement.source.trim();
      if (!/^(SELECT|WITH)/i.test(source)) continue;
      const positional = (source.match(/\?/g) ?? []).length;
      const named = [...new Set(source.match(/[@:$][A-Za-z_]\w*/g) ?? [])];
      const explain = engine.db.prepare(`EXPLAIN QUERY PLAN ${source}`);
      const plan = (
        named.length
          ? explain.all(Object.fromEntries(named.map((n) => [n.slice(1), null])))
          : explain.all(...new Array(positional).fill(null))
      ) as Array<{ detail: string }>;
      checked++;
      for (const { detail } of plan) {
        // A recursive CTE's own queue ("SCAN up", a chain's "SCAN walk") is not a table.
        if (
          /^SCAN (\w+)$/.test(detail) &&
          !/^SCAN (up|down|walk)\b/.test(detail) &&
          !WHOLE_TABLE[name.split('.').at(-1)!]
        )
          scans.push(`${name}: ${detail}`);
      }
    }
    expect(checked).toBeGreaterThan(40);
    expect(scans).toEqual([]);
    engine.close();
  });
});
