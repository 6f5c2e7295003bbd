import { randomUUID } from 'node:crypto';
import type { GraphQLFormattedError } from 'graphql';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  type CallToolResult,
  ErrorCode,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { FINISHED_STATUSES, WAIT_ENDS } from '../execution/status.js';
import { DEFAULT_LIMITS, LIST_PAGES_READ_MAX } from '../limits.js';
import type { McpBackend } from './backend.js';

export interface McpServerOptions {
  /** Tools per tools/list page (mcpToolsPageSize). */
  toolsPageSize: number;
  /** How long tools/call of a model or agent tool waits for its run in total (default: the mcpCallWaitMs limit's default). */
  callWaitMs?: number;
  /**
   * Whether the native graphql tool is offered (the operator's `mcp.graphqlTool` in TALLY_CONFIG;
   * default false): it is the whole API under the client's policies, past every tool's checks.
   */
  graphqlTool?: boolean;
}

const TOOL_FIELDS = 'name version kind title description inputSchema outputSchema access { readOnly destructive }';
const TOOLS_PAGE = `query($first: Int!, $after: String) { actions { tools(first: $first, after: $after) { nodes { ${TOOL_FIELDS} } pageInfo { hasNextPage endCursor } } } }`;
const NATIVE_TOOLS = '{ actions { nativeTools { name access { readOnly destructive } } } }';
const TOOL_BY_NAME = `query($name: String!) { actions { tool(name: $name) { version kind } } }`;
const EXECUTION_FIELDS = 'executionId status output error { code message hint details }';
const INVOKE = `mutation($name: String!, $input: InvokeInput!) { actions { invokeAction(name: $name, input: $input) { ${EXECUTION_FIELDS} } } }`;
const START = `mutation($name: String!, $input: InvokeInput!) { actions { startAction(name: $name, input: $input) { ${EXECUTION_FIELDS} } } }`;
const WAIT = `query($id: UUID!, $waitMs: Int, $after: Int) { actions { execution(executionId: $id, waitMs: $waitMs, progressAfter: $after) { ${EXECUTION_FIELDS} } } }`;
/** Progress messages per read (Execution.progress's default page). */
const PROGRESS_PAGE = 100;
const PROGRESS = `query($id: UUID!, $after: Int!) { actions { execution(executionId: $id) { progress(after: $after, first: ${PROGRESS_PAGE}) { seq text } } } }`;
/** Kinds that run in the worker, outside transactions: tools/call starts them and waits. */
const STARTED_KINDS = new Set(['model', 'agent', 'http', 'mcp']);
const ACCOUNT = `query($code: String!) { account(code: $code) { accountId code name status normalBalanceType
  balances(first: 100) { nodes { journalId currency settled { normalBalance { units } } pending { normalBalance { units } } encumbrance { normalBalance { units } } available(layer: ENCUMBRANCE) { normalBalance { units } } } } } }`;

/**
 * Pages of tools read to name the available tools (unknown tool) or to notice a change
 * (list_changed): mcpToolsPageSize × 10 actions, so one MCP request stays a bounded number of reads.
 */

interface ToolNode {
  name: string;
  version: number;
  kind?: string;
  title: string;
  description: string;
  inputSchema: Record<string, unknown>;
  outputSchema: Record<string, unknown> | null;
  access: { readOnly: boolean; destructive: boolean };
}

/** The native tools, described for an agent (their input is checked by the engine). */
const NATIVE: Record<string, Tool> = {
  graphql: {
    name: 'graphql',
    title: 'GraphQL',
    description: "Run one GraphQL operation against Tally's API under your policies.",
    inputSchema: {
      type: 'object',
      properties: { query: { type: 'string' }, variables: { type: 'object' } },
      required: ['query'],
    },
  },
  cel: {
    name: 'cel',
    title: 'CEL',
    description: 'Evaluate a CEL expression with optional bindings.',
    inputSchema: {
      type: 'object',
      properties: { expression: { type: 'string' }, bindings: { type: 'object' } },
      required: ['expression'],
    },
  },
};

/**
 * One MCP server for one client: tools/list is `actions.tools` (what the client may invoke, with
 * annotations derived from the tools' policies), tools/call is `invokeAction` at the latest ACTIVE
 * version, resources are accounts. Every answer comes from GraphQL requests made as the client.
 */
export function createMcpServer(backend: McpBackend, options: McpServerOptions): Server {
  const server = new Server(
    { name: 'tally', version: '0.1.0' },
    {
      capabilities: { tools: { listChanged: true }, resources: {} },
      instructions:
        'Tally is a double-entry ledger. Its tools are the ones your API client may invoke; each call is recorded as an execution. Pass _meta.executionId to retry a call idempotently.',
    },
  );

  server.setRequestHandler(ListToolsRequestSchema, async (request) =>
    listTools(backend, options, request.params?.cursor),
  );

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const meta = request.params._meta as Record<string, unknown> | undefined;
    const executionId = typeof meta?.executionId === 'string' ? meta.executionId : randomUUID();
    const token = meta?.progressToken;
    // The caller asked for progress: the call's status(text) messages, as notifications/progress.
    const progress =
      typeof token === 'string' || typeof token === 'number'
        ? progressReporter(backend, (n, text) =>
            extra.sendNotification({
              method: 'notifications/progress',
              params: { progressToken: token, progress: n, message: text },
            }),
          )
        : undefined;
    return callTool(
      backend,
      options,
      request.params.name,
      request.params.arguments ?? {},
      executionId,
      extra.signal,
      progress,
    );
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: [] }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      {
        uriTemplate: 'tally://accounts/{code}',
        name: 'account',
        title: 'Account balances',
        description: 'An account by its code, with its balance in every journal and currency, as JSON.',
        mimeType: 'application/json',
      },
    ],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (request) => {
    const match = /^tally:\/\/accounts\/([^/?#]+)$/.exec(request.params.uri);
    if (!match)
      throw new McpError(
        ErrorCode.InvalidParams,
        `no resource ${JSON.stringify(request.params.uri)}; accounts are tally://accounts/{code}`,
      );
    const result = await backend.graphql(ACCOUNT, { code: decodeURIComponent(match[1]!) });
    // -32002 is the specification's "resource not found".
    if (result.errors?.length)
      throw new McpError(
        result.errors[0]?.extensions?.code === 'NOT_FOUND' ? -32002 : ErrorCode.InvalidParams,
        describeErrors(result.errors),
      );
    return {
      contents: [
        {
          uri: request.params.uri,
          mimeType: 'application/json',
          text: JSON.stringify((result.data as { account: unknown }).account),
        },
      ],
    };
  });
  return server;
}

/** One page of tools; the first page also has the native tools the client may invoke. */
export async function listTools(
  backend: McpBackend,
  options: McpServerOptions,
  cursor: string | undefined,
): Promise<{ tools: Tool[]; nextCursor?: string }> {
  const page = await backend.graphql(TOOLS_PAGE, { first: options.toolsPageSize, after: cursor ?? null });
  if (page.errors?.length)
    throw new McpError(cursor ? ErrorCode.InvalidParams : ErrorCode.InternalError, describeErrors(page.errors));
  const connection = (
    page.data as {
      actions: { tools: { nodes: ToolNode[]; pageInfo: { hasNextPage: boolean; endCursor: string | null } } };
    }
  ).actions.tools;
  // A tool without a description is not offered: the description is what the model reads to choose it.
  const tools = connection.nodes.filter((node) => node.description.trim() !== '').map(toMcpTool);
  if (cursor === undefined) {
    const natives = await backend.graphql(NATIVE_TOOLS, {});
    const listed = (
      (natives.data as { actions?: { nativeTools: Array<{ name: string; access: ToolNode['access'] }> } } | null)
        ?.actions?.nativeTools ?? []
    ).filter(({ name }) => offersNative(options, name));
    tools.unshift(
      ...listed.flatMap(({ name, access }) =>
        NATIVE[name] ? [{ ...NATIVE[name], annotations: annotations(access, NATIVE[name].title) }] : [],
      ),
    );
  }
  const next = connection.pageInfo.hasNextPage ? connection.pageInfo.endCursor : null;
  return next ? { tools, nextCursor: next } : { tools };
}

/** Whether MCP clients get this native tool: cel always, graphql only when the operator says so. */
function offersNative(options: McpServerOptions, name: string): boolean {
  return name === 'cel' || (name === 'graphql' && options.graphqlTool === true);
}

/**
 * Derived from the policies, never typed by hand. A tool of Tally's is idempotent because every call
 * carries an execution id (the same `_meta.executionId` answers the same). One that reaches outside
 * (http, mcp) is open-world, and idempotent only when it is read-only: a tools/call without the same
 * execution id is a new call with a new idempotency key, which the service acts on again.
 */
function annotations(access: ToolNode['access'], title?: string, kind?: string): NonNullable<Tool['annotations']> {
  const outside = kind === 'http' || kind === 'mcp';
  return {
    ...(title === undefined ? {} : { title }),
    readOnlyHint: access.readOnly,
    destructiveHint: access.destructive,
    idempotentHint: outside ? access.readOnly : true,
    openWorldHint: outside,
  };
}

/** The title is the tool's own (tool.title, else its name), as GraphQL's Tool.title. */
function toMcpTool(node: ToolNode): Tool {
  const tool: Tool = {
    name: node.name,
    title: node.title,
    description: node.description,
    inputSchema: { ...node.inputSchema, type: 'object' },
    annotations: annotations(node.access, node.title, node.kind),
  };
  // MCP's structuredContent is an object: only an object output schema is advertised.
  if (node.outputSchema && node.outputSchema.type === 'object')
    tool.outputSchema = node.outputSchema as Tool['outputSchema'];
  return tool;
}

/** Sends a call's progress messages not sent yet, read as the client through Execution.progress. */
interface ProgressReporter {
  /** The seq of the last message sent (a long-poll's progressAfter). */
  readonly after: number;
  flush(executionId: string, signal?: AbortSignal): Promise<void>;
}

function progressReporter(backend: McpBackend, send: (n: number, text: string) => Promise<void>): ProgressReporter {
  let after = 0;
  let sent = 0;
  return {
    get after() {
      return after;
    },
    async flush(executionId, signal) {
      for (;;) {
        const read = await backend.graphql(PROGRESS, { id: executionId, after }, signal);
        const page =
          (read.data as { actions?: { execution?: { progress: Array<{ seq: number; text: string }> } } } | null)
            ?.actions?.execution?.progress ?? [];
        for (const message of page) {
          after = message.seq;
          await send(++sent, message.text);
        }
        if (page.length < PROGRESS_PAGE) return;
      }
    },
  };
}

/**
 * invokeAction of the latest ACTIVE version. A failed call (or a refused one) is a tool result with
 * isError and the code, message and hint, so a model can correct itself.
 */
export async function callTool(
  backend: McpBackend,
  options: McpServerOptions,
  name: string,
  args: Record<string, unknown>,
  executionId: string,
  signal?: AbortSignal,
  progress?: ProgressReporter,
): Promise<CallToolResult> {
  let actionVersion: number | null = null;
  let kind = 'tool';
  // A native tool not offered (graphql, unless the operator says so) is looked up like any name: not found.
  if (!offersNative(options, name)) {
    const found = await backend.graphql(TOOL_BY_NAME, { name });
    const error = found.errors?.[0];
    if (error) {
      if (error.extensions?.code !== 'NOT_FOUND') return failure(error);
      return failure({
        ...error,
        message: error.message,
        extensions: { ...error.extensions, hint: await availableNames(backend, options) },
      });
    }
    ({ version: actionVersion, kind } = (
      found.data as { actions: { tool: { version: number; kind: string } } }
    ).actions.tool);
  }
  let execution: ExecutionShape;
  if (STARTED_KINDS.has(kind)) {
    // A model or agent tool cannot be invoked: start it (same id and input, the version found) and wait.
    const started = await backend.graphql(START, { name, input: { executionId, actionVersion, input: args } });
    if (started.errors?.length) return failure(started.errors[0]!);
    const waited = await waitForRun(
      backend,
      options,
      (started.data as { actions: { startAction: ExecutionShape } }).actions.startAction,
      signal,
      progress,
    );
    if ('failed' in waited) return waited.failed;
    execution = waited.execution;
    if (execution.status === 'WAITING_APPROVAL') {
      // A person must decide on a call first: waiting here would only poll.
      return {
        content: [
          {
            type: 'text',
            text: `execution ${execution.executionId} is WAITING_APPROVAL: a call it made waits for a person's decision (actions.approvals(where: {status: PENDING})); ${readLater(backend, options, execution.executionId)}`,
          },
        ],
        _meta: { executionId: execution.executionId, status: execution.status },
      };
    }
    if (!FINISHED_STATUSES.has(execution.status)) {
      return {
        content: [
          {
            type: 'text',
            text: `execution ${execution.executionId} is still ${execution.status} after ${Math.round((options.callWaitMs ?? DEFAULT_LIMITS.mcpCallWaitMs) / 1000)} s; ${readLater(backend, options, execution.executionId)}`,
          },
        ],
        _meta: { executionId: execution.executionId, status: execution.status },
      };
    }
  } else {
    const result = await backend.graphql(INVOKE, { name, input: { executionId, actionVersion, input: args } });
    if (result.errors?.length) return failure(result.errors[0]!);
    execution = (result.data as { actions: { invokeAction: ExecutionShape } }).actions.invokeAction;
    // A call inside a request: its messages are visible once it committed, so they come just before its result.
    await progress?.flush(execution.executionId, signal);
  }
  if (execution.status !== 'SUCCEEDED' && execution.status !== 'CACHED') {
    return failure(
      {
        message: execution.error?.message ?? execution.status,
        extensions: {
          code: execution.error?.code ?? execution.status,
          hint: execution.error?.hint,
          details: execution.error?.details,
        },
      },
      execution.executionId,
    );
  }
  const text = JSON.stringify(execution.output);
  const structured =
    execution.output !== null && typeof execution.output === 'object' && !Array.isArray(execution.output);
  return {
    content: [{ type: 'text', text }],
    ...(structured ? { structuredContent: execution.output as Record<string, unknown> } : {}),
    _meta: { executionId: execution.executionId },
  };
}

/** How a client reads a run it stopped waiting for: the same call again (same _meta.executionId), or with the graphql tool when offered. */
function readLater(backend: McpBackend, options: McpServerOptions, executionId: string): string {
  const again = `call the tool again with _meta.executionId "${executionId}" to wait for it again`;
  if (!options.graphqlTool) return again;
  return `${again}, or read it with the graphql tool: { actions { execution(executionId: "${executionId}", waitMs: ${backend.waitMsMax}) { status output error { code message hint } } } }`;
}

/**
 * Long-poll a started execution (`execution(waitMs:)`, each wait at most the backend's waitMsMax)
 * until it is terminal, callWaitMs passed or the MCP request was cancelled; returns it as last read.
 */
async function waitForRun(
  backend: McpBackend,
  options: McpServerOptions,
  execution: ExecutionShape,
  signal?: AbortSignal,
  progress?: ProgressReporter,
): Promise<{ execution: ExecutionShape } | { failed: CallToolResult }> {
  const end = Date.now() + (options.callWaitMs ?? DEFAULT_LIMITS.mcpCallWaitMs);
  let waitMsMax = backend.waitMsMax;
  while (!WAIT_ENDS.has(execution.status) && !signal?.aborted) {
    const left = end - Date.now();
    if (left <= 0) break;
    // With a progress token, a new message also ends the wait: it is sent at once, then the wait goes on.
    const read = await backend.graphql(
      WAIT,
      { id: execution.executionId, waitMs: Math.min(waitMsMax, left), after: progress ? progress.after : null },
      signal,
    );
    const error = read.errors?.[0];
    const smaller = (error?.extensions?.details as { executionWaitMsMax?: unknown } | undefined)?.executionWaitMsMax;
    if (
      error?.extensions?.code === 'LIMIT_EXCEEDED' &&
      typeof smaller === 'number' &&
      smaller > 0 &&
      smaller < waitMsMax
    ) {
      // A server configured with a smaller executionWaitMsMax: ask for that.
      waitMsMax = smaller;
      continue;
    }
    if (error) return { failed: failure(error, execution.executionId) };
    execution = (read.data as { actions: { execution: ExecutionShape } }).actions.execution;
    await progress?.flush(execution.executionId, signal);
  }
  // Started and already waiting for a person (or over) before any wait: what it said so far.
  if (progress && progress.after === 0) await progress.flush(execution.executionId, signal);
  return { execution };
}

interface ExecutionShape {
  executionId: string;
  status: string;
  output: unknown;
  error: ErrorShape | null;
}

interface ErrorShape {
  code: string;
  message: string;
  hint?: string | null;
  details?: unknown;
}

/** The text a model reads: code and message, the hint, and for INPUT_INVALID each problem with its JSON pointer. */
function failure(error: GraphQLFormattedError, executionId?: string): CallToolResult {
  const ext = error.extensions ?? {};
  let text = `${String(ext.code ?? 'ERROR')}: ${error.message}`;
  if (typeof ext.hint === 'string' && ext.hint) text += `\nhint: ${ext.hint}`;
  const problems = (ext.details as { problems?: Array<{ pointer: string; message: string }> } | undefined)?.problems;
  if (Array.isArray(problems))
    text += `\nproblems:\n${problems.map((p) => `  ${p.pointer || '/'}: ${p.message}`).join('\n')}`;
  return {
    isError: true,
    content: [{ type: 'text', text }],
    ...(executionId ? { _meta: { executionId } } : {}),
  };
}

/** The hint for an unknown tool: the names this client may call (first pages only, bounded). */
async function availableNames(backend: McpBackend, options: McpServerOptions): Promise<string> {
  const names: string[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < LIST_PAGES_READ_MAX; page++) {
    const listed = await listTools(backend, options, cursor).catch(() => null);
    if (!listed) break;
    names.push(...listed.tools.map((t) => t.name));
    if (!listed.nextCursor) break;
    cursor = listed.nextCursor;
  }
  return names.length === 0 ? 'You may call no tools.' : `Available tools: ${names.join(', ')}.`;
}

function describeErrors(errors: readonly GraphQLFormattedError[]): string {
  return errors.map((e) => `${String(e.extensions?.code ?? 'ERROR')}: ${e.message}`).join('; ');
}

/** The tools a client may call (the first LIST_PAGES_READ_MAX pages), as text to compare with an earlier read. */
export async function readToolList(backend: McpBackend, options: McpServerOptions): Promise<string> {
  const pages: Tool[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < LIST_PAGES_READ_MAX; page++) {
    const listed = await listTools(backend, options, cursor);
    pages.push(...listed.tools);
    if (!listed.nextCursor) break;
    cursor = listed.nextCursor;
  }
  return JSON.stringify(pages);
}

/**
 * Sends notifications/tools/list_changed when what this client may call changed: `changed()` is
 * called after a commit that touched actions (a deploy, createAction, lockAction…); the list is
 * read again as the client and compared with the last one. Calls during a check coalesce into one.
 */
export function watchToolList(
  server: Server,
  backend: McpBackend,
  options: McpServerOptions,
  onError: (error: unknown) => void,
): { changed(): void } {
  let last: string | null = null;
  let running = false;
  let again = false;
  const read = (): Promise<string> => readToolList(backend, options);
  const check = async (): Promise<void> => {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        const now = await read();
        if (last !== null && now !== last) await server.sendToolListChanged();
        last = now;
      } while (again);
    } catch (error) {
      onError(error);
    } finally {
      running = false;
    }
  };
  void check();
  // Never inside the request that reported the change: the read is a request of its own.
  return { changed: () => void setImmediate(() => void check()) };
}
