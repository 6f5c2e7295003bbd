import { type Cel, checkCelValueSize } from '../cel/cel.js';
import { setOwn } from '../json.js';
import { celToJson, jsonToCel } from '../cel/values.js';
import { EngineError, quote } from '../errors.js';

type EvaluateArgs = { expression?: string | null; expressions?: unknown; document?: unknown };

/**
 * What the policies of `Mutation.evaluate` see: running CEL here is running the native `cel` tool
 * (INSERT on actions.Execution, `context.document.action == "cel"`), with its input shaped as the
 * tool's ({expression, bindings}), so that one policy allows or refuses both.
 */
export function evaluateDocument(args: EvaluateArgs): { action: 'cel'; version: null; input: Record<string, unknown> } {
  const input: Record<string, unknown> =
    args.expression != null ? { expression: args.expression } : { expressions: args.expressions ?? null };
  input.bindings = { document: args.document ?? null };
  return { action: 'cel', version: null, input };
}

/**
 * The CEL REPL behind `Mutation.evaluate`: one expression, or a map of them evaluated in order where
 * each key can use the earlier ones as `this.<key>`. `document` is bound as `document`. One call has
 * one cost budget (celCostMax), however many expressions it holds.
 */
export function evaluateCel(cel: Cel, args: EvaluateArgs, sizeMax: number): unknown {
  return cel.scope('evaluate', () => evaluateScoped(cel, args, sizeMax));
}

function evaluateScoped(cel: Cel, args: EvaluateArgs, sizeMax: number): unknown {
  const hasOne = args.expression != null;
  const hasMap = args.expressions != null;
  if (hasOne === hasMap) {
    throw new EngineError('BAD_REQUEST', 'evaluate needs exactly one of expression or expressions', {
      hint: 'evaluate(expression: "1 + 1") or evaluate(expressions: {a: "1", b: "this.a + 1"}).',
    });
  }
  const document = jsonToCel(args.document ?? null);
  if (hasOne) {
    const result = cel.evaluate(args.expression as string, { document });
    checkCelValueSize(result, sizeMax, 'expression');
    return celToJson(result);
  }
  const self: Record<string, unknown> = {};
  evaluateMap(cel, args.expressions, self, self, document, 'expressions', sizeMax);
  return celToJson(self);
}

function evaluateMap(
  cel: Cel,
  node: unknown,
  root: Record<string, unknown>,
  target: Record<string, unknown>,
  document: unknown,
  path: string,
  sizeMax: number,
): void {
  if (node === null || typeof node !== 'object' || Array.isArray(node)) {
    throw new EngineError('BAD_REQUEST', `${path} must be a map of CEL expressions, got ${quote(node)}`);
  }
  for (const [key, value] of Object.entries(node)) {
    if (typeof value === 'string') {
      const result = cel.evaluate(value, { document, this: root });
      checkCelValueSize(result, sizeMax, `${path}.${key}`);
      setOwn(target, key, result);
    } else {
      const child: Record<string, unknown> = {};
      setOwn(target, key, child);
      evaluateMap(cel, value, root, child, document, `${path}.${key}`, sizeMax);
    }
  }
}
