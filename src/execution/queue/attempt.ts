import { getVersion } from '../../actions/actions.js';
import { EngineError, ERROR_CODES, type ErrorData } from '../../errors.js';
import { Authority } from '../../policy/authority.js';
import type { QueueRow } from '../../storage/statements/actions.js';
import { type CallNode, persistTree } from '../call-tree.js';
import { runCall, toEngineError } from '../invoke.js';
import type { ExecutionServices } from '../services.js';
import { backoffDelayMs } from './backoff.js';

export interface AttemptOutcome {
  executionId: string;
  attempt: number;
  status: 'SUCCEEDED' | 'FAILED' | 'QUEUED';
  error: ErrorData | null;
  runAt: string | null;
}

/**
 * One attempt of a started execution. The caller holds the write transaction: the attempt's
 * writes (under its savepoint), its status, its invocation row and its call tree commit together.
 * The starter's authority is read again now: a deleted client or a revoked policy fails it.
 */
export function runAttempt(svc: ExecutionServices, row: QueueRow, owner: string): AttemptOutcome {
  const attempt = row.attempt + 1;
  const startedAt = svc.clock.now();
  const input: unknown = JSON.parse(row.input);
  let node: CallNode | null = null;
  let error: ErrorData | null = null;
  try {
    const caller = svc.callerOf(row.principal ?? 'system');
    if (!caller) {
      throw new EngineError('ACCESS_DENIED', `the starter ${JSON.stringify(row.principal)} no longer exists`, { hint: 'Start it again as an existing client.' });
    }
    const authority = new Authority(svc.cel, caller.principal, { principal: caller.principal }, caller.client, null);
    authority.check({ action: 'INSERT', resource: 'actions.Execution', document: { action: row.action_name, version: row.action_version, input } });
    const version = getVersion(svc.actions, { id: row.action_id!, version: row.action_version! });
    if (version.status !== 'ACTIVE') throw new EngineError('VERSION_LOCKED', `${version.name} version ${version.version} is ${version.status}`);
    const timeoutMs = version.execution.timeoutMs ?? svc.limits.toolTimeoutMs;
    node = runCall(svc, {
      target: { type: 'version', version },
      input,
      executionId: row.execution_id,
      parent: null,
      root: { deadline: Date.now() + timeoutMs, calls: 0, principal: caller.principal, caller, fatal: null, resolved: new Map(), input },
      inputFingerprint: row.input_fingerprint,
    });
    error = node.error;
  } catch (e) {
    error = toEngineError(e).toData();
  }

  const succeeded = node?.status === 'SUCCEEDED';
  const retry = !succeeded && error !== null && isRetryable(error) && attempt < (row.max_attempts ?? 1);
  const status = succeeded ? 'SUCCEEDED' : retry ? 'QUEUED' : 'FAILED';
  const finished = svc.clock.now().toISOString();
  const runAt = retry ? new Date(svc.clock.now().getTime() + backoffDelayMs(versionBackoff(svc, row), attempt, svc.random)).toISOString() : null;
  const logs = node && node.logs.length > 0 ? JSON.stringify(node.logs) : null;
  const output = succeeded ? JSON.stringify(node!.output ?? null) : null;
  svc.queue.finishAttempt.run({
    execution_id: row.execution_id, status, attempt, output, error: error ? JSON.stringify(error) : null,
    started: startedAt.toISOString(), finished, logs, run_at: runAt, lease_owner: owner,
  });
  svc.queue.insertInvocation.run({
    execution_id: row.execution_id, attempt, status: succeeded ? 'SUCCEEDED' : 'FAILED', output, error: error ? JSON.stringify(error) : null,
    started: startedAt.toISOString(), finished, logs,
  });
  for (const child of node?.children ?? []) persistTree(svc.st, child);
  return { executionId: row.execution_id, attempt, status, error, runAt };
}

/** Retry what can succeed on its own: TIMEOUT, SCRIPT_ERROR, TOOL_FAILED (unless the tool said not to), BUSY. */
function isRetryable(error: ErrorData): boolean {
  if (error.code === 'TOOL_FAILED' && (error.details as { retry?: unknown } | undefined)?.retry === false) return false;
  return ERROR_CODES[error.code].retryable;
}

function versionBackoff(svc: ExecutionServices, row: QueueRow) {
  try {
    return getVersion(svc.actions, { id: row.action_id!, version: row.action_version! }).execution.backoff;
  } catch {
    return { initialMs: 1000, multiplier: 2, maxMs: 60_000 };
  }
}
