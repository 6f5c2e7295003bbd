// A real HTTP server in this process, on a free port.
import type { EngineOptions } from '../../src/engine.js';
import { newEngine } from './engine.js';

/** An engine with an admin key behind a real HTTP server on a free port. */
export async function startServer(
  key: string,
  options: EngineOptions = {},
  serverOptions: import('../../src/server/http.js').ServerOptions = {},
) {
  const { createServer } = await import('../../src/server/http.js');
  const engine = await newEngine(options);
  engine.ensureAdmin(key);
  const server = createServer(engine, serverOptions);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    engine,
    server,
    url: `http://127.0.0.1:${port}/graphql`,
    async stop() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      engine.close();
    },
  };
}
