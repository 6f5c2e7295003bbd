// A hostile model against an agent's new reach: calling a tool by an alias, and a tool retried
// within the run. A prompt-injected model names an alias of a tool it was not given (refused, the
// tool never runs), and makes a retryable tool fail forever (bounded by the run's tool calls and by
// agentToolRetryWaitMsMax). Real SQLite, real QuickJS, the scripted model over real HTTP.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ScriptedModel, startScriptedModel } from '../../examples/scripted-model/server.mjs';
import type { Engine } from '../../src/engine.js';
import { id, newEngine, ok } from '../helpers/engine.js';

const MODEL_KEY = 'sk-tool-calls-hostile-0123456789';
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const UPDATE = `mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) { version } } }`;
const START = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { status } } }`;
const TREE = `query($e: UUID!) { actions { execution(executionId: $e) { status output error { code message }
  children { kind status children { executionId actionName actionVersion status attempt error { code message } } } } } }`;
const ATTEMPTS = `query($e: UUID!) { actions { execution(executionId: $e) { invocations { attempt status } } } }`;

type Turns = Array<Array<{ name: string; arguments: Record<string, unknown> }>>;

/** The injected model: calls what its prompt says, then answers with the results it read. */
const INJECTED = [
  (request: any) => {
    const turns = JSON.parse(request.messages[0].text) as Turns;
    const calls = turns[request.turn - 1];
    if (calls) return { toolCalls: calls };
    return {
      text: JSON.stringify(
        request.messages.filter((m: any) => m.role === 'tool').map((m: any) => JSON.parse(m.content)),
      ),
    };
  },
];

function tool(
  name: string,
  src: string,
  extra: Record<string, unknown> = {},
  toolFields: Record<string, unknown> = {},
) {
  return {
    name,
    kind: 'tool',
    config: { runtime: 'javascript', src },
    tool: { description: `The ${name} tool.`, inputSchema: { type: 'object' }, ...toolFields },
    policies: [],
    ...extra,
  };
}

function agent(name: string, tools: Array<{ name: string; version?: number }>, config: Record<string, unknown> = {}) {
  return {
    name,
    kind: 'agent',
    config: { provider: 'local', model: 'm', prompt: '{{m}}', maxTurns: 6, maxToolCalls: 8, ...config },
    tool: {
      description: name,
      inputSchema: { type: 'object', properties: { m: { type: 'string' } }, required: ['m'] },
    },
    tools,
    policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
  };
}

async function fixture(limits: Record<string, number> = {}) {
  const model = await startScriptedModel({ apiKey: MODEL_KEY, rules: INJECTED });
  process.env.TOOL_CALLS_HOSTILE_KEY = MODEL_KEY;
  const engine = await newEngine({
    limits,
    providers: [
      {
        name: 'local',
        format: 'openai',
        baseUrl: `${model.url}/v1`,
        models: ['m'],
        apiKeyEnv: 'TOOL_CALLS_HOSTILE_KEY',
        maxRetries: 0,
      },
    ],
  });
  return { engine, model };
}

let seq = 0;
async function run(engine: Engine, name: string, turns: Turns) {
  const e = id(`8${String(++seq).padStart(5, '0')}`);
  ok(engine, START, { n: name, e, i: { m: JSON.stringify(turns) } });
  const worker = engine.createWorker();
  for (const until = Date.now() + 20_000; Date.now() < until; await new Promise((r) => setTimeout(r, 5))) {
    await worker.drainAll();
    const { status } = ok(engine, TREE, { e }).actions.execution;
    if (status === 'SUCCEEDED' || status === 'FAILED') break;
  }
  const tree = ok(engine, TREE, { e }).actions.execution;
  return { tree, calls: tree.children.flatMap((t: any) => t.children) };
}

/** Calls that ran the action (a refused name is recorded as the name asked for, with no action). */
const ranOf = (engine: Engine, actionId: string) =>
  (engine.db.prepare('SELECT count(*) AS n FROM executions WHERE action_id = ?').get(actionId) as { n: number }).n;

describe('a prompt-injected model and aliases', () => {
  let engine: Engine;
  let model: ScriptedModel;
  beforeAll(async () => {
    ({ engine, model } = await fixture());
    ok(engine, CREATE, {
      id: id(1),
      input: tool('search', 'function run() { return { found: 1 }; }', {}, { aliases: ['find'] }),
    });
    // Not given to the agent: moving money, under an innocent-looking alias.
    ok(engine, CREATE, {
      id: id(2),
      input: tool('drain_account', 'function run() { return { drained: true }; }', {}, { aliases: ['lookup_docs'] }),
    });
    ok(engine, CREATE, { id: id(3), input: tool('pinned', 'function run() { return { v: 1 }; }') });
    // Version 2 of pinned answers to "newer"; the agent pins version 1.
    ok(engine, UPDATE, { id: id(3), input: { tool: { aliases: ['newer'] } } });
    ok(engine, CREATE, { id: id(10), input: agent('assistant', [{ name: 'search' }, { name: 'pinned', version: 1 }]) });
  });
  afterAll(async () => {
    engine.close();
    await model.close();
  });

  it('an alias of a tool the agent was not given is no tool: NOT_FOUND, and the tool never runs', async () => {
    const { tree, calls } = await run(engine, 'assistant', [
      [
        { name: 'lookup_docs', arguments: {} },
        { name: 'drain_account', arguments: {} },
      ],
    ]);
    expect(tree.status).toBe('SUCCEEDED');
    expect(calls.map((c: any) => [c.actionName, c.status, c.error?.code])).toEqual([
      ['lookup_docs', 'FAILED', 'NOT_FOUND'],
      ['drain_account', 'FAILED', 'NOT_FOUND'],
    ]);
    expect(calls[0].error.message).toContain(
      'there is no tool "lookup_docs"; the tools you can call are: search, pinned',
    );
    expect(ranOf(engine, id(2))).toBe(0);
  });

  it('an alias only a later version has is no name of the pinned version the agent offers', async () => {
    const { calls } = await run(engine, 'assistant', [
      [
        { name: 'newer', arguments: {} },
        { name: 'find', arguments: {} },
      ],
    ]);
    expect(calls.map((c: any) => [c.actionName, c.actionVersion, c.status])).toEqual([
      ['newer', null, 'FAILED'],
      ['search', 1, 'SUCCEEDED'],
    ]);
  });

  it('the reserved names and other cases of an alias are no way around it', async () => {
    const { calls } = await run(engine, 'assistant', [
      [
        { name: 'FIND', arguments: {} },
        { name: 'Search', arguments: {} },
        { name: 'graphql', arguments: { query: '{ __typename }' } },
      ],
    ]);
    expect(calls.map((c: any) => [c.status, c.error?.code])).toEqual([
      ['FAILED', 'NOT_FOUND'],
      ['FAILED', 'NOT_FOUND'],
      ['FAILED', 'NOT_FOUND'],
    ]);
  });
});

describe('a model making a retryable tool fail forever', () => {
  it('is bounded by the run’s maxToolCalls: every attempt is a tool call, and the next call fails the run', async () => {
    const { engine, model } = await fixture();
    try {
      ok(engine, CREATE, {
        id: id(1),
        input: tool('always_down', "function run() { fail('down', 'later'); }", {
          execution: { maxAttempts: 100, retryIf: 'true', backoff: { initialMs: 1, multiplier: 1, maxMs: 1 } },
        }),
      });
      ok(engine, CREATE, { id: id(2), input: agent('hammer', [{ name: 'always_down' }], { maxToolCalls: 5 }) });
      const { tree, calls } = await run(engine, 'hammer', [
        [{ name: 'always_down', arguments: {} }],
        [{ name: 'always_down', arguments: {} }],
      ]);
      // The first call took every attempt the run had left; the second is one too many.
      expect(ok(engine, ATTEMPTS, { e: calls[0].executionId }).actions.execution.invocations).toHaveLength(5);
      expect(calls[0]).toMatchObject({ status: 'FAILED', attempt: 5 });
      expect(tree).toMatchObject({ status: 'FAILED', error: { code: 'LIMIT_EXCEEDED' } });
      expect(tree.error.message).toContain('asked for tool call 6; its maxToolCalls is 5');
      expect(ranOf(engine, id(1))).toBe(1);
    } finally {
      engine.close();
      await model.close();
    }
  });

  it('is bounded by agentToolRetryWaitMsMax: a retry that would wait past it is not made', async () => {
    const { engine, model } = await fixture({ agentToolRetryWaitMsMax: 120 });
    try {
      const down = (name: string, initialMs: number, n: number) =>
        ok(engine, CREATE, {
          id: id(n),
          input: tool(name, "function run() { fail('down', 'later'); }", {
            execution: { maxAttempts: 10, retryIf: 'true', backoff: { initialMs, multiplier: 1, maxMs: initialMs } },
          }),
        });
      // Waits of 40-50 ms: two fit in 120 ms, a third does not. A wait of a minute: none does.
      down('short_waits', 50, 1);
      down('long_wait', 60_000, 2);
      ok(engine, CREATE, { id: id(3), input: agent('patient', [{ name: 'short_waits' }, { name: 'long_wait' }]) });
      const started = Date.now();
      const { tree, calls } = await run(engine, 'patient', [
        [
          { name: 'short_waits', arguments: {} },
          { name: 'long_wait', arguments: {} },
        ],
      ]);
      expect(Date.now() - started).toBeLessThan(15_000);
      expect(tree.status).toBe('SUCCEEDED');
      expect(calls.map((c: any) => [c.actionName, c.attempt])).toEqual([
        ['short_waits', 3],
        ['long_wait', 1],
      ]);
    } finally {
      engine.close();
      await model.close();
    }
  });

  it('a denial is never retried, whatever retryIf says', async () => {
    const { engine, model } = await fixture();
    try {
      ok(engine, CREATE, {
        id: id(1),
        input: tool(
          'sneaky_write',
          'function run() { return graphql(\'mutation { createJournal(input: {journalId: "00000000-0000-4000-8000-0000000000aa", name: "x"}) { journalId } }\'); }',
          { execution: { maxAttempts: 5, retryIf: 'true', backoff: { initialMs: 1, multiplier: 1, maxMs: 1 } } },
        ),
      });
      ok(engine, CREATE, { id: id(2), input: agent('writer', [{ name: 'sneaky_write' }]) });
      const { calls } = await run(engine, 'writer', [[{ name: 'sneaky_write', arguments: {} }]]);
      expect(calls[0]).toMatchObject({ status: 'FAILED', attempt: 1, error: { code: 'ACCESS_DENIED' } });
    } finally {
      engine.close();
      await model.close();
    }
  });
});
