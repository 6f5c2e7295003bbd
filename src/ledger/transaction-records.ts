import type { EntryRow, TransactionRow } from '../storage/statements/ledger.js';
import {
  type Direction,
  type Entry,
  type Layer,
  readJson,
  type Transaction,
  type TransactionProperties,
} from './records.js';

/**
 * Transactions and entries as the API answers them, from their rows. Every module that reads
 * them (posting, reads, sets, custom indexes, the view resolvers) maps them here.
 */

export function toTransaction(row: TransactionRow): Transaction {
  return {
    transactionId: row.transaction_id,
    tranCodeId: row.tran_code_id,
    tranCodeVersion: row.tran_code_version,
    journalId: row.journal_id,
    correlationId: row.correlation_id ?? row.transaction_id,
    externalId: row.external_id,
    effective: row.effective,
    description: row.description,
    metadata: readJson(row.metadata),
    voidOf: row.void_of,
    voidedBy: row.voided_by,
    exceptions: row.exceptions == null ? [] : (JSON.parse(row.exceptions) as Transaction['exceptions']),
    ...(row.properties == null ? {} : { properties: JSON.parse(row.properties) as TransactionProperties }),
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

/**
 * How a write was judged, as its row keeps it: the velocity exceptions it recorded (`exceptions`, a
 * JSON list) and the override it was sent with (`properties`); null for none, so a plain posting
 * writes nothing more. Null when there is nothing to record.
 */
export function judgedColumns(
  exceptions: Transaction['exceptions'],
  override: string | null | undefined,
): [exceptions: string | null, properties: string | null] | null {
  if (exceptions.length === 0 && !override) return null;
  return [
    exceptions.length > 0 ? JSON.stringify(exceptions) : null,
    override ? JSON.stringify({ overrideVelocityEnforcement: { action: override } }) : null,
  ];
}

export function toEntry(row: EntryRow): Entry {
  return {
    entryId: row.entry_id,
    transactionId: row.transaction_id,
    accountId: row.account_id,
    journalId: row.journal_id,
    sequence: row.sequence,
    entryType: row.entry_type,
    layer: row.layer as Layer,
    direction: row.direction as Direction,
    units: row.units,
    currency: row.currency,
    description: row.description,
    metadata: readJson(row.metadata),
    parentAccountIds: row.parent_account_ids === null ? [] : (JSON.parse(row.parent_account_ids) as string[]),
    created: row.created,
  };
}
