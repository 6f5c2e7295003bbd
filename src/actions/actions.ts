import { EngineError } from '../errors.js';
import type { ActionVersionRow } from '../storage/statements/actions.js';
import { buildDocument } from './document.js';
import { checkNewName } from './names.js';
import {
  type ActionDeps,
  type ActionInput,
  type ActionVersion,
  type ActionVersionDocument,
  type VersionStatus,
  versionKey,
} from './types.js';
import { findAction, getVersion, parsedDocument } from './versions.js';

/*
 * Making versions: createAction and updateAction (each a version document built by document.ts),
 * and a version's status. The module callers import: it re-exports the types (types.ts) and the
 * lookups (versions.ts, aliases.ts) they use with these.
 */

export { aliasOwner, findByAlias } from './aliases.js';
export { readsIdentifier } from './references.js';
export type {
  ActionDeps,
  ActionInput,
  ActionKind,
  ActionVersion,
  ActionVersionDocument,
  ExecutionSettings,
  Policy,
  PolicyAction,
  PolicyEffect,
  SkillReference,
  ToolDefinition,
  ToolReference,
  VersionStatus,
} from './types.js';
export {
  BACKOFF_MS_MAX,
  DEFAULT_EXECUTION,
  LOAD_SKILL_TOOL,
  NATIVE_TOOLS,
  RESERVED_TOOL_NAMES,
  actionKindOfExecution,
  executionKindOf,
  runsAfterCommit,
  runsOutsideTransactions,
  versionKey,
} from './types.js';
export {
  canonicalName,
  findAction,
  getVersion,
  latestActiveVersion,
  listActions,
  listVersions,
  noSuchAction,
} from './versions.js';

function toVersion(row: ActionVersionRow): ActionVersion {
  return {
    ...(JSON.parse(row.document) as ActionVersionDocument),
    status: row.status as VersionStatus,
    modified: row.modified,
  };
}

export function createAction(deps: ActionDeps, actionId: string, input: ActionInput): ActionVersion {
  if (deps.st.actionById.get(actionId)) {
    throw new EngineError('ALREADY_EXISTS', `action ${actionId} already exists`, {
      hint: 'Use updateAction to make its next version.',
    });
  }
  const name = input.name;
  checkNewName(deps, name);
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
