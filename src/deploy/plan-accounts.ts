import { type DeployedState, type Flat, mergeFields, shown } from './drift.js';
import {
  count,
  detailOf,
  hasWrites,
  mergedMetadata,
  metadataFields,
  plainWrites,
  recordOf,
  relabel,
} from './plan-common.js';
import type { PlanItem, Step } from './plan-item.js';
import { ACCOUNT_SETS, type AccountSetFile, ProjectError } from './project.js';
import { current, everyPage, PAGE_INFO } from './reads.js';
import type { Target } from './target.js';

/*
 * The plan of accounts (accounts.json) and account sets (account-sets.json): each record's fields
 * merged with what it holds now, and a set's members added and removed, member sets first.
 */

const ACCOUNT_FIELDS = ['code', 'name', 'description', 'externalId', 'status', 'normalBalanceType'] as const;
/** What an account holds where nothing set it (AccountInput's defaults). */
const ACCOUNT_DEFAULTS: Flat = {
  status: 'ACTIVE',
  normalBalanceType: 'CREDIT',
  'config.enableConcurrentPosting': false,
};

/** An account as fields: every field of one read from the target, or those an accounts.json entry declares. */
function accountFields(account: Record<string, any>, declaredOnly: boolean): Flat {
  const fields: Flat = {};
  for (const key of ACCOUNT_FIELDS)
    if (!declaredOnly || Object.hasOwn(account, key)) fields[key] = account[key] ?? null;
  const config = account.config;
  if (config && typeof config === 'object' && (!declaredOnly || Object.hasOwn(config, 'enableConcurrentPosting'))) {
    fields['config.enableConcurrentPosting'] = config.enableConcurrentPosting ?? false;
  }
  return metadataFields(account.metadata, fields, 'accounts.json', () => `account ${shown(account.code)}`);
}

function accountUpdate(writes: Flat, now: Record<string, any>): Record<string, unknown> {
  const input: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(plainWrites(writes))) {
    if (field === 'config.enableConcurrentPosting') input.config = { enableConcurrentPosting: value };
    else input[field] = value;
  }
  const metadata = mergedMetadata(now.metadata, writes);
  if (metadata !== undefined) input.metadata = metadata;
  return input;
}

export async function planAccount(
  target: Target,
  account: Record<string, any>,
  base: DeployedState | null,
  overwrite: boolean,
): Promise<PlanItem> {
  const id = String(account.accountId).toLowerCase();
  const file = accountFields(account, true);
  const item = { kind: 'account' as const, name: String(account.code), file: 'accounts.json' };
  const existing = await current(
    target,
    'query($id: UUID!) { account(id: $id) { code name description externalId status normalBalanceType metadata config { enableConcurrentPosting } version } }',
    { id: account.accountId },
    (d) => d.account,
  );
  if (!existing) {
    return {
      ...item,
      change: 'create',
      field: 'createAccount(input: $VAR) { accountId }',
      variableType: 'AccountInput!',
      variable: account,
      record: recordOf('ACCOUNT', id, base, { fields: file }),
    };
  }
  const merge = mergeFields(file, accountFields(existing, false), base, { overwrite, defaults: ACCOUNT_DEFAULTS });
  const drift = relabel(merge.drift, new Map());
  if (!hasWrites(merge))
    return { ...item, change: 'unchanged', drift, record: recordOf('ACCOUNT', id, base, merge.state) };
  return {
    ...item,
    change: 'update',
    detail: detailOf(merge.writes),
    drift,
    field: 'updateAccount(id: $ID, input: $VAR) { accountId }',
    id: { type: 'UUID!', value: account.accountId },
    variableType: 'AccountUpdateInput!',
    variable: accountUpdate(merge.writes, existing),
    record: recordOf('ACCOUNT', id, base, merge.state, existing.version),
  };
}

/** Sets after the sets of the file they contain, so each member set exists when it is added. */
export function setsInOrder(sets: AccountSetFile[]): AccountSetFile[] {
  const byId = new Map(sets.map((s) => [s.accountSetId, s]));
  const ordered: AccountSetFile[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (set: AccountSetFile) => {
    if (state.get(set.accountSetId) === 'done') return;
    if (state.get(set.accountSetId) === 'visiting')
      throw new ProjectError(`account set ${set.code} contains itself through its member sets`, ACCOUNT_SETS);
    state.set(set.accountSetId, 'visiting');
    for (const member of set.members) {
      const dep = member.memberType === 'ACCOUNT_SET' ? byId.get(member.memberId) : undefined;
      if (dep) visit(dep);
    }
    state.set(set.accountSetId, 'done');
    ordered.push(set);
  };
  sets.forEach(visit);
  return ordered;
}

const MEMBER_STEP = (
  verb: 'addToAccountSet' | 'removeFromAccountSet',
  setId: string,
  member: { memberType: string; memberId: string },
): Step => ({
  field: `${verb}(id: $SET, member: $MEMBER) { accountSetId }`,
  args: {
    SET: { type: 'UUID!', value: setId },
    MEMBER: { type: 'AccountSetMemberInput!', value: { memberType: member.memberType, memberId: member.memberId } },
  },
});

/** A set as fields: its own, its metadata per key, and `members.<id>` (the member's type) for each direct member. */
function setFields(
  set: Record<string, any>,
  members: Array<{ memberType: string; memberId: string }>,
  declaredOnly: boolean,
): Flat {
  const fields: Flat = { code: set.code, name: set.name, normalBalanceType: set.normalBalanceType };
  // The file's description is null when it has none: a set file declares it only by giving one.
  if (!declaredOnly || set.description !== null) fields.description = set.description ?? null;
  metadataFields(set.metadata, fields, ACCOUNT_SETS, () => `account set ${set.code}`);
  for (const m of members) fields[`members.${m.memberId}`] = m.memberType;
  return fields;
}

const inMembers = (field: string) => (field.startsWith('members.') ? 'members' : null);

export async function planAccountSet(
  target: Target,
  set: AccountSetFile,
  base: DeployedState | null,
  overwrite: boolean,
  names: Map<string, string>,
): Promise<PlanItem> {
  const existing = await current(
    target,
    'query($id: UUID!) { accountSet(id: $id) { code name description normalBalanceType metadata journalId version } }',
    { id: set.accountSetId },
    (d) => d.accountSet,
  );
  const desired = {
    code: set.code,
    name: set.name,
    description: set.description,
    normalBalanceType: set.normalBalanceType,
    metadata: set.metadata,
  };
  const item = { kind: 'account set' as const, name: set.code, file: ACCOUNT_SETS };
  const file = setFields(set, set.members, true);
  if (!existing) {
    return {
      ...item,
      change: 'create',
      detail: count(set.members.length, 'member'),
      field: 'createAccountSet(input: $VAR) { accountSetId }',
      variableType: 'AccountSetInput!',
      variable: { accountSetId: set.accountSetId, journalId: set.journalId, ...desired },
      steps: set.members.map((m) => MEMBER_STEP('addToAccountSet', set.accountSetId, m)),
      record: recordOf('ACCOUNT_SET', set.accountSetId, base, { fields: file }),
    };
  }
  const { journalId, version } = existing;
  if (set.journalId !== null && set.journalId !== journalId) {
    throw new ProjectError(
      `account set ${set.code}: journalId cannot change (it is in journal ${journalId}); create a new set for journal ${set.journalId}`,
      ACCOUNT_SETS,
    );
  }
  const members =
    (await everyPage(
      target,
      `query($id: UUID!, $after: String) { accountSet(id: $id) { members(first: 500, after: $after) {
    nodes { __typename ... on Account { accountId } ... on AccountSet { accountSetId } } ${PAGE_INFO} } } }`,
      { id: set.accountSetId },
      (d) => d.accountSet.members,
    )) ?? [];
  const haveMembers = members.map((n: any) =>
    n.__typename === 'AccountSet'
      ? { memberType: 'ACCOUNT_SET', memberId: n.accountSetId }
      : { memberType: 'ACCOUNT', memberId: n.accountId },
  );
  const now = setFields(existing, haveMembers, false);
  const merge = mergeFields(file, now, base, {
    overwrite,
    defaults: { normalBalanceType: 'CREDIT' },
    group: inMembers,
  });
  const drift = relabel(merge.drift, names);
  if (!hasWrites(merge))
    return {
      ...item,
      change: 'unchanged',
      drift,
      record: recordOf('ACCOUNT_SET', set.accountSetId, base, merge.state),
    };
  const input: Record<string, unknown> = plainWrites(merge.writes, ['members']);
  const metadata = mergedMetadata(existing.metadata, merge.writes);
  if (metadata !== undefined) input.metadata = metadata;
  const memberWrites = Object.entries(merge.writes)
    .filter(([f]) => f.startsWith('members.'))
    .map(([f, type]) => ({
      memberId: f.slice('members.'.length),
      memberType: (type ?? now[f]) as string,
      add: type !== null,
    }));
  return {
    ...item,
    change: 'update',
    detail: detailOf(merge.writes, { prefix: 'members', noun: 'member' }),
    drift,
    ...(Object.keys(input).length
      ? {
          field: 'updateAccountSet(id: $ID, input: $VAR) { accountSetId }',
          id: { type: 'UUID!' as const, value: set.accountSetId },
          variableType: 'AccountSetUpdateInput!',
          variable: input,
        }
      : {}),
    // Removed first, then added, as a set's members are matched.
    steps: [
      ...memberWrites.filter((m) => !m.add).map((m) => MEMBER_STEP('removeFromAccountSet', set.accountSetId, m)),
      ...memberWrites.filter((m) => m.add).map((m) => MEMBER_STEP('addToAccountSet', set.accountSetId, m)),
    ],
    record: recordOf('ACCOUNT_SET', set.accountSetId, base, merge.state, version),
  };
}
