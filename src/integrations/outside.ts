import type { Logger } from '../log.js';
import { Integrations, parseIntegrations } from './http.js';
import { parseMcpServers } from './mcp-config.js';
import type { McpTools } from './types.js';

/** What a process may reach outside Tally: the operator's integrations, and MCP servers (null: none). */
export interface Outside {
  integrations: Integrations;
  mcp: McpTools | null;
}

/**
 * The outside of an engine, from its options' `integrations` and `mcpServers` (as TALLY_CONFIG
 * writes them); credentials are read from `env` when a call is made, never kept in configuration.
 */
export async function openOutside(
  options: { integrations?: unknown; mcpServers?: unknown },
  logger: Logger,
  env: NodeJS.ProcessEnv = process.env,
): Promise<Outside> {
  const servers = options.mcpServers === undefined ? [] : parseMcpServers(options.mcpServers, env);
  // The MCP SDK's client is loaded only when a server is configured (as a model provider's SDK):
  // a process without one never loads it, and starts as fast as before.
  let mcp: McpTools | null = null;
  if (servers.length > 0) {
    const [{ McpServers }, { mcpTools }] = await Promise.all([import('./mcp-servers.js'), import('./mcp-tools.js')]);
    mcp = mcpTools(McpServers.create(servers, env, logger));
  }
  return {
    integrations: new Integrations(
      options.integrations === undefined ? [] : parseIntegrations(options.integrations),
      env,
    ),
    mcp,
  };
}
