import { limitExceeded } from '../errors.js';
import type { TransactionRow } from '../storage/statements/ledger.js';
import { balanceOwner } from './account-sets.js';
import { applyEntry, type Definition, Deltas } from './calculation-updates.js';
import { chainSeqs } from './chains.js';
import type { LedgerDeps } from './deps.js';

/**
 * A new calculation's balances over the entries that exist: every entry for a GLOBAL one when it is
 * created, an account's or set's entries in one journal when a LOCAL one is attached there; in the
 * same transaction, at most calculationBackfillEntriesMax entries.
 */

/**
 * Apply the existing entries a new GLOBAL calculation (every entry) or a new attachment (the
 * entries of that account or set in that journal) covers, in posting order.
 */
export function backfill(
  deps: LedgerDeps,
  def: Definition,
  scope: { kind: 'all' } | { kind: 'owner'; accountId: string; journalId: string },
): void {
  const max = deps.limits.calculationBackfillEntriesMax;
  const chunk = 1000;
  const tooMany = () =>
    limitExceeded(
      'calculationBackfillEntriesMax',
      max,
      null,
      `calculation ${def.code} would backfill more than calculationBackfillEntriesMax (${max}) entries`,
      {
        hint:
          scope.kind === 'all'
            ? 'Create it as a LOCAL calculation and attach it where it is needed, or raise calculationBackfillEntriesMax in the engine options.'
            : 'Attach it to an account or set with fewer entries, or raise calculationBackfillEntriesMax in the engine options.',
        details: { calculationBackfillEntriesMax: max },
      },
    );
  // An account's or set's entries are its chains, walked newest first: their seqs are gathered (at
  // most `max`), sorted, and read in posting order.
  const ownerSeqs =
    scope.kind === 'owner'
      ? chainSeqs(
          deps,
          { id: scope.accountId, isSet: balanceOwner(deps, scope.accountId).isSet },
          { journalId: scope.journalId },
          max,
          tooMany,
        )
      : null;
  const deltas = new Deltas();
  let transaction: TransactionRow | undefined;
  let after = 0;
  let read = 0;
  let modified = '';
  for (;;) {
    const rows = ownerSeqs
      ? deps.st.entriesBySeqs.all(JSON.stringify(ownerSeqs.slice(read, read + chunk)))
      : deps.calc.entriesPage.all(after, chunk);
    if (rows.length === 0) break;
    read += rows.length;
    if (read > max) throw tooMany();
    for (const entry of rows) {
      if (!transaction || transaction.transaction_id !== entry.transaction_id)
        transaction = deps.st.transactionById.get(entry.transaction_id)!;
      if (transaction.modified > modified) modified = transaction.modified;
      applyEntry(deps, def, { entry, transaction, posted: {}, reads: def.reads, vars: null }, scope, deltas);
    }
    after = rows.at(-1)!.seq;
    if (rows.length < chunk) break;
  }
  deltas.write(deps, modified || deps.clock.now().toISOString());
}
