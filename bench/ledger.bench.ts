/**
 * npm run bench:ledger
 *
 * postTransaction through engine.graphql (one post per request, one SQLite transaction each) beside
 * the same 2-entry posting written with plain better-sqlite3 statements, interleaved rounds in one
 * run. Then balance reads after 10 and after 100,000 entries on the account.
 */
import { join } from 'node:path';
import type { Engine } from '../src/engine.js';
import { benchDir, compare, median, ok, pair, POST, rawOnTallySchema, rawPoster, setupEngine, table, uuid } from './common.js';

const PER_ROUND = Number(process.env.BENCH_POSTS ?? 5000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);

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

const { dir, cleanup } = benchDir();
console.log(`node ${process.version}, ${PER_ROUND} posts x ${ROUNDS} interleaved rounds per side, files in ${dir}`);
const raw = rawPoster(join(dir, 'raw.db'));
const rawCheckpointed = rawPoster(join(dir, 'raw-checkpointed.db'), { checkpointed: true });
const rawTally = rawOnTallySchema(join(dir, 'raw-tally.db'));
const engine = await setupEngine(join(dir, 'engine.db'));
const results = compare(
  {
    raw: raw.post,
    rawCheckpointed: rawCheckpointed.post,
    rawTally: rawTally.post,
    engine: (n) => {
      const [from, to] = pair(n);
      ok(engine, POST, { input: { transactionId: uuid(n), tranCode: 'TRANSFER', params: { from, to, amount: `${10 + (n % 5000)}.${n % 100}` } } });
    },
  },
  PER_ROUND,
  ROUNDS,
);

// Balance reads: an account with 10 entries vs one with 100,000.
const [few, many, other] = [uuid(2_000_001), uuid(2_000_002), uuid(2_000_003)];
for (const [accountId, code] of [[few, 'FEW'], [many, 'MANY'], [other, 'OTHER']] as const) {
  ok(engine, 'mutation($i: AccountInput!) { createAccount(input: $i) { code } }', { i: { accountId, code, name: code } });
}
const bulk = (account: string, count: number, base: number) => {
  engine.db.transaction(() => {
    for (let i = 0; i < count; i++) engine.ledger.postTransaction({ transactionId: uuid(base + i), tranCode: 'TRANSFER', params: { from: other, to: account, amount: '1.01' } });
  }).immediate();
};
bulk(few, 10, 90_000_000);
for (let chunk = 0; chunk < 100; chunk++) bulk(many, 1000, 91_000_000 + chunk * 1000);
const fewMicros = balanceReadMicros(engine, few);
const manyMicros = balanceReadMicros(engine, many);

console.log(`\n${table([
  ['raw better-sqlite3 (txn + 2 entries + 2 balance upserts, 1 per commit)', results.raw!.median, results.raw!.cpuUs],
  ["raw better-sqlite3 with the engine's checkpointing (background thread)", results.rawCheckpointed!.median, results.rawCheckpointed!.cpuUs],
  ["the same statements on Tally's schema (indexes, foreign keys, decimal strings)", results.rawTally!.median, results.rawTally!.cpuUs],
  ['engine.graphql postTransaction (1 per request)', results.engine!.median, results.engine!.cpuUs],
], results.raw!.median)}`);
console.log(`\nengine ÷ raw with the engine's checkpointing: ${(results.engine!.median / results.rawCheckpointed!.median).toFixed(2)}`);
console.log(`engine ÷ raw on Tally's schema: ${(results.engine!.median / results.rawTally!.median).toFixed(2)}`);
console.log(`\nrounds: raw ${results.raw!.rounds.map((r) => r.toFixed(0)).join(', ')}; engine ${results.engine!.rounds.map((r) => r.toFixed(0)).join(', ')}`);
console.log(`\nbalance read through engine.graphql: ${fewMicros.toFixed(1)} µs after 10 entries, ${manyMicros.toFixed(1)} µs after 100,000 entries (ratio ${(manyMicros / fewMicros).toFixed(2)})`);
engine.close();
raw.close();
rawCheckpointed.close();
rawTally.close();
cleanup();
