// A payout ledger for the outside-call tests: a customer and a clearing account, TRANSFER, and the
// tools of a payout through the stand-in provider (examples/payout-provider): send_payout holds the
// money and calls the http tool payout, which settles (settle_payout) or releases (release_payout).
import type { Engine, EngineOptions } from '../../src/engine.js';
import { id, newEngine, ok } from './engine.js';
import { createAccount, createTransferCode } from './ledger.js';

export const CUSTOMER = id(1);
export const CLEARING = id(2);

export const SEND_PAYOUT = `function run(event) {
  const d = event.data;
  graphql("mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }", { i: {
    transactionId: d.payout_id, tranCode: "TRANSFER",
    params: { from: "${CUSTOMER}", to: "${CLEARING}", amount: d.amount, layer: "PENDING" } } });
  const started = tools.payout({ payout_id: d.payout_id, amount: d.amount, currency: "USD", account: d.account });
  if (d.fail_after) fail("the caller changed its mind");
  return started;
}`;

const SETTLE = `function run(event) {
  const d = event.data;
  graphql("mutation($id: UUID!) { voidTransaction(id: $id) { transactionId } }", { id: d.hold_id });
  graphql("mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }", { i: {
    transactionId: d.settle_id, tranCode: "TRANSFER",
    params: { from: "${CUSTOMER}", to: "${CLEARING}", amount: d.amount } } });
  return { settled: true, provider_id: d.provider_id };
}`;

const RELEASE = `function run(event) {
  graphql("mutation($id: UUID!) { voidTransaction(id: $id) { transactionId } }", { id: event.data.hold_id });
  return { released: true, why: event.data.why };
}`;

const LEDGER_POLICY = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }];
/** Sending to the payouts integration: every layer above an outside call must allow it, as any operation. */
export const PAYOUTS_POLICY = {
  effect: 'ALLOW',
  actions: ['INSERT'],
  resources: ['actions.Integration'],
  assertions: { payouts: "context.document.name == 'payouts'" },
};

/** The `payouts` integration, pointing at `providerUrl`, as TALLY_CONFIG's `integrations` holds it. */
export function payoutsIntegration(providerUrl: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name: 'payouts',
    baseUrl: `${providerUrl}/v1`,
    methods: ['POST', 'GET'],
    paths: ['/payouts'],
    headers: { Authorization: { env: 'TEST_PAYOUTS_TOKEN', prefix: 'Bearer ' } },
    timeoutMs: 5000,
    ...extra,
  };
}

/**
 * A fresh engine with the payout ledger, its integration pointing at `providerUrl` (`options.path`:
 * on a database file, for worker processes).
 */
export async function payoutEngine(
  providerUrl: string,
  extra: Record<string, unknown> = {},
  options: Omit<EngineOptions, 'integrations'> = {},
): Promise<Engine> {
  const engine = await newEngine({
    ...options,
    integrations: [payoutsIntegration(providerUrl, extra)],
  });
  createAccount(engine, 1);
  createAccount(engine, 2);
  createTransferCode(engine);
  ok(engine, 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
    i: { transactionId: id(900), tranCode: 'TRANSFER', params: { from: CLEARING, to: CUSTOMER, amount: '1000' } },
  });
  let n = 800;
  const create = (input: Record<string, unknown>) =>
    ok(
      engine,
      'mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { actionId version } } }',
      {
        id: id(n++),
        i: input,
      },
    );
  create({
    name: 'settle_payout',
    config: { runtime: 'javascript', src: SETTLE },
    tool: { description: 'Settle a payout the provider paid: void its hold, post it settled.' },
    policies: LEDGER_POLICY,
  });
  create({
    name: 'release_payout',
    config: { runtime: 'javascript', src: RELEASE },
    tool: { description: 'Release the hold of a payout the provider refused.' },
    policies: LEDGER_POLICY,
  });
  create({
    name: 'payout',
    kind: 'http',
    config: {
      integration: 'payouts',
      method: 'POST',
      path: '/payouts',
      responseHeaders: ['content-type'],
      followUps: {
        succeeded: {
          tool: 'settle_payout',
          input:
            '{"hold_id": input.payout_id, "settle_id": execution.executionId, "amount": input.amount, "provider_id": output.body.id}',
        },
        failed: { tool: 'release_payout', input: '{"hold_id": input.payout_id, "why": error.code}' },
      },
    },
    tool: {
      description: 'Pay money out to an outside account through the payout provider.',
      inputSchema: {
        type: 'object',
        properties: {
          payout_id: { type: 'string' },
          amount: { type: 'string' },
          currency: { type: 'string' },
          account: { type: 'string' },
        },
        required: ['payout_id', 'amount', 'currency'],
      },
    },
    tools: [
      { name: 'settle_payout', version: 1 },
      { name: 'release_payout', version: 1 },
    ],
    policies: [...LEDGER_POLICY, PAYOUTS_POLICY],
    execution: { maxAttempts: 5, backoff: { initialMs: 1, multiplier: 1, maxMs: 1 } },
  });
  create({
    name: 'send_payout',
    config: { runtime: 'javascript', src: SEND_PAYOUT },
    tool: { description: 'Hold the money and ask the provider to pay it out, after this request commits.' },
    tools: [{ name: 'payout', version: 1 }],
    policies: [...LEDGER_POLICY, PAYOUTS_POLICY],
  });
  return engine;
}

const SEND = `mutation($e: UUID!, $input: JSON) { actions { invokeAction(name: "send_payout", input: {executionId: $e, actionVersion: 1, input: $input}) {
  status invocation { output } } } }`;

/**
 * Invoke send_payout as execution `executionId`: the hold is posted and the payout started in one
 * request; returns the started http execution's id.
 */
export function sendPayout(
  engine: Engine,
  executionId: string,
  input: { payout_id: string; amount: string; account?: string },
): string {
  const result = ok(engine, SEND, { e: executionId, input });
  const invoked = result.actions.invokeAction as { status: string; invocation: { output: { executionId: string } } };
  if (invoked.status !== 'SUCCEEDED') throw new Error(`send_payout ${executionId} ended ${invoked.status}`);
  return invoked.invocation.output.executionId;
}
