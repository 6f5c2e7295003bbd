import type { Engine } from '../engine.js';
import { redact } from '../storage/pg/connection.js';

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

/** How long the CLI waits for a server's answer (a deploy is one request). */
const SERVER_TIMEOUT_MS = 60_000;

export function serverTarget(url: string, apiKey: string | undefined, timeoutMs = SERVER_TIMEOUT_MS): Target {
  return {
    describe: url,
    async request(query, variables) {
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        accept: 'application/graphql-response+json, application/json',
      };
      if (apiKey) headers.authorization = `Bearer ${apiKey}`;
      let response: Response;
      try {
        response = await fetch(url, {
          method: 'POST',
          headers,
          body: JSON.stringify({ query, variables: variables ?? {} }),
          signal: AbortSignal.timeout(timeoutMs),
        });
      } catch (error) {
        const e = error as Error & { cause?: { code?: string; message?: string } };
        if (e.name === 'TimeoutError') {
          // The request was sent: the server may have run it.
          return {
            errors: [
              {
                message: `${url} gave no answer within ${timeoutMs / 1000} s`,
                extensions: { code: 'TIMEOUT', hint: 'The server may still have run the request.' },
              },
            ],
          };
        }
        const why = e.cause?.code ?? e.cause?.message ?? e.message;
        return {
          errors: [
            {
              message: `cannot reach ${url}: ${why}`,
              extensions: {
                code: 'UNAVAILABLE',
                hint: 'Check that the server runs and the URL (tally.json "server" or --server).',
              },
            },
          ],
        };
      }
      let body: unknown;
      try {
        body = await response.json();
      } catch {
        return {
          errors: [
            {
              message: `${url} answered HTTP ${response.status} without a GraphQL body`,
              extensions: { code: 'BAD_RESPONSE' },
            },
          ],
        };
      }
      if (body === null || typeof body !== 'object' || !('data' in body || 'errors' in body)) {
        return {
          errors: [
            {
              message: `${url} answered HTTP ${response.status} with JSON that is not a GraphQL response`,
              extensions: { code: 'BAD_RESPONSE' },
            },
          ],
        };
      }
      return body as GraphqlResponse;
    },
    async close() {},
  };
}

export async function databaseTarget(path: string): Promise<Target & { engine: Engine }> {
  // Loaded here, not above: a CLI command that talks to a server never needs the engine.
  const { createEngine } = await import('../engine.js');
  const { readServerConfig } = await import('../server/config.js');
  const config = readServerConfig();
  const engine = await createEngine({
    path,
    providers: config.providers,
    integrations: config.integrations,
    limits: config.limits,
  });
  const { Runtime } = await import('../runtime/runtime.js');
  // The engine's own authority, through the runtime every door takes (the write queue's group commit).
  const runtime = new Runtime(engine);
  return {
    engine,
    // A PostgreSQL URL is named without its password.
    describe: redact(path),
    async request(query, variables) {
      return (await runtime.graphqlAsync(query, variables ?? null)) as GraphqlResponse;
    },
    async close() {
      engine.close();
    },
  };
}
