import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { createAccount, createTransferCode, POST } from '../helpers/ledger.js';
import { id, newEngine, ok } from '../helpers/engine.js';
import { UNDO_MIGRATION_17, UNDO_MIGRATION_18, UNDO_MIGRATIONS_AFTER_15 } from '../helpers/migrations.js';
import { MIGRATIONS } from '../../src/storage/migrations.js';

// A set's entries are chained per balance record through the entries' links (migrations 16, 17). These tests
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
  ok(
    engine,
    `mutation { createAccountSet(input: {accountSetId: "${SET}", name: "S", accountSetIds: ["${TOP}"]}) { version } }`,
  );
  for (const n of [2, 3])
    ok(
      engine,
      `mutation { addToAccountSet(id: "${SET}", member: {memberType: ACCOUNT, memberId: "${id(n)}"}) { version } }`,
    );
});

const setBalance = (e: Engine, currency: string) =>
  ok(
    e,
    `{ accountSet(id: "${SET}") { balance(currency: "${currency}") { version settled { normalBalance { units } } } } }`,
  ).accountSet.balance;

/**
 * `count` postings: mostly 1 → 2 in USD (one row into the set), every third in EUR, every fifth
 * 3 → 2 (both accounts in the set: two rows in one posting, one balance version).
 */
function postMany(e: Engine, from: number, count: number): void {
  for (let n = from; n < from + count; n++) {
    const currency = n % 3 === 0 ? 'EUR' : 'USD';
    const source = n % 5 === 0 ? id(3) : id(1);
    ok(e, POST, {
      input: {
        transactionId: id(10_000 + n),
        tranCode: 'TRANSFER',
        params: { from: source, to: id(2), amount: `${n}`, currency },
      },
    });
    const after = setBalance(e, currency);
    (seen[currency] ??= []).push({
      at: clock.now().toISOString(),
      version: after.version,
      units: after.settled.normalBalance.units,
    });
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
    const page: {
      nodes: Array<{ version: number; settled: { normalBalance: { units: string } } }>;
      pageInfo: { hasNextPage: boolean; endCursor: string };
    } = ok(
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
  ok(
    e,
    `{ accountSet(id: "${SET}") { balance(currency: "${currency}", asOf: "${at}") { version settled { normalBalance { units } } } } }`,
  ).accountSet.balance;

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
    expect(asOf(e, currency, '2026-03-01T09:00:00.000Z')).toEqual({
      version: 0,
      settled: { normalBalance: { units: '0' } },
    });
  }
}

describe('a set’s entry log', () => {
  it('lists, pages, and reads history and as-of balances exactly, across chains with marks', () => {
    postMany(engine, 1, 240);
    // The USD chain is longer than two marks' spacing: reads that start in the past seek from marks.
    const marks = engine.db
      .prepare(
        'SELECT currency, count(*) AS n FROM entry_marks WHERE account_id = ? GROUP BY currency ORDER BY currency',
      )
      .all(SET);
    // One mark per 64 rows of a chain (a posting's two rows cross a multiple at most once).
    const rows = (c: string) => expectedEntries(engine, c).length;
    expect(rows('USD')).toBeGreaterThan(128);
    expect(marks).toEqual([
      { currency: 'EUR', n: Math.floor(rows('EUR') / 64) },
      { currency: 'USD', n: Math.floor(rows('USD') / 64) },
    ]);
    // The top set above it has chains of its own, through the same entries.
    expect(engine.db.prepare('SELECT count(*) AS n FROM entries WHERE set_links -> ? IS NOT NULL').get(TOP)).toEqual({
      n: expectedEntries(engine).length,
    });
    checkReads(engine);
  });

  it('a posting links each entry into the chain of every set above it, in seq order, each link pointing to its record’s previous entry', () => {
    postMany(engine, 1, 30);
    const rows = engine.db
      .prepare(
        `SELECT seq, set_links -> ? ->> 0 AS prev_seq, currency FROM entries WHERE set_links -> ? IS NOT NULL ORDER BY seq`,
      )
      .all(SET, SET) as Array<{ seq: number; prev_seq: number | null; currency: string }>;
    expect(rows.length).toBe(expectedEntries(engine).length);
    const last: Record<string, number | null> = {};
    for (const row of rows) {
      expect(row.prev_seq).toBe(last[row.currency] ?? null);
      last[row.currency] = row.seq;
    }
    const heads = engine.db
      .prepare('SELECT currency, log_head, log_count FROM balances WHERE account_id = ? ORDER BY currency')
      .all(SET);
    expect(heads).toEqual(
      ['EUR', 'USD'].map((c) => ({
        currency: c,
        log_head: last[c],
        log_count: rows.filter((r) => r.currency === c).length,
      })),
    );
  });

  it('a database from before the log (schema 15, set_entries) is migrated: every read the same, and postings continue the chains', async () => {
    postMany(engine, 1, 150);
    checkReads(engine);
    // What schema 15 kept: set_entries keyed by (set, seq), no log, no marks, no heads.
    engine.db.exec(`${UNDO_MIGRATIONS_AFTER_15} PRAGMA user_version = 15;`);
    engine.close();
    engine = await newEngine({ path, clock });
    expect(engine.db.pragma('user_version', { simple: true })).toBe(MIGRATIONS.at(-1)!.version);
    checkReads(engine);
    postMany(engine, 151, 60);
    checkReads(engine);
  });

  it('a database of schema 16 (a row per entry and set in set_entry_log) is migrated: the links in the entries, every read the same, and postings continue the chains', async () => {
    postMany(engine, 1, 150);
    checkReads(engine);
    const links = engine.db
      .prepare('SELECT seq, set_links FROM entries WHERE set_links IS NOT NULL ORDER BY seq')
      .all() as Array<{ seq: number; set_links: string }>;
    engine.db.exec(`${UNDO_MIGRATION_18}${UNDO_MIGRATION_17} PRAGMA user_version = 16;`);
    expect(engine.db.prepare('SELECT count(*) AS n FROM set_entry_log').get()).toEqual({
      n: links.reduce((n, l) => n + Object.keys(JSON.parse(l.set_links)).length, 0),
    });
    engine.close();
    engine = await newEngine({ path, clock });
    expect(engine.db.pragma('user_version', { simple: true })).toBe(MIGRATIONS.at(-1)!.version);
    expect(engine.db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name = 'set_entry_log'").get()).toEqual({
      n: 0,
    });
    // Every entry's links as the posting wrote them (the same members; the migration writes them in its own order).
    const migrated = engine.db
      .prepare('SELECT seq, set_links FROM entries WHERE set_links IS NOT NULL ORDER BY seq')
      .all() as Array<{ seq: number; set_links: string }>;
    expect(migrated.map((l) => ({ seq: l.seq, links: JSON.parse(l.set_links) }))).toEqual(
      links.map((l) => ({ seq: l.seq, links: JSON.parse(l.set_links) })),
    );
    checkReads(engine);
    postMany(engine, 151, 60);
    checkReads(engine);
    expect(chainProblems(engine)).toEqual([]);
  });

  it('deleting a set forgets its chains (marks and heads), leaves the sets above whole, and a set made again with its id starts new ones', () => {
    postMany(engine, 1, 140);
    const topLinks = engine.db
      .prepare('SELECT seq, set_links -> ? AS link FROM entries WHERE set_links -> ? IS NOT NULL ORDER BY seq')
      .all(TOP, TOP);
    const old = expectedEntries(engine);
    for (const n of [2, 3])
      ok(
        engine,
        `mutation { removeFromAccountSet(id: "${SET}", member: {memberType: ACCOUNT, memberId: "${id(n)}"}) { version } }`,
      );
    ok(engine, `mutation { deleteAccountSet(id: "${SET}") { accountSetId } }`);
    expect(engine.db.prepare('SELECT count(*) AS n FROM entry_marks WHERE account_id = ?').get(SET)).toEqual({ n: 0 });
    expect(engine.db.prepare('SELECT count(*) AS n FROM balances WHERE account_id = ?').get(SET)).toEqual({ n: 0 });
    expect(
      engine.db
        .prepare('SELECT seq, set_links -> ? AS link FROM entries WHERE set_links -> ? IS NOT NULL ORDER BY seq')
        .all(TOP, TOP),
    ).toEqual(topLinks);
    // The same id again, holding account 2 only: its entries are the new ones, none of the old set's.
    ok(engine, `mutation { createAccountSet(input: {accountSetId: "${SET}", name: "S again"}) { version } }`);
    ok(
      engine,
      `mutation { addToAccountSet(id: "${SET}", member: {memberType: ACCOUNT, memberId: "${id(2)}"}) { version } }`,
    );
    const fresh: string[] = [];
    for (let n = 1; n <= 70; n++) {
      ok(engine, POST, {
        input: {
          transactionId: id(60_000 + n),
          tranCode: 'TRANSFER',
          params: { from: id(1), to: id(2), amount: '1', currency: 'USD' },
        },
      });
      fresh.unshift(
        engine.db
          .prepare('SELECT entry_id FROM entries WHERE account_id = ? ORDER BY seq DESC LIMIT 1')
          .pluck()
          .get(id(2)) as string,
      );
    }
    expect(listed(engine, 9)).toEqual(fresh);
    expect(fresh.some((e) => old.includes(e))).toBe(false);
    // Version 1 took account 2's balance as it joined; then one version a posting.
    const account2 = ok(
      engine,
      `{ account(id: "${id(2)}") { balance(currency: "USD") { settled { normalBalance { units } } } } }`,
    ).account.balance.settled;
    expect(setBalance(engine, 'USD')).toEqual({ version: 71, settled: account2 });
    // History lists the versions its entries left (the member's arrival is no entry of the set).
    expect(history(engine, 'USD', 8).map((v) => v.version)).toEqual(Array.from({ length: 70 }, (_, i) => 71 - i));
  });

  it('a calculation attached to the set backfills from its log, in posting order, past one read chunk', () => {
    // 3 → 2 only: two rows per posting, 1 040 rows (the backfill reads 1 000 at a time).
    for (let n = 1; n <= 520; n++) {
      ok(engine, POST, {
        input: {
          transactionId: id(20_000 + n),
          tranCode: 'TRANSFER',
          params: { from: id(3), to: id(2), amount: `${n}.5`, currency: 'USD' },
        },
      });
    }
    ok(
      engine,
      `mutation { createCalculation(input: {calculationId: "${id(70)}", code: "BY_ACCOUNT", description: "per direction", scope: LOCAL,
      dimensions: [{alias: "direction", value: "context.vars.entry.direction"}]}) { calculationId } }`,
    );
    ok(
      engine,
      `mutation { attachCalculation(input: {calculationId: "${id(70)}", accountId: "${SET}"}) { calculationId } }`,
    );
    const read = (direction: string) =>
      ok(
        engine,
        `{ balance(accountId: "${SET}", calculationId: "${id(70)}", dimension: {direction: "${direction}"}) { settled { drBalance { units } crBalance { units } } } }`,
      ).balance.settled;
    const total = (520 * 521) / 2 + 520 * 0.5; // exact in a double: 135 720
    expect(read('DEBIT')).toEqual({ drBalance: { units: `${total}.0` }, crBalance: { units: '0' } });
    expect(read('CREDIT')).toEqual({ drBalance: { units: '0' }, crBalance: { units: `${total}.0` } });
  });
});

/**
 * Every chain whole, of accounts and of sets: each entry's link points to the previous entry of
 * its record, the record holds the newest and the count, and every mark is an entry of its chain.
 */
function chainProblems(e: Engine): string[] {
  const links = e.db
    .prepare(`SELECT seq, account_id AS owner, account_prev AS prev, journal_id AS journal, currency FROM entries
      UNION ALL SELECT e.seq, l.key, l.value ->> 0, e.journal_id, e.currency FROM entries e, json_each(e.set_links) l WHERE e.set_links IS NOT NULL
      ORDER BY 1`)
    .all() as Array<{ seq: number; owner: string; prev: number | null; journal: string; currency: string }>;
  const problems: string[] = [];
  const chains = new Map<string, { head: number; count: number; seqs: Set<number> }>();
  for (const link of links) {
    const key = `${link.owner} ${link.journal} ${link.currency}`;
    const chain = chains.get(key);
    if (link.prev !== (chain?.head ?? null))
      problems.push(`entry ${link.seq} of ${key} points to ${link.prev}, not ${chain?.head ?? null}`);
    const seqs = chain?.seqs ?? new Set<number>();
    seqs.add(link.seq);
    chains.set(key, { head: link.seq, count: (chain?.count ?? 0) + 1, seqs });
  }
  for (const [key, { head, count }] of chains) {
    const [owner, journal, currency] = key.split(' ');
    const record = e.db
      .prepare('SELECT log_head, log_count FROM balances WHERE account_id = ? AND journal_id = ? AND currency = ?')
      .get(owner, journal, currency);
    if (JSON.stringify(record) !== JSON.stringify({ log_head: head, log_count: count }))
      problems.push(`${key} holds ${JSON.stringify(record)}, not head ${head} of ${count}`);
  }
  const marks = e.db.prepare('SELECT account_id, journal_id, currency, seq FROM entry_marks').all() as Array<{
    account_id: string;
    journal_id: string;
    currency: string;
    seq: number;
  }>;
  for (const m of marks)
    if (!chains.get(`${m.account_id} ${m.journal_id} ${m.currency}`)?.seqs.has(m.seq))
      problems.push(`mark ${m.seq} of ${m.account_id} is no entry of its chain`);
  return problems;
}

describe('a set’s entry log under every write path', () => {
  it('random postings in three currencies, voids, members moving in and out, and refused postings keep every chain whole', () => {
    const OTHER = id(52);
    ok(engine, `mutation { createAccountSet(input: {accountSetId: "${OTHER}", name: "O"}) { version } }`);
    createAccount(engine, 4);
    ok(
      engine,
      `mutation { addToAccountSet(id: "${OTHER}", member: {memberType: ACCOUNT, memberId: "${id(4)}"}) { version } }`,
    );
    // Account 2 is in SET (under TOP) and directly in TOP too: its entries reach TOP twice over.
    ok(
      engine,
      `mutation { addToAccountSet(id: "${TOP}", member: {memberType: ACCOUNT, memberId: "${id(2)}"}) { version } }`,
    );
    // A REJECT control on OTHER refuses postings that take it past 5: the refused posting's log rows roll back with it.
    ok(
      engine,
      `mutation { createVelocityLimit(input: {velocityLimitId: "${id(60)}", name: "l", limit: {balance: [{layer: "SETTLED", amount: "params.amount", normalBalanceType: "DEBIT"}]},
      params: [{name: "amount", type: DECIMAL, default: "0"}]}) { velocityLimitId }
      createVelocityControl(input: {velocityControlId: "${id(61)}", name: "c", enforcement: {action: REJECT}, velocityLimitIds: ["${id(60)}"]}) { velocityControlId }
      attachVelocityControl(velocityControlId: "${id(61)}", accountId: "${OTHER}", params: {amount: "5"}) { accountId } }`,
    );
    let seed = 11;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    const pick = <T>(list: readonly T[]) => list[Math.floor(random() * list.length)]!;
    const accounts = [id(1), id(2), id(3), id(4)];
    const posted: string[] = [];
    const outcomes = { posted: 0, refused: 0, voided: 0, moved: 0 };
    for (let n = 0; n < 500; n++) {
      const r = random();
      if (r < 0.05) {
        const member = pick(accounts.slice(1));
        const set = pick([SET, TOP, OTHER]);
        const added = engine.graphql(
          `mutation { addToAccountSet(id: "${set}", member: {memberType: ACCOUNT, memberId: "${member}"}) { version } }`,
        );
        if (added.errors)
          engine.graphql(
            `mutation { removeFromAccountSet(id: "${set}", member: {memberType: ACCOUNT, memberId: "${member}"}) { version } }`,
          );
        outcomes.moved++;
      } else if (r < 0.12 && posted.length > 0) {
        const voided = engine.graphql(
          `mutation { voidTransaction(id: "${posted.splice(Math.floor(random() * posted.length), 1)[0]}") { transactionId } }`,
        );
        if (!voided.errors) outcomes.voided++;
      } else {
        const from = pick(accounts);
        const to = pick(accounts.filter((a) => a !== from));
        const result = engine.graphql(POST, {
          input: {
            transactionId: id(30_000 + n),
            tranCode: 'TRANSFER',
            params: { from, to, amount: `${1 + Math.floor(random() * 9)}`, currency: pick(['USD', 'EUR', 'GBP']) },
          },
        });
        if (result.errors) outcomes.refused++;
        else outcomes.posted++, posted.push(id(30_000 + n));
      }
    }
    expect(outcomes.refused).toBeGreaterThan(0);
    expect(outcomes.voided).toBeGreaterThan(0);
    expect(chainProblems(engine)).toEqual([]);
    for (const set of [SET, TOP, OTHER]) {
      const expected = (
        engine.db
          .prepare('SELECT entry_id FROM entries WHERE parent_account_ids LIKE ? ORDER BY seq DESC')
          .all(`%${set}%`) as Array<{ entry_id: string }>
      ).map((r) => r.entry_id);
      const out: string[] = [];
      let after: string | null = null;
      for (;;) {
        const page: { nodes: Array<{ entryId: string }>; pageInfo: { hasNextPage: boolean; endCursor: string } } = ok(
          engine,
          `query($after: String) { accountSet(id: "${set}") { entries(first: 7, after: $after) { nodes { entryId } pageInfo { hasNextPage endCursor } } } }`,
          { after },
        ).accountSet.entries;
        out.push(...page.nodes.map((node) => node.entryId));
        if (!page.pageInfo.hasNextPage) break;
        after = page.pageInfo.endCursor;
      }
      expect(out).toEqual(expected);
    }
  });

  it('history pages never list a version twice, even when a page’s read budget ends inside one posting’s entries', async () => {
    const small = await newEngine({ limits: { pageSizeMax: 10 } });
    // Twelve entries a posting: six debits of account 2 and six credits of account 3, both in the set.
    const entries = [];
    for (let i = 0; i < 6; i++) {
      entries.push({
        accountId: 'params.a',
        units: 'params.amount',
        currency: "'USD'",
        direction: 'DEBIT',
        layer: "'SETTLED'",
      });
      entries.push({
        accountId: 'params.b',
        units: 'params.amount',
        currency: "'USD'",
        direction: 'CREDIT',
        layer: "'SETTLED'",
      });
    }
    ok(small, 'mutation($input: TranCodeInput!) { createTranCode(input: $input) { version } }', {
      input: {
        tranCodeId: id(9001),
        code: 'TWELVE',
        params: [
          { name: 'a', type: 'UUID' },
          { name: 'b', type: 'UUID' },
          { name: 'amount', type: 'DECIMAL' },
        ],
        transaction: { effective: 'date.Today()' },
        entries,
      },
    });
    createAccount(small, 2);
    createAccount(small, 3);
    ok(small, `mutation { createAccountSet(input: {accountSetId: "${SET}", name: "S"}) { version } }`);
    for (const n of [2, 3])
      ok(
        small,
        `mutation { addToAccountSet(id: "${SET}", member: {memberType: ACCOUNT, memberId: "${id(n)}"}) { version } }`,
      );
    for (let n = 1; n <= 20; n++)
      ok(small, POST, {
        input: { transactionId: id(40_000 + n), tranCode: 'TWELVE', params: { a: id(2), b: id(3), amount: `${n}` } },
      });
    const versions = (field: string) => {
      const out: number[] = [];
      let after: string | null = null;
      for (;;) {
        type Page = { nodes: Array<{ version: number }>; pageInfo: { hasNextPage: boolean; endCursor: string } };
        const data: Record<string, { balance: { history: Page } }> = ok(
          small,
          `query($after: String) { ${field} { balance(currency: "USD") { history(first: 10, after: $after) { nodes { version } pageInfo { hasNextPage endCursor } } } } }`,
          { after },
        );
        const page: Page = Object.values(data)[0]!.balance.history;
        out.push(...page.nodes.map((node) => node.version));
        if (!page.pageInfo.hasNextPage) return out;
        after = page.pageInfo.endCursor;
      }
    };
    const all = Array.from({ length: 20 }, (_, i) => 20 - i);
    expect(versions(`accountSet(id: "${SET}")`)).toEqual(all);
    expect(versions(`account(id: "${id(2)}")`)).toEqual(all);
    small.close();
  });

  it('a set with entries in more currencies than pageSizeMax is listed one currency at a time', async () => {
    const small = await newEngine({ limits: { pageSizeMax: 3 } });
    createTransferCode(small);
    createAccount(small, 1, { normalBalanceType: 'DEBIT' });
    createAccount(small, 2);
    ok(small, `mutation { createAccountSet(input: {accountSetId: "${SET}", name: "S"}) { version } }`);
    ok(
      small,
      `mutation { addToAccountSet(id: "${SET}", member: {memberType: ACCOUNT, memberId: "${id(2)}"}) { version } }`,
    );
    for (const [n, currency] of ['USD', 'EUR', 'GBP', 'CHF'].entries()) {
      ok(small, POST, {
        input: {
          transactionId: id(50_000 + n),
          tranCode: 'TRANSFER',
          params: { from: id(1), to: id(2), amount: '1', currency },
        },
      });
    }
    const refused = small.graphql(`{ accountSet(id: "${SET}") { entries(first: 3) { nodes { currency } } } }`)
      .errors![0]!;
    expect(refused.extensions).toMatchObject({ code: 'LIMIT_EXCEEDED', details: { pageSizeMax: 3 } });
    expect(refused.message).toContain('entries in more than pageSizeMax (3) currencies');
    expect(
      ok(small, `{ accountSet(id: "${SET}") { entries(first: 3, where: {currency: "CHF"}) { nodes { currency } } } }`)
        .accountSet.entries.nodes,
    ).toEqual([{ currency: 'CHF' }]);
    small.close();
  });
});
