import { beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { balanceOf, createAccount, createTransferCode } from '../helpers/ledger.js';
import { fails, id, newEngine, ok, ON_POSTGRES } from '../helpers/engine.js';

/**
 * Nothing one execution leaves behind runs in, or is seen by, another; and a program cannot compute
 * wrong money silently. Written as an attacker would: two clients, one tool each, the second must
 * see nothing of the first (hostile review F1, F9, F10; conformance T11, P2, T48).
 */

let engine: Engine;
let seq = 0;
const eid = () => id(960_000 + ++seq);
const ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const FIN = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }];
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const INVOKE = `mutation($id: UUID!, $e: UUID!, $input: JSON) { actions { invokeAction(id: $id, input: {executionId: $e, actionVersion: 1, input: $input}) {
  status output error { code message hint } invocation { logs } children { actionName status output } } } }`;

function tool(
  n: number,
  name: string,
  src: string,
  policies: unknown[] = ALL,
  extra: Record<string, unknown> = {},
  principal?: string,
): string {
  const result = engine.graphql(
    CREATE,
    { id: id(n), input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies, ...extra } },
    principal === undefined ? {} : { principal },
  );
  if (result.errors) throw new Error(JSON.stringify(result.errors));
  return id(n);
}
function invoke(actionId: string, input: unknown = {}, principal?: string) {
  const result = engine.graphql(
    INVOKE,
    { id: actionId, e: eid(), input },
    principal === undefined ? {} : { principal },
  );
  return result.errors
    ? { requestError: result.errors[0]!.extensions?.code, message: result.errors[0]!.message }
    : (result.data as any).actions.invokeAction;
}
function client(principal: string, policies: unknown[]) {
  ok(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', {
    i: { principal, name: principal, policies },
  });
}
/** mallory may create tools and invoke only her own (the review's case 1 client). */
function mallory() {
  client('mallory', [
    { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Action'] },
    {
      effect: 'ALLOW',
      actions: ['INSERT'],
      resources: ['actions.Execution'],
      assertions: { own: "context.document.action.startsWith('m_')" },
    },
  ]);
}
const post = (tx: number, amount: string, from: number, to: number) =>
  `mutation { postTransaction(input: {transactionId: "${id(tx)}", tranCode: "TRANSFER", params: {from: "${id(from)}", to: "${id(to)}", amount: "${amount}"}}) { transactionId } }`;

beforeEach(async () => {
  engine = await newEngine({ limits: { toolTimeoutMs: 1000 } });
  for (const n of [1, 2, 3]) createAccount(engine, n);
  createTransferCode(engine);
});

describe('nothing one execution leaves behind runs in another', () => {
  it('FinalizationRegistry and WeakRef do not exist: the review’s implant (case 1) cannot arm, and admin’s next call runs clean', () => {
    mallory();
    const implant = tool(
      10,
      'm_tool',
      `function run(e) {
  let n = 0;
  const reg = new FinalizationRegistry(() => {
    if (++n === 1) throw new Error('stop');
    console.log('implant as ' + JSON.stringify(graphql('{ auth { whoami { principal stack } } }').auth.whoami));
    graphql('mutation($t: UUID!) { postTransaction(input: {transactionId: $t, tranCode: "TRANSFER", params: {from: "${id(1)}", to: "${id(3)}", amount: "1000"}}) { transactionId } }', { t: cel('uuid.New()') });
    throw new Error('one per call');
  });
  for (let i = 0; i < 5; i++) { const t = {}; t.self = t; reg.register(t, i); }
  const c = () => { const o = {}; o.self = o; return new WeakRef(o); };
  for (let g = 0; g < 3; g++) { let r = c(); for (;;) { const x = c(); if (r.deref() === undefined) break; r = x; } }
  return 'armed';
}`,
      [],
      {},
      'mallory',
    );
    const armed = invoke(implant, {}, 'mallory');
    expect(armed.status).toBe('FAILED');
    expect(armed.error.message).toContain('FinalizationRegistry');
    const probe = tool(
      11,
      'probe',
      'function run() { return [typeof WeakRef, typeof FinalizationRegistry, typeof globalThis.WeakRef]; }',
    );
    expect(invoke(probe).output).toEqual(['undefined', 'undefined', 'undefined']);
    const pay = tool(12, 'pay', `function run(e) { graphql('${post(23, '1', 1, 2)}'); return 1; }`, FIN);
    for (let i = 0; i < 3; i++) invoke(implant, {}, 'mallory');
    const paid = invoke(pay);
    expect(paid.status).toBe('SUCCEEDED');
    expect(paid.invocation.logs).toEqual([]);
    expect(paid.children.map((c: { actionName: string }) => c.actionName)).toEqual(['graphql']);
    expect(balanceOf(engine, id(3)).settled.normalBalance.units).toBe('0');
  });

  it('promise jobs queued by a call that timed out are dropped with it, never run inside the next caller’s call', () => {
    mallory();
    // Job 1 is interrupted (the deadline has passed) when the call drains its queue; a host that
    // stopped at the first failing job would leave job 2 queued for whoever runs next.
    const implant = tool(
      20,
      'm_jobs',
      `function run() {
  for (let i = 0; i < 3; i++) Promise.resolve().then(() => {
    console.log('job ran as ' + graphql('{ auth { whoami { principal } } }').auth.whoami.principal);
    graphql('mutation($t: UUID!) { postTransaction(input: {transactionId: $t, tranCode: "TRANSFER", params: {from: "${id(1)}", to: "${id(3)}", amount: "500"}}) { transactionId } }', { t: cel('uuid.New()') });
  });
  for (;;) {}
}`,
      [],
      {},
      'mallory',
    );
    const timedOut = invoke(implant, {}, 'mallory');
    expect(timedOut).toMatchObject({ requestError: 'TIMEOUT' });
    const victim = tool(
      21,
      'victim',
      `function run() { return graphql('{ auth { whoami { principal } } }').auth.whoami.principal; }`,
    );
    const ran = invoke(victim);
    expect(ran.status).toBe('SUCCEEDED');
    expect(ran.invocation.logs).toEqual([]);
    expect(ran.children.map((c: { actionName: string }) => c.actionName)).toEqual(['graphql']);
    expect(balanceOf(engine, id(3)).settled.normalBalance.units).toBe('0');
  });

  it('a job chain that refills its queue past the deadline ends in TIMEOUT, and the next caller runs in a clean sandbox', async () => {
    mallory();
    const chain = tool(
      22,
      'm_chain',
      `function run() {
  let n = 0;
  function again() { n++; Promise.resolve().then(again); Promise.resolve().then(again); for (let i = 0; i < 1000; i++) {} }
  again();
  return 'queued';
}`,
      [],
      {},
      'mallory',
    );
    const started = Date.now();
    expect(invoke(chain, {}, 'mallory')).toMatchObject({ requestError: 'TIMEOUT' });
    expect(Date.now() - started).toBeLessThan(10_000);
    await engine.sandboxReady();
    const victim = tool(
      23,
      'victim2',
      `function run() { let jobs = 0; Promise.resolve().then(() => jobs++); return 'ran'; }`,
    );
    expect(invoke(victim)).toMatchObject({ status: 'SUCCEEDED', output: 'ran' });
  });

  it('an outer program’s promise job runs at the end of its own call, under its own savepoint, never inside a nested call (case 9)', () => {
    const P = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*', 'actions.*'] }];
    tool(30, 'b_fails', 'function run() { throw new Error("b fails"); }', P);
    const a = tool(
      31,
      'a',
      `function run() {
  const order = [];
  Promise.resolve().then(() => { order.push('job'); graphql('mutation { postTransaction(input: {transactionId: "${id(77)}", tranCode: "TRANSFER", params: {from: "${id(1)}", to: "${id(2)}", amount: "10"}}) { transactionId } }'); });
  const ok = tools.b_fails({}, { check: false }).ok;
  order.push('returned');
  console.log(order.join(','));
  return ok;
}`,
      P,
      { tools: [{ name: 'b_fails' }] },
    );
    const result = invoke(a);
    expect(result.status).toBe('SUCCEEDED');
    expect(result.output).toBe(false);
    // The job ran after run() returned, not inside b_fails' savepoint.
    expect(result.invocation.logs).toEqual(['returned']);
    expect(result.children).toEqual([
      { actionName: 'b_fails', status: 'FAILED', output: null },
      { actionName: 'graphql', status: 'SUCCEEDED', output: { postTransaction: { transactionId: id(77) } } },
    ]);
    // Every posting the call tree records exists.
    expect(ok(engine, `{ transaction(id: "${id(77)}") { transactionId } }`).transaction.transactionId).toBe(id(77));
    expect(balanceOf(engine, id(2)).settled.normalBalance.units).toBe('10');
  });

  it('memory pinned on the frozen global through private fields does not outlive the call (the return-override trick)', async () => {
    // Building 40 MB strings takes a while on a loaded machine: deadlines well past it.
    engine = await newEngine({ limits: { toolTimeoutMsMax: 5000, requestDeadlineMs: 5000 } });
    mallory();
    // 40 MB pinned with a private field on globalThis: had the context been reused, the next
    // caller's 30 MB would not fit in the 64 MB heap.
    const pin = tool(
      40,
      'm_pin',
      `function run(e) {
  class K extends (function (o) { return o; }) { #x = 'p'.repeat(40 * 1000 * 1000); static read(o) { try { return o.#x.length; } catch (err) { return 'none'; } } }
  const before = K.read(globalThis);
  new K(globalThis);
  return { before, after: K.read(globalThis) };
}`,
      [],
      { execution: { timeoutMs: 5000 } },
      'mallory',
    );
    expect(invoke(pin, {}, 'mallory').output).toEqual({ before: 'none', after: 40_000_000 });
    // A fresh class is a fresh private name: the next execution cannot read what the last pinned.
    expect(invoke(pin, {}, 'mallory').output).toEqual({ before: 'none', after: 40_000_000 });
    const big = tool(41, 'big', "function run() { const s = 'y'.repeat(30 * 1000 * 1000); return s.length; }", ALL, {
      execution: { timeoutMs: 5000 },
    });
    const result = invoke(big);
    expect(result.error).toBeNull();
    expect(result.output).toBe(30_000_000);
  });
});

describe('second hostile review: what the first fixes left open', () => {
  it('a program nested deeper than the host stack can compile is refused, and the sandbox is replaced, not left with a smaller stack (H1)', async () => {
    client('author', [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Action'] }]);
    const fib = tool(
      100,
      'fib',
      'function run(e) { const fib = (n) => n < 2 ? n : fib(n - 1) + fib(n - 2); return fib(e.data.n); }',
    );
    const probe = tool(
      101,
      'depth_probe',
      'function run() { let d = 0; function f() { d++; f(); } try { f(); } catch (e) {} return d; }',
    );
    const depthBefore = invoke(probe).output;
    for (const [i, d] of [594, 743, 929, 1162].entries()) {
      const result = engine.graphql(
        CREATE,
        {
          id: id(110 + i),
          input: {
            name: `deep_${i}`,
            kind: 'tool',
            config: {
              runtime: 'javascript',
              src: `function run() { ${'(()=>'.repeat(d)}1${')'.repeat(d)}; return 1; }`,
            },
            policies: [],
          },
        },
        { principal: 'author' },
      );
      expect(result.errors?.[0]?.extensions?.code, `nesting ${d}`).not.toBe('INTERNAL');
      await engine.sandboxReady();
    }
    expect(invoke(fib, { n: 12 }).output).toBe(144);
    expect(invoke(probe).output).toBe(depthBefore);
  });

  it('a substring search the interrupt cannot stop runs in linear time instead: an invoke-only client cannot freeze the server through an innocent tool (H2)', () => {
    const find = tool(
      120,
      'find_word',
      'function run(e) { const t = e.data.text, w = e.data.word; return e.data.op === "includes" ? t.includes(w) : [t.includes(w), t.indexOf(w), t.lastIndexOf(w), t.split(w).length, t.replaceAll(w, "-").length, t.replace(w, "$&").length]; }',
    );
    client('clerk', [
      {
        effect: 'ALLOW',
        actions: ['INSERT'],
        resources: ['actions.Execution'],
        assertions: { t: "context.document.action == 'find_word'" },
      },
    ]);
    const started = Date.now();
    // 170,000 × 85,001 steps natively: 7 s with the server frozen. Linear here, and interruptible.
    const miss = invoke(find, { op: 'includes', text: 'a'.repeat(170_000), word: `${'a'.repeat(85_000)}b` }, 'clerk');
    expect(Date.now() - started).toBeLessThan(1000);
    expect(miss.output === false || miss.requestError === 'TIMEOUT', JSON.stringify(miss)).toBe(true);
    // The same answers as the native search, where both run.
    const text = `${'ab'.repeat(4_000)}abc${'ab'.repeat(4_000)}abc`;
    const word = `${'ab'.repeat(600)}c`;
    const hit = invoke(find, { text, word });
    expect(hit, JSON.stringify(hit).slice(0, 300)).toMatchObject({
      output: [
        text.includes(word),
        text.indexOf(word),
        text.lastIndexOf(word),
        text.split(word).length,
        text.replaceAll(word, '-').length,
        text.replace(word, '$&').length,
      ],
    });
    const sort = invoke(
      tool(
        121,
        'big_sort',
        'function run() { try { new Float64Array(2000000).sort(); return "sorted"; } catch (e) { return e.message; } }',
      ),
    );
    expect(sort.output).toContain('is refused');
  });

  it('private-field pins add up across calls and are freed once they pass the bound; running out of memory frees the deeper levels too (H4)', async () => {
    engine = await newEngine({ limits: { toolTimeoutMsMax: 5000, requestDeadlineMs: 5000 } });
    mallory();
    const pin = tool(
      130,
      'm_pin',
      'function run() { class K extends (function (o) { return o; }) { #x = new Uint8Array(200000); } new K(globalThis); return 1; }',
      [],
      {},
      'mallory',
    );
    const outer = tool(
      131,
      'm_outer',
      'function run(e) { let n = 0; for (let i = 0; i < e.data.n; i++) if (tools.m_pin({}, { check: false }).ok) n++; return n; }',
      [
        {
          effect: 'ALLOW',
          actions: ['INSERT'],
          resources: ['actions.Execution'],
          assertions: { own: "context.document.action.startsWith('m_')" },
        },
      ],
      { tools: [{ name: 'm_pin' }], execution: { timeoutMs: 5000 } },
      'mallory',
    );
    for (let i = 0; i < 10; i++) {
      const aliases = Array.from(
        { length: 40 },
        (_, j) =>
          `i${j}: invokeAction(id: "${pin}", input: {executionId: "${eid()}", actionVersion: 1, input: {}}) { status }`,
      ).join(' ');
      expect(
        engine.graphql(`mutation { actions { ${aliases} } }`, null, { principal: 'mallory' }).errors,
      ).toBeUndefined();
    }
    // Pins made one nesting level down (each pinning call there costs its level a rebuild, ~10 ms).
    for (let i = 0; i < 6; i++) {
      const result = invoke(outer, { n: 60 }, 'mallory');
      expect(result, JSON.stringify(result)).toMatchObject({ output: 60 });
    }
    const victim = tool(
      132,
      'victim_mem',
      'function run() { const a = []; for (let i = 0; i < 300; i++) a.push(new Uint8Array(100000)); return a.length; }',
      ALL,
      { execution: { timeoutMs: 5000 } },
    );
    for (let i = 0; i < 3; i++) expect(invoke(victim)).toMatchObject({ status: 'SUCCEEDED', output: 300 });
  });

  it('sandboxRetainedBytesMax: pins under it keep the warm context, pins over it free the runtime; programs without a # are never measured', async () => {
    const PIN =
      'function run() { class K extends (function (o) { return o; }) { #x = new Uint8Array(100000); } new K(globalThis); return 1; }';
    for (const [limit, idleAfter] of [
      [1_000_000, 1],
      [50_000, 0],
    ] as const) {
      engine = await newEngine({ limits: { sandboxRetainedBytesMax: limit } });
      const pin = tool(150, 'pin_100k', PIN);
      expect(invoke(pin).output).toBe(1);
      expect(engine.stats().idleSandboxContexts, `sandboxRetainedBytesMax ${limit}`).toBe(idleAfter);
      // The next call builds a new runtime when the last was freed, and answers the same.
      expect(invoke(pin).output).toBe(1);
    }
    // Without a # the same allocation is garbage after the call, and nothing is measured or freed.
    const plain = tool(151, 'plain_100k', 'function run() { const a = new Uint8Array(100000); return a.length; }');
    expect(invoke(plain).output).toBe(100000);
    expect(engine.stats().idleSandboxContexts).toBe(1);
  });

  it('invoke() is not a global: a program cannot skip the reseed and read the random state the previous caller left (H5)', () => {
    mallory();
    client('alice', ALL);
    const pick = tool(140, 'pick', 'function run(e) { return [Math.random(), Math.random(), Math.random()]; }');
    const spy = tool(
      141,
      'm_spy',
      "function run() { const inv = typeof __tally_invoke; let r; try { __tally_invoke(function () { return 0; }, ''); r = 'called'; } catch (e) { r = e.name; } return { inv, r, next: Math.random() }; }",
      [],
      {},
      'mallory',
    );
    const first = invoke(pick, { pin: '4711' }, 'alice').output;
    const seen = invoke(spy, {}, 'mallory').output;
    expect(seen.inv).toBe('undefined');
    expect(seen.r).toBe('ReferenceError');
    expect(first).not.toContain(seen.next);
  });
});

describe('programs cannot compute wrong money silently', () => {
  it('decimal and money refuse implicit conversion (+, *, >, ==) with a hint naming the method; text still prints', () => {
    const maths = tool(
      50,
      'implicit',
      `function run(e) {
  const attempt = (f) => { try { return f(); } catch (err) { return err.name + ': ' + err.message; } };
  return {
    times: attempt(() => money('100', 'USD') * 2),
    plusNumber: attempt(() => decimal('1.5') + 1),
    greater: attempt(() => decimal('10') > decimal('9')),
    looseEq: attempt(() => decimal('1') == 1),
    number: attempt(() => Number(decimal('2'))),
    template: \`\${decimal('1.50')} and \${money('2', 'EUR')}\`,
    string: String(decimal('0.10')),
    json: JSON.stringify({ d: decimal('3.0'), m: money('4.5', 'USD') }),
  };
}`,
    );
    const out = invoke(maths).output;
    for (const key of ['times', 'plusNumber', 'greater', 'looseEq', 'number']) {
      expect(out[key], key).toMatch(/^TypeError: (decimal|money) .* cannot be used with \+ - \* \/ < > ==/);
      expect(out[key], key).toMatch(/\.times\(|\.plus\(/);
    }
    expect(out.template).toBe('1.50 and 2 EUR');
    expect(out.string).toBe('0.10');
    expect(out.json).toBe('{"d":"3.0","m":{"units":"4.5","currency":"USD"}}');
  });

  it('decimal.Round(x, "half_even", 2) and the other static forms mirror the CEL library, and agree with cel()', () => {
    const forms = tool(
      51,
      'static_forms',
      `function run() {
  const r = {
    round: decimal.Round('2.345', 'half_even', 2), roundUp: decimal.Round(decimal('2.345'), 'half_up', 2),
    add: decimal.Add('0.1', '0.2'), sub: decimal.Sub('1', '0.25'), mul: decimal.Mul('19.99', '3'), quo: decimal.Quo('10', '3', 4),
    abs: decimal.Abs('-1.5'), neg: decimal.Neg('1.5'), ceil: decimal.Ceil('1.2'), floor: decimal.Floor('-1.2'), cmp: decimal.Cmp('1', '2'), reduce: decimal.Reduce('1.500'),
    madd: money.Add(money('1.10', 'USD'), money('2', 'USD')), msub: money.Sub(money('5', 'USD'), money('0.5', 'USD')), mmul: money.Mul(money('2.50', 'USD'), '3'),
  };
  const viaCel = cel('[decimal.Round(decimal("2.345"), "half_even", 2), decimal.Quo(decimal("10"), decimal("3"), 4), decimal.Reduce(decimal("1.500")), decimal.Floor(decimal("-1.2"))]');
  return { r: JSON.parse(JSON.stringify(r)), viaCel };
}`,
    );
    const out = invoke(forms).output;
    expect(out.r).toEqual({
      round: '2.34',
      roundUp: '2.35',
      add: '0.3',
      sub: '0.75',
      mul: '59.97',
      quo: '3.3333',
      abs: '1.5',
      neg: '-1.5',
      ceil: '2',
      floor: '-2',
      cmp: -1,
      reduce: '1.5',
      madd: { units: '3.10', currency: 'USD' },
      msub: { units: '4.5', currency: 'USD' },
      mmul: { units: '7.50', currency: 'USD' },
    });
    expect(out.viaCel.map(String)).toEqual([out.r.round, out.r.quo, out.r.reduce, out.r.floor]);
  });

  it('NaN, Infinity, undefined, functions and BigInts inside an output are a SCRIPT_ERROR naming the path, not a silent null', () => {
    const cases: Array<[string, string]> = [
      ['{ total: 0 / 0 }', 'the output.total is NaN'],
      ['{ lines: [{ amount: 1 / 0 }] }', 'the output.lines[0].amount is Infinity'],
      ['{ fee: undefined }', 'the output.fee is undefined'],
      ['[1, undefined]', 'the output[1] is undefined'],
      ['{ f: () => 1 }', 'the output.f is a function'],
      ['{ n: 10n }', 'the output.n is a BigInt'],
    ];
    let n = 60;
    for (const [value, message] of cases) {
      const result = invoke(tool(n, `bad_output_${n++}`, `function run() { return ${value}; }`));
      expect(result.status, value).toBe('FAILED');
      expect(result.error.code, value).toBe('SCRIPT_ERROR');
      expect(result.error.message, value).toContain(message);
    }
    // A program that returns nothing still returns null: undefined at the top is "no output".
    expect(invoke(tool(n++, 'no_return', 'function run() { }')).output).toBeNull();
    // The values a program sends out are checked the same way: NaN never reaches a variable as null.
    const sends = invoke(
      tool(
        n++,
        'sends_nan',
        `function run() { try { graphql('{ journal { name } }', { x: 0 / 0 }); return 'sent'; } catch (e) { return e.message; } }`,
      ),
    );
    expect(sends.output).toContain('variables.x is NaN');
  });

  it('a reference input that reads session.* is refused when the action is created (T48)', () => {
    tool(70, 'open_case', 'function run(e) { return e.data; }');
    const refused = fails(engine, CREATE, {
      id: id(71),
      input: {
        name: 'lock_account',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() { return 1; }' },
        tools: [{ name: 'open_case', input: { account_id: 'string(session.input.account_id)' } }],
      },
    });
    expect(refused.code).toBe('BAD_REQUEST');
    expect(refused.message).toContain('tools[0].input.account_id reads session');
    expect(refused.hint).toContain('event, tool.input and execution.input');
    expect(
      ok(engine, '{ actions { actions(first: 10) { nodes { name } } } }').actions.actions.nodes.map(
        (a: { name: string }) => a.name,
      ),
    ).toEqual(['open_case']);
  });
});

describe('one tool cannot hold the process or the write lock for long', () => {
  it('execution.timeoutMs above toolTimeoutMsMax (750 ms by default on SQLite, 30 s on PostgreSQL) is refused when the tool is created', () => {
    const max = engine.limits.toolTimeoutMsMax;
    expect(max).toBe(ON_POSTGRES ? 30_000 : 750);
    const refused = fails(engine, CREATE, {
      id: id(80),
      input: {
        name: 'spin',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() { for (;;) {} }' },
        execution: { timeoutMs: max + 1 },
      },
    });
    expect(refused.code).toBe('LIMIT_EXCEEDED');
    expect(refused.message).toContain(`execution.timeoutMs ${max + 1} is over its maximum ${max}`);
  });

  it('every call of one request shares requestDeadlineMs: many short tools in one document cannot add up past it', async () => {
    engine = await newEngine({ limits: { toolTimeoutMs: 1000, requestDeadlineMs: 400 } });
    const busy = tool(
      81,
      'busy',
      'function run() { const end = Date.now() + 150; while (Date.now() < end) {} return 1; }',
    );
    const one = (n: number) =>
      `i${n}: invokeAction(id: "${busy}", input: {executionId: "${id(970_000 + n)}", actionVersion: 1, input: {}}) { status }`;
    // Alone, each finishes well inside its own 1 s timeout.
    expect(ok(engine, `mutation { actions { ${one(1)} } }`).actions.i1.status).toBe('SUCCEEDED');
    const refused = fails(engine, `mutation { actions { ${[2, 3, 4, 5, 6].map(one).join(' ')} } }`);
    expect(refused.code).toBe('TIMEOUT');
    expect(refused.message).toContain("ran past requestDeadlineMs (400 ms, the request's deadline");
    expect(refused.hint).toContain('startAction');
  });
});
