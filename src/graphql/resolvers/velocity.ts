import type { AccountSet, Account } from '../../ledger/records.js';
import * as velocity from '../../ledger/velocity.js';
import type { RequestContext } from '../context.js';
import { guard, visible } from './guard.js';
import { guardAccountOrSet } from './ledger.js';

type Args = Record<string, any>;
type Resolver<P = unknown> = (parent: P, args: Args, ctx: RequestContext) => unknown;

const VL = 'financial.VelocityLimit';
const VC = 'financial.VelocityControl';
const B = 'financial.Balance';

const deps = (ctx: RequestContext) => ctx.ledger.deps;

/** Velocity balances reveal the balance they are computed from: reading them needs SELECT on both. */
function velocityOf(ctx: RequestContext, accountId: string, args: Args) {
  guard(ctx, 'SELECT', VC, { accountId });
  guard(ctx, 'SELECT', B, { accountId, journalId: args.journalId ?? null, currency: args.currency ?? 'USD' });
  return velocity.velocityOf(deps(ctx), {
    accountId,
    window: args.window,
    currency: args.currency,
    velocityLimitId: args.velocityLimitId,
    journalId: args.journalId,
  });
}

const query: Record<string, Resolver> = {
  velocityLimit: (_, { id }, ctx) => guard(ctx, 'SELECT', VL, velocity.getVelocityLimit(deps(ctx), id)),
  velocityLimits: (_, { first, after }, ctx) => visible(ctx, VL, velocity.listVelocityLimits(deps(ctx), first, after)),
  velocityControl: (_, { id }, ctx) => guard(ctx, 'SELECT', VC, velocity.getVelocityControl(deps(ctx), id)),
  velocityControls: (_, { first, after }, ctx) =>
    visible(ctx, VC, velocity.listVelocityControls(deps(ctx), first, after)),
  attachedControls: (_, { accountId, first, after }, ctx) => {
    ctx.ledger.balanceOwner(accountId);
    return visible(ctx, VC, velocity.attachedControls(deps(ctx), accountId, first, after));
  },
  velocity: (_, args, ctx) => velocityOf(ctx, args.accountId, args),
};

const mutation: Record<string, Resolver> = {
  createVelocityLimit: (_, { input }, ctx) => velocity.createVelocityLimit(deps(ctx), guard(ctx, 'INSERT', VL, input)),
  updateVelocityLimit: (_, { id, input }, ctx) => {
    guard(ctx, 'UPDATE', VL, velocity.getVelocityLimit(deps(ctx), id));
    return velocity.updateVelocityLimit(deps(ctx), id, input);
  },
  deleteVelocityLimit: (_, { id }, ctx) => {
    guard(ctx, 'DELETE', VL, velocity.getVelocityLimit(deps(ctx), id));
    return velocity.deleteVelocityLimit(deps(ctx), id);
  },
  createVelocityControl: (_, { input }, ctx) =>
    velocity.createVelocityControl(deps(ctx), guard(ctx, 'INSERT', VC, input)),
  updateVelocityControl: (_, { id, input }, ctx) => {
    guard(ctx, 'UPDATE', VC, velocity.getVelocityControl(deps(ctx), id));
    return velocity.updateVelocityControl(deps(ctx), id, input);
  },
  deleteVelocityControl: (_, { id }, ctx) => {
    guard(ctx, 'DELETE', VC, velocity.getVelocityControl(deps(ctx), id));
    return velocity.deleteVelocityControl(deps(ctx), id);
  },
  addLimitToControl: (_, { velocityControlId, velocityLimitId }, ctx) => {
    guard(ctx, 'UPDATE', VC, velocity.getVelocityControl(deps(ctx), velocityControlId));
    return velocity.addLimitToControl(deps(ctx), velocityControlId, velocityLimitId);
  },
  removeLimitFromControl: (_, { velocityControlId, velocityLimitId }, ctx) => {
    guard(ctx, 'UPDATE', VC, velocity.getVelocityControl(deps(ctx), velocityControlId));
    return velocity.removeLimitFromControl(deps(ctx), velocityControlId, velocityLimitId);
  },
  removeAllLimitsFromControl: (_, { velocityControlId }, ctx) => {
    guard(ctx, 'UPDATE', VC, velocity.getVelocityControl(deps(ctx), velocityControlId));
    return velocity.removeAllLimitsFromControl(deps(ctx), velocityControlId);
  },
  // Attaching changes what the account or set may post: UPDATE on the control, with the target in the document.
  // ... and UPDATE on the account or set it limits: a control decides what that account may post.
  attachVelocityControl: (_, args, ctx) => {
    guard(ctx, 'UPDATE', VC, {
      ...velocity.getVelocityControl(deps(ctx), args.velocityControlId),
      accountId: args.accountId,
      journalId: args.journalId ?? null,
      params: args.params ?? null,
    });
    guardAccountOrSet(ctx, args.accountId);
    return velocity.attachVelocityControl(deps(ctx), args as Parameters<typeof velocity.attachVelocityControl>[1]);
  },
  detachVelocityControl: (_, { velocityControlId, accountId }, ctx) => {
    guard(ctx, 'UPDATE', VC, { ...velocity.getVelocityControl(deps(ctx), velocityControlId), accountId });
    guardAccountOrSet(ctx, accountId);
    return velocity.detachVelocityControl(deps(ctx), { velocityControlId, accountId });
  },
};

export const velocityResolvers = {
  Query: query,
  Mutation: mutation,
  VelocityControl: {
    limits: (c: velocity.VelocityControl, _: Args, ctx: RequestContext) =>
      velocity.limitsOfControl(deps(ctx), c.velocityControlId).map((l) => guard(ctx, 'SELECT', VL, l)),
  },
  VelocityAttachment: {
    velocityControl: (a: velocity.Attachment, _: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', VC, velocity.getVelocityControl(deps(ctx), a.velocityControlId)),
  },
  Account: {
    velocity: (a: Account, args: Args, ctx: RequestContext) => velocityOf(ctx, a.accountId, args),
    controls: (a: Account, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, VC, velocity.attachedControls(deps(ctx), a.accountId, first, after)),
  },
  AccountSet: {
    velocity: (s: AccountSet, args: Args, ctx: RequestContext) =>
      velocityOf(ctx, s.accountSetId, { ...args, journalId: s.journalId }),
    controls: (s: AccountSet, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, VC, velocity.attachedControls(deps(ctx), s.accountSetId, first, after)),
  },
};
