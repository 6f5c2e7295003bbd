import { beforeEach, describe, expect, it } from 'vitest';
import { Dec } from '../../src/decimal.js';
import type { Engine } from '../../src/engine.js';
import { createAccount, createTransferCode, POST } from '../helpers/ledger.js';
import { fails, id, newEngine, ok } from '../helpers/engine.js';

/**
 * Hostile review of account sets, velocity controls, calculations, views and custom indexes,
 * balance history / asOf, and the `@cel` variable defaults. Each test marked FINDING reproduced a
 * weakness the review found (it failed before the fix) and asserts the correct behaviour.
 */

let engine: Engine;

const CLIENT = 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }';
const LIMIT = 'mutation($i: VelocityLimitInput!) { createVelocityLimit(input: $i) { velocityLimitId } }';
const CONTROL = 'mutation($i: VelocityControlInput!) { createVelocityControl(input: $i) { velocityControlId } }';
const ATTACH =
  'mutation($c: UUID!, $a: UUID!, $p: JSON) { attachVelocityControl(velocityControlId: $c, accountId: $a, params: $p) { accountId } }';
const CREATE_VIEW = 'mutation($i: CreateViewInput!) { schema { createView(input: $i) { name } } }';
const CREATE_CALC = 'mutation($i: CreateCalculationInput!) { createCalculation(input: $i) { calculationId } }';
const SET = 'mutation($i: AccountSetInput!) { createAccountSet(input: $i) { accountSetId } }';
const ADD =
  'mutation($s: UUID!, $m: UUID!, $t: AccountSetMemberType!) { addToAccountSet(id: $s, member: {memberType: $t, memberId: $m}) { accountSetId } }';
const REMOVE =
  'mutation($s: UUID!, $m: UUID!, $t: AccountSetMemberType!) { removeFromAccountSet(id: $s, member: {memberType: $t, memberId: $m}) { accountSetId } }';

const CASH = id(1);
const ALICE = id(2);
const BOB = id(3);

function client(principal: string, policies: unknown[]) {
  ok(engine, CLIENT, { i: { principal, name: principal, policies } });
}
const as = (principal: string | undefined) => (principal === undefined ? {} : { principal });
function post(
  n: number,
  from: string,
  to: string,
  amount: string,
  extra: Record<string, unknown> = {},
  principal?: string,
) {
  return engine.graphql(
    POST,
    {
      input: {
        transactionId: id(7000 + n),
        tranCode: 'TRANSFER',
        params: { from, to, amount, ...(extra.params as object) },
        ...extra,
        ...(extra.params ? { params: { from, to, amount, ...(extra.params as object) } } : {}),
      },
    },
    as(principal),
  );
}
const set = (n: number, extra: Record<string, unknown> = {}) =>
  ok(engine, SET, { i: { accountSetId: id(n), name: `set ${n}`, ...extra } }).createAccountSet.accountSetId as string;
const add = (s: string, m: string, t = 'ACCOUNT', principal?: string) =>
  engine.graphql(ADD, { s, m, t }, as(principal));
const units = (account: string, currency = 'USD', principal?: string) =>
  (
    engine.graphql(
      `{ balance(accountId: "${account}", currency: "${currency}") { settled { normalBalance { units } } } }`,
      {},
      as(principal),
    ).data as any
  )?.balance?.settled?.normalBalance?.units as string | undefined;
/** A limit on the DEBIT side of the settled balance (an overdraft guard), `amount` a param. */
function debitLimit(n: number, extra: Record<string, unknown> = {}) {
  ok(engine, LIMIT, {
    i: {
      velocityLimitId: id(n),
      name: `limit ${n}`,
      limit: { balance: [{ layer: 'SETTLED', amount: 'params.amount', normalBalanceType: 'DEBIT' }] },
      params: [{ name: 'amount', type: 'DECIMAL', default: '0' }],
      ...extra,
    },
  });
  return id(n);
}
function control(n: number, action: string, limits: string[]) {
  ok(engine, CONTROL, {
    i: { velocityControlId: id(n), name: `control ${n}`, enforcement: { action }, velocityLimitIds: limits },
  });
  return id(n);
}
const attach = (c: string, a: string, p?: unknown) => ok(engine, ATTACH, { c, a, p: p ?? null });

/** A teller: may post (transactions, entries, balances) and read tran codes, nothing else. */
const TELLER = [
  {
    effect: 'ALLOW',
    actions: ['INSERT', 'UPDATE'],
    resources: ['financial.Transaction', 'financial.Entry', 'financial.Balance'],
  },
  { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.TranCode'] },
];

beforeEach(async () => {
  engine = await newEngine();
  createTransferCode(engine);
  createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
  createAccount(engine, 2);
  createAccount(engine, 3);
});

describe('authority: sets, views, velocity', () => {
  // FINDING (fixed): addToAccountSet needs no authority over the member: a client that owns a set adds another's account and reads its balance through the set (src/graphql/resolvers/ledger.ts addToAccountSet, src/ledger/account-sets.ts).
  it("a set owner cannot read another client's account balance by adding it to its own set", () => {
    set(500);
    post(1, CASH, ALICE, '1234.56');
    client('mallory', [
      {
        effect: 'ALLOW',
        actions: ['SELECT', 'INSERT', 'UPDATE'],
        resources: ['financial.AccountSet', 'financial.AccountSetMember', 'financial.Balance'],
        assertions: {
          mine: `context.document.accountSetId == '${id(500)}' || context.document.accountId == '${id(500)}'`,
        },
      },
    ]);
    // Directly: refused.
    expect(
      fails(engine, `{ balance(accountId: "${ALICE}") { settled { normalBalance { units } } } }`, {}, 'mallory').code,
    ).toBe('ACCESS_DENIED');
    // Through her own set: either the add or the read must be refused.
    const added = add(id(500), ALICE, 'ACCOUNT', 'mallory');
    if (!added.errors) {
      const read = engine.graphql(
        `{ balance(accountId: "${id(500)}") { settled { normalBalance { units } } } }`,
        {},
        { principal: 'mallory' },
      );
      expect(JSON.stringify(read)).not.toContain('1234.56');
    }
  });

  // FINDING (fixed): same root cause: a set owner attaches a REJECT control to its set holding another's account and blocks that account's postings (src/ledger/velocity.ts enforceVelocity walks parent_account_ids).
  it("a set owner cannot block another client's account by a control on its own set", () => {
    set(500);
    post(1, CASH, ALICE, '100');
    const mine = `context.document.accountSetId == '${id(500)}' || context.document.accountId == '${id(500)}'`;
    client('mallory', [
      {
        effect: 'ALLOW',
        actions: ['SELECT', 'INSERT', 'UPDATE'],
        resources: ['financial.AccountSet', 'financial.AccountSetMember'],
        assertions: { mine },
      },
      {
        effect: 'ALLOW',
        actions: ['INSERT', 'UPDATE', 'SELECT'],
        resources: ['financial.VelocityLimit', 'financial.VelocityControl'],
      },
    ]);
    client('alice', TELLER);
    add(id(500), ALICE, 'ACCOUNT', 'mallory');
    ok(
      engine,
      LIMIT,
      {
        i: {
          velocityLimitId: id(10),
          name: 'freeze',
          limit: { balance: [{ layer: 'SETTLED', amount: '-1000000', normalBalanceType: 'DEBIT' }] },
        },
      },
      'mallory',
    );
    ok(
      engine,
      CONTROL,
      {
        i: {
          velocityControlId: id(100),
          name: 'freeze',
          enforcement: { action: 'REJECT' },
          velocityLimitIds: [id(10)],
        },
      },
      'mallory',
    );
    engine.graphql(ATTACH, { c: id(100), a: id(500), p: null }, { principal: 'mallory' });
    // Alice's own transfer out of her own account must not be refused by mallory's control.
    const r = post(2, ALICE, BOB, '10', {}, 'alice');
    expect(r.errors?.[0]?.extensions?.code).not.toBe('BALANCE_VELOCITY_EXCEEDED');
    expect(r.errors).toBeUndefined();
  });

  // FINDING (fixed): createView needs only INSERT financial.View: the view's CEL reads every entry, so a client with no SELECT on entries reads all accounts and amounts through view records (src/ledger/views.ts applyView, src/graphql/resolvers/views.ts).
  it('a view does not reveal entries its reader may not SELECT', () => {
    client('reporter', [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT'], resources: ['financial.View'] }]);
    post(0, CASH, BOB, '987.65');
    expect(
      JSON.stringify(
        engine.graphql(
          `{ entries(first: 5, where: {accountId: "${BOB}"}) { nodes { units } } }`,
          {},
          { principal: 'reporter' },
        ),
      ),
    ).not.toContain('987.65');
    const created = engine.graphql(
      CREATE_VIEW,
      {
        i: {
          name: 'spy',
          sources: [{ entity: 'Entry', triggers: ['OnInsert'] }],
          document: [
            { alias: 'acct', value: 'context.trigger.new.account_id', type: 'String' },
            { alias: 'units', value: 'string(context.trigger.new.units)', type: 'String' },
          ],
          partition: [{ alias: 'p', value: "'all'", type: 'String' }],
          sort: [{ alias: 's', value: 'document.acct', type: 'String' }],
        },
      },
      { principal: 'reporter' },
    );
    if (created.errors) return; // refusing the definition is a fix too
    expect(post(1, CASH, BOB, '987.65').errors).toBeUndefined();
    expect(post(2, CASH, ALICE, '1').errors).toBeUndefined();
    const read = engine.graphql(
      '{ view(name: "spy", where: {index: {partition: [{alias: "p", value: {eq: "all"}}]}}, first: 10) { nodes { document } } }',
      {},
      { principal: 'reporter' },
    );
    expect(JSON.stringify(read)).not.toContain('987.65');
  });

  // FINDING (fixed): BALANCE_VELOCITY_EXCEEDED (and Transaction.exceptions) carry the violating balance of the counterparty's account or set, which the poster may not SELECT (src/ledger/velocity.ts violationOf).
  it("a refused posting does not tell the poster the counterparty's balance", () => {
    ok(engine, LIMIT, {
      i: {
        velocityLimitId: id(10),
        name: 'cap',
        limit: { balance: [{ layer: 'SETTLED', amount: '1000', normalBalanceType: 'CREDIT' }] },
      },
    });
    attach(control(100, 'REJECT', [id(10)]), BOB);
    post(1, CASH, BOB, '987.65');
    post(2, CASH, ALICE, '100');
    client('alice', [
      ...TELLER,
      {
        effect: 'ALLOW',
        actions: ['SELECT'],
        resources: ['financial.Balance'],
        assertions: { own: `context.document.accountId == '${ALICE}'` },
      },
    ]);
    expect(
      fails(engine, `{ balance(accountId: "${BOB}") { settled { normalBalance { units } } } }`, {}, 'alice').code,
    ).toBe('ACCESS_DENIED');
    const refused = post(3, ALICE, BOB, '50', {}, 'alice');
    expect(refused.errors![0]!.extensions!.code).toBe('BALANCE_VELOCITY_EXCEEDED');
    expect(JSON.stringify(refused.errors)).not.toContain('1037.65');
  });

  // FINDING (fixed, second review of issue 33, H7): a balance read was judged with {accountId,
  // journalId, currency, account}, a refusal's redaction with {accountId} alone, so a DENY that
  // names the account (`context.document.account.code`) hid the balance from a read and showed it
  // in the refusal. One document (balanceDocument) now serves the read, the dry run and both redactions.
  it("a refusal shows no balance that the caller's policies deny by the account, whatever they look at", () => {
    ok(engine, LIMIT, {
      i: {
        velocityLimitId: id(10),
        name: 'cap',
        limit: { balance: [{ layer: 'SETTLED', amount: '1000', normalBalanceType: 'CREDIT' }] },
      },
    });
    attach(control(100, 'REJECT', [id(10)]), BOB);
    post(1, CASH, BOB, '987.65');
    client('alice', [
      ...TELLER,
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.Balance'] },
      {
        effect: 'DENY',
        actions: ['SELECT'],
        resources: ['financial.Balance'],
        assertions: { bobs: `has(context.document.account) && context.document.account.accountId == '${BOB}'` },
      },
    ]);
    expect(
      fails(engine, `{ balance(accountId: "${BOB}") { settled { normalBalance { units } } } }`, {}, 'alice').code,
    ).toBe('ACCESS_DENIED');
    const refused = post(3, CASH, BOB, '50', {}, 'alice');
    expect(refused.errors![0]!.extensions!.code).toBe('BALANCE_VELOCITY_EXCEEDED');
    expect(JSON.stringify(refused.errors)).not.toContain('1037.65');
    // Other balances she still reads: the DENY is about Bob's account only.
    expect(
      ok(engine, `{ balance(accountId: "${ALICE}") { settled { normalBalance { units } } } }`, {}, 'alice').balance
        .settled.normalBalance.units,
    ).toBe('0');
  });

  // FINDING (fixed): @cel variable defaults run CEL before any policy: a client with no policies (evaluate: ACCESS_DENIED) evaluates CEL and reads the result back in the coercion error (src/graphql/executor.ts executePrepared, src/graphql/cel-variables.ts).
  it('a @cel default is running the cel tool: refused to a client that may not evaluate', () => {
    client('nobody', []);
    expect(fails(engine, 'mutation { evaluate(expression: "6 * 7") }', {}, 'nobody').code).toBe('ACCESS_DENIED');
    const r = engine.graphql(
      `query($x: UUID = "'computed-' + string(6 * 7)" @cel) { journal(id: $x) { name } }`,
      {},
      { principal: 'nobody' },
    );
    expect(JSON.stringify(r.errors)).not.toContain('computed-42');
    expect(r.errors![0]!.extensions!.code).toBe('ACCESS_DENIED');
  });

  it('many expensive @cel defaults stop at the request deadline', () => {
    // A client that may run the cel tool (a @cel default is one run of it).
    client('nobody', [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT'], resources: ['actions.Execution', 'financial.*'] },
    ]);
    const heavy =
      'string(size([1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5].map(e, a+b+c+d+e)))))))';
    const vars = Array.from({ length: 60 }, (_, i) => `$v${i}: UUID = "${heavy}" @cel`).join(', ');
    const fields = Array.from({ length: 60 }, (_, i) => `x${i}: journal(id: $v${i}) { name }`).join(' ');
    const t = Date.now();
    const r = engine.graphql(`query(${vars}) { ${fields} }`, {}, { principal: 'nobody' });
    expect(Date.now() - t).toBeLessThan(1500);
    // Either the deadline stops the defaults, or they finish in time and the first is not a UUID.
    expect(['LIMIT_EXCEEDED', 'BAD_REQUEST']).toContain(r.errors![0]!.extensions!.code);
  });

  it('AccountSet.members, custom index reads and Balance.history keep to what the reader may see', () => {
    set(500);
    add(id(500), ALICE);
    add(id(500), BOB);
    post(1, CASH, ALICE, '5');
    post(2, CASH, BOB, '7');
    ok(
      engine,
      'mutation { schema { createIndex(input: {name: "by_currency", on: Entry, partition: [{alias: "c", value: "document.currency", type: String}]}) { name } } }',
    );
    const own = `context.document.accountId == '${ALICE}' || context.document.accountSetId == '${id(500)}' || context.document.memberId == '${ALICE}'`;
    client('viewer', [
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.AccountSet', 'financial.Index'] },
      {
        effect: 'ALLOW',
        actions: ['SELECT'],
        resources: ['financial.Account', 'financial.Entry', 'financial.Balance', 'financial.AccountSetMember'],
        assertions: { own },
      },
    ]);
    // Members: bob is hidden from the list (row-level), never handed out.
    const members = engine.graphql(
      `{ accountSet(id: "${id(500)}") { members(first: 10) { nodes { ... on Account { accountId } } } } }`,
      {},
      { principal: 'viewer' },
    );
    expect(JSON.stringify(members)).not.toContain(BOB);
    // The custom index answers only the entries the reader may see.
    const viaIndex = engine.graphql(
      '{ entries(first: 10, where: {custom: {index: "by_currency", partition: [{alias: "c", value: {eq: "USD"}}]}}) { nodes { accountId units } } }',
      {},
      { principal: 'viewer' },
    );
    expect(viaIndex.errors).toBeUndefined();
    expect((viaIndex.data as any).entries.nodes.every((n: { accountId: string }) => n.accountId === ALICE)).toBe(true);
    // Balance history and asOf of bob: refused.
    expect(
      fails(engine, `{ account(id: "${BOB}") { balance { history(first: 5) { nodes { version } } } } }`, {}, 'viewer')
        .code,
    ).toBe('ACCESS_DENIED');
    expect(
      fails(
        engine,
        `{ account(id: "${ALICE}") { id: accountId } b: balance(accountId: "${BOB}") { version } }`,
        {},
        'viewer',
      ).code,
    ).toBe('ACCESS_DENIED');
  });
});

describe('velocity correctness', () => {
  // FINDING (fixed): a VOID control keeps the voided posting in its running totals: after one voided attempt every later posting that day is voided too, though nothing was spent (src/ledger/velocity.ts enforceVelocity adds totals; post-transaction.ts voidIt voids without taking them out).
  it('a posting a VOID control voided does not count toward the window it was voided in', () => {
    debitLimit(10, {
      window: [{ alias: 'day', value: 'context.vars.transaction.effective' }],
      condition: 'context.vars.entry.direction == DEBIT',
      params: [{ name: 'amount', type: 'DECIMAL' }],
    });
    attach(control(100, 'VOID', [id(10)]), ALICE, { amount: '100' });
    post(1, CASH, ALICE, '1000');
    const over = post(2, ALICE, BOB, '150').data!.postTransaction as { voidedBy: string | null };
    expect(over.voidedBy).not.toBeNull();
    // 50 is within the 100 a day: nothing of the voided 150 was spent.
    const within = post(3, ALICE, BOB, '50').data!.postTransaction as { voidedBy: string | null };
    expect(within.voidedBy).toBeNull();
  });

  // FINDING (fixed): overrideVelocityEnforcement needs nothing beyond INSERT on financial.Transaction: any poster lowers every REJECT control to WARN and passes its limit (src/ledger/velocity.ts enforceVelocity, src/graphql/resolvers/ledger.ts postTransaction).
  it('a teller cannot lower a REJECT control with properties.overrideVelocityEnforcement', () => {
    attach(control(100, 'REJECT', [debitLimit(10)]), ALICE);
    client('teller', TELLER);
    expect(post(1, ALICE, BOB, '500', {}, 'teller').errors![0]!.extensions!.code).toBe('BALANCE_VELOCITY_EXCEEDED');
    const overridden = post(
      1,
      ALICE,
      BOB,
      '500',
      { properties: { overrideVelocityEnforcement: { action: 'WARN' } } },
      'teller',
    );
    expect(overridden.errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
    expect(units(ALICE)).toBe('0');
  });

  // FINDING (fixed): addToAccountSet moves a member's balance into a set without checking the set's REJECT controls: the set's limit is passed with no posting refused (src/ledger/account-sets.ts addToAccountSet/moveBalances).
  it('adding an overdrawn member does not take a set past its REJECT limit', () => {
    set(500);
    attach(control(100, 'REJECT', [debitLimit(10)]), id(500)); // the set may not be overdrawn
    post(1, ALICE, CASH, '500'); // alice (not in the set) is overdrawn by 500
    const added = add(id(500), ALICE);
    if (added.errors) return; // refusing the add is the fix
    const v = ok(engine, `{ velocity(accountId: "${id(500)}", window: {}) { spent remaining } }`).velocity;
    expect(new Dec(v[0].remaining).isNegative()).toBe(false);
  });

  it('REJECT writes nothing; ±inf params; a set control limits the set; a void that moves the set back toward its limit passes', () => {
    set(500);
    add(id(500), ALICE);
    attach(control(100, 'REJECT', [debitLimit(10)]), id(500));
    post(1, CASH, ALICE, '10');
    expect(post(2, ALICE, BOB, '11').errors![0]!.extensions!.code).toBe('BALANCE_VELOCITY_EXCEEDED');
    expect(units(ALICE)).toBe('10');
    expect(units(id(500))).toBe('10');
    attach(id(100), id(500), { amount: 'inf' });
    expect(post(2, ALICE, BOB, '11').errors).toBeUndefined();
    attach(id(100), id(500), { amount: '-inf' });
    // Past −Infinity whatever it holds, but the void pays alice back 11: not worse, so not refused.
    expect(
      ok(engine, `mutation { voidTransaction(id: "${id(7002)}") { transactionId } }`).voidTransaction.transactionId,
    ).toBeTruthy();
    expect(units(id(500))).toBe('10');
    expect(fails(engine, ATTACH, { c: id(100), a: id(500), p: { amount: 'NaN' } }).code).toBe('BAD_REQUEST');
  });

  // FINDING (fixed): a window alias named like an Object.prototype member (constructor, __proto__, toString) is accepted, and velocity(window: {}) reads the inherited member as its value instead of saying the key is missing (src/ledger/velocity.ts velocityOf: window[k.alias]).
  it('velocity() with a window missing a key named "constructor" says it is missing', () => {
    const created = engine.graphql(LIMIT, {
      i: {
        velocityLimitId: id(10),
        name: 'w',
        window: [{ alias: 'constructor', value: 'context.vars.transaction.effective' }],
        limit: { balance: [{ layer: 'SETTLED', amount: '1000' }] },
      },
    });
    if (created.errors) return expect(created.errors[0]!.extensions!.code).toBe('BAD_REQUEST');
    attach(control(100, 'WARN', [id(10)]), BOB);
    const r = engine.graphql(`{ velocity(accountId: "${BOB}", window: {}) { spent } }`);
    expect(r.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
  });

  it('prototype keys in attach params, window and posting params neither crash nor pollute', () => {
    // Refused at attach (a key CEL cannot read back), then attached clean.
    const refused = engine.graphql(ATTACH, {
      c: control(100, 'REJECT', [debitLimit(10)]),
      a: ALICE,
      p: JSON.parse('{"__proto__": {"polluted": 1}, "amount": "5"}'),
    });
    expect(refused.errors![0]!.extensions!.code).toBe('BAD_REQUEST');
    attach(id(100), ALICE, { amount: '5' });
    expect(
      post(1, ALICE, BOB, '5', { params: JSON.parse('{"__proto__": {"polluted": 1}}') }).errors![0]!.extensions!.code,
    ).toBe('TRAN_CODE_ERROR');
    expect(post(1, ALICE, BOB, '5').errors).toBeUndefined();
    expect(post(2, ALICE, BOB, '1').errors![0]!.extensions!.code).toBe('BALANCE_VELOCITY_EXCEEDED');
    const r = engine.graphql(`query($w: JSON!) { velocity(accountId: "${ALICE}", window: $w) { spent } }`, {
      w: JSON.parse('{"__proto__": {"x": 1}}'),
    });
    expect(r.errors).toBeUndefined();
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  // FINDING (fixed): attach params with a key "constructor" are accepted (attach binds them "so a bad value is refused here"), then every posting to the account fails CEL_ERROR "Unsupported type: object" (src/ledger/velocity.ts bindLimitParams keeps undeclared keys; CEL rejects a map with an own constructor key).
  it('attach params that would break every later posting are refused at attach', () => {
    const attached = engine.graphql(ATTACH, {
      c: control(100, 'REJECT', [debitLimit(10)]),
      a: ALICE,
      p: { amount: '5', constructor: 1 },
    });
    if (attached.errors) return expect(attached.errors[0]!.extensions!.code).toBe('BAD_REQUEST');
    const r = post(1, CASH, ALICE, '1');
    expect(r.errors?.[0]?.extensions?.code).not.toBe('CEL_ERROR');
    expect(r.errors).toBeUndefined();
  });
});

describe('account sets', () => {
  // FINDING (fixed): accountSetAncestorsMax counts only the sets above the new member, not above the accounts below it: an account rolls up into more sets than the limit, and every posting to it pays for all of them (src/ledger/account-sets.ts addToAccountSet setsAfter).
  it('no account rolls up into more than accountSetAncestorsMax (50) sets', () => {
    const S = (n: number) => id(600 + n);
    for (let i = 0; i < 51; i++) set(600 + i);
    add(S(0), ALICE);
    add(S(1), ALICE);
    for (let i = 2; i < 50; i++) ok(engine, ADD, { s: S(i), m: S(0), t: 'ACCOUNT_SET' }); // alice: 50 sets
    const past = add(S(50), S(1), 'ACCOUNT_SET'); // alice would roll up into 51
    expect(past.errors?.[0]?.extensions?.code).toBe('LIMIT_EXCEEDED');
  });

  it('cycles, self-membership, duplicates, unknown ids, other journals and depth are refused with nothing written', () => {
    set(500);
    set(501, { accountSetIds: [id(500)] });
    expect(add(id(501), id(500), 'ACCOUNT_SET').errors![0]!.extensions!.code).toBe('BAD_REQUEST');
    expect(add(id(500), id(500), 'ACCOUNT_SET').errors![0]!.extensions!.code).toBe('BAD_REQUEST');
    expect(fails(engine, SET, { i: { accountSetId: id(502), name: 'self', accountSetIds: [id(502)] } }).code).toMatch(
      /BAD_REQUEST|NOT_FOUND/,
    );
    expect(engine.graphql(`{ accountSet(id: "${id(502)}") { name } }`).errors![0]!.extensions!.code).toBe('NOT_FOUND');
    add(id(500), ALICE);
    expect(add(id(500), ALICE).errors![0]!.extensions!.code).toBe('ALREADY_EXISTS');
    expect(add(id(500), id(999)).errors![0]!.extensions!.code).toBe('NOT_FOUND');
    expect(add(id(500), ALICE, 'ACCOUNT_SET').errors![0]!.extensions!.code).toBe('NOT_FOUND');
    expect(
      fails(engine, 'mutation($i: AccountInput!) { createAccount(input: $i) { accountId } }', {
        i: { accountId: id(4), code: 'X4', name: 'x', accountSetIds: [id(998)] },
      }).code,
    ).toBe('NOT_FOUND');
    expect(engine.graphql(`{ account(id: "${id(4)}") { name } }`).errors![0]!.extensions!.code).toBe('NOT_FOUND');
    ok(
      engine,
      'mutation { createJournal(input: {journalId: "00000000-0000-4000-8000-000000000077", name: "j2"}) { journalId } }',
    );
    set(503, { journalId: id(77) });
    expect(add(id(500), id(503), 'ACCOUNT_SET').errors![0]!.extensions!.code).toBe('BAD_REQUEST');
    for (let i = 0; i < 12; i++) set(510 + i);
    let code: string | undefined;
    for (let i = 1; i < 12 && !code; i++)
      code = add(id(510 + i), id(510 + i - 1), 'ACCOUNT_SET').errors?.[0]?.extensions?.code as string | undefined;
    expect(code).toBe('LIMIT_EXCEEDED');
    expect(post(1, CASH, id(500), '1').errors![0]!.extensions!.code).toBe('BAD_REQUEST'); // never posted to a set
  });

  it('after adds, removes, nested sets, currencies and layers, every set equals the sum of its members', () => {
    set(500);
    set(501, { accountSetIds: [id(500)] });
    set(502, { accountSetIds: [id(500), id(501)].slice(0, 1) });
    add(id(501), ALICE);
    let n = 0;
    const steps: Array<() => unknown> = [
      () => post(++n, CASH, ALICE, '10.10'),
      () => post(++n, CASH, BOB, '3.333', { params: { currency: 'EUR' } }),
      () => add(id(502), BOB),
      () => post(++n, ALICE, BOB, '0.000000000000000001', { params: { layer: 'PENDING' } }),
      () => ok(engine, ADD, { s: id(502), m: ALICE, t: 'ACCOUNT' }),
      () => post(++n, BOB, CASH, '99999999999999999999.5', { params: { layer: 'ENCUMBRANCE' } }),
      () => ok(engine, REMOVE, { s: id(501), m: ALICE, t: 'ACCOUNT' }),
      () => post(++n, ALICE, BOB, '-0'.replace('-', '')),
      () => ok(engine, `mutation { voidTransaction(id: "${id(7001)}") { transactionId } }`),
    ];
    const layers = ['settled', 'pending', 'encumbrance'];
    const read = (a: string, c: string) =>
      ok(
        engine,
        `{ balance(accountId: "${a}", currency: "${c}") { ${layers.map((l) => `${l} { drBalance { units } crBalance { units } }`).join(' ')} } }`,
      ).balance;
    const members = (s: string): string[] =>
      ok(
        engine,
        `{ accountSet(id: "${s}") { members(first: 50) { nodes { ... on Account { accountId } ... on AccountSet { accountSetId } } } } }`,
      ).accountSet.members.nodes.map((m: any) => m.accountId ?? m.accountSetId);
    for (const step of steps) {
      step();
      for (const s of [id(500), id(501), id(502)]) {
        for (const c of ['USD', 'EUR']) {
          const total = read(s, c);
          const parts = members(s).map((m) => read(m, c));
          for (const l of layers)
            for (const side of ['drBalance', 'crBalance']) {
              const sum = parts.reduce((acc: Dec, p: any) => acc.plus(p[l][side].units), new Dec(0));
              expect(new Dec(total[l][side].units).eq(sum), `${s} ${c} ${l} ${side}`).toBe(true);
            }
        }
      }
    }
  });

  it('asOf and history on sets and accounts: exact, bounded, and clear on bad input', () => {
    set(500);
    add(id(500), ALICE);
    post(1, CASH, ALICE, '1.10');
    const mid = new Date().toISOString();
    post(2, CASH, ALICE, '2.200');
    const r = ok(
      engine,
      `{ a: account(id: "${ALICE}") { balance(asOf: "${mid}") { settled { normalBalance { units } } } }
      s: accountSet(id: "${id(500)}") { balance(asOf: "1970-01-01T00:00:00Z") { settled { normalBalance { units } } } history(first: 5) { nodes { version } } } }`,
    );
    expect(
      new Dec(r.a.balance.settled.normalBalance.units).eq('1.10') ||
        new Dec(r.a.balance.settled.normalBalance.units).eq('3.300'),
    ).toBe(true);
    expect(r.s.balance.settled.normalBalance.units).toBe('0');
    expect(fails(engine, `{ account(id: "${ALICE}") { balance(asOf: "yesterday") { version } } }`).code).toBe(
      'BAD_REQUEST',
    );
    expect(
      fails(engine, `{ account(id: "${ALICE}") { balance { history(first: 100000) { nodes { version } } } } }`).code,
    ).toMatch(/BAD_REQUEST|LIMIT_EXCEEDED/);
  });
});

describe('calculations', () => {
  // FINDING (fixed): a GLOBAL calculation whose dimension fails (1/0, a missing key, a cost over celCostMax) fails every posting of every client; a client with only INSERT financial.Calculation stops the ledger (src/ledger/calculations.ts applyEntry).
  it("a reporting client's GLOBAL calculation cannot make other clients' postings fail", () => {
    client('analyst', [{ effect: 'ALLOW', actions: ['INSERT', 'SELECT'], resources: ['financial.Calculation'] }]);
    client('teller', TELLER);
    engine.graphql(
      CREATE_CALC,
      { i: { calculationId: id(700), code: 'BROKEN', description: 'x', dimensions: [{ alias: 'd', value: '1 / 0' }] } },
      { principal: 'analyst' },
    );
    const r = post(1, CASH, ALICE, '5', {}, 'teller');
    expect(r.errors?.[0]?.extensions?.code).not.toBe('CEL_ERROR');
    expect(r.errors).toBeUndefined();
  });

  it('a costly definition costs each posting at most postingCelCostMax, and the posting says which limit', async () => {
    engine.close();
    engine = await newEngine({ limits: { postingCelCostMax: 5_000 } });
    createTransferCode(engine);
    createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
    createAccount(engine, 2);
    const heavy =
      'string(size([1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, a+b+c)))))';
    ok(engine, CREATE_CALC, {
      i: { calculationId: id(700), code: 'HEAVY', description: 'x', dimensions: [{ alias: 'd', value: heavy }] },
    });
    const t = Date.now();
    const r = post(1, CASH, ALICE, '5');
    expect(Date.now() - t).toBeLessThan(500);
    expect(r.errors![0]!.extensions!.code).toBe('LIMIT_EXCEEDED');
    expect(r.errors![0]!.message).toContain('postingCelCostMax (5000)');
    // Under the default budget the same posting goes through.
    engine.close();
    engine = await newEngine();
    createTransferCode(engine);
    createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
    createAccount(engine, 2);
    ok(engine, CREATE_CALC, {
      i: { calculationId: id(700), code: 'HEAVY', description: 'x', dimensions: [{ alias: 'd', value: heavy }] },
    });
    expect(post(1, CASH, ALICE, '5').errors).toBeUndefined();
  });

  // FINDING (fixed): a dimension alias "__proto__" is accepted; its value is lost from Balance.dimensions (assigned to a plain object's prototype) (src/ledger/calculations.ts applyEntry named[dim.alias], dimensionValues).
  it('a dimension named __proto__ is refused or kept', () => {
    const c = engine.graphql(CREATE_CALC, {
      i: {
        calculationId: id(700),
        code: 'P',
        description: 'x',
        dimensions: [{ alias: '__proto__', value: "{'k': 'v'}" }],
      },
    });
    if (c.errors) return expect(c.errors[0]!.extensions!.code).toBe('BAD_REQUEST');
    post(1, CASH, BOB, '1');
    const b = ok(
      engine,
      `query($d: JSON) { balances(index: {name: CALCULATION}, where: {calculationId: "${id(700)}", accountId: "${BOB}", dimension: $d}, first: 5) { nodes { dimensions } } }`,
      { d: JSON.parse('{"__proto__": {"k": "v"}}') },
    );
    expect(Object.hasOwn(b.balances.nodes[0].dimensions, '__proto__')).toBe(true);
  });

  it('calculation reads: bad periods, unknown ids, wrong dimensions and prototype keys are clear BAD_REQUEST / NOT_FOUND', () => {
    ok(engine, CREATE_CALC, {
      i: {
        calculationId: id(700),
        code: 'BY_CUR',
        description: 'x',
        dimensions: [{ alias: 'cur', value: 'context.vars.entry.currency' }],
        config: { enableEffectiveBalances: true },
      },
    });
    post(1, CASH, BOB, '1.5');
    const read = (args: string, v: Record<string, unknown> = {}) => {
      const decl = [args.includes('$d') ? '$d: JSON' : '', args.includes('$e') ? '$e: EffectiveInput' : '']
        .filter(Boolean)
        .join(', ');
      return engine.graphql(
        `query${decl ? `(${decl})` : ''} { balance(accountId: "${BOB}", ${args}) { settled { normalBalance { units } } } }`,
        v,
      );
    };
    const good = read(`calculationId: "${id(700)}", dimension: $d`, { d: { cur: 'USD' } });
    expect((good.data as any).balance.settled.normalBalance.units).toBe('1.5');
    for (const [args, v, code] of [
      [`calculationId: "${id(700)}", dimension: $d`, { d: JSON.parse('{"__proto__": "USD"}') }, 'BAD_REQUEST'],
      [`calculationId: "${id(700)}", dimension: $d`, { d: { cur: 'USD', constructor: 1 } }, 'BAD_REQUEST'],
      [
        `calculationId: "${id(700)}", dimension: $d, effective: $e`,
        { d: { cur: 'USD' }, e: { period: '2024-02-30' } },
        'BAD_REQUEST',
      ],
      [
        `calculationId: "${id(700)}", dimension: $d, effective: $e`,
        { d: { cur: 'USD' }, e: { range: { gte: '2025-01-01', lte: '2024-01-01' } } },
        'BAD_REQUEST',
      ],
      [
        `calculationId: "${id(700)}", dimension: $d, effective: $e`,
        { d: { cur: 'USD' }, e: { period: '2024', cumulative: '2024-01-01' } },
        'BAD_REQUEST',
      ],
      [`calculationId: "${id(701)}"`, {}, 'NOT_FOUND'],
    ] as const) {
      expect(read(args, v as Record<string, unknown>).errors![0]!.extensions!.code, args).toBe(code);
    }
    const wide = read(`calculationId: "${id(700)}", dimension: $d, effective: $e`, {
      d: { cur: 'USD' },
      e: { range: { gte: '0001', lte: '9999-12-31' } },
    });
    expect((wide.data as any).balance.settled.normalBalance.units).toBe('1.5');
  });
});

describe('views and indexes', () => {
  // FINDING (fixed): a view document field aliased "__proto__" is accepted and silently dropped from every record (src/ledger/views.ts evaluateFields: json[field.alias] = … on a plain object).
  it('a view field named __proto__ is refused or kept', () => {
    const v = engine.graphql(CREATE_VIEW, {
      i: {
        name: 'pv',
        sources: [{ entity: 'Entry', triggers: ['OnInsert'] }],
        document: [
          { alias: '__proto__', value: "{'a': context.trigger.new.account_id}", type: 'JSON' },
          { alias: 'n', value: 'document.n + 1', type: 'Int' },
        ],
        partition: [{ alias: 'p', value: "'all'", type: 'String' }],
      },
    });
    if (v.errors) return expect(v.errors[0]!.extensions!.code).toBe('BAD_REQUEST');
    post(1, CASH, BOB, '1');
    const docs = ok(
      engine,
      '{ view(name: "pv", where: {index: {partition: [{alias: "p", value: {eq: "all"}}]}}, first: 10) { nodes { document } } }',
    ).view.nodes;
    expect(Object.hasOwn(docs[0].document, '__proto__')).toBe(true);
  });

  it('a normalize list over viewRecordsPerSourceMax fails that posting with LIMIT_EXCEEDED and writes nothing', () => {
    ok(engine, CREATE_VIEW, {
      i: {
        name: 'wide',
        sources: [{ entity: 'Entry', triggers: ['OnInsert'] }],
        normalize: `[${Array.from({ length: 70 }, (_, i) => i).join(',')}]`,
        document: [{ alias: 'n', value: 'context.trigger.normalize', type: 'Int' }],
        partition: [{ alias: 'p', value: 'string(context.trigger.normalize)', type: 'String' }],
      },
    });
    const t = Date.now();
    const r = post(1, CASH, BOB, '1');
    expect(r.errors![0]!.extensions!.code).toBe('LIMIT_EXCEEDED');
    expect(Date.now() - t).toBeLessThan(1000);
    expect(units(BOB)).toBe('0');
  });

  it('a view whose CEL costs a celCostMax per field is stopped by the one budget of the posting', () => {
    const heavy =
      'size([1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5].map(e, a+b+c+d+e))))))';
    ok(engine, CREATE_VIEW, {
      i: {
        name: 'slow',
        sources: [{ entity: 'Entry', triggers: ['OnInsert'] }],
        document: Array.from({ length: 16 }, (_, i) => ({ alias: `f${i}`, value: heavy, type: 'Int' })),
        partition: [{ alias: 'p', value: "'x'", type: 'String' }],
      },
    });
    const t = Date.now();
    const r = post(1, CASH, BOB, '1');
    expect(Date.now() - t).toBeLessThan(1200);
    expect(r.errors![0]!.extensions!.code).toBe('LIMIT_EXCEEDED');
  });

  it('createIndex and createView refuse bad definitions clearly', () => {
    for (const [input, code] of [
      [
        {
          name: 'v',
          sources: [],
          document: [{ alias: 'a', value: '1', type: 'Int' }],
          partition: [{ alias: 'p', value: "'x'", type: 'String' }],
        },
        'BAD_REQUEST',
      ],
      [
        {
          name: 'v',
          sources: [{ entity: 'Entry', triggers: ['OnInsert'] }],
          document: [{ alias: 'a', value: '1 +', type: 'Int' }],
          partition: [{ alias: 'p', value: "'x'", type: 'String' }],
        },
        'CEL_ERROR',
      ],
      [
        {
          name: 'v',
          sources: [{ entity: 'Entry', triggers: ['OnInsert'] }],
          document: [
            { alias: 'a', value: '1', type: 'Int' },
            { alias: 'a', value: '2', type: 'Int' },
          ],
          partition: [{ alias: 'p', value: "'x'", type: 'String' }],
        },
        'BAD_REQUEST',
      ],
      [
        {
          name: 'v',
          sources: [{ entity: 'Entry', triggers: ['OnInsert'] }],
          document: Array.from({ length: 33 }, (_, i) => ({ alias: `a${i}`, value: '1', type: 'Int' })),
          partition: [{ alias: 'p', value: "'x'", type: 'String' }],
        },
        'LIMIT_EXCEEDED',
      ],
    ] as const) {
      const r = engine.graphql(CREATE_VIEW, { i: input });
      expect(r.errors![0]!.extensions!.code, JSON.stringify(input).slice(0, 80)).toMatch(
        new RegExp(code === 'CEL_ERROR' ? 'CEL_ERROR|BAD_REQUEST' : code),
      );
    }
    expect(engine.graphql('{ schema { views(first: 10) { nodes { name } } } }').data).toEqual({
      schema: { views: { nodes: [] } },
    });
  });
});

describe('money exactness through param defaults', () => {
  it('literal DECIMAL defaults keep their scale; -0 is 0; float CEL defaults are refused', () => {
    let k = 0;
    const cases: Array<[string, string | null]> = [
      ['-0', '0'],
      ['1.50', '1.50'],
      ['00012.340', '12.340'],
      ['100000000000000000000000000000.000000000000000001', '100000000000000000000000000000.000000000000000001'],
      ['0.1 + 0.2', null],
    ];
    for (const [d, want] of cases) {
      k++;
      const created = engine.graphql('mutation($input: TranCodeInput!) { createTranCode(input: $input) { version } }', {
        input: {
          tranCodeId: id(9100 + k),
          code: `D${k}`,
          params: [{ name: 'amount', type: 'DECIMAL', default: d }],
          transaction: {},
          entries: [
            { accountId: `'${CASH}'`, units: 'params.amount', currency: "'USD'", direction: 'DEBIT' },
            { accountId: `'${ALICE}'`, units: 'params.amount', currency: "'USD'", direction: 'CREDIT' },
          ],
        },
      });
      const p = created.errors
        ? created
        : engine.graphql(POST, { input: { transactionId: id(8000 + k), tranCode: `D${k}`, params: {} } });
      if (want === null) {
        expect(p.errors, d).toBeDefined();
        expect(p.errors![0]!.extensions!.code).not.toBe('INTERNAL');
        continue;
      }
      expect(p.errors, d).toBeUndefined();
      expect(
        ok(engine, `{ transaction(id: "${id(8000 + k)}") { entries(first: 1) { nodes { units } } } }`).transaction
          .entries.nodes[0].units,
      ).toBe(want);
    }
  });
});
