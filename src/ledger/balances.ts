import { addText, subText } from '../decimal.js';
import { limitExceeded } from '../errors.js';
import { type Connection, encodeCursor, pageRequest, toConnection } from '../paging.js';
import {
  BALANCE_COLUMNS,
  type BalanceAfter,
  balanceColumnIndex,
  type BalanceRow,
  type ChainRow,
  snapshotTotals,
} from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import type { Direction, Layer } from './records.js';
import { chainOf, chainRows } from './chains.js';

/** Debit and credit totals as exact decimal text, each with the scale of what was added to it. */
export interface LayerTotals {
  dr: string;
  cr: string;
}

/** One balance record: an account × journal × currency, with debit and credit totals per layer. */
export interface Balance {
  accountId: string;
  journalId: string;
  currency: string;
  layers: Record<Layer, LayerTotals>;
  entryId: string | null;
  version: number;
  created: string | null;
  modified: string | null;
  /** A calculation's balance (src/ledger/calculations.ts): the calculation read, and its dimension values. */
  calculationId?: string;
  dimensions?: Record<string, unknown>;
}

export function toBalance(row: BalanceRow): Balance {
  return {
    accountId: row.account_id,
    journalId: row.journal_id,
    currency: row.currency,
    layers: {
      SETTLED: { dr: row.settled_dr, cr: row.settled_cr },
      PENDING: { dr: row.pending_dr, cr: row.pending_cr },
      ENCUMBRANCE: { dr: row.encumbrance_dr, cr: row.encumbrance_cr },
    },
    entryId: row.entry_id,
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

export function emptyBalance(accountId: string, journalId: string, currency: string): Balance {
  const zero = () => ({ dr: '0', cr: '0' });
  return {
    accountId,
    journalId,
    currency,
    layers: { SETTLED: zero(), PENDING: zero(), ENCUMBRANCE: zero() },
    entryId: null,
    version: 0,
    created: null,
    modified: null,
  };
}

/** O(1) whatever the number of entries: one primary-key read of the running totals. */
export function readBalance(deps: LedgerDeps, accountId: string, journalId: string, currency: string): Balance {
  const row = deps.st.balance.get(accountId, journalId, currency);
  return row ? toBalance(row) : emptyBalance(accountId, journalId, currency);
}

/** A balance as a snapshot left it (see migration 14): version and the six totals. */
function fromSnapshot(
  accountId: string,
  journalId: string,
  currency: string,
  version: number,
  after: string,
  entryId: string,
  modified: string,
): Balance {
  const t = snapshotTotals(after);
  return {
    accountId,
    journalId,
    currency,
    layers: {
      SETTLED: { dr: t.settled_dr, cr: t.settled_cr },
      PENDING: { dr: t.pending_dr, cr: t.pending_cr },
      ENCUMBRANCE: { dr: t.encumbrance_dr, cr: t.encumbrance_cr },
    },
    entryId,
    version,
    created: null,
    modified,
  };
}

/**
 * Walk the entries behind a balance record newest first (its chain), from `fromSeq` down, yielding
 * each version the postings left once. At most `budget` entries are read per call; `stoppedAt`
 * says where a call that ran out stopped.
 */
function versionsFrom(
  deps: LedgerDeps,
  owner: { id: string; isSet: boolean },
  journalId: string,
  currency: string,
  fromSeq: number,
  want: number,
  budget: number,
) {
  const found: Array<{ balance: Balance; seq: number }> = [];
  let cursor = fromSeq;
  let lastVersion = Number.MAX_SAFE_INTEGER;
  const stoppedAt: number | null = null;
  const batch = Math.min(Math.max(want * 2, 16), 1000);
  // The record heads its own chain (one primary-key read).
  const chain = chainOf(deps, owner, journalId, currency);
  if (!chain) return { found, stoppedAt };
  const read = (from: number): ChainRow[] => chainRows(deps, chain, from, batch);
  /** The record's version this entry left, or null for an entry from before balance history. */
  const versionOf = (row: ChainRow): number | null =>
    row.record_version == null || row.record_after == null ? null : row.record_version;
  for (;;) {
    const rows = read(cursor);
    for (const row of rows) {
      budget--;
      const version = versionOf(row);
      if (version === null) continue;
      if (version >= lastVersion) {
        // Another entry of the same posting (one version): the version's cursor is its lowest seq,
        // so the next page does not list it again.
        if (version === lastVersion) found.at(-1)!.seq = row.seq;
        continue;
      }
      lastVersion = version;
      const after = row.record_after!;
      found.push({
        balance: fromSnapshot(owner.id, journalId, currency, version, after, row.entry_id, row.created),
        seq: row.seq,
      });
      if (found.length === want) return { found, stoppedAt };
    }
    if (rows.length < batch) return { found, stoppedAt };
    cursor = rows.at(-1)!.seq - 1;
    if (budget <= 0) break;
  }
  // Out of budget. Stopping inside the last version's entries would list it again on the next
  // page: read on past the rest of them (one posting's entries: at most entriesPerTransactionMax
  // seqs below the last one read), and stop at the first row not consumed.
  const last = found.at(-1);
  if (last) {
    const floor = last.seq - deps.limits.entriesPerTransactionMax;
    for (;;) {
      const rows = read(cursor);
      for (const row of rows) {
        const version = versionOf(row);
        if (row.seq < floor || (version !== null && version !== lastVersion)) return { found, stoppedAt: row.seq };
        if (version === lastVersion) last.seq = row.seq;
      }
      if (rows.length < batch) return { found, stoppedAt: null };
      cursor = rows.at(-1)!.seq - 1;
    }
  }
  return { found, stoppedAt: cursor };
}

/**
 * Every version of a balance record the postings left, newest first (a version made by adding or
 * removing a set member, which posts nothing, is not listed; the next posting's version is).
 */
export function balanceHistory(
  deps: LedgerDeps,
  owner: { id: string; isSet: boolean },
  journalId: string,
  currency: string,
  first: number,
  after?: string | null,
): Connection<Balance> {
  const req = pageRequest<number>(first, after, deps.limits.pageSizeMax, 'number', 'balance-history');
  const from = req.after === undefined || req.after === null ? Number.MAX_SAFE_INTEGER : req.after - 1;
  const { found, stoppedAt } = versionsFrom(
    deps,
    owner,
    journalId,
    currency,
    from,
    req.fetch,
    deps.limits.pageSizeMax * 10,
  );
  const page = toConnection(
    found,
    req,
    (f) => f.seq,
    (f) => f.balance,
  );
  if (stoppedAt === null || found.length >= req.fetch) return page;
  return {
    ...page,
    pageInfo: { ...page.pageInfo, hasNextPage: true, endCursor: encodeCursor(req.kind, stoppedAt + 1) },
  };
}

/**
 * The balance in force at `at`: the version the last posting at or before it left (an empty
 * balance before the first). Entries are written in time order, so the last entry at `at` is found
 * by a binary search over seq (O(log entries) primary-key reads), then the record's own entries are
 * read back from there through its chain.
 */
export function balanceAsOf(
  deps: LedgerDeps,
  owner: { id: string; isSet: boolean },
  journalId: string,
  currency: string,
  at: string,
): Balance {
  const current = deps.st.balance.get(owner.id, journalId, currency);
  if (!current) return emptyBalance(owner.id, journalId, currency);
  if (current.modified <= at) return toBalance(current);
  let lo = 1;
  let hi = deps.st.lastEntrySeq.get()?.seq ?? 0;
  let bound = 0;
  // The last entry created at or before `at`, by seq (entries are created in seq order; on
  // PostgreSQL seqs have gaps, so each probe reads the first entry at or after its seq).
  while (lo <= hi) {
    const mid = Math.floor((lo + hi) / 2);
    const entry = deps.st.entryCreatedFrom.get(mid);
    if (entry === undefined || entry.seq > hi) {
      hi = mid - 1;
      continue;
    }
    if (entry.created <= at) {
      bound = entry.seq;
      lo = entry.seq + 1;
    } else hi = mid - 1;
  }
  if (bound === 0) return emptyBalance(owner.id, journalId, currency);
  const { found, stoppedAt } = versionsFrom(deps, owner, journalId, currency, bound, 1, deps.limits.pageSizeMax * 10);
  if (found.length === 0 && stoppedAt !== null) {
    // The walk is bounded by ten pages (pageSizeMax): raising pageSizeMax raises it.
    throw limitExceeded(
      'pageSizeMax',
      deps.limits.pageSizeMax * 10,
      null,
      `the balance of ${owner.id} as of ${at} is behind more than ${deps.limits.pageSizeMax * 10} entries without a balance snapshot (posted before balance history was kept)`,
      {
        hint: 'Read Balance.history in pages instead.',
      },
    );
  }
  return found[0]?.balance ?? emptyBalance(owner.id, journalId, currency);
}

export function listBalances(
  deps: LedgerDeps,
  accountId: string,
  first: number,
  after?: string | null,
): Connection<Balance> {
  const req = pageRequest<string>(first, after, deps.limits.pageSizeMax, 'string', 'balances');
  const rows = deps.st.balancesByAccountPage.all(accountId, req.after ?? '', req.fetch);
  return toConnection(rows, req, (r) => `${r.journal_id} ${r.currency}`, toBalance);
}

/** Totals of one layer, or cumulative totals up to it (available). */
export function layerTotals(balance: Balance, layer: Layer, cumulative: boolean): LayerTotals {
  if (!cumulative) return balance.layers[layer];
  const order: Layer[] = ['SETTLED', 'PENDING', 'ENCUMBRANCE'];
  let dr = '0';
  let cr = '0';
  for (const l of order.slice(0, order.indexOf(layer) + 1)) {
    dr = addText(dr, balance.layers[l].dr);
    cr = addText(cr, balance.layers[l].cr);
  }
  return { dr, cr };
}

/** Debit-normal accounts (assets, expenses) count DR − CR; credit-normal ones CR − DR. */
export function normalBalance(totals: LayerTotals, normalBalanceType: Direction): string {
  return normalBalanceType === 'DEBIT' ? subText(totals.dr, totals.cr) : subText(totals.cr, totals.dr);
}

export interface BalanceDelta {
  accountId: string;
  journalId: string;
  currency: string;
  layer: Layer;
  direction: Direction;
  /** Exact decimal text. */
  units: string;
  entryId: string;
  /** The entry's seq: the record's chain grows by it (see chainStatements). */
  seq: number;
  /** The record's key, `${accountId} ${journalId} ${currency}`, when the caller has it (see RecordKeys). */
  key?: string;
}

/**
 * Apply a transaction's entries to the running balances: the entries are summed per balance record
 * and layer here, and each record gets one upsert that adds those sums to its stored totals and
 * moves its chain head to its last entry. Returns each record as the upsert left it (by
 * `${accountId} ${journalId} ${currency}`), for the entries' history snapshot, with the head it
 * replaced (the entries' links).
 */
export function applyToBalances(
  deps: LedgerDeps,
  deltas: readonly BalanceDelta[],
  modified: string,
): Map<string, BalanceAfter> {
  const sums = new Map<
    string,
    { delta: BalanceDelta; amounts: Array<string | undefined>; mask: number; entries: number }
  >();
  for (const delta of deltas) {
    const key = delta.key ?? `${delta.accountId} ${delta.journalId} ${delta.currency}`;
    let sum = sums.get(key);
    if (!sum) {
      sum = { delta, amounts: [], mask: 0, entries: 0 };
      sums.set(key, sum);
    }
    const column = balanceColumnIndex(delta.layer, delta.direction);
    const sofar = sum.amounts[column];
    sum.amounts[column] = sofar === undefined ? delta.units : addText(sofar, delta.units);
    sum.mask |= 1 << column;
    sum.delta = delta;
    sum.entries++;
  }
  const after = new Map<string, BalanceAfter>();
  // In one order (by record key) in every transaction: two that update the same records never
  // wait for each other in a cycle (PostgreSQL would fail one of them as a deadlock after a second).
  const ordered = sums.size > 1 ? [...sums].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)) : sums;
  const upsert = deps.st.posting;
  for (const [key, { delta, amounts, mask, entries }] of ordered) {
    // The UPDATE adds to the changed columns only; the INSERT (an account's first posting in a
    // journal and currency) writes all six.
    const args: unknown[] = [];
    for (let i = 0; i < BALANCE_COLUMNS.length; i++) if (amounts[i] !== undefined) args.push(amounts[i]);
    args.push(delta.entryId, modified, delta.seq, entries, delta.accountId, delta.journalId, delta.currency);
    let left = upsert.updateColumns(mask).get(args);
    if (!left) {
      const record: Record<string, unknown> = {
        account_id: delta.accountId,
        journal_id: delta.journalId,
        currency: delta.currency,
        entry_id: delta.entryId,
        modified,
      };
      BALANCE_COLUMNS.forEach((c, i) => (record[c] = amounts[i] ?? '0'));
      record.log_head = delta.seq;
      record.log_rows = entries;
      left = upsert.insertBalance.get(record)!;
    }
    after.set(key, left);
  }
  return after;
}
