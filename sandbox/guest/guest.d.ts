/**
 * What the guest program (the files beside this one, joined by prelude.ts into one function run in
 * every new QuickJS context) finds in its global scope besides the language: the host function and
 * the bounds the sandbox sets before it runs, and QuickJS's own InternalError.
 */

/** The one host function: `op` and the strings it takes in, the envelope JSON out ('log' returns nothing). */
declare var __tally_host: ((op: string, ...args: string[]) => string) | undefined;
/** outputBytesMax, when the sandbox has one. */
declare var __tally_output_max: number | undefined;
/** jsonDepthMax, when the sandbox has one. */
declare var __tally_depth_max: number | undefined;
/** The CEL library's names and parameter types (JSON), when the sandbox has them (library.js). */
declare var __tally_library: string | undefined;

/** QuickJS throws it for stack overflow, out of memory and over-long strings (and interrupts). */
declare class InternalError extends Error {}

/** The host function's type (it is the prelude's `host` once removed from the global scope). */
type GuestHost = (op: string, ...args: string[]) => string;

/** A failed host call, as the envelope carries it: the engine's code, message, hint and details. */
interface GuestFailure {
  code: string;
  message: string;
  hint?: string;
  details?: unknown;
}

/** The error a failed host call throws in the guest (tally.d.ts's ToolError, as the guest makes it). */
interface GuestToolError extends Error {
  readonly code: string;
  readonly hint?: string;
  readonly details?: unknown;
}

/** Iterator.concat (QuickJS has it; the ES lib of this TypeScript does not yet). */
interface IteratorConstructor {
  concat(...iterables: Iterable<unknown>[]): IteratorObject<unknown, undefined, unknown>;
}
