// ATTACK (d) a hostile service that answers slowly on purpose: the status line and headers at
// once and then one body byte every 50 ms forever, or the headers themselves a byte at a time.
// Is the WHOLE call bounded by the integration's timeoutMs (and the slot given back), or only the
// wait for the headers?
import { createServer as createNet, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../../src/engine.js';
import { newEngine } from '../../helpers/engine.js';
import { createAction, recorder, SEND, startAndRun } from './h.js';

const timers = new Set<NodeJS.Timeout>();
afterAll(() => {
  for (const t of timers) clearInterval(t);
});

describe('a service trickling its answer forever', () => {
  let body: Awaited<ReturnType<typeof recorder>>;
  const sockets: Socket[] = [];
  let raw: ReturnType<typeof createNet>;
  let rawPort = 0;
  let engine: Engine;

  beforeAll(async () => {
    body = await recorder((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"a":"');
      const t = setInterval(() => {
        if (res.destroyed) return clearInterval(t);
        res.write('x');
      }, 50);
      timers.add(t);
    });
    // Raw TCP: the status line, then one header byte every 50 ms.
    raw = createNet((socket) => {
      sockets.push(socket);
      socket.on('error', () => undefined);
      socket.once('data', () => {
        socket.write('HTTP/1.1 200 OK\r\nX-Slow: ');
        const t = setInterval(() => {
          if (socket.destroyed) return clearInterval(t);
          socket.write('y');
        }, 50);
        timers.add(t);
      });
    });
    await new Promise<void>((r) => raw.listen(0, '127.0.0.1', r));
    rawPort = (raw.address() as { port: number }).port;
  });
  afterAll(async () => {
    await body.close();
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => raw.close(() => r()));
  });
  afterEach(() => engine?.close());

  for (const which of ['body', 'headers'] as const) {
    it(`timeoutMs 300 bounds the whole call when the ${which} trickle(s) forever`, async () => {
      const base = which === 'body' ? body.url : `http://127.0.0.1:${rawPort}`;
      engine = await newEngine({
        integrations: [{ name: 'api', baseUrl: base, methods: ['GET'], paths: ['/x'], timeoutMs: 300 }],
      });
      expect(
        createAction(engine, {
          name: 'slow',
          kind: 'http',
          config: { integration: 'api', method: 'GET', path: '/x' },
          tool: { description: 'slow' },
          policies: [SEND],
          execution: { maxAttempts: 1 },
        }).errors,
      ).toBeUndefined();
      const began = Date.now();
      const run = await Promise.race([
        startAndRun(engine, 'slow', {}),
        new Promise<null>((r) => setTimeout(() => r(null), 8_000)),
      ]);
      const took = Date.now() - began;
      expect(run, 'the call was still running after 8 s with timeoutMs 300').not.toBeNull();
      expect(run!.status).toBe('FAILED');
      expect(took).toBeLessThan(3_000);
    });
  }
});
