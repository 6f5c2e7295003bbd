import { hash } from 'node:crypto';
import type { Statement } from 'better-sqlite3';
import { isPostgres } from '../backend.js';
import type { Db } from '../database.js';

/** The execution kinds the worker runs outside transactions (model, agent, http, mcp), as SQL: the queue's claim queries. */
const OUTSIDE_KINDS_SQL = "('MODEL', 'AGENT', 'HTTP', 'MCP')";

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

/** A progress message as execution_progress holds it (migration 20). */
export interface ProgressRow {
  seq: number;
  root_id: string;
  execution_id: string;
  text: string;
  created: string;
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
  /** 'mcp' for a top-level call an MCP client made; null otherwise. */
  transport?: string | null;
  /** A MODEL execution's provider call (JSON of ModelCallRecord). */
  model?: string | null;
  /** The session whose turn this agent run is. */
  session_id?: string | null;
  /** 1 once cancelExecution asked a RUNNING run to stop. */
  cancel_requested?: number;
  /** A CACHED call: the execution whose output it returned. */
  cached_from?: string | null;
  /** The native graphql() and cel() calls it holds (JSON array of CompactCall), or null. */
  calls?: string | null;
}

/**
 * A program's own graphql() or cel() call (native, no input fingerprint: its id is the engine's),
 * stored as one entry of a JSON array in the `calls` column of its holder: the nearest ancestor
 * that is an executions row. Its other fields (action, kind, principal, root, depth, attempt,
 * logs) follow from these and from the holder; call_ids finds the holder by the call's id.
 */
export interface CompactCall {
  id: string;
  /** Its parent, when that is not the holder (a call made under another compact call). */
  p?: string | null;
  /** How many of its siblings that are rows were made before it: it is listed among them by this. */
  n: number;
  /** 'graphql' | 'cel': the action name; the kind is its upper case. */
  k: string;
  /** Status (SUCCEEDED or FAILED). */
  s: string;
  /** The sha256 of its query, whose text is in documents: its input is then {query, ...i}. */
  d?: string | null;
  i: unknown;
  o?: unknown;
  e?: unknown;
  /** started, finished, and created when it differs from started. */
  t?: string | null;
  f?: string | null;
  c?: string | null;
  /** Root, principal, depth and attempt, when they differ from the holder's. */
  r?: string | null;
  u?: string | null;
  dp?: number | null;
  at?: number | null;
}

/** A row's compact calls, parsed once per row read. */
export interface HeldCalls {
  holder: ExecutionRow;
  entries?: CompactCall[];
}

/** On a row made from a compact entry (and on its node): the holder it came from. */
export const HELD = Symbol('held calls');

/** The entries of a holder row (parsed on first use). */
export function heldEntries(held: HeldCalls): CompactCall[] {
  held.entries ??= held.holder.calls ? (JSON.parse(held.holder.calls) as CompactCall[]) : [];
  return held.entries;
}

/** The executions row a compact entry stands for, as the row it was before migration 15. */
export function compactRow(
  held: HeldCalls,
  entry: CompactCall,
  documentText: (sha256: string) => string | undefined,
): ExecutionRow {
  const h = held.holder;
  let input = entry.i;
  if (entry.d) {
    const query = documentText(entry.d);
    input = {
      query: query ?? null,
      ...(entry.i !== null && typeof entry.i === 'object' ? (entry.i as Record<string, unknown>) : {}),
    };
  }
  const created = entry.c ?? entry.t ?? h.created;
  const row: ExecutionRow & Record<string, unknown> = {
    seq: h.seq,
    execution_id: entry.id,
    action_id: null,
    action_name: entry.k,
    action_version: null,
    kind: entry.k.toUpperCase(),
    status: entry.s,
    input: JSON.stringify(input ?? null),
    input_fingerprint: null,
    output: entry.o === undefined || entry.o === null ? null : JSON.stringify(entry.o),
    error: entry.e === undefined || entry.e === null ? null : JSON.stringify(entry.e),
    principal: entry.u ?? h.principal,
    parent_id: entry.p ?? h.execution_id,
    root_id: entry.r ?? h.root_id,
    depth: entry.dp ?? h.depth,
    attempt: entry.at ?? h.attempt,
    started: entry.t ?? created,
    finished: entry.f ?? null,
    logs: null,
    created,
    modified: entry.f ?? created,
    transport: null,
    model: null,
    session_id: null,
    cancel_requested: 0,
    cached_from: null,
    calls: null,
    run_at: null,
    max_attempts: null,
    lease_owner: null,
    lease_until: null,
    trigger_id: null,
    start_stack: null,
    trigger_depth: 0,
  };
  Object.defineProperty(row, HELD, { value: held, enumerable: false });
  return row;
}

/** Query texts' sha256, remembered per engine (a program runs the same few documents): at most this many, of at most this many characters each. */
const DOCUMENT_HASHES_MAX = 1024;
const DOCUMENT_HASHED_CHARS_MAX = 4096;

/** A session's turns run in order: one is due only when no earlier turn of its session is unfinished. */
const EARLIER_TURN_DONE = `(e.session_id IS NULL OR NOT EXISTS (SELECT 1 FROM executions p WHERE p.session_id = e.session_id AND p.seq < e.seq
  AND p.status IN ('QUEUED', 'RUNNING', 'WAITING_APPROVAL')))`;

/** Rows per INSERT of call ids, largest first: 1,024 ids take 16 statements, any count at most 64/64 + 7 + 7. */
const CALL_ID_ROWS = [64, 8, 1] as const;

/** Every SQL statement of actions and executions, prepared once per engine. */
export function actionStatements(db: Db) {
  const pages = new Map<string, Statement>();
  const rowById = db.prepare<[string], ExecutionRow>('SELECT * FROM executions WHERE execution_id = ?');
  const holderOfCall = db.prepare<[string], ExecutionRow>(
    'SELECT e.* FROM call_ids c JOIN executions e ON e.seq = c.holder WHERE c.call_id = ?',
  );
  const documentText = db.prepare<[string], string>('SELECT text FROM documents WHERE sha256 = ?').pluck();
  const insertDocument = db.prepare<[string, string, string]>(
    'INSERT OR IGNORE INTO documents (sha256, text, created) VALUES (?, ?, ?)',
  );
  const hashes = new Map<string, string>();
  // The multi-row inserts of call ids, prepared when first needed, by rows per statement.
  const insertCallIds: Record<number, Statement> = {};
  const textOf = (sha256: string) => documentText.get(sha256);
  /** The row of an execution, or of a compact call (made from its entry; undefined: no such execution). */
  const executionById = (id: string): ExecutionRow | undefined => {
    const row = rowById.get(id);
    if (row !== undefined) return row;
    const holder = holderOfCall.get(id);
    if (holder === undefined) return undefined;
    const held: HeldCalls = { holder };
    const entry = heldEntries(held).find((e) => e.id === id);
    return entry ? compactRow(held, entry, textOf) : undefined;
  };
  return {
    actionById: db.prepare<[string], ActionRow>('SELECT * FROM actions WHERE action_id = ?'),
    actionByName: db.prepare<[string], ActionRow>('SELECT * FROM actions WHERE name = ?'),
    actionsPage: db.prepare<[number, number], ActionRow & { rowid: number }>(
      'SELECT rowid, * FROM actions WHERE rowid > ? ORDER BY rowid LIMIT ?',
    ),
    actionRowid: db.prepare<[string], number>('SELECT rowid FROM actions WHERE action_id = ?').pluck(),
    insertAction: db.prepare(
      'INSERT INTO actions (action_id, name, latest_version, created, modified) VALUES (@action_id, @name, @latest_version, @created, @modified)',
    ),
    updateActionLatest: db.prepare<[number, string, string]>(
      'UPDATE actions SET latest_version = ?, modified = ? WHERE action_id = ?',
    ),
    version: db.prepare<[string, number], ActionVersionRow>(
      'SELECT * FROM action_versions WHERE action_id = ? AND version = ?',
    ),
    versions: db.prepare<[string], ActionVersionRow>(
      'SELECT * FROM action_versions WHERE action_id = ? ORDER BY version',
    ),
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

    /** An execution by id: a row, or a compact call (see CompactCall) as the row it stands for. */
    executionById: { get: executionById },
    /** The statements behind executionById (for query-plan tests). */
    executionRowById: rowById,
    holderOfCall,
    documentText,
    /** A compact call's row (its holder already read). */
    compactRow: (held: HeldCalls, entry: CompactCall) => compactRow(held, entry, textOf),
    /** Holder of new compact calls of an existing execution (a started execution's attempt). */
    holderById: rowById,
    /** Rows among the children of an execution (compact calls are not rows). */
    childRowCount: db.prepare<[string], number>('SELECT count(*) FROM executions WHERE parent_id = ?').pluck(),
    setCalls: db.prepare<[string, number]>('UPDATE executions SET calls = ? WHERE seq = ?'),
    /** Every id of one holder's compact calls, several rows per statement (one round trip each on PostgreSQL). */
    insertCallIds: (ids: readonly string[], holder: number): void => {
      let i = 0;
      for (const size of CALL_ID_ROWS) {
        const statement = (insertCallIds[size] ??= db.prepare(
          `INSERT INTO call_ids (call_id, holder) VALUES ${Array(size).fill('(?, ?)').join(', ')}`,
        ));
        for (; ids.length - i >= size; i += size) {
          const values: Array<string | number> = [];
          for (let k = i; k < i + size; k++) values.push(ids[k]!, holder);
          statement.run(...values);
        }
      }
    },
    /** The sha256 of a query text, its document written once (INSERT OR IGNORE: a probe when it exists). */
    documentHash: (text: string, now: string): string => {
      let sha256 = hashes.get(text);
      if (sha256 === undefined) {
        sha256 = hash('sha256', text, 'hex');
        if (text.length <= DOCUMENT_HASHED_CHARS_MAX) {
          if (hashes.size >= DOCUMENT_HASHES_MAX) hashes.clear();
          hashes.set(text, sha256);
        }
      }
      insertDocument.run(sha256, text, now);
      return sha256;
    },
    /** 1 when cancelExecution asked the run to stop (undefined: no such execution). */
    cancelRequested: db
      .prepare<[string], number>('SELECT cancel_requested FROM executions WHERE execution_id = ?')
      .pluck(),
    /** The idempotency check of every invoke: only the fingerprint (undefined: no such execution). */
    fingerprintOfExecution: ((statement) => ({
      get: (id: string): string | null | undefined => statement.get(id, id),
      statement,
    }))(
      db
        .prepare<[string, string], string | null>(
          'SELECT input_fingerprint FROM executions WHERE execution_id = ? UNION ALL SELECT NULL FROM call_ids WHERE call_id = ?',
        )
        .pluck(),
    ),
    executionChildren: db.prepare<[string], ExecutionRow>('SELECT * FROM executions WHERE parent_id = ? ORDER BY seq'),
    /** A progress message a call said (migration 20), written with the call's record. */
    insertProgress: db.prepare<[string, string, string, string]>(
      'INSERT INTO execution_progress (root_id, execution_id, text, created) VALUES (?, ?, ?, ?)',
    ),
    /**
     * The progress messages of an execution after `seq`, oldest first: every call's of the tree it is
     * the root of, and its own (a nested call's own), at most `limit`.
     */
    progressAfter: db.prepare<[string, number, string, string, number, number], ProgressRow>(
      `SELECT * FROM (
         SELECT seq, root_id, execution_id, text, created FROM execution_progress WHERE root_id = ? AND seq > ?
         UNION ALL
         SELECT seq, root_id, execution_id, text, created FROM execution_progress WHERE execution_id = ? AND root_id <> ? AND seq > ?
       ) AS p ORDER BY seq LIMIT ?`,
    ),
    /** The seq of the newest progress message progressAfter would read for an execution (0: none). */
    progressLatest: db
      .prepare<[string, string], number>(
        `SELECT coalesce(max(seq), 0) FROM (
           SELECT max(seq) AS seq FROM execution_progress WHERE root_id = ?
           UNION ALL
           SELECT max(seq) AS seq FROM execution_progress WHERE execution_id = ?
         ) AS p`,
      )
      .pluck(),
    /**
     * A page of executions, every condition given in the SQL (the page is never short for a
     * filter applied afterwards): by action, all its executions; otherwise top-level ones only.
     * One prepared statement per combination of conditions and order; `after` is the seq of the
     * previous page's last row (newest first: the rows before it).
     */
    executionsWhere: (
      where: { actionId: string | null; status: string | null; since: string | null },
      after: number,
      limit: number,
      newestFirst = false,
    ): ExecutionRow[] => {
      const key = `${where.actionId === null ? '' : 'a'}${where.status === null ? '' : 's'}${where.since === null ? '' : 'c'}${newestFirst ? 'd' : ''}`;
      let statement = pages.get(key);
      if (!statement) {
        const conditions = [where.actionId === null ? 'parent_id IS NULL' : 'action_id = @actionId'];
        if (where.status !== null) conditions.push('status = @status');
        if (where.since !== null) conditions.push('created >= @since');
        statement = db.prepare(
          `SELECT * FROM executions WHERE ${conditions.join(' AND ')} AND ${newestFirst ? 'seq < @after ORDER BY seq DESC' : 'seq > @after ORDER BY seq'} LIMIT @limit`,
        );
        pages.set(key, statement);
      }
      const params: Record<string, unknown> = { after, limit };
      if (where.actionId !== null) params.actionId = where.actionId;
      if (where.status !== null) params.status = where.status;
      if (where.since !== null) params.since = where.since;
      return statement.all(params) as ExecutionRow[];
    },
    /** Positional, in the column order below (binding 20 values by name costs more, once per call recorded). */
    insertExecution: db.prepare<
      [
        string,
        string | null,
        string,
        number | null,
        string,
        string,
        string,
        string | null,
        string | null,
        string | null,
        string | null,
        string | null,
        string,
        number,
        number,
        string | null,
        string | null,
        string | null,
        string,
        string,
        string | null,
        string | null,
        string | null,
        string | null,
      ]
    >(
      `INSERT INTO executions (execution_id, action_id, action_name, action_version, kind, status, input, input_fingerprint,
         output, error, principal, parent_id, root_id, depth, attempt, started, finished, logs, created, modified, transport, model, cached_from, calls)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ),
  };
}

export type ActionStatements = ReturnType<typeof actionStatements>;

export interface InvocationRow {
  execution_id: string;
  attempt: number;
  status: string;
  output: string | null;
  error: string | null;
  started: string;
  finished: string;
  logs: string | null;
}

export interface QueueRow extends ExecutionRow {
  run_at: string | null;
  max_attempts: number | null;
  trigger_id: string | null;
  start_stack: string | null;
  /** Triggers fired one after another to start it (0: not started by a trigger). */
  trigger_depth: number;
}

export interface TriggerRow {
  trigger_id: string;
  name: string;
  events: string;
  filter: string | null;
  action_name: string;
  action_version: number | null;
  input: string | null;
  principal: string;
  /** The owner before the last update re-owned it to the updater. */
  previous_principal: string | null;
  status: string;
  version: number;
  created: string;
  modified: string;
}

/** The queue: started executions, their attempts, and triggers that start them. */
export function queueStatements(db: Db) {
  return {
    insertQueued: db.prepare(
      `INSERT INTO executions (execution_id, action_id, action_name, action_version, kind, status, input, input_fingerprint,
         output, error, principal, parent_id, root_id, depth, attempt, started, finished, logs, created, modified, run_at, max_attempts, trigger_id, start_stack, trigger_depth, transport)
       VALUES (@execution_id, @action_id, @action_name, @action_version, @kind, 'QUEUED', @input, @input_fingerprint,
         NULL, NULL, @principal, NULL, @execution_id, 0, 0, NULL, NULL, NULL, @created, @created, @run_at, @max_attempts, @trigger_id, @start_stack, @trigger_depth, @transport)`,
    ),
    /**
     * The next due execution: QUEUED at its run_at, or a RUNNING model or agent run whose lease
     * (run_at) expired because its worker died. Model and agent runs only when `runs` is 1 (the
     * worker has a slot), and not those of the principals in `busy` (a JSON array: those at their
     * share of the slots), so one client's runs cannot take every slot.
     */
    nextDue: db.prepare<[{ now: string; runs: number; busy: string }], QueueRow>(
      `SELECT * FROM executions e WHERE status IN ('QUEUED', 'RUNNING', 'WAITING_APPROVAL') AND run_at <= @now
         AND (kind NOT IN ${OUTSIDE_KINDS_SQL} OR (@runs = 1 AND coalesce(principal, '') NOT IN (SELECT value FROM json_each(@busy))))
         AND ${EARLIER_TURN_DONE}
       ORDER BY run_at, seq LIMIT 1${
         // PostgreSQL, many workers: each claims a due row no other worker holds, and skips those
         // another has locked rather than wait for them (SQLite has one writer: nothing to skip).
         isPostgres(db) ? ' FOR UPDATE OF e SKIP LOCKED' : ''
       }`,
    ),
    /** When the next execution nextDue would take is due (the same conditions, without `now`). */
    nextRunAt: db.prepare<[{ runs: number; busy: string }], { run_at: string | null }>(
      `SELECT min(run_at) AS run_at FROM executions e WHERE status IN ('QUEUED', 'RUNNING', 'WAITING_APPROVAL')
         AND (kind NOT IN ${OUTSIDE_KINDS_SQL} OR (@runs = 1 AND coalesce(principal, '') NOT IN (SELECT value FROM json_each(@busy))))
         AND ${EARLIER_TURN_DONE}`,
    ),
    /** Claim a model or agent run for one attempt: RUNNING, leased to `owner` until `until` (its run_at while it runs). */
    claimRun: db.prepare<[{ execution_id: string; owner: string; until: string; now: string }]>(
      `UPDATE executions SET status = 'RUNNING', attempt = attempt + 1, lease_owner = @owner, lease_until = @until, run_at = @until, modified = @now
       WHERE execution_id = @execution_id AND status IN ('QUEUED', 'RUNNING', 'WAITING_APPROVAL') AND run_at <= @now`,
    ),
    /** Extend a lease this owner still holds (0 changes: it lost the run to another worker, or it was cancelled). */
    renewLease: db.prepare<[{ execution_id: string; owner: string; until: string }]>(
      "UPDATE executions SET lease_until = @until, run_at = @until WHERE execution_id = @execution_id AND status = 'RUNNING' AND lease_owner = @owner",
    ),
    /** Give a run back (its worker is stopping): due now, the interrupted attempt not counted. */
    releaseRun: db.prepare<[{ execution_id: string; owner: string; now: string }]>(
      `UPDATE executions SET status = 'QUEUED', attempt = attempt - 1, run_at = @now, lease_owner = NULL, lease_until = NULL, modified = @now
       WHERE execution_id = @execution_id AND status = 'RUNNING' AND lease_owner = @owner`,
    ),
    /** Count one more request an outside call is about to send; returns the count, this one included. */
    recordSend: db.prepare<[{ execution_id: string; idempotency_key: string; now: string }], { sends: number }>(
      `INSERT INTO outbound_sends (execution_id, idempotency_key, sends, last_sent) VALUES (@execution_id, @idempotency_key, 1, @now)
       ON CONFLICT (execution_id) DO UPDATE SET sends = outbound_sends.sends + 1, last_sent = excluded.last_sent
       RETURNING sends`,
    ),
    /** The requests an outside call sent, and its idempotency key (null: it sent none). */
    sendsOf: db.prepare<[string], { sends: number; idempotency_key: string; last_sent: string }>(
      'SELECT sends, idempotency_key, last_sent FROM outbound_sends WHERE execution_id = ?',
    ),
    /** A nested agent run's own row, when it ends (its steps are recorded under it). */
    finishNested: db.prepare<
      [{ execution_id: string; status: string; output: string | null; error: string | null; finished: string }]
    >(
      'UPDATE executions SET status = @status, output = @output, error = @error, finished = @finished, modified = @finished WHERE execution_id = @execution_id',
    ),
    queueStats: db.prepare<[{ now: string }], { queued: number; due: number; oldest_due: string | null }>(
      `SELECT count(*) AS queued, count(*) FILTER (WHERE run_at <= @now) AS due, min(CASE WHEN run_at <= @now THEN run_at END) AS oldest_due
         FROM executions WHERE status = 'QUEUED'`,
    ),
    queuedById: db.prepare<[string], QueueRow>('SELECT * FROM executions WHERE execution_id = ?'),
    /** Just the status, for a client waiting on an execution (polled; see Engine.waitForExecution). */
    executionStatus: db.prepare<[string], string>('SELECT status FROM executions WHERE execution_id = ?').pluck(),
    finishAttempt: db.prepare(
      `UPDATE executions SET status = @status, attempt = @attempt, output = @output, error = @error, started = @started,
         finished = @finished, logs = @logs, run_at = @run_at, modified = @finished, lease_owner = @lease_owner, lease_until = NULL
       WHERE execution_id = @execution_id`,
    ),
    cancel: db.prepare<[string, string]>(
      "UPDATE executions SET status = 'CANCELLED', modified = ? WHERE execution_id = ? AND status = 'QUEUED'",
    ),
    insertInvocation: db.prepare(
      `INSERT INTO invocations (execution_id, attempt, status, output, error, started, finished, logs)
       VALUES (@execution_id, @attempt, @status, @output, @error, @started, @finished, @logs)`,
    ),
    invocations: db.prepare<[string], InvocationRow>(
      'SELECT * FROM invocations WHERE execution_id = ? ORDER BY attempt',
    ),
    counts: db.prepare<[], { status: string; n: number }>(
      "SELECT status, count(*) AS n FROM executions WHERE parent_id IS NULL AND status IN ('QUEUED', 'RUNNING') GROUP BY status",
    ),
    failedCount: db.prepare<[], { n: number }>(
      "SELECT count(*) AS n FROM executions WHERE parent_id IS NULL AND status = 'FAILED'",
    ),

    activeTriggers: db.prepare<[], TriggerRow>("SELECT * FROM triggers WHERE status = 'ACTIVE'"),
    triggerById: db.prepare<[string], TriggerRow>('SELECT * FROM triggers WHERE trigger_id = ?'),
    triggerByName: db.prepare<[string], TriggerRow>('SELECT * FROM triggers WHERE name = ?'),
    triggersPage: db.prepare<[number, number], TriggerRow & { rowid: number }>(
      'SELECT rowid, * FROM triggers WHERE rowid > ? ORDER BY rowid LIMIT ?',
    ),
    insertTrigger: db.prepare(
      `INSERT INTO triggers (trigger_id, name, events, filter, action_name, action_version, input, principal, status, version, created, modified)
       VALUES (@trigger_id, @name, @events, @filter, @action_name, @action_version, @input, @principal, @status, 1, @created, @modified)`,
    ),
    updateTrigger: db.prepare(
      `UPDATE triggers SET name = @name, events = @events, filter = @filter, action_name = @action_name, action_version = @action_version,
         input = @input, status = @status, principal = @principal, previous_principal = @previous_principal, version = version + 1,
         modified = @modified WHERE trigger_id = @trigger_id`,
    ),
    deleteTrigger: db.prepare<[string]>('DELETE FROM triggers WHERE trigger_id = ?'),
    /** The key of derived execution ids (written once by migration 6; never exposed through the API). */
    derivedIdKey: db.prepare<[], string>("SELECT value FROM settings WHERE name = 'derived_id_key'").pluck(),
  };
}

export type QueueStatements = ReturnType<typeof queueStatements>;
