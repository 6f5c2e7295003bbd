import { bug, EngineError, notFound } from '../errors.js';
import { ENTRY_SEQ_BLOCK } from '../storage/backend.js';
import { ENTRY_COLUMNS, ENTRY_INSERT_ROWS, type EntryRow, type TransactionRow } from '../storage/statements/ledger.js';
import { setsAbove } from './account-sets.js';
import { afterPosting } from './after-posting.js';
import { applyToBalances, type BalanceDelta } from './balances.js';
import { linkEntries } from './chains.js';
import { cachedAccount, type LedgerDeps } from './deps.js';
import { type Posted, RecordKeys } from './posted.js';
import type { Direction, Layer, Transaction } from './records.js';
import type { PlannedEntry } from './tran-code-expansion.js';

/**
 * The write path postTransaction and voidTransaction share, and the only code that writes entries
 * and balances (DESIGN §2): the accounts checked to accept postings, the guard's look at what will
 * be written, the transaction, its entries and balances and everything kept beyond them, triggers told.
 */

/** An entry about to be written, as the authorization hook sees it. */
export interface EntryToWrite {
  accountId: string;
  journalId: string;
  currency: string;
  layer: Layer;
  direction: Direction;
  units: string;
}

/** Called with the entries once they are computed and checked, before anything is written. */
export type WriteGuard = (entries: readonly EntryToWrite[]) => void;

export function toWrite(entries: readonly PlannedEntry[], journalId: string): EntryToWrite[] {
  return entries.map((e) => ({
    accountId: e.accountId,
    journalId,
    currency: e.currency,
    layer: e.layer,
    direction: e.direction,
    units: e.units,
  }));
}

export function checkPostable(deps: LedgerDeps, accountIds: readonly string[]): void {
  const checked = new Set<string>();
  for (const accountId of accountIds) {
    if (checked.has(accountId)) continue;
    checked.add(accountId);
    const account = cachedAccount(deps, accountId);
    if (!account) {
      throw notFound('account', accountId, 'Create the account before posting to it.');
    }
    if (account.is_account_set === 1) {
      throw new EngineError(
        'BAD_REQUEST',
        `${account.code} (${accountId}) is an account set; entries are never posted to a set`,
        {
          hint: 'Post to an account in the set: its balance rolls up into the set.',
        },
      );
    }
    if (account.status === 'LOCKED') {
      throw new EngineError(
        'ACCOUNT_LOCKED',
        `account ${account.code} (${accountId}) is LOCKED and accepts no postings`,
        {
          details: { accountId },
        },
      );
    }
  }
}

/**
 * Insert the transaction, then its entries with consecutive seq numbers (so the transaction can
 * find them by range), then apply them to the balances.
 */
export function writeTransaction(
  deps: LedgerDeps,
  partial: Omit<TransactionRow, 'seq' | 'first_entry_seq' | 'entry_count' | 'exceptions' | 'properties'>,
  entries: readonly PlannedEntry[],
): Posted {
  const last = deps.st.nextEntrySeqBlock ? entrySeqBlock(deps, entries.length) : lastEntrySeq(deps);
  const firstEntrySeq = last.seq + 1;
  const row = {
    ...partial,
    first_entry_seq: firstEntrySeq,
    entry_count: entries.length,
    exceptions: null,
    properties: null,
  };
  const info = deps.st.insertTransaction.run(
    row.transaction_id,
    row.tran_code_id,
    row.tran_code_version,
    row.journal_id,
    row.correlation_id,
    row.external_id,
    row.effective,
    row.description,
    row.metadata,
    row.void_of,
    row.input_fingerprint,
    row.first_entry_seq,
    row.entry_count,
    row.created,
    row.modified,
  );
  const deltas: BalanceDelta[] = [];
  const keys = new RecordKeys(row.journal_id);
  // The sets above each account in this journal: the entry rolls up into each (Entry.parentAccountIds).
  const parents = new Map<string, string[]>();
  for (const e of entries)
    if (!parents.has(e.accountId)) parents.set(e.accountId, setsAbove(deps, e.accountId, row.journal_id));
  const written: EntryRow[] = entries.map((e, i) => {
    const sets = parents.get(e.accountId)!;
    const entry: EntryRow = {
      seq: firstEntrySeq + i,
      entry_id: deps.newId(),
      transaction_id: row.transaction_id,
      account_id: e.accountId,
      journal_id: row.journal_id,
      sequence: i + 1,
      entry_type: e.entryType,
      layer: e.layer,
      direction: e.direction,
      units: e.units,
      currency: e.currency,
      description: e.description,
      metadata: e.metadata,
      created: row.created,
      parent_account_ids: sets.length ? JSON.stringify(sets) : null,
      balance_version: null,
      balance_after: null,
      set_links: null,
      account_prev: null,
    };
    deltas.push({
      accountId: e.accountId,
      journalId: row.journal_id,
      currency: e.currency,
      layer: e.layer,
      direction: e.direction,
      units: e.units,
      entryId: entry.entry_id,
      seq: entry.seq,
      key: keys.of(e.accountId, e.currency),
    });
    for (const setId of sets) {
      deltas.push({
        accountId: setId,
        journalId: row.journal_id,
        currency: e.currency,
        layer: e.layer,
        direction: e.direction,
        units: e.units,
        entryId: entry.entry_id,
        seq: entry.seq,
        key: keys.of(setId, e.currency),
      });
    }
    return entry;
  });
  // Balances first: each entry (and each set row) keeps the record as this posting left it (history).
  const after = applyToBalances(deps, deltas, row.modified);
  linkEntries(deps, written, parents, after, keys);
  for (const entry of written) {
    const own = after.get(keys.of(entry.account_id, entry.currency))!;
    entry.balance_version = own.version;
    entry.balance_after = own.after;
  }
  insertEntries(deps, written);
  last.seq = firstEntrySeq + written.length - 1;
  const transaction: TransactionRow = { ...row, seq: Number(info.lastInsertRowid) };
  const posted: Posted = { transaction, entries: written, parents, balances: after, keys };
  afterPosting(deps, posted);
  return posted;
}

/** Insert a posting's entries, ENTRY_INSERT_ROWS to a statement. */
function insertEntries(deps: LedgerDeps, entries: readonly EntryRow[]): void {
  for (let start = 0; start < entries.length; start += ENTRY_INSERT_ROWS) {
    const rows = Math.min(ENTRY_INSERT_ROWS, entries.length - start);
    const values: unknown[] = [];
    for (let i = start; i < start + rows; i++) for (const column of ENTRY_COLUMNS) values.push(entries[i]![column]);
    deps.st.insertEntries(rows).run(values);
  }
}

/**
 * PostgreSQL: the seq before a block of ENTRY_SEQ_BLOCK free seqs (see nextEntrySeqBlock). Seqs
 * then grow with gaps, and in the order postings took their blocks, not the order they committed;
 * two postings to one balance record still commit in seq order (the second waits for the first's
 * row, fails, and runs again with a new block), so each record's chain of entries stays in seq order.
 */
function entrySeqBlock(deps: LedgerDeps, entries: number): { seq: number } {
  // createEngine refuses an entriesPerTransactionMax past the block on PostgreSQL.
  if (entries > ENTRY_SEQ_BLOCK)
    throw bug(`bug: a posting of ${entries} entries passed entriesPerTransactionMax on PostgreSQL`);
  return { seq: deps.st.nextEntrySeqBlock!.get()! - 1 };
}

/** Each engine's highest entry seq, and the cache epoch it was read or written in. */
const lastEntrySeqs = new WeakMap<LedgerDeps, { epoch: number; seq: number }>();

/**
 * The highest entry seq written, kept for the cache epoch instead of `SELECT max(seq)` per posting.
 * Entries are written only by writeTransaction, which moves it; a rollback (of a transaction or a
 * savepoint) and another connection's commit move the epoch, and the next posting reads it again.
 * A posting outside the engine's transactions (a caller's own db.transaction, which may commit
 * or roll back unseen) drops it.
 */
function lastEntrySeq(deps: LedgerDeps): { seq: number } {
  const kept = lastEntrySeqs.get(deps);
  if (deps.epoch.active && kept && kept.epoch === deps.epoch.value) return kept;
  const read = { epoch: deps.epoch.value, seq: deps.st.lastEntrySeq.get()?.seq ?? 0 };
  if (deps.epoch.active) lastEntrySeqs.set(deps, read);
  else lastEntrySeqs.delete(deps);
  return read;
}

/** Tell triggers: the transaction, its tran code, its params and its entries. */
export function announce(
  deps: LedgerDeps,
  transaction: Transaction,
  tranCode: string,
  params: () => unknown,
  entries: readonly PlannedEntry[],
): void {
  if (!deps.onChange) return;
  // Built only if a trigger listens: most posts have none.
  const document = () => ({
    ...transaction,
    tranCode,
    params: params(),
    entries: entries.map((e) => ({
      accountId: e.accountId,
      units: e.units,
      currency: e.currency,
      direction: e.direction,
      layer: e.layer,
      entryType: e.entryType,
    })),
  });
  deps.onChange({
    event: 'transaction.inserted',
    recordId: transaction.transactionId,
    recordVersion: 1,
    document,
    previous: null,
  });
}
