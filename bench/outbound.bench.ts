/**
 * npm run bench:outbound
 *
 * What Tally adds around an outside call (DESIGN §11). The far end is a minimal node:http server in
 * a child process (so its CPU is counted on neither side) that reads the body and answers 201 with
 * a small JSON. Two ways of making the same calls, `concurrency` at a time:
 *
 *   tally   an http tool's executions, started (each startAction its own request transaction, not
 *           timed) and then drained by one worker in this process (engine on a SQLite file): per
 *           call the claim, the send counted in its own transaction, the request with its
 *           idempotency key and credentials, the answer read (bounded) and judged with CEL, and the
 *           outcome recorded; the worker keeps `concurrency` calls in flight (agentRunsConcurrentMax,
 *           agentRunsPerClientMax and the integration's concurrency all set to it);
 *   raw     `concurrency` loops of plain fetch with the same headers and body, reading the answer:
 *           no records, no checks.
 *
 * Interleaved rounds (the order flips every round), medians. calls/s is wall; CPU µs/call is this
 * process's user + system time over the calls (all its threads: the engine's checkpointer too).
 * "start" is the CPU of the startAction requests that queued the round's calls, per call, apart.
 * Every call must succeed (each execution SUCCEEDED, the server's count grown by exactly the calls
 * made), or the bench exits 1.
 *
 * Settings (environment): BENCH_CONCURRENCY (default 1,16), BENCH_CALLS per round and side (500),
 * BENCH_ROUNDS (5).
 */
import { spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { createEngine, type Engine } from '../src/engine.js';
import { benchProcesses, median, ok, stopChild, uuid } from './common.js';

const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? '1,16').split(',').map(Number);
const CALLS = Number(process.env.BENCH_CALLS ?? 500);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
process.env.BENCH_SINK_TOKEN = 'bench-sink-token-0123456789';

/** The far end: answers a POST 201 {id, status, key}; a GET answers {requests: n}, the POSTs so far. */
const SERVER = `
const { createServer } = require('node:http');
let n = 0;
const server = createServer((req, res) => {
  if (req.method === 'GET') {
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end(JSON.stringify({ requests: n }));
  }
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    JSON.parse(Buffer.concat(chunks).toString('utf8'));
    n++;
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: 'po_' + n, status: 'paid', key: req.headers['idempotency-key'] ?? null }));
  });
});
server.keepAliveTimeout = 60000;
server.listen(0, '127.0.0.1', () => console.log('listening on http://127.0.0.1:' + server.address().port));
`;

const { dir, children } = benchProcesses();
const server = spawn(process.execPath, ['-e', SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
children.add(server);
const url = await new Promise<string>((resolve, reject) => {
  let out = '';
  server.stdout!.on('data', (chunk: Buffer) => {
    out += chunk.toString();
    const match = /listening on (http:\/\/\S+)/.exec(out);
    if (match) resolve(match[1]!);
  });
  server.once('exit', () => reject(new Error(`the server exited: ${out}`)));
});
const served = async (): Promise<number> => ((await (await fetch(url)).json()) as { requests: number }).requests;

/** What each call sends: the same bytes on both sides. */
const bodyOf = (n: number) => ({ thing_id: uuid(n), amount: `${1 + (n % 500)}.${n % 100}`, currency: 'USD' });

const CREATE =
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }';
const START = `mutation($e: UUID!, $i: JSON) { actions { startAction(name: "send_thing", input: {executionId: $e, input: $i}) { status } } }`;

async function tallyEngine(concurrency: number): Promise<Engine> {
  const engine = await createEngine({
    path: join(dir, `outbound-${concurrency}.db`),
    integrations: [
      {
        name: 'sink',
        baseUrl: url,
        methods: ['POST'],
        paths: ['/things'],
        headers: { Authorization: { env: 'BENCH_SINK_TOKEN', prefix: 'Bearer ' } },
        concurrency,
        perClientConcurrency: concurrency,
      },
    ],
    limits: { agentRunsConcurrentMax: concurrency, agentRunsPerClientMax: concurrency },
  });
  ok(engine, CREATE, {
    id: uuid(777_001),
    input: {
      name: 'send_thing',
      kind: 'http',
      config: { integration: 'sink', method: 'POST', path: '/things' },
      // Sending is an operation: the tool must be allowed it, as every layer above an outside call.
      policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Integration'] }],
      tool: {
        description: 'Send a thing to the sink.',
        inputSchema: {
          type: 'object',
          properties: { thing_id: { type: 'string' }, amount: { type: 'string' }, currency: { type: 'string' } },
          required: ['thing_id', 'amount', 'currency'],
        },
      },
    },
  });
  return engine;
}

interface Figures {
  perSecond: number;
  cpuUs: number;
  startCpuUs?: number;
}

async function timed(count: number, run: () => Promise<void>): Promise<Figures> {
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  await run();
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  return { perSecond: count / seconds, cpuUs: (cpu.user + cpu.system) / count };
}

/** `count` calls as started executions, drained by one worker; every one must succeed. */
async function tallyRound(engine: Engine, first: number, count: number): Promise<Figures> {
  const cpu0 = process.cpuUsage();
  for (let n = first; n < first + count; n++) ok(engine, START, { e: uuid(n), i: bodyOf(n) });
  const startCpu = process.cpuUsage(cpu0);
  const before = await served();
  const worker = engine.createWorker({ owner: 'bench' });
  const figures = await timed(count, async () => {
    await worker.drainAll();
  });
  const ended = engine.db
    .prepare(
      "SELECT count(*) AS n, sum(status = 'SUCCEEDED') AS ok FROM executions WHERE kind = 'HTTP' AND execution_id >= ? AND execution_id <= ?",
    )
    .get(uuid(first), uuid(first + count - 1)) as { n: number; ok: number };
  const sent = (await served()) - before;
  if (ended.n !== count || ended.ok !== count || sent !== count)
    throw new Error(`tally: ${ended.ok} of ${count} calls succeeded, ${sent} requests served`);
  return { ...figures, startCpuUs: (startCpu.user + startCpu.system) / count };
}

/** The same calls with plain fetch, `concurrency` at a time. */
async function rawRound(concurrency: number, first: number, count: number): Promise<Figures> {
  const before = await served();
  let next = first;
  const lane = async () => {
    while (next < first + count) {
      const n = next++;
      const response = await fetch(`${url}/things`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${process.env.BENCH_SINK_TOKEN}`,
          'idempotency-key': uuid(n),
          'content-type': 'application/json',
          accept: 'application/json',
        },
        body: JSON.stringify(bodyOf(n)),
        redirect: 'manual',
      });
      const answer = JSON.parse(await response.text()) as { id?: string };
      if (response.status !== 201 || !answer.id) throw new Error(`raw: HTTP ${response.status}`);
    }
  };
  const figures = await timed(count, () => Promise.all(Array.from({ length: concurrency }, lane)).then(() => {}));
  const sent = (await served()) - before;
  if (sent !== count) throw new Error(`raw: ${sent} requests served for ${count} calls`);
  return figures;
}

console.log(
  `node ${process.version}, NODE_ENV=${process.env.NODE_ENV}; ${ROUNDS} interleaved rounds of ${CALLS} calls per side; the server in a child process; load average ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
console.log(
  '\n| concurrency | path | calls/s | × raw | CPU µs/call | CPU µs/call − raw |\n|---:|---|---:|---:|---:|---:|',
);
const notes: string[] = [];
let id = 1_000_000;
for (const concurrency of CONCURRENCY) {
  const engine = await tallyEngine(concurrency);
  // Warm-up: compiled CEL and schemas, the sandbox-free http path, the connection pool.
  await tallyRound(engine, (id += 1_000_000), Math.min(100, CALLS));
  await rawRound(concurrency, (id += 1_000_000), Math.min(100, CALLS));
  const results: Record<'tally' | 'raw', Figures[]> = { tally: [], raw: [] };
  const ratios: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const sides: Array<'tally' | 'raw'> = round % 2 === 0 ? ['tally', 'raw'] : ['raw', 'tally'];
    const got: Partial<Record<'tally' | 'raw', Figures>> = {};
    for (const side of sides) {
      const first = (id += 1_000_000);
      got[side] = side === 'tally' ? await tallyRound(engine, first, CALLS) : await rawRound(concurrency, first, CALLS);
      results[side].push(got[side]!);
    }
    ratios.push(got.tally!.perSecond / got.raw!.perSecond);
  }
  engine.close();
  const of = (side: 'tally' | 'raw', key: keyof Figures) => median(results[side].map((r) => r[key] ?? 0));
  const raw = { perSecond: of('raw', 'perSecond'), cpuUs: of('raw', 'cpuUs') };
  const tally = { perSecond: of('tally', 'perSecond'), cpuUs: of('tally', 'cpuUs') };
  console.log(
    `| ${concurrency} | tally: started http tool, drained by one worker | ${tally.perSecond.toFixed(0)} | ${median(ratios).toFixed(2)} | ${tally.cpuUs.toFixed(0)} | ${(tally.cpuUs - raw.cpuUs).toFixed(0)} |`,
  );
  console.log(`| ${concurrency} | raw: fetch loop | ${raw.perSecond.toFixed(0)} | 1.00 | ${raw.cpuUs.toFixed(0)} | |`);
  notes.push(
    `concurrency ${concurrency}: startAction (not in the figures above) ${of('tally', 'startCpuUs').toFixed(0)} CPU µs per call; tally calls/s by round ${results.tally.map((r) => r.perSecond.toFixed(0)).join(', ')}; raw ${results.raw.map((r) => r.perSecond.toFixed(0)).join(', ')}`,
  );
}
console.log(`\n× raw is the median of the rounds' own ratios.\n${notes.join('\n')}`);
await stopChild(server);
