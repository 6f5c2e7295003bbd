import type { Cel } from '../cel/cel.js';
import type { Clock } from '../clock.js';
import { alreadyExists, badInput, EngineError, limitExceeded, notFound, quote } from '../errors.js';
import { type Limits, TOOL_TITLE_MAX } from '../limits.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { RecordCache } from '../storage/record-cache.js';
import type { ActionRow, ActionStatements, ActionVersionRow } from '../storage/statements/actions.js';
import { type Policy, type PolicyAction, type PolicyEffect, parsePolicies } from '../policy/policy.js';
import { isReadOnly } from './tool-access.js';

export type { Policy, PolicyAction, PolicyEffect };
import type { SchemaCache } from './schemas.js';
import { checkModelConfig } from '../agents/config.js';
import type { ModelProviders } from '../models/providers.js';

export type ActionKind = 'tool' | 'graphql' | 'model' | 'agent';

/** Kinds that call a model over the network: they run only in the worker, never inside a transaction. */
export function runsOutsideTransactions(kind: ActionKind): boolean {
  return kind === 'model' || kind === 'agent';
}
export type VersionStatus = 'ACTIVE' | 'LOCKED' | 'DRAFT';

export interface ToolReference {
  name: string;
  version: number | null;
  /** Top-level input properties fixed by CEL over event, tool.input and execution.input (an agent's: session too). */
  input: Record<string, string> | null;
  /** An agent's reference: a person approves each call (when `when`, CEL over `input`, is true) before it runs. */
  approval?: { when: string | null; timeoutMs: number | null } | null;
}

/** A skill an agent declares: pinned, or the latest version when a run starts. */
export interface SkillReference {
  name: string;
  version: number | null;
}

export interface ExecutionSettings {
  maxAttempts: number;
  backoff: { initialMs: number; multiplier: number; maxMs: number };
  timeoutMs: number | null;
  /** CEL over `error` {code, message, attempt}: retry a failed attempt only when true (null: every retryable failure). Absent in older versions. */
  retryIf?: string | null;
  /** Keep a read-only tool's result this long for the same input (null: no caching). Absent in older versions. */
  cacheTtlMs?: number | null;
}

export interface ToolDefinition {
  name: string;
  /** A short human name (absent in older versions: null). */
  title?: string | null;
  description: string;
  /** Other names the tool answers to, unique across all actions (absent in older versions: none). */
  aliases?: string[];
  /** Free JSON object, returned as it is (absent in older versions: null). */
  metadata?: Record<string, unknown> | null;
  inputSchema: Record<string, unknown>;
  outputSchema: Record<string, unknown> | null;
  /** An agent's: the schema of its sessions' input; an agent with one runs only in sessions. */
  sessionSchema?: Record<string, unknown> | null;
}

/** One immutable version of an action, as stored. */
export interface ActionVersionDocument {
  actionId: string;
  name: string;
  version: number;
  kind: ActionKind;
  config: Record<string, unknown>;
  tool: ToolDefinition;
  tools: ToolReference[];
  /** An agent's skills (absent in versions made before skills). */
  skills?: SkillReference[];
  /** Tools run before a call (may change its input, or refuse it) and after it (may change its output). */
  hooks?: { before?: ToolReference | null; after?: ToolReference | null };
  policies: Policy[];
  execution: ExecutionSettings;
  created: string;
}

export interface ActionVersion extends ActionVersionDocument {
  status: VersionStatus;
  modified: string;
}

export interface ActionInput {
  name?: string | null;
  kind?: string | null;
  config?: unknown;
  tool?: {
    name?: string | null;
    title?: string | null;
    description?: string | null;
    aliases?: string[] | null;
    metadata?: unknown;
    inputSchema?: unknown;
    outputSchema?: unknown;
    sessionSchema?: unknown;
  } | null;
  tools?: Array<{
    name: string;
    version?: number | null;
    input?: unknown;
    approval?: { when?: string | null; timeoutMs?: number | null } | null;
  }> | null;
  skills?: Array<{ name: string; version?: number | null }> | null;
  hooks?: {
    before?: { name: string; version?: number | null } | null;
    after?: { name: string; version?: number | null } | null;
  } | null;
  policies?: Array<{ effect: PolicyEffect; actions: PolicyAction[]; resources: string[]; assertions?: unknown }> | null;
  execution?: {
    maxAttempts?: number | null;
    backoff?: { initialMs?: number | null; multiplier?: number | null; maxMs?: number | null } | null;
    timeoutMs?: number | null;
    retryIf?: string | null;
    cacheTtlMs?: number | null;
  } | null;
  draft?: boolean | null;
}

/** Names of the native tools every tenant has (a program's graphql() and cel()). */
export const NATIVE_TOOLS = ['graphql', 'cel'] as const;
/** The agent runner's built-in tool that loads a declared skill's body (offered under this name in src/agents/runner.ts). */
export const LOAD_SKILL_TOOL = 'load_skill';
/**
 * Tool names the engine keeps for its own tools: no action's name, tool.name or alias may be one
 * (an action called load_skill would stand in for an agent's skill loader).
 */
export const RESERVED_TOOL_NAMES: readonly string[] = [...NATIVE_TOOLS, LOAD_SKILL_TOOL];
const NAME_PATTERN = /^[a-z][a-z0-9_]{0,63}$/;
export const TOOL_ALIASES_MAX = 8;
/** The longest execution.cacheTtlMs: one hour. */
export const CACHE_TTL_MS_MAX = 3_600_000;
/** The longest execution.backoff.initialMs and maxMs: one day. */
export const BACKOFF_MS_MAX = 86_400_000;

export const DEFAULT_EXECUTION: ExecutionSettings = {
  maxAttempts: 3,
  backoff: { initialMs: 1000, multiplier: 2, maxMs: 60_000 },
  timeoutMs: null,
  retryIf: null,
  cacheTtlMs: null,
};

export interface ActionDeps {
  st: ActionStatements;
  /**
   * Parsed version documents by actionId@version, with the stored text they were parsed from: a
   * version number can stand for another document after a rollback (and another connection's
   * commit), so a parse is reused only for the same text.
   */
  documents: Map<string, { text: string; document: ActionVersionDocument }>;
  /** Whole versions (document and status) by actionId@version, dropped when the epoch moves. */
  versions: RecordCache<ActionVersion>;
  schemas: SchemaCache;
  cel: Cel;
  clock: Clock;
  limits: Readonly<Limits>;
  /** The operator's model providers (model and agent configs must name one); null when none are configured. */
  providers: ModelProviders | null;
  /** Throws NOT_FOUND unless the skill (and the pinned version) exists (src/skills). */
  checkSkill(ref: SkillReference, what: string): void;
  /** Compile-checks a program; returns a problem with line and column, or null. */
  checkProgram(fileName: string, source: string): { message: string; line?: number; column?: number } | null;
}

export function versionKey(actionId: string, version: number): string {
  return `${actionId}@${version}`;
}

function toVersion(row: ActionVersionRow): ActionVersion {
  return {
    ...(JSON.parse(row.document) as ActionVersionDocument),
    status: row.status as VersionStatus,
    modified: row.modified,
  };
}

/** Build, validate and compile a version document; every problem names the field at fault. */
function buildDocument(
  deps: ActionDeps,
  base: { actionId: string; name: string; version: number; created: string },
  input: ActionInput,
  previous: ActionVersionDocument | null,
): ActionVersionDocument {
  const kind = (input.kind ?? previous?.kind ?? 'tool') as ActionKind;
  if (kind !== 'tool' && kind !== 'graphql' && kind !== 'model' && kind !== 'agent') {
    throw new EngineError('BAD_REQUEST', `kind ${quote(kind)} is not supported`, {
      hint: 'Use "tool" (a JavaScript program), "graphql" (the native GraphQL tool with narrower policies), "model" (one model call) or "agent" (a model that calls the tools it declares).',
    });
  }
  if (previous && kind !== previous.kind) {
    throw new EngineError('BAD_REQUEST', `an action cannot change kind (${previous.kind} → ${kind})`, {
      hint: 'Create a new action instead.',
    });
  }
  const config = (input.config ?? previous?.config ?? null) as Record<string, unknown> | null;
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw new EngineError('BAD_REQUEST', `config must be an object, got ${quote(config)}`, {
      hint:
        kind === 'tool'
          ? 'Send config: {runtime: "javascript", src: "function run(event) { ... }"}.'
          : kind === 'graphql'
            ? 'Send config: {version: 1}.'
            : 'Send config: {provider: "<a configured provider>", model: "<one of its models>", instructions: "…"}.',
    });
  }
  const fileName = `${base.name}@${base.version}`;
  if (kind === 'tool') {
    if (config.runtime !== 'javascript') {
      throw new EngineError('BAD_REQUEST', `config.runtime ${quote(config.runtime)} is not supported`, {
        hint: 'Use runtime: "javascript".',
      });
    }
    if (typeof config.src !== 'string' || config.src.trim() === '') {
      throw new EngineError('BAD_REQUEST', 'config.src must be the program text', {
        hint: 'Define function run(event) { ... }.',
      });
    }
    const bytes = Buffer.byteLength(config.src);
    if (bytes > deps.limits.programBytesMax) {
      throw limitExceeded(
        'programBytesMax',
        deps.limits.programBytesMax,
        bytes,
        `config.src is ${bytes} bytes; programBytesMax is ${deps.limits.programBytesMax}`,
      );
    }
    const problem = deps.checkProgram(fileName, config.src);
    if (problem) {
      const at =
        problem.line === undefined
          ? ''
          : ` at line ${problem.line}${problem.column === undefined ? '' : `, column ${problem.column}`}`;
      throw new EngineError('BAD_REQUEST', `the program of ${fileName} does not compile: ${problem.message}${at}`, {
        hint: 'Fix the syntax; the program must define function run(event).',
        details: { file: fileName, line: problem.line, column: problem.column },
      });
    }
  } else if (kind === 'model' || kind === 'agent') {
    checkModelConfig(kind, config, deps.providers, deps.limits);
  } else if (config.version !== 1) {
    throw new EngineError(
      'BAD_REQUEST',
      `config.version ${quote(config.version)} is not a native graphql tool version`,
      { hint: 'Use config: {version: 1}.' },
    );
  }

  const toolIn = input.tool ?? null;
  const tool: ToolDefinition = {
    name: toolIn?.name ?? previous?.tool.name ?? base.name,
    description: toolIn?.description ?? previous?.tool.description ?? '',
    inputSchema: (toolIn?.inputSchema ??
      previous?.tool.inputSchema ??
      (kind === 'graphql' ? GRAPHQL_INPUT_SCHEMA : { type: 'object' })) as Record<string, unknown>,
    outputSchema: (toolIn?.outputSchema === undefined
      ? (previous?.tool.outputSchema ?? null)
      : toolIn.outputSchema) as Record<string, unknown> | null,
  };
  const title = toolIn?.title === undefined ? (previous?.tool.title ?? null) : toolIn.title;
  if (title !== null) {
    if (typeof title !== 'string') throw badInput('tool.title must be a string', title);
    if (title.length > TOOL_TITLE_MAX) {
      throw limitExceeded(
        'toolTitleMax',
        TOOL_TITLE_MAX,
        title.length,
        `tool.title ${quote(`${title.slice(0, 40)}…`)} is ${title.length} characters; at most ${TOOL_TITLE_MAX}`,
        { hint: 'A title is a short human name; put the rest in the description.' },
      );
    }
    tool.title = title;
  }
  const aliases = checkAliases(
    deps,
    base,
    toolIn?.aliases === undefined ? (previous?.tool.aliases ?? []) : (toolIn.aliases ?? []),
  );
  if (aliases.length > 0) tool.aliases = aliases;
  const metadata = toolIn?.metadata === undefined ? (previous?.tool.metadata ?? null) : toolIn.metadata;
  if (metadata !== null) {
    if (typeof metadata !== 'object' || Array.isArray(metadata)) {
      throw badInput(
        'tool.metadata must be a JSON object',
        metadata,
        'Send an object, e.g. {"owner": "payments"}, or null.',
      );
    }
    tool.metadata = metadata as Record<string, unknown>;
  }
  const sessionSchema = (
    toolIn?.sessionSchema === undefined ? (previous?.tool.sessionSchema ?? null) : toolIn.sessionSchema
  ) as Record<string, unknown> | null;
  if (sessionSchema !== null) {
    if (kind !== 'agent')
      throw new EngineError('BAD_REQUEST', `tool.sessionSchema is for agents; this is a ${kind}`, {
        hint: 'Leave sessionSchema out, or make the action an agent.',
      });
    deps.schemas.compile(sessionSchema, 'tool.sessionSchema');
    tool.sessionSchema = sessionSchema;
  }
  if (!NAME_PATTERN.test(tool.name)) {
    throw new EngineError('BAD_REQUEST', `tool.name ${quote(tool.name)} is not a tool name`, {
      hint: 'Use lower_snake_case: a letter, then letters, digits and _.',
    });
  }
  checkNotReserved(base.name, 'action name');
  checkNotReserved(tool.name, 'tool.name');
  deps.schemas.compile(tool.inputSchema, 'tool.inputSchema');
  if (tool.outputSchema !== null) deps.schemas.compile(tool.outputSchema, 'tool.outputSchema');

  const tools =
    input.tools === undefined || input.tools === null
      ? (previous?.tools ?? [])
      : input.tools.map((ref, i) => checkReference(deps, ref, i, kind));
  if (tools.length > deps.limits.toolReferencesMax) {
    throw limitExceeded(
      'toolReferencesMax',
      deps.limits.toolReferencesMax,
      tools.length,
      `${tools.length} tool references; toolReferencesMax is ${deps.limits.toolReferencesMax}`,
    );
  }
  const seen = new Set<string>();
  for (const ref of tools) {
    if (seen.has(ref.name)) throw new EngineError('BAD_REQUEST', `tool ${quote(ref.name)} is referenced twice`);
    seen.add(ref.name);
  }
  const policies =
    input.policies === undefined || input.policies === null
      ? (previous?.policies ?? [])
      : parsePolicies(deps.cel, input.policies, deps.limits.policiesMax);
  const execution = checkExecution(deps, input.execution, previous?.execution ?? DEFAULT_EXECUTION);
  if (kind === 'agent') checkDescribed(deps, tools);
  const skillsIn = input.skills === undefined || input.skills === null ? (previous?.skills ?? []) : input.skills;
  if (skillsIn.length > 0 && kind !== 'agent')
    throw new EngineError('BAD_REQUEST', `skills are for agents; this is a ${kind}`, {
      hint: 'Leave skills out, or make the action an agent.',
    });
  if (skillsIn.length > deps.limits.toolReferencesMax)
    throw limitExceeded(
      'toolReferencesMax',
      deps.limits.toolReferencesMax,
      skillsIn.length,
      `${skillsIn.length} skills; toolReferencesMax is ${deps.limits.toolReferencesMax}`,
    );
  const skills: SkillReference[] = skillsIn.map((ref, i) => {
    const checked = { name: ref.name, version: ref.version ?? null };
    deps.checkSkill(checked, `skills[${i}]`);
    return checked;
  });
  if (new Set(skills.map((k) => k.name)).size !== skills.length)
    throw new EngineError('BAD_REQUEST', 'a skill is declared twice', { hint: 'Declare each skill once.' });
  const hooks =
    input.hooks === undefined
      ? (previous?.hooks ?? null)
      : input.hooks === null
        ? null
        : checkHooks(deps, base.name, kind, input.hooks);
  const document: ActionVersionDocument = {
    ...base,
    kind,
    config,
    tool,
    tools,
    ...(skills.length ? { skills } : {}),
    ...(hooks && (hooks.before || hooks.after) ? { hooks } : {}),
    policies,
    execution,
  };
  if (execution.cacheTtlMs != null && !isReadOnly(deps, { ...document, status: 'DRAFT', modified: base.created })) {
    throw new EngineError(
      'BAD_REQUEST',
      `execution.cacheTtlMs ${execution.cacheTtlMs}: ${base.name} is not read-only (its policies, or those of a tool it references, allow writes)`,
      {
        hint: 'a tool whose policies allow writes cannot cache: its result depends on what it changed',
      },
    );
  }
  // The program has its own bound; the rest (description, schemas, policies, references) this one.
  // A version no larger than the one before passes, so a tool made under a higher limit can still
  // get a new program.
  const restBytes = nonProgramBytes(document);
  if (restBytes > deps.limits.jsonBytesMax && (previous === null || restBytes > nonProgramBytes(previous))) {
    throw limitExceeded(
      'jsonBytesMax',
      deps.limits.jsonBytesMax,
      restBytes,
      `the action version besides its program is ${restBytes} bytes; jsonBytesMax is ${deps.limits.jsonBytesMax}`,
      {
        hint: 'Shorten the description, the schemas or the policies.',
      },
    );
  }
  return document;
}

function nonProgramBytes(document: ActionVersionDocument): number {
  return Buffer.byteLength(JSON.stringify({ ...document, config: { ...document.config, src: '' } }));
}

const GRAPHQL_INPUT_SCHEMA = deepFreeze({
  type: 'object',
  properties: { query: { type: 'string' }, variables: { type: 'object' }, operationName: { type: 'string' } },
  required: ['query'],
  additionalProperties: false,
});

/** Does a parsed CEL expression name this identifier anywhere (as a variable, not a field)? */
export function readsIdentifier(ast: unknown, name: string): boolean {
  const stack: unknown[] = [ast];
  while (stack.length > 0) {
    const node = stack.pop();
    if (Array.isArray(node)) {
      stack.push(...node);
    } else if (node !== null && typeof node === 'object') {
      const { op, args } = node as { op?: unknown; args?: unknown };
      if (op === 'id' && args === name) return true;
      stack.push(args);
    }
  }
  return false;
}

/**
 * An action's before/after hooks: tool or graphql actions that exist (a pinned version too), never
 * the action itself, never a model or agent (a hook runs inside the call's transaction).
 */
function checkHooks(
  deps: ActionDeps,
  name: string,
  kind: ActionKind,
  hooks: NonNullable<ActionInput['hooks']>,
): NonNullable<ActionVersionDocument['hooks']> {
  if (runsOutsideTransactions(kind))
    throw new EngineError('BAD_REQUEST', `hooks are for tools; this is a ${kind}`, {
      hint: 'Hook the tools the agent calls instead.',
    });
  const one = (
    ref: { name: string; version?: number | null } | null | undefined,
    phase: 'before' | 'after',
  ): ToolReference | null => {
    if (ref == null) return null;
    const what = `hooks.${phase}`;
    if ((NATIVE_TOOLS as readonly string[]).includes(ref.name))
      throw new EngineError('BAD_REQUEST', `${what} cannot be the native ${ref.name} tool`, {
        hint: 'Hook a tool of your own.',
      });
    if (ref.name === name)
      throw new EngineError('BAD_REQUEST', `${what} cannot be ${name} itself`, { hint: 'A hook is another tool.' });
    const target = deps.st.actionByName.get(ref.name);
    if (!target)
      throw new EngineError('NOT_FOUND', `${what} refers to tool ${quote(ref.name)}, which does not exist`, {
        hint: 'Create the hook tool first.',
      });
    const version = deps.st.version.get(target.action_id, ref.version ?? target.latest_version);
    if (!version)
      throw new EngineError(
        'NOT_FOUND',
        `${what} pins ${ref.name} version ${ref.version}; its latest is ${target.latest_version}`,
      );
    const hookKind = (JSON.parse(version.document) as ActionVersionDocument).kind;
    if (runsOutsideTransactions(hookKind))
      throw new EngineError(
        'BAD_REQUEST',
        `${what} refers to ${ref.name}, a ${hookKind}: a hook runs inside the call's transaction`,
        { hint: 'Use a tool or graphql action as a hook.' },
      );
    return { name: ref.name, version: ref.version ?? null, input: null };
  };
  return { before: one(hooks.before, 'before'), after: one(hooks.after, 'after') };
}

function checkReference(
  deps: ActionDeps,
  ref: {
    name: string;
    version?: number | null;
    input?: unknown;
    approval?: { when?: string | null; timeoutMs?: number | null } | null;
  },
  i: number,
  kind: ActionKind,
): ToolReference {
  const what = `tools[${i}]`;
  if (!(NATIVE_TOOLS as readonly string[]).includes(ref.name)) {
    const target = deps.st.actionByName.get(ref.name);
    if (!target) {
      throw new EngineError('NOT_FOUND', `${what} refers to tool ${quote(ref.name)}, which does not exist`, {
        hint: 'Create that tool first, or fix the name.',
      });
    }
    if (ref.version != null && !deps.st.version.get(target.action_id, ref.version)) {
      throw new EngineError(
        'NOT_FOUND',
        `${what} pins ${ref.name} version ${ref.version}; its latest is ${target.latest_version}`,
      );
    }
  }
  let input: Record<string, string> | null = null;
  if (ref.input != null) {
    if (typeof ref.input !== 'object' || Array.isArray(ref.input)) {
      throw new EngineError('BAD_REQUEST', `${what}.input must map input properties to CEL expressions`);
    }
    input = {};
    for (const [prop, expression] of Object.entries(ref.input as Record<string, unknown>)) {
      if (typeof expression !== 'string')
        throw badInput(`${what}.input.${prop} must be a CEL expression string`, expression);
      let compiled: unknown;
      try {
        compiled = deps.cel.compile(expression);
      } catch (error) {
        throw new EngineError('BAD_REQUEST', `${what}.input.${prop}: ${(error as Error).message}`);
      }
      if (kind !== 'agent' && readsIdentifier((compiled as { ast?: unknown }).ast, 'session')) {
        throw new EngineError(
          'BAD_REQUEST',
          `${what}.input.${prop} reads session (${quote(expression)}): only an agent's references run in a session`,
          {
            hint: 'Reference input of a tool sees event, tool.input and execution.input; take the value from one of those.',
          },
        );
      }
      input[prop] = expression;
    }
  }
  let approval: ToolReference['approval'] = null;
  if (ref.approval != null) {
    if (kind !== 'agent')
      throw new EngineError('BAD_REQUEST', `${what}.approval is for an agent's references; this is a ${kind}`, {
        hint: 'A person approves calls an agent’s model asks for.',
      });
    const when = ref.approval.when ?? null;
    if (when !== null) {
      try {
        deps.cel.compile(when);
      } catch (error) {
        throw new EngineError('BAD_REQUEST', `${what}.approval.when: ${(error as Error).message}`, {
          hint: 'A CEL expression over input, e.g. "decimal(input.amount) > decimal(\\"1000\\")".',
        });
      }
    }
    // Stored as written (null: approvalTimeoutMsMax when the call is asked), so a redeploy of the same file is unchanged.
    const timeoutMs = ref.approval.timeoutMs ?? null;
    if (timeoutMs !== null && (!Number.isInteger(timeoutMs) || timeoutMs < 1))
      throw badInput(`${what}.approval.timeoutMs must be a positive integer`, timeoutMs);
    if (timeoutMs !== null && timeoutMs > deps.limits.approvalTimeoutMsMax)
      throw limitExceeded(
        'approvalTimeoutMsMax',
        deps.limits.approvalTimeoutMsMax,
        timeoutMs,
        `${what}.approval.timeoutMs ${timeoutMs} is over approvalTimeoutMsMax (${deps.limits.approvalTimeoutMsMax})`,
      );
    approval = { when, timeoutMs };
  }
  return { name: ref.name, version: ref.version ?? null, input, ...(approval ? { approval } : {}) };
}

/** Refuse a reserved tool name (graphql, cel, load_skill) as `what`: the one check for names, tool names and aliases. */
function checkNotReserved(name: string, what: string): void {
  if (!RESERVED_TOOL_NAMES.includes(name)) return;
  throw new EngineError(
    'ALREADY_EXISTS',
    `${what} ${quote(name)} is a reserved tool name: ${RESERVED_TOOL_NAMES.join(', ').replace(/, ([^,]*)$/, ' and $1')} are the engine's own tools`,
    {
      hint: `Rename it (e.g. my_${name}); a graphql-kind action narrows the native graphql tool under a name of its own.`,
      details: { name, reserved: [...RESERVED_TOOL_NAMES] },
    },
  );
}

const TAKEN_HINT =
  "Choose another name: an action's name, and every alias any of its versions has (DRAFT, ACTIVE or LOCKED: each can be activated), are its own for the action's whole life.";

/**
 * A tool's aliases: each a tool name, not a reserved one, not the action's own name, listed once,
 * at most TOOL_ALIASES_MAX, and no other action's name or alias (in any of its versions: see aliasOwner).
 */
function checkAliases(deps: ActionDeps, base: { actionId: string; name: string }, aliases: unknown): string[] {
  if (!Array.isArray(aliases)) throw badInput('tool.aliases must be a list of tool names', aliases);
  if (aliases.length > TOOL_ALIASES_MAX) {
    throw limitExceeded(
      'toolAliasesMax',
      TOOL_ALIASES_MAX,
      aliases.length,
      `tool.aliases has ${aliases.length} names; at most ${TOOL_ALIASES_MAX}`,
      { hint: 'Keep the few names callers really use.' },
    );
  }
  const seen = new Set<string>();
  for (const alias of aliases as unknown[]) {
    if (typeof alias !== 'string' || !NAME_PATTERN.test(alias)) {
      throw new EngineError('BAD_REQUEST', `tool.aliases: ${quote(alias)} is not a tool name`, {
        hint: 'Use lower_snake_case: a letter, then letters, digits and _ (at most 64).',
      });
    }
    checkNotReserved(alias, 'tool.aliases:');
    if (alias === base.name)
      throw new EngineError('BAD_REQUEST', `tool.aliases: ${quote(alias)} is the action's own name`, {
        hint: 'Leave it out: the tool answers to its name already.',
      });
    if (seen.has(alias)) throw new EngineError('BAD_REQUEST', `tool.aliases: ${quote(alias)} is listed twice`);
    seen.add(alias);
    const named = deps.st.actionByName.get(alias);
    if (named && named.action_id !== base.actionId) {
      throw new EngineError(
        'ALREADY_EXISTS',
        `tool.aliases: ${quote(alias)} of ${base.name} is the name of another action (${named.name})`,
        { hint: TAKEN_HINT },
      );
    }
    const owner = aliasOwner(deps, alias);
    if (owner && owner.action_id !== base.actionId) {
      throw new EngineError(
        'ALREADY_EXISTS',
        `tool.aliases: ${quote(alias)} of ${base.name} is already an alias of ${owner.name}`,
        { hint: TAKEN_HINT },
      );
    }
  }
  return [...seen];
}

/** The key of the alias index in the versions RecordCache (no version key contains '#'). */
const ALIAS_INDEX_KEY = '#aliases';

/** The action an alias is reserved for, and whether one of its ACTIVE versions answers to it. */
interface AliasEntry {
  action: ActionRow;
  runnable: boolean;
}

/**
 * The action that answers to `name` as an alias: the action whose versions have it, while one of
 * its ACTIVE versions does (an alias only a DRAFT or LOCKED version has names no tool until that
 * version is activated). Which version runs is the caller's to say, as by name.
 */
export function findByAlias(deps: ActionDeps, name: string): ActionRow | undefined {
  const entry = aliasIndex(deps).get(name);
  return entry?.runnable ? entry.action : undefined;
}

/**
 * The action an alias belongs to: the one any of whose versions (DRAFT, ACTIVE or LOCKED: each can
 * be activated, and versions are never deleted) has it. It is that action's for its whole life, so
 * no other action may take it as a name or an alias, and a policy on the action's name holds
 * whichever of its aliases a caller uses.
 */
export function aliasOwner(deps: ActionDeps, name: string): ActionRow | undefined {
  return aliasIndex(deps).get(name)?.action;
}

/**
 * Every alias of every version, built by one scan of the actions and their versions and cached in
 * `deps.versions`: dropped with it when the record-cache epoch moves (any write to action_versions,
 * a status change, a rollback, another connection's commit), and rebuilt on each call outside a
 * transaction the TransactionManager runs (no cache is used there). An alias two actions have
 * (written before aliases were reserved for life) is the older action's.
 */
function aliasIndex(deps: ActionDeps): Map<string, AliasEntry> {
  return deps.versions.get(ALIAS_INDEX_KEY, () => buildAliasIndex(deps) as unknown as ActionVersion) as unknown as Map<
    string,
    AliasEntry
  >;
}

function buildAliasIndex(deps: ActionDeps): Map<string, AliasEntry> {
  const index = new Map<string, AliasEntry>();
  let rowid = 0;
  const batch = 256;
  for (;;) {
    const rows = deps.st.actionsPage.all(rowid, batch);
    for (const row of rows) {
      rowid = row.rowid;
      const { rowid: _, ...action } = row;
      for (const stored of deps.st.versions.all(row.action_id)) {
        for (const alias of aliasesOf(deps, stored)) {
          const entry = index.get(alias);
          if (!entry) index.set(alias, { action, runnable: stored.status === 'ACTIVE' });
          else if (entry.action.action_id === action.action_id && stored.status === 'ACTIVE') entry.runnable = true;
        }
      }
    }
    if (rows.length < batch) return index;
  }
}

/**
 * A stored version's aliases, read without filling the document cache (the scan reads every
 * version; the cache is for the versions calls use): its parsed document when cached, else the
 * stored text parsed, when it mentions aliases at all.
 */
function aliasesOf(deps: ActionDeps, row: ActionVersionRow): readonly string[] {
  const cached = deps.documents.get(versionKey(row.action_id, row.version));
  if (cached?.text === row.document) return cached.document.tool.aliases ?? [];
  if (!row.document.includes('"aliases"')) return [];
  return (JSON.parse(row.document) as ActionVersionDocument).tool.aliases ?? [];
}

/**
 * An agent's model reads a tool's description to decide when to call it: every action the agent
 * references (the pinned version, or the latest ACTIVE one) must have one.
 */
function checkDescribed(deps: ActionDeps, tools: readonly ToolReference[]): void {
  for (const ref of tools) {
    if ((NATIVE_TOOLS as readonly string[]).includes(ref.name)) continue;
    const action = deps.st.actionByName.get(ref.name);
    if (!action) continue;
    const row =
      ref.version != null
        ? deps.st.version.get(action.action_id, ref.version)
        : deps.st.latestActiveVersion.get(action.action_id);
    if (!row) continue;
    if (versionOfRow(deps, row).tool.description.trim() === '') {
      throw new EngineError('BAD_REQUEST', `tool ${quote(ref.name)} (version ${row.version}) has no description`, {
        hint: 'it is what the model reads; give it a description',
        details: { tool: ref.name, version: row.version },
      });
    }
  }
}

function checkExecution(
  deps: ActionDeps,
  input: ActionInput['execution'],
  previous: ExecutionSettings,
): ExecutionSettings {
  const limits = deps.limits;
  if (!input) return previous;
  /**
   * A positive integer at most `max`; past it, LIMIT_EXCEEDED naming the limit: `limit`, a key of
   * TALLY_CONFIG limits when `configurable` (the message and hint say how to raise it), else a fixed bound's name.
   */
  const positiveInt = (
    value: number | null | undefined,
    fallback: number,
    what: string,
    max: number,
    limit: string,
    configurable = false,
  ): number => {
    if (value == null) return fallback;
    if (!Number.isInteger(value) || value < 1) throw badInput(`execution.${what} must be a positive integer`, value);
    if (value > max) {
      throw limitExceeded(
        limit,
        max,
        value,
        `execution.${what} ${value} is over its maximum ${max}${configurable ? ` (${limit})` : ''}`,
        configurable
          ? { hint: `Ask for at most ${max}, or raise limits.${limit} in TALLY_CONFIG.`, details: { [limit]: max } }
          : {},
      );
    }
    return value;
  };
  const backoff = input.backoff ?? {};
  const multiplier = backoff.multiplier ?? previous.backoff.multiplier;
  if (typeof multiplier !== 'number' || !(multiplier >= 1) || multiplier > 10) {
    throw badInput('execution.backoff.multiplier must be between 1 and 10', multiplier);
  }
  return {
    maxAttempts: positiveInt(
      input.maxAttempts,
      previous.maxAttempts,
      'maxAttempts',
      limits.maxAttemptsMax,
      'maxAttemptsMax',
      true,
    ),
    backoff: {
      initialMs: positiveInt(
        backoff.initialMs,
        previous.backoff.initialMs,
        'backoff.initialMs',
        BACKOFF_MS_MAX,
        'backoffMsMax',
      ),
      multiplier,
      maxMs: positiveInt(backoff.maxMs, previous.backoff.maxMs, 'backoff.maxMs', BACKOFF_MS_MAX, 'backoffMsMax'),
    },
    timeoutMs:
      input.timeoutMs === undefined
        ? previous.timeoutMs
        : input.timeoutMs === null
          ? null
          : positiveInt(input.timeoutMs, 0, 'timeoutMs', limits.toolTimeoutMsMax, 'toolTimeoutMsMax', true),
    retryIf: input.retryIf === undefined ? (previous.retryIf ?? null) : checkRetryIf(deps, input.retryIf),
    cacheTtlMs:
      input.cacheTtlMs === undefined
        ? (previous.cacheTtlMs ?? null)
        : input.cacheTtlMs === null
          ? null
          : positiveInt(input.cacheTtlMs, 0, 'cacheTtlMs', CACHE_TTL_MS_MAX, 'cacheTtlMsMax'),
  };
}

/** execution.retryIf: a CEL expression over error {code, message, attempt}, compiled now. */
function checkRetryIf(deps: ActionDeps, expression: string | null): string | null {
  if (expression === null) return null;
  if (typeof expression !== 'string' || expression.trim() === '')
    throw badInput('execution.retryIf must be a CEL expression', expression);
  try {
    deps.cel.compile(expression);
  } catch (error) {
    throw new EngineError('BAD_REQUEST', `execution.retryIf ${quote(expression)}: ${(error as Error).message}`, {
      hint: 'A CEL expression over error {code, message, attempt}, e.g. error.code == "TIMEOUT" && error.attempt < 3.',
    });
  }
  return expression;
}

export function createAction(deps: ActionDeps, actionId: string, input: ActionInput): ActionVersion {
  if (deps.st.actionById.get(actionId)) {
    throw new EngineError('ALREADY_EXISTS', `action ${actionId} already exists`, {
      hint: 'Use updateAction to make its next version.',
    });
  }
  const name = input.name;
  if (typeof name !== 'string' || !NAME_PATTERN.test(name)) {
    throw new EngineError('BAD_REQUEST', `action name ${quote(name)} is not a tool name`, {
      hint: 'Use lower_snake_case: a letter, then letters, digits and _ (at most 64).',
    });
  }
  checkNotReserved(name, 'action name');
  if (deps.st.actionByName.get(name))
    throw alreadyExists('an action named', name, 'Use updateAction to make its next version, or choose another name.');
  const aliasOf = aliasOwner(deps, name);
  if (aliasOf)
    throw new EngineError('ALREADY_EXISTS', `${quote(name)} is an alias of ${aliasOf.name}`, { hint: TAKEN_HINT });
  const now = deps.clock.now().toISOString();
  const document = buildDocument(deps, { actionId, name, version: 1, created: now }, input, null);
  deps.st.insertAction.run({ action_id: actionId, name, latest_version: 1, created: now, modified: now });
  return insertVersion(deps, document, input.draft ? 'DRAFT' : 'ACTIVE', now);
}

export function updateAction(deps: ActionDeps, actionId: string, input: ActionInput): ActionVersion {
  const action = findAction(deps, { id: actionId });
  if (input.name != null && input.name !== action.name) {
    throw new EngineError('BAD_REQUEST', `an action cannot be renamed (${action.name} → ${input.name})`, {
      hint: 'Leave name out, or create a new action.',
    });
  }
  const previous = toVersion(deps.st.version.get(actionId, action.latest_version)!);
  const now = deps.clock.now().toISOString();
  const version = action.latest_version + 1;
  const document = buildDocument(deps, { actionId, name: action.name, version, created: now }, input, previous);
  deps.st.updateActionLatest.run(version, now, actionId);
  return insertVersion(deps, document, input.draft ? 'DRAFT' : 'ACTIVE', now);
}

function insertVersion(
  deps: ActionDeps,
  document: ActionVersionDocument,
  status: VersionStatus,
  now: string,
): ActionVersion {
  const text = JSON.stringify(document);
  deps.st.insertVersion.run({
    action_id: document.actionId,
    version: document.version,
    status,
    document: text,
    created: now,
    modified: now,
  });
  // What is cached is parsed from the stored text, never the caller's objects (an in-process
  // caller could change those afterwards).
  return { ...parsedDocument(deps, versionKey(document.actionId, document.version), text), status, modified: now };
}

/**
 * The document stored as `text`, parsed once per distinct text and frozen: the same objects are
 * handed to every call and every reader (the JSON scalar passes them out as they are).
 */
function parsedDocument(deps: ActionDeps, key: string, text: string): ActionVersionDocument {
  const cached = deps.documents.get(key);
  if (cached?.text === text) return cached.document;
  const document = deepFreeze(JSON.parse(text) as ActionVersionDocument);
  if (deps.documents.size >= deps.limits.recordCacheMax) {
    // The oldest goes (the map keeps insertion order).
    const oldest = deps.documents.keys().next();
    if (!oldest.done) deps.documents.delete(oldest.value);
  }
  deps.documents.set(key, { text, document });
  return document;
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

/** A stored version, its document parsed once per distinct stored text. */
function versionOfRow(deps: ActionDeps, row: ActionVersionRow): ActionVersion {
  return {
    ...parsedDocument(deps, versionKey(row.action_id, row.version), row.document),
    status: row.status as VersionStatus,
    modified: row.modified,
  };
}

export function setVersionStatus(
  deps: ActionDeps,
  actionId: string,
  version: number,
  status: VersionStatus,
): ActionVersion {
  const current = getVersion(deps, { id: actionId, version });
  if (status === 'DRAFT') throw new EngineError('BAD_REQUEST', 'a version cannot go back to DRAFT');
  const now = deps.clock.now().toISOString();
  deps.st.setVersionStatus.run(status, now, actionId, version);
  return { ...current, status, modified: now };
}

export function findAction(deps: ActionDeps, ref: { id?: string | null; name?: string | null }): ActionRow {
  let row: ActionRow | undefined;
  if (ref.id) row = deps.st.actionById.get(ref.id);
  else if (ref.name) row = deps.st.actionByName.get(ref.name) ?? findByAlias(deps, ref.name);
  else throw new EngineError('BAD_REQUEST', 'an action needs an id or a name');
  if (!row) throw noSuchAction(ref.id ?? ref.name);
  checkName(deps, row, ref);
  return row;
}

/**
 * The NOT_FOUND of an action id or name that names none; also the answer for a tool a caller may
 * not call (actions.tool), so the two cannot be told apart.
 */
export function noSuchAction(ref: string | null | undefined): EngineError {
  return notFound('action', ref, 'Create it with createAction, or check the id or name.');
}

/** The action name `name` stands for: itself, or the action it is an alias of (whether or not a version that answers to it is ACTIVE; unknown names as they are). */
export function canonicalName(deps: ActionDeps, name: string): string {
  if (deps.st.actionByName.get(name)) return name;
  return aliasOwner(deps, name)?.name ?? name;
}

/** Given both an id and a name, they must name the same action (the name may be one of its aliases). */
function checkName(
  deps: ActionDeps,
  action: { name: string },
  ref: { id?: string | null; name?: string | null },
): void {
  const name = action.name;
  if (ref.id && ref.name != null && ref.name !== name && aliasOwner(deps, ref.name)?.name !== name) {
    throw new EngineError('BAD_REQUEST', `action ${ref.id} is named ${quote(name)}, not ${quote(ref.name)}`, {
      hint: 'Pass the id or the name, or both of the same action.',
    });
  }
}

/** A version: the one asked for, or the latest. */
export function getVersion(
  deps: ActionDeps,
  ref: { id?: string | null; name?: string | null; version?: number | null },
): ActionVersion {
  if (ref.id && ref.version != null) {
    // The hot path of invoke: the version as read in this epoch (see RecordCache).
    const { id, version } = ref;
    const found = deps.versions.get(versionKey(id, version), () => {
      const row = deps.st.version.get(id, version);
      return row && versionOfRow(deps, row);
    });
    if (found) {
      checkName(deps, found, ref);
      return found;
    }
  }
  const action = findAction(deps, ref);
  const version = ref.version ?? action.latest_version;
  const row = deps.st.version.get(action.action_id, version);
  if (!row) {
    throw new EngineError(
      'NOT_FOUND',
      `action ${action.name} has no version ${quote(version)}; its latest is ${action.latest_version}`,
    );
  }
  return versionOfRow(deps, row);
}

export function latestActiveVersion(deps: ActionDeps, actionId: string): ActionVersion | null {
  const row = deps.st.latestActiveVersion.get(actionId);
  return row ? versionOfRow(deps, row) : null;
}

export function listVersions(deps: ActionDeps, actionId: string): ActionVersion[] {
  return deps.st.versions.all(actionId).map((row) => versionOfRow(deps, row));
}

export function listActions(deps: ActionDeps, first: number, after?: string | null): Connection<ActionVersion> {
  const req = pageRequest<number>(first, after, deps.limits.pageSizeMax, 'number', 'actions');
  const rows = deps.st.actionsPage.all(req.after ?? 0, req.fetch);
  return toConnection(
    rows,
    req,
    (r) => r.rowid,
    (r) => versionOfRow(deps, deps.st.version.get(r.action_id, r.latest_version)!),
  );
}
