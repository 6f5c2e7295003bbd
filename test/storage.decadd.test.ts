import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Dec } from '../src/decimal.js';
import { decAdd } from '../src/storage/database.js';

/** dec_add has a fast path for short decimals; it must agree with decimal.js everywhere. */
describe('dec_add', () => {
  const decimal = fc
    .tuple(fc.bigInt({ min: 0n, max: 10n ** 30n }), fc.integer({ min: 0, max: 18 }))
    .map(([coefficient, scale]) => new Dec(coefficient.toString()).div(new Dec(10).pow(scale)).toFixed());
  const short = fc
    .tuple(fc.integer({ min: 0, max: 99_999_999 }), fc.integer({ min: 0, max: 6 }))
    .map(([coefficient, scale]) => new Dec(coefficient).div(new Dec(10).pow(scale)).toFixed());

  it('equals decimal.js plus().toFixed() for short and long decimals', () => {
    fc.assert(
      fc.property(fc.oneof(decimal, short), fc.oneof(decimal, short), (a, b) => {
        expect(decAdd(a, b)).toBe(new Dec(a).plus(b).toFixed());
      }),
      { numRuns: 5000 },
    );
  });

  it('handles the edges of the fast path exactly', () => {
    const cases: Array<[string, string]> = [
      ['999999999999999', '1'], ['99999999999999.9', '0.1'], ['0.000000000000001', '0.000000000000009'],
      ['123456789012345', '0.5'], ['0.5', '0.5'], ['10.50', '0.50'], ['1', '2'], ['0', '7.25'], ['7.25', '0'],
    ];
    for (const [a, b] of cases) expect(decAdd(a, b)).toBe(new Dec(a).plus(b).toFixed());
  });
});
