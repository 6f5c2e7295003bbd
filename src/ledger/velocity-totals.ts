import { EngineError, quote } from '../errors.js';
import { canonicalJson } from '../ids.js';
import type { AccountRow, EntryRow } from '../storage/statements/ledger.js';
import { BALANCE_COLUMNS } from '../storage/statements/ledger.js';
import { cachedAccount, type LedgerDeps } from './deps.js';
import { accountDocument, type CelDocument, entryDocument, transactionDocument } from './documents.js';
import { ownersOf, type Posted } from './posted.js';
import type { Direction, Layer } from './records.js';
import {
  type Attachment,
  getVelocityControl,
  limitsOfControl,
  toAttachment,
  type VelocityControl,
} from './velocity.js';
import { evaluate, keepsTotals, type VelocityLimit } from './velocity-limits.js';

/**
 * The running totals of windowed or conditional limits (velocity_balances): a posting's entries
 * counted into them (or a voided one's taken back) per account or set, journal, currency and
 * window, and the checks of the controls a posting concerns, handed to the gate (velocity-gate.ts).
 */

function truthy(deps: LedgerDeps, expression: string | null, context: Record<string, unknown>, what: string): boolean {
  if (expression === null) return true;
  const value = evaluate(deps, expression, context, what);
  if (typeof value !== 'boolean')
    throw new EngineError('CEL_ERROR', `${what} evaluated to ${quote(String(value))}, not a bool`);
  return value;
}

function windowKey(deps: LedgerDeps, limit: VelocityLimit, context: Record<string, unknown>): string {
  if (limit.window.length === 0) return '[]';
  return canonicalJson(
    limit.window.map((k) => {
      const value = evaluate(deps, k.value, context, `velocity limit ${limit.name} window ${k.alias}`);
      return value instanceof Date ? value.toISOString() : typeof value === 'bigint' ? value.toString() : String(value);
    }),
  );
}

export interface Check {
  attachment: Attachment;
  control: VelocityControl;
  limit: VelocityLimit;
  target: AccountRow;
  entry: EntryRow;
  window: string;
  /** The CEL context of the entry and the account or set (built on first use). */
  context: () => Record<string, unknown>;
}

/** The controls attached to an account or set, cached until a velocity table changes. */
export function attachedTo(deps: LedgerDeps, accountId: string): Attachment[] {
  return deps.cache.posting.getIn('velocity attachments', accountId, () =>
    deps.vel.attachmentsOf.all(accountId).map(toAttachment),
  ) as Attachment[];
}

export function controlOf(deps: LedgerDeps, id: string): { control: VelocityControl; limits: VelocityLimit[] } {
  return deps.cache.posting.getIn('velocity control', id, () => ({
    control: getVelocityControl(deps, id),
    limits: limitsOfControl(deps, id),
  })) as {
    control: VelocityControl;
    limits: VelocityLimit[];
  };
}

/** One entry's part in a running total: added (sign 1, a posting) or taken back (sign -1, a void). */
export interface Move {
  layer: Layer;
  direction: Direction;
  units: string;
  sign: 1 | -1;
}

/** The running total of a windowed or conditional limit for one account or set, journal, currency and window. */
export const totalsKey = (limitId: string, targetId: string, journalId: string, currency: string, window: string) =>
  `${limitId} ${targetId} ${journalId} ${currency} ${window}`;

/**
 * Walk the controls attached to each posted entry's account and sets: add (sign 1) or take back
 * (sign -1, the entries of a transaction being voided) each entry in the running totals of the
 * windowed or conditional limits that count it (sign 0 counts nothing: a void's reversal, whose
 * original is taken back instead), noting each in `moves`, and hand each (control, limit, account
 * or set) the posting concerns to `check`. Returns whether anything was attached at all.
 */
export function countTotals(
  deps: LedgerDeps,
  posted: Posted,
  sign: 1 | -1 | 0,
  now: string,
  check?: (check: Check) => void,
  moves?: Map<string, Move[]>,
): boolean {
  // Attachments of every account and set the entries reach, cached until a velocity table changes:
  // none attached (the common case) costs a map lookup per account and set.
  const attachments = new Map<string, Attachment[]>();
  const targets = new Map<EntryRow, string[]>();
  for (const entry of posted.entries) targets.set(entry, ownersOf(posted, entry));
  let any = false;
  for (const entry of posted.entries) {
    for (const id of targets.get(entry)!) {
      if (attachments.has(id)) continue;
      const attached = attachedTo(deps, id);
      attachments.set(id, attached);
      if (attached.length > 0) any = true;
    }
  }
  if (!any) return false;

  // The CEL documents are built only when a condition, a window or a balance limit reads them.
  let transaction: CelDocument | undefined;
  for (const entry of posted.entries) {
    let entryDoc: CelDocument | undefined;
    for (const targetId of targets.get(entry)!) {
      const attached = attachments.get(targetId)!;
      if (attached.length === 0) continue;
      const target = cachedAccount(deps, targetId);
      if (!target) continue;
      let context: Record<string, unknown> | undefined;
      const contextOf = () => {
        transaction ??= transactionDocument(posted.transaction);
        entryDoc ??= entryDocument(entry, posted.transaction);
        return (context ??= { context: { vars: { account: accountDocument(target), transaction, entry: entryDoc } } });
      };
      const counted = new Set<string>();
      for (const attachment of attached) {
        if (attachment.journalId !== null && attachment.journalId !== entry.journal_id) continue;
        const { control, limits } = controlOf(deps, attachment.velocityControlId);
        if (control.status !== 'ACTIVE') continue;
        const applies =
          check !== undefined &&
          (control.condition === null ||
            truthy(deps, control.condition, contextOf(), `velocity control ${control.name} condition`));
        for (const limit of limits) {
          if (limit.currency !== '' && limit.currency !== entry.currency) continue;
          if (!keepsTotals(limit) && !applies) continue;
          if (
            limit.condition !== null &&
            !truthy(deps, limit.condition, contextOf(), `velocity limit ${limit.name} condition`)
          )
            continue;
          const window = limit.window.length === 0 ? '[]' : windowKey(deps, limit, contextOf());
          // Running totals of a windowed or conditional limit: each entry once per limit and target,
          // counted from when the control was attached; an entry posted before it was never
          // counted, so its void takes nothing back out (it would free limit never spent).
          const neverCounted = sign === -1 && posted.transaction.created < attachment.created;
          if (sign !== 0 && keepsTotals(limit) && !counted.has(limit.velocityLimitId) && !neverCounted) {
            counted.add(limit.velocityLimitId);
            const values: Record<string, string> = {};
            for (const column of BALANCE_COLUMNS) values[column] = '0';
            values[`${entry.layer.toLowerCase()}_${entry.direction === 'DEBIT' ? 'dr' : 'cr'}`] =
              sign === 1 ? entry.units : `-${entry.units}`;
            deps.vel.addToVelocityBalance.run({
              velocity_limit_id: limit.velocityLimitId,
              account_id: targetId,
              journal_id: entry.journal_id,
              currency: entry.currency,
              window,
              ...values,
              entry_id: entry.entry_id,
              modified: now,
            });
            if (moves) {
              const key = totalsKey(limit.velocityLimitId, targetId, entry.journal_id, entry.currency, window);
              let list = moves.get(key);
              if (!list) moves.set(key, (list = []));
              list.push({
                layer: entry.layer as Layer,
                direction: entry.direction as Direction,
                units: entry.units,
                sign,
              });
            }
          }
          if (applies) check!({ attachment, control, limit, target, entry, window, context: contextOf });
        }
      }
    }
  }
  return true;
}
