/**
 * npm run bench:http                  (the served path)
 * npm run bench:http -- --peer        (or BENCH_PEER=1: the figures to set beside reviews/peer.md)
 *
 * autocannon, as a library in this process, against `tally serve` and against a minimal node:http
 * server doing bench/common.ts's raw posting (bench/http-raw-server.ts), each server its own child
 * process. Every point runs both sides one after the other (the order flips every round), so
 * machine noise hits both alike; each figure is the median of the interleaved rounds, and Tally ÷
 * raw is the median of the rounds' own ratios. The raw server is the anchor for both operations:
 *
 *   post     postTransaction of the TRANSFER tran code (bench/common.ts), 1 per request;
 *   invoke   invokeAction of the `transfer` tool (bench/invoke.bench.ts), whose program posts the
 *            same transfer through graphql().
 *
 * Every request carries a fresh transactionId (and executionId) and a random distinct pair of the
 * 1,000 accounts, amounts random from 0.01 to 1000.00; the raw server gets the same bytes. A
 * response that is not 2xx, or whose body carries GraphQL "errors" (or, for invoke, is not
 * SUCCEEDED), is a failure: every one is counted and a run with any says so and exits 1.
 *
 * Per point: requests/s (answered, per second of autocannon's window); p50/p99 latency (ms,
 * autocannon's own per-response time, kept unrounded: its histogram has 1 ms buckets); the
 * server's CPU per request from /proc/<pid>/stat (utime + stime of all its threads: the
 * checkpointer's included) and of its main thread alone (/proc/<pid>/task/<pid>/stat), read before
 * the point and 200 ms after it (the requests still in flight at its end are served, the
 * checkpoint it caused runs), divided by the requests the server says it ran meanwhile (Tally: Δ
 * `tally_graphql_requests_total` of mutations on /metrics; raw: its GET count); and Tally's mean
 * write batch, Δ`tally_write_batch_requests_total` ÷ Δ`tally_write_batches_total` (n/a while the
 * server has no such counters).
 *
 * Then the read-latency scenario (Tally only; BENCH_READ=0 skips it): 32 connections posting, one
 * loop invoking a tool `slow` that spins until its deadline (each call fails TIMEOUT, as it
 * should; any other end is a failure), and one sequential reader of a balance, each read timed.
 * The shipped limits cap a tool's deadline at 750 ms (toolTimeoutMsMax, requestDeadlineMs): for a
 * longer one in BENCH_SLOW_MS, that scenario's server is given a TALLY_CONFIG raising those two
 * limits, nothing else. The reader and autocannon share this process's event loop: a read's time
 * includes this process's own delays (small beside the figures it measures).
 *
 * Settings (environment): BENCH_CLIENTS (default 1,8,64), BENCH_SECONDS per point (5), BENCH_ROUNDS
 * (3), BENCH_DURABILITY normal|full (normal; full: `tally serve --durability full` and the raw
 * server's connection `synchronous = FULL`), BENCH_READ (1), BENCH_SLOW_MS (750,2000: one read
 * scenario per deadline), BENCH_PEER (0; 8 and 32 clients, postTransaction only, 15 s windows
 * after a 2 s warm-up, BENCH_ROUNDS rounds).
 *
 * The machine is 2 shared cores and autocannon runs on them too: read the ratios, not the absolute
 * figures, and the load average printed at each round's start.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomInt, randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import { closeSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ACCOUNTS,
  benchProcesses,
  createTransferTool,
  isRunning,
  median,
  POST,
  setupEngine,
  stopChild,
  uuid,
} from './common.js';

// ---------------------------------------------------------------------------------------------
// autocannon: the few parts of its API used here (it ships no types; @types/autocannon is for 7.x).

interface AutocannonRequest {
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  body?: string;
  setupRequest?: (request: AutocannonRequest, context: object) => AutocannonRequest;
}
interface AutocannonOptions {
  url: string;
  connections: number;
  duration: number;
  method?: string;
  headers?: Record<string, string>;
  requests?: AutocannonRequest[];
  verifyBody?: (body: string) => boolean;
}
interface AutocannonResult {
  duration: number;
  errors: number;
  timeouts: number;
  mismatches: number;
  non2xx: number;
  '2xx': number;
  statusCodeStats: Record<string, { count: number }>;
}
type AutocannonInstance = EventEmitter & PromiseLike<AutocannonResult>;
const autocannon = createRequire(import.meta.url)('autocannon') as (options: AutocannonOptions) => AutocannonInstance;

// ---------------------------------------------------------------------------------------------
// Settings

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PEER = process.argv.includes('--peer') || process.env.BENCH_PEER === '1';
const CLIENTS = PEER ? [8, 32] : (process.env.BENCH_CLIENTS ?? '1,8,64').split(',').map(Number);
const SECONDS = PEER ? 15 : Number(process.env.BENCH_SECONDS ?? 5);
const WARMUP_SECONDS = PEER ? 2 : 1;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const DURABILITY = process.env.BENCH_DURABILITY ?? 'normal';
const READ = !PEER && process.env.BENCH_READ !== '0';
const SLOW_MS = (process.env.BENCH_SLOW_MS ?? '750,2000').split(',').map(Number);
const READ_CLIENTS = 32;
if (DURABILITY !== 'normal' && DURABILITY !== 'full')
  throw new Error(`BENCH_DURABILITY must be normal or full, got ${JSON.stringify(DURABILITY)}`);
if (CLIENTS.some((c) => !Number.isInteger(c) || c < 1))
  throw new Error(`BENCH_CLIENTS must be positive integers, got ${process.env.BENCH_CLIENTS}`);

type Op = 'post' | 'invoke';
type Side = 'raw' | 'tally';
const OPS: Op[] = PEER ? ['post'] : ['post', 'invoke'];
const OP_NAMES: Record<Op, string> = { post: 'postTransaction', invoke: 'invokeAction(transfer)' };

const TOOL_ID = uuid(888_888);
const SLOW_ID = uuid(888_891);
const INVOKE = `mutation Invoke($e: UUID!, $input: JSON) { actions { invokeAction(id: "${TOOL_ID}", input: {executionId: $e, actionVersion: 1, input: $input}) { status } } }`;
const INVOKE_SLOW = `mutation Slow($e: UUID!, $v: Int!) { actions { invokeAction(id: "${SLOW_ID}", input: {executionId: $e, actionVersion: $v, input: {}}) { status error { code } } } }`;
const BALANCE = `query Balance($a: UUID!) { balance(accountId: $a, currency: "USD") { settled { normalBalance { units } } } }`;
// ---------------------------------------------------------------------------------------------
// Child processes: every one started is killed on exit, error or signal, and the folder removed.

const { dir, children } = benchProcesses();
const running = isRunning;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

interface Server {
  name: string;
  pid: number;
  /** Where requests go: /graphql for Tally, / for raw. */
  url: string;
  origin: string;
  /** Tally's admin key (its Authorization header); none for raw. */
  key: string | null;
  child: ChildProcess;
  log: string;
}

class StartError extends Error {
  constructor(readonly output: string) {
    super(output.trim().split('\n').slice(-5).join('\n'));
  }
}

/**
 * Start `node <args>` and wait for the line that says where it listens. Its output goes to a file
 * in the bench folder (a pipe read by this busy process could fill and block the server's log
 * writes, which are synchronous on a pipe).
 */
async function startServer(
  name: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  ready: RegExp,
  key: string | null,
  alsoWait: readonly RegExp[] = [],
): Promise<Server> {
  const log = join(dir, `${name}.log`);
  const fd = openSync(log, 'w');
  const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', fd, fd] });
  closeSync(fd);
  children.add(child);
  const started = Date.now();
  for (;;) {
    const output = readFileSync(log, 'utf8');
    const found = ready.exec(output);
    if (found && alsoWait.every((line) => line.test(output))) {
      const origin = `http://127.0.0.1:${found[1]}`;
      return { name, pid: child.pid!, url: `${origin}${key ? '/graphql' : '/'}`, origin, key, child, log };
    }
    if (!running(child)) throw new StartError(output);
    if (Date.now() - started > 60_000) {
      child.kill('SIGKILL');
      throw new StartError(`${output}\n(${name} did not say where it listens within 60 s)`);
    }
    await sleep(50);
  }
}

/** SIGTERM, then SIGKILL if it has not exited within 10 s. */
function stopServer(server: Server): Promise<void> {
  return stopChild(server.child);
}

function startRaw(): Promise<Server> {
  return startServer(
    'raw',
    ['--import', 'tsx', 'bench/http-raw-server.ts', join(dir, 'raw.db'), '0'],
    { ...process.env, NODE_ENV: 'production', BENCH_DURABILITY: DURABILITY },
    /serving .* at http:\/\/127\.0\.0\.1:(\d+)\//,
    null,
  );
}

function startTally(name: string, db: string, key: string, config: string | null): Promise<Server> {
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_ENV: 'production', TALLY_ADMIN_KEY: key };
  if (config) env.TALLY_CONFIG = config;
  else delete env.TALLY_CONFIG; // the shipped limits
  const args = [
    'bin/tally.mjs',
    'serve',
    '--db',
    db,
    '--port',
    '0',
    '--no-worker',
    ...(DURABILITY === 'full' ? ['--durability', 'full'] : []),
  ];
  // Measured once its writer thread and read pool are up (until then everything runs on the main thread).
  return startServer(name, args, env, /tally: serving .* at http:\/\/127\.0\.0\.1:(\d+)\/graphql/, key, [
    /"event":"writer"/,
    /"event":"reads"/,
  ]);
}

// ---------------------------------------------------------------------------------------------
// What the servers are asked

/** A random distinct pair of the 1,000 accounts. */
function randomPair(): [string, string] {
  const a = randomInt(ACCOUNTS);
  let b = randomInt(ACCOUNTS - 1);
  if (b >= a) b++;
  return [uuid(a + 1), uuid(b + 1)];
}

/** A random amount from 0.01 to 1000.00, as a decimal string. */
const randomAmount = () => (randomInt(1, 100_001) / 100).toFixed(2);

/** The JSON body of one request: fresh ids, a random pair and amount. Both sides get the same. */
function requestBody(op: Op): string {
  const [from, to] = randomPair();
  if (op === 'post') {
    return JSON.stringify({
      query: POST,
      variables: {
        input: { transactionId: randomUUID(), tranCode: 'TRANSFER', params: { from, to, amount: randomAmount() } },
      },
    });
  }
  return JSON.stringify({
    query: INVOKE,
    variables: { e: randomUUID(), input: { transaction_id: randomUUID(), from, to, amount: randomAmount() } },
  });
}

/** Whether a response body says the request did what it was asked. */
function succeeded(side: Side, op: Op, body: string): boolean {
  if (side === 'raw') return body.startsWith('{"data":{"ok":true');
  if (body.includes('"errors"')) return false;
  return op === 'post' ? body.includes('"transactionId"') : body.includes('"status":"SUCCEEDED"');
}

const headers = (server: Server): Record<string, string> => ({
  'content-type': 'application/json',
  ...(server.key ? { authorization: `Bearer ${server.key}` } : {}),
});

/** One request outside autocannon (setup, the reader, the slow tool), on its own keep-alive agent. */
function send(
  server: Server,
  agent: Agent,
  method: 'GET' | 'POST',
  path: string,
  body?: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${server.origin}${path}`, { method, agent, headers: headers(server) }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

const setupAgent = new Agent({ keepAlive: true, maxSockets: 1 });
async function graphql(
  server: Server,
  query: string,
  variables: Record<string, unknown> = {},
  agent = setupAgent,
): Promise<Record<string, any>> {
  const res = await send(server, agent, 'POST', '/graphql', JSON.stringify({ query, variables }));
  const json = JSON.parse(res.body) as { data?: Record<string, any>; errors?: unknown };
  if (res.status !== 200 || json.errors)
    throw new Error(`${server.name}: HTTP ${res.status} ${res.body.slice(0, 500)}`);
  return json.data!;
}

/**
 * Sum of a Prometheus counter's series whose labels contain `labels` (all of them when ''); null
 * when /metrics has no such counter.
 */
function counter(metrics: string, name: string, labels = ''): number | null {
  let total: number | null = null;
  for (const line of metrics.split('\n')) {
    const found = new RegExp(`^${name}(\\{[^}]*\\})? (\\S+)`).exec(line);
    if (found && (found[1] ?? '').includes(labels)) total = (total ?? 0) + Number(found[2]);
  }
  return total;
}

interface Counts {
  /** Write requests the server has run (null: it does not say). */
  requests: number | null;
  batchRequests: number | null;
  batches: number | null;
}

/** What the server has done so far: Tally's /metrics, the raw server's GET. */
async function serverCounts(server: Server): Promise<Counts> {
  const res = await send(server, setupAgent, 'GET', server.key ? '/metrics' : '/');
  if (res.status !== 200) throw new Error(`${server.name}: GET answered ${res.status}: ${res.body.slice(0, 300)}`);
  if (!server.key)
    return { requests: (JSON.parse(res.body) as { requests: number }).requests, batchRequests: null, batches: null };
  return {
    requests: counter(res.body, 'tally_graphql_requests_total', 'type="mutation"'),
    batchRequests: counter(res.body, 'tally_write_batch_requests_total'),
    batches: counter(res.body, 'tally_write_batches_total'),
  };
}

// ---------------------------------------------------------------------------------------------
// Measuring

const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

/** utime + stime in clock ticks of a process (all threads) and of its main thread alone. */
function cpuTicks(pid: number): { all: number; main: number } {
  const ticks = (path: string) => {
    const stat = readFileSync(path, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // fields from the 3rd (state) on
    return Number(fields[11]) + Number(fields[12]); // utime, stime: the 14th and 15th
  };
  return { all: ticks(`/proc/${pid}/stat`), main: ticks(`/proc/${pid}/task/${pid}/stat`) };
}

/** The q-quantile of sorted values (nearest rank). */
const quantile = (sorted: number[], q: number) =>
  sorted.length ? sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]! : NaN;

interface Load {
  ok: number;
  perSecond: number;
  p50: number;
  p99: number;
  max: number;
  non2xx: number;
  /** Responses whose body says the request failed (GraphQL errors, not SUCCEEDED): non-2xx ones too. */
  badBodies: number;
  /** Connection errors and timeouts. */
  errors: number;
  samples: string[];
}

/** `connections` closed-loop autocannon clients sending `op` to `server` for `seconds`. */
async function load(server: Server, side: Side, op: Op, connections: number, seconds: number): Promise<Load> {
  const latencies: number[] = [];
  const samples: string[] = [];
  const instance = autocannon({
    url: server.url,
    connections,
    duration: seconds,
    method: 'POST',
    headers: headers(server),
    requests: [{ setupRequest: (req) => ({ ...req, body: requestBody(op) }) }],
    verifyBody: (body) => {
      if (succeeded(side, op, body)) return true;
      if (samples.length < 3) samples.push(body.slice(0, 400));
      return false;
    },
  });
  // The time autocannon measured for each response, unrounded (its histogram keeps whole ms).
  instance.on('response', (_client: unknown, _status: number, _bytes: number, ms: number) => latencies.push(ms));
  const result = await instance;
  latencies.sort((a, b) => a - b);
  const bad = Math.max(result.mismatches, result.non2xx);
  const done = latencies.length;
  return {
    ok: done - bad,
    perSecond: (done - bad) / result.duration,
    p50: quantile(latencies, 0.5),
    p99: quantile(latencies, 0.99),
    max: latencies[latencies.length - 1] ?? NaN,
    non2xx: result.non2xx,
    badBodies: result.mismatches,
    errors: result.errors,
    samples,
  };
}

interface Point extends Load {
  cpuUs: number;
  mainCpuUs: number;
  /** Mean write batch (Tally): null when the server has no batch counters. */
  batch: number | null;
}

const failures: string[] = [];
function noteFailures(what: string, l: Load): void {
  if (l.non2xx + l.badBodies + l.errors === 0) return;
  failures.push(
    `${what}: ${l.non2xx} non-2xx, ${l.badBodies} failed bodies, ${l.errors} connection errors/timeouts; e.g. ${l.samples.join(' | ') || '(no body)'}`,
  );
  console.log(
    `  !!! FAILURES in ${what}: ${l.non2xx} non-2xx, ${l.badBodies} failed bodies, ${l.errors} connection errors`,
  );
}

const delta = (before: number | null, after: number | null) =>
  before === null || after === null ? null : after - before;

/**
 * One measured point: the server's counts and CPU read before an autocannon run and again 200 ms
 * after it, when the requests still in flight at its end have run and its checkpoint has started.
 */
async function point(
  server: Server,
  side: Side,
  op: Op,
  connections: number,
  seconds: number,
  what: string,
): Promise<Point> {
  const m0 = await serverCounts(server);
  const c0 = cpuTicks(server.pid);
  const l = await load(server, side, op, connections, seconds);
  await sleep(200);
  const c1 = cpuTicks(server.pid);
  const m1 = await serverCounts(server);
  noteFailures(what, l);
  const served = delta(m0.requests, m1.requests) ?? l.ok;
  const perRequest = (ticks: number) => ((ticks / CLK_TCK) * 1e6) / Math.max(1, served);
  const batches = delta(m0.batches, m1.batches);
  const batched = delta(m0.batchRequests, m1.batchRequests);
  return {
    ...l,
    cpuUs: perRequest(c1.all - c0.all),
    mainCpuUs: perRequest(c1.main - c0.main),
    batch: batches && batched !== null ? batched / batches : null,
  };
}

async function warmUp(server: Server, side: Side, ops: Op[], connections: number): Promise<void> {
  for (const op of ops)
    noteFailures(`warm-up ${server.name} ${op}`, await load(server, side, op, connections, WARMUP_SECONDS));
  await sleep(200);
}

// ---------------------------------------------------------------------------------------------
// Formatting

const int = (x: number) => Math.round(x).toLocaleString('en').replace(/,/g, ' ');
const ms = (x: number) => (x < 10 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : x.toFixed(0));
const loads = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' / ');
function medians(points: Point[]) {
  return {
    perSecond: median(points.map((p) => p.perSecond)),
    p50: median(points.map((p) => p.p50)),
    p99: median(points.map((p) => p.p99)),
    cpuUs: median(points.map((p) => p.cpuUs)),
    mainCpuUs: median(points.map((p) => p.mainCpuUs)),
    batch: points.every((p) => p.batch !== null) ? median(points.map((p) => p.batch!)) : null,
  };
}
const progress = (what: string, p: Point) =>
  console.log(
    `  ${what.padEnd(42)} ${int(p.perSecond).padStart(6)} req/s  p50 ${ms(p.p50).padStart(5)}  p99 ${ms(p.p99).padStart(5)} ms  CPU ${int(p.cpuUs).padStart(5)} µs/req (main ${int(p.mainCpuUs)})${p.batch === null ? '' : `  batch ${p.batch.toFixed(2)}`}`,
  );

// ---------------------------------------------------------------------------------------------
// The run

const head = (() => {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT }).toString().trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src', 'bin'], { cwd: ROOT })
      .toString()
      .trim()
      .split('\n')
      .filter(Boolean).length;
    return `${commit}${dirty ? ` + ${dirty} uncommitted file(s) in src/ bin/` : ''}`;
  } catch {
    return 'unknown';
  }
})();
console.log(
  `node ${process.version}, autocannon ${createRequire(import.meta.url)('autocannon/package.json').version}, tally at ${head}`,
);
console.log(
  `durability ${DURABILITY} (${DURABILITY === 'full' ? 'synchronous = FULL: fsync every commit' : 'WAL, synchronous = NORMAL: no fsync at commit'}), ${PEER ? 'peer mode: ' : ''}clients ${CLIENTS.join(', ')}, ${SECONDS} s per point after a ${WARMUP_SECONDS} s warm-up ${PEER ? 'per point' : 'per server and operation'}, ${ROUNDS} interleaved rounds`,
);
console.log(`files in ${dir}; load average (1/5/15 min) at start ${loads()}`);

// The databases: Tally's made in-process first (1,000 accounts, TRANSFER, the transfer tool), then served.
const tallyDb = join(dir, 'tally.db');
{
  const engine = await setupEngine(tallyDb);
  createTransferTool(engine, TOOL_ID);
  engine.close();
}
const adminKey = `tly_${randomBytes(32).toString('hex')}`;

let tally: Server;
try {
  tally = await startTally('tally', tallyDb, adminKey, null);
} catch (error) {
  if (DURABILITY === 'full' && error instanceof StartError && /durability/i.test(error.output)) {
    const said = error.output.split('\n').find((line) => /durability/i.test(line)) ?? error.message;
    console.log(
      `\ntally serve has no --durability flag yet, so there is no FULL Tally to measure: skipped (it said: ${said.trim()})`,
    );
    process.exit(0);
  }
  throw error;
}
const raw = await startRaw();
const servers: Record<Side, Server> = { raw, tally };
console.log(`tally: pid ${tally.pid}, ${tally.url}; raw: pid ${raw.pid}, ${raw.url}`);

if (!PEER) {
  await warmUp(raw, 'raw', ['post'], 8);
  await warmUp(tally, 'tally', OPS, 8);
}

// Interleaved rounds: every (clients, op) point runs raw and Tally back to back, raw first in
// odd rounds and Tally first in even ones.
const results = new Map<string, Point[]>();
const key = (clients: number, op: Op, side: Side) => `${clients} ${op} ${side}`;
for (let round = 0; round < ROUNDS; round++) {
  console.log(`\nround ${round + 1} of ${ROUNDS}: load average ${loads()}`);
  for (const clients of CLIENTS) {
    for (const op of OPS) {
      const order: Side[] = round % 2 === 0 ? ['raw', 'tally'] : ['tally', 'raw'];
      for (const side of order) {
        const what = `${side === 'raw' ? 'raw' : 'Tally'} ${op === 'post' ? 'post' : 'invoke'}, ${clients} client${clients === 1 ? '' : 's'}`;
        if (PEER) await warmUp(servers[side], side, [op], clients);
        const p = await point(servers[side], side, op, clients, SECONDS, `round ${round + 1} ${what}`);
        progress(what, p);
        const k = key(clients, op, side);
        results.set(k, [...(results.get(k) ?? []), p]);
      }
    }
  }
}

/** Tally ÷ raw: the median of the rounds' own ratios. */
const ratio = (clients: number, op: Op) => {
  const t = results.get(key(clients, op, 'tally'))!;
  const r = results.get(key(clients, op, 'raw'))!;
  return median(t.map((p, i) => p.perSecond / r[i]!.perSecond));
};

if (PEER) {
  console.log(
    `\nPeer figures (beside reviews/peer.md; durability ${DURABILITY}): transfers/s per round, p50/p99 ms and CPU µs per transfer the medians of the rounds\n`,
  );
  console.log(
    '| system | clients | transfers/s (r1 / r2 / …) | median | p50 / p99 ms | server CPU µs/transfer | Tally ÷ raw |',
  );
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  for (const clients of CLIENTS) {
    for (const side of ['tally', 'raw'] as Side[]) {
      const pts = results.get(key(clients, 'post', side))!;
      const m = medians(pts);
      const name =
        side === 'tally'
          ? `Tally HTTP postTransaction (${DURABILITY === 'full' ? 'FULL' : 'NORMAL'})`
          : `raw node:http + better-sqlite3 (${DURABILITY === 'full' ? 'FULL' : 'NORMAL'})`;
      console.log(
        `| ${name} | ${clients} | ${pts.map((p) => int(p.perSecond)).join(' / ')} | ${int(m.perSecond)} | ${ms(m.p50)} / ${ms(m.p99)} | ${int(m.cpuUs)} | ${side === 'tally' ? ratio(clients, 'post').toFixed(2) : '1.00'} |`,
      );
    }
  }
} else {
  console.log(
    `\nServed path, durability ${DURABILITY}: medians of ${ROUNDS} interleaved rounds; × raw is the median of each round's Tally ÷ raw at the same point\n`,
  );
  console.log(
    '| clients | path | req/s | × raw | p50 ms | p99 ms | server CPU µs/req | main thread µs/req | mean batch |',
  );
  console.log('|---:|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const clients of CLIENTS) {
    for (const op of OPS) {
      for (const side of ['raw', 'tally'] as Side[]) {
        const m = medians(results.get(key(clients, op, side))!);
        const path =
          side === 'raw'
            ? `raw node:http posting (anchor for ${op === 'post' ? 'post' : 'invoke'})`
            : `Tally ${OP_NAMES[op]}`;
        const batch = side === 'raw' ? '1' : m.batch === null ? 'n/a' : m.batch.toFixed(2);
        console.log(
          `| ${clients} | ${path} | ${int(m.perSecond)} | ${side === 'raw' ? '1.00' : `**${ratio(clients, op).toFixed(2)}**`} | ${ms(m.p50)} | ${ms(m.p99)} | ${int(m.cpuUs)} | ${int(m.mainCpuUs)} | ${batch} |`,
        );
      }
    }
  }
  console.log('\nrounds (req/s):');
  for (const [k, pts] of results) console.log(`  ${k.padEnd(16)} ${pts.map((p) => int(p.perSecond)).join(', ')}`);
  if (results.get(key(CLIENTS[0]!, 'post', 'tally'))!.some((p) => p.batch === null)) {
    console.log(
      'mean batch: n/a (this server has no tally_write_batch_requests_total / tally_write_batches_total on /metrics)',
    );
  }
}

await stopServer(raw);
await stopServer(tally);

// ---------------------------------------------------------------------------------------------
// Read latency while 32 clients post and one tool runs to its deadline, again and again.

if (READ) {
  const longest = Math.max(...SLOW_MS);
  let config: string | null = null;
  if (longest > 750) {
    config = join(dir, 'read-limits.json');
    writeFileSync(config, JSON.stringify({ limits: { toolTimeoutMsMax: longest, requestDeadlineMs: longest } }));
  }
  const server = await startTally('tally-read', tallyDb, adminKey, config);
  console.log(
    `\nRead latency (Tally, pid ${server.pid}${config ? `, TALLY_CONFIG limits toolTimeoutMsMax = requestDeadlineMs = ${longest} ms` : ''}): ${READ_CLIENTS} clients posting, one loop invoking \`slow\` (spins to its deadline), one sequential balance reader; ${SECONDS * 2} s per deadline`,
  );
  // `slow`: one version per deadline, the program the same.
  for (const [i, timeoutMs] of SLOW_MS.entries()) {
    await graphql(
      server,
      `mutation($id: UUID!, $input: ActionInput!) { actions { ${i === 0 ? 'createAction' : 'updateAction'}(id: $id, input: $input) { version } } }`,
      {
        id: SLOW_ID,
        input: {
          name: 'slow',
          kind: 'tool',
          config: { runtime: 'javascript', src: 'function run(event) { for (;;) {} }' },
          execution: { timeoutMs },
        },
      },
    );
  }
  await warmUp(server, 'tally', ['post'], 8);
  const rows: string[] = [];
  for (const [i, timeoutMs] of SLOW_MS.entries()) {
    const end = performance.now() + SECONDS * 2 * 1000;
    const posting = load(server, 'tally', 'post', READ_CLIENTS, SECONDS * 2);
    // The tool, back to back: every call should end FAILED with TIMEOUT at its deadline.
    const slowAgent = new Agent({ keepAlive: true, maxSockets: 1 });
    const slow = (async () => {
      const outcomes: Record<string, number> = {};
      const took: number[] = [];
      while (performance.now() < end) {
        const t0 = performance.now();
        const res = await send(
          server,
          slowAgent,
          'POST',
          '/graphql',
          JSON.stringify({ query: INVOKE_SLOW, variables: { e: randomUUID(), v: i + 1 } }),
        );
        took.push(performance.now() - t0);
        let outcome: string;
        try {
          const json = JSON.parse(res.body) as {
            data?: { actions?: { invokeAction?: { status: string; error: { code: string } | null } } };
            errors?: Array<{ extensions?: { code?: string } }>;
          };
          const call = json.data?.actions?.invokeAction;
          outcome = call
            ? `${call.status}${call.error ? ` ${call.error.code}` : ''}`
            : `error ${json.errors?.[0]?.extensions?.code ?? res.status}`;
        } catch {
          outcome = `HTTP ${res.status}`;
        }
        outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
      }
      return { outcomes, took };
    })();
    // The reader: one balance query at a time, a random account each, timed here.
    const readAgent = new Agent({ keepAlive: true, maxSockets: 1 });
    const reading = (async () => {
      const times: number[] = [];
      let failed = 0;
      while (performance.now() < end) {
        const [account] = randomPair();
        const t0 = performance.now();
        const res = await send(
          server,
          readAgent,
          'POST',
          '/graphql',
          JSON.stringify({ query: BALANCE, variables: { a: account } }),
        );
        times.push(performance.now() - t0);
        if (res.status !== 200 || res.body.includes('"errors"')) {
          failed++;
          if (failed <= 3)
            failures.push(`read scenario (${timeoutMs} ms) balance read: HTTP ${res.status} ${res.body.slice(0, 300)}`);
        }
      }
      return { times: times.sort((a, b) => a - b), failed };
    })();
    const [posts, tool, reads] = await Promise.all([posting, slow, reading]);
    slowAgent.destroy();
    readAgent.destroy();
    noteFailures(`read scenario (${timeoutMs} ms) posts`, posts);
    const outcomes = Object.entries(tool.outcomes)
      .map(([o, n]) => `${n} ${o}`)
      .join(', ');
    // A TIMEOUT is the expected end, as a FAILED execution or as the mutation's error (rolled back).
    if (Object.keys(tool.outcomes).some((o) => !/^(FAILED|error) TIMEOUT$/.test(o)))
      failures.push(`read scenario (${timeoutMs} ms): slow tool calls ended ${outcomes} (expected TIMEOUT only)`);
    console.log(
      `  deadline ${timeoutMs} ms: ${reads.times.length} reads, ${int(posts.perSecond)} posts/s (p50 ${ms(posts.p50)}, p99 ${ms(posts.p99)}, max ${ms(posts.max)} ms), slow calls: ${outcomes}, each ${ms(median(tool.took))} ms (median)`,
    );
    rows.push(
      `| ${timeoutMs} | ${reads.times.length} | ${ms(quantile(reads.times, 0.5))} | ${ms(quantile(reads.times, 0.99))} | ${ms(reads.times[reads.times.length - 1] ?? NaN)} | ${reads.failed} | ${int(posts.perSecond)} | ${ms(posts.p99)} | ${tool.took.length} |`,
    );
    await sleep(200);
  }
  console.log(
    '\n| tool deadline ms | reads | read p50 ms | read p99 ms | read max ms | failed reads | posts/s meanwhile | post p99 ms | slow calls |',
  );
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const row of rows) console.log(row);
  await stopServer(server);
}

if (failures.length) {
  console.log(
    `\n!!!!!!!! THIS RUN HAD FAILURES: its figures are not valid !!!!!!!!\n${failures.map((f) => `  - ${f}`).join('\n')}`,
  );
  process.exit(1);
}
console.log('\nno failures: every request answered 2xx without GraphQL errors');
