import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Dec, exactMinus, exactPlus, exactTimes } from '../../src/decimal.js';

/** The exact value of a decimal string as a scaled BigInt: [coefficient, scale]. */
function scaled(text: string): [bigint, number] {
  const [whole, fraction = ''] = text.replace('-', '').split('.');
  const sign = text.startsWith('-') ? -1n : 1n;
  return [sign * BigInt(`${whole}${fraction}`), fraction.length];
}

function format([coefficient, scale]: [bigint, number]): string {
  const negative = coefficient < 0n;
  let digits = (negative ? -coefficient : coefficient).toString().padStart(scale + 1, '0');
  if (scale > 0) digits = `${digits.slice(0, -scale)}.${digits.slice(-scale)}`.replace(/\.?0+$/, '');
  return `${negative && digits !== '0' ? '-' : ''}${digits}`;
}

function exactSum(a: string, b: string, sign: 1n | -1n): string {
  const [ca, sa] = scaled(a);
  const [cb, sb] = scaled(b);
  const scale = Math.max(sa, sb);
  return format([ca * 10n ** BigInt(scale - sa) + sign * cb * 10n ** BigInt(scale - sb), scale]);
}

/** Decimals from 1e-90 to 1e90, with up to 40 significant digits, either sign. */
const decimal = fc
  .tuple(fc.bigInt({ min: -(10n ** 40n), max: 10n ** 40n }), fc.integer({ min: -50, max: 50 }))
  .map(([coefficient, exponent]) => new Dec(`${coefficient}e${exponent}`).toFixed());

describe('exact decimal arithmetic', () => {
  it('a sum or difference is either exact or refused, never rounded', () => {
    fc.assert(
      fc.property(decimal, decimal, (a, b) => {
        for (const [op, sign] of [
          [exactPlus, 1n],
          [exactMinus, -1n],
        ] as const) {
          let result: string | null = null;
          try {
            result = op(new Dec(a), new Dec(b)).toFixed();
          } catch {
            result = null;
          }
          if (result !== null) expect(result).toBe(exactSum(a, b, sign));
        }
      }),
      { numRuns: 3000 },
    );
  });

  it('a product is either exact or refused', () => {
    fc.assert(
      fc.property(decimal, decimal, (a, b) => {
        let result: string | null = null;
        try {
          result = exactTimes(new Dec(a), new Dec(b)).toFixed();
        } catch {
          result = null;
        }
        if (result === null) return;
        const [ca, sa] = scaled(a);
        const [cb, sb] = scaled(b);
        expect(result).toBe(format([ca * cb, sa + sb]));
      }),
      { numRuns: 3000 },
    );
  });

  it('refuses what would need more than 80 digits, and allows what fits', () => {
    expect(() => exactPlus(new Dec('1e40'), new Dec('1e-40'))).toThrow('needs more than 80 digits');
    expect(exactPlus(new Dec('1e40'), new Dec('1e-38')).toFixed()).toBe(`1${'0'.repeat(40)}.${'0'.repeat(37)}1`);
    expect(exactPlus(new Dec('1e-79'), new Dec('1e-79')).toFixed()).toBe(`0.${'0'.repeat(78)}2`);
    expect(exactPlus(new Dec('9'.repeat(80)), new Dec(0)).toFixed()).toBe('9'.repeat(80));
    expect(exactMinus(new Dec(0), new Dec('2.25')).toFixed()).toBe('-2.25');
  });
});
