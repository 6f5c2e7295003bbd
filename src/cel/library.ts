import type { Environment } from '@marcbachmann/cel-js';
import { withScale } from '../decimal.js';
import { EngineError, quote } from '../errors.js';
import { checkJsonDepth } from '../json.js';
import { NAME_SHOWN_MAX } from '../limits.js';
import { type Cel, celError } from './cel.js';
import { CelDecimal, CelMoney, celToJson } from './values.js';

/*
 * The CEL library as a program calls it: `uuid.New()`, `date(t)`, `timestamp(s)`, `duration(s)`,
 * `strings.ToUpper(s)`, `decimal.Quo(a, b, 2)`, `t.getFullYear()` in a tool program are the CEL
 * environment's own functions, called through one door of the host bridge (op 'fn'). Nothing is
 * implemented twice: the table of what a program may call is read off the environment's
 * definitions, each call evaluates the CEL call expression the table makes for that name, and the
 * guest (sandbox/guest/library.js) builds its wrappers from the same table's names.
 */

/** A CEL function's signature as the environment lists it (getDefinitions().functions). */
export interface CelFunctionDefinition {
  signature: string;
  name: string;
  receiverType: string | null;
  params: Array<{ type: string }>;
}

/**
 * Where each CEL function is in a program: `program` names its program form (the door calls the
 * CEL function itself), `native` says which part of JavaScript or of the guest already is it.
 */
export type Placement = { program: string } | { native: string };

/** The types a program holds values of, as the program calls them. */
const RECEIVERS: Readonly<Record<string, string>> = {
  'google.protobuf.Timestamp': 'Timestamp',
  'google.protobuf.Duration': 'Duration',
};

/** Global CEL functions a program calls by the same name. */
const GLOBALS = new Set(['uuid', 'date', 'timestamp', 'duration']);

/** Standard CEL a program has as JavaScript's own, and why. */
const NATIVE_GLOBALS: Readonly<Record<string, string>> = {
  decimal: "the guest's decimal(x), which makes the program's Decimal (its CEL-named statics are the door's)",
  money: "the guest's money(units, currency), which makes the program's Money",
  dyn: 'JavaScript values are dynamic',
  type: 'typeof',
  bool: 'Boolean(x)',
  bytes: 'Uint8Array (a program passes one where CEL takes bytes)',
  double: 'Number(x)',
  int: 'Math.trunc / BigInt(x)',
  uint: 'Math.trunc / BigInt(x)',
  string: 'String(x) (a decimal prints exactly)',
  size: '.length',
  has: "the `in` operator and optional chaining (a macro's argument is an expression, not a value)",
};

/** Members of the standard CEL types, JavaScript's own methods in a program. */
const NATIVE_RECEIVERS: Readonly<Record<string, string>> = {
  string:
    "String.prototype (startsWith, endsWith, includes, indexOf, slice, split, toLowerCase...; CEL's lowerAscii/upperAscii change ASCII letters only, and matches is RE2)",
  bytes: 'Uint8Array',
  'list<dyn>': 'Array.prototype (length, every, some, map, filter: the macros take expressions)',
  'list<string>': 'Array.prototype.join',
  'map<dyn, dyn>': 'Object.keys(m).length',
  'optional<dyn>': 'optional chaining and ?? (no optional values in JavaScript)',
  'optional<A>': 'optional chaining and ?? (no optional values in JavaScript)',
  OptionalNamespace: 'optional chaining and ?? (no optional values in JavaScript)',
  CelNamespace: 'a const (cel.bind names a value in an expression)',
  Decimal: "the program's Decimal: d.toString()",
  Money: "the program's Money: m.currency, m.units",
};

/**
 * Operators on the types a program holds values of, as methods: CEL's `t + d`, `t - t`, `d + d`
 * and comparisons (JavaScript's operators would compute a number or text).
 */
const OPERATORS: ReadonlyArray<{ name: string; arity: number; expression: string }> = [
  ...['Timestamp', 'Duration'].flatMap((type) => [
    { name: `${type}.plus`, arity: 2, expression: 'a0 + a1' },
    { name: `${type}.minus`, arity: 2, expression: 'a0 - a1' },
    { name: `${type}.cmp`, arity: 2, expression: 'a0 < a1 ? -1 : (a0 == a1 ? 0 : 1)' },
  ]),
];

/** What a program may call by each name: the CEL expression of each arity it takes, and its parameters' types. */
export interface LibraryEntry {
  readonly expressions: ReadonlyMap<number, string>;
  /** The parameter types of each overload, the receiver first for a member. */
  readonly overloads: ReadonlyArray<readonly string[]>;
}

/** Which namespace constant (decimal, uuid, strings...) each namespace type is. */
function namespaceConstants(env: Environment): Map<string, string> {
  const constants = new Map<string, string>();
  const definitions = (
    env as unknown as { getDefinitions(): { variables: Array<{ name: string; type: string }> } }
  ).getDefinitions().variables;
  for (const variable of definitions) if (/Namespace$/.test(variable.type)) constants.set(variable.type, variable.name);
  return constants;
}

/** Every function the environment registers. */
export function celFunctions(env: Environment): CelFunctionDefinition[] {
  return (env as unknown as { getDefinitions(): { functions: CelFunctionDefinition[] } }).getDefinitions().functions;
}

/** Where `fn` is in a program; undefined for a function no rule here places (a test fails on it). */
export function placement(
  env: Environment,
  fn: CelFunctionDefinition,
  constants = namespaceConstants(env),
): Placement | undefined {
  const receiver = fn.receiverType;
  if (receiver === null) {
    if (GLOBALS.has(fn.name)) return { program: fn.name };
    return Object.hasOwn(NATIVE_GLOBALS, fn.name) ? { native: NATIVE_GLOBALS[fn.name]! } : undefined;
  }
  const constant = constants.get(receiver);
  if (constant !== undefined && !Object.hasOwn(NATIVE_RECEIVERS, receiver))
    return { program: `${constant}.${fn.name}` };
  if (Object.hasOwn(RECEIVERS, receiver)) return { program: `${RECEIVERS[receiver]}.${fn.name}` };
  return Object.hasOwn(NATIVE_RECEIVERS, receiver) ? { native: NATIVE_RECEIVERS[receiver]! } : undefined;
}

/** The table of what a program may call, read off the environment: built once per environment. */
const tables = new WeakMap<Environment, ReadonlyMap<string, LibraryEntry>>();

export function programLibrary(env: Environment): ReadonlyMap<string, LibraryEntry> {
  const known = tables.get(env);
  if (known) return known;
  const constants = namespaceConstants(env);
  const building = new Map<string, { expressions: Map<number, string>; overloads: string[][] }>();
  const entry = (name: string) => {
    let found = building.get(name);
    if (!found) building.set(name, (found = { expressions: new Map(), overloads: [] }));
    return found;
  };
  const args = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => `a${from + i}`).join(', ');
  for (const fn of celFunctions(env)) {
    const place = placement(env, fn, constants);
    if (place === undefined || !('program' in place)) continue;
    const params = fn.params.map((p) => p.type);
    const target = entry(place.program);
    if (fn.receiverType !== null && Object.hasOwn(RECEIVERS, fn.receiverType)) {
      // A member: the receiver is the program's first argument (the guest passes `this`).
      const arity = params.length + 1;
      target.expressions.set(arity, `a0.${fn.name}(${args(1, arity)})`);
      target.overloads.push([fn.receiverType, ...params]);
    } else {
      target.expressions.set(params.length, `${place.program}(${args(0, params.length)})`);
      target.overloads.push(params);
    }
  }
  for (const op of OPERATORS) {
    const target = entry(op.name);
    target.expressions.set(op.arity, op.expression);
    target.overloads.push(Array.from({ length: op.arity }, () => 'dyn'));
  }
  const table = new Map<string, LibraryEntry>(building);
  tables.set(env, table);
  return table;
}

/**
 * The names and parameter types the guest builds its wrappers from (the sandbox hands it to every
 * context as JSON): `{ "strings.ToUpper": [["string"]], "Timestamp.getFullYear": [[...], ...] }`.
 */
export function programLibraryJson(env: Environment): string {
  const out: Record<string, ReadonlyArray<readonly string[]>> = {};
  for (const [name, entry] of programLibrary(env)) out[name] = entry.overloads;
  return JSON.stringify(out);
}

/*
 * Values cross the door as tagged pairs, the same both ways, so a decimal, money, timestamp or
 * duration arrives as what it is (as JSON they would be strings and objects a function could not
 * tell from text): ["s", text], ["b", bool], ["f", double], ["i", "digits"] (an int), ["n"] (null),
 * ["d", "1.50"] (a decimal with its scale), ["m", "1.50", "USD"], ["t", RFC 3339], ["D", "90s"],
 * ["x", hex] (bytes), ["l", [pairs]] (a list). Decimals, money, timestamps and durations are made
 * by CEL's own constructors, so a pair a program forged is checked as a CEL literal would be.
 */
type Pair = [string, ...unknown[]];

const INT_TEXT = /^-?\d{1,20}$/;
const HEX_TEXT = /^(?:[0-9a-f]{2})*$/;

function decode(cel: Cel, pair: unknown): unknown {
  if (!Array.isArray(pair) || typeof pair[0] !== 'string') throw badValue(pair);
  const [tag, a, b] = pair;
  switch (tag) {
    case 's':
      if (typeof a === 'string') return a;
      break;
    case 'b':
      if (typeof a === 'boolean') return a;
      break;
    case 'f':
      if (typeof a === 'number') return a;
      break;
    case 'i':
      if (typeof a === 'string' && INT_TEXT.test(a)) return BigInt(a);
      break;
    case 'n':
      return null;
    case 'd':
      if (typeof a === 'string') return cel.evaluate('decimal(v)', { v: a });
      break;
    case 'm':
      if (typeof a === 'string' && typeof b === 'string') return cel.evaluate('money(v, c)', { v: a, c: b });
      break;
    case 't':
      if (typeof a === 'string') return cel.evaluate('timestamp(v)', { v: a });
      break;
    case 'D':
      if (typeof a === 'string') return cel.evaluate('duration(v)', { v: a });
      break;
    case 'x':
      if (typeof a === 'string' && HEX_TEXT.test(a)) return new Uint8Array(Buffer.from(a, 'hex'));
      break;
    case 'l':
      if (Array.isArray(a)) return a.map((item) => decode(cel, item));
      break;
  }
  throw badValue(pair);
}

function badValue(pair: unknown): EngineError {
  const text = JSON.stringify(pair) ?? String(pair);
  return new EngineError(
    'BAD_REQUEST',
    `a value passed to the CEL library is not one it takes: ${text.length > 80 ? `${text.slice(0, 77)}...` : text}`,
  );
}

/** A CEL result as the pair the guest turns into its value. */
function encode(value: unknown): Pair {
  if (value === null || value === undefined) return ['n'];
  switch (typeof value) {
    case 'string':
      return ['s', value];
    case 'boolean':
      return ['b', value];
    case 'number':
      return ['f', celToJson(value)];
    case 'bigint':
      return ['i', value.toString()];
  }
  if (value instanceof CelDecimal) return ['d', value.toString()];
  if (value instanceof CelMoney) return ['m', withScale(value.units, value.scale), value.currency];
  if (value instanceof Date) return ['t', celToJson(value)];
  if (value instanceof Uint8Array) return ['x', Buffer.from(value).toString('hex')];
  if (Array.isArray(value)) return ['l', value.map(encode)];
  const inner = (value as { valueOf(): unknown }).valueOf();
  if (typeof inner === 'bigint') return ['i', inner.toString()]; // a uint
  if ((value as { constructor?: { name?: string } }).constructor?.name === 'Duration') return ['D', String(value)];
  throw new EngineError('CEL_ERROR', `a CEL result of this type cannot reach a program: ${quote(String(value))}`);
}

/**
 * The door: call the library function `name` (a name of programLibrary, never an expression) with
 * the arguments the guest encoded, as CEL calls it. Each call is one CEL evaluation, under the
 * engine's cost budget (celCostMax) and the running request's deadline, as a cel() call is; it is
 * not a child call (no execution record), as decimal() is not. Returns the result's pair as JSON.
 */
export function callLibrary(cel: Cel, name: string, argsText: string, depthMax: number): string {
  const entry = programLibrary(cel.env).get(name);
  if (entry === undefined) {
    const shown = name.length > NAME_SHOWN_MAX ? `${name.slice(0, NAME_SHOWN_MAX)}… (${name.length} characters)` : name;
    throw new EngineError('NOT_FOUND', `${quote(shown)} is not a function of the CEL library`, {
      hint: 'A program has the CEL library under the names CEL gives it: uuid.New(), date(t), strings.ToUpper(s)...',
    });
  }
  let pairs: unknown;
  try {
    pairs = JSON.parse(argsText);
  } catch {
    throw new EngineError('BAD_REQUEST', `the arguments of ${name} are not JSON`);
  }
  if (!Array.isArray(pairs)) throw new EngineError('BAD_REQUEST', `the arguments of ${name} are not a list`);
  const expression = entry.expressions.get(pairs.length);
  if (expression === undefined) {
    const arities = [...entry.expressions.keys()].sort((a, b) => a - b);
    throw new EngineError(
      'CEL_ERROR',
      `${name} takes ${arities.join(' or ')} argument${arities.length === 1 && arities[0] === 1 ? '' : 's'}, got ${pairs.length}`,
      { hint: `As in CEL: ${entry.overloads.map((params) => `${name}(${params.join(', ')})`).join('; ')}.` },
    );
  }
  checkJsonDepth(pairs, depthMax, `the arguments a program passed to ${name}`);
  // The call is named as the program wrote it, not by its expression (a0, a1 are the door's).
  const shown = `${name}(${pairs.map(() => '…').join(', ')})`;
  try {
    return cel.scope(shown, () => {
      const bindings: Record<string, unknown> = {};
      pairs.forEach((pair, i) => {
        bindings[`a${i}`] = decode(cel, pair);
      });
      return JSON.stringify(encode(cel.compile(expression)(bindings)));
    });
  } catch (error) {
    throw renamed(celError(shown, error), expression, shown);
  }
}

/** An error that quotes the door's expression (a0, a1) quotes the call as the program wrote it. */
function renamed(error: EngineError, expression: string, shown: string): EngineError {
  if (!error.message.includes(expression)) return error;
  const details =
    error.details && typeof error.details === 'object'
      ? { ...(error.details as object), expression: shown }
      : error.details;
  return new EngineError(error.code, error.message.split(quote(expression)).join(quote(shown)), {
    hint: error.hint,
    details,
  });
}
