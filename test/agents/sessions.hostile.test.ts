// A hostile review of sessions, approvals, skills and cancellation: two clients (alice, the victim,
// and mallory), a real SQLite file, the real scripted model server over HTTP, no mocks. Tests of
// weaknesses it found are fixed; their tests say what they were;
// the attacks that are refused are plain `it`.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  lastUserText,
  type NormalizedRequest,
  type ScriptedModel,
  startScriptedModel,
  toolResults,
} from '../../examples/scripted-model/server.mjs';
import type { Engine } from '../../src/engine.js';
import type { Limits } from '../../src/limits.js';
import { newEngine } from '../helpers/engine.js';

const sid = (n: number) => `e0000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
let seq = 100;

const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const START = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { executionId status } } }`;
const CREATE_SESSION = `mutation($s: UUID!, $a: String!, $i: JSON) { actions { createSession(sessionId: $s, agent: $a, input: $i) { sessionId status } } }`;
const SEND = `mutation($s: UUID!, $m: String!, $t: String!) { actions { sendMessage(sessionId: $s, messageId: $m, text: $t) { messageId execution { executionId status } } } }`;
const SESSION = `query($s: UUID!) { actions { session(sessionId: $s) { status messages { role text } } } }`;
const CLOSE = `mutation($s: UUID!) { actions { closeSession(sessionId: $s) { status } } }`;
const STATUS = `query($e: UUID!) { actions { execution(executionId: $e) { status output error { code message } } } }`;
const APPROVALS = `query { actions { approvals(first: 100) { nodes { approvalId executionId tool input status requestedBy decidedBy } } } }`;
const APPROVAL = `query($id: UUID!) { actions { approval(approvalId: $id) { status decidedBy } } }`;
const DECIDE = (verb: 'approveCall' | 'rejectCall') =>
  `mutation($id: UUID!, $r: String) { actions { ${verb}(approvalId: $id, reason: $r) { approvalId status decidedBy } } }`;
const CANCEL = `mutation($e: UUID!) { actions { cancelExecution(executionId: $e) { status } } }`;

function gql(engine: Engine, query: string, variables: Record<string, unknown> = {}, principal?: string) {
  return engine.graphql(query, variables, principal === undefined ? {} : { principal });
}
function ok(engine: Engine, query: string, variables: Record<string, unknown> = {}, principal?: string): any {
  const result = gql(engine, query, variables, principal);
  if (result.errors) throw new Error(JSON.stringify(result.errors));
  return result.data;
}
function fails(engine: Engine, query: string, variables: Record<string, unknown> = {}, principal?: string) {
  const result = gql(engine, query, variables, principal);
  expect(result.errors, JSON.stringify(result.data)).toBeDefined();
  return { code: result.errors![0]!.extensions?.code as string, message: result.errors![0]!.message };
}

const mine = (resource: string, actions: string[], field = 'principal') => ({
  effect: 'ALLOW',
  actions,
  resources: [resource],
  assertions: { mine: `context.document.${field} == context.auth.claims.principal` },
});
/** alice and mallory hold the same policies: each may see, close, decide and cancel only what is hers. */
const CLIENT_POLICIES = [
  { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution', 'actions.Session'] },
  mine('actions.Execution', ['SELECT', 'UPDATE']),
  mine('actions.Session', ['SELECT', 'UPDATE']),
  mine('actions.Approval', ['SELECT', 'UPDATE'], 'requestedBy'),
  { effect: 'ALLOW', actions: ['SELECT'], resources: ['actions.Action'] },
];

/** The scripted model: "pay N" asks for pay, "pay twice N" asks for it twice in one turn, "skill X" loads skill X. */
function rule(r: NormalizedRequest) {
  const results = toolResults(r);
  if (results.length > 0) return { text: `done: ${results.map((x) => x.content).join(' | ')}` };
  const text = lastUserText(r) ?? '';
  let m: RegExpExecArray | null;
  if ((m = /^pay twice (\S+)/.exec(text)))
    return {
      toolCalls: [
        { name: 'pay', arguments: { amount: m[1]! } },
        { name: 'pay', arguments: { amount: m[1]! } },
      ],
    };
  if ((m = /^pay (\S+)/.exec(text))) return { toolCalls: [{ name: 'pay', arguments: { amount: m[1]! } }] };
  if ((m = /^skill (\S+)/.exec(text))) return { toolCalls: [{ name: 'load_skill', arguments: { name: m[1]! } }] };
  return { text: `heard: ${text}` };
}

interface Fixture {
  engine: Engine;
  model: ScriptedModel;
}

async function fixture(limits: Partial<Limits> = {}): Promise<Fixture> {
  const model = await startScriptedModel({ rules: [rule] });
  const engine = await newEngine({
    path: join(mkdtempSync(join(tmpdir(), 'tally-sessions-hostile-')), 'h.db'),
    limits,
    providers: [{ name: 'local', format: 'openai', baseUrl: `${model.url}/v1`, models: ['m'], maxRetries: 0 }],
  });
  for (const p of ['alice', 'mallory']) {
    ok(
      engine,
      `mutation($p: String!, $pol: [PolicyInput!]!) { auth { createClient(input: {principal: $p, name: $p, policies: $pol}) { apiKey } } }`,
      { p, pol: CLIENT_POLICIES },
    );
  }
  ok(engine, CREATE, {
    id: sid(1),
    input: {
      name: 'pay',
      config: { runtime: 'javascript', src: 'function run(event) { return { paid: event.data.amount }; }' },
      tool: {
        description: 'Pays an amount.',
        inputSchema: { type: 'object', properties: { amount: { type: 'string' } }, required: ['amount'] },
      },
      policies: [],
    },
  });
  const agent = (n: number, name: string, timeoutMs: number) =>
    ok(engine, CREATE, {
      id: sid(n),
      input: {
        name,
        kind: 'agent',
        config: { provider: 'local', model: 'm', prompt: '{{message}}', maxTurns: 4 },
        tool: {
          description: 'Pays out, with a yes.',
          inputSchema: {
            type: 'object',
            properties: { message: { type: 'string' }, account: { type: 'string' } },
            required: ['message'],
          },
        },
        tools: [{ name: 'pay', version: 1, approval: { timeoutMs } }],
        policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
      },
    });
  agent(2, 'payer', 600_000);
  agent(3, 'hasty', 40);
  return { engine, model };
}

async function close(f: Fixture) {
  f.engine.close();
  await f.model.close();
}

/** Run the queue until the execution is neither QUEUED nor RUNNING (it ended, or it parked), or `rounds` pass. */
async function settle(engine: Engine, executionId: string, rounds = 300): Promise<any> {
  const worker = engine.createWorker();
  for (let i = 0; i < rounds; i++) {
    await worker.drainAll();
    const node = ok(engine, STATUS, { e: executionId }).actions.execution;
    if (!['QUEUED', 'RUNNING'].includes(node.status)) return node;
    await new Promise((r) => setTimeout(r, 10));
  }
  return ok(engine, STATUS, { e: executionId }).actions.execution;
}

/** Successful calls of the pay tool: what the ledger would see. */
function paid(engine: Engine): number {
  return (
    engine.db
      .prepare(`SELECT count(*) AS n FROM executions WHERE action_name = 'pay' AND status = 'SUCCEEDED'`)
      .get() as { n: number }
  ).n;
}
function approvalsOf(engine: Engine, executionId: string): any[] {
  return ok(engine, APPROVALS).actions.approvals.nodes.filter((a: any) => a.executionId === executionId);
}
function openSession(engine: Engine, principal: string, agent = 'payer', input: unknown = {}): string {
  const s = sid(++seq);
  ok(engine, CREATE_SESSION, { s, a: agent, i: input }, principal);
  return s;
}
function send(engine: Engine, principal: string, s: string, text: string, m = `m${++seq}`): string {
  return ok(engine, SEND, { s, m, t: text }, principal).actions.sendMessage.execution.executionId;
}

describe('another client’s session', () => {
  let f: Fixture;
  let s: string;
  beforeAll(async () => {
    f = await fixture();
    s = openSession(f.engine, 'alice', 'payer', { account: 'alice-account' });
    await settle(f.engine, send(f.engine, 'alice', s, 'my secret plan'));
  });
  afterAll(async () => close(f));

  it('mallory can neither send to, read, list nor close alice’s session; alice’s session is untouched', () => {
    const { engine } = f;
    expect(fails(engine, SEND, { s, m: 'x', t: 'pay 999' }, 'mallory').code).toBe('NOT_FOUND');
    expect(fails(engine, SESSION, { s }, 'mallory').code).toMatch(/ACCESS_DENIED|NOT_FOUND/);
    expect(fails(engine, CLOSE, { s }, 'mallory').code).toMatch(/ACCESS_DENIED|NOT_FOUND/);
    const listed = ok(engine, `{ actions { sessions(first: 100) { nodes { sessionId } } } }`, {}, 'mallory').actions
      .sessions.nodes;
    expect(listed.map((n: any) => n.sessionId)).not.toContain(s);
    // Re-creating it with the same agent and input is not an idempotent replay for another client.
    expect(fails(engine, CREATE_SESSION, { s, a: 'payer', i: { account: 'alice-account' } }, 'mallory').code).toBe(
      'ALREADY_EXISTS',
    );
    const session = ok(engine, SESSION, { s }, 'alice').actions.session;
    expect(session.status).toBe('OPEN');
    expect(session.messages.map((m: any) => m.text)).toEqual(['my secret plan', 'heard: my secret plan']);
    expect(paid(engine)).toBe(0);
  });

  // Was a weakness (low): session(sessionId) and closeSession answered ACCESS_DENIED for another
  // client's session and NOT_FOUND for an unknown id. Both answer NOT_FOUND now. (createSession's
  // ALREADY_EXISTS still says an id is taken: ids are random UUIDs a client chooses.)
  it('mallory cannot tell alice’s session id from an id nobody used (session, closeSession)', () => {
    const fresh = sid(++seq);
    expect(fails(f.engine, SESSION, { s }, 'mallory').code).toBe(
      fails(f.engine, SESSION, { s: fresh }, 'mallory').code,
    );
    expect(fails(f.engine, CLOSE, { s }, 'mallory').code).toBe(fails(f.engine, CLOSE, { s: fresh }, 'mallory').code);
  });

  it('a huge or deep session input is refused before anything is stored; so is a huge messageId', () => {
    const { engine } = f;
    const huge = fails(
      engine,
      CREATE_SESSION,
      { s: sid(++seq), a: 'payer', i: { account: 'x'.repeat(300_000) } },
      'mallory',
    );
    expect(huge.code).toBe('LIMIT_EXCEEDED');
    let deep: unknown = 'leaf';
    for (let i = 0; i < 40; i++) deep = { d: deep };
    expect(gql(engine, CREATE_SESSION, { s: sid(++seq), a: 'payer', i: deep }, 'mallory').errors).toBeDefined();
    const ms = openSession(engine, 'mallory');
    expect(fails(engine, SEND, { s: ms, m: 'x'.repeat(129), t: 'hi' }, 'mallory').code).toBe('BAD_REQUEST');
    expect(
      (engine.db.prepare('SELECT count(*) AS n FROM sessions WHERE principal = ?').get('mallory') as { n: number }).n,
    ).toBe(1);
  });
});

describe('two desks with the bank’s operator policies', () => {
  // Was a finding (H10, low): session(sessionId) and closeSession checked the policy only, and the
  // bank's operator policies allow SELECT * and UPDATE actions.Session: two desks read and closed
  // each other's sessions. The owner is checked on every session read and write, in one place.
  let f: Fixture;
  let s: string;
  beforeAll(async () => {
    f = await fixture();
    const clients = JSON.parse(
      readFileSync(join(import.meta.dirname, '..', '..', 'examples', 'bank', 'clients.json'), 'utf8'),
    ) as Array<{ principal: string; policies: unknown[] }>;
    const operator = clients.find((c) => c.principal === 'operator')!;
    for (const p of ['desk_a', 'desk_b']) {
      ok(
        f.engine,
        `mutation($p: String!, $pol: [PolicyInput!]!) { auth { createClient(input: {principal: $p, name: $p, policies: $pol}) { apiKey } } }`,
        { p, pol: operator.policies },
      );
    }
    s = openSession(f.engine, 'desk_a', 'payer', { account: 'customer-4411' });
    await settle(f.engine, send(f.engine, 'desk_a', s, 'customer 4411 asks about her overdraft'));
  });
  afterAll(async () => close(f));

  it('desk_b can neither read, list, send to nor close desk_a’s session: NOT_FOUND, as an id nobody used', () => {
    const { engine } = f;
    const fresh = sid(++seq);
    for (const [query, variables] of [
      [SESSION, {}],
      [CLOSE, {}],
      [SEND, { m: 'x', t: 'pay 999' }],
    ] as const) {
      const theirs = fails(engine, query, { s, ...variables }, 'desk_b');
      const nobodys = fails(engine, query, { s: fresh, ...variables }, 'desk_b');
      expect(theirs.code, query).toBe('NOT_FOUND');
      expect(theirs.message.replace(s, '<id>'), query).toBe(nobodys.message.replace(fresh, '<id>'));
    }
    const listed = ok(engine, `{ actions { sessions(first: 100) { nodes { sessionId } } } }`, {}, 'desk_b').actions
      .sessions.nodes;
    expect(listed).toEqual([]);
    const own = ok(engine, SESSION, { s }, 'desk_a').actions.session;
    expect(own.status).toBe('OPEN');
    expect(own.messages.map((m: any) => m.text)).toEqual([
      'customer 4411 asks about her overdraft',
      'heard: customer 4411 asks about her overdraft',
    ]);
    expect(
      ok(engine, `{ actions { sessions(first: 100) { nodes { sessionId } } } }`, {}, 'desk_a').actions.sessions.nodes,
    ).toEqual([{ sessionId: s }]);
    expect(ok(engine, CLOSE, { s }, 'desk_a').actions.closeSession.status).toBe('CLOSED');
  });
});

describe('approvals between two clients', () => {
  let f: Fixture;
  beforeAll(async () => {
    f = await fixture();
    ok(
      f.engine,
      `mutation($pol: [PolicyInput!]!) { auth { createClient(input: {principal: "checker", name: "checker", policies: $pol}) { apiKey } } }`,
      {
        pol: [
          { effect: 'ALLOW', actions: ['SELECT'], resources: ['actions.Approval'] },
          // checker may only say no to pay calls, never yes.
          {
            effect: 'ALLOW',
            actions: ['UPDATE'],
            resources: ['actions.Approval'],
            assertions: { only_no: 'context.document.tool == "pay" && context.document.decision == "REJECTED"' },
          },
        ],
      },
    );
    ok(f.engine, CREATE, {
      id: sid(50),
      input: {
        name: 'approver',
        config: {
          runtime: 'javascript',
          src: `function run(e) { return graphql('mutation($id: UUID!) { actions { approveCall(approvalId: $id) { status } } }', { id: e.data.id }); }`,
        },
        tool: {
          description: 'Tries to approve from inside a call.',
          inputSchema: { type: 'object', properties: { id: { type: 'string' } } },
        },
        policies: [{ effect: 'ALLOW', actions: ['SELECT', 'UPDATE'], resources: ['actions.Approval'] }],
      },
    });
  });
  afterAll(async () => close(f));

  it('mallory can neither see, approve, reject nor cancel alice’s parked call; alice’s yes runs it exactly once', async () => {
    const { engine } = f;
    const s = openSession(engine, 'alice');
    const e = send(engine, 'alice', s, 'pay 500');
    expect((await settle(engine, e)).status).toBe('WAITING_APPROVAL');
    const [approval] = approvalsOf(engine, e);
    expect(approval).toMatchObject({ tool: 'pay', input: { amount: '500' }, status: 'PENDING', requestedBy: 'alice' });
    const id = approval.approvalId;

    expect(ok(engine, APPROVALS, {}, 'mallory').actions.approvals.nodes).toEqual([]);
    expect(fails(engine, APPROVAL, { id }, 'mallory').code).toMatch(/ACCESS_DENIED|NOT_FOUND/);
    expect(fails(engine, DECIDE('approveCall'), { id }, 'mallory').code).toBe('ACCESS_DENIED');
    expect(fails(engine, DECIDE('rejectCall'), { id }, 'mallory').code).toBe('ACCESS_DENIED');
    expect(fails(engine, CANCEL, { e }, 'mallory').code).toBe('ACCESS_DENIED');
    // A guessed approval id is just unknown (ids are derived with the database's secret).
    expect(fails(engine, DECIDE('approveCall'), { id: sid(999_999) }, 'mallory').code).toBe('NOT_FOUND');
    // Starting a run under alice's turn id (had it leaked) claims nothing.
    expect(gql(engine, START, { n: 'payer', e, i: { message: 'pay 1' } }, 'mallory').errors).toBeDefined();
    expect(ok(engine, STATUS, { e }).actions.execution.status).toBe('WAITING_APPROVAL');
    expect(paid(engine)).toBe(0);

    // A policy on the decision: checker may reject pay calls but not approve them.
    expect(fails(engine, DECIDE('approveCall'), { id }, 'checker').code).toBe('ACCESS_DENIED');
    // From inside a tool call (a program's graphql()), even with alice's authority and the tool's, nobody decides.
    const inside = ok(
      engine,
      `mutation($e: UUID!, $id: String!) { actions { invokeAction(name: "approver", input: {executionId: $e, actionVersion: 1, input: {id: $id}}) { status output error { code message } } } }`,
      { e: sid(++seq), id },
      'alice',
    ).actions.invokeAction;
    expect(JSON.stringify(inside)).toContain('cannot be approved or rejected from inside a tool call');
    expect(ok(engine, APPROVAL, { id }).actions.approval.status).toBe('PENDING');

    expect(ok(engine, DECIDE('approveCall'), { id, r: 'fine' }, 'alice').actions.approveCall).toMatchObject({
      status: 'APPROVED',
      decidedBy: 'alice',
    });
    // A second decision, either way, is refused: approved stays approved.
    expect(fails(engine, DECIDE('approveCall'), { id }, 'alice').code).toBe('BAD_REQUEST');
    expect(fails(engine, DECIDE('rejectCall'), { id }, 'alice').code).toBe('BAD_REQUEST');
    expect(fails(engine, DECIDE('rejectCall'), { id }, 'checker').code).toBe('BAD_REQUEST');
    const run = await settle(engine, e);
    expect(run.status).toBe('SUCCEEDED');
    expect(run.output.text).toContain('"paid":"500"');
    expect(paid(engine)).toBe(1);
    // Replaying the finished run's queue does nothing more.
    await settle(engine, e);
    expect(paid(engine)).toBe(1);
    expect(ok(engine, APPROVAL, { id }).actions.approval).toEqual({ status: 'APPROVED', decidedBy: 'alice' });
  });

  it('a checker’s no is final: the call never runs, the model hears APPROVAL_REJECTED', async () => {
    const { engine } = f;
    const before = paid(engine);
    const s = openSession(engine, 'alice');
    const e = send(engine, 'alice', s, 'pay 70');
    await settle(engine, e);
    const [approval] = approvalsOf(engine, e);
    expect(ok(engine, DECIDE('rejectCall'), { id: approval.approvalId }, 'checker').actions.rejectCall.status).toBe(
      'REJECTED',
    );
    expect(fails(engine, DECIDE('approveCall'), { id: approval.approvalId }, 'alice').code).toBe('BAD_REQUEST');
    const run = await settle(engine, e);
    expect(run.status).toBe('SUCCEEDED');
    expect(run.output.text).toContain('APPROVAL_REJECTED');
    expect(paid(engine)).toBe(before);
  });

  it('an expired approval cannot be approved, and its call never runs', async () => {
    const { engine } = f;
    const before = paid(engine);
    const s = openSession(engine, 'alice', 'hasty');
    const e = send(engine, 'alice', s, 'pay 9');
    expect((await settle(engine, e)).status).toBe('WAITING_APPROVAL');
    const [approval] = approvalsOf(engine, e);
    await new Promise((r) => setTimeout(r, 120));
    expect(fails(engine, DECIDE('approveCall'), { id: approval.approvalId }, 'alice').message).toContain('expired');
    const run = await settle(engine, e);
    expect(run.status).toBe('SUCCEEDED');
    expect(run.output.text).toContain('APPROVAL_EXPIRED');
    expect(ok(engine, APPROVAL, { id: approval.approvalId }).actions.approval.status).toBe('EXPIRED');
    expect(paid(engine)).toBe(before);
  });

  it('the same approval-needing call asked twice in one turn needs two yeses; each runs once', async () => {
    const { engine } = f;
    const before = paid(engine);
    const s = openSession(engine, 'alice');
    const e = send(engine, 'alice', s, 'pay twice 3');
    await settle(engine, e);
    const [first] = approvalsOf(engine, e);
    expect(approvalsOf(engine, e)).toHaveLength(1);
    ok(engine, DECIDE('approveCall'), { id: first.approvalId }, 'alice');
    expect((await settle(engine, e)).status).toBe('WAITING_APPROVAL');
    expect(paid(engine)).toBe(before + 1);
    const all = approvalsOf(engine, e);
    expect(all).toHaveLength(2);
    const second = all.find((a: any) => a.approvalId !== first.approvalId);
    expect(second.status).toBe('PENDING');
    ok(engine, DECIDE('approveCall'), { id: second.approvalId }, 'alice');
    const run = await settle(engine, e);
    expect(run.status).toBe('SUCCEEDED');
    expect(paid(engine)).toBe(before + 2);
  });

  it('alice’s cancel of her parked turn cancels the approval; a later yes is refused and nothing runs', async () => {
    const { engine } = f;
    const before = paid(engine);
    const s = openSession(engine, 'alice');
    const e = send(engine, 'alice', s, 'pay 11');
    await settle(engine, e);
    const [approval] = approvalsOf(engine, e);
    expect(ok(engine, CANCEL, { e }, 'alice').actions.cancelExecution.status).toBe('CANCELLED');
    expect(fails(engine, DECIDE('approveCall'), { id: approval.approvalId }, 'alice').code).toBe('BAD_REQUEST');
    expect((await settle(engine, e)).status).toBe('CANCELLED');
    expect(ok(engine, APPROVAL, { id: approval.approvalId }).actions.approval.status).toBe('CANCELLED');
    expect(paid(engine)).toBe(before);
  });

  it('a starter deleted while her call waits does not outlast into it: approved later, the call never runs', async () => {
    const { engine } = f;
    ok(
      engine,
      `mutation($pol: [PolicyInput!]!) { auth { createClient(input: {principal: "carol", name: "carol", policies: $pol}) { apiKey } } }`,
      { pol: CLIENT_POLICIES },
    );
    const before = paid(engine);
    const s = openSession(engine, 'carol');
    const e = send(engine, 'carol', s, 'pay 17');
    expect((await settle(engine, e)).status).toBe('WAITING_APPROVAL');
    const [approval] = approvalsOf(engine, e);
    ok(engine, `mutation { auth { deleteClient(principal: "carol") { principal } } }`);
    ok(engine, DECIDE('approveCall'), { id: approval.approvalId });
    const run = await settle(engine, e);
    expect(run.status).toBe('FAILED');
    expect(run.error.code).toBe('ACCESS_DENIED');
    expect(paid(engine)).toBe(before);
  });

  it('approved, then cancelled before the worker resumes it: the call never runs', async () => {
    const { engine } = f;
    const before = paid(engine);
    const s = openSession(engine, 'alice');
    const e = send(engine, 'alice', s, 'pay 13');
    await settle(engine, e);
    const [approval] = approvalsOf(engine, e);
    ok(engine, DECIDE('approveCall'), { id: approval.approvalId }, 'alice');
    expect(ok(engine, CANCEL, { e }, 'alice').actions.cancelExecution.status).toBe('CANCELLED');
    expect((await settle(engine, e)).status).toBe('CANCELLED');
    expect(paid(engine)).toBe(before);
  });
});

describe('the queue and session turns', () => {
  let f: Fixture;
  beforeAll(async () => {
    f = await fixture();
  });
  afterAll(async () => close(f));

  it('a turn waiting for approval holds back only its own session’s next turn, never mallory’s or alice’s other sessions', async () => {
    const { engine, model } = f;
    const s1 = openSession(engine, 'alice');
    const t1 = send(engine, 'alice', s1, 'pay 21');
    expect((await settle(engine, t1)).status).toBe('WAITING_APPROVAL');
    const t2 = send(engine, 'alice', s1, 'after the payment');
    // Mallory parks a turn of her own and queues behind it: that blocks only her session.
    const m1 = openSession(engine, 'mallory');
    const mt1 = send(engine, 'mallory', m1, 'pay 1');
    await settle(engine, mt1);
    const mt2 = send(engine, 'mallory', m1, 'stuck');
    const s2 = openSession(engine, 'alice');
    const other = await settle(engine, send(engine, 'alice', s2, 'other session'));
    expect(other.status).toBe('SUCCEEDED');
    const m2 = openSession(engine, 'mallory');
    expect((await settle(engine, send(engine, 'mallory', m2, 'mallory talks'))).status).toBe('SUCCEEDED');
    // The queued turns behind a parked one stay QUEUED and never reached the model.
    expect((await settle(engine, t2, 5)).status).toBe('QUEUED');
    expect((await settle(engine, mt2, 5)).status).toBe('QUEUED');
    expect(model.requests.some((r) => lastUserText(r) === 'after the payment' || lastUserText(r) === 'stuck')).toBe(
      false,
    );

    const [approval] = approvalsOf(engine, t1);
    ok(engine, DECIDE('approveCall'), { id: approval.approvalId }, 'alice');
    expect((await settle(engine, t1)).status).toBe('SUCCEEDED');
    expect((await settle(engine, t2)).status).toBe('SUCCEEDED');
    // Turn 2 ran after turn 1 ended and saw its answer.
    const turn2 = model.requests.find((r) => lastUserText(r) === 'after the payment')!;
    expect(turn2.messages.some((m) => m.role === 'assistant' && String((m as any).text).includes('"paid":"21"'))).toBe(
      true,
    );
    expect(
      ok(engine, SESSION, { s: s1 }, 'alice')
        .actions.session.messages.filter((m: any) => m.role === 'ASSISTANT')
        .map((m: any) => m.text),
    ).toEqual([expect.stringContaining('"paid":"21"'), 'heard: after the payment']);
    expect(paid(engine)).toBe(1);
    // Mallory's own session is still held by her own parked turn; cancelling it frees her next turn.
    expect(ok(engine, STATUS, { e: mt2 }).actions.execution.status).toBe('QUEUED');
    ok(engine, CANCEL, { e: mt1 }, 'mallory');
    expect((await settle(engine, mt2)).status).toBe('SUCCEEDED');
    expect(paid(engine)).toBe(1);
  });

  // WEAKNESS (low, correctness): a turn's history is every message of the session except its own
  // (runner.ts load(): `messages.filter(m => m.execution_id !== row.execution_id)`), so a turn that
  // runs while later messages are queued behind it sees those LATER messages as if they came
  // before its own: the model answers "first" having been told "second" already. README: a turn
  // "sees the session's history (the earlier messages, both sides) before the new one". Fix: keep
  // only messages with seq below the turn's own USER message (or created before the turn).
  // Was a weakness (low): a turn's history held the messages queued after it.
  it('a turn does not see messages sent after its own (queued behind it)', async () => {
    const { engine, model } = f;
    const s = openSession(engine, 'alice');
    const a = send(engine, 'alice', s, 'first question');
    const b = send(engine, 'alice', s, 'second question');
    await settle(engine, a);
    await settle(engine, b);
    const first = model.requests.find((r) => lastUserText(r) === 'first question')!;
    expect(first.messages.map((m) => (m as any).text)).not.toContain('second question');
  });

  it('closing a session cancels its turns that have not run, and takes no new message', async () => {
    // Was a design note: a turn already sent ran after its session closed. Closing cancels it now.
    const { engine } = f;
    const s = openSession(engine, 'alice');
    const e = send(engine, 'alice', s, 'never runs');
    ok(engine, CLOSE, { s }, 'alice');
    expect(fails(engine, SEND, { s, m: 'late', t: 'late' }, 'alice').message).toContain('CLOSED');
    expect((await settle(engine, e)).status).toBe('CANCELLED');
  });
});

describe('sessionHistoryMax trimming', () => {
  let f: Fixture;
  beforeAll(async () => {
    f = await fixture({ sessionHistoryMax: 2 });
  });
  afterAll(async () => close(f));

  it('a message trimmed while its turn is queued: its turn still runs once; re-sending its messageId starts nothing new', async () => {
    const { engine } = f;
    const s = openSession(engine, 'alice');
    const t1 = send(engine, 'alice', s, 'pay 5', 'one');
    send(engine, 'alice', s, 'two', 'two');
    send(engine, 'alice', s, 'three', 'three');
    // 'one' was trimmed from the record, though its turn has not run yet.
    expect(ok(engine, SESSION, { s }, 'alice').actions.session.messages.map((m: any) => m.text)).toEqual([
      'two',
      'three',
    ]);
    // A retry of the trimmed message claims no second turn (whatever it answers: see the next test).
    gql(engine, SEND, { s, m: 'one', t: 'pay 5' }, 'alice');
    expect((await settle(engine, t1)).status).toBe('WAITING_APPROVAL');
    const [approval] = approvalsOf(engine, t1);
    ok(engine, DECIDE('approveCall'), { id: approval.approvalId }, 'alice');
    expect((await settle(engine, t1)).status).toBe('SUCCEEDED');
    const turns = engine.db
      .prepare(`SELECT execution_id, status FROM executions WHERE session_id = ?`)
      .all(s) as Array<{ status: string }>;
    for (const t of turns) expect((await settle(engine, (t as any).execution_id)).status).toBe('SUCCEEDED');
    expect(turns).toHaveLength(3);
    expect(paid(engine)).toBe(1);
    expect(ok(engine, SESSION, { s }, 'alice').actions.session.messages).toHaveLength(2);
  });

  // WEAKNESS (low): sendMessage is "idempotent by messageId (the same id and text: the same
  // message)", but the idempotency lookup reads session_messages, which sessionHistoryMax trims. A
  // client retrying a message (lost response) after it was trimmed gets ALREADY_EXISTS with SQLite's
  // "UNIQUE constraint failed: executions.execution_id" instead of its message; no second turn runs
  // (the derived turn id collides), so the ledger is safe. Fix: on a miss, look the derived turn id
  // up in executions and answer from it (or keep message ids beyond the trimmed text).
  // Was a weakness (low): the retry of a trimmed message failed with a raw UNIQUE constraint error.
  it('re-sending a message trimmed from the history answers the same turn (idempotent by messageId)', () => {
    const { engine } = f;
    const s = openSession(engine, 'alice');
    const t1 = send(engine, 'alice', s, 'hello', 'h1');
    send(engine, 'alice', s, 'b', 'h2');
    send(engine, 'alice', s, 'c', 'h3');
    expect(ok(engine, SEND, { s, m: 'h1', t: 'hello' }, 'alice').actions.sendMessage.execution.executionId).toBe(t1);
  });
});

describe('skills', () => {
  let f: Fixture;
  const BODY = 'SECRET PLAYBOOK: the override code is 7331.';
  beforeAll(async () => {
    f = await fixture();
    const { engine } = f;
    ok(
      engine,
      `mutation($id: UUID!, $input: SkillInput!) { actions { createSkill(id: $id, input: $input) { version } } }`,
      {
        id: sid(70),
        input: { name: 'secret_playbook', description: 'Internal guidance.', body: BODY, tools: [] },
      },
    );
    ok(
      engine,
      `mutation($id: UUID!, $input: SkillInput!) { actions { createSkill(id: $id, input: $input) { version } } }`,
      {
        id: sid(71),
        input: { name: 'public_help', description: 'Public guidance.', body: 'Be polite.', tools: [] },
      },
    );
    // mdev builds agents: it may create actions and start them, but may read no skill.
    ok(
      engine,
      `mutation($pol: [PolicyInput!]!) { auth { createClient(input: {principal: "mdev", name: "mdev", policies: $pol}) { apiKey } } }`,
      {
        pol: [...CLIENT_POLICIES, { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Action'] }],
      },
    );
    ok(engine, CREATE, {
      id: sid(72),
      input: {
        name: 'helper',
        kind: 'agent',
        config: { provider: 'local', model: 'm', prompt: '{{message}}', maxTurns: 3 },
        tool: {
          description: 'Helps.',
          inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] },
        },
        skills: [{ name: 'public_help' }],
        policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
      },
    });
  });
  afterAll(async () => close(f));

  it('load_skill of a skill the agent does not declare is NOT_FOUND, and its body is never returned', async () => {
    const { engine } = f;
    const e = sid(++seq);
    ok(engine, START, { n: 'helper', e, i: { message: 'skill secret_playbook' } }, 'mallory');
    const run = await settle(engine, e);
    expect(run.status).toBe('SUCCEEDED');
    expect(run.output.text).toContain('NOT_FOUND');
    expect(JSON.stringify(run)).not.toContain('7331');
    expect(
      JSON.stringify(
        engine.db.prepare('SELECT output FROM executions WHERE root_id = ? OR execution_id = ?').all(e, e),
      ),
    ).not.toContain('7331');
  });

  it('mdev may not read the secret skill directly', () => {
    expect(fails(f.engine, `{ actions { skill(name: "secret_playbook") { body } } }`, {}, 'mdev').code).toBe(
      'ACCESS_DENIED',
    );
  });

  // Was a weakness (medium): declaring a skill did not check SELECT on it, so a client denied the
  // skill read it through an agent of its own. Declaring is reading now (createAction/updateAction).
  it('a client without SELECT on actions.Skill cannot read a skill through an agent of its own', async () => {
    const { engine } = f;
    const created = gql(
      engine,
      CREATE,
      {
        id: sid(73),
        input: {
          name: 'peek',
          kind: 'agent',
          config: { provider: 'local', model: 'm', prompt: '{{message}}', maxTurns: 3 },
          tool: {
            description: 'Peeks.',
            inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] },
          },
          skills: [{ name: 'secret_playbook' }],
          policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
        },
      },
      'mdev',
    );
    expect(created.errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
    if (created.errors) return;
    const e = sid(++seq);
    ok(engine, START, { n: 'peek', e, i: { message: 'skill secret_playbook' } }, 'mdev');
    const run = await settle(engine, e);
    const tree = ok(
      engine,
      `query($e: UUID!) { actions { execution(executionId: $e) { output children { children { actionName output } } } } }`,
      { e },
      'mdev',
    );
    expect(JSON.stringify(tree)).not.toContain('7331');
    expect(run.status).toBeDefined();
  });
});

describe('a session opened by an alias of the agent (hostile review of issue 36)', () => {
  let f: Fixture;
  beforeAll(async () => {
    f = await fixture();
    // payer answers to "cashbox" too; eve may open sessions with anything but payer.
    ok(
      f.engine,
      'mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) { version } } }',
      {
        id: sid(2),
        input: { tool: { aliases: ['cashbox'] } },
      },
    );
    ok(
      f.engine,
      `mutation($p: String!, $pol: [PolicyInput!]!) { auth { createClient(input: {principal: $p, name: $p, policies: $pol}) { apiKey } } }`,
      {
        p: 'eve',
        pol: [
          ...CLIENT_POLICIES,
          {
            effect: 'DENY',
            actions: ['INSERT'],
            resources: ['actions.Session'],
            assertions: { not_payer: "context.document.agent == 'payer'" },
          },
        ],
      },
    );
  });
  afterAll(async () => close(f));

  it('is guarded as the agent it names: a DENY on payer holds for cashbox', () => {
    const byName = fails(f.engine, CREATE_SESSION, { s: sid(9001), a: 'payer', i: {} }, 'eve');
    expect(byName.message).toBe('INSERT on actions.Session refused by client eve: policy 6 denies it');
    const byAlias = fails(f.engine, CREATE_SESSION, { s: sid(9002), a: 'cashbox', i: {} }, 'eve');
    expect(byAlias).toEqual(byName);
    expect(fails(f.engine, SESSION, { s: sid(9002) }).code).toBe('NOT_FOUND');
  });
});
