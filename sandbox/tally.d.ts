/**
 * Types for Tally tool programs. A program defines `function run(event)`; its return value (plain
 * JSON data) is the output. Add `/// <reference path="tally.d.ts" />` to a tool file to type it.
 *
 * Everything here runs synchronously inside the caller's database transaction.
 */

/** What run(event) receives. */
interface TallyEvent<Input = Record<string, unknown>> {
  /** The input, already validated against the tool's inputSchema. */
  data: Input;
  execution: {
    executionId: string;
    actionId: string | null;
    actionVersion: number | null;
    /** 1 for an invoke; the attempt number for a started execution. */
    attempt: number;
  };
  caller: { principal: string };
}

/** The error graphql(), cel() and tools.x() throw when the call fails (its writes are already gone). */
interface ToolError extends Error {
  name: 'ToolError';
  /** A code from Tally's closed list, e.g. ACCESS_DENIED, ACCOUNT_LOCKED, TOOL_FAILED. */
  code: string;
  hint?: string;
  details?: unknown;
}

/** The result of tools.x(input, { check: false }). */
interface ToolResult<Output = unknown> {
  ok: boolean;
  output: Output | null;
  error: { code: string; message: string; hint?: string; details?: unknown } | null;
}

/** Runs a GraphQL operation in the caller's transaction, under the authority stack; returns `data`. */
declare function graphql<Data = any>(query: string, variables?: Record<string, unknown>): Data;

/**
 * Evaluates a CEL expression (decimal, money, uuid, date, strings…) with the given bindings. Bindings
 * travel as JSON: a decimal arrives as a string, so write `decimal(x)` in the expression.
 */
declare function cel<T = any>(expression: string, bindings?: Record<string, unknown>): T;

/** The tools this one declares: tools.name(input) throws on failure; with { check: false } it returns a ToolResult. */
declare const tools: {
  [name: string]: {
    <Output = any>(input?: Record<string, unknown>): Output;
    <Output = any>(input: Record<string, unknown>, options: { check: false }): ToolResult<Output>;
  };
};

/** Ends the call as FAILED (TOOL_FAILED) with this message and hint. `{ retry: false }` stops retries of a started execution. */
declare function fail(message: string, hint?: string | null, options?: { retry?: boolean }): never;

/** Whether cancelExecution was asked of the run this call belongs to (an agent run it is a tool call of): stop early if so. */
declare function cancelled(): boolean;

/**
 * Says how the call is going ("looked up 3 accounts"): recorded on its execution (Execution.progress)
 * and streamed to its caller (a long-poll, `tally chat`, MCP notifications/progress). Throws
 * LIMIT_EXCEEDED past statusMessagesPerCallMax messages or statusBytesMax bytes (nothing is recorded).
 */
declare function status(text: string): void;

type RoundingMode =
  | 'half_even'
  | 'half_up'
  | 'half_down'
  | 'up'
  | 'down'
  | 'ceiling'
  | 'floor'
  | Uppercase<'half_even' | 'half_up' | 'half_down' | 'up' | 'down' | 'ceiling' | 'floor'>;
type DecimalLike = TallyDecimal | string | number | bigint;

/**
 * An exact decimal: a BigInt coefficient and a scale, at most 1,000 digits. Immutable. It prints
 * with its own scale (`decimal('1.10')` is "1.10"). `places` is an integer from 0 to 64; modes may be
 * written in any case.
 */
interface TallyDecimal {
  plus(x: DecimalLike): TallyDecimal;
  minus(x: DecimalLike): TallyDecimal;
  times(x: DecimalLike): TallyDecimal;
  /** Divide, rounded to `places` fractional digits (default 18), half-even unless a mode is given. */
  div(x: DecimalLike, places?: number, mode?: RoundingMode): TallyDecimal;
  round(places?: number, mode?: RoundingMode): TallyDecimal;
  neg(): TallyDecimal;
  abs(): TallyDecimal;
  cmp(x: DecimalLike): -1 | 0 | 1;
  eq(x: DecimalLike): boolean;
  lt(x: DecimalLike): boolean;
  lte(x: DecimalLike): boolean;
  gt(x: DecimalLike): boolean;
  gte(x: DecimalLike): boolean;
  isZero(): boolean;
  isNegative(): boolean;
  toFixed(places?: number): string;
  toString(): string;
  /** Serialises as a string: amounts never leave as floats. */
  toJSON(): string;
  /** Throws: `d + 1`, `d * 2`, `d > e` would compute a float or text. Use plus/times/gt…; String(d) and `${d}` print it. */
  valueOf(): never;
}

/** An exact amount in one currency; arithmetic across currencies throws. */
interface TallyMoney {
  readonly units: TallyDecimal;
  readonly currency: string;
  plus(x: TallyMoney): TallyMoney;
  minus(x: TallyMoney): TallyMoney;
  times(factor: DecimalLike): TallyMoney;
  cmp(x: TallyMoney): -1 | 0 | 1;
  toString(): string;
  toJSON(): { units: string; currency: string };
  /** Throws: `m * 2` would compute a float. Use times/plus/cmp. */
  valueOf(): never;
}

/**
 * A CEL timestamp: JSON, String(t) and template literals give its RFC 3339 text (as cel("time.Now()")
 * returns it), so it goes into graphql() variables and outputs as that text. Arithmetic and
 * comparison are methods (CEL's t + d, t - u, t < u); the getters are CEL's (getMonth is 0-based,
 * getDayOfMonth 0-based, getDate 1-based; each takes an optional time zone).
 */
interface TallyTimestamp {
  plus(d: TallyDuration): TallyTimestamp;
  minus(x: TallyDuration): TallyTimestamp;
  minus(x: TallyTimestamp): TallyDuration;
  cmp(x: TallyTimestamp): -1 | 0 | 1;
  getFullYear(tz?: string): number;
  getMonth(tz?: string): number;
  getDate(tz?: string): number;
  getDayOfMonth(tz?: string): number;
  getDayOfWeek(tz?: string): number;
  getDayOfYear(tz?: string): number;
  getHours(tz?: string): number;
  getMinutes(tz?: string): number;
  getSeconds(tz?: string): number;
  getMilliseconds(tz?: string): number;
  toString(): string;
  toJSON(): string;
  /** Throws: `t < u` or `t + d` would compare or add numbers or text. Use cmp/plus/minus. */
  valueOf(): never;
}

/** A CEL duration: its text is CEL's ("5400s"). */
interface TallyDuration {
  plus(d: TallyDuration): TallyDuration;
  minus(d: TallyDuration): TallyDuration;
  cmp(d: TallyDuration): -1 | 0 | 1;
  getHours(): number;
  getMinutes(): number;
  getSeconds(): number;
  getMilliseconds(): number;
  toString(): string;
  toJSON(): string;
  valueOf(): never;
}

/**
 * The CEL library of the tran codes, each function CEL's own (the same code runs it): a failure
 * throws a ToolError with code CEL_ERROR, as cel() does. Calls are not executions (no record, not
 * counted in callsPerExecutionMax); each is one CEL evaluation under celCostMax and the deadline.
 */
/** uuid(text): the UUID in lower case; uuid.New(), uuid.NewSHA1(namespace, name), uuid.NewMD5(namespace, name). */
declare const uuid: {
  (text: string): string;
  New(): string;
  NewSHA1(namespace: string, name: string | Uint8Array): string;
  NewMD5(namespace: string, name: string | Uint8Array): string;
};
/** date(t) is a timestamp's UTC date, date(text) checks one; dates are "YYYY-MM-DD". date.Today() is the engine clock's. */
declare const date: {
  (x: TallyTimestamp | string): string;
  Today(): string;
};
/** time.Now(): the engine clock's time. */
declare const time: { Now(): TallyTimestamp };
/** timestamp("2026-01-31T10:00:00Z") or timestamp(epochSeconds). */
declare function timestamp(x: string | number | bigint): TallyTimestamp;
/** duration("90m"), duration("1.5h"), duration("-30s"). */
declare function duration(text: string): TallyDuration;
declare const strings: {
  ToUpper(s: string): string;
  ToLower(s: string): string;
  TrimSpace(s: string): string;
  Contains(s: string, part: string): boolean;
  HasPrefix(s: string, prefix: string): boolean;
  HasSuffix(s: string, suffix: string): boolean;
  ReplaceAll(s: string, old: string, replacement: string): string;
};

/**
 * decimal(x), and the CEL library's static forms: CEL's own functions (80 significant digits, as
 * in a tran code), taking a string or number where CEL takes a Decimal.
 */
declare const decimal: {
  (x: DecimalLike): TallyDecimal;
  Add(a: DecimalLike, b: DecimalLike): TallyDecimal;
  Sub(a: DecimalLike, b: DecimalLike): TallyDecimal;
  Mul(a: DecimalLike, b: DecimalLike): TallyDecimal;
  /** a / b rounded half-even to `places` (0 to 64), with that many places: Quo(1, 1, 2) is "1.00". */
  Quo(a: DecimalLike, b: DecimalLike, places: number | bigint): TallyDecimal;
  Round(x: DecimalLike, mode: RoundingMode, places: number | bigint): TallyDecimal;
  Abs(x: DecimalLike): TallyDecimal;
  Neg(x: DecimalLike): TallyDecimal;
  Ceil(x: DecimalLike): TallyDecimal;
  Floor(x: DecimalLike): TallyDecimal;
  Cmp(a: DecimalLike, b: DecimalLike): -1 | 0 | 1;
  /** The same value without trailing fractional zeros ("1.500" → "1.5"). */
  Reduce(x: DecimalLike): TallyDecimal;
};
declare const money: {
  (units: DecimalLike, currency: string): TallyMoney;
  Add(a: TallyMoney, b: TallyMoney): TallyMoney;
  Sub(a: TallyMoney, b: TallyMoney): TallyMoney;
  /** The factor as text or a decimal (CEL's money.Mul takes a string). */
  Mul(m: TallyMoney, factor: string | TallyDecimal): TallyMoney;
};

/** Captured into the invocation's logs (bounded by logBytesMax). */
declare const console: {
  log(...args: unknown[]): void;
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
};
