import { spawn } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type ScriptedModel, startScriptedModel } from '../../examples/scripted-model/server.mjs';
import type { Worker } from '../../src/execution/queue/worker.js';
import { id, newEngine, ok } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

const ADMIN = 'tly_executions-wait-admin-key';
const BIN = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');
type Running = Awaited<ReturnType<typeof startServer>>;

const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const START = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { executionId status } } }`;
const WAIT = `query($e: UUID!, $w: Int) { actions { execution(executionId: $e, waitMs: $w) { executionId status output error { code message } } } }`;
const PING = {
  name: 'ping',
  kind: 'tool',
  config: { runtime: 'javascript', src: 'function run(event) { return { ok: true, echo: event.data.n ?? null }; }' },
  tool: { description: 'Answers ok', inputSchema: { type: 'object', properties: { n: { type: 'integer' } } } },
  policies: [],
};

async function gql(url: string, key: string, query: string, variables: Record<string, unknown> = {}): Promise<any> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ query, variables }),
  });
  return response.json();
}

/** A client with its key: `policies` as GraphQL input text. */
function createClient(engine: Running['engine'], principal: string, policies: string): string {
  const data = ok(
    engine,
    `mutation { auth { createClient(input: {principal: "${principal}", name: "${principal}", policies: [${policies}]}) { apiKey } } }`,
  );
  return data.auth.createClient.apiKey;
}

const OWN_EXECUTIONS = `{effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]},
  {effect: ALLOW, actions: [SELECT], resources: ["actions.Execution"], assertions: {mine: "context.document.principal == context.auth.claims.principal"}}`;

describe('actions.execution(waitMs:) over HTTP', () => {
  let running: Running;
  let alice: string;
  let mallory: string;

  beforeAll(async () => {
    running = await startServer(ADMIN, { limits: { executionWaitMsMax: 8000, executionWaitPollMs: 50 } });
    ok(running.engine, CREATE, { id: id(1), input: PING });
    alice = createClient(running.engine, 'alice', OWN_EXECUTIONS);
    mallory = createClient(running.engine, 'mallory', OWN_EXECUTIONS);
  });
  afterAll(async () => running.stop());

  it('answers SUCCEEDED as soon as the in-process worker ran it, before the wait bound', async () => {
    const started = await gql(running.url, alice, START, { n: 'ping', e: id(101), i: { n: 7 } });
    expect(started.errors).toBeUndefined();
    expect(started.data.actions.startAction.status).toBe('QUEUED');
    const worker = running.engine.createWorker();
    const t0 = performance.now();
    const answer = gql(running.url, alice, WAIT, { e: id(101), w: 5000 });
    setTimeout(() => worker.drain(), 100);
    const result = await answer;
    const elapsed = performance.now() - t0;
    expect(result.errors).toBeUndefined();
    expect(result.data.actions.execution).toMatchObject({ status: 'SUCCEEDED', output: { ok: true, echo: 7 } });
    expect(elapsed).toBeLessThan(5000);
    expect(running.engine.stats().executionWaiters).toBe(0);
  });

  it('answers QUEUED after waitMs when nothing runs it', async () => {
    await gql(running.url, alice, START, { n: 'ping', e: id(102), i: {} });
    const t0 = performance.now();
    const result = await gql(running.url, alice, WAIT, { e: id(102), w: 300 });
    expect(result.data.actions.execution.status).toBe('QUEUED');
    expect(performance.now() - t0).toBeGreaterThanOrEqual(250);
  });

  it('the in-process engine.graphql answers at once', () => {
    const t0 = performance.now();
    const data = ok(running.engine, WAIT, { e: id(102), w: 8000 });
    expect(data.actions.execution.status).toBe('QUEUED');
    expect(performance.now() - t0).toBeLessThan(1000);
  });

  it("another client cannot wait on alice's execution: the same error as reading it, at once", async () => {
    const read = await gql(running.url, mallory, WAIT, { e: id(102) });
    const t0 = performance.now();
    const waited = await gql(running.url, mallory, WAIT, { e: id(102), w: 5000 });
    expect(performance.now() - t0).toBeLessThan(2000);
    expect(read.errors[0].extensions.code).toBe('ACCESS_DENIED');
    expect(waited.errors[0]).toMatchObject({
      message: read.errors[0].message,
      extensions: { code: read.errors[0].extensions.code },
    });
    expect(running.engine.stats().executionWaiters).toBe(0);
  });

  it('refuses a waitMs over executionWaitMsMax (and under 0), naming the value and the limit', async () => {
    const over = await gql(running.url, alice, WAIT, { e: id(102), w: 8001 });
    expect(over.errors[0].extensions.code).toBe('LIMIT_EXCEEDED');
    expect(over.errors[0].message).toContain('8001');
    expect(over.errors[0].message).toContain('executionWaitMsMax (8000 ms)');
    const negative = await gql(running.url, alice, WAIT, { e: id(102), w: -1 });
    expect(negative.errors[0].extensions.code).toBe('BAD_REQUEST');
  });

  it('a client that disconnects mid-wait frees its waiter slot', async () => {
    await new Promise<void>((resolve, reject) => {
      const body = JSON.stringify({ query: WAIT, variables: { e: id(102), w: 8000 } });
      const req = httpRequest(running.url, {
        method: 'POST',
        agent: false,
        headers: {
          'content-type': 'application/json',
          authorization: `Bearer ${alice}`,
          'content-length': Buffer.byteLength(body),
        },
      });
      req.on('error', () => resolve());
      req.end(body);
      const check = setInterval(() => {
        if (running.engine.stats().executionWaiters === 1) {
          clearInterval(check);
          req.destroy();
          resolve();
        }
      }, 10);
      setTimeout(() => reject(new Error('the wait never started')), 3000);
    });
    const t0 = performance.now();
    while (running.engine.stats().executionWaiters > 0 && performance.now() - t0 < 3000)
      await new Promise((r) => setTimeout(r, 10));
    expect(running.engine.stats().executionWaiters).toBe(0);
  });
});

describe('executionWaitersMax', () => {
  let running: Running;
  afterAll(async () => running.stop());

  it('past the bound a wait answers at once with the current state', async () => {
    running = await startServer(ADMIN, { limits: { executionWaitersMax: 1, executionWaitPollMs: 50 } });
    ok(running.engine, CREATE, { id: id(1), input: PING });
    ok(running.engine, START, { n: 'ping', e: id(201), i: {} });
    const first = gql(running.url, ADMIN, WAIT, { e: id(201), w: 1500 });
    const t0 = performance.now();
    while (running.engine.stats().executionWaiters < 1 && performance.now() - t0 < 3000)
      await new Promise((r) => setTimeout(r, 5));
    const t1 = performance.now();
    const second = await gql(running.url, ADMIN, WAIT, { e: id(201), w: 1500 });
    expect(performance.now() - t1).toBeLessThan(1000);
    expect(second.data.actions.execution.status).toBe('QUEUED');
    expect(running.engine.stats().executionWaitsRefused).toBe(1);
    expect((await first).data.actions.execution.status).toBe('QUEUED');
  });
});

describe("engine.executionWaits: a query's wait fields, run alone", () => {
  let engine: Running['engine'];
  beforeAll(async () => {
    engine = await newEngine();
    ok(engine, CREATE, { id: id(1), input: PING });
    // alice may see her own executions only (these are the engine's).
    createClient(engine, 'alice', OWN_EXECUTIONS);
    // 403 is terminal (run), the others QUEUED (no worker runs them).
    ok(engine, START, { n: 'ping', e: id(403), i: {} });
    engine.createWorker().drain();
    for (const e of [401, 402, 404]) ok(engine, START, { n: 'ping', e: id(e), i: {} });
  });
  afterAll(() => engine.close());
  const waitsOf = (query: string, variables: Record<string, unknown> = {}, principal?: string) =>
    engine
      .executionWaits({ query, variables, operationName: null }, principal === undefined ? {} : { principal })
      .map((w) => [w.executionId.slice(-3), w.waitMs]);

  it('finds them through aliases, fragments (one spread twice), inline fragments and variables; @include(if: false) and @skip(if: true) wait for nothing', () => {
    const query = `query($a: UUID!, $w: Int!, $no: Boolean!, $n: Int!) {
      journal { name }
      x: actions { first: execution(executionId: $a, waitMs: $w) { status output } ...Wait ...Wait }
      ... on Query { actions { execution(executionId: "${id(402)}", waitMs: 300) { status } } }
      ...Top
      actions { skipped: execution(executionId: "${id(404)}", waitMs: 100) @include(if: $no) { status } gone: execution(executionId: "${id(404)}", waitMs: 100) @skip(if: true) { status } }
    }
    fragment Wait on ActionsQuery { terminal: execution(executionId: "${id(403)}", waitMs: 500) { status } }
    fragment Top on Query { accounts(first: $n) { nodes { code } } actions { executions(first: 5) { nodes { executionId } } last: execution(executionId: "${id(404)}", waitMs: 700) { executionId } } }`;
    expect(engine.graphql(query, { a: id(401), w: 200, no: false, n: 5 }).errors).toBeUndefined();
    // The terminal execution (403) is no wait; 404 is waited for once per field.
    expect(waitsOf(query, { a: id(401), w: 200, no: false, n: 5 })).toEqual([
      ['401', 200],
      ['402', 300],
      ['404', 700],
    ]);
    expect(waitsOf(query, { a: id(401), w: 200, no: true, n: 5 })).toEqual([
      ['401', 200],
      ['402', 300],
      ['404', 700],
      ['404', 100],
    ]);
  });

  it("nothing for a query without waitMs, a waitMs of 0, a mutation, a document that does not run, an unknown execution; another client's execution is no wait for a client that may not see it", () => {
    expect(waitsOf(`{ actions { execution(executionId: "${id(401)}") { status } } }`)).toEqual([]);
    expect(waitsOf(`{ actions { execution(executionId: "${id(401)}", waitMs: 0) { status } } }`)).toEqual([]);
    expect(
      waitsOf(`mutation { queries { actions { execution(executionId: "${id(401)}", waitMs: 100) { status } } } }`),
    ).toEqual([]);
    expect(waitsOf(`{ actions { execution(executionId: "${id(401)}", waitMs: 100) { nope } } }`)).toEqual([]);
    expect(waitsOf(`{ actions { execution(executionId: "${id(999)}", waitMs: 100) { status } } }`)).toEqual([]);
    expect(
      waitsOf(`{ actions { execution(executionId: "${id(401)}", waitMs: 100) { status } } }`, {}, 'alice'),
    ).toEqual([]);
    expect(waitsOf(`{ actions { execution(executionId: "${id(401)}", waitMs: 100) { status } } }`)).toEqual([
      ['401', 100],
    ]);
  });
});

describe('MCP tools/call of an agent tool', () => {
  let running: Running;
  let model: ScriptedModel;
  let worker: Worker;
  let client: Client | undefined;

  beforeAll(async () => {
    model = await startScriptedModel({ rules: [() => ({ text: 'All done: the answer is 42.' })] });
    running = await startServer(ADMIN, {
      providers: [{ name: 'local', format: 'openai', baseUrl: `${model.url}/v1`, models: ['m'] }],
    });
    ok(running.engine, CREATE, { id: id(1), input: PING });
    ok(running.engine, CREATE, {
      id: id(2),
      input: {
        name: 'helper',
        kind: 'agent',
        config: { provider: 'local', model: 'm', instructions: 'Be brief.' },
        tool: {
          description: 'Answers a question',
          inputSchema: { type: 'object', properties: { question: { type: 'string' } }, required: ['question'] },
        },
        tools: [{ name: 'ping', version: 1 }],
        policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
      },
    });
    worker = running.engine.createWorker({ pollMs: 50 });
    running.engine.onStarted(() => worker.wake());
    worker.start();
  });
  afterEach(async () => {
    await client?.close();
    client = undefined;
  });
  afterAll(async () => {
    await worker.stop();
    await running.stop();
    await model.close();
  });

  it('lists its kind, starts it, waits, and answers with the final text', async () => {
    const tool = ok(running.engine, '{ actions { tool(name: "helper") { kind } } }');
    expect(tool.actions.tool.kind).toBe('agent');
    const transport = new StreamableHTTPClientTransport(new URL(running.url.replace('/graphql', '/mcp')), {
      requestInit: { headers: { authorization: `Bearer ${ADMIN}` } },
    });
    client = new Client({ name: 'test', version: '1.0.0' });
    await client.connect(transport);
    const executionId = id(301);
    const result = (await client.callTool({
      name: 'helper',
      arguments: { question: 'what is the answer?' },
      _meta: { executionId },
    })) as CallToolResult;
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toMatchObject({ text: 'All done: the answer is 42.' });
    expect((result.content[0] as { text: string }).text).toContain('All done: the answer is 42.');
    expect(result._meta).toMatchObject({ executionId });
    const row = ok(running.engine, `{ actions { execution(executionId: "${executionId}") { kind status } } }`);
    expect(row.actions.execution).toMatchObject({ kind: 'AGENT', status: 'SUCCEEDED' });
  });
});

describe('tally start --wait', () => {
  it('with --db runs the worker in-process and prints the final output', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'tally-wait-')), 'wait.db');
    const engine = await newEngine({ path });
    ok(engine, CREATE, { id: id(1), input: PING });
    engine.close();
    const run = await new Promise<{ status: number | null; out: string; err: string }>((resolve, reject) => {
      const env = { ...process.env };
      for (const name of ['TALLY_SERVER', 'TALLY_API_KEY', 'TALLY_ADMIN_KEY', 'TALLY_DB']) delete env[name];
      const child = spawn(
        process.execPath,
        [BIN, 'start', 'ping', '--input', '{"n": 5}', '--wait', '--timeout', '30', '--db', path],
        { env },
      );
      let out = '';
      let err = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
      child.once('error', reject);
      child.once('close', (status) => resolve({ status, out, err }));
    });
    expect(run.err).toBe('');
    expect(run.status).toBe(0);
    expect(run.out).toMatch(/^ping@1 [0-9a-f-]{36} SUCCEEDED\n/);
    expect(run.out).toContain('"echo": 5');
  }, 30_000);
});

describe('waits that end by polling, and MCP calls past mcpCallWaitMs', () => {
  it('a worker in another process (another engine on the file) is seen by polling every executionWaitPollMs', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'tally-wait-poll-')), 'poll.db');
    const running = await startServer(ADMIN, { path, limits: { executionWaitPollMs: 50, executionWaitMsMax: 10_000 } });
    const other = await newEngine({ path });
    try {
      ok(running.engine, CREATE, { id: id(1), input: PING });
      expect((await gql(running.url, ADMIN, START, { n: 'ping', e: id(501), i: { n: 5 } })).errors).toBeUndefined();
      const waiting = gql(running.url, ADMIN, WAIT, { e: id(501), w: 10_000 });
      await new Promise((r) => setTimeout(r, 100));
      expect(running.engine.stats().executionWaiters).toBe(1);
      // The other engine's worker runs it: no attempt listener of the server's engine hears of it.
      expect(other.createWorker().drain()).toBe(1);
      const answer = await waiting;
      expect(answer.data.actions.execution).toMatchObject({ status: 'SUCCEEDED', output: { ok: true, echo: 5 } });
      expect(running.engine.stats().executionWaiters).toBe(0);
    } finally {
      other.close();
      await running.stop();
    }
  });

  it('an MCP call of an agent still running after mcpCallWaitMs answers with its id and status, not an error', async () => {
    const model = await startScriptedModel({ rules: [() => ({ delayMs: 1500, text: 'late' })] });
    const running = await startServer(ADMIN, {
      providers: [{ name: 'local', format: 'openai', baseUrl: `${model.url}/v1`, models: ['m'] }],
      limits: { mcpCallWaitMs: 300 },
    });
    const worker = running.engine.createWorker({ pollMs: 50 });
    running.engine.onStarted(() => worker.wake());
    worker.start();
    const client = new Client({ name: 'test', version: '1.0.0' });
    try {
      ok(running.engine, CREATE, {
        id: id(2),
        input: {
          name: 'slowpoke',
          kind: 'agent',
          config: { provider: 'local', model: 'm' },
          tool: { description: 'Takes its time', inputSchema: { type: 'object' } },
          policies: [],
        },
      });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(running.url.replace('/graphql', '/mcp')), {
          requestInit: { headers: { authorization: `Bearer ${ADMIN}` } },
        }),
      );
      const executionId = id(601);
      const result = (await client.callTool({
        name: 'slowpoke',
        arguments: {},
        _meta: { executionId },
      })) as CallToolResult;
      expect(result.isError).toBeFalsy();
      expect((result.content[0] as { text: string }).text).toContain(executionId);
      expect(result._meta).toMatchObject({ executionId, status: 'RUNNING' });
    } finally {
      await client.close();
      await worker.stop();
      await running.stop();
      await model.close();
    }
  });
});

describe('a run that parks for an approval ends every wait', () => {
  it('an MCP call of an agent whose call waits for a person answers at once with WAITING_APPROVAL, without polling', async () => {
    const model = await startScriptedModel({ rules: [() => ({ toolCalls: [{ name: 'ping', arguments: { n: 1 } }] })] });
    const running = await startServer(ADMIN, {
      providers: [{ name: 'local', format: 'openai', baseUrl: `${model.url}/v1`, models: ['m'] }],
      limits: { mcpCallWaitMs: 60_000 },
    });
    const worker = running.engine.createWorker({ pollMs: 50 });
    running.engine.onStarted(() => worker.wake());
    worker.start();
    const client = new Client({ name: 'test', version: '1.0.0' });
    try {
      ok(running.engine, CREATE, { id: id(1), input: PING });
      ok(running.engine, CREATE, {
        id: id(2),
        input: {
          name: 'careful',
          kind: 'agent',
          config: { provider: 'local', model: 'm' },
          tool: { description: 'Asks first.', inputSchema: { type: 'object' } },
          tools: [{ name: 'ping', version: 1, approval: {} }],
          policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
        },
      });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(running.url.replace('/graphql', '/mcp')), {
          requestInit: { headers: { authorization: `Bearer ${ADMIN}` } },
        }),
      );
      let reads = 0;
      const graphqlAsync = running.engine.graphqlAsync.bind(running.engine);
      running.engine.graphqlAsync = (...args: Parameters<typeof graphqlAsync>) => {
        reads++;
        return graphqlAsync(...args);
      };
      const result = (await client.callTool({
        name: 'careful',
        arguments: {},
        _meta: { executionId: id(701) },
      })) as CallToolResult;
      expect(result.isError).toBeFalsy();
      expect(result._meta).toMatchObject({ executionId: id(701), status: 'WAITING_APPROVAL' });
      expect((result.content[0] as { text: string }).text).toContain('approvals');
      // The tool lookup, the start and a few waits — not a request a millisecond for mcpCallWaitMs.
      expect(reads).toBeLessThan(10);
    } finally {
      await client.close();
      await worker.stop();
      await running.stop();
      await model.close();
    }
  });
});
