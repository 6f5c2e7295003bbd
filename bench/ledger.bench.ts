/**
 * npm run bench:ledger
 *
 * postTransaction throughput through engine.graphql (one post per request, one SQLite transaction
 * each) beside the same 2-entry posting written with plain better-sqlite3 statements, in one run,
 * on files in the same folder with the same pragmas. Then balance reads after 10 and after 100,000
 * entries on the account. Rounds alternate between the two sides so machine noise hits both.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createEngine, type Engine } from '../src/engine.js';

const POSTS_PER_ROUND = Number(process.env.BENCH_POSTS ?? 5000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const ACCOUNTS = 1000;

const dir = mkdtempSync(join(tmpdir(), 'tally-bench-'));
const uuid = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

// --- raw better-sqlite3: txn + 2 entries + 2 balance upserts, integer minor units --------------
function rawPoster() {
  const db = new Database(join(dir, 'raw.db'));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
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
  return { post: (n: number, from: string, to: string, units: number) => post.immediate(n, from, to, units), db };
}

// --- the engine, through GraphQL ----------------------------------------------------------------
const POST = `mutation Post($input: TransactionInput!) { postTransaction(input: $input) { transactionId } }`;

async function setupEngine(path: string): Promise<Engine> {
  const engine = await createEngine({ path });
  const accounts = Array.from({ length: ACCOUNTS }, (_, i) => ({ accountId: uuid(i + 1), code: `A${i + 1}`, name: `Account ${i + 1}` }));
  for (const input of accounts) engine.graphql('mutation($i: AccountInput!) { createAccount(input: $i) { code } }', { i: input });
  const result = engine.graphql(
    `mutation { createTranCode(input: {tranCodeId: "${uuid(999_999)}", code: "TRANSFER",
      params: [{name: "from", type: UUID}, {name: "to", type: UUID}, {name: "amount", type: DECIMAL}],
      transaction: {effective: "date.Today()"},
      entries: [{accountId: "params.from", units: "params.amount", currency: "'USD'", direction: "DEBIT", layer: "SETTLED"},
                {accountId: "params.to", units: "params.amount", currency: "'USD'", direction: "CREDIT", layer: "SETTLED"}]}) { code } }`,
  );
  if (result.errors) throw new Error(JSON.stringify(result.errors));
  return engine;
}

function pair(n: number): [string, string] {
  const a = (n * 7919) % ACCOUNTS;
  const b = (a + 1 + (n % (ACCOUNTS - 1))) % ACCOUNTS;
  return [uuid(a + 1), uuid(b + 1)];
}

function timeRaw(raw: ReturnType<typeof rawPoster>, start: number): number {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < POSTS_PER_ROUND; i++) {
    const [from, to] = pair(start + i);
    raw.post(start + i, from, to, 1000 + (i % 5000));
  }
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

function timeEngine(engine: Engine, start: number): number {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < POSTS_PER_ROUND; i++) {
    const [from, to] = pair(start + i);
    const r = engine.graphql(POST, { input: { transactionId: uuid(start + i), tranCode: 'TRANSFER', params: { from, to, amount: `${10 + (i % 5000)}.${i % 100}` } } });
    if (r.errors) throw new Error(JSON.stringify(r.errors));
  }
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

function balanceReadMicros(engine: Engine, accountId: string, reads = 3000): number {
  const q = `query B($a: UUID!) { balance(accountId: $a, currency: "USD") { settled { normalBalance { units } } available(layer: PENDING) { normalBalance { units } } } }`;
  for (let i = 0; i < 200; i++) engine.graphql(q, { a: accountId });
  const samples: number[] = [];
  for (let round = 0; round < 5; round++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < reads; i++) engine.graphql(q, { a: accountId });
    samples.push(Number(process.hrtime.bigint() - t0) / 1e3 / reads);
  }
  return median(samples);
}

async function main(): Promise<void> {
  console.log(`node ${process.version}, ${POSTS_PER_ROUND} posts x ${ROUNDS} rounds per side, ${ACCOUNTS} accounts, files in ${dir}`);
  const raw = rawPoster();
  const engine = await setupEngine(join(dir, 'engine.db'));
  // warm-up
  timeRaw(raw, 10_000_000);
  timeEngine(engine, 10_000_000);
  const rawRates: number[] = [];
  const engineRates: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    rawRates.push(POSTS_PER_ROUND / timeRaw(raw, round * POSTS_PER_ROUND));
    engineRates.push(POSTS_PER_ROUND / timeEngine(engine, round * POSTS_PER_ROUND));
  }
  const rawRate = median(rawRates);
  const engineRate = median(engineRates);

  // Balance reads: an account with 10 entries vs one with 100,000.
  const few = uuid(2_000_001);
  const many = uuid(2_000_002);
  const other = uuid(2_000_003);
  for (const [accountId, code] of [[few, 'FEW'], [many, 'MANY'], [other, 'OTHER']]) {
    engine.graphql('mutation($i: AccountInput!) { createAccount(input: $i) { code } }', { i: { accountId, code, name: code } });
  }
  const bulk = (account: string, count: number, base: number) => {
    engine.db.transaction(() => {
      for (let i = 0; i < count; i++) {
        engine.ledger.postTransaction({ transactionId: uuid(base + i), tranCode: 'TRANSFER', params: { from: other, to: account, amount: '1.01' } });
      }
    }).immediate();
  };
  bulk(few, 10, 3_000_000);
  for (let chunk = 0; chunk < 100; chunk++) bulk(many, 1000, 4_000_000 + chunk * 1000);
  const fewMicros = balanceReadMicros(engine, few);
  const manyMicros = balanceReadMicros(engine, many);

  const rows = [
    ['raw better-sqlite3 (txn + 2 entries + 2 balance upserts, 1 per commit)', rawRate.toFixed(0), '1.00'],
    ['engine.graphql postTransaction (1 per request)', engineRate.toFixed(0), (engineRate / rawRate).toFixed(2)],
  ];
  console.log('\n| path | posts/s | × raw |\n|---|---:|---:|');
  for (const r of rows) console.log(`| ${r.join(' | ')} |`);
  console.log(`\nrounds: raw ${rawRates.map((r) => r.toFixed(0)).join(', ')}; engine ${engineRates.map((r) => r.toFixed(0)).join(', ')}`);
  console.log(`\nbalance read through engine.graphql: ${fewMicros.toFixed(1)} µs after 10 entries, ${manyMicros.toFixed(1)} µs after 100,000 entries (ratio ${(manyMicros / fewMicros).toFixed(2)})`);
  engine.close();
  raw.db.close();
  rmSync(dir, { recursive: true, force: true });
}

await main();
