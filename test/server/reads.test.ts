/**
 * The server's reads beside its writes: with a read pool attached, queries run on read-only
 * connections in worker threads (the committed state), mutations on the writer; a query that
 * waits on an execution runs there too; a read queue with no room answers 503.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { attachReadPool, createServer } from '../../src/server/http.js';
import { ReadPool } from '../../src/runtime/read-pool.js';
import { createAccount } from '../helpers/ledger.js';
import { id, newEngine } from '../helpers/engine.js';

const dir = mkdtempSync(join(tmpdir(), 'tally-server-reads-'));
let engine: Engine;
let pool: ReadPool;
let port: number;
let key: string;
let server: ReturnType<typeof createServer>;

beforeAll(async () => {
  engine = await newEngine({ path: join(dir, 'tally.db'), limits: { readQueueMax: 0 } });
  createAccount(engine, 1);
  key = engine.ensureAdmin()!;
  server = createServer(engine);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as { port: number }).port;
}, 60_000);

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await pool?.close();
  engine.close();
  rmSync(dir, { recursive: true, force: true });
});

const send = async (query: string, variables?: Record<string, unknown>) => {
  const res = await fetch(`http://127.0.0.1:${port}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ query, variables }),
  });
  return { status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json()) as any };
};
const ACCOUNTS = '{ accounts(first: 10) { nodes { accountId } } }';

describe('a server with a read pool', () => {
  it('answers queries from the read threads: the committed state, even while the writer holds a transaction open', async () => {
    // Before the pool: a query runs on the writer, which sees its own open transaction's rows.
    engine.db.exec('BEGIN IMMEDIATE');
    engine.db
      .prepare(
        `INSERT INTO journals (journal_id, name, status, version, created, modified) VALUES (?, 'uncommitted', 'ACTIVE', 1, 'x', 'x')`,
      )
      .run(id(77));
    const onWriter = await send(ACCOUNTS);
    // The writer refuses to run a request inside a transaction someone else opened on it.
    expect(onWriter.body.errors?.[0]?.extensions?.code).toBe('INTERNAL');

    pool = await ReadPool.start({ path: engine.db.name, size: 1, limits: { readQueueMax: 4 }, logError: () => {} });
    attachReadPool(server, pool);
    const onPool = await send('{ accounts(first: 10) { nodes { accountId } } journals(first: 10) { nodes { name } } }');
    expect(onPool.status).toBe(200);
    expect(onPool.body.data.accounts.nodes).toEqual([{ accountId: id(1) }]);
    // The uncommitted journal is not there: the read thread reads the last commit.
    expect(onPool.body.data.journals.nodes.map((j: { name: string }) => j.name)).not.toContain('uncommitted');
    engine.db.exec('ROLLBACK');
  }, 60_000);

  it('runs mutations on the writer, and the next query on the pool sees them', async () => {
    const created = await send('mutation($i: AccountInput!) { createAccount(input: $i) { accountId } }', {
      i: { accountId: id(2), code: 'A2', name: 'two' },
    });
    expect(created.body.errors).toBeUndefined();
    const read = await send(ACCOUNTS);
    expect(read.body.data.accounts.nodes).toEqual([{ accountId: id(1) }, { accountId: id(2) }]);
  });

  it("runs a query that waits on an execution on the pool too: the writer never sees it (only the wait is this thread's)", async () => {
    engine.db.exec('BEGIN IMMEDIATE');
    try {
      // On the writer, inside a transaction someone else opened, it would be INTERNAL: the pool answers.
      const waited = await send('query($e: UUID!) { actions { execution(executionId: $e, waitMs: 10) { status } } }', {
        e: id(999),
      });
      expect(waited.body.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    } finally {
      engine.db.exec('ROLLBACK');
    }
  });
});
