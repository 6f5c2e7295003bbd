import * as clients from '../../auth/clients.js';
import type { RequestContext } from '../context.js';
import { guard, visible } from './guard.js';

type Args = Record<string, any>;
const C = 'auth.Client';

export const authResolvers = {
  Query: { auth: () => ({}) },
  Mutation: { auth: () => ({}) },
  AuthQuery: {
    client: (_: unknown, { principal }: Args, ctx: RequestContext) => guard(ctx, 'SELECT', C, clients.getClient(ctx.clients, principal)),
    clients: (_: unknown, { first, after }: Args, ctx: RequestContext) => visible(ctx, C, clients.listClients(ctx.clients, first, after)),
    whoami: (_: unknown, __: Args, ctx: RequestContext) => ({ principal: ctx.principal, stack: ctx.authority.stack.map((l) => l.name) }),
  },
  AuthMutation: {
    createClient: (_: unknown, { input }: Args, ctx: RequestContext) => clients.createClient(ctx.clients, guard(ctx, 'INSERT', C, input)),
    updateClient: (_: unknown, { principal, input }: Args, ctx: RequestContext) => {
      guard(ctx, 'UPDATE', C, clients.getClient(ctx.clients, principal));
      return clients.updateClient(ctx.clients, principal, input);
    },
    deleteClient: (_: unknown, { principal }: Args, ctx: RequestContext) => {
      guard(ctx, 'DELETE', C, clients.getClient(ctx.clients, principal));
      return clients.deleteClient(ctx.clients, principal);
    },
  },
};
