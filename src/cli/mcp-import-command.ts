import { EngineError } from '../errors.js';
import { type ExistingAction, importPlan, type McpImportItem, mcpActionName } from '../integrations/mcp-import.js';
import { McpServers, parseMcpServers } from '../integrations/mcp-servers.js';
import type { McpServerConfig } from '../integrations/types.js';
import { readServerConfig } from '../server/config.js';
import { onlyArg } from './args.js';
import { call, openTarget, operationError } from './connect.js';
import { EXIT, OperationError, UsageError } from './errors.js';
import type { Io, Options } from './io.js';

/*
 * tally mcp import <server>: list a configured MCP server's tools and make each an action of kind
 * "mcp" on the target (--db, --server, ...), under the caller's policies (INSERT / UPDATE on
 * actions.Action): created, updated to a new version when the tool changed, or left unchanged.
 * Each action is its own request, so a failure part-way leaves the earlier ones done, and a run
 * again finds them unchanged.
 */

const EXISTING = 'query($name: String!) { actions { action(name: $name) { actionId version kind config } } }';
const CREATE =
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }';
const UPDATE =
  'mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) { version } } }';

/**
 * TALLY_CONFIG's `mcpServers`, parsed. src/server/config.ts keeps them as written (the engine
 * parses them); should it come to parse them itself, this is `readServerConfig(...).mcpServers`.
 */
export function readMcpServersConfig(env: Io['env']): McpServerConfig[] {
  const config = readServerConfig(env.TALLY_CONFIG, env);
  try {
    return parseMcpServers(config.mcpServers, env);
  } catch (error) {
    if (error instanceof EngineError)
      throw new EngineError(error.code, `the configuration ${config.path}: ${error.message}`, { hint: error.hint });
    throw error;
  }
}

/** tally mcp import <server> [--prefix p] [--dry-run]: one line per tool, what became of its action. */
export async function mcpImportCommand(
  args: string[],
  options: Options,
  io: Io,
  readConfig: (env: Io['env']) => McpServerConfig[] = readMcpServersConfig,
): Promise<number> {
  const server = onlyArg(args, 'MCP server');
  if (!server) throw new UsageError('say which MCP server to import from: tally mcp import <server>');
  if (options.as !== undefined)
    throw new UsageError("--as is for serving MCP; an import runs as the target's caller (--key, or --db)");
  const prefix = options.prefix === undefined ? '' : String(options.prefix);
  const dryRun = options['dry-run'] === true;

  const servers = McpServers.create(readConfig(io.env), io.env);
  // The target first: a wrong --db or --server is said before the MCP server is reached.
  const target = await openTarget(options, io);
  try {
    let tools: Awaited<ReturnType<McpServers['listTools']>>;
    try {
      tools = await servers.listTools(server);
    } catch (error) {
      if (error instanceof EngineError) throw new OperationError(error.message, error.code, error.hint, true);
      throw error;
    } finally {
      await servers.close();
    }
    const existing = new Map<string, ExistingAction>();
    for (const tool of tools) {
      const name = mcpActionName(tool.name, prefix);
      const found = await readAction(target, name);
      if (found !== null) existing.set(name, found);
    }
    let plan: McpImportItem[];
    try {
      plan = importPlan(server, tools, (name) => existing.get(name) ?? null, { prefix });
    } catch (error) {
      if (error instanceof EngineError) throw new OperationError(error.message, error.code, error.hint, true);
      throw error;
    }
    const done: Array<{ tool: string; action: string; change: string; version: number }> = [];
    for (const item of plan) {
      let version = item.change === 'create' ? 1 : item.version;
      if (!dryRun && item.change !== 'unchanged') {
        const data = await call(target, item.change === 'create' ? CREATE : UPDATE, {
          id: item.actionId,
          input: item.input,
        });
        version = Number((item.change === 'create' ? data.actions.createAction : data.actions.updateAction).version);
      }
      done.push({ tool: item.tool, action: item.name, change: item.change, version });
      if (!options.json) io.out(`${line(item, version, dryRun)}\n`);
    }
    if (options.json) io.out(`${JSON.stringify({ server, dryRun, actions: done }, null, 2)}\n`);
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

async function readAction(
  target: Awaited<ReturnType<typeof openTarget>>,
  name: string,
): Promise<ExistingAction | null> {
  const result = await target.request(EXISTING, { name });
  if (result.errors?.[0]?.extensions?.code === 'NOT_FOUND') return null;
  const error = operationError(result);
  if (error) throw error;
  return result.data?.actions.action as ExistingAction;
}

function line(item: McpImportItem, version: number, dryRun: boolean): string {
  const would = dryRun ? 'would be ' : '';
  const of = `(tool ${item.tool})`;
  switch (item.change) {
    case 'create':
      return `${item.name}: ${would}created, version ${version} ${of}`;
    case 'update':
      return `${item.name}: ${would}updated to version ${version}: the tool changed ${of}`;
    case 'unchanged':
      return `${item.name}: unchanged, version ${version} ${of}`;
  }
}
