import { createHash } from 'node:crypto';
import { canonicalJson } from '../ids.js';

/**
 * How a deploy treats what the running system wrote since the last deploy: the one place that
 * decides, for every field of every record a project declares, whether the deploy writes the
 * file's value, leaves the record's, or refuses.
 *
 * A record is seen as flat fields: `name`, `status`, `metadata.<key>` (metadata is compared per
 * top-level key: the file's keys are desired, keys written at runtime are kept), `members.<id>`
 * (a set's members), `limits.<id>` and `attach.<accountId>` (a velocity control's). Per field:
 * F what the file says, C what the record holds now, B what the last deploy left there (recorded
 * in the deploy's own transaction: see src/graphql/resolvers/deployments.ts).
 *
 * - F = C: nothing to do.
 * - C = B (nothing changed it since the deploy), or C is empty and no deploy of it is recorded:
 *   the files changed, so the file's value is written.
 * - a field the file no longer declares that changed since the deploy: the runtime's now; it is
 *   kept and the deploy stops managing it (`release`).
 * - C ≠ B and F = B (changed at runtime, the file did not change): kept, and said so on every
 *   deploy until the file or the record settles it (`keep`).
 * - C ≠ B and F ≠ B, or a value nobody recorded deploying: `conflict`, and the deploy refuses.
 * With `overwrite` (tally deploy --overwrite-runtime-changes), the file's value wins in the last
 * two cases (`overwrite`). A field the file never declared is never written; when it changed
 * since the last deploy the plan says the deploy keeps it (`undeclared`).
 *
 * Tran codes, tools and skills are versioned: what was deployed is a version, and a version made
 * since by someone else is the runtime change (mergeVersion).
 */
export type Flat = Record<string, unknown>;

export type DriftOutcome = 'conflict' | 'overwrite' | 'keep' | 'release' | 'undeclared';

/** A field whose value at runtime is not what the last deploy left, and what the deploy does about it. */
export interface Drift {
  field: string;
  outcome: DriftOutcome;
  /** What the last deploy left there; `undefined` when no deploy of the field is recorded. */
  deployed?: unknown;
  now: unknown;
  /** What the file says (for `undeclared`, nothing). */
  file?: unknown;
}

/** What a deploy recorded of a record (src/graphql/resolvers/deployments.ts keeps it). */
export interface DeployedState {
  /** Declared fields as the deploy left them. */
  fields?: Flat;
  /** Digests of the fields the files do not declare, as the deploy saw them (null: not seen). */
  seen?: Record<string, string> | null;
  /** Versioned kinds: the version deployed, and the digest of the file content it was made from. */
  version?: number;
  digest?: string;
}

export interface FieldMerge {
  /** Fields to write and their values (null: clear it, or remove the key or member). */
  writes: Flat;
  drift: Drift[];
  /** The record the deploy leaves (state to record). */
  state: DeployedState;
}

const norm = (v: unknown) => (v === undefined ? null : v);
export const same = (a: unknown, b: unknown) => canonicalJson(norm(a)) === canonicalJson(norm(b));
export const digest = (value: unknown) =>
  createHash('sha256')
    .update(canonicalJson(norm(value)))
    .digest('hex')
    .slice(0, 16);

/**
 * Merge one record's fields. `defaults` are the values of a field nobody set (status ACTIVE, no
 * metadata key); a field the file stops declaring goes back to its default. `group` names the
 * collection a field belongs to (`members` for `members.<id>`): the fields the file does not
 * declare in a collection are seen together, so a set with many members added at runtime costs
 * one digest.
 */
export function mergeFields(
  file: Flat,
  now: Flat,
  base: DeployedState | null,
  options: { overwrite: boolean; defaults?: Flat; group?: (field: string) => string | null },
): FieldMerge {
  const defaults = options.defaults ?? {};
  const deployed = base?.fields ?? {};
  const writes: Flat = {};
  const drift: Drift[] = [];
  const fields: Flat = {};
  const fieldOf = (source: Flat, field: string) =>
    Object.hasOwn(source, field) ? norm(source[field]) : norm(defaults[field]);
  for (const field of new Set([...Object.keys(file), ...Object.keys(deployed)])) {
    const declared = Object.hasOwn(file, field);
    const f = fieldOf(file, field);
    const c = fieldOf(now, field);
    const known = Object.hasOwn(deployed, field);
    const b = known ? norm(deployed[field]) : undefined;
    const write = () => {
      writes[field] = f;
      if (declared) fields[field] = f;
    };
    if (same(f, c)) {
      if (declared) fields[field] = f;
    } else if (known ? same(c, b) : same(c, defaults[field])) {
      write();
    } else if (!declared) {
      drift.push({ field, outcome: 'release', deployed: b, now: c });
    } else if (options.overwrite) {
      write();
      drift.push({ field, outcome: 'overwrite', deployed: b, now: c, file: f });
    } else if (known && same(f, b)) {
      fields[field] = b;
      drift.push({ field, outcome: 'keep', deployed: b, now: c, file: f });
    } else {
      if (known) fields[field] = b;
      drift.push({ field, outcome: 'conflict', deployed: b, now: c, file: f });
    }
  }
  const { seen, changed } = undeclared(
    file,
    now,
    deployed,
    base?.seen ?? null,
    defaults,
    options.group ?? (() => null),
  );
  for (const { field, value } of changed) drift.push({ field, outcome: 'undeclared', now: value });
  return { writes, drift, state: { fields, seen } };
}

/**
 * The fields neither the file nor the last deploy declared: their digests now, and those that
 * changed since the last deploy saw them (a record the deploy created, or one it never saw:
 * those that are not at their default).
 */
function undeclared(
  file: Flat,
  now: Flat,
  deployed: Flat,
  before: Record<string, string> | null,
  defaults: Flat,
  group: (field: string) => string | null,
) {
  const seen: Record<string, string> = {};
  const members = new Map<string, Flat>();
  for (const field of Object.keys(now).sort()) {
    if (Object.hasOwn(file, field) || Object.hasOwn(deployed, field) || same(now[field], defaults[field])) continue;
    const g = group(field);
    if (g === null) seen[field] = digest(now[field]);
    else members.set(g, { ...members.get(g), [field]: now[field] });
  }
  for (const [g, values] of members) seen[`${g}.*`] = digest(values);
  const changed: Array<{ field: string; value: unknown }> = [];
  for (const key of new Set([...Object.keys(seen), ...Object.keys(before ?? {})])) {
    if (seen[key] === before?.[key]) continue;
    // A collection's undeclared members are shown together: the ids and what each is.
    if (key.endsWith('.*')) changed.push({ field: key.slice(0, -2), value: members.get(key.slice(0, -2)) ?? {} });
    else changed.push({ field: key, value: Object.hasOwn(now, key) ? now[key] : undefined });
  }
  return { seen, changed };
}

export interface VersionMerge {
  /** `new`: make the next version from the file. */
  action: 'unchanged' | 'new' | 'keep';
  drift: Drift[];
  state: DeployedState;
}

/**
 * Tran codes, tools and skills: `have` is the latest version's content (null: none), `desired`
 * the file's. A version made since the deploy (by a client, or an operator through GraphQL) is
 * the runtime change: kept while the file is unchanged, a conflict when the file changed too.
 */
export function mergeVersion(
  have: unknown,
  version: number,
  desired: unknown,
  base: DeployedState | null,
  overwrite: boolean,
): VersionMerge {
  const fileDigest = digest(desired);
  if (same(have, desired)) return { action: 'unchanged', drift: [], state: { version, digest: fileDigest } };
  const next = { version: version + 1, digest: fileDigest };
  if (base?.version === version) return { action: 'new', drift: [], state: next };
  const deployed = base?.version === undefined ? undefined : `version ${base.version}`;
  const now = `version ${version}`;
  if (overwrite)
    return {
      action: 'new',
      drift: [{ field: 'version', outcome: 'overwrite', deployed, now, file: `version ${version + 1}` }],
      state: next,
    };
  if (base?.version !== undefined && base.digest === fileDigest) {
    return {
      action: 'keep',
      drift: [{ field: 'version', outcome: 'keep', deployed, now, file: deployed }],
      state: base,
    };
  }
  return {
    action: 'keep',
    drift: [{ field: 'version', outcome: 'conflict', deployed, now, file: `version ${version + 1}` }],
    state: base ?? {},
  };
}

/** What a deploy records of a tran code, tool or skill it creates: version 1, made from this content. */
export function createdVersion(desired: unknown): DeployedState {
  return { version: 1, digest: digest(desired) };
}

/** A value as a plan line shows it: JSON, shortened; `none` for nothing. */
export function shown(value: unknown): string {
  if (value === undefined || value === null) return 'none';
  const text = JSON.stringify(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}
