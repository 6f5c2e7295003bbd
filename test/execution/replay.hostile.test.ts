import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { count, id, newEngine, ok } from '../helpers/engine.js';
import { createAccount, createTransferCode } from '../helpers/ledger.js';

/**
 * Idempotency keys and voids attacked by a second client (hostile review F11, F12): an
 * executionId replays only to the caller who made the call and may read it, and a void is a
 * posting that a LOCKED tran code refuses. Each case is the attack as a client would make it.
 */

let engine: Engine;

const CREATE_ACTION =
  'mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { version } } }';
const CREATE_CLIENT = 'mutation($i: ClientInput!) { auth { createClient(input: $i) { client { principal } } } }';
const INVOKE = `mutation($name: String!, $e: UUID!, $input: JSON) { actions { invokeAction(name: $name, input: {executionId: $e, actionVersion: 1, input: $input}) {
  executionId status output caller { principal } } } }`;
const START =
  'mutation($name: String!, $e: UUID!, $input: JSON) { actions { startAction(name: $name, input: {executionId: $e, input: $input}) { executionId status caller { principal } } } }';
const READ = 'query($e: UUID!) { actions { execution(executionId: $e) { output caller { principal } } } }';
const POST = 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }';

const as = (principal: string, query: string, variables?: Record<string, unknown>) =>
  engine.graphql(query, variables, { principal });
function okAs<T = any>(principal: string, query: string, variables?: Record<string, unknown>): T {
  const result = as(principal, query, variables);
  if (result.errors) throw new Error(`unexpected errors: ${JSON.stringify(result.errors)}`);
  return result.data as T;
}
const errorOf = (result: {
  data?: unknown;
  errors?: ReadonlyArray<{ message: string; extensions?: Record<string, unknown> }>;
}) => ({
  code: result.errors?.[0]?.extensions?.code,
  message: result.errors?.[0]?.message,
  data: result.data,
});
const client = (principal: string, policies: unknown[]) =>
  ok(engine, CREATE_CLIENT, { i: { principal, name: principal, policies } });

const FIN_READ = { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] };
const RUN = { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] };
/** Each client reads only its own executions. */
const OWN = {
  effect: 'ALLOW',
  actions: ['SELECT'],
  resources: ['actions.Execution'],
  assertions: { own: 'context.document.principal == context.auth.claims.principal' },
};

beforeEach(async () => {
  engine = await newEngine({ clock: new ManualClock('2026-03-01T10:00:00.000Z') });
  engine.ensureAdmin();
  for (const n of [1, 2, 3]) createAccount(engine, n);
  createTransferCode(engine);
  // A tool whose output is what its caller may read: alice's statement is alice's to see.
  okAs('admin', CREATE_ACTION, {
    id: id(10),
    i: {
      name: 'statement',
      kind: 'tool',
      config: {
        runtime: 'javascript',
        src: "function run(e) { return graphql('{ accounts(first: 3) { nodes { code } } }'); }",
      },
      policies: [FIN_READ],
    },
  });
  client('alice', [FIN_READ, RUN, OWN]);
  client('bob', [RUN, OWN]);
});
afterEach(() => engine.close());

describe('F11: replaying an executionId', () => {
  it("the answer to someone else's id does not tell a right guess of their input from a wrong one (second review H6)", () => {
    okAs('alice', INVOKE, { name: 'statement', e: id(71), input: { amount: '9000' } });
    const guesses = ['100', '5000', '9000'].map((amount) =>
      errorOf(as('bob', INVOKE, { name: 'statement', e: id(71), input: { amount } })),
    );
    for (const guess of guesses) expect(guess).toEqual(guesses[0]);
    expect(guesses[0]!.code).toBe('EXECUTION_ID_CONFLICT');
    const started = ['100', '9000'].map((amount) =>
      errorOf(as('bob', START, { name: 'statement', e: id(71), input: { amount } })),
    );
    expect(started[0]).toEqual(started[1]);
  });

  it('bob, who cannot read alice’s execution, gets EXECUTION_ID_CONFLICT for her id and input, never her output', () => {
    const mine = okAs('alice', INVOKE, { name: 'statement', e: id(70) }).actions.invokeAction;
    expect(mine).toMatchObject({
      status: 'SUCCEEDED',
      caller: { principal: 'alice' },
      output: { accounts: { nodes: [{ code: 'ACC-1' }, { code: 'ACC-2' }, { code: 'ACC-3' }] } },
    });
    expect(errorOf(as('bob', READ, { e: id(70) })).code).toBe('ACCESS_DENIED');

    const replay = errorOf(as('bob', INVOKE, { name: 'statement', e: id(70) }));
    expect(replay).toMatchObject({ code: 'EXECUTION_ID_CONFLICT', data: null });
    expect(replay.message).toContain('another caller');
    expect(replay.message).not.toContain('ACC-1');
    expect(count(engine, 'executions') + count(engine, 'call_ids')).toBe(2); // alice's call and its graphql child (a compact call): bob's ran nothing
  });

  it('the caller who made the call replays it; the same caller without SELECT on it gets ACCESS_DENIED', () => {
    expect(okAs('alice', INVOKE, { name: 'statement', e: id(70) }).actions.invokeAction.status).toBe('SUCCEEDED');
    expect(okAs('alice', INVOKE, { name: 'statement', e: id(70) }).actions.invokeAction).toMatchObject({
      executionId: id(70),
      status: 'SUCCEEDED',
      caller: { principal: 'alice' },
    });

    // carol may run the statement but not read executions: an id she sent is not a way to read one.
    client('carol', [FIN_READ, RUN]);
    expect(okAs('carol', INVOKE, { name: 'statement', e: id(71) }).actions.invokeAction.status).toBe('SUCCEEDED');
    expect(errorOf(as('carol', INVOKE, { name: 'statement', e: id(71) })).code).toBe('ACCESS_DENIED');
  });

  it('a started execution replays to its starter only: bob starting alice’s id gets EXECUTION_ID_CONFLICT', () => {
    expect(okAs('alice', START, { name: 'statement', e: id(72) }).actions.startAction).toEqual({
      executionId: id(72),
      status: 'QUEUED',
      caller: { principal: 'alice' },
    });
    expect(okAs('alice', START, { name: 'statement', e: id(72) }).actions.startAction.status).toBe('QUEUED');
    const replay = errorOf(as('bob', START, { name: 'statement', e: id(72) }));
    expect(replay).toMatchObject({ code: 'EXECUTION_ID_CONFLICT', data: null });
  });
});

describe('F12: voiding under a LOCKED tran code', () => {
  it('a clerk cannot void a transaction once admin has locked its tran code: TRAN_CODE_LOCKED, as for a post', () => {
    client('clerk', [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }]);
    okAs('clerk', POST, {
      i: { transactionId: id(80), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount: '5' } },
    });
    okAs('admin', `mutation { lockTranCode(id: "${id(9000)}") { status } }`);

    expect(
      errorOf(
        as('clerk', POST, {
          i: { transactionId: id(81), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount: '5' } },
        }),
      ).code,
    ).toBe('TRAN_CODE_LOCKED');
    const voided = errorOf(as('clerk', `mutation { voidTransaction(id: "${id(80)}") { transactionId voidOf } }`));
    expect(voided).toMatchObject({ code: 'TRAN_CODE_LOCKED', data: null });
    expect(voided.message).toContain('TRANSFER');
    expect(ok(engine, `{ transaction(id: "${id(80)}") { voidedBy } }`).transaction.voidedBy).toBeNull();
    expect(count(engine, 'transactions')).toBe(1);

    // Active again, the void goes through.
    okAs('admin', `mutation { updateTranCode(id: "${id(9000)}", input: {status: ACTIVE}) { status } }`);
    expect(okAs('clerk', `mutation { voidTransaction(id: "${id(80)}") { voidOf } }`).voidTransaction.voidOf).toBe(
      id(80),
    );
  });
});
