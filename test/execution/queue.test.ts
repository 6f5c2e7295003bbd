import { beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { backoffBaseMs, backoffDelayMs } from '../../src/execution/queue/backoff.js';
import type { Worker } from '../../src/execution/queue/worker.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';
import { createAccount, createTransferCode, POST } from '../helpers/ledger.js';

let engine: Engine;
let clock: ManualClock;
let worker: Worker;

const ALLOW_ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const START = `mutation($id: UUID, $name: String, $input: InvokeInput!) { actions { startAction(id: $id, name: $name, input: $input) { executionId status actionVersion attempt runAt } } }`;
const EXECUTION = `query($e: UUID!) { actions { execution(executionId: $e) { status attempt output error { code message } runAt
  invocations { attempt status error { code } started finished } children { kind status } } } }`;

function tool(n: number, name: string, src: string, extra: Record<string, unknown> = {}): string {
  ok(engine, CREATE, {
    id: id(n),
    input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies: ALLOW_ALL, ...extra },
  });
  return id(n);
}

const execution = (e: string) => ok(engine, EXECUTION, { e }).actions.execution;

beforeEach(async () => {
  clock = new ManualClock('2026-03-01T10:00:00.000Z');
  engine = await newEngine({ clock, random: () => 0.5 });
  worker = engine.createWorker({ owner: 'test' });
  createAccount(engine, 1);
  createAccount(engine, 2);
  createTransferCode(engine);
});

const POSTER = `function run(event) {
  const t = graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }',
    { i: { transactionId: event.data.tx, tranCode: 'TRANSFER', params: { from: event.data.from, to: event.data.to, amount: event.data.amount } } });
  return { posted: t.postTransaction.transactionId };
}`;

describe('startAction', () => {
  it('a start inside a request that later fails leaves no execution; after a commit it runs and SUCCEEDS with its output', () => {
    const poster = tool(10, 'poster', POSTER);
    const input = { tx: id(100), from: id(1), to: id(2), amount: '5' };
    const failed = engine.graphql(
      `mutation($id: UUID!, $input: JSON) {
      actions { startAction(id: $id, input: {executionId: "${id(500)}", input: $input}) { status } }
      voidTransaction(id: "${id(404)}") { transactionId } }`,
      { id: poster, input },
    );
    expect(failed.data).toBeNull();
    expect(count(engine, 'executions')).toBe(0);
    expect(worker.drain()).toBe(0);

    const started = ok(engine, START, { id: poster, input: { executionId: id(500), input } }).actions.startAction;
    expect(started).toEqual({
      executionId: id(500),
      status: 'QUEUED',
      actionVersion: 1,
      attempt: 0,
      runAt: '2026-03-01T10:00:00.000Z',
    });
    expect(count(engine, 'transactions')).toBe(0);
    expect(worker.drain()).toBe(1);
    const done = execution(id(500));
    expect(done).toMatchObject({ status: 'SUCCEEDED', attempt: 1, output: { posted: id(100) }, runAt: null });
    expect(done.invocations).toHaveLength(1);
    expect(done.children).toEqual([{ kind: 'GRAPHQL', status: 'SUCCEEDED' }]);
    expect(count(engine, 'transactions')).toBe(1);
    // Same id and input: the recorded execution, not a second run.
    expect(ok(engine, START, { id: poster, input: { executionId: id(500), input } }).actions.startAction.status).toBe(
      'SUCCEEDED',
    );
    expect(
      fails(engine, START, { id: poster, input: { executionId: id(500), input: { ...input, amount: '6' } } }).code,
    ).toBe('EXECUTION_ID_CONFLICT');
  });

  it('validates input at start (refused, not queued), and resolves the current ACTIVE version when none is given', () => {
    const typed = tool(11, 'typed', 'function run(e) { return e.data.n; }', {
      tool: {
        inputSchema: {
          type: 'object',
          properties: { n: { type: 'integer' } },
          required: ['n'],
          additionalProperties: false,
        },
      },
    });
    const bad = fails(engine, START, { id: typed, input: { executionId: id(501), input: { n: 'x' } } });
    expect(bad.code).toBe('INPUT_INVALID');
    expect(count(engine, 'executions')).toBe(0);
    ok(
      engine,
      `mutation { actions { updateAction(id: "${typed}", input: {config: {runtime: "javascript", src: "function run(e) { return e.data.n * 10; }"}}) { version } } }`,
    );
    expect(
      ok(engine, START, { name: 'typed', input: { executionId: id(502), input: { n: 2 } } }).actions.startAction
        .actionVersion,
    ).toBe(2);
    ok(engine, `mutation { actions { lockAction(id: "${typed}", version: 2) { version } } }`);
    expect(
      ok(engine, START, { name: 'typed', input: { executionId: id(503), input: { n: 2 } } }).actions.startAction
        .actionVersion,
    ).toBe(1);
  });

  it('cancelExecution cancels a QUEUED execution, and only that', () => {
    const t = tool(12, 'noop', 'function run() { return 1; }');
    ok(engine, START, { id: t, input: { executionId: id(504), input: {} } });
    expect(
      ok(engine, `mutation { actions { cancelExecution(executionId: "${id(504)}") { status } } }`).actions
        .cancelExecution.status,
    ).toBe('CANCELLED');
    expect(worker.drain()).toBe(0);
    expect(fails(engine, `mutation { actions { cancelExecution(executionId: "${id(504)}") { status } } }`).code).toBe(
      'BAD_REQUEST',
    );
  });
});

describe('retries', () => {
  it('a tool that fails twice then succeeds (state in the ledger) SUCCEEDS on attempt 3, with backoff gaps that follow the formula', () => {
    // The tool counts its attempts in account metadata: attempts 1 and 2 fail after writing, attempt 3 succeeds.
    const flaky = tool(
      20,
      'flaky',
      `function run(event) {
  const a = graphql('{ account(id: "${id(1)}") { metadata } }').account;
  const n = ((a.metadata && a.metadata.tries) || 0) + 1;
  if (n < 3) {
    graphql('mutation($m: JSON) { updateAccount(id: "${id(1)}", input: {metadata: $m}) { version } }', { m: { tries: n } });
    fail('flaky ' + n);
  }
  return { tries: n };
}`,
      { execution: { maxAttempts: 5, backoff: { initialMs: 1000, multiplier: 3, maxMs: 60000 } } },
    );
    ok(engine, START, { id: flaky, input: { executionId: id(600), input: {} } });
    expect(worker.drain()).toBe(1);
    let e = execution(id(600));
    expect(e).toMatchObject({ status: 'QUEUED', attempt: 1, error: { code: 'TOOL_FAILED' } });
    // A failed attempt's writes are rolled back: the counter never moves, so we set it as the "external" state.
    expect(ok(engine, `{ account(id: "${id(1)}") { metadata } }`).account.metadata).toBeNull();
    ok(engine, `mutation { updateAccount(id: "${id(1)}", input: {metadata: {tries: 1}}) { version } }`);
    const gap1 = backoffDelayMs({ initialMs: 1000, multiplier: 3, maxMs: 60000 }, 1, () => 0.5);
    expect(gap1).toBe(900); // base 1000 × (1 − 0.2 × 0.5)
    expect(Date.parse(e.runAt) - Date.parse('2026-03-01T10:00:00.000Z')).toBe(gap1);
    clock.advance(gap1 - 1);
    expect(worker.drain()).toBe(0);
    clock.advance(1);
    expect(worker.drain()).toBe(1);
    ok(engine, `mutation { updateAccount(id: "${id(1)}", input: {metadata: {tries: 2}}) { version } }`);
    e = execution(id(600));
    expect(e).toMatchObject({ status: 'QUEUED', attempt: 2 });
    const gap2 = backoffDelayMs({ initialMs: 1000, multiplier: 3, maxMs: 60000 }, 2, () => 0.5);
    expect(gap2).toBe(2700);
    expect(Date.parse(e.runAt) - clock.now().getTime()).toBe(gap2);
    clock.advance(gap2);
    expect(worker.drain()).toBe(1);
    e = execution(id(600));
    expect(e).toMatchObject({ status: 'SUCCEEDED', attempt: 3, output: { tries: 3 } });
    expect(e.invocations.map((i: any) => [i.attempt, i.status, i.error?.code ?? null])).toEqual([
      [1, 'FAILED', 'TOOL_FAILED'],
      [2, 'FAILED', 'TOOL_FAILED'],
      [3, 'SUCCEEDED', null],
    ]);
    const starts = e.invocations.map((i: any) => Date.parse(i.started));
    expect([starts[1] - starts[0], starts[2] - starts[1]]).toEqual([gap1, gap2]);
  });

  it('the backoff table: exponential, capped, jitter takes at most 20 % off', () => {
    const settings = { initialMs: 1000, multiplier: 2, maxMs: 60_000 };
    expect([1, 2, 3, 4, 5, 6, 7, 8].map((n) => backoffBaseMs(settings, n))).toEqual([
      1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000,
    ]);
    expect(backoffDelayMs(settings, 3, () => 0)).toBe(4000);
    expect(backoffDelayMs(settings, 3, () => 0.999999)).toBe(3200);
  });

  it('a program sees which attempt it is in event.execution.attempt', () => {
    const t = tool(
      26,
      'attempts',
      'function run(event) { if (event.execution.attempt < 2) fail("again"); return event.execution.attempt; }',
      { execution: { backoff: { initialMs: 10 } } },
    );
    ok(engine, START, { id: t, input: { executionId: id(607), input: {} } });
    worker.drain();
    clock.advance(10);
    worker.drain();
    expect(execution(id(607))).toMatchObject({ status: 'SUCCEEDED', attempt: 2, output: 2 });
  });

  it('exhausting maxAttempts ends FAILED with the last error; SCRIPT_ERROR, INPUT-, ACCESS-, VERSION- and retry:false failures are not retried', () => {
    const always = tool(21, 'always_fails', 'function run() { fail("still down"); }', {
      execution: { maxAttempts: 2, backoff: { initialMs: 10 } },
    });
    ok(engine, START, { id: always, input: { executionId: id(601), input: {} } });
    worker.drain();
    clock.advance(10);
    worker.drain();
    expect(execution(id(601))).toMatchObject({
      status: 'FAILED',
      attempt: 2,
      error: { code: 'TOOL_FAILED', message: 'still down' },
    });

    const final = tool(
      22,
      'final_fail',
      'function run() { fail("card declined", "use another card", { retry: false }); }',
      { execution: { maxAttempts: 5 } },
    );
    ok(engine, START, { id: final, input: { executionId: id(602), input: {} } });
    worker.drain();
    expect(execution(id(602))).toMatchObject({ status: 'FAILED', attempt: 1 });

    // A program's own bug (a ReferenceError, a TypeError) fails the same way every time.
    const typo = tool(25, 'typo', 'function run() { return availble + 1; }', { execution: { maxAttempts: 5 } });
    ok(engine, START, { id: typo, input: { executionId: id(605), input: {} } });
    expect(worker.drain()).toBe(1);
    expect(execution(id(605))).toMatchObject({
      status: 'FAILED',
      attempt: 1,
      runAt: null,
      error: { code: 'SCRIPT_ERROR', message: expect.stringContaining('availble') },
    });
    const typeError = tool(27, 'type_error', 'function run() { return null.x; }', { execution: { maxAttempts: 5 } });
    ok(engine, START, { id: typeError, input: { executionId: id(606), input: {} } });
    worker.drain();
    expect(execution(id(606))).toMatchObject({ status: 'FAILED', attempt: 1, error: { code: 'SCRIPT_ERROR' } });

    const badOutput = tool(23, 'bad_output', 'function run() { return "x"; }', {
      tool: { outputSchema: { type: 'integer' } },
      execution: { maxAttempts: 5 },
    });
    ok(engine, START, { id: badOutput, input: { executionId: id(603), input: {} } });
    worker.drain();
    expect(execution(id(603))).toMatchObject({ status: 'FAILED', attempt: 1, error: { code: 'OUTPUT_INVALID' } });

    const lockedLater = tool(24, 'locked_later', 'function run() { return 1; }', { execution: { maxAttempts: 5 } });
    ok(engine, START, { id: lockedLater, input: { executionId: id(604), input: {} } });
    ok(engine, `mutation { actions { lockAction(id: "${lockedLater}", version: 1) { version } } }`);
    worker.drain();
    expect(execution(id(604))).toMatchObject({ status: 'FAILED', attempt: 1, error: { code: 'VERSION_LOCKED' } });
  });

  it('an attempt runs under the starter’s authority, read again at the attempt: a deleted client fails it with ACCESS_DENIED, not retried', () => {
    const poster = tool(25, 'poster2', POSTER, { execution: { maxAttempts: 5 } });
    ok(
      engine,
      'mutation { auth { createClient(input: {principal: "ops", name: "Ops", policies: [{effect: ALLOW, actions: [SELECT, INSERT, UPDATE], resources: ["*"]}]}) { apiKey } } }',
    );
    const started = engine.graphql(
      START,
      { id: poster, input: { executionId: id(605), input: { tx: id(101), from: id(1), to: id(2), amount: '1' } } },
      { principal: 'ops' },
    );
    expect(started.errors).toBeUndefined();
    ok(
      engine,
      `mutation { auth { updateClient(principal: "ops", input: {policies: [{effect: ALLOW, actions: [SELECT, INSERT], resources: ["actions.*"]}]}) { client { version } } } }`,
    );
    worker.drain();
    expect(execution(id(605))).toMatchObject({ status: 'FAILED', attempt: 1, error: { code: 'ACCESS_DENIED' } });

    const again = engine.graphql(
      START,
      { id: poster, input: { executionId: id(606), input: { tx: id(102), from: id(1), to: id(2), amount: '1' } } },
      { principal: 'ops' },
    );
    expect(again.errors).toBeUndefined();
    ok(engine, 'mutation { auth { deleteClient(principal: "ops") { principal } } }');
    worker.drain();
    expect(execution(id(606))).toMatchObject({ status: 'FAILED', attempt: 1, error: { code: 'ACCESS_DENIED' } });
    expect(count(engine, 'transactions')).toBe(0);
  });
});

describe('triggers', () => {
  it('a trigger on transaction.inserted with a filter starts its action for matching posts only, and never when the post rolled back', () => {
    const notify = tool(30, 'notify_large', 'function run(event) { return { alert: event.data.amount }; }');
    const trigger = ok(
      engine,
      `mutation { actions { createTrigger(input: {triggerId: "${id(31)}", name: "large transfers", on: ["transaction.inserted"],
      filter: "document.tranCode == 'TRANSFER' && decimal(document.params.amount) > decimal('10000')",
      action: {name: "notify_large"}, input: {amount: "document.params.amount", transaction: "document.transactionId"}}) { triggerId principal status } } }`,
    ).actions.createTrigger;
    expect(trigger).toEqual({ triggerId: id(31), principal: 'system', status: 'ACTIVE' });
    const post = (n: number, amount: string) =>
      ok(engine, POST, {
        input: { transactionId: id(n), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount } },
      });
    post(700, '50');
    post(701, '25000');
    expect(count(engine, 'executions')).toBe(1);
    // Rolled back: the post and the start go together.
    const rolledBack =
      engine.graphql(`mutation { postTransaction(input: {transactionId: "${id(702)}", tranCode: "TRANSFER", params: {from: "${id(1)}", to: "${id(2)}", amount: "99999"}}) { transactionId }
      voidTransaction(id: "${id(404)}") { transactionId } }`);
    expect(rolledBack.data).toBeNull();
    expect(count(engine, 'executions')).toBe(1);
    // A replay of the same post is idempotent and starts nothing new.
    post(701, '25000');
    expect(count(engine, 'executions')).toBe(1);
    worker.drain();
    const runs = ok(
      engine,
      `{ actions { executions(first: 10, where: {actionId: "${notify}"}) { nodes { status output triggerId } } } }`,
    ).actions.executions.nodes;
    expect(runs).toEqual([{ status: 'SUCCEEDED', output: { alert: '25000' }, triggerId: id(31) }]);
  });

  it('account.updated sees document and previous; a filter that fails to evaluate records a FAILED execution without blocking the change', () => {
    tool(32, 'on_lock', 'function run(event) { return event.data; }');
    ok(
      engine,
      `mutation { actions { createTrigger(input: {triggerId: "${id(33)}", name: "locks", on: ["account.updated"],
      filter: "previous.status != 'LOCKED' && document.status == 'LOCKED'", action: {name: "on_lock"}, input: {code: "document.code"}}) { name } } }`,
    );
    ok(
      engine,
      `mutation { actions { createTrigger(input: {triggerId: "${id(34)}", name: "broken", on: ["account.updated"],
      filter: "document.metadata.missing.deeper == 1", action: {name: "on_lock"}}) { name } } }`,
    );
    ok(engine, `mutation { updateAccount(id: "${id(2)}", input: {name: "renamed"}) { version } }`);
    ok(engine, `mutation { updateAccount(id: "${id(2)}", input: {status: LOCKED}) { version } }`);
    worker.drain();
    const byTrigger = engine.db
      .prepare('SELECT trigger_id, status, output, error FROM executions ORDER BY seq')
      .all() as Array<Record<string, string>>;
    expect(byTrigger.filter((r) => r.trigger_id === id(33)).map((r) => [r.status, JSON.parse(r.output!)])).toEqual([
      ['SUCCEEDED', { code: 'ACC-2' }],
    ]);
    const broken = byTrigger.filter((r) => r.trigger_id === id(34));
    expect(broken).toHaveLength(2);
    expect(broken.every((r) => r.status === 'FAILED' && JSON.parse(r.error!).code === 'CEL_ERROR')).toBe(true);
    expect(ok(engine, `{ account(id: "${id(2)}") { status } }`).account.status).toBe('LOCKED');
  });

  it('triggers are listed, updated, deleted; bad definitions are refused', () => {
    tool(35, 'target', 'function run() { return 1; }');
    ok(
      engine,
      `mutation { actions { createTrigger(input: {triggerId: "${id(36)}", name: "t", on: ["account.inserted"], action: {name: "target"}}) { name } } }`,
    );
    expect(
      ok(engine, '{ actions { triggers(first: 5) { nodes { name on action { name version } } } } }').actions.triggers
        .nodes,
    ).toEqual([{ name: 't', on: ['account.inserted'], action: { name: 'target', version: null } }]);
    expect(
      ok(engine, `mutation { actions { updateTrigger(id: "${id(36)}", input: {status: LOCKED}) { status version } } }`)
        .actions.updateTrigger,
    ).toEqual({ status: 'LOCKED', version: 2 });
    createAccount(engine, 9);
    expect(count(engine, 'executions')).toBe(0);
    ok(engine, `mutation { actions { deleteTrigger(id: "${id(36)}") { name } } }`);
    expect(
      fails(
        engine,
        `mutation { actions { createTrigger(input: {triggerId: "${id(37)}", name: "x", on: ["account.deleted"], action: {name: "target"}}) { name } } }`,
      ).code,
    ).toBe('BAD_REQUEST');
    expect(
      fails(
        engine,
        `mutation { actions { createTrigger(input: {triggerId: "${id(37)}", name: "x", on: ["account.inserted"], filter: "1 +", action: {name: "target"}}) { name } } }`,
      ).code,
    ).toBe('BAD_REQUEST');
    expect(
      fails(
        engine,
        `mutation { actions { createTrigger(input: {triggerId: "${id(37)}", name: "x", on: ["account.inserted"], action: {name: "nope"}}) { name } } }`,
      ).code,
    ).toBe('NOT_FOUND');
  });
});

describe('observability', () => {
  it('queue counts by state, and executions filtered by status, action and since', () => {
    const t = tool(40, 'counted', 'function run() { return 1; }');
    const f = tool(41, 'fails_once', 'function run() { fail("x", null, { retry: false }); }');
    ok(engine, START, { id: t, input: { executionId: id(800), input: {} } });
    clock.advance(1000);
    ok(engine, START, { id: t, input: { executionId: id(801), input: {} } });
    ok(engine, START, { id: f, input: { executionId: id(802), input: {} } });
    expect(ok(engine, '{ actions { queue { queued running failed } } }').actions.queue).toEqual({
      queued: 3,
      running: 0,
      failed: 0,
    });
    worker.drain();
    expect(ok(engine, '{ actions { queue { queued running failed } } }').actions.queue).toEqual({
      queued: 0,
      running: 0,
      failed: 1,
    });
    const since = ok(
      engine,
      `{ actions { executions(first: 10, where: {since: "2026-03-01T10:00:01.000Z"}) { nodes { executionId } } } }`,
    ).actions.executions.nodes;
    expect(since.map((n: any) => n.executionId)).toEqual([id(801), id(802)]);
    const failed = ok(
      engine,
      '{ actions { executions(first: 10, where: {status: FAILED}) { nodes { executionId invocation { attempt durationMs } } } } }',
    ).actions.executions.nodes;
    expect(failed).toEqual([{ executionId: id(802), invocation: { attempt: 1, durationMs: 0 } }]);
  });

  it('an in-process worker is woken right after a start commits', async () => {
    const t = tool(42, 'quick', 'function run() { return "ran"; }');
    const live = engine.createWorker({ owner: 'live', pollMs: 60_000 });
    engine.onStarted(() => live.wake());
    live.start();
    ok(engine, START, { id: t, input: { executionId: id(900), input: {} } });
    for (let i = 0; i < 100 && execution(id(900)).status !== 'SUCCEEDED'; i++)
      await new Promise((r) => setTimeout(r, 10));
    await live.stop();
    expect(execution(id(900))).toMatchObject({ status: 'SUCCEEDED', output: 'ran' });
  });
});

describe('execution.retryIf', () => {
  it('CEL over the failed attempt’s error decides: a deterministic failure retried on purpose, a retryable one not, attempts counted', async () => {
    const clock = new ManualClock(new Date('2026-11-30T10:00:00Z'));
    const engine = await newEngine({ clock, random: () => 0 });
    const make = (n: number, name: string, src: string, retryIf: string) =>
      ok(
        engine,
        `mutation($input: ActionInput!) { actions { createAction(id: "${id(n)}", input: $input) { version } } }`,
        {
          input: {
            name,
            config: { runtime: 'javascript', src },
            execution: { maxAttempts: 4, backoff: { initialMs: 1000, multiplier: 1, maxMs: 1000 }, retryIf },
          },
        },
      );
    // A ReferenceError (SCRIPT_ERROR) is never retried by default; this rule retries it twice.
    make(
      7201,
      'flaky_bug',
      'function run(event) { return undefinedThing; }',
      "error.code == 'SCRIPT_ERROR' && error.attempt < 3",
    );
    // TOOL_FAILED is retryable by default; this rule says no when the message says so.
    make(
      7202,
      'gives_up',
      'function run(event) { fail("card declined: do not retry"); }',
      "error.retryable && !error.message.contains('do not retry')",
    );
    const start = (name: string, e: number) =>
      ok(
        engine,
        `mutation { actions { startAction(name: "${name}", input: {executionId: "${id(e)}", input: {}}) { status } } }`,
      );
    // No rule overrides a refusal or a tool's own {retry: false}: the same door an agent's tool call asks.
    make(7204, 'says_no', 'function run(event) { fail("final", null, { retry: false }); }', 'true');
    make(
      7205,
      'denied',
      `function run(event) { graphql('mutation { createAccount(input: {accountId: "${id(7206)}", code: "x", name: "x"}) { code } }'); }`,
      'true',
    );
    start('flaky_bug', 7301);
    start('gives_up', 7302);
    start('says_no', 7303);
    start('denied', 7304);
    const worker = engine.createWorker();
    for (let i = 0; i < 6; i++) {
      worker.drain();
      clock.advance(1000);
    }
    const state = (e: number) =>
      ok(engine, `{ actions { execution(executionId: "${id(e)}") { status attempt error { code } } } }`).actions
        .execution;
    expect(state(7301)).toEqual({ status: 'FAILED', attempt: 3, error: { code: 'SCRIPT_ERROR' } });
    expect(state(7302)).toEqual({ status: 'FAILED', attempt: 1, error: { code: 'TOOL_FAILED' } });
    expect(state(7303)).toEqual({ status: 'FAILED', attempt: 1, error: { code: 'TOOL_FAILED' } });
    expect(state(7304)).toEqual({ status: 'FAILED', attempt: 1, error: { code: 'ACCESS_DENIED' } });
    // A rule that does not compile is refused when the version is made.
    const bad = fails(
      engine,
      `mutation($input: ActionInput!) { actions { createAction(id: "${id(7203)}", input: $input) { version } } }`,
      {
        input: {
          name: 'bad_rule',
          config: { runtime: 'javascript', src: 'function run() { return {}; }' },
          execution: { retryIf: 'error.code ==' },
        },
      },
    );
    expect(bad.code).toBe('BAD_REQUEST');
    expect(bad.message).toContain('retryIf');
    engine.close();
  });
});
