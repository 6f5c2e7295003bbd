import { afterEach, describe, expect, it } from 'vitest';
import type { Clock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import type { Limits } from '../../src/limits.js';
import { PgConnection } from '../../src/storage/pg/connection.js';
import { balanceOf, createAccount, createTransferCode, POST } from '../helpers/ledger.js';
import { fails, id, newEngine, ok, postgresTestDatabase } from '../helpers/engine.js';

/**
 * Two engines (two connections, as two processes would have) on one PostgreSQL database: every
 * transaction is SERIALIZABLE, and one that loses a race with another runs again, up to
 * transactionRetriesMax times (issue 19). The race is made deterministic: engine A's clock, read
 * inside A's posting after its snapshot was taken and before it writes, has engine B commit a
 * posting to the same accounts first.
 */
const URL = process.env.TALLY_TEST_PG_URL;

/**
 * A clock that, while `races` > 0, has `rival` commit a transfer of 1 before it answers (one per
 * call: a posting reads the clock more than once, so one attempt may meet several). `posted` counts them.
 */
class RacingClock implements Clock {
  races = 0;
  posted = 0;
  rival: Engine | null = null;
  /** What the rival posts (default: a transfer of 1 under a fresh id). */
  input: ((n: number) => Record<string, unknown>) | null = null;
  now(): Date {
    if (this.races > 0 && this.rival) {
      this.races--;
      const n = ++this.posted;
      ok(this.rival, POST, {
        input: this.input?.(n) ?? {
          transactionId: id(700_000 + n),
          tranCode: 'TRANSFER',
          params: { from: id(1), to: id(2), amount: '1' },
        },
      });
    }
    return new Date();
  }
}

describe.skipIf(!URL)('two engines on one PostgreSQL database: lost races run again', () => {
  const engines: Engine[] = [];
  afterEach(() => {
    for (const e of engines.splice(0)) e.close();
  });

  async function pair(retries?: number, limits: Partial<Limits> = {}) {
    const path = postgresTestDatabase();
    const clock = new RacingClock();
    const a = await newEngine({
      path,
      clock,
      limits: { ...limits, ...(retries === undefined ? {} : { transactionRetriesMax: retries }) },
    });
    const b = await newEngine({ path });
    engines.push(a, b);
    clock.rival = b;
    createAccount(a, 1);
    createAccount(a, 2);
    createTransferCode(a);
    return { a, b, clock };
  }

  const transfer = (n: number, amount = '10') => ({
    input: { transactionId: id(n), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount } },
  });

  it('a posting that lost the race to the same balances runs again and both count, exactly once each', async () => {
    const { a, b, clock } = await pair();
    clock.races = 3;
    ok(a, POST, transfer(1));
    // Three rival postings committed while A's ran; A ran again after each that beat it, and committed once.
    expect(clock.posted).toBe(3);
    expect(a.transactionRetries).toBeGreaterThanOrEqual(1);
    for (const engine of [a, b]) {
      expect(balanceOf(engine, id(1)).settled.drBalance.units).toBe('13');
      expect(balanceOf(engine, id(2)).settled.crBalance.units).toBe('13');
    }
    expect(a.db.prepare('SELECT count(*) AS n FROM transactions').get()).toEqual({ n: 4 });
    expect(a.db.prepare('SELECT count(*) AS n FROM entries WHERE transaction_id = ?').get(id(1))).toEqual({ n: 2 });
  });

  it('past transactionRetriesMax the request fails with BUSY (retryable) naming the limit, and writes nothing', async () => {
    const { a, clock } = await pair(2);
    clock.races = 100;
    const error = fails(a, POST, transfer(1));
    expect(error.code).toBe('BUSY');
    expect(error.message).toContain('transactionRetriesMax 2');
    expect(error.result.errors![0]!.extensions!.retryable).toBe(true);
    expect(a.transactionRetries).toBe(2);
    clock.races = 0;
    // The rival postings are there; A's is not.
    const rivals = clock.posted;
    expect(rivals).toBeGreaterThanOrEqual(3);
    expect(balanceOf(a, id(1)).settled.drBalance.units).toBe(String(rivals));
    expect(a.db.prepare('SELECT count(*) AS n FROM transactions WHERE transaction_id = ?').get(id(1))).toEqual({
      n: 0,
    });
    // And A's next request, with nobody racing it, goes through.
    ok(a, POST, transfer(1));
    expect(balanceOf(a, id(1)).settled.drBalance.units).toBe(String(rivals + 10));
  });

  it('a tool that catches the conflict its graphql() call met cannot commit what it did next: the whole request runs again', async () => {
    const { a, clock } = await pair();
    ok(a, `mutation($input: ActionInput!) { actions { createAction(id: "${id(1)}", input: $input) { version } } }`, {
      input: {
        name: 'swallow',
        kind: 'tool',
        config: {
          runtime: 'javascript',
          src: `function run(event) {
  try {
    graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }',
      { i: { transactionId: '${id(5)}', tranCode: 'TRANSFER', params: { from: '${id(1)}', to: '${id(2)}', amount: '10' } } });
    return { posted: true };
  } catch (e) {
    return { caught: String(e) };
  }
}`,
        },
        policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['*'] }],
      },
    });
    clock.races = 1;
    const run = ok(
      a,
      `mutation { actions { invokeAction(name: "swallow", input: {executionId: "${id(50)}", actionVersion: 1, input: {}}) { status output } } }`,
    ).actions.invokeAction;
    expect(run).toEqual({ status: 'SUCCEEDED', output: { posted: true } });
    expect(a.transactionRetries).toBeGreaterThanOrEqual(1);
    expect(balanceOf(a, id(1)).settled.drBalance.units).toBe(String(10 + clock.posted));
    expect(a.db.prepare('SELECT count(*) AS n FROM executions WHERE execution_id = ?').get(id(50))).toEqual({ n: 1 });
  });

  it('the same transactionId posted by two processes at once is posted once: the loser runs again and answers with the winner’s transaction', async () => {
    const { a, clock } = await pair();
    clock.input = () => transfer(1).input;
    clock.races = 1;
    const answer = ok(
      a,
      `mutation($input: TransactionInput!) { postTransaction(input: $input) { transactionId description } }`,
      transfer(1),
    );
    expect(answer.postTransaction.transactionId).toBe(id(1));
    expect(a.transactionRetries).toBeGreaterThanOrEqual(1);
    expect(a.db.prepare('SELECT count(*) AS n FROM transactions').get()).toEqual({ n: 1 });
    expect(balanceOf(a, id(1)).settled.drBalance.units).toBe('10');
  });

  it('a group of requests that lost a race runs again, one request per transaction: every request answers as if alone', async () => {
    const { a, clock } = await pair();
    clock.races = 1;
    const answers = a.executeBatch(
      [1, 2, 3].map((n) => ({ request: { query: POST, variables: transfer(n, String(n)) } })),
    );
    expect(answers.map((x) => x.errors)).toEqual([undefined, undefined, undefined]);
    expect(
      answers.map((x) => (x.data as { postTransaction: { transactionId: string } }).postTransaction.transactionId),
    ).toEqual([id(1), id(2), id(3)]);
    expect(a.transactionRetries).toBe(1);
    expect(balanceOf(a, id(1)).settled.drBalance.units).toBe('7');
  });

  it('after a lost race the next groups are smaller, and grow back by one with each group that commits', async () => {
    const { a, clock } = await pair(undefined, { writeBatchWaitMs: 60_000 });
    const group = (first: number) =>
      a.executeGroup([0, 1, 2, 3].map((n) => ({ request: { query: POST, variables: transfer(first + n, '1') } })));
    expect(group(10).filter((x) => x !== undefined)).toHaveLength(4);
    clock.races = 1;
    // The race dooms the group at its first request: that one runs again alone, the others wait for the next group.
    const lost = group(20);
    expect(lost.map((x) => x === undefined)).toEqual([false, true, true, true]);
    expect(lost[0]!.errors).toBeUndefined();
    const sizes = [30, 40, 50].map((first) => group(first).filter((x) => x !== undefined).length);
    expect(sizes).toEqual([1, 2, 3]);
  });
});

describe.skipIf(!URL)('a PostgreSQL database made before entry seq blocks', () => {
  it('gets the sequence on its next start, past every entry it holds', async () => {
    const path = postgresTestDatabase();
    const first = await newEngine({ path });
    createAccount(first, 1);
    createAccount(first, 2);
    createTransferCode(first);
    for (let n = 1; n <= 3; n++)
      ok(first, POST, {
        input: { transactionId: id(n), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount: '1' } },
      });
    // As the first PostgreSQL schemas were: no sequence, entries numbered from 1 up.
    first.db.exec(
      'DROP SEQUENCE tally_entry_seq_blocks; UPDATE entries SET seq = seq - 1024 * ((seq - 1) / 1024) + 2 * ((seq - 1) / 1024)',
    );
    first.db.exec(
      'UPDATE transactions SET first_entry_seq = (SELECT min(seq) FROM entries e WHERE e.transaction_id = transactions.transaction_id)',
    );
    first.close();
    const last = (await newEngine({ path })) as Engine;
    try {
      ok(last, POST, {
        input: { transactionId: id(4), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount: '1' } },
      });
      const seqs = last.db.prepare<[], number>('SELECT seq FROM entries ORDER BY seq').pluck().all();
      expect(seqs.slice(0, 6)).toEqual([1, 2, 3, 4, 5, 6]);
      expect(seqs.slice(6)).toEqual([1025, 1026]);
      expect(balanceOf(last, id(1)).settled.drBalance.units).toBe('4');
    } finally {
      last.close();
    }
  });
});

describe.skipIf(!URL)('entriesPerTransactionMax on PostgreSQL', () => {
  it('is refused past the entry seq block (1 024) before anything is opened, and allowed up to it', async () => {
    const path = postgresTestDatabase();
    await expect(newEngine({ path, limits: { entriesPerTransactionMax: 1025 } })).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining('entriesPerTransactionMax is 1025'),
      hint: expect.stringContaining('1024 or less'),
    });
    // Nothing was created in the schema.
    const check = new PgConnection(path);
    expect(
      check.prepare('SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace').pluck().get(),
    ).toBe(0);
    check.close();
    (await newEngine({ path, limits: { entriesPerTransactionMax: 1024 } })).close();
  });
});

describe.skipIf(!URL)('workers in other processes wake on LISTEN/NOTIFY', () => {
  it('a start committed by one engine wakes an idle worker of another at once, not at its next poll', async () => {
    const path = postgresTestDatabase();
    const starter = await newEngine({ path });
    const runner = await newEngine({ path });
    try {
      ok(
        starter,
        `mutation($input: ActionInput!) { actions { createAction(id: "${id(1)}", input: $input) { version } } }`,
        {
          input: {
            name: 'noop',
            kind: 'tool',
            config: { runtime: 'javascript', src: 'function run(event) { return { ok: true }; }' },
          },
        },
      );
      let ran = 0;
      // It would poll once a minute: only the notification can wake it within the test.
      const worker = runner.createWorker({ pollMs: 60_000, onAttempt: () => ran++ });
      worker.start();
      await new Promise((r) => setTimeout(r, 200));
      const began = Date.now();
      ok(
        starter,
        `mutation { actions { startAction(id: "${id(1)}", input: {executionId: "${id(77)}", input: {}}) { status } } }`,
      );
      while (ran === 0 && Date.now() - began < 10_000) await new Promise((r) => setTimeout(r, 10));
      await worker.stop();
      expect(ran).toBe(1);
      expect(Date.now() - began).toBeLessThan(10_000);
      expect(starter.db.prepare('SELECT status FROM executions WHERE execution_id = ?').get(id(77))).toEqual({
        status: 'SUCCEEDED',
      });
    } finally {
      starter.close();
      runner.close();
    }
  });
});
