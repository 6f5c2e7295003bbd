// @ts-check

// JSON text of a value that leaves the program, refusing what JSON.stringify would silently turn
// into null or drop: NaN and ±Infinity (a computation gone wrong), and, inside an output,
// undefined, functions and symbols. The message names the path (output.lines[2].amount).
// Past STRICT_DEPTH_MAX levels (far deeper than the engine's jsonDepthMax, which refuses the
// value anyway) the plain JSON.stringify takes over: the checking replacer costs stack per level.
const STRICT_DEPTH_MAX = 256;
const TOO_DEEP = {};
/**
 * @param {unknown} value
 * @param {string} what
 * @param {boolean} allowUndefined
 * @param {number} [max]
 * @returns {string | undefined}
 */
// biome-ignore lint/correctness/noUnusedVariables: bridge.js and invoke.js write JSON with it.
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
/**
 * @param {unknown} value
 * @param {string} what
 * @param {boolean} allowUndefined
 * @param {number} max
 * @returns {string | undefined}
 */
function checkedStringify(value, what, allowUndefined, max) {
  /** @type {Map<unknown, string>} */
  const paths = new Map();
  /** @type {Map<unknown, number>} */
  const depths = new Map();
  let size = 0;
  /** @this {unknown} @param {string} key @param {any} v */
  return stringify(value, function (key, v) {
    const parent = paths.get(this);
    const path = parent === undefined ? what : isArray(this) ? parent + '[' + key + ']' : parent + '.' + key;
    const type = typeof v;
    if (max !== Infinity) {
      size += (parent !== undefined && !isArray(this) ? key.length + 3 : 1) + (type === 'string' ? v.length + 2 : 0);
      if (size > max) throw TOO_LARGE;
    }
    if (type === 'object' && v !== null) {
      const depth = parent === undefined ? 0 : /** @type {number} */ (depths.get(this)) + 1;
      // Refused here, as the engine would refuse it, before the rest is written out and copied.
      if (depth >= DEPTH_MAX) {
        throw toolError({
          code: 'LIMIT_EXCEEDED',
          message: what + ' is nested more than ' + DEPTH_MAX + ' levels deep (jsonDepthMax)',
          hint: 'Flatten the structure.',
        });
      }
      if (depth > STRICT_DEPTH_MAX) throw TOO_DEEP;
      paths.set(v, path);
      depths.set(v, depth);
    } else if (type === 'number' && !Number.isFinite(v)) {
      throw new TypeError(
        path + ' is ' + v + ', which JSON cannot hold (it would become null); check the arithmetic, or send a string',
      );
    } else if (type === 'bigint') {
      throw new TypeError(path + ' is a BigInt (' + v + '); send it as a string or a decimal');
    } else if (
      parent !== undefined &&
      !allowUndefined &&
      (type === 'undefined' || type === 'function' || type === 'symbol')
    ) {
      throw new TypeError(
        path +
          ' is ' +
          (type === 'undefined' ? 'undefined' : 'a ' + type) +
          ', which JSON cannot hold (it would be dropped or become null); use null, or leave the property out',
      );
    }
    return v;
  });
}
