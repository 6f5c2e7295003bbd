import { CelDecimal, jsonToCel } from '../cel/values.js';
import { Dec, parseDecimal, scaleOf } from '../decimal.js';
import { EngineError, quote } from '../errors.js';
import { isUuid } from '../ids.js';
import type { LedgerDeps } from './deps.js';
import type { ParamType } from './param-definitions.js';
import type { CompiledTranCode } from './tran-codes.js';

const DATE_PATTERN = /^\d{4}-\d{2}-\d{2}$/;

const TIMESTAMP_PATTERN =
  /^(\d{4}-\d{2}-\d{2})T([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d+)?)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/;

/**
 * An RFC 3339 timestamp with an offset whose date and time exist: JavaScript's Date would roll
 * 2026-02-30 over to March 2 instead of refusing it.
 */
export function isTimestamp(value: unknown): value is string {
  if (typeof value !== 'string') return false;
  const m = TIMESTAMP_PATTERN.exec(value);
  return m !== null && isDate(m[1]) && !Number.isNaN(Date.parse(value));
}

export function isDate(value: unknown): value is string {
  if (typeof value !== 'string' || !DATE_PATTERN.test(value)) return false;
  const d = new Date(`${value}T00:00:00Z`);
  return !Number.isNaN(d.getTime()) && d.toISOString().slice(0, 10) === value;
}

/**
 * Turn a tran code's params (JSON from the wire, or values of CEL defaults) into typed CEL values:
 * DECIMAL → exact Decimal, INTEGER → int, TIMESTAMP → timestamp, JSON → map/list.
 */
export function bindParams(
  deps: LedgerDeps,
  compiled: CompiledTranCode,
  input: Record<string, unknown>,
): Record<string, unknown> {
  const code = compiled.document.code;
  const declared = new Set(compiled.params.map((p) => p.definition.name));
  for (const name of Object.keys(input)) {
    if (!declared.has(name)) {
      throw new EngineError('TRAN_CODE_ERROR', `tran code ${code} has no param ${quote(name)}`, {
        hint: declared.size ? `Its params are: ${[...declared].join(', ')}.` : 'It takes no params.',
      });
    }
  }
  const params: Record<string, unknown> = {};
  for (const { definition, defaultValue } of compiled.params) {
    const what = `param ${quote(definition.name)} of tran code ${code}`;
    if (Object.hasOwn(input, definition.name) && input[definition.name] !== null) {
      params[definition.name] = coerceParam(deps, definition.type, input[definition.name], what, false);
    } else if (defaultValue) {
      let value: unknown;
      try {
        value = defaultValue.evaluate({ params });
      } catch (error) {
        throw new EngineError('TRAN_CODE_ERROR', `default of ${what}: ${(error as Error).message}`);
      }
      params[definition.name] = coerceParam(deps, definition.type, value, `default of ${what}`, true);
    } else {
      throw new EngineError('TRAN_CODE_ERROR', `${what} is required`, {
        hint: `Pass params: {${definition.name}: ...} (type ${definition.type}).`,
      });
    }
  }
  return params;
}

function coerceParam(deps: LedgerDeps, type: ParamType, value: unknown, what: string, fromCel: boolean): unknown {
  const fail = (expected: string): never => {
    throw new EngineError('TRAN_CODE_ERROR', `${what} must be ${expected}, got ${quote(value)}`);
  };
  switch (type) {
    case 'STRING':
      return typeof value === 'string' ? value : fail('a string');
    case 'BOOLEAN':
      return typeof value === 'boolean' ? value : fail('a boolean');
    case 'INTEGER':
      if (typeof value === 'bigint') return value;
      if (typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
      if (typeof value === 'string' && /^-?\d{1,19}$/.test(value)) {
        const n = BigInt(value);
        if (n >= -(2n ** 63n) && n < 2n ** 63n) return n;
      }
      return fail('a 64-bit integer');
    case 'DECIMAL':
      if (value instanceof CelDecimal) return value;
      if (fromCel && typeof value === 'bigint') return new CelDecimal(new Dec(value.toString()));
      try {
        const parsed = parseDecimal(value, what, deps.limits);
        return new CelDecimal(parsed, typeof value === 'string' ? scaleOf(value) : 0);
      } catch (error) {
        throw new EngineError('TRAN_CODE_ERROR', (error as Error).message, { hint: (error as EngineError).hint });
      }
    case 'UUID':
      return isUuid(value) ? value.toLowerCase() : fail('a UUID');
    case 'DATE':
      return isDate(value) ? value : fail('a date YYYY-MM-DD');
    case 'TIMESTAMP': {
      if (value instanceof Date) return value;
      // An offset is required: a timestamp without one would be read in the server's time zone.
      if (isTimestamp(value)) return new Date(value);
      return fail('an RFC 3339 timestamp with an offset (e.g. "2026-01-31T12:00:00Z")');
    }
    case 'JSON':
      return fromCel ? value : jsonToCel(value);
  }
}
