import type { Engine } from '../engine.js';
import type { FormattedResult } from '../graphql/executor.js';

/**
 * Where an MCP server sends its GraphQL requests, as the client it serves. Every MCP request is
 * one or more GraphQL requests through the public API, so tools/call is invokeAction under the
 * same policies, recorded like any other call: there is no side door.
 */
export interface McpBackend {
  graphql(query: string, variables: Record<string, unknown>, signal?: AbortSignal): Promise<FormattedResult>;
  /**
   * The longest `waitMs` a long-poll query sent through this backend should ask for: the engine's
   * executionWaitMsMax in-process; for a remote server, less than the request's own timeout.
   */
  readonly waitMsMax: number;
}

/** The client is `principal` (stdio in-process) or the holder of `apiKey` (HTTP), re-checked on every request. */
export function engineBackend(
  engine: Pick<Engine, 'graphqlAsync' | 'limits'>,
  identity: { principal: string } | { apiKey: string },
): McpBackend {
  return {
    // graphqlAsync: a long-poll (`execution(waitMs:)`) waits, outside any transaction.
    graphql: (query, variables, signal) =>
      engine.graphqlAsync(query, variables, { ...identity, transport: 'mcp', ...(signal ? { signal } : {}) }),
    waitMsMax: engine.limits.executionWaitMsMax,
  };
}

/**
 * A running Tally's /graphql with an API key (`tally mcp --server URL --key KEY`): the remote server
 * authenticates and authorizes every request; the `tally-transport: mcp` header asks it to record
 * the invoked executions as MCP calls.
 */
export function remoteBackend(server: string, apiKey: string, timeoutMs: number): McpBackend {
  const url = new URL('/graphql', server).toString();
  return {
    // The server's own bound is its executionWaitMsMax (DEFAULT 30 s): ask for less than this request's timeout.
    waitMsMax: Math.max(1000, Math.min(25_000, timeoutMs - 5000)),
    graphql: async (query, variables, signal) => {
      let response: Response;
      try {
        response = await fetch(url, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            accept: 'application/graphql-response+json, application/json',
            authorization: `Bearer ${apiKey}`,
            'tally-transport': 'mcp',
          },
          body: JSON.stringify({ query, variables }),
          signal: signal ? AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]) : AbortSignal.timeout(timeoutMs),
        });
      } catch (error) {
        const code = (error as Error).name === 'TimeoutError' ? 'TIMEOUT' : 'UNAVAILABLE';
        return {
          errors: [
            {
              message: `${url}: ${(error as Error).message}`,
              extensions: { code, hint: 'Check that the server runs and --server is its URL.' },
            },
          ],
        };
      }
      try {
        return (await response.json()) as FormattedResult;
      } catch {
        return {
          errors: [
            {
              message: `${url} answered ${response.status} without a GraphQL response`,
              extensions: { code: 'BAD_RESPONSE' },
            },
          ],
        };
      }
    },
  };
}
