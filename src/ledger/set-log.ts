import { EngineError } from '../errors.js';
import { type BalanceAfter, type EntryRow, SET_LOG_MARK_EVERY } from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import type { RecordKeys } from './posted.js';

/**
 * A set's entries: a chain per balance record (set, journal, currency) through the entries
 * themselves, newest first — each entry links, per set above its account, to the record's previous
 * entry (entries.set_links; see setLogStatements). Everything that reads or writes a set's entries
 * goes through here.
 */

export type SetLogRow = EntryRow & { log_prev: number | null; set_balance_version: number | null; set_balance_after: string | null };

/** A chain: one balance record of a set, and its newest entry. */
export interface SetChain {
  setId: string;
  journalId: string;
  currency: string;
  head: number;
}

/**
 * Link a posting's entries (in seq order, before they are inserted) into the chains of the sets
 * above their accounts: each entry's set_links holds, per set, the record's previous entry (the
 * head the balance upsert replaced, then the posting's own entries) and the set's balance as the
 * posting left it. A chain that passed a multiple of SET_LOG_MARK_EVERY entries gets a mark at its
 * new head.
 */
export function linkSetEntries(
  deps: LedgerDeps,
  entries: readonly EntryRow[],
  parents: ReadonlyMap<string, readonly string[]>,
  after: ReadonlyMap<string, BalanceAfter>,
  keys: RecordKeys,
): void {
  const prev = new Map<string, number | null>();
  const heads = new Map<string, { setId: string; entry: EntryRow; count: number; rows: number }>();
  for (const entry of entries) {
    const sets = parents.get(entry.account_id);
    if (!sets || sets.length === 0) continue;
    let links = '';
    for (const setId of sets) {
      const key = keys.of(setId, entry.currency);
      const record = after.get(key)!;
      const before = prev.has(key) ? prev.get(key)! : (record.log_prev ?? null);
      links += `${links ? ',' : '{'}${JSON.stringify(setId)}:[${before},${record.version},${JSON.stringify(record.after)}]`;
      prev.set(key, entry.seq);
      const head = heads.get(key);
      if (head) {
        head.entry = entry;
        head.rows++;
      } else heads.set(key, { setId, entry, count: record.log_count ?? 0, rows: 1 });
    }
    entry.set_links = `${links}}`;
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

/** The chain's newest entry at or below `seq`, or null: from the first mark above it (or the head), at most ~SET_LOG_MARK_EVERY links down. */
export function seekChain(deps: LedgerDeps, chain: SetChain, seq: number): number | null {
  if (seq >= chain.head) return chain.head;
  const from = deps.st.setLogMarkAbove.get(chain.setId, chain.journalId, chain.currency, seq) ?? chain.head;
  return deps.st.setLogSeek.get({ from, set: chain.setId, floor: seq }) ?? null;
}

/** Up to `limit` entries of a chain at or below `seq`, newest first, with the set's balance each left. */
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

/**
 * Forget a set's chains (before its balance records, which hold the heads, go): its marks. The
 * links in its old entries stay, as its id stays in their parent_account_ids; no record points to
 * them, so no read reaches them, and a set created again with the same id starts new chains.
 */
export function deleteSetLog(deps: LedgerDeps, setId: string): void {
  deps.st.deleteSetEntryMarks.run(setId);
}
