import { applyCalculations } from './calculation-updates.js';
import type { LedgerDeps } from './deps.js';
import type { Posted } from './posted.js';
import { applyViews } from './view-updates.js';

/**
 * Everything a posting (or a void) keeps up to date beyond the entries and the balances of their
 * accounts and sets, in the same transaction: calculation balances, then views.
 */
export function afterPosting(deps: LedgerDeps, posted: Posted): void {
  applyCalculations(deps, posted);
  applyViews(deps, posted);
}
