import { describe, expect, it } from 'vitest';
import { id, newEngine, ok } from '../helpers/engine.js';

/** statusMessagesPerCallMax and statusBytesMax, each crossed: the program gets LIMIT_EXCEEDED, nothing past it is recorded. */
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const INVOKE = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { invokeAction(name: $n, input: {executionId: $e, actionVersion: 1, input: $i}) {
  status output error { code message } progress { text } } } }`;

/** Says each of event.data.say, catching each refusal: returns what was refused, as the program saw it. */
const SAYER = {
  name: 'sayer',
  kind: 'tool',
  config: {
    runtime: 'javascript',
    src: `function run(event) {
      const refused = [];
      for (const text of event.data.say) {
        try { status(text); } catch (e) { refused.push({ code: e.code, message: e.message, details: e.details }); }
      }
      return { refused };
    }`,
  },
  tool: { description: 'Says things.', inputSchema: { type: 'object' } },
  policies: [],
};

async function engineWith(limits: Record<string, number>) {
  const engine = await newEngine({ limits });
  ok(engine, CREATE, { id: id(1), input: SAYER });
  return engine;
}

describe('status(text) limits', () => {
  it('statusMessagesPerCallMax: the message past it throws LIMIT_EXCEEDED naming the limit; the first n are recorded', async () => {
    const engine = await engineWith({ statusMessagesPerCallMax: 3 });
    try {
      const run = ok(engine, INVOKE, { n: 'sayer', e: id(10), i: { say: ['1', '2', '3', '4', '5'] } }).actions
        .invokeAction;
      expect(run.status).toBe('SUCCEEDED');
      expect(run.progress.map((m: { text: string }) => m.text)).toEqual(['1', '2', '3']);
      expect(run.output.refused).toHaveLength(2);
      expect(run.output.refused[0]).toMatchObject({
        code: 'LIMIT_EXCEEDED',
        details: { limit: 'statusMessagesPerCallMax', max: 3, actual: 4 },
      });
      expect(run.output.refused[0].message).toContain('statusMessagesPerCallMax (3)');
    } finally {
      engine.close();
    }
  });

  it('statusBytesMax: a message of more UTF-8 bytes throws LIMIT_EXCEEDED and is not recorded; one at the bound is', async () => {
    const engine = await engineWith({ statusBytesMax: 10 });
    try {
      const say = ['x'.repeat(10), 'x'.repeat(11), 'é'.repeat(6), 'ok'];
      const run = ok(engine, INVOKE, { n: 'sayer', e: id(11), i: { say } }).actions.invokeAction;
      expect(run.progress.map((m: { text: string }) => m.text)).toEqual(['x'.repeat(10), 'ok']);
      expect(run.output.refused.map((r: any) => r.details)).toEqual([
        { limit: 'statusBytesMax', max: 10, actual: 11 },
        { limit: 'statusBytesMax', max: 10, actual: 12 },
      ]);
      expect(run.output.refused[1].message).toContain('12 bytes');
    } finally {
      engine.close();
    }
  });

  it('an uncaught refusal fails the call with it; a non-string is a TypeError', async () => {
    const engine = await engineWith({ statusMessagesPerCallMax: 1 });
    try {
      ok(engine, CREATE, {
        id: id(2),
        input: {
          ...SAYER,
          name: 'loud',
          config: { runtime: 'javascript', src: "function run() { status('a'); status('b'); }" },
        },
      });
      ok(engine, CREATE, {
        id: id(3),
        input: { ...SAYER, name: 'odd', config: { runtime: 'javascript', src: 'function run() { status(42); }' } },
      });
      const loud = ok(engine, INVOKE, { n: 'loud', e: id(12), i: {} }).actions.invokeAction;
      expect(loud).toMatchObject({ status: 'FAILED', error: { code: 'LIMIT_EXCEEDED' }, progress: [{ text: 'a' }] });
      const odd = ok(engine, INVOKE, { n: 'odd', e: id(13), i: {} }).actions.invokeAction;
      expect(odd.status).toBe('FAILED');
      expect(odd.error.message).toContain('status(text): text must be a string');
      expect(odd.progress).toEqual([]);
    } finally {
      engine.close();
    }
  });
});
