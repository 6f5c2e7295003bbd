import { EngineError, notFound } from '../errors.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import { entriesAbove, entriesBelow } from './chains.js';
import { cachedAccount, type LedgerDeps } from './deps.js';
import { toEntry, toTransaction } from './transaction-records.js';
import type { Entry, Transaction } from './records.js';

export function getTransaction(deps: LedgerDeps, transactionId: string): Transaction {
  const row = deps.st.transactionById.get(transactionId);
  if (!row) throw notFound('transaction', transactionId);
  return toTransaction(row);
}

export function findTransaction(deps: LedgerDeps, transactionId: string): Transaction | null {
  const row = deps.st.transactionById.get(transactionId);
  return row ? toTransaction(row) : null;
}

/** Transactions in posting order, all of them, or those of one correlation id or one journal. */
export function listTransactions(
  deps: LedgerDeps,
  args: { first: number; after?: string | null; correlationId?: string | null; journalId?: string | null },
): Connection<Transaction> {
  const req = pageRequest<number>(args.first, args.after, deps.limits.pageSizeMax, 'number', 'transactions');
  const after = req.after ?? 0;
  if (args.correlationId != null && args.journalId != null) {
    throw new EngineError('BAD_REQUEST', 'transactions can be filtered by correlationId or by journalId, not both', {
      hint: 'A correlation is short: filter it by journal on the client.',
    });
  }
  const rows =
    args.correlationId != null
      ? deps.st.transactionsByCorrelationPage.all(args.correlationId, args.correlationId, after, req.fetch)
      : args.journalId != null
        ? deps.st.transactionsByJournalPage.all(args.journalId, after, req.fetch)
        : deps.st.transactionsPage.all(after, req.fetch);
  return toConnection(rows, req, (r) => r.seq, toTransaction);
}

export function entriesOfTransaction(
  deps: LedgerDeps,
  transactionId: string,
  first: number,
  after?: string | null,
): Connection<Entry> {
  const req = pageRequest<number>(first, after, deps.limits.pageSizeMax, 'number', 'transaction-entries');
  const txn = deps.st.transactionById.get(transactionId);
  if (!txn) throw notFound('transaction', transactionId);
  const end = txn.first_entry_seq + txn.entry_count;
  const rows = deps.st.entriesBySeqRange.all(txn.first_entry_seq + (req.after ?? 0), end, req.fetch);
  return toConnection(rows, req, (r) => r.sequence, toEntry);
}

/**
 * An account's entries in posting order (or newest first: the entries behind a balance),
 * optionally of one journal and currency: its chains (one per journal and currency), merged.
 * An account set has no entries of its own (its entries are AccountSet.entries).
 */
export function entriesOfAccount(
  deps: LedgerDeps,
  args: {
    accountId: string;
    first: number;
    after?: string | null;
    journalId?: string | null;
    currency?: string | null;
    newestFirst?: boolean;
  },
): Connection<Entry> {
  const req = pageRequest<number>(
    args.first,
    args.after,
    deps.limits.pageSizeMax,
    'number',
    args.newestFirst ? 'balance-entries' : 'account-entries',
  );
  const account = cachedAccount(deps, args.accountId);
  const filter = { journalId: args.journalId, currency: args.currency };
  const owner = { id: args.accountId, isSet: false };
  const rows =
    !account || account.is_account_set === 1
      ? []
      : args.newestFirst
        ? entriesBelow(deps, owner, req.after ?? Number.MAX_SAFE_INTEGER, req.fetch, filter)
        : entriesAbove(deps, owner, req.after ?? 0, req.fetch, filter);
  return toConnection(rows, req, (r) => r.seq, toEntry);
}

export function getEntry(deps: LedgerDeps, entryId: string): Entry {
  const row = deps.st.entryById.get(entryId);
  if (!row) throw notFound('entry', entryId);
  return toEntry(row);
}
