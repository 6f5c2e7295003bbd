import { actionKindOfExecution, runsOutsideTransactions } from '../actions/actions.js';
import { startFollowUpOfCancelled } from './queue/follow-ups.js';
import { EngineError } from '../errors.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import { type CallFrame, type CallNode, childrenOf, rowToNode } from './call-tree.js';
import type { ExecutionServices } from './services.js';

/**
 * Execution records as the API reads and changes them: one execution, a page of them, the calls it
 * made, its invocations, the queue's counts, and cancelling one. The GraphQL resolvers (and any
 * other reader) come here rather than to the statements, as the ledger's come to `Ledger`. Every
 * function runs inside the caller's transaction; the caller checks its policies (guard) before or
 * after, as each says.
 */
export type ExecutionDeps = Pick<ExecutionServices, 'st' | 'queue' | 'sessions' | 'clock' | 'limits'>;

/** Which executions a page holds: by action, all its executions; otherwise top-level ones only. */
export interface ExecutionFilter {
  actionId?: string | null;
  status?: string | null;
  since?: string | null;
}

/** One attempt of an execution, as `Execution.invocations` gives it. */
export interface Invocation {
  attempt: number;
  status: string;
  output: unknown;
  error: unknown;
  started: string;
  finished: string | null;
  durationMs: number | null;
  logs: unknown;
}

/** A progress message as Execution.progress gives it. */
export interface Progress {
  seq: number;
  text: string;
  at: string;
  executionId: string;
}

/**
 * The progress messages of an execution after `after`, oldest first, at most `first`: for a
 * top-level execution its whole tree's, for a nested one its own (see Execution.progress). The
 * caller checks `first` and who may read each call.
 */
export function progress(deps: ExecutionDeps, node: CallNode, after: number, first: number): Progress[] {
  const id = node.executionId;
  return deps.st.progressAfter.all(id, after, id, id, after, first).map((r) => ({
    seq: r.seq,
    text: r.text,
    at: r.created,
    executionId: r.execution_id,
  }));
}

/** The seq of an execution's newest progress message (0: none yet). */
export function latestProgress(deps: ExecutionDeps, executionId: string): number {
  return deps.st.progressLatest.get(executionId, executionId) ?? 0;
}

/** The execution `executionId`, or null when there is none (a request that rolled back keeps none). */
export function find(deps: ExecutionDeps, executionId: string): CallNode | null {
  const row = deps.st.executionById.get(executionId);
  return row ? rowToNode(row) : null;
}

/** An execution known to exist (the one an approval waits on, or one just cancelled). */
export function get(deps: ExecutionDeps, executionId: string): CallNode {
  return rowToNode(deps.st.executionById.get(executionId)!);
}

/**
 * A page of executions, oldest first or newest first. A cursor names its order: one from a
 * newest-first page cannot be replayed on an oldest-first one.
 */
export function list(
  deps: ExecutionDeps,
  filter: ExecutionFilter | null | undefined,
  page: { first: number; after?: string | null; newestFirst: boolean },
): Connection<CallNode> {
  const { newestFirst } = page;
  const req = pageRequest<number>(
    page.first,
    page.after,
    deps.limits.pageSizeMax,
    'number',
    newestFirst ? 'executions-newest' : 'executions',
  );
  const rows = deps.st.executionsWhere(
    { actionId: filter?.actionId ?? null, status: filter?.status ?? null, since: filter?.since ?? null },
    req.after ?? (newestFirst ? Number.MAX_SAFE_INTEGER : 0),
    req.fetch,
    newestFirst,
  );
  return toConnection(rows, req, (r) => r.seq, rowToNode);
}

/** The execution that made the call `node`, or null for a top-level one (or one not kept). */
export function parent(deps: ExecutionDeps, node: CallNode): CallNode | null {
  return node.parentId ? find(deps, node.parentId) : null;
}

/** The calls `node` made, in order (see childrenOf). */
export function children(deps: ExecutionDeps, node: CallNode): CallNode[] {
  return childrenOf(deps.st, node);
}

/**
 * An execution's attempts, as recorded: a started execution's, and an agent's tool call that was
 * retried within its run; for one with no recorded attempt (a call, or one run at once), the one
 * it made, if it ran.
 */
export function invocations(deps: ExecutionDeps, node: CallNode): Invocation[] {
  const rows = deps.queue.invocations.all(node.executionId);
  if (rows.length > 0) {
    return rows.map((r) => ({
      attempt: r.attempt,
      status: r.status,
      output: r.output === null ? null : JSON.parse(r.output),
      error: r.error === null ? null : JSON.parse(r.error),
      started: r.started,
      finished: r.finished,
      durationMs: Date.parse(r.finished) - Date.parse(r.started),
      logs: r.logs === null ? [] : JSON.parse(r.logs),
    }));
  }
  return node.status === 'QUEUED' || node.status === 'CANCELLED' || node.attempt === 0 ? [] : [invocation(node)];
}

function invocation(node: CallNode): Invocation {
  const started = Date.parse(node.started);
  const finished = node.finished ? Date.parse(node.finished) : NaN;
  return {
    attempt: node.attempt,
    status: node.status,
    output: node.output,
    error: node.error,
    started: node.started,
    finished: node.finished,
    durationMs: Number.isNaN(finished) ? null : finished - started,
    logs: node.logs,
  };
}

/** The queue's top-level executions: QUEUED, RUNNING and FAILED. */
export function queueCounts(deps: ExecutionDeps): { queued: number; running: number; failed: number } {
  const counts = Object.fromEntries(deps.queue.counts.all().map((r) => [r.status, r.n]));
  return {
    queued: counts.QUEUED ?? 0,
    running: counts.RUNNING ?? 0,
    failed: deps.queue.failedCount.get()?.n ?? 0,
  };
}

/**
 * Cancel `node`, which the caller found and may update (it checked both first): a QUEUED execution
 * ends CANCELLED now; a model or agent run that is RUNNING or WAITING_APPROVAL is cancelled as
 * cancelRun says. Anything else is refused, and so is the execution whose attempt runs this very
 * call (`frame`). Returns the execution as it is now.
 */
export function cancel(deps: ExecutionServices, node: CallNode, frame: CallFrame | null): CallNode {
  const executionId = node.executionId;
  if (frame?.node.rootId === executionId) {
    // Its attempt is the one running this call: it is QUEUED until the attempt's outcome is written.
    throw new EngineError('BAD_REQUEST', `execution ${executionId} is running this call and cannot cancel itself`, {
      hint: 'Fail it with fail(message, hint, {retry: false}) instead.',
    });
  }
  const row = { execution_id: executionId, status: node.status, kind: node.kind, parent_id: node.parentId };
  if (row.status !== 'QUEUED' && !cancelRun(deps, row)) {
    throw new EngineError(
      'BAD_REQUEST',
      `execution ${executionId} is ${row.status}; only a QUEUED execution, or a model or agent run that is RUNNING or WAITING_APPROVAL, can be cancelled`,
      {
        hint:
          row.status === 'RUNNING'
            ? 'A tool attempt runs in one transaction and cannot be stopped from outside; it ends within its timeout.'
            : 'It has ended already.',
      },
    );
  }
  if (row.status === 'QUEUED') {
    deps.queue.cancel.run(deps.clock.now().toISOString(), executionId);
    // A payout cancelled before it was sent releases its hold (config.followUps.failed).
    startFollowUpOfCancelled(deps, executionId);
  }
  return get(deps, executionId);
}

/**
 * Cancel a model or agent run (top-level): RUNNING asks it to stop at its next step (never inside a
 * tool call); WAITING_APPROVAL ends it now, its pending approval CANCELLED. Returns false when the
 * execution is neither (the caller handles QUEUED and refuses the rest).
 */
export function cancelRun(
  deps: Pick<ExecutionServices, 'sessions' | 'clock'>,
  row: { execution_id: string; status: string; kind: string; parent_id: string | null },
): boolean {
  if (row.parent_id !== null || !runsOutsideTransactions(actionKindOfExecution(row.kind))) return false;
  const now = deps.clock.now().toISOString();
  if (row.status === 'RUNNING') {
    deps.sessions.requestCancel.run(now, row.execution_id);
    return true;
  }
  if (row.status === 'WAITING_APPROVAL') {
    deps.sessions.cancelParked.run({ id: row.execution_id, now });
    deps.sessions.cancelApprovalsOf.run(now, row.execution_id);
    return true;
  }
  return false;
}

/** What an outside call (HTTP, MCP) sent: its idempotency key and its sends; null for another kind or none sent. */
export function outbound(
  svc: Pick<ExecutionServices, 'queue'>,
  node: Pick<CallNode, 'kind' | 'executionId'>,
): { idempotencyKey: string; sends: number; lastSent: string } | null {
  if (node.kind !== 'HTTP' && node.kind !== 'MCP') return null;
  const sent = svc.queue.sendsOf.get(node.executionId);
  return sent ? { idempotencyKey: sent.idempotency_key, sends: sent.sends, lastSent: sent.last_sent } : null;
}
