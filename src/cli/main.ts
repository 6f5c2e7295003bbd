import { existsSync, readdirSync, rmdirSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';
import type { Engine } from '../engine.js';
import { EngineError } from '../errors.js';
import { isPostgresUrl, redact } from '../storage/pg/connection.js';
import { EXIT, OperationError, UsageError } from './errors.js';
import type { Io, Options } from './io.js';
import {
  type CommandSpec,
  COMMANDS,
  formatCommandList,
  formatHelp,
  formatUsage,
  packageVersion,
  parseOptions,
} from './usage.js';

// The engine, the server and the commands are imported when a command runs, so that `--help`,
// `--version` and usage errors answer at once.
const io: Io = {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
  tty: process.stderr.isTTY === true,
  env: process.env,
};

/** parseArgs' messages, shortened to what the user typed wrong. */
function parseArgsMessage(error: Error & { code?: string }): string {
  const option = /'(-[^' ]+)/.exec(error.message)?.[1];
  if (error.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && option) return `unknown option ${option}`;
  if (error.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && option)
    return /argument missing/.test(error.message) ? `${option} needs a value` : `${option} takes no value`;
  if (error.code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') return error.message.replace(/\. .*/s, '');
  return error.message;
}

/**
 * Print an error the way the command was asked to talk (text on stderr, or under --json one JSON
 * object on stdout) and return the exit code: 2 for a usage error (with that command's usage), 1 otherwise.
 */
function report(error: unknown, spec: CommandSpec | undefined, json: boolean): number {
  if (error instanceof UsageError) {
    const hint = spec ? `tally ${spec.name} --help shows its options and examples` : 'tally --help lists the commands';
    if (json) io.out(`${JSON.stringify({ error: { code: 'USAGE', message: error.message, hint } })}\n`);
    else io.err(`tally: ${error.message}\n${spec ? formatUsage(spec) : hint}\n`);
    return EXIT.usage;
  }
  const known = error instanceof OperationError || error instanceof EngineError;
  const code = known ? error.code : 'FAILED';
  const hint = known ? error.hint : undefined;
  const message = (error as Error)?.message ?? String(error);
  if (json) io.out(`${JSON.stringify({ error: { code, message, hint: hint ?? null } })}\n`);
  else {
    const prefix = error instanceof OperationError && error.showCode ? `${code}: ` : '';
    io.err(`tally: ${prefix}${message}${hint ? `\n  hint: ${hint}` : ''}\n`);
  }
  return EXIT.failed;
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined) {
    io.err(`${formatCommandList()}\n`);
    return EXIT.usage;
  }
  if (name === '--help' || name === '-h') {
    io.out(`${formatCommandList()}\n`);
    return EXIT.ok;
  }
  if (name === '--version' || name === '-v') {
    io.out(`tally ${packageVersion()}\n`);
    return EXIT.ok;
  }
  const json = rest.includes('--json');
  if (name === 'help') {
    const topic = rest.find((a) => !a.startsWith('-'));
    if (topic === undefined) io.out(`${formatCommandList()}\n`);
    else if (COMMANDS[topic]) io.out(`${formatHelp(COMMANDS[topic])}\n`);
    else return report(new UsageError(`unknown command ${JSON.stringify(topic)}`), undefined, json);
    return EXIT.ok;
  }
  const spec = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (!spec) return report(new UsageError(`unknown command ${JSON.stringify(name)}`), undefined, json);
  let parsed;
  try {
    parsed = parseArgs({ args: rest, allowPositionals: true, strict: true, options: parseOptions(spec) });
  } catch (error) {
    return report(new UsageError(parseArgsMessage(error as Error)), spec, json);
  }
  const { values, positionals } = parsed;
  if (values.help) {
    io.out(`${formatHelp(spec)}\n`);
    return EXIT.ok;
  }
  try {
    return await run(spec.name, positionals, values as Options);
  } catch (error) {
    return report(error, spec, json);
  }
}

async function run(command: string, positionals: string[], options: Options): Promise<number> {
  const localDb =
    options.db === undefined
      ? process.env.TALLY_DATABASE_URL || process.env.TALLY_DB || './data/tally.db'
      : String(options.db);
  const noArgs = () => {
    if (positionals.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`);
  };
  const commands = await import('./commands.js');
  switch (command) {
    case 'serve':
      noArgs();
      await serve(localDb, options);
      return EXIT.ok;
    case 'worker':
      noArgs();
      // A worker runs what a server queued: a database that does not exist yet is a typo.
      commands.requireDatabase(localDb);
      await runWorker(localDb, options);
      return EXIT.ok;
    case 'migrate': {
      noArgs();
      const { createEngine } = await import('../engine.js');
      const { schemaVersion } = await import('../storage/database.js');
      const engine = await createEngine({ path: localDb, ...(await serverConfig()) });
      io.out(`tally: ${redact(localDb)} is at schema version ${schemaVersion(engine.db)}\n`);
      engine.close();
      return EXIT.ok;
    }
    case 'deploy':
      return await commands.deployCommand(positionals, options, io);
    case 'invoke':
    case 'start':
      return await commands.runCommand(command, positionals, options, io);
    case 'executions':
      return await commands.executionsCommand(positionals, options, io);
    case 'execution':
      return await commands.executionCommand(positionals, options, io);
    case 'chat': {
      const { chatCommand } = await import('./chat.js');
      return await chatCommand(positionals, options, io);
    }
    case 'approvals': {
      const { approvalsCommand } = await import('./chat.js');
      return await approvalsCommand(positionals, options, io);
    }
    case 'approve':
    case 'reject': {
      const { decideCommand } = await import('./chat.js');
      return await decideCommand(command, positionals, options, io);
    }
    case 'accounts':
      return await commands.accountsCommand(positionals, options, io);
    case 'balance':
      return await commands.balanceCommand(positionals, options, io);
    case 'transactions':
      return await commands.transactionsCommand(positionals, options, io);
    case 'post':
      return await commands.postCommand(positionals, options, io);
    case 'void':
      return await commands.voidCommand(positionals, options, io);
    case 'gql':
      return await commands.gqlCommand(positionals, options, io);
    case 'import':
      return await commands.importCommand(positionals, options, io);
    case 'mcp':
      if (positionals[0] === 'import') return await commands.mcpImportCommand(positionals.slice(1), options, io);
      if (options.prefix !== undefined || options['dry-run'] !== undefined)
        throw new UsageError('--prefix and --dry-run are for tally mcp import');
      noArgs();
      await serveMcp(options);
      return EXIT.ok;
    default:
      throw new UsageError(`unknown command ${JSON.stringify(command)}`);
  }
}

const KEY_PREFIX = 'tly_';

/**
 * Whether serving this database with TALLY_ADMIN_KEY may go ahead: a database whose admin has
 * another key keeps it unless --rotate-admin-key says to replace it. Returns whether it will rotate.
 */
function checkAdminKey(engine: Engine, db: string, adminKey: string | undefined, rotate: boolean): boolean {
  if (adminKey === undefined) return false;
  const admin = engine.graphql('{ auth { client(principal: "admin") { principal } } }');
  if (admin.errors || engine.authenticate(adminKey) === 'admin') return false;
  if (rotate) return true;
  throw new OperationError(
    `${redact(db)} already has an admin key, and TALLY_ADMIN_KEY is a different one`,
    'ALREADY_EXISTS',
    'Start it with the admin key it has (or without TALLY_ADMIN_KEY), or add --rotate-admin-key to make TALLY_ADMIN_KEY the admin key (the old one stops working).',
  );
}

/** Listen, or say why not in words a person can act on. */
function listen(server: import('node:http').Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', (error: NodeJS.ErrnoException) => {
      const why =
        error.code === 'EADDRINUSE'
          ? 'the port is in use'
          : error.code === 'EADDRNOTAVAIL' || error.code === 'ENOTFOUND'
            ? 'no such local address'
            : error.code === 'EACCES'
              ? 'not allowed to use this port'
              : (error.code ?? error.message);
      const hint =
        error.code === 'EADDRINUSE'
          ? `Stop what serves on port ${port} (another tally serve?), or pick another: --port N or PORT=N (--port 0 picks a free one).`
          : 'Use --host 127.0.0.1 (or an address of this machine) and a port from 1024 up.';
      reject(new OperationError(`cannot serve on ${host}:${port}: ${why}`, 'UNAVAILABLE', hint));
    });
    server.listen(port, host, () => resolve());
  });
}

/** Remove a database file this process created (and its WAL, and a folder made for it) after a failed start. */
function removeNewDatabase(db: string, dirExisted: boolean): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${db}${suffix}`, { force: true });
  if (!dirExisted && readdirSync(dirname(db)).length === 0) rmdirSync(dirname(db));
}

/** The read pool of `tally serve`, or undefined when its threads cannot start (said in the log; queries then run on the writer). */
async function startReadPool(
  db: string,
  logger: import('../log.js').Logger,
): Promise<import('../runtime/read-pool.js').ReadPool | undefined> {
  const { ReadPool } = await import('../runtime/read-pool.js');
  const config = await serverConfig();
  const logError = (error: unknown) =>
    logger.error(
      { event: 'internal', error: error instanceof Error ? (error.stack ?? error.message) : String(error) },
      'read thread failed',
    );
  try {
    return await ReadPool.start({ path: db, limits: config.limits, providers: config.providers, logError });
  } catch (error) {
    logError(error);
    return undefined;
  }
}

/** The writer thread of `tally serve`, or undefined when it cannot start (said in the log; requests then run on the main thread). */
async function startWriter(
  db: string,
  logger: import('../log.js').Logger,
  durability: 'normal' | 'full',
  worker: { owner: string } | null,
  config: ServerEngineConfig,
): Promise<import('../runtime/writer-thread.js').WriterThread | undefined> {
  const { WriterThread } = await import('../runtime/writer-thread.js');
  const logError = (error: unknown) =>
    logger.error(
      { event: 'internal', error: error instanceof Error ? (error.stack ?? error.message) : String(error) },
      'writer thread failed',
    );
  const level = (logger as { level?: unknown }).level;
  try {
    return await WriterThread.start({
      path: db,
      durability,
      limits: config.limits,
      providers: config.providers,
      integrations: config.integrations,
      mcpServers: config.mcpServers,
      log:
        typeof level === 'string'
          ? { level: level as import('../log.js').LogLevel, pretty: process.stdout.isTTY === true }
          : null,
      worker,
      logError,
    });
  } catch (error) {
    logError(error);
    return undefined;
  }
}

/** --durability normal|full (default: $TALLY_DURABILITY, else normal). */
function durabilityOption(options: Options): 'normal' | 'full' {
  const given = options.durability === undefined ? process.env.TALLY_DURABILITY : String(options.durability);
  if (given === undefined || given === '' || given === 'normal') return 'normal';
  if (given === 'full') return 'full';
  throw new UsageError(
    `--durability ${JSON.stringify(given)} is not a durability: use normal (the default) or full (sync every commit to disk)`,
  );
}

/**
 * tally serve: the checks that can fail come before anything is written (the admin key's format,
 * then an admin key that differs from the database's, then the port); a database file this start
 * created is removed when it fails.
 */
async function serve(db: string, options: Options): Promise<void> {
  const portOption = options.port === undefined ? undefined : String(options.port);
  const port = Number(portOption ?? process.env.PORT ?? 4000);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new UsageError(`--port ${JSON.stringify(portOption ?? process.env.PORT)} is not a port number (0 to 65535)`);
  const host = options.host === undefined ? (process.env.HOST ?? '127.0.0.1') : String(options.host);
  const adminKey = process.env.TALLY_ADMIN_KEY;
  if (adminKey !== undefined && !adminKey.startsWith(KEY_PREFIX)) {
    throw new OperationError(
      `TALLY_ADMIN_KEY must start with ${KEY_PREFIX}`,
      'BAD_REQUEST',
      `Generate one, e.g. export TALLY_ADMIN_KEY=${KEY_PREFIX}$(openssl rand -hex 32), or unset it to have one generated.`,
    );
  }
  // PostgreSQL: one engine on the HTTP thread; the writer thread and the read pool are SQLite's
  // (WAL readers beside one writer); PostgreSQL scales by more processes (docs/guides/postgresql.md).
  const onPostgres = isPostgresUrl(db);
  const fresh = db !== ':memory:' && !onPostgres && !existsSync(db);
  const dirExisted = existsSync(dirname(db));
  const { cliLogger } = await import('./logging.js');
  const logger = cliLogger(options['log-level'], (message) => new UsageError(message));
  const { createEngine } = await import('../engine.js');
  const { attachReadPool, attachWriter, createServer } = await import('../server/http.js');
  const durability = durabilityOption(options);
  const config = await serverConfig();
  // With a writer thread (a database file, writerThreads 1), its engine checkpoints in the
  // background; this one, which only checks keys and routes once the thread is up, checkpoints at
  // commit as SQLite does.
  const { resolveLimits } = await import('../limits.js');
  const writerThread = db !== ':memory:' && !onPostgres && resolveLimits(config.limits).writerThreads > 0;
  const engine = await createEngine({
    path: db,
    logger,
    durability,
    ...config,
    ...(writerThread ? { checkpointIntervalMs: 0 } : {}),
  });
  const worker = options['no-worker'] === true ? null : engine.createWorker({ owner: `serve-${process.pid}` });
  const server = createServer(engine, {
    logger,
    ...(worker ? { worker } : {}),
    mcpGraphqlTool: (await mcpConfig()).graphqlTool,
  });
  let rotate: boolean;
  try {
    rotate = checkAdminKey(engine, db, adminKey, options['rotate-admin-key'] === true);
    await listen(server, port, host);
  } catch (error) {
    engine.close();
    if (fresh) removeNewDatabase(db, dirExisted);
    throw error;
  }
  const generated = engine.ensureAdmin(adminKey);
  if (generated) {
    // Shown now: it is stored hashed and never shown again.
    io.out(`tally: created the admin client; its API key (shown once): ${generated}\n`);
    if (adminKey === undefined) io.out('tally: set TALLY_ADMIN_KEY to choose the admin key yourself\n');
  }
  if (rotate)
    io.out('tally: rotated the admin key: TALLY_ADMIN_KEY is the admin key now, the previous one no longer works\n');
  if (worker) {
    engine.onStarted(() => worker.wake());
    worker.start();
  }
  const address = server.address();
  const actual = typeof address === 'object' && address ? address.port : port;
  io.out(`tally: serving ${redact(db)} at http://${host}:${actual}/graphql\n`);
  // Queries on read-only connections in worker threads, beside the writer (readPoolThreads; 0:
  // none). Started after listening; until its threads are up, queries run on the writer.
  let readPool: import('../runtime/read-pool.js').ReadPool | undefined;
  let writer: import('../runtime/writer-thread.js').WriterThread | undefined;
  let stopping = false;
  // The writer on a thread of its own (its engine and the queue worker), so that a running tool
  // never holds this thread, which then only routes and replies. Started after listening; until it
  // is up, requests run on this thread's engine, which stays open for the key check and routing.
  if (writerThread) {
    void startWriter(db, logger, durability, worker === null ? null : { owner: `serve-${process.pid}` }, config).then(
      async (thread) => {
        if (!thread) return;
        if (stopping) return void thread.close();
        writer = thread;
        attachWriter(server, thread);
        logger.info(
          { event: 'writer' },
          'writer thread started: mutations, tools and the queue worker run beside the HTTP thread',
        );
        // The thread runs its own queue worker: this one finishes its attempt and stops.
        await worker?.stop();
      },
    );
  }
  const pooled =
    db !== ':memory:' && !onPostgres && engine.limits.readPoolThreads > 0
      ? startReadPool(db, logger)
      : Promise.resolve(undefined);
  void pooled.then((pool) => {
    if (!pool) return;
    if (stopping) return void pool.close();
    readPool = pool;
    attachReadPool(server, pool);
    logger.info(
      { event: 'reads', threads: pool.stats().threads },
      `read pool started: ${pool.stats().threads} thread(s) answer queries beside the writer`,
    );
  });
  // Requests run synchronously, so none is ever cut mid-transaction: stop accepting, let the
  // in-flight responses finish, finish the running attempt, then close the database.
  const shutdown = (signal: string) => {
    stopping = true;
    io.out(`tally: ${signal}, shutting down\n`);
    server.close(() => {
      void (worker?.stop() ?? Promise.resolve())
        .then(() => writer?.close())
        // The writer thread and the readers close first, so this engine's connection is the last and removes the log.
        .then(() => readPool?.close())
        .then(() => {
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
 * tally mcp: in-process as one client (--db, --as), or a proxy to a server (--server, --key). Only
 * protocol messages go to stdout, so everything said here goes to stderr.
 */
async function serveMcp(options: Options): Promise<void> {
  const log = (line: string) => process.stderr.write(`${line}\n`);
  const { serveStdio } = await import('../mcp/stdio.js');
  const server = options.server === undefined ? process.env.TALLY_SERVER : String(options.server);
  if (options.as === undefined && options.db === undefined && server !== undefined) {
    const key = options.key === undefined ? process.env.TALLY_API_KEY : String(options.key);
    if (!key) throw new UsageError('--server needs --key KEY (or TALLY_API_KEY)');
    await serveStdio({ server, apiKey: key }, log, await mcpConfig());
    return;
  }
  if (options.as === undefined) throw new UsageError('give --db PATH --as PRINCIPAL, or --server URL --key KEY');
  const db = options.db === undefined ? process.env.TALLY_DATABASE_URL || process.env.TALLY_DB : String(options.db);
  if (db === undefined) throw new UsageError('--as needs --db PATH (or TALLY_DATABASE_URL, TALLY_DB)');
  const commands = await import('./commands.js');
  commands.requireDatabase(db);
  const { createEngine } = await import('../engine.js');
  const engine = await createEngine({ path: db, ...(await serverConfig()) });
  try {
    if (!hasClient(engine, String(options.as))) {
      throw new OperationError(
        `no client has principal ${JSON.stringify(String(options.as))}`,
        'UNAUTHENTICATED',
        'Name a client of this database (see clients.json, or auth.createClient).',
      );
    }
    await serveStdio({ engine, principal: String(options.as) }, log, await mcpConfig());
  } finally {
    engine.close();
  }
}

function hasClient(engine: Engine, principal: string): boolean {
  // The cheapest valid request: the caller is looked up before anything runs.
  const result = engine.graphql('{ __typename }', null, { principal });
  return !result.errors?.some((e) => e.extensions?.code === 'UNAUTHENTICATED');
}

/**
 * A worker process: attempts are synchronous, so a signal is handled between two attempts; the
 * attempt in progress always finishes (or, on kill -9, rolls back whole).
 */
async function runWorker(db: string, options: Options): Promise<void> {
  const drain = options.drain === true;
  const { cliLogger } = await import('./logging.js');
  const logger = cliLogger(options['log-level'], (message) => new UsageError(message));
  const { createEngine } = await import('../engine.js');
  const engine = await createEngine({
    path: db,
    logger,
    durability: durabilityOption(options),
    ...(await serverConfig()),
  });
  const worker = engine.createWorker({ owner: `worker-${process.pid}` });
  if (drain) {
    const attempts = await worker.drainAll();
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

/** What MCP clients are offered besides their tools (TALLY_CONFIG's mcp; the graphql tool is off when unset). */
async function mcpConfig(): Promise<{ graphqlTool: boolean }> {
  const { readServerConfig } = await import('../server/config.js');
  return readServerConfig().mcp;
}

/** What of the server configuration an engine is made with. */
interface ServerEngineConfig {
  providers: unknown;
  integrations: unknown;
  mcpServers: unknown;
  limits: Record<string, number>;
}

/** The engine options of the server configuration TALLY_CONFIG names (providers, integrations, limits); none when unset. */
async function serverConfig(): Promise<ServerEngineConfig> {
  const { readServerConfig } = await import('../server/config.js');
  const config = readServerConfig();
  return {
    providers: config.providers,
    integrations: config.integrations,
    mcpServers: config.mcpServers,
    limits: config.limits,
  };
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`tally: ${(error as Error).message ?? String(error)}\n`);
    process.exit(EXIT.failed);
  },
);
