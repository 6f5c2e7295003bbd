import { ReplaceableSandbox } from '../sandbox/replaceable.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import { AgentRuns } from './agents/runner.js';
import { authenticate, type Client, ensureAdmin, SYSTEM_PRINCIPAL } from './auth/clients.js';
import { KnownKeys } from './auth/key-cache.js';
import { Cel } from './cel/cel.js';
import { programLibraryJson } from './cel/library.js';
import { systemClock } from './clock.js';
import { Callers } from './engine/callers.js';
import { buildDomain } from './engine/domain.js';
import { EngineEvents } from './engine/events.js';
import { Requests } from './engine/requests.js';
import type { Engine, EngineOptions } from './engine/types.js';
import { EngineError } from './errors.js';
import { logAttempt } from './execution/queue/attempt.js';
import { Worker } from './execution/queue/worker.js';
import { ExecutionWaits } from './execution/waits.js';
import { DocumentCache } from './graphql/executor.js';
import { buildSchema } from './graphql/schema.js';
import { orderedIds } from './ids.js';
import { type Limits, resolveLimits } from './limits.js';
import { type Logger, silentLogger } from './log.js';
import { ModelProviders, parseProviders } from './models/providers.js';
import { openOutside } from './integrations/outside.js';
import { openStorage } from './storage/open.js';
import { listenForStarts } from './storage/listen.js';
import { isPostgresUrl } from './storage/pg/connection.js';
import { databaseReadiness } from './storage/readiness.js';
import { RecordCache } from './storage/record-cache.js';

export { DEFAULT_CHECKPOINT_INTERVAL_MS } from './storage/open.js';
export type * from './engine/types.js';

/**
 * The composition root: opens the database, loads the sandbox, builds every part and wires the
 * sandbox's graphql() to the GraphQL executor. Usable in-process without HTTP; the server and the
 * CLI are thin layers over it. Async only because loading the WASM module is. Wiring only: each
 * part lives in a module of its own and is handed what it needs here.
 */
export async function createEngine(options: EngineOptions = {}): Promise<Engine> {
  const onPostgres = options.path !== undefined && isPostgresUrl(options.path);
  const limits = resolveLimits(options.limits, onPostgres ? 'postgres' : 'sqlite');
  const clock = options.clock ?? systemClock;
  const logger = options.logger ?? silentLogger;
  const logError = options.logError ?? internalErrorLog(options.logger ? logger : null);
  const cel = new Cel(clock, limits);
  const sandboxes = await loadSandbox(limits, cel, logError);
  const sandbox = (): Sandbox => {
    const current = sandboxes.current();
    if (!current)
      throw new EngineError('BUSY', 'the sandbox is being replaced after a crash', { hint: 'Retry in a moment.' });
    return current;
  };
  const storage = openStorage({ ...options, explicit: options.limits ?? {} }, limits, logError);
  const { db, transactions, epoch, path } = storage;
  const providerConfigs = options.providers === undefined ? [] : parseProviders(options.providers);
  const models = providerConfigs.length > 0 ? await ModelProviders.create(providerConfigs, limits) : null;
  const outside = await openOutside(options, logger);
  const events = new EngineEvents(logError);
  let requests: Requests | undefined;
  let callers: Callers | undefined;
  const domain = buildDomain({
    storage,
    cel,
    clock,
    limits,
    newId: orderedIds(),
    sandbox,
    models,
    outside,
    events,
    logger,
    logError,
    random: options.random ?? Math.random,
    callerOf: (principal) => {
      const caller = callers!.of(principal === SYSTEM_PRINCIPAL ? undefined : principal);
      return caller instanceof EngineError ? null : caller;
    },
    runGraphql: (request, frame) => requests!.runNested(request, frame),
  });
  const { ledger, services, clients } = domain;
  callers = new Callers(clients, cel, limits, new RecordCache<Client>(epoch, limits.recordCacheMax));
  const schema = buildSchema(limits);
  const documents = new DocumentCache(schema, limits);
  const waits = new ExecutionWaits({
    limits,
    statusOf: (id) => (services.queue.executionStatus.get(id) as string | undefined) ?? null,
    progressOf: (id) => services.st.progressLatest.get(id, id) ?? 0,
    isOpen: () => db.open,
    logError,
  });
  requests = new Requests({
    schema,
    documents,
    transactions,
    limits,
    cel,
    ledger,
    services,
    clients,
    callers,
    waits,
    events,
    toolsChange: storage.toolsChange,
    logError,
  });
  const knownKeys = new KnownKeys(epoch, limits.recordCacheMax, (key) => authenticate(clients, key)?.principal ?? null);
  const readiness = databaseReadiness(db, limits.busyTimeoutMs);
  events.on('attempt', (outcome) => logAttempt(logger, outcome));
  events.on('attempt', (outcome) => waits.wake(outcome.executionId, outcome.status));
  events.on('progress', (ids) => waits.look(ids));
  // PostgreSQL: a commit that started executions tells the workers of every process (LISTEN
  // tally_executions); they also poll (pollMs), so a lost notification only delays.
  if (onPostgres && !options.readOnly) events.on('started', () => db.exec('NOTIFY tally_executions'));
  const run = requests;
  return {
    limits,
    ledger,
    db,
    execute: (request, opts) => run.execute(request, opts),
    executeBatch: (batch) => run.executeBatch(batch),
    executeGroup: (group) => run.executeGroup(group),
    get transactionRetries() {
      return transactions.retried;
    },
    onBatch: (listener) => events.on('batch', listener),
    operationType: (request) => run.describe(request)?.type,
    describeOperation: (request) => run.describe(request),
    peekOperation: (request) => run.peek(request),
    graphql: (query, variables, opts) =>
      run.execute(
        { query, variables: variables ?? null, operationName: opts?.operationName ?? null },
        {
          ...(opts?.principal === undefined ? {} : { principal: opts.principal }),
          ...(opts?.apiKey === undefined ? {} : { apiKey: opts.apiKey }),
          ...(opts?.transport === undefined ? {} : { transport: opts.transport }),
        },
      ),
    executeAsync: (request, opts) => run.executeAsync(request, opts),
    graphqlAsync: (query, variables, opts = {}) => {
      const { operationName, ...rest } = opts;
      return run.executeAsync({ query, variables: variables ?? null, operationName: operationName ?? null }, rest);
    },
    waitForExecution: (id, timeoutMs, signal, principal, progressAfter) =>
      waits.wait(id, timeoutMs, signal, principal, progressAfter),
    executionWaits: (request, opts) => run.executionWaits(request, opts),
    awaitExecutions: (list, opts) => run.awaitExecutions(list, opts),
    wakeWaiters: (id, status) => waits.wake(id, status),
    createWorker: (workerOptions = {}) =>
      new Worker(
        services,
        transactions,
        {
          owner: workerOptions.owner ?? `worker-${process.pid}`,
          pollMs: workerOptions.pollMs ?? 250,
          onAttempt: (outcome) => {
            events.emit('attempt', outcome);
            workerOptions.onAttempt?.(outcome);
          },
          onError: workerOptions.onError ?? logError,
          // PostgreSQL: other processes' starts wake this worker (they NOTIFY after their commit, see above).
          ...(onPostgres && !options.readOnly ? { subscribe: (wake: () => void) => listenForStarts(path, wake) } : {}),
        },
        (svc, runOptions) => new AgentRuns(svc, runOptions),
      ),
    onStarted: (listener) => events.on('started', listener),
    onAttempt: (listener) => events.on('attempt', listener),
    onModelCall: (listener) => events.on('modelCall', listener),
    onOutboundCall: (listener) => events.on('outboundCall', listener),
    onActionsChanged: (listener) => events.on('actionsChanged', listener),
    readiness: () => ({
      database: readiness(),
      sandbox: sandboxes.current() ? null : 'the sandbox is being replaced after a crash',
    }),
    queueStats: () => {
      const now = clock.now();
      const row = services.queue.queueStats.get({ now: now.toISOString() })!;
      const oldestDueAgeMs = row.oldest_due ? Math.max(0, now.getTime() - Date.parse(row.oldest_due)) : 0;
      return { queued: row.queued, due: row.due, oldestDueAgeMs };
    },
    authenticate: (apiKey) => knownKeys.principal(apiKey),
    ensureAdmin: (apiKey) =>
      transactions.run('write', () => ({
        value: ensureAdmin(clients, apiKey, (change) =>
          transactions.afterCommit(() => logger.info({ event: 'key', change, client: 'admin' }, `admin key ${change}`)),
        ),
        commit: true,
      })),
    close: () => {
      void outside.mcp?.close();
      storage.close();
      sandboxes.dispose();
    },
    stats: () => ({
      documentCacheSize: documents.size,
      documentCacheBytes: documents.bytes,
      celCacheSize: cel.size,
      recordCacheSize: Math.max(
        domain.ledgerDeps.cache.journals.size,
        domain.ledgerDeps.cache.tranCodesByCode.size,
        services.activeTriggers.size,
        ledger.tranCodeCacheSize,
        domain.actions.versions.size,
        domain.actions.documents.size,
      ),
      idleSandboxContexts: sandboxes.current()?.idleContexts ?? 0,
      executionWaiters: waits.inFlight,
      executionWaitsRefused: waits.refused,
    }),
    sandboxReady: () => sandboxes.ready(),
  };
}

/** The QuickJS sandbox, its WASM memory capped above the heap limit for the allocator's own overhead. */
function loadSandbox(
  limits: Readonly<Limits>,
  cel: Cel,
  logError: (error: unknown) => void,
): Promise<ReplaceableSandbox> {
  return ReplaceableSandbox.create(
    limits.sandboxMemoryBytesMax + 32 * 1024 * 1024,
    {
      memoryBytesMax: limits.sandboxMemoryBytesMax,
      stackBytesMax: limits.sandboxStackBytesMax,
      contextUsesMax: limits.contextUsesMax,
      contextPoolMax: limits.contextPoolMax,
      programsPerContextMax: 256,
      retainedBytesMax: limits.sandboxRetainedBytesMax,
      // Every level a chain of tools may reach (toolDepthMax below the first call), made now.
      warmLevels: limits.toolDepthMax + 1,
      outputBytesMax: limits.outputBytesMax,
      jsonDepthMax: limits.jsonDepthMax,
      library: programLibraryJson(cel.env),
    },
    logError,
  );
}

/** Where unexpected (INTERNAL) errors go by default: the logger's error, else console.error. */
function internalErrorLog(logger: Logger | null): (error: unknown) => void {
  if (!logger) return (error) => console.error('tally: internal error', error);
  return (error) =>
    logger.error(
      { event: 'internal', error: error instanceof Error ? (error.stack ?? error.message) : String(error) },
      'internal error',
    );
}
