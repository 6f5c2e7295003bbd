import { type ActionVersion, getVersion, LOAD_SKILL_TOOL, runsOutsideTransactions } from '../actions/actions.js';
import { EngineError, type ErrorData, limitExceeded } from '../errors.js';
import { derivedId } from '../ids.js';
import type { ModelToolCall } from '../models/types.js';
import { type CallNode, persistTree, rowToNode } from '../execution/call-tree.js';
import { authorityOf, checkMayCall, checkRunnable, outerWith } from '../execution/call-rules.js';
import { fixedInput, toEngineError, validate } from '../execution/checks.js';
import { jsonToCel } from '../cel/values.js';
import { isRetryable } from '../execution/queue/attempt.js';
import { startFollowUp } from '../execution/queue/follow-ups.js';
import {
  Cancelled,
  LeaseLost,
  type OfferedTool,
  Parked,
  type RunContext,
  baseNode,
  checkDeadline,
  recorded,
  step,
  stepId,
} from './run-context.js';
import { NAMES_LISTED_MAX, NAME_SHOWN_MAX } from '../limits.js';
import { answersToAlias } from '../actions/names.js';
import { type Attempted, attemptTool, kindOf, recordedAttempts } from './tool-attempts.js';

/*
 * A tool the model asked for (by its name or one of its aliases): checked against the agent's
 * references and every layer above, approved by a person where the reference asks, run through
 * the one call entry (beginCall) in a transaction of its own, retried by its retry rule
 * (tool-attempts.ts), and recorded in the run's tree.
 */

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
  /** Attempts the run's maxToolCalls still allows this call, this one included. */
  callsLeft: number;
}

/**
 * The tool the model asked for: the one offered under that name, or else the offered tool whose
 * version answers to it as an alias (as a program's tools.x() finds one). Only offered tools: an
 * alias of a tool the agent was not given is no tool.
 */
export function offeredTool(tools: readonly OfferedTool[], name: string): OfferedTool | undefined {
  return (
    tools.find((t) => t.reference.name === name) ??
    tools.find((t) => t.version !== null && !t.skills && answersToAlias(t.version, name))
  );
}

/** One tool call the model asked for: its last outcome, and the attempts it took (see callTool). */
export async function toolCall(ctx: RunContext, s: ToolStep): Promise<Attempted> {
  const ran = await callTool(ctx, s);
  return 'attempts' in ran ? ran : { node: ran, attempts: 1 };
}

/**
 * One tool call the model asked for, exactly once: read back when it was recorded; otherwise run
 * as an invoke in a transaction of its own (checking the lease), under the starter's authority
 * narrowed by every tool on the start stack, the agent, and the tool. Whatever fails is recorded
 * as a FAILED call under the turn, and its code, message and hint go back to the model.
 */
async function callTool(ctx: RunContext, s: ToolStep): Promise<CallNode | Attempted> {
  const { svc } = ctx;
  const callId = stepId(ctx, s.runId, 'call', s.turnId, s.index);
  const known = recorded(ctx, callId);
  // A model or agent it called that was cut short is RUNNING: it resumes below, from its own steps;
  // so does a tool with an attempt due.
  if (known && known.status !== 'RUNNING') return { node: known, attempts: recordedAttempts(ctx, callId) };
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

  const tool = offeredTool(s.tools, s.call.name);
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
        LOAD_SKILL_TOOL,
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
      return failed(toEngineError(error), LOAD_SKILL_TOOL, args, tool);
    }
    if (!document)
      return failed(
        new EngineError('NOT_FOUND', `skill ${skill.name} version ${skill.version} no longer exists`),
        LOAD_SKILL_TOOL,
        args,
        tool,
      );
    return step(ctx, () => {
      const node: CallNode = {
        ...baseNode(ctx, {
          executionId: callId,
          actionId: null,
          actionName: LOAD_SKILL_TOOL,
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
  return attemptTool(ctx, { callId, attach, tool, input, resumed: known, callsLeft: s.callsLeft });
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
        throw limitExceeded(
          'toolDepthMax',
          svc.limits.toolDepthMax,
          depth,
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
    output = await ctx.runVersion(inner, callId, version, input, depth);
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
    // An outside call's follow-up (settle, or release) starts with its outcome, in this transaction.
    startFollowUp(svc, {
      version,
      executionId: callId,
      principal: ctx.principal,
      startStack: ctx.outer.refs,
      input,
      output: error ? null : (output ?? null),
      error,
      triggerDepth: ctx.triggerDepth,
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
