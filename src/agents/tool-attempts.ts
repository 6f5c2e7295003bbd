import { setTimeout as sleep } from 'node:timers/promises';
import { executionKindOf } from '../actions/actions.js';
import { EngineError, type ErrorData } from '../errors.js';
import { type CallNode, persistTree, rowToNode } from '../execution/call-tree.js';
import { beginCall } from '../execution/entry.js';
import { succeeded, toEngineError } from '../execution/checks.js';
import { retryRule, shouldRetry } from '../execution/queue/attempt.js';
import { backoffDelayMs } from '../execution/queue/backoff.js';
import { type OfferedTool, type RunContext, LeaseLost, baseNode, checkDeadline, step } from './run-context.js';

/*
 * A tool an agent's model called, run through the one call entry (beginCall) in a transaction of its
 * own per attempt, and retried by the tool's own execution settings (maxAttempts, backoff,
 * retryIf) within the run, the way a started execution is: one row for the call, one invocation
 * per attempt (Execution.invocations), every attempt's calls beneath the row (a failed attempt's
 * marked undone, its writes rolled back). The model hears only the last attempt's outcome.
 */

export interface ToolAttempts {
  callId: string;
  attach: { parentId: string; rootId: string; depth: number };
  tool: OfferedTool;
  input: unknown;
  /** The call's row when the run resumes with it RUNNING (an attempt failed, another was due). */
  resumed: CallNode | null;
  /** Attempts the run's maxToolCalls still allows this call (at least 1: this one). */
  callsLeft: number;
}

/** The call's last outcome, and how many attempts it took (each counts as one of the run's tool calls). */
export interface Attempted {
  node: CallNode;
  attempts: number;
}

/**
 * Run the tool, and again while its retry rule asks and the run allows: at most its maxAttempts,
 * its attempts counted against the run's maxToolCalls, its backoff waited outside any transaction
 * (the lease kept) within agentToolRetryWaitMsMax in all and before the run's deadline. A refusal
 * (denied, bad input) and a failure marked {retry: false} are never retried.
 */
export async function attemptTool(ctx: RunContext, call: ToolAttempts): Promise<Attempted> {
  const { svc } = ctx;
  const version = call.tool.version;
  const maxAttempts = version ? version.execution.maxAttempts : 1;
  let attempt = call.resumed ? attemptsOf(ctx, call.callId) + 1 : 1;
  let exists = call.resumed !== null;
  let waited = 0;
  for (; ; attempt++) {
    const delay = version ? backoffDelayMs(version.execution.backoff, attempt, svc.random) : 0;
    const again = (error: ErrorData | null): boolean =>
      error !== null &&
      version !== null &&
      attempt < maxAttempts &&
      attempt < call.callsLeft &&
      waited + delay <= svc.limits.agentToolRetryWaitMsMax &&
      Date.now() + delay < ctx.deadline &&
      shouldRetry(svc, retryRule(version), error, attempt);
    const outcome = await once(ctx, call, attempt, exists, again);
    if (!outcome.again) return { node: outcome.node, attempts: attempt };
    exists = true;
    waited += delay;
    try {
      await sleep(delay, undefined, { signal: ctx.signal });
    } catch {
      // Aborted: the lease was lost, the run cancelled, or the worker is stopping.
    }
    checkDeadline(ctx, `attempt ${attempt + 1} of ${call.tool.reference.name}`);
  }
}

/** One attempt, recorded in the same transaction; whether another follows. */
async function once(
  ctx: RunContext,
  call: ToolAttempts,
  attempt: number,
  exists: boolean,
  again: (error: ErrorData | null) => boolean,
): Promise<{ node: CallNode; again: boolean }> {
  const { svc } = ctx;
  const { tool } = call;
  let fatal: EngineError | null = null;
  try {
    return step(ctx, () => {
      const caller = svc.callerOf(ctx.principal);
      if (!caller)
        throw new EngineError('ACCESS_DENIED', `the starter ${JSON.stringify(ctx.principal)} no longer exists`);
      const target = tool.native
        ? ({ type: 'native', name: tool.native } as const)
        : ({ type: 'version', version: tool.version! } as const);
      const begun = beginCall(svc, {
        caller,
        target,
        input: call.input,
        executionId: call.callId,
        inputFingerprint: null,
        outer: ctx.outer,
        authorize: true,
        attempt,
        attach: call.attach,
        triggerDepth: ctx.triggerDepth,
        deadlineCap: ctx.deadline,
        executionInput: ctx.input,
        model: { agent: `${ctx.version.name}@${ctx.version.version}` },
      });
      if (begun.fatal || begun.overran) {
        fatal = toEngineError(begun.fatal ?? begun.overran);
        throw fatal;
      }
      const more = !succeeded(begun.node) && again(begun.node.error);
      return { node: record(ctx, call.callId, begun.node, attempt, exists, more), again: more };
    });
  } catch (error) {
    if (error instanceof LeaseLost || error !== fatal || fatal === null) throw error;
    // The attempt ran past its deadline (or hit a busy database) and rolled back whole: recorded as
    // its failure, so the model hears of it (or it is tried again) and the run goes on.
    const reason: EngineError = fatal;
    if (reason.code === 'BUSY') throw reason;
    const now = svc.clock.now().toISOString();
    const node: CallNode = {
      ...baseNode(ctx, {
        executionId: call.callId,
        actionId: tool.version?.actionId ?? null,
        actionName: tool.reference.name,
        actionVersion: tool.version?.version ?? null,
        kind: kindOf(tool),
        input: call.input,
        ...call.attach,
      }),
      attempt,
      status: 'FAILED',
      error: reason.toData(),
      finished: now,
    };
    const more = again(node.error);
    return step(ctx, () => ({ node: record(ctx, call.callId, node, attempt, exists, more), again: more }));
  } finally {
    ctx.wake();
  }
}

/**
 * Record one attempt, as a started execution's are: the call's row (written at the first attempt,
 * RUNNING while another is due, its status, attempt and outcome the last one's), the attempt's
 * invocation (once the call is tried more than once), and the attempt's calls beneath the row.
 */
function record(
  ctx: RunContext,
  callId: string,
  node: CallNode,
  attempt: number,
  exists: boolean,
  again: boolean,
): CallNode {
  const { svc } = ctx;
  const ok = succeeded(node);
  const output = ok ? JSON.stringify(node.output ?? null) : null;
  const error = node.error ? JSON.stringify(node.error) : null;
  const logs = node.logs.length > 0 ? JSON.stringify(node.logs) : null;
  const finished = node.finished ?? svc.clock.now().toISOString();
  if (!exists) {
    persistTree(svc.st, again ? { ...node, status: 'RUNNING' } : node);
  } else {
    svc.queue.finishAttempt.run({
      execution_id: callId,
      status: again ? 'RUNNING' : node.status,
      attempt,
      output,
      error,
      started: node.started,
      finished,
      logs,
      run_at: null,
      lease_owner: null,
    });
    const undone = !ok || node.undone === true;
    for (const child of node.children) persistTree(svc.st, child, undone);
  }
  if (again || attempt > 1) {
    svc.queue.insertInvocation.run({
      execution_id: callId,
      attempt,
      status: ok ? 'SUCCEEDED' : 'FAILED',
      output,
      error,
      started: node.started,
      finished,
      logs,
    });
  }
  return !exists && !again ? node : rowToNode(svc.st.executionById.get(callId)!);
}

/** The attempts a call has recorded (a resumed run goes on from the next). */
function attemptsOf(ctx: RunContext, callId: string): number {
  return ctx.svc.transactions.run('read', () => ({
    value: ctx.svc.queue.invocations.all(callId).length,
    commit: false,
  }));
}

/** The attempts a recorded call took: its invocations, or the one it ran. */
export function recordedAttempts(ctx: RunContext, callId: string): number {
  return Math.max(1, attemptsOf(ctx, callId));
}

/** The kind of execution a call of `tool` is recorded as. */
export function kindOf(tool: OfferedTool | null): CallNode['kind'] {
  if (tool?.native) return tool.native === 'graphql' ? 'GRAPHQL' : 'CEL';
  return executionKindOf(tool?.version?.kind ?? 'tool');
}
