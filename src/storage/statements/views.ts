import type { Statement } from 'better-sqlite3';
import type { Db } from '../database.js';

/**
 * The tables of migration 13: views (materialised CEL documents) and custom indexes.
 *
 * Both are keyed the same way: `pkey` is the JSON list of the partition values (queried by
 * equality only), `s0..s3` the sort values, each encoded so that plain text order is the key's
 * order (descending keys are stored complemented; see encode in src/ledger/typed-values.ts), and
 * `r0..r3` the same values as text, for `like`. Unused sort columns hold ''. So every read is a
 * range of one primary key: no table scans, and no sort step whatever the directions.
 */
export const VIEWS_MIGRATION_SQL = `
  CREATE TABLE views (
    view_id    TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    definition TEXT NOT NULL,
    version    INTEGER NOT NULL,
    created    TEXT NOT NULL,
    modified   TEXT NOT NULL
  );
  CREATE TABLE view_records (
    view_id   TEXT NOT NULL,
    pkey      TEXT NOT NULL,
    s0 TEXT NOT NULL, s1 TEXT NOT NULL, s2 TEXT NOT NULL, s3 TEXT NOT NULL,
    r0 TEXT, r1 TEXT, r2 TEXT, r3 TEXT,
    record_id TEXT NOT NULL,
    version   INTEGER NOT NULL,
    document  TEXT NOT NULL,
    source    TEXT NOT NULL,
    created   TEXT NOT NULL,
    modified  TEXT NOT NULL,
    PRIMARY KEY (view_id, pkey, s0, s1, s2, s3)
  ) WITHOUT ROWID;
  -- Every version of every view record (the current one too): ViewRecord.history.
  CREATE TABLE view_record_versions (
    record_id TEXT NOT NULL,
    version   INTEGER NOT NULL,
    document  TEXT NOT NULL,
    source    TEXT NOT NULL,
    modified  TEXT NOT NULL,
    PRIMARY KEY (record_id, version)
  ) WITHOUT ROWID;

  CREATE TABLE custom_indexes (
    index_id   TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    on_entity  TEXT NOT NULL,
    definition TEXT NOT NULL,
    version    INTEGER NOT NULL,
    created    TEXT NOT NULL,
    modified   TEXT NOT NULL,
    UNIQUE (name, on_entity)
  );
  -- One row per indexed record and partition value (a partition expression may give a list);
  -- seq is the record's seq (entries.seq, transactions.seq): read back by it, and the tie-break.
  CREATE TABLE custom_index_rows (
    index_id  TEXT NOT NULL,
    pkey      TEXT NOT NULL,
    s0 TEXT NOT NULL, s1 TEXT NOT NULL, s2 TEXT NOT NULL, s3 TEXT NOT NULL,
    r0 TEXT, r1 TEXT, r2 TEXT, r3 TEXT,
    seq       INTEGER NOT NULL,
    record_id TEXT NOT NULL,
    PRIMARY KEY (index_id, pkey, s0, s1, s2, s3, seq)
  ) WITHOUT ROWID;
  CREATE INDEX custom_index_rows_by_record ON custom_index_rows (index_id, record_id);
`;

export interface ViewRow {
  view_id: string;
  name: string;
  definition: string;
  version: number;
  created: string;
  modified: string;
}

export interface ViewRecordRow {
  view_id: string;
  pkey: string;
  s0: string;
  s1: string;
  s2: string;
  s3: string;
  record_id: string;
  version: number;
  document: string;
  source: string;
  created: string;
  modified: string;
}

export interface ViewVersionRow {
  record_id: string;
  version: number;
  document: string;
  source: string;
  modified: string;
}

export interface IndexRow {
  index_id: string;
  name: string;
  on_entity: string;
  definition: string;
  version: number;
  created: string;
  modified: string;
}

/** One condition of a key query, built by src/ledger/index-keys.ts from a FilterValue. */
export interface KeyCondition {
  /** Sort column 0..3. */
  column: number;
  op: '=' | '<' | '<=' | '>' | '>=' | 'LIKE';
  value: string;
}

/** The compiled definitions held between postings (src/ledger/view-updates.ts), valid for one cache epoch. */
export interface DefinitionCache {
  epoch: number;
  value: unknown;
}

const SORT_COLUMNS = ['s0', 's1', 's2', 's3'] as const;
const RAW_COLUMNS = ['r0', 'r1', 'r2', 'r3'] as const;

/** `WHERE` text and parameters for key conditions on the sort columns (column names only come from the fixed lists). */
function conditionsSql(conditions: readonly KeyCondition[]): { sql: string; params: string[] } {
  let sql = '';
  const params: string[] = [];
  for (const c of conditions) {
    const column = c.op === 'LIKE' ? RAW_COLUMNS[c.column]! : SORT_COLUMNS[c.column]!;
    sql += ` AND ${column} ${c.op} ?`;
    params.push(c.value);
  }
  return { sql, params };
}

/** Every SQL statement of views and custom indexes, prepared once per engine. */
export function viewStatements(db: Db) {
  // Key queries vary in shape (which sort columns a filter names, and how): each shape's
  // statement is prepared once and kept. Shapes are bounded: 4 columns × 6 operators.
  const shapes = new Map<string, Statement>();
  const shaped = (sql: string): Statement => {
    let statement = shapes.get(sql);
    if (!statement) {
      statement = db.prepare(sql);
      shapes.set(sql, statement);
    }
    return statement;
  };

  return {
    /** The compiled definitions (see DefinitionCache); per engine, not per module. */
    cache: { epoch: -1, value: null } as DefinitionCache,

    allViews: db.prepare<[], ViewRow>('SELECT * FROM views ORDER BY name'),
    viewByName: db.prepare<[string], ViewRow>('SELECT * FROM views WHERE name = ?'),
    viewsPage: db.prepare<[string, number], ViewRow>('SELECT * FROM views WHERE name > ? ORDER BY name LIMIT ?'),
    countViews: db.prepare<[], number>('SELECT count(*) FROM views').pluck(),
    insertView: db.prepare<[string, string, string, string, string]>(
      'INSERT INTO views (view_id, name, definition, version, created, modified) VALUES (?, ?, ?, 1, ?, ?)',
    ),
    deleteView: db.prepare<[string]>('DELETE FROM views WHERE view_id = ?'),
    deleteViewVersions: db.prepare<[string]>(
      'DELETE FROM view_record_versions WHERE record_id IN (SELECT record_id FROM view_records WHERE view_id = ?)',
    ),
    deleteViewRecords: db.prepare<[string]>('DELETE FROM view_records WHERE view_id = ?'),

    viewRecord: db.prepare<[string, string, string, string, string, string], ViewRecordRow>(
      'SELECT * FROM view_records WHERE view_id = ? AND pkey = ? AND s0 = ? AND s1 = ? AND s2 = ? AND s3 = ?',
    ),
    insertViewRecord: db.prepare(
      `INSERT INTO view_records (view_id, pkey, s0, s1, s2, s3, r0, r1, r2, r3, record_id, version, document, source, created, modified)
       VALUES (@view_id, @pkey, @s0, @s1, @s2, @s3, @r0, @r1, @r2, @r3, @record_id, 1, @document, @source, @modified, @modified)`,
    ),
    updateViewRecord: db.prepare(
      `UPDATE view_records SET version = @version, document = @document, source = @source, modified = @modified
       WHERE view_id = @view_id AND pkey = @pkey AND s0 = @s0 AND s1 = @s1 AND s2 = @s2 AND s3 = @s3`,
    ),
    insertViewVersion: db.prepare<[string, number, string, string, string]>(
      'INSERT INTO view_record_versions (record_id, version, document, source, modified) VALUES (?, ?, ?, ?, ?)',
    ),
    /** Newest first, versions below `before`. */
    viewVersionsPage: db.prepare<[string, number, number], ViewVersionRow>(
      'SELECT * FROM view_record_versions WHERE record_id = ? AND version < ? ORDER BY version DESC LIMIT ?',
    ),

    /** One page of a view's partition, in key order, after `after` (the four sort columns). */
    viewRecordsPage(
      viewId: string,
      pkey: string,
      conditions: readonly KeyCondition[],
      after: readonly string[] | undefined,
      limit: number,
    ): ViewRecordRow[] {
      const where = conditionsSql(conditions);
      const cursor = after ? ' AND (s0, s1, s2, s3) > (?, ?, ?, ?)' : '';
      const statement = shaped(
        `SELECT * FROM view_records WHERE view_id = ? AND pkey = ?${where.sql}${cursor} ORDER BY s0, s1, s2, s3 LIMIT ?`,
      );
      return statement.all(viewId, pkey, ...where.params, ...(after ?? []), limit) as ViewRecordRow[];
    },

    allIndexes: db.prepare<[], IndexRow>('SELECT * FROM custom_indexes ORDER BY name, on_entity'),
    indexByName: db.prepare<[string, string], IndexRow>(
      'SELECT * FROM custom_indexes WHERE name = ? AND on_entity = ?',
    ),
    indexesPage: db.prepare<[string, string, string, number], IndexRow>(
      'SELECT * FROM custom_indexes WHERE name > ? OR (name = ? AND on_entity > ?) ORDER BY name, on_entity LIMIT ?',
    ),
    countIndexes: db.prepare<[], number>('SELECT count(*) FROM custom_indexes').pluck(),
    insertIndex: db.prepare<[string, string, string, string, string, string]>(
      'INSERT INTO custom_indexes (index_id, name, on_entity, definition, version, created, modified) VALUES (?, ?, ?, ?, 1, ?, ?)',
    ),
    deleteIndex: db.prepare<[string]>('DELETE FROM custom_indexes WHERE index_id = ?'),
    deleteIndexRows: db.prepare<[string]>('DELETE FROM custom_index_rows WHERE index_id = ?'),
    insertIndexRow: db.prepare(
      `INSERT INTO custom_index_rows (index_id, pkey, s0, s1, s2, s3, r0, r1, r2, r3, seq, record_id)
       VALUES (@index_id, @pkey, @s0, @s1, @s2, @s3, @r0, @r1, @r2, @r3, @seq, @record_id)`,
    ),
    deleteIndexRowsOf: db.prepare<[string, string]>(
      'DELETE FROM custom_index_rows WHERE index_id = ? AND record_id = ?',
    ),
    /** A unique index's key held by another record. */
    indexKeyHolder: db
      .prepare<[string, string, string, string, string, string, string], string>(
        `SELECT record_id FROM custom_index_rows WHERE index_id = ? AND pkey = ? AND s0 = ? AND s1 = ? AND s2 = ? AND s3 = ?
       AND record_id <> ? LIMIT 1`,
      )
      .pluck(),

    /** Backfill: records in posting order after `seq` (the index being created reads what exists). */
    entriesAfter: db.prepare<[number, number], { seq: number }>(
      'SELECT * FROM entries WHERE seq > ? ORDER BY seq LIMIT ?',
    ),
    transactionsAfter: db.prepare<[number, number], { seq: number }>(
      'SELECT * FROM transactions WHERE seq > ? ORDER BY seq LIMIT ?',
    ),
    /** Whether more than n records exist (reads at most n + 1 keys). */
    entriesBeyond: db
      .prepare<[number], number>('SELECT count(*) FROM (SELECT 1 FROM entries LIMIT ?) AS beyond')
      .pluck(),
    transactionsBeyond: db
      .prepare<[number], number>('SELECT count(*) FROM (SELECT 1 FROM transactions LIMIT ?) AS beyond')
      .pluck(),
    transactionOfEntry: db.prepare<[string], { void_of: string | null; voided_by: string | null }>(
      'SELECT void_of, voided_by FROM transactions WHERE transaction_id = ?',
    ),

    /** One page of an index's partition joined to its records (entries or transactions), in key order. */
    indexPage(
      on: 'Entry' | 'Transaction',
      indexId: string,
      pkey: string,
      conditions: readonly KeyCondition[],
      after: readonly (string | number)[] | undefined,
      limit: number,
    ) {
      const where = conditionsSql(conditions);
      const table = on === 'Entry' ? 'entries' : 'transactions';
      const cursor = after ? ' AND (r.s0, r.s1, r.s2, r.s3, r.seq) > (?, ?, ?, ?, ?)' : '';
      const statement = shaped(
        `SELECT r.s0 AS _s0, r.s1 AS _s1, r.s2 AS _s2, r.s3 AS _s3, r.seq AS _seq, t.* FROM custom_index_rows r
         JOIN ${table} t ON t.seq = r.seq
         WHERE r.index_id = ? AND r.pkey = ?${where.sql.replace(/ AND ([sr][0-3]) /g, ' AND r.$1 ')}${cursor}
         ORDER BY r.s0, r.s1, r.s2, r.s3, r.seq LIMIT ?`,
      );
      return statement.all(indexId, pkey, ...where.params, ...(after ?? []), limit) as Array<
        Record<string, unknown> & { _s0: string; _s1: string; _s2: string; _s3: string; _seq: number }
      >;
    },
  };
}

export type ViewStatements = ReturnType<typeof viewStatements>;
