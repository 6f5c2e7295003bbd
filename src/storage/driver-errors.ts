import { EngineError, limitExceeded } from '../errors.js';

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
  // The database's own bounds, not Tally's: the disk or max_page_count (FULL), SQLITE_MAX_LENGTH (TOOBIG).
  if (code === 'SQLITE_FULL' || code === 'SQLITE_TOOBIG') {
    return limitExceeded(
      code === 'SQLITE_FULL' ? 'databaseSizeMax' : 'databaseValueBytesMax',
      null,
      null,
      `the database refused the write: ${message}`,
      { cause: error, details: { driverCode: code } },
    );
  }
  return new EngineError('INTERNAL', `database error ${code}: ${message}`, { cause: error });
}

/**
 * PostgreSQL's SQLSTATEs of a transaction that lost a race and may run again: 40001
 * serialization_failure, 40P01 deadlock_detected, 55P03 lock_not_available (a lock wait past
 * lock_timeout). The one list: the connection dooms its transaction on them, the transaction
 * manager runs it again, and a request that ran out of tries gets BUSY.
 */
const CONFLICT_SQLSTATES: ReadonlySet<string> = new Set(['40001', '40P01', '55P03']);

/** Is this SQLSTATE a conflict (CONFLICT_SQLSTATES)? */
export function isConflictSqlState(sqlState: string): boolean {
  return CONFLICT_SQLSTATES.has(sqlState);
}

/** A PostgreSQL conflict (CONFLICT_SQLSTATES), as the driver threw it (code PG_<sqlstate>) or as the cause of a mapped error. */
export function isConflict(error: unknown): boolean {
  for (
    let e: unknown = error, depth = 0;
    e && typeof e === 'object' && depth < 4;
    e = (e as { cause?: unknown }).cause, depth++
  ) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('PG_') && isConflictSqlState(code.slice(3))) return true;
  }
  return false;
}

/** PostgreSQL's errors by SQLSTATE (src/storage/pg/connection.ts), as SQLite's above. */
function mapPostgresError(sqlState: string, error: unknown): EngineError {
  const message = error instanceof Error ? error.message : String(error);
  if (isConflictSqlState(sqlState)) {
    return new EngineError('BUSY', `the database is busy: ${message}`, { cause: error });
  }
  if (sqlState === '23505')
    return new EngineError('ALREADY_EXISTS', `a record with this key already exists (${message})`, { cause: error });
  if (sqlState === '23503')
    return new EngineError('NOT_FOUND', `a referenced record does not exist (${message})`, { cause: error });
  // data_exception: a value the database cannot hold (a NUL character, a number out of range).
  if (sqlState.startsWith('22'))
    return new EngineError('BAD_REQUEST', `the database refused a value: ${message}`, { cause: error });
  // insufficient_resources, program_limit_exceeded: the database's own bounds, not Tally's.
  if (sqlState.startsWith('53') || sqlState.startsWith('54')) {
    return limitExceeded('databaseResourcesMax', null, null, `the database refused the work: ${message}`, {
      cause: error,
      details: { driverCode: `PG_${sqlState}` },
    });
  }
  return new EngineError('INTERNAL', `database error ${sqlState}: ${message}`, { cause: error });
}
