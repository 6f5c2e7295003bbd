import { DEFAULT_EXECUTION } from '../actions/actions.js';
import { canonicalJson, isUuid } from '../ids.js';
import { ACCOUNT_SETS, type AccountSetFile, type Project, ProjectError, type SkillFile, type ToolFile, VELOCITY } from './project.js';
import type { GraphqlResponse, Target } from './target.js';

/** `remove` undoes what the project no longer lists (a velocity control's attachment). */
export type Change = 'create' | 'update' | 'unchanged' | 'remove';

export interface PlanItem {
  kind: 'account' | 'account set' | 'velocity limit' | 'velocity control' | 'velocity attachment' | 'tran code' | 'skill' | 'tool' | 'trigger' | 'client';
  name: string;
  change: Change;
  /** For versioned things: the version the deploy makes, or keeps. */
  version?: number;
  /** What else changes with it, for the plan: "2 members", "+1 member, -1 limit". */
  detail?: string;
  /**
   * The mutation that applies it (alias-free field text, `$VAR` for its input and `$ID` for the id
   * it names) and their variables: values from project files never become query text.
   */
  field?: string;
  variableType?: string;
  variable?: unknown;
  id?: { type: 'UUID!' | 'String!'; value: unknown };
  /**
   * Further mutations of the same change, run after `field` (or alone when there is none): a set's
   * members, a control's limits. `$NAME` in a step's field stands for args.NAME.
   */
  steps?: Step[];
  /** Where it comes from, for error messages. */
  file: string;
}

export interface Step {
  field: string;
  args: Record<string, { type: string; value: unknown }>;
}

export interface DeployResult {
  plan: PlanItem[];
  applied: boolean;
  /** API keys of clients created by this deploy (shown once). */
  keys: Record<string, string>;
}

export class DeployError extends Error {
  constructor(message: string, readonly plan: PlanItem[] = []) {
    super(message);
  }
}

/** Render a plan the way `tally deploy` prints it. */
export function formatPlan(plan: PlanItem[]): string {
  return plan
    .map((item) => {
      const what = `${item.kind} ${item.name}`;
      const detail = item.detail ? ` (${item.detail})` : '';
      if (item.change === 'create') return `+ create ${what}${item.version ? ` (version ${item.version})` : detail}`;
      if (item.change === 'update') return item.version ? `~ new version ${item.version} of ${what}` : `~ update ${what}${detail}`;
      if (item.change === 'remove') return `- remove ${what}`;
      return `= ${what}${item.version ? ` (version ${item.version})` : ''} unchanged`;
    })
    .join('\n');
}

async function query(target: Target, text: string, variables: Record<string, unknown>): Promise<GraphqlResponse> {
  return target.request(text, variables);
}

/** The current state of one thing on the target, or null when it does not exist. */
async function current(target: Target, text: string, variables: Record<string, unknown>, pick: (data: any) => any): Promise<any | null> {
  const result = await query(target, text, variables);
  if (result.errors?.length) {
    if (result.errors[0]!.extensions?.code === 'NOT_FOUND') return null;
    const first = result.errors[0]!;
    const code = typeof first.extensions?.code === 'string' ? ` [${first.extensions.code}]` : '';
    const hint = typeof first.extensions?.hint === 'string' ? `\n${first.extensions.hint}` : '';
    throw new DeployError(`reading the target failed: ${first.message}${code}${hint}`);
  }
  return pick(result.data);
}

const same = (a: unknown, b: unknown) => canonicalJson(a) === canonicalJson(b);

function toolDesired(tool: ToolFile) {
  const m = tool.manifest;
  const programless = m.kind === 'model' || m.kind === 'agent';
  return {
    config: programless ? m.config : { runtime: 'javascript', src: tool.src },
    tool: {
      name: tool.name,
      title: m.title ?? null,
      description: m.description ?? '',
      aliases: m.aliases ?? [],
      metadata: m.metadata ?? null,
      inputSchema: m.inputSchema ?? { type: 'object' },
      outputSchema: m.outputSchema ?? null,
    },
    tools: (m.tools ?? []).map((r: any) => ({ name: r.name, version: r.version ?? null, input: r.input ?? null, approval: r.approval ? { when: r.approval.when ?? null, timeoutMs: r.approval.timeoutMs ?? null } : null })),
    skills: (m.skills ?? []).map((r: any) => ({ name: r.name, version: r.version ?? null })),
    hooks: m.hooks ? { before: hookOf(m.hooks.before), after: hookOf(m.hooks.after) } : null,
    policies: (m.policies ?? []).map((p: any) => ({ effect: p.effect, actions: p.actions, resources: p.resources, assertions: p.assertions ?? null })),
    execution: {
      maxAttempts: m.execution?.maxAttempts ?? DEFAULT_EXECUTION.maxAttempts,
      backoff: { ...DEFAULT_EXECUTION.backoff, ...(m.execution?.backoff ?? {}) },
      timeoutMs: m.execution?.timeoutMs ?? null,
      retryIf: m.execution?.retryIf ?? null,
      cacheTtlMs: m.execution?.cacheTtlMs ?? null,
    },
  };
}

const hookOf = (ref: any) => (ref ? { name: ref.name, version: ref.version ?? null } : null);

type Versioned = { kind: 'tool'; tool: ToolFile } | { kind: 'skill'; skill: SkillFile };

/**
 * Order tools and skills so that each comes after what it needs from the project: a tool after the
 * tools it references and the skills it declares, a skill after the tools it lists. Tools keep
 * their order otherwise; a skill no tool declares comes last.
 */
function byReferences(tools: ToolFile[], skills: SkillFile[] = []): Versioned[] {
  const toolsByName = new Map(tools.map((t) => [t.name, t]));
  const skillsByName = new Map(skills.map((k) => [k.name, k]));
  const ordered: Versioned[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (item: Versioned) => {
    const key = item.kind === 'tool' ? `tool:${item.tool.name}` : `skill:${item.skill.name}`;
    if (state.get(key) === 'done') return;
    if (state.get(key) === 'visiting') {
      throw new ProjectError(item.kind === 'tool' ? 'tools (and the skills they declare) reference each other in a cycle' : 'a skill lists a tool that declares it, directly or through other tools', item.kind === 'tool' ? item.tool.manifestPath : item.skill.path);
    }
    state.set(key, 'visiting');
    if (item.kind === 'tool') {
      for (const ref of item.tool.manifest.skills ?? []) {
        const dep = skillsByName.get(ref?.name);
        if (dep) visit({ kind: 'skill', skill: dep });
      }
      for (const ref of [...(item.tool.manifest.tools ?? []), item.tool.manifest.hooks?.before, item.tool.manifest.hooks?.after]) {
        const dep = toolsByName.get(ref?.name);
        if (dep) visit({ kind: 'tool', tool: dep });
      }
    } else {
      for (const name of item.skill.tools) {
        const dep = toolsByName.get(name);
        if (dep) visit({ kind: 'tool', tool: dep });
      }
    }
    state.set(key, 'done');
    ordered.push(item);
  };
  tools.forEach((tool) => visit({ kind: 'tool', tool }));
  skills.forEach((skill) => visit({ kind: 'skill', skill }));
  return ordered;
}

async function planSkill(target: Target, skill: SkillFile): Promise<PlanItem> {
  const existing = await current(target, 'query($name: String!) { actions { skill(name: $name) { skillId version description body tools } } }', { name: skill.name }, (d) => d.actions.skill);
  const desired = { description: skill.description, body: skill.body, tools: skill.tools };
  if (!existing) {
    if (!isUuid(skill.skillId)) throw new ProjectError(`needs a "skillId:" that is a UUID in its front matter to create the skill, got ${JSON.stringify(skill.skillId)}`, skill.path);
    return { kind: 'skill', name: skill.name, change: 'create', version: 1, field: 'createSkill(id: $ID, input: $VAR) { version }', id: { type: 'UUID!', value: skill.skillId }, variableType: 'SkillInput!', variable: { name: skill.name, ...desired }, file: skill.path };
  }
  const { skillId, version, ...have } = existing;
  if (same(have, desired)) return { kind: 'skill', name: skill.name, change: 'unchanged', version, file: skill.path };
  return { kind: 'skill', name: skill.name, change: 'update', version: version + 1, field: 'updateSkill(id: $ID, input: $VAR) { version }', id: { type: 'UUID!', value: skillId }, variableType: 'SkillInput!', variable: desired, file: skill.path };
}

const ACTION_FIELDS = `version config tool { name title description aliases metadata inputSchema outputSchema } tools { name version input approval { when timeoutMs } } skills { name version } hooks { before { name version } after { name version } }
  policies { effect actions resources assertions } execution { maxAttempts backoff { initialMs multiplier maxMs } timeoutMs retryIf cacheTtlMs }`;
const TRAN_CODE_FIELDS = `tranCodeId version description params { name type default description } vars metadata
  transaction { effective journalId correlationId externalId description metadata }
  entries { accountId units currency direction entryType layer description metadata condition }`;

/** Compare the project with the target and list what a deploy would do. Reads only. */
export async function planDeploy(project: Project, target: Target, onProgress?: (done: number, total: number) => void): Promise<PlanItem[]> {
  const plan: PlanItem[] = [];
  const attachments = project.velocity.controls.reduce((n, c) => n + c.attach.length, 0);
  const total = project.accounts.length + project.accountSets.length + project.velocity.limits.length + project.velocity.controls.length + attachments
    + project.tranCodes.length + project.tools.length + project.skills.length + project.triggers.length + project.clients.length;
  let done = 0;
  const tick = () => onProgress?.(++done, total);

  for (const account of project.accounts) {
    const existing = await current(target, 'query($id: UUID!) { account(id: $id) { code name description externalId normalBalanceType metadata } }', { id: account.accountId }, (d) => d.account);
    const desired = { code: account.code, name: account.name, description: account.description ?? null, externalId: account.externalId ?? null, normalBalanceType: account.normalBalanceType ?? 'CREDIT', metadata: account.metadata ?? null };
    if (!existing) plan.push({ kind: 'account', name: account.code, change: 'create', field: 'createAccount(input: $VAR) { accountId }', variableType: 'AccountInput!', variable: account, file: 'accounts.json' });
    else if (same(existing, desired)) plan.push({ kind: 'account', name: account.code, change: 'unchanged', file: 'accounts.json' });
    else {
      const { accountId, ...update } = account;
      plan.push({ kind: 'account', name: account.code, change: 'update', field: 'updateAccount(id: $ID, input: $VAR) { accountId }', id: { type: 'UUID!', value: accountId }, variableType: 'AccountUpdateInput!', variable: update, file: 'accounts.json' });
    }
    tick();
  }

  for (const set of setsInOrder(project.accountSets)) {
    plan.push(await planAccountSet(target, set));
    tick();
  }
  await planVelocity(project, target, plan, tick);

  for (const { path, definition } of project.tranCodes) {
    const existing = await current(target, `query($code: String!) { tranCode(code: $code) { ${TRAN_CODE_FIELDS} } }`, { code: definition.code }, (d) => d.tranCode);
    if (!existing) {
      plan.push({ kind: 'tran code', name: definition.code, change: 'create', version: 1, field: 'createTranCode(input: $VAR) { version }', variableType: 'TranCodeInput!', variable: definition, file: path });
    } else {
      const normalized = normalizeTranCode(definition);
      const { tranCodeId, version, ...have } = existing;
      if (same(have, normalized)) plan.push({ kind: 'tran code', name: definition.code, change: 'unchanged', version, file: path });
      else {
        const { tranCodeId: _id, code: _code, status: _status, ...update } = definition;
        plan.push({ kind: 'tran code', name: definition.code, change: 'update', version: version + 1, field: 'updateTranCode(id: $ID, input: $VAR) { version }', id: { type: 'UUID!', value: tranCodeId }, variableType: 'TranCodeUpdateInput!', variable: update, file: path });
      }
    }
    tick();
  }

  for (const item of byReferences(project.tools, project.skills)) {
    if (item.kind === 'skill') {
      plan.push(await planSkill(target, item.skill));
      tick();
      continue;
    }
    const { tool } = item;
    const existing = await current(target, `query($name: String!) { actions { action(name: $name) { actionId ${ACTION_FIELDS} } } }`, { name: tool.name }, (d) => d.actions.action);
    const desired = toolDesired(tool);
    if (!existing && !isUuid(tool.manifest.actionId)) throw new ProjectError(`needs an "actionId" that is a UUID to create the tool, got ${JSON.stringify(tool.manifest.actionId ?? null)}`, tool.manifestPath);
    if (!existing) {
      plan.push({ kind: 'tool', name: tool.name, change: 'create', version: 1, field: 'createAction(id: $ID, input: $VAR) { version }', id: { type: 'UUID!', value: tool.manifest.actionId }, variableType: 'ActionInput!', variable: { name: tool.name, kind: tool.manifest.kind === 'model' || tool.manifest.kind === 'agent' ? tool.manifest.kind : 'tool', ...desired }, file: tool.programPath });
    } else {
      const { actionId, version, ...have } = existing;
      if (same(have, desired)) plan.push({ kind: 'tool', name: tool.name, change: 'unchanged', version, file: tool.programPath });
      else plan.push({ kind: 'tool', name: tool.name, change: 'update', version: version + 1, field: 'updateAction(id: $ID, input: $VAR) { version }', id: { type: 'UUID!', value: actionId }, variableType: 'ActionInput!', variable: desired, file: tool.programPath });
    }
    tick();
  }

  for (const { path, definition } of project.triggers) {
    const existing = await current(target, 'query($id: UUID!) { actions { trigger(id: $id) { name on filter action { name version } input status } } }', { id: definition.triggerId }, (d) => d.actions.trigger);
    const desired = { name: definition.name, on: definition.on, filter: definition.filter ?? null, action: { name: definition.action?.name, version: definition.action?.version ?? null }, input: definition.input ?? null, status: definition.status ?? 'ACTIVE' };
    if (!existing) plan.push({ kind: 'trigger', name: definition.name, change: 'create', field: 'createTrigger(input: $VAR) { triggerId }', variableType: 'TriggerInput!', variable: definition, file: path });
    else if (same(existing, desired)) plan.push({ kind: 'trigger', name: definition.name, change: 'unchanged', file: path });
    else {
      const { triggerId, ...update } = definition;
      plan.push({ kind: 'trigger', name: definition.name, change: 'update', field: 'updateTrigger(id: $ID, input: $VAR) { triggerId }', id: { type: 'UUID!', value: triggerId }, variableType: 'TriggerUpdateInput!', variable: update, file: path });
    }
    tick();
  }

  for (const client of project.clients) {
    const existing = await current(target, 'query($p: String!) { auth { client(principal: $p) { name policies { effect actions resources assertions } } } }', { p: client.principal }, (d) => d.auth.client);
    const desired = { name: client.name, policies: (client.policies ?? []).map((p: any) => ({ effect: p.effect, actions: p.actions, resources: p.resources, assertions: p.assertions ?? null })) };
    if (!existing) plan.push({ kind: 'client', name: client.principal, change: 'create', field: 'createClient(input: $VAR) { apiKey client { principal } }', variableType: 'ClientInput!', variable: client, file: 'clients.json' });
    else if (same(existing, desired)) plan.push({ kind: 'client', name: client.principal, change: 'unchanged', file: 'clients.json' });
    else plan.push({ kind: 'client', name: client.principal, change: 'update', field: 'updateClient(principal: $ID, input: $VAR) { client { principal } }', id: { type: 'String!', value: client.principal }, variableType: 'ClientUpdateInput!', variable: { name: client.name, policies: client.policies ?? [] }, file: 'clients.json' });
    tick();
  }
  return plan;
}

const PAGE_INFO = 'pageInfo { hasNextPage endCursor }';

/** Every node of a connection, page by page: `text` takes $after and puts `pageInfo` in `pick`'s result. */
async function everyPage(target: Target, text: string, variables: Record<string, unknown>, pick: (data: any) => any): Promise<any[] | null> {
  const nodes: any[] = [];
  let after: string | null = null;
  for (;;) {
    const connection = await current(target, text, { ...variables, after }, pick);
    if (!connection) return null;
    nodes.push(...connection.nodes);
    if (!connection.pageInfo.hasNextPage) return nodes;
    after = connection.pageInfo.endCursor;
  }
}

/** Sets after the sets of the file they contain, so each member set exists when it is added. */
function setsInOrder(sets: AccountSetFile[]): AccountSetFile[] {
  const byId = new Map(sets.map((s) => [s.accountSetId, s]));
  const ordered: AccountSetFile[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (set: AccountSetFile) => {
    if (state.get(set.accountSetId) === 'done') return;
    if (state.get(set.accountSetId) === 'visiting') throw new ProjectError(`account set ${set.code} contains itself through its member sets`, ACCOUNT_SETS);
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

const count = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;
const memberKey = (m: { memberType: string; memberId: string }) => `${m.memberType} ${m.memberId}`;
const MEMBER_STEP = (verb: 'addToAccountSet' | 'removeFromAccountSet', setId: string, member: { memberType: string; memberId: string }): Step => ({
  field: `${verb}(id: $SET, member: $MEMBER) { accountSetId }`,
  args: { SET: { type: 'UUID!', value: setId }, MEMBER: { type: 'AccountSetMemberInput!', value: { memberType: member.memberType, memberId: member.memberId } } },
});

async function planAccountSet(target: Target, set: AccountSetFile): Promise<PlanItem> {
  const existing = await current(target, 'query($id: UUID!) { accountSet(id: $id) { code name description normalBalanceType metadata journalId } }', { id: set.accountSetId }, (d) => d.accountSet);
  const desired = { code: set.code, name: set.name, description: set.description, normalBalanceType: set.normalBalanceType, metadata: set.metadata };
  const base = { kind: 'account set' as const, name: set.code, file: ACCOUNT_SETS };
  if (!existing) {
    return {
      ...base, change: 'create', detail: count(set.members.length, 'member'),
      field: 'createAccountSet(input: $VAR) { accountSetId }', variableType: 'AccountSetInput!', variable: { accountSetId: set.accountSetId, journalId: set.journalId, ...desired },
      steps: set.members.map((m) => MEMBER_STEP('addToAccountSet', set.accountSetId, m)),
    };
  }
  const { journalId, ...have } = existing;
  if (set.journalId !== null && set.journalId !== journalId) {
    throw new ProjectError(`account set ${set.code}: journalId cannot change (it is in journal ${journalId}); create a new set for journal ${set.journalId}`, ACCOUNT_SETS);
  }
  const members = (await everyPage(target, `query($id: UUID!, $after: String) { accountSet(id: $id) { members(first: 500, after: $after) {
    nodes { __typename ... on Account { accountId } ... on AccountSet { accountSetId } } ${PAGE_INFO} } } }`, { id: set.accountSetId }, (d) => d.accountSet.members)) ?? [];
  const haveMembers = members.map((n: any) => (n.__typename === 'AccountSet' ? { memberType: 'ACCOUNT_SET', memberId: n.accountSetId } : { memberType: 'ACCOUNT', memberId: n.accountId }));
  const wanted = new Set(set.members.map(memberKey));
  const held = new Set(haveMembers.map(memberKey));
  const removed = haveMembers.filter((m) => !wanted.has(memberKey(m)));
  const added = set.members.filter((m) => !held.has(memberKey(m)));
  const fieldsChanged = !same(have, desired);
  if (!fieldsChanged && removed.length === 0 && added.length === 0) return { ...base, change: 'unchanged' };
  const detail = [added.length ? `+${count(added.length, 'member')}` : '', removed.length ? `-${count(removed.length, 'member')}` : ''].filter(Boolean).join(', ');
  return {
    ...base, change: 'update', ...(detail ? { detail } : {}),
    ...(fieldsChanged ? { field: 'updateAccountSet(id: $ID, input: $VAR) { accountSetId }', id: { type: 'UUID!' as const, value: set.accountSetId }, variableType: 'AccountSetUpdateInput!', variable: desired } : {}),
    steps: [...removed.map((m) => MEMBER_STEP('removeFromAccountSet', set.accountSetId, m)), ...added.map((m) => MEMBER_STEP('addToAccountSet', set.accountSetId, m))],
  };
}

const LIMIT_FIELDS = `name description window { alias value type } condition currency
  limit { timestampSource balance { layer amount normalBalanceType start end } } params { name type default description }`;

/** A limit of velocity.json as the server reports it back. */
function normalizeLimit(l: Record<string, any>) {
  return {
    name: l.name,
    description: l.description ?? null,
    window: (l.window ?? []).map((k: any) => ({ alias: k.alias, value: k.value, type: k.type ?? null })),
    condition: l.condition ?? null,
    currency: l.currency ?? '',
    limit: {
      timestampSource: l.limit?.timestampSource ?? null,
      balance: (l.limit?.balance ?? []).map((b: any) => ({ layer: b.layer, amount: b.amount, normalBalanceType: b.normalBalanceType ?? null, start: b.start ?? null, end: b.end ?? null })),
    },
    params: (l.params ?? []).map((p: any) => ({ name: p.name, type: p.type ?? 'STRING', default: p.default ?? null, description: p.description ?? null })),
  };
}

/**
 * Limits, then controls (their limit lists matched), then attachments: attached where the file
 * says, attached again where journal or params differ, and detached where a control of the file
 * is attached to an account or set of the project that the file no longer lists for it.
 */
async function planVelocity(project: Project, target: Target, plan: PlanItem[], tick: () => void): Promise<void> {
  const { limits, controls } = project.velocity;
  for (const limit of limits) {
    const base = { kind: 'velocity limit' as const, name: String(limit.name), file: VELOCITY };
    const existing = await current(target, `query($id: UUID!) { velocityLimit(id: $id) { ${LIMIT_FIELDS} } }`, { id: limit.velocityLimitId }, (d) => d.velocityLimit);
    const desired = normalizeLimit(limit);
    if (!existing) plan.push({ ...base, change: 'create', field: 'createVelocityLimit(input: $VAR) { velocityLimitId }', variableType: 'VelocityLimitInput!', variable: limit });
    else if (same(existing, desired)) plan.push({ ...base, change: 'unchanged' });
    else plan.push({ ...base, change: 'update', field: 'updateVelocityLimit(id: $ID, input: $VAR) { velocityLimitId }', id: { type: 'UUID!', value: limit.velocityLimitId }, variableType: 'VelocityLimitUpdateInput!', variable: desired });
    tick();
  }

  for (const { control } of controls) {
    const base = { kind: 'velocity control' as const, name: String(control.name), file: VELOCITY };
    const existing = await current(target, 'query($id: UUID!) { velocityControl(id: $id) { name description enforcement { action } condition limits { velocityLimitId } } }', { id: control.velocityControlId }, (d) => d.velocityControl);
    const desired = { name: control.name, description: control.description ?? null, enforcement: { action: control.enforcement?.action ?? 'REJECT' }, condition: control.condition ?? null };
    if (!existing) {
      plan.push({ ...base, change: 'create', detail: count(control.velocityLimitIds.length, 'limit'), field: 'createVelocityControl(input: $VAR) { velocityControlId }', variableType: 'VelocityControlInput!', variable: control });
    } else {
      const { limits: heldLimits, ...have } = existing;
      const held: string[] = heldLimits.map((l: any) => l.velocityLimitId);
      const wanted: string[] = control.velocityLimitIds;
      const removed = held.filter((id) => !wanted.includes(id));
      const added = wanted.filter((id) => !held.includes(id));
      const fieldsChanged = !same(have, desired);
      if (!fieldsChanged && removed.length === 0 && added.length === 0) plan.push({ ...base, change: 'unchanged' });
      else {
        const step = (verb: string, limitId: string): Step => ({ field: `${verb}(velocityControlId: $CONTROL, velocityLimitId: $LIMIT) { velocityControlId }`, args: { CONTROL: { type: 'UUID!', value: control.velocityControlId }, LIMIT: { type: 'UUID!', value: limitId } } });
        const detail = [added.length ? `+${count(added.length, 'limit')}` : '', removed.length ? `-${count(removed.length, 'limit')}` : ''].filter(Boolean).join(', ');
        plan.push({
          ...base, change: 'update', ...(detail ? { detail } : {}),
          ...(fieldsChanged ? { field: 'updateVelocityControl(id: $ID, input: $VAR) { velocityControlId }', id: { type: 'UUID!' as const, value: control.velocityControlId }, variableType: 'VelocityControlUpdateInput!', variable: desired } : {}),
          steps: [...removed.map((id) => step('removeLimitFromControl', id)), ...added.map((id) => step('addLimitToControl', id))],
        });
      }
    }
    tick();
  }

  if (controls.length === 0) return;
  // What is attached now, per account or set the project names (an id that does not exist has nothing).
  const attachedTo = new Map<string, Array<{ velocityControlId: string; journalId: string | null; params: unknown }>>();
  const attachedOf = async (accountId: string) => {
    if (!attachedTo.has(accountId)) {
      const nodes = await everyPage(target, `query($id: UUID!, $after: String) { attachedControls(accountId: $id, first: 500, after: $after) { nodes { velocityControlId journalId params } ${PAGE_INFO} } }`, { id: accountId }, (d) => d.attachedControls);
      attachedTo.set(accountId, nodes ?? []);
    }
    return attachedTo.get(accountId)!;
  };
  const codes = new Map<string, string>([...project.accounts.map((a) => [String(a.accountId).toLowerCase(), String(a.code)] as const), ...project.accountSets.map((s) => [s.accountSetId, s.code] as const)]);
  const named = (control: Record<string, any>, accountId: string) => `${control.name} on ${codes.get(accountId) ?? accountId}`;
  const attachField = 'attachVelocityControl(velocityControlId: $CONTROL, accountId: $ACCOUNT, journalId: $JOURNAL, params: $PARAMS) { accountId }';

  // Detached first, so an account's slots (velocityControlsPerAccountMax) are free for what is attached.
  const listed = new Set(controls.flatMap(({ control, attach }) => attach.map((a) => `${control.velocityControlId} ${a.accountId}`)));
  const inFile = new Map(controls.map(({ control }) => [control.velocityControlId as string, control]));
  const scanned = new Set<string>([...codes.keys(), ...controls.flatMap((c) => c.attach.map((a) => a.accountId))]);
  for (const accountId of scanned) {
    for (const attachment of await attachedOf(accountId)) {
      const control = inFile.get(attachment.velocityControlId);
      if (!control || listed.has(`${attachment.velocityControlId} ${accountId}`)) continue;
      plan.push({
        kind: 'velocity attachment', name: named(control, accountId), change: 'remove', file: VELOCITY,
        steps: [{ field: 'detachVelocityControl(velocityControlId: $CONTROL, accountId: $ACCOUNT) { accountId }', args: { CONTROL: { type: 'UUID!', value: attachment.velocityControlId }, ACCOUNT: { type: 'UUID!', value: accountId } } }],
      });
    }
  }

  for (const { control, attach } of controls) {
    for (const a of attach) {
      const existing = (await attachedOf(a.accountId)).find((x) => x.velocityControlId === control.velocityControlId);
      const base = { kind: 'velocity attachment' as const, name: named(control, a.accountId), file: VELOCITY };
      const steps: Step[] = [{
        field: attachField,
        args: { CONTROL: { type: 'UUID!', value: control.velocityControlId }, ACCOUNT: { type: 'UUID!', value: a.accountId }, JOURNAL: { type: 'UUID', value: a.journalId }, PARAMS: { type: 'JSON', value: a.params } },
      }];
      if (!existing) plan.push({ ...base, change: 'create', steps });
      else if (same({ journalId: existing.journalId, params: existing.params ?? null }, { journalId: a.journalId, params: a.params })) plan.push({ ...base, change: 'unchanged' });
      else plan.push({ ...base, change: 'update', detail: 'journal or params changed', steps });
      tick();
    }
  }
}

function normalizeTranCode(d: Record<string, any>) {
  const tx = d.transaction ?? {};
  return {
    description: d.description ?? null,
    params: (d.params ?? []).map((p: any) => ({ name: p.name, type: p.type ?? 'STRING', default: p.default ?? null, description: p.description ?? null })),
    vars: d.vars ?? null,
    metadata: d.metadata ?? null,
    transaction: Object.fromEntries(['effective', 'journalId', 'correlationId', 'externalId', 'description', 'metadata'].map((k) => [k, tx[k] ?? null])),
    entries: (d.entries ?? []).map((e: any) =>
      Object.fromEntries(['accountId', 'units', 'currency', 'direction', 'entryType', 'layer', 'description', 'metadata', 'condition'].map((k) => [k, e[k] ?? null])),
    ),
  };
}

/** Where a mutation lives in the schema's namespaces. */
function namespaceOf(item: PlanItem): 'root' | 'actions' | 'auth' {
  if (item.kind === 'tool' || item.kind === 'skill' || item.kind === 'trigger') return 'actions';
  if (item.kind === 'client') return 'auth';
  return 'root';
}

/**
 * Plan, then apply every change in one GraphQL request, so one transaction: a deploy that fails
 * leaves nothing half-done. With dryRun, the request runs with @dryRun: the server checks
 * everything (programs compile, schemas, references) and rolls it all back.
 */
export async function deploy(project: Project, target: Target, options: { dryRun?: boolean; onProgress?: (done: number, total: number) => void } = {}): Promise<DeployResult> {
  const plan = await planDeploy(project, target, options.onProgress);
  const changes = plan.filter((item) => item.change !== 'unchanged');
  if (changes.length === 0) return { plan, applied: false, keys: {} };

  const declarations: string[] = [];
  const variables: Record<string, unknown> = {};
  const groups: Record<'root' | 'actions' | 'auth', string[]> = { root: [], actions: [], auth: [] };
  changes.forEach((item, i) => {
    if (item.field) {
      declarations.push(`$v${i}: ${item.variableType}`);
      variables[`v${i}`] = item.variable;
      let field = item.field.replace('$VAR', `$v${i}`);
      if (item.id) {
        declarations.push(`$i${i}: ${item.id.type}`);
        variables[`i${i}`] = item.id.value;
        field = field.replace('$ID', `$i${i}`);
      }
      groups[namespaceOf(item)].push(`c${i}: ${field}`);
    }
    // A change's further steps: aliased c<change>_<step>, their variables s<change>_<step>_<name>.
    (item.steps ?? []).forEach((step, j) => {
      const field = step.field.replace(/\$([A-Z]+)\b/g, (_, name: string) => {
        const arg = step.args[name];
        if (!arg) throw new Error(`step ${step.field} has no argument ${name}`);
        const variable = `s${i}_${j}_${name.toLowerCase()}`;
        if (!(variable in variables)) {
          declarations.push(`$${variable}: ${arg.type}`);
          variables[variable] = arg.value;
        }
        return `$${variable}`;
      });
      groups[namespaceOf(item)].push(`c${i}_${j}: ${field}`);
    });
  });
  // Fields of one mutation run in order: ledger records, then skills, tools and triggers (in plan order), then clients.
  const body = [
    ...groups.root,
    groups.actions.length ? `actions { ${groups.actions.join('\n')} }` : '',
    groups.auth.length ? `auth { ${groups.auth.join('\n')} }` : '',
  ].join('\n');
  const document = `mutation Deploy(${declarations.join(', ')})${options.dryRun ? ' @dryRun' : ''} {\n${body}\n}`;
  const result = await target.request(document, variables);
  const first = result.errors?.[0];
  if (first?.extensions?.code === 'TIMEOUT') {
    // Sent, but unanswered: it may have been applied. Saying "nothing was applied" could be false.
    throw new DeployError(
      `deploy: ${first.message}; the outcome is unknown.\nRun it again with --dry-run to see what is left to apply; clients it may have created have keys nobody has seen: rotate them (updateClient rotateKey).`,
      plan,
    );
  }
  if (first) throw new DeployError(describeFailure(first, changes), plan);

  const keys: Record<string, string> = {};
  const auth = (result.data as any)?.auth ?? {};
  // A dry run's clients were rolled back: their keys do not exist.
  if (!options.dryRun) changes.forEach((item, i) => {
    if (item.kind === 'client' && item.change === 'create' && auth[`c${i}`]?.apiKey) keys[item.name] = auth[`c${i}`].apiKey;
  });
  return { plan, applied: !options.dryRun, keys };
}

/** Name the file (and for a program, the line and column) behind a server-side refusal. */
function describeFailure(error: { message: string; path?: ReadonlyArray<string | number>; extensions?: Record<string, unknown> }, changes: PlanItem[]): string {
  const alias = [...(error.path ?? [])].reverse().find((p) => typeof p === 'string' && /^c\d+(_\d+)?$/.test(p)) as string | undefined;
  // A refused variable names its change by number: $v3 (its input), $i3 (its id) or $s3_0_member (a step's).
  const variable = /^Variable "\$(?:[vi](\d+)|s(\d+)_)/.exec(error.message);
  const index = alias ? Number(/^c(\d+)/.exec(alias)![1]) : variable ? Number(variable[1] ?? variable[2]) : undefined;
  const item = index === undefined ? undefined : changes[index];
  const details = error.extensions?.details as { line?: number; column?: number } | undefined;
  const where = item ? `${item.file}${details?.line ? `:${details.line}${details.column ? `:${details.column}` : ''}` : ''}` : 'deploy';
  const code = typeof error.extensions?.code === 'string' ? ` [${error.extensions.code}]` : '';
  return `${where}: ${error.message}${code}\nnothing was applied`;
}
