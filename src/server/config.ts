import { readFileSync } from 'node:fs';
import { EngineError, limitExceeded } from '../errors.js';
import { DEFAULT_LIMITS, type Limits, resolveLimits, CONFIG_BYTES_MAX } from '../limits.js';
import { parseProviders } from '../models/providers.js';
import type { ProviderConfig } from '../models/types.js';
import { parseIntegrations } from '../integrations/http.js';
import type { IntegrationConfig } from '../integrations/types.js';
import { parseMcpServers } from '../integrations/mcp-config.js';

/** What the operator configures for a server or worker process, from the file TALLY_CONFIG names. */
export interface ServerConfig {
  /** The file it was read from; null when TALLY_CONFIG is not set. */
  path: string | null;
  providers: ProviderConfig[];
  /** The HTTP APIs http tools may call (DESIGN §11). */
  integrations: IntegrationConfig[];
  /** The MCP servers whose tools may be imported and called, as written (checked here, parsed by the engine). */
  mcpServers: unknown[];
  limits: Partial<Limits>;
  /** What MCP clients are offered besides the tools their policies let them call. */
  mcp: McpConfig;
}

export interface McpConfig {
  /** Offer MCP clients the native graphql tool (the whole API under their policies). Default false. */
  graphqlTool: boolean;
}

const FIELDS = ['providers', 'integrations', 'mcpServers', 'limits', 'mcp'];
const MCP_FIELDS = ['graphqlTool'];

/**
 * Read the server configuration: a JSON file `{"providers": [...], "limits": {...}, "mcp":
 * {"graphqlTool": false}}` (each optional). Every problem names the file and the field; nothing is half-applied. API keys are
 * never in it: a provider names the environment variable that holds its key.
 */
export function readServerConfig(
  path: string | undefined = process.env.TALLY_CONFIG,
  env: NodeJS.ProcessEnv = process.env,
): ServerConfig {
  if (path === undefined || path === '')
    return { path: null, providers: [], integrations: [], mcpServers: [], limits: {}, mcp: { graphqlTool: false } };
  const where = `the configuration ${path}`;
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new EngineError(
      'BAD_REQUEST',
      `cannot read ${where}: ${code === 'ENOENT' ? 'no such file' : (code ?? (error as Error).message)}`,
      {
        hint: 'TALLY_CONFIG names a JSON file with "providers" and "limits"; unset it to run without one.',
      },
    );
  }
  if (Buffer.byteLength(text) > CONFIG_BYTES_MAX)
    throw limitExceeded(
      'configBytesMax',
      CONFIG_BYTES_MAX,
      Buffer.byteLength(text),
      `${where} is over ${CONFIG_BYTES_MAX} bytes`,
    );
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new EngineError('BAD_REQUEST', `${where} is not JSON: ${(error as Error).message}`, {
      hint: 'Fix the JSON syntax at the position shown.',
    });
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new EngineError('BAD_REQUEST', `${where} must be a JSON object`, {
      hint: 'Write {"providers": [...], "limits": {...}}.',
    });
  const config = value as Record<string, unknown>;
  for (const key of Object.keys(config)) {
    if (!FIELDS.includes(key))
      throw new EngineError('BAD_REQUEST', `${where}: ${JSON.stringify(key)} is not a configuration field`, {
        hint: `The fields are ${FIELDS.join(', ')}.`,
      });
  }
  const mcp = readMcp(where, config.mcp);
  let providers: ProviderConfig[];
  let integrations: IntegrationConfig[];
  let mcpServers: unknown[];
  try {
    providers = parseProviders(config.providers ?? [], env);
    integrations = parseIntegrations(config.integrations ?? []);
    // Checked now, so a bad block stops the server at start; handed on as written (the engine parses it).
    parseMcpServers(config.mcpServers ?? [], env);
    mcpServers = (config.mcpServers ?? []) as unknown[];
  } catch (error) {
    if (error instanceof EngineError)
      throw new EngineError(error.code, `${where}: ${error.message}`, { hint: error.hint, details: error.details });
    throw error;
  }
  const limits = config.limits ?? {};
  if (limits === null || typeof limits !== 'object' || Array.isArray(limits))
    throw new EngineError('BAD_REQUEST', `${where}: limits must be an object of limit names to integers`);
  for (const name of Object.keys(limits)) {
    if (!Object.hasOwn(DEFAULT_LIMITS, name)) {
      throw new EngineError('BAD_REQUEST', `${where}: limits.${name} is not a limit`, {
        hint: 'docs/reference/limits.md lists every limit by name.',
      });
    }
  }
  try {
    resolveLimits(limits as Partial<Limits>);
  } catch (error) {
    const refused = error instanceof EngineError ? error : null;
    throw new EngineError('BAD_REQUEST', `${where}: ${(error as Error).message}`, {
      ...(refused?.hint ? { hint: refused.hint } : {}),
      ...(refused?.details === undefined ? {} : { details: refused.details }),
    });
  }
  return { path, providers, integrations, mcpServers, limits: limits as Partial<Limits>, mcp };
}

/** The `mcp` field: an object of known fields, each of its type. */
function readMcp(where: string, value: unknown): McpConfig {
  if (value === undefined) return { graphqlTool: false };
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new EngineError('BAD_REQUEST', `${where}: mcp must be an object, got ${JSON.stringify(value)}`, {
      hint: 'Write "mcp": {"graphqlTool": true} to offer MCP clients the native graphql tool.',
    });
  for (const key of Object.keys(value)) {
    if (!MCP_FIELDS.includes(key))
      throw new EngineError('BAD_REQUEST', `${where}: mcp.${key} is not an MCP setting`, {
        hint: `The MCP settings are ${MCP_FIELDS.join(', ')}.`,
      });
  }
  const graphqlTool = (value as { graphqlTool?: unknown }).graphqlTool ?? false;
  if (typeof graphqlTool !== 'boolean')
    throw new EngineError(
      'BAD_REQUEST',
      `${where}: mcp.graphqlTool must be true or false, got ${JSON.stringify(graphqlTool)}`,
      { hint: 'true offers MCP clients the native graphql tool; false (the default) does not.' },
    );
  return { graphqlTool };
}
