import { createEngine, type Engine } from '../engine.js';

export interface GraphqlResponse {
  data?: Record<string, any> | null;
  errors?: Array<{ message: string; path?: ReadonlyArray<string | number>; extensions?: Record<string, unknown> }>;
}

/** Where the CLI sends GraphQL: a running server (with an API key) or a database file, in-process. */
export interface Target {
  describe: string;
  request(query: string, variables?: Record<string, unknown>): Promise<GraphqlResponse>;
  close(): Promise<void>;
}

export function serverTarget(url: string, apiKey: string | undefined): Target {
  return {
    describe: url,
    async request(query, variables) {
      const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/graphql-response+json, application/json' };
      if (apiKey) headers.authorization = `Bearer ${apiKey}`;
      let response: Response;
      try {
        response = await fetch(url, { method: 'POST', headers, body: JSON.stringify({ query, variables: variables ?? {} }) });
      } catch (error) {
        return { errors: [{ message: `cannot reach ${url}: ${(error as Error).message}`, extensions: { code: 'UNAVAILABLE' } }] };
      }
      try {
        return (await response.json()) as GraphqlResponse;
      } catch {
        return { errors: [{ message: `${url} answered HTTP ${response.status} without a GraphQL body`, extensions: { code: 'BAD_RESPONSE' } }] };
      }
    },
    async close() {},
  };
}

export async function databaseTarget(path: string): Promise<Target & { engine: Engine }> {
  const engine = await createEngine({ path });
  return {
    engine,
    describe: path,
    async request(query, variables) {
      return engine.graphql(query, variables ?? null) as GraphqlResponse;
    },
    async close() {
      engine.close();
    },
  };
}
