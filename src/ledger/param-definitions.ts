import { type EngineError, limitExceeded, quote } from '../errors.js';
import { isReservedKey } from '../json.js';
import type { LedgerDeps } from './deps.js';
import { literalDefault } from './param-defaults.js';
import type { CompiledField, CompiledTranCode } from './tran-codes.js';

/**
 * Params as tran codes and velocity limits declare them alike: the types a param may have, and the
 * check and compilation of a list of definitions (names, types, defaults).
 */

export const PARAM_TYPES = ['STRING', 'INTEGER', 'DECIMAL', 'BOOLEAN', 'UUID', 'DATE', 'TIMESTAMP', 'JSON'] as const;
export type ParamType = (typeof PARAM_TYPES)[number];

export interface ParamDefinition {
  name: string;
  type: ParamType;
  default: string | null;
  description: string | null;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

/**
 * Check param definitions (identifiers, distinct, typed, at most tranCodeParamsMax) and compile each
 * default: a literal of its type, or CEL (see param-defaults.ts). Tran codes and velocity limits
 * declare params alike; `fail` makes their error (TRAN_CODE_ERROR, BAD_REQUEST).
 */
export function compileParams(
  deps: LedgerDeps,
  definitions: readonly ParamDefinition[],
  owner: string,
  compileField: (path: string, source: string) => CompiledField,
  fail: (message: string, hint?: string) => EngineError,
): CompiledTranCode['params'] {
  if (definitions.length > deps.limits.tranCodeParamsMax) {
    throw limitExceeded(
      'tranCodeParamsMax',
      deps.limits.tranCodeParamsMax,
      definitions.length,
      `${owner} declares ${definitions.length} params; tranCodeParamsMax is ${deps.limits.tranCodeParamsMax}`,
    );
  }
  const seen = new Set<string>();
  return definitions.map((definition, i) => {
    if (typeof definition?.name !== 'string' || !IDENTIFIER.test(definition.name) || isReservedKey(definition.name)) {
      throw fail(`params[${i}].name ${quote(definition?.name)} is not an identifier`, 'Use letters, digits and _.');
    }
    if (seen.has(definition.name)) throw fail(`param ${quote(definition.name)} is declared twice`);
    seen.add(definition.name);
    if (!PARAM_TYPES.includes(definition.type)) {
      throw fail(`params[${i}].type ${quote(definition.type)} is not one of ${PARAM_TYPES.join(', ')}`);
    }
    if (definition.default == null) return { definition, defaultValue: null };
    const literal = literalDefault(
      definition.type,
      definition.default,
      (source) => deps.cel.compile(source) as unknown as { ast?: unknown },
    );
    const path = `params[${i}].default`;
    return {
      definition,
      defaultValue: literal
        ? { path, source: definition.default, evaluate: () => literal.value }
        : compileField(path, definition.default),
    };
  });
}
