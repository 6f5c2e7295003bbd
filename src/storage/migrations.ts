/**
 * Numbered, forward-only migrations. A migration is never edited once it has shipped: change the
 * schema by appending the next one. `user_version` records the last one applied.
 *
 * Amounts are TEXT holding exact decimal strings (see src/decimal.ts); SQLite never does arithmetic
 * on them. Every table has `version`, `created`, `modified` like the records it stores.
 */
import { CALCULATIONS_MIGRATION_SQL } from './statements/calculations.js';
import { OUTSIDE_CALLS_MIGRATION_SQL, OUTSIDE_CALLS_MIGRATION_POSTGRES } from './statements/outbound.js';
import { VIEWS_MIGRATION_SQL } from './statements/views.js';

export interface Migration {
  version: number;
  name: string;
  sql: string;
  /**
   * The same change in PostgreSQL's words, for a migration after POSTGRES_FIRST (a PostgreSQL
   * database is created at the newest schema and upgraded by these; see src/storage/pg/schema.ts).
   */
  postgres?: string;
}

/** The schema version the first PostgreSQL databases were created at: every later migration has a PostgreSQL twin. */
export const POSTGRES_FIRST = 16;

export const DEFAULT_JOURNAL_ID = '00000000-0000-0000-0000-000000000000';

/**
 * Migration 18 (its PostgreSQL twin below): every balance record chains its entries, as a set's
 * have since migration 16. Each entry holds the seq of the previous entry of its account's record
 * (account, journal, currency): entries.account_prev. The record holds the newest (log_head),
 * and every 64th entry of a chain is a mark, for accounts as for sets (entry_marks, the
 * set_entry_marks of migration 16 renamed). An account's entries are read through its chains, so
 * entries_by_account (account_id, seq) goes: an index that took every entry into a random leaf of
 * its own b-tree (about three WAL pages a posting; the posting ~15 % faster without it).
 * PostgreSQL's twin differs in the column's type (SQLite's INTEGER is its BIGINT) and names the
 * renamed table's primary key as a new database names it. A mark falls on every 64th entry of a
 * chain here; a posting marks its last entry when it passes a multiple: either serves a seek.
 */
const migration18 = (integer: 'INTEGER' | 'BIGINT') => `
      ALTER TABLE entries ADD COLUMN account_prev ${integer};
      CREATE TEMP TABLE m18_rows AS
        SELECT seq, account_id, journal_id, currency, lag(seq) OVER chain AS prev, row_number() OVER chain AS n
        FROM entries
        WINDOW chain AS (PARTITION BY account_id, journal_id, currency ORDER BY seq);
      UPDATE entries SET account_prev = r.prev FROM m18_rows AS r WHERE entries.seq = r.seq AND r.prev IS NOT NULL;
      ALTER TABLE set_entry_marks RENAME TO entry_marks;
      ALTER TABLE entry_marks RENAME COLUMN account_set_id TO account_id;${integer === 'BIGINT' ? '\n      ALTER TABLE entry_marks RENAME CONSTRAINT set_entry_marks_pkey TO entry_marks_pkey;' : ''}
      INSERT INTO entry_marks (account_id, journal_id, currency, seq)
        SELECT account_id, journal_id, currency, seq FROM m18_rows WHERE n % 64 = 0;
      UPDATE balances SET log_head = h.head, log_prev = h.before_head, log_count = h.entries
        FROM (SELECT account_id, journal_id, currency, max(seq) AS head, max(prev) AS before_head, count(*) AS entries
              FROM m18_rows GROUP BY account_id, journal_id, currency) AS h
        WHERE balances.account_id = h.account_id AND balances.journal_id = h.journal_id AND balances.currency = h.currency;
      DROP TABLE m18_rows;
      DROP INDEX entries_by_account;
    `;

/**
 * Migration 19: what `tally deploy` last wrote of each record it manages (src/deploy/records.ts),
 * written in the deploy's own transaction. The next deploy reads it to tell a field changed at
 * runtime since (a tool's metadata, a status an operator set) from a field the project files
 * changed. `state` is the deploy's JSON; `principal` the client that deployed.
 */
const migration19 = (integer: 'INTEGER' | 'BIGINT', withoutRowid: string) => `
      CREATE TABLE IF NOT EXISTS deployed_records (
        kind        TEXT NOT NULL,
        record_id   TEXT NOT NULL,
        state       TEXT NOT NULL,
        principal   TEXT NOT NULL,
        version     ${integer} NOT NULL,
        created     TEXT NOT NULL,
        modified    TEXT NOT NULL,
        PRIMARY KEY (kind, record_id)
      )${withoutRowid};
    `;

/**
 * Migration 20: the progress messages a call said (a program's `status(text)`), in the order said.
 * `root_id` is the top-level call of its tree (an agent run for the tools it called), so a caller
 * reads a whole run's messages through one index, newest after a seq it saw; `execution_id` is the
 * call that said it. Written with the call's record, so a failed call's messages survive its
 * rollback as its logs do. PostgreSQL's twin is what a new database gets for the same table.
 */
const MIGRATION_20 = `
      CREATE TABLE IF NOT EXISTS execution_progress (
        seq          INTEGER PRIMARY KEY,
        root_id      TEXT NOT NULL,
        execution_id TEXT NOT NULL,
        text         TEXT NOT NULL,
        created      TEXT NOT NULL
      );
      CREATE INDEX IF NOT EXISTS execution_progress_by_root ON execution_progress (root_id, seq);
      CREATE INDEX IF NOT EXISTS execution_progress_by_execution ON execution_progress (execution_id, seq);
    `;
const MIGRATION_20_POSTGRES = `
      CREATE TABLE IF NOT EXISTS execution_progress (
        seq          BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        root_id      TEXT NOT NULL,
        execution_id TEXT NOT NULL,
        text         TEXT NOT NULL,
        created      TEXT NOT NULL,
        rowid        BIGINT GENERATED ALWAYS AS (seq) STORED
      );
      CREATE INDEX IF NOT EXISTS execution_progress_by_root ON execution_progress (root_id, seq);
      CREATE INDEX IF NOT EXISTS execution_progress_by_execution ON execution_progress (execution_id, seq);
    `;

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'ledger',
    sql: `
      CREATE TABLE journals (
        journal_id  TEXT PRIMARY KEY,
        name        TEXT NOT NULL,
        description TEXT,
        status      TEXT NOT NULL CHECK (status IN ('ACTIVE','LOCKED')),
        code        TEXT UNIQUE,
        version     INTEGER NOT NULL,
        created     TEXT NOT NULL,
        modified    TEXT NOT NULL
      );
      INSERT INTO journals VALUES ('${DEFAULT_JOURNAL_ID}', 'Default', 'The default journal', 'ACTIVE', 'DEFAULT', 1,
        strftime('%Y-%m-%dT%H:%M:%fZ','now'), strftime('%Y-%m-%dT%H:%M:%fZ','now'));

      CREATE TABLE accounts (
        account_id          TEXT PRIMARY KEY,
        code                TEXT NOT NULL UNIQUE,
        name                TEXT NOT NULL,
        external_id         TEXT UNIQUE,
        description         TEXT,
        status              TEXT NOT NULL CHECK (status IN ('ACTIVE','LOCKED','INACTIVE')),
        normal_balance_type TEXT NOT NULL CHECK (normal_balance_type IN ('DEBIT','CREDIT')),
        metadata            TEXT,
        version             INTEGER NOT NULL,
        created             TEXT NOT NULL,
        modified            TEXT NOT NULL
      );
      CREATE TABLE account_versions (
        account_id TEXT NOT NULL REFERENCES accounts(account_id),
        version    INTEGER NOT NULL,
        document   TEXT NOT NULL,
        PRIMARY KEY (account_id, version)
      ) WITHOUT ROWID;

      CREATE TABLE tran_codes (
        tran_code_id TEXT PRIMARY KEY,
        code         TEXT NOT NULL UNIQUE,
        status       TEXT NOT NULL CHECK (status IN ('ACTIVE','LOCKED')),
        version      INTEGER NOT NULL,
        created      TEXT NOT NULL,
        modified     TEXT NOT NULL
      );
      CREATE TABLE tran_code_versions (
        tran_code_id TEXT NOT NULL REFERENCES tran_codes(tran_code_id),
        version      INTEGER NOT NULL,
        document     TEXT NOT NULL,
        created      TEXT NOT NULL,
        PRIMARY KEY (tran_code_id, version)
      ) WITHOUT ROWID;

      CREATE TABLE transactions (
        seq               INTEGER PRIMARY KEY,
        transaction_id    TEXT NOT NULL UNIQUE,
        tran_code_id      TEXT NOT NULL REFERENCES tran_codes(tran_code_id),
        tran_code_version INTEGER NOT NULL,
        journal_id        TEXT NOT NULL REFERENCES journals(journal_id),
        correlation_id    TEXT,
        external_id       TEXT,
        effective         TEXT NOT NULL,
        description       TEXT,
        metadata          TEXT,
        void_of           TEXT,
        voided_by         TEXT,
        input_fingerprint TEXT,
        first_entry_seq   INTEGER NOT NULL,
        entry_count       INTEGER NOT NULL,
        version           INTEGER NOT NULL,
        created           TEXT NOT NULL,
        modified          TEXT NOT NULL
      );
      -- correlation_id is stored only when it differs from transaction_id (the default), so a
      -- default post does not touch this index; reads match either column.
      CREATE INDEX transactions_by_correlation ON transactions (correlation_id, seq) WHERE correlation_id IS NOT NULL;
      CREATE INDEX transactions_by_journal ON transactions (journal_id, seq);

      CREATE TABLE entries (
        seq            INTEGER PRIMARY KEY,
        entry_id       TEXT NOT NULL UNIQUE,
        transaction_id TEXT NOT NULL REFERENCES transactions(transaction_id),
        account_id     TEXT NOT NULL REFERENCES accounts(account_id),
        journal_id     TEXT NOT NULL REFERENCES journals(journal_id),
        sequence       INTEGER NOT NULL,
        entry_type     TEXT NOT NULL,
        layer          TEXT NOT NULL CHECK (layer IN ('SETTLED','PENDING','ENCUMBRANCE')),
        direction      TEXT NOT NULL CHECK (direction IN ('DEBIT','CREDIT')),
        units          TEXT NOT NULL,
        currency       TEXT NOT NULL,
        description    TEXT,
        metadata       TEXT,
        created        TEXT NOT NULL
      );
      -- A transaction's entries are contiguous in seq (transactions.first_entry_seq, entry_count),
      -- so no index by transaction_id is needed. entry_id is time-ordered, so its index appends.
      CREATE INDEX entries_by_account ON entries (account_id, seq);

      CREATE TABLE balances (
        account_id     TEXT NOT NULL REFERENCES accounts(account_id),
        journal_id     TEXT NOT NULL REFERENCES journals(journal_id),
        currency       TEXT NOT NULL,
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
        PRIMARY KEY (account_id, journal_id, currency)
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 2,
    name: 'actions',
    sql: `
      CREATE TABLE actions (
        action_id      TEXT PRIMARY KEY,
        name           TEXT NOT NULL UNIQUE,
        latest_version INTEGER NOT NULL,
        created        TEXT NOT NULL,
        modified       TEXT NOT NULL
      );
      CREATE TABLE action_versions (
        action_id TEXT NOT NULL REFERENCES actions(action_id),
        version   INTEGER NOT NULL,
        status    TEXT NOT NULL CHECK (status IN ('ACTIVE','LOCKED','DRAFT')),
        document  TEXT NOT NULL,
        created   TEXT NOT NULL,
        modified  TEXT NOT NULL,
        PRIMARY KEY (action_id, version)
      ) WITHOUT ROWID;

      -- One row per call: top-level invocations and every nested tool, graphql and cel call.
      CREATE TABLE executions (
        seq               INTEGER PRIMARY KEY,
        execution_id      TEXT NOT NULL UNIQUE,
        action_id         TEXT,
        action_name       TEXT NOT NULL,
        action_version    INTEGER,
        kind              TEXT NOT NULL CHECK (kind IN ('TOOL','GRAPHQL','CEL')),
        status            TEXT NOT NULL CHECK (status IN ('QUEUED','RUNNING','SUCCEEDED','FAILED','CANCELLED')),
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
        modified          TEXT NOT NULL
      );
      CREATE INDEX executions_by_parent ON executions (parent_id, seq) WHERE parent_id IS NOT NULL;
      CREATE INDEX executions_by_action ON executions (action_id, seq) WHERE action_id IS NOT NULL;
      -- Only unfinished executions are indexed by status (the queue reads them); finished ones are
      -- listed by scanning in seq order, so a finished call pays for no status index.
      CREATE INDEX executions_active_by_status ON executions (status, seq) WHERE parent_id IS NULL AND status IN ('QUEUED', 'RUNNING');
    `,
  },
  {
    version: 3,
    name: 'clients',
    sql: `
      -- API clients. Keys are random 256-bit secrets shown once; only their SHA-256 is stored.
      CREATE TABLE clients (
        principal TEXT PRIMARY KEY,
        name      TEXT NOT NULL,
        policies  TEXT NOT NULL,
        key_hash  TEXT NOT NULL UNIQUE,
        version   INTEGER NOT NULL,
        created   TEXT NOT NULL,
        modified  TEXT NOT NULL
      );
    `,
  },
  {
    version: 4,
    name: 'queue and triggers',
    sql: `
      -- Started executions are queue rows: due at run_at, retried up to max_attempts. An attempt runs
      -- in one SQLite transaction together with its status update, so a crash leaves all or nothing.
      ALTER TABLE executions ADD COLUMN run_at TEXT;
      ALTER TABLE executions ADD COLUMN max_attempts INTEGER;
      ALTER TABLE executions ADD COLUMN lease_owner TEXT;
      ALTER TABLE executions ADD COLUMN lease_until TEXT;
      ALTER TABLE executions ADD COLUMN trigger_id TEXT;
      -- The tools on the starter's call stack when it was started (their policies bound every attempt).
      ALTER TABLE executions ADD COLUMN start_stack TEXT;
      CREATE INDEX executions_due ON executions (run_at) WHERE status = 'QUEUED';
      CREATE INDEX executions_by_created ON executions (created) WHERE parent_id IS NULL;

      -- One row per attempt of a started execution (an invoked one has a single attempt, kept on its row).
      CREATE TABLE invocations (
        execution_id TEXT NOT NULL,
        attempt      INTEGER NOT NULL,
        status       TEXT NOT NULL,
        output       TEXT,
        error        TEXT,
        started      TEXT NOT NULL,
        finished     TEXT NOT NULL,
        logs         TEXT,
        PRIMARY KEY (execution_id, attempt)
      ) WITHOUT ROWID;

      CREATE TABLE triggers (
        trigger_id     TEXT PRIMARY KEY,
        name           TEXT NOT NULL UNIQUE,
        events         TEXT NOT NULL,
        filter         TEXT,
        action_name    TEXT NOT NULL,
        action_version INTEGER,
        input          TEXT,
        principal      TEXT NOT NULL,
        status         TEXT NOT NULL CHECK (status IN ('ACTIVE','LOCKED')),
        version        INTEGER NOT NULL,
        created        TEXT NOT NULL,
        modified       TEXT NOT NULL
      );
    `,
  },
  {
    version: 5,
    name: 'empty correlation ids are none',
    sql: `
      -- A transaction whose correlation template gave '' correlates with itself (NULL, as one
      -- without a template): earlier versions stored '' and so grouped every such transaction together.
      -- A void copied its original's '' and correlates with that original, as a new void does.
      UPDATE transactions SET correlation_id = void_of WHERE correlation_id = '';
    `,
  },
  {
    version: 6,
    name: 'trigger depth, keyed derived ids, trigger owners',
    sql: `
      -- How many triggers fired one after another to start this execution: 0 for one a client
      -- started, 1 for one a client's change triggered, n + 1 for one a change made at depth n
      -- triggered. Bounded by triggerDepthMax, so a trigger whose action posts cannot loop.
      ALTER TABLE executions ADD COLUMN trigger_depth INTEGER NOT NULL DEFAULT 0;

      -- Engine-wide values that are never exposed through the API. derived_id_key keys the ids the
      -- engine derives (a trigger's execution per change): without it a client cannot compute one
      -- and claim it first. randomblob is SQLite's ChaCha20 generator, seeded from the OS.
      CREATE TABLE settings (
        name    TEXT PRIMARY KEY,
        value   TEXT NOT NULL,
        created TEXT NOT NULL
      );
      INSERT INTO settings VALUES ('derived_id_key', lower(hex(randomblob(32))), strftime('%Y-%m-%dT%H:%M:%fZ','now'));

      -- An update re-owns a trigger to the updater; the owner it had before stays visible.
      ALTER TABLE triggers ADD COLUMN previous_principal TEXT;
    `,
  },
  {
    version: 7,
    name: 'execution transport',
    sql: `
      -- How a top-level call reached the engine when it was not plain GraphQL: 'mcp' for a tool an
      -- MCP client called. NULL for GraphQL, nested calls and started executions.
      ALTER TABLE executions ADD COLUMN transport TEXT;
    `,
  },
  {
    version: 8,
    name: 'model and agent executions',
    sql: `
      -- Executions gain two kinds: MODEL (one model call: a model tool, or one turn of an agent run)
      -- and AGENT (an agent run), and statuses: WAITING_APPROVAL (an agent run parked until a person
      -- decides on a call) and CACHED (a read-only call answered from an earlier one's output). SQLite cannot alter a CHECK constraint, so the table is rebuilt with its
      -- rows, seq values (cursors name them) and indexes as they were.
      CREATE TABLE executions_v8 (
        seq               INTEGER PRIMARY KEY,
        execution_id      TEXT NOT NULL UNIQUE,
        action_id         TEXT,
        action_name       TEXT NOT NULL,
        action_version    INTEGER,
        kind              TEXT NOT NULL CHECK (kind IN ('TOOL','GRAPHQL','CEL','MODEL','AGENT')),
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
        cached_from       TEXT
      );
      INSERT INTO executions_v8 (seq, execution_id, action_id, action_name, action_version, kind, status, input, input_fingerprint,
          output, error, principal, parent_id, root_id, depth, attempt, started, finished, logs, created, modified, run_at,
          max_attempts, lease_owner, lease_until, trigger_id, start_stack, trigger_depth, transport)
        SELECT seq, execution_id, action_id, action_name, action_version, kind, status, input, input_fingerprint,
          output, error, principal, parent_id, root_id, depth, attempt, started, finished, logs, created, modified, run_at,
          max_attempts, lease_owner, lease_until, trigger_id, start_stack, trigger_depth, transport FROM executions;
      DROP TABLE executions;
      ALTER TABLE executions_v8 RENAME TO executions;
      CREATE INDEX executions_by_parent ON executions (parent_id, seq) WHERE parent_id IS NOT NULL;
      CREATE INDEX executions_by_action ON executions (action_id, seq) WHERE action_id IS NOT NULL;
      CREATE INDEX executions_active_by_status ON executions (status, seq) WHERE parent_id IS NULL AND status IN ('QUEUED', 'RUNNING');
      CREATE INDEX executions_by_created ON executions (created) WHERE parent_id IS NULL;
      -- Due: a QUEUED execution at run_at; a RUNNING model or agent run (which runs outside any
      -- transaction, holding a lease) at its lease's expiry, when a worker that died left it; one
      -- WAITING_APPROVAL when its approval expires (a decision makes it due at once).
      CREATE INDEX executions_due ON executions (run_at) WHERE status IN ('QUEUED', 'RUNNING', 'WAITING_APPROVAL');
      CREATE INDEX executions_by_session ON executions (session_id, seq) WHERE session_id IS NOT NULL;
    `,
  },
  {
    version: 9,
    name: 'sessions, approvals, skills',
    sql: `
      -- A conversation with one agent about one subject (input, fixed for the session).
      CREATE TABLE sessions (
        session_id     TEXT PRIMARY KEY,
        action_id      TEXT NOT NULL,
        action_name    TEXT NOT NULL,
        action_version INTEGER NOT NULL,
        input          TEXT NOT NULL,
        principal      TEXT NOT NULL,
        status         TEXT NOT NULL CHECK (status IN ('OPEN','CLOSED')),
        last_active    TEXT NOT NULL,
        created        TEXT NOT NULL,
        modified       TEXT NOT NULL
      );
      CREATE INDEX sessions_by_principal ON sessions (principal, created);
      -- Its messages: the person's (USER, keyed by their messageId) and each turn's answer (ASSISTANT).
      CREATE TABLE session_messages (
        seq          INTEGER PRIMARY KEY,
        session_id   TEXT NOT NULL REFERENCES sessions(session_id),
        message_id   TEXT NOT NULL,
        role         TEXT NOT NULL CHECK (role IN ('USER','ASSISTANT')),
        text         TEXT NOT NULL,
        execution_id TEXT,
        created      TEXT NOT NULL,
        UNIQUE (session_id, role, message_id)
      );
      -- A call an agent's model asked for that waits for a person (one per call: its id is derived from the call's).
      CREATE TABLE approvals (
        approval_id  TEXT PRIMARY KEY,
        execution_id TEXT NOT NULL,
        call_id      TEXT NOT NULL UNIQUE,
        tool         TEXT NOT NULL,
        tool_version INTEGER,
        input        TEXT NOT NULL,
        requested_by TEXT NOT NULL,
        status       TEXT NOT NULL CHECK (status IN ('PENDING','APPROVED','REJECTED','EXPIRED','CANCELLED')),
        reason       TEXT,
        decided_by   TEXT,
        decided      TEXT,
        expires      TEXT NOT NULL,
        created      TEXT NOT NULL
      );
      CREATE INDEX approvals_by_status ON approvals (status, created);
      CREATE INDEX approvals_by_execution ON approvals (execution_id);
      -- Versioned guidance documents for agents (load_skill reads a body).
      CREATE TABLE skills (
        skill_id       TEXT PRIMARY KEY,
        name           TEXT NOT NULL UNIQUE,
        latest_version INTEGER NOT NULL,
        created        TEXT NOT NULL,
        modified       TEXT NOT NULL
      );
      CREATE TABLE skill_versions (
        skill_id    TEXT NOT NULL REFERENCES skills(skill_id),
        version     INTEGER NOT NULL,
        description TEXT NOT NULL,
        body        TEXT NOT NULL,
        tools       TEXT NOT NULL,
        created     TEXT NOT NULL,
        PRIMARY KEY (skill_id, version)
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 10,
    name: 'account sets',
    sql: `
      -- An account set is an account row (one id space, one code space, balances keyed alike) that
      -- belongs to one journal and never takes entries directly: is_account_set marks it.
      ALTER TABLE accounts ADD COLUMN is_account_set INTEGER NOT NULL DEFAULT 0;
      -- The set's journal (checked when the set is created; no constraint, so the column can be dropped).
      ALTER TABLE accounts ADD COLUMN journal_id TEXT;
      ALTER TABLE accounts ADD COLUMN enable_concurrent_posting INTEGER NOT NULL DEFAULT 0;
      CREATE TABLE account_set_members (
        account_set_id TEXT NOT NULL REFERENCES accounts(account_id),
        member_id      TEXT NOT NULL REFERENCES accounts(account_id),
        member_type    TEXT NOT NULL CHECK (member_type IN ('ACCOUNT','ACCOUNT_SET')),
        created        TEXT NOT NULL,
        PRIMARY KEY (account_set_id, member_id)
      ) WITHOUT ROWID;
      CREATE INDEX account_set_members_by_member ON account_set_members (member_id, account_set_id);
      -- The sets (in the entry's journal, transitively) its account belonged to when it was posted.
      ALTER TABLE entries ADD COLUMN parent_account_ids TEXT;
      -- A set's entries: one row per entry and set it rolled up into, in posting order.
      CREATE TABLE set_entries (
        account_set_id TEXT NOT NULL,
        seq            INTEGER NOT NULL,
        PRIMARY KEY (account_set_id, seq)
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 11,
    name: 'velocity controls',
    sql: `
      -- A limit: window (partition keys), condition, and balance limits, all CEL (document JSON),
      -- with params whose values are given when a control holding it is attached.
      CREATE TABLE velocity_limits (
        velocity_limit_id TEXT PRIMARY KEY,
        name              TEXT NOT NULL,
        description       TEXT,
        document          TEXT NOT NULL,
        version           INTEGER NOT NULL,
        created           TEXT NOT NULL,
        modified          TEXT NOT NULL
      );
      CREATE TABLE velocity_controls (
        velocity_control_id TEXT PRIMARY KEY,
        name                TEXT NOT NULL,
        description         TEXT,
        enforcement         TEXT NOT NULL CHECK (enforcement IN ('WARN','VOID','REJECT')),
        condition           TEXT,
        status              TEXT NOT NULL CHECK (status IN ('ACTIVE','LOCKED')),
        version             INTEGER NOT NULL,
        created             TEXT NOT NULL,
        modified            TEXT NOT NULL
      );
      CREATE TABLE velocity_control_limits (
        velocity_control_id TEXT NOT NULL REFERENCES velocity_controls(velocity_control_id),
        velocity_limit_id   TEXT NOT NULL REFERENCES velocity_limits(velocity_limit_id),
        position            INTEGER NOT NULL,
        PRIMARY KEY (velocity_control_id, velocity_limit_id)
      ) WITHOUT ROWID;
      CREATE INDEX velocity_control_limits_by_limit ON velocity_control_limits (velocity_limit_id);
      -- A control attached to an account or a set (in one journal, or in every journal: ''), with
      -- the values of its limits' params.
      CREATE TABLE velocity_attachments (
        account_id          TEXT NOT NULL REFERENCES accounts(account_id),
        velocity_control_id TEXT NOT NULL REFERENCES velocity_controls(velocity_control_id),
        journal_id          TEXT NOT NULL,
        params              TEXT,
        created             TEXT NOT NULL,
        modified            TEXT NOT NULL,
        PRIMARY KEY (account_id, velocity_control_id)
      ) WITHOUT ROWID;
      CREATE INDEX velocity_attachments_by_control ON velocity_attachments (velocity_control_id);
      -- Running totals of a windowed or conditional limit for one account or set: counted from
      -- when a control holding the limit was attached there.
      CREATE TABLE velocity_balances (
        velocity_limit_id TEXT NOT NULL,
        account_id        TEXT NOT NULL,
        journal_id        TEXT NOT NULL,
        currency          TEXT NOT NULL,
        window            TEXT NOT NULL,
        settled_dr        TEXT NOT NULL,
        settled_cr        TEXT NOT NULL,
        pending_dr        TEXT NOT NULL,
        pending_cr        TEXT NOT NULL,
        encumbrance_dr    TEXT NOT NULL,
        encumbrance_cr    TEXT NOT NULL,
        entry_id          TEXT NOT NULL,
        version           INTEGER NOT NULL,
        created           TEXT NOT NULL,
        modified          TEXT NOT NULL,
        PRIMARY KEY (velocity_limit_id, account_id, journal_id, currency, window)
      ) WITHOUT ROWID;
      -- Velocity exceptions a posting recorded (WARN, VOID, or properties.exception): a JSON list.
      ALTER TABLE transactions ADD COLUMN exceptions TEXT;
    `,
  },
  { version: 12, name: 'calculations', sql: CALCULATIONS_MIGRATION_SQL },
  { version: 13, name: 'views and indexes', sql: VIEWS_MIGRATION_SQL },
  {
    version: 14,
    name: 'balance history',
    sql: `
      -- Each entry keeps its balance record as the posting left it (version and the six totals,
      -- space-separated), and so does each set_entries row for the set: Balance.history and the
      -- balance as of a past time read these, through the indexes the entries already have. Rows
      -- are appended in posting order, so this costs no page beyond those the posting writes anyway.
      ALTER TABLE entries ADD COLUMN balance_version INTEGER;
      ALTER TABLE entries ADD COLUMN balance_after TEXT;
      ALTER TABLE set_entries ADD COLUMN balance_version INTEGER;
      ALTER TABLE set_entries ADD COLUMN balance_after TEXT;
    `,
  },
  {
    version: 15,
    name: 'lean call records',
    sql: `
      -- A program's own graphql() and cel() calls (native, no fingerprint: their ids are the
      -- engine's) are no longer rows of their own: each is a compact JSON entry in the calls column
      -- of its nearest ancestor that is a row (its holder), written with that row, and call_ids
      -- finds an entry's holder by the call's id. See CompactCall in statements/actions.ts.
      ALTER TABLE executions ADD COLUMN calls TEXT;
      CREATE TABLE call_ids (
        call_id TEXT PRIMARY KEY,
        holder  INTEGER NOT NULL
      ) WITHOUT ROWID;
      -- The text of each distinct GraphQL document a nested call ran, written once: an entry names
      -- its query by sha256 (hex) instead of repeating it.
      CREATE TABLE documents (
        sha256  TEXT PRIMARY KEY,
        text    TEXT NOT NULL,
        created TEXT NOT NULL
      );

      -- The rows that become entries (anything else about them, a fingerprint, logs, a session,
      -- keeps them rows), and the holder of each: the parent, or the parent's holder.
      CREATE TEMP TABLE m15_compact AS SELECT seq, execution_id, parent_id FROM executions
        WHERE kind IN ('GRAPHQL', 'CEL') AND action_name = lower(kind) AND action_id IS NULL AND action_version IS NULL
          AND parent_id IS NOT NULL AND principal IS NOT NULL AND input_fingerprint IS NULL AND status IN ('SUCCEEDED', 'FAILED')
          AND logs IS NULL AND model IS NULL AND cached_from IS NULL AND session_id IS NULL AND transport IS NULL
          AND run_at IS NULL AND max_attempts IS NULL AND trigger_id IS NULL AND start_stack IS NULL AND lease_owner IS NULL
          AND cancel_requested = 0 AND trigger_depth = 0
          AND json_valid(input) AND (output IS NULL OR json_valid(output)) AND (error IS NULL OR json_valid(error));
      CREATE INDEX temp.m15_compact_by_id ON m15_compact (execution_id);
      CREATE TEMP TABLE m15_held AS
        WITH RECURSIVE held(seq, execution_id, holder_id) AS (
          SELECT c.seq, c.execution_id, c.parent_id FROM m15_compact c
            WHERE NOT EXISTS (SELECT 1 FROM m15_compact p WHERE p.execution_id = c.parent_id)
          UNION ALL
          SELECT c.seq, c.execution_id, held.holder_id FROM m15_compact c JOIN held ON c.parent_id = held.execution_id
        )
        SELECT held.seq, held.execution_id, held.holder_id, h.seq AS holder_seq FROM held JOIN executions h ON h.execution_id = held.holder_id;
      CREATE INDEX temp.m15_held_by_holder ON m15_held (holder_seq, seq);

      UPDATE executions SET calls = (
        SELECT json_group_array(json(entry) ORDER BY seq) FROM (
          SELECT m.seq AS seq, json_object(
            'id', e.execution_id,
            'p', CASE WHEN e.parent_id = h.execution_id THEN NULL ELSE e.parent_id END,
            -- Rows among its siblings before it (entries are placed among the sibling rows by this).
            'n', (SELECT count(*) FROM executions s WHERE s.parent_id = e.parent_id AND s.seq < e.seq
                    AND s.seq NOT IN (SELECT seq FROM m15_held)),
            'k', e.action_name,
            's', e.status,
            'i', json(e.input),
            'o', CASE WHEN e.output IS NULL THEN NULL ELSE json(e.output) END,
            'e', CASE WHEN e.error IS NULL THEN NULL ELSE json(e.error) END,
            't', e.started,
            'f', e.finished,
            'c', CASE WHEN e.created IS e.started THEN NULL ELSE e.created END,
            'r', CASE WHEN e.root_id IS h.root_id THEN NULL ELSE e.root_id END,
            'u', CASE WHEN e.principal IS h.principal THEN NULL ELSE e.principal END,
            'dp', CASE WHEN e.depth IS h.depth THEN NULL ELSE e.depth END,
            -- A holder that has not ended may run another attempt: its entries keep their own.
            'at', CASE WHEN e.attempt IS h.attempt AND h.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'CACHED') THEN NULL ELSE e.attempt END
          ) AS entry
          FROM m15_held m JOIN executions e ON e.seq = m.seq JOIN executions h ON h.seq = m.holder_seq
          WHERE m.holder_seq = executions.seq
        )
      ) WHERE seq IN (SELECT holder_seq FROM m15_held);
      INSERT INTO call_ids (call_id, holder) SELECT execution_id, holder_seq FROM m15_held;
      DELETE FROM executions WHERE seq IN (SELECT seq FROM m15_held);
      DROP TABLE m15_held;
      DROP TABLE m15_compact;

      -- No statement reads executions by created (a page filtered by since walks seq, which the
      -- planner prefers for ORDER BY seq LIMIT n): the index cost every top-level call a page.
      DROP INDEX executions_by_created;
    `,
  },
  {
    version: 16,
    name: 'set entry log',
    sql: `
      -- A set's entries as an append-only log in posting order, keyed by (seq, set): a posting's
      -- rows for every set it rolls up into land together at the end of one b-tree (about one page
      -- written per posting, where set_entries' (set, seq) key wrote a leaf per set). Each row points
      -- to the previous row of the same balance record (set, journal, currency), whose newest row the
      -- record holds (balances.log_head, with the row before it and the rows counted); reads walk
      -- that chain newest first. Every 64th row of a chain is also a mark (set_entry_marks), so a
      -- read that starts at a past seq (a cursor, a balance as of a time) walks at most ~64 rows
      -- from the first mark above it.
      CREATE TABLE set_entry_log (
        seq             INTEGER NOT NULL,
        account_set_id  TEXT NOT NULL,
        prev_seq        INTEGER,
        balance_version INTEGER,
        balance_after   TEXT,
        PRIMARY KEY (seq, account_set_id)
      ) WITHOUT ROWID;
      CREATE TABLE set_entry_marks (
        account_set_id TEXT NOT NULL,
        journal_id     TEXT NOT NULL,
        currency       TEXT NOT NULL,
        seq            INTEGER NOT NULL,
        PRIMARY KEY (account_set_id, journal_id, currency, seq)
      ) WITHOUT ROWID;
      ALTER TABLE balances ADD COLUMN log_head INTEGER;
      ALTER TABLE balances ADD COLUMN log_prev INTEGER;
      ALTER TABLE balances ADD COLUMN log_count INTEGER;

      CREATE TEMP TABLE m16_rows AS
        SELECT s.seq, s.account_set_id, e.journal_id, e.currency, s.balance_version, s.balance_after,
          lag(s.seq) OVER chain AS prev_seq, row_number() OVER chain AS n
        FROM set_entries s JOIN entries e ON e.seq = s.seq
        WINDOW chain AS (PARTITION BY s.account_set_id, e.journal_id, e.currency ORDER BY s.seq);
      INSERT INTO set_entry_log (seq, account_set_id, prev_seq, balance_version, balance_after)
        SELECT seq, account_set_id, prev_seq, balance_version, balance_after FROM m16_rows ORDER BY seq, account_set_id;
      INSERT INTO set_entry_marks (account_set_id, journal_id, currency, seq)
        SELECT account_set_id, journal_id, currency, seq FROM m16_rows WHERE n % 64 = 0;
      UPDATE balances SET log_head = h.head, log_prev = h.before_head, log_count = h.rows
        FROM (SELECT account_set_id, journal_id, currency, max(seq) AS head, max(prev_seq) AS before_head, count(*) AS rows
              FROM m16_rows GROUP BY account_set_id, journal_id, currency) AS h
        WHERE balances.account_id = h.account_set_id AND balances.journal_id = h.journal_id AND balances.currency = h.currency;
      DROP TABLE m16_rows;
      DROP TABLE set_entries;
    `,
  },
  {
    version: 17,
    name: 'set links in entries',
    sql: `
      -- A set's entry log moves into the entries: each entry holds, per set above its account, the
      -- link that set_entry_log's row held (set id → [previous seq of that set's record, the set's
      -- balance version and balance as this entry left them]). A posting writes no row of its own
      -- for the sets (4 rows and ~2.3 WAL pages a posting with two sets above two accounts); the
      -- chains and the marks are as before. A deleted set's links stay in its old entries, as its
      -- id stays in parent_account_ids: no record points to them, so no read reaches them.
      ALTER TABLE entries ADD COLUMN set_links TEXT;
      UPDATE entries SET set_links = l.links
        FROM (SELECT seq, json_group_object(account_set_id, json_array(prev_seq, balance_version, balance_after)) AS links
              FROM set_entry_log GROUP BY seq) AS l
        WHERE entries.seq = l.seq;
      DROP TABLE set_entry_log;
    `,
    postgres: `
      ALTER TABLE entries ADD COLUMN set_links TEXT;
      UPDATE entries SET set_links = l.links
        FROM (SELECT seq, json_object_agg(account_set_id, json_build_array(prev_seq, balance_version, balance_after))::text AS links
              FROM set_entry_log GROUP BY seq) AS l
        WHERE entries.seq = l.seq;
      DROP TABLE set_entry_log;
    `,
  },
  {
    version: 18,
    name: 'account chains',
    sql: migration18('INTEGER'),
    postgres: migration18('BIGINT'),
  },
  {
    version: 19,
    name: 'deployed records',
    sql: migration19('INTEGER', ' WITHOUT ROWID'),
    postgres: migration19('BIGINT', ''),
  },
  {
    version: 20,
    name: 'progress messages',
    sql: MIGRATION_20,
    postgres: MIGRATION_20_POSTGRES,
  },
  {
    version: 21,
    name: 'transaction properties',
    sql: `
      -- What a posting or a void was sent with that changed how it was judged (the reference
      -- ledger's Transaction.properties: {overrideVelocityEnforcement: {action}}): JSON, null for none.
      ALTER TABLE transactions ADD COLUMN properties TEXT;
    `,
    postgres: 'ALTER TABLE transactions ADD COLUMN IF NOT EXISTS properties TEXT;',
  },
  {
    version: 22,
    name: 'outside calls',
    sql: OUTSIDE_CALLS_MIGRATION_SQL,
    postgres: OUTSIDE_CALLS_MIGRATION_POSTGRES,
  },
];
