import { EngineError } from '../errors.js';

/**
 * Slots for requests in flight to one integration or MCP server, shared fairly between clients: at
 * most `total` at once, at most `perClient` held by one principal. A call waits for a slot (FIFO
 * among those that may take one) until its signal aborts or its deadline passes, so one client
 * flooding an integration queues behind its own share and never holds another client's slots.
 */
export class Limiter {
  private inUse = 0;
  private readonly held = new Map<string, number>();
  private readonly waiting: Array<{ principal: string; grant: () => void }> = [];

  constructor(
    /** What the slots are for, in errors ("integration payouts"). */
    private readonly what: string,
    private readonly total: number,
    private readonly perClient: number,
  ) {}

  /** Requests in flight now. */
  get active(): number {
    return this.inUse;
  }

  /** Calls waiting for a slot now. */
  get queued(): number {
    return this.waiting.length;
  }

  /** Wait for a slot; the returned function gives it back (call it exactly once). */
  async acquire(principal: string, signal: AbortSignal, deadline: number): Promise<() => void> {
    if (this.mayTake(principal)) return this.take(principal);
    const waitMs = deadline - Date.now();
    if (waitMs <= 0) throw this.timeout(principal);
    return new Promise<() => void>((resolve, reject) => {
      const entry = {
        principal,
        grant: () => {
          cleanup();
          resolve(this.take(principal));
        },
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(this.timeout(principal));
      }, waitMs);
      timer.unref();
      const onAbort = () => {
        cleanup();
        reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
      };
      const cleanup = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        const at = this.waiting.indexOf(entry);
        if (at >= 0) this.waiting.splice(at, 1);
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(entry);
    });
  }

  private mayTake(principal: string): boolean {
    return this.inUse < this.total && (this.held.get(principal) ?? 0) < this.perClient;
  }

  private take(principal: string): () => void {
    this.inUse++;
    this.held.set(principal, (this.held.get(principal) ?? 0) + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.inUse--;
      const left = (this.held.get(principal) ?? 1) - 1;
      if (left === 0) this.held.delete(principal);
      else this.held.set(principal, left);
      this.grantNext();
    };
  }

  /** The first waiting call that may take a slot now takes it. */
  private grantNext(): void {
    for (const entry of this.waiting) {
      if (!this.mayTake(entry.principal)) continue;
      entry.grant();
      return;
    }
  }

  private timeout(principal: string): EngineError {
    return new EngineError(
      'INTEGRATION_UNAVAILABLE',
      `${this.what} had no free slot for ${principal} before the call's deadline (${this.total} in all, ${this.perClient} per client)`,
      {
        hint: "Retry later; the operator can raise the integration's concurrency or perClientConcurrency.",
        details: { concurrency: this.total, perClientConcurrency: this.perClient },
      },
    );
  }
}
