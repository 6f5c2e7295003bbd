import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { EngineError } from '../errors.js';

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

export interface SchemaProblem {
  pointer: string;
  message: string;
}

/**
 * JSON Schemas of tool inputs and outputs: one shared Ajv (strict, all formats), validators
 * compiled once per schema object. A version's parsed document (and so its schema objects) lives
 * as long as the document cache keeps it, and a version number that comes to stand for another
 * document gets new objects, so a validator can never outlive the schema it was compiled from.
 * Ajv's own cache holds every schema object it compiled, strongly: each is removed from it once
 * compiled (the validator keeps working), so only the WeakMap here holds validators.
 */
export class SchemaCache {
  private readonly ajv: Ajv;
  private readonly validators = new WeakMap<object, ValidateFunction>();

  constructor() {
    this.ajv = new Ajv({ strict: true, allErrors: true, addUsedSchema: false, validateFormats: true });
    addFormats(this.ajv);
  }

  /** Compile a schema, refusing an invalid one with BAD_REQUEST naming `what`. */
  compile(schema: unknown, what: string): ValidateFunction {
    if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) {
      throw new EngineError('BAD_REQUEST', `${what} must be a JSON Schema object`, { hint: 'For example {"type": "object", "properties": {...}}.' });
    }
    const cached = this.validators.get(schema);
    if (cached) return cached;
    let validate: ValidateFunction;
    try {
      validate = this.ajv.compile(schema as object);
    } catch (error) {
      throw new EngineError('BAD_REQUEST', `${what} is not a valid JSON Schema: ${(error as Error).message}`, {
        hint: 'Check it against JSON Schema draft-07 in strict mode (unknown keywords are refused).',
      });
    }
    this.ajv.removeSchema(schema);
    this.validators.set(schema, validate);
    return validate;
  }

  /** The problems of `value`, each with its JSON pointer; empty when valid. */
  problems(validate: ValidateFunction, value: unknown): SchemaProblem[] {
    if (validate(value)) return [];
    return (validate.errors ?? []).map((e: ErrorObject) => ({
      pointer: e.instancePath === '' ? '/' : e.instancePath,
      message: describe(e),
    }));
  }
}

function describe(e: ErrorObject): string {
  const params = e.params as Record<string, unknown>;
  if (e.keyword === 'additionalProperties') return `has no property ${JSON.stringify(params.additionalProperty)} in the schema`;
  if (e.keyword === 'required') return `is missing required property ${JSON.stringify(params.missingProperty)}`;
  return e.message ?? e.keyword;
}
