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

export function entryDocument(row: EntryRow, transaction?: Pick<TransactionRow, 'void_of' | 'voided_by'>): CelDocument {
  const cached = entryDocuments.get(row);
  if (cached && cached.transaction === transaction) return cached.doc;
  const doc = buildEntryDocument(row, transaction);
  entryDocuments.set(row, { transaction, doc });
  return doc;
}

function buildEntryDocument(row: EntryRow, transaction?: Pick<TransactionRow, 'void_of' | 'voided_by'>): CelDocument {
  const scale = scaleOf(row.units);
  const units = new Dec(row.units);
  const doc: CelDocument = {
    entry_id: row.entry_id,
    transaction_id: row.transaction_id,
    account_id: row.account_id,
    journal_id: row.journal_id,
    entry_type: row.entry_type,
    layer: row.layer,
    direction: row.direction,
    units: new CelDecimal(units, scale),
    currency: row.currency,
    amount: new CelMoney(units, row.currency, scale),
    sequence: BigInt(row.sequence),
    description: row.description ?? '',
    parent_account_ids: row.parent_account_ids === null ? [] : (JSON.parse(row.parent_account_ids) as string[]),
    created: new Date(row.created),
    is_void_entry: transaction ? transaction.void_of !== null : false,
    is_voided_entry: transaction ? transaction.voided_by !== null : false,
  };
  if (row.metadata !== null) doc.metadata = jsonToCel(JSON.parse(row.metadata));
  return doc;
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
