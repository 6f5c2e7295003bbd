import { readFileSync } from 'node:fs';
import { OperationError, UsageError } from './errors.js';

/*
 * A command's arguments: files it names, JSON options (the text or @file), positive integers,
 * UUIDs, and the one positional argument a command takes.
 */

/** The text of a file named on the command line; a missing one is said plainly. */
export function readArgFile(path: string, what: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT')
      throw new OperationError(
        `${what} ${JSON.stringify(path)}: no such file`,
        'NOT_FOUND',
        'Check the path (it is relative to the current folder).',
      );
    throw new OperationError(`${what} ${JSON.stringify(path)}: cannot be read: ${code ?? (error as Error).message}`);
  }
}

/** A JSON option: the text itself, or @file. */
export function parseJsonOption(value: string | boolean | string[] | undefined, name: string): unknown {
  if (value === undefined) return undefined;
  const text = String(value).startsWith('@') ? readArgFile(String(value).slice(1), `--${name}`) : String(value);
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new UsageError(`--${name} is not valid JSON: ${(error as Error).message}`);
  }
}

export function positiveInt(value: string | boolean | string[] | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1)
    throw new UsageError(`--${name} must be a positive integer, got ${JSON.stringify(value)}`);
  return n;
}

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function requireUuid(value: string | undefined, what: string): string {
  if (value === undefined) throw new UsageError(`say which ${what}`);
  if (!UUID.test(value)) throw new UsageError(`${what} ${JSON.stringify(value)} is not a UUID`);
  return value;
}

/** At most one positional argument, the one a command names. */
export function onlyArg(args: string[], what: string): string | undefined {
  if (args.length > 1)
    throw new UsageError(`one ${what}, got ${args.length}: ${args.map((a) => JSON.stringify(a)).join(' ')}`);
  return args[0];
}
