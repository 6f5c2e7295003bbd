import type { Db } from '../database.js';

export interface SessionRow {
  session_id: string;
  action_id: string;
  action_name: string;
  action_version: number;
  input: string;
  principal: string;
  status: string;
  last_active: string;
  created: string;
  modified: string;
}

export interface SessionMessageRow {
  seq: number;
  session_id: string;
  message_id: string;
  role: 'USER' | 'ASSISTANT';
  text: string;
  execution_id: string | null;
  created: string;
}

export interface ApprovalRow {
  approval_id: string;
  execution_id: string;
  call_id: string;
  tool: string;
  tool_version: number | null;
  input: string;
  requested_by: string;
  status: string;
  reason: string | null;
  decided_by: string | null;
  decided: string | null;
  expires: string;
  created: string;
}

/** Sessions, their messages, and approvals: every statement prepared once per engine. */
export function sessionStatements(db: Db) {
  return {
    insertSession: db.prepare(
      `INSERT INTO sessions (session_id, action_id, action_name, action_version, input, principal, status, last_active, created, modified)
       VALUES (@session_id, @action_id, @action_name, @action_version, @input, @principal, 'OPEN', @now, @now, @now)`,
    ),
    sessionById: db.prepare<[string], SessionRow>('SELECT * FROM sessions WHERE session_id = ?'),
    touchSession: db.prepare<[string, string, string]>(
      'UPDATE sessions SET last_active = ?, modified = ? WHERE session_id = ?',
    ),
    closeSession: db.prepare<[string, string]>(
      "UPDATE sessions SET status = 'CLOSED', modified = ? WHERE session_id = ?",
    ),
    /** Newest first; `after` is the rowid of the previous page's last row. */
    sessionsPage: db.prepare<[{ after: number; limit: number }], SessionRow & { rowid: number }>(
      'SELECT rowid, * FROM sessions WHERE rowid < @after ORDER BY rowid DESC LIMIT @limit',
    ),
    insertMessage: db.prepare(
      `INSERT INTO session_messages (session_id, message_id, role, text, execution_id, created)
       VALUES (@session_id, @message_id, @role, @text, @execution_id, @created)`,
    ),
    messageByKey: db.prepare<[string, string, string], SessionMessageRow>(
      'SELECT * FROM session_messages WHERE session_id = ? AND role = ? AND message_id = ?',
    ),
    messages: db.prepare<[string], SessionMessageRow>(
      'SELECT * FROM session_messages WHERE session_id = ? ORDER BY seq',
    ),
    /** Keep the newest `keep` messages of a session (sessionHistoryMax). */
    trimMessages: db.prepare<[string, string, number]>(
      'DELETE FROM session_messages WHERE session_id = ? AND seq NOT IN (SELECT seq FROM session_messages WHERE session_id = ? ORDER BY seq DESC LIMIT ?)',
    ),

    insertApproval: db.prepare(
      `INSERT INTO approvals (approval_id, execution_id, call_id, tool, tool_version, input, requested_by, status, expires, created)
       VALUES (@approval_id, @execution_id, @call_id, @tool, @tool_version, @input, @requested_by, 'PENDING', @expires, @created)`,
    ),
    approvalById: db.prepare<[string], ApprovalRow>('SELECT * FROM approvals WHERE approval_id = ?'),
    approvalByCall: db.prepare<[string], ApprovalRow>('SELECT * FROM approvals WHERE call_id = ?'),
    /** A decision, only on a PENDING approval (0 changes: it was decided, expired or cancelled already). */
    decideApproval: db.prepare<
      [{ approval_id: string; status: string; reason: string | null; decided_by: string | null; decided: string }]
    >(
      "UPDATE approvals SET status = @status, reason = @reason, decided_by = @decided_by, decided = @decided WHERE approval_id = @approval_id AND status = 'PENDING'",
    ),
    cancelApprovalsOf: db.prepare<[string, string]>(
      "UPDATE approvals SET status = 'CANCELLED', decided = ? WHERE execution_id = ? AND status = 'PENDING'",
    ),
    /** Oldest first, optionally one status; `after` is the rowid of the previous page's last row. */
    approvalsPage: db.prepare<
      [{ after: number; limit: number; status: string | null }],
      ApprovalRow & { rowid: number }
    >(
      'SELECT rowid, * FROM approvals WHERE rowid > @after AND (CAST(@status AS TEXT) IS NULL OR status = @status) ORDER BY rowid LIMIT @limit',
    ),

    /** Park a run on an approval: WAITING_APPROVAL, due when it expires, the lease given up and the attempt not counted. */
    parkRun: db.prepare<[{ execution_id: string; owner: string; expires: string; now: string }]>(
      `UPDATE executions SET status = 'WAITING_APPROVAL', run_at = @expires, lease_owner = NULL, lease_until = NULL, attempt = attempt - 1, modified = @now
       WHERE execution_id = @execution_id AND status = 'RUNNING' AND lease_owner = @owner`,
    ),
    /** A decision makes a parked run due at once. */
    wakeRun: db.prepare<[{ id: string; now: string }]>(
      "UPDATE executions SET status = 'QUEUED', run_at = @now, modified = @now WHERE execution_id = @id AND status = 'WAITING_APPROVAL'",
    ),
    requestCancel: db.prepare<[string, string]>(
      "UPDATE executions SET cancel_requested = 1, modified = ? WHERE execution_id = ? AND status = 'RUNNING'",
    ),
    cancelParked: db.prepare<[{ id: string; now: string }]>(
      "UPDATE executions SET status = 'CANCELLED', run_at = NULL, finished = @now, modified = @now WHERE execution_id = @id AND status = 'WAITING_APPROVAL'",
    ),
    unfinishedTurns: db.prepare<
      [string],
      { execution_id: string; status: string; kind: string; parent_id: string | null }
    >(
      "SELECT execution_id, status, kind, parent_id FROM executions WHERE session_id = ? AND status IN ('QUEUED', 'RUNNING', 'WAITING_APPROVAL')",
    ),
    /** Session turns: the queue row carries its session, so its turns run one after another. */
    setSession: db.prepare<[string, string]>('UPDATE executions SET session_id = ? WHERE execution_id = ?'),
  };
}

export type SessionStatements = ReturnType<typeof sessionStatements>;
