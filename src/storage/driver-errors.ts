import { EngineError } from '../errors.js';

/** Map better-sqlite3's errors to engine errors; engine errors pass through unchanged. */
export function mapDriverError(error: unknown): unknown {
  if (error instanceof EngineError) return error;
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !code.startsWith('SQLITE_')) return error;
  const message = error instanceof Error ? error.message : String(error);
  if (code === 'SQLITE_BUSY' || code.startsWith('SQLITE_BUSY_') || code === 'SQLITE_LOCKED') {
    return new EngineError('BUSY', `the database is busy: ${message}`, { cause: error });
  }
  if (code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY') {
    return new EngineError('ALREADY_EXISTS', `a record with this key already exists (${message})`, { cause: error });
  }
  if (code === 'SQLITE_CONSTRAINT_FOREIGNKEY') {
    return new EngineError('NOT_FOUND', `a referenced record does not exist (${message})`, { cause: error });
  }
  if (code === 'SQLITE_FULL' || code === 'SQLITE_TOOBIG') {
    return new EngineError('LIMIT_EXCEEDED', `the database refused the write: ${message}`, { cause: error });
  }
  return new EngineError('INTERNAL', `database error ${code}: ${message}`, { cause: error });
}
