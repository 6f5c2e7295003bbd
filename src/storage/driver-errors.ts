import { EngineError } from '../errors.js';

/** Map the database driver's errors (better-sqlite3's, or PostgreSQL's by SQLSTATE) to engine errors; engine errors pass through unchanged. */
export function mapDriverError(error: unknown): unknown {
  if (error instanceof EngineError) return error;
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code.startsWith('PG_')) return mapPostgresError(code.slice(3), error);
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

/** PostgreSQL's errors by SQLSTATE (src/storage/pg/connection.ts), as SQLite's above. */
function mapPostgresError(sqlState: string, error: unknown): EngineError {
  const message = error instanceof Error ? error.message : String(error);
  // serialization_failure, deadlock_detected, lock_not_available: the request may be sent again.
  if (sqlState === '40001' || sqlState === '40P01' || sqlState === '55P03') {
    return new EngineError('BUSY', `the database is busy: ${message}`, { cause: error });
  }
  if (sqlState === '23505')
    return new EngineError('ALREADY_EXISTS', `a record with this key already exists (${message})`, { cause: error });
  if (sqlState === '23503')
    return new EngineError('NOT_FOUND', `a referenced record does not exist (${message})`, { cause: error });
  // data_exception: a value the database cannot hold (a NUL character, a number out of range).
  if (sqlState.startsWith('22'))
    return new EngineError('BAD_REQUEST', `the database refused a value: ${message}`, { cause: error });
  // insufficient_resources, program_limit_exceeded
  if (sqlState.startsWith('53') || sqlState.startsWith('54')) {
    return new EngineError('LIMIT_EXCEEDED', `the database refused the work: ${message}`, { cause: error });
  }
  return new EngineError('INTERNAL', `database error ${sqlState}: ${message}`, { cause: error });
}
