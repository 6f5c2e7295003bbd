import { EngineError } from '../errors.js';
import { type Dec, formatDecimal, minorUnits, withScale } from '../decimal.js';
import { isReservedKey, setOwn } from '../json.js';

/**
 * CEL's `Decimal` type: an exact decimal and the scale it is written with ("21.00" has scale 2,
 * kept through + and −, which take the larger scale; see scaleOf in src/decimal.ts).
 */
export class CelDecimal {
  readonly scale: number;
  constructor(
    readonly value: Dec,
    scale?: number,
  ) {
    this.scale = scale ?? value.decimalPlaces();
  }
  toString(): string {
    return withScale(this.value, this.scale);
  }
}

/** CEL's `Money` type: an exact decimal amount in one currency, with the scale of its units. */
export class CelMoney {
  readonly scale: number;
  constructor(
    readonly units: Dec,
    readonly currency: string,
    scale?: number,
  ) {
    this.scale = scale ?? units.decimalPlaces();
  }
  toString(): string {
    return `${formatDecimal(this.units, Math.max(this.scale, minorUnits(this.currency)))} ${this.currency}`;
  }
}

/**
 * Namespaces such as `decimal.Round(...)` and `uuid.New()` are, to the CEL parser, method calls on
 * an identifier. Each namespace is a constant of its own type, and its functions are receiver
 * methods of that type. Each needs its own class: the library picks a value's CEL type by its class.
 */
export class DecimalNamespace {}
export class MoneyNamespace {}
export class UuidNamespace {}
export class DateNamespace {}
export class TimeNamespace {}
export class StringsNamespace {}

/**
 * Convert a CEL result to plain JSON data: ints and decimals become strings or safe numbers, never
 * lossy floats for money; timestamps become RFC 3339 strings; maps become objects.
 */
export function celToJson(value: unknown): unknown {
  if (value === null || value === undefined) return null;
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      if (!Number.isFinite(value))
        throw new EngineError('CEL_ERROR', `${value} is not a JSON value`, {
          hint: 'Check for a division by zero or an overflow in the expression.',
        });
      return value;
    case 'bigint':
      return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER)
        ? Number(value)
        : value.toString();
    default:
      break;
  }
  if (value instanceof CelDecimal) return value.toString();
  if (value instanceof CelMoney)
    return {
      units: formatDecimal(value.units, Math.max(value.scale, minorUnits(value.currency))),
      currency: value.currency,
    };
  if (value instanceof Date) {
    const year = value.getUTCFullYear();
    if (Number.isNaN(value.getTime()) || year < 1 || year > 9999) {
      throw new EngineError(
        'CEL_ERROR',
        `a timestamp out of range (year ${Number.isNaN(year) ? 'beyond any calendar' : year})`,
        { hint: 'Timestamps run from year 0001 to 9999 (RFC 3339).' },
      );
    }
    return value.toISOString();
  }
  if (value instanceof Uint8Array) return Buffer.from(value).toString('base64');
  if (Array.isArray(value)) return value.map(celToJson);
  if (value instanceof Map) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of value) setOwn(out, String(k), celToJson(v));
    return out;
  }
  if (typeof value === 'object') {
    const inner = (value as { valueOf(): unknown }).valueOf();
    if (typeof inner === 'bigint') return celToJson(inner); // UnsignedInt
    const proto = Object.getPrototypeOf(value);
    // Values of other CEL types render as their text (a duration as "90s"); those with no text of
    // their own (types, optionals) are not JSON.
    if (proto !== Object.prototype && proto !== null) {
      const text = String(value);
      if (text.startsWith('[object ') || text.startsWith('Type<'))
        throw new EngineError('CEL_ERROR', `a value of CEL type ${text} is not JSON`, {
          hint: 'Store strings, numbers, decimals, lists and maps.',
        });
      return text;
    }
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) setOwn(out, k, celToJson(v));
    return out;
  }
  return String(value);
}

/**
 * Convert JSON data to CEL values: integral numbers become CEL ints (so `document.count + 1` works),
 * other numbers stay doubles.
 */
export function jsonToCel(value: unknown): unknown {
  if (typeof value === 'number') return Number.isSafeInteger(value) ? BigInt(value) : value;
  if (Array.isArray(value)) return value.map(jsonToCel);
  if (
    value !== null &&
    typeof value === 'object' &&
    !(value instanceof Date) &&
    !(value instanceof CelDecimal) &&
    !(value instanceof CelMoney)
  ) {
    const entries = Object.entries(value);
    // The CEL library types a plain object by its `constructor`: an object with its own
    // __proto__ / constructor / prototype key becomes a Map, which CEL reads the same way.
    if (entries.some(([k]) => isReservedKey(k))) return new Map(entries.map(([k, v]) => [k, jsonToCel(v)]));
    const out: Record<string, unknown> = {};
    for (const [k, v] of entries) setOwn(out, k, jsonToCel(v));
    return out;
  }
  return value;
}
