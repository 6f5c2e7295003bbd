import { checkCelValueSize } from '../cel/cel.js';
import { EngineError, limitExceeded } from '../errors.js';
import type { EntryRow, TransactionRow } from '../storage/statements/ledger.js';
import type { IndexRow } from '../storage/statements/views.js';
import type { LedgerDeps } from './deps.js';
import { type CelDocument, entryDocument, transactionDocument } from './documents.js';
import { holds, keyValue, partitionKey, run, sortColumns } from './index-keys.js';
import { type CompiledIndex, compileIndex, indexOne, indexRecord } from './indexes.js';
import type { Posted } from './posted.js';
import { fromJson, toTyped, type UintClass, uintClass, zeroOf } from './typed-values.js';
import { type CompiledView, type SourceRef, type Trigger, viewFromRow } from './views.js';

/**
 * Views and custom indexes kept up to date inside the posting transaction: the changes of one
 * posting (inserted records, and the original a void updates) as source events, each index's rows
 * and each view's record written for them, under one CEL budget.
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

interface Definitions {
  empty: boolean;
  views: CompiledView[];
  indexes: CompiledIndex[];
  /** "Entity:Trigger" that some view or index listens to. */
  wants: Set<string>;
  U: UintClass | null;
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
