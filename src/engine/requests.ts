import type { DocumentNode, ExecutionResult, GraphQLSchema } from 'graphql';
import { type ClientDeps, SYSTEM_PRINCIPAL } from '../auth/clients.js';
import type { Cel } from '../cel/cel.js';
import { EngineError, type ErrorData, isErrorCode } from '../errors.js';
import type { CallFrame, Caller } from '../execution/call-tree.js';
import { authorityOf } from '../execution/call-rules.js';
import type { ExecutionServices, NestedGraphqlResult } from '../execution/services.js';
import type { ExecutionWaits } from '../execution/waits.js';
import type { ExecutionWait, RequestContext } from '../graphql/context.js';
import { operationTraits, waitProbe } from '../graphql/document-shape.js';
import {
  type DocumentCache,
  engineGraphqlError,
  executePrepared,
  type FormattedResult,
  formatError,
  type GraphqlRequest,
  type OperationPlan,
  planOperation,
  type PreparedDocument,
} from '../graphql/executor.js';
import type { Ledger } from '../ledger/ledger.js';
import type { Limits } from '../limits.js';
import { mapDriverError } from '../storage/driver-errors.js';
import type { TransactionManager } from '../storage/transaction.js';
import type { Callers } from './callers.js';
import type { EngineEvents } from './events.js';
import type { AsyncRequestOptions, BatchRequest, OperationSummary, RequestOptions, WaitOptions } from './types.js';

/** What the request runtime runs requests with, passed explicitly (see createEngine). */
export interface RequestDeps {
  schema: GraphQLSchema;
  documents: DocumentCache;
  transactions: TransactionManager;
  limits: Readonly<Limits>;
  cel: Cel;
  ledger: Ledger;
  services: ExecutionServices;
  clients: ClientDeps;
  callers: Callers;
  waits: ExecutionWaits;
  events: EngineEvents;
  /** Counts commits that wrote actions or clients (watchToolTables). */
  toolsChange: { readonly writes: number; changedSince(writes: number): boolean };
  logError(error: unknown): void;
}

type Ready = { prepared: PreparedDocument; plan: OperationPlan };
type Unit = () => { value: ExecutionResult | EngineError; commit: boolean };

/**
 * The request runtime: a GraphQL request as one transaction (execute), a group of them as one
 * transaction with a savepoint each (executeGroup, executeBatch), a query that waits on executions
 * (executeAsync), and a program's graphql() call inside its caller's transaction (runNested). Every
 * path reads the caller inside its transaction (Callers) and runs under its budget's deadline.
 */
export class Requests {
  constructor(private readonly deps: RequestDeps) {}

  execute(request: GraphqlRequest, options: RequestOptions = {}, waits?: ExecutionWait[]): FormattedResult {
    const ready = this.prepare(request);
    if (!('plan' in ready)) return ready;
    const { plan } = ready;
    const { transactions, toolsChange } = this.deps;
    let result: ExecutionResult | EngineError;
    const toolWritesBefore = toolsChange.writes;
    try {
      result = transactions.run<ExecutionResult | EngineError>(plan.mode, this.unit(request, ready, options, waits));
    } catch (error) {
      return this.failedAnswer(error);
    }
    if (plan.mode === 'write' && !plan.dryRun && !(result instanceof EngineError) && !result.errors?.length)
      this.notifyToolsChanged(toolWritesBefore);
    return this.answer(result);
  }

  /**
   * Group commit: the requests in one write transaction, a savepoint each, committed once (see
   * TransactionManager.runBatch), up to writeBatchMax requests and writeBatchWaitMs of work; the
   * answers of the requests it did not get to are undefined (run them in a next group). Each
   * answer holds only once the group committed: a COMMIT that fails fails every request of the
   * group with a retryable error, and nothing of them was written.
   */
  executeGroup(requests: ReadonlyArray<BatchRequest>): Array<FormattedResult | undefined> {
    const answers: Array<FormattedResult | undefined> = Array.from({ length: requests.length }, () => undefined);
    const units: Unit[] = [];
    const unitOf: number[] = [];
    const readies: Array<Ready | undefined> = [];
    for (const [i, { request, options }] of requests.entries()) {
      const ready = this.prepare(request);
      if (!('plan' in ready)) {
        answers[i] = ready;
        continue;
      }
      readies[i] = ready;
      units.push(this.unit(request, ready, options ?? {}));
      unitOf.push(i);
    }
    if (units.length === 0) return answers;
    const toolWritesBefore = this.deps.toolsChange.writes;
    const outcomes = this.deps.transactions.runBatch(units, this.groupBound(requests, readies, unitOf));
    let kept = false;
    for (const [u, outcome] of outcomes.entries()) {
      const i = unitOf[u]!;
      if (outcome.status === 'not-run') continue;
      if (outcome.status === 'failed') {
        answers[i] = this.failedAnswer(outcome.commitFailed ? groupCommitFailed(outcome.error) : outcome.error);
        continue;
      }
      if (outcome.status === 'committed' && !(outcome.value instanceof EngineError) && !outcome.value.errors?.length)
        kept = true;
      answers[i] = this.answer(outcome.value);
    }
    const committed = outcomes.every((o) => o.status !== 'failed' || !o.commitFailed);
    // Listeners run after the COMMIT: one that throws is reported, never turned into the requests' error.
    if (kept && committed) this.notifyToolsChanged(toolWritesBefore);
    this.deps.events.emit('batch', outcomes.filter((o) => o.status !== 'not-run').length);
    return answers;
  }

  /** executeGroup until every request ran (Engine.executeBatch). */
  executeBatch(requests: ReadonlyArray<BatchRequest>): FormattedResult[] {
    const answers: FormattedResult[] = new Array(requests.length);
    let pending = requests.map((_, i) => i);
    while (pending.length > 0) {
      const group = this.executeGroup(pending.map((i) => requests[i]!));
      const next: number[] = [];
      for (let g = 0; g < group.length; g++) {
        const answer = group[g];
        if (answer === undefined) next.push(pending[g]!);
        else answers[pending[g]!] = answer;
      }
      pending = next;
    }
    return answers;
  }

  /** The executions a query asks to wait on (Engine.executionWaits). */
  executionWaits(request: GraphqlRequest, options: RequestOptions = {}): ExecutionWait[] {
    const ready = this.prepare(request);
    if (!('plan' in ready) || ready.plan.mode !== 'read') return [];
    const probe = waitProbe(ready.prepared.document, ready.plan.operation);
    if (probe === null) return [];
    const waits: ExecutionWait[] = [];
    // Its answer is of no use (the request runs after the waits); its errors are the request's own, told then.
    this.execute(
      { query: probe, variables: request.variables ?? null, operationName: ready.plan.operation.name?.value ?? null },
      options,
      waits,
    );
    return waits;
  }

  /** Wait for each of `waits`, all within one deadline (Engine.awaitExecutions). */
  async awaitExecutions(waits: ReadonlyArray<ExecutionWait>, { signal, waitMsMax }: WaitOptions = {}): Promise<void> {
    if (waits.length === 0) return;
    const started = Date.now();
    const longest = Math.max(...waits.map((w) => w.waitMs));
    const deadline = started + Math.min(longest, waitMsMax ?? longest);
    for (const wait of waits) {
      const left = Math.min(deadline, started + wait.waitMs) - Date.now();
      if (left <= 0 || signal?.aborted) continue;
      await this.deps.waits.wait(wait.executionId, left, signal, wait.principal, wait.progressAfter);
    }
  }

  async executeAsync(request: GraphqlRequest, options: AsyncRequestOptions = {}): Promise<FormattedResult> {
    const { signal, waitMsMax, ...requestOptions } = options;
    const waits = this.executionWaits(request, requestOptions);
    if (waits.length > 0)
      await this.awaitExecutions(waits, {
        ...(signal ? { signal } : {}),
        ...(waitMsMax === undefined ? {} : { waitMsMax }),
      });
    // Once, after the waits: the answer as it is now.
    return this.execute(request, requestOptions);
  }

  /** A GraphQL operation a call makes: same transaction, its own savepoint (taken by the caller). */
  runNested(request: GraphqlRequest, frame: CallFrame): NestedGraphqlResult {
    const { documents, schema, limits, logError } = this.deps;
    const prepared = documents.prepare(request.query);
    if ('errors' in prepared)
      return { data: null, errors: prepared.errors.map((e) => toErrorData(formatError(e, logError))), dryRun: false };
    const plan = planOperation(prepared.document, request.operationName);
    if (!('mode' in plan)) return { data: null, errors: [toErrorData(formatError(plan, logError))], dryRun: false };
    if (plan.budget !== 'STANDARD') {
      // A call runs inside its request, under that request's deadline: it cannot choose another.
      const refused = new EngineError(
        'BAD_REQUEST',
        `@budget(name: ${plan.budget}) names a request's budget; a graphql() call runs inside its request's`,
        { hint: 'Leave out @budget here; send the whole request under the budget instead.' },
      );
      return { data: null, errors: [refused.toData()], dryRun: false };
    }
    const context = this.context(frame.root.caller, frame, plan.dryRun);
    const executed = executePrepared(schema, prepared, request, context, limits);
    return {
      data: (executed.data as Record<string, unknown> | null | undefined) ?? null,
      errors: (executed.errors ?? []).map((e) => toErrorData(formatError(e, logError))),
      dryRun: plan.dryRun,
    };
  }

  /** The operation a request would run, when its document validates (Engine.describeOperation). */
  describe(request: GraphqlRequest): OperationSummary | undefined {
    const prepared = this.deps.documents.prepare(request.query);
    if ('errors' in prepared) return undefined;
    const plan = planOperation(prepared.document, request.operationName);
    if (!('mode' in plan)) return undefined;
    return summaryOf(prepared.document, plan);
  }

  /** What describe says, from the document's parse alone when it is not cached (Engine.peekOperation). */
  peek(request: GraphqlRequest): OperationSummary | undefined {
    const document = this.deps.documents.peek(request.query);
    if (!document) return undefined;
    const plan = planOperation(document, request.operationName);
    return 'mode' in plan ? summaryOf(document, plan) : undefined;
  }

  private context(caller: Caller, frame: CallFrame | null, dryRun: boolean, waits?: ExecutionWait[]): RequestContext {
    const { ledger, cel, limits, services, clients } = this.deps;
    return {
      ledger,
      cel,
      limits,
      services,
      clients,
      principal: caller.principal,
      caller,
      frame,
      dryRun: dryRun || caller.dryRun === true,
      authority: authorityOf(cel, caller, frame),
      ...(waits ? { waits } : {}),
    };
  }

  /** The request's document (cached) and the operation it runs, or the answer when it cannot run. */
  private prepare(request: GraphqlRequest): Ready | FormattedResult {
    const { documents, logError } = this.deps;
    const prepared = documents.prepare(request.query);
    if ('errors' in prepared) return { errors: prepared.errors.map((e) => formatError(e, logError)) };
    const plan = planOperation(prepared.document, request.operationName);
    if (!('mode' in plan)) return { errors: [formatError(plan, logError)] };
    return { prepared, plan };
  }

  /**
   * The work of one request inside its transaction (or its savepoint of a batch): the caller read
   * now, the operation run under the request's deadline, and whether its writes are kept. A
   * mutation with any error keeps nothing; @dryRun never does. What it starts wakes the workers
   * only once its writes are committed (notifyStarted registers with transactions.afterCommit).
   */
  private unit(
    request: GraphqlRequest,
    { prepared, plan }: Ready,
    options: RequestOptions,
    waits?: ExecutionWait[],
  ): Unit {
    const { callers, cel, schema, limits } = this.deps;
    return () => {
      // Inside the transaction: a client changed by another process before it began is seen.
      const known = callers.ofRequest(options);
      if (known instanceof EngineError) return { value: known, commit: false };
      const budget = callers.budget(known, plan.budget);
      if (budget instanceof EngineError) return { value: budget, commit: false };
      const caller: Caller = {
        ...known,
        deadline: Date.now() + budget.ms,
        budget,
        ...(options.transport ? { transport: options.transport } : {}),
        ...(plan.dryRun ? { dryRun: true } : {}),
      };
      const context = this.context(caller, null, plan.dryRun, plan.mode === 'read' ? waits : undefined);
      const run = cel.withDeadline(caller.deadline!, () => executePrepared(schema, prepared, request, context, limits));
      let executed = run.value;
      const overran = caller.overran ?? run.overran;
      if (overran) executed = { errors: [engineGraphqlError(overran)] };
      const failed = (executed.errors?.length ?? 0) > 0;
      // A failed mutation wrote nothing; its data is what GraphQL's null propagation left, as the
      // reference ledger answers (a field that failed is null, and so is a non-null parent of it).
      return { value: executed, commit: plan.mode === 'read' || (!failed && !plan.dryRun) };
    };
  }

  /**
   * The bound of one group (TransactionManager.runBatch's `more`): writeBatchMax requests and
   * writeBatchWaitMs of work. A request that may run long (a tool, a backfill) never shares a group
   * with another client's requests: their replies would wait for it (a group answers after its
   * COMMIT), and they would share its COMMIT's fate. It starts the next group instead, and another
   * client's request after it starts the one after; one client's requests may share a group with
   * its own long ones.
   */
  private groupBound(
    requests: ReadonlyArray<BatchRequest>,
    readies: ReadonlyArray<Ready | undefined>,
    unitOf: ReadonlyArray<number>,
  ): (ran: number) => boolean {
    const { limits } = this.deps;
    const began = performance.now();
    const long = unitOf.map((i) => operationTraits(readies[i]!.prepared.document, readies[i]!.plan.operation).long);
    const who = unitOf.map((i) => requests[i]!.options?.apiKey ?? requests[i]!.options?.principal ?? SYSTEM_PRINCIPAL);
    let oneClient = true;
    let anyLong = long[0] === true;
    return (ran) => {
      if (ran >= limits.writeBatchMax || performance.now() - began >= limits.writeBatchWaitMs) return false;
      oneClient &&= who[ran] === who[ran - 1];
      anyLong ||= long[ran] === true;
      return oneClient || !anyLong;
    };
  }

  /** The answer of a request whose transaction failed (its COMMIT, or the database). */
  private failedAnswer(error: unknown): FormattedResult {
    const mapped = mapDriverError(error);
    const engineError =
      mapped instanceof EngineError
        ? mapped
        : new EngineError('INTERNAL', String((mapped as Error)?.message ?? mapped), { cause: mapped });
    if (engineError.code === 'INTERNAL') this.deps.logError(error);
    return { data: null, errors: [formatError(engineGraphqlError(engineError), this.deps.logError)] };
  }

  private answer(result: ExecutionResult | EngineError): FormattedResult {
    const { logError } = this.deps;
    if (result instanceof EngineError) return { errors: [formatError(engineGraphqlError(result), logError)] };
    const formatted: FormattedResult = {};
    if (result.errors?.length) formatted.errors = result.errors.map((e) => formatError(e, logError));
    formatted.data = (result as { data?: Record<string, unknown> | null }).data ?? null;
    return formatted;
  }

  private notifyToolsChanged(toolWritesBefore: number): void {
    if (this.deps.toolsChange.changedSince(toolWritesBefore)) this.deps.events.emit('actionsChanged');
  }
}

/** The error every request of a group gets when its COMMIT failed: retryable, since the request itself did not fail. */
function groupCommitFailed(error: unknown): EngineError {
  const mapped = mapDriverError(error);
  if (mapped instanceof EngineError && mapped.retryable) return mapped;
  const why = mapped instanceof Error ? mapped.message : String(mapped);
  return new EngineError(
    'BUSY',
    `the commit of this request's group failed, so nothing of the group was written (${why})`,
    {
      hint: 'Retry the request: it did not fail itself, the commit it shared with other requests did.',
      cause: mapped,
    },
  );
}

/** What the server needs to know of an operation before it runs it (see OperationSummary). */
function summaryOf(document: DocumentNode, plan: OperationPlan): OperationSummary {
  const traits = operationTraits(document, plan.operation);
  // A request under the operator budget may run for operatorDeadlineMs: it shares no group.
  const long = traits.long || plan.budget !== 'STANDARD';
  return {
    type: plan.mode === 'write' ? 'mutation' : 'query',
    name: plan.operation.name?.value ?? null,
    dryRun: plan.dryRun,
    ...traits,
    long,
  };
}

function toErrorData(formatted: { message: string; extensions?: Record<string, unknown> }): ErrorData {
  const ext = formatted.extensions ?? {};
  const data: ErrorData = { code: isErrorCode(ext.code) ? ext.code : 'INTERNAL', message: formatted.message };
  if (typeof ext.hint === 'string') data.hint = ext.hint;
  if (ext.details !== undefined) data.details = ext.details;
  return data;
}
