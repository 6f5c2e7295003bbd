import { utcDate } from '../clock.js';
import { badInput, EngineError, notFound } from '../errors.js';
import type { TransactionRow } from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import type { Layer, Transaction } from './records.js';
import type { PlannedEntry } from './tran-code-expansion.js';
import { judgedColumns, toTransaction } from './transaction-records.js';
import { enforceVoid, uncountVoided, type VelocityProperties, type Writer } from './velocity-gate.js';
import { announce, checkPostable, toWrite, type WriteGuard, writeTransaction } from './write-transaction.js';

/**
 * Voiding a transaction: its reversal (every entry on its layer with the opposite direction) is
 * written as a posting under the original's tran code and judged by the posting gate, or, for the
 * gate's own void of a posting it just let through (VOID), only taken out of the running totals.
 */

/** A void's properties: only the velocity override (a void records no exception of its own making). */
export type VoidProperties = Pick<VelocityProperties, 'overrideVelocityEnforcement'>;

/**
 * Void a transaction: write its reversal (every entry on its layer with the opposite direction),
 * judged by the posting gate like any posting (velocity-gate.ts enforceVoid): a void that would take a
 * guarded balance further past its limit is refused unless `properties` overrides the enforcement.
 */
export function voidTransaction(
  deps: LedgerDeps,
  transactionId: string,
  guard?: WriteGuard,
  options: { properties?: VoidProperties | null; writer?: Writer } = {},
): Transaction {
  const properties = options.properties ?? null;
  if (properties !== null && (typeof properties !== 'object' || Array.isArray(properties))) {
    throw badInput('properties must be an object', properties);
  }
  return reverseTransaction(deps, transactionId, guard, {
    properties:
      properties === null ? null : { overrideVelocityEnforcement: properties.overrideVelocityEnforcement ?? null },
    writer: options.writer,
  });
}

/** Write the reversal of a transaction; `gate` null only for the gate's own void of a posting it just let through. */
export function reverseTransaction(
  deps: LedgerDeps,
  transactionId: string,
  guard: WriteGuard | undefined,
  gate: { properties: VelocityProperties | null; writer: Writer | undefined } | null,
): Transaction {
  const original = deps.st.transactionById.get(transactionId);
  if (!original) throw notFound('transaction', transactionId);
  if (original.voided_by) {
    throw new EngineError(
      'ALREADY_VOIDED',
      `transaction ${transactionId} was already voided by ${original.voided_by}`,
      {
        details: { voidedBy: original.voided_by },
      },
    );
  }
  if (original.void_of) {
    throw new EngineError('BAD_REQUEST', `transaction ${transactionId} is itself the void of ${original.void_of}`, {
      hint: 'Post the original again with a new transactionId instead.',
    });
  }
  // A void is a posting under the original's tran code: a LOCKED one refuses it, as it refuses posts.
  const tranCode = deps.st.tranCodeById.get(original.tran_code_id);
  if (tranCode && tranCode.status !== 'ACTIVE') {
    throw new EngineError(
      'TRAN_CODE_LOCKED',
      `tran code ${tranCode.code} of transaction ${transactionId} is ${tranCode.status}; a void posts under it too`,
      {
        hint: 'Set the tran code ACTIVE again (updateTranCode status: ACTIVE) to void it, or post a correction with an active tran code.',
      },
    );
  }
  const journal = deps.st.journalById.get(original.journal_id);
  if (journal && journal.status !== 'ACTIVE') {
    throw new EngineError('JOURNAL_LOCKED', `journal ${journal.name} (${journal.journal_id}) is ${journal.status}`);
  }
  const entries = deps.st.entriesBySeqRange.all(
    original.first_entry_seq,
    original.first_entry_seq + original.entry_count,
    original.entry_count,
  );
  checkPostable(
    deps,
    entries.map((e) => e.account_id),
  );

  const now = deps.clock.now();
  const { seq: _seq, first_entry_seq: _first, entry_count: _count, ...kept } = original;
  const reversal: Omit<TransactionRow, 'seq' | 'first_entry_seq' | 'entry_count' | 'exceptions' | 'properties'> = {
    ...kept,
    // A fresh id: a derived one could be taken by a client first, making the void impossible.
    transaction_id: deps.newId(),
    correlation_id: original.correlation_id || original.transaction_id,
    effective: utcDate(now),
    void_of: transactionId,
    voided_by: null,
    input_fingerprint: null,
    version: 1,
    created: now.toISOString(),
    modified: now.toISOString(),
  };
  const planned: PlannedEntry[] = entries.map((e) => ({
    accountId: e.account_id,
    units: e.units,
    currency: e.currency,
    direction: e.direction === 'DEBIT' ? 'CREDIT' : 'DEBIT',
    layer: e.layer as Layer,
    entryType: e.entry_type,
    description: e.description,
    metadata: e.metadata,
  }));
  guard?.(toWrite(planned, reversal.journal_id));
  const { written, verdict } = deps.cel.scope(
    `the calculations, views, indexes and velocity controls the void of ${transactionId} reaches`,
    () => {
      const posted = writeTransaction(deps, reversal, planned);
      deps.st.markVoided.run(reversal.transaction_id, now.toISOString(), transactionId);
      const voided = { transaction: original, entries };
      if (gate === null) {
        uncountVoided(deps, voided);
        return { written: posted.transaction, verdict: null };
      }
      return { written: posted.transaction, verdict: enforceVoid(deps, posted, voided, gate.properties, gate.writer) };
    },
    deps.limits.postingCelCostMax,
    'postingCelCostMax',
  );
  const judged = verdict && judgedColumns(verdict.exceptions, gate?.properties?.overrideVelocityEnforcement?.action);
  if (judged) deps.vel.setJudged.run(...judged, reversal.transaction_id);
  const reversed = toTransaction(judged ? deps.st.transactionById.get(reversal.transaction_id)! : written);
  announce(deps, reversed, tranCode?.code ?? '', () => null, planned);
  return reversed;
}
