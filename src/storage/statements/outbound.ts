/**
 * Outside calls (DESIGN §11) in the schema: migration 22, which lets executions be of the kinds HTTP
 * and MCP and adds outbound_sends, the count of requests each outside call sent (its statements are
 * the queue's, in statements/actions.ts).
 */
/** The table migration 22 adds, in a dialect's words (its integer type, and SQLite's WITHOUT ROWID). */
const outboundSends = (integer: 'INTEGER' | 'BIGINT', rowid: ' WITHOUT ROWID' | '') => `
  -- Each outside call (an http tool, an MCP server's tool) counts here the requests it sent, before
  -- it sends each one: a call resumed after its worker died finds the send before it, whose outcome
  -- nobody recorded. The idempotency key is derived from the execution; it is kept to be shown.
  CREATE TABLE IF NOT EXISTS outbound_sends (
    execution_id    TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL,
    sends           ${integer} NOT NULL,
    last_sent       TEXT NOT NULL
  )${rowid};
`;

/**
 * Migration 22: executions of two more kinds run outside transactions, HTTP (an http tool's call
 * to an operator's integration) and MCP (a call of a tool of an operator's MCP server); SQLite
 * cannot alter a CHECK constraint, so the table is rebuilt with its rows, seq values and indexes.
 */
export const OUTSIDE_CALLS_MIGRATION_SQL = `
  CREATE TABLE executions_v22 (
    seq               INTEGER PRIMARY KEY,
    execution_id      TEXT NOT NULL UNIQUE,
    action_id         TEXT,
    action_name       TEXT NOT NULL,
    action_version    INTEGER,
    kind              TEXT NOT NULL CHECK (kind IN ('TOOL','GRAPHQL','CEL','MODEL','AGENT','HTTP','MCP')),
    status            TEXT NOT NULL CHECK (status IN ('QUEUED','RUNNING','WAITING_APPROVAL','SUCCEEDED','FAILED','CANCELLED','CACHED')),
    input             TEXT NOT NULL,
    input_fingerprint TEXT,
    output            TEXT,
    error             TEXT,
    principal         TEXT,
    parent_id         TEXT,
    root_id           TEXT NOT NULL,
    depth             INTEGER NOT NULL,
    attempt           INTEGER NOT NULL,
    started           TEXT,
    finished          TEXT,
    logs              TEXT,
    created           TEXT NOT NULL,
    modified          TEXT NOT NULL,
    run_at            TEXT,
    max_attempts      INTEGER,
    lease_owner       TEXT,
    lease_until       TEXT,
    trigger_id        TEXT,
    start_stack       TEXT,
    trigger_depth     INTEGER NOT NULL DEFAULT 0,
    transport         TEXT,
    -- A MODEL execution's call: provider, model, tokens, latency, HTTP tries, stop reason (JSON).
    model             TEXT,
    -- The session whose turn this agent run is.
    session_id        TEXT,
    -- cancelExecution asked a RUNNING run to stop at its next step.
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    -- A CACHED call: the execution whose recorded output it returned.
    cached_from       TEXT,
    calls             TEXT
  );
  INSERT INTO executions_v22 SELECT seq, execution_id, action_id, action_name, action_version, kind, status, input,
      input_fingerprint, output, error, principal, parent_id, root_id, depth, attempt, started, finished, logs, created,
      modified, run_at, max_attempts, lease_owner, lease_until, trigger_id, start_stack, trigger_depth, transport, model,
      session_id, cancel_requested, cached_from, calls FROM executions;
  DROP TABLE executions;
  ALTER TABLE executions_v22 RENAME TO executions;
  CREATE INDEX executions_by_parent ON executions (parent_id, seq) WHERE parent_id IS NOT NULL;
  CREATE INDEX executions_by_action ON executions (action_id, seq) WHERE action_id IS NOT NULL;
  CREATE INDEX executions_active_by_status ON executions (status, seq) WHERE parent_id IS NULL AND status IN ('QUEUED', 'RUNNING');
  CREATE INDEX executions_due ON executions (run_at) WHERE status IN ('QUEUED', 'RUNNING', 'WAITING_APPROVAL');
  CREATE INDEX executions_by_session ON executions (session_id, seq) WHERE session_id IS NOT NULL;
  ${outboundSends('INTEGER', ' WITHOUT ROWID')}
`;

export const OUTSIDE_CALLS_MIGRATION_POSTGRES = `
  ALTER TABLE executions DROP CONSTRAINT IF EXISTS executions_kind_check;
  ALTER TABLE executions ADD CONSTRAINT executions_kind_check CHECK (kind IN ('TOOL','GRAPHQL','CEL','MODEL','AGENT','HTTP','MCP'));
  ${outboundSends('BIGINT', '')}
`;
