import { TEMPLATE_TEXT_MAX } from '../limits.js';
import { isBudgetError } from '../cel/cost.js';
import { checkCelValueSize } from '../cel/cel.js';
import { CelDecimal, CelMoney, celToJson } from '../cel/values.js';
import { utcDate } from '../clock.js';
import { checkDecimalBounds, type Dec, parseCurrency, parseDecimal, scaleOf, withScale } from '../decimal.js';
import { EngineError, limitDetails, limitExceeded, quote } from '../errors.js';
import { isUuid } from '../ids.js';
import { setOwn } from '../json.js';
import type { LedgerDeps } from './deps.js';
import { DEFAULT_JOURNAL_ID } from './journals.js';
import { bindParams, isDate } from './params.js';
import { type Direction, type JsonObject, jsonObjectText, type Layer } from './records.js';
import type { CompiledField, CompiledTranCode } from './tran-codes.js';

/**
 * A tran code expanded for one posting: its params bound, its vars, transaction template and entry
 * templates evaluated, each value checked (a date, a UUID, a currency, exact units ...). Posting
 * expands the params it is sent; tran-code-checks.ts expands a sample when a tran code is written.
 */

/** An entry computed from a template, before it is written. */
export interface PlannedEntry {
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
