import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Engine, OperationSummary } from '../engine.js';
import type { GraphqlRequest } from '../graphql/executor.js';
import type { Logger } from '../log.js';
import type { ServerMetrics } from './metrics.js';

/** What the server learns about a request as it handles it, for its log line and /metrics. */
export interface RequestTrace {
  startedMs: number;
  /** GraphQL requests are logged at info and counted; probes, GraphiQL and its assets at debug. */
  graphql: boolean;
  type: 'query' | 'mutation' | 'unknown';
  operation: string | null;
  dryRun: boolean;
  principal: string | null;
  /** 'ok', or the code of the first error sent. */
  outcome: string;
  /** Of a deploy: how many changes it applies. */
  changes: number;
}

/** One request as the routes see it: the request, its response, and its trace (which the reply fills in). */
export interface Exchange {
  req: IncomingMessage;
  res: ServerResponse;
  trace: RequestTrace;
}

/** The trace of a request that has just arrived: nothing known yet but when. */
export function startTrace(): RequestTrace {
  return {
    startedMs: performance.now(),
    graphql: false,
    type: 'unknown',
    operation: null,
    dryRun: false,
    principal: null,
    outcome: 'ok',
    changes: 0,
  };
}

/**
 * One line per request once its response is written (or the client went away): what ran, as whom,
 * how long it took and how it ended. Never the variables, the key or the result: they hold money
 * and secrets.
 */
export function finishRequest(logger: Logger, metrics: ServerMetrics, exchange: Exchange): void {
  const { req, res, trace } = exchange;
  const durationMs = Math.round((performance.now() - trace.startedMs) * 10) / 10;
  const outcome = res.writableFinished ? trace.outcome : 'aborted';
  if (!trace.graphql) {
    logger.debug(
      { event: 'request', method: req.method, path: (req.url ?? '').split('?')[0], status: res.statusCode, durationMs },
      'request',
    );
    return;
  }
  metrics.recordRequest({ type: trace.type, operation: trace.operation, outcome, durationMs });
  const fields = {
    event: 'request',
    type: trace.type,
    operation: trace.operation,
    principal: trace.principal,
    outcome: outcome === 'ok' || outcome === 'aborted' ? outcome : 'error',
    ...(outcome === 'ok' || outcome === 'aborted' ? {} : { code: outcome }),
    status: res.statusCode,
    durationMs,
  };
  const message = `${trace.type} ${trace.operation ?? '(anonymous)'} ${outcome}`;
  if (outcome === 'INTERNAL') logger.error(fields, message);
  else logger.info(fields, message);
  // What `tally deploy` sends: one mutation named Deploy, one variable per change.
  if (trace.type === 'mutation' && trace.operation === 'Deploy' && !trace.dryRun && outcome === 'ok') {
    logger.info(
      { event: 'deploy', principal: trace.principal, changes: trace.changes },
      `deploy applied ${trace.changes} change(s)`,
    );
  }
}

/**
 * Note what a request will run, before it runs, and say what it is: a mutation goes to the group
 * commit, a query to the read pool. Only parsed here (a cached document is a hit), not validated:
 * whoever runs it validates it, so a new document's validation does not cost this thread when a
 * read thread runs it (untraceOperation marks a request that did not validate `unknown` again).
 */
export function traceOperation(
  engine: Engine,
  trace: RequestTrace,
  request: GraphqlRequest,
): OperationSummary | undefined {
  const operation = engine.peekOperation(request);
  if (!operation) return operation;
  trace.type = operation.type;
  trace.operation = operation.name;
  trace.dryRun = operation.dryRun;
  if (operation.name === 'Deploy')
    trace.changes = Object.keys(request.variables ?? {}).filter((name) => /^v\d+$/.test(name)).length;
  return operation;
}

/** A request traced from its parse alone that did not validate: it ran as nothing. */
export function untraceOperation(trace: RequestTrace): void {
  trace.type = 'unknown';
  trace.operation = null;
  trace.dryRun = false;
}
