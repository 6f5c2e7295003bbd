import { CelDecimal, jsonToCel } from '../cel/values.js';
import { Dec, scaleOf } from '../decimal.js';
import { isUuid } from '../ids.js';
import { isDate, isTimestamp } from './params.js';
import type { ParamType } from './param-definitions.js';

/**
 * Names known before any posting, as CEL reads them: `params` and the environment's constants. A
 * param default may read them (and the params before it); so may a balance limit's fields.
 */
export const CEL_ROOTS: ReadonlySet<string> = new Set([
  'params',
  'DEBIT',
  'CREDIT',
  'SETTLED',
  'PENDING',
  'ENCUMBRANCE',
  'decimal',
  'money',
  'uuid',
  'date',
  'time',
  'strings',
]);

/** Every identifier an expression's AST reads (`id` nodes), macro-bound names included. */
export function identifiersOf(ast: unknown): Set<string> {
  const names = new Set<string>();
  // An explicit stack: the parser builds `a + b + c …` one level per term, thousands deep.
  const stack: unknown[] = [ast];
  while (stack.length > 0) {
    const node = stack.pop();
    if (Array.isArray(node)) {
      for (const child of node) stack.push(child);
      continue;
    }
    if (node === null || typeof node !== 'object') continue;
    const { op, args } = node as { op?: unknown; args?: unknown };
    if (op === 'id' && typeof args === 'string') names.add(args);
    else stack.push(args);
  }
  return names;
}

const DECIMAL_TEXT = /^[+-]?\d+(\.\d+)?$/;
const INTEGER_TEXT = /^-?\d{1,19}$/;

/**
 * A param default, as the reference ledger writes them, is a literal of the param's type
 * (`default: "100.00"` for a DECIMAL, `"_unspecified_"` for a STRING, `"{}"` for JSON, `0` for an
 * INTEGER). Tally also takes a CEL expression over the params before it (`"decimal('0')"`,
 * `"params.amount"`, `"'USD'"`). The text decides: when it reads as a literal of the type, it is
 * that value; a STRING default is CEL only when it compiles and reads nothing but `params` and the
 * environment's constants (so `"_unspecified_"` and `"GL"` are text, `"'USD'"` is CEL).
 * Returns the literal's CEL value, or undefined to compile the text as CEL.
 */
export function literalDefault(
  type: ParamType,
  text: string,
  compile: (source: string) => { ast?: unknown },
): { value: unknown } | undefined {
  switch (type) {
    case 'DECIMAL':
      return DECIMAL_TEXT.test(text) ? { value: new CelDecimal(new Dec(text), scaleOf(text)) } : undefined;
    case 'INTEGER':
      if (INTEGER_TEXT.test(text)) {
        const n = BigInt(text);
        if (n >= -(2n ** 63n) && n < 2n ** 63n) return { value: n };
      }
      return undefined;
    case 'BOOLEAN':
      return text === 'true' || text === 'false' ? { value: text === 'true' } : undefined;
    case 'UUID':
      return isUuid(text) ? { value: text.toLowerCase() } : undefined;
    case 'DATE':
      return isDate(text) ? { value: text } : undefined;
    case 'TIMESTAMP':
      return isTimestamp(text) ? { value: new Date(text) } : undefined;
    case 'JSON':
      try {
        return { value: jsonToCel(JSON.parse(text)) };
      } catch {
        return undefined;
      }
    case 'STRING': {
      let ast: unknown;
      try {
        ast = compile(text).ast;
      } catch {
        return { value: text };
      }
      for (const name of identifiersOf(ast)) if (!CEL_ROOTS.has(name)) return { value: text };
      return undefined;
    }
  }
}
