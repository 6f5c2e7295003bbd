import type { ActionVersion, ToolReference } from '../actions/actions.js';
import { EngineError } from '../errors.js';
import { derivedId } from '../ids.js';
import type { ModelToolSpec } from '../models/types.js';
import { type CallNode, rowToNode } from '../execution/call-tree.js';
import type { Outer } from '../execution/call-rules.js';
import type { ExecutionServices } from '../execution/services.js';
import type { AgentConfig, ModelConfig } from './config.js';
import type { ResolvedSkill } from '../skills/skills.js';
import type { RunClaim } from '../execution/queue/outside-runs.js';

/*
 * What every step of a model or agent run shares: its context, the step and record helpers, and
 * the signals that end a run early (a lost lease, a cancel, an approval to wait for).
 */

/** Allowance per try for the provider client's pause before a retry, in the bound on a whole model call. */
export const RETRY_PAUSE_MS = 10_000;

/** Thrown when this worker no longer holds the run (another one claimed it after the lease expired, or it was cancelled). */
export class LeaseLost extends Error {
  constructor(readonly executionId: string) {
    super(`the lease on ${executionId} was lost`);
  }
}

/** cancelExecution asked the run to stop: it ends CANCELLED at this step, never inside a tool call. */
export class Cancelled extends Error {
  constructor(readonly executionId: string) {
    super(`execution ${executionId} was cancelled`);
  }
}

/** The run parked on an approval (WAITING_APPROVAL, its lease given up): a decision or the expiry resumes it. */
export class Parked extends Error {
  constructor(readonly approvalId: string) {
    super(`waiting for approval ${approvalId}`);
  }
}

/** A model or agent run this worker claimed: RUNNING, leased to `owner`. */
/** One tool an agent declares, as its run offers it to the model. */
export interface OfferedTool {
  reference: ToolReference;
  /** The version the run calls (pinned, or the latest ACTIVE one when the run first offered it). */
  version: ActionVersion | null;
  native: 'graphql' | 'cel' | null;
  spec: ModelToolSpec;
  /** The built-in load_skill tool, offered to an agent that declares skills: these are its skills. */
  skills?: ResolvedSkill[];
}

export interface RunContext {
  svc: ExecutionServices;
  claim: RunClaim;
  executionId: string;
  version: ActionVersion;
  config: ModelConfig | AgentConfig;
  input: unknown;
  principal: string;
  /** The tools that were on the starter's stack, then the agent itself: every tool call is bounded by them. */
  outer: Outer;
  /** Epoch ms past which the run fails (agents: created + runTimeoutMs). */
  deadline: number;
  signal: AbortSignal;
  triggerDepth: number;
  /** Wake the worker: a tool call may have started executions. */
  wake: () => void;
  /** A session's turn: the session, and the messages before this turn. */
  session: { id: string; input: unknown; history: Array<{ role: 'USER' | 'ASSISTANT'; text: string }> } | null;
  /**
   * Run a version of kind model or agent under this run (the run itself, or a nested one a tool
   * call asks for): the loop is handed in by the runner, so a tool call never imports the loop it
   * runs inside.
   */
  runVersion: RunVersion;
}

/** What runs a version of kind model or agent, as the call `runId`, at nesting `depth`. */
export type RunVersion = (
  ctx: RunContext,
  runId: string,
  version: ActionVersion,
  input: unknown,
  depth: number,
) => Promise<unknown>;

export function leaseUntil(svc: ExecutionServices, now: Date): string {
  return new Date(now.getTime() + svc.limits.agentLeaseMs).toISOString();
}

/** Run `fn` in a write transaction of its own; whether it committed (BUSY and other driver failures are logged, not thrown). */
export function tryWrite(svc: ExecutionServices, fn: () => void): boolean {
  try {
    svc.transactions.run('write', () => {
      fn();
      return { value: undefined, commit: true };
    });
    return true;
  } catch (error) {
    svc.logError(error);
    return false;
  }
}

/**
 * A write step of the run: checks (and renews) the lease in the same transaction, so a worker
 * that lost the run writes nothing.
 */
export function step<T>(ctx: RunContext, fn: () => T): T {
  const { svc } = ctx;
  return svc.transactions.run('write', () => {
    const held =
      svc.queue.renewLease.run({
        execution_id: ctx.executionId,
        owner: ctx.claim.owner,
        until: leaseUntil(svc, svc.clock.now()),
      }).changes === 1;
    if (!held) throw new LeaseLost(ctx.executionId);
    if (svc.st.cancelRequested.get(ctx.executionId) === 1) throw new Cancelled(ctx.executionId);
    return { value: fn(), commit: true };
  });
}

export function recorded(ctx: RunContext, executionId: string): CallNode | null {
  const row = ctx.svc.transactions.run('read', () => ({
    value: ctx.svc.st.executionById.get(executionId),
    commit: false,
  }));
  return row ? rowToNode(row) : null;
}

export function checkDeadline(ctx: RunContext, what: string): void {
  if (ctx.signal.aborted) throw ctx.signal.reason instanceof Error ? ctx.signal.reason : new Error('aborted');
  if (ctx.svc.st.cancelRequested.get(ctx.executionId) === 1) throw new Cancelled(ctx.executionId);
  if (Date.now() > ctx.deadline) {
    throw new EngineError('TIMEOUT', `${ctx.version.name} ran past its whole-run deadline before ${what}`, {
      hint:
        ctx.version.kind === 'agent'
          ? 'Raise config.runTimeoutMs (at most agentRunMsMax), or give the agent less to do.'
          : 'The model did not answer in time; raise the provider’s timeout.',
      details: { retry: false },
    });
  }
}

/** Ids of a run's steps: derived from the run and the position, keyed with the database's secret. */
export function stepId(ctx: RunContext, runId: string, ...position: Array<string | number>): string {
  return derivedId(ctx.svc.derivedIdKey, 'agent-step', runId, ...position.map(String));
}

export function baseNode(
  ctx: RunContext,
  fields: Pick<
    CallNode,
    'executionId' | 'actionId' | 'actionName' | 'actionVersion' | 'kind' | 'input' | 'parentId' | 'rootId' | 'depth'
  >,
): CallNode {
  const now = ctx.svc.clock.now().toISOString();
  return {
    ...fields,
    status: 'RUNNING',
    inputFingerprint: null,
    output: null,
    error: null,
    principal: ctx.principal,
    attempt: ctx.claim.attempt,
    started: now,
    finished: null,
    logs: [],
    logBytes: 0,
    created: now,
    children: [],
  };
}
