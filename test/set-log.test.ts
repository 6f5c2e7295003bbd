import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { Engine } from '../src/engine.js';
import { createAccount, createTransferCode, id, newEngine, ok, POST, UNDO_MIGRATION_16 } from './helpers.js';

// A set's entries are an append-only log chained per balance record (migration 16). These tests
// read them every way there is — listed (all currencies, one currency, in small pages), as balance
// history, as of past times, by a calculation's backfill — across chains long enough to have marks,
// and check each against what the entries table and the balances said at the time.

const SET = id(50);
const TOP = id(51);
let engine: Engine;
let clock: ManualClock;
let path: string;

/** What the set's balance was after each posting, per currency: the oracle for history and as-of reads. */
const seen: Record<string, Array<{ at: string; version: number; units: string }>> = {};

beforeEach(async () => {
  path = join(mkdtempSync(join(tmpdir(), 'tally-setlog-')), 'ledger.db');
  clock = new ManualClock('2026-03-01T10:00:00.000Z');
  engine = await newEngine({ path, clock });
  for (const key of Object.keys(seen)) delete seen[key];
  createTransferCode(engine);
  createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
  createAccount(engine, 2);
  createAccount(engine, 3);
  ok(engine, `mutation { createAccountSet(input: {accountSetId: "${TOP}", name: "top"}) { version } }`);
  ok(engine, `mutation { createAccountSet(input: {accountSetId: "${SET}", name: "S", accountSetIds: ["${TOP}"]}) { version } }`);
  for (const n of [2, 3]) ok(engine, `mutation { addToAccountSet(id: "${SET}", member: {memberType: ACCOUNT, memberId: "${id(n)}"}) { version } }`);
});

const setBalance = (e: Engine, currency: string) =>
  ok(e, `{ accountSet(id: "${SET}") { balance(currency: "${currency}") { version settled { normalBalance { units } } } } }`).accountSet.balance;

/**
 * `count` postings: mostly 1 → 2 in USD (one row into the set), every third in EUR, every fifth
 * 3 → 2 (both accounts in the set: two rows in one posting, one balance version).
 */
function postMany(e: Engine, from: number, count: number): void {
  for (let n = from; n < from + count; n++) {
    const currency = n % 3 === 0 ? 'EUR' : 'USD';
    const source = n % 5 === 0 ? id(3) : id(1);
    ok(e, POST, { input: { transactionId: id(10_000 + n), tranCode: 'TRANSFER', params: { from: source, to: id(2), amount: `${n}`, currency } } });
    const after = setBalance(e, currency);
    (seen[currency] ??= []).push({ at: clock.now().toISOString(), version: after.version, units: after.settled.normalBalance.units });
    clock.advance(1000);
  }
}

/** The set's entries as the entries table records them (parentAccountIds), newest first. */
function expectedEntries(e: Engine, currency?: string): string[] {
  return (
    e.db
      .prepare(`SELECT entry_id, currency FROM entries WHERE parent_account_ids LIKE ? ORDER BY seq DESC`)
      .all(`%${SET}%`) as Array<{ entry_id: string; currency: string }>
  )
    .filter((r) => !currency || r.currency === currency)
    .map((r) => r.entry_id);
}

function listed(e: Engine, pageSize: number, currency?: string): string[] {
  const out: string[] = [];
  let after: string | null = null;
  const where = currency ? `, where: {currency: "${currency}"}` : '';
  for (;;) {
    const page: { nodes: Array<{ entryId: string }>; pageInfo: { hasNextPage: boolean; endCursor: string } } = ok(
      e,
      `query($after: String) { accountSet(id: "${SET}") { entries(first: ${pageSize}, after: $after${where}) { nodes { entryId } pageInfo { hasNextPage endCursor } } } }`,
      { after },
    ).accountSet.entries;
    out.push(...page.nodes.map((n) => n.entryId));
    if (!page.pageInfo.hasNextPage) return out;
    after = page.pageInfo.endCursor;
  }
}

function history(e: Engine, currency: string, pageSize: number): Array<{ version: number; units: string }> {
  const out: Array<{ version: number; units: string }> = [];
  let after: string | null = null;
  for (;;) {
    const page: { nodes: Array<{ version: number; settled: { normalBalance: { units: string } } }>; pageInfo: { hasNextPage: boolean; endCursor: string } } = ok(
      e,
      `query($after: String) { accountSet(id: "${SET}") { balance(currency: "${currency}") { history(first: ${pageSize}, after: $after) { nodes { version settled { normalBalance { units } } } pageInfo { hasNextPage endCursor } } } } }`,
      { after },
    ).accountSet.balance.history;
    out.push(...page.nodes.map((n) => ({ version: n.version, units: n.settled.normalBalance.units })));
    if (!page.pageInfo.hasNextPage) return out;
    after = page.pageInfo.endCursor;
  }
}

const asOf = (e: Engine, currency: string, at: string) =>
  ok(e, `{ accountSet(id: "${SET}") { balance(currency: "${currency}", asOf: "${at}") { version settled { normalBalance { units } } } } }`).accountSet.balance;

/** Every read of the set's entries agrees with the oracles. */
function checkReads(e: Engine): void {
  expect(listed(e, 7)).toEqual(expectedEntries(e));
  expect(listed(e, 50, 'EUR')).toEqual(expectedEntries(e, 'EUR'));
  expect(listed(e, 13, 'USD')).toEqual(expectedEntries(e, 'USD'));
  for (const currency of ['USD', 'EUR']) {
    const versions = [...seen[currency]!].reverse().map(({ version, units }) => ({ version, units }));
    expect(history(e, currency, 9)).toEqual(versions);
    // As of each posting's time, a moment later, and before the first.
    for (const [i, s] of seen[currency]!.entries()) {
      if (i % 7 !== 0) continue;
      const at = new Date(Date.parse(s.at) + 500).toISOString();
      expect(asOf(e, currency, at)).toEqual({ version: s.version, settled: { normalBalance: { units: s.units } } });
    }
    expect(asOf(e, currency, '2026-03-01T09:00:00.000Z')).toEqual({ version: 0, settled: { normalBalance: { units: '0' } } });
  }
}

describe('a set’s entry log', () => {
  it('lists, pages, and reads history and as-of balances exactly, across chains with marks', () => {
    postMany(engine, 1, 240);
    // The USD chain is longer than two marks' spacing: reads that start in the past seek from marks.
    const marks = engine.db.prepare('SELECT currency, count(*) AS n FROM set_entry_marks WHERE account_set_id = ? GROUP BY currency ORDER BY currency').all(SET);
    // One mark per 64 rows of a chain (a posting's two rows cross a multiple at most once).
    const rows = (c: string) => expectedEntries(engine, c).length;
    expect(rows('USD')).toBeGreaterThan(128);
    expect(marks).toEqual([{ currency: 'EUR', n: Math.floor(rows('EUR') / 64) }, { currency: 'USD', n: Math.floor(rows('USD') / 64) }]);
    // The top set above it has a log of its own, rows for the same entries.
    expect(engine.db.prepare('SELECT count(*) AS n FROM set_entry_log WHERE account_set_id = ?').get(TOP)).toEqual({ n: expectedEntries(engine).length });
    checkReads(engine);
  });

  it('a posting writes one log row per entry and set, in seq order, each pointing to its record’s previous row', () => {
    postMany(engine, 1, 30);
    const rows = engine.db
      .prepare(`SELECT l.seq, l.prev_seq, e.currency FROM set_entry_log l JOIN entries e ON e.seq = l.seq WHERE l.account_set_id = ? ORDER BY l.seq`)
      .all(SET) as Array<{ seq: number; prev_seq: number | null; currency: string }>;
    const last: Record<string, number | null> = {};
    for (const row of rows) {
      expect(row.prev_seq).toBe(last[row.currency] ?? null);
      last[row.currency] = row.seq;
    }
    const heads = engine.db.prepare('SELECT currency, log_head, log_count FROM balances WHERE account_id = ? ORDER BY currency').all(SET);
    expect(heads).toEqual(['EUR', 'USD'].map((c) => ({ currency: c, log_head: last[c], log_count: rows.filter((r) => r.currency === c).length })));
  });

  it('a database from before the log (schema 15, set_entries) is migrated: every read the same, and postings continue the chains', async () => {
    postMany(engine, 1, 150);
    checkReads(engine);
    // What schema 15 kept: set_entries keyed by (set, seq), no log, no marks, no heads.
    engine.db.exec(`${UNDO_MIGRATION_16} PRAGMA user_version = 15;`);
    engine.close();
    engine = await newEngine({ path, clock });
    expect(engine.db.pragma('user_version', { simple: true })).toBe(16);
    checkReads(engine);
    postMany(engine, 151, 60);
    checkReads(engine);
  });

  it('deleting a set deletes its log rows and marks, and nothing of the sets above', () => {
    postMany(engine, 1, 140);
    const topRows = engine.db.prepare('SELECT count(*) AS n FROM set_entry_log WHERE account_set_id = ?').get(TOP);
    for (const n of [2, 3]) ok(engine, `mutation { removeFromAccountSet(id: "${SET}", member: {memberType: ACCOUNT, memberId: "${id(n)}"}) { version } }`);
    ok(engine, `mutation { deleteAccountSet(id: "${SET}") { accountSetId } }`);
    expect(engine.db.prepare('SELECT count(*) AS n FROM set_entry_log WHERE account_set_id = ?').get(SET)).toEqual({ n: 0 });
    expect(engine.db.prepare('SELECT count(*) AS n FROM set_entry_marks WHERE account_set_id = ?').get(SET)).toEqual({ n: 0 });
    expect(engine.db.prepare('SELECT count(*) AS n FROM set_entry_log WHERE account_set_id = ?').get(TOP)).toEqual(topRows);
  });

  it('a calculation attached to the set backfills from its log, in posting order, past one read chunk', () => {
    // 3 → 2 only: two rows per posting, 1 040 rows (the backfill reads 1 000 at a time).
    for (let n = 1; n <= 520; n++) {
      ok(engine, POST, { input: { transactionId: id(20_000 + n), tranCode: 'TRANSFER', params: { from: id(3), to: id(2), amount: `${n}.5`, currency: 'USD' } } });
    }
    ok(engine, `mutation { createCalculation(input: {calculationId: "${id(70)}", code: "BY_ACCOUNT", description: "per direction", scope: LOCAL,
      dimensions: [{alias: "direction", value: "context.vars.entry.direction"}]}) { calculationId } }`);
    ok(engine, `mutation { attachCalculation(input: {calculationId: "${id(70)}", accountId: "${SET}"}) { calculationId } }`);
    const read = (direction: string) =>
      ok(engine, `{ balance(accountId: "${SET}", calculationId: "${id(70)}", dimension: {direction: "${direction}"}) { settled { drBalance { units } crBalance { units } } } }`).balance.settled;
    const total = (520 * 521) / 2 + 520 * 0.5; // exact in a double: 135 720
    expect(read('DEBIT')).toEqual({ drBalance: { units: `${total}.0` }, crBalance: { units: '0' } });
    expect(read('CREDIT')).toEqual({ drBalance: { units: '0' }, crBalance: { units: `${total}.0` } });
  });
});
