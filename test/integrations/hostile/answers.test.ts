// ATTACK (d) a hostile service's answer shapes: JSON nested deep enough to blow a recursive walker,
// within responseBytesMax. Does the call end cleanly (recorded, the worker alive, other calls
// unaffected), and what is recorded?
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../../src/engine.js';
import { newEngine } from '../../helpers/engine.js';
import { createAction, recorder, SEND, startAndRun } from './h.js';

let api: Awaited<ReturnType<typeof recorder>>;
let engine: Engine;
const DEPTH = 200_000;

beforeAll(async () => {
  api = await recorder((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    if (req.url!.includes('deep')) res.end(`{"a":${'['.repeat(DEPTH)}${']'.repeat(DEPTH)}}`);
    else res.end('{"ok":true}');
  });
});
afterAll(() => api.close());
afterEach(() => engine?.close());

describe('an answer nested 200,000 deep (400 kB, under responseBytesMax)', () => {
  it('is recorded as a clean failure or output, and the next call still runs', async () => {
    const stacks: string[] = [];
    engine = await newEngine({
      logError: (e: unknown) => stacks.push(String((e as Error)?.stack ?? e)),
      integrations: [{ name: 'api', baseUrl: api.url, methods: ['GET'], paths: ['/x'], responseBytesMax: 1_000_000 }],
    });
    for (const [name, path] of [
      ['deep', '/x/deep'],
      ['fine', '/x/fine'],
    ])
      expect(
        createAction(engine, {
          name,
          kind: 'http',
          config: { integration: 'api', method: 'GET', path },
          tool: { description: name },
          policies: [SEND],
          execution: { maxAttempts: 2, backoff: { initialMs: 1, multiplier: 1, maxMs: 1 } },
        }).errors,
      ).toBeUndefined();
    let deep: any;
    let threw: unknown = null;
    try {
      deep = await startAndRun(engine, 'deep', {});
    } catch (error) {
      threw = error;
    }
    expect(threw).toBeNull();
    expect(deep.status).toMatch(/SUCCEEDED|FAILED/);
    // An INTERNAL error (a stack overflow) is a bug, not a clean refusal of the answer.
    if (deep.status === 'FAILED') expect(deep.error.code).not.toBe('INTERNAL');
    const fine = await startAndRun(engine, 'fine', {});
    expect(fine.status).toBe('SUCCEEDED');
  });
});
