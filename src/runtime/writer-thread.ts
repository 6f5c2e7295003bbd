import { resolve as resolvePath } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { BatchRequest, Engine, RequestOptions } from '../engine.js';
import { EngineError } from '../errors.js';
import type { AttemptOutcome } from '../execution/queue/attempt.js';
import type { ModelCallSample, OutboundCallSample } from '../execution/services.js';
import type { ExecutionWait } from '../graphql/context.js';
import { errorAnswer, type FormattedResult, type GraphqlRequest } from '../graphql/executor.js';
import { resolveLimits } from '../limits.js';
import type {
  FromWriterWorker,
  ToWriterWorker,
  WriterEvent,
  WriterSnapshot,
  WriterWorkerData,
} from './writer-worker.js';

const BOOT = new URL('./writer-worker-boot.mjs', import.meta.url);
/** How long close() waits for the thread to finish its attempt and close its engine before terminating it. */
const CLOSE_WAIT_MS = 10_000;
/** How long snapshot() waits for a busy thread before it gives the last snapshot the thread sent. */
const SNAPSHOT_WAIT_MS = 50;

/**
 * The writer: where the server runs what no read thread takes. Mutations a group commit at a time,
 * and queries (when there is no read pool) one at a time, each when the write queue gives it its
 * turn (src/runtime/write-queue.ts: nothing reaches the writer any other way). The engine itself
 * in-process; the writer thread under `tally serve` (see WriterThread). Nothing here waits: a
 * query's waits on executions are the HTTP thread's (engine.awaitExecutions).
 */
export interface Executor {
  executeGroup(
    group: ReadonlyArray<BatchRequest>,
  ): Array<FormattedResult | undefined> | Promise<Array<FormattedResult | undefined>>;
  /** One request alone: engine.execute. */
  execute(request: GraphqlRequest, options?: RequestOptions): FormattedResult | Promise<FormattedResult>;
  /** The executions a query asks to wait on: engine.executionWaits. */
  executionWaits(request: GraphqlRequest, options?: RequestOptions): ExecutionWait[] | Promise<ExecutionWait[]>;
  onBatch(listener: (size: number) => void): void;
  onAttempt(listener: (outcome: AttemptOutcome) => void): void;
  onModelCall(listener: (call: ModelCallSample) => void): void;
  onOutboundCall(listener: (call: OutboundCallSample) => void): void;
  onActionsChanged(listener: () => void): void;
  /** Caches, sandbox and queue worker of the engine that runs requests (for /metrics and /readyz). */
  snapshot(): WriterSnapshot | Promise<WriterSnapshot>;
}

/** The engine as its own executor (in-process: tests, embedders); `worker` is the server's in-process queue worker. */
export function engineExecutor(engine: Engine, worker?: { readonly isRunning: boolean }): Executor {
  return {
    executeGroup: (group) => engine.executeGroup(group),
    execute: (request, options) => engine.execute(request, options),
    executionWaits: (request, options) => engine.executionWaits(request, options),
    onBatch: (listener) => engine.onBatch(listener),
    onAttempt: (listener) => engine.onAttempt(listener),
    onModelCall: (listener) => engine.onModelCall(listener),
    onOutboundCall: (listener) => engine.onOutboundCall(listener),
    onActionsChanged: (listener) => engine.onActionsChanged(listener),
    snapshot: () => ({ stats: engine.stats(), ...engine.readiness(), workerRunning: worker ? worker.isRunning : null }),
  };
}

/**
 * The executor the server holds: the engine until `tally serve`'s writer thread is up (it starts
 * after the server listens, as the read pool does), then the thread. Listeners hear the events of
 * both (the engine's queue worker finishes its attempt after the switch).
 */
export class ExecutorSwitch implements Executor {
  private current: Executor;
  private readonly batch: Array<(size: number) => void> = [];
  private readonly attempt: Array<(outcome: AttemptOutcome) => void> = [];
  private readonly modelCall: Array<(call: ModelCallSample) => void> = [];
  private readonly outboundCall: Array<(call: OutboundCallSample) => void> = [];
  private readonly actionsChanged: Array<() => void> = [];

  constructor(initial: Executor) {
    this.current = initial;
    this.listen(initial);
  }

  /** From now on, run everything on `next`. */
  switchTo(next: Executor): void {
    this.listen(next);
    this.current = next;
  }

  get target(): Executor {
    return this.current;
  }

  private listen(executor: Executor): void {
    executor.onBatch((size) => this.batch.forEach((l) => l(size)));
    executor.onAttempt((outcome) => this.attempt.forEach((l) => l(outcome)));
    executor.onModelCall((call) => this.modelCall.forEach((l) => l(call)));
    executor.onOutboundCall((call) => this.outboundCall.forEach((l) => l(call)));
    executor.onActionsChanged(() => this.actionsChanged.forEach((l) => l()));
  }

  executeGroup(group: ReadonlyArray<BatchRequest>) {
    return this.current.executeGroup(group);
  }

  execute(request: GraphqlRequest, options?: RequestOptions) {
    return this.current.execute(request, options);
  }

  executionWaits(request: GraphqlRequest, options?: RequestOptions) {
    return this.current.executionWaits(request, options);
  }

  snapshot() {
    return this.current.snapshot();
  }

  onBatch(listener: (size: number) => void): void {
    this.batch.push(listener);
  }

  onAttempt(listener: (outcome: AttemptOutcome) => void): void {
    this.attempt.push(listener);
  }

  onModelCall(listener: (call: ModelCallSample) => void): void {
    this.modelCall.push(listener);
  }

  onOutboundCall(listener: (call: OutboundCallSample) => void): void {
    this.outboundCall.push(listener);
  }

  onActionsChanged(listener: () => void): void {
    this.actionsChanged.push(listener);
  }
}

export interface WriterThreadOptions extends Omit<WriterWorkerData, 'path'> {
  /** The database file; it must exist (the server's own engine created and migrated it). */
  path: string;
  /** Where the thread's unexpected errors (and its death) are reported. */
  logError: (error: unknown) => void;
}

/**
 * The writer engine on a worker thread of its own (see writer-worker.ts). Every call is a message;
 * answers come back by id. A thread that dies answers what it held INTERNAL (nothing it did
 * uncommitted survives: SQLite rolls back an open transaction of a connection that goes away) and
 * is not restarted: the server then says so on /readyz and the operator restarts it, as with a
 * crashed process.
 */
export class WriterThread implements Executor {
  private nextId = 1;
  private readonly pending = new Map<number, { kind: Kind; size: number; resolve(value: unknown): void }>();
  private readonly listeners = {
    batch: [] as Array<(size: number) => void>,
    attempt: [] as Array<(outcome: AttemptOutcome) => void>,
    modelCall: [] as Array<(call: ModelCallSample) => void>,
    outboundCall: [] as Array<(call: OutboundCallSample) => void>,
    actionsChanged: [] as Array<() => void>,
  };
  private failure: string | null = null;
  private lastSnapshot: WriterSnapshot | null = null;
  private closed: Promise<void> | null = null;
  private exited!: Promise<void>;

  /** The snapshot asked of the thread and not yet answered: callers share it (a /readyz flood is one message). */
  private snapshotAsked: Promise<WriterSnapshot> | null = null;

  private constructor(
    private readonly worker: Worker,
    private readonly logError: (error: unknown) => void,
  ) {}

  /** Start the thread and wait until its engine is open (and its queue worker started). */
  static async start(options: WriterThreadOptions): Promise<WriterThread> {
    const { logError, ...rest } = options;
    const data: WriterWorkerData = { ...rest, path: resolvePath(options.path) };
    const worker = new Worker(BOOT, { workerData: data });
    // Limits the thread's engine would refuse are refused here first, before the thread starts.
    resolveLimits(options.limits);
    const thread = new WriterThread(worker, logError);
    thread.exited = new Promise((resolve) => worker.once('exit', () => resolve()));
    await new Promise<void>((resolve, reject) => {
      worker.on('message', (message: FromWriterWorker) => {
        if (message.type === 'ready') return resolve();
        if (message.type === 'startFailed') {
          void worker.terminate();
          const { code, message: text, hint } = message.error;
          return reject(new EngineError(code, text, hint === undefined ? {} : { hint }));
        }
        thread.receive(message);
      });
      worker.once('error', (error) => {
        thread.died(`the writer thread failed: ${error.message}`);
        logError(error);
        reject(error);
      });
      worker.once('exit', (code) => {
        thread.died(`the writer thread ended (exit code ${code})`);
        reject(new Error(`the writer thread ended before it was ready (exit code ${code})`));
      });
    });
    await thread.snapshot();
    return thread;
  }

  /** Why the thread no longer answers, or null while it runs. */
  get failed(): string | null {
    return this.failure;
  }

  executeGroup(group: ReadonlyArray<BatchRequest>): Promise<Array<FormattedResult | undefined>> {
    const requests = group.map(({ request, options }) => ({
      request: plainRequest(request),
      ...(options ? { options: { ...options } } : {}),
    }));
    return this.call<Array<FormattedResult | undefined>>('group', group.length, (id) => ({
      type: 'group',
      id,
      group: requests,
    }));
  }

  execute(request: GraphqlRequest, options: RequestOptions = {}): Promise<FormattedResult> {
    return this.call<FormattedResult>('result', 1, (id) => ({
      type: 'execute',
      id,
      request: plainRequest(request),
      options: { ...options },
    }));
  }

  executionWaits(request: GraphqlRequest, options: RequestOptions = {}): Promise<ExecutionWait[]> {
    return this.call<ExecutionWait[]>('waits', 1, (id) => ({
      type: 'waits',
      id,
      request: plainRequest(request),
      options: { ...options },
    }));
  }

  /**
   * The thread's caches, sandbox, database lock and queue worker. A thread busy with a request (a
   * tool running to its deadline) answers after it: then the last snapshot it sent is given after
   * SNAPSHOT_WAIT_MS, so /readyz and /metrics never wait behind a tool.
   */
  snapshot(): Promise<WriterSnapshot> {
    const fresh = (this.snapshotAsked ??= this.call<WriterSnapshot>('snapshot', 0, (id) => ({
      type: 'snapshot',
      id,
    })).then((snapshot) => {
      this.snapshotAsked = null;
      if (snapshot.stats !== null) this.lastSnapshot = snapshot;
      return snapshot;
    }));
    const last = this.lastSnapshot;
    if (!last) return fresh;
    let timer: NodeJS.Timeout | undefined;
    const stale = new Promise<WriterSnapshot>((resolve) => (timer = setTimeout(() => resolve(last), SNAPSHOT_WAIT_MS)));
    return Promise.race([fresh, stale]).finally(() => clearTimeout(timer));
  }

  onBatch(listener: (size: number) => void): void {
    this.listeners.batch.push(listener);
  }

  onAttempt(listener: (outcome: AttemptOutcome) => void): void {
    this.listeners.attempt.push(listener);
  }

  onModelCall(listener: (call: ModelCallSample) => void): void {
    this.listeners.modelCall.push(listener);
  }

  onOutboundCall(listener: (call: OutboundCallSample) => void): void {
    this.listeners.outboundCall.push(listener);
  }

  onActionsChanged(listener: () => void): void {
    this.listeners.actionsChanged.push(listener);
  }

  /** What the thread was sent is answered, the running attempt finishes, the engine closes, the thread ends. */
  close(): Promise<void> {
    if (this.closed) return this.closed;
    this.closed = (async () => {
      if (this.failure === null) this.send({ type: 'close' });
      const timer = setTimeout(() => void this.worker.terminate(), CLOSE_WAIT_MS);
      await this.exited;
      clearTimeout(timer);
    })();
    return this.closed;
  }

  private call<T>(kind: Kind, size: number, message: (id: number) => ToWriterWorker): Promise<T> {
    if (this.failure !== null || this.closed) return Promise.resolve(this.unavailable(kind, size, 'notSent') as T);
    const id = this.nextId++;
    return new Promise<T>((resolve) => {
      this.pending.set(id, { kind, size, resolve: resolve as (value: unknown) => void });
      this.send(message(id));
    });
  }

  private send(message: ToWriterWorker): void {
    try {
      this.worker.postMessage(message);
    } catch (error) {
      // A request the structured clone refuses (it came from JSON: it cannot happen) is a bug: answer it anyway.
      this.logError(error);
      if ('id' in message) this.settle(message.id, undefined, 'notSent', error);
    }
  }

  private receive(message: FromWriterWorker): void {
    switch (message.type) {
      case 'group':
        // The events first: a listener (metrics) counts the group before its clients hear of it.
        if (message.events) this.dispatchEvents(message.events);
        return this.settle(
          message.id,
          message.answers.map((a) => a ?? undefined),
        );
      case 'result':
        return this.settle(message.id, message.result);
      case 'waits':
        return this.settle(message.id, message.waits);
      case 'snapshot':
        return this.settle(message.id, message.snapshot);
      case 'events':
        return this.dispatchEvents(message.events);
      case 'log':
        return this.logError(new Error(`writer thread: ${message.message}`));
      case 'closed':
        return;
    }
  }

  private dispatchEvents(events: WriterEvent[]): void {
    for (const event of events) {
      switch (event.type) {
        case 'batch':
          for (const listener of this.listeners.batch) listener(event.size);
          break;
        case 'attempt':
          for (const listener of this.listeners.attempt) listener(event.outcome);
          break;
        case 'modelCall':
          for (const listener of this.listeners.modelCall) listener(event.call);
          break;
        case 'outboundCall':
          for (const listener of this.listeners.outboundCall) listener(event.call);
          break;
        case 'actionsChanged':
          for (const listener of this.listeners.actionsChanged) listener();
          break;
      }
    }
  }

  private settle(id: number, value: unknown, reason: 'notSent' | 'lost' = 'lost', cause?: unknown): void {
    const waiting = this.pending.get(id);
    if (!waiting) return;
    this.pending.delete(id);
    waiting.resolve(value === undefined ? this.unavailable(waiting.kind, waiting.size, reason, cause) : value);
  }

  /** The thread is gone: everything it held is answered INTERNAL (whether it committed is unknown), later calls too. */
  private died(reason: string): void {
    if (this.failure !== null) return;
    this.failure = reason;
    if (!this.closed) this.logError(new Error(reason));
    for (const id of [...this.pending.keys()]) this.settle(id, undefined);
  }

  /**
   * The answer to a call the thread will not answer: `notSent`, it never reached the thread (the
   * server shutting down, the thread gone, or a request that could not be sent: nothing ran);
   * `lost`, the thread had it and ended before answering (whether it committed is unknown).
   */
  private unavailable(kind: Kind, size: number, reason: 'notSent' | 'lost', cause?: unknown): unknown {
    if (kind === 'snapshot') {
      const why = this.failure ?? 'the server is shutting down';
      return { stats: null, database: why, sandbox: why, workerRunning: false };
    }
    // No waits: the request itself is answered next, and tells what happened.
    if (kind === 'waits') return [];
    let error: EngineError;
    if (cause !== undefined) {
      error = new EngineError(
        'INTERNAL',
        `the request could not be sent to the writer thread: ${(cause as Error)?.message ?? String(cause)}; it was not run`,
      );
    } else if (reason === 'notSent') {
      error =
        this.failure === null || this.closed
          ? new EngineError('BUSY', 'the server is shutting down; the request was not run', {
              hint: 'Retry against the restarted server.',
            })
          : new EngineError('INTERNAL', `${this.failure}; the request was not run`, {
              hint: 'Retry against the restarted server.',
            });
    } else {
      error = new EngineError(
        'INTERNAL',
        `${this.failure ?? 'the writer thread ended'} before answering: whether the request was committed is unknown`,
        {
          hint: 'Retry it against the restarted server (a posting with the same transactionId is written once).',
        },
      );
    }
    const answer = errorAnswer(error);
    return kind === 'group' ? Array.from({ length: size }, () => answer) : answer;
  }
}

/** What a call to the thread is answered with: a group's answers, one request's, a query's waits, a snapshot. */
type Kind = 'group' | 'result' | 'waits' | 'snapshot';

/** The request as plain data (what arrives from JSON already is; a GraphqlRequest built in code may carry more). */
function plainRequest(request: GraphqlRequest): GraphqlRequest {
  return { query: request.query, variables: request.variables ?? null, operationName: request.operationName ?? null };
}
