/**
 * What the engine reports as it works: one structured line per event (an attempt, a trigger start,
 * an admin key change). The engine never decides where lines go or reads the environment; the CLI
 * hands it a logger (pino, see server/logger.ts). Without one it says nothing, so an engine used
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
