import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { CEL_COST } from '../cel/cost.js';
import { compileRegex, RegexRefused } from '../cel/regex.js';
import { EngineError, limitExceeded } from '../errors.js';
import { DEFAULT_LIMITS, type Limits } from '../limits.js';

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
 *
 * `pattern` and `patternProperties` run on RE2 (src/cel/regex.ts), not on JavaScript's backtracking
 * RegExp: a pattern RE2 refuses (backreferences, lookaround) or one over regexSizeMax fails when
 * the schema is compiled, that is when the tool is created. Matching is linear, and the matching
 * one validation does is bounded like a CEL evaluation: text length × pattern size within celCostMax.
 */
export class SchemaCache {
  private readonly ajv: Ajv;
  /** The same, applying `default`s (inputs only: the program receives the input with them filled in). */
  private readonly ajvDefaults: Ajv;
  private readonly validators = new WeakMap<object, ValidateFunction>();
  private readonly defaulting = new WeakMap<object, ValidateFunction>();
  /** Pattern-matching budget left in the validation running now. */
  private left = Infinity;

  constructor(private readonly limits: Pick<Limits, 'regexSizeMax' | 'celCostMax'> = DEFAULT_LIMITS) {
    const regExp = Object.assign(
      (pattern: string) => {
        const regex = compileRegex(pattern, limits.regexSizeMax);
        return {
          test: (text: string) => {
            this.left -= Math.ceil((text.length * regex.size) / CEL_COST.matchStepsPerUnit);
            if (this.left < 0) {
              throw limitExceeded(
                'celCostMax',
                limits.celCostMax,
                limits.celCostMax - this.left,
                `matching a value of ${text.length} characters against the schema pattern ${JSON.stringify(pattern)} goes past celCostMax (${limits.celCostMax}) for one validation`,
                {
                  hint: 'Send shorter strings (maxLength), or use a simpler pattern.',
                },
              );
            }
            return regex.test(text);
          },
          toString: () => pattern,
        };
      },
      { code: 'tallyRe2' },
    );
    this.ajv = new Ajv({
      strict: true,
      allErrors: true,
      addUsedSchema: false,
      validateFormats: true,
      code: { regExp },
    });
    addFormats(this.ajv);
    this.ajvDefaults = new Ajv({
      strict: true,
      allErrors: true,
      addUsedSchema: false,
      validateFormats: true,
      code: { regExp },
      useDefaults: true,
    });
    addFormats(this.ajvDefaults);
  }

  /**
   * The input with the schema's `default`s filled in (a copy: the caller's value is untouched) and
   * its problems. Ajv applies a default where the property is missing, in properties and items,
   * not inside anyOf/oneOf (see its useDefaults).
   */
  withDefaults(schema: object, value: unknown, what: string): { value: unknown; problems: SchemaProblem[] } {
    let validate = this.defaulting.get(schema);
    if (!validate) {
      this.compile(schema, what);
      validate = this.ajvDefaults.compile(schema);
      this.ajvDefaults.removeSchema(schema);
      this.defaulting.set(schema, validate);
    }
    const copy = value === undefined ? undefined : (JSON.parse(JSON.stringify(value)) as unknown);
    return { value: copy, problems: this.problems(validate, copy) };
  }

  /** Compile a schema, refusing an invalid one with BAD_REQUEST naming `what`. */
  compile(schema: unknown, what: string): ValidateFunction {
    if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) {
      throw new EngineError('BAD_REQUEST', `${what} must be a JSON Schema object`, {
        hint: 'For example {"type": "object", "properties": {...}}.',
      });
    }
    const cached = this.validators.get(schema);
    if (cached) return cached;
    let validate: ValidateFunction;
    try {
      validate = this.ajv.compile(schema as object);
    } catch (error) {
      if (error instanceof RegexRefused)
        throw new EngineError('BAD_REQUEST', `${what}: ${error.message}`, {
          hint: error.hint,
          details: { pattern: error.pattern },
        });
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
    this.left = this.limits.celCostMax;
    let valid: boolean;
    try {
      valid = validate(value) as boolean;
    } finally {
      this.left = Infinity;
    }
    if (valid) return [];
    return (validate.errors ?? []).map((e: ErrorObject) => ({
      pointer: e.instancePath === '' ? '/' : e.instancePath,
      message: describe(e),
    }));
  }
}

function describe(e: ErrorObject): string {
  const params = e.params as Record<string, unknown>;
  if (e.keyword === 'additionalProperties')
    return `has no property ${JSON.stringify(params.additionalProperty)} in the schema`;
  if (e.keyword === 'required') return `is missing required property ${JSON.stringify(params.missingProperty)}`;
  return e.message ?? e.keyword;
}
