import type { BatchRequest } from '../engine.js';
import { EngineError } from '../errors.js';
import { errorAnswer, type FormattedResult } from '../graphql/executor.js';
import type { Limits } from '../limits.js';
import type { Executor } from './writer-thread.js';

interface Pending extends BatchRequest {
  principal: string;
  /** The request body's size: what it holds in memory while it waits (bounded in bytes, see submit). */
  bytes: number;
  resolve(result: FormattedResult): void;
}

/** What one client has waiting. */
interface ClientQueue {
  pending: Pending[];
  bytes: number;
}

/**
 * The server's group commit. Mutations whose bodies arrived in the same turn of the event loop are
 * queued, then run together by engine.executeGroup: one SQLite transaction, a savepoint each, one
 * COMMIT, and only then are their answers released (a reply always describes committed work).
 * A group stops at writeBatchMax requests, at writeBatchWaitMs of work, and before a request that
 * may run long (see OperationSummary.long) when it holds another client's requests; the requests it
 * did not reach go first in the next.
 *
 * Clients take turns: a group takes one request of each waiting client in turn (each client's own
 * requests in the order they arrived), and a client served moves behind the others, so one client
 * with many requests waiting does not hold another's behind all of them. The queue is bounded in
 * requests and in bytes, in all (writeQueueMax, writeQueueBytesMax) and per client
 * (writeQueuePerClientMax, writeQueuePerClientBytesMax): past a bound a mutation is answered BUSY
 * (retryable, HTTP 503) at once, and the other clients' requests still get in.
 */
export class WriteQueue {
  /** Waiting requests by principal, in the order clients take turns (a Map keeps insertion order). */
  private readonly clients = new Map<string, ClientQueue>();
  private count = 0;
  private bytes = 0;
  private scheduled = false;
  /**
   * Groups sent to the writer thread and not yet answered: at most PIPELINE_DEPTH, so the thread
   * finds the next group waiting when it finishes one (no idle round trip between groups).
   */
  private inFlight = 0;
  /** Clients with requests in a group in flight: their next requests wait for it (a client's requests run in order). */
  private readonly flying = new Set<string>();

  private readonly limits: Readonly<Limits>;

  /** Groups run on `engine`, or on `executor()` when given (the server's: the engine in-process, or the writer thread). */
  constructor(
    engine: { readonly limits: Readonly<Limits>; executeGroup: Executor['executeGroup'] },
    private readonly executor: () => Pick<Executor, 'executeGroup'> = () => engine,
  ) {
    this.limits = engine.limits;
  }

  get size(): number {
    return this.count;
  }

  submit(request: BatchRequest, principal: string, bytes = 0): Promise<FormattedResult> {
    const limits = this.limits;
    const mine = this.clients.get(principal);
    if (this.count >= limits.writeQueueMax) {
      return Promise.resolve(busy(`${this.count} write requests are waiting for the database (writeQueueMax ${limits.writeQueueMax})`));
    }
    if (this.bytes + bytes > limits.writeQueueBytesMax) {
      return Promise.resolve(busy(`the write requests waiting for the database hold ${this.bytes} bytes; this one would pass writeQueueBytesMax (${limits.writeQueueBytesMax})`));
    }
    if ((mine?.pending.length ?? 0) >= limits.writeQueuePerClientMax) {
      return Promise.resolve(busy(`this client has ${mine!.pending.length} write requests waiting for the database (writeQueuePerClientMax ${limits.writeQueuePerClientMax})`));
    }
    if ((mine?.bytes ?? 0) + bytes > limits.writeQueuePerClientBytesMax) {
      return Promise.resolve(busy(`this client's write requests waiting for the database hold ${mine?.bytes ?? 0} bytes; this one would pass writeQueuePerClientBytesMax (${limits.writeQueuePerClientBytesMax})`));
    }
    return new Promise((resolve) => {
      let queue = mine;
      if (!queue) this.clients.set(principal, (queue = { pending: [], bytes: 0 }));
      queue.pending.push({ ...request, principal, bytes, resolve });
      queue.bytes += bytes;
      this.count++;
      this.bytes += bytes;
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight >= PIPELINE_DEPTH) return;
    this.scheduled = true;
    // After this turn's I/O callbacks: every request whose body arrived meanwhile joins the group.
    setImmediate(() => this.flush());
  }

  /** A group: one request of each client in turn, until writeBatchMax. */
  private takeGroup(): Pending[] {
    const max = Math.max(1, this.limits.writeBatchMax);
    const group: Pending[] = [];
    const ready = [...this.clients].filter(([principal]) => !this.flying.has(principal)).map(([, queue]) => queue);
    for (let round = 0; group.length < max; round++) {
      let took = false;
      for (const queue of ready) {
        const next = queue.pending[round];
        if (next === undefined) continue;
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
    const group = this.takeGroup();
    // Every client waiting has a group in flight: the answers schedule the next.
    if (group.length === 0) return;
    for (const pending of group) this.flying.add(pending.principal);
    this.inFlight++;
    let ran: Array<FormattedResult | undefined> | Promise<Array<FormattedResult | undefined>>;
    try {
      ran = this.executor().executeGroup(group.map(({ request, options }) => (options ? { request, options } : { request })));
    } catch (error) {
      ran = [];
      this.answer(group, this.failedGroup(group, error));
      return;
    }
    if (Array.isArray(ran)) return this.answer(group, ran);
    // On the writer thread: requests arriving meanwhile form the next group, sent at once (up to PIPELINE_DEPTH).
    this.schedule();
    ran.then(
      (answers) => this.answer(group, answers),
      (error: unknown) => this.answer(group, this.failedGroup(group, error)),
    );
  }

  /** executeGroup answers failures itself; anything thrown is a bug, and must not strand a reply. */
  private failedGroup(group: Pending[], error: unknown): FormattedResult[] {
    const failed = new EngineError('INTERNAL', `the write group failed: ${(error as Error)?.message ?? String(error)}`);
    return group.map(() => errorAnswer(failed));
  }

  private answer(group: Pending[], answers: ReadonlyArray<FormattedResult | undefined>): void {
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
    for (let i = 0; i < done; i++) group[i]!.resolve(answers[i]!);
    if (this.count > 0) this.schedule();
  }
}

/** Groups in flight to the writer thread at once (see WriteQueue.inFlight). */
const PIPELINE_DEPTH = 2;

function busy(message: string): FormattedResult {
  return errorAnswer(new EngineError('BUSY', message, { hint: 'Retry the request in a moment, or send fewer at once.' }));
}
