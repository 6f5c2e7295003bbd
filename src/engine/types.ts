import type { Limits } from '../limits.js';
import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { Durability, Db } from '../storage/database.js';
import type { ExecutionWait } from '../graphql/context.js';
import type { FormattedResult, GraphqlRequest } from '../graphql/executor.js';
import type { Ledger } from '../ledger/ledger.js';
import type { AttemptOutcome } from '../execution/queue/attempt.js';
import type { Worker, WorkerOptions } from '../execution/queue/worker.js';
import type { ModelCallSample, OutboundCallSample } from '../execution/services.js';
import type { ProviderConfig } from '../models/types.js';

/*
 * The engine's public contract: how it is opened (EngineOptions), how a request is asked
 * (RequestOptions, BatchRequest) and what an engine does (Engine). createEngine (src/engine.ts)
 * builds one; the server, the CLI, MCP and embedders hold nothing else.
 */

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
   * The HTTP integrations http tools may call (the server configuration's `integrations` block,
   * checked with parseIntegrations). Left out: none, and http tools are refused.
   */
  integrations?: unknown;
  /** The MCP servers whose tools may be imported and called (the `mcpServers` block). Left out: none. */
  mcpServers?: unknown;
  /**
   * Open `path` (an existing file a writer engine keeps in WAL mode) for reading only, as each
   * thread of the read pool does (src/runtime/read-pool.ts): nothing is migrated (a file of another
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
   * executionWaitersMax waits in flight it resolves at once. Given `progressAfter`, it also resolves
   * when the execution has a progress message (status(text)) newer than that seq.
   */
  waitForExecution(
    executionId: string,
    timeoutMs: number,
    signal?: AbortSignal,
    principal?: string,
    progressAfter?: number,
  ): Promise<void>;
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
  /** After every outside call (http, mcp) a run of this engine's workers made. */
  onOutboundCall(listener: (call: OutboundCallSample) => void): void;
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
