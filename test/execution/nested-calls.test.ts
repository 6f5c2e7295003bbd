import { beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';
import { createAccount } from '../helpers/ledger.js';

let engine: Engine;
let seq = 0;
const eid = () => id(800_000 + ++seq);

const ALLOW_ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const UPDATE = `mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) { version } } }`;
const TREE = `status output error { code message hint }
  children { kind actionName status error { code }
    children { kind actionName status error { code }
      children { kind actionName status error { code } children { kind actionName status } } } }`;
const INVOKE = `mutation($id: UUID!, $v: Int, $e: UUID!, $input: JSON) { actions { invokeAction(id: $id, input: {executionId: $e, actionVersion: $v, input: $input}) { ${TREE} } } }`;

function tool(n: number, name: string, src: string, extra: Record<string, unknown> = {}): string {
  ok(engine, CREATE, {
    id: id(n),
    input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies: ALLOW_ALL, ...extra },
  });
  return id(n);
}

function invoke(actionId: string, input: unknown = {}, version = 1) {
  return ok(engine, INVOKE, { id: actionId, v: version, e: eid(), input }).actions.invokeAction;
}

/** A program that creates an account with this code (a visible write), then maybe calls on. */
const writes = (code: string, then = '') => `function run(event) {
  graphql('mutation($i: AccountInput!) { createAccount(input: $i) { code } }', { i: { accountId: event.data.ids['${code}'], code: '${code}', name: '${code}' } });
  ${then}
  return { wrote: '${code}' };
}`;

const accountExists = (n: number) => engine.graphql(`{ account(id: "${id(n)}") { code } }`).errors === undefined;

beforeEach(async () => {
  engine = await newEngine({ limits: { toolTimeoutMs: 500 } });
});

describe('the canonical example with open_case (DESIGN.md §4)', () => {
  const LOCK_SRC = `function run(event) {
  const data = event.data;
  graphql("mutation Lock($id: UUID!) { updateAccount(id: $id, input: {status: LOCKED}) { accountId } }",
          { id: data.account_id });
  const c = tools.open_case({ account_id: data.account_id, note: data.reason }, { check: false });
  return { locked: true, case_opened: c.ok };
}`;

  function setup(openCaseSrc: string) {
    createAccount(engine, 1);
    // open_case version 1 is a placeholder; version 2 is the one lock_account pins.
    tool(10, 'open_case', 'function run() { fail("version 1 must not run"); }', {
      tool: {
        description: 'Open a case',
        inputSchema: {
          type: 'object',
          properties: { account_id: { type: 'string' }, note: { type: 'string' } },
          required: ['account_id'],
        },
      },
    });
    ok(engine, UPDATE, { id: id(10), input: { config: { runtime: 'javascript', src: openCaseSrc } } });
    ok(engine, CREATE, {
      id: id(11),
      input: {
        name: 'lock_account',
        kind: 'tool',
        config: { runtime: 'javascript', src: LOCK_SRC },
        tool: {
          name: 'lock_account',
          description: 'Lock an account so it blocks posting, and open a case for operations.',
          inputSchema: {
            type: 'object',
            properties: { account_id: { type: 'string', format: 'uuid' }, reason: { type: 'string' } },
            required: ['account_id', 'reason'],
            additionalProperties: false,
          },
        },
        tools: [{ name: 'open_case', version: 2 }],
        policies: [
          { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.Account.*'] },
          // Calling tools.open_case is invoking it, which this tool's policies must allow too.
          {
            effect: 'ALLOW',
            actions: ['INSERT'],
            resources: ['actions.Execution'],
            assertions: { open_case: "context.document.action == 'open_case'" },
          },
        ],
      },
    });
  }

  const OPEN_CASE = (then: string) => `function run(event) {
  graphql('mutation($i: AccountInput!) { createAccount(input: $i) { code } }',
    { i: { accountId: '${id(500)}', code: 'case-1', name: 'Case: ' + event.data.note, metadata: { account: event.data.account_id } } });
  ${then}
  return { case_id: '${id(500)}' };
}`;

  it('when open_case fails, its writes are gone, the lock stays, and both nested calls are recorded', () => {
    setup(OPEN_CASE('fail("the case system is down", "open the case by hand");'));
    const result = invoke(id(11), { account_id: id(1), reason: 'Card reported stolen' });
    expect(result.status).toBe('SUCCEEDED');
    expect(result.output).toEqual({ locked: true, case_opened: false });
    expect(ok(engine, `{ account(id: "${id(1)}") { status } }`).account.status).toBe('LOCKED');
    expect(accountExists(500)).toBe(false);
    expect(result.children.map((c: any) => [c.kind, c.actionName, c.status])).toEqual([
      ['GRAPHQL', 'graphql', 'SUCCEEDED'],
      ['TOOL', 'open_case', 'FAILED'],
    ]);
    expect(result.children[1].error.code).toBe('TOOL_FAILED');
    expect(result.children[1].children).toEqual([expect.objectContaining({ kind: 'GRAPHQL', status: 'SUCCEEDED' })]);
  });

  it('when open_case succeeds, the case exists and the output says so; it ran the pinned version 2', () => {
    setup(OPEN_CASE(''));
    const result = invoke(id(11), { account_id: id(1), reason: 'Card reported stolen' });
    expect(result.output).toEqual({ locked: true, case_opened: true });
    expect(accountExists(500)).toBe(true);
    const child = ok(
      engine,
      `{ actions { executions(first: 10, where: {actionId: "${id(10)}"}) { nodes { actionVersion status } } } }`,
    ).actions.executions.nodes;
    expect(child).toEqual([{ actionVersion: 2, status: 'SUCCEEDED' }]);
  });

  it('locking the pinned version makes its callers fail with VERSION_LOCKED', () => {
    setup(OPEN_CASE(''));
    ok(engine, `mutation { actions { lockAction(id: "${id(10)}", version: 2) { status } } }`);
    const result = invoke(id(11), { account_id: id(1), reason: 'x' });
    expect(result.output.case_opened).toBe(false);
    expect(result.children[1]).toMatchObject({
      actionName: 'open_case',
      status: 'FAILED',
      error: { code: 'VERSION_LOCKED' },
    });
    const strict = tool(12, 'strict_caller', 'function run() { return tools.open_case({ account_id: "x" }); }', {
      tools: [{ name: 'open_case', version: 2 }],
    });
    const failed = invoke(strict);
    expect(failed.status).toBe('FAILED');
    expect(failed.error.code).toBe('VERSION_LOCKED');
  });
});

describe('atomicity of nested calls', () => {
  const ids = { level1: id(601), level2: id(602), level3: id(603) };

  function chain(level2CallsWithCheckFalse: boolean) {
    tool(23, 'level3', writes('level3', 'fail("level 3 broke");'));
    tool(
      22,
      'level2',
      writes(
        'level2',
        level2CallsWithCheckFalse
          ? 'const r = tools.level3(event.data, { check: false }); if (r.ok) fail("expected a failure");'
          : 'tools.level3(event.data);',
      ),
      {
        tools: [{ name: 'level3' }],
      },
    );
    tool(21, 'level1', writes('level1', 'tools.level2(event.data);'), { tools: [{ name: 'level2' }] });
  }

  it('a failure three levels down with no check: false unwinds everything to the first call', () => {
    chain(false);
    const result = invoke(id(21), { ids });
    expect(result.status).toBe('FAILED');
    expect(result.error.code).toBe('TOOL_FAILED');
    expect([601, 602, 603].map(accountExists)).toEqual([false, false, false]);
    // The tree is recorded as it ran: level1 → [graphql, level2 → [graphql, level3 → [graphql]]].
    expect(result.children.map((c: any) => c.actionName)).toEqual(['graphql', 'level2']);
    expect(result.children[1].children.map((c: any) => [c.actionName, c.status])).toEqual([
      ['graphql', 'SUCCEEDED'],
      ['level3', 'FAILED'],
    ]);
  });

  it('with check: false at level 2, levels 1 and 2 keep their writes', () => {
    chain(true);
    const result = invoke(id(21), { ids });
    expect(result.status).toBe('SUCCEEDED');
    expect([601, 602, 603].map(accountExists)).toEqual([true, true, false]);
  });
});

describe('nesting limits', () => {
  it('depth 9 fails with LIMIT_EXCEEDED naming the depth (8 tool levels below the first call is the most)', () => {
    tool(39, 'level_9', 'function run() { return 9; }');
    for (let level = 8; level >= 0; level--) {
      tool(30 + level, `level_${level}`, `function run(event) { return tools.level_${level + 1}(event.data); }`, {
        tools: [{ name: `level_${level + 1}` }],
      });
    }
    const deep = invoke(id(30));
    expect(deep.status).toBe('FAILED');
    expect(deep.error.code).toBe('LIMIT_EXCEEDED');
    expect(deep.error.message).toContain('tool depth 9; toolDepthMax is 8');
    expect(invoke(id(31)).output).toBe(9); // starting one level lower, level_9 is at depth 8
  });

  it('the 1,025th call beneath one call fails with LIMIT_EXCEEDED; 1,024 are fine', () => {
    const loop = tool(
      40,
      'loop',
      `function run(event) { let n = 0; for (let i = 0; i < event.data.calls; i++) n += cel('1'); return n; }`,
    );
    expect(invoke(loop, { calls: 1024 }).output).toBe(1024);
    const over = invoke(loop, { calls: 1025 });
    expect(over.error.code).toBe('LIMIT_EXCEEDED');
    expect(over.error.message).toContain('call 1025');
  });

  it('one deadline for the whole tree, which check: false cannot catch', () => {
    tool(41, 'spinner', 'function run() { while (true) {} }');
    const catcher = tool(
      42,
      'catcher',
      'function run() { const r = tools.spinner({}, { check: false }); return { caught: r }; }',
      { tools: [{ name: 'spinner' }] },
    );
    const error = fails(engine, INVOKE, { id: catcher, v: 1, e: eid(), input: {} });
    expect(error.code).toBe('TIMEOUT');
    expect(count(engine, 'executions')).toBe(0);
  });

  it('calling a tool that is not declared fails clearly, lists the declared names, and runs nothing', () => {
    tool(50, 'helper', 'function run() { return 1; }');
    const caller = tool(51, 'caller', 'function run() { return tools.helpr({}); }', {
      tools: [{ name: 'helper' }, { name: 'cel' }],
    });
    const result = invoke(caller);
    expect(result.status).toBe('FAILED');
    expect(result.error.code).toBe('NOT_FOUND');
    expect(result.error.message).toBe('tools.helpr is not declared by caller; declared: helper, cel');
    // The made-up name is a call too: recorded FAILED in the tree, and nothing ran.
    expect(result.children.map((c: any) => [c.actionName, c.status])).toEqual([['helpr', 'FAILED']]);
  });

  it('made-up names are cut to 64 characters and count toward callsPerExecutionMax', async () => {
    const small = await newEngine({ limits: { callsPerExecutionMax: 5 } });
    const long = 'x'.repeat(200);
    ok(
      small,
      `mutation($input: ActionInput!) { actions { createAction(id: "${id(52)}", input: $input) { version } } }`,
      {
        input: {
          name: 'guesser',
          config: {
            runtime: 'javascript',
            src: `function run() { const seen = []; for (let i = 0; i < 50; i++) { const r = tools['${long}' + i]({}, { check: false }); seen.push(r.error.code); if (r.error.code !== 'NOT_FOUND') break; } return { seen }; }`,
          },
        },
      },
    );
    const run = ok(
      small,
      `mutation { actions { invokeAction(name: "guesser", input: {executionId: "${eid()}", actionVersion: 1, input: {}}) { status output children { actionName status error { message } } } } }`,
    ).actions.invokeAction;
    expect(run.status).toBe('SUCCEEDED');
    // Five recorded (the budget), the sixth refused by callsPerExecutionMax, then the program stopped.
    expect(run.output.seen).toEqual([
      'NOT_FOUND',
      'NOT_FOUND',
      'NOT_FOUND',
      'NOT_FOUND',
      'NOT_FOUND',
      'LIMIT_EXCEEDED',
    ]);
    expect(run.children).toHaveLength(5);
    expect(run.children[0].actionName).toBe('x'.repeat(64));
    expect(run.children[0].error.message).toContain(
      `tools.${'x'.repeat(64)}… (201 characters) is not declared by guesser`,
    );
    small.close();
  });
});

describe('tool references', () => {
  it('a fixed input replaces what the caller sent, from CEL over tool.input, event and execution.input', () => {
    tool(60, 'echo', 'function run(event) { return event.data; }');
    const caller = tool(
      61,
      'fixed',
      `function run(event) { return tools.echo({ account_id: 'attacker', note: 'free text', actor: 'me' }); }`,
      {
        tools: [
          {
            name: 'echo',
            input: {
              account_id: 'string(tool.input.account_id)',
              actor: "'fixed-actor'",
              depth: 'event.execution.attempt',
            },
          },
        ],
      },
    );
    expect(invoke(caller, { account_id: 'victim' }).output).toEqual({
      account_id: 'victim',
      note: 'free text',
      actor: 'fixed-actor',
      depth: 1,
    });
  });

  it('an unpinned reference resolves to the latest ACTIVE version once per execution and keeps it', () => {
    tool(70, 'which', 'function run() { return "v1"; }');
    const caller = tool(
      71,
      'asks_twice',
      `function run() {
  const first = tools.which({});
  graphql('mutation($src: String!) { actions { updateAction(id: "${id(70)}", input: {config: {runtime: "javascript", src: $src}}) { version } } }', { src: 'function run() { return "v2"; }' });
  const second = tools.which({});
  return [first, second];
}`,
      { tools: [{ name: 'which' }] },
    );
    expect(invoke(caller).output).toEqual(['v1', 'v1']);
    expect(invoke(caller).output[0]).toBe('v2');
  });

  it('refuses references to tools or versions that do not exist', () => {
    expect(
      fails(engine, CREATE, {
        id: id(80),
        input: {
          name: 'x',
          kind: 'tool',
          config: { runtime: 'javascript', src: 'function run() {}' },
          tools: [{ name: 'nope' }],
        },
      }).code,
    ).toBe('NOT_FOUND');
    tool(81, 'exists', 'function run() {}');
    expect(
      fails(engine, CREATE, {
        id: id(80),
        input: {
          name: 'x',
          kind: 'tool',
          config: { runtime: 'javascript', src: 'function run() {}' },
          tools: [{ name: 'exists', version: 3 }],
        },
      }).message,
    ).toContain('version 3');
  });
});

describe('a pinned reference is the calling tool’s consent to call it, and widens nothing (conformance T68)', () => {
  /** Policies about accounts only, as DESIGN §4 gives lock_account: nothing about calls. */
  const ACCOUNTS_ONLY = [
    { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.Account.*'] },
  ];
  const CALLS = (ref: Record<string, unknown>) =>
    `function run(e) { const r = tools.${ref.name}(e.data, { check: false }); return { ok: r.ok, error: r.error && r.error.message }; }`;
  const caller = (n: number, name: string, ref: Record<string, unknown>, policies: unknown[] = ACCOUNTS_ONLY) =>
    tool(n, name, CALLS(ref), { tools: [ref], policies });

  beforeEach(() => {
    tool(20, 'helper', writes('helped'));
    // Writes a transaction-less account: allowed to the helper, beyond nothing of ACCOUNTS_ONLY.
    tool(
      21,
      'poster',
      `function run() { graphql('mutation { createJournal(input: {journalId: "${id(99)}", name: "side"}) { journalId } }'); return 1; }`,
    );
  });

  it('pinned: the call runs with no policy on actions.Execution; unpinned: the calling tool’s policies decide, as before', () => {
    caller(30, 'pins', { name: 'helper', version: 1 });
    caller(31, 'floats', { name: 'helper' });
    expect(invoke(id(30), { ids: { helped: id(501) } })).toMatchObject({ status: 'SUCCEEDED', output: { ok: true } });
    expect(accountExists(501)).toBe(true);
    expect(invoke(id(31), { ids: { helped: id(502) } }).output).toEqual({
      ok: false,
      error: 'INSERT on actions.Execution refused by tool floats@1: no policy allows it',
    });
    expect(accountExists(502)).toBe(false);
  });

  it('everything the pinned tool does is still checked against the consenting tool’s layer', () => {
    caller(32, 'pins_poster', { name: 'poster', version: 1 });
    expect(invoke(id(32)).output).toEqual({
      ok: false,
      error: 'INSERT on financial.Journal refused by tool pins_poster@1: no policy allows it',
    });
    expect(engine.graphql(`{ journal(id: "${id(99)}") { name } }`).errors).toBeDefined();
  });

  it('a DENY of the calling tool’s own still refuses a pinned call', () => {
    caller(33, 'pins_but_denies', { name: 'helper', version: 1 }, [
      ...ACCOUNTS_ONLY,
      { effect: 'DENY', actions: ['INSERT'], resources: ['actions.Execution'] },
    ]);
    expect(invoke(id(33), { ids: { helped: id(503) } }).output).toEqual({
      ok: false,
      error: 'INSERT on actions.Execution refused by tool pins_but_denies@1: policy 2 denies it',
    });
  });

  it('the client’s layer is never consented for: a client denied the helper is refused through the pinning tool', () => {
    caller(34, 'pins_for_dave', { name: 'helper', version: 1 });
    ok(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', {
      i: {
        principal: 'dave',
        name: 'dave',
        policies: [
          ...ALLOW_ALL,
          {
            effect: 'DENY',
            actions: ['INSERT'],
            resources: ['actions.Execution'],
            assertions: { helper: "context.document.action == 'helper'" },
          },
        ],
      },
    });
    const ran = engine.graphql(INVOKE, { id: id(34), v: 1, e: eid(), input: {} }, { principal: 'dave' });
    expect((ran.data as any).actions.invokeAction.output).toEqual({
      ok: false,
      error: 'INSERT on actions.Execution refused by client dave: policy 2 denies it',
    });
  });

  it('consent runs down a chain of pinned references only: one unpinned hop above and that tool’s policies decide', () => {
    caller(35, 'middle', { name: 'helper', version: 1 });
    const top = (n: number, name: string, ref: Record<string, unknown>) =>
      tool(n, name, `function run(e) { return tools.middle(e.data); }`, { tools: [ref], policies: ACCOUNTS_ONLY });
    top(36, 'top_pinned', { name: 'middle', version: 1 });
    top(37, 'top_floating', { name: 'middle' });
    // Pinned all the way: top and middle both consented to helper@1.
    expect(invoke(id(36), { ids: { helped: id(504) } }).output).toEqual({ ok: true, error: null });
    expect(accountExists(504)).toBe(true);
    // top_floating calls middle unpinned: its own policies (nothing about calls) refuse middle.
    const floating = invoke(id(37), { ids: { helped: id(505) } });
    expect(floating.error.message).toBe(
      'INSERT on actions.Execution refused by tool top_floating@1: no policy allows it',
    );
    expect(accountExists(505)).toBe(false);
  });
});

describe('review of the consent and context.tools (conformance T68, issue 36 item 6)', () => {
  const ACCOUNTS_ONLY = [
    { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.Account.*'] },
  ];
  const PASS_ON = (name: string) =>
    `function run(e) { const r = tools.${name}(e.data, { check: false }); return { ok: r.ok, error: r.error && r.error.message, hint: r.error && r.error.hint }; }`;

  it('a tool whose own ALLOW on calls has a condition keeps it, pinned or not: consent is only for tools silent on calls', () => {
    tool(20, 'helper', writes('helped'));
    tool(21, 'gated', PASS_ON('helper'), {
      tools: [{ name: 'helper', version: 1 }],
      policies: [
        ...ACCOUNTS_ONLY,
        {
          effect: 'ALLOW',
          actions: ['INSERT'],
          resources: ['actions.Execution'],
          assertions: { small_only_rule_17: 'context.document.input.n < 100' },
        },
      ],
    });
    expect(invoke(id(21), { n: 5, ids: { helped: id(601) } }).output).toMatchObject({ ok: true });
    const big = invoke(id(21), { n: 5000, ids: { helped: id(602) } }).output;
    expect(big).toMatchObject({
      ok: false,
      error: 'INSERT on actions.Execution refused by tool gated@1: no policy allows it',
    });
    expect(accountExists(602)).toBe(false);
    // A tool's policies are not every caller's to read: its refusal names none of its assertions.
    expect(big.hint).not.toContain('small_only_rule_17');
  });

  it('context.tool is the tool whose own code does the write: a tool beneath the door (unpinned, someone else’s to update) is not the door', () => {
    tool(22, 'sub', writes('by_sub'));
    tool(23, 'door', writes('by_door', 'tools.sub(event.data, { check: false });'), { tools: [{ name: 'sub' }] });
    ok(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', {
      i: {
        principal: 'desk',
        name: 'desk',
        policies: [
          { effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] },
          { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
          {
            effect: 'ALLOW',
            actions: ['INSERT'],
            resources: ['financial.Account'],
            assertions: { only_door: "context.tool == 'door'" },
          },
        ],
      },
    });
    const ran = engine.graphql(
      INVOKE,
      { id: id(23), v: 1, e: eid(), input: { ids: { by_door: id(603), by_sub: id(604) } } },
      { principal: 'desk' },
    );
    expect((ran.data as any).actions.invokeAction.status).toBe('SUCCEEDED');
    expect(accountExists(603)).toBe(true);
    expect(accountExists(604)).toBe(false);
    const direct = engine.graphql(
      `mutation { createAccount(input: {accountId: "${id(605)}", code: "direct", name: "direct"}) { code } }`,
      {},
      { principal: 'desk' },
    );
    expect(direct.errors?.[0]).toMatchObject({
      message: 'INSERT on financial.Account refused by client desk: no policy allows it',
      extensions: { details: { unmet: { policy: 3, assertions: ['only_door'] } } },
    });
    expect(direct.errors?.[0]?.extensions?.hint).toContain('asks for a tool on the call stack');
  });
});
