import { CelDecimal, CelMoney, celToJson, jsonToCel } from '../cel/values.js';
import { Dec, scaleOf } from '../decimal.js';
import { EngineError, quote } from '../errors.js';
import type { LedgerDeps } from './deps.js';

/**
 * Typed values, shared by views (document fields, keys) and custom indexes (keys): a CEL result
 * checked as a value of its declared type, its zero value, its stored JSON read back, and its
 * encoding as key text whose order is the value's order (ascending or descending).
 */

export const DATA_TYPES = ['UUID', 'UInt', 'Int', 'String', 'Decimal', 'Boolean', 'Timestamp', 'Date', 'JSON'] as const;
export type DataType = (typeof DATA_TYPES)[number];
export type SortOrder = 'ASC' | 'DESC';

const UUID_TEXT = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const DATE_TEXT = /^\d{4}-\d{2}-\d{2}$/;
const ZERO_TIME = '0001-01-01T00:00:00.000Z';

/** CEL's uint values: the library's UnsignedInt class, taken from an evaluated `uint(0)`. */
export type UintClass = new (value: bigint | number) => { valueOf(): bigint };

export function uintClass(deps: LedgerDeps): UintClass {
  return (deps.cel.evaluate('uint(0)') as object).constructor as UintClass;
}

/** The zero value of a type: what `document.<field>` is before a record's first version. */
export function zeroOf(type: DataType, U: UintClass): unknown {
  switch (type) {
    case 'UInt':
      return new U(0n);
    case 'Int':
      return 0n;
    case 'Decimal':
      return new CelDecimal(new Dec(0), 0);
    case 'Boolean':
      return false;
    case 'Timestamp':
      return new Date(ZERO_TIME);
    case 'Date':
      return '0001-01-01';
    case 'JSON':
      return {};
    default:
      return '';
  }
}

function intOf(value: unknown): bigint | undefined {
  if (typeof value === 'bigint') return value;
  if (
    value !== null &&
    typeof value === 'object' &&
    !(value instanceof CelDecimal) &&
    !(value instanceof CelMoney) &&
    !(value instanceof Date)
  ) {
    const inner = (value as { valueOf(): unknown }).valueOf();
    if (typeof inner === 'bigint') return inner;
  }
  return undefined;
}

export function describe(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'bigint') return `int ${value}`;
  if (value instanceof CelDecimal) return `Decimal ${value.toString()}`;
  if (value instanceof CelMoney) return `Money ${value.toString()}`;
  if (value instanceof Date) return 'a timestamp';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object' && intOf(value) !== undefined) return `uint ${intOf(value)}`;
  if (typeof value === 'object') return 'a map';
  return `${typeof value} ${quote(value)}`;
}

export interface Typed {
  /** As CEL sees it (`document.x`, `this.x`). */
  cel: unknown;
  /** As stored and answered (JSON). */
  json: unknown;
}

/**
 * A CEL result as a value of `type`, or CEL_ERROR naming `what`. `lenientString`: keys typed String
 * (the default when a key's type is neither given nor known) take any scalar by its text.
 */
export function toTyped(type: DataType, value: unknown, what: string, U: UintClass, lenientString = false): Typed {
  const wrong = () =>
    new EngineError('CEL_ERROR', `${what} must be ${type}, got ${describe(value)}`, {
      hint: `Make the expression return a ${type} value, or declare the type it returns.`,
    });
  switch (type) {
    case 'UUID': {
      if (typeof value !== 'string' || (value !== '' && !UUID_TEXT.test(value))) throw wrong();
      const text = value.toLowerCase();
      return { cel: text, json: text };
    }
    case 'String': {
      if (typeof value === 'string') return { cel: value, json: value };
      if (
        !lenientString ||
        value === null ||
        value === undefined ||
        (typeof value === 'object' &&
          !(value instanceof CelDecimal) &&
          !(value instanceof Date) &&
          intOf(value) === undefined)
      )
        throw wrong();
      const text = value instanceof Date ? value.toISOString() : String(intOf(value) ?? value);
      return { cel: text, json: text };
    }
    case 'UInt': {
      const n = intOf(value);
      if (n === undefined || n < 0n || n >= 1n << 64n) throw wrong();
      return { cel: new U(n), json: Number.isSafeInteger(Number(n)) ? Number(n) : n.toString() };
    }
    case 'Int': {
      const n = typeof value === 'bigint' ? value : intOf(value);
      if (n === undefined || n < -(1n << 63n) || n >= 1n << 63n) throw wrong();
      return { cel: n, json: Number.isSafeInteger(Number(n)) ? Number(n) : n.toString() };
    }
    case 'Decimal': {
      let d: CelDecimal;
      if (value instanceof CelDecimal) d = value;
      else if (value instanceof CelMoney) d = new CelDecimal(value.units, value.scale);
      else if (typeof value === 'bigint') d = new CelDecimal(new Dec(value.toString()), 0);
      else throw wrong();
      if (!d.value.isFinite()) throw wrong();
      return { cel: d, json: d.toString() };
    }
    case 'Boolean':
      if (typeof value !== 'boolean') throw wrong();
      return { cel: value, json: value };
    case 'Timestamp': {
      const t = value instanceof Date ? value : typeof value === 'string' ? new Date(value) : null;
      if (!t || Number.isNaN(t.getTime()) || t.getUTCFullYear() < 1 || t.getUTCFullYear() > 9999) throw wrong();
      return { cel: t, json: t.toISOString() };
    }
    case 'Date': {
      const text = value instanceof Date && !Number.isNaN(value.getTime()) ? value.toISOString().slice(0, 10) : value;
      if (typeof text !== 'string' || !DATE_TEXT.test(text)) throw wrong();
      return { cel: text, json: text };
    }
    case 'JSON': {
      const json = celToJson(value);
      return { cel: jsonToCel(json), json };
    }
  }
}

/** A stored value back as CEL sees it: a UInt stays a uint, a Decimal keeps its scale. */
export function fromJson(type: DataType, json: unknown, U: UintClass): unknown {
  switch (type) {
    case 'UInt':
      return new U(BigInt(json as string | number));
    case 'Int':
      return BigInt(json as string | number);
    case 'Decimal':
      return new CelDecimal(new Dec(json as string), scaleOf(json as string));
    case 'Timestamp':
      return new Date(json as string);
    case 'JSON':
      return jsonToCel(json);
    default:
      return json;
  }
}

// ---------------------------------------------------------------------------------------------
// Keys: each value encoded so that text order is the key's order.

const hex = (text: string) => Buffer.from(text, 'utf8').toString('hex');
const INT_OFFSET = 1n << 64n;

/** Ascending encoding over [0-9a-g] of a typed value (its CEL form). */
export function encodeAsc(type: DataType, value: unknown): string {
  switch (type) {
    case 'UInt':
    case 'Int':
      return (intOf(value)! + INT_OFFSET).toString(16).padStart(17, '0');
    case 'Decimal':
      return encodeDecimal((value as CelDecimal).value);
    case 'Boolean':
      return value ? '1' : '0';
    case 'Timestamp':
      return hex((value as Date).toISOString());
    case 'JSON':
      return hex(JSON.stringify(celToJson(value)));
    default:
      return hex(String(value));
  }
}

/**
 * Decimals: '8' for zero; positive '9' + exponent (4 hex digits, offset) + the significant digits;
 * negative '7' + the same complemented + 'g' (so that a longer magnitude sorts first).
 */
function encodeDecimal(d: Dec): string {
  if (d.isZero()) return '8';
  const digits = d.abs().toFixed().replace('.', '').replace(/^0+/, '').replace(/0+$/, '');
  const exponent = (d.e + 0x8000).toString(16).padStart(4, '0');
  const body = exponent + digits;
  if (d.isPositive()) return `9${body}`;
  return `7${[...body].map((c) => (15 - parseInt(c, 16)).toString(16)).join('')}g`;
}

/** Descending keys are stored complemented, with a terminator above every complemented character. */
export function encode(type: DataType, value: unknown, order: SortOrder): string {
  const asc = encodeAsc(type, value);
  if (order === 'ASC') return asc;
  let out = '';
  for (let i = 0; i < asc.length; i++) out += String.fromCharCode(0xff - asc.charCodeAt(i));
  return `${out}\u00f0`;
}

/** The key's text, for `like`. */
export function rawText(type: DataType, value: unknown): string {
  if (type === 'JSON') return JSON.stringify(celToJson(value));
  if (value instanceof Date) return value.toISOString();
  const n = intOf(value);
  return n !== undefined ? n.toString() : String(value);
}
