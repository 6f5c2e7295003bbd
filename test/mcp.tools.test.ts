import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine.js';
import { engineBackend } from '../src/mcp/backend.js';
import { createMcpServer } from '../src/mcp/server.js';
import { id, newEngine, ok } from './helpers.js';

const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const SRC = 'function run(event) { return {}; }';
const INVOKES = { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] };

function tool(engine: Engine, n: number, name: string, policies: unknown[], extra: Record<string, unknown> = {}): void {
  // MCP lists only tools with a description.
  ok(engine, CREATE, { id: id(n), input: { name, kind: 'tool', config: { runtime: 'javascript', src: SRC }, tool: { description: `The ${name} tool.` }, policies, ...extra } });
}

async function toolsOf(engine: Engine, principal: string): Promise<Record<string, Tool>> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await createMcpServer(engineBackend(engine, { principal }), { toolsPageSize: engine.limits.mcpToolsPageSize }).connect(serverSide);
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
    tool(engine, 2, 'closes_accounts', [{ effect: 'ALLOW', actions: ['SELECT', 'UPDATE'], resources: ['financial.Account'] }]);
    // Reads only itself, but calls closes_accounts: its writes count (transitively).
    tool(engine, 3, 'wrapper', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }, INVOKES], { tools: [{ name: 'closes_accounts' }] });
    tool(engine, 4, 'drafted', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }], { draft: true });
    tool(engine, 5, 'secret', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }]);
    ok(engine, `mutation { auth {
      writer: createClient(input: {principal: "writer", name: "w", policies: [{effect: ALLOW, actions: [SELECT, UPDATE], resources: ["*"]}, {effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]},
        {effect: DENY, actions: [INSERT], resources: ["actions.Execution"], assertions: {secret: "context.document.action == 'secret'"}}]}) { apiKey }
      reader: createClient(input: {principal: "reader", name: "r", policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}, {effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]}]}) { apiKey }
      nobody: createClient(input: {principal: "nobody", name: "n", policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { apiKey }
    } }`);
  });

  afterAll(() => engine.close());

  it('derives readOnlyHint and destructiveHint from the tool and every tool it references; idempotent, closed world', async () => {
    const tools = await toolsOf(engine, 'writer');
    expect(tools.read_only!.annotations).toEqual({ readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false });
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
});
