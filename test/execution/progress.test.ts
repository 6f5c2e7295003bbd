import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult, Progress } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lastMessage, type ScriptedModel, startScriptedModel } from '../../examples/scripted-model/server.mjs';
import type { Worker } from '../../src/execution/queue/worker.js';
import { id, ok } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

/**
 * Progress from inside a run (`status(text)`, issue 36 item 4) as a user meets it: recorded on the
 * execution and read through Execution.progress over HTTP, a long-poll that answers when a message
 * arrives, and an MCP SDK client that asked for progress getting notifications/progress.
 */
const ADMIN = 'tly_progress-test-admin-key';
type Running = Awaited<ReturnType<typeof startServer>>;

const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const MESSAGE = 'seq text at executionId actionName';
const INVOKE = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { invokeAction(name: $n, input: {executionId: $e, actionVersion: 1, input: $i}) {
  executionId status error { code message } progress { ${MESSAGE} } children { executionId actionName } } } }`;
const START = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { executionId status } } }`;
const POLL = `query($e: UUID!, $w: Int, $p: Int) { actions { execution(executionId: $e, waitMs: $w, progressAfter: $p) { status progress(after: $p) { ${MESSAGE} } } } }`;

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

const LOOKUP = tool(
  'lookup',
  `function run(event) {
     status('looking up accounts');
     const n = (event.data.codes ?? ['a', 'b', 'c']).length;
     status('looked up ' + n + ' accounts');
     return { n };
   }`,
);
const OUTER = tool(
  'outer',
  `function run() { status('outer begins'); const r = tools.lookup({}); status('outer ends'); return r; }`,
  {
    tools: [{ name: 'lookup' }],
    policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
  },
);
const HALFWAY = tool('halfway', `function run() { status('half way'); fail('the second half failed'); }`);

async function gql(url: string, key: string, query: string, variables: Record<string, unknown> = {}): Promise<any> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ query, variables }),
  });
  return response.json();
}

/** A gate a scripted model's rule waits on: the test decides when the model answers. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

let running: Running;
let model: ScriptedModel;
let worker: Worker;
/** Opened by the test: the model's second turn answers only then. */
let second = gate();

beforeAll(async () => {
  // First turn: call lookup. Second turn (after lookup answered): wait for the gate, then answer.
  model = await startScriptedModel({
    rules: [
      async (req) => {
        if (lastMessage(req)?.role === 'tool') {
          await second.opened;
          return { text: 'Found them.' };
        }
        return { toolCalls: [{ name: 'lookup', arguments: { codes: ['x', 'y'] } }] };
      },
    ],
  });
  running = await startServer(ADMIN, {
    providers: [{ name: 'local', format: 'openai', baseUrl: `${model.url}/v1`, models: ['m'] }],
    limits: { executionWaitPollMs: 5000 },
  });
  for (const [n, input] of [LOOKUP, OUTER, HALFWAY].entries()) ok(running.engine, CREATE, { id: id(n + 1), input });
  ok(running.engine, CREATE, {
    id: id(9),
    input: {
      name: 'finder',
      kind: 'agent',
      config: { provider: 'local', model: 'm', instructions: 'Find accounts.' },
      tool: { description: 'Finds accounts.', inputSchema: { type: 'object' } },
      tools: [{ name: 'lookup' }],
      policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
    },
  });
  worker = running.engine.createWorker({ pollMs: 50 });
  running.engine.onStarted(() => worker.wake());
  worker.start();
}, 30_000);

afterAll(async () => {
  second.open();
  await worker?.stop();
  await running?.stop();
  await model?.close();
});

describe('status(text) inside a request (invokeAction over HTTP)', () => {
  it('is recorded on the execution, in order, each with its seq, time and the call that said it', async () => {
    const result = await gql(running.url, ADMIN, INVOKE, { n: 'lookup', e: id(101), i: { codes: ['a', 'b', 'c'] } });
    expect(result.errors).toBeUndefined();
    const execution = result.data.actions.invokeAction;
    expect(execution.status).toBe('SUCCEEDED');
    expect(execution.progress.map((m: any) => m.text)).toEqual(['looking up accounts', 'looked up 3 accounts']);
    const [a, b] = execution.progress;
    expect(b.seq).toBeGreaterThan(a.seq);
    expect(a).toMatchObject({ executionId: id(101), actionName: 'lookup' });
    expect(Date.parse(a.at)).not.toBeNaN();
    // Read again later, after the seq of the first: only the second.
    const later = ok(
      running.engine,
      `query($e: UUID!, $a: Int) { actions { execution(executionId: $e) { progress(after: $a) { text } } } }`,
      { e: id(101), a: a.seq },
    );
    expect(later.actions.execution.progress).toEqual([{ text: 'looked up 3 accounts' }]);
  });

  it("a top-level call's progress holds its nested calls' messages, each naming its call; a nested call's holds its own", async () => {
    const result = await gql(running.url, ADMIN, INVOKE, { n: 'outer', e: id(102), i: {} });
    expect(result.errors).toBeUndefined();
    const execution = result.data.actions.invokeAction;
    const nested = execution.children.find((c: any) => c.actionName === 'lookup');
    expect(execution.progress.map((m: any) => `${m.actionName}: ${m.text}`)).toEqual([
      'outer: outer begins',
      'lookup: looking up accounts',
      'lookup: looked up 3 accounts',
      'outer: outer ends',
    ]);
    expect(execution.progress[1].executionId).toBe(nested.executionId);
    const own = ok(
      running.engine,
      `query($e: UUID!) { actions { execution(executionId: $e) { progress { text } } } }`,
      {
        e: nested.executionId,
      },
    );
    expect(own.actions.execution.progress.map((m: any) => m.text)).toEqual([
      'looking up accounts',
      'looked up 3 accounts',
    ]);
  });

  it("a failed call's messages survive its rollback, as its logs do", async () => {
    const result = await gql(running.url, ADMIN, INVOKE, { n: 'halfway', e: id(103), i: {} });
    const execution = result.data.actions.invokeAction;
    expect(execution.status).toBe('FAILED');
    expect(execution.progress.map((m: any) => m.text)).toEqual(['half way']);
  });

  it('refuses a bad after or first with the value named', async () => {
    const q = (args: string) => `{ actions { execution(executionId: "${id(101)}") { progress(${args}) { text } } } }`;
    const negative = await gql(running.url, ADMIN, q('after: -1'));
    expect(negative.errors[0]).toMatchObject({ extensions: { code: 'BAD_REQUEST' } });
    expect(negative.errors[0].message).toContain('-1');
    const over = await gql(running.url, ADMIN, q('first: 1001'));
    expect(over.errors[0]).toMatchObject({ extensions: { code: 'LIMIT_EXCEEDED' } });
    expect(over.errors[0].message).toContain('1001');
    const waitBelow = await gql(running.url, ADMIN, POLL, { e: id(101), w: 100, p: -5 });
    expect(waitBelow.errors[0]).toMatchObject({ extensions: { code: 'BAD_REQUEST' } });
    expect(waitBelow.errors[0].message).toContain('-5');
  });
});

describe('an agent run: its tools’ messages reach a long-poll as each tool call commits', () => {
  it('execution(waitMs:, progressAfter:) answers early with the new messages while the run still runs', async () => {
    second = gate();
    const runId = id(201);
    const started = await gql(running.url, ADMIN, START, { n: 'finder', e: runId, i: {} });
    expect(started.errors).toBeUndefined();
    // The poll interval is 5 s: an answer well before it is the wake of the committed tool call.
    const t0 = performance.now();
    const first = await gql(running.url, ADMIN, POLL, { e: runId, w: 20_000, p: 0 });
    const waited = performance.now() - t0;
    expect(first.errors).toBeUndefined();
    const execution = first.data.actions.execution;
    expect(execution.status).toBe('RUNNING');
    expect(execution.progress.map((m: any) => `${m.actionName}: ${m.text}`)).toEqual([
      'lookup: looking up accounts',
      'lookup: looked up 2 accounts',
    ]);
    expect(waited).toBeLessThan(4000);
    // Nothing new: the next wait goes on until the run ends, and brings no message twice.
    const after = execution.progress.at(-1).seq;
    setTimeout(() => second.open(), 300);
    const last = await gql(running.url, ADMIN, POLL, { e: runId, w: 20_000, p: after });
    expect(last.data.actions.execution).toEqual({ status: 'SUCCEEDED', progress: [] });
  });

  it('without progressAfter, a message newer than the ones there when the wait began ends it', async () => {
    second = gate();
    const runId = id(202);
    // The worker is held back until the wait is in flight: the run begins (and speaks) during it.
    await worker.stop();
    await gql(running.url, ADMIN, START, { n: 'finder', e: runId, i: {} });
    const answer = gql(
      running.url,
      ADMIN,
      `query($e: UUID!) { actions { execution(executionId: $e, waitMs: 20000) { status progress { text } } } }`,
      { e: runId },
    );
    const t0 = performance.now();
    setTimeout(() => {
      worker = running.engine.createWorker({ pollMs: 50 });
      worker.start();
    }, 200);
    const result = await answer;
    expect(performance.now() - t0).toBeLessThan(4000);
    expect(result.data.actions.execution.status).toBe('RUNNING');
    expect(result.data.actions.execution.progress).toHaveLength(2);
    second.open();
  });
});

describe('MCP: notifications/progress for a caller that sent a progress token', () => {
  async function mcpClient(): Promise<Client> {
    const client = new Client({ name: 'progress-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(running.url.replace('/graphql', '/mcp')), {
        requestInit: { headers: { authorization: `Bearer ${ADMIN}` } },
      }),
    );
    return client;
  }

  it('a tool run inside a request: its messages, in order, before its result', async () => {
    const client = await mcpClient();
    try {
      const seen: Progress[] = [];
      const result = (await client.callTool({ name: 'outer', arguments: {} }, undefined, {
        onprogress: (p) => seen.push(p),
      })) as CallToolResult;
      expect(result.isError).toBeFalsy();
      expect(seen.map((p) => p.message)).toEqual([
        'outer begins',
        'looking up accounts',
        'looked up 3 accounts',
        'outer ends',
      ]);
      expect(seen.map((p) => p.progress)).toEqual([1, 2, 3, 4]);
    } finally {
      await client.close();
    }
  });

  it('an agent: each tool call’s messages as it commits, while the run still runs', async () => {
    second = gate();
    const client = await mcpClient();
    try {
      const seen: string[] = [];
      const heard = new Promise<void>((resolve) => {
        const result = client.callTool({ name: 'finder', arguments: {} }, undefined, {
          onprogress: (p) => {
            seen.push(p.message ?? '');
            if (seen.length === 2) resolve();
          },
        });
        void result.then((r) => seen.push(`result: ${JSON.stringify((r as CallToolResult).structuredContent)}`));
      });
      await heard;
      // Both messages came while the model's second turn still waits on the gate.
      expect(seen).toEqual(['looking up accounts', 'looked up 2 accounts']);
      second.open();
      await expect.poll(() => seen.length, { timeout: 10_000 }).toBe(3);
      expect(seen[2]).toBe('result: {"text":"Found them."}');
    } finally {
      await client.close();
    }
  });

  it('a caller without a token gets no notifications (and the same result)', async () => {
    const client = await mcpClient();
    try {
      const notes: unknown[] = [];
      client.fallbackNotificationHandler = async (n) => void notes.push(n);
      const result = (await client.callTool({ name: 'lookup', arguments: {} })) as CallToolResult;
      expect(result.structuredContent).toEqual({ n: 3 });
      expect(notes).toEqual([]);
    } finally {
      await client.close();
    }
  });
});
