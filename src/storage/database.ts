import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { addText } from '../decimal.js';
import { EngineError } from '../errors.js';
import { isPostgresUrl, PgConnection } from './pg/connection.js';
import { migratePostgres, postgresRowidTables } from './pg/schema.js';
import { MIGRATIONS } from './migrations.js';
import { migrate, schemaVersion } from './migrate.js';

export { migrate, schemaVersion };
import { type BatchOutcome, TransactionManager } from './transaction.js';

export type Db = Database.Database;

/** How much of what was acknowledged survives a power cut (see docs/guides/operations.md, "Durability"). */
export type Durability = 'normal' | 'full';

export interface OpenOptions {
  /** File path, or ':memory:'. Parent folders are created. */
  path: string;
  busyTimeoutMs: number;
  /** The log size, in pages, at which a commit checkpoints (SQLite's default is 1000). */
  walAutocheckpointPages?: number | undefined;
  /**
   * journal_size_limit: when this connection restarts the write-ahead log, it truncates the file
   * to this many bytes, so a log that grew past it (a burst, readers holding a checkpoint off) does
   * not keep its size on disk. Left out, SQLite's default (never truncated).
   */
  walBytesKept?: number | undefined;
  /** 'normal' (the default: synchronous=NORMAL) or 'full' (synchronous=FULL: every COMMIT synced). */
  durability?: Durability | undefined;
  /**
   * Open an existing file for reading only (see openReadOnly): nothing in it is created, migrated or
   * changed, not even its journal mode. For the read pool's connections beside the one writer.
   */
  readOnly?: boolean | undefined;
}

/** Open SQLite with explicit pragmas and bring its schema up to date (or, readOnly, check it is). */
export function openDatabase(options: OpenOptions): Db {
  if (isPostgresUrl(options.path)) return openPostgres(options);
  if (options.readOnly) return openReadOnly(options);
  if (options.path !== ':memory:') mkdirSync(dirname(options.path), { recursive: true });
  let db: Db;
  try {
    db = new Database(options.path);
  } catch (error) {
    throw new EngineError(
      'BAD_REQUEST',
      `cannot open the database ${JSON.stringify(options.path)}: ${(error as Error).message}`,
      { hint: 'Pass the path of a Tally database file (or of one to create) that this process may write.' },
    );
  }
  try {
    // Before anything is changed in it (WAL mode, tables): is this a database Tally may use?
    checkOwnership(db, options.path);
    // WAL: readers never block the writer. NORMAL: a commit is durable once the WAL is synced at a
    // checkpoint; a power cut can lose the last commits but never corrupts the database. FULL: every
    // COMMIT syncs the WAL first (one sync per group of a group commit), so nothing acknowledged is lost.
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${options.durability === 'full' ? 'FULL' : 'NORMAL'}`);
    db.pragma('foreign_keys = ON');
    db.pragma(`busy_timeout = ${Math.trunc(options.busyTimeoutMs)}`);
    // A 64 MiB page cache keeps the hot index pages (balances, accounts, recent entries) in memory;
    // the default 2 MiB makes every random index page a read from the OS.
    db.pragma('cache_size = -65536');
    db.pragma('temp_store = MEMORY');
    if (options.walAutocheckpointPages !== undefined)
      db.pragma(`wal_autocheckpoint = ${Math.trunc(options.walAutocheckpointPages)}`);
    if (options.walBytesKept !== undefined) db.pragma(`journal_size_limit = ${Math.trunc(options.walBytesKept)}`);
    registerFunctions(db);
    migrate(db, MIGRATIONS);
  } catch (error) {
    db.close();
    throw error;
  }
  return db;
}

/**
 * A read-only connection to a database a writer (another engine, in this process or another) keeps
 * in WAL mode: each read transaction sees the last commit made before it began (a WAL snapshot)
 * and never waits for the writer, nor the writer for it. The file must exist with exactly this
 * Tally's schema version, since a reader cannot migrate it; the writer set WAL, which is a property
 * of the file. Pragmas are the writer's where they mean anything for a reader (busy timeout, page
 * cache, temp store); writes are refused by SQLite itself (SQLITE_READONLY) and, above it, by
 * ReadOnlyTransactions.
 */
function openReadOnly(options: OpenOptions): Db {
  const quoted = JSON.stringify(options.path);
  if (options.path === ':memory:' || options.path === '') {
    throw new EngineError('BAD_REQUEST', `a read-only engine reads a database file, not ${quoted}`, {
      hint: 'Pass the path of the file the writer engine uses.',
    });
  }
  let db: Db;
  try {
    db = new Database(options.path, { readonly: true, fileMustExist: true });
  } catch (error) {
    throw new EngineError(
      'BAD_REQUEST',
      `cannot open the database ${quoted} for reading: ${(error as Error).message}`,
      {
        hint: 'Pass the path of an existing Tally database file; a read-only engine neither creates nor migrates one (start the writer engine on it first).',
      },
    );
  }
  try {
    checkOwnership(db, options.path);
    const version = schemaVersion(db);
    const latest = MIGRATIONS.at(-1)?.version ?? 0;
    if (version !== latest) {
      throw new EngineError(
        'BAD_REQUEST',
        `${quoted} has Tally schema version ${version}, this Tally's is ${latest}: it was written by another Tally version, and a read-only engine does not migrate`,
        {
          hint:
            version < latest
              ? 'Start the writer engine of this Tally on it first (it migrates the file), then the readers.'
              : 'Run the Tally version that wrote it.',
        },
      );
    }
    const mode = db.pragma('journal_mode', { simple: true }) as string;
    if (mode !== 'wal') {
      throw new EngineError(
        'BAD_REQUEST',
        `${quoted} is in journal mode ${JSON.stringify(mode)}, not WAL: its readers would wait for its writer`,
        {
          hint: 'Open it with a writer engine first: it puts the file in WAL mode.',
        },
      );
    }
    db.pragma('foreign_keys = ON');
    db.pragma(`busy_timeout = ${Math.trunc(options.busyTimeoutMs)}`);
    db.pragma('cache_size = -65536');
    db.pragma('temp_store = MEMORY');
    registerFunctions(db);
  } catch (error) {
    db.close();
    throw error;
  }
  return db;
}

/** What a write on a read-only connection gets. */
export function readOnlyRefusal(cause?: unknown): EngineError {
  return new EngineError(
    'BAD_REQUEST',
    'this connection only reads: mutations and other writes go to the writer engine',
    {
      hint: 'Send mutations to the writer (the server does); a read-only engine answers queries only.',
      ...(cause === undefined ? {} : { cause }),
    },
  );
}

/** SQLite refused a write because the connection (or the file) is read-only. */
function isReadOnlyError(error: unknown): boolean {
  for (
    let e: unknown = error, depth = 0;
    e && typeof e === 'object' && depth < 3;
    e = (e as { cause?: unknown }).cause, depth++
  ) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('SQLITE_READONLY')) return true;
  }
  return false;
}

/**
 * The transactions of a read-only engine. A read runs as on the writer: BEGIN (deferred: the
 * snapshot is taken at its first read, and no lock is held that the writer waits for), with the
 * record caches checked against PRAGMA data_version. A write transaction (a mutation, a batch,
 * ensureAdmin, a queue worker's attempt) is refused before it begins, so it writes nothing; a
 * write SQLite refuses inside a read (SQLITE_READONLY) ends that read with the same BAD_REQUEST.
 */
export class ReadOnlyTransactions extends TransactionManager {
  override run<T>(mode: 'read' | 'write', fn: () => { value: T; commit: boolean }): T {
    if (mode === 'write') throw readOnlyRefusal();
    try {
      return super.run('read', fn);
    } catch (error) {
      throw isReadOnlyError(error) ? readOnlyRefusal(error) : error;
    }
  }

  override runBatch<T>(units: ReadonlyArray<() => { value: T; commit: boolean }>): BatchOutcome<T>[] {
    return units.map(() => ({ status: 'failed', error: readOnlyRefusal() }));
  }
}

/**
 * Tally's databases say so in `user_version`: refuse a file of another program (tables but no
 * version), one written by a newer Tally, and a file that is not SQLite at all.
 */
function checkOwnership(db: Db, path: string): void {
  let version: number;
  let tables: number;
  try {
    version = schemaVersion(db);
    tables = db
      .prepare<[], number>("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
      .pluck()
      .get() as number;
  } catch (error) {
    throw new EngineError(
      'BAD_REQUEST',
      `${JSON.stringify(path)} is not a SQLite database (${(error as Error).message})`,
      { hint: 'Pass the path of a Tally database file, or of one to create.' },
    );
  }
  const latest = MIGRATIONS.at(-1)?.version ?? 0;
  if (version === 0 && tables > 0) {
    throw new EngineError(
      'BAD_REQUEST',
      `${JSON.stringify(path)} is a SQLite database of another program (${tables} table${tables === 1 ? '' : 's'}, no Tally schema version); it was left untouched`,
      {
        hint: 'Pass the path of a Tally database file, or of one to create.',
      },
    );
  }
  if (version > latest) {
    throw new EngineError(
      'BAD_REQUEST',
      `${JSON.stringify(path)} has Tally schema version ${version}, newer than this Tally's (${latest}); it was left untouched`,
      {
        hint: 'Run a newer Tally against this database.',
      },
    );
  }
}

/**
 * SQL functions the statements use. `dec_add(a, b)` adds two exact decimal strings; PostgreSQL would
 * do the same with NUMERIC `a + b`.
 */
function registerFunctions(db: Db): void {
  db.function('dec_add', { deterministic: true, varargs: false }, decAdd);
}

/**
 * `a + b` for decimal strings at the larger of their scales ("0" + "21.00" = "21.00"; see addText,
 * whose fast path on short decimals does most of them without decimal.js).
 */
export function decAdd(a: unknown, b: unknown): unknown {
  if (b === '0') return a;
  if (a === '0') return b;
  return addText(String(a), String(b));
}

/**
 * A PostgreSQL database (issue 19, in progress): one connection, its schema brought to this
 * Tally's. Typed as the SQLite connection it stands in for (PgConnection has the part of its API
 * the engine uses).
 */
function openPostgres(options: OpenOptions): Db {
  if (options.readOnly)
    throw new EngineError('BAD_REQUEST', 'a read-only PostgreSQL connection is not supported yet', {
      hint: 'Open it read-write.',
    });
  const connection = new PgConnection(options.path);
  try {
    migratePostgres(connection);
    connection.rowidTables = postgresRowidTables();
    connection.pragma(`busy_timeout = ${Math.trunc(options.busyTimeoutMs)}`);
  } catch (error) {
    connection.close();
    throw error;
  }
  return connection as unknown as Db;
}
