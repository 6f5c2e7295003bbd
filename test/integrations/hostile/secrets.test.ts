// ATTACKS on the integration's credentials: read them back through the output, error text, logs,
// Execution fields or response headers. (a)/(b) want to read them; (d) the service echoes them.
import { Writable } from 'node:stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../../src/engine.js';
import { createLogger } from '../../../src/log.js';
import { newEngine } from '../../helpers/engine.js';
import { createAction, recorder, rows, SEND, startAndRun } from './h.js';

// A base64-ish token with "/" and "+", as many providers issue.
const TOKEN = 'sk_live_Zm9vYmFy/YmF6cXV4+c2VjcmV0S0VZX3Rlc3Q';
process.env.H37_TOKEN = TOKEN;
// An operator's credential pasted with a line break inside it (a wrapped key).
const WRAPPED = 'sk_live_WRAPPEDabcdefghijkl\nmnopqrstuvwxyz0123456789';
process.env.H37_WRAPPED = WRAPPED;

let api: Awaited<ReturnType<typeof recorder>>;
let engine: Engine;
const lines: string[] = [];

beforeAll(async () => {
  api = await recorder((req, res) => {
    const auth = String(req.headers.authorization ?? '');
    // PHP's json_encode writes "/" as "\/"; Python's json.dumps(ensure_ascii) writes "+" plainly but
    // a debug page may \u-escape everything; the echo header carries it raw.
    const escaped = JSON.stringify({ youSent: auth }).replace(/\//g, '\\/');
    const unicode = `{"u":"${[...auth].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')}"}`;
    const body = req.url!.includes('unicode') ? unicode : escaped;
    res.writeHead(req.url!.includes('fail') ? 400 : 200, { 'content-type': 'application/json', 'x-echo': auth });
    res.end(body);
  });
});
afterAll(() => api.close());
afterEach(() => engine?.close());

async function engineWith(env: string) {
  lines.length = 0;
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
    logError: (e: unknown) => lines.push(String((e as Error)?.message ?? e)),
    integrations: [
      {
        name: 'api',
        baseUrl: `${api.url}/v1`,
        methods: ['POST', 'GET'],
        paths: ['/echo'],
        headers: { Authorization: { env, prefix: 'Bearer ' } },
      },
    ],
  });
}

function everything(e: Engine, ...more: unknown[]): string {
  return [
    JSON.stringify(rows(e, 'SELECT * FROM executions')),
    JSON.stringify(rows(e, 'SELECT * FROM outbound_sends')),
    lines.join('\n'),
    ...more.map((m) => JSON.stringify(m)),
  ].join('\n');
}

/** Any 8 consecutive characters of the secret, however JSON-escaped, in `text` (after unescaping). */
function leaks(text: string, secret: string): string | null {
  const plain = text.replace(/\\\\/g, '\\').replace(/\\\//g, '/').replace(/\\n/g, '\n');
  for (let i = 0; i + 12 <= secret.length; i++)
    if (plain.includes(secret.slice(i, i + 12))) return secret.slice(i, i + 12);
  return null;
}

describe('the service echoes the credential back (SAFE if it is redacted everywhere)', () => {
  it('echoed JSON-escaped ("\\/") in the body, \\u-escaped, and raw in a response header the tool keeps', async () => {
    await engineWith('H37_TOKEN');
    for (const [name, path, method] of [
      ['echo_json', '/echo/json', 'GET'],
      ['echo_unicode', '/echo/unicode', 'GET'],
      ['echo_fail', '/echo/fail', 'GET'],
    ] as const)
      expect(
        createAction(engine, {
          name,
          kind: 'http',
          config: {
            integration: 'api',
            method,
            path,
            responseHeaders: ['x-echo'],
            output: '{"body": body, "h": headers}',
          },
          tool: { description: name },
          policies: [SEND],
          execution: { maxAttempts: 1 },
        }).errors,
      ).toBeUndefined();
    const a = await startAndRun(engine, 'echo_json', {});
    const b = await startAndRun(engine, 'echo_unicode', {});
    const c = await startAndRun(engine, 'echo_fail', {});
    expect(api.seen.every((r) => r.headers.authorization === `Bearer ${TOKEN}`)).toBe(true);
    expect(leaks(everything(engine, a, b, c), TOKEN)).toBeNull();
  });
});

describe('a credential the HTTP stack refuses as a header value', () => {
  it('a wrapped credential (line break inside) is written whole into the execution’s error and the log (BROKEN when found)', async () => {
    await engineWith('H37_WRAPPED');
    expect(
      createAction(engine, {
        name: 'echo_wrapped',
        kind: 'http',
        config: { integration: 'api', method: 'GET', path: '/echo/json' },
        tool: { description: 'x' },
        policies: [SEND],
        execution: { maxAttempts: 1 },
      }).errors,
    ).toBeUndefined();
    const run = await startAndRun(engine, 'echo_wrapped', {});
    expect(run.status).toBe('FAILED');
    const found = leaks(everything(engine, run), WRAPPED.replace('\n', '')) ?? leaks(everything(engine, run), WRAPPED);
    expect(found, 'part of the credential is readable by whoever may read the execution').toBeNull();
  });
});
