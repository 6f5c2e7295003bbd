import { setTimeout as sleep } from 'node:timers/promises';
import type { TransactionManager } from '../../storage/transaction.js';
import type { ExecutionServices } from '../services.js';
import { EngineError } from '../../errors.js';
import { type AttemptOutcome, recordBrokenAttempt, runAttempt } from './attempt.js';

export interface WorkerOptions {
  /** Names this worker in lease_owner. */
  owner: string;
  /** Longest sleep when nothing is due; a start in this process wakes it at once. */
  pollMs: number;
  onAttempt?: (outcome: AttemptOutcome) => void;
  onError?: (error: unknown) => void;
}

/**
 * Claims due executions and runs one attempt at a time, each in its own BEGIN IMMEDIATE
 * transaction together with its status update. SQLite admits one writer, so two workers (threads
 * or processes) can never run the same attempt: the second sees the first's committed outcome.
 * A crash mid-attempt rolls the whole attempt back, and the execution is still QUEUED.
 */
export class Worker {
  private running = false;
  private stopped: Promise<void> | null = null;
  private wakeUp: (() => void) | null = null;

  constructor(
    private readonly svc: ExecutionServices,
    private readonly transactions: TransactionManager,
    private readonly options: WorkerOptions,
  ) {}

  /** Run the next due attempt, if any. Returns what happened, or null when nothing was due. */
  runOnce(): AttemptOutcome | null {
    const now = this.svc.clock.now().toISOString();
    const next = this.svc.queue.nextRunAt.get();
    if (!next?.run_at || next.run_at > now) return null;
    let claimed: { executionId: string; attempt: number } | null = null;
    try {
      return this.transactions.run('write', () => {
        const row = this.svc.queue.nextDue.get(now);
        if (!row) return { value: null, commit: false };
        claimed = { executionId: row.execution_id, attempt: row.attempt };
        return { value: runAttempt(this.svc, row, this.options.owner), commit: true };
      });
    } catch (error) {
      // The write lock was not to be had: nothing ran, nothing is counted.
      if (claimed === null || (error instanceof EngineError && error.code === 'BUSY')) throw error;
      // The attempt ran but could not be written (it rolled back): count it as failed, unless
      // another worker ran that execution in between.
      const { executionId, attempt } = claimed;
      return this.transactions.run('write', () => {
        const row = this.svc.queue.queuedById.get(executionId);
        if (!row || row.status !== 'QUEUED' || row.attempt !== attempt) return { value: null, commit: false };
        return { value: recordBrokenAttempt(this.svc, row, this.options.owner, error), commit: true };
      });
    }
  }

  /** Run due attempts until none is due (for tests and `tally worker --drain`). */
  drain(): number {
    let count = 0;
    for (let outcome = this.runOnce(); outcome; outcome = this.runOnce()) {
      count++;
      this.options.onAttempt?.(outcome);
    }
    return count;
  }

  /** Started and not stopped: its loop is running attempts as they come due. */
  get isRunning(): boolean {
    return this.running;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.stopped = this.loop();
  }

  /** Finish the attempt in progress (attempts are synchronous, so there is at most one), then stop. */
  async stop(): Promise<void> {
    this.running = false;
    this.wakeUp?.();
    await this.stopped;
  }

  wake(): void {
    this.wakeUp?.();
  }

  private async loop(): Promise<void> {
    while (this.running) {
      let outcome: AttemptOutcome | null = null;
      try {
        outcome = this.runOnce();
      } catch (error) {
        this.options.onError?.(error);
      }
      if (outcome) {
        this.options.onAttempt?.(outcome);
        await new Promise((resolve) => setImmediate(resolve));
        continue;
      }
      await this.idle();
    }
  }

  private async idle(): Promise<void> {
    const woken = new Promise<void>((resolve) => (this.wakeUp = resolve));
    const ac = new AbortController();
    await Promise.race([woken, sleep(this.untilNextMs(), undefined, { signal: ac.signal }).catch(() => undefined)]);
    ac.abort();
    this.wakeUp = null;
  }

  private untilNextMs(): number {
    try {
      const next = this.svc.queue.nextRunAt.get()?.run_at;
      if (!next) return this.options.pollMs;
      return Math.max(1, Math.min(this.options.pollMs, Date.parse(next) - this.svc.clock.now().getTime()));
    } catch {
      return this.options.pollMs;
    }
  }
}
