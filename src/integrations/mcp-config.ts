/**
 * Interim: the `mcpServers` block is checked only for its shape until src/integrations/mcp-servers.ts
 * (parseMcpServers) lands.
 */
import { EngineError } from '../errors.js';

export function parseMcpServers(value: unknown): unknown[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new EngineError('BAD_REQUEST', 'mcpServers must be an array');
  return value;
}
