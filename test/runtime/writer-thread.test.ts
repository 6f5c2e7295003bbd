import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createEngine, type Engine } from '../../src/engine.js';
import { WriteQueue } from '../../src/runtime/write-queue.js';
import { WriterThread } from '../../src/runtime/writer-thread.js';
import { createAccount, createTransferCode, postTransfers } from '../helpers/ledger.js';
import { id, ok } from '../helpers/engine.js';

/**
 * `tally serve` runs its writer engine (mutations, tools, the queue worker) on a thread of its own:
 * the HTTP thread only checks keys, routes and replies, so a tool running to its deadline holds
 * neither the reads (read pool) nor the probes. Ordering, not timing: a read sent while a tool
 * spins is answered before that tool's own reply.
 */

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');
const ADMIN = 'tly_writer-thread-admin-key';
const ACTION = '00000000-0000-4000-8000-00000000a001';

interface Served {
  child: ChildProcess;
  url: string;
  db: string;
  lines: Array<Record<string, unknown>>;
  output: () => string;
}

async function serve(
  limits?: Record<string, number>,
  db = join(mkdtempSync(join(tmpdir(), 'tally-writer-')), 'w.db'),
): Promise<Served> {
  const folder = dirname(db);
  const env: NodeJS.ProcessEnv = { ...process.env, TALLY_ADMIN_KEY: ADMIN };
  delete env.TALLY_CONFIG;
  if (limits) {
    env.TALLY_CONFIG = join(folder, 'tally.config.json');
    writeFileSync(env.TALLY_CONFIG, JSON.stringify({ limits }));
  }
  const withWriter = limits?.writerThreads !== 0;
  const child = spawn(process.execPath, [BIN, 'serve', '--db', db, '--port', '0', '--log-level', 'info'], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
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
      if (url && (!withWriter || lines.some((l) => l.event === 'writer')) && lines.some((l) => l.event === 'reads'))
        resolve(url);
    });
    child.once('exit', () => reject(new Error(`serve exited: ${output}`)));
  });
  return { child, url, db, lines, output: () => output };
}

function post(
  served: Served,
  query: string,
  variables: Record<string, unknown> = {},
  key = ADMIN,
): Promise<{ status: number; body: any }> {
  return fetch(served.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ query, variables }),
  }).then(async (res) => ({ status: res.status, body: await res.json() }));
}

/** A tool that spins until its deadline (it never returns: each call fails TIMEOUT). */
async function createSpinner(served: Served, timeoutMs: number): Promise<void> {
  const created = await post(
    served,
    `mutation($t: Int!) { actions { createAction(id: "${ACTION}", input: {name: "spin", kind: "tool",
    config: {runtime: "javascript", src: "function run() { for (;;) {} }"}, execution: {timeoutMs: $t},
    policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { version } } }`,
    { t: timeoutMs },
  );
  expect(created.body.errors).toBeUndefined();
  expect(created.body.data.actions.createAction.version).toBe(1);
}

/** Each call ends TIMEOUT: an error, and no data (the request's writes are rolled back). */
const INVOKE_SPIN = `mutation($e: UUID!) { actions { invokeAction(name: "spin", input: {executionId: $e, actionVersion: 1}) { status } } }`;

/** Resolves with the order in which the promises settled, by label. */
function settleOrder(entries: Record<string, Promise<unknown>>): Promise<string[]> {
  const order: string[] = [];
  return Promise.all(
    Object.entries(entries).map(([label, p]) =>
      p.then(
        () => order.push(label),
        () => order.push(label),
      ),
    ),
  ).then(() => order);
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
    const metrics = fetch(served.url.replace('/graphql', '/metrics'), {
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    const write = post(
      served,
      'mutation { createJournal(input: {journalId: "00000000-0000-4000-8000-00000000c001", name: "After"}) { name } }',
    );
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
    const text = await (
      await fetch(served.url.replace('/graphql', '/metrics'), { headers: { authorization: `Bearer ${ADMIN}` } })
    ).text();
    expect(Number(/^tally_write_batches_total (\d+)/m.exec(text)?.[1])).toBeGreaterThan(0);
    expect(/^tally_document_cache_entries (\d+)/m.exec(text)).not.toBeNull();
    // And the read pool's own figures.
    expect(text).toMatch(/^tally_read_pool_threads_ready 2$/m);
    expect(text).toMatch(/^tally_read_pool_wal_holds 0$/m);
  }, 30_000);

  it("a hostile client keeping the writer busy with spinning tools does not hold another client's reads", async () => {
    // The other client: its own key, allowed to read.
    const created = await post(
      served,
      `mutation { auth { createClient(input: {principal: "reader", name: "reader", policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { apiKey } } }`,
    );
    const readerKey = created.body.data.auth.createClient.apiKey as string;
    const hostile = Array.from({ length: 3 }, (_, i) =>
      post(served, INVOKE_SPIN, { e: `00000000-0000-4000-8000-00000000b1${String(i).padStart(2, '0')}` }),
    );
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

  it("/readyz reports the writer thread's sandbox and queue worker", async () => {
    const res = await fetch(served.url.replace('/graphql', '/readyz'));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ready', checks: { database: 'ok', sandbox: 'ok', worker: 'ok' } });
  });

  it('the queue worker runs on the writer thread: a started execution runs, and its attempt is counted in /metrics', async () => {
    const started = await post(
      served,
      `mutation { actions { createAction(id: "00000000-0000-4000-8000-00000000a002", input: {name: "hello", kind: "tool",
      config: {runtime: "javascript", src: "function run() { return 'hi'; }"}, policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { version }
      startAction(name: "hello", input: {executionId: "00000000-0000-4000-8000-00000000b201", actionVersion: 1}) { status } } }`,
    );
    expect(started.body.errors).toBeUndefined();
    const waited = await post(
      served,
      '{ actions { execution(executionId: "00000000-0000-4000-8000-00000000b201", waitMs: 10000) { status output } } }',
    );
    expect(waited.body.data.actions.execution).toEqual({ status: 'SUCCEEDED', output: 'hi' });
    const text = await (
      await fetch(served.url.replace('/graphql', '/metrics'), { headers: { authorization: `Bearer ${ADMIN}` } })
    ).text();
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

/**
 * The attacker: a client that may only read (or only call one slow tool) sends heavy work that runs
 * on the writer thread, and another client's posting waits for it. Everything the writer runs takes
 * turns with the group commits, so the teller waits for at most about one of the hostile requests.
 * Worst of three postings, as the hostile scripts measure; the bound (1 s) is generous for a busy
 * 2-core machine: held in turn, each posting waits for well under 0.5 s.
 */
describe("one client's requests on the writer do not hold another client's posting", () => {
  let served: Served;
  const keys: Record<string, string> = {};
  const TELLER = `{effect: ALLOW, actions: [INSERT], resources: ["financial.Transaction", "financial.Entry"]},
    {effect: ALLOW, actions: [UPDATE], resources: ["financial.Balance"]}, {effect: ALLOW, actions: [SELECT], resources: ["financial.*"]}`;
  const HOG = `{effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"], assertions: {only: "context.document.action == 'slow_report'"}},
    {effect: ALLOW, actions: [SELECT], resources: ["financial.*"]}`;

  beforeAll(async () => {
    // 2000 transfers of history to read, prepared on the file before it is served.
    const db = join(mkdtempSync(join(tmpdir(), 'tally-turns-')), 'turns.db');
    const engine = await createEngine({ path: db, logError: () => {} });
    for (const n of [1, 2, 3]) createAccount(engine, n);
    createTransferCode(engine);
    postTransfers(engine, 2000);
    for (const [principal, policies] of [
      ['reader', '{effect: ALLOW, actions: [SELECT], resources: ["*"]}'],
      ['teller', TELLER],
      ['hog', HOG],
    ] as const) {
      keys[principal] = ok(
        engine,
        `mutation { auth { createClient(input: {principal: "${principal}", name: "${principal}", policies: [${policies}]}) { apiKey } } }`,
      ).auth.createClient.apiKey;
    }
    // A tool that computes until its deadline (a slow report, a bug): the hog may call it, and nothing else.
    ok(
      engine,
      `mutation { actions { createAction(id: "${id(50)}", input: {name: "slow_report", kind: "tool",
      config: {runtime: "javascript", src: "function run() { let x = 0; for (;;) x++; }"}, execution: {timeoutMs: 300},
      tool: {description: "A slow report", inputSchema: {type: "object"}}, policies: [{effect: ALLOW, actions: [SELECT], resources: ["financial.*"]}]}) { version } } }`,
    );
    engine.close();
    served = await serve(undefined, db);
  }, 120_000);
  afterAll(() => served?.child.kill('SIGKILL'));

  let txn = 0;
  /** The teller's postings one after another while `flood` is in flight: the slowest, in ms. */
  async function worstPosting(flood: Array<Promise<unknown>>): Promise<number> {
    await new Promise((r) => setTimeout(r, 100));
    let worst = 0;
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      const posted = await post(
        served,
        'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }',
        {
          i: {
            transactionId: id(900_000 + ++txn),
            tranCode: 'TRANSFER',
            params: { from: id(1), to: id(2), amount: '1' },
          },
        },
        keys.teller,
      );
      expect(posted.body.errors).toBeUndefined();
      worst = Math.max(worst, performance.now() - t0);
    }
    await Promise.all(flood);
    return worst;
  }

  it("a read-only client's heavy queries that name waitMs (on an execution that does not exist) run where reads run, not on the writer", async () => {
    const pages = ['a', 'b', 'c', 'd']
      .map(
        (k) =>
          `${k}: transactions(first: 1000) { nodes { transactionId description created entries(first: 2) { nodes { entryId units currency direction } } } }`,
      )
      .join(' ');
    // Heavy: four full pages (this one without the wait field, to see them).
    expect((await post(served, `{ ${pages} }`, {}, keys.reader)).body.data.d.nodes).toHaveLength(1000);
    const heavy = `{ ${pages} actions { execution(executionId: "${id(424242)}", waitMs: 1) { status } } }`;
    const answers: Array<{ status: number; body: any }> = [];
    const flood = Array.from({ length: 12 }, () =>
      post(served, heavy, {}, keys.reader).then((answer) => answers.push(answer)),
    );
    const worst = await worstPosting(flood);
    // Each ran on the read side: to its end (the unknown execution is NOT_FOUND, which nulls the
    // answer's data), or, on a busy machine, until its own deadline stopped it (a heavy read is
    // bounded by requestDeadlineMs wherever it runs).
    expect(answers).toHaveLength(12);
    for (const answer of answers) {
      const error = answer.body.errors[0];
      if (error.extensions.code === 'LIMIT_EXCEEDED')
        expect(error.extensions.details).toMatchObject({ budget: 'requestDeadlineMs' });
      else expect(error.extensions.code).toBe('NOT_FOUND');
    }
    expect(worst).toBeLessThan(1000);
  }, 120_000);

  it("a client's MCP tools/call of a spinning tool (16 in flight over 8 sessions) take turns with another client's posting", async () => {
    const clients: Client[] = [];
    for (let i = 0; i < 8; i++) {
      const transport = new StreamableHTTPClientTransport(new URL(served.url.replace('/graphql', '/mcp')), {
        requestInit: { headers: { authorization: `Bearer ${keys.hog}` } },
      });
      const client = new Client({ name: `hog${i}`, version: '1' });
      await client.connect(transport);
      clients.push(client);
    }
    try {
      const outcomes: unknown[] = [];
      const flood = clients.flatMap((client) =>
        Array.from({ length: 2 }, () =>
          client
            .callTool({ name: 'slow_report', arguments: {} }, undefined, { timeout: 120_000 })
            .then((r) => outcomes.push(r)),
        ),
      );
      const worst = await worstPosting(flood);
      // Each call ran its program to its deadline.
      expect(outcomes).toHaveLength(16);
      for (const outcome of outcomes as Array<{ isError?: boolean; content: Array<{ text: string }> }>) {
        expect(outcome.isError).toBe(true);
        expect(outcome.content[0]!.text).toContain('TIMEOUT');
      }
      expect(worst).toBeLessThan(1000);
    } finally {
      for (const client of clients) await client.close();
    }
  }, 120_000);
});

const WAIT_D009 =
  '{ actions { execution(executionId: "00000000-0000-4000-8000-00000000d009", waitMs: 20000) { status } } }';

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
    const thread = await WriterThread.start({
      path,
      log: null,
      worker: null,
      limits: { writeBatchWaitMs: 60_000 },
      logError: (e) => errors.push(e),
    });
    const batches: number[] = [];
    let changed = 0;
    thread.onBatch((size) => batches.push(size));
    thread.onActionsChanged(() => changed++);
    const answers = await thread.executeGroup([
      {
        request: {
          query:
            'mutation { createJournal(input: {journalId: "00000000-0000-4000-8000-00000000d001", name: "One"}) { name } }',
        },
      },
      {
        request: {
          query:
            'mutation { createJournal(input: {journalId: "00000000-0000-4000-8000-00000000d001", name: "Again"}) { name } }',
        },
      },
    ]);
    expect(answers[0]).toEqual({ data: { createJournal: { name: 'One' } } });
    expect(answers[1]!.errors![0]!.extensions!.code).toBe('ALREADY_EXISTS');
    // The write is committed: this thread's own connection sees it.
    expect(engine.graphql('{ journals(first: 5) { nodes { name } } }').data).toEqual({
      journals: { nodes: [{ name: 'Default' }, { name: 'One' }] },
    });
    // A tool, started: no queue worker runs in this thread (worker: null), so it stays QUEUED.
    const started = await thread.execute({
      query: `mutation { actions { createAction(id: "00000000-0000-4000-8000-00000000d002", input: {name: "t", kind: "tool",
      config: {runtime: "javascript", src: "function run() { return 1; }"}, policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { version }
      startAction(name: "t", input: {executionId: "00000000-0000-4000-8000-00000000d009", actionVersion: 1}) { status } } }`,
    });
    expect(started).toEqual({ data: { actions: { createAction: { version: 1 }, startAction: { status: 'QUEUED' } } } });
    await new Promise((r) => setTimeout(r, 50));
    expect(batches).toEqual([2]);
    expect(changed).toBeGreaterThanOrEqual(1);
    // Nothing waits on the thread: a query that asks to wait answers at once there, and the thread
    // tells which executions it waits on (the server waits for them itself).
    expect((await thread.execute({ query: WAIT_D009 })).data).toEqual({ actions: { execution: { status: 'QUEUED' } } });
    expect(await thread.executionWaits({ query: WAIT_D009 })).toEqual([
      { executionId: '00000000-0000-4000-8000-00000000d009', waitMs: 20000, principal: 'system', progressAfter: 0 },
    ]);
    expect(await thread.executionWaits({ query: '{ journal { name } }' })).toEqual([]);
    const snapshot = await thread.snapshot();
    expect(snapshot).toMatchObject({ database: null, sandbox: null, workerRunning: null });
    expect(snapshot.stats!.documentCacheSize).toBeGreaterThan(0);
    await thread.close();
    const late = await thread.executeGroup([
      {
        request: {
          query:
            'mutation { createJournal(input: {journalId: "00000000-0000-4000-8000-00000000d003", name: "Late"}) { name } }',
        },
      },
    ]);
    expect(late[0]!.errors![0]!.extensions!.code).toBe('BUSY');
    expect(errors).toEqual([]);
  }, 30_000);

  it("the write queue keeps two groups in flight to the thread, and each client's requests still run in the order they came", async () => {
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
          answers.push(
            queue.submit(
              {
                request: {
                  query: `mutation { createAccount(input: {accountId: "${accountId}", code: "${code}", name: "${code}"}) { code } }`,
                },
              },
              client,
            ),
          );
        }
      }
      await new Promise((r) => setImmediate(r));
    }
    const results = (await Promise.all(answers)) as Array<{ data?: unknown; errors?: unknown }>;
    for (const result of results) expect(result.errors, JSON.stringify(result.errors)).toBeUndefined();
    // Every client's accounts were created in the order it sent them.
    const codes = engine.db
      .prepare("SELECT code FROM accounts WHERE code GLOB '*-[0-9][0-9][0-9]' ORDER BY rowid")
      .pluck()
      .all() as string[];
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

  it("the write queue is the one way to the writer: a client's queries there take turns with another's mutations, one unit of a client at a time, bounded by writeQueuePerClientMax", async () => {
    const thread = await WriterThread.start({ path, log: null, worker: null, logError: () => {} });
    const queue = new WriteQueue({ ...engine, limits: { ...engine.limits, writeQueuePerClientMax: 3 } }, () => thread);
    const created = engine.graphql(
      'mutation { auth { createClient(input: {principal: "mallory", name: "mallory", policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { apiKey } } }',
    );
    const mallory = { apiKey: (created.data as any).auth.createClient.apiKey as string };
    const read = { request: { query: '{ journals(first: 5) { nodes { name } } }' }, options: mallory };
    const q1 = queue.query(read, 'mallory');
    const q2 = queue.query(read, 'mallory');
    const waits = queue.executionWaits({ request: { query: WAIT_D009 }, options: mallory }, 'mallory');
    // Past writeQueuePerClientMax (every kind counted together): that client is told BUSY at once.
    const refused = await queue.query(read, 'mallory');
    expect(refused.errors![0]!.extensions!.code).toBe('BUSY');
    expect(refused.errors![0]!.message).toContain('writeQueuePerClientMax 3');
    const honest = queue.submit(
      {
        request: {
          query:
            'mutation { createJournal(input: {journalId: "00000000-0000-4000-8000-00000000d004", name: "Honest"}) { name } }',
        },
      },
      'honest',
    );
    const order = await settleOrder({ q1, q2, waits, honest });
    // Mallory's first query was at the writer; the honest mutation came next, before mallory's second.
    expect(order).toEqual(['q1', 'honest', 'q2', 'waits']);
    expect((await honest).data).toEqual({ createJournal: { name: 'Honest' } });
    expect((await q1).errors).toBeUndefined();
    // Mallory may read the execution: the wait is hers to wait for.
    expect(await waits).toEqual([
      { executionId: '00000000-0000-4000-8000-00000000d009', waitMs: 20000, principal: 'mallory', progressAfter: 0 },
    ]);
    // A query whose caller went away before its turn is dropped: answered BUSY, never run.
    const blocker = queue.query(read, 'mallory');
    const gone = new AbortController();
    const dropped = queue.query(read, 'mallory', 0, gone.signal);
    gone.abort();
    expect((await dropped).errors![0]!.message).toContain('cancelled');
    expect((await blocker).errors).toBeUndefined();
    expect(queue.size).toBe(0);
    await thread.close();
  }, 30_000);

  it('a thread that dies answers what it held INTERNAL (outcome unknown) and what comes later too', async () => {
    const errors: unknown[] = [];
    const thread = await WriterThread.start({
      path,
      log: null,
      worker: null,
      limits: { writeBatchWaitMs: 60_000 },
      logError: (e) => errors.push(e),
    });
    // Kill it from outside while a tool spins there.
    const spin = await thread.execute({
      query: `mutation { actions { createAction(id: "00000000-0000-4000-8000-00000000d005", input: {name: "spin", kind: "tool",
      config: {runtime: "javascript", src: "function run() { for (;;) {} }"}, execution: {timeoutMs: 700}, policies: []}) { version } } }`,
    });
    expect(spin.errors).toBeUndefined();
    const waiting = thread.execute({
      query:
        'mutation { actions { invokeAction(name: "spin", input: {executionId: "00000000-0000-4000-8000-00000000d006", actionVersion: 1}) { status } } }',
    });
    await new Promise((r) => setTimeout(r, 200));
    await (thread as unknown as { worker: { terminate(): Promise<number> } }).worker.terminate();
    const answer = await waiting;
    expect(answer.errors![0]!.extensions!.code).toBe('INTERNAL');
    expect(answer.errors![0]!.message).toContain('whether the request was committed is unknown');
    expect(thread.failed).toMatch(/writer thread ended/);
    const later = await thread.execute({ query: '{ journal { name } }' });
    expect(later.errors![0]!.extensions!.code).toBe('INTERNAL');
    expect(errors.length).toBe(1);
  }, 30_000);
});
