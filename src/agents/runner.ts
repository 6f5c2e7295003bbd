import { randomUUID } from 'node:crypto';
import { DEFAULT_EXECUTION, getVersion, runsAfterCommit } from '../actions/actions.js';
import { EngineError, type ErrorData } from '../errors.js';
import type { QueueRow } from '../storage/statements/actions.js';
import {
  authorityOf,
  checkMayCall,
  checkRunnable,
  outerOf,
  outerWith,
  type VersionRef,
} from '../execution/call-rules.js';
import { toEngineError } from '../execution/checks.js';
import { isRetryable, retryRule, shouldRetry } from '../execution/queue/attempt.js';
import { backoffDelayMs } from '../execution/queue/backoff.js';
import type { ExecutionServices } from '../execution/services.js';
import { OUTSIDE_STOP_GRACE_MS } from '../limits.js';
import { type AgentConfig, modelConfig } from './config.js';
import type { OutsideRunsOptions, OutsideTransactionRuns, RunClaim } from '../execution/queue/outside-runs.js';
import { type RunVersion, Cancelled, LeaseLost, Parked, type RunContext, leaseUntil, tryWrite } from './run-context.js';
import { runAgent } from './agent-loop.js';
import { runModel } from './model-turns.js';
import { runOutside } from './outside-calls.js';
import { startFollowUp, startFollowUpOfCancelled } from '../execution/queue/follow-ups.js';

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
  private readonly inflight = new Map<
    string,
    { done: Promise<void>; abort: AbortController; principal: string; outside: boolean }
  >();
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
    this.inflight.set(claim.row.execution_id, {
      done,
      abort,
      principal: claim.row.principal ?? '',
      outside: claim.row.kind === 'HTTP' || claim.row.kind === 'MCP',
    });
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

  /**
   * Stop every run at its next step and give it back to the queue (due at once, the attempt not
   * counted); an outside call in flight first gets OUTSIDE_STOP_GRACE_MS to finish.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    const stopping = new Error('the worker is stopping');
    const grace: NodeJS.Timeout[] = [];
    for (const run of this.inflight.values()) {
      // An outside call in flight is let finish (up to OUTSIDE_STOP_GRACE_MS) and its outcome
      // recorded: aborted, its request's fate would be unknown, and a tool that may not be sent
      // twice could then never end but FAILED. A model call or agent step stops at once.
      if (run.outside) grace.push(setTimeout(() => run.abort.abort(stopping), OUTSIDE_STOP_GRACE_MS));
      else run.abort.abort(stopping);
    }
    try {
      await this.settled();
    } finally {
      for (const timer of grace) clearTimeout(timer);
    }
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
      output = await ctx.runVersion(ctx, ctx.executionId, ctx.version, ctx.input, 1);
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
    this.finish(claim, {
      startedAt,
      startedMs,
      output,
      error,
      backoff,
      session: ctx?.session ?? null,
      version: ctx?.version ?? null,
    });
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
      checkMayCall(
        authorityOf(svc.cel, caller, null, outer.layers),
        row.action_name,
        row.action_version,
        input,
        outer.consenting,
      );
      const version = getVersion(svc.actions, { id: row.action_id!, version: row.action_version! });
      checkRunnable(version);
      // An http or mcp call has no model config: nothing of the run reads it for those kinds.
      const config = runsAfterCommit(version.kind)
        ? ({} as AgentConfig)
        : (modelConfig(version.kind as 'model' | 'agent', version.config, svc.limits) as AgentConfig);
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
      // An outside call's attempt has its own deadline (execution.timeoutMs, else agentRunMsMax) from
      // when it starts: a retry hours after the start is an attempt like the first.
      const deadline = runsAfterCommit(version.kind)
        ? Date.now() + (version.execution.timeoutMs ?? svc.limits.agentRunMsMax)
        : Date.parse(row.created) + runTimeoutMs;
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
          deadline,
          signal,
          triggerDepth: row.trigger_depth,
          wake: this.options.wake,
          session,
          runVersion,
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
      version = null,
    }: {
      startedAt: Date;
      startedMs: number;
      output: unknown;
      error: ErrorData | null;
      backoff: typeof DEFAULT_EXECUTION.backoff;
      cancelled?: boolean;
      session?: RunContext['session'];
      /** The version that ran (null when it could not be read): its follow-ups start with a final outcome. */
      version?: RunContext['version'] | null;
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
      if (cancelled) startFollowUpOfCancelled(svc, row.execution_id);
      else if (version && (status === 'SUCCEEDED' || status === 'FAILED'))
        startFollowUp(svc, {
          version,
          executionId: row.execution_id,
          principal: row.principal ?? 'system',
          startStack: row.start_stack ? (JSON.parse(row.start_stack) as VersionRef[]) : [],
          input: JSON.parse(row.input) as unknown,
          output: succeeded ? (output ?? null) : null,
          error,
          triggerDepth: row.trigger_depth,
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

/** The run of a version of kind model or agent: the agent loop, or one model call. */
const runVersion: RunVersion = (ctx, runId, version, input, depth) =>
  version.kind === 'agent'
    ? runAgent(ctx, runId, version, input, depth)
    : version.kind === 'http' || version.kind === 'mcp'
      ? runOutside(ctx, runId, version, input)
      : runModel(ctx, runId, version, input, depth);
