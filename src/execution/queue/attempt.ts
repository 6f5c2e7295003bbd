import { DEFAULT_EXECUTION, getVersion } from '../../actions/actions.js';
import { EngineError, ERROR_CODES, type ErrorCode, type ErrorData } from '../../errors.js';
import type { QueueRow } from '../../storage/statements/actions.js';
import { type CallNode, persistProgress, persistTree } from '../call-tree.js';
import { succeeded as answered, toEngineError } from '../checks.js';
import { beginCall } from '../entry.js';
import { outerOf, type VersionRef } from '../call-rules.js';
import type { ExecutionServices } from '../services.js';
import { backoffDelayMs } from './backoff.js';
import { jsonToCel } from '../../cel/values.js';
import type { Logger } from '../../log.js';

export interface AttemptOutcome {
  executionId: string;
  /** The action's name and the version the attempt ran (null when it had none to run). */
  action: string;
  version: number | null;
  attempt: number;
  maxAttempts: number;
  /** QUEUED: the attempt failed and the execution is retried at `runAt`. */
  status: 'SUCCEEDED' | 'FAILED' | 'QUEUED';
  error: ErrorData | null;
  runAt: string | null;
  /** Wall time the attempt ran, whatever the engine's clock says. */
  durationMs: number;
}

/**
 * One attempt of a started execution. The caller holds the write transaction: the attempt's
 * writes (under its savepoint), its status, its invocation row and its call tree commit together.
 * The starter's authority is read again now: a deleted client or a revoked policy fails it.
 */
export function runAttempt(svc: ExecutionServices, row: QueueRow, owner: string): AttemptOutcome {
  const attempt = row.attempt + 1;
  const startedAt = svc.clock.now();
  const startedMs = performance.now();
  const input: unknown = JSON.parse(row.input);
  let node: CallNode | null = null;
  let error: ErrorData | null = null;
  let backoff = DEFAULT_EXECUTION.backoff;
  let retryIf: string | null = null;
  try {
    const caller = svc.callerOf(row.principal ?? 'system');
    if (!caller) {
      throw new EngineError('ACCESS_DENIED', `the starter ${JSON.stringify(row.principal)} no longer exists`, {
        hint: 'Start it again as an existing client.',
      });
    }
    const outer = outerOf(svc.actions, row.start_stack ? (JSON.parse(row.start_stack) as VersionRef[]) : []);
    const version = getVersion(svc.actions, { id: row.action_id!, version: row.action_version! });
    backoff = version.execution.backoff;
    retryIf = retryRule(version);
    // The attempt is the request here: its deadline (the version's timeout) bounds its resolvers
    // and CEL too, and its changes fire triggers one level below its own. An attempt that ran past
    // it fails whole (an assertion cut short would have hidden rows from it), its writes rolled back.
    node = svc.transactions.savepoint(() => {
      const { node: ran, overran } = beginCall(svc, {
        caller,
        target: { type: 'version', version },
        input,
        executionId: row.execution_id,
        inputFingerprint: row.input_fingerprint,
        outer,
        authorize: true,
        attempt,
        triggerDepth: row.trigger_depth,
      });
      if (overran && ran.status === 'SUCCEEDED') throw overran;
      return ran;
    });
    error = node.error;
  } catch (e) {
    error = toEngineError(e).toData();
  }

  return finish(svc, row, owner, { attempt, startedAt, startedMs, node, error, backoff, retryIf });
}

/**
 * An attempt that failed in the engine rather than in the tool (its outcome could not be
 * written): the caller rolled it back, and records it here, in a transaction of its own, as a
 * counted INTERNAL failure, retried with backoff like any other. One such execution cannot
 * hold up the queue.
 */
export function recordBrokenAttempt(
  svc: ExecutionServices,
  row: QueueRow,
  owner: string,
  cause: unknown,
): AttemptOutcome {
  svc.logError(cause);
  let backoff = DEFAULT_EXECUTION.backoff;
  try {
    backoff = getVersion(svc.actions, { id: row.action_id!, version: row.action_version! }).execution.backoff;
  } catch {
    // The version cannot be read either: the default backoff.
  }
  // The cause (a driver message, say) goes to the log, not into a record clients read.
  const error = new EngineError(
    'INTERNAL',
    `attempt ${row.attempt + 1} of ${row.action_name} could not be recorded (an internal error, logged)`,
  ).toData();
  return finish(svc, row, owner, {
    attempt: row.attempt + 1,
    startedAt: svc.clock.now(),
    startedMs: performance.now(),
    node: null,
    error,
    backoff,
  });
}

function finish(
  svc: ExecutionServices,
  row: QueueRow,
  owner: string,
  {
    attempt,
    startedAt,
    startedMs,
    node,
    error,
    backoff,
    retryIf = null,
  }: {
    attempt: number;
    startedAt: Date;
    startedMs: number;
    node: CallNode | null;
    error: ErrorData | null;
    backoff: typeof DEFAULT_EXECUTION.backoff;
    retryIf?: string | null;
  },
): AttemptOutcome {
  const succeeded = node !== null && answered(node);
  const maxAttempts = row.max_attempts ?? 1;
  const retry = !succeeded && error !== null && shouldRetry(svc, retryIf, error, attempt) && attempt < maxAttempts;
  const status = succeeded ? 'SUCCEEDED' : retry ? 'QUEUED' : 'FAILED';
  const finished = svc.clock.now().toISOString();
  const runAt = retry
    ? new Date(svc.clock.now().getTime() + backoffDelayMs(backoff, attempt, svc.random)).toISOString()
    : null;
  const logs = node && node.logs.length > 0 ? JSON.stringify(node.logs) : null;
  const output = succeeded ? JSON.stringify(node!.output ?? null) : null;
  svc.queue.finishAttempt.run({
    execution_id: row.execution_id,
    status,
    attempt,
    output,
    error: error ? JSON.stringify(error) : null,
    started: startedAt.toISOString(),
    finished,
    logs,
    run_at: runAt,
    lease_owner: owner,
  });
  svc.queue.insertInvocation.run({
    execution_id: row.execution_id,
    attempt,
    status: succeeded ? 'SUCCEEDED' : 'FAILED',
    output,
    error: error ? JSON.stringify(error) : null,
    started: startedAt.toISOString(),
    finished,
    logs,
  });
  // A failed attempt rolled back: what its calls did is undone with it.
  const undone = !succeeded || node?.undone === true;
  for (const child of node?.children ?? []) persistTree(svc.st, child, undone, false);
  if (node) persistProgress(svc.st, node);
  return {
    executionId: row.execution_id,
    action: row.action_name,
    version: row.action_version,
    attempt,
    maxAttempts,
    status,
    error,
    runAt,
    durationMs: performance.now() - startedMs,
  };
}

/** A version's `execution.retryIf` (CEL over the failed attempt's error), or null. */
export function retryRule(version: { execution: unknown }): string | null {
  return (version.execution as { retryIf?: string | null }).retryIf ?? null;
}

/** What no retry rule overrides: the call was refused, not failed, so no attempt can differ. */
const REFUSALS: ReadonlySet<ErrorCode> = new Set(['ACCESS_DENIED', 'UNAUTHENTICATED', 'INPUT_INVALID', 'BAD_REQUEST']);

/**
 * Whether a failed attempt is tried again, for every kind of attempt (a started execution's, a
 * tool call's within an agent run): never a refusal (denied, bad input) nor a failure the tool
 * marked {retry: false}; otherwise the version's retryIf when it has one — CEL over `error`
 * {code, message, hint, attempt, retryable} that must give true — else isRetryable. A retryIf that
 * does not evaluate to a bool retries nothing (and says so in the log).
 */
export function shouldRetry(
  svc: ExecutionServices,
  retryIf: string | null,
  error: ErrorData,
  attempt: number,
): boolean {
  if (REFUSALS.has(error.code)) return false;
  if ((error.details as { retry?: unknown } | null | undefined)?.retry === false) return false;
  if (retryIf === null) return isRetryable(error);
  try {
    const verdict = svc.cel.evaluate(
      retryIf,
      jsonToCel({
        error: {
          code: error.code,
          message: error.message,
          hint: error.hint ?? null,
          attempt,
          retryable: isRetryable(error),
        },
      }) as Record<string, unknown>,
    );
    if (typeof verdict === 'boolean') return verdict;
    svc.log.warn({ event: 'retryIf', retryIf, result: String(verdict) }, 'retryIf did not give a bool: not retried');
  } catch (e) {
    svc.log.warn({ event: 'retryIf', retryIf, error: (e as Error).message }, 'retryIf failed to evaluate: not retried');
  }
  return false;
}

/**
 * Retry only what can pass on its own: the codes ERROR_CODES marks retryable (TIMEOUT, TOOL_FAILED
 * unless the tool said `{retry: false}`, BUSY, INTERNAL). A deterministic failure (SCRIPT_ERROR, a
 * program's own uncaught exception such as a ReferenceError; INPUT_INVALID; ACCESS_DENIED; …)
 * fails the same way every time, so it ends the execution at once. A program that wants another
 * attempt calls fail(). A nested call's error keeps its code, so a BUSY below is still retried.
 */
export function isRetryable(error: ErrorData): boolean {
  // A tool that said fail(…, {retry: false}), or an agent run past its whole-run deadline.
  if ((error.details as { retry?: unknown } | null | undefined)?.retry === false) return false;
  return ERROR_CODES[error.code].retryable;
}

/** One line per attempt: info when it succeeded, warn when it failed (with the next retry time, if any). */
export function logAttempt(logger: Logger, outcome: AttemptOutcome): void {
  const fields = {
    event: 'attempt',
    executionId: outcome.executionId,
    action: outcome.version === null ? outcome.action : `${outcome.action}@${outcome.version}`,
    attempt: outcome.attempt,
    maxAttempts: outcome.maxAttempts,
    outcome: outcome.status === 'QUEUED' ? 'RETRY' : outcome.status,
    durationMs: Math.round(outcome.durationMs * 10) / 10,
    ...(outcome.error ? { code: outcome.error.code } : {}),
    ...(outcome.runAt ? { retryAt: outcome.runAt } : {}),
  };
  if (outcome.status === 'SUCCEEDED') logger.info(fields, 'attempt succeeded');
  else if (outcome.status === 'QUEUED') logger.warn(fields, `attempt failed, retry at ${outcome.runAt}`);
  else if (outcome.error && isRetryable(outcome.error)) logger.warn(fields, 'attempt failed, no attempts left');
  else logger.warn(fields, `attempt failed, not retried (${outcome.error?.code ?? 'the error'} is not retryable)`);
}
