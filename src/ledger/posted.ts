import type { BalanceAfter, EntryRow, TransactionRow } from '../storage/statements/ledger.js';

/** A transaction as written, with its entries (each with the sets it rolled up into). */
export interface Posted {
  transaction: TransactionRow;
  entries: readonly EntryRow[];
  /** When just written: the sets above each account posted to (what each entry's parent_account_ids holds). */
  parents?: ReadonlyMap<string, readonly string[]>;
  /** When just written: each balance record as the posting left it, by `${accountId} ${journalId} ${currency}`. */
  balances?: ReadonlyMap<string, BalanceAfter>;
}

/** The account and the sets an entry rolled up into, own account first. */
export function ownersOf(posted: Pick<Posted, 'parents'>, entry: EntryRow): string[] {
  const sets = posted.parents?.get(entry.account_id) ?? (entry.parent_account_ids === null ? [] : (JSON.parse(entry.parent_account_ids) as string[]));
  return [entry.account_id, ...sets];
}
