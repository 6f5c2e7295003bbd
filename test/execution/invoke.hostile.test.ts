import { beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { resourceMatches } from '../../src/policy/policy.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';
import { createAccount } from '../helpers/ledger.js';

let engine: Engine;
let seq = 0;
const eid = () => id(950_000 + ++seq);
const ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const INVOKE = `mutation($id: UUID!, $e: UUID!, $input: JSON) { actions { invokeAction(id: $id, input: {executionId: $e, actionVersion: 1, input: $input}) {
  status output error { code message } children { status error { code } } } } }`;

function tool(
  n: number,
  name: string,
  src: string,
  policies: unknown[] = ALL,
  extra: Record<string, unknown> = {},
): string {
  ok(engine, CREATE, {
    id: id(n),
    input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies, ...extra },
  });
  return id(n);
}
const invoke = (actionId: string, input: unknown = {}, principal?: string) => {
  const result = engine.graphql(
    INVOKE,
    { id: actionId, e: eid(), input },
    principal === undefined ? {} : { principal },
  );
  return result.errors
    ? { requestError: result.errors[0]!.extensions?.code, message: result.errors[0]!.message }
    : (result.data as any).actions.invokeAction;
};

beforeEach(async () => {
  engine = await newEngine({ limits: { toolTimeoutMs: 1000 } });
});

describe('hostile programs are contained', () => {
  it('cannot patch the iterator-helper prototypes to run code inside another caller’s execution', () => {
    ok(
      engine,
      'mutation { auth { createClient(input: {principal: "mallory", name: "m", policies: [{effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]}]}) { apiKey } } }',
    );
    const plant = tool(
      1,
      'plant',
      `function run() {
  const protos = [Object.getPrototypeOf([].values().map((x) => x)), Object.getPrototypeOf(Iterator.from({ next() { return { done: true }; } }))];
  const refused = [];
  for (const P of protos) { try { Object.defineProperty(P, 'next', { value: () => ({ done: true }) }); refused.push(false); } catch (e) { refused.push(true); } }
  return refused;
}`,
      [],
    );
    expect(invoke(plant, {}, 'mallory').output).toEqual([true, true]);
    const victim = tool(2, 'victim', 'function run() { return [1, 2, 3].values().map((x) => x * 2).toArray(); }');
    expect(invoke(victim).output).toEqual([2, 4, 6]);
  });

  it('a built-in recursing deeper than the host stack allows fails the request with LIMIT_EXCEEDED; the sandbox is replaced, intact', async () => {
    const deep = tool(
      3,
      'deep',
      'function run() { let o = 1; for (let i = 0; i < 100000; i++) o = { a: o }; return JSON.stringify(o).length; }',
    );
    const probe = tool(
      4,
      'probe',
      'function run() { let d = 0; function f() { d++; f(); } try { f(); } catch (e) {} return d; }',
    );
    await engine.sandboxReady();
    const depthBefore = invoke(probe).output;
    for (let i = 0; i < 3; i++) {
      expect(invoke(deep)).toMatchObject({ requestError: 'LIMIT_EXCEEDED' });
      await engine.sandboxReady();
      expect(invoke(probe).output).toBe(depthBefore);
    }
  });

  it('promise jobs run inside the call, under its savepoint, and leave nothing behind', () => {
    createAccount(engine, 1);
    const later = tool(
      5,
      'later',
      `function run() {
  Promise.resolve().then(() => graphql('mutation { updateAccount(id: "${id(1)}", input: {name: "from a job"}) { name } }'));
  return 'returned';
}`,
    );
    expect(invoke(later).output).toBe('returned');
    expect(ok(engine, `{ account(id: "${id(1)}") { name } }`).account.name).toBe('from a job');
  });

  it('a program cannot forge error codes: a thrown error with code TIMEOUT or INTERNAL is a SCRIPT_ERROR', () => {
    const forger = tool(6, 'forger', 'function run(e) { const x = new Error("fake"); x.code = e.data.code; throw x; }');
    const caller = tool(
      7,
      'forge_caller',
      'function run() { const r = tools.forger({ code: "TIMEOUT" }, { check: false }); return r.error.code; }',
      ALL,
      { tools: [{ name: 'forger' }] },
    );
    expect(invoke(caller).output).toBe('SCRIPT_ERROR');
    expect(invoke(forger, { code: 'INTERNAL' }).error.code).toBe('SCRIPT_ERROR');
    const fakeTimeout = tool(
      8,
      'fake_timeout',
      'function run() { throw { name: "InternalError", message: "interrupted" }; }',
    );
    expect(invoke(fakeTimeout).error.code).toBe('SCRIPT_ERROR');
    expect(invoke(tool(9, 'throws_null', 'function run() { throw null; }')).error).toEqual({
      code: 'SCRIPT_ERROR',
      message: 'uncaught null: null',
    });
  });

  it('returning a function or a symbol is a clear SCRIPT_ERROR, not INTERNAL', () => {
    for (const [n, value] of [
      [10, '() => 1'],
      [11, 'Symbol("s")'],
      [12, '{ toJSON() { return undefined; } }'],
    ] as const) {
      const result = invoke(tool(n, `returns_${n}`, `function run() { return ${value}; }`));
      expect(result.error.code).toBe('SCRIPT_ERROR');
      expect(result.error.message).toContain('not JSON');
    }
  });

  it('huge array-likes and huge sparse arrays are refused by the generic array methods instead of hanging the process', () => {
    const walks = [
      'Array.prototype.indexOf.call({ length: 2 ** 40 }, 1)',
      'Array(2 ** 32 - 1).indexOf(1)',
      "Array(1e8).join('')",
      // What a method walks besides its receiver: concat's arguments, the arrays flat opens, flatMap's results.
      '[].concat(Array(2 ** 29))',
      '[].concat({ length: 2 ** 40, [Symbol.isConcatSpreadable]: true })',
      '[[Array(2 ** 29)]].flat(2)',
      '[[[Array(2 ** 29)]]].flat(Infinity)',
      '[1].flatMap(() => Array(2 ** 29))',
    ];
    walks.forEach((expression, i) => {
      const started = Date.now();
      const result = invoke(tool(1300 + i, `array_like_${i}`, `function run() { return ${expression}; }`));
      expect(result.error.code).toBe('SCRIPT_ERROR');
      expect(result.error.message).toMatch(/of length \d+ is refused \(the most is 8388608\)/);
      expect(Date.now() - started).toBeLessThan(1000);
    });
    // Dense arrays as long as the sandbox can hold still work, and flat and flatMap as usual.
    const fine = invoke(
      tool(
        1320,
        'array_fine',
        'function run() { return [new Array(5000000).fill(1).indexOf(2), [[1, [2]], 3].flat(Infinity).length, [1, 2].flatMap((x) => [x, x]).length]; }',
      ),
    );
    expect(fine.output).toEqual([-1, 3, 4]);
  });

  it('a native operation the interrupt cannot stop, returning after the deadline, is a TIMEOUT, not a success', async () => {
    engine = await newEngine({ limits: { toolTimeoutMs: 50 } });
    // A 4-million-slot sparse array is allowed, and indexOf walks every hole without checking the interrupt.
    expect(invoke(tool(18, 'slow_native', 'function run() { return Array(4000000).indexOf(1); }')).requestError).toBe(
      'TIMEOUT',
    );
  });

  it("values a program passes to graphql, cel and tools are bounded in depth like a client's", () => {
    const sink = tool(19, 'sink', 'function run(e) { return 1; }');
    const deep = tool(
      20,
      'deep_args',
      `function run() {
      let o = 1; for (let i = 0; i < 4500; i++) o = [o];
      const codes = [];
      for (const call of [() => tools.sink(o), () => cel('1', { x: o }), () => graphql('{ journal { name } }', { x: o })]) {
        try { call(); codes.push('ran'); } catch (e) { codes.push(e.code); }
      }
      return codes;
    }`,
      ALL,
      { tools: [{ name: 'sink' }] },
    );
    expect(sink).toBe(id(19));
    const result = invoke(deep);
    expect(result.status).toBe('SUCCEEDED');
    expect(result.output).toEqual(['LIMIT_EXCEEDED', 'LIMIT_EXCEEDED', 'LIMIT_EXCEEDED']);
  });

  it('an execution id names one call: invoked and started with the same id and input is a conflict both ways', () => {
    const echo = tool(21, 'echo_id', 'function run(e) { return e.data; }');
    const START =
      'mutation($id: UUID!, $e: UUID!, $input: JSON) { actions { startAction(id: $id, input: {executionId: $e, actionVersion: 1, input: $input}) { status } } }';
    ok(engine, START, { id: echo, e: id(801), input: { a: 1 } });
    expect(fails(engine, INVOKE, { id: echo, e: id(801), input: { a: 1 } })).toMatchObject({
      code: 'EXECUTION_ID_CONFLICT',
      message: expect.stringContaining('was started with this action and input'),
    });
    ok(engine, INVOKE, { id: echo, e: id(802), input: { a: 1 } });
    expect(fails(engine, START, { id: echo, e: id(802), input: { a: 1 } })).toMatchObject({
      code: 'EXECUTION_ID_CONFLICT',
      message: expect.stringContaining('was invoked with this action and input'),
    });
    // The same call again is still answered from its record.
    expect(ok(engine, START, { id: echo, e: id(801), input: { a: 1 } }).actions.startAction.status).toBe('QUEUED');
  });

  it('an id and a name that name different actions are refused, not one of them ignored', () => {
    const a = tool(23, 'named_a', 'function run() { return 1; }');
    tool(24, 'named_b', 'function run() { return 2; }');
    const byBoth =
      'mutation($id: UUID!, $name: String, $e: UUID!) { actions { invokeAction(id: $id, name: $name, input: {executionId: $e, actionVersion: 1, input: {}}) { output } } }';
    expect(fails(engine, byBoth, { id: a, name: 'named_b', e: id(804) })).toMatchObject({
      code: 'BAD_REQUEST',
      message: `action ${a} is named "named_a", not "named_b"`,
    });
    expect(ok(engine, byBoth, { id: a, name: 'named_a', e: id(805) }).actions.invokeAction.output).toBe(1);
    expect(fails(engine, `{ actions { action(id: "${a}", name: "named_b") { name } } }`).code).toBe('BAD_REQUEST');
    expect(count(engine, 'executions')).toBe(1);
  });

  it('startAction checks inputBytesMax when it is started, writing nothing', async () => {
    engine = await newEngine({ limits: { inputBytesMax: 1000 } });
    const echo = tool(22, 'echo_big', 'function run(e) { return 1; }');
    const error = fails(
      engine,
      `mutation($id: UUID!, $input: JSON) { actions { startAction(id: $id, input: {executionId: "${id(803)}", actionVersion: 1, input: $input}) { status } } }`,
      { id: echo, input: { s: 'x'.repeat(2000) } },
    );
    expect(error).toMatchObject({ code: 'LIMIT_EXCEEDED', message: expect.stringContaining('inputBytesMax is 1000') });
    expect(count(engine, 'executions')).toBe(0);
  });

  it('reusing an executionId inside one call tree is a conflict for that call, not a failed request', () => {
    const reuse = tool(
      14,
      'reuse',
      `function run(e) {
  const q = 'mutation($e: UUID!) { actions { invokeAction(name: "cel", input: {executionId: $e, input: {expression: "1"}}) { status } } }';
  graphql(q, { e: e.data.id });
  try { graphql(q, { e: e.data.id }); return 'ran twice'; } catch (err) { return err.code; }
}`,
    );
    expect(invoke(reuse, { id: id(777) }).output).toBe('EXECUTION_ID_CONFLICT');
  });

  it('calls past the budget are refused without writing a record each', async () => {
    engine = await newEngine({ limits: { callsPerExecutionMax: 10 } });
    const spinner = tool(
      15,
      'budget',
      'function run() { let refused = 0; for (let i = 0; i < 5000; i++) { try { cel("1"); } catch (e) { refused++; } } return refused; }',
    );
    expect(invoke(spinner).output).toBe(4990);
    expect(count(engine, 'executions')).toBeLessThanOrEqual(1 + 11);
  });
});

describe('hostile policies are contained', () => {
  it('a DENY whose assertion cannot be evaluated still denies (fail closed)', () => {
    ok(
      engine,
      `mutation { auth { createClient(input: {principal: "limited", name: "l", policies: [
      {effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]},
      {effect: DENY, actions: [INSERT], resources: ["actions.Execution"], assertions: {big: "context.document.input.amount > 1000"}}]}) { apiKey } } }`,
    );
    const payer = tool(20, 'payer', 'function run(e) { return e.data.amount; }');
    expect(invoke(payer, { amount: 5 }, 'limited').output).toBe(5);
    expect(invoke(payer, { amount: 5000 }, 'limited').requestError).toBe('ACCESS_DENIED');
    expect(invoke(payer, { amount: '5000' }, 'limited').requestError).toBe('ACCESS_DENIED');
  });

  it('resource patterns with many stars match in linear time', () => {
    expect(resourceMatches(`${'*'.repeat(40)}Q`, 'financial.Transaction.financial.Transaction.financial')).toBe(false);
    expect(resourceMatches('*.*.*', 'a.b.c')).toBe(true);
  });

  it('an execution started from inside a tool stays bounded by that tool; triggers cannot be created from inside a tool', () => {
    tool(
      21,
      'strong',
      `function run() { graphql('mutation { createAccount(input: {accountId: "${id(66)}", code: "x", name: "x"}) { code } }'); return 1; }`,
    );
    const weak = tool(
      22,
      'weak',
      `function run() {
  graphql('mutation { actions { startAction(name: "strong", input: {executionId: "${id(67)}", input: {}}) { status } } }');
  let trigger = null;
  try { graphql('mutation { actions { createTrigger(input: {triggerId: "${id(68)}", name: "t", on: ["account.inserted"], action: {name: "strong"}}) { name } } }'); } catch (e) { trigger = e.code; }
  return trigger;
}`,
      [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
    );
    expect(invoke(weak).output).toBe('ACCESS_DENIED');
    engine.createWorker().drain();
    const started = ok(engine, `{ actions { execution(executionId: "${id(67)}") { status error { code message } } } }`)
      .actions.execution;
    expect(started.status).toBe('FAILED');
    expect(started.error.message).toContain('refused by tool weak@1');
    expect(fails(engine, `{ account(id: "${id(66)}") { code } }`).code).toBe('NOT_FOUND');
  });
});
