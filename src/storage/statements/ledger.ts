import { isPostgres } from '../backend.js';
import type { Db } from '../database.js';
import { bug } from '../../errors.js';

/** Rows exactly as stored. Amount columns are decimal strings. */
export interface JournalRow {
  journal_id: string;
  name: string;
  description: string | null;
  status: string;
  code: string | null;
  version: number;
  created: string;
  modified: string;
}

export interface AccountRow {
  account_id: string;
  code: string;
  name: string;
  external_id: string | null;
  description: string | null;
  status: string;
  normal_balance_type: string;
  metadata: string | null;
  version: number;
  created: string;
  modified: string;
  /** 1 for an account set (it then has a journal_id, and never takes entries directly). */
  is_account_set: number;
  journal_id: string | null;
  enable_concurrent_posting: number;
}

export interface AccountSetMemberRow {
  account_set_id: string;
  member_id: string;
  member_type: 'ACCOUNT' | 'ACCOUNT_SET';
  created: string;
}

export interface TranCodeRow {
  tran_code_id: string;
  code: string;
  status: string;
  version: number;
  created: string;
  modified: string;
}

export interface TranCodeVersionRow {
  tran_code_id: string;
  version: number;
  document: string;
  created: string;
}

export interface TransactionRow {
  seq: number;
  transaction_id: string;
  tran_code_id: string;
  tran_code_version: number;
  journal_id: string;
  /** null when equal to transaction_id */
  correlation_id: string | null;
  external_id: string | null;
  effective: string;
  description: string | null;
  metadata: string | null;
  void_of: string | null;
  voided_by: string | null;
  input_fingerprint: string | null;
  first_entry_seq: number;
  entry_count: number;
  /** JSON list of velocity exceptions recorded by the posting; null for none. */
  exceptions: string | null;
  /** JSON of the TransactionProperties it was sent with; null for none. */
  properties: string | null;
  version: number;
  created: string;
  modified: string;
}

export interface EntryRow {
  seq: number;
  entry_id: string;
  transaction_id: string;
  account_id: string;
  journal_id: string;
  sequence: number;
  entry_type: string;
  layer: string;
  direction: string;
  units: string;
  currency: string;
  description: string | null;
  metadata: string | null;
  created: string;
  /** JSON list of the sets the account rolled up into when the entry was posted; null for none. */
  parent_account_ids: string | null;
  /** The account's balance record (journal, currency) as the posting left it: its version and totals. */
  balance_version: number | null;
  balance_after: string | null;
  /**
   * JSON: per set above the account, the entry's link in that set's chain — the seq of the set
   * record's previous entry, the set's balance version and totals as this entry left them (see
   * chainStatements); null for none.
   */
  set_links: string | null;
  /** The previous entry of the account's balance record (journal, currency): its chain (see chainStatements); null for its first. */
  account_prev: number | null;
}

export interface BalanceRow {
  account_id: string;
  journal_id: string;
  currency: string;
  settled_dr: string;
  settled_cr: string;
  pending_dr: string;
  pending_cr: string;
  encumbrance_dr: string;
  encumbrance_cr: string;
  entry_id: string;
  version: number;
  created: string;
  modified: string;
  /** The newest entry of the record's chain (see chainStatements); null before its first. */
  log_head?: number | null;
}

/**
 * Every SQL statement of the ledger, prepared once per engine. Paging reads fetch `limit` rows after
 * the cursor key; callers ask for one more than the page to learn whether another page exists.
 */
export function ledgerStatements(db: Db) {
  const s = {
    journalById: db.prepare<[string], JournalRow>('SELECT * FROM journals WHERE journal_id = ?'),
    journalsPage: db.prepare<[number, number], JournalRow & { rowid: number }>(
      'SELECT rowid, * FROM journals WHERE rowid > ? ORDER BY rowid LIMIT ?',
    ),
    insertJournal: db.prepare(
      `INSERT INTO journals (journal_id, name, description, status, code, version, created, modified)
       VALUES (@journal_id, @name, @description, @status, @code, @version, @created, @modified)`,
    ),
    updateJournal: db.prepare(
      `UPDATE journals SET name = @name, description = @description, status = @status, code = @code,
         version = @version, modified = @modified WHERE journal_id = @journal_id`,
    ),

    accountById: db.prepare<[string], AccountRow>('SELECT * FROM accounts WHERE account_id = ?'),
    /** What posting checks of an account: [code, status]. */
    accountByCode: db.prepare<[string], AccountRow>('SELECT * FROM accounts WHERE code = ?'),
    accountByExternalId: db.prepare<[string], AccountRow>('SELECT * FROM accounts WHERE external_id = ?'),
    accountsPage: db.prepare<[number, number], AccountRow & { rowid: number }>(
      'SELECT rowid, * FROM accounts WHERE rowid > ? ORDER BY rowid LIMIT ?',
    ),
    accountsByStatusPage: db.prepare<[string, number, number], AccountRow & { rowid: number }>(
      'SELECT rowid, * FROM accounts WHERE status = ? AND rowid > ? ORDER BY rowid LIMIT ?',
    ),
    insertAccount: db.prepare(
      `INSERT INTO accounts (account_id, code, name, external_id, description, status, normal_balance_type,
         metadata, version, created, modified, is_account_set, journal_id, enable_concurrent_posting)
       VALUES (@account_id, @code, @name, @external_id, @description, @status, @normal_balance_type,
         @metadata, @version, @created, @modified, @is_account_set, @journal_id, @enable_concurrent_posting)`,
    ),
    updateAccount: db.prepare(
      `UPDATE accounts SET code = @code, name = @name, external_id = @external_id, description = @description,
         status = @status, normal_balance_type = @normal_balance_type, metadata = @metadata,
         enable_concurrent_posting = @enable_concurrent_posting,
         version = @version, modified = @modified WHERE account_id = @account_id`,
    ),

    // Account sets: members, and the sets above an account in one journal (recursive; nesting is
    // bounded by accountSetDepthMax when members are added, and cycles are refused there).
    setMember: db.prepare<[string, string], AccountSetMemberRow>(
      'SELECT * FROM account_set_members WHERE account_set_id = ? AND member_id = ?',
    ),
    insertSetMember: db.prepare<[string, string, string, string]>(
      'INSERT INTO account_set_members (account_set_id, member_id, member_type, created) VALUES (?, ?, ?, ?)',
    ),
    deleteSetMember: db.prepare<[string, string]>(
      'DELETE FROM account_set_members WHERE account_set_id = ? AND member_id = ?',
    ),
    setMembersPage: db.prepare<[string, string, number], AccountSetMemberRow>(
      'SELECT * FROM account_set_members WHERE account_set_id = ? AND member_id > ? ORDER BY member_id LIMIT ?',
    ),
    setsOfMemberPage: db.prepare<[string, string, number], AccountSetMemberRow>(
      'SELECT * FROM account_set_members WHERE member_id = ? AND account_set_id > ? ORDER BY account_set_id LIMIT ?',
    ),
    /** Every set above `member` (its sets, theirs, ...) with its distance: 1 for a direct parent. */
    ancestorsOf: db.prepare<[string], { id: string; depth: number }>(
      `WITH RECURSIVE up(id, depth) AS (
         SELECT account_set_id, 1 FROM account_set_members WHERE member_id = ?
         UNION
         SELECT m.account_set_id, up.depth + 1 FROM account_set_members m JOIN up ON m.member_id = up.id WHERE up.depth < 64
       ) SELECT id, max(depth) AS depth FROM up GROUP BY id ORDER BY id`,
    ),
    /** The longest chain of members below a set (0 for a set with no set members). */
    depthBelow: db.prepare<[string], { depth: number | null }>(
      `WITH RECURSIVE down(id, depth) AS (
         SELECT ?, 0
         UNION
         SELECT m.member_id, down.depth + 1 FROM account_set_members m JOIN down ON m.account_set_id = down.id
           WHERE m.member_type = 'ACCOUNT_SET' AND down.depth < 64
       ) SELECT max(depth) AS depth FROM down`,
    ),
    /** Accounts below a set (through its set members), at most `limit` of them. */
    accountsBelow: db
      .prepare<[string, number], string>(
        `WITH RECURSIVE down(id, depth) AS (
         SELECT ?, 0
         UNION
         SELECT m.member_id, down.depth + 1 FROM account_set_members m JOIN down ON m.account_set_id = down.id WHERE down.depth < 64
       ) SELECT DISTINCT down.id FROM down JOIN accounts a ON a.account_id = down.id WHERE a.is_account_set = 0 LIMIT ?`,
      )
      .pluck(),
    ...chainStatements(db),
    setsPage: db.prepare<[number, number], AccountRow & { rowid: number }>(
      'SELECT rowid, * FROM accounts WHERE is_account_set = 1 AND rowid > ? ORDER BY rowid LIMIT ?',
    ),
    deleteAccountRow: db.prepare<[string]>('DELETE FROM accounts WHERE account_id = ?'),
    deleteAccountVersions: db.prepare<[string]>('DELETE FROM account_versions WHERE account_id = ?'),
    deleteBalancesOf: db.prepare<[string]>('DELETE FROM balances WHERE account_id = ?'),
    balancesOfJournal: db.prepare<[string, string], BalanceRow>(
      'SELECT * FROM balances WHERE account_id = ? AND journal_id = ?',
    ),
    insertAccountVersion: db.prepare<[string, number, string]>(
      'INSERT INTO account_versions (account_id, version, document) VALUES (?, ?, ?)',
    ),
    accountVersionsPage: db.prepare<[string, number, number], { version: number; document: string }>(
      'SELECT version, document FROM account_versions WHERE account_id = ? AND version < ? ORDER BY version DESC LIMIT ?',
    ),

    tranCodeById: db.prepare<[string], TranCodeRow>('SELECT * FROM tran_codes WHERE tran_code_id = ?'),
    tranCodeByCode: db.prepare<[string], TranCodeRow>('SELECT * FROM tran_codes WHERE code = ?'),
    tranCodesPage: db.prepare<[number, number], TranCodeRow & { rowid: number }>(
      'SELECT rowid, * FROM tran_codes WHERE rowid > ? ORDER BY rowid LIMIT ?',
    ),
    insertTranCode: db.prepare(
      `INSERT INTO tran_codes (tran_code_id, code, status, version, created, modified)
       VALUES (@tran_code_id, @code, @status, @version, @created, @modified)`,
    ),
    updateTranCode: db.prepare(
      `UPDATE tran_codes SET status = @status, version = @version, modified = @modified
       WHERE tran_code_id = @tran_code_id`,
    ),
    tranCodeVersion: db.prepare<[string, number], TranCodeVersionRow>(
      'SELECT * FROM tran_code_versions WHERE tran_code_id = ? AND version = ?',
    ),
    tranCodeVersionsPage: db.prepare<[string, number, number], TranCodeVersionRow>(
      'SELECT * FROM tran_code_versions WHERE tran_code_id = ? AND version < ? ORDER BY version DESC LIMIT ?',
    ),
    insertTranCodeVersion: db.prepare<[string, number, string, string]>(
      'INSERT INTO tran_code_versions (tran_code_id, version, document, created) VALUES (?, ?, ?, ?)',
    ),

    transactionById: db.prepare<[string], TransactionRow>('SELECT * FROM transactions WHERE transaction_id = ?'),
    /** The idempotency check of every posting: only the fingerprint (a whole row costs 3× more to read). */
    fingerprintOfTransaction: db
      .prepare<[string], string | null>('SELECT input_fingerprint FROM transactions WHERE transaction_id = ?')
      .pluck(),
    transactionsPage: db.prepare<[number, number], TransactionRow>(
      'SELECT * FROM transactions WHERE seq > ? ORDER BY seq LIMIT ?',
    ),
    transactionsByCorrelationPage: db.prepare<[string, string, number, number], TransactionRow>(
      `SELECT * FROM transactions WHERE (correlation_id = ? OR (transaction_id = ? AND correlation_id IS NULL))
       AND seq > ? ORDER BY seq LIMIT ?`,
    ),
    transactionsByJournalPage: db.prepare<[string, number, number], TransactionRow>(
      'SELECT * FROM transactions WHERE journal_id = ? AND seq > ? ORDER BY seq LIMIT ?',
    ),
    /** Positional (binding by name costs more on the hottest insert); see writeTransaction for the order. */
    insertTransaction: db.prepare<
      [
        string,
        string,
        number,
        string,
        string | null,
        string | null,
        string,
        string | null,
        string | null,
        string | null,
        string | null,
        number,
        number,
        string,
        string,
      ]
    >(
      `INSERT INTO transactions (transaction_id, tran_code_id, tran_code_version, journal_id, correlation_id,
         external_id, effective, description, metadata, void_of, voided_by, input_fingerprint, first_entry_seq, entry_count,
         version, created, modified)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, 1, ?, ?)`,
    ),
    markVoided: db.prepare<[string, string, string]>(
      `UPDATE transactions SET voided_by = ?, version = version + 1, modified = ?
       WHERE transaction_id = ? AND voided_by IS NULL`,
    ),

    /**
     * A posting's entries, up to ENTRY_INSERT_ROWS rows in one statement (one statement's
     * overhead, not one per entry): insertEntries(n) takes n × ENTRY_COLUMNS.length values,
     * positional (named binding costs a lookup per parameter), row after row.
     */
    insertEntries: byRows(ENTRY_INSERT_ROWS, (rows) =>
      db.prepare<unknown[]>(
        `INSERT INTO entries (${ENTRY_COLUMNS.join(', ')}) VALUES ${Array.from({ length: rows }, () => `(${ENTRY_COLUMNS.map(() => '?').join(', ')})`).join(', ')}`,
      ),
    ),
    entryById: db.prepare<[string], EntryRow>('SELECT * FROM entries WHERE entry_id = ?'),
    /** A transaction's entries: seq from first_entry_seq to first_entry_seq + entry_count - 1. */
    entriesBySeqRange: db.prepare<[number, number, number], EntryRow>(
      'SELECT * FROM entries WHERE seq >= ? AND seq < ? ORDER BY seq LIMIT ?',
    ),
    lastEntrySeq: db.prepare<[], { seq: number | null }>('SELECT max(seq) AS seq FROM entries'),
    /**
     * PostgreSQL, many processes: the first seq of a posting's entries, a block of ENTRY_SEQ_BLOCK
     * of its own (a sequence: no two processes take the same, none waits for another); SQLite's
     * one writer counts on from max(seq) instead (null there).
     */
    nextEntrySeqBlock: isPostgres(db)
      ? db.prepare<[], number>("SELECT nextval('tally_entry_seq_blocks')").pluck()
      : null,

    balance: db.prepare<[string, string, string], BalanceRow>(
      'SELECT * FROM balances WHERE account_id = ? AND journal_id = ? AND currency = ?',
    ),
    /** When entry `seq` was written (a binary search over seq finds the last entry at a time). */
    /** The first entry at or after a seq (seqs have gaps on PostgreSQL: blocks per posting). */
    entryCreatedFrom: db.prepare<[number], { seq: number; created: string }>(
      'SELECT seq, created FROM entries WHERE seq >= ? ORDER BY seq LIMIT 1',
    ),
    balancesByAccountPage: db.prepare<[string, string, number], BalanceRow>(
      `SELECT * FROM balances WHERE account_id = ? AND (journal_id || ' ' || currency) > ?
       ORDER BY journal_id, currency LIMIT ?`,
    ),
    ...balanceUpserts(db, false),
    /** All six totals added to at once, named (a set taking or giving up a member's balances). */
    updateBalance: db.prepare<[Record<string, unknown>], BalanceAfter>(
      `UPDATE balances SET ${ADD_TO_BALANCE} WHERE account_id = @account_id AND journal_id = @journal_id AND currency = @currency RETURNING ${BALANCE_AFTER}`,
    ),
    /** The same for a posting, which also moves each record's chain head to its newest entry (see chainStatements). */
    posting: balanceUpserts(db, true),
  };
  return s;
}

/**
 * Add a transaction's totals to one balance record. Amounts are decimal strings, so the
 * addition is `dec_add` (registered by openDatabase), not SQL `+`. The UPDATE runs first (the
 * record exists for all but an account's first posting in a currency: one b-tree search instead
 * of an insert that conflicts, then the update); the INSERT only when it changed nothing.
 * Each returns the record as it left it (the entries' history snapshot).
 *
 * `log` (a posting's): the upsert also makes log_head the head of the record's chain of entries
 * and counts log_rows more entries in it, returning the head it replaced (log_prev) and the count.
 */
function balanceUpserts(db: Db, log: boolean) {
  const [logColumns, logValues] = log ? [', log_head, log_count', ', @log_head, @log_rows'] : ['', ''];
  const returning = log ? `${BALANCE_AFTER}, log_prev, log_count` : BALANCE_AFTER;
  return {
    insertBalance: db.prepare<[Record<string, unknown>], BalanceAfter>(
      `INSERT INTO balances (account_id, journal_id, currency, settled_dr, settled_cr, pending_dr, pending_cr,
         encumbrance_dr, encumbrance_cr, entry_id, version, created, modified${logColumns})
       VALUES (@account_id, @journal_id, @currency, @settled_dr, @settled_cr, @pending_dr, @pending_cr,
         @encumbrance_dr, @encumbrance_cr, @entry_id, 1, @modified, @modified${logValues})
       RETURNING ${returning}`,
    ),
    /**
     * Add to the columns a posting changes, and only those (SQLite calls dec_add once per changed
     * column, not six times): see byColumns. Positional: the amounts in BALANCE_COLUMNS order, the
     * entry, modified, [log_head, log_rows], then account, journal and currency.
     */
    updateColumns: byColumns((columns) =>
      db.prepare<unknown[], BalanceAfter>(
        `UPDATE balances SET ${columns.map((c) => `${c} = dec_add(${c}, ?)`).join(', ')}, entry_id = ?, version = version + 1, modified = ?${
          log ? ', log_prev = log_head, log_head = ?, log_count = ifnull(log_count, 0) + ?' : ''
        }
         WHERE account_id = ? AND journal_id = ? AND currency = ? RETURNING ${returning}`,
      ),
    ),
  };
}

/**
 * A balance record's entries: a chain through the entries, newest first. The record holds its
 * newest entry (balances.log_head), each entry links to the record's previous one, and every
 * CHAIN_MARK_EVERY-th entry of a chain is a mark (entry_marks), so a read that starts at a past seq
 * walks at most ~CHAIN_MARK_EVERY links from the first mark above it. An account's record: the
 * entry's account_prev (migration 18). A set's: the entry's set_links, per set above its account
 * (migration 17), which also hold the set's balance as the entry left it. Chains are walked with
 * recursive queries; a link's previous seq is always below the entry's own, so a walk ends.
 */
function chainStatements(db: Db) {
  /** Each kind of chain: where an entry's link to the previous entry is, and the record's version and totals it left. */
  const kinds = {
    account: { prev: (e: string) => `${e}.account_prev`, version: 'e.balance_version', after: 'e.balance_after' },
    set: {
      prev: (e: string) => `CAST(${e}.set_links -> @owner ->> 0 AS BIGINT)`,
      version: 'CAST(e.set_links -> @owner ->> 1 AS BIGINT)',
      after: 'e.set_links -> @owner ->> 2',
    },
  };
  const walks = (kind: (typeof kinds)[keyof typeof kinds]) => {
    const walk = (columns: string) => `WITH RECURSIVE walk(seq, prev, n) AS (
         SELECT seq, ${kind.prev('entries')}, 1 FROM entries WHERE seq = @from
         UNION ALL
         SELECT e.seq, ${kind.prev('e')}, walk.n + 1 FROM walk JOIN entries e ON e.seq = walk.prev WHERE walk.n < @limit
       ) ${columns}`;
    return {
      /** Walk a chain from entry @from down while above @floor: the last seq returned is the first at or below it (or the chain's end). */
      seek: db
        .prepare<[{ from: number; owner: string; floor: number }], number>(
          `WITH RECURSIVE walk(seq, prev) AS (
           SELECT seq, ${kind.prev('entries')} FROM entries WHERE seq = @from
           UNION ALL
           SELECT e.seq, ${kind.prev('e')} FROM walk JOIN entries e ON e.seq = walk.prev WHERE walk.seq > @floor
         ) SELECT seq FROM walk WHERE seq <= @floor`,
        )
        .pluck(),
      /** Up to @limit entries of a chain from entry @from down, newest first, with the record's version and totals each left. */
      entries: db.prepare<[{ from: number; owner: string; limit: number }], ChainRow>(
        walk(
          `SELECT e.*, walk.prev AS log_prev, ${kind.version} AS record_version, ${kind.after} AS record_after FROM walk JOIN entries e ON e.seq = walk.seq ORDER BY walk.n`,
        ),
      ),
      /**
       * The seqs of a chain from entry @from down while above @floor, newest first: a stretch
       * between two marks (CHAIN_MARK_EVERY entries, up to entriesPerTransactionMax more where one
       * posting crossed a multiple), walked by primary key with no row read out.
       */
      above: db
        .prepare<[{ from: number; owner: string; floor: number }], number>(
          `WITH RECURSIVE walk(seq, prev, n) AS (
           SELECT seq, ${kind.prev('entries')}, 1 FROM entries WHERE seq = @from AND seq > @floor
           UNION ALL
           SELECT e.seq, ${kind.prev('e')}, walk.n + 1 FROM walk JOIN entries e ON e.seq = walk.prev WHERE walk.prev > @floor
         ) SELECT seq FROM walk ORDER BY n`,
        )
        .pluck(),
      /** Up to @limit seqs of a chain from entry @from down (the last one's prev continues it). */
      seqs: db.prepare<[{ from: number; owner: string; limit: number }], { seq: number; prev: number | null }>(
        walk('SELECT seq, prev FROM walk ORDER BY n'),
      ),
    };
  };
  return {
    /** An account's chains (the statements take @owner, which they do not read, so both kinds are called alike). */
    accountChain: walks(kinds.account),
    setChain: walks(kinds.set),
    insertEntryMark: db.prepare<[string, string, string, number]>(
      'INSERT INTO entry_marks (account_id, journal_id, currency, seq) VALUES (?, ?, ?, ?)',
    ),
    /**
     * The heads of an account's or set's chains (one per balance record that has entries), of one
     * journal or currency when given: at most @limit (the account's records, by primary key prefix).
     */
    chainHeads: db.prepare<
      [{ owner: string; journal: string | null; currency: string | null; limit: number }],
      { journal_id: string; currency: string; log_head: number }
    >(
      `SELECT journal_id, currency, log_head FROM balances
       WHERE account_id = @owner AND log_head IS NOT NULL AND (CAST(@journal AS TEXT) IS NULL OR journal_id = @journal) AND (CAST(@currency AS TEXT) IS NULL OR currency = @currency)
       ORDER BY journal_id, currency LIMIT @limit`,
    ),
    /** A page's entries by seq, in seq order (a JSON list of seqs). */
    entriesBySeqs: db.prepare<[string], EntryRow>(
      'SELECT e.* FROM json_each(?) j JOIN entries e ON e.seq = CAST(j.value AS INTEGER) ORDER BY e.seq',
    ),
    /** The first mark above a seq: a chain's entries at or below the seq are at most ~64 links down from it (see CHAIN_MARK_EVERY). */
    markAbove: db
      .prepare<[string, string, string, number], number>(
        'SELECT seq FROM entry_marks WHERE account_id = ? AND journal_id = ? AND currency = ? AND seq > ? ORDER BY seq LIMIT 1',
      )
      .pluck(),
    deleteEntryMarks: db.prepare<[string]>('DELETE FROM entry_marks WHERE account_id = ?'),
  };
}

/** An entry read through a chain: the link to the chain's previous entry, and the record's version and totals as the entry left them. */
export type ChainRow = EntryRow & {
  log_prev: number | null;
  record_version: number | null;
  record_after: string | null;
};

/** The columns a posting writes of each entry, in insertEntries' order. */
export const ENTRY_COLUMNS = [
  'seq',
  'entry_id',
  'transaction_id',
  'account_id',
  'journal_id',
  'sequence',
  'entry_type',
  'layer',
  'direction',
  'units',
  'currency',
  'description',
  'metadata',
  'created',
  'parent_account_ids',
  'balance_version',
  'balance_after',
  'set_links',
  'account_prev',
] as const satisfies ReadonlyArray<keyof EntryRow>;

/** The most entries one insert statement writes (a posting of more takes several). */
export const ENTRY_INSERT_ROWS = 8;

/**
 * Every CHAIN_MARK_EVERY-th entry of a chain is also a mark (entry_marks): a posting that takes a
 * chain past a multiple marks its last entry on it, so marks are CHAIN_MARK_EVERY entries apart,
 * or up to entriesPerTransactionMax more where one posting put many entries on one record.
 */
export const CHAIN_MARK_EVERY = 64;

export const BALANCE_COLUMNS = [
  'settled_dr',
  'settled_cr',
  'pending_dr',
  'pending_cr',
  'encumbrance_dr',
  'encumbrance_cr',
] as const;

/** The index in BALANCE_COLUMNS of a layer's debit or credit column. */
export function balanceColumnIndex(layer: string, direction: string): number {
  return (layer === 'SETTLED' ? 0 : layer === 'PENDING' ? 2 : 4) + (direction === 'DEBIT' ? 0 : 1);
}

/**
 * Statements by a small number, 1 to `max`, each prepared on first use; `all()` prepares every
 * one (PostgreSQL's statement check prepares each against the schema).
 */
export interface ByNumber<S> {
  (n: number): S;
  all(): S[];
}

export function byNumber<S>(max: number, build: (n: number) => S): ByNumber<S> {
  const prepared: S[] = [];
  const get = ((n: number) => {
    if (!Number.isInteger(n) || n < 1 || n > max) throw bug(`bug: statement ${n} of 1 to ${max}`);
    return (prepared[n] ??= build(n));
  }) as ByNumber<S>;
  get.all = () => Array.from({ length: max }, (_, i) => get(i + 1));
  return get;
}

/**
 * A statement per set of changed balance columns (bit i of the mask for BALANCE_COLUMNS[i]): at
 * most 63, most postings use one or two (a layer's debit, or its debit and credit).
 */
export function byColumns<S>(build: (columns: BalanceColumn[]) => S): ByNumber<S> {
  return byNumber(63, (mask) => build(BALANCE_COLUMNS.filter((_, i) => (mask & (1 << i)) !== 0)));
}

/** A statement per number of rows written at once, 1 to `max`. */
export const byRows = byNumber;

/** The SET of a balance row taking a posting's amounts (named parameters, one per layer and side). */
export const ADD_TO_BALANCE = `settled_dr = dec_add(settled_dr, @settled_dr), settled_cr = dec_add(settled_cr, @settled_cr),
         pending_dr = dec_add(pending_dr, @pending_dr), pending_cr = dec_add(pending_cr, @pending_cr),
         encumbrance_dr = dec_add(encumbrance_dr, @encumbrance_dr), encumbrance_cr = dec_add(encumbrance_cr, @encumbrance_cr),
         entry_id = @entry_id, version = version + 1, modified = @modified`;

const BALANCE_AFTER = `version, settled_dr || ' ' || settled_cr || ' ' || pending_dr || ' ' || pending_cr || ' ' || encumbrance_dr || ' ' || encumbrance_cr AS after`;
/** What a balance upsert returns: the record as it left it, for the entries' history snapshot. */
export interface BalanceAfter {
  version: number;
  /** A posting's upsert (balanceUpserts with log): the chain head the upsert replaced, and the entries counted. */
  log_prev?: number | null;
  log_count?: number;
  /** The six totals, space-separated, in BALANCE_COLUMNS order. */
  after: string;
}
export type BalanceColumn = (typeof BALANCE_COLUMNS)[number];

/** The six totals of a BalanceAfter (or an entry's balance_after), by column. */
export function snapshotTotals(after: string): Record<BalanceColumn, string> {
  const [settled_dr, settled_cr, pending_dr, pending_cr, encumbrance_dr, encumbrance_cr] = after.split(' ') as [
    string,
    string,
    string,
    string,
    string,
    string,
  ];
  return { settled_dr, settled_cr, pending_dr, pending_cr, encumbrance_dr, encumbrance_cr };
}

export type LedgerStatements = ReturnType<typeof ledgerStatements>;
