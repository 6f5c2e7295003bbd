import * as clients from '../../auth/clients.js';
import { EngineError } from '../../errors.js';
import { checkNotModelWritten } from '../../execution/call-rules.js';
import type { RequestContext } from '../context.js';
import { guard, visible } from './guard.js';

type Args = Record<string, any>;
const C = 'auth.Client';

export const authResolvers = {
  Query: { auth: () => ({}) },
  Mutation: { auth: () => ({}) },
  AuthQuery: {
    client: (_: unknown, { principal }: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', C, clients.getClient(ctx.clients, principal)),
    clients: (_: unknown, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, C, clients.listClients(ctx.clients, first, after)),
    whoami: (_: unknown, __: Args, ctx: RequestContext) => ({
      principal: ctx.principal,
      stack: ctx.authority.stack.map((l) => l.name),
    }),
  },
  AuthMutation: {
    // A client can grant only what its whole stack holds (src/policy/grant.ts).
    createClient: (_: unknown, { input }: Args, ctx: RequestContext) => {
      checkNotModelWritten(ctx.frame, 'createClient');
      const created = clients.createClient(ctx.clients, guard(ctx, 'INSERT', C, input), ctx.authority.stack);
      logKeyEvent(ctx, 'created', created.client.principal);
      return created;
    },
    updateClient: (_: unknown, { principal, input }: Args, ctx: RequestContext) => {
      guard(ctx, 'UPDATE', C, clients.getClient(ctx.clients, principal));
      if (input?.rotateKey === true) checkNotModelWritten(ctx.frame, `updateClient(rotateKey) of ${principal}`);
      if (input?.policies != null && principal === ctx.principal) {
        // A client may be allowed to update its own record (its name, its key), never to widen
        // what it may do: another client must change its policies.
        throw new EngineError('ACCESS_DENIED', `client ${principal} cannot change its own policies`, {
          hint: 'Have another client with UPDATE on auth.Client (the admin) change them.',
        });
      }
      const updated = clients.updateClient(ctx.clients, principal, input, {
        principal: ctx.principal,
        stack: ctx.authority.stack,
      });
      if (input?.rotateKey === true) logKeyEvent(ctx, 'rotated', principal);
      return updated;
    },
    deleteClient: (_: unknown, { principal }: Args, ctx: RequestContext) => {
      guard(ctx, 'DELETE', C, clients.getClient(ctx.clients, principal));
      const admin = principal === clients.ADMIN_PRINCIPAL;
      if (admin || principal === ctx.principal) {
        throw new EngineError(
          'BAD_REQUEST',
          `client ${principal} cannot be deleted${admin ? ' (it is the admin)' : ' by itself'}`,
          {
            hint: admin ? "Rotate the admin's key instead (updateClient rotateKey)." : 'Have another client delete it.',
          },
        );
      }
      return clients.deleteClient(ctx.clients, principal);
    },
  },
};

/** One line per API key made or replaced, once the request commits (never the key itself). */
function logKeyEvent(ctx: RequestContext, change: 'created' | 'rotated', principal: string): void {
  const fields = { event: 'key', change, client: principal, by: ctx.principal };
  ctx.services.transactions.afterCommit(() => ctx.services.log.info(fields, `API key ${change}`));
}
