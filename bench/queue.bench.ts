/**
 * npm run bench:queue
 *
 * 1. Drain rate: N executions of a tool that posts one transaction are started (committed), then
 *    one worker drains them; each attempt is its own SQLite transaction with its status update.
 * 2. Start-to-run delay: with an in-process worker woken by each start (as in `tally serve`),
 *    executions are started one request at a time; the delay is invocation.started − created.
 */
import { join } from 'node:path';
import { benchDir, ok, pair, setupEngine, uuid } from './common.js';

const N = Number(process.env.BENCH_EXECUTIONS ?? 3000);
const { dir, cleanup } = benchDir();
const engine = await setupEngine(join(dir, 'queue.db'));
ok(
  engine,
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
  {
    id: uuid(777_777),
    input: {
      name: 'transfer',
      kind: 'tool',
      config: {
        runtime: 'javascript',
        src: `function run(event) {
  const d = event.data;
  graphql("mutation Post($input: TransactionInput!) { postTransaction(input: $input) { transactionId } }",
    { input: { transactionId: d.tx, tranCode: "TRANSFER", params: { from: d.from, to: d.to, amount: "1.00" } } });
  return { ok: true };
}`,
      },
      policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }],
    },
  },
);
const START = `mutation Start($e: UUID!, $input: JSON) { actions { startAction(id: "${uuid(777_777)}", input: {executionId: $e, input: $input}) { status } } }`;
const start = (n: number) => {
  const [from, to] = pair(n);
  ok(engine, START, { e: uuid(n), input: { tx: uuid(400_000_000 + n), from, to } });
};

// 1. Drain rate.
for (let i = 0; i < N; i++) start(i);
const worker = engine.createWorker({ owner: 'bench' });
const t0 = process.hrtime.bigint();
const drained = worker.drain();
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
if (drained !== N) throw new Error(`drained ${drained} of ${N}`);

// 2. Start-to-run delay with a woken in-process worker.
const live = engine.createWorker({ owner: 'live', pollMs: 1000 });
engine.onStarted(() => live.wake());
live.start();
const M = 500;
for (let i = 0; i < M; i++) {
  start(10_000_000 + i);
  await new Promise((resolve) => setTimeout(resolve, 2));
}
await new Promise((resolve) => setTimeout(resolve, 500));
await live.stop();
const delays = (
  engine.db
    .prepare(`SELECT (julianday(i.started) - julianday(e.created)) * 86400000.0 AS ms FROM executions e JOIN invocations i ON i.execution_id = e.execution_id
            WHERE e.execution_id >= ? AND e.parent_id IS NULL ORDER BY ms`)
    .all(uuid(10_000_000)) as Array<{ ms: number }>
).map((r) => r.ms);
const pct = (p: number) => delays[Math.min(delays.length - 1, Math.floor(p * delays.length))]!.toFixed(1);

console.log(`node ${process.version}, files in ${dir}`);
console.log(`\n| measure | value |\n|---|---:|`);
console.log(`| executions drained per second, one worker (each posts 1 transaction) | ${(N / seconds).toFixed(0)} |`);
console.log(
  `| start → run delay, in-process worker woken on commit: p50 / p90 / p99 (ms, ${delays.length} runs) | ${pct(0.5)} / ${pct(0.9)} / ${pct(0.99)} |`,
);
engine.close();
cleanup();
