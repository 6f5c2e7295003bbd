/**
 * npm run bench:agents
 *
 * What Tally adds around a model call. An agent run of two model turns (the first asks for one
 * transfer, the second answers) against the scripted model server in a child process (so its CPU
 * is not counted here), one run at a time, compared with a minimal agent loop doing the same work
 * by hand: the same two chat-completion requests with fetch, and the posting with raw
 * better-sqlite3, recording nothing. Interleaved rounds, medians. The difference per turn is
 * Tally's overhead: the SDK client, the lease, recording each turn and the tool call, the invoke
 * of the tool (sandbox, GraphQL, ledger), and the claim and the outcome of the run.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import type { Engine } from '../src/engine.js';
import { benchDir, median, ok, pair, rawPoster, setupEngine, uuid } from './common.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const PER_ROUND = Number(process.env.BENCH_RUNS ?? 100);

const server = spawn(
  process.execPath,
  [
    join(import.meta.dirname, '..', 'examples', 'scripted-model', 'server.mjs'),
    '--port',
    '0',
    '--rules',
    join(import.meta.dirname, 'model-rules.mjs'),
  ],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
const url = await new Promise<string>((resolve, reject) => {
  let out = '';
  server.stdout!.on('data', (chunk: Buffer) => {
    out += chunk.toString();
    const match = /listening on (http:\/\/\S+)/.exec(out);
    if (match) resolve(match[1]!);
  });
  server.once('exit', () => reject(new Error(`the scripted model exited: ${out}`)));
});

const { dir, cleanup } = benchDir();
// setupEngine's TRANSFER tran code and accounts, with the scripted model as the provider.
const engine: Engine = await setupEngine(join(dir, 'agents.db'), {
  providers: [{ name: 'local', format: 'openai', baseUrl: `${url}/v1`, models: ['bench'] }],
});
const CREATE =
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }';
ok(engine, CREATE, {
  id: uuid(777_001),
  input: {
    name: 'post',
    config: {
      runtime: 'javascript',
      src: `function run(event) {
  const n = event.data.n;
  graphql("mutation Post($input: TransactionInput!) { postTransaction(input: $input) { transactionId } }",
    { input: { transactionId: cel("uuid.New()"), tranCode: "TRANSFER", params: { from: event.data.from, to: event.data.to, amount: "1.00" } } });
  return { posted: n };
}`,
    },
    tool: {
      description: 'Post one transfer.',
      inputSchema: {
        type: 'object',
        properties: { n: { type: 'integer' }, from: { type: 'string' }, to: { type: 'string' } },
        required: ['n'],
      },
    },
    policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }],
  },
});
ok(engine, CREATE, {
  id: uuid(777_002),
  input: {
    name: 'agent',
    kind: 'agent',
    config: { provider: 'local', model: 'bench', instructions: 'Post the transfer asked for.', prompt: 'run {{n}}' },
    tool: {
      description: 'Posts one transfer.',
      inputSchema: {
        type: 'object',
        properties: { n: { type: 'integer' }, from: { type: 'string' }, to: { type: 'string' } },
      },
    },
    tools: [{ name: 'post', version: 1, input: { from: 'execution.input.from', to: 'execution.input.to' } }],
    policies: [
      { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
    ],
  },
});
const worker = engine.createWorker({ owner: 'bench' });
const START = `mutation($e: UUID!, $i: JSON) { actions { startAction(id: "${uuid(777_002)}", input: {executionId: $e, input: $i}) { status } } }`;

async function tallyRun(n: number): Promise<void> {
  const [from, to] = pair(n);
  ok(engine, START, { e: uuid(n), i: { n, from, to } });
  await worker.drainAll();
}

const raw = rawPoster(join(dir, 'raw.db'));
const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'post',
      description: 'Post one transfer.',
      parameters: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
    },
  },
];
async function chat(messages: unknown[]): Promise<any> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer none' },
    body: JSON.stringify({ model: 'bench', messages, tools: TOOLS, max_tokens: 1024 }),
  });
  return response.json();
}
/** The same two turns and the posting, by hand: no records, no authority, no sandbox. */
async function rawRun(n: number): Promise<void> {
  const messages: unknown[] = [
    { role: 'system', content: 'Post the transfer asked for.' },
    { role: 'user', content: `run ${n}` },
  ];
  const first = await chat(messages);
  const call = first.choices[0].message.tool_calls[0];
  raw.post(n);
  messages.push(first.choices[0].message, {
    role: 'tool',
    tool_call_id: call.id,
    content: JSON.stringify({ posted: JSON.parse(call.function.arguments).n }),
  });
  const second = await chat(messages);
  if (second.choices[0].message.content !== 'done') throw new Error('unexpected answer');
}

async function measure(count: number, start: number, run: (n: number) => Promise<void>) {
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < count; i++) await run(start + i);
  const wallMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const cpu = process.cpuUsage(cpu0);
  return { perSecond: (count * 1000) / wallMs, msPerRun: wallMs / count, cpuUs: (cpu.user + cpu.system) / count };
}

const sides = { raw: rawRun, tally: tallyRun };
const results: Record<string, Array<{ perSecond: number; msPerRun: number; cpuUs: number }>> = { raw: [], tally: [] };
await measure(30, 90_000_000, rawRun);
await measure(30, 91_000_000, tallyRun);
for (let round = 0; round < ROUNDS; round++) {
  for (const [i, [name, run]] of Object.entries(sides).entries())
    results[name]!.push(await measure(PER_ROUND, (i + 1) * 10_000_000 + round * PER_ROUND, run));
}
// Every run posted once and succeeded: the figures are of the work, not of failures.
const runs = engine.db
  .prepare("SELECT count(*) AS n, sum(status = 'SUCCEEDED') AS ok FROM executions WHERE kind = 'AGENT'")
  .get() as { n: number; ok: number };
const posted = (engine.db.prepare('SELECT count(*) AS n FROM transactions').get() as { n: number }).n;
if (runs.ok !== runs.n || posted !== runs.n)
  throw new Error(`${runs.ok} of ${runs.n} runs succeeded, ${posted} postings`);
const summary = Object.fromEntries(
  Object.entries(results).map(([name, rs]) => [
    name,
    {
      perSecond: median(rs.map((r) => r.perSecond)),
      msPerRun: median(rs.map((r) => r.msPerRun)),
      cpuUs: median(rs.map((r) => r.cpuUs)),
    },
  ]),
);
const turns = 2;
console.log(
  `node ${process.version}, ${ROUNDS} interleaved rounds of ${PER_ROUND} runs, one at a time; model server in a child process`,
);
console.log(
  '\n| path (one agent run: 2 model turns, 1 tool call that posts) | runs/s | × raw | ms/run | CPU µs/run |\n|---|---:|---:|---:|---:|',
);
for (const [name, s] of Object.entries(summary)) {
  console.log(
    `| ${name === 'raw' ? 'raw: fetch × 2 + better-sqlite3 posting, nothing recorded' : 'tally: startAction + worker (lease, 2 turns recorded, invoke recorded, outcome)'} | ${s.perSecond.toFixed(0)} | ${(s.perSecond / summary.raw!.perSecond).toFixed(2)} | ${s.msPerRun.toFixed(2)} | ${s.cpuUs.toFixed(0)} |`,
  );
}
const t = summary.tally!;
const r = summary.raw!;
console.log(
  `\nTally's overhead per model turn: ${((t.msPerRun - r.msPerRun) / turns).toFixed(2)} ms wall, ${((t.cpuUs - r.cpuUs) / turns).toFixed(0)} µs CPU (the tool's own invoke included, split over the turns)`,
);
engine.close();
raw.close();
server.kill();
cleanup();
