import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { exited, running } from '../helpers/processes.js';
import { PgConnection } from '../../src/storage/pg/connection.js';
import { createAccount, createTransferCode } from '../helpers/ledger.js';
import { id, newEngine, ok, ON_POSTGRES, postgresTestDatabase } from '../helpers/engine.js';

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');

/** A database with a tool that posts a transaction under a fresh random id: running it twice would post twice. */
async function prepare(executions: number): Promise<string> {
  // npm run test:pg: the same workers on one PostgreSQL database (claims FOR UPDATE SKIP LOCKED).
  const path = ON_POSTGRES ? postgresTestDatabase() : join(mkdtempSync(join(tmpdir(), 'tally-queue-')), 'queue.db');
  const engine = await newEngine({ path });
  createAccount(engine, 1);
  createAccount(engine, 2);
  createTransferCode(engine);
  ok(engine, `mutation($input: ActionInput!) { actions { createAction(id: "${id(1)}", input: $input) { version } } }`, {
    input: {
      name: 'post_random',
      kind: 'tool',
      config: {
        runtime: 'javascript',
        src: `function run(event) {
  const tx = cel('uuid.New()');
  graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }',
    { i: { transactionId: tx, tranCode: 'TRANSFER', params: { from: '${id(1)}', to: '${id(2)}', amount: '1.01' } } });
  return { tx };
}`,
      },
      policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['*'] }],
    },
  });
  for (let i = 0; i < executions; i++) {
    ok(
      engine,
      `mutation($e: UUID!) { actions { startAction(id: "${id(1)}", input: {executionId: $e, input: {}}) { status } } }`,
      { e: id(10_000 + i) },
    );
  }
  engine.close();
  return path;
}

function worker(path: string, ...args: string[]): ChildProcess {
  return spawn(process.execPath, [BIN, 'worker', '--db', path, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function facts(path: string) {
  const db = ON_POSTGRES
    ? (new PgConnection(path) as unknown as Database.Database)
    : new Database(path, { readonly: true });
  const result = {
    statuses: db
      .prepare('SELECT status, count(*) AS n FROM executions WHERE parent_id IS NULL GROUP BY status')
      .all() as Array<{ status: string; n: number }>,
    transactions: (db.prepare('SELECT count(*) AS n FROM transactions').get() as { n: number }).n,
    invocationsPerExecution: db
      .prepare(
        'SELECT max(n) AS most, min(n) AS least FROM (SELECT count(*) AS n FROM invocations GROUP BY execution_id) AS per_execution',
      )
      .get() as { most: number; least: number },
    attempts: db.prepare('SELECT max(attempt) AS most FROM executions WHERE parent_id IS NULL').get() as {
      most: number;
    },
    balances: db.prepare('SELECT account_id, settled_dr, settled_cr FROM balances ORDER BY account_id').all() as Array<{
      account_id: string;
      settled_dr: string;
      settled_cr: string;
    }>,
    owners: (
      db.prepare('SELECT DISTINCT lease_owner FROM executions WHERE lease_owner IS NOT NULL').all() as Array<{
        lease_owner: string;
      }>
    ).map((r) => r.lease_owner),
    queued: (db.prepare("SELECT count(*) AS n FROM executions WHERE status = 'QUEUED'").get() as { n: number }).n,
  };
  db.close();
  return result;
}

describe('the worker as a process', () => {
  it('survives kill -9 at random moments: every execution SUCCEEDS exactly once and the ledger holds exactly 1,000 transactions', async () => {
    const path = await prepare(1000);
    let kills = 0;
    for (let round = 0; round < 4; round++) {
      const child = worker(path);
      // Killed at a random moment after it started running (its start-up alone can take seconds on a loaded machine).
      await running(child);
      await sleep(100 + Math.floor(Math.random() * 900));
      child.kill('SIGKILL');
      await exited(child);
      kills++;
    }
    const left = facts(path).queued;
    const last = worker(path, '--drain');
    expect(await exited(last)).toBe(0);
    const after = facts(path);
    expect(kills).toBe(4);
    expect(left).toBeLessThan(1000); // the killed workers did part of the work
    expect(after.statuses).toEqual([{ status: 'SUCCEEDED', n: 1000 }]);
    expect(after.transactions).toBe(1000);
    expect(after.invocationsPerExecution).toEqual({ most: 1, least: 1 });
    expect(after.attempts.most).toBe(1);
    // Balances agree with what 1,000 posts of 1.01 must give.
    expect(after.balances).toEqual([
      { account_id: id(1), settled_dr: '1010.00', settled_cr: '0' },
      { account_id: id(2), settled_dr: '0', settled_cr: '1010.00' },
    ]);
  }, 120_000);

  it('two worker processes on one database drain 2,000 executions with none run twice, and stop on SIGTERM', async () => {
    const path = await prepare(2000);
    const a = worker(path);
    const b = worker(path);
    // Both must be up before they are stopped: a signal during start-up finds no handler yet.
    await Promise.all([running(a), running(b)]);
    for (let i = 0; i < 600 && facts(path).queued > 0; i++) await sleep(100);
    a.kill('SIGTERM');
    b.kill('SIGTERM');
    expect(await exited(a)).toBe(0);
    expect(await exited(b)).toBe(0);
    const after = facts(path);
    expect(after.statuses).toEqual([{ status: 'SUCCEEDED', n: 2000 }]);
    expect(after.transactions).toBe(2000);
    expect(after.invocationsPerExecution).toEqual({ most: 1, least: 1 });
  }, 120_000);
});
