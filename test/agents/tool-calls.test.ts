// An agent's tool calls as the frameworks have them: a tool the model calls is retried by the
// tool's own execution settings within the run (each attempt in the tree, the model told only the
// last outcome), and a model may call a tool by one of its aliases. A user starts the agent over
// GraphQL on a real HTTP server; the model is the scripted model server over real HTTP.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ScriptedModel, startScriptedModel } from '../../examples/scripted-model/server.mjs';
import type { Engine } from '../../src/engine.js';
import { id } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

const KEY = 'tly_toolcalls0123456789abcdef0123456789ab';
const MODEL_KEY = 'sk-tool-calls-model-0123456789';
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const START = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { status } } }`;
const TREE = `query($e: UUID!) { actions { execution(executionId: $e) { status output error { code message }
  children { kind status children { executionId actionName actionVersion status attempt output error { code message } } } } } }`;
/** One call: its attempts, and the calls beneath it. */
const CALL = `query($e: UUID!) { actions { execution(executionId: $e) { invocations { attempt status output error { code message } }
  children { kind status } } } }`;

/** The model's script, in its prompt: the calls of each turn; after the last, it answers with every tool result it read. */
type Turns = Array<Array<{ name: string; arguments: Record<string, unknown> }>>;

function rules() {
  return [
    (request: any) => {
      const turns = JSON.parse(request.messages[0].text) as Turns;
      const calls = turns[request.turn - 1];
      if (calls) return { toolCalls: calls.map((c) => ({ name: c.name, arguments: c.arguments })) };
      const seen = request.messages.filter((m: any) => m.role === 'tool').map((m: any) => JSON.parse(m.content));
      return { text: JSON.stringify(seen) };
    },
  ];
}

const FAST = { initialMs: 5, multiplier: 1, maxMs: 5 };

function tool(name: string, src: string, extra: Record<string, unknown> = {}) {
  return {
    name,
    kind: 'tool',
    config: { runtime: 'javascript', src },
    tool: {
      description: `The ${name} tool.`,
      inputSchema: { type: 'object', properties: { n: { type: 'integer' } } },
      ...((extra.tool as object) ?? {}),
    },
    policies: [],
    ...Object.fromEntries(Object.entries(extra).filter(([k]) => k !== 'tool')),
  };
}

describe('an agent’s tool calls: retries within the run, and aliases', () => {
  let server: Awaited<ReturnType<typeof startServer>>;
  let engine: Engine;
  let model: ScriptedModel;
  let seq = 0;

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

  /** Start `agent` with the model's script over HTTP; run it to its end; its tree. */
  async function run(agent: string, turns: Turns) {
    const e = id(`7${String(++seq).padStart(5, '0')}`);
    await gql(START, { n: agent, e, i: { m: JSON.stringify(turns) } });
    const worker = engine.createWorker();
    for (const until = Date.now() + 20_000; Date.now() < until; await new Promise((r) => setTimeout(r, 5))) {
      await worker.drainAll();
      const { status } = (await gql(TREE, { e })).actions.execution;
      if (status === 'SUCCEEDED' || status === 'FAILED') break;
    }
    return (await gql(TREE, { e })).actions.execution;
  }

  /** The calls of every turn, in order, with their attempts and the calls beneath them. */
  async function calls(tree: any) {
    const all = tree.children.flatMap((turn: any) => turn.children);
    for (const call of all) Object.assign(call, (await gql(CALL, { e: call.executionId })).actions.execution);
    return all;
  }

  beforeAll(async () => {
    model = await startScriptedModel({ apiKey: MODEL_KEY, rules: rules() });
    process.env.TOOL_CALLS_MODEL_KEY = MODEL_KEY;
    server = await startServer(KEY, {
      providers: [
        {
          name: 'local',
          format: 'openai',
          baseUrl: `${model.url}/v1`,
          models: ['m'],
          apiKeyEnv: 'TOOL_CALLS_MODEL_KEY',
          maxRetries: 0,
        },
      ],
    });
    engine = server.engine;
    const actions = [
      // Fails its first two attempts (a flaky outside API), then answers; each attempt makes a cel() call.
      tool(
        'flaky_api',
        "function run(event) { cel('1 + 1'); if (event.execution.attempt < 3) fail('the API timed out', 'try again'); return { ok: true, attempt: event.execution.attempt }; }",
        { execution: { maxAttempts: 3, retryIf: 'true', backoff: FAST } },
      ),
      // Fails every attempt, but only twice is allowed.
      tool('flaky_twice', "function run(event) { fail('still down', 'later'); }", {
        execution: { maxAttempts: 2, backoff: FAST },
      }),
      // Its retry rule says no.
      tool('picky', "function run(event) { fail('no', 'no'); }", {
        execution: { maxAttempts: 5, retryIf: "error.code == 'TIMEOUT'", backoff: FAST },
      }),
      // fail(…, {retry: false}): never again, whatever retryIf says.
      tool('final_answer', "function run(event) { fail('gone for good', 'stop', { retry: false }); }", {
        execution: { maxAttempts: 5, retryIf: 'true', backoff: FAST },
      }),
      // Fails its first attempt, then waits a while before the second.
      tool(
        'slow_retry',
        "function run(event) { if (event.execution.attempt < 2) fail('not yet', 'soon'); return { attempt: event.execution.attempt }; }",
        { execution: { maxAttempts: 3, backoff: { initialMs: 3000, multiplier: 1, maxMs: 3000 } } },
      ),
      tool('search_documentation', 'function run(event) { return { found: `docs about ${event.data.q}` }; }', {
        tool: {
          aliases: ['find_docs', 'search-docs2'],
          inputSchema: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
        },
      }),
    ];
    for (const [i, input] of actions.entries()) await gql(CREATE, { id: id(100 + i), input });
    await gql(CREATE, {
      id: id(200),
      input: {
        name: 'helper',
        kind: 'agent',
        config: { provider: 'local', model: 'm', prompt: '{{m}}', maxTurns: 6, maxToolCalls: 12 },
        tool: {
          description: 'Calls its tools as scripted',
          inputSchema: { type: 'object', properties: { m: { type: 'string' } }, required: ['m'] },
        },
        tools: ['flaky_api', 'flaky_twice', 'picky', 'final_answer', 'slow_retry', 'search_documentation'].map(
          (name) => ({ name }),
        ),
        policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
      },
    });
  });
  afterAll(async () => {
    await server?.stop();
    await model?.close();
  });

  it('a flaky tool is retried by its own maxAttempts and retryIf: three attempts in the tree, the model told only of the third', async () => {
    const tree = await run('helper', [[{ name: 'flaky_api', arguments: {} }]]);
    expect(tree.status, JSON.stringify(tree)).toBe('SUCCEEDED');
    const [call] = await calls(tree);
    expect(call).toMatchObject({ actionName: 'flaky_api', status: 'SUCCEEDED', attempt: 3 });
    expect(call.invocations.map((i: any) => [i.attempt, i.status, i.error?.message ?? null])).toEqual([
      [1, 'FAILED', 'the API timed out'],
      [2, 'FAILED', 'the API timed out'],
      [3, 'SUCCEEDED', null],
    ]);
    expect(call.invocations[2].output).toEqual({ ok: true, attempt: 3 });
    // Every attempt's calls are beneath the one call.
    expect(call.children.map((c: any) => `${c.kind} ${c.status}`)).toEqual([
      'CEL SUCCEEDED',
      'CEL SUCCEEDED',
      'CEL SUCCEEDED',
    ]);
    // The model read one result: the last attempt's.
    expect(JSON.parse(tree.output.text)).toEqual([{ ok: true, attempt: 3 }]);
  });

  it('a tool that keeps failing stops at its maxAttempts; the model reads the last failure, as TOOL_FAILED', async () => {
    const tree = await run('helper', [[{ name: 'flaky_twice', arguments: {} }]]);
    const [call] = await calls(tree);
    expect(call).toMatchObject({ status: 'FAILED', attempt: 2, error: { code: 'TOOL_FAILED', message: 'still down' } });
    expect(call.invocations.map((i: any) => i.status)).toEqual(['FAILED', 'FAILED']);
    expect(JSON.parse(tree.output.text)).toEqual([
      { error: { code: 'TOOL_FAILED', message: 'still down', hint: 'later' } },
    ]);
  });

  it('retryIf that says no, fail(…, {retry: false}), and bad input are tried once', async () => {
    const tree = await run('helper', [
      [
        { name: 'picky', arguments: {} },
        { name: 'final_answer', arguments: {} },
        { name: 'flaky_api', arguments: { n: 'not a number' } },
      ],
    ]);
    const [picky, final, invalid] = await calls(tree);
    expect(
      [picky, final, invalid].map((c: any) => [c.actionName, c.status, c.attempt, c.invocations.length, c.error.code]),
    ).toEqual([
      ['picky', 'FAILED', 1, 1, 'TOOL_FAILED'],
      ['final_answer', 'FAILED', 1, 1, 'TOOL_FAILED'],
      ['flaky_api', 'FAILED', 1, 1, 'INPUT_INVALID'],
    ]);
  });

  it('a model may call a tool by an alias: it runs as the tool, recorded under its name; the model is offered the name only', async () => {
    const tree = await run('helper', [
      [
        { name: 'find_docs', arguments: { q: 'fees' } },
        { name: 'search-docs2', arguments: { q: 'limits' } },
      ],
    ]);
    expect(tree.status).toBe('SUCCEEDED');
    expect((await calls(tree)).map((c: any) => [c.actionName, c.actionVersion, c.status])).toEqual([
      ['search_documentation', 1, 'SUCCEEDED'],
      ['search_documentation', 1, 'SUCCEEDED'],
    ]);
    expect(JSON.parse(tree.output.text)).toEqual([{ found: 'docs about fees' }, { found: 'docs about limits' }]);
    const offered = model.requests.at(-1)!.tools.map((t: any) => t.name);
    expect(offered).toContain('search_documentation');
    expect(offered).not.toContain('find_docs');
  });

  it('a run stopped while it waits to retry resumes at the next attempt: nothing runs twice, the model is not asked again', async () => {
    const e = id('799999');
    await gql(START, { n: 'helper', e, i: { m: JSON.stringify([[{ name: 'slow_retry', arguments: {} }]]) } });
    const asked = model.requests.length;
    const first = engine.createWorker();
    first.start();
    // Until the first attempt failed and the call waits for its second.
    const attempts = () =>
      engine.db
        .prepare(
          "SELECT count(*) AS n FROM invocations i JOIN executions x USING (execution_id) WHERE x.action_name = 'slow_retry'",
        )
        .get() as { n: number };
    for (const until = Date.now() + 10_000; attempts().n === 0 && Date.now() < until; )
      await new Promise((r) => setTimeout(r, 10));
    expect(attempts().n).toBe(1);
    await first.stop();
    await engine.createWorker().drainAll();
    const tree = (await gql(TREE, { e })).actions.execution;
    expect(tree.status).toBe('SUCCEEDED');
    const [call] = await calls(tree);
    expect(call.invocations.map((i: any) => [i.attempt, i.status])).toEqual([
      [1, 'FAILED'],
      [2, 'SUCCEEDED'],
    ]);
    expect(JSON.parse(tree.output.text)).toEqual([{ attempt: 2 }]);
    // Turn 1 was asked once; then turn 2 once.
    expect(model.requests.length - asked).toBe(2);
  });
});
