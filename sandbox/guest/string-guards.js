// @ts-check

// QuickJS searches a string for a string naively (text × pattern steps) inside one native call
// the interrupt cannot stop: 'a'×170,000 searched for 'a'×85,000+'b' held the process 7 s. Past
// SEARCH_WORK_MAX steps the search runs here instead, in linear time (Knuth-Morris-Pratt) and in
// JavaScript, where the deadline stops it. RegExp work on strings longer than STRING_LENGTH_MAX,
// and sorting typed arrays longer than TYPED_SORT_MAX, are refused: native, long, uninterruptible.
const SEARCH_WORK_MAX = 1 << 20;
const STRING_LENGTH_MAX = 1 << 23;
const TYPED_SORT_MAX = 1 << 20;
const S = String.prototype;
const native = {
  includes: S.includes,
  indexOf: S.indexOf,
  lastIndexOf: S.lastIndexOf,
  split: S.split,
  replace: S.replace,
  replaceAll: S.replaceAll,
  match: S.match,
  matchAll: S.matchAll,
  search: S.search,
  slice: S.slice,
};
/** @param {any} x */
const isRegExpLike = (x) =>
  x !== null && (typeof x === 'object' || typeof x === 'function') && x[Symbol.match] !== undefined;
/** @param {unknown} p @param {number} length */
const toPosition = (p, length) => {
  const n = Number(p);
  if (Number.isNaN(n)) return 0;
  return n < 0 ? 0 : n > length ? length : Math.trunc(n);
};
// The failure table of the pattern, then the first match at or after 'from' (-1 if none).
/**
 * @param {string} text
 * @param {string} pattern
 * @param {number} from
 */
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
/** @param {string} text @param {string} pattern */
const heavy = (text, pattern) => text.length * pattern.length > SEARCH_WORK_MAX;
/** @param {unknown} self @param {string} name */
const receiver = (self, name) => {
  if (self === null || self === undefined) throw new TypeError('String.prototype.' + name + ' called on ' + self);
  return String(self);
};
/**
 * @param {string} replacement
 * @param {string} matched
 * @param {number} position
 * @param {string} text
 */
function substitute(replacement, matched, position, text) {
  let out = '';
  for (let i = 0; i < replacement.length; i++) {
    const c = replacement[i];
    const next = replacement[i + 1];
    if (c !== '$' || next === undefined) {
      out += c;
      continue;
    }
    if (next === '$') out += '$';
    else if (next === '&') out += matched;
    else if (next === '\x60') out += native.slice.call(text, 0, position);
    else if (next === "'") out += native.slice.call(text, position + matched.length);
    else {
      out += c;
      continue;
    }
    i++;
  }
  return out;
}
/**
 * @param {string} text
 * @param {number[]} positions
 * @param {number} length
 * @param {unknown} replaceValue
 */
function replaceAt(text, positions, length, replaceValue) {
  let out = '';
  let last = 0;
  for (const p of positions) {
    const matched = native.slice.call(text, p, p + length);
    out +=
      native.slice.call(text, last, p) +
      (typeof replaceValue === 'function'
        ? String(replaceValue(matched, p, text))
        : substitute(String(replaceValue), matched, p, text));
    last = p + length;
  }
  return out + native.slice.call(text, last);
}
/** @param {string} name @param {string} text */
const refuseLong = (name, text) => {
  if (text.length > STRING_LENGTH_MAX) {
    throw new RangeError(
      'String.prototype.' +
        name +
        ' with a RegExp on a string of ' +
        text.length +
        ' characters is refused (the most is ' +
        STRING_LENGTH_MAX +
        ')',
    );
  }
};
/** @type {Record<string, (this: unknown, ...args: any[]) => unknown>} */
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
    /** @type {string[]} */
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
    for (let i = kmpIndexOf(text, pattern, 0); i !== -1; i = kmpIndexOf(text, pattern, i + pattern.length))
      positions.push(i);
    return replaceAt(text, positions, pattern.length, replaceValue);
  },
  match(regexp) {
    refuseLong('match', receiver(this, 'match'));
    return native.match.call(this, regexp);
  },
  matchAll(regexp) {
    refuseLong('matchAll', receiver(this, 'matchAll'));
    return native.matchAll.call(this, regexp);
  },
  search(regexp) {
    refuseLong('search', receiver(this, 'search'));
    return native.search.call(this, regexp);
  },
};
for (const name of Object.keys(stringGuards)) {
  Object.defineProperty(S, name, { value: stringGuards[name], writable: true, enumerable: false, configurable: true });
}
const TypedArrayPrototype = Object.getPrototypeOf(Uint8Array.prototype);
for (const name of ['sort', 'toSorted']) {
  const nativeSort = TypedArrayPrototype[name];
  if (typeof nativeSort !== 'function') continue;
  Object.defineProperty(TypedArrayPrototype, name, {
    value: {
      /** @this {ArrayLike<unknown>} @param {unknown} compare */
      [name](compare) {
        if (this.length > TYPED_SORT_MAX)
          throw new RangeError(
            'sorting a typed array of ' + this.length + ' elements is refused (the most is ' + TYPED_SORT_MAX + ')',
          );
        return nativeSort.call(this, compare);
      },
    }[name],
    writable: true,
    enumerable: false,
    configurable: true,
  });
}
