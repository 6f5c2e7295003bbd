import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { makeExecutableSchema } from '@graphql-tools/schema';
import { type GraphQLFieldResolver, type GraphQLSchema, isObjectType } from 'graphql';
import { overrun } from '../budgets.js';
import type { RequestContext } from './context.js';
import { actionResolvers } from './resolvers/actions.js';
import { authResolvers } from './resolvers/auth.js';
import { calculationResolvers } from './resolvers/calculations.js';
import { deploymentResolvers } from './resolvers/deployments.js';
import { ledgerResolvers } from './resolvers/ledger.js';
import { skillResolvers } from './resolvers/skills.js';
import { viewResolvers } from './resolvers/views.js';
import { velocityResolvers } from './resolvers/velocity.js';
import { jsonScalar, scalars } from './scalars.js';

export const SCHEMA_PATH = fileURLToPath(new URL('../../schema.graphql', import.meta.url));

/** The executable schema: schema.graphql (the public contract) plus the resolvers of each area. */
export function buildSchema(limits: { jsonDepthMax: number; requestDeadlineMs: number }): GraphQLSchema {
  const schema = makeExecutableSchema({
    typeDefs: readFileSync(SCHEMA_PATH, 'utf8'),
    resolvers: [
      { ...scalars, JSON: jsonScalar(limits.jsonDepthMax) },
      ledgerResolvers,
      actionResolvers,
      skillResolvers,
      authResolvers,
      velocityResolvers,
      calculationResolvers,
      viewResolvers,
      deploymentResolvers,
    ],
    resolverValidationOptions: { requireResolversToMatchSchema: 'error' },
  });
  checkDeadlineInResolvers(schema, limits.requestDeadlineMs);
  return schema;
}

/**
 * Every resolver that does work (reads a row, writes, runs a tool) first checks the request's
 * deadline: the cost limit bounds what a request may ask for before it runs, and this bounds how
 * long it may take whatever each row costs, so no request holds the process (and, for a mutation,
 * the write lock) past requestDeadlineMs. The first resolver past it records the error on the
 * caller, and the engine answers the request with that one error (a mutation rolls back).
 */
function checkDeadlineInResolvers(schema: GraphQLSchema, deadlineMs: number): void {
  for (const type of Object.values(schema.getTypeMap())) {
    if (!isObjectType(type) || type.name.startsWith('__')) continue;
    for (const field of Object.values(type.getFields())) {
      const resolve = field.resolve as GraphQLFieldResolver<unknown, RequestContext> | undefined;
      if (!resolve) continue;
      field.resolve = (source, args, ctx: RequestContext, info) => {
        const caller = ctx.caller;
        if (caller.deadline !== undefined && Date.now() > caller.deadline) {
          caller.overran ??= overrun(
            caller.budget ?? { name: 'requestDeadlineMs', ms: deadlineMs },
            `${info.parentType.name}.${info.fieldName}`,
          );
          throw caller.overran;
        }
        return resolve(source, args, ctx, info);
      };
    }
  }
}
