import type { Limits } from '../limits.js';
import { WAIT_ENDS } from './status.js';

/** How ExecutionWaits reads what it waits on. */
export interface ExecutionWaitDeps {
  limits: Pick<Limits, 'executionWaitersMax' | 'executionWaitersPerClientMax' | 'executionWaitPollMs'>;
  /** The execution's status, read in a statement of its own; null when it does not exist. */
  statusOf(executionId: string): string | null;
  /** The seq of the newest progress message of the execution (its tree's, for a top-level one); 0: none. */
  progressOf(executionId: string): number;
  /** Whether the database is still open: a read that fails after it closed is no error to report. */
  isOpen(): boolean;
  logError(error: unknown): void;
}

/**
 * Waits on executions (Engine.waitForExecution): each resolves as soon as its execution is
 * terminal or unknown, or (given `progressAfter`) has a progress message newer than that seq, or
 * after its timeout, or on abort. It wakes on this process's attempt outcomes (wake) and committed
 * progress (look), and polls every executionWaitPollMs for workers of other processes.
 * Holds no transaction. At most executionWaitersMax waits in flight, executionWaitersPerClientMax
 * per client: a wait past either returns at once (counted in `refused`).
 */
export class ExecutionWaits {
  /** The wakers of each execution waited on. */
  private readonly byId = new Map<string, Set<(status: string) => void>>();
  private readonly byPrincipal = new Map<string, number>();
  /** Waits in flight now. */
  inFlight = 0;
  /** Waits that returned at once because the bounds were reached. */
  refused = 0;

  constructor(private readonly deps: ExecutionWaitDeps) {}

  async wait(
    executionId: string,
    timeoutMs: number,
    signal?: AbortSignal,
    principal?: string,
    progressAfter?: number,
  ): Promise<void> {
    if (!(timeoutMs > 0) || signal?.aborted) return;
    const { limits } = this.deps;
    const mine = principal === undefined ? 0 : (this.byPrincipal.get(principal) ?? 0);
    if (this.inFlight >= limits.executionWaitersMax || mine >= limits.executionWaitersPerClientMax) {
      this.refused++;
      return;
    }
    this.inFlight++;
    if (principal !== undefined) this.byPrincipal.set(principal, mine + 1);
    try {
      await this.until(executionId, timeoutMs, signal, progressAfter);
    } finally {
      this.inFlight--;
      if (principal !== undefined) {
        const left = (this.byPrincipal.get(principal) ?? 1) - 1;
        if (left === 0) this.byPrincipal.delete(principal);
        else this.byPrincipal.set(principal, left);
      }
    }
  }

  /** An attempt of `executionId` ended in this process: its waits look at its status now. */
  wake(executionId: string, status: string): void {
    const set = this.byId.get(executionId);
    if (set) for (const wake of [...set]) wake(status);
  }

  /** Progress of these executions committed in this process: their waits look now. */
  look(executionIds: readonly string[]): void {
    for (const id of executionIds) {
      const set = this.byId.get(id);
      if (set) for (const wake of [...set]) wake('RUNNING');
    }
  }

  private until(executionId: string, timeoutMs: number, signal?: AbortSignal, progressAfter?: number): Promise<void> {
    return new Promise<void>((resolve) => {
      let finished = false;
      const finish = () => {
        if (finished) return;
        finished = true;
        clearTimeout(timer);
        clearInterval(poll);
        signal?.removeEventListener('abort', finish);
        const set = this.byId.get(executionId);
        set?.delete(wake);
        if (set?.size === 0) this.byId.delete(executionId);
        resolve();
      };
      const check = () => {
        if (finished) return;
        try {
          const status = this.deps.statusOf(executionId);
          if (status === null || WAIT_ENDS.has(status)) finish();
          else if (progressAfter !== undefined && this.deps.progressOf(executionId) > progressAfter) finish();
        } catch (error) {
          // A read that failed (the database busy or closed) ends the wait: the answer is read again anyway.
          if (this.deps.isOpen()) this.deps.logError(error);
          finish();
        }
      };
      const wake = (status: string) => (WAIT_ENDS.has(status) ? finish() : check());
      const timer = setTimeout(finish, timeoutMs);
      const poll = setInterval(check, Math.max(1, this.deps.limits.executionWaitPollMs));
      signal?.addEventListener('abort', finish, { once: true });
      let set = this.byId.get(executionId);
      if (!set) this.byId.set(executionId, (set = new Set()));
      set.add(wake);
      check();
    });
  }
}
