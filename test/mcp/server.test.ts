import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedModel } from '../../examples/scripted-model/server.mjs';
import type { Engine } from '../../src/engine.js';
import { engineBackend } from '../../src/mcp/backend.js';
import { createMcpServer } from '../../src/mcp/server.js';
import { id, newEngine, ok } from '../helpers/engine.js';

const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const SRC = 'function run(event) { return {}; }';
const INVOKES = { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] };

function tool(engine: Engine, n: number, name: string, policies: unknown[], extra: Record<string, unknown> = {}): void {
  // MCP lists only tools with a description.
  ok(engine, CREATE, {
    id: id(n),
    input: {
      name,
      kind: 'tool',
      config: { runtime: 'javascript', src: SRC },
      tool: { description: `The ${name} tool.` },
      policies,
      ...extra,
    },
  });
}

/** The tools a client lists; the operator offers the native graphql tool here (mcp.graphqlTool). */
async function toolsOf(engine: Engine, principal: string, graphqlTool = true): Promise<Record<string, Tool>> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await createMcpServer(engineBackend(engine, { principal }), {
    toolsPageSize: engine.limits.mcpToolsPageSize,
    graphqlTool,
  }).connect(serverSide);
  const client = new Client({ name: 'test', version: '1' });
  await client.connect(clientSide);
  const { tools } = await client.listTools();
  await client.close();
  return Object.fromEntries(tools.map((t) => [t.name, t]));
}

describe('MCP tools/list: what a client sees, with annotations derived from policies', () => {
  let engine: Engine;

  beforeAll(async () => {
    engine = await newEngine();
    tool(engine, 1, 'read_only', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] }]);
    tool(engine, 2, 'closes_accounts', [
      { effect: 'ALLOW', actions: ['SELECT', 'UPDATE'], resources: ['financial.Account'] },
    ]);
    // Reads only itself, but calls closes_accounts: its writes count (transitively).
    tool(engine, 3, 'wrapper', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }, INVOKES], {
      tools: [{ name: 'closes_accounts' }],
    });
    tool(engine, 4, 'drafted', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }], { draft: true });
    tool(engine, 5, 'secret', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }]);
    ok(
      engine,
      `mutation { auth {
      writer: createClient(input: {principal: "writer", name: "w", policies: [{effect: ALLOW, actions: [SELECT, UPDATE], resources: ["*"]}, {effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]},
        {effect: DENY, actions: [INSERT], resources: ["actions.Execution"], assertions: {secret: "context.document.action == 'secret'"}}]}) { apiKey }
      reader: createClient(input: {principal: "reader", name: "r", policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}, {effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]}]}) { apiKey }
      nobody: createClient(input: {principal: "nobody", name: "n", policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { apiKey }
    } }`,
    );
  });

  afterAll(() => engine.close());

  it('derives readOnlyHint and destructiveHint from the tool and every tool it references; idempotent, closed world', async () => {
    const tools = await toolsOf(engine, 'writer');
    expect(tools.read_only!.annotations).toEqual({
      title: 'read_only',
      readOnlyHint: true,
      destructiveHint: false,
      idempotentHint: true,
      openWorldHint: false,
    });
    expect(tools.closes_accounts!.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    expect(tools.wrapper!.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    // The native graphql tool runs under the client's policies alone: UPDATE makes it destructive.
    expect(tools.graphql!.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    expect(tools.cel!.annotations).toMatchObject({ readOnlyHint: true });
  });

  it('lists only ACTIVE versions the client may invoke: no DRAFT, nothing a DENY on invoking refuses', async () => {
    const tools = await toolsOf(engine, 'writer');
    expect(Object.keys(tools).sort()).toEqual(['cel', 'closes_accounts', 'graphql', 'read_only', 'wrapper']);
  });

  it('a read-only client sees only the read-only tools; a client that may invoke nothing sees none', async () => {
    const reader = await toolsOf(engine, 'reader');
    expect(Object.keys(reader).sort()).toEqual(['cel', 'graphql', 'read_only', 'secret']);
    expect(Object.values(reader).every((t) => t.annotations?.readOnlyHint === true)).toBe(true);
    expect(await toolsOf(engine, 'nobody')).toEqual({});
  });

  it('the native graphql tool only when the operator offers it: by default a client lists cel and its tools', async () => {
    expect(Object.keys(await toolsOf(engine, 'writer', false)).sort()).toEqual([
      'cel',
      'closes_accounts',
      'read_only',
      'wrapper',
    ]);
  });

  it("a tool's title is its tool.title (annotations.title too), else its name", async () => {
    tool(engine, 6, 'titled', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }], {
      tool: { title: 'A titled tool', description: 'Has a title.' },
    });
    const tools = await toolsOf(engine, 'reader');
    expect(tools.titled).toMatchObject({ title: 'A titled tool', annotations: { title: 'A titled tool' } });
    expect(tools.read_only).toMatchObject({ title: 'read_only', annotations: { title: 'read_only' } });
    expect(tools.cel).toMatchObject({ title: 'CEL', annotations: { title: 'CEL' } });
  });
});

describe('a tool the client may not call is not there, on every path', () => {
  // Was a finding (H11, low): tools/list hid a tool mallory may not call, but actions.tool(name)
  // (and so MCP tools/call, which asks it first) answered ACCESS_DENIED for it and NOT_FOUND for a
  // name nobody used, so any client could probe which tool names exist.
  const TOOL = `query($n: String!) { actions { tool(name: $n) { name } } }`;
  const INVOKE = `mutation($n: String!, $e: UUID!) { actions { invokeAction(name: $n, input: {executionId: $e, actionVersion: 1, input: {}}) { status } } }`;
  let engine: Engine;

  beforeAll(async () => {
    engine = await newEngine();
    tool(engine, 1, 'secret_payout', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }], {
      tool: { description: 'Internal.', aliases: ['payout'] },
    });
    tool(engine, 2, 'public_tool', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }]);
    tool(engine, 3, 'locked_tool', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }]);
    ok(engine, `mutation { actions { lockAction(id: "${id(3)}", version: 1) { status } } }`);
    // Writes accounts: mallory may not, so the listing leaves it out, though she may invoke it.
    tool(engine, 4, 'closes_accounts', [
      { effect: 'ALLOW', actions: ['SELECT', 'UPDATE'], resources: ['financial.Account'] },
    ]);
    ok(
      engine,
      `mutation($pol: [PolicyInput!]!) { auth { createClient(input: {principal: "mallory", name: "m", policies: $pol}) { apiKey } } }`,
      {
        pol: [
          {
            effect: 'ALLOW',
            actions: ['INSERT'],
            resources: ['actions.Execution'],
            assertions: {
              only: "context.document.action == 'public_tool' || context.document.action == 'closes_accounts'",
            },
          },
        ],
      },
    );
  });
  afterAll(() => engine.close());

  const shape = (text: string, name: string) => text.split(JSON.stringify(name)).join('"<name>"');

  it('actions.tool(name): NOT_FOUND, with the same message, for a tool she may not invoke, its alias, a LOCKED one, and a name nobody used', () => {
    const answers = ['secret_payout', 'payout', 'locked_tool', 'no_such_tool'].map((n) => {
      const error = engine.graphql(TOOL, { n }, { principal: 'mallory' }).errors![0]!;
      return { code: error.extensions!.code, message: shape(error.message, n), hint: error.extensions!.hint };
    });
    expect(new Set(answers.map((a) => JSON.stringify(a))).size).toBe(1);
    expect(answers[0]).toEqual({
      code: 'NOT_FOUND',
      message: 'action "<name>" does not exist',
      hint: expect.any(String),
    });
    expect(ok(engine, TOOL, { n: 'public_tool' }, 'mallory').actions.tool.name).toBe('public_tool');
    // She may invoke closes_accounts: it is found by name, though not listed (she could make none of its writes).
    expect(ok(engine, TOOL, { n: 'closes_accounts' }, 'mallory').actions.tool.name).toBe('closes_accounts');
  });

  it('MCP tools/call and tools/list: the same answer for a tool she may not call as for a name nobody used', async () => {
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await createMcpServer(engineBackend(engine, { principal: 'mallory' }), {
      toolsPageSize: engine.limits.mcpToolsPageSize,
    }).connect(serverSide);
    const client = new Client({ name: 'test', version: '1' });
    await client.connect(clientSide);
    const texts = [];
    for (const name of ['secret_payout', 'payout', 'locked_tool', 'no_such_tool']) {
      const result = (await client.callTool({ name, arguments: {} })) as {
        isError?: boolean;
        content: Array<{ text: string }>;
      };
      expect(result.isError, name).toBe(true);
      texts.push(shape(result.content[0]!.text, name));
    }
    expect(new Set(texts).size).toBe(1);
    expect(texts[0]).toBe('NOT_FOUND: action "<name>" does not exist\nhint: Available tools: public_tool.');
    expect((await client.listTools()).tools.map((t) => t.name)).toEqual(['public_tool']);
    await client.close();
  });

  it('invokeAction(name:) of a tool she may not invoke is ACCESS_DENIED whether or not it exists: the policy is checked on the name first', () => {
    const exists = engine.graphql(INVOKE, { n: 'secret_payout', e: id(9001) }, { principal: 'mallory' }).errors![0]!;
    const nobody = engine.graphql(INVOKE, { n: 'no_such_tool', e: id(9002) }, { principal: 'mallory' }).errors![0]!;
    expect([exists.extensions!.code, exists.message]).toEqual(['ACCESS_DENIED', nobody.message]);
    expect(nobody.extensions!.code).toBe('ACCESS_DENIED');
  });
});

describe('an agent started by MCP tools/call is recorded as an MCP call (T67)', () => {
  it('the run has caller {principal, transport: "mcp"}, as an invoked tool has', async () => {
    const model = await startScriptedModel({ apiKey: 'sk-mcp-transport', rules: [() => ({ text: 'hello' })] });
    process.env.MCP_TRANSPORT_MODEL_KEY = 'sk-mcp-transport';
    const engine = await newEngine({
      providers: [
        {
          name: 'local',
          format: 'openai',
          baseUrl: `${model.url}/v1`,
          models: ['m'],
          apiKeyEnv: 'MCP_TRANSPORT_MODEL_KEY',
          maxRetries: 0,
        },
      ],
    });
    const worker = engine.createWorker();
    worker.start();
    try {
      ok(engine, CREATE, {
        id: id(1),
        input: {
          name: 'greeter',
          kind: 'agent',
          config: { provider: 'local', model: 'm', prompt: 'Say hello.' },
          tool: { description: 'Greets.' },
          policies: [],
        },
      });
      tool(engine, 2, 'plain', []);
      ok(
        engine,
        `mutation { auth { createClient(input: {principal: "op", name: "o", policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}, {effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]}]}) { apiKey } } }`,
      );
      const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
      await createMcpServer(engineBackend(engine, { principal: 'op' }), {
        toolsPageSize: engine.limits.mcpToolsPageSize,
      }).connect(serverSide);
      const client = new Client({ name: 'test', version: '1' });
      await client.connect(clientSide);
      const ran = (await client.callTool({ name: 'greeter', arguments: {} })) as { isError?: boolean; _meta?: any };
      const invoked = (await client.callTool({ name: 'plain', arguments: {} })) as { _meta?: any };
      await client.close();
      expect(ran.isError, JSON.stringify(ran)).toBeUndefined();
      const caller = (e: string) =>
        ok(engine, `{ actions { execution(executionId: "${e}") { kind status caller { principal transport } } } }`)
          .actions.execution;
      expect(caller(ran._meta.executionId)).toEqual({
        kind: 'AGENT',
        status: 'SUCCEEDED',
        caller: { principal: 'op', transport: 'mcp' },
      });
      expect(caller(invoked._meta.executionId).caller).toEqual({ principal: 'op', transport: 'mcp' });
    } finally {
      await worker.stop();
      engine.close();
      await model.close();
    }
  });
});
