import { parseArgs } from 'node:util';
import { createEngine } from '../engine.js';
import { createServer } from '../server/http.js';
import { schemaVersion } from '../storage/database.js';

const USAGE = `usage: tally <command> [options]

commands:
  serve    [--db PATH] [--port N] [--host H] [--no-worker]
                                               serve GraphQL over HTTP at /graphql, and run started
                                               executions in-process (unless --no-worker)
  worker   [--db PATH] [--drain]               run started executions (beside a server, or alone);
                                               --drain: run what is due, then exit
  migrate  [--db PATH]                         create or upgrade the database, then exit

defaults: --db ./data/tally.db (or $TALLY_DB), --port 4000 (or $PORT), --host 127.0.0.1 (or $HOST)`;

function fail(message: string): never {
  process.stderr.write(`tally: ${message}\n${USAGE}\n`);
  process.exit(2);
}

export async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  let parsed;
  try {
    parsed = parseArgs({
      args: rest,
      options: {
        db: { type: 'string' },
        port: { type: 'string' },
        host: { type: 'string' },
        'no-worker': { type: 'boolean' },
        drain: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    });
  } catch (error) {
    fail((error as Error).message);
  }
  const { values } = parsed;
  if (values.help || command === undefined || command === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const db = values.db ?? process.env.TALLY_DB ?? './data/tally.db';

  if (command === 'migrate') {
    const engine = await createEngine({ path: db });
    process.stdout.write(`tally: ${db} is at schema version ${schemaVersion(engine.db)}\n`);
    engine.close();
    return;
  }
  if (command === 'worker') {
    await runWorker(db, values.drain === true);
    return;
  }
  if (command !== 'serve') fail(`unknown command ${JSON.stringify(command)}`);

  const port = Number(values.port ?? process.env.PORT ?? 4000);
  if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`--port ${JSON.stringify(values.port)} is not a port number`);
  const host = values.host ?? process.env.HOST ?? '127.0.0.1';
  const engine = await createEngine({ path: db });
  const generated = engine.ensureAdmin(process.env.TALLY_ADMIN_KEY);
  const server = createServer(engine, { log: (line) => process.stderr.write(`${line}\n`) });
  const worker = values['no-worker'] ? null : engine.createWorker({ owner: `serve-${process.pid}` });
  if (worker) {
    engine.onStarted(() => worker.wake());
    worker.start();
  }
  server.listen(port, host, () => {
    const address = server.address();
    const actual = typeof address === 'object' && address ? address.port : port;
    process.stdout.write(`tally: serving ${db} at http://${host}:${actual}/graphql\n`);
    if (generated) {
      process.stdout.write(`tally: created the admin client; its API key (shown once): ${generated}\n`);
      process.stdout.write('tally: set TALLY_ADMIN_KEY to choose the admin key yourself\n');
    }
  });

  // Requests run synchronously, so none is ever cut mid-transaction: stop accepting, let the
  // in-flight responses finish, then close the database.
  const shutdown = (signal: string) => {
    process.stdout.write(`tally: ${signal}, shutting down\n`);
    server.close(() => {
      void (worker?.stop() ?? Promise.resolve()).then(() => {
        engine.close();
        process.exit(0);
      });
    });
    server.closeIdleConnections();
    setTimeout(() => server.closeAllConnections(), 5000).unref();
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}

/**
 * A worker process: attempts are synchronous, so a signal is handled between two attempts; the
 * attempt in progress always finishes (or, on kill -9, rolls back whole).
 */
async function runWorker(db: string, drain: boolean): Promise<void> {
  const engine = await createEngine({ path: db });
  const worker = engine.createWorker({ owner: `worker-${process.pid}` });
  if (drain) {
    const attempts = worker.drain();
    process.stdout.write(`tally: ran ${attempts} attempt(s)\n`);
    engine.close();
    return;
  }
  process.stdout.write(`tally: worker ${process.pid} running executions from ${db}\n`);
  worker.start();
  const stop = (signal: string) => {
    process.stdout.write(`tally: ${signal}, finishing the running attempt\n`);
    void worker.stop().then(() => {
      engine.close();
      process.exit(0);
    });
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
}

main(process.argv.slice(2)).catch((error: unknown) => {
  process.stderr.write(`tally: ${(error as Error).message ?? String(error)}\n`);
  process.exit(1);
});
