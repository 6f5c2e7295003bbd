/**
 * What the benchmarks share: the raw better-sqlite3 baseline (txn + 2 entries + 2 balance upserts,
 * integer minor units, one posting per commit), an engine set up with accounts and a TRANSFER tran
 * code, and interleaved timing, so that machine noise hits every side of a comparison alike.
 */
import type { ChildProcess } from 'node:child_process';
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

export const isRunning = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

/**
 * A bench folder and the set of child processes (servers) a bench starts: every one still running
 * is killed on exit, error or signal, and the folder removed.
 */
export function benchProcesses(): { dir: string; children: Set<ChildProcess> } {
  const { dir, cleanup } = benchDir();
  const children = new Set<ChildProcess>();
  process.on('exit', () => {
    for (const child of children) if (isRunning(child)) child.kill('SIGKILL');
    cleanup();
  });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130));
  return { dir, children };
}

/** SIGTERM, then SIGKILL if it has not exited within 10 s. */
export async function stopChild(child: ChildProcess): Promise<void> {
  if (!isRunning(child)) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
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
  const checkpointer = options.checkpointed
    ? new Checkpointer(path, CHECKPOINT_INTERVAL_MS, (e) => console.error(e))
    : null;
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
  const insertEntry = db.prepare(
    'INSERT INTO entry (id, txn_id, account_id, direction, units, currency) VALUES (?, ?, ?, ?, ?, ?)',
  );
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
  const postMany = db.transaction((ns: number[]) => {
    for (const n of ns) {
      const [from, to] = pair(n);
      post(n, from, to, 1000 + (n % 5000));
    }
  });
  return {
    post: (n: number) => {
      const [from, to] = pair(n);
      post.immediate(n, from, to, 1000 + (n % 5000));
    },
    /** The same postings, all in one transaction (one COMMIT). */
    postMany: (ns: number[]) => postMany.immediate(ns),
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
  const insertAccount =
    db.prepare(`INSERT INTO accounts (account_id, code, name, external_id, description, status, normal_balance_type, metadata, version, created, modified)
    VALUES (?, ?, ?, NULL, NULL, 'ACTIVE', 'CREDIT', NULL, 1, ?, ?)`);
  for (let i = 0; i < ACCOUNTS; i++) insertAccount.run(uuid(i + 1), `A${i + 1}`, `Account ${i + 1}`, now, now);
  const lastSeq = db.prepare<[], { seq: number | null }>('SELECT max(seq) AS seq FROM entries');
  const insertTxn =
    db.prepare(`INSERT INTO transactions (transaction_id, tran_code_id, tran_code_version, journal_id, correlation_id, effective,
    input_fingerprint, first_entry_seq, entry_count, version, created, modified) VALUES (?, '${uuid(999_999)}', 1, '${journal}', NULL, ?, 'raw', ?, 2, 1, ?, ?)`);
  const insertEntry =
    db.prepare(`INSERT INTO entries (seq, entry_id, transaction_id, account_id, journal_id, sequence, entry_type, layer, direction, units, currency, created)
    VALUES (?, ?, ?, ?, '${journal}', ?, 'RAW', 'SETTLED', ?, ?, 'USD', ?)`);
  const upsert = (column: string) =>
    db.prepare(`INSERT INTO balances (account_id, journal_id, currency, settled_dr, settled_cr, pending_dr, pending_cr, encumbrance_dr, encumbrance_cr, entry_id, version, created, modified)
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

/** The `transfer` tool's program: one graphql postTransaction of the TRANSFER tran code. */
export const TRANSFER_SRC = `function run(event) {
  const d = event.data;
  const t = graphql("mutation Post($input: TransactionInput!) { postTransaction(input: $input) { transactionId } }",
    { input: { transactionId: d.transaction_id, tranCode: "TRANSFER", params: { from: d.from, to: d.to, amount: d.amount } } });
  return { transaction_id: t.postTransaction.transactionId };
}`;

/** Create the `transfer` tool (bench:invoke, bench:http) under `actionId`. */
export function createTransferTool(engine: Engine, actionId: string): void {
  ok(
    engine,
    'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
    {
      id: actionId,
      input: {
        name: 'transfer',
        kind: 'tool',
        config: { runtime: 'javascript', src: TRANSFER_SRC },
        tool: {
          description: 'Move money between two accounts.',
          inputSchema: {
            type: 'object',
            properties: {
              transaction_id: { type: 'string', format: 'uuid' },
              from: { type: 'string', format: 'uuid' },
              to: { type: 'string', format: 'uuid' },
              amount: { type: 'string' },
            },
            required: ['transaction_id', 'from', 'to', 'amount'],
            additionalProperties: false,
          },
        },
        policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }],
      },
    },
  );
}

export async function setupEngine(path: string, options: Omit<EngineOptions, 'path'> = {}): Promise<Engine> {
  const engine = await createEngine({ path, ...options });
  for (let i = 0; i < ACCOUNTS; i++) {
    ok(engine, 'mutation($i: AccountInput!) { createAccount(input: $i) { code } }', {
      i: { accountId: uuid(i + 1), code: `A${i + 1}`, name: `Account ${i + 1}` },
    });
  }
  ok(
    engine,
    `mutation { createTranCode(input: {tranCodeId: "${uuid(999_999)}", code: "TRANSFER",
      params: [{name: "from", type: UUID}, {name: "to", type: UUID}, {name: "amount", type: DECIMAL}],
      transaction: {effective: "date.Today()"},
      entries: [{accountId: "params.from", units: "params.amount", currency: "'USD'", direction: "DEBIT", layer: "SETTLED"},
                {accountId: "params.to", units: "params.amount", currency: "'USD'", direction: "CREDIT", layer: "SETTLED"}]}) { code } }`,
  );
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
  return Object.fromEntries(
    names.map((n) => [n, { median: median(results[n]!), rounds: results[n]!, cpuUs: median(cpu[n]!) }]),
  );
}

/** Let background checkpoints of the side that just ran finish, so they do not slow the next one. */
function settle(): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
}

/** Rows of [path, per second, CPU µs per call]; × raw is per second over the baseline's. */
export function table(rows: Array<[string, number, number?]>, baseline: number): string {
  const lines = ['| path | per second | × raw | CPU µs/call |', '|---|---:|---:|---:|'];
  for (const [name, value, cpuUs] of rows) {
    lines.push(
      `| ${name} | ${value.toFixed(0)} | ${(value / baseline).toFixed(2)} | ${cpuUs === undefined ? '' : cpuUs.toFixed(0)} |`,
    );
  }
  return lines.join('\n');
}

/** Whether the bench was started with `--profile` (npm run bench:ledger -- --profile). */
export const PROFILE = process.argv.includes('--profile');

/** A statement's kind for the profile: BEGIN, COMMIT, SAVEPOINT, `INSERT entries`, `SELECT accounts`… */
function statementKind(sql: string): string {
  const text = sql.trim().replace(/\s+/g, ' ');
  const word = (text.match(/^\w+/)?.[0] ?? text).toUpperCase();
  if (word === 'BEGIN' || word === 'COMMIT' || word === 'SAVEPOINT' || word === 'RELEASE' || word === 'PRAGMA')
    return word === 'PRAGMA' ? text : word;
  if (word === 'ROLLBACK') return /^ROLLBACK TO/i.test(text) ? 'ROLLBACK TO' : 'ROLLBACK';
  const table = (pattern: RegExp) => text.match(pattern)?.[1]?.replace(/^main\./, '') ?? '?';
  if (word === 'INSERT') return `INSERT ${table(/^INSERT (?:OR \w+ )?INTO ([\w.]+)/i)}`;
  if (word === 'UPDATE') return `UPDATE ${table(/^UPDATE (?:OR \w+ )?([\w.]+)/i)}`;
  if (word === 'DELETE') return `DELETE ${table(/^DELETE FROM ([\w.]+)/i)}`;
  if (word === 'WITH') return `WITH … ${table(/\bFROM ([\w.]+)/i)}`;
  if (word === 'SELECT') {
    const from = text.match(/\bFROM ([\w.]+)/i)?.[1];
    return from ? `SELECT ${from}` : `SELECT (no table)`;
  }
  return word;
}

interface PhaseTotals {
  requests: number;
  totalUs: number;
  sql: Map<string, { us: number; calls: number }>;
  /** Time inside Sandbox.run less its host calls (QuickJS, marshalling), summed over nesting levels. */
  sandboxUs: number;
  sandboxCalls: number;
  /** Time inside Ledger.postTransaction (inclusive of its SQL), and the SQL part of it. */
  postingUs: number;
  postingSqlUs: number;
  postingCalls: number;
}

/**
 * The `--profile` mode: every better-sqlite3 statement execution (run, get, all, iterate and the
 * iterator's steps; BEGIN and COMMIT are statements too) is timed by its SQL text, and the time
 * inside Sandbox.run less its host calls is counted as the sandbox's. Nothing in src is changed:
 * the prototypes are wrapped from here. The wrappers cost ~0.1–0.3 µs per statement; the figures
 * are wall µs, for shares (CPU totals come from the normal mode).
 */
export async function installProfiler() {
  const db = new Database(':memory:');
  const proto = Object.getPrototypeOf(db.prepare('SELECT 1')) as Record<string, (...args: unknown[]) => unknown>;
  db.close();
  const now = () => performance.now() * 1000;
  let current: PhaseTotals | null = null;
  let depth = 0;
  /** Inside Ledger.postTransaction: its statements count toward postingSqlUs too. */
  let posting = 0;
  const kinds = new Map<string, string>();
  const charge = (sql: string, us: number, call: boolean) => {
    if (!current) return;
    let kind = kinds.get(sql);
    if (kind === undefined) kinds.set(sql, (kind = statementKind(sql)));
    const slot = current.sql.get(kind) ?? { us: 0, calls: 0 };
    slot.us += us;
    if (call) slot.calls++;
    if (posting > 0) current.postingSqlUs += us;
    current.sql.set(kind, slot);
  };
  // Statements run inside a statement (none today: user functions such as dec_add run no SQL) count as the outer one.
  const timed = <T>(sql: string, run: () => T, call = true): T => {
    if (depth > 0) return run();
    depth++;
    const t0 = now();
    try {
      return run();
    } finally {
      depth--;
      charge(sql, now() - t0, call);
    }
  };
  for (const method of ['run', 'get', 'all'] as const) {
    const original = proto[method]!;
    proto[method] = function (this: { source: string }, ...args: unknown[]) {
      return timed(this.source, () => original.apply(this, args));
    };
  }
  const iterate = proto.iterate!;
  proto.iterate = function (this: { source: string }, ...args: unknown[]) {
    const source = this.source;
    const iterator = timed(source, () => iterate.apply(this, args)) as IterableIterator<unknown>;
    const next = iterator.next.bind(iterator);
    iterator.next = () => timed(source, next, false);
    return iterator;
  };
  const dbProto = Database.prototype as unknown as { exec(sql: string): unknown };
  const exec = dbProto.exec;
  dbProto.exec = function (this: unknown, sql: string) {
    return timed(sql, () => exec.call(this, sql));
  };

  // The sandbox: Sandbox.run's own time, without the host calls it makes (they are timed as the rest).
  const { Sandbox } = await import('../sandbox/sandbox.js');
  const sandboxProto = Sandbox.prototype as unknown as {
    run(
      program: unknown,
      event: string,
      bridge: { call(op: string, args: string[]): string; log(line: string): void },
      deadline: number,
    ): unknown;
  };
  const run = sandboxProto.run;
  let hostUs = 0;
  sandboxProto.run = function (this: unknown, program, event, bridge, deadline) {
    const hostBefore = hostUs;
    const t0 = now();
    const timedBridge = {
      call: (op: string, args: string[]) => {
        const h0 = now();
        try {
          return bridge.call(op, args);
        } finally {
          hostUs += now() - h0;
        }
      },
      log: (line: string) => bridge.log(line),
    };
    try {
      return run.call(this, program, event, timedBridge, deadline);
    } finally {
      const inner = hostUs - hostBefore;
      const total = now() - t0;
      if (current) {
        current.sandboxUs += total - inner;
        current.sandboxCalls++;
      }
      // An outer call counts this whole call as its host time.
      hostUs = hostBefore;
    }
  };

  const watched = new WeakSet<Engine>();
  const fresh = (): PhaseTotals => ({
    requests: 0,
    totalUs: 0,
    sql: new Map(),
    sandboxUs: 0,
    sandboxCalls: 0,
    postingUs: 0,
    postingSqlUs: 0,
    postingCalls: 0,
  });
  return {
    /** Time the ledger's postTransaction of `engine` too (the resolver calls it on this instance). */
    watchPostings(engine: Engine): void {
      if (watched.has(engine)) return;
      watched.add(engine);
      const ledger = engine.ledger as unknown as { postTransaction: (...args: unknown[]) => unknown };
      const post = ledger.postTransaction;
      ledger.postTransaction = (...args: unknown[]) => {
        const t0 = now();
        posting++;
        try {
          return post(...args);
        } finally {
          posting--;
          if (current) {
            current.postingUs += now() - t0;
            current.postingCalls++;
          }
        }
      };
    },
    /** `requests` calls of `request(n)`, each timed whole and phase by phase. */
    measure(requests: number, start: number, request: (n: number) => void): PhaseTotals {
      const totals = fresh();
      current = totals;
      try {
        for (let i = 0; i < requests; i++) {
          const t0 = now();
          request(start + i);
          totals.totalUs += now() - t0;
          totals.requests++;
        }
      } finally {
        current = null;
      }
      return totals;
    },
  };
}

/** Median per-request figures of several profiled rounds of one side, as a table. */
export function profileTable(name: string, rounds: PhaseTotals[]): string {
  const per = (f: (t: PhaseTotals) => number) => median(rounds.map((t) => f(t) / t.requests));
  const kinds = [...new Set(rounds.flatMap((t) => [...t.sql.keys()]))];
  const sqlRows = kinds
    .map((kind) => ({ kind, us: per((t) => t.sql.get(kind)?.us ?? 0), calls: per((t) => t.sql.get(kind)?.calls ?? 0) }))
    .filter((row) => row.calls > 0 || row.us >= 0.05)
    .sort((a, b) => b.us - a.us);
  const sqlUs = per((t) => [...t.sql.values()].reduce((s, x) => s + x.us, 0));
  const totalUs = per((t) => t.totalUs);
  const sandboxUs = per((t) => t.sandboxUs);
  const postingUs = per((t) => t.postingUs);
  const postingSqlUs = per((t) => t.postingSqlUs);
  const lines = [
    `### ${name} (wall µs per request, median of ${rounds.length} rounds × ${rounds[0]?.requests ?? 0})`,
    '',
    '| phase | µs | calls |',
    '|---|---:|---:|',
  ];
  for (const row of sqlRows) lines.push(`| SQL ${row.kind} | ${row.us.toFixed(1)} | ${row.calls.toFixed(2)} |`);
  lines.push(`| **SQL total** | **${sqlUs.toFixed(1)}** | ${sqlRows.reduce((s, r) => s + r.calls, 0).toFixed(1)} |`);
  if (rounds.some((t) => t.sandboxCalls > 0)) {
    lines.push(
      `| **sandbox** (Sandbox.run less its host calls: QuickJS, marshalling) | **${sandboxUs.toFixed(1)}** | ${per((t) => t.sandboxCalls).toFixed(2)} |`,
    );
  }
  lines.push(`| **JavaScript** (the rest) | **${(totalUs - sqlUs - sandboxUs).toFixed(1)}** | |`);
  lines.push(`| **total request** | **${totalUs.toFixed(1)}** | |`);
  if (rounds.some((t) => t.postingCalls > 0)) {
    lines.push(
      `| of the total, in Ledger.postTransaction | ${postingUs.toFixed(1)} | ${per((t) => t.postingCalls).toFixed(2)} |`,
    );
    lines.push(`| … its SQL | ${postingSqlUs.toFixed(1)} | |`);
    lines.push(`| … its JavaScript | ${(postingUs - postingSqlUs).toFixed(1)} | |`);
  }
  return lines.join('\n');
}

/** Run each side `rounds` times (interleaved) under the profiler and print a table per side. */
export async function profileSides(
  sides: Record<string, { request: (n: number) => void; engine?: Engine }>,
  perRound: number,
  rounds: number,
): Promise<void> {
  const profiler = await installProfiler();
  const names = Object.keys(sides);
  for (const name of names) if (sides[name]!.engine) profiler.watchPostings(sides[name]!.engine!);
  const results: Record<string, PhaseTotals[]> = Object.fromEntries(names.map((n) => [n, []]));
  names.forEach((name, i) =>
    profiler.measure(Math.min(500, perRound), 50_000_000 + i * 1_000_000, sides[name]!.request),
  ); // warm-up
  for (let round = 0; round < rounds; round++) {
    names.forEach((name, i) => {
      settle();
      results[name]!.push(profiler.measure(perRound, (i + 1) * 10_000_000 + round * perRound, sides[name]!.request));
    });
  }
  for (const name of names) console.log(`\n${profileTable(name, results[name]!)}`);
}

/**
 * The SQL under an engine posting: the statements a TRANSFER posting runs (the engine's own prepared
 * statements, on its own database), with every value computed ahead — no GraphQL, CEL, policy or
 * ledger logic. With `sets` (the bench's layout: each account in one of ten sets below TOP_SET) it
 * also runs what sets, the overdraft control and the GLOBAL calculation on the entry's layer write:
 * three set balance upserts, the entries' links into the sets' chains, five calculation balance upserts (the control
 * reads only what the posting just wrote). What an engine posting costs beyond this is JavaScript.
 */
export function sqlFloorPoster(
  engine: Engine,
  options: { sets: boolean; topSet: string; setOf: (account: string) => string; calculationId: string },
) {
  const { db } = engine;
  const { st, calc } = engine.ledger.deps;
  const journal = (
    db.prepare('SELECT journal_id FROM journals WHERE journal_id = ?').get('00000000-0000-0000-0000-000000000000') as {
      journal_id: string;
    }
  ).journal_id;
  const tranCode = (
    db.prepare("SELECT tran_code_id FROM tran_codes WHERE code = 'TRANSFER'").get() as { tran_code_id: string }
  ).tran_code_id;
  let seq = (db.prepare('SELECT max(seq) AS s FROM entries').get() as { s: number | null }).s ?? 0;
  const begin = db.prepare('BEGIN IMMEDIATE');
  const commit = db.prepare('COMMIT');
  // Each set's newest entry, as the engine keeps it in the balance record.
  const heads = new Map<string, number | null>();
  return (n: number) => {
    const [from, to] = pair(n);
    const amount = `${10 + (n % 5000)}.${n % 100}`;
    const transactionId = uuid(60_000_000 + n);
    const now = new Date().toISOString();
    const entries = [
      {
        account: from,
        entryId: uuid(70_000_000 + 2 * n),
        column: 'settled_dr' as const,
        direction: 'DEBIT',
        seq: seq + 1,
      },
      {
        account: to,
        entryId: uuid(70_000_001 + 2 * n),
        column: 'settled_cr' as const,
        direction: 'CREDIT',
        seq: seq + 2,
      },
    ];
    begin.run();
    st.fingerprintOfTransaction.get(transactionId);
    st.insertTransaction.run(
      transactionId,
      tranCode,
      1,
      journal,
      null,
      null,
      now.slice(0, 10),
      null,
      null,
      null,
      'f'.repeat(64),
      seq + 1,
      2,
      now,
      now,
    );
    const afters = entries.map(
      (e) =>
        st.posting
          .updateColumns(1 << (e.column === 'settled_dr' ? 0 : 1))
          .get([amount, e.entryId, now, e.seq, 1, e.account, journal, 'USD'])!,
    );
    const setAfter = new Map<string, { version: number; after: string; log_prev?: number | null }>();
    if (options.sets) {
      const sets = new Map<string, { mask: number; amounts: string[]; entryId: string; seq: number; rows: number }>();
      for (const e of entries) {
        for (const s of [options.setOf(e.account), options.topSet]) {
          const sum = sets.get(s) ?? { mask: 0, amounts: [], entryId: e.entryId, seq: e.seq, rows: 0 };
          sum.mask |= 1 << (e.column === 'settled_dr' ? 0 : 1);
          sum.amounts.push(amount);
          sum.entryId = e.entryId;
          sum.seq = e.seq;
          sum.rows++;
          sets.set(s, sum);
        }
      }
      for (const [s, v] of [...sets].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
        setAfter.set(
          s,
          st.posting.updateColumns(v.mask).get([...v.amounts, v.entryId, now, v.seq, v.rows, s, journal, 'USD'])!,
        );
      }
    }
    // Each entry links, per set above it, to the set record's previous entry (entries.set_links).
    const links = entries.map((e) => {
      if (!options.sets) return null;
      const parts = [options.setOf(e.account), options.topSet].map((s) => {
        const after = setAfter.get(s)!;
        const link = `${JSON.stringify(s)}:[${heads.has(s) ? heads.get(s)! : (after.log_prev ?? null)},${after.version},${JSON.stringify(after.after)}]`;
        heads.set(s, e.seq);
        return link;
      });
      return `{${parts.join(',')}}`;
    });
    st.insertEntries(entries.length).run(
      entries.flatMap((e, i) => [
        e.seq,
        e.entryId,
        transactionId,
        e.account,
        journal,
        i + 1,
        'TRANSFER_DR',
        'SETTLED',
        e.direction,
        amount,
        'USD',
        null,
        null,
        now,
        options.sets ? JSON.stringify([options.setOf(e.account), options.topSet]) : null,
        afters[i]!.version,
        afters[i]!.after,
        links[i]!,
        afters[i]!.log_prev ?? null,
      ]),
    );
    if (options.sets) {
      const owners = new Map<string, { mask: number; amounts: string[]; entryId: string }>();
      for (const e of entries) {
        for (const owner of [e.account, options.setOf(e.account), options.topSet]) {
          const sum = owners.get(owner) ?? { mask: 0, amounts: [], entryId: e.entryId };
          sum.mask |= 1 << (e.column === 'settled_dr' ? 0 : 1);
          sum.amounts.push(amount);
          sum.entryId = e.entryId;
          owners.set(owner, sum);
        }
      }
      for (const [owner, v] of owners) {
        const { changes } = calc
          .updateColumns(v.mask)
          .run([...v.amounts, v.entryId, now, options.calculationId, owner, journal, 'USD', '"SETTLED"\u0001', '']);
        if (changes !== 1)
          throw new Error(`no calculation balance of ${owner} to add to: post through the engine first`);
      }
    }
    commit.run();
    seq += 2;
  };
}

/** The ledger features bench:ledger measures one on top of the other (see addLedgerFeatures). */
export type LedgerFeature = 'sets' | 'control' | 'calc' | 'effective';
export const TOP_SET = uuid(3_000_000);
export const CALCULATION_ID = uuid(3_200_000);
/** The set below TOP_SET that an account of the bench is in (sets). */
export const setOfAccount = (account: string) => uuid(3_000_001 + ((Number(account.slice(-12)) - 1) % 10));

/**
 * sets: every account in one of 10 account sets, the 10 in TOP_SET (a posting rolls up into 4 set
 * balances); control: an overdraft guard (REJECT, SETTLED, DEBIT side ≤ inf) attached to TOP_SET;
 * calc: a GLOBAL calculation with one dimension (the entry's layer); effective: the same
 * calculation with effective-date balances (YYYY, YYYY_MM, YYYY_MM_DD children).
 */
export function addLedgerFeatures(e: Engine, features: readonly LedgerFeature[]): void {
  if (features.includes('sets')) {
    ok(e, `mutation { createAccountSet(input: {accountSetId: "${TOP_SET}", name: "all wallets"}) { accountSetId } }`);
    for (let s = 0; s < 10; s++) {
      ok(
        e,
        `mutation { createAccountSet(input: {accountSetId: "${uuid(3_000_001 + s)}", name: "wallets ${s}", accountSetIds: ["${TOP_SET}"]}) { accountSetId } }`,
      );
    }
    for (let i = 0; i < ACCOUNTS; i++) {
      ok(
        e,
        `mutation { addToAccountSet(id: "${setOfAccount(uuid(i + 1))}", member: {memberType: ACCOUNT, memberId: "${uuid(i + 1)}"}) { accountSetId } }`,
      );
    }
  }
  if (features.includes('control')) {
    ok(
      e,
      `mutation {
      createVelocityLimit(input: {velocityLimitId: "${uuid(3_100_000)}", name: "overdraft", limit: {balance: [{layer: "SETTLED", amount: "params.amount", normalBalanceType: "DEBIT"}]},
        params: [{name: "amount", type: DECIMAL, default: "0"}]}) { velocityLimitId }
      createVelocityControl(input: {velocityControlId: "${uuid(3_100_001)}", name: "no overdraft", enforcement: {action: REJECT}, velocityLimitIds: ["${uuid(3_100_000)}"]}) { velocityControlId }
      attachVelocityControl(velocityControlId: "${uuid(3_100_001)}", accountId: "${TOP_SET}", params: {amount: "inf"}) { accountId } }`,
    );
  }
  if (features.includes('calc') || features.includes('effective')) {
    ok(
      e,
      `mutation { createCalculation(input: {calculationId: "${CALCULATION_ID}", code: "BY_LAYER", description: "by layer",
      dimensions: [{alias: "layer", value: "context.vars.entry.layer"}], config: {enableEffectiveBalances: ${features.includes('effective')}}}) { calculationId } }`,
    );
  }
}
