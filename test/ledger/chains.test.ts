import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { createAccount } from '../helpers/ledger.js';
import { id, newEngine, ok } from '../helpers/engine.js';
import { UNDO_MIGRATION_18 } from '../helpers/migrations.js';
import { MIGRATIONS } from '../../src/storage/migrations.js';

// An account's entries are read through its chains (migration 18): one per balance record
// (journal, currency), each entry linking to the record's previous one, with a mark every 64th.
// No index holds entries by account. These tests read an account's entries every way there is —
// oldest first and newest first, whole and by journal, currency or both, in pages of every size,
// from cursors anywhere — as balance history and as of past times, and check each against the
// entries table itself (the oracle: a scan, which only a test may make).

const JOURNAL_2 = id(77);
let engine: Engine;
let clock: ManualClock;
let path: string;

beforeEach(async () => {
  path = join(mkdtempSync(join(tmpdir(), 'tally-chains-')), 'ledger.db');
  clock = new ManualClock('2026-03-01T10:00:00.000Z');
  engine = await newEngine({ path, clock });
  ok(engine, `mutation { createJournal(input: {journalId: "${JOURNAL_2}", name: "second"}) { journalId } }`);
  ok(engine, `mutation($input: TranCodeInput!) { createTranCode(input: $input) { version } }`, {
    input: {
      tranCodeId: id(9100),
      code: 'MOVE',
      params: [
        { name: 'from', type: 'UUID' },
        { name: 'to', type: 'UUID' },
        { name: 'amount', type: 'DECIMAL' },
        { name: 'currency', type: 'STRING' },
        { name: 'journal', type: 'UUID' },
      ],
      transaction: { effective: 'date.Today()', journalId: 'params.journal' },
      entries: [
        {
          accountId: 'params.from',
          units: 'params.amount',
          currency: 'params.currency',
          direction: 'DEBIT',
          layer: "'SETTLED'",
        },
        {
          accountId: 'params.to',
          units: 'params.amount',
          currency: 'params.currency',
          direction: 'CREDIT',
          layer: "'SETTLED'",
        },
      ],
    },
  });
  for (const n of [1, 2, 3]) createAccount(engine, n, n === 1 ? { normalBalanceType: 'DEBIT' } : {});
});

const JOURNALS = ['00000000-0000-0000-0000-000000000000', JOURNAL_2];
const CURRENCIES = ['USD', 'EUR', 'JPY'];

/** `count` postings from `from` on: account 2 takes most, in two journals and three currencies, some debited to 3. */
function post(e: Engine, from: number, count: number): void {
  for (let n = from; n < from + count; n++) {
    const journal = JOURNALS[n % 5 === 0 ? 1 : 0]!;
    const currency = CURRENCIES[n % 7 === 0 ? 2 : n % 3 === 0 ? 1 : 0]!;
    const [a, b] = n % 4 === 0 ? [id(2), id(3)] : [id(1), id(2)];
    ok(e, `mutation($input: TransactionInput!) { postTransaction(input: $input) { transactionId } }`, {
      input: {
        transactionId: id(10_000 + n),
        tranCode: 'MOVE',
        params: { from: a, to: b, amount: `${n}.25`, currency, journal },
      },
    });
    clock.advance(1000);
  }
}

/** The account's entries as the entries table has them, oldest first. */
function oracle(e: Engine, account: string, filter: { journal?: string; currency?: string } = {}): string[] {
  return (
    e.db
      .prepare('SELECT entry_id, journal_id, currency FROM entries WHERE account_id = ? ORDER BY seq')
      .all(account) as Array<{ entry_id: string; journal_id: string; currency: string }>
  )
    .filter(
      (r) =>
        (!filter.journal || r.journal_id === filter.journal) && (!filter.currency || r.currency === filter.currency),
    )
    .map((r) => r.entry_id);
}

/** Every page of `entries(where: …)` (oldest first) from a cursor (or the start). */
function listed(
  e: Engine,
  account: string,
  pageSize: number,
  filter: { journal?: string; currency?: string } = {},
  after: string | null = null,
): string[] {
  const out: string[] = [];
  const where = [
    `accountId: "${account}"`,
    filter.journal ? `journalId: "${filter.journal}"` : '',
    filter.currency ? `currency: "${filter.currency}"` : '',
  ]
    .filter(Boolean)
    .join(', ');
  for (;;) {
    const page: {
      edges: Array<{ cursor: string; node: { entryId: string } }>;
      pageInfo: { hasNextPage: boolean; endCursor: string };
    } = ok(
      e,
      `query($after: String) { entries(first: ${pageSize}, after: $after, where: {${where}}) { edges { cursor node { entryId } } pageInfo { hasNextPage endCursor } } }`,
      { after },
    ).entries;
    out.push(...page.edges.map((edge) => edge.node.entryId));
    if (!page.pageInfo.hasNextPage) return out;
    after = page.pageInfo.endCursor;
  }
}

/** Every page of Balance.entries (newest first) of one record. */
function behindBalance(e: Engine, account: string, journal: string, currency: string, pageSize: number): string[] {
  const out: string[] = [];
  let after: string | null = null;
  for (;;) {
    const page: { nodes: Array<{ entryId: string }>; pageInfo: { hasNextPage: boolean; endCursor: string } } = ok(
      e,
      `query($after: String) { account(id: "${account}") { balance(journalId: "${journal}", currency: "${currency}") { entries(first: ${pageSize}, after: $after) { nodes { entryId } pageInfo { hasNextPage endCursor } } } } }`,
      { after },
    ).account.balance.entries;
    out.push(...page.nodes.map((n) => n.entryId));
    if (!page.pageInfo.hasNextPage) return out;
    after = page.pageInfo.endCursor;
  }
}

/** Every read of account 2's entries agrees with the entries table. */
function checkReads(e: Engine): void {
  const account = id(2);
  expect(listed(e, account, 7)).toEqual(oracle(e, account));
  expect(listed(e, account, 100)).toEqual(oracle(e, account));
  expect(listed(e, account, 1, { journal: JOURNALS[1] })).toEqual(oracle(e, account, { journal: JOURNALS[1] }));
  for (const currency of CURRENCIES)
    expect(listed(e, account, 13, { currency })).toEqual(oracle(e, account, { currency }));
  for (const journal of JOURNALS) {
    for (const currency of CURRENCIES) {
      const expected = oracle(e, account, { journal, currency });
      expect(listed(e, account, 9, { journal, currency })).toEqual(expected);
      if (expected.length > 0)
        expect(behindBalance(e, account, journal, currency, 11)).toEqual([...expected].reverse());
    }
  }
  // From a cursor in the middle of a long chain (past marks): the rest, in order.
  const all = listed(e, account, 50);
  const edges = ok(e, `{ entries(first: 100, where: {accountId: "${account}"}) { edges { cursor node { entryId } } } }`)
    .entries.edges as Array<{ cursor: string }>;
  const middle = edges[61]!.cursor;
  expect(listed(e, account, 17, {}, middle)).toEqual(all.slice(62));
}

describe('an account’s chains', () => {
  it('list an account’s entries oldest first and newest first, whole and by journal and currency, in pages, exactly as posted', () => {
    post(engine, 1, 330);
    // The USD chain of the default journal is longer than several marks' spacing.
    expect(oracle(engine, id(2), { journal: JOURNALS[0], currency: 'USD' }).length).toBeGreaterThanOrEqual(150);
    const marks = engine.db.prepare('SELECT count(*) AS n FROM entry_marks WHERE account_id = ?').get(id(2)) as {
      n: number;
    };
    expect(marks.n).toBeGreaterThanOrEqual(3);
    checkReads(engine);
    // A set is listed through AccountSet.entries; as an account filter it has no entries of its own.
    ok(engine, `mutation { createAccountSet(input: {accountSetId: "${id(50)}", name: "S"}) { version } }`);
    ok(
      engine,
      `mutation { addToAccountSet(id: "${id(50)}", member: {memberType: ACCOUNT, memberId: "${id(2)}"}) { version } }`,
    );
    post(engine, 331, 10);
    expect(listed(engine, id(50), 10)).toEqual([]);
    expect(listed(engine, id(999), 10)).toEqual([]);
  });

  it('the balance history and the balance as of a past time read the record’s own chain', () => {
    post(engine, 1, 200);
    const history = (journal: string, currency: string) => {
      const out: Array<{ version: number; units: string }> = [];
      let after: string | null = null;
      for (;;) {
        const page: {
          nodes: Array<{ version: number; settled: { normalBalance: { units: string } } }>;
          pageInfo: { hasNextPage: boolean; endCursor: string };
        } = ok(
          engine,
          `query($after: String) { account(id: "${id(2)}") { balance(journalId: "${journal}", currency: "${currency}") { history(first: 8, after: $after) { nodes { version settled { normalBalance { units } } } pageInfo { hasNextPage endCursor } } } } }`,
          { after },
        ).account.balance.history;
        out.push(...page.nodes.map((n) => ({ version: n.version, units: n.settled.normalBalance.units })));
        if (!page.pageInfo.hasNextPage) return out;
        after = page.pageInfo.endCursor;
      }
    };
    for (const journal of JOURNALS) {
      for (const currency of CURRENCIES) {
        const rows = engine.db
          .prepare(
            'SELECT balance_version AS version, balance_after AS after, created FROM entries WHERE account_id = ? AND journal_id = ? AND currency = ? ORDER BY seq DESC',
          )
          .all(id(2), journal, currency) as Array<{ version: number; after: string; created: string }>;
        // Account 2 is credit-normal: its balance is credits − debits (the entries' snapshots, exact).
        const units = (after: string) => {
          const [dr, cr] = after.split(' ').map((x) => Number(x));
          return String(cr! - dr!);
        };
        const versions = rows.map((r) => ({ version: r.version, units: units(r.after) }));
        const read = history(journal, currency).map((v) => ({ version: v.version, units: String(Number(v.units)) }));
        expect(read).toEqual(versions);
        for (const [i, r] of rows.entries()) {
          if (i % 5 !== 0) continue;
          const at = new Date(Date.parse(r.created) + 500).toISOString();
          const asOf = ok(
            engine,
            `{ account(id: "${id(2)}") { balance(journalId: "${journal}", currency: "${currency}", asOf: "${at}") { version } } }`,
          ).account.balance;
          expect(asOf.version).toBe(r.version);
        }
      }
    }
  });

  it('an account with entries in more journals and currencies than pageSizeMax is listed one of them at a time', async () => {
    const small = await newEngine({ limits: { pageSizeMax: 3 } });
    ok(small, `mutation($input: TranCodeInput!) { createTranCode(input: $input) { version } }`, {
      input: {
        tranCodeId: id(9100),
        code: 'MOVE',
        params: [
          { name: 'from', type: 'UUID' },
          { name: 'to', type: 'UUID' },
          { name: 'currency', type: 'STRING' },
        ],
        transaction: { effective: 'date.Today()' },
        entries: [
          {
            accountId: 'params.from',
            units: "'1'",
            currency: 'params.currency',
            direction: 'DEBIT',
            layer: "'SETTLED'",
          },
          {
            accountId: 'params.to',
            units: "'1'",
            currency: 'params.currency',
            direction: 'CREDIT',
            layer: "'SETTLED'",
          },
        ],
      },
    });
    createAccount(small, 1);
    createAccount(small, 2);
    for (const [n, currency] of ['USD', 'EUR', 'GBP', 'CHF'].entries()) {
      ok(
        small,
        `mutation { postTransaction(input: {transactionId: "${id(500 + n)}", tranCode: "MOVE", params: {from: "${id(1)}", to: "${id(2)}", currency: "${currency}"}}) { transactionId } }`,
      );
    }
    const refused = small.graphql(`{ entries(first: 3, where: {accountId: "${id(2)}"}) { nodes { currency } } }`)
      .errors![0]!;
    expect(refused.extensions).toMatchObject({ code: 'LIMIT_EXCEEDED', details: { pageSizeMax: 3 } });
    expect(refused.message).toContain('entries in more than pageSizeMax (3) journals and currencies');
    expect(
      ok(small, `{ entries(first: 3, where: {accountId: "${id(2)}", currency: "GBP"}) { nodes { currency } } }`).entries
        .nodes,
    ).toEqual([{ currency: 'GBP' }]);
    small.close();
  });

  it('a database of schema 17 (entries by account in an index) is migrated: chains and marks for every account, every read the same, and postings continue them', async () => {
    post(engine, 1, 260);
    checkReads(engine);
    const prevs = engine.db.prepare('SELECT seq, account_prev FROM entries ORDER BY seq').all();
    const heads = engine.db
      .prepare('SELECT account_id, journal_id, currency, log_head, log_count FROM balances ORDER BY 1, 2, 3')
      .all();
    const marks = engine.db.prepare('SELECT * FROM entry_marks ORDER BY 1, 2, 3, 4').all();
    expect(marks.length).toBeGreaterThanOrEqual(2);
    engine.db.exec(`${UNDO_MIGRATION_18} PRAGMA user_version = 17;`);
    expect(
      engine.db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name = 'entries_by_account'").get(),
    ).toEqual({ n: 1 });
    engine.close();
    engine = await newEngine({ path, clock });
    expect(engine.db.pragma('user_version', { simple: true })).toBe(MIGRATIONS.at(-1)!.version);
    expect(
      engine.db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name = 'entries_by_account'").get(),
    ).toEqual({ n: 0 });
    // The links, heads and marks the postings had written, rebuilt from the entries alone (these
    // postings put one entry on a record each, so a posting's mark falls on the 64th entry, where
    // the migration puts it; a posting that passes a multiple with several entries marks its last).
    expect(engine.db.prepare('SELECT seq, account_prev FROM entries ORDER BY seq').all()).toEqual(prevs);
    expect(
      engine.db
        .prepare('SELECT account_id, journal_id, currency, log_head, log_count FROM balances ORDER BY 1, 2, 3')
        .all(),
    ).toEqual(heads);
    expect(engine.db.prepare('SELECT * FROM entry_marks ORDER BY 1, 2, 3, 4').all()).toEqual(marks);
    checkReads(engine);
    post(engine, 261, 80);
    checkReads(engine);
  });
});
