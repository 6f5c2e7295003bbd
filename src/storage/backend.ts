import type { Database } from 'better-sqlite3';

/**
 * What differs by backend, asked by the few statements whose SQL differs by dialect (each beside
 * its twin). A leaf module: the statements modules, the schema and the engine all import it.
 */

/** Whether `db` is a PostgreSQL connection (PgConnection says so; better-sqlite3's Database does not). */
export function isPostgres(db: Database): boolean {
  return (db as { dialect?: string }).dialect === 'postgres';
}

/** PostgreSQL: the entry seqs one posting takes at once (the increment of the sequence tally_entry_seq_blocks). */
export { ENTRY_SEQ_BLOCK } from '../limits.js';
