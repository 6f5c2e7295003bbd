// Tally's own MCP server now offers http tools (STARTED_KINDS gained http and mcp). Its tools/list
// says every tool is idempotentHint: true and openWorldHint: false ("idempotent because every call
// carries an execution id"). An MCP client that believes it retries a tools/call whose answer it
// lost (the usual behaviour for an idempotent tool), without _meta.executionId (which MCP clients do
// not know to send): is the payout sent twice, under two different idempotency keys?
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../../src/engine.js';
import { engineBackend } from '../../../src/mcp/backend.js';
import { createMcpServer } from '../../../src/mcp/server.js';
import { id, newEngine, ok } from '../../helpers/engine.js';
import { recorder, SEND } from './h.js';

let provider: Awaited<ReturnType<typeof recorder>>;
let engine: Engine;
let worker: ReturnType<Engine['createWorker']>;

beforeAll(async () => {
  provider = await recorder((_q, res) => res.writeHead(201, { 'content-type': 'application/json' }).end('{"id":"po"}'));
  engine = await newEngine({
    integrations: [{ name: 'payouts', baseUrl: provider.url, methods: ['POST'], paths: ['/payouts'] }],
  });
  ok(engine, 'mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { version } } }', {
    id: id(1),
    i: {
      name: 'pay_vendor',
      kind: 'http',
      config: { integration: 'payouts', method: 'POST', path: '/payouts' },
      tool: {
        description: 'Pay a vendor.',
        inputSchema: { type: 'object', properties: { vendor: { type: 'string' }, amount: { type: 'string' } } },
      },
      policies: [SEND],
    },
  });
  ok(
    engine,
    `mutation { auth { createClient(input: {principal: "ap", name: "accounts payable", policies: [
      {effect: ALLOW, actions: [INSERT, SELECT], resources: ["actions.Execution"]},
      {effect: ALLOW, actions: [SELECT], resources: ["actions.Action"]},
      {effect: ALLOW, actions: [INSERT], resources: ["actions.Integration"]}]}) { apiKey } } }`,
  );
  worker = engine.createWorker();
  worker.start();
});
afterAll(async () => {
  await worker?.stop();
  engine?.close();
  await provider?.close();
});

describe('an http tool over Tally’s MCP server', () => {
  it('tools/list says an http tool is open-world and not idempotent, which two tools/calls without one execution id show', async () => {
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await createMcpServer(engineBackend(engine, { principal: 'ap' }), {
      toolsPageSize: engine.limits.mcpToolsPageSize,
    }).connect(serverSide);
    const client = new Client({ name: 'h37', version: '1' });
    await client.connect(clientSide);
    const { tools } = await client.listTools();
    const pay = tools.find((t) => t.name === 'pay_vendor');
    // The same call twice, as a client retries an idempotent tool whose answer it did not get.
    const args = { vendor: 'ACME', amount: '40' };
    await client.callTool({ name: 'pay_vendor', arguments: args });
    await client.callTool({ name: 'pay_vendor', arguments: args });
    await client.close();
    const keys = provider.seen.map((r) => r.headers['idempotency-key']);
    expect(pay?.annotations?.openWorldHint, 'an http tool reaches outside Tally').toBe(true);
    // Two tools/calls without the same _meta.executionId are two calls, two keys: the listing must not
    // have told the client it could retry blindly.
    expect(new Set(keys).size).toBe(2);
    expect(pay?.annotations?.idempotentHint).toBe(false);
  });
});
