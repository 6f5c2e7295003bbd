import fc from 'fast-check';
import { Decimal } from 'decimal.js';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadQuickJS } from '../../sandbox/module.js';
import { Sandbox } from '../../sandbox/sandbox.js';

/**
 * The exact decimals tool programs get (sandbox/prelude.ts), checked against decimal.js at a
 * precision far beyond the operands, in the real QuickJS sandbox.
 */
let sandbox: Sandbox;
const bridge = { call: () => '{"ok":true,"value":null}', log() {} };
beforeAll(async () => {
  sandbox = new Sandbox(await loadQuickJS(96 * 1024 * 1024), {
    memoryBytesMax: 64 << 20,
    stackBytesMax: 256 << 10,
    contextUsesMax: 1e9,
    contextPoolMax: 2,
    programsPerContextMax: 16,
    retainedBytesMax: 256 << 10,
  });
});

/** Run `run(event)` of `source` on `data`; returns the output, or the error message. */
function run(source: string, data: unknown): unknown {
  const result = sandbox.run(
    { key: source, fileName: 'test', source },
    JSON.stringify({ data }),
    bridge,
    Date.now() + 10_000,
  );
  return result.ok ? JSON.parse(result.outputJson) : `${result.kind}: ${result.message}`;
}

const Big = Decimal.clone({ precision: 1000 });
const MODES: Record<string, Decimal.Rounding> = {
  half_even: Decimal.ROUND_HALF_EVEN,
  half_up: Decimal.ROUND_HALF_UP,
  half_down: Decimal.ROUND_HALF_DOWN,
  up: Decimal.ROUND_UP,
  down: Decimal.ROUND_DOWN,
  ceiling: Decimal.ROUND_CEIL,
  floor: Decimal.ROUND_FLOOR,
};
const decimal = fc
  .tuple(fc.bigInt({ min: -(10n ** 24n), max: 10n ** 24n }), fc.integer({ min: 0, max: 12 }))
  .map(([c, s]) => new Big(c.toString()).div(new Big(10).pow(s)).toFixed());
const mode = fc.constantFrom(...Object.keys(MODES));

describe('sandbox decimals', () => {
  it('div and round give decimal.js results in every rounding mode', () => {
    const cases = fc.sample(
      fc.tuple(
        decimal,
        decimal.filter((d) => new Big(d).isZero() === false),
        fc.integer({ min: 0, max: 12 }),
        mode,
      ),
      1500,
    );
    const outputs = run(
      'function run(e) { return e.data.map(([a, b, p, m]) => [decimal(a).div(b, p, m).toString(), decimal(a).round(p, m).toString()]); }',
      cases,
    ) as Array<[string, string]>;
    cases.forEach(([a, b, p, m], i) => {
      const quotient = new Big(a).div(new Big(b)).toDecimalPlaces(p, MODES[m]!);
      const rounded = new Big(a).toDecimalPlaces(p, MODES[m]!);
      expect(outputs[i], `${a} / ${b} at ${p} ${m}`).toEqual([quotient.toFixed(p), rounded.toFixed(p)]);
    });
  });

  it('refuses places that are not an integer from 0 to 64, unknown modes, and more than 1000 digits', () => {
    for (const expression of [
      "decimal('1234').round(-2)",
      "decimal('1.25').round(1.5)",
      "decimal(1).round('2')",
      "decimal('1.25').div(1, '1')",
      "decimal('1.25').round(1, 'sideways')",
    ]) {
      expect(run(`function run() { return ${expression}.toString(); }`, null)).toMatch(
        /^error: RangeError: (places must be an integer from 0 to 64|rounding mode)/,
      );
    }
    expect(run("function run() { return decimal('1.25').round(1, 'HALF_UP').toString(); }", null)).toBe('1.3');
    const started = Date.now();
    expect(run("function run() { return decimal('9'.repeat(300000)).toString(); }", null)).toBe(
      'error: RangeError: a decimal holds at most 1000 digits',
    );
    expect(run("function run() { let d = decimal('9'.repeat(600)); return d.times(d).toString(); }", null)).toBe(
      'error: RangeError: a decimal holds at most 1000 digits',
    );
    expect(Date.now() - started).toBeLessThan(2000);
  });
});
