import { type DeployedState, type Drift, type FieldMerge, type Flat, same, shown, type VersionMerge } from './drift.js';
import type { DeployedKind, PlanItem, RecordWrite } from './plan-item.js';
import { ProjectError } from './project.js';

/*
 * What every kind of record's plan shares: the deployed record to write, metadata as fields, the
 * fields an update sends, the plan's detail and drift labels, and a versioned record's item.
 */

/** A state without the keys it leaves out, as the server gives it back. */
function compact(state: DeployedState): DeployedState {
  return Object.fromEntries(Object.entries(state).filter(([, v]) => v !== undefined)) as DeployedState;
}

/**
 * The record to write: when the deploy writes the record (it then expects the version it planned
 * from), or when what it leaves differs from what was recorded.
 */
export function recordOf(
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
export function metadataFields(metadata: unknown, into: Flat, file: string, what: () => string): Flat {
  if (metadata === undefined || metadata === null) return into;
  if (typeof metadata !== 'object' || Array.isArray(metadata))
    throw new ProjectError(`${what()}: metadata must be a JSON object, got ${shown(metadata)}`, file);
  for (const [key, value] of Object.entries(metadata)) if (value !== null) into[`metadata.${key}`] = value;
  return into;
}

/** The metadata to send: the record's own, with the written keys set (or removed: null). */
export function mergedMetadata(now: unknown, writes: Flat): Record<string, unknown> | null | undefined {
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
export function plainWrites(writes: Flat, collections: string[] = []): Flat {
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
export function detailOf(writes: Flat, collection?: { prefix: string; noun: string }): string | undefined {
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

export function relabel(drift: Drift[], names: Map<string, string>): Drift[] | undefined {
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

export const hasWrites = (merge: FieldMerge) => Object.keys(merge.writes).length > 0;

export const count = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;

/** A tran code, tool or skill: a new version, the latest kept, or a conflict, from mergeVersion. */
export function versionedItem(
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
