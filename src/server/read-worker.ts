import { parentPort, workerData } from 'node:worker_threads';
import { createEngine, type Engine } from '../engine.js';
import { EngineError, type ErrorData } from '../errors.js';
import type { FormattedResult, GraphqlRequest } from '../graphql/executor.js';
import type { Limits } from '../limits.js';

/**
 * One thread of the read pool (see read-pool.ts): a read-only engine on the writer's database file,
 * answering the queries the pool posts, one message each, with engine.executeAsync (a query that
 * waits on an execution waits here, outside any transaction, as it would on the writer).
 */

/** What the pool gives the thread when it starts it. */
export interface ReadWorkerData {
  path: string;
  limits?: Partial<Limits>;
  providers?: unknown;
}

/** Pool → thread. */
export type ToReadWorker =
  | { type: 'run'; id: number; request: GraphqlRequest; options: ReadWorkerRequestOptions }
  /** The caller's signal fired: end the request's waits (it then answers at once). */
  | { type: 'cancel'; id: number }
  /** Close the engine and end the thread. */
  | { type: 'close' };

export interface ReadWorkerRequestOptions {
  apiKey?: string;
  principal?: string;
  waitMsMax?: number;
}

/** Thread → pool. */
export type FromReadWorker =
  | { type: 'ready' }
  | { type: 'startFailed'; error: ErrorData }
  | { type: 'result'; id: number; result: FormattedResult }
  /** The request ran its first pass and now waits on executions: it no longer occupies the thread. */
  | { type: 'waiting'; id: number }
  | { type: 'log'; message: string };

const port = parentPort;
if (!port) throw new Error('read-worker.ts runs as a worker thread of the read pool');
const data = workerData as ReadWorkerData;

function describe(error: unknown): string {
  return error instanceof Error ? (error.stack ?? error.message) : String(error);
}

const controllers = new Map<number, AbortController>();
const inFlight = new Map<number, Promise<void>>();
/** Set by 'close': what the requests still in flight would say goes nowhere (the pool answered them). */
let closing = false;

function post(message: FromReadWorker): void {
  if (!closing) port!.postMessage(message);
}

let engine: Engine;
try {
  engine = await createEngine({
    path: data.path,
    readOnly: true,
    ...(data.limits ? { limits: data.limits } : {}),
    ...(data.providers === undefined ? {} : { providers: data.providers }),
    logError: (error) => post({ type: 'log', message: describe(error) }),
  });
} catch (error) {
  const failure = error instanceof EngineError ? error.toData() : { code: 'INTERNAL' as const, message: describe(error) };
  port.postMessage({ type: 'startFailed', error: failure } satisfies FromReadWorker);
  // The pool terminates this thread: stay alive until it does, so the message above arrives.
  await new Promise<never>(() => setInterval(() => {}, 60_000));
}

function run(id: number, request: GraphqlRequest, options: ReadWorkerRequestOptions): void {
  const controller = new AbortController();
  controllers.set(id, controller);
  let settled = false;
  const answer = (result: FormattedResult) => {
    settled = true;
    controllers.delete(id);
    try {
      post({ type: 'result', id, result });
    } catch (error) {
      // A value the structured clone refuses: the answer is lost, the caller still gets one.
      post({ type: 'log', message: describe(error) });
      post({ type: 'result', id, result: failed(`the read thread could not send the answer: ${(error as Error)?.message ?? String(error)}`) });
    }
  };
  const done = engine
    .executeAsync(request, { ...options, signal: controller.signal })
    .then(answer, (error: unknown) => {
      post({ type: 'log', message: describe(error) });
      answer(failed(`the read failed: ${(error as Error)?.message ?? String(error)}`));
    })
    .finally(() => inFlight.delete(id));
  inFlight.set(id, done);
  // executeAsync answered its first pass synchronously; if no answer came by the next turn of the
  // loop, the query waits on an execution (a timer, no transaction): the thread is free for others.
  setImmediate(() => {
    if (!settled) post({ type: 'waiting', id });
  });
}

port.on('message', (message: ToReadWorker) => {
  switch (message.type) {
    case 'run':
      run(message.id, message.request, message.options);
      break;
    case 'cancel':
      controllers.get(message.id)?.abort();
      break;
    case 'close':
      // What runs answers at once (its waits cut short), then the engine closes and the thread ends.
      for (const controller of controllers.values()) controller.abort();
      void Promise.allSettled(inFlight.values()).then(() => {
        closing = true;
        engine.close();
        port.close();
      });
      break;
  }
});
post({ type: 'ready' });

/** An INTERNAL answer, shaped as the engine's own. */
function failed(message: string): FormattedResult {
  const failure = new EngineError('INTERNAL', message);
  return { data: null, errors: [{ message: failure.message, extensions: failure.extensions }] };
}
