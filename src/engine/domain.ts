import type { Sandbox } from '../../sandbox/sandbox.js';
import type { ActionDeps } from '../actions/actions.js';
import { SchemaCache } from '../actions/schemas.js';
import { checkModelConfig } from '../agents/config.js';
import type { ClientDeps } from '../auth/clients.js';
import type { Cel } from '../cel/cel.js';
import type { Clock } from '../clock.js';
import type { Caller } from '../execution/call-tree.js';
import { dispatchChange } from '../execution/queue/triggers.js';
import { ResultCache } from '../execution/result-cache.js';
import type { ExecutionServices, NestedGraphqlResult } from '../execution/services.js';
import type { CallFrame } from '../execution/call-tree.js';
import type { GraphqlRequest } from '../graphql/executor.js';
import type { LedgerDeps } from '../ledger/deps.js';
import { Ledger } from '../ledger/ledger.js';
import type { Limits } from '../limits.js';
import type { Logger } from '../log.js';
import type { ModelProviders } from '../models/providers.js';
import { EngineError } from '../errors.js';
import type { Integrations } from '../integrations/http.js';
import type { McpTools } from '../integrations/types.js';
import { checkSkillReference, type SkillDeps, skillServices } from '../skills/skills.js';
import type { Storage } from '../storage/open.js';
import { RecordCache } from '../storage/record-cache.js';
import { actionStatements, queueStatements } from '../storage/statements/actions.js';
import { authStatements } from '../storage/statements/auth.js';
import { calculationStatements } from '../storage/statements/calculations.js';
import { deploymentStatements } from '../storage/statements/deployments.js';
import { ledgerStatements } from '../storage/statements/ledger.js';
import { sessionStatements } from '../storage/statements/sessions.js';
import { skillStatements } from '../storage/statements/skills.js';
import { velocityStatements } from '../storage/statements/velocity.js';
import { viewStatements } from '../storage/statements/views.js';
import type { EngineEvents } from './events.js';

/** What the domain is built from: the storage, the shared parts and the engine's own hooks. */
export interface DomainInputs {
  storage: Storage;
  cel: Cel;
  clock: Clock;
  limits: Readonly<Limits>;
  newId: () => string;
  sandbox: () => Sandbox;
  models: ModelProviders | null;
  /** The operator's integrations and MCP servers (DESIGN §11). */
  outside: { integrations: Integrations; mcp: McpTools | null };
  events: EngineEvents;
  logger: Logger;
  logError(error: unknown): void;
  random: () => number;
  /** The caller of a principal, for the queue (null when the client is gone). */
  callerOf(principal: string): Caller | null;
  /** A program's graphql() call (Requests.runNested). */
  runGraphql(request: GraphqlRequest, frame: CallFrame): NestedGraphqlResult;
}

/** The domain's parts, each with its statements prepared once on the engine's connection. */
export interface Domain {
  ledger: Ledger;
  ledgerDeps: LedgerDeps;
  actions: ActionDeps;
  services: ExecutionServices;
  clients: ClientDeps;
}

/**
 * Build the ledger, actions, skills, clients and execution services over one connection. What
 * executions start wakes the workers after its transaction commits, through the storage's one
 * after-commit door (TransactionManager.afterCommit): never for work that rolled back.
 */
export function buildDomain(inputs: DomainInputs): Domain {
  const { storage, cel, clock, limits, newId, events } = inputs;
  const { db, epoch, transactions } = storage;
  const ledgerDeps: LedgerDeps = {
    st: ledgerStatements(db),
    calc: calculationStatements(db),
    vel: velocityStatements(db),
    views: viewStatements(db),
    cel,
    clock,
    limits,
    newId,
    epoch,
    cache: {
      journals: new RecordCache(epoch, limits.recordCacheMax),
      tranCodesByCode: new RecordCache(epoch, limits.recordCacheMax),
      // One row per account posted to: ten times the row caches' bound.
      accounts: new RecordCache(epoch, limits.recordCacheMax * 10),
      // One entry per account posted to (small lists): ten times the row caches' bound.
      setsAbove: new RecordCache(epoch, limits.recordCacheMax * 10),
      posting: new RecordCache(epoch, limits.recordCacheMax * 10),
    },
  };
  const st = actionStatements(db);
  const skillDeps: SkillDeps = { st: skillStatements(db), actions: st, clock, limits };
  const actions: ActionDeps = {
    st,
    documents: new Map(),
    versions: new RecordCache(epoch, limits.recordCacheMax),
    schemas: new SchemaCache(limits),
    cel,
    clock,
    limits,
    checkModelConfig: (kind, config) => checkModelConfig(kind, config, inputs.models, limits),
    checkOutsideConfig: (kind, config, tool) => {
      if (kind === 'http') inputs.outside.integrations.check(cel, config);
      else if (inputs.outside.mcp) inputs.outside.mcp.check(config, tool);
      else
        throw new EngineError('BAD_REQUEST', 'no MCP servers are configured', {
          hint: 'The operator adds an `mcpServers` block to the server configuration (TALLY_CONFIG), then imports its tools with `tally mcp import <server>`.',
        });
    },
    checkSkill: (ref, what) => checkSkillReference(skillDeps, ref, what),
    checkProgram: (fileName, source) => inputs.sandbox().checkSyntax({ fileName, source }),
  };
  // Results of read-only tools (execution.cacheTtlMs): valid while no data write happened since;
  // a rollback that undid writes empties it (an entry may have seen them). PostgreSQL's
  // data_version moves only for the cached tables (a counter every posting moved would make every
  // two postings conflict), so another process's posting would not expire a cached tool output
  // there: the result cache is off on PostgreSQL (cacheTtlMs is a hint; outputs are computed).
  const results = new ResultCache(db, storage.dataWrites, storage.onPostgres ? 0 : limits.recordCacheMax);
  transactions.watchUndoneWrites(
    () => storage.dataWrites.writes,
    () => results.clear(),
  );
  // Many starts in one transaction wake the workers once, after its COMMIT.
  let wakePending = false;
  const wake = () => {
    if (!wakePending) return;
    wakePending = false;
    events.emit('started');
  };
  const queue = queueStatements(db);
  const services: ExecutionServices = {
    queue,
    activeTriggers: new RecordCache(epoch, limits.recordCacheMax),
    derivedIdKey: queue.derivedIdKey.get()!,
    triggerDepth: { current: 0 },
    random: inputs.random,
    notifyStarted: () => {
      wakePending = true;
      transactions.afterCommit(wake);
    },
    // Told once per call that said something (see CallBridge.status): dropped if it rolls back.
    notifyProgress: (rootId, executionId) =>
      transactions.afterCommit(() =>
        events.emit('progress', rootId === executionId ? [rootId] : [rootId, executionId]),
      ),
    callerOf: inputs.callerOf,
    transactions,
    sandbox: inputs.sandbox,
    actions,
    skills: skillServices(skillDeps),
    st,
    cel,
    clock,
    limits,
    programKeys: new WeakMap(),
    logError: inputs.logError,
    log: inputs.logger,
    newId,
    runGraphql: inputs.runGraphql,
    models: inputs.models,
    outside: inputs.outside,
    sessions: sessionStatements(db),
    deployments: deploymentStatements(db),
    results,
    onModelCall: (call) => events.emit('modelCall', call),
    onOutboundCall: (call) => events.emit('outboundCall', call),
  };
  ledgerDeps.onChange = (change) => dispatchChange(services, change);
  const clients: ClientDeps = {
    st: authStatements(db),
    cel,
    clock,
    pageSizeMax: limits.pageSizeMax,
    policiesMax: limits.policiesMax,
  };
  return { ledger: new Ledger(ledgerDeps), ledgerDeps, actions, services, clients };
}
