import {
  type DocumentNode,
  executeSync,
  type ExecutionResult,
  type FragmentDefinitionNode,
  getOperationAST,
  GraphQLError,
  type GraphQLFormattedError,
  type GraphQLSchema,
  Kind,
  type OperationDefinitionNode,
  parse,
  type SelectionSetNode,
  specifiedRules,
  validate,
  type ValidationContext,
  type ValidationRule,
} from 'graphql';
import type { Cel } from '../cel/cel.js';
import { EngineError, ERROR_CODES, type ErrorCode, isErrorCode, limitExceeded } from '../errors.js';
import type { Limits } from '../limits.js';
import { mapDriverError } from '../storage/driver-errors.js';
import { type CelDefault, celDefaultValues, extractCelDefaults } from './cel-variables.js';
import { evaluateDocument } from './evaluate.js';
import { countFieldComparisons, countFields } from './document-shape.js';
import { type CostOptions, listBounds, type OperationCost, operationCost } from './query-cost.js';

export interface GraphqlRequest {
  query: string;
  variables?: Record<string, unknown> | null;
  operationName?: string | null;
}

export interface FormattedResult {
  data?: Record<string, unknown> | null;
  errors?: GraphQLFormattedError[];
}

/** A document that parsed and validated, ready to run any number of times. */
export interface PreparedDocument {
  document: DocumentNode;
  /**
   * Operations whose cost depends on a variable and may be over queryCostMax: each request's
   * variables are costed again before it runs (see executePrepared).
   */
  costedPerRequest: ReadonlySet<OperationDefinitionNode>;
  /** Estimated heap the cached document holds (see estimateDocumentBytes). */
  bytes: number;
  /** `@cel` variable defaults by operation name (null: the anonymous operation). */
  celDefaults?: ReadonlyMap<string | null, CelDefault[]>;
}

/**
 * Parses and validates GraphQL documents, caching the valid ones by their source text: validation
 * costs ~175 µs against ~17 µs for executing a cached document. Every step is bounded before it
 * runs: bytes, then tokens (while parsing), then fields, then graphql-js's rules (the depth rule
 * and the cost are linear in the document), and the cache by entries and by estimated bytes.
 */
export class DocumentCache {
  private readonly cache = new Map<string, PreparedDocument>();
  private readonly rules: ValidationRule[];
  private readonly costOptions: CostOptions;
  private cachedBytes = 0;

  constructor(
    private readonly schema: GraphQLSchema,
    private readonly limits: Readonly<Limits>,
  ) {
    this.rules = [...specifiedRules, depthLimitRule(limits.queryDepthMax)];
    this.costOptions = costOptions(limits);
  }

  get size(): number {
    return this.cache.size;
  }

  /** Estimated heap held by the cached documents. */
  get bytes(): number {
    return this.cachedBytes;
  }

  /**
   * The document's syntax tree without validating it: the cached one, or a parse within the same
   * bounds (bytes, tokens, fields, field comparisons), neither validated nor cached. For telling a
   * query from a mutation where the request will be validated elsewhere (a read thread); undefined
   * when it does not parse.
   */
  peek(source: unknown): DocumentNode | undefined {
    if (typeof source !== 'string') return undefined;
    const cached = this.cache.get(source);
    if (cached) return cached.document;
    const parsed = parseBounded(source, this.limits);
    return parsed instanceof GraphQLError ? undefined : parsed.document;
  }

  /** The prepared document, or the errors that stop it from running. */
  prepare(source: unknown): PreparedDocument | { errors: GraphQLError[] } {
    if (typeof source !== 'string' || source.trim() === '') {
      return {
        errors: [
          engineGraphqlError(
            new EngineError('BAD_REQUEST', 'the request has no query', { hint: 'Send {"query": "..."}.' }),
          ),
        ],
      };
    }
    const cached = this.cache.get(source);
    if (cached) {
      // Most recently used last: eviction takes the first.
      this.cache.delete(source);
      this.cache.set(source, cached);
      return cached;
    }
    const parsed = parseBounded(source, this.limits);
    if (parsed instanceof GraphQLError) return { errors: [parsed] };
    const { fields } = parsed;
    const { document, defaults } = extractCelDefaults(parsed.document);
    const invalid = validate(this.schema, document, this.rules);
    if (invalid.length > 0) return { errors: this.located(source, invalid) };
    const costedPerRequest = this.costOperations(document);
    if (costedPerRequest instanceof GraphQLError) return { errors: [costedPerRequest] };
    const prepared: PreparedDocument = {
      document,
      costedPerRequest,
      bytes: estimateDocumentBytes(source, document, fields),
    };
    if (defaults.size > 0) prepared.celDefaults = defaults;
    this.remember(source, prepared);
    return prepared;
  }

  /** The validation errors again from a parse with locations (the cached form has none), so they say where. */
  private located(source: string, errors: readonly GraphQLError[]): GraphQLError[] {
    try {
      return [
        ...validate(
          this.schema,
          extractCelDefaults(parse(source, { maxTokens: this.limits.documentTokensMax })).document,
          this.rules,
        ),
      ];
    } catch {
      return [...errors];
    }
  }

  /**
   * Cost each operation with its variables not known yet (a variable `first` counts as
   * pageSizeMax). One over queryCostMax is refused, unless a variable decides: then it is costed
   * again with each request's variables, as is one whose cost without them is only a lower bound.
   */
  private costOperations(document: DocumentNode): Set<OperationDefinitionNode> | GraphQLError {
    const costedPerRequest = new Set<OperationDefinitionNode>();
    const fragments = fragmentsOf(document);
    for (const definition of document.definitions) {
      if (definition.kind !== Kind.OPERATION_DEFINITION) continue;
      const cost = operationCost(this.schema, fragments, definition, null, this.costOptions);
      const over = cost.cost > this.limits.queryCostMax;
      if (over && !cost.variables) return costError(cost, this.limits.queryCostMax, definition);
      if (over || (cost.variables && cost.lowerBound)) costedPerRequest.add(definition);
    }
    return costedPerRequest;
  }

  /** Cache the document, evicting the least recently used until entries and bytes fit. */
  private remember(source: string, prepared: PreparedDocument): void {
    const { documentCacheMax, documentCacheBytesMax } = this.limits;
    if (prepared.bytes > documentCacheBytesMax || documentCacheMax === 0) return;
    for (const [key, oldest] of this.cache) {
      if (this.cache.size < documentCacheMax && this.cachedBytes + prepared.bytes <= documentCacheBytesMax) break;
      this.cache.delete(key);
      this.cachedBytes -= oldest.bytes;
    }
    this.cache.set(source, prepared);
    this.cachedBytes += prepared.bytes;
  }
}

/**
 * Heap a cached document holds, estimated. Measured (heap after GC, source included) on cached
 * documents of every shape the bounds let through: fields ~230 B each, aliases, fragment spreads,
 * directives, literals (one-element lists ~110 B a token, the densest), GraphiQL's introspection
 * query (~19 KB), a typical query (~8 KB). The estimate was 1.1-3× the measured heap, never below.
 */
export function estimateDocumentBytes(source: string, document: DocumentNode, fields: number): number {
  const tokens = document.tokenCount ?? source.length;
  return 1024 + 120 * tokens + 160 * fields + 2 * source.length;
}

/**
 * Parse within the document bounds, each checked before the work it bounds: bytes before parsing,
 * tokens while parsing, fields and field comparisons before graphql-js's rules run.
 */
function parseBounded(
  source: string,
  limits: Readonly<Limits>,
): { document: DocumentNode; fields: number } | GraphQLError {
  const bytes = Buffer.byteLength(source);
  if (bytes > limits.documentBytesMax) {
    return limitError(
      'documentBytesMax',
      limits.documentBytesMax,
      bytes,
      `the GraphQL document is ${bytes} bytes; documentBytesMax is ${limits.documentBytesMax}`,
    );
  }
  let document: DocumentNode;
  try {
    // Without locations the cached AST holds no tokens (over half its heap); a syntax error still
    // has its location (from the source).
    document = parse(source, { noLocation: true, maxTokens: limits.documentTokensMax });
  } catch (error) {
    return parseError(error, limits.documentTokensMax, limits.queryDepthMax);
  }
  const fields = countFields(document);
  if (fields > limits.documentFieldsMax) {
    return limitError(
      'documentFieldsMax',
      limits.documentFieldsMax,
      fields,
      `the GraphQL document selects ${fields} fields; documentFieldsMax is ${limits.documentFieldsMax}`,
      'Send fewer fields or aliases per request, or split the request.',
    );
  }
  if (countFieldComparisons(document, limits.fieldComparisonsMax) > limits.fieldComparisonsMax) {
    return limitError(
      'fieldComparisonsMax',
      limits.fieldComparisonsMax,
      null,
      `validating the GraphQL document would compare more than ${limits.fieldComparisonsMax} pairs of fields (fieldComparisonsMax)`,
      'Select each field once per selection set: do not repeat a field or alias (and what is beneath it) many times, nor spread many fragments with the same fields side by side.',
    );
  }
  return { document, fields };
}

function parseError(error: unknown, tokensMax: number, depthMax: number): GraphQLError {
  if (error instanceof RangeError) {
    return limitError(
      'queryDepthMax',
      depthMax,
      null,
      'the GraphQL document is nested too deeply to parse',
      'Nest selections at most queryDepthMax deep, and send deeply nested values as variables.',
    );
  }
  const e = error as GraphQLError;
  // graphql-js 16 says "more that" (sic).
  if (/Document contains more tha[nt] \d+ tokens/.test(e.message)) {
    return limitError(
      'documentTokensMax',
      tokensMax,
      null,
      `the GraphQL document has more than ${tokensMax} tokens; documentTokensMax is ${tokensMax}`,
      'Send a shorter document: fewer fields and aliases, and values as variables rather than inline.',
    );
  }
  return new GraphQLError(e.message, {
    source: e.source,
    positions: e.positions,
    extensions: { code: 'GRAPHQL_PARSE_FAILED' },
  });
}

function limitError(
  limit: string,
  max: number,
  actual: number | null,
  message: string,
  hint?: string,
  details?: Record<string, unknown>,
): GraphQLError {
  return engineGraphqlError(
    limitExceeded(limit, max, actual, message, { ...(hint ? { hint } : {}), ...(details ? { details } : {}) }),
  );
}

function fragmentsOf(document: DocumentNode): Map<string, FragmentDefinitionNode> {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions) {
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  }
  return fragments;
}

function costOptions(limits: Readonly<Limits>): CostOptions {
  return { pageSizeMax: limits.pageSizeMax, lists: listBounds(limits), costMax: limits.queryCostMax };
}

function costError(
  { cost, lowerBound }: OperationCost,
  costMax: number,
  operation: OperationDefinitionNode,
): GraphQLError {
  const name = operation.name ? ` ${operation.name.value}` : '';
  return limitError(
    'queryCostMax',
    costMax,
    cost,
    `the operation${name} costs ${lowerBound ? 'more than ' : ''}${cost}; queryCostMax is ${costMax}`,
    'Each field costs 1, and the fields under a connection count once per `first`: ask for a smaller `first`, nest fewer connections, and follow pageInfo.endCursor for the next page.',
    { cost, queryCostMax: costMax },
  );
}

export interface OperationPlan {
  operation: OperationDefinitionNode;
  mode: 'read' | 'write';
  dryRun: boolean;
  /** The budget it asked for with @budget (STANDARD when it did not). */
  budget: RequestBudget;
}

/** How long a request may run: requestDeadlineMs, or operatorDeadlineMs for an operator's long work (see @budget). */
export type RequestBudget = 'STANDARD' | 'OPERATOR';

/** The budget an operation names with `@budget(name: …)`: an enum literal (validation checked its type). */
function budgetOf(operation: OperationDefinitionNode): RequestBudget | GraphQLError {
  const directive = operation.directives?.find((d) => d.name.value === 'budget');
  if (!directive) return 'STANDARD';
  const value = directive.arguments?.find((a) => a.name.value === 'name')?.value;
  if (value?.kind === Kind.ENUM) return value.value as RequestBudget;
  return engineGraphqlError(
    new EngineError('BAD_REQUEST', '@budget(name:) takes a literal budget name, not a variable', {
      hint: 'Write the budget in the document: @budget(name: OPERATOR).',
    }),
  );
}

export function planOperation(
  document: DocumentNode,
  operationName: string | null | undefined,
): OperationPlan | GraphQLError {
  const operation = getOperationAST(document, operationName ?? undefined);
  if (!operation) {
    const names = document.definitions.flatMap((d) =>
      d.kind === Kind.OPERATION_DEFINITION && d.name ? [d.name.value] : [],
    );
    const message = operationName
      ? `the document has no operation named ${JSON.stringify(operationName)}`
      : 'the document has several operations; say which one to run';
    return engineGraphqlError(
      new EngineError('BAD_REQUEST', message, {
        hint: names.length ? `Set operationName to one of ${names.join(', ')}.` : undefined,
      }),
    );
  }
  if (operation.operation === 'subscription') {
    return engineGraphqlError(
      new EngineError('BAD_REQUEST', 'subscriptions are not supported', { hint: 'Use a query or a mutation.' }),
    );
  }
  const dryRun = operation.directives?.some((d) => d.name.value === 'dryRun') ?? false;
  const budget = budgetOf(operation);
  if (typeof budget !== 'string') return budget;
  return { operation, mode: operation.operation === 'mutation' ? 'write' : 'read', dryRun, budget };
}

/**
 * Run a prepared document; the caller owns the transaction. An operation whose cost depends on
 * variables is costed with this request's first (before any resolver runs), and a result over
 * resultBytesMax is replaced by LIMIT_EXCEEDED (a mutation then rolls back, as for any error).
 */
export function executePrepared(
  schema: GraphQLSchema,
  prepared: PreparedDocument,
  request: GraphqlRequest,
  contextValue: unknown,
  limits: Readonly<Limits>,
): ExecutionResult {
  if (prepared.celDefaults) {
    const operation = getOperationAST(prepared.document, request.operationName ?? undefined);
    const defaults = operation ? prepared.celDefaults.get(operation.name?.value ?? null) : undefined;
    if (defaults) {
      try {
        // Evaluating CEL is running the native cel tool: the same policy as evaluate() allows it.
        const ctx = contextValue as {
          cel: Cel;
          authority?: { check(op: { action: 'INSERT'; resource: string; document: unknown }): void };
        };
        const sent = request.variables ?? {};
        for (const { name, expression } of defaults) {
          if (Object.hasOwn(sent, name) && sent[name] !== undefined) continue;
          ctx.authority?.check({
            action: 'INSERT',
            resource: 'actions.Execution',
            document: evaluateDocument({ expression }),
          });
        }
        request = { ...request, variables: celDefaultValues(ctx.cel, defaults, request.variables ?? {}) };
      } catch (error) {
        return { errors: [engineGraphqlError(error as EngineError)] };
      }
    }
  }
  if (prepared.costedPerRequest.size > 0) {
    const operation = getOperationAST(prepared.document, request.operationName ?? undefined);
    if (operation && prepared.costedPerRequest.has(operation)) {
      const variables = request.variables ?? {};
      const cost = operationCost(schema, fragmentsOf(prepared.document), operation, variables, costOptions(limits));
      if (cost.cost > limits.queryCostMax) return { errors: [costError(cost, limits.queryCostMax, operation)] };
    }
  }
  const result = executeSync({
    schema,
    document: prepared.document,
    rootValue: {},
    contextValue,
    variableValues: request.variables ?? undefined,
    operationName: request.operationName ?? undefined,
  });
  if (resultSize(result, limits.resultBytesMax) <= limits.resultBytesMax) return result;
  const error = limitError(
    'resultBytesMax',
    limits.resultBytesMax,
    null,
    `the result is over ${limits.resultBytesMax} bytes; resultBytesMax is ${limits.resultBytesMax}`,
    'Ask for fewer fields or a smaller `first`, and follow pageInfo.endCursor for the next page; large JSON values (outputs, metadata) count too.',
    { resultBytesMax: limits.resultBytesMax },
  );
  return { errors: [error] };
}

/**
 * The size of the result as JSON, in characters (escapes not counted; an error ~256 + its message),
 * counting stops once past `max`. A walk without building the string: the HTTP server serialises
 * the result once, later.
 */
export function resultSize(result: ExecutionResult, max: number): number {
  let size = 0;
  const stack: unknown[] = [result.data];
  for (const error of result.errors ?? []) size += 256 + error.message.length + 16 * (error.path?.length ?? 0);
  while (stack.length > 0 && size <= max) {
    const value = stack.pop();
    if (typeof value === 'string') size += value.length + 2;
    else if (typeof value === 'number' || typeof value === 'bigint') size += 24;
    else if (value === null || typeof value !== 'object') size += 5;
    else if (Array.isArray(value)) {
      size += 2 + value.length;
      for (const item of value) stack.push(item);
    } else {
      for (const key in value) {
        size += key.length + 4;
        stack.push((value as Record<string, unknown>)[key]);
      }
      size += 2;
    }
  }
  return size;
}

/** The introspection entry points; only the query type has them (Mutation.queries included). */
const META_FIELDS: ReadonlySet<string> = new Set(['__schema', '__type']);

/**
 * Limit selection-set nesting (through fragments too), so one request cannot fan out without bound.
 * A fragment's depth is computed once: `fragment Fi { name ...Fi+1 ...Fi+1 }` is linear, not 2^k.
 *
 * The meta fields `__schema` and `__type`, and everything below them, do not count: GraphiQL's
 * introspection query is 15 levels deep (`ofType` nested 8 times), and introspection only reads the
 * schema, which is public. It has bounds of its own: graphql-js's MaxIntrospectionDepthRule (in
 * specifiedRules) stops `fields`, `interfaces`, `possibleTypes` and `inputFields` nesting past 3,
 * which is every way back to a type, and the cost (query-cost.ts) counts it against the schema.
 */
export function depthLimitRule(depthMax: number): ValidationRule {
  return (context: ValidationContext) => {
    const fragments = fragmentsOf(context.getDocument());
    const fragmentDepths = new Map<string, number>();
    const inProgress = new Set<string>();
    const depthOfFragment = (name: string): number => {
      const known = fragmentDepths.get(name);
      if (known !== undefined) return known;
      const fragment = fragments.get(name);
      // A cycle is NoFragmentCyclesRule's to report; here it adds nothing.
      if (!fragment || inProgress.has(name)) return 0;
      inProgress.add(name);
      const depth = depthOf(fragment.selectionSet);
      inProgress.delete(name);
      fragmentDepths.set(name, depth);
      return depth;
    };
    const depthOf = (set: SelectionSetNode): number => {
      let deepest = 0;
      for (const selection of set.selections) {
        if (selection.kind === Kind.FIELD) {
          if (META_FIELDS.has(selection.name.value)) continue;
          deepest = Math.max(deepest, selection.selectionSet ? 1 + depthOf(selection.selectionSet) : 1);
        } else if (selection.kind === Kind.INLINE_FRAGMENT) {
          deepest = Math.max(deepest, depthOf(selection.selectionSet));
        } else {
          deepest = Math.max(deepest, depthOfFragment(selection.name.value));
        }
      }
      return deepest;
    };
    return {
      OperationDefinition(node) {
        const depth = depthOf(node.selectionSet);
        if (depth > depthMax) {
          context.reportError(
            new GraphQLError(`the operation is nested ${depth} levels deep; queryDepthMax is ${depthMax}`, {
              nodes: [node],
              extensions: {
                code: 'LIMIT_EXCEEDED',
                hint: 'Split the query, or select fewer nested relations.',
                details: { limit: 'queryDepthMax', max: depthMax, actual: depth },
              },
            }),
          );
        }
      },
    };
  };
}

/** The answer of a request that an EngineError stopped before it ran (a full queue, a dead thread). */
export function errorAnswer(error: EngineError): FormattedResult {
  return { data: null, errors: [formatError(engineGraphqlError(error))] };
}

export function engineGraphqlError(error: EngineError): GraphQLError {
  return new GraphQLError(error.message, { originalError: error, extensions: error.extensions });
}

/**
 * The wire shape of an error: message, locations, path, and `extensions.code` from the closed list
 * with a `hint`. Driver errors are mapped; anything unexpected is INTERNAL.
 */
export function formatError(error: GraphQLError, log?: (error: unknown) => void): GraphQLFormattedError {
  const formatted = error.toJSON();
  const original = error.originalError === undefined ? undefined : mapDriverError(error.originalError);
  let extensions: Record<string, unknown>;
  let message = formatted.message;
  if (original instanceof EngineError) {
    extensions = original.extensions;
    if (error.originalError !== original) message = original.message;
    // A bug the engine caught itself (bug(), assert()) is reported as any other internal error is.
    if (original.code === 'INTERNAL') log?.(original);
  } else if (isErrorCode(error.extensions.code)) {
    const code = error.extensions.code as ErrorCode;
    extensions = { hint: ERROR_CODES[code].hint, retryable: ERROR_CODES[code].retryable, ...error.extensions };
  } else if (/^Variable "\$/.test(error.message)) {
    extensions = {
      code: 'BAD_REQUEST',
      retryable: false,
      hint: 'Check the variables against the types the operation declares.',
    };
  } else if (error.message.includes('Validation aborted')) {
    extensions = {
      code: 'LIMIT_EXCEEDED',
      retryable: false,
      hint: 'The document has too many errors to report; fix the first ones.',
    };
  } else if (original !== undefined && !(original instanceof GraphQLError)) {
    log?.(original);
    extensions = { code: 'INTERNAL', retryable: true, hint: ERROR_CODES.INTERNAL.hint };
  } else {
    extensions = {
      code: 'GRAPHQL_VALIDATION_FAILED',
      retryable: false,
      hint: ERROR_CODES.GRAPHQL_VALIDATION_FAILED.hint,
    };
  }
  if (typeof extensions.retryable === 'boolean' && extensions.retriableError === undefined)
    extensions = { ...extensions, retriableError: extensions.retryable };
  return { ...formatted, message, extensions };
}
