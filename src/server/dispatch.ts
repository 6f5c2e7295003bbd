import type { Engine, OperationSummary, RequestOptions, WaitOptions } from '../engine.js';
import type { FormattedResult, GraphqlRequest } from '../graphql/executor.js';
import type { ReadPool } from './read-pool.js';
import type { WriteQueue } from './write-queue.js';
import type { ExecutorSwitch } from './writer-thread.js';

/** Where a server's requests run: one per server, which attachWriter and attachReadPool change. */
export interface Dispatcher {
  /** This thread's engine: it checks keys, routes, and holds the waits on executions. */
  engine: Engine;
  /** The writer, which only the write queue calls: the engine, or the writer thread once attached. */
  executor: ExecutorSwitch;
  writes: WriteQueue;
  reads: ReadPool | undefined;
}

/**
 * The one way a request reaches an engine, for /graphql and /mcp alike. A mutation joins the group
 * commit (the write queue). A query runs on the read pool; without one (not started yet, none
 * configured, PostgreSQL) it takes its turn in the write queue, alone, between the groups: nothing
 * reaches the writer any other way, so one client's queries and calls delay another client's
 * writes by at most about one of them. A query that asks to wait (`execution(waitMs:)`) first has
 * its wait fields alone run where it will run (engine.executionWaits, a few primary-key reads),
 * waits here, on this thread's engine (a timer and a listener, woken by the writer's attempts, see
 * attachWriter), then runs once. Documents that do not parse go where queries go: they answer
 * their error there.
 */
export async function dispatchRequest(
  dispatcher: Dispatcher,
  request: GraphqlRequest,
  operation: OperationSummary | undefined,
  options: RequestOptions,
  principal: string,
  bytes: number,
  wait: WaitOptions,
): Promise<FormattedResult> {
  if (operation?.type === 'mutation') return dispatcher.writes.submit({ request, options }, principal, bytes);
  const reads = dispatcher.reads;
  const asked = { request, options };
  const who = {
    ...(options.apiKey === undefined ? {} : { apiKey: options.apiKey }),
    ...(options.principal === undefined ? {} : { principal: options.principal }),
  };
  if (operation?.waits) {
    const waits = reads
      ? await reads.executionWaits(request, who, wait.signal)
      : await dispatcher.writes.executionWaits(asked, principal, bytes, wait.signal);
    await dispatcher.engine.awaitExecutions(waits, wait);
  }
  return reads
    ? reads.execute(request, who, wait.signal)
    : dispatcher.writes.query(asked, principal, bytes, wait.signal);
}
