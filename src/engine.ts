import type { ExecutionResult, GraphQLSchema } from 'graphql';
import { EngineError } from './errors.js';
import { mapDriverError } from './storage/driver-errors.js';
import { Cel } from './cel/cel.js';
import { type Clock, systemClock } from './clock.js';
import type { RequestContext } from './graphql/context.js';
import {
  DocumentCache,
  engineGraphqlError,
  executePrepared,
  type FormattedResult,
  formatError,
  type GraphqlRequest,
  planOperation,
} from './graphql/executor.js';
import { buildSchema } from './graphql/schema.js';
import type { LedgerDeps } from './ledger/deps.js';
import { Ledger } from './ledger/ledger.js';
import { type Limits, resolveLimits } from './limits.js';
import { type Db, openDatabase } from './storage/database.js';
import { ledgerStatements } from './storage/statements/ledger.js';
import { TransactionManager } from './storage/transaction.js';

export interface EngineOptions {
  /** SQLite file, or ':memory:' (the default). */
  path?: string;
  limits?: Partial<Limits>;
  clock?: Clock;
  /** Where unexpected (INTERNAL) errors are reported. Default: console.error. */
  logError?: (error: unknown) => void;
}

export interface Engine {
  readonly limits: Readonly<Limits>;
  readonly ledger: Ledger;
  /** Run one GraphQL request as one SQLite transaction. */
  graphql(query: string, variables?: Record<string, unknown> | null, options?: { operationName?: string | null }): FormattedResult;
  execute(request: GraphqlRequest): FormattedResult;
  /** 'query' or 'mutation' for a document that validates; undefined otherwise. */
  operationType(request: GraphqlRequest): 'query' | 'mutation' | undefined;
  close(): void;
  /** Cache sizes, so tests can check that caches stay within their limits. */
  stats(): { documentCacheSize: number; celCacheSize: number };
  /** The raw connection, for tests and benchmarks that check the database directly. */
  readonly db: Db;
}

/**
 * The composition root: opens the database, builds every part and wires them together. Usable
 * in-process without HTTP; the server and the CLI are thin layers over it.
 */
export function createEngine(options: EngineOptions = {}): Engine {
  const limits = resolveLimits(options.limits);
  const clock = options.clock ?? systemClock;
  const logError = options.logError ?? ((error: unknown) => console.error('tally: internal error', error));
  const db = openDatabase({ path: options.path ?? ':memory:', busyTimeoutMs: limits.busyTimeoutMs });
  const transactions = new TransactionManager(db);
  const cel = new Cel(clock, limits);
  const deps: LedgerDeps = { st: ledgerStatements(db), cel, clock, limits };
  const ledger = new Ledger(deps);
  const schema: GraphQLSchema = buildSchema();
  const documents = new DocumentCache(schema, limits);
  const context: RequestContext = { ledger, cel, limits };

  function execute(request: GraphqlRequest): FormattedResult {
    const prepared = documents.prepare(request.query);
    if ('errors' in prepared) return { errors: prepared.errors.map((e) => formatError(e, logError)) };
    const plan = planOperation(prepared.document, request.operationName);
    if (!('mode' in plan)) return { errors: [formatError(plan, logError)] };

    // A mutation with any error rolls back whole (data: null); @dryRun always rolls back.
    let result: ExecutionResult;
    try {
      result = transactions.run(plan.mode, () => {
        const executed = executePrepared(schema, prepared, request, context);
        const failed = (executed.errors?.length ?? 0) > 0;
        const commit = plan.mode === 'read' || (!failed && !plan.dryRun);
        return { value: plan.mode === 'write' && failed ? { errors: executed.errors } : executed, commit };
      });
    } catch (error) {
      const mapped = mapDriverError(error);
      const engineError = mapped instanceof EngineError ? mapped : new EngineError('INTERNAL', String((mapped as Error)?.message ?? mapped), { cause: mapped });
      if (engineError.code === 'INTERNAL') logError(error);
      return { data: null, errors: [formatError(engineGraphqlError(engineError), logError)] };
    }
    const formatted: FormattedResult = {};
    if (result.errors?.length) formatted.errors = result.errors.map((e) => formatError(e, logError));
    formatted.data = (result as { data?: Record<string, unknown> | null }).data ?? null;
    return formatted;
  }

  function operationType(request: GraphqlRequest): 'query' | 'mutation' | undefined {
    const prepared = documents.prepare(request.query);
    if ('errors' in prepared) return undefined;
    const plan = planOperation(prepared.document, request.operationName);
    return 'mode' in plan ? (plan.mode === 'write' ? 'mutation' : 'query') : undefined;
  }

  return {
    limits,
    operationType,
    ledger,
    db,
    execute,
    graphql: (query, variables, opts) => execute({ query, variables: variables ?? null, operationName: opts?.operationName ?? null }),
    close: () => db.close(),
    stats: () => ({ documentCacheSize: documents.size, celCacheSize: cel.size }),
  };
}
