// SQL that takes today's schema back to an older version, for the tests that upgrade an older database.

/**
 * SQL that takes a database of today's schema back to schema version 17: no outbound_sends (migration
 * 22), no transaction properties column (migration 21; migrations 19 and 20 only add what they lack), an account's entries through
 * entries_by_account, no chains of accounts (the caller sets user_version).
 */
export const UNDO_MIGRATION_18 = `
  DROP TABLE IF EXISTS outbound_sends;
  ALTER TABLE transactions DROP COLUMN properties;
  CREATE INDEX entries_by_account ON entries (account_id, seq);
  DELETE FROM entry_marks WHERE account_id IN (SELECT account_id FROM accounts WHERE is_account_set = 0);
  ALTER TABLE entry_marks RENAME COLUMN account_id TO account_set_id;
  ALTER TABLE entry_marks RENAME TO set_entry_marks;
  UPDATE balances SET log_head = NULL, log_prev = NULL, log_count = NULL WHERE account_id IN (SELECT account_id FROM accounts WHERE is_account_set = 0);
  ALTER TABLE entries DROP COLUMN account_prev;
`;

/**
 * SQL that takes a database of schema version 17 back to schema version 16: a set's entries as rows
 * of set_entry_log, one per entry and set (the links of sets since deleted were deleted with them),
 * none in the entries (the caller sets user_version).
 */
export const UNDO_MIGRATION_17 = `
  CREATE TABLE set_entry_log (seq INTEGER NOT NULL, account_set_id TEXT NOT NULL, prev_seq INTEGER, balance_version INTEGER, balance_after TEXT, PRIMARY KEY (seq, account_set_id)) WITHOUT ROWID;
  INSERT INTO set_entry_log SELECT e.seq, l.key, l.value ->> 0, l.value ->> 1, l.value ->> 2 FROM entries e, json_each(e.set_links) l
    WHERE e.set_links IS NOT NULL AND l.key IN (SELECT account_id FROM accounts) ORDER BY e.seq, l.key;
  ALTER TABLE entries DROP COLUMN set_links;
`;

/**
 * SQL that takes a database of today's schema back to schema version 15: a set's entries in
 * set_entries keyed by (set, seq), no log, marks or heads (the caller sets user_version).
 */
export const UNDO_MIGRATIONS_AFTER_15 = `${UNDO_MIGRATION_18}${UNDO_MIGRATION_17}
  CREATE TABLE set_entries (account_set_id TEXT NOT NULL, seq INTEGER NOT NULL, balance_version INTEGER, balance_after TEXT, PRIMARY KEY (account_set_id, seq)) WITHOUT ROWID;
  INSERT INTO set_entries SELECT account_set_id, seq, balance_version, balance_after FROM set_entry_log;
  DROP TABLE set_entry_log; DROP TABLE set_entry_marks;
  ALTER TABLE balances DROP COLUMN log_count; ALTER TABLE balances DROP COLUMN log_prev; ALTER TABLE balances DROP COLUMN log_head;
`;

/**
 * SQL that takes a database of today's schema back to schema version 9 (before account sets and their entry log,
 * velocity controls, calculations, views, balance history and lean call records: the compact
 * calls of migration 15 are dropped, not turned back into rows), for tests that rebuild an older
 * database: the caller drops the rest and sets user_version.
 */
export const UNDO_MIGRATIONS_AFTER_9 = `${UNDO_MIGRATIONS_AFTER_15}
  DROP TABLE set_entries;
  DROP TABLE call_ids; DROP TABLE documents; ALTER TABLE executions DROP COLUMN calls;
  CREATE INDEX executions_by_created ON executions (created) WHERE parent_id IS NULL;
  DROP TABLE custom_index_rows; DROP TABLE custom_indexes; DROP TABLE view_record_versions; DROP TABLE view_records; DROP TABLE views;
  DROP TABLE calculation_balances; DROP TABLE calculation_attachments; DROP TABLE calculations;
  DROP TABLE velocity_balances; DROP TABLE velocity_attachments; DROP TABLE velocity_control_limits; DROP TABLE velocity_controls; DROP TABLE velocity_limits;
  DROP TABLE account_set_members;
  ALTER TABLE transactions DROP COLUMN exceptions;
  ALTER TABLE entries DROP COLUMN balance_after; ALTER TABLE entries DROP COLUMN balance_version; ALTER TABLE entries DROP COLUMN parent_account_ids;
  ALTER TABLE accounts DROP COLUMN enable_concurrent_posting; ALTER TABLE accounts DROP COLUMN journal_id; ALTER TABLE accounts DROP COLUMN is_account_set;
`;
