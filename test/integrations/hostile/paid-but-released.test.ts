// ATTACK (d) a hostile or merely changed payout provider: it PAYS (the money leaves) and answers 2xx,
// but the answer is one Tally does not like after the fact: a body over responseBytesMax, a body the
// tool's outputSchema refuses, or a body config.output cannot map. Each of these is recorded as a
// FINAL failure (retry: false) of an execution that sent its request, so the `failed` follow-up
// (release_payout) runs and voids the hold: the ledger says the customer still has the money the
// provider paid out. DESIGN §11: "its outcome starts the follow-up (settle, or release) so that
// ledger and world end consistent"; follow-ups.ts itself says a failure after a send whose outcome
// is unknown must start nothing ("a release would undo a hold on money that may have left"). Here
// the outcome is not even unknown: the provider said 201.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../../src/engine.js';
import { id, ok } from '../../helpers/engine.js';
import { balanceOf } from '../../helpers/ledger.js';
import { CUSTOMER, CLEARING, payoutEngine, PAYOUTS_POLICY, sendPayout } from '../../helpers/payouts.js';
import { createAction, drain, recorder, rows } from './h.js';

process.env.TEST_PAYOUTS_TOKEN = 'tok_paid_but_released_0123456789';

/** The provider pays every POST (records it) and answers 201 with what `body()` gives. */
let answer: (payoutId: string) => string = () => '{}';
let status: (payoutId: string) => { code: number; headers?: Record<string, string> } = () => ({ code: 201 });
let provider: Awaited<ReturnType<typeof recorder>>;
const paid: string[] = [];

beforeAll(async () => {
  provider = await recorder((_req, res, body) => {
    const payoutId = JSON.parse(body).payout_id as string;
    paid.push(payoutId); // the money has left
    const { code, headers } = status(payoutId);
    res.writeHead(code, { 'content-type': 'application/json', ...(headers ?? {}) });
    res.end(answer(payoutId));
  });
});
afterAll(() => provider.close());

let engine: Engine;
afterEach(() => engine?.close());

function followUps(e: Engine) {
  return rows(
    e,
    "SELECT action_name, status FROM executions WHERE action_name IN ('settle_payout', 'release_payout') ORDER BY seq",
  ).map((r) => `${r.action_name}:${r.status}`);
}

/** What the ledger believes after the run: the customer's settled and pending balance. */
function customer(e: Engine) {
  const b = balanceOf(e, CUSTOMER);
  return { settled: b.settled.normalBalance.units, pending: b.pending.normalBalance.units };
}

describe('a provider that paid and answered 2xx: the hold must not be released', () => {
  it('answer body larger than responseBytesMax after a 201 → hold released (BROKEN if release runs)', async () => {
    engine = await payoutEngine(provider.url, { responseBytesMax: 256 });
    answer = (p) => JSON.stringify({ id: `po_${p}`, status: 'paid', receipt: 'r'.repeat(1000) });
    paid.length = 0;
    const payoutId = id(4101);
    const httpExecution = sendPayout(engine, id(4201), { payout_id: payoutId, amount: '100' });
    await drain(engine);
    const run = rows(engine, 'SELECT status, error FROM executions WHERE execution_id = ?', httpExecution)[0];
    expect(run?.status).toBe('FAILED');
    // The provider paid exactly once.
    expect(paid).toEqual([payoutId]);
    // What Tally did with it:
    // Either settle (it was paid) or keep the hold for a person. Never release money that left.
    expect(followUps(engine)).not.toContain('release_payout:SUCCEEDED');
    // The hold is kept, where a person finds it.
    expect(Number(customer(engine).pending)).toBe(-100);
  });

  it('POST answered 303 See Other to the created payout (it was made) → "redirects are never followed", final → hold released', async () => {
    engine = await payoutEngine(provider.url);
    answer = () => '';
    status = (p) => ({ code: 303, headers: { location: `/v1/payouts/po_${p}` } });
    paid.length = 0;
    try {
      const payoutId = id(4103);
      const httpExecution = sendPayout(engine, id(4203), { payout_id: payoutId, amount: '100' });
      await drain(engine);
      const run = rows(engine, 'SELECT status, error FROM executions WHERE execution_id = ?', httpExecution)[0];
      expect(run?.status).toBe('FAILED');
      expect(paid).toEqual([payoutId]);
      expect(followUps(engine)).not.toContain('release_payout:SUCCEEDED');
      // The hold is kept, where a person finds it.
      expect(Number(customer(engine).pending)).toBe(-100);
    } finally {
      status = () => ({ code: 201 });
    }
  });

  it('a 201 whose body is JSON nested 200,000 deep: the hold is kept (SAFE here; the INTERNAL is answers.test.ts)', async () => {
    engine = await payoutEngine(provider.url);
    answer = () => `{"id":"po_1","status":"paid","x":${'['.repeat(200_000)}${']'.repeat(200_000)}}`;
    paid.length = 0;
    const payoutId = id(4102);
    const httpExecution = sendPayout(engine, id(4202), { payout_id: payoutId, amount: '100' });
    await drain(engine);
    const run = rows(engine, 'SELECT status, attempt, error FROM executions WHERE execution_id = ?', httpExecution)[0];
    expect(run?.status).toBe('FAILED');
    expect(paid.length).toBeGreaterThanOrEqual(1);
    expect(followUps(engine)).not.toContain('release_payout:SUCCEEDED');
    // The hold is kept, where a person finds it.
    expect(Number(customer(engine).pending)).toBe(-100);
  });

  for (const [label, tool, body] of [
    [
      'a 201 whose body the tool’s outputSchema refuses (one extra field) → OUTPUT_INVALID, final → release',
      {
        tool: {
          description: 'Pay out.',
          inputSchema: { type: 'object', properties: { payout_id: { type: 'string' }, amount: { type: 'string' } } },
          outputSchema: {
            type: 'object',
            properties: { id: { type: 'string' }, status: { const: 'paid' } },
            required: ['id', 'status'],
            additionalProperties: false,
          },
        },
        output: '{"id": body.id, "status": body.status, "fee": body.fee}',
      },
      (p: string) => JSON.stringify({ id: `po_${p}`, status: 'paid', fee: '0.25' }),
    ],
    [
      'a 201 whose body moved a field (provider API change) → config.output CEL error, final → release',
      {
        tool: {
          description: 'Pay out.',
          inputSchema: { type: 'object', properties: { payout_id: { type: 'string' }, amount: { type: 'string' } } },
        },
        output: '{"id": body.id, "status": body.status}',
      },
      (p: string) => JSON.stringify({ payout: { id: `po_${p}`, status: 'paid' } }),
    ],
    [
      'a 201 whose body makes config.success fail to evaluate → final → release',
      {
        tool: {
          description: 'Pay out.',
          inputSchema: { type: 'object', properties: { payout_id: { type: 'string' }, amount: { type: 'string' } } },
        },
        success: 'status == 201 && body.status == "paid"',
      },
      (p: string) => JSON.stringify({ payout: { id: `po_${p}`, state: 'paid' } }),
    ],
  ] as const) {
    it(label, async () => {
      engine = await payoutEngine(provider.url);
      answer = body;
      paid.length = 0;
      const cfg = tool as Record<string, any>;
      const created = createAction(engine, {
        name: 'payout_strict',
        kind: 'http',
        config: {
          integration: 'payouts',
          method: 'POST',
          path: '/payouts',
          ...(cfg.output ? { output: cfg.output } : {}),
          ...(cfg.success ? { success: cfg.success } : {}),
          followUps: {
            succeeded: {
              tool: 'settle_payout',
              input:
                '{"hold_id": input.payout_id, "settle_id": execution.executionId, "amount": input.amount, "provider_id": "x"}',
            },
            failed: { tool: 'release_payout', input: '{"hold_id": input.payout_id, "why": error.code}' },
          },
        },
        tool: cfg.tool,
        tools: [
          { name: 'settle_payout', version: 1 },
          { name: 'release_payout', version: 1 },
        ],
        policies: [
          { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
          PAYOUTS_POLICY,
        ],
        execution: { maxAttempts: 3, backoff: { initialMs: 1, multiplier: 1, maxMs: 1 } },
      });
      expect(created.errors).toBeUndefined();
      // The hold, as send_payout posts it.
      const payoutId = id(4301);
      ok(engine, 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
        i: {
          transactionId: payoutId,
          tranCode: 'TRANSFER',
          params: { from: CUSTOMER, to: CLEARING, amount: '100', layer: 'PENDING' },
        },
      });
      const e = id(4401);
      ok(
        engine,
        'mutation($e: UUID!, $i: JSON) { actions { startAction(name: "payout_strict", input: {executionId: $e, input: $i}) { status } } }',
        {
          e,
          i: { payout_id: payoutId, amount: '100' },
        },
      );
      await drain(engine);
      const run = rows(engine, 'SELECT status, error, attempt FROM executions WHERE execution_id = ?', e)[0];
      expect(run?.status).toBe('FAILED');
      expect(paid).toEqual([payoutId]); // the provider paid, once
      expect(followUps(engine)).not.toContain('release_payout:SUCCEEDED');
      // The hold is kept, where a person finds it.
      expect(Number(customer(engine).pending)).toBe(-100);
    });
  }
});
