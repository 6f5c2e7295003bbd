import type { Engine } from '../../engine.js';
import { EngineError, quote } from '../../errors.js';
import type { Logger } from '../../log.js';
import { jsonTextTooDeep, McpHttp, sendJsonRpcError } from '../../mcp/http.js';
import { authenticate, sendUnauthenticated } from '../auth.js';
import { readBody, sendBodyRefused } from '../body.js';
import type { Runtime } from '../../runtime/runtime.js';
import { sendErrors } from '../reply.js';
import type { Exchange } from '../trace.js';

export interface McpRouteOptions {
  /** Where a failed session is reported (as the server's `logger`, else its `log`, else stderr). */
  logger?: Logger | undefined;
  log?: ((line: string) => void) | undefined;
  allowedOrigins?: readonly string[] | undefined;
  graphqlTool?: boolean;
}

/**
 * The server's MCP sessions. Their requests take the same way as /graphql's (Runtime.run, through
 * graphqlAsync), as the client of their key.
 */
export function createMcpHttp(runtime: Runtime, options: McpRouteOptions): McpHttp {
  const logError = (error: unknown) =>
    options.logger
      ? options.logger.error(
          { event: 'internal', error: error instanceof Error ? (error.stack ?? error.message) : String(error) },
          'mcp session failed',
        )
      : (options.log ?? console.error)(
          `tally: mcp session failed: ${error instanceof Error ? error.message : String(error)}`,
        );
  return new McpHttp(runtime, {
    logError,
    ...(options.allowedOrigins ? { allowedOrigins: options.allowedOrigins } : {}),
    graphqlTool: options.graphqlTool === true,
  });
}

/**
 * MCP (Streamable HTTP) at /mcp: the Origin check the specification asks for (403), the same
 * Bearer key as /graphql (401 with WWW-Authenticate), the body read within requestBodyBytesMax,
 * then the session's transport (see McpHttp).
 */
export async function serveMcp(engine: Engine, mcp: McpHttp, exchange: Exchange): Promise<void> {
  const { req, res } = exchange;
  const origin = req.headers.origin;
  if (!mcp.originAllowed(origin)) {
    req.resume();
    return sendErrors(exchange, 403, 'application/json', [
      new EngineError('ACCESS_DENIED', `origin ${quote(origin)} may not call /mcp`, {
        hint: 'Call /mcp from a local client, or list the origin in mcpAllowedOrigins.',
      }),
    ]);
  }
  const client = authenticate(engine, req.headers.authorization);
  if (client instanceof EngineError) {
    req.resume();
    // A session opened with a key since rotated or deleted is closed: it holds a slot no longer usable.
    mcp.refused(req);
    return sendUnauthenticated(exchange, 'application/json', client);
  }
  exchange.trace.principal = client.principal;
  let body: unknown;
  if (req.method === 'POST') {
    const text = await readBody(req, engine.limits.requestBodyBytesMax);
    if (text instanceof EngineError) return sendBodyRefused(exchange, 'application/json', text);
    // Checked on the text: a body nested too deep is refused before JSON.parse ever builds it.
    if (jsonTextTooDeep(text, mcp.bodyDepthMax)) {
      return sendJsonRpcError(
        res,
        400,
        -32600,
        `the body is nested more than ${mcp.bodyDepthMax} levels deep (jsonDepthMax ${engine.limits.jsonDepthMax} for a tool's arguments, plus the JSON-RPC envelope)`,
      );
    }
    try {
      body = JSON.parse(text);
    } catch (error) {
      return sendJsonRpcError(res, 400, -32700, `Parse error: ${(error as Error).message}`);
    }
  }
  return mcp.handle(req, res, { apiKey: client.apiKey, principal: client.principal, body });
}
