// Ledger fixtures: accounts, the TRANSFER tran code, postings and balances, as GraphQL requests.
import type { Engine } from '../../src/engine.js';
import { id, ok } from './engine.js';

/**
 * `count` TRANSFER postings between accounts 1–3 (see createAccount, createTransferCode), 100 per
 * request, with transaction ids from id(firstTransaction) on.
 */
export function postTransfers(engine: Engine, count: number, firstTransaction = 100_000): void {
  for (let batch = 0; batch < count / 100; batch++) {
    const posts = Array.from({ length: 100 }, (_, i) => {
      const n = batch * 100 + i;
      return `p${i}: postTransaction(input: {transactionId: "${id(firstTransaction + n)}", tranCode: "TRANSFER", params: {from: "${id(1 + (n % 3))}", to: "${id(1 + ((n + 1) % 3))}", amount: "1"}}) { transactionId }`;
    });
    ok(engine, `mutation { ${posts.join(' ')} }`);
  }
}

export const CREATE_ACCOUNT = `mutation($input: AccountInput!) { createAccount(input: $input) { accountId code status version } }`;
export const POST = `mutation($input: TransactionInput!) { postTransaction(input: $input) { transactionId correlationId effective voidedBy } }`;
export const BALANCE = `query($a: UUID!, $c: CurrencyCode) { balance(accountId: $a, currency: $c) {
  settled { drBalance { units } crBalance { units } normalBalance { units currency } }
  pending { normalBalance { units } }
  encumbrance { normalBalance { units } }
  available(layer: ENCUMBRANCE) { normalBalance { units } } } }`;

export function createAccount(engine: Engine, n: number, extra: Record<string, unknown> = {}): string {
  ok(engine, CREATE_ACCOUNT, { input: { accountId: id(n), code: `ACC-${n}`, name: `Account ${n}`, ...extra } });
  return id(n);
}

/** A TRANSFER tran code: debit `from`, credit `to`, `amount` in `currency` (default USD) on `layer`. */
export function createTransferCode(engine: Engine, code = 'TRANSFER', tranCodeId = id(9000)): string {
  ok(engine, `mutation($input: TranCodeInput!) { createTranCode(input: $input) { version } }`, {
    input: {
      tranCodeId,
      code,
      params: [
        { name: 'from', type: 'UUID' },
        { name: 'to', type: 'UUID' },
        { name: 'amount', type: 'DECIMAL' },
        { name: 'currency', type: 'STRING', default: "'USD'" },
        { name: 'layer', type: 'STRING', default: "'SETTLED'" },
      ],
      transaction: { effective: 'date.Today()', description: "'transfer ' + string(params.amount)" },
      entries: [
        {
          accountId: 'params.from',
          units: 'params.amount',
          currency: 'params.currency',
          direction: 'DEBIT',
          layer: 'params.layer',
        },
        {
          accountId: 'params.to',
          units: 'params.amount',
          currency: 'params.currency',
          direction: 'CREDIT',
          layer: 'params.layer',
        },
      ],
    },
  });
  return tranCodeId;
}

/** Accounts 1 and 2 and the TRANSFER tran code. */
export function twoAccountsAndTransfer(engine: Engine): void {
  createAccount(engine, 1);
  createAccount(engine, 2);
  createTransferCode(engine);
}

export function balanceOf(engine: Engine, accountId: string, currency = 'USD') {
  return ok(engine, BALANCE, { a: accountId, c: currency }).balance;
}
