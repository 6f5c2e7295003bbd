import { celError } from '../cel/cel.js';
import { CelDecimal } from '../cel/values.js';
import { Dec } from '../decimal.js';
import { EngineError, limitExceeded, quote } from '../errors.js';
import { isReservedKey } from '../json.js';
import type { KeyCondition } from '../storage/statements/views.js';
import type { LedgerDeps } from './deps.js';
import {
  type DataType,
  DATA_TYPES,
  describe,
  encode,
  encodeAsc,
  rawText,
  type SortOrder,
  toTyped,
  type UintClass,
} from './typed-values.js';

/**
 * The keys of views and custom indexes: definitions checked and compiled (names, aliases, types,
 * CEL), a record's key computed (partition and sort columns), and a read's filters turned into the
 * partition it names and conditions on the sort columns.
 */

export type Compiled = (context?: Record<string, unknown>) => unknown;

const ALIAS = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
const NAME = /^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$/;
/** Sort columns in the tables (s0..s3): the bound behind indexKeysMax. */
const SORT_COLUMNS = 4;

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
