import * as clients from '../../auth/clients.js';
import { EngineError } from '../../errors.js';
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
    // A client can grant only what its whole stack holds (src/policy/grant.ts).
    createClient: (_: unknown, { input }: Args, ctx: RequestContext) => clients.createClient(ctx.clients, guard(ctx, 'INSERT', C, input), ctx.authority.stack),
    updateClient: (_: unknown, { principal, input }: Args, ctx: RequestContext) => {
      guard(ctx, 'UPDATE', C, clients.getClient(ctx.clients, principal));
      if (input?.policies != null && principal === ctx.principal) {
        // A client may be allowed to update its own record (its name, its key), never to widen
        // what it may do: another client must change its policies.
        throw new EngineError('ACCESS_DENIED', `client ${principal} cannot change its own policies`, { hint: 'Have another client with UPDATE on auth.Client (the admin) change them.' });
      }
      return clients.updateClient(ctx.clients, principal, input, { principal: ctx.principal, stack: ctx.authority.stack });
    },
    deleteClient: (_: unknown, { principal }: Args, ctx: RequestContext) => {
      guard(ctx, 'DELETE', C, clients.getClient(ctx.clients, principal));
      const admin = principal === clients.ADMIN_PRINCIPAL;
      if (admin || principal === ctx.principal) {
        throw new EngineError('BAD_REQUEST', `client ${principal} cannot be deleted${admin ? ' (it is the admin)' : ' by itself'}`, {
          hint: admin ? "Rotate the admin's key instead (updateClient rotateKey)." : 'Have another client delete it.',
        });
      }
      return clients.deleteClient(ctx.clients, principal);
    },
  },
};
