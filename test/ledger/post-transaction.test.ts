import { beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { balanceOf, createAccount, createTransferCode, POST } from '../helpers/ledger.js';
import { count, fails, id, newEngine, ok, ON_POSTGRES } from '../helpers/engine.js';

let engine: Engine;
let alice: string;
let bob: string;
let transferCode: string;

beforeEach(async () => {
  engine = await newEngine();
  alice = createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
  bob = createAccount(engine, 2);
  transferCode = createTransferCode(engine);
});

const post = (n: number, amount: string, extra: Record<string, unknown> = {}) =>
  ok(engine, POST, {
    input: { transactionId: id(1000 + n), tranCode: 'TRANSFER', params: { from: alice, to: bob, amount, ...extra } },
  }).postTransaction;

describe('postTransaction', () => {
  it('writes a transaction with two entries and updates both balances', async () => {
    const t = post(1, '50');
    expect(t).toMatchObject({ transactionId: id(1001), correlationId: id(1001), voidedBy: null });
    expect(balanceOf(engine, bob).settled.normalBalance).toEqual({ units: '50', currency: 'USD' });
    expect(balanceOf(engine, alice).settled).toMatchObject({
      drBalance: { units: '50' },
      normalBalance: { units: '50' },
    });
    expect(count(engine, 'entries')).toBe(2);
  });

  it('adds 0.1 + 0.2 exactly, and keeps 18 fractional digits and 30 integer digits', async () => {
    post(1, '0.1');
    post(2, '0.2');
    expect(balanceOf(engine, bob).settled.normalBalance.units).toBe('0.3');
    post(3, '0.000000000000000001', { currency: 'ETH' });
    post(4, '123456789012345678901234567890.123456789012345678', { currency: 'ETH' });
    expect(balanceOf(engine, bob, 'ETH').settled.normalBalance.units).toBe(
      '123456789012345678901234567890.123456789012345679',
    );
  });

  it('is idempotent by transactionId: same input returns the same transaction, different input conflicts', async () => {
    const first = post(1, '10');
    const again = post(1, '10');
    expect(again).toEqual(first);
    expect(count(engine, 'transactions')).toBe(1);
    expect(balanceOf(engine, bob).settled.normalBalance.units).toBe('10');
    const conflict = fails(engine, POST, {
      input: { transactionId: id(1001), tranCode: 'TRANSFER', params: { from: alice, to: bob, amount: '11' } },
    });
    expect(conflict.code).toBe('TRANSACTION_ID_CONFLICT');
    expect(conflict.message).toContain(id(1001));
    expect(count(engine, 'transactions')).toBe(1);
  });

  it('refuses an unbalanced tran code with UNBALANCED and writes nothing', async () => {
    ok(engine, `mutation($i: TranCodeInput!) { createTranCode(input: $i) { code } }`, {
      i: {
        tranCodeId: id(501),
        code: 'BROKEN',
        // Balanced only when amount is 9.99, so it is accepted at creation and refused when posted.
        params: [
          { name: 'a', type: 'UUID' },
          { name: 'b', type: 'UUID' },
          { name: 'amount', type: 'DECIMAL' },
        ],
        transaction: {},
        entries: [
          { accountId: 'params.a', units: 'params.amount', currency: "'USD'", direction: 'DEBIT' },
          { accountId: 'params.b', units: "decimal('9.99')", currency: "'USD'", direction: 'CREDIT' },
        ],
      },
    });
    const before = count(engine, 'entries');
    const error = fails(engine, POST, {
      input: { transactionId: id(1), tranCode: 'BROKEN', params: { a: alice, b: bob, amount: '10' } },
    });
    expect(error.code).toBe('UNBALANCED');
    expect(error.message).toContain('USD SETTLED debits − credits = 0.01');
    expect(count(engine, 'entries')).toBe(before);
    expect(count(engine, 'transactions')).toBe(0);
  });

  it('checks balance per layer: a debit on SETTLED cannot be matched by a credit on PENDING', async () => {
    ok(engine, `mutation($i: TranCodeInput!) { createTranCode(input: $i) { code } }`, {
      i: {
        tranCodeId: id(502),
        code: 'CROSS_LAYER',
        // The credit's layer is a param, so creation cannot know it is wrong; posting can.
        params: [
          { name: 'a', type: 'UUID' },
          { name: 'b', type: 'UUID' },
          { name: 'layer', type: 'STRING' },
        ],
        transaction: {},
        entries: [
          { accountId: 'params.a', units: "decimal('1')", currency: "'USD'", direction: 'DEBIT', layer: 'SETTLED' },
          {
            accountId: 'params.b',
            units: "decimal('1')",
            currency: "'USD'",
            direction: 'CREDIT',
            layer: 'params.layer',
          },
        ],
      },
    });
    expect(
      fails(engine, POST, {
        input: { transactionId: id(1), tranCode: 'CROSS_LAYER', params: { a: alice, b: bob, layer: 'PENDING' } },
      }).code,
    ).toBe('UNBALANCED');
  });

  it('refuses to post to a LOCKED account and writes nothing; INACTIVE still posts', async () => {
    ok(engine, `mutation { updateAccount(id: "${bob}", input: {status: LOCKED}) { status } }`);
    const error = fails(engine, POST, {
      input: { transactionId: id(1), tranCode: 'TRANSFER', params: { from: alice, to: bob, amount: '5' } },
    });
    expect(error.code).toBe('ACCOUNT_LOCKED');
    expect(error.message).toContain('ACC-2');
    expect(count(engine, 'transactions')).toBe(0);
    expect(count(engine, 'balances')).toBe(0);
    ok(engine, `mutation { updateAccount(id: "${bob}", input: {status: INACTIVE}) { status } }`);
    post(1, '5');
    expect(balanceOf(engine, bob).settled.normalBalance.units).toBe('5');
  });

  it('names a missing required param', async () => {
    const error = fails(engine, POST, {
      input: { transactionId: id(1), tranCode: 'TRANSFER', params: { from: alice, to: bob } },
    });
    expect(error.code).toBe('TRAN_CODE_ERROR');
    expect(error.message).toContain('"amount"');
    expect(error.message).toContain('required');
  });

  it('refuses unknown params, floats for decimals, bad UUIDs in params and unknown tran codes', async () => {
    const bad = (params: Record<string, unknown>, tranCode = 'TRANSFER') =>
      fails(engine, POST, { input: { transactionId: id(1), tranCode, params } });
    expect(bad({ from: alice, to: bob, amount: '1', colour: 'red' }).message).toContain('no param "colour"');
    const float = bad({ from: alice, to: bob, amount: 10.25 });
    expect(float.code).toBe('TRAN_CODE_ERROR');
    expect(float.hint).toContain('strings');
    expect(bad({ from: 'not-a-uuid', to: bob, amount: '1' }).message).toContain('UUID');
    expect(bad({ from: alice, to: bob, amount: '1e5' }).message).toContain('not a decimal');
    expect(bad({ from: alice, to: bob, amount: '-5' }).message).toContain('negative');
    expect(bad({ from: alice, to: id(999), amount: '1' }).code).toBe('NOT_FOUND');
    expect(bad({}, 'NOPE').code).toBe('NOT_FOUND');
    expect(count(engine, 'transactions')).toBe(0);
  });

  it('a multi-mutation document whose last mutation fails leaves no trace of the first', async () => {
    const result = engine.graphql(`mutation {
      a: createAccount(input: {accountId: "${id(77)}", code: "NEW", name: "New"}) { accountId }
      p: postTransaction(input: {transactionId: "${id(1)}", tranCode: "TRANSFER", params: {from: "${alice}", to: "${bob}", amount: "5"}}) { transactionId }
      v: voidTransaction(id: "${id(404)}") { transactionId } }`);
    expect(result.data).toBeNull();
    expect(result.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    expect(count(engine, 'transactions')).toBe(0);
    expect(fails(engine, `{ account(id: "${id(77)}") { code } }`).code).toBe('NOT_FOUND');
    expect(balanceOf(engine, bob).settled.normalBalance.units).toBe('0');
  });

  it('Mutation.queries reads the request’s own uncommitted writes', async () => {
    const data = ok(
      engine,
      `mutation {
      p1: postTransaction(input: {transactionId: "${id(1)}", tranCode: "TRANSFER", params: {from: "${alice}", to: "${bob}", amount: "30"}}) { transactionId }
      p2: postTransaction(input: {transactionId: "${id(2)}", tranCode: "TRANSFER", params: {from: "${alice}", to: "${bob}", amount: "12.5"}}) { transactionId }
      queries { balance(accountId: "${bob}") { available(layer: SETTLED) { normalBalance { units } } }
        entries(first: 100, where: {accountId: "${bob}"}) { nodes { amount { units } metadata transaction { metadata description } } } } }`,
    );
    expect(data.queries.balance.available.normalBalance.units).toBe('42.5');
    expect(data.queries.entries.nodes.map((n: any) => n.amount.units)).toEqual(['30', '12.5']);
    expect(data.queries.entries.nodes[1].transaction.description).toBe('transfer 12.5');
  });

  it('@dryRun runs the mutation, returns results that saw its writes, and leaves no trace; the same ids then post for real', async () => {
    const dry = ok(
      engine,
      `mutation Try @dryRun {
      postTransaction(input: {transactionId: "${id(1)}", tranCode: "TRANSFER", params: {from: "${alice}", to: "${bob}", amount: "7"}}) { transactionId }
      queries { balance(accountId: "${bob}") { settled { normalBalance { units } } } } }`,
    );
    expect(dry.queries.balance.settled.normalBalance.units).toBe('7');
    expect(count(engine, 'transactions')).toBe(0);
    expect(balanceOf(engine, bob).settled.normalBalance.units).toBe('0');
    ok(engine, POST, {
      input: { transactionId: id(1), tranCode: 'TRANSFER', params: { from: alice, to: bob, amount: '7' } },
    });
    expect(count(engine, 'transactions')).toBe(1);
  });

  it('pins a tran code version, and refuses a LOCKED tran code', async () => {
    ok(
      engine,
      `mutation($id: UUID!) { updateTranCode(id: $id, input: {transaction: {description: "'v2'"}}) { version } }`,
      { id: transferCode },
    );
    const v1 = ok(
      engine,
      `mutation { postTransaction(input: {transactionId: "${id(1)}", tranCode: "TRANSFER", tranCodeVersion: 1, params: {from: "${alice}", to: "${bob}", amount: "1"}}) { description tranCodeVersion } }`,
    );
    expect(v1.postTransaction).toEqual({ description: 'transfer 1', tranCodeVersion: 1 });
    const v2 = ok(
      engine,
      `mutation { postTransaction(input: {transactionId: "${id(2)}", tranCode: "TRANSFER", params: {from: "${alice}", to: "${bob}", amount: "1"}}) { description tranCodeVersion } }`,
    );
    expect(v2.postTransaction).toEqual({ description: 'v2', tranCodeVersion: 2 });
    expect(
      fails(
        engine,
        `mutation { postTransaction(input: {transactionId: "${id(3)}", tranCode: "TRANSFER", tranCodeVersion: 3, params: {}}) { description } }`,
      ).code,
    ).toBe('NOT_FOUND');
    ok(engine, `mutation($id: UUID!) { lockTranCode(id: $id) { status } }`, { id: transferCode });
    expect(
      fails(engine, POST, {
        input: { transactionId: id(4), tranCode: 'TRANSFER', params: { from: alice, to: bob, amount: '1' } },
      }).code,
    ).toBe('TRAN_CODE_LOCKED');
  });
});

describe('voidTransaction', () => {
  it('reverses every entry, restores balances exactly, links voidOf/voidedBy, keeps the correlationId', async () => {
    post(1, '10.10');
    post(2, '0.01', { layer: 'PENDING' });
    const before = balanceOf(engine, bob);
    post(3, '99.99');
    const reversal = ok(
      engine,
      `mutation { voidTransaction(id: "${id(1003)}") { transactionId voidOf correlationId entries(first: 10) { nodes { direction units } } } }`,
    ).voidTransaction;
    expect(reversal.voidOf).toBe(id(1003));
    expect(reversal.correlationId).toBe(id(1003));
    expect(reversal.entries.nodes).toEqual([
      { direction: 'CREDIT', units: '99.99' },
      { direction: 'DEBIT', units: '99.99' },
    ]);
    const after = balanceOf(engine, bob);
    expect(after.settled.normalBalance).toEqual(before.settled.normalBalance);
    expect(after.pending.normalBalance).toEqual(before.pending.normalBalance);
    expect(ok(engine, `{ transaction(id: "${id(1003)}") { voidedBy } }`).transaction.voidedBy).toBe(
      reversal.transactionId,
    );
    expect(
      ok(engine, `{ transactions(first: 10, where: {correlationId: "${id(1003)}"}) { nodes { transactionId } } }`)
        .transactions.nodes,
    ).toHaveLength(2);
  });

  it('refuses to void twice, to void a void, and to void an unknown id', async () => {
    post(1, '1');
    const reversal = ok(engine, `mutation { voidTransaction(id: "${id(1001)}") { transactionId } }`).voidTransaction;
    expect(fails(engine, `mutation { voidTransaction(id: "${id(1001)}") { transactionId } }`).code).toBe(
      'ALREADY_VOIDED',
    );
    expect(fails(engine, `mutation { voidTransaction(id: "${reversal.transactionId}") { transactionId } }`).code).toBe(
      'BAD_REQUEST',
    );
    expect(fails(engine, `mutation { voidTransaction(id: "${id(4040)}") { transactionId } }`).code).toBe('NOT_FOUND');
  });
});

describe('balances', () => {
  it('keeps layers apart and makes available() cumulative', async () => {
    post(1, '100');
    post(2, '20', { layer: 'PENDING' });
    post(3, '3', { layer: 'ENCUMBRANCE' });
    const data = ok(
      engine,
      `{ balance(accountId: "${bob}") {
      settled { normalBalance { units } } pending { normalBalance { units } } encumbrance { normalBalance { units } }
      s: available(layer: SETTLED) { normalBalance { units } } p: available(layer: PENDING) { normalBalance { units } }
      e: available(layer: ENCUMBRANCE) { normalBalance { units } } version } }`,
    ).balance;
    expect(
      [data.settled, data.pending, data.encumbrance, data.s, data.p, data.e].map((b: any) => b.normalBalance.units),
    ).toEqual(['100', '20', '3', '100', '120', '123']);
    expect(data.version).toBe(3);
  });

  it('computes normal balances by the account’s side: credit-normal CR − DR, debit-normal DR − CR', async () => {
    post(1, '5');
    expect(balanceOf(engine, alice).settled.normalBalance.units).toBe('5'); // debit-normal, debited
    expect(balanceOf(engine, bob).settled.normalBalance.units).toBe('5'); // credit-normal, credited
    ok(engine, POST, {
      input: { transactionId: id(2), tranCode: 'TRANSFER', params: { from: bob, to: alice, amount: '8' } },
    });
    expect(balanceOf(engine, bob).settled.normalBalance.units).toBe('-3');
  });

  it('reads a zero balance for an account with no entries, and NOT_FOUND for an unknown account', async () => {
    expect(balanceOf(engine, bob).settled.normalBalance).toEqual({ units: '0', currency: 'USD' });
    expect(fails(engine, `{ balance(accountId: "${id(999)}") { version } }`).code).toBe('NOT_FOUND');
  });

  it('keeps the scale amounts were posted with, as the reference ledger does: a sum takes the larger scale', async () => {
    post(1, '5', { currency: 'JPY' });
    post(2, '5.00000000', { currency: 'BTC' });
    post(3, '5.5', { currency: 'KWD' });
    post(4, '0.250', { currency: 'KWD' });
    expect(balanceOf(engine, bob, 'JPY').settled.normalBalance.units).toBe('5');
    expect(balanceOf(engine, bob, 'BTC').settled.normalBalance.units).toBe('5.00000000');
    expect(balanceOf(engine, bob, 'KWD').settled).toMatchObject({
      crBalance: { units: '5.750' },
      drBalance: { units: '0' },
      normalBalance: { units: '5.750' },
    });
    // A total nothing was added to stays "0"; the entries keep their own text.
    const entries = ok(
      engine,
      `{ entries(first: 10, where: {accountId: "${bob}", currency: "KWD"}) { nodes { units amount { units } } } }`,
    ).entries.nodes;
    expect(entries).toEqual([
      { units: '5.5', amount: { units: '5.5' } },
      { units: '0.250', amount: { units: '0.250' } },
    ]);
  });

  it.skipIf(ON_POSTGRES)(
    'reads through the primary key only: the balance statement never touches entries (O(1) in the number of entries)',
    async () => {
      const plan = engine.db
        .prepare(`EXPLAIN QUERY PLAN SELECT * FROM balances WHERE account_id = ? AND journal_id = ? AND currency = ?`)
        .all(bob, id(0), 'USD') as Array<{ detail: string }>;
      expect(plan.map((p) => p.detail).join(' ')).toMatch(
        /SEARCH balances USING PRIMARY KEY \(account_id=\? AND journal_id=\? AND currency=\?\)/,
      );
    },
  );
});
