import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { type PayoutProvider, startPayoutProvider } from '../../examples/payout-provider/provider.mjs';
import { id } from '../helpers/engine.js';
import { CLEARING, CUSTOMER, payoutEngine, payoutsIntegration, sendPayout } from '../helpers/payouts.js';
import { exited, running } from '../helpers/processes.js';

// Outside calls survive kill -9 of their worker (DESIGN §11): real `tally worker` processes on a
// database file, the stand-in payout provider on loopback in this process. A call whose worker died
// is claimed again once its lease (agentLeaseMs, 1 s here) runs out and sent again with the same
// Idempotency-Key, and the provider's answer to that key settles or releases the hold exactly once.

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');
const TOKEN = 'sk_test_outbound_processes_0123456789';
process.env.TEST_PAYOUTS_TOKEN = TOKEN;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let provider: PayoutProvider | null = null;
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill();
  await provider?.close();
  provider = null;
});

/** The payout ledger on a database file, and a TALLY_CONFIG for workers: the same integration, a 1 s lease. */
async function prepare(url: string) {
  const dir = mkdtempSync(join(tmpdir(), 'tally-outbound-'));
  const path = join(dir, 'payouts.db');
  const config = join(dir, 'tally.config.json');
  writeFileSync(
    config,
    JSON.stringify({
      integrations: [payoutsIntegration(url, { timeoutMs: 20_000 })],
      limits: { agentLeaseMs: 1000, agentRunsPerClientMax: 8 },
    }),
  );
  const engine = await payoutEngine(url, {}, { path });
  return { path, config, engine };
}

function worker(path: string, config: string): ChildProcess {
  const child = spawn(process.execPath, [BIN, 'worker', '--db', path, '--log-level', 'silent'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TALLY_CONFIG: config, TEST_PAYOUTS_TOKEN: TOKEN },
  });
  children.push(child);
  return child;
}

async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Exact decimal units as integer cents ("974.5" → 97450). */
function cents(units: string): number {
  const [whole = '0', fraction = ''] = units.split('.');
  const value = Math.abs(Number(whole)) * 100 + Number(`${fraction}00`.slice(0, 2));
  return units.startsWith('-') ? -value : value;
}

interface HttpRow {
  execution_id: string;
  status: string;
  attempt: number;
  input: string;
  output: string | null;
  error: string | null;
}

/** What the database file holds now, read beside the workers. */
function facts(path: string) {
  const db = new Database(path, { readonly: true });
  try {
    const all = <T>(sql: string, ...params: unknown[]) => db.prepare(sql).all(...params) as T[];
    const payouts = all<HttpRow>(
      "SELECT execution_id, status, attempt, input, output, error FROM executions WHERE kind = 'HTTP' AND parent_id IS NULL",
    );
    return {
      payouts,
      /** Executions not yet final, of every kind. */
      open: all<{ n: number }>(
        "SELECT count(*) AS n FROM executions WHERE status IN ('QUEUED', 'RUNNING') AND parent_id IS NULL",
      )[0]!.n,
      followUps: all<{ action_name: string; status: string; input: string }>(
        "SELECT action_name, status, input FROM executions WHERE action_name IN ('settle_payout', 'release_payout') AND parent_id IS NULL",
      ),
      sends: new Map(
        all<{ execution_id: string; sends: number }>('SELECT execution_id, sends FROM outbound_sends').map((r) => [
          r.execution_id,
          r.sends,
        ]),
      ),
      invocations: new Map(
        all<{ execution_id: string; n: number }>(
          'SELECT execution_id, count(*) AS n FROM invocations GROUP BY execution_id',
        ).map((r) => [r.execution_id, r.n]),
      ),
      transactions: all<{ transaction_id: string; void_of: string | null; voided_by: string | null }>(
        'SELECT transaction_id, void_of, voided_by FROM transactions',
      ),
      /** The units each transaction debits the customer on the settled layer. */
      settledDebits: new Map(
        all<{ transaction_id: string; units: string }>(
          "SELECT transaction_id, units FROM entries WHERE account_id = ? AND layer = 'SETTLED' AND direction = 'DEBIT'",
          CUSTOMER,
        ).map((r) => [r.transaction_id, r.units]),
      ),
      balances: all<{
        account_id: string;
        settled_dr: string;
        settled_cr: string;
        pending_dr: string;
        pending_cr: string;
      }>('SELECT account_id, settled_dr, settled_cr, pending_dr, pending_cr FROM balances'),
    };
  } finally {
    db.close();
  }
}
type Facts = ReturnType<typeof facts>;

/** An account's settled and pending normal balances (credit-normal: credits − debits), in cents. */
function balanceCents(f: Facts, account: string) {
  const row = f.balances.find((b) => b.account_id === account)!;
  return {
    settled: cents(row.settled_cr) - cents(row.settled_dr),
    pending: cents(row.pending_cr) - cents(row.pending_dr),
  };
}

/** Debits minus credits over every account, per layer: 0 and 0 in a balanced ledger. */
function imbalanceCents(f: Facts) {
  let settled = 0;
  let pending = 0;
  for (const b of f.balances) {
    settled += cents(b.settled_dr) - cents(b.settled_cr);
    pending += cents(b.pending_dr) - cents(b.pending_cr);
  }
  return { settled, pending };
}

function requestsFor(p: PayoutProvider, payoutId: string) {
  return p.requests.filter(
    (r) => r.path === '/v1/payouts' && (r.body as { payout_id?: string } | null)?.payout_id === payoutId,
  );
}

function paidFor(p: PayoutProvider, payoutId: string) {
  return [...p.payouts.values()].filter((payout) => payout.payout_id === payoutId);
}

async function until(done: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`${what} within ${ms} ms`);
    await sleep(100);
  }
}

describe('outside calls survive kill -9 of their worker', () => {
  it('killed after the provider paid and wrote its whole answer, before the outcome was recorded: the next worker resends with the same key, gets the stored answer, and the payout settles once', async () => {
    provider = await startPayoutProvider({ token: TOKEN });
    const { path, config, engine } = await prepare(provider.url);
    const payoutId = id(5001);
    const executionId = sendPayout(engine, id(6001), { payout_id: payoutId, amount: '25.50' });
    engine.close();

    provider.holdNext(1);
    const first = worker(path, config);
    await running(first);
    // The provider has paid, stored its answer and written all of it; the worker waits for its end.
    const held = await within(provider.nextHeld(), 20_000, 'the worker did not send the payout');
    expect(held).toMatchObject({ status: 201, payoutId });
    first.kill('SIGKILL');
    await exited(first);
    await within(held.closed, 5000, "the dead worker's connection did not close");
    held.end(); // too late: nobody is there to read the end of it

    const between = facts(path);
    expect(between.payouts).toMatchObject([{ execution_id: executionId, status: 'RUNNING', attempt: 1 }]);
    expect(between.sends.get(executionId)).toBe(1);
    expect(between.invocations.get(executionId)).toBeUndefined(); // no outcome recorded
    expect(between.followUps).toEqual([]);
    expect(between.transactions.filter((t) => t.void_of !== null)).toEqual([]);
    expect(balanceCents(between, CUSTOMER)).toEqual({ settled: 100_000, pending: -2550 });
    expect(paidFor(provider, payoutId)).toHaveLength(1);

    const second = worker(path, config);
    await running(second);
    await until(
      () => facts(path).open === 0 && facts(path).followUps.length === 1,
      20_000,
      'the payout did not settle',
    );
    second.kill('SIGTERM');
    expect(await exited(second)).toBe(0);

    const after = facts(path);
    // Sent twice with one key; the second time the provider answered what it had stored.
    const sent = requestsFor(provider, payoutId);
    expect(sent).toHaveLength(2);
    expect(sent.map((r) => r.key)).toEqual([held.key, held.key]);
    expect(sent.every((r) => r.authorization === `Bearer ${TOKEN}`)).toBe(true);
    expect(paidFor(provider, payoutId)).toEqual([held.body]);
    const [run] = after.payouts;
    expect(run).toMatchObject({ status: 'SUCCEEDED', attempt: 2 });
    expect(JSON.parse(run!.output!)).toMatchObject({ status: 201, body: { id: held.body.id } });
    expect(after.sends.get(executionId)).toBe(2);
    expect(after.invocations.get(executionId)).toBe(1); // the killed attempt left no record
    // One settle, no release: the hold voided once, the money posted settled once.
    expect(after.followUps.map((f) => [f.action_name, f.status])).toEqual([['settle_payout', 'SUCCEEDED']]);
    expect(after.transactions.filter((t) => t.void_of === payoutId)).toHaveLength(1);
    expect(after.transactions.filter((t) => t.void_of !== null)).toHaveLength(1);
    expect(cents(after.settledDebits.get(executionId)!)).toBe(2550);
    expect(after.transactions).toHaveLength(4); // the deposit, the hold, its void, the settlement
    expect(balanceCents(after, CUSTOMER)).toEqual({ settled: 97_450, pending: 0 });
    expect(balanceCents(after, CLEARING)).toEqual({ settled: -97_450, pending: 0 });
    expect(imbalanceCents(after)).toEqual({ settled: 0, pending: 0 });
  }, 60_000);

  it('200 payouts drained by workers killed -9 three times at random: the provider paid each payout at most once, under one key, and the ledger settled every paid one once and released every refused one', async () => {
    const PAYOUTS = 200;
    // Each payout takes the provider 100 ms, so that eight run at once in a worker and a kill finds
    // some sent and not yet answered, or answered and not yet recorded.
    provider = await startPayoutProvider({ token: TOKEN, delayMs: 100 });
    const { path, config, engine } = await prepare(provider.url);
    const wanted = new Map<string, { executionId: string; amount: string; refused: boolean }>();
    for (let i = 0; i < PAYOUTS; i++) {
      const payoutId = id(100_000 + i);
      // Every tenth is refused for good by the provider (13.13); the others are 0.01 to 4.99.
      const refused = i % 10 === 7;
      const amount = refused ? '13.13' : `${i % 5}.${String(1 + ((i * 37) % 99)).padStart(2, '0')}`;
      const executionId = sendPayout(engine, id(200_000 + i), { payout_id: payoutId, amount });
      wanted.set(payoutId, { executionId, amount, refused });
    }
    engine.close();
    // And the first payout sent gets a 503 first, retried with the same key (one, so that no payout
    // can need more than payout's maxAttempts, 5: a 503, three attempts killed, the one that ends).
    provider.failNext(1, 503);

    const outstanding: number[] = [];
    for (let kill = 0; kill < 3; kill++) {
      const sentBefore = provider.requests.length;
      const child = worker(path, config);
      await running(child);
      // Killed at a random moment once it is sending: eight payouts are in flight from then on.
      await until(() => provider!.requests.length > sentBefore, 20_000, 'the worker sent no payout');
      await sleep(150 + Math.floor(Math.random() * 450));
      child.kill('SIGKILL');
      await exited(child);
      outstanding.push(facts(path).payouts.filter((p) => p.status !== 'SUCCEEDED' && p.status !== 'FAILED').length);
    }
    const last = worker(path, config);
    await running(last);
    await until(() => facts(path).open === 0, 40_000, 'the payouts did not all end');
    last.kill('SIGTERM');
    expect(await exited(last)).toBe(0);

    const after = facts(path);
    const refusedCount = [...wanted.values()].filter((w) => w.refused).length;
    const byExecution = new Map(after.payouts.map((p) => [p.execution_id, p]));
    let paidCents = 0;
    let resent = 0;
    for (const [payoutId, { executionId, amount, refused }] of wanted) {
      const run = byExecution.get(executionId)!;
      const sent = requestsFor(provider, payoutId);
      // Every request for it carried its one key; the provider paid it at most once (refused: never).
      expect(new Set(sent.map((r) => r.key)).size, payoutId).toBe(1);
      expect(paidFor(provider, payoutId), payoutId).toHaveLength(refused ? 0 : 1);
      // Counted before it is sent: the record never undercounts what the provider received.
      expect(after.sends.get(executionId), payoutId).toBeGreaterThanOrEqual(sent.length);
      // Each recorded attempt sent one request; the rest were sent by attempts that died unrecorded.
      resent += sent.length - (after.invocations.get(executionId) ?? 0);
      // The hold is voided once, whatever the outcome.
      expect(
        after.transactions.filter((t) => t.void_of === payoutId),
        payoutId,
      ).toHaveLength(1);
      if (refused) {
        expect(run.status, payoutId).toBe('FAILED');
        expect(JSON.parse(run.error!), payoutId).toMatchObject({
          code: 'INTEGRATION_ERROR',
          message: expect.stringContaining('HTTP 422'),
        });
        expect(after.settledDebits.has(executionId), payoutId).toBe(false);
      } else {
        // The provider's payout is the one the execution recorded, and it is settled once, in full.
        expect(run.status, payoutId).toBe('SUCCEEDED');
        expect(JSON.parse(run.output!).body.id, payoutId).toBe(paidFor(provider, payoutId)[0]!.id);
        expect(cents(after.settledDebits.get(executionId) ?? 'none'), payoutId).toBe(cents(amount));
        paidCents += cents(amount);
      }
    }
    const followUps = (name: string) => after.followUps.filter((f) => f.action_name === name);
    expect(followUps('settle_payout')).toHaveLength(PAYOUTS - refusedCount);
    expect(followUps('release_payout')).toHaveLength(refusedCount);
    expect(after.followUps.every((f) => f.status === 'SUCCEEDED')).toBe(true);
    // The deposit, each hold and its void, and each paid payout's settlement: nothing else.
    expect(after.transactions).toHaveLength(1 + 2 * PAYOUTS + (PAYOUTS - refusedCount));
    expect(after.transactions.filter((t) => t.void_of === null && t.voided_by === null)).toHaveLength(
      1 + PAYOUTS - refusedCount,
    );
    expect(balanceCents(after, CUSTOMER)).toEqual({ settled: 100_000 - paidCents, pending: 0 });
    expect(balanceCents(after, CLEARING)).toEqual({ settled: paidCents - 100_000, pending: 0 });
    expect(imbalanceCents(after)).toEqual({ settled: 0, pending: 0 });

    // The kills landed mid-drain: work was left after each, and each took attempts in flight with it
    // (claimed, so counted, and never recorded).
    const lostAttempts = after.payouts.reduce(
      (n, p) => n + p.attempt - (after.invocations.get(p.execution_id) ?? 0),
      0,
    );
    expect(outstanding.every((n) => n > 0)).toBe(true);
    expect(lostAttempts).toBeGreaterThanOrEqual(3);
    expect(resent).toBeGreaterThan(0);
    console.log(
      `payouts left after each kill: ${outstanding.join(', ')}; attempts lost to kills: ${lostAttempts}; requests sent by attempts that died before recording the answer: ${resent}; requests: ${provider.requests.filter((r) => r.path === '/v1/payouts').length}`,
    );
  }, 60_000);
});
