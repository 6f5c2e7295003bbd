/**
 * Hostile review of group commit (server write queue, engine.executeGroup/executeBatch), the read
 * pool (read-only engines on worker threads) and lean call records (migration 15), with two
 * clients, one of them hostile (mallory). Real SQLite files in a temp dir, real HTTP servers, real
 * read threads.
 *
 * `it.fails(...)`: a finding that reproduces (the comment says what, its impact and a fix).
 * `it(...)`: a check that held; kept as a guard.
 */
import { execFileSync as execFileSyncAtLoad } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import type { BatchRequest, Engine } from '../../src/engine.js';
import type { FormattedResult } from '../../src/graphql/executor.js';
import type { Logger } from '../../src/log.js';
import { attachReadPool, createServer } from '../../src/server/http.js';
import { ReadPool } from '../../src/runtime/read-pool.js';
import { WriteQueue } from '../../src/runtime/write-queue.js';
import { createAccount, createTransferCode, postTransfers } from '../helpers/ledger.js';
import { id, newEngine, ok } from '../helpers/engine.js';

const cleanups: Array<() => unknown> = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const POST = 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }';
const transfer = (tx: number, from: number, to: number, amount: string) => ({
  i: { transactionId: id(tx), tranCode: 'TRANSFER', params: { from: id(from), to: id(to), amount } },
});
const post = (tx: number, apiKey: string, from = 1, to = 2, amount = '1'): BatchRequest => ({
  request: { query: POST, variables: transfer(tx, from, to, amount), operationName: null },
  options: { apiKey },
});
const txOf = (answer: FormattedResult | undefined): unknown =>
  (answer?.data as { postTransaction?: { transactionId: string } } | null | undefined)?.postTransaction?.transactionId;
const code = (answer: FormattedResult | undefined) => answer?.errors?.[0]?.extensions?.code;
const json = (value: unknown) => JSON.parse(JSON.stringify(value));
const CREATE_ACTION =
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }';
const INVOKE_BY_NAME =
  'mutation($n: String!, $e: UUID!, $i: JSON) { actions { invokeAction(name: $n, input: {executionId: $e, actionVersion: 1, input: $i}) { executionId status output children { executionId kind status } } } }';
const START_BY_NAME =
  'mutation($n: String!, $e: UUID!) { actions { startAction(name: $n, input: {executionId: $e, input: {}}) { status } } }';
const READ_EXECUTION =
  'query($e: UUID!) { actions { execution(executionId: $e) { executionId kind status input output caller { principal } } } }';
const ALLOW_ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];

function createClient(engine: Engine, principal: string, policies: unknown[]): string {
  return ok(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', {
    i: { principal, name: principal, policies },
  }).auth.createClient.apiKey;
}

/** A writer engine on a new file, accounts 1-4 and TRANSFER, an admin key. */
async function writer(limits: Record<string, number> = {}, extra: Record<string, unknown> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'tally-load-hostile-'));
  dirs.push(dir);
  const path = join(dir, 'tally.db');
  const engine = await newEngine({ path, limits, ...extra });
  cleanups.push(() => engine.close());
  for (const n of [1, 2, 3, 4]) createAccount(engine, n);
  createTransferCode(engine);
  const adminKey = engine.ensureAdmin()!;
  return { engine, path, adminKey };
}

async function readPool(path: string, limits: Record<string, number> = {}) {
  const pool = await ReadPool.start({ path, size: 1, limits, logError: () => {} });
  cleanups.push(() => pool.close());
  return pool;
}

async function serve(engine: Engine, pool?: ReadPool) {
  const server = createServer(engine);
  if (pool) attachReadPool(server, pool);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return {
    base,
    async graphql(apiKey: string, query: string, variables?: Record<string, unknown>) {
      const res = await fetch(`${base}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
        body: JSON.stringify({ query, variables }),
      });
      return { status: res.status, body: (await res.json()) as any };
    },
    async raw(apiKey: string, body: string) {
      const res = await fetch(`${base}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
        body,
      });
      return { status: res.status, text: await res.text() };
    },
    async get(apiKey: string, path: string) {
      const res = await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${apiKey}` } });
      await res.arrayBuffer();
      return res.status;
    },
  };
}

describe("group commit: one client's request must not change what another's gets", () => {
  /*
   * FINDING (MEDIUM, availability): a slow request holds every reply of its group, including the
   * committed-in-spirit replies of requests that ran before it. WriteQueue.flush releases answers
   * only after executeGroup's COMMIT, and runBatch checks its time bound (writeBatchWaitMs) only
   * *before* each unit, so any client whose mutation lands in the same turn right after another
   * client's request (mallory's tool spinning until toolTimeoutMs / requestDeadlineMs) delays that
   * request's reply by the whole of its own run. Run one after another, the honest post is answered
   * in milliseconds and only then does the spin start. With writeBatchMax 64, one hostile client
   * sending one slow mutation per turn adds up to requestDeadlineMs to every other client's write
   * latency, continuously, while staying within its own per-client queue share.
   * Impact: latency amplification / starvation of other clients' writes by a client allowed to
   * invoke any tool (or to send any mutation that runs long, e.g. a heavy Mutation.queries).
   * Fix: end the group (COMMIT and answer what ran) as soon as a unit has run past writeBatchWaitMs,
   * i.e. bound the group by elapsed time *after* each unit too, and do not start a unit expected to
   * be slow (a tool invocation, an agent/model call) in a group that already holds others' replies:
   * commit and answer them first, then run it (alone or as the head of the next group).
   */
  it("a slow request from mallory does not hold an honest, earlier request's reply in the same group", async () => {
    // writeBatchWaitMs 50 instead of the default 10 only to keep this test stable on a loaded machine: with
    // 10 it is the same whenever the requests before the slow one took < 10 ms (a warm post takes 1-3 ms).
    const { engine, adminKey } = await writer({ toolTimeoutMs: 700, requestDeadlineMs: 2000, writeBatchWaitMs: 50 });
    ok(engine, CREATE_ACTION, {
      id: id(70),
      input: {
        name: 'spin',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() { while (true) {} }' },
        policies: [],
      },
    });
    const mallory = createClient(engine, 'mallory', [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT'], resources: ['actions.*'] },
    ]);
    // Warm: the honest post alone takes a few ms.
    engine.executeBatch([post(10, adminKey), post(11, adminKey)]);
    const queue = new WriteQueue(engine);
    const started = performance.now();
    let honestMs = -1;
    const honest = queue.submit(post(12, adminKey), 'admin').then((answer) => {
      honestMs = performance.now() - started;
      return answer;
    });
    const hostile = queue.submit(
      {
        request: { query: INVOKE_BY_NAME, variables: { n: 'spin', e: id(900), i: {} }, operationName: null },
        options: { apiKey: mallory },
      },
      'mallory',
    );
    const [h, m] = await Promise.all([honest, hostile]);
    expect(txOf(h)).toBe(id(12));
    expect(code(m)).toBe('TIMEOUT');
    // One after another, the honest post is answered before the spin starts.
    expect(honestMs).toBeLessThan(250);
  });

  /*
   * FINDING (MEDIUM, availability/fairness): the write queue bounds how many requests a client may
   * have *waiting* (writeQueuePerClientMax, 256 by default) but serves them strictly first-come,
   * first-served: WriteQueue.flush always takes the head of one global array. A client that queues
   * N slow mutations (each may run up to toolTimeoutMs / requestDeadlineMs, and each slow one ends
   * its group) puts every later request of every other client behind all N of them: with the
   * defaults, 256 × 750 ms ≈ 3 minutes, far past requestTimeoutMs. The read pool, by contrast,
   * serves its queue one client at a time in turn. Repro: mallory queues 8 spins (toolTimeoutMs
   * 250), then the honest post: it is answered only after all 8 (~2 s), where taking turns would
   * answer it after at most one spin.
   * Fix: take turns per principal when filling a group (round-robin over per-client FIFOs, as
   * ReadPool.dispatch does), and count a client's slow units against its turn.
   */
  it("an honest request queued behind mallory's flood of slow mutations waits for at most one of them (clients take turns)", async () => {
    const { engine, adminKey } = await writer({ toolTimeoutMs: 250, requestDeadlineMs: 2000 });
    ok(engine, CREATE_ACTION, {
      id: id(73),
      input: {
        name: 'spin',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() { while (true) {} }' },
        policies: [],
      },
    });
    const mallory = createClient(engine, 'mallory', [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT'], resources: ['actions.*'] },
    ]);
    engine.executeBatch([post(15, adminKey)]);
    const queue = new WriteQueue(engine);
    const started = performance.now();
    const flood = Array.from({ length: 8 }, (_, k) =>
      queue.submit(
        {
          request: { query: INVOKE_BY_NAME, variables: { n: 'spin', e: id(930 + k), i: {} }, operationName: null },
          options: { apiKey: mallory },
        },
        'mallory',
      ),
    );
    let honestMs = -1;
    const honest = queue.submit(post(16, adminKey), 'admin').then((answer) => {
      honestMs = performance.now() - started;
      return answer;
    });
    const [h, ...spins] = await Promise.all([honest, ...flood]);
    expect(txOf(h)).toBe(id(16));
    for (const m of spins) expect(code(m)).toBe('TIMEOUT');
    expect(honestMs).toBeLessThan(700);
  }, 30_000);

  /*
   * FINDING (HIGH when reached, availability: one client can crash the server): the write queue is bounded in
   * requests (writeQueueMax 1024, writeQueuePerClientMax 256), not in bytes, and it holds each
   * request parsed. A 1 MB body (requestBodyBytesMax) of `[{},{},...]` variables is ~21 MB of heap
   * once parsed; 256 of them from ONE client (any valid key: nothing is authorised before the unit
   * runs) is ~5.4 GB, past the default V8 heap (~4.3 GB here): the process dies with "JavaScript
   * heap out of memory", every client with it. The queue fills whenever bodies arrive faster than
   * groups drain, e.g. behind one slow request at its head (a group runs one request past
   * writeBatchWaitMs; a tool spin holds the loop for toolTimeoutMs while more bodies arrive).
   * (The next test shows them piling up over HTTP: 8 at once from one 48-body burst behind a single
   * 700 ms spin; a client that can also invoke a slow tool interleaves spins to keep every group
   * slow while its share fills.) Before the queue, each body was executed as it arrived and dropped. This test measures the heap
   * one queued request holds and checks the bound against the heap limit (it does not crash the
   * machine to prove it).
   * Fix: bound the queue by bytes (sum of body lengths, per client and in all, e.g. a few ×
   * requestBodyBytesMax per client), keep the raw body text rather than the parsed value until
   * the unit runs, or parse variables in the unit.
   */
  it("one client's share of the write queue is bounded in bytes (writeQueuePerClientBytesMax), and all of it (writeQueueBytesMax) fits in the heap", async () => {
    const { getHeapStatistics, setFlagsFromString } = await import('node:v8');
    const { runInNewContext } = await import('node:vm');
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const { engine } = await writer();
    const limits = engine.limits;
    const queue = new WriteQueue(engine);
    // What the server parses from one body of requestBodyBytesMax (readBody, then requestFromBody).
    const count = Math.floor((limits.requestBodyBytesMax - 200) / 3);
    const body = `{"query":"mutation($i: JSON) { actions { invokeAction(name: \\"spin\\", input: {executionId: \\"${id(1)}\\", input: $i}) { status } } }","variables":{"i":[${'{},'.repeat(count - 1)}{}]}}`;
    expect(body.length).toBeLessThanOrEqual(limits.requestBodyBytesMax);
    gc();
    const before = process.memoryUsage().heapUsed;
    const pending: Array<Promise<FormattedResult>> = [];
    for (let k = 0; k < 12; k++) {
      const parsed = JSON.parse(body) as { query: string; variables: Record<string, unknown> };
      pending.push(
        queue.submit(
          {
            request: { query: parsed.query, variables: parsed.variables, operationName: null },
            options: { principal: 'mallory' },
          },
          'mallory',
          Buffer.byteLength(body),
        ),
      );
    }
    gc();
    const held = queue.size;
    // Only writeQueuePerClientBytesMax of bodies wait: the rest are told BUSY at once.
    expect(held).toBe(Math.floor(limits.writeQueuePerClientBytesMax / Buffer.byteLength(body)));
    const perRequest = (process.memoryUsage().heapUsed - before) / held;
    const answers = await Promise.all(pending);
    expect(
      answers
        .slice(held)
        .every((a) => code(a) === 'BUSY' && a.errors![0]!.message.includes('writeQueuePerClientBytesMax')),
    ).toBe(true);
    // The whole queue full of such bodies (writeQueueBytesMax) stays well inside the heap.
    const bodiesInQueue = limits.writeQueueBytesMax / Buffer.byteLength(body);
    expect(perRequest * bodiesInQueue).toBeLessThan(getHeapStatistics().heap_size_limit / 2);
  }, 60_000);

  it('(precondition of the finding above) over HTTP, 1 MB mutations arriving behind one slow request pile up parsed in the write queue', async () => {
    // The head spins 2.5 s: time for another process to start and send 48 bodies, on a busy machine too.
    const { engine } = await writer({ toolTimeoutMs: 2500, toolTimeoutMsMax: 2500, requestDeadlineMs: 3000 });
    ok(engine, CREATE_ACTION, {
      id: id(75),
      input: {
        name: 'spin',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() { while (true) {} }' },
        policies: [],
      },
    });
    const mallory = createClient(engine, 'mallory', []);
    const spinner = createClient(engine, 'spinner', [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT'], resources: ['actions.*'] },
    ]);
    let maxQueued = 0;
    const submit = WriteQueue.prototype.submit;
    WriteQueue.prototype.submit = function (this: WriteQueue, ...args: Parameters<WriteQueue['submit']>) {
      const result = submit.apply(this, args);
      maxQueued = Math.max(maxQueued, this.size);
      return result;
    };
    cleanups.push(() => {
      WriteQueue.prototype.submit = submit;
    });
    const http = await serve(engine);
    const count = Math.floor((engine.limits.requestBodyBytesMax - 300) / 3);
    const head = http.graphql(spinner, INVOKE_BY_NAME, { n: 'spin', e: id(959), i: {} });
    await new Promise((resolve) => setTimeout(resolve, 20));
    // 48 bodies at once from another process (as a real client would send them).
    const client = `
      const http = require('node:http');
      const [port, key, count] = process.argv.slice(1);
      const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
      const arr = '[' + '{},'.repeat(Number(count) - 1) + '{}]';
      let left = 48, errors = 0;
      for (let k = 0; k < 48; k++) {
        const body = '{"query":"mutation($i: JSON) { actions { invokeAction(name: \\\\"spin\\\\", input: {executionId: \\\\"00000000-0000-4000-8000-' + String(970 + k).padStart(12, '0') + '\\\\", actionVersion: 1, input: $i}) { status } } }","variables":{"i":' + arr + '}}';
        const req = http.request({ host: '127.0.0.1', port, path: '/graphql', method: 'POST', agent, headers: { 'content-type': 'application/json', authorization: 'Bearer ' + key } }, (res) => {
          let text = ''; res.on('data', (c) => (text += c));
          res.on('end', () => { if (text.includes('errors')) errors++; if (--left === 0) { process.stdout.write(String(errors)); agent.destroy(); } });
        });
        req.end(body);
      }`;
    const { execFile } = await import('node:child_process');
    const port = new URL(http.base).port;
    const out = await new Promise<string>((resolve, reject) =>
      execFile(
        process.execPath,
        ['-e', client, port, mallory, String(count)],
        { maxBuffer: 1 << 20 },
        (error, stdout) => (error ? reject(error) : resolve(stdout)),
      ),
    );
    await head;
    // Every one of them was refused in its unit (mallory has no policies)...
    expect(out).toBe('48');
    // ...after waiting in the queue, parsed, several at once.
    expect(maxQueued).toBeGreaterThanOrEqual(4);
  }, 60_000);

  /*
   * FINDING (LOW, correctness: a committed write answered as failed): runBatch runs the group's
   * afterCommit callbacks after the COMMIT without isolating them; one that throws (the logger of
   * an API-key change, a trigger start's log line) makes runBatch, hence executeGroup, throw, and
   * WriteQueue.flush then answers EVERY request of the group INTERNAL "the write group failed" —
   * although all of them committed. The remaining callbacks of the group are skipped, and the
   * worker is not woken for executions the group started (startedListeners never run).
   * Another client's committed posting is reported failed: a client that retries it with a new id
   * posts twice. (Sequential execute() has the same flaw for the request itself, but not for others.)
   * Fix: in runCommitted, run each callback in its own try/catch and report failures to logError;
   * never let anything after a successful COMMIT turn into an error answer.
   */
  it("a throwing after-commit callback of one request does not turn another client's committed write into a failure", async () => {
    const logger: Logger = {
      debug() {},
      info(_fields, message) {
        if (message.startsWith('API key')) throw new Error('log sink down');
      },
      warn() {},
      error() {},
    };
    // One group for both (a cold unit can pass the 10 ms default before the second one is reached).
    const { engine, adminKey } = await writer({ writeBatchWaitMs: 60_000 }, { logger });
    const queue = new WriteQueue(engine);
    const honest = queue.submit(post(20, adminKey), 'admin');
    const rotate = queue.submit(
      {
        request: {
          query: 'mutation { auth { createClient(input: {principal: "bob", name: "bob", policies: []}) { apiKey } } }',
          variables: null,
          operationName: null,
        },
        options: { apiKey: adminKey },
      },
      'admin2',
    );
    const [h] = await Promise.all([honest, rotate]);
    // It was committed...
    expect(engine.db.prepare('SELECT count(*) FROM transactions WHERE transaction_id = ?').pluck().get(id(20))).toBe(1);
    // ...so it must be answered as committed.
    expect(h.errors).toBeUndefined();
    expect(txOf(h)).toBe(id(20));
  });

  it('holds: a request that fails (or throws) inside a group rolls back only its own writes; the group still commits the others', async () => {
    const { engine, adminKey } = await writer();
    const mallory = createClient(engine, 'mallory', [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
    ]);
    const queue = new WriteQueue(engine);
    const answers = await Promise.all([
      queue.submit(post(30, adminKey), 'admin'),
      // A posting to an account that does not exist, a bad amount, and an invalid document.
      queue.submit(post(31, mallory, 1, 99), 'mallory'),
      queue.submit(post(32, mallory, 1, 2, 'x'), 'mallory'),
      queue.submit(
        { request: { query: 'mutation { nope', variables: null, operationName: null }, options: { apiKey: mallory } },
        'mallory',
      ),
      queue.submit(post(33, adminKey, 3, 4), 'admin'),
    ]);
    expect(txOf(answers[0])).toBe(id(30));
    expect(code(answers[1])).toBe('NOT_FOUND');
    expect(answers[2]!.errors?.length).toBeGreaterThan(0);
    expect(answers[3]!.errors?.length).toBeGreaterThan(0);
    expect(txOf(answers[4])).toBe(id(33));
    expect(engine.db.prepare('SELECT count(*) FROM transactions').pluck().get()).toBe(2);
  });

  it("holds: mallory's request later in the group runs with mallory's authority, not the earlier admin request's (and vice versa)", async () => {
    const { engine, adminKey } = await writer();
    const mallory = createClient(engine, 'mallory', [
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
    ]);
    const WHO = '{ auth { whoami { principal } } }';
    const answers = engine.executeBatch([
      post(40, adminKey),
      post(41, mallory),
      {
        request: {
          query:
            'mutation { auth { updateClient(principal: "mallory", input: {policies: [{effect: ALLOW, actions: [SELECT, INSERT, UPDATE, DELETE], resources: ["*"]}]}) { client { principal } } } }',
          variables: null,
          operationName: null,
        },
        options: { apiKey: mallory },
      },
      { request: { query: WHO, variables: null, operationName: null }, options: { apiKey: mallory } },
      { request: { query: WHO, variables: null, operationName: null }, options: { apiKey: adminKey } },
    ]);
    expect(txOf(answers[0])).toBe(id(40));
    expect(code(answers[1])).toBe('ACCESS_DENIED');
    expect(code(answers[2])).toBe('ACCESS_DENIED');
    expect((answers[3]!.data as any).auth.whoami.principal).toBe('mallory');
    expect((answers[4]!.data as any).auth.whoami.principal).toBe('admin');
  });

  it("holds: the result cache inside one group: another client never gets admin's cached output; a write earlier in the group invalidates it", async () => {
    const { engine, adminKey } = await writer();
    ok(engine, CREATE_ACTION, {
      id: id(74),
      input: {
        name: 'count_accounts',
        kind: 'tool',
        config: {
          runtime: 'javascript',
          src: 'function run() { return { n: graphql("{ accounts(first: 1000) { nodes { accountId } } }").accounts.nodes.length }; }',
        },
        policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] }],
        execution: { cacheTtlMs: 60_000 },
      },
    });
    const mallory = createClient(engine, 'mallory', [
      {
        effect: 'ALLOW',
        actions: ['SELECT'],
        resources: ['financial.Account'],
        assertions: { mine: "context.document.code == 'ACC-1'" },
      },
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['actions.*'] },
      { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
    ]);
    const INVOKE =
      'mutation($e: UUID!) { actions { invokeAction(name: "count_accounts", input: {executionId: $e, actionVersion: 1, input: {}}) { status output cachedFrom } } }';
    const invoke = (e: number, apiKey: string): BatchRequest => ({
      request: { query: INVOKE, variables: { e: id(e) }, operationName: null },
      options: { apiKey },
    });
    const CREATE = 'mutation($i: AccountInput!) { createAccount(input: $i) { accountId } }';
    const answers = engine.executeBatch([
      invoke(940, adminKey),
      invoke(941, mallory),
      invoke(942, adminKey),
      {
        request: {
          query: CREATE,
          variables: { i: { accountId: id(5), code: 'ACC-5', name: 'Five' } },
          operationName: null,
        },
        options: { apiKey: adminKey },
      },
      invoke(943, adminKey),
    ]);
    const out = answers.map((a) => (a.data as any)?.actions?.invokeAction ?? a.errors);
    expect(out[0]).toMatchObject({ status: 'SUCCEEDED', output: { n: 4 } });
    expect(out[1]).toMatchObject({ output: { n: 1 } });
    expect(out[1].cachedFrom).not.toBe(id(940));
    expect(out[2]).toMatchObject({ status: 'CACHED', output: { n: 4 }, cachedFrom: id(940) });
    expect(out[4]).toMatchObject({ status: 'SUCCEEDED', output: { n: 5 }, cachedFrom: null });
  });

  it("holds: each request of a group gets its own deadline (a slow earlier request does not eat a later one's)", async () => {
    // spin eats 900 ms of its request's 1000; had the group one deadline, slowish (~50 ms on a
    // quiet machine, a few times that on a busy one) would have 100 ms left. It has its own 1000.
    const { engine, adminKey } = await writer({
      toolTimeoutMs: 1000,
      toolTimeoutMsMax: 1000,
      requestDeadlineMs: 1000,
      writeBatchWaitMs: 60_000,
    });
    ok(engine, CREATE_ACTION, {
      id: id(71),
      input: {
        name: 'spin',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() { while (true) {} }' },
        policies: [],
        execution: { timeoutMs: 900 },
      },
    });
    ok(engine, CREATE_ACTION, {
      id: id(72),
      input: {
        name: 'slowish',
        kind: 'tool',
        config: {
          runtime: 'javascript',
          src: 'function run() { let x = 0; for (let i = 0; i < 1e6; i++) x += i; return x > 0; }',
        },
        policies: [],
      },
    });
    const answers = engine.executeBatch([
      {
        request: { query: INVOKE_BY_NAME, variables: { n: 'spin', e: id(910), i: {} }, operationName: null },
        options: { apiKey: adminKey },
      },
      {
        request: { query: INVOKE_BY_NAME, variables: { n: 'slowish', e: id(911), i: {} }, operationName: null },
        options: { apiKey: adminKey },
      },
      post(42, adminKey),
    ]);
    expect(code(answers[0])).toBe('TIMEOUT');
    expect(answers[1]!.errors).toBeUndefined();
    expect(txOf(answers[2])).toBe(id(42));
  });
});

describe("the queue worker's grouped attempts", () => {
  it("holds: an attempt that breaks its group's COMMIT every time does not stop the others: each is recorded once, it alone fails", async () => {
    const { engine, adminKey } = await writer({ workerBatchMax: 16, writeBatchWaitMs: 60_000 });
    // As in test/runtime/group-commit.test.ts: a deferred foreign key checked at COMMIT, broken by a posting of 13.13.
    engine.db.exec(`CREATE TABLE commit_guard (account_id TEXT REFERENCES accounts (account_id) DEFERRABLE INITIALLY DEFERRED);
      CREATE TRIGGER commit_guard_boom AFTER INSERT ON entries WHEN NEW.units = '13.13'
      BEGIN INSERT INTO commit_guard VALUES ('no such account'); END;`);
    const src = `function run(e) { return graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }',
      { i: { transactionId: e.data.tx, tranCode: 'TRANSFER', params: { from: e.data.from, to: e.data.to, amount: e.data.amount } } }).postTransaction.transactionId; }`;
    ok(engine, CREATE_ACTION, {
      id: id(90),
      input: { name: 'payer', kind: 'tool', config: { runtime: 'javascript', src }, policies: ALLOW_ALL },
    });
    const START =
      'mutation($e: UUID!, $i: JSON) { actions { startAction(name: "payer", input: {executionId: $e, input: $i}) { status } } }';
    for (let k = 0; k < 8; k++) {
      const started = engine.graphql(
        START,
        { e: id(9000 + k), i: { tx: id(700 + k), from: id(1), to: id(2), amount: k === 2 ? '13.13' : '1' } },
        { apiKey: adminKey },
      );
      expect(started.errors).toBeUndefined();
    }
    const outcomes: unknown[] = [];
    const worker = engine.createWorker({ onAttempt: (outcome) => outcomes.push(outcome) });
    worker.drain();
    const rows = engine.db
      .prepare("SELECT execution_id, status FROM executions WHERE action_name = 'payer' ORDER BY execution_id")
      .all() as Array<{ execution_id: string; status: string }>;
    const byId = Object.fromEntries(rows.map((r) => [r.execution_id, r.status]));
    for (let k = 0; k < 8; k++) if (k !== 2) expect(byId[id(9000 + k)], `execution ${k}`).toBe('SUCCEEDED');
    expect(byId[id(9002)]).not.toBe('SUCCEEDED');
    expect(engine.db.prepare('SELECT count(*) FROM transactions').pluck().get()).toBe(7);
    expect(outcomes.length).toBeGreaterThanOrEqual(8);
  });
});

describe('the pre-check key cache (knownPrincipal) and revocation', () => {
  it('holds: a key rotated over HTTP is refused at once for queries (read pool), mutations (write queue) and /metrics', async () => {
    const { engine, path, adminKey } = await writer();
    const mallory = createClient(engine, 'mallory', [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT'], resources: ['financial.*'] },
    ]);
    const pool = await readPool(path);
    const http = await serve(engine, pool);
    // Warm the pre-check cache with mallory's key.
    expect((await http.graphql(mallory, '{ accounts(first: 1) { nodes { code } } }')).status).toBe(200);
    expect(await http.get(mallory, '/metrics')).toBe(200);
    const rotated = await http.graphql(
      adminKey,
      'mutation { auth { updateClient(principal: "mallory", input: {rotateKey: true}) { apiKey } } }',
    );
    expect(rotated.body.errors).toBeUndefined();
    expect((await http.graphql(mallory, '{ accounts(first: 1) { nodes { code } } }')).status).toBe(401);
    expect((await http.graphql(mallory, POST, transfer(50, 1, 2, '1'))).status).toBe(401);
    expect(await http.get(mallory, '/metrics')).toBe(401);
    expect(engine.db.prepare('SELECT count(*) FROM transactions').pluck().get()).toBe(0);
  });

  it('holds: a key rotated by another connection (a CLI on the same file) does nothing but have a body read; /metrics for at most ~1 s', async () => {
    const { engine, path } = await writer();
    const mallory = createClient(engine, 'mallory', [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT'], resources: ['financial.*'] },
    ]);
    const pool = await readPool(path);
    const http = await serve(engine, pool);
    expect((await http.graphql(mallory, '{ accounts(first: 1) { nodes { code } } }')).status).toBe(200);
    expect(await http.get(mallory, '/metrics')).toBe(200);
    // Another process rotates the key (here: a second engine on the same file).
    const other = await newEngine({ path, checkpointIntervalMs: 0 });
    ok(other, 'mutation { auth { updateClient(principal: "mallory", input: {rotateKey: true}) { apiKey } } }');
    other.close();
    const query = await http.graphql(mallory, '{ accounts(first: 1) { nodes { code } } }');
    expect(query.status).toBe(401);
    const mutation = await http.graphql(mallory, POST, transfer(51, 1, 2, '1'));
    expect(mutation.status).toBe(401);
    expect(engine.db.prepare('SELECT count(*) FROM transactions').pluck().get()).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    expect(await http.get(mallory, '/metrics')).toBe(401);
  });
});

describe('the read pool answers what the writer would', () => {
  it('holds: the same queries with the same restricted key answer the same on the writer and on the pool (policies, denials, whoami)', async () => {
    const { engine, path, adminKey } = await writer();
    engine.executeBatch([post(60, adminKey), post(61, adminKey, 2, 3, '2.50')]);
    const viewer = createClient(engine, 'viewer', [
      {
        effect: 'ALLOW',
        actions: ['SELECT'],
        resources: ['financial.Account'],
        assertions: { mine: "context.document.code == 'ACC-1'" },
      },
    ]);
    const pool = await readPool(path);
    const queries = [
      '{ accounts(first: 10) { nodes { code } } }',
      `{ account(id: "${id(1)}") { code name } }`,
      `{ account(id: "${id(2)}") { code name } }`,
      `{ balance(accountId: "${id(1)}", currency: "USD") { settled { normalBalance { units } } } }`,
      `{ transaction(id: "${id(60)}") { transactionId } }`,
      '{ auth { whoami { principal } } }',
      '{ auth { clients(first: 5) { nodes { principal } } } }',
      '{ actions { executions(first: 5) { nodes { executionId } } } }',
    ];
    for (const key of [viewer, adminKey]) {
      for (const query of queries) {
        const onWriter = await engine.executeAsync({ query, variables: null, operationName: null }, { apiKey: key });
        const onPool = await pool.execute({ query, variables: null, operationName: null }, { apiKey: key });
        expect(json(onPool), `${query} as ${key === viewer ? 'viewer' : 'admin'}`).toEqual(json(onWriter));
      }
    }
  });

  it('holds: deeply nested variables (within requestBodyBytesMax) neither crash the server nor a read thread', async () => {
    const { engine, path, adminKey } = await writer();
    const pool = await readPool(path);
    const http = await serve(engine, pool);
    const depth = 200_000;
    const body = `{"query":"query($x: JSON) { __typename }","variables":{"x":${'['.repeat(depth)}${']'.repeat(depth)}}}`;
    const reply = await http.raw(adminKey, body);
    expect(reply.status).toBeLessThan(500);
    expect(reply.text).toMatch(/errors/);
    const after = await http.graphql(adminKey, '{ accounts(first: 1) { nodes { code } } }');
    expect(after.status).toBe(200);
    expect(pool.stats().restarts).toBe(0);
  });

  it('holds: no write is reachable from a query on the pool (a mutation named as a query, an operation chosen by name, GET)', async () => {
    const { engine, path, adminKey } = await writer();
    const pool = await readPool(path);
    const http = await serve(engine, pool);
    // Two operations, the mutation chosen by operationName: the server routes it to the writer, not the pool.
    const both = `query Q { accounts(first: 1) { nodes { code } } } mutation M { postTransaction(input: {transactionId: "${id(70)}", tranCode: "TRANSFER", params: {from: "${id(1)}", to: "${id(2)}", amount: "1"}}) { transactionId } }`;
    const direct = await pool.execute({ query: both, variables: null, operationName: 'M' }, { apiKey: adminKey });
    expect(code(direct)).toBe('BAD_REQUEST');
    expect(engine.db.prepare('SELECT count(*) FROM transactions').pluck().get()).toBe(0);
    const viaHttp = await http.graphql(adminKey, both, undefined);
    // No operationName with two operations: refused, nothing written.
    expect(viaHttp.body.errors?.length).toBeGreaterThan(0);
    expect(engine.db.prepare('SELECT count(*) FROM transactions').pluck().get()).toBe(0);
  });
});

/** Accounts 1-3 (of the writer fixture) and `postings` transfers between them, 100 per request. */
function postings(engine: Engine, count: number): void {
  postTransfers(engine, count);
}
/** Under the cost limit, yet a row lookup per entry: long on a ledger of a few thousand postings. */
const HEAVY_READ =
  '{ accounts(first: 3) { nodes { entries(first: 1000) { nodes { transaction { description entries(first: 5) { nodes { units account { code } } } } } } } } }';

describe('the read pool keeps heavy reads off the writer', () => {
  /*
   * FINDING (HIGH, availability): http.ts executeWaiting sends a query to the read pool only when
   * `!request.query.includes('waitMs')` — a substring test on the raw text. Any client appends a
   * comment `# waitMs` (or names an alias or variable so) and its query runs on the writer instead:
   * synchronously on the main thread, for up to requestDeadlineMs, outside the read pool's queue and
   * its per-client fairness (readQueueMax, shedding). Every other client's mutation (the write
   * queue's groups run on that same thread) and every reply waits behind it; a client with SELECT
   * only, sending such queries back to back, keeps the writer busy almost all the time.
   * Repro: 3,000 postings; mallory (SELECT on financial.*) sends HEAVY_READ with "# waitMs"; an
   * honest post sent 50 ms later is answered only after the heavy read ends (~the deadline), while
   * the same read without the comment leaves the post's latency at a few ms.
   * Fix: decide from the parsed operation (the prepared document: an `execution` field with a
   * `waitMs` argument whose value is > 0), not from the text; better, let the read threads serve
   * waits too (they already poll), so no query ever runs on the writer; and bound writer-side reads
   * with the same per-client queue as the pool.
   */
  /*
   * FINDING (LOW, availability): with a read pool, every query is still parsed, validated and
   * costed on the writer's thread first: http.ts traceOperation → engine.describeOperation →
   * documents.prepare, only to learn that it is a query and trace its name. The read thread then
   * prepares it again. A document within the bounds (660 aliased connections, 30 KB) costs ~20-80 ms
   * (first ones ~250-450 ms) of the main thread when it is not in the writer's document cache, and
   * a client makes every document new (an alias suffix). So a SELECT-only client keeps the writer's
   * event loop (group commits, every reply) busy with queries the pool was meant to take off it.
   * Fix: decide query vs mutation from a cheap parse only (graphql-js parse with noLocation, or a
   * token scan for the selected operation's keyword) on the main thread, and leave validation and
   * cost to the engine that runs the request (the read thread for queries).
   * Fixed in part: the server now only parses (engine.peekOperation) and the read thread validates
   * (the test checks no document was prepared on the writer); the HTTP thread still parses each new
   * document and serialises its answer (~250 ms for these 18 here, against ~1.3 s before).
   */
  it("a new, large query answered by the pool is not validated on the writer's thread (the read thread validates it)", async () => {
    const { engine, path } = await writer();
    const mallory = createClient(engine, 'mallory', [
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
    ]);
    const pool = await readPool(path);
    const http = await serve(engine, pool);
    await http.graphql(mallory, '{ accounts(first: 1) { nodes { code } } }');
    const cachedBefore = engine.stats().documentCacheSize;
    const doc = (r: number) =>
      `{ ${Array.from({ length: 660 }, (_, i) => `a${i}_${r}: accounts(first: 1) { nodes { code } }`).join(' ')} }`;
    let last = performance.now();
    let blockedMs = 0;
    const ticker = setInterval(() => {
      const now = performance.now();
      blockedMs += Math.max(0, now - last - 10);
      last = now;
    }, 2);
    for (let round = 0; round < 3; round++) {
      const answers = await Promise.all(
        Array.from({ length: 6 }, (_, k) => http.graphql(mallory, doc(round * 10 + k))),
      );
      for (const a of answers) expect(a.body.errors).toBeUndefined();
    }
    clearInterval(ticker);
    // 18 documents, all answered by the pool: none was prepared (validated, costed) on the writer.
    expect(engine.stats().documentCacheSize).toBe(cachedBefore);
    // What is left on this thread is each new document's parse and its answer's serialisation
    // (~250 ms for these 18 here, against ~1.3 s with validation): reported, not asserted (timing).
    console.log(`writer's thread blocked ${Math.round(blockedMs)} ms for 18 new 660-field documents`);
  }, 60_000);

  it('a query with the text "waitMs" in a comment still runs on the pool, not on the writer\'s thread', async () => {
    const { engine, path, adminKey } = await writer({ requestDeadlineMs: 1500, queryCostMax: 100_000_000 });
    postings(engine, 3000);
    const mallory = createClient(engine, 'mallory', [
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
    ]);
    const pool = await readPool(path, { requestDeadlineMs: 1500, queryCostMax: 100_000_000 });
    const http = await serve(engine, pool);
    // Warm both paths.
    await http.graphql(adminKey, POST, transfer(60, 1, 2, '1'));
    await http.graphql(mallory, '{ accounts(first: 1) { nodes { code } } }');
    // The server runs on this thread: the longest gap between ticks of a 5 ms timer is how long its
    // event loop (the writer, the write queue, every reply) was blocked. The honest post is timed
    // from when it was meant to be sent (50 ms after the heavy read), since a blocked loop delays
    // its sending too.
    const race = async (query: string, tx: number) => {
      let last = performance.now();
      let gapMs = 0;
      const ticker = setInterval(() => {
        const now = performance.now();
        gapMs = Math.max(gapMs, now - last);
        last = now;
      }, 5);
      const began = performance.now();
      const heavy = http.graphql(mallory, query).then((r) => ({ ms: performance.now() - began, r }));
      await new Promise((resolve) => setTimeout(resolve, 50));
      const honest = await http.graphql(adminKey, POST, transfer(tx, 1, 2, '1'));
      const postMs = performance.now() - (began + 50);
      const h = await heavy;
      clearInterval(ticker);
      return { heavyMs: h.ms, heavyCode: h.r.body.errors?.[0]?.extensions?.code ?? null, postMs, gapMs, honest };
    };
    const onPool = await race(HEAVY_READ, 61);
    expect(onPool.honest.body.errors).toBeUndefined();
    // The heavy read really is heavy (on the writer it would hold everything this long)...
    expect(onPool.heavyMs).toBeGreaterThan(200);
    // ...and on the pool it does not hold up the writer's thread nor the honest write.
    expect(onPool.gapMs).toBeLessThan(150);
    expect(onPool.postMs).toBeLessThan(250);
    const bypass = await race(`${HEAVY_READ}\n# waitMs`, 62);
    expect(bypass.honest.body.errors).toBeUndefined();
    console.log(JSON.stringify({ onPool: { ...onPool, honest: undefined }, bypass: { ...bypass, honest: undefined } }));
    expect(bypass.gapMs).toBeLessThan(150);
    expect(bypass.postMs).toBeLessThan(250);
  }, 120_000);
});

/** Run in a checkout of 00f798e: a version-14 database with real call trees, and how v14 read them. */
const MAKE_V14 =
  "// Usage: tsx make-v14.mts <db path> <out json>: a version-14 database with real call trees, and how v14 reads them.\nimport { writeFileSync } from 'node:fs';\nimport { createEngine } from './src/engine.js';\nconst [path, out] = process.argv.slice(2);\nconst id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;\nconst engine = await createEngine({ path, logError: () => {}, limits: { queryCostMax: 100_000_000 } });\nconst g = (q: string, v?: Record<string, unknown>, principal?: string) => {\n  const r = engine.graphql(q, v ?? null, principal ? { principal } : {});\n  if (r.errors) throw new Error(JSON.stringify(r.errors));\n  return r.data as any;\n};\nconst ALLOW_ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];\nconst CREATE = 'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }';\ng('mutation($input: AccountInput!) { createAccount(input: $input) { accountId } }', { input: { accountId: id(1), code: 'ACC-1', name: 'Account 1' } });\ng(CREATE, { id: id(11), input: { name: 'inner', kind: 'tool', config: { runtime: 'javascript', src: `function run(event) { return { v: cel('n * 10', { n: event.data.n }), q: graphql('{ journals(first: 1) { nodes { code } } }').journals.nodes[0].code }; }` }, policies: ALLOW_ALL } });\nconst OUTER = `function run(event) {\n  const account = graphql('query Q($id: UUID!) { account(id: $id) { code } }', { id: event.data.account });\n  const three = cel('a + b', { a: 1, b: 2 });\n  const inner = tools.inner({ n: 4 });\n  let code = null;\n  try { graphql('mutation { postTransaction(input: {}) { transactionId } }', {}); } catch (e) { code = e.code; }\n  const via = graphql('mutation($id: UUID!, $e: UUID!) { actions { invokeAction(id: $id, input: {executionId: $e, actionVersion: 1, input: {n: 5}}) { status output } } }', { id: event.data.inner, e: event.data.e2 });\n  console.log('done');\n  return { code: account.account.code, three, inner, failed: code, via: via.actions.invokeAction.output };\n}`;\ng(CREATE, { id: id(10), input: { name: 'outer', kind: 'tool', config: { runtime: 'javascript', src: OUTER }, policies: ALLOW_ALL, tools: [{ name: 'inner', version: 1 }] } });\n// A tool that fails after its calls, and one started (queued, run by the worker).\ng(CREATE, { id: id(12), input: { name: 'failing', kind: 'tool', config: { runtime: 'javascript', src: `function run() { graphql('{ journals(first: 1) { nodes { code } } }'); cel('1'); throw new Error('boom'); }` }, policies: ALLOW_ALL } });\nconst FIELDS = `executionId actionId actionName actionVersion kind status input output error { code message hint details } attempt runAt triggerId triggerDepth caller { principal transport } parent { executionId } sessionId cancelRequested cachedFrom created invocation { attempt status output error { code message hint } started finished durationMs logs } invocations { attempt status }`;\nconst TREE = `${FIELDS} children { ${FIELDS} children { ${FIELDS} children { ${FIELDS} children { ${FIELDS} } } } }`;\nconst INVOKE = `mutation($id: UUID!, $e: UUID!, $input: JSON) { actions { invokeAction(id: $id, input: {executionId: $e, actionVersion: 1, input: $input}) { executionId } } }`;\ng(INVOKE, { id: id(10), e: id(500), input: { account: id(1), inner: id(11), e2: id(501) } });\nengine.graphql(INVOKE, { id: id(12), e: id(510), input: {} });\ng('mutation($e: UUID!) { actions { startAction(name: \"outer\", input: {executionId: $e, input: {account: \"' + id(1) + '\", inner: \"' + id(11) + '\", e2: \"' + id(521) + '\"}}) { status } } }', { e: id(520) });\nengine.createWorker().drain();\nconst ids = (engine.db.prepare('SELECT execution_id FROM executions ORDER BY seq').pluck().all() as string[]);\nconst READ = `query($e: UUID!) { actions { execution(executionId: $e) { ${TREE} } } }`;\nconst reads: Record<string, unknown> = {};\nfor (const e of ids) reads[e] = engine.graphql(READ, { e });\nreads.list = engine.graphql(`{ actions { executions(first: 100) { nodes { executionId kind status } } } }`);\nengine.close();\nwriteFileSync(out, JSON.stringify({ ids, reads }));\nconsole.log('rows', ids.length);\n";
const V14_FIELDS = `executionId actionId actionName actionVersion kind status input output error { code message hint details } attempt runAt triggerId triggerDepth caller { principal transport } parent { executionId } sessionId cancelRequested cachedFrom created invocation { attempt status output error { code message hint } started finished durationMs logs } invocations { attempt status }`;
const V14_TREE = `${V14_FIELDS} children { ${V14_FIELDS} children { ${V14_FIELDS} children { ${V14_FIELDS} children { ${V14_FIELDS} } } } }`;
const V14_READ = `query($e: UUID!) { actions { execution(executionId: $e) { ${V14_TREE} } } }`;

describe('the read pool and the WAL', () => {
  /** Writes `rounds` batches of 100 postings while `reading` keeps read transactions open on the pool; the largest WAL seen. */
  async function walUnder(reading: boolean, rounds: number) {
    const { statSync } = await import('node:fs');
    const limits = { walAutocheckpointPages: 200, requestDeadlineMs: 3000, queryCostMax: 100_000_000 };
    const { engine, path } = await writer(limits);
    postings(engine, 1000);
    const mallory = createClient(engine, 'mallory', [
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
    ]);
    const pool = await ReadPool.start({ path, size: 2, limits, logError: () => {} });
    cleanups.push(() => pool.close());
    let stop = false;
    const readers = reading
      ? [0, 1].map(async (k) => {
          await new Promise((resolve) => setTimeout(resolve, k * 150));
          while (!stop) await pool.execute({ query: HEAVY_READ }, { apiKey: mallory });
        })
      : [];
    let walMax = 0;
    for (let r = 0; r < rounds; r++) {
      postTransfers(engine, 100, 500_000 + r * 100);
      // Let the checkpointer (every 25 ms) and the readers run.
      await new Promise((resolve) => setTimeout(resolve, 40));
      walMax = Math.max(walMax, statSync(`${path}-wal`).size);
    }
    stop = true;
    await Promise.all(readers);
    return { walMax, holds: pool.stats().walHolds };
  }

  it('holds (control): with writes alone, the checkpointer keeps the WAL near walAutocheckpointPages (200 pages, ~0.8 MB)', async () => {
    const { walMax, holds } = await walUnder(false, 60);
    expect(walMax).toBeLessThan(2_000_000);
    // Nothing to hold reads for when no reader keeps a checkpoint from finishing.
    expect(holds).toBe(0);
  }, 180_000);

  /*
   * FINDING F3 (MEDIUM, resource exhaustion), fixed: WAL checkpoint starvation by a SELECT-only
   * client. The WAL can only be restarted (written again from its start) when a checkpoint has
   * copied every frame and no reader still uses one; each read thread holds a read transaction for
   * the whole query, so a client keeping one heavy query running on each of the two threads,
   * staggered, always had a snapshot open older than the latest writes: the checkpoints never
   * completed and the WAL grew with every write, without bound (~12 MB after 60 batches here,
   * linear). Fix: the pool reads the WAL index (-shm) and, once more than walAutocheckpointPages
   * frames are not all checkpointed, holds new reads in its queue until the running ones end and a
   * checkpoint completes (ReadPool.walHeld); journal_size_limit shrinks the file at the restart.
   */
  it('overlapping reads from one client on the pool do not let the WAL grow past a few times walAutocheckpointPages', async () => {
    const { walMax, holds } = await walUnder(true, 60);
    console.log(JSON.stringify({ walMax, holds }));
    expect(walMax).toBeLessThan(3_000_000);
    expect(holds).toBeGreaterThan(0);
  }, 180_000);
});

describe('the read pool and a checkpoint it cannot help', () => {
  it('holds: a reader outside the pool keeping every checkpoint from finishing does not make the pool hold its reads again and again', async () => {
    const limits = { walAutocheckpointPages: 200, requestDeadlineMs: 3000, queryCostMax: 100_000_000 };
    const { engine, path, adminKey } = await writer(limits);
    postings(engine, 100);
    const pool = await ReadPool.start({ path, size: 2, limits, logError: () => {} });
    cleanups.push(() => pool.close());
    // Another connection (another process, a backup) holds an old snapshot open.
    const outside = new Database(path, { readonly: true });
    cleanups.push(() => outside.close());
    outside.exec('BEGIN');
    outside.prepare('SELECT count(*) FROM accounts').get();
    postTransfers(engine, 2000, 700_000);
    // The log is past the bound and no checkpoint can finish: the pool holds once, then lets reads go.
    for (let i = 0; i < 30; i++) {
      const answer = await pool.execute({ query: '{ journal { name } }' }, { apiKey: adminKey });
      expect(answer.errors).toBeUndefined();
    }
    expect(pool.stats().walHolds).toBeGreaterThanOrEqual(1);
    expect(pool.stats().walHolds).toBeLessThanOrEqual(2);
    outside.exec('COMMIT');
  }, 60_000);
});

describe('lean call records (migration 15)', () => {
  const PEEK =
    "function run() { return graphql('{ accounts(first: 1) { nodes { code } } }').accounts.nodes[0].code + cel('1 + 1', {}); }";

  async function fixture() {
    const w = await writer({ queryCostMax: 100_000_000 });
    ok(w.engine, CREATE_ACTION, {
      id: id(80),
      input: { name: 'peek', kind: 'tool', config: { runtime: 'javascript', src: PEEK }, policies: ALLOW_ALL },
    });
    const ran = w.engine.graphql(INVOKE_BY_NAME, { n: 'peek', e: id(800), i: {} }, { apiKey: w.adminKey });
    expect(ran.errors).toBeUndefined();
    const node = (ran.data as any).actions.invokeAction;
    const compact = node.children.map((c: { executionId: string }) => c.executionId) as string[];
    expect(compact.length).toBe(2);
    // They are compact entries, not rows.
    for (const c of compact)
      expect(w.engine.db.prepare('SELECT count(*) FROM executions WHERE execution_id = ?').pluck().get(c)).toBe(0);
    const mallory = createClient(w.engine, 'mallory', [
      {
        effect: 'ALLOW',
        actions: ['SELECT'],
        resources: ['actions.Execution'],
        assertions: { mine: "context.document.principal == 'mallory'" },
      },
      { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['actions.Action'] },
    ]);
    return { ...w, compact, mallory };
  }

  it("holds: another client cannot read admin's compact graphql()/cel() calls by id, on the writer nor on the pool", async () => {
    const { engine, path, adminKey, compact, mallory } = await fixture();
    const pool = await readPool(path, { queryCostMax: 100_000_000 });
    for (const e of compact) {
      const asAdmin = engine.graphql(READ_EXECUTION, { e }, { apiKey: adminKey });
      expect(asAdmin.errors).toBeUndefined();
      expect((asAdmin.data as any).actions.execution.caller.principal).toBe('admin');
      const onWriter = engine.graphql(READ_EXECUTION, { e }, { apiKey: mallory });
      expect(onWriter.errors?.length).toBeGreaterThan(0);
      expect(JSON.stringify(onWriter)).not.toContain('ACC-1');
      const onPool = await pool.execute(
        { query: READ_EXECUTION, variables: { e }, operationName: null },
        { apiKey: mallory },
      );
      expect(json(onPool)).toEqual(json(onWriter));
    }
  });

  // Needs the commit before migration 15 in this clone's history (a shallow clone has not got it).
  const hasV14Commit = (() => {
    try {
      execFileSyncAtLoad('git', ['-C', process.cwd(), 'cat-file', '-e', '00f798e^{commit}'], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  })();
  it.skipIf(!hasV14Commit)(
    'holds: migration 15 on a database written by the previous commit (real trees: nested tools, a failed call, a worker-run attempt) reads back identically',
    async () => {
      const { execSync, execFileSync } = await import('node:child_process');
      const { symlinkSync, writeFileSync, readFileSync } = await import('node:fs');
      const root = process.cwd();
      const old = mkdtempSync(join(tmpdir(), 'tally-v14-'));
      dirs.push(old);
      // The tree of 00f798e (schema version 14), read-only from git; its node_modules are today's.
      execSync(`git -C ${JSON.stringify(root)} archive 00f798e | tar -x -C ${JSON.stringify(old)}`);
      symlinkSync(join(root, 'node_modules'), join(old, 'node_modules'));
      writeFileSync(join(old, 'make-v14.mts'), MAKE_V14);
      const path = join(old, 'v14.db');
      const out = join(old, 'v14.json');
      execFileSync(process.execPath, ['--import', 'tsx', 'make-v14.mts', path, out], {
        cwd: old,
        stdio: 'pipe',
        timeout: 120_000,
      });
      const before = JSON.parse(readFileSync(out, 'utf8')) as { ids: string[]; reads: Record<string, unknown> };
      expect(before.ids.length).toBeGreaterThan(10);
      const engine = await newEngine({ path, limits: { queryCostMax: 100_000_000 } });
      cleanups.push(() => engine.close());
      // Compacted: fewer rows, the rest found through call_ids.
      expect(engine.db.prepare('SELECT count(*) FROM executions').pluck().get()).toBeLessThan(before.ids.length);
      expect(engine.db.prepare('SELECT count(*) FROM call_ids').pluck().get()).toBeGreaterThan(0);
      for (const e of before.ids) expect(json(engine.graphql(V14_READ, { e })), e).toEqual(before.reads[e]);
      expect(
        json(engine.graphql('{ actions { executions(first: 100) { nodes { executionId kind status } } } }')),
      ).toEqual(before.reads.list);
    },
    180_000,
  );

  it('holds: the id of a compact call cannot be taken by invoke or start (another client, or the owner)', async () => {
    const { engine, adminKey, compact, mallory } = await fixture();
    ok(engine, CREATE_ACTION, {
      id: id(81),
      input: {
        name: 'noop',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() { return 1; }' },
        policies: [],
      },
    });
    // Control: mallory may invoke, and read her own execution.
    const own = engine.graphql(INVOKE_BY_NAME, { n: 'noop', e: id(820), i: {} }, { apiKey: mallory });
    expect(own.errors, JSON.stringify(own.errors)).toBeUndefined();
    expect(
      (engine.graphql(READ_EXECUTION, { e: id(820) }, { apiKey: mallory }).data as any).actions.execution.caller
        .principal,
    ).toBe('mallory');
    for (const e of compact) {
      for (const key of [mallory, adminKey]) {
        const invoked = engine.graphql(INVOKE_BY_NAME, { n: 'noop', e, i: {} }, { apiKey: key });
        expect(code(invoked)).toBe('EXECUTION_ID_CONFLICT');
        const started = engine.graphql(START_BY_NAME, { n: 'noop', e }, { apiKey: key });
        expect(code(started)).toBe('EXECUTION_ID_CONFLICT');
        // Native tools by name, with the compact call's id.
        const native = engine.graphql(
          INVOKE_BY_NAME.replace('actionVersion: 1, ', ''),
          { n: 'cel', e, i: { expression: '1' } },
          { apiKey: key },
        );
        expect(code(native)).toBe('EXECUTION_ID_CONFLICT');
      }
      // The compact call still reads as it was.
      expect(
        (engine.graphql(READ_EXECUTION, { e }, { apiKey: adminKey }).data as any).actions.execution.executionId,
      ).toBe(e);
    }
    expect(
      engine.db
        .prepare('SELECT count(*) FROM executions WHERE execution_id IN (SELECT call_id FROM call_ids)')
        .pluck()
        .get(),
    ).toBe(0);
  });
});
