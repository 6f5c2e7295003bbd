import { EngineError, limitExceeded, notFound, quote } from '../errors.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { AccountRow, AccountSetMemberRow, BalanceRow } from '../storage/statements/ledger.js';
import { BALANCE_COLUMNS } from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import { DEFAULT_JOURNAL_ID, getJournal, insertUnique } from './journals.js';
import { toEntry } from './transaction-records.js';
import { checkMovedBalances, type Writer } from './velocity-gate.js';
import { deleteSetChains, entriesBelow } from './chains.js';
import {
  type AccountSet,
  type Direction,
  type Entry,
  jsonObjectText,
  optionalText,
  readJson,
  requiredText,
} from './records.js';

/**
 * Account sets group accounts and other sets of one journal and roll their balances up. A set is
 * stored as an account row (is_account_set = 1) so ids, codes and balance records are shared with
 * accounts; it never takes an entry directly.
 *
 * Invariant (kept by posting and by add/remove here): for every set, journal, currency and layer,
 * the set's balance equals the sum of its members' balances. Adding a member adds the member's
 * balances in the set's journal to the set and to every set above it; removing subtracts them.
 * A set's entries are those posted while the account was below it (Entry.parentAccountIds records
 * the sets of each entry when it was posted), so after a membership change the entries listed and
 * the balance can differ by what the member brought in or took out.
 */

export interface AccountSetInput {
  accountSetId: string;
  journalId?: string | null;
  code?: string | null;
  name: string;
  description?: string | null;
  normalBalanceType?: Direction | null;
  metadata?: unknown;
  accountSetIds?: string[] | null;
  config?: { enableConcurrentPosting?: boolean | null; upsert?: boolean | null } | null;
}

export type AccountSetUpdate = Partial<
  Pick<AccountSetInput, 'code' | 'name' | 'description' | 'normalBalanceType' | 'metadata'>
> & {
  config?: { enableConcurrentPosting?: boolean | null } | null;
};

export interface SetMember {
  memberType: 'ACCOUNT' | 'ACCOUNT_SET';
  memberId: string;
}

export function toAccountSet(row: AccountRow): AccountSet {
  return {
    accountSetId: row.account_id,
    journalId: row.journal_id!,
    code: row.code,
    name: row.name,
    description: row.description,
    normalBalanceType: row.normal_balance_type as Direction,
    metadata: readJson(row.metadata),
    config: { enableConcurrentPosting: row.enable_concurrent_posting === 1 },
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

export function findSetRow(deps: LedgerDeps, accountSetId: string): AccountRow {
  const row = deps.st.accountById.get(accountSetId);
  if (row?.is_account_set !== 1) {
    throw new EngineError(
      'NOT_FOUND',
      `account set ${quote(accountSetId)} does not exist${row ? ' (it is an account)' : ''}`,
      {
        hint: 'Create it with createAccountSet, or check the id.',
      },
    );
  }
  return row;
}

export function getAccountSet(deps: LedgerDeps, accountSetId: string): AccountSet {
  return toAccountSet(findSetRow(deps, accountSetId));
}

export function listAccountSets(deps: LedgerDeps, first: number, after?: string | null): Connection<AccountSet> {
  const req = pageRequest<number>(first, after, deps.limits.pageSizeMax, 'number', 'account-sets');
  return toConnection(deps.st.setsPage.all(req.after ?? 0, req.fetch), req, (r) => r.rowid, toAccountSet);
}

export function createAccountSet(deps: LedgerDeps, input: AccountSetInput): AccountSet {
  const existing = deps.st.accountById.get(input.accountSetId);
  if (existing) {
    if (input.config?.upsert && existing.is_account_set === 1) return toAccountSet(existing);
    throw new EngineError(
      'ALREADY_EXISTS',
      `${existing.is_account_set ? 'account set' : 'account'} ${quote(input.accountSetId)} already exists`,
      {
        hint: existing.is_account_set
          ? 'Use updateAccountSet to change it, or pass config: {upsert: true}.'
          : 'Accounts and account sets share one id space: choose another id.',
      },
    );
  }
  const journal = getJournal(deps, input.journalId ?? DEFAULT_JOURNAL_ID);
  const now = deps.clock.now().toISOString();
  // The code is unique among accounts and sets; left out, it is the set's id.
  const code = input.code == null ? input.accountSetId : requiredText(input.code, 'code', 128);
  const taken = deps.st.accountByCode.get(code);
  if (taken)
    throw new EngineError('ALREADY_EXISTS', `code ${quote(code)} is already taken by ${taken.account_id}`, {
      hint: 'Choose another code.',
    });
  const row: AccountRow = {
    account_id: input.accountSetId,
    code,
    name: requiredText(input.name, 'name'),
    external_id: null,
    description: optionalText(input.description, 'description'),
    status: 'ACTIVE',
    normal_balance_type: input.normalBalanceType ?? 'CREDIT',
    metadata: jsonObjectText(input.metadata, 'metadata', deps.limits.jsonBytesMax),
    version: 1,
    created: now,
    modified: now,
    is_account_set: 1,
    journal_id: journal.journalId,
    enable_concurrent_posting: input.config?.enableConcurrentPosting ? 1 : 0,
  };
  insertUnique(() => deps.st.insertAccount.run(row), `code ${quote(row.code)}`);
  const set = toAccountSet(row);
  deps.st.insertAccountVersion.run(row.account_id, 1, JSON.stringify(set));
  for (const parent of input.accountSetIds ?? [])
    addToAccountSet(deps, parent, { memberType: 'ACCOUNT_SET', memberId: set.accountSetId });
  return set;
}

export function updateAccountSet(deps: LedgerDeps, accountSetId: string, input: AccountSetUpdate): AccountSet {
  const current = findSetRow(deps, accountSetId);
  if (
    input.normalBalanceType != null &&
    input.normalBalanceType !== current.normal_balance_type &&
    deps.st.balancesByAccountPage.all(accountSetId, '', 1).length > 0
  ) {
    throw new EngineError(
      'BAD_REQUEST',
      `account set ${current.code} has balances; its normalBalanceType stays ${current.normal_balance_type}`,
      {
        hint: 'Changing it would flip the sign of every balance it reports. Create a new set instead.',
      },
    );
  }
  if (typeof input.code === 'string') {
    const other = deps.st.accountByCode.get(input.code.trim());
    if (other && other.account_id !== accountSetId)
      throw new EngineError('ALREADY_EXISTS', `code ${quote(input.code)} is already taken by ${other.account_id}`, {
        hint: 'Choose another code.',
      });
  }
  const row: AccountRow = {
    ...current,
    code: input.code == null ? current.code : requiredText(input.code, 'code', 128),
    name: input.name == null ? current.name : requiredText(input.name, 'name'),
    description: input.description === undefined ? current.description : optionalText(input.description, 'description'),
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
  insertUnique(() => deps.st.updateAccount.run(row), `code ${quote(row.code)}`);
  const set = toAccountSet(row);
  deps.st.insertAccountVersion.run(row.account_id, row.version, JSON.stringify(set));
  return set;
}

/**
 * Delete an empty set: it leaves the sets it belongs to, and its record, versions and balance
 * records go (entries that rolled up into it keep its id in parentAccountIds).
 * A set with members is refused (remove them first): its balances are theirs.
 */
export function deleteAccountSet(deps: LedgerDeps, accountSetId: string): AccountSet {
  const row = findSetRow(deps, accountSetId);
  if (deps.st.setMembersPage.all(accountSetId, '', 1).length > 0) {
    throw new EngineError('BAD_REQUEST', `account set ${row.code} has members`, {
      hint: 'Remove its members (removeFromAccountSet) first.',
    });
  }
  if (deps.vel.attachmentsOf.all(accountSetId).length > 0) {
    throw new EngineError('BAD_REQUEST', `account set ${row.code} has velocity controls attached`, {
      hint: 'Detach them (detachVelocityControl) first.',
    });
  }
  for (const parent of deps.st.setsOfMemberPage.all(accountSetId, '', deps.limits.accountSetAncestorsMax + 1)) {
    removeFromAccountSet(deps, parent.account_set_id, { memberType: 'ACCOUNT_SET', memberId: accountSetId });
  }
  deleteSetChains(deps, accountSetId);
  deps.st.deleteBalancesOf.run(accountSetId);
  deps.st.deleteAccountVersions.run(accountSetId);
  deps.st.deleteAccountRow.run(accountSetId);
  return toAccountSet(row);
}

/**
 * The sets above `accountId` that belong to `journalId`: every set its entries there roll up into.
 * Cached until set membership changes (account_set_members is a cached table).
 */
export function setsAbove(deps: LedgerDeps, accountId: string, journalId: string): string[] {
  return deps.cache.setsAbove.getIn(journalId, accountId, () => {
    const out: string[] = [];
    const above = deps.st.ancestorsOf.all(accountId);
    // addToAccountSet keeps this bound for the member it adds; sets nested above other sets can
    // still reach past it through a shared descendant, so the posting checks it too.
    if (above.length > deps.limits.accountSetAncestorsMax) {
      throw limitExceeded(
        'accountSetAncestorsMax',
        deps.limits.accountSetAncestorsMax,
        above.length,
        `account ${quote(accountId)} rolls up into ${above.length} sets; accountSetAncestorsMax is ${deps.limits.accountSetAncestorsMax}`,
        {
          hint: 'Each posting updates every set above its accounts: remove the account (or a set above it) from some sets.',
        },
      );
    }
    for (const { id } of above) {
      if (deps.st.accountById.get(id)?.journal_id === journalId) out.push(id);
    }
    return out;
  })!;
}

/** Accounts below a set member whose sets addToAccountSet counts before it adds the member. */
const ACCOUNTS_CHECKED = 1000;

/** `writer`: who changes the membership, as the posting gate needs to know (none: the engine itself). */
export function addToAccountSet(
  deps: LedgerDeps,
  accountSetId: string,
  member: SetMember,
  writer?: Writer,
): AccountSet {
  const set = findSetRow(deps, accountSetId);
  const memberRow = deps.st.accountById.get(member?.memberId);
  const type = member?.memberType;
  if (type !== 'ACCOUNT' && type !== 'ACCOUNT_SET') {
    throw new EngineError('BAD_REQUEST', `memberType ${quote(type)} is not ACCOUNT or ACCOUNT_SET`);
  }
  if (!memberRow || (memberRow.is_account_set === 1) !== (type === 'ACCOUNT_SET')) {
    throw new EngineError(
      'NOT_FOUND',
      `${type === 'ACCOUNT' ? 'account' : 'account set'} ${quote(member.memberId)} does not exist${memberRow ? ` (it is an ${memberRow.is_account_set ? 'account set' : 'account'})` : ''}`,
      {
        hint: `Check memberType and memberId.`,
      },
    );
  }
  if (deps.st.setMember.get(accountSetId, member.memberId)) {
    throw new EngineError('ALREADY_EXISTS', `${quote(member.memberId)} is already a member of account set ${set.code}`);
  }
  const ancestors = deps.st.ancestorsOf.all(accountSetId);
  const above = [accountSetId, ...ancestors.map((a) => a.id)];
  if (type === 'ACCOUNT_SET') {
    if (memberRow.journal_id !== set.journal_id) {
      throw new EngineError(
        'BAD_REQUEST',
        `account set ${memberRow.code} is in journal ${memberRow.journal_id}, account set ${set.code} in ${set.journal_id}`,
        {
          hint: 'A set contains only sets of its own journal.',
        },
      );
    }
    if (above.includes(member.memberId)) {
      throw new EngineError('BAD_REQUEST', `adding account set ${memberRow.code} to ${set.code} would make a cycle`, {
        hint: 'A set cannot contain itself, directly or through its members.',
      });
    }
    // Sets in the longest chain through the new link: those above the set, the set, the member, those below it.
    const depth =
      ancestors.reduce((m, a) => Math.max(m, a.depth), 0) + 2 + (deps.st.depthBelow.get(member.memberId)?.depth ?? 0);
    if (depth > deps.limits.accountSetDepthMax) {
      throw limitExceeded(
        'accountSetDepthMax',
        deps.limits.accountSetDepthMax,
        depth,
        `adding account set ${memberRow.code} to ${set.code} would nest sets ${depth} deep; accountSetDepthMax is ${deps.limits.accountSetDepthMax}`,
        {
          hint: 'Flatten the hierarchy.',
        },
      );
    }
  }
  // Every account below the new member would roll up into these sets too: bound what one posting
  // pays. The accounts below a set member are checked one by one (the first ACCOUNTS_CHECKED of
  // them; past that, setsAbove refuses a posting whose account reaches past the bound).
  const below = type === 'ACCOUNT' ? [member.memberId] : deps.st.accountsBelow.all(member.memberId, ACCOUNTS_CHECKED);
  for (const accountId of [member.memberId, ...below]) {
    const setsAfter = new Set([...above, ...deps.st.ancestorsOf.all(accountId).map((a) => a.id)]);
    if (setsAfter.size > deps.limits.accountSetAncestorsMax) {
      throw limitExceeded(
        'accountSetAncestorsMax',
        deps.limits.accountSetAncestorsMax,
        setsAfter.size,
        `${quote(accountId)} would roll up into ${setsAfter.size} sets; accountSetAncestorsMax is ${deps.limits.accountSetAncestorsMax}`,
        {
          hint: 'Each posting updates every set above its accounts: use fewer, flatter sets.',
        },
      );
    }
  }
  const now = deps.clock.now().toISOString();
  deps.st.insertSetMember.run(accountSetId, member.memberId, type, now);
  const moved = moveBalances(deps, member.memberId, set.journal_id!, above, 1, now);
  checkMovedBalances(deps, above, set.journal_id!, moved, 1, writer);
  return toAccountSet(set);
}

export function removeFromAccountSet(
  deps: LedgerDeps,
  accountSetId: string,
  member: SetMember,
  writer?: Writer,
): AccountSet {
  const set = findSetRow(deps, accountSetId);
  const row = deps.st.setMember.get(accountSetId, member?.memberId);
  if (!row || (member.memberType != null && row.member_type !== member.memberType)) {
    throw new EngineError(
      'NOT_FOUND',
      `${quote(member?.memberId)} is not a${member?.memberType === 'ACCOUNT_SET' ? 'n account set' : 'n account'} member of account set ${set.code}`,
    );
  }
  const above = [accountSetId, ...deps.st.ancestorsOf.all(accountSetId).map((a) => a.id)];
  const now = deps.clock.now().toISOString();
  deps.st.deleteSetMember.run(accountSetId, member.memberId);
  const moved = moveBalances(deps, member.memberId, set.journal_id!, above, -1, now);
  checkMovedBalances(deps, above, set.journal_id!, moved, -1, writer);
  return toAccountSet(set);
}

/** Add (sign 1) or subtract (sign -1) a member's balances in `journalId` to each set of `sets`; returns those balances. */
function moveBalances(
  deps: LedgerDeps,
  memberId: string,
  journalId: string,
  sets: readonly string[],
  sign: 1 | -1,
  now: string,
): BalanceRow[] {
  const balances: BalanceRow[] = deps.st.balancesOfJournal.all(memberId, journalId);
  for (const balance of balances) {
    const amount = (text: string) =>
      sign === 1 || text === '0' ? text : text.startsWith('-') ? text.slice(1) : `-${text}`;
    for (const setId of sets) {
      const values: Record<string, string> = {};
      for (const column of BALANCE_COLUMNS) values[column] = amount(balance[column]);
      const row = {
        account_id: setId,
        journal_id: journalId,
        currency: balance.currency,
        ...values,
        entry_id: balance.entry_id,
        modified: now,
      };
      if (!deps.st.updateBalance.get(row)) deps.st.insertBalance.get(row);
    }
  }
  return balances;
}

export function membersOf(
  deps: LedgerDeps,
  accountSetId: string,
  first: number,
  after?: string | null,
): Connection<AccountSetMemberRow> {
  findSetRow(deps, accountSetId);
  const req = pageRequest<string>(first, after, deps.limits.pageSizeMax, 'string', 'set-members');
  return toConnection(
    deps.st.setMembersPage.all(accountSetId, req.after ?? '', req.fetch),
    req,
    (r) => r.member_id,
    (r) => r,
  );
}

/** The sets `memberId` belongs to directly. */
export function setsOf(
  deps: LedgerDeps,
  memberId: string,
  first: number,
  after?: string | null,
): Connection<AccountSet> {
  const req = pageRequest<string>(first, after, deps.limits.pageSizeMax, 'string', 'member-sets');
  const rows = deps.st.setsOfMemberPage.all(memberId, req.after ?? '', req.fetch);
  return toConnection(
    rows,
    req,
    (r) => r.account_set_id,
    (r) => getAccountSet(deps, r.account_set_id),
  );
}

/** The entries that rolled up into a set, newest first, optionally of one currency (its chains through the entries). */
export function setEntries(
  deps: LedgerDeps,
  accountSetId: string,
  first: number,
  after?: string | null,
  currency?: string | null,
): Connection<Entry> {
  findSetRow(deps, accountSetId);
  const req = pageRequest<number>(first, after, deps.limits.pageSizeMax, 'number', 'set-entries');
  const rows = entriesBelow(deps, { id: accountSetId, isSet: true }, req.after ?? Number.MAX_SAFE_INTEGER, req.fetch, {
    currency,
  });
  return toConnection(rows, req, (r) => r.seq, toEntry);
}

/** What a balance belongs to: an account, or a set (whose balances are in its own journal by default). */
export interface BalanceOwner {
  id: string;
  normalBalanceType: Direction;
  /** The set's journal; null for an account. */
  journalId: string | null;
  isSet: boolean;
}

export function balanceOwner(deps: LedgerDeps, id: string): BalanceOwner {
  const row = deps.st.accountById.get(id);
  if (!row) throw notFound('account', id, 'Create it with createAccount, or check the id.');
  return {
    id,
    normalBalanceType: row.normal_balance_type as Direction,
    journalId: row.journal_id,
    isSet: row.is_account_set === 1,
  };
}
