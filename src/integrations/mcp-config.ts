/**
 * The operator's `mcpServers` block (TALLY_CONFIG): each server over Streamable HTTP or a stdio
 * command, its credentials named by environment variable (never written in configuration), its
 * timeout and concurrency; and the bounds every MCP connection keeps. Every problem is a
 * BAD_REQUEST naming the field path, and never echoes what may be a secret.
 */
import { EngineError, quote } from '../errors.js';
import { isRecord } from '../models/http.js';
import { ENV_NAME, HEADER_NAME, NAME } from './config.js';
import type { McpServerConfig, SecretHeader } from './types.js';

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
export const STDERR_TAIL_MAX = 2000;

/** The `_meta` key of tools/call that carries the call's idempotency key, so a server can dedupe. */
export const IDEMPOTENCY_META_KEY = 'io.tally/idempotencyKey';

// ---------------------------------------------------------------------------------------------
// The configuration.

/** A variable name in the child's environment (any case: a server may read `npm_config_x`). */
export const CHILD_ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** Headers the transport sets itself: a config that set them would break the protocol. */
export const TRANSPORT_HEADERS = new Set([
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
export const PREFIX_MAX = 64;
export const COMMON_FIELDS = ['name', 'timeoutMs', 'concurrency', 'perClientConcurrency'];
export const HTTP_FIELDS = new Set([...COMMON_FIELDS, 'url', 'headers']);
export const STDIO_FIELDS = new Set([...COMMON_FIELDS, 'command', 'args', 'cwd', 'env']);
/** Field names that look like a literal credential: refused with a hint of their own. */
export const SECRET_FIELDS =
  /^(api[-_]?key|key|token|access[-_]?token|secret|client[-_]?secret|auth(orization)?|bearer|password|passwd|credentials?)$/i;

export const HINT =
  'Each MCP server is {name, url, headers?: {"Header": {"env": "VAR", "prefix"?: "Bearer "}}, timeoutMs?, concurrency?, perClientConcurrency?} ' +
  'or {name, command, args?: [...], cwd?, env?: {"VAR_IN_CHILD": {"env": "VAR_HERE"}}, timeoutMs?, concurrency?, perClientConcurrency?}.';

export function bad(message: string, hint = HINT): EngineError {
  return new EngineError('BAD_REQUEST', message, { hint });
}

export function integerIn(path: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw bad(`${path} ${quote(value)} is not an integer from ${min} to ${max}`);
  }
  return value;
}

/** A value that may be a credential is named, never shown: only a short plain word is quoted. */
export function shown(value: unknown): string {
  return typeof value === 'string' && value.length <= 64 && /^[A-Za-z0-9_]*$/.test(value) ? `${quote(value)} ` : '';
}

/**
 * `{env: "VAR", prefix?: "..."}` at `path`: where a credential comes from. A string there is a
 * literal credential and is refused without being echoed.
 */
export function secretRef(path: string, value: unknown, prefixAllowed: boolean, example: string): SecretHeader {
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

export function parseUrl(at: string, value: unknown): string {
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

export function parseHeaders(at: string, value: unknown): Record<string, SecretHeader> {
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

export function parseChildEnv(at: string, value: unknown): Record<string, SecretHeader> {
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

export function parseStrings(path: string, value: unknown): string[] {
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
