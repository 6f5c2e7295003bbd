/**
 * The world outside (DESIGN §11): the operator's integrations (HTTP APIs) and MCP servers, and
 * what one outbound call is handed. An outbound call never runs inside a database transaction: it
 * is a started execution (or an agent's tool call) run by the worker, with an idempotency key
 * derived from its execution, the same on every retry and after a crash.
 */

/** A header whose value is read from an environment variable of the server when a call is made (never stored). */
export interface SecretHeader {
  /** The environment variable that holds the value. */
  env: string;
  /** Written before the value (e.g. "Bearer "). */
  prefix: string;
}

/** An operator-configured HTTP API (`integrations` in TALLY_CONFIG). */
export interface IntegrationConfig {
  /** How http tools name it: `config.integration`. */
  name: string;
  /** scheme://host[:port][/base/path]: every request goes to this origin, under this path. */
  baseUrl: string;
  /** The methods tools may use (upper case). */
  methods: string[];
  /** Path prefixes (below baseUrl's path, each starting with "/") a request's path must fall under, segment-wise. */
  paths: string[];
  /** Headers sent on every request, each value read from an environment variable (credentials). */
  headers: Record<string, SecretHeader>;
  /** The header carrying the idempotency key (default "Idempotency-Key"). */
  idempotencyHeader: string;
  /** One request's timeout (ms). */
  timeoutMs: number;
  /** The largest request body sent (bytes). */
  requestBytesMax: number;
  /** The largest response body read (bytes); more fails the call. */
  responseBytesMax: number;
  /** Requests in flight to this integration from one process. */
  concurrency: number;
  /** Of those, the most one client (principal) may hold at once. */
  perClientConcurrency: number;
}

/** An operator-configured MCP server (`mcpServers` in TALLY_CONFIG): Streamable HTTP, or a command run over stdio. */
export type McpServerConfig = {
  name: string;
  timeoutMs: number;
  concurrency: number;
  perClientConcurrency: number;
} & (
  | { transport: 'http'; url: string; headers: Record<string, SecretHeader> }
  | { transport: 'stdio'; command: string; args: string[]; cwd: string | null; env: Record<string, SecretHeader> }
);

/** One outbound call as a runner hands it to an integration or an MCP server. */
export interface OutboundCall {
  /** The execution this call is (a started run, or an agent's tool call). */
  executionId: string;
  /** Derived from executionId with the database's secret: the same on every retry and after a crash. */
  idempotencyKey: string;
  /** Who the call runs for (per-client concurrency). */
  principal: string;
  /** Aborted when the run is cancelled, its lease lost or its worker stopping. */
  signal: AbortSignal;
  /** Epoch ms past which the call may not run (the run's deadline). */
  deadline: number;
  /**
   * Throws ACCESS_DENIED unless every layer of the call's authority (the client, the tools that
   * started it, the tool itself) allows INSERT on actions.Integration with this document: the
   * integration or server, and what is about to be sent ({kind, name, method, path} or {kind, name,
   * tool}). Called once the request is built, before anything is sent.
   */
  authorize(document: Record<string, unknown>): void;
  /**
   * Record that the request is about to be sent (in a short transaction of its own, checking the
   * run's lease); returns how many times it was recorded before for this execution (0: the first
   * time). A resumed call that finds a send before it cannot know whether that one arrived.
   */
  sending(): number;
}

/** What a run needs of the operator's MCP servers (src/integrations/mcp-servers.ts McpServers). */
export interface McpTools {
  /**
   * Throws unless an mcp tool's config names a configured server and is well formed, and (given the
   * version's tool definition) its fingerprint is that definition's.
   */
  check(
    config: Record<string, unknown>,
    tool?: { description: string; inputSchema: Record<string, unknown>; outputSchema: Record<string, unknown> | null },
  ): void;
  /** Call the imported tool `config` names with `args`; its output, or INTEGRATION_UNAVAILABLE / INTEGRATION_ERROR. */
  call(config: Record<string, unknown>, args: unknown, call: OutboundCall): Promise<unknown>;
  close(): Promise<void>;
}
