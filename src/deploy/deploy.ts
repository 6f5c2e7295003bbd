import { DEFAULT_EXECUTION } from '../actions/actions.js';
import { bug } from '../errors.js';
import { isUuid } from '../ids.js';
import {
  createdVersion,
  type DeployedState,
  type Drift,
  type FieldMerge,
  type Flat,
  mergeFields,
  mergeVersion,
  same,
  shown,
  type VersionMerge,
} from './drift.js';
import {
  ACCOUNT_SETS,
  type AccountSetFile,
  type Project,
  ProjectError,
  type SkillFile,
  type ToolFile,
  VELOCITY,
} from './project.js';
import type { GraphqlResponse, Target } from './target.js';

/** `remove` undoes what the project no longer lists (a velocity control's attachment). */
export type Change = 'create' | 'update' | 'unchanged' | 'remove';

export interface PlanItem {
  kind:
    | 'account'
    | 'account set'
    | 'velocity limit'
    | 'velocity control'
    | 'velocity attachment'
    | 'tran code'
    | 'skill'
    | 'tool'
    | 'trigger'
    | 'client';
  name: string;
  change: Change;
  /** For versioned things: the version the deploy makes, or keeps. */
  version?: number;
  /** What else changes with it, for the plan: "name, metadata.tier", "2 members", "+1 member, -1 limit". */
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
  /** Fields whose value now is not what the last deploy left, and what this deploy does with each (src/deploy/drift.ts). */
  drift?: Drift[];
  /** What the deploy records of the record, first in its transaction (see recordDeployment). */
  record?: RecordWrite;
  /** Where it comes from, for error messages. */
  file: string;
}

export interface Step {
  field: string;
  args: Record<string, { type: string; value: unknown }>;
}

/** The kinds of record the server keeps a deployed state of (schema.graphql DeployedKind). */
export type DeployedKind =
  | 'ACCOUNT'
  | 'ACCOUNT_SET'
  | 'VELOCITY_LIMIT'
  | 'VELOCITY_CONTROL'
  | 'TRAN_CODE'
  | 'TOOL'
  | 'SKILL'
  | 'TRIGGER'
  | 'CLIENT';

/** A DeployedRecordInput: the state this deploy leaves, and the version it planned from when it writes the record. */
export interface RecordWrite {
  kind: DeployedKind;
  id: string;
  state: DeployedState;
  expectVersion?: number;
}

export interface DeployResult {
  plan: PlanItem[];
  applied: boolean;
  /** API keys of clients created by this deploy (shown once). */
  keys: Record<string, string>;
}

export interface PlanOptions {
  /** Write the files' values over fields changed at runtime since the last deploy (tally deploy --overwrite-runtime-changes). */
  overwriteRuntimeChanges?: boolean;
}

export class DeployError extends Error {
  constructor(
    message: string,
    readonly plan: PlanItem[] = [],
    /** CONFLICT: fields changed both at runtime and in the files; nothing was sent. */
    readonly code?: 'CONFLICT',
    readonly hint?: string,
  ) {
    super(message);
  }
}

/** Render a plan the way `tally deploy` prints it: each item, then what it does with fields changed at runtime. */
export function formatPlan(plan: PlanItem[]): string {
  return plan
    .flatMap((item) => {
      const what = `${item.kind} ${item.name}`;
      const detail = item.detail ? ` (${item.detail})` : '';
      let line: string;
      if (item.change === 'create') line = `+ create ${what}${item.version ? ` (version ${item.version})` : detail}`;
      else if (item.change === 'update')
        line = item.version ? `~ new version ${item.version} of ${what}` : `~ update ${what}${detail}`;
      else if (item.change === 'remove') line = `- remove ${what}`;
      else line = `= ${what}${item.version ? ` (version ${item.version})` : ''} unchanged`;
      return [line, ...formatDrift(item, what)];
    })
    .join('\n');
}

/**
 * The lines under an item: `! conflict`, `! overwrite` and `! keep` for each field it declares that
 * changed at runtime, then one line for what it keeps that the files do not declare.
 */
export function formatDrift(item: PlanItem, what = `${item.kind} ${item.name}`): string[] {
  const lines: string[] = [];
  const drift = item.drift ?? [];
  const value = (d: Drift, v: unknown) => (d.field === 'version' && typeof v === 'string' ? v : shown(v));
  const deployed = (d: Drift) =>
    d.deployed === undefined ? 'never (no deploy of it is recorded)' : value(d, d.deployed);
  for (const d of drift) {
    const values = `deployed ${deployed(d)}, now ${value(d, d.now)}`;
    if (d.outcome === 'conflict') lines.push(`! conflict ${what} ${d.field}: ${values}, file ${value(d, d.file)}`);
    else if (d.outcome === 'overwrite')
      lines.push(
        `! overwrite ${what} ${d.field}: ${values}, file ${value(d, d.file)} (the file wins: --overwrite-runtime-changes)`,
      );
    else if (d.outcome === 'keep')
      lines.push(
        `! keep ${what} ${d.field}: ${values}; changed at runtime, the file still says ${value(d, d.file)} (--overwrite-runtime-changes restores it)`,
      );
    else if (d.outcome === 'release')
      lines.push(`! keep ${what} ${d.field}: ${values}; changed at runtime, no longer in ${item.file}`);
  }
  const kept = drift.filter((d) => d.outcome === 'undeclared');
  if (kept.length > 0) {
    const list = kept.map((d) => `${d.field} ${d.now === undefined ? '(removed)' : shown(d.now)}`).join(', ');
    lines.push(`  keeps ${list}: written since the last deploy, not declared in ${item.file}`);
  }
  return lines;
}

async function query(target: Target, text: string, variables: Record<string, unknown>): Promise<GraphqlResponse> {
  return target.request(text, variables);
}

/** The current state of one thing on the target, or null when it does not exist. */
async function current(
  target: Target,
  text: string,
  variables: Record<string, unknown>,
  pick: (data: any) => any,
): Promise<any | null> {
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

/** How many records one deployedRecords or recordDeployment field carries (the server takes at most pageSizeMax). */
const RECORDS_PER_FIELD = 100;

type States = Map<string, DeployedState>;
const stateKey = (kind: DeployedKind, id: string) => `${kind} ${id}`;

/** What the last deploys recorded of the records the project names, one request per RECORDS_PER_FIELD. */
async function deployedStates(target: Target, keys: Array<{ kind: DeployedKind; id: string }>): Promise<States> {
  const states: States = new Map();
  for (let i = 0; i < keys.length; i += RECORDS_PER_FIELD) {
    const found = await current(
      target,
      'query($k: [DeployedRecordKey!]!) { deployedRecords(keys: $k) { kind id state } }',
      { k: keys.slice(i, i + RECORDS_PER_FIELD) },
      (d) => d.deployedRecords,
    );
    for (const r of found ?? []) states.set(stateKey(r.kind, r.id), r.state as DeployedState);
  }
  return states;
}

/** A state without the keys it leaves out, as the server gives it back. */
function compact(state: DeployedState): DeployedState {
  return Object.fromEntries(Object.entries(state).filter(([, v]) => v !== undefined)) as DeployedState;
}

/**
 * The record to write: when the deploy writes the record (it then expects the version it planned
 * from), or when what it leaves differs from what was recorded.
 */
function recordOf(
  kind: DeployedKind,
  id: string,
  base: DeployedState | null,
  state: DeployedState,
  expectVersion?: number,
): RecordWrite | undefined {
  const next = compact(state);
  if (expectVersion === undefined && base !== null && same(base, next)) return undefined;
  return { kind, id, state: next, ...(expectVersion === undefined ? {} : { expectVersion }) };
}

/** A metadata object as fields, one per top-level key (a key set to null is no key). */
function metadataFields(metadata: unknown, into: Flat, file: string, what: () => string): Flat {
  if (metadata === undefined || metadata === null) return into;
  if (typeof metadata !== 'object' || Array.isArray(metadata))
    throw new ProjectError(`${what()}: metadata must be a JSON object, got ${shown(metadata)}`, file);
  for (const [key, value] of Object.entries(metadata)) if (value !== null) into[`metadata.${key}`] = value;
  return into;
}

/** The metadata to send: the record's own, with the written keys set (or removed: null). */
function mergedMetadata(now: unknown, writes: Flat): Record<string, unknown> | null | undefined {
  const keys = Object.keys(writes).filter((f) => f.startsWith('metadata.'));
  if (keys.length === 0) return undefined;
  const metadata: Record<string, unknown> = { ...((now as Record<string, unknown> | null) ?? {}) };
  for (const field of keys) {
    const key = field.slice('metadata.'.length);
    if (writes[field] === null) delete metadata[key];
    else metadata[key] = writes[field];
  }
  return Object.keys(metadata).length === 0 ? null : metadata;
}

/** The plain fields of a write (not metadata keys nor collection members), with their values. */
function plainWrites(writes: Flat, collections: string[] = []): Flat {
  return Object.fromEntries(
    Object.entries(writes).filter(
      ([f]) => !f.startsWith('metadata.') && !collections.some((c) => f.startsWith(`${c}.`)),
    ),
  );
}

/** How a field is named in the plan: `member alice` for `members.<id>`, `limit no overdraft` for `limits.<id>`. */
function labelOf(field: string, names: Map<string, string>): string {
  const dot = field.indexOf('.');
  const head = dot < 0 ? field : field.slice(0, dot);
  const id = field.slice(dot + 1);
  if (head === 'members' && dot > 0) return `member ${names.get(id) ?? id}`;
  if (head === 'limits' && dot > 0) return `limit ${names.get(id) ?? id}`;
  return field;
}

/** The plan's detail of an update: the fields written, then members or limits added and removed. */
function detailOf(writes: Flat, collection?: { prefix: string; noun: string }): string | undefined {
  const inCollection = (f: string) => collection !== undefined && f.startsWith(`${collection.prefix}.`);
  const fields = Object.keys(writes).filter((f) => !inCollection(f));
  const added = Object.keys(writes).filter((f) => inCollection(f) && writes[f] !== null).length;
  const removed = Object.keys(writes).filter((f) => inCollection(f) && writes[f] === null).length;
  const parts = [
    ...fields,
    ...(added ? [`+${count(added, collection!.noun)}`] : []),
    ...(removed ? [`-${count(removed, collection!.noun)}`] : []),
  ];
  return parts.length ? parts.join(', ') : undefined;
}

function relabel(drift: Drift[], names: Map<string, string>): Drift[] | undefined {
  if (drift.length === 0) return undefined;
  return drift.map((d) => {
    // Members or limits added by someone else, seen together: named as the plan names them.
    if (
      d.outcome === 'undeclared' &&
      (d.field === 'members' || d.field === 'limits') &&
      d.now &&
      typeof d.now === 'object'
    ) {
      return { ...d, now: Object.keys(d.now).map((f) => labelOf(f, names).replace(/^\S+ /, '')) };
    }
    return { ...d, field: labelOf(d.field, names) };
  });
}

const hasWrites = (merge: FieldMerge) => Object.keys(merge.writes).length > 0;

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

async function planAccount(
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

/** A tran code, tool or skill: a new version, the latest kept, or a conflict, from mergeVersion. */
function versionedItem(
  item: Omit<PlanItem, 'change'>,
  merge: VersionMerge,
  version: number,
  kind: DeployedKind,
  id: string,
  base: DeployedState | null,
  update: Pick<PlanItem, 'field' | 'id' | 'variableType' | 'variable'>,
): PlanItem {
  const drift = merge.drift.length ? merge.drift : undefined;
  if (merge.action === 'new')
    return {
      ...item,
      change: 'update',
      version: version + 1,
      drift,
      ...update,
      record: recordOf(kind, id, base, merge.state, version),
    };
  return {
    ...item,
    change: 'unchanged',
    version,
    drift,
    record: merge.drift.some((d) => d.outcome === 'conflict') ? undefined : recordOf(kind, id, base, merge.state),
  };
}

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
    tools: (m.tools ?? []).map((r: any) => ({
      name: r.name,
      version: r.version ?? null,
      input: r.input ?? null,
      approval: r.approval ? { when: r.approval.when ?? null, timeoutMs: r.approval.timeoutMs ?? null } : null,
    })),
    skills: (m.skills ?? []).map((r: any) => ({ name: r.name, version: r.version ?? null })),
    hooks: m.hooks ? { before: hookOf(m.hooks.before), after: hookOf(m.hooks.after) } : null,
    policies: (m.policies ?? []).map((p: any) => ({
      effect: p.effect,
      actions: p.actions,
      resources: p.resources,
      assertions: p.assertions ?? null,
    })),
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
      throw new ProjectError(
        item.kind === 'tool'
          ? 'tools (and the skills they declare) reference each other in a cycle'
          : 'a skill lists a tool that declares it, directly or through other tools',
        item.kind === 'tool' ? item.tool.manifestPath : item.skill.path,
      );
    }
    state.set(key, 'visiting');
    if (item.kind === 'tool') {
      for (const ref of item.tool.manifest.skills ?? []) {
        const dep = skillsByName.get(ref?.name);
        if (dep) visit({ kind: 'skill', skill: dep });
      }
      for (const ref of [
        ...(item.tool.manifest.tools ?? []),
        item.tool.manifest.hooks?.before,
        item.tool.manifest.hooks?.after,
      ]) {
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

async function planSkill(
  target: Target,
  skill: SkillFile,
  base: DeployedState | null,
  overwrite: boolean,
): Promise<PlanItem> {
  const existing = await current(
    target,
    'query($name: String!) { actions { skill(name: $name) { skillId version description body tools } } }',
    { name: skill.name },
    (d) => d.actions.skill,
  );
  const desired = { description: skill.description, body: skill.body, tools: skill.tools };
  const item = { kind: 'skill' as const, name: skill.name, file: skill.path };
  if (!existing) {
    if (!isUuid(skill.skillId))
      throw new ProjectError(
        `needs a "skillId:" that is a UUID in its front matter to create the skill, got ${JSON.stringify(skill.skillId)}`,
        skill.path,
      );
    return {
      ...item,
      change: 'create',
      version: 1,
      field: 'createSkill(id: $ID, input: $VAR) { version }',
      id: { type: 'UUID!', value: skill.skillId },
      variableType: 'SkillInput!',
      variable: { name: skill.name, ...desired },
      record: recordOf('SKILL', skill.name, base, createdVersion(desired)),
    };
  }
  const { skillId, version, ...have } = existing;
  const merge = mergeVersion(have, version, desired, base, overwrite);
  return versionedItem(item, merge, version, 'SKILL', skill.name, base, {
    field: 'updateSkill(id: $ID, input: $VAR) { version }',
    id: { type: 'UUID!', value: skillId },
    variableType: 'SkillInput!',
    variable: desired,
  });
}

const ACTION_FIELDS = `version config tool { name title description aliases metadata inputSchema outputSchema } tools { name version input approval { when timeoutMs } } skills { name version } hooks { before { name version } after { name version } }
  policies { effect actions resources assertions } execution { maxAttempts backoff { initialMs multiplier maxMs } timeoutMs retryIf cacheTtlMs }`;
const TRAN_CODE_FIELDS = `tranCodeId version description params { name type default description } vars metadata
  transaction { effective journalId correlationId externalId description metadata }
  entries { accountId units currency direction entryType layer description metadata condition }`;

/** The records a project names, by the identity the plan finds each with. */
function projectKeys(project: Project): Array<{ kind: DeployedKind; id: string }> {
  return [
    ...project.accounts.map((a) => ({ kind: 'ACCOUNT' as const, id: String(a.accountId).toLowerCase() })),
    ...project.accountSets.map((s) => ({ kind: 'ACCOUNT_SET' as const, id: s.accountSetId })),
    ...project.velocity.limits.map((l) => ({ kind: 'VELOCITY_LIMIT' as const, id: String(l.velocityLimitId) })),
    ...project.velocity.controls.map((c) => ({
      kind: 'VELOCITY_CONTROL' as const,
      id: String(c.control.velocityControlId),
    })),
    ...project.tranCodes.map((t) => ({ kind: 'TRAN_CODE' as const, id: String(t.definition.code) })),
    ...project.tools.map((t) => ({ kind: 'TOOL' as const, id: t.name })),
    ...project.skills.map((k) => ({ kind: 'SKILL' as const, id: k.name })),
    ...project.triggers.map((t) => ({ kind: 'TRIGGER' as const, id: String(t.definition.triggerId).toLowerCase() })),
    ...project.clients.map((c) => ({ kind: 'CLIENT' as const, id: String(c.principal) })),
  ];
}

/**
 * Compare the project with the target and list what a deploy would do. Reads only. Each record is
 * compared field by field with what it holds now and what the last deploy left (src/deploy/drift.ts):
 * a deploy writes only the fields the files declare, and what changed at runtime is kept, or a
 * conflict, never overwritten without options.overwriteRuntimeChanges.
 */
export async function planDeploy(
  project: Project,
  target: Target,
  onProgress?: (done: number, total: number) => void,
  options: PlanOptions = {},
): Promise<PlanItem[]> {
  const plan: PlanItem[] = [];
  const overwrite = options.overwriteRuntimeChanges === true;
  const attachments = project.velocity.controls.reduce((n, c) => n + c.attach.length, 0);
  const total =
    project.accounts.length +
    project.accountSets.length +
    project.velocity.limits.length +
    project.velocity.controls.length +
    attachments +
    project.tranCodes.length +
    project.tools.length +
    project.skills.length +
    project.triggers.length +
    project.clients.length;
  let done = 0;
  const tick = () => onProgress?.(++done, total);
  const states = await deployedStates(target, projectKeys(project));
  const baseOf = (kind: DeployedKind, id: string) => states.get(stateKey(kind, id)) ?? null;

  for (const account of project.accounts) {
    plan.push(
      await planAccount(target, account, baseOf('ACCOUNT', String(account.accountId).toLowerCase()), overwrite),
    );
    tick();
  }

  // What the plan calls accounts and sets by (a member, an attachment).
  const names = new Map<string, string>([
    ...project.accounts.map((a) => [String(a.accountId).toLowerCase(), String(a.code)] as const),
    ...project.accountSets.map((s) => [s.accountSetId, s.code] as const),
  ]);
  for (const set of setsInOrder(project.accountSets)) {
    plan.push(await planAccountSet(target, set, baseOf('ACCOUNT_SET', set.accountSetId), overwrite, names));
    tick();
  }
  await planVelocity(project, target, plan, tick, baseOf, overwrite, names);

  for (const { path, definition } of project.tranCodes) {
    const code = String(definition.code);
    const base = baseOf('TRAN_CODE', code);
    const existing = await current(
      target,
      `query($code: String!) { tranCode(code: $code) { ${TRAN_CODE_FIELDS} } }`,
      { code: definition.code },
      (d) => d.tranCode,
    );
    const normalized = normalizeTranCode(definition);
    const item = { kind: 'tran code' as const, name: code, file: path };
    if (!existing) {
      plan.push({
        ...item,
        change: 'create',
        version: 1,
        field: 'createTranCode(input: $VAR) { version }',
        variableType: 'TranCodeInput!',
        variable: definition,
        record: recordOf('TRAN_CODE', code, base, createdVersion(normalized)),
      });
    } else {
      const { tranCodeId, version, ...have } = existing;
      const { tranCodeId: _id, code: _code, status: _status, ...update } = definition;
      plan.push(
        versionedItem(
          item,
          mergeVersion(have, version, normalized, base, overwrite),
          version,
          'TRAN_CODE',
          code,
          base,
          {
            field: 'updateTranCode(id: $ID, input: $VAR) { version }',
            id: { type: 'UUID!', value: tranCodeId },
            variableType: 'TranCodeUpdateInput!',
            variable: update,
          },
        ),
      );
    }
    tick();
  }

  for (const item of byReferences(project.tools, project.skills)) {
    if (item.kind === 'skill') {
      plan.push(await planSkill(target, item.skill, baseOf('SKILL', item.skill.name), overwrite));
      tick();
      continue;
    }
    const { tool } = item;
    const base = baseOf('TOOL', tool.name);
    const existing = await current(
      target,
      `query($name: String!) { actions { action(name: $name) { actionId ${ACTION_FIELDS} } } }`,
      { name: tool.name },
      (d) => d.actions.action,
    );
    const desired = toolDesired(tool);
    if (!existing && !isUuid(tool.manifest.actionId))
      throw new ProjectError(
        `needs an "actionId" that is a UUID to create the tool, got ${JSON.stringify(tool.manifest.actionId ?? null)}`,
        tool.manifestPath,
      );
    const planned = { kind: 'tool' as const, name: tool.name, file: tool.programPath };
    if (!existing) {
      plan.push({
        ...planned,
        change: 'create',
        version: 1,
        field: 'createAction(id: $ID, input: $VAR) { version }',
        id: { type: 'UUID!', value: tool.manifest.actionId },
        variableType: 'ActionInput!',
        variable: {
          name: tool.name,
          kind: tool.manifest.kind === 'model' || tool.manifest.kind === 'agent' ? tool.manifest.kind : 'tool',
          ...desired,
        },
        record: recordOf('TOOL', tool.name, base, createdVersion(desired)),
      });
    } else {
      const { actionId, version, ...have } = existing;
      plan.push(
        versionedItem(
          planned,
          mergeVersion(have, version, desired, base, overwrite),
          version,
          'TOOL',
          tool.name,
          base,
          {
            field: 'updateAction(id: $ID, input: $VAR) { version }',
            id: { type: 'UUID!', value: actionId },
            variableType: 'ActionInput!',
            variable: desired,
          },
        ),
      );
    }
    tick();
  }

  for (const { path, definition } of project.triggers) {
    plan.push(
      await planTrigger(
        target,
        path,
        definition,
        baseOf('TRIGGER', String(definition.triggerId).toLowerCase()),
        overwrite,
      ),
    );
    tick();
  }

  for (const client of project.clients) {
    plan.push(await planClient(target, client, baseOf('CLIENT', String(client.principal)), overwrite));
    tick();
  }
  return plan;
}

const TRIGGER_DEFAULTS: Flat = { filter: null, input: null, status: 'ACTIVE' };

/** A trigger as fields: one read from the target (every field), or those its file declares. */
function triggerFields(t: Record<string, any>, declaredOnly: boolean): Flat {
  const normalized: Flat = {
    name: t.name,
    on: t.on,
    filter: t.filter ?? null,
    action: { name: t.action?.name, version: t.action?.version ?? null },
    input: t.input ?? null,
    status: t.status ?? 'ACTIVE',
  };
  return Object.fromEntries(Object.entries(normalized).filter(([k]) => !declaredOnly || t[k] !== undefined));
}

async function planTrigger(
  target: Target,
  path: string,
  definition: Record<string, any>,
  base: DeployedState | null,
  overwrite: boolean,
): Promise<PlanItem> {
  const id = String(definition.triggerId).toLowerCase();
  const item = { kind: 'trigger' as const, name: String(definition.name), file: path };
  const file = triggerFields(definition, true);
  const existing = await current(
    target,
    'query($id: UUID!) { actions { trigger(id: $id) { name on filter action { name version } input status version } } }',
    { id: definition.triggerId },
    (d) => d.actions.trigger,
  );
  if (!existing)
    return {
      ...item,
      change: 'create',
      field: 'createTrigger(input: $VAR) { triggerId }',
      variableType: 'TriggerInput!',
      variable: definition,
      record: recordOf('TRIGGER', id, base, { fields: file }),
    };
  const merge = mergeFields(file, triggerFields(existing, false), base, { overwrite, defaults: TRIGGER_DEFAULTS });
  const drift = relabel(merge.drift, new Map());
  if (!hasWrites(merge))
    return { ...item, change: 'unchanged', drift, record: recordOf('TRIGGER', id, base, merge.state) };
  return {
    ...item,
    change: 'update',
    detail: detailOf(merge.writes),
    drift,
    field: 'updateTrigger(id: $ID, input: $VAR) { triggerId }',
    id: { type: 'UUID!', value: definition.triggerId },
    variableType: 'TriggerUpdateInput!',
    variable: merge.writes,
    record: recordOf('TRIGGER', id, base, merge.state, existing.version),
  };
}

const policiesOf = (policies: any[] | undefined | null) =>
  (policies ?? []).map((p: any) => ({
    effect: p.effect,
    actions: p.actions,
    resources: p.resources,
    assertions: p.assertions ?? null,
  }));

async function planClient(
  target: Target,
  client: Record<string, any>,
  base: DeployedState | null,
  overwrite: boolean,
): Promise<PlanItem> {
  const principal = String(client.principal);
  const item = { kind: 'client' as const, name: principal, file: 'clients.json' };
  const file: Flat = {
    ...(client.name !== undefined ? { name: client.name } : {}),
    ...(client.policies !== undefined ? { policies: policiesOf(client.policies) } : {}),
  };
  const existing = await current(
    target,
    'query($p: String!) { auth { client(principal: $p) { name policies { effect actions resources assertions } version } } }',
    { p: client.principal },
    (d) => d.auth.client,
  );
  if (!existing)
    return {
      ...item,
      change: 'create',
      field: 'createClient(input: $VAR) { apiKey client { principal } }',
      variableType: 'ClientInput!',
      variable: client,
      record: recordOf('CLIENT', principal, base, { fields: file }),
    };
  const merge = mergeFields(file, { name: existing.name, policies: policiesOf(existing.policies) }, base, {
    overwrite,
    defaults: { policies: [] },
  });
  const drift = relabel(merge.drift, new Map());
  if (!hasWrites(merge))
    return { ...item, change: 'unchanged', drift, record: recordOf('CLIENT', principal, base, merge.state) };
  // Policies go as the file wrote them (the server parses them); dropped from the file: none.
  const variable = {
    ...(Object.hasOwn(merge.writes, 'name') ? { name: merge.writes.name } : {}),
    ...(Object.hasOwn(merge.writes, 'policies') ? { policies: client.policies ?? [] } : {}),
  };
  return {
    ...item,
    change: 'update',
    detail: detailOf(merge.writes),
    drift,
    field: 'updateClient(principal: $ID, input: $VAR) { client { principal } }',
    id: { type: 'String!', value: client.principal },
    variableType: 'ClientUpdateInput!',
    variable,
    record: recordOf('CLIENT', principal, base, merge.state, existing.version),
  };
}

const PAGE_INFO = 'pageInfo { hasNextPage endCursor }';

/** Every node of a connection, page by page: `text` takes $after and puts `pageInfo` in `pick`'s result. */
async function everyPage(
  target: Target,
  text: string,
  variables: Record<string, unknown>,
  pick: (data: any) => any,
): Promise<any[] | null> {
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

const count = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;
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

async function planAccountSet(
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
      balance: (l.limit?.balance ?? []).map((b: any) => ({
        layer: b.layer,
        amount: b.amount,
        normalBalanceType: b.normalBalanceType ?? null,
        start: b.start ?? null,
        end: b.end ?? null,
      })),
    },
    params: (l.params ?? []).map((p: any) => ({
      name: p.name,
      type: p.type ?? 'STRING',
      default: p.default ?? null,
      description: p.description ?? null,
    })),
  };
}

const LIMIT_KEYS = ['name', 'description', 'window', 'condition', 'currency', 'limit', 'params'] as const;
const LIMIT_DEFAULTS: Flat = normalizeLimit({});

/** A limit as fields (normalized as the server reports them back): all of one read from the target, or those its entry declares. */
function limitFields(limit: Record<string, any>, declaredOnly: boolean): Flat {
  const normalized = normalizeLimit(limit);
  return Object.fromEntries(
    LIMIT_KEYS.filter((k) => !declaredOnly || (limit[k] !== undefined && limit[k] !== null)).map((k) => [
      k,
      normalized[k],
    ]),
  );
}

const CONTROL_DEFAULTS: Flat = { description: null, enforcement: { action: 'REJECT' }, condition: null };

/**
 * A control as fields: name, description, enforcement, condition, `limits.<id>` for each limit
 * it holds and `attach.<accountId>` ({journalId, params}) for each account or set it is attached to.
 */
function controlFields(
  control: Record<string, any>,
  limitIds: string[],
  attached: Array<{ accountId: string; journalId: string | null; params: unknown }>,
  declaredOnly: boolean,
): Flat {
  const fields: Flat = { name: control.name };
  for (const key of ['description', 'condition'] as const)
    if (!declaredOnly || (control[key] !== undefined && control[key] !== null)) fields[key] = control[key] ?? null;
  if (!declaredOnly || control.enforcement) fields.enforcement = { action: control.enforcement?.action ?? 'REJECT' };
  for (const id of limitIds) fields[`limits.${id}`] = true;
  for (const a of attached)
    fields[`attach.${a.accountId}`] = { journalId: a.journalId ?? null, params: a.params ?? null };
  return fields;
}

const inLimits = (field: string) =>
  field.startsWith('limits.') ? 'limits' : field.startsWith('attach.') ? 'attach' : null;

/**
 * Limits, then controls (their limit lists matched), then attachments: attached where the file
 * says, attached again where journal or params differ, and detached where the last deploy
 * attached a control of the file to an account or set that the file no longer lists for it (one
 * attached since by someone else stays).
 */
async function planVelocity(
  project: Project,
  target: Target,
  plan: PlanItem[],
  tick: () => void,
  baseOf: (kind: DeployedKind, id: string) => DeployedState | null,
  overwrite: boolean,
  names: Map<string, string>,
): Promise<void> {
  const { limits, controls } = project.velocity;
  const limitNames = new Map(limits.map((l) => [String(l.velocityLimitId), String(l.name)]));
  for (const limit of limits) {
    const id = String(limit.velocityLimitId);
    const base = baseOf('VELOCITY_LIMIT', id);
    const item = { kind: 'velocity limit' as const, name: String(limit.name), file: VELOCITY };
    const existing = await current(
      target,
      `query($id: UUID!) { velocityLimit(id: $id) { ${LIMIT_FIELDS} version } }`,
      { id },
      (d) => d.velocityLimit,
    );
    const file = limitFields(limit, true);
    if (!existing)
      plan.push({
        ...item,
        change: 'create',
        field: 'createVelocityLimit(input: $VAR) { velocityLimitId }',
        variableType: 'VelocityLimitInput!',
        variable: limit,
        record: recordOf('VELOCITY_LIMIT', id, base, { fields: file }),
      });
    else {
      const merge = mergeFields(file, limitFields(existing, false), base, { overwrite, defaults: LIMIT_DEFAULTS });
      const drift = relabel(merge.drift, names);
      if (!hasWrites(merge))
        plan.push({ ...item, change: 'unchanged', drift, record: recordOf('VELOCITY_LIMIT', id, base, merge.state) });
      else {
        plan.push({
          ...item,
          change: 'update',
          detail: detailOf(merge.writes),
          drift,
          field: 'updateVelocityLimit(id: $ID, input: $VAR) { velocityLimitId }',
          id: { type: 'UUID!', value: id },
          variableType: 'VelocityLimitUpdateInput!',
          variable: merge.writes,
          record: recordOf('VELOCITY_LIMIT', id, base, merge.state, existing.version),
        });
      }
    }
    tick();
  }
  if (controls.length === 0) return;

  // What is attached now, per account or set (an id that does not exist has nothing).
  const attachedTo = new Map<string, Array<{ velocityControlId: string; journalId: string | null; params: unknown }>>();
  const attachedOf = async (accountId: string) => {
    if (!attachedTo.has(accountId)) {
      const nodes = await everyPage(
        target,
        `query($id: UUID!, $after: String) { attachedControls(accountId: $id, first: 500, after: $after) { nodes { velocityControlId journalId params } ${PAGE_INFO} } }`,
        { id: accountId },
        (d) => d.attachedControls,
      );
      attachedTo.set(accountId, nodes ?? []);
    }
    return attachedTo.get(accountId)!;
  };
  const named = (control: Record<string, any>, accountId: string) =>
    `${control.name} on ${names.get(accountId) ?? accountId}`;
  const attachField =
    'attachVelocityControl(velocityControlId: $CONTROL, accountId: $ACCOUNT, journalId: $JOURNAL, params: $PARAMS) { accountId }';
  const detached: PlanItem[] = [];
  const attachedItems: PlanItem[] = [];

  for (const { control, attach } of controls) {
    const id = String(control.velocityControlId);
    const base = baseOf('VELOCITY_CONTROL', id);
    const item = { kind: 'velocity control' as const, name: String(control.name), file: VELOCITY };
    const existing = await current(
      target,
      'query($id: UUID!) { velocityControl(id: $id) { name description enforcement { action } condition limits { velocityLimitId } version } }',
      { id },
      (d) => d.velocityControl,
    );
    const file = controlFields(control, control.velocityLimitIds, attach, true);
    // Where it is attached now, among the accounts and sets the file or the last deploy attached it to.
    const accounts = [
      ...new Set([
        ...attach.map((a) => a.accountId),
        ...Object.keys(base?.fields ?? {})
          .filter((f) => f.startsWith('attach.'))
          .map((f) => f.slice('attach.'.length)),
      ]),
    ];
    const attached = existing
      ? (
          await Promise.all(
            accounts.map(async (accountId) => ({
              accountId,
              found: (await attachedOf(accountId)).find((x) => x.velocityControlId === id),
            })),
          )
        ).flatMap(({ accountId, found }) =>
          found ? [{ accountId, journalId: found.journalId, params: found.params ?? null }] : [],
        )
      : [];
    const merge = existing
      ? mergeFields(
          file,
          controlFields(
            existing,
            existing.limits.map((l: any) => l.velocityLimitId),
            attached,
            false,
          ),
          base,
          { overwrite, defaults: CONTROL_DEFAULTS, group: inLimits },
        )
      : null;
    const writes = merge?.writes ?? Object.fromEntries(Object.entries(file).filter(([f]) => f.startsWith('attach.')));
    const controlWrites = Object.fromEntries(Object.entries(writes).filter(([f]) => !f.startsWith('attach.')));
    const drift = merge?.drift ?? [];
    const record = recordOf(
      'VELOCITY_CONTROL',
      id,
      base,
      merge?.state ?? { fields: file },
      existing && Object.keys(writes).length ? existing.version : undefined,
    );

    if (!existing) {
      plan.push({
        ...item,
        change: 'create',
        detail: count(control.velocityLimitIds.length, 'limit'),
        field: 'createVelocityControl(input: $VAR) { velocityControlId }',
        variableType: 'VelocityControlInput!',
        variable: control,
        record,
      });
    } else {
      const controlDrift = relabel(
        drift.filter((d) => !d.field.startsWith('attach')),
        limitNames,
      );
      const fields = plainWrites(controlWrites, ['limits']);
      const limitSteps = Object.entries(controlWrites)
        .filter(([f]) => f.startsWith('limits.'))
        .map(([f, v]) => ({ limitId: f.slice('limits.'.length), add: v !== null }));
      const step = (verb: string, limitId: string): Step => ({
        field: `${verb}(velocityControlId: $CONTROL, velocityLimitId: $LIMIT) { velocityControlId }`,
        args: { CONTROL: { type: 'UUID!', value: id }, LIMIT: { type: 'UUID!', value: limitId } },
      });
      if (Object.keys(controlWrites).length === 0)
        plan.push({ ...item, change: 'unchanged', drift: controlDrift, record });
      else {
        plan.push({
          ...item,
          change: 'update',
          detail: detailOf(controlWrites, { prefix: 'limits', noun: 'limit' }),
          drift: controlDrift,
          ...(Object.keys(fields).length
            ? {
                field: 'updateVelocityControl(id: $ID, input: $VAR) { velocityControlId }',
                id: { type: 'UUID!' as const, value: id },
                variableType: 'VelocityControlUpdateInput!',
                variable: fields,
              }
            : {}),
          steps: [
            ...limitSteps.filter((s) => !s.add).map((s) => step('removeLimitFromControl', s.limitId)),
            ...limitSteps.filter((s) => s.add).map((s) => step('addLimitToControl', s.limitId)),
          ],
          record,
        });
      }
    }
    tick();

    // Its attachments: one item each, for those the file lists and those it stopped listing.
    for (const accountId of accounts) {
      const field = `attach.${accountId}`;
      const listed = attach.find((a) => a.accountId === accountId);
      const base = { kind: 'velocity attachment' as const, name: named(control, accountId), file: VELOCITY };
      const attachDrift = drift.filter((d) => d.field === field).map((d) => ({ ...d, field: 'journal and params' }));
      const was = attached.some((a) => a.accountId === accountId);
      const driftOf = attachDrift.length ? { drift: attachDrift } : {};
      if (Object.hasOwn(writes, field) && writes[field] === null) {
        detached.push({
          ...base,
          change: 'remove',
          ...driftOf,
          steps: [
            {
              field: 'detachVelocityControl(velocityControlId: $CONTROL, accountId: $ACCOUNT) { accountId }',
              args: { CONTROL: { type: 'UUID!', value: id }, ACCOUNT: { type: 'UUID!', value: accountId } },
            },
          ],
        });
      } else if (Object.hasOwn(writes, field)) {
        const steps: Step[] = [
          {
            field: attachField,
            args: {
              CONTROL: { type: 'UUID!', value: id },
              ACCOUNT: { type: 'UUID!', value: accountId },
              JOURNAL: { type: 'UUID', value: listed!.journalId },
              PARAMS: { type: 'JSON', value: listed!.params },
            },
          },
        ];
        attachedItems.push(
          was
            ? { ...base, change: 'update', detail: 'journal or params changed', ...driftOf, steps }
            : { ...base, change: 'create', ...driftOf, steps },
        );
      } else if (listed || attachDrift.length) {
        attachedItems.push({ ...base, change: 'unchanged', ...driftOf });
      }
      if (listed) tick();
    }
  }
  // Detached first, so an account's slots (velocityControlsPerAccountMax) are free for what is attached.
  plan.push(...detached, ...attachedItems);
}
function normalizeTranCode(d: Record<string, any>) {
  const tx = d.transaction ?? {};
  return {
    description: d.description ?? null,
    params: (d.params ?? []).map((p: any) => ({
      name: p.name,
      type: p.type ?? 'STRING',
      default: p.default ?? null,
      description: p.description ?? null,
    })),
    vars: d.vars ?? null,
    metadata: d.metadata ?? null,
    transaction: Object.fromEntries(
      ['effective', 'journalId', 'correlationId', 'externalId', 'description', 'metadata'].map((k) => [
        k,
        tx[k] ?? null,
      ]),
    ),
    entries: (d.entries ?? []).map((e: any) =>
      Object.fromEntries(
        [
          'accountId',
          'units',
          'currency',
          'direction',
          'entryType',
          'layer',
          'description',
          'metadata',
          'condition',
        ].map((k) => [k, e[k] ?? null]),
      ),
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
 * everything (programs compile, schemas, references) and rolls it all back. A plan with a
 * conflict (a field changed both at runtime and in the files) is refused before anything is sent,
 * unless overwriteRuntimeChanges. What the deploy leaves is recorded first in the same request,
 * refused if a record it writes changed since it was read (RECORD_CHANGED).
 */
export async function deploy(
  project: Project,
  target: Target,
  options: { dryRun?: boolean; onProgress?: (done: number, total: number) => void } & PlanOptions = {},
): Promise<DeployResult> {
  const plan = await planDeploy(project, target, options.onProgress, {
    overwriteRuntimeChanges: options.overwriteRuntimeChanges,
  });
  const conflicts = plan.filter((item) => item.drift?.some((d) => d.outcome === 'conflict'));
  if (conflicts.length > 0) {
    const lines = conflicts.flatMap((item) => formatDrift(item).filter((l) => l.startsWith('! conflict')));
    throw new DeployError(
      `${count(lines.length, 'field')} changed both at runtime and in the project files since the last deploy:\n${lines.join('\n')}\nnothing was applied`,
      plan,
      'CONFLICT',
      "Put the value to keep in the file (the one it has now, to keep the runtime change), or deploy with --overwrite-runtime-changes to write the files' values over it.",
    );
  }
  const changes = plan.filter((item) => item.change !== 'unchanged');
  const records = plan.flatMap((item) => (item.record ? [item.record] : []));
  // Nothing to change and nothing new to record; a dry run records nothing anyway.
  if (changes.length === 0 && (records.length === 0 || options.dryRun)) return { plan, applied: false, keys: {} };

  const declarations: string[] = [];
  const variables: Record<string, unknown> = {};
  const groups: Record<'root' | 'actions' | 'auth', string[]> = { root: [], actions: [], auth: [] };
  // First what the deploy leaves (and the versions it planned from, checked before anything is written).
  const recordFields: string[] = [];
  for (let i = 0; i * RECORDS_PER_FIELD < records.length; i++) {
    declarations.push(`$d${i}: [DeployedRecordInput!]!`);
    variables[`d${i}`] = records.slice(i * RECORDS_PER_FIELD, (i + 1) * RECORDS_PER_FIELD);
    recordFields.push(`d${i}: recordDeployment(records: $d${i})`);
  }
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
        // planDeploy builds the steps and their arguments together: a missing one is a bug.
        if (!arg) throw bug(`step ${step.field} has no argument ${name}`);
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
  // Fields of one mutation run in order: the records, ledger records, then skills, tools and triggers (in plan order), then clients.
  const body = [
    ...recordFields,
    ...groups.root,
    groups.actions.length ? `actions { ${groups.actions.join('\n')} }` : '',
    groups.auth.length ? `auth { ${groups.auth.join('\n')} }` : '',
  ].join('\n');
  // A deploy is an operator's work: it runs under the operator budget (operatorDeadlineMs), not the
  // standard request's, so a project of any ordinary size goes in one transaction.
  const document = `mutation Deploy(${declarations.join(', ')})${options.dryRun ? ' @dryRun' : ''} @budget(name: OPERATOR) {\n${body}\n}`;
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
  if (!options.dryRun)
    changes.forEach((item, i) => {
      if (item.kind === 'client' && item.change === 'create' && auth[`c${i}`]?.apiKey)
        keys[item.name] = auth[`c${i}`].apiKey;
    });
  return { plan, applied: changes.length > 0 && !options.dryRun, keys };
}

/** Name the file (and for a program, the line and column) behind a server-side refusal. */
function describeFailure(
  error: { message: string; path?: ReadonlyArray<string | number>; extensions?: Record<string, unknown> },
  changes: PlanItem[],
): string {
  const alias = [...(error.path ?? [])].reverse().find((p) => typeof p === 'string' && /^c\d+(_\d+)?$/.test(p)) as
    | string
    | undefined;
  // A refused variable names its change by number: $v3 (its input), $i3 (its id) or $s3_0_member (a step's).
  const variable = /^Variable "\$(?:[vi](\d+)|s(\d+)_)/.exec(error.message);
  const index = alias ? Number(/^c(\d+)/.exec(alias)![1]) : variable ? Number(variable[1] ?? variable[2]) : undefined;
  const item = index === undefined ? undefined : changes[index];
  const details = error.extensions?.details as { line?: number; column?: number } | undefined;
  const where = item
    ? `${item.file}${details?.line ? `:${details.line}${details.column ? `:${details.column}` : ''}` : ''}`
    : 'deploy';
  const code = typeof error.extensions?.code === 'string' ? ` [${error.extensions.code}]` : '';
  return `${where}: ${error.message}${code}\nnothing was applied`;
}
