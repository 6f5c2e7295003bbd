import type { BatchRequest, Engine } from '../engine.js';
import { EngineError } from '../errors.js';
import type { FormattedResult } from '../graphql/executor.js';
import { engineGraphqlError, formatError } from '../graphql/executor.js';

interface Pending extends BatchRequest {
  principal: string;
  resolve(result: FormattedResult): void;
}

/**
 * The server's group commit. Mutations whose bodies arrived in the same turn of the event loop are
 * queued, then run together by engine.executeGroup: one SQLite transaction, a savepoint each, one
 * COMMIT, and only then are their answers released (a reply always describes committed work).
 * A group stops at writeBatchMax requests or writeBatchWaitMs of work; the requests it did not
 * reach go first in the next group, so the order requests arrived in is the order they run in.
 *
 * The queue is bounded twice: writeQueueMax requests in all, and writeQueuePerClientMax for one
 * client, so a client flooding the server with mutations is told BUSY (retryable) while another
 * client's requests still get in.
 */
export class WriteQueue {
  private readonly queue: Pending[] = [];
  private readonly perClient = new Map<string, number>();
  private scheduled = false;

  constructor(private readonly engine: Engine) {}

  get size(): number {
    return this.queue.length;
  }

  submit(request: BatchRequest, principal: string): Promise<FormattedResult> {
    const limits = this.engine.limits;
    const mine = this.perClient.get(principal) ?? 0;
    if (this.queue.length >= limits.writeQueueMax) {
      return Promise.resolve(busy(`${this.queue.length} write requests are waiting for the database (writeQueueMax ${limits.writeQueueMax})`));
    }
    if (mine >= limits.writeQueuePerClientMax) {
      return Promise.resolve(busy(`this client has ${mine} write requests waiting for the database (writeQueuePerClientMax ${limits.writeQueuePerClientMax})`));
    }
    this.perClient.set(principal, mine + 1);
    return new Promise((resolve) => {
      this.queue.push({ ...request, principal, resolve });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    // After this turn's I/O callbacks: every request whose body arrived meanwhile joins the group.
    setImmediate(() => this.flush());
  }

  private flush(): void {
    this.scheduled = false;
    const group = this.queue.slice(0, Math.max(1, this.engine.limits.writeBatchMax));
    let answers: Array<FormattedResult | undefined>;
    try {
      answers = this.engine.executeGroup(group);
    } catch (error) {
      // executeGroup answers failures itself; anything thrown is a bug, and must not strand a reply.
      const failed = new EngineError('INTERNAL', `the write group failed: ${(error as Error)?.message ?? String(error)}`);
      answers = group.map(() => ({ data: null, errors: [formatError(engineGraphqlError(failed))] }));
    }
    let done = 0;
    while (done < group.length && answers[done] !== undefined) done++;
    this.queue.splice(0, done);
    for (let i = 0; i < done; i++) {
      const pending = group[i]!;
      const left = (this.perClient.get(pending.principal) ?? 1) - 1;
      if (left === 0) this.perClient.delete(pending.principal);
      else this.perClient.set(pending.principal, left);
      pending.resolve(answers[i]!);
    }
    if (this.queue.length > 0) this.schedule();
  }
}

function busy(message: string): FormattedResult {
  const error = new EngineError('BUSY', message, { hint: 'Retry the request in a moment, or send fewer at once.' });
  return { errors: [formatError(engineGraphqlError(error))] };
}
