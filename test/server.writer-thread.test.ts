import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '../src/engine.js';
import { WriteQueue } from '../src/server/write-queue.js';
import { WriterThread } from '../src/server/writer-thread.js';

/**
 * `tally serve` runs its writer engine (mutations, tools, the queue worker) on a thread of its own:
 * the HTTP thread only checks keys, routes and replies, so a tool running to its deadline holds
 * neither the reads (read pool) nor the probes. Ordering, not timing: a read sent while a tool
 * spins is answered before that tool's own reply.
 */

const BIN = join(import.meta.dirname, '..', 'bin', 'tally.mjs');
const ADMIN = 'tly_writer-thread-admin-key';
const ACTION = '00000000-0000-4000-8000-00000000a001';

interface Served {
  child: ChildProcess;
  url: string;
  db: string;
  lines: Array<Record<string, unknown>>;
  output: () => string;
}

async function serve(limits?: Record<string, number>): Promise<Served> {
  const folder = mkdtempSync(join(tmpdir(), 'tally-writer-'));
  const db = join(folder, 'w.db');
  const env: NodeJS.ProcessEnv = { ...process.env, TALLY_ADMIN_KEY: ADMIN };
  delete env.TALLY_CONFIG;
  if (limits) {
    env.TALLY_CONFIG = join(folder, 'tally.config.json');
    writeFileSync(env.TALLY_CONFIG, JSON.stringify({ limits }));
  }
  const withWriter = limits?.writerThreads !== 0;
  const child = spawn(process.execPath, [BIN, 'serve', '--db', db, '--port', '0', '--log-level', 'info'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const lines: Array<Record<string, unknown>> = [];
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    let url: string | null = null;
    let buffered = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      buffered += chunk.toString();
      const parts = buffered.split('\n');
      buffered = parts.pop()!;
      for (const part of parts) {
        const match = /at (http:\/\/[^\s]+\/graphql)/.exec(part);
        if (match) url = match[1]!;
        if (part.startsWith('{')) lines.push(JSON.parse(part) as Record<string, unknown>);
      }
      // Both threads up: the writer and the read pool.
      if (url && (!withWriter || lines.some((l) => l.event === 'writer')) && lines.some((l) => l.event === 'reads')) resolve(url);
    });
    child.once('exit', () => reject(new Error(`serve exited: ${output}`)));
  });
  return { child, url, db, lines, output: () => output };
}

function post(served: Served, query: string, variables: Record<string, unknown> = {}, key = ADMIN): Promise<{ status: number; body: any }> {
  return fetch(served.url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: JSON.stringify({ query, variables }) }).then(
    async (res) => ({ status: res.status, body: await res.json() }),
  );
}

/** A tool that spins until its deadline (it never returns: each call fails TIMEOUT). */
async function createSpinner(served: Served, timeoutMs: number): Promise<void> {
  const created = await post(served, `mutation($t: Int!) { actions { createAction(id: "${ACTION}", input: {name: "spin", kind: "tool",
    config: {runtime: "javascript", src: "function run() { for (;;) {} }"}, execution: {timeoutMs: $t},
    policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { version } } }`, { t: timeoutMs });
  expect(created.body.errors).toBeUndefined();
  expect(created.body.data.actions.createAction.version).toBe(1);
}

/** Each call ends TIMEOUT: an error, and no data (the request's writes are rolled back). */
const INVOKE_SPIN = `mutation($e: UUID!) { actions { invokeAction(name: "spin", input: {executionId: $e, actionVersion: 1}) { status } } }`;

/** Resolves with the order in which the promises settled, by label. */
function settleOrder(entries: Record<string, Promise<unknown>>): Promise<string[]> {
  const order: string[] = [];
  return Promise.all(Object.entries(entries).map(([label, p]) => p.then(() => order.push(label), () => order.push(label)))).then(() => order);
}

describe('tally serve: the writer on its own thread', () => {
  let served: Served;
  beforeAll(async () => {
    served = await serve();
    await createSpinner(served, 700);
  }, 60_000);
  afterAll(() => served?.child.kill('SIGKILL'));

  it('a query, a probe and /metrics are answered while a tool spins on the writer; a mutation waits for the writer', async () => {
    const spinning = post(served, INVOKE_SPIN, { e: '00000000-0000-4000-8000-00000000b001' });
    // Give the spinning call time to reach the writer thread and start its program.
    await new Promise((r) => setTimeout(r, 300));
    const read = post(served, '{ journal { name } }');
    const health = fetch(served.url.replace('/graphql', '/healthz'));
    const metrics = fetch(served.url.replace('/graphql', '/metrics'), { headers: { authorization: `Bearer ${ADMIN}` } });
    const write = post(served, 'mutation { createJournal(input: {journalId: "00000000-0000-4000-8000-00000000c001", name: "After"}) { name } }');
    const order = await settleOrder({ spinning, read, health, metrics, write });
    expect(order).toHaveLength(5);
    // The read, the probe and the metrics came back while the tool still ran; the mutation after it.
    expect(order.indexOf('read')).toBeLessThan(order.indexOf('spinning'));
    expect(order.indexOf('health')).toBeLessThan(order.indexOf('spinning'));
    expect(order.indexOf('metrics')).toBeLessThan(order.indexOf('spinning'));
    expect(order.indexOf('write')).toBeGreaterThan(order.indexOf('spinning'));
    expect((await read).body).toEqual({ data: { journal: { name: 'Default' } } });
    expect((await spinning).body.errors[0].extensions.code).toBe('TIMEOUT');
    expect((await write).body).toEqual({ data: { createJournal: { name: 'After' } } });
    expect((await metrics).status).toBe(200);
    // What the writer thread counted reaches /metrics: its group commits.
    const text = await (await fetch(served.url.replace('/graphql', '/metrics'), { headers: { authorization: `Bearer ${ADMIN}` } })).text();
    expect(Number(/^tally_write_batches_total (\d+)/m.exec(text)?.[1])).toBeGreaterThan(0);
    expect(/^tally_document_cache_entries (\d+)/m.exec(text)).not.toBeNull();
    // And the read pool's own figures.
    expect(text).toMatch(/^tally_read_pool_threads_ready 2$/m);
    expect(text).toMatch(/^tally_read_pool_wal_holds 0$/m);
  }, 30_000);

  it('a hostile client keeping the writer busy with spinning tools does not hold another client\'s reads', async () => {
    // The other client: its own key, allowed to read.
    const created = await post(served, `mutation { auth { createClient(input: {principal: "reader", name: "reader", policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { apiKey } } }`);
    const readerKey = created.body.data.auth.createClient.apiKey as string;
    const hostile = Array.from({ length: 3 }, (_, i) => post(served, INVOKE_SPIN, { e: `00000000-0000-4000-8000-00000000b1${String(i).padStart(2, '0')}` }));
    await new Promise((r) => setTimeout(r, 300));
    // Ten reads one after the other: all done before the first spinning call is.
    let firstSpinDone = false;
    void hostile[0]!.then(() => (firstSpinDone = true));
    for (let i = 0; i < 10; i++) {
      const read = await post(served, '{ journal { name } }', {}, readerKey);
      expect(read.body).toEqual({ data: { journal: { name: 'Default' } } });
    }
    expect(firstSpinDone).toBe(false);
    const outcomes = await Promise.all(hostile);
    for (const outcome of outcomes) expect(outcome.body.errors[0].extensions.code).toBe('TIMEOUT');
  }, 30_000);

  it('/readyz reports the writer thread\'s sandbox and queue worker', async () => {
    const res = await fetch(served.url.replace('/graphql', '/readyz'));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ready', checks: { database: 'ok', sandbox: 'ok', worker: 'ok' } });
  });

  it('the queue worker runs on the writer thread: a started execution runs, and its attempt is counted in /metrics', async () => {
    const started = await post(served, `mutation { actions { createAction(id: "00000000-0000-4000-8000-00000000a002", input: {name: "hello", kind: "tool",
      config: {runtime: "javascript", src: "function run() { return 'hi'; }"}, policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { version }
      startAction(name: "hello", input: {executionId: "00000000-0000-4000-8000-00000000b201", actionVersion: 1}) { status } } }`);
    expect(started.body.errors).toBeUndefined();
    const waited = await post(served, '{ actions { execution(executionId: "00000000-0000-4000-8000-00000000b201", waitMs: 10000) { status output } } }');
    expect(waited.body.data.actions.execution).toEqual({ status: 'SUCCEEDED', output: 'hi' });
    const text = await (await fetch(served.url.replace('/graphql', '/metrics'), { headers: { authorization: `Bearer ${ADMIN}` } })).text();
    expect(text).toMatch(/^tally_execution_attempts_total\{action="hello",status="SUCCEEDED"\} 1$/m);
  }, 30_000);

  it('on SIGTERM a spinning call in flight is answered, the writer thread closes its engine, and the process exits 0', async () => {
    const own = await serve();
    await createSpinner(own, 700);
    const inFlight = post(own, INVOKE_SPIN, { e: '00000000-0000-4000-8000-00000000b301' });
    await new Promise((r) => setTimeout(r, 200));
    own.child.kill('SIGTERM');
    expect((await inFlight).body.errors[0].extensions.code).toBe('TIMEOUT');
    const code = await new Promise<number | null>((resolve) => own.child.once('exit', resolve));
    expect(code).toBe(0);
    // Every connection closed cleanly: the last one removed the write-ahead log.
    expect(existsSync(`${own.db}-wal`)).toBe(false);
  }, 60_000);
});

const WAIT_D009 = '{ actions { execution(executionId: "00000000-0000-4000-8000-00000000d009", waitMs: 20000) { status } } }';

describe('tally serve with writerThreads 0', () => {
  it('runs the writer on the HTTP thread: no writer thread starts, and a read sent while a tool spins waits for it', async () => {
    const own = await serve({ writerThreads: 0 });
    try {
      await createSpinner(own, 700);
      const spinning = post(own, INVOKE_SPIN, { e: '00000000-0000-4000-8000-00000000b401' });
      await new Promise((r) => setTimeout(r, 300));
      const read = post(own, '{ journal { name } }');
      const order = await settleOrder({ spinning, read });
      expect(order).toEqual(['spinning', 'read']);
      expect((await read).body).toEqual({ data: { journal: { name: 'Default' } } });
      expect(own.lines.some((l) => l.event === 'writer')).toBe(false);
    } finally {
      own.child.kill('SIGKILL');
    }
  }, 60_000);
});

describe('WriterThread in-process', () => {
  let path: string;
  let engine: Engine;
  beforeAll(async () => {
    path = join(mkdtempSync(join(tmpdir(), 'tally-writer-')), 'w.db');
    engine = await createEngine({ path });
  });
  afterAll(() => engine?.close());

  it('runs groups and requests on its own engine, forwards its events, and answers BUSY once closed', async () => {
    const errors: unknown[] = [];
    const thread = await WriterThread.start({ path, log: null, worker: null, limits: { writeBatchWaitMs: 60_000 }, logError: (e) => errors.push(e) });
    const batches: number[] = [];
    let changed = 0;
    thread.onBatch((size) => batches.push(size));
    thread.onActionsChanged(() => changed++);
    const answers = await thread.executeGroup([
      { request: { query: 'mutation { createJournal(input: {journalId: "00000000-0000-4000-8000-00000000d001", name: "One"}) { name } }' } },
      { request: { query: 'mutation { createJournal(input: {journalId: "00000000-0000-4000-8000-00000000d001", name: "Again"}) { name } }' } },
    ]);
    expect(answers[0]).toEqual({ data: { createJournal: { name: 'One' } } });
    expect(answers[1]!.errors![0]!.extensions!.code).toBe('ALREADY_EXISTS');
    // The write is committed: this thread's own connection sees it.
    expect(engine.graphql('{ journals(first: 5) { nodes { name } } }').data).toEqual({ journals: { nodes: [{ name: 'Default' }, { name: 'One' }] } });
    // A tool, started: no queue worker runs in this thread (worker: null), so it stays QUEUED.
    const started = await thread.executeAsync({ query: `mutation { actions { createAction(id: "00000000-0000-4000-8000-00000000d002", input: {name: "t", kind: "tool",
      config: {runtime: "javascript", src: "function run() { return 1; }"}, policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { version }
      startAction(name: "t", input: {executionId: "00000000-0000-4000-8000-00000000d009", actionVersion: 1}) { status } } }` });
    expect(started).toEqual({ data: { actions: { createAction: { version: 1 }, startAction: { status: 'QUEUED' } } } });
    await new Promise((r) => setTimeout(r, 50));
    expect(batches).toEqual([2]);
    expect(changed).toBeGreaterThanOrEqual(1);
    // A wait cut short by the caller's signal answers at once.
    const gone = new AbortController();
    const waiting = thread.executeAsync({ query: WAIT_D009 }, { signal: gone.signal });
    setTimeout(() => gone.abort(), 100);
    expect((await waiting).data).toEqual({ actions: { execution: { status: 'QUEUED' } } });
    const snapshot = await thread.snapshot();
    expect(snapshot).toMatchObject({ database: null, sandbox: null, workerRunning: null });
    expect(snapshot.stats!.documentCacheSize).toBeGreaterThan(0);
    await thread.close();
    const late = await thread.executeGroup([{ request: { query: 'mutation { createJournal(input: {journalId: "00000000-0000-4000-8000-00000000d003", name: "Late"}) { name } }' } }]);
    expect(late[0]!.errors![0]!.extensions!.code).toBe('BUSY');
    expect(errors).toEqual([]);
  }, 30_000);

  it('the write queue keeps two groups in flight to the thread, and each client\'s requests still run in the order they came', async () => {
    const thread = await WriterThread.start({ path, log: null, worker: null, logError: () => {} });
    const sizes: number[] = [];
    thread.onBatch((size) => sizes.push(size));
    const queue = new WriteQueue(engine, () => thread);
    const clients = ['alice', 'bob', 'carol'];
    const perClient = 40;
    const answers: Array<Promise<unknown>> = [];
    // Submitted in waves over several turns of the loop, so groups form while others are in flight.
    for (let wave = 0; wave < 8; wave++) {
      for (const client of clients) {
        for (let k = 0; k < perClient / 8; k++) {
          const n = wave * (perClient / 8) + k;
          const code = `${client}-${String(n).padStart(3, '0')}`;
          const accountId = `00000000-0000-4000-8000-${String(500_000 + clients.indexOf(client) * 1000 + n).padStart(12, '0')}`;
          answers.push(queue.submit({ request: { query: `mutation { createAccount(input: {accountId: "${accountId}", code: "${code}", name: "${code}"}) { code } }` } }, client));
        }
      }
      await new Promise((r) => setImmediate(r));
    }
    const results = (await Promise.all(answers)) as Array<{ data?: unknown; errors?: unknown }>;
    for (const result of results) expect(result.errors, JSON.stringify(result.errors)).toBeUndefined();
    // Every client's accounts were created in the order it sent them.
    const codes = engine.db.prepare("SELECT code FROM accounts WHERE code GLOB '*-[0-9][0-9][0-9]' ORDER BY rowid").pluck().all() as string[];
    expect(codes).toHaveLength(clients.length * perClient);
    for (const client of clients) {
      const mine = codes.filter((c) => c.startsWith(`${client}-`));
      expect(mine).toEqual([...mine].sort());
    }
    // Grouped: fewer commits than requests.
    await new Promise((r) => setTimeout(r, 50));
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(clients.length * perClient);
    expect(sizes.length).toBeLessThan(clients.length * perClient);
    expect(queue.size).toBe(0);
    await thread.close();
  }, 30_000);

  it('holds at most writerCallsMax calls for the writer: past it BUSY at once, and room again when one ends', async () => {
    const thread = await WriterThread.start({ path, log: null, worker: null, limits: { writerCallsMax: 2 }, logError: () => {} });
    const gone = new AbortController();
    // Two long-polls on a QUEUED execution hold the two places.
    const waits = [thread.executeAsync({ query: WAIT_D009 }, { signal: gone.signal }), thread.executeAsync({ query: WAIT_D009 }, { signal: gone.signal })];
    const refused = await thread.executeAsync({ query: '{ journal { name } }' });
    expect(refused.errors![0]!.extensions!.code).toBe('BUSY');
    expect(refused.errors![0]!.message).toContain('writerCallsMax 2');
    gone.abort();
    for (const wait of await Promise.all(waits)) expect(wait.data).toEqual({ actions: { execution: { status: 'QUEUED' } } });
    expect((await thread.executeAsync({ query: '{ journal { name } }' })).data).toEqual({ journal: { name: 'Default' } });
    await thread.close();
  }, 30_000);

  it('holds at most writerCallsPerClientMax calls of one client: past it that client is told BUSY, another still gets in', async () => {
    const thread = await WriterThread.start({ path, log: null, worker: null, limits: { writerCallsPerClientMax: 2 }, logError: () => {} });
    const gone = new AbortController();
    const created = engine.graphql('mutation { auth { createClient(input: {principal: "mallory", name: "mallory", policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { apiKey } } }');
    const mallory = { apiKey: (created.data as any).auth.createClient.apiKey as string };
    const waits = [thread.executeAsync({ query: WAIT_D009 }, { ...mallory, signal: gone.signal }), thread.executeAsync({ query: WAIT_D009 }, { ...mallory, signal: gone.signal })];
    const refused = await thread.executeAsync({ query: '{ journal { name } }' }, mallory);
    expect(refused.errors![0]!.extensions!.code).toBe('BUSY');
    expect(refused.errors![0]!.message).toContain('writerCallsPerClientMax 2');
    // The engine's own authority (another share) is not held up by mallory's.
    expect((await thread.executeAsync({ query: '{ journal { name } }' })).data).toEqual({ journal: { name: 'Default' } });
    gone.abort();
    for (const wait of await Promise.all(waits)) expect(wait.data).toEqual({ actions: { execution: { status: 'QUEUED' } } });
    await thread.close();
  }, 30_000);

  it('a thread that dies answers what it held INTERNAL (outcome unknown) and what comes later too', async () => {
    const errors: unknown[] = [];
    const thread = await WriterThread.start({ path, log: null, worker: null, limits: { writeBatchWaitMs: 60_000 }, logError: (e) => errors.push(e) });
    // Kill it from outside while a request waits on an execution there.
    const waiting = thread.executeAsync({ query: WAIT_D009 });
    await new Promise((r) => setTimeout(r, 100));
    await (thread as unknown as { worker: { terminate(): Promise<number> } }).worker.terminate();
    const answer = await waiting;
    expect(answer.errors![0]!.extensions!.code).toBe('INTERNAL');
    expect(answer.errors![0]!.message).toContain('whether the request was committed is unknown');
    expect(thread.failed).toMatch(/writer thread ended/);
    const later = await thread.executeAsync({ query: '{ journal { name } }' });
    expect(later.errors![0]!.extensions!.code).toBe('INTERNAL');
    expect(errors.length).toBe(1);
  }, 30_000);
});
