import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { ServerMetrics } from '../../src/server/metrics.js';
import { startPayoutProvider } from '../../examples/payout-provider/provider.mjs';
import { id, newEngine, ok } from '../helpers/engine.js';
import { balanceOf } from '../helpers/ledger.js';
import { CLEARING, CUSTOMER, PAYOUTS_POLICY, payoutEngine } from '../helpers/payouts.js';

// http tools against a real HTTP server on loopback (the stand-in payout provider), through the
// worker: a payout a program asks for runs only after its request commits, once per idempotency
// key, and its outcome settles or releases the hold.

const TOKEN = 'sk_live_0123456789abcdefSECRET';
process.env.TEST_PAYOUTS_TOKEN = TOKEN;

type Provider = Awaited<ReturnType<typeof startPayoutProvider>>;
let provider: Provider;

beforeAll(async () => {
  provider = await startPayoutProvider({ token: TOKEN });
});
afterAll(async () => {
  await provider.close();
});

const INVOKE = `mutation($e: UUID!, $input: JSON) { actions { invokeAction(name: "send_payout", input: {executionId: $e, actionVersion: 1, input: $input}) {
  status invocation { output error { code message } } } } }`;
const EXECUTION = `query($id: UUID!) { actions { execution(executionId: $id) { status attempt output error { code message hint } kind
  outbound { idempotencyKey sends } } } }`;

async function drain(engine: Engine): Promise<void> {
  const worker = engine.createWorker();
  for (let i = 0; i < 50; i++) {
    await worker.drainAll();
    const due = engine.db
      .prepare("SELECT count(*) AS n FROM executions WHERE status IN ('QUEUED', 'RUNNING') AND parent_id IS NULL")
      .get() as { n: number };
    if (due.n === 0) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error('the queue did not drain');
}

function requestsFor(payoutId: string) {
  return provider.requests.filter(
    (r) => r.path === '/v1/payouts' && (r.body as { payout_id?: string })?.payout_id === payoutId,
  );
}

describe('an http tool a program calls runs after its request commits', () => {
  let engine: Engine;
  beforeEach(async () => {
    engine = await payoutEngine(provider.url);
  });
  afterEach(() => engine.close());

  it('a request that rolls back never sends the payout; one that commits sends it once and settles it', async () => {
    const rolledBack = id(101);
    const failed = ok(engine, INVOKE, { e: id(201), input: { payout_id: rolledBack, amount: '10', fail_after: true } });
    expect(failed.actions.invokeAction.status).toBe('FAILED');
    await drain(engine);
    expect(requestsFor(rolledBack)).toHaveLength(0);

    const payoutId = id(102);
    const result = ok(engine, INVOKE, { e: id(202), input: { payout_id: payoutId, amount: '25.50' } });
    expect(result.actions.invokeAction.status).toBe('SUCCEEDED');
    const started = result.actions.invokeAction.invocation.output as { executionId: string; status: string };
    expect(started.status).toBe('QUEUED');
    // Committed, not yet sent: the worker sends it.
    expect(requestsFor(payoutId)).toHaveLength(0);
    expect(Number(balanceOf(engine, CUSTOMER).pending.normalBalance.units)).toBe(-25.5);
    await drain(engine);
    const sent = requestsFor(payoutId);
    expect(sent).toHaveLength(1);
    expect(sent[0]!.authorization).toBe(`Bearer ${TOKEN}`);
    expect(sent[0]!.key).toMatch(/^[0-9a-f-]{36}$/);
    const run = ok(engine, EXECUTION, { id: started.executionId }).actions.execution;
    expect(run).toMatchObject({ status: 'SUCCEEDED', kind: 'HTTP', attempt: 1 });
    expect(run.output.status).toBe(201);
    // Settled: the hold voided, the money moved on the settled layer.
    const balance = balanceOf(engine, CUSTOMER);
    expect(Number(balance.pending.normalBalance.units)).toBe(0);
    expect(Number(balance.settled.normalBalance.units)).toBe(974.5);
    // The secret is in no record.
    const everything = JSON.stringify(engine.db.prepare('SELECT * FROM executions').all());
    expect(everything).not.toContain(TOKEN.slice(4, 20));
  });

  it('a provider answering 500 three times then 201 settles once, with one idempotency key; /metrics counts each call', async () => {
    const metrics = new ServerMetrics(engine);
    provider.failNext(3, 500);
    const payoutId = id(103);
    const result = ok(engine, INVOKE, { e: id(203), input: { payout_id: payoutId, amount: '7' } });
    const started = result.actions.invokeAction.invocation.output as { executionId: string };
    await drain(engine);
    const sent = requestsFor(payoutId);
    expect(sent).toHaveLength(4);
    expect(new Set(sent.map((r) => r.key)).size).toBe(1);
    const run = ok(engine, EXECUTION, { id: started.executionId }).actions.execution;
    expect(run).toMatchObject({
      status: 'SUCCEEDED',
      attempt: 4,
      outbound: { sends: 4, idempotencyKey: sent[0]!.key },
    });
    expect(Number(balanceOf(engine, CUSTOMER).settled.normalBalance.units)).toBe(993);
    const text = await metrics.registry.metrics();
    expect(text).toContain(
      'tally_outbound_calls_total{kind="http",name="payouts",outcome="INTEGRATION_UNAVAILABLE"} 3',
    );
    expect(text).toContain('tally_outbound_calls_total{kind="http",name="payouts",outcome="ok"} 1');
    expect(text).toMatch(/tally_outbound_call_duration_seconds_count\{kind="http",name="payouts"\} 4/);
    expect(Number(balanceOf(engine, CUSTOMER).pending.normalBalance.units)).toBe(0);
  });

  it('a final failure releases the hold and is not retried', async () => {
    const payoutId = id(104);
    const result = ok(engine, INVOKE, { e: id(204), input: { payout_id: payoutId, amount: '13.13' } });
    const started = result.actions.invokeAction.invocation.output as { executionId: string };
    await drain(engine);
    expect(requestsFor(payoutId)).toHaveLength(1);
    const run = ok(engine, EXECUTION, { id: started.executionId }).actions.execution;
    expect(run.status).toBe('FAILED');
    expect(run.error.code).toBe('INTEGRATION_ERROR');
    expect(run.error.message).toContain('HTTP 422');
    const balance = balanceOf(engine, CUSTOMER);
    expect(Number(balance.pending.normalBalance.units)).toBe(0);
    expect(Number(balance.settled.normalBalance.units)).toBe(1000);
  });

  /** payout as a new version with `change` (its followUps kept), started directly for a hold posted here. */
  async function payoutVersion(change: Record<string, unknown>, payoutId: string, amount: string) {
    const { actionId } = ok(engine, '{ actions { action(name: "payout") { actionId } } }').actions.action;
    const version = ok(
      engine,
      'mutation($id: UUID!, $i: ActionInput!) { actions { updateAction(id: $id, input: $i) { version } } }',
      {
        id: actionId,
        i: change,
      },
    ).actions.updateAction.version;
    ok(engine, 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
      i: {
        transactionId: payoutId,
        tranCode: 'TRANSFER',
        params: { from: CUSTOMER, to: CLEARING, amount, layer: 'PENDING' },
      },
    });
    const e = id(`7${payoutId.slice(-5)}`);
    ok(
      engine,
      'mutation($e: UUID!, $v: Int, $i: JSON) { actions { startAction(name: "payout", input: {executionId: $e, actionVersion: $v, input: $i}) { status } } }',
      {
        e,
        v: version,
        i: { payout_id: payoutId, amount, currency: 'USD' },
      },
    );
    await drain(engine);
    return ok(engine, EXECUTION, { id: e }).actions.execution;
  }

  const followUps = () =>
    engine.db
      .prepare("SELECT action_name FROM executions WHERE action_name IN ('settle_payout', 'release_payout')")
      .all() as Array<{ action_name: string }>;

  it('a payout the provider made whose answer the tool cannot map keeps its hold: no release for money that left', async () => {
    const payoutId = id(105);
    const run = await payoutVersion(
      {
        config: {
          integration: 'payouts',
          method: 'POST',
          path: '/payouts',
          output: '{"id": body.no_such_field}',
          followUps: {
            succeeded: {
              tool: 'settle_payout',
              input: '{"hold_id": input.payout_id, "settle_id": execution.executionId, "amount": input.amount}',
            },
            failed: { tool: 'release_payout', input: '{"hold_id": input.payout_id, "why": error.code}' },
          },
        },
      },
      payoutId,
      '40',
    );
    expect(requestsFor(payoutId)).toHaveLength(1);
    expect(run.status).toBe('FAILED');
    expect(run.error.code).toBe('INTEGRATION_ERROR');
    expect(run.error.message).toContain('succeeded (HTTP 201), but config.output could not map its answer');
    expect(followUps()).toEqual([]);
    expect(Number(balanceOf(engine, CUSTOMER).pending.normalBalance.units)).toBe(-40);
  });

  it('a payout whose every attempt failed after sending keeps its hold: its outcome is unknown', async () => {
    provider.failNext(2, 503);
    const payoutId = id(106);
    const run = await payoutVersion(
      { execution: { maxAttempts: 2, backoff: { initialMs: 1, multiplier: 1, maxMs: 1 } } },
      payoutId,
      '30',
    );
    expect(requestsFor(payoutId)).toHaveLength(2);
    expect(run).toMatchObject({ status: 'FAILED', outbound: { sends: 2 } });
    expect(run.error.code).toBe('INTEGRATION_UNAVAILABLE');
    expect(followUps()).toEqual([]);
    expect(Number(balanceOf(engine, CUSTOMER).pending.normalBalance.units)).toBe(-30);
  });

  it('a payout cancelled before it was sent releases its hold; nothing is sent', async () => {
    const payoutId = id(107);
    ok(engine, 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
      i: {
        transactionId: payoutId,
        tranCode: 'TRANSFER',
        params: { from: CUSTOMER, to: CLEARING, amount: '12', layer: 'PENDING' },
      },
    });
    const e = id(7107);
    ok(
      engine,
      'mutation($e: UUID!, $i: JSON) { actions { startAction(name: "payout", input: {executionId: $e, input: $i}) { status } } }',
      {
        e,
        i: { payout_id: payoutId, amount: '12', currency: 'USD' },
      },
    );
    ok(engine, 'mutation($e: UUID!) { actions { cancelExecution(executionId: $e) { status } } }', { e });
    await drain(engine);
    expect(requestsFor(payoutId)).toHaveLength(0);
    expect(followUps()).toEqual([{ action_name: 'release_payout' }]);
    expect(Number(balanceOf(engine, CUSTOMER).pending.normalBalance.units)).toBe(0);
  });
});

describe('an engine with no integrations at all (a deploy into a database file, say)', () => {
  it('takes an http tool, its integration unchecked as a model provider is; its run fails INTEGRATION_ERROR, not retried', async () => {
    const engine = await newEngine();
    try {
      ok(engine, `mutation($i: ActionInput!) { actions { createAction(id: "${id(600)}", input: $i) { version } } }`, {
        i: {
          name: 'ping',
          kind: 'http',
          config: { integration: 'payouts', method: 'POST', path: '/payouts' },
          policies: [PAYOUTS_POLICY],
          execution: { maxAttempts: 3 },
        },
      });
      const bad = engine.graphql(
        `mutation($i: ActionInput!) { actions { createAction(id: "${id(601)}", input: $i) { version } } }`,
        { i: { name: 'bad', kind: 'http', config: { integration: 'payouts', method: 'POST', path: '/a/../b' } } },
      );
      expect(bad.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
      ok(
        engine,
        `mutation { actions { startAction(name: "ping", input: {executionId: "${id(602)}", input: {}}) { status } } }`,
      );
      await drain(engine);
      expect(ok(engine, EXECUTION, { id: id(602) }).actions.execution).toMatchObject({
        status: 'FAILED',
        attempt: 1,
        error: { code: 'INTEGRATION_ERROR', message: 'no integration named "payouts" is configured here' },
      });
    } finally {
      engine.close();
    }
  });
});
