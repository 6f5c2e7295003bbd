import { alreadyExists, EngineError, limitExceeded, notFound, quote } from '../errors.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { ViewRecordRow, ViewRow, ViewVersionRow } from '../storage/statements/views.js';
import type { LedgerDeps } from './deps.js';
import {
  badDefinition,
  checkAlias,
  checkName,
  checkType,
  type CompiledKey,
  compileConditions,
  compileField,
  compileKeys,
  type KeyFilter,
  type KeyInput,
  keyQuery,
} from './index-keys.js';
import { backfill, compileIndex, type IndexInput, type IndexOn, type IndexRecord, indexRecord } from './indexes.js';
import { type DataType, type SortOrder, uintClass } from './typed-values.js';

/**
 * Views and custom index definitions as records (created, deleted, listed), and the reads of a
 * view's records through its key. Keeping them up to date on posting is view-updates.ts.
 *
 * Views: documents materialised from CEL and kept up to date inside the posting transaction.
 *
 * A view names its sources (Entry / Transaction records, on insert and on update: a void updates
 * the original transaction and its entries), an optional `normalize` list (one record per element,
 * bound as context.trigger.normalize), filters (all must hold), and document fields evaluated in
 * order with `document` = the record's previous document (typed zero values for a new record),
 * `this` = the fields computed so far, and `context.trigger.{new, old, entity, trigger, normalize}`.
 * A record's key is its partition and sort values, computed over the new document.
 */

export type Entity = 'Entry' | 'Transaction' | 'Account';
export type Trigger = 'OnInsert' | 'OnUpdate';

export interface ViewInput {
  name: string;
  description?: string | null;
  sources: Array<{ entity: Entity; triggers: Trigger[] }>;
  normalize?: string | null;
  document: Array<{ alias: string; value: string; type: DataType }>;
  partition: KeyInput[];
  sort?: KeyInput[] | null;
  filters?: Record<string, string> | null;
  config?: { enableConcurrentPosting?: boolean | null } | null;
}

/** A view definition as the API answers it. */
export interface View {
  viewId: string;
  name: string;
  description: string;
  sources: Array<{ entity: Entity; triggers: Trigger[] }>;
  normalize: string | null;
  document: Array<{ alias: string; value: string; type: DataType }>;
  partition: Array<{ alias: string; value: string; type: DataType }>;
  sort: Array<{ alias: string; value: string; type: DataType; sort: SortOrder }>;
  filters: Record<string, string> | null;
  config: { enableConcurrentPosting: boolean };
  version: number;
  created: string;
  modified: string;
}

/** What triggered a version of a view record. */
export interface SourceRef {
  entity: 'Entry' | 'Transaction';
  trigger: Trigger;
  newId: string;
  newVersion: number;
  oldId: string | null;
  oldVersion: number | null;
}

/** One version of a view record. */
export interface ViewRecord {
  name: string;
  viewId: string;
  recordId: string;
  version: number;
  document: unknown;
  source: SourceRef;
  modified: string;
}

export interface CompiledView {
  view: View;
  wants: Set<string>;
  normalize: { value: string; fn: (c?: Record<string, unknown>) => unknown } | null;
  fields: Array<{ alias: string; value: string; type: DataType; fn: (c?: Record<string, unknown>) => unknown }>;
  /** The fields computed before the previous record is found (those the key reads); null: all. */
  keyFields: boolean[] | null;
  partition: CompiledKey[];
  sort: CompiledKey[];
  filters: Array<{ name: string; value: string; fn: (c?: Record<string, unknown>) => unknown }>;
}

const ENTITIES: readonly Entity[] = ['Entry', 'Transaction', 'Account'];
const TRIGGERS: readonly Trigger[] = ['OnInsert', 'OnUpdate'];

// ---------------------------------------------------------------------------------------------
// Definitions.

/** Names `variable.<field>` reads in `text`; null when it uses the variable otherwise (then: everything). */
function fieldsRead(text: string, variable: string): Set<string> | null {
  const out = new Set<string>();
  const word = new RegExp(`\\b${variable}\\b`, 'g');
  for (let m = word.exec(text); m; m = word.exec(text)) {
    const rest = /^\s*\.\??\s*([A-Za-z_][A-Za-z0-9_]*)/.exec(text.slice(m.index + variable.length));
    if (!rest) return null;
    out.add(rest[1]!);
  }
  return out;
}

function keyFieldMask(fields: CompiledView['fields'], keys: readonly CompiledKey[]): boolean[] | null {
  const needed = new Set<string>();
  for (const key of keys) {
    const read = fieldsRead(key.value, 'document');
    if (!read) return null;
    for (const f of read) needed.add(f);
  }
  const mask = fields.map(() => false);
  for (let i = fields.length - 1; i >= 0; i--) {
    if (!needed.has(fields[i]!.alias)) continue;
    mask[i] = true;
    const read = fieldsRead(fields[i]!.value, 'this');
    if (!read) {
      for (let j = 0; j < i; j++) mask[j] = true;
      return mask;
    }
    for (const f of read) needed.add(f);
  }
  return mask;
}

function compileView(deps: LedgerDeps, input: ViewInput, row?: ViewRow): CompiledView {
  const name = checkName('view', input?.name);
  const what = `view ${name}`;
  const limits = deps.limits;
  if (!Array.isArray(input.sources) || input.sources.length === 0) {
    throw badDefinition(`${what} needs at least one source`, 'e.g. sources: [{ entity: Entry, triggers: [OnInsert] }]');
  }
  const wants = new Set<string>();
  for (const source of input.sources) {
    if (!ENTITIES.includes(source?.entity))
      throw badDefinition(`${what}: unknown source entity ${quote(source?.entity)}`, 'Use Entry or Transaction.');
    if (source.entity === 'Account') {
      throw badDefinition(
        `${what}: Account sources are not supported yet`,
        'Views follow postings: use Entry or Transaction sources.',
      );
    }
    if (!Array.isArray(source.triggers) || source.triggers.length === 0)
      throw badDefinition(`${what}: source ${source.entity} needs at least one trigger`);
    for (const trigger of source.triggers) {
      if (!TRIGGERS.includes(trigger))
        throw badDefinition(`${what}: unknown trigger ${quote(trigger)}`, 'Use OnInsert or OnUpdate.');
      wants.add(`${source.entity}:${trigger}`);
    }
  }
  if (!Array.isArray(input.document) || input.document.length === 0)
    throw badDefinition(`${what} needs at least one document field`);
  if (input.document.length > limits.viewDocumentFieldsMax) {
    throw limitExceeded(
      'viewDocumentFieldsMax',
      limits.viewDocumentFieldsMax,
      input.document.length,
      `${what} has ${input.document.length} document fields; viewDocumentFieldsMax is ${limits.viewDocumentFieldsMax}`,
      {
        hint: 'Split the view in two, or compute fewer fields.',
      },
    );
  }
  const seen = new Set<string>();
  const fields = input.document.map((field) => {
    const alias = checkAlias(`${what} document field`, field?.alias, seen);
    const type = checkType(`${what} document field ${alias}`, field.type);
    return { alias, value: field.value, type, fn: compileField(deps, `${what} document field ${alias}`, field.value) };
  });
  const known = Object.fromEntries(fields.map((f) => [f.alias, f.type]));
  const keySeen = new Set<string>();
  const partition = compileKeys(deps, what, input.partition, false, known, keySeen);
  const sort = compileKeys(deps, what, input.sort, true, known, keySeen);
  const filters = compileConditions(deps, `${what} filter`, input.filters);
  const normalize =
    input.normalize != null && input.normalize !== ''
      ? { value: input.normalize, fn: compileField(deps, `${what} normalize`, input.normalize) }
      : null;
  const description = input.description ?? '';
  if (typeof description !== 'string' || description.length > 1000)
    throw badDefinition(`${what}: description must be a string of at most 1000 characters`);
  const view: View = {
    viewId: row?.view_id ?? '',
    name,
    description,
    sources: input.sources.map((s) => ({ entity: s.entity, triggers: [...new Set(s.triggers)] })),
    normalize: normalize?.value ?? null,
    document: fields.map(({ alias, value, type }) => ({ alias, value, type })),
    partition: partition.map(({ alias, value, type }) => ({ alias, value, type })),
    sort: sort.map(({ alias, value, type, sort: order }) => ({ alias, value, type, sort: order })),
    filters: filters.length ? Object.fromEntries(filters.map((f) => [f.name, f.value])) : null,
    config: { enableConcurrentPosting: input.config?.enableConcurrentPosting ?? false },
    version: row?.version ?? 1,
    created: row?.created ?? '',
    modified: row?.modified ?? '',
  };
  return {
    view,
    wants,
    normalize,
    fields,
    keyFields: keyFieldMask(fields, [...partition, ...sort]),
    partition,
    sort,
    filters,
  };
}

export function viewFromRow(deps: LedgerDeps, row: ViewRow): CompiledView {
  const def = JSON.parse(row.definition) as Omit<ViewInput, 'name'>;
  return compileView(deps, { ...def, name: row.name }, row);
}

function storedDefinition(view: View): string {
  const { viewId: _id, name: _name, version: _v, created: _c, modified: _m, ...def } = view;
  return JSON.stringify(def);
}

function viewOf(deps: LedgerDeps, name: string): CompiledView {
  const row = deps.views.viewByName.get(name);
  if (!row) throw notFound('view', name, 'List views with schema { views(first:) }.');
  return viewFromRow(deps, row);
}

export function createView(deps: LedgerDeps, input: ViewInput): View {
  // Every check before any write: a bad definition writes nothing.
  const compiled = compileView(deps, input);
  if (deps.views.viewByName.get(compiled.view.name)) {
    throw alreadyExists('view', compiled.view.name, 'Pick another name, or deleteView first.');
  }
  const count = deps.views.countViews.get()!;
  if (count >= deps.limits.viewsMax) {
    throw limitExceeded(
      'viewsMax',
      deps.limits.viewsMax,
      count + 1,
      `there are already ${count} views; viewsMax is ${deps.limits.viewsMax}`,
      { hint: 'Every posting evaluates every view on its records: delete views you no longer read.' },
    );
  }
  const now = deps.clock.now().toISOString();
  const viewId = deps.newId();
  deps.views.insertView.run(viewId, compiled.view.name, storedDefinition(compiled.view), now, now);
  deps.epoch.bump();
  return { ...compiled.view, viewId, created: now, modified: now };
}

export function deleteView(deps: LedgerDeps, name: string): View {
  const { view } = viewOf(deps, name);
  deps.views.deleteViewVersions.run(view.viewId);
  deps.views.deleteViewRecords.run(view.viewId);
  deps.views.deleteView.run(view.viewId);
  deps.epoch.bump();
  return view;
}

export function getView(deps: LedgerDeps, name: string): View {
  return viewOf(deps, name).view;
}

export function listViews(deps: LedgerDeps, first: number, after?: string | null): Connection<View> {
  const req = pageRequest<string>(first, after, deps.limits.pageSizeMax, 'string', 'views');
  const rows = deps.views.viewsPage.all(req.after ?? '', req.fetch);
  return toConnection(
    rows,
    req,
    (r) => r.name,
    (r) => viewFromRow(deps, r).view,
  );
}

// ---------------------------------------------------------------------------------------------
// Custom index definitions.

export function createIndex(deps: LedgerDeps, input: IndexInput): IndexRecord {
  const compiled = compileIndex(deps, input);
  if (deps.views.indexByName.get(compiled.name, compiled.on)) {
    throw new EngineError('ALREADY_EXISTS', `index ${quote(compiled.name)} on ${compiled.on} already exists`, {
      hint: 'Pick another name, or deleteIndex first.',
    });
  }
  const count = deps.views.countIndexes.get()!;
  if (count >= deps.limits.indexesMax) {
    throw limitExceeded(
      'indexesMax',
      deps.limits.indexesMax,
      count + 1,
      `there are already ${count} custom indexes; indexesMax is ${deps.limits.indexesMax}`,
      {
        hint: 'Every posting maintains every index on its records: delete indexes you no longer read.',
      },
    );
  }
  const now = deps.clock.now().toISOString();
  const indexId = deps.newId();
  const definition = {
    unique: compiled.unique,
    partition: compiled.partition.map(({ alias, value, type }) => ({ alias, value, type })),
    sort: compiled.sort.map(({ alias, value, type, sort }) => ({ alias, value, type, sort })),
    constraints: Object.fromEntries(compiled.constraints.map((c) => [c.name, c.value])),
  };
  deps.views.insertIndex.run(indexId, compiled.name, compiled.on, JSON.stringify(definition), now, now);
  compiled.indexId = indexId;
  deps.cel.scope(`index ${compiled.name} backfill`, () => backfill(deps, compiled, uintClass(deps)));
  deps.epoch.bump();
  return indexRecord(deps.views.indexByName.get(compiled.name, compiled.on)!);
}

export function deleteIndex(deps: LedgerDeps, name: string, on: IndexOn): IndexRecord {
  const row = deps.views.indexByName.get(name, on);
  if (!row) throw new EngineError('NOT_FOUND', `index ${quote(name)} on ${on} does not exist`);
  deps.views.deleteIndexRows.run(row.index_id);
  deps.views.deleteIndex.run(row.index_id);
  deps.epoch.bump();
  return indexRecord(row);
}

export function getIndex(deps: LedgerDeps, name: string, on: IndexOn): IndexRecord {
  const row = deps.views.indexByName.get(name, on);
  if (!row) throw new EngineError('NOT_FOUND', `index ${quote(name)} on ${on} does not exist`);
  return indexRecord(row);
}

export function listIndexes(deps: LedgerDeps, first: number, after?: string | null): Connection<IndexRecord> {
  const req = pageRequest<string>(first, after, deps.limits.pageSizeMax, 'string', 'indexes');
  const [name, on] = req.after ? (JSON.parse(req.after) as [string, string]) : ['', ''];
  const rows = req.after
    ? deps.views.indexesPage.all(name, name, on, req.fetch)
    : deps.views.indexesPage.all('', '', '', req.fetch);
  return toConnection(rows, req, (r) => JSON.stringify([r.name, r.on_entity]), indexRecord);
}

// ---------------------------------------------------------------------------------------------
// Reads.

function toRecord(
  view: View,
  row: { record_id: string; version: number; document: string; source: string; modified: string },
): ViewRecord {
  return {
    name: view.name,
    viewId: view.viewId,
    recordId: row.record_id,
    version: row.version,
    document: JSON.parse(row.document),
    source: JSON.parse(row.source) as SourceRef,
    modified: row.modified,
  };
}

export interface ViewWhere {
  index?: { partition?: KeyFilter[] | null; sort?: KeyFilter[] | null } | null;
}

/** A view's records, through its key: every partition key with eq, sort keys with any filter. */
export function viewRecords(
  deps: LedgerDeps,
  name: string,
  where: ViewWhere | null | undefined,
  first: number,
  after?: string | null,
): Connection<ViewRecord> {
  const compiled = viewOf(deps, name);
  const req = pageRequest<string>(first, after, deps.limits.pageSizeMax, 'string', `view:${name}`);
  let cursor: string[] | undefined;
  if (req.after !== undefined) {
    try {
      cursor = JSON.parse(req.after) as string[];
    } catch {
      cursor = undefined;
    }
    if (!Array.isArray(cursor) || cursor.length !== 4 || cursor.some((c) => typeof c !== 'string')) {
      throw new EngineError('BAD_REQUEST', 'the cursor is not one of this view', {
        hint: 'Pass pageInfo.endCursor as after.',
      });
    }
  }
  const query = keyQuery(`view ${name}`, compiled.partition, compiled.sort, where?.index ?? {});
  const rows: ViewRecordRow[] = deps.views.viewRecordsPage(
    compiled.view.viewId,
    query.pkey,
    query.conditions,
    cursor,
    req.fetch,
  );
  return toConnection(
    rows,
    req,
    (r) => JSON.stringify([r.s0, r.s1, r.s2, r.s3]),
    (r) => toRecord(compiled.view, r),
  );
}

/** Every version of a view record, newest first. */
export function viewRecordHistory(
  deps: LedgerDeps,
  record: ViewRecord,
  first: number,
  after?: string | null,
): Connection<ViewRecord> {
  const req = pageRequest<number>(first, after, deps.limits.pageSizeMax, 'number', `view-history:${record.recordId}`);
  const rows: ViewVersionRow[] = deps.views.viewVersionsPage.all(
    record.recordId,
    req.after ?? Number.MAX_SAFE_INTEGER,
    req.fetch,
  );
  const view = { name: record.name, viewId: record.viewId } as View;
  return toConnection(
    rows,
    req,
    (r) => r.version,
    (r) => toRecord(view, r),
  );
}
