import type { QueueRow } from '../../storage/statements/actions.js';
import type { ExecutionServices } from '../services.js';
import type { AttemptOutcome } from './attempt.js';

/*
 * The kinds that run outside any transaction (model, agent) are not the queue's to know: the
 * worker claims their rows and hands them to an OutsideTransactionRuns the composition root gives
 * it (src/agents/runner.ts AgentRuns). So execution never imports agents; agents import execution.
 */

/** A claimed run of a kind that runs outside transactions: its row, the lease owner, the attempt. */
export interface RunClaim {
  row: QueueRow;
  owner: string;
  attempt: number;
}

/** What a worker tells the runs it hosts. */
export interface OutsideRunsOptions {
  owner: string;
  onOutcome: (outcome: AttemptOutcome) => void;
  wake: () => void;
}

/** The runs in flight of the kinds that run outside transactions, as the worker drives them. */
export interface OutsideTransactionRuns {
  /** Runs in flight. */
  readonly size: number;
  /** How many more runs may be claimed now, and the principals already at their share (for the claim query). */
  claimable(): { runs: number; busy: string };
  /** Claim `row` (inside the worker's transaction); null when it may not run now. */
  claim(row: QueueRow): RunClaim | null;
  /** Start a claimed run, after the claim's transaction committed. */
  launch(claim: RunClaim): void;
  /** Resolves when any run in flight settles. */
  oneSettled(): Promise<void>;
  /** Stop claiming; resolves when the runs in flight have stopped. */
  stop(): Promise<void>;
}

/** Makes a worker's OutsideTransactionRuns. */
export type OutsideRunsFactory = (svc: ExecutionServices, options: OutsideRunsOptions) => OutsideTransactionRuns;
