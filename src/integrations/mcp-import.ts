/**
 * Importing an MCP server's tools as actions (`tally mcp import`): one action of kind "mcp" per
 * tool, whose config pins the tool's fingerprint. A tool that changed on the server becomes a new
 * version of its action, never a silent change to what callers run; an unchanged one is left alone.
 * The plan is data (createAction / updateAction inputs): whoever sends it does so under its own
 * policies (INSERT / UPDATE on actions.Action).
 */
import { NAME_PATTERN } from '../actions/names.js';
import { type ActionInput, RESERVED_TOOL_NAMES } from '../actions/types.js';
import { EngineError, quote } from '../errors.js';
import { newId } from '../ids.js';
import { TOOL_TITLE_MAX } from '../limits.js';
import { isRecord } from '../models/http.js';
import { type McpToolInfo, mcpToolFingerprint } from './mcp-servers.js';

/** The latest version of an action that holds a name an import wants, as far as the plan needs it. */
export interface ExistingAction {
  actionId: string;
  version: number;
  kind: string;
  config: Record<string, unknown>;
}

interface ItemBase {
  /** The tool's name on the server. */
  tool: string;
  /** The action's name. */
  name: string;
  actionId: string;
  fingerprint: string;
}

export type McpImportItem =
  | (ItemBase & { change: 'create'; input: ActionInput })
  /** `version`: the version the update makes; `previous`: the fingerprint it replaces. */
  | (ItemBase & { change: 'update'; version: number; previous: string | null; input: ActionInput })
  | (ItemBase & { change: 'unchanged'; version: number });

export interface McpImportOptions {
  /** Written before every action name (e.g. "crm_"), to keep two servers' tools apart. */
  prefix?: string;
  /** New actions' ids (default: random UUIDs). */
  newId?: () => string;
}

/** Most attempts of an imported tool that says it may be sent again (read-only or idempotent); any other gets one. */
export const MCP_RETRY_ATTEMPTS = 3;

const PREFIX = /^(?:[A-Za-z][A-Za-z0-9_-]*)?$/;

/** The action name of an MCP tool: the prefix and the tool's name, each character outside [A-Za-z0-9_-] as `_`. */
export function mcpActionName(tool: string, prefix = ''): string {
  return `${prefix}${tool}`.replace(/[^A-Za-z0-9_-]/g, '_');
}

/** The imported tool says it may be sent twice (its readOnlyHint or idempotentHint). */
export function mayResend(annotations: Record<string, unknown> | null | undefined): boolean {
  return annotations?.readOnlyHint === true || annotations?.idempotentHint === true;
}

/**
 * What importing `tools` of `server` does: for each tool, create its action, update it to a new
 * version (its fingerprint changed), or leave it (unchanged). Refuses, before anything is sent, a
 * name that is not a tool name, two tools that would share a name, and a name held by an action
 * that is not this server's import of this tool.
 */
export function importPlan(
  server: string,
  tools: McpToolInfo[],
  existing: (name: string) => ExistingAction | null,
  options: McpImportOptions = {},
): McpImportItem[] {
  const prefix = options.prefix ?? '';
  if (!PREFIX.test(prefix)) {
    throw new EngineError('BAD_REQUEST', `prefix ${quote(prefix)} is not the start of a tool name`, {
      hint: 'Use a letter, then letters, digits, _ and -, e.g. --prefix crm_.',
    });
  }
  const names = new Map<string, string>();
  for (const tool of tools) {
    const name = mcpActionName(tool.name, prefix);
    if (!NAME_PATTERN.test(name)) {
      throw new EngineError(
        'BAD_REQUEST',
        `tool ${quote(tool.name)} of MCP server ${quote(server)} would be the action ${quote(name)}, which is not a tool name (a letter, then letters, digits, _ and -, at most 64)`,
        {
          hint: /^[A-Za-z]/.test(name)
            ? 'The name is too long: shorten the prefix, or ask the server for a shorter tool name.'
            : 'Import with a prefix that starts with a letter, e.g. --prefix mcp_.',
          details: { server, tool: tool.name, name },
        },
      );
    }
    const folded = name.toLowerCase();
    if (RESERVED_TOOL_NAMES.includes(folded)) {
      throw new EngineError(
        'BAD_REQUEST',
        `tool ${quote(tool.name)} of MCP server ${quote(server)} would be the action ${quote(name)}, a reserved tool name`,
        {
          hint: `Import with a prefix, e.g. --prefix ${server.replace(/[^A-Za-z0-9_]/g, '_')}_.`,
          details: { server, tool: tool.name, name, reserved: [...RESERVED_TOOL_NAMES] },
        },
      );
    }
    const other = names.get(folded);
    if (other !== undefined) {
      throw new EngineError(
        'BAD_REQUEST',
        `tools ${quote(other)} and ${quote(tool.name)} of MCP server ${quote(server)} would both be the action ${quote(name)} (names differ only in characters outside [A-Za-z0-9_-] or in case)`,
        {
          hint: 'Action names are one per tool: ask the server to rename one of them.',
          details: { server, tools: [other, tool.name], name },
        },
      );
    }
    names.set(folded, tool.name);
  }

  return tools.map((tool): McpImportItem => {
    const name = mcpActionName(tool.name, prefix);
    const fingerprint = mcpToolFingerprint(tool);
    const version = versionInput(server, name, tool, fingerprint);
    const found = existing(name);
    if (found === null) {
      const input = { name, kind: 'mcp', ...version };
      return { change: 'create', tool: tool.name, name, actionId: (options.newId ?? newId)(), fingerprint, input };
    }
    checkOwner(server, tool.name, name, found);
    const base = { tool: tool.name, name, actionId: found.actionId, fingerprint };
    const previous = typeof found.config.fingerprint === 'string' ? found.config.fingerprint : null;
    if (previous === fingerprint) return { ...base, change: 'unchanged', version: found.version };
    return { ...base, change: 'update', version: found.version + 1, previous, input: version };
  });
}

/** A name may be taken only by this server's import of this same tool. */
function checkOwner(server: string, tool: string, name: string, found: ExistingAction): void {
  const fromServer = found.config.server;
  const fromTool = found.config.tool;
  if (found.kind === 'mcp' && fromServer === server && fromTool === tool) return;
  const held =
    found.kind !== 'mcp'
      ? `an action of kind ${quote(found.kind)}`
      : `the import of tool ${quote(fromTool)} of MCP server ${quote(fromServer)}`;
  throw new EngineError(
    'ALREADY_EXISTS',
    `the action name ${quote(name)} for tool ${quote(tool)} of MCP server ${quote(server)} is taken by ${held}`,
    {
      hint: 'Import with a prefix that keeps the names apart, e.g. --prefix mcp_.',
      details: { server, tool, name, actionId: found.actionId },
    },
  );
}

/** What every version of an imported tool's action says (createAction adds its name and kind). */
function versionInput(server: string, name: string, tool: McpToolInfo, fingerprint: string): ActionInput {
  const description =
    tool.description !== null && tool.description.trim() !== ''
      ? tool.description
      : `Tool ${tool.name} of MCP server ${server}`;
  // A title is a short label (TOOL_TITLE_MAX): a longer one is cut; the description is kept whole.
  const title =
    tool.title === null
      ? null
      : tool.title.length > TOOL_TITLE_MAX
        ? `${tool.title.slice(0, TOOL_TITLE_MAX - 1)}…`
        : tool.title;
  return {
    config: { server, tool: tool.name, fingerprint, annotations: isRecord(tool.annotations) ? tool.annotations : null },
    tool: {
      name,
      title,
      description,
      inputSchema: tool.inputSchema,
      outputSchema: tool.outputSchema,
    },
    // An imported tool performs one operation: calling its server (INSERT on actions.Integration),
    // which every layer above it must allow too. Nothing of the ledger.
    policies: [serverPolicy(server)],
    execution: { maxAttempts: mayResend(tool.annotations) ? MCP_RETRY_ATTEMPTS : 1 },
  };
}

/** The one policy of an imported tool: it may call its own server, and nothing else. */
export function serverPolicy(server: string): NonNullable<ActionInput['policies']>[number] {
  return {
    effect: 'ALLOW',
    actions: ['INSERT'],
    resources: ['actions.Integration'],
    assertions: { server: `context.document.kind == 'mcp' && context.document.name == '${server}'` },
  };
}
