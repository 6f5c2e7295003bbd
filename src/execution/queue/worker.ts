import { setTimeout as sleep } from 'node:timers/promises';
import type { TransactionManager } from '../../storage/transaction.js';
import type { ExecutionServices } from '../services.js';
import { EngineError } from '../../errors.js';
import { actionKindOfExecution, runsOutsideTransactions } from '../../actions/actions.js';
import { type AttemptOutcome, recordBrokenAttempt, runAttempt } from './attempt.js';
import type { OutsideRunsFactory, OutsideTransactionRuns, RunClaim } from './outside-runs.js';

export interface WorkerOptions {
  /** Names this worker in lease_owner. */
  owner: string;
  /** Longest sleep when nothing is due; a start in this process wakes it at once. */
  pollMs: number;
  onAttempt?: (outcome: AttemptOutcome) => void;
  onError?: (error: unknown) => void;
  /**
   * Wake this worker when another process starts an execution (PostgreSQL: LISTEN). Called at
   * start() with the worker's wake; returns what stops it, called at stop().
   */
  subscribe?: (wake: () => void) => () => void;
}

/**
 * Claims due executions and runs their attempts in BEGIN IMMEDIATE transactions together with
 * their status updates, several due attempts per transaction (workerBatchMax; runOnce: one). SQLite admits one writer, so two workers (threads
 * or processes) can never run the same attempt: the second sees the first's committed outcome.
 * A crash mid-attempt rolls the whole attempt back, and the execution is still QUEUED.
 */
export class Worker {
  private running = false;
  private stopped: Promise<void> | null = null;
  private wakeUp: (() => void) | null = null;
  private unsubscribe: (() => void) | null = null;
  /** The last look found due executions, all held by other workers (see next and untilNextMs). */
  private heldElsewhere = false;
  /** Model and agent runs in flight: they run outside transactions, beside the attempts. */
  private readonly runs: OutsideTransactionRuns;
  private runOutcomes = 0;
  /** The last group of attempts failed to commit: run the next attempt alone. */
  private singleNext = false;

  constructor(
    private readonly svc: ExecutionServices,
    private readonly transactions: TransactionManager,
    private readonly options: WorkerOptions,
    /** The runs of the kinds that run outside transactions (model, agent): the composition root's AgentRuns. */
    outsideRuns: OutsideRunsFactory,
  ) {
    this.runs = outsideRuns(svc, {
      owner: options.owner,
      onOutcome: (outcome) => {
        this.runOutcomes++;
        this.options.onAttempt?.(outcome);
      },
      wake: () => this.wake(),
    });
  }

  /** Model and agent runs this worker has in flight. */
  get runsInFlight(): number {
    return this.runs.size;
  }

  /**
   * Run the next due attempt, if any, and return what happened (null when nothing was due). A due
   * model or agent run is claimed and started in the background (see OutsideTransactionRuns) on the way.
   */
  runOnce(): AttemptOutcome | null {
    for (;;) {
      const next = this.next(1);
      if (next !== 'launched') return next?.[0] ?? null;
    }
  }

  /**
   * Due attempts in one transaction (a group commit, as the server's for requests): up to
   * `max`, stopping at writeBatchWaitMs of work and before a model or agent run. Each attempt runs
   * under its own savepoint and records its own outcome, as it would alone; they are independent
   * in that each sees what the ones before it committed, exactly as in consecutive transactions.
   * After a group whose COMMIT failed, the next one is a single attempt, so that the attempt that
   * broke it is counted on its own (see the catch below).
   */
  private next(max: number): AttemptOutcome[] | 'launched' | null {
    const now = this.svc.clock.now().toISOString();
    const which = this.runs.claimable();
    const next = this.svc.queue.nextRunAt.get(which);
    if (!next?.run_at || next.run_at > now) return null;
    const groupMax = this.singleNext ? 1 : max;
    this.singleNext = false;
    let claimed: { executionId: string; attempt: number } | null = null;
    const began = performance.now();
    try {
      const result = this.transactions.run<AttemptOutcome[] | RunClaim | null | 'taken' | null>('write', () => {
        // Run again after a lost race (PostgreSQL): what an earlier run claimed was rolled back.
        claimed = null;
        const outcomes: AttemptOutcome[] = [];
        while (
          outcomes.length < groupMax &&
          (outcomes.length === 0 || performance.now() - began < this.svc.limits.writeBatchWaitMs)
        ) {
          const row = this.svc.queue.nextDue.get({ now, ...which });
          if (!row) break;
          if (runsOutsideTransactions(actionKindOfExecution(row.kind))) {
            // Left for a transaction of its own (see below) when attempts ran in this one.
            if (outcomes.length > 0) break;
            // Claimed here, run outside this transaction: its model calls take seconds.
            const claim = this.runs.claim(row);
            return { value: claim ?? 'taken', commit: claim !== null };
          }
          claimed = { executionId: row.execution_id, attempt: row.attempt };
          outcomes.push(runAttempt(this.svc, row, this.options.owner));
        }
        return { value: outcomes.length > 0 ? outcomes : null, commit: outcomes.length > 0 };
      });
      // Due, but every due row is held by another process's worker (PostgreSQL: SKIP LOCKED): wait
      // for a notification or the next poll rather than ask again at once.
      this.heldElsewhere = result === null;
      if (result === 'taken') return 'launched';
      if (result !== null && 'owner' in result) {
        this.runs.launch(result);
        return 'launched';
      }
      return result;
    } catch (error) {
      // The write lock was not to be had: nothing ran, nothing is counted.
      if (claimed === null || (error instanceof EngineError && error.code === 'BUSY')) throw error;
      if (groupMax > 1) {
        // A group of attempts could not be written: none of them counts. Run them one by one next.
        this.singleNext = true;
        throw error;
      }
      // The attempt ran but could not be written (it rolled back): count it as failed, unless
      // another worker ran that execution in between.
      const { executionId, attempt } = claimed;
      const broken = this.transactions.run('write', () => {
        const row = this.svc.queue.queuedById.get(executionId);
        if (row?.status !== 'QUEUED' || row.attempt !== attempt) return { value: null, commit: false };
        return { value: recordBrokenAttempt(this.svc, row, this.options.owner, error), commit: true };
      });
      return broken ? [broken] : null;
    }
  }

  /** Run due attempts until none is due; model and agent runs are started, not waited for (see drainAll). */
  drain(): number {
    let count = 0;
    for (;;) {
      let next: AttemptOutcome[] | 'launched' | null;
      try {
        next = this.next(this.svc.limits.workerBatchMax);
      } catch (error) {
        if (!this.singleNext) throw error;
        continue;
      }
      if (next === null) return count;
      if (next === 'launched') continue;
      for (const outcome of next) {
        count++;
        this.options.onAttempt?.(outcome);
      }
    }
  }

  /**
   * Run due attempts, model and agent runs included, until none is due and none is in flight (for
   * tests and `tally worker --drain`). Returns the attempts that ended.
   */
  async drainAll(): Promise<number> {
    const before = this.runOutcomes;
    let count = 0;
    for (;;) {
      count += this.drain();
      if (this.runs.size === 0) return count + this.runOutcomes - before;
      await this.runs.oneSettled();
    }
  }

  /** Started and not stopped: its loop is running attempts as they come due. */
  get isRunning(): boolean {
    return this.running;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.unsubscribe = this.options.subscribe?.(() => this.wake()) ?? null;
    this.stopped = this.loop();
  }

  /** Finish the attempt in progress (attempts are synchronous, so there is at most one), then stop. */
  async stop(): Promise<void> {
    this.running = false;
    this.unsubscribe?.();
    this.unsubscribe = null;
    this.wakeUp?.();
    await this.stopped;
    // Runs in flight stop at their next step and go back to the queue, due at once.
    await this.runs.stop();
  }

  wake(): void {
    this.wakeUp?.();
  }

  private async loop(): Promise<void> {
    while (this.running) {
      let outcome: AttemptOutcome[] | 'launched' | null = null;
      try {
        outcome = this.next(this.svc.limits.workerBatchMax);
      } catch (error) {
        if (this.singleNext) continue;
        this.options.onError?.(error);
      }
      if (outcome) {
        if (outcome !== 'launched') for (const one of outcome) this.options.onAttempt?.(one);
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
    if (this.heldElsewhere) return this.options.pollMs;
    try {
      const next = this.svc.queue.nextRunAt.get(this.runs.claimable())?.run_at;
      if (!next) return this.options.pollMs;
      return Math.max(1, Math.min(this.options.pollMs, Date.parse(next) - this.svc.clock.now().getTime()));
    } catch {
      return this.options.pollMs;
    }
  }
}
