import { type EngineError, limitExceeded } from '../errors.js';
import { type BalanceAfter, CHAIN_MARK_EVERY, type ChainRow, type EntryRow } from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import type { RecordKeys } from './posted.js';

/**
 * The entries of a balance record, as a chain through the entries newest first (see
 * chainStatements): an account's record through each entry's account_prev, a set's through each
 * entry's set_links. Every read of an account's or a set's entries goes through here; no index
 * holds entries by account.
 */

/** Whose chains: an account's, or a set's (the entries that rolled up into it). */
export interface ChainOwner {
  id: string;
  isSet: boolean;
}

/** A chain: one balance record, and its newest entry. */
export interface Chain {
  owner: ChainOwner;
  journalId: string;
  currency: string;
  head: number;
}

/**
 * Link a posting's entries (in seq order, before they are inserted) into the chains of their
 * accounts' records and of the sets above them: each link points to the record's previous entry
 * (the head the balance upsert replaced, then the posting's own entries); a set's link also holds
 * the set's balance as the posting left it. A chain that passed a multiple of CHAIN_MARK_EVERY
 * entries gets a mark at its new head.
 */
export function linkEntries(
  deps: LedgerDeps,
  entries: readonly EntryRow[],
  parents: ReadonlyMap<string, readonly string[]>,
  after: ReadonlyMap<string, BalanceAfter>,
  keys: RecordKeys,
): void {
  const prev = new Map<string, number>();
  const heads = new Map<string, { ownerId: string; entry: EntryRow; count: number; entries: number }>();
  const link = (ownerId: string, entry: EntryRow): { before: number | null; record: BalanceAfter } => {
    const key = keys.of(ownerId, entry.currency);
    const record = after.get(key)!;
    const before = prev.get(key) ?? record.log_prev ?? null;
    prev.set(key, entry.seq);
    const head = heads.get(key);
    if (head) {
      head.entry = entry;
      head.entries++;
    } else heads.set(key, { ownerId, entry, count: record.log_count ?? 0, entries: 1 });
    return { before, record };
  };
  for (const entry of entries) {
    entry.account_prev = link(entry.account_id, entry).before;
    const sets = parents.get(entry.account_id);
    if (!sets || sets.length === 0) continue;
    let links = '';
    for (const setId of sets) {
      const { before, record } = link(setId, entry);
      links += `${links ? ',' : '{'}${JSON.stringify(setId)}:[${before},${record.version},${JSON.stringify(record.after)}]`;
    }
    entry.set_links = `${links}}`;
  }
  for (const { ownerId, entry, count, entries: added } of heads.values()) {
    if (Math.floor((count - added) / CHAIN_MARK_EVERY) < Math.floor(count / CHAIN_MARK_EVERY)) {
      deps.st.insertEntryMark.run(ownerId, entry.journal_id, entry.currency, entry.seq);
    }
  }
}

/** Which of an owner's chains: those of one journal, one currency, or one record (both). */
export interface ChainFilter {
  journalId?: string | null;
  currency?: string | null;
}

/**
 * The chains of an account or set (one per journal and currency it has entries in), or of one
 * journal or currency: at most `max` (past it, LIMIT_EXCEEDED from `tooMany`). Both given: the one
 * record's, by primary key.
 */
export function chainsOf(
  deps: LedgerDeps,
  owner: ChainOwner,
  filter: ChainFilter,
  max: number,
  tooMany: () => EngineError,
): Chain[] {
  if (filter.journalId && filter.currency) {
    const chain = chainOf(deps, owner, filter.journalId, filter.currency);
    return chain ? [chain] : [];
  }
  const heads = deps.st.chainHeads.all({
    owner: owner.id,
    journal: filter.journalId ?? null,
    currency: filter.currency ?? null,
    limit: max + 1,
  });
  if (heads.length > max) throw tooMany();
  return heads.map((h) => ({ owner, journalId: h.journal_id, currency: h.currency, head: h.log_head }));
}

/** The record's chain, when it has entries. */
export function chainOf(deps: LedgerDeps, owner: ChainOwner, journalId: string, currency: string): Chain | null {
  const head = deps.st.balance.get(owner.id, journalId, currency)?.log_head;
  return head === undefined || head === null ? null : { owner, journalId, currency, head };
}

function walks(deps: LedgerDeps, chain: Chain) {
  return chain.owner.isSet ? deps.st.setChain : deps.st.accountChain;
}

/** The chain's newest entry at or below `seq`, or null: from the first mark above it (or the head), about CHAIN_MARK_EVERY links down at most. */
export function seekChain(deps: LedgerDeps, chain: Chain, seq: number): number | null {
  if (seq >= chain.head) return chain.head;
  const from = deps.st.markAbove.get(chain.owner.id, chain.journalId, chain.currency, seq) ?? chain.head;
  return walks(deps, chain).seek.get({ from, owner: chain.owner.id, floor: seq }) ?? null;
}

/** Up to `limit` entries of a chain at or below `seq`, newest first, with the record's version and totals each left. */
export function chainRows(deps: LedgerDeps, chain: Chain, seq: number, limit: number): ChainRow[] {
  const from = seekChain(deps, chain, seq);
  return from === null ? [] : walks(deps, chain).entries.all({ from, owner: chain.owner.id, limit });
}

/** Entries read from each chain at a time when chains are merged. */
const MERGE_BATCH = 16;

/** The chains one list merges: at most pageSizeMax of them (each costs reads per page). */
function listedChains(deps: LedgerDeps, owner: ChainOwner, filter: ChainFilter): Chain[] {
  const max = deps.limits.pageSizeMax;
  return chainsOf(deps, owner, filter, max, () =>
    limitExceeded(
      'pageSizeMax',
      max,
      null,
      `${owner.isSet ? `account set ${owner.id} has entries in more than pageSizeMax (${max}) currencies` : `account ${owner.id} has entries in more than pageSizeMax (${max}) journals and currencies`}, which are not listed together`,
      {
        hint: `List its entries one currency${owner.isSet ? '' : ' or journal'} at a time (entries(where: {currency: ...})).`,
        details: { pageSizeMax: max },
      },
    ),
  );
}

/**
 * Up to `limit` of an account's or set's entries below seq `before`, newest first, across its
 * chains (or those of one journal or currency). The chains are merged lazily: each is positioned
 * at the cursor and read MERGE_BATCH entries at a time, the newest entry of all taken next, so a
 * page reads about limit + chains × batch entries.
 */
export function entriesBelow(
  deps: LedgerDeps,
  owner: ChainOwner,
  before: number,
  limit: number,
  filter: ChainFilter = {},
): ChainRow[] {
  const chains = listedChains(deps, owner, filter);
  if (chains.length === 0) return [];
  if (chains.length === 1) return chainRows(deps, chains[0]!, before - 1, limit);
  const batch = Math.min(limit, MERGE_BATCH);
  const cursors = chains.map((chain) => ({ chain, rows: chainRows(deps, chain, before - 1, batch), next: 0 }));
  const out: ChainRow[] = [];
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
      newest.rows =
        newest.rows.length === batch && row.log_prev !== null
          ? walks(deps, newest.chain).entries.all({ from: row.log_prev, owner: owner.id, limit: batch })
          : [];
      newest.next = 0;
    }
  }
  return out;
}

/**
 * Up to `limit` of an account's or set's entries above seq `after`, oldest first, across its
 * chains (or those of one journal or currency). A chain is read upwards a stretch at a time: the
 * seqs from the first mark above the cursor (or the head) down to the cursor, then from the next
 * mark down to that one; the chains' seqs are merged oldest first, and only the page's entries
 * are read out.
 */
export function entriesAbove(
  deps: LedgerDeps,
  owner: ChainOwner,
  after: number,
  limit: number,
  filter: ChainFilter = {},
): EntryRow[] {
  const chains = listedChains(deps, owner, filter);
  const stretch = (cursor: { chain: Chain; floor: number }): number[] => {
    const { chain, floor } = cursor;
    if (floor >= chain.head) return [];
    const top = deps.st.markAbove.get(chain.owner.id, chain.journalId, chain.currency, floor) ?? chain.head;
    cursor.floor = top;
    return walks(deps, chain).above.all({ from: top, owner: owner.id, floor }).reverse();
  };
  const cursors = chains.map((chain) => {
    const cursor = { chain, floor: after, seqs: [] as number[], next: 0 };
    cursor.seqs = stretch(cursor);
    return cursor;
  });
  const seqs: number[] = [];
  while (seqs.length < limit) {
    let oldest: (typeof cursors)[number] | null = null;
    for (const cursor of cursors) {
      const seq = cursor.seqs[cursor.next];
      if (seq !== undefined && (!oldest || seq < oldest.seqs[oldest.next]!)) oldest = cursor;
    }
    if (!oldest) break;
    seqs.push(oldest.seqs[oldest.next++]!);
    if (oldest.next === oldest.seqs.length) {
      oldest.seqs = stretch(oldest);
      oldest.next = 0;
    }
  }
  return seqs.length === 0 ? [] : deps.st.entriesBySeqs.all(JSON.stringify(seqs));
}

/**
 * Every entry seq of an account or set (of one journal, when given), oldest first (a
 * calculation's backfill): at most `max`, else LIMIT_EXCEEDED from `tooMany`.
 */
export function chainSeqs(
  deps: LedgerDeps,
  owner: ChainOwner,
  filter: ChainFilter,
  max: number,
  tooMany: () => EngineError,
): number[] {
  const seqs: number[] = [];
  // Every chain holds an entry at least: more chains than `max` are more entries than it.
  for (const chain of chainsOf(deps, owner, filter, max, tooMany)) {
    let from: number | null = chain.head;
    while (from !== null) {
      const rows = walks(deps, chain).seqs.all({ from, owner: owner.id, limit: 1000 });
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
export function deleteSetChains(deps: LedgerDeps, setId: string): void {
  deps.st.deleteEntryMarks.run(setId);
}
