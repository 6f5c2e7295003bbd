/**
 * An action of kind "mcp": what createAction checks of its config (checkMcpConfig), and the servers
 * as a run calls the tool it imported (mcpTools, the McpTools the engine hands the runs).
 */
import { EngineError, quote } from '../errors.js';
import { isRecord } from '../models/http.js';
import type { McpServers } from './mcp-servers.js';
import { mcpToolFingerprint } from './mcp-wire.js';
import type { McpTools } from './types.js';
// ---------------------------------------------------------------------------------------------
// Checks of an action of kind "mcp".

const MCP_CONFIG_FIELDS = ['server', 'tool', 'fingerprint', 'annotations'];
const FINGERPRINT = /^[0-9a-f]{64}$/;
const CONFIG_HINT =
  "An mcp action's config is {server, tool, fingerprint, annotations?}, as `tally mcp import` writes it.";

/** What createAction checks for an action of kind "mcp": its config's shape, and that its server is configured. */
export function checkMcpConfig(
  servers: McpServers | null,
  config: Record<string, unknown>,
  tool?: { description: string; inputSchema: Record<string, unknown>; outputSchema: Record<string, unknown> | null },
): void {
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
  if (tool) {
    // The fingerprint is the server's tool as imported: the version's schemas, description and
    // annotations must be what it was taken from, or the hints a caller reads (readOnlyHint) and
    // the schema a model is shown would be whoever made the action's, not the server's. The
    // description may be the import's own words for a tool the server did not describe.
    const as = (description: string | null) =>
      mcpToolFingerprint({
        name: config.tool as string,
        title: null,
        description,
        inputSchema: tool.inputSchema,
        outputSchema: tool.outputSchema,
        annotations: annotations as Record<string, unknown> | null,
      });
    if (config.fingerprint !== as(tool.description) && config.fingerprint !== as(null))
      throw new EngineError(
        'BAD_REQUEST',
        `config.fingerprint does not match this version's tool (its schemas, description and config.annotations): an mcp action is what \`tally mcp import\` took from the server`,
        { hint: 'Import the tool again with tally mcp import, rather than writing or changing an mcp action by hand.' },
      );
  }
}

/**
 * The servers as a run uses them (McpTools): an mcp action's config checked at creation, and a call
 * of the tool it imported, against the fingerprint and hints it pinned.
 */
export function mcpTools(servers: McpServers): McpTools {
  return {
    check: (config, tool) => checkMcpConfig(servers, config, tool),
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
