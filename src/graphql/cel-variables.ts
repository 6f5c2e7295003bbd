import { type DocumentNode, Kind, type OperationDefinitionNode, type VariableDefinitionNode } from 'graphql';
import type { Cel } from '../cel/cel.js';
import { celToJson } from '../cel/values.js';
import { EngineError } from '../errors.js';

/** A variable whose default is a CEL expression (`$id: UUID! = "uuid.New()" @cel`), evaluated per request. */
export interface CelDefault {
  name: string;
  expression: string;
}

/**
 * Take the defaults of `@cel` variables out of the document: graphql-js would check the expression
 * text against the variable's type ("uuid.NewSHA1(...)" is not a UUID). The expressions are kept by
 * operation and evaluated for each request that does not send the variable (celDefaultValues).
 */
export function extractCelDefaults(document: DocumentNode): {
  document: DocumentNode;
  defaults: Map<string | null, CelDefault[]>;
} {
  const defaults = new Map<string | null, CelDefault[]>();
  let changed = false;
  const definitions = document.definitions.map((definition) => {
    if (definition.kind !== Kind.OPERATION_DEFINITION || !definition.variableDefinitions?.length) return definition;
    const found: CelDefault[] = [];
    const variableDefinitions = definition.variableDefinitions.map((v): VariableDefinitionNode => {
      if (!v.directives?.some((d) => d.name.value === 'cel')) return v;
      if (v.defaultValue?.kind !== Kind.STRING) return v; // KnownDirectives / the type check report it as it is
      found.push({ name: v.variable.name.value, expression: v.defaultValue.value });
      changed = true;
      const { defaultValue: _removed, ...rest } = v;
      return rest;
    });
    if (found.length === 0) return definition;
    defaults.set(definition.name?.value ?? null, found);
    return { ...definition, variableDefinitions } as OperationDefinitionNode;
  });
  return { document: changed ? { ...document, definitions } : document, defaults };
}

/** The request's variables with each `@cel` default it did not send evaluated (as JSON). */
export function celDefaultValues(
  cel: Cel,
  defaults: readonly CelDefault[],
  variables: Record<string, unknown>,
): Record<string, unknown> {
  const out = { ...variables };
  for (const { name, expression } of defaults) {
    if (Object.hasOwn(out, name) && out[name] !== undefined) continue;
    try {
      out[name] = celToJson(cel.evaluate(expression, {}));
    } catch (error) {
      const e = error as EngineError;
      throw new EngineError(
        'BAD_REQUEST',
        `the @cel default of $${name} = ${JSON.stringify(expression)} failed: ${e.message}`,
        {
          hint: e.hint ?? 'A @cel default is a CEL expression evaluated when the variable is not sent.',
        },
      );
    }
  }
  return out;
}
