import type { BatchRequest } from '../engine.js';
import { EngineError } from '../errors.js';
import type { ExecutionWait } from '../graphql/context.js';
import { errorAnswer, type FormattedResult } from '../graphql/executor.js';
import type { Limits } from '../limits.js';
import type { Executor } from './writer-thread.js';

/**
 * What the writer runs for a request: a mutation joins a group commit; a query runs alone
 * (Executor.execute), and so does the look at which executions a query waits on (executionWaits).
 */
type Kind = 'mutation' | 'query' | 'waits';

interface Pending extends BatchRequest {
  kind: Kind;
  principal: string;
  /** The request body's size: what it holds in memory while it waits (bounded in bytes, see submit). */
  bytes: number;
  /** A query's caller went away: still queued, it is dropped. */
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
  /** Sent to the writer (it is then answered by the writer, never dropped). */
  sent: boolean;
  resolve(answer: FormattedResult | ExecutionWait[]): void;
}

/** What one client has waiting. */
interface ClientQueue {
  pending: Pending[];
  bytes: number;
}

/**
 * The one way to the writer: everything the server runs there waits here for its turn. Mutations
 * whose bodies arrived in the same turn of the event loop are queued, then run together by
 * engine.executeGroup: one SQLite transaction, a savepoint each, one COMMIT, and only then are
 * their answers released (a reply always describes committed work). A group stops at
 * writeBatchMax requests, at writeBatchWaitMs of work, and around a request that may run long (see
 * OperationSummary.long) when it holds another client's requests; the requests it did not reach go
 * first in the next. A query the server runs on the writer (there is no read pool, or not yet),
 * and the look at which executions a query waits on, are a unit alone, taken in turn like a group.
 *
 * Clients take turns: a unit takes one request of each waiting client in turn (each client's own
 * requests in the order they arrived), and a client served moves behind the others, so one client
 * with many requests waiting does not hold another's behind all of them. A client has one unit
 * at the writer at a time: its next requests wait until that one is answered, so whatever one
 * client sends, another client's request waits for at most about one unit of each client ahead of
 * it. The queue is bounded in requests and in bytes, in all (writeQueueMax, writeQueueBytesMax) and
 * per client (writeQueuePerClientMax, writeQueuePerClientBytesMax), every kind counted together:
 * past a bound a request is answered BUSY (retryable, HTTP 503) at once, and the other clients'
 * requests still get in.
 */
export class WriteQueue {
  /** Waiting requests by principal, in the order clients take turns (a Map keeps insertion order). */
  private readonly clients = new Map<string, ClientQueue>();
  private count = 0;
  private bytes = 0;
  private scheduled = false;
  /**
   * Units sent to the writer thread and not yet answered: at most PIPELINE_DEPTH, so the thread
   * finds the next unit waiting when it finishes one (no idle round trip between units).
   */
  private inFlight = 0;
  /** Clients with a unit in flight: their next requests wait for it (a client's requests run in order, one unit at a time). */
  private readonly flying = new Set<string>();

  private readonly limits: Readonly<Limits>;

  /** Units run on `engine`, or on `executor()` when given (the server's: the engine in-process, or the writer thread). */
  constructor(
    engine: { readonly limits: Readonly<Limits> } & Pick<Executor, 'executeGroup' | 'execute' | 'executionWaits'>,
    private readonly executor: () => Pick<Executor, 'executeGroup' | 'execute' | 'executionWaits'> = () => engine,
  ) {
    this.limits = engine.limits;
  }

  get size(): number {
    return this.count;
  }

  /** A mutation: it joins a group commit. */
  submit(request: BatchRequest, principal: string, bytes = 0): Promise<FormattedResult> {
    return this.enqueue('mutation', request, principal, bytes, undefined) as Promise<FormattedResult>;
  }

  /** A query, run alone on the writer in its client's turn; dropped (BUSY) if `signal` aborts before it is sent. */
  query(request: BatchRequest, principal: string, bytes = 0, signal?: AbortSignal): Promise<FormattedResult> {
    return this.enqueue('query', request, principal, bytes, signal) as Promise<FormattedResult>;
  }

  /**
   * Which executions a query asks to wait on (engine.executionWaits), looked at on the writer in its
   * client's turn; none when the queue has no room or `signal` aborts first (the query then says why).
   */
  executionWaits(request: BatchRequest, principal: string, bytes = 0, signal?: AbortSignal): Promise<ExecutionWait[]> {
    return this.enqueue('waits', request, principal, bytes, signal).then((answer) =>
      Array.isArray(answer) ? answer : [],
    );
  }

  private enqueue(
    kind: Kind,
    request: BatchRequest,
    principal: string,
    bytes: number,
    signal: AbortSignal | undefined,
  ): Promise<FormattedResult | ExecutionWait[]> {
    const limits = this.limits;
    const mine = this.clients.get(principal);
    if (this.count >= limits.writeQueueMax) {
      return Promise.resolve(
        busy(`${this.count} requests are waiting for the writer (writeQueueMax ${limits.writeQueueMax})`),
      );
    }
    if (this.bytes + bytes > limits.writeQueueBytesMax) {
      return Promise.resolve(
        busy(
          `the requests waiting for the writer hold ${this.bytes} bytes; this one would pass writeQueueBytesMax (${limits.writeQueueBytesMax})`,
        ),
      );
    }
    if ((mine?.pending.length ?? 0) >= limits.writeQueuePerClientMax) {
      return Promise.resolve(
        busy(
          `this client has ${mine!.pending.length} requests waiting for the writer (writeQueuePerClientMax ${limits.writeQueuePerClientMax})`,
        ),
      );
    }
    if ((mine?.bytes ?? 0) + bytes > limits.writeQueuePerClientBytesMax) {
      return Promise.resolve(
        busy(
          `this client's requests waiting for the writer hold ${mine?.bytes ?? 0} bytes; this one would pass writeQueuePerClientBytesMax (${limits.writeQueuePerClientBytesMax})`,
        ),
      );
    }
    if (signal?.aborted) return Promise.resolve(errorAnswer(cancelledError()));
    return new Promise((resolve) => {
      let queue = mine;
      if (!queue) this.clients.set(principal, (queue = { pending: [], bytes: 0 }));
      const pending: Pending = { ...request, kind, principal, bytes, signal, onAbort: undefined, sent: false, resolve };
      if (signal) {
        pending.onAbort = () => this.drop(pending);
        signal.addEventListener('abort', pending.onAbort, { once: true });
      }
      queue.pending.push(pending);
      queue.bytes += bytes;
      this.count++;
      this.bytes += bytes;
      this.schedule();
    });
  }

  /** A request whose caller went away before it was sent: it leaves the queue, answered BUSY (nobody reads it). */
  private drop(pending: Pending): void {
    if (pending.sent) return;
    const queue = this.clients.get(pending.principal);
    const at = queue?.pending.indexOf(pending) ?? -1;
    if (!queue || at < 0) return;
    queue.pending.splice(at, 1);
    queue.bytes -= pending.bytes;
    this.count--;
    this.bytes -= pending.bytes;
    if (queue.pending.length === 0) this.clients.delete(pending.principal);
    pending.resolve(errorAnswer(cancelledError()));
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight >= PIPELINE_DEPTH) return;
    this.scheduled = true;
    // After this turn's I/O callbacks: every request whose body arrived meanwhile joins the group.
    setImmediate(() => this.flush());
  }

  /**
   * The next unit for the writer: one request of each ready client in turn, until writeBatchMax (a
   * group commit); or, when the first request so taken is a query or a look at its waits, that one
   * alone. A client whose next request is not a mutation has its turn in a later unit.
   */
  private takeUnit(): Pending[] {
    const max = Math.max(1, this.limits.writeBatchMax);
    const group: Pending[] = [];
    const ready = [...this.clients].filter(([principal]) => !this.flying.has(principal)).map(([, queue]) => queue);
    const done = new Set<ClientQueue>();
    for (let round = 0; group.length < max; round++) {
      let took = false;
      for (const queue of ready) {
        const next = queue.pending[round];
        if (next === undefined || done.has(queue)) continue;
        if (next.kind !== 'mutation') {
          if (group.length === 0) return [next];
          done.add(queue);
          continue;
        }
        group.push(next);
        took = true;
        if (group.length === max) break;
      }
      if (!took) break;
    }
    return group;
  }

  private flush(): void {
    this.scheduled = false;
    const unit = this.takeUnit();
    // Every client waiting has a unit in flight: the answers schedule the next.
    if (unit.length === 0) return;
    for (const pending of unit) {
      pending.sent = true;
      if (pending.onAbort) pending.signal?.removeEventListener('abort', pending.onAbort);
      this.flying.add(pending.principal);
    }
    this.inFlight++;
    let ran: ReadonlyArray<unknown> | Promise<ReadonlyArray<unknown>>;
    try {
      ran = this.run(unit);
    } catch (error) {
      this.answer(unit, this.failedGroup(unit, error));
      return;
    }
    if (!isPromise(ran)) return this.answer(unit, ran);
    // On the writer thread: requests arriving meanwhile form the next unit, sent at once (up to PIPELINE_DEPTH).
    this.schedule();
    ran.then(
      (answers) => this.answer(unit, answers),
      (error: unknown) => this.answer(unit, this.failedGroup(unit, error)),
    );
  }

  /** A unit on the writer: its answers, in order (a group's may stop short: see answer). */
  private run(unit: Pending[]): ReadonlyArray<unknown> | Promise<ReadonlyArray<unknown>> {
    const executor = this.executor();
    const first = unit[0]!;
    const options = first.options ?? {};
    if (first.kind === 'mutation')
      return executor.executeGroup(unit.map(({ request, options }) => (options ? { request, options } : { request })));
    const one =
      first.kind === 'query'
        ? executor.execute(first.request, options)
        : executor.executionWaits(first.request, options);
    return isPromise(one) ? (one as Promise<unknown>).then((answer) => [answer]) : [one];
  }

  /** executeGroup answers failures itself; anything thrown is a bug, and must not strand a reply. */
  private failedGroup(group: Pending[], error: unknown): FormattedResult[] {
    const failed = new EngineError('INTERNAL', `the write group failed: ${(error as Error)?.message ?? String(error)}`);
    return group.map(() => errorAnswer(failed));
  }

  private answer(group: Pending[], answers: ReadonlyArray<unknown>): void {
    this.inFlight--;
    for (const pending of group) this.flying.delete(pending.principal);
    // The group answers a prefix of its requests; each client's answered ones are the first of its queue.
    let done = 0;
    while (done < group.length && answers[done] !== undefined) done++;
    for (let i = 0; i < done; i++) {
      const pending = group[i]!;
      const queue = this.clients.get(pending.principal)!;
      queue.pending.shift();
      queue.bytes -= pending.bytes;
      this.count--;
      this.bytes -= pending.bytes;
      // A client served goes behind the others for the next group.
      this.clients.delete(pending.principal);
      if (queue.pending.length > 0) this.clients.set(pending.principal, queue);
    }
    for (let i = 0; i < done; i++) group[i]!.resolve(answers[i] as FormattedResult | ExecutionWait[]);
    if (this.count > 0) this.schedule();
  }
}

/** Units in flight to the writer thread at once (see WriteQueue.inFlight). */
const PIPELINE_DEPTH = 2;

function busy(message: string): FormattedResult {
  return errorAnswer(
    new EngineError('BUSY', message, { hint: 'Retry the request in a moment, or send fewer at once.' }),
  );
}

function cancelledError(): EngineError {
  return new EngineError('BUSY', 'the request was cancelled (its caller went away) before the writer ran it', {
    hint: 'Send it again if the answer is still wanted.',
  });
}

function isPromise<T>(value: T | Promise<T>): value is Promise<T> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}
