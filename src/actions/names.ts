import { badInput, EngineError, limitExceeded, quote } from '../errors.js';
import { aliasOwner } from './aliases.js';
import { TOOL_ALIASES_MAX } from '../limits.js';
import { type ActionDeps, RESERVED_TOOL_NAMES } from './types.js';

/*
 * Names: what a tool name looks like, the names the engine keeps, and a tool's aliases, each
 * one action's for its whole life.
 */

export const NAME_PATTERN = /^[a-z][a-z0-9_]{0,63}$/;

/** Refuse a reserved tool name (graphql, cel, load_skill) as `what`: the one check for names, tool names and aliases. */
export function checkNotReserved(name: string, what: string): void {
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

export const TAKEN_HINT =
  "Choose another name: an action's name, and every alias any of its versions has (DRAFT, ACTIVE or LOCKED: each can be activated), are its own for the action's whole life.";

/**
 * A tool's aliases: each a tool name, not a reserved one, not the action's own name, listed once,
 * at most TOOL_ALIASES_MAX, and no other action's name or alias (in any of its versions: see aliasOwner).
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
