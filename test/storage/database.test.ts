import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { addText, subText } from '../../src/decimal.js';
import { decAdd } from '../../src/storage/database.js';

/** A decimal written with exactly `scale` fraction digits, trailing zeros kept ("1.50", "0.000"). */
function written(coefficient: bigint, scale: number): string {
  const digits = coefficient.toString().padStart(scale + 1, '0');
  return scale === 0 ? digits : `${digits.slice(0, -scale)}.${digits.slice(-scale)}`;
}

function scaleOf(text: string): number {
  const point = text.indexOf('.');
  return point < 0 ? 0 : text.length - point - 1;
}

/**
 * The exact sum of two written decimals at the larger of their scales, computed on scaled
 * BigInts (independent of decimal.js and of decAdd's fast path).
 */
function expectedSum(a: string, b: string): string {
  const scale = Math.max(scaleOf(a), scaleOf(b));
  const scaled = (text: string): bigint => {
    const [int = '', frac = ''] = text.split('.');
    return BigInt(int + frac.padEnd(scale, '0'));
  };
  return written(scaled(a) + scaled(b), scale);
}

/**
 * dec_add has a fast path for short decimals; everywhere it must give the exact sum written at
 * max(scale(a), scale(b)) fraction digits, trailing zeros kept ("140567" + "1.0" = "140568.0").
 */
describe('dec_add', () => {
  const decimal = fc
    .tuple(fc.bigInt({ min: 0n, max: 10n ** 30n }), fc.integer({ min: 0, max: 18 }))
    .map(([coefficient, scale]) => written(coefficient, scale));
  const short = fc
    .tuple(fc.integer({ min: 0, max: 99_999_999 }), fc.integer({ min: 0, max: 6 }))
    .map(([coefficient, scale]) => written(BigInt(coefficient), scale));

  it('equals the exact sum at the larger scale for short and long decimals', () => {
    fc.assert(
      fc.property(fc.oneof(decimal, short), fc.oneof(decimal, short), (a, b) => {
        expect(decAdd(a, b)).toBe(expectedSum(a, b));
      }),
      { numRuns: 5000 },
    );
  });

  it('handles the edges of the fast path exactly', () => {
    const cases: Array<[string, string, string]> = [
      ['999999999999999', '1', '1000000000000000'],
      ['99999999999999.9', '0.1', '100000000000000.0'],
      ['0.000000000000001', '0.000000000000009', '0.000000000000010'],
      ['123456789012345', '0.5', '123456789012345.5'],
      ['0.5', '0.5', '1.0'],
      ['10.50', '0.50', '11.00'],
      ['1', '2', '3'],
      ['0', '7.25', '7.25'],
      ['7.25', '0', '7.25'],
      ['0', '21.00', '21.00'],
      ['30', '12.5', '42.5'],
      ['140567', '1.0', '140568.0'],
      ['0.00', '0', '0.00'],
      ['0', '0', '0'],
      // Outside the fast path (a sign, a point without digits on one side): decimal.js, still exact.
      ['-1.5', '2.25', '0.75'],
      ['-3', '1', '-2'],
      ['1.5', '-0.25', '1.25'],
      ['1234567890123456', '1', '1234567890123457'],
      ['0.1234567890123456', '1', '1.1234567890123456'],
    ];
    for (const [a, b, sum] of cases) {
      expect(decAdd(a, b)).toBe(sum);
      if (!a.startsWith('-') && !b.startsWith('-')) expect(decAdd(a, b)).toBe(expectedSum(a, b));
    }
    // Not a decimal the fast path reads: decimal.js reads it (or fails) as it always did.
    expect(decAdd('.5', '1')).toBe('1.5');
    expect(decAdd('5.', '1')).toBe('6');
  });

  it('subText and addText give the exact difference and sum, signs included, at the larger scale', () => {
    const signed = fc
      .tuple(fc.boolean(), fc.oneof(decimal, short))
      .map(([negative, text]) => (negative && text !== '0' ? `-${text}` : text));
    const exact = (a: string, b: string, subtract: boolean): string => {
      const scale = Math.max(scaleOf(a), scaleOf(b));
      const scaled = (text: string): bigint => {
        const negative = text.startsWith('-');
        const [int = '', frac = ''] = (negative ? text.slice(1) : text).split('.');
        const value = BigInt(int + frac.padEnd(scale, '0'));
        return negative ? -value : value;
      };
      const sum = subtract ? scaled(a) - scaled(b) : scaled(a) + scaled(b);
      return sum < 0n ? `-${written(-sum, scale)}` : written(sum, scale);
    };
    fc.assert(
      fc.property(signed, signed, (a, b) => {
        expect(subText(a, b)).toBe(b === '0' ? a : exact(a, b, true));
        expect(addText(a, b)).toBe(b === '0' ? a : a === '0' ? b : exact(a, b, false));
      }),
      { numRuns: 5000 },
    );
    expect(subText('1.00', '1.00')).toBe('0.00');
    expect(subText('1', '2.5')).toBe('-1.5');
    expect(subText('0.5', '0.75')).toBe('-0.25');
    expect(subText('100', '0.01')).toBe('99.99');
  });
});
