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

/** decimal(x), and the CEL library's static forms with the same names, argument order and modes. */
declare const decimal: {
  (x: DecimalLike): TallyDecimal;
  Add(a: DecimalLike, b: DecimalLike): TallyDecimal;
  Sub(a: DecimalLike, b: DecimalLike): TallyDecimal;
  Mul(a: DecimalLike, b: DecimalLike): TallyDecimal;
  /** a / b rounded half-even to `places`. */
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
  Mul(m: TallyMoney, factor: DecimalLike): TallyMoney;
};

/** Captured into the invocation's logs (bounded by logBytesMax). */
declare const console: {
  log(...args: unknown[]): void;
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
};
