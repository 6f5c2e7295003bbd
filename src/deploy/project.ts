import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { basename, join, relative, sep } from 'node:path';
import { isUuid } from '../ids.js';

/**
 * A Tally project on disk:
 *
 *   tally.json                 {"name": "bank", "server": "http://127.0.0.1:4000/graphql"}
 *   accounts.json              the chart of accounts: [{accountId, code, name, normalBalanceType, ...}]
 *   tran-codes/<CODE>.json     one tran code each: {tranCodeId, code, params, transaction, entries, ...}
 *   tools/<name>.js            a tool's program: function run(event) { ... }
 *   tools/<name>.json          beside it, the rest: {actionId, title, description, aliases, metadata,
 *                              internal, inputSchema, outputSchema, tools, policies, execution}; a model,
 *                              an agent or an http tool is its manifest alone, with "kind" and "config"
 *   triggers/<name>.json       {triggerId, name, on, filter, action: {name, version?}, input}
 *   skills/<name>.md           guidance an agent declares: a front matter block (description, tools,
 *                              skillId), then the markdown body
 *   clients.json               [{principal, name, policies}]
 *   account-sets.json          sets of accounts (and of other sets) whose balances roll up:
 *                              [{accountSetId, code, name, description?, normalBalanceType?, metadata?,
 *                                journalId?, members: [{memberType: ACCOUNT|ACCOUNT_SET, memberId}]}]
 *                              deployed after the accounts; members are added and removed to match
 *   velocity.json              velocity limits and the controls that hold them, attached to accounts
 *                              or sets: {limits: [{velocityLimitId, name, description?, window?,
 *                                condition?, currency?, limit: {balance: [{layer, amount, ...}]}, params?}],
 *                              controls: [{velocityControlId, name, description?, enforcement?: {action},
 *                                condition?, velocityLimitIds?, attach?: [{accountId, journalId?, params?}]}]}
 *                              a control's limits and attachments are matched to the file (attachments
 *                              the file no longer lists are detached)
 *
 * The program stays a plain .js file (reviewable, lintable, typed with sandbox/tally.d.ts); what
 * the engine needs to know about it sits in the JSON beside it.
 */
export interface ToolFile {
  name: string;
  /** Paths relative to the project, for messages. */
  programPath: string;
  manifestPath: string;
  src: string;
  manifest: Record<string, any>;
}

/** A skill's file: `---`, the front matter (description, tools, skillId), `---`, the markdown body. */
export interface SkillFile {
  name: string;
  /** Relative to the project, for messages. */
  path: string;
  skillId: string | null;
  description: string | null;
  tools: string[];
  body: string;
}

export interface Project {
  dir: string;
  name: string;
  server: string | null;
  accounts: Array<Record<string, any>>;
  tranCodes: Array<{ path: string; definition: Record<string, any> }>;
  tools: ToolFile[];
  skills: SkillFile[];
  triggers: Array<{ path: string; definition: Record<string, any> }>;
  clients: Array<Record<string, any>>;
  accountSets: AccountSetFile[];
  velocity: { limits: Array<Record<string, any>>; controls: VelocityControlFile[] };
}

/** One set of account-sets.json, checked. */
export interface AccountSetFile {
  accountSetId: string;
  code: string;
  name: string;
  description: string | null;
  normalBalanceType: 'DEBIT' | 'CREDIT';
  metadata: Record<string, unknown> | null;
  journalId: string | null;
  members: Array<{ memberType: 'ACCOUNT' | 'ACCOUNT_SET'; memberId: string }>;
}

/** One control of velocity.json, checked: the control's input, and where it is attached. */
export interface VelocityControlFile {
  control: Record<string, any>;
  attach: Array<{ accountId: string; journalId: string | null; params: Record<string, unknown> | null }>;
}

export class ProjectError extends Error {
  constructor(
    message: string,
    readonly file: string,
    readonly line?: number,
    readonly column?: number,
  ) {
    super(`${file}${line === undefined ? '' : `:${line}${column === undefined ? '' : `:${column}`}`}: ${message}`);
  }
}

/** Larger project files are refused before they are read (the server's limits are far smaller). */
const PROJECT_FILE_BYTES_MAX = 16 * 1024 * 1024;

/**
 * A project file's text: a regular file inside the project (a link may not lead out of it), of a
 * sane size, read only then.
 */
function readText(dir: string, path: string): string {
  const full = join(dir, path);
  let real: string;
  try {
    real = realpathSync(full);
  } catch (error) {
    throw new ProjectError(
      `cannot be read: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
      path,
    );
  }
  const root = realpathSync(dir);
  if (real !== root && !real.startsWith(root + sep)) throw new ProjectError('leads outside the project folder', path);
  const stat = statSync(real);
  if (!stat.isFile()) throw new ProjectError('is not a regular file', path);
  if (stat.size > PROJECT_FILE_BYTES_MAX)
    throw new ProjectError(`is ${stat.size} bytes; project files are at most ${PROJECT_FILE_BYTES_MAX}`, path);
  return readFileSync(real, 'utf8');
}

/** A JSON object: not null, not a list. */
function isObject(value: unknown): value is Record<string, any> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** A JSON object from a project file. */
function readObject(dir: string, path: string): Record<string, any> {
  const value = readJson(dir, path);
  if (!isObject(value)) throw new ProjectError('must be a JSON object', path);
  return value;
}

/** A JSON list of objects from a project file. */
function readList(dir: string, path: string, what: string): Array<Record<string, any>> {
  const value = readJson(dir, path);
  if (!Array.isArray(value)) throw new ProjectError(`must be a JSON array of ${what}`, path);
  value.forEach((item, i) => {
    if (!isObject(item)) throw new ProjectError(`item ${i} must be a JSON object`, path);
  });
  return value;
}

function isDirectory(full: string): boolean {
  return existsSync(full) && statSync(full).isDirectory();
}

function readJson(dir: string, path: string): any {
  const text = readText(dir, path);
  try {
    return JSON.parse(text);
  } catch (error) {
    const message = (error as Error).message;
    const position = /position (\d+)/.exec(message);
    if (position) {
      const before = text.slice(0, Number(position[1]));
      const line = before.split('\n').length;
      const column = before.length - before.lastIndexOf('\n');
      throw new ProjectError(`not valid JSON: ${message}`, path, line, column);
    }
    throw new ProjectError(`not valid JSON: ${message}`, path);
  }
}

function listJson(dir: string, folder: string): string[] {
  const full = join(dir, folder);
  if (!existsSync(full)) return [];
  if (!isDirectory(full)) throw new ProjectError('must be a folder', folder);
  return readdirSync(full)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => join(folder, f));
}

/** Kinds whose manifest is the whole tool (no program beside it): what they are called, and their config. */
const PROGRAMLESS: Record<string, { what: string; config: string }> = {
  model: { what: 'a model', config: '{provider, model, instructions, …}' },
  agent: { what: 'an agent', config: '{provider, model, instructions, …}' },
  http: { what: 'an http tool', config: '{integration, method, path, …}' },
};

/** Whether a manifest's kind has no program (a model, an agent, an http tool). */
export function isProgramless(manifest: Record<string, unknown>): boolean {
  return typeof manifest.kind === 'string' && Object.hasOwn(PROGRAMLESS, manifest.kind);
}

export function readProject(dir: string): Project {
  if (!existsSync(join(dir, 'tally.json'))) {
    throw new ProjectError(
      'no tally.json here: is this a Tally project folder?',
      relative(process.cwd(), join(dir, 'tally.json')) || 'tally.json',
    );
  }
  const meta = readObject(dir, 'tally.json');
  const accounts = existsSync(join(dir, 'accounts.json')) ? readList(dir, 'accounts.json', 'accounts') : [];
  const clients = existsSync(join(dir, 'clients.json')) ? readList(dir, 'clients.json', 'clients') : [];

  const tools: ToolFile[] = [];
  const toolDir = join(dir, 'tools');
  if (existsSync(toolDir)) {
    if (!isDirectory(toolDir)) throw new ProjectError('must be a folder', 'tools');
    const files = readdirSync(toolDir);
    for (const file of files.filter((f) => f.endsWith('.json'))) {
      // A manifest without its program would be skipped silently: say so instead. A model, an
      // agent or an http tool has no program: its manifest is the whole tool.
      const program = `${basename(file, '.json')}.js`;
      const manifest = readObject(dir, join('tools', file));
      if (isProgramless(manifest)) {
        const { what, config } = PROGRAMLESS[manifest.kind]!;
        if (files.includes(program))
          throw new ProjectError(
            `is ${what}, which has no program: remove ${join('tools', program)} or the kind`,
            join('tools', file),
          );
        if (!isObject(manifest.config))
          throw new ProjectError(`${what} needs "config": ${config}`, join('tools', file));
        tools.push({
          name: basename(file, '.json'),
          programPath: join('tools', file),
          manifestPath: join('tools', file),
          src: '',
          manifest,
        });
        continue;
      }
      if (!files.includes(program))
        throw new ProjectError(`has no ${join('tools', program)} beside it (the tool's program)`, join('tools', file));
    }
    for (const file of files.filter((f) => f.endsWith('.js')).sort()) {
      const name = basename(file, '.js');
      const programPath = join('tools', file);
      const manifestPath = join('tools', `${name}.json`);
      if (!existsSync(join(dir, manifestPath)))
        throw new ProjectError(`has no ${manifestPath} beside it (description, schemas, policies)`, programPath);
      const manifest = readObject(dir, manifestPath);
      for (const key of ['tools', 'skills', 'policies']) {
        const list = manifest[key];
        if (list !== undefined && (!Array.isArray(list) || !list.every(isObject))) {
          throw new ProjectError(`"${key}" must be a JSON array of objects`, manifestPath);
        }
      }
      if (manifest.execution !== undefined && !isObject(manifest.execution)) {
        throw new ProjectError('"execution" must be a JSON object', manifestPath);
      }
      tools.push({ name, programPath, manifestPath, src: readText(dir, programPath), manifest });
    }
  }
  return {
    dir,
    name: String(meta.name ?? basename(dir)),
    server: typeof meta.server === 'string' ? meta.server : null,
    accounts,
    tranCodes: listJson(dir, 'tran-codes').map((path) => ({ path, definition: readObject(dir, path) })),
    tools,
    skills: listSkills(dir).map((path) => parseSkill(path, readText(dir, path))),
    triggers: listJson(dir, 'triggers').map((path) => ({ path, definition: readObject(dir, path) })),
    clients,
    accountSets: existsSync(join(dir, ACCOUNT_SETS)) ? checkAccountSets(readJson(dir, ACCOUNT_SETS)) : [],
    velocity: existsSync(join(dir, VELOCITY)) ? checkVelocity(readJson(dir, VELOCITY)) : { limits: [], controls: [] },
  };
}

export const ACCOUNT_SETS = 'account-sets.json';
export const VELOCITY = 'velocity.json';

/**
 * Checks of account-sets.json and velocity.json: each names the file and the field. Values the
 * server checks anyway (CEL, names) are only type-checked here; unknown fields are refused, since
 * they would otherwise be dropped without a word.
 */
class Fields {
  constructor(
    readonly file: string,
    readonly at: string,
    readonly value: Record<string, any>,
  ) {}

  static of(file: string, at: string, value: unknown, known: string[]): Fields {
    if (!isObject(value))
      throw new ProjectError(`${at || 'the file'} must be a JSON object, got ${describe(value)}`, file);
    const unknown = Object.keys(value).find((k) => !known.includes(k));
    if (unknown !== undefined)
      throw new ProjectError(`${at ? `${at}.` : ''}${unknown} is not a field here (fields: ${known.join(', ')})`, file);
    return new Fields(file, at, value);
  }

  path(key: string): string {
    return this.at ? `${this.at}.${key}` : key;
  }

  fail(key: string, what: string): never {
    throw new ProjectError(`${this.path(key)} ${what}, got ${describe(this.value[key])}`, this.file);
  }

  text(key: string): string {
    const v = this.value[key];
    if (typeof v !== 'string' || v.trim() === '') this.fail(key, 'must be a non-empty string');
    return v;
  }

  optionalText(key: string): string | null {
    const v = this.value[key];
    if (v === undefined || v === null) return null;
    if (typeof v !== 'string') this.fail(key, 'must be a string');
    return v;
  }

  uuid(key: string): string {
    const v = this.value[key];
    if (!isUuid(v)) this.fail(key, 'must be a UUID');
    return v.toLowerCase();
  }

  optionalUuid(key: string): string | null {
    return this.value[key] === undefined || this.value[key] === null ? null : this.uuid(key);
  }

  oneOf<T extends string>(key: string, values: readonly T[], fallback?: T): T {
    const v = this.value[key];
    if ((v === undefined || v === null) && fallback !== undefined) return fallback;
    if (!values.includes(v)) this.fail(key, `must be one of ${values.join(', ')}`);
    return v;
  }

  optionalObject(key: string): Record<string, unknown> | null {
    const v = this.value[key];
    if (v === undefined || v === null) return null;
    if (!isObject(v)) this.fail(key, 'must be a JSON object');
    return v;
  }

  list(key: string, required = false): unknown[] {
    const v = this.value[key];
    if ((v === undefined || v === null) && !required) return [];
    if (!Array.isArray(v)) this.fail(key, 'must be a JSON array');
    return v;
  }
}

function describe(value: unknown): string {
  if (value === undefined) return 'nothing';
  const text = JSON.stringify(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

const MEMBER_TYPES = ['ACCOUNT', 'ACCOUNT_SET'] as const;
const SIDES = ['DEBIT', 'CREDIT'] as const;

function checkAccountSets(value: unknown): AccountSetFile[] {
  if (!Array.isArray(value))
    throw new ProjectError(`must be a JSON array of account sets, got ${describe(value)}`, ACCOUNT_SETS);
  const ids = new Set<string>();
  const codes = new Set<string>();
  return value.map((item, i) => {
    const f = Fields.of(ACCOUNT_SETS, `[${i}]`, item, [
      'accountSetId',
      'code',
      'name',
      'description',
      'normalBalanceType',
      'metadata',
      'journalId',
      'members',
    ]);
    const set: AccountSetFile = {
      accountSetId: f.uuid('accountSetId'),
      code: f.text('code'),
      name: f.text('name'),
      description: f.optionalText('description'),
      normalBalanceType: f.oneOf('normalBalanceType', SIDES, 'CREDIT'),
      metadata: f.optionalObject('metadata'),
      journalId: f.optionalUuid('journalId'),
      members: f.list('members').map((member, j) => {
        const m = Fields.of(ACCOUNT_SETS, `[${i}].members[${j}]`, member, ['memberType', 'memberId']);
        return { memberType: m.oneOf('memberType', MEMBER_TYPES), memberId: m.uuid('memberId') };
      }),
    };
    if (ids.has(set.accountSetId)) f.fail('accountSetId', 'is given to two sets');
    if (codes.has(set.code)) f.fail('code', 'is given to two sets');
    const seen = new Set<string>();
    set.members.forEach((m, j) => {
      if (seen.has(m.memberId))
        throw new ProjectError(`[${i}].members[${j}].memberId ${m.memberId} is listed twice`, ACCOUNT_SETS);
      if (m.memberId === set.accountSetId)
        throw new ProjectError(`[${i}].members[${j}].memberId: a set cannot contain itself`, ACCOUNT_SETS);
      seen.add(m.memberId);
    });
    ids.add(set.accountSetId);
    codes.add(set.code);
    return set;
  });
}

const ENFORCEMENTS = ['REJECT', 'VOID', 'WARN'] as const;

function checkVelocity(value: unknown): Project['velocity'] {
  const top = Fields.of(VELOCITY, '', value, ['limits', 'controls']);
  const limitIds = new Set<string>();
  const limits = top.list('limits').map((item, i) => {
    const f = Fields.of(VELOCITY, `limits[${i}]`, item, [
      'velocityLimitId',
      'name',
      'description',
      'window',
      'condition',
      'currency',
      'limit',
      'params',
    ]);
    const id = f.uuid('velocityLimitId');
    if (limitIds.has(id)) f.fail('velocityLimitId', 'is given to two limits');
    limitIds.add(id);
    f.text('name');
    f.optionalText('description');
    f.optionalText('condition');
    f.optionalText('currency');
    f.list('window').forEach((k, j) => {
      const key = Fields.of(VELOCITY, `limits[${i}].window[${j}]`, k, ['alias', 'value', 'type']);
      key.text('alias');
      key.text('value');
      key.optionalText('type');
    });
    const spec = Fields.of(VELOCITY, `limits[${i}].limit`, f.value.limit, ['timestampSource', 'balance']);
    spec.optionalText('timestampSource');
    const balance = spec.list('balance', true);
    if (balance.length === 0) spec.fail('balance', 'needs at least one {layer, amount}');
    balance.forEach((b, j) => {
      const entry = Fields.of(VELOCITY, `limits[${i}].limit.balance[${j}]`, b, [
        'layer',
        'amount',
        'normalBalanceType',
        'start',
        'end',
      ]);
      entry.text('layer');
      entry.text('amount');
      for (const key of ['normalBalanceType', 'start', 'end']) entry.optionalText(key);
    });
    f.list('params').forEach((p, j) => {
      const param = Fields.of(VELOCITY, `limits[${i}].params[${j}]`, p, ['name', 'type', 'default', 'description']);
      param.text('name');
      for (const key of ['type', 'default', 'description']) param.optionalText(key);
    });
    return { ...f.value, velocityLimitId: id };
  });
  const controlIds = new Set<string>();
  const controls = top.list('controls').map((item, i): VelocityControlFile => {
    const f = Fields.of(VELOCITY, `controls[${i}]`, item, [
      'velocityControlId',
      'name',
      'description',
      'enforcement',
      'condition',
      'velocityLimitIds',
      'attach',
    ]);
    const id = f.uuid('velocityControlId');
    if (controlIds.has(id)) f.fail('velocityControlId', 'is given to two controls');
    controlIds.add(id);
    f.text('name');
    f.optionalText('description');
    f.optionalText('condition');
    if (f.value.enforcement !== undefined && f.value.enforcement !== null) {
      Fields.of(VELOCITY, `controls[${i}].enforcement`, f.value.enforcement, ['action']).oneOf('action', ENFORCEMENTS);
    }
    const velocityLimitIds = f.list('velocityLimitIds').map((limitId, j) => {
      if (!isUuid(limitId))
        throw new ProjectError(
          `controls[${i}].velocityLimitIds[${j}] must be a UUID, got ${describe(limitId)}`,
          VELOCITY,
        );
      return limitId.toLowerCase();
    });
    if (new Set(velocityLimitIds).size !== velocityLimitIds.length) f.fail('velocityLimitIds', 'lists a limit twice');
    const targets = new Set<string>();
    const attach = f.list('attach').map((a, j) => {
      const at = Fields.of(VELOCITY, `controls[${i}].attach[${j}]`, a, ['accountId', 'journalId', 'params']);
      const accountId = at.uuid('accountId');
      if (targets.has(accountId)) at.fail('accountId', 'is attached twice');
      targets.add(accountId);
      return { accountId, journalId: at.optionalUuid('journalId'), params: at.optionalObject('params') };
    });
    const { attach: _attach, ...control } = f.value;
    return { control: { ...control, velocityControlId: id, velocityLimitIds }, attach };
  });
  return { limits, controls };
}

function listSkills(dir: string): string[] {
  const full = join(dir, 'skills');
  if (!existsSync(full)) return [];
  if (!isDirectory(full)) throw new ProjectError('must be a folder', 'skills');
  return readdirSync(full)
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => join('skills', f));
}

/** A front matter value: plain text, or a JSON string when it starts with a double quote. */
function scalar(raw: string, path: string, line: number): string {
  const value = raw.trim();
  if (!value.startsWith('"')) return value;
  try {
    const parsed: unknown = JSON.parse(value);
    if (typeof parsed === 'string') return parsed;
  } catch {
    // reported below
  }
  throw new ProjectError(
    `${JSON.stringify(value)} is not a quoted string (write it as JSON: "…", with \\" for a quote inside)`,
    path,
    line,
  );
}

/**
 * A skill file: the front matter holds only `description: …`, `tools: [a, b]` and `skillId: …`
 * (one per line; blank lines and lines starting with # are skipped); everything after the closing
 * `---` is the body (leading blank lines and trailing whitespace dropped, line ends as \n).
 */
export function parseSkill(path: string, text: string): SkillFile {
  const lines = text
    .replace(/^\uFEFF/, '')
    .replace(/\r\n?/g, '\n')
    .split('\n');
  if (lines[0]?.trim() !== '---')
    throw new ProjectError(
      'must start with a front matter block: a line "---", then description, tools and skillId, then "---"',
      path,
      1,
    );
  const end = lines.findIndex((l, i) => i > 0 && l.trim() === '---');
  if (end < 0) throw new ProjectError('the front matter block has no closing "---" line', path, 1);
  const seen = new Map<string, string>();
  for (let i = 1; i < end; i++) {
    const line = lines[i]!;
    if (line.trim() === '' || line.trimStart().startsWith('#')) continue;
    const match = /^([A-Za-z]+)\s*:(.*)$/.exec(line);
    if (!match)
      throw new ProjectError(
        `${JSON.stringify(line)} is not "key: value" (keys: description, tools, skillId)`,
        path,
        i + 1,
      );
    const key = match[1]!;
    if (key !== 'description' && key !== 'tools' && key !== 'skillId')
      throw new ProjectError(`unknown key ${JSON.stringify(key)} (keys: description, tools, skillId)`, path, i + 1);
    if (seen.has(key)) throw new ProjectError(`${key} is given twice`, path, i + 1);
    const value = match[2]!;
    if (key === 'tools') {
      const list = value.trim();
      if (!list.startsWith('[') || !list.endsWith(']'))
        throw new ProjectError(
          `tools must be a list in brackets, e.g. [balance, transfer], got ${JSON.stringify(list)}`,
          path,
          i + 1,
        );
      const inner = list.slice(1, -1).trim();
      const names = inner === '' ? [] : inner.split(',').map((item) => scalar(item, path, i + 1));
      if (names.some((n) => n === ''))
        throw new ProjectError(`tools has an empty name: ${JSON.stringify(list)}`, path, i + 1);
      seen.set(key, JSON.stringify(names));
    } else {
      seen.set(key, scalar(value, path, i + 1));
    }
  }
  const body = lines
    .slice(end + 1)
    .join('\n')
    .replace(/^(?:[ \t]*\n)+/, '')
    .replace(/\s+$/, '');
  return {
    name: basename(path, '.md'),
    path,
    skillId: seen.get('skillId') ?? null,
    description: seen.get('description') ?? null,
    tools: seen.has('tools') ? (JSON.parse(seen.get('tools')!) as string[]) : [],
    body,
  };
}
