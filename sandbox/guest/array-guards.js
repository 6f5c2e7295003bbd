// @ts-check

// Generic array methods loop over lengths without checking the interrupt, holes included: refuse
// arrays and array-likes longer than any dense array the sandbox's memory could hold (64 MiB /
// 8-byte values): only a sparse array, or a fake length, can be longer. That covers what a
// method walks: its receiver, concat's arguments, the arrays flat() will open, and what
// flatMap's callback returns.
const LENGTH_MAX = 1 << 23;
const isArray = Array.isArray;
const SPREADABLE = Symbol.isConcatSpreadable;
/** @param {string} name @param {unknown} x */
function checkLength(name, x) {
  if (x === null || x === undefined) return;
  const length = isArray(x) ? x.length : Number(Object(x).length);
  if (length > LENGTH_MAX) {
    throw new RangeError(
      'Array.prototype.' +
        name +
        ' on ' +
        (isArray(x) ? 'an array' : 'an array-like') +
        ' of length ' +
        length +
        ' is refused (the most is ' +
        LENGTH_MAX +
        ')',
    );
  }
}
// The arrays flat(depth) will open, down to depth levels (this walk checks the interrupt).
/**
 * @param {string} name
 * @param {any} array
 * @param {number} depth
 */
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
for (const name of /** @type {const} */ ([
  'indexOf',
  'lastIndexOf',
  'includes',
  'join',
  'reverse',
  'copyWithin',
  'fill',
  'toString',
  'toLocaleString',
  'every',
  'some',
  'forEach',
  'map',
  'filter',
  'reduce',
  'reduceRight',
  'find',
  'findIndex',
  'findLast',
  'findLastIndex',
  'sort',
  'slice',
  'splice',
  'toReversed',
  'toSorted',
  'toSpliced',
  'with',
  'at',
  'flat',
  'flatMap',
  'keys',
  'values',
  'entries',
  'concat',
  'push',
  'pop',
  'shift',
  'unshift',
])) {
  /** @type {unknown} */
  const original = Array.prototype[name];
  if (typeof original !== 'function') continue;
  const guarded = {
    /** @this {unknown} @param {any[]} args */
    [name](...args) {
      checkLength(name, this);
      if (name === 'concat') {
        for (const arg of args)
          if (arg !== null && typeof arg === 'object' && (isArray(arg) || arg[SPREADABLE])) checkLength(name, arg);
      } else if (name === 'flat') {
        checkNested(name, this, args[0] === undefined ? 1 : Number(args[0]));
      } else if (name === 'flatMap' && typeof args[0] === 'function') {
        const [fn, thisArg] = args;
        args = [
          /** @param {unknown[]} values */
          function (...values) {
            const result = fn.apply(thisArg, values);
            if (isArray(result)) checkLength(name, result);
            return result;
          },
        ];
      }
      return original.apply(this, args);
    },
  }[name];
  Object.defineProperty(Array.prototype, name, {
    value: guarded,
    writable: true,
    enumerable: false,
    configurable: true,
  });
}
