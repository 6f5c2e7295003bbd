import { toEntry, toTransaction } from '../../ledger/transaction-records.js';
import * as views from '../../ledger/views.js';
import type { RequestContext } from '../context.js';
import { guard, visible } from './guard.js';

type Args = Record<string, any>;

const V = 'financial.View';
const I = 'financial.Index';

/** The record a view version came from, as it was then (a void is the only update: it set voidedBy). */
function sourceRecord(ctx: RequestContext, entity: string, id: string | null, version: number | null) {
  if (id === null) return null;
  const deps = ctx.ledger.deps;
  if (entity === 'Entry') {
    const row = deps.st.entryById.get(id);
    return row ? guard(ctx, 'SELECT', 'financial.Entry', toEntry(row)) : null;
  }
  const row = deps.st.transactionById.get(id);
  if (!row) return null;
  let transaction = toTransaction(row);
  if (version !== null && version < row.version) transaction = { ...transaction, version, voidedBy: null };
  return guard(ctx, 'SELECT', 'financial.Transaction', transaction);
}

export const viewResolvers = {
  Query: {
    schema: () => ({}),
    view: (_: unknown, { name, where, first, after }: Args, ctx: RequestContext) => {
      guard(ctx, 'SELECT', V, views.getView(ctx.ledger.deps, name));
      return visible(ctx, V, views.viewRecords(ctx.ledger.deps, name, where, first, after), (r) => ({
        name: r.name,
        document: r.document,
      }));
    },
  },
  Mutation: {
    schema: () => ({}),
  },
  SchemaQuery: {
    view: (_: unknown, { name }: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', V, views.getView(ctx.ledger.deps, name)),
    views: (_: unknown, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, V, views.listViews(ctx.ledger.deps, first, after)),
    index: (_: unknown, { name, on }: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', I, views.getIndex(ctx.ledger.deps, name, on)),
    indexes: (_: unknown, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, I, views.listIndexes(ctx.ledger.deps, first, after)),
  },
  SchemaMutation: {
    // A view's records aggregate every source record, whoever may read them: its author must be
    // allowed to read all of them (a row-level SELECT, whose assertion an empty document fails, is not enough).
    createView: (_: unknown, { input }: Args, ctx: RequestContext) => {
      guard(ctx, 'INSERT', V, input);
      for (const source of Array.isArray(input?.sources) ? input.sources : []) {
        if (typeof source?.entity === 'string') guard(ctx, 'SELECT', `financial.${source.entity}`, {});
      }
      return views.createView(ctx.ledger.deps, input);
    },
    deleteView: (_: unknown, { name }: Args, ctx: RequestContext) => {
      guard(ctx, 'DELETE', V, views.getView(ctx.ledger.deps, name));
      return views.deleteView(ctx.ledger.deps, name);
    },
    createIndex: (_: unknown, { input }: Args, ctx: RequestContext) =>
      views.createIndex(ctx.ledger.deps, guard(ctx, 'INSERT', I, input)),
    deleteIndex: (_: unknown, { name, on }: Args, ctx: RequestContext) => {
      guard(ctx, 'DELETE', I, views.getIndex(ctx.ledger.deps, name, on));
      return views.deleteIndex(ctx.ledger.deps, name, on);
    },
  },
  ViewRecord: {
    history: (r: views.ViewRecord, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, V, views.viewRecordHistory(ctx.ledger.deps, r, first, after), (v) => ({
        name: v.name,
        document: v.document,
      })),
    source: (r: views.ViewRecord) => r.source,
  },
  ViewTrigger: {
    new: (s: views.SourceRef, _: Args, ctx: RequestContext) => sourceRecord(ctx, s.entity, s.newId, s.newVersion),
    old: (s: views.SourceRef, _: Args, ctx: RequestContext) => sourceRecord(ctx, s.entity, s.oldId, s.oldVersion),
  },
  LedgerRecord: {
    __resolveType: (node: Record<string, unknown>) =>
      'entryId' in node ? 'Entry' : 'tranCodeId' in node ? 'Transaction' : 'Account',
  },
};
