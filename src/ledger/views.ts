import { checkCelValueSize } from '../cel/cel.js';
import { alreadyExists, EngineError, limitExceeded, notFound, quote } from '../errors.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { EntryRow, TransactionRow } from '../storage/statements/ledger.js';
import type { IndexRow, ViewRecordRow, ViewRow, ViewVersionRow } from '../storage/statements/views.js';
import type { Posted } from './posted.js';
import type { LedgerDeps } from './deps.js';
import { type CelDocument, entryDocument, transactionDocument } from './documents.js';
import {
  badDefinition,
  checkAlias,
  checkName,
  checkType,
  type CompiledIndex,
  type CompiledKey,
  compileConditions,
  compileField,
  compileIndex,
  compileKeys,
  backfill,
  type DataType,
  fromJson,
  holds,
  type IndexInput,
  type IndexOn,
  indexOne,
  type IndexRecord,
  indexRecord,
  type KeyFilter,
  type KeyInput,
  keyQuery,
  keyValue,
  partitionKey,
  run,
  type SortOrder,
  sortColumns,
  toTyped,
  type UintClass,
  uintClass,
  zeroOf,
} from './indexes.js';

/**
 * Views: documents materialised from CEL and kept up to date inside the posting transaction.
 *
 * A view names its sources (Entry / Transaction records, on insert and on update: a void updates
 * the original transaction and its entries), an optional `normalize` list (one record per element,
 * bound as context.trigger.normalize), filters (all must hold), and document fields evaluated in
 * order with `document` = the record's previous document (typed zero values for a new record),
 * `this` = the fields computed so far, and `context.trigger.{new, old, entity, trigger, normalize}`.
 * A record's key is its partition and sort values, computed over the new document.
 *
 * Finding the previous record when the key depends on the document: the fields the key reads
 * (and the `this.` fields they read) are computed first with the zero document; that key finds
 * the previous record; then every field is computed with the previous document, and the key
 * must come out the same (a key that depends on the previous document is refused, CEL_ERROR).
 *
 * Definitions are compiled once and kept in memory for the cache epoch (src/storage/record-cache.ts):
 * creating or deleting a view or an index bumps it; another process's commit or a rollback does too.
 * With no views and no indexes, a posting costs one comparison here. All the work of one posting
 * (every view and index) shares one CEL budget (celCostMax).
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

interface CompiledView {
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

interface Definitions {
  empty: boolean;
  views: CompiledView[];
  indexes: CompiledIndex[];
  /** "Entity:Trigger" that some view or index listens to. */
  wants: Set<string>;
  U: UintClass | null;
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

function viewFromRow(deps: LedgerDeps, row: ViewRow): CompiledView {
  const def = JSON.parse(row.definition) as Omit<ViewInput, 'name'>;
  return compileView(deps, { ...def, name: row.name }, row);
}

function indexFromRow(deps: LedgerDeps, row: IndexRow): CompiledIndex {
  const r = indexRecord(row);
  const compiled = compileIndex(
    deps,
    { name: r.name, on: r.on, unique: r.unique, partition: r.partition, sort: r.sort, constraints: r.constraints },
    row,
  );
  compiled.indexId = row.index_id;
  return compiled;
}

/** Every view and index, compiled; from memory while the cache epoch has not moved. */
function definitions(deps: LedgerDeps): Definitions {
  const cache = deps.views.cache;
  if (deps.epoch.active && cache.epoch === deps.epoch.value && cache.value) return cache.value as Definitions;
  const viewRows = deps.views.allViews.all();
  const indexRows = deps.views.allIndexes.all();
  let defs: Definitions;
  if (viewRows.length === 0 && indexRows.length === 0) {
    defs = { empty: true, views: [], indexes: [], wants: new Set(), U: null };
  } else {
    const views = viewRows.map((row) => viewFromRow(deps, row));
    const indexes = indexRows.map((row) => indexFromRow(deps, row));
    const wants = new Set<string>();
    for (const v of views) for (const w of v.wants) wants.add(w);
    for (const i of indexes) {
      wants.add(`${i.on}:OnInsert`);
      wants.add(`${i.on}:OnUpdate`);
    }
    defs = { empty: false, views, indexes, wants, U: uintClass(deps) };
  }
  if (deps.epoch.active) {
    cache.epoch = deps.epoch.value;
    cache.value = defs;
  }
  return defs;
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
// Posting.

interface SourceEvent {
  entity: 'Entry' | 'Transaction';
  trigger: Trigger;
  newDoc: CelDocument;
  oldDoc: CelDocument | null;
  ref: SourceRef;
  seq: number;
}

/** The changes of one posting, as the views and indexes listening to them see them. */
function sourceEvents(deps: LedgerDeps, posted: Posted, wants: Set<string>): SourceEvent[] {
  const events: SourceEvent[] = [];
  const t = posted.transaction;
  if (wants.has('Transaction:OnInsert')) {
    events.push({
      entity: 'Transaction',
      trigger: 'OnInsert',
      newDoc: transactionDocument(t),
      oldDoc: null,
      seq: t.seq,
      ref: {
        entity: 'Transaction',
        trigger: 'OnInsert',
        newId: t.transaction_id,
        newVersion: t.version,
        oldId: null,
        oldVersion: null,
      },
    });
  }
  if (wants.has('Entry:OnInsert')) {
    for (const e of posted.entries) {
      events.push({
        entity: 'Entry',
        trigger: 'OnInsert',
        newDoc: entryDocument(e, t),
        oldDoc: null,
        seq: e.seq,
        ref: { entity: 'Entry', trigger: 'OnInsert', newId: e.entry_id, newVersion: 1, oldId: null, oldVersion: null },
      });
    }
  }
  // A void updates the original: voidedBy on the transaction, is_voided_entry on its entries.
  if (t.void_of && (wants.has('Transaction:OnUpdate') || wants.has('Entry:OnUpdate'))) {
    const original = deps.st.transactionById.get(t.void_of);
    if (original) {
      const updated: TransactionRow = {
        ...original,
        voided_by: t.transaction_id,
        version: original.version + 1,
        modified: t.created,
      };
      if (wants.has('Transaction:OnUpdate')) {
        events.push({
          entity: 'Transaction',
          trigger: 'OnUpdate',
          newDoc: transactionDocument(updated),
          oldDoc: transactionDocument(original),
          seq: original.seq,
          ref: {
            entity: 'Transaction',
            trigger: 'OnUpdate',
            newId: original.transaction_id,
            newVersion: updated.version,
            oldId: original.transaction_id,
            oldVersion: original.version,
          },
        });
      }
      if (wants.has('Entry:OnUpdate')) {
        const entries: EntryRow[] = deps.st.entriesBySeqRange.all(
          original.first_entry_seq,
          original.first_entry_seq + original.entry_count,
          original.entry_count,
        );
        for (const e of entries) {
          events.push({
            entity: 'Entry',
            trigger: 'OnUpdate',
            newDoc: entryDocument(e, updated),
            oldDoc: entryDocument(e, original),
            seq: e.seq,
            ref: {
              entity: 'Entry',
              trigger: 'OnUpdate',
              newId: e.entry_id,
              newVersion: 1,
              oldId: e.entry_id,
              oldVersion: 1,
            },
          });
        }
      }
    }
  }
  return events;
}

/** Keep every view and custom index on the posted records up to date, in the posting's transaction. */
export function applyViews(deps: LedgerDeps, posted: Posted): void {
  const defs = definitions(deps);
  if (defs.empty) return;
  const events = sourceEvents(deps, posted, defs.wants);
  if (events.length === 0) return;
  const U = defs.U!;
  deps.cel.scope('views and indexes of a posting', () => {
    for (const index of defs.indexes) {
      for (const event of events) {
        if (event.entity === index.on)
          indexOne(deps, index, event.newDoc, event.ref.newId, event.seq, event.trigger === 'OnUpdate', U);
      }
    }
    for (const view of defs.views) {
      for (const event of events) {
        if (view.wants.has(`${event.entity}:${event.trigger}`)) applyView(deps, view, event, U);
      }
    }
  });
}

function zeroDocument(view: CompiledView, U: UintClass): Record<string, unknown> {
  return Object.fromEntries(view.fields.map((f) => [f.alias, zeroOf(f.type, U)]));
}

function evaluateFields(
  deps: LedgerDeps,
  view: CompiledView,
  mask: boolean[] | null,
  previous: Record<string, unknown>,
  context: Record<string, unknown>,
  U: UintClass,
) {
  const cel: Record<string, unknown> = {};
  const json: Record<string, unknown> = {};
  const what = `view ${view.view.name}`;
  view.fields.forEach((field, i) => {
    if (mask && !mask[i]) return;
    const label = `${what} document field ${field.alias}`;
    const value = run(field.fn, field.value, label, { document: previous, this: cel, context });
    checkCelValueSize(value, deps.limits.celValueSizeMax, label);
    const typed = toTyped(field.type, value, label, U);
    cel[field.alias] = typed.cel;
    json[field.alias] = typed.json;
  });
  return { cel, json };
}

function keyOf(view: CompiledView, document: Record<string, unknown>, context: Record<string, unknown>, U: UintClass) {
  const what = `view ${view.view.name}`;
  const scope = { document, context };
  const pvalues = view.partition.map((key) => keyValue(key, what, scope, U));
  const svalues = view.sort.map((key) => keyValue(key, what, scope, U));
  return { pkey: partitionKey(view.partition, pvalues), ...sortColumns(view.sort, svalues) };
}

function applyView(deps: LedgerDeps, view: CompiledView, event: SourceEvent, U: UintClass): void {
  const what = `view ${view.view.name}`;
  const trigger: Record<string, unknown> = {
    new: event.newDoc,
    old: event.oldDoc,
    entity: event.entity,
    trigger: event.trigger,
  };
  const context = { trigger };
  if (!holds(view.filters, `${what} filter`, { context })) return;
  let elements: unknown[] = [null];
  if (view.normalize) {
    const list = run(view.normalize.fn, view.normalize.value, `${what} normalize`, { context });
    if (!Array.isArray(list))
      throw new EngineError('CEL_ERROR', `${what} normalize must return a list`, {
        hint: 'e.g. [context.trigger.new.account_id] + context.trigger.new.parent_account_ids',
      });
    if (list.length > deps.limits.viewRecordsPerSourceMax) {
      throw limitExceeded(
        'viewRecordsPerSourceMax',
        deps.limits.viewRecordsPerSourceMax,
        list.length,
        `${what} normalize gave ${list.length} records for one ${event.entity}; viewRecordsPerSourceMax is ${deps.limits.viewRecordsPerSourceMax}`,
        {
          hint: 'Normalize over fewer values (an entry touches its account and the sets above it).',
        },
      );
    }
    if (list.length > 0) elements = list;
  }
  const now = deps.clock.now().toISOString();
  const st = deps.views;
  for (const element of elements) {
    trigger.normalize = element;
    const zero = zeroDocument(view, U);
    const first = evaluateFields(deps, view, view.keyFields, zero, context, U);
    const key = keyOf(view, first.cel, context, U);
    const existing = st.viewRecord.get(view.view.viewId, key.pkey, ...key.s);
    const previous = existing ? reviveDocument(view, existing.document, U) : zero;
    const next = existing || view.keyFields ? evaluateFields(deps, view, null, previous, context, U) : first;
    const check = keyOf(view, next.cel, context, U);
    if (check.pkey !== key.pkey || check.s.some((s, i) => s !== key.s[i])) {
      throw new EngineError('CEL_ERROR', `${what}: the record's key changed with the previous document`, {
        hint: 'Partition and sort keys must not depend on the previous document (document.* in the fields they read).',
      });
    }
    const document = JSON.stringify(next.json);
    if (Buffer.byteLength(document) > deps.limits.jsonBytesMax) {
      throw limitExceeded(
        'jsonBytesMax',
        deps.limits.jsonBytesMax,
        Buffer.byteLength(document),
        `${what}: a document of ${Buffer.byteLength(document)} bytes is larger than jsonBytesMax (${deps.limits.jsonBytesMax})`,
      );
    }
    const source = JSON.stringify(event.ref);
    if (existing) {
      const version = existing.version + 1;
      st.updateViewRecord.run({
        view_id: view.view.viewId,
        pkey: key.pkey,
        s0: key.s[0],
        s1: key.s[1],
        s2: key.s[2],
        s3: key.s[3],
        version,
        document,
        source,
        modified: now,
      });
      st.insertViewVersion.run(existing.record_id, version, document, source, now);
    } else {
      const recordId = deps.newId();
      st.insertViewRecord.run({
        view_id: view.view.viewId,
        pkey: key.pkey,
        s0: key.s[0],
        s1: key.s[1],
        s2: key.s[2],
        s3: key.s[3],
        r0: key.r[0],
        r1: key.r[1],
        r2: key.r[2],
        r3: key.r[3],
        record_id: recordId,
        document,
        source,
        modified: now,
      });
      st.insertViewVersion.run(recordId, 1, document, source, now);
    }
  }
}

/** A stored document as CEL sees it, each field with its declared type. */
function reviveDocument(view: CompiledView, text: string, U: UintClass): Record<string, unknown> {
  const json = JSON.parse(text) as Record<string, unknown>;
  return Object.fromEntries(
    view.fields.map((f) => [f.alias, f.alias in json ? fromJson(f.type, json[f.alias], U) : zeroOf(f.type, U)]),
  );
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
