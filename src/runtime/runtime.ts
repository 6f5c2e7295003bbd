import { invalidKey } from '../auth/clients.js';
import type { AsyncRequestOptions, Engine, OperationSummary, RequestOptions, WaitOptions } from '../engine.js';
import { errorAnswer, type FormattedResult, type GraphqlRequest } from '../graphql/executor.js';
import type { Limits } from '../limits.js';
import type { ReadPool } from './read-pool.js';
import { WriteQueue } from './write-queue.js';
import { engineExecutor, type Executor, ExecutorSwitch } from './writer-thread.js';

/** What a runtime is started with beside its engine. */
export interface RuntimeOptions {
  /** The process's in-process queue worker, when it runs one: readiness reports it stopped. */
  worker?: { readonly isRunning: boolean };
  /** Read-only connections on worker threads (see ReadPool): queries run there, beside the writer. */
  readPool?: ReadPool;
}

/**
 * How requests run, the same whichever door they came in by: `tally serve` (GraphQL over HTTP and
 * /mcp), `tally mcp` over stdio, the CLI on a database, and an embedder. A mutation joins the group
 * commit (the write queue); a query runs on the read pool, or without one (not started yet, none
 * configured, PostgreSQL) takes its turn in the write queue, alone, between the groups: nothing
 * reaches the writer any other way, so one client's queries and calls delay another client's
 * writes by at most about one of them. The writer is the engine in-process, or the writer thread
 * once attached (attachWriter). A query that asks to wait (`execution(waitMs:)`) first has its
 * wait fields alone run where it will run (a few primary-key reads), waits here, on this thread's
 * engine (a timer and a listener, woken by the writer's attempts), then runs once.
 */
export class Runtime {
  /** The writer: the engine, or the writer thread once attached. Only the write queue calls it. */
  readonly executor: ExecutorSwitch;
  readonly writes: WriteQueue;
  private reads: ReadPool | undefined;

  constructor(
    /** This thread's engine: it checks keys, routes, and holds the waits on executions. */
    readonly engine: Engine,
    options: RuntimeOptions = {},
  ) {
    this.executor = new ExecutorSwitch(engineExecutor(engine, options.worker));
    this.writes = new WriteQueue(engine, () => this.executor);
    this.reads = options.readPool;
  }

  get limits(): Readonly<Limits> {
    return this.engine.limits;
  }

  get readPool(): ReadPool | undefined {
    return this.reads;
  }

  /**
   * Run what the write queue sends to the writer on a writer thread from now on (see
   * WriterThread), so that its work (a tool running to its deadline) never holds this thread. What
   * runs on the engine finishes there. The thread's attempts wake this thread's waits.
   */
  attachWriter(writer: Executor): void {
    writer.onAttempt((outcome) => this.engine.wakeWaiters(outcome.executionId, outcome.status));
    this.executor.switchTo(writer);
  }

  /** Hand queries to a read pool from now on (until then they run on the writer). */
  attachReadPool(pool: ReadPool): void {
    this.reads = pool;
  }

  /** Called after a write committed that may have changed actions or clients, wherever the writer runs. */
  onActionsChanged(listener: () => void): void {
    this.executor.onActionsChanged(listener);
  }

  /** The principal of an API key, or null (Engine.authenticate). */
  authenticate(apiKey: string): string | null {
    return this.engine.authenticate(apiKey);
  }

  /**
   * The one way a request reaches an engine. `operation` is the request's summary as routed (see
   * Engine.peekOperation; undefined when it does not parse: it goes where queries go and answers
   * its error there); `principal` and `bytes` place it in the write queue's turns and bounds.
   */
  async run(
    request: GraphqlRequest,
    operation: OperationSummary | undefined,
    options: RequestOptions,
    principal: string,
    bytes: number,
    wait: WaitOptions,
  ): Promise<FormattedResult> {
    if (operation?.type === 'mutation') return this.writes.submit({ request, options }, principal, bytes);
    const reads = this.reads;
    const asked = { request, options };
    const who = {
      ...(options.apiKey === undefined ? {} : { apiKey: options.apiKey }),
      ...(options.principal === undefined ? {} : { principal: options.principal }),
    };
    if (operation?.waits) {
      const waits = reads
        ? await reads.executionWaits(request, who, wait.signal)
        : await this.writes.executionWaits(asked, principal, bytes, wait.signal);
      await this.engine.awaitExecutions(waits, wait);
    }
    return reads ? reads.execute(request, who, wait.signal) : this.writes.query(asked, principal, bytes, wait.signal);
  }

  /**
   * A GraphQL request as an MCP session, the CLI or an embedder sends it: as the client of
   * `apiKey` (checked now and again inside its transaction), as `principal`, or (neither) as the
   * engine itself; then run.
   */
  graphqlAsync(
    query: string,
    variables?: Record<string, unknown> | null,
    options: AsyncRequestOptions & { operationName?: string | null } = {},
  ): Promise<FormattedResult> {
    const { operationName, signal, waitMsMax, ...rest } = options;
    const request: GraphqlRequest = { query, variables: variables ?? null, operationName: operationName ?? null };
    const principal = rest.apiKey === undefined ? (rest.principal ?? '') : this.engine.authenticate(rest.apiKey);
    if (principal === null) return Promise.resolve(errorAnswer(invalidKey()));
    const bytes = Buffer.byteLength(query) + Buffer.byteLength(JSON.stringify(variables ?? null));
    return this.run(request, this.engine.peekOperation(request), rest, principal, bytes, {
      ...(signal ? { signal } : {}),
      ...(waitMsMax === undefined ? {} : { waitMsMax }),
    });
  }
}
