import { type Connection, encodeCursor, pageRequest } from '../paging.js';
import { EngineError, limitExceeded, quote } from '../errors.js';
import type { EntryRow, TransactionRow } from '../storage/statements/ledger.js';
import type { IndexRow } from '../storage/statements/views.js';
import type { LedgerDeps } from './deps.js';
import { type CelDocument, entryDocument, transactionDocument } from './documents.js';
import {
  badDefinition,
  checkName,
  type Compiled,
  type CompiledKey,
  compileConditions,
  compileKeys,
  holds,
  type KeyFilter,
  type KeyInput,
  keyQuery,
  keyValue,
  partitionKey,
  run,
  sortColumns,
} from './index-keys.js';
import type { Entry, Transaction } from './records.js';
import { toEntry, toTransaction } from './transaction-records.js';
import { type DataType, type SortOrder, toTyped, type UintClass } from './typed-values.js';

/**
 * Custom indexes on entries and transactions: definitions compiled and read back, a record's rows
 * written when it is posted or updated (and, when an index is created, for what exists), and the
 * reads through an index (Query.entries / Query.transactions where.custom).
 */

/** Fields whose type is known, for keys that give none: `document.<field>` of an entry or a transaction. */
const ENTRY_FIELDS: Record<string, DataType> = {
  entry_id: 'UUID',
  transaction_id: 'UUID',
  account_id: 'UUID',
  journal_id: 'UUID',
  entry_type: 'String',
  layer: 'String',
  direction: 'String',
  units: 'Decimal',
  currency: 'String',
  sequence: 'Int',
  description: 'String',
  parent_account_ids: 'UUID',
  created: 'Timestamp',
  is_void_entry: 'Boolean',
  is_voided_entry: 'Boolean',
};
const TRANSACTION_FIELDS: Record<string, DataType> = {
  transaction_id: 'UUID',
  tran_code_id: 'UUID',
  tran_code_version: 'Int',
  journal_id: 'UUID',
  correlation_id: 'String',
  external_id: 'String',
  effective: 'Date',
  description: 'String',
  void_of: 'String',
  voided_by: 'String',
  created: 'Timestamp',
  modified: 'Timestamp',
};

export type IndexOn = 'Entry' | 'Transaction';

export interface IndexInput {
  name: string;
  on: IndexOn;
  unique?: boolean | null;
  partition: KeyInput[];
  sort?: KeyInput[] | null;
  constraints?: Record<string, string> | null;
}

export interface CompiledIndex {
  indexId: string;
  name: string;
  on: IndexOn;
  unique: boolean;
  partition: CompiledKey[];
  sort: CompiledKey[];
  constraints: Array<{ name: string; value: string; fn: Compiled }>;
  row: IndexRow;
}

export interface IndexRecord {
  indexId: string;
  name: string;
  on: IndexOn;
  unique: boolean;
  partition: Array<{ alias: string; value: string; type: DataType }>;
  sort: Array<{ alias: string; value: string; type: DataType; sort: SortOrder }>;
  constraints: Record<string, string>;
  version: number;
  created: string;
  modified: string;
}

export function compileIndex(deps: LedgerDeps, input: IndexInput, row?: IndexRow): CompiledIndex {
  const name = checkName('index', input?.name);
  if (input.on !== 'Entry' && input.on !== 'Transaction') {
    throw badDefinition(
      `index ${name}: on must be Entry or Transaction, got ${quote(input.on)}`,
      'Custom indexes cover entries and transactions.',
    );
  }
  const what = `index ${name} on ${input.on}`;
  const known = input.on === 'Entry' ? ENTRY_FIELDS : TRANSACTION_FIELDS;
  const seen = new Set<string>();
  const partition = compileKeys(deps, what, input.partition, false, known, seen);
  if (partition.length === 0)
    throw badDefinition(
      `${what} needs at least one partition key`,
      'Every read names a partition: e.g. { alias: "account", value: "document.account_id" }.',
    );
  const sort = compileKeys(deps, what, input.sort, true, known, seen);
  const constraints = compileConditions(deps, `${what} constraint`, input.constraints);
  return {
    indexId: row?.index_id ?? '',
    name,
    on: input.on,
    unique: input.unique === true,
    partition,
    sort,
    constraints,
    row: row!,
  };
}

export function indexRecord(row: IndexRow): IndexRecord {
  const def = JSON.parse(row.definition) as {
    unique: boolean;
    partition: IndexRecord['partition'];
    sort: IndexRecord['sort'];
    constraints: Record<string, string>;
  };
  return {
    indexId: row.index_id,
    name: row.name,
    on: row.on_entity as IndexOn,
    unique: def.unique,
    partition: def.partition,
    sort: def.sort,
    constraints: def.constraints,
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

/** Write a record's rows in one index (after removing its old ones when it is an update). */
export function indexOne(
  deps: LedgerDeps,
  index: CompiledIndex,
  doc: CelDocument,
  recordId: string,
  seq: number,
  update: boolean,
  U: UintClass,
): void {
  const st = deps.views;
  if (update) st.deleteIndexRowsOf.run(index.indexId, recordId);
  const what = `index ${index.name}`;
  const context = { document: doc };
  if (!holds(index.constraints, `${what} constraint`, context)) return;
  // Each partition key may give a list: one row per combination.
  let combos: unknown[][] = [[]];
  for (const key of index.partition) {
    const value = run(key.fn, key.value, `${what} partition key ${key.alias}`, context);
    const elements = Array.isArray(value) ? value : [value];
    const next: unknown[][] = [];
    for (const combo of combos) {
      for (const element of elements)
        next.push([...combo, toTyped(key.type, element, `${what} partition key ${key.alias}`, U, true).cel]);
    }
    if (next.length > deps.limits.indexRowsPerRecordMax) {
      throw limitExceeded(
        'indexRowsPerRecordMax',
        deps.limits.indexRowsPerRecordMax,
        next.length,
        `${what}: record ${recordId} would have ${next.length} rows; indexRowsPerRecordMax is ${deps.limits.indexRowsPerRecordMax}`,
        {
          hint: 'Make the partition expression return a shorter list.',
        },
      );
    }
    combos = next;
  }
  const sortValues = index.sort.map((key) => keyValue(key, what, context, U));
  const { s, r } = sortColumns(index.sort, sortValues);
  const done = new Set<string>();
  for (const combo of combos) {
    const pkey = partitionKey(index.partition, combo);
    if (done.has(pkey)) continue;
    done.add(pkey);
    if (index.unique) {
      const holder = st.indexKeyHolder.get(index.indexId, pkey, s[0], s[1], s[2], s[3], recordId);
      if (holder !== undefined) {
        throw new EngineError(
          'ALREADY_EXISTS',
          `unique index ${index.name} on ${index.on} already holds this key, for ${index.on === 'Entry' ? 'entry' : 'transaction'} ${holder}`,
          {
            hint: 'The index is unique: two records cannot share a key.',
            details: { index: index.name, recordId: holder },
          },
        );
      }
    }
    st.insertIndexRow.run({
      index_id: index.indexId,
      pkey,
      s0: s[0],
      s1: s[1],
      s2: s[2],
      s3: s[3],
      r0: r[0],
      r1: r[1],
      r2: r[2],
      r3: r[3],
      seq,
      record_id: recordId,
    });
  }
}

/** Index what exists when an index is created: at most indexBackfillMax records, or nothing. */
export function backfill(deps: LedgerDeps, index: CompiledIndex, U: UintClass): void {
  const st = deps.views;
  const max = deps.limits.indexBackfillMax;
  const existing = index.on === 'Entry' ? st.entriesBeyond.get(max + 1)! : st.transactionsBeyond.get(max + 1)!;
  if (existing > max) {
    throw limitExceeded(
      'indexBackfillMax',
      max,
      existing,
      `index ${index.name}: more than indexBackfillMax (${max}) ${index.on === 'Entry' ? 'entries' : 'transactions'} exist to index`,
      {
        hint: 'Create indexes before the data grows, or raise indexBackfillMax for a maintenance window.',
      },
    );
  }
  let after = 0;
  const flags = new Map<string, { void_of: string | null; voided_by: string | null }>();
  for (;;) {
    const rows = (index.on === 'Entry'
      ? st.entriesAfter.all(after, 500)
      : st.transactionsAfter.all(after, 500)) as unknown as Array<EntryRow | TransactionRow>;
    if (rows.length === 0) return;
    for (const row of rows) {
      if (index.on === 'Entry') {
        const entry = row as EntryRow;
        let txn = flags.get(entry.transaction_id);
        if (!txn) {
          txn = st.transactionOfEntry.get(entry.transaction_id) ?? { void_of: null, voided_by: null };
          if (flags.size > 1000) flags.clear();
          flags.set(entry.transaction_id, txn);
        }
        indexOne(deps, index, entryDocument(entry, txn), entry.entry_id, entry.seq, false, U);
      } else {
        const txn = row as TransactionRow;
        indexOne(deps, index, transactionDocument(txn), txn.transaction_id, txn.seq, false, U);
      }
    }
    after = rows.at(-1)!.seq;
  }
}

// ---------------------------------------------------------------------------------------------
// Reads through a custom index: Query.entries / Query.transactions (where.custom).

export interface CustomFilter {
  index: string;
  partition?: KeyFilter[] | null;
  sort?: KeyFilter[] | null;
}

function indexPage<T>(
  deps: LedgerDeps,
  index: CompiledIndex,
  filter: CustomFilter,
  first: number,
  after: string | null | undefined,
  toNode: (row: never) => T,
): Connection<T> {
  const req = pageRequest<string>(first, after, deps.limits.pageSizeMax, 'string', `index:${index.on}:${index.name}`);
  let cursor: Array<string | number> | undefined;
  if (req.after !== undefined) {
    try {
      cursor = JSON.parse(req.after) as Array<string | number>;
    } catch {
      cursor = undefined;
    }
    if (!Array.isArray(cursor) || cursor.length !== 5)
      throw new EngineError('BAD_REQUEST', 'the cursor is not one of this index', {
        hint: 'Pass pageInfo.endCursor as after.',
      });
  }
  const query = keyQuery(`index ${index.name}`, index.partition, index.sort, filter);
  const rows = deps.views.indexPage(index.on, index.indexId, query.pkey, query.conditions, cursor, req.fetch);
  const page = rows.slice(0, req.first);
  const edges = page.map((row) => {
    const { _s0, _s1, _s2, _s3, _seq, ...record } = row;
    return {
      cursor: encodeCursor(req.kind, JSON.stringify([_s0, _s1, _s2, _s3, _seq])),
      node: toNode(record as never),
    };
  });
  return {
    nodes: edges.map((e) => e.node),
    edges,
    pageInfo: {
      hasNextPage: rows.length > req.first,
      hasPreviousPage: req.after !== undefined,
      startCursor: edges[0]?.cursor ?? null,
      endCursor: edges.at(-1)?.cursor ?? null,
    },
  };
}

export function findIndex(deps: LedgerDeps, name: string, on: IndexOn): CompiledIndex {
  const row = deps.views.indexByName.get(name, on);
  if (!row)
    throw new EngineError('NOT_FOUND', `index ${quote(name)} on ${on} does not exist`, {
      hint: 'List indexes with schema { indexes(first:) }.',
    });
  const record = indexRecord(row);
  return compileIndex(
    deps,
    {
      name: record.name,
      on: record.on,
      unique: record.unique,
      partition: record.partition,
      sort: record.sort,
      constraints: record.constraints,
    },
    row,
  );
}

export function entriesByIndex(
  deps: LedgerDeps,
  filter: CustomFilter,
  first: number,
  after?: string | null,
): Connection<Entry> {
  return indexPage(deps, findIndex(deps, filter.index, 'Entry'), filter, first, after, (row: EntryRow) => toEntry(row));
}

export function transactionsByIndex(
  deps: LedgerDeps,
  filter: CustomFilter,
  first: number,
  after?: string | null,
): Connection<Transaction> {
  return indexPage(deps, findIndex(deps, filter.index, 'Transaction'), filter, first, after, (row: TransactionRow) =>
    toTransaction(row),
  );
}
