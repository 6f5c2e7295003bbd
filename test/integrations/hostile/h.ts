// Shared bits of the hostile (issue 37) attack tests: a recording HTTP server on loopback, action helpers,
// draining the queue, and reading executions.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Engine } from '../../../src/engine.js';
import { id, ok } from '../../helpers/engine.js';

export interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

/** A server on 127.0.0.1 that records every request and lets `handle` answer it (raw). */
export async function recorder(handle: (req: IncomingMessage, res: ServerResponse, body: string) => void) {
  const seen: Seen[] = [];
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
    handle(req, res, body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export const CREATE =
  'mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { actionId version } } }';
export const START = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { status } } }`;
export const EXECUTION = `query($id: UUID!) { actions { execution(executionId: $id) { status output error { code message hint details } outbound { idempotencyKey sends } } } }`;
export const SEND = { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Integration'] };

let n = 0;
export function createAction(engine: Engine, input: Record<string, unknown>, principal?: string) {
  return engine.graphql(CREATE, { id: id(37_000 + ++n), i: input }, principal === undefined ? {} : { principal });
}

export async function drain(engine: Engine, maxMs = 30_000): Promise<void> {
  const worker = engine.createWorker();
  const until = Date.now() + maxMs;
  while (Date.now() < until) {
    await worker.drainAll();
    const due = engine.db
      .prepare("SELECT count(*) AS n FROM executions WHERE status IN ('QUEUED', 'RUNNING') AND parent_id IS NULL")
      .get() as { n: number };
    if (due.n === 0) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('the queue did not drain');
}

export async function startAndRun(engine: Engine, name: string, input: unknown, principal?: string) {
  const e = id(38_000 + ++n);
  const started = engine.graphql(START, { n: name, e, i: input }, principal === undefined ? {} : { principal });
  if (started.errors) throw new Error(JSON.stringify(started.errors));
  await drain(engine);
  return { executionId: e, ...ok(engine, EXECUTION, { id: e }).actions.execution };
}

export function rows(engine: Engine, sql: string, ...params: unknown[]): any[] {
  return engine.db.prepare(sql).all(...params) as any[];
}
