import type { Db } from '../database.js';
import { BALANCE_COLUMNS, type BalanceRow } from './ledger.js';

export interface VelocityLimitRow {
  velocity_limit_id: string;
  name: string;
  description: string | null;
  /** JSON: {window, condition, currency, limit: {timestampSource, balance: [...]}, params} */
  document: string;
  version: number;
  created: string;
  modified: string;
}

export interface VelocityControlRow {
  velocity_control_id: string;
  name: string;
  description: string | null;
  enforcement: 'WARN' | 'VOID' | 'REJECT';
  condition: string | null;
  status: 'ACTIVE' | 'LOCKED';
  version: number;
  created: string;
  modified: string;
}

export interface VelocityAttachmentRow {
  account_id: string;
  velocity_control_id: string;
  /** '' for every journal */
  journal_id: string;
  params: string | null;
  created: string;
  modified: string;
}

export type VelocityBalanceRow = Omit<BalanceRow, 'account_id'> & {
  velocity_limit_id: string;
  account_id: string;
  window: string;
};

/** Every SQL statement of velocity controls (migration 11), prepared once per engine. */
export function velocityStatements(db: Db) {
  return {
    limitById: db.prepare<[string], VelocityLimitRow>('SELECT * FROM velocity_limits WHERE velocity_limit_id = ?'),
    limitsPage: db.prepare<[string, number], VelocityLimitRow>(
      'SELECT * FROM velocity_limits WHERE velocity_limit_id > ? ORDER BY velocity_limit_id LIMIT ?',
    ),
    insertLimit: db.prepare(
      `INSERT INTO velocity_limits (velocity_limit_id, name, description, document, version, created, modified)
       VALUES (@velocity_limit_id, @name, @description, @document, @version, @created, @modified)`,
    ),
    updateLimit: db.prepare(
      `UPDATE velocity_limits SET name = @name, description = @description, document = @document, version = @version,
         modified = @modified WHERE velocity_limit_id = @velocity_limit_id`,
    ),
    deleteLimit: db.prepare<[string]>('DELETE FROM velocity_limits WHERE velocity_limit_id = ?'),

    controlById: db.prepare<[string], VelocityControlRow>(
      'SELECT * FROM velocity_controls WHERE velocity_control_id = ?',
    ),
    controlsPage: db.prepare<[string, number], VelocityControlRow>(
      'SELECT * FROM velocity_controls WHERE velocity_control_id > ? ORDER BY velocity_control_id LIMIT ?',
    ),
    insertControl: db.prepare(
      `INSERT INTO velocity_controls (velocity_control_id, name, description, enforcement, condition, status, version, created, modified)
       VALUES (@velocity_control_id, @name, @description, @enforcement, @condition, @status, @version, @created, @modified)`,
    ),
    updateControl: db.prepare(
      `UPDATE velocity_controls SET name = @name, description = @description, enforcement = @enforcement, condition = @condition,
         status = @status, version = @version, modified = @modified WHERE velocity_control_id = @velocity_control_id`,
    ),
    deleteControl: db.prepare<[string]>('DELETE FROM velocity_controls WHERE velocity_control_id = ?'),

    limitsOfControl: db.prepare<[string], VelocityLimitRow>(
      `SELECT l.* FROM velocity_control_limits cl JOIN velocity_limits l ON l.velocity_limit_id = cl.velocity_limit_id
       WHERE cl.velocity_control_id = ? ORDER BY cl.position`,
    ),
    controlLimitCount: db
      .prepare<[string], number>('SELECT count(*) FROM velocity_control_limits WHERE velocity_control_id = ?')
      .pluck(),
    controlsOfLimit: db
      .prepare<[string], string>('SELECT velocity_control_id FROM velocity_control_limits WHERE velocity_limit_id = ?')
      .pluck(),
    addLimitToControl: db.prepare<[string, string, string]>(
      `INSERT INTO velocity_control_limits (velocity_control_id, velocity_limit_id, position)
       VALUES (?, ?, (SELECT coalesce(max(position), 0) + 1 FROM velocity_control_limits WHERE velocity_control_id = ?))`,
    ),
    removeLimitFromControl: db.prepare<[string, string]>(
      'DELETE FROM velocity_control_limits WHERE velocity_control_id = ? AND velocity_limit_id = ?',
    ),
    removeAllLimitsFromControl: db.prepare<[string]>(
      'DELETE FROM velocity_control_limits WHERE velocity_control_id = ?',
    ),

    attachment: db.prepare<[string, string], VelocityAttachmentRow>(
      'SELECT * FROM velocity_attachments WHERE account_id = ? AND velocity_control_id = ?',
    ),
    attachmentsOf: db.prepare<[string], VelocityAttachmentRow>(
      'SELECT * FROM velocity_attachments WHERE account_id = ? ORDER BY velocity_control_id',
    ),
    attachmentsOfPage: db.prepare<[string, string, number], VelocityAttachmentRow>(
      'SELECT * FROM velocity_attachments WHERE account_id = ? AND velocity_control_id > ? ORDER BY velocity_control_id LIMIT ?',
    ),
    attachmentsOfControlCount: db
      .prepare<[string], number>('SELECT count(*) FROM velocity_attachments WHERE velocity_control_id = ?')
      .pluck(),
    attachmentCount: db.prepare<[], number>('SELECT count(*) FROM velocity_attachments').pluck(),
    upsertAttachment: db.prepare(
      `INSERT INTO velocity_attachments (account_id, velocity_control_id, journal_id, params, created, modified)
       VALUES (@account_id, @velocity_control_id, @journal_id, @params, @now, @now)
       ON CONFLICT (account_id, velocity_control_id) DO UPDATE SET journal_id = excluded.journal_id, params = excluded.params, modified = excluded.modified`,
    ),
    deleteAttachment: db.prepare<[string, string]>(
      'DELETE FROM velocity_attachments WHERE account_id = ? AND velocity_control_id = ?',
    ),

    velocityBalance: db.prepare<[string, string, string, string, string], VelocityBalanceRow>(
      'SELECT * FROM velocity_balances WHERE velocity_limit_id = ? AND account_id = ? AND journal_id = ? AND currency = ? AND window = ?',
    ),
    addToVelocityBalance: db.prepare(
      `INSERT INTO velocity_balances (velocity_limit_id, account_id, journal_id, currency, window, ${BALANCE_COLUMNS.join(', ')}, entry_id, version, created, modified)
       VALUES (@velocity_limit_id, @account_id, @journal_id, @currency, @window, ${BALANCE_COLUMNS.map((c) => `@${c}`).join(', ')}, @entry_id, 1, @modified, @modified)
       ON CONFLICT (velocity_limit_id, account_id, journal_id, currency, window) DO UPDATE SET
         ${BALANCE_COLUMNS.map((c) => `${c} = dec_add(velocity_balances.${c}, excluded.${c})`).join(', ')},
         entry_id = excluded.entry_id, version = velocity_balances.version + 1, modified = excluded.modified`,
    ),
    setJudged: db.prepare<[string | null, string | null, string]>(
      'UPDATE transactions SET exceptions = ?, properties = ? WHERE transaction_id = ?',
    ),
  };
}

export type VelocityStatements = ReturnType<typeof velocityStatements>;
