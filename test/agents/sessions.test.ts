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
import { fails, newEngine, ok } from '../helpers/engine.js';

const BANK = join(import.meta.dirname, '..', '..', 'examples', 'bank');
const ALICE = 'b0000000-0000-4000-8000-000000000011';
const BOB = 'b0000000-0000-4000-8000-000000000012';
const tx = (n: number) => `c0000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
let seq = 5000;

const CREATE_SESSION = `mutation($s: UUID!, $a: String!, $i: JSON) { actions { createSession(sessionId: $s, agent: $a, input: $i) { sessionId status agent agentVersion } } }`;
const SEND = `mutation($s: UUID!, $m: String!, $t: String!) { actions { sendMessage(sessionId: $s, messageId: $m, text: $t) { messageId role text execution { executionId status sessionId } } } }`;
const SESSION = `query($s: UUID!) { actions { session(sessionId: $s) { status messages { role text execution { executionId status } } } } }`;
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const TREE = `query($e: UUID!) { actions { execution(executionId: $e) { status kind output error { code message } cancelRequested
  children { kind status children { kind actionName status input output error { code message } } } } } }`;
const APPROVALS = `query($s: ApprovalStatus) { actions { approvals(first: 50, where: {status: $s}) { nodes { approvalId executionId tool input status requestedBy decidedBy reason expires } } } }`;
const DECIDE = (verb: 'approveCall' | 'rejectCall') =>
  `mutation($id: UUID!, $r: String) { actions { ${verb}(approvalId: $id, reason: $r) { approvalId status decidedBy reason } } }`;

function transactions(engine: Engine): number {
  return (engine.db.prepare('SELECT count(*) AS n FROM transactions').get() as { n: number }).n;
}
function available(engine: Engine, account: string): number {
  return Number(
    ok(engine, `{ balance(accountId: "${account}") { available(layer: PENDING) { normalBalance { units } } } }`).balance
      .available.normalBalance.units,
  );
}

/** Run the queue until the execution is no longer QUEUED or RUNNING (or it parks). */
async function settle(engine: Engine, executionId: string): Promise<any> {
  const worker = engine.createWorker();
  for (let i = 0; i < 300; i++) {
    await worker.drainAll();
    const tree = ok(engine, TREE, { e: executionId }).actions.execution;
    if (!['QUEUED', 'RUNNING'].includes(tree.status)) return tree;
    await new Promise((r) => setTimeout(r, 10));
  }
  return ok(engine, TREE, { e: executionId }).actions.execution;
}

async function bank(rules: Rule[], limits: Record<string, number> = {}) {
  const model = await startScriptedModel({ rules });
  const engine = await newEngine({
    path: join(mkdtempSync(join(tmpdir(), 'tally-sessions-')), 'bank.db'),
    limits,
    providers: [{ name: 'local', format: 'openai', baseUrl: `${model.url}/v1`, models: ['scripted-teller', 'other'] }],
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
      a: { transactionId: tx(1), tranCode: 'DEPOSIT', params: { account: ALICE, amount: '1000' } },
      b: { transactionId: tx(2), tranCode: 'DEPOSIT', params: { account: BOB, amount: '50' } },
    },
  );
  return { engine, model };
}

async function tellerRules(): Promise<Rule[]> {
  return ((await import(join(BANK, 'model', 'teller.mjs'))) as { default: Rule[] }).default;
}

describe('a session with the bank teller, for Alice', () => {
  let engine: Engine;
  let model: ScriptedModel;
  beforeAll(async () => {
    ({ engine, model } = await bank(await tellerRules()));
  });
  afterAll(async () => {
    engine.close();
    await model.close();
  });

  it('two turns of conversation: each sees the history, both move only Alice’s money', async () => {
    const s = tx(++seq);
    expect(
      ok(engine, CREATE_SESSION, { s, a: 'teller', i: { account_id: ALICE } }, 'operator').actions.createSession,
    ).toMatchObject({ status: 'OPEN', agent: 'teller', agentVersion: 1 });
    const [alice, bob] = [available(engine, ALICE), available(engine, BOB)];
    const first = ok(engine, SEND, { s, m: 'm1', t: 'move 5 from Alice to Bob' }, 'operator').actions.sendMessage;
    expect(first).toMatchObject({ role: 'USER', execution: { status: 'QUEUED', sessionId: s } });
    expect(await settle(engine, first.execution.executionId)).toMatchObject({ status: 'SUCCEEDED' });
    // The person asks for Bob's money to move: the sender is the session's account, whatever is said.
    const second = ok(engine, SEND, { s, m: 'm2', t: 'now move 7 from Bob to Bob' }, 'operator').actions.sendMessage;
    const run = await settle(engine, second.execution.executionId);
    expect(run.status).toBe('SUCCEEDED');
    const transfer = run.children[1].children[0];
    expect(transfer).toMatchObject({ actionName: 'transfer', status: 'SUCCEEDED', input: { from: ALICE, to: BOB } });
    expect([available(engine, ALICE), available(engine, BOB)]).toEqual([alice - 12, bob + 12]);
    // The second turn's first model request carried the first exchange.
    const asked = model.requests.filter((r) =>
      r.messages.some((m) => m.role === 'user' && m.text === 'now move 7 from Bob to Bob'),
    )[0]!;
    expect(asked.messages.slice(0, 2)).toEqual([
      { role: 'user', text: 'move 5 from Alice to Bob' },
      { role: 'assistant', text: expect.stringContaining('Moved 5'), toolCalls: [] },
    ]);
    expect((asked.tools.find((t) => t.name === 'transfer')!.inputSchema as any).properties).not.toHaveProperty('from');
    const session = ok(engine, SESSION, { s }, 'operator').actions.session;
    expect(session.messages.map((m: any) => m.role)).toEqual(['USER', 'ASSISTANT', 'USER', 'ASSISTANT']);
    expect(session.messages[3].text).toContain('Moved 7 from Bob to Bob');
  });

  it('sendMessage is idempotent by messageId; another text is a conflict; another client sees no session; closed sessions take nothing', async () => {
    const s = tx(++seq);
    ok(engine, CREATE_SESSION, { s, a: 'teller', i: { account_id: ALICE } }, 'operator');
    const sent = ok(engine, SEND, { s, m: 'x1', t: 'hello' }, 'operator').actions.sendMessage;
    expect(ok(engine, SEND, { s, m: 'x1', t: 'hello' }, 'operator').actions.sendMessage.execution.executionId).toBe(
      sent.execution.executionId,
    );
    expect(fails(engine, SEND, { s, m: 'x1', t: 'hello again' }, 'operator').code).toBe('EXECUTION_ID_CONFLICT');
    expect(fails(engine, SEND, { s, m: 'x2', t: 'hi' }, 'auditor')).toMatchObject({ code: 'NOT_FOUND' });
    await settle(engine, sent.execution.executionId);
    ok(engine, 'mutation($s: UUID!) { actions { closeSession(sessionId: $s) { status } } }', { s }, 'operator');
    expect(fails(engine, SEND, { s, m: 'x3', t: 'still there?' }, 'operator').message).toContain('is CLOSED');
  });

  it('a started execution cannot open a session; an agent that needs one cannot be started without one', async () => {
    ok(engine, CREATE, {
      id: tx(8001),
      input: {
        name: 'opens_session',
        config: {
          runtime: 'javascript',
          src: `function run(e) { const r = graphql('mutation { actions { createSession(sessionId: "${tx(8002)}", agent: "teller", input: {}) { sessionId } } }'); return r; }`,
        },
        policies: [{ effect: 'ALLOW', actions: ['INSERT', 'SELECT'], resources: ['*'] }],
      },
    });
    const out = ok(
      engine,
      `mutation { actions { invokeAction(name: "opens_session", input: {executionId: "${tx(++seq)}", actionVersion: 1, input: {}}) { status error { code message } } } }`,
    ).actions.invokeAction;
    expect(out).toMatchObject({ status: 'FAILED', error: { code: 'ACCESS_DENIED' } });
    expect(out.error.message).toContain('createSession cannot be done from inside a tool call');

    ok(engine, CREATE, {
      id: tx(8003),
      input: {
        name: 'whoami',
        config: {
          runtime: 'javascript',
          src: 'function run(e) { return { account: e.data.account, session: e.data.session }; }',
        },
        tool: {
          description: 'Says who the session is for.',
          inputSchema: { type: 'object', properties: { account: { type: 'string' }, session: { type: 'string' } } },
        },
        policies: [],
      },
    });
    ok(engine, CREATE, {
      id: tx(8004),
      input: {
        name: 'concierge',
        kind: 'agent',
        config: { provider: 'local', model: 'other', prompt: '{{message}}' },
        tool: {
          description: 'Talks about one account.',
          inputSchema: { type: 'object', properties: { message: { type: 'string' }, account_id: { type: 'string' } } },
          sessionSchema: {
            type: 'object',
            properties: { account_id: { type: 'string', format: 'uuid' } },
            required: ['account_id'],
            additionalProperties: false,
          },
        },
        tools: [{ name: 'whoami', version: 1, input: { account: 'session.input.account_id', session: 'session.id' } }],
        policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
      },
    });
    const refused = fails(
      engine,
      `mutation { actions { startAction(name: "concierge", input: {executionId: "${tx(++seq)}", input: {message: "hi"}}) { status } } }`,
      {},
      'operator',
    );
    expect(refused.message).toContain('runs only in a session');
    expect(refused.hint).toContain('createSession');
    expect(
      fails(engine, CREATE_SESSION, { s: tx(++seq), a: 'concierge', i: { account: 'nope' } }, 'operator'),
    ).toMatchObject({ code: 'INPUT_INVALID' });
    // The word in a string, or a field named session, is not the session variable: such an agent starts.
    ok(engine, CREATE, {
      id: tx(8005),
      input: {
        name: 'plain_agent',
        kind: 'agent',
        config: { provider: 'local', model: 'other' },
        tool: { description: 'Not a session agent.', inputSchema: { type: 'object' } },
        tools: [
          { name: 'whoami', version: 1, input: { account: "'session notes'", session: 'execution.input.session' } },
        ],
        policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
      },
    });
    expect(
      ok(
        engine,
        `mutation { actions { startAction(name: "plain_agent", input: {executionId: "${tx(++seq)}", input: {}}) { status } } }`,
        {},
        'operator',
      ).actions.startAction.status,
    ).toBe('QUEUED');

    // In a session, the reference reads session.id and session.input; the model cannot set either.
    model.setRules([
      (request) =>
        toolResults(request).length === 0
          ? { toolCalls: [{ name: 'whoami', arguments: { account: BOB, session: 'forged' } }] }
          : { text: toolResults(request)[0]!.content },
    ]);
    try {
      const s = tx(++seq);
      ok(engine, CREATE_SESSION, { s, a: 'concierge', i: { account_id: ALICE } }, 'operator');
      const sent = ok(engine, SEND, { s, m: 'c1', t: 'who am I?' }, 'operator').actions.sendMessage;
      const run = await settle(engine, sent.execution.executionId);
      expect(JSON.parse(run.output.text)).toEqual({ account: ALICE, session: s });
    } finally {
      model.setRules(await tellerRules());
    }
  });

  it('sessionMessageCharsMax and approvalTimeoutMsMax are crossed with a clear refusal', async () => {
    const s = tx(++seq);
    ok(engine, CREATE_SESSION, { s, a: 'teller', i: { account_id: ALICE } }, 'operator');
    const long = fails(engine, SEND, { s, m: 'long', t: 'x'.repeat(8001) }, 'operator');
    expect(long).toMatchObject({ code: 'LIMIT_EXCEEDED' });
    expect(long.message).toContain('sessionMessageCharsMax is 8000');
    const slow = fails(engine, CREATE, {
      id: tx(8100),
      input: {
        name: 'slow_approver',
        kind: 'agent',
        config: { provider: 'local', model: 'other' },
        tools: [{ name: 'balance', version: 1, approval: { timeoutMs: 86_400_001 } }],
      },
    });
    expect(slow).toMatchObject({ code: 'LIMIT_EXCEEDED' });
    expect(slow.message).toContain('approvalTimeoutMsMax');
    expect(
      fails(engine, CREATE, {
        id: tx(8101),
        input: {
          name: 'bad_rule',
          kind: 'agent',
          config: { provider: 'local', model: 'other' },
          tools: [{ name: 'balance', version: 1, approval: { when: 'input.amount >' } }],
        },
      }).message,
    ).toContain('approval.when');
    expect(
      fails(engine, CREATE, {
        id: tx(8102),
        input: {
          name: 'tool_with_rule',
          config: { runtime: 'javascript', src: 'function run() { return {}; }' },
          tools: [{ name: 'balance', version: 1, approval: {} }],
        },
      }).message,
    ).toContain("approval is for an agent's references");
  });

  it('sessionHistoryMax keeps the newest messages; sessionIdleMs expires an unused session', async () => {
    const { engine: small, model: m2 } = await bank([() => ({ text: 'noted' })], {
      sessionHistoryMax: 3,
      sessionIdleMs: 300,
    });
    try {
      const s = tx(++seq);
      ok(small, CREATE_SESSION, { s, a: 'teller', i: { account_id: ALICE } }, 'operator');
      for (const [m, t] of [
        ['a', 'one'],
        ['b', 'two'],
      ] as const)
        await settle(small, ok(small, SEND, { s, m, t }, 'operator').actions.sendMessage.execution.executionId);
      expect(ok(small, SESSION, { s }, 'operator').actions.session.messages.map((x: any) => x.text)).toEqual([
        'noted',
        'two',
        'noted',
      ]);
      await new Promise((r) => setTimeout(r, 350));
      expect(ok(small, SESSION, { s }, 'operator').actions.session.status).toBe('EXPIRED');
      expect(fails(small, SEND, { s, m: 'c', t: 'three' }, 'operator').message).toContain('is EXPIRED');
    } finally {
      small.close();
      await m2.close();
    }
  });
});

describe('approvals: a person’s yes before a risky call', () => {
  let engine: Engine;
  let model: ScriptedModel;
  const threshold = (timeoutMs = 60_000) => ({ when: 'decimal(input.amount) > 100', timeoutMs });
  const payer = (id: number, name: string, timeoutMs?: number) =>
    ok(engine, CREATE, {
      id: tx(id),
      input: {
        name,
        kind: 'agent',
        config: { provider: 'local', model: 'other', prompt: 'pay {{amount}}' },
        tool: {
          description: 'Pays out.',
          inputSchema: { type: 'object', properties: { amount: { type: 'string' } }, required: ['amount'] },
        },
        tools: [{ name: 'pay_out', version: 1, approval: threshold(timeoutMs) }],
        policies: [
          { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
          { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
        ],
        execution: { maxAttempts: 3, backoff: { initialMs: 1, multiplier: 1, maxMs: 1 } },
      },
    });
  const start = (name: string, amount: string, principal = 'operator') => {
    const e = tx(++seq);
    ok(
      engine,
      `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { status } } }`,
      { n: name, e, i: { amount } },
      principal,
    );
    return e;
  };
  const pending = (e: string) =>
    ok(engine, APPROVALS, { s: 'PENDING' }).actions.approvals.nodes.filter((a: any) => a.executionId === e);

  beforeAll(async () => {
    ({ engine, model } = await bank([
      (request) => {
        const results = toolResults(request);
        if (results.length === 0)
          return {
            toolCalls: [
              {
                name: 'pay_out',
                arguments: { amount: /pay (\S+)/.exec((request.messages[0] as { text: string }).text)![1] },
              },
            ],
          };
        return { text: `result: ${results[0]!.content}` };
      },
    ]));
    ok(engine, CREATE, {
      id: tx(9001),
      input: {
        name: 'pay_out',
        config: {
          runtime: 'javascript',
          src: `function run(event) {
  graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }',
    { i: { transactionId: cel('uuid.New()'), tranCode: 'TRANSFER', params: { from: '${ALICE}', to: '${BOB}', amount: event.data.amount } } });
  return { paid: event.data.amount };
}`,
        },
        tool: {
          description: 'Pay an amount to Bob.',
          inputSchema: { type: 'object', properties: { amount: { type: 'string' } }, required: ['amount'] },
        },
        policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }],
      },
    });
    payer(9002, 'payer');
    payer(9003, 'hasty_payer', 300);
  });
  afterAll(async () => {
    engine.close();
    await model.close();
  });

  it('over the threshold the call parks; approved, it runs once, under the starter’s authority; the decision records who made it', async () => {
    const before = transactions(engine);
    const e = start('payer', '150');
    expect(await settle(engine, e)).toMatchObject({ status: 'WAITING_APPROVAL' });
    const [approval] = pending(e);
    expect(approval).toMatchObject({
      tool: 'pay_out',
      input: { amount: '150' },
      status: 'PENDING',
      requestedBy: 'operator',
    });
    // The queue does not poll a parked run: nothing is due until its approval expires.
    expect(engine.createWorker().runOnce()).toBeNull();
    expect(transactions(engine)).toBe(before);
    // The auditor may read it but not decide it.
    expect(fails(engine, DECIDE('approveCall'), { id: approval.approvalId }, 'auditor').code).toBe('ACCESS_DENIED');
    expect(
      ok(engine, DECIDE('approveCall'), { id: approval.approvalId, r: 'checked the invoice' }, 'operator').actions
        .approveCall,
    ).toMatchObject({ status: 'APPROVED', decidedBy: 'operator', reason: 'checked the invoice' });
    const done = await settle(engine, e);
    expect(done).toMatchObject({ status: 'SUCCEEDED', output: { text: 'result: {"paid":"150"}' } });
    expect(transactions(engine)).toBe(before + 1);
    expect(fails(engine, DECIDE('rejectCall'), { id: approval.approvalId }).message).toContain('is APPROVED');
  });

  it('rejected, the call never runs and the model is told; under the threshold no approval is asked', async () => {
    const before = transactions(engine);
    const e = start('payer', '500');
    await settle(engine, e);
    const [approval] = pending(e);
    ok(engine, DECIDE('rejectCall'), { id: approval.approvalId, r: 'too much' }, 'operator');
    const done = await settle(engine, e);
    expect(done.status).toBe('SUCCEEDED');
    expect(done.children[0].children[0]).toMatchObject({
      actionName: 'pay_out',
      status: 'FAILED',
      error: { code: 'APPROVAL_REJECTED' },
    });
    expect(done.output.text).toContain('operator rejected this call of pay_out: too much');
    expect(transactions(engine)).toBe(before);
    const small = await settle(engine, start('payer', '20'));
    expect(small).toMatchObject({ status: 'SUCCEEDED', output: { text: 'result: {"paid":"20"}' } });
    expect(transactions(engine)).toBe(before + 1);
  });

  it('nobody decides: at its expiry the run wakes, the approval is EXPIRED and the model is told', async () => {
    const before = transactions(engine);
    const e = start('hasty_payer', '900');
    expect(await settle(engine, e)).toMatchObject({ status: 'WAITING_APPROVAL' });
    await new Promise((r) => setTimeout(r, 350));
    const done = await settle(engine, e);
    expect(done.children[0].children[0]).toMatchObject({ status: 'FAILED', error: { code: 'APPROVAL_EXPIRED' } });
    expect(done.output.text).toContain('expired');
    expect(ok(engine, APPROVALS, { s: 'EXPIRED' }).actions.approvals.nodes.some((a: any) => a.executionId === e)).toBe(
      true,
    );
    expect(transactions(engine)).toBe(before);
  });

  it('a policy can keep a client from approving its own calls; cancelling a parked run cancels its approval', async () => {
    ok(
      engine,
      `mutation($p: [PolicyInput!]!) { auth { createClient(input: {principal: "maker", name: "Maker", policies: $p}) { apiKey } } }`,
      {
        p: [
          { effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] },
          { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
          {
            effect: 'ALLOW',
            actions: ['UPDATE'],
            resources: ['actions.Execution', 'actions.Approval'],
            assertions: {
              not_mine:
                '!has(context.document.requestedBy) || context.document.requestedBy != context.auth.claims.principal',
            },
          },
          { effect: 'ALLOW', actions: ['INSERT', 'UPDATE'], resources: ['financial.*'] },
        ],
      },
    );
    const before = transactions(engine);
    const e = start('payer', '300', 'maker');
    await settle(engine, e);
    const [approval] = pending(e);
    expect(approval.requestedBy).toBe('maker');
    expect(fails(engine, DECIDE('approveCall'), { id: approval.approvalId }, 'maker').code).toBe('ACCESS_DENIED');
    const cancelled = ok(
      engine,
      `mutation($e: UUID!) { actions { cancelExecution(executionId: $e) { status } } }`,
      { e },
      'maker',
    ).actions.cancelExecution;
    expect(cancelled.status).toBe('CANCELLED');
    expect(
      ok(engine, `query($id: UUID!) { actions { approval(approvalId: $id) { status } } }`, { id: approval.approvalId })
        .actions.approval.status,
    ).toBe('CANCELLED');
    expect(await settle(engine, e)).toMatchObject({ status: 'CANCELLED' });
    expect(transactions(engine)).toBe(before);
  });
});

describe('cancelling a running agent', () => {
  it('a session turn cancelled while its model is thinking stops before its next tool call', async () => {
    let asked = 0;
    const { engine, model } = await bank([
      async () => {
        asked++;
        await new Promise((r) => setTimeout(r, 1500));
        return { toolCalls: [{ name: 'balance', arguments: { code: 'bob' } }] };
      },
    ]);
    try {
      const s = tx(++seq);
      ok(engine, CREATE_SESSION, { s, a: 'teller', i: { account_id: ALICE } }, 'operator');
      const e = ok(engine, SEND, { s, m: 'k1', t: 'what does Bob have?' }, 'operator').actions.sendMessage.execution
        .executionId;
      const worker = engine.createWorker({ pollMs: 10 });
      worker.start();
      for (let i = 0; i < 300 && asked === 0; i++) await new Promise((r) => setTimeout(r, 10));
      expect(ok(engine, TREE, { e }).actions.execution.status).toBe('RUNNING');
      expect(
        ok(
          engine,
          `mutation($e: UUID!) { actions { cancelExecution(executionId: $e) { status cancelRequested } } }`,
          { e },
          'operator',
        ).actions.cancelExecution,
      ).toEqual({ status: 'RUNNING', cancelRequested: true });
      for (let i = 0; i < 300 && ok(engine, TREE, { e }).actions.execution.status === 'RUNNING'; i++)
        await new Promise((r) => setTimeout(r, 10));
      await worker.stop();
      const run = ok(engine, TREE, { e }).actions.execution;
      expect(run.status).toBe('CANCELLED');
      expect(run.children.flatMap((t: any) => t.children)).toEqual([]);
      expect(asked).toBe(1);
      // The session goes on: the next message is a new turn.
      expect(ok(engine, SEND, { s, m: 'k2', t: 'never mind' }, 'operator').actions.sendMessage.execution.status).toBe(
        'QUEUED',
      );
    } finally {
      engine.close();
      await model.close();
    }
  });
});
