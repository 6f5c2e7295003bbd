// @ts-check

// Exact decimals for tool programs: a BigInt coefficient and a scale (value = coefficient /
// 10^scale), and money (a decimal in one currency). decimal(x) and money(units, currency) are
// installed as globals by harden.js; their static forms mirror the CEL library's.

/** @typedef {'half_even' | 'half_up' | 'half_down' | 'up' | 'down' | 'ceiling' | 'floor'} RoundingMode */

const DECIMAL = /^([+-]?)(\d+)(?:\.(\d+))?$/;
// Far beyond any amount, and small enough that no operation on one can stall past a deadline
// (converting a 300,000-digit BigInt to text takes seconds, and cannot be interrupted).
const DIGITS_MAX = 1000;
const COEFFICIENT_MAX = 10n ** BigInt(DIGITS_MAX);
/** @param {number} n */
function pow10(n) {
  return 10n ** BigInt(n);
}
/** @type {string[]} */
const MODES = ['half_even', 'half_up', 'half_down', 'up', 'down', 'ceiling', 'floor'];
/**
 * @param {unknown} places
 * @param {number} fallback
 * @returns {number}
 */
function placesOf(places, fallback) {
  if (places === undefined) return fallback;
  if (typeof places !== 'number' || !Number.isInteger(places) || places < 0 || places > 64) {
    throw new RangeError('places must be an integer from 0 to 64, got ' + stringify(places));
  }
  return places;
}
/** @param {unknown} mode */
function modeOf(mode) {
  const m = mode === undefined ? 'half_even' : String(mode).toLowerCase();
  if (!MODES.includes(m))
    throw new RangeError('rounding mode ' + stringify(mode) + ' is not one of ' + MODES.join(', '));
  return m;
}
// num / den rounded to an integer: the remainder decides, and the sign comes from num and den.
/**
 * @param {bigint} num
 * @param {bigint} den
 * @param {string} mode
 */
function roundQuotient(num, den, mode) {
  let q = num / den;
  const r = num - q * den;
  if (r !== 0n) {
    const neg = num < 0n !== den < 0n;
    const twice = (r < 0n ? -r : r) * 2n;
    const size = den < 0n ? -den : den;
    let away;
    if (mode === 'down') away = false;
    else if (mode === 'up') away = true;
    else if (mode === 'ceiling') away = !neg;
    else if (mode === 'floor') away = neg;
    else if (mode === 'half_up') away = twice >= size;
    else if (mode === 'half_down') away = twice > size;
    else away = twice > size || (twice === size && q % 2n !== 0n);
    if (away) q += neg ? -1n : 1n;
  }
  return q;
}

// JavaScript would turn a decimal into a float (d * 2, d > e) or into text (d + 1) without a word:
// every implicit conversion throws instead, naming the method to use. Template literals and
// String(d) still print it exactly.
const DECIMAL_METHODS =
  'd.plus(x), d.minus(x), d.times(x), d.div(x, places), d.cmp(x), d.eq(x), d.gt(x), d.lt(x) (or decimal.Add(a, b), decimal.Round(d, mode, places), ...)';
const MONEY_METHODS =
  'm.plus(other), m.minus(other), m.times(factor), m.cmp(other) (or money.Add(a, b), money.Mul(m, factor))';
/**
 * @param {string} kind
 * @param {string} shown
 * @param {string} methods
 */
function implicit(kind, shown, methods) {
  const error = new TypeError(
    kind +
      ' ' +
      shown +
      ' cannot be used with + - * / < > == or converted to a number: JavaScript would compute it as a float or as text. Use ' +
      methods +
      '; to make text, use .toString() or a template literal',
  );
  return error;
}

class Decimal {
  /**
   * @param {bigint} coefficient
   * @param {number} scale
   */
  constructor(coefficient, scale) {
    if (coefficient >= COEFFICIENT_MAX || coefficient <= -COEFFICIENT_MAX || scale > DIGITS_MAX) {
      throw new RangeError('a decimal holds at most ' + DIGITS_MAX + ' digits');
    }
    this.c = coefficient;
    this.s = scale;
    Object.freeze(this);
  }
  /**
   * @param {any} x whatever a program passed: checked here
   * @returns {Decimal}
   */
  static of(x) {
    if (x instanceof Decimal) return x;
    if (typeof x === 'bigint') return new Decimal(x, 0);
    if (typeof x === 'number') {
      if (!Number.isFinite(x)) throw new RangeError('decimal(' + x + '): not a finite number');
      x = String(x);
      if (x.includes('e')) throw new RangeError('decimal(' + x + '): pass a string for very large or small numbers');
    }
    if (typeof x !== 'string') throw new TypeError('decimal(x): x must be a string, number, bigint or decimal');
    if (x.length > 2 * DIGITS_MAX + 8) throw new RangeError('a decimal holds at most ' + DIGITS_MAX + ' digits');
    const m = DECIMAL.exec(x.trim());
    if (!m) throw new RangeError('decimal(' + stringify(x) + '): not a decimal number');
    const frac = m[3] || '';
    const c = BigInt(m[2] + frac);
    return new Decimal(m[1] === '-' ? -c : c, frac.length);
  }
  /**
   * @param {unknown} other
   * @returns {[bigint, bigint, number]}
   */
  align(other) {
    const o = Decimal.of(other);
    // biome-ignore lint/complexity/useMathMinMax: two small integers; no call of Math.max on every sum.
    const s = this.s > o.s ? this.s : o.s;
    return [this.c * pow10(s - this.s), o.c * pow10(s - o.s), s];
  }
  /** @param {unknown} x */
  plus(x) {
    const [a, b, s] = this.align(x);
    return new Decimal(a + b, s);
  }
  /** @param {unknown} x */
  minus(x) {
    const [a, b, s] = this.align(x);
    return new Decimal(a - b, s);
  }
  /** @param {unknown} x */
  times(x) {
    const o = Decimal.of(x);
    return new Decimal(this.c * o.c, this.s + o.s);
  }
  /**
   * Divide and round to 'places' digits (half-even unless a mode is given).
   * @param {unknown} x
   * @param {unknown} [places]
   * @param {unknown} [mode]
   */
  div(x, places, mode) {
    const o = Decimal.of(x);
    const p = placesOf(places, 18);
    const m = modeOf(mode);
    if (o.c === 0n) throw new RangeError('division by zero');
    // (a / 10^sa) / (b / 10^sb) at scale p = a * 10^(sb + p) / (b * 10^sa), rounded on the remainder.
    return new Decimal(roundQuotient(this.c * pow10(o.s + p), o.c * pow10(this.s), m), p);
  }
  neg() {
    return new Decimal(-this.c, this.s);
  }
  abs() {
    return this.c < 0n ? this.neg() : this;
  }
  /**
   * @param {unknown} x
   * @returns {-1 | 0 | 1}
   */
  cmp(x) {
    const [a, b] = this.align(x);
    return a < b ? -1 : a > b ? 1 : 0;
  }
  /** @param {unknown} x */
  eq(x) {
    return this.cmp(x) === 0;
  }
  /** @param {unknown} x */
  lt(x) {
    return this.cmp(x) < 0;
  }
  /** @param {unknown} x */
  lte(x) {
    return this.cmp(x) <= 0;
  }
  /** @param {unknown} x */
  gt(x) {
    return this.cmp(x) > 0;
  }
  /** @param {unknown} x */
  gte(x) {
    return this.cmp(x) >= 0;
  }
  isZero() {
    return this.c === 0n;
  }
  isNegative() {
    return this.c < 0n;
  }
  /**
   * Round to 'places' fractional digits: half_even (default), half_up, half_down, up, down, ceiling, floor.
   * @param {unknown} [places]
   * @param {unknown} [mode]
   */
  round(places, mode) {
    const p = placesOf(places, 0);
    const m = modeOf(mode);
    if (p >= this.s) return new Decimal(this.c * pow10(p - this.s), p);
    return new Decimal(roundQuotient(this.c, pow10(this.s - p), m), p);
  }
  toString() {
    const neg = this.c < 0n;
    let digits = (neg ? -this.c : this.c).toString();
    if (this.s > 0) {
      digits = digits.padStart(this.s + 1, '0');
      digits = digits.slice(0, digits.length - this.s) + '.' + digits.slice(digits.length - this.s);
    }
    return (neg ? '-' : '') + digits;
  }
  /** @param {unknown} [places] */
  toFixed(places) {
    return places === undefined ? this.toString() : this.round(places).toString();
  }
  toJSON() {
    return this.toString();
  }
  /** @returns {never} */
  valueOf() {
    throw implicit('decimal', this.toString(), DECIMAL_METHODS);
  }
  /** @param {string} hint */
  [Symbol.toPrimitive](hint) {
    if (hint === 'string') return this.toString();
    throw implicit('decimal', this.toString(), DECIMAL_METHODS);
  }
}

class Money {
  /**
   * @param {unknown} units
   * @param {unknown} currency
   */
  constructor(units, currency) {
    if (typeof currency !== 'string' || !/^[A-Z][A-Z0-9]{2,9}$/.test(currency)) {
      throw new RangeError('money(units, currency): ' + stringify(currency) + ' is not a currency code');
    }
    this.units = Decimal.of(units);
    this.currency = currency;
    Object.freeze(this);
  }
  /**
   * @param {unknown} other
   * @returns {Money}
   */
  same(other) {
    if (!(other instanceof Money)) throw new TypeError('expected money');
    if (other.currency !== this.currency)
      throw new RangeError('cannot combine ' + this.currency + ' and ' + other.currency);
    return other;
  }
  /** @param {unknown} o */
  plus(o) {
    return new Money(this.units.plus(this.same(o).units), this.currency);
  }
  /** @param {unknown} o */
  minus(o) {
    return new Money(this.units.minus(this.same(o).units), this.currency);
  }
  /** @param {unknown} f */
  times(f) {
    return new Money(this.units.times(f), this.currency);
  }
  /** @param {unknown} o */
  cmp(o) {
    return this.units.cmp(this.same(o).units);
  }
  toString() {
    return this.units.toString() + ' ' + this.currency;
  }
  toJSON() {
    return { units: this.units.toString(), currency: this.currency };
  }
  /** @returns {never} */
  valueOf() {
    throw implicit('money', this.toString(), MONEY_METHODS);
  }
  /** @param {string} hint */
  [Symbol.toPrimitive](hint) {
    if (hint === 'string') return this.toString();
    throw implicit('money', this.toString(), MONEY_METHODS);
  }
}

/** @param {unknown} x */
// biome-ignore lint/correctness/noUnusedVariables: harden.js installs it as a global (library.js adds its statics).
const decimal = (x) => Decimal.of(x);
/** @param {unknown} units @param {unknown} currency */
// biome-ignore lint/correctness/noUnusedVariables: harden.js installs it as a global (library.js adds its statics).
const money = (units, currency) => new Money(units, currency);
// decimal.Add, decimal.Round, money.Mul... (the CEL library's statics) are the CEL functions
// themselves, put on decimal and money by library.js.
