import { beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';
import { createAccount, createTransferCode, POST } from '../helpers/ledger.js';

// docs/reference/mutation-checks.md lists postTransaction's checks in the order they run: a posting
// with two faults gets the error of the earlier one, whichever it is, every time. Each test below
// sends such a posting (the numbers are the rows of that list) and checks the earlier check answers.

let engine: Engine;
let alice: string;
let bob: string;

const UNKNOWN = id(777);
/** A journal of its own (the default journal cannot be locked), which JTRANSFER and SKEW post to. */
const BOOKS = id(600);
const CLIENT = 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }';

beforeEach(async () => {
  engine = await newEngine();
  alice = createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
  bob = createAccount(engine, 2);
  createTransferCode(engine);
  ok(engine, 'mutation($i: JournalInput!) { createJournal(input: $i) { journalId } }', {
    i: { journalId: BOOKS, name: 'Books' },
  });
  createCode('JTRANSFER', id(9001), 'params.amount');
  createCode('SKEW', id(9002), 'params.amount + decimal("1")');
});

/** A TRANSFER posting: from alice to bob, unless `params` says otherwise. */
function transfer(n: number, params: unknown = {}, extra: Record<string, unknown> = {}) {
  const merged =
    params !== null && typeof params === 'object' ? { from: alice, to: bob, amount: '10', ...params } : params;
  return { input: { transactionId: id(1000 + n), tranCode: 'TRANSFER', params: merged, ...extra } };
}

const lockTranCode = () => ok(engine, `mutation { lockTranCode(id: "${id(9000)}") { status } }`);
const lockJournal = () => ok(engine, `mutation { updateJournal(id: "${BOOKS}", input: {status: LOCKED}) { status } }`);
const lockAccount = (account: string) =>
  ok(engine, `mutation { updateAccount(id: "${account}", input: {status: LOCKED}) { status } }`);

/**
 * A tran code posting to BOOKS: debits amount from `from`, credits `credit` (CEL) to `to`. JTRANSFER
 * credits the amount (it balances); SKEW credits one more (it never does, yet its templates compile).
 */
function createCode(code: string, tranCodeId: string, credit: string): void {
  ok(engine, `mutation($input: TranCodeInput!) { createTranCode(input: $input) { version } }`, {
    input: {
      tranCodeId,
      code,
      params: [
        { name: 'from', type: 'UUID' },
        { name: 'to', type: 'UUID' },
        { name: 'amount', type: 'DECIMAL' },
      ],
      transaction: { effective: 'date.Today()', journalId: `'${BOOKS}'` },
      entries: [
        { accountId: 'params.from', units: 'params.amount', currency: "'USD'", direction: 'DEBIT' },
        { accountId: 'params.to', units: credit, currency: "'USD'", direction: 'CREDIT' },
      ],
    },
  });
}

/** A posting under `code` (JTRANSFER, SKEW) to BOOKS. */
function booked(n: number, code: string, params: Record<string, unknown>) {
  return {
    input: { transactionId: id(1000 + n), tranCode: code, params: { from: alice, to: bob, amount: '1', ...params } },
  };
}

/** The first error of a posting that must fail: its code and message. */
function refused(variables: Record<string, unknown>, principal?: string) {
  const { code, message } = fails(engine, POST, variables, principal);
  return { code, message };
}

describe('postTransaction: of two faults, the earlier check in mutation-checks.md answers', () => {
  it('policies (1) before the params (3) and the tran code (8)', () => {
    ok(engine, CLIENT, {
      i: {
        principal: 'reader',
        name: 'reader',
        policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }],
      },
    });
    const { code } = refused(
      { input: { transactionId: id(1001), tranCode: 'NOPE', params: 'not an object' } },
      'reader',
    );
    expect(code).toBe('ACCESS_DENIED');
  });

  it('params not an object (3) before an unknown tran code (8)', () => {
    const { code, message } = refused({ input: { transactionId: id(1001), tranCode: 'NOPE', params: 'x' } });
    expect(code).toBe('BAD_REQUEST');
    expect(message).toContain('params must be a JSON object');
  });

  it('params over jsonBytesMax (5) before an unknown tran code (8)', () => {
    const { code, message } = refused({
      input: { transactionId: id(1001), tranCode: 'NOPE', params: { blob: 'x'.repeat(70_000) } },
    });
    expect(code).toBe('LIMIT_EXCEEDED');
    expect(message).toContain('jsonBytesMax');
  });

  it('a transactionId re-sent with another input (7) before a locked tran code (9)', () => {
    ok(engine, POST, transfer(1));
    lockTranCode();
    expect(refused(transfer(1, { amount: '11' })).code).toBe('TRANSACTION_ID_CONFLICT');
  });

  it('a transactionId re-sent with the same input (7) returns the transaction, though its tran code and account are locked since', () => {
    const first = ok(engine, POST, transfer(1)).postTransaction;
    lockTranCode();
    lockAccount(bob);
    expect(ok(engine, POST, transfer(1)).postTransaction).toEqual(first);
    expect(count(engine, 'transactions')).toBe(1);
  });

  it('an unknown tran code (8) before undeclared params (11)', () => {
    const { code } = refused({ input: { transactionId: id(1001), tranCode: 'NOPE', params: { nope: 1 } } });
    expect(code).toBe('NOT_FOUND');
  });

  it('a locked tran code (9) before a version it does not have (10)', () => {
    lockTranCode();
    expect(refused(transfer(1, {}, { tranCodeVersion: 99 })).code).toBe('TRAN_CODE_LOCKED');
  });

  it('a version it does not have (10) before a missing param (12)', () => {
    const { code, message } = refused(transfer(1, { amount: null }, { tranCodeVersion: 99 }));
    expect(code).toBe('NOT_FOUND');
    expect(message).toContain('has no version 99');
  });

  it('an undeclared param (11) before a declared one of the wrong type (12)', () => {
    const { code, message } = refused(transfer(1, { amount: 'ten', tip: '1' }));
    expect(code).toBe('TRAN_CODE_ERROR');
    expect(message).toContain('has no param "tip"');
  });

  it('params in declaration order (12): a bad from before a bad amount', () => {
    const { code, message } = refused(transfer(1, { from: 'nobody', amount: 'ten' }));
    expect(code).toBe('TRAN_CODE_ERROR');
    expect(message).toContain('param "from"');
  });

  it('a missing param (12) before a locked journal (20) and a locked account (21)', () => {
    lockJournal();
    lockAccount(alice);
    const { code, message } = refused(booked(1, 'JTRANSFER', { amount: null }));
    expect(code).toBe('TRAN_CODE_ERROR');
    expect(message).toContain('is required');
  });

  it('unbalanced entries (18) before a locked journal (20), an unknown account (21) and a locked one (21)', () => {
    lockJournal();
    lockAccount(alice);
    expect(refused(booked(1, 'SKEW', { to: UNKNOWN })).code).toBe('UNBALANCED');
  });

  it('a locked journal (20) before an unknown account and a locked one (21)', () => {
    lockJournal();
    lockAccount(alice);
    expect(refused(booked(1, 'JTRANSFER', { to: UNKNOWN })).code).toBe('JOURNAL_LOCKED');
  });

  it('accounts in the order of the entries (21): the first entry’s fault answers, whichever it is', () => {
    lockAccount(alice);
    expect(refused(transfer(1, { from: alice, to: UNKNOWN })).code).toBe('ACCOUNT_LOCKED');
    const swapped = refused(transfer(2, { from: UNKNOWN, to: alice }));
    expect(swapped.code).toBe('NOT_FOUND');
    expect(swapped.message).toContain(UNKNOWN);
  });

  it('an account set as an entry’s account (21) before a locked account on a later entry', () => {
    ok(engine, 'mutation($i: AccountSetInput!) { createAccountSet(input: $i) { accountSetId } }', {
      i: { accountSetId: id(100), name: 'Set 100' },
    });
    lockAccount(bob);
    const { code, message } = refused(transfer(1, { from: id(100), to: bob }));
    expect(code).toBe('BAD_REQUEST');
    expect(message).toContain('is an account set');
  });

  it('a locked account (21) and unbalanced entries (18) before the entries the caller may not write (22)', () => {
    ok(engine, CLIENT, {
      i: {
        principal: 'clerk',
        name: 'clerk',
        policies: [
          { effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] },
          { effect: 'ALLOW', actions: ['INSERT'], resources: ['financial.Transaction'] },
        ],
      },
    });
    // Without a second fault the entries are what the clerk may not write.
    expect(refused(transfer(1), 'clerk').code).toBe('ACCESS_DENIED');
    lockAccount(bob);
    expect(refused(transfer(2), 'clerk').code).toBe('ACCOUNT_LOCKED');
    expect(refused(booked(3, 'SKEW', { to: alice }), 'clerk').code).toBe('UNBALANCED');
    expect(count(engine, 'transactions')).toBe(0);
  });
});
