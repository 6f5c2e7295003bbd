import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { createAccount, POST } from '../helpers/ledger.js';
import { fails, id, newEngine, ok } from '../helpers/engine.js';

const CREATE = 'mutation($i: TranCodeInput!) { createTranCode(input: $i) { code version } }';
const UPDATE = 'mutation($id: UUID!, $i: TranCodeUpdateInput!) { updateTranCode(id: $id, input: $i) { version } }';
const SETTLEMENT = "'00000000-0000-4000-8000-000000000001'";

let engine: Engine;
beforeEach(async () => {
  engine = await newEngine();
});

type Entry = Record<string, string>;
const deposit = (entries: Entry[], extra: Record<string, unknown> = {}) => ({
  tranCodeId: id(700),
  code: 'DEP',
  params: [
    { name: 'account', type: 'UUID' },
    { name: 'amount', type: 'DECIMAL' },
  ],
  transaction: {},
  entries,
  ...extra,
});
const debit = (units = 'params.amount', more: Entry = {}): Entry => ({
  accountId: SETTLEMENT,
  units,
  currency: "'USD'",
  direction: 'DEBIT',
  ...more,
});
const credit = (units = 'params.amount', more: Entry = {}): Entry => ({
  accountId: 'params.account',
  units,
  currency: "'USD'",
  direction: 'CREDIT',
  ...more,
});
const refused = (input: unknown) => {
  const error = fails(engine, CREATE, { i: input });
  expect(error.code).toBe('TRAN_CODE_ERROR');
  expect(engine.graphql('{ tranCodes(first: 5) { nodes { code } } }').data).toEqual({ tranCodes: { nodes: [] } });
  return error;
};

describe('createTranCode refuses a template that can never post', () => {
  it('a read of an undeclared param, naming the field and suggesting the declared one', () => {
    const error = refused(deposit([debit(), credit('params.amout')]));
    expect(error.message).toBe(
      'tran code DEP: entries[1].units = "params.amout" reads params.amout, which is not a declared param',
    );
    expect(error.hint).toBe('Did you mean params.amount?');
    expect(error.result.errors![0]!.extensions!.details).toEqual({
      field: 'entries[1].units',
      expression: 'params.amout',
    });
    // Index syntax, a transaction field, a condition and a param default are read the same way.
    expect(refused(deposit([debit("params['amout']"), credit()])).message).toContain(
      'entries[0].units = "params[\'amout\']" reads params.amout',
    );
    expect(refused(deposit([debit(), credit()], { transaction: { description: 'string(params.memo)' } })).hint).toBe(
      'Declared params: account, amount. Declare "memo" or fix the name.',
    );
    const later = deposit([debit(), credit()], {
      params: [
        { name: 'fee', type: 'DECIMAL', default: 'params.amount' },
        { name: 'account', type: 'UUID' },
        { name: 'amount', type: 'DECIMAL' },
      ],
    });
    expect(refused(later).message).toBe(
      'tran code DEP: params[0].default = "params.amount" reads params.amount, a param declared after it',
    );
  });

  it('a read of an undeclared var, or of a var evaluated later', () => {
    const vars = { total: 'params.amount', nested: { half: "decimal.Quo(params.amount, decimal('2'), 2)" } };
    expect(refused(deposit([debit('vars.totl'), credit('vars.total')], { vars })).message).toContain(
      'reads vars.totl, which is not a declared var',
    );
    expect(refused(deposit([debit('vars.nested.hlf'), credit('vars.nested.hlf')], { vars })).message).toContain(
      'reads vars.nested.hlf, which is not a declared var',
    );
    const backwards = { first: 'vars.second', second: 'params.amount' };
    expect(refused(deposit([debit('vars.first'), credit('vars.first')], { vars: backwards })).message).toBe(
      'tran code DEP: vars.first = "vars.second" reads vars.second, which is evaluated after it',
    );
    // Declared vars, nested ones and a field of a var's value are fine.
    const fine = { total: 'params.amount', nested: { half: 'vars.total', meta: "{'k': 'v'}" } };
    ok(engine, CREATE, {
      i: deposit([debit('vars.nested.half'), credit('vars.total', { description: 'vars.nested.meta.k' })], {
        vars: fine,
      }),
    });
  });

  it('what only looks like a read: has(), a macro variable named params, an optional field', () => {
    const entries = [
      debit("has(params.fee) ? decimal('0') : params.amount"),
      credit('params.amount', {
        description: "[{'x': 'a'}].map(params, params.x)[0]",
        entryType: "params.?kind.orValue('DEP_CR')",
      }),
    ];
    ok(engine, CREATE, { i: deposit(entries) });
  });

  it('fewer than two entries without a condition', () => {
    const one = refused(deposit([debit()]));
    expect(one.message).toBe(
      'tran code DEP: entries has 1 entry without a condition (entries[0]) of 1; a transaction needs at least 2 whatever the params',
    );
    expect(one.hint).toContain('Add the other side');
    const conditional = refused(
      deposit([debit(), credit('params.amount', { condition: "params.amount > decimal('0')" })]),
    );
    expect(conditional.message).toContain('1 entry without a condition (entries[0]) of 2');
    expect(conditional.hint).toContain('compute its direction or units in CEL instead');
    // `true` is no condition; a conditional third entry (a fee) is fine.
    ok(engine, CREATE, { i: deposit([debit(), credit('params.amount', { condition: 'true' })]) });
  });

  it('entries unbalanced for every input: same side, another layer, another currency, constants that differ', () => {
    const sameSide = refused(deposit([debit(), credit('params.amount', { direction: 'DEBIT' })]));
    expect(sameSide.message).toBe(
      'tran code DEP: entries are unbalanced for every input: USD SETTLED has entries[0] DEBIT params.amount, entries[1] DEBIT params.amount' +
        ' (debits − credits = 2 with account = "00000000-0000-4000-8000-000000000001", amount = "1")',
    );
    expect(sameSide.hint).toContain('Debits must equal credits per currency and layer');
    expect(refused(deposit([debit(), credit('params.amount', { layer: 'PENDING' })])).message).toContain(
      'USD SETTLED has entries[0] DEBIT params.amount (debits − credits = 1',
    );
    expect(refused(deposit([debit(), credit('params.amount', { currency: "'EUR'" })])).message).toContain(
      'unbalanced for every input',
    );
    expect(refused(deposit([debit("decimal('10')"), credit("decimal('9.99')")])).message).toContain(
      'debits − credits = 0.01',
    );
    // A constant and an amount leaning the same way never cancel.
    expect(refused(deposit([debit(), credit('params.amount'), debit("decimal('1')")])).message).toContain(
      'debits − credits = 1',
    );
  });

  it('accepts what balances for some input, or whose shape depends on the params', () => {
    const accepted = [
      deposit([debit(), credit()]),
      deposit([debit('params.amount + params.fee'), credit(), credit('params.fee')], {
        params: [
          { name: 'account', type: 'UUID' },
          { name: 'amount', type: 'DECIMAL' },
          { name: 'fee', type: 'DECIMAL', default: "decimal('0')" },
        ],
      }),
      deposit([debit(), credit("decimal('5')")]), // balances when amount is 5
      deposit([debit(), credit('params.amount', { direction: 'params.side' })], {
        params: [
          { name: 'account', type: 'UUID' },
          { name: 'amount', type: 'DECIMAL' },
          { name: 'side', type: 'STRING' },
        ],
      }),
      deposit([debit(), credit('params.amount', { layer: 'params.layer' })], {
        params: [
          { name: 'account', type: 'UUID' },
          { name: 'amount', type: 'DECIMAL' },
          { name: 'layer', type: 'STRING' },
        ],
      }),
      deposit([
        debit(),
        credit('params.amount', { direction: 'DEBIT' }),
        credit('params.amount + params.amount', { condition: 'params.amount > decimal("0")' }),
      ]),
    ];
    accepted.forEach((input, i) => ok(engine, CREATE, { i: { ...input, tranCodeId: id(800 + i), code: `OK${i}` } }));
  });

  it('updateTranCode refuses the same, and keeps the version it had', () => {
    ok(engine, CREATE, { i: deposit([debit(), credit()]) });
    const error = fails(engine, UPDATE, { id: id(700), i: { entries: [debit(), credit('params.amout')] } });
    expect(error).toMatchObject({ code: 'TRAN_CODE_ERROR', hint: 'Did you mean params.amount?' });
    expect(fails(engine, UPDATE, { id: id(700), i: { entries: [debit()] } }).code).toBe('TRAN_CODE_ERROR');
    expect(ok(engine, UPDATE, { id: id(700), i: { description: 'still fine' } }).updateTranCode.version).toBe(2);
  });

  it('an accepted template posts; the tran codes of examples/ all create', async () => {
    const alice = createAccount(engine, 2);
    createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
    ok(engine, CREATE, { i: deposit([debit(), credit()]) });
    ok(engine, POST, { input: { transactionId: id(1), tranCode: 'DEP', params: { account: alice, amount: '3' } } });
    const dir = join(import.meta.dirname, '..', '..', 'examples', 'bank', 'tran-codes');
    for (const file of readdirSync(dir)) ok(engine, CREATE, { i: JSON.parse(readFileSync(join(dir, file), 'utf8')) });
  });
});
