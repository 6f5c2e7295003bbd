import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadQuickJS } from '../../sandbox/module.js';
import { type HostBridge, Sandbox } from '../../sandbox/sandbox.js';
import { Cel } from '../../src/cel/cel.js';
import { callLibrary, programLibraryJson } from '../../src/cel/library.js';
import { systemClock } from '../../src/clock.js';
import {
  addText,
  Dec,
  exactDiv,
  exactMinus,
  exactPlus,
  exactTimes,
  formatDecimal,
  parseDecimal,
  scaleOf,
  subText,
  withScale,
} from '../../src/decimal.js';
import { DEFAULT_LIMITS } from '../../src/limits.js';
import { decAdd } from '../../src/storage/database.js';

/**
 * One set of decimal vectors (test/helpers/decimal-vectors.json, expected values from the
 * generator's own BigInt reference) run against every decimal implementation in the project:
 *
 * - host: src/decimal.ts over decimal.js (parseDecimal, exactPlus/Minus/Times/Div, withScale,
 *   formatDecimal), as the ledger uses it on amounts from the wire;
 * - cel: the CEL library's Decimal (src/cel), which tran codes and cel() use: + - * /, decimal.Quo,
 *   decimal.Round, decimal.Cmp, decimal.Reduce, decimal.Neg, decimal.Abs;
 * - storage: addText and subText, and dec_add (decAdd), which sum balances (their fast path on short
 *   decimals included);
 * - guest: the BigInt decimals of tool programs (sandbox/guest/decimal.js) in a real QuickJS
 *   sandbox, their methods (d.plus(x), d.div(x, places, mode));
 * - program: a tool program's static forms (decimal.Add(a, b), decimal.Quo(a, b, places)), which
 *   are CEL's own functions called through the host's door (src/cel/library.ts), in the same
 *   sandbox: they must take the program's values to CEL and back unchanged.
 *
 * A vector applies to each implementation that has its operation and takes its operands (an
 * implementation's domain is what reaches it: the ledger's amounts for host and storage, 80 digits
 * for CEL, 1,000 for tool programs). Any disagreement with a vector fails the test.
 */

type Op = 'add' | 'sub' | 'mul' | 'div' | 'quo' | 'round' | 'cmp' | 'reduce' | 'neg' | 'abs' | 'parse';
type Expected = { result: string | number } | { error: string };
interface Vector {
  op: Op;
  args: Array<string | number>;
  result?: string | number;
  error?: string;
  /** What one implementation gives instead, by design (the wire refuses what CEL takes). */
  except?: Partial<Record<ImplementationName, Expected>>;
}
type ImplementationName = 'host' | 'cel' | 'storage' | 'guest' | 'program';
type Outcome = { result: string | number } | { error: string };

const { vectors } = JSON.parse(readFileSync(new URL('../helpers/decimal-vectors.json', import.meta.url), 'utf8')) as {
  vectors: Vector[];
};

/** The error each implementation must give, by the reason a vector names. */
const ERRORS: Record<string, RegExp> = {
  syntax: /not a decimal|must be a decimal|not a finite/,
  digits: /digits/,
  inexact: /no exact decimal value/,
  'division by zero': /division by zero/,
};

function expectedFor(vector: Vector, name: ImplementationName): Expected {
  const special = vector.except?.[name];
  if (special) return special;
  return vector.error !== undefined ? { error: vector.error } : { result: vector.result! };
}

/** Integer digits (leading zeros aside) and fraction digits of a decimal text. */
function digitsOf(text: string): { int: number; frac: number } {
  const match = /^[+-]?(\d+)(?:\.(\d+))?$/.exec(text);
  if (!match) return { int: Number.POSITIVE_INFINITY, frac: Number.POSITIVE_INFINITY };
  return { int: match[1]!.replace(/^0+(?=\d)/, '').length, frac: (match[2] ?? '').length };
}
const decimalArgs = (vector: Vector): string[] =>
  vector.args.filter(
    (arg, i): arg is string =>
      typeof arg === 'string' && !(vector.op === 'quo' && i === 3) && !(vector.op === 'round' && i === 2),
  );

/** Amounts as the ledger takes them: within decimalIntegerDigitsMax and decimalFractionDigitsMax. */
const BOUNDS = {
  decimalIntegerDigitsMax: DEFAULT_LIMITS.decimalIntegerDigitsMax,
  decimalFractionDigitsMax: DEFAULT_LIMITS.decimalFractionDigitsMax,
};
function isAmount(text: string): boolean {
  const { int, frac } = digitsOf(text);
  return int <= BOUNDS.decimalIntegerDigitsMax && frac <= BOUNDS.decimalFractionDigitsMax;
}
/** As the ledger writes amounts and balances (withScale): no sign on zero, no leading zeros. */
function isWritten(text: string): boolean {
  return /^-?(0|[1-9]\d*)(\.\d+)?$/.test(text) && !/^-0(\.0+)?$/.test(text);
}

function attempt(run: () => string | number): Outcome {
  try {
    return { result: run() };
  } catch (error) {
    return { error: (error as Error).message };
  }
}

interface Implementation {
  name: ImplementationName;
  takes(vector: Vector): boolean;
  /** The outcome of every vector, in order; several when the implementation has several forms. */
  run(vectors: Vector[]): Outcome[][];
}

const host: Implementation = {
  name: 'host',
  takes: (vector) =>
    ['add', 'sub', 'mul', 'div', 'cmp', 'reduce', 'parse'].includes(vector.op) &&
    (vector.op === 'parse' || decimalArgs(vector).every(isAmount)) &&
    // exactDiv's one caller (CEL's /) refuses a zero divisor before it divides.
    !(vector.op === 'div' && /^[+-]?0+(\.0+)?$/.test(String(vector.args[1]))),
  run: (vectors) =>
    vectors.map((vector) => {
      const [a = '', b = ''] = vector.args as string[];
      const amount = (text: string) => parseDecimal(text, 'amount', BOUNDS);
      const scale = Math.max(scaleOf(a), scaleOf(b));
      switch (vector.op) {
        case 'add':
          return [attempt(() => withScale(exactPlus(amount(a), amount(b)), scale))];
        case 'sub':
          return [attempt(() => withScale(exactMinus(amount(a), amount(b)), scale))];
        case 'mul':
          return [attempt(() => withScale(exactTimes(amount(a), amount(b)), scaleOf(a) + scaleOf(b)))];
        case 'div':
          return [attempt(() => formatDecimal(exactDiv(amount(a), amount(b))))];
        case 'cmp':
          return [attempt(() => amount(a).cmp(amount(b)))];
        case 'reduce':
          return [attempt(() => formatDecimal(amount(a)))];
        default:
          return [attempt(() => withScale(amount(a), scaleOf(a)))];
      }
    }),
};

const cel = new Cel(systemClock, { celExpressionLengthMax: 10_000, celCacheMax: 1000 });
/** What CEL takes: operands within its working precision; decimal.Quo rounds half-even only. */
const celTakes = (vector: Vector) =>
  vector.op === 'parse' ||
  (decimalArgs(vector).every((text) => {
    const { int, frac } = digitsOf(text);
    return Math.max(int, 1) + frac <= Dec.precision;
  }) &&
    // decimal.Quo rounds half-even only.
    (vector.op !== 'quo' || vector.args[3] === 'half_even'));
const celImplementation: Implementation = {
  name: 'cel',
  takes: celTakes,
  run: (vectors) =>
    vectors.map((vector) => {
      const [a, b, c] = vector.args;
      const lit = (text: unknown) => `decimal(${JSON.stringify(text)})`;
      const expression = {
        add: () => `${lit(a)} + ${lit(b)}`,
        sub: () => `${lit(a)} - ${lit(b)}`,
        mul: () => `${lit(a)} * ${lit(b)}`,
        div: () => `${lit(a)} / ${lit(b)}`,
        quo: () => `decimal.Quo(${lit(a)}, ${lit(b)}, ${c})`,
        round: () => `decimal.Round(${lit(a)}, ${JSON.stringify(c)}, ${b})`,
        cmp: () => `decimal.Cmp(${lit(a)}, ${lit(b)})`,
        reduce: () => `decimal.Reduce(${lit(a)})`,
        neg: () => `decimal.Neg(${lit(a)})`,
        abs: () => `decimal.Abs(${lit(a)})`,
        parse: () => lit(a),
      }[vector.op]();
      return [
        attempt(() => {
          const value = cel.compile(expression)({});
          return typeof value === 'bigint' ? Number(value) : String(value);
        }),
      ];
    }),
};

const storage: Implementation = {
  name: 'storage',
  takes: (vector) =>
    (vector.op === 'add' || vector.op === 'sub') && decimalArgs(vector).every((t) => isAmount(t) && isWritten(t)),
  run: (vectors) =>
    vectors.map((vector) => {
      const [a, b] = vector.args as [string, string];
      return vector.op === 'add'
        ? [attempt(() => addText(a, b)), attempt(() => String(decAdd(a, b)))]
        : [attempt(() => subText(a, b))];
    }),
};

let sandbox: Sandbox;
/** The host side of a program's CEL library calls: the engine's door, over the CEL above. */
const library: HostBridge = {
  call: (op, args) => {
    if (op !== 'fn') return '{"ok":true,"value":null}';
    try {
      return `{"ok":true,"value":${callLibrary(cel, args[0]!, args[1]!, 32)}}`;
    } catch (error) {
      return JSON.stringify({ ok: false, error: { code: 'CEL_ERROR', message: (error as Error).message } });
    }
  },
  log() {},
};
/** Run a program over the vectors: each vector's forms, each outcome a result or the error's message. */
function runForms(vectors: Vector[], forms: string): Outcome[][] {
  const source = `function run(event) {
      const attempt = (f) => { try { return { result: f() }; } catch (e) { return { error: String(e && e.message) }; } };
      const text = (d) => d.toString();
      const forms = ${forms};
      return event.data.map(([op, args]) => forms[op](...args).map(attempt));
    }`;
  const result = sandbox.run(
    { key: forms, fileName: 'vectors', source },
    JSON.stringify({ data: vectors.map((v) => [v.op, v.args]) }),
    library,
    Date.now() + 30_000,
  );
  if (!result.ok) throw new Error(`the vectors program failed: ${result.kind}: ${result.message}`);
  return JSON.parse(result.outputJson) as Outcome[][];
}
const program: Implementation = {
  name: 'program',
  takes: (vector) => vector.op !== 'div' && vector.op !== 'parse' && celTakes(vector),
  run: (vectors) =>
    runForms(
      vectors,
      `{
        add: (a, b) => [() => text(decimal.Add(a, b))],
        sub: (a, b) => [() => text(decimal.Sub(a, b))],
        mul: (a, b) => [() => text(decimal.Mul(a, b))],
        quo: (a, b, p) => [() => text(decimal.Quo(a, b, p)), () => text(decimal.Quo(decimal(a), decimal(b), BigInt(p)))],
        round: (a, p, m) => [() => text(decimal.Round(a, m, p))],
        cmp: (a, b) => [() => decimal.Cmp(a, b)],
        reduce: (a) => [() => text(decimal.Reduce(a))],
        neg: (a) => [() => text(decimal.Neg(a))],
        abs: (a) => [() => text(decimal.Abs(a))],
      }`,
    ),
};
const guest: Implementation = {
  name: 'guest',
  takes: (vector) => vector.op !== 'div' && vector.op !== 'reduce',
  run: (vectors) => {
    return runForms(
      vectors,
      `{
        add: (a, b) => [() => text(decimal(a).plus(b))],
        sub: (a, b) => [() => text(decimal(a).minus(b))],
        mul: (a, b) => [() => text(decimal(a).times(b))],
        quo: (a, b, p, m) => [() => text(decimal(a).div(b, p, m))],
        round: (a, p, m) => [() => text(decimal(a).round(p, m))],
        cmp: (a, b) => [() => decimal(a).cmp(b)],
        neg: (a) => [() => text(decimal(a).neg())],
        abs: (a) => [() => text(decimal(a).abs())],
        parse: (a) => [() => text(decimal(a)), () => String(decimal(a))],
      }`,
    );
  },
};

const IMPLEMENTATIONS = [host, celImplementation, storage, guest, program];

beforeAll(async () => {
  sandbox = new Sandbox(await loadQuickJS(96 * 1024 * 1024), {
    memoryBytesMax: 64 << 20,
    stackBytesMax: 256 << 10,
    contextUsesMax: 1e9,
    contextPoolMax: 2,
    programsPerContextMax: 16,
    retainedBytesMax: 256 << 10,
    library: programLibraryJson(cel.env),
  });
});

/**
 * Disagreements found by these vectors and not yet decided, each exactly as it shows (any other
 * fails, and so does a line here once it is fixed). None now: CEL's decimal.Quo, which kept the
 * quotient's own scale and rounded an 80-digit quotient a second time (issue 35), divides exactly
 * and rounds once to the places asked (roundedQuotient in src/decimal.ts).
 */
const KNOWN_DISAGREEMENTS: string[] = [];

function disagreement(vector: Vector, name: ImplementationName, outcome: Outcome): string | null {
  const expected = expectedFor(vector, name);
  const shown = (x: unknown) => JSON.stringify(x);
  if ('result' in expected) {
    if ('result' in outcome && outcome.result === expected.result) return null;
  } else if ('error' in outcome && ERRORS[expected.error]!.test(outcome.error)) return null;
  return `${name} ${vector.op}${shown(vector.args)}: expected ${shown(expected)}, got ${shown(outcome)}`;
}

describe('decimal vectors', () => {
  it('are many, and each is taken by at least one implementation', () => {
    expect(vectors.length).toBeGreaterThanOrEqual(150);
    for (const vector of vectors) {
      expect(
        IMPLEMENTATIONS.some((i) => i.takes(vector)),
        JSON.stringify(vector),
      ).toBe(true);
      if (vector.error !== undefined) expect(Object.keys(ERRORS)).toContain(vector.error);
    }
  });

  for (const implementation of IMPLEMENTATIONS) {
    it(`${implementation.name} agrees with every vector it takes`, () => {
      const taken = vectors.filter((v) => implementation.takes(v));
      expect(taken.length).toBeGreaterThan(20);
      const outcomes = implementation.run(taken);
      const disagreements: string[] = [];
      taken.forEach((vector, i) => {
        const forms = outcomes[i]!;
        expect(forms.length).toBeGreaterThan(0);
        for (const outcome of forms) {
          const problem = disagreement(vector, implementation.name, outcome);
          if (problem !== null) disagreements.push(problem);
        }
      });
      const known = KNOWN_DISAGREEMENTS.filter((line) => line.startsWith(`${implementation.name} `));
      // Shortened for the report: a 1,000-digit operand would drown it.
      const short = (line: string) => (line.length > 400 ? `${line.slice(0, 397)}...` : line);
      expect(disagreements.filter((line) => !known.includes(line)).map(short)).toEqual([]);
      expect(
        known.filter((line) => !disagreements.includes(line)).map(short),
        'fixed: delete from KNOWN_DISAGREEMENTS',
      ).toEqual([]);
    });
  }
});
