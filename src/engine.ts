import type { DocumentNode, ExecutionResult, GraphQLSchema } from 'graphql';
import { ReplaceableSandbox } from '../sandbox/replaceable.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import type { ActionDeps } from './actions/actions.js';
import {
  authenticate,
  type Client,
  type ClientDeps,
  ensureAdmin,
  hashKey,
  invalidKey,
  lookupClient,
  SYSTEM_PRINCIPAL,
} from './auth/clients.js';
import { authorityOf } from './execution/call-rules.js';
import { authStatements } from './storage/statements/auth.js';
import { queueStatements } from './storage/statements/actions.js';
import { dispatchChange } from './execution/queue/triggers.js';
import { Worker, type WorkerOptions } from './execution/queue/worker.js';
import { SchemaCache } from './actions/schemas.js';
import { Cel } from './cel/cel.js';
import { type Clock, systemClock } from './clock.js';
import { EngineError, type ErrorData, isErrorCode } from './errors.js';
import { orderedIds } from './ids.js';
import type { RequestDeadline } from './budgets.js';
import type { CallFrame, Caller } from './execution/call-tree.js';
import type { ExecutionServices, ModelCallSample, NestedGraphqlResult } from './execution/services.js';
import type { ExecutionWait, RequestContext } from './graphql/context.js';
import {
  DocumentCache,
  engineGraphqlError,
  executePrepared,
  type FormattedResult,
  formatError,
  type GraphqlRequest,
  type OperationPlan,
  planOperation,
  type PreparedDocument,
  type RequestBudget,
} from './graphql/executor.js';
import { operationTraits, waitProbe } from './graphql/document-shape.js';
import { buildSchema } from './graphql/schema.js';
import type { LedgerDeps } from './ledger/deps.js';
import { Ledger } from './ledger/ledger.js';
import { type Limits, PG_TOOL_TIMEOUT_MS_MAX, resolveLimits } from './limits.js';
import { type Logger, silentLogger } from './log.js';
import { type AttemptOutcome, isRetryable } from './execution/queue/attempt.js';
import { type Db, type Durability, openDatabase, ReadOnlyTransactions } from './storage/database.js';
import { Checkpointer } from './storage/checkpointer.js';
import { isPostgresUrl, PgListener } from './storage/pg/connection.js';
import { ENTRY_SEQ_BLOCK } from './storage/backend.js';
import { mapDriverError } from './storage/driver-errors.js';
import {
  CacheEpoch,
  RecordCache,
  watchCachedTables,
  watchDataTables,
  watchToolTables,
} from './storage/record-cache.js';
import { ResultCache } from './execution/result-cache.js';
import { WAIT_ENDS } from './execution/status.js';
import { actionStatements } from './storage/statements/actions.js';
import { sessionStatements } from './storage/statements/sessions.js';
import { deploymentStatements } from './storage/statements/deployments.js';
import { skillStatements } from './storage/statements/skills.js';
import { checkSkillReference, type SkillDeps, skillServices } from './skills/skills.js';
import { calculationStatements } from './storage/statements/calculations.js';
import { ledgerStatements } from './storage/statements/ledger.js';
import { velocityStatements } from './storage/statements/velocity.js';
import { viewStatements } from './storage/statements/views.js';
import { TransactionManager } from './storage/transaction.js';
import { ModelProviders, parseProviders } from './models/providers.js';
import type { ProviderConfig } from './models/types.js';

export const DEFAULT_CHECKPOINT_INTERVAL_MS = 25;
/** How long a key seen valid is taken as valid by the checks outside a transaction (Engine.authenticate). */
const KNOWN_KEY_MS = 1000;
const SQLITE_WAL_AUTOCHECKPOINT_PAGES = 1000;

export interface EngineOptions {
  /** SQLite file, or ':memory:' (the default). */
  path?: string;
  limits?: Partial<Limits>;
  clock?: Clock;
  /** Where unexpected (INTERNAL) errors are reported. Default: the logger's error, else console.error. */
  logError?: (error: unknown) => void;
  /**
   * One structured line per attempt of a started execution, trigger start and admin key change
   * (see log.ts). Default: none, so an engine used in-process says nothing.
   */
  logger?: Logger;
  /** Backoff jitter source, in [0, 1). Default Math.random. */
  random?: () => number;
  /**
   * How often a background thread checkpoints the WAL (see Checkpointer). Default 25 ms; 0 leaves
   * every checkpoint to the committing request (SQLite's own behaviour). Ignored for ':memory:'.
   */
  checkpointIntervalMs?: number;
  /**
   * The model providers model and agent actions may use (the server configuration's providers
   * block, checked with parseProviders). Left out: none, and such actions are refused.
   */
  providers?: ProviderConfig[] | unknown;
  /**
   * Open `path` (an existing file a writer engine keeps in WAL mode) for reading only, as each
   * thread of the read pool does (src/server/read-pool.ts): nothing is migrated (a file of another
   * schema version is refused), no checkpointer runs, and every write (a mutation, ensureAdmin, a
   * queue worker's attempt) is refused with BAD_REQUEST. A query reads the last commit made
   * before its transaction began, and never waits for the writer.
   */
  readOnly?: boolean;
  /**
   * 'normal' (the default): a COMMIT is in the OS when it returns and on disk at the next
   * checkpoint; a power cut can lose the last commits, a crash of the process cannot. 'full': every
   * COMMIT syncs the log to disk before it returns (one sync covers a whole group commit).
   */
  durability?: Durability;
}

export interface RequestOptions {
  operationName?: string | null;
  /**
   * The client the request acts as: its policies bound everything the request does. Left out, the
   * request runs with the engine's own authority (an embedding process trusts itself).
   */
  principal?: string;
  /**
   * The API key the request came with (the HTTP server passes it): the client is looked up by it
   * inside the request's transaction, so a key rotated or a client deleted after the request
   * arrived is refused with UNAUTHENTICATED. Takes the place of `principal`.
   */
  apiKey?: string;
  /** How the request arrived when not plain GraphQL ('mcp'): recorded on the executions it invokes. */
  transport?: 'mcp';
}

/** How a request's waits on executions end early (executeAsync, awaitExecutions). */
export interface WaitOptions {
  /** Aborts the waits (the HTTP client went away); the request then runs at once. */
  signal?: AbortSignal;
  /** The longest all the request's waits may take together (the HTTP server's requestTimeoutMs left). */
  waitMsMax?: number;
}

/** What executeAsync takes beyond a request's options: how its waits end early. */
export interface AsyncRequestOptions extends RequestOptions, WaitOptions {}

/** One request of a group commit (Engine.executeBatch). */
export interface BatchRequest {
  request: GraphqlRequest;
  options?: RequestOptions;
}

export interface OperationSummary {
  type: 'query' | 'mutation';
  /** The operation's name in the document (client-chosen), or null when anonymous. */
  name: string | null;
  dryRun: boolean;
  /** A field takes `waitMs`: it may wait on an execution (see executionWaits). */
  waits: boolean;
  /** A field may run long (a tool's program, a backfill): a group commit runs it first, never behind other replies. */
  long: boolean;
}

export interface Engine {
  readonly limits: Readonly<Limits>;
  readonly ledger: Ledger;
  /** Run one GraphQL request as one SQLite transaction. */
  graphql(query: string, variables?: Record<string, unknown> | null, options?: RequestOptions): FormattedResult;
  execute(request: GraphqlRequest, options?: RequestOptions): FormattedResult;
  /**
   * Group commit for embedders: run the requests in order, each under a savepoint of its own, as
   * few SQLite transactions as writeBatchMax and writeBatchWaitMs allow (one COMMIT each). Every
   * answer is exactly what `execute` would have answered running them one after another; a request
   * that fails rolls back only its own writes. A COMMIT that fails fails every request of its group
   * with a retryable error (BUSY unless the database said something retryable itself).
   */
  executeBatch(requests: ReadonlyArray<BatchRequest>): FormattedResult[];
  /**
   * One group of executeBatch: one transaction, one COMMIT. The answers of requests the group's
   * bounds left out are undefined: run them in a next group (the HTTP server's write queue does).
   */
  executeGroup(requests: ReadonlyArray<BatchRequest>): Array<FormattedResult | undefined>;
  /** Called after each group commit (or its failure) with the number of requests it ran. */
  onBatch(listener: (size: number) => void): void;
  /**
   * Transactions run again after losing a race with another process's (PostgreSQL: a
   * serialization failure or deadlock; see limits.transactionRetriesMax). Always 0 on SQLite.
   */
  readonly transactionRetries: number;
  /**
   * A query that asks to wait (`actions.execution(waitMs:)` on an execution not yet terminal that
   * its caller may see): the waits (executionWaits), waited for outside any transaction
   * (awaitExecutions), then the request, run once. Anything else: execute. Used by in-process MCP
   * (`tally mcp`); `execute` and `graphql` answer at once. The HTTP server takes the same three
   * steps itself, each where it belongs (see src/server/http.ts).
   */
  executeAsync(request: GraphqlRequest, options?: AsyncRequestOptions): Promise<FormattedResult>;
  graphqlAsync(
    query: string,
    variables?: Record<string, unknown> | null,
    options?: AsyncRequestOptions & { operationName?: string | null },
  ): Promise<FormattedResult>;
  /**
   * Resolves as soon as the execution is terminal (SUCCEEDED, FAILED, CANCELLED) or does not exist,
   * or after timeoutMs, or on abort. Wakes on this process's attempt outcomes for that id, and reads
   * its status every executionWaitPollMs for workers in other processes. Holds no transaction. With
   * executionWaitersMax waits in flight it resolves at once.
   */
  waitForExecution(executionId: string, timeoutMs: number, signal?: AbortSignal, principal?: string): Promise<void>;
  /**
   * The executions a query asks to wait on: its wait fields run alone (see waitProbe: a few
   * primary-key reads, however heavy the rest of the query), in a read transaction, under the
   * request's caller; an execution it may not see, or that is terminal or unknown, is no wait.
   * Empty for a mutation, a query without `waitMs`, or a request that does not run.
   */
  executionWaits(request: GraphqlRequest, options?: RequestOptions): ExecutionWait[];
  /** Wait for each of `waits` (waitForExecution), all within one deadline: the longest waitMs, cut to waitMsMax. */
  awaitExecutions(waits: ReadonlyArray<ExecutionWait>, options?: WaitOptions): Promise<void>;
  /**
   * An attempt of execution `executionId` ended elsewhere in this process (the writer thread's
   * queue worker, heard by the HTTP thread): this engine's waits on it look at its status now.
   */
  wakeWaiters(executionId: string, status: string): void;
  /** 'query' or 'mutation' for a document that validates; undefined otherwise. */
  operationType(request: GraphqlRequest): 'query' | 'mutation' | undefined;
  /** The operation a request would run (type, name, @dryRun), when its document validates. */
  describeOperation(request: GraphqlRequest): OperationSummary | undefined;
  /**
   * What describeOperation says, from the document's parse alone when it is not cached (not
   * validated): for routing a request that will be validated where it runs (a read thread), so
   * the validation of a new document does not cost this thread. Undefined when it does not parse.
   */
  peekOperation(request: GraphqlRequest): OperationSummary | undefined;
  /** A queue worker over this engine's database (see Worker). */
  createWorker(options?: Partial<WorkerOptions>): Worker;
  /** Called after a transaction that started executions commits (the in-process worker wakes). */
  onStarted(listener: () => void): void;
  /**
   * Called after a write request commits when actions or clients may have changed (this
   * connection wrote them, or another connection's commit moved their fingerprint; see
   * watchToolTables): MCP sessions then check whether their tool list changed.
   */
  onActionsChanged(listener: () => void): void;
  /** Called after every attempt any worker of this engine runs (the server counts them). */
  onAttempt(listener: (outcome: AttemptOutcome) => void): void;
  /** Called after every model call a model or agent run of this engine's workers made. */
  onModelCall(listener: (call: ModelCallSample) => void): void;
  /**
   * What /readyz checks: null when the database takes a write now (without waiting: the caller
   * waits between tries, so a busy database never blocks the process) and the sandbox is loaded;
   * otherwise why not.
   */
  readiness(): { database: string | null; sandbox: string | null };
  /** Started executions waiting: all QUEUED, those due now, and how long the oldest due one has waited. */
  queueStats(): { queued: number; due: number; oldestDueAgeMs: number };
  /**
   * The principal an API key belongs to, or null: the HTTP server's check before it reads a body. A
   * key seen valid is remembered by its hash for a second at most, less when a client is written;
   * what a request may do is decided inside its own transaction, never by this.
   */
  authenticate(apiKey: string): string | null;
  /** Make sure the admin client exists (see ensureAdmin); returns a newly generated key, once. */
  ensureAdmin(apiKey?: string): string | null;
  close(): void;
  /** Resolves when the sandbox is usable (it is replaced after a crash). */
  sandboxReady(): Promise<void>;
  /** Cache and pool sizes, so tests can check they stay within their limits. */
  stats(): {
    documentCacheSize: number;
    documentCacheBytes: number;
    celCacheSize: number;
    recordCacheSize: number;
    idleSandboxContexts: number;
    /** waitForExecution calls in flight (at most executionWaitersMax). */
    executionWaiters: number;
    /** Waits that returned at once because executionWaitersMax were in flight. */
    executionWaitsRefused: number;
  };
  /** The raw connection, for tests and benchmarks that check the database directly. */
  readonly db: Db;
}

/**
 * The composition root: opens the database, loads the sandbox, builds every part and wires the
 * sandbox's graphql() to the GraphQL executor. Usable in-process without HTTP; the server and the
 * CLI are thin layers over it. Async only because loading the WASM module is.
 */
export async function createEngine(options: EngineOptions = {}): Promise<Engine> {
  const limits = resolveLimits(
    withBackendDefaults(options.limits, options.path !== undefined && isPostgresUrl(options.path)),
  );
  const clock = options.clock ?? systemClock;
  const logger = options.logger ?? silentLogger;
  const logError =
    options.logError ??
    (options.logger
      ? (error: unknown) =>
          logger.error(
            { event: 'internal', error: error instanceof Error ? (error.stack ?? error.message) : String(error) },
            'internal error',
          )
      : (error: unknown) => console.error('tally: internal error', error));
  // The WASM memory is capped above the QuickJS heap limit, for the allocator's own overhead.
  const sandboxes = await ReplaceableSandbox.create(
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
    },
    logError,
  );
  const sandbox = (): Sandbox => {
    const current = sandboxes.current();
    if (!current) {
      throw new EngineError('BUSY', 'the sandbox is being replaced after a crash', { hint: 'Retry in a moment.' });
    }
    return current;
  };

  const path = options.path ?? ':memory:';
  const onPostgres = isPostgresUrl(path);
  // PostgreSQL gives a posting's entries a block of ENTRY_SEQ_BLOCK seqs: a bigger posting cannot be allowed there.
  if (onPostgres && limits.entriesPerTransactionMax > ENTRY_SEQ_BLOCK) {
    throw new EngineError(
      'BAD_REQUEST',
      `limit entriesPerTransactionMax is ${limits.entriesPerTransactionMax}; on PostgreSQL it may be at most ${ENTRY_SEQ_BLOCK}`,
      {
        hint: `Set entriesPerTransactionMax to ${ENTRY_SEQ_BLOCK} or less (each posting's entries take a block of ${ENTRY_SEQ_BLOCK} seqs there).`,
      },
    );
  }
  const checkpointIntervalMs = options.checkpointIntervalMs ?? DEFAULT_CHECKPOINT_INTERVAL_MS;
  // SQLite's WAL checkpoints; PostgreSQL (a postgres:// path) checkpoints itself.
  const background = !options.readOnly && path !== ':memory:' && !onPostgres && checkpointIntervalMs > 0;
  // The writer's own threshold: walAutocheckpointPages while the thread copies pages ahead of it;
  // without the thread, SQLite's default unless the limit was set explicitly.
  const ownWalPages = options.limits?.walAutocheckpointPages;
  const db = openDatabase({
    path,
    busyTimeoutMs: limits.busyTimeoutMs,
    walAutocheckpointPages: background ? limits.walAutocheckpointPages : ownWalPages,
    // A log that grew past twice its checkpoint bound (readers held a checkpoint off, see ReadPool.walHeld) shrinks back at its restart.
    walBytesKept: 2 * limits.walAutocheckpointPages * 4096,
    readOnly: options.readOnly,
    durability: options.durability,
  });
  const checkpointer = background
    ? new Checkpointer(path, checkpointIntervalMs, logError, () => {
        // The thread ended by itself: the writer checkpoints alone, as often as SQLite would.
        if (db.open && ownWalPages === undefined) db.pragma(`wal_autocheckpoint = ${SQLITE_WAL_AUTOCHECKPOINT_PAGES}`);
      })
    : null;
  const epoch = new CacheEpoch();
  watchCachedTables(db, epoch);
  const transactions = options.readOnly ? new ReadOnlyTransactions(db, epoch) : new TransactionManager(db, epoch);
  transactions.retriesMax = limits.transactionRetriesMax;
  transactions.retryBudgetMs = limits.requestDeadlineMs;
  const toolsChange = watchToolTables(db, () => transactions.dataVersionAtBegin);
  transactions.reportCallbackError = logError;
  const cel = new Cel(clock, limits);
  const newId = orderedIds();
  const ledgerDeps: LedgerDeps = {
    st: ledgerStatements(db),
    calc: calculationStatements(db),
    vel: velocityStatements(db),
    views: viewStatements(db),
    cel,
    clock,
    limits,
    newId,
    epoch,
    cache: {
      journals: new RecordCache(epoch, limits.recordCacheMax),
      tranCodesByCode: new RecordCache(epoch, limits.recordCacheMax),
      // One row per account posted to: ten times the row caches' bound.
      accounts: new RecordCache(epoch, limits.recordCacheMax * 10),
      // One entry per account posted to (small lists): ten times the row caches' bound.
      setsAbove: new RecordCache(epoch, limits.recordCacheMax * 10),
      posting: new RecordCache(epoch, limits.recordCacheMax * 10),
    },
  };
  const ledger = new Ledger(ledgerDeps);
  const st = actionStatements(db);
  const skillDeps: SkillDeps = { st: skillStatements(db), actions: st, clock, limits };
  const actionDeps: ActionDeps = {
    st,
    documents: new Map(),
    versions: new RecordCache(epoch, limits.recordCacheMax),
    schemas: new SchemaCache(limits),
    cel,
    clock,
    limits,
    providers: null,
    checkSkill: (ref, what) => checkSkillReference(skillDeps, ref, what),
    checkProgram: (fileName, source) => sandbox().checkSyntax({ fileName, source }),
  };
  const providerConfigs = options.providers === undefined ? [] : parseProviders(options.providers);
  const models = providerConfigs.length > 0 ? await ModelProviders.create(providerConfigs, limits) : null;
  actionDeps.providers = models;
  const schema: GraphQLSchema = buildSchema(limits);
  const documents = new DocumentCache(schema, limits);

  // Results of read-only tools (execution.cacheTtlMs): valid while no data write happened since;
  // a rollback that undid writes empties it (an entry may have seen them).
  const dataWrites = watchDataTables(db);
  // PostgreSQL's data_version moves only for the cached tables (a counter every posting moved would
  // make every two postings conflict), so another process's posting would not expire a cached tool
  // output there: the result cache is off on PostgreSQL (cacheTtlMs is a hint; outputs are computed).
  const resultCache = new ResultCache(db, dataWrites, onPostgres ? 0 : limits.recordCacheMax);
  transactions.watchUndoneWrites(
    () => dataWrites.writes,
    () => resultCache.clear(),
  );
  let startedInTransaction = false;
  const modelCallListeners: Array<(call: ModelCallSample) => void> = [];
  const startedListeners: Array<() => void> = [];
  const queue = queueStatements(db);
  const services: ExecutionServices = {
    queue,
    activeTriggers: new RecordCache(epoch, limits.recordCacheMax),
    derivedIdKey: queue.derivedIdKey.get()!,
    triggerDepth: { current: 0 },
    random: options.random ?? Math.random,
    notifyStarted: () => {
      startedInTransaction = true;
    },
    callerOf: (principal) => {
      const caller = callerOf(principal === SYSTEM_PRINCIPAL ? undefined : principal);
      return caller instanceof EngineError ? null : caller;
    },
    transactions,
    sandbox,
    actions: actionDeps,
    skills: skillServices(skillDeps),
    st,
    cel,
    clock,
    limits,
    programKeys: new WeakMap(),
    logError,
    log: logger,
    newId,
    runGraphql: (request, frame) => runNested(request, frame),
    models,
    sessions: sessionStatements(db),
    deployments: deploymentStatements(db),
    results: resultCache,
    onModelCall: (call) => {
      for (const listener of modelCallListeners) listener(call);
    },
  };

  ledgerDeps.onChange = (change) => dispatchChange(services, change);
  // PostgreSQL: a commit that started executions tells the workers of every process (LISTEN
  // tally_executions); they also poll (pollMs), so a lost notification only delays.
  if (onPostgres && !options.readOnly) {
    startedListeners.push(() => {
      try {
        db.exec('NOTIFY tally_executions');
      } catch (error) {
        logError(error);
      }
    });
  }
  /** Run a write transaction; when it committed and queued executions, tell the listeners. */
  function afterCommit<T>(run: () => T): T {
    startedInTransaction = false;
    const value = run();
    if (startedInTransaction && !transactions.inTransaction) {
      startedInTransaction = false;
      for (const listener of startedListeners) listener();
    }
    return value;
  }

  const clientsByKey = new RecordCache<Client>(epoch, limits.recordCacheMax);
  // The principals of keys seen valid, by key hash, for at most KNOWN_KEY_MS and until the cache
  // epoch moves (a client written here, or by another connection as seen at a transaction's start).
  // Only for the server's checks before a body is read and of /metrics: what a request may do is
  // decided by the check inside its own transaction.
  const knownKeys = new Map<string, { principal: string; until: number }>();
  let knownKeysEpoch = -1;
  function knownPrincipal(apiKey: string): string | null {
    const hash = hashKey(apiKey);
    if (knownKeysEpoch !== epoch.value) {
      knownKeys.clear();
      knownKeysEpoch = epoch.value;
    }
    const now = performance.now();
    const known = knownKeys.get(hash);
    if (known !== undefined && known.until > now) return known.principal;
    const principal = authenticate(clientDeps, apiKey)?.principal ?? null;
    if (principal === null) knownKeys.delete(hash);
    else {
      if (knownKeys.size >= limits.recordCacheMax) knownKeys.clear();
      knownKeys.set(hash, { principal, until: now + KNOWN_KEY_MS });
    }
    return principal;
  }
  const clientDeps: ClientDeps = {
    st: authStatements(db),
    cel,
    clock,
    pageSizeMax: limits.pageSizeMax,
    policiesMax: limits.policiesMax,
  };
  const contextFor = (
    caller: Caller,
    frame: CallFrame | null,
    dryRun: boolean,
    waits?: ExecutionWait[],
  ): RequestContext => ({
    ledger,
    cel,
    limits,
    services,
    clients: clientDeps,
    principal: caller.principal,
    caller,
    frame,
    dryRun: dryRun || caller.dryRun === true,
    authority: authorityOf(cel, caller, frame),
    ...(waits ? { waits } : {}),
  });

  const asCaller = (client: Client): Caller => ({
    principal: client.principal,
    client: { principal: client.principal, policies: client.policies },
  });

  /** The caller of a request: a known client, or the engine itself. */
  function callerOf(principal: string | undefined): Caller | EngineError {
    if (principal === undefined) return { principal: SYSTEM_PRINCIPAL, client: null };
    const client = lookupClient(clientDeps, principal);
    if (!client)
      return new EngineError('UNAUTHENTICATED', `no client has principal ${JSON.stringify(principal)}`, {
        hint: 'Create the client first with auth.createClient.',
      });
    return asCaller(client);
  }

  /**
   * The caller of a request, read inside its transaction: what it may do is what was committed when
   * it began. The client of a key comes from a cache of this epoch (any write to clients, here or by
   * another connection, empties it), so the HTTP server's check before the body and this one cost
   * one lookup between them, and a key rotated in between is still refused.
   */
  function requestCaller(options: RequestOptions): Caller | EngineError {
    if (options.apiKey === undefined) return callerOf(options.principal);
    const apiKey = options.apiKey;
    // Cached by the key's hash, as the database holds it: the cache never holds a key.
    const client = clientsByKey.get(hashKey(apiKey), () => authenticate(clientDeps, apiKey) ?? undefined);
    return client ? asCaller(client) : invalidKey();
  }

  /**
   * The budget a request runs under (see @budget): STANDARD for anyone, OPERATOR for the engine
   * itself and for a client whose policies allow INSERT on budget.Operator.
   */
  function requestBudget(caller: Caller, name: RequestBudget): RequestDeadline | EngineError {
    if (name === 'STANDARD') return { name: 'requestDeadlineMs', ms: limits.requestDeadlineMs };
    try {
      authorityOf(cel, caller, null).check({ action: 'INSERT', resource: 'budget.Operator' });
    } catch (error) {
      if (!(error instanceof EngineError)) throw error;
      return new EngineError(
        'ACCESS_DENIED',
        `${caller.principal} may not run a request under the OPERATOR budget: ${error.message}`,
        {
          hint: "The operator budget (operatorDeadlineMs) is for an operator's long work: give the client a policy allowing INSERT on budget.Operator, or leave out @budget.",
          details: { budget: 'OPERATOR', resource: 'budget.Operator' },
        },
      );
    }
    return { name: 'operatorDeadlineMs', ms: limits.operatorDeadlineMs };
  }

  /** A GraphQL operation a call makes: same transaction, its own savepoint (taken by the caller). */
  function runNested(request: GraphqlRequest, frame: CallFrame): NestedGraphqlResult {
    const prepared = documents.prepare(request.query);
    if ('errors' in prepared)
      return { data: null, errors: prepared.errors.map((e) => toErrorData(formatError(e, logError))), dryRun: false };
    const plan = planOperation(prepared.document, request.operationName);
    if (!('mode' in plan)) return { data: null, errors: [toErrorData(formatError(plan, logError))], dryRun: false };
    if (plan.budget !== 'STANDARD') {
      // A call runs inside its request, under that request's deadline: it cannot choose another.
      const refused = new EngineError(
        'BAD_REQUEST',
        `@budget(name: ${plan.budget}) names a request's budget; a graphql() call runs inside its request's`,
        {
          hint: 'Leave out @budget here; send the whole request under the budget instead.',
        },
      );
      return { data: null, errors: [refused.toData()], dryRun: false };
    }
    const executed = executePrepared(
      schema,
      prepared,
      request,
      contextFor(frame.root.caller, frame, plan.dryRun),
      limits,
    );
    return {
      data: (executed.data as Record<string, unknown> | null | undefined) ?? null,
      errors: (executed.errors ?? []).map((e) => toErrorData(formatError(e, logError))),
      dryRun: plan.dryRun,
    };
  }

  /** The request's document (cached) and the operation it runs, or the answer when it cannot run. */
  function prepareRequest(
    request: GraphqlRequest,
  ): { prepared: PreparedDocument; plan: OperationPlan } | FormattedResult {
    const prepared = documents.prepare(request.query);
    if ('errors' in prepared) return { errors: prepared.errors.map((e) => formatError(e, logError)) };
    const plan = planOperation(prepared.document, request.operationName);
    if (!('mode' in plan)) return { errors: [formatError(plan, logError)] };
    return { prepared, plan };
  }

  /**
   * The work of one request inside its transaction (or its savepoint of a batch): the caller read
   * now, the operation run under the request's deadline, and whether its writes are kept. A
   * mutation with any error keeps nothing; @dryRun never does.
   */
  function requestUnit(
    request: GraphqlRequest,
    { prepared, plan }: { prepared: PreparedDocument; plan: OperationPlan },
    requestOptions: RequestOptions,
    waits?: ExecutionWait[],
  ): () => { value: ExecutionResult | EngineError; commit: boolean } {
    return () => {
      // Executions this request starts wake the worker only if its writes are kept.
      const startedBefore = startedInTransaction;
      startedInTransaction = false;
      let commit = false;
      try {
        // Inside the transaction: a client changed by another process before it began is seen.
        const known = requestCaller(requestOptions);
        if (known instanceof EngineError) return { value: known, commit: false };
        const budget = requestBudget(known, plan.budget);
        if (budget instanceof EngineError) return { value: budget, commit: false };
        const caller: Caller = {
          ...known,
          deadline: Date.now() + budget.ms,
          budget,
          ...(requestOptions.transport ? { transport: requestOptions.transport } : {}),
          ...(plan.dryRun ? { dryRun: true } : {}),
        };
        const run = cel.withDeadline(caller.deadline!, () =>
          executePrepared(
            schema,
            prepared,
            request,
            contextFor(caller, null, plan.dryRun, plan.mode === 'read' ? waits : undefined),
            limits,
          ),
        );
        let executed = run.value;
        const overran = caller.overran ?? run.overran;
        if (overran) executed = { errors: [engineGraphqlError(overran)] };
        const failed = (executed.errors?.length ?? 0) > 0;
        commit = plan.mode === 'read' || (!failed && !plan.dryRun);
        // A failed mutation wrote nothing; its data is what GraphQL's null propagation left, as the
        // reference ledger answers (a field that failed is null, and so is a non-null parent of it).
        return { value: executed, commit };
      } finally {
        startedInTransaction = startedBefore || (commit && startedInTransaction);
      }
    };
  }

  /** The answer of a request whose transaction failed (its COMMIT, or the database). */
  function failedAnswer(error: unknown): FormattedResult {
    const mapped = mapDriverError(error);
    const engineError =
      mapped instanceof EngineError
        ? mapped
        : new EngineError('INTERNAL', String((mapped as Error)?.message ?? mapped), { cause: mapped });
    if (engineError.code === 'INTERNAL') logError(error);
    return { data: null, errors: [formatError(engineGraphqlError(engineError), logError)] };
  }

  function answer(result: ExecutionResult | EngineError): FormattedResult {
    if (result instanceof EngineError) return { errors: [formatError(engineGraphqlError(result), logError)] };
    const formatted: FormattedResult = {};
    if (result.errors?.length) formatted.errors = result.errors.map((e) => formatError(e, logError));
    formatted.data = (result as { data?: Record<string, unknown> | null }).data ?? null;
    return formatted;
  }

  function notifyToolsChanged(toolWritesBefore: number): void {
    if (!toolsChange.changedSince(toolWritesBefore)) return;
    for (const listener of changedListeners) listener();
  }

  function execute(
    request: GraphqlRequest,
    requestOptions: RequestOptions = {},
    waits?: ExecutionWait[],
  ): FormattedResult {
    const ready = prepareRequest(request);
    if (!('plan' in ready)) return ready;
    const { plan } = ready;
    let result: ExecutionResult | EngineError;
    const toolWritesBefore = toolsChange.writes;
    try {
      result = afterCommit(() =>
        transactions.run<ExecutionResult | EngineError>(plan.mode, requestUnit(request, ready, requestOptions, waits)),
      );
    } catch (error) {
      startedInTransaction = false;
      return failedAnswer(error);
    }
    if (plan.mode === 'write' && !plan.dryRun && !(result instanceof EngineError) && !result.errors?.length)
      notifyToolsChanged(toolWritesBefore);
    return answer(result);
  }

  /**
   * Group commit: the requests in one write transaction, a savepoint each, committed once (see
   * TransactionManager.runBatch), up to writeBatchMax requests and writeBatchWaitMs of work; the
   * answers of the requests it did not get to are undefined (run them in a next group). Each
   * answer holds only once the group committed: a COMMIT that fails fails every request of the
   * group with a retryable error, and nothing of them was written.
   */
  function executeGroup(requests: ReadonlyArray<BatchRequest>): Array<FormattedResult | undefined> {
    const answers: Array<FormattedResult | undefined> = Array.from({ length: requests.length }, () => undefined);
    const units: Array<() => { value: ExecutionResult | EngineError; commit: boolean }> = [];
    const unitOf: number[] = [];
    const readies: Array<{ prepared: PreparedDocument; plan: OperationPlan } | undefined> = [];
    for (const [i, { request, options }] of requests.entries()) {
      const ready = prepareRequest(request);
      if (!('plan' in ready)) {
        answers[i] = ready;
        continue;
      }
      readies[i] = ready;
      units.push(requestUnit(request, ready, options ?? {}));
      unitOf.push(i);
    }
    if (units.length === 0) return answers;
    const toolWritesBefore = toolsChange.writes;
    const began = performance.now();
    startedInTransaction = false;
    // A request that may run long (a tool, a backfill) never shares a group with another client's
    // requests: their replies would wait for it (a group answers after its COMMIT), and they would
    // share its COMMIT's fate. It starts the next group instead, and another client's request after
    // it starts the one after; one client's requests may share a group with its own long ones.
    const long = unitOf.map((i) => operationTraits(readies[i]!.prepared.document, readies[i]!.plan.operation).long);
    const who = unitOf.map((i) => requests[i]!.options?.apiKey ?? requests[i]!.options?.principal ?? SYSTEM_PRINCIPAL);
    let oneClient = true;
    let anyLong = long[0] === true;
    const more = (ran: number): boolean => {
      if (ran >= limits.writeBatchMax || performance.now() - began >= limits.writeBatchWaitMs) return false;
      oneClient &&= who[ran] === who[ran - 1];
      anyLong ||= long[ran] === true;
      return oneClient || !anyLong;
    };
    const outcomes = transactions.runBatch(units, more);
    let kept = false;
    for (const [u, outcome] of outcomes.entries()) {
      const i = unitOf[u]!;
      if (outcome.status === 'not-run') continue;
      if (outcome.status === 'failed') {
        answers[i] = failedAnswer(outcome.commitFailed ? groupCommitFailed(outcome.error) : outcome.error);
        continue;
      }
      if (outcome.status === 'committed' && !(outcome.value instanceof EngineError) && !outcome.value.errors?.length)
        kept = true;
      answers[i] = answer(outcome.value);
    }
    const committed = outcomes.every((o) => o.status !== 'failed' || !o.commitFailed);
    if (!committed) startedInTransaction = false;
    // Listeners run after the COMMIT: one that throws is reported, never turned into the requests' error.
    const tell = (fn: () => void) => {
      try {
        fn();
      } catch (error) {
        logError(error);
      }
    };
    if (startedInTransaction && committed) {
      startedInTransaction = false;
      for (const listener of startedListeners) tell(listener);
    }
    if (kept && committed) tell(() => notifyToolsChanged(toolWritesBefore));
    const ran = outcomes.filter((o) => o.status !== 'not-run').length;
    for (const listener of batchListeners) tell(() => listener(ran));
    return answers;
  }

  /** The error every request of a group gets when its COMMIT failed: retryable, since the request itself did not fail. */
  function groupCommitFailed(error: unknown): EngineError {
    const mapped = mapDriverError(error);
    if (mapped instanceof EngineError && mapped.retryable) return mapped;
    const why = mapped instanceof Error ? mapped.message : String(mapped);
    return new EngineError(
      'BUSY',
      `the commit of this request's group failed, so nothing of the group was written (${why})`,
      {
        hint: 'Retry the request: it did not fail itself, the commit it shared with other requests did.',
        cause: mapped,
      },
    );
  }

  function executeBatch(requests: ReadonlyArray<BatchRequest>): FormattedResult[] {
    const answers: FormattedResult[] = new Array(requests.length);
    let pending = requests.map((_, i) => i);
    while (pending.length > 0) {
      const group = executeGroup(pending.map((i) => requests[i]!));
      const next: number[] = [];
      for (let g = 0; g < group.length; g++) {
        const answer = group[g];
        if (answer === undefined) next.push(pending[g]!);
        else answers[pending[g]!] = answer;
      }
      pending = next;
    }
    return answers;
  }

  // Waits on executions (waitForExecution): the wakers of each id, and how many are in flight.
  const waitersById = new Map<string, Set<(status: string) => void>>();
  let waitersInFlight = 0;
  let waitsRefused = 0;
  const waitersByPrincipal = new Map<string, number>();
  const executionStatus = queue.executionStatus;

  /** The execution's status, read in a statement of its own; null when it does not exist. */
  function statusOf(executionId: string): string | null {
    return (executionStatus.get(executionId) as string | undefined) ?? null;
  }

  async function waitForExecution(
    executionId: string,
    timeoutMs: number,
    signal?: AbortSignal,
    principal?: string,
  ): Promise<void> {
    if (!(timeoutMs > 0) || signal?.aborted) return;
    const mine = principal === undefined ? 0 : (waitersByPrincipal.get(principal) ?? 0);
    if (waitersInFlight >= limits.executionWaitersMax || mine >= limits.executionWaitersPerClientMax) {
      waitsRefused++;
      return;
    }
    waitersInFlight++;
    if (principal !== undefined) waitersByPrincipal.set(principal, mine + 1);
    try {
      await new Promise<void>((resolve) => {
        let finished = false;
        const finish = () => {
          if (finished) return;
          finished = true;
          clearTimeout(timer);
          clearInterval(poll);
          signal?.removeEventListener('abort', finish);
          const set = waitersById.get(executionId);
          set?.delete(wake);
          if (set?.size === 0) waitersById.delete(executionId);
          resolve();
        };
        const check = () => {
          if (finished) return;
          try {
            const status = statusOf(executionId);
            if (status === null || WAIT_ENDS.has(status)) finish();
          } catch (error) {
            // A read that failed (the database busy or closed) ends the wait: the answer is read again anyway.
            if (db.open) logError(error);
            finish();
          }
        };
        const wake = (status: string) => (WAIT_ENDS.has(status) ? finish() : check());
        const timer = setTimeout(finish, timeoutMs);
        const poll = setInterval(check, Math.max(1, limits.executionWaitPollMs));
        signal?.addEventListener('abort', finish, { once: true });
        let set = waitersById.get(executionId);
        if (!set) waitersById.set(executionId, (set = new Set()));
        set.add(wake);
        check();
      });
    } finally {
      waitersInFlight--;
      if (principal !== undefined) {
        const left = (waitersByPrincipal.get(principal) ?? 1) - 1;
        if (left === 0) waitersByPrincipal.delete(principal);
        else waitersByPrincipal.set(principal, left);
      }
    }
  }

  function executionWaits(request: GraphqlRequest, requestOptions: RequestOptions = {}): ExecutionWait[] {
    const ready = prepareRequest(request);
    if (!('plan' in ready) || ready.plan.mode !== 'read') return [];
    const probe = waitProbe(ready.prepared.document, ready.plan.operation);
    if (probe === null) return [];
    const waits: ExecutionWait[] = [];
    // Its answer is of no use (the request runs after the waits); its errors are the request's own, told then.
    execute(
      { query: probe, variables: request.variables ?? null, operationName: ready.plan.operation.name?.value ?? null },
      requestOptions,
      waits,
    );
    return waits;
  }

  async function awaitExecutions(
    waits: ReadonlyArray<ExecutionWait>,
    { signal, waitMsMax }: WaitOptions = {},
  ): Promise<void> {
    if (waits.length === 0) return;
    const started = Date.now();
    const longest = Math.max(...waits.map((w) => w.waitMs));
    const deadline = started + Math.min(longest, waitMsMax ?? longest);
    for (const wait of waits) {
      const left = Math.min(deadline, started + wait.waitMs) - Date.now();
      if (left <= 0 || signal?.aborted) continue;
      await waitForExecution(wait.executionId, left, signal, wait.principal);
    }
  }

  function wakeWaiters(executionId: string, status: string): void {
    const set = waitersById.get(executionId);
    if (set) for (const wake of [...set]) wake(status);
  }

  async function executeAsync(request: GraphqlRequest, options: AsyncRequestOptions = {}): Promise<FormattedResult> {
    const { signal, waitMsMax, ...requestOptions } = options;
    const waits = executionWaits(request, requestOptions);
    if (waits.length > 0)
      await awaitExecutions(waits, {
        ...(signal ? { signal } : {}),
        ...(waitMsMax === undefined ? {} : { waitMsMax }),
      });
    // Once, after the waits: the answer as it is now.
    return execute(request, requestOptions);
  }

  function describeOperation(request: GraphqlRequest): OperationSummary | undefined {
    const prepared = documents.prepare(request.query);
    if ('errors' in prepared) return undefined;
    const plan = planOperation(prepared.document, request.operationName);
    if (!('mode' in plan)) return undefined;
    return summaryOf(prepared.document, plan);
  }

  const changedListeners: Array<() => void> = [];
  const batchListeners: Array<(size: number) => void> = [];
  const attemptListeners: Array<(outcome: AttemptOutcome) => void> = [
    (outcome) => logAttempt(logger, outcome),
    (outcome) => wakeWaiters(outcome.executionId, outcome.status),
  ];
  const readinessCheck = db.prepare('BEGIN IMMEDIATE');
  const rollbackCheck = db.prepare('ROLLBACK');

  /** Take the write lock and let it go at once; BUSY when another connection holds it. */
  function databaseReadiness(): string | null {
    if (transactions.inTransaction) return null;
    try {
      db.pragma('busy_timeout = 0');
      readinessCheck.run();
      rollbackCheck.run();
      return null;
    } catch (error) {
      const mapped = mapDriverError(error);
      return mapped instanceof EngineError
        ? `${mapped.code}: ${mapped.message}`
        : String((mapped as Error)?.message ?? mapped);
    } finally {
      if (db.inTransaction) rollbackCheck.run();
      db.pragma(`busy_timeout = ${limits.busyTimeoutMs}`);
    }
  }

  return {
    limits,
    ledger,
    db,
    execute,
    executeBatch,
    executeGroup,
    get transactionRetries() {
      return transactions.retried;
    },
    onBatch: (listener) => {
      batchListeners.push(listener);
    },
    operationType: (request) => describeOperation(request)?.type,
    describeOperation,
    peekOperation: (request) => {
      const document = documents.peek(request.query);
      if (!document) return undefined;
      const plan = planOperation(document, request.operationName);
      return 'mode' in plan ? summaryOf(document, plan) : undefined;
    },
    graphql: (query, variables, opts) =>
      execute(
        { query, variables: variables ?? null, operationName: opts?.operationName ?? null },
        {
          ...(opts?.principal === undefined ? {} : { principal: opts.principal }),
          ...(opts?.apiKey === undefined ? {} : { apiKey: opts.apiKey }),
          ...(opts?.transport === undefined ? {} : { transport: opts.transport }),
        },
      ),
    executeAsync,
    graphqlAsync: (query, variables, opts = {}) => {
      const { operationName, ...rest } = opts;
      return executeAsync({ query, variables: variables ?? null, operationName: operationName ?? null }, rest);
    },
    waitForExecution,
    executionWaits,
    awaitExecutions,
    wakeWaiters,
    createWorker: (workerOptions = {}) =>
      new Worker(services, transactions, {
        owner: workerOptions.owner ?? `worker-${process.pid}`,
        pollMs: workerOptions.pollMs ?? 250,
        onAttempt: (outcome) => {
          for (const listener of attemptListeners) listener(outcome);
          workerOptions.onAttempt?.(outcome);
        },
        onError: workerOptions.onError ?? logError,
        // PostgreSQL: other processes' starts wake this worker (they NOTIFY after their commit, see below).
        ...(onPostgres && !options.readOnly ? { subscribe: (wake: () => void) => listenForStarts(path, wake) } : {}),
      }),
    onStarted: (listener) => {
      startedListeners.push(listener);
    },
    onAttempt: (listener) => {
      attemptListeners.push(listener);
    },
    onModelCall: (listener) => {
      modelCallListeners.push(listener);
    },
    onActionsChanged: (listener) => {
      changedListeners.push(listener);
    },
    readiness: () => ({
      database: databaseReadiness(),
      sandbox: sandboxes.current() ? null : 'the sandbox is being replaced after a crash',
    }),
    queueStats: () => {
      const now = clock.now();
      const row = queue.queueStats.get({ now: now.toISOString() })!;
      return {
        queued: row.queued,
        due: row.due,
        oldestDueAgeMs: row.oldest_due ? Math.max(0, now.getTime() - Date.parse(row.oldest_due)) : 0,
      };
    },
    authenticate: knownPrincipal,
    ensureAdmin: (apiKey) =>
      transactions.run('write', () => ({
        value: ensureAdmin(clientDeps, apiKey, (change) =>
          transactions.afterCommit(() => logger.info({ event: 'key', change, client: 'admin' }, `admin key ${change}`)),
        ),
        commit: true,
      })),
    close: () => {
      checkpointer?.stop();
      db.close();
      sandboxes.dispose();
    },
    stats: () => ({
      documentCacheSize: documents.size,
      documentCacheBytes: documents.bytes,
      celCacheSize: cel.size,
      recordCacheSize: Math.max(
        ledgerDeps.cache.journals.size,
        ledgerDeps.cache.tranCodesByCode.size,
        services.activeTriggers.size,
        ledger.tranCodeCacheSize,
        actionDeps.versions.size,
        actionDeps.documents.size,
      ),
      idleSandboxContexts: sandboxes.current()?.idleContexts ?? 0,
      executionWaiters: waitersInFlight,
      executionWaitsRefused: waitsRefused,
    }),
    sandboxReady: () => sandboxes.ready(),
  };
}

/**
 * The limits whose default depends on the backend, where the operator left them out. On
 * PostgreSQL a running tool holds its row locks and its process, not the whole database, so a
 * version may ask for a longer timeout (toolTimeoutMsMax, PG_TOOL_TIMEOUT_MS_MAX).
 */
function withBackendDefaults(limits: Partial<Limits> | undefined, postgres: boolean): Partial<Limits> {
  if (!postgres || limits?.toolTimeoutMsMax !== undefined) return limits ?? {};
  return { ...limits, toolTimeoutMsMax: PG_TOOL_TIMEOUT_MS_MAX };
}

/** What the server needs to know of an operation before it runs it (see OperationSummary). */
function summaryOf(document: DocumentNode, plan: OperationPlan): OperationSummary {
  const traits = operationTraits(document, plan.operation);
  // A request under the operator budget may run for operatorDeadlineMs: it shares no group.
  const long = traits.long || plan.budget !== 'STANDARD';
  return {
    type: plan.mode === 'write' ? 'mutation' : 'query',
    name: plan.operation.name?.value ?? null,
    dryRun: plan.dryRun,
    ...traits,
    long,
  };
}

/** One line per attempt: info when it succeeded, warn when it failed (with the next retry time, if any). */
function logAttempt(logger: Logger, outcome: AttemptOutcome): void {
  const fields = {
    event: 'attempt',
    executionId: outcome.executionId,
    action: outcome.version === null ? outcome.action : `${outcome.action}@${outcome.version}`,
    attempt: outcome.attempt,
    maxAttempts: outcome.maxAttempts,
    outcome: outcome.status === 'QUEUED' ? 'RETRY' : outcome.status,
    durationMs: Math.round(outcome.durationMs * 10) / 10,
    ...(outcome.error ? { code: outcome.error.code } : {}),
    ...(outcome.runAt ? { retryAt: outcome.runAt } : {}),
  };
  if (outcome.status === 'SUCCEEDED') logger.info(fields, 'attempt succeeded');
  else if (outcome.status === 'QUEUED') logger.warn(fields, `attempt failed, retry at ${outcome.runAt}`);
  else if (outcome.error && isRetryable(outcome.error)) logger.warn(fields, 'attempt failed, no attempts left');
  else logger.warn(fields, `attempt failed, not retried (${outcome.error?.code ?? 'the error'} is not retryable)`);
}

function toErrorData(formatted: { message: string; extensions?: Record<string, unknown> }): ErrorData {
  const ext = formatted.extensions ?? {};
  const data: ErrorData = { code: isErrorCode(ext.code) ? ext.code : 'INTERNAL', message: formatted.message };
  if (typeof ext.hint === 'string') data.hint = ext.hint;
  if (ext.details !== undefined) data.details = ext.details;
  return data;
}

/**
 * Wake `wake` whenever a process commits a start on this PostgreSQL database (NOTIFY
 * tally_executions). Returns what stops listening. A server without LISTEN (or a dropped
 * connection) leaves the worker polling: said once on stderr, nothing fails.
 */
function listenForStarts(url: string, wake: () => void): () => void {
  let listener: PgListener | null = null;
  const polling = (error: Error) =>
    process.stderr.write(`tally: workers poll for started executions (${error.message})\n`);
  try {
    listener = new PgListener(url, 'tally_executions', wake, polling);
  } catch (error) {
    polling(error as Error);
  }
  return () => listener?.close();
}
