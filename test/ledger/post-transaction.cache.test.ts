import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { ENTRY_SEQ_BLOCK, isPostgres } from '../../src/storage/backend.js';
import { fails, id, newEngine, ok } from '../helpers/engine.js';
import { POST, twoAccountsAndTransfer } from '../helpers/ledger.js';

/**
 * Postings keep each account's status and the last entry seq for the cache epoch instead of reading
 * them every time. Neither may outlive the rows: a lock made here, a lock rolled back, a lock or a
 * posting committed by another connection, a posting rolled back, and a posting made outside the
 * engine's transactions are all seen by the next posting.
 */
const dir = mkdtempSync(join(tmpdir(), 'tally-post-caches-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let next = 1000;
const post = (from = id(1), to = id(2)) => ({
  input: { transactionId: id(next++), tranCode: 'TRANSFER', params: { from, to, amount: '1.00' } },
});
const LOCK = (n: number) => `mutation { updateAccount(id: "${id(n)}", input: {status: LOCKED}) { status } }`;
const UNLOCK = (n: number) => `mutation { updateAccount(id: "${id(n)}", input: {status: ACTIVE}) { status } }`;

/**
 * Every transaction's entries sit at first_entry_seq … + entry_count − 1, and seqs have no gaps
 * (SQLite); on PostgreSQL each posting's entries start a block of ENTRY_SEQ_BLOCK of their own (a
 * sequence: a rolled-back posting's block is not reused), the blocks in posting order.
 */
function expectConsecutiveSeqs(engine: Engine): void {
  if (isPostgres(engine.db)) return expectSeqBlocks(engine);
  const rows = engine.db
    .prepare('SELECT transaction_id, first_entry_seq, entry_count FROM transactions ORDER BY first_entry_seq')
    .all() as Array<{
    transaction_id: string;
    first_entry_seq: number;
    entry_count: number;
  }>;
  let expected = 1;
  for (const row of rows) {
    expect(row.first_entry_seq, row.transaction_id).toBe(expected);
    const seqs = (
      engine.db
        .prepare('SELECT seq FROM entries WHERE transaction_id = ? ORDER BY seq')
        .all(row.transaction_id) as Array<{ seq: number }>
    ).map((r) => r.seq);
    expect(seqs).toEqual(Array.from({ length: row.entry_count }, (_, i) => expected + i));
    expected += row.entry_count;
  }
}

function expectSeqBlocks(engine: Engine): void {
  const rows = engine.db
    .prepare('SELECT transaction_id, first_entry_seq, entry_count FROM transactions ORDER BY seq')
    .all() as Array<{
    transaction_id: string;
    first_entry_seq: number;
    entry_count: number;
  }>;
  let previous = 0;
  for (const row of rows) {
    expect((row.first_entry_seq - 1) % ENTRY_SEQ_BLOCK, row.transaction_id).toBe(0);
    expect(row.first_entry_seq, row.transaction_id).toBeGreaterThan(previous);
    const seqs = (
      engine.db
        .prepare('SELECT seq FROM entries WHERE transaction_id = ? ORDER BY seq')
        .all(row.transaction_id) as Array<{ seq: number }>
    ).map((r) => r.seq);
    expect(seqs).toEqual(Array.from({ length: row.entry_count }, (_, i) => row.first_entry_seq + i));
    previous = row.first_entry_seq;
  }
}

describe('account status and the last entry seq, cached for postings', () => {
  it('a lock is seen at once; a lock rolled back is forgotten', async () => {
    const engine = await newEngine();
    twoAccountsAndTransfer(engine);
    ok(engine, POST, post()); // both accounts' status is now cached
    ok(engine, LOCK(2));
    expect(fails(engine, POST, post()).code).toBe('ACCOUNT_LOCKED');
    ok(engine, UNLOCK(2));
    ok(engine, POST, post());
    // Locked and posted to in one @dryRun request: refused there, and nothing is left of the lock.
    const both = engine.graphql(
      `mutation($input: TransactionInput!) @dryRun { updateAccount(id: "${id(1)}", input: {status: LOCKED}) { status }
      postTransaction(input: $input) { transactionId } }`,
      post(),
    );
    expect(both.errors?.[0]?.extensions?.code).toBe('ACCOUNT_LOCKED');
    ok(engine, POST, post());
    expectConsecutiveSeqs(engine);
    engine.close();
  });

  it('a lock and postings committed by another connection are seen by the next posting', async () => {
    const path = join(dir, 'other.db');
    const engine = await newEngine({ path });
    twoAccountsAndTransfer(engine);
    ok(engine, POST, post());
    const other = new Database(path);
    other.prepare(`UPDATE accounts SET status = 'LOCKED' WHERE account_id = ?`).run(id(1));
    expect(fails(engine, POST, post()).code).toBe('ACCOUNT_LOCKED');
    other.prepare(`UPDATE accounts SET status = 'ACTIVE' WHERE account_id = ?`).run(id(1));
    ok(engine, POST, post());
    other.close();
    // Another engine on the file posts: this one's next entries follow its entries.
    const second = await newEngine({ path, checkpointIntervalMs: 0 });
    ok(second, POST, post());
    ok(second, POST, post());
    second.close();
    ok(engine, POST, post());
    expectConsecutiveSeqs(engine);
    engine.close();
  });

  it('a posting rolled back (its request failed, or its tool call) leaves the next posting at the next seq', async () => {
    const engine = await newEngine();
    twoAccountsAndTransfer(engine);
    ok(engine, POST, post());
    // The posting is written, then the request fails after it: everything rolls back.
    const failed = engine.graphql(
      `mutation($input: TransactionInput!) { postTransaction(input: $input) { transactionId }
      updateAccount(id: "${id(99)}", input: {status: LOCKED}) { status } }`,
      post(),
    );
    expect(failed.errors).toBeDefined();
    ok(engine, POST, post());
    // A tool that posts and then fails: its savepoint rolls back, the request goes on and posts.
    ok(
      engine,
      'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
      {
        id: id(7000),
        input: {
          name: 'post_then_fail',
          kind: 'tool',
          config: {
            runtime: 'javascript',
            src: `function run() {
            graphql('mutation($input: TransactionInput!) { postTransaction(input: $input) { transactionId } }', ${JSON.stringify(post())});
            fail('after posting');
          }`,
          },
          policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }],
        },
      },
    );
    const r = ok(
      engine,
      `mutation($input: TransactionInput!) {
      actions { invokeAction(id: "${id(7000)}", input: {executionId: "${id(7001)}", actionVersion: 1, input: {}}) { status } }
      postTransaction(input: $input) { transactionId } }`,
      post(),
    );
    expect(r.actions.invokeAction.status).toBe('FAILED');
    ok(engine, POST, post());
    expectConsecutiveSeqs(engine);
    engine.close();
  });

  it("postings made outside the engine's transactions, committed or rolled back, are seen", async () => {
    const engine = await newEngine();
    twoAccountsAndTransfer(engine);
    ok(engine, POST, post()); // the last seq is now kept
    engine.db.transaction(() => {
      engine.ledger.postTransaction(post().input);
    })();
    ok(engine, POST, post());
    expect(() =>
      engine.db.transaction(() => {
        engine.ledger.postTransaction(post().input);
        throw new Error('roll back');
      })(),
    ).toThrow('roll back');
    ok(engine, POST, post());
    // A lock written straight on the connection, outside any transaction of the engine.
    engine.db.prepare(`UPDATE accounts SET status = 'LOCKED' WHERE account_id = ?`).run(id(2));
    expect(fails(engine, POST, post()).code).toBe('ACCOUNT_LOCKED');
    expectConsecutiveSeqs(engine);
    engine.close();
  });
});
