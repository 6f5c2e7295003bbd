import type { EntryRow, TransactionRow } from '../storage/statements/ledger.js';
import { type Direction, type Entry, type Layer, readJson, type Transaction } from './records.js';

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
    ...judged(row.exceptions),
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

/**
 * The `exceptions` column: the velocity exceptions the write recorded (a JSON list), or, when it
 * was sent with an override, `{exceptions, properties}` (the column predates properties; a write
 * with neither leaves it null, so a plain posting writes nothing more).
 */
export function judgedText(exceptions: Transaction['exceptions'], override: string | null | undefined): string | null {
  if (override)
    return JSON.stringify({ exceptions, properties: { overrideVelocityEnforcement: { action: override } } });
  return exceptions.length > 0 ? JSON.stringify(exceptions) : null;
}

function judged(text: string | null | undefined): Pick<Transaction, 'exceptions' | 'properties'> {
  if (text === null || text === undefined) return { exceptions: [] };
  const value = JSON.parse(text) as
    | Transaction['exceptions']
    | Required<Pick<Transaction, 'exceptions' | 'properties'>>;
  return Array.isArray(value) ? { exceptions: value } : { exceptions: value.exceptions, properties: value.properties };
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
