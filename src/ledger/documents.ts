import { CelDecimal, CelMoney, jsonToCel } from '../cel/values.js';
import { Dec, scaleOf } from '../decimal.js';
import type { AccountRow, EntryRow, TransactionRow } from '../storage/statements/ledger.js';

/**
 * Ledger records as CEL sees them in calculations, velocity controls, views and indexes: the
 * reference ledger's snake_case field names, amounts as exact Decimal / Money (with their scale),
 * enums as their words (`entry.layer == SETTLED`, `entry.direction == DEBIT`), ids as strings.
 * `metadata` is left out when a record has none, so `has(doc.metadata)` tells.
 */
export type CelDocument = Record<string, unknown>;

/**
 * A posting's calculations, views, indexes and velocity controls read the same entries: each row's
 * document is built once (per row object and transaction row object: a void's rows are new objects).
 */
const entryDocuments = new WeakMap<EntryRow, { transaction: object | undefined; doc: CelDocument }>();

export function entryDocument(row: EntryRow, transaction?: EntryTransaction): CelDocument {
  const cached = entryDocuments.get(row);
  if (cached && cached.transaction === transaction) return cached.doc;
  const doc = buildEntryDocument(row, transaction);
  entryDocuments.set(row, { transaction, doc });
  return doc;
}

type EntryTransaction = Pick<TransactionRow, 'void_of' | 'voided_by'> | undefined;

/** Each field of an entry's document, by its name (`metadata` apart: absent when the entry has none). */
const ENTRY_FIELDS: Record<string, (row: EntryRow, transaction: EntryTransaction) => unknown> = {
  entry_id: (row) => row.entry_id,
  transaction_id: (row) => row.transaction_id,
  account_id: (row) => row.account_id,
  journal_id: (row) => row.journal_id,
  entry_type: (row) => row.entry_type,
  layer: (row) => row.layer,
  direction: (row) => row.direction,
  units: (row) => new CelDecimal(new Dec(row.units), scaleOf(row.units)),
  currency: (row) => row.currency,
  amount: (row) => new CelMoney(new Dec(row.units), row.currency, scaleOf(row.units)),
  sequence: (row) => BigInt(row.sequence),
  description: (row) => row.description ?? '',
  parent_account_ids: (row) =>
    row.parent_account_ids === null ? [] : (JSON.parse(row.parent_account_ids) as string[]),
  created: (row) => new Date(row.created),
  is_void_entry: (_row, transaction) => (transaction ? transaction.void_of !== null : false),
  is_voided_entry: (_row, transaction) => (transaction ? transaction.voided_by !== null : false),
};

const ENTRY_FIELD_LIST = Object.entries(ENTRY_FIELDS);

function buildEntryDocument(row: EntryRow, transaction: EntryTransaction): CelDocument {
  const doc: CelDocument = {};
  for (const [name, field] of ENTRY_FIELD_LIST) doc[name] = field(row, transaction);
  if (row.metadata !== null) doc.metadata = jsonToCel(JSON.parse(row.metadata));
  return doc;
}

/**
 * An entry's document with only the named fields, for expressions known to read nothing else
 * (see varsRead): each field as the whole document has it, `metadata` present only when the entry
 * has some, and a name the whole document does not have absent here too. Not cached: for the one or
 * two fields a dimension reads, building is cheaper than the lookup.
 */
export function entryFields(row: EntryRow, transaction: EntryTransaction, fields: ReadonlySet<string>): CelDocument {
  const doc: CelDocument = {};
  for (const name of fields) {
    if (name === 'metadata') {
      if (row.metadata !== null) doc.metadata = jsonToCel(JSON.parse(row.metadata));
    } else if (Object.hasOwn(ENTRY_FIELDS, name)) doc[name] = ENTRY_FIELDS[name]!(row, transaction);
  }
  return doc;
}

/**
 * What expressions read of `context.vars` (by their parsed trees): for each var, the fields they
 * read of it (`context.vars.entry.layer`, `context.vars.entry.?metadata`), or null where one reads
 * the var's document whole (`string(context.vars.entry)`); null in all where one reads `context`
 * or `context.vars` any other way (an index, a comprehension variable of that name, the map
 * itself). Documents built with just those fields give every one of those expressions the same
 * value and the same errors as whole documents.
 */
export type VarsRead = Map<string, Set<string> | null> | null;

export function varsRead(asts: readonly unknown[]): VarsRead {
  const read = new Map<string, Set<string> | null>();
  try {
    return walkReads(asts, read) ? read : null;
  } catch {
    // Whatever it cannot walk, it does not narrow.
    return null;
  }
}

/** Both read sets together (null, the whole context, wins). */
export function unionReads(a: VarsRead, b: VarsRead): VarsRead {
  if (a === null || b === null) return null;
  const union = new Map(a);
  for (const [name, fields] of b) {
    const mine = union.get(name);
    if (mine === undefined) union.set(name, fields === null ? null : new Set(fields));
    else if (mine !== null) union.set(name, fields === null ? null : new Set([...mine, ...fields]));
  }
  return union;
}

type AstNode = { op: string; args: unknown };

function isNode(value: unknown): value is AstNode {
  return value !== null && typeof value === 'object' && typeof (value as AstNode).op === 'string';
}

/** `context.vars.<name>`: the name, else null. */
function varOf(node: AstNode): string | null {
  if (node.op !== '.' || !Array.isArray(node.args) || typeof node.args[1] !== 'string') return null;
  const vars = node.args[0];
  if (!isNode(vars) || vars.op !== '.' || !Array.isArray(vars.args) || vars.args[1] !== 'vars') return null;
  const root = vars.args[0];
  return isNode(root) && root.op === 'id' && root.args === 'context' ? node.args[1] : null;
}

/**
 * False once the whole context is read, or anything is met that is not a parsed node it knows (a
 * missing tree, a node kind whose parts are not in its args): what it cannot see, it does not
 * narrow. An explicit stack: the parser builds `a + b + c …` as one level per term, thousands deep.
 */
function walkReads(root: unknown, read: Map<string, Set<string> | null>): boolean {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const value = stack.pop();
    if (Array.isArray(value)) {
      for (const item of value) stack.push(item);
      continue;
    }
    if (typeof value === 'string') continue;
    if (!isNode(value)) return false;
    // A literal's args are its value.
    if (value.op === 'value') continue;
    if (
      (value.op === '.' || value.op === '.?') &&
      Array.isArray(value.args) &&
      typeof value.args[1] === 'string' &&
      isNode(value.args[0])
    ) {
      const name = varOf(value.args[0]);
      if (name !== null) {
        const fields = read.get(name);
        if (fields === undefined) read.set(name, new Set([value.args[1]]));
        else fields?.add(value.args[1]);
        continue;
      }
    }
    const name = varOf(value);
    if (name !== null) {
      read.set(name, null);
      continue;
    }
    if (value.op === 'id') {
      if (value.args === 'context') return false;
      continue;
    }
    stack.push(value.args);
  }
  return true;
}

/** Transaction and account documents, built once per row object (cached rows are shared, never mutated). */
const rowDocuments = new WeakMap<object, CelDocument>();

export function transactionDocument(row: TransactionRow): CelDocument {
  let doc = rowDocuments.get(row);
  if (!doc) rowDocuments.set(row, (doc = buildTransactionDocument(row)));
  return doc;
}

export function accountDocument(row: AccountRow): CelDocument {
  let doc = rowDocuments.get(row);
  if (!doc) rowDocuments.set(row, (doc = buildAccountDocument(row)));
  return doc;
}

/**
 * `vars` whose documents are built when an expression first reads them: a calculation's dimension
 * usually reads one field of the entry, and building the account's and transaction's costs more.
 */
export function lazyVars(builders: Record<string, () => CelDocument>): CelDocument {
  const vars: CelDocument = {};
  for (const [name, build] of Object.entries(builders)) {
    Object.defineProperty(vars, name, {
      enumerable: true,
      configurable: true,
      get() {
        const value = build();
        Object.defineProperty(vars, name, { value, enumerable: true });
        return value;
      },
    });
  }
  return vars;
}

function buildTransactionDocument(row: TransactionRow): CelDocument {
  const doc: CelDocument = {
    transaction_id: row.transaction_id,
    tran_code_id: row.tran_code_id,
    tran_code_version: BigInt(row.tran_code_version),
    journal_id: row.journal_id,
    correlation_id: row.correlation_id ?? row.transaction_id,
    external_id: row.external_id ?? '',
    effective: row.effective,
    description: row.description ?? '',
    void_of: row.void_of ?? '',
    voided_by: row.voided_by ?? '',
    created: new Date(row.created),
    modified: new Date(row.modified),
  };
  if (row.metadata !== null) doc.metadata = jsonToCel(JSON.parse(row.metadata));
  return doc;
}

function buildAccountDocument(row: AccountRow): CelDocument {
  const doc: CelDocument = {
    account_id: row.account_id,
    code: row.code,
    name: row.name,
    external_id: row.external_id ?? '',
    description: row.description ?? '',
    status: row.status,
    normal_balance_type: row.normal_balance_type,
    is_account_set: row.is_account_set === 1,
    journal_id: row.journal_id ?? '',
    created: new Date(row.created),
    modified: new Date(row.modified),
  };
  if (row.metadata !== null) doc.metadata = jsonToCel(JSON.parse(row.metadata));
  return doc;
}
