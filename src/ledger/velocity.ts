import { subText, withScale } from '../decimal.js';
import { alreadyExists, badInput, EngineError, limitExceeded, notFound, quote } from '../errors.js';
import { canonicalJson } from '../ids.js';
import { isReservedKey } from '../json.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { VelocityAttachmentRow, VelocityControlRow, VelocityLimitRow } from '../storage/statements/velocity.js';
import type { LedgerDeps } from './deps.js';
import { accountDocument } from './documents.js';
import { DEFAULT_JOURNAL_ID } from './journals.js';
import { type Direction, jsonObjectText, type Layer, optionalText, requiredText } from './records.js';
import {
  amountText,
  availableNormal,
  bindLimitParams,
  compileCel,
  evaluateSpecs,
  keepsTotals,
  limitDocument,
  staticSpecs,
  type Totals,
  type VelocityLimit,
  type VelocityLimitDocument,
  type VelocityLimitInput,
} from './velocity-limits.js';

/**
 * Velocity limits, controls and their attachments as records (create, update, delete, read), and
 * what the attached controls allow an account or set (velocityOf). How a limit computes is in
 * velocity-limits.ts, its running totals in velocity-totals.ts, the posting gate in velocity-gate.ts.
 *
 * Velocity controls: limits on an account's (or a set's rolled-up) balance, checked on every
 * write that moves a balance (a posting, a void, a membership change: one gate, decide in
 * velocity-gate.ts) inside its transaction, after the entries and balances are written (so the
 * balance checked is the one the write would leave). A limit says which entries count (condition), how
 * they are partitioned (window: extra keys beside account, journal and currency, e.g. the
 * effective date for a daily limit) and, per layer, the most the available balance may reach
 * (its normal side given by normalBalanceType), with params whose values come at attach time. A
 * control holds limits, a condition (does this posting concern it?) and an enforcement: REJECT
 * fails the request with BALANCE_VELOCITY_EXCEEDED, VOID writes the posting and voids it at once,
 * WARN writes it; VOID and WARN record the exception on Transaction.exceptions.
 *
 * A limit without window and condition reads the account's (or set's) own balance; one with
 * either keeps running totals per window in velocity_balances, counted from when a control holding
 * it was attached to that account or set. A write breaks a limit only by moving a balance further
 * past it: one that moves a breached balance back toward its limit is always let through.
 */

export const ENFORCEMENTS = ['WARN', 'VOID', 'REJECT'] as const;
export type Enforcement = (typeof ENFORCEMENTS)[number];

export interface VelocityControlInput {
  velocityControlId: string;
  name: string;
  description?: string | null;
  enforcement?: { action?: Enforcement | null } | null;
  condition?: string | null;
  velocityLimitIds?: string[] | null;
}

export interface VelocityControl {
  velocityControlId: string;
  name: string;
  description: string | null;
  enforcement: { action: Enforcement };
  condition: string | null;
  status: 'ACTIVE' | 'LOCKED';
  version: number;
  created: string;
  modified: string;
}

export interface Attachment {
  accountId: string;
  velocityControlId: string;
  journalId: string | null;
  params: Record<string, unknown> | null;
  created: string;
  modified: string;
}

export function toLimit(row: VelocityLimitRow): VelocityLimit {
  const doc = JSON.parse(row.document) as VelocityLimitDocument;
  return {
    velocityLimitId: row.velocity_limit_id,
    name: row.name,
    description: row.description,
    ...doc,
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

export function toControl(row: VelocityControlRow): VelocityControl {
  return {
    velocityControlId: row.velocity_control_id,
    name: row.name,
    description: row.description,
    enforcement: { action: row.enforcement },
    condition: row.condition,
    status: row.status,
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

/** The first reserved key (__proto__, constructor, prototype) anywhere in a JSON value, or null. */
function reservedKeyIn(value: unknown): string | null {
  if (Array.isArray(value)) {
    for (const item of value) {
      const found = reservedKeyIn(item);
      if (found !== null) return found;
    }
  } else if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      if (isReservedKey(key)) return key;
      const found = reservedKeyIn(item);
      if (found !== null) return found;
    }
  }
  return null;
}

export function toAttachment(row: VelocityAttachmentRow): Attachment {
  return {
    accountId: row.account_id,
    velocityControlId: row.velocity_control_id,
    journalId: row.journal_id || null,
    params: row.params === null ? null : (JSON.parse(row.params) as Record<string, unknown>),
    created: row.created,
    modified: row.modified,
  };
}

export function createVelocityLimit(deps: LedgerDeps, input: VelocityLimitInput): VelocityLimit {
  if (deps.vel.limitById.get(input.velocityLimitId))
    throw alreadyExists('velocity limit', input.velocityLimitId, 'Use updateVelocityLimit to change it.');
  const now = deps.clock.now().toISOString();
  const row: VelocityLimitRow = {
    velocity_limit_id: input.velocityLimitId,
    name: requiredText(input.name, 'name'),
    description: optionalText(input.description, 'description'),
    document: JSON.stringify(limitDocument(deps, input)),
    version: 1,
    created: now,
    modified: now,
  };
  deps.vel.insertLimit.run(row);
  return toLimit(row);
}

export function updateVelocityLimit(
  deps: LedgerDeps,
  id: string,
  input: Partial<Omit<VelocityLimitInput, 'velocityLimitId'>>,
): VelocityLimit {
  const current = getVelocityLimit(deps, id);
  const merged: VelocityLimitInput = {
    velocityLimitId: id,
    name: input.name ?? current.name,
    description: input.description === undefined ? current.description : input.description,
    window: input.window ?? current.window,
    condition: input.condition === undefined ? current.condition : input.condition,
    currency: input.currency ?? current.currency,
    limit: input.limit ?? current.limit,
    params: input.params ?? current.params,
  };
  const row: VelocityLimitRow = {
    velocity_limit_id: id,
    name: requiredText(merged.name, 'name'),
    description: optionalText(merged.description, 'description'),
    document: JSON.stringify(limitDocument(deps, merged)),
    version: current.version + 1,
    created: current.created,
    modified: deps.clock.now().toISOString(),
  };
  deps.vel.updateLimit.run(row);
  return toLimit(row);
}

export function deleteVelocityLimit(deps: LedgerDeps, id: string): VelocityLimit {
  const limit = getVelocityLimit(deps, id);
  const controls = deps.vel.controlsOfLimit.all(id);
  if (controls.length > 0) {
    throw new EngineError(
      'BAD_REQUEST',
      `velocity limit ${limit.name} is in ${controls.length} control(s): ${controls.slice(0, 5).join(', ')}`,
      { hint: 'Remove it from them (removeLimitFromControl) first.' },
    );
  }
  deps.vel.deleteLimit.run(id);
  return limit;
}

export function getVelocityLimit(deps: LedgerDeps, id: string): VelocityLimit {
  const row = deps.vel.limitById.get(id);
  if (!row) throw notFound('velocity limit', id, 'Create it with createVelocityLimit.');
  return toLimit(row);
}

export function listVelocityLimits(deps: LedgerDeps, first: number, after?: string | null): Connection<VelocityLimit> {
  const req = pageRequest<string>(first, after, deps.limits.pageSizeMax, 'string', 'velocity-limits');
  return toConnection(deps.vel.limitsPage.all(req.after ?? '', req.fetch), req, (r) => r.velocity_limit_id, toLimit);
}

function enforcementOf(input: VelocityControlInput['enforcement'], fallback: Enforcement): Enforcement {
  const action = input?.action ?? fallback;
  if (!ENFORCEMENTS.includes(action))
    throw new EngineError(
      'BAD_REQUEST',
      `enforcement.action ${quote(action)} is not one of ${ENFORCEMENTS.join(', ')}`,
    );
  return action;
}

export function createVelocityControl(deps: LedgerDeps, input: VelocityControlInput): VelocityControl {
  if (deps.vel.controlById.get(input.velocityControlId))
    throw alreadyExists('velocity control', input.velocityControlId, 'Use updateVelocityControl to change it.');
  if (input.condition != null) compileCel(deps, 'condition', input.condition);
  const now = deps.clock.now().toISOString();
  const row: VelocityControlRow = {
    velocity_control_id: input.velocityControlId,
    name: requiredText(input.name, 'name'),
    description: optionalText(input.description, 'description'),
    enforcement: enforcementOf(input.enforcement, 'REJECT'),
    condition: input.condition ?? null,
    status: 'ACTIVE',
    version: 1,
    created: now,
    modified: now,
  };
  deps.vel.insertControl.run(row);
  for (const limitId of input.velocityLimitIds ?? []) addLimitToControl(deps, row.velocity_control_id, limitId);
  return toControl(row);
}

export function updateVelocityControl(
  deps: LedgerDeps,
  id: string,
  input: {
    name?: string | null;
    description?: string | null;
    enforcement?: VelocityControlInput['enforcement'];
    condition?: string | null;
    status?: 'ACTIVE' | 'LOCKED' | null;
  },
): VelocityControl {
  const current = findControlRow(deps, id);
  if (input.condition != null) compileCel(deps, 'condition', input.condition);
  if (input.status != null && input.status !== 'ACTIVE' && input.status !== 'LOCKED')
    throw new EngineError('BAD_REQUEST', `status ${quote(input.status)} is not ACTIVE or LOCKED`);
  const row: VelocityControlRow = {
    ...current,
    name: input.name == null ? current.name : requiredText(input.name, 'name'),
    description: input.description === undefined ? current.description : optionalText(input.description, 'description'),
    enforcement:
      input.enforcement === undefined ? current.enforcement : enforcementOf(input.enforcement, current.enforcement),
    condition: input.condition === undefined ? current.condition : input.condition,
    status: input.status ?? current.status,
    version: current.version + 1,
    modified: deps.clock.now().toISOString(),
  };
  deps.vel.updateControl.run(row);
  return toControl(row);
}

export function deleteVelocityControl(deps: LedgerDeps, id: string): VelocityControl {
  const control = toControl(findControlRow(deps, id));
  const attached = deps.vel.attachmentsOfControlCount.get(id) ?? 0;
  if (attached > 0)
    throw new EngineError(
      'BAD_REQUEST',
      `velocity control ${control.name} is attached to ${attached} account(s) or set(s)`,
      { hint: 'Detach it (detachVelocityControl) first.' },
    );
  deps.vel.removeAllLimitsFromControl.run(id);
  deps.vel.deleteControl.run(id);
  return control;
}

function findControlRow(deps: LedgerDeps, id: string): VelocityControlRow {
  const row = deps.vel.controlById.get(id);
  if (!row) throw notFound('velocity control', id, 'Create it with createVelocityControl.');
  return row;
}

export function getVelocityControl(deps: LedgerDeps, id: string): VelocityControl {
  return toControl(findControlRow(deps, id));
}

export function listVelocityControls(
  deps: LedgerDeps,
  first: number,
  after?: string | null,
): Connection<VelocityControl> {
  const req = pageRequest<string>(first, after, deps.limits.pageSizeMax, 'string', 'velocity-controls');
  return toConnection(
    deps.vel.controlsPage.all(req.after ?? '', req.fetch),
    req,
    (r) => r.velocity_control_id,
    toControl,
  );
}

export function limitsOfControl(deps: LedgerDeps, controlId: string): VelocityLimit[] {
  return deps.vel.limitsOfControl.all(controlId).map(toLimit);
}

export function addLimitToControl(deps: LedgerDeps, controlId: string, limitId: string): VelocityControl {
  const control = findControlRow(deps, controlId);
  getVelocityLimit(deps, limitId);
  if (deps.vel.limitsOfControl.all(controlId).some((l) => l.velocity_limit_id === limitId)) {
    throw new EngineError('ALREADY_EXISTS', `velocity limit ${limitId} is already in control ${control.name}`);
  }
  const count = deps.vel.controlLimitCount.get(controlId) ?? 0;
  if (count >= deps.limits.velocityLimitsPerControlMax) {
    throw limitExceeded(
      'velocityLimitsPerControlMax',
      deps.limits.velocityLimitsPerControlMax,
      count + 1,
      `velocity control ${control.name} has ${count} limits; velocityLimitsPerControlMax is ${deps.limits.velocityLimitsPerControlMax}`,
    );
  }
  deps.vel.addLimitToControl.run(controlId, limitId, controlId);
  return toControl(control);
}

export function removeLimitFromControl(deps: LedgerDeps, controlId: string, limitId: string): VelocityControl {
  const control = findControlRow(deps, controlId);
  if (deps.vel.removeLimitFromControl.run(controlId, limitId).changes === 0) {
    throw new EngineError('NOT_FOUND', `velocity limit ${quote(limitId)} is not in control ${control.name}`);
  }
  return toControl(control);
}

export function removeAllLimitsFromControl(deps: LedgerDeps, controlId: string): VelocityControl {
  const control = findControlRow(deps, controlId);
  deps.vel.removeAllLimitsFromControl.run(controlId);
  return toControl(control);
}

/**
 * Attach a control to an account or a set (in one journal, or every journal when left out), with
 * the values of its limits' params. Attaching it again replaces the journal and params.
 */
export function attachVelocityControl(
  deps: LedgerDeps,
  args: { velocityControlId: string; accountId: string; journalId?: string | null; params?: unknown },
): Attachment {
  const control = findControlRow(deps, args.velocityControlId);
  const target = deps.st.accountById.get(args.accountId);
  if (!target) throw notFound('account or account set', args.accountId);
  if (args.journalId != null && !deps.st.journalById.get(args.journalId)) throw notFound('journal', args.journalId);
  const existing = deps.vel.attachment.get(args.accountId, args.velocityControlId);
  const attached = existing ? 0 : deps.vel.attachmentsOf.all(args.accountId).length;
  if (!existing && attached >= deps.limits.velocityControlsPerAccountMax) {
    throw limitExceeded(
      'velocityControlsPerAccountMax',
      deps.limits.velocityControlsPerAccountMax,
      attached + 1,
      `${target.code} has ${deps.limits.velocityControlsPerAccountMax} velocity controls attached; velocityControlsPerAccountMax is ${deps.limits.velocityControlsPerAccountMax}`,
      {
        hint: 'Each posting checks every control of its accounts and their sets: combine limits into fewer controls.',
      },
    );
  }
  const params = args.params == null ? null : jsonObjectText(args.params, 'params', deps.limits.jsonBytesMax);
  // CEL reads params as maps: a key CEL cannot hold (or that names a prototype) is refused here, not at every posting.
  const reserved = params === null ? null : reservedKeyIn(JSON.parse(params));
  if (reserved !== null) {
    throw new EngineError('BAD_REQUEST', `params hold the key ${quote(reserved)}, which is reserved`, {
      hint: 'Name params with identifiers other than __proto__, constructor and prototype.',
    });
  }
  // Bind them now against every limit, so a bad value is refused here and not at the next posting.
  for (const limit of limitsOfControl(deps, control.velocity_control_id))
    bindLimitParams(deps, limit, params === null ? {} : JSON.parse(params));
  const now = deps.clock.now().toISOString();
  deps.vel.upsertAttachment.run({
    account_id: args.accountId,
    velocity_control_id: args.velocityControlId,
    journal_id: args.journalId ?? '',
    params,
    now,
  });
  return toAttachment(deps.vel.attachment.get(args.accountId, args.velocityControlId)!);
}

export function detachVelocityControl(
  deps: LedgerDeps,
  args: { velocityControlId: string; accountId: string },
): Attachment {
  const row = deps.vel.attachment.get(args.accountId, args.velocityControlId);
  if (!row)
    throw new EngineError(
      'NOT_FOUND',
      `velocity control ${quote(args.velocityControlId)} is not attached to ${quote(args.accountId)}`,
    );
  deps.vel.deleteAttachment.run(args.accountId, args.velocityControlId);
  return toAttachment(row);
}

export function attachedControls(
  deps: LedgerDeps,
  accountId: string,
  first: number,
  after?: string | null,
): Connection<Attachment> {
  const req = pageRequest<string>(first, after, deps.limits.pageSizeMax, 'string', 'attached-controls');
  return toConnection(
    deps.vel.attachmentsOfPage.all(accountId, req.after ?? '', req.fetch),
    req,
    (r) => r.velocity_control_id,
    toAttachment,
  );
}

// ----------------------------------------------------------------------------------------------
// Reads

export interface VelocityBalance {
  velocityControlId: string;
  velocityLimitId: string;
  accountId: string;
  journalId: string;
  currency: string;
  window: Record<string, unknown>;
  layer: Layer;
  normalBalanceType: Direction;
  limit: string;
  spent: string;
  remaining: string;
}

/**
 * What each attached control's limits allow an account or set in one window (values by alias; {}
 * for limits without a window): spent (the available balance on the limit's normal side) and
 * remaining (limit − spent), one row per balance limit.
 */
export function velocityOf(
  deps: LedgerDeps,
  args: {
    accountId: string;
    window: unknown;
    currency?: string | null;
    velocityLimitId?: string | null;
    journalId?: string | null;
  },
): VelocityBalance[] {
  const target = deps.st.accountById.get(args.accountId);
  if (!target) throw notFound('account or account set', args.accountId);
  const window = (args.window ?? {}) as Record<string, unknown>;
  if (typeof window !== 'object' || Array.isArray(window))
    throw badInput('window must be a JSON object of values by alias', window);
  const currency = args.currency ?? 'USD';
  const journalId = args.journalId ?? target.journal_id ?? DEFAULT_JOURNAL_ID;
  const out: VelocityBalance[] = [];
  for (const attachment of deps.vel.attachmentsOf.all(target.account_id).map(toAttachment)) {
    if (attachment.journalId !== null && attachment.journalId !== journalId) continue;
    const control = getVelocityControl(deps, attachment.velocityControlId);
    for (const limit of limitsOfControl(deps, control.velocityControlId)) {
      if (args.velocityLimitId && limit.velocityLimitId !== args.velocityLimitId) continue;
      if (limit.currency !== '' && limit.currency !== currency) continue;
      const key =
        limit.window.length === 0
          ? '[]'
          : canonicalJson(
              limit.window.map((k) => {
                const v = Object.hasOwn(window, k.alias) ? window[k.alias] : undefined;
                if (v === undefined)
                  throw new EngineError(
                    'BAD_REQUEST',
                    `window needs ${quote(k.alias)} for velocity limit ${limit.name}`,
                    { hint: `Its window keys are ${limit.window.map((w) => w.alias).join(', ')}.` },
                  );
                return String(v);
              }),
            );
      const totals: Totals | undefined = keepsTotals(limit)
        ? deps.vel.velocityBalance.get(limit.velocityLimitId, target.account_id, journalId, currency, key)
        : deps.st.balance.get(target.account_id, journalId, currency);
      const specs =
        staticSpecs(deps, limit, attachment) ??
        evaluateSpecs(
          deps,
          limit,
          {
            context: { vars: { account: accountDocument(target) } },
            params: bindLimitParams(deps, limit, attachment.params ?? {}),
          },
          null,
        );
      for (const { layer, side: named, amount } of specs) {
        const side = named ?? (target.normal_balance_type as Direction);
        const spent = availableNormal(totals, layer, side);
        const remaining = amount.d.isFinite()
          ? subText(withScale(amount.d, amount.scale), spent)
          : amountText(amount.d, 0);
        out.push({
          velocityControlId: control.velocityControlId,
          velocityLimitId: limit.velocityLimitId,
          accountId: target.account_id,
          journalId,
          currency,
          window,
          layer,
          normalBalanceType: side,
          limit: amountText(amount.d, amount.scale),
          spent,
          remaining,
        });
      }
    }
  }
  return out;
}
