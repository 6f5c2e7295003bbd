import { EngineError } from '../errors.js';
import { type BalanceAfter, type EntryRow, SET_LOG_MARK_EVERY } from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import type { RecordKeys } from './posted.js';

/**
 * A set's entries: one log row per entry and set it rolled up into, appended in posting order and
 * chained per balance record (set, journal, currency) — see setLogStatements. Everything that
 * reads or writes a set's entries goes through here.
 */

export type SetLogRow = EntryRow & { log_prev: number | null; set_balance_version: number | null; set_balance_after: string | null };

/** A chain: one balance record of a set, and its newest row. */
export interface SetChain {
  setId: string;
  journalId: string;
  currency: string;
  head: number;
}

/**
 * Append a posting's rows: for each entry (in seq order) and each set above its account, a row
 * pointing to the record's previous row (the head the balance upsert replaced, then the posting's
 * own rows), with the set's balance as the posting left it. A chain that passed a multiple of
 * SET_LOG_MARK_EVERY rows gets a mark at its new head.
 */
export function appendSetEntries(
  deps: LedgerDeps,
  entries: readonly EntryRow[],
  parents: ReadonlyMap<string, readonly string[]>,
  after: ReadonlyMap<string, BalanceAfter>,
  keys: RecordKeys,
): void {
  const prev = new Map<string, number | null>();
  const heads = new Map<string, { setId: string; entry: EntryRow; count: number; rows: number }>();
  for (const entry of entries) {
    for (const setId of parents.get(entry.account_id) ?? []) {
      const key = keys.of(setId, entry.currency);
      const record = after.get(key)!;
      const before = prev.has(key) ? prev.get(key)! : (record.log_prev ?? null);
      deps.st.insertSetEntry.run(entry.seq, setId, before, record.version, record.after);
      prev.set(key, entry.seq);
      const head = heads.get(key);
      if (head) {
        head.entry = entry;
        head.rows++;
      } else heads.set(key, { setId, entry, count: record.log_count ?? 0, rows: 1 });
    }
  }
  for (const { setId, entry, count, rows } of heads.values()) {
    if (Math.floor((count - rows) / SET_LOG_MARK_EVERY) < Math.floor(count / SET_LOG_MARK_EVERY)) {
      deps.st.insertSetEntryMark.run(setId, entry.journal_id, entry.currency, entry.seq);
    }
  }
}

/** The chains of a set (one per journal and currency it has entries in), or of one currency. */
export function setChains(deps: LedgerDeps, setId: string, currency?: string | null): SetChain[] {
  return deps.st.setLogHeads
    .all(setId)
    .filter((h) => !currency || h.currency === currency)
    .map((h) => ({ setId, journalId: h.journal_id, currency: h.currency, head: h.log_head }));
}

/** The chain's newest row at or below `seq`, or null: from the first mark above it (or the head), at most ~SET_LOG_MARK_EVERY rows down. */
export function seekChain(deps: LedgerDeps, chain: SetChain, seq: number): number | null {
  if (seq >= chain.head) return chain.head;
  const from = deps.st.setLogMarkAbove.get(chain.setId, chain.journalId, chain.currency, seq) ?? chain.head;
  return deps.st.setLogSeek.get({ from, set: chain.setId, floor: seq }) ?? null;
}

/** Up to `limit` rows of a chain at or below `seq`, newest first, with their entries. */
export function chainRows(deps: LedgerDeps, chain: SetChain, seq: number, limit: number): SetLogRow[] {
  const from = seekChain(deps, chain, seq);
  return from === null ? [] : deps.st.setLogEntries.all({ from, set: chain.setId, limit });
}

/**
 * Up to `limit` of a set's entries below seq `before`, newest first, across its chains (one per
 * currency, or the one of `currency`). The chains are merged lazily: each is positioned at the
 * cursor and read SET_LOG_MERGE_BATCH rows at a time, the newest row of all taken next, so a page
 * reads about limit + chains × batch rows. A set with more chains than pageSizeMax is listed one
 * currency at a time.
 */
export function setEntriesBelow(deps: LedgerDeps, setId: string, before: number, limit: number, currency?: string | null): SetLogRow[] {
  const chains = setChains(deps, setId, currency);
  if (chains.length === 1) return chainRows(deps, chains[0]!, before - 1, limit);
  if (chains.length > deps.limits.pageSizeMax) {
    throw new EngineError('LIMIT_EXCEEDED', `account set ${setId} has entries in ${chains.length} currencies; more than pageSizeMax (${deps.limits.pageSizeMax}) are not listed together`, {
      hint: 'List its entries one currency at a time (entries(where: {currency: ...})).',
      details: { pageSizeMax: deps.limits.pageSizeMax },
    });
  }
  const batch = Math.min(limit, SET_LOG_MERGE_BATCH);
  const cursors = chains.map((chain) => ({ chain, rows: chainRows(deps, chain, before - 1, batch), next: 0 }));
  const out: SetLogRow[] = [];
  while (out.length < limit) {
    let newest: (typeof cursors)[number] | null = null;
    for (const cursor of cursors) {
      const row = cursor.rows[cursor.next];
      if (row && (!newest || row.seq > newest.rows[newest.next]!.seq)) newest = cursor;
    }
    if (!newest) break;
    const row = newest.rows[newest.next++]!;
    out.push(row);
    if (newest.next === newest.rows.length) {
      newest.rows = newest.rows.length === batch && row.log_prev !== null ? deps.st.setLogEntries.all({ from: row.log_prev, set: setId, limit: batch }) : [];
      newest.next = 0;
    }
  }
  return out;
}

/** Rows read from each chain at a time when a set's chains are merged. */
const SET_LOG_MERGE_BATCH = 16;

/**
 * Every entry seq of a set, oldest first (a calculation's backfill): at most `max`, else
 * LIMIT_EXCEEDED from `tooMany`.
 */
export function setEntrySeqs(deps: LedgerDeps, setId: string, max: number, tooMany: () => EngineError): number[] {
  const seqs: number[] = [];
  for (const chain of setChains(deps, setId)) {
    let from: number | null = chain.head;
    while (from !== null) {
      const rows = deps.st.setLogSeqs.all({ from, set: setId, limit: 1000 });
      for (const row of rows) seqs.push(row.seq);
      if (seqs.length > max) throw tooMany();
      from = rows.length === 1000 ? rows.at(-1)!.prev : null;
    }
  }
  return seqs.sort((a, b) => a - b);
}

/** Delete a set's log rows and marks (before its balance records, which hold the heads). */
export function deleteSetLog(deps: LedgerDeps, setId: string): void {
  for (const chain of setChains(deps, setId)) {
    let from: number | null = chain.head;
    while (from !== null) {
      const rows = deps.st.setLogSeqs.all({ from, set: setId, limit: 1000 });
      for (const row of rows) deps.st.deleteSetEntry.run(row.seq, setId);
      from = rows.length === 1000 ? rows.at(-1)!.prev : null;
    }
  }
  deps.st.deleteSetEntryMarks.run(setId);
}
