import { Dec } from '../decimal.js';
import { EngineError, quote } from '../errors.js';
import type { AccountRow, BalanceRow, EntryRow } from '../storage/statements/ledger.js';
import { snapshotTotals } from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import { ownersOf, type Posted } from './posted.js';
import { type Direction, type Layer, LAYERS, requiredText } from './records.js';
import { ENFORCEMENTS, type Enforcement, type VelocityControl } from './velocity.js';
import {
  amountText,
  availableNormal,
  bindLimitParams,
  evaluate,
  evaluateSpecs,
  keepsTotals,
  type Spec,
  staticSpecs,
  type Totals,
  type VelocityLimit,
} from './velocity-limits.js';
import { attachedTo, type Check, controlOf, countTotals, type Move, totalsKey } from './velocity-totals.js';

/**
 * THE ONE POSTING GATE (see decide): every write that moves a balance (a posting, a void, a change
 * of a set's members) judged against the velocity controls attached to the accounts and sets it
 * moves, after it is written and before it commits: let through, recorded (WARN), voided, refused.
 */

export interface TransactionException {
  type: string;
  message: string;
  detail: Record<string, unknown>;
}

export interface VelocityProperties {
  overrideVelocityEnforcement?: { action?: Enforcement | null } | null;
  exception?: { type: string; message: string; detail?: unknown } | null;
}

/** What a write is, as the gate judges it: a posting, a void, or a change of a set's members. */
export type WriteKind = 'post' | 'void' | 'membership';

/**
 * Who writes, as the gate needs to know it (the GraphQL resolvers say; a write without one is the
 * engine's own): whether the write will be rolled back whatever happens (a `@dryRun` operation, or
 * one inside it), and whether the writer may read (SELECT `financial.Balance`) a balance.
 */
export interface Writer {
  dryRun: boolean;
  mayRead(accountId: string, journalId: string, currency: string): boolean;
}

/** What the gate decided for a write it let through: the exceptions to record, and whether to void it at once. */
export interface Verdict {
  exceptions: TransactionException[];
  voidIt: boolean;
}

/** One balance limit of one control on one account or set, as one write moved it. */
interface Judgement {
  control: VelocityControl;
  limit: VelocityLimit;
  target: AccountRow;
  journalId: string;
  currency: string;
  /** The limit's balance limits for this attachment (evaluated against the posting when they read it). */
  specs(): Spec[];
  /** How far the write moved the limit's measure (the available balance at `layer` on `side`); positive is toward the limit. */
  delta(layer: Layer, side: Direction): Dec;
  /** The measure's totals as the write left them. */
  after(): Totals | undefined;
  entryId: string | null;
  transactionId: string | null;
}

/**
 * THE ONE POSTING GATE. Every write that moves a balance — a posting (whoever sends it: a client,
 * a batch, a tool, a trigger), a void, a change of a set's members — is judged here, on SQLite and
 * PostgreSQL alike, after it is written and before it commits:
 *
 * - A write breaks a balance limit when it leaves the limit's measure past the limit **and** further
 *   past than it was before the write (strictly worse). A write that leaves a breached balance
 *   where it was, or moves it back toward its limit (a deposit into an overdrawn account), breaks
 *   nothing, whatever the enforcement.
 * - The action is the control's enforcement, unless the write carries an override
 *   (`overrideVelocityEnforcement`, whose right the resolvers check: UPDATE on
 *   `financial.VelocityControl`) or an exception to record (`properties.exception`: WARN). REJECT
 *   refuses the write with BALANCE_VELOCITY_EXCEEDED; VOID lets a posting be written and voided at
 *   once, and refuses a void or a membership change (neither can be voided); WARN lets it through
 *   and records the exception on its transaction (a membership change has none to record it on).
 * - A write that will be rolled back whatever happens (`@dryRun`) is not judged for a writer that
 *   may not read a balance it concerns: it is refused, with the same answer whether or not it would
 *   fit, so a dry run is no free probe of a balance its sender may not see.
 */
function decide(
  _deps: LedgerDeps,
  write: WriteKind,
  judgements: Iterable<Judgement>,
  properties: VelocityProperties | null | undefined,
  writer: Writer | undefined,
  now: string,
): Verdict {
  const override = properties?.overrideVelocityEnforcement?.action ?? null;
  if (override !== null && !ENFORCEMENTS.includes(override))
    throw new EngineError(
      'BAD_REQUEST',
      `overrideVelocityEnforcement.action ${quote(override)} is not one of ${ENFORCEMENTS.join(', ')}`,
    );
  const exceptions: TransactionException[] = [];
  let voidIt = false;
  if (properties?.exception) {
    const { type, message, detail } = properties.exception;
    exceptions.push({
      type: requiredText(type, 'exception.type', 128),
      message: requiredText(message, 'exception.message'),
      detail: (detail ?? {}) as Record<string, unknown>,
    });
    voidIt = true;
  }
  const all = [...judgements];
  // Before anything is judged, so the answer cannot depend on a balance the writer may not read.
  if (writer?.dryRun) {
    for (const j of all)
      if (!writer.mayRead(j.target.account_id, j.journalId, j.currency)) throw unjudged(write, j, now);
  }
  for (const j of all) {
    const violation = judge(j, now);
    if (!violation) continue;
    const action = override ?? (properties?.exception ? 'WARN' : j.control.enforcement.action);
    if (action === 'REJECT' || (action === 'VOID' && write !== 'post')) throw refusal(write, action, j, violation, now);
    if (write === 'membership') continue;
    exceptions.push(violation);
    if (action === 'VOID') voidIt = true;
  }
  return { exceptions, voidIt };
}

/** The exception of the first balance limit the write breaks (see decide), or null. */
function judge(j: Judgement, now: string): TransactionException | null {
  for (const spec of j.specs()) {
    const side = spec.side ?? (j.target.normal_balance_type as Direction);
    // Not further toward the limit: nothing to read, nothing broken.
    if (!j.delta(spec.layer, side).gt(0)) continue;
    const exception = exceptionIfPast(
      j.after(),
      { target: j.target, ...spec, currency: j.currency, control: j.control, limit: j.limit },
      { entryId: j.entryId, transactionId: j.transactionId, now },
    );
    if (exception) return exception;
  }
  return null;
}

const WRITTEN: Record<WriteKind, string> = { post: 'posting', void: 'void', membership: 'membership change' };

function refusal(
  write: WriteKind,
  action: Enforcement,
  j: Judgement,
  violation: TransactionException,
  now: string,
): EngineError {
  const what = `Velocity control ${j.control.name} on ${j.target.code} refused the ${WRITTEN[write]}: nothing was written.`;
  const how =
    write === 'membership'
      ? ' A membership change takes no override: detach the control first (UPDATE on financial.VelocityControl) to make it anyway.'
      : action === 'VOID'
        ? ' Its enforcement is VOID, and a void cannot be voided. An operator may void it with properties: {overrideVelocityEnforcement: {action: WARN}}.'
        : ` An operator may ${write === 'void' ? 'void' : 'post'} it with properties: {overrideVelocityEnforcement: {action: WARN}}.`;
  return new EngineError('BALANCE_VELOCITY_EXCEEDED', violation.message, {
    hint: what + how,
    exception: {
      transactionId: j.transactionId,
      type: violation.type,
      errorMessage: violation.message,
      detail: violation.detail,
      created: now,
    },
  });
}

/** A dry run's refusal for a writer that may not read the balance: the same whatever the balance. */
function unjudged(write: WriteKind, j: Judgement, now: string): EngineError {
  const message = `velocity control ${j.control.name} on ${j.target.code} does not judge a @dryRun ${WRITTEN[write]} for a caller that may not read the balance it guards`;
  return new EngineError('BALANCE_VELOCITY_EXCEEDED', message, {
    hint: `Send it without @dryRun to have it judged, or ask for SELECT on financial.Balance of ${j.target.code}. Nothing was written.`,
    exception: {
      transactionId: j.transactionId,
      type: 'VELOCITY_CONTROL',
      errorMessage: message,
      detail: {
        accountId: j.target.account_id,
        created: now,
        entryId: null,
        judged: false,
        layer: null,
        limit: null,
        modified: now,
        transactionId: j.transactionId,
        velocityControlId: j.control.velocityControlId,
        velocityLimitId: j.limit.velocityLimitId,
        violatingBalance: null,
      },
      created: now,
    },
  });
}

/** `units` signed toward `side`: a DEBIT entry adds to the DEBIT side, a CREDIT one takes from it. */
function signed(units: string, direction: string, side: Direction, sign: 1 | -1 = 1): Dec {
  const d = new Dec(units);
  return (direction === side) === (sign === 1) ? d : d.neg();
}

const upTo = (entryLayer: string, layer: Layer) => LAYERS.indexOf(entryLayer as Layer) <= LAYERS.indexOf(layer);

/** The judgements of a posting (or a void's reversal) from the checks countTotals handed out, one per (control, limit, account or set, journal, currency, window). */
function judgementsOf(
  deps: LedgerDeps,
  checks: Iterable<Check>,
  written: Posted,
  moves: ReadonlyMap<string, Move[]>,
): Judgement[] {
  const out: Judgement[] = [];
  for (const check of checks) {
    const { limit, attachment, target, entry, control } = check;
    const journalId = entry.journal_id;
    const currency = entry.currency;
    const totals = keepsTotals(limit);
    let evaluated: Record<string, unknown> | undefined;
    const context = () =>
      (evaluated ??= { ...check.context(), params: bindLimitParams(deps, limit, attachment.params ?? {}) });
    out.push({
      control,
      limit,
      target,
      journalId,
      currency,
      specs: () =>
        staticSpecs(deps, limit, attachment) ??
        evaluateSpecs(deps, limit, context(), timestampOf(deps, limit, written, context)),
      delta: (layer, side) => {
        let sum = new Dec(0);
        if (totals) {
          for (const m of moves.get(
            totalsKey(limit.velocityLimitId, target.account_id, journalId, currency, check.window),
          ) ?? []) {
            if (upTo(m.layer, layer)) sum = sum.plus(signed(m.units, m.direction, side, m.sign));
          }
        } else {
          for (const e of written.entries) {
            if (
              e.journal_id === journalId &&
              e.currency === currency &&
              upTo(e.layer, layer) &&
              ownersOf(written, e).includes(target.account_id)
            )
              sum = sum.plus(signed(e.units, e.direction, side));
          }
        }
        return sum;
      },
      after: () =>
        totals
          ? deps.vel.velocityBalance.get(limit.velocityLimitId, target.account_id, journalId, currency, check.window)
          : (balanceLeft(written, target.account_id, entry) ??
            deps.st.balance.get(target.account_id, journalId, currency)),
      entryId: entry.entry_id,
      transactionId: written.transaction.transaction_id,
    });
  }
  return out;
}

/** The first check of each (control, limit, account or set, journal, currency, window): its entry's documents stand for the posting's. */
function collectChecks(checks: Map<string, Check>): (check: Check) => void {
  return (check) => {
    const key = `${check.control.velocityControlId} ${check.limit.velocityLimitId} ${check.target.account_id} ${check.entry.journal_id} ${check.entry.currency} ${check.window}`;
    if (!checks.has(key)) checks.set(key, check);
  };
}

/**
 * The gate for a posting: count it in the running totals, then judge every control attached to
 * its entries' accounts and their sets (see decide). Throws BALANCE_VELOCITY_EXCEEDED for a
 * refusal; returns what VOID and WARN recorded and whether the posting must be voided.
 */
export function enforceVelocity(
  deps: LedgerDeps,
  posted: Posted,
  properties: VelocityProperties | null | undefined,
  writer?: Writer,
): Verdict {
  const checks = new Map<string, Check>();
  const moves = new Map<string, Move[]>();
  // The posting's own time (its transaction's created): the exceptions it records are of that moment.
  const now = posted.transaction.created;
  countTotals(deps, posted, 1, now, collectChecks(checks), moves);
  return decide(deps, 'post', judgementsOf(deps, checks.values(), posted, moves), properties, writer, now);
}

/**
 * The gate for a void (see decide), judged like a posting: its reversal's entries move the
 * balances (and the sets they roll up into now), and its original's entries leave the running
 * totals that counted them (with the windows and conditions as they read the original), so a
 * voided posting no longer spends a limit. A void whose reversal or whose taking back moves a
 * guarded balance further past its limit is refused (REJECT, VOID) or recorded on the reversal (WARN).
 */
export function enforceVoid(
  deps: LedgerDeps,
  reversal: Posted,
  original: Posted,
  properties: VelocityProperties | null | undefined,
  writer?: Writer,
): Verdict {
  const checks = new Map<string, Check>();
  const moves = new Map<string, Move[]>();
  const now = reversal.transaction.created;
  const collect = collectChecks(checks);
  countTotals(deps, original, -1, now, collect, moves);
  countTotals(deps, reversal, 0, now, collect);
  return decide(deps, 'void', judgementsOf(deps, checks.values(), reversal, moves), properties, writer, now);
}

/**
 * The gate's own void of a posting it voided at once (VOID, or properties.exception): its original's
 * entries leave the running totals, and nothing is judged (the posting and its void together leave
 * every balance as it was before them).
 */
export function uncountVoided(deps: LedgerDeps, original: Posted): void {
  countTotals(deps, original, -1, deps.clock.now().toISOString());
}

/**
 * The gate for a membership change (see decide): `moved` are the member's balances in the sets'
 * journal, added to (sign 1) or taken from (sign -1) each set of `setIds`. Every control attached
 * to those sets is judged against the set's new balance. A control's condition reads the posting,
 * and a membership change has none: the control is judged as if its condition held. Limits with a
 * window or a condition keep running totals of entries, which a membership change does not move.
 */
export function checkMovedBalances(
  deps: LedgerDeps,
  setIds: readonly string[],
  journalId: string,
  moved: readonly BalanceRow[],
  sign: 1 | -1,
  writer?: Writer,
): void {
  const now = deps.clock.now().toISOString();
  const judgements: Judgement[] = [];
  for (const setId of setIds) {
    const attached = attachedTo(deps, setId);
    if (attached.length === 0) continue;
    const target = deps.st.accountById.get(setId);
    if (!target) continue;
    for (const attachment of attached) {
      if (attachment.journalId !== null && attachment.journalId !== journalId) continue;
      const { control, limits } = controlOf(deps, attachment.velocityControlId);
      if (control.status !== 'ACTIVE') continue;
      for (const limit of limits) {
        if (keepsTotals(limit)) continue;
        const specs = staticSpecs(deps, limit, attachment);
        if (!specs) continue;
        for (const balance of moved) {
          if (limit.currency !== '' && limit.currency !== balance.currency) continue;
          judgements.push({
            control,
            limit,
            target,
            journalId,
            currency: balance.currency,
            specs: () => specs,
            delta: (layer, side) => {
              const d = new Dec(availableNormal(balance, layer, side));
              return sign === 1 ? d : d.neg();
            },
            after: () => deps.st.balance.get(setId, journalId, balance.currency),
            entryId: null,
            transactionId: null,
          });
        }
      }
    }
  }
  decide(deps, 'membership', judgements, null, writer, now);
}

/**
 * The exception a balance limit raises when the available balance at its layer, on its normal side
 * (the account's own when the limit names none), is past its amount; null when it is within.
 */
function exceptionIfPast(
  totals: Totals | undefined,
  check: {
    target: AccountRow;
    layer: Layer;
    side: Direction | null;
    amount: { d: Dec; scale: number };
    currency: string;
    control: VelocityControl;
    limit: VelocityLimit;
  },
  at: { entryId: string | null; transactionId: string | null; now: string },
): TransactionException | null {
  const balance = availableNormal(totals, check.layer, check.side ?? (check.target.normal_balance_type as Direction));
  if (new Dec(balance).cmp(check.amount.d) <= 0) return null;
  const limitText = amountText(check.amount.d, check.amount.scale);
  const message = `velocity ${limitText} ${check.currency} exceeded, balance is ${balance} ${check.currency}`;
  return {
    type: 'VELOCITY_CONTROL',
    message,
    detail: {
      accountId: check.target.account_id,
      created: at.now,
      entryId: at.entryId,
      layer: check.layer,
      limit: limitText,
      modified: at.now,
      transactionId: at.transactionId,
      velocityControlId: check.control.velocityControlId,
      velocityLimitId: check.limit.velocityLimitId,
      violatingBalance: `${balance} ${check.currency}`,
    },
  };
}

/** The balance record of an account or set as the posting just left it (no read), when it wrote one. */
function balanceLeft(posted: Posted, accountId: string, entry: EntryRow): Totals | undefined {
  if (!posted.balances) return undefined;
  const key =
    posted.keys?.journalId === entry.journal_id
      ? posted.keys.of(accountId, entry.currency)
      : `${accountId} ${entry.journal_id} ${entry.currency}`;
  const after = posted.balances.get(key);
  return after ? snapshotTotals(after.after) : undefined;
}

function timestampOf(
  deps: LedgerDeps,
  limit: VelocityLimit,
  posted: Posted,
  context: () => Record<string, unknown>,
): unknown {
  return limit.limit.timestampSource === null
    ? new Date(posted.transaction.created)
    : evaluate(deps, limit.limit.timestampSource, context(), `velocity limit ${limit.name} timestampSource`);
}
