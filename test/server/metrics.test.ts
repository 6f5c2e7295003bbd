import Database from 'better-sqlite3';
import type { Server } from 'node:http';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import type { Worker } from '../../src/execution/queue/worker.js';
import { createServer } from '../../src/server/http.js';
import { id, newEngine } from '../helpers/engine.js';

/**
 * /healthz, /readyz and /metrics of a real server on a database file, with its queue worker,
 * after real requests and executions; the Prometheus text is parsed and the series checked.
 */
const KEY = 'tly_metrics-admin-key';

let engine: Engine;
let worker: Worker;
let server: Server;
let base: string;
let path: string;

beforeAll(async () => {
  path = join(mkdtempSync(join(tmpdir(), 'tally-metrics-')), 'metrics.db');
  // Three operation names get labels of their own; the fourth is "other".
  engine = await newEngine({ path, limits: { metricsLabelValuesMax: 3, readinessWaitMs: 300 } });
  engine.ensureAdmin(KEY);
  worker = engine.createWorker({ owner: 'metrics-test', pollMs: 20 });
  engine.onStarted(() => worker.wake());
  server = createServer(engine, { worker });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  worker.start();
});

afterAll(async () => {
  await worker.stop();
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  engine.close();
});

async function post(query: string, variables: Record<string, unknown> | null = null): Promise<any> {
  const response = await fetch(`${base}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ query, variables }),
  });
  return response.json();
}

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The Prometheus text exposition format, as a scraper reads it. */
function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[pair[1]!] = pair[2]!;
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

async function scrape(): Promise<Sample[]> {
  const response = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${KEY}` } });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parseMetrics(await response.text());
}

function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  return samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
}

const ALLOW_ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];

async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  const end = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('/healthz and /readyz', () => {
  it('/healthz answers without a key and touches nothing', async () => {
    const response = await fetch(`${base}/healthz`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ status: 'ok' });
    expect((await fetch(`${base}/healthz`, { method: 'POST' })).status).toBe(405);
  });

  it('/readyz is 200 when the database takes a write, the sandbox is loaded and the worker runs', async () => {
    const response = await fetch(`${base}/readyz`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ status: 'ready', checks: { database: 'ok', sandbox: 'ok', worker: 'ok' } });
  });

  it('/readyz of a server without a worker (--no-worker) says so and is ready', async () => {
    const { startServer } = await import('../helpers/server.js');
    const bare = await startServer(KEY);
    try {
      const response = await fetch(bare.url.replace('/graphql', '/readyz'));
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({
        status: 'ready',
        checks: { database: 'ok', sandbox: 'ok', worker: 'disabled' },
      });
    } finally {
      await bare.stop();
    }
  });

  it('/readyz is 503, naming the check, while the worker is stopped', async () => {
    await worker.stop();
    try {
      const response = await fetch(`${base}/readyz`);
      expect(response.status).toBe(503);
      expect(await response.json()).toEqual({
        status: 'not ready',
        checks: { database: 'ok', sandbox: 'ok', worker: 'the queue worker is not running' },
      });
    } finally {
      worker.start();
    }
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
  });

  it('/readyz is 503 while another process holds the write lock past readinessWaitMs; meanwhile other requests are answered', async () => {
    const other = new Database(path);
    other.exec('BEGIN IMMEDIATE');
    try {
      const started = performance.now();
      const probe = fetch(`${base}/readyz`).then((response) => ({ response, ms: performance.now() - started }));
      // The probe keeps trying for readinessWaitMs (300 ms) on timers: a read is not held up by it.
      await new Promise((resolve) => setTimeout(resolve, 20));
      const read = await post('{ journal { name } }');
      const readMs = performance.now() - started;
      expect(read.errors).toBeUndefined();
      const { response, ms } = await probe;
      expect(readMs).toBeLessThan(ms);
      expect(ms).toBeGreaterThanOrEqual(300);
      expect(ms).toBeLessThan(2000);
      expect(response.status).toBe(503);
      const body = (await response.json()) as any;
      expect(body.status).toBe('not ready');
      expect(body.checks.database).toMatch(/^BUSY: /);
      expect(body.checks.sandbox).toBe('ok');
    } finally {
      other.exec('ROLLBACK');
      other.close();
    }
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    // The engine's own patience is back to busyTimeoutMs.
    expect(engine.db.pragma('busy_timeout', { simple: true })).toBe(engine.limits.busyTimeoutMs);
  });
});

describe('/metrics', () => {
  it('needs a client key (any client: one with no policies can scrape and do nothing else)', async () => {
    expect((await fetch(`${base}/metrics`)).status).toBe(401);
    const created = await post(
      `mutation { auth { createClient(input: {principal: "prometheus", name: "Scraper", policies: []}) { apiKey } } }`,
    );
    const scraperKey = created.data.auth.createClient.apiKey as string;
    const response = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${scraperKey}` } });
    expect(response.status).toBe(200);
    const denied = await fetch(`${base}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${scraperKey}` },
      body: JSON.stringify({
        query: `mutation { createAccount(input: {accountId: "${id(9)}", code: "x", name: "X"}) { accountId } }`,
      }),
    });
    expect(((await denied.json()) as any).errors[0].extensions.code).toBe('ACCESS_DENIED');
  });

  it('counts requests by type, name (capped) and outcome, with latency histograms', async () => {
    for (let i = 0; i < 3; i++) await post('query Journal { journal { name } }');
    await post('{ journal { name } }');
    await post('query Broken { nosuchfield }');
    await post(
      `mutation OpenAccount { createAccount(input: {accountId: "${id(1)}", code: "cash", name: "Cash"}) { accountId } }`,
    );
    await post(
      `mutation OpenAccount { createAccount(input: {accountId: "${id(1)}", code: "cash", name: "Cash"}) { accountId } }`,
    );
    // Anonymous operations and documents that do not validate are "anonymous"; names take the
    // three label values in the order they come (Journal, OpenAccount, Fourth); Fifth is "other".
    await post('query Fourth { journal { name } }');
    await post('query Fifth { journal { name } }');
    const samples = await scrape();
    expect(value(samples, 'tally_graphql_requests_total', { type: 'query', operation: 'Journal', outcome: 'ok' })).toBe(
      3,
    );
    expect(
      value(samples, 'tally_graphql_requests_total', { type: 'query', operation: 'anonymous', outcome: 'ok' }),
    ).toBeGreaterThanOrEqual(1);
    expect(
      value(samples, 'tally_graphql_requests_total', {
        type: 'unknown',
        operation: 'anonymous',
        outcome: 'GRAPHQL_VALIDATION_FAILED',
      }),
    ).toBe(1);
    expect(
      value(samples, 'tally_graphql_requests_total', { type: 'mutation', operation: 'OpenAccount', outcome: 'ok' }),
    ).toBe(1);
    expect(
      value(samples, 'tally_graphql_requests_total', {
        type: 'mutation',
        operation: 'OpenAccount',
        outcome: 'ALREADY_EXISTS',
      }),
    ).toBe(1);
    expect(value(samples, 'tally_graphql_requests_total', { operation: 'Fourth' })).toBe(1);
    expect(value(samples, 'tally_graphql_requests_total', { operation: 'Fifth' })).toBeUndefined();
    expect(value(samples, 'tally_graphql_requests_total', { type: 'query', operation: 'other', outcome: 'ok' })).toBe(
      1,
    );
    expect(
      value(samples, 'tally_graphql_request_duration_seconds_count', { type: 'query', operation: 'Journal' }),
    ).toBe(3);
    expect(
      value(samples, 'tally_graphql_request_duration_seconds_bucket', {
        type: 'query',
        operation: 'Journal',
        le: '+Inf',
      }),
    ).toBe(3);
    expect(
      value(samples, 'tally_graphql_request_duration_seconds_sum', { type: 'query', operation: 'Journal' }),
    ).toBeGreaterThan(0);
  });

  it('counts attempts by action and status, and shows the queue, the sandbox pool, the caches and the file sizes', async () => {
    const create = (n: number, name: string, src: string, execution: Record<string, unknown> = {}) =>
      post(
        `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`,
        {
          id: id(n),
          input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies: ALLOW_ALL, execution },
        },
      );
    const start = (name: string, executionId: string) =>
      post(
        `mutation($name: String, $input: InvokeInput!) { actions { startAction(name: $name, input: $input) { status } } }`,
        { name, input: { executionId, input: {} } },
      );
    const status = async (executionId: string) =>
      (await post(`query($e: UUID!) { actions { execution(executionId: $e) { status } } }`, { e: executionId })).data
        .actions.execution.status;
    await create(10, 'ok_tool', 'function run() { return 1; }');
    await create(11, 'retrying', 'function run() { fail("down"); }', { maxAttempts: 2, backoff: { initialMs: 10 } });
    await start('ok_tool', id(100));
    await start('ok_tool', id(101));
    await start('retrying', id(102));
    await until(
      'the executions to finish',
      async () => (await status(id(101))) === 'SUCCEEDED' && (await status(id(102))) === 'FAILED',
    );
    let samples = await scrape();
    expect(value(samples, 'tally_execution_attempts_total', { action: 'ok_tool', status: 'SUCCEEDED' })).toBe(2);
    expect(value(samples, 'tally_execution_attempts_total', { action: 'retrying', status: 'QUEUED' })).toBe(1);
    expect(value(samples, 'tally_execution_attempts_total', { action: 'retrying', status: 'FAILED' })).toBe(1);
    expect(value(samples, 'tally_execution_attempt_duration_seconds_count', { action: 'ok_tool' })).toBe(2);
    expect(value(samples, 'tally_queue_depth')).toBe(0);
    expect(value(samples, 'tally_queue_due')).toBe(0);
    expect(value(samples, 'tally_queue_oldest_due_age_seconds')).toBe(0);
    expect(value(samples, 'tally_sandbox_ready')).toBe(1);
    expect(value(samples, 'tally_sandbox_idle_contexts')).toBeGreaterThanOrEqual(1);
    expect(value(samples, 'tally_document_cache_entries')).toBeGreaterThanOrEqual(1);
    expect(value(samples, 'tally_database_bytes', { file: 'db' })).toBeGreaterThan(0);
    expect(value(samples, 'tally_database_bytes', { file: 'wal' })).toBeGreaterThanOrEqual(0);
    expect(value(samples, 'process_resident_memory_bytes')).toBeGreaterThan(0);

    // With the worker stopped, a started execution waits: depth, due and the age of the oldest.
    await worker.stop();
    try {
      await start('ok_tool', id(103));
      await new Promise((resolve) => setTimeout(resolve, 120));
      samples = await scrape();
      expect(value(samples, 'tally_queue_depth')).toBe(1);
      expect(value(samples, 'tally_queue_due')).toBe(1);
      expect(value(samples, 'tally_queue_oldest_due_age_seconds')).toBeGreaterThanOrEqual(0.1);
    } finally {
      worker.start();
    }
    await until('the waiting execution to run', async () => (await status(id(103))) === 'SUCCEEDED');
    samples = await scrape();
    expect(value(samples, 'tally_queue_depth')).toBe(0);
    expect(value(samples, 'tally_execution_attempts_total', { action: 'ok_tool', status: 'SUCCEEDED' })).toBe(3);
  });
});
