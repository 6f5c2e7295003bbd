import { describe, expect, it } from 'vitest';
import { Cel } from '../../src/cel/cel.js';
import { systemClock } from '../../src/clock.js';
import { DEFAULT_LIMITS } from '../../src/limits.js';
import { entryDocument, entryFields, transactionDocument, unionReads, varsRead } from '../../src/ledger/documents.js';
import type { EntryRow, TransactionRow } from '../../src/storage/statements/ledger.js';

/**
 * A calculation builds, for each entry, only the fields its expressions read of `context.vars`
 * (src/ledger/calculations.ts, contextOf). These tests hold that optimisation to its promise: for
 * every expression, the partial documents give the value (or the failure) the whole ones give.
 */

const cel = new Cel(systemClock, DEFAULT_LIMITS);
const ast = (expression: string) => (cel.compile(expression) as unknown as { ast: unknown }).ast;
const reads = (...expressions: string[]) => varsRead(expressions.map(ast));
const shown = (read: ReturnType<typeof varsRead>) =>
  read === null ? null : Object.fromEntries([...read].map(([k, v]) => [k, v === null ? null : [...v].sort()]));

const transaction: TransactionRow = {
  seq: 7,
  transaction_id: 'b1f0c9a2-0000-4000-8000-000000000001',
  tran_code_id: 'c0de0000-0000-4000-8000-000000000001',
  tran_code_version: 2,
  journal_id: '00000000-0000-0000-0000-000000000000',
  correlation_id: null,
  external_id: 'ext-1',
  effective: '2026-03-04',
  description: 'rent',
  metadata: '{"kind":"rent"}',
  void_of: null,
  voided_by: null,
  input_fingerprint: null,
  first_entry_seq: 11,
  entry_count: 2,
  exceptions: null,
  version: 1,
  created: '2026-03-04T10:00:00.000Z',
  modified: '2026-03-04T10:00:00.000Z',
} as TransactionRow;

function entryRow(overrides: Partial<EntryRow> = {}): EntryRow {
  return {
    seq: 11,
    entry_id: 'e0000000-0000-4000-8000-000000000001',
    transaction_id: transaction.transaction_id,
    account_id: 'a0000000-0000-4000-8000-000000000001',
    journal_id: transaction.journal_id,
    sequence: 1,
    entry_type: 'RENT_DR',
    layer: 'SETTLED',
    direction: 'DEBIT',
    units: '12.50',
    currency: 'USD',
    description: null,
    metadata: '{"region":"eu","tags":["a","b"],"n":3}',
    created: '2026-03-04T10:00:00.000Z',
    parent_account_ids: '["5e700000-0000-4000-8000-000000000001"]',
    balance_version: 1,
    balance_after: null,
    set_links: null,
    account_prev: null,
    ...overrides,
  };
}

/** The value of `expression` with documents built as contextOf builds them, or the failure's text. */
function run(expression: string, docs: 'whole' | 'partial', row: EntryRow): unknown {
  const read = reads(expression);
  const vars: Record<string, unknown> = {};
  if (docs === 'whole' || read === null) {
    vars.entry = entryDocument(row, transaction);
    vars.transaction = transactionDocument(transaction);
  } else {
    for (const [name, fields] of read) {
      if (name === 'entry')
        vars.entry = fields === null ? entryDocument(row, transaction) : entryFields(row, transaction, fields);
      if (name === 'transaction') vars.transaction = transactionDocument(transaction);
    }
  }
  try {
    return cel.compile(expression)({ context: { vars } });
  } catch (error) {
    return `failed: ${(error as Error).message}`;
  }
}

describe('what expressions read of context.vars', () => {
  it('names the fields of each var a chain of selects reads', () => {
    expect(shown(reads('context.vars.entry.layer'))).toEqual({ entry: ['layer'] });
    expect(
      shown(
        reads(
          'context.vars.entry.metadata.region + context.vars.transaction.effective',
          'has(context.vars.entry.units)',
        ),
      ),
    ).toEqual({
      entry: ['metadata', 'units'],
      transaction: ['effective'],
    });
    expect(shown(reads('context.vars.entry.?metadata.orValue({})'))).toEqual({ entry: ['metadata'] });
    expect(shown(reads('"USD"'))).toEqual({});
  });

  it('takes a var whole where it is read whole, and the whole context where context is read any other way', () => {
    expect(shown(reads('string(context.vars.entry)', 'context.vars.entry.layer'))).toEqual({ entry: null });
    // Whether a var is there: it is built, so it is (and one nobody builds is not, as before).
    expect(shown(reads('has(context.vars.entry) && !has(context.vars.foo)'))).toEqual({ entry: null, foo: null });
    expect(reads('context.vars["entry"].layer')).toBeNull();
    expect(reads('size(context.vars)')).toBeNull();
    expect(reads('context.vars.?entry.layer')).toBeNull();
    // A comprehension variable named context: conservatively the whole context.
    expect(reads('[1].exists(context, context == 1) && context.vars.entry.layer == "SETTLED"')).toBeNull();
  });

  it('walks a chain thousands of terms deep, and reads everything where it meets what it does not know', () => {
    expect(shown(reads(`context.vars.entry.sequence${'+1'.repeat(2000)}`))).toEqual({ entry: ['sequence'] });
    expect(shown(reads(`1${'+1'.repeat(1800)} + size(context.vars.entry.layer)`))).toEqual({ entry: ['layer'] });
    // No parsed tree, or a node kind whose parts are not where the walk looks: not narrowed.
    expect(varsRead([undefined])).toBeNull();
    expect(varsRead([{ op: '+', args: { left: ast('context.vars.entry.layer') } }])).toBeNull();
  });

  it('unites the reads of several definitions, the whole winning', () => {
    expect(
      shown(
        unionReads(
          reads('context.vars.entry.layer'),
          reads('context.vars.entry.currency', 'context.vars.account.code'),
        ),
      ),
    ).toEqual({
      entry: ['currency', 'layer'],
      account: ['code'],
    });
    expect(shown(unionReads(reads('context.vars.entry.layer'), reads('string(context.vars.entry)')))).toEqual({
      entry: null,
    });
    expect(unionReads(reads('context.vars.entry.layer'), reads('size(context.vars)'))).toBeNull();
  });
});

describe('partial entry documents', () => {
  const expressions = [
    'context.vars.entry.layer',
    'context.vars.entry.units',
    'context.vars.entry.amount',
    'context.vars.entry.sequence',
    'context.vars.entry.created',
    'context.vars.entry.parent_account_ids',
    'context.vars.entry.metadata.region',
    'context.vars.entry.metadata.tags[1]',
    'has(context.vars.entry.metadata)',
    'has(context.vars.entry.metadata.region)',
    'context.vars.entry.?metadata.region.orValue("none")',
    'context.vars.entry.description',
    'context.vars.entry.is_void_entry || context.vars.entry.is_voided_entry',
    'context.vars.entry.no_such_field',
    'has(context.vars.entry.no_such_field)',
    'context.vars.entry.units > decimal("10") ? context.vars.entry.direction : context.vars.entry.entry_type',
    'string(context.vars.entry.amount.decimal()) + context.vars.transaction.effective',
    'context.vars.entry.metadata.n + 1',
    'has(context.vars.entry) && !has(context.vars.account_set)',
  ];
  const rows = [
    entryRow(),
    entryRow({ metadata: null, description: 'a line', parent_account_ids: null, units: '0.000001' }),
  ];

  it('give every expression the value, or the failure, the whole documents give', () => {
    for (const row of rows) {
      for (const expression of expressions) {
        expect(run(expression, 'partial', row), `${expression} on ${row.metadata ?? 'no metadata'}`).toEqual(
          run(expression, 'whole', row),
        );
      }
    }
    // The comparison can fail: a missing field fails, as it does on the whole document.
    expect(run('context.vars.entry.metadata.region', 'partial', rows[1]!)).toMatch(/^failed:/);
    expect(run('context.vars.entry.layer', 'partial', rows[0]!)).toBe('SETTLED');
  });

  it('hold only the fields named', () => {
    expect(Object.keys(entryFields(entryRow(), transaction, new Set(['layer', 'metadata', 'no_such_field'])))).toEqual([
      'layer',
      'metadata',
    ]);
    expect(Object.keys(entryFields(entryRow({ metadata: null }), transaction, new Set(['metadata'])))).toEqual([]);
  });
});
