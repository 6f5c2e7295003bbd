import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { id, ok } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

/**
 * Progress messages (status(text)) reach only whoever may read the execution (SELECT on
 * actions.Execution, the door every read of an execution goes through), and a program that spams
 * them is bounded: a second client, hostile, over GraphQL (a long-poll too) and MCP.
 */
const ADMIN = 'tly_progress-hostile-admin-key';
type Running = Awaited<ReturnType<typeof startServer>>;
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const INVOKE = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { invokeAction(name: $n, input: {executionId: $e, actionVersion: 1, input: $i}) { status progress { text } } } }`;
const POLL = `query($e: UUID!, $w: Int, $p: Int) { actions { execution(executionId: $e, waitMs: $w, progressAfter: $p) { status progress(after: $p) { text } } } }`;
const OWN_EXECUTIONS = `{effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]},
  {effect: ALLOW, actions: [SELECT], resources: ["actions.Execution"], assertions: {mine: "context.document.principal == context.auth.claims.principal"}}`;

function tool(name: string, src: string, extra: Record<string, unknown> = {}) {
  return {
    name,
    kind: 'tool',
    config: { runtime: 'javascript', src },
    tool: { description: `The ${name} tool.`, inputSchema: { type: 'object' } },
    policies: [],
    ...extra,
  };
}

async function gql(url: string, key: string, query: string, variables: Record<string, unknown> = {}): Promise<any> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ query, variables }),
  });
  return response.json();
}

function createClient(running: Running, principal: string, policies: string): string {
  return ok(
    running.engine,
    `mutation { auth { createClient(input: {principal: "${principal}", name: "${principal}", policies: [${policies}]}) { apiKey } } }`,
  ).auth.createClient.apiKey;
}

let running: Running;
let alice: string;
let mallory: string;
let outerOnly: string;

beforeAll(async () => {
  running = await startServer(ADMIN, { limits: { executionWaitMsMax: 8000 } });
  ok(running.engine, CREATE, {
    id: id(1),
    input: tool('secretive', "function run(event) { status('balance of ' + event.data.who + ' is 1000'); return {}; }"),
  });
  ok(running.engine, CREATE, {
    id: id(2),
    input: tool('outer', "function run() { status('outer speaks'); tools.secretive({who: 'bob'}); return {}; }", {
      tools: [{ name: 'secretive' }],
      policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
    }),
  });
  ok(running.engine, CREATE, {
    id: id(3),
    input: tool(
      'spammer',
      'function run() { let refused = 0; for (let i = 0; i < 1000; i++) { try { status("spam " + i); } catch (e) { refused++; } } return { refused }; }',
    ),
  });
  alice = createClient(running, 'alice', OWN_EXECUTIONS);
  mallory = createClient(running, 'mallory', OWN_EXECUTIONS);
  // May read only executions of `outer`: the messages said beneath it by another tool are not its to read.
  outerOnly = createClient(
    running,
    'auditor',
    `{effect: ALLOW, actions: [SELECT], resources: ["actions.Execution"], assertions: {outer: "context.document.actionName == 'outer'"}}`,
  );
});
afterAll(async () => running?.stop());

describe('another client cannot read or receive progress it may not read', () => {
  it("mallory reading or long-polling alice's execution gets ACCESS_DENIED, at once, and no message", async () => {
    const mine = await gql(running.url, alice, INVOKE, { n: 'secretive', e: id(100), i: { who: 'alice' } });
    expect(mine.data.actions.invokeAction.progress).toEqual([{ text: 'balance of alice is 1000' }]);
    const t0 = performance.now();
    const read = await gql(running.url, mallory, POLL, { e: id(100), w: 5000, p: 0 });
    expect(performance.now() - t0).toBeLessThan(2000);
    expect(read.data).toBeNull();
    expect(read.errors[0].extensions.code).toBe('ACCESS_DENIED');
    expect(JSON.stringify(read)).not.toContain('balance of alice');
    // Nor through the list of executions (her page leaves alice's out).
    const list = await gql(
      running.url,
      mallory,
      '{ actions { executions(first: 50) { nodes { progress { text } } } } }',
    );
    expect(JSON.stringify(list)).not.toContain('balance of alice');
  });

  it('a reader who may SELECT only `outer` executions reads outer’s own messages, not those of the call beneath it', async () => {
    ok(running.engine, INVOKE, { n: 'outer', e: id(101), i: {} });
    const read = await gql(running.url, outerOnly, POLL, { e: id(101), p: 0 });
    expect(read.errors).toBeUndefined();
    expect(read.data.actions.execution.progress).toEqual([{ text: 'outer speaks' }]);
    const admin = ok(running.engine, POLL, { e: id(101), p: 0 });
    expect(admin.actions.execution.progress).toEqual([{ text: 'outer speaks' }, { text: 'balance of bob is 1000' }]);
  });

  it("over MCP each caller's notifications are its own call's: mallory's token never carries alice's messages", async () => {
    const connect = async (key: string) => {
      const client = new Client({ name: 'hostile', version: '1.0.0' });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(running.url.replace('/graphql', '/mcp')), {
          requestInit: { headers: { authorization: `Bearer ${key}` } },
        }),
      );
      return client;
    };
    const [a, m] = [await connect(alice), await connect(mallory)];
    try {
      const heard: Record<string, string[]> = { alice: [], mallory: [] };
      const [ra, rm] = await Promise.all([
        a.callTool({ name: 'secretive', arguments: { who: 'alice' } }, undefined, {
          onprogress: (p) => heard.alice!.push(p.message ?? ''),
        }),
        m.callTool({ name: 'secretive', arguments: { who: 'mallory' } }, undefined, {
          onprogress: (p) => heard.mallory!.push(p.message ?? ''),
        }),
      ]);
      expect((ra as CallToolResult).isError).toBeFalsy();
      expect((rm as CallToolResult).isError).toBeFalsy();
      expect(heard).toEqual({ alice: ['balance of alice is 1000'], mallory: ['balance of mallory is 1000'] });
      // Mallory naming alice's execution id as her own call's: refused as a replay, nothing of alice's said.
      const heardReplay: string[] = [];
      const replay = (await m.callTool(
        { name: 'secretive', arguments: { who: 'alice' }, _meta: { executionId: id(100) } },
        undefined,
        { onprogress: (p) => heardReplay.push(p.message ?? '') },
      )) as CallToolResult;
      expect(replay.isError).toBe(true);
      expect(heardReplay).toEqual([]);
    } finally {
      await a.close();
      await m.close();
    }
  });
});

describe('a program that spams status() is bounded', () => {
  it('1,000 tries in a loop record statusMessagesPerCallMax (100) messages; the rest are refused, the call ends', async () => {
    const run = ok(running.engine, INVOKE.replace('progress { text }', 'output'), { n: 'spammer', e: id(200), i: {} })
      .actions.invokeAction;
    expect(run).toMatchObject({ status: 'SUCCEEDED', output: { refused: 900 } });
    const stored = running.engine.db
      .prepare('SELECT count(*) AS n FROM execution_progress WHERE root_id = ?')
      .get(id(200)) as { n: number };
    expect(stored.n).toBe(100);
  });
});
