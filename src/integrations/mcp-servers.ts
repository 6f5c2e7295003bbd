/**
 * Other MCP servers as tools (DESIGN §11): the operator's `mcpServers` block (parseMcpServers), one
 * lazily connected SDK client per server (McpServers), and the check an action of kind "mcp" passes
 * when it is created (checkMcpConfig).
 *
 * A call of an imported tool is an outbound call like an http tool's: never inside a database
 * transaction, one slot of the server's Limiter per call, its idempotency key sent in `_meta`, and
 * never sent to a tool that changed since it was imported (its fingerprint) nor sent a second time
 * when an earlier send's outcome is unknown, unless the tool says it is read-only or idempotent.
 * Credentials (header values, the stdio child's variables) are read from the server's environment
 * when a connection opens and are taken out of every message, detail, log line and output.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { DEFAULT_INHERITED_ENV_VARS, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { type CallToolResult, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { EngineError, quote } from '../errors.js';
import { type Logger, silentLogger } from '../log.js';
import { redact } from '../models/http.js';
import { HEADER_VALUE } from './config.js';
import { Limiter } from './limiter.js';
import {
  bad,
  IDEMPOTENCY_META_KEY,
  MCP_ERROR_TEXT_MAX,
  MCP_MESSAGE_BYTES_MAX,
  MCP_TOOL_PAGES_MAX,
  MCP_TOOLS_MAX,
  STDERR_TAIL_MAX,
} from './mcp-config.js';
import {
  boundedFetch,
  ConnectFailure,
  type Connection,
  cut,
  describe,
  integrationError,
  isTimeout,
  isUnavailable,
  LIST_TAG,
  type Listed,
  type McpCallExpectation,
  type McpToolInfo,
  mcpToolFingerprint,
  toolInfo,
  toolOutput,
  unavailable,
  within,
} from './mcp-wire.js';

export {
  IDEMPOTENCY_META_KEY,
  MCP_MESSAGE_BYTES_MAX,
  MCP_OUTPUT_BYTES_MAX,
  parseMcpServers,
} from './mcp-config.js';
export { type McpCallExpectation, type McpToolInfo, mcpToolFingerprint } from './mcp-wire.js';
import type { McpServerConfig, OutboundCall, SecretHeader } from './types.js';

// ---------------------------------------------------------------------------------------------
// The servers.

export class ServerEntry {
  readonly limiter: Limiter;
  connection: Connection | null = null;
  connecting: Promise<Connection> | null = null;
  /** Every credential value read for this server: taken out of every text that leaves. */
  readonly secrets = new Set<string>();
  /**
   * Stops the request that a bounded HTTP answer belongs to (its tools/call by idempotency key, or
   * "tools/list"): the SDK reports an SSE stream's failure to onerror only, so the request would
   * otherwise wait for its timeout.
   */
  readonly stops = new Map<string, Set<(error: EngineError) => void>>();

  constructor(readonly config: McpServerConfig) {
    this.limiter = new Limiter(`MCP server ${config.name}`, config.concurrency, config.perClientConcurrency);
  }

  /** The text with every credential of this server taken out. */
  redact(text: string): string {
    let out = text;
    for (const secret of this.secrets) out = redact(out, secret);
    return out;
  }

  stopOn(tag: string, stop: (error: EngineError) => void): () => void {
    let set = this.stops.get(tag);
    if (!set) this.stops.set(tag, (set = new Set()));
    set.add(stop);
    return () => {
      set.delete(stop);
      if (set.size === 0) this.stops.delete(tag);
    };
  }
}

const CLIENT_INFO = { name: 'tally', version: '0.1.0' };

/** The configured MCP servers, by name: one lazily connected client each, reconnected after a failure. */
export class McpServers {
  readonly #entries = new Map<string, ServerEntry>();
  #closed = false;

  static create(
    configs: McpServerConfig[],
    env: NodeJS.ProcessEnv = process.env,
    log: Logger = silentLogger,
  ): McpServers {
    return new McpServers(configs, env, log);
  }

  private constructor(
    configs: McpServerConfig[],
    private readonly env: NodeJS.ProcessEnv,
    private readonly log: Logger,
  ) {
    for (const config of configs) {
      if (this.#entries.has(config.name)) {
        throw bad(`MCP server ${quote(config.name)} is configured twice`, 'Give each server its own name.');
      }
      this.#entries.set(config.name, new ServerEntry(config));
    }
  }

  names(): string[] {
    return [...this.#entries.keys()];
  }

  has(name: string): boolean {
    return this.#entries.has(name);
  }

  /** The server's configuration; NOT_FOUND naming the configured servers. */
  get(name: string): McpServerConfig {
    return this.entry(name).config;
  }

  private entry(name: string): ServerEntry {
    const entry = this.#entries.get(name);
    if (entry === undefined) {
      const names = this.names();
      throw new EngineError('NOT_FOUND', `no MCP server named ${quote(name)}`, {
        hint:
          names.length === 0
            ? 'No MCP servers are configured: add an `mcpServers` block to the server configuration.'
            : `Configured MCP servers: ${names.map((n) => quote(n)).join(', ')}.`,
        details: { server: name, configured: names },
      });
    }
    return entry;
  }

  /**
   * The server's tools: the list kept since its last list_changed, else read now (always read now
   * from a server that does not send list_changed).
   */
  async listTools(name: string, signal?: AbortSignal): Promise<McpToolInfo[]> {
    const entry = this.entry(name);
    const stop = signal ?? new AbortController().signal;
    const deadline = Date.now() + entry.config.timeoutMs;
    let connection: Connection | null = null;
    try {
      connection = await this.connection(entry, stop, deadline);
      const { tools } = await this.tools(entry, connection, stop, deadline, !connection.listChanged);
      return [...tools.values()].map((listed) => listed.info);
    } catch (error) {
      throw this.failure(entry, connection, error, `listing the tools of MCP server ${quote(name)}`, stop);
    }
  }

  /**
   * Call `toolName` of `server` for an outbound call: authorized as INSERT on actions.Integration
   * of {kind: "mcp", name: server, tool}, then one slot of the server's Limiter for the call's principal; refused (INTEGRATION_ERROR, never sent) when the tool changed since import
   * or when an earlier send's outcome is unknown and the tool is neither read-only nor idempotent.
   * Returns the tool's structuredContent, else {content}.
   */
  async call(
    server: string,
    toolName: string,
    args: Record<string, unknown>,
    call: OutboundCall,
    expected: McpCallExpectation,
  ): Promise<unknown> {
    const entry = this.entry(server);
    // An outside call is an operation of its caller's: refused before it takes a slot or a connection.
    call.authorize({ kind: 'mcp', name: server, tool: toolName });
    const release = await entry.limiter.acquire(call.principal, call.signal, call.deadline);
    try {
      return await this.callHeld(entry, toolName, args, call, expected);
    } finally {
      release();
    }
  }

  private async callHeld(
    entry: ServerEntry,
    toolName: string,
    args: Record<string, unknown>,
    call: OutboundCall,
    expected: McpCallExpectation,
  ): Promise<unknown> {
    const server = entry.config.name;
    const what = `tool ${quote(toolName)} of MCP server ${quote(server)}`;
    const overflow = new AbortController();
    const unwatch = entry.stopOn(call.idempotencyKey, (error) => overflow.abort(error));
    const signal = AbortSignal.any([call.signal, overflow.signal]);
    let connection: Connection | null = null;
    try {
      connection = await this.connection(entry, signal, call.deadline);
      const listed = await this.checkUnchanged(entry, connection, toolName, expected, signal, call.deadline, what);

      // Whether it may be sent again is the server's word, as it lists the tool now (its fingerprint
      // is the imported one, so these are the annotations imported): never the action's config,
      // which whoever made the action wrote.
      const hints = listed.info.annotations;
      const mayResend = hints?.readOnlyHint === true || hints?.idempotentHint === true;
      const before = call.sending();
      if (before > 0 && !mayResend) {
        throw integrationError(
          `the outcome of an earlier send is unknown (the worker stopped after sending it); ${what} is not marked idempotent or read-only, so it is not sent again`,
          {
            hint: 'Check on the server whether the earlier call took effect; an MCP tool that may be sent twice says so with idempotentHint (or readOnlyHint).',
            details: { server, tool: toolName, sends: before },
          },
        );
      }
      const timeoutMs = Math.min(entry.config.timeoutMs, call.deadline - Date.now());
      if (timeoutMs <= 0) {
        throw unavailable(`${what}: the call's deadline passed before it was sent`, { server, tool: toolName });
      }
      const result = (await connection.client.callTool(
        { name: toolName, arguments: args, _meta: { [IDEMPOTENCY_META_KEY]: call.idempotencyKey } },
        undefined,
        { signal, timeout: timeoutMs },
      )) as CallToolResult;
      return toolOutput(entry, result, toolName, what);
    } catch (error) {
      if (overflow.signal.aborted && overflow.signal.reason instanceof EngineError) throw overflow.signal.reason;
      throw this.failure(entry, connection, error, what, call.signal, toolName);
    } finally {
      unwatch();
    }
  }

  /** The tool as listed now must have the imported fingerprint; a list kept from before is read again once first. */
  private async checkUnchanged(
    entry: ServerEntry,
    connection: Connection,
    toolName: string,
    expected: McpCallExpectation,
    signal: AbortSignal,
    deadline: number,
    what: string,
  ): Promise<Listed> {
    // Read again before every call, whether or not the server promises list_changed: a server that
    // changes a tool without saying so must not have the changed tool called (one round trip more;
    // calls at the same moment share one listing).
    const { tools } = await this.tools(entry, connection, signal, deadline, true);
    const listed = tools.get(toolName);
    const details = { server: entry.config.name, tool: toolName, retry: false };
    if (listed === undefined) {
      throw integrationError(`${what} is no longer offered by the server`, {
        hint: "Re-import the server's tools (tally mcp import) and point callers at what it offers now.",
        details,
      });
    }
    if (listed.fingerprint !== expected.fingerprint) {
      throw integrationError(
        `${what} changed since it was imported (fingerprint ${expected.fingerprint.slice(0, 12)} → ${listed.fingerprint.slice(0, 12)}); re-import it to make a new version`,
        {
          hint: 'Run tally mcp import for the server: the changed tool becomes a new version of its action, which callers then choose to use.',
          details: { ...details, expected: expected.fingerprint, actual: listed.fingerprint },
        },
      );
    }
    return listed;
  }

  /** The open connection, opening one (once, for every caller waiting) when there is none. */
  private async connection(entry: ServerEntry, signal: AbortSignal, deadline: number): Promise<Connection> {
    if (this.#closed)
      throw unavailable(`MCP server ${quote(entry.config.name)}: the servers are closed`, {
        server: entry.config.name,
      });
    if (entry.connection !== null && !entry.connection.closed) return entry.connection;
    if (entry.connecting === null) {
      const opening = this.open(entry).then((connection) => {
        if (this.#closed) {
          void connection.client.close().catch(() => undefined);
          throw unavailable(`MCP server ${quote(entry.config.name)}: the servers are closed`, {
            server: entry.config.name,
          });
        }
        entry.connection = connection;
        return connection;
      });
      entry.connecting = opening;
      void opening.then(
        () => (entry.connecting = null),
        () => (entry.connecting = null),
      );
    }
    return within(entry.connecting, signal, deadline, () =>
      unavailable(`MCP server ${quote(entry.config.name)}: no connection before the call's deadline`, {
        server: entry.config.name,
      }),
    );
  }

  /** A new connection; initialize is sent once more when the first went out on a socket the server had closed. */
  private async open(entry: ServerEntry): Promise<Connection> {
    const config = entry.config;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.openOnce(entry);
      } catch (failure) {
        if (!(failure instanceof ConnectFailure)) throw failure;
        // fetch reuses kept-alive sockets: one the server closed fails the first request sent on
        // it ("other side closed"). initialize has no effect on the server, so it may go again.
        if (attempt === 1 && config.transport === 'http' && failure.error instanceof TypeError) continue;
        this.log.warn(
          { event: 'mcp_connect_failed', server: config.name, error: failure.message },
          'MCP server connection failed',
        );
        const retry = isUnavailable(failure.error);
        throw new EngineError(
          retry ? 'INTEGRATION_UNAVAILABLE' : 'INTEGRATION_ERROR',
          `cannot connect to MCP server ${quote(config.name)}: ${cut(failure.message, MCP_ERROR_TEXT_MAX)}`,
          {
            hint:
              config.transport === 'http'
                ? 'Check that the server runs at its configured url and accepts the configured headers.'
                : 'Check the configured command, args and cwd: the server must speak MCP on its stdin and stdout.',
            details: { server: config.name, retry },
          },
        );
      }
    }
  }

  private async openOnce(entry: ServerEntry): Promise<Connection> {
    const config = entry.config;
    const transport =
      config.transport === 'http' ? this.httpTransport(entry, config) : this.stdioTransport(entry, config);
    const client = new Client(CLIENT_INFO, { capabilities: {} });
    const connection: Connection = {
      client,
      tools: null,
      listing: null,
      generation: 0,
      listChanged: false,
      overflow: null,
      closed: false,
      stderr: '',
    };
    if (transport instanceof StdioClientTransport) {
      // Read always: a pipe nobody reads fills, and the child then blocks writing to it.
      transport.stderr?.on('data', (chunk: Buffer) => {
        const text = chunk.toString('utf8');
        connection.stderr = (connection.stderr + text).slice(-STDERR_TAIL_MAX);
        this.log.debug(
          { event: 'mcp_stderr', server: config.name, text: entry.redact(cut(text, 1000)) },
          'MCP server wrote to stderr',
        );
      });
    }
    client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
      connection.tools = null;
      connection.generation += 1;
      this.log.info({ event: 'mcp_tools_changed', server: config.name }, 'MCP server says its tools changed');
    });
    client.onclose = () => {
      connection.closed = true;
      if (entry.connection === connection) entry.connection = null;
    };
    client.onerror = (error: Error) => {
      if (config.transport === 'stdio' && /ReadBuffer exceeded maximum size/.test(error.message)) {
        // A stdio connection cannot say which call's answer it was: every call pending on it fails
        // as one a retry may mend (its outcome unknown), never as a final answer of its own. A
        // call that may not be sent twice then ends when it finds its earlier send.
        connection.overflow ??= unavailable(
          `MCP server ${quote(config.name)} wrote a message over ${MCP_MESSAGE_BYTES_MAX} bytes (one call's answer, which one is unknown); the connection was closed`,
          {
            server: config.name,
            limit: 'mcpMessageBytesMax',
            max: MCP_MESSAGE_BYTES_MAX,
          },
        );
      }
      this.log.debug(
        { event: 'mcp_transport_error', server: config.name, error: entry.redact(cut(error.message, 1000)) },
        'MCP transport error',
      );
    };
    try {
      await client.connect(transport, { timeout: config.timeoutMs });
    } catch (error) {
      connection.closed = true;
      await client.close().catch(() => undefined);
      throw new ConnectFailure(error, entry.redact(describe(error, connection)));
    }
    connection.listChanged = client.getServerCapabilities()?.tools?.listChanged === true;
    this.log.info({ event: 'mcp_connected', server: config.name, transport: config.transport }, 'MCP server connected');
    return connection;
  }

  /** A credential named by the config, read now; a missing one is the operator's to fix (final). */
  private credential(entry: ServerEntry, ref: SecretHeader, what: string): string {
    const value = this.env[ref.env];
    if (value === undefined || value === '') {
      throw integrationError(
        `MCP server ${quote(entry.config.name)}: the environment variable ${ref.env} (${what}) is not set`,
        {
          hint: `Set ${ref.env} in the server's environment, and restart the server.`,
          details: { server: entry.config.name, variable: ref.env, retry: false },
        },
      );
    }
    entry.secrets.add(value);
    // A header value with a line break or a control character would be refused by fetch with the
    // value in its message: refused here, without it.
    if (what.startsWith('header') && !HEADER_VALUE.test(`${ref.prefix}${value}`))
      throw integrationError(
        `MCP server ${quote(entry.config.name)}: the environment variable ${ref.env} (${what}) holds a value that cannot be a header value`,
        {
          hint: `Set ${ref.env} to the credential on one line, and restart the server.`,
          details: { server: entry.config.name, variable: ref.env, retry: false },
        },
      );
    return `${ref.prefix}${value}`;
  }

  private httpTransport(entry: ServerEntry, config: Extract<McpServerConfig, { transport: 'http' }>): Transport {
    const headers: Record<string, string> = {};
    for (const [name, ref] of Object.entries(config.headers))
      headers[name] = this.credential(entry, ref, `header ${name}`);
    // The SDK follows a redirect only within the server's origin (its default redirectPolicy).
    return new StreamableHTTPClientTransport(new URL(config.url), {
      requestInit: { headers },
      fetch: boundedFetch(entry),
    });
  }

  private stdioTransport(entry: ServerEntry, config: Extract<McpServerConfig, { transport: 'stdio' }>): Transport {
    // The SDK adds HOME, LOGNAME, SHELL, TERM and USER of this process to the child's environment;
    // naming them undefined takes them out (node's spawn skips undefined values). The child gets
    // the variables its config names, and PATH to find its own programs: nothing else of ours.
    const env: Record<string, string | undefined> = Object.fromEntries(
      DEFAULT_INHERITED_ENV_VARS.map((name) => [name, undefined]),
    );
    if (this.env.PATH !== undefined) env.PATH = this.env.PATH;
    for (const [name, ref] of Object.entries(config.env))
      env[name] = this.credential(entry, ref, `variable ${name} of the child`);
    return new StdioClientTransport({
      command: config.command,
      args: config.args,
      env: env as Record<string, string>,
      ...(config.cwd === null ? {} : { cwd: config.cwd }),
      stderr: 'pipe',
      maxBufferSize: MCP_MESSAGE_BYTES_MAX,
    });
  }

  /** The tool list: the one kept (unless `fresh`), else read once for every caller waiting. */
  private async tools(
    entry: ServerEntry,
    connection: Connection,
    signal: AbortSignal,
    deadline: number,
    fresh: boolean,
  ): Promise<{ tools: Map<string, Listed>; kept: boolean }> {
    if (!fresh && connection.tools !== null) return { tools: connection.tools, kept: true };
    if (fresh) connection.tools = null;
    if (connection.listing === null) {
      const listing = this.readTools(entry, connection);
      connection.listing = listing;
      void listing.then(
        () => (connection.listing = null),
        () => (connection.listing = null),
      );
    }
    const tools = await within(connection.listing, signal, deadline, () =>
      unavailable(`MCP server ${quote(entry.config.name)}: its tools were not listed before the call's deadline`, {
        server: entry.config.name,
      }),
    );
    return { tools, kept: false };
  }

  private async readTools(entry: ServerEntry, connection: Connection): Promise<Map<string, Listed>> {
    const generation = connection.generation;
    const stop = new AbortController();
    const unwatch = entry.stopOn(LIST_TAG, (error) => stop.abort(error));
    const tools = new Map<string, Listed>();
    const server = entry.config.name;
    try {
      let cursor: string | undefined;
      for (let page = 0; ; page++) {
        if (page >= MCP_TOOL_PAGES_MAX) {
          throw integrationError(`MCP server ${quote(server)} listed more than ${MCP_TOOL_PAGES_MAX} pages of tools`, {
            details: { server, retry: false, limit: 'mcpToolPagesMax', max: MCP_TOOL_PAGES_MAX, actual: page },
          });
        }
        const result = await connection.client.listTools(cursor === undefined ? {} : { cursor }, {
          signal: stop.signal,
          timeout: entry.config.timeoutMs,
        });
        for (const tool of result.tools) {
          if (tools.size >= MCP_TOOLS_MAX) {
            throw integrationError(`MCP server ${quote(server)} lists more than ${MCP_TOOLS_MAX} tools`, {
              details: { server, retry: false, limit: 'mcpToolsMax', max: MCP_TOOLS_MAX, actual: tools.size + 1 },
            });
          }
          const info = toolInfo(tool);
          tools.set(info.name, { info, fingerprint: mcpToolFingerprint(info) });
        }
        if (!result.nextCursor) break;
        cursor = result.nextCursor;
      }
    } catch (error) {
      if (stop.signal.aborted && stop.signal.reason instanceof EngineError) throw stop.signal.reason;
      throw error;
    } finally {
      unwatch();
    }
    // A list read across a list_changed may be the old one: it answers this caller, and is not kept.
    if (connection.generation === generation && !connection.closed) connection.tools = tools;
    return tools;
  }

  /**
   * Any failure as an EngineError with the server's credentials taken out: INTEGRATION_UNAVAILABLE
   * for what a retry may fix (no connection, a timeout, the server busy or down), INTEGRATION_ERROR
   * for an answer that will not change. A broken connection is dropped, so the next call reconnects.
   */
  private failure(
    entry: ServerEntry,
    connection: Connection | null,
    error: unknown,
    what: string,
    signal: AbortSignal,
    tool?: string,
  ): unknown {
    if (signal.aborted) return signal.reason instanceof Error ? signal.reason : unavailable(`${what}: stopped`, {});
    if (error instanceof EngineError) return error;
    if (connection?.overflow) return connection.overflow;
    const server = entry.config.name;
    const retry = isUnavailable(error);
    if (retry && connection !== null && !isTimeout(error)) this.drop(entry, connection);
    const message = cut(entry.redact(describe(error, connection)), MCP_ERROR_TEXT_MAX);
    const details = { server, ...(tool === undefined ? {} : { tool }), retry };
    if (retry) return unavailable(`${what}: ${message}`, details);
    return integrationError(`${what}: ${message}`, { details });
  }

  private drop(entry: ServerEntry, connection: Connection): void {
    if (entry.connection === connection) entry.connection = null;
    connection.closed = true;
    void connection.client.close().catch(() => undefined);
  }

  /** Close every connection (a stdio child is stopped: stdin closed, then SIGTERM, then SIGKILL). */
  async close(): Promise<void> {
    this.#closed = true;
    const closing: Array<Promise<unknown>> = [];
    for (const entry of this.#entries.values()) {
      const pending = entry.connecting;
      if (entry.connection !== null) closing.push(entry.connection.client.close().catch(() => undefined));
      entry.connection = null;
      if (pending !== null) closing.push(pending.catch(() => undefined));
    }
    await Promise.all(closing);
  }
}
