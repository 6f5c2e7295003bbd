/**
 * Group commit (engine.executeBatch / executeGroup, and the server's write queue): many requests
 * in one SQLite transaction, a savepoint each, one COMMIT. The promise is that nobody can tell:
 * every answer and the final state are exactly those of running the requests one by one.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import type { BatchRequest, Engine } from '../../src/engine.js';
import type { FormattedResult } from '../../src/graphql/executor.js';
import { createServer } from '../../src/server/http.js';
import { WriteQueue } from '../../src/runtime/write-queue.js';
import { BALANCE, createAccount, createTransferCode } from '../helpers/ledger.js';
import { id, newEngine, ok } from '../helpers/engine.js';

const engines: Engine[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const e of engines.splice(0)) e.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** An engine with accounts 1–4 and the TRANSFER tran code, on a file (group commit is about COMMITs). */
async function ledger(limits: Record<string, number> = {}): Promise<Engine> {
  const dir = mkdtempSync(join(tmpdir(), 'tally-group-'));
  dirs.push(dir);
  // A group's time bound far away unless a test is about it: a cold first request takes long here.
  const engine = await newEngine({
    path: join(dir, 'tally.db'),
    clock: new ManualClock('2026-03-01T10:00:00.000Z'),
    limits: { writeBatchWaitMs: 60_000, ...limits },
  });
  engines.push(engine);
  for (const n of [1, 2, 3, 4]) createAccount(engine, n);
  createTransferCode(engine);
  return engine;
}

const POST = 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId effective } }';
const transfer = (tx: number, from: number, to: number, amount: string) => ({
  i: { transactionId: id(tx), tranCode: 'TRANSFER', params: { from: id(from), to: id(to), amount } },
});
const post = (tx: number, from: number, to: number, amount: string): BatchRequest => ({
  request: { query: POST, variables: transfer(tx, from, to, amount), operationName: null },
});
const settled = (engine: Engine, n: number) =>
  ok(engine, BALANCE, { a: id(n), c: 'USD' }).balance?.settled.normalBalance.units ?? null;
/** The transaction id an answer of POST carries. */
const txOf = (answer: FormattedResult | undefined): unknown =>
  (answer?.data as { postTransaction?: { transactionId: string } } | null | undefined)?.postTransaction?.transactionId;
const count = (engine: Engine, table: string) =>
  engine.db.prepare(`SELECT count(*) FROM ${table}`).pluck().get() as number;

describe('engine.executeBatch', () => {
  it('runs the requests in one COMMIT; a failing request rolls back only its own writes', async () => {
    const engine = await ledger();
    const sizes: number[] = [];
    engine.onBatch((size) => sizes.push(size));
    const answers = engine.executeBatch([
      post(100, 1, 2, '10.00'),
      post(101, 1, 99, '5.00'),
      post(102, 2, 3, '2.50'),
      post(103, 1, 2, 'not a number'),
    ]);
    expect(sizes).toEqual([4]);
    expect(txOf(answers[0]!)).toBe(id(100));
    expect(answers[1]!.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    expect(txOf(answers[2]!)).toBe(id(102));
    expect(answers[3]!.errors?.[0]?.extensions?.code).toBeDefined();
    expect(count(engine, 'transactions')).toBe(2);
    expect([settled(engine, 1), settled(engine, 2), settled(engine, 3)]).toEqual(['-10.00', '7.50', '2.50']);
  });

  it('splits at writeBatchMax: more groups, the same answers', async () => {
    const engine = await ledger({ writeBatchMax: 3 });
    const sizes: number[] = [];
    engine.onBatch((size) => sizes.push(size));
    const answers = engine.executeBatch(Array.from({ length: 8 }, (_, i) => post(200 + i, 1, 2, '1')));
    expect(sizes).toEqual([3, 3, 2]);
    expect(answers.map((a) => txOf(a))).toEqual(Array.from({ length: 8 }, (_, i) => id(200 + i)));
    expect(settled(engine, 2)).toBe('8');
  });

  it('splits at writeBatchWaitMs: a group that ran that long commits what it has', async () => {
    const engine = await ledger({ writeBatchWaitMs: 0 });
    const sizes: number[] = [];
    engine.onBatch((size) => sizes.push(size));
    const group = engine.executeGroup([post(300, 1, 2, '1'), post(301, 1, 2, '1')]);
    // The first request always runs; the wait bound (0 ms) is past before the second.
    expect(txOf(group[0]!)).toBe(id(300));
    expect(group[1]).toBeUndefined();
    expect(count(engine, 'transactions')).toBe(1);
    expect(sizes).toEqual([1]);
  });

  it("a request that may run long (invokeAction) shares a group only with its own client's requests, before it and after it", async () => {
    const engine = await ledger();
    ok(engine, 'mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { version } } }', {
      id: id(60),
      i: {
        name: 'noop',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() { return 1; }' },
        policies: [],
      },
    });
    const other = ok(
      engine,
      'mutation { auth { createClient(input: {principal: "other", name: "Other", policies: [{effect: ALLOW, actions: [SELECT, INSERT], resources: ["*"]}]}) { apiKey } } }',
    ).auth.createClient.apiKey as string;
    const invoke = (e: number, apiKey?: string): BatchRequest => ({
      request: {
        query:
          'mutation($e: UUID!) { actions { invokeAction(name: "noop", input: {executionId: $e, actionVersion: 1, input: {}}) { status } } }',
        variables: { e: id(e) },
        operationName: null,
      },
      ...(apiKey ? { options: { apiKey } } : {}),
    });
    const sizes: number[] = [];
    engine.onBatch((size) => sizes.push(size));
    const answers = engine.executeBatch([
      post(350, 1, 2, '1'),
      invoke(351),
      invoke(352),
      invoke(353, other),
      post(354, 1, 2, '1'),
    ]);
    expect(answers.map((a) => a.errors)).toEqual([undefined, undefined, undefined, undefined, undefined]);
    // The engine's own post and invokes share a group; the other client's invoke starts the next,
    // and the engine's post after it the one after (it does not share the invoke's COMMIT).
    expect(sizes).toEqual([3, 1, 1]);
  });

  it('answers exactly what running the requests one by one answers (idempotency, conflicts, @dryRun, Mutation.queries, reads)', async () => {
    const kinds = fc.oneof(
      // Transaction ids from a small pool, so ids repeat: a replay or a conflict.
      fc.record({
        kind: fc.constant('post' as const),
        tx: fc.integer({ min: 0, max: 5 }),
        from: fc.integer({ min: 1, max: 5 }),
        to: fc.integer({ min: 1, max: 4 }),
        amount: fc.constantFrom('1', '2.50', '10.00', '-3', 'x'),
      }),
      fc.record({ kind: fc.constant('dry' as const), tx: fc.integer({ min: 0, max: 5 }) }),
      fc.record({
        kind: fc.constant('postAndRead' as const),
        tx: fc.integer({ min: 6, max: 9 }),
        account: fc.integer({ min: 1, max: 4 }),
      }),
      fc.record({ kind: fc.constant('read' as const), account: fc.integer({ min: 1, max: 4 }) }),
      fc.record({ kind: fc.constant('account' as const), n: fc.integer({ min: 5, max: 6 }) }),
    );
    // Transaction ids of a run start at `base`: runs never share one.
    const toRequest = (k: typeof kinds extends fc.Arbitrary<infer T> ? T : never, base: number): BatchRequest => {
      switch (k.kind) {
        case 'post':
          return post(base + k.tx, k.from, k.to, k.amount);
        case 'dry':
          return {
            request: {
              query: 'mutation ($i: TransactionInput!) @dryRun { postTransaction(input: $i) { transactionId } }',
              variables: transfer(base + k.tx, 1, 2, '1'),
              operationName: null,
            },
          };
        case 'postAndRead':
          return {
            request: {
              query: `mutation($i: TransactionInput!, $a: UUID!) { postTransaction(input: $i) { transactionId } queries { balance(accountId: $a, currency: "USD") { settled { normalBalance { units } } version } } }`,
              variables: { ...transfer(base + k.tx, 2, k.account === 2 ? 1 : k.account, '4.00'), a: id(k.account) },
              operationName: null,
            },
          };
        case 'read':
          return { request: { query: BALANCE, variables: { a: id(k.account), c: 'USD' }, operationName: null } };
        case 'account':
          return {
            request: {
              query: 'mutation($i: AccountInput!) { createAccount(input: $i) { accountId code } }',
              variables: { i: { accountId: id(k.n), code: `ACC-${k.n}`, name: 'new' } },
              operationName: null,
            },
          };
      }
    };
    const one = await ledger();
    const many = await ledger({ writeBatchMax: 4 });
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(kinds, { minLength: 1, maxLength: 12 }), async (list) => {
        run++;
        const requests = list.map((k) => toRequest(k, 10_000 + run * 100));
        const sequential = requests.map((r) => one.execute(r.request, r.options));
        const batched = many.executeBatch(requests);
        expect(batched).toEqual(sequential);
        for (const n of [1, 2, 3, 4]) expect(settled(many, n)).toBe(settled(one, n));
      }),
      { numRuns: 40 },
    );
    expect(count(many, 'transactions')).toBe(count(one, 'transactions'));
    expect(count(many, 'transactions')).toBeGreaterThan(0);
  });

  it('starts the executions of triggers only for requests whose writes were kept, and wakes the worker after the COMMIT', async () => {
    const engine = await ledger();
    ok(engine, 'mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { version } } }', {
      id: id(50),
      i: {
        name: 'notify',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run(e) { return 1; }' },
        policies: [],
      },
    });
    ok(engine, 'mutation($i: TriggerInput!) { actions { createTrigger(input: $i) { triggerId } } }', {
      i: { triggerId: id(51), name: 'on_post', on: ['transaction.inserted'], action: { name: 'notify' } },
    });
    let wakes = 0;
    let committedAtWake = -1;
    engine.onStarted(() => {
      wakes++;
      committedAtWake = engine.db.inTransaction ? -1 : count(engine, 'transactions');
    });
    const answers = engine.executeBatch([post(400, 1, 2, '1'), post(401, 1, 99, '1'), post(402, 1, 2, '1')]);
    expect(answers[1]!.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    expect(wakes).toBe(1);
    expect(committedAtWake).toBe(2);
    const started = engine.db
      .prepare('SELECT count(*) FROM executions WHERE trigger_id = ? AND parent_id IS NULL')
      .pluck()
      .get(id(51));
    expect(started).toBe(2);

    // A group in which nothing was kept starts nothing and wakes nobody.
    engine.executeBatch([post(403, 1, 99, '1')]);
    expect(wakes).toBe(1);
  });

  it('a key rotated by an earlier request of the same group is refused for the later ones (the key check is cached, never stale)', async () => {
    const engine = await ledger();
    const created = ok(
      engine,
      'mutation { auth { createClient(input: {principal: "teller", name: "Teller", policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { apiKey } } }',
    );
    const oldKey = created.auth.createClient.apiKey as string;
    const whoami: BatchRequest = {
      request: { query: '{ auth { whoami { principal } } }', variables: null, operationName: null },
      options: { apiKey: oldKey },
    };
    const rotate: BatchRequest = {
      request: {
        query: 'mutation { auth { updateClient(principal: "teller", input: {rotateKey: true}) { apiKey } } }',
        variables: null,
        operationName: null,
      },
    };
    const answers = engine.executeBatch([whoami, rotate, whoami]);
    expect((answers[0]!.data as any).auth.whoami.principal).toBe('teller');
    expect(answers[1]!.errors).toBeUndefined();
    expect(answers[2]!.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED');
    // And in later groups too.
    expect(engine.executeBatch([whoami])[0]!.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED');
  });

  it('a COMMIT that fails fails every request of the group with a retryable error, and writes nothing', async () => {
    const engine = await ledger();
    // A deferred foreign key is checked at COMMIT: a posting of 13.13 breaks it there.
    engine.db.exec(`CREATE TABLE commit_guard (account_id TEXT REFERENCES accounts (account_id) DEFERRABLE INITIALLY DEFERRED);
      CREATE TRIGGER commit_guard_boom AFTER INSERT ON entries WHEN NEW.units = '13.13'
      BEGIN INSERT INTO commit_guard VALUES ('no such account'); END;`);
    const boom = post(502, 1, 2, '13.13');
    const answers = engine.executeBatch([post(500, 1, 2, '1'), post(501, 1, 2, '1'), boom]);
    for (const a of answers) {
      expect(a.data).toBeNull();
      expect(a.errors?.[0]?.extensions?.code).toBe('BUSY');
      expect(a.errors?.[0]?.extensions?.retryable).toBe(true);
      expect(a.errors?.[0]?.message).toMatch(/commit of this request's group failed/);
    }
    expect(count(engine, 'transactions')).toBe(0);
    // The retry of the innocent ones, without the one that breaks the COMMIT, goes through.
    const retried = engine.executeBatch([post(500, 1, 2, '1'), post(501, 1, 2, '1')]);
    expect(retried.map((a) => a.errors)).toEqual([undefined, undefined]);
    expect(settled(engine, 2)).toBe('2');
  });
});

describe('the server groups concurrent mutations', () => {
  async function serve(limits: Record<string, number> = {}) {
    const engine = await ledger(limits);
    const key = engine.ensureAdmin()!;
    const server = createServer(engine);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    const send = async (body: unknown, apiKey = key) => {
      const res = await fetch(`http://127.0.0.1:${port}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
        body: JSON.stringify(body),
      });
      return { status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json()) as any };
    };
    return { engine, server, send, key, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
  }

  it('answers each mutation only after the COMMIT that made it durable, in groups, and a failure stays its own', async () => {
    const { engine, key, server, close } = await serve();
    const sizes: number[] = [];
    engine.onBatch((size) => sizes.push(size));
    const { port } = server.address() as { port: number };
    // 40 mutations at once from another process (as clients are): when a reply arrives, the
    // client opens the database itself and looks for what the reply says was written.
    const client = `
      const http = require('node:http');
      const Database = require('better-sqlite3');
      const [port, key, path] = process.argv.slice(1);
      const agent = new http.Agent({ keepAlive: true, maxSockets: 40 });
      const id = (k) => '00000000-0000-4000-8000-' + String(k).padStart(12, '0');
      const replies = [];
      let left = 40;
      for (let i = 0; i < 40; i++) {
        const body = JSON.stringify({ query: ${JSON.stringify(POST)}, variables: { i: { transactionId: id(600 + i), tranCode: 'TRANSFER', params: { from: id(1), to: id(i % 10 === 9 ? 99 : 2), amount: '1' } } } });
        const req = http.request({ host: '127.0.0.1', port, path: '/graphql', method: 'POST', agent, headers: { 'content-type': 'application/json', authorization: 'Bearer ' + key } }, (res) => {
          let text = '';
          res.on('data', (c) => (text += c));
          res.on('end', () => {
            const db = new Database(path, { readonly: true });
            const seen = db.prepare('SELECT count(*) FROM transactions WHERE transaction_id = ?').pluck().get(id(600 + i)) === 1;
            db.close();
            replies[i] = { body: JSON.parse(text), seen };
            if (--left === 0) { process.stdout.write(JSON.stringify(replies)); agent.destroy(); }
          });
        });
        req.end(body);
      }`;
    const { execFile } = await import('node:child_process');
    const out = await new Promise<string>((resolve, reject) =>
      execFile(
        process.execPath,
        ['-e', client, String(port), key, engine.db.name],
        { cwd: process.cwd() },
        (error, stdout) => (error ? reject(error) : resolve(stdout)),
      ),
    );
    await close();
    const replies = JSON.parse(out) as Array<{ body: any; seen: boolean }>;
    const failed = replies.filter((r) => r.body.errors);
    expect(failed.length).toBe(4);
    expect(failed.every((r) => r.body.errors[0].extensions.code === 'NOT_FOUND')).toBe(true);
    for (const r of replies) expect(r.seen).toBe(!r.body.errors);
    expect(count(engine, 'transactions')).toBe(36);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(40);
    // 40 requests at once: some shared a COMMIT.
    expect(Math.max(...sizes)).toBeGreaterThan(1);
  });

  it('two clients, one flooding: the flood is told BUSY past writeQueuePerClientMax, the other client still gets in', async () => {
    const engine = await ledger({ writeQueuePerClientMax: 3, writeQueueMax: 5 });
    const queue = new WriteQueue(engine);
    // Submitted in one turn, before the queue's first group runs: they are all waiting at once.
    const flood = Array.from({ length: 6 }, (_, i) => queue.submit(post(700 + i, 1, 2, '1'), 'hostile'));
    const honest = queue.submit(post(800, 3, 4, '1'), 'honest');
    const past = Array.from({ length: 3 }, (_, i) => queue.submit(post(810 + i, 3, 4, '1'), 'third'));
    const answers = await Promise.all(flood);
    expect(answers.slice(0, 3).map((a) => txOf(a))).toEqual([id(700), id(701), id(702)]);
    for (const a of answers.slice(3)) {
      expect(a.errors?.[0]?.extensions?.code).toBe('BUSY');
      expect(a.errors?.[0]?.message).toContain('writeQueuePerClientMax 3');
    }
    expect(txOf(await honest)).toBe(id(800));
    // writeQueueMax 5: 3 + 1 waiting, so one more from a third client, then BUSY.
    const third = await Promise.all(past);
    expect(txOf(third[0]!)).toBe(id(810));
    expect(third.slice(1).map((a) => a.errors?.[0]?.message)).toEqual([
      expect.stringContaining('writeQueueMax 5'),
      expect.stringContaining('writeQueueMax 5'),
    ]);
    expect(count(engine, 'transactions')).toBe(5);
    // Once the queue drained, the flooding client is served again.
    expect(txOf(await queue.submit(post(706, 1, 2, '1'), 'hostile'))).toBe(id(706));
  });

  it('writeQueueBytesMax bounds the bodies waiting from all clients together; the per-client byte bound each one', async () => {
    const engine = await ledger({ writeQueueBytesMax: 3000, writeQueuePerClientBytesMax: 2000 });
    const queue = new WriteQueue(engine);
    // In one turn: a client's 1,000-byte bodies fill its share at 2, the queue at 3.
    const a = [
      queue.submit(post(1000, 1, 2, '1'), 'a', 1000),
      queue.submit(post(1001, 1, 2, '1'), 'a', 1000),
      queue.submit(post(1002, 1, 2, '1'), 'a', 1000),
    ];
    const b = [queue.submit(post(1010, 3, 4, '1'), 'b', 1000), queue.submit(post(1011, 3, 4, '1'), 'b', 1000)];
    const [a0, a1, a2] = await Promise.all(a);
    const [b0, b1] = await Promise.all(b);
    expect([txOf(a0), txOf(a1), txOf(b0)]).toEqual([id(1000), id(1001), id(1010)]);
    expect(a2!.errors?.[0]?.message).toContain('writeQueuePerClientBytesMax (2000)');
    expect(b1!.errors?.[0]?.message).toContain('writeQueueBytesMax (3000)');
    expect(count(engine, 'transactions')).toBe(3);
  });

  it('over HTTP a full write queue is a 503 with Retry-After', async () => {
    const { send, close } = await serve({ writeQueueMax: 0 });
    const reply = await send({ query: POST, variables: transfer(900, 1, 2, '1') });
    await close();
    expect(reply.status).toBe(503);
    expect(reply.retryAfter).toBe('1');
    expect(reply.body.errors[0].extensions.code).toBe('BUSY');
  });
});

describe('the queue worker', () => {
  it('runs at most workerBatchMax due attempts in one transaction, each recorded as alone', async () => {
    const engine = await ledger({ workerBatchMax: 2 });
    ok(engine, 'mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { version } } }', {
      id: id(70),
      i: {
        name: 'noop',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() { return 1; }' },
        policies: [],
      },
    });
    for (let e = 0; e < 5; e++)
      ok(
        engine,
        'mutation($e: UUID!) { actions { startAction(name: "noop", input: {executionId: $e, input: {}}) { status } } }',
        { e: id(1100 + e) },
      );
    const worker = engine.createWorker({ owner: 'test' });
    // Count the worker's write transactions (the attempts' group commits).
    const transactions = (worker as unknown as { transactions: { run: (...args: unknown[]) => unknown } }).transactions;
    const run = transactions.run.bind(transactions);
    let opened = 0;
    transactions.run = (...args: unknown[]) => {
      opened++;
      return run(...args);
    };
    expect(worker.drain()).toBe(5);
    expect(opened).toBe(3);
    expect(
      engine.db
        .prepare("SELECT count(*) FROM executions WHERE status = 'SUCCEEDED' AND parent_id IS NULL")
        .pluck()
        .get(),
    ).toBe(5);
  });
});

describe('durability', () => {
  it("'full' syncs every COMMIT (synchronous=FULL); the default is NORMAL", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tally-durability-'));
    dirs.push(dir);
    const normal = await newEngine({ path: join(dir, 'normal.db') });
    const full = await newEngine({ path: join(dir, 'full.db'), durability: 'full' });
    engines.push(normal, full);
    expect(normal.db.pragma('synchronous', { simple: true })).toBe(1);
    expect(full.db.pragma('synchronous', { simple: true })).toBe(2);
  });

  it('tally serve --durability: full serves, anything else is a usage error naming the value', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tally-durability-'));
    dirs.push(dir);
    const { spawn } = await import('node:child_process');
    const bin = join(process.cwd(), 'bin', 'tally.mjs');
    const run = (args: string[]) =>
      new Promise<{ status: number | null; out: string; err: string; child: ReturnType<typeof spawn> }>((resolve) => {
        const child = spawn(process.execPath, [bin, 'serve', '--db', join(dir, 'd.db'), '--port', '0', ...args], {
          env: { ...process.env, TALLY_ADMIN_KEY: 'tly_durability-test' },
        });
        let out = '';
        let err = '';
        child.stdout!.on('data', (c: Buffer) => {
          out += c.toString();
          if (out.includes('serving')) resolve({ status: null, out, err, child });
        });
        child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
        child.once('exit', (status) => resolve({ status, out, err, child }));
      });
    const bad = await run(['--durability', 'sometimes']);
    expect(bad.status).not.toBe(0);
    expect(bad.err).toContain('--durability "sometimes" is not a durability');
    const good = await run(['--durability', 'full']);
    expect(good.out).toContain('serving');
    const exited = new Promise((resolve) => good.child.once('exit', resolve));
    good.child.kill('SIGTERM');
    await exited;
  });
});
