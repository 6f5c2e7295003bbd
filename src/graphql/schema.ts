import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { makeExecutableSchema } from '@graphql-tools/schema';
import type { GraphQLSchema } from 'graphql';
import { actionResolvers } from './resolvers/actions.js';
import { authResolvers } from './resolvers/auth.js';
import { ledgerResolvers } from './resolvers/ledger.js';
import { jsonScalar, scalars } from './scalars.js';

export const SCHEMA_PATH = fileURLToPath(new URL('../../schema.graphql', import.meta.url));

/** The executable schema: schema.graphql (the public contract) plus the resolvers of each area. */
export function buildSchema(limits: { jsonDepthMax: number }): GraphQLSchema {
  return makeExecutableSchema({
    typeDefs: readFileSync(SCHEMA_PATH, 'utf8'),
    resolvers: [{ ...scalars, JSON: jsonScalar(limits.jsonDepthMax) }, ledgerResolvers, actionResolvers, authResolvers],
    resolverValidationOptions: { requireResolversToMatchSchema: 'error' },
  });
}
