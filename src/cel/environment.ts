import { randomUUID } from 'node:crypto';
import type { Decimal } from 'decimal.js';
import { Environment } from '@marcbachmann/cel-js';
import { type Clock, utcDate } from '../clock.js';
import { Dec, exactDecimal, exactDiv, exactMinus, exactPlus, exactTimes, parseCurrency } from '../decimal.js';
import { EngineError, quote } from '../errors.js';
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

const dec = (d: Dec) => new CelDecimal(d);

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
    limits: { maxAstNodes: limits.maxAstNodes, maxDepth: 100, maxListElements: 1000, maxMapEntries: 1000, maxCallArguments: 32 },
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
    .registerFunction('decimal(string): Decimal', (s: string) => dec(toDec(s)))
    .registerFunction('decimal(int): Decimal', (i: bigint) => dec(new Dec(i.toString())))
    .registerFunction('decimal(double): Decimal', (d: number) => {
      if (!Number.isFinite(d)) throw new EngineError('CEL_ERROR', `decimal(${d}): not a finite number`);
      if (!Number.isSafeInteger(d)) {
        // Doubles reach here from double arithmetic (0.1 + 0.2 is 0.30000000000000004): only whole
        // numbers up to 2^53 are taken as they are.
        throw new EngineError('CEL_ERROR', `decimal(${d}): a double with a fraction, or beyond 2^53, is not taken as an amount`, { hint: `Write it as a string: decimal('${d}'), or keep the value a decimal throughout.` });
      }
      return dec(new Dec(String(d)));
    })
    .registerFunction('decimal(Decimal): Decimal', (d: CelDecimal) => d)
    .registerFunction('decimal(Money): Decimal', (m: CelMoney) => dec(m.units))
    .registerFunction('money(Decimal, string): Money', (d: CelDecimal, c: string) => new CelMoney(d.value, currency(c)))
    .registerFunction('money(string, string): Money', (s: string, c: string) => new CelMoney(toDec(s), currency(c)))
    .registerFunction('money(int, string): Money', (i: bigint, c: string) => new CelMoney(new Dec(i.toString()), currency(c)))
    .registerFunction('string(Decimal): string', (d: CelDecimal) => d.toString())
    .registerFunction('string(Money): string', (m: CelMoney) => m.toString())
    .registerFunction('double(Decimal): double', (d: CelDecimal) => d.value.toNumber());

  // Decimal operators, with ints mixing in where the meaning is exact.
  const arith: Array<[string, (a: Dec, b: Dec) => Dec]> = [
    ['+', exactPlus],
    ['-', exactMinus],
    ['*', exactTimes],
    ['/', (a, b) => {
      if (b.isZero()) throw new EngineError('CEL_ERROR', 'division by zero');
      return exactDiv(a, b);
    }],
  ];
  for (const [op, fn] of arith) {
    env.registerOperator(`Decimal ${op} Decimal`, (a: CelDecimal, b: CelDecimal) => dec(fn(a.value, b.value)));
    env.registerOperator(`Decimal ${op} int`, (a: CelDecimal, b: bigint) => dec(fn(a.value, new Dec(b.toString()))));
    env.registerOperator(`int ${op} Decimal`, (a: bigint, b: CelDecimal) => dec(fn(new Dec(a.toString()), b.value)));
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
    .registerOperator('-Decimal', (a: CelDecimal) => dec(a.value.neg()))
    .registerOperator('Money + Money', (a: CelMoney, b: CelMoney) => {
      sameCurrency(a, b, 'add');
      return new CelMoney(exactPlus(a.units, b.units), a.currency);
    })
    .registerOperator('Money - Money', (a: CelMoney, b: CelMoney) => {
      sameCurrency(a, b, 'subtract');
      return new CelMoney(exactMinus(a.units, b.units), a.currency);
    });

  // decimal.* namespace (names as in the reference ledger's CEL).
  const D = 'DecimalNamespace';
  env
    .registerFunction(`${D}.Add(Decimal, Decimal): Decimal`, (_: unknown, a: CelDecimal, b: CelDecimal) => dec(exactPlus(a.value, b.value)))
    .registerFunction(`${D}.Sub(Decimal, Decimal): Decimal`, (_: unknown, a: CelDecimal, b: CelDecimal) => dec(exactMinus(a.value, b.value)))
    .registerFunction(`${D}.Mul(Decimal, Decimal): Decimal`, (_: unknown, a: CelDecimal, b: CelDecimal) => dec(exactTimes(a.value, b.value)))
    .registerFunction(`${D}.Quo(Decimal, Decimal, int): Decimal`, (_: unknown, a: CelDecimal, b: CelDecimal, p: bigint) => {
      if (b.value.isZero()) throw new EngineError('CEL_ERROR', 'division by zero');
      return dec(a.value.div(b.value).toDecimalPlaces(places(p), Dec.ROUND_HALF_EVEN));
    })
    .registerFunction(`${D}.Round(Decimal, string, int): Decimal`, (_: unknown, d: CelDecimal, mode: string, p: bigint) =>
      dec(d.value.toDecimalPlaces(places(p), roundingMode(mode))),
    )
    .registerFunction(`${D}.Abs(Decimal): Decimal`, (_: unknown, d: CelDecimal) => dec(d.value.abs()))
    .registerFunction(`${D}.Neg(Decimal): Decimal`, (_: unknown, d: CelDecimal) => dec(d.value.neg()))
    .registerFunction(`${D}.Ceil(Decimal): Decimal`, (_: unknown, d: CelDecimal) => dec(d.value.ceil()))
    .registerFunction(`${D}.Floor(Decimal): Decimal`, (_: unknown, d: CelDecimal) => dec(d.value.floor()))
    .registerFunction(`${D}.Cmp(Decimal, Decimal): int`, (_: unknown, a: CelDecimal, b: CelDecimal) => BigInt(a.value.cmp(b.value)))
    .registerFunction(`${D}.Reduce(Decimal): Decimal`, (_: unknown, d: CelDecimal) => dec(new Dec(d.value.toFixed())));

  const M = 'MoneyNamespace';
  env
    .registerFunction(`${M}.Add(Money, Money): Money`, (_: unknown, a: CelMoney, b: CelMoney) => {
      sameCurrency(a, b, 'add');
      return new CelMoney(exactPlus(a.units, b.units), a.currency);
    })
    .registerFunction(`${M}.Sub(Money, Money): Money`, (_: unknown, a: CelMoney, b: CelMoney) => {
      sameCurrency(a, b, 'subtract');
      return new CelMoney(exactMinus(a.units, b.units), a.currency);
    })
    .registerFunction(`${M}.Mul(Money, string): Money`, (_: unknown, m: CelMoney, f: string) => new CelMoney(exactTimes(m.units, toDec(f)), m.currency))
    .registerFunction('Money.currency(): string', (m: CelMoney) => m.currency)
    .registerFunction('Money.decimal(): Decimal', (m: CelMoney) => dec(m.units))
    .registerFunction('Decimal.toString(): string', (d: CelDecimal) => d.toString());

  env
    .registerFunction('UuidNamespace.New(): string', () => randomUUID())
    .registerFunction('DateNamespace.Today(): string', () => utcDate(clock.now()))
    .registerFunction('TimeNamespace.Now(): google.protobuf.Timestamp', () => clock.now());

  const S = 'StringsNamespace';
  env
    .registerFunction(`${S}.ToUpper(string): string`, (_: unknown, s: string) => s.toUpperCase())
    .registerFunction(`${S}.ToLower(string): string`, (_: unknown, s: string) => s.toLowerCase())
    .registerFunction(`${S}.TrimSpace(string): string`, (_: unknown, s: string) => s.trim())
    .registerFunction(`${S}.Contains(string, string): bool`, (_: unknown, s: string, t: string) => s.includes(t))
    .registerFunction(`${S}.HasPrefix(string, string): bool`, (_: unknown, s: string, t: string) => s.startsWith(t))
    .registerFunction(`${S}.HasSuffix(string, string): bool`, (_: unknown, s: string, t: string) => s.endsWith(t))
    .registerFunction(`${S}.ReplaceAll(string, string, string): string`, (_: unknown, s: string, a: string, b: string) => s.split(a).join(b));

  return env;
}
