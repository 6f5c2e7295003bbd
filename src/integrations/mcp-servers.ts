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
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  type CallToolResult,
  ErrorCode,
  McpError,
  type Tool,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { EngineError, quote } from '../errors.js';
import { canonicalJson, fingerprint } from '../ids.js';
import { type Logger, silentLogger } from '../log.js';
import { isRecord, redact } from '../models/http.js';
import { Limiter } from './limiter.js';
import type { McpServerConfig, McpTools, OutboundCall, SecretHeader } from './types.js';

// ---------------------------------------------------------------------------------------------
// Bounds (each named, with its default and why; to move into src/limits.ts FIXED_LIMITS).

export const MCP_SERVER_DEFAULTS = Object.freeze({ timeoutMs: 30_000, concurrency: 8 });
/** The longest timeoutMs a server's config may set: 10 minutes, as a model provider's. */
export const MCP_TIMEOUT_MS_MAX = 600_000;
/** The most calls in flight to one server from one process a config may set. */
export const MCP_CONCURRENCY_MAX = 256;
/** An imported tool's output (structuredContent, or {content}) as JSON: what an execution records. */
export const MCP_OUTPUT_BYTES_MAX = 1_048_576;
/**
 * One answer read from a server (an HTTP response body, a stdio line): past it the read stops. Above
 * MCP_OUTPUT_BYTES_MAX because a tool's answer carries its output twice (structuredContent and its
 * text) and JSON-escaped; it bounds memory, the output bound gives the error.
 */
export const MCP_MESSAGE_BYTES_MAX = 8 * 1_048_576;
/** A tool's error text kept in an INTEGRATION_ERROR's message. */
export const MCP_ERROR_TEXT_MAX = 300;
/** Tools read from one server's tools/list (over all its pages): a list is kept in memory and imported whole. */
export const MCP_TOOLS_MAX = 1000;
/** Pages of tools/list read before giving up: a server that pages forever stops here. */
export const MCP_TOOL_PAGES_MAX = 100;
/** The child's stderr kept to explain why a stdio server stopped. */
const STDERR_TAIL_MAX = 2000;

/** The `_meta` key of tools/call that carries the call's idempotency key, so a server can dedupe. */
export const IDEMPOTENCY_META_KEY = 'io.tally/idempotencyKey';

// ---------------------------------------------------------------------------------------------
// The configuration.

const NAME = /^[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*$/;
const ENV_NAME = /^[A-Z_][A-Z0-9_]*$/;
/** A variable name in the child's environment (any case: a server may read `npm_config_x`). */
const CHILD_ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** An HTTP header name (RFC 9110 token). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Headers the transport sets itself: a config that set them would break the protocol. */
const TRANSPORT_HEADERS = new Set([
  'accept',
  'content-type',
  'content-length',
  'host',
  'connection',
  'transfer-encoding',
  'mcp-session-id',
  'mcp-protocol-version',
  'last-event-id',
]);
const PREFIX_MAX = 64;
const COMMON_FIELDS = ['name', 'timeoutMs', 'concurrency', 'perClientConcurrency'];
const HTTP_FIELDS = new Set([...COMMON_FIELDS, 'url', 'headers']);
const STDIO_FIELDS = new Set([...COMMON_FIELDS, 'command', 'args', 'cwd', 'env']);
/** Field names that look like a literal credential: refused with a hint of their own. */
const SECRET_FIELDS =
  /^(api[-_]?key|key|token|access[-_]?token|secret|client[-_]?secret|auth(orization)?|bearer|password|passwd|credentials?)$/i;

const HINT =
  'Each MCP server is {name, url, headers?: {"Header": {"env": "VAR", "prefix"?: "Bearer "}}, timeoutMs?, concurrency?, perClientConcurrency?} ' +
  'or {name, command, args?: [...], cwd?, env?: {"VAR_IN_CHILD": {"env": "VAR_HERE"}}, timeoutMs?, concurrency?, perClientConcurrency?}.';

function bad(message: string, hint = HINT): EngineError {
  return new EngineError('BAD_REQUEST', message, { hint });
}

function integerIn(path: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw bad(`${path} ${quote(value)} is not an integer from ${min} to ${max}`);
  }
  return value;
}

/** A value that may be a credential is named, never shown: only a short plain word is quoted. */
function shown(value: unknown): string {
  return typeof value === 'string' && value.length <= 64 && /^[A-Za-z0-9_]*$/.test(value) ? `${quote(value)} ` : '';
}

/**
 * `{env: "VAR", prefix?: "..."}` at `path`: where a credential comes from. A string there is a
 * literal credential and is refused without being echoed.
 */
function secretRef(path: string, value: unknown, prefixAllowed: boolean, example: string): SecretHeader {
  if (typeof value === 'string') {
    throw bad(
      `${path} is a literal value: credentials are never written in configuration`,
      `Put the value in an environment variable of the server and name it: ${example}.`,
    );
  }
  if (!isRecord(value)) throw bad(`${path} ${quote(value)} is not an object {"env": "VAR"}`, `Write ${example}.`);
  const fields = prefixAllowed ? ['env', 'prefix'] : ['env'];
  for (const field of Object.keys(value)) {
    if (!fields.includes(field)) throw bad(`${path}.${field} is not a field (known: ${fields.join(', ')})`);
  }
  if (typeof value.env !== 'string' || !ENV_NAME.test(value.env)) {
    throw bad(
      `${path}.env ${shown(value.env)}is not an environment variable name (upper case letters, digits and _)`,
      `It names the variable that holds the value, never the value itself: ${example}.`,
    );
  }
  const prefix = value.prefix ?? '';
  if (typeof prefix !== 'string' || prefix.length > PREFIX_MAX || /[\r\n\0]/.test(prefix)) {
    throw bad(`${path}.prefix is not a short text on one line (at most ${PREFIX_MAX} characters)`, `Write ${example}.`);
  }
  return { env: value.env, prefix };
}

function parseUrl(at: string, value: unknown): string {
  let url: URL | null = null;
  if (typeof value === 'string') {
    try {
      url = new URL(value);
    } catch {
      url = null;
    }
  }
  if (typeof value !== 'string' || url === null || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw bad(
      `${at}.url ${quote(value)} is not an http(s) URL`,
      'Give the server\'s MCP endpoint, e.g. "https://mcp.example.com/mcp".',
    );
  }
  if (url.username !== '' || url.password !== '') {
    throw bad(
      `${at}.url has credentials in it: credentials are never written in configuration`,
      'Remove the user:password part; send the credential in a header read from an environment variable: "headers": {"Authorization": {"env": "VAR", "prefix": "Bearer "}}.',
    );
  }
  for (const key of url.searchParams.keys()) {
    if (SECRET_FIELDS.test(key)) {
      throw bad(
        `${at}.url has a credential in its query (${quote(key)}): credentials are never written in configuration`,
        'Send the credential in a header read from an environment variable: "headers": {"Authorization": {"env": "VAR", "prefix": "Bearer "}}.',
      );
    }
  }
  return url.toString();
}

function parseHeaders(at: string, value: unknown): Record<string, SecretHeader> {
  if (value === undefined || value === null) return {};
  if (!isRecord(value)) throw bad(`${at}.headers ${quote(value)} is not an object of header names`);
  const headers: Record<string, SecretHeader> = {};
  const seen = new Set<string>();
  for (const [name, spec] of Object.entries(value)) {
    const path = `${at}.headers.${name}`;
    if (!HEADER_NAME.test(name)) throw bad(`${at}.headers: ${quote(name)} is not an HTTP header name`);
    const folded = name.toLowerCase();
    if (TRANSPORT_HEADERS.has(folded)) {
      throw bad(
        `${path}: the MCP transport sets ${name} itself`,
        'Leave it out; configure only the headers the server needs (credentials).',
      );
    }
    if (seen.has(folded)) throw bad(`${path}: the header is given twice (header names are case-insensitive)`);
    seen.add(folded);
    headers[name] = secretRef(path, spec, true, `"${name}": {"env": "MY_SERVER_TOKEN", "prefix": "Bearer "}`);
  }
  return headers;
}

function parseChildEnv(at: string, value: unknown): Record<string, SecretHeader> {
  if (value === undefined || value === null) return {};
  if (!isRecord(value)) throw bad(`${at}.env ${quote(value)} is not an object of variable names`);
  const env: Record<string, SecretHeader> = {};
  for (const [name, spec] of Object.entries(value)) {
    if (!CHILD_ENV_NAME.test(name)) throw bad(`${at}.env: ${quote(name)} is not an environment variable name`);
    env[name] = secretRef(
      `${at}.env.${name}`,
      spec,
      false,
      `"${name}": {"env": "${ENV_NAME.test(name) ? name : 'VAR_HERE'}"}`,
    );
  }
  return env;
}

function parseStrings(path: string, value: unknown): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw bad(`${path} ${quote(value)} is not an array of strings`);
  return value.map((item: unknown, i) => {
    if (typeof item !== 'string' || item.includes('\0')) throw bad(`${path}[${i}] ${quote(item)} is not a string`);
    return item;
  });
}

/** Validate the `mcpServers` block; every problem is a BAD_REQUEST naming the field path. */
export function parseMcpServers(value: unknown, env: NodeJS.ProcessEnv = process.env): McpServerConfig[] {
  void env; // Variables are read when a connection opens; an unset one is not a configuration error.
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw bad(`mcpServers ${quote(value)} is not an array`);
  const seen = new Set<string>();
  return value.map((entry: unknown, index): McpServerConfig => {
    const at = `mcpServers[${index}]`;
    if (!isRecord(entry)) throw bad(`${at} ${quote(entry)} is not an object`);
    const hasUrl = entry.url !== undefined;
    const hasCommand = entry.command !== undefined;
    if (hasUrl === hasCommand) {
      throw bad(
        hasUrl
          ? `${at} has both url and command: a server is reached over Streamable HTTP or run over stdio, not both`
          : `${at} has neither url (Streamable HTTP) nor command (stdio)`,
      );
    }
    const fields = hasUrl ? HTTP_FIELDS : STDIO_FIELDS;
    for (const field of Object.keys(entry)) {
      if (fields.has(field)) continue;
      if (SECRET_FIELDS.test(field)) {
        throw bad(
          `${at}.${field} is not an MCP server field: credentials are never written in configuration`,
          hasUrl
            ? 'Put the credential in an environment variable of the server and send it in a header: "headers": {"Authorization": {"env": "MY_SERVER_TOKEN", "prefix": "Bearer "}}.'
            : 'Put the credential in an environment variable of the server and pass it to the child: "env": {"API_TOKEN": {"env": "MY_SERVER_TOKEN"}}.',
        );
      }
      throw bad(
        `${at}.${field} is not a field of ${hasUrl ? 'a Streamable HTTP' : 'a stdio'} MCP server (known: ${[...fields].join(', ')})`,
      );
    }

    const name = entry.name;
    if (typeof name !== 'string' || !NAME.test(name) || name.length > 64) {
      throw bad(
        `${at}.name ${quote(name)} is not a server name (lower_snake or kebab case, e.g. "search" or "crm-tools")`,
      );
    }
    if (seen.has(name))
      throw bad(`${at}.name ${quote(name)} is already used by another MCP server`, 'Give each server its own name.');
    seen.add(name);

    const timeoutMs =
      entry.timeoutMs === undefined
        ? MCP_SERVER_DEFAULTS.timeoutMs
        : integerIn(`${at}.timeoutMs`, entry.timeoutMs, 1, MCP_TIMEOUT_MS_MAX);
    const concurrency =
      entry.concurrency === undefined
        ? MCP_SERVER_DEFAULTS.concurrency
        : integerIn(`${at}.concurrency`, entry.concurrency, 1, MCP_CONCURRENCY_MAX);
    const perClientConcurrency =
      entry.perClientConcurrency === undefined
        ? Math.max(1, Math.floor(concurrency / 2))
        : integerIn(`${at}.perClientConcurrency`, entry.perClientConcurrency, 1, concurrency);
    const common = { name, timeoutMs, concurrency, perClientConcurrency };

    if (hasUrl)
      return { ...common, transport: 'http', url: parseUrl(at, entry.url), headers: parseHeaders(at, entry.headers) };

    const command = entry.command;
    if (typeof command !== 'string' || command.trim() === '' || command.includes('\0')) {
      throw bad(
        `${at}.command ${quote(command)} is not a command`,
        'Name the program to run, e.g. "node" or "/usr/local/bin/my-mcp-server", and its arguments in args.',
      );
    }
    const cwd = entry.cwd ?? null;
    if (cwd !== null && (typeof cwd !== 'string' || !cwd.startsWith('/') || cwd.includes('\0'))) {
      throw bad(
        `${at}.cwd ${quote(cwd)} is not an absolute path`,
        'Give the folder the server runs in as an absolute path, or leave cwd out.',
      );
    }
    return {
      ...common,
      transport: 'stdio',
      command,
      args: parseStrings(`${at}.args`, entry.args),
      cwd: cwd as string | null,
      env: parseChildEnv(at, entry.env),
    };
  });
}

// ---------------------------------------------------------------------------------------------
// Tools and fingerprints.

/** A tool as a server lists it, each field that may be absent as null. */
export interface McpToolInfo {
  name: string;
  title: string | null;
  description: string | null;
  inputSchema: Record<string, unknown>;
  outputSchema: Record<string, unknown> | null;
  /** MCP's hints (readOnlyHint, idempotentHint, destructiveHint, openWorldHint, title): what the server says, unverified. */
  annotations: Record<string, unknown> | null;
}

/** What the action that calls a tool was imported from: the call is refused when the server's tool differs. */
export interface McpCallExpectation {
  fingerprint: string;
  /** The imported tool's readOnlyHint. */
  readOnly: boolean;
  /** The imported tool's idempotentHint. */
  idempotent: boolean;
}

/**
 * What a tool's callers depend on, hashed: its name, schemas, annotations and description (what a
 * model reads to decide a call). A new fingerprint is a new tool: it is imported as a new version.
 */
export function mcpToolFingerprint(tool: McpToolInfo): string {
  return fingerprint(
    canonicalJson({
      name: tool.name,
      inputSchema: tool.inputSchema,
      outputSchema: tool.outputSchema,
      annotations: tool.annotations,
      description: tool.description,
    }),
  );
}

function toolInfo(tool: Tool): McpToolInfo {
  const annotations = isRecord(tool.annotations) ? (tool.annotations as Record<string, unknown>) : null;
  const title =
    typeof tool.title === 'string' ? tool.title : typeof annotations?.title === 'string' ? annotations.title : null;
  return {
    name: tool.name,
    title,
    description: typeof tool.description === 'string' ? tool.description : null,
    inputSchema: tool.inputSchema as Record<string, unknown>,
    outputSchema: isRecord(tool.outputSchema) ? (tool.outputSchema as Record<string, unknown>) : null,
    annotations,
  };
}

// ---------------------------------------------------------------------------------------------
// The servers.

interface Listed {
  info: McpToolInfo;
  fingerprint: string;
}

/** One open connection to a server: its client, and its tool list while no list_changed came. */
interface Connection {
  client: Client;
  /** The tool list, until the server says it changed (null: list again). */
  tools: Map<string, Listed> | null;
  listing: Promise<Map<string, Listed>> | null;
  /** Bumped by every list_changed: a list read across one is not kept. */
  generation: number;
  /** The server sends list_changed (else the list is read again before every call). */
  listChanged: boolean;
  /** Set when an answer crossed MCP_MESSAGE_BYTES_MAX on a stdio connection (which then closes). */
  overflow: EngineError | null;
  closed: boolean;
  /** The end of a stdio child's stderr (redacted when shown). */
  stderr: string;
}

class ServerEntry {
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
const LIST_TAG = 'tools/list';

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
      await this.checkUnchanged(entry, connection, toolName, expected, signal, call.deadline, what);

      const before = call.sending();
      if (before > 0 && !expected.readOnly && !expected.idempotent) {
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
      return this.output(entry, result, toolName, what);
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
  ): Promise<void> {
    let { tools, kept } = await this.tools(entry, connection, signal, deadline, !connection.listChanged);
    if (tools.get(toolName)?.fingerprint !== expected.fingerprint && kept) {
      ({ tools } = await this.tools(entry, connection, signal, deadline, true));
    }
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
  }

  /** What a tool answered, as an execution's output: bounded, and without the server's credentials. */
  private output(entry: ServerEntry, result: CallToolResult, toolName: string, what: string): unknown {
    const server = entry.config.name;
    if (result.isError === true) {
      const text = entry.redact(errorText(result.content));
      throw integrationError(`${what} failed: ${cut(text, MCP_ERROR_TEXT_MAX)}`, {
        hint: 'The tool refused the call: read its message, fix the input, and start it again.',
        details: { server, tool: toolName, retry: false },
      });
    }
    const output = isRecord(result.structuredContent) ? result.structuredContent : { content: result.content ?? [] };
    const json = JSON.stringify(output);
    const bytes = Buffer.byteLength(json);
    if (bytes > MCP_OUTPUT_BYTES_MAX) {
      throw integrationError(`${what} answered ${bytes} bytes of output; at most ${MCP_OUTPUT_BYTES_MAX} are kept`, {
        hint: 'Ask the tool for less (a narrower query, a page of results).',
        details: {
          server,
          tool: toolName,
          retry: false,
          limit: 'mcpOutputBytesMax',
          max: MCP_OUTPUT_BYTES_MAX,
          actual: bytes,
        },
      });
    }
    return entry.redact(json) === json ? output : redactStrings(output, (text) => entry.redact(text));
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
        connection.overflow ??= integrationError(
          `MCP server ${quote(config.name)} wrote a message over ${MCP_MESSAGE_BYTES_MAX} bytes; the connection was closed`,
          {
            hint: 'Ask the tool for less; the server is started again for the next call.',
            details: {
              server: config.name,
              retry: false,
              limit: 'mcpMessageBytesMax',
              max: MCP_MESSAGE_BYTES_MAX,
              actual: null,
            },
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

// ---------------------------------------------------------------------------------------------
// Checks of an action of kind "mcp".

const MCP_CONFIG_FIELDS = ['server', 'tool', 'fingerprint', 'annotations'];
const FINGERPRINT = /^[0-9a-f]{64}$/;
const CONFIG_HINT =
  "An mcp action's config is {server, tool, fingerprint, annotations?}, as `tally mcp import` writes it.";

/** What createAction checks for an action of kind "mcp": its config's shape, and that its server is configured. */
export function checkMcpConfig(servers: McpServers | null, config: Record<string, unknown>): void {
  for (const field of Object.keys(config)) {
    if (!MCP_CONFIG_FIELDS.includes(field)) {
      throw new EngineError(
        'BAD_REQUEST',
        `config.${field} is not a field of an mcp action (known: ${MCP_CONFIG_FIELDS.join(', ')})`,
        {
          hint: CONFIG_HINT,
        },
      );
    }
  }
  const server = config.server;
  if (typeof server !== 'string' || server === '') {
    throw new EngineError('BAD_REQUEST', `config.server ${quote(server)} is not an MCP server name`, {
      hint: CONFIG_HINT,
    });
  }
  const names = servers?.names() ?? [];
  if (!names.includes(server)) {
    throw new EngineError('BAD_REQUEST', `config.server ${quote(server)} is not a configured MCP server`, {
      hint:
        names.length === 0
          ? 'No MCP servers are configured: add an mcpServers block to the server configuration (TALLY_CONFIG).'
          : `Configured MCP servers: ${names.map((n) => quote(n)).join(', ')}.`,
      details: { server, configured: names },
    });
  }
  if (typeof config.tool !== 'string' || config.tool === '') {
    throw new EngineError('BAD_REQUEST', `config.tool ${quote(config.tool)} is not a tool name`, { hint: CONFIG_HINT });
  }
  if (typeof config.fingerprint !== 'string' || !FINGERPRINT.test(config.fingerprint)) {
    throw new EngineError(
      'BAD_REQUEST',
      `config.fingerprint ${quote(config.fingerprint)} is not a sha-256 in hex (64 characters)`,
      {
        hint: CONFIG_HINT,
      },
    );
  }
  const annotations = config.annotations ?? null;
  if (annotations !== null && !isRecord(annotations)) {
    throw new EngineError('BAD_REQUEST', `config.annotations ${quote(annotations)} is not an object`, {
      hint: CONFIG_HINT,
    });
  }
}

/**
 * The servers as a run uses them (McpTools): an mcp action's config checked at creation, and a call
 * of the tool it imported, against the fingerprint and hints it pinned.
 */
export function mcpTools(servers: McpServers): McpTools {
  return {
    check: (config) => checkMcpConfig(servers, config),
    call: (config, args, call) => {
      checkMcpConfig(servers, config);
      const annotations = isRecord(config.annotations) ? config.annotations : null;
      return servers.call(config.server as string, config.tool as string, isRecord(args) ? args : {}, call, {
        fingerprint: config.fingerprint as string,
        readOnly: annotations?.readOnlyHint === true,
        idempotent: annotations?.idempotentHint === true,
      });
    },
    close: () => servers.close(),
  };
}

// ---------------------------------------------------------------------------------------------
// Helpers.

/** A connection that did not open: the SDK's error, and its message with the credentials taken out. */
class ConnectFailure extends Error {
  constructor(
    readonly error: unknown,
    message: string,
  ) {
    super(message);
  }
}

function integrationError(message: string, options: { hint?: string; details?: Record<string, unknown> }): EngineError {
  return new EngineError('INTEGRATION_ERROR', message, {
    ...(options.hint === undefined ? {} : { hint: options.hint }),
    details: { retry: false, ...options.details },
  });
}

function unavailable(message: string, details: Record<string, unknown>): EngineError {
  return new EngineError('INTEGRATION_UNAVAILABLE', message, { details: { ...details, retry: true } });
}

/** A retry may fix it: no connection, a timeout, the connection closed, the server busy or failing. */
function isUnavailable(error: unknown): boolean {
  if (error instanceof McpError) {
    return (
      error.code === ErrorCode.ConnectionClosed ||
      error.code === ErrorCode.RequestTimeout ||
      error.code === ErrorCode.InternalError
    );
  }
  if (error instanceof StreamableHTTPError) {
    const status = error.code ?? 0;
    // 404: the server forgot the session (it restarted); the next call opens a new one.
    return status === 404 || status === 408 || status === 425 || status === 429 || status >= 500;
  }
  // fetch failed, ECONNREFUSED, a child that could not start or stopped.
  return true;
}

function isTimeout(error: unknown): boolean {
  return error instanceof McpError && error.code === ErrorCode.RequestTimeout;
}

/** An error's message, with where a stdio child stopped (its stderr's end) when that explains it. */
function describe(error: unknown, connection: Connection | null): string {
  const message = error instanceof Error ? error.message : String(error);
  const cause = error instanceof Error && error.cause instanceof Error ? ` (${error.cause.message})` : '';
  const stderr = connection?.stderr.trim() ?? '';
  return `${message}${cause}${stderr !== '' && isUnavailable(error) ? `; its stderr ends: ${stderr.slice(-200)}` : ''}`;
}

function cut(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** A tool error's words: its text blocks, else its content as JSON. */
function errorText(content: CallToolResult['content'] | undefined): string {
  const blocks = content ?? [];
  const texts = blocks.flatMap((block) => (block.type === 'text' ? [block.text] : []));
  return texts.length > 0 ? texts.join('\n') : cut(JSON.stringify(blocks), 4 * MCP_ERROR_TEXT_MAX);
}

/** Every string of a JSON value (keys too) passed through `redact`. */
function redactStrings(value: unknown, redactText: (text: string) => string): unknown {
  if (typeof value === 'string') return redactText(value);
  if (Array.isArray(value)) return value.map((item) => redactStrings(item, redactText));
  if (isRecord(value)) {
    return Object.fromEntries(
      Object.entries(value).map(([key, item]) => [redactText(key), redactStrings(item, redactText)]),
    );
  }
  return value;
}

/** The promise, or `error()` once the deadline passes, or the signal's reason once it aborts. */
function within<T>(promise: Promise<T>, signal: AbortSignal, deadline: number, error: () => Error): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const waitMs = deadline - Date.now();
    const timer = Number.isFinite(waitMs) ? setTimeout(() => finish(() => reject(error())), Math.max(0, waitMs)) : null;
    timer?.unref();
    const onAbort = () => finish(() => reject(signal.reason));
    const finish = (settle: () => void) => {
      if (timer !== null) clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      settle();
    };
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => finish(() => resolve(value)),
      (reason: unknown) => finish(() => reject(reason)),
    );
  });
}

/**
 * fetch that stops reading an answer past MCP_MESSAGE_BYTES_MAX: the body errors, and the request
 * it answers (a tools/call by the idempotency key in its `_meta`, or a tools/list) is stopped with
 * an INTEGRATION_ERROR naming the bound.
 */
function boundedFetch(entry: ServerEntry): (url: string | URL, init?: RequestInit) => Promise<Response> {
  const server = entry.config.name;
  return async (url, init) => {
    const tag = requestTag(init?.body);
    const response = await fetch(url, init);
    const source = response.body;
    if (source === null || NULL_BODY_STATUSES.has(response.status)) return response;
    const reader = source.getReader();
    let seen = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const { done, value } = await reader.read();
        if (done) return controller.close();
        seen += value.byteLength;
        if (seen > MCP_MESSAGE_BYTES_MAX) {
          const error = integrationError(
            `MCP server ${quote(server)} answered more than ${MCP_MESSAGE_BYTES_MAX} bytes`,
            {
              hint: 'Ask the tool for less (a narrower query, a page of results).',
              details: { server, retry: false, limit: 'mcpMessageBytesMax', max: MCP_MESSAGE_BYTES_MAX, actual: seen },
            },
          );
          controller.error(error);
          await reader.cancel(error).catch(() => undefined);
          if (tag !== null) for (const stop of entry.stops.get(tag) ?? []) stop(error);
          return;
        }
        controller.enqueue(value);
      },
      cancel(reason) {
        return reader.cancel(reason);
      },
    });
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}

/** Statuses whose Response may not carry a body (the Response constructor refuses one). */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

/** Which request a POST carries: a tools/call's idempotency key, "tools/list", or null. */
function requestTag(body: unknown): string | null {
  if (typeof body !== 'string') return null;
  try {
    const message = JSON.parse(body) as { method?: unknown; params?: { _meta?: Record<string, unknown> } };
    if (message.method === LIST_TAG) return LIST_TAG;
    const key = message.method === 'tools/call' ? message.params?._meta?.[IDEMPOTENCY_META_KEY] : undefined;
    return typeof key === 'string' ? key : null;
  } catch {
    return null;
  }
}
