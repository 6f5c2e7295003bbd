import * as actions from '../../actions/actions.js';
import type { ActionVersion } from '../../actions/actions.js';
import { EngineError } from '../../errors.js';
import { type CallNode, rowToNode } from '../../execution/call-tree.js';
import { invokeAction } from '../../execution/invoke.js';
import { pageRequest, toConnection } from '../../paging.js';
import type { RequestContext } from '../context.js';

type Args = Record<string, any>;

function listExecutions(ctx: RequestContext, { first, after, where }: Args) {
  const st = ctx.services.st;
  const req = pageRequest<number>(first, after, ctx.limits.pageSizeMax, 'number', 'executions');
  const from = req.after ?? 0;
  const rows = where?.actionId
    ? st.executionsByActionPage.all(where.actionId, from, req.fetch).filter((r) => !where.status || r.status === where.status)
    : where?.status
      ? st.executionsByStatusPage.all(where.status, from, req.fetch)
      : st.executionsPage.all(from, req.fetch);
  return toConnection(rows, req, (r) => r.seq, rowToNode);
}

function invocation(node: CallNode) {
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

export const actionResolvers = {
  Query: { actions: () => ({}) },
  Mutation: { actions: () => ({}) },
  ActionsQuery: {
    action: (_: unknown, { id, name, version }: Args, ctx: RequestContext) => actions.getVersion(ctx.services.actions, { id, name, version }),
    actions: (_: unknown, { first, after }: Args, ctx: RequestContext) => actions.listActions(ctx.services.actions, first, after),
    execution: (_: unknown, { executionId }: Args, ctx: RequestContext) => {
      const row = ctx.services.st.executionById.get(executionId);
      if (!row) throw new EngineError('NOT_FOUND', `execution ${executionId} does not exist`, { hint: 'Executions of a request that rolled back are not kept.' });
      return rowToNode(row);
    },
    executions: (_: unknown, args: Args, ctx: RequestContext) => listExecutions(ctx, args),
  },
  ActionsMutation: {
    createAction: (_: unknown, { id, input }: Args, ctx: RequestContext) => actions.createAction(ctx.services.actions, id, input),
    updateAction: (_: unknown, { id, input }: Args, ctx: RequestContext) => actions.updateAction(ctx.services.actions, id, input),
    lockAction: (_: unknown, { id, version }: Args, ctx: RequestContext) => actions.setVersionStatus(ctx.services.actions, id, version, 'LOCKED'),
    activateAction: (_: unknown, { id, version }: Args, ctx: RequestContext) => actions.setVersionStatus(ctx.services.actions, id, version, 'ACTIVE'),
    invokeAction: (_: unknown, { id, name, input }: Args, ctx: RequestContext) =>
      invokeAction(ctx.services, ctx.principal, ctx.frame, { id, name, executionId: input.executionId, actionVersion: input.actionVersion, input: input.input }),
  },
  Action: {
    pending: (v: ActionVersion) => v.status === 'DRAFT',
    versions: (v: ActionVersion, _: Args, ctx: RequestContext) => actions.listVersions(ctx.services.actions, v.actionId),
  },
  Execution: {
    action: (n: CallNode, _: Args, ctx: RequestContext) =>
      n.actionId && n.actionVersion ? actions.getVersion(ctx.services.actions, { id: n.actionId, version: n.actionVersion }) : null,
    invocation: (n: CallNode) => (n.status === 'QUEUED' ? null : invocation(n)),
    invocations: (n: CallNode) => (n.status === 'QUEUED' ? [] : [invocation(n)]),
    caller: (n: CallNode) => ({ principal: n.principal }),
    parent: (n: CallNode, _: Args, ctx: RequestContext) => {
      if (!n.parentId) return null;
      const row = ctx.services.st.executionById.get(n.parentId);
      return row ? rowToNode(row) : null;
    },
    children: (n: CallNode, _: Args, ctx: RequestContext) =>
      n.children.length > 0 ? n.children : ctx.services.st.executionChildren.all(n.executionId).map(rowToNode),
  },
};
