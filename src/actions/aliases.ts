import type { ActionRow, ActionVersionRow } from '../storage/statements/actions.js';
import { type ActionDeps, type ActionVersion, type ActionVersionDocument, versionKey } from './types.js';

/*
 * Aliases: which action answers to another name (findByAlias) and which owns it for life
 * (aliasOwner), and which action holds a name in any case (nameHolder), from one index of every
 * action's name and every version's aliases kept in the versions cache.
 */

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
  const entry = aliasIndex(deps).aliases.get(name);
  return entry?.runnable ? entry.action : undefined;
}

/**
 * The action an alias belongs to: the one any of whose versions (DRAFT, ACTIVE or LOCKED: each can
 * be activated, and versions are never deleted) has it. It is that action's for its whole life, so
 * no other action may take it as a name or an alias, and a policy on the action's name holds
 * whichever of its aliases a caller uses.
 */
export function aliasOwner(deps: ActionDeps, name: string): ActionRow | undefined {
  return aliasIndex(deps).aliases.get(name)?.action;
}

/**
 * The action that holds `name` in any case, as its name or as an alias of any of its versions, and
 * how it spells it: names are compared folded (foldName), so `searchdocs` is held by the action
 * named `searchDocs`.
 */
export function nameHolder(deps: ActionDeps, name: string): { action: ActionRow; spelled: string } | undefined {
  return aliasIndex(deps).folded.get(foldName(name));
}

/** The form two tool names are compared in: names that differ only in case are the same name. */
export function foldName(name: string): string {
  return name.toLowerCase();
}

interface AliasIndex {
  aliases: Map<string, AliasEntry>;
  /** Every action name and alias, folded to lower case: the action holding it, and its spelling. */
  folded: Map<string, { action: ActionRow; spelled: string }>;
}

/**
 * Every alias of every version, built by one scan of the actions and their versions and cached in
 * `deps.versions`: dropped with it when the record-cache epoch moves (any write to action_versions,
 * a status change, a rollback, another connection's commit), and rebuilt on each call outside a
 * transaction the TransactionManager runs (no cache is used there). An alias two actions have
 * (written before aliases were reserved for life) is the older action's.
 */
function aliasIndex(deps: ActionDeps): AliasIndex {
  return deps.versions.get(
    ALIAS_INDEX_KEY,
    () => buildAliasIndex(deps) as unknown as ActionVersion,
  ) as unknown as AliasIndex;
}

function buildAliasIndex(deps: ActionDeps): AliasIndex {
  const index = new Map<string, AliasEntry>();
  const folded = new Map<string, { action: ActionRow; spelled: string }>();
  const hold = (name: string, action: ActionRow) => {
    const key = foldName(name);
    if (!folded.has(key)) folded.set(key, { action, spelled: name });
  };
  let rowid = 0;
  const batch = 256;
  for (;;) {
    const rows = deps.st.actionsPage.all(rowid, batch);
    for (const row of rows) {
      rowid = row.rowid;
      const { rowid: _, ...action } = row;
      hold(action.name, action);
      for (const stored of deps.st.versions.all(row.action_id)) {
        for (const alias of aliasesOf(deps, stored)) {
          hold(alias, action);
          const entry = index.get(alias);
          if (!entry) index.set(alias, { action, runnable: stored.status === 'ACTIVE' });
          else if (entry.action.action_id === action.action_id && stored.status === 'ACTIVE') entry.runnable = true;
        }
      }
    }
    if (rows.length < batch) return { aliases: index, folded };
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
