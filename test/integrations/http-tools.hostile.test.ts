// The attacker's tests for http tools: a tool author (or the input a hostile client sends) tries to
// reach a host, port or path the operator did not configure, to read the integration's credentials
// back, or to take every slot of an integration from other clients. Against real HTTP servers on
// loopback that record every request they get.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { parseIntegrations } from '../../src/integrations/http.js';
import { id, newEngine, ok } from '../helpers/engine.js';

const TOKEN = 'tok_hostile_9f8e7d6c5b4a39281706SECRET';
process.env.TEST_HOSTILE_TOKEN = TOKEN;

interface Seen {
  method: string;
  url: string;
  authorization: string | null;
  body: string;
}

/** A server on loopback that records every request and answers by path. */
interface Answer {
  status: number;
  headers?: Record<string, string>;
  body?: string;
  delayMs?: number;
}

async function recorder(answer: (req: IncomingMessage, body: string) => Answer) {
  const seen: Seen[] = [];
  let inFlight = 0;
  const peaks = new Map<string, number>();
  const current = new Map<string, number>();
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    seen.push({ method: req.method!, url: req.url!, authorization: req.headers.authorization ?? null, body });
    const who = (() => {
      try {
        return String(JSON.parse(body).who ?? '');
      } catch {
        return '';
      }
    })();
    inFlight++;
    current.set(who, (current.get(who) ?? 0) + 1);
    peaks.set(who, Math.max(peaks.get(who) ?? 0, current.get(who)!));
    const a = answer(req, body);
    if (a.delayMs) await new Promise((r) => setTimeout(r, a.delayMs));
    inFlight--;
    current.set(who, current.get(who)! - 1);
    res.writeHead(a.status, { 'content-type': 'application/json', ...(a.headers ?? {}) });
    res.end(a.body ?? '{}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    seen,
    peaks,
    get inFlight() {
      return inFlight;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const CREATE = 'mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { version } } }';
const START = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { status } } }`;
const EXECUTION = `query($id: UUID!) { actions { execution(executionId: $id) { status output error { code message hint details } } } }`;
const SEND = {
  effect: 'ALLOW',
  actions: ['INSERT'],
  resources: ['actions.Integration'],
};

let n = 0;
function httpTool(engine: Engine, name: string, config: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return engine.graphql(CREATE, {
    id: id(5000 + ++n),
    i: {
      name,
      kind: 'http',
      config: { integration: 'api', method: 'POST', ...config },
      tool: { description: `The ${name} tool.` },
      policies: [SEND],
      execution: { maxAttempts: 1 },
      ...extra,
    },
  });
}

async function drain(engine: Engine): Promise<void> {
  const worker = engine.createWorker();
  for (let i = 0; i < 400; i++) {
    await worker.drainAll();
    const due = engine.db
      .prepare("SELECT count(*) AS n FROM executions WHERE status IN ('QUEUED', 'RUNNING') AND parent_id IS NULL")
      .get() as { n: number };
    if (due.n === 0) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('the queue did not drain');
}

async function startAndRun(engine: Engine, name: string, input: unknown, principal?: string) {
  const e = id(9000 + ++n);
  const started = engine.graphql(START, { n: name, e, i: input }, principal === undefined ? {} : { principal });
  if (started.errors) throw new Error(JSON.stringify(started.errors));
  await drain(engine);
  return ok(engine, EXECUTION, { id: e }).actions.execution;
}

describe('a tool author cannot reach what the operator did not configure', () => {
  let api: Awaited<ReturnType<typeof recorder>>;
  let elsewhere: Awaited<ReturnType<typeof recorder>>;
  let engine: Engine;

  beforeAll(async () => {
    elsewhere = await recorder(() => ({ status: 200, body: '{"stolen": true}' }));
    api = await recorder(
      (req): Answer =>
        req.url!.startsWith('/v1/payouts/redirect')
          ? { status: 302, headers: { location: `${elsewhere.url}/v1/payouts/x` } }
          : req.url!.startsWith('/v1/payouts/echo')
            ? {
                status: req.url!.includes('fail') ? 400 : 201,
                headers: { 'x-echo': req.headers.authorization ?? '' },
                body: JSON.stringify({
                  youSent: req.headers.authorization,
                  raw: (req.headers.authorization ?? '').split('').join(' '),
                }),
              }
            : req.url!.startsWith('/v1/payouts/slow')
              ? { status: 201, body: '{}', delayMs: 1500 }
              : req.url!.startsWith('/v1/payouts/huge')
                ? { status: 200, body: JSON.stringify({ blob: 'x'.repeat(300_000) }) }
                : { status: 201, body: '{"ok": true}' },
    );
  });
  afterAll(async () => {
    await api.close();
    await elsewhere.close();
  });
  beforeEach(async () => {
    api.seen.length = 0;
    elsewhere.seen.length = 0;
    engine = await newEngine({
      integrations: [
        {
          name: 'api',
          baseUrl: `${api.url}/v1`,
          methods: ['POST', 'GET'],
          paths: ['/payouts'],
          headers: { Authorization: { env: 'TEST_HOSTILE_TOKEN', prefix: 'Bearer ' } },
          responseBytesMax: 100_000,
          requestBytesMax: 2_000,
        },
      ],
    });
  });
  afterEach(() => engine.close());

  it('refuses, at createAction, a path template that could leave the integration', () => {
    for (const path of [
      'http://evil.example/x',
      '//evil.example/payouts',
      '/payouts/../control',
      '/payouts/%2e%2e/control',
      '/payouts/%2F',
      '/payouts?to=evil',
      '/payouts#x',
      '/pay\\outs',
      'payouts',
      '/payouts//x',
      '/payouts/{input.a}{',
      '/control/fail',
    ]) {
      const result = httpTool(engine, `t${++n}`, { path });
      expect(result.errors?.[0]?.extensions?.code, path).toBe('BAD_REQUEST');
    }
    // Only POST and GET are configured.
    expect(httpTool(engine, 'deleter', { path: '/payouts', method: 'DELETE' }).errors?.[0]?.message).toContain(
      'does not allow DELETE',
    );
    // Credentials, the idempotency key and the transport headers are the operator's.
    for (const header of ['Authorization', 'Idempotency-Key', 'Host', 'Cookie']) {
      const result = httpTool(engine, `h${++n}`, { path: '/payouts', headers: { [header]: "'x'" } });
      expect(result.errors?.[0]?.message, header).toContain('may not set');
    }
    // An integration that is not configured.
    expect(httpTool(engine, 'other', { path: '/x', integration: 'nope' }).errors?.[0]?.message).toContain(
      'no integration named "nope"',
    );
  });

  it('encodes what the input puts in a path: dot segments, separators and escapes never leave the prefix', async () => {
    expect(httpTool(engine, 'by_id', { path: '/payouts/{input.id}', method: 'GET' }).errors).toBeUndefined();
    const hostile = [
      '..',
      '.',
      '../control/fail',
      '..%2Fcontrol',
      '%2e%2e',
      'a/../../b',
      'x?admin=1',
      'x#frag',
      '@evil.example:80',
      'http://evil.example/',
      '\\..\\control',
      '',
    ];
    for (const value of hostile) {
      const run = await startAndRun(engine, 'by_id', { id: value });
      if (run.status === 'FAILED')
        expect(run.error.code, value).toMatch(/INPUT_INVALID|INTEGRATION_ERROR|ACCESS_DENIED/);
    }
    expect(elsewhere.seen).toHaveLength(0);
    for (const request of api.seen) {
      const path = new URL(request.url, 'http://x').pathname;
      expect(path.startsWith('/v1/payouts/'), request.url).toBe(true);
      expect(path.slice('/v1/payouts/'.length)).not.toContain('/');
      expect(request.url).not.toContain('?admin');
    }
    // The ones that can only be dot segments or nothing were refused without a request.
    expect(api.seen.length).toBeLessThan(hostile.length);
  });

  it('never follows a redirect, to another host or anywhere', async () => {
    expect(httpTool(engine, 'redirected', { path: '/payouts/redirect' }).errors).toBeUndefined();
    const run = await startAndRun(engine, 'redirected', {});
    expect(run.status).toBe('FAILED');
    expect(run.error.code).toBe('INTEGRATION_ERROR');
    expect(run.error.message).toContain('redirects are never followed');
    expect(elsewhere.seen).toHaveLength(0);
    expect(api.seen).toHaveLength(1);
  });

  it('keeps the secret out of every record, log line and error, even when the service echoes it', async () => {
    const lines: string[] = [];
    engine.close();
    const { createLogger } = await import('../../src/log.js');
    const { Writable } = await import('node:stream');
    engine = await newEngine({
      logger: createLogger({
        level: 'debug',
        destination: new Writable({
          write(chunk, _e, done) {
            lines.push(String(chunk));
            done();
          },
        }),
      }),
      integrations: [
        {
          name: 'api',
          baseUrl: `${api.url}/v1`,
          methods: ['POST'],
          paths: ['/payouts'],
          headers: { Authorization: { env: 'TEST_HOSTILE_TOKEN', prefix: 'Bearer ' } },
        },
      ],
    });
    expect(httpTool(engine, 'echo', { path: '/payouts/echo', responseHeaders: ['x-echo'] }).errors).toBeUndefined();
    expect(httpTool(engine, 'echo_fail', { path: '/payouts/echo/fail' }).errors).toBeUndefined();
    const good = await startAndRun(engine, 'echo', {});
    const bad = await startAndRun(engine, 'echo_fail', {});
    expect(good.status).toBe('SUCCEEDED');
    expect(bad.status).toBe('FAILED');
    // The service did get it.
    expect(api.seen.every((r) => r.authorization === `Bearer ${TOKEN}`)).toBe(true);
    const records = JSON.stringify(engine.db.prepare('SELECT * FROM executions').all());
    const sends = JSON.stringify(engine.db.prepare('SELECT * FROM outbound_sends').all());
    for (const text of [records, sends, lines.join('\n'), JSON.stringify(good), JSON.stringify(bad)]) {
      expect(text).not.toContain(TOKEN.slice(0, 12));
      expect(text).not.toContain(TOKEN.slice(-12));
    }
    expect(JSON.stringify(good.output)).toContain('[redacted]');
  });

  it('bounds what is sent and what is read', async () => {
    expect(httpTool(engine, 'big_in', { path: '/payouts' }).errors).toBeUndefined();
    const tooBig = await startAndRun(engine, 'big_in', { blob: 'y'.repeat(5_000) });
    expect(tooBig.status).toBe('FAILED');
    expect(tooBig.error.code).toBe('INPUT_INVALID');
    expect(tooBig.error.message).toContain('requestBytesMax');
    expect(httpTool(engine, 'big_out', { path: '/payouts/huge', method: 'GET' }).errors).toBeUndefined();
    const huge = await startAndRun(engine, 'big_out', {});
    expect(huge.status).toBe('FAILED');
    expect(huge.error.code).toBe('INTEGRATION_ERROR');
    expect(huge.error.message).toContain('responseBytesMax');
    // timeoutMs: an answer that takes longer is a retryable failure, tried again with the same key.
    engine.close();
    engine = await newEngine({
      integrations: [{ name: 'api', baseUrl: `${api.url}/v1`, methods: ['POST'], paths: ['/payouts'], timeoutMs: 200 }],
    });
    expect(
      httpTool(
        engine,
        'slow',
        { path: '/payouts/slow' },
        { execution: { maxAttempts: 2, backoff: { initialMs: 1, multiplier: 1, maxMs: 1 } } },
      ).errors,
    ).toBeUndefined();
    api.seen.length = 0;
    const late = await startAndRun(engine, 'slow', {});
    expect(late.status).toBe('FAILED');
    expect(late.error.code).toBe('INTEGRATION_UNAVAILABLE');
    expect(late.error.message).toContain('did not answer within 200 ms');
    expect(api.seen).toHaveLength(2);
  });

  it('an http tool whose policies do not allow the integration sends nothing; neither does one under a client that may not', async () => {
    engine.graphql(CREATE, {
      id: id(5900),
      i: {
        name: 'no_policy',
        kind: 'http',
        config: { integration: 'api', method: 'POST', path: '/payouts' },
        tool: { description: 'An http tool with no policies: it can do nothing.' },
        execution: { maxAttempts: 1 },
      },
    });
    const refused = await startAndRun(engine, 'no_policy', {});
    expect(refused.status).toBe('FAILED');
    expect(refused.error.code).toBe('ACCESS_DENIED');
    expect(api.seen).toHaveLength(0);

    expect(httpTool(engine, 'allowed', { path: '/payouts' }).errors).toBeUndefined();
    ok(
      engine,
      `mutation { auth { createClient(input: {principal: "nosend", name: "may start, may not send", policies: [
        {effect: ALLOW, actions: [INSERT, SELECT], resources: ["actions.Execution"]},
        {effect: DENY, actions: [INSERT], resources: ["actions.Integration"]}]}) { apiKey } } }`,
    );
    const denied = await startAndRun(engine, 'allowed', {}, 'nosend');
    expect(denied.status).toBe('FAILED');
    expect(denied.error.code).toBe('ACCESS_DENIED');
    expect(api.seen).toHaveLength(0);
  });

  it('who may create http tools is a policy on the action document', () => {
    ok(
      engine,
      `mutation { auth { createClient(input: {principal: "builder", name: "builds tools, not http ones", policies: [
        {effect: ALLOW, actions: [INSERT, SELECT], resources: ["actions.Action"]},
        {effect: DENY, actions: [INSERT], resources: ["actions.Action"], assertions: {http: "context.document.kind == 'http'"}}]}) { apiKey } } }`,
    );
    const input = {
      name: 'sneaky',
      kind: 'http',
      config: { integration: 'api', method: 'POST', path: '/payouts' },
      tool: { description: 'x' },
    };
    const result = engine.graphql(CREATE, { id: id(5950), i: input }, { principal: 'builder' });
    expect(result.errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
  });
});

describe('one client cannot use up an integration’s concurrency', () => {
  let slow: Awaited<ReturnType<typeof recorder>>;
  beforeAll(async () => {
    slow = await recorder(() => ({ status: 201, body: '{}', delayMs: 300 }));
  });
  afterAll(() => slow.close());

  it('client A with ten slow calls holds one slot; client B’s call runs beside them', async () => {
    const engine = await newEngine({
      limits: { agentRunsPerClientMax: 16, agentRunsConcurrentMax: 16 },
      integrations: [
        {
          name: 'api',
          baseUrl: `${slow.url}/v1`,
          methods: ['POST'],
          paths: ['/payouts'],
          concurrency: 2,
          perClientConcurrency: 1,
        },
      ],
    });
    try {
      expect(httpTool(engine, 'slow', { path: '/payouts' }).errors).toBeUndefined();
      for (const principal of ['alice', 'bob'])
        ok(
          engine,
          `mutation { auth { createClient(input: {principal: "${principal}", name: "${principal}", policies: [
            {effect: ALLOW, actions: [INSERT, SELECT], resources: ["actions.Execution", "actions.Integration"]}]}) { apiKey } } }`,
        );
      const started = (who: string, i: number) => {
        const e = id(7000 + i);
        const r = engine.graphql(START, { n: 'slow', e, i: { who } }, { principal: who });
        if (r.errors) throw new Error(JSON.stringify(r.errors));
        return e;
      };
      const alice = Array.from({ length: 10 }, (_, i) => started('alice', i));
      const bob = started('bob', 50);
      const began = Date.now();
      await drain(engine);
      const finished = (e: string) =>
        Date.parse(
          (engine.db.prepare('SELECT finished FROM executions WHERE execution_id = ?').get(e) as { finished: string })
            .finished,
        );
      // Alice never had two requests in flight; Bob's ran while hers queued.
      expect(slow.peaks.get('alice')).toBe(1);
      expect(slow.peaks.get('bob')).toBe(1);
      const aliceLast = Math.max(...alice.map(finished));
      expect(finished(bob)).toBeLessThan(aliceLast);
      // Bob waited for at most one of Alice's calls, not all ten (each takes 300 ms).
      expect(finished(bob) - began).toBeLessThan(10 * 300);
    } finally {
      engine.close();
    }
  });
});

describe('the operator’s integrations block', () => {
  it('refuses literal credentials, credentials in the URL, unknown fields and bad bounds, naming the field', () => {
    const base = { name: 'api', baseUrl: 'https://api.example/v1', methods: ['POST'], paths: ['/x'] };
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ ...base, token: 'abc' }, 'integrations[0].token is not an integration field: credentials are never written'],
      [{ ...base, baseUrl: 'https://user:pw@api.example' }, 'integrations[0].baseUrl has credentials'],
      [{ ...base, headers: { Authorization: 'Bearer abc' } }, 'integrations[0].headers.Authorization must be {env'],
      [{ ...base, baseUrl: 'ftp://api.example' }, 'is not an http(s) URL'],
      [{ ...base, paths: ['/x/../y'] }, 'integrations[0].paths[0]'],
      [{ ...base, methods: ['TRACE'] }, 'integrations[0].methods[0]'],
      [{ ...base, concurrency: 0 }, 'integrations[0].concurrency 0 is not an integer from 1 to 1024'],
      [{ ...base, perClientConcurrency: 9, concurrency: 4 }, 'integrations[0].perClientConcurrency'],
      [{ ...base, color: 'red' }, 'integrations[0].color is not an integration field'],
    ];
    for (const [entry, message] of cases) expect(() => parseIntegrations([entry]), message).toThrow(message);
    expect(() => parseIntegrations([base, base])).toThrow('already used');
    // The secret's value is never in an error: a literal header value is refused without echoing it.
    try {
      parseIntegrations([{ ...base, headers: { Authorization: 'Bearer sk_live_abcdef' } }]);
    } catch (error) {
      expect((error as Error).message).not.toContain('sk_live_abcdef');
    }
  });
});

describe('a worker stopping while an outside call is in flight', () => {
  it('lets the call finish and records its outcome, rather than leave its fate unknown', async () => {
    const slow = await recorder(() => ({ status: 201, body: '{"paid": true}', delayMs: 800 }));
    const engine = await newEngine({
      integrations: [{ name: 'api', baseUrl: `${slow.url}/v1`, methods: ['POST'], paths: ['/payouts'] }],
    });
    try {
      expect(httpTool(engine, 'slow_pay', { path: '/payouts' }).errors).toBeUndefined();
      const e = id(7900);
      ok(engine, START, { n: 'slow_pay', e, i: {} });
      const worker = engine.createWorker();
      worker.start();
      for (let i = 0; i < 200 && slow.seen.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
      expect(slow.seen).toHaveLength(1);
      // SIGTERM's path: the worker stops with the request on the wire.
      await worker.stop();
      const run = ok(engine, EXECUTION, { id: e }).actions.execution;
      expect(run.status).toBe('SUCCEEDED');
      expect(run.output.body).toEqual({ paid: true });
      expect(slow.seen).toHaveLength(1);
    } finally {
      engine.close();
      await slow.close();
    }
  });
});
