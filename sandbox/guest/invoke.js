// @ts-check

// One call of a compiled program, and the JSON text of its outcome (the value the prelude returns).

/** @param {unknown} e */
function describe(e) {
  try {
    if (e instanceof Error)
      return {
        message: String(e.name) + ': ' + String(e.message),
        stack: typeof e.stack === 'string' ? e.stack : undefined,
      };
    return { message: 'uncaught ' + (e === null ? 'null' : typeof e) + ': ' + String(e), stack: undefined };
  } catch {
    return { message: 'uncaught value that cannot be described', stack: undefined };
  }
}

// Runs one call of a compiled program; its outcome leaves as JSON text. Only what QuickJS itself
// throws past this (interrupts, out of memory, stack overflow) reaches the host as an exception.
/**
 * @param {(eventJson: string) => unknown} fn the compiled program's wrapper
 * @param {string} eventJson
 * @returns {string}
 */
// biome-ignore lint/correctness/noUnusedVariables: the prelude returns it to the host (prelude.ts).
function invoke(fn, eventJson) {
  /** @type {any} */
  let output;
  pendingSeed = eventJson;
  overBudget = null;
  x0 = 1;
  x1 = 2;
  x2 = 3;
  x3 = 4;
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
    if (json === undefined)
      throw new TypeError(
        'run(event) returned a value that is not JSON (a function, a symbol, or a toJSON that returns undefined)',
      );
    // Refused as it is made, before it is copied out (its UTF-8 bytes are at least its length).
    if (json === null || json.length > OUTPUT_MAX) {
      return stringify({
        error: {
          code: 'LIMIT_EXCEEDED',
          message: 'the output is more than outputBytesMax (' + OUTPUT_MAX + ' bytes of JSON)',
          hint: 'Return less: ids and totals, not whole documents (or raise outputBytesMax in the limits).',
        },
      });
    }
    return '{"output":' + json + '}';
  } catch (/** @type {any} */ e) {
    if (e !== null && typeof e === 'object' && e[FAIL] === true)
      return stringify({ fail: { message: e.message, hint: e.hint, retry: e.retry } });
    if (
      typeof InternalError === 'function' &&
      e instanceof InternalError &&
      (e.message === 'stack overflow' || e.message === 'out of memory' || e.message === 'string too long')
    )
      throw e;
    const d = describe(e);
    if (toolErrors.has(e))
      return stringify({ error: { message: e.message, stack: d.stack, code: e.code, hint: e.hint } });
    return stringify({ error: { message: d.message, stack: d.stack } });
  }
}
