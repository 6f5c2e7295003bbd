import { createHash, randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import type { Engine } from '../engine.js';
import { engineBackend } from './backend.js';
import { createMcpServer, watchToolList } from './server.js';

/** One open MCP session: bound to the key that opened it, closed when idle for mcpSessionIdleMs. */
interface Session {
  keyHash: string;
  principal: string;
  server: Server;
  transport: StreamableHTTPServerTransport;
  watcher: { changed(): void };
  idle?: NodeJS.Timeout;
}

export interface McpHttpOptions {
  /**
   * Origins a browser-based client may call from. The specification asks HTTP servers to check
   * Origin (DNS rebinding): a request with an Origin header not in this list gets 403. Default:
   * loopback origins only (http(s)://localhost, 127.0.0.1, [::1], any port).
   */
  allowedOrigins?: readonly string[];
  logError: (error: unknown) => void;
}

export interface McpRequest {
  apiKey: string;
  principal: string;
  /** The parsed JSON body of a POST (the caller read it within requestBodyBytesMax). */
  body?: unknown;
}

/**
 * MCP over Streamable HTTP at /mcp. Each session (Mcp-Session-Id) has its own MCP server whose
 * GraphQL requests carry the key that opened it, so every request is authorized as that client
 * again (a revoked key fails at once); a session id presented with another key is unknown (404).
 */
export class McpHttp {
  private readonly sessions = new Map<string, Session>();
  /** The principals of sessions being opened (initialize received, session not yet registered). */
  private readonly opening: string[] = [];

  constructor(
    private readonly engine: Engine,
    private readonly options: McpHttpOptions,
  ) {
    engine.onActionsChanged(() => {
      for (const session of this.sessions.values()) session.watcher.changed();
    });
  }

  get sessionCount(): number {
    return this.sessions.size;
  }

  /** Origin absent (not a browser) or allowed; otherwise the request gets 403 before anything else. */
  originAllowed(origin: string | undefined): boolean {
    if (origin === undefined) return true;
    if (this.options.allowedOrigins) return this.options.allowedOrigins.includes(origin);
    try {
      const url = new URL(origin);
      return (url.protocol === 'http:' || url.protocol === 'https:') && ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname);
    } catch {
      return false;
    }
  }

  async handle(req: IncomingMessage, res: ServerResponse, request: McpRequest): Promise<void> {
    const sessionId = header(req, 'mcp-session-id');
    if (sessionId === undefined) {
      if (req.method === 'POST' && isInitializeRequest(request.body)) return this.open(req, res, request);
      return sendJsonRpcError(res, 400, -32000, 'no Mcp-Session-Id: send initialize first (POST without a session id)');
    }
    const session = this.sessions.get(sessionId);
    // Another client's session is as unknown as one that never existed: nothing tells them apart.
    if (!session || session.keyHash !== hashKey(request.apiKey)) return sendJsonRpcError(res, 404, -32001, 'session not found: initialize a new one');
    this.touch(sessionId, session);
    await session.transport.handleRequest(req, res, request.body);
  }

  private async open(req: IncomingMessage, res: ServerResponse, request: McpRequest): Promise<void> {
    const limits = this.engine.limits;
    // Sessions being opened count too: concurrent initialize requests cannot overshoot the bounds.
    const open = this.sessions.size + this.opening.length;
    if (open >= limits.mcpSessionsMax) {
      res.setHeader('retry-after', '60');
      return sendJsonRpcError(res, 503, -32000, `${open} MCP sessions are open; mcpSessionsMax is ${limits.mcpSessionsMax}. Close one (DELETE /mcp) or wait for an idle one to expire.`);
    }
    const own = [...this.sessions.values()].filter((s) => s.principal === request.principal).length + this.opening.filter((p) => p === request.principal).length;
    if (own >= limits.mcpSessionsPerClientMax) {
      res.setHeader('retry-after', '60');
      return sendJsonRpcError(res, 503, -32000, `client ${request.principal} has ${own} MCP sessions open; mcpSessionsPerClientMax is ${limits.mcpSessionsPerClientMax}. Close one (DELETE /mcp) or wait for an idle one to expire.`);
    }
    const backend = engineBackend(this.engine, { apiKey: request.apiKey });
    const options = { toolsPageSize: limits.mcpToolsPageSize };
    const server = createMcpServer(backend, options);
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        const session: Session = {
          keyHash: hashKey(request.apiKey),
          principal: request.principal,
          server,
          transport,
          watcher: watchToolList(server, backend, options, this.options.logError),
        };
        this.sessions.set(id, session);
        this.touch(id, session);
      },
      onsessionclosed: (id) => this.forget(id),
    });
    transport.onclose = () => {
      if (transport.sessionId) this.forget(transport.sessionId);
    };
    this.opening.push(request.principal);
    try {
      await server.connect(transport);
      await transport.handleRequest(req, res, request.body);
    } finally {
      this.opening.splice(this.opening.indexOf(request.principal), 1);
    }
    // An initialize the transport refused opened no session: let its server go.
    if (!transport.sessionId || !this.sessions.has(transport.sessionId)) await server.close().catch(this.options.logError);
  }

  private touch(id: string, session: Session): void {
    clearTimeout(session.idle);
    session.idle = setTimeout(() => void this.close(id), this.engine.limits.mcpSessionIdleMs);
    session.idle.unref();
  }

  private forget(id: string): void {
    const session = this.sessions.get(id);
    if (!session) return;
    clearTimeout(session.idle);
    this.sessions.delete(id);
  }

  private async close(id: string): Promise<void> {
    const session = this.sessions.get(id);
    this.forget(id);
    await session?.server.close().catch(this.options.logError);
  }

  /** Close every session (the HTTP server is closing). */
  async closeAll(): Promise<void> {
    await Promise.all([...this.sessions.keys()].map((id) => this.close(id)));
  }
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** Sessions keep a hash of the key, never the key (the key itself is in the session's backend). */
function hashKey(apiKey: string): string {
  return createHash('sha256').update(apiKey).digest('hex');
}

export function sendJsonRpcError(res: ServerResponse, status: number, code: number, message: string): void {
  const text = JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null });
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}
