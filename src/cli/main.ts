import { parseArgs } from 'node:util';
import { createEngine } from '../engine.js';
import { createServer } from '../server/http.js';
import { schemaVersion } from '../storage/database.js';
import {
  accountsCommand,
  balanceCommand,
  deployCommand,
  executionCommand,
  executionsCommand,
  EXIT,
  importCommand,
  type Io,
  OperationError,
  type Options,
  requireDatabase,
  runCommand,
  UsageError,
} from './commands.js';

const USAGE = `usage: tally <command> [options]

  serve      [--db PATH] [--port N] [--host H] [--no-worker] [--log-level LEVEL]
             serve GraphQL at /graphql (GraphiQL for browsers) and run started executions in-process
  worker     [--db PATH] [--drain] [--log-level LEVEL]
             run started executions beside a server (--drain: what is due, then exit)
  migrate    [--db PATH]                 create or upgrade the database, then exit
  deploy     [DIR] [--dry-run]           create what a project folder defines, new versions of what changed
  invoke     <tool> --input JSON|@file [--version N] [--execution-id ID]
  start      <tool> --input JSON|@file [--version N] [--execution-id ID]
  executions [--status S] [--action NAME] [--first N]
  execution  <id>                        the call tree, with status, duration and error code per call
  accounts   [--first N]
  balance    <account code or id> [--currency C]
  import     <file.csv>                  post transactions: header transactionId,tranCode,<params...>

where:     --db PATH (in-process, the engine's own authority) or --server URL with --key KEY
           (or $TALLY_SERVER, $TALLY_API_KEY; deploy also reads "server" from tally.json)
output:    --json on every command, for scripts
exit code: 0 ok, 1 the operation or execution failed, 2 usage
defaults:  serve/worker/migrate --db ./data/tally.db (or $TALLY_DB), --port 4000 ($PORT), --host 127.0.0.1 ($HOST),
           --log-level info ($TALLY_LOG_LEVEL; trace debug info warn error fatal silent)`;

const io: Io = {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
  tty: process.stderr.isTTY === true,
  env: process.env,
};

function usage(message: string): never {
  process.stderr.write(`tally: ${message}\n${USAGE}\n`);
  process.exit(EXIT.usage);
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  let parsed;
  try {
    parsed = parseArgs({
      args: rest,
      allowPositionals: true,
      strict: true,
      options: {
        db: { type: 'string' }, port: { type: 'string' }, host: { type: 'string' }, 'no-worker': { type: 'boolean' }, drain: { type: 'boolean' },
        server: { type: 'string' }, key: { type: 'string' }, json: { type: 'boolean' }, 'dry-run': { type: 'boolean' },
        input: { type: 'string' }, version: { type: 'string' }, 'execution-id': { type: 'string' },
        status: { type: 'string' }, action: { type: 'string' }, first: { type: 'string' }, currency: { type: 'string' },
        help: { type: 'boolean', short: 'h' }, 'log-level': { type: 'string' },
      },
    });
  } catch (error) {
    usage((error as Error).message);
  }
  const { values, positionals } = parsed;
  if (values.help || command === undefined || command === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return EXIT.ok;
  }
  const options = values as Options;
  const localDb = values.db ?? process.env.TALLY_DB ?? './data/tally.db';
  try {
    switch (command) {
      case 'serve':
        await serve(localDb, values.port, values.host, values['no-worker'] === true, values['log-level']);
        return EXIT.ok;
      case 'worker':
        // A worker runs what a server queued: a database that does not exist yet is a typo.
        requireDatabase(localDb);
        await runWorker(localDb, values.drain === true, values['log-level']);
        return EXIT.ok;
      case 'migrate': {
        const engine = await createEngine({ path: localDb });
        process.stdout.write(`tally: ${localDb} is at schema version ${schemaVersion(engine.db)}\n`);
        engine.close();
        return EXIT.ok;
      }
      case 'deploy':
        return await deployCommand(positionals, options, io);
      case 'invoke':
      case 'start':
        return await runCommand(command, positionals, options, io);
      case 'executions':
        return await executionsCommand(options, io);
      case 'execution':
        return await executionCommand(positionals, options, io);
      case 'accounts':
        return await accountsCommand(options, io);
      case 'balance':
        return await balanceCommand(positionals, options, io);
      case 'import':
        return await importCommand(positionals, options, io);
      default:
        usage(`unknown command ${JSON.stringify(command)}`);
    }
  } catch (error) {
    if (error instanceof UsageError) usage(error.message);
    if (error instanceof OperationError) {
      process.stderr.write(`tally: ${error.message}\n`);
      return EXIT.failed;
    }
    throw error;
  }
}

async function serve(db: string, portOption: string | undefined, hostOption: string | undefined, noWorker: boolean, logLevel: string | undefined): Promise<void> {
  const port = Number(portOption ?? process.env.PORT ?? 4000);
  if (!Number.isInteger(port) || port < 0 || port > 65535) usage(`--port ${JSON.stringify(portOption)} is not a port number`);
  const host = hostOption ?? process.env.HOST ?? '127.0.0.1';
  const { cliLogger } = await import('./logging.js');
  const logger = cliLogger(logLevel, (message) => new UsageError(message));
  const engine = await createEngine({ path: db, logger });
  const generated = engine.ensureAdmin(process.env.TALLY_ADMIN_KEY);
  if (generated) {
    // Shown now, before anything can fail: it is stored hashed and never shown again.
    process.stdout.write(`tally: created the admin client; its API key (shown once): ${generated}\n`);
    process.stdout.write('tally: set TALLY_ADMIN_KEY to choose the admin key yourself\n');
  }
  const worker = noWorker ? null : engine.createWorker({ owner: `serve-${process.pid}` });
  const server = createServer(engine, { logger, ...(worker ? { worker } : {}) });
  server.on('error', (error: NodeJS.ErrnoException) => {
    const why = error.code === 'EADDRINUSE' ? 'the port is in use' : error.code === 'EADDRNOTAVAIL' || error.code === 'ENOTFOUND' ? 'no such local address' : error.code ?? error.message;
    process.stderr.write(`tally: cannot serve on ${host}:${port}: ${why}\n`);
    void (worker?.stop() ?? Promise.resolve()).then(() => {
      engine.close();
      process.exit(EXIT.failed);
    });
  });
  server.listen(port, host, () => {
    if (worker) {
      engine.onStarted(() => worker.wake());
      worker.start();
    }
    const address = server.address();
    const actual = typeof address === 'object' && address ? address.port : port;
    process.stdout.write(`tally: serving ${db} at http://${host}:${actual}/graphql\n`);
  });
  // Requests run synchronously, so none is ever cut mid-transaction: stop accepting, let the
  // in-flight responses finish, finish the running attempt, then close the database.
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
  await new Promise(() => {});
}

/**
 * A worker process: attempts are synchronous, so a signal is handled between two attempts; the
 * attempt in progress always finishes (or, on kill -9, rolls back whole).
 */
async function runWorker(db: string, drain: boolean, logLevel: string | undefined): Promise<void> {
  const { cliLogger } = await import('./logging.js');
  const logger = cliLogger(logLevel, (message) => new UsageError(message));
  const engine = await createEngine({ path: db, logger });
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
  await new Promise(() => {});
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`tally: ${(error as Error).message ?? String(error)}\n`);
    process.exit(EXIT.failed);
  },
);
