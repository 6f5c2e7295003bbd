import * as actions from '../../actions/actions.js';
import type { ActionVersion, ExecutionSettings, ToolDefinition } from '../../actions/actions.js';
import { overrun } from '../../budgets.js';
import { EngineError, limitExceeded } from '../../errors.js';
import type { CallNode } from '../../execution/call-tree.js';
import * as executions from '../../execution/executions.js';
import { invokeAction } from '../../execution/entry.js';
import { checkNotModelWritten } from '../../execution/call-rules.js';
import { startAction } from '../../execution/queue/start.js';
import * as triggers from '../../execution/queue/triggers.js';
import { pageRequest, toConnection } from '../../paging.js';
import type { RequestContext } from '../context.js';
import { guard, visible } from './guard.js';
import { WAIT_ENDS } from '../../execution/status.js';
import * as sessions from '../../agents/sessions.js';
import type { ApprovalRow, SessionMessageRow, SessionRow } from '../../agents/sessions.js';
import {
  type ToolAccess,
  type ToolWritesMemo,
  callerAccess,
  isReadOnly,
  toolAccess,
  toolWritesMemo,
} from '../../actions/tool-access.js';

/** Action.tool's copy of the definition names its version (ToolDefinition.readOnly walks its policies). */
const VERSION_OF = Symbol('version');

const AA = 'actions.Action';
const AE = 'actions.Execution';
const AT = 'actions.Trigger';
const AS = 'actions.Session';
const AP = 'actions.Approval';
/** Statuses an execution never leaves. */

type Args = Record<string, any>;

/**
 * Invoking or starting action X is INSERT on actions.Execution with context.document.action == "X".
 * The name comes from the cached version document when the version is given (the invoke hot path).
 */
/** Check the stack may run the action; returns the version when it had to load it (invoke reuses it). */
function guardExecution(
  ctx: RequestContext,
  id: string | null | undefined,
  name: string | null | undefined,
  input: Args,
): ActionVersion | undefined {
  const version =
    id && input.actionVersion != null
      ? actions.getVersion(ctx.services.actions, { id, name, version: input.actionVersion })
      : undefined;
  // An alias is guarded as the action it names: a policy on the name holds whatever name the caller used.
  const actionName = !id
    ? name == null
      ? name
      : actions.canonicalName(ctx.services.actions, name)
    : version
      ? version.name
      : actions.findAction(ctx.services.actions, { id, name }).name;
  guard(ctx, 'INSERT', AE, { action: actionName, version: input.actionVersion ?? null, input: input.input ?? null });
  return version;
}

/**
 * A session the caller may read (or update): its own, and one the stack's policies allow
 * (sessions.usable decides). Any other is NOT_FOUND, as one that does not exist, so a session id
 * tells another client nothing.
 */
function visibleSession(ctx: RequestContext, sessionId: string, action: 'SELECT' | 'UPDATE'): SessionRow {
  return sessions.usableSession(ctx.services, ctx.principal, sessionId, sessionPolicy(ctx, action));
}

function sessionPolicy(ctx: RequestContext, action: 'SELECT' | 'UPDATE') {
  return (document: ReturnType<typeof sessions.sessionDocument>) =>
    ctx.authority.allows({ action, resource: AS, document });
}

/**
 * An agent's model reads the skills it declares (load_skill): declaring one is reading it, so the
 * caller must be allowed SELECT on each (actions.Skill, the skill as document).
 */
function guardSkills(ctx: RequestContext, input: Args): void {
  const refs = (input?.skills ?? []) as Array<{ name: string; version?: number | null }>;
  if (refs.length === 0) return;
  for (const skill of ctx.services.skills.resolve(refs.map((r) => ({ name: r.name, version: r.version ?? null }))))
    guard(ctx, 'SELECT', 'actions.Skill', skill);
}

/** One ToolWritesMemo per request: the listing and each `access` share what they read. */
const toolMemos = new WeakMap<RequestContext, ToolWritesMemo>();

function memoOf(ctx: RequestContext): ToolWritesMemo {
  let memo = toolMemos.get(ctx);
  if (!memo) toolMemos.set(ctx, (memo = toolWritesMemo()));
  return memo;
}

/** What calling a tool needs, and nothing else: no program, config, policies or references. */
export interface ToolNode {
  actionId: string;
  name: string;
  version: number;
  /** tool, graphql, model or agent: MCP starts a model or agent tool and waits for it. */
  kind: string;
  title: string;
  description: string;
  inputSchema: unknown;
  outputSchema: unknown;
  access: ToolAccess;
}

function toolNode(_ctx: RequestContext, version: ActionVersion, access: ToolAccess): ToolNode {
  return {
    actionId: version.actionId,
    name: version.name,
    version: version.version,
    kind: version.kind,
    title: (version.tool as { title?: string | null }).title ?? version.tool.name,
    description: version.tool.description,
    inputSchema: version.tool.inputSchema,
    outputSchema: version.tool.outputSchema ?? null,
    access: { readOnly: access.readOnly, destructive: access.destructive },
  };
}

/**
 * Whether the caller may invoke a version as a tool: the check invokeAction makes (with no input
 * yet). The one rule of the listing (tools) and the lookup (tool(name)), so of MCP's tools/list and
 * tools/call too. No SELECT on actions.Action is needed: a caller that may invoke a tool may see
 * what calling it needs (its schema and access), as a Tool.
 */
function mayInvoke(ctx: RequestContext, version: ActionVersion): boolean {
  return ctx.authority.allows({
    action: 'INSERT',
    resource: AE,
    document: { action: version.name, version: version.version, input: null },
  });
}

/**
 * The tool `name` (an action name or an alias) at its latest ACTIVE version, when the caller may
 * invoke it. A tool it may not invoke, one with no ACTIVE version, or an internal one (unless asked
 * for with `internal`: MCP never asks), is NOT_FOUND with the same message as a name nobody used:
 * a lookup tells no more than the listing shows. (A tool the caller
 * may invoke but none of whose writes it could make is left out of the listing, yet found by name:
 * calling it is refused inside the call, where it writes.)
 */
function toolByName(ctx: RequestContext, name: string, internal: boolean): ToolNode {
  const deps = ctx.services.actions;
  const version = actions.latestActiveVersion(deps, actions.findAction(deps, { name }).action_id);
  if (!version || !mayInvoke(ctx, version) || (version.tool.internal && !internal)) throw actions.noSuchAction(name);
  return toolNode(ctx, version, toolAccess(deps, version, ctx.caller.client?.policies ?? null, memoOf(ctx)));
}

/**
 * The tools a caller may call: each action's latest ACTIVE version, kept when it may invoke it
 * (mayInvoke) and could make at least one of its writes, and not internal unless asked for. The actions are read until the page is
 * full, and the cursors are those of the tools listed (their actionId), so a caller shown none
 * learns no count.
 */
function listTools(ctx: RequestContext, first: number, after: string | null | undefined, internal: boolean) {
  const deps = ctx.services.actions;
  const req = pageRequest<string>(first, after, ctx.limits.pageSizeMax, 'string', 'tools');
  let rowid = 0;
  if (req.after !== undefined) {
    const found = deps.st.actionRowid.get(req.after);
    if (found === undefined) {
      throw new EngineError('BAD_REQUEST', 'the cursor is not a cursor this connection gave out', {
        hint: 'Pass pageInfo.endCursor from the previous page as `after`.',
      });
    }
    rowid = found;
  }
  const policies = ctx.caller.client?.policies ?? null;
  const memo = memoOf(ctx);
  const found: ToolNode[] = [];
  const batch = Math.min(ctx.limits.pageSizeMax, 256);
  for (;;) {
    const rows = deps.st.actionsPage.all(rowid, batch);
    for (const row of rows) {
      rowid = row.rowid;
      const version = actions.latestActiveVersion(deps, row.action_id);
      if (!version || (version.tool.internal && !internal) || !mayInvoke(ctx, version)) continue;
      const access = toolAccess(deps, version, policies, memo);
      if (access.hidden) continue;
      found.push(toolNode(ctx, version, access));
      if (found.length > req.first) break;
    }
    if (found.length > req.first || rows.length < batch) break;
    const caller = ctx.caller;
    if (caller.deadline !== undefined && Date.now() > caller.deadline) {
      caller.overran ??= overrun(
        caller.budget ?? { name: 'requestDeadlineMs', ms: ctx.limits.requestDeadlineMs },
        'ActionsQuery.tools',
      );
      throw caller.overran;
    }
  }
  return toConnection(
    found,
    req,
    (t) => t.actionId,
    (t) => t,
  );
}

/**
 * Execution.progress: the messages after `after`, each only when the reader may SELECT the call
 * that said it (the same rule as reading that call; this one was checked already).
 */
function progressOf(ctx: RequestContext, node: CallNode, after: number, first: number) {
  const pageSizeMax = ctx.limits.pageSizeMax;
  if (!Number.isInteger(after) || after < 0)
    throw new EngineError('BAD_REQUEST', `progress(after: ${after}) is below 0`, {
      hint: 'Pass the seq of the last progress message seen, or 0 for none.',
    });
  if (!Number.isInteger(first) || first < 1)
    throw new EngineError('BAD_REQUEST', `progress(first: ${first}) must be at least 1`, {
      hint: `Ask for between 1 and ${pageSizeMax} messages.`,
    });
  if (first > pageSizeMax)
    throw limitExceeded(
      'pageSizeMax',
      pageSizeMax,
      first,
      `progress(first: ${first}) is over pageSizeMax (${pageSizeMax})`,
      {
        hint: `Ask for at most ${pageSizeMax} messages, and for the next ones after the last seq.`,
      },
    );
  const sayers = new Map<string, CallNode | null>([[node.executionId, node]]);
  const out = [];
  for (const message of executions.progress(ctx.services, node, after, first)) {
    let sayer = sayers.get(message.executionId);
    if (sayer === undefined) {
      const found = executions.find(ctx.services, message.executionId);
      sayer = found && ctx.authority.allows({ action: 'SELECT', resource: AE, document: found }) ? found : null;
      sayers.set(message.executionId, sayer);
    }
    if (sayer) out.push({ ...message, actionName: sayer.actionName });
  }
  return out;
}

export const actionResolvers = {
  Query: { actions: () => ({}) },
  Mutation: { actions: () => ({}) },
  ActionsQuery: {
    action: (_: unknown, { id, name, version }: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', AA, actions.getVersion(ctx.services.actions, { id, name, version })),
    actions: (_: unknown, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, AA, actions.listActions(ctx.services.actions, first, after)),
    execution: (_: unknown, { executionId, waitMs, progressAfter }: Args, ctx: RequestContext) => {
      const waitMsMax = ctx.limits.executionWaitMsMax;
      if (waitMs != null && (waitMs < 0 || waitMs > waitMsMax)) {
        const message = `waitMs ${waitMs} is out of range: 0 to executionWaitMsMax (${waitMsMax} ms)`;
        const hint =
          'Wait at most executionWaitMsMax per request, and ask again while the execution is QUEUED or RUNNING.';
        const details = { waitMs, executionWaitMsMax: waitMsMax };
        throw waitMs < 0
          ? new EngineError('BAD_REQUEST', message, { hint, details })
          : limitExceeded('executionWaitMsMax', waitMsMax, waitMs, message, { hint, details });
      }
      const found = executions.find(ctx.services, executionId);
      if (!found)
        throw new EngineError('NOT_FOUND', `execution ${executionId} does not exist`, {
          hint: 'Executions of a request that rolled back are not kept.',
        });
      if (progressAfter != null && progressAfter < 0)
        throw new EngineError('BAD_REQUEST', `progressAfter ${progressAfter} is below 0`, {
          hint: 'Pass the seq of the last progress message seen, or 0 for none.',
        });
      const node = guard(ctx, 'SELECT', AE, found);
      // Only after the guard: a client that may not see the execution never waits on it.
      if (waitMs > 0 && ctx.waits && ctx.frame === null && !WAIT_ENDS.has(node.status))
        ctx.waits.push({
          executionId,
          waitMs,
          principal: ctx.principal,
          // Without a seq: a message newer than the ones there now ends the wait.
          progressAfter: progressAfter ?? executions.latestProgress(ctx.services, executionId),
        });
      return node;
    },
    executions: (_: unknown, { first, after, where, order }: Args, ctx: RequestContext) =>
      visible(ctx, AE, executions.list(ctx.services, where, { first, after, newestFirst: order === 'NEWEST_FIRST' })),
    tools: (_: unknown, { first, after, internal }: Args, ctx: RequestContext) =>
      listTools(ctx, first, after, internal === true),
    tool: (_: unknown, { name, internal }: Args, ctx: RequestContext) => toolByName(ctx, name, internal === true),
    nativeTools: (_: unknown, __: Args, ctx: RequestContext) =>
      actions.NATIVE_TOOLS.filter((name) =>
        ctx.authority.allows({
          action: 'INSERT',
          resource: AE,
          document: { action: name, version: null, input: null },
        }),
      ).map((name) => ({
        name,
        access:
          name === 'cel' ? { readOnly: true, destructive: false } : callerAccess(ctx.caller.client?.policies ?? null),
      })),
    session: (_: unknown, { sessionId }: Args, ctx: RequestContext) => visibleSession(ctx, sessionId, 'SELECT'),
    sessions: (_: unknown, { first, after, where }: Args, ctx: RequestContext) =>
      // Newest first; a filter is applied to the page read (a page may be short: follow endCursor).
      sessions.listSessions(ctx.services, ctx.principal, { first, after }, where, sessionPolicy(ctx, 'SELECT')),
    approval: (_: unknown, { approvalId }: Args, ctx: RequestContext) => {
      const row = sessions.getApproval(ctx.services, approvalId);
      guard(ctx, 'SELECT', AP, sessions.approvalDocument(row));
      return row;
    },
    approvals: (_: unknown, { first, after, where }: Args, ctx: RequestContext) =>
      visible(ctx, AP, sessions.listApprovals(ctx.services, { first, after }, where?.status), (r) =>
        sessions.approvalDocument(r),
      ),
    queue: (_: unknown, __: Args, ctx: RequestContext) => {
      guard(ctx, 'SELECT', AE, {});
      return executions.queueCounts(ctx.services);
    },
    trigger: (_: unknown, { id }: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', AT, triggers.getTrigger(ctx.services, id)),
    triggers: (_: unknown, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, AT, triggers.listTriggers(ctx.services, first, after)),
  },
  ActionsMutation: {
    createAction: (_: unknown, { id, input }: Args, ctx: RequestContext) => {
      checkNotModelWritten(ctx.frame, `createAction of ${JSON.stringify(input?.name ?? id)}`);
      guard(ctx, 'INSERT', AA, { actionId: id, ...input });
      guardSkills(ctx, input);
      return actions.createAction(ctx.services.actions, id, input);
    },
    updateAction: (_: unknown, { id, input }: Args, ctx: RequestContext) => {
      checkNotModelWritten(ctx.frame, `updateAction of ${id}`);
      guard(ctx, 'UPDATE', AA, actions.getVersion(ctx.services.actions, { id }));
      guardSkills(ctx, input);
      return actions.updateAction(ctx.services.actions, id, input);
    },
    lockAction: (_: unknown, { id, version }: Args, ctx: RequestContext) => {
      guard(ctx, 'UPDATE', AA, actions.getVersion(ctx.services.actions, { id, version }));
      return actions.setVersionStatus(ctx.services.actions, id, version, 'LOCKED');
    },
    activateAction: (_: unknown, { id, version }: Args, ctx: RequestContext) => {
      checkNotModelWritten(ctx.frame, `activateAction of ${id}`);
      guard(ctx, 'UPDATE', AA, actions.getVersion(ctx.services.actions, { id, version }));
      return actions.setVersionStatus(ctx.services.actions, id, version, 'ACTIVE');
    },
    invokeAction: (_: unknown, { id, name, input }: Args, ctx: RequestContext) => {
      const version = guardExecution(ctx, id, name, input);
      return invokeAction(ctx.services, ctx.caller, ctx.frame, {
        id,
        name,
        executionId: input.executionId,
        actionVersion: input.actionVersion,
        input: input.input,
        ...(version ? { version } : {}),
      });
    },
    startAction: (_: unknown, { id, name, input }: Args, ctx: RequestContext) => {
      guardExecution(ctx, id, name, input);
      return startAction(
        ctx.services,
        ctx.caller,
        { id, name, executionId: input.executionId, actionVersion: input.actionVersion, input: input.input },
        ctx.frame,
      );
    },
    cancelExecution: (_: unknown, { executionId }: Args, ctx: RequestContext) => {
      const node = executions.find(ctx.services, executionId);
      if (!node) throw new EngineError('NOT_FOUND', `execution ${executionId} does not exist`);
      guard(ctx, 'UPDATE', AE, node);
      // What may be cancelled, and how, is the execution's rule (executions.cancel).
      return executions.cancel(ctx.services, node, ctx.frame);
    },
    createSession: (_: unknown, { sessionId, agent, input }: Args, ctx: RequestContext) => {
      // An alias is guarded as the agent it names, as guardExecution does: a policy on the name
      // holds whatever name the caller used.
      const named = actions.canonicalName(ctx.services.actions, agent);
      guard(ctx, 'INSERT', AS, { sessionId, agent: named, input: input ?? {}, principal: ctx.principal });
      // Its turns start the agent: the caller must be allowed that too, as for startAction.
      guard(ctx, 'INSERT', AE, { action: named, version: null, input: input ?? {} });
      return sessions.createSession(ctx.services, ctx.caller, ctx.frame, { sessionId, agent, input });
    },
    sendMessage: (_: unknown, { sessionId, messageId, text }: Args, ctx: RequestContext) => {
      // A turn starts the agent: the stack must be allowed that, as for startAction (checked on the
      // caller's own session only; any other is NOT_FOUND).
      const row = sessions.usableSession(ctx.services, ctx.principal, sessionId);
      const version = sessions.sessionAgent(ctx.services, row);
      guard(ctx, 'INSERT', AE, {
        action: version.name,
        version: version.version,
        input: sessions.turnInput(row, text),
      });
      return sessions.sendMessage(ctx.services, ctx.caller, ctx.frame, { sessionId, messageId, text });
    },
    closeSession: (_: unknown, { sessionId }: Args, ctx: RequestContext) =>
      sessions.closeSession(ctx.services, ctx.frame, visibleSession(ctx, sessionId, 'UPDATE')),
    approveCall: (_: unknown, { approvalId, reason }: Args, ctx: RequestContext) => {
      const row = sessions.getApproval(ctx.services, approvalId);
      guard(ctx, 'UPDATE', AP, { ...sessions.approvalDocument(row), decision: 'APPROVED' });
      return sessions.decide(ctx.services, ctx.caller, ctx.frame, row, 'APPROVED', reason ?? null);
    },
    rejectCall: (_: unknown, { approvalId, reason }: Args, ctx: RequestContext) => {
      const row = sessions.getApproval(ctx.services, approvalId);
      guard(ctx, 'UPDATE', AP, { ...sessions.approvalDocument(row), decision: 'REJECTED' });
      return sessions.decide(ctx.services, ctx.caller, ctx.frame, row, 'REJECTED', reason ?? null);
    },
    createTrigger: (_: unknown, { input }: Args, ctx: RequestContext) => {
      if (ctx.frame) {
        // A trigger outlives the call; it would start actions without the calling tools' limits.
        throw new EngineError('ACCESS_DENIED', 'triggers cannot be created from inside a tool call', {
          hint: 'Create triggers as a client (or with tally deploy).',
        });
      }
      return triggers.createTrigger(ctx.services, ctx.principal, guard(ctx, 'INSERT', AT, input));
    },
    updateTrigger: (_: unknown, { id, input }: Args, ctx: RequestContext) => {
      if (ctx.frame) {
        // As for createTrigger: the updated trigger would start actions without the calling tools' limits.
        throw new EngineError('ACCESS_DENIED', 'triggers cannot be updated from inside a tool call', {
          hint: 'Update triggers as a client (or with tally deploy).',
        });
      }
      guard(ctx, 'UPDATE', AT, triggers.getTrigger(ctx.services, id));
      // The update re-owns the trigger to this caller: its policies must allow the trigger as it will be, too.
      return triggers.updateTrigger(ctx.services, ctx.principal, id, input, (next) => guard(ctx, 'UPDATE', AT, next));
    },
    deleteTrigger: (_: unknown, { id }: Args, ctx: RequestContext) => {
      if (ctx.frame) {
        // As for createTrigger: what the trigger does outlives the call; a tool does not remove it either.
        throw new EngineError('ACCESS_DENIED', 'triggers cannot be deleted from inside a tool call', {
          hint: 'Delete triggers as a client (or with tally deploy).',
        });
      }
      guard(ctx, 'DELETE', AT, triggers.getTrigger(ctx.services, id));
      return triggers.deleteTrigger(ctx.services, id);
    },
  },
  Action: {
    pending: (v: ActionVersion) => v.status === 'DRAFT',
    // The definition carries its version along, for readOnly (a getter-free copy; the document is frozen).
    tool: (v: ActionVersion) => ({ ...v.tool, [VERSION_OF]: v }),
    access: (v: ActionVersion, _: Args, ctx: RequestContext) =>
      toolAccess(ctx.services.actions, v, ctx.caller.client?.policies ?? null, memoOf(ctx)),
    versions: (v: ActionVersion, _: Args, ctx: RequestContext) =>
      actions
        .listVersions(ctx.services.actions, v.actionId)
        .filter((x) => ctx.authority.allows({ action: 'SELECT', resource: AA, document: x })),
  },
  ToolDefinition: {
    title: (t: ToolDefinition) => t.title ?? null,
    aliases: (t: ToolDefinition) => t.aliases ?? [],
    metadata: (t: ToolDefinition) => t.metadata ?? null,
    internal: (t: ToolDefinition) => t.internal === true,
    readOnly: (t: ToolDefinition & { [VERSION_OF]?: ActionVersion }, _: Args, ctx: RequestContext) => {
      const version = t[VERSION_OF];
      return version ? isReadOnly(ctx.services.actions, version, memoOf(ctx)) : false;
    },
  },
  ExecutionSettings: {
    retryIf: (e: ExecutionSettings) => e.retryIf ?? null,
    cacheTtlMs: (e: ExecutionSettings) => e.cacheTtlMs ?? null,
  },
  Session: {
    sessionId: (r: SessionRow) => r.session_id,
    agent: (r: SessionRow) => r.action_name,
    agentVersion: (r: SessionRow) => r.action_version,
    input: (r: SessionRow) => JSON.parse(r.input),
    status: (r: SessionRow, _: Args, ctx: RequestContext) => sessions.sessionStatus(ctx.services, r),
    lastActive: (r: SessionRow) => r.last_active,
    expires: (r: SessionRow, _: Args, ctx: RequestContext) =>
      r.status === 'CLOSED' ? null : new Date(Date.parse(r.last_active) + ctx.limits.sessionIdleMs).toISOString(),
    messages: (r: SessionRow, _: Args, ctx: RequestContext) => sessions.sessionMessages(ctx.services, r.session_id),
  },
  SessionMessage: {
    messageId: (m: SessionMessageRow) => m.message_id,
    execution: (m: SessionMessageRow, _: Args, ctx: RequestContext) => {
      const node = m.execution_id ? executions.find(ctx.services, m.execution_id) : null;
      return node && ctx.authority.allows({ action: 'SELECT', resource: AE, document: node }) ? node : null;
    },
  },
  Approval: {
    approvalId: (r: ApprovalRow) => r.approval_id,
    executionId: (r: ApprovalRow) => r.execution_id,
    execution: (r: ApprovalRow, _: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', AE, executions.get(ctx.services, r.execution_id)),
    toolVersion: (r: ApprovalRow) => r.tool_version,
    input: (r: ApprovalRow) => JSON.parse(r.input),
    requestedBy: (r: ApprovalRow) => r.requested_by,
    decidedBy: (r: ApprovalRow) => r.decided_by,
  },
  Execution: {
    sessionId: (n: CallNode) => n.sessionId ?? null,
    cancelRequested: (n: CallNode) => n.cancelRequested === true,
    action: (n: CallNode, _: Args, ctx: RequestContext) =>
      n.actionId && n.actionVersion
        ? guard(
            ctx,
            'SELECT',
            AA,
            actions.getVersion(ctx.services.actions, { id: n.actionId, version: n.actionVersion }),
          )
        : null,
    invocation: (n: CallNode, _: Args, ctx: RequestContext) => executions.invocations(ctx.services, n).at(-1) ?? null,
    invocations: (n: CallNode, _: Args, ctx: RequestContext) => executions.invocations(ctx.services, n),
    caller: (n: CallNode) => ({ principal: n.principal, transport: n.transport ?? null }),
    triggerDepth: (n: CallNode) => n.triggerDepth ?? 0,
    parent: (n: CallNode, _: Args, ctx: RequestContext) => {
      const parent = executions.parent(ctx.services, n);
      return parent ? guard(ctx, 'SELECT', AE, parent) : null;
    },
    children: (n: CallNode, _: Args, ctx: RequestContext) =>
      executions
        .children(ctx.services, n)
        .filter((c) => ctx.authority.allows({ action: 'SELECT', resource: AE, document: c })),
    progress: (n: CallNode, { after, first }: Args, ctx: RequestContext) => progressOf(ctx, n, after, first),
    outbound: (n: CallNode, _: Args, ctx: RequestContext) => executions.outbound(ctx.services, n),
  },
};
