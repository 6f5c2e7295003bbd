import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import type { Engine } from '../../src/engine.js';
import type { FormattedResult, GraphqlRequest } from '../../src/graphql/executor.js';
import { DEFAULT_LIMITS, type Limits } from '../../src/limits.js';
import { type ReadOptions, ReadPool } from '../../src/runtime/read-pool.js';
import { EngineError } from '../../src/errors.js';
import { openDatabase, ReadOnlyTransactions } from '../../src/storage/database.js';
import { MIGRATIONS } from '../../src/storage/migrations.js';
import { CacheEpoch } from '../../src/storage/record-cache.js';
import { BALANCE, CREATE_ACCOUNT, createAccount, createTransferCode, POST, postTransfers } from '../helpers/ledger.js';
import { id, newEngine, ok } from '../helpers/engine.js';

/**
 * Reads beside writes: queries answered by read-only engines on worker threads, on the writer's
 * own file (a real SQLite file, real threads). What a read sees is the writer's last commit; what
 * it may see is what the writer would let it; a mutation is refused; one client's flood, a heavy
 * query or a thread that dies does not stop the others' reads.
 */

const dir = mkdtempSync(join(tmpdir(), 'tally-read-pool-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string) => join(dir, name);

const CREATE_ACTION =
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }';
const UPDATE_ACTION =
  'mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) { version } } }';
const START =
  'mutation($n: String!, $e: UUID!) { actions { startAction(name: $n, input: {executionId: $e, input: {}}) { status } } }';
const WAIT = 'query($e: UUID!, $w: Int) { actions { execution(executionId: $e, waitMs: $w) { status output } } }';
const PING = {
  name: 'ping',
  kind: 'tool',
  config: { runtime: 'javascript', src: 'function run(event) { return { ok: true }; }' },
  tool: { description: 'Answers ok', inputSchema: { type: 'object' } },
  policies: [],
};
/** Under the cost limit, yet a row lookup per entry: on a ledger of 1,500 postings it takes longer than a tight deadline. */
const HEAVY_READ =
  '{ accounts(first: 3) { nodes { entries(first: 1000) { nodes { transaction { description entries(first: 5) { nodes { units account { code } } } } } } } } }';
const ACCOUNTS = '{ accounts(first: 10) { nodes { code name } } }';

/** Plain JSON: the engine's answers carry null-prototype objects. */
const json = (value: unknown) => JSON.parse(JSON.stringify(value));
const code = (result: FormattedResult) => result.errors?.[0]?.extensions?.code;

function createClient(engine: Engine, principal: string, policies: string): string {
  return ok(
    engine,
    `mutation { auth { createClient(input: {principal: "${principal}", name: "${principal}", policies: [${policies}]}) { apiKey } } }`,
  ).auth.createClient.apiKey;
}

/** Accounts 1-3, TRANSFER, and `postings` transfers between them, 100 per request. */
function ledger(engine: Engine, postings: number): void {
  for (let a = 1; a <= 3; a++) createAccount(engine, a);
  createTransferCode(engine);
  postTransfers(engine, postings);
}

describe('a read-only engine (createEngine({ readOnly: true }))', () => {
  it("answers queries from the writer's file and refuses every write with BAD_REQUEST, writing nothing", async () => {
    const path = file('read-only.db');
    const writer = await newEngine({ path });
    createAccount(writer, 1);
    const reader = await newEngine({ path, readOnly: true });
    expect(ok(reader, ACCOUNTS).accounts.nodes).toEqual([{ code: 'ACC-1', name: 'Account 1' }]);

    const refused = reader.graphql(CREATE_ACCOUNT, { input: { accountId: id(2), code: 'ACC-2', name: 'Two' } });
    expect(refused.data).toBeNull();
    expect(refused.errors).toHaveLength(1);
    expect(refused.errors![0]!.extensions).toMatchObject({ code: 'BAD_REQUEST', retryable: false });
    expect(refused.errors![0]!.message).toMatch(/^this connection only reads/);
    const dryRun = reader.graphql(
      `mutation @dryRun { createAccount(input: {accountId: "${id(3)}", code: "ACC-3", name: "Three"}) { code } }`,
    );
    expect(code(dryRun)).toBe('BAD_REQUEST');
    expect(() => reader.ensureAdmin('tly_read-only-admin')).toThrow(/only reads/);
    // The connection itself is read-only too, below the engine; its cache watchers (TEMP triggers,
    // in the connection's own temp schema) were created all the same.
    expect(() => reader.db.prepare("UPDATE accounts SET name = 'x'").run()).toThrow(/readonly/);
    expect(
      reader.db.prepare<[], number>("SELECT count(*) FROM sqlite_temp_master WHERE type = 'trigger'").pluck().get(),
    ).toBeGreaterThan(0);

    // Nothing was written; and the reader follows the writer's next commit.
    expect(ok(writer, ACCOUNTS).accounts.nodes).toHaveLength(1);
    expect(ok(writer, 'query { auth { clients(first: 10) { nodes { principal } } } }').auth.clients.nodes).toEqual([]);
    createAccount(writer, 4);
    expect(ok(reader, ACCOUNTS).accounts.nodes.map((a: { code: string }) => a.code)).toEqual(['ACC-1', 'ACC-4']);
    reader.close();
    writer.close();
  });

  it('its transactions: a write one never begins; a read that tries to write ends with the same BAD_REQUEST', async () => {
    const path = file('transactions.db');
    const writer = await newEngine({ path });
    createAccount(writer, 1);
    const db = openDatabase({ path, busyTimeoutMs: 1000, readOnly: true });
    const transactions = new ReadOnlyTransactions(db, new CacheEpoch());
    let ran = false;
    expect(() => transactions.run('write', () => ((ran = true), { value: 1, commit: true }))).toThrow(
      /^this connection only reads/,
    );
    expect(ran).toBe(false);
    let error: unknown;
    try {
      transactions.run('read', () => {
        db.prepare("UPDATE accounts SET name = 'x'").run();
        return { value: 1, commit: true };
      });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(EngineError);
    expect(error).toMatchObject({ code: 'BAD_REQUEST', message: expect.stringMatching(/^this connection only reads/) });
    expect(db.inTransaction).toBe(false);
    expect(
      transactions.run('read', () => ({ value: db.prepare('SELECT name FROM accounts').pluck().get(), commit: true })),
    ).toBe('Account 1');
    db.close();
    writer.close();
  });

  it('refuses a file of another schema version, a missing file and :memory:, and changes none of them', async () => {
    const path = file('older.db');
    (await newEngine({ path })).close();
    const latest = MIGRATIONS.at(-1)!.version;
    const raw = new Database(path);
    raw.pragma(`user_version = ${latest - 1}`);
    raw.close();
    await expect(newEngine({ path, readOnly: true })).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringMatching(
        new RegExp(`schema version ${latest - 1}, this Tally's is ${latest}: it was written by another Tally version`),
      ),
    });
    const check = new Database(path, { readonly: true });
    expect(check.pragma('user_version', { simple: true })).toBe(latest - 1);
    check.close();

    const missing = file('missing.db');
    await expect(newEngine({ path: missing, readOnly: true })).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringMatching(/cannot open the database .* for reading/),
    });
    expect(existsSync(missing)).toBe(false);
    await expect(newEngine({ readOnly: true })).rejects.toMatchObject({ code: 'BAD_REQUEST' });

    // The pool says the same when it starts, and leaves no thread behind.
    await expect(ReadPool.start({ path, size: 1, logError: () => {} })).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringMatching(/another Tally version/),
    });
  });
});

describe('the read pool', () => {
  const path = file('pool.db');
  let writer: Engine;
  let pool: ReadPool;
  const logged: unknown[] = [];

  /** The same query sent four times at once: each of the two threads answers at least one. */
  const everywhere = (request: GraphqlRequest, options: ReadOptions = {}) =>
    Promise.all([1, 2, 3, 4].map(() => pool.execute(request, options)));

  beforeAll(async () => {
    writer = await newEngine({ path });
    createAccount(writer, 1);
    createAccount(writer, 2);
    createTransferCode(writer);
    pool = await ReadPool.start({ path, limits: { executionWaitPollMs: 50 }, logError: (error) => logged.push(error) });
  });
  afterAll(async () => {
    await pool.close();
    writer.close();
  });

  it('starts readPoolThreads threads (2 by default)', () => {
    expect(DEFAULT_LIMITS.readPoolThreads).toBe(2);
    expect(pool.stats()).toMatchObject({ threads: 2, ready: 2, queued: 0, running: 0 });
  });

  it('reads the balance the writer committed, right after each post', async () => {
    for (let i = 1; i <= 5; i++) {
      ok(writer, POST, {
        input: {
          transactionId: id(100 + i),
          tranCode: 'TRANSFER',
          params: { from: id(1), to: id(2), amount: '10.25' },
        },
      });
      for (const result of await everywhere({ query: BALANCE, variables: { a: id(2) } })) {
        expect(result.errors).toBeUndefined();
        expect(json(result.data)).toEqual(json(writer.graphql(BALANCE, { a: id(2) }).data));
      }
    }
    const last = await pool.execute({ query: BALANCE, variables: { a: id(2) } });
    expect((last.data as any).balance.settled.normalBalance.units).toBe('51.25');
  });

  it('refuses a mutation cleanly (BAD_REQUEST) and writes nothing', async () => {
    const result = await pool.execute({
      query: CREATE_ACCOUNT,
      variables: { input: { accountId: id(50), code: 'ACC-50', name: 'Fifty' } },
    });
    expect(result.data).toBeNull();
    expect(result.errors).toHaveLength(1);
    expect(result.errors![0]!.extensions).toMatchObject({ code: 'BAD_REQUEST', retryable: false });
    expect(result.errors![0]!.message).toMatch(/only reads/);
    const post = await pool.execute({
      query: POST,
      variables: {
        input: { transactionId: id(150), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount: '1' } },
      },
    });
    expect(code(post)).toBe('BAD_REQUEST');
    expect(code(writer.graphql(`{ account(id: "${id(50)}") { code } }`))).toBe('NOT_FOUND');
    expect(code(writer.graphql(`{ transaction(id: "${id(150)}") { transactionId } }`))).toBe('NOT_FOUND');
  });

  it("authorises a query with an API key exactly as the writer does, and follows the writer's changes to the client", async () => {
    const key = createClient(writer, 'viewer', '{effect: ALLOW, actions: [SELECT], resources: ["financial.Account"]}');
    const balance = { query: BALANCE, variables: { a: id(2) } };
    const onWriter = writer.execute(balance, { apiKey: key });
    expect(code(onWriter)).toBe('ACCESS_DENIED');
    for (const onPool of await everywhere(balance, { apiKey: key })) expect(json(onPool)).toEqual(json(onWriter));
    for (const onPool of await everywhere({ query: ACCOUNTS }, { apiKey: key })) expect(onPool.errors).toBeUndefined();
    expect(code(await pool.execute({ query: ACCOUNTS }, { apiKey: 'tly_no-such-key' }))).toBe('UNAUTHENTICATED');
    expect(code(await pool.execute({ query: ACCOUNTS }, { principal: 'nobody' }))).toBe('UNAUTHENTICATED');

    // The writer grants SELECT on balances: the next read on every thread may read them.
    ok(
      writer,
      'mutation { auth { updateClient(principal: "viewer", input: {policies: [{effect: ALLOW, actions: [SELECT], resources: ["financial.Account", "financial.Balance"]}]}) { client { principal } } } }',
    );
    for (const onPool of await everywhere(balance, { apiKey: key })) expect(onPool.errors).toBeUndefined();
    // The writer rotates the key: the old one is refused at the next read.
    const rotated = ok(
      writer,
      'mutation { auth { updateClient(principal: "viewer", input: {rotateKey: true}) { apiKey } } }',
    ).auth.updateClient.apiKey;
    for (const onPool of await everywhere(balance, { apiKey: key })) expect(code(onPool)).toBe('UNAUTHENTICATED');
    for (const onPool of await everywhere(balance, { apiKey: rotated })) expect(onPool.errors).toBeUndefined();
  });

  it("each read sees the writer's last commit through the threads' caches: a tran code changed, an action version deployed", async () => {
    const TRAN_CODE = '{ tranCode(code: "TRANSFER") { version description } }';
    for (const r of await everywhere({ query: TRAN_CODE }))
      expect(json(r.data)).toEqual({ tranCode: { version: 1, description: null } });
    ok(writer, `mutation { updateTranCode(id: "${id(9000)}", input: {description: "second"}) { version } }`);
    for (const r of await everywhere({ query: TRAN_CODE }))
      expect(json(r.data)).toEqual({ tranCode: { version: 2, description: 'second' } });

    ok(writer, CREATE_ACTION, { id: id(700), input: PING });
    const ACTION =
      '{ actions { action(name: "ping") { version tool { description } } tool(name: "ping") { version description } } }';
    for (const r of await everywhere({ query: ACTION })) {
      expect(json(r.data)).toEqual({
        actions: {
          action: { version: 1, tool: { description: 'Answers ok' } },
          tool: { version: 1, description: 'Answers ok' },
        },
      });
    }
    ok(writer, UPDATE_ACTION, {
      id: id(700),
      input: { ...PING, tool: { ...PING.tool, description: 'Answers ok, twice' } },
    });
    for (const r of await everywhere({ query: ACTION })) {
      expect(json(r.data)).toEqual({
        actions: {
          action: { version: 2, tool: { description: 'Answers ok, twice' } },
          tool: { version: 2, description: 'Answers ok, twice' },
        },
      });
    }
  });

  it('answers the committed state while the writer holds an open write transaction, without waiting for it', async () => {
    const before = json((await pool.execute({ query: ACCOUNTS })).data);
    writer.db.prepare('BEGIN IMMEDIATE').run();
    try {
      writer.db.prepare("UPDATE accounts SET name = 'not committed'").run();
      const t0 = performance.now();
      const results = await everywhere({ query: ACCOUNTS });
      // The pool's busy timeout is 5 s: an answer this quick did not wait for the lock.
      expect(performance.now() - t0).toBeLessThan(1000);
      for (const r of results) expect(json(r.data)).toEqual(before);
    } finally {
      writer.db.prepare('ROLLBACK').run();
    }
    for (const r of await everywhere({ query: ACCOUNTS })) expect(json(r.data)).toEqual(before);
  });

  it("answers a query that asks to wait at once (the wait is the server's, not the thread's), and tells which executions it waits on", async () => {
    ok(writer, START, { n: 'ping', e: id(801) });
    const t0 = performance.now();
    expect(json((await pool.execute({ query: WAIT, variables: { e: id(801), w: 10_000 } })).data)).toEqual({
      actions: { execution: { status: 'QUEUED', output: null } },
    });
    expect(performance.now() - t0).toBeLessThan(1000);
    // A query that reads more besides: its waits are its wait fields'.
    const both = `query($e: UUID!, $w: Int) { ${HEAVY_READ.slice(1, -1)} actions { execution(executionId: $e, waitMs: $w) { status } } }`;
    expect(await pool.executionWaits({ query: both, variables: { e: id(801), w: 10_000 } })).toEqual([
      { executionId: id(801), waitMs: 10_000, principal: 'system', progressAfter: 0 },
    ]);
    // Run by the writer's worker, it is terminal: no wait.
    writer.createWorker().drain();
    expect(await pool.executionWaits({ query: WAIT, variables: { e: id(801), w: 10_000 } })).toEqual([]);
    expect(pool.stats()).toMatchObject({ running: 0, queued: 0 });
    expect(logged).toEqual([]);
  });
});

describe('the read pool against a hostile client', () => {
  const path = file('hostile.db');
  const TIGHT: Partial<Limits> = { requestDeadlineMs: 30 };
  let writer: Engine;
  let alice: string;
  let mallory: string;

  beforeAll(async () => {
    writer = await newEngine({ path });
    ledger(writer, 1500);
    const reader = '{effect: ALLOW, actions: [SELECT], resources: ["financial.*"]}';
    alice = createClient(writer, 'alice', reader);
    mallory = createClient(writer, 'mallory', reader);
  });
  afterAll(() => writer.close());

  it('a read past requestDeadlineMs or queryCostMax fails on the pool exactly as on the writer', async () => {
    const pool = await ReadPool.start({ path, size: 1, limits: TIGHT, logError: () => {} });
    const tightWriter = await newEngine({ path, limits: TIGHT, checkpointIntervalMs: 0 });
    const onWriter = tightWriter.graphql(HEAVY_READ, null, { apiKey: mallory });
    const onPool = await pool.execute({ query: HEAVY_READ }, { apiKey: mallory });
    for (const result of [onWriter, onPool]) {
      expect(result.data ?? null).toBeNull();
      expect(result.errors).toHaveLength(1);
      expect(result.errors![0]!.extensions).toMatchObject({
        code: 'LIMIT_EXCEEDED',
        details: { requestDeadlineMs: 30 },
      });
      expect(result.errors![0]!.message).toMatch(/^the request ran past requestDeadlineMs \(30 ms\) at \w+\.\w+$/);
    }
    const costly = '{ accounts(first: 1000) { nodes { entries(first: 1000) { nodes { units } } } } }';
    const costOnPool = await pool.execute({ query: costly }, { apiKey: mallory });
    expect(code(costOnPool)).toBe('LIMIT_EXCEEDED');
    expect(json(costOnPool)).toEqual(json(tightWriter.graphql(costly, null, { apiKey: mallory })));
    tightWriter.close();
    await pool.close();
  });

  it("one client flooding the pool past readQueueMax gets BUSY; another client's read still completes, ahead of the flood", async () => {
    const pool = await ReadPool.start({ path, size: 2, limits: { readQueueMax: 8 }, logError: () => {} });
    onTestFinished(() => pool.close());
    const order: string[] = [];
    const flood = Array.from({ length: 40 }, (_, i) =>
      pool.execute({ query: HEAVY_READ }, { apiKey: mallory }).then((result) => {
        order.push(`mallory-${i}`);
        return result;
      }),
    );
    // 2 threads × 1 in flight, 8 queued: the rest is refused at once.
    expect(pool.stats()).toMatchObject({ running: 2, queued: 8 });
    const read = pool.execute({ query: BALANCE, variables: { a: id(1) } }, { apiKey: alice }).then((result) => {
      order.push('alice');
      return result;
    });
    const answer = await read;
    expect(answer.errors).toBeUndefined();
    expect(json(answer.data)).toEqual(json(writer.graphql(BALANCE, { a: id(1) }).data));

    const results = await Promise.all(flood);
    const busy = results.filter((r) => code(r) === 'BUSY');
    // 30 refused on arrival, one more shed for alice's read.
    expect(busy).toHaveLength(31);
    for (const r of busy) {
      expect(r.data).toBeNull();
      expect(r.errors![0]!.extensions).toMatchObject({ code: 'BUSY', retryable: true, details: { readQueueMax: 8 } });
      expect(r.errors![0]!.message).toContain('readQueueMax 8');
    }
    // What ran answered, or ran past requestDeadlineMs as it would on the writer (a loaded machine);
    // alice was served before most of it.
    for (const r of results.filter((r) => code(r) !== 'BUSY')) expect([undefined, 'LIMIT_EXCEEDED']).toContain(code(r));
    const ran = order.filter((name) => name === 'alice' || !busy.includes(results[Number(name.split('-')[1])]!));
    expect(ran.indexOf('alice')).toBeLessThanOrEqual(3);
    expect(pool.stats()).toMatchObject({ running: 0, queued: 0 });
  });
});

describe('the read pool when a thread dies, and its limits', () => {
  const path = file('crash.db');
  let writer: Engine;

  beforeAll(async () => {
    writer = await newEngine({ path });
    createAccount(writer, 1);
    ok(writer, CREATE_ACTION, { id: id(700), input: PING });
  });
  afterAll(() => writer.close());
  const LONG_READ =
    '{ a: accounts(first: 1) { nodes { code } } b: __schema { types { name fields { name args { name } } } } c: __schema { types { name fields { name args { name } } } } }';

  it('a thread killed mid-request: that request answers INTERNAL, a new thread replaces it and serves the next read; a cancelled query is dropped; a closed pool answers BUSY', async () => {
    const logged: unknown[] = [];
    const pool = await ReadPool.start({ path, size: 1, logError: (error) => logged.push(error) });
    try {
      const running = pool.execute({ query: LONG_READ });
      expect(pool.stats().running).toBe(1);
      const t0 = performance.now();
      await pool.terminateThread(0);
      const result = await running;
      expect(performance.now() - t0).toBeLessThan(1000);
      expect(result.data).toBeNull();
      expect(result.errors![0]!.extensions).toMatchObject({ code: 'INTERNAL', retryable: true });
      expect(result.errors![0]!.message).toMatch(/read thread answering this query stopped/);
      expect(logged.map(String).join('\n')).toMatch(/read thread 0 stopped/);

      // A read sent while the new thread starts waits for it, and is answered.
      const next = pool.execute({ query: ACCOUNTS });
      expect(pool.stats()).toMatchObject({ queued: 1, ready: 0 });
      expect(json((await next).data)).toEqual({ accounts: { nodes: [{ code: 'ACC-1', name: 'Account 1' }] } });
      expect(pool.stats()).toMatchObject({ ready: 1, restarts: 1, running: 0, queued: 0 });

      // A query cancelled while queued is dropped (the thread takes one at a time).
      const first = pool.execute({ query: ACCOUNTS });
      const second = pool.execute({ query: ACCOUNTS });
      const gone = new AbortController();
      const third = pool.execute({ query: ACCOUNTS }, {}, gone.signal);
      expect(pool.stats()).toMatchObject({ running: 1, queued: 2 });
      gone.abort();
      expect(pool.stats().queued).toBe(1);
      expect(code(await third)).toBe('BUSY');
      expect((await third).errors![0]!.message).toMatch(/cancelled/);
      for (const r of await Promise.all([first, second])) expect(r.errors).toBeUndefined();
    } finally {
      await pool.close();
    }
    // Closed, it answers BUSY.
    expect(code(await pool.execute({ query: ACCOUNTS }))).toBe('BUSY');
  });

  it('readPoolThreads and readQueueMax: one query in flight per thread, readQueueMax queued, the next one BUSY', async () => {
    await expect(ReadPool.start({ path, limits: { readPoolThreads: 0 }, logError: () => {} })).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining('readPoolThreads'),
    });
    const pool = await ReadPool.start({ path, limits: { readPoolThreads: 3, readQueueMax: 1 }, logError: () => {} });
    try {
      expect(pool.stats()).toMatchObject({ threads: 3, ready: 3 });
      const results = Array.from({ length: 5 }, () => pool.execute({ query: ACCOUNTS }));
      expect(pool.stats()).toMatchObject({ running: 3, queued: 1, refused: 1 });
      const answers = await Promise.all(results);
      expect(answers.slice(0, 4).every((r) => r.errors === undefined)).toBe(true);
      expect(answers[4]!.errors![0]!.extensions).toMatchObject({ code: 'BUSY', details: { readQueueMax: 1 } });
    } finally {
      await pool.close();
    }
    const none = await ReadPool.start({ path, limits: { readPoolThreads: 1, readQueueMax: 0 }, logError: () => {} });
    try {
      const results = await Promise.all([1, 2].map(() => none.execute({ query: ACCOUNTS })));
      expect(results.map(code)).toEqual([undefined, 'BUSY']);
      expect(results[1]!.errors![0]!.message).toContain('readQueueMax 0');
    } finally {
      await none.close();
    }
  });
});
