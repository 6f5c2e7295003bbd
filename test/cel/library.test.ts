import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cel } from '../../src/cel/cel.js';
import { celFunctions, placement, programLibrary } from '../../src/cel/library.js';
import { ManualClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { id, newEngine, ok } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

/**
 * The CEL library in a program (issue 36 item 2, audit row T11): every function the tran codes'
 * CEL has is callable directly in a tool program, and is the CEL function itself (src/cel/library.ts
 * reads the table off the engine's environment; the guest's wrappers call it through one door).
 */

const NOW = new Date('2026-03-14T15:09:26.535Z');
/** The engine's CEL environment, as the engine makes it. */
const ENV = new Cel(new ManualClock(NOW), { celExpressionLengthMax: 4096, celCacheMax: 100 }).env;
let engine: Engine;
let seq = 0;
const ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const INVOKE = `mutation($id: UUID!, $e: UUID!, $input: JSON) { actions { invokeAction(id: $id, input: {executionId: $e, actionVersion: 1, input: $input}) {
  status output error { code message hint } children { actionName status } } } }`;

const ROOMY = {
  toolTimeoutMs: 10_000,
  toolTimeoutMsMax: 10_000,
  requestDeadlineMs: 20_000,
  operatorDeadlineMs: 20_000,
};

beforeAll(async () => {
  // Room for the walk's 160 calls in one tool call on a busy machine (the bounds are not what it tests).
  engine = await newEngine({ clock: new ManualClock(NOW), limits: ROOMY });
});
afterAll(() => engine.close());

/** Create a tool with this program and invoke it once. */
function run(src: string, input: unknown = {}) {
  const n = 970_000 + ++seq;
  ok(engine, CREATE, {
    id: id(n),
    input: { name: `lib_${seq}`, kind: 'tool', config: { runtime: 'javascript', src }, policies: ALL },
  });
  return ok(engine, INVOKE, { id: id(n), e: id(980_000 + seq), input }).actions.invokeAction;
}

const T = '"2026-01-31T22:30:15.250Z"';
const NS = '"6ba7b810-9dad-11d1-80b4-00c04fd430c8"';

/**
 * Cases for every program form: the program's call and the CEL expression it must agree with
 * (the same text when CEL and JavaScript spell it alike). A function the environment gains
 * without cases here fails the walk below.
 */
const CASES: Record<string, Array<string | [program: string, cel: string]>> = {
  timestamp: [
    `timestamp(${T})`,
    'timestamp(1700000000)',
    'timestamp("2026-01-31T23:30:15+01:00")',
    'timestamp("not a time")',
  ],
  duration: ['duration("90m")', 'duration("1.5h")', 'duration("-30s")', 'duration("1 hour")'],
  'Timestamp.getDate': [`timestamp(${T}).getDate()`, `timestamp(${T}).getDate("America/New_York")`],
  'Timestamp.getDayOfMonth': [`timestamp(${T}).getDayOfMonth()`, `timestamp(${T}).getDayOfMonth("Asia/Tokyo")`],
  'Timestamp.getDayOfWeek': [`timestamp(${T}).getDayOfWeek()`, `timestamp(${T}).getDayOfWeek("Asia/Tokyo")`],
  'Timestamp.getDayOfYear': [`timestamp(${T}).getDayOfYear()`, `timestamp(${T}).getDayOfYear("+05:30")`],
  'Timestamp.getFullYear': [`timestamp(${T}).getFullYear()`, `timestamp(${T}).getFullYear("Pacific/Kiritimati")`],
  'Timestamp.getHours': [`timestamp(${T}).getHours()`, `timestamp(${T}).getHours("Europe/Zurich")`],
  'Timestamp.getMilliseconds': [`timestamp(${T}).getMilliseconds()`, `timestamp(${T}).getMilliseconds("UTC")`],
  'Timestamp.getMinutes': [`timestamp(${T}).getMinutes()`, `timestamp(${T}).getMinutes("+05:30")`],
  'Timestamp.getMonth': [
    `timestamp(${T}).getMonth()`,
    `timestamp(${T}).getMonth("Asia/Tokyo")`,
    `timestamp(${T}).getMonth("Nowhere/City")`,
  ],
  'Timestamp.getSeconds': [`timestamp(${T}).getSeconds()`, `timestamp(${T}).getSeconds("UTC")`],
  'Timestamp.plus': [[`timestamp(${T}).plus(duration("90m"))`, `timestamp(${T}) + duration("90m")`]],
  'Timestamp.minus': [
    [`timestamp(${T}).minus(duration("36h"))`, `timestamp(${T}) - duration("36h")`],
    [`timestamp(${T}).minus(timestamp("2026-01-01T00:00:00Z"))`, `timestamp(${T}) - timestamp("2026-01-01T00:00:00Z")`],
  ],
  'Timestamp.cmp': [
    [`timestamp(${T}).cmp(time.Now())`, `timestamp(${T}) < time.Now() ? -1 : 1`],
    [`timestamp(${T}).cmp(timestamp(${T}))`, '0'],
  ],
  'Duration.getHours': ['duration("150m").getHours()'],
  'Duration.getMinutes': ['duration("150m").getMinutes()'],
  'Duration.getSeconds': ['duration("150m").getSeconds()'],
  'Duration.getMilliseconds': ['duration("1.5s").getMilliseconds()'],
  'Duration.plus': [['duration("1h").plus(duration("30m"))', 'duration("1h") + duration("30m")']],
  'Duration.minus': [['duration("1h").minus(duration("90m"))', 'duration("1h") - duration("90m")']],
  'Duration.cmp': [
    ['duration("1h").cmp(duration("60m"))', '0'],
    ['duration("1h").cmp(duration("61m"))', '-1'],
  ],
  'decimal.Add': ['decimal.Add(decimal("0.10"), decimal("0.2"))'],
  'decimal.Sub': ['decimal.Sub(decimal("1"), decimal("0.25"))'],
  'decimal.Mul': ['decimal.Mul(decimal("19.99"), decimal("3"))'],
  'decimal.Quo': [
    'decimal.Quo(decimal("10"), decimal("3"), 4)',
    'decimal.Quo(decimal("1"), decimal("1"), 2)',
    'decimal.Quo(decimal("1"), decimal("0"), 2)',
    'decimal.Quo(decimal("1"), decimal("3"), 65)',
  ],
  'decimal.Round': [
    'decimal.Round(decimal("2.345"), "half_even", 2)',
    'decimal.Round(decimal("2.345"), "HALF_UP", 2)',
    'decimal.Round(decimal("2.345"), "sideways", 2)',
  ],
  'decimal.Abs': ['decimal.Abs(decimal("-1.50"))'],
  'decimal.Neg': ['decimal.Neg(decimal("1.5"))'],
  'decimal.Ceil': ['decimal.Ceil(decimal("1.2"))', 'decimal.Ceil(decimal("-1.2"))'],
  'decimal.Floor': ['decimal.Floor(decimal("-1.2"))'],
  'decimal.Cmp': ['decimal.Cmp(decimal("1"), decimal("2"))', 'decimal.Cmp(decimal("2.0"), decimal("2"))'],
  'decimal.Reduce': ['decimal.Reduce(decimal("1.500"))'],
  // The program's Money prints its units at their own scale; CEL's string(money) pads to the
  // currency's minor units: the units are compared (decimal(m) in CEL is the units at their scale).
  'money.Add': [
    [
      'String(money.Add(money("1.10", "USD"), money("2", "USD")).units)',
      'string(decimal(money.Add(money("1.10", "USD"), money("2", "USD"))))',
    ],
    ['money.Add(money("1", "USD"), money("2", "EUR"))', 'money.Add(money("1", "USD"), money("2", "EUR"))'],
  ],
  'money.Sub': [
    [
      'String(money.Sub(money("5", "USD"), money("0.5", "USD")).units)',
      'string(decimal(money.Sub(money("5", "USD"), money("0.5", "USD"))))',
    ],
  ],
  'money.Mul': [
    ['String(money.Mul(money("2.50", "USD"), "3").units)', 'string(decimal(money.Mul(money("2.50", "USD"), "3")))'],
  ],
  uuid: ['uuid("6BA7B810-9DAD-11D1-80B4-00C04FD430C8")', 'uuid("nope")'],
  'uuid.New': [['/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(uuid.New())', 'true']],
  'uuid.NewSHA1': [`uuid.NewSHA1(${NS}, "python.org")`, `uuid.NewSHA1(${NS}, "")`],
  'uuid.NewMD5': [`uuid.NewMD5(${NS}, "python.org")`],
  'date.Today': ['date.Today()'],
  date: [`date(timestamp(${T}))`, 'date("2026-02-28")', 'date("2026-02-30")'],
  'time.Now': ['time.Now()'],
  'strings.ToUpper': ['strings.ToUpper("straße and ÿ")'],
  'strings.ToLower': ['strings.ToLower("ÀBC")'],
  'strings.TrimSpace': ['strings.TrimSpace("  a b \\n")'],
  'strings.Contains': ['strings.Contains("seafood", "foo")', 'strings.Contains("seafood", "")'],
  'strings.HasPrefix': ['strings.HasPrefix("golang", "go")'],
  'strings.HasSuffix': ['strings.HasSuffix("golang", "go")'],
  'strings.ReplaceAll': ['strings.ReplaceAll("oink oink", "k", "ky")', 'strings.ReplaceAll("abc", "", "-")'],
};

describe('every CEL library function is in a program, as CEL has it', () => {
  it('places every function the environment registers: a program form, or named as JavaScript’s own', () => {
    const unplaced = celFunctions(ENV)
      .filter((fn) => placement(ENV, fn) === undefined)
      .map((fn) => fn.signature);
    expect(unplaced).toEqual([]);
  });

  it('gives the same answer as cel() for every program form, on every case (the names read off the environment)', () => {
    const names = [...programLibrary(ENV).keys()];
    expect(names.filter((name) => !Object.hasOwn(CASES, name))).toEqual([]);
    expect(Object.keys(CASES).filter((name) => !names.includes(name))).toEqual([]);
    const cases = names.flatMap((name) =>
      CASES[name]!.map((c) => ({
        name,
        program: typeof c === 'string' ? c : c[0],
        cel: typeof c === 'string' ? c : c[1],
      })),
    );
    const src = `function run() {
  const attempt = (f) => { try { return { value: f() }; } catch (e) { return { error: String(e && e.code || e && e.name) }; } };
  return [${cases.map((c) => `[attempt(() => ${c.program}), attempt(() => cel(${JSON.stringify(c.cel)}))]`).join(',\n')}];
}`;
    const result = run(src);
    expect(result.status, JSON.stringify(result.error)).toBe('SUCCEEDED');
    const disagreements: string[] = [];
    cases.forEach((c, i) => {
      const [program, viaCel] = result.output[i];
      if (JSON.stringify(program) !== JSON.stringify(viaCel))
        disagreements.push(`${c.program}: ${JSON.stringify(program)} ≠ cel ${JSON.stringify(viaCel)}`);
    });
    expect(disagreements).toEqual([]);
    // The cases mean something: most answer, and a few fail as CEL fails them.
    const outputs = result.output as Array<[{ value?: unknown; error?: string }]>;
    expect(outputs.filter(([p]) => 'value' in p).length).toBeGreaterThan(60);
    expect(outputs.filter(([p]) => p.error === 'CEL_ERROR').length).toBeGreaterThanOrEqual(6);
  });
});

describe('a program using the CEL library, as a user writes it (GraphQL over HTTP)', () => {
  it('names an order with uuid.NewSHA1, dates it, adds a duration, upper-cases tags, and stores timestamps as cel() returns them', async () => {
    const server = await startServer('tly_cel-library-admin-key', { clock: new ManualClock(NOW), limits: ROOMY });
    try {
      const post = (query: string, variables: Record<string, unknown>) =>
        fetch(server.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: 'Bearer tly_cel-library-admin-key' },
          body: JSON.stringify({ query, variables }),
        }).then((r) => r.json() as Promise<any>);
      const src = `function run(event) {
  const d = event.data;
  const ref = uuid.NewSHA1(${NS}, d.order);
  const placed = timestamp(d.placed_at);
  const due = placed.plus(duration("72h"));
  const tags = d.tags.map((t) => strings.TrimSpace(strings.ToUpper(t))).filter((t) => strings.HasPrefix(t, "VIP"));
  const created = graphql(
    "mutation($id: UUID!, $m: JSON) { createAccount(input: {accountId: $id, name: \\"order\\", code: \\"ORDER.1\\", normalBalanceType: DEBIT, metadata: $m}) { metadata } }",
    { id: ref, m: { due, placed_on: date(placed), tags } },
  );
  return {
    ref, day: date(placed), due, late: time.Now().cmp(due) > 0, waited: time.Now().minus(placed),
    year: placed.getFullYear(), month: placed.getMonth(), text: \`due \${due}\`,
    share: decimal.Quo(decimal("10"), decimal("4"), 2), stored: created.createAccount.metadata,
    viaCel: cel("uuid.NewSHA1(ns, order)", { ns: ${NS}, order: d.order }),
  };
}`;
      const created = await post(CREATE, {
        id: id(990_001),
        input: { name: 'place_order', kind: 'tool', config: { runtime: 'javascript', src }, policies: ALL },
      });
      expect(created.errors).toBeUndefined();
      const answer = await post(INVOKE, {
        id: id(990_001),
        e: id(990_002),
        input: { order: 'A-1001', placed_at: '2026-03-10T09:00:00Z', tags: [' vip-gold', 'new ', 'vip'] },
      });
      expect(answer.errors).toBeUndefined();
      const call = answer.data.actions.invokeAction;
      expect(call.status, JSON.stringify(call.error)).toBe('SUCCEEDED');
      expect(call.output).toEqual({
        ref: call.output.viaCel,
        day: '2026-03-10',
        due: '2026-03-13T09:00:00.000Z',
        late: true,
        waited: '367766.535s',
        year: 2026,
        month: 2,
        text: 'due 2026-03-13T09:00:00.000Z',
        share: '2.50',
        stored: { due: '2026-03-13T09:00:00.000Z', placed_on: '2026-03-10', tags: ['VIP-GOLD', 'VIP'] },
        viaCel: call.output.ref,
      });
      expect(call.output.ref).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-5/);
      // A library function is no call: the tree has the graphql() and the cel() call only.
      expect(call.children.map((c: { actionName: string }) => c.actionName)).toEqual(['graphql', 'cel']);
    } finally {
      await server.stop();
    }
  });

  it('decimal.Quo takes what CEL takes (places an int, a number or a BigInt), and without places says so as CEL does', () => {
    const result = run(`function run() {
  const a = decimal("1"), b = decimal("3");
  let missing;
  try { decimal.Quo(a, b); } catch (e) { missing = { name: e.name, code: e.code, message: e.message, hint: e.hint }; }
  return { two: decimal.Quo(a, b, 2), big: decimal.Quo("1", "3", 4n), cel: cel("decimal.Quo(decimal('1'), decimal('3'), uint(2))"), missing };
}`);
    expect(result.status, JSON.stringify(result.error)).toBe('SUCCEEDED');
    expect(result.output).toEqual({
      two: '0.33',
      big: '0.3333',
      cel: '0.33',
      missing: {
        name: 'ToolError',
        code: 'CEL_ERROR',
        message: 'decimal.Quo takes 3 arguments, got 2',
        hint: 'As in CEL: decimal.Quo(Decimal, Decimal, int); decimal.Quo(Decimal, Decimal, uint).',
      },
    });
  });
});
