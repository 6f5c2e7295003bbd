import * as accounts from './accounts.js';
import * as sets from './account-sets.js';
import * as balances from './balances.js';
import type { LedgerDeps } from './deps.js';
import * as journals from './journals.js';
import * as posting from './post-transaction.js';
import * as voiding from './void-transaction.js';
import * as reads from './reads.js';
import * as tranCodes from './tran-codes.js';
import type { Writer } from './velocity-gate.js';
import type { WriteGuard } from './write-transaction.js';

/**
 * The ledger's public surface: one object per engine, every method synchronous and run inside the
 * caller's SQLite transaction. Posting and voiding are the only writers of entries and balances.
 */
export class Ledger {
  private readonly tranCodeCache = new tranCodes.TranCodeCache();

  constructor(readonly deps: LedgerDeps) {}

  /** Compiled tran code versions held (bounded by recordCacheMax). */
  get tranCodeCacheSize(): number {
    return this.tranCodeCache.size;
  }

  getJournal = (id: string) => journals.getJournal(this.deps, id);
  listJournals = (first: number, after?: string | null) => journals.listJournals(this.deps, first, after);
  createJournal = (input: journals.JournalInput) => journals.createJournal(this.deps, input);
  updateJournal = (id: string, input: Parameters<typeof journals.updateJournal>[2]) =>
    journals.updateJournal(this.deps, id, input);

  getAccount = (ref: { id?: string | null; code?: string | null }) => accounts.getAccount(this.deps, ref);
  listAccounts = (args: Parameters<typeof accounts.listAccounts>[1]) => accounts.listAccounts(this.deps, args);
  createAccount = (input: accounts.AccountInput) => accounts.createAccount(this.deps, input);
  updateAccount = (id: string, input: accounts.AccountUpdate) => accounts.updateAccount(this.deps, id, input);
  accountHistory = (id: string, first: number, after?: string | null) =>
    accounts.accountHistory(this.deps, id, first, after);

  getAccountSet = (id: string) => sets.getAccountSet(this.deps, id);
  listAccountSets = (first: number, after?: string | null) => sets.listAccountSets(this.deps, first, after);
  createAccountSet = (input: sets.AccountSetInput) => sets.createAccountSet(this.deps, input);
  updateAccountSet = (id: string, input: sets.AccountSetUpdate) => sets.updateAccountSet(this.deps, id, input);
  deleteAccountSet = (id: string) => sets.deleteAccountSet(this.deps, id);
  addToAccountSet = (id: string, member: sets.SetMember, writer?: Writer) =>
    sets.addToAccountSet(this.deps, id, member, writer);
  removeFromAccountSet = (id: string, member: sets.SetMember, writer?: Writer) =>
    sets.removeFromAccountSet(this.deps, id, member, writer);
  setMembers = (id: string, first: number, after?: string | null) => sets.membersOf(this.deps, id, first, after);
  setsOf = (memberId: string, first: number, after?: string | null) => sets.setsOf(this.deps, memberId, first, after);
  setEntries = (id: string, first: number, after?: string | null, currency?: string | null) =>
    sets.setEntries(this.deps, id, first, after, currency);
  /** An account or an account set by id: what a balance belongs to. */
  balanceOwner = (id: string) => sets.balanceOwner(this.deps, id);

  getTranCode = (ref: Parameters<typeof tranCodes.getTranCode>[1]) => tranCodes.getTranCode(this.deps, ref);
  listTranCodes = (first: number, after?: string | null) => tranCodes.listTranCodes(this.deps, first, after);
  tranCodeHistory = (id: string, first: number, after?: string | null) =>
    tranCodes.tranCodeHistory(this.deps, id, first, after);
  createTranCode = (input: tranCodes.TranCodeInput) => tranCodes.createTranCode(this.deps, input);
  updateTranCode = (id: string, input: tranCodes.TranCodeUpdate) => tranCodes.updateTranCode(this.deps, id, input);
  lockTranCode = (id: string) => tranCodes.lockTranCode(this.deps, id);

  postTransaction = (input: posting.PostTransactionInput, guard?: WriteGuard, writer?: Writer) =>
    posting.postTransaction(this.deps, this.tranCodeCache, input, guard, writer);
  voidTransaction = (
    id: string,
    guard?: WriteGuard,
    options?: { properties?: voiding.VoidProperties | null; writer?: Writer },
  ) => voiding.voidTransaction(this.deps, id, guard, options);
  getTransaction = (id: string) => reads.getTransaction(this.deps, id);
  listTransactions = (args: Parameters<typeof reads.listTransactions>[1]) => reads.listTransactions(this.deps, args);
  entriesOfTransaction = (id: string, first: number, after?: string | null) =>
    reads.entriesOfTransaction(this.deps, id, first, after);
  entriesOfAccount = (args: Parameters<typeof reads.entriesOfAccount>[1]) => reads.entriesOfAccount(this.deps, args);
  getEntry = (id: string) => reads.getEntry(this.deps, id);

  readBalance = (accountId: string, journalId: string, currency: string) =>
    balances.readBalance(this.deps, accountId, journalId, currency);
  balanceAsOf = (owner: { id: string; isSet: boolean }, journalId: string, currency: string, at: string) =>
    balances.balanceAsOf(this.deps, owner, journalId, currency, at);
  balanceHistory = (
    owner: { id: string; isSet: boolean },
    journalId: string,
    currency: string,
    first: number,
    after?: string | null,
  ) => balances.balanceHistory(this.deps, owner, journalId, currency, first, after);
  listBalances = (accountId: string, first: number, after?: string | null) =>
    balances.listBalances(this.deps, accountId, first, after);
}
