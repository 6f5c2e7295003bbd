import type { BalanceAfter, EntryRow, TransactionRow } from '../storage/statements/ledger.js';

/** A transaction as written, with its entries (each with the sets it rolled up into). */
export interface Posted {
  transaction: TransactionRow;
  entries: readonly EntryRow[];
  /** When just written: the sets above each account posted to (what each entry's parent_account_ids holds). */
  parents?: ReadonlyMap<string, readonly string[]>;
  /** When just written: each balance record as the posting left it, by `${accountId} ${journalId} ${currency}`. */
  balances?: ReadonlyMap<string, BalanceAfter>;
  /** When just written: those keys, each built once. */
  keys?: RecordKeys;
}

/**
 * The keys of one posting's balance records, `${accountId} ${journalId} ${currency}` (a posting
 * has one journal), each built once: every map the posting looks a record up in gets the same
 * string, flattened and hashed once, rather than a new one per lookup.
 */
export class RecordKeys {
  private readonly byCurrency = new Map<string, Map<string, string>>();

  constructor(readonly journalId: string) {}

  of(accountId: string, currency: string): string {
    let keys = this.byCurrency.get(currency);
    if (!keys) this.byCurrency.set(currency, (keys = new Map()));
    let key = keys.get(accountId);
    if (key === undefined) keys.set(accountId, (key = `${accountId} ${this.journalId} ${currency}`));
    return key;
  }
}

/** The account and the sets an entry rolled up into, own account first. */
export function ownersOf(posted: Pick<Posted, 'parents'>, entry: EntryRow): string[] {
  const sets =
    posted.parents?.get(entry.account_id) ??
    (entry.parent_account_ids === null ? [] : (JSON.parse(entry.parent_account_ids) as string[]));
  return [entry.account_id, ...sets];
}
