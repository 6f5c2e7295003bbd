// An agent calls an http tool, and a tool imported from another MCP server, as it calls any tool:
// through its reference (fixed inputs replace what the model sent), with a person's approval first
// where the reference asks, the call recorded under the model's turn, and the request sent once with
// the call's idempotency key. The model is the scripted model server, the service the stand-in
// payout provider, and the MCP server one the test starts with the SDK, all over real HTTP; the MCP
// tools are imported with `tally mcp import` against the running server.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPayoutProvider } from '../../examples/payout-provider/provider.mjs';
import { type ScriptedModel, startScriptedModel } from '../../examples/scripted-model/server.mjs';
import { mcpImportCommand } from '../../src/cli/mcp-import-command.js';
import type { Engine } from '../../src/engine.js';
import { id } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';
import { startHttpMcpServer, type TestMcpServer } from './fixtures/mcp-http-server.js';

const KEY = 'tly_agentoutside0123456789abcdef01234567';
const MODEL_KEY = 'sk-agent-outside-0123456789';
const TOKEN = 'tok_agent_outside_abcdef0123456789';
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const START = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { status } } }`;
const TREE = `query($e: UUID!) { actions { execution(executionId: $e) { status output error { code message }
  children { kind status children { executionId kind actionName status input output error { code message } } } } } }`;

describe('an agent calls an http tool', () => {
  let server: Awaited<ReturnType<typeof startServer>>;
  let engine: Engine;
  let model: ScriptedModel;
  let provider: Awaited<ReturnType<typeof startPayoutProvider>>;
  let crm: TestMcpServer;
  let configFile: string;

  async function gql(query: string, variables: Record<string, unknown>) {
    const response = await fetch(server.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ query, variables }),
    });
    const body = (await response.json()) as { data?: any; errors?: unknown[] };
    if (body.errors) throw new Error(JSON.stringify(body.errors));
    return body.data;
  }

  async function runUntil(e: string, done: (status: string) => boolean) {
    const worker = engine.createWorker();
    for (const until = Date.now() + 20_000; Date.now() < until; await new Promise((r) => setTimeout(r, 10))) {
      await worker.drainAll();
      const { status } = (await gql(TREE, { e })).actions.execution;
      if (done(status)) break;
    }
    return (await gql(TREE, { e })).actions.execution;
  }

  beforeAll(async () => {
    provider = await startPayoutProvider({ token: TOKEN });
    process.env.AGENT_OUTSIDE_TOKEN = TOKEN;
    process.env.AGENT_OUTSIDE_MODEL_KEY = MODEL_KEY;
    // Turn 1: pay 40 in EUR (the reference fixes the currency to USD); then answer what the tool said.
    model = await startScriptedModel({
      apiKey: MODEL_KEY,
      rules: [
        (request: any) =>
          request.turn === 1 && request.system === 'Look the customer up.'
            ? {
                toolCalls: [
                  { name: 'crm_lookup_customer', arguments: { email: 'mallory@evil.example', region: 'us' } },
                ],
              }
            : request.turn === 1
              ? {
                  toolCalls: [
                    {
                      name: 'pay_vendor',
                      arguments: { payout_id: 'vendor-7', amount: '40', currency: 'EUR', account: 'ACME' },
                    },
                  ],
                }
              : {
                  text: request.messages
                    .filter((m: any) => m.role === 'tool')
                    .map((m: any) => m.content)
                    .join('\n'),
                },
      ],
    });
    crm = await startHttpMcpServer([
      [
        {
          name: 'lookup_customer',
          title: 'Look up a customer',
          description: 'Find a customer by email in the CRM.',
          inputSchema: {
            type: 'object',
            properties: { email: { type: 'string' }, region: { type: 'string' } },
            required: ['email'],
          },
          annotations: { readOnlyHint: true },
        },
        (args) => ({
          structuredContent: { customer: { email: args.email, region: args.region, tier: 'gold' } },
          content: [{ type: 'text', text: JSON.stringify({ email: args.email }) }],
        }),
      ],
    ]);
    const mcpServers = [{ name: 'crm', url: crm.url }];
    configFile = join(mkdtempSync(join(tmpdir(), 'tally-agent-outside-')), 'tally.config.json');
    writeFileSync(configFile, JSON.stringify({ mcpServers }));
    server = await startServer(KEY, {
      mcpServers,
      providers: [
        {
          name: 'local',
          format: 'openai',
          baseUrl: `${model.url}/v1`,
          models: ['m'],
          apiKeyEnv: 'AGENT_OUTSIDE_MODEL_KEY',
          maxRetries: 0,
        },
      ],
      integrations: [
        {
          name: 'payouts',
          baseUrl: `${provider.url}/v1`,
          methods: ['POST'],
          paths: ['/payouts'],
          headers: { Authorization: { env: 'AGENT_OUTSIDE_TOKEN', prefix: 'Bearer ' } },
        },
      ],
    });
    engine = server.engine;
    const send = { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Integration'] };
    await gql(CREATE, {
      id: id(100),
      input: {
        name: 'pay_vendor',
        kind: 'http',
        config: {
          integration: 'payouts',
          method: 'POST',
          path: '/payouts',
          output: '{"id": body.id, "status": body.status}',
        },
        tool: {
          description: 'Pay a vendor through the payout provider.',
          inputSchema: {
            type: 'object',
            properties: {
              payout_id: { type: 'string' },
              amount: { type: 'string' },
              currency: { type: 'string' },
              account: { type: 'string' },
            },
            required: ['payout_id', 'amount', 'currency', 'account'],
          },
          outputSchema: {
            type: 'object',
            properties: { id: { type: 'string' }, status: { const: 'paid' } },
            required: ['id', 'status'],
          },
        },
        policies: [send],
      },
    });
    await gql(CREATE, {
      id: id(101),
      input: {
        name: 'accounts_payable',
        kind: 'agent',
        config: { provider: 'local', model: 'm', instructions: 'Pay the vendor.' },
        tool: { description: 'Pays vendors.' },
        tools: [{ name: 'pay_vendor', version: 1, input: { currency: "'USD'" }, approval: { when: null } }],
        policies: [send, { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
      },
    });
  });

  afterAll(async () => {
    await server?.stop();
    await model?.close();
    await provider?.close();
    await crm?.stop();
  });

  it('with the fixed input and a person’s approval, once, with the call’s idempotency key', async () => {
    const e = id(900);
    await gql(START, { n: 'accounts_payable', e, i: { task: 'pay ACME 40' } });
    const parked = await runUntil(e, (s) => s === 'WAITING_APPROVAL' || s === 'FAILED');
    expect(parked.status).toBe('WAITING_APPROVAL');
    expect(provider.requests).toHaveLength(0);
    const { approvals } = (
      await gql(
        `query { actions { approvals(first: 5, where: {status: PENDING}) { nodes { approvalId tool input } } } }`,
        {},
      )
    ).actions;
    expect(approvals.nodes).toHaveLength(1);
    // The person sees the input after the fixed inputs: USD, not the model's EUR.
    expect(approvals.nodes[0].input).toMatchObject({ currency: 'USD', amount: '40' });
    await gql(`mutation($a: UUID!) { actions { approveCall(approvalId: $a, reason: "invoice 17") { status } } }`, {
      a: approvals.nodes[0].approvalId,
    });
    const done = await runUntil(e, (s) => s === 'SUCCEEDED' || s === 'FAILED');
    expect(done.status).toBe('SUCCEEDED');
    expect(provider.requests).toHaveLength(1);
    expect(provider.requests[0]!.body).toMatchObject({ payout_id: 'vendor-7', currency: 'USD', amount: '40' });
    const call = done.children[0].children[0];
    expect(call).toMatchObject({ kind: 'HTTP', actionName: 'pay_vendor', status: 'SUCCEEDED' });
    expect(call.output).toMatchObject({ status: 'paid' });
    // The model read the tool's output.
    expect(done.output.text).toContain('paid');
    // The key is the call's, recorded with its one send.
    const sends = engine.db.prepare('SELECT * FROM outbound_sends WHERE execution_id = ?').get(call.executionId) as any;
    expect(sends.sends).toBe(1);
    expect(sends.idempotency_key).toBe(provider.requests[0]!.key);
  });
  it('an imported MCP tool, imported by `tally mcp import`, with fixed input and approval, its key in _meta', async () => {
    let out = '';
    const io = {
      out: (t: string) => void (out += t),
      err: () => undefined,
      tty: false,
      env: { TALLY_CONFIG: configFile },
    };
    const origin = server.url;
    expect(await mcpImportCommand(['crm'], { server: origin, key: KEY, prefix: 'crm_' }, io)).toBe(0);
    expect(out).toMatch(/^crm_lookup_customer: created, version 1 \(tool lookup_customer\)$/m);
    await gql(CREATE, {
      id: id(102),
      input: {
        name: 'support_bot',
        kind: 'agent',
        config: { provider: 'local', model: 'm', instructions: 'Look the customer up.' },
        tool: { description: 'Answers support questions.' },
        // The region is fixed, whatever the model sends; a person approves each lookup.
        tools: [{ name: 'crm_lookup_customer', version: 1, input: { region: "'eu'" }, approval: { when: null } }],
        policies: [
          {
            effect: 'ALLOW',
            actions: ['INSERT'],
            resources: ['actions.Integration'],
            assertions: { crm: "context.document.name == 'crm'" },
          },
          { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
        ],
      },
    });
    const e = id(901);
    await gql(START, { n: 'support_bot', e, i: { question: 'who is mallory?' } });
    const parked = await runUntil(e, (s) => s === 'WAITING_APPROVAL' || s === 'FAILED');
    expect(parked.status).toBe('WAITING_APPROVAL');
    expect(crm.calls).toHaveLength(0);
    const { approvals } = (
      await gql(
        `query { actions { approvals(first: 5, where: {status: PENDING}) { nodes { approvalId tool input } } } }`,
        {},
      )
    ).actions;
    expect(approvals.nodes).toHaveLength(1);
    expect(approvals.nodes[0]).toMatchObject({ tool: 'crm_lookup_customer', input: { region: 'eu' } });

    await gql(`mutation($a: UUID!) { actions { approveCall(approvalId: $a) { status } } }`, {
      a: approvals.nodes[0].approvalId,
    });
    const done = await runUntil(e, (s) => s === 'SUCCEEDED' || s === 'FAILED');
    expect(done.status).toBe('SUCCEEDED');
    expect(done.children[0].children[0].error).toBeNull();
    expect(crm.calls).toHaveLength(1);
    expect(crm.calls[0]!.args).toEqual({ email: 'mallory@evil.example', region: 'eu' });
    const call = done.children[0].children[0];
    expect(call).toMatchObject({ kind: 'MCP', actionName: 'crm_lookup_customer', status: 'SUCCEEDED' });
    expect(call.output).toEqual({ customer: { email: 'mallory@evil.example', region: 'eu', tier: 'gold' } });
    const sends = engine.db.prepare('SELECT * FROM outbound_sends WHERE execution_id = ?').get(call.executionId) as any;
    expect(crm.calls[0]!.meta?.['io.tally/idempotencyKey']).toBe(sends.idempotency_key);
  });
});
