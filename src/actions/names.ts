import { alreadyExists, badInput, EngineError, limitExceeded, quote } from '../errors.js';
import { foldName, nameHolder } from './aliases.js';
import { TOOL_ALIASES_MAX } from '../limits.js';
import { type ActionDeps, RESERVED_TOOL_NAMES } from './types.js';

/*
 * Names: what a tool name looks like, the names the engine keeps, and a tool's aliases, each
 * one action's for its whole life.
 */

/**
 * A tool name: a letter, then letters, digits, _ and -, at most 64 in all. Every name a model
 * provider takes (OpenAI and Anthropic: ^[a-zA-Z0-9_-]{1,64}$) and MCP lists; the letter first keeps
 * a name from reading as a CLI flag or a number. Two names that differ only in case are one name
 * (see checkNewName and checkAliases): `searchDocs` and `searchdocs` cannot both be tools.
 */
export const NAME_PATTERN = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;

/** What a tool name looks like, said in every refusal of one. */
export const NAME_HINT =
  'Use a tool name: a letter, then letters, digits, _ and - (at most 64), e.g. search_docs or searchDocs.';

/** Refuse `name` unless it is a tool name (NAME_PATTERN), as `what` (action name, tool.name, tool.aliases:). */
export function checkToolName(name: unknown, what: string): asserts name is string {
  if (typeof name === 'string' && NAME_PATTERN.test(name)) return;
  throw new EngineError('BAD_REQUEST', `${what} ${quote(name)} is not a tool name`, { hint: NAME_HINT });
}

/** Refuse a reserved tool name (graphql, cel, load_skill) as `what`, in any case: the one check for names, tool names and aliases. */
export function checkNotReserved(name: string, what: string): void {
  if (!RESERVED_TOOL_NAMES.includes(foldName(name))) return;
  throw new EngineError(
    'ALREADY_EXISTS',
    `${what} ${quote(name)} is a reserved tool name: ${RESERVED_TOOL_NAMES.join(', ').replace(/, ([^,]*)$/, ' and $1')} are the engine's own tools`,
    {
      hint: `Rename it (e.g. my_${name}); a graphql-kind action narrows the native graphql tool under a name of its own.`,
      details: { name, reserved: [...RESERVED_TOOL_NAMES] },
    },
  );
}

export const TAKEN_HINT =
  "Choose another name: an action's name, and every alias any of its versions has (DRAFT, ACTIVE or LOCKED: each can be activated), are its own for the action's whole life, in any case.";

/**
 * A new action's name: a tool name, not a reserved one, and held by no action as its name or an
 * alias, in any case (`searchdocs` is taken by an action named `searchDocs`).
 */
export function checkNewName(deps: ActionDeps, name: unknown): asserts name is string {
  checkToolName(name, 'action name');
  checkNotReserved(name, 'action name');
  const holder = nameHolder(deps, name);
  if (!holder) return;
  if (holder.action.name === name)
    throw alreadyExists('an action named', name, 'Use updateAction to make its next version, or choose another name.');
  if (holder.spelled === name)
    throw new EngineError('ALREADY_EXISTS', `${quote(name)} is an alias of ${holder.action.name}`, {
      hint: TAKEN_HINT,
    });
  throw new EngineError(
    'ALREADY_EXISTS',
    `action name ${quote(name)} differs only in case from ${quote(holder.spelled)}, ${holder.spelled === holder.action.name ? 'an action' : `an alias of ${holder.action.name}`}`,
    { hint: TAKEN_HINT, details: { name, taken: holder.spelled, action: holder.action.name } },
  );
}

/**
 * A tool's aliases: each a tool name, not a reserved one, not the action's own name, listed once,
 * at most TOOL_ALIASES_MAX, and no other action's name or alias (in any of its versions: see
 * aliasOwner) — each compared in any case.
 */
export function checkAliases(deps: ActionDeps, base: { actionId: string; name: string }, aliases: unknown): string[] {
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
  const seen = new Map<string, string>();
  for (const alias of aliases as unknown[]) {
    checkToolName(alias, 'tool.aliases:');
    checkNotReserved(alias, 'tool.aliases:');
    if (foldName(alias) === foldName(base.name))
      throw new EngineError(
        'BAD_REQUEST',
        `tool.aliases: ${quote(alias)} is the action's own name${alias === base.name ? '' : ` (${base.name}) in another case`}`,
        { hint: 'Leave it out: the tool answers to its name already.' },
      );
    const twin = seen.get(foldName(alias));
    if (twin !== undefined)
      throw new EngineError(
        'BAD_REQUEST',
        twin === alias
          ? `tool.aliases: ${quote(alias)} is listed twice`
          : `tool.aliases: ${quote(alias)} and ${quote(twin)} differ only in case`,
        { hint: 'List each name once: names that differ only in case are the same name.' },
      );
    seen.set(foldName(alias), alias);
    const holder = nameHolder(deps, alias);
    if (!holder || holder.action.action_id === base.actionId) continue;
    if (holder.spelled !== alias) {
      throw new EngineError(
        'ALREADY_EXISTS',
        `tool.aliases: ${quote(alias)} of ${base.name} differs only in case from ${quote(holder.spelled)}, ${holder.spelled === holder.action.name ? 'an action' : `an alias of ${holder.action.name}`}`,
        { hint: TAKEN_HINT, details: { name: alias, taken: holder.spelled, action: holder.action.name } },
      );
    }
    throw new EngineError(
      'ALREADY_EXISTS',
      holder.spelled === holder.action.name
        ? `tool.aliases: ${quote(alias)} of ${base.name} is the name of another action (${holder.action.name})`
        : `tool.aliases: ${quote(alias)} of ${base.name} is already an alias of ${holder.action.name}`,
      { hint: TAKEN_HINT },
    );
  }
  return [...seen.values()];
}

/**
 * Whether `version` answers to `name` as one of its aliases (its tool.aliases): how a declared
 * tool is found by another of its names, by a program's tools.x() and by an agent's model alike.
 */
export function answersToAlias(version: { tool: { aliases?: readonly string[] | null } }, name: string): boolean {
  return (version.tool.aliases ?? []).includes(name);
}
