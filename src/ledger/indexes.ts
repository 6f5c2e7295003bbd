import { celError } from '../cel/cel.js';
import { CelDecimal, CelMoney, celToJson, jsonToCel } from '../cel/values.js';
import { Dec, scaleOf } from '../decimal.js';
import { EngineError, limitExceeded, quote } from '../errors.js';
import { isReservedKey } from '../json.js';
import { type Connection, encodeCursor, pageRequest } from '../paging.js';
import type { EntryRow, TransactionRow } from '../storage/statements/ledger.js';
import type { IndexRow, KeyCondition } from '../storage/statements/views.js';
import type { LedgerDeps } from './deps.js';
import { type CelDocument, entryDocument, transactionDocument } from './documents.js';
import { toEntry, toTransaction } from './transaction-records.js';
import type { Entry, Transaction } from './records.js';

// ---------------------------------------------------------------------------------------------
// Typed values, shared by views (document fields, keys) and custom indexes (keys).

export const DATA_TYPES = ['UUID', 'UInt', 'Int', 'String', 'Decimal', 'Boolean', 'Timestamp', 'Date', 'JSON'] as const;
export type DataType = (typeof DATA_TYPES)[number];
export type SortOrder = 'ASC' | 'DESC';

type Compiled = (context?: Record<string, unknown>) => unknown;

const UUID_TEXT = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const DATE_TEXT = /^\d{4}-\d{2}-\d{2}$/;
const ALIAS = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
const NAME = /^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$/;
const ZERO_TIME = '0001-01-01T00:00:00.000Z';
/** Sort columns in the tables (s0..s3): the bound behind indexKeysMax. */
const SORT_COLUMNS = 4;

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

function describe(value: unknown): string {
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
function encodeAsc(type: DataType, value: unknown): string {
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
function encode(type: DataType, value: unknown, order: SortOrder): string {
  const asc = encodeAsc(type, value);
  if (order === 'ASC') return asc;
  let out = '';
  for (let i = 0; i < asc.length; i++) out += String.fromCharCode(0xff - asc.charCodeAt(i));
  return `${out}\u00f0`;
}

/** The key's text, for `like`. */
function rawText(type: DataType, value: unknown): string {
  if (type === 'JSON') return JSON.stringify(celToJson(value));
  if (value instanceof Date) return value.toISOString();
  const n = intOf(value);
  return n !== undefined ? n.toString() : String(value);
}

// ---------------------------------------------------------------------------------------------
// Key definitions (views and indexes).

export interface KeyInput {
  alias: string;
  value: string;
  type?: DataType | null;
  sort?: SortOrder | null;
}

export interface CompiledKey {
  alias: string;
  value: string;
  type: DataType;
  sort: SortOrder;
  fn: Compiled;
}

/** Fields whose type is known, for keys that give none: `document.<field>` of an entry or a transaction. */
const ENTRY_FIELDS: Record<string, DataType> = {
  entry_id: 'UUID',
  transaction_id: 'UUID',
  account_id: 'UUID',
  journal_id: 'UUID',
  entry_type: 'String',
  layer: 'String',
  direction: 'String',
  units: 'Decimal',
  currency: 'String',
  sequence: 'Int',
  description: 'String',
  parent_account_ids: 'UUID',
  created: 'Timestamp',
  is_void_entry: 'Boolean',
  is_voided_entry: 'Boolean',
};
const TRANSACTION_FIELDS: Record<string, DataType> = {
  transaction_id: 'UUID',
  tran_code_id: 'UUID',
  tran_code_version: 'Int',
  journal_id: 'UUID',
  correlation_id: 'String',
  external_id: 'String',
  effective: 'Date',
  description: 'String',
  void_of: 'String',
  voided_by: 'String',
  created: 'Timestamp',
  modified: 'Timestamp',
};

export function badDefinition(message: string, hint?: string): EngineError {
  return new EngineError('BAD_REQUEST', message, { hint });
}

export function checkName(kind: string, name: unknown): string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw badDefinition(
      `${kind} name ${quote(name)} is not valid`,
      'Use 1-128 letters, digits, _ . : or -, starting with a letter, digit or _.',
    );
  }
  return name;
}

export function checkAlias(what: string, alias: unknown, seen: Set<string>): string {
  if (typeof alias !== 'string' || !ALIAS.test(alias) || isReservedKey(alias)) {
    throw badDefinition(
      `${what} alias ${quote(alias)} is not valid`,
      'An alias is an identifier: letters, digits and _, not starting with a digit, at most 64; not __proto__, constructor or prototype.',
    );
  }
  if (seen.has(alias))
    throw badDefinition(`${what} alias ${quote(alias)} is given twice`, 'Give each field and key its own alias.');
  seen.add(alias);
  return alias;
}

export function checkType(what: string, type: unknown): DataType {
  if (!DATA_TYPES.includes(type as DataType)) {
    throw badDefinition(`${what} has unknown type ${quote(type)}`, `Use one of ${DATA_TYPES.join(', ')}.`);
  }
  return type as DataType;
}

/** Compile CEL for a definition: a CEL_ERROR names the definition and the field. */
export function compileField(deps: LedgerDeps, what: string, expression: unknown): Compiled {
  if (typeof expression !== 'string' || expression.trim() === '') {
    throw badDefinition(`${what} needs a CEL expression, got ${quote(expression)}`);
  }
  try {
    return deps.cel.compile(expression);
  } catch (error) {
    const e = error instanceof EngineError ? error : celError(expression, error);
    throw new EngineError(e.code, `${what}: ${e.message}`, { hint: e.hint, details: e.details });
  }
}

/** Run a compiled field; its errors name the definition and the field. */
export function run(fn: Compiled, expression: string, what: string, context: Record<string, unknown>): unknown {
  try {
    return fn(context);
  } catch (error) {
    const e = celError(expression, error);
    throw new EngineError(e.code, `${what}: ${e.message}`, { hint: e.hint, details: e.details });
  }
}

/**
 * Compile the partition or sort keys of a definition (partition keys have no order). A key's type
 * is the one given, else that of the field it names (`document.<field>`, from `known`), else String.
 */
export function compileKeys(
  deps: LedgerDeps,
  what: string,
  keys: readonly KeyInput[] | null | undefined,
  isSort: boolean,
  known: Record<string, DataType>,
  seen: Set<string>,
): CompiledKey[] {
  const list = keys ?? [];
  if (!Array.isArray(list)) throw badDefinition(`${what}: ${isSort ? 'sort' : 'partition'} must be a list`);
  const max = Math.min(deps.limits.indexKeysMax, SORT_COLUMNS);
  if (list.length > max) {
    throw limitExceeded(
      'indexKeysMax',
      max,
      list.length,
      `${what} has ${list.length} ${isSort ? 'sort' : 'partition'} keys; indexKeysMax is ${max}`,
      {
        hint: 'Fold several values into one key (a string), or filter the rest on the client.',
      },
    );
  }
  return list.map((key) => {
    const alias = checkAlias(`${what} ${isSort ? 'sort' : 'partition'} key`, key?.alias, seen);
    const label = `${what} ${isSort ? 'sort' : 'partition'} key ${alias}`;
    const named = /^\s*document\.([A-Za-z_][A-Za-z0-9_]*)\s*$/.exec(String(key.value))?.[1];
    const type = key.type != null ? checkType(label, key.type) : (named && known[named]) || 'String';
    const sort = isSort ? (key.sort ?? 'ASC') : 'ASC';
    if (sort !== 'ASC' && sort !== 'DESC')
      throw badDefinition(`${label}: sort must be ASC or DESC, got ${quote(sort)}`);
    return { alias, value: key.value, type, sort, fn: compileField(deps, label, key.value) };
  });
}

/** A CEL map of named boolean expressions (filters, constraints): compiled, in name order. */
export function compileConditions(
  deps: LedgerDeps,
  what: string,
  map: unknown,
): Array<{ name: string; value: string; fn: Compiled }> {
  if (map == null) return [];
  if (typeof map !== 'object' || Array.isArray(map))
    throw badDefinition(`${what} must be a map of name to CEL expression`);
  const entries = Object.entries(map as Record<string, unknown>);
  if (entries.length > deps.limits.viewDocumentFieldsMax) {
    throw limitExceeded(
      'viewDocumentFieldsMax',
      deps.limits.viewDocumentFieldsMax,
      entries.length,
      `${what} has ${entries.length} expressions; viewDocumentFieldsMax is ${deps.limits.viewDocumentFieldsMax}`,
    );
  }
  return entries.map(([name, value]) => {
    if (!ALIAS.test(name) || isReservedKey(name))
      throw badDefinition(
        `${what} name ${quote(name)} is not valid`,
        'Use an identifier (not __proto__, constructor or prototype).',
      );
    return { name, value: value as string, fn: compileField(deps, `${what} ${name}`, value) };
  });
}

/** Whether every condition holds (each must be a bool). */
export function holds(
  conditions: ReadonlyArray<{ name: string; value: string; fn: Compiled }>,
  what: string,
  context: Record<string, unknown>,
): boolean {
  for (const c of conditions) {
    const result = run(c.fn, c.value, `${what} ${c.name}`, context);
    if (typeof result !== 'boolean') {
      throw new EngineError('CEL_ERROR', `${what} ${c.name} must be a bool, got ${describe(result)}`, {
        hint: 'Each condition is a CEL expression that returns true or false.',
      });
    }
    if (!result) return false;
  }
  return true;
}

/** A record's position in a view or an index: the partition (encoded list), sort and raw columns. */
export interface Key {
  pkey: string;
  s: [string, string, string, string];
  r: [string | null, string | null, string | null, string | null];
}

export function sortColumns(sort: readonly CompiledKey[], values: readonly unknown[]): Pick<Key, 's' | 'r'> {
  const s: Key['s'] = ['', '', '', ''];
  const r: Key['r'] = [null, null, null, null];
  sort.forEach((key, i) => {
    s[i] = encode(key.type, values[i], key.sort);
    r[i] = rawText(key.type, values[i]);
  });
  return { s, r };
}

export function partitionKey(partition: readonly CompiledKey[], values: readonly unknown[]): string {
  return JSON.stringify(partition.map((key, i) => encodeAsc(key.type, values[i])));
}

/** Evaluate a key to its typed CEL value. */
export function keyValue(key: CompiledKey, what: string, context: Record<string, unknown>, U: UintClass): unknown {
  const value = run(key.fn, key.value, `${what} key ${key.alias}`, context);
  return toTyped(key.type, value, `${what} key ${key.alias}`, U, true).cel;
}

// ---------------------------------------------------------------------------------------------
// Filters: FilterValue { eq | like | lt | lte | gt | gte | all | between } on keys.

export interface FilterValue {
  eq?: string | null;
  like?: string | null;
  lt?: string | null;
  lte?: string | null;
  gt?: string | null;
  gte?: string | null;
  all?: boolean | null;
  between?: { begin: string; end: string } | null;
}

export interface KeyFilter {
  alias: string;
  value: FilterValue;
}

/** A filter's text as a value of the key's type (it is compared with the stored encoding). */
function filterOperand(key: CompiledKey, text: unknown, what: string): unknown {
  const bad = () =>
    new EngineError('BAD_REQUEST', `${what}: ${quote(text)} is not a ${key.type} value`, {
      hint: `Key ${key.alias} holds ${key.type} values.`,
    });
  if (typeof text !== 'string') throw bad();
  try {
    switch (key.type) {
      case 'UInt':
      case 'Int':
        if (!/^-?\d+$/.test(text.trim())) throw bad();
        return BigInt(text.trim());
      case 'Decimal':
        return new CelDecimal(new Dec(text.trim()));
      case 'Boolean':
        if (text !== 'true' && text !== 'false') throw bad();
        return text === 'true';
      case 'Timestamp': {
        const t = new Date(text);
        if (Number.isNaN(t.getTime())) throw bad();
        return t;
      }
      case 'JSON':
        return JSON.parse(text);
      default:
        return text;
    }
  } catch (error) {
    if (error instanceof EngineError) throw error;
    throw bad();
  }
}

const FLIP = { '<': '>', '<=': '>=', '>': '<', '>=': '<=' } as const;

function sortConditions(
  sort: readonly CompiledKey[],
  filters: readonly KeyFilter[] | null | undefined,
  what: string,
): KeyCondition[] {
  const conditions: KeyCondition[] = [];
  for (const filter of filters ?? []) {
    const column = sort.findIndex((k) => k.alias === filter?.alias);
    if (column < 0) {
      throw new EngineError('BAD_REQUEST', `${what} has no sort key ${quote(filter?.alias)}`, {
        hint: `Its sort keys: ${sort.map((k) => k.alias).join(', ') || 'none'}.`,
      });
    }
    const key = sort[column]!;
    const label = `${what} sort key ${key.alias}`;
    const given = Object.entries(filter.value ?? {}).filter(([, v]) => v !== null && v !== undefined);
    if (given.length !== 1) {
      throw new EngineError(
        'BAD_REQUEST',
        `${label}: a FilterValue must hold exactly one of eq, like, lt, lte, gt, gte, all, between; got ${given.length}`,
      );
    }
    const [op, operand] = given[0]!;
    const cmp = (sqlOp: '=' | '<' | '<=' | '>' | '>=', text: unknown) => {
      const value = encode(key.type, filterOperand(key, text, label), key.sort);
      conditions.push({ column, op: key.sort === 'DESC' && sqlOp !== '=' ? FLIP[sqlOp] : sqlOp, value });
    };
    switch (op) {
      case 'eq':
        cmp('=', operand);
        break;
      case 'lt':
        cmp('<', operand);
        break;
      case 'lte':
        cmp('<=', operand);
        break;
      case 'gt':
        cmp('>', operand);
        break;
      case 'gte':
        cmp('>=', operand);
        break;
      case 'between': {
        const range = operand as { begin: string; end: string };
        cmp('>=', range.begin);
        cmp('<=', range.end);
        break;
      }
      case 'like':
        if (typeof operand !== 'string') throw new EngineError('BAD_REQUEST', `${label}: like takes a string`);
        conditions.push({ column, op: 'LIKE', value: operand });
        break;
      case 'all':
        break;
      default:
        throw new EngineError('BAD_REQUEST', `${label}: unknown filter ${quote(op)}`);
    }
  }
  return conditions;
}

/** The partition every read names: each partition key with eq. */
function partitionOf(
  partition: readonly CompiledKey[],
  filters: readonly KeyFilter[] | null | undefined,
  what: string,
): string {
  const values = partition.map((key) => {
    const filter = (filters ?? []).find((f) => f?.alias === key.alias);
    const eq = filter?.value?.eq;
    const others = filter
      ? Object.entries(filter.value ?? {}).filter(([k, v]) => k !== 'eq' && v !== null && v !== undefined)
      : [];
    if (eq === null || eq === undefined || others.length > 0) {
      throw new EngineError('BAD_REQUEST', `${what}: partition key ${key.alias} needs an eq filter`, {
        hint: `Every read goes through the index: give each partition key (${partition.map((k) => k.alias).join(', ')}) with eq.`,
      });
    }
    return filterOperand(key, eq, `${what} partition key ${key.alias}`);
  });
  for (const f of filters ?? []) {
    if (!partition.some((k) => k.alias === f?.alias))
      throw new EngineError('BAD_REQUEST', `${what} has no partition key ${quote(f?.alias)}`);
  }
  return partitionKey(partition, values);
}

export interface KeyQuery {
  pkey: string;
  conditions: KeyCondition[];
}

export function keyQuery(
  what: string,
  partition: readonly CompiledKey[],
  sort: readonly CompiledKey[],
  where: { partition?: KeyFilter[] | null; sort?: KeyFilter[] | null },
): KeyQuery {
  return { pkey: partitionOf(partition, where.partition, what), conditions: sortConditions(sort, where.sort, what) };
}

// ---------------------------------------------------------------------------------------------
// Custom indexes.

export type IndexOn = 'Entry' | 'Transaction';

export interface IndexInput {
  name: string;
  on: IndexOn;
  unique?: boolean | null;
  partition: KeyInput[];
  sort?: KeyInput[] | null;
  constraints?: Record<string, string> | null;
}

export interface CompiledIndex {
  indexId: string;
  name: string;
  on: IndexOn;
  unique: boolean;
  partition: CompiledKey[];
  sort: CompiledKey[];
  constraints: Array<{ name: string; value: string; fn: Compiled }>;
  row: IndexRow;
}

export interface IndexRecord {
  indexId: string;
  name: string;
  on: IndexOn;
  unique: boolean;
  partition: Array<{ alias: string; value: string; type: DataType }>;
  sort: Array<{ alias: string; value: string; type: DataType; sort: SortOrder }>;
  constraints: Record<string, string>;
  version: number;
  created: string;
  modified: string;
}

export function compileIndex(deps: LedgerDeps, input: IndexInput, row?: IndexRow): CompiledIndex {
  const name = checkName('index', input?.name);
  if (input.on !== 'Entry' && input.on !== 'Transaction') {
    throw badDefinition(
      `index ${name}: on must be Entry or Transaction, got ${quote(input.on)}`,
      'Custom indexes cover entries and transactions.',
    );
  }
  const what = `index ${name} on ${input.on}`;
  const known = input.on === 'Entry' ? ENTRY_FIELDS : TRANSACTION_FIELDS;
  const seen = new Set<string>();
  const partition = compileKeys(deps, what, input.partition, false, known, seen);
  if (partition.length === 0)
    throw badDefinition(
      `${what} needs at least one partition key`,
      'Every read names a partition: e.g. { alias: "account", value: "document.account_id" }.',
    );
  const sort = compileKeys(deps, what, input.sort, true, known, seen);
  const constraints = compileConditions(deps, `${what} constraint`, input.constraints);
  return {
    indexId: row?.index_id ?? '',
    name,
    on: input.on,
    unique: input.unique === true,
    partition,
    sort,
    constraints,
    row: row!,
  };
}

export function indexRecord(row: IndexRow): IndexRecord {
  const def = JSON.parse(row.definition) as {
    unique: boolean;
    partition: IndexRecord['partition'];
    sort: IndexRecord['sort'];
    constraints: Record<string, string>;
  };
  return {
    indexId: row.index_id,
    name: row.name,
    on: row.on_entity as IndexOn,
    unique: def.unique,
    partition: def.partition,
    sort: def.sort,
    constraints: def.constraints,
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

/** Write a record's rows in one index (after removing its old ones when it is an update). */
export function indexOne(
  deps: LedgerDeps,
  index: CompiledIndex,
  doc: CelDocument,
  recordId: string,
  seq: number,
  update: boolean,
  U: UintClass,
): void {
  const st = deps.views;
  if (update) st.deleteIndexRowsOf.run(index.indexId, recordId);
  const what = `index ${index.name}`;
  const context = { document: doc };
  if (!holds(index.constraints, `${what} constraint`, context)) return;
  // Each partition key may give a list: one row per combination.
  let combos: unknown[][] = [[]];
  for (const key of index.partition) {
    const value = run(key.fn, key.value, `${what} partition key ${key.alias}`, context);
    const elements = Array.isArray(value) ? value : [value];
    const next: unknown[][] = [];
    for (const combo of combos) {
      for (const element of elements)
        next.push([...combo, toTyped(key.type, element, `${what} partition key ${key.alias}`, U, true).cel]);
    }
    if (next.length > deps.limits.indexRowsPerRecordMax) {
      throw limitExceeded(
        'indexRowsPerRecordMax',
        deps.limits.indexRowsPerRecordMax,
        next.length,
        `${what}: record ${recordId} would have ${next.length} rows; indexRowsPerRecordMax is ${deps.limits.indexRowsPerRecordMax}`,
        {
          hint: 'Make the partition expression return a shorter list.',
        },
      );
    }
    combos = next;
  }
  const sortValues = index.sort.map((key) => keyValue(key, what, context, U));
  const { s, r } = sortColumns(index.sort, sortValues);
  const done = new Set<string>();
  for (const combo of combos) {
    const pkey = partitionKey(index.partition, combo);
    if (done.has(pkey)) continue;
    done.add(pkey);
    if (index.unique) {
      const holder = st.indexKeyHolder.get(index.indexId, pkey, s[0], s[1], s[2], s[3], recordId);
      if (holder !== undefined) {
        throw new EngineError(
          'ALREADY_EXISTS',
          `unique index ${index.name} on ${index.on} already holds this key, for ${index.on === 'Entry' ? 'entry' : 'transaction'} ${holder}`,
          {
            hint: 'The index is unique: two records cannot share a key.',
            details: { index: index.name, recordId: holder },
          },
        );
      }
    }
    st.insertIndexRow.run({
      index_id: index.indexId,
      pkey,
      s0: s[0],
      s1: s[1],
      s2: s[2],
      s3: s[3],
      r0: r[0],
      r1: r[1],
      r2: r[2],
      r3: r[3],
      seq,
      record_id: recordId,
    });
  }
}

/** Index what exists when an index is created: at most indexBackfillMax records, or nothing. */
export function backfill(deps: LedgerDeps, index: CompiledIndex, U: UintClass): void {
  const st = deps.views;
  const max = deps.limits.indexBackfillMax;
  const existing = index.on === 'Entry' ? st.entriesBeyond.get(max + 1)! : st.transactionsBeyond.get(max + 1)!;
  if (existing > max) {
    throw limitExceeded(
      'indexBackfillMax',
      max,
      existing,
      `index ${index.name}: more than indexBackfillMax (${max}) ${index.on === 'Entry' ? 'entries' : 'transactions'} exist to index`,
      {
        hint: 'Create indexes before the data grows, or raise indexBackfillMax for a maintenance window.',
      },
    );
  }
  let after = 0;
  const flags = new Map<string, { void_of: string | null; voided_by: string | null }>();
  for (;;) {
    const rows = (index.on === 'Entry'
      ? st.entriesAfter.all(after, 500)
      : st.transactionsAfter.all(after, 500)) as unknown as Array<EntryRow | TransactionRow>;
    if (rows.length === 0) return;
    for (const row of rows) {
      if (index.on === 'Entry') {
        const entry = row as EntryRow;
        let txn = flags.get(entry.transaction_id);
        if (!txn) {
          txn = st.transactionOfEntry.get(entry.transaction_id) ?? { void_of: null, voided_by: null };
          if (flags.size > 1000) flags.clear();
          flags.set(entry.transaction_id, txn);
        }
        indexOne(deps, index, entryDocument(entry, txn), entry.entry_id, entry.seq, false, U);
      } else {
        const txn = row as TransactionRow;
        indexOne(deps, index, transactionDocument(txn), txn.transaction_id, txn.seq, false, U);
      }
    }
    after = rows.at(-1)!.seq;
  }
}

// ---------------------------------------------------------------------------------------------
// Reads through a custom index: Query.entries / Query.transactions (where.custom).

export interface CustomFilter {
  index: string;
  partition?: KeyFilter[] | null;
  sort?: KeyFilter[] | null;
}

function indexPage<T>(
  deps: LedgerDeps,
  index: CompiledIndex,
  filter: CustomFilter,
  first: number,
  after: string | null | undefined,
  toNode: (row: never) => T,
): Connection<T> {
  const req = pageRequest<string>(first, after, deps.limits.pageSizeMax, 'string', `index:${index.on}:${index.name}`);
  let cursor: Array<string | number> | undefined;
  if (req.after !== undefined) {
    try {
      cursor = JSON.parse(req.after) as Array<string | number>;
    } catch {
      cursor = undefined;
    }
    if (!Array.isArray(cursor) || cursor.length !== 5)
      throw new EngineError('BAD_REQUEST', 'the cursor is not one of this index', {
        hint: 'Pass pageInfo.endCursor as after.',
      });
  }
  const query = keyQuery(`index ${index.name}`, index.partition, index.sort, filter);
  const rows = deps.views.indexPage(index.on, index.indexId, query.pkey, query.conditions, cursor, req.fetch);
  const page = rows.slice(0, req.first);
  const edges = page.map((row) => {
    const { _s0, _s1, _s2, _s3, _seq, ...record } = row;
    return {
      cursor: encodeCursor(req.kind, JSON.stringify([_s0, _s1, _s2, _s3, _seq])),
      node: toNode(record as never),
    };
  });
  return {
    nodes: edges.map((e) => e.node),
    edges,
    pageInfo: {
      hasNextPage: rows.length > req.first,
      hasPreviousPage: req.after !== undefined,
      startCursor: edges[0]?.cursor ?? null,
      endCursor: edges.at(-1)?.cursor ?? null,
    },
  };
}

export function findIndex(deps: LedgerDeps, name: string, on: IndexOn): CompiledIndex {
  const row = deps.views.indexByName.get(name, on);
  if (!row)
    throw new EngineError('NOT_FOUND', `index ${quote(name)} on ${on} does not exist`, {
      hint: 'List indexes with schema { indexes(first:) }.',
    });
  const record = indexRecord(row);
  return compileIndex(
    deps,
    {
      name: record.name,
      on: record.on,
      unique: record.unique,
      partition: record.partition,
      sort: record.sort,
      constraints: record.constraints,
    },
    row,
  );
}

export function entriesByIndex(
  deps: LedgerDeps,
  filter: CustomFilter,
  first: number,
  after?: string | null,
): Connection<Entry> {
  return indexPage(deps, findIndex(deps, filter.index, 'Entry'), filter, first, after, (row: EntryRow) => toEntry(row));
}

export function transactionsByIndex(
  deps: LedgerDeps,
  filter: CustomFilter,
  first: number,
  after?: string | null,
): Connection<Transaction> {
  return indexPage(deps, findIndex(deps, filter.index, 'Transaction'), filter, first, after, (row: TransactionRow) =>
    toTransaction(row),
  );
}
