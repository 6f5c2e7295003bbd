// @ts-check

// The first part of the guest program (prelude.ts joins the parts into one function, evaluated in
// every new context): the API a program calls, built on one host function,
// `__tally_host(op, ...strings) -> envelope JSON`, which is then removed from the global scope.

const host = /** @type {GuestHost} */ (globalThis.__tally_host);
delete globalThis.__tally_host;
// The output's bound (outputBytesMax), given by the host for this context's life.
// biome-ignore lint/correctness/noUnusedVariables: invoke.js bounds the output with it.
const OUTPUT_MAX = typeof globalThis.__tally_output_max === 'number' ? globalThis.__tally_output_max : Infinity;
delete globalThis.__tally_output_max;
// How deep a value may nest (jsonDepthMax, the root is level 1), given the same way.
// biome-ignore lint/correctness/noUnusedVariables: json.js bounds the nesting with it.
const DEPTH_MAX = typeof globalThis.__tally_depth_max === 'number' ? globalThis.__tally_depth_max : Infinity;
delete globalThis.__tally_depth_max;
const FAIL = Symbol('tally.fail');
const stringify = JSON.stringify;
const parse = JSON.parse;
// Errors made here from a failed host call: only these may carry a code out of the sandbox
// (a program cannot forge TIMEOUT or ACCESS_DENIED by setting error.code).
const toolErrors = new WeakSet();

// Every argument crosses as a string ('' for none): the host reads them without type checks.
/** @param {unknown} x */
const text = (x) => (typeof x === 'string' ? x : '');

// Once the engine has refused a call for its budget of calls (callsPerExecutionMax), every later
// call of this run is refused too: thrown here, the same error, without crossing to the host (a
// loop that catches the refusal costs nothing more per turn). Cleared when a run begins.
/** @type {GuestToolError | null} */
let overBudget = null;

// Only the strings an operation takes cross (each is one copy out of the guest): graphql, cel and
// fn (a CEL library function, library.js) two, tool three, cancelled none.
/**
 * @param {'graphql' | 'cel' | 'fn' | 'tool' | 'cancelled'} op
 * @param {unknown} [a]
 * @param {unknown} [b]
 * @param {unknown} [c]
 * @returns {unknown}
 */
function call(op, a, b, c) {
  if (overBudget !== null && op !== 'cancelled' && op !== 'fn') throw overBudget;
  const envelope = parse(
    op === 'tool' ? host(op, text(a), text(b), text(c)) : op === 'cancelled' ? host(op) : host(op, text(a), text(b)),
  );
  if (envelope.ok) return envelope.value;
  const error = toolError(envelope.error);
  const details = envelope.error.details;
  if (details !== null && typeof details === 'object' && details.limit === 'callsPerExecutionMax') overBudget = error;
  throw error;
}

// An error with a code the engine gave (a failed host call), or one of its limits refused here.
/**
 * @param {GuestFailure} failure
 * @returns {GuestToolError}
 */
function toolError(failure) {
  // Error.prototype is frozen, so its inherited 'name' cannot be assigned: define own properties.
  const error = new Error(failure.message);
  /** @param {string} key @param {unknown} value */
  const own = (key, value) =>
    Object.defineProperty(error, key, { value, enumerable: true, writable: false, configurable: false });
  own('name', 'ToolError');
  own('code', failure.code);
  if (failure.hint !== undefined) own('hint', failure.hint);
  if (failure.details !== undefined) own('details', failure.details);
  toolErrors.add(error);
  return /** @type {GuestToolError} */ (error);
}

/** @param {unknown} query @param {unknown} [variables] */
// biome-ignore lint/correctness/noUnusedVariables: harden.js installs it as a global.
function graphql(query, variables) {
  if (typeof query !== 'string') throw new TypeError('graphql(query, variables): query must be a string');
  return call('graphql', query, strictStringify(variables === undefined ? {} : variables, 'variables', true));
}

/** @param {unknown} expression @param {unknown} [bindings] */
// biome-ignore lint/correctness/noUnusedVariables: harden.js installs it as a global.
function cel(expression, bindings) {
  if (typeof expression !== 'string') throw new TypeError('cel(expression, bindings): expression must be a string');
  return call('cel', expression, strictStringify(bindings === undefined ? {} : bindings, 'bindings', true));
}

// Whether cancelExecution was asked of the run this call belongs to: a long program can stop early.
// biome-ignore lint/correctness/noUnusedVariables: harden.js installs it as a global.
function cancelled() {
  return call('cancelled') === true;
}

// status(text): a progress message of this call, recorded on its execution and streamed to its
// caller. Not a call: it never counts toward callsPerExecutionMax; past its own bounds it throws.
/** @param {unknown} message */
// biome-ignore lint/correctness/noUnusedVariables: harden.js installs it as a global.
function status(message) {
  if (typeof message !== 'string') throw new TypeError('status(text): text must be a string');
  const envelope = parse(host('status', message));
  if (!envelope.ok) throw toolError(envelope.error);
}

/**
 * @param {unknown} message
 * @param {unknown} [hint]
 * @param {any} [options] the program's, read with care
 * @returns {never}
 */
// biome-ignore lint/correctness/noUnusedVariables: harden.js installs it as a global.
function fail(message, hint, options) {
  const retry = options !== null && typeof options === 'object' && options.retry === false ? false : undefined;
  throw {
    [FAIL]: true,
    message: String(message),
    hint: hint === undefined || hint === null ? undefined : String(hint),
    retry,
  };
}

// tools.<name>(input, {check}) -> the host resolves the name against the declared references.
// biome-ignore lint/correctness/noUnusedVariables: harden.js installs it as a global.
const tools = new Proxy(Object.freeze({}), {
  get(_, name) {
    if (typeof name !== 'string') return undefined;
    /** @param {unknown} [input] @param {unknown} [options] */
    return function (input, options) {
      return call(
        'tool',
        name,
        strictStringify(input === undefined ? {} : input, 'tools.' + name + ' input', true),
        stringify(options === undefined ? {} : options),
      );
    };
  },
  has() {
    return false;
  },
  set() {
    return false;
  },
  defineProperty() {
    return false;
  },
});

/** @param {unknown} value */
function show(value) {
  if (typeof value === 'string') return value;
  try {
    return stringify(value, (_key, v) => (typeof v === 'bigint' ? v.toString() : v));
  } catch {
    return String(value);
  }
}
/** @type {{ log(...args: unknown[]): void, info?: unknown, warn?: unknown, error?: unknown }} */
const console = {
  log(...args) {
    host('log', args.map(show).join(' '));
  },
};
console.info = console.log;
console.warn = console.log;
console.error = console.log;
