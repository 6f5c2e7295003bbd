import type { Db } from './database.js';

/** The tables whose rows the caches copy. */
export const CACHED_TABLES = ['journals', 'tran_codes', 'tran_code_versions', 'triggers', 'action_versions'] as const;

/**
 * When cached copies of rows may have gone stale. The number moves whenever a row that some cache
 * copies may have changed: this connection wrote one (a TEMP trigger on each cached table bumps it,
 * see watchCachedTables, whatever code made the write), a transaction or a savepoint rolled back
 * (writes the caches saw are undone), or another connection committed (`PRAGMA data_version`
 * moved; checked once per transaction). Caches compare it, and drop everything they hold when it
 * moved. Writes to cached tables are rare next to reads of them, so dropping everything is cheap.
 *
 * Caches are used only while `active`: inside a transaction the TransactionManager opened, where all
 * three kinds of change are seen. Code that works on the connection directly (a caller's own
 * `db.transaction(...)` around ledger calls, whose rollback nothing here sees) reads through to
 * the database.
 */
export class CacheEpoch {
  private current = 0;
  /** Set by the TransactionManager for the life of each transaction it runs. */
  active = false;

  get value(): number {
    return this.current;
  }

  bump(): void {
    this.current++;
  }
}

/**
 * Rows by key, valid for one epoch, at most `entriesMax` of them (the whole map is dropped when
 * full: the rows cached are few and hot, e.g. journals and tran codes by code).
 */
export class RecordCache<V> {
  private readonly rows = new Map<string, V>();
  private epoch = -1;

  constructor(
    private readonly clock: CacheEpoch,
    private readonly entriesMax: number,
  ) {}

  get size(): number {
    return this.rows.size;
  }

  /** The cached row, or `load(key)` (cached unless undefined); always `load(key)` while not active. */
  get(key: string, load: (key: string) => V | undefined): V | undefined {
    if (!this.clock.active) return load(key);
    if (this.epoch !== this.clock.value) {
      this.rows.clear();
      this.epoch = this.clock.value;
    }
    const cached = this.rows.get(key);
    if (cached !== undefined) return cached;
    const loaded = load(key);
    if (loaded === undefined || this.entriesMax === 0) return loaded;
    if (this.rows.size >= this.entriesMax) this.rows.clear();
    this.rows.set(key, loaded);
    return loaded;
  }
}

/**
 * Bump `epoch` whenever this connection inserts, updates or deletes a row of a cached table: TEMP
 * triggers (they belong to this connection and are never stored in the file) call a function
 * registered on it. Other connections' writes are seen through `PRAGMA data_version` instead.
 */
export function watchCachedTables(db: Db, epoch: CacheEpoch): void {
  db.function('tally_cached_table_changed', { deterministic: false }, () => {
    epoch.bump();
    return null;
  });
  for (const table of CACHED_TABLES) {
    for (const op of ['INSERT', 'UPDATE', 'DELETE']) {
      db.exec(`CREATE TEMP TRIGGER tally_cache_${table}_${op.toLowerCase()} AFTER ${op} ON main.${table}
        BEGIN SELECT tally_cached_table_changed(); END`);
    }
  }
}
