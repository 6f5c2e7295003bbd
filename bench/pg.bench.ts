/**
 * npm run bench:pg        (needs a PostgreSQL server: BENCH_PG_URL, else TALLY_TEST_PG_URL;
 *                          `npm run pg:start` starts a throwaway one and prints its URL)
 *
 * Postings per second over HTTP with 1, 2 and 4 `tally serve` processes on one PostgreSQL
 * database, beside one `tally serve` on SQLite, in one run. Every round runs every configuration
 * (the order rotates each round, so the machine's noise hits all alike); each figure is the median
 * of the rounds, and "× SQLite" the median of the rounds' own ratios.
 *
 * BENCH_OP=invoke runs invokeAction of the `transfer` tool instead (its program posts the same
 * transfer through graphql(): the database's work is the same, Tally's is about twice).
 *
 * Load: BENCH_CLIENTS (32) loops in this process, each with a keep-alive connection to one server
 * (client i to server i mod N), each posting the TRANSFER tran code (bench/common.ts) with a fresh
 * transactionId between a pair of BENCH_ACCOUNTS (1 000; fewer makes the accounts hot and the
 * processes conflict; more spreads the balance rows over more index pages, so PostgreSQL's
 * page-granular SERIALIZABLE checks report fewer false conflicts) accounts, 1 request per posting. Counted: answers with the posting
 * (ok), BUSY answers (a transaction that lost its race transactionRetriesMax times over, or a full
 * queue), anything else (a failure: the run says so and exits 1). Each point: 1 s of warm-up, then
 * BENCH_SECONDS (5).
 *
 * CPU per posting, from /proc: the Tally processes' (utime + stime, every thread) and PostgreSQL's
 * (every process named postgres on this machine: the cluster's backends, WAL writer, checkpointer),
 * read before and after the measured window. `retries/post`: Δ tally_transaction_retries_total
 * over all servers (/metrics) ÷ postings.
 *
 * The durability each side ran with is printed: SQLite as `tally serve` ships (WAL,
 * synchronous = NORMAL: a crash of the process loses nothing, of the machine the last commits),
 * PostgreSQL as the server is configured (scripts/pg.sh's cluster: fsync, synchronous_commit and
 * full_page_writes off unless TALLY_PG_DURABLE=1 made it). The machine is 2 shared cores, and this
 * process, the servers and PostgreSQL share them.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PgConnection } from '../src/storage/pg/connection.js';
import { createEngine } from '../src/engine.js';
import { benchProcesses, createTransferTool, isRunning, median, ok, POST, stopChild } from './common.js';

const ROOT = join(fileURLToPath(import.meta.url), '..', '..');
const PG = process.env.BENCH_PG_URL ?? process.env.TALLY_TEST_PG_URL;
if (!PG) {
  console.error(
    'bench:pg needs a PostgreSQL server: set BENCH_PG_URL (or TALLY_TEST_PG_URL); `npm run pg:start` starts one and prints its URL',
  );
  process.exit(1);
}
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 32);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 1000);
const PROCESSES = (process.env.BENCH_PROCESSES ?? '1,2,4').split(',').map(Number);
/** post: postTransaction; invoke: invokeAction of the `transfer` tool, whose program posts the same transfer (more of the work in Tally, the same in the database). */
const OP = process.env.BENCH_OP ?? 'post';
if (OP !== 'post' && OP !== 'invoke') throw new Error(`BENCH_OP must be post or invoke, got ${OP}`);
const TOOL_ID = randomUUID();
const INVOKE = `mutation Invoke($e: UUID!, $input: JSON) { actions { invokeAction(id: "${TOOL_ID}", input: {executionId: $e, actionVersion: 1, input: $input}) { status } } }`;
for (const [name, value] of Object.entries({ CLIENTS, SECONDS, ROUNDS, ACCOUNTS })) {
  if (!Number.isInteger(value) || value < 1) throw new Error(`BENCH_${name} must be a positive integer, got ${value}`);
}
if (ACCOUNTS < 2 || ACCOUNTS > 1_000_000) throw new Error(`BENCH_ACCOUNTS must be from 2 to 1000000, got ${ACCOUNTS}`);
const KEY = `tly_bench-pg-${randomBytes(6).toString('hex')}`;
const TICK_US = 1e6 / 100; // /proc's clock ticks (USER_HZ, 100 on Linux)

const { dir, children } = benchProcesses();
const running = isRunning;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

interface Server {
  pid: number;
  child: ChildProcess;
  port: number;
  agent: Agent;
}

/** `tally serve` on `db`, once it says where it listens (and, on SQLite, that its writer thread and read pool are up). */
async function startServer(db: string, n: number): Promise<Server> {
  const log = join(dir, `serve-${n}-${Date.now()}.log`);
  const fd = openSync(log, 'w');
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_ENV: 'production', TALLY_ADMIN_KEY: KEY };
  // The shipped limits, unless BENCH_TALLY_CONFIG names a server configuration file (for trying limits).
  if (process.env.BENCH_TALLY_CONFIG) env.TALLY_CONFIG = process.env.BENCH_TALLY_CONFIG;
  else delete env.TALLY_CONFIG;
  const child = spawn(process.execPath, ['bin/tally.mjs', 'serve', '--db', db, '--port', '0', '--no-worker'], {
    cwd: ROOT,
    env,
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  children.add(child);
  const started = Date.now();
  const sqlite = !db.startsWith('postgres');
  for (;;) {
    const output = readFileSync(log, 'utf8');
    const port = /tally: serving .* at http:\/\/127\.0\.0\.1:(\d+)\/graphql/.exec(output)?.[1];
    if (port && (!sqlite || (/"event":"writer"/.test(output) && /"event":"reads"/.test(output)))) {
      return { pid: child.pid!, child, port: Number(port), agent: new Agent({ keepAlive: true, maxSockets: CLIENTS }) };
    }
    if (!running(child) || Date.now() - started > 60_000) throw new Error(`tally serve did not start:\n${output}`);
    await sleep(50);
  }
}

function stopServer(server: Server): Promise<void> {
  server.agent.destroy();
  return stopChild(server.child);
}

/** One request; `fresh`: on a new connection (a kept-alive one idle past the server's keep-alive timeout may be reset as it is reused). */
function send(
  server: Server,
  method: 'GET' | 'POST',
  path: string,
  body?: string,
  fresh = false,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: server.port,
        method,
        path,
        agent: fresh ? false : server.agent,
        headers: {
          authorization: `Bearer ${KEY}`,
          ...(body ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {}),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** utime + stime of a process (every thread), in µs. */
function cpuUs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_US;
  } catch {
    return 0;
  }
}

/** CPU of every process named postgres (the cluster), in µs. */
function postgresCpuUs(): number {
  let total = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'postgres') total += cpuUs(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return total;
}

async function retries(servers: Server[]): Promise<number> {
  let total = 0;
  for (const server of servers) {
    const { text } = await send(server, 'GET', '/metrics', undefined, true);
    total += Number(/^tally_transaction_retries_total (\d+)/m.exec(text)?.[1] ?? 0);
  }
  return total;
}

/**
 * The accounts, and every transactionId, are random (version 4) UUIDs, as a client's usually are:
 * ids in key order (uuid(1), uuid(2), … or time-ordered UUIDs) put concurrent postings' keys on the
 * same index pages, where PostgreSQL's SERIALIZABLE checks (predicate locks by page) see conflicts
 * between postings that share no account (see docs/guides/postgresql.md).
 */
const ACCOUNT_IDS = Array.from({ length: ACCOUNTS }, () => randomUUID());

async function setup(db: string): Promise<void> {
  const engine = await createEngine({ path: db });
  try {
    for (const [i, accountId] of ACCOUNT_IDS.entries()) {
      ok(engine, 'mutation($i: AccountInput!) { createAccount(input: $i) { code } }', {
        i: { accountId, code: `A${i + 1}`, name: `Account ${i + 1}` },
      });
    }
    ok(
      engine,
      `mutation { createTranCode(input: {tranCodeId: "${randomUUID()}", code: "TRANSFER",
      params: [{name: "from", type: UUID}, {name: "to", type: UUID}, {name: "amount", type: DECIMAL}],
      transaction: {effective: "date.Today()"},
      entries: [{accountId: "params.from", units: "params.amount", currency: "'USD'", direction: "DEBIT", layer: "SETTLED"},
                {accountId: "params.to", units: "params.amount", currency: "'USD'", direction: "CREDIT", layer: "SETTLED"}]}) { code } }`,
    );
    createTransferTool(engine, TOOL_ID);
  } finally {
    engine.close();
  }
}

let next = 0;
/** One posting: ok, busy, or a failure (its text). */
async function post(server: Server): Promise<'ok' | 'busy' | string> {
  const n = next++;
  const a = (n * 7919) % ACCOUNTS;
  const b = (a + 1 + (n % (ACCOUNTS - 1))) % ACCOUNTS;
  const amount = `${1 + (n % 997)}.${String(n % 100).padStart(2, '0')}`;
  const body =
    OP === 'post'
      ? JSON.stringify({
          query: POST,
          variables: {
            input: {
              transactionId: randomUUID(),
              tranCode: 'TRANSFER',
              params: { from: ACCOUNT_IDS[a], to: ACCOUNT_IDS[b], amount },
            },
          },
        })
      : JSON.stringify({
          query: INVOKE,
          variables: {
            e: randomUUID(),
            input: { transaction_id: randomUUID(), from: ACCOUNT_IDS[a], to: ACCOUNT_IDS[b], amount },
          },
        });
  try {
    const { status, text } = await send(server, 'POST', '/graphql', body);
    if (
      status === 200 &&
      (OP === 'post' ? text.includes('"postTransaction":{"transactionId"') : text.includes('"status":"SUCCEEDED"'))
    )
      return 'ok';
    if (text.includes('"BUSY"')) return 'busy';
    return `${status} ${text.slice(0, 300)}`;
  } catch (error) {
    return String(error);
  }
}

interface Point {
  perSecond: number;
  tallyUs: number;
  postgresUs: number;
  busy: number;
  retriesPerPost: number;
}

async function measure(db: string, processes: number): Promise<Point> {
  const servers = await Promise.all(Array.from({ length: processes }, (_, i) => startServer(db, i)));
  try {
    let stop = false;
    let ok = 0;
    let busy = 0;
    const failures: string[] = [];
    const loop = async (c: number) => {
      const server = servers[c % servers.length]!;
      while (!stop) {
        const outcome = await post(server);
        if (outcome === 'ok') ok++;
        else if (outcome === 'busy') busy++;
        else failures.push(outcome);
      }
    };
    const loops = Array.from({ length: CLIENTS }, (_, c) => loop(c));
    await sleep(1000);
    const okBefore = ok;
    const busyBefore = busy;
    const tallyBefore = servers.reduce((sum, s) => sum + cpuUs(s.pid), 0);
    const postgresBefore = postgresCpuUs();
    const retriesBefore = await retries(servers);
    const began = performance.now();
    await sleep(SECONDS * 1000);
    const posted = ok - okBefore;
    const seconds = (performance.now() - began) / 1000;
    const tallyUs = servers.reduce((sum, s) => sum + cpuUs(s.pid), 0) - tallyBefore;
    const postgresUs = postgresCpuUs() - postgresBefore;
    const retried = (await retries(servers)) - retriesBefore;
    stop = true;
    await Promise.all(loops);
    if (failures.length > 0) {
      console.error(`${failures.length} failed postings, e.g.:\n${failures.slice(0, 3).join('\n')}`);
      process.exitCode = 1;
    }
    return {
      perSecond: posted / seconds,
      tallyUs: tallyUs / posted,
      postgresUs: postgresUs / posted,
      busy: busy - busyBefore,
      retriesPerPost: retried / posted,
    };
  } finally {
    await Promise.all(servers.map(stopServer));
  }
}

async function main(): Promise<void> {
  const settings = new PgConnection(PG!);
  const show = (name: string) => settings.prepare<[], string>(`SHOW ${name}`).pluck().get();
  const durability = [
    'fsync',
    'synchronous_commit',
    'full_page_writes',
    'wal_level',
    'shared_buffers',
    'max_connections',
  ]
    .map((n) => `${n}=${show(n)}`)
    .join(' ');
  const version = settings.prepare<[], string>('SHOW server_version').pluck().get();
  const schemas = PROCESSES.map(() => `bench_${randomBytes(5).toString('hex')}`);
  for (const schema of schemas) settings.exec(`CREATE SCHEMA ${schema}`);
  const urlOf = (schema: string) => `${PG}${PG!.includes('?') ? '&' : '?'}options=-c%20search_path%3D${schema}`;
  try {
    console.log(
      `bench:pg — ${OP === 'post' ? 'postTransaction' : 'invokeAction(transfer)'}, ${CLIENTS} clients, ${SECONDS} s per point, ${ROUNDS} rounds, transfers between ${ACCOUNTS} accounts`,
    );
    console.log(`PostgreSQL ${version}: ${durability}`);
    console.log('SQLite: tally serve as shipped (WAL, synchronous=NORMAL, writer thread, read pool)');
    const sqlite = join(dir, 'bench.db');
    const configs: Array<{ name: string; db: string; processes: number }> = [
      { name: 'SQLite, 1 process', db: sqlite, processes: 1 },
    ];
    for (const [i, processes] of PROCESSES.entries())
      configs.push({
        name: `PostgreSQL, ${processes} process${processes > 1 ? 'es' : ''}`,
        db: urlOf(schemas[i]!),
        processes,
      });
    for (const config of configs) await setup(config.db);
    const points = new Map<string, Point[]>(configs.map((c) => [c.name, []]));
    const ratios = new Map<string, number[]>(configs.map((c) => [c.name, []]));
    for (let round = 0; round < ROUNDS; round++) {
      console.log(`round ${round + 1}/${ROUNDS} (load ${loadavg()[0]!.toFixed(2)})`);
      const order = configs.map((_, i) => configs[(i + round) % configs.length]!);
      const byName = new Map<string, Point>();
      for (const config of order) {
        const point = await measure(config.db, config.processes);
        byName.set(config.name, point);
        points.get(config.name)!.push(point);
        console.log(
          `  ${config.name.padEnd(26)} ${point.perSecond.toFixed(0).padStart(6)} posts/s  tally ${point.tallyUs.toFixed(0)} µs  postgres ${point.postgresUs.toFixed(0)} µs  busy ${point.busy}  retries/post ${point.retriesPerPost.toFixed(3)}`,
        );
      }
      const base = byName.get(configs[0]!.name)!.perSecond;
      for (const config of configs) ratios.get(config.name)!.push(byName.get(config.name)!.perSecond / base);
    }
    console.log(
      '\n| configuration | posts/s | × SQLite | Tally CPU µs/post | PostgreSQL CPU µs/post | retries/post | BUSY |',
    );
    console.log('|---|---:|---:|---:|---:|---:|---:|');
    for (const config of configs) {
      const list = points.get(config.name)!;
      const m = (f: (p: Point) => number) => median(list.map(f));
      console.log(
        `| ${config.name} | ${m((p) => p.perSecond).toFixed(0)} | ${median(ratios.get(config.name)!).toFixed(2)} | ${m((p) => p.tallyUs).toFixed(0)} | ${m((p) => p.postgresUs).toFixed(0)} | ${m((p) => p.retriesPerPost).toFixed(3)} | ${m((p) => p.busy)} |`,
      );
    }
  } finally {
    for (const schema of schemas) settings.exec(`DROP SCHEMA ${schema} CASCADE`);
    settings.close();
  }
}

await main();
