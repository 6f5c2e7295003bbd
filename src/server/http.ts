import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { invalidKey } from '../auth/clients.js';
import type { AsyncRequestOptions, Engine, OperationSummary, RequestOptions, WaitOptions } from '../engine.js';
import { EngineError, quote } from '../errors.js';
import type { Worker } from '../execution/queue/worker.js';
import { errorAnswer, type FormattedResult, type GraphqlRequest } from '../graphql/executor.js';
import { type Logger, silentLogger } from '../log.js';
import { jsonTextTooDeep, McpHttp, sendJsonRpcError } from '../mcp/http.js';
import { assetReader, consolePage } from './console-page.js';
import { ServerMetrics } from './metrics.js';
import type { ReadPool } from '../runtime/read-pool.js';
import { WriteQueue } from '../runtime/write-queue.js';
import { engineExecutor, type Executor, ExecutorSwitch } from '../runtime/writer-thread.js';
import type { WriterSnapshot } from '../runtime/writer-worker.js';
import type { Limits } from '../limits.js';

const GRAPHQL_RESPONSE = 'application/graphql-response+json';

export interface ServerOptions {
  /** Where a request that failed inside the server is reported, when there is no logger. */
  log?: (line: string) => void;
  /** One line per request (and per deploy); silent by default. */
  logger?: Logger;
  /** The in-process queue worker, when the server runs one: /readyz reports it stopped. */
  worker?: Worker;
  /** Origins a browser-based MCP client may call /mcp from (default: loopback origins only). */
  mcpAllowedOrigins?: readonly string[];
  /**
   * Read-only connections on worker threads (see ReadPool): queries run there, beside the writer,
   * from the last committed state. Left out, queries run on the writer between mutations.
   */
  readPool?: ReadPool;
}

/** What the server learns about a request as it handles it, for its log line and /metrics. */
interface RequestTrace {
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

const traces = new WeakMap<ServerResponse, RequestTrace>();
const operability = new WeakMap<Server, Operability>();

/**
 * Run what the write queue sends to the writer (group commits, and queries when there is no read
 * pool) on `tally serve`'s writer thread from now on (see WriterThread), so that their work (a tool
 * running to its deadline) never holds this thread, which then only checks keys, parses documents
 * to route them, waits on executions, and replies. What runs on the engine finishes there. The
 * thread's attempts wake this thread's waits. The server's in-process queue worker, if any, is the
 * caller's to stop: the thread runs its own.
 */
export function attachWriter(server: Server, writer: Executor): void {
  const ops = operability.get(server);
  if (!ops) throw new Error('bug: not a Tally server');
  writer.onAttempt((outcome) => ops.engine.wakeWaiters(outcome.executionId, outcome.status));
  ops.executor.switchTo(writer);
}

/**
 * Hand queries to a read pool from now on (`tally serve` starts the pool after it listens, so
 * start-up is not held up by the threads; until then queries run on the writer).
 */
export function attachReadPool(server: Server, pool: ReadPool): void {
  const ops = operability.get(server);
  if (!ops) throw new Error('bug: not a Tally server');
  ops.reads = pool;
}

interface Operability {
  /** This thread's engine: it checks keys, routes, and holds the waits on executions. */
  engine: Engine;
  /** The writer, which only the write queue calls: the engine, or the writer thread once attached. */
  executor: ExecutorSwitch;
  metrics: ServerMetrics;
  writes: WriteQueue;
  reads: ReadPool | undefined;
  mcp: McpHttp;
}

/**
 * GraphQL over HTTP at /graphql, following the GraphQL-over-HTTP spec: POST with a JSON body for
 * everything, GET with URL parameters for queries only. A browser's GET shows a query console.
 */
export function createServer(engine: Engine, options: ServerOptions = {}): Server {
  const limits = engine.limits;
  // Node checks request and header timeouts on an interval (30 s by default); check often enough to honour ours.
  const timeouts = [limits.requestTimeoutMs, limits.headersTimeoutMs].filter((ms) => ms > 0);
  const connectionsCheckingInterval = Math.max(50, Math.min(1000, Math.floor(Math.min(...timeouts, 4000) / 4)));
  const asset = assetReader();
  const logger = options.logger ?? silentLogger;
  const logInternal = (error: unknown) =>
    options.logger
      ? logger.error(
          { event: 'internal', error: error instanceof Error ? (error.stack ?? error.message) : String(error) },
          'mcp session failed',
        )
      : (options.log ?? console.error)(
          `tally: mcp session failed: ${error instanceof Error ? error.message : String(error)}`,
        );
  const executor = new ExecutorSwitch(engineExecutor(engine, options.worker));
  // MCP sessions' requests take the same way as /graphql's (see run), as the client of their key.
  const mcpEngine = {
    limits,
    authenticate: (apiKey: string) => engine.authenticate(apiKey),
    onActionsChanged: (listener: () => void) => executor.onActionsChanged(listener),
    graphqlAsync: (
      query: string,
      variables?: Record<string, unknown> | null,
      options: AsyncRequestOptions & { operationName?: string | null } = {},
    ) => {
      const { operationName, signal, waitMsMax, ...rest } = options;
      const request: GraphqlRequest = { query, variables: variables ?? null, operationName: operationName ?? null };
      const principal = rest.apiKey === undefined ? (rest.principal ?? '') : engine.authenticate(rest.apiKey);
      if (principal === null) return Promise.resolve(errorAnswer(invalidKey()));
      const bytes = Buffer.byteLength(query) + Buffer.byteLength(JSON.stringify(variables ?? null));
      return run(ops, request, engine.peekOperation(request), rest, principal, bytes, {
        ...(signal ? { signal } : {}),
        ...(waitMsMax === undefined ? {} : { waitMsMax }),
      });
    },
  };
  const mcp = new McpHttp(mcpEngine, {
    logError: logInternal,
    ...(options.mcpAllowedOrigins ? { allowedOrigins: options.mcpAllowedOrigins } : {}),
  });
  const ops: Operability = {
    engine,
    executor,
    metrics: new ServerMetrics(engine, executor, () => ops.reads?.stats()),
    writes: new WriteQueue(engine, () => executor),
    reads: options.readPool,
    mcp,
  };
  const server = createHttpServer({ connectionsCheckingInterval }, (req, res) => {
    const trace: RequestTrace = {
      startedMs: performance.now(),
      graphql: false,
      type: 'unknown',
      operation: null,
      dryRun: false,
      principal: null,
      outcome: 'ok',
      changes: 0,
    };
    traces.set(res, trace);
    res.once('close', () => finishRequest(logger, ops.metrics, req, res, trace));
    handle(engine, asset, ops, req, res).catch((error: unknown) => {
      if (options.logger)
        logger.error(
          { event: 'internal', error: error instanceof Error ? (error.stack ?? error.message) : String(error) },
          'request failed',
        );
      else options.log?.(`tally: request failed: ${String(error)}`);
      if (!res.headersSent)
        sendErrors(res, 500, 'application/json', [new EngineError('INTERNAL', 'the request failed')]);
      else res.end();
    });
  });
  operability.set(server, ops);
  server.requestTimeout = limits.requestTimeoutMs;
  server.headersTimeout =
    limits.requestTimeoutMs > 0 ? Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs) : limits.headersTimeoutMs;
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  boundConnections(server, limits);
  server.once('close', () => void mcp.closeAll());
  return server;
}

/** One open connection, as boundConnections tracks it. */
interface Connection {
  socket: Socket;
  address: string;
  /** Requests in flight on it (read, running, or their responses being written). */
  active: number;
  /** Whether it has sent a request (one that never did is the first to be closed for room). */
  served: boolean;
  /** Closes it when its first request has not arrived within headersTimeoutMs. */
  timer: NodeJS.Timeout | undefined;
  /** socket.bytesWritten when a sweep last saw it, and since when its output has not moved (0: it moves, or it has none). */
  written: number;
  stalledSince: number;
}

/**
 * Connections are the one thing a peer gets without a key, and each holds a file descriptor. So a
 * connection must send its first request within headersTimeoutMs of opening (Node's headersTimeout
 * covers a request's headers once they have begun; keepAliveTimeoutMs the wait for the next
 * request), and at most connectionsMax are open, connectionsPerAddressMax from one peer address. A
 * connection that would pass a bound makes room by closing the connection (of its own address, or
 * of all) open the longest with no request in flight, one that never sent a request first: an
 * idle connection holds nothing anyone is waiting for. When every one has a request in flight, the
 * new connection is closed at once. server.maxConnections, one place above connectionsMax (the
 * newcomer's, before it makes room), is Node's own bound, counting connections still closing.
 *
 * A response the peer does not read holds its connection busy, and no request timeout covers it:
 * so a sweep looks at each connection with output waiting. One whose output has not moved since
 * the last sweep is stalled: it makes room like an idle one, and is closed once stalled for
 * responseStallMs. A slow reader is not stalled; a peer that reads nothing is.
 */
function boundConnections(server: Server, limits: Readonly<Limits>): void {
  const all = new Map<Socket, Connection>();
  const byAddress = new Map<string, Map<Socket, Connection>>();
  const forget = (connection: Connection) => {
    clearTimeout(connection.timer);
    all.delete(connection.socket);
    const mine = byAddress.get(connection.address);
    mine?.delete(connection.socket);
    if (mine?.size === 0) byAddress.delete(connection.address);
  };
  /** Close the oldest connection of `connections` with no request in flight, or a stalled one (never served first); false when every one is busy. */
  const makeRoom = (connections: Map<Socket, Connection>): boolean => {
    let oldestServed: Connection | undefined;
    for (const connection of connections.values()) {
      if (connection.active > 0 && connection.stalledSince === 0) continue;
      if (!connection.served) {
        oldestServed = connection;
        break;
      }
      oldestServed ??= connection;
    }
    if (!oldestServed) return false;
    forget(oldestServed);
    oldestServed.socket.destroy();
    return true;
  };
  server.maxConnections = limits.connectionsMax + 1;
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    const mine = byAddress.get(address);
    if ((mine?.size ?? 0) >= limits.connectionsPerAddressMax && !makeRoom(mine!)) return void socket.destroy();
    if (all.size >= limits.connectionsMax && !makeRoom(all)) return void socket.destroy();
    const connection: Connection = {
      socket,
      address,
      active: 0,
      served: false,
      timer: undefined,
      written: 0,
      stalledSince: 0,
    };
    if (limits.headersTimeoutMs > 0) {
      connection.timer = setTimeout(() => {
        if (!connection.served) socket.destroy();
      }, limits.headersTimeoutMs);
      connection.timer.unref();
    }
    all.set(socket, connection);
    if (mine) mine.set(socket, connection);
    else byAddress.set(address, new Map([[socket, connection]]));
    socket.once('close', () => forget(connection));
  });
  // Before the request's own handler, which may answer (and close the response) at once.
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    const connection = all.get(req.socket);
    if (!connection) return;
    if (!connection.served) {
      connection.served = true;
      clearTimeout(connection.timer);
    }
    connection.active++;
    res.once('close', () => connection.active--);
  });
  if (limits.responseStallMs > 0) {
    const sweep = setInterval(
      () => {
        const now = Date.now();
        for (const connection of all.values()) {
          const { socket } = connection;
          if (socket.writableLength === 0 || socket.bytesWritten !== connection.written) {
            connection.written = socket.bytesWritten;
            connection.stalledSince = 0;
          } else if (connection.stalledSince === 0) {
            connection.stalledSince = now;
          } else if (now - connection.stalledSince >= limits.responseStallMs) {
            forget(connection);
            socket.destroy();
          }
        }
      },
      Math.max(50, Math.min(1000, Math.floor(limits.responseStallMs / 4))),
    );
    sweep.unref();
    server.once('close', () => clearInterval(sweep));
  }
}

/**
 * One line per request once its response is written (or the client went away): what ran, as whom,
 * how long it took and how it ended. Never the variables, the key or the result: they hold money
 * and secrets.
 */
function finishRequest(
  logger: Logger,
  metrics: ServerMetrics,
  req: IncomingMessage,
  res: ServerResponse,
  trace: RequestTrace,
): void {
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
 * read thread runs it (sendResult marks a request that did not validate `unknown` again).
 */
function traceOperation(engine: Engine, res: ServerResponse, request: GraphqlRequest): OperationSummary | undefined {
  const trace = traces.get(res);
  const operation = engine.peekOperation(request);
  if (!trace || !operation) return operation;
  trace.type = operation.type;
  trace.operation = operation.name;
  trace.dryRun = operation.dryRun;
  if (operation.name === 'Deploy')
    trace.changes = Object.keys(request.variables ?? {}).filter((name) => /^v\d+$/.test(name)).length;
  return operation;
}

async function handle(
  engine: Engine,
  asset: ReturnType<typeof assetReader>,
  ops: Operability,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  let url: URL;
  try {
    url = new URL(req.url ?? '/', 'http://localhost');
  } catch {
    req.resume();
    return sendErrors(res, 400, 'application/json', [
      new EngineError('BAD_REQUEST', `the request target ${quote(req.url ?? '')} is not a valid URL path`, {
        hint: 'Send requests to /graphql.',
      }),
    ]);
  }
  if (url.pathname === '/healthz' || url.pathname === '/readyz' || url.pathname === '/metrics') {
    return probe(engine, ops, url.pathname, req, res);
  }
  if (req.method === 'GET' && url.pathname.startsWith('/graphql/assets/')) {
    const found = asset(url.pathname.slice('/graphql/assets/'.length));
    if (found) {
      res
        .writeHead(200, {
          'content-type': `${found.type}; charset=utf-8`,
          'cache-control': 'public, max-age=86400',
          'content-length': found.body.length,
        })
        .end(found.body);
      return;
    }
  }
  if (url.pathname === '/mcp') return serveMcp(engine, ops.mcp, req, res);
  if (url.pathname !== '/graphql') {
    if (url.pathname === '/' && req.method === 'GET') {
      res.writeHead(302, { location: '/graphql' }).end();
      return;
    }
    sendErrors(res, 404, 'application/json', [
      new EngineError('NOT_FOUND', `no route ${quote(url.pathname)}`, { hint: 'GraphQL is served at /graphql.' }),
    ]);
    return;
  }
  const accept = req.headers.accept ?? '';
  const mediaType = chooseMediaType(accept);

  if (req.method === 'GET' && accept.includes('text/html') && !url.searchParams.has('query')) {
    // GraphiQL itself holds no data; its requests carry the key like any other.
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(consolePage());
    return;
  }
  traces.get(res)!.graphql = true;
  // Checked now, to refuse a bad key before reading the body; the engine checks the key again
  // inside the request's transaction (a key rotated meanwhile is refused).
  const client = authenticate(engine, req.headers.authorization);
  if (client instanceof EngineError) {
    if (req.method === 'POST') req.resume();
    return sendUnauthenticated(res, mediaType, client);
  }
  const { apiKey } = client;
  traces.get(res)!.principal = client.principal;

  if (req.method === 'GET') {
    const request = requestFromSearchParams(url.searchParams);
    if (request instanceof EngineError) return sendErrors(res, 400, mediaType, [request]);
    const operation = traceOperation(engine, res, request);
    if (operation?.type === 'mutation') {
      res.setHeader('allow', 'POST');
      return sendErrors(res, 405, mediaType, [
        new EngineError('BAD_REQUEST', 'mutations must be sent with POST', { hint: 'POST the request as JSON.' }),
      ]);
    }
    return sendResult(res, mediaType, await runFor(ops, req, res, request, operation, { apiKey }, client.principal, 0));
  }

  if (req.method !== 'POST') {
    res.setHeader('allow', 'GET, POST');
    return sendErrors(res, 405, mediaType, [
      new EngineError('BAD_REQUEST', `method ${req.method} is not allowed on /graphql`, {
        hint: 'Use POST (or GET for queries).',
      }),
    ]);
  }
  const contentType = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
  if (contentType !== 'application/json') {
    return sendErrors(res, 415, mediaType, [
      new EngineError('BAD_REQUEST', `content-type ${quote(req.headers['content-type'] ?? '')} is not supported`, {
        hint: 'Send the body as application/json.',
      }),
    ]);
  }
  const body = await readBody(req, engine.limits.requestBodyBytesMax);
  if (body instanceof EngineError) {
    res.setHeader('connection', 'close');
    return sendErrors(res, body.code === 'LIMIT_EXCEEDED' ? 413 : 400, mediaType, [body]);
  }
  const request = requestFromBody(body);
  if (request instanceof EngineError) return sendErrors(res, 400, mediaType, [request]);
  const operation = traceOperation(engine, res, request);
  // `tally mcp --server` proxies MCP tool calls here and says so: its executions record the transport.
  const transport = req.headers['tally-transport'] === 'mcp' ? { transport: 'mcp' as const } : {};
  return sendResult(
    res,
    mediaType,
    await runFor(
      ops,
      req,
      res,
      request,
      operation,
      { apiKey, ...transport },
      client.principal,
      Buffer.byteLength(body),
    ),
  );
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
async function run(
  ops: Operability,
  request: GraphqlRequest,
  operation: OperationSummary | undefined,
  options: RequestOptions,
  principal: string,
  bytes: number,
  wait: WaitOptions,
): Promise<FormattedResult> {
  if (operation?.type === 'mutation') return ops.writes.submit({ request, options }, principal, bytes);
  const reads = ops.reads;
  const asked = { request, options };
  const who = {
    ...(options.apiKey === undefined ? {} : { apiKey: options.apiKey }),
    ...(options.principal === undefined ? {} : { principal: options.principal }),
  };
  if (operation?.waits) {
    const waits = reads
      ? await reads.executionWaits(request, who, wait.signal)
      : await ops.writes.executionWaits(asked, principal, bytes, wait.signal);
    await ops.engine.awaitExecutions(waits, wait);
  }
  return reads ? reads.execute(request, who, wait.signal) : ops.writes.query(asked, principal, bytes, wait.signal);
}

/**
 * run, for an HTTP request: the client going away ends its waits (its slot among
 * executionWaitersMax is freed at once) and drops it while it still waits for its turn; the waits
 * end in time to answer within requestTimeoutMs of the request's start (less a margin for the answer).
 */
async function runFor(
  ops: Operability,
  req: IncomingMessage,
  res: ServerResponse,
  request: GraphqlRequest,
  operation: OperationSummary | undefined,
  options: RequestOptions,
  principal: string,
  bytes: number,
): Promise<FormattedResult> {
  const gone = new AbortController();
  const abort = () => gone.abort();
  res.once('close', abort);
  req.socket.once('close', abort);
  try {
    const timeoutMs = ops.engine.limits.requestTimeoutMs;
    const startedMs = traces.get(res)?.startedMs ?? performance.now();
    const margin = Math.min(1000, Math.floor(timeoutMs / 10));
    const waitMsMax =
      timeoutMs > 0 ? Math.max(0, Math.floor(timeoutMs - margin - (performance.now() - startedMs))) : undefined;
    // A mutation is never dropped: once sent, it is the client's to learn whether it was written.
    const signal = operation?.type === 'mutation' ? {} : { signal: gone.signal };
    return await run(ops, request, operation, options, principal, bytes, {
      ...signal,
      ...(waitMsMax === undefined ? {} : { waitMsMax }),
    });
  } finally {
    res.off('close', abort);
    req.socket.off('close', abort);
  }
}

/**
 * MCP (Streamable HTTP) at /mcp: the Origin check the specification asks for (403), the same
 * Bearer key as /graphql (401 with WWW-Authenticate), the body read within requestBodyBytesMax,
 * then the session's transport (see McpHttp).
 */
async function serveMcp(engine: Engine, mcp: McpHttp, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const origin = req.headers.origin;
  if (!mcp.originAllowed(origin)) {
    req.resume();
    return sendErrors(res, 403, 'application/json', [
      new EngineError('ACCESS_DENIED', `origin ${quote(origin)} may not call /mcp`, {
        hint: 'Call /mcp from a local client, or list the origin in mcpAllowedOrigins.',
      }),
    ]);
  }
  const client = authenticate(engine, req.headers.authorization);
  if (client instanceof EngineError) {
    req.resume();
    // A session opened with a key since rotated or deleted is closed: it holds a slot no longer usable.
    mcp.refused(req);
    return sendUnauthenticated(res, 'application/json', client);
  }
  traces.get(res)!.principal = client.principal;
  let body: unknown;
  if (req.method === 'POST') {
    const text = await readBody(req, engine.limits.requestBodyBytesMax);
    if (text instanceof EngineError) {
      res.setHeader('connection', 'close');
      return sendErrors(res, text.code === 'LIMIT_EXCEEDED' ? 413 : 400, 'application/json', [text]);
    }
    if (jsonTextTooDeep(text, mcp.bodyDepthMax)) {
      return sendJsonRpcError(
        res,
        400,
        -32600,
        `the body is nested more than ${mcp.bodyDepthMax} levels deep (jsonDepthMax ${engine.limits.jsonDepthMax} for a tool's arguments, plus the JSON-RPC envelope)`,
      );
    }
    try {
      body = JSON.parse(text);
    } catch (error) {
      return sendJsonRpcError(res, 400, -32700, `Parse error: ${(error as Error).message}`);
    }
  }
  return mcp.handle(req, res, { apiKey: client.apiKey, principal: client.principal, body });
}

/**
 * /healthz: the process answers (no database access, no key). /readyz: it can do work now (the
 * database takes a write, the sandbox is loaded, the worker runs when there is one); 503 with the
 * failed check otherwise, no key. /metrics: Prometheus text, for any client's key (a client with no
 * policies can read metrics and do nothing else).
 */
async function probe(
  engine: Engine,
  ops: Operability,
  path: string,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    req.resume();
    res.setHeader('allow', 'GET, HEAD');
    return sendErrors(res, 405, 'application/json', [
      new EngineError('BAD_REQUEST', `method ${req.method} is not allowed on ${path}`, { hint: `Use GET ${path}.` }),
    ]);
  }
  if (path === '/healthz') return send(res, 200, 'application/json', { status: 'ok' });
  if (path === '/readyz') {
    // The engine that runs requests (the writer thread's under tally serve): its database lock, sandbox and queue worker.
    const { database, sandbox, workerRunning } = await readiness(engine.limits, ops.executor);
    // Under --no-worker, executions run elsewhere (tally worker): not this server's to check.
    const worker = workerRunning === null || workerRunning ? null : 'the queue worker is not running';
    const checks = {
      database: database ?? 'ok',
      sandbox: sandbox ?? 'ok',
      worker: worker ?? (workerRunning === null ? 'disabled' : 'ok'),
    };
    const ready = database === null && sandbox === null && worker === null;
    return send(res, ready ? 200 : 503, 'application/json', { status: ready ? 'ready' : 'not ready', checks });
  }
  const client = authenticate(engine, req.headers.authorization);
  if (client instanceof EngineError) return sendUnauthenticated(res, 'application/json', client);
  const text = await ops.metrics.registry.metrics();
  res
    .writeHead(200, { 'content-type': ops.metrics.registry.contentType, 'content-length': Buffer.byteLength(text) })
    .end(text);
}

/**
 * The engine's readiness, trying the write lock again every few milliseconds for up to
 * readinessWaitMs while another process holds it: the waits are timers, so other requests run
 * meanwhile (a flood of /readyz cannot stall the server).
 */
async function readiness(limits: Readonly<Limits>, executor: Executor): Promise<WriterSnapshot> {
  const end = performance.now() + limits.readinessWaitMs;
  let checks = await executor.snapshot();
  while (checks.database?.startsWith('BUSY') && performance.now() < end) {
    await new Promise((resolve) => setTimeout(resolve, 5));
    checks = await executor.snapshot();
  }
  return checks;
}

/** The API key of `Authorization: Bearer <api key>` and its client's principal, or UNAUTHENTICATED. */
function authenticate(engine: Engine, header: string | undefined): { apiKey: string; principal: string } | EngineError {
  if (!header) {
    return new EngineError('UNAUTHENTICATED', 'the request has no Authorization header', {
      hint: 'Send `Authorization: Bearer <api key>`.',
    });
  }
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match) {
    return new EngineError('UNAUTHENTICATED', 'the Authorization header is not `Bearer <api key>`', {
      hint: 'Send `Authorization: Bearer <api key>`.',
    });
  }
  const principal = engine.authenticate(match[1]!);
  if (!principal) return invalidKey();
  return { apiKey: match[1]!, principal };
}

/** application/graphql-response+json when the client accepts it, otherwise application/json. */
function chooseMediaType(accept: string): string {
  return accept.includes(GRAPHQL_RESPONSE) ? GRAPHQL_RESPONSE : 'application/json';
}

function readBody(req: IncomingMessage, bytesMax: number): Promise<string | EngineError> {
  return new Promise((resolve) => {
    const declared = Number(req.headers['content-length'] ?? '0');
    if (declared > bytesMax) {
      req.resume();
      resolve(
        new EngineError('LIMIT_EXCEEDED', `the request body is ${declared} bytes; requestBodyBytesMax is ${bytesMax}`),
      );
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    req.on('data', (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > bytesMax) {
        done = true;
        req.resume();
        resolve(new EngineError('LIMIT_EXCEEDED', `the request body is over requestBodyBytesMax (${bytesMax} bytes)`));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (!done) resolve(Buffer.concat(chunks).toString('utf8'));
    });
    req.on('error', (error) => {
      if (!done) resolve(new EngineError('BAD_REQUEST', `the request body could not be read: ${error.message}`));
    });
  });
}

function requestFromBody(body: string): GraphqlRequest | EngineError {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch (error) {
    return new EngineError('BAD_REQUEST', `the request body is not valid JSON: ${(error as Error).message}`, {
      hint: 'Send {"query": "...", "variables": {...}}.',
    });
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    return new EngineError('BAD_REQUEST', `the request body must be a JSON object, got ${quote(parsed)}`, {
      hint: 'Send {"query": "...", "variables": {...}}; batched requests are not supported.',
    });
  }
  return checkRequest(parsed as Record<string, unknown>);
}

function requestFromSearchParams(params: URLSearchParams): GraphqlRequest | EngineError {
  const raw: Record<string, unknown> = { query: params.get('query'), operationName: params.get('operationName') };
  for (const key of ['variables', 'extensions']) {
    const text = params.get(key);
    if (text === null) continue;
    try {
      raw[key] = JSON.parse(text);
    } catch {
      return new EngineError('BAD_REQUEST', `the ${key} parameter is not valid JSON: ${quote(text)}`);
    }
  }
  return checkRequest(raw);
}

function checkRequest(raw: Record<string, unknown>): GraphqlRequest | EngineError {
  const { query, variables, operationName, extensions } = raw;
  if (typeof query !== 'string') {
    return new EngineError('BAD_REQUEST', `query must be a string, got ${quote(query)}`, {
      hint: 'Send {"query": "{ journal { name } }"}.',
    });
  }
  if (variables != null && (typeof variables !== 'object' || Array.isArray(variables))) {
    return new EngineError('BAD_REQUEST', `variables must be a JSON object, got ${quote(variables)}`);
  }
  if (operationName != null && typeof operationName !== 'string') {
    return new EngineError('BAD_REQUEST', `operationName must be a string, got ${quote(operationName)}`);
  }
  if (extensions != null && (typeof extensions !== 'object' || Array.isArray(extensions))) {
    return new EngineError('BAD_REQUEST', `extensions must be a JSON object, got ${quote(extensions)}`);
  }
  return {
    query,
    variables: (variables as Record<string, unknown> | null) ?? null,
    operationName: (operationName as string | null) ?? null,
  };
}

/** The codes of a request stopped before it ran because its document did not parse, validate or fit the limits. */
const NOT_RUN = new Set(['GRAPHQL_PARSE_FAILED', 'GRAPHQL_VALIDATION_FAILED', 'LIMIT_EXCEEDED', 'BAD_REQUEST']);

function sendResult(res: ServerResponse, mediaType: string, result: FormattedResult): void {
  const trace = traces.get(res);
  const code = result.errors?.[0]?.extensions?.code;
  if (trace && result.data === undefined && typeof code === 'string' && NOT_RUN.has(code)) {
    // Traced from its parse alone: it did not validate, so it ran as nothing.
    trace.type = 'unknown';
    trace.operation = null;
    trace.dryRun = false;
  }
  if (result.data === undefined && result.errors?.[0]?.extensions?.code === 'UNAUTHENTICATED') {
    // The key stopped being valid between its first check and the request's transaction.
    res.setHeader('www-authenticate', 'Bearer realm="tally"');
    return send(res, 401, mediaType, result);
  }
  // Nothing ran because there was no room (a full write queue or read queue, the database busy): 503, try again shortly.
  if ((result.data === undefined || result.data === null) && result.errors?.[0]?.extensions?.code === 'BUSY') {
    res.setHeader('retry-after', '1');
    return send(res, 503, mediaType, result);
  }
  // application/graphql-response+json: a request that never executed (no `data`) is a 400.
  const status = mediaType === GRAPHQL_RESPONSE && result.data === undefined ? 400 : 200;
  send(res, status, mediaType, result);
}

function sendUnauthenticated(res: ServerResponse, mediaType: string, error: EngineError): void {
  res.setHeader('www-authenticate', 'Bearer realm="tally"');
  sendErrors(res, 401, mediaType, [error]);
}

function sendErrors(res: ServerResponse, status: number, mediaType: string, errors: EngineError[]): void {
  send(res, status, mediaType, { errors: errors.map((e) => ({ message: e.message, extensions: e.extensions })) });
}

function send(
  res: ServerResponse,
  status: number,
  mediaType: string,
  body: { errors?: ReadonlyArray<{ extensions?: Record<string, unknown> }> } | object,
): void {
  const code = 'errors' in body ? body.errors?.[0]?.extensions?.code : undefined;
  const trace = traces.get(res);
  if (trace) trace.outcome = typeof code === 'string' ? code : 'ok';
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': `${mediaType}; charset=utf-8`, 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
