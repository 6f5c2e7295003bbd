import { parentPort, workerData } from 'node:worker_threads';
import { createEngine, type Engine } from '../engine.js';
import { EngineError, type ErrorData } from '../errors.js';
import type { ExecutionWait } from '../graphql/context.js';
import type { FormattedResult, GraphqlRequest } from '../graphql/executor.js';
import type { Limits } from '../limits.js';

/**
 * One thread of the read pool (see read-pool.ts): a read-only engine on the writer's database file,
 * answering the queries the pool posts, one message each, synchronously: engine.execute, or
 * engine.executionWaits for a query that asks to wait (the wait itself is the HTTP thread's).
 */

/** What the pool gives the thread when it starts it. */
export interface ReadWorkerData {
  path: string;
  limits?: Partial<Limits>;
  providers?: unknown;
}

/** Pool → thread. */
export type ToReadWorker =
  | { type: 'run'; id: number; mode: 'execute' | 'waits'; request: GraphqlRequest; options: ReadWorkerRequestOptions }
  /** Close the engine and end the thread. */
  | { type: 'close' };

export interface ReadWorkerRequestOptions {
  apiKey?: string;
  principal?: string;
}

/** Thread → pool. */
export type FromReadWorker =
  | { type: 'ready' }
  | { type: 'startFailed'; error: ErrorData }
  | { type: 'result'; id: number; result: FormattedResult }
  | { type: 'waits'; id: number; waits: ExecutionWait[] }
  | { type: 'log'; message: string };

const port = parentPort;
if (!port) throw new Error('read-worker.ts runs as a worker thread of the read pool');
const data = workerData as ReadWorkerData;

function describe(error: unknown): string {
  return error instanceof Error ? (error.stack ?? error.message) : String(error);
}

function post(message: FromReadWorker): void {
  port!.postMessage(message);
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
  const failure =
    error instanceof EngineError ? error.toData() : { code: 'INTERNAL' as const, message: describe(error) };
  port.postMessage({ type: 'startFailed', error: failure } satisfies FromReadWorker);
  // The pool terminates this thread: stay alive until it does, so the message above arrives.
  await new Promise<never>(() => setInterval(() => {}, 60_000));
}

function run(id: number, mode: 'execute' | 'waits', request: GraphqlRequest, options: ReadWorkerRequestOptions): void {
  if (mode === 'waits') {
    let waits: ExecutionWait[] = [];
    try {
      waits = engine.executionWaits(request, options);
    } catch (error) {
      // No waits: the query itself runs next, and tells what went wrong.
      post({ type: 'log', message: describe(error) });
    }
    post({ type: 'waits', id, waits });
    return;
  }
  let result: FormattedResult;
  try {
    result = engine.execute(request, options);
  } catch (error) {
    post({ type: 'log', message: describe(error) });
    result = failed(`the read failed: ${(error as Error)?.message ?? String(error)}`);
  }
  try {
    post({ type: 'result', id, result });
  } catch (error) {
    // A value the structured clone refuses: the answer is lost, the caller still gets one.
    post({ type: 'log', message: describe(error) });
    post({
      type: 'result',
      id,
      result: failed(`the read thread could not send the answer: ${(error as Error)?.message ?? String(error)}`),
    });
  }
}

port.on('message', (message: ToReadWorker) => {
  switch (message.type) {
    case 'run':
      run(message.id, message.mode, message.request, message.options);
      break;
    case 'close':
      // Nothing runs between messages: the engine closes and the thread ends.
      engine.close();
      port.close();
      break;
  }
});
post({ type: 'ready' });

/** An INTERNAL answer, shaped as the engine's own. */
function failed(message: string): FormattedResult {
  const failure = new EngineError('INTERNAL', message);
  return { data: null, errors: [{ message: failure.message, extensions: failure.extensions }] };
}
