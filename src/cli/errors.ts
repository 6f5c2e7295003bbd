// What the CLI's commands throw, kept apart from them so that `--help` and usage errors load nothing else.

/** Exit codes that mean something: 0 ok, 1 the operation or execution failed, 2 usage. */
export const EXIT = { ok: 0, failed: 1, usage: 2 } as const;

/** A command used wrongly: the CLI prints the message and that command's usage, and exits 2. */
export class UsageError extends Error {}

/**
 * An operation that failed (exit 1): `code` is the engine's error code when the server gave one
 * (shown as `CODE: message`), or one of the CLI's own (NOT_FOUND, UNAVAILABLE, FAILED).
 */
export class OperationError extends Error {
  constructor(
    message: string,
    readonly code = 'FAILED',
    readonly hint?: string,
    /** Whether the text output starts with the code (it does for errors the server returned). */
    readonly showCode = false,
  ) {
    super(message);
  }
}
