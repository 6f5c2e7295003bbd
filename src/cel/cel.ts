import type { Environment } from '@marcbachmann/cel-js';
import { EvaluationError, ParseError, TypeError as CelTypeError } from '@marcbachmann/cel-js';
import type { Clock } from '../clock.js';
import { EngineError, limitExceeded, quote } from '../errors.js';
import { DEFAULT_LIMITS } from '../limits.js';
import { CostMeter, instrumentExpression, meterEvaluator } from './cost.js';
import { createCelEnvironment } from './environment.js';

type Compiled = (context?: Record<string, unknown>) => unknown;

export interface CelLimits {
  celExpressionLengthMax: number;
  celCacheMax: number;
  /** Defaults as in DEFAULT_LIMITS. */
  celCostMax?: number;
  regexSizeMax?: number;
}

/**
 * Compile-once, evaluate-many CEL. Compiled expressions are cached by their text (bounded, oldest
 * evicted first); every failure becomes a CEL_ERROR naming the expression and the position. Every
 * evaluation runs under a cost budget (celCostMax, see cost.ts), and `matches` runs on RE2.
 */
export class Cel {
  readonly env: Environment;
  private readonly cache = new Map<string, Compiled>();
  private readonly meter: CostMeter;
  private readonly costMax: number;

  constructor(
    clock: Clock,
    private readonly limits: CelLimits,
  ) {
    this.env = createCelEnvironment(clock, { maxAstNodes: 10_000 });
    this.costMax = limits.celCostMax ?? DEFAULT_LIMITS.celCostMax;
    this.meter = new CostMeter(limits.regexSizeMax ?? DEFAULT_LIMITS.regexSizeMax);
    meterEvaluator(this.env, this.meter);
  }

  get size(): number {
    return this.cache.size;
  }

  /**
   * Run one request's work (`run`) under its deadline: every evaluation inside it stops once the
   * deadline has passed, and the first that did is returned as `overran`, so the caller can fail
   * the whole request (an assertion that fails to evaluate would otherwise just hide a row).
   */
  withDeadline<T>(deadline: number, run: () => T): { value: T; overran: EngineError | null } {
    const outer = this.meter.deadline;
    const outerOverran = this.meter.overran;
    this.meter.deadline = Math.min(outer, deadline);
    this.meter.overran = null;
    try {
      const value = run();
      return { value, overran: this.meter.overran };
    } finally {
      this.meter.deadline = outer;
      this.meter.overran = outerOverran;
    }
  }

  /** Parse and type-check; throws CEL_ERROR. Cached. */
  compile(expression: string): Compiled {
    const cached = this.cache.get(expression);
    if (cached) return cached;
    if (typeof expression !== 'string') {
      throw new EngineError('CEL_ERROR', `a CEL expression must be a string, got ${quote(expression)}`);
    }
    if (expression.length > this.limits.celExpressionLengthMax) {
      throw limitExceeded(
        'celExpressionLengthMax',
        this.limits.celExpressionLengthMax,
        expression.length,
        `CEL expression of ${expression.length} characters is longer than celExpressionLengthMax (${this.limits.celExpressionLengthMax})`,
        { hint: 'Split the logic into vars, or shorten the expression.' },
      );
    }
    let parsed: Compiled & { ast: Parameters<typeof instrumentExpression>[0] };
    try {
      parsed = this.env.parse(expression) as unknown as typeof parsed;
      const checked = (parsed as unknown as { check(): { valid: boolean; error?: Error } }).check();
      if (!checked.valid && checked.error) throw checked.error;
      instrumentExpression(parsed.ast, this.meter);
    } catch (error) {
      throw celError(expression, error);
    }
    const meter = this.meter;
    const path = selectPath(parsed.ast);
    const run = path
      ? (context: Record<string, unknown> | undefined) => {
          const value = select(meter, path, context);
          return value === SLOW_PATH ? this.metered(parsed, context) : value;
        }
      : (context: Record<string, unknown> | undefined) => this.metered(parsed, context);
    const compiled: Compiled = (context) => {
      if (meter.active) {
        // Inside a scope: the budget is shared, the expression named in its error is this one.
        const label = meter.expression;
        meter.expression = expression;
        try {
          return this.charged(run(context));
        } finally {
          meter.expression = label;
        }
      }
      meter.start(expression, this.costMax);
      try {
        return this.charged(run(context));
      } finally {
        meter.stop();
      }
    };
    // The parsed tree stays readable (policy grants and tool references inspect what it reads).
    Object.defineProperty(compiled, 'ast', { value: parsed.ast, enumerable: false });
    if (this.cache.size >= this.limits.celCacheMax) {
      const oldest = this.cache.keys().next();
      if (!oldest.done) this.cache.delete(oldest.value);
    }
    this.cache.set(expression, compiled);
    return compiled;
  }

  evaluate(expression: string, context: Record<string, unknown> = {}): unknown {
    const compiled = this.compile(expression);
    try {
      return compiled(context);
    } catch (error) {
      throw celError(expression, error);
    }
  }

  /**
   * Run `run` with one budget (celCostMax unless given) for every evaluation inside it, for
   * operations that evaluate many expressions for one request (evaluate's map of expressions, the
   * ledger's definitions a posting reaches).
   */
  scope<T>(label: string, run: () => T, costMax = this.costMax, costMaxName = 'celCostMax'): T {
    if (this.meter.active) return run();
    this.meter.start(label, costMax, costMaxName);
    try {
      return run();
    } finally {
      this.meter.stop();
    }
  }

  /** Evaluate; an error that ends an evaluation whose budget is spent is the budget's (the first error may have been swallowed). */
  private metered(parsed: Compiled, context: Record<string, unknown> | undefined): unknown {
    try {
      return parsed(context);
    } catch (error) {
      if (this.meter.left < 0) throw this.meter.exceeded();
      throw error;
    }
  }

  /** The result is charged too (it is converted to JSON next); a budget error swallowed on the way still ends it. */
  private charged(value: unknown): unknown {
    this.meter.chargeDeep(value);
    if (this.meter.left < 0) throw this.meter.exceeded();
    return value;
  }
}

/**
 * A field path (`context.vars.entry.layer`, `params.amount`): the most common expression of a
 * posting's definitions (dimensions, partitions, limits). Such an expression is read directly
 * instead of through the evaluator when every step is an own property of a map (as the evaluator's
 * field access tells one) and the value is a string, a boolean or null, which that field access
 * returns as they are; it is charged what the evaluator charges. Anything else (a missing key, a
 * Map, a number, a decimal, a list) takes the evaluator's path, so results and errors are the
 * evaluator's (test/cel/cel.limits.test.ts compares the two).
 */
function selectPath(ast: unknown): string[] | null {
  const fields: string[] = [];
  let node = ast as { op?: string; args?: unknown; meta?: { alternate?: unknown } } | undefined;
  while (node?.op === '.' && Array.isArray(node.args) && typeof node.args[1] === 'string') {
    fields.unshift(node.args[1]);
    node = node.args[0] as typeof node;
  }
  if (node?.op !== 'id' || typeof node.args !== 'string' || node.meta?.alternate !== undefined || fields.length === 0)
    return null;
  return [node.args, ...fields];
}

const SLOW_PATH = Symbol('slow path');

function select(meter: CostMeter, path: readonly string[], context: Record<string, unknown> | undefined): unknown {
  let value: unknown = context;
  for (const key of path) {
    if (value === null || typeof value !== 'object') return SLOW_PATH;
    // As the evaluator's field access decides what a map is (by constructor: an own `constructor` key makes it no map there).
    const maker = (value as { constructor?: unknown }).constructor;
    if ((maker !== Object && maker !== undefined) || !Object.hasOwn(value, key)) return SLOW_PATH;
    value = (value as Record<string, unknown>)[key];
  }
  if (typeof value !== 'string' && typeof value !== 'boolean' && value !== null) return SLOW_PATH;
  // The evaluator runs each node below the root through its metered `run` (one unit each; the
  // values there are maps, charged nothing more); the value itself is charged as a result.
  // A unit at a time, as the evaluator does: over the budget, the error names the same cost.
  for (let step = 1; step < path.length; step++) meter.charge(1);
  return value;
}

/**
 * Refuse a CEL result larger than `sizeMax` (list elements, map entries and string characters,
 * summed), so that values doubling from one var or key to the next are stopped early.
 */
export function checkCelValueSize(value: unknown, sizeMax: number, what: string): void {
  let size = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const node = stack.pop();
    if (typeof node === 'string') size += node.length;
    else if (node instanceof Uint8Array) size += node.length;
    else if (Array.isArray(node)) {
      size += node.length;
      for (const child of node) stack.push(child);
    } else if (node instanceof Map) {
      size += node.size;
      for (const [key, child] of node) {
        if (typeof key === 'string') size += key.length;
        stack.push(child);
      }
    } else if (node !== null && typeof node === 'object' && Object.getPrototypeOf(node) === Object.prototype) {
      for (const [key, child] of Object.entries(node)) {
        size += 1 + key.length;
        stack.push(child);
      }
    }
    if (size > sizeMax) {
      throw limitExceeded(
        'celValueSizeMax',
        sizeMax,
        size,
        `${what} evaluated to a value larger than celValueSizeMax (${sizeMax})`,
        { hint: 'Build smaller values; lists, maps, strings and bytes count by their elements, keys and characters.' },
      );
    }
  }
}

/** A CEL_ERROR that quotes the expression, says what went wrong and where. */
export function celError(expression: string, error: unknown): EngineError {
  if (error instanceof EngineError) {
    if (error.code !== 'CEL_ERROR') return error;
    return new EngineError('CEL_ERROR', `CEL ${quote(expression)}: ${error.message}`, {
      hint: error.hint,
      details: { expression },
    });
  }
  if (error instanceof ParseError || error instanceof EvaluationError || error instanceof CelTypeError) {
    const summary = (error as { summary?: string }).summary ?? error.message.split('\n')[0];
    const range = (error as { range?: { start: number; end: number } }).range;
    const at = range ? ` at position ${range.start + 1}` : '';
    return new EngineError('CEL_ERROR', `CEL ${quote(expression)}: ${summary}${at}`, {
      hint: error instanceof ParseError ? 'Fix the syntax at the position shown.' : 'Check the names and types used.',
      details: { expression, position: range ? range.start + 1 : undefined, source: error.message },
    });
  }
  const message = error instanceof Error ? error.message : String(error);
  return new EngineError('CEL_ERROR', `CEL ${quote(expression)}: ${message}`, { details: { expression } });
}
