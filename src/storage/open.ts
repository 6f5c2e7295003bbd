import type { Limits } from '../limits.js';
import { Checkpointer } from './checkpointer.js';
import { type Db, type Durability, openDatabase, ReadOnlyTransactions } from './database.js';
import { isPostgresUrl } from './pg/connection.js';
import { CacheEpoch, watchCachedTables, watchDataTables, watchToolTables } from './record-cache.js';
import { TransactionManager } from './transaction.js';

export const DEFAULT_CHECKPOINT_INTERVAL_MS = 25;
const SQLITE_WAL_AUTOCHECKPOINT_PAGES = 1000;

/** How the engine's storage is opened (the storage half of EngineOptions). */
export interface StorageOptions {
  path?: string;
  /** The limits the operator set explicitly (walAutocheckpointPages left out keeps SQLite's own). */
  explicit?: Partial<Limits>;
  checkpointIntervalMs?: number;
  readOnly?: boolean;
  durability?: Durability;
}

/** An open database with what watches it: the connection, its transactions and the change counters. */
export interface Storage {
  path: string;
  onPostgres: boolean;
  db: Db;
  transactions: TransactionManager;
  epoch: CacheEpoch;
  /** Counts commits that wrote actions or clients. */
  toolsChange: ReturnType<typeof watchToolTables>;
  /** Counts data writes (results computed from them expire). */
  dataWrites: ReturnType<typeof watchDataTables>;
  close(): void;
}

/**
 * Open the database at `path` (SQLite file, ':memory:' or a postgres:// URL) for the engine: the
 * connection with its pragmas, the background WAL checkpointer (SQLite files), the transaction
 * manager with its retry bounds, and the watchers the caches key on.
 */
export function openStorage(
  options: StorageOptions,
  limits: Readonly<Limits>,
  logError: (error: unknown) => void,
): Storage {
  const path = options.path ?? ':memory:';
  const onPostgres = isPostgresUrl(path);
  const checkpointIntervalMs = options.checkpointIntervalMs ?? DEFAULT_CHECKPOINT_INTERVAL_MS;
  // SQLite's WAL checkpoints; PostgreSQL (a postgres:// path) checkpoints itself.
  const background = !options.readOnly && path !== ':memory:' && !onPostgres && checkpointIntervalMs > 0;
  // The writer's own threshold: walAutocheckpointPages while the thread copies pages ahead of it;
  // without the thread, SQLite's default unless the limit was set explicitly.
  const ownWalPages = options.explicit?.walAutocheckpointPages;
  const db = openDatabase({
    path,
    busyTimeoutMs: limits.busyTimeoutMs,
    walAutocheckpointPages: background ? limits.walAutocheckpointPages : ownWalPages,
    // A log that grew past twice its checkpoint bound (readers held a checkpoint off, see ReadPool.walHeld) shrinks back at its restart.
    walBytesKept: 2 * limits.walAutocheckpointPages * 4096,
    readOnly: options.readOnly,
    durability: options.durability,
  });
  const checkpointer = background
    ? new Checkpointer(path, checkpointIntervalMs, logError, () => {
        // The thread ended by itself: the writer checkpoints alone, as often as SQLite would.
        if (db.open && ownWalPages === undefined) db.pragma(`wal_autocheckpoint = ${SQLITE_WAL_AUTOCHECKPOINT_PAGES}`);
      })
    : null;
  const epoch = new CacheEpoch();
  watchCachedTables(db, epoch);
  const transactions = options.readOnly ? new ReadOnlyTransactions(db, epoch) : new TransactionManager(db, epoch);
  transactions.retriesMax = limits.transactionRetriesMax;
  transactions.retryBudgetMs = limits.requestDeadlineMs;
  transactions.reportCallbackError = logError;
  const toolsChange = watchToolTables(db, () => transactions.dataVersionAtBegin);
  const dataWrites = watchDataTables(db);
  return {
    path,
    onPostgres,
    db,
    transactions,
    epoch,
    toolsChange,
    dataWrites,
    close: () => {
      checkpointer?.stop();
      db.close();
    },
  };
}
