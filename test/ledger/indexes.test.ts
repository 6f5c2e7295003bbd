import { describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { balanceOf, createAccount } from '../helpers/ledger.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';

/** Custom indexes on entries and transactions: maintained inside postings, read through Query.entries / transactions. */

const CREATE_INDEX =
  'mutation($i: CreateIndexInput!) { schema { createIndex(input: $i) { name on unique partition { alias type } sort { alias type sort } } } }';
const DELETE_INDEX = 'mutation($n: String!, $on: IndexOnEnum!) { schema { deleteIndex(name: $n, on: $on) { name } } }';
const POST = 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }';
const VOID = 'mutation($id: UUID!) { voidTransaction(id: $id) { transactionId } }';
const ENTRIES =
  'query($c: CustomIndexFilter!, $first: Int!, $after: String) { entries(first: $first, after: $after, where: { custom: $c }) { nodes { accountId units direction transactionId } pageInfo { hasNextPage endCursor } } }';
const TRANSACTIONS =
  'query($c: CustomIndexFilter!) { transactions(first: 50, where: { custom: $c }) { nodes { transactionId } } }';

const SET = id(50);

async function ledger(options: Parameters<typeof newEngine>[0] = {}): Promise<Engine> {
  const engine = await newEngine(options);
  ok(engine, 'mutation($i: AccountSetInput!) { createAccountSet(input: $i) { accountSetId } }', {
    i: { accountSetId: SET, name: 'clients' },
  });
  createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
  createAccount(engine, 2, { accountSetIds: [SET] });
  createAccount(engine, 3, { accountSetIds: [SET] });
  ok(engine, 'mutation($i: TranCodeInput!) { createTranCode(input: $i) { code } }', {
    i: {
      tranCodeId: id(9000),
      code: 'PAY',
      params: [
        { name: 'to', type: 'UUID' },
        { name: 'amount', type: 'DECIMAL' },
        { name: 'ref', type: 'STRING', default: "''" },
      ],
      transaction: { metadata: "{'ref': params.ref}" },
      entries: [
        { accountId: `'${id(1)}'`, units: 'params.amount', currency: "'USD'", direction: 'DEBIT', layer: 'SETTLED' },
        {
          accountId: 'params.to',
          units: 'params.amount',
          currency: "'USD'",
          direction: 'CREDIT',
          layer: 'SETTLED',
          metadata: "{'ref': params.ref}",
        },
      ],
    },
  });
  return engine;
}

const pay = (engine: Engine, n: number, to: number, amount: string, ref = '') =>
  ok(engine, POST, { i: { transactionId: id(n), tranCode: 'PAY', params: { to: id(to), amount, ref } } });

/** Entries of an account or of any set above it, largest first, without voids. */
const FEED = {
  name: 'feed',
  on: 'Entry',
  partition: [{ alias: 'account', value: 'document.parent_account_ids + [document.account_id]', type: 'UUID' }],
  sort: [{ alias: 'units', value: 'document.units', sort: 'DESC' }],
  constraints: { live: '!document.is_void_entry && !document.is_voided_entry' },
};
const feedOf = (account: string, sort: unknown[] = []) => ({
  index: 'feed',
  partition: [{ alias: 'account', value: { eq: account } }],
  sort,
});

describe('custom indexes', () => {
  it('indexes entries by account and by every set above it (a list partition), keeps them on posting, drops voided ones', async () => {
    const engine = await ledger();
    pay(engine, 100, 2, '10'); // before the index: backfilled
    const created = ok(engine, CREATE_INDEX, { i: FEED }).schema.createIndex;
    expect(created).toEqual({
      name: 'feed',
      on: 'Entry',
      unique: false,
      partition: [{ alias: 'account', type: 'UUID' }],
      sort: [{ alias: 'units', type: 'Decimal', sort: 'DESC' }],
    });
    pay(engine, 101, 3, '250.5');
    pay(engine, 102, 2, '7.25');
    const units = (c: unknown) => ok(engine, ENTRIES, { c, first: 50 }).entries.nodes.map((e: any) => e.units);
    expect(units(feedOf(SET))).toEqual(['250.5', '10', '7.25']);
    expect(units(feedOf(id(2)))).toEqual(['10', '7.25']);
    expect(units(feedOf(id(1)))).toEqual(['250.5', '10', '7.25']);
    expect(units(feedOf(SET, [{ alias: 'units', value: { lte: '10' } }]))).toEqual(['10', '7.25']);

    ok(engine, VOID, { id: id(100) });
    // The void's entries are void entries, the original's are voided now: neither is listed.
    expect(units(feedOf(SET))).toEqual(['250.5', '7.25']);
    expect(units(feedOf(id(1)))).toEqual(['250.5', '7.25']);

    const first = ok(engine, ENTRIES, { c: feedOf(SET), first: 1 }).entries;
    expect(first.pageInfo.hasNextPage).toBe(true);
    const second = ok(engine, ENTRIES, { c: feedOf(SET), first: 1, after: first.pageInfo.endCursor }).entries;
    expect(second.nodes.map((e: any) => e.units)).toEqual(['7.25']);
    expect(second.pageInfo.hasNextPage).toBe(false);

    expect(fails(engine, ENTRIES, { c: { index: 'feed' }, first: 10 }).code).toBe('BAD_REQUEST');
    expect(
      fails(
        engine,
        `query($c: CustomIndexFilter!) { entries(first: 5, where: { custom: $c, accountId: "${id(1)}" }) { nodes { units } } }`,
        { c: feedOf(SET) },
      ).code,
    ).toBe('BAD_REQUEST');
    ok(engine, DELETE_INDEX, { n: 'feed', on: 'Entry' });
    expect(fails(engine, ENTRIES, { c: feedOf(SET), first: 10 }).code).toBe('NOT_FOUND');
    expect(count(engine, 'custom_index_rows')).toBe(0);
  });

  it('indexes transactions with constraints, and a unique index refuses a duplicate key (nothing written)', async () => {
    const engine = await ledger();
    ok(engine, CREATE_INDEX, {
      i: {
        name: 'open',
        on: 'Transaction',
        partition: [{ alias: 'journal', value: 'document.journal_id' }],
        sort: [{ alias: 'at', value: 'document.created', sort: 'ASC' }],
        constraints: { notVoided: "document.voided_by == ''", notAVoid: "document.void_of == ''" },
      },
    });
    ok(engine, CREATE_INDEX, {
      i: {
        name: 'byRef',
        on: 'Entry',
        unique: true,
        partition: [{ alias: 'ref', value: 'document.metadata.ref' }],
        // A void copies the metadata to its reversing entries: they are left out.
        constraints: {
          hasRef: "has(document.metadata) && document.metadata.ref != ''",
          notAVoid: '!document.is_void_entry',
        },
      },
    });
    pay(engine, 100, 2, '1', 'inv-1');
    pay(engine, 101, 2, '2', 'inv-2');
    pay(engine, 102, 3, '3');
    pay(engine, 103, 3, '4');
    const journal = '00000000-0000-0000-0000-000000000000';
    const open = () =>
      ok(engine, TRANSACTIONS, {
        c: { index: 'open', partition: [{ alias: 'journal', value: { eq: journal } }] },
      }).transactions.nodes.map((t: any) => t.transactionId);
    expect(open()).toEqual([id(100), id(101), id(102), id(103)]);
    ok(engine, VOID, { id: id(101) });
    expect(open()).toEqual([id(100), id(102), id(103)]);

    const dup = fails(engine, POST, {
      i: { transactionId: id(104), tranCode: 'PAY', params: { to: id(3), amount: '5', ref: 'inv-1' } },
    });
    expect(dup.code).toBe('ALREADY_EXISTS');
    expect(dup.message).toContain('unique index byRef');
    expect(balanceOf(engine, id(3)).settled.normalBalance.units).toBe('7');
    const byRef = ok(engine, ENTRIES, {
      c: { index: 'byRef', partition: [{ alias: 'ref', value: { eq: 'inv-1' } }] },
      first: 5,
    }).entries.nodes;
    expect(byRef).toEqual([{ accountId: id(2), units: '1', direction: 'CREDIT', transactionId: id(100) }]);
    // A unique index over existing duplicates cannot be created.
    expect(
      fails(engine, CREATE_INDEX, {
        i: { name: 'byAccount', on: 'Entry', unique: true, partition: [{ alias: 'a', value: 'document.account_id' }] },
      }).code,
    ).toBe('ALREADY_EXISTS');
    expect(count(engine, 'custom_indexes')).toBe(2);
    const listed = ok(
      engine,
      '{ schema { indexes(first: 10) { nodes { name on } } index(name: "open", on: Transaction) { constraints } } }',
    ).schema;
    expect(listed.indexes.nodes).toEqual([
      { name: 'byRef', on: 'Entry' },
      { name: 'open', on: 'Transaction' },
    ]);
    expect(listed.index.constraints).toEqual({
      notAVoid: "document.void_of == ''",
      notVoided: "document.voided_by == ''",
    });
  });

  it('refuses bad definitions with clear errors', async () => {
    const engine = await ledger();
    const syntax = fails(engine, CREATE_INDEX, {
      i: { ...FEED, sort: [{ alias: 'units', value: 'document.units +', sort: 'ASC' }] },
    });
    expect(syntax.code).toBe('CEL_ERROR');
    expect(syntax.message).toContain('index feed on Entry sort key units');
    expect(fails(engine, CREATE_INDEX, { i: { ...FEED, partition: [] } }).code).toBe('BAD_REQUEST');
    ok(engine, CREATE_INDEX, { i: FEED });
    expect(fails(engine, CREATE_INDEX, { i: FEED }).code).toBe('ALREADY_EXISTS');
    expect(count(engine, 'custom_indexes')).toBe(1);
  });

  it('limits: indexesMax, indexRowsPerRecordMax, indexBackfillMax', async () => {
    const engine = await ledger({ limits: { indexesMax: 1, indexRowsPerRecordMax: 1, indexBackfillMax: 3 } });
    pay(engine, 100, 2, '1');
    pay(engine, 101, 2, '1'); // four entries exist: more than the backfill allows
    const backfill = fails(engine, CREATE_INDEX, { i: FEED });
    expect(backfill.code).toBe('LIMIT_EXCEEDED');
    expect(backfill.message).toContain('indexBackfillMax (3)');
    expect(count(engine, 'custom_indexes') + count(engine, 'custom_index_rows')).toBe(0);
    ok(engine, CREATE_INDEX, {
      i: { name: 'tx', on: 'Transaction', partition: [{ alias: 'j', value: 'document.journal_id' }] },
    });
    expect(
      fails(engine, CREATE_INDEX, {
        i: { name: 'tx2', on: 'Transaction', partition: [{ alias: 'j', value: 'document.journal_id' }] },
      }).message,
    ).toContain('indexesMax is 1');
    ok(engine, DELETE_INDEX, { n: 'tx', on: 'Transaction' });

    const rows = await ledger({ limits: { indexRowsPerRecordMax: 1 } });
    ok(rows, CREATE_INDEX, { i: FEED });
    const error = fails(rows, POST, {
      i: { transactionId: id(100), tranCode: 'PAY', params: { to: id(2), amount: '1' } },
    });
    expect(error.code).toBe('LIMIT_EXCEEDED');
    expect(error.message).toContain('indexRowsPerRecordMax is 1');
    expect(balanceOf(rows, id(2)).settled.normalBalance.units).toBe('0');
  });

  it('a client without financial.Index can neither create indexes nor read through them', async () => {
    const engine = await ledger();
    ok(engine, CREATE_INDEX, { i: FEED });
    const ledgerOnly = [
      {
        effect: 'ALLOW',
        actions: ['SELECT', 'INSERT', 'UPDATE'],
        resources: [
          'financial.Transaction',
          'financial.Entry',
          'financial.Balance',
          'financial.Account',
          'financial.TranCode',
          'financial.Journal',
        ],
      },
    ];
    ok(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { client { principal } } } }', {
      i: { principal: 'clerk', name: 'clerk', policies: ledgerOnly },
    });
    expect(fails(engine, CREATE_INDEX, { i: { ...FEED, name: 'mine' } }, 'clerk').code).toBe('ACCESS_DENIED');
    expect(fails(engine, ENTRIES, { c: feedOf(SET), first: 5 }, 'clerk').code).toBe('ACCESS_DENIED');
    expect(fails(engine, DELETE_INDEX, { n: 'feed', on: 'Entry' }, 'clerk').code).toBe('ACCESS_DENIED');
    // Its postings are indexed all the same.
    ok(engine, POST, { i: { transactionId: id(100), tranCode: 'PAY', params: { to: id(2), amount: '9' } } }, 'clerk');
    expect(ok(engine, ENTRIES, { c: feedOf(SET), first: 5 }).entries.nodes.map((e: any) => e.units)).toEqual(['9']);
  });
});
