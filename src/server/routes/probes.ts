import type { Engine } from '../../engine.js';
import { EngineError } from '../../errors.js';
import type { Limits } from '../../limits.js';
import { authenticate, sendUnauthenticated } from '../auth.js';
import type { ServerMetrics } from '../metrics.js';
import { send, sendErrors } from '../reply.js';
import type { Exchange } from '../trace.js';
import type { Executor } from '../../runtime/writer-thread.js';
import type { WriterSnapshot } from '../../runtime/writer-worker.js';

/** What the probes look at: the engine's key check, the engine that runs requests, the metrics. */
export interface Probed {
  engine: Engine;
  executor: Executor;
  metrics: ServerMetrics;
}

/** /healthz: the process answers (no database access, no key). */
export async function serveHealth(exchange: Exchange): Promise<void> {
  if (refuseMethod(exchange, '/healthz')) return;
  return send(exchange, 200, 'application/json', { status: 'ok' });
}

/**
 * /readyz: it can do work now (the database takes a write, the sandbox is loaded, the worker runs
 * when there is one); 503 with the failed check otherwise, no key.
 */
export async function serveReady(probed: Probed, exchange: Exchange): Promise<void> {
  if (refuseMethod(exchange, '/readyz')) return;
  // The engine that runs requests (the writer thread's under tally serve): its database lock, sandbox and queue worker.
  const { database, sandbox, workerRunning } = await readiness(probed.engine.limits, probed.executor);
  // Under --no-worker, executions run elsewhere (tally worker): not this server's to check.
  const worker = workerRunning === null || workerRunning ? null : 'the queue worker is not running';
  const checks = {
    database: database ?? 'ok',
    sandbox: sandbox ?? 'ok',
    worker: worker ?? (workerRunning === null ? 'disabled' : 'ok'),
  };
  const ready = database === null && sandbox === null && worker === null;
  return send(exchange, ready ? 200 : 503, 'application/json', { status: ready ? 'ready' : 'not ready', checks });
}

/**
 * /metrics: Prometheus text, for any client's key (a client with no policies can read metrics and
 * do nothing else).
 */
export async function serveMetrics(probed: Probed, exchange: Exchange): Promise<void> {
  if (refuseMethod(exchange, '/metrics')) return;
  const client = authenticate(probed.engine, exchange.req.headers.authorization);
  if (client instanceof EngineError) return sendUnauthenticated(exchange, 'application/json', client);
  const { registry } = probed.metrics;
  const text = await registry.metrics();
  exchange.res
    .writeHead(200, { 'content-type': registry.contentType, 'content-length': Buffer.byteLength(text) })
    .end(text);
}

/** Probes are read with GET (or HEAD): any other method is answered 405, its body drained; true when it was. */
function refuseMethod(exchange: Exchange, path: string): boolean {
  const { req, res } = exchange;
  if (req.method === 'GET' || req.method === 'HEAD') return false;
  req.resume();
  res.setHeader('allow', 'GET, HEAD');
  sendErrors(exchange, 405, 'application/json', [
    new EngineError('BAD_REQUEST', `method ${req.method} is not allowed on ${path}`, { hint: `Use GET ${path}.` }),
  ]);
  return true;
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
