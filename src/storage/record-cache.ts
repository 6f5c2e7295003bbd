import type { Db } from './database.js';

/** The tables whose rows the caches copy. */
export const CACHED_TABLES = [
  'journals',
  'tran_codes',
  'tran_code_versions',
  'triggers',
  'action_versions',
  // Clients by API key: a request's key is checked once more inside its transaction, from memory.
  'clients',
  // What postings consult beside the tran code: accounts' status, sets above an account, velocity controls, calculations, views and indexes.
  'accounts',
  'account_set_members',
  'velocity_limits',
  'velocity_controls',
  'velocity_control_limits',
  'velocity_attachments',
  'calculations',
  'calculation_attachments',
  'views',
  'custom_indexes',
] as const;

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
  /** Rows under two keys (getIn): a group, then an id, each a string that is hashed once and kept. */
  private readonly groups = new Map<string, Map<string, V>>();
  private grouped = 0;
  private epoch = -1;

  constructor(
    private readonly clock: CacheEpoch,
    private readonly entriesMax: number,
  ) {}

  get size(): number {
    return this.rows.size + this.grouped;
  }

  /** The cached row, or `load(key)` (cached unless undefined); always `load(key)` while not active. */
  get(key: string, load: (key: string) => V | undefined): V | undefined {
    if (!this.clock.active) return load(key);
    this.sync();
    const cached = this.rows.get(key);
    if (cached !== undefined) return cached;
    const loaded = load(key);
    if (loaded === undefined || this.entriesMax === 0) return loaded;
    if (this.rows.size + this.grouped >= this.entriesMax) this.clear();
    this.rows.set(key, loaded);
    return loaded;
  }

  /**
   * The same, keyed by a group (a kind of row, a journal) and an id within it. A posting looks rows
   * up by the ids it already holds: no key is built per lookup (a joined key is a new string each
   * time, flattened and hashed again), so a hit costs two map probes.
   */
  getIn(group: string, id: string, load: () => V | undefined): V | undefined {
    if (!this.clock.active) return load();
    this.sync();
    let rows = this.groups.get(group);
    const cached = rows?.get(id);
    if (cached !== undefined) return cached;
    const loaded = load();
    if (loaded === undefined || this.entriesMax === 0) return loaded;
    if (this.rows.size + this.grouped >= this.entriesMax) {
      this.clear();
      rows = undefined;
    }
    if (!rows) this.groups.set(group, (rows = new Map()));
    rows.set(id, loaded);
    this.grouped++;
    return loaded;
  }

  private sync(): void {
    if (this.epoch !== this.clock.value) {
      this.clear();
      this.epoch = this.clock.value;
    }
  }

  private clear(): void {
    this.rows.clear();
    this.groups.clear();
    this.grouped = 0;
  }
}

/**
 * Call `onWrite` whenever this connection inserts, updates or deletes a row of one of `tables`:
 * TEMP triggers (they belong to this connection and are never stored in the file) call a function
 * registered on it. Other connections' writes are seen through `PRAGMA data_version` instead.
 */
function watchWrites(db: Db, name: string, tables: readonly string[], onWrite: () => void): void {
  // PostgreSQL (src/storage/pg/connection.ts): the statement that wrote tells, no trigger needed.
  const pg = db as unknown as { watchWrites?: (tables: readonly string[], onWrite: () => void) => void };
  if (pg.watchWrites) return pg.watchWrites(tables, onWrite);
  db.function(`tally_${name}_changed`, { deterministic: false }, () => {
    onWrite();
    return null;
  });
  for (const table of tables) {
    for (const op of ['INSERT', 'UPDATE', 'DELETE']) {
      db.exec(`CREATE TEMP TRIGGER tally_${name}_${table}_${op.toLowerCase()} AFTER ${op} ON main.${table}
        BEGIN SELECT tally_${name}_changed(); END`);
    }
  }
}

/** Bump `epoch` whenever this connection writes a cached table. */
export function watchCachedTables(db: Db, epoch: CacheEpoch): void {
  watchWrites(db, 'cache', CACHED_TABLES, () => epoch.bump());
}

/**
 * Every table a read-only tool's result can depend on, but for the call records themselves
 * (executions, invocations) and rows that only change together with a transaction row (entries,
 * balances): one TEMP trigger call per write on this connection, committed or not.
 */
const DATA_TABLES = [
  'accounts',
  'journals',
  'tran_codes',
  'tran_code_versions',
  'transactions',
  'triggers',
  'actions',
  'action_versions',
  'clients',
  'sessions',
  'session_messages',
  'approvals',
  'skills',
  'skill_versions',
  // Set membership moves balances, and a calculation's backfill writes its balances, without a transaction row.
  'account_set_members',
  'velocity_limits',
  'velocity_controls',
  'velocity_control_limits',
  'velocity_attachments',
  'calculations',
  'calculation_attachments',
  'views',
  'custom_indexes',
] as const;

/** Counts this connection's writes to DATA_TABLES (see the result cache in src/execution/result-cache.ts). */
export function watchDataTables(db: Db): { readonly writes: number } {
  let writes = 0;
  watchWrites(db, 'data', DATA_TABLES, () => writes++);
  return {
    get writes() {
      return writes;
    },
  };
}

/** The tables that decide what a client may call: its tools, their versions, the clients. */
export const TOOL_TABLES = ['actions', 'action_versions', 'clients'] as const;

/**
 * Whether a committed write may have changed what some client may call. This connection's writes
 * to TOOL_TABLES are counted by TEMP triggers (exact, free); another connection's commits (PRAGMA
 * data_version moved) are seen by a small fingerprint of those tables, read only then. A commit
 * elsewhere that touched no action and no client (a posting, a worker's attempt) fires nothing.
 */
export function watchToolTables(
  db: Db,
  versionAtBegin?: () => number,
): { readonly writes: number; changedSince(writesBefore: number): boolean } {
  let writes = 0;
  watchWrites(db, 'tools', TOOL_TABLES, () => writes++);
  const pragma = db.prepare<[], number>('PRAGMA data_version').pluck();
  // After a write transaction the version its BEGIN read is current (see TransactionManager): no second read.
  const dataVersion = () => (versionAtBegin ? versionAtBegin() : (pragma.get() as number));
  const fingerprint = db
    .prepare<[], string>(
      `SELECT (SELECT count(*) || ':' || ifnull(max(modified), '') FROM action_versions) || '|' ||
              (SELECT count(*) || ':' || coalesce(sum(latest_version), 0) || ':' || ifnull(max(modified), '') FROM actions) || '|' ||
              (SELECT count(*) || ':' || coalesce(sum(version), 0) || ':' || ifnull(max(modified), '') FROM clients)`,
    )
    .pluck();
  let seenVersion = pragma.get() as number;
  let seen = fingerprint.get() as string;
  return {
    get writes() {
      return writes;
    },
    changedSince(writesBefore) {
      let changed = writes !== writesBefore;
      try {
        const version = dataVersion();
        if (changed || version !== seenVersion) {
          seenVersion = version;
          const now = fingerprint.get() as string;
          if (now !== seen) changed = true;
          seen = now;
        }
      } catch {
        return true;
      }
      return changed;
    },
  };
}
