// ATTACKS (a) a hostile API client's input and (b) a hostile tool author's config, trying to reach a
// host, port, path or method the operator did not configure, or to send more than it bounds.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../../src/engine.js';
import { newEngine } from '../../helpers/engine.js';
import { createAction, recorder, SEND, startAndRun } from './h.js';

let api: Awaited<ReturnType<typeof recorder>>;
let elsewhere: Awaited<ReturnType<typeof recorder>>;
let engine: Engine;

/** What a service behind Tomcat / Spring / Jetty routes: path parameters (";…") cut from each segment, dot segments resolved. */
function routedByServletContainer(rawPath: string): string {
  const out: string[] = [];
  for (const segment of rawPath.split('?')[0]!.split('/').slice(1)) {
    const bare = segment.split(';')[0]!;
    if (bare === '..') out.pop();
    else if (bare !== '.') out.push(bare);
  }
  return `/${out.join('/')}`;
}

beforeAll(async () => {
  elsewhere = await recorder((_q, res) => res.writeHead(200).end('{}'));
  api = await recorder((_q, res) => res.writeHead(201, { 'content-type': 'application/json' }).end('{}'));
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
        requestBytesMax: 2_000,
      },
    ],
  });
});
afterEach(() => engine.close());

function tool(name: string, config: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return createAction(engine, {
    name,
    kind: 'http',
    config: { integration: 'api', method: 'POST', ...config },
    tool: { description: name },
    policies: [SEND],
    execution: { maxAttempts: 1 },
    ...extra,
  });
}

describe('host, port and userinfo tricks in what the input fills in (SAFE if nothing leaves the origin)', () => {
  it('path values, query values and header values never change the origin', async () => {
    expect(
      tool('t_reach', {
        path: '/payouts/{input.p}',
        query: { q: 'input.q' },
        headers: { 'X-Ref': 'input.h' },
      }).errors,
    ).toBeUndefined();
    const values = [
      '@127.0.0.1:1',
      `@127.0.0.1:${elsewhere.port}`,
      `..\\..\\@127.0.0.1:${elsewhere.port}`,
      `//127.0.0.1:${elsewhere.port}/x`,
      `http://127.0.0.1:${elsewhere.port}/`,
      '[::1]',
      '%2F%2F127.0.0.1',
      'ｅｖｉｌ．ｅｘａｍｐｌｅ',
      'a\u0000b',
      '\u2028',
    ];
    for (const v of values) {
      await startAndRun(engine, 't_reach', { p: v, q: v, h: v });
    }
    // Header CRLF from input: refused, never sent.
    const crlf = await startAndRun(engine, 't_reach', { p: 'x', q: 'x', h: 'a\r\nX-Injected: 1' });
    expect(crlf.status).toBe('FAILED');
    expect(elsewhere.seen).toHaveLength(0);
    for (const r of api.seen) {
      expect(new URL(r.url, 'http://x').pathname.startsWith('/v1/payouts/'), r.url).toBe(true);
      expect(r.headers['x-injected']).toBeUndefined();
    }
  });
});

describe('path parameters: a segment that is ".." to the service', () => {
  it('input "..;" in one segment stays under /v1/payouts even as a servlet container routes it', async () => {
    expect(tool('status_of', { path: '/payouts/{input.id}/status', method: 'GET' }).errors).toBeUndefined();
    await startAndRun(engine, 'status_of', { id: '..;' });
    const sent = api.seen.map((r) => r.url);
    // Every request must route under /v1/payouts, as the service's framework reads it.
    for (const url of sent) expect(routedByServletContainer(url), url).toMatch(/^\/v1\/payouts(\/|$)/);
  });
});

describe('path parameters in the tool author’s literal path template', () => {
  it('"/payouts/..;/admin" is accepted and sent: /v1/admin on a servlet-style service (BROKEN when sent)', async () => {
    const created = tool('sneak', { path: '/payouts/..;/admin', method: 'GET' });
    if (created.errors === undefined) {
      await startAndRun(engine, 'sneak', {});
      const sent = api.seen.map((r) => r.url);
      for (const url of sent) expect(routedByServletContainer(url), url).toMatch(/^\/v1\/payouts(\/|$)/);
    }
  });
});

describe('the operator’s method allowlist', () => {
  it('a tool may not set a header that reroutes the request (method overrides, original URLs, forwarding)', () => {
    for (const header of [
      'X-HTTP-Method-Override',
      'X-HTTP-Method',
      'X-Method-Override',
      'X-Original-URL',
      'X-Rewrite-URL',
      'X-Forwarded-Host',
      'Forwarded',
      'X-Forwarded-Prefix',
    ]) {
      const created = tool(`reroute_${header.replace(/-/g, '_').toLowerCase()}`, {
        path: '/payouts/{input.id}',
        headers: { [header]: "'DELETE'" },
      });
      expect(created.errors?.[0]?.message, header).toContain('may not set');
    }
    expect(api.seen).toHaveLength(0);
  });
});

describe('bad input gets a clear error', () => {
  it('a header value from the input that is not Latin-1 fails as INTERNAL (a TypeError), not INPUT_INVALID', async () => {
    expect(tool('t_hdr', { path: '/payouts', headers: { 'X-Ref': 'input.h' } }).errors).toBeUndefined();
    const run = await startAndRun(engine, 't_hdr', { h: 'ｅｖｉｌ' });
    expect(run.status).toBe('FAILED');
    expect(run.error.code).toBe('INPUT_INVALID');
  });
});

describe('requestBytesMax bounds what is sent', () => {
  it('a query value (or header) built from the input is not counted: 12 kB sent past requestBytesMax 2000 (BROKEN when sent)', async () => {
    expect(tool('search', { path: '/payouts', method: 'GET', query: { q: 'input.q' } }).errors).toBeUndefined();
    await startAndRun(engine, 'search', { q: 'z'.repeat(12_000) });
    const sizes = api.seen.map((r) => r.url.length);
    for (const size of sizes) expect(size).toBeLessThanOrEqual(2_000);
  });
});
