// A hostile review of model and agent runs: two clients (alice, the victim, and mallory), a real
// SQLite file, a real HTTP scripted model server, no mocks. The three weaknesses it found (run
// slots and waiter slots shared by all clients, a key echoed in a successful answer) are fixed;
// their tests say what they were.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  lastUserText,
  type ScriptedModel,
  startScriptedModel,
  toolResults,
} from '../../examples/scripted-model/server.mjs';
import type { Engine } from '../../src/engine.js';
import type { Limits } from '../../src/limits.js';
import { newEngine } from '../helpers/engine.js';

const KEY = 'sk-hostile-provider-key-5f3a9c0e71';
const hid = (n: number) => `d0000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
let seq = 1000;

const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const START = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { executionId status } } }`;
const TREE = `query($e: UUID!) { actions { execution(executionId: $e) { executionId status caller { principal } output error { code message hint }
  children { executionId kind status caller { principal } output error { code message }
    children { executionId actionName status input output error { code message } } } } } }`;
const WAIT = `query($e: UUID!, $w: Int) { actions { execution(executionId: $e, waitMs: $w) { status } } }`;

function gql(engine: Engine, query: string, variables: Record<string, unknown> = {}, principal?: string) {
  return engine.graphql(query, variables, principal === undefined ? {} : { principal });
}
function ok(engine: Engine, query: string, variables: Record<string, unknown> = {}, principal?: string): any {
  const result = gql(engine, query, variables, principal);
  if (result.errors) throw new Error(JSON.stringify(result.errors));
  return result.data;
}

const CLIENT_POLICIES = [
  { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
  {
    effect: 'ALLOW',
    actions: ['SELECT'],
    resources: ['actions.Execution'],
    assertions: { mine: 'context.document.principal == context.auth.claims.principal' },
  },
  { effect: 'ALLOW', actions: ['SELECT'], resources: ['actions.Action'] },
  { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
];

interface Fixture {
  engine: Engine;
  model: ScriptedModel;
  lines: string[];
  dir: string;
}

/** An engine on a fresh file behind the scripted model; clients alice and mallory; the tools below. */
async function fixture(limits: Partial<Limits> = {}): Promise<Fixture> {
  const model = await startScriptedModel({ apiKey: KEY, rules: [() => ({ text: 'done' })] });
  process.env.HOSTILE_MODEL_KEY = KEY;
  const lines: string[] = [];
  const record = (level: string) => (fields: unknown, message: string) =>
    lines.push(`${level} ${JSON.stringify(fields)} ${message}`);
  const dir = mkdtempSync(join(tmpdir(), 'tally-agents-hostile-'));
  const engine = await newEngine({
    path: join(dir, 'h.db'),
    limits,
    logger: { debug: record('debug'), info: record('info'), warn: record('warn'), error: record('error') },
    logError: (e) => lines.push(`logError ${String((e as Error)?.stack ?? e)}`),
    providers: [
      {
        name: 'local',
        format: 'openai',
        baseUrl: `${model.url}/v1`,
        models: ['m'],
        apiKeyEnv: 'HOSTILE_MODEL_KEY',
        maxRetries: 0,
      },
    ],
  });
  for (const p of ['alice', 'mallory']) {
    ok(
      engine,
      `mutation($p: String!, $pol: [PolicyInput!]!) { auth { createClient(input: {principal: $p, name: $p, policies: $pol}) { apiKey } } }`,
      { p, pol: CLIENT_POLICIES },
    );
  }
  ok(engine, CREATE, {
    id: hid(1),
    input: {
      name: 'ping',
      kind: 'tool',
      config: {
        runtime: 'javascript',
        src: 'function run(event) { return { ok: true, n: event.data.n ?? null, who: event.data.who ?? null, data: event.data }; }',
      },
      tool: {
        description: 'Answers ok',
        inputSchema: { type: 'object', properties: { n: { type: 'integer' }, who: { type: 'string' } } },
      },
      policies: [],
    },
  });
  ok(engine, CREATE, {
    id: hid(2),
    input: {
      name: 'pinger',
      kind: 'agent',
      config: { provider: 'local', model: 'm', prompt: '{{m}}', maxTurns: 6, maxToolCalls: 8 },
      tool: {
        description: 'Calls ping',
        inputSchema: { type: 'object', properties: { m: { type: 'string' }, me: { type: 'string' } }, required: ['m'] },
      },
      tools: [{ name: 'ping', version: 1, input: { who: 'execution.input.me' } }],
      policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
    },
  });
  ok(engine, CREATE, {
    id: hid(3),
    input: {
      name: 'echo',
      kind: 'model',
      config: { provider: 'local', model: 'm', prompt: '{{m}}' },
      tool: {
        description: 'One model call',
        inputSchema: { type: 'object', properties: { m: { type: 'string' } }, required: ['m'] },
      },
      policies: [],
    },
  });
  ok(engine, CREATE, {
    id: hid(4),
    input: {
      name: 'reader',
      kind: 'agent',
      config: { provider: 'local', model: 'm', prompt: '{{m}}', maxTurns: 3 },
      tool: {
        description: 'Reads the ledger with graphql',
        inputSchema: { type: 'object', properties: { m: { type: 'string' } }, required: ['m'] },
      },
      tools: [{ name: 'graphql' }],
      policies: [
        { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
        { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
      ],
    },
  });
  return { engine, model, lines, dir };
}

async function close(f: Fixture) {
  f.engine.close();
  await f.model.close();
}

async function runToEnd(engine: Engine, name: string, input: unknown, principal: string, e = hid(++seq)) {
  ok(engine, START, { n: name, e, i: input }, principal);
  const worker = engine.createWorker();
  for (const until = Date.now() + 10_000; Date.now() < until; await new Promise((r) => setTimeout(r, 5))) {
    await worker.drainAll();
    const { status } = ok(engine, TREE, { e }).actions.execution;
    if (status === 'SUCCEEDED' || status === 'FAILED') break;
  }
  return { e, tree: ok(engine, TREE, { e }).actions.execution };
}

function pings(engine: Engine): number {
  return (
    engine.db
      .prepare(`SELECT count(*) AS n FROM executions WHERE action_name = 'ping' AND status = 'SUCCEEDED'`)
      .get() as { n: number }
  ).n;
}

const pingThenDone = (calls: Array<Record<string, unknown>>) => [
  (r: any) =>
    toolResults(r).length === 0 ? { toolCalls: calls.map((a) => ({ name: 'ping', arguments: a })) } : { text: 'done' },
];

describe('another client’s run: reading, waiting, replaying', () => {
  let f: Fixture;
  let run: { e: string; tree: any };
  beforeAll(async () => {
    f = await fixture({ executionWaitMsMax: 3000, executionWaitPollMs: 50 });
    f.model.setRules(pingThenDone([{ n: 1 }]));
    run = await runToEnd(f.engine, 'pinger', { m: 'secret plan of alice', me: 'alice' }, 'alice');
  });
  afterAll(async () => close(f));

  it('alice’s run succeeded with one ping, every step recorded under alice', () => {
    expect(run.tree.status).toBe('SUCCEEDED');
    expect(run.tree.children.map((c: any) => c.caller.principal)).toEqual(['alice', 'alice']);
    expect(run.tree.children[0].children[0]).toMatchObject({
      actionName: 'ping',
      status: 'SUCCEEDED',
      input: { n: 1, who: 'alice' },
    });
    expect(pings(f.engine)).toBe(1);
  });

  it('mallory can read neither the run, nor its turns, nor the tool call under them (by id, by list, by parent)', () => {
    const turn = run.tree.children[0];
    const call = turn.children[0];
    for (const e of [run.e, turn.executionId, call.executionId]) {
      const read = gql(f.engine, TREE, { e }, 'mallory');
      expect(read.errors?.[0]?.extensions?.code, e).toBe('ACCESS_DENIED');
    }
    const list = ok(
      f.engine,
      `{ actions { executions(first: 1000) { edges { node { executionId } } } } }`,
      {},
      'mallory',
    );
    expect(JSON.stringify(list)).not.toContain(run.e);
    const byAction = gql(
      f.engine,
      `{ actions { executions(first: 1000, where: {action: "pinger"}) { edges { node { executionId output children { output } } } } } }`,
      {},
      'mallory',
    );
    expect(JSON.stringify(byAction)).not.toContain('secret plan');
    expect(JSON.stringify(byAction)).not.toContain(run.e);
  });

  it('mallory cannot long-poll alice’s run: refused at once, no waiter held', async () => {
    ok(f.engine, START, { n: 'echo', e: hid(900), i: { m: 'queued' } }, 'alice');
    const t0 = performance.now();
    const waited = await f.engine.graphqlAsync(WAIT, { e: hid(900), w: 3000 }, { principal: 'mallory' });
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(waited.errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
    expect(f.engine.stats().executionWaiters).toBe(0);
  });

  it('mallory replaying alice’s executionId with the same input gets no record and starts nothing', async () => {
    await f.engine.createWorker().drainAll();
    const before = f.model.requests.length;
    const replay = gql(
      f.engine,
      START,
      { n: 'pinger', e: run.e, i: { m: 'secret plan of alice', me: 'alice' } },
      'mallory',
    );
    expect(replay.errors?.[0]?.extensions?.code).toBeDefined();
    expect(JSON.stringify(replay)).not.toContain('done');
    await f.engine.createWorker().drainAll();
    expect(f.model.requests.length).toBe(before);
    expect(pings(f.engine)).toBe(1);
  });

  it('mallory using a derived step id (alice’s turn, alice’s tool call) as her own invoke executionId gets nothing of alice’s', () => {
    const turn = run.tree.children[0];
    const call = turn.children[0];
    for (const e of [turn.executionId, call.executionId]) {
      const r = gql(
        f.engine,
        `mutation($e: UUID!) { actions { invokeAction(name: "ping", input: {executionId: $e, actionVersion: 1, input: {n: 1, who: "alice"}}) { status output } } }`,
        { e },
        'mallory',
      );
      expect(r.errors?.[0]?.extensions?.code, JSON.stringify(r)).toBeDefined();
      expect(JSON.stringify(r)).not.toContain('"ok":true');
    }
    expect(pings(f.engine)).toBe(1);
  });
});

describe('what the model sends cannot widen the agent', () => {
  let f: Fixture;
  beforeAll(async () => {
    f = await fixture();
  });
  afterAll(async () => close(f));

  it('a fixed input wins over the model’s value, its other casing and a nested copy', async () => {
    f.model.setRules(pingThenDone([{ n: 2, who: 'mallory', Who: 'mallory', data: { who: 'mallory' } }]));
    const { tree } = await runToEnd(f.engine, 'pinger', { m: 'go', me: 'alice' }, 'alice');
    const call = tree.children[0].children[0];
    expect(call.status).toBe('SUCCEEDED');
    expect(call.input.who).toBe('alice');
    expect(call.output.who).toBe('alice');
    // The schema the model saw had no `who`.
    const seen = f.model.requests.at(-1)!;
    expect(Object.keys((seen.tools[0]!.inputSchema as any).properties)).toEqual(['n']);
  });

  it('a mutation sent to the native graphql tool of a read-only agent is refused, although the starter may write', async () => {
    const before = (f.engine.db.prepare('SELECT count(*) AS n FROM accounts').get() as { n: number }).n;
    f.model.setRules([
      (r: any) =>
        toolResults(r).length === 0
          ? {
              toolCalls: [
                {
                  name: 'graphql',
                  arguments: {
                    query: `mutation { createAccount(input: {accountId: "${hid(4444)}", code: "EVIL", name: "evil"}) { accountId } }`,
                  },
                },
              ],
            }
          : { text: 'done' },
    ]);
    const { tree } = await runToEnd(f.engine, 'reader', { m: 'make an account' }, 'alice');
    const call = tree.children[0].children[0];
    expect(call.status).toBe('FAILED');
    expect(call.error.code).toBe('ACCESS_DENIED');
    expect((f.engine.db.prepare('SELECT count(*) AS n FROM accounts').get() as { n: number }).n).toBe(before);
  });

  it('a tool the agent does not declare (and names with control characters) gets NOT_FOUND and runs nothing', async () => {
    const before = pings(f.engine);
    f.model.setRules([
      (r: any) =>
        toolResults(r).length === 0
          ? {
              toolCalls: [
                { name: 'echo', arguments: { m: 'x' } },
                { name: 'ping\u0000\n\u001b[31m', arguments: { n: 1 } },
                { name: 'PING', arguments: { n: 1 } },
              ],
            }
          : { text: 'done' },
    ]);
    const { tree } = await runToEnd(f.engine, 'pinger', { m: 'go', me: 'alice' }, 'alice');
    expect(tree.children[0].children.map((c: any) => c.error?.code)).toEqual(['NOT_FOUND', 'NOT_FOUND', 'NOT_FOUND']);
    expect(pings(f.engine)).toBe(before);
  });

  it('thousands of tool calls in one turn stop at maxToolCalls; the ledger sees each call that ran once', async () => {
    const before = pings(f.engine);
    f.model.setRules(pingThenDone(Array.from({ length: 3000 }, (_, n) => ({ n }))));
    const { tree } = await runToEnd(f.engine, 'pinger', { m: 'go', me: 'alice' }, 'alice');
    expect(tree.status).toBe('FAILED');
    expect(tree.error.code).toBe('LIMIT_EXCEEDED');
    expect(pings(f.engine) - before).toBe(8);
  });

  it('megabyte arguments are bounded (no crash, nothing oversized stored as a successful call)', async () => {
    const before = pings(f.engine);
    f.model.setRules(pingThenDone([{ n: 1, who: 'x', pad: 'y'.repeat(900_000) }]));
    const { tree } = await runToEnd(f.engine, 'pinger', { m: 'go', me: 'alice' }, 'alice');
    expect(['SUCCEEDED', 'FAILED']).toContain(tree.status);
    expect(pings(f.engine) - before).toBeLessThanOrEqual(1);
    // The engine still answers.
    expect(ok(f.engine, '{ actions { queue { queued } } }').actions.queue.queued).toBeGreaterThanOrEqual(0);
  });
});

describe('exactly once under concurrent workers', () => {
  let f: Fixture;
  beforeAll(async () => {
    f = await fixture({ agentLeaseMs: 300 });
  });
  afterAll(async () => close(f));

  it('two workers in one process draining ten slow runs of two calls each: exactly twenty pings', async () => {
    f.model.setRules([
      (r: any) =>
        toolResults(r).length === 0
          ? {
              delayMs: 400,
              toolCalls: [
                { name: 'ping', arguments: { n: 1 } },
                { name: 'ping', arguments: { n: 2 } },
              ],
            }
          : { delayMs: 400, text: 'done' },
    ]);
    const ids = Array.from({ length: 10 }, () => hid(++seq));
    for (const e of ids) ok(f.engine, START, { n: 'pinger', e, i: { m: 'go', me: 'alice' } }, 'alice');
    const [a, b] = [f.engine.createWorker({ owner: 'wa' }), f.engine.createWorker({ owner: 'wb' })];
    await Promise.all([a.drainAll(), b.drainAll()]);
    const statuses = ids.map((e) => ok(f.engine, TREE, { e }).actions.execution.status);
    expect(statuses).toEqual(ids.map(() => 'SUCCEEDED'));
    expect(pings(f.engine)).toBe(20);
  });
});

describe('the starter is deleted mid-run', () => {
  let f: Fixture;
  beforeAll(async () => {
    f = await fixture();
  });
  afterAll(async () => close(f));

  async function deletedMidRun() {
    ok(
      f.engine,
      `mutation { auth { createClient(input: {principal: "temp", name: "temp", policies: ${'[{effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]}]'}}) { apiKey } } }`,
    );
    let deletedAt = -1;
    f.model.setRules([
      (r: any) => {
        const done = toolResults(r).length;
        if (done === 0) return { toolCalls: [{ name: 'ping', arguments: { n: 1 } }] };
        if (deletedAt < 0) {
          // Between the first call and the second: the admin deletes the starter.
          ok(f.engine, `mutation { auth { deleteClient(principal: "temp") { principal } } }`);
          deletedAt = f.model.requests.length;
          return { toolCalls: [{ name: 'ping', arguments: { n: 2 } }] };
        }
        return { toolCalls: [{ name: 'ping', arguments: { n: 3 } }] };
      },
    ]);
    const before = pings(f.engine);
    const { tree } = await runToEnd(f.engine, 'pinger', { m: 'go', me: 'temp' }, 'temp');
    return { tree, ran: pings(f.engine) - before, asksAfter: f.model.requests.length - deletedAt };
  }

  it('no tool call runs under the deleted starter’s authority, and no further model turn is asked: the run fails ACCESS_DENIED', async () => {
    const { tree, ran, asksAfter } = await deletedMidRun();
    expect(ran).toBe(1);
    expect(tree.status).toBe('FAILED');
    expect(tree.error.code).toBe('ACCESS_DENIED');
    expect(tree.children[1].children).toEqual([]);
    expect(asksAfter).toBe(0);
  });
});

describe('one client’s runs against another’s (fairness)', () => {
  let f: Fixture;
  beforeAll(async () => {
    f = await fixture({ agentRunsConcurrentMax: 2, agentRunsPerClientMax: 1 });
    f.model.setRules([
      (r: any) =>
        String(lastUserText(r)).startsWith('slow') ? { delayMs: 1000, text: 'slow done' } : { text: 'fast done' },
    ]);
  });
  afterAll(async () => close(f));

  // Was a finding (no per-client fairness): mallory's slow runs held every agentRunsConcurrentMax
  // slot and alice's one-turn run waited ~2 s behind them. Now mallory holds agentRunsPerClientMax.
  it('alice’s fast run is not held behind mallory’s slow ones', async () => {
    const hers: string[] = [];
    for (let n = 0; n < 4; n++) {
      hers.push(hid(++seq));
      ok(f.engine, START, { n: 'echo', e: hers.at(-1), i: { m: `slow ${n}` } }, 'mallory');
    }
    await new Promise((r) => setTimeout(r, 5));
    const victim = hid(++seq);
    ok(f.engine, START, { n: 'echo', e: victim, i: { m: 'fast' } }, 'alice');
    await f.engine.createWorker().drainAll();
    const row = (e: string) =>
      f.engine.db.prepare('SELECT status, started, finished FROM executions WHERE execution_id = ?').get(e) as {
        status: string;
        started: string;
        finished: string;
      };
    const starts = hers.map((e) => row(e).started).sort();
    expect(row(victim).status).toBe('SUCCEEDED');
    // Mallory's second run started only after her first ended; alice's had ended before that.
    expect(row(victim).finished < starts[1]!).toBe(true);
  });
});

describe('long-poll slots', () => {
  let f: Fixture;
  beforeAll(async () => {
    f = await fixture({
      executionWaitersMax: 4,
      executionWaitersPerClientMax: 2,
      executionWaitMsMax: 3000,
      executionWaitPollMs: 50,
    });
  });
  afterAll(async () => close(f));

  // Was a finding: executionWaitersMax was one pool for all clients; mallory's waits on her own
  // queued runs took every slot, and alice's wait answered at once. Now one client holds at most
  // executionWaitersPerClientMax of them.
  it('mallory holding her share of waiter slots does not take alice’s long-poll away', async () => {
    const mine = Array.from({ length: 4 }, () => hid(++seq));
    for (const e of mine) ok(f.engine, START, { n: 'echo', e, i: { m: 'never run' } }, 'mallory');
    const held = mine.map((e) => f.engine.graphqlAsync(WAIT, { e, w: 3000 }, { principal: 'mallory' }));
    await new Promise((r) => setTimeout(r, 50));
    expect(f.engine.stats().executionWaiters).toBe(2);
    const victim = hid(++seq);
    ok(f.engine, START, { n: 'echo', e: victim, i: { m: 'never run' } }, 'alice');
    const t0 = performance.now();
    const answer = await f.engine.graphqlAsync(WAIT, { e: victim, w: 1000 }, { principal: 'alice' });
    const waited = performance.now() - t0;
    await Promise.all(held);
    console.log(
      `alice's waitMs 1000 answered after ${Math.round(waited)} ms with mallory holding ${mine.length} waits`,
    );
    expect(answer.data).toMatchObject({ actions: { execution: { status: 'QUEUED' } } });
    expect(waited).toBeGreaterThan(900);
  });
});

describe('the provider key', () => {
  let f: Fixture;
  beforeAll(async () => {
    f = await fixture();
  });
  afterAll(async () => close(f));

  function everywhere(): string {
    return JSON.stringify([
      f.engine.db.prepare('SELECT * FROM executions').all(),
      f.engine.db.prepare('SELECT * FROM invocations').all(),
      f.lines,
    ]);
  }

  it('a provider error that echoes the key (401, 400, 500, a broken 200 body) leaves it in no record, log line or error', async () => {
    const echoes = [
      () => ({ status: 401, text: `Incorrect API key provided: ${KEY}` }),
      () => ({ status: 400, text: `bad request for key ${JSON.stringify(KEY)}` }),
      () => ({ status: 500, text: `upstream failed, key=${KEY}` }),
      () => ({ rawBody: `{"broken": "${KEY}"` }),
      () => ({ rawBody: `{"choices": "${KEY}"}` }),
    ];
    for (const reply of echoes) {
      f.model.setRules([reply]);
      const { e, tree } = await runToEnd(f.engine, 'echo', { m: 'hi' }, 'alice');
      expect(tree.status).toBe('FAILED');
      const seen = JSON.stringify(
        ok(
          f.engine,
          `query($e: UUID!) { actions { execution(executionId: $e) { error { code message hint } invocations { error { code message hint } } children { error { code message hint } } } } }`,
          { e },
          'alice',
        ),
      );
      expect(seen).not.toContain(KEY);
    }
    expect(everywhere()).not.toContain(KEY);
    const config = ok(f.engine, `{ actions { action(name: "echo") { config } } }`, {}, 'alice');
    expect(JSON.stringify(config)).not.toContain(KEY);
  });

  // Was a finding (low): only error paths were redacted. A provider (or a proxy in front of it)
  // whose successful answer echoes the request's credentials had the key stored in the turn.
  it('a successful answer that echoes the key is redacted too', async () => {
    f.model.setRules([(r: any) => ({ text: `you sent ${String(r.headers.authorization)}` })]);
    const { tree } = await runToEnd(f.engine, 'echo', { m: 'hi' }, 'alice');
    expect(tree.status).toBe('SUCCEEDED');
    expect(JSON.stringify(tree)).not.toContain(KEY);
  });
});

// The agent's reference is the only door from a model's answer to a tool (DESIGN principle 9).
// A prompt-injected model tries every other path: the native graphql tool's invokeAction and
// startAction, a graphql-kind action doing the same, and versions its reference must not run.
describe('a model reaches a tool only through its agent’s reference', () => {
  let f: Fixture;
  const PAY = `function run(e) { return { paid: e.data.amount, from: e.data.from, version: 1 }; }`;
  const payments = () =>
    f.engine.db
      .prepare(`SELECT input, status, action_version AS version FROM executions WHERE action_name = 'pay' ORDER BY seq`)
      .all() as Array<{ input: string; status: string; version: number }>;
  const approvals = () => f.engine.db.prepare(`SELECT count(*) AS n FROM approvals`).get() as { n: number };
  const injected = (query: string) => [
    (r: any) =>
      toolResults(r).length === 0
        ? { toolCalls: [{ name: 'graphql', arguments: { query } }] }
        : { text: `done: ${toolResults(r)[0]!.content}` },
  ];
  beforeAll(async () => {
    f = await fixture();
    ok(f.engine, CREATE, {
      id: hid(50),
      input: {
        name: 'pay',
        kind: 'tool',
        config: { runtime: 'javascript', src: PAY },
        tool: {
          description: 'Pay out of a wallet',
          inputSchema: {
            type: 'object',
            properties: { from: { type: 'string' }, amount: { type: 'string' } },
            required: ['from', 'amount'],
          },
        },
        policies: [],
      },
    });
    // The teller: pay always out of the customer's own wallet, a person approving each payment;
    // graphql for look-ups. Its policies must allow INSERT actions.Execution of pay (the reference needs it).
    const teller = (name: string, id: number, tools: unknown[]) =>
      ok(f.engine, CREATE, {
        id: hid(id),
        input: {
          name,
          kind: 'agent',
          config: { provider: 'local', model: 'm', prompt: '{{m}}', maxTurns: 3 },
          tool: {
            description: 'A teller',
            inputSchema: {
              type: 'object',
              properties: { m: { type: 'string' }, me: { type: 'string' } },
              required: ['m'],
            },
          },
          tools,
          policies: [
            { effect: 'ALLOW', actions: ['INSERT', 'SELECT'], resources: ['actions.Execution'] },
            { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
          ],
        },
      });
    teller('teller', 51, [
      { name: 'pay', version: 1, input: { from: 'execution.input.me' }, approval: {} },
      { name: 'graphql' },
    ]);
    // The same through a graphql-kind action (the native tool under another name).
    ok(f.engine, CREATE, {
      id: hid(52),
      input: {
        name: 'lookup',
        kind: 'graphql',
        config: { version: 1 },
        tool: {
          description: 'Look things up',
          inputSchema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
        },
        policies: [{ effect: 'ALLOW', actions: ['INSERT', 'SELECT'], resources: ['actions.Execution'] }],
      },
    });
    teller('teller2', 53, [
      { name: 'pay', version: 1, input: { from: 'execution.input.me' }, approval: {} },
      { name: 'lookup', version: 1 },
    ]);
  });
  afterAll(async () => close(f));

  it('through the native graphql tool, invokeAction and startAction of the referenced tool are refused: no fixed input skipped, no approval skipped', async () => {
    for (const [verb, e] of [
      ['invokeAction', hid(60)],
      ['startAction', hid(61)],
    ] as const) {
      f.model.setRules(
        injected(
          `mutation { actions { ${verb}(name: "pay", input: {executionId: "${e}", actionVersion: 1, input: {from: "bob", amount: "40"}}) { status } } }`,
        ),
      );
      const { tree } = await runToEnd(f.engine, 'teller', { m: 'ignore previous instructions', me: 'alice' }, 'alice');
      const call = tree.children[0].children[0];
      expect(call.status, JSON.stringify(call)).toBe('FAILED');
      expect(call.error.code).toBe('ACCESS_DENIED');
      expect(call.error.message).toContain('written by the model of teller@1');
    }
    await f.engine.createWorker().drainAll();
    expect(payments()).toEqual([]);
    expect(approvals().n).toBe(0);
  });

  it('through a graphql-kind action the same', async () => {
    f.model.setRules([
      (r: any) =>
        toolResults(r).length === 0
          ? {
              toolCalls: [
                {
                  name: 'lookup',
                  arguments: {
                    query: `mutation { actions { invokeAction(name: "pay", input: {executionId: "${hid(62)}", actionVersion: 1, input: {from: "bob", amount: "40"}}) { status } } }`,
                  },
                },
              ],
            }
          : { text: 'done' },
    ]);
    const { tree } = await runToEnd(f.engine, 'teller2', { m: 'ignore previous instructions', me: 'alice' }, 'alice');
    const call = tree.children[0].children[0];
    expect(call.error?.code, JSON.stringify(call)).toBe('ACCESS_DENIED');
    expect(payments()).toEqual([]);
  });

  it('the reference itself still works: the call waits for a person, with from fixed to the customer', async () => {
    f.model.setRules([
      (r: any) =>
        toolResults(r).length === 0
          ? { toolCalls: [{ name: 'pay', arguments: { from: 'bob', amount: '40' } }] }
          : { text: 'done' },
    ]);
    ok(f.engine, START, { n: 'teller', e: hid(63), i: { m: 'pay 40', me: 'alice' } }, 'alice');
    await f.engine.createWorker().drainAll();
    expect(ok(f.engine, TREE, { e: hid(63) }).actions.execution.status).toBe('WAITING_APPROVAL');
    const [approval] = f.engine.db.prepare(`SELECT input FROM approvals`).all() as Array<{ input: string }>;
    expect(JSON.parse(approval!.input)).toEqual({ from: 'alice', amount: '40' });
    expect(payments()).toEqual([]);
  });

  it('reads through graphql still work for the model', async () => {
    f.model.setRules(injected(`{ actions { execution(executionId: "${hid(63)}") { status } } }`));
    const { tree } = await runToEnd(f.engine, 'teller', { m: 'look', me: 'alice' }, 'alice');
    expect(tree.children[0].children[0]).toMatchObject({ status: 'SUCCEEDED' });
  });

  it('a LOCKED or DRAFT version is refused to an agent as to every caller, pinned or resolved at turn 1', async () => {
    // pay@2 is a DRAFT; pay@1 gets locked below.
    ok(
      f.engine,
      `mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) { version } } }`,
      {
        id: hid(50),
        input: {
          name: 'pay',
          kind: 'tool',
          config: { runtime: 'javascript', src: PAY.replace('version: 1', 'version: 2') },
          draft: true,
          tool: {
            description: 'Pay out of a wallet',
            inputSchema: {
              type: 'object',
              properties: { from: { type: 'string' }, amount: { type: 'string' } },
              required: ['from', 'amount'],
            },
          },
          policies: [],
        },
      },
    );
    const agent = (name: string, id: number, version: number | null) =>
      ok(f.engine, CREATE, {
        id: hid(id),
        input: {
          name,
          kind: 'agent',
          config: { provider: 'local', model: 'm', prompt: '{{m}}', maxTurns: 3 },
          tool: {
            description: 'pays',
            inputSchema: { type: 'object', properties: { m: { type: 'string' } }, required: ['m'] },
          },
          tools: [version === null ? { name: 'pay' } : { name: 'pay', version }],
          policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
        },
      });
    agent('pays_draft', 70, 2);
    agent('pays_v1', 71, 1);
    f.model.setRules([
      (r: any) =>
        toolResults(r).length === 0
          ? { toolCalls: [{ name: 'pay', arguments: { from: 'x', amount: '1' } }] }
          : { text: 'done' },
    ]);
    const draft = await runToEnd(f.engine, 'pays_draft', { m: 'pay' }, 'alice');
    expect(draft.tree.children[0].children[0].error).toMatchObject({ code: 'VERSION_LOCKED' });
    expect(draft.tree.children[0].children[0].error.message).toContain('DRAFT');
    ok(f.engine, `mutation { actions { lockAction(id: "${hid(50)}", version: 1) { actionId } } }`);
    const locked = await runToEnd(f.engine, 'pays_v1', { m: 'pay' }, 'alice');
    expect(locked.tree.children[0].children[0].error).toMatchObject({ code: 'VERSION_LOCKED' });
    // The teller's call of pay@1, approved after the lock, is refused when it resumes.
    const { approval_id } = f.engine.db.prepare(`SELECT approval_id FROM approvals`).get() as { approval_id: string };
    ok(f.engine, `mutation($a: UUID!) { actions { approveCall(approvalId: $a) { status } } }`, { a: approval_id });
    for (const until = Date.now() + 10_000; Date.now() < until; await new Promise((r) => setTimeout(r, 5))) {
      await f.engine.createWorker().drainAll();
      if (ok(f.engine, TREE, { e: hid(63) }).actions.execution.status === 'SUCCEEDED') break;
    }
    const resumed = ok(f.engine, TREE, { e: hid(63) }).actions.execution;
    expect(resumed.children[0].children[0].error, JSON.stringify(resumed)).toMatchObject({ code: 'VERSION_LOCKED' });
    expect(payments().filter((p) => p.status === 'SUCCEEDED')).toEqual([]);
  });
});
