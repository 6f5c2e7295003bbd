import { parentPort, workerData } from 'node:worker_threads';
import { createEngine, type BatchRequest, type Engine, type EngineOptions, type RequestOptions } from '../engine.js';
import { EngineError, type ErrorData } from '../errors.js';
import type { AttemptOutcome } from '../execution/queue/attempt.js';
import type { Worker } from '../execution/queue/worker.js';
import type { ExecutionWait } from '../graphql/context.js';
import type { FormattedResult, GraphqlRequest } from '../graphql/executor.js';
import type { Limits } from '../limits.js';
import type { ModelCallSample, OutboundCallSample } from '../execution/services.js';
import { createLogger, type LogLevel } from '../log.js';

/**
 * The writer thread of `tally serve` (see writer-thread.ts): the engine that runs every mutation
 * (a group commit at a time), every query no read thread takes, and the queue worker, so that none
 * of their work (a tool running to its deadline) holds the HTTP thread, which only parses, routes
 * and replies. The write queue sends it one unit at a time per client, in turn; each message is
 * answered by synchronous work, in the order the messages came (nothing here waits on an
 * execution: the HTTP thread does). Its events (group commits, attempts, model calls, tool
 * changes) go back as messages for /metrics, MCP sessions and the HTTP thread's waits.
 */

/** What the server gives the thread when it starts it. */
export interface WriterWorkerData {
  path: string;
  durability?: 'normal' | 'full';
  limits?: Partial<Limits>;
  providers?: unknown;
  integrations?: unknown;
  mcpServers?: unknown;
  log: { level: LogLevel; pretty: boolean } | null;
  /** Run the queue worker here, as `owner`; null under --no-worker. */
  worker: { owner: string } | null;
}

export interface WriterSnapshot {
  stats: ReturnType<Engine['stats']> | null;
  /** Engine.readiness(): null when the database takes a write now / the sandbox is loaded, otherwise why not. */
  database: string | null;
  sandbox: string | null;
  /** Whether the queue worker runs (null: none here, --no-worker). */
  workerRunning: boolean | null;
}

/** What the engine reports as it works: sent with the next answer (one message, one wake-up), or on their own. */
export type WriterEvent =
  | { type: 'batch'; size: number }
  | { type: 'attempt'; outcome: AttemptOutcome }
  | { type: 'modelCall'; call: ModelCallSample }
  | { type: 'outboundCall'; call: OutboundCallSample }
  | { type: 'actionsChanged' };

/** Server → thread. */
export type ToWriterWorker =
  | { type: 'group'; id: number; group: BatchRequest[] }
  | { type: 'execute'; id: number; request: GraphqlRequest; options: RequestOptions }
  | { type: 'waits'; id: number; request: GraphqlRequest; options: RequestOptions }
  | { type: 'snapshot'; id: number }
  | { type: 'close' };

/** Thread → server. */
export type FromWriterWorker =
  | { type: 'ready' }
  | { type: 'startFailed'; error: ErrorData }
  | { type: 'group'; id: number; answers: Array<FormattedResult | null>; events?: WriterEvent[] }
  | { type: 'result'; id: number; result: FormattedResult }
  | { type: 'waits'; id: number; waits: ExecutionWait[] }
  | { type: 'snapshot'; id: number; snapshot: WriterSnapshot }
  | { type: 'events'; events: WriterEvent[] }
  | { type: 'log'; message: string }
  | { type: 'closed' };

const port = parentPort;
if (!port) throw new Error('writer-worker.ts runs as the writer thread of tally serve');
const data = workerData as WriterWorkerData;

function describe(error: unknown): string {
  return error instanceof Error ? (error.stack ?? error.message) : String(error);
}

function post(message: FromWriterWorker): void {
  try {
    port!.postMessage(message);
  } catch (error) {
    // A value the structured clone refuses: say so; a request's caller still gets an answer (see answer()).
    port!.postMessage({ type: 'log', message: describe(error) } satisfies FromWriterWorker);
    throw error;
  }
}

/** Events not yet sent: a group's answer carries them; otherwise they go on their own after this turn. */
let events: WriterEvent[] = [];
let eventsScheduled = false;
function report(event: WriterEvent): void {
  events.push(event);
  if (eventsScheduled) return;
  eventsScheduled = true;
  setImmediate(() => {
    eventsScheduled = false;
    if (events.length === 0) return;
    try {
      post({ type: 'events', events: takeEvents() });
    } catch {
      // Said in the log by post(); the events are dropped, the thread goes on.
    }
  });
}
function takeEvents(): WriterEvent[] {
  const taken = events;
  events = [];
  return taken;
}

let engine: Engine;
let worker: Worker | null = null;
try {
  const logger = data.log
    ? createLogger({ level: data.log.level, destination: process.stdout, pretty: data.log.pretty })
    : undefined;
  const options: EngineOptions = {
    path: data.path,
    ...(data.durability ? { durability: data.durability } : {}),
    ...(data.limits ? { limits: data.limits } : {}),
    ...(data.providers === undefined ? {} : { providers: data.providers as EngineOptions['providers'] }),
    ...(data.integrations === undefined ? {} : { integrations: data.integrations }),
    ...(data.mcpServers === undefined ? {} : { mcpServers: data.mcpServers }),
    ...(logger ? { logger } : { logError: (error: unknown) => post({ type: 'log', message: describe(error) }) }),
  };
  engine = await createEngine(options);
  engine.onBatch((size) => report({ type: 'batch', size }));
  engine.onAttempt((outcome) => report({ type: 'attempt', outcome }));
  engine.onModelCall((call) => report({ type: 'modelCall', call }));
  engine.onOutboundCall((call) => report({ type: 'outboundCall', call }));
  engine.onActionsChanged(() => report({ type: 'actionsChanged' }));
  if (data.worker) {
    const queueWorker = engine.createWorker({ owner: data.worker.owner });
    engine.onStarted(() => queueWorker.wake());
    queueWorker.start();
    worker = queueWorker;
  }
} catch (error) {
  const failure =
    error instanceof EngineError ? error.toData() : { code: 'INTERNAL' as const, message: describe(error) };
  port.postMessage({ type: 'startFailed', error: failure } satisfies FromWriterWorker);
  // The server terminates this thread: stay alive until it does, so the message above arrives.
  await new Promise<never>(() => setInterval(() => {}, 60_000));
}

/** An INTERNAL answer, shaped as the engine's own. */
function failed(message: string): FormattedResult {
  const failure = new EngineError('INTERNAL', message);
  return { data: null, errors: [{ message: failure.message, extensions: failure.extensions }] };
}

function answer(id: number, result: FormattedResult): void {
  try {
    post({ type: 'result', id, result });
  } catch (error) {
    post({
      type: 'result',
      id,
      result: failed(`the writer thread could not send the answer: ${(error as Error)?.message ?? String(error)}`),
    });
  }
}

function execute(id: number, request: GraphqlRequest, options: RequestOptions): void {
  let result: FormattedResult;
  try {
    result = engine.execute(request, options);
  } catch (error) {
    post({ type: 'log', message: describe(error) });
    result = failed(`the request failed: ${(error as Error)?.message ?? String(error)}`);
  }
  answer(id, result);
}

function waits(id: number, request: GraphqlRequest, options: RequestOptions): void {
  let found: ExecutionWait[] = [];
  try {
    found = engine.executionWaits(request, options);
  } catch (error) {
    // No waits: the request itself runs next, and tells what went wrong.
    post({ type: 'log', message: describe(error) });
  }
  post({ type: 'waits', id, waits: found });
}

function group(id: number, requests: BatchRequest[]): void {
  let answers: Array<FormattedResult | undefined>;
  try {
    answers = engine.executeGroup(requests);
  } catch (error) {
    // executeGroup answers failures itself; anything thrown is a bug, and must not strand a reply.
    post({ type: 'log', message: describe(error) });
    const failure = failed(`the write group failed: ${(error as Error)?.message ?? String(error)}`);
    answers = requests.map(() => failure);
  }
  const sent = answers.map((a) => a ?? null);
  const reported = takeEvents();
  try {
    post({ type: 'group', id, answers: sent, ...(reported.length ? { events: reported } : {}) });
  } catch (error) {
    // The group is committed: its clients must hear of it. Without the events (one may be what the clone refused).
    const failure = failed(
      `the writer thread could not send the answers: ${(error as Error)?.message ?? String(error)}`,
    );
    post({ type: 'group', id, answers: sent.map((a) => (a === null ? null : failure)) });
  }
}

port.on('message', (message: ToWriterWorker) => {
  switch (message.type) {
    case 'group':
      group(message.id, message.group);
      break;
    case 'execute':
      execute(message.id, message.request, message.options);
      break;
    case 'waits':
      waits(message.id, message.request, message.options);
      break;
    case 'snapshot':
      try {
        post({
          type: 'snapshot',
          id: message.id,
          snapshot: { stats: engine.stats(), ...engine.readiness(), workerRunning: worker ? worker.isRunning : null },
        });
      } catch (error) {
        post({
          type: 'snapshot',
          id: message.id,
          snapshot: {
            stats: null,
            database: null,
            sandbox: `the writer thread could not report: ${(error as Error)?.message ?? String(error)}`,
            workerRunning: worker ? worker.isRunning : null,
          },
        });
      }
      break;
    case 'close':
      // The running attempt finishes, then the engine closes.
      void Promise.allSettled([worker?.stop() ?? Promise.resolve()]).then(() => {
        engine.close();
        post({ type: 'closed' });
        port.close();
      });
      break;
  }
});
post({ type: 'ready' });
