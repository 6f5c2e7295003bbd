import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Cel } from '../../src/cel/cel.js';
import { jsonToCel } from '../../src/cel/values.js';
import { systemClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { EngineError } from '../../src/errors.js';
import { DEFAULT_LIMITS } from '../../src/limits.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';
import { createAccount, createTransferCode } from '../helpers/ledger.js';
import { startServer } from '../helpers/server.js';

/**
 * Finding F6 of the hostile review (case 6): CEL had no step budget (a nested macro over a
 * 1,000-element list ran n³ steps while holding the write lock), `matches` ran on JavaScript's
 * backtracking RegExp, and Mutation.evaluate had no policy check. Each case below hung or was
 * allowed before.
 */

const N3 = 'document.all(a, document.all(b, document.all(c, a + b + c >= 0)))';
const THOUSAND = [...Array(1000).keys()];
const EVALUATE =
  'mutation($e: Expression, $x: JSON, $d: JSON) { evaluate(expression: $e, expressions: $x, document: $d) }';

function newCel(limits: { celCostMax?: number; regexSizeMax?: number } = {}): Cel {
  return new Cel(systemClock, { celExpressionLengthMax: 4096, celCacheMax: 1000, ...limits });
}

/** Evaluate and return the EngineError it fails with (or fail the test). */
function refusal(cel: Cel, expression: string, document: unknown = null): EngineError {
  try {
    const value = cel.evaluate(expression, { document: jsonToCel(document) });
    throw new Error(`expected ${expression} to fail, got ${String(value)}`);
  } catch (error) {
    if (!(error instanceof EngineError)) throw error;
    return error;
  }
}

describe('every CEL evaluation has a cost budget (celCostMax)', () => {
  it("stops the review's document (three nested all() over 1,000 elements, 10⁹ steps) with LIMIT_EXCEEDED naming the cost, the limit and a hint", () => {
    const error = refusal(newCel(), N3, THOUSAND);
    expect(error.code).toBe('LIMIT_EXCEEDED');
    expect(error.message).toContain(`costs more than celCostMax (${DEFAULT_LIMITS.celCostMax})`);
    expect(error.details).toMatchObject({ expression: N3, celCostMax: DEFAULT_LIMITS.celCostMax });
    expect((error.details as { cost: number }).cost).toBeGreaterThan(DEFAULT_LIMITS.celCostMax);
    expect(error.hint).toMatch(/nest/);
  });

  const bigMap = Object.fromEntries([...Array(30_000).keys()].map((i) => [`k${i}`, i]));
  const doubling =
    "cel.bind(a, 'xxxxxxxxxxxxxxxx' + 'xxxxxxxxxxxxxxxx', cel.bind(b, a + a, cel.bind(c, b + b, cel.bind(d, c + c, cel.bind(e, d + d, cel.bind(f, e + e, cel.bind(g, f + f, cel.bind(h, g + g, document.all(x, document.all(y, size(h) > 0))))))))))";
  it.each([
    ['nested exists', 'document.exists(a, document.exists(b, document.exists(c, a + b + c < 0)))', THOUSAND],
    ['nested map', 'document.map(a, document.map(b, document.map(c, a + b + c))).size() > 0', THOUSAND],
    [
      'nested filter and exists_one',
      'document.filter(a, document.filter(b, document.exists_one(c, a + b == c)).size() > 0).size() > 0',
      THOUSAND,
    ],
    ['a string doubled by cel.bind, then read in a loop', doubling, THOUSAND],
    ['size() of the input in a nested loop', 'document.all(a, document.all(b, size(document) > 0))', THOUSAND],
    [
      'a list doubled by concatenation',
      'cel.bind(a, document + document, cel.bind(b, a + a, cel.bind(c, b + b, cel.bind(d, c + c, cel.bind(e, d + d, cel.bind(f, e + e, cel.bind(g, f + f, cel.bind(h, g + g, cel.bind(i, h + h, cel.bind(j, i + i, size(j) > 0))))))))))',
      THOUSAND,
    ],
    ['macros over a map of 30,000 keys', "document.exists(k, document.exists(j, j == 'none'))", bigMap],
    ['size() of a map of 30,000 keys in a loop', "document.all(k, size(document) > 0 && k != '')", bigMap],
    ['deep equality of big maps in a loop', 'document.all(k, document == document)', bigMap],
    ['an error swallowed by || true', `(${N3}) || true`, THOUSAND],
    ['an error swallowed by an outer exists', `[1, 2].exists(x, ${N3}) || [true].all(y, y)`, THOUSAND],
  ])('stops %s with LIMIT_EXCEEDED', (_, expression, document) => {
    expect(refusal(newCel(), expression, document).code).toBe('LIMIT_EXCEEDED');
  });

  it('ordinary expressions cost little; celCostMax is configurable, and an evaluation just over it is refused', () => {
    // document.all(x, x >= 0) over n elements costs 2 + 6n: the list (n), and per element the step,
    // the comparison and its two operands, and the quantifier's branch.
    const cel = newCel({ celCostMax: 62 });
    const params = { amount: '10.25', currency: 'USD', tags: ['a', 'b', 'c'] };
    expect(
      cel.evaluate(
        "decimal(params.amount) > decimal('5') && params.currency == 'USD' && params.tags.all(t, t.size() == 1)",
        { params: jsonToCel(params) },
      ),
    ).toBe(true);
    expect(cel.evaluate('document.all(x, x >= 0)', { document: jsonToCel(THOUSAND.slice(0, 10)) })).toBe(true);
    const error = refusal(cel, 'document.all(x, x >= 0)', THOUSAND.slice(0, 11));
    expect(error.code).toBe('LIMIT_EXCEEDED');
    expect(error.message).toBe(
      'CEL "document.all(x, x >= 0)" costs more than celCostMax (62): stopped at a cost of 63',
    );
    expect(
      newCel({ celCostMax: 68 }).evaluate('document.all(x, x >= 0)', { document: jsonToCel(THOUSAND.slice(0, 11)) }),
    ).toBe(true);
  });

  it('values are charged by size: a result larger than the budget is refused before it is converted', () => {
    // A value built by sharing ([a, a]) doubles at each step for almost no work; its deep size is charged.
    const dag =
      'cel.bind(a, [document, document], cel.bind(b, [a, a], cel.bind(c, [b, b], cel.bind(d, [c, c], cel.bind(e, [d, d], cel.bind(f, [e, e], cel.bind(g, [f, f], cel.bind(h, [g, g], cel.bind(i, [h, h], [i, i])))))))))';
    expect(refusal(newCel(), dag, THOUSAND).code).toBe('LIMIT_EXCEEDED');
  });
});

describe('a field path is read directly, exactly as the evaluator would', () => {
  // `a.b.c` takes the direct read (Cel.compile's select); `true ? a.b.c : null` is the same read
  // through the evaluator, charged two units more (the `true` and the branch's root, which the
  // conditional runs) and the branch's value once more (a string by length, a list by size).
  const shapes: Array<[string, () => Record<string, unknown>]> = [
    ['a string', () => ({ a: { b: { c: 'x' } } })],
    ['a long string (charged by length)', () => ({ a: { b: { c: 'x'.repeat(100) } } })],
    ['null', () => ({ a: { b: { c: null } } })],
    ['a boolean', () => ({ a: { b: { c: true } } })],
    ['a number', () => ({ a: { b: { c: 1.5 } } })],
    ['a list', () => ({ a: { b: { c: [1, 2, 3] } } })],
    ['a missing key', () => ({ a: { b: {} } })],
    ['an undefined value', () => ({ a: { b: { c: undefined } } })],
    ['a Map on the way', () => ({ a: { b: new Map([['c', 'm']]) } })],
    ['an object without a prototype', () => ({ a: { b: Object.assign(Object.create(null), { c: 'n' }) } })],
    ['an own constructor key', () => ({ a: { b: { constructor: 'x', c: 'y' } } })],
    ['an inherited key', () => ({ a: { b: Object.create({ c: 'inherited' }) } })],
    ['a getter', () => ({ a: { b: Object.defineProperty({}, 'c', { get: () => 'got', enumerable: true }) } })],
    ['a string on the way', () => ({ a: { b: 'text' } })],
    ['no variable', () => ({})],
  ];
  const outcome = (cel: Cel, expression: string, context: Record<string, unknown>) => {
    try {
      return { value: cel.evaluate(expression, context) };
    } catch (error) {
      return { code: (error as EngineError).code };
    }
  };
  /** The least budget the evaluation succeeds within (null: it fails within 200 units too). */
  const cost = (cel: Cel, expression: string, context: Record<string, unknown>) => {
    for (let budget = 1; budget <= 200; budget++) {
      try {
        cel.scope('cost', () => cel.evaluate(expression, context), budget);
        return budget;
      } catch {
        // over this budget, or failing anyway
      }
    }
    return null;
  };

  it.each(shapes)('%s: same value or error, same cost', (_, context) => {
    const cel = newCel();
    const direct = outcome(cel, 'a.b.c', context());
    expect(direct).toEqual(outcome(cel, 'true ? a.b.c : null', context()));
    const directCost = cost(cel, 'a.b.c', context());
    const evaluatedCost = cost(cel, 'true ? a.b.c : null', context());
    const value = 'value' in direct ? direct.value : undefined;
    const valueCharge =
      typeof value === 'string' ? Math.floor(value.length / 16) : Array.isArray(value) ? value.length : 0;
    expect(directCost === null ? null : directCost + 2 + valueCharge).toBe(evaluatedCost);
  });

  it('a direct read is charged against the budget: over it, LIMIT_EXCEEDED', () => {
    const context = { context: { vars: { entry: { layer: 'SETTLED' } } } };
    expect(newCel({ celCostMax: 3 }).evaluate('context.vars.entry.layer', context)).toBe('SETTLED');
    expect(() => newCel({ celCostMax: 2 }).evaluate('context.vars.entry.layer', context)).toThrow(/celCostMax/);
  });
});

describe('regular expressions run on RE2', () => {
  it("matches is linear: ^(a+)+$ against 'a' × 40 + '!' (2⁴⁰ backtracking steps) and against 100,000 a's answers false", () => {
    const cel = newCel();
    expect(cel.evaluate("document.matches('^(a+)+$')", { document: `${'a'.repeat(40)}!` })).toBe(false);
    expect(cel.evaluate("document.matches('^(a+)+$')", { document: `${'a'.repeat(100_000)}!` })).toBe(false);
    expect(cel.evaluate("document.matches('^[A-Z]{3}$') && !'usd'.matches('^[A-Z]{3}$')", { document: 'USD' })).toBe(
      true,
    );
    // A pattern computed at run time runs on RE2 too.
    expect(
      cel.evaluate('document.x.matches(document.p)', {
        document: jsonToCel({ x: `${'a'.repeat(40)}!`, p: '^(a+)+$' }),
      }),
    ).toBe(false);
  });

  it('backreferences and lookaround are refused when the expression is compiled, naming the pattern and its position', () => {
    const cel = newCel();
    for (const [pattern, what] of [
      ['(a)\\\\1', 'invalid escape sequence'],
      ['(?=a)b', 'Perl syntax'],
      ['(?<=a)b', ''],
      ['(?!a)b', 'Perl syntax'],
    ] as const) {
      let error: EngineError | undefined;
      try {
        cel.compile(`document.matches('${pattern}')`);
      } catch (e) {
        error = e as EngineError;
      }
      expect(error?.code).toBe('CEL_ERROR');
      expect(error?.message).toContain(
        `the pattern "${pattern.replace('\\\\', '\\\\')}" is not an RE2 regular expression`,
      );
      expect(error?.message).toContain(what);
      expect(error?.message).toContain('(at position 18)');
      expect(error?.hint).toMatch(/backreferences.*lookaround/);
    }
    // A pattern only known at run time fails when it is used.
    expect(refusal(cel, 'document.x.matches(document.p)', { x: 'aa', p: '(a)\\1' }).message).toContain(
      'the pattern "(a)\\\\1" is not an RE2 regular expression',
    );
  });

  it('regexSizeMax refuses a short pattern whose repetitions expand too far, before compiling it', async () => {
    const { compileRegex, estimateRegexSize } = await import('../../src/cel/regex.js');
    expect(estimateRegexSize('^[A-Z]{3}$')).toBeLessThan(20);
    expect(estimateRegexSize('(?:.{1000}){4}')).toBeGreaterThan(DEFAULT_LIMITS.regexSizeMax);
    expect(() => compileRegex('.{1000}.{1000}.{1000}', DEFAULT_LIMITS.regexSizeMax)).toThrow(
      /is too large: about 6001 instructions .* regexSizeMax is 5000/,
    );
    const small = newCel({ regexSizeMax: 20 });
    expect(() => small.compile("document.matches('^[0-9a-f]{8}-[0-9a-f]{4}$')")).toThrow(
      /about 28 instructions .* regexSizeMax is 20/,
    );
    expect(small.evaluate("document.matches('^[a-f]{3}$')", { document: 'abc' })).toBe(true);
    expect(refusal(small, "document.matches('^[a-f]{' + '12}$')", 'x').message).toContain(
      'about 27 instructions once its repetitions are expanded; regexSizeMax is 20',
    );
    expect(newCel().evaluate("document.matches('^[0-9a-f]{8}-[0-9a-f]{4}$')", { document: 'deadbeef-0123' })).toBe(
      true,
    );
  });

  it('a regex match is charged: text length × pattern size', () => {
    const cel = newCel({ celCostMax: 10_000 });
    expect(cel.evaluate("document.matches('^[a-z]+$')", { document: 'a'.repeat(1000) })).toBe(true);
    expect(refusal(cel, "document.matches('^[a-z]{1,100}$')", 'a'.repeat(1000)).code).toBe('LIMIT_EXCEEDED');
  });
});

describe('where CEL runs, through GraphQL', () => {
  let engine: Engine;
  let seq = 0;
  const eid = () => id(880_000 + ++seq);
  const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
  const INVOKE = `mutation($id: UUID, $name: String, $input: InvokeInput!) { actions { invokeAction(id: $id, name: $name, input: $input) { status output error { code message } } } }`;
  const ALLOW_ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
  const CEL_TOOL = {
    effect: 'ALLOW',
    actions: ['INSERT'],
    resources: ['actions.Execution'],
    assertions: { cel: "context.document.action == 'cel'" },
  };

  beforeEach(async () => {
    engine = await newEngine({ limits: { toolTimeoutMs: 2000 } });
  });
  afterEach(() => engine.close());

  const tool = (n: number, name: string, src: string, extra: Record<string, unknown> = {}) =>
    ok(engine, CREATE, {
      id: id(n),
      input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies: ALLOW_ALL, ...extra },
    });
  const client = (principal: string, policies: unknown[]) =>
    ok(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', {
      i: { principal, name: principal, policies },
    });

  it("errors a macro swallows are charged what they cost, and triggers share one budget per change: a trigger author cannot stall or fail others' postings (second review H3)", () => {
    const L = '[0,1,2,3,4,5,6,7,8,9]';
    const nest = (k: number, leaf: string) => {
      let e = leaf;
      for (let i = k - 1; i >= 0; i--) e = `${L}.all(v${i}, ${e})`;
      return e;
    };
    client('repl', [CEL_TOOL]);
    let started = Date.now();
    const refused = engine.graphql(EVALUATE, { e: nest(6, 'A') }, { principal: 'repl' });
    expect(refused.errors?.[0]?.extensions?.code).toBe('LIMIT_EXCEEDED');
    expect(Date.now() - started).toBeLessThan(1000);
    createAccount(engine, 1);
    createAccount(engine, 2);
    createTransferCode(engine);
    client('ops', [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Action', 'actions.Trigger'] }]);
    engine.graphql(
      CREATE,
      {
        id: id(50),
        input: {
          name: 'noop',
          kind: 'tool',
          config: { runtime: 'javascript', src: 'function run() { return 1; }' },
          policies: [],
        },
      },
      { principal: 'ops' },
    );
    for (let i = 0; i < 3; i++) {
      const made = engine.graphql(
        'mutation($i: TriggerInput!) { actions { createTrigger(input: $i) { triggerId } } }',
        {
          i: {
            triggerId: id(200 + i),
            name: `t${i}`,
            on: ['transaction.inserted'],
            filter: `${nest(6, 'A')} && false`,
            action: { name: 'noop' },
          },
        },
        { principal: 'ops' },
      );
      expect(made.errors).toBeUndefined();
    }
    started = Date.now();
    const posted = engine.graphql(
      `mutation { postTransaction(input: {transactionId: "${id(300)}", tranCode: "TRANSFER", params: {from: "${id(1)}", to: "${id(2)}", amount: "1"}}) { transactionId } }`,
    );
    expect(posted.errors).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(1000);
    // The filters over the budget are recorded, not silent.
    const failed = ok(engine, '{ actions { executions(first: 10) { nodes { actionName status error { code } } } } }')
      .actions.executions.nodes;
    expect(failed.filter((n: { status: string }) => n.status === 'FAILED').length).toBe(3);
  });

  it('evaluate: the review document is refused with LIMIT_EXCEEDED; a map of expressions shares one budget', () => {
    const refused = fails(engine, EVALUATE, { e: N3, d: THOUSAND });
    expect(refused.code).toBe('LIMIT_EXCEEDED');
    expect(refused.message).toContain('celCostMax');
    // Each of these costs about 0.6 of the budget: alone each passes, together they cross it.
    const heavy = 'document.all(a, document.all(b, a >= 0 && b >= 0))';
    const half = THOUSAND.slice(0, 300);
    expect(ok(engine, EVALUATE, { e: heavy, d: half }).evaluate).toBe(true);
    expect(fails(engine, EVALUATE, { x: { one: heavy, two: heavy }, d: half }).code).toBe('LIMIT_EXCEEDED');
  });

  it('evaluate is guarded like the native cel tool: no policy, no CEL; one policy allows both, and sees the expression', () => {
    client('nobody', []);
    client('calc', [CEL_TOOL]);
    client('short', [
      {
        ...CEL_TOOL,
        assertions: { short: "context.document.action == 'cel' && context.document.input.expression.size() < 10" },
      },
    ]);
    const nobody = engine.graphql(EVALUATE, { e: '1 + 1' }, { principal: 'nobody' });
    expect(nobody.errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
    expect(nobody.errors?.[0]?.message).toContain('INSERT on actions.Execution');
    expect(engine.graphql(EVALUATE, { e: '1 + 1' }, { principal: 'calc' }).data).toEqual({ evaluate: 2 });
    const viaTool = engine.graphql(
      INVOKE,
      { name: 'cel', input: { executionId: eid(), input: { expression: '1 + 1' } } },
      { principal: 'calc' },
    );
    expect((viaTool.data as any).actions.invokeAction).toMatchObject({ status: 'SUCCEEDED', output: 2 });
    // The document has the tool's shape: {action: "cel", input: {expression, bindings: {document}}}.
    expect(engine.graphql(EVALUATE, { e: '1 + 1' }, { principal: 'short' }).data).toEqual({ evaluate: 2 });
    expect(engine.graphql(EVALUATE, { e: '1 + 1 + 1 + 1' }, { principal: 'short' }).errors?.[0]?.extensions?.code).toBe(
      'ACCESS_DENIED',
    );
    expect(engine.graphql(EVALUATE, { x: { a: '1' } }, { principal: 'short' }).errors?.[0]?.extensions?.code).toBe(
      'ACCESS_DENIED',
    );
  });

  it('a policy assertion over the budget does not hold: the ALLOW is skipped (ACCESS_DENIED), at once', () => {
    client('looper', [
      {
        ...CEL_TOOL,
        assertions: {
          heavy:
            'context.document.input.bindings.xs.all(a, context.document.input.bindings.xs.all(b, context.document.input.bindings.xs.all(c, a + b + c >= 0)))',
        },
      },
    ]);
    const result = engine.graphql(
      INVOKE,
      { name: 'cel', input: { executionId: eid(), input: { expression: '1', bindings: { xs: THOUSAND } } } },
      { principal: 'looper' },
    );
    expect(result.errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
  });

  it('a tran code template over the budget fails the posting and names celCostMax', () => {
    createAccount(engine, 1);
    createAccount(engine, 2);
    ok(engine, `mutation($input: TranCodeInput!) { createTranCode(input: $input) { version } }`, {
      input: {
        tranCodeId: id(9001),
        code: 'LOOPY',
        params: [{ name: 'xs', type: 'JSON' }],
        transaction: {
          effective: "'2026-01-01'",
          description: "params.xs.all(a, params.xs.all(b, params.xs.all(c, a + b + c >= 0))) ? 'ok' : 'no'",
        },
        entries: [
          { accountId: `'${id(1)}'`, units: "decimal('1')", currency: "'USD'", direction: 'DEBIT' },
          { accountId: `'${id(2)}'`, units: "decimal('1')", currency: "'USD'", direction: 'CREDIT' },
        ],
      },
    });
    const refused = fails(engine, `mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }`, {
      i: { transactionId: id(50), tranCode: 'LOOPY', params: { xs: THOUSAND } },
    });
    expect(refused.code).toBe('LIMIT_EXCEEDED');
    expect(refused.message).toContain('transaction.description');
    expect(refused.message).toContain('costs more than celCostMax');
    expect(count(engine, 'transactions')).toBe(0);
  });

  it('a trigger filter over the budget records a FAILED execution and lets the change through', () => {
    createAccount(engine, 1);
    tool(10, 'target', 'function run(e) { return e.data; }');
    ok(
      engine,
      `mutation($f: Expression) { actions { createTrigger(input: {triggerId: "${id(11)}", name: "loopy", on: ["account.updated"], filter: $f, action: {name: "target"}}) { triggerId } } }`,
      {
        f: 'document.metadata.xs.all(a, document.metadata.xs.all(b, document.metadata.xs.all(c, a + b + c >= 0)))',
      },
    );
    ok(engine, `mutation($m: JSON) { updateAccount(id: "${id(1)}", input: {metadata: $m}) { version } }`, {
      m: { xs: THOUSAND },
    });
    const rows = engine.db.prepare('SELECT status, error FROM executions WHERE trigger_id = ?').all(id(11)) as Array<{
      status: string;
      error: string;
    }>;
    expect(rows).toHaveLength(1);
    expect(rows[0]!.status).toBe('FAILED');
    expect(JSON.parse(rows[0]!.error)).toMatchObject({ code: 'LIMIT_EXCEEDED' });
  });

  it("the sandbox's cel() and a tool reference's fixed input run under the budget too", () => {
    tool(
      20,
      'calls_cel',
      `function run(e) { try { return cel(${JSON.stringify(N3)}, { document: e.data.xs }); } catch (err) { return err.code; } }`,
    );
    const viaCel = ok(engine, INVOKE, {
      id: id(20),
      input: { executionId: eid(), actionVersion: 1, input: { xs: THOUSAND } },
    }).actions.invokeAction;
    expect(viaCel).toMatchObject({ status: 'SUCCEEDED', output: 'LIMIT_EXCEEDED' });

    tool(21, 'echo', 'function run(e) { return e.data; }');
    tool(22, 'fixes_input', 'function run(e) { try { return tools.echo({}); } catch (err) { return err.code; } }', {
      tools: [
        {
          name: 'echo',
          input: { ok: 'tool.input.xs.all(a, tool.input.xs.all(b, tool.input.xs.all(c, a + b + c >= 0)))' },
        },
      ],
    });
    const viaReference = ok(engine, INVOKE, {
      id: id(22),
      input: { executionId: eid(), actionVersion: 1, input: { xs: THOUSAND } },
    }).actions.invokeAction;
    expect(JSON.stringify(viaReference)).toContain('LIMIT_EXCEEDED');
  });

  it('a pattern RE2 cannot compile is refused where the expression is created: tran code, policy assertion, trigger filter, tool reference', () => {
    const bad = "params.code.matches('^(a)\\\\1$')";
    const named = 'the pattern "^(a)\\\\1$" is not an RE2 regular expression';
    const tranCode = fails(engine, `mutation($input: TranCodeInput!) { createTranCode(input: $input) { version } }`, {
      input: {
        tranCodeId: id(9002),
        code: 'BAD',
        params: [{ name: 'code', type: 'STRING' }],
        transaction: { description: bad },
        entries: [
          { accountId: `'${id(1)}'`, units: "decimal('1')", currency: "'USD'", direction: 'DEBIT' },
          { accountId: `'${id(2)}'`, units: "decimal('1')", currency: "'USD'", direction: 'CREDIT' },
        ],
      },
    });
    expect(tranCode.code).toBe('TRAN_CODE_ERROR');
    expect(tranCode.message).toContain(named);
    const policy = fails(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', {
      i: {
        principal: 'p',
        name: 'p',
        policies: [
          {
            effect: 'ALLOW',
            actions: ['SELECT'],
            resources: ['financial.*'],
            assertions: { a: "context.document.code.matches('(?=x)')" },
          },
        ],
      },
    });
    expect(policy.message).toContain('the pattern "(?=x)" is not an RE2 regular expression');
    tool(40, 'target2', 'function run() { return 1; }');
    const trigger = fails(
      engine,
      `mutation($f: Expression) { actions { createTrigger(input: {triggerId: "${id(41)}", name: "t", on: ["account.inserted"], filter: $f, action: {name: "target2"}}) { triggerId } } }`,
      { f: "document.code.matches('(a)\\\\1')" },
    );
    expect(trigger.message).toContain('is not an RE2 regular expression');
    const reference = fails(engine, CREATE, {
      id: id(42),
      input: {
        name: 'refs',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() { return 1; }' },
        policies: [],
        tools: [{ name: 'target2', input: { x: "tool.input.s.matches('(?<!a)b')" } }],
      },
    });
    expect(reference.message).toContain('the pattern "(?<!a)b" is not an RE2 regular expression');
  });

  it('JSON Schema patterns run on RE2: refused at createAction when RE2 cannot compile them, linear on input', () => {
    for (const schema of [
      { type: 'object', properties: { s: { type: 'string', pattern: '^(a)\\1$' } } },
      { type: 'object', patternProperties: { '^(?!x)': { type: 'string' } } },
    ]) {
      const refused = fails(engine, CREATE, {
        id: id(30),
        input: {
          name: 'bad_schema',
          kind: 'tool',
          config: { runtime: 'javascript', src: 'function run() { return 1; }' },
          policies: [],
          tool: { name: 'bad_schema', inputSchema: schema },
        },
      });
      expect(refused.code).toBe('BAD_REQUEST');
      expect(refused.message).toMatch(/tool.inputSchema: the pattern ".*" is not an RE2 regular expression/);
    }
    tool(31, 'strict', 'function run(e) { return e.data; }', {
      tool: {
        name: 'strict',
        inputSchema: { type: 'object', properties: { s: { type: 'string', pattern: '^(a+)+$' } } },
      },
    });
    const slow = ok(engine, INVOKE, {
      id: id(31),
      input: { executionId: eid(), actionVersion: 1, input: { s: `${'a'.repeat(40)}!` } },
    }).actions.invokeAction;
    expect(slow).toMatchObject({ status: 'FAILED', error: { code: 'INPUT_INVALID' } });
    const fine = ok(engine, INVOKE, {
      id: id(31),
      input: { executionId: eid(), actionVersion: 1, input: { s: 'aaaa' } },
    }).actions.invokeAction;
    expect(fine).toMatchObject({ status: 'SUCCEEDED', output: { s: 'aaaa' } });
  });
});

describe('over HTTP', () => {
  it("while one client sends CEL attacks, another client's read answers in under a second", async () => {
    const server = await startServer('tly_cel-limits-admin-key');
    try {
      const create = (principal: string, policies: unknown[]) =>
        server.engine.graphql('mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', {
          i: { principal, name: principal, policies },
        }).data as any;
      const attacker = create('attacker', [
        {
          effect: 'ALLOW',
          actions: ['INSERT'],
          resources: ['actions.Execution'],
          assertions: { cel: "context.document.action == 'cel'" },
        },
      ]).auth.createClient.apiKey;
      const reader = create('reader', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] }]).auth
        .createClient.apiKey;
      const post = (key: string, body: unknown) =>
        fetch(server.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
          body: JSON.stringify(body),
        }).then((r) => r.json() as Promise<any>);
      const attacks = [
        { query: EVALUATE, variables: { e: N3, d: THOUSAND } },
        { query: EVALUATE, variables: { e: "document.matches('^(a+)+$')", d: `${'a'.repeat(40)}!` } },
        {
          query: EVALUATE,
          variables: { e: 'document.map(a, document.map(b, document.map(c, a + b + c))).size() > 0', d: THOUSAND },
        },
        { query: EVALUATE, variables: { x: { a: N3, b: N3, c: N3 }, d: THOUSAND } },
      ];
      const running = Promise.all(Array.from({ length: 3 }, () => attacks.map((a) => post(attacker, a))).flat());
      const reads: number[] = [];
      for (let i = 0; i < 5; i++) {
        const t0 = performance.now();
        const read = await post(reader, { query: '{ journal { name } }' });
        reads.push(performance.now() - t0);
        expect(read.data.journal.name).toBeTypeOf('string');
      }
      const answers = await running;
      expect(Math.max(...reads)).toBeLessThan(1000);
      expect(answers.map((a) => a.errors?.[0]?.extensions?.code ?? a.data.evaluate)).toEqual(
        Array.from({ length: 3 }, () => ['LIMIT_EXCEEDED', false, 'LIMIT_EXCEEDED', 'LIMIT_EXCEEDED']).flat(),
      );
    } finally {
      await server.stop();
    }
  });
});
