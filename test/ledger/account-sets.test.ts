import { beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';
import { createAccount, createTransferCode, POST } from '../helpers/ledger.js';

let engine: Engine;

const SET = `mutation($i: AccountSetInput!) { createAccountSet(input: $i) { accountSetId code journalId version } }`;
const ADD = `mutation($s: UUID!, $m: AccountSetMemberInput!) { addToAccountSet(id: $s, member: $m) { accountSetId } }`;
const REMOVE = `mutation($s: UUID!, $m: AccountSetMemberInput!) { removeFromAccountSet(id: $s, member: $m) { accountSetId } }`;
const SET_BALANCE = `query($s: UUID!, $c: CurrencyCode) { accountSet(id: $s) { balance(currency: $c) {
  settled { drBalance { units } crBalance { units } normalBalance { units } } pending { normalBalance { units } } available(layer: ENCUMBRANCE) { normalBalance { units } } } } }`;

const set = (n: number, extra: Record<string, unknown> = {}) =>
  ok(engine, SET, { i: { accountSetId: id(n), name: `Set ${n}`, ...extra } }).createAccountSet;
const add = (s: number, member: number, memberType = 'ACCOUNT') =>
  ok(engine, ADD, { s: id(s), m: { memberType, memberId: id(member) } });
const setBalance = (s: number, currency = 'USD') =>
  ok(engine, SET_BALANCE, { s: id(s), c: currency }).accountSet.balance;
const post = (n: number, from: number, to: number, amount: string, extra: Record<string, unknown> = {}) =>
  ok(engine, POST, {
    input: {
      transactionId: id(5000 + n),
      tranCode: 'TRANSFER',
      params: { from: id(from), to: id(to), amount, ...extra },
    },
  });

beforeEach(async () => {
  engine = await newEngine();
  createTransferCode(engine);
  createAccount(engine, 1); // credit-normal wallets
  createAccount(engine, 2);
  createAccount(engine, 3);
  createAccount(engine, 9, { normalBalanceType: 'DEBIT' }); // cash
});

describe('account sets', () => {
  it('roll up their members’ balances as they post, per layer, through nested sets', () => {
    expect(set(100, { code: 'WALLETS' })).toMatchObject({ accountSetId: id(100), code: 'WALLETS', version: 1 });
    set(200, { code: 'ALL' });
    add(100, 1);
    add(100, 2);
    add(200, 100, 'ACCOUNT_SET');
    add(200, 3);
    post(1, 9, 1, '10.00');
    post(2, 9, 2, '5.50');
    post(3, 9, 3, '1', { layer: 'PENDING' });
    post(4, 1, 9, '2.25');
    expect(setBalance(100).settled).toEqual({
      drBalance: { units: '2.25' },
      crBalance: { units: '15.50' },
      normalBalance: { units: '13.25' },
    });
    expect(setBalance(200).settled.normalBalance.units).toBe('13.25');
    expect(setBalance(200).pending.normalBalance.units).toBe('1');
    expect(setBalance(200).available.normalBalance.units).toBe('14.25');
    // Query.balance reads a set by id too, in its own journal.
    expect(
      ok(engine, `{ balance(accountId: "${id(200)}") { settled { normalBalance { units } } } }`).balance.settled
        .normalBalance.units,
    ).toBe('13.25');
  });

  it('record on each entry the sets its account rolled up into, and list a set’s entries newest first', () => {
    set(100);
    set(200, { accountSetIds: [id(100)] }); // 200 inside 100
    add(200, 1);
    post(1, 9, 1, '3');
    post(2, 9, 2, '4');
    const entries = ok(engine, `{ entries(first: 10, where: {accountId: "${id(1)}"}) { nodes { parentAccountIds } } }`)
      .entries.nodes;
    expect(entries).toEqual([{ parentAccountIds: [id(100), id(200)] }]);
    const cash = ok(engine, `{ entries(first: 10, where: {accountId: "${id(9)}"}) { nodes { parentAccountIds } } }`)
      .entries.nodes;
    expect(cash).toEqual([{ parentAccountIds: [] }, { parentAccountIds: [] }]);
    add(100, 2);
    post(3, 9, 2, '6');
    const setEntries = ok(
      engine,
      `{ accountSet(id: "${id(100)}") { entries(first: 10) { nodes { units accountId } } members(first: 10) { nodes { __typename ... on Account { code } ... on AccountSet { name } } } } }`,
    ).accountSet;
    expect(setEntries.entries.nodes).toEqual([
      { units: '6', accountId: id(2) },
      { units: '3', accountId: id(1) },
    ]);
    // The same entries are the ones behind the set's balance.
    const behind = ok(engine, `{ balance(accountId: "${id(100)}") { entries(first: 10) { nodes { units } } } }`).balance
      .entries.nodes;
    expect(behind).toEqual([{ units: '6' }, { units: '3' }]);
    expect(setEntries.members.nodes).toEqual([
      { __typename: 'Account', code: 'ACC-2' },
      { __typename: 'AccountSet', name: 'Set 200' },
    ]); // by member id
    expect(
      ok(engine, `{ account(id: "${id(1)}") { sets(first: 5) { nodes { accountSetId } } } }`).account.sets.nodes,
    ).toEqual([{ accountSetId: id(200) }]);
  });

  it('adding a member brings its balances in; removing takes them out: a set always equals the sum of its members', () => {
    post(1, 9, 1, '7.00');
    set(100);
    set(200);
    add(200, 100, 'ACCOUNT_SET');
    add(100, 1);
    expect(setBalance(100).settled.normalBalance.units).toBe('7.00');
    expect(setBalance(200).settled.normalBalance.units).toBe('7.00');
    ok(engine, REMOVE, { s: id(100), m: { memberType: 'ACCOUNT', memberId: id(1) } });
    expect(setBalance(100).settled.normalBalance.units).toBe('0.00');
    expect(setBalance(200).settled.normalBalance.units).toBe('0.00');
    post(2, 9, 1, '1');
    expect(setBalance(100).settled.normalBalance.units).toBe('0.00');
  });

  it('belong to one journal: they count only its entries and contain only its sets', () => {
    ok(engine, `mutation { createJournal(input: {journalId: "${id(77)}", name: "Second"}) { journalId } }`);
    set(100);
    set(300, { journalId: id(77) });
    add(100, 1);
    add(300, 1);
    ok(engine, `mutation($i: TranCodeInput!) { createTranCode(input: $i) { code } }`, {
      i: {
        tranCodeId: id(9100),
        code: 'SECOND',
        params: [{ name: 'to', type: 'UUID' }],
        transaction: { journalId: `'${id(77)}'` },
        entries: [
          { accountId: `'${id(9)}'`, units: "decimal('4')", currency: "'USD'", direction: 'DEBIT' },
          { accountId: 'params.to', units: "decimal('4')", currency: "'USD'", direction: 'CREDIT' },
        ],
      },
    });
    ok(engine, POST, { input: { transactionId: id(1), tranCode: 'SECOND', params: { to: id(1) } } });
    post(2, 9, 1, '1');
    expect(setBalance(100).settled.normalBalance.units).toBe('1');
    expect(setBalance(300).settled.normalBalance.units).toBe('4');
    const mixed = fails(engine, ADD, { s: id(100), m: { memberType: 'ACCOUNT_SET', memberId: id(300) } });
    expect(mixed).toMatchObject({ code: 'BAD_REQUEST' });
    expect(mixed.message).toContain('journal');
  });

  it('refuse cycles, postings to a set, unknown members, wrong member types and duplicates, writing nothing', () => {
    set(100);
    set(200);
    add(100, 200, 'ACCOUNT_SET');
    expect(fails(engine, ADD, { s: id(200), m: { memberType: 'ACCOUNT_SET', memberId: id(100) } })).toMatchObject({
      code: 'BAD_REQUEST',
    });
    expect(fails(engine, ADD, { s: id(100), m: { memberType: 'ACCOUNT_SET', memberId: id(100) } }).message).toContain(
      'cycle',
    );
    expect(fails(engine, ADD, { s: id(100), m: { memberType: 'ACCOUNT', memberId: id(404) } })).toMatchObject({
      code: 'NOT_FOUND',
    });
    expect(fails(engine, ADD, { s: id(100), m: { memberType: 'ACCOUNT', memberId: id(200) } }).message).toContain(
      'it is an account set',
    );
    add(100, 1);
    expect(fails(engine, ADD, { s: id(100), m: { memberType: 'ACCOUNT', memberId: id(1) } })).toMatchObject({
      code: 'ALREADY_EXISTS',
    });
    expect(fails(engine, ADD, { s: id(404), m: { memberType: 'ACCOUNT', memberId: id(1) } })).toMatchObject({
      code: 'NOT_FOUND',
    });
    const direct = fails(engine, POST, {
      input: { transactionId: id(1), tranCode: 'TRANSFER', params: { from: id(9), to: id(100), amount: '1' } },
    });
    expect(direct.code).toBe('BAD_REQUEST');
    expect(direct.message).toContain('entries are never posted to a set');
    expect(count(engine, 'transactions')).toBe(0);
    // One id space and one code space with accounts.
    expect(fails(engine, SET, { i: { accountSetId: id(1), name: 'clash' } })).toMatchObject({ code: 'ALREADY_EXISTS' });
    expect(fails(engine, SET, { i: { accountSetId: id(101), name: 'clash', code: 'ACC-1' } })).toMatchObject({
      code: 'ALREADY_EXISTS',
    });
    expect(fails(engine, `{ account(id: "${id(100)}") { code } }`).message).toContain('is an account set');
    expect(fails(engine, `{ accountSet(id: "${id(1)}") { code } }`).message).toContain('it is an account');
  });

  it('upsert returns the existing record unchanged; update makes versions; delete needs an empty set', () => {
    set(100, { code: 'A' });
    expect(
      ok(engine, SET, { i: { accountSetId: id(100), name: 'other', config: { upsert: true } } }).createAccountSet,
    ).toMatchObject({ code: 'A', version: 1 });
    expect(
      ok(
        engine,
        `mutation { createAccount(input: {accountId: "${id(1)}", code: "X", name: "X", config: {upsert: true}}) { code } }`,
      ).createAccount.code,
    ).toBe('ACC-1');
    const updated = ok(
      engine,
      `mutation { updateAccountSet(id: "${id(100)}", input: {name: "Renamed", config: {enableConcurrentPosting: true}}) { name version config { enableConcurrentPosting } history(first: 5) { nodes { name version } } } }`,
    ).updateAccountSet;
    expect(updated).toEqual({
      name: 'Renamed',
      version: 2,
      config: { enableConcurrentPosting: true },
      history: {
        nodes: [
          { name: 'Renamed', version: 2 },
          { name: 'Set 100', version: 1 },
        ],
      },
    });
    add(100, 1);
    expect(fails(engine, `mutation { deleteAccountSet(id: "${id(100)}") { accountSetId } }`).message).toContain(
      'has members',
    );
    ok(engine, REMOVE, { s: id(100), m: { memberType: 'ACCOUNT', memberId: id(1) } });
    ok(engine, `mutation { deleteAccountSet(id: "${id(100)}") { accountSetId } }`);
    expect(fails(engine, `{ accountSet(id: "${id(100)}") { code } }`).code).toBe('NOT_FOUND');
  });

  it('accountSetDepthMax and accountSetAncestorsMax bound what one posting pays', async () => {
    engine = await newEngine({ limits: { accountSetDepthMax: 2, accountSetAncestorsMax: 3 } });
    createAccount(engine, 1);
    set(100);
    set(200);
    set(300);
    add(100, 200, 'ACCOUNT_SET');
    const deep = fails(engine, ADD, { s: id(200), m: { memberType: 'ACCOUNT_SET', memberId: id(300) } });
    expect(deep.code).toBe('LIMIT_EXCEEDED');
    expect(deep.message).toContain('accountSetDepthMax is 2');
    set(400);
    add(200, 1); // 1 rolls up into 200 and 100
    add(300, 1); // and 300: 3 sets
    const many = fails(engine, ADD, { s: id(400), m: { memberType: 'ACCOUNT', memberId: id(1) } });
    expect(many.code).toBe('LIMIT_EXCEEDED');
    expect(many.message).toContain('accountSetAncestorsMax is 3');
  });

  it('a client needs policies on account sets and members; another client’s set is not its to fill', () => {
    set(100);
    const clientWith = (principal: string, policies: unknown[]) =>
      ok(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', {
        i: { principal, name: principal, policies },
      });
    clientWith('reader', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] }]);
    clientWith('mallory', [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
      {
        effect: 'DENY',
        actions: ['INSERT', 'DELETE'],
        resources: ['financial.AccountSetMember'],
        assertions: { notMine: `context.document.accountSetId == '${id(100)}'` },
      },
    ]);
    expect(ok(engine, `{ accountSet(id: "${id(100)}") { name } }`, undefined, 'reader').accountSet.name).toBe(
      'Set 100',
    );
    expect(fails(engine, SET, { i: { accountSetId: id(101), name: 'x' } }, 'reader').code).toBe('ACCESS_DENIED');
    expect(fails(engine, ADD, { s: id(100), m: { memberType: 'ACCOUNT', memberId: id(1) } }, 'mallory').code).toBe(
      'ACCESS_DENIED',
    );
    // Joining the set through createAccount(accountSetIds) is the same insert, and refused the same way.
    expect(
      fails(
        engine,
        `mutation { createAccount(input: {accountId: "${id(50)}", code: "M", name: "M", accountSetIds: ["${id(100)}"]}) { code } }`,
        undefined,
        'mallory',
      ).code,
    ).toBe('ACCESS_DENIED');
    expect(count(engine, 'account_set_members')).toBe(0);
  });
});
