import { CelDecimal, jsonToCel } from '../cel/values.js';
import { addText, Dec, scaleOf, subText, withScale } from '../decimal.js';
import { badInput, EngineError, limitExceeded, quote } from '../errors.js';
import { isReservedKey, setOwn } from '../json.js';
import type { BALANCE_COLUMNS, BalanceRow } from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import { CEL_ROOTS, identifiersOf } from './param-defaults.js';
import { compileParams, type ParamDefinition, type ParamType } from './param-definitions.js';
import { bindParams } from './params.js';
import { type Direction, type Layer, LAYERS } from './records.js';
import type { CompiledTranCode } from './tran-codes.js';
import type { Attachment } from './velocity.js';

/**
 * A velocity limit as something to compute with: its document checked and compiled when it is
 * written, its params bound to an attachment's values, its balance limits evaluated to a layer, a
 * normal side and an amount (Spec), and the available balance such a limit measures.
 */

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

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

export function compileCel(deps: LedgerDeps, what: string, source: unknown): void {
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

export function limitDocument(deps: LedgerDeps, input: VelocityLimitInput): VelocityLimitDocument {
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
export function bindLimitParams(
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

export function amountText(d: Dec, scale: number): string {
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

export type Totals = Pick<BalanceRow, (typeof BALANCE_COLUMNS)[number]>;

/** The available balance at `layer` (cumulative: S, S+P, S+P+E) on the `side` normal side. */
export function availableNormal(totals: Totals | undefined, layer: Layer, side: Direction): string {
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
export const keepsTotals = (limit: VelocityLimit) => limit.window.length > 0 || limit.condition !== null;

export function evaluate(
  deps: LedgerDeps,
  expression: string,
  context: Record<string, unknown>,
  what: string,
): unknown {
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

export interface Spec {
  layer: Layer;
  side: Direction | null;
  amount: { d: Dec; scale: number };
}

/**
 * A limit's balance limits as evaluated for one attachment, when none of their fields reads
 * anything but params and constants (the usual case): cached until a velocity table changes.
 * null when any field reads the posting (evaluated per check then).
 */
export function staticSpecs(deps: LedgerDeps, limit: VelocityLimit, attachment: Attachment): Spec[] | null {
  const key = `velocity specs ${attachment.accountId} ${attachment.velocityControlId} ${limit.velocityLimitId}`;
  const cached = deps.cache.posting.get(key, () => {
    const fields = limit.limit.balance
      .flatMap((b) => [b.layer, b.amount, b.normalBalanceType, b.start, b.end])
      .filter((f): f is string => f != null);
    const fixed = fields.every((f) =>
      [...identifiersOf((deps.cel.compile(f) as unknown as { ast?: unknown }).ast)].every((n) => CEL_ROOTS.has(n)),
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
export function evaluateSpecs(
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

function celTime(value: unknown): string {
  return value instanceof Date ? value.toISOString() : String(value);
}
