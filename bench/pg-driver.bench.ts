/**
 * npm run bench:pg-driver -- [postgres://…]   (default: the URL of scripts/pg.sh start)
 *
 * The engine is synchronous: QuickJS host functions call graphql() inside the request's
 * transaction, so a PostgreSQL backend needs a synchronous client. Two ways to have one, measured
 * side by side on the same database, interleaved rounds, medians:
 *   pg-native   libpq through node-libpq: connectSync, prepareSync, executeSync — the calling
 *               thread blocks in libpq until the answer arrives;
 *   bridge      `pg` (the async client) on a worker thread, the caller blocked in Atomics.wait
 *               until the worker posts the answer (a MessagePort read with receiveMessageOnPort).
 * Each runs a prepared SELECT by primary key, and a posting shaped like Tally's (BEGIN, 2 entry
 * INSERTs, 2 balance UPDATEs with RETURNING, a SELECT, COMMIT). Wall µs per operation, and the
 * process's CPU µs (the bridge's worker included).
 */
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { MessageChannel, receiveMessageOnPort, Worker } from 'node:worker_threads';
import { median } from './common.js';

const require = createRequire(import.meta.url);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const N = Number(process.env.BENCH_OPS ?? 2000);

function defaultUrl(): string {
  return execFileSync(join(import.meta.dirname, '..', 'scripts', 'pg.sh'), ['url'], { encoding: 'utf8' }).trim();
}
const url = process.argv[2] ?? process.env.TALLY_DATABASE_URL ?? defaultUrl();

type NativeClient = {
  connectSync(url: string): void;
  querySync(text: string, values?: unknown[]): Array<Record<string, unknown>>;
  prepareSync(name: string, text: string, count: number): void;
  executeSync(name: string, values: unknown[]): Array<Record<string, unknown>>;
  end(): void;
};
let Native: new () => NativeClient;
try {
  Native = require('pg-native') as new () => NativeClient;
  require.resolve('pg');
} catch (error) {
  console.log(
    `pg-native or pg is not installed (${(error as Error).message.split('\n')[0]}): skipped. They build against libpq: apt-get install libpq-dev, then npm install.`,
  );
  process.exit(0);
}

interface Driver {
  q(name: string, text: string, values: unknown[]): unknown[];
  raw(text: string): void;
  end(): void;
}

function nativeDriver(): Driver {
  const client = new Native();
  client.connectSync(url);
  const prepared = new Set<string>();
  return {
    q(name, text, values) {
      if (!prepared.has(name)) {
        client.prepareSync(name, text, values.length);
        prepared.add(name);
      }
      return client.executeSync(name, values);
    },
    raw: (text) => void client.querySync(text),
    end: () => client.end(),
  };
}

/** The worker of the bridge: `pg`'s Client, one query at a time, answering on its port and waking the caller. */
const BRIDGE_WORKER = `
const { workerData } = require('node:worker_threads');
const pg = require(workerData.pg);
const flags = new Int32Array(workerData.signal);
const port = workerData.port;
const client = new pg.Client({ connectionString: workerData.url });
const wake = () => { Atomics.store(flags, 0, 1); Atomics.notify(flags, 0); };
client.connect().then(() => { port.postMessage({ ready: true }); wake(); });
port.on('message', async ({ name, text, values }) => {
  let reply;
  try {
    const result = await client.query(name ? { name, text, values } : { text, values });
    reply = { rows: result.rows };
  } catch (error) {
    reply = { error: error.message };
  }
  port.postMessage(reply);
  wake();
});
`;

async function bridgeDriver(): Promise<Driver> {
  const signal = new SharedArrayBuffer(4);
  const flags = new Int32Array(signal);
  const { port1, port2 } = new MessageChannel();
  const worker = new Worker(BRIDGE_WORKER, {
    eval: true,
    workerData: { url, signal, port: port2, pg: require.resolve('pg') },
    transferList: [port2],
  });
  const wait = (): { rows?: unknown[]; error?: string } => {
    for (;;) {
      Atomics.wait(flags, 0, 0, 1000);
      Atomics.store(flags, 0, 0);
      const received = receiveMessageOnPort(port1);
      if (received) return received.message as { rows?: unknown[]; error?: string };
    }
  };
  wait();
  const call = (message: object) => {
    port1.postMessage(message);
    const reply = wait();
    if (reply.error) throw new Error(reply.error);
    return reply.rows ?? [];
  };
  return {
    q: (name, text, values) => call({ name, text, values }),
    raw: (text) => void call({ text, values: [] }),
    end: () => void worker.terminate(),
  };
}

function posting(d: Driver, n: number): void {
  const a = `a${(n * 7) % 1000}`;
  const b = `a${(n * 7 + 1 + (n % 998)) % 1000}`;
  d.raw('BEGIN');
  d.q('ins', 'INSERT INTO bench_entry (tx, account, units) VALUES ($1, $2, $3)', [`t${n}`, a, '1.23']);
  d.q('ins', 'INSERT INTO bench_entry (tx, account, units) VALUES ($1, $2, $3)', [`t${n}`, b, '1.23']);
  d.q('dr', 'UPDATE bench_balance SET dr = dr + $2, version = version + 1 WHERE id = $1 RETURNING version', [
    a,
    '1.23',
  ]);
  d.q('cr', 'UPDATE bench_balance SET cr = cr + $2, version = version + 1 WHERE id = $1 RETURNING version', [
    b,
    '1.23',
  ]);
  d.q('sel', 'SELECT * FROM bench_balance WHERE id = $1', [a]);
  d.raw('COMMIT');
}

function time(fn: (i: number) => void, count: number): { wall: number; cpu: number } {
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  for (let i = 0; i < count; i++) fn(i);
  const c = process.cpuUsage(c0);
  return { wall: ((performance.now() - t0) * 1000) / count, cpu: (c.user + c.system) / count };
}

const setup = nativeDriver();
setup.raw(`DROP TABLE IF EXISTS bench_balance; DROP TABLE IF EXISTS bench_entry;
  CREATE TABLE bench_balance (id text PRIMARY KEY, dr numeric NOT NULL, cr numeric NOT NULL, version int NOT NULL);
  CREATE TABLE bench_entry (seq bigserial PRIMARY KEY, tx text NOT NULL, account text NOT NULL, units numeric NOT NULL);
  INSERT INTO bench_balance SELECT 'a' || g, 0, 0, 0 FROM generate_series(0, 999) g;`);
const settings = setup.q(
  'settings',
  "SELECT current_setting('server_version') AS v, current_setting('fsync') AS f, current_setting('synchronous_commit') AS s",
  [],
) as Array<Record<string, string>>;
console.log(
  `node ${process.version}, PostgreSQL ${settings[0]!.v} (fsync ${settings[0]!.f}, synchronous_commit ${settings[0]!.s}), ${ROUNDS} interleaved rounds`,
);

const drivers = { native: nativeDriver(), bridge: await bridgeDriver() };
const cases = {
  select: (d: Driver) => (i: number) => void d.q('sel', 'SELECT * FROM bench_balance WHERE id = $1', [`a${i % 1000}`]),
  posting: (d: Driver) => (i: number) => posting(d, i),
};
const samples: Record<string, { wall: number[]; cpu: number[] }> = {};
let serial = 0;
for (let round = 0; round <= ROUNDS; round++) {
  for (const [caseName, make] of Object.entries(cases)) {
    for (const [driverName, driver] of Object.entries(drivers)) {
      const base = (serial += 1_000_000);
      const result = time((i) => make(driver)(base + i), caseName === 'posting' ? N / 4 : N);
      if (round === 0) continue; // warm-up
      const key = `${caseName} ${driverName}`;
      samples[key] ??= { wall: [], cpu: [] };
      samples[key].wall.push(result.wall);
      samples[key].cpu.push(result.cpu);
    }
  }
}
for (const d of Object.values(drivers)) d.end();
setup.raw('DROP TABLE bench_balance; DROP TABLE bench_entry');
setup.end();

console.log('\n| operation | driver | wall µs | CPU µs (process) | wall ÷ pg-native |');
console.log('|---|---|---:|---:|---:|');
for (const caseName of Object.keys(cases)) {
  const native = median(samples[`${caseName} native`]!.wall);
  for (const driverName of Object.keys(drivers)) {
    const s = samples[`${caseName} ${driverName}`]!;
    console.log(
      `| ${caseName === 'select' ? 'prepared SELECT by key' : 'posting (BEGIN, 5 statements, COMMIT)'} | ${driverName === 'native' ? 'pg-native (libpq, sync)' : 'worker bridge over pg'} | ${median(s.wall).toFixed(1)} | ${median(s.cpu).toFixed(1)} | ${(median(s.wall) / native).toFixed(2)} |`,
    );
  }
}
