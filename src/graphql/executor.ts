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
import { EngineError, ERROR_CODES, type ErrorCode, isErrorCode } from '../errors.js';
import type { Limits } from '../limits.js';
import { mapDriverError } from '../storage/driver-errors.js';

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
}

/**
 * Parses and validates GraphQL documents, caching the valid ones by their source text: validation
 * costs ~175 µs against ~17 µs for executing a cached document.
 */
export class DocumentCache {
  private readonly cache = new Map<string, PreparedDocument>();
  private readonly rules: ValidationRule[];

  constructor(
    private readonly schema: GraphQLSchema,
    private readonly limits: Readonly<Limits>,
  ) {
    this.rules = [...specifiedRules, depthLimitRule(limits.queryDepthMax)];
  }

  get size(): number {
    return this.cache.size;
  }

  /** The prepared document, or the errors that stop it from running. */
  prepare(source: unknown): PreparedDocument | { errors: GraphQLError[] } {
    if (typeof source !== 'string' || source.trim() === '') {
      return { errors: [engineGraphqlError(new EngineError('BAD_REQUEST', 'the request has no query', { hint: 'Send {"query": "..."}.' }))] };
    }
    const cached = this.cache.get(source);
    if (cached) return cached;
    const bytes = Buffer.byteLength(source);
    if (bytes > this.limits.documentBytesMax) {
      return {
        errors: [engineGraphqlError(new EngineError('LIMIT_EXCEEDED', `the GraphQL document is ${bytes} bytes; documentBytesMax is ${this.limits.documentBytesMax}`))],
      };
    }
    let document: DocumentNode;
    try {
      document = parse(source, { maxTokens: 50_000 });
    } catch (error) {
      const e = error as GraphQLError;
      return { errors: [new GraphQLError(e.message, { source: e.source, positions: e.positions, extensions: { code: 'GRAPHQL_PARSE_FAILED' } })] };
    }
    const errors = validate(this.schema, document, this.rules);
    if (errors.length > 0) return { errors: [...errors] };
    const prepared = { document };
    if (this.cache.size >= this.limits.documentCacheMax) {
      const oldest = this.cache.keys().next();
      if (!oldest.done) this.cache.delete(oldest.value);
    }
    this.cache.set(source, prepared);
    return prepared;
  }
}

export interface OperationPlan {
  operation: OperationDefinitionNode;
  mode: 'read' | 'write';
  dryRun: boolean;
}

export function planOperation(document: DocumentNode, operationName: string | null | undefined): OperationPlan | GraphQLError {
  const operation = getOperationAST(document, operationName ?? undefined);
  if (!operation) {
    const names = document.definitions.flatMap((d) => (d.kind === Kind.OPERATION_DEFINITION && d.name ? [d.name.value] : []));
    const message = operationName
      ? `the document has no operation named ${JSON.stringify(operationName)}`
      : 'the document has several operations; say which one to run';
    return engineGraphqlError(new EngineError('BAD_REQUEST', message, { hint: names.length ? `Set operationName to one of ${names.join(', ')}.` : undefined }));
  }
  if (operation.operation === 'subscription') {
    return engineGraphqlError(new EngineError('BAD_REQUEST', 'subscriptions are not supported', { hint: 'Use a query or a mutation.' }));
  }
  const dryRun = operation.directives?.some((d) => d.name.value === 'dryRun') ?? false;
  return { operation, mode: operation.operation === 'mutation' ? 'write' : 'read', dryRun };
}

/** Run a prepared document; the caller owns the transaction. */
export function executePrepared(
  schema: GraphQLSchema,
  prepared: PreparedDocument,
  request: GraphqlRequest,
  contextValue: unknown,
): ExecutionResult {
  return executeSync({
    schema,
    document: prepared.document,
    rootValue: {},
    contextValue,
    variableValues: request.variables ?? undefined,
    operationName: request.operationName ?? undefined,
  });
}

/** Limit selection-set nesting (through fragments too), so one request cannot fan out without bound. */
export function depthLimitRule(depthMax: number): ValidationRule {
  return (context: ValidationContext) => {
    const fragments = new Map<string, FragmentDefinitionNode>();
    for (const def of context.getDocument().definitions) {
      if (def.kind === Kind.FRAGMENT_DEFINITION) fragments.set(def.name.value, def);
    }
    const depthOf = (set: SelectionSetNode, seen: Set<string>): number => {
      let deepest = 0;
      for (const selection of set.selections) {
        if (selection.kind === Kind.FIELD) {
          deepest = Math.max(deepest, selection.selectionSet ? 1 + depthOf(selection.selectionSet, seen) : 1);
        } else if (selection.kind === Kind.INLINE_FRAGMENT) {
          deepest = Math.max(deepest, depthOf(selection.selectionSet, seen));
        } else {
          const fragment = fragments.get(selection.name.value);
          if (fragment && !seen.has(fragment.name.value)) {
            deepest = Math.max(deepest, depthOf(fragment.selectionSet, new Set([...seen, fragment.name.value])));
          }
        }
      }
      return deepest;
    };
    return {
      OperationDefinition(node) {
        const depth = depthOf(node.selectionSet, new Set());
        if (depth > depthMax) {
          context.reportError(
            new GraphQLError(`the operation is nested ${depth} levels deep; queryDepthMax is ${depthMax}`, {
              nodes: [node],
              extensions: { code: 'LIMIT_EXCEEDED', hint: 'Split the query, or select fewer nested relations.' },
            }),
          );
        }
      },
    };
  };
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
  } else if (isErrorCode(error.extensions.code)) {
    const code = error.extensions.code as ErrorCode;
    extensions = { hint: ERROR_CODES[code].hint, retryable: ERROR_CODES[code].retryable, ...error.extensions };
  } else if (/^Variable "\$/.test(error.message)) {
    extensions = { code: 'BAD_REQUEST', retryable: false, hint: 'Check the variables against the types the operation declares.' };
  } else if (error.message.includes('Validation aborted')) {
    extensions = { code: 'LIMIT_EXCEEDED', retryable: false, hint: 'The document has too many errors to report; fix the first ones.' };
  } else if (original !== undefined && !(original instanceof GraphQLError)) {
    log?.(original);
    extensions = { code: 'INTERNAL', retryable: true, hint: ERROR_CODES.INTERNAL.hint };
  } else {
    extensions = { code: 'GRAPHQL_VALIDATION_FAILED', retryable: false, hint: ERROR_CODES.GRAPHQL_VALIDATION_FAILED.hint };
  }
  return { ...formatted, message, extensions };
}
