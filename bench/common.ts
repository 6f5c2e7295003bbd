/**
 * What the benchmarks share: the raw better-sqlite3 baseline (txn + 2 entries + 2 balance upserts,
 * integer minor units, one posting per commit), an engine set up with accounts and a TRANSFER tran
 * code, and interleaved timing, so that machine noise hits every side of a comparison alike.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createEngine, type Engine, type EngineOptions } from '../src/engine.js';
import { DEFAULT_CHECKPOINT_INTERVAL_MS as CHECKPOINT_INTERVAL_MS } from '../src/engine.js';
import { DEFAULT_LIMITS } from '../src/limits.js';
import { Checkpointer } from '../src/storage/checkpointer.js';
import { openDatabase } from '../src/storage/database.js';

export const ACCOUNTS = 1000;
export const uuid = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export function benchDir(): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'tally-bench-'));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Two distinct accounts for posting number n, spread over ACCOUNTS. */
export function pair(n: number): [string, string] {
  const a = (n * 7919) % ACCOUNTS;
  const b = (a + 1 + (n % (ACCOUNTS - 1))) % ACCOUNTS;
  return [uuid(a + 1), uuid(b + 1)];
}

/**
 * `checkpointed`: give the raw poster the engine's checkpointing too (a background thread, and the
 * writer's own checkpoint only at walAutocheckpointPages), to show how much of the engine's figure
 * that setting buys rather than the engine's own work.
 */
export function rawPoster(path: string, options: { checkpointed?: boolean } = {}) {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  // The engine's page cache too: with SQLite's default 2 MiB the raw side slows down as its indexes
  // outgrow the cache, which would flatter the engine.
  db.pragma('cache_size = -65536');
  const checkpointer = options.checkpointed ? new Checkpointer(path, CHECKPOINT_INTERVAL_MS, (e) => console.error(e)) : null;
  if (options.checkpointed) db.pragma(`wal_autocheckpoint = ${DEFAULT_LIMITS.walAutocheckpointPages}`);
  db.exec(`
    CREATE TABLE txn (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, created TEXT NOT NULL);
    CREATE TABLE entry (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, txn_id TEXT NOT NULL, account_id TEXT NOT NULL,
      direction TEXT NOT NULL, units INTEGER NOT NULL, currency TEXT NOT NULL);
    CREATE INDEX entry_by_txn ON entry (txn_id);
    CREATE INDEX entry_by_account ON entry (account_id, seq);
    CREATE TABLE balance (account_id TEXT NOT NULL, currency TEXT NOT NULL, dr INTEGER NOT NULL, cr INTEGER NOT NULL,
      version INTEGER NOT NULL, PRIMARY KEY (account_id, currency)) WITHOUT ROWID;`);
  const insertTxn = db.prepare('INSERT INTO txn (id, created) VALUES (?, ?)');
  const insertEntry = db.prepare('INSERT INTO entry (id, txn_id, account_id, direction, units, currency) VALUES (?, ?, ?, ?, ?, ?)');
  const upsert = db.prepare(`INSERT INTO balance VALUES (?, ?, ?, ?, 1) ON CONFLICT (account_id, currency)
    DO UPDATE SET dr = dr + excluded.dr, cr = cr + excluded.cr, version = version + 1`);
  const post = db.transaction((n: number, from: string, to: string, units: number) => {
    const id = uuid(n);
    insertTxn.run(id, new Date().toISOString());
    insertEntry.run(`${id}-1`, id, from, 'DEBIT', units, 'USD');
    insertEntry.run(`${id}-2`, id, to, 'CREDIT', units, 'USD');
    upsert.run(from, 'USD', units, 0);
    upsert.run(to, 'USD', 0, units);
  });
  return {
    post: (n: number) => {
      const [from, to] = pair(n);
      post.immediate(n, from, to, 1000 + (n % 5000));
    },
    close: () => {
      checkpointer?.stop();
      db.close();
    },
  };
}

/**
 * The same posting as plain statements on Tally's own schema (its tables, indexes, foreign keys and
 * decimal-string amounts): what is left of the gap to this is the engine's logic, not the schema.
 */
export function rawOnTallySchema(path: string) {
  const db = openDatabase({ path, busyTimeoutMs: 5000 });
  const journal = '00000000-0000-0000-0000-000000000000';
  const now = new Date().toISOString();
  db.prepare(`INSERT INTO tran_codes VALUES ('${uuid(999_999)}', 'RAW', 'ACTIVE', 1, '${now}', '${now}')`).run();
  const insertAccount = db.prepare(`INSERT INTO accounts (account_id, code, name, external_id, description, status, normal_balance_type, metadata, version, created, modified)
    VALUES (?, ?, ?, NULL, NULL, 'ACTIVE', 'CREDIT', NULL, 1, ?, ?)`);
  for (let i = 0; i < ACCOUNTS; i++) insertAccount.run(uuid(i + 1), `A${i + 1}`, `Account ${i + 1}`, now, now);
  const lastSeq = db.prepare<[], { seq: number | null }>('SELECT max(seq) AS seq FROM entries');
  const insertTxn = db.prepare(`INSERT INTO transactions (transaction_id, tran_code_id, tran_code_version, journal_id, correlation_id, effective,
    input_fingerprint, first_entry_seq, entry_count, version, created, modified) VALUES (?, '${uuid(999_999)}', 1, '${journal}', NULL, ?, 'raw', ?, 2, 1, ?, ?)`);
  const insertEntry = db.prepare(`INSERT INTO entries (seq, entry_id, transaction_id, account_id, journal_id, sequence, entry_type, layer, direction, units, currency, created)
    VALUES (?, ?, ?, ?, '${journal}', ?, 'RAW', 'SETTLED', ?, ?, 'USD', ?)`);
  const upsert = (column: string) => db.prepare(`INSERT INTO balances (account_id, journal_id, currency, settled_dr, settled_cr, pending_dr, pending_cr, encumbrance_dr, encumbrance_cr, entry_id, version, created, modified)
    VALUES (?, '${journal}', 'USD', ${column === 'settled_dr' ? '?' : "'0'"}, ${column === 'settled_cr' ? '?' : "'0'"}, '0', '0', '0', '0', ?, 1, ?, ?)
    ON CONFLICT (account_id, journal_id, currency) DO UPDATE SET ${column} = dec_add(${column}, excluded.${column}), entry_id = excluded.entry_id, version = balances.version + 1, modified = excluded.modified`);
  const debit = upsert('settled_dr');
  const credit = upsert('settled_cr');
  const post = db.transaction((n: number) => {
    const [from, to] = pair(n);
    const id = uuid(n);
    const at = new Date().toISOString();
    const seq = (lastSeq.get()?.seq ?? 0) + 1;
    const units = `${10 + (n % 5000)}.${n % 100}`;
    insertTxn.run(id, at.slice(0, 10), seq, at, at);
    insertEntry.run(seq, `${id}-1`, id, from, 1, 'DEBIT', units, at);
    insertEntry.run(seq + 1, `${id}-2`, id, to, 2, 'CREDIT', units, at);
    debit.run(from, units, `${id}-1`, at, at);
    credit.run(to, units, `${id}-2`, at, at);
  });
  return { post: (n: number) => post.immediate(n), close: () => db.close() };
}

export const POST = `mutation Post($input: TransactionInput!) { postTransaction(input: $input) { transactionId } }`;

export async function setupEngine(path: string, options: Omit<EngineOptions, 'path'> = {}): Promise<Engine> {
  const engine = await createEngine({ path, ...options });
  for (let i = 0; i < ACCOUNTS; i++) {
    ok(engine, 'mutation($i: AccountInput!) { createAccount(input: $i) { code } }', { i: { accountId: uuid(i + 1), code: `A${i + 1}`, name: `Account ${i + 1}` } });
  }
  ok(engine, `mutation { createTranCode(input: {tranCodeId: "${uuid(999_999)}", code: "TRANSFER",
      params: [{name: "from", type: UUID}, {name: "to", type: UUID}, {name: "amount", type: DECIMAL}],
      transaction: {effective: "date.Today()"},
      entries: [{accountId: "params.from", units: "params.amount", currency: "'USD'", direction: "DEBIT", layer: "SETTLED"},
                {accountId: "params.to", units: "params.amount", currency: "'USD'", direction: "CREDIT", layer: "SETTLED"}]}) { code } }`);
  return engine;
}

export function ok(engine: Engine, query: string, variables?: Record<string, unknown>): Record<string, any> {
  const result = engine.graphql(query, variables);
  if (result.errors) throw new Error(JSON.stringify(result.errors));
  return result.data as Record<string, any>;
}

/** Posts per second of `post(n)` over `count` calls starting at `start`. */
export function rate(count: number, start: number, post: (n: number) => void): number {
  return measure(count, start, post).perSecond;
}

/**
 * Calls per second (wall) and CPU µs per call of `post(n)`. CPU is the process's user + system
 * time (Node 20 has no per-thread clock); the only other thread that works during a run is the
 * engine's checkpointer, a small share of it.
 */
export function measure(count: number, start: number, post: (n: number) => void): { perSecond: number; cpuUs: number } {
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < count; i++) post(start + i);
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  return { perSecond: count / wall, cpuUs: (cpu.user + cpu.system) / count };
}

/**
 * Interleaved rounds: every side runs once per round, in turn. Returns the median rate of each.
 * Each side gets its own id range so nothing repeats.
 */
export function compare(
  sides: Record<string, (n: number) => void>,
  perRound: number,
  rounds: number,
): Record<string, { median: number; rounds: number[]; cpuUs: number }> {
  const names = Object.keys(sides);
  const results: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
  const cpu: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
  names.forEach((name, i) => rate(Math.min(500, perRound), 50_000_000 + i * 1_000_000, sides[name]!)); // warm-up
  for (let round = 0; round < rounds; round++) {
    names.forEach((name, i) => {
      settle();
      const m = measure(perRound, (i + 1) * 10_000_000 + round * perRound, sides[name]!);
      results[name]!.push(m.perSecond);
      cpu[name]!.push(m.cpuUs);
    });
  }
  return Object.fromEntries(names.map((n) => [n, { median: median(results[n]!), rounds: results[n]!, cpuUs: median(cpu[n]!) }]));
}

/** Let background checkpoints of the side that just ran finish, so they do not slow the next one. */
function settle(): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
}

/** Rows of [path, per second, CPU µs per call]; × raw is per second over the baseline's. */
export function table(rows: Array<[string, number, number?]>, baseline: number): string {
  const lines = ['| path | per second | × raw | CPU µs/call |', '|---|---:|---:|---:|'];
  for (const [name, value, cpuUs] of rows) {
    lines.push(`| ${name} | ${value.toFixed(0)} | ${(value / baseline).toFixed(2)} | ${cpuUs === undefined ? '' : cpuUs.toFixed(0)} |`);
  }
  return lines.join('\n');
}
