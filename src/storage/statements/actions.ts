import type { Db } from '../database.js';

export interface ActionRow {
  action_id: string;
  name: string;
  latest_version: number;
  created: string;
  modified: string;
}

export interface ActionVersionRow {
  action_id: string;
  version: number;
  status: string;
  document: string;
  created: string;
  modified: string;
}

export interface ExecutionRow {
  seq: number;
  execution_id: string;
  action_id: string | null;
  action_name: string;
  action_version: number | null;
  kind: string;
  status: string;
  input: string;
  input_fingerprint: string | null;
  output: string | null;
  error: string | null;
  principal: string | null;
  parent_id: string | null;
  root_id: string;
  depth: number;
  attempt: number;
  started: string | null;
  finished: string | null;
  logs: string | null;
  created: string;
  modified: string;
}

/** Every SQL statement of actions and executions, prepared once per engine. */
export function actionStatements(db: Db) {
  return {
    actionById: db.prepare<[string], ActionRow>('SELECT * FROM actions WHERE action_id = ?'),
    actionByName: db.prepare<[string], ActionRow>('SELECT * FROM actions WHERE name = ?'),
    actionsPage: db.prepare<[number, number], ActionRow & { rowid: number }>('SELECT rowid, * FROM actions WHERE rowid > ? ORDER BY rowid LIMIT ?'),
    insertAction: db.prepare(
      'INSERT INTO actions (action_id, name, latest_version, created, modified) VALUES (@action_id, @name, @latest_version, @created, @modified)',
    ),
    updateActionLatest: db.prepare<[number, string, string]>('UPDATE actions SET latest_version = ?, modified = ? WHERE action_id = ?'),
    version: db.prepare<[string, number], ActionVersionRow>('SELECT * FROM action_versions WHERE action_id = ? AND version = ?'),
    versionStatus: db.prepare<[string, number], { status: string; modified: string }>(
      'SELECT status, modified FROM action_versions WHERE action_id = ? AND version = ?',
    ),
    versions: db.prepare<[string], ActionVersionRow>('SELECT * FROM action_versions WHERE action_id = ? ORDER BY version'),
    latestActiveVersion: db.prepare<[string], ActionVersionRow>(
      "SELECT * FROM action_versions WHERE action_id = ? AND status = 'ACTIVE' ORDER BY version DESC LIMIT 1",
    ),
    insertVersion: db.prepare(
      `INSERT INTO action_versions (action_id, version, status, document, created, modified)
       VALUES (@action_id, @version, @status, @document, @created, @modified)`,
    ),
    setVersionStatus: db.prepare<[string, string, string, number]>(
      'UPDATE action_versions SET status = ?, modified = ? WHERE action_id = ? AND version = ?',
    ),

    executionById: db.prepare<[string], ExecutionRow>('SELECT * FROM executions WHERE execution_id = ?'),
    executionChildren: db.prepare<[string], ExecutionRow>('SELECT * FROM executions WHERE parent_id = ? ORDER BY seq'),
    executionsPage: db.prepare<[number, number], ExecutionRow>(
      'SELECT * FROM executions WHERE parent_id IS NULL AND seq > ? ORDER BY seq LIMIT ?',
    ),
    /** Uses executions_active_by_status for QUEUED and RUNNING; scans in seq order for the others. */
    executionsByStatusPage: db.prepare<[string, number, number], ExecutionRow>(
      'SELECT * FROM executions WHERE parent_id IS NULL AND status = ? AND seq > ? ORDER BY seq LIMIT ?',
    ),
    executionsByActionPage: db.prepare<[string, number, number], ExecutionRow>(
      'SELECT * FROM executions WHERE action_id = ? AND seq > ? ORDER BY seq LIMIT ?',
    ),
    insertExecution: db.prepare(
      `INSERT INTO executions (execution_id, action_id, action_name, action_version, kind, status, input, input_fingerprint,
         output, error, principal, parent_id, root_id, depth, attempt, started, finished, logs, created, modified)
       VALUES (@execution_id, @action_id, @action_name, @action_version, @kind, @status, @input, @input_fingerprint,
         @output, @error, @principal, @parent_id, @root_id, @depth, @attempt, @started, @finished, @logs, @created, @modified)`,
    ),
  };
}

export type ActionStatements = ReturnType<typeof actionStatements>;
