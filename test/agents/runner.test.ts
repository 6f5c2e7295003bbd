import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deploy } from '../../src/deploy/deploy.js';
import { readProject } from '../../src/deploy/project.js';
import type { Engine } from '../../src/engine.js';
import {
  type Rule,
  type ScriptedModel,
  startScriptedModel,
  toolResults,
} from '../../examples/scripted-model/server.mjs';
import { ServerMetrics } from '../../src/server/metrics.js';
import { fails, newEngine, ok } from '../helpers/engine.js';

const BANK = join(import.meta.dirname, '..', '..', 'examples', 'bank');
const ALICE = 'b0000000-0000-4000-8000-000000000011';
const BOB = 'b0000000-0000-4000-8000-000000000012';
const tx = (n: number) => `c0000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
const KEY = 'sk-test-teller-0123456789';

const START = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { executionId status kind } } }`;
const TREE = `query($e: UUID!) { actions { execution(executionId: $e) { status kind output error { code message hint } attempt
  children { kind actionName status input output error { code message hint } model { provider model inputTokens outputTokens latencyMs httpAttempts stopReason }
    children { kind actionName actionVersion status input output error { code message hint } } } } } }`;
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { actionId version } } }`;
const UPDATE = `mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) { version } } }`;
const TELLER = 'b0000000-0000-4000-8000-0000000000a7';

let seq = 100;
async function run(engine: Engine, name: string, input: unknown, principal = 'operator') {
  const e = tx(++seq);
  ok(engine, START, { n: name, e, i: input }, principal);
  const worker = engine.createWorker();
  // Until it ends: a failed attempt may be retried after a (short) backoff.
  for (const until = Date.now() + 10_000; Date.now() < until; await new Promise((r) => setTimeout(r, 5))) {
    await worker.drainAll();
    const { status } = ok(engine, TREE, { e }).actions.execution;
    if (status === 'SUCCEEDED' || status === 'FAILED') break;
  }
  return ok(engine, TREE, { e }).actions.execution;
}

function transactions(engine: Engine): number {
  return (engine.db.prepare('SELECT count(*) AS n FROM transactions').get() as { n: number }).n;
}

function available(engine: Engine, account: string): string {
  return ok(engine, `{ balance(accountId: "${account}") { available(layer: PENDING) { normalBalance { units } } } }`)
    .balance.available.normalBalance.units;
}

/** The bank deployed into a fresh database, behind a scripted model of the given wire format. */
async function bank(
  format: 'openai' | 'anthropic',
  rules?: Rule[],
  extra: Record<string, unknown> = {},
  limits: Record<string, number> = {},
) {
  const teller = ((await import(join(BANK, 'model', 'teller.mjs'))) as { default: Rule[] }).default;
  const model = await startScriptedModel({ rules: rules ?? teller, apiKey: KEY });
  process.env.TEST_TELLER_KEY = KEY;
  const engine = await newEngine({
    path: join(mkdtempSync(join(tmpdir(), 'tally-teller-')), 'bank.db'),
    limits,
    providers: [
      {
        name: 'local',
        format,
        baseUrl: format === 'openai' ? `${model.url}/v1` : model.url,
        models: ['scripted-teller', 'other'],
        apiKeyEnv: 'TEST_TELLER_KEY',
        ...extra,
      },
    ],
  });
  await deploy(readProject(BANK), {
    describe: 'in-process',
    request: async (q, v) => engine.graphql(q, v ?? null) as never,
    close: async () => {},
  });
  ok(
    engine,
    'mutation($a: TransactionInput!, $b: TransactionInput!) { a: postTransaction(input: $a) { transactionId } b: postTransaction(input: $b) { transactionId } }',
    {
      a: { transactionId: tx(1), tranCode: 'DEPOSIT', params: { account: ALICE, amount: '100' } },
      b: { transactionId: tx(2), tranCode: 'DEPOSIT', params: { account: BOB, amount: '50' } },
    },
  );
  return { engine, model, teller };
}

for (const format of ['openai', 'anthropic'] as const) {
  describe(`the bank's teller agent, over the ${format} wire format`, () => {
    let engine: Engine;
    let model: ScriptedModel;
    beforeAll(async () => {
      ({ engine, model } = await bank(format));
    });
    afterAll(async () => {
      engine.close();
      await model.close();
    });

    it('moves 25 from Alice to Bob exactly once and answers with both balances; the tree shows every turn and the calls each asked for', async () => {
      const before = transactions(engine);
      const e = tx(++seq);
      expect(
        ok(
          engine,
          START,
          {
            n: 'teller',
            e,
            i: { account_id: ALICE, message: 'move 25 from Alice to Bob, then tell me both balances' },
          },
          'operator',
        ).actions.startAction,
      ).toMatchObject({ status: 'QUEUED', kind: 'AGENT' });
      await engine.createWorker().drainAll();
      const agent = ok(engine, TREE, { e }).actions.execution;
      expect(agent).toMatchObject({
        status: 'SUCCEEDED',
        kind: 'AGENT',
        attempt: 1,
        output: { text: 'Moved 25 from Alice to Bob. Alice now has 75.00 available, Bob has 75.00.' },
      });
      expect(
        agent.children.map((c: any) => [
          c.kind,
          c.status,
          c.children.map((t: any) => `${t.actionName}@${t.actionVersion} ${t.status}`),
        ]),
      ).toEqual([
        ['MODEL', 'SUCCEEDED', ['balance@1 SUCCEEDED']],
        ['MODEL', 'SUCCEEDED', ['transfer@1 SUCCEEDED']],
        ['MODEL', 'SUCCEEDED', []],
      ]);
      const [first, second] = agent.children;
      expect(first.model).toMatchObject({
        provider: 'local',
        model: 'scripted-teller',
        httpAttempts: 1,
        stopReason: format === 'openai' ? 'tool_calls' : 'tool_use',
      });
      expect(first.model.inputTokens).toBeGreaterThan(0);
      expect(first.model.outputTokens).toBeGreaterThan(0);
      expect(first.output.toolCalls[0]).toMatchObject({ name: 'balance' });
      // The sender is fixed by the reference: the model never sent it.
      expect(second.children[0].input).toMatchObject({ from: ALICE, to: BOB, amount: '25' });
      expect(transactions(engine)).toBe(before + 1);
      expect([available(engine, ALICE), available(engine, BOB)]).toEqual(['75', '75']);
      // Every request carried the key the operator named, and the model saw transfer without `from`.
      const seen = model.requests.at(-1)!;
      expect(seen.tools.map((t) => t.name)).toEqual(['balance', 'transfer', 'load_skill']);
      // The teller declares the transfers skill: the model sees its name and description, and can load it.
      expect(seen.system).toContain('- transfers: ');
      expect(Object.keys((seen.tools[1]!.inputSchema as any).properties)).toEqual([
        'transaction_id',
        'to',
        'amount',
        'fee',
      ]);
      expect((seen.tools[1]!.inputSchema as any).required).toEqual(['transaction_id', 'to', 'amount']);
      expect(seen.system).toContain('bank teller');
      // The key is in no record.
      const dump = JSON.stringify(engine.db.prepare('SELECT * FROM executions').all());
      expect(dump).not.toContain(KEY);
    });

    it('/metrics counts each model call, its tokens and its latency by provider and model', async () => {
      const metrics = new ServerMetrics(engine);
      await run(engine, 'teller', { account_id: ALICE, message: 'move 1 from Alice to Bob' });
      const text = await metrics.registry.metrics();
      expect(text).toContain('tally_model_calls_total{provider="local",model="scripted-teller",outcome="ok"} 3');
      expect(text).toMatch(
        /tally_model_tokens_total\{provider="local",model="scripted-teller",direction="input"\} [1-9]\d*/,
      );
      expect(text).toMatch(
        /tally_model_tokens_total\{provider="local",model="scripted-teller",direction="output"\} [1-9]\d*/,
      );
      expect(text).toContain('tally_model_call_duration_seconds_count{provider="local",model="scripted-teller"} 3');
    });

    it('a run started again with the same executionId and input is the same run: nothing runs twice', async () => {
      const e = tx(++seq);
      const input = { account_id: ALICE, message: 'move 5 from Alice to Bob' };
      ok(engine, START, { n: 'teller', e, i: input }, 'operator');
      await engine.createWorker().drainAll();
      const before = transactions(engine);
      const requests = model.requests.length;
      expect(ok(engine, START, { n: 'teller', e, i: input }, 'operator').actions.startAction.status).toBe('SUCCEEDED');
      await engine.createWorker().drainAll();
      expect(transactions(engine)).toBe(before);
      expect(model.requests.length).toBe(requests);
    });
  });
}

describe('an agent narrows authority like any tool', () => {
  let engine: Engine;
  let model: ScriptedModel;
  let teller: Rule[];
  beforeAll(async () => {
    ({ engine, model, teller } = await bank('openai'));
  });
  afterAll(async () => {
    engine.close();
    await model.close();
  });

  it('an agent whose policies only read cannot transfer, although the starter can: the model is told, the ledger is untouched', async () => {
    ok(engine, UPDATE, {
      id: TELLER,
      input: {
        policies: [
          { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
          { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
        ],
      },
    });
    try {
      const before = transactions(engine);
      // The operator itself may transfer.
      expect(
        ok(
          engine,
          `mutation { actions { invokeAction(name: "transfer", input: {executionId: "${tx(++seq)}", actionVersion: 1, input: {transaction_id: "${tx(++seq)}", from: "${ALICE}", to: "${BOB}", amount: "1"}}) { status } } }`,
          {},
          'operator',
        ).actions.invokeAction.status,
      ).toBe('SUCCEEDED');
      const agent = await run(engine, 'teller', { account_id: ALICE, message: 'move 25 from Alice to Bob' });
      expect(agent.status).toBe('SUCCEEDED');
      const call = agent.children[1].children[0];
      expect(call).toMatchObject({ actionName: 'transfer', status: 'FAILED', error: { code: 'ACCESS_DENIED' } });
      expect(call.error.message).toContain('teller');
      expect(agent.output.text).toMatch(/^I could not do that: /);
      expect(transactions(engine)).toBe(before + 1);
    } finally {
      ok(
        engine,
        `mutation { actions { lockAction(id: "${TELLER}", version: 2) { version } activateAction(id: "${TELLER}", version: 1) { version } } }`,
      );
    }
  });

  it('a starter without the right to call transfer cannot reach it through the agent', async () => {
    ok(
      engine,
      `mutation($p: [PolicyInput!]!) { auth { createClient(input: {principal: "kiosk", name: "Kiosk", policies: $p}) { apiKey } } }`,
      {
        p: [
          { effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] },
          { effect: 'ALLOW', actions: ['INSERT', 'UPDATE'], resources: ['financial.*'] },
          {
            effect: 'ALLOW',
            actions: ['INSERT'],
            resources: ['actions.Execution'],
            assertions: { teller_or_balance: "context.document.action in ['teller', 'balance']" },
          },
        ],
      },
    );
    const before = transactions(engine);
    const agent = await run(engine, 'teller', { account_id: ALICE, message: 'move 25 from Alice to Bob' }, 'kiosk');
    expect(agent.children[0].children[0]).toMatchObject({ actionName: 'balance', status: 'SUCCEEDED' });
    expect(agent.children[1].children[0]).toMatchObject({
      actionName: 'transfer',
      status: 'FAILED',
      error: { code: 'ACCESS_DENIED' },
    });
    expect(agent.children[1].children[0].error.message).toContain('client kiosk');
    expect(transactions(engine)).toBe(before);
  });

  it('the model cannot override a fixed input: a `from` it sends is replaced by the customer’s account', async () => {
    model.setRules([
      (request) =>
        toolResults(request).length === 0 && request.turn === 1
          ? {
              toolCalls: [
                { name: 'transfer', arguments: { transaction_id: tx(7777), from: BOB, to: BOB, amount: '3' } },
              ],
            }
          : undefined,
      (request) => (toolResults(request).length > 0 ? { text: 'ok' } : undefined),
    ]);
    try {
      const [alice, bob] = [Number(available(engine, ALICE)), Number(available(engine, BOB))];
      const agent = await run(engine, 'teller', { account_id: ALICE, message: 'take 3 from Bob' });
      const call = agent.children[0].children[0];
      expect(call).toMatchObject({ actionName: 'transfer', status: 'SUCCEEDED', input: { from: ALICE, to: BOB } });
      // The money came out of the customer's wallet, not the one the model named.
      expect([Number(available(engine, ALICE)), Number(available(engine, BOB))]).toEqual([alice - 3, bob + 3]);
    } finally {
      model.setRules(teller);
    }
  });
});

describe('what a model gets wrong is recorded and recoverable, or fails as documented', () => {
  let engine: Engine;
  let model: ScriptedModel;
  beforeAll(async () => {
    ({ engine, model } = await bank('openai', [], { structuredOutput: false, timeoutMs: 300, maxRetries: 0 }));
  });
  afterAll(async () => {
    engine.close();
    await model.close();
  });

  it('a tool name the model invents gets a recoverable result listing the tools, recorded and counted; its name is cut to 64 characters', async () => {
    const long = `x${'y'.repeat(200)}`;
    model.setRules([
      (request) => (request.turn === 1 ? { toolCalls: [{ name: long, arguments: {} }] } : undefined),
      (request) => ({ text: `heard: ${toolResults(request)[0]?.content}` }),
    ]);
    const agent = await run(engine, 'teller', { account_id: ALICE, message: 'hello' });
    expect(agent.status).toBe('SUCCEEDED');
    const call = agent.children[0].children[0];
    expect(call).toMatchObject({ kind: 'TOOL', status: 'FAILED', error: { code: 'NOT_FOUND' } });
    expect(call.actionName).toHaveLength(64);
    expect(call.error.message).toContain('the tools you can call are: balance, transfer');
    expect(call.error.message).not.toContain('y'.repeat(64));
    expect(agent.output.text).toContain('NOT_FOUND');

    // Invented calls count toward maxToolCalls: the teller allows 6.
    model.setRules([
      () => ({
        toolCalls: [
          { name: 'guess', arguments: {} },
          { name: 'guess_again', arguments: {} },
        ],
      }),
    ]);
    const greedy = await run(engine, 'teller', { account_id: ALICE, message: 'hello' });
    expect(greedy).toMatchObject({ status: 'FAILED', error: { code: 'LIMIT_EXCEEDED' } });
    expect(greedy.error.message).toContain('maxToolCalls is 6');
    expect(greedy.children.flatMap((t: any) => t.children)).toHaveLength(6);
  });

  it('arguments that are not a JSON object get an INPUT_INVALID result the model can correct', async () => {
    model.setRules([
      (request) => (request.turn === 1 ? { toolCalls: [{ name: 'balance', arguments: '{"code": "bob"' }] } : undefined),
      (request) => (request.turn === 2 ? { toolCalls: [{ name: 'balance', arguments: { code: 'bob' } }] } : undefined),
      (request) => ({ text: toolResults(request)[0]!.content }),
    ]);
    const agent = await run(engine, 'teller', { account_id: ALICE, message: 'bob?' });
    expect(agent.children[0].children[0]).toMatchObject({ status: 'FAILED', error: { code: 'INPUT_INVALID' } });
    expect(agent.children[1].children[0]).toMatchObject({ status: 'SUCCEEDED', output: { code: 'bob' } });
    expect(JSON.parse(agent.output.text)).toMatchObject({ code: 'bob', account_id: BOB });
  });

  it('a model tool whose answer is not valid JSON is asked once more; twice wrong, it fails OUTPUT_INVALID', async () => {
    ok(engine, CREATE, {
      id: tx(900),
      input: {
        name: 'classify',
        kind: 'model',
        config: { provider: 'local', model: 'other', instructions: 'Classify the memo.', prompt: 'Memo: {{memo}}' },
        tool: {
          description: 'Classify a payment memo.',
          inputSchema: { type: 'object', properties: { memo: { type: 'string' } }, required: ['memo'] },
          outputSchema: {
            type: 'object',
            properties: { category: { enum: ['rent', 'food', 'other'] } },
            required: ['category'],
            additionalProperties: false,
          },
        },
        execution: { maxAttempts: 1 },
      },
    });
    model.setRules([
      (request) =>
        request.turn === 1 ? { text: 'It is rent, I think.' } : { text: '```json\n{"category": "rent"}\n```' },
    ]);
    const fixed = await run(engine, 'classify', { memo: 'November rent' });
    expect(fixed).toMatchObject({ status: 'SUCCEEDED', kind: 'MODEL', output: { category: 'rent' } });
    expect(fixed.children).toHaveLength(2);
    expect(model.requests.at(-2)!.messages[0]).toEqual({ role: 'user', text: 'Memo: November rent' });
    // Without structured output, the schema is in the instructions, and the correction says what was wrong.
    expect(model.requests.at(-2)!.system).toContain('"category"');
    expect((model.requests.at(-1)!.messages.at(-1) as { text: string }).text).toContain('not JSON');

    model.setRules([() => ({ text: '{"category": "cars"}' })]);
    const wrong = await run(engine, 'classify', { memo: 'new car' });
    expect(wrong).toMatchObject({ status: 'FAILED', error: { code: 'OUTPUT_INVALID' } });
    expect(wrong.error.message).toContain('/category');
    expect(wrong.children).toHaveLength(2);
  });

  it('a model that does not answer in time: the turn is recorded as TIMEOUT, the run retried from that turn, then FAILED', async () => {
    ok(engine, UPDATE, {
      id: TELLER,
      input: { execution: { maxAttempts: 2, backoff: { initialMs: 1, multiplier: 1, maxMs: 1 } } },
    });
    model.setRules([() => ({ delayMs: 1500, text: 'too late' })]);
    const agent = await run(engine, 'teller', { account_id: ALICE, message: 'hello' });
    expect(agent).toMatchObject({ status: 'FAILED', attempt: 2, error: { code: 'TIMEOUT' } });
    expect(agent.error.message).toContain('300 ms');
    expect(agent.children.map((c: any) => [c.kind, c.status, c.error?.code])).toEqual([
      ['MODEL', 'FAILED', 'TIMEOUT'],
      ['MODEL', 'FAILED', 'TIMEOUT'],
    ]);
  });
});

describe('models and agents never run inside a transaction', () => {
  let engine: Engine;
  let model: ScriptedModel;
  beforeAll(async () => {
    ({ engine, model } = await bank('anthropic'));
  });
  afterAll(async () => {
    engine.close();
    await model.close();
  });

  it('invokeAction of an agent is refused with a hint naming startAction, and records nothing', () => {
    const before = (engine.db.prepare('SELECT count(*) AS n FROM executions').get() as { n: number }).n;
    const refused = fails(
      engine,
      `mutation { actions { invokeAction(name: "teller", input: {executionId: "${tx(++seq)}", actionVersion: 1, input: {account_id: "${ALICE}", message: "hi"}}) { status } } }`,
      {},
      'operator',
    );
    expect(refused.code).toBe('BAD_REQUEST');
    expect(refused.message).toContain('teller is an agent');
    expect(refused.hint).toContain('startAction');
    expect((engine.db.prepare('SELECT count(*) AS n FROM executions').get() as { n: number }).n).toBe(before);
  });

  it('a program calling an agent gets a FAILED call naming startAction', () => {
    ok(engine, CREATE, {
      id: tx(901),
      input: {
        name: 'calls_teller',
        config: {
          runtime: 'javascript',
          src: 'function run(event) { const r = tools.teller({account_id: event.data.a, message: "hi"}, {check: false}); return {ok: r.ok, code: r.error && r.error.code, hint: r.error && r.error.hint}; }',
        },
        tools: [{ name: 'teller', version: 1 }],
        policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
      },
    });
    const out = ok(
      engine,
      `mutation { actions { invokeAction(name: "calls_teller", input: {executionId: "${tx(++seq)}", actionVersion: 1, input: {a: "${ALICE}"}}) { status output } } }`,
    ).actions.invokeAction;
    expect(out).toMatchObject({ status: 'SUCCEEDED', output: { ok: false, code: 'BAD_REQUEST' } });
    expect(out.output.hint).toContain('startAction');
  });

  it('a model or agent config is checked when the version is made: provider, model, fields, bounds', () => {
    const make = (config: Record<string, unknown>, kind = 'agent') =>
      fails(engine, CREATE, { id: tx(++seq), input: { name: `a${seq}`, kind, config } });
    expect(make({ provider: 'nope', model: 'scripted-teller' }).message).toContain(
      'config.provider "nope" is not a configured provider; configured: local',
    );
    expect(make({ provider: 'local', model: 'gpt-9' }).message).toContain('gpt-9');
    const key = make({ provider: 'local', model: 'other', apiKey: 'sk-123' });
    expect(key.message).toContain('config.apiKey is not a field');
    expect(key.hint).toContain('never in an action');
    expect(make({ provider: 'local', model: 'other', maxTurns: 33 })).toMatchObject({ code: 'LIMIT_EXCEEDED' });
    expect(make({ provider: 'local', model: 'other', maxToolCalls: 65 }).message).toContain('agentToolCallsMax');
    expect(make({ provider: 'local', model: 'other', runTimeoutMs: 15 * 60_000 + 1 }).message).toContain(
      'agentRunMsMax',
    );
    expect(make({ provider: 'local', model: 'other', prompt: 'hi {{ not a path }}' }).message).toContain('placeholder');
    expect(make({ provider: 'local', model: 'other', maxTurns: 2 }, 'model').message).toContain(
      'config.maxTurns is not a field of a model config',
    );
  });
});

describe('the agent limits, each crossed', () => {
  it('maxTurns (at most agentTurnsMax): an agent that keeps calling tools fails LIMIT_EXCEEDED after its last turn', async () => {
    const { engine, model } = await bank('openai', [
      () => ({ toolCalls: [{ name: 'balance', arguments: { code: 'bob' } }] }),
    ]);
    try {
      ok(engine, UPDATE, {
        id: TELLER,
        input: {
          config: { provider: 'local', model: 'scripted-teller', prompt: '{{message}}', maxTurns: 3, maxToolCalls: 10 },
        },
      });
      expect(
        fails(engine, UPDATE, {
          id: TELLER,
          input: { config: { provider: 'local', model: 'scripted-teller', maxTurns: 33 } },
        }).message,
      ).toContain('over 32 (agentTurnsMax)');
      const agent = await run(engine, 'teller', { account_id: ALICE, message: 'loop' });
      expect(agent).toMatchObject({ status: 'FAILED', error: { code: 'LIMIT_EXCEEDED' } });
      expect(agent.error.message).toContain('maxTurns (3)');
      expect(agent.children).toHaveLength(3);
    } finally {
      engine.close();
      await model.close();
    }
  });

  it('runTimeoutMs: a run past its whole-run deadline fails TIMEOUT and is not retried', async () => {
    const { engine, model } = await bank('openai', [
      () => ({ delayMs: 400, toolCalls: [{ name: 'balance', arguments: { code: 'bob' } }] }),
    ]);
    try {
      ok(engine, UPDATE, {
        id: TELLER,
        input: { config: { provider: 'local', model: 'scripted-teller', prompt: '{{message}}', runTimeoutMs: 600 } },
      });
      const agent = await run(engine, 'teller', { account_id: ALICE, message: 'slow' });
      expect(agent).toMatchObject({ status: 'FAILED', attempt: 1, error: { code: 'TIMEOUT' } });
      expect(agent.error.message).toContain('whole-run deadline');
    } finally {
      engine.close();
      await model.close();
    }
  });

  it('agentConversationBytesMax: a conversation that grows past it fails the run before it is sent', async () => {
    const { engine, model } = await bank(
      'openai',
      [() => ({ toolCalls: [{ name: 'balance', arguments: { code: 'bob' } }] })],
      {},
      { agentConversationBytesMax: 700 },
    );
    try {
      const agent = await run(engine, 'teller', { account_id: ALICE, message: 'grow' });
      expect(agent).toMatchObject({ status: 'FAILED', error: { code: 'LIMIT_EXCEEDED' } });
      expect(agent.error.message).toContain('agentConversationBytesMax is 700');
    } finally {
      engine.close();
      await model.close();
    }
  });

  it('agentRunsConcurrentMax: one worker keeps at most that many runs in flight', async () => {
    let inFlight = 0;
    let most = 0;
    const { engine, model } = await bank(
      'openai',
      [
        async () => {
          inFlight++;
          most = Math.max(most, inFlight);
          await new Promise((r) => setTimeout(r, 50));
          inFlight--;
          return { text: 'done' };
        },
      ],
      {},
      { agentRunsConcurrentMax: 2 },
    );
    try {
      for (let i = 0; i < 6; i++)
        ok(engine, START, { n: 'teller', e: tx(5000 + i), i: { account_id: ALICE, message: `hi ${i}` } }, 'operator');
      await engine.createWorker().drainAll();
      const done = engine.db
        .prepare("SELECT count(*) AS n FROM executions WHERE kind = 'AGENT' AND status = 'SUCCEEDED'")
        .get() as { n: number };
      expect(done.n).toBe(6);
      expect(most).toBe(2);
    } finally {
      engine.close();
      await model.close();
    }
  });
});

const LIMIT_PER_CLIENT = 2;

describe('runs in the worker: fairness between clients, stopping, structured output', () => {
  it('the attacker: one client starting many slow runs holds at most agentRunsPerClientMax slots; another client’s run starts at once', async () => {
    const { engine, model } = await bank(
      'openai',
      [
        (request) =>
          request.messages.some((m) => m.role === 'user' && m.text.startsWith('slow'))
            ? { delayMs: 800, text: 'slow done' }
            : { text: 'quick done' },
      ],
      {},
      { agentRunsConcurrentMax: 4, agentRunsPerClientMax: LIMIT_PER_CLIENT },
    );
    try {
      ok(
        engine,
        `mutation($p: [PolicyInput!]!) { auth { createClient(input: {principal: "hog", name: "Hog", policies: $p}) { apiKey } } }`,
        {
          p: [
            { effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] },
            { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
          ],
        },
      );
      for (let i = 0; i < 8; i++)
        ok(engine, START, { n: 'teller', e: tx(6000 + i), i: { account_id: ALICE, message: `slow ${i}` } }, 'hog');
      ok(engine, START, { n: 'teller', e: tx(6100), i: { account_id: ALICE, message: 'quick' } }, 'operator');
      await engine.createWorker().drainAll();
      const rows = engine.db
        .prepare(
          "SELECT execution_id, principal, status, started, finished FROM executions WHERE kind = 'AGENT' ORDER BY execution_id",
        )
        .all() as Array<{ execution_id: string; principal: string; status: string; started: string; finished: string }>;
      expect(rows.every((r) => r.status === 'SUCCEEDED')).toBe(true);
      const victim = rows.find((r) => r.principal === 'operator')!;
      const hogStarts = rows
        .filter((r) => r.principal === 'hog')
        .map((r) => r.started)
        .sort();
      // Two of the hog's runs started first; its others waited for those, and the victim for none.
      expect(victim.finished < hogStarts[2]!).toBe(true);
      expect(hogStarts[1]! < hogStarts[2]!).toBe(true);
    } finally {
      engine.close();
      await model.close();
    }
  });

  it('a worker that stops gives its runs back (due at once, the attempt not counted), and another worker finishes them', async () => {
    let slow = true;
    const { engine, model } = await bank('openai', [
      () => (slow ? { delayMs: 3000, text: 'late' } : { text: 'on time' }),
    ]);
    try {
      const e = tx(7000);
      ok(engine, START, { n: 'teller', e, i: { account_id: ALICE, message: 'hello' } }, 'operator');
      const worker = engine.createWorker({ pollMs: 10 });
      worker.start();
      for (let i = 0; i < 200 && ok(engine, TREE, { e }).actions.execution.status !== 'RUNNING'; i++)
        await new Promise((r) => setTimeout(r, 10));
      expect(worker.runsInFlight).toBe(1);
      await worker.stop();
      expect(ok(engine, TREE, { e }).actions.execution).toMatchObject({ status: 'QUEUED', attempt: 0, children: [] });
      slow = false;
      await engine.createWorker().drainAll();
      expect(ok(engine, TREE, { e }).actions.execution).toMatchObject({
        status: 'SUCCEEDED',
        attempt: 1,
        output: { text: 'on time' },
      });
    } finally {
      engine.close();
      await model.close();
    }
  });

  it('a model tool over the anthropic format answers through the forced respond tool, validated against its schema', async () => {
    const { engine, model } = await bank('anthropic', [
      (request) => ({ json: { category: request.forcedTool === 'respond' ? 'rent' : 'other' } }),
    ]);
    try {
      ok(engine, CREATE, {
        id: tx(902),
        input: {
          name: 'classify',
          kind: 'model',
          config: { provider: 'local', model: 'other', prompt: 'Memo: {{memo}}' },
          tool: {
            description: 'Classify a payment memo.',
            inputSchema: { type: 'object', properties: { memo: { type: 'string' } }, required: ['memo'] },
            outputSchema: {
              type: 'object',
              properties: { category: { enum: ['rent', 'food', 'other'] } },
              required: ['category'],
            },
          },
        },
      });
      const run1 = await run(engine, 'classify', { memo: 'November rent' });
      expect(run1).toMatchObject({ status: 'SUCCEEDED', kind: 'MODEL', output: { category: 'rent' } });
      expect(model.requests.at(-1)!.responseSchema).toMatchObject({
        properties: { category: { enum: ['rent', 'food', 'other'] } },
      });
    } finally {
      engine.close();
      await model.close();
    }
  });
});

describe('an agent calls a model tool and another agent, each a run of its own in the tree', () => {
  it('boss → classify (a model) and teller (an agent): one posting, every turn recorded where it ran, and a stopped worker resumes the nested run', async () => {
    const teller = ((await import(join(BANK, 'model', 'teller.mjs'))) as { default: Rule[] }).default;
    let slowTeller = false;
    const boss: Rule = (request) => {
      const results = toolResults(request);
      if (request.turn === 1) return { toolCalls: [{ name: 'classify', arguments: { memo: 'November rent' } }] };
      if (request.turn === 2)
        return { toolCalls: [{ name: 'teller', arguments: { message: 'move 5 from Alice to Bob' } }] };
      return { text: `done: ${results.map((r) => r.content).join(' | ')}` };
    };
    const { engine, model } = await bank('openai', [
      (request) => (request.system?.includes('Classify') ? { json: { category: 'rent' } } : undefined),
      async (request) => {
        if (!request.system?.includes('bank teller')) return undefined;
        if (slowTeller && request.turn === 2) await new Promise((r) => setTimeout(r, 1500));
        for (const rule of teller) {
          const reply = await rule(request);
          if (reply) return reply;
        }
        return undefined;
      },
      boss,
    ]);
    try {
      ok(engine, CREATE, {
        id: tx(903),
        input: {
          name: 'classify',
          kind: 'model',
          config: { provider: 'local', model: 'other', instructions: 'Classify the memo.', prompt: 'Memo: {{memo}}' },
          tool: {
            description: 'Classify a payment memo.',
            inputSchema: { type: 'object', properties: { memo: { type: 'string' } }, required: ['memo'] },
            outputSchema: { type: 'object', properties: { category: { type: 'string' } }, required: ['category'] },
          },
        },
      });
      ok(engine, CREATE, {
        id: tx(904),
        input: {
          name: 'boss',
          kind: 'agent',
          config: { provider: 'local', model: 'other', instructions: 'You run the back office.' },
          tool: {
            description: 'Back office.',
            inputSchema: { type: 'object', properties: { account_id: { type: 'string' } } },
          },
          tools: [
            { name: 'classify', version: 1 },
            { name: 'teller', version: 1, input: { account_id: 'execution.input.account_id' } },
          ],
          policies: [
            { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
            { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
          ],
          execution: { maxAttempts: 5, backoff: { initialMs: 1, multiplier: 1, maxMs: 1 } },
        },
      });
      const before = transactions(engine);
      const e = tx(++seq);
      slowTeller = true;
      ok(engine, START, { n: 'boss', e, i: { account_id: ALICE } }, 'operator');
      // Stop the worker while the teller (an agent inside the boss's run) waits on its second turn.
      const worker = engine.createWorker({ pollMs: 10 });
      worker.start();
      const tellerRow = () =>
        engine.db
          .prepare("SELECT status FROM executions WHERE kind = 'AGENT' AND action_name = 'teller' AND root_id = ?")
          .get(e) as { status: string } | undefined;
      for (
        let i = 0;
        i < 300 && !(tellerRow() && model.requests.filter((r) => r.system?.includes('bank teller')).length >= 2);
        i++
      )
        await new Promise((r) => setTimeout(r, 10));
      await worker.stop();
      expect(tellerRow()).toEqual({ status: 'RUNNING' });
      slowTeller = false;
      const done = await (async () => {
        const w = engine.createWorker();
        for (let i = 0; i < 100; i++) {
          await w.drainAll();
          const tree = ok(engine, TREE, { e }).actions.execution;
          if (tree.status === 'SUCCEEDED' || tree.status === 'FAILED') return tree;
          await new Promise((r) => setTimeout(r, 10));
        }
        return ok(engine, TREE, { e }).actions.execution;
      })();
      expect(done).toMatchObject({ status: 'SUCCEEDED', kind: 'AGENT', attempt: 1 });
      expect(done.output.text).toContain('Moved 5 from Alice to Bob');
      const [first, second] = done.children;
      expect(first.children[0]).toMatchObject({
        kind: 'MODEL',
        actionName: 'classify',
        actionVersion: 1,
        status: 'SUCCEEDED',
        output: { category: 'rent' },
      });
      expect(second.children[0]).toMatchObject({
        kind: 'AGENT',
        actionName: 'teller',
        status: 'SUCCEEDED',
        input: { account_id: ALICE, message: 'move 5 from Alice to Bob' },
      });
      const nested = ok(
        engine,
        `query($e: UUID!) { actions { execution(executionId: $e) { children { kind status children { kind actionName status } } } } }`,
        {
          e:
            second.children[0].executionId ??
            (
              engine.db
                .prepare("SELECT execution_id FROM executions WHERE action_name = 'teller' AND root_id = ?")
                .get(e) as { execution_id: string }
            ).execution_id,
        },
      ).actions.execution;
      expect(nested.children.map((t: any) => [t.kind, t.status, t.children.map((c: any) => c.actionName)])).toEqual([
        ['MODEL', 'SUCCEEDED', ['balance']],
        ['MODEL', 'SUCCEEDED', ['transfer']],
        ['MODEL', 'SUCCEEDED', []],
      ]);
      expect(transactions(engine)).toBe(before + 1);
    } finally {
      engine.close();
      await model.close();
    }
  });
});
