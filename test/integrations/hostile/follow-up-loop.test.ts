// ATTACK (b) a tool author: an http tool whose follow-up is itself (or two that follow each other).
// Follow-ups are started with the ended call's triggerDepth unchanged, so nothing bounds the chain:
// one startAction becomes an endless stream of requests to the integration (and executions in the
// database), with no client asking. Triggers are bounded by triggerDepthMax; are follow-ups?
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../../src/engine.js';
import { id, newEngine, ok } from '../../helpers/engine.js';
import { recorder, SEND, START } from './h.js';

let api: Awaited<ReturnType<typeof recorder>>;
let engine: Engine;

beforeAll(async () => {
  api = await recorder((_q, res) => res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}'));
});
afterAll(() => api.close());
afterEach(() => engine?.close());

describe('a follow-up that starts its own tool again', () => {
  it('one start → how many requests in 3 s of the worker running? (BROKEN when the chain does not stop)', async () => {
    engine = await newEngine({
      integrations: [{ name: 'api', baseUrl: api.url, methods: ['POST'], paths: ['/ping'] }],
    });
    const CALL = { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] };
    const base = {
      name: 'ping',
      kind: 'http',
      tool: { description: 'ping', inputSchema: { type: 'object' } },
      policies: [SEND, CALL],
      execution: { maxAttempts: 1 },
    };
    ok(engine, 'mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { version } } }', {
      id: id(7001),
      i: { ...base, config: { integration: 'api', method: 'POST', path: '/ping' } },
    });
    // Version 2 follows up with the tool itself (unpinned: the latest ACTIVE, i.e. itself).
    const updated = engine.graphql(
      'mutation($id: UUID!, $i: ActionInput!) { actions { updateAction(id: $id, input: $i) { version status } } }',
      {
        id: id(7001),
        i: {
          ...base,
          config: {
            integration: 'api',
            method: 'POST',
            path: '/ping',
            followUps: { succeeded: { tool: 'ping', input: '{"n": (has(input.n) ? input.n : 0) + 1}' } },
          },
          tools: [{ name: 'ping' }],
        },
      },
    );
    expect(updated.errors).toBeUndefined();
    // Activate it when updates land as DRAFT.
    if ((updated.data as any).actions.updateAction.status !== 'ACTIVE')
      ok(engine, 'mutation($id: UUID!) { actions { activateAction(id: $id, version: 2) { status } } }', {
        id: id(7001),
      });

    ok(engine, START, { n: 'ping', e: id(7100), i: {} });
    // The worker as `tally serve` runs it, for 3 s, then stopped (drainAll never returns here).
    const worker = engine.createWorker();
    worker.start();
    await new Promise((r) => setTimeout(r, 3_000));
    await worker.stop();
    const executions = (
      engine.db.prepare("SELECT count(*) AS n FROM executions WHERE action_name = 'ping'").get() as {
        n: number;
      }
    ).n;
    const depth = (
      engine.db.prepare("SELECT max(trigger_depth) AS d FROM executions WHERE action_name = 'ping'").get() as {
        d: number;
      }
    ).d;
    const limits = engine.limits as unknown as Record<string, number>;
    expect(executions).toBeLessThanOrEqual(limits.triggerDepthMax! + 2);
    expect(depth).toBeLessThanOrEqual(limits.triggerDepthMax! + 1);
    expect(api.seen.length, `triggerDepthMax is ${limits.triggerDepthMax}`).toBeLessThanOrEqual(
      (limits.triggerDepthMax ?? 16) + 1,
    );
  });
});
