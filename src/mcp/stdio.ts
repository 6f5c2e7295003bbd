import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { Engine } from '../engine.js';
import { DEFAULT_LIMITS } from '../limits.js';
import { Runtime } from '../runtime/runtime.js';
import { engineBackend, type McpBackend, remoteBackend } from './backend.js';
import { createMcpServer, watchToolList } from './server.js';

/** How often `tally mcp --db` looks for commits by other processes (a deploy) to send list_changed. */
const DATA_VERSION_POLL_MS = 1000;

function readDataVersion(engine: Engine): number {
  return engine.db.pragma('data_version', { simple: true }) as number;
}

/** Where `tally mcp` gets its tools: a database in-process as one client, or a server over GraphQL. */
export type StdioTarget = { engine: Engine; principal: string } | { server: string; apiKey: string };

/**
 * Serve MCP over stdin/stdout until stdin closes. stdout carries nothing but protocol messages
 * (the SDK writes them); anything said about the process goes to stderr.
 */
export async function serveStdio(
  target: StdioTarget,
  log: (line: string) => void,
  settings: { graphqlTool?: boolean } = {},
): Promise<void> {
  // In-process, requests take the runtime every door takes (the write queue's group commit and turns).
  const runtime = 'engine' in target ? new Runtime(target.engine) : null;
  const backend: McpBackend =
    'engine' in target
      ? engineBackend(runtime!, { principal: target.principal })
      : remoteBackend(target.server, target.apiKey, DEFAULT_LIMITS.requestTimeoutMs);
  const limits = 'engine' in target ? target.engine.limits : DEFAULT_LIMITS;
  const options = {
    toolsPageSize: limits.mcpToolsPageSize,
    callWaitMs: limits.mcpCallWaitMs,
    graphqlTool: settings.graphqlTool === true,
  };
  const server = createMcpServer(backend, options);
  if ('engine' in target) {
    // In-process, a change made through this engine (a tool calling createAction) is seen at once.
    const watcher = watchToolList(server, backend, options, (error) =>
      log(`tally mcp: ${(error as Error).message ?? String(error)}`),
    );
    runtime!.onActionsChanged(() => watcher.changed());
    // Another process (tally deploy, a server on the same file) commits: SQLite's data_version
    // moves. Checked every DATA_VERSION_POLL_MS, so the list is read again at most that often.
    let dataVersion = readDataVersion(target.engine);
    const poll = setInterval(() => {
      const now = readDataVersion(target.engine);
      if (now === dataVersion) return;
      dataVersion = now;
      watcher.changed();
    }, DATA_VERSION_POLL_MS);
    poll.unref();
    server.onclose = () => clearInterval(poll);
  }
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    const onclose = server.onclose;
    server.onclose = () => {
      onclose?.();
      resolve();
    };
    process.stdin.once('end', () => resolve());
  });
  await server.connect(transport);
  log(
    `tally mcp: serving ${'engine' in target ? `as ${target.principal}` : `${target.server} with an API key`} over stdio`,
  );
  await closed;
  await server.close();
}
