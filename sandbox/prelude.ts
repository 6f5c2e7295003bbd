import { readFileSync } from 'node:fs';

/**
 * The guest program's files in sandbox/guest/, in the order they run. Each is a part of one
 * function body: they share its scope (a later part calls what an earlier one made), and invoke.js
 * makes the invoke() the program returns. Every part is plain JavaScript, type-checked against
 * guest/guest.d.ts (`npm run typecheck`) and linted like the rest of the tree.
 */
export const GUEST_FILES = [
  // graphql, cel, tools, fail, cancelled and console over the one host function
  'bridge.js',
  // exact decimals (BigInt coefficient and scale) and money
  'decimal.js',
  // the CEL library (uuid, date, time, timestamp, duration, strings, decimal.*, money.*) over op 'fn'
  'library.js',
  // Math.random, reseeded per call
  'random.js',
  // the JSON text that leaves: no NaN, no undefined, bounded depth and size
  'json.js',
  // one call of a compiled program, and what it returns
  'invoke.js',
  // Array.prototype methods refused on lengths past the sandbox's memory
  'array-guards.js',
  // string search in linear time, RegExp and typed-array sort refused on long inputs
  'string-guards.js',
  // no eval, no WeakRef, the API installed, everything reachable deep-frozen
  'harden.js',
] as const;

/**
 * Guest code evaluated once in every new context, before it is frozen. It builds the whole API a
 * program sees (graphql, cel, tools, fail, decimal, money, the CEL library, console) on top of one host function,
 * `__tally_host(op, ...strings) -> envelope JSON`, then removes that function from the global scope
 * and deep-freezes every object reachable from globalThis, so no call can leave state behind.
 *
 * Read once per process, when this module loads; the files are taken as they are (no escapes are
 * interpreted), and wrapped in one strict function whose value is invoke().
 */
export const PRELUDE = `
(function () {
  'use strict';
${GUEST_FILES.map((name) => readFileSync(new URL(`./guest/${name}`, import.meta.url), 'utf8')).join('\n')}
  return invoke;
})();
`;
