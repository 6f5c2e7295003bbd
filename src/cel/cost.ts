import type { Environment } from '@marcbachmann/cel-js';
import { EngineError, limitExceeded, quote } from '../errors.js';
import { compileRegex, type Regex, RegexRefused } from './regex.js';

/**
 * The cost of one CEL evaluation, counted as it runs and stopped at a budget (celCostMax), in the
 * manner of cel-go's runtime cost limit: an evaluation that would cost more fails with
 * LIMIT_EXCEEDED instead of running on. The unit is about one sub-expression evaluated (tens of
 * nanoseconds); the weights below keep every kind of work within a small multiple of that:
 *
 * - every sub-expression evaluated costs 1, so each iteration of a macro (all, exists, exists_one,
 *   map, filter) costs at least 1, and nested macros multiply;
 * - a list or bytes value that a sub-expression yields costs its length, and a string one unit per
 *   16 characters, which pays for the operations that read or copy it (concatenation, `in`, size,
 *   contains, ...) and stops values doubling from one step to the next;
 * - `==`, `!=` and `in` between maps or lists cost the deep size of their operands (equality walks them);
 * - walking a map's keys (a macro over a map, `size()` of a map, equality) costs 8 per key: V8
 *   lists the keys of a large object at about 0.3 µs each;
 * - `matches` costs the text's length × the pattern's size / 8 (RE2 is linear in both), and
 *   compiling a pattern that is not a literal costs 16 per unit of its size;
 * - the result costs its deep size (it is converted to JSON afterwards);
 * - an error a sub-expression throws costs 512 (macros and || catch it and go on, and building it
 *   costs ~15 µs: the message, a source excerpt, a stack).
 *
 * @marcbachmann/cel-js 8.0.0 has no cost hook, so the meter sits where the library lets it: every
 * sub-expression is evaluated through the evaluator's `run` method (the library's own loops, macros
 * and operators call it), which is wrapped once per environment; and the nodes of each compiled
 * expression whose work grows with their operands get their handler wrapped at compile time.
 * Both rely on the library's internals, which is why the version is pinned and the hook is
 * checked when the environment is created.
 */
export const CEL_COST = Object.freeze({
  /** An error thrown by a sub-expression (~15 µs: the library builds its message and stack). */
  error: 512,
  charactersPerUnit: 16,
  mapKey: 8,
  matchStepsPerUnit: 8,
  compilePerSizeUnit: 16,
});

/** Units charged between two looks at the clock (a few µs of evaluation at most). */
const DEADLINE_CHECK_UNITS = 1024;

/** Dynamic patterns (a pattern that is not a literal) compiled and kept, most recent last. */
const DYNAMIC_PATTERNS_KEPT = 64;

interface AstNode {
  op: string;
  args: unknown;
  start: number;
  // biome-ignore lint/suspicious/noExplicitAny: the evaluator's own handlers take its private AST nodes.
  handle?: (...args: any[]) => unknown;
  evaluate(ev: unknown, ast: AstNode, ctx: unknown): unknown;
}

interface Evaluator {
  run(ast: AstNode, ctx: unknown): unknown;
}

/**
 * The budget of the evaluation running now: `left` goes below 0 when it is spent. An evaluation
 * that starts while one runs (inside Cel.scope) shares its budget.
 */
export class CostMeter {
  left = Infinity;
  limit = Infinity;
  /** The name of the limit `limit` is (named in the error). */
  limitName = 'celCostMax';
  active = false;
  expression = '';
  /** The error of the budget once spent: the same one is thrown again (macros catch and go on). */
  private error: EngineError | null = null;
  /**
   * The running request's deadline (epoch ms; Infinity outside a request), checked every
   * DEADLINE_CHECK_UNITS units and when an evaluation starts: a request that evaluates many
   * expressions (an assertion per row of a page) stops at its deadline, not after all of them.
   */
  deadline = Infinity;
  /** Set when an evaluation ran into the deadline: the engine fails the whole request with it. */
  overran: EngineError | null = null;
  private nextDeadlineCheck = Infinity;
  private readonly patterns = new Map<string, Regex>();

  constructor(readonly regexSizeMax: number) {}

  start(expression: string, limit: number, limitName = 'celCostMax'): void {
    if (this.deadline !== Infinity && Date.now() > this.deadline) throw this.pastDeadline(expression);
    this.left = limit;
    this.limit = limit;
    this.limitName = limitName;
    this.nextDeadlineCheck = limit - DEADLINE_CHECK_UNITS;
    this.expression = expression;
    this.error = null;
    this.active = true;
  }

  stop(): void {
    this.left = Infinity;
    this.limit = Infinity;
    this.error = null;
    this.active = false;
  }

  get spent(): number {
    return this.limit - this.left;
  }

  charge(units: number): void {
    this.left -= units;
    if (this.left < 0) throw this.exceeded();
    this.checkDeadline();
  }

  /** Look at the clock once every DEADLINE_CHECK_UNITS units spent. */
  checkDeadline(): void {
    if (this.left < this.nextDeadlineCheck) {
      this.nextDeadlineCheck = this.left - DEADLINE_CHECK_UNITS;
      if (Date.now() > this.deadline) throw (this.error ??= this.pastDeadline(this.expression));
    }
  }

  private pastDeadline(expression: string): EngineError {
    // The meter knows the deadline as a time, not the budget that set it: max and actual are not known here.
    return (this.overran ??= limitExceeded(
      'requestDeadlineMs',
      null,
      null,
      `CEL ${quote(expression)} ran past the request's deadline (requestDeadlineMs)`,
      {
        hint: 'The request evaluates too much CEL: ask for fewer rows, or simplify the expressions (policy assertions run once per row).',
        details: { expression, requestDeadline: true },
      },
    ));
  }

  /** Charge the deep size of a value, walking no further than the budget left. */
  chargeDeep(value: unknown): void {
    if (value === null || typeof value !== 'object') {
      if (typeof value === 'string' && value.length >= CEL_COST.charactersPerUnit)
        this.charge(Math.floor(value.length / CEL_COST.charactersPerUnit));
      return;
    }
    // Decimals, timestamps and other values of their own type hold nothing to walk.
    if (
      !Array.isArray(value) &&
      !(value instanceof Map) &&
      !(value instanceof Uint8Array) &&
      Object.getPrototypeOf(value) !== Object.prototype
    )
      return;
    let units = 0;
    const stack: unknown[] = [value];
    while (stack.length > 0) {
      const node = stack.pop();
      if (typeof node === 'string') units += Math.floor(node.length / CEL_COST.charactersPerUnit);
      else if (Array.isArray(node)) {
        units += node.length;
        for (let i = 0; i < node.length; i++) stack.push(node[i]);
      } else if (node instanceof Uint8Array) units += node.length;
      else if (node instanceof Map) {
        units += node.size;
        for (const child of node.values()) stack.push(child);
      } else if (node !== null && typeof node === 'object' && Object.getPrototypeOf(node) === Object.prototype) {
        for (const key in node) {
          units += CEL_COST.mapKey;
          stack.push((node as Record<string, unknown>)[key]);
        }
      }
      if (units > this.left) break;
    }
    this.charge(units);
  }

  /** A pattern that is not a literal: compiled once while it stays among the recent ones. */
  dynamicPattern(pattern: string): Regex {
    const kept = this.patterns.get(pattern);
    if (kept) return kept;
    // Charge what compiling will cost before doing it (the estimate is what the size is).
    let regex: Regex;
    try {
      regex = compileRegex(pattern, this.regexSizeMax);
    } catch (error) {
      throw regexError(error);
    }
    this.charge(regex.size * CEL_COST.compilePerSizeUnit);
    if (this.patterns.size >= DYNAMIC_PATTERNS_KEPT) this.patterns.delete(this.patterns.keys().next().value!);
    this.patterns.set(pattern, regex);
    return regex;
  }

  exceeded(): EngineError {
    return (this.error ??= limitExceeded(
      this.limitName,
      this.limit,
      this.spent,
      `CEL ${quote(this.expression)} costs more than ${this.limitName} (${this.limit}): stopped at a cost of ${this.spent}`,
      {
        hint:
          'Each sub-expression evaluated costs 1 and each list element or 16 characters a step yields costs 1; all/exists/map/filter repeat their body for each element, ' +
          'so nesting them over one list multiplies the cost. Work over smaller lists, avoid nested macros over the same input, or raise celCostMax.',
        details: { expression: this.expression, cost: this.spent, [this.limitName]: this.limit },
      },
    ));
  }
}

/**
 * Count every sub-expression the environment's evaluator runs, and the size of what it yields.
 * The evaluator is private to the environment: a throwaway expression hands it over.
 */
export function meterEvaluator(env: Environment, meter: CostMeter): void {
  const probe = env.parse('true') as unknown as ((context?: unknown) => unknown) & { ast: { evaluate: unknown } };
  let evaluator: Evaluator | undefined;
  probe.ast.evaluate = (ev: Evaluator) => {
    evaluator = ev;
    return true;
  };
  probe({});
  if (!evaluator || typeof evaluator.run !== 'function') {
    throw new Error(
      'the CEL cost meter cannot reach the evaluator: @marcbachmann/cel-js changed its internals (the version is pinned for this)',
    );
  }
  evaluator.run = function run(this: Evaluator, ast: AstNode, ctx: unknown): unknown {
    if (--meter.left < 0) throw meter.exceeded();
    meter.checkDeadline();
    let value: unknown;
    try {
      value = ast.evaluate(this, ast, ctx);
    } catch (error) {
      // An error costs far more than a step (the library builds a message with a source excerpt
      // and a stack), and macros and || swallow it and go on: charge what it costs.
      meter.left -= CEL_COST.error;
      throw error;
    }
    if (typeof value === 'string') {
      if (value.length >= CEL_COST.charactersPerUnit)
        meter.left -= Math.floor(value.length / CEL_COST.charactersPerUnit);
    } else if (typeof value === 'object' && value !== null && (Array.isArray(value) || value instanceof Uint8Array)) {
      meter.left -= value.length;
    }
    return value;
  };
}

/**
 * Prepare a checked expression for metered evaluation: `matches` runs on RE2 (a literal pattern is
 * compiled now, so a pattern RE2 refuses fails when the expression is created), and the nodes whose
 * work grows with their operands charge for it.
 */
export function instrumentExpression(root: AstNode, meter: CostMeter): void {
  const isNode = (value: unknown): value is AstNode => value instanceof (root.constructor as new () => AstNode);
  const stack: unknown[] = [root];
  const seen = new Set<AstNode>();
  while (stack.length > 0) {
    const item = stack.pop();
    if (Array.isArray(item)) {
      for (const child of item) stack.push(child);
      continue;
    }
    if (!isNode(item) || seen.has(item)) continue;
    const node = item;
    seen.add(node);
    if (node.op === 'value' || node.op === 'id') continue;
    // A macro (all, exists, exists_one, map, filter) runs as the comprehension it expands to.
    const alternate = (node as { meta?: { alternate?: unknown } }).meta?.alternate;
    if (isNode(alternate) && alternate.op === 'comprehension') instrumentComprehension(alternate, meter);
    const args = node.args as unknown[];
    if (node.op === 'rcall' && args[0] === 'matches' && (args[2] as unknown[]).length === 1)
      instrumentMatches(node, meter, isNode);
    else if (node.op === '==' || node.op === '!=' || node.op === 'in') instrumentEquality(node, meter);
    else if (
      (node.op === 'call' && args[0] === 'size' && (args[1] as unknown[]).length === 1) ||
      (node.op === 'rcall' && args[0] === 'size' && (args[2] as unknown[]).length === 0)
    )
      instrumentSize(node, meter);
    if (Array.isArray(node.args)) stack.push(node.args);
    else if (node.args !== null && typeof node.args === 'object') stack.push(node.args);
  }
}

function instrumentMatches(node: AstNode, meter: CostMeter, isNode: (value: unknown) => value is AstNode): void {
  const patternNode = (node.args as unknown[][])[2]![0];
  let literal: Regex | undefined;
  if (isNode(patternNode) && patternNode.op === 'value' && typeof patternNode.args === 'string') {
    try {
      literal = compileRegex(patternNode.args, meter.regexSizeMax);
    } catch (error) {
      throw regexError(error, patternNode.start);
    }
  }
  // The receiver call handler gets the evaluated [receiver, pattern].
  node.handle = (values: unknown[]) => {
    const [text, pattern] = values;
    if (typeof text !== 'string' || typeof pattern !== 'string') {
      throw new EngineError('CEL_ERROR', `no matching overload for ${typeName(text)}.matches(${typeName(pattern)})`, {
        hint: 'matches takes a string receiver and a string pattern.',
      });
    }
    const regex = literal ?? meter.dynamicPattern(pattern);
    meter.charge(Math.ceil((text.length * regex.size) / CEL_COST.matchStepsPerUnit));
    return regex.test(text);
  };
}

function instrumentEquality(node: AstNode, meter: CostMeter): void {
  const handle = node.handle;
  if (typeof handle !== 'function') return;
  // An operand typed as a scalar (string, int, decimal, ...) when checked makes the walk needless.
  const kinds = (node.args as Array<{ checkedType?: { kind?: string } }>).map((a) => a.checkedType?.kind);
  if (kinds.some((k) => k === 'primitive' || k === 'message')) return;
  node.handle = (left: unknown, right: unknown, ast: unknown, ev: unknown) => {
    if (
      typeof right === 'object' &&
      right !== null &&
      (node.op === 'in'
        ? Array.isArray(right) && typeof left === 'object' && left !== null
        : typeof left === 'object' && left !== null)
    ) {
      meter.chargeDeep(left);
      meter.chargeDeep(right);
    }
    return handle(left, right, ast, ev);
  };
}

function instrumentComprehension(node: AstNode, meter: CostMeter): void {
  const handle = node.handle;
  if (typeof handle !== 'function') return;
  // The handler gets the evaluated range; a map ranges over its keys, listed here once and charged.
  node.handle = (items: unknown, args: unknown, ev: unknown, ctx: unknown) => {
    if (
      typeof items === 'object' &&
      items !== null &&
      !Array.isArray(items) &&
      !(items instanceof Map) &&
      !(items instanceof Set)
    ) {
      const keys = Object.keys(items);
      meter.charge(keys.length * CEL_COST.mapKey);
      return handle(keys, args, ev, ctx);
    }
    return handle(items, args, ev, ctx);
  };
}

function instrumentSize(node: AstNode, meter: CostMeter): void {
  const handle = node.handle;
  if (typeof handle !== 'function') return;
  node.handle = (values: unknown[], a: unknown, b: unknown) => {
    const operand = values[0];
    const size = handle(values, a, b);
    // Counting a map's keys walks them; lists, strings and bytes were charged when they were yielded.
    if (typeof operand === 'object' && operand !== null && !Array.isArray(operand) && !(operand instanceof Uint8Array))
      meter.charge(Number(size) * CEL_COST.mapKey);
    return size;
  };
}

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'list';
  if (typeof value === 'bigint') return 'int';
  if (typeof value === 'number') return 'double';
  if (typeof value === 'object') return 'map';
  if (typeof value === 'boolean') return 'bool';
  return typeof value;
}

function regexError(error: unknown, position?: number): EngineError {
  if (!(error instanceof RegexRefused)) return new EngineError('CEL_ERROR', String((error as Error)?.message ?? error));
  const at = position === undefined ? '' : ` (at position ${position + 1})`;
  return new EngineError('CEL_ERROR', `${error.message}${at}`, {
    hint: error.hint,
    details: { pattern: error.pattern },
  });
}

/** Did an evaluation stop at a budget (celCostMax, or the request's deadline) rather than fail? */
export function isBudgetError(error: unknown): boolean {
  if (!(error instanceof EngineError) || error.code !== 'LIMIT_EXCEEDED') return false;
  const details = error.details as { celCostMax?: unknown; requestDeadline?: unknown } | undefined;
  return details?.celCostMax !== undefined || details?.requestDeadline === true;
}
