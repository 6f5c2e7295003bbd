import { EngineError, notFound, quote } from '../errors.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { ActionRow, ActionVersionRow } from '../storage/statements/actions.js';
import { aliasOwner, findByAlias } from './aliases.js';
import {
  type ActionDeps,
  type ActionVersion,
  type ActionVersionDocument,
  type VersionStatus,
  versionKey,
} from './types.js';

/*
 * Reading actions and their versions: by id, name or alias, a version or the latest (ACTIVE), each
 * stored document parsed once per distinct text and frozen. Imports neither the validator nor
 * tool-access, so both can read versions through it.
 */

/**
 * The document stored as `text`, parsed once per distinct text and frozen: the same objects are
 * handed to every call and every reader (the JSON scalar passes them out as they are).
 */
export function parsedDocument(deps: ActionDeps, key: string, text: string): ActionVersionDocument {
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

export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

/** A stored version, its document parsed once per distinct stored text. */
export function versionOfRow(deps: ActionDeps, row: ActionVersionRow): ActionVersion {
  return {
    ...parsedDocument(deps, versionKey(row.action_id, row.version), row.document),
    status: row.status as VersionStatus,
    modified: row.modified,
  };
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
