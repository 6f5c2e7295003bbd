import { randomUUID } from 'node:crypto';
import {
  type ActionVersion,
  DEFAULT_EXECUTION,
  getVersion,
  LOAD_SKILL_TOOL,
  NATIVE_TOOLS,
  runsOutsideTransactions,
  type ToolReference,
} from '../actions/actions.js';
import { EngineError, type ErrorData } from '../errors.js';
import { derivedId } from '../ids.js';
import type { ModelMessage, ModelResponse, ModelToolCall, ModelToolResult, ModelToolSpec } from '../models/types.js';
import type { QueueRow } from '../storage/statements/actions.js';
import { type CallNode, type ModelCallRecord, persistTree, rowToNode } from '../execution/call-tree.js';
import {
  authorityOf,
  checkMayCall,
  checkRunnable,
  type Outer,
  outerOf,
  outerWith,
  referencedVersion,
  type VersionRef,
} from '../execution/call-rules.js';
import { beginCall } from '../execution/entry.js';
import { fixedInput, succeeded, toEngineError, validate } from '../execution/invoke.js';
import { jsonToCel } from '../cel/values.js';
import { isRetryable, retryRule, shouldRetry } from '../execution/queue/attempt.js';
import { backoffDelayMs } from '../execution/queue/backoff.js';
import type { ExecutionServices } from '../execution/services.js';
import { type AgentConfig, type ModelConfig, modelConfig, renderPrompt } from './config.js';
import type { ResolvedSkill } from '../skills/skills.js';
import type { OutsideRunsOptions, OutsideTransactionRuns, RunClaim } from '../execution/queue/outside-runs.js';

/** Names longer than this are cut in what the model and the records are told. */
const NAME_SHOWN_MAX = 64;
/** Tool names listed to a model that asked for one it does not have. */
const NAMES_LISTED_MAX = 20;
/** Allowance per try for the provider client's pause before a retry, in the bound on a whole model call. */
const RETRY_PAUSE_MS = 10_000;
/** Corrective turns after an answer that does not match the output schema. */
const CORRECTIONS_MAX = 1;

/** Thrown when this worker no longer holds the run (another one claimed it after the lease expired, or it was cancelled). */
class LeaseLost extends Error {
  constructor(readonly executionId: string) {
    super(`the lease on ${executionId} was lost`);
  }
}

/** cancelExecution asked the run to stop: it ends CANCELLED at this step, never inside a tool call. */
class Cancelled extends Error {
  constructor(readonly executionId: string) {
    super(`execution ${executionId} was cancelled`);
  }
}

/** The run parked on an approval (WAITING_APPROVAL, its lease given up): a decision or the expiry resumes it. */
class Parked extends Error {
  constructor(readonly approvalId: string) {
    super(`waiting for approval ${approvalId}`);
  }
}

/** A model or agent run this worker claimed: RUNNING, leased to `owner`. */
/** One tool an agent declares, as its run offers it to the model. */
interface OfferedTool {
  reference: ToolReference;
  /** The version the run calls (pinned, or the latest ACTIVE one when the run first offered it). */
  version: ActionVersion | null;
  native: 'graphql' | 'cel' | null;
  spec: ModelToolSpec;
  /** The built-in load_skill tool, offered to an agent that declares skills: these are its skills. */
  skills?: ResolvedSkill[];
}

interface RunContext {
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
}

export type AgentRunsOptions = OutsideRunsOptions;

/**
 * Model and agent runs, outside any transaction. The worker claims one (in its transaction) and
 * hands it here; the run is a loop of model turns, each recorded in a short transaction of its
 * own, and tool calls, each an invoke in a request transaction of its own. Every step's execution
 * id is derived from the run and the step's position, so a run claimed again after its worker
 * died replays what was recorded (a committed tool call is read back, never run again) and asks
 * the model again only for a turn that was not recorded. Every write checks the lease first: a
 * worker that lost its run writes nothing more.
 */
export class AgentRuns implements OutsideTransactionRuns {
  private readonly inflight = new Map<string, { done: Promise<void>; abort: AbortController; principal: string }>();
  private stopping = false;

  constructor(
    private readonly svc: ExecutionServices,
    private readonly options: AgentRunsOptions,
  ) {}

  get size(): number {
    return this.inflight.size;
  }

  hasRoom(): boolean {
    return !this.stopping && this.inflight.size < this.svc.limits.agentRunsConcurrentMax;
  }

  /**
   * What the queue may hand this worker: model and agent runs when it has a slot (`runs`), except
   * those of principals that already have agentRunsPerClientMax runs in flight here (`busy`).
   */
  claimable(): { runs: number; busy: string } {
    if (!this.hasRoom()) return { runs: 0, busy: '[]' };
    const counts = new Map<string, number>();
    for (const run of this.inflight.values()) counts.set(run.principal, (counts.get(run.principal) ?? 0) + 1);
    const busy = [...counts]
      .filter(([, n]) => n >= this.svc.limits.agentRunsPerClientMax)
      .map(([principal]) => principal);
    return { runs: 1, busy: JSON.stringify(busy) };
  }

  /** Inside the worker's write transaction: lease the row to this worker for one attempt. */
  claim(row: QueueRow): RunClaim | null {
    const now = this.svc.clock.now();
    const owner = `${this.options.owner}#${randomUUID()}`;
    const changed = this.svc.queue.claimRun.run({
      execution_id: row.execution_id,
      owner,
      until: leaseUntil(this.svc, now),
      now: now.toISOString(),
    }).changes;
    return changed === 1 ? { row, owner, attempt: row.attempt + 1 } : null;
  }

  /** Run a claimed attempt in the background. */
  launch(claim: RunClaim): void {
    const abort = new AbortController();
    const done = this.run(claim, abort.signal).finally(() => {
      this.inflight.delete(claim.row.execution_id);
      this.options.wake();
    });
    this.inflight.set(claim.row.execution_id, { done, abort, principal: claim.row.principal ?? '' });
  }

  /** Resolves when any run in flight ends. */
  async oneSettled(): Promise<void> {
    if (this.inflight.size > 0)
      await Promise.race([...this.inflight.values()].map((r) => r.done.catch(() => undefined)));
  }

  /** Resolves when no run is in flight. */
  async settled(): Promise<void> {
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight.values()].map((r) => r.done));
  }

  /** Stop every run at its next step and give it back to the queue (due at once, the attempt not counted). */
  async stop(): Promise<void> {
    this.stopping = true;
    for (const run of this.inflight.values()) run.abort.abort(new Error('the worker is stopping'));
    await this.settled();
  }

  private async run(claim: RunClaim, signal: AbortSignal): Promise<void> {
    const { svc } = this;
    const startedAt = svc.clock.now();
    const startedMs = performance.now();
    const lease = new LeaseKeeper(svc, claim);
    const aborts = AbortSignal.any([signal, lease.lost.signal]);
    let output: unknown = null;
    let error: ErrorData | null = null;
    let backoff = DEFAULT_EXECUTION.backoff;
    let ctx: RunContext | null = null;
    try {
      ctx = this.load(claim, aborts);
      backoff = ctx.version.execution.backoff;
      output =
        ctx.version.kind === 'agent'
          ? await runAgent(ctx, ctx.executionId, ctx.version, ctx.input, 1)
          : await runModel(ctx, ctx.executionId, ctx.version, ctx.input, 1);
    } catch (e) {
      if (e instanceof Parked) return;
      if (e instanceof Cancelled || lease.lost.signal.reason instanceof Cancelled) {
        this.finish(claim, { startedAt, startedMs, output: null, error: null, backoff, cancelled: true });
        return;
      }
      if (e instanceof LeaseLost || lease.lost.signal.aborted) return;
      if (signal.aborted) {
        // The worker is stopping: give the run back, due now, this attempt not counted.
        tryWrite(svc, () =>
          svc.queue.releaseRun.run({
            execution_id: claim.row.execution_id,
            owner: claim.owner,
            now: svc.clock.now().toISOString(),
          }),
        );
        return;
      }
      let failure = toEngineError(e);
      if (failure.code === 'INTERNAL') svc.logError(e);
      if (ctx && Date.now() > ctx.deadline && isRetryable(failure.toData())) {
        // Cut short by the whole-run deadline (a model call aborted at it): another attempt could not run.
        failure = new EngineError(
          'TIMEOUT',
          `${ctx.version.name} ran past its whole-run deadline (${failure.code}: ${failure.message})`,
          {
            hint: 'Raise config.runTimeoutMs (at most agentRunMsMax), or give the agent less to do.',
            details: { retry: false },
          },
        );
      }
      error = failure.toData();
    } finally {
      lease.stop();
    }
    this.finish(claim, { startedAt, startedMs, output, error, backoff, session: ctx?.session ?? null });
  }

  /** The run's version and authority, read now: a deleted starter or a revoked policy fails it. */
  private load(claim: RunClaim, signal: AbortSignal): RunContext {
    const { svc } = this;
    const row = claim.row;
    return svc.transactions.run('read', () => {
      const input: unknown = JSON.parse(row.input);
      const caller = svc.callerOf(row.principal ?? 'system');
      if (!caller) {
        throw new EngineError('ACCESS_DENIED', `the starter ${JSON.stringify(row.principal)} no longer exists`, {
          hint: 'Start it again as an existing client.',
        });
      }
      const outer = outerOf(svc.actions, row.start_stack ? (JSON.parse(row.start_stack) as VersionRef[]) : []);
      checkMayCall(authorityOf(svc.cel, caller, null, outer.layers), row.action_name, row.action_version, input);
      const version = getVersion(svc.actions, { id: row.action_id!, version: row.action_version! });
      checkRunnable(version);
      const config = modelConfig(version.kind as 'model' | 'agent', version.config, svc.limits) as AgentConfig;
      let session: RunContext['session'] = null;
      if (row.session_id) {
        const found = svc.sessions.sessionById.get(row.session_id);
        if (!found) throw new EngineError('NOT_FOUND', `session ${row.session_id} of this turn no longer exists`);
        // The earlier turns' messages and answers; not the person's messages queued behind this one.
        // (Turns run in order, so every answer recorded now is an earlier turn's.)
        const all = svc.sessions.messages.all(row.session_id);
        const own = all.find((m) => m.role === 'USER' && m.execution_id === row.execution_id);
        const history = all
          .filter(
            (m) =>
              m.execution_id !== row.execution_id && (m.role === 'ASSISTANT' || own === undefined || m.seq < own.seq),
          )
          .map((m) => ({ role: m.role, text: m.text }));
        session = { id: found.session_id, input: JSON.parse(found.input) as unknown, history };
      }
      const runTimeoutMs = version.kind === 'agent' ? config.runTimeoutMs : svc.limits.agentRunMsMax;
      return {
        value: {
          svc,
          claim,
          executionId: row.execution_id,
          version,
          config,
          input,
          principal: caller.principal,
          outer: outerWith(outer, version),
          deadline: Date.parse(row.created) + runTimeoutMs,
          signal,
          triggerDepth: row.trigger_depth,
          wake: this.options.wake,
          session,
        },
        commit: false,
      };
    });
  }

  private finish(
    claim: RunClaim,
    {
      startedAt,
      startedMs,
      output,
      error,
      backoff,
      cancelled = false,
      session = null,
    }: {
      startedAt: Date;
      startedMs: number;
      output: unknown;
      error: ErrorData | null;
      backoff: typeof DEFAULT_EXECUTION.backoff;
      cancelled?: boolean;
      session?: RunContext['session'];
    },
  ): void {
    const { svc } = this;
    const row = claim.row;
    const succeeded = error === null && !cancelled;
    const maxAttempts = row.max_attempts ?? 1;
    const retry = !succeeded && !cancelled && ctxRetry(this.svc, claim, error!) && claim.attempt < maxAttempts;
    const status = cancelled ? 'CANCELLED' : succeeded ? 'SUCCEEDED' : retry ? 'QUEUED' : 'FAILED';
    let written = false;
    let runAt: string | null = null;
    const committed = tryWrite(svc, () => {
      // Run again after a lost race (PostgreSQL): only what the last run did counts.
      written = false;
      if (
        svc.queue.renewLease.run({
          execution_id: row.execution_id,
          owner: claim.owner,
          until: leaseUntil(svc, svc.clock.now()),
        }).changes !== 1
      )
        return;
      const finished = svc.clock.now().toISOString();
      runAt = retry
        ? new Date(svc.clock.now().getTime() + backoffDelayMs(backoff, claim.attempt, svc.random)).toISOString()
        : null;
      const outputText = succeeded ? JSON.stringify(output ?? null) : null;
      const errorText = error ? JSON.stringify(error) : null;
      svc.queue.finishAttempt.run({
        execution_id: row.execution_id,
        status,
        attempt: claim.attempt,
        output: outputText,
        error: errorText,
        started: startedAt.toISOString(),
        finished,
        logs: null,
        run_at: runAt,
        lease_owner: this.options.owner,
      });
      svc.queue.insertInvocation.run({
        execution_id: row.execution_id,
        attempt: claim.attempt,
        status: cancelled ? 'CANCELLED' : succeeded ? 'SUCCEEDED' : 'FAILED',
        output: outputText,
        error: errorText,
        started: startedAt.toISOString(),
        finished,
        logs: null,
      });
      if (session && succeeded) {
        // The turn's answer joins the session's history, which keeps its newest sessionHistoryMax messages.
        const text =
          typeof (output as { text?: unknown } | null)?.text === 'string'
            ? (output as { text: string }).text
            : JSON.stringify(output);
        svc.sessions.insertMessage.run({
          session_id: session.id,
          message_id: row.execution_id,
          role: 'ASSISTANT',
          text,
          execution_id: row.execution_id,
          created: finished,
        });
        svc.sessions.touchSession.run(finished, finished, session.id);
        svc.sessions.trimMessages.run(session.id, session.id, svc.limits.sessionHistoryMax);
      }
      written = true;
    });
    // Told once, after the outcome committed (a run again after a lost race must not tell twice).
    if (committed && written) {
      this.options.onOutcome({
        executionId: row.execution_id,
        action: row.action_name,
        version: row.action_version,
        attempt: claim.attempt,
        maxAttempts,
        status: status === 'CANCELLED' ? 'FAILED' : status,
        error,
        runAt,
        durationMs: performance.now() - startedMs,
      });
    } else if (committed)
      svc.log.warn(
        { event: 'attempt', executionId: row.execution_id, outcome: 'LOST' },
        'the run was claimed by another worker; its outcome here is dropped',
      );
  }
}

/** The run's version's retryIf (when it has one) decides, like an attempt's; a deadline-bound failure never retries. */
function ctxRetry(svc: ExecutionServices, claim: RunClaim, error: ErrorData): boolean {
  if ((error.details as { retry?: unknown } | null | undefined)?.retry === false) return false;
  let rule: string | null = null;
  try {
    rule = retryRule(getVersion(svc.actions, { id: claim.row.action_id!, version: claim.row.action_version! }));
  } catch {
    // The version cannot be read: the default rule.
  }
  return shouldRetry(svc, rule, error, claim.attempt);
}

function leaseUntil(svc: ExecutionServices, now: Date): string {
  return new Date(now.getTime() + svc.limits.agentLeaseMs).toISOString();
}

/** Run `fn` in a write transaction of its own; whether it committed (BUSY and other driver failures are logged, not thrown). */
function tryWrite(svc: ExecutionServices, fn: () => void): boolean {
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

/** Renews the lease every leaseMs / 3 while a run waits on its model; aborts the run when it is lost. */
class LeaseKeeper {
  readonly lost = new AbortController();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly svc: ExecutionServices,
    private readonly claim: RunClaim,
  ) {
    // Every leaseMs / 3 for the lease; at least every 250 ms for a cancellation, so one stops a model
    // that is thinking soon.
    this.timer = setInterval(() => this.renew(), Math.max(50, Math.min(250, Math.floor(svc.limits.agentLeaseMs / 3))));
    this.timer.unref();
  }

  private renew(): void {
    if (this.svc.transactions.inTransaction) return;
    try {
      const held = this.svc.transactions.run('write', () => ({
        value:
          this.svc.queue.renewLease.run({
            execution_id: this.claim.row.execution_id,
            owner: this.claim.owner,
            until: leaseUntil(this.svc, this.svc.clock.now()),
          }).changes === 1,
        commit: true,
      }));
      if (!held) this.lost.abort(new LeaseLost(this.claim.row.execution_id));
      else if (this.svc.st.cancelRequested.get(this.claim.row.execution_id) === 1)
        this.lost.abort(new Cancelled(this.claim.row.execution_id));
    } catch {
      // BUSY: the next tick tries again; the lease has two more ticks before it expires.
    }
  }

  stop(): void {
    clearInterval(this.timer);
  }
}

/**
 * A write step of the run: checks (and renews) the lease in the same transaction, so a worker
 * that lost the run writes nothing.
 */
function step<T>(ctx: RunContext, fn: () => T): T {
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

function recorded(ctx: RunContext, executionId: string): CallNode | null {
  const row = ctx.svc.transactions.run('read', () => ({
    value: ctx.svc.st.executionById.get(executionId),
    commit: false,
  }));
  return row ? rowToNode(row) : null;
}

function checkDeadline(ctx: RunContext, what: string): void {
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
function stepId(ctx: RunContext, runId: string, ...position: Array<string | number>): string {
  return derivedId(ctx.svc.derivedIdKey, 'agent-step', runId, ...position.map(String));
}

function baseNode(
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

/**
 * One model call, recorded as a MODEL execution under `parentId` with a derived id: a turn that
 * was recorded is read back; one that was not is asked (again). A failed call is recorded under a
 * fresh id (it is not the turn) and fails the attempt, which is retried from this turn.
 */
async function modelTurn(
  ctx: RunContext,
  runId: string,
  turn: number,
  depth: number,
  request: {
    config: ModelConfig;
    messages: ModelMessage[];
    tools: OfferedTool[];
    instructions: string | null;
    responseSchema: { name: string; schema: Record<string, unknown> } | null;
  },
): Promise<ModelResponse> {
  const { svc } = ctx;
  const turnId = stepId(ctx, runId, 'turn', turn);
  const known = recorded(ctx, turnId);
  if (known) return answerOf(known);
  checkDeadline(ctx, `model turn ${turn}`);
  // lockAction stops a run in flight: no model turn of a version that is no longer ACTIVE.
  svc.transactions.run('read', () => ({
    value: checkRunnable(getVersion(svc.actions, { id: ctx.version.actionId, version: ctx.version.version })),
    commit: false,
  }));
  const bytes = Buffer.byteLength(JSON.stringify(request.messages));
  if (bytes > svc.limits.agentConversationBytesMax) {
    throw new EngineError(
      'LIMIT_EXCEEDED',
      `the conversation of ${ctx.version.name} is ${bytes} bytes at turn ${turn}; agentConversationBytesMax is ${svc.limits.agentConversationBytesMax}`,
      {
        hint: 'Have the tools return less (ids and totals), or give the agent fewer turns.',
      },
    );
  }
  const { config } = request;
  const node = baseNode(ctx, {
    executionId: turnId,
    actionId: null,
    actionName: 'model',
    actionVersion: null,
    kind: 'MODEL',
    input: {
      turn,
      messages: request.messages.length,
      tools: request.tools.map((t) =>
        t.version ? { name: t.reference.name, version: t.version.version } : { name: t.reference.name },
      ),
      ...(request.tools.some((t) => t.skills)
        ? { skills: request.tools.find((t) => t.skills)!.skills!.map((k) => ({ name: k.name, version: k.version })) }
        : {}),
    },
    parentId: runId,
    rootId: ctx.executionId,
    depth,
  });
  const startedMs = performance.now();
  let response: ModelResponse;
  try {
    if (!svc.models)
      throw new EngineError(
        'MODEL_ERROR',
        `${ctx.version.name} uses provider ${JSON.stringify(config.provider)}, and no model providers are configured here`,
        { hint: 'Configure the providers block of the server configuration (the file TALLY_CONFIG names).' },
      );
    if (!svc.models.has(config.provider))
      throw new EngineError(
        'MODEL_ERROR',
        `${ctx.version.name} uses provider ${JSON.stringify(config.provider)}, which is not configured here; configured: ${svc.models.names().join(', ')}`,
        { hint: 'Configure it in the server configuration, or update the action.' },
      );
    const provider = svc.models.get(config.provider);
    // The SDK's timeout ends at the response headers: a body that stalls is ended by this one,
    // every try's timeout in a row, and never past the run's deadline.
    const { timeoutMs, maxRetries } = provider.config;
    const untilDeadline = ctx.deadline - Date.now();
    const bound = Math.max(1, Math.min(untilDeadline, (timeoutMs + RETRY_PAUSE_MS) * (maxRetries + 1)));
    const cut = new AbortController();
    const timer = setTimeout(
      () =>
        cut.abort(
          bound === untilDeadline
            ? new EngineError(
                'TIMEOUT',
                `${ctx.version.name} reached its whole-run deadline while provider ${config.provider} (model ${config.model}) was answering`,
                { details: { retry: false } },
              )
            : new EngineError(
                'TIMEOUT',
                `provider ${config.provider} (model ${config.model}) did not finish answering within ${bound} ms`,
              ),
        ),
      bound,
    );
    try {
      response = await provider.complete({
        model: config.model,
        instructions: request.instructions,
        messages: request.messages,
        tools: request.tools.map((t) => t.spec),
        temperature: config.temperature,
        maxTokens: config.maxTokens,
        responseSchema: request.responseSchema,
        signal: AbortSignal.any([ctx.signal, cut.signal]),
      });
    } finally {
      clearTimeout(timer);
    }
  } catch (error) {
    if (ctx.signal.aborted) throw error;
    const failure = toEngineError(error);
    svc.onModelCall({
      provider: config.provider,
      model: config.model,
      outcome: failure.code,
      inputTokens: null,
      outputTokens: null,
      latencyMs: performance.now() - startedMs,
    });
    // Recorded under a fresh id: the turn is asked again at the next attempt.
    step(ctx, () => {
      persistTree(svc.st, {
        ...node,
        executionId: svc.newId(),
        status: 'FAILED',
        error: failure.toData(),
        finished: svc.clock.now().toISOString(),
        model: {
          provider: config.provider,
          model: config.model,
          inputTokens: null,
          outputTokens: null,
          latencyMs: Math.round(performance.now() - startedMs),
          httpAttempts: (failure.details as { attempts?: number } | undefined)?.attempts ?? 1,
          stopReason: null,
        },
      });
    });
    throw failure;
  }
  const call: ModelCallRecord = {
    provider: config.provider,
    model: response.model || config.model,
    inputTokens: response.usage.inputTokens,
    outputTokens: response.usage.outputTokens,
    latencyMs: Math.round(response.latencyMs),
    httpAttempts: response.httpAttempts,
    stopReason: response.stopReason,
  };
  svc.onModelCall({
    provider: config.provider,
    model: config.model,
    outcome: 'ok',
    inputTokens: call.inputTokens,
    outputTokens: call.outputTokens,
    latencyMs: response.latencyMs,
  });
  const answer = { text: response.text, toolCalls: response.toolCalls };
  step(ctx, () =>
    persistTree(svc.st, {
      ...node,
      status: 'SUCCEEDED',
      output: answer,
      finished: svc.clock.now().toISOString(),
      model: call,
    }),
  );
  return response;
}

function answerOf(node: CallNode): ModelResponse {
  const output = node.output as { text: string | null; toolCalls: ModelToolCall[] };
  const call = node.model;
  return {
    text: output.text,
    toolCalls: output.toolCalls,
    stopReason: call?.stopReason ?? null,
    usage: { inputTokens: call?.inputTokens ?? null, outputTokens: call?.outputTokens ?? null },
    latencyMs: call?.latencyMs ?? 0,
    httpAttempts: call?.httpAttempts ?? 0,
    model: call?.model ?? '',
  };
}

/** The answer as the tool's output: `{text}` without an output schema, else the JSON it must be. */
function finalOutput(
  ctx: RunContext,
  version: ActionVersion,
  text: string | null,
): { ok: true; output: unknown } | { ok: false; problem: string } {
  if (version.tool.outputSchema === null) return { ok: true, output: { text: text ?? '' } };
  let value: unknown;
  try {
    value = JSON.parse(stripFence(text ?? ''));
  } catch {
    return { ok: false, problem: `the answer is not JSON (it starts ${JSON.stringify((text ?? '').slice(0, 80))})` };
  }
  try {
    validate(ctx.svc, version, 'output', value);
  } catch (error) {
    return { ok: false, problem: (error as Error).message };
  }
  return { ok: true, output: value };
}

function stripFence(text: string): string {
  const fenced = /^\s*```(?:json)?\s*\n([\s\S]*?)\n\s*```\s*$/.exec(text);
  return fenced ? fenced[1]! : text;
}

function schemaNote(version: ActionVersion): string {
  return `Give your final answer as JSON only (no prose, no code fence), matching this JSON schema: ${JSON.stringify(version.tool.outputSchema)}`;
}

function joinInstructions(...parts: Array<string | null>): string | null {
  const kept = parts.filter((p): p is string => p !== null && p !== '');
  return kept.length ? kept.join('\n\n') : null;
}

/** A model tool: one call (structured output where the provider has it), and one corrective call if its answer does not fit. */
async function runModel(
  ctx: RunContext,
  runId: string,
  version: ActionVersion,
  input: unknown,
  depth: number,
): Promise<unknown> {
  const config = modelConfig('model', version.config, ctx.svc.limits);
  const schema = version.tool.outputSchema;
  const structured =
    schema !== null &&
    ctx.svc.models?.has(config.provider) === true &&
    ctx.svc.models.get(config.provider).config.structuredOutput;
  const instructions = joinInstructions(
    config.instructions,
    schema !== null && !structured ? schemaNote(version) : null,
  );
  const messages: ModelMessage[] = [{ role: 'user', text: renderPrompt(config.prompt, input) }];
  for (let turn = 1; ; turn++) {
    const answer = await modelTurn(ctx, runId, turn, depth, {
      config,
      messages,
      tools: [],
      instructions,
      responseSchema: structured ? { name: version.name, schema: schema! } : null,
    });
    const result = finalOutput(ctx, version, answer.text);
    if (result.ok) return result.output;
    if (turn > CORRECTIONS_MAX) throw outputInvalid(version, result.problem);
    messages.push(
      { role: 'assistant', text: answer.text, toolCalls: [] },
      { role: 'user', text: correction(version, result.problem) },
    );
  }
}

function correction(version: ActionVersion, problem: string): string {
  return `Your answer was not accepted: ${problem}. ${schemaNote(version)}`;
}

function outputInvalid(version: ActionVersion, problem: string): EngineError {
  return new EngineError(
    'OUTPUT_INVALID',
    `the answer of ${version.name}@${version.version} does not match its output schema after ${CORRECTIONS_MAX} corrective turn: ${problem}`,
    {
      hint: 'Make the instructions clearer about the answer, or loosen the output schema.',
    },
  );
}

/** The tools an agent offers its model: pinned versions, or the latest ACTIVE one (as recorded at turn 1, when the run resumes). */
function offeredTools(ctx: RunContext, agent: ActionVersion, runId: string): OfferedTool[] {
  const { svc } = ctx;
  const first = recorded(ctx, stepId(ctx, runId, 'turn', 1));
  const offered = new Map(
    ((first?.input as { tools?: Array<{ name: string; version?: number }> } | null)?.tools ?? []).map((t) => [
      t.name,
      t.version,
    ]),
  );
  return svc.transactions.run('read', () => ({
    value: agent.tools.map((reference): OfferedTool => {
      if ((NATIVE_TOOLS as readonly string[]).includes(reference.name)) {
        const native = reference.name as 'graphql' | 'cel';
        return { reference, version: null, native, spec: { name: native, ...NATIVE_SPECS[native] } };
      }
      // Pinned, or as recorded at turn 1, or the latest ACTIVE: whether it may run is checked where it runs.
      const version = referencedVersion(
        svc.actions,
        { name: reference.name, version: reference.version ?? offered.get(reference.name) ?? null },
        undefined,
        `${reference.name}, a tool of ${agent.name},`,
      );
      return {
        reference,
        version,
        native: null,
        spec: {
          name: reference.name,
          description: version.tool.description,
          inputSchema: withoutFixed(version.tool.inputSchema, reference),
        },
      };
    }),
    commit: false,
  }));
}

/**
 * The built-in load_skill tool, when the agent declares skills: pinned versions, or the latest
 * (as recorded at turn 1 when the run resumes). The model sees each skill's name and description.
 */
function offeredSkills(ctx: RunContext, agent: ActionVersion, runId: string): OfferedTool | null {
  const declared = agent.skills ?? [];
  if (declared.length === 0) return null;
  const first = recorded(ctx, stepId(ctx, runId, 'turn', 1));
  const recordedVersions = new Map(
    ((first?.input as { skills?: Array<{ name: string; version: number }> } | null)?.skills ?? []).map((k) => [
      k.name,
      k.version,
    ]),
  );
  const refs = declared.map((ref) => ({
    name: ref.name,
    version: ref.version ?? recordedVersions.get(ref.name) ?? null,
  }));
  const skills = ctx.svc.transactions.run('read', () => ({ value: ctx.svc.skills.resolve(refs), commit: false }));
  return {
    reference: { name: LOAD_SKILL, version: null, input: null },
    version: null,
    native: null,
    skills,
    spec: {
      name: LOAD_SKILL,
      description:
        'Load the guidance of one of your skills (its markdown body) by name, before doing what it is about.',
      inputSchema: {
        type: 'object',
        properties: { name: { type: 'string', enum: skills.map((k) => k.name) } },
        required: ['name'],
        additionalProperties: false,
      },
    },
  };
}

const LOAD_SKILL = LOAD_SKILL_TOOL;

const NATIVE_SPECS = {
  graphql: {
    description: 'Run one GraphQL operation against the ledger (reads, and writes the agent’s policies allow).',
    inputSchema: {
      type: 'object',
      properties: { query: { type: 'string' }, variables: { type: 'object' } },
      required: ['query'],
      additionalProperties: false,
    },
  },
  cel: {
    description: 'Evaluate a CEL expression (exact decimal arithmetic); performs no operation.',
    inputSchema: {
      type: 'object',
      properties: { expression: { type: 'string' }, bindings: { type: 'object' } },
      required: ['expression'],
      additionalProperties: false,
    },
  },
} as const;

/** The schema the model sees: fixed properties are removed (the model cannot set them; the reference does). */
function withoutFixed(schema: Record<string, unknown>, reference: ToolReference): Record<string, unknown> {
  if (!reference.input) return schema;
  const fixed = new Set(Object.keys(reference.input));
  const properties = schema.properties as Record<string, unknown> | undefined;
  const required = schema.required as string[] | undefined;
  return {
    ...schema,
    ...(properties
      ? { properties: Object.fromEntries(Object.entries(properties).filter(([k]) => !fixed.has(k))) }
      : {}),
    ...(required ? { required: required.filter((k) => !fixed.has(k)) } : {}),
  };
}

/** An agent run: model turn → the tool calls it asked for → their results → the next turn, until an answer. */
async function runAgent(
  ctx: RunContext,
  runId: string,
  agent: ActionVersion,
  input: unknown,
  depth: number,
): Promise<unknown> {
  const config = modelConfig('agent', agent.config, ctx.svc.limits) as AgentConfig;
  const tools = offeredTools(ctx, agent, runId);
  const skills = offeredSkills(ctx, agent, runId);
  if (skills) tools.push(skills);
  const instructions = joinInstructions(
    config.instructions,
    skills
      ? `Skills you can load with load_skill before you act (name: what it is for):\n${skills.skills!.map((k) => `- ${k.name}: ${k.description}`).join('\n')}`
      : null,
    agent.tool.outputSchema !== null ? schemaNote(agent) : null,
  );
  // A session's turn sees the session's history first (its own run at the top level only).
  const history: ModelMessage[] =
    ctx.session && runId === ctx.executionId
      ? ctx.session.history.map((m) =>
          m.role === 'USER' ? { role: 'user', text: m.text } : { role: 'assistant', text: m.text, toolCalls: [] },
        )
      : [];
  const messages: ModelMessage[] = [...history, { role: 'user', text: renderPrompt(config.prompt, input) }];
  const scope = {
    event: {
      data: input,
      execution: {
        executionId: runId,
        actionId: agent.actionId,
        actionVersion: agent.version,
        attempt: ctx.claim.attempt,
      },
      caller: { principal: ctx.principal },
    },
    toolInput: input,
    executionInput: ctx.input,
    session: ctx.session ? { id: ctx.session.id, input: ctx.session.input } : null,
  };
  let toolCalls = 0;
  let corrections = 0;
  for (let turn = 1; ; turn++) {
    if (turn > config.maxTurns) {
      throw new EngineError(
        'LIMIT_EXCEEDED',
        `${agent.name} did not answer within maxTurns (${config.maxTurns}) model turns`,
        { hint: 'Raise config.maxTurns (at most agentTurnsMax), or make the task smaller.' },
      );
    }
    const answer = await modelTurn(ctx, runId, turn, depth, {
      config,
      messages,
      tools,
      instructions,
      responseSchema: null,
    });
    messages.push({ role: 'assistant', text: answer.text, toolCalls: answer.toolCalls });
    if (answer.toolCalls.length === 0) {
      const result = finalOutput(ctx, agent, answer.text);
      if (result.ok) return result.output;
      if (corrections++ >= CORRECTIONS_MAX) throw outputInvalid(agent, result.problem);
      messages.push({ role: 'user', text: correction(agent, result.problem) });
      continue;
    }
    const turnId = stepId(ctx, runId, 'turn', turn);
    const results: ModelToolResult[] = [];
    for (const [index, call] of answer.toolCalls.entries()) {
      toolCalls++;
      if (toolCalls > config.maxToolCalls) {
        throw new EngineError(
          'LIMIT_EXCEEDED',
          `${agent.name} asked for tool call ${toolCalls}; its maxToolCalls is ${config.maxToolCalls}`,
          {
            hint: 'Raise config.maxToolCalls (at most agentToolCallsMax), or give the agent tools that do more per call.',
          },
        );
      }
      const node = await toolCall(ctx, { runId, turnId, index, call, tools, scope, depth: depth });
      results.push({
        toolCallId: call.id,
        name: call.name,
        content: JSON.stringify(
          succeeded(node)
            ? (node.output ?? null)
            : { error: { code: node.error?.code, message: node.error?.message, hint: node.error?.hint } },
        ),
        isError: !succeeded(node),
      });
    }
    messages.push({ role: 'tool', results });
  }
}

interface ToolStep {
  runId: string;
  turnId: string;
  index: number;
  call: ModelToolCall;
  tools: OfferedTool[];
  scope: {
    event: unknown;
    toolInput: unknown;
    executionInput: unknown;
    session: { id: string; input: unknown } | null;
  };
  depth: number;
}

/**
 * One tool call the model asked for, exactly once: read back when it was recorded; otherwise run
 * as an invoke in a transaction of its own (checking the lease), under the starter's authority
 * narrowed by every tool on the start stack, the agent, and the tool. Whatever fails is recorded
 * as a FAILED call under the turn, and its code, message and hint go back to the model.
 */
async function toolCall(ctx: RunContext, s: ToolStep): Promise<CallNode> {
  const { svc } = ctx;
  const callId = stepId(ctx, s.runId, 'call', s.turnId, s.index);
  const known = recorded(ctx, callId);
  // A model or agent it called that was cut short is RUNNING: it resumes below, from its own steps.
  if (known && known.status !== 'RUNNING') return known;
  checkDeadline(ctx, `tool call ${s.call.name.slice(0, NAME_SHOWN_MAX)}`);
  const attach = { parentId: s.turnId, rootId: ctx.executionId, depth: s.depth };
  const failed = (error: EngineError, name: string, input: unknown, tool: OfferedTool | null): CallNode =>
    step(ctx, () => {
      const node: CallNode = {
        ...baseNode(ctx, {
          executionId: callId,
          actionId: tool?.version?.actionId ?? null,
          actionName: name,
          actionVersion: tool?.version?.version ?? null,
          kind: kindOf(tool),
          input,
          ...attach,
        }),
        status: 'FAILED',
        error: error.toData(),
        finished: svc.clock.now().toISOString(),
      };
      persistTree(svc.st, node);
      return node;
    });

  const tool = s.tools.find((t) => t.reference.name === s.call.name);
  if (!tool) {
    const names = s.tools.map((t) => t.reference.name);
    const shown = `${names.slice(0, NAMES_LISTED_MAX).join(', ')}${names.length > NAMES_LISTED_MAX ? `, … (${names.length} in all)` : ''}`;
    const name = s.call.name.slice(0, NAME_SHOWN_MAX);
    return failed(
      new EngineError(
        'NOT_FOUND',
        `there is no tool ${JSON.stringify(name)}${s.call.name.length > NAME_SHOWN_MAX ? ' (name cut)' : ''}; the tools you can call are: ${shown || 'none'}`,
        {
          hint: 'Call one of the tools listed, by its exact name.',
        },
      ),
      name,
      argumentsOf(s.call),
      null,
    );
  }
  const args = argumentsOf(s.call);
  if (tool.skills) {
    // load_skill: the body of a declared skill, recorded like any call.
    const name = (args as { name?: unknown } | null)?.name;
    const skill = tool.skills.find((k) => k.name === name);
    if (!skill) {
      return failed(
        new EngineError(
          'NOT_FOUND',
          `there is no skill ${JSON.stringify(String(name).slice(0, NAME_SHOWN_MAX))}; your skills are: ${tool.skills.map((k) => k.name).join(', ')}`,
          { hint: 'Load one of the skills listed, by its exact name.' },
        ),
        LOAD_SKILL,
        args,
        tool,
      );
    }
    let document: ReturnType<typeof svc.skills.read>;
    try {
      document = svc.transactions.run('read', () => {
        // Loading a skill is reading it: the starter, and every tool above the agent, may SELECT it
        // (the agent declaring it is its own consent, checked when the version was made).
        const caller = svc.callerOf(ctx.principal);
        if (!caller)
          throw new EngineError('ACCESS_DENIED', `the starter ${JSON.stringify(ctx.principal)} no longer exists`);
        authorityOf(svc.cel, caller, null, ctx.outer.layers.slice(0, -1)).check({
          action: 'SELECT',
          resource: 'actions.Skill',
          document: skill,
        });
        return { value: svc.skills.read(skill.name, skill.version), commit: false };
      });
    } catch (error) {
      return failed(toEngineError(error), LOAD_SKILL, args, tool);
    }
    if (!document)
      return failed(
        new EngineError('NOT_FOUND', `skill ${skill.name} version ${skill.version} no longer exists`),
        LOAD_SKILL,
        args,
        tool,
      );
    return step(ctx, () => {
      const node: CallNode = {
        ...baseNode(ctx, {
          executionId: callId,
          actionId: null,
          actionName: LOAD_SKILL,
          actionVersion: null,
          kind: 'TOOL',
          input: { name: skill.name },
          ...attach,
        }),
        status: 'SUCCEEDED',
        output: { name: document.name, version: document.version, body: document.body },
        finished: svc.clock.now().toISOString(),
      };
      persistTree(svc.st, node);
      return node;
    });
  }
  if (args === null || typeof args !== 'object' || Array.isArray(args)) {
    return failed(
      new EngineError(
        'INPUT_INVALID',
        `the arguments of ${tool.reference.name} must be a JSON object; got ${JSON.stringify(s.call.arguments.slice(0, 200))}`,
        { hint: 'Send the arguments as one JSON object matching the tool’s schema.' },
      ),
      tool.reference.name,
      { arguments: s.call.arguments.slice(0, 2000) },
      tool,
    );
  }
  let input: unknown;
  try {
    input = svc.transactions.run('read', () => ({
      value: fixedInput(svc, tool.reference, args, s.scope),
      commit: false,
    }));
  } catch (error) {
    return failed(toEngineError(error), tool.reference.name, args, tool);
  }
  if (tool.reference.approval) {
    const refused = awaitApproval(ctx, callId, tool, input);
    if (refused) return failed(refused, tool.reference.name, input, tool);
  }
  if (tool.version && runsOutsideTransactions(tool.version.kind)) {
    try {
      return await nestedRun(ctx, s, callId, tool, tool.version, input, known !== null);
    } catch (error) {
      if (!(error instanceof NestedRefusal)) throw error;
      return failed(error.cause, tool.reference.name, input, tool);
    }
  }
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
        input,
        executionId: callId,
        inputFingerprint: null,
        outer: ctx.outer,
        authorize: true,
        attach,
        triggerDepth: ctx.triggerDepth,
        deadlineCap: ctx.deadline,
        executionInput: ctx.input,
        model: { agent: `${ctx.version.name}@${ctx.version.version}` },
      });
      if (begun.fatal || begun.overran) {
        fatal = toEngineError(begun.fatal ?? begun.overran);
        throw fatal;
      }
      persistTree(svc.st, begun.node);
      return begun.node;
    });
  } catch (error) {
    if (error instanceof LeaseLost || error !== fatal || fatal === null) throw error;
    // The call ran past its deadline (or hit a busy database) and rolled back whole: recorded as
    // its failure, so the model hears of it and the run goes on.
    const reason: EngineError = fatal;
    if (reason.code === 'BUSY') throw reason;
    return failed(reason, tool.reference.name, input, tool);
  } finally {
    ctx.wake();
  }
}

/**
 * A call that needs a person's approval. Its approval (one per call: its id derived from the
 * call's) is created PENDING and the run parks (WAITING_APPROVAL, due when the approval expires:
 * the queue never polls a parked run); a decision makes the run due at once, and it replays to here.
 * Returns null when the call may run, or the error the model is told instead (the call never runs).
 */
function awaitApproval(ctx: RunContext, callId: string, tool: OfferedTool, input: unknown): EngineError | null {
  const { svc } = ctx;
  const rule = tool.reference.approval!;
  if (rule.when !== null) {
    let needed: unknown;
    try {
      needed = svc.transactions.run('read', () => ({
        value: svc.cel.evaluate(rule.when!, jsonToCel({ input }) as Record<string, unknown>),
        commit: false,
      }));
    } catch (error) {
      return toEngineError(error);
    }
    if (needed !== true) return null;
  }
  const existing = svc.transactions.run('read', () => ({
    value: svc.sessions.approvalByCall.get(callId),
    commit: false,
  }));
  const now = svc.clock.now();
  if (existing?.status === 'APPROVED') return null;
  if (existing?.status === 'REJECTED') {
    return new EngineError(
      'APPROVAL_REJECTED',
      `${existing.decided_by ?? 'a person'} rejected this call of ${tool.reference.name}${existing.reason ? `: ${existing.reason}` : ''}`,
      {
        hint: 'Do not retry the same call; tell the person, or ask differently.',
      },
    );
  }
  if (existing?.status === 'CANCELLED') throw new Cancelled(ctx.executionId);
  if (existing && Date.parse(existing.expires) <= now.getTime()) {
    step(ctx, () =>
      svc.sessions.decideApproval.run({
        approval_id: existing.approval_id,
        status: 'EXPIRED',
        reason: null,
        decided_by: null,
        decided: now.toISOString(),
      }),
    );
    return new EngineError(
      'APPROVAL_EXPIRED',
      `nobody approved this call of ${tool.reference.name} before it expired (${rule.timeoutMs ?? svc.limits.approvalTimeoutMsMax} ms)`,
      {
        hint: 'The call did not run. Tell the person it needs an approval.',
      },
    );
  }
  if (existing?.status === 'EXPIRED') {
    return new EngineError(
      'APPROVAL_EXPIRED',
      `nobody approved this call of ${tool.reference.name} before it expired (${rule.timeoutMs ?? svc.limits.approvalTimeoutMsMax} ms)`,
      { hint: 'The call did not run. Tell the person it needs an approval.' },
    );
  }
  const approvalId = existing?.approval_id ?? derivedId(svc.derivedIdKey, 'approval', callId);
  const expires =
    existing?.expires ?? new Date(now.getTime() + (rule.timeoutMs ?? svc.limits.approvalTimeoutMsMax)).toISOString();
  step(ctx, () => {
    if (!existing) {
      svc.sessions.insertApproval.run({
        approval_id: approvalId,
        execution_id: ctx.executionId,
        call_id: callId,
        tool: tool.reference.name,
        tool_version: tool.version?.version ?? null,
        input: JSON.stringify(input),
        requested_by: ctx.principal,
        expires,
        created: now.toISOString(),
      });
    }
    svc.sessions.parkRun.run({
      execution_id: ctx.executionId,
      owner: ctx.claim.owner,
      expires,
      now: now.toISOString(),
    });
  });
  throw new Parked(approvalId);
}

function kindOf(tool: OfferedTool | null): CallNode['kind'] {
  if (tool?.native) return tool.native === 'graphql' ? 'GRAPHQL' : 'CEL';
  const kind = tool?.version?.kind;
  return kind === 'model' ? 'MODEL' : kind === 'agent' ? 'AGENT' : kind === 'graphql' ? 'GRAPHQL' : 'TOOL';
}

/** A model or agent call an agent could not start (refused, or its input invalid): recorded as its FAILED call. */
class NestedRefusal extends Error {
  constructor(override readonly cause: EngineError) {
    super(cause.message);
  }
}

/**
 * A model or agent an agent calls: a run of its own inside this one, outside any transaction like
 * it. Its row (RUNNING) is written first, then its steps under it with ids derived from it, then
 * its outcome; a run resumed after a crash continues it from its recorded steps. It runs under the
 * starter's authority narrowed by every layer above it and its own policies, shares the run's
 * deadline and lease, and counts as one tool call of the agent that called it. A failure another
 * attempt could mend (a provider down, a timeout) fails the whole attempt, to be resumed; any other
 * is its outcome, and goes back to the model like a failed tool call.
 */
async function nestedRun(
  ctx: RunContext,
  s: ToolStep,
  callId: string,
  tool: OfferedTool,
  version: ActionVersion,
  input: unknown,
  resumed: boolean,
): Promise<CallNode> {
  const { svc } = ctx;
  const depth = s.depth + 1;
  // Checked on every start and every resume (after an approval, after a crash): the caller may
  // still call it, and it is still ACTIVE.
  try {
    step(ctx, () => {
      if (depth > svc.limits.toolDepthMax) {
        throw new EngineError(
          'LIMIT_EXCEEDED',
          `${version.name} would run at tool depth ${depth}; toolDepthMax is ${svc.limits.toolDepthMax}`,
          { hint: 'Flatten the chain of agents calling agents.' },
        );
      }
      const caller = svc.callerOf(ctx.principal);
      if (!caller)
        throw new EngineError('ACCESS_DENIED', `the starter ${JSON.stringify(ctx.principal)} no longer exists`);
      checkMayCall(authorityOf(svc.cel, caller, null, ctx.outer.layers), version.name, version.version, input);
      checkRunnable(getVersion(svc.actions, { id: version.actionId, version: version.version }));
      validate(svc, version, 'input', input);
      if (resumed) return;
      persistTree(
        svc.st,
        baseNode(ctx, {
          executionId: callId,
          actionId: version.actionId,
          actionName: tool.reference.name,
          actionVersion: version.version,
          kind: kindOf(tool),
          input,
          parentId: s.turnId,
          rootId: ctx.executionId,
          depth: s.depth,
        }),
      );
    });
  } catch (error) {
    if (error instanceof LeaseLost || error instanceof Cancelled) throw error;
    if (!resumed) throw new NestedRefusal(toEngineError(error));
    // Resumed and refused now: its row (RUNNING) ends FAILED with the reason, told to the model.
    const failure = toEngineError(error).toData();
    return step(ctx, () => {
      svc.queue.finishNested.run({
        execution_id: callId,
        status: 'FAILED',
        output: null,
        error: JSON.stringify(failure),
        finished: svc.clock.now().toISOString(),
      });
      return rowToNode(svc.st.executionById.get(callId)!);
    });
  }
  const inner: RunContext = { ...ctx, version, outer: outerWith(ctx.outer, version) };
  let output: unknown = null;
  let error: ErrorData | null = null;
  try {
    output =
      version.kind === 'agent'
        ? await runAgent(inner, callId, version, input, depth)
        : await runModel(inner, callId, version, input, depth);
  } catch (e) {
    if (e instanceof LeaseLost || e instanceof Parked || e instanceof Cancelled || ctx.signal.aborted) throw e;
    const failure = toEngineError(e);
    if (isRetryable(failure.toData())) throw failure;
    error = failure.toData();
  }
  return step(ctx, () => {
    const finished = svc.clock.now().toISOString();
    svc.queue.finishNested.run({
      execution_id: callId,
      status: error ? 'FAILED' : 'SUCCEEDED',
      output: error ? null : JSON.stringify(output ?? null),
      error: error ? JSON.stringify(error) : null,
      finished,
    });
    return rowToNode(svc.st.executionById.get(callId)!);
  });
}

function argumentsOf(call: ModelToolCall): unknown {
  try {
    return JSON.parse(call.arguments === '' ? '{}' : call.arguments);
  } catch {
    return call.arguments;
  }
}
