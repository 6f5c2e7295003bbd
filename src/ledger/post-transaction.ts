import { isBudgetError } from '../cel/cost.js';
import { CelDecimal, CelMoney, celToJson } from '../cel/values.js';
import { utcDate } from '../clock.js';
import { checkDecimalBounds, Dec, parseCurrency, parseDecimal, scaleOf, withScale } from '../decimal.js';
import { bug, badInput, EngineError, limitDetails, limitExceeded, notFound, quote } from '../errors.js';
import { checkCelValueSize } from '../cel/cel.js';
import { canonicalJson, fingerprint, isUuid } from '../ids.js';
import { setOwn } from '../json.js';
import { TEMPLATE_TEXT_MAX } from '../limits.js';
import { ENTRY_SEQ_BLOCK } from '../storage/backend.js';
import {
  ENTRY_COLUMNS,
  ENTRY_INSERT_ROWS,
  type EntryRow,
  type TranCodeRow,
  type TransactionRow,
} from '../storage/statements/ledger.js';
import { setsAbove } from './account-sets.js';
import { afterPosting } from './after-posting.js';
import { applyToBalances, type BalanceDelta } from './balances.js';
import { type Posted, RecordKeys } from './posted.js';
import { linkEntries } from './chains.js';
import { cachedAccount, type LedgerDeps } from './deps.js';
import { DEFAULT_JOURNAL_ID } from './journals.js';
import { bindParams, isDate } from './params.js';
import {
  type Direction,
  type Entry,
  isPlainJson,
  type JsonObject,
  jsonObjectText,
  type Layer,
  readJson,
  type Transaction,
} from './records.js';
import { type CompiledField, type CompiledTranCode, findTranCodeRow, type TranCodeCache } from './tran-codes.js';
import { enforceVelocity, enforceVoid, uncountVoided, type VelocityProperties, type Writer } from './velocity.js';

/** An entry about to be written, as the authorization hook sees it. */
export interface EntryToWrite {
  accountId: string;
  journalId: string;
  currency: string;
  layer: Layer;
  direction: Direction;
  units: string;
}

/** Called with the entries once they are computed and checked, before anything is written. */
export type WriteGuard = (entries: readonly EntryToWrite[]) => void;

function toWrite(entries: readonly PlannedEntry[], journalId: string): EntryToWrite[] {
  return entries.map((e) => ({
    accountId: e.accountId,
    journalId,
    currency: e.currency,
    layer: e.layer,
    direction: e.direction,
    units: e.units,
  }));
}

export interface PostTransactionInput {
  transactionId: string;
  tranCode: string;
  tranCodeVersion?: number | null;
  params?: unknown;
  /** Velocity enforcement override, or an exception to record (the posting is then voided at once). */
  properties?: VelocityProperties | null;
}

/** A void's properties: only the velocity override (a void records no exception of its own making). */
export type VoidProperties = Pick<VelocityProperties, 'overrideVelocityEnforcement'>;

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
    exceptions:
      row.exceptions === null || row.exceptions === undefined
        ? []
        : (JSON.parse(row.exceptions) as Transaction['exceptions']),
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
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

/** An entry computed from a template, before it is written. */
interface PlannedEntry {
  accountId: string;
  /** Exact decimal text, with the scale it was computed with ("21.00"). */
  units: string;
  currency: string;
  direction: Direction;
  layer: Layer;
  entryType: string;
  description: string | null;
  metadata: string | null;
}

/**
 * The only writer of transactions, entries and balances. Expands the tran code, checks that every
 * currency and layer balances and that every account and the journal accept postings, then writes
 * it all and has the posting gate (velocity.ts decide) judge it. Nothing is kept unless every
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
  const row: Omit<TransactionRow, 'seq' | 'first_entry_seq' | 'entry_count' | 'exceptions'> = {
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
  if (velocity.exceptions.length > 0)
    deps.vel.setExceptions.run(JSON.stringify(velocity.exceptions), row.transaction_id);
  // The gate's own void (VOID, properties.exception): the pair leaves every balance as it was, so it is not judged again.
  if (velocity.voidIt) reverse(deps, row.transaction_id, guard, null);
  const written =
    velocity.exceptions.length > 0 || velocity.voidIt
      ? toTransaction(deps.st.transactionById.get(row.transaction_id)!)
      : toTransaction(posted.transaction);
  announce(deps, written, compiled.document.code, () => JSON.parse(paramsText ?? '{}'), expanded.entries);
  return written;
}

/** Tell triggers: the transaction, its tran code, its params and its entries. */
function announce(
  deps: LedgerDeps,
  transaction: Transaction,
  tranCode: string,
  params: () => unknown,
  entries: readonly PlannedEntry[],
): void {
  if (!deps.onChange) return;
  // Built only if a trigger listens: most posts have none.
  const document = () => ({
    ...transaction,
    tranCode,
    params: params(),
    entries: entries.map((e) => ({
      accountId: e.accountId,
      units: e.units,
      currency: e.currency,
      direction: e.direction,
      layer: e.layer,
      entryType: e.entryType,
    })),
  });
  deps.onChange({
    event: 'transaction.inserted',
    recordId: transaction.transactionId,
    recordVersion: 1,
    document,
    previous: null,
  });
}

/**
 * Void a transaction: write its reversal (every entry on its layer with the opposite direction),
 * judged by the posting gate like any posting (velocity.ts enforceVoid): a void that would take a
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
  return reverse(deps, transactionId, guard, {
    properties:
      properties === null ? null : { overrideVelocityEnforcement: properties.overrideVelocityEnforcement ?? null },
    writer: options.writer,
  });
}

/** Write the reversal of a transaction; `gate` null only for the gate's own void of a posting it just let through. */
function reverse(
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
  const reversal: Omit<TransactionRow, 'seq' | 'first_entry_seq' | 'entry_count' | 'exceptions'> = {
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
  if (verdict && verdict.exceptions.length > 0)
    deps.vel.setExceptions.run(JSON.stringify(verdict.exceptions), reversal.transaction_id);
  const reversed = toTransaction(
    verdict && verdict.exceptions.length > 0 ? deps.st.transactionById.get(reversal.transaction_id)! : written,
  );
  announce(deps, reversed, tranCode?.code ?? '', () => null, planned);
  return reversed;
}

/**
 * Insert the transaction, then its entries with consecutive seq numbers (so the transaction can
 * find them by range), then apply them to the balances.
 */
function writeTransaction(
  deps: LedgerDeps,
  partial: Omit<TransactionRow, 'seq' | 'first_entry_seq' | 'entry_count' | 'exceptions'>,
  entries: readonly PlannedEntry[],
): Posted {
  const last = deps.st.nextEntrySeqBlock ? entrySeqBlock(deps, entries.length) : lastEntrySeq(deps);
  const firstEntrySeq = last.seq + 1;
  const row = { ...partial, first_entry_seq: firstEntrySeq, entry_count: entries.length, exceptions: null };
  const info = deps.st.insertTransaction.run(
    row.transaction_id,
    row.tran_code_id,
    row.tran_code_version,
    row.journal_id,
    row.correlation_id,
    row.external_id,
    row.effective,
    row.description,
    row.metadata,
    row.void_of,
    row.input_fingerprint,
    row.first_entry_seq,
    row.entry_count,
    row.created,
    row.modified,
  );
  const deltas: BalanceDelta[] = [];
  const keys = new RecordKeys(row.journal_id);
  // The sets above each account in this journal: the entry rolls up into each (Entry.parentAccountIds).
  const parents = new Map<string, string[]>();
  for (const e of entries)
    if (!parents.has(e.accountId)) parents.set(e.accountId, setsAbove(deps, e.accountId, row.journal_id));
  const written: EntryRow[] = entries.map((e, i) => {
    const sets = parents.get(e.accountId)!;
    const entry: EntryRow = {
      seq: firstEntrySeq + i,
      entry_id: deps.newId(),
      transaction_id: row.transaction_id,
      account_id: e.accountId,
      journal_id: row.journal_id,
      sequence: i + 1,
      entry_type: e.entryType,
      layer: e.layer,
      direction: e.direction,
      units: e.units,
      currency: e.currency,
      description: e.description,
      metadata: e.metadata,
      created: row.created,
      parent_account_ids: sets.length ? JSON.stringify(sets) : null,
      balance_version: null,
      balance_after: null,
      set_links: null,
      account_prev: null,
    };
    deltas.push({
      accountId: e.accountId,
      journalId: row.journal_id,
      currency: e.currency,
      layer: e.layer,
      direction: e.direction,
      units: e.units,
      entryId: entry.entry_id,
      seq: entry.seq,
      key: keys.of(e.accountId, e.currency),
    });
    for (const setId of sets) {
      deltas.push({
        accountId: setId,
        journalId: row.journal_id,
        currency: e.currency,
        layer: e.layer,
        direction: e.direction,
        units: e.units,
        entryId: entry.entry_id,
        seq: entry.seq,
        key: keys.of(setId, e.currency),
      });
    }
    return entry;
  });
  // Balances first: each entry (and each set row) keeps the record as this posting left it (history).
  const after = applyToBalances(deps, deltas, row.modified);
  linkEntries(deps, written, parents, after, keys);
  for (const entry of written) {
    const own = after.get(keys.of(entry.account_id, entry.currency))!;
    entry.balance_version = own.version;
    entry.balance_after = own.after;
  }
  insertEntries(deps, written);
  last.seq = firstEntrySeq + written.length - 1;
  const transaction: TransactionRow = { ...row, seq: Number(info.lastInsertRowid) };
  const posted: Posted = { transaction, entries: written, parents, balances: after, keys };
  afterPosting(deps, posted);
  return posted;
}

/** Insert a posting's entries, ENTRY_INSERT_ROWS to a statement. */
function insertEntries(deps: LedgerDeps, entries: readonly EntryRow[]): void {
  for (let start = 0; start < entries.length; start += ENTRY_INSERT_ROWS) {
    const rows = Math.min(ENTRY_INSERT_ROWS, entries.length - start);
    const values: unknown[] = [];
    for (let i = start; i < start + rows; i++) for (const column of ENTRY_COLUMNS) values.push(entries[i]![column]);
    deps.st.insertEntries(rows).run(values);
  }
}

/**
 * PostgreSQL: the seq before a block of ENTRY_SEQ_BLOCK free seqs (see nextEntrySeqBlock). Seqs
 * then grow with gaps, and in the order postings took their blocks, not the order they committed;
 * two postings to one balance record still commit in seq order (the second waits for the first's
 * row, fails, and runs again with a new block), so each record's chain of entries stays in seq order.
 */
function entrySeqBlock(deps: LedgerDeps, entries: number): { seq: number } {
  // createEngine refuses an entriesPerTransactionMax past the block on PostgreSQL.
  if (entries > ENTRY_SEQ_BLOCK)
    throw bug(`bug: a posting of ${entries} entries passed entriesPerTransactionMax on PostgreSQL`);
  return { seq: deps.st.nextEntrySeqBlock!.get()! - 1 };
}

/** Each engine's highest entry seq, and the cache epoch it was read or written in. */
const lastEntrySeqs = new WeakMap<LedgerDeps, { epoch: number; seq: number }>();

/**
 * The highest entry seq written, kept for the cache epoch instead of `SELECT max(seq)` per posting.
 * Entries are written only by writeTransaction, which moves it; a rollback (of a transaction or a
 * savepoint) and another connection's commit move the epoch, and the next posting reads it again.
 * A posting outside the engine's transactions (a caller's own db.transaction, which may commit
 * or roll back unseen) drops it.
 */
function lastEntrySeq(deps: LedgerDeps): { seq: number } {
  const kept = lastEntrySeqs.get(deps);
  if (deps.epoch.active && kept && kept.epoch === deps.epoch.value) return kept;
  const read = { epoch: deps.epoch.value, seq: deps.st.lastEntrySeq.get()?.seq ?? 0 };
  if (deps.epoch.active) lastEntrySeqs.set(deps, read);
  else lastEntrySeqs.delete(deps);
  return read;
}

/** The tran code row by code, from the cache when it is current. */
function cachedTranCode(deps: LedgerDeps, code: string): TranCodeRow {
  if (typeof code !== 'string') return findTranCodeRow(deps, { code });
  return deps.cache.tranCodesByCode.get(code, () => findTranCodeRow(deps, { code }))!;
}

function checkPostable(deps: LedgerDeps, accountIds: readonly string[]): void {
  const checked = new Set<string>();
  for (const accountId of accountIds) {
    if (checked.has(accountId)) continue;
    checked.add(accountId);
    const account = cachedAccount(deps, accountId);
    if (!account) {
      throw notFound('account', accountId, 'Create the account before posting to it.');
    }
    if (account.is_account_set === 1) {
      throw new EngineError(
        'BAD_REQUEST',
        `${account.code} (${accountId}) is an account set; entries are never posted to a set`,
        {
          hint: 'Post to an account in the set: its balance rolls up into the set.',
        },
      );
    }
    if (account.status === 'LOCKED') {
      throw new EngineError(
        'ACCOUNT_LOCKED',
        `account ${account.code} (${accountId}) is LOCKED and accepts no postings`,
        {
          details: { accountId },
        },
      );
    }
  }
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

export interface Expanded {
  journalId: string;
  correlationId: string;
  externalId: string | null;
  effective: string;
  description: string | null;
  metadata: string | null;
  entries: PlannedEntry[];
}

/** Evaluate params, vars, the transaction template and every entry template. */
export function expand(
  deps: LedgerDeps,
  compiled: CompiledTranCode,
  transactionId: string,
  input: Record<string, unknown>,
): Expanded {
  const code = compiled.document.code;
  const params = bindParams(deps, compiled, input);
  const vars: Record<string, unknown> = {};
  // transaction_id: the id being posted (the reference's templates write transaction_id.toString()).
  const context = { params, vars, transaction_id: transactionId };
  for (const { path, field } of compiled.vars) {
    let target = vars;
    for (const key of path.slice(0, -1)) {
      if (!Object.hasOwn(target, key)) setOwn(target, key, {});
      target = target[key] as Record<string, unknown>;
    }
    const value = run(code, field, context);
    checkCelValueSize(value, deps.limits.celValueSizeMax, `vars.${path.join('.')}`);
    setOwn(target, path.at(-1) as string, value);
  }

  const t = compiled.transaction;
  const effectiveValue = t.effective ? run(code, t.effective, context) : utcDate(deps.clock.now());
  if (effectiveValue instanceof Date && Number.isNaN(effectiveValue.getTime()))
    throw fieldError(code, t.effective, 'evaluated to a timestamp out of range');
  const effective = effectiveValue instanceof Date ? utcDate(effectiveValue) : effectiveValue;
  if (!isDate(effective))
    throw fieldError(code, t.effective, `evaluated to ${quote(celToJson(effective))}, not a date YYYY-MM-DD`);
  const journalId = t.journalId ? uuidOf(code, t.journalId, run(code, t.journalId, context)) : DEFAULT_JOURNAL_ID;
  // An empty correlation id is none: the transaction correlates with itself.
  const correlationId =
    (t.correlationId ? textOf(code, t.correlationId, run(code, t.correlationId, context)) : '') || transactionId;
  const externalId = t.externalId ? textOf(code, t.externalId, run(code, t.externalId, context)) : null;
  const description = t.description ? textOf(code, t.description, run(code, t.description, context)) : null;
  const metadata = t.metadata ? metadataOf(deps, code, t.metadata, run(code, t.metadata, context)) : null;

  const entries: PlannedEntry[] = [];
  for (const template of compiled.entries) {
    if (template.condition) {
      const condition = run(code, template.condition, context);
      if (typeof condition !== 'boolean')
        throw fieldError(code, template.condition, `evaluated to ${quote(celToJson(condition))}, not a bool`);
      if (!condition) continue;
    }
    const direction = directionOf(code, template.direction!, run(code, template.direction!, context));
    const currency = currencyOf(code, template.currency!, run(code, template.currency!, context));
    const units = unitsOf(deps, code, template.units!, run(code, template.units!, context), currency);
    entries.push({
      accountId: uuidOf(code, template.accountId!, run(code, template.accountId!, context)),
      units,
      currency,
      direction,
      layer: template.layer ? layerOf(code, template.layer, run(code, template.layer, context)) : 'SETTLED',
      entryType: template.entryType
        ? textOf(code, template.entryType, run(code, template.entryType, context))
        : `${code}_${direction === 'DEBIT' ? 'DR' : 'CR'}`,
      description: template.description
        ? textOf(code, template.description, run(code, template.description, context))
        : null,
      metadata: template.metadata
        ? metadataOf(deps, code, template.metadata, run(code, template.metadata, context))
        : null,
    });
  }
  if (entries.length < 2) {
    throw new EngineError(
      'TRAN_CODE_ERROR',
      `tran code ${code} produced ${entries.length} entr${entries.length === 1 ? 'y' : 'ies'}; a transaction needs at least 2`,
      {
        hint: 'Check the entry conditions against the params sent.',
      },
    );
  }
  if (entries.length > deps.limits.entriesPerTransactionMax) {
    throw limitExceeded(
      'entriesPerTransactionMax',
      deps.limits.entriesPerTransactionMax,
      entries.length,
      `tran code ${code} produced ${entries.length} entries; entriesPerTransactionMax is ${deps.limits.entriesPerTransactionMax}`,
    );
  }
  return { journalId, correlationId, externalId, effective, description, metadata, entries };
}

function run(code: string, field: CompiledField, context: Record<string, unknown>): unknown {
  try {
    return field.evaluate(context);
  } catch (error) {
    const message =
      error instanceof Error
        ? ((error as { summary?: string }).summary ?? error.message.split('\n')[0])
        : String(error);
    // A budget crossed (celCostMax, the request's deadline) is a limit, not a mistake in the template.
    const budget = isBudgetError(error);
    throw new EngineError(
      budget ? 'LIMIT_EXCEEDED' : 'TRAN_CODE_ERROR',
      `tran code ${code}: ${field.path} = ${quote(field.source)} failed: ${message}`,
      {
        hint: (error as EngineError).hint ?? 'Check the expression against the params sent.',
        details: { ...(budget ? limitDetails(error) : {}), field: field.path, expression: field.source },
      },
    );
  }
}

function fieldError(code: string, field: CompiledField | undefined, problem: string, hint?: string): EngineError {
  const where = field ? `${field.path} = ${quote(field.source)}` : 'a default';
  return new EngineError('TRAN_CODE_ERROR', `tran code ${code}: ${where} ${problem}`, {
    ...(hint === undefined ? {} : { hint }),
    details: field ? { field: field.path, expression: field.source } : undefined,
  });
}

const INT64_MAX = 2n ** 63n - 1n;

function textOf(code: string, field: CompiledField, value: unknown): string {
  if (typeof value === 'string') {
    if (value.length > TEMPLATE_TEXT_MAX)
      throw fieldError(code, field, `evaluated to ${value.length} characters; the most is ${TEMPLATE_TEXT_MAX}`);
    return value;
  }
  if (typeof value === 'bigint' || value instanceof CelDecimal) return value.toString();
  throw fieldError(code, field, `evaluated to ${quote(celToJson(value))}, not a string`);
}

function uuidOf(code: string, field: CompiledField, value: unknown): string {
  if (isUuid(value)) return value.toLowerCase();
  throw fieldError(code, field, `evaluated to ${quote(celToJson(value))}, not a UUID`, 'Pass the id as a UUID param.');
}

function currencyOf(code: string, field: CompiledField, value: unknown): string {
  try {
    return parseCurrency(value);
  } catch {
    throw fieldError(
      code,
      field,
      `evaluated to ${quote(celToJson(value))}, not a currency code`,
      'Quote literal codes in CEL: "\'USD\'".',
    );
  }
}

function directionOf(code: string, field: CompiledField, value: unknown): Direction {
  if (value === 'DEBIT' || value === 0n) return 'DEBIT';
  if (value === 'CREDIT' || value === 1n) return 'CREDIT';
  throw fieldError(
    code,
    field,
    `evaluated to ${quote(celToJson(value))}, not a direction`,
    'Use DEBIT or CREDIT (or 0 / 1).',
  );
}

function layerOf(code: string, field: CompiledField, value: unknown): Layer {
  if (value === 'SETTLED' || value === 0n) return 'SETTLED';
  if (value === 'PENDING' || value === 1n) return 'PENDING';
  if (value === 'ENCUMBRANCE' || value === 2n) return 'ENCUMBRANCE';
  throw fieldError(
    code,
    field,
    `evaluated to ${quote(celToJson(value))}, not a layer`,
    'Use SETTLED, PENDING or ENCUMBRANCE (or 0 / 1 / 2).',
  );
}

/** The entry's units as exact text, keeping the scale the template computed them with ("21.00"). */
function unitsOf(deps: LedgerDeps, code: string, field: CompiledField, value: unknown, currency: string): string {
  let units: Dec;
  let scale = 0;
  try {
    if (value instanceof CelDecimal) {
      units = checkDecimalBounds(value.value, `${field.path}`, deps.limits);
      scale = value.scale;
    } else if (value instanceof CelMoney) {
      units = checkDecimalBounds(value.units, `${field.path}`, deps.limits);
      scale = value.scale;
    } else if (typeof value === 'bigint' && (value > INT64_MAX || value < -INT64_MAX - 1n)) {
      throw fieldError(code, field, `evaluated to ${value}, outside CEL's 64-bit int range (an overflow)`);
    } else if (typeof value === 'bigint' || typeof value === 'string') {
      units = parseDecimal(value, field.path, deps.limits);
      if (typeof value === 'string') scale = scaleOf(value);
    } else if (typeof value === 'number') {
      throw fieldError(
        code,
        field,
        `evaluated to the double ${value}`,
        `Amounts must be exact: use decimal("${value}") or a DECIMAL param.`,
      );
    } else throw fieldError(code, field, `evaluated to ${quote(celToJson(value))}, not a decimal`);
  } catch (error) {
    if (error instanceof EngineError && error.code === 'TRAN_CODE_ERROR') throw error;
    const e = error as EngineError;
    throw new EngineError(
      e.code === 'LIMIT_EXCEEDED' ? 'LIMIT_EXCEEDED' : 'TRAN_CODE_ERROR',
      `tran code ${code}: ${e.message}`,
      { hint: e.hint, details: e.code === 'LIMIT_EXCEEDED' ? e.details : undefined },
    );
  }
  if (value instanceof CelMoney && value.currency !== currency) {
    throw fieldError(
      code,
      field,
      `is money in ${value.currency} but the entry's currency is ${currency}`,
      'Use the same currency, or pass decimal units.',
    );
  }
  if (units.isNegative() && !units.isZero()) {
    throw fieldError(
      code,
      field,
      `evaluated to ${units.toFixed()}, a negative amount`,
      'Entry units are never negative: flip the direction instead.',
    );
  }
  // -0 is 0; trailing zeros past decimalFractionDigitsMax are not kept.
  return withScale(units.isNegative() ? units.abs() : units, Math.min(scale, deps.limits.decimalFractionDigitsMax));
}

function metadataOf(deps: LedgerDeps, code: string, field: CompiledField, value: unknown): string | null {
  const json = celToJson(value) as JsonObject;
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    throw fieldError(code, field, `evaluated to ${quote(json)}, not a map`);
  }
  return jsonObjectText(json, field.path, deps.limits.jsonBytesMax);
}
