import { closeSync, openSync, readSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { Worker } from 'node:worker_threads';
import { EngineError, type ErrorData } from '../errors.js';
import type { ExecutionWait } from '../graphql/context.js';
import { errorAnswer, type FormattedResult, type GraphqlRequest } from '../graphql/executor.js';
import { type Limits, resolveLimits } from '../limits.js';
import type { FromReadWorker, ReadWorkerData, ReadWorkerRequestOptions, ToReadWorker } from './read-worker.js';

/**
 * The thread's entry point: a small ES module that registers tsx's loader in the thread, then loads
 * read-worker.ts (a worker thread inherits no module hooks; see read-worker-boot.mjs).
 */
const BOOT = new URL('./read-worker-boot.mjs', import.meta.url);

/**
 * Queries posted to one thread at a time and not yet answered. One: every query waits in the pool's queue, where clients take turns, never in a thread's
 * port behind a heavy query another thread could have overtaken. Two would save the thread's idle
 * time over the message round trip (~0.03-0.05 ms of the ~0.08 ms a read pays for the pool); on
 * this 2-core machine the reads per second were the same within noise (4,134 vs 4,320 with 4
 * readers), the main thread being as busy as the threads.
 */
const THREAD_DEPTH = 1;
/** How long close() waits for a thread to close its engine before terminating it. */
const CLOSE_WAIT_MS = 2000;
/** A thread that fails to start is started again after this, doubling per failure in a row. */
const RESTART_DELAY_MS = 100;
const RESTART_DELAY_MS_MAX = 5000;
/**
 * Once the pool holds new reads for a WAL past its bound, and the reads running have ended: how long
 * it keeps holding them, so that the background checkpointer (every 25 ms) copies the whole log and
 * the writer's next commit restarts it from its start (journal_size_limit then shrinks the file).
 */
const WAL_DRAIN_MS = 60;
/** How long one look at the WAL's state is trusted (a read of the -shm header costs ~3 µs). */
const WAL_LOOK_MS = 5;

export interface ReadPoolOptions {
  /** The database file the writer engine uses: an existing Tally database, in WAL mode. */
  path: string;
  /** Threads to run; default the limits' readPoolThreads. */
  size?: number;
  /**
   * The writer engine's limit overrides: each thread's engine enforces the same ones (queryCostMax,
   * requestDeadlineMs, …), and readQueueMax bounds the pool's queue.
   */
  limits?: Partial<Limits>;
  /** The writer engine's model providers (EngineOptions.providers), if any. */
  providers?: unknown;
  /** Where unexpected errors of the threads (and their deaths) are reported. */
  logError: (error: unknown) => void;
}

/** Who asks: RequestOptions' apiKey and principal. */
export interface ReadOptions {
  /** The API key the request came with: the client is looked up by it inside the read's transaction. */
  apiKey?: string;
  /** The client the request acts as, when there is no key (the engine's own authority when both are left out). */
  principal?: string;
}

export interface ReadPoolStats {
  /** Threads configured. */
  threads: number;
  /** Threads started and answering. */
  ready: number;
  /** Queries waiting for a thread (at most readQueueMax). */
  queued: number;
  /** Queries posted to a thread and running there (or next in its port). */
  running: number;
  /** Queries answered BUSY because the queue was full (shed ones included). */
  refused: number;
  /** Threads started again after one ended or failed to start. */
  restarts: number;
  /** Times the pool held new reads so that a checkpoint could restart a WAL past its bound (see walHeld). */
  walHolds: number;
}

interface Pending {
  id: number;
  /** Whose share of the queue it takes (see admit). */
  client: string;
  /** Run the query (engine.execute), or only tell which executions it waits on (engine.executionWaits). */
  mode: 'execute' | 'waits';
  request: GraphqlRequest;
  options: ReadWorkerRequestOptions;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
  /** The thread's answer; an error answer (the pool's own: BUSY, closed, the thread died) in either mode. */
  resolve: (result: FormattedResult | ExecutionWait[]) => void;
  /** The thread it was posted to; null while queued. */
  slot: Slot | null;
  settled: boolean;
}

interface Slot {
  index: number;
  worker: Worker;
  ready: boolean;
  gone: boolean;
  running: Map<number, Pending>;
  /** Why it could not start (its startFailed message, or its error event). */
  failure: EngineError | null;
  exited: Promise<void>;
}

/**
 * Reads beside writes: GraphQL queries answered by a few worker threads, each with its own read-only
 * engine (EngineOptions.readOnly) on the writer's database file. SQLite in WAL mode gives each read
 * transaction a snapshot of the last commit before it began, so a query never waits for the writer's
 * lock, a group commit or a running tool, and the writer never waits for a query; the caches of each
 * thread's engine follow the writer's commits through PRAGMA data_version at each BEGIN. Mutations
 * stay on the single writer: a thread refuses them (BAD_REQUEST).
 *
 * Scheduling: a query goes to the thread with the fewest queries in flight; when every thread has
 * THREAD_DEPTH, it waits in the pool's queue, at most readQueueMax of them (past it: BUSY, retryable).
 * The queue is served one client at a time in turn, and a full queue sheds the newest query of the
 * client holding the most places for a client holding fewer: one client flooding the pool with
 * heavy queries gets BUSY, the others' queries still run. Nothing waits in a thread: a query that
 * asks to wait on an execution (`actions.execution(waitMs:)`) has its wait fields alone run first
 * (executionWaits), waits on the HTTP thread, then runs once, each run a turn in the queue.
 *
 * A thread that dies (a crash, an out-of-memory, terminateThread) is replaced at once; the queries it
 * had in flight are answered INTERNAL (retryable), never left hanging. The caller's AbortSignal ends
 * query still queued: it is dropped.
 *
 * The pool's own work (dispatch, answers) runs on the caller's event loop: a read is answered only
 * when that loop is free, so the writer's synchronous work on the same thread still delays the
 * delivery of answers, though not the reads themselves.
 */
export class ReadPool {
  private readonly slots: Slot[] = [];
  /** Queued queries by client, oldest first; the map's order is the clients' turn order. */
  private readonly queues = new Map<string, Pending[]>();
  private queued = 0;
  private nextId = 1;
  private started = false;
  private closing: Promise<void> | null = null;
  private refused = 0;
  private restarts = 0;
  /** Start failures in a row (reset by a thread that becomes ready): the restart backoff. */
  private failuresInRow = 0;
  private readonly restartTimers = new Set<NodeJS.Timeout>();
  /** Checkpoint starvation guard (see walHeld): new reads are held while set. */
  private holding = false;
  private drainTimer: NodeJS.Timeout | null = null;
  private walSeen = { at: -Infinity, starved: false };
  /** The WAL's frames when the last hold ended (see drainWhenIdle). */
  private releasedAtFrames = 0;
  private readonly wal: WalIndex;
  private holds = 0;

  private constructor(
    private readonly options: ReadPoolOptions,
    private readonly limits: Readonly<Limits>,
    private readonly size: number,
  ) {
    this.wal = new WalIndex(options.path);
  }

  /**
   * Start `size` threads (default readPoolThreads) and resolve once every one answers; rejects (and
   * stops the others) when one cannot start: the file missing, of another schema version, not WAL.
   */
  static async start(options: ReadPoolOptions): Promise<ReadPool> {
    const limits = resolveLimits(options.limits);
    const size = options.size ?? limits.readPoolThreads;
    if (!Number.isInteger(size) || size < 1) {
      throw new EngineError('BAD_REQUEST', `a read pool needs at least one thread, got ${size} (readPoolThreads)`, {
        hint: 'Set readPoolThreads to 1 or more, or leave the pool out and run queries on the writer.',
      });
    }
    const pool = new ReadPool(options, limits, size);
    const outcomes = await Promise.allSettled(Array.from({ length: size }, (_, i) => pool.startThread(i)));
    const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected');
    if (failed) {
      await pool.close();
      throw failed.reason;
    }
    pool.started = true;
    return pool;
  }

  /**
   * Answer one GraphQL query on a read thread: what engine.execute(request, options) answers
   * there. Never rejects: a full queue, a closed pool, a thread that died, a cancelled query each
   * answer with an error result (`data: null`, one error with its code).
   */
  execute(request: GraphqlRequest, options: ReadOptions = {}, signal?: AbortSignal): Promise<FormattedResult> {
    return this.enqueue('execute', request, options, signal) as Promise<FormattedResult>;
  }

  /**
   * Which executions a query asks to wait on (engine.executionWaits), on a read thread in the
   * client's turn. None when the pool cannot answer (full, closed, the thread died): the query,
   * sent next, then tells why.
   */
  executionWaits(request: GraphqlRequest, options: ReadOptions = {}, signal?: AbortSignal): Promise<ExecutionWait[]> {
    return this.enqueue('waits', request, options, signal).then((answer) => (Array.isArray(answer) ? answer : []));
  }

  private enqueue(
    mode: Pending['mode'],
    request: GraphqlRequest,
    options: ReadOptions,
    signal: AbortSignal | undefined,
  ): Promise<FormattedResult | ExecutionWait[]> {
    if (this.closing) return Promise.resolve(errorAnswer(closedError()));
    if (signal?.aborted) return Promise.resolve(errorAnswer(cancelledError()));
    return new Promise<FormattedResult | ExecutionWait[]>((resolve) => {
      const p: Pending = {
        id: this.nextId++,
        client: options.principal ?? options.apiKey ?? '',
        mode,
        request: {
          query: request.query,
          variables: request.variables ?? null,
          operationName: request.operationName ?? null,
        },
        options: {
          ...(options.apiKey === undefined ? {} : { apiKey: options.apiKey }),
          ...(options.principal === undefined ? {} : { principal: options.principal }),
        },
        signal,
        onAbort: undefined,
        resolve,
        slot: null,
        settled: false,
      };
      if (this.queued === 0) {
        const slot = this.leastBusy();
        if (slot) {
          this.watchAbort(p);
          this.post(slot, p);
          return;
        }
      }
      if (!this.admit(p)) return;
      this.watchAbort(p);
      let list = this.queues.get(p.client);
      if (!list) this.queues.set(p.client, (list = []));
      list.push(p);
      this.queued++;
      this.dispatch();
    });
  }

  stats(): ReadPoolStats {
    let ready = 0;
    let running = 0;
    for (const slot of this.slots) {
      if (slot.ready) ready++;
      running += slot.running.size;
    }
    return {
      threads: this.size,
      ready,
      queued: this.queued,
      running,
      refused: this.refused,
      restarts: this.restarts,
      walHolds: this.holds,
    };
  }

  /**
   * End thread `index` abruptly, as a crash would (its queries in flight answer INTERNAL; a new
   * thread replaces it). For tests, and for an operator who suspects a thread.
   */
  async terminateThread(index: number): Promise<void> {
    const slot = this.slots[index];
    if (!slot || slot.gone) return;
    await slot.worker.terminate();
    await slot.exited;
  }

  /**
   * Stop taking queries, answer the queued ones BUSY, let each thread finish what it runs and close
   * its engine, then resolve. A thread that has not ended after a short while is
   * terminated, and what it still ran is answered BUSY. Close the pool before the writer engine: the
   * last connection to close is then the writer's, which checkpoints and removes the WAL.
   */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.closing = (async () => {
      for (const timer of this.restartTimers) clearTimeout(timer);
      this.restartTimers.clear();
      if (this.drainTimer) clearTimeout(this.drainTimer);
      this.wal.close();
      for (const list of this.queues.values()) for (const p of list) this.settle(p, errorAnswer(closedError()));
      this.queues.clear();
      this.queued = 0;
      await Promise.all(
        this.slots.map(async (slot) => {
          if (slot.gone) return;
          if (slot.ready) slot.worker.postMessage({ type: 'close' } satisfies ToReadWorker);
          else void slot.worker.terminate();
          const timer = setTimeout(() => void slot.worker.terminate(), CLOSE_WAIT_MS);
          await slot.exited;
          clearTimeout(timer);
        }),
      );
    })();
    return this.closing;
  }

  /** Start (or restart) thread `index`; resolves when it is ready, rejects when it cannot start. */
  private startThread(index: number): Promise<void> {
    const data: ReadWorkerData = {
      path: resolvePath(this.options.path),
      ...(this.options.limits ? { limits: this.options.limits } : {}),
      ...(this.options.providers === undefined ? {} : { providers: this.options.providers }),
    };
    const worker = new Worker(BOOT, { workerData: data });
    let exit!: () => void;
    const slot: Slot = {
      index,
      worker,
      ready: false,
      gone: false,
      running: new Map(),
      failure: null,
      exited: new Promise<void>((resolve) => (exit = resolve)),
    };
    this.slots[index] = slot;
    // Referenced while it starts (start() awaits it); once ready, only while it has queries (refIfBusy).
    return new Promise<void>((resolve, reject) => {
      worker.on('message', (message: FromReadWorker) => {
        if (message.type === 'ready') {
          slot.ready = true;
          this.failuresInRow = 0;
          this.refIfBusy(slot);
          resolve();
          if (this.closing) {
            worker.postMessage({ type: 'close' } satisfies ToReadWorker);
            return;
          }
          this.dispatch();
        } else if (message.type === 'startFailed') {
          slot.failure = fromData(message.error);
          void worker.terminate();
        } else {
          this.onMessage(slot, message);
        }
      });
      worker.on('error', (error) => {
        if (!slot.ready)
          slot.failure ??= new EngineError('INTERNAL', `a read thread failed to start: ${error.message}`, {
            cause: error,
          });
        else if (!this.closing) this.options.logError(error);
      });
      worker.on('exit', (code) => {
        const wasReady = slot.ready;
        slot.ready = false;
        slot.gone = true;
        exit();
        if (!wasReady) {
          const failure =
            slot.failure ?? new EngineError('INTERNAL', `a read thread ended (exit code ${code}) before it was ready`);
          reject(failure);
          this.onGone(slot, failure, false);
        } else {
          this.onGone(
            slot,
            new EngineError(
              'INTERNAL',
              `the read thread answering this query stopped (exit code ${code}); the pool replaces it`,
              { hint: 'Retry the query.' },
            ),
            true,
          );
        }
      });
    });
  }

  private onMessage(slot: Slot, message: FromReadWorker): void {
    switch (message.type) {
      case 'result':
      case 'waits': {
        const p = slot.running.get(message.id);
        if (!p) return;
        slot.running.delete(message.id);
        this.settle(p, message.type === 'result' ? message.result : message.waits);
        this.dispatch();
        return;
      }
      case 'log':
        this.options.logError(new Error(`read thread ${slot.index}: ${message.message}`));
        return;
      default:
        return;
    }
  }

  /**
   * A thread ended: what it had in flight is answered (never left hanging), and unless the pool is
   * closing a new thread takes its place: at once after a thread that ran, after a growing delay
   * after one that could not start. With no thread able to answer, the queued queries fail too.
   */
  private onGone(slot: Slot, failure: EngineError, wasReady: boolean): void {
    const inFlight = [...slot.running.values()];
    slot.running.clear();
    const closing = this.closing !== null;
    for (const p of inFlight) this.settle(p, errorAnswer(closing ? closedError() : failure));
    if (closing || (!this.started && !wasReady)) return;
    if (wasReady)
      this.options.logError(
        new Error(
          `read thread ${slot.index} stopped; starting another (${inFlight.length} queries in flight answered INTERNAL)`,
        ),
      );
    else {
      this.failuresInRow++;
      this.options.logError(failure);
      if (!this.slots.some((s) => s.ready)) {
        for (const list of this.queues.values())
          for (const p of list)
            this.settle(
              p,
              errorAnswer(
                new EngineError('INTERNAL', `no read thread is running: ${failure.message}`, {
                  hint: 'Retry later; the server log says why the read threads cannot start.',
                }),
              ),
            );
        this.queues.clear();
        this.queued = 0;
      }
    }
    // The queries it ran are answered: the others' turn (and a WAL hold waiting for them to end).
    this.dispatch();
    const delay =
      this.failuresInRow === 0 ? 0 : Math.min(RESTART_DELAY_MS_MAX, RESTART_DELAY_MS * 2 ** (this.failuresInRow - 1));
    const timer = setTimeout(() => {
      this.restartTimers.delete(timer);
      if (this.closing) return;
      this.restarts++;
      // A failure is handled by the thread's exit (onGone again).
      this.startThread(slot.index).catch(() => {});
    }, delay);
    timer.unref();
    this.restartTimers.add(timer);
  }

  /** The ready thread with the fewest queries running, below THREAD_DEPTH; or none. */
  private leastBusy(): Slot | undefined {
    if (this.walHeld()) return undefined;
    let best: Slot | undefined;
    for (const slot of this.slots) {
      if (!slot.ready || slot.running.size >= THREAD_DEPTH) continue;
      if (!best || slot.running.size < best.running.size) best = slot;
    }
    return best;
  }

  /**
   * SQLite can restart its write-ahead log only when a checkpoint has copied all of it while no
   * reader still reads an older snapshot. Reads that overlap without a gap (one client's heavy
   * queries staggered on every thread) would keep that from ever happening, and the log would grow
   * with every write. So once the log holds more than walAutocheckpointPages frames that no
   * checkpoint has copied all of (read from the WAL index, the -shm file), the pool holds new reads
   * in its queue (they wait, in turn, as when every thread is busy) until the running ones end and
   * the checkpointer has had WAL_DRAIN_MS to copy the log; then it lets them go. The writer's next
   * commit restarts the log (and journal_size_limit shrinks its file).
   */
  private walHeld(): boolean {
    if (this.holding) return true;
    const now = performance.now();
    if (now - this.walSeen.at > WAL_LOOK_MS) {
      const { frames, backfilled } = this.wal.read();
      // A log that restarted since the last hold starts the count again.
      if (frames < this.releasedAtFrames) this.releasedAtFrames = 0;
      const bound = this.limits.walAutocheckpointPages;
      this.walSeen = {
        at: now,
        starved: frames > Math.max(bound, this.releasedAtFrames + bound) && backfilled < frames,
      };
    }
    if (!this.walSeen.starved) return false;
    this.holding = true;
    this.holds++;
    this.drainWhenIdle();
    return true;
  }

  /**
   * While holding: once no read runs, wait
   * WAL_DRAIN_MS, then let reads go. The pool holds again only once the log has grown another
   * walAutocheckpointPages frames past where it stood at the release: when something outside the
   * pool keeps the checkpoint from finishing (another process's open read, a backup), the pool
   * does not hold its reads over and over for it.
   */
  private drainWhenIdle(): void {
    if (this.drainTimer || this.closing) return;
    if (this.slots.some((slot) => slot.running.size > 0)) return;
    this.drainTimer = setTimeout(() => {
      this.drainTimer = null;
      this.holding = false;
      this.releasedAtFrames = this.wal.read().frames;
      this.walSeen = { at: performance.now(), starved: false };
      this.dispatch();
    }, WAL_DRAIN_MS);
  }

  /** Post queued queries to free threads, one client at a time in turn. */
  private dispatch(): void {
    if (this.holding) this.drainWhenIdle();
    while (this.queued > 0) {
      const slot = this.leastBusy();
      if (!slot) return;
      const [client, list] = this.queues.entries().next().value as [string, Pending[]];
      const p = list.shift()!;
      this.queued--;
      // The client goes to the back of the turn order (or leaves it).
      this.queues.delete(client);
      if (list.length > 0) this.queues.set(client, list);
      this.post(slot, p);
    }
  }

  /**
   * Whether a query that must wait gets a place: yes below readQueueMax; at it, only by taking the
   * newest place of the client holding the most, when that client holds at least two more than
   * this one's will (that query is answered BUSY). Otherwise this one is answered BUSY.
   */
  private admit(p: Pending): boolean {
    const max = this.limits.readQueueMax;
    if (this.queued < max) return true;
    let top: string | undefined;
    let topCount = 0;
    for (const [client, list] of this.queues) {
      if (list.length > topCount) {
        top = client;
        topCount = list.length;
      }
    }
    const mine = this.queues.get(p.client)?.length ?? 0;
    if (top !== undefined && top !== p.client && topCount > mine + 1) {
      const list = this.queues.get(top)!;
      const shed = list.pop()!;
      if (list.length === 0) this.queues.delete(top);
      this.queued--;
      this.refused++;
      this.settle(shed, errorAnswer(queueFullError(max, true)));
      return true;
    }
    this.refused++;
    this.settle(p, errorAnswer(queueFullError(max, false)));
    return false;
  }

  private post(slot: Slot, p: Pending): void {
    p.slot = slot;
    slot.running.set(p.id, p);
    this.refIfBusy(slot);
    try {
      slot.worker.postMessage({
        type: 'run',
        id: p.id,
        mode: p.mode,
        request: p.request,
        options: p.options,
      } satisfies ToReadWorker);
    } catch (error) {
      // Variables the structured clone refuses (a function, a symbol): not a GraphQL value anyway.
      slot.running.delete(p.id);
      this.settle(
        p,
        errorAnswer(
          new EngineError('BAD_REQUEST', `the query cannot be sent to a read thread: ${(error as Error).message}`, {
            hint: 'Send variables as JSON values.',
          }),
        ),
      );
    }
  }

  private watchAbort(p: Pending): void {
    if (!p.signal) return;
    p.onAbort = () => this.cancel(p);
    p.signal.addEventListener('abort', p.onAbort, { once: true });
  }

  /** The caller gave up: a queued query is dropped (a posted one runs to its end: it is synchronous there). */
  private cancel(p: Pending): void {
    if (p.settled || p.slot !== null) return;
    const list = this.queues.get(p.client);
    const at = list?.indexOf(p) ?? -1;
    if (list && at >= 0) {
      list.splice(at, 1);
      if (list.length === 0) this.queues.delete(p.client);
      this.queued--;
    }
    this.settle(p, errorAnswer(cancelledError()));
  }

  private settle(p: Pending, result: FormattedResult | ExecutionWait[]): void {
    if (p.settled) return;
    p.settled = true;
    if (p.onAbort) p.signal?.removeEventListener('abort', p.onAbort);
    if (p.slot) this.refIfBusy(p.slot);
    p.resolve(result);
  }

  /** A thread keeps the process alive while it has queries in flight, and only then. */
  private refIfBusy(slot: Slot): void {
    if (slot.gone) return;
    if (slot.running.size > 0) slot.worker.ref();
    else slot.worker.unref();
  }
}

/** An answer that ran nothing: the engine's own shape (data null, one error with its code and hint). */
function queueFullError(max: number, shed: boolean): EngineError {
  return new EngineError(
    'BUSY',
    shed
      ? `the read queue is full (readQueueMax ${max} queries waiting for a read thread) and this client holds most of it: this query gave its place to another client's`
      : `the read queue is full (readQueueMax ${max} queries waiting for a read thread)`,
    { hint: 'Retry in a moment, with fewer queries at once.', details: { readQueueMax: max } },
  );
}

function closedError(): EngineError {
  return new EngineError('BUSY', 'the read pool is closed (the server is shutting down)', {
    hint: 'Retry against a running server.',
  });
}

function cancelledError(): EngineError {
  return new EngineError('BUSY', 'the query was cancelled (its signal aborted) before a read thread ran it', {
    hint: 'Send it again if the answer is still wanted.',
  });
}

function fromData(data: ErrorData): EngineError {
  return new EngineError(data.code, data.message, data.hint === undefined ? {} : { hint: data.hint });
}

/**
 * The WAL index header SQLite keeps in the -shm file (see "WAL-index format" in SQLite's file
 * format documentation): mxFrame, the frames in the log (u32 at byte 16), and nBackfill, the frames
 * a checkpoint has copied into the database (u32 at byte 96), in the machine's byte order.
 */
class WalIndex {
  private fd: number | null = null;
  private readonly buffer = Buffer.alloc(100);

  constructor(private readonly path: string) {}

  read(): { frames: number; backfilled: number } {
    try {
      this.fd ??= openSync(`${resolvePath(this.path)}-shm`, 'r');
      if (readSync(this.fd, this.buffer, 0, 100, 0) < 100) return { frames: 0, backfilled: 0 };
      const le = this.buffer.readUInt32LE.bind(this.buffer);
      const be = this.buffer.readUInt32BE.bind(this.buffer);
      // iVersion (3007000) tells the byte order the header was written in.
      const u32 = le(0) === 3007000 ? le : be;
      return { frames: u32(16), backfilled: u32(96) };
    } catch {
      // No -shm (not WAL, or every connection closed): nothing to hold for.
      this.close();
      return { frames: 0, backfilled: 0 };
    }
  }

  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }
}
