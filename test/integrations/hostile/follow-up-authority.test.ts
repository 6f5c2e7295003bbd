// ATTACK (a) a client that may start the payout http tool but may neither call settle_payout nor
// write the ledger: does the follow-up (started by the engine on the provider's answer, with consent
// flags on its start stack) let it do either? And can a client forge the consent flags through
// startAction's input? SAFE if the follow-up runs under the client's own authority, narrowed.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../../src/engine.js';
import { id, ok } from '../../helpers/engine.js';
import { CLEARING, CUSTOMER, payoutEngine } from '../../helpers/payouts.js';
import { drain, recorder, rows } from './h.js';

process.env.TEST_PAYOUTS_TOKEN = 'tok_h37_followup_authority_0123';
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

describe('a follow-up runs under the starter, narrowed', () => {
  it('a client that may only start payout: settle_payout is refused (no ledger write by consent)', async () => {
    engine = await payoutEngine(provider.url);
    ok(
      engine,
      `mutation { auth { createClient(input: {principal: "starter", name: "starter", policies: [
        {effect: ALLOW, actions: [INSERT, SELECT], resources: ["actions.Execution"], assertions: {only: "context.document.action == 'payout'"}},
        {effect: ALLOW, actions: [SELECT], resources: ["actions.Execution"]},
        {effect: ALLOW, actions: [INSERT], resources: ["actions.Integration"]},
        {effect: ALLOW, actions: [SELECT], resources: ["financial.*"]}]}) { apiKey } } }`,
    );
    // The hold the payout will settle, posted by someone who may.
    ok(engine, 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
      i: {
        transactionId: id(21),
        tranCode: 'TRANSFER',
        params: { from: CUSTOMER, to: CLEARING, amount: '5', layer: 'PENDING' },
      },
    });
    const started = engine.graphql(
      'mutation($e: UUID!, $i: JSON) { actions { startAction(name: "payout", input: {executionId: $e, input: $i}) { status } } }',
      { e: id(22), i: { payout_id: id(21), amount: '5', currency: 'USD' } },
      { principal: 'starter' },
    );
    expect(started.errors).toBeUndefined();
    await drain(engine);
    const followUps = rows(
      engine,
      "SELECT action_name, status, error, start_stack FROM executions WHERE action_name IN ('settle_payout', 'release_payout')",
    );
    expect(provider.seen).toHaveLength(1);
    expect(followUps).toHaveLength(1);
    expect(followUps[0].status).toBe('FAILED');
    expect(JSON.parse(followUps[0].error).code).toBe('ACCESS_DENIED');
    // Nothing was written to the ledger by the follow-up.
    expect(rows(engine, 'SELECT count(*) AS n FROM transactions WHERE void_of IS NOT NULL')[0].n).toBe(0);
  });
});

describe('forging consent through startAction', () => {
  it('unknown input fields (startStack, consents) are refused by the schema', async () => {
    engine = await payoutEngine(provider.url);
    const forged = engine.graphql(
      'mutation { actions { startAction(name: "settle_payout", input: {executionId: "' +
        id(31) +
        '", input: {}, startStack: [{actionId: "x", version: 1, consents: true}]}) { status } } }',
    );
    expect(forged.errors?.[0]?.message).toMatch(/startStack/);
  });
});
