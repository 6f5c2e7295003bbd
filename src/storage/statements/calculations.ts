import type { Statement } from 'better-sqlite3';
import type { Db } from '../database.js';
import { type BalanceRow, byColumns, type EntryRow } from './ledger.js';

/**
 * The tables of migration 12 (calculations).
 *
 * - `calculations`: one row per calculation. A calculation with effective balances has three
 *   children (granularity YEAR, MONTH, DAY; `parent_id` set) that are managed only through it.
 * - `calculation_attachments`: where a LOCAL calculation counts (an account or a set, in one
 *   journal). Only parents are attached; their children follow them.
 * - `calculation_balances`: running totals per calculation × account (or set) × journal × currency ×
 *   dimension values × period. `dimension_key` encodes the custom dimension values in declaration
 *   order (see dimensionKey in src/ledger/calculation-updates.ts), so a leading subset of them is a key
 *   prefix; `period` is '' for a parent and 'YYYY' / 'YYYY-MM' / 'YYYY-MM-DD' for a child, so the
 *   periods of one balance are a primary-key range (cumulative and range reads are index scans).
 */
export const CALCULATIONS_MIGRATION_SQL = `
  CREATE TABLE calculations (
    calculation_id  TEXT PRIMARY KEY,
    code            TEXT NOT NULL UNIQUE,
    description     TEXT NOT NULL,
    scope           TEXT NOT NULL CHECK (scope IN ('GLOBAL','LOCAL')),
    dimensions      TEXT NOT NULL,
    condition       TEXT,
    config          TEXT,
    parent_id       TEXT REFERENCES calculations(calculation_id),
    granularity     TEXT CHECK (granularity IN ('YEAR','MONTH','DAY')),
    status          TEXT NOT NULL CHECK (status IN ('ACTIVE','LOCKED')),
    backfill_status TEXT NOT NULL CHECK (backfill_status IN ('COMPLETE','IN_PROGRESS','ERROR','DETACHED')),
    version         INTEGER NOT NULL,
    created         TEXT NOT NULL,
    modified        TEXT NOT NULL
  );
  CREATE INDEX calculations_by_parent ON calculations (parent_id) WHERE parent_id IS NOT NULL;
  CREATE INDEX calculations_by_status ON calculations (status);

  CREATE TABLE calculation_attachments (
    account_id     TEXT NOT NULL,
    journal_id     TEXT NOT NULL,
    calculation_id TEXT NOT NULL REFERENCES calculations(calculation_id),
    created        TEXT NOT NULL,
    PRIMARY KEY (account_id, journal_id, calculation_id)
  ) WITHOUT ROWID;
  CREATE INDEX calculation_attachments_by_calculation ON calculation_attachments (calculation_id);

  CREATE TABLE calculation_balances (
    calculation_id TEXT NOT NULL,
    account_id     TEXT NOT NULL,
    journal_id     TEXT NOT NULL,
    currency       TEXT NOT NULL,
    dimension_key  TEXT NOT NULL,
    period         TEXT NOT NULL,
    dimensions     TEXT NOT NULL,
    settled_dr     TEXT NOT NULL,
    settled_cr     TEXT NOT NULL,
    pending_dr     TEXT NOT NULL,
    pending_cr     TEXT NOT NULL,
    encumbrance_dr TEXT NOT NULL,
    encumbrance_cr TEXT NOT NULL,
    entry_id       TEXT NOT NULL,
    version        INTEGER NOT NULL,
    created        TEXT NOT NULL,
    modified       TEXT NOT NULL,
    PRIMARY KEY (calculation_id, account_id, journal_id, currency, dimension_key, period)
  ) WITHOUT ROWID;
`;

export interface CalculationRow {
  calculation_id: string;
  code: string;
  description: string;
  scope: 'GLOBAL' | 'LOCAL';
  /** JSON list of {alias, value}. */
  dimensions: string;
  condition: string | null;
  /** JSON {enableEffectiveBalances}, or null when none was given. */
  config: string | null;
  parent_id: string | null;
  granularity: 'YEAR' | 'MONTH' | 'DAY' | null;
  status: 'ACTIVE' | 'LOCKED';
  backfill_status: 'COMPLETE' | 'IN_PROGRESS' | 'ERROR' | 'DETACHED';
  version: number;
  created: string;
  modified: string;
}

export interface CalculationAttachmentRow {
  account_id: string;
  journal_id: string;
  calculation_id: string;
  created: string;
}

/** A calculation balance: a balance record's columns, keyed also by calculation, dimension values and period. */
export type CalculationBalanceRow = BalanceRow & {
  calculation_id: string;
  dimension_key: string;
  period: string;
  dimensions: string;
};

/** Rows of the calculation_balances key that a balance's periods share. */
type BalanceKey = [calculationId: string, accountId: string, journalId: string, currency: string, dimensionKey: string];

/** In-memory state of one engine's calculations (see activeCalculations in src/ledger/calculation-updates.ts). */
export interface CalculationMemo {
  /** The CacheEpoch value the definitions were loaded at; -1 for never. */
  epoch: number;
  definitions: unknown;
}

/** Every SQL statement of calculations, prepared once per engine. */
export function calculationStatements(db: Db) {
  return {
    memo: { epoch: -1, definitions: null } as CalculationMemo,

    byId: db.prepare<[string], CalculationRow>('SELECT * FROM calculations WHERE calculation_id = ?'),
    byCode: db.prepare<[string], CalculationRow>('SELECT * FROM calculations WHERE code = ?'),
    /** Parents in creation order (rowid), after a rowid cursor. */
    page: db.prepare<[number, number], CalculationRow & { rowid: number }>(
      'SELECT rowid, * FROM calculations WHERE rowid > ? ORDER BY rowid LIMIT ?',
    ),
    rowidOf: db.prepare<[string], number>('SELECT rowid FROM calculations WHERE calculation_id = ?').pluck(),
    children: db.prepare<[string], CalculationRow>('SELECT * FROM calculations WHERE parent_id = ? ORDER BY rowid'),
    /** Every ACTIVE calculation (the definitions posting applies). */
    active: db.prepare<[], CalculationRow>("SELECT * FROM calculations WHERE status = 'ACTIVE' ORDER BY rowid"),
    activeCount: db
      .prepare<[], number>("SELECT count(*) FROM calculations WHERE status = 'ACTIVE' AND parent_id IS NULL")
      .pluck(),
    insert: db.prepare(
      `INSERT INTO calculations (calculation_id, code, description, scope, dimensions, condition, config, parent_id, granularity,
         status, backfill_status, version, created, modified)
       VALUES (@calculation_id, @code, @description, @scope, @dimensions, @condition, @config, @parent_id, @granularity,
         @status, @backfill_status, @version, @created, @modified)`,
    ),
    /** Status of a parent and its children together. */
    setStatus: db.prepare<[string, string, string, string]>(
      `UPDATE calculations SET status = ?, version = version + 1, modified = ?
       WHERE calculation_id = ? OR parent_id = ?`,
    ),
    setBackfillStatus: db.prepare<[string, string, string, string]>(
      `UPDATE calculations SET backfill_status = ?, version = version + 1, modified = ?
       WHERE (calculation_id = ? OR parent_id = ?)`,
    ),

    attachment: db.prepare<[string, string, string], CalculationAttachmentRow>(
      'SELECT * FROM calculation_attachments WHERE account_id = ? AND journal_id = ? AND calculation_id = ?',
    ),
    /** The calculations attached to one account or set in one journal. */
    attachedTo: db
      .prepare<[string, string], string>(
        'SELECT calculation_id FROM calculation_attachments WHERE account_id = ? AND journal_id = ?',
      )
      .pluck(),
    anyAttachment: db
      .prepare<[string], number>('SELECT 1 FROM calculation_attachments WHERE calculation_id = ? LIMIT 1')
      .pluck(),
    insertAttachment: db.prepare<[string, string, string, string]>(
      'INSERT INTO calculation_attachments (account_id, journal_id, calculation_id, created) VALUES (?, ?, ?, ?)',
    ),
    deleteAttachment: db.prepare<[string, string, string]>(
      'DELETE FROM calculation_attachments WHERE account_id = ? AND journal_id = ? AND calculation_id = ?',
    ),

    /** One period (or a parent's '' row): one primary-key read. */
    balance: db.prepare<[...BalanceKey, string], CalculationBalanceRow>(
      `SELECT * FROM calculation_balances
       WHERE calculation_id = ? AND account_id = ? AND journal_id = ? AND currency = ? AND dimension_key = ? AND period = ?`,
    ),
    /** The periods of one balance in [from, to): a primary-key range scan. */
    periods: db.prepare<[...BalanceKey, string, string], CalculationBalanceRow>(
      `SELECT * FROM calculation_balances
       WHERE calculation_id = ? AND account_id = ? AND journal_id = ? AND currency = ? AND dimension_key = ?
         AND period >= ? AND period < ?`,
    ),
    /**
     * A page of one calculation's balances of an account in a journal and currency whose
     * dimension_key lies in [keyFrom, keyTo), after the cursor (dimension_key, period).
     */
    balancesPage: db.prepare<
      [string, string, string, string, string, string, string, string, number],
      CalculationBalanceRow
    >(
      `SELECT * FROM calculation_balances
       WHERE calculation_id = ? AND account_id = ? AND journal_id = ? AND currency = ?
         AND dimension_key >= ? AND dimension_key < ? AND (dimension_key, period) > (?, ?)
       ORDER BY dimension_key, period LIMIT ?`,
    ),
    /** Add to a calculation balance: the UPDATE first (the record usually exists), the INSERT when it changed nothing. */
    /**
     * Add to the columns the entries change, and only those (see byColumns). Positional: the
     * amounts in BALANCE_COLUMNS order, the entry, modified, then the key (calculation, account,
     * journal, currency, dimension key, period).
     */
    updateColumns: byColumns((columns) =>
      db.prepare<unknown[]>(
        `UPDATE calculation_balances SET ${columns.map((c) => `${c} = dec_add(${c}, ?)`).join(', ')}, entry_id = ?, version = version + 1, modified = ?
         WHERE calculation_id = ? AND account_id = ? AND journal_id = ? AND currency = ? AND dimension_key = ? AND period = ?`,
      ),
    ),
    insertBalance: db.prepare(
      `INSERT INTO calculation_balances (calculation_id, account_id, journal_id, currency, dimension_key, period, dimensions,
         settled_dr, settled_cr, pending_dr, pending_cr, encumbrance_dr, encumbrance_cr, entry_id, version, created, modified)
       VALUES (@calculation_id, @account_id, @journal_id, @currency, @dimension_key, @period, @dimensions,
         @settled_dr, @settled_cr, @pending_dr, @pending_cr, @encumbrance_dr, @encumbrance_cr, @entry_id, 1, @modified, @modified)`,
    ) as Statement<[Record<string, string>]>,
    /** A detached calculation's balances of one account or set in one journal (re-attaching backfills anew). */
    deleteBalancesOf: db.prepare<[string, string, string]>(
      'DELETE FROM calculation_balances WHERE calculation_id = ? AND account_id = ? AND journal_id = ?',
    ),

    /** Backfill sources, in posting order, at most `limit` rows after seq `after`. */
    entriesPage: db.prepare<[number, number], EntryRow>('SELECT * FROM entries WHERE seq > ? ORDER BY seq LIMIT ?'),
  };
}

export type CalculationStatements = ReturnType<typeof calculationStatements>;
