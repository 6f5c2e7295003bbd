import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  lastMessage,
  lastUserText,
  type ScriptedModel,
  startScriptedModel,
} from '../../examples/scripted-model/server.mjs';

/**
 * `tally chat`, `tally approvals`, `tally approve` and `tally reject` as a person meets them: the CLI
 * in a child process, over a pipe (the non-terminal mode), against a database file (the chat runs
 * its own worker) or a server, with the scripted model standing in for a provider.
 */
const ROOT = join(import.meta.dirname, '..', '..');
const BIN = join(ROOT, 'bin', 'tally.mjs');
const ADMIN_KEY = 'tly_cli-chat-test-admin-key';
const id = (n: number) => `c0000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

interface Run {
  status: number | null;
  out: string;
  err: string;
}

let scratch: string;
let config: string;
let model: ScriptedModel;

function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of ['TALLY_SERVER', 'TALLY_API_KEY', 'TALLY_ADMIN_KEY', 'TALLY_DB', 'PORT', 'HOST', 'TALLY_CONFIG'])
    delete env[name];
  return { ...env, TALLY_CONFIG: config, ...extra };
}

function tally(args: string[], options: { env?: Record<string, string>; stdin?: string } = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: scratch,
      env: cleanEnv(options.env),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.stdin.end(options.stdin ?? '');
    child.once('error', reject);
    child.once('close', (status) => resolve({ status, out, err }));
  });
}

/** tally in a child process whose output can be watched while it runs. */
function spawnTally(args: string[], options: { env?: Record<string, string>; stdin?: string } = {}) {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: scratch,
    env: cleanEnv(options.env),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const run: Run = { status: null, out: '', err: '' };
  child.stdout.on('data', (chunk: Buffer) => (run.out += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (run.err += chunk.toString()));
  child.stdin.end(options.stdin ?? '');
  const done = new Promise<Run>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (status) => resolve({ ...run, status }));
  });
  return { run, done };
}

/** The actions of these tests: `x` (doubles n) and `helper`, an agent whose every call of x needs a person's approval. */
const SETUP = `mutation {
  actions {
    x: createAction(id: "${id(1)}", input: {
      name: "x", kind: "tool", config: {runtime: "javascript", src: "function run(event) { return { doubled: event.data.n * 2 }; }"},
      tool: {description: "Doubles n.", inputSchema: {type: "object", properties: {n: {type: "number"}}, required: ["n"]}}
    }) { version }
    helper: createAction(id: "${id(2)}", input: {
      name: "helper", kind: "agent",
      config: {provider: "local", model: "m", instructions: "You help.", prompt: "{{message}}"},
      tool: {description: "Helps.", inputSchema: {type: "object", properties: {message: {type: "string"}, topic: {type: "string"}}, required: ["message"]}},
      tools: [{name: "x", version: 1, approval: {when: null, timeoutMs: 60000}}],
      policies: [{effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]}]
    }) { version }
  }
}`;

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'tally-chat-'));
  // "hello" is answered at once; a message that mentions x asks for x(n: 21), then says what it
  // returned (or that it did not run).
  model = await startScriptedModel({
    rules: [
      (req) => {
        const last = lastMessage(req);
        if (last?.role === 'tool' && String(last.content).includes('counted'))
          return { text: `y answered ${last.content}` };
        if (last?.role === 'tool') return { text: `x answered ${last.content}` };
        const text = lastUserText(req) ?? '';
        if (/\bcount\b/.test(text)) return { toolCalls: [{ name: 'y', arguments: { n: 2 } }] };
        if (/\bx\b/.test(text)) return { toolCalls: [{ name: 'x', arguments: { n: 21 } }] };
        return { text: `hi there, you said: ${text}` };
      },
    ],
  });
  config = join(scratch, 'tally-config.json');
  writeFileSync(
    config,
    JSON.stringify({ providers: [{ name: 'local', format: 'openai', baseUrl: `${model.url}/v1`, models: ['m'] }] }),
  );
}, 30_000);

afterAll(async () => {
  await model?.close();
});

/** A fresh database with the actions of these tests. */
async function freshDb(name: string): Promise<string> {
  const db = join(scratch, `${name}.db`);
  const migrated = await tally(['migrate', '--db', db]);
  expect(migrated.status, migrated.err).toBe(0);
  const setup = await tally(['gql', '-', '--db', db], { stdin: SETUP });
  expect(setup.status, setup.out + setup.err).toBe(0);
  return db;
}

describe('tally chat over a pipe', () => {
  it('with --db: opens a session, answers, shows the call waiting for approval, takes "y looks fine", shows the call and the answer, closes on EOF', async () => {
    const db = await freshDb('chat');
    const run = await tally(['chat', 'helper', '--db', db, '--input', '{"topic": "numbers"}'], {
      stdin: 'hello\nplease run x\ny looks fine\n',
    });
    expect(run.status, run.out + run.err).toBe(0);
    const out = run.out;
    expect(out).toMatch(/^session [0-9a-f-]{36} with helper@1 /);
    expect(out).toContain('helper> hi there, you said: hello');
    expect(out).toMatch(/ {2}\? x@1\(\{"n":21\}\) needs approval [0-9a-f-]{36}, expires \S+Z\n/);
    expect(out).toContain('approve? [y/N] reason: y looks fine\n');
    expect(out).toContain('  ✓ approved: looks fine\n');
    expect(out).toContain('  → x({"n":21})\n');
    expect(out).toContain('  ← x: {"doubled":42}\n');
    expect(out).toContain('helper> x answered {"doubled":42}');
    expect(out).toMatch(/session [0-9a-f-]{36} closed\n$/);
    // In that order, and no prompt echoed on a pipe.
    const order = [
      'helper> hi there',
      'needs approval',
      'approve? [y/N]',
      '✓ approved',
      '→ x(',
      '← x:',
      'helper> x answered',
      'closed',
    ].map((s) => out.indexOf(s));
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(out).not.toContain('you> ');
    expect(run.err).toBe('');

    // Resumed: its history first; the session is closed, so that is all.
    const sessionId = /^session ([0-9a-f-]{36})/.exec(out)![1]!;
    const resumed = await tally(['chat', '--session', sessionId, '--db', db], { stdin: '' });
    expect(resumed.status).toBe(1);
    expect(resumed.out).toContain('you> hello\n');
    expect(resumed.out).toContain('you> please run x\n');
    expect(resumed.err).toContain('is CLOSED');
  }, 60_000);

  it('a call rejected with "n …" never runs; the model is told and answers; /quit closes the session', async () => {
    const db = await freshDb('reject');
    const run = await tally(['chat', 'helper', '--db', db], { stdin: 'run x\nn not today\n/quit\nnever sent\n' });
    expect(run.status, run.out + run.err).toBe(0);
    expect(run.out).toContain('approve? [y/N] reason: n not today\n');
    expect(run.out).toContain('  ✗ rejected: not today\n');
    expect(run.out).not.toContain('← x: {"doubled"');
    expect(run.out).toMatch(/helper> x answered .*/);
    expect(run.out).toMatch(/closed\n$/);
    expect(model.requests.some((r) => lastUserText(r) === 'never sent')).toBe(false);
  }, 60_000);

  it('an unknown agent is NOT_FOUND: CODE: message, exit 1', async () => {
    const db = await freshDb('unknown');
    const run = await tally(['chat', 'nobody', '--db', db], { stdin: 'hello\n' });
    expect(run.status).toBe(1);
    expect(run.err).toMatch(/^tally: NOT_FOUND: /);
  }, 60_000);
});

describe('approvals, approve and reject against a server', () => {
  let server: ChildProcessWithoutNullStreams;
  let url: string;
  const asAdmin = (...args: string[]) => tally([...args, '--server', url, '--key', ADMIN_KEY]);
  const gql = (document: string) => tally(['gql', '-', '--server', url, '--key', ADMIN_KEY], { stdin: document });

  beforeAll(async () => {
    const db = await freshDb('served');
    server = spawn(process.execPath, [BIN, 'serve', '--db', db, '--port', '0', '--log-level', 'silent'], {
      cwd: scratch,
      env: cleanEnv({ TALLY_ADMIN_KEY: ADMIN_KEY }),
    });
    const port = await new Promise<number>((resolve, reject) => {
      let out = '';
      server.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const match = /serving .* at http:\/\/127\.0\.0\.1:(\d+)\/graphql/.exec(out);
        if (match) resolve(Number(match[1]));
      });
      server.once('exit', (status) => reject(new Error(`serve exited ${status}: ${out}`)));
    });
    url = `http://127.0.0.1:${port}/graphql`;
  }, 60_000);

  afterAll(async () => {
    if (server && server.exitCode === null) {
      const exited = new Promise((resolve) => server.once('exit', resolve));
      server.kill('SIGTERM');
      await exited;
    }
  });

  /** A session with a turn that asks for x: resolves with the approval id once the run is parked. */
  async function parkedRun(n: number): Promise<string> {
    const opened = await gql(
      `mutation { actions { createSession(sessionId: "${id(100 + n)}", agent: "helper", input: {}) { sessionId } } }`,
    );
    expect(opened.status, opened.out).toBe(0);
    const sent = await gql(
      `mutation { actions { sendMessage(sessionId: "${id(100 + n)}", messageId: "m${n}", text: "use x") { execution { executionId } } } }`,
    );
    expect(sent.status, sent.out).toBe(0);
    const executionId = JSON.parse(sent.out).data.actions.sendMessage.execution.executionId as string;
    for (let i = 0; i < 100; i++) {
      const list = JSON.parse((await asAdmin('approvals', '--json')).out) as {
        approvals: Array<{ approvalId: string; executionId: string }>;
      };
      const mine = list.approvals.find((a) => a.executionId === executionId);
      if (mine) return mine.approvalId;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error(`the run ${executionId} never parked`);
  }

  it('approvals lists the pending calls; approve decides one (the run resumes); deciding it again is refused, exit 1', async () => {
    const approvalId = await parkedRun(1);
    const listed = await asAdmin('approvals');
    expect(listed.status, listed.err).toBe(0);
    expect(listed.out.split('\n')[0]).toMatch(/^approvalId +status +tool +requested by +created +expires +input$/);
    expect(listed.out).toMatch(new RegExp(`^${approvalId} +PENDING +x@1 +admin +\\S+Z +\\S+Z +\\{"n":21\\}$`, 'm'));

    const approved = await asAdmin('approve', approvalId, '--reason', 'fine by me');
    expect(approved.status, approved.err).toBe(0);
    expect(approved.out).toContain(`approved ${approvalId}: x@1({"n":21}) requested by admin`);
    expect(approved.out).toContain('decided by admin');
    expect(approved.out).toContain(': fine by me');

    const again = await asAdmin('reject', approvalId);
    expect(again.status).toBe(1);
    expect(again.err).toMatch(/^tally: BAD_REQUEST: .*APPROVED/);
    const all = JSON.parse((await asAdmin('approvals', '--status', 'ALL', '--json')).out);
    expect(all.approvals.find((a: any) => a.approvalId === approvalId)).toMatchObject({
      status: 'APPROVED',
      reason: 'fine by me',
      decidedBy: 'admin',
    });
    const pending = JSON.parse((await asAdmin('approvals', '--json')).out);
    expect(pending.approvals.find((a: any) => a.approvalId === approvalId)).toBeUndefined();
  }, 60_000);

  it('reject decides one with its reason (--json prints the approval); an unknown approval is NOT_FOUND, exit 1', async () => {
    const approvalId = await parkedRun(2);
    const rejected = await asAdmin('reject', approvalId, '--reason', 'no', '--json');
    expect(rejected.status, rejected.out + rejected.err).toBe(0);
    expect(JSON.parse(rejected.out)).toMatchObject({ approvalId, status: 'REJECTED', reason: 'no', tool: 'x' });
    const unknown = await asAdmin('approve', id(999));
    expect(unknown.status).toBe(1);
    expect(unknown.err).toMatch(/^tally: NOT_FOUND: /);
  }, 60_000);

  it('a chatter who may not approve its own call sees ACCESS_DENIED and waits; when someone else approves, the turn goes on', async () => {
    const made = await gql(`mutation { auth { createClient(input: {principal: "maker", name: "Maker", policies: [
      {effect: ALLOW, actions: [SELECT], resources: ["*"]},
      {effect: ALLOW, actions: [INSERT], resources: ["actions.Execution", "actions.Session"]},
      {effect: ALLOW, actions: [UPDATE], resources: ["actions.Session"]},
      {effect: ALLOW, actions: [UPDATE], resources: ["actions.Approval"], assertions: {not_mine: "!has(context.document.requestedBy) || context.document.requestedBy != context.auth.claims.principal"}}
    ]}) { apiKey } } }`);
    expect(made.status, made.out).toBe(0);
    const makerKey = JSON.parse(made.out).data.auth.createClient.apiKey as string;
    const chat = spawnTally(['chat', 'helper', '--server', url, '--key', makerKey], { stdin: 'use x\ny mine\n' });
    for (let i = 0; i < 300 && !chat.run.out.includes('waiting for someone who may decide'); i++)
      await new Promise((resolve) => setTimeout(resolve, 100));
    expect(chat.run.out).toContain('approve? [y/N] reason: y mine\n');
    expect(chat.run.out).toMatch(/\n {2}ACCESS_DENIED: /);
    const approvalId = /needs approval ([0-9a-f-]{36})/.exec(chat.run.out)![1]!;
    const approved = await asAdmin('approve', approvalId, '--reason', 'four eyes');
    expect(approved.status, approved.err).toBe(0);
    const run = await chat.done;
    expect(run.status, run.out + run.err).toBe(0);
    expect(run.out).toContain('  ← x: {"doubled":42}\n');
    expect(run.out).toContain('helper> x answered {"doubled":42}');
    expect(run.out).toMatch(/closed\n$/);
  }, 60_000);

  it('tally chat against the server follows the turn by long-polling, and decides the approval from the pipe', async () => {
    const run = await tally(['chat', 'helper', '--server', url, '--key', ADMIN_KEY], {
      stdin: 'hello\nplease x\nyes ok\n',
    });
    expect(run.status, run.out + run.err).toBe(0);
    expect(run.out).toContain('helper> hi there, you said: hello');
    expect(run.out).toContain('approve? [y/N] reason: yes ok\n');
    expect(run.out).toContain('  ← x: {"doubled":42}\n');
    expect(run.out).toContain('helper> x answered {"doubled":42}');
  }, 60_000);
});

describe('tally chat shows what the tools said (status(text))', () => {
  it('with --db: each message of a tool call as its call commits, between → and ←, before the answer', async () => {
    const db = await freshDb('progress');
    const setup = await tally(['gql', '-', '--db', db], {
      stdin: `mutation {
        actions {
          y: createAction(id: "${id(3)}", input: {
            name: "y", kind: "tool",
            config: {runtime: "javascript", src: "function run(event) { status('counting to ' + event.data.n); status('half way'); return { counted: event.data.n }; }"},
            tool: {description: "Counts.", inputSchema: {type: "object", properties: {n: {type: "number"}}}}
          }) { version }
          narrator: createAction(id: "${id(4)}", input: {
            name: "narrator", kind: "agent",
            config: {provider: "local", model: "m", instructions: "You count.", prompt: "{{message}}"},
            tool: {description: "Counts.", inputSchema: {type: "object", properties: {message: {type: "string"}}, required: ["message"]}},
            tools: [{name: "y", version: 1}],
            policies: [{effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]}]
          }) { version }
        }
      }`,
    });
    expect(setup.status, setup.out + setup.err).toBe(0);
    const run = await tally(['chat', 'narrator', '--db', db], { stdin: 'please count\n' });
    expect(run.status, run.out + run.err).toBe(0);
    expect(run.out).toContain(
      '  → y({"n":2})\n  · y: counting to 2\n  · y: half way\n  ← y: {"counted":2}\nnarrator> y answered {"counted":2}\n',
    );
    const json = await tally(['chat', 'narrator', '--db', db, '--json'], { stdin: 'count again\n' });
    const events = json.out
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(events.filter((e) => e.event === 'status').map((e) => e.status.text)).toEqual(['counting to 2', 'half way']);
    expect(events.find((e) => e.event === 'status').status).toMatchObject({ tool: 'y', seq: expect.any(Number) });
  });
});
