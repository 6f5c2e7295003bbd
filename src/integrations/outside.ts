import type { Logger } from '../log.js';
import { Integrations, parseIntegrations } from './http.js';
import { McpServers, parseMcpServers } from './mcp-servers.js';
import { mcpTools } from './mcp-tools.js';
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
export function openOutside(
  options: { integrations?: unknown; mcpServers?: unknown },
  logger: Logger,
  env: NodeJS.ProcessEnv = process.env,
): Outside {
  const servers = options.mcpServers === undefined ? [] : parseMcpServers(options.mcpServers, env);
  return {
    integrations: new Integrations(
      options.integrations === undefined ? [] : parseIntegrations(options.integrations),
      env,
    ),
    mcp: servers.length === 0 ? null : mcpTools(McpServers.create(servers, env, logger)),
  };
}
