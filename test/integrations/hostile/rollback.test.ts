// ATTACK (a) a client trying to make a payout go out for work that did not commit: the program fails
// after tools.payout(), a later mutation in the same document fails, @dryRun, a started program
// whose first attempt fails after starting it, and the same invokeAction replayed. SAFE if every
// payout that goes out belongs to committed work, once, with one key.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../../src/engine.js';
import { id, ok } from '../../helpers/engine.js';
import { payoutEngine } from '../../helpers/payouts.js';
import { drain, recorder } from './h.js';

process.env.TEST_PAYOUTS_TOKEN = 'tok_h37_rollback_0123456789';
let provider: Awaited<ReturnType<typeof recorder>>;
let engine: Engine;

beforeAll(async () => {
  provider = await recorder((_q, res, body) =>
    res
      .writeHead(201, { 'content-type': 'application/json' })
      .end(JSON.stringify({ id: `po_${JSON.parse(body).payout_id}`, status: 'paid' })),
  );
});
afterAll(() => provider.close());
afterEach(() => engine?.close());

const INVOKE = (extra = '') =>
  `mutation($e: UUID!, $input: JSON)${extra} { actions { invokeAction(name: "send_payout", input: {executionId: $e, actionVersion: 1, input: $input}) { status error { code } } } }`;

describe('no payout for work that did not commit', () => {
  it('program fails after tools.payout(); whole document fails after it; @dryRun; replay of a committed invoke', async () => {
    engine = await payoutEngine(provider.url);
    provider.seen.length = 0;
    // 1. The program fails after starting the payout: its call (and the start) is undone.
    const failed = ok(engine, INVOKE(), { e: id(1), input: { payout_id: id(11), amount: '1', fail_after: true } });
    expect(failed.actions.invokeAction.status).toBe('FAILED');
    // 2. A later operation of the same document fails: the request rolls back whole.
    const doc = `mutation($e: UUID!, $input: JSON) { a: actions { invokeAction(name: "send_payout", input: {executionId: $e, actionVersion: 1, input: $input}) { status } }
      b: postTransaction(input: {transactionId: "${id(99)}", tranCode: "NO_SUCH_CODE", params: {}}) { transactionId } }`;
    const rolled = engine.graphql(doc, { e: id(2), input: { payout_id: id(12), amount: '1' } });
    expect(rolled.errors).toBeDefined();
    // 3. @dryRun.
    const dry = engine.graphql(INVOKE(' @dryRun'), { e: id(3), input: { payout_id: id(13), amount: '1' } });
    expect(dry.errors).toBeUndefined();
    // 4. Committed once, then replayed with the same executionId and input.
    ok(engine, INVOKE(), { e: id(4), input: { payout_id: id(14), amount: '1' } });
    ok(engine, INVOKE(), { e: id(4), input: { payout_id: id(14), amount: '1' } });
    await drain(engine);
    const sent = provider.seen.map((r) => ({
      payout: JSON.parse(r.body).payout_id,
      key: r.headers['idempotency-key'],
    }));
    expect(sent.map((s) => s.payout)).toEqual([id(14)]);
  });

  it('a started program whose first attempt fails after tools.payout(): one payout, one key', async () => {
    engine = await payoutEngine(provider.url);
    provider.seen.length = 0;
    ok(engine, 'mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { version } } }', {
      id: id(50),
      i: {
        name: 'flaky_send',
        config: {
          runtime: 'javascript',
          src: 'function run(e) { const s = tools.payout({payout_id: e.data.payout_id, amount: "1", currency: "USD"}); if (e.execution.attempt === 1) fail("try again"); return s; }',
        },
        tool: { description: 'x' },
        tools: [{ name: 'payout', version: 1 }],
        policies: [
          {
            effect: 'ALLOW',
            actions: ['INSERT'],
            resources: ['actions.Integration'],
            assertions: { p: "context.document.name == 'payouts'" },
          },
        ],
        execution: { maxAttempts: 3, backoff: { initialMs: 1, multiplier: 1, maxMs: 1 } },
      },
    });
    ok(
      engine,
      'mutation { actions { startAction(name: "flaky_send", input: {executionId: "' +
        id(51) +
        '", input: {payout_id: "' +
        id(52) +
        '"}}) { status } } }',
    );
    await drain(engine);
    const sent = provider.seen.map((r) => r.headers['idempotency-key']);
    expect(sent).toHaveLength(1);
  });
});
