import type { EntryRow, TransactionRow } from '../storage/statements/ledger.js';
import { applyCalculations } from './calculations.js';
import type { LedgerDeps } from './deps.js';
import { applyViews } from './views.js';

/** A transaction as written, with its entries (each with the sets it rolled up into). */
export interface Posted {
  transaction: TransactionRow;
  entries: readonly EntryRow[];
}

/**
 * Everything a posting (or a void) keeps up to date beyond the entries and the balances of their
 * accounts and sets, in the same transaction: calculation balances, then views.
 */
export function afterPosting(deps: LedgerDeps, posted: Posted): void {
  applyCalculations(deps, posted);
  applyViews(deps, posted);
}
