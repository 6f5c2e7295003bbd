import { CLIENT_INFO_CHARS_MAX } from '../limits.js';
import { createHash, randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import type { Engine } from '../engine.js';
import { engineBackend, type McpBackend } from './backend.js';
import { createMcpServer, type McpServerOptions, readToolList } from './server.js';

/** One open MCP session: bound to the key that opened it, closed when idle for mcpSessionIdleMs. */
interface Session {
  keyHash: string;
  principal: string;
  server: Server;
  transport: StreamableHTTPServerTransport;
  /** Whether the key that opened the session still authenticates (rotated or deleted: it does not). */
  authenticates(): boolean;
  /** The tool list as this session's client last saw it changed (null: not read yet). */
  lastList: string | null;
  idle?: NodeJS.Timeout;
}

/**
 * The sessions opened with one key: they see the same tools, so one read of the list serves them
 * all, at most once every LIST_CHECK_INTERVAL_MS however many changes are reported.
 */
interface KeyGroup {
  ids: Set<string>;
  backend: McpBackend;
  authenticates(): boolean;
  last: string | null;
  lastCheck: number;
  running: boolean;
  again: boolean;
  timer?: NodeJS.Timeout;
}

/** At most one read of a key's tool list per this many ms (changes in between coalesce into it). */
const LIST_CHECK_INTERVAL_MS = 1000;

/**
 * Levels a JSON-RPC body adds around a tool's arguments (batch array, message, params): the
 * arguments themselves may be jsonDepthMax deep, as in GraphQL's JSON inputs.
 */
const MCP_ENVELOPE_DEPTH = 3;

export interface McpHttpOptions {
  /**
   * Origins a browser-based client may call from. The specification asks HTTP servers to check
   * Origin (DNS rebinding): a request with an Origin header not in this list gets 403. Default:
   * loopback origins only (http(s)://localhost, 127.0.0.1, [::1], any port).
   */
  allowedOrigins?: readonly string[];
  logError: (error: unknown) => void;
  /** Offer the native graphql tool (the operator's mcp.graphqlTool; default false). */
  graphqlTool?: boolean;
}

/**
 * What MCP sessions need of the engine: its limits and key check, and where their GraphQL requests
 * run (the engine itself, or the server's writer thread) with its tool-change events.
 */
export type McpEngine = Pick<Engine, 'limits' | 'authenticate' | 'onActionsChanged' | 'graphqlAsync'>;

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
  private readonly groups = new Map<string, KeyGroup>();
  /** The principals of sessions being opened (initialize received, session not yet registered). */
  private readonly opening: string[] = [];

  constructor(
    private readonly engine: McpEngine,
    private readonly options: McpHttpOptions,
  ) {
    engine.onActionsChanged(() => {
      for (const group of this.groups.values()) this.schedule(group);
    });
  }

  /** How deep a /mcp body may nest: jsonDepthMax for a tool's arguments, plus the JSON-RPC envelope. */
  get bodyDepthMax(): number {
    return this.engine.limits.jsonDepthMax + MCP_ENVELOPE_DEPTH;
  }

  /**
   * A request whose key did not authenticate: when it names a session that key opened (the key was
   * rotated or its client deleted), the session is closed and its slot freed.
   */
  refused(req: IncomingMessage): void {
    const sessionId = header(req, 'mcp-session-id');
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header(req, 'authorization') ?? '');
    if (sessionId === undefined || !match) return;
    const session = this.sessions.get(sessionId);
    if (session && session.keyHash === hashKey(match[1]!) && !session.authenticates()) void this.close(sessionId);
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
      return (
        (url.protocol === 'http:' || url.protocol === 'https:') &&
        ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname)
      );
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
    if (!session || session.keyHash !== hashKey(request.apiKey))
      return sendJsonRpcError(res, 404, -32001, 'session not found: initialize a new one');
    this.touch(sessionId, session);
    await session.transport.handleRequest(req, res, request.body);
  }

  private async open(req: IncomingMessage, res: ServerResponse, request: McpRequest): Promise<void> {
    const limits = this.engine.limits;
    // Only what is read from them: the closures below outlive the request and must not keep its body.
    const { apiKey, principal } = request;
    const body = sanitizeInitialize(request.body as InitializeMessage);
    // Sessions whose key no longer authenticates (rotated, client deleted) hold no slot a live key needs.
    if (this.sessions.size + this.opening.length >= limits.mcpSessionsMax) this.dropStale(() => true);
    else this.dropStale((s) => s.principal === principal);
    // Sessions being opened count too: concurrent initialize requests cannot overshoot the bounds.
    const open = this.sessions.size + this.opening.length;
    if (open >= limits.mcpSessionsMax) {
      res.setHeader('retry-after', '60');
      return sendJsonRpcError(
        res,
        503,
        -32000,
        `${open} MCP sessions are open; mcpSessionsMax is ${limits.mcpSessionsMax}. Close one (DELETE /mcp) or wait for an idle one to expire.`,
      );
    }
    const own =
      [...this.sessions.values()].filter((s) => s.principal === principal).length +
      this.opening.filter((p) => p === principal).length;
    if (own >= limits.mcpSessionsPerClientMax) {
      res.setHeader('retry-after', '60');
      return sendJsonRpcError(
        res,
        503,
        -32000,
        `client ${principal} has ${own} MCP sessions open; mcpSessionsPerClientMax is ${limits.mcpSessionsPerClientMax}. Close one (DELETE /mcp) or wait for an idle one to expire.`,
      );
    }
    const backend = engineBackend(this.engine, { apiKey });
    const server = createMcpServer(backend, this.toolOptions);
    const authenticates = (): boolean => this.engine.authenticate(apiKey) === principal;
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        const keyHash = hashKey(apiKey);
        let group = this.groups.get(keyHash);
        if (!group) {
          group = { ids: new Set(), backend, authenticates, last: null, lastCheck: 0, running: false, again: false };
          this.groups.set(keyHash, group);
        }
        const session: Session = { keyHash, principal, server, transport, authenticates, lastList: group.last };
        group.ids.add(id);
        this.sessions.set(id, session);
        this.touch(id, session);
        // The list as it is now, to compare later changes with (one read for a new key, none for a known one).
        if (group.last === null) this.schedule(group);
      },
      onsessionclosed: (id) => this.forget(id),
    });
    transport.onclose = () => {
      if (transport.sessionId) this.forget(transport.sessionId);
    };
    this.opening.push(principal);
    try {
      await server.connect(transport);
      await transport.handleRequest(req, res, body);
    } finally {
      this.opening.splice(this.opening.indexOf(principal), 1);
    }
    // An initialize the transport refused opened no session: let its server go.
    if (!transport.sessionId || !this.sessions.has(transport.sessionId))
      await server.close().catch(this.options.logError);
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
    const group = this.groups.get(session.keyHash);
    group?.ids.delete(id);
    if (group && group.ids.size === 0) {
      clearTimeout(group.timer);
      this.groups.delete(session.keyHash);
    }
  }

  private get toolOptions(): McpServerOptions {
    return {
      toolsPageSize: this.engine.limits.mcpToolsPageSize,
      callWaitMs: this.engine.limits.mcpCallWaitMs,
      graphqlTool: this.options.graphqlTool === true,
    };
  }

  /** Close the sessions (among those `which` picks) whose key no longer authenticates. */
  private dropStale(which: (session: Session) => boolean): void {
    for (const [id, session] of [...this.sessions]) {
      if (which(session) && !session.authenticates()) void this.close(id);
    }
  }

  /** A check of the group's list soon: at once when none ran in the last LIST_CHECK_INTERVAL_MS, else then. */
  private schedule(group: KeyGroup): void {
    if (group.running) {
      group.again = true;
      return;
    }
    if (group.timer || group.ids.size === 0) return;
    // Never inside the request that reported the change: the read is a request of its own.
    group.timer = setTimeout(
      () => {
        group.timer = undefined;
        void this.check(group);
      },
      Math.max(0, group.lastCheck + LIST_CHECK_INTERVAL_MS - Date.now()),
    );
    group.timer.unref();
  }

  /**
   * Read the group's tool list once and send notifications/tools/list_changed to each of its
   * sessions whose client last saw another one. A key that no longer authenticates closes them all.
   */
  private async check(group: KeyGroup): Promise<void> {
    group.running = true;
    group.again = false;
    group.lastCheck = Date.now();
    try {
      if (!group.authenticates()) return this.closeGroup(group);
      const now = await readToolList(group.backend, this.toolOptions);
      group.last = now;
      for (const id of group.ids) {
        const session = this.sessions.get(id);
        if (!session) continue;
        if (session.lastList !== null && session.lastList !== now)
          session.server.sendToolListChanged().catch(this.options.logError);
        session.lastList = now;
      }
    } catch (error) {
      if (!group.authenticates()) this.closeGroup(group);
      else this.options.logError(error);
    } finally {
      group.running = false;
      if (group.again) this.schedule(group);
    }
  }

  private closeGroup(group: KeyGroup): void {
    for (const id of [...group.ids]) void this.close(id);
  }

  private async close(id: string): Promise<void> {
    const session = this.sessions.get(id);
    this.forget(id);
    await session?.server.close().catch(this.options.logError);
  }

  /** Close every session (the HTTP server is closing). */
  async closeAll(): Promise<void> {
    for (const group of this.groups.values()) clearTimeout(group.timer);
    await Promise.all([...this.sessions.keys()].map((id) => this.close(id)));
  }
}

type InitializeMessage = { jsonrpc: '2.0'; id: string | number; method: 'initialize'; params: Record<string, unknown> };

/**
 * An initialize with only the fields the server reads, rebuilt: the SDK keeps the client's
 * capabilities and clientInfo for the session's life, so nothing else of the body (experimental
 * capabilities, unknown keys, _meta) may stay, and clientInfo's strings are bounded.
 */
export function sanitizeInitialize(message: InitializeMessage): InitializeMessage {
  const params = message.params;
  const text = (value: unknown): string => (typeof value === 'string' ? value.slice(0, CLIENT_INFO_CHARS_MAX) : '');
  const object = (value: unknown): Record<string, unknown> | undefined =>
    value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  const info = object(params.clientInfo) ?? {};
  const clientInfo: Record<string, string> = { name: text(info.name), version: text(info.version) };
  if (typeof info.title === 'string') clientInfo.title = text(info.title);
  const given = object(params.capabilities) ?? {};
  const capabilities: Record<string, Record<string, unknown>> = {};
  const roots = object(given.roots);
  if (roots) capabilities.roots = typeof roots.listChanged === 'boolean' ? { listChanged: roots.listChanged } : {};
  for (const [name, flags] of [
    ['sampling', ['context', 'tools']],
    ['elicitation', ['form', 'url']],
  ] as const) {
    const capability = object(given[name]);
    if (!capability) continue;
    capabilities[name] = {};
    for (const flag of flags) if (object(capability[flag])) capabilities[name][flag] = {};
  }
  return {
    jsonrpc: '2.0',
    id: message.id,
    method: 'initialize',
    params: { protocolVersion: text(params.protocolVersion), capabilities, clientInfo },
  };
}

/**
 * Whether JSON text nests deeper than `depthMax` (arrays and objects), read without parsing it:
 * a deep body is refused before it is ever built.
 */
export function jsonTextTooDeep(text: string, depthMax: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: the next character is escaped
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > depthMax) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
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
