import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Dec } from '../../src/decimal.js';
import type { Engine } from '../../src/engine.js';
import { createAccount, createTransferCode } from '../helpers/ledger.js';
import { id, newEngine, ok } from '../helpers/engine.js';

const ACCOUNTS = 5;
const CURRENCIES = ['USD', 'EUR', 'ETH'];
const LAYERS = ['SETTLED', 'PENDING', 'ENCUMBRANCE'];

/** An exact decimal string with up to 18 fractional digits. */
const amount = fc
  .tuple(fc.bigInt({ min: 0n, max: 10n ** 15n }), fc.integer({ min: 0, max: 18 }))
  .map(([digits, scale]) => {
    const text = digits.toString().padStart(scale + 1, '0');
    return scale === 0 ? text : `${text.slice(0, -scale)}.${text.slice(-scale)}`;
  });

type Command =
  | { kind: 'post'; from: number; to: number; amount: string; currency: string; layer: string }
  | { kind: 'split'; from: number; to: [number, number]; amounts: [string, string]; currency: string }
  | { kind: 'void'; pick: number }
  | { kind: 'lock'; account: number; locked: boolean };

const command: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('post' as const),
      from: fc.nat(ACCOUNTS - 1),
      to: fc.nat(ACCOUNTS - 1),
      amount,
      currency: fc.constantFrom(...CURRENCIES),
      layer: fc.constantFrom(...LAYERS),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('split' as const),
      from: fc.nat(ACCOUNTS - 1),
      to: fc.tuple(fc.nat(ACCOUNTS - 1), fc.nat(ACCOUNTS - 1)),
      amounts: fc.tuple(amount, amount),
      currency: fc.constantFrom(...CURRENCIES),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('void' as const), pick: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('lock' as const), account: fc.nat(ACCOUNTS - 1), locked: fc.boolean() }),
  },
);

async function setup(): Promise<Engine> {
  const engine = await newEngine();
  for (let n = 1; n <= ACCOUNTS; n++) createAccount(engine, n, { normalBalanceType: n % 2 ? 'DEBIT' : 'CREDIT' });
  createTransferCode(engine);
  ok(engine, `mutation($i: TranCodeInput!) { createTranCode(input: $i) { code } }`, {
    i: {
      tranCodeId: id(9001),
      code: 'SPLIT',
      params: [
        { name: 'from', type: 'UUID' },
        { name: 'a', type: 'UUID' },
        { name: 'b', type: 'UUID' },
        { name: 'x', type: 'DECIMAL' },
        { name: 'y', type: 'DECIMAL' },
        { name: 'currency', type: 'STRING' },
      ],
      transaction: {},
      entries: [
        { accountId: 'params.from', units: 'params.x + params.y', currency: 'params.currency', direction: 'DEBIT' },
        { accountId: 'params.a', units: 'params.x', currency: 'params.currency', direction: 'CREDIT' },
        {
          accountId: 'params.b',
          units: 'params.y',
          currency: 'params.currency',
          direction: 'CREDIT',
          condition: 'params.y > decimal("0") || true',
        },
      ],
    },
  });
  return engine;
}

function apply(engine: Engine, cmd: Command, posted: string[], step: number): void {
  const account = (n: number) => id(n + 1);
  let result;
  if (cmd.kind === 'post') {
    const transactionId = id(100_000 + step);
    result = engine.graphql(`mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }`, {
      i: {
        transactionId,
        tranCode: 'TRANSFER',
        params: {
          from: account(cmd.from),
          to: account(cmd.to),
          amount: cmd.amount,
          currency: cmd.currency,
          layer: cmd.layer,
        },
      },
    });
    if (!result.errors) posted.push(transactionId);
  } else if (cmd.kind === 'split') {
    const transactionId = id(100_000 + step);
    result = engine.graphql(`mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }`, {
      i: {
        transactionId,
        tranCode: 'SPLIT',
        params: {
          from: account(cmd.from),
          a: account(cmd.to[0]),
          b: account(cmd.to[1]),
          x: cmd.amounts[0],
          y: cmd.amounts[1],
          currency: cmd.currency,
        },
      },
    });
    if (!result.errors) posted.push(transactionId);
  } else if (cmd.kind === 'void') {
    if (posted.length === 0) return;
    result = engine.graphql(`mutation($id: UUID!) { voidTransaction(id: $id) { transactionId } }`, {
      id: posted[cmd.pick % posted.length],
    });
  } else {
    result = engine.graphql(
      `mutation($id: UUID!, $s: AccountStatus!) { updateAccount(id: $id, input: {status: $s}) { status } }`,
      {
        id: account(cmd.account),
        s: cmd.locked ? 'LOCKED' : 'ACTIVE',
      },
    );
  }
  // Only the refusals the model allows may happen: locked accounts and double voids.
  for (const error of result?.errors ?? []) {
    expect(['ACCOUNT_LOCKED', 'ALREADY_VOIDED']).toContain(error.extensions?.code);
  }
}

function checkInvariants(engine: Engine): void {
  const entries = engine.db
    .prepare('SELECT account_id, journal_id, currency, layer, direction, units FROM entries')
    .all() as Array<Record<string, string>>;
  const balances = engine.db.prepare('SELECT * FROM balances').all() as Array<Record<string, string>>;
  const key = (...parts: string[]) => parts.join('|');

  // Sum of entries per account × journal × currency × layer × side.
  const fromEntries = new Map<string, Dec>();
  const totals = new Map<string, Dec>();
  for (const e of entries) {
    const k = key(e.account_id!, e.journal_id!, e.currency!, e.layer!, e.direction!);
    fromEntries.set(k, (fromEntries.get(k) ?? new Dec(0)).plus(e.units!));
  }
  for (const b of balances) {
    for (const layer of LAYERS) {
      for (const [side, direction] of [
        ['dr', 'DEBIT'],
        ['cr', 'CREDIT'],
      ] as const) {
        const stored = new Dec(b[`${layer.toLowerCase()}_${side}`]!);
        const summed = fromEntries.get(key(b.account_id!, b.journal_id!, b.currency!, layer, direction)) ?? new Dec(0);
        expect(
          stored.eq(summed),
          `${b.account_id} ${b.currency} ${layer} ${side}: stored ${stored} vs entries ${summed}`,
        ).toBe(true);
        const t = key(b.currency!, layer, side);
        totals.set(t, (totals.get(t) ?? new Dec(0)).plus(stored));
      }
    }
  }
  for (const currency of CURRENCIES) {
    for (const layer of LAYERS) {
      const dr = totals.get(key(currency, layer, 'dr')) ?? new Dec(0);
      const cr = totals.get(key(currency, layer, 'cr')) ?? new Dec(0);
      expect(dr.eq(cr), `${currency} ${layer}: debits ${dr} ≠ credits ${cr}`).toBe(true);
    }
  }
  // Every balance row has an entry behind it, and no entry lacks a balance row.
  const balanceKeys = new Set(balances.map((b) => key(b.account_id!, b.journal_id!, b.currency!)));
  for (const e of entries) expect(balanceKeys.has(key(e.account_id!, e.journal_id!, e.currency!))).toBe(true);
}

describe('ledger invariants (property)', () => {
  it('after every post and void, debits equal credits per currency and layer, and every balance equals the sum of its entries', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(command, { minLength: 1, maxLength: 25 }), async (commands) => {
        const engine = await setup();
        const posted: string[] = [];
        commands.forEach((cmd, step) => {
          apply(engine, cmd, posted, step);
          checkInvariants(engine);
        });
        engine.close();
      }),
      { numRuns: 60 },
    );
  });
});
