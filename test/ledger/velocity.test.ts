import fc from 'fast-check';
import { beforeEach, describe, expect, it } from 'vitest';
import { Dec } from '../../src/decimal.js';
import type { Engine } from '../../src/engine.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';
import { createAccount, createTransferCode } from '../helpers/ledger.js';
import { startServer } from '../helpers/server.js';

let engine: Engine;

const LIMIT = `mutation($i: VelocityLimitInput!) { createVelocityLimit(input: $i) { velocityLimitId } }`;
const CONTROL = `mutation($i: VelocityControlInput!) { createVelocityControl(input: $i) { velocityControlId } }`;
const ATTACH = `mutation($c: UUID!, $a: UUID!, $p: JSON, $j: UUID) { attachVelocityControl(velocityControlId: $c, accountId: $a, params: $p, journalId: $j) { accountId params } }`;
const POST_X = `mutation($input: TransactionInput!) { postTransaction(input: $input) { transactionId voidedBy exceptions { type message detail } } }`;

/** An overdraft guard: the DEBIT side of the available balance at `layer` may not pass params.amount. */
function limit(n: number, extra: Record<string, unknown> = {}) {
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
function control(n: number, action: string, limits: string[], extra: Record<string, unknown> = {}) {
  ok(engine, CONTROL, {
    i: { velocityControlId: id(n), name: `control ${n}`, enforcement: { action }, velocityLimitIds: limits, ...extra },
  });
  return id(n);
}
const attach = (c: string, account: string, params?: unknown) =>
  ok(engine, ATTACH, { c, a: account, p: params ?? null }).attachVelocityControl;
const post = (n: number, from: string, to: string, amount: string, extra: Record<string, unknown> = {}) =>
  engine.graphql(POST_X, {
    input: { transactionId: id(7000 + n), tranCode: 'TRANSFER', params: { from, to, amount }, ...extra },
  });
const units = (account: string) =>
  ok(engine, `{ balance(accountId: "${account}") { settled { normalBalance { units } } } }`).balance.settled
    .normalBalance.units as string;

let cash: string;
let alice: string;
let bob: string;

beforeEach(async () => {
  engine = await newEngine();
  createTransferCode(engine);
  cash = createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
  alice = createAccount(engine, 2);
  bob = createAccount(engine, 3);
});

describe('velocity controls', () => {
  it('REJECT refuses a posting past the limit with the exception and its detail, and writes nothing', () => {
    const c = control(100, 'REJECT', [limit(10)]);
    attach(c, alice, { amount: '0' });
    expect(post(1, cash, alice, '50.00').errors).toBeUndefined();
    const refused = post(2, alice, bob, '60.00');
    expect(refused.data).toBeNull();
    const error = refused.errors![0]!;
    expect(error.message).toBe('velocity 0 USD exceeded, balance is 10.00 USD');
    expect(error.extensions).toMatchObject({
      code: 'BALANCE_VELOCITY_EXCEEDED',
      retryable: false,
      retriableError: false,
      exception: {
        transactionId: id(7002),
        type: 'VELOCITY_CONTROL',
        errorMessage: 'velocity 0 USD exceeded, balance is 10.00 USD',
        detail: {
          accountId: alice,
          layer: 'SETTLED',
          limit: '0',
          velocityControlId: c,
          velocityLimitId: id(10),
          violatingBalance: '10.00 USD',
          transactionId: id(7002),
        },
      },
    });
    expect(count(engine, 'transactions')).toBe(1);
    expect(units(alice)).toBe('50.00');
    // Within the limit it posts.
    expect(post(3, alice, bob, '50.00').errors).toBeUndefined();
    expect(units(alice)).toBe('0.00');
  });

  it('WARN posts and records the exception; VOID posts, voids at once and records it', () => {
    attach(control(100, 'WARN', [limit(10)]), alice);
    const warned = post(1, alice, bob, '5').data!.postTransaction as any;
    expect(warned.voidedBy).toBeNull();
    expect(warned.exceptions).toEqual([
      {
        type: 'VELOCITY_CONTROL',
        message: 'velocity 0 USD exceeded, balance is 5 USD',
        detail: expect.objectContaining({ accountId: alice, limit: '0', violatingBalance: '5 USD' }),
      },
    ]);
    expect(units(alice)).toBe('-5');
    attach(control(101, 'VOID', [limit(11)]), bob, { amount: '-100' }); // bob must hold 100 or more
    const voided = post(2, bob, cash, '1').data!.postTransaction as any;
    expect(voided.voidedBy).not.toBeNull();
    expect(voided.exceptions).toHaveLength(1);
    expect(units(bob)).toBe('5');
    const read = ok(engine, `{ transaction(id: "${id(7002)}") { voidedBy exceptions { type detail } } }`).transaction;
    expect(read.exceptions[0].detail.velocityControlId).toBe(id(101));
  });

  it('a control on a set limits the set’s rolled-up balance; the per-post override lowers enforcement to WARN', () => {
    ok(engine, `mutation { createAccountSet(input: {accountSetId: "${id(500)}", name: "wallets"}) { accountSetId } }`);
    ok(
      engine,
      `mutation { a: addToAccountSet(id: "${id(500)}", member: {memberType: ACCOUNT, memberId: "${alice}"}) { accountSetId }
      b: addToAccountSet(id: "${id(500)}", member: {memberType: ACCOUNT, memberId: "${bob}"}) { accountSetId } }`,
    );
    attach(control(100, 'REJECT', [limit(10)]), id(500));
    post(1, cash, alice, '10');
    expect(post(2, bob, cash, '4').errors).toBeUndefined(); // bob overdraws, the set does not
    const refused = post(3, alice, cash, '7');
    expect(refused.errors![0]!.extensions).toMatchObject({
      code: 'BALANCE_VELOCITY_EXCEEDED',
      exception: { detail: { accountId: id(500), violatingBalance: '1 USD' } },
    });
    const overridden = post(3, alice, cash, '7', { properties: { overrideVelocityEnforcement: { action: 'WARN' } } })
      .data!.postTransaction as any;
    expect(overridden.exceptions.map((e: any) => e.detail.accountId)).toEqual([id(500)]);
    expect(units(alice)).toBe('3');
  });

  it('properties.exception posts, voids at once and records the exception given', () => {
    const result = post(1, cash, alice, '3', {
      properties: { exception: { type: 'FRAUD_REVIEW', message: 'held for review', detail: { case: 42 } } },
    }).data!.postTransaction as any;
    expect(result.voidedBy).not.toBeNull();
    expect(result.exceptions).toEqual([{ type: 'FRAUD_REVIEW', message: 'held for review', detail: { case: 42 } }]);
    expect(units(alice)).toBe('0');
  });

  /** A REJECT control of at most params.amount of debits per effective day (credits do not count). */
  function dailyDebits(): string {
    const l = limit(10, {
      window: [{ alias: 'day', value: 'context.vars.transaction.effective' }],
      condition: 'context.vars.entry.direction == DEBIT',
      limit: { balance: [{ layer: 'SETTLED', amount: 'params.amount', normalBalanceType: 'DEBIT' }] },
    });
    return control(100, 'REJECT', [l], { condition: 'context.vars.entry.direction == DEBIT' });
  }

  it('a windowed limit with a condition counts only matching entries, per window; velocity() reads spent and remaining', () => {
    const c = dailyDebits();
    post(1, cash, alice, '500');
    attach(c, alice, { amount: '100' });
    expect(post(2, alice, bob, '60.00').errors).toBeUndefined();
    expect(post(3, cash, alice, '1000').errors).toBeUndefined(); // a credit: not counted
    expect(post(4, alice, bob, '50.00').errors![0]!.extensions!.code).toBe('BALANCE_VELOCITY_EXCEEDED');
    expect(post(5, alice, bob, '40.00').errors).toBeUndefined();
    const today = ok(engine, `{ transaction(id: "${id(7002)}") { effective } }`).transaction.effective;
    const v = ok(
      engine,
      `query($w: JSON!) { account(id: "${alice}") { velocity(window: $w) { spent remaining limit layer window } } }`,
      { w: { day: today } },
    ).account.velocity;
    expect(v).toEqual([{ spent: '100.00', remaining: '0.00', limit: '100', layer: 'SETTLED', window: { day: today } }]);
    const otherDay = ok(
      engine,
      `query($w: JSON!) { velocity(accountId: "${alice}", window: $w) { spent remaining } }`,
      { w: { day: '2000-01-01' } },
    ).velocity;
    expect(otherDay).toEqual([{ spent: '0', remaining: '100' }]);
    expect(fails(engine, `{ velocity(accountId: "${alice}", window: {}) { spent } }`).message).toContain(
      'window needs "day"',
    );
  });

  // Was a finding (second review of issue 33, H6): a void took its original's entries back out of
  // a limit's running totals whether or not they were ever counted, so voiding a debit made before
  // the control was attached freed limit never spent (180 of debits through a 100-a-day limit).
  it('a void of a posting made before the control was attached frees no limit: the totals count from the attachment', () => {
    const c = dailyDebits();
    post(1, cash, alice, '1000');
    expect(post(2, alice, bob, '80').errors).toBeUndefined(); // before the control is attached: not counted
    attach(c, alice, { amount: '100' });
    expect(engine.graphql(`mutation { voidTransaction(id: "${id(7002)}") { transactionId } }`).errors).toBeUndefined();
    expect(post(3, alice, bob, '100').errors).toBeUndefined();
    expect(post(4, alice, bob, '80').errors![0]!.extensions!.code).toBe('BALANCE_VELOCITY_EXCEEDED');
    const today = ok(engine, `{ transaction(id: "${id(7003)}") { effective } }`).transaction.effective;
    expect(
      ok(engine, `query($w: JSON!) { velocity(accountId: "${alice}", window: $w) { spent remaining } }`, {
        w: { day: today },
      }).velocity,
    ).toEqual([{ spent: '100', remaining: '0' }]);
    // A posting made after the attachment and voided gives its limit back, as before.
    expect(engine.graphql(`mutation { voidTransaction(id: "${id(7003)}") { transactionId } }`).errors).toBeUndefined();
    expect(post(5, alice, bob, '80').errors).toBeUndefined();
  });

  it('attaching again replaces the params; detaching stops the checks; lists read through the control and the account', () => {
    const c = control(100, 'REJECT', [limit(10)]);
    attach(c, alice, { amount: '5' });
    expect(post(1, alice, bob, '6').errors![0]!.extensions!.code).toBe('BALANCE_VELOCITY_EXCEEDED');
    expect(attach(c, alice, { amount: 'inf' })).toEqual({ accountId: alice, params: { amount: 'inf' } });
    expect(post(1, alice, bob, '6').errors).toBeUndefined();
    const listed = ok(
      engine,
      `{ attachedControls(accountId: "${alice}", first: 5) { nodes { velocityControl { name limits { name } } params } }
      velocityControl(id: "${c}") { enforcement { action } limits { velocityLimitId } } }`,
    );
    expect(listed.attachedControls.nodes).toEqual([
      { velocityControl: { name: 'control 100', limits: [{ name: 'limit 10' }] }, params: { amount: 'inf' } },
    ]);
    expect(listed.velocityControl).toEqual({
      enforcement: { action: 'REJECT' },
      limits: [{ velocityLimitId: id(10) }],
    });
    attach(c, alice, { amount: '-inf' });
    // On the limit's DEBIT side alice is 6 overdrawn; any balance passes −Infinity, so every posting
    // that moves it further (a debit) is refused, and one that moves it back (a credit) is not.
    expect(post(2, alice, bob, '1').errors![0]!.message).toBe('velocity -Infinity USD exceeded, balance is 7 USD');
    expect(post(2, cash, alice, '1').errors).toBeUndefined();
    ok(engine, `mutation { detachVelocityControl(velocityControlId: "${c}", accountId: "${alice}") { accountId } }`);
    expect(post(3, alice, bob, '1').errors).toBeUndefined();
    expect(fails(engine, `mutation { deleteVelocityLimit(id: "${id(10)}") { name } }`).message).toContain(
      'in 1 control',
    );
    ok(
      engine,
      `mutation { removeLimitFromControl(velocityControlId: "${c}", velocityLimitId: "${id(10)}") { name } deleteVelocityLimit(id: "${id(10)}") { name } deleteVelocityControl(id: "${c}") { name } }`,
    );
  });

  it('refuses bad definitions and params with clear errors, writing nothing', () => {
    const bad = fails(engine, LIMIT, {
      i: { velocityLimitId: id(10), name: 'x', limit: { balance: [{ layer: 'SETTLED', amount: 'params.amount +' }] } },
    });
    expect(bad.code).toBe('CEL_ERROR');
    expect(bad.message).toContain('limit.balance[0].amount');
    expect(fails(engine, LIMIT, { i: { velocityLimitId: id(10), name: 'x', limit: { balance: [] } } }).code).toBe(
      'BAD_REQUEST',
    );
    expect(
      fails(engine, LIMIT, {
        i: {
          velocityLimitId: id(10),
          name: 'x',
          currency: 'usd',
          limit: { balance: [{ layer: 'SETTLED', amount: '1' }] },
        },
      }).message,
    ).toContain('not a currency code');
    // Params are declared as a tran code's are: identifiers, distinct, at most tranCodeParamsMax.
    const params = (n: number) => Array.from({ length: n }, (_, i) => ({ name: `p${i}`, type: 'DECIMAL' }));
    const many = fails(engine, LIMIT, {
      i: {
        velocityLimitId: id(10),
        name: 'x',
        params: params(65),
        limit: { balance: [{ layer: 'SETTLED', amount: '1' }] },
      },
    });
    expect(many.code).toBe('LIMIT_EXCEEDED');
    expect(many.message).toContain('tranCodeParamsMax is 64');
    expect(
      fails(engine, LIMIT, {
        i: {
          velocityLimitId: id(10),
          name: 'x',
          params: [{ name: 'a' }, { name: 'a' }],
          limit: { balance: [{ layer: 'SETTLED', amount: '1' }] },
        },
      }).message,
    ).toContain('declared twice');
    expect(
      fails(engine, CONTROL, { i: { velocityControlId: id(100), name: 'x', velocityLimitIds: [id(404)] } }).code,
    ).toBe('NOT_FOUND');
    expect(count(engine, 'velocity_controls')).toBe(0);
    const c = control(100, 'REJECT', [limit(10)]);
    const wrong = fails(engine, ATTACH, { c, a: alice, p: { amount: 'lots' } });
    expect(wrong.code).toBe('BAD_REQUEST');
    expect(wrong.message).toContain('"lots"');
    expect(fails(engine, ATTACH, { c, a: id(404), p: null }).code).toBe('NOT_FOUND');
    expect(fails(engine, ATTACH, { c: id(404), a: alice, p: null }).code).toBe('NOT_FOUND');
    expect(count(engine, 'velocity_attachments')).toBe(0);
    // A condition that does not evaluate to a bool fails the posting, naming the control.
    const weird = control(101, 'REJECT', [limit(11)], { condition: "'yes'" });
    attach(weird, alice);
    expect(post(1, cash, alice, '1').errors![0]!.message).toContain('control 101 condition');
    expect(count(engine, 'transactions')).toBe(0);
  });

  it('velocityControlsPerAccountMax, velocityLimitsPerControlMax and velocityWindowKeysMax are enforced', async () => {
    engine = await newEngine({
      limits: { velocityControlsPerAccountMax: 1, velocityLimitsPerControlMax: 1, velocityWindowKeysMax: 1 },
    });
    createAccount(engine, 2);
    const l = limit(10);
    attach(control(100, 'WARN', [l]), id(2));
    const second = fails(engine, ATTACH, { c: control(101, 'WARN', []), a: id(2), p: null });
    expect(second).toMatchObject({ code: 'LIMIT_EXCEEDED' });
    expect(second.message).toContain('velocityControlsPerAccountMax is 1');
    expect(
      fails(
        engine,
        `mutation { addLimitToControl(velocityControlId: "${id(100)}", velocityLimitId: "${limit(11)}") { name } }`,
      ).message,
    ).toContain('velocityLimitsPerControlMax is 1');
    const windows = fails(engine, LIMIT, {
      i: {
        velocityLimitId: id(12),
        name: 'w',
        window: [
          { alias: 'a', value: '1' },
          { alias: 'b', value: '2' },
        ],
        limit: { balance: [{ layer: 'SETTLED', amount: '1' }] },
      },
    });
    expect(windows.message).toContain('velocityWindowKeysMax is 1');
  });

  it('the attacker’s test: a client may not attach, detach or read controls on accounts its policies do not cover', () => {
    const c = control(100, 'REJECT', [limit(10)]);
    attach(c, alice);
    const client = (principal: string, policies: unknown[]) =>
      ok(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', {
        i: { principal, name: principal, policies },
      });
    // Mallory may post and manage controls, but not on alice's account.
    client('mallory', [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
      {
        effect: 'DENY',
        actions: ['UPDATE', 'SELECT'],
        resources: ['financial.VelocityControl'],
        assertions: { alice: `context.document.accountId == '${alice}'` },
      },
    ]);
    expect(
      fails(
        engine,
        `mutation { detachVelocityControl(velocityControlId: "${c}", accountId: "${alice}") { accountId } }`,
        undefined,
        'mallory',
      ).code,
    ).toBe('ACCESS_DENIED');
    expect(fails(engine, ATTACH, { c, a: alice, p: { amount: 'inf' } }, 'mallory').code).toBe('ACCESS_DENIED');
    expect(fails(engine, `{ velocity(accountId: "${alice}", window: {}) { spent } }`, undefined, 'mallory').code).toBe(
      'ACCESS_DENIED',
    );
    // Nor can she dodge the control by overriding enforcement without the right to: the override is part of the post she sends, so the control still applies to what she may post.
    expect(count(engine, 'velocity_attachments')).toBe(1);
    client('reader', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] }]);
    expect(fails(engine, CONTROL, { i: { velocityControlId: id(101), name: 'x' } }, 'reader').code).toBe(
      'ACCESS_DENIED',
    );
  });
});

// ------------------------------------------------------------------------------------------------
// One posting gate: every write that moves a balance (post, void, a batch, a tool's posting, a
// membership change) is judged by the same rule, and the rule judges the direction of the write.

const CLIENT = 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }';
const VOID =
  'mutation($id: UUID!) { voidTransaction(id: $id) { transactionId voidOf exceptions { type message detail } } }';
const VOID_WITH =
  'mutation($id: UUID!, $p: VoidPropertiesInput) { voidTransaction(id: $id, properties: $p) { transactionId voidOf exceptions { type message detail } } }';
const as = (principal?: string) => (principal === undefined ? {} : { principal });
const client = (principal: string, policies: unknown[]) =>
  ok(engine, CLIENT, { i: { principal, name: principal, policies } });
const postAs = (
  n: number,
  from: string,
  to: string,
  amount: string,
  principal?: string,
  extra: Record<string, unknown> = {},
) =>
  engine.graphql(
    POST_X,
    {
      input: {
        transactionId: id(7000 + n),
        tranCode: 'TRANSFER',
        params: { from, to, amount, ...(extra.params as object) },
        ...(extra.properties ? { properties: extra.properties } : {}),
      },
    },
    as(principal),
  );
const voidOf = (n: number, principal?: string) => engine.graphql(VOID, { id: id(7000 + n) }, as(principal));
const voidedBy = (n: number) =>
  ok(engine, `{ transaction(id: "${id(7000 + n)}") { voidedBy } }`).transaction.voidedBy as string | null;
/** A refund desk: reads the ledger and may void (UPDATE and INSERT on financial.Transaction), but may not lower the controls. */
const REFUNDS = [
  { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
  { effect: 'ALLOW', actions: ['INSERT', 'UPDATE'], resources: ['financial.Transaction'] },
  { effect: 'ALLOW', actions: ['INSERT'], resources: ['financial.Entry'] },
  { effect: 'ALLOW', actions: ['UPDATE'], resources: ['financial.Balance'] },
];
/** A payments client: posts, and may not read balances. */
const PAYMENTS = [
  { effect: 'ALLOW', actions: ['INSERT'], resources: ['financial.Transaction', 'financial.Entry'] },
  { effect: 'ALLOW', actions: ['UPDATE'], resources: ['financial.Balance'] },
];

describe('one posting gate (the attacker’s tests)', () => {
  it('a refund desk that may void but not override cannot overdraw a REJECT-guarded account by voiding a spent deposit; an operator can, and the void records the exception', () => {
    const c = control(100, 'REJECT', [limit(10)]);
    attach(c, alice); // alice may not go below 0
    post(1, cash, alice, '100');
    post(2, alice, bob, '100');
    client('refunds', REFUNDS);
    const refused = voidOf(1, 'refunds');
    expect(refused.errors?.[0]?.extensions).toMatchObject({
      code: 'BALANCE_VELOCITY_EXCEEDED',
      exception: {
        type: 'VELOCITY_CONTROL',
        detail: { accountId: alice, velocityControlId: c, violatingBalance: '100 USD' },
      },
    });
    expect(count(engine, 'transactions')).toBe(2);
    expect(units(alice)).toBe('0');
    expect(voidedBy(1)).toBeNull();
    // The override needs UPDATE on financial.VelocityControl, on a void as on a post.
    const overriding = engine.graphql(
      VOID_WITH,
      { id: id(7001), p: { overrideVelocityEnforcement: { action: 'WARN' } } },
      as('refunds'),
    );
    expect(overriding.errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
    expect(count(engine, 'transactions')).toBe(2);
    // An operator who may lower the controls voids it past the limit; the reversal records why.
    const overridden = ok(engine, VOID_WITH, {
      id: id(7001),
      p: { overrideVelocityEnforcement: { action: 'WARN' } },
    }).voidTransaction;
    expect(overridden.voidOf).toBe(id(7001));
    expect(overridden.exceptions).toEqual([
      {
        type: 'VELOCITY_CONTROL',
        message: 'velocity 0 USD exceeded, balance is 100 USD',
        detail: expect.objectContaining({
          accountId: alice,
          velocityControlId: c,
          transactionId: overridden.transactionId,
        }),
      },
    ]);
    expect(
      ok(engine, `{ transaction(id: "${overridden.transactionId}") { exceptions { type } } }`).transaction.exceptions,
    ).toEqual([{ type: 'VELOCITY_CONTROL' }]);
    expect(units(alice)).toBe('-100');
  });

  it('a write that reduces an overdraft passes a REJECT control; one that deepens it does not; one that leaves the guarded balance where it is passes', () => {
    const c = control(100, 'REJECT', [limit(10)]);
    attach(c, alice);
    post(1, cash, alice, '100');
    post(2, alice, bob, '100');
    ok(engine, VOID_WITH, { id: id(7001), p: { overrideVelocityEnforcement: { action: 'WARN' } } }); // alice is at -100
    client('refunds', REFUNDS);
    const deposit = postAs(3, cash, alice, '50', 'refunds');
    expect(deposit.errors).toBeUndefined();
    expect((deposit.data!.postTransaction as any).exceptions).toEqual([]);
    expect(units(alice)).toBe('-50');
    const deeper = postAs(4, alice, bob, '0.01', 'refunds');
    expect(deeper.errors?.[0]?.extensions).toMatchObject({
      code: 'BALANCE_VELOCITY_EXCEEDED',
      exception: { detail: { violatingBalance: '50.01 USD' } },
    });
    // PENDING entries do not move the SETTLED balance the limit reads: not worse, so not refused.
    expect(postAs(5, alice, bob, '10', 'refunds', { params: { layer: 'PENDING' } }).errors).toBeUndefined();
    // Voiding the deepening transfer of 100 (bob pays it back) improves alice: allowed to the desk.
    expect(voidOf(2, 'refunds').errors).toBeUndefined();
    expect(units(alice)).toBe('50');
    // A VOID control does not void a posting that improves a balance past its limit either.
    attach(control(101, 'VOID', [limit(11)]), bob, { amount: '-1000' }); // bob must hold 1000
    const paid = postAs(6, cash, bob, '1', 'refunds').data!.postTransaction as any;
    expect(paid).toMatchObject({ voidedBy: null, exceptions: [] });
    expect(postAs(7, bob, cash, '1', 'refunds').data!.postTransaction).toMatchObject({
      voidedBy: expect.any(String),
      exceptions: [expect.objectContaining({ type: 'VELOCITY_CONTROL' })],
    });
  });

  it('WARN records the exception on the void; a void a VOID control would void is refused (a void cannot be voided)', () => {
    attach(control(100, 'WARN', [limit(10)]), alice);
    attach(control(101, 'VOID', [limit(11)]), bob);
    post(1, cash, alice, '100');
    post(2, alice, bob, '100');
    post(3, bob, cash, '100');
    const warned = ok(engine, VOID, { id: id(7001) }).voidTransaction;
    expect(warned.exceptions).toEqual([
      expect.objectContaining({
        type: 'VELOCITY_CONTROL',
        detail: expect.objectContaining({ accountId: alice, velocityControlId: id(100) }),
      }),
    ]);
    expect(units(alice)).toBe('-100');
    const transactions = count(engine, 'transactions');
    const refused = voidOf(2); // alice back up (improves), bob to -100 (past his VOID limit)
    expect(refused.errors?.[0]?.extensions).toMatchObject({
      code: 'BALANCE_VELOCITY_EXCEEDED',
      exception: { detail: { accountId: bob, velocityControlId: id(101) } },
    });
    expect(refused.errors?.[0]?.extensions?.hint).toContain('cannot be voided');
    expect(count(engine, 'transactions')).toBe(transactions);
    expect(units(bob)).toBe('0');
    expect(voidedBy(2)).toBeNull();
  });

  it('a void is judged against the windowed totals it changes: taking back a counted deposit is refused when the day is then past its limit', () => {
    const l = limit(10, { window: [{ alias: 'day', value: 'context.vars.transaction.effective' }] }); // net debits of a day at most params.amount
    attach(control(100, 'REJECT', [l]), alice, { amount: '100' });
    post(1, cash, alice, '1000');
    expect(post(2, alice, bob, '1050').errors).toBeUndefined(); // the day's net debit is 50
    const refused = voidOf(1);
    expect(refused.errors?.[0]?.extensions).toMatchObject({
      code: 'BALANCE_VELOCITY_EXCEEDED',
      exception: { detail: { accountId: alice, velocityLimitId: l, violatingBalance: '1050 USD' } },
    });
    expect(voidedBy(1)).toBeNull();
    // Voiding the spend instead takes the day back to -1000: allowed.
    expect(voidOf(2).errors).toBeUndefined();
  });

  it('a membership change passes the same gate: a control with a condition is not skipped, and a change that improves a set past its limit is allowed', () => {
    ok(
      engine,
      `mutation { a: createAccountSet(input: {accountSetId: "${id(500)}", name: "guarded"}) { accountSetId } b: createAccountSet(input: {accountSetId: "${id(501)}", name: "wallets"}) { accountSetId } }`,
    );
    // A condition reads the posting; a membership change has none, so the control is judged as if it held.
    attach(control(100, 'REJECT', [limit(10)], { condition: 'context.vars.entry.layer == SETTLED' }), id(500));
    post(1, alice, cash, '500'); // alice is overdrawn by 500
    const ADD =
      'mutation($s: UUID!, $m: UUID!) { addToAccountSet(id: $s, member: {memberType: ACCOUNT, memberId: $m}) { accountSetId } }';
    const REMOVE =
      'mutation($s: UUID!, $m: UUID!) { removeFromAccountSet(id: $s, member: {memberType: ACCOUNT, memberId: $m}) { accountSetId } }';
    const added = engine.graphql(ADD, { s: id(500), m: alice });
    expect(added.errors?.[0]?.extensions).toMatchObject({
      code: 'BALANCE_VELOCITY_EXCEEDED',
      exception: { detail: { accountId: id(500), velocityControlId: id(100) } },
    });
    expect(count(engine, 'account_set_members')).toBe(0);
    // wallets = {bob, cash-funded carol}: past its limit through an override, removing the overdrawn member improves it.
    const carol = createAccount(engine, 4);
    attach(control(101, 'REJECT', [limit(11)]), id(501));
    ok(engine, ADD, { s: id(501), m: bob });
    ok(engine, ADD, { s: id(501), m: carol });
    post(2, cash, carol, '10');
    post(3, bob, cash, '30', { properties: { overrideVelocityEnforcement: { action: 'WARN' } } }); // wallets at -20
    expect(engine.graphql(REMOVE, { s: id(501), m: bob }).errors).toBeUndefined(); // wallets at 10
    expect(engine.graphql(ADD, { s: id(501), m: bob }).errors?.[0]?.extensions?.code).toBe('BALANCE_VELOCITY_EXCEEDED'); // back to -20: worse
    expect(engine.graphql(REMOVE, { s: id(501), m: carol }).errors).toBeUndefined(); // from 10 to 0: worse, but within the limit
  });

  it('a batch as `tally import` sends it and a tool’s void pass the same gate', () => {
    attach(control(100, 'REJECT', [limit(10)]), alice);
    post(1, cash, alice, '10');
    const rows = [
      { transactionId: id(8001), tranCode: 'TRANSFER', params: { from: alice, to: bob, amount: '4' } },
      { transactionId: id(8002), tranCode: 'TRANSFER', params: { from: alice, to: bob, amount: '7' } },
      { transactionId: id(8003), tranCode: 'TRANSFER', params: { from: cash, to: alice, amount: '1' } },
    ];
    const batch = engine.graphql(
      `mutation Import(${rows.map((_, i) => `$t${i}: TransactionInput!`).join(', ')}) {\n${rows.map((_, i) => `r${i}: postTransaction(input: $t${i}) { transactionId }`).join('\n')}\n}`,
      Object.fromEntries(rows.map((r, i) => [`t${i}`, r])),
    );
    expect(batch.errors?.[0]).toMatchObject({ path: ['r1'], extensions: { code: 'BALANCE_VELOCITY_EXCEEDED' } });
    expect(count(engine, 'transactions')).toBe(1);
    post(2, alice, bob, '10'); // alice at 0
    ok(
      engine,
      'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
      {
        id: id(600),
        input: {
          name: 'refund',
          config: {
            runtime: 'javascript',
            src: 'function run(event) { return graphql("mutation($id: UUID!) { voidTransaction(id: $id) { transactionId } }", { id: event.data.id }).voidTransaction; }',
          },
          tool: {
            description: 'Voids a transaction.',
            inputSchema: { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] },
          },
          policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }],
        },
      },
    );
    const invoked = ok(
      engine,
      'mutation($e: UUID!, $i: JSON) { actions { invokeAction(name: "refund", input: {executionId: $e, actionVersion: 1, input: $i}) { status error { code } } } }',
      { e: id(601), i: { id: id(7001) } },
    ).actions.invokeAction;
    expect(invoked).toEqual({ status: 'FAILED', error: { code: 'BALANCE_VELOCITY_EXCEEDED' } });
    expect(voidedBy(1)).toBeNull();
    expect(units(alice)).toBe('0');
  });

  it('a client that may post but not read balances learns nothing from @dryRun probes; its real refusals keep the code and are logged', async () => {
    const logged: Array<Record<string, unknown>> = [];
    const ignore = () => {};
    engine = await newEngine({
      logger: {
        debug: ignore,
        info: ignore,
        error: ignore,
        warn: (fields, message) => logged.push({ ...fields, message }),
      },
    });
    createTransferCode(engine);
    createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
    createAccount(engine, 2);
    createAccount(engine, 3);
    const c = control(100, 'REJECT', [limit(10)]);
    attach(c, alice);
    post(1, cash, alice, '1234.56');
    client('payments', PAYMENTS);
    expect(
      fails(engine, `{ balance(accountId: "${alice}") { settled { normalBalance { units } } } }`, undefined, 'payments')
        .code,
    ).toBe('ACCESS_DENIED');
    let probes = 0;
    const DRY = 'mutation($i: TransactionInput!) @dryRun { postTransaction(input: $i) { transactionId } }';
    const probe = (amount: string, principal = 'payments') => {
      const transactionId = id(9000 + ++probes);
      const r = engine.graphql(
        DRY,
        { i: { transactionId, tranCode: 'TRANSFER', params: { from: alice, to: bob, amount } } },
        as(principal),
      );
      // The id and the time differ from probe to probe by themselves: the rest is the answer.
      return JSON.parse(
        JSON.stringify(r)
          .replaceAll(transactionId, 'TX')
          .replace(/\d{4}-\d\d-\d\dT[\d:.]+Z/g, 'TIME'),
      );
    };
    // Whether it fits or not, a non-reader's dry run gets the same answer: not judged.
    const fits = probe('1');
    const over = probe('5000');
    expect(fits).toEqual(over);
    expect(fits.errors[0].extensions).toMatchObject({
      code: 'BALANCE_VELOCITY_EXCEEDED',
      exception: { detail: { accountId: alice, violatingBalance: null } },
    });
    expect(fits.errors[0].message).not.toContain('1234');
    // The binary search of the review finds nothing.
    let lo = 0;
    let hi = 100_000_000;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (!probe((mid / 100).toFixed(2)).errors) lo = mid;
      else hi = mid - 1;
    }
    expect((lo / 100).toFixed(2)).not.toBe('1234.56');
    expect(count(engine, 'transactions')).toBe(1);
    // Real postings are judged: a refusal keeps its code (the balance withheld), and is logged with who asked.
    const refused = postAs(2, alice, bob, '5000', 'payments');
    expect(refused.errors?.[0]?.extensions).toMatchObject({
      code: 'BALANCE_VELOCITY_EXCEEDED',
      exception: { detail: { accountId: alice, velocityControlId: c, violatingBalance: null } },
    });
    expect(postAs(3, alice, bob, '1', 'payments').errors).toBeUndefined();
    expect(logged).toContainEqual(
      expect.objectContaining({
        event: 'velocity',
        write: 'post',
        principal: 'payments',
        accountId: alice,
        velocityControlId: c,
        dryRun: false,
        balanceReadable: false,
      }),
    );
    expect(logged).toContainEqual(
      expect.objectContaining({
        event: 'velocity',
        write: 'post',
        principal: 'payments',
        accountId: alice,
        dryRun: true,
        judged: false,
      }),
    );
    expect(JSON.stringify(logged)).not.toContain('1233.56');
    // A client that may read the balance gets its dry runs judged.
    client('desk', [...PAYMENTS, { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.Balance'] }]);
    expect(probe('1233.56', 'desk').errors).toBeUndefined();
    expect(probe('1233.57', 'desk').errors[0].extensions.exception.detail.violatingBalance).toBe('0.01 USD');
    // A dry-run void by a client that may void but not read the balance is not judged either.
    client('voider', [...PAYMENTS, { effect: 'ALLOW', actions: ['UPDATE'], resources: ['financial.Transaction'] }]);
    const dryVoid = (n: number) =>
      JSON.stringify(
        engine.graphql(
          `mutation @dryRun { voidTransaction(id: "${id(7000 + n)}") { transactionId } }`,
          {},
          as('voider'),
        ).errors?.[0]?.extensions?.code,
      );
    expect(dryVoid(1)).toBe(dryVoid(3)); // one would overdraw alice, the other pays her back
    expect(dryVoid(1)).toBe('"BALANCE_VELOCITY_EXCEEDED"');
    // Nor is a posting a tool makes inside a @dryRun request (the tool's own graphql call is not @dryRun).
    ok(
      engine,
      'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
      {
        id: id(600),
        input: {
          name: 'pay',
          config: {
            runtime: 'javascript',
            src: 'function run(event) { return graphql("mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }", { i: event.data }).postTransaction; }',
          },
          tool: { description: 'Posts a transaction.', inputSchema: { type: 'object' } },
          policies: [{ effect: 'ALLOW', actions: ['INSERT', 'UPDATE'], resources: ['financial.*'] }],
        },
      },
    );
    client('payments_tool', [...PAYMENTS, { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }]);
    const viaTool = (n: number, amount: string) =>
      (
        engine.graphql(
          'mutation($e: UUID!, $i: JSON) @dryRun { actions { invokeAction(name: "pay", input: {executionId: $e, actionVersion: 1, input: $i}) { status error { code message } } } }',
          {
            e: id(610 + n),
            i: { transactionId: id(620 + n), tranCode: 'TRANSFER', params: { from: alice, to: bob, amount } },
          },
          as('payments_tool'),
        ).data as any
      )?.actions?.invokeAction;
    expect(viaTool(1, '1')).toEqual(viaTool(2, '5000'));
    expect(viaTool(3, '1')).toMatchObject({ status: 'FAILED', error: { code: 'BALANCE_VELOCITY_EXCEEDED' } });
  });
});

// ------------------------------------------------------------------------------------------------
// Property: random posts across nested sets with controls attached.

const WALLETS = 6;
type Post = { from: number; to: number; amount: string; layer: 'SETTLED' | 'PENDING' };
const amount = fc
  .tuple(fc.integer({ min: 1, max: 40_000 }), fc.constantFrom(0, 2))
  .map(([n, scale]) => (scale === 0 ? String(Math.ceil(n / 100)) : (n / 100).toFixed(2)));
const step: fc.Arbitrary<Post> = fc
  .record({
    from: fc.integer({ min: -1, max: WALLETS - 1 }),
    to: fc.integer({ min: -1, max: WALLETS - 1 }),
    amount,
    layer: fc.constantFrom('SETTLED' as const, 'PENDING' as const),
  })
  .filter((p) => p.from !== p.to);

describe('velocity and sets, property', () => {
  it('every set equals the sum of its members at every layer, no REJECT limit is ever passed, WARN and VOID record their exceptions', async () => {
    // Each outcome must actually happen across the runs, or the property proves little.
    const seen = { posted: 0, rejected: 0, warned: 0, voided: 0 };
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 5, maxLength: 25 }), async (steps) => {
        engine = await newEngine();
        createTransferCode(engine);
        const cashId = createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
        const wallet = (i: number) => (i < 0 ? cashId : id(10 + i));
        for (let i = 0; i < WALLETS; i++) createAccount(engine, 10 + i);
        // S1 = {w0, w1}, S2 = {w2, w3}, TOP = {S1, S2, w4}; w5 alone.
        const S1 = id(201),
          S2 = id(202),
          TOP = id(200);
        ok(
          engine,
          `mutation {
          top: createAccountSet(input: {accountSetId: "${TOP}", name: "top"}) { accountSetId }
          s1: createAccountSet(input: {accountSetId: "${S1}", name: "s1", accountSetIds: ["${TOP}"]}) { accountSetId }
          s2: createAccountSet(input: {accountSetId: "${S2}", name: "s2", accountSetIds: ["${TOP}"]}) { accountSetId }
          a0: addToAccountSet(id: "${S1}", member: {memberType: ACCOUNT, memberId: "${wallet(0)}"}) { accountSetId }
          a1: addToAccountSet(id: "${S1}", member: {memberType: ACCOUNT, memberId: "${wallet(1)}"}) { accountSetId }
          a2: addToAccountSet(id: "${S2}", member: {memberType: ACCOUNT, memberId: "${wallet(2)}"}) { accountSetId }
          a3: addToAccountSet(id: "${S2}", member: {memberType: ACCOUNT, memberId: "${wallet(3)}"}) { accountSetId }
          a4: addToAccountSet(id: "${TOP}", member: {memberType: ACCOUNT, memberId: "${wallet(4)}"}) { accountSetId } }`,
        );
        // REJECT: TOP's settled funds never negative, and w0 may overdraw 5. WARN: S2's available(PENDING) above 500.
        // VOID: w5's available(PENDING) above 100.
        const guard = limit(10);
        const cap = limit(11, {
          limit: { balance: [{ layer: 'PENDING', amount: 'params.amount', normalBalanceType: 'CREDIT' }] },
        });
        const reject = control(100, 'REJECT', [guard]);
        const warn = control(101, 'WARN', [cap]);
        const voiding = control(102, 'VOID', [cap]);
        attach(reject, TOP, { amount: '0' });
        attach(reject, wallet(0), { amount: '5' });
        attach(warn, S2, { amount: '500' });
        attach(voiding, wallet(5), { amount: '100' });

        const totals = (account: string) => {
          const rows = engine.db.prepare('SELECT * FROM balances WHERE account_id = ?').all(account) as Array<
            Record<string, string>
          >;
          const sum: Record<string, Dec> = {};
          for (const r of rows)
            for (const c of [
              'settled_dr',
              'settled_cr',
              'pending_dr',
              'pending_cr',
              'encumbrance_dr',
              'encumbrance_cr',
            ])
              sum[c] = (sum[c] ?? new Dec(0)).plus(r[c]!);
          return sum;
        };
        const same = (a: Record<string, Dec>, parts: Array<Record<string, Dec>>) => {
          for (const c of [
            'settled_dr',
            'settled_cr',
            'pending_dr',
            'pending_cr',
            'encumbrance_dr',
            'encumbrance_cr',
          ]) {
            const want = parts.reduce((s, p) => s.plus(p[c] ?? 0), new Dec(0));
            expect((a[c] ?? new Dec(0)).eq(want), `${c}: ${a[c]} vs ${want}`).toBe(true);
          }
        };
        const settledDebitSide = (t: Record<string, Dec>) => (t.settled_dr ?? new Dec(0)).minus(t.settled_cr ?? 0);
        const availablePendingCredit = (t: Record<string, Dec>) =>
          (t.settled_cr ?? new Dec(0))
            .plus(t.pending_cr ?? 0)
            .minus(t.settled_dr ?? 0)
            .minus(t.pending_dr ?? 0);

        for (const [n, p] of steps.entries()) {
          const before = count(engine, 'transactions');
          const s2Before = availablePendingCredit(totals(S2));
          const result = engine.graphql(POST_X, {
            input: {
              transactionId: id(8000 + n),
              tranCode: 'TRANSFER',
              params: { from: wallet(p.from), to: wallet(p.to), amount: p.amount, layer: p.layer },
            },
          });
          if (result.errors) {
            seen.rejected++;
            expect(result.errors[0]!.extensions!.code).toBe('BALANCE_VELOCITY_EXCEEDED');
            expect(count(engine, 'transactions')).toBe(before);
          } else {
            const t = result.data!.postTransaction as {
              voidedBy: string | null;
              exceptions: Array<{ detail: { velocityControlId: string; accountId: string } }>;
            };
            // The WARN control judged S2 as the posting left it, before a VOID control (on w5) voided it:
            // a warning when the posting left S2 past 500 and further past than before (strictly worse).
            const inS2 = (w: number) => w === 2 || w === 3;
            const s2Posted = s2Before.plus(inS2(p.to) ? p.amount : 0).minus(inS2(p.from) ? p.amount : 0);
            const warned = t.exceptions.some((e) => e.detail.velocityControlId === warn);
            expect(warned).toBe(s2Posted.gt(500) && s2Posted.gt(s2Before));
            const touchesW5 = p.from === 5 || p.to === 5;
            const voided = t.exceptions.some((e) => e.detail.velocityControlId === voiding);
            seen.posted++;
            if (warned) seen.warned++;
            if (voided) seen.voided++;
            expect(voided).toBe(t.voidedBy !== null);
            if (voided) expect(touchesW5 && p.to === 5).toBe(true); // only a credit to w5 takes it further past its cap
          }
          // Invariants after every request.
          same(totals(S1), [totals(wallet(0)), totals(wallet(1))]);
          same(totals(S2), [totals(wallet(2)), totals(wallet(3))]);
          same(totals(TOP), [totals(S1), totals(S2), totals(wallet(4))]);
          expect(settledDebitSide(totals(TOP)).lte(0)).toBe(true);
          expect(settledDebitSide(totals(wallet(0))).lte(5)).toBe(true);
          expect(availablePendingCredit(totals(wallet(5))).lte(100)).toBe(true);
        }
        engine.close();
      }),
      { numRuns: 25 },
    );
    expect(seen.posted).toBeGreaterThan(0);
    expect(seen.rejected).toBeGreaterThan(0);
    expect(seen.warned).toBeGreaterThan(0);
    expect(seen.voided).toBeGreaterThan(0);
  }, 120_000);
});

describe('Transaction.properties: what the posting was sent with, readable as the reference ledger has it', () => {
  it('over HTTP: properties { overrideVelocityEnforcement { action } } on the posting and on a void sent with one; null otherwise', async () => {
    const ADMIN = 'tly_velocity-properties-admin';
    const running = await startServer(ADMIN);
    engine = running.engine;
    try {
      createTransferCode(engine);
      cash = createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
      alice = createAccount(engine, 2);
      bob = createAccount(engine, 3);
      attach(control(100, 'REJECT', [limit(10)]), alice);
      const http = async (query: string, variables: Record<string, unknown> = {}) => {
        const response = await fetch(running.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
          body: JSON.stringify({ query, variables }),
        });
        const body = (await response.json()) as { data?: any; errors?: unknown };
        expect(body.errors).toBeUndefined();
        return body.data;
      };
      const FIELDS = 'transactionId properties { overrideVelocityEnforcement { action } }';
      const POST = `mutation($i: TransactionInput!) { postTransaction(input: $i) { ${FIELDS} } }`;
      const input = (n: number, amount: string, extra: Record<string, unknown> = {}) => ({
        i: { transactionId: id(7000 + n), tranCode: 'TRANSFER', params: { from: alice, to: bob, amount }, ...extra },
      });
      const overridden = await http(
        POST,
        input(1, '5', { properties: { overrideVelocityEnforcement: { action: 'WARN' } } }),
      );
      expect(overridden.postTransaction.properties).toEqual({ overrideVelocityEnforcement: { action: 'WARN' } });
      // Sent with an override that changed nothing (no control broken): recorded all the same.
      await http(
        `mutation { postTransaction(input: {transactionId: "${id(7002)}", tranCode: "TRANSFER", params: {from: "${cash}", to: "${alice}", amount: "100"}, properties: {overrideVelocityEnforcement: {action: REJECT}}}) { transactionId } }`,
      );
      const plain = await http(POST, input(3, '1'));
      expect(plain.postTransaction.properties).toEqual({ overrideVelocityEnforcement: null });
      const read = await http(
        `{ a: transaction(id: "${id(7001)}") { ${FIELDS} exceptions { type } } b: transaction(id: "${id(7002)}") { ${FIELDS} } c: transaction(id: "${id(7003)}") { ${FIELDS} } }`,
      );
      expect(read.a).toEqual({
        transactionId: id(7001),
        properties: { overrideVelocityEnforcement: { action: 'WARN' } },
        exceptions: [{ type: 'VELOCITY_CONTROL' }],
      });
      expect(read.b.properties).toEqual({ overrideVelocityEnforcement: { action: 'REJECT' } });
      expect(read.c.properties).toEqual({ overrideVelocityEnforcement: null });
      const voided = await http(
        `mutation { voidTransaction(id: "${id(7002)}", properties: {overrideVelocityEnforcement: {action: WARN}}) { ${FIELDS} voidOf exceptions { type } } }`,
      );
      expect(voided.voidTransaction).toMatchObject({
        voidOf: id(7002),
        properties: { overrideVelocityEnforcement: { action: 'WARN' } },
        exceptions: [{ type: 'VELOCITY_CONTROL' }],
      });
    } finally {
      await running.stop();
    }
  });
});
