import {
  type ServerOptions as HttpServerOptions,
  type IncomingMessage,
  type RequestListener,
  Server,
  type ServerResponse,
} from 'node:http';
import type { Socket } from 'node:net';
import type { Engine } from '../engine.js';
import { bug, EngineError, quote } from '../errors.js';
import type { Worker } from '../execution/queue/worker.js';
import type { Limits } from '../limits.js';
import { type Logger, silentLogger } from '../log.js';
import { assetReader } from './console-page.js';
import { Runtime } from '../runtime/runtime.js';
import { ServerMetrics } from './metrics.js';
import type { ReadPool } from '../runtime/read-pool.js';
import { sendErrors } from './reply.js';
import { redirectToConsole, serveAsset, serveConsolePage } from './routes/console.js';
import { serveGraphql } from './routes/graphql.js';
import { createMcpHttp, serveMcp } from './routes/mcp.js';
import { serveHealth, serveMetrics, serveReady } from './routes/probes.js';
import { type Exchange, finishRequest, startTrace } from './trace.js';
import type { Executor } from '../runtime/writer-thread.js';

export interface ServerOptions {
  /** Where a request that failed inside the server is reported, when there is no logger. */
  log?: (line: string) => void;
  /** One line per request (and per deploy); silent by default. */
  logger?: Logger;
  /** The in-process queue worker, when the server runs one: /readyz reports it stopped. */
  worker?: Worker;
  /** Origins a browser-based MCP client may call /mcp from (default: loopback origins only). */
  mcpAllowedOrigins?: readonly string[];
  /** Offer MCP clients the native graphql tool (TALLY_CONFIG's mcp.graphqlTool; default false). */
  mcpGraphqlTool?: boolean;
  /**
   * Read-only connections on worker threads (see ReadPool): queries run there, beside the writer,
   * from the last committed state. Left out, queries run on the writer between mutations.
   */
  readPool?: ReadPool;
}

/** Node's server, holding where its requests run, for attachWriter and attachReadPool to change. */
class TallyServer extends Server {
  constructor(
    readonly runtime: Runtime,
    options: HttpServerOptions,
    listener: RequestListener,
  ) {
    super(options, listener);
  }
}

/**
 * Run what the write queue sends to the writer (group commits, and queries when there is no read
 * pool) on `tally serve`'s writer thread from now on (see WriterThread), so that their work (a tool
 * running to its deadline) never holds this thread, which then only checks keys, parses documents
 * to route them, waits on executions, and replies. What runs on the engine finishes there. The
 * thread's attempts wake this thread's waits. The server's in-process queue worker, if any, is the
 * caller's to stop: the thread runs its own.
 */
export function attachWriter(server: Server, writer: Executor): void {
  if (!(server instanceof TallyServer)) throw bug('not a Tally server');
  server.runtime.attachWriter(writer);
}

/**
 * Hand queries to a read pool from now on (`tally serve` starts the pool after it listens, so
 * start-up is not held up by the threads; until then queries run on the writer).
 */
export function attachReadPool(server: Server, pool: ReadPool): void {
  if (!(server instanceof TallyServer)) throw bug('not a Tally server');
  server.runtime.attachReadPool(pool);
}

/**
 * GraphQL over HTTP at /graphql (routes/graphql.ts), with its console, MCP at /mcp and the probes:
 * see routeTable. The server owns its state (where requests run, the MCP sessions, the metrics)
 * and hands each route what it needs; each request's trace goes with it to its route.
 */
export function createServer(engine: Engine, options: ServerOptions = {}): Server {
  const limits = engine.limits;
  // Node checks request and header timeouts on an interval (30 s by default); check often enough to honour ours.
  const timeouts = [limits.requestTimeoutMs, limits.headersTimeoutMs].filter((ms) => ms > 0);
  const connectionsCheckingInterval = Math.max(50, Math.min(1000, Math.floor(Math.min(...timeouts, 4000) / 4)));
  const logger = options.logger ?? silentLogger;
  const runtime = new Runtime(engine, {
    ...(options.worker ? { worker: options.worker } : {}),
    ...(options.readPool ? { readPool: options.readPool } : {}),
  });
  const mcp = createMcpHttp(runtime, {
    logger: options.logger,
    log: options.log,
    allowedOrigins: options.mcpAllowedOrigins,
    graphqlTool: options.mcpGraphqlTool === true,
  });
  const metrics = new ServerMetrics(engine, runtime.executor, () => runtime.readPool?.stats());
  const routes = routeTable(runtime, metrics, mcp);
  const server = new TallyServer(runtime, { connectionsCheckingInterval }, (req, res) => {
    const exchange: Exchange = { req, res, trace: startTrace() };
    res.once('close', () => finishRequest(logger, metrics, exchange));
    route(routes, exchange).catch((error: unknown) => {
      if (options.logger)
        logger.error(
          { event: 'internal', error: error instanceof Error ? (error.stack ?? error.message) : String(error) },
          'request failed',
        );
      else options.log?.(`tally: request failed: ${String(error)}`);
      if (!res.headersSent)
        sendErrors(exchange, 500, 'application/json', [new EngineError('INTERNAL', 'the request failed')]);
      else res.end();
    });
  });
  server.requestTimeout = limits.requestTimeoutMs;
  server.headersTimeout =
    limits.requestTimeoutMs > 0 ? Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs) : limits.headersTimeoutMs;
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  boundConnections(server, limits);
  server.once('close', () => void mcp.closeAll());
  return server;
}

/** Answers the request, or returns false to leave it to the next route that matches. */
type Handler = (exchange: Exchange, url: URL) => Promise<void> | boolean;

interface Route {
  /** The one method it takes; left out, every method (the handler answers 405 where it must). */
  method?: string;
  /** The path it serves, or with `prefix` every path under it. */
  path: string;
  prefix?: boolean;
  handle: Handler;
}

/**
 * The routes, tried in order; the first that matches and answers wins, and a request no route
 * answers is a 404. Each family lives in routes/: probes, console, mcp, graphql.
 */
function routeTable(runtime: Runtime, metrics: ServerMetrics, mcp: ReturnType<typeof createMcpHttp>): Route[] {
  const { engine, executor } = runtime;
  const probed = { engine, executor, metrics };
  const asset = assetReader();
  return [
    { path: '/healthz', handle: (exchange) => serveHealth(exchange) },
    { path: '/readyz', handle: (exchange) => serveReady(probed, exchange) },
    { path: '/metrics', handle: (exchange) => serveMetrics(probed, exchange) },
    {
      method: 'GET',
      path: '/graphql/assets/',
      prefix: true,
      handle: (exchange, url) => serveAsset(asset, exchange, url),
    },
    { path: '/mcp', handle: (exchange) => serveMcp(engine, mcp, exchange) },
    { method: 'GET', path: '/', handle: (exchange) => redirectToConsole(exchange) },
    { method: 'GET', path: '/graphql', handle: (exchange, url) => serveConsolePage(exchange, url) },
    { path: '/graphql', handle: (exchange, url) => serveGraphql(runtime, exchange, url) },
  ];
}

async function route(routes: readonly Route[], exchange: Exchange): Promise<void> {
  const { req } = exchange;
  let url: URL;
  try {
    url = new URL(req.url ?? '/', 'http://localhost');
  } catch {
    req.resume();
    return sendErrors(exchange, 400, 'application/json', [
      new EngineError('BAD_REQUEST', `the request target ${quote(req.url ?? '')} is not a valid URL path`, {
        hint: 'Send requests to /graphql.',
      }),
    ]);
  }
  for (const { method, path, prefix, handle } of routes) {
    if (method !== undefined && method !== req.method) continue;
    if (prefix ? !url.pathname.startsWith(path) : url.pathname !== path) continue;
    const answered = handle(exchange, url);
    if (answered === false) continue;
    if (answered !== true) await answered;
    return;
  }
  sendErrors(exchange, 404, 'application/json', [
    new EngineError('NOT_FOUND', `no route ${quote(url.pathname)}`, { hint: 'GraphQL is served at /graphql.' }),
  ]);
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
  if (limits.responseStallMs > 0) sweepStalled(server, all, forget, limits.responseStallMs);
}

/** Every so often, the sweep boundConnections describes: closes a connection whose output has not moved for stallMs. */
function sweepStalled(
  server: Server,
  all: ReadonlyMap<Socket, Connection>,
  forget: (connection: Connection) => void,
  stallMs: number,
): void {
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
        } else if (now - connection.stalledSince >= stallMs) {
          forget(connection);
          socket.destroy();
        }
      }
    },
    Math.max(50, Math.min(1000, Math.floor(stallMs / 4))),
  );
  sweep.unref();
  server.once('close', () => clearInterval(sweep));
}
