import pino from 'pino';
import { EngineError, quote } from './errors.js';

/**
 * What the engine reports as it works: one structured line per event (an attempt, a trigger start,
 * an admin key change). The engine never decides where lines go or reads the environment; the CLI
 * hands it a logger (pino, createLogger below). Without one it says nothing, so an engine used
 * in-process (and every test) stays quiet.
 */
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(fields: LogFields, message: string): void;
  info(fields: LogFields, message: string): void;
  warn(fields: LogFields, message: string): void;
  error(fields: LogFields, message: string): void;
}

const ignore = (): void => {};

export const silentLogger: Logger = { debug: ignore, info: ignore, warn: ignore, error: ignore };

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** `--log-level` / TALLY_LOG_LEVEL, checked: a typo must not silence the server. */
export function parseLogLevel(text: string): LogLevel {
  const level = text.trim().toLowerCase();
  if ((LOG_LEVELS as readonly string[]).includes(level)) return level as LogLevel;
  throw new EngineError('BAD_REQUEST', `log level ${quote(text)} is not one of ${LOG_LEVELS.join(', ')}`, {
    hint: 'Use --log-level info (the default), debug or warn.',
  });
}

export interface LoggerOptions {
  level?: LogLevel;
  /** Where lines go (the CLI passes process.stdout). */
  destination: { write(text: string): unknown };
  /** One readable line per event (a terminal) instead of JSON (a file, a pipe, a log shipper). */
  pretty?: boolean;
}

/**
 * A pino logger: one JSON object per line (`level` as a name, `time` as ISO 8601, `msg`, then the
 * event's fields), or, on a terminal, the same event as one readable line. Writes are synchronous,
 * so nothing is lost when the process exits.
 */
export function createLogger(options: LoggerOptions): pino.Logger & Logger {
  const { destination } = options;
  const stream = options.pretty ? { write: (line: string) => destination.write(formatPretty(line)) } : destination;
  return pino(
    {
      level: options.level ?? 'info',
      base: null,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    stream,
  );
}

const LEVEL_COLOURS: Record<string, string> = {
  trace: '90',
  debug: '36',
  info: '32',
  warn: '33',
  error: '31',
  fatal: '35',
};

/**
 * `12:04:05.120 INFO  request query Balance ok 3.1 ms principal=admin`: the time of day, the level,
 * the message, then each field as key=value (strings with spaces quoted). Good enough for a person
 * at a terminal; machines read the JSON.
 */
export function formatPretty(line: string, colour = true): string {
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line;
  }
  const { time, level, msg, event: _event, ...fields } = record;
  const clock = typeof time === 'string' ? time.slice(11, 23) : '';
  const label = String(level ?? '')
    .toUpperCase()
    .padEnd(5);
  const code = LEVEL_COLOURS[String(level)];
  const shown = colour && code ? `\u001b[${code}m${label}\u001b[0m` : label;
  const pairs = Object.entries(fields).map(
    ([key, value]) => `${key}=${typeof value === 'string' && !/\s|"/.test(value) ? value : JSON.stringify(value)}`,
  );
  return `${clock} ${shown} ${String(msg ?? '')}${pairs.length ? ` ${pairs.join(' ')}` : ''}\n`;
}
