// @ts-check

// The CEL library a program calls directly: uuid.New(), uuid.NewSHA1(ns, name), date(t),
// date.Today(), time.Now(), timestamp(s), duration(s), strings.ToUpper(s), decimal.Quo(a, b, 2),
// money.Add(a, b), t.getFullYear(), t.plus(d)... Nothing here implements one: each is a wrapper
// made from the host's table of names (src/cel/library.ts, read off the engine's CEL environment)
// that calls the CEL function itself through one host operation, 'fn'. A call is one CEL
// evaluation (celCostMax, the deadline), not a child call: no record, not counted as a call.

/** @type {Record<string, string[][]>} name -> the parameter types of each overload */
const LIBRARY = typeof globalThis.__tally_library === 'string' ? parse(globalThis.__tally_library) : {};
delete globalThis.__tally_library;

// Only the library makes timestamps and durations (from what the host returned).
const MINT = Symbol('tally.cel');
const TIME_METHODS = 't.plus(d), t.minus(x), t.cmp(u), t.getFullYear()... (CEL: t + d, t - u, t < u)';

// A CEL timestamp (RFC 3339 text, as cel("time.Now()") returns it) or duration ("90s", as CEL
// writes one): JSON, String(x) and template literals give that text, so it goes into graphql()
// variables and outputs exactly as cel() returns it; arithmetic and comparison are its methods.
class CelText {
  /** @param {symbol} mint @param {string} text @param {string} kind @param {string} made */
  constructor(mint, text, kind, made) {
    if (mint !== MINT) throw new TypeError(`a ${kind} is made by ${made}`);
    this.text = text;
    this.kind = kind;
    Object.freeze(this);
  }
  toString() {
    return this.text;
  }
  toJSON() {
    return this.text;
  }
  /** @returns {never} */
  valueOf() {
    throw implicit(this.kind, this.text, TIME_METHODS);
  }
  /** @param {string} hint */
  [Symbol.toPrimitive](hint) {
    if (hint === 'string') return this.text;
    throw implicit(this.kind, this.text, TIME_METHODS);
  }
}
class Timestamp extends CelText {
  /** @param {symbol} mint @param {string} text */
  constructor(mint, text) {
    super(mint, text, 'timestamp', 'timestamp(text), time.Now() or t.plus(d)');
  }
}
class Duration extends CelText {
  /** @param {symbol} mint @param {string} text */
  constructor(mint, text) {
    super(mint, text, 'duration', 'duration(text) or t.minus(u)');
  }
}
/** @type {Record<string, { prototype: any }>} the types whose CEL members become methods */
const RECEIVERS = { Timestamp, Duration };

// Values cross as tagged pairs (library.ts describes them), so a decimal or a timestamp arrives
// as what it is.
class NotLibraryValue extends Error {}
/**
 * @param {unknown} x
 * @param {number} depth
 * @returns {unknown[]}
 */
function encode(x, depth) {
  if (typeof x === 'string') return ['s', x];
  if (typeof x === 'boolean') return ['b', x];
  if (typeof x === 'bigint') return ['i', x.toString()];
  if (typeof x === 'number') {
    if (Number.isSafeInteger(x)) return ['i', String(x)];
    if (!Number.isFinite(x)) throw new RangeError(x + ' is not a finite number: CEL takes finite numbers');
    return ['f', x];
  }
  if (x === null) return ['n'];
  if (x instanceof Decimal) return ['d', x.toString()];
  if (x instanceof Money) return ['m', x.units.toString(), x.currency];
  if (x instanceof Timestamp) return ['t', x.text];
  if (x instanceof Duration) return ['D', x.text];
  if (x instanceof Uint8Array) {
    let hex = '';
    for (let i = 0; i < x.length; i++) hex += (x[i] < 16 ? '0' : '') + x[i].toString(16);
    return ['x', hex];
  }
  if (Array.isArray(x)) {
    if (depth >= DEPTH_MAX) throw new RangeError('a list nested deeper than ' + DEPTH_MAX + ' (jsonDepthMax)');
    const items = [];
    for (let i = 0; i < x.length; i++) items.push(encode(x[i], depth + 1));
    return ['l', items];
  }
  throw new NotLibraryValue(
    ' takes strings, numbers, booleans, null, decimals, money, timestamps, durations, bytes (Uint8Array) and lists of them, got ' +
      (typeof x === 'object' ? 'an object' : typeof x),
  );
}

/**
 * @param {any} pair
 * @returns {unknown}
 */
function decode(pair) {
  switch (pair[0]) {
    case 'i': {
      const n = BigInt(pair[1]);
      return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
    }
    case 'n':
      return null;
    case 'd':
      return Decimal.of(pair[1]);
    case 'm':
      return new Money(pair[1], pair[2]);
    case 't':
      return new Timestamp(MINT, pair[1]);
    case 'D':
      return new Duration(MINT, pair[1]);
    case 'x': {
      const bytes = new Uint8Array(pair[1].length / 2);
      for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(pair[1].slice(2 * i, 2 * i + 2), 16);
      return bytes;
    }
    case 'l': {
      const items = [];
      for (let i = 0; i < pair[1].length; i++) items.push(decode(pair[1][i]));
      return items;
    }
    default:
      return pair[1];
  }
}

// The guest's decimal() and money() take what they always took where CEL's decimal.* take a
// Decimal: a position every overload of that arity types Decimal reads a string or number as
// decimal(x); one every overload types string reads a decimal as its text (money.Mul(m, d)).
// Plain loops: a library call is on a program's hot path, and the guarded Array methods
// (array-guards.js) cost more than the call's crossing.
/**
 * @param {string[][]} overloads
 * @param {unknown[]} args
 */
function coerce(overloads, args) {
  const out = [];
  for (let i = 0; i < args.length; i++) {
    let arg = args[i];
    let decimals = 0;
    let strings = 0;
    let fitting = 0;
    for (let k = 0; k < overloads.length; k++) {
      const params = overloads[k];
      if (params.length !== args.length) continue;
      fitting++;
      if (params[i] === 'Decimal') decimals++;
      else if (params[i] === 'string') strings++;
    }
    if (fitting > 0 && decimals === fitting && !(arg instanceof Decimal)) arg = Decimal.of(arg);
    else if (fitting > 0 && strings === fitting && arg instanceof Decimal) arg = arg.toString();
    out.push(encode(arg, 1));
  }
  return out;
}

/**
 * @param {string} name
 * @param {string[][]} overloads
 * @param {unknown[]} args
 */
function callLibrary(name, overloads, args) {
  try {
    return decode(call('fn', name, stringify(coerce(overloads, args))));
  } catch (error) {
    // A value no CEL function takes is named with the function it was passed to.
    if (error instanceof NotLibraryValue) throw new TypeError(name + error.message);
    throw error;
  }
}

// The program's globals the library makes (uuid, date, time, timestamp, duration, strings; the
// statics of decimal and money go onto the guest's own decimal() and money()).
/** @type {Record<string, any>} */
const libraryGlobals = {};
/** @type {Record<string, any>} */
const own = { decimal, money };
const libraryNames = Object.keys(LIBRARY).sort((a, b) => a.indexOf('.') - b.indexOf('.'));
for (const name of libraryNames) {
  const overloads = LIBRARY[name];
  const dot = name.indexOf('.');
  if (dot < 0) {
    if (!Object.hasOwn(own, name))
      libraryGlobals[name] = /** @param {unknown[]} args */ (...args) => callLibrary(name, overloads, args);
    continue;
  }
  const head = name.slice(0, dot);
  const tail = name.slice(dot + 1);
  if (Object.hasOwn(RECEIVERS, head)) {
    Object.defineProperty(RECEIVERS[head].prototype, tail, {
      /** @param {unknown[]} args @this {unknown} */
      value: function (...args) {
        args.unshift(this);
        return callLibrary(name, overloads, args);
      },
      writable: false,
      enumerable: false,
      configurable: false,
    });
    continue;
  }
  const target = Object.hasOwn(own, head)
    ? own[head]
    : Object.hasOwn(libraryGlobals, head)
      ? libraryGlobals[head]
      : (libraryGlobals[head] = {});
  target[tail] = /** @param {unknown[]} args */ (...args) => callLibrary(name, overloads, args);
}
