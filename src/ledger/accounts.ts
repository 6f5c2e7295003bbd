import { EngineError, limitExceeded, notFound, quote } from '../errors.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { AccountRow } from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import { addToAccountSet } from './account-sets.js';
import { insertUnique } from './journals.js';
import {
  type Account,
  type AccountStatus,
  type Direction,
  jsonObjectText,
  optionalText,
  readJson,
  requiredText,
} from './records.js';

export interface AccountInput {
  accountId: string;
  code: string;
  name: string;
  externalId?: string | null;
  description?: string | null;
  status?: AccountStatus | null;
  normalBalanceType?: Direction | null;
  metadata?: unknown;
  /** Sets (of any journal) the account joins as it is created. */
  accountSetIds?: string[] | null;
  config?: { enableConcurrentPosting?: boolean | null; upsert?: boolean | null } | null;
}

export type AccountUpdate = Partial<Omit<AccountInput, 'accountId' | 'accountSetIds' | 'config'>> & {
  config?: { enableConcurrentPosting?: boolean | null } | null;
};

export function toAccount(row: AccountRow): Account {
  return {
    accountId: row.account_id,
    code: row.code,
    name: row.name,
    externalId: row.external_id,
    description: row.description,
    status: row.status as AccountStatus,
    normalBalanceType: row.normal_balance_type as Direction,
    metadata: readJson(row.metadata),
    config: { enableConcurrentPosting: row.enable_concurrent_posting === 1, isAccountSet: row.is_account_set === 1 },
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

export function findAccountRow(deps: LedgerDeps, accountId: string): AccountRow {
  const row = deps.st.accountById.get(accountId);
  if (!row || row.is_account_set === 1) {
    if (row) {
      throw new EngineError('NOT_FOUND', `${quote(accountId)} is an account set, not an account`, {
        hint: 'Read it with accountSet(id: ...).',
      });
    }
    throw notFound('account', accountId, 'Create it with createAccount, or check the id.');
  }
  return row;
}

export function getAccount(deps: LedgerDeps, ref: { id?: string | null; code?: string | null }): Account {
  if (ref.id) return toAccount(findAccountRow(deps, ref.id));
  if (ref.code) {
    const row = deps.st.accountByCode.get(ref.code);
    if (!row) throw new EngineError('NOT_FOUND', `no account has code ${quote(ref.code)}`);
    return toAccount(row);
  }
  throw new EngineError('BAD_REQUEST', 'account needs an id or a code', {
    hint: 'Pass account(id: ...) or account(code: ...).',
  });
}

export function createAccount(deps: LedgerDeps, input: AccountInput): Account {
  const existing = deps.st.accountById.get(input.accountId);
  if (existing) {
    // upsert: creating what exists leaves it as it is (the reference ledger's config.upsert).
    if (input.config?.upsert && existing.is_account_set === 0) return toAccount(existing);
    throw new EngineError(
      'ALREADY_EXISTS',
      `${existing.is_account_set ? 'account set' : 'account'} ${quote(input.accountId)} already exists`,
      {
        hint: existing.is_account_set
          ? 'Accounts and account sets share one id space: choose another id.'
          : 'Use updateAccount to change it, or pass config: {upsert: true}.',
      },
    );
  }
  const setIds = input.accountSetIds ?? [];
  if (!Array.isArray(setIds) || setIds.length > deps.limits.accountSetAncestorsMax) {
    throw limitExceeded(
      'accountSetAncestorsMax',
      deps.limits.accountSetAncestorsMax,
      Array.isArray(setIds) ? setIds.length : null,
      `accountSetIds lists ${Array.isArray(setIds) ? setIds.length : 'a non-list of'} sets; accountSetAncestorsMax is ${deps.limits.accountSetAncestorsMax}`,
    );
  }
  checkUnique(deps, input.accountId, input.code, input.externalId);
  const now = deps.clock.now().toISOString();
  const row: AccountRow = {
    account_id: input.accountId,
    code: requiredText(input.code, 'code', 128),
    name: requiredText(input.name, 'name'),
    external_id: optionalText(input.externalId, 'externalId', 256),
    description: optionalText(input.description, 'description'),
    status: input.status ?? 'ACTIVE',
    normal_balance_type: input.normalBalanceType ?? 'CREDIT',
    metadata: jsonObjectText(input.metadata, 'metadata', deps.limits.jsonBytesMax),
    version: 1,
    created: now,
    modified: now,
    is_account_set: 0,
    journal_id: null,
    enable_concurrent_posting: input.config?.enableConcurrentPosting ? 1 : 0,
  };
  insertUnique(
    () => deps.st.insertAccount.run(row),
    `account code ${quote(row.code)} or externalId ${quote(row.external_id)}`,
  );
  const account = toAccount(row);
  deps.st.insertAccountVersion.run(row.account_id, 1, JSON.stringify(account));
  for (const setId of setIds) addToAccountSet(deps, setId, { memberType: 'ACCOUNT', memberId: row.account_id });
  deps.onChange?.({
    event: 'account.inserted',
    recordId: account.accountId,
    recordVersion: 1,
    document: () => account,
    previous: null,
  });
  return account;
}

export function updateAccount(deps: LedgerDeps, accountId: string, input: AccountUpdate): Account {
  const current = findAccountRow(deps, accountId);
  checkUnique(deps, accountId, input.code, input.externalId);
  if (
    input.normalBalanceType != null &&
    input.normalBalanceType !== current.normal_balance_type &&
    deps.st.balancesByAccountPage.all(accountId, '', 1).length > 0
  ) {
    throw new EngineError(
      'BAD_REQUEST',
      `account ${current.code} has postings; its normalBalanceType stays ${current.normal_balance_type}`,
      {
        hint: 'Changing it would flip the sign of every balance it reports. Open a new account instead.',
      },
    );
  }
  const row: AccountRow = {
    ...current,
    code: input.code == null ? current.code : requiredText(input.code, 'code', 128),
    name: input.name == null ? current.name : requiredText(input.name, 'name'),
    external_id:
      input.externalId === undefined ? current.external_id : optionalText(input.externalId, 'externalId', 256),
    description: input.description === undefined ? current.description : optionalText(input.description, 'description'),
    status: input.status ?? current.status,
    normal_balance_type: input.normalBalanceType ?? current.normal_balance_type,
    metadata:
      input.metadata === undefined
        ? current.metadata
        : jsonObjectText(input.metadata, 'metadata', deps.limits.jsonBytesMax),
    enable_concurrent_posting:
      input.config?.enableConcurrentPosting == null
        ? current.enable_concurrent_posting
        : input.config.enableConcurrentPosting
          ? 1
          : 0,
    version: current.version + 1,
    modified: deps.clock.now().toISOString(),
  };
  insertUnique(
    () => deps.st.updateAccount.run(row),
    `account code ${quote(row.code)} or externalId ${quote(row.external_id)}`,
  );
  const account = toAccount(row);
  deps.st.insertAccountVersion.run(row.account_id, row.version, JSON.stringify(account));
  deps.onChange?.({
    event: 'account.updated',
    recordId: account.accountId,
    recordVersion: account.version,
    document: () => account,
    previous: toAccount(current),
  });
  return account;
}

/** Name the clashing field: code and externalId are each unique. */
function checkUnique(deps: LedgerDeps, accountId: string, code: unknown, externalId: unknown): void {
  if (typeof code === 'string') {
    const other = deps.st.accountByCode.get(code.trim());
    if (other && other.account_id !== accountId) {
      throw new EngineError('ALREADY_EXISTS', `account code ${quote(code)} is already taken by ${other.account_id}`, {
        hint: 'Choose another code.',
      });
    }
  }
  if (typeof externalId === 'string') {
    const other = deps.st.accountByExternalId.get(externalId);
    if (other && other.account_id !== accountId) {
      throw new EngineError(
        'ALREADY_EXISTS',
        `externalId ${quote(externalId)} is already taken by account ${other.account_id}`,
        { hint: 'Choose another externalId.' },
      );
    }
  }
}

export function listAccounts(
  deps: LedgerDeps,
  args: { first: number; after?: string | null; status?: AccountStatus | null },
): Connection<Account> {
  const req = pageRequest<number>(args.first, args.after, deps.limits.pageSizeMax, 'number', 'accounts');
  const rows = args.status
    ? deps.st.accountsByStatusPage.all(args.status, req.after ?? 0, req.fetch)
    : deps.st.accountsPage.all(req.after ?? 0, req.fetch);
  return toConnection(rows, req, (r) => r.rowid, toAccount);
}

/** Every version of an account, newest first. */
export function accountHistory(
  deps: LedgerDeps,
  accountId: string,
  first: number,
  after?: string | null,
): Connection<Account> {
  const req = pageRequest<number>(first, after, deps.limits.pageSizeMax, 'number', 'account-history');
  const rows = deps.st.accountVersionsPage.all(accountId, req.after ?? Number.MAX_SAFE_INTEGER, req.fetch);
  return toConnection(
    rows,
    req,
    (r) => r.version,
    (r) => JSON.parse(r.document) as Account,
  );
}
