import { beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { balanceOf, createAccount, createTransferCode } from '../helpers/ledger.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';

let engine: Engine;
let seq = 0;
const eid = () => id(700_000 + ++seq);

const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { actionId version status pending } } }`;
const INVOKE = `mutation($id: UUID, $name: String, $input: InvokeInput!) { actions { invokeAction(id: $id, name: $name, input: $input) {
  executionId status kind output error { code message hint details } invocation { output error { code message hint } logs durationMs }
  children { kind status input output error { code message } } } } }`;

/** Tools here may do anything (policies are tested in test/policy/policy.test.ts). */
const ALLOW_ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];

function createTool(n: number, name: string, src: string, extra: Record<string, unknown> = {}): string {
  ok(engine, CREATE, {
    id: id(n),
    input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies: ALLOW_ALL, ...extra },
  });
  return id(n);
}

function invoke(actionId: string, input: unknown, extra: Record<string, unknown> = {}) {
  return ok(engine, INVOKE, { id: actionId, input: { executionId: eid(), actionVersion: 1, input, ...extra } }).actions
    .invokeAction;
}

beforeEach(async () => {
  engine = await newEngine({ limits: { toolTimeoutMs: 300 } });
});

describe('the canonical example (DESIGN.md §4)', () => {
  it('lock_account locks the account through graphql and records one GRAPHQL child', () => {
    const account = '70eec1a6-eac1-47aa-a507-e18f2d486425';
    ok(engine, `mutation { createAccount(input: {accountId: "${account}", code: "card", name: "Card"}) { status } }`);
    const src = `function run(event) {
  const data = event.data;
  graphql("mutation Lock($id: UUID!) { updateAccount(id: $id, input: {status: LOCKED}) { accountId } }", { id: data.account_id });
  return { locked: true };
}`;
    const created = ok(
      engine,
      `mutation CreateLockAccount($id: UUID!, $src: String!) {
  actions {
    createAction(id: $id, input: {
      name: "lock_account", kind: "tool"
      config: { runtime: "javascript", src: $src }
      tool: { name: "lock_account", description: "Lock an account so it blocks posting, and open a case for operations."
              inputSchema: { type: "object", properties: { account_id: { type: "string", format: "uuid" }, reason: { type: "string" } },
                             required: ["account_id", "reason"], additionalProperties: false } }
      tools: []
      policies: [{ effect: ALLOW, actions: [SELECT, INSERT, UPDATE], resources: ["financial.Account.*"] }]
    }) { actionId version pending }
  }
}`,
      { id: id(1), src },
    );
    expect(created.actions.createAction).toEqual({ actionId: id(1), version: 1, pending: false });
    const result = ok(
      engine,
      `mutation Lock($executionId: UUID!, $actionId: UUID!) {
  actions {
    invokeAction(id: $actionId, input: { executionId: $executionId, actionVersion: 1,
                 input: { account_id: "70eec1a6-eac1-47aa-a507-e18f2d486425", reason: "Card reported stolen" } }) {
      status
      invocation { output error { code message hint } }
    }
  }
}`,
      { executionId: id(2), actionId: id(1) },
    );
    expect(result.actions.invokeAction).toEqual({
      status: 'SUCCEEDED',
      invocation: { output: { locked: true }, error: null },
    });
    expect(ok(engine, `{ account(id: "${account}") { status } }`).account.status).toBe('LOCKED');
    const recorded = ok(
      engine,
      `{ actions { execution(executionId: "${id(2)}") { status actionName actionVersion caller { principal }
      children { kind status parent { executionId } } } } }`,
    ).actions.execution;
    expect(recorded).toMatchObject({ status: 'SUCCEEDED', actionName: 'lock_account', actionVersion: 1 });
    expect(recorded.children).toEqual([{ kind: 'GRAPHQL', status: 'SUCCEEDED', parent: { executionId: id(2) } }]);
  });
});

describe('a failed call is a FAILED execution, its writes undone, the rest of the request commits', () => {
  it('a tool that writes and then calls fail() leaves nothing written; the request’s later post commits', () => {
    const a = createAccount(engine, 1);
    const b = createAccount(engine, 2);
    createTransferCode(engine);
    const tool = createTool(
      10,
      'write_then_fail',
      `function run(event) {
  graphql("mutation { createAccount(input: {accountId: \\"${id(99)}\\", code: \\"ghost\\", name: \\"Ghost\\"}) { code } }");
  fail("the card network refused", "retry after 5 minutes");
}`,
    );
    const data = ok(
      engine,
      `mutation($tool: UUID!, $e: UUID!, $p: TransactionInput!) {
      actions { invokeAction(id: $tool, input: {executionId: $e, actionVersion: 1, input: {}}) { status error { code message hint } } }
      postTransaction(input: $p) { transactionId } }`,
      {
        tool,
        e: id(500),
        p: { transactionId: id(600), tranCode: 'TRANSFER', params: { from: a, to: b, amount: '5' } },
      },
    );
    expect(data.actions.invokeAction).toEqual({
      status: 'FAILED',
      error: { code: 'TOOL_FAILED', message: 'the card network refused', hint: 'retry after 5 minutes' },
    });
    expect(fails(engine, `{ account(id: "${id(99)}") { code } }`).code).toBe('NOT_FOUND');
    expect(balanceOf(engine, b).settled.normalBalance.units).toBe('5');
    const recorded = ok(
      engine,
      `{ actions { execution(executionId: "${id(500)}") { status error { code message hint } children { kind status } } } }`,
    ).actions.execution;
    expect(recorded).toEqual({
      status: 'FAILED',
      error: { code: 'TOOL_FAILED', message: 'the card network refused', hint: 'retry after 5 minutes' },
      children: [{ kind: 'GRAPHQL', status: 'SUCCEEDED' }],
    });
  });

  it('an uncaught exception is SCRIPT_ERROR with the stack naming <action>@<version>; an uncaught failed graphql call keeps its code', () => {
    const thrower = createTool(
      11,
      'thrower',
      'function run(event) {\n  return helper();\n}\nfunction helper() { throw new Error("boom"); }',
    );
    const result = invoke(thrower, {});
    expect(result.error.code).toBe('SCRIPT_ERROR');
    expect(result.error.message).toBe('Error: boom');
    expect(result.error.details.stack).toContain('thrower@1:4');
    const locked = createTool(
      12,
      'post_missing',
      `function run() { graphql("mutation { voidTransaction(id: \\"${id(4040)}\\") { transactionId } }"); }`,
    );
    const voided = invoke(locked, {});
    expect(voided.status).toBe('FAILED');
    expect(voided.error.code).toBe('NOT_FOUND');
    expect(voided.children).toEqual([expect.objectContaining({ kind: 'GRAPHQL', status: 'FAILED' })]);
  });

  it('a program can catch a failed graphql call; its writes are already gone', () => {
    createAccount(engine, 1);
    const tool = createTool(
      13,
      'catcher',
      `function run() {
  let caught = null;
  try {
    graphql("mutation { a: createAccount(input: {accountId: \\"${id(98)}\\", code: \\"half\\", name: \\"Half\\"}) { code } b: createAccount(input: {accountId: \\"${id(1)}\\", code: \\"dup\\", name: \\"Dup\\"}) { code } }");
  } catch (e) { caught = { name: e.name, code: e.code }; }
  return { caught };
}`,
    );
    const result = invoke(tool, {});
    expect(result.status).toBe('SUCCEEDED');
    expect(result.output).toEqual({ caught: { name: 'ToolError', code: 'ALREADY_EXISTS' } });
    expect(fails(engine, `{ account(id: "${id(98)}") { code } }`).code).toBe('NOT_FOUND');
  });
});

describe('input, output and versions', () => {
  it('validates input with JSON pointers (INPUT_INVALID) and output (OUTPUT_INVALID) against the schemas', () => {
    const tool = createTool(20, 'typed', 'function run(e) { return { total: e.data.n * 2 }; }', {
      tool: {
        description: 'doubles',
        inputSchema: {
          type: 'object',
          properties: { n: { type: 'integer' }, id: { type: 'string', format: 'uuid' } },
          required: ['n'],
          additionalProperties: false,
        },
        outputSchema: { type: 'object', properties: { total: { type: 'integer', maximum: 10 } }, required: ['total'] },
      },
    });
    expect(invoke(tool, { n: 2 })).toMatchObject({ status: 'SUCCEEDED', output: { total: 4 } });
    const bad = invoke(tool, { n: 'two', id: 'nope', extra: 1 });
    expect(bad.error.code).toBe('INPUT_INVALID');
    expect(bad.error.details.problems).toEqual(
      expect.arrayContaining([
        { pointer: '/n', message: 'must be integer' },
        { pointer: '/id', message: 'must match format "uuid"' },
        { pointer: '/', message: 'has no property "extra" in the schema' },
      ]),
    );
    const tooBig = invoke(tool, { n: 6 });
    expect(tooBig.error.code).toBe('OUTPUT_INVALID');
    expect(tooBig.error.message).toContain('/total must be <= 10');
  });

  it('refuses an invalid schema, a program that does not compile (with line and column), and a native name', () => {
    const badSchema = fails(engine, CREATE, {
      id: id(21),
      input: {
        name: 'x',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() {}' },
        tool: { inputSchema: { type: 'object', colour: 'red' } },
      },
    });
    expect(badSchema.code).toBe('BAD_REQUEST');
    expect(badSchema.message).toContain('tool.inputSchema is not a valid JSON Schema');
    const syntax = fails(engine, CREATE, {
      id: id(21),
      input: { name: 'x', kind: 'tool', config: { runtime: 'javascript', src: 'function run() {\n  return {;\n}' } },
    });
    expect(syntax.message).toMatch(/does not compile: SyntaxError: .* at line 2, column \d+/);
    const breakout = fails(engine, CREATE, {
      id: id(21),
      input: {
        name: 'x',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() {}\n}); (function () {' },
      },
    });
    expect(breakout.message).toContain('does not compile');
    expect(
      fails(engine, CREATE, {
        id: id(21),
        input: { name: 'graphql', kind: 'tool', config: { runtime: 'javascript', src: 'function run() {}' } },
      }).code,
    ).toBe('ALREADY_EXISTS');
    expect(
      fails(engine, CREATE, {
        id: id(21),
        input: { name: 'Bad Name', kind: 'tool', config: { runtime: 'javascript', src: 'function run() {}' } },
      }).code,
    ).toBe('BAD_REQUEST');
    expect(ok(engine, '{ actions { actions(first: 10) { nodes { name } } } }').actions.actions.nodes).toEqual([]);
  });

  it('versions: updateAction makes version 2, versions are immutable, a locked or draft version cannot run, actionVersion is required', () => {
    const tool = createTool(22, 'versioned', 'function run() { return 1; }');
    ok(
      engine,
      `mutation { actions { updateAction(id: "${tool}", input: {config: {runtime: "javascript", src: "function run() { return 2; }"}}) { version } } }`,
    );
    expect(invoke(tool, {}).output).toBe(1);
    expect(invoke(tool, {}, { actionVersion: 2 }).output).toBe(2);
    const versions = ok(
      engine,
      `{ actions { action(name: "versioned") { version versions { version status config } } } }`,
    ).actions.action;
    expect(versions.version).toBe(2);
    expect(versions.versions.map((v: any) => [v.version, v.config.src])).toEqual([
      [1, 'function run() { return 1; }'],
      [2, 'function run() { return 2; }'],
    ]);
    ok(engine, `mutation { actions { lockAction(id: "${tool}", version: 1) { status } } }`);
    expect(fails(engine, INVOKE, { id: tool, input: { executionId: eid(), actionVersion: 1, input: {} } }).code).toBe(
      'VERSION_LOCKED',
    );
    expect(fails(engine, INVOKE, { id: tool, input: { executionId: eid(), input: {} } }).code).toBe('BAD_REQUEST');
    ok(engine, `mutation { actions { updateAction(id: "${tool}", input: {draft: true}) { version pending } } }`);
    expect(fails(engine, INVOKE, { id: tool, input: { executionId: eid(), actionVersion: 3, input: {} } }).code).toBe(
      'VERSION_LOCKED',
    );
    ok(engine, `mutation { actions { activateAction(id: "${tool}", version: 3) { status } } }`);
    expect(invoke(tool, {}, { actionVersion: 3 }).output).toBe(2);
  });

  it('a version created in a request that rolled back leaves nothing behind in the caches', () => {
    const result = engine.graphql(
      `mutation($src: String!) { actions {
      a: createAction(id: "${id(24)}", input: {name: "ephemeral", kind: "tool", config: {runtime: "javascript", src: $src}, tool: {inputSchema: {type: "object", properties: {x: {type: "integer"}}, required: ["x"]}}}) { version }
      b: invokeAction(id: "${id(24)}", input: {executionId: "${id(901)}", actionVersion: 1, input: {x: 1}}) { output }
      c: lockAction(id: "${id(404)}", version: 1) { version } } }`,
      { src: 'function run() { return "old"; }' },
    );
    expect(result.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    createTool(24, 'ephemeral', 'function run() { return "new"; }');
    expect(invoke(id(24), {})).toMatchObject({ status: 'SUCCEEDED', output: 'new' });
  });

  it('is idempotent by executionId: the same input returns the recorded execution without running again; another input conflicts', () => {
    createAccount(engine, 1);
    const tool = createTool(
      23,
      'counter',
      `function run(e) {
  const a = graphql("{ account(id: \\"${id(1)}\\") { metadata } }").account;
  const n = ((a.metadata && a.metadata.n) || 0) + 1;
  graphql("mutation($m: JSON) { updateAccount(id: \\"${id(1)}\\", input: {metadata: $m}) { version } }", { m: { n } });
  return { n };
}`,
    );
    const first = ok(engine, INVOKE, { id: tool, input: { executionId: id(800), actionVersion: 1, input: { x: 1 } } })
      .actions.invokeAction;
    const again = ok(engine, INVOKE, { id: tool, input: { executionId: id(800), actionVersion: 1, input: { x: 1 } } })
      .actions.invokeAction;
    expect(again.output).toEqual({ n: 1 });
    expect(again.executionId).toBe(first.executionId);
    expect(ok(engine, `{ account(id: "${id(1)}") { metadata } }`).account.metadata).toEqual({ n: 1 });
    expect(
      fails(engine, INVOKE, { id: tool, input: { executionId: id(800), actionVersion: 1, input: { x: 2 } } }).code,
    ).toBe('EXECUTION_ID_CONFLICT');
  });

  it('the native graphql and cel tools are invoked by name without being created', () => {
    createAccount(engine, 1);
    const g = ok(engine, INVOKE, {
      name: 'graphql',
      input: {
        executionId: eid(),
        input: { query: 'query($id: UUID!) { account(id: $id) { code } }', variables: { id: id(1) } },
      },
    });
    expect(g.actions.invokeAction).toMatchObject({
      status: 'SUCCEEDED',
      kind: 'GRAPHQL',
      output: { account: { code: 'ACC-1' } },
    });
    const c = ok(engine, INVOKE, {
      name: 'cel',
      input: { executionId: eid(), input: { expression: "decimal(x) + decimal('0.2')", bindings: { x: '0.1' } } },
    });
    expect(c.actions.invokeAction).toMatchObject({ status: 'SUCCEEDED', kind: 'CEL', output: '0.3' });
    const bad = ok(engine, INVOKE, { name: 'cel', input: { executionId: eid(), input: { expression: '1 +' } } });
    expect(bad.actions.invokeAction.error.code).toBe('CEL_ERROR');
  });
});

describe('the sandbox holds its limits, and the engine keeps serving', () => {
  it('while(true){} fails the request with TIMEOUT within its deadline', () => {
    const tool = createTool(30, 'spin', 'function run() { while (true) {} }');
    const started = Date.now();
    const error = fails(engine, INVOKE, { id: tool, input: { executionId: eid(), actionVersion: 1, input: {} } });
    expect(error.code).toBe('TIMEOUT');
    expect(Date.now() - started).toBeLessThan(300 + 2000);
    expect(error.result.data).toBeNull();
    const catching = createTool(
      31,
      'spin_catch',
      'function run() { for (;;) { try { while (true) {} } catch (e) {} } }',
    );
    expect(
      fails(engine, INVOKE, { id: catching, input: { executionId: eid(), actionVersion: 1, input: {} } }).code,
    ).toBe('TIMEOUT');
    expect(invoke(createTool(32, 'after', 'function run() { return "still serving"; }'), {}).output).toBe(
      'still serving',
    );
  });

  it.each([
    ['plain arrays', 'const a = []; for (;;) a.push(new Array(100000).fill(1));'],
    ['typed arrays', 'const a = []; for (;;) a.push(new Float64Array(1000000));'],
    ['many small objects', 'const a = []; for (;;) a.push({ i: a.length, s: "x" + a.length });'],
    ['one huge string', 'let s = "x"; for (;;) s = s + s;'],
  ])('a 200 MB allocation (%s) fails with LIMIT_EXCEEDED', async (_, body) => {
    engine = await newEngine({ limits: { toolTimeoutMs: 20_000, requestDeadlineMs: 20_000 } });
    const tool = createTool(33, 'hog', `function run() { ${body} }`);
    const result = invoke(tool, {});
    expect(result.status).toBe('FAILED');
    expect(result.error.code).toBe('LIMIT_EXCEEDED');
    expect(result.error.message).toContain('out of memory');
    expect(
      invoke(createTool(34, 'after', 'function run() { return [1, 2, 3].map((x) => x * 2); }'), {}).output,
    ).toEqual([2, 4, 6]);
  });

  it('infinite recursion fails with LIMIT_EXCEEDED (stack)', () => {
    const result = invoke(
      createTool(35, 'recurse', 'function run() { function f(n) { return f(n + 1) + 1; } return f(0); }'),
      {},
    );
    expect(result.error.code).toBe('LIMIT_EXCEEDED');
    expect(result.error.message).toContain('stack');
  });

  it('a 10 MB output fails with LIMIT_EXCEEDED (outputBytesMax)', async () => {
    // Its own deadline, generous: building 10 MB takes a while on a loaded machine, and a call that
    // returns after its deadline is a TIMEOUT.
    engine = await newEngine({ limits: { toolTimeoutMsMax: 5000, requestDeadlineMs: 5000 } });
    const result = invoke(
      createTool(36, 'big_output', 'function run() { return "x".repeat(10 * 1024 * 1024); }', {
        execution: { timeoutMs: 5000 },
      }),
      {},
    );
    expect(result.error.code).toBe('LIMIT_EXCEEDED');
    expect(result.error.message).toContain('outputBytesMax');
    // Refused inside the sandbox as the text is made, not copied out first and measured after.
    expect(result.error.message).toContain('the output is more than outputBytesMax');
    expect(result.error.hint).toContain('outputBytesMax');
  });

  it('outputBytesMax is crossed as the output is made: many small strings, and one long one past it; just under it passes', async () => {
    engine = await newEngine({ limits: { outputBytesMax: 10_000 } });
    const many = invoke(
      createTool(
        60,
        'many_strings',
        'function run() { const a = []; for (let i = 0; i < 5000; i++) a.push("ab" + i); return { a }; }',
      ),
      {},
    );
    expect(many.error).toMatchObject({ code: 'LIMIT_EXCEEDED' });
    expect(many.error.message).toContain('more than outputBytesMax (10000 bytes');
    const under = invoke(createTool(61, 'just_under', 'function run() { return { s: "x".repeat(9980) }; }'), {});
    expect(under.error ?? null).toBeNull();
    // Multi-byte text: the guest's count is a lower bound, the engine's byte count decides.
    const wide = invoke(createTool(62, 'wide', 'function run() { return { s: "é".repeat(6000) }; }'), {});
    expect(wide.error).toMatchObject({ code: 'LIMIT_EXCEEDED' });
    expect(wide.error.message).toContain('bytes; outputBytesMax is 10000');
  });

  it('an input over inputBytesMax fails with LIMIT_EXCEEDED', async () => {
    engine = await newEngine({ limits: { inputBytesMax: 100 } });
    const result = invoke(createTool(37, 'small_in', 'function run() { return 1; }'), { s: 'x'.repeat(200) });
    expect(result.error.code).toBe('LIMIT_EXCEEDED');
  });

  it('console.log is captured into the invocation’s logs, bounded by logBytesMax', async () => {
    engine = await newEngine({ limits: { logBytesMax: 40 } });
    const result = invoke(
      createTool(
        38,
        'chatty',
        'function run() { console.log("hello", {a: 1}); for (let i = 0; i < 10; i++) console.log("line " + i); return 0; }',
      ),
      {},
    );
    expect(result.invocation.logs[0]).toBe('hello {"a":1}');
    expect(result.invocation.logs.join('\n')).toContain('logBytesMax');
    expect(result.invocation.logs.join('').length).toBeLessThan(200);
  });
});

describe('isolation: no state survives from one execution into another', () => {
  it('globals, Array.prototype, Object.prototype and JSON.parse cannot be patched, and top-level state is fresh per call', () => {
    const patcher = createTool(
      40,
      'patcher',
      `var calls = (typeof calls === 'number' ? calls : 0) + 1;
function run() {
  const attempts = {
    global: () => { globalThis.leak = 42; },
    arrayProto: () => { Array.prototype.sum = function () { return 1; }; },
    objectProto: () => { Object.prototype.polluted = true; },
    jsonParse: () => { JSON.parse = () => ({ hacked: true }); },
    graphql: () => { graphql = null; },
    defineGlobal: () => { Object.defineProperty(globalThis, 'sneaky', { value: 1 }); },
    mathRandom: () => { Math.random = () => 4; },
  };
  const refused = {};
  for (const [k, f] of Object.entries(attempts)) { try { f(); refused[k] = false; } catch (e) { refused[k] = true; } }
  return { refused, calls };
}`,
    );
    const checker = createTool(
      41,
      'checker',
      `function run() {
  return {
    leak: typeof globalThis.leak, sum: typeof [].sum, polluted: ({}).polluted === undefined,
    json: JSON.parse('{"a":1}').a, graphql: typeof graphql, sneaky: typeof globalThis.sneaky, random: Math.random() < 1,
  };
}`,
    );
    const first = invoke(patcher, {});
    expect(first.output.refused).toEqual({
      global: true,
      arrayProto: true,
      objectProto: true,
      jsonParse: true,
      graphql: true,
      defineGlobal: true,
      mathRandom: true,
    });
    expect(first.output.calls).toBe(1);
    for (let i = 0; i < 5; i++) {
      expect(invoke(patcher, {}).output.calls).toBe(1);
      expect(invoke(checker, {}).output).toEqual({
        leak: 'undefined',
        sum: 'undefined',
        polluted: true,
        json: 1,
        graphql: 'function',
        sneaky: 'undefined',
        random: true,
      });
    }
  });

  it('Math.random carries nothing from one execution to the next: its sequence depends only on the call', async () => {
    const draw =
      'function run(e) { const r = []; for (let i = 0; i < e.data.n; i++) r.push(Math.random()); return r.slice(-1); }';
    const first = createTool(45, 'draws', draw);
    const fixedId = id(46_000);
    const alone = ok(engine, INVOKE, { id: first, input: { executionId: fixedId, actionVersion: 1, input: { n: 1 } } })
      .actions.invokeAction.output;
    engine = await newEngine();
    const again = createTool(45, 'draws', draw);
    invoke(again, { n: 1000 });
    const afterOthers = ok(engine, INVOKE, {
      id: again,
      input: { executionId: fixedId, actionVersion: 1, input: { n: 1 } },
    }).actions.invokeAction.output;
    expect(afterOthers).toEqual(alone);
    expect(alone[0]).toBeGreaterThanOrEqual(0);
    expect(alone[0]).toBeLessThan(1);
    expect(invoke(again, { n: 1 }).output).not.toEqual(alone);
  });

  it('reuses warm contexts (no new context per call) without giving up that isolation', () => {
    const tool = createTool(
      42,
      'closure',
      `let stash = []; function run(e) { stash.push(e.data.v); return stash.length; }`,
    );
    for (let i = 0; i < 20; i++) expect(invoke(tool, { v: i }).output).toBe(1);
    expect(engine.stats().idleSandboxContexts).toBe(1);
  });

  it('escapes are refused: require, process, import(), eval and every Function constructor (no code from text), globalThis.constructor, prototypes of host values', () => {
    createAccount(engine, 1);
    const tool = createTool(
      43,
      'escape',
      `function run() {
  const r = {};
  r.require = typeof require;
  r.process = typeof process;
  try { import('fs'); r.importReturned = true; } catch (e) { r.importReturned = 'threw'; }
  const attempt = (f) => { try { return f(); } catch (e) { return e.name + ': ' + e.message; } };
  r.functionCtor = attempt(() => Function('return this')());
  r.ctorIsObject = globalThis.constructor === Object;
  const host = graphql('{ journal { name } }');
  const F = host.constructor.constructor;
  r.viaHostValue = attempt(() => F('return typeof process')());
  r.generatorCtor = attempt(() => Object.getPrototypeOf(function* () {}).constructor('yield 1'));
  r.asyncCtor = attempt(() => Object.getPrototypeOf(async function () {}).constructor('return 1'));
  r.eval = typeof eval;
  r.timers = [typeof setTimeout, typeof setInterval, typeof queueMicrotask, typeof fetch, typeof XMLHttpRequest].join(',');
  return r;
}`,
    );
    const out = invoke(tool, {}).output;
    expect(out).toMatchObject({
      require: 'undefined',
      process: 'undefined',
      functionCtor: expect.stringContaining('EvalError: code cannot be made from text'),
      ctorIsObject: true,
      viaHostValue: expect.stringContaining('EvalError'),
      generatorCtor: expect.stringContaining('EvalError'),
      asyncCtor: expect.stringContaining('EvalError'),
      eval: 'undefined',
      timers: 'undefined,undefined,undefined,undefined,undefined',
    });
    const dynamicImport = invoke(
      createTool(44, 'importer', `function run() { return import('node:child_process'); }`),
      {},
    );
    expect(dynamicImport.status).toBe('FAILED');
    expect(count(engine, 'accounts')).toBe(1);
  });
});

describe('exact arithmetic in programs', () => {
  it('decimal() and money() are exact, with the same semantics as CEL', () => {
    const tool = createTool(
      50,
      'maths',
      `function run() {
  return {
    sum: decimal('0.1').plus('0.2').toString(),
    eq: decimal('0.1').plus('0.2').eq('0.3'),
    times: decimal('19.99').times(3).toString(),
    div: decimal('10').div('3', 4).toString(),
    halfEven: decimal('2.345').round(2).toString(),
    halfUp: decimal('2.345').round(2, 'half_up').toString(),
    neg: decimal('-1.5').round(0).toString(),
    money: money('10.50', 'USD').plus(money('0.75', 'USD')),
    big: decimal('123456789012345678901234567890.123456789012345678').plus('0.000000000000000001').toString(),
  };
}`,
    );
    expect(invoke(tool, {}).output).toEqual({
      sum: '0.3',
      eq: true,
      times: '59.97',
      div: '3.3333',
      halfEven: '2.34',
      halfUp: '2.35',
      neg: '-2',
      money: { units: '11.25', currency: 'USD' },
      big: '123456789012345678901234567890.123456789012345679',
    });
    const mixed = invoke(
      createTool(51, 'mixed', `function run() { return money('1', 'USD').plus(money('1', 'EUR')); }`),
      {},
    );
    expect(mixed.error.code).toBe('SCRIPT_ERROR');
    expect(mixed.error.message).toContain('USD and EUR');
  });
});

describe('input defaults', () => {
  it('a schema default is filled in before validation: the program receives it and the execution records it; the caller’s input is not', async () => {
    const engine = await newEngine();
    ok(
      engine,
      `mutation($input: ActionInput!) { actions { createAction(id: "${id(7001)}", input: $input) { version } } }`,
      {
        input: {
          name: 'search',
          config: { runtime: 'javascript', src: 'function run(event) { return { got: event.data }; }' },
          tool: {
            description: 'Search with a default page size.',
            inputSchema: {
              type: 'object',
              properties: {
                q: { type: 'string' },
                maxResults: { type: 'integer', default: 5, maximum: 50 },
                filters: { type: 'object', properties: { archived: { type: 'boolean', default: false } }, default: {} },
              },
              required: ['q'],
              additionalProperties: false,
            },
          },
        },
      },
    );
    const run = (input: unknown, n: number) =>
      (
        engine.graphql(
          `mutation($i: JSON) { actions { invokeAction(name: "search", input: {executionId: "${id(7100 + n)}", actionVersion: 1, input: $i}) { status input output error { code message } } } }`,
          { i: input },
        ).data as any
      ).actions.invokeAction;
    expect(run({ q: 'rent' }, 1)).toMatchObject({
      status: 'SUCCEEDED',
      input: { q: 'rent', maxResults: 5, filters: { archived: false } },
      output: { got: { q: 'rent', maxResults: 5, filters: { archived: false } } },
    });
    expect(run({ q: 'rent', maxResults: 9 }, 2).output.got.maxResults).toBe(9);
    // The default is applied, then validated: a bad value is still refused, and a missing required one too.
    expect(run({ q: 'rent', maxResults: 99 }, 3)).toMatchObject({ status: 'FAILED', error: { code: 'INPUT_INVALID' } });
    expect(run({}, 4)).toMatchObject({ status: 'FAILED', error: { code: 'INPUT_INVALID' } });
    // The same executionId and the same input as sent (without the defaults) is the same call.
    expect(run({ q: 'rent' }, 1).status).toBe('SUCCEEDED');
    engine.close();
  });
});
