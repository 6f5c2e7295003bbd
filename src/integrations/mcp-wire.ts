/**
 * What the MCP client shares with its callers and helpers: a listed tool and its fingerprint, an
 * open connection, the mapping of what the SDK throws to INTEGRATION_UNAVAILABLE (retry) or
 * INTEGRATION_ERROR (final), and the bounded fetch under a Streamable HTTP connection.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { type CallToolResult, ErrorCode, McpError, type Tool } from '@modelcontextprotocol/sdk/types.js';
import { EngineError, quote } from '../errors.js';
import { canonicalJson, fingerprint } from '../ids.js';
import { isRecord } from '../models/http.js';
import { IDEMPOTENCY_META_KEY, MCP_ERROR_TEXT_MAX, MCP_MESSAGE_BYTES_MAX, MCP_OUTPUT_BYTES_MAX } from './mcp-config.js';
import type { ServerEntry } from './mcp-servers.js';

/** The tag of a tools/list request (a bounded fetch stops the request an answer belongs to by it). */
export const LIST_TAG = 'tools/list';
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
      // No description and an empty one are the same (the import words one of its own for either).
      description: tool.description !== null && tool.description.trim() !== '' ? tool.description : null,
    }),
  );
}

export function toolInfo(tool: Tool): McpToolInfo {
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

export interface Listed {
  info: McpToolInfo;
  fingerprint: string;
}

/** One open connection to a server: its client, and its tool list while no list_changed came. */
export interface Connection {
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

// ---------------------------------------------------------------------------------------------
// Helpers.

/** A connection that did not open: the SDK's error, and its message with the credentials taken out. */
export class ConnectFailure extends Error {
  constructor(
    readonly error: unknown,
    message: string,
  ) {
    super(message);
  }
}

export function integrationError(
  message: string,
  options: { hint?: string; details?: Record<string, unknown> },
): EngineError {
  return new EngineError('INTEGRATION_ERROR', message, {
    ...(options.hint === undefined ? {} : { hint: options.hint }),
    details: { retry: false, ...options.details },
  });
}

export function unavailable(message: string, details: Record<string, unknown>): EngineError {
  return new EngineError('INTEGRATION_UNAVAILABLE', message, { details: { ...details, retry: true } });
}

/** A retry may fix it: no connection, a timeout, the connection closed, the server busy or failing. */
export function isUnavailable(error: unknown): boolean {
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

export function isTimeout(error: unknown): boolean {
  return error instanceof McpError && error.code === ErrorCode.RequestTimeout;
}

/** An error's message, with where a stdio child stopped (its stderr's end) when that explains it. */
export function describe(error: unknown, connection: Connection | null): string {
  const message = error instanceof Error ? error.message : String(error);
  const cause = error instanceof Error && error.cause instanceof Error ? ` (${error.cause.message})` : '';
  const stderr = connection?.stderr.trim() ?? '';
  return `${message}${cause}${stderr !== '' && isUnavailable(error) ? `; its stderr ends: ${stderr.slice(-200)}` : ''}`;
}

export function cut(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** A tool error's words: its text blocks, else its content as JSON. */
export function errorText(content: CallToolResult['content'] | undefined): string {
  const blocks = content ?? [];
  const texts = blocks.flatMap((block) => (block.type === 'text' ? [block.text] : []));
  return texts.length > 0 ? texts.join('\n') : cut(JSON.stringify(blocks), 4 * MCP_ERROR_TEXT_MAX);
}

/** Every string of a JSON value (keys too) passed through `redact`. */
export function redactStrings(value: unknown, redactText: (text: string) => string): unknown {
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
export function within<T>(promise: Promise<T>, signal: AbortSignal, deadline: number, error: () => Error): Promise<T> {
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
export function boundedFetch(entry: ServerEntry): (url: string | URL, init?: RequestInit) => Promise<Response> {
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
export const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

/** Which request a POST carries: a tools/call's idempotency key, "tools/list", or null. */
export function requestTag(body: unknown): string | null {
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

/** What a tool answered, as an execution's output: bounded, and without the server's credentials. */
export function toolOutput(entry: ServerEntry, result: CallToolResult, toolName: string, what: string): unknown {
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
