import { beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { createAccount, createTransferCode, POST } from '../helpers/ledger.js';
import { fails, id, newEngine, ok } from '../helpers/engine.js';

let engine: Engine;
let clock: ManualClock;

beforeEach(async () => {
  clock = new ManualClock('2026-03-01T10:00:00.000Z');
  engine = await newEngine({ clock });
  createTransferCode(engine);
  createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
  createAccount(engine, 2);
});

const post = (n: number, amount: string) =>
  ok(engine, POST, {
    input: { transactionId: id(100 + n), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount } },
  });

describe('history', () => {
  it('a balance keeps every version, newest first, each as the posting that made it left it', () => {
    post(1, '10.00');
    clock.advance(60_000);
    post(2, '5.00');
    clock.advance(60_000);
    post(3, '1.25');
    const history = ok(
      engine,
      `{ balance(accountId: "${id(2)}") { version history(first: 2) { nodes { version modified settled { normalBalance { units } } } pageInfo { hasNextPage endCursor } } } }`,
    ).balance;
    expect(history.version).toBe(3);
    expect(history.history.nodes).toEqual([
      { version: 3, modified: '2026-03-01T10:02:00.000Z', settled: { normalBalance: { units: '16.25' } } },
      { version: 2, modified: '2026-03-01T10:01:00.000Z', settled: { normalBalance: { units: '15.00' } } },
    ]);
    const rest = ok(
      engine,
      `{ balance(accountId: "${id(2)}") { history(first: 5, after: "${history.history.pageInfo.endCursor}") { nodes { version settled { normalBalance { units } } } } } }`,
    );
    expect(rest.balance.history.nodes).toEqual([{ version: 1, settled: { normalBalance: { units: '10.00' } } }]);
  });

  it('reads the balance as of a past time: the version in force then, an empty one before the first posting', () => {
    post(1, '10.00');
    clock.advance(60_000);
    post(2, '5.00');
    clock.advance(60_000);
    post(3, '1.25');
    const asOf = (at: string) =>
      ok(
        engine,
        `{ account(id: "${id(2)}") { balance(asOf: "${at}") { version settled { normalBalance { units } } } } }`,
      ).account.balance;
    expect(asOf('2026-03-01T09:00:00Z')).toEqual({ version: 0, settled: { normalBalance: { units: '0' } } });
    expect(asOf('2026-03-01T10:00:00Z')).toEqual({ version: 1, settled: { normalBalance: { units: '10.00' } } });
    expect(asOf('2026-03-01T10:01:30Z')).toEqual({ version: 2, settled: { normalBalance: { units: '15.00' } } });
    expect(asOf('2030-01-01T00:00:00Z')).toEqual({ version: 3, settled: { normalBalance: { units: '16.25' } } });
    expect(fails(engine, `{ account(id: "${id(2)}") { balance(asOf: "yesterday") { version } } }`).code).toBe(
      'BAD_REQUEST',
    );
  });

  it('a set’s rolled-up balance has its history and as-of reads too; other currencies are skipped', () => {
    ok(engine, `mutation { createAccountSet(input: {accountSetId: "${id(50)}", name: "S"}) { version } }`);
    ok(
      engine,
      `mutation { addToAccountSet(id: "${id(50)}", member: {memberType: ACCOUNT, memberId: "${id(2)}"}) { version } }`,
    );
    post(1, '10.00');
    clock.advance(60_000);
    ok(engine, POST, {
      input: {
        transactionId: id(150),
        tranCode: 'TRANSFER',
        params: { from: id(1), to: id(2), amount: '7', currency: 'EUR' },
      },
    });
    clock.advance(60_000);
    post(2, '2.00');
    const set = ok(
      engine,
      `{ accountSet(id: "${id(50)}") { balance { version history(first: 5) { nodes { version settled { normalBalance { units } } } } }
      then: balance(asOf: "2026-03-01T10:01:00Z") { version settled { normalBalance { units } } } } }`,
    ).accountSet;
    expect(set.balance.history.nodes).toEqual([
      { version: 2, settled: { normalBalance: { units: '12.00' } } },
      { version: 1, settled: { normalBalance: { units: '10.00' } } },
    ]);
    expect(set.then).toEqual({ version: 1, settled: { normalBalance: { units: '10.00' } } });
    const eur = ok(
      engine,
      `{ account(id: "${id(2)}") { balance(currency: "EUR") { history(first: 5) { nodes { version settled { normalBalance { units } } } } } } }`,
    ).account.balance;
    expect(eur.history.nodes).toEqual([{ version: 1, settled: { normalBalance: { units: '7' } } }]);
  });

  it('accounts, account sets and tran codes keep each version as it was', () => {
    ok(engine, `mutation { updateAccount(id: "${id(2)}", input: {name: "Renamed"}) { version } }`);
    ok(engine, `mutation { createAccountSet(input: {accountSetId: "${id(50)}", name: "S"}) { version } }`);
    ok(engine, `mutation { updateAccountSet(id: "${id(50)}", input: {description: "d"}) { version } }`);
    expect(
      ok(engine, `{ account(id: "${id(2)}") { history(first: 5) { nodes { name version } } } }`).account.history.nodes,
    ).toEqual([
      { name: 'Renamed', version: 2 },
      { name: 'Account 2', version: 1 },
    ]);
    expect(
      ok(engine, `{ accountSet(id: "${id(50)}") { history(first: 5) { nodes { description version } } } }`).accountSet
        .history.nodes,
    ).toEqual([
      { description: 'd', version: 2 },
      { description: null, version: 1 },
    ]);
    expect(
      ok(engine, `{ tranCode(code: "TRANSFER") { history(first: 5) { nodes { version } } } }`).tranCode.history.nodes,
    ).toEqual([{ version: 1 }]);
  });
});
