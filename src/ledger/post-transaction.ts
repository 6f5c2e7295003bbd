import { canonicalJson, fingerprint } from '../ids.js';
import { Dec, scaleOf } from '../decimal.js';
import { badInput, EngineError, notFound, quote } from '../errors.js';
import type { TranCodeRow, TransactionRow } from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import { isPlainJson, jsonObjectText, type Transaction } from './records.js';
import { expand, type PlannedEntry } from './tran-code-expansion.js';
import { findTranCodeRow, type TranCodeCache } from './tran-codes.js';
import { judgedColumns, toTransaction } from './transaction-records.js';
import { enforceVelocity, type VelocityProperties, type Writer } from './velocity-gate.js';
import { reverseTransaction } from './void-transaction.js';
import { announce, checkPostable, toWrite, type WriteGuard, writeTransaction } from './write-transaction.js';

/**
 * Posting a transaction, step by step: the idempotency key, the tran code and its version, the
 * expansion of its templates, the balance and postable checks, the guard, then the write judged by
 * the posting gate (velocity-gate.ts), which may record exceptions or void it at once.
 */

export interface PostTransactionInput {
  transactionId: string;
  tranCode: string;
  tranCodeVersion?: number | null;
  params?: unknown;
  /** Velocity enforcement override, or an exception to record (the posting is then voided at once). */
  properties?: VelocityProperties | null;
}

/**
 * The only writer of transactions, entries and balances. Expands the tran code, checks that every
 * currency and layer balances and that every account and the journal accept postings, then writes
 * it all and has the posting gate (velocity-gate.ts decide) judge it. Nothing is kept unless every
 * check passed. `transactionId` is the idempotency key. `writer`: who posts, as the gate needs to
 * know (none: the engine itself).
 */
export function postTransaction(
  deps: LedgerDeps,
  cache: TranCodeCache,
  input: PostTransactionInput,
  guard?: WriteGuard,
  writer?: Writer,
): Transaction {
  const params = input.params ?? {};
  if (typeof params !== 'object' || params === null || Array.isArray(params)) {
    throw badInput(
      'params must be a JSON object',
      params,
      'Send params as an object keyed by param name, e.g. {"amount": "10.00"}.',
    );
  }
  const paramsText = jsonObjectText(params, 'params', deps.limits.jsonBytesMax);
  // Plain JSON reads back as itself: the fingerprint needs no parse of the text just written.
  const paramsJson = isPlainJson(params) ? params : JSON.parse(paramsText ?? '{}');
  const properties = input.properties ?? null;
  if (properties !== null && (typeof properties !== 'object' || Array.isArray(properties))) {
    throw badInput('properties must be an object', properties);
  }
  // Properties count toward the idempotency key only when sent: fingerprints from before stay valid.
  const inputFingerprint = fingerprint(
    canonicalJson({
      tranCode: input.tranCode,
      tranCodeVersion: input.tranCodeVersion ?? null,
      params: paramsJson,
      ...(properties !== null && Object.keys(properties).length > 0 ? { properties } : {}),
    }),
  );

  const existing = deps.st.fingerprintOfTransaction.get(input.transactionId);
  if (existing !== undefined) {
    if (existing === inputFingerprint) return toTransaction(deps.st.transactionById.get(input.transactionId)!);
    throw new EngineError(
      'TRANSACTION_ID_CONFLICT',
      `transaction ${input.transactionId} was already posted with a different input`,
      { details: { transactionId: input.transactionId } },
    );
  }

  const tranCodeRow = cachedTranCode(deps, input.tranCode);
  if (tranCodeRow.status !== 'ACTIVE') {
    throw new EngineError('TRAN_CODE_LOCKED', `tran code ${tranCodeRow.code} is ${tranCodeRow.status}`);
  }
  const version = input.tranCodeVersion ?? tranCodeRow.version;
  if (!Number.isInteger(version) || version < 1 || version > tranCodeRow.version) {
    throw new EngineError(
      'NOT_FOUND',
      `tran code ${tranCodeRow.code} has no version ${quote(version)}; its latest is ${tranCodeRow.version}`,
      {
        hint: 'Leave tranCodeVersion out to use the latest version.',
      },
    );
  }
  const compiled = cache.get(deps, tranCodeRow.tran_code_id, version);
  // One budget (celCostMax) for every template of one posting, as one evaluate call has.
  const expanded = deps.cel.scope(`tran code ${compiled.document.code}`, () =>
    expand(deps, compiled, input.transactionId, params as Record<string, unknown>),
  );
  checkBalanced(compiled.document.code, expanded.entries);

  const journal = deps.cache.journals.get(expanded.journalId, (id) => deps.st.journalById.get(id));
  if (!journal) throw notFound('journal', expanded.journalId);
  if (journal.status !== 'ACTIVE') {
    throw new EngineError('JOURNAL_LOCKED', `journal ${journal.name} (${journal.journal_id}) is ${journal.status}`);
  }
  checkPostable(
    deps,
    expanded.entries.map((e) => e.accountId),
  );
  guard?.(toWrite(expanded.entries, expanded.journalId));

  const now = deps.clock.now().toISOString();
  const row: Omit<TransactionRow, 'seq' | 'first_entry_seq' | 'entry_count' | 'exceptions' | 'properties'> = {
    transaction_id: input.transactionId,
    tran_code_id: tranCodeRow.tran_code_id,
    tran_code_version: version,
    journal_id: expanded.journalId,
    correlation_id: expanded.correlationId === input.transactionId ? null : expanded.correlationId,
    external_id: expanded.externalId,
    effective: expanded.effective,
    description: expanded.description,
    metadata: expanded.metadata,
    void_of: null,
    voided_by: null,
    input_fingerprint: inputFingerprint,
    version: 1,
    created: now,
    modified: now,
  };
  // Every calculation, view, index and velocity control the posting reaches shares one CEL budget,
  // so a costly definition costs each posting at most postingCelCostMax, whoever wrote it.
  const { posted, velocity } = deps.cel.scope(
    `the calculations, views, indexes and velocity controls posting ${input.transactionId} reaches`,
    () => {
      const posted = writeTransaction(deps, row, expanded.entries);
      return { posted, velocity: enforceVelocity(deps, posted, properties, writer) };
    },
    deps.limits.postingCelCostMax,
    'postingCelCostMax',
  );
  const judged = judgedColumns(velocity.exceptions, properties?.overrideVelocityEnforcement?.action);
  if (judged !== null) deps.vel.setJudged.run(...judged, row.transaction_id);
  // The gate's own void (VOID, properties.exception): the pair leaves every balance as it was, so it is not judged again.
  if (velocity.voidIt) reverseTransaction(deps, row.transaction_id, guard, null);
  const written =
    judged !== null || velocity.voidIt
      ? toTransaction(deps.st.transactionById.get(row.transaction_id)!)
      : toTransaction(posted.transaction);
  announce(deps, written, compiled.document.code, () => JSON.parse(paramsText ?? '{}'), expanded.entries);
  return written;
}

/** The tran code row by code, from the cache when it is current. */
function cachedTranCode(deps: LedgerDeps, code: string): TranCodeRow {
  if (typeof code !== 'string') return findTranCodeRow(deps, { code });
  return deps.cache.tranCodesByCode.get(code, () => findTranCodeRow(deps, { code }))!;
}

/** Units of at most 15 digits in all, as decAdd takes them: exact as doubles once scaled to integers. */
const SMALL_UNITS = /^(\d{1,15})(?:\.(\d{1,15}))?$/;

/**
 * True when the units, scaled to integers at their largest scale, are at most 15 digits each and
 * every currency and layer sums to 0: the sums are then exact as doubles (a partial sum past 2^53
 * gives up). False when that cannot be shown this way: decimal.js decides, and words the error.
 */
function balancedAsSmallUnits(entries: readonly PlannedEntry[]): boolean {
  let scale = 0;
  for (const e of entries) scale = Math.max(scale, scaleOf(e.units));
  const sums = new Map<string, number>();
  for (const e of entries) {
    const match = SMALL_UNITS.exec(e.units);
    if (!match || match[1]!.length + scale > 15) return false;
    const units = Number(match[1]! + (match[2] ?? '').padEnd(scale, '0'));
    const key = `${e.currency} ${e.layer}`;
    const sum = (sums.get(key) ?? 0) + (e.direction === 'DEBIT' ? units : -units);
    if (!Number.isSafeInteger(sum)) return false;
    sums.set(key, sum);
  }
  for (const sum of sums.values()) if (sum !== 0) return false;
  return true;
}

/** Debits equal credits for every currency and every layer; an engine assertion before any write. */
function checkBalanced(code: string, entries: readonly PlannedEntry[]): void {
  if (balancedAsSmallUnits(entries)) return;
  const sums = new Map<string, Dec>();
  for (const e of entries) {
    const key = `${e.currency} ${e.layer}`;
    const units = new Dec(e.units);
    const signed = e.direction === 'DEBIT' ? units : units.neg();
    sums.set(key, (sums.get(key) ?? new Dec(0)).plus(signed));
  }
  const off = [...sums].filter(([, sum]) => !sum.isZero());
  if (off.length > 0) {
    const details = off.map(([key, sum]) => {
      const [currency, layer] = key.split(' ');
      return { currency, layer, debitsMinusCredits: sum.toFixed() };
    });
    throw new EngineError(
      'UNBALANCED',
      `tran code ${code} produced unbalanced entries: ${details.map((d) => `${d.currency} ${d.layer} debits − credits = ${d.debitsMinusCredits}`).join('; ')}`,
      { details },
    );
  }
}
