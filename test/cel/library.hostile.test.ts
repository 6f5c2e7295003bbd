import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cel } from '../../src/cel/cel.js';
import { callLibrary } from '../../src/cel/library.js';
import { systemClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { EngineError } from '../../src/errors.js';
import { DEFAULT_LIMITS } from '../../src/limits.js';
import { count, id, newEngine, ok } from '../helpers/engine.js';

/**
 * Attacks on the CEL library's door (op 'fn'): a hostile program, and a hostile name or value
 * reaching the host. The door runs only the library's functions, each one bounded CEL evaluation.
 */

let engine: Engine;
let seq = 0;
const ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const INVOKE = `mutation($id: UUID!, $e: UUID!) { actions { invokeAction(id: $id, input: {executionId: $e, actionVersion: 1, input: {}}) {
  status output error { code message details } children { actionName } } } }`;

beforeAll(async () => {
  // Room for a thousand library calls in one tool call on a busy machine; the loops below set their own deadline.
  engine = await newEngine({
    limits: { toolTimeoutMs: 10_000, toolTimeoutMsMax: 10_000, requestDeadlineMs: 20_000, operatorDeadlineMs: 20_000 },
  });
});
afterAll(() => engine.close());

function run(src: string, extra: Record<string, unknown> = {}) {
  const n = 975_000 + ++seq;
  ok(engine, CREATE, {
    id: id(n),
    input: {
      name: `hostile_lib_${seq}`,
      kind: 'tool',
      config: { runtime: 'javascript', src },
      policies: ALL,
      ...extra,
    },
  });
  return ok(engine, INVOKE, { id: id(n), e: id(985_000 + seq) }).actions.invokeAction;
}

const cel = new Cel(systemClock, { celExpressionLengthMax: 4096, celCacheMax: 100 });
function refusal(name: string, args: unknown): EngineError {
  try {
    const value = callLibrary(cel, name, typeof args === 'string' ? args : JSON.stringify(args), 32);
    throw new Error(`expected ${name} to be refused, got ${value}`);
  } catch (error) {
    if (!(error instanceof EngineError)) throw error;
    return error;
  }
}

describe('the door runs the library’s functions and nothing else', () => {
  it('refuses a name that is not a library function: an expression, a prototype key, a host operation', () => {
    for (const name of [
      'strings.ToUpper(a0) || true',
      'uuid.New() + "x"',
      '__proto__',
      'constructor',
      'toString',
      'hasOwnProperty',
      'graphql',
      'cel',
      'tool',
      'size',
      'int',
      'matches',
      'Decimal.toString',
      'x'.repeat(10_000),
    ]) {
      const error = refusal(name, [['s', 'a']]);
      expect(error.code, name.slice(0, 40)).toBe('NOT_FOUND');
      expect(error.message.length, name.slice(0, 40)).toBeLessThan(300);
    }
  });

  it('binds arguments as values: text that reads as CEL stays text', () => {
    expect(
      JSON.parse(callLibrary(cel, 'strings.ToUpper', JSON.stringify([['s', 'a") || uuid.New() + ("']]), 32)),
    ).toEqual(['s', 'A") || UUID.NEW() + ("']);
  });

  it('refuses a forged value as CEL refuses the literal, and a pair of no known kind', () => {
    expect(refusal('date', [['t', 'yesterday']]).code).toBe('CEL_ERROR');
    expect(refusal('decimal.Abs', [['d', '1e999']]).code).toBe('CEL_ERROR');
    expect(refusal('decimal.Abs', [['d', '9'.repeat(200)]]).code).toBe('LIMIT_EXCEEDED');
    expect(
      refusal('money.Add', [
        ['m', '1', 'usd'],
        ['m', '1', 'USD'],
      ]).code,
    ).toBe('CEL_ERROR');
    expect(refusal('strings.ToUpper', [['q', 'a']]).code).toBe('BAD_REQUEST');
    expect(refusal('strings.ToUpper', [['i', '1'.repeat(400)]]).code).toBe('BAD_REQUEST');
    expect(refusal('strings.ToUpper', '{"length": 1}').code).toBe('BAD_REQUEST');
    expect(refusal('strings.ToUpper', 'not json').code).toBe('BAD_REQUEST');
  });

  it('refuses a number of arguments no overload takes before it compiles anything (the compile cache stays the table’s)', () => {
    const before = cel.size;
    for (let n = 0; n < 50; n++)
      expect(refusal('strings.ToUpper', Array(n + 2).fill(['s', 'a'])).code).toBe('CEL_ERROR');
    expect(cel.size).toBe(before);
  });

  it('refuses arguments nested past jsonDepthMax', () => {
    let nested: unknown = ['s', 'a'];
    for (let i = 0; i < 40; i++) nested = ['l', [nested]];
    expect(refusal('strings.ToUpper', [nested]).code).toBe('LIMIT_EXCEEDED');
  });
});

describe('a hostile program', () => {
  it('cannot replace a library function, forge a timestamp or reach the host function', () => {
    const result = run(`function run() {
  const tries = {};
  const attempt = (name, f) => { try { tries[name] = f(); } catch (e) { tries[name] = e.name; } };
  attempt('assign', () => { strings.ToUpper = () => 'pwned'; return strings.ToUpper('a'); });
  attempt('define', () => Object.defineProperty(time, 'Now', { value: () => 'then' }));
  attempt('proto', () => { Object.getPrototypeOf(time.Now()).plus = () => 'pwned'; return 'assigned'; });
  attempt('forge', () => new (time.Now().constructor)(Symbol('tally.cel'), 'garbage'));
  attempt('frozen', () => Object.isFrozen(time.Now()) && Object.isFrozen(Object.getPrototypeOf(duration('1s'))) && Object.isFrozen(strings));
  attempt('host', () => typeof globalThis.__tally_host + typeof globalThis.__tally_library);
  attempt('object', () => strings.ToUpper({ toString() { return 'a'; } }));
  attempt('implicit', () => time.Now() + 1);
  attempt('still', () => strings.ToUpper('a'));
  return tries;
}`);
    expect(result.status, JSON.stringify(result.error)).toBe('SUCCEEDED');
    expect(result.output).toEqual({
      assign: 'TypeError',
      define: 'TypeError',
      proto: 'TypeError',
      forge: 'TypeError',
      frozen: true,
      host: 'undefinedundefined',
      object: 'TypeError',
      implicit: 'TypeError',
      still: 'A',
    });
  });

  it('library calls write no record and are not calls: more of them than callsPerExecutionMax, one execution recorded', () => {
    const executions = count(engine, 'executions');
    const n = DEFAULT_LIMITS.callsPerExecutionMax + 100;
    const result = run(
      `function run() {
  let n = 0;
  for (let i = 0; i < ${n}; i++) if (strings.HasPrefix(strings.ToLower("AB" + i), "ab")) n++;
  return n;
}`,
    );
    expect(result.status, JSON.stringify(result.error)).toBe('SUCCEEDED');
    expect(result.output).toBe(n);
    expect(result.children).toEqual([]);
    expect(count(engine, 'executions') - executions).toBe(1);
  });

  for (const [what, loop] of [
    ['library calls', 'strings.ToUpper("a"); uuid.New();'],
    ['cel() calls', 'try { cel("1"); } catch (e) { if (e.code !== "LIMIT_EXCEEDED") throw e; }'],
  ] as const) {
    it(`an endless loop of ${what} stops at the call's deadline (timeoutMs), as the other does`, () => {
      const started = Date.now();
      const n = 975_500 + ++seq;
      ok(engine, CREATE, {
        id: id(n),
        input: {
          name: `loop_${seq}`,
          kind: 'tool',
          config: { runtime: 'javascript', src: `function run() { for (;;) { ${loop} } }` },
          policies: ALL,
          execution: { timeoutMs: 300 },
        },
      });
      const result = engine.graphql(INVOKE, { id: id(n), e: id(985_500 + seq) });
      const code = result.errors
        ? result.errors[0]!.extensions?.code
        : (result.data as any).actions.invokeAction.error.code;
      expect(['LIMIT_EXCEEDED', 'TIMEOUT']).toContain(code);
      expect(Date.now() - started).toBeLessThan(5_000);
    });
  }

  it('a huge input meets the bounds cel() meets: celCostMax for a result too large, the error named', () => {
    const result = run(`function run() {
  const out = {};
  try { strings.ReplaceAll("x".repeat(100000), "", "y".repeat(400)); } catch (e) { out.replace = [e.code, e.details && e.details.limit]; }
  try { cel('strings.ReplaceAll(a, "", b)', { a: "x".repeat(100000), b: "y".repeat(400) }); } catch (e) { out.viaCel = [e.code, e.details && e.details.limit]; }
  try { decimal.Round(decimal("1"), "half_even", 1000); } catch (e) { out.places = [e.code, e.message]; }
  return out;
}`);
    expect(result.status, JSON.stringify(result.error)).toBe('SUCCEEDED');
    expect(result.output.replace).toEqual(['LIMIT_EXCEEDED', 'celCostMax']);
    expect(result.output.viaCel).toEqual(result.output.replace);
    expect(result.output.places).toEqual([
      'CEL_ERROR',
      'CEL "decimal.Round(…, …, …)": decimal places 1000 must be between 0 and 64',
    ]);
    expect(DEFAULT_LIMITS.celCostMax).toBeLessThan((100_000 * 400) / 16);
  });
});
