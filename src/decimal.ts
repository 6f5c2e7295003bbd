import { Decimal } from 'decimal.js';
import { EngineError, quote, limitExceeded } from './errors.js';

/**
 * Exact decimal arithmetic for money. Precision 80 is far above the largest amount the limits let in
 * (30 integer + 18 fraction digits), so additions and subtractions of amounts and balances are exact;
 * division and multiplication in CEL round explicitly (decimal.Round / decimal.Quo).
 */
export const Dec = Decimal.clone({ precision: 80, rounding: Decimal.ROUND_HALF_EVEN, toExpNeg: -100, toExpPos: 100 });
export type Dec = InstanceType<typeof Dec>;

export const ZERO: Dec = new Dec(0);

/**
 * Significant digits an exact a ± b may need: from one place above the higher leading digit (a
 * carry) down to the lower last decimal place. Zero operands are handled before this.
 */
function sumDigits(a: Dec, b: Dec): number {
  return Math.max(a.e, b.e) + 2 + Math.max(a.decimalPlaces(), b.decimalPlaces());
}

/** A decimal for a message: short, whatever its size. */
function shown(d: Dec): string {
  const text = d.toString();
  return text.length > 40 ? `${text.slice(0, 37)}…` : text;
}

function inexact(what: string, a: Dec, b: Dec): EngineError {
  return limitExceeded(
    'decimalPrecisionMax',
    Dec.precision,
    null,
    `${shown(a)} ${what} ${shown(b)} needs more than ${Dec.precision} digits to be exact`,
    {
      hint: 'Round the operands first (decimal.Round), or work with smaller amounts.',
    },
  );
}

/** Digits of `d` written out in full (no exponent), as every amount is stored and shown. */
function fixedDigits(d: Dec): number {
  return Math.max(d.e + 1, 1) + d.decimalPlaces();
}

/** A decimal CEL takes in (decimal('…')) must fit the working precision written out, as results do. */
export function exactDecimal(text: string): Dec {
  const d = new Dec(text);
  if (fixedDigits(d) > Dec.precision) {
    throw limitExceeded(
      'decimalPrecisionMax',
      Dec.precision,
      fixedDigits(d),
      `decimal ${shown(d)} has more than ${Dec.precision} digits`,
      {
        hint: 'Amounts are bounded by decimalIntegerDigitsMax and decimalFractionDigitsMax; write fewer digits.',
      },
    );
  }
  return d;
}

/** A result written out in full must fit the working precision: 1e30 squared 30 times must not. */
function bounded(result: Dec, what: string, a: Dec, b: Dec): Dec {
  if (fixedDigits(result) > Dec.precision) throw inexact(what, a, b);
  return result;
}

/** Wide enough for the exact product of two working-precision numbers (the check of a quotient). */
const Wide = Decimal.clone({ precision: 2 * Dec.precision + 2 });

/** a / b when the quotient is exact within the working precision; refused otherwise (round explicitly). */
export function exactDiv(a: Dec, b: Dec): Dec {
  const q = a.div(b);
  if (!new Wide(q).times(new Wide(b)).eq(new Wide(a))) {
    throw new EngineError('CEL_ERROR', `${shown(a)} / ${shown(b)} has no exact decimal value`, {
      hint: 'Round it to the places you want: decimal.Quo(a, b, places).',
    });
  }
  return bounded(q, '/', a, b);
}

/** a + b, exact or refused: never rounded to the working precision behind the caller's back. */
export function exactPlus(a: Dec, b: Dec): Dec {
  if (a.isZero()) return bounded(b, '+', a, b);
  if (b.isZero()) return bounded(a, '+', a, b);
  if (sumDigits(a, b) > Dec.precision) throw inexact('+', a, b);
  return bounded(a.plus(b), '+', a, b);
}

export function exactMinus(a: Dec, b: Dec): Dec {
  if (b.isZero()) return bounded(a, '-', a, b);
  if (a.isZero()) return bounded(b.neg(), '-', a, b);
  if (sumDigits(a, b) > Dec.precision) throw inexact('-', a, b);
  return bounded(a.minus(b), '-', a, b);
}

export function exactTimes(a: Dec, b: Dec): Dec {
  if (a.precision() + b.precision() > Dec.precision) throw inexact('×', a, b);
  return bounded(a.times(b), '×', a, b);
}

/** `d` as an integer coefficient and a scale: d = coefficient / 10^scale. */
function coefficientOf(d: Dec): [bigint, number] {
  const text = d.toFixed();
  const point = text.indexOf('.');
  if (point < 0) return [BigInt(text), 0];
  return [BigInt(text.slice(0, point) + text.slice(point + 1)), text.length - point - 1];
}

/**
 * a / b rounded half-even to `places` fraction digits, with exactly that scale, from the exact
 * quotient: one rounding on the remainder of integers, never a rounding of a rounded 80-digit
 * quotient ((5·10^79 + 1) / (2·10^79) is 3 to 0 places, not 2). CEL's decimal.Quo and a program's
 * decimal.Quo (the same function) divide here; the guest's d.div() computes it the same way.
 */
export function roundedQuotient(a: Dec, b: Dec, places: number): Dec {
  if (b.isZero()) throw new EngineError('CEL_ERROR', 'division by zero');
  const [ca, sa] = coefficientOf(a);
  const [cb, sb] = coefficientOf(b);
  const num = ca * 10n ** BigInt(sb + places);
  const den = cb * 10n ** BigInt(sa);
  let q = num / den;
  const r = num - q * den;
  if (r !== 0n) {
    const negative = num < 0n !== den < 0n;
    const twice = (r < 0n ? -r : r) * 2n;
    const size = den < 0n ? -den : den;
    if (twice > size || (twice === size && q % 2n !== 0n)) q += negative ? -1n : 1n;
  }
  return bounded(new Dec(places === 0 ? q.toString() : `${q}e-${places}`), '/', a, b);
}

const DECIMAL_PATTERN = /^[+-]?(\d+)(?:\.(\d+))?$/;

export interface DecimalBounds {
  decimalIntegerDigitsMax: number;
  decimalFractionDigitsMax: number;
}

/**
 * Parse an amount from the wire. Only strings (and safe integers, which are exact) are accepted: a JS
 * number with a fraction has already lost exactness before it reached us.
 */
export function parseDecimal(value: unknown, what: string, bounds: DecimalBounds): Dec {
  let text: string;
  if (typeof value === 'string') text = value;
  else if (typeof value === 'number' && Number.isSafeInteger(value)) text = String(value);
  else if (typeof value === 'bigint') text = value.toString();
  else if (typeof value === 'number' && !Number.isFinite(value)) {
    throw new EngineError('BAD_REQUEST', `${what} ${String(value)} is not a finite decimal`, {
      hint: 'Send decimals as strings, e.g. "10.25".',
    });
  } else if (typeof value === 'number' && Number.isInteger(value)) {
    throw new EngineError('BAD_REQUEST', `${what} ${value} is an integer too large to be exact as a JSON number`, {
      hint: `Send it as a string: "${BigInt(value)}".`,
    });
  } else if (typeof value === 'number') {
    throw new EngineError('BAD_REQUEST', `${what} ${quote(value)} is a floating-point number`, {
      hint: `Send decimals as strings, e.g. "${value}".`,
    });
  } else {
    throw new EngineError('BAD_REQUEST', `${what} must be a decimal string, got ${quote(value)}`, {
      hint: 'Send decimals as strings, e.g. "10.25".',
    });
  }
  const match = DECIMAL_PATTERN.exec(text);
  if (!match) {
    throw new EngineError('BAD_REQUEST', `${what} ${quote(value)} is not a decimal number`, {
      hint: 'Use digits with an optional sign and decimal point and no spaces, e.g. "-10.25".',
    });
  }
  checkDigits(text, (match[1] ?? '').replace(/^0+(?=\d)/, '').length, (match[2] ?? '').length, what, bounds);
  return new Dec(text);
}

/** Check a computed decimal against the same bounds as a parsed one. */
export function checkDecimalBounds(value: Dec, what: string, bounds: DecimalBounds): Dec {
  if (!value.isFinite()) {
    throw new EngineError('BAD_REQUEST', `${what} is ${value.toString()}, not a finite decimal`);
  }
  // Digits as toFixed() would write them, read off the exponent: "0.05" has one integer digit.
  checkDigits(() => value.toFixed(), value.e >= 0 ? value.e + 1 : 1, value.decimalPlaces(), what, bounds);
  return value;
}

/** `text` is the amount as the message quotes it: a function when it must first be written out. */
function checkDigits(
  text: string | (() => string),
  intDigits: number,
  fracDigits: number,
  what: string,
  bounds: DecimalBounds,
): void {
  if (fracDigits <= bounds.decimalFractionDigitsMax && intDigits <= bounds.decimalIntegerDigitsMax) return;
  if (typeof text === 'function') text = text();
  if (fracDigits > bounds.decimalFractionDigitsMax) {
    throw limitExceeded(
      'decimalFractionDigitsMax',
      bounds.decimalFractionDigitsMax,
      fracDigits,
      `${what} ${quote(text)} has ${fracDigits} fractional digits; decimalFractionDigitsMax is ${bounds.decimalFractionDigitsMax}`,
      { hint: 'Round the amount first, e.g. decimal.Round(x, "half_even", 2) in CEL.' },
    );
  }
  if (intDigits > bounds.decimalIntegerDigitsMax) {
    throw limitExceeded(
      'decimalIntegerDigitsMax',
      bounds.decimalIntegerDigitsMax,
      intDigits,
      `${what} ${quote(text)} has ${intDigits} integer digits; decimalIntegerDigitsMax is ${bounds.decimalIntegerDigitsMax}`,
    );
  }
}

/**
 * Amounts keep the scale they were written with, as the reference ledger's do: "21.00" stays
 * "21.00", and a sum or difference takes the larger scale of its operands ("0" + "21.00" is
 * "21.00"; a total nothing was ever added to stays "0").
 */
export function scaleOf(text: string): number {
  const point = text.indexOf('.');
  return point < 0 ? 0 : text.length - point - 1;
}

/** `d` written out in full with at least `scale` fraction digits (never fewer than it has). */
export function withScale(d: Dec, scale: number): string {
  const dp = d.decimalPlaces();
  // toFixed() writes every digit; padding zeros on is exact and cheaper than toFixed(scale).
  const text = d.toFixed();
  if (scale <= dp) return text;
  return dp === 0 ? `${text}.${'0'.repeat(scale)}` : text + '0'.repeat(scale - dp);
}

/** Exact a + b of two decimal strings, at the larger of their scales. */
export function addText(a: string, b: string): string {
  if (b === '0') return a;
  if (a === '0') return b;
  return shortSum(a, b, false) ?? withScale(new Dec(a).plus(b), Math.max(scaleOf(a), scaleOf(b)));
}

/** Exact a − b of two decimal strings, at the larger of their scales. */
export function subText(a: string, b: string): string {
  if (b === '0') return a;
  return shortSum(a, b, true) ?? withScale(new Dec(a).minus(b), Math.max(scaleOf(a), scaleOf(b)));
}

const POW10 = [1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];

/**
 * `s`, a non-negative decimal (digits, at most one point with digits on both sides), as an integer
 * scaled to `scale` fraction digits; -1 when it is not one, has more fraction digits than `scale`,
 * or takes more than 15 digits so scaled (then a double might not hold it exactly).
 */
function scaledShort(s: string, point: number, scale: number): number {
  const fraction = point < 0 ? 0 : s.length - point - 1;
  if (s.length === 0 || point === 0 || fraction > scale || (point > 0 && fraction === 0)) return -1;
  if (s.length - (point < 0 ? 0 : 1) + (scale - fraction) > 15) return -1;
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    if (i === point) continue;
    const digit = s.charCodeAt(i) - 48;
    if (digit < 0 || digit > 9) return -1;
    n = n * 10 + digit;
  }
  return n * POW10[scale - fraction]!;
}

/**
 * a + b (or a − b) at the larger of their scales when both are non-negative decimals of at most 15
 * digits once scaled: the scaled integers are exact as doubles, and so is their sum or difference
 * (below 2^53). Balance totals and amounts are mostly such; undefined for anything else (a sign, an
 * exponent, more digits), which decimal.js then adds.
 */
function shortSum(a: string, b: string, subtract: boolean): string | undefined {
  const pa = a.indexOf('.');
  const pb = b.indexOf('.');
  const fa = pa < 0 ? 0 : a.length - pa - 1;
  const fb = pb < 0 ? 0 : b.length - pb - 1;
  const scale = Math.max(fa, fb);
  const ia = scaledShort(a, pa, scale);
  const ib = ia < 0 ? -1 : scaledShort(b, pb, scale);
  if (ib < 0) return undefined;
  const sum = subtract ? ia - ib : ia + ib;
  const negative = sum < 0;
  if (scale === 0) return String(sum);
  const digits = String(negative ? -sum : sum).padStart(scale + 1, '0');
  return `${negative ? '-' : ''}${digits.slice(0, -scale)}.${digits.slice(-scale)}`;
}

/** Plain notation, never an exponent, with at least `minFractionDigits` digits after the point. */
export function formatDecimal(value: Dec, minFractionDigits = 0): string {
  const dp = value.decimalPlaces();
  return dp < minFractionDigits ? value.toFixed(minFractionDigits) : value.toFixed();
}

/** Minor-unit digits of the currencies we know; others render with the digits they have. */
const MINOR_UNITS: Record<string, number> = {
  USD: 2,
  EUR: 2,
  GBP: 2,
  CHF: 2,
  CAD: 2,
  AUD: 2,
  NZD: 2,
  SEK: 2,
  NOK: 2,
  DKK: 2,
  PLN: 2,
  CZK: 2,
  MXN: 2,
  BRL: 2,
  INR: 2,
  CNY: 2,
  HKD: 2,
  SGD: 2,
  ZAR: 2,
  TRY: 2,
  ILS: 2,
  AED: 2,
  SAR: 2,
  JPY: 0,
  KRW: 0,
  VND: 0,
  CLP: 0,
  ISK: 0,
  HUF: 2,
  KWD: 3,
  BHD: 3,
  JOD: 3,
  OMR: 3,
  TND: 3,
  BTC: 8,
  ETH: 18,
  USDC: 6,
  USDT: 6,
};

export function minorUnits(currency: string): number {
  return MINOR_UNITS[currency] ?? 0;
}

const CURRENCY_PATTERN = /^[A-Z][A-Z0-9]{2,9}$/;

export function parseCurrency(value: unknown, what = 'currency'): string {
  if (typeof value !== 'string' || !CURRENCY_PATTERN.test(value)) {
    throw new EngineError('BAD_REQUEST', `${what} ${quote(value)} is not a currency code`, {
      hint: 'Use an upper-case ISO-4217 code such as "USD", or an asset code of 3-10 letters and digits such as "USDC".',
    });
  }
  return value;
}
