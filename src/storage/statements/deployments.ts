import type { Db } from '../database.js';

export interface DeployedRecordRow {
  kind: string;
  record_id: string;
  /** JSON: the deploy's own bookkeeping of the record (src/deploy/records.ts). */
  state: string;
  principal: string;
  version: number;
  created: string;
  modified: string;
}

/** Every SQL statement of deployed records (migration 19), prepared once per engine. */
export function deploymentStatements(db: Db) {
  return {
    recordByKey: db.prepare<[string, string], DeployedRecordRow>(
      'SELECT * FROM deployed_records WHERE kind = ? AND record_id = ?',
    ),
    upsertRecord: db.prepare<[Omit<DeployedRecordRow, 'version'>]>(
      `INSERT INTO deployed_records (kind, record_id, state, principal, version, created, modified)
       VALUES (@kind, @record_id, @state, @principal, 1, @created, @modified)
       ON CONFLICT (kind, record_id) DO UPDATE SET state = excluded.state, principal = excluded.principal,
         version = deployed_records.version + 1, modified = excluded.modified`,
    ),
  };
}

export type DeploymentStatements = ReturnType<typeof deploymentStatements>;
