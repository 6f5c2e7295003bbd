import { CelDecimal, jsonToCel } from '../cel/values.js';
import { addText, Dec, scaleOf, subText, withScale } from '../decimal.js';
import { alreadyExists, badInput, EngineError, limitExceeded, notFound, quote } from '../errors.js';
import { canonicalJson } from '../ids.js';
import { isReservedKey, setOwn } from '../json.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { AccountRow, BalanceRow, EntryRow } from '../storage/statements/ledger.js';
import { BALANCE_COLUMNS, snapshotTotals } from '../storage/statements/ledger.js';
import type { VelocityAttachmentRow, VelocityControlRow, VelocityLimitRow } from '../storage/statements/velocity.js';
import { ownersOf, type Posted } from './posted.js';
import { cachedAccount, type LedgerDeps } from './deps.js';
import { DEFAULT_JOURNAL_ID } from './journals.js';
import { accountDocument, type CelDocument, entryDocument, transactionDocument } from './documents.js';
import { identifiersOf } from './param-defaults.js';
import { bindParams } from './params.js';
import { type Direction, jsonObjectText, type Layer, LAYERS, optionalText, requiredText } from './records.js';
import { type CompiledTranCode, compileParams, type ParamDefinition, type ParamType } from './tran-codes.js';

/**
 * Velocity controls: limits on an account's (or a set's rolled-up) balance, checked on every
 * write that moves a balance (a posting, a void, a membership change: one gate, see decide) inside
 * its transaction, after the entries and balances are written (so the balance checked is the one
 * the write would leave). A limit says which entries count (condition), how
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

export interface PartitionKey {
  alias: string;
  value: string;
  type?: string | null;
}

export interface BalanceLimit {
  layer: string;
  amount: string;
  normalBalanceType?: string | null;
  start?: string | null;
  end?: string | null;
}

export interface VelocityLimitDocument {
  window: PartitionKey[];
  condition: string | null;
  currency: string;
  limit: { timestampSource: string | null; balance: BalanceLimit[] };
  params: ParamDefinition[];
}

export interface VelocityLimitInput {
  velocityLimitId: string;
  name: string;
  description?: string | null;
  window?: PartitionKey[] | null;
  condition?: string | null;
  currency?: string | null;
  limit: { timestampSource?: string | null; balance: BalanceLimit[] };
  params?: Array<{
    name: string;
    type?: ParamType | null;
    default?: string | null;
    description?: string | null;
  }> | null;
}

export interface VelocityLimit extends VelocityLimitDocument {
  velocityLimitId: string;
  name: string;
  description: string | null;
  version: number;
  created: string;
  modified: string;
}

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

export interface TransactionException {
  type: string;
  message: string;
  detail: Record<string, unknown>;
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

function toAttachment(row: VelocityAttachmentRow): Attachment {
  return {
    accountId: row.account_id,
    velocityControlId: row.velocity_control_id,
    journalId: row.journal_id || null,
    params: row.params === null ? null : (JSON.parse(row.params) as Record<string, unknown>),
    created: row.created,
    modified: row.modified,
  };
}

// ----------------------------------------------------------------------------------------------
// Definitions

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

function compileCel(deps: LedgerDeps, what: string, source: unknown): void {
  if (typeof source !== 'string' || source.trim() === '') throw badInput(`${what} must be a CEL expression`, source);
  try {
    deps.cel.compile(source);
  } catch (error) {
    const e = error as EngineError;
    throw new EngineError(e.code === 'LIMIT_EXCEEDED' ? 'LIMIT_EXCEEDED' : 'CEL_ERROR', `${what}: ${e.message}`, {
      hint: e.hint,
      details: e.details,
    });
  }
}

function limitDocument(deps: LedgerDeps, input: VelocityLimitInput): VelocityLimitDocument {
  const window = (input.window ?? []).map((k, i) => {
    if (!IDENTIFIER.test(k?.alias ?? '') || isReservedKey(k.alias))
      throw new EngineError('BAD_REQUEST', `window[${i}].alias ${quote(k?.alias)} is not an identifier`, {
        hint: 'Use letters, digits and _ (not __proto__, constructor or prototype).',
      });
    compileCel(deps, `window[${i}].value`, k.value);
    return { alias: k.alias, value: k.value, type: k.type ?? null };
  });
  if (new Set(window.map((k) => k.alias)).size !== window.length)
    throw new EngineError('BAD_REQUEST', 'window aliases must be distinct');
  if (window.length > deps.limits.velocityWindowKeysMax) {
    throw limitExceeded(
      'velocityWindowKeysMax',
      deps.limits.velocityWindowKeysMax,
      window.length,
      `window has ${window.length} keys; velocityWindowKeysMax is ${deps.limits.velocityWindowKeysMax}`,
    );
  }
  if (input.condition != null) compileCel(deps, 'condition', input.condition);
  const currency = input.currency ?? '';
  if (currency !== '' && !/^[A-Z][A-Z0-9]{2,9}$/.test(currency)) {
    throw new EngineError('BAD_REQUEST', `currency ${quote(currency)} is not a currency code`, {
      hint: 'Use "" for any currency, or a code such as "USD".',
    });
  }
  const balance = input.limit?.balance;
  if (!Array.isArray(balance) || balance.length === 0) {
    throw new EngineError('BAD_REQUEST', 'limit.balance needs at least one {layer, amount}', {
      hint: 'e.g. limit: {balance: [{layer: "SETTLED", amount: "params.amount", normalBalanceType: "DEBIT"}]}',
    });
  }
  if (balance.length > LAYERS.length * 2)
    throw limitExceeded(
      'limitBalanceEntriesMax',
      LAYERS.length * 2,
      balance.length,
      `limit.balance has ${balance.length} entries; at most ${LAYERS.length * 2}`,
    );
  const limits = balance.map((b, i) => {
    compileCel(deps, `limit.balance[${i}].layer`, b?.layer);
    compileCel(deps, `limit.balance[${i}].amount`, b?.amount);
    for (const field of ['normalBalanceType', 'start', 'end'] as const)
      if (b[field] != null) compileCel(deps, `limit.balance[${i}].${field}`, b[field]);
    return {
      layer: b.layer,
      amount: b.amount,
      normalBalanceType: b.normalBalanceType ?? null,
      start: b.start ?? null,
      end: b.end ?? null,
    };
  });
  if (input.limit.timestampSource != null) compileCel(deps, 'limit.timestampSource', input.limit.timestampSource);
  const params = (input.params ?? []).map(
    (p): ParamDefinition => ({
      name: p?.name,
      type: (p?.type ?? 'STRING') as ParamType,
      default: p?.default ?? null,
      description: p?.description ?? null,
    }),
  );
  compiledParams(deps, `velocity limit ${input.name}`, params);
  return {
    window,
    condition: input.condition ?? null,
    currency,
    limit: { timestampSource: input.limit.timestampSource ?? null, balance: limits },
    params,
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
// Params and amounts

const INFINITE = /^([+-]?)(inf|infinity)$/i;

/** Param definitions of a velocity limit checked and compiled as a tran code's are; errors are BAD_REQUEST / CEL_ERROR. */
function compiledParams(
  deps: LedgerDeps,
  owner: string,
  params: readonly ParamDefinition[],
): CompiledTranCode['params'] {
  return compileParams(
    deps,
    params,
    owner,
    (path, source) => {
      compileCel(deps, path, source);
      return { path, source, evaluate: deps.cel.compile(source) };
    },
    (message, hint) => new EngineError('BAD_REQUEST', message, hint === undefined ? {} : { hint }),
  );
}

/** A limit's params: the attach-time values, else each param's default. "inf" / "-inf" are ±Infinity. */
function bindLimitParams(
  deps: LedgerDeps,
  limit: VelocityLimit,
  values: Record<string, unknown>,
): Record<string, unknown> {
  const input: Record<string, unknown> = {};
  // Values for params the limit does not declare are kept as they are (the reference ledger's
  // controls pass more than a limit reads, e.g. a layer beside the amount).
  const extra: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(values)) {
    const param = limit.params.find((p) => p.name === name);
    if (!param) {
      setOwn(extra, name, jsonToCel(value));
      continue;
    }
    const infinite = typeof value === 'string' ? INFINITE.exec(value.trim()) : null;
    setOwn(
      input,
      name,
      param.type === 'DECIMAL' && infinite
        ? new CelDecimal(new Dec(infinite[1] === '-' ? -Infinity : Infinity))
        : value,
    );
  }
  // Compiled once per limit version (versions never change), until a velocity table changes.
  const compiled = deps.cache.posting.getIn(`velocity params ${limit.version}`, limit.velocityLimitId, () => ({
    document: { code: `velocity limit ${limit.name}` },
    params: compiledParams(deps, `velocity limit ${limit.name}`, limit.params),
  })) as unknown as CompiledTranCode;
  try {
    return { ...extra, ...bindParams(deps, compiled, input) };
  } catch (error) {
    const e = error as EngineError;
    throw new EngineError('BAD_REQUEST', e.message.replace(/tran code /, ''), {
      hint:
        e.hint ??
        `The params of velocity limit ${limit.name}: ${limit.params.map((p) => `${p.name} (${p.type})`).join(', ') || 'none'}.`,
    });
  }
}

function amountText(d: Dec, scale: number): string {
  return d.isFinite() ? withScale(d, scale) : d.isNegative() ? '-Infinity' : 'Infinity';
}

function layerOf(value: unknown, what: string): Layer {
  if (value === 0n || value === 'SETTLED') return 'SETTLED';
  if (value === 1n || value === 'PENDING') return 'PENDING';
  if (value === 2n || value === 'ENCUMBRANCE') return 'ENCUMBRANCE';
  throw new EngineError('CEL_ERROR', `${what} evaluated to ${quote(String(value))}, not a layer`, {
    hint: 'Use SETTLED, PENDING or ENCUMBRANCE.',
  });
}

function directionOf(value: unknown, what: string): Direction {
  if (value === 0n || value === 'DEBIT') return 'DEBIT';
  if (value === 1n || value === 'CREDIT') return 'CREDIT';
  throw new EngineError('CEL_ERROR', `${what} evaluated to ${quote(String(value))}, not DEBIT or CREDIT`);
}

function decimalOf(value: unknown, what: string): { d: Dec; scale: number } {
  if (value instanceof CelDecimal) return { d: value.value, scale: value.scale };
  if (typeof value === 'bigint') return { d: new Dec(value.toString()), scale: 0 };
  if (typeof value === 'string') {
    const infinite = INFINITE.exec(value.trim());
    if (infinite) return { d: new Dec(infinite[1] === '-' ? -Infinity : Infinity), scale: 0 };
    if (/^[+-]?\d+(\.\d+)?$/.test(value)) return { d: new Dec(value), scale: scaleOf(value) };
  }
  throw new EngineError('CEL_ERROR', `${what} evaluated to ${quote(String(value))}, not a decimal`);
}

// ----------------------------------------------------------------------------------------------
// Enforcement at posting

type Totals = Pick<BalanceRow, (typeof BALANCE_COLUMNS)[number]>;

/** The available balance at `layer` (cumulative: S, S+P, S+P+E) on the `side` normal side. */
function availableNormal(totals: Totals | undefined, layer: Layer, side: Direction): string {
  let dr = '0';
  let cr = '0';
  if (totals) {
    for (const l of LAYERS.slice(0, LAYERS.indexOf(layer) + 1)) {
      const key = l.toLowerCase() as 'settled' | 'pending' | 'encumbrance';
      dr = addText(dr, totals[`${key}_dr` as const]);
      cr = addText(cr, totals[`${key}_cr` as const]);
    }
  }
  return side === 'DEBIT' ? subText(dr, cr) : subText(cr, dr);
}

/** Does this limit keep running totals of its own (a window or a condition), or read the balance? */
const keepsTotals = (limit: VelocityLimit) => limit.window.length > 0 || limit.condition !== null;

function evaluate(deps: LedgerDeps, expression: string, context: Record<string, unknown>, what: string): unknown {
  try {
    return deps.cel.evaluate(expression, context);
  } catch (error) {
    const e = error as EngineError;
    // A limit crossed keeps saying which (details); a CEL error's position is in its message.
    throw new EngineError(e.code === 'LIMIT_EXCEEDED' ? 'LIMIT_EXCEEDED' : 'CEL_ERROR', `${what}: ${e.message}`, {
      hint: e.hint,
      details: e.code === 'LIMIT_EXCEEDED' ? e.details : undefined,
    });
  }
}

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

interface Check {
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
function attachedTo(deps: LedgerDeps, accountId: string): Attachment[] {
  return deps.cache.posting.getIn('velocity attachments', accountId, () =>
    deps.vel.attachmentsOf.all(accountId).map(toAttachment),
  ) as Attachment[];
}

function controlOf(deps: LedgerDeps, id: string): { control: VelocityControl; limits: VelocityLimit[] } {
  return deps.cache.posting.getIn('velocity control', id, () => ({
    control: getVelocityControl(deps, id),
    limits: limitsOfControl(deps, id),
  })) as {
    control: VelocityControl;
    limits: VelocityLimit[];
  };
}

/** Names a balance limit's fields may read and still be known before any posting: params and constants. */
const STATIC_ROOTS: ReadonlySet<string> = new Set([
  'params',
  'DEBIT',
  'CREDIT',
  'SETTLED',
  'PENDING',
  'ENCUMBRANCE',
  'decimal',
  'money',
  'uuid',
  'date',
  'time',
  'strings',
]);

interface Spec {
  layer: Layer;
  side: Direction | null;
  amount: { d: Dec; scale: number };
}

/**
 * A limit's balance limits as evaluated for one attachment, when none of their fields reads
 * anything but params and constants (the usual case): cached until a velocity table changes.
 * null when any field reads the posting (evaluated per check then).
 */
function staticSpecs(deps: LedgerDeps, limit: VelocityLimit, attachment: Attachment): Spec[] | null {
  const key = `velocity specs ${attachment.accountId} ${attachment.velocityControlId} ${limit.velocityLimitId}`;
  const cached = deps.cache.posting.get(key, () => {
    const fields = limit.limit.balance
      .flatMap((b) => [b.layer, b.amount, b.normalBalanceType, b.start, b.end])
      .filter((f): f is string => f != null);
    const fixed = fields.every((f) =>
      [...identifiersOf((deps.cel.compile(f) as unknown as { ast?: unknown }).ast)].every((n) => STATIC_ROOTS.has(n)),
    );
    if (!fixed || limit.limit.balance.some((b) => b.start != null || b.end != null)) return { specs: null };
    return {
      specs: evaluateSpecs(deps, limit, { params: bindLimitParams(deps, limit, attachment.params ?? {}) }, null),
    };
  }) as { specs: Spec[] | null };
  return cached.specs;
}

/**
 * A limit's balance limits evaluated in `context` (params, and the posting's documents when they
 * read them). With a `timestamp`, those whose [start, end) does not hold it are left out.
 */
function evaluateSpecs(
  deps: LedgerDeps,
  limit: VelocityLimit,
  context: Record<string, unknown>,
  timestamp: unknown,
): Spec[] {
  const specs: Spec[] = [];
  for (const [i, b] of limit.limit.balance.entries()) {
    const what = `velocity limit ${limit.name} limit.balance[${i}]`;
    if (timestamp !== null && (b.start != null || b.end != null)) {
      const at = timestamp instanceof Date ? timestamp.getTime() : Date.parse(String(timestamp));
      const start =
        b.start == null ? -Infinity : Date.parse(celTime(evaluate(deps, b.start, context, `${what}.start`)));
      const end = b.end == null ? Infinity : Date.parse(celTime(evaluate(deps, b.end, context, `${what}.end`)));
      if (!(at >= start && at < end)) continue;
    }
    specs.push({
      layer: layerOf(evaluate(deps, b.layer, context, `${what}.layer`), `${what}.layer`),
      side:
        b.normalBalanceType == null
          ? null
          : directionOf(
              evaluate(deps, b.normalBalanceType, context, `${what}.normalBalanceType`),
              `${what}.normalBalanceType`,
            ),
      amount: decimalOf(evaluate(deps, b.amount, context, `${what}.amount`), `${what}.amount`),
    });
  }
  return specs;
}

/** One entry's part in a running total: added (sign 1, a posting) or taken back (sign -1, a void). */
interface Move {
  layer: Layer;
  direction: Direction;
  units: string;
  sign: 1 | -1;
}

/** The running total of a windowed or conditional limit for one account or set, journal, currency and window. */
const totalsKey = (limitId: string, targetId: string, journalId: string, currency: string, window: string) =>
  `${limitId} ${targetId} ${journalId} ${currency} ${window}`;

/**
 * Walk the controls attached to each posted entry's account and sets: add (sign 1) or take back
 * (sign -1, the entries of a transaction being voided) each entry in the running totals of the
 * windowed or conditional limits that count it (sign 0 counts nothing: a void's reversal, whose
 * original is taken back instead), noting each in `moves`, and hand each (control, limit, account
 * or set) the posting concerns to `check`. Returns whether anything was attached at all.
 */
function countTotals(
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

function celTime(value: unknown): string {
  return value instanceof Date ? value.toISOString() : String(value);
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
