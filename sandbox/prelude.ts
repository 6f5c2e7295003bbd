/**
 * Guest code evaluated once in every new context, before it is frozen. It builds the whole API a
 * program sees (graphql, cel, tools, fail, decimal, money, console) on top of one host function,
 * `__tally_host(op, ...strings) -> envelope JSON`, then removes that function from the global scope
 * and deep-freezes every object reachable from globalThis, so no call can leave state behind.
 */
export const PRELUDE = String.raw`
(function () {
  'use strict';
  const host = globalThis.__tally_host;
  delete globalThis.__tally_host;
  // The output's bound (outputBytesMax), given by the host for this context's life.
  const OUTPUT_MAX = typeof globalThis.__tally_output_max === 'number' ? globalThis.__tally_output_max : Infinity;
  delete globalThis.__tally_output_max;
  // How deep a value may nest (jsonDepthMax, the root is level 1), given the same way.
  const DEPTH_MAX = typeof globalThis.__tally_depth_max === 'number' ? globalThis.__tally_depth_max : Infinity;
  delete globalThis.__tally_depth_max;
  const FAIL = Symbol('tally.fail');
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  // Errors made here from a failed host call: only these may carry a code out of the sandbox
  // (a program cannot forge TIMEOUT or ACCESS_DENIED by setting error.code).
  const toolErrors = new WeakSet();

  // Every argument crosses as a string ('' for none): the host reads them without type checks.
  const text = (x) => (typeof x === 'string' ? x : '');

  // Once the engine has refused a call for its budget of calls (callsPerExecutionMax), every later
  // call of this run is refused too: thrown here, the same error, without crossing to the host (a
  // loop that catches the refusal costs nothing more per turn). Cleared when a run begins.
  let overBudget = null;

  // Only the strings an operation takes cross (each is one copy out of the guest): graphql and cel
  // two, tool three, cancelled none.
  function call(op, a, b, c) {
    if (overBudget !== null && op !== 'cancelled') throw overBudget;
    const envelope = parse(op === 'tool' ? host(op, text(a), text(b), text(c)) : op === 'cancelled' ? host(op) : host(op, text(a), text(b)));
    if (envelope.ok) return envelope.value;
    const error = toolError(envelope.error);
    const details = envelope.error.details;
    if (details !== null && typeof details === 'object' && details.limit === 'callsPerExecutionMax') overBudget = error;
    throw error;
  }

  // An error with a code the engine gave (a failed host call), or one of its limits refused here.
  function toolError(failure) {
    // Error.prototype is frozen, so its inherited 'name' cannot be assigned: define own properties.
    const error = new Error(failure.message);
    const own = (key, value) => Object.defineProperty(error, key, { value, enumerable: true, writable: false, configurable: false });
    own('name', 'ToolError');
    own('code', failure.code);
    if (failure.hint !== undefined) own('hint', failure.hint);
    if (failure.details !== undefined) own('details', failure.details);
    toolErrors.add(error);
    return error;
  }

  function graphql(query, variables) {
    if (typeof query !== 'string') throw new TypeError('graphql(query, variables): query must be a string');
    return call('graphql', query, strictStringify(variables === undefined ? {} : variables, 'variables', true));
  }

  function cel(expression, bindings) {
    if (typeof expression !== 'string') throw new TypeError('cel(expression, bindings): expression must be a string');
    return call('cel', expression, strictStringify(bindings === undefined ? {} : bindings, 'bindings', true));
  }

  // Whether cancelExecution was asked of the run this call belongs to: a long program can stop early.
  function cancelled() {
    return call('cancelled') === true;
  }

  function fail(message, hint, options) {
    const retry = options !== null && typeof options === 'object' && options.retry === false ? false : undefined;
    throw { [FAIL]: true, message: String(message), hint: hint === undefined || hint === null ? undefined : String(hint), retry };
  }

  // tools.<name>(input, {check}) -> the host resolves the name against the declared references.
  const tools = new Proxy(Object.freeze({}), {
    get(_, name) {
      if (typeof name !== 'string') return undefined;
      return function (input, options) {
        return call('tool', name, strictStringify(input === undefined ? {} : input, 'tools.' + name + ' input', true), stringify(options === undefined ? {} : options));
      };
    },
    has() { return false; },
    set() { return false; },
    defineProperty() { return false; },
  });

  function show(value) {
    if (typeof value === 'string') return value;
    try { return stringify(value, (k, v) => (typeof v === 'bigint' ? v.toString() : v)); } catch (e) { return String(value); }
  }
  const console = { log(...args) { host('log', args.map(show).join(' ')); } };
  console.info = console.log;
  console.warn = console.log;
  console.error = console.log;

  // --- exact decimals: a BigInt coefficient and a scale (value = coefficient / 10^scale) ---------
  const DECIMAL = /^([+-]?)(\d+)(?:\.(\d+))?$/;
  // Far beyond any amount, and small enough that no operation on one can stall past a deadline
  // (converting a 300,000-digit BigInt to text takes seconds, and cannot be interrupted).
  const DIGITS_MAX = 1000;
  const COEFFICIENT_MAX = 10n ** BigInt(DIGITS_MAX);
  function pow10(n) { return 10n ** BigInt(n); }
  const MODES = ['half_even', 'half_up', 'half_down', 'up', 'down', 'ceiling', 'floor'];
  function placesOf(places, fallback) {
    if (places === undefined) return fallback;
    if (typeof places !== 'number' || !Number.isInteger(places) || places < 0 || places > 64) {
      throw new RangeError('places must be an integer from 0 to 64, got ' + stringify(places));
    }
    return places;
  }
  function modeOf(mode) {
    const m = mode === undefined ? 'half_even' : String(mode).toLowerCase();
    if (!MODES.includes(m)) throw new RangeError('rounding mode ' + stringify(mode) + ' is not one of ' + MODES.join(', '));
    return m;
  }
  // num / den rounded to an integer: the remainder decides, and the sign comes from num and den.
  function roundQuotient(num, den, mode) {
    let q = num / den;
    const r = num - q * den;
    if (r !== 0n) {
      const neg = (num < 0n) !== (den < 0n);
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
  const DECIMAL_METHODS = 'd.plus(x), d.minus(x), d.times(x), d.div(x, places), d.cmp(x), d.eq(x), d.gt(x), d.lt(x) (or decimal.Add(a, b), decimal.Round(d, mode, places), ...)';
  const MONEY_METHODS = 'm.plus(other), m.minus(other), m.times(factor), m.cmp(other) (or money.Add(a, b), money.Mul(m, factor))';
  function implicit(kind, shown, methods) {
    const error = new TypeError(kind + ' ' + shown + ' cannot be used with + - * / < > == or converted to a number: JavaScript would compute it as a float or as text. Use ' + methods + '; to make text, use .toString() or a template literal');
    return error;
  }

  class Decimal {
    constructor(coefficient, scale) {
      if (coefficient >= COEFFICIENT_MAX || coefficient <= -COEFFICIENT_MAX || scale > DIGITS_MAX) {
        throw new RangeError('a decimal holds at most ' + DIGITS_MAX + ' digits');
      }
      this.c = coefficient;
      this.s = scale;
      Object.freeze(this);
    }
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
    align(other) {
      const o = Decimal.of(other);
      const s = this.s > o.s ? this.s : o.s;
      return [this.c * pow10(s - this.s), o.c * pow10(s - o.s), s];
    }
    plus(x) { const [a, b, s] = this.align(x); return new Decimal(a + b, s); }
    minus(x) { const [a, b, s] = this.align(x); return new Decimal(a - b, s); }
    times(x) { const o = Decimal.of(x); return new Decimal(this.c * o.c, this.s + o.s); }
    /** Divide and round to 'places' digits (half-even unless a mode is given). */
    div(x, places, mode) {
      const o = Decimal.of(x);
      const p = placesOf(places, 18);
      const m = modeOf(mode);
      if (o.c === 0n) throw new RangeError('division by zero');
      // (a / 10^sa) / (b / 10^sb) at scale p = a * 10^(sb + p) / (b * 10^sa), rounded on the remainder.
      return new Decimal(roundQuotient(this.c * pow10(o.s + p), o.c * pow10(this.s), m), p);
    }
    neg() { return new Decimal(-this.c, this.s); }
    abs() { return this.c < 0n ? this.neg() : this; }
    cmp(x) { const [a, b] = this.align(x); return a < b ? -1 : a > b ? 1 : 0; }
    eq(x) { return this.cmp(x) === 0; }
    lt(x) { return this.cmp(x) < 0; }
    lte(x) { return this.cmp(x) <= 0; }
    gt(x) { return this.cmp(x) > 0; }
    gte(x) { return this.cmp(x) >= 0; }
    isZero() { return this.c === 0n; }
    isNegative() { return this.c < 0n; }
    /** Round to 'places' fractional digits: half_even (default), half_up, half_down, up, down, ceiling, floor. */
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
    toFixed(places) { return places === undefined ? this.toString() : this.round(places).toString(); }
    toJSON() { return this.toString(); }
    valueOf() { throw implicit('decimal', this.toString(), DECIMAL_METHODS); }
    [Symbol.toPrimitive](hint) {
      if (hint === 'string') return this.toString();
      throw implicit('decimal', this.toString(), DECIMAL_METHODS);
    }
  }

  class Money {
    constructor(units, currency) {
      if (typeof currency !== 'string' || !/^[A-Z][A-Z0-9]{2,9}$/.test(currency)) {
        throw new RangeError('money(units, currency): ' + stringify(currency) + ' is not a currency code');
      }
      this.units = Decimal.of(units);
      this.currency = currency;
      Object.freeze(this);
    }
    same(other) {
      if (!(other instanceof Money)) throw new TypeError('expected money');
      if (other.currency !== this.currency) throw new RangeError('cannot combine ' + this.currency + ' and ' + other.currency);
      return other;
    }
    plus(o) { return new Money(this.units.plus(this.same(o).units), this.currency); }
    minus(o) { return new Money(this.units.minus(this.same(o).units), this.currency); }
    times(f) { return new Money(this.units.times(f), this.currency); }
    cmp(o) { return this.units.cmp(this.same(o).units); }
    toString() { return this.units.toString() + ' ' + this.currency; }
    toJSON() { return { units: this.units.toString(), currency: this.currency }; }
    valueOf() { throw implicit('money', this.toString(), MONEY_METHODS); }
    [Symbol.toPrimitive](hint) {
      if (hint === 'string') return this.toString();
      throw implicit('money', this.toString(), MONEY_METHODS);
    }
  }

  const decimal = (x) => Decimal.of(x);
  const money = (units, currency) => new Money(units, currency);
  // The static forms of the CEL library's decimal.* and money.* functions, with the same names,
  // argument order and rounding modes (decimal.Round(x, "half_even", 2) as in a tran code).
  const asMoney = (m) => {
    if (!(m instanceof Money)) throw new TypeError('expected money, got ' + typeof m);
    return m;
  };
  const integer = (p, what) => {
    const n = typeof p === 'bigint' ? Number(p) : p;
    if (typeof n !== 'number' || !Number.isInteger(n)) throw new RangeError(what + ' must be an integer, got ' + stringify(String(p)));
    return n;
  };
  Object.assign(decimal, {
    Add: (a, b) => Decimal.of(a).plus(b),
    Sub: (a, b) => Decimal.of(a).minus(b),
    Mul: (a, b) => Decimal.of(a).times(b),
    Quo: (a, b, places) => Decimal.of(a).div(b, integer(places, 'places'), 'half_even'),
    Round: (d, mode, places) => Decimal.of(d).round(integer(places, 'places'), mode),
    Abs: (d) => Decimal.of(d).abs(),
    Neg: (d) => Decimal.of(d).neg(),
    Ceil: (d) => Decimal.of(d).round(0, 'ceiling'),
    Floor: (d) => Decimal.of(d).round(0, 'floor'),
    Cmp: (a, b) => Decimal.of(a).cmp(b),
    Reduce: (d) => {
      const x = Decimal.of(d);
      let c = x.c;
      let sc = x.s;
      while (sc > 0 && c % 10n === 0n) { c /= 10n; sc--; }
      return new Decimal(c, sc);
    },
  });
  Object.assign(money, {
    Add: (a, b) => asMoney(a).plus(b),
    Sub: (a, b) => asMoney(a).minus(b),
    Mul: (m, factor) => asMoney(m).times(factor),
  });

  function describe(e) {
    try {
      if (e instanceof Error) return { message: String(e.name) + ': ' + String(e.message), stack: typeof e.stack === 'string' ? e.stack : undefined };
      return { message: 'uncaught ' + (e === null ? 'null' : typeof e) + ': ' + String(e), stack: undefined };
    } catch (inner) {
      return { message: 'uncaught value that cannot be described', stack: undefined };
    }
  }

  // Math.random, reseeded from each call's event on first use in that call: the generator's
  // position cannot carry anything from one execution into the next (xorshift128, not for secrets).
  let pendingSeed = '';
  let x0 = 1, x1 = 2, x2 = 3, x3 = 4;
  function seed(text) {
    let h = 2166136261;
    for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
    x0 = h | 1; x1 = Math.imul(h, 1597334677) | 1; x2 = Math.imul(h ^ 0x9e3779b9, 2246822507) | 1; x3 = Math.imul(h ^ 0x85ebca6b, 3266489909) | 1;
  }
  function random() {
    if (pendingSeed !== '') {
      seed(pendingSeed);
      pendingSeed = '';
    }
    const t = x0 ^ (x0 << 11);
    x0 = x1; x1 = x2; x2 = x3;
    x3 = (x3 ^ (x3 >>> 19)) ^ (t ^ (t >>> 8));
    return (x3 >>> 0) / 4294967296;
  }
  Object.defineProperty(Math, 'random', { value: random, writable: true, enumerable: false, configurable: true });

  // JSON text of a value that leaves the program, refusing what JSON.stringify would silently turn
  // into null or drop: NaN and ±Infinity (a computation gone wrong), and, inside an output,
  // undefined, functions and symbols. The message names the path (output.lines[2].amount).
  // Past STRICT_DEPTH_MAX levels (far deeper than the engine's jsonDepthMax, which refuses the
  // value anyway) the plain JSON.stringify takes over: the checking replacer costs stack per level.
  const STRICT_DEPTH_MAX = 256;
  const TOO_DEEP = {};
  function strictStringify(value, what, allowUndefined, max) {
    try {
      return checkedStringify(value, what, allowUndefined, max === undefined ? Infinity : max);
    } catch (e) {
      if (e === TOO_DEEP) return stringify(value);
      throw e;
    }
  }
  // Past max, the text is refused as it is made: each string counts its length and quotes, each key
  // its length, quotes and colon (a lower bound of the UTF-8 bytes), before it is written out.
  const TOO_LARGE = {};
  function checkedStringify(value, what, allowUndefined, max) {
    const paths = new Map();
    const depths = new Map();
    let size = 0;
    return stringify(value, function (key, v) {
      const parent = paths.get(this);
      const path = parent === undefined ? what : isArray(this) ? parent + '[' + key + ']' : parent + '.' + key;
      const type = typeof v;
      if (max !== Infinity) {
        size += (parent !== undefined && !isArray(this) ? key.length + 3 : 1) + (type === 'string' ? v.length + 2 : 0);
        if (size > max) throw TOO_LARGE;
      }
      if (type === 'object' && v !== null) {
        const depth = parent === undefined ? 0 : depths.get(this) + 1;
        // Refused here, as the engine would refuse it, before the rest is written out and copied.
        if (depth >= DEPTH_MAX) {
          throw toolError({ code: 'LIMIT_EXCEEDED', message: what + ' is nested more than ' + DEPTH_MAX + ' levels deep (jsonDepthMax)', hint: 'Flatten the structure.' });
        }
        if (depth > STRICT_DEPTH_MAX) throw TOO_DEEP;
        paths.set(v, path);
        depths.set(v, depth);
      } else if (type === 'number' && !Number.isFinite(v)) {
        throw new TypeError(path + ' is ' + v + ', which JSON cannot hold (it would become null); check the arithmetic, or send a string');
      } else if (type === 'bigint') {
        throw new TypeError(path + ' is a BigInt (' + v + '); send it as a string or a decimal');
      } else if (parent !== undefined && !allowUndefined && (type === 'undefined' || type === 'function' || type === 'symbol')) {
        throw new TypeError(path + ' is ' + (type === 'undefined' ? 'undefined' : 'a ' + type) + ', which JSON cannot hold (it would be dropped or become null); use null, or leave the property out');
      }
      return v;
    });
  }

  // Runs one call of a compiled program; its outcome leaves as JSON text. Only what QuickJS itself
  // throws past this (interrupts, out of memory, stack overflow) reaches the host as an exception.
  function invoke(fn, eventJson) {
    let output;
    pendingSeed = eventJson;
    overBudget = null;
    x0 = 1; x1 = 2; x2 = 3; x3 = 4;
    try {
      output = fn(eventJson);
      if (output !== null && typeof output === 'object' && typeof output.then === 'function') {
        throw new TypeError('run(event) returned a Promise; tool programs are synchronous');
      }
      let json;
      try {
        json = strictStringify(output === undefined ? null : output, 'the output', false, OUTPUT_MAX);
      } catch (e) {
        if (e !== TOO_LARGE) throw e;
        json = null;
      }
      if (json === undefined) throw new TypeError('run(event) returned a value that is not JSON (a function, a symbol, or a toJSON that returns undefined)');
      // Refused as it is made, before it is copied out (its UTF-8 bytes are at least its length).
      if (json === null || json.length > OUTPUT_MAX) {
        return stringify({ error: { code: 'LIMIT_EXCEEDED', message: 'the output is more than outputBytesMax (' + OUTPUT_MAX + ' bytes of JSON)', hint: 'Return less: ids and totals, not whole documents (or raise outputBytesMax in the limits).' } });
      }
      return '{"output":' + json + '}';
    } catch (e) {
      if (e !== null && typeof e === 'object' && e[FAIL] === true) return stringify({ fail: { message: e.message, hint: e.hint, retry: e.retry } });
      if (typeof InternalError === 'function' && e instanceof InternalError && (e.message === 'stack overflow' || e.message === 'out of memory' || e.message === 'string too long')) throw e;
      const d = describe(e);
      if (toolErrors.has(e)) return stringify({ error: { message: e.message, stack: d.stack, code: e.code, hint: e.hint } });
      return stringify({ error: { message: d.message, stack: d.stack } });
    }
  }

  // Generic array methods loop over lengths without checking the interrupt, holes included: refuse
  // arrays and array-likes longer than any dense array the sandbox's memory could hold (64 MiB /
  // 8-byte values): only a sparse array, or a fake length, can be longer. That covers what a
  // method walks: its receiver, concat's arguments, the arrays flat() will open, and what
  // flatMap's callback returns.
  const LENGTH_MAX = 1 << 23;
  const isArray = Array.isArray;
  const SPREADABLE = Symbol.isConcatSpreadable;
  function checkLength(name, x) {
    if (x === null || x === undefined) return;
    const length = isArray(x) ? x.length : Number(Object(x).length);
    if (length > LENGTH_MAX) {
      throw new RangeError('Array.prototype.' + name + ' on ' + (isArray(x) ? 'an array' : 'an array-like') + ' of length ' + length + ' is refused (the most is ' + LENGTH_MAX + ')');
    }
  }
  // The arrays flat(depth) will open, down to depth levels (this walk checks the interrupt).
  function checkNested(name, array, depth) {
    if (!(depth > 0)) return;
    const n = isArray(array) ? array.length : Number(Object(array).length);
    for (let i = 0; i < n; i++) {
      const value = array[i];
      if (isArray(value)) {
        checkLength(name, value);
        checkNested(name, value, depth - 1);
      }
    }
  }
  for (const name of ['indexOf', 'lastIndexOf', 'includes', 'join', 'reverse', 'copyWithin', 'fill', 'toString', 'toLocaleString', 'every', 'some', 'forEach', 'map', 'filter', 'reduce', 'reduceRight', 'find', 'findIndex', 'findLast', 'findLastIndex', 'sort', 'slice', 'splice', 'toReversed', 'toSorted', 'toSpliced', 'with', 'at', 'flat', 'flatMap', 'keys', 'values', 'entries', 'concat', 'push', 'pop', 'shift', 'unshift']) {
    const original = Array.prototype[name];
    if (typeof original !== 'function') continue;
    const guarded = {
      [name](...args) {
        checkLength(name, this);
        if (name === 'concat') {
          for (const arg of args) if (arg !== null && typeof arg === 'object' && (isArray(arg) || arg[SPREADABLE])) checkLength(name, arg);
        } else if (name === 'flat') {
          checkNested(name, this, args[0] === undefined ? 1 : Number(args[0]));
        } else if (name === 'flatMap' && typeof args[0] === 'function') {
          const [fn, thisArg] = args;
          args = [function (...values) {
            const result = fn.apply(thisArg, values);
            if (isArray(result)) checkLength(name, result);
            return result;
          }];
        }
        return original.apply(this, args);
      },
    }[name];
    Object.defineProperty(Array.prototype, name, { value: guarded, writable: true, enumerable: false, configurable: true });
  }

  // QuickJS searches a string for a string naively (text × pattern steps) inside one native call
  // the interrupt cannot stop: 'a'×170,000 searched for 'a'×85,000+'b' held the process 7 s. Past
  // SEARCH_WORK_MAX steps the search runs here instead, in linear time (Knuth-Morris-Pratt) and in
  // JavaScript, where the deadline stops it. RegExp work on strings longer than STRING_LENGTH_MAX,
  // and sorting typed arrays longer than TYPED_SORT_MAX, are refused: native, long, uninterruptible.
  const SEARCH_WORK_MAX = 1 << 20;
  const STRING_LENGTH_MAX = 1 << 23;
  const TYPED_SORT_MAX = 1 << 20;
  const S = String.prototype;
  const native = { includes: S.includes, indexOf: S.indexOf, lastIndexOf: S.lastIndexOf, split: S.split, replace: S.replace, replaceAll: S.replaceAll, match: S.match, matchAll: S.matchAll, search: S.search, slice: S.slice };
  const isRegExpLike = (x) => x !== null && (typeof x === 'object' || typeof x === 'function') && x[Symbol.match] !== undefined;
  const toPosition = (p, length) => {
    const n = Number(p);
    if (Number.isNaN(n)) return 0;
    return n < 0 ? 0 : n > length ? length : Math.trunc(n);
  };
  // The failure table of the pattern, then the first match at or after 'from' (-1 if none).
  function kmpIndexOf(text, pattern, from) {
    const m = pattern.length;
    if (m === 0) return from <= text.length ? from : -1;
    // Both are primitive strings here, and String.prototype is frozen: direct calls are safe.
    const codes = new Uint16Array(m);
    for (let i = 0; i < m; i++) codes[i] = pattern.charCodeAt(i);
    const fail = new Int32Array(m);
    for (let i = 1, k = 0; i < m; i++) {
      const c = codes[i];
      while (k > 0 && c !== codes[k]) k = fail[k - 1];
      if (c === codes[k]) k++;
      fail[i] = k;
    }
    const n = text.length;
    for (let i = from, k = 0; i < n; i++) {
      const c = text.charCodeAt(i);
      while (k > 0 && c !== codes[k]) k = fail[k - 1];
      if (c === codes[k]) k++;
      if (k === m) return i - m + 1;
    }
    return -1;
  }
  const heavy = (text, pattern) => text.length * pattern.length > SEARCH_WORK_MAX;
  const receiver = (self, name) => {
    if (self === null || self === undefined) throw new TypeError('String.prototype.' + name + ' called on ' + self);
    return String(self);
  };
  function substitute(replacement, matched, position, text) {
    let out = '';
    for (let i = 0; i < replacement.length; i++) {
      const c = replacement[i];
      const next = replacement[i + 1];
      if (c !== '$' || next === undefined) { out += c; continue; }
      if (next === '$') out += '$';
      else if (next === '&') out += matched;
      else if (next === '\x60') out += native.slice.call(text, 0, position);
      else if (next === "'") out += native.slice.call(text, position + matched.length);
      else { out += c; continue; }
      i++;
    }
    return out;
  }
  function replaceAt(text, positions, length, replaceValue) {
    let out = '';
    let last = 0;
    for (const p of positions) {
      const matched = native.slice.call(text, p, p + length);
      out += native.slice.call(text, last, p) + (typeof replaceValue === 'function' ? String(replaceValue(matched, p, text)) : substitute(String(replaceValue), matched, p, text));
      last = p + length;
    }
    return out + native.slice.call(text, last);
  }
  const refuseLong = (name, text) => {
    if (text.length > STRING_LENGTH_MAX) {
      throw new RangeError('String.prototype.' + name + ' with a RegExp on a string of ' + text.length + ' characters is refused (the most is ' + STRING_LENGTH_MAX + ')');
    }
  };
  const stringGuards = {
    includes(search, position) {
      const text = receiver(this, 'includes');
      if (isRegExpLike(search) || !heavy(text, String(search))) return native.includes.call(text, search, position);
      return kmpIndexOf(text, String(search), toPosition(position, text.length)) !== -1;
    },
    indexOf(search, position) {
      const text = receiver(this, 'indexOf');
      const pattern = String(search);
      if (!heavy(text, pattern)) return native.indexOf.call(text, pattern, position);
      return kmpIndexOf(text, pattern, toPosition(position, text.length));
    },
    lastIndexOf(search, position) {
      const text = receiver(this, 'lastIndexOf');
      const pattern = String(search);
      if (!heavy(text, pattern)) return native.lastIndexOf.call(text, pattern, position);
      const n = Number(position);
      const limit = Number.isNaN(n) ? text.length : toPosition(n, text.length);
      let found = -1;
      for (let i = kmpIndexOf(text, pattern, 0); i !== -1 && i <= limit; i = kmpIndexOf(text, pattern, i + 1)) found = i;
      return found;
    },
    split(separator, limit) {
      if (isRegExpLike(separator) || separator === undefined || separator === null) {
        if (separator !== undefined && separator !== null) refuseLong('split', receiver(this, 'split'));
        return native.split.call(this, separator, limit);
      }
      const text = receiver(this, 'split');
      const pattern = String(separator);
      if (pattern === '' || !heavy(text, pattern)) return native.split.call(text, separator, limit);
      const max = limit === undefined ? 4294967295 : limit >>> 0;
      const out = [];
      if (max === 0) return out;
      let start = 0;
      for (let i = kmpIndexOf(text, pattern, 0); i !== -1; i = kmpIndexOf(text, pattern, start)) {
        out.push(native.slice.call(text, start, i));
        if (out.length === max) return out;
        start = i + pattern.length;
      }
      out.push(native.slice.call(text, start));
      return out;
    },
    replace(searchValue, replaceValue) {
      const text = receiver(this, 'replace');
      if (isRegExpLike(searchValue)) {
        refuseLong('replace', text);
        return native.replace.call(text, searchValue, replaceValue);
      }
      const pattern = String(searchValue);
      if (!heavy(text, pattern)) return native.replace.call(text, searchValue, replaceValue);
      const at = kmpIndexOf(text, pattern, 0);
      return at === -1 ? text : replaceAt(text, [at], pattern.length, replaceValue);
    },
    replaceAll(searchValue, replaceValue) {
      const text = receiver(this, 'replaceAll');
      if (isRegExpLike(searchValue)) {
        refuseLong('replaceAll', text);
        return native.replaceAll.call(text, searchValue, replaceValue);
      }
      const pattern = String(searchValue);
      if (pattern === '' || !heavy(text, pattern)) return native.replaceAll.call(text, searchValue, replaceValue);
      const positions = [];
      for (let i = kmpIndexOf(text, pattern, 0); i !== -1; i = kmpIndexOf(text, pattern, i + pattern.length)) positions.push(i);
      return replaceAt(text, positions, pattern.length, replaceValue);
    },
    match(regexp) { refuseLong('match', receiver(this, 'match')); return native.match.call(this, regexp); },
    matchAll(regexp) { refuseLong('matchAll', receiver(this, 'matchAll')); return native.matchAll.call(this, regexp); },
    search(regexp) { refuseLong('search', receiver(this, 'search')); return native.search.call(this, regexp); },
  };
  for (const name of Object.keys(stringGuards)) {
    Object.defineProperty(S, name, { value: stringGuards[name], writable: true, enumerable: false, configurable: true });
  }
  const TypedArrayPrototype = Object.getPrototypeOf(Uint8Array.prototype);
  for (const name of ['sort', 'toSorted']) {
    const nativeSort = TypedArrayPrototype[name];
    if (typeof nativeSort !== 'function') continue;
    Object.defineProperty(TypedArrayPrototype, name, {
      value: { [name](compare) {
        if (this.length > TYPED_SORT_MAX) throw new RangeError('sorting a typed array of ' + this.length + ' elements is refused (the most is ' + TYPED_SORT_MAX + ')');
        return nativeSort.call(this, compare);
      } }[name],
      writable: true, enumerable: false, configurable: true,
    });
  }

  // Nothing the garbage collector calls back may exist: a FinalizationRegistry callback runs
  // whenever a collection happens, which can be inside another caller's execution; WeakRef lets a
  // program observe collections caused by others. Neither can be made safe, so neither exists.
  delete globalThis.WeakRef;
  delete globalThis.FinalizationRegistry;
  // No code is made from text: no eval, no Function, GeneratorFunction, AsyncFunction or
  // AsyncGeneratorFunction constructor (reachable through any function's .constructor). A
  // program's code is exactly its source, which the sandbox can inspect before it runs.
  delete globalThis.eval;
  const noCodeFromText = function Function() {
    throw new EvalError('code cannot be made from text in a tool program (no eval, no new Function)');
  };
  for (const make of [() => function () {}, () => function* () {}, () => async function () {}, () => async function* () {}]) {
    const proto = Object.getPrototypeOf(make());
    const tamed = function () { return noCodeFromText(); };
    Object.defineProperty(tamed, 'prototype', { value: proto, writable: false, enumerable: false, configurable: false });
    Object.defineProperty(proto, 'constructor', { value: tamed, writable: false, enumerable: false, configurable: false });
  }
  Object.defineProperty(globalThis, 'Function', { value: Function.prototype.constructor, writable: false, enumerable: false, configurable: false });

  // invoke() is the host's alone: it is the prelude's result, never a global (a program that could
  // call it would skip the reseed of Math.random and read the state the previous caller left).
  const api = { graphql, cel, tools, fail, cancelled, decimal, money, console };
  for (const name of Object.keys(api)) {
    Object.defineProperty(globalThis, name, { value: api[name], writable: false, enumerable: false, configurable: false });
  }

  // Deep-freeze everything reachable from the global object, and the intrinsics only reachable
  // through instances (iterator, generator and async prototypes).
  const seen = new Set();
  const stack = [globalThis, Decimal, Money];
  // Intrinsics reachable only through instances: generators, async functions, every kind of iterator.
  const instances = [
    () => function* () {}, () => async function () {}, () => async function* () {}, () => (function* () {})(), () => (async function* () {})(),
    () => [][Symbol.iterator](), () => ''[Symbol.iterator](), () => new Map().entries(), () => new Set().values(),
    () => /x/[Symbol.matchAll](''), () => [].values().map((x) => x), () => [].values().filter(() => true),
    () => [].values().take(0), () => [].values().drop(0), () => [].values().flatMap((x) => [x]),
    () => Iterator.from({ next() { return { done: true }; } }), () => Iterator.concat([]), () => Promise.resolve(), () => new Proxy({}, {}), () => new ArrayBuffer(1), () => new DataView(new ArrayBuffer(1)),
    () => new Uint8Array(1), () => Object.getPrototypeOf(Uint8Array), () => new AggregateError([]), () => Symbol(),
  ];
  for (const make of instances) {
    try {
      const value = make();
      stack.push(value, Object.getPrototypeOf(value), Object.getPrototypeOf(Object.getPrototypeOf(value)));
    } catch (e) {
      // A feature this build lacks has nothing to freeze.
    }
  }
  while (stack.length > 0) {
    const o = stack.pop();
    if (o === null || (typeof o !== 'object' && typeof o !== 'function') || seen.has(o)) continue;
    seen.add(o);
    for (const key of Reflect.ownKeys(o)) {
      const d = Object.getOwnPropertyDescriptor(o, key);
      if (d === undefined) continue;
      if ('value' in d) stack.push(d.value);
      else { stack.push(d.get); stack.push(d.set); }
    }
    stack.push(Object.getPrototypeOf(o));
    try {
      Object.freeze(o);
    } catch (e) {
      // A typed array instance made above to reach its prototypes cannot be frozen; it is garbage.
    }
  }
  return invoke;
})();
`;
