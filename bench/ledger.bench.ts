/**
 * npm run bench:ledger
 *
 * postTransaction through engine.graphql (one post per request, one SQLite transaction each) beside
 * the same 2-entry posting written with plain better-sqlite3 statements, interleaved rounds in one
 * run. Then balance reads after 10 and after 100,000 entries on the account.
 *
 * The ledger's features are measured one on top of the other, each on its own database:
 *   sets         every account in one of 10 account sets, the 10 in one top set (each posting
 *                rolls up into 4 set balances besides its 2 accounts);
 *   + control    an overdraft guard (REJECT, SETTLED, DEBIT side ≤ inf) attached to the top set;
 *   + calc       a GLOBAL calculation with one dimension (the entry's layer);
 *   + effective  the same calculation with effective-date balances (YYYY, YYYY_MM, YYYY_MM_DD children).
 * BENCH_FEATURES=0 measures only the plain engine; BENCH_FEATURES=calc only it and the engine with
 * sets, the control and the calculation (every engine in the process slows the others' rounds a
 * little: its heap, its checkpointer; this is the fair side to set beside an older commit's run).
 * BENCH_FEATURES=alone: the engine with sets, the control and the calculation is the only engine in
 * the process (beside the raw paths), shaped like an older commit's plain bench:ledger run, for
 * setting the two side by side as separate processes.
 * BENCH_FEATURES=floor: those two beside the SQL alone of their postings (sqlFloorPoster: the same
 * statements with every value computed ahead), so what each costs in JavaScript is their difference.
 *
 * --profile (npm run bench:ledger -- --profile): instead, µs per request in each kind of SQL
 * statement (BEGIN, COMMIT, each INSERT/UPDATE/SELECT by table), SQL in all, the JavaScript left,
 * and the time inside Ledger.postTransaction, for each engine side (see installProfiler).
 */
import { join } from 'node:path';
import type { Engine } from '../src/engine.js';
import {
  ACCOUNTS,
  addLedgerFeatures,
  benchDir,
  CALCULATION_ID,
  compare,
  type LedgerFeature,
  median,
  ok,
  pair,
  POST,
  PROFILE,
  profileSides,
  rawOnTallySchema,
  rawPoster,
  setOfAccount,
  setupEngine,
  sqlFloorPoster,
  table,
  TOP_SET,
  uuid,
} from './common.js';

const PER_ROUND = Number(process.env.BENCH_POSTS ?? (PROFILE ? 2000 : 5000));
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
const ALONE = process.env.BENCH_FEATURES === 'alone';
const engine = await setupEngine(join(dir, 'engine.db'));
if (ALONE) addLedgerFeatures(engine, ['sets', 'control', 'calc']);
const poster = (e: Engine) => (n: number) => {
  const [from, to] = pair(n);
  ok(e, POST, {
    input: {
      transactionId: uuid(n),
      tranCode: 'TRANSFER',
      params: { from, to, amount: `${10 + (n % 5000)}.${n % 100}` },
    },
  });
};

async function featureEngine(name: string, features: readonly LedgerFeature[]): Promise<Engine> {
  const e = await setupEngine(join(dir, `${name}.db`));
  addLedgerFeatures(e, features);
  return e;
}
const FEATURES = process.env.BENCH_FEATURES !== '0' && !ALONE;
const ALL = FEATURES && process.env.BENCH_FEATURES !== 'calc' && process.env.BENCH_FEATURES !== 'floor';
const FLOOR = process.env.BENCH_FEATURES === 'floor';
const withSets = ALL ? await featureEngine('sets', ['sets']) : null;
const withControl = ALL ? await featureEngine('control', ['sets', 'control']) : null;
const withCalc = FEATURES ? await featureEngine('calc', ['sets', 'control', 'calc']) : null;
const withEffective = ALL ? await featureEngine('effective', ['sets', 'control', 'effective']) : null;
// BENCH_FEATURES=floor: beside the two engines, the SQL alone of their postings (sqlFloorPoster) on
// two more databases set up the same way, each first posted to through the engine so every balance
// and calculation record exists.
async function floorEngine(name: string, features: readonly LedgerFeature[]): Promise<Engine> {
  const e = features.length ? await featureEngine(name, features) : await setupEngine(join(dir, `${name}.db`));
  for (let n = 0; n < 2 * ACCOUNTS; n++) poster(e)(80_000_000 + n);
  return e;
}
const floorPlain = FLOOR ? await floorEngine('floor-plain', []) : null;
const floorCalc = FLOOR ? await floorEngine('floor-calc', ['sets', 'control', 'calc']) : null;
const floorOptions = { topSet: TOP_SET, setOf: setOfAccount, calculationId: CALCULATION_ID };
if (PROFILE) {
  await profileSides(
    {
      "raw statements on Tally's schema": { request: rawTally.post },
      'engine.graphql postTransaction': { request: poster(engine), engine },
      ...(ALL
        ? {
            '… + sets (4 set balances per posting)': { request: poster(withSets!), engine: withSets! },
            '… + a REJECT overdraft control': { request: poster(withControl!), engine: withControl! },
          }
        : {}),
      ...(FEATURES ? { '… + a GLOBAL calculation': { request: poster(withCalc!), engine: withCalc! } } : {}),
      ...(ALL
        ? { '… + effective-date balances instead': { request: poster(withEffective!), engine: withEffective! } }
        : {}),
    },
    PER_ROUND,
    ROUNDS,
  );
  for (const e of [engine, withSets, withControl, withCalc, withEffective]) e?.close();
  for (const r of [raw, rawCheckpointed, rawTally]) r.close();
  cleanup();
  process.exit(0);
}
const results = compare(
  {
    raw: raw.post,
    rawCheckpointed: rawCheckpointed.post,
    rawTally: rawTally.post,
    engine: poster(engine),
    ...(ALL ? { sets: poster(withSets!), control: poster(withControl!), effective: poster(withEffective!) } : {}),
    ...(FEATURES ? { calc: poster(withCalc!) } : {}),
    ...(FLOOR
      ? {
          sqlPlain: sqlFloorPoster(floorPlain!, { ...floorOptions, sets: false }),
          sqlCalc: sqlFloorPoster(floorCalc!, { ...floorOptions, sets: true }),
        }
      : {}),
  },
  PER_ROUND,
  ROUNDS,
);

// Balance reads: an account with 10 entries vs one with 100,000.
const [few, many, other] = [uuid(2_000_001), uuid(2_000_002), uuid(2_000_003)];
for (const [accountId, code] of [
  [few, 'FEW'],
  [many, 'MANY'],
  [other, 'OTHER'],
] as const) {
  ok(engine, 'mutation($i: AccountInput!) { createAccount(input: $i) { code } }', {
    i: { accountId, code, name: code },
  });
}
const bulk = (account: string, count: number, base: number) => {
  engine.db
    .transaction(() => {
      for (let i = 0; i < count; i++)
        engine.ledger.postTransaction({
          transactionId: uuid(base + i),
          tranCode: 'TRANSFER',
          params: { from: other, to: account, amount: '1.01' },
        });
    })
    .immediate();
};
bulk(few, 10, 90_000_000);
for (let chunk = 0; chunk < 100; chunk++) bulk(many, 1000, 91_000_000 + chunk * 1000);
const fewMicros = balanceReadMicros(engine, few);
const manyMicros = balanceReadMicros(engine, many);
// A set's rolled-up balance is read the same way: one primary-key read, whatever its members posted.
const setMicros = (withSets ?? withCalc) ? balanceReadMicros((withSets ?? withCalc)!, TOP_SET) : null;

console.log(
  `\n${table(
    [
      [
        'raw better-sqlite3 (txn + 2 entries + 2 balance upserts, 1 per commit)',
        results.raw!.median,
        results.raw!.cpuUs,
      ],
      [
        "raw better-sqlite3 with the engine's checkpointing (background thread)",
        results.rawCheckpointed!.median,
        results.rawCheckpointed!.cpuUs,
      ],
      [
        "the same statements on Tally's schema (indexes, foreign keys, decimal strings)",
        results.rawTally!.median,
        results.rawTally!.cpuUs,
      ],
      [
        ALONE
          ? 'engine.graphql postTransaction with sets, a REJECT control and a GLOBAL calculation, the only engine'
          : 'engine.graphql postTransaction (1 per request)',
        results.engine!.median,
        results.engine!.cpuUs,
      ],
      ...(ALL
        ? ([
            [
              '… every account in a set, 10 sets in a top set (4 set balances per posting)',
              results.sets!.median,
              results.sets!.cpuUs,
            ],
            ['… + a REJECT overdraft control on the top set', results.control!.median, results.control!.cpuUs],
            ['… + a GLOBAL calculation with one dimension', results.calc!.median, results.calc!.cpuUs],
            [
              '… + effective-date balances on it instead (3 children)',
              results.effective!.median,
              results.effective!.cpuUs,
            ],
          ] as Array<[string, number, number]>)
        : FEATURES
          ? ([
              ['… with sets, a REJECT control and a GLOBAL calculation', results.calc!.median, results.calc!.cpuUs],
            ] as Array<[string, number, number]>)
          : []),
      ...(FLOOR
        ? ([
            [
              "the engine's own statements for the plain posting, values computed ahead (its SQL alone)",
              results.sqlPlain!.median,
              results.sqlPlain!.cpuUs,
            ],
            [
              '… for the posting with sets, the control and the calculation',
              results.sqlCalc!.median,
              results.sqlCalc!.cpuUs,
            ],
          ] as Array<[string, number, number]>)
        : []),
    ],
    results.raw!.median,
  )}`,
);
if (FEATURES && !ALL)
  console.log(
    `\nsets, control and calculation ÷ plain engine: ${(results.calc!.median / results.engine!.median).toFixed(2)}`,
  );
if (FLOOR) {
  const us = (name: string) => 1e6 / results[name]!.median;
  console.log(
    `wall µs per posting: SQL alone ${us('sqlPlain').toFixed(0)} (plain) and ${us('sqlCalc').toFixed(0)} (sets, control, calculation);` +
      ` the engine ${us('engine').toFixed(0)} and ${us('calc').toFixed(0)}, so JavaScript ${(us('engine') - us('sqlPlain')).toFixed(0)} and ${(us('calc') - us('sqlCalc')).toFixed(0)}`,
  );
}
if (ALL) {
  const cost = (name: string, slower: number, faster: number) =>
    `${name} ${(1e6 / slower - 1e6 / faster).toFixed(0)} µs`;
  console.log(`
wall µs each feature adds per posting: ${[
    cost('sets', results.sets!.median, results.engine!.median),
    cost('control', results.control!.median, results.sets!.median),
    cost('calculation', results.calc!.median, results.control!.median),
    cost('effective calculation', results.effective!.median, results.control!.median),
  ].join('; ')}`);
  console.log(
    `all features ÷ plain engine: ${(results.calc!.median / results.engine!.median).toFixed(2)} (calculation), ${(results.effective!.median / results.engine!.median).toFixed(2)} (effective)`,
  );
}
console.log(
  `\nengine ÷ raw with the engine's checkpointing: ${(results.engine!.median / results.rawCheckpointed!.median).toFixed(2)}`,
);
console.log(`engine ÷ raw on Tally's schema: ${(results.engine!.median / results.rawTally!.median).toFixed(2)}`);
console.log(
  `\nrounds: raw ${results.raw!.rounds.map((r) => r.toFixed(0)).join(', ')}; engine ${results.engine!.rounds.map((r) => r.toFixed(0)).join(', ')}`,
);
console.log(
  `\nbalance read through engine.graphql: ${fewMicros.toFixed(1)} µs after 10 entries, ${manyMicros.toFixed(1)} µs after 100,000 entries (ratio ${(manyMicros / fewMicros).toFixed(2)})`,
);
if (setMicros !== null)
  console.log(
    `top set's rolled-up balance (${(PER_ROUND * (ROUNDS + 1)).toLocaleString('en')}+ postings below it): ${setMicros.toFixed(1)} µs`,
  );
engine.close();
for (const e of [withSets, withControl, withCalc, withEffective, floorPlain, floorCalc]) e?.close();
raw.close();
rawCheckpointed.close();
rawTally.close();
cleanup();
