// ATTACK (c) a prompt-injected model driving an agent whose reference to the http tool asks a
// person's approval and fixes the account. The model tries every other door to the payout: the
// native graphql tool's startAction of the http tool, its invokeAction of a program that starts it
// after commit, and calling the program tool the agent also offers. SAFE if nothing reaches the
// provider without the reference's approval.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ScriptedModel, startScriptedModel, toolResults } from '../../../examples/scripted-model/server.mjs';
import type { Engine } from '../../../src/engine.js';
import { id, newEngine, ok } from '../../helpers/engine.js';
import { recorder, SEND } from './h.js';

const KEY = 'sk-h37-model-gate-0123456789';
process.env.H37_MODEL_KEY = KEY;
const TREE = `query($e: UUID!) { actions { execution(executionId: $e) { status
  children { children { actionName status error { code message } } } } } }`;

let model: ScriptedModel;
let provider: Awaited<ReturnType<typeof recorder>>;
let engine: Engine;

beforeAll(async () => {
  provider = await recorder((_q, res) => res.writeHead(201, { 'content-type': 'application/json' }).end('{"id":"x"}'));
  model = await startScriptedModel({ apiKey: KEY, rules: [() => ({ text: 'done' })] });
  engine = await newEngine({
    providers: [
      {
        name: 'local',
        format: 'openai',
        baseUrl: `${model.url}/v1`,
        models: ['m'],
        apiKeyEnv: 'H37_MODEL_KEY',
        maxRetries: 0,
      },
    ],
    integrations: [{ name: 'payouts', baseUrl: provider.url, methods: ['POST'], paths: ['/payouts'] }],
  });
  const create = (n: number, input: Record<string, unknown>) =>
    ok(engine, 'mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { version } } }', {
      id: id(n),
      i: input,
    });
  create(1, {
    name: 'pay_vendor',
    kind: 'http',
    config: { integration: 'payouts', method: 'POST', path: '/payouts' },
    tool: {
      description: 'Pay a vendor.',
      inputSchema: { type: 'object', properties: { account: { type: 'string' }, amount: { type: 'string' } } },
    },
    policies: [SEND],
  });
  create(2, {
    name: 'send_payout',
    config: { runtime: 'javascript', src: 'function run(e) { return tools.pay_vendor(e.data); }' },
    tool: { description: 'Starts a payout.', inputSchema: { type: 'object' } },
    tools: [{ name: 'pay_vendor', version: 1 }],
    policies: [SEND],
  });
  create(3, {
    name: 'teller',
    kind: 'agent',
    config: { provider: 'local', model: 'm', instructions: 'Help.' },
    tool: { description: 'A teller.' },
    tools: [
      { name: 'pay_vendor', version: 1, input: { account: "'ACME'" }, approval: { when: null } },
      { name: 'graphql' },
    ],
    policies: [SEND, { effect: 'ALLOW', actions: ['INSERT', 'SELECT'], resources: ['actions.Execution'] }],
  });
});
afterAll(async () => {
  engine?.close();
  await model?.close();
  await provider?.close();
});

async function run(e: string, query: string) {
  model.setRules([
    (r: any) =>
      toolResults(r).length === 0 ? { toolCalls: [{ name: 'graphql', arguments: { query } }] } : { text: 'done' },
  ]);
  ok(
    engine,
    'mutation($e: UUID!) { actions { startAction(name: "teller", input: {executionId: $e, input: {m: "pay MALLORY 1000"}}) { status } } }',
    { e },
  );
  const worker = engine.createWorker();
  for (const end = Date.now() + 10_000; Date.now() < end; await new Promise((r) => setTimeout(r, 5))) {
    await worker.drainAll();
    const s = ok(engine, TREE, { e }).actions.execution.status;
    if (['SUCCEEDED', 'FAILED', 'WAITING_APPROVAL'].includes(s)) break;
  }
  // Anything queued by the run is drained too.
  await engine.createWorker().drainAll();
  return ok(engine, TREE, { e }).actions.execution;
}

describe('the model tries the doors around its reference', () => {
  it('graphql startAction of the http tool: refused, nothing sent', async () => {
    await run(
      id(100),
      'mutation { actions { startAction(name: "pay_vendor", input: {executionId: "00000000-0000-4000-8000-000000000a01", input: {account: "MALLORY", amount: "1000"}}) { status } } }',
    );
    expect(provider.seen).toHaveLength(0);
  });

  it('graphql invokeAction of a program that starts the http tool after commit: refused, nothing sent', async () => {
    await run(
      id(101),
      'mutation { actions { invokeAction(name: "send_payout", input: {executionId: "00000000-0000-4000-8000-000000000a02", actionVersion: 1, input: {account: "MALLORY", amount: "1000"}}) { status } } }',
    );
    expect(provider.seen).toHaveLength(0);
  });
});
