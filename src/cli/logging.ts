import { createLogger, parseLogLevel } from '../log.js';
import type { Logger } from '../log.js';

/**
 * The logger of `tally serve` and `tally worker`: level from --log-level, else TALLY_LOG_LEVEL,
 * else info; JSON lines on stdout, or readable lines when stdout is a terminal. A level that is not
 * one is refused (`usageError` makes the error the command reports), never ignored.
 */
export function cliLogger(option: unknown, usageError: (message: string) => Error): Logger {
  const text = option === undefined ? process.env.TALLY_LOG_LEVEL : String(option);
  let level;
  try {
    level = text === undefined || text === '' ? 'info' : parseLogLevel(text);
  } catch (error) {
    throw usageError(`${option === undefined ? 'TALLY_LOG_LEVEL' : '--log-level'}: ${(error as Error).message}`);
  }
  return createLogger({ level, destination: process.stdout, pretty: process.stdout.isTTY === true });
}
