import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { engineBackend } from '../../src/mcp/backend.js';
import { createMcpServer } from '../../src/mcp/server.js';
import { id, newEngine, ok } from '../helpers/engine.js';

const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const SECRET = 'sk_live_do_not_leak';
const SRC = `function run(event) { return { key: ${JSON.stringify(SECRET)} }; }`;
const INVOKES = { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] };
const READS = { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] };
const CHAIN = 300;

function as(engine: Engine, principal: string, query: string, variables: Record<string, unknown> = {}) {
  return engine.graphql(query, variables, { principal });
}

function decode(cursor: string): unknown {
  return JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
}

async function mcpTools(engine: Engine, principal: string): Promise<Tool[]> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await createMcpServer(engineBackend(engine, { principal }), {
    toolsPageSize: engine.limits.mcpToolsPageSize,
  }).connect(serverSide);
  const client = new Client({ name: 'test', version: '1' });
  await client.connect(clientSide);
  const tools: Tool[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  await client.close();
  return tools;
}

describe('actions.tools / actions.tool / MCP tools/list show what calling a tool needs, nothing more', () => {
  let engine: Engine;

  beforeAll(async () => {
    engine = await newEngine();
    // A chain: chain_0 calls chain_1 … calls chain_299, which closes accounts (UPDATE).
    for (let i = CHAIN - 1; i >= 0; i--) {
      const last = i === CHAIN - 1;
      ok(engine, CREATE, {
        id: id(1000 + i),
        input: {
          name: `chain_${i}`,
          kind: 'tool',
          config: { runtime: 'javascript', src: 'function run() { return {}; }' },
          policies: last
            ? [{ effect: 'ALLOW', actions: ['SELECT', 'UPDATE'], resources: ['financial.Account'] }]
            : [READS, INVOKES],
          ...(last ? {} : { tools: [{ name: `chain_${i + 1}` }] }),
        },
      });
    }
    ok(engine, CREATE, {
      id: id(1),
      input: {
        name: 'pub',
        kind: 'tool',
        config: { runtime: 'javascript', src: SRC, apiKey: SECRET },
        tool: { description: 'Publishes.', inputSchema: { type: 'object', properties: { n: { type: 'integer' } } } },
        policies: [{ ...READS, assertions: { hidden_rule: "context.document.code == 'internal-only'" } }],
      },
    });
    ok(
      engine,
      `mutation { auth {
      attacker: createClient(input: {principal: "attacker", name: "a", policies: [{effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"], assertions: {only_pub: "context.document.action == 'pub'"}}]}) { apiKey }
      closer: createClient(input: {principal: "closer", name: "c", policies: [{effect: ALLOW, actions: [SELECT, UPDATE], resources: ["financial.*"]}, {effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]}]}) { apiKey }
      nobody: createClient(input: {principal: "nobody", name: "n", policies: [{effect: ALLOW, actions: [SELECT], resources: ["financial.*"]}]}) { apiKey }
    } }`,
    );
  });

  afterAll(() => engine.close());

  it('the attacker may not read pub as an Action', () => {
    const result = as(engine, 'attacker', '{ actions { action(name: "pub") { config } } }');
    expect(result.errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
  });

  it('Tool has no config, source, policies, references or execution settings to ask for', () => {
    for (const field of [
      'config',
      'policies { assertions }',
      'tools { name }',
      'execution { timeoutMs }',
      'tool { name }',
      'versions { config }',
      'status',
    ]) {
      for (const query of [
        `{ actions { tools(first: 10) { nodes { ${field} } } } }`,
        `{ actions { tool(name: "pub") { ${field} } } }`,
      ]) {
        const result = as(engine, 'attacker', query);
        expect(result.data ?? null, query).toBeNull();
        expect(result.errors?.[0]?.message, query).toMatch(/Cannot query field "\w+" on type "Tool"/);
      }
    }
    const fields = ok(engine, '{ __type(name: "Tool") { fields { name } } }').__type.fields.map(
      (f: { name: string }) => f.name,
    );
    // kind is what calling it needs: a model or agent tool is started and waited for, not invoked.
    expect(fields.sort()).toEqual([
      'access',
      'actionId',
      'description',
      'inputSchema',
      'kind',
      'name',
      'outputSchema',
      'title',
      'version',
    ]);
  });

  it('the attacker gets what calling pub needs, through tools and tool, and nothing of its program', () => {
    const FIELDS = 'actionId name version title description inputSchema outputSchema access { readOnly destructive }';
    const listed = as(
      engine,
      'attacker',
      `{ actions { tools(first: 10) { nodes { ${FIELDS} } pageInfo { hasNextPage endCursor } } } }`,
    );
    expect(listed.errors).toBeUndefined();
    const tools = (listed.data as any).actions.tools;
    expect(tools.nodes).toEqual([
      {
        actionId: id(1),
        name: 'pub',
        version: 1,
        title: 'pub',
        description: 'Publishes.',
        inputSchema: { type: 'object', properties: { n: { type: 'integer' } } },
        outputSchema: null,
        access: { readOnly: true, destructive: false },
      },
    ]);
    const one = as(engine, 'attacker', `{ actions { tool(name: "pub") { ${FIELDS} } } }`);
    expect(one.errors).toBeUndefined();
    expect((one.data as any).actions.tool).toEqual(tools.nodes[0]);
    expect(JSON.stringify([listed, one])).not.toContain(SECRET);
    expect(JSON.stringify([listed, one])).not.toContain('hidden_rule');
    // A tool it may not invoke is not there, as a name nobody used (H11).
    expect(as(engine, 'attacker', '{ actions { tool(name: "chain_0") { name } } }').errors?.[0]?.extensions?.code).toBe(
      'NOT_FOUND',
    );
  });

  it('MCP tools/list carries only name, title, description, schemas and annotations', async () => {
    const tools = await mcpTools(engine, 'attacker');
    expect(tools.map((t) => t.name)).toEqual(['pub']);
    for (const tool of tools) {
      for (const key of Object.keys(tool))
        expect(['name', 'title', 'description', 'inputSchema', 'outputSchema', 'annotations']).toContain(key);
    }
    const text = JSON.stringify(tools);
    expect(text).not.toContain(SECRET);
    expect(text).not.toContain('hidden_rule');
    expect(text).not.toContain('function run');
  });

  it(`lists a chain of ${CHAIN} tools, each walking the rest, within the request deadline`, () => {
    const result = as(
      engine,
      'closer',
      '{ actions { tools(first: 1000) { nodes { name access { readOnly destructive } } pageInfo { hasNextPage } } } }',
    );
    expect(result.errors).toBeUndefined();
    const nodes = (result.data as any).actions.tools.nodes as Array<{
      name: string;
      access: { readOnly: boolean; destructive: boolean };
    }>;
    expect(nodes.filter((n) => n.name.startsWith('chain_'))).toHaveLength(CHAIN);
    // chain_0 only reads itself, but reaches chain_299's UPDATE.
    expect(nodes.find((n) => n.name === 'chain_0')!.access).toEqual({ readOnly: false, destructive: true });
    // A client that sees none of them still gets its (empty) answer: the walk is not repeated per tool.
    const none = as(engine, 'nobody', '{ actions { tools(first: 1000) { nodes { name } } } }');
    expect(none.errors).toBeUndefined();
    expect((none.data as any).actions.tools.nodes).toEqual([]);
  });

  it('the cursors are those of the tools shown: they reveal no count of the actions', () => {
    const PAGE =
      '{ actions { tools(first: 1) { edges { cursor } pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } } }';
    const none = as(engine, 'nobody', PAGE);
    expect(none.errors).toBeUndefined();
    expect((none.data as any).actions.tools).toEqual({
      edges: [],
      pageInfo: { hasNextPage: false, hasPreviousPage: false, startCursor: null, endCursor: null },
    });
    const attacker = (as(engine, 'attacker', PAGE).data as any).actions.tools;
    expect(attacker.pageInfo.hasNextPage).toBe(false);
    expect(decode(attacker.pageInfo.endCursor)).toEqual(['tools', id(1)]);
    const after = as(
      engine,
      'attacker',
      'query($after: String) { actions { tools(first: 1, after: $after) { nodes { name } pageInfo { hasNextPage endCursor } } } }',
      { after: attacker.pageInfo.endCursor },
    );
    expect((after.data as any).actions.tools).toEqual({ nodes: [], pageInfo: { hasNextPage: false, endCursor: null } });
    // A cursor that names no action (or another connection's) is refused alike.
    for (const bad of [
      Buffer.from(JSON.stringify(['tools', id(999999)])).toString('base64url'),
      Buffer.from(JSON.stringify(['actions', 1000])).toString('base64url'),
    ]) {
      expect(
        as(
          engine,
          'attacker',
          'query($after: String) { actions { tools(first: 1, after: $after) { nodes { name } } } }',
          { after: bad },
        ).errors?.[0]?.extensions?.code,
      ).toBe('BAD_REQUEST');
    }
  });

  it('pages through every tool once, following the cursors', () => {
    const names: string[] = [];
    let after: string | null = null;
    for (let i = 0; i < 20; i++) {
      const result = as(
        engine,
        'closer',
        'query($after: String) { actions { tools(first: 50, after: $after) { nodes { name } pageInfo { hasNextPage endCursor } } } }',
        { after },
      );
      expect(result.errors).toBeUndefined();
      const page = (result.data as any).actions.tools;
      names.push(...page.nodes.map((n: { name: string }) => n.name));
      if (!page.pageInfo.hasNextPage) break;
      after = page.pageInfo.endCursor;
    }
    expect(names).toHaveLength(CHAIN + 1);
    expect(new Set(names).size).toBe(CHAIN + 1);
  });
});

describe('what an MCP client is not offered is not there: internal tools, and graphql unless the operator says so', () => {
  // An internal tool (a hook, a helper, a trigger target) and the native graphql tool (the whole
  // API under the client's policies, past every tool's checks) are not MCP's to offer. A client
  // that may invoke them calls them by name or alias anyway: refused exactly as a name nobody used.
  let engine: Engine;

  beforeAll(async () => {
    engine = await newEngine();
    const make = (n: number, name: string, extra: Record<string, unknown>) =>
      ok(engine, CREATE, {
        id: id(n),
        input: {
          name,
          kind: 'tool',
          config: { runtime: 'javascript', src: 'function run() { return {ran: true}; }' },
          policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }],
          ...extra,
        },
      });
    make(1, 'public_tool', { tool: { description: 'Public.' } });
    make(2, 'helper', { tool: { description: 'A helper.', aliases: ['help_me'], internal: true } });
    ok(
      engine,
      `mutation { auth { createClient(input: {principal: "mallory", name: "m", policies: [
        {effect: ALLOW, actions: [SELECT, INSERT, UPDATE, DELETE], resources: ["*"]}]}) { apiKey } } }`,
    );
  });
  afterAll(() => engine.close());

  async function client(graphqlTool: boolean): Promise<Client> {
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await createMcpServer(engineBackend(engine, { principal: 'mallory' }), {
      toolsPageSize: engine.limits.mcpToolsPageSize,
      graphqlTool,
    }).connect(serverSide);
    const c = new Client({ name: 'mallory', version: '1' });
    await c.connect(clientSide);
    return c;
  }

  const shape = (text: string, name: string) => text.split(JSON.stringify(name)).join('"<name>"');

  it('tools/list: neither the internal tool nor graphql; tools/call of either, or of the alias: the unknown-name answer, and nothing runs', async () => {
    const c = await client(false);
    expect((await c.listTools()).tools.map((t) => t.name)).toEqual(['cel', 'public_tool']);
    const texts = [];
    for (const name of ['helper', 'help_me', 'graphql', 'no_such_tool']) {
      const result = (await c.callTool({
        name,
        arguments:
          name === 'graphql' ? { query: 'mutation { actions { lockAction(id: "x", version: 1) { status } } }' } : {},
      })) as { isError?: boolean; content: Array<{ text: string }> };
      expect(result.isError, name).toBe(true);
      texts.push(shape(result.content[0]!.text, name));
    }
    expect(new Set(texts).size).toBe(1);
    expect(texts[0]).toBe('NOT_FOUND: action "<name>" does not exist\nhint: Available tools: cel, public_tool.');
    await c.close();
    const runs = ok(engine, '{ actions { executions(first: 10) { nodes { actionName } } } }').actions.executions.nodes;
    expect(runs).toEqual([]);
  });

  it('with mcp.graphqlTool the operator offers graphql: listed and called; the internal tool stays hidden', async () => {
    const c = await client(true);
    expect((await c.listTools()).tools.map((t) => t.name)).toEqual(['graphql', 'cel', 'public_tool']);
    const result = (await c.callTool({ name: 'graphql', arguments: { query: '{ journal { name } }' } })) as {
      isError?: boolean;
      structuredContent?: unknown;
    };
    expect(result.isError).toBeUndefined();
    expect(result.structuredContent).toEqual({ journal: { name: 'Default' } });
    const hidden = (await c.callTool({ name: 'helper', arguments: {} })) as {
      isError?: boolean;
      content: Array<{ text: string }>;
    };
    expect(hidden.content[0]!.text).toMatch(/^NOT_FOUND: action "helper" does not exist/);
    await c.close();
  });

  it('GraphQL: actions.tools and actions.tool leave the internal tool out unless asked for with internal: true', () => {
    const names = (q: string) => ok(engine, q, {}, 'mallory').actions.tools.nodes.map((n: { name: string }) => n.name);
    expect(names('{ actions { tools(first: 10) { nodes { name } } } }')).toEqual(['public_tool']);
    expect(names('{ actions { tools(first: 10, internal: true) { nodes { name } } } }')).toEqual([
      'public_tool',
      'helper',
    ]);
    const hidden = as(engine, 'mallory', '{ actions { tool(name: "help_me") { name } } }').errors![0]!;
    expect([hidden.extensions!.code, hidden.message]).toEqual(['NOT_FOUND', 'action "help_me" does not exist']);
    expect(ok(engine, '{ actions { tool(name: "help_me", internal: true) { name version } } }', {}, 'mallory')).toEqual(
      {
        actions: { tool: { name: 'helper', version: 1 } },
      },
    );
  });
});
