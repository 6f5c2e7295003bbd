import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { balanceOf, createAccount, createTransferCode } from '../helpers/ledger.js';
import { id, newEngine, ok, ON_POSTGRES } from '../helpers/engine.js';

/**
 * Started executions, retries and triggers: an attempt that rolled back leaves no result an
 * idempotent retry could mistake for work done; one broken execution cannot stall the queue; a
 * trigger never blocks the change it reacts to; filters page correctly.
 */
const ALLOW_ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const CREATE =
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }';
const START =
  'mutation($id: UUID, $input: InvokeInput!) { actions { startAction(id: $id, input: $input) { executionId status } } }';
const EXECUTION = `query($e: UUID!) { actions { execution(executionId: $e) { status attempt output error { code message }
  children { kind status attempt output } } } }`;
const POST = 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }';

async function setup(): Promise<{
  engine: Engine;
  clock: ManualClock;
  tool: (n: number, name: string, src: string, extra?: Record<string, unknown>) => string;
}> {
  const clock = new ManualClock('2026-03-01T10:00:00.000Z');
  const engine = await newEngine({ clock, random: () => 0.5, logError: () => {} });
  createAccount(engine, 1);
  createAccount(engine, 2);
  createTransferCode(engine);
  const tool = (n: number, name: string, src: string, extra: Record<string, unknown> = {}) => {
    ok(engine, CREATE, {
      id: id(n),
      input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies: ALLOW_ALL, ...extra },
    });
    return id(n);
  };
  return { engine, clock, tool };
}

const execution = (engine: Engine, executionId: string) => ok(engine, EXECUTION, { e: executionId }).actions.execution;
const post = (engine: Engine, tx: string, amount: string) =>
  engine.graphql(POST, { i: { transactionId: tx, tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount } } });

describe('queued executions stay consistent', () => {
  it('a nested call rolled back with a failed attempt is not taken for done by the retry that reuses its id', async () => {
    const { engine, clock, tool } = await setup();
    const transfer = tool(
      10,
      'transfer',
      `function run(e) {
      graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }',
        { i: { transactionId: e.data.tx, tranCode: 'TRANSFER', params: { from: '${id(1)}', to: '${id(2)}', amount: '100' } } });
      return { posted: e.data.tx };
    }`,
    );
    // pay invokes transfer under a fixed executionId, then fails on its first attempt.
    const invokeTransfer = (
      executionId: string,
    ) => `graphql('mutation($id: UUID!, $e: UUID!, $in: JSON) { actions { invokeAction(id: $id, input: {executionId: $e, actionVersion: 1, input: $in}) { status } } }',
      { id: '${transfer}', e: ${executionId}, in: { tx: '${id(777)}' } })`;
    const pay = tool(
      11,
      'pay',
      `function run(e) {
      ${invokeTransfer(`'${id(555)}'`)};
      if (e.execution.attempt < 2) fail('flaky on attempt ' + e.execution.attempt);
      return 'paid';
    }`,
      { execution: { maxAttempts: 3, backoff: { initialMs: 10 } } },
    );
    ok(engine, START, { id: pay, input: { executionId: id(500), input: {} } });
    const worker = engine.createWorker({ owner: 'w' });
    worker.drain();
    clock.advance(10);
    worker.drain();
    // The retry is refused loudly instead of returning the undone call's result: nothing was paid.
    expect(execution(engine, id(500))).toMatchObject({
      status: 'FAILED',
      attempt: 2,
      error: { code: 'EXECUTION_ID_CONFLICT', message: expect.stringContaining('undone with the call that made it') },
    });
    expect(engine.db.prepare('SELECT count(*) FROM transactions').pluck().get()).toBe(0);
    // With one id per attempt, the retry pays once.
    const payOnce = tool(
      12,
      'pay_once',
      `function run(e) {
      ${invokeTransfer(`'00000000-0000-4000-8000-00000000060' + e.execution.attempt`)};
      if (e.execution.attempt < 2) fail('flaky on attempt ' + e.execution.attempt);
      return 'paid';
    }`,
      { execution: { maxAttempts: 3, backoff: { initialMs: 10 } } },
    );
    ok(engine, START, { id: payOnce, input: { executionId: id(501), input: {} } });
    worker.drain();
    clock.advance(10);
    worker.drain();
    expect(execution(engine, id(501))).toMatchObject({ status: 'SUCCEEDED', attempt: 2, output: 'paid' });
    expect(balanceOf(engine, id(2)).settled.normalBalance.units).toBe('100');
    // Children are labelled with the attempt they ran in.
    expect(
      execution(engine, id(501)).children.map((c: { attempt: number; status: string }) => `${c.attempt} ${c.status}`),
    ).toEqual(['1 SUCCEEDED', '2 SUCCEEDED']);
    engine.close();
  });

  // The failure is made with a SQLite TEMP trigger (RAISE) on the connection.
  it.skipIf(ON_POSTGRES)(
    'a call tree whose record cannot be written counts as a failed attempt instead of stalling the queue',
    async () => {
      const { engine, clock, tool } = await setup();
      const noop = tool(10, 'noop', 'function run() { return 1; }');
      // Starting an id this attempt already used is refused inside the tool.
      const reuse = tool(
        11,
        'reuse',
        `function run() {
      graphql('mutation($id: UUID!) { actions { invokeAction(id: $id, input: {executionId: "${id(600)}", actionVersion: 1, input: {}}) { status } } }', { id: '${noop}' });
      graphql('mutation($id: UUID!) { actions { startAction(id: $id, input: {executionId: "${id(600)}", input: {}}) { status } } }', { id: '${noop}' });
    }`,
        { execution: { maxAttempts: 1 } },
      );
      ok(engine, START, { id: reuse, input: { executionId: id(501), input: {} } });
      // A call tree the database refuses to record (here: a trigger on this connection aborts it).
      const logger = tool(12, 'logger', "function run() { cel('1 + 1'); return 2; }", {
        execution: { maxAttempts: 2, backoff: { initialMs: 10 } },
      });
      ok(engine, START, { id: logger, input: { executionId: id(502), input: {} } });
      ok(engine, START, { id: noop, input: { executionId: id(503), input: {} } });
      // (A program's cel() call is an entry of its execution's row since migration 15: written by an UPDATE of calls.)
      engine.db.exec(
        `CREATE TEMP TRIGGER refuse_children BEFORE UPDATE OF calls ON executions WHEN NEW.calls LIKE '%"k":"cel"%' BEGIN SELECT RAISE(ABORT, 'refused'); END`,
      );
      const outcomes: string[] = [];
      const worker = engine.createWorker({
        owner: 'w',
        onAttempt: (o) => outcomes.push(`${o.executionId.slice(-3)} ${o.attempt} ${o.status}`),
      });
      worker.drain();
      clock.advance(60_000);
      worker.drain();
      expect(outcomes).toEqual(['501 1 FAILED', '502 1 QUEUED', '503 1 SUCCEEDED', '502 2 FAILED']);
      expect(execution(engine, id(501)).error).toMatchObject({ code: 'EXECUTION_ID_CONFLICT' });
      expect(execution(engine, id(502)).error).toMatchObject({
        code: 'INTERNAL',
        message: 'attempt 2 of logger could not be recorded (an internal error, logged)',
      });
      engine.close();
    },
  );

  it('a trigger whose action cannot start never blocks the change; one change per event starts one execution', async () => {
    const { engine, tool } = await setup();
    const notify = tool(30, 'notify_large', 'function run(e) { return e.data; }');
    ok(
      engine,
      `mutation { actions { createTrigger(input: {triggerId: "${id(31)}", name: "large", on: ["transaction.inserted"],
      filter: "decimal(document.params.amount) > decimal('10000')", action: {name: "notify_large"}}) { triggerId } } }`,
    );
    ok(engine, `mutation { actions { lockAction(id: "${notify}", version: 1) { version } } }`);
    // The filter does not hold: nothing to start, the posting goes through.
    expect(post(engine, id(700), '5').errors).toBeUndefined();
    // The filter holds but the action has no ACTIVE version: the posting still goes through, and the
    // execution that could not start is recorded as FAILED.
    expect(post(engine, id(701), '20000').errors).toBeUndefined();
    const started = engine.db
      .prepare('SELECT status, error FROM executions WHERE trigger_id = ?')
      .all(id(31)) as Array<{ status: string; error: string }>;
    expect(started).toHaveLength(1);
    expect(started[0]!.status).toBe('FAILED');
    expect(JSON.parse(started[0]!.error)).toMatchObject({
      code: 'VERSION_LOCKED',
      message: expect.stringContaining('trigger large'),
    });
    // A filter that is not a condition is a failed start, not a silent skip.
    tool(35, 'odd_filter_target', 'function run(e) { return 1; }');
    ok(
      engine,
      `mutation { actions { createTrigger(input: {triggerId: "${id(36)}", name: "odd", on: ["transaction.inserted"], filter: "'yes'", action: {name: "odd_filter_target"}}) { triggerId } } }`,
    );
    expect(post(engine, id(702), '1').errors).toBeUndefined();
    const odd = engine.db.prepare('SELECT status, error FROM executions WHERE trigger_id = ?').get(id(36)) as {
      status: string;
      error: string;
    };
    expect(odd.status).toBe('FAILED');
    expect(JSON.parse(odd.error)).toMatchObject({
      code: 'CEL_ERROR',
      message: expect.stringContaining('evaluated to "yes", not a bool'),
    });
    // An account and a transaction with the same id are two changes.
    tool(40, 'audit', 'function run(e) { return e.data; }');
    ok(
      engine,
      `mutation { actions { createTrigger(input: {triggerId: "${id(41)}", name: "audit", on: ["account.inserted", "transaction.inserted"], action: {name: "audit"}}) { triggerId } } }`,
    );
    createAccount(engine, 4242);
    expect(post(engine, id(4242), '7').errors).toBeUndefined();
    expect(engine.db.prepare('SELECT count(*) FROM executions WHERE trigger_id = ?').pluck().get(id(41))).toBe(2);
    engine.close();
  });

  it('filters combined page through every match', async () => {
    const { engine, tool } = await setup();
    const maybe = tool(
      10,
      'maybe',
      "function run(e) { if (e.data.fail) fail('no', null, { retry: false }); return 1; }",
    );
    for (let i = 0; i < 3; i++) ok(engine, START, { id: maybe, input: { executionId: id(500 + i), input: {} } });
    ok(engine, START, { id: maybe, input: { executionId: id(510), input: { fail: true } } });
    engine.createWorker({ owner: 'w' }).drain();
    const page = (where: Record<string, unknown>) =>
      ok(
        engine,
        'query($w: ExecutionFilter) { actions { executions(first: 2, where: $w) { nodes { executionId } pageInfo { hasNextPage } } } }',
        { w: where },
      ).actions.executions;
    const onlyFailed = { nodes: [{ executionId: id(510) }], pageInfo: { hasNextPage: false } };
    expect(page({ status: 'FAILED' })).toEqual(onlyFailed);
    expect(page({ actionId: maybe, status: 'FAILED' })).toEqual(onlyFailed);
    expect(page({ since: '2026-01-01T00:00:00Z', status: 'FAILED' })).toEqual(onlyFailed);
    expect(page({ actionId: maybe, since: '2026-01-01T00:00:00Z', status: 'FAILED' })).toEqual(onlyFailed);
    expect(page({ actionId: maybe, status: 'SUCCEEDED' })).toEqual({
      nodes: [{ executionId: id(500) }, { executionId: id(501) }],
      pageInfo: { hasNextPage: true },
    });
    expect(page({ since: '2027-01-01T00:00:00Z' })).toEqual({ nodes: [], pageInfo: { hasNextPage: false } });
    engine.close();
  });

  it('a program cannot cancel the execution it is running in, but can cancel one it started', async () => {
    const { engine, tool } = await setup();
    const noop = tool(11, 'later', 'function run() { return 1; }');
    const starter = tool(
      12,
      'start_then_cancel',
      `function run() {
      graphql('mutation($id: UUID!) { actions { startAction(id: $id, input: {executionId: "${id(600)}", input: {}}) { status } } }', { id: '${noop}' });
      return graphql('mutation { actions { cancelExecution(executionId: "${id(600)}") { status } } }').actions.cancelExecution.status;
    }`,
    );
    expect(
      ok(
        engine,
        `mutation($id: UUID!) { actions { invokeAction(id: $id, input: {executionId: "${id(601)}", actionVersion: 1, input: {}}) { output } } }`,
        { id: starter },
      ).actions.invokeAction.output,
    ).toBe('CANCELLED');
    const self = tool(
      10,
      'self_cancel',
      `function run(e) {
      graphql('mutation($e: UUID!) { actions { cancelExecution(executionId: $e) { status } } }', { e: e.execution.executionId });
    }`,
      { execution: { maxAttempts: 1 } },
    );
    ok(engine, START, { id: self, input: { executionId: id(500), input: {} } });
    engine.createWorker({ owner: 'w' }).drain();
    expect(execution(engine, id(500))).toMatchObject({
      status: 'FAILED',
      error: { code: 'BAD_REQUEST', message: expect.stringContaining('cannot cancel itself') },
    });
    engine.close();
  });
});
