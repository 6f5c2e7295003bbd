// A provider list per model: config.fallback, tried in turn when the one before answers
// MODEL_UNAVAILABLE (and only then), each try recorded under the run. Two scripted model servers
// over real HTTP stand in for two providers; a user creates and starts the actions over GraphQL on a
// real HTTP server.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ScriptedModel, startScriptedModel } from '../../examples/scripted-model/server.mjs';
import type { Engine } from '../../src/engine.js';
import { id } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

const KEY = 'tly_fallback0123456789abcdef0123456789abcd';
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const START = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { status } } }`;
const TREE = `query($e: UUID!) { actions { execution(executionId: $e) { status output error { code message }
  children { kind status error { code message } model { provider model httpAttempts } } } } }`;
const NAMES = `{ actions { actions(first: 100) { nodes { name } } } }`;

const UP = [() => ({ text: 'up' })];
const DOWN = [() => ({ status: 503, text: 'overloaded' })];
const REFUSES = [() => ({ status: 400, text: 'bad request' })];

describe('config.fallback: a provider list per model', () => {
  let server: Awaited<ReturnType<typeof startServer>>;
  let engine: Engine;
  let primary: ScriptedModel;
  let backup: ScriptedModel;
  let seq = 0;

  async function gql(query: string, variables: Record<string, unknown>) {
    const response = await fetch(server.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ query, variables }),
    });
    return (await response.json()) as { data?: any; errors?: Array<{ message: string; extensions: any }> };
  }

  async function run(name: string) {
    const e = id(`9${String(++seq).padStart(5, '0')}`);
    const started = await gql(START, { n: name, e, i: { m: 'hello' } });
    expect(started.errors).toBeUndefined();
    const worker = engine.createWorker();
    for (const until = Date.now() + 20_000; Date.now() < until; await new Promise((r) => setTimeout(r, 5))) {
      await worker.drainAll();
      const { status } = (await gql(TREE, { e })).data.actions.execution;
      if (status === 'SUCCEEDED' || status === 'FAILED') break;
    }
    return (await gql(TREE, { e })).data.actions.execution;
  }

  const asked = () => [primary.requests.length, backup.requests.length];

  function agent(name: string, config: Record<string, unknown>, kind = 'agent') {
    return {
      name,
      kind,
      config: { provider: 'primary', model: 'p1', prompt: '{{m}}', ...config },
      tool: {
        description: name,
        inputSchema: { type: 'object', properties: { m: { type: 'string' } }, required: ['m'] },
      },
      policies: [],
      execution: { maxAttempts: 1 },
    };
  }

  beforeAll(async () => {
    primary = await startScriptedModel({ rules: UP });
    backup = await startScriptedModel({ rules: UP });
    server = await startServer(KEY, {
      limits: { modelFallbacksMax: 2 },
      providers: [
        { name: 'primary', format: 'openai', baseUrl: `${primary.url}/v1`, models: ['p1', 'p2'], maxRetries: 0 },
        { name: 'backup', format: 'anthropic', baseUrl: backup.url, models: ['b1'], maxRetries: 0 },
      ],
    });
    engine = server.engine;
    const made = await gql(
      `mutation($a: ActionInput!, $b: ActionInput!) { actions { a: createAction(id: "${id(1)}", input: $a) { version } b: createAction(id: "${id(2)}", input: $b) { version } } }`,
      {
        a: agent('resilient', { fallback: [{ provider: 'backup', model: 'b1' }] }),
        b: agent(
          'one_call',
          {
            fallback: [
              { provider: 'primary', model: 'p2' },
              { provider: 'backup', model: 'b1' },
            ],
          },
          'model',
        ),
      },
    );
    expect(made.errors).toBeUndefined();
  });
  afterAll(async () => {
    await server?.stop();
    await primary?.close();
    await backup?.close();
  });

  it('the primary unavailable, the next in the list answers: both tries recorded, the turn names who answered', async () => {
    primary.setRules(DOWN);
    backup.setRules(UP);
    const tree = await run('resilient');
    expect(tree).toMatchObject({ status: 'SUCCEEDED', output: { text: 'up' } });
    expect(tree.children.map((c: any) => [c.status, c.error?.code ?? null, c.model.provider, c.model.model])).toEqual([
      ['FAILED', 'MODEL_UNAVAILABLE', 'primary', 'p1'],
      ['SUCCEEDED', null, 'backup', 'b1'],
    ]);
  });

  it('a model run goes down its whole list, in order', async () => {
    primary.setRules(DOWN);
    backup.setRules(UP);
    const tree = await run('one_call');
    expect(tree).toMatchObject({ status: 'SUCCEEDED', output: { text: 'up' } });
    expect(tree.children.map((c: any) => `${c.status} ${c.model.provider}/${c.model.model}`)).toEqual([
      'FAILED primary/p1',
      'FAILED primary/p2',
      'SUCCEEDED backup/b1',
    ]);
  });

  it('no fallback when the primary answers, nor when it refuses the request (MODEL_ERROR)', async () => {
    primary.setRules(UP);
    let before = asked();
    expect((await run('resilient')).status).toBe('SUCCEEDED');
    expect([asked()[0]! - before[0]!, asked()[1]! - before[1]!]).toEqual([1, 0]);
    primary.setRules(REFUSES);
    before = asked();
    const tree = await run('resilient');
    expect(tree).toMatchObject({ status: 'FAILED', error: { code: 'MODEL_ERROR' } });
    expect([asked()[0]! - before[0]!, asked()[1]! - before[1]!]).toEqual([1, 0]);
  });

  it('every one unavailable: the run fails MODEL_UNAVAILABLE, each try recorded', async () => {
    primary.setRules(DOWN);
    backup.setRules(DOWN);
    const tree = await run('resilient');
    expect(tree).toMatchObject({ status: 'FAILED', error: { code: 'MODEL_UNAVAILABLE' } });
    expect(tree.children.map((c: any) => `${c.status} ${c.model.provider}`)).toEqual([
      'FAILED primary',
      'FAILED backup',
    ]);
  });

  it('a fallback is checked when the version is made, against the configured providers and the limit; nothing is made', async () => {
    const refused = async (fallback: unknown) => {
      const result = await gql(CREATE, { id: id(50), input: agent('bad_fallback', { fallback }) });
      expect(result.errors, JSON.stringify(fallback)).toBeDefined();
      return { code: result.errors![0]!.extensions.code, message: result.errors![0]!.message };
    };
    expect(await refused([{ provider: 'nope', model: 'x' }])).toEqual({
      code: 'BAD_REQUEST',
      message: 'config.fallback[0].provider "nope" is not a configured provider; configured: primary, backup',
    });
    expect(await refused([{ provider: 'backup', model: 'gpt-9' }])).toEqual({
      code: 'BAD_REQUEST',
      message: 'model "gpt-9" is not offered by provider "backup"',
    });
    expect(
      await refused([
        { provider: 'backup', model: 'b1' },
        { provider: 'primary', model: 'p2' },
        { provider: 'primary', model: 'p1' },
      ]),
    ).toMatchObject({
      code: 'LIMIT_EXCEEDED',
      message: 'config.fallback has 3 entries; modelFallbacksMax is 2',
    });
    expect(await refused([{ provider: 'primary', model: 'p1' }])).toMatchObject({
      code: 'BAD_REQUEST',
      message: 'config.fallback[0] (primary, p1) is already in the chain',
    });
    expect(await refused([{ provider: 'backup', model: 'b1', apiKey: 'sk-x' }])).toMatchObject({
      code: 'BAD_REQUEST',
      message: 'config.fallback[0].apiKey is not a field of a fallback',
    });
    expect(await refused({ provider: 'backup' })).toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining('config.fallback must be a list'),
    });
    const names = (await gql(NAMES, {})).data.actions.actions.nodes.map((a: any) => a.name);
    expect(names).not.toContain('bad_fallback');
  });
});
