import { randomUUID } from 'node:crypto';
import type { Decimal } from 'decimal.js';
import { Environment } from '@marcbachmann/cel-js';
import { type Clock, utcDate } from '../clock.js';
import {
  Dec,
  exactDecimal,
  scaleOf,
  exactDiv,
  exactMinus,
  exactPlus,
  exactTimes,
  parseCurrency,
  roundedQuotient,
} from '../decimal.js';
import { EngineError, quote } from '../errors.js';
import { nameBasedUuid as namedUuid } from '../ids.js';
import {
  CelDecimal,
  CelMoney,
  DateNamespace,
  DecimalNamespace,
  MoneyNamespace,
  StringsNamespace,
  TimeNamespace,
  UuidNamespace,
} from './values.js';

const ROUNDING_MODES: Record<string, Decimal.Rounding> = {
  half_even: Dec.ROUND_HALF_EVEN,
  half_up: Dec.ROUND_HALF_UP,
  half_down: Dec.ROUND_HALF_DOWN,
  up: Dec.ROUND_UP,
  down: Dec.ROUND_DOWN,
  ceiling: Dec.ROUND_CEIL,
  floor: Dec.ROUND_FLOOR,
};

function roundingMode(mode: string): Decimal.Rounding {
  const found = Object.hasOwn(ROUNDING_MODES, mode.toLowerCase()) ? ROUNDING_MODES[mode.toLowerCase()] : undefined;
  if (found === undefined) {
    throw new EngineError('CEL_ERROR', `rounding mode ${quote(mode)} is not known`, {
      hint: `Use one of ${Object.keys(ROUNDING_MODES).join(', ')}.`,
    });
  }
  return found;
}

function toDec(text: string): Dec {
  if (!/^[+-]?\d+(\.\d+)?$/.test(text.trim())) {
    throw new EngineError('CEL_ERROR', `decimal(${quote(text)}): not a decimal number`, {
      hint: 'Pass digits with an optional sign and decimal point, e.g. decimal("10.25").',
    });
  }
  return exactDecimal(text.trim());
}

function currency(code: string): string {
  try {
    return parseCurrency(code);
  } catch (error) {
    throw new EngineError('CEL_ERROR', (error as Error).message, { hint: (error as EngineError).hint });
  }
}

function places(n: bigint): number {
  if (n < 0n || n > 64n) throw new EngineError('CEL_ERROR', `decimal places ${n} must be between 0 and 64`);
  return Number(n);
}

function sameCurrency(a: CelMoney, b: CelMoney, op: string): void {
  if (a.currency !== b.currency) {
    throw new EngineError('CEL_ERROR', `cannot ${op} ${a.currency} and ${b.currency}`, {
      hint: 'Money arithmetic needs one currency; convert first.',
    });
  }
}

const dec = (d: Dec, scale?: number) => new CelDecimal(d, scale);

/** The scale of a result of + or −: the larger of the operands'. */
const wider = (a: { scale: number }, b: { scale: number }) => Math.max(a.scale, b.scale);

/** `uint` values reach host functions as the library's UnsignedInteger (valueOf() is a bigint). */
function uintValue(value: unknown): bigint {
  const inner = typeof value === 'bigint' ? value : (value as { valueOf(): unknown })?.valueOf?.();
  if (typeof inner === 'bigint') return inner;
  if (typeof inner === 'number' && Number.isInteger(inner)) return BigInt(inner);
  throw new EngineError('CEL_ERROR', `expected an unsigned integer, got ${quote(String(value))}`);
}

const UUID_TEXT = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function uuidText(s: string): string {
  if (!UUID_TEXT.test(s)) {
    throw new EngineError('CEL_ERROR', `uuid(${quote(s)}): not a UUID`, {
      hint: "Write it as 8-4-4-4-12 hex digits, e.g. uuid('6c6affb0-5cf5-402b-8d84-01bfc1624a2c').",
    });
  }
  return s.toLowerCase();
}

/** RFC 4122 name-based UUIDs (see nameBasedUuid in src/ids.ts), with the namespace checked as CEL's uuid() does. */
function nameBasedUuid(algorithm: 'md5' | 'sha1', version: number, namespace: string, name: Uint8Array): string {
  return namedUuid(algorithm, version, uuidText(namespace), name);
}

function nameBytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  if (typeof value === 'string') return Buffer.from(value, 'utf8');
  throw new EngineError('CEL_ERROR', `a UUID name must be bytes or a string, got ${quote(String(value))}`);
}

/**
 * The one CEL environment of the engine: standard CEL plus exact `Decimal` and `Money` types with
 * operators, and the `decimal.*`, `money.*`, `uuid.*`, `date.*`, `time.*`, `strings.*` namespaces.
 * Variables not declared here are dynamic: each use site passes its own (params, vars, document...).
 */
export function createCelEnvironment(clock: Clock, limits: { maxAstNodes: number }): Environment {
  const env = new Environment({
    unlistedVariablesAreDyn: true,
    homogeneousAggregateLiterals: false,
    enableOptionalTypes: true,
    limits: {
      maxAstNodes: limits.maxAstNodes,
      maxDepth: 100,
      maxListElements: 1000,
      maxMapEntries: 1000,
      maxCallArguments: 32,
    },
  });

  env
    .registerType('Decimal', CelDecimal)
    .registerType('Money', CelMoney)
    .registerType('DecimalNamespace', DecimalNamespace)
    .registerType('MoneyNamespace', MoneyNamespace)
    .registerType('UuidNamespace', UuidNamespace)
    .registerType('DateNamespace', DateNamespace)
    .registerType('TimeNamespace', TimeNamespace)
    .registerType('StringsNamespace', StringsNamespace)
    .registerConstant('decimal', 'DecimalNamespace', new DecimalNamespace())
    .registerConstant('money', 'MoneyNamespace', new MoneyNamespace())
    .registerConstant('uuid', 'UuidNamespace', new UuidNamespace())
    .registerConstant('date', 'DateNamespace', new DateNamespace())
    .registerConstant('time', 'TimeNamespace', new TimeNamespace())
    .registerConstant('strings', 'StringsNamespace', new StringsNamespace())
    // Enum words usable bare in templates; integer forms (DEBIT = 0, SETTLED = 0, ...) are accepted
    // where a direction or layer is expected.
    .registerConstant('DEBIT', 'string', 'DEBIT')
    .registerConstant('CREDIT', 'string', 'CREDIT')
    .registerConstant('SETTLED', 'string', 'SETTLED')
    .registerConstant('PENDING', 'string', 'PENDING')
    .registerConstant('ENCUMBRANCE', 'string', 'ENCUMBRANCE');

  // Constructors.
  env
    .registerFunction('decimal(string): Decimal', (s: string) => dec(toDec(s), scaleOf(s.trim())))
    .registerFunction('decimal(int): Decimal', (i: bigint) => dec(new Dec(i.toString())))
    .registerFunction('decimal(double): Decimal', (d: number) => {
      if (!Number.isFinite(d)) throw new EngineError('CEL_ERROR', `decimal(${d}): not a finite number`);
      if (!Number.isSafeInteger(d)) {
        // Doubles reach here from double arithmetic (0.1 + 0.2 is 0.30000000000000004): only whole
        // numbers up to 2^53 are taken as they are.
        throw new EngineError(
          'CEL_ERROR',
          `decimal(${d}): a double with a fraction, or beyond 2^53, is not taken as an amount`,
          { hint: `Write it as a string: decimal('${d}'), or keep the value a decimal throughout.` },
        );
      }
      return dec(new Dec(String(d)));
    })
    .registerFunction('decimal(Decimal): Decimal', (d: CelDecimal) => d)
    .registerFunction('decimal(Money): Decimal', (m: CelMoney) => dec(m.units, m.scale))
    .registerFunction(
      'money(Decimal, string): Money',
      (d: CelDecimal, c: string) => new CelMoney(d.value, currency(c), d.scale),
    )
    .registerFunction(
      'money(string, string): Money',
      (s: string, c: string) => new CelMoney(toDec(s), currency(c), scaleOf(s.trim())),
    )
    .registerFunction(
      'money(int, string): Money',
      (i: bigint, c: string) => new CelMoney(new Dec(i.toString()), currency(c)),
    )
    .registerFunction('string(Decimal): string', (d: CelDecimal) => d.toString())
    .registerFunction('string(Money): string', (m: CelMoney) => m.toString())
    .registerFunction('double(Decimal): double', (d: CelDecimal) => d.value.toNumber());

  // Decimal operators, with ints mixing in where the meaning is exact.
  // Each with the scale of its result: + and − the larger operand scale, × their sum, ÷ the exact quotient's.
  const arith: Array<[string, (a: Dec, b: Dec) => Dec, (a: number, b: number) => number | undefined]> = [
    ['+', exactPlus, Math.max],
    ['-', exactMinus, Math.max],
    ['*', exactTimes, (a, b) => a + b],
    [
      '/',
      (a, b) => {
        if (b.isZero()) throw new EngineError('CEL_ERROR', 'division by zero');
        return exactDiv(a, b);
      },
      () => undefined,
    ],
  ];
  for (const [op, fn, scale] of arith) {
    env.registerOperator(`Decimal ${op} Decimal`, (a: CelDecimal, b: CelDecimal) =>
      dec(fn(a.value, b.value), scale(a.scale, b.scale)),
    );
    env.registerOperator(`Decimal ${op} int`, (a: CelDecimal, b: bigint) =>
      dec(fn(a.value, new Dec(b.toString())), scale(a.scale, 0)),
    );
    env.registerOperator(`int ${op} Decimal`, (a: bigint, b: CelDecimal) =>
      dec(fn(new Dec(a.toString()), b.value), scale(0, b.scale)),
    );
  }
  const compare: Array<[string, (c: number) => boolean]> = [
    ['<', (c) => c < 0],
    ['<=', (c) => c <= 0],
    ['>', (c) => c > 0],
    ['>=', (c) => c >= 0],
  ];
  for (const [op, test] of compare) {
    env.registerOperator(`Decimal ${op} Decimal`, (a: CelDecimal, b: CelDecimal) => test(a.value.cmp(b.value)));
    env.registerOperator(`Decimal ${op} int`, (a: CelDecimal, b: bigint) => test(a.value.cmp(b.toString())));
    env.registerOperator(`int ${op} Decimal`, (a: bigint, b: CelDecimal) => test(new Dec(a.toString()).cmp(b.value)));
    env.registerOperator(`Money ${op} Money`, (a: CelMoney, b: CelMoney) => {
      sameCurrency(a, b, 'compare');
      return test(a.units.cmp(b.units));
    });
  }
  // Equality: the library derives `!=` and the mirrored `int == Decimal` itself.
  env
    .registerOperator('Decimal == Decimal', (a: CelDecimal, b: CelDecimal) => a.value.eq(b.value))
    .registerOperator('Decimal == int', (a: CelDecimal, b: bigint) => a.value.eq(b.toString()))
    .registerOperator('Money == Money', (a: CelMoney, b: CelMoney) => a.currency === b.currency && a.units.eq(b.units));
  env
    .registerOperator('-Decimal', (a: CelDecimal) => dec(a.value.neg(), a.scale))
    .registerOperator('Money + Money', (a: CelMoney, b: CelMoney) => {
      sameCurrency(a, b, 'add');
      return new CelMoney(exactPlus(a.units, b.units), a.currency, wider(a, b));
    })
    .registerOperator('Money - Money', (a: CelMoney, b: CelMoney) => {
      sameCurrency(a, b, 'subtract');
      return new CelMoney(exactMinus(a.units, b.units), a.currency, wider(a, b));
    });

  // decimal.* namespace (names as in the reference ledger's CEL).
  const D = 'DecimalNamespace';
  env
    .registerFunction(`${D}.Add(Decimal, Decimal): Decimal`, (_: unknown, a: CelDecimal, b: CelDecimal) =>
      dec(exactPlus(a.value, b.value), wider(a, b)),
    )
    .registerFunction(`${D}.Sub(Decimal, Decimal): Decimal`, (_: unknown, a: CelDecimal, b: CelDecimal) =>
      dec(exactMinus(a.value, b.value), wider(a, b)),
    )
    .registerFunction(`${D}.Mul(Decimal, Decimal): Decimal`, (_: unknown, a: CelDecimal, b: CelDecimal) =>
      dec(exactTimes(a.value, b.value), a.scale + b.scale),
    );
  // Quo and Round take their places as an int or (as the reference's examples write it) a uint.
  for (const t of ['int', 'uint']) {
    env
      .registerFunction(
        `${D}.Quo(Decimal, Decimal, ${t}): Decimal`,
        (_: unknown, a: CelDecimal, b: CelDecimal, p: unknown) => {
          const n = places(uintValue(p));
          return dec(roundedQuotient(a.value, b.value, n), n);
        },
      )
      .registerFunction(
        `${D}.Round(Decimal, string, ${t}): Decimal`,
        (_: unknown, d: CelDecimal, mode: string, p: unknown) =>
          dec(d.value.toDecimalPlaces(places(uintValue(p)), roundingMode(mode)), places(uintValue(p))),
      );
  }
  env
    .registerFunction(`${D}.Abs(Decimal): Decimal`, (_: unknown, d: CelDecimal) => dec(d.value.abs(), d.scale))
    .registerFunction(`${D}.Neg(Decimal): Decimal`, (_: unknown, d: CelDecimal) => dec(d.value.neg(), d.scale))
    .registerFunction(`${D}.Ceil(Decimal): Decimal`, (_: unknown, d: CelDecimal) => dec(d.value.ceil()))
    .registerFunction(`${D}.Floor(Decimal): Decimal`, (_: unknown, d: CelDecimal) => dec(d.value.floor()))
    .registerFunction(`${D}.Cmp(Decimal, Decimal): int`, (_: unknown, a: CelDecimal, b: CelDecimal) =>
      BigInt(a.value.cmp(b.value)),
    )
    .registerFunction(`${D}.Reduce(Decimal): Decimal`, (_: unknown, d: CelDecimal) => dec(new Dec(d.value.toFixed())));

  const M = 'MoneyNamespace';
  env
    .registerFunction(`${M}.Add(Money, Money): Money`, (_: unknown, a: CelMoney, b: CelMoney) => {
      sameCurrency(a, b, 'add');
      return new CelMoney(exactPlus(a.units, b.units), a.currency, wider(a, b));
    })
    .registerFunction(`${M}.Sub(Money, Money): Money`, (_: unknown, a: CelMoney, b: CelMoney) => {
      sameCurrency(a, b, 'subtract');
      return new CelMoney(exactMinus(a.units, b.units), a.currency, wider(a, b));
    })
    .registerFunction(
      `${M}.Mul(Money, string): Money`,
      (_: unknown, m: CelMoney, f: string) =>
        new CelMoney(exactTimes(m.units, toDec(f)), m.currency, m.scale + scaleOf(f.trim())),
    )
    .registerFunction('Money.currency(): string', (m: CelMoney) => m.currency)
    .registerFunction('Money.decimal(): Decimal', (m: CelMoney) => dec(m.units, m.scale))
    .registerFunction('Decimal.toString(): string', (d: CelDecimal) => d.toString())
    // A UUID is a string in this CEL; `transaction_id.toString()` (the reference's spelling) is the string itself.
    .registerFunction('string.toString(): string', (s: string) => s);

  env
    .registerFunction('uuid(string): string', (s: string) => uuidText(s))
    .registerFunction('UuidNamespace.New(): string', () => randomUUID())
    .registerFunction('UuidNamespace.NewSHA1(string, bytes): string', (_: unknown, ns: string, name: Uint8Array) =>
      nameBasedUuid('sha1', 5, ns, nameBytes(name)),
    )
    .registerFunction('UuidNamespace.NewSHA1(string, string): string', (_: unknown, ns: string, name: string) =>
      nameBasedUuid('sha1', 5, ns, nameBytes(name)),
    )
    .registerFunction('UuidNamespace.NewMD5(string, bytes): string', (_: unknown, ns: string, name: Uint8Array) =>
      nameBasedUuid('md5', 3, ns, nameBytes(name)),
    )
    .registerFunction('UuidNamespace.NewMD5(string, string): string', (_: unknown, ns: string, name: string) =>
      nameBasedUuid('md5', 3, ns, nameBytes(name)),
    )
    .registerFunction('DateNamespace.Today(): string', () => utcDate(clock.now()))
    // Dates are YYYY-MM-DD strings in this CEL: date(timestamp) is its UTC date, date(string) checks one.
    .registerFunction('date(google.protobuf.Timestamp): string', (t: Date) => {
      if (Number.isNaN(t.getTime()))
        throw new EngineError('CEL_ERROR', 'date(timestamp): the timestamp is out of range');
      return utcDate(t);
    })
    .registerFunction('date(string): string', (s: string) => {
      const d = /^\d{4}-\d{2}-\d{2}$/.test(s) ? new Date(`${s}T00:00:00Z`) : null;
      if (!d || Number.isNaN(d.getTime()) || d.toISOString().slice(0, 10) !== s) {
        throw new EngineError('CEL_ERROR', `date(${quote(s)}): not a date YYYY-MM-DD`, {
          hint: "Write dates as YYYY-MM-DD, e.g. date('2026-01-31').",
        });
      }
      return s;
    })
    .registerFunction('TimeNamespace.Now(): google.protobuf.Timestamp', () => clock.now());

  const S = 'StringsNamespace';
  env
    .registerFunction(`${S}.ToUpper(string): string`, (_: unknown, s: string) => s.toUpperCase())
    .registerFunction(`${S}.ToLower(string): string`, (_: unknown, s: string) => s.toLowerCase())
    .registerFunction(`${S}.TrimSpace(string): string`, (_: unknown, s: string) => s.trim())
    .registerFunction(`${S}.Contains(string, string): bool`, (_: unknown, s: string, t: string) => s.includes(t))
    .registerFunction(`${S}.HasPrefix(string, string): bool`, (_: unknown, s: string, t: string) => s.startsWith(t))
    .registerFunction(`${S}.HasSuffix(string, string): bool`, (_: unknown, s: string, t: string) => s.endsWith(t))
    .registerFunction(
      `${S}.ReplaceAll(string, string, string): string`,
      (_: unknown, s: string, a: string, b: string) => s.split(a).join(b),
    );

  return env;
}
