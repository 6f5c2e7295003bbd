import { type Cel, checkCelValueSize } from '../cel/cel.js';
import { setOwn } from '../json.js';
import { celToJson, jsonToCel } from '../cel/values.js';
import { EngineError, quote } from '../errors.js';

/**
 * The CEL REPL behind `Mutation.evaluate`: one expression, or a map of them evaluated in order where
 * each key can use the earlier ones as `this.<key>`. `document` is bound as `document`.
 */
export function evaluateCel(cel: Cel, args: { expression?: string | null; expressions?: unknown; document?: unknown }, sizeMax: number): unknown {
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

function evaluateMap(cel: Cel, node: unknown, root: Record<string, unknown>, target: Record<string, unknown>, document: unknown, path: string, sizeMax: number): void {
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
