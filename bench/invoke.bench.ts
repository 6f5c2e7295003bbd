/**
 * npm run bench:invoke
 *
 * invokeAction of a `transfer` tool (its program makes one graphql postTransaction of 2 entries)
 * through engine.graphql, beside the raw better-sqlite3 posting and the plain postTransaction
 * mutation, interleaved rounds in one run. Each is one request, one SQLite transaction.
 *
 * --profile (npm run bench:invoke -- --profile): instead, µs per request in each kind of SQL
 * statement, SQL in all, the sandbox (Sandbox.run less its host calls), the JavaScript left, and
 * the time inside Ledger.postTransaction, for each side (see installProfiler).
 */
import { join } from 'node:path';
import {
  benchDir,
  compare,
  createTransferTool,
  ok,
  pair,
  POST,
  PROFILE,
  profileSides,
  rawPoster,
  setupEngine,
  table,
  uuid,
} from './common.js';

const PER_ROUND = Number(process.env.BENCH_POSTS ?? (PROFILE ? 1500 : 3000));
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);

const { dir, cleanup } = benchDir();
console.log(`node ${process.version}, ${PER_ROUND} calls x ${ROUNDS} interleaved rounds per side, files in ${dir}`);
const raw = rawPoster(join(dir, 'raw.db'));
const engine = await setupEngine(join(dir, 'engine.db'));
createTransferTool(engine, uuid(888_888));
// The nested variant: an outer tool that checks its input and calls transfer as tools.transfer().
ok(
  engine,
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
  {
    id: uuid(888_889),
    input: {
      name: 'pay',
      kind: 'tool',
      config: {
        runtime: 'javascript',
        src: 'function run(event) { if (decimal(event.data.amount).lte("0")) fail("amount must be positive"); return tools.transfer(event.data); }',
      },
      tools: [{ name: 'transfer', version: 1 }],
      policies: [
        { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
        {
          effect: 'ALLOW',
          actions: ['INSERT'],
          resources: ['actions.Execution'],
          assertions: { transfer: "context.document.action == 'transfer'" },
        },
      ],
    },
  },
);
// A tool that does nothing: what running any tool costs (sandbox call, input check, savepoint,
// execution record) without a nested operation.
ok(
  engine,
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
  {
    id: uuid(888_890),
    input: {
      name: 'noop',
      kind: 'tool',
      config: {
        runtime: 'javascript',
        src: 'function run(event) { return { transaction_id: event.data.transaction_id }; }',
      },
    },
  },
);
const INVOKE_NOOP = `mutation Invoke($e: UUID!, $input: JSON) { actions { invokeAction(id: "${uuid(888_890)}", input: {executionId: $e, actionVersion: 1, input: $input}) { status } } }`;
// The same two things side by side in one request, neither inside the other: a floor for any
// invoke whose tool posts, whatever the path from the program to the ledger costs.
const POST_AND_NOOP = `mutation Both($input: TransactionInput!, $e: UUID!, $tool: JSON) { postTransaction(input: $input) { transactionId }
  actions { invokeAction(id: "${uuid(888_890)}", input: {executionId: $e, actionVersion: 1, input: $tool}) { status } } }`;
const INVOKE_NESTED = `mutation Invoke($e: UUID!, $input: JSON) { actions { invokeAction(id: "${uuid(888_889)}", input: {executionId: $e, actionVersion: 1, input: $input}) { status } } }`;
const INVOKE = `mutation Invoke($e: UUID!, $input: JSON) { actions { invokeAction(id: "${uuid(888_888)}", input: {executionId: $e, actionVersion: 1, input: $input}) { status } } }`;

const sides: Record<string, (n: number) => void> = {
  raw: raw.post,
  postTransaction: (n) => {
    const [from, to] = pair(n);
    ok(engine, POST, {
      input: { transactionId: uuid(n), tranCode: 'TRANSFER', params: { from, to, amount: '10.50' } },
    });
  },
  invokeAction: (n) => {
    const [from, to] = pair(n);
    const r = ok(engine, INVOKE, {
      e: uuid(n),
      input: { transaction_id: uuid(500_000_000 + n), from, to, amount: '10.50' },
    });
    if (r.actions.invokeAction.status !== 'SUCCEEDED') throw new Error(JSON.stringify(r));
  },
  noop: (n) => {
    const r = ok(engine, INVOKE_NOOP, { e: uuid(n), input: { transaction_id: uuid(700_000_000 + n) } });
    if (r.actions.invokeAction.status !== 'SUCCEEDED') throw new Error(JSON.stringify(r));
  },
  postAndNoop: (n) => {
    const [from, to] = pair(n);
    const r = ok(engine, POST_AND_NOOP, {
      input: { transactionId: uuid(800_000_000 + n), tranCode: 'TRANSFER', params: { from, to, amount: '10.50' } },
      e: uuid(n),
      tool: { transaction_id: uuid(800_000_000 + n) },
    });
    if (r.actions.invokeAction.status !== 'SUCCEEDED') throw new Error(JSON.stringify(r));
  },
  nested: (n) => {
    const [from, to] = pair(n);
    const r = ok(engine, INVOKE_NESTED, {
      e: uuid(n),
      input: { transaction_id: uuid(600_000_000 + n), from, to, amount: '10.50' },
    });
    if (r.actions.invokeAction.status !== 'SUCCEEDED') throw new Error(JSON.stringify(r));
  },
};
if (PROFILE) {
  await profileSides(
    Object.fromEntries(
      Object.entries(sides).map(([name, request]) => [name, name === 'raw' ? { request } : { request, engine }]),
    ),
    PER_ROUND,
    ROUNDS,
  );
  engine.close();
  raw.close();
  cleanup();
  process.exit(0);
}
const results = compare(sides, PER_ROUND, ROUNDS);

console.log(
  `\n${table(
    [
      ['raw better-sqlite3 posting (1 per commit)', results.raw!.median, results.raw!.cpuUs],
      ['engine.graphql postTransaction', results.postTransaction!.median, results.postTransaction!.cpuUs],
      [
        'engine.graphql invokeAction(transfer) → graphql postTransaction',
        results.invokeAction!.median,
        results.invokeAction!.cpuUs,
      ],
      [
        'engine.graphql invokeAction(pay) → tools.transfer → graphql postTransaction',
        results.nested!.median,
        results.nested!.cpuUs,
      ],
      ['engine.graphql invokeAction(noop): a tool that only returns', results.noop!.median, results.noop!.cpuUs],
      [
        'engine.graphql postTransaction + invokeAction(noop) in one request (floor for a posting tool)',
        results.postAndNoop!.median,
        results.postAndNoop!.cpuUs,
      ],
    ],
    results.raw!.median,
  )}`,
);
for (const [name, r] of Object.entries(results))
  console.log(`rounds ${name}: ${r.rounds.map((x) => x.toFixed(0)).join(', ')}`);
engine.close();
raw.close();
cleanup();
