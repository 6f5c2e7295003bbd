import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Worker } from '../../src/execution/queue/worker.js';
import { createLogger, formatPretty } from '../../src/log.js';
import { id } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

/**
 * The log lines of a real server doing real work, captured from the logger's destination: one per
 * request (never its variables or key), one per attempt of a started execution (with the next
 * retry time), one per trigger start, deploy and key event.
 */
const KEY = 'tly_logs-admin-key';
type Line = Record<string, any>;

let server: Awaited<ReturnType<typeof startServer>>;
let worker: Worker;
const lines: Line[] = [];
const raw: string[] = [];

beforeAll(async () => {
  const logger = createLogger({
    level: 'info',
    destination: {
      write: (text: string) => {
        raw.push(text);
        lines.push(JSON.parse(text));
      },
    },
  });
  server = await startServer(KEY, { logger }, { logger });
  worker = server.engine.createWorker({ owner: 'logs-test', pollMs: 20 });
  server.engine.onStarted(() => worker.wake());
  worker.start();
});

afterAll(async () => {
  await worker.stop();
  await server.stop();
});

async function post(query: string, variables: Record<string, unknown> | null = null, key = KEY): Promise<any> {
  const response = await fetch(server.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ query, variables }),
  });
  return response.json();
}

/** The lines logged for a response are written when it closes: wait for the one we expect. */
async function waitFor<T>(what: string, find: () => T | undefined, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const found = find();
    if (found !== undefined) return found;
    if (Date.now() > end) throw new Error(`no ${what} in the log:\n${raw.join('')}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const ALLOW_ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const CREATE_TOOL = `mutation CreateTool($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const START = `mutation Start($name: String, $input: InvokeInput!) { actions { startAction(name: $name, input: $input) { executionId status } } }`;
const EXECUTION = `query Execution($e: UUID!) { actions { execution(executionId: $e) { status attempt error { code } invocations { attempt status } } } }`;

async function createTool(
  n: number,
  name: string,
  src: string,
  execution: Record<string, unknown> = {},
): Promise<void> {
  const created = await post(CREATE_TOOL, {
    id: id(n),
    input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies: ALLOW_ALL, execution },
  });
  expect(created.errors).toBeUndefined();
}

async function finished(executionId: string): Promise<any> {
  return waitFor(`finished execution ${executionId}`, () => {
    const done = lines.find((l) => l.event === 'attempt' && l.executionId === executionId && l.outcome !== 'RETRY');
    return done;
  });
}

describe('request lines', () => {
  it('one line per request: operation type and name, principal, outcome, duration; never the variables, the key or the money', async () => {
    const secret = 'tly_not-a-real-key-in-a-variable';
    const result = await post(
      'mutation OpenAccount($input: AccountInput!) { createAccount(input: $input) { accountId } }',
      { input: { accountId: id(1), code: 'cash', name: secret, metadata: { amount: '98765.43' } } },
    );
    expect(result.errors).toBeUndefined();
    const line = await waitFor('OpenAccount line', () =>
      lines.find((l) => l.event === 'request' && l.operation === 'OpenAccount'),
    );
    expect(line).toMatchObject({
      level: 'info',
      type: 'mutation',
      operation: 'OpenAccount',
      principal: 'admin',
      outcome: 'ok',
      status: 200,
      msg: 'mutation OpenAccount ok',
    });
    expect(typeof line.durationMs).toBe('number');
    expect(Date.parse(line.time)).not.toBeNaN();
    const text = JSON.stringify(line);
    for (const leak of [secret, KEY, '98765.43', 'cash', id(1)]) expect(text).not.toContain(leak);
    expect(raw.join('')).not.toContain(KEY);
  });

  it('a failed request carries its error code; an unauthenticated one, no principal', async () => {
    await post('query Broken { nosuchfield }');
    const broken = await waitFor('Broken line', () =>
      lines.find((l) => l.event === 'request' && l.code === 'GRAPHQL_VALIDATION_FAILED'),
    );
    expect(broken).toMatchObject({ outcome: 'error', principal: 'admin', type: 'unknown' });
    await post('{ journal { name } }', null, 'tly_wrong-key');
    const refused = await waitFor('401 line', () =>
      lines.find((l) => l.event === 'request' && l.code === 'UNAUTHENTICATED'),
    );
    expect(refused).toMatchObject({ status: 401, principal: null, outcome: 'error' });
    expect(JSON.stringify(refused)).not.toContain('tly_wrong-key');
  });
});

describe('attempt lines', () => {
  it('a failure that can pass (TOOL_FAILED, maxAttempts 3) logs once per attempt, each with its next retry time', async () => {
    await createTool(10, 'flaky_upstream', 'function run() { fail("upstream is down"); }', {
      maxAttempts: 3,
      backoff: { initialMs: 20, multiplier: 2, maxMs: 1000 },
    });
    const executionId = id(100);
    const started = await post(START, { name: 'flaky_upstream', input: { executionId, input: {} } });
    expect(started.data.actions.startAction.status).toBe('QUEUED');
    await finished(executionId);
    const attempts = lines.filter((l) => l.event === 'attempt' && l.executionId === executionId);
    expect(attempts.map((l) => [l.attempt, l.outcome, l.code])).toEqual([
      [1, 'RETRY', 'TOOL_FAILED'],
      [2, 'RETRY', 'TOOL_FAILED'],
      [3, 'FAILED', 'TOOL_FAILED'],
    ]);
    for (const line of attempts)
      expect(line).toMatchObject({ level: 'warn', action: 'flaky_upstream@1', maxAttempts: 3 });
    // The retry time is when the next attempt may run: at most the backoff after the attempt
    // ended (the line is written after that), and the next attempt started no earlier.
    const invocations = (
      await post('query($e: UUID!) { actions { execution(executionId: $e) { invocations { attempt started } } } }', {
        e: executionId,
      })
    ).data.actions.execution.invocations;
    for (const [i, line] of attempts.slice(0, 2).entries()) {
      expect(Date.parse(line.retryAt) - Date.parse(line.time)).toBeLessThanOrEqual(20 * 2 ** i);
      expect(Date.parse(invocations[i + 1].started)).toBeGreaterThanOrEqual(Date.parse(line.retryAt));
      expect(line.msg).toBe(`attempt failed, retry at ${line.retryAt}`);
    }
    expect(attempts[2]!.retryAt).toBeUndefined();
    expect(attempts[2]!.msg).toBe('attempt failed, no attempts left');
    expect(JSON.stringify(attempts)).not.toContain('upstream is down');
  });

  it('a deterministic failure (a ReferenceError: SCRIPT_ERROR) logs once and is not retried', async () => {
    await createTool(11, 'typo', 'function run(e) { return availble + 1; }', {
      maxAttempts: 3,
      backoff: { initialMs: 20 },
    });
    const executionId = id(101);
    await post(START, { name: 'typo', input: { executionId, input: {} } });
    const line = await finished(executionId);
    expect(line).toMatchObject({
      outcome: 'FAILED',
      code: 'SCRIPT_ERROR',
      attempt: 1,
      maxAttempts: 3,
      action: 'typo@1',
      msg: 'attempt failed, not retried (SCRIPT_ERROR is not retryable)',
    });
    expect(line.retryAt).toBeUndefined();
    // Nothing more comes: the execution is FAILED after its one attempt.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(lines.filter((l) => l.event === 'attempt' && l.executionId === executionId)).toHaveLength(1);
    const execution = (await post(EXECUTION, { e: executionId })).data.actions.execution;
    expect(execution).toMatchObject({ status: 'FAILED', attempt: 1, error: { code: 'SCRIPT_ERROR' } });
    expect(execution.invocations).toHaveLength(1);
  });

  it('a success logs at info with its duration', async () => {
    await createTool(12, 'fine', 'function run() { return 1; }');
    await post(START, { name: 'fine', input: { executionId: id(102), input: {} } });
    const line = await finished(id(102));
    expect(line).toMatchObject({
      level: 'info',
      outcome: 'SUCCEEDED',
      attempt: 1,
      action: 'fine@1',
      msg: 'attempt succeeded',
    });
    expect(line.durationMs).toBeGreaterThanOrEqual(0);
  });
});

describe('event lines', () => {
  it('a trigger start logs once its change commits; a change rolled back logs nothing', async () => {
    await createTool(13, 'on_account', 'function run() { return 1; }');
    const trigger = await post(
      `mutation { actions { createTrigger(input: {triggerId: "${id(14)}", name: "welcome", on: ["account.inserted"], action: {name: "on_account"}}) { name } } }`,
    );
    expect(trigger.errors).toBeUndefined();
    // Rolled back: the second field fails, so the account and its trigger start never happened.
    await post(
      `mutation { createAccount(input: {accountId: "${id(15)}", code: "gone", name: "Gone"}) { accountId } voidTransaction(id: "${id(404)}") { transactionId } }`,
    );
    await post(`mutation { createAccount(input: {accountId: "${id(16)}", code: "kept", name: "Kept"}) { accountId } }`);
    const line = await waitFor('trigger line', () => lines.find((l) => l.event === 'trigger'));
    expect(line).toMatchObject({
      level: 'info',
      trigger: 'welcome',
      on: 'account.inserted',
      action: 'on_account@1',
      triggerDepth: 1,
      msg: 'trigger started an execution',
    });
    await finished(line.executionId);
    expect(lines.filter((l) => l.event === 'trigger')).toHaveLength(1);
  });

  it('a deploy logs the changes it applied; a dry run logs no deploy', async () => {
    const deploy = (dryRun: boolean) =>
      post(
        `mutation Deploy($v0: AccountInput!, $v1: AccountInput!)${dryRun ? ' @dryRun' : ''} { c0: createAccount(input: $v0) { accountId } c1: createAccount(input: $v1) { accountId } }`,
        {
          v0: { accountId: id(dryRun ? 20 : 22), code: `d0${dryRun}`, name: 'D0' },
          v1: { accountId: id(dryRun ? 21 : 23), code: `d1${dryRun}`, name: 'D1' },
        },
      );
    expect((await deploy(true)).errors).toBeUndefined();
    expect((await deploy(false)).errors).toBeUndefined();
    const line = await waitFor('deploy line', () => lines.find((l) => l.event === 'deploy'));
    expect(line).toMatchObject({ level: 'info', principal: 'admin', changes: 2, msg: 'deploy applied 2 change(s)' });
    expect(lines.filter((l) => l.event === 'deploy')).toHaveLength(1);
  });

  it('admin and client key events: created and rotated, never the key', async () => {
    server.engine.ensureAdmin('tly_logs-rotated-admin-key');
    server.engine.ensureAdmin(KEY);
    const admin = lines.filter((l) => l.event === 'key' && l.client === 'admin').map((l) => l.change);
    // startServer created the admin with KEY; then two rotations.
    expect(admin).toEqual(['created', 'rotated', 'rotated']);
    const created = await post(
      `mutation { auth { createClient(input: {principal: "scraper", name: "Metrics scraper", policies: []}) { apiKey } } }`,
    );
    const apiKey = created.data.auth.createClient.apiKey as string;
    await post(`mutation { auth { updateClient(principal: "scraper", input: {rotateKey: true}) { apiKey } } }`);
    const events = lines.filter((l) => l.event === 'key' && l.client === 'scraper');
    expect(events.map((l) => [l.change, l.by])).toEqual([
      ['created', 'admin'],
      ['rotated', 'admin'],
    ]);
    expect(raw.join('')).not.toContain(apiKey);
    expect(raw.join('')).not.toContain('tly_logs-rotated-admin-key');
  });
});

describe('formats and levels', () => {
  it('on a terminal, one readable line: time, level, message, fields', () => {
    const json = JSON.stringify({
      level: 'warn',
      time: '2026-03-01T10:00:00.123Z',
      event: 'attempt',
      executionId: id(1),
      action: 'transfer@2',
      attempt: 1,
      outcome: 'RETRY',
      retryAt: '2026-03-01T10:00:01.000Z',
      msg: 'attempt failed, retry at 2026-03-01T10:00:01.000Z',
    });
    expect(formatPretty(json, false)).toBe(
      `10:00:00.123 WARN  attempt failed, retry at 2026-03-01T10:00:01.000Z executionId=${id(1)} action=transfer@2 attempt=1 outcome=RETRY retryAt=2026-03-01T10:00:01.000Z\n`,
    );
    const written: string[] = [];
    createLogger({ level: 'info', destination: { write: (t: string) => written.push(t) }, pretty: true }).info(
      { event: 'request', operation: 'My Op' },
      'query ok',
    );
    expect(written[0]).toMatch(/^\d\d:\d\d:\d\d\.\d{3} \u001b\[32mINFO \u001b\[0m query ok operation="My Op"\n$/);
  });

  it('below the level nothing is written', () => {
    const written: string[] = [];
    const logger = createLogger({ level: 'warn', destination: { write: (t: string) => written.push(t) } });
    logger.info({ event: 'request' }, 'query ok');
    logger.warn({ event: 'attempt' }, 'attempt failed');
    expect(written).toHaveLength(1);
  });
});

describe('tally serve as a process', () => {
  const BIN = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');

  it('writes JSON lines to stdout when it is not a terminal, at the level TALLY_LOG_LEVEL or --log-level sets', async () => {
    const db = join(mkdtempSync(join(tmpdir(), 'tally-logs-')), 'logs.db');
    const child = spawn(process.execPath, [BIN, 'serve', '--db', db, '--port', '0', '--log-level', 'debug'], {
      env: { ...process.env, TALLY_ADMIN_KEY: KEY, TALLY_LOG_LEVEL: 'error' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        child.stdout.on('data', () => {
          const match = /at (http:\/\/[^\s]+)\/graphql/.exec(out);
          if (match) resolve(match[1]!);
        });
        child.once('exit', () => reject(new Error(`serve exited: ${out}`)));
      });
      await fetch(`${url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
        body: JSON.stringify({ query: 'query Journal { journal { name } }' }),
      });
      // The in-process worker runs: ready, with all three checks.
      expect(await (await fetch(`${url}/readyz`)).json()).toEqual({
        status: 'ready',
        checks: { database: 'ok', sandbox: 'ok', worker: 'ok' },
      });
      await fetch(`${url}/healthz`);
      const end = Date.now() + 5000;
      while (!/"path":"\/healthz"/.test(out) && Date.now() < end)
        await new Promise((resolve) => setTimeout(resolve, 20));
    } finally {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    }
    const json = out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l));
    expect(json.find((l) => l.event === 'key')).toMatchObject({ level: 'info', change: 'created', client: 'admin' });
    expect(json.find((l) => l.event === 'request' && l.operation === 'Journal')).toMatchObject({
      level: 'info',
      type: 'query',
      principal: 'admin',
      outcome: 'ok',
      status: 200,
    });
    // --log-level debug wins over TALLY_LOG_LEVEL: the probe's debug line is there.
    expect(json.find((l) => l.path === '/healthz')).toMatchObject({ level: 'debug', status: 200 });
  }, 30_000);

  it('refuses a log level that is not one, as a usage error', async () => {
    const db = join(mkdtempSync(join(tmpdir(), 'tally-logs-')), 'never.db');
    const child = spawn(process.execPath, [BIN, 'serve', '--db', db, '--port', '0', '--log-level', 'loud'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(2);
    expect(err).toContain('--log-level: log level "loud" is not one of trace, debug, info, warn, error, fatal, silent');
    expect(existsSync(db)).toBe(false);
  }, 30_000);
});
