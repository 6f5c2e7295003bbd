/**
 * npm run bench:batch
 *
 * Group commit in process: `engine.executeBatch` of 64 postTransaction requests (one SQLite
 * transaction, a savepoint each, one COMMIT) beside the raw better-sqlite3 posting with one COMMIT
 * per posting (the anchor), the raw posting 64 per COMMIT (what the raw side would gain
 * from the same idea), and `engine.graphql` one request per COMMIT. Interleaved rounds in one
 * run, medians; CPU µs per posting beside the rate.
 */
import { join } from 'node:path';
import type { BatchRequest } from '../src/engine.js';
import { addLedgerFeatures, benchDir, compare, ok, pair, POST, rawPoster, setupEngine, table, uuid } from './common.js';

const PER_ROUND = Number(process.env.BENCH_POSTS ?? 6400);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const GROUP = Number(process.env.BENCH_GROUP ?? 64);

const { dir, cleanup } = benchDir();
console.log(
  `node ${process.version}, ${PER_ROUND} posts x ${ROUNDS} interleaved rounds per side, groups of ${GROUP}, files in ${dir}`,
);
const raw = rawPoster(join(dir, 'raw.db'));
const rawCheckpointed = rawPoster(join(dir, 'raw-checkpointed.db'), { checkpointed: true });
const rawGrouped = rawPoster(join(dir, 'raw-grouped.db'));
const single = await setupEngine(join(dir, 'single.db'));
const batched = await setupEngine(join(dir, 'batched.db'), {
  limits: { writeBatchMax: GROUP, writeBatchWaitMs: 1000 },
});
let groups = 0;
let grouped = 0;
batched.onBatch((size) => {
  groups++;
  grouped += size;
});
// BENCH_FEATURES=1: the same groups on an engine with sets, the overdraft control and the
// calculation of bench:ledger (addLedgerFeatures): group commit shares the pages of the set and
// calculation records many postings write among the postings of a group.
const withFeatures =
  process.env.BENCH_FEATURES === '1'
    ? await setupEngine(join(dir, 'features.db'), { limits: { writeBatchMax: GROUP, writeBatchWaitMs: 1000 } })
    : null;
if (withFeatures) addLedgerFeatures(withFeatures, ['sets', 'control', 'calc']);

const request = (n: number): BatchRequest => {
  const [from, to] = pair(n);
  return {
    request: {
      query: POST,
      variables: {
        input: {
          transactionId: uuid(n),
          tranCode: 'TRANSFER',
          params: { from, to, amount: `${10 + (n % 5000)}.${n % 100}` },
        },
      },
      operationName: null,
    },
  };
};

// Sides are called once per posting; the grouped ones buffer GROUP postings and run them together.
function groupedSide(run: (ns: number[]) => void): (n: number) => void {
  let buffer: number[] = [];
  return (n) => {
    buffer.push(n);
    if (buffer.length === GROUP) {
      run(buffer);
      buffer = [];
    }
  };
}
const results = compare(
  {
    raw: raw.post,
    rawCheckpointed: rawCheckpointed.post,
    rawGrouped: groupedSide((ns) => rawGrouped.postMany(ns)),
    single: (n) => ok(single, POST, request(n).request.variables!),
    batched: groupedSide((ns) => {
      for (const answer of batched.executeBatch(ns.map(request)))
        if (answer.errors) throw new Error(JSON.stringify(answer.errors));
    }),
    ...(withFeatures
      ? {
          features: groupedSide((ns) => {
            for (const answer of withFeatures.executeBatch(ns.map(request)))
              if (answer.errors) throw new Error(JSON.stringify(answer.errors));
          }),
        }
      : {}),
  },
  PER_ROUND,
  ROUNDS,
);
console.log(
  table(
    [
      ['raw better-sqlite3, 1 posting per COMMIT', results.raw!.median, results.raw!.cpuUs],
      [
        'raw, with the engine’s background checkpointing',
        results.rawCheckpointed!.median,
        results.rawCheckpointed!.cpuUs,
      ],
      [`raw, ${GROUP} postings per COMMIT`, results.rawGrouped!.median, results.rawGrouped!.cpuUs],
      ['engine.graphql postTransaction, 1 per COMMIT', results.single!.median, results.single!.cpuUs],
      [`engine.executeBatch of ${GROUP} postTransaction, 1 COMMIT`, results.batched!.median, results.batched!.cpuUs],
      ...(withFeatures
        ? ([
            [
              '… with sets, a REJECT control and a GLOBAL calculation',
              results.features!.median,
              results.features!.cpuUs,
            ],
          ] as Array<[string, number, number]>)
        : []),
    ],
    results.raw!.median,
  ),
);
console.log(
  `mean group size ${(grouped / Math.max(1, groups)).toFixed(1)}; executeBatch ÷ raw with the same checkpointing ${(results.batched!.median / results.rawCheckpointed!.median).toFixed(2)}`,
);
if (withFeatures)
  console.log(
    `in groups, sets, control and calculation ÷ plain: ${(results.features!.median / results.batched!.median).toFixed(2)}`,
  );
raw.close();
rawCheckpointed.close();
rawGrouped.close();
single.close();
batched.close();
withFeatures?.close();
cleanup();
