import { EngineError } from '../errors.js';
import type { Db } from './database.js';
import { mapDriverError } from './driver-errors.js';

/**
 * What /readyz asks of the database: take the write lock and let it go at once, without waiting
 * (the caller waits between tries, so a busy database never blocks the process). Null when it
 * took it; otherwise why not. Returns at once (null) while this connection holds a transaction.
 */
export function databaseReadiness(db: Db, busyTimeoutMs: number): () => string | null {
  const take = db.prepare('BEGIN IMMEDIATE');
  const release = db.prepare('ROLLBACK');
  return () => {
    if (db.inTransaction) return null;
    try {
      db.pragma('busy_timeout = 0');
      take.run();
      release.run();
      return null;
    } catch (error) {
      const mapped = mapDriverError(error);
      return mapped instanceof EngineError
        ? `${mapped.code}: ${mapped.message}`
        : String((mapped as Error)?.message ?? mapped);
    } finally {
      if (db.inTransaction) release.run();
      db.pragma(`busy_timeout = ${busyTimeoutMs}`);
    }
  };
}
