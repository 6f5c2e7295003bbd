import type { Sandbox } from '../../sandbox/sandbox.js';
import type { Integrations } from '../integrations/http.js';
import type { McpTools } from '../integrations/types.js';
import type { ActionDeps } from '../actions/actions.js';
import type { Cel } from '../cel/cel.js';
import type { Clock } from '../clock.js';
import type { ErrorData } from '../errors.js';
import type { Limits } from '../limits.js';
import type { Logger } from '../log.js';
import type { ActionStatements, QueueStatements, TriggerRow } from '../storage/statements/actions.js';
import type { RecordCache } from '../storage/record-cache.js';
import type { TransactionManager } from '../storage/transaction.js';
import type { CallFrame, Caller } from './call-tree.js';
import type { ModelProviders } from '../models/providers.js';
import type { SessionStatements } from '../storage/statements/sessions.js';
import type { DeploymentStatements } from '../storage/statements/deployments.js';
import type { ResultCache } from './result-cache.js';
import type { SkillServices } from '../skills/skills.js';

/** The outcome of a GraphQL operation run on behalf of a call. */
export interface NestedGraphqlResult {
  data: Record<string, unknown> | null;
  errors: ErrorData[];
  /** The operation was a `@dryRun` mutation: its writes must be rolled back. */
  dryRun: boolean;
}

/** One model call, as /metrics counts it: `outcome` is 'ok' or the error code. */
/** One outside call's request, as /metrics counts it: what it reached, how it ended, how long it took. */
export interface OutboundCallSample {
  kind: 'http' | 'mcp';
  /** The integration or MCP server. */
  name: string;
  /** "ok", or the error code it ended with (INTEGRATION_UNAVAILABLE, INTEGRATION_ERROR, …). */
  outcome: string;
  latencyMs: number;
}

export interface ModelCallSample {
  provider: string;
  model: string;
  outcome: string;
  inputTokens: number | null;
  outputTokens: number | null;
  latencyMs: number;
}

/** What the execution layer needs from the rest of the engine; built once in engine.ts. */
export interface ExecutionServices {
  transactions: TransactionManager;
  /** The sandbox in use; throws BUSY while a poisoned one is being replaced. */
  sandbox(): Sandbox;
  actions: ActionDeps;
  /**
   * Skills (src/skills): `resolve(refs)` gives an agent's declared skills, each pinned or the latest
   * now (name, version, description, tools; NOT_FOUND for one that is gone), for a run to offer its
   * model; `read(name, version)` gives one version's body for load_skill (null when there is none).
   */
  skills: SkillServices;
  st: ActionStatements;
  cel: Cel;
  clock: Clock;
  limits: Readonly<Limits>;
  queue: QueueStatements;
  /** The ACTIVE triggers (one key), read by every ledger change. */
  activeTriggers: RecordCache<readonly TriggerRow[]>;
  /** The database's key for derived execution ids (see derivedId); read once, never exposed. */
  derivedIdKey: string;
  /**
   * The trigger depth of the attempt running now (0 outside one; set by runAttempt). A change it
   * makes starts trigger executions one level deeper, and what it starts inherits it.
   */
  triggerDepth: { current: number };
  /** Jitter for backoff; injectable so tests are repeatable. */
  random: () => number;
  /** Called when an execution was queued in the current transaction; the engine wakes workers after commit. */
  notifyStarted(): void;
  /**
   * Called when a call said its first progress message (status(text)) in the current transaction:
   * after its commit, waits on the call's tree (its root, and the call itself) look at once.
   */
  notifyProgress(rootId: string, executionId: string): void;
  /** The caller a principal stands for now (its current policies), or null if it no longer exists. */
  callerOf(principal: string): Caller | null;
  logError(error: unknown): void;
  /** Where events are reported (trigger starts); silent unless the embedder gave a logger. */
  log: Logger;
  /** Time-ordered ids for the calls a program makes. */
  newId: () => string;
  /** Sandbox cache keys of programs, memoised per (immutable) config object. */
  programKeys: WeakMap<object, string>;
  /** The operator's model providers (null: none configured; model and agent runs fail with MODEL_ERROR). */
  models: ModelProviders | null;
  /** The operator's integrations (http tools; none configured: an empty set) and MCP servers (null: none). */
  outside: { integrations: Integrations; mcp: McpTools | null };
  /** Outputs of read-only tools with execution.cacheTtlMs (see result-cache.ts). */
  results: ResultCache;
  /** Sessions, their messages, approvals, and the run states they park and wake. */
  sessions: SessionStatements;
  /** What tally deploy recorded of the records it manages (src/graphql/resolvers/deployments.ts). */
  deployments: DeploymentStatements;
  /** Called after every model call a run of this process made (the server's metrics count them). */
  onModelCall(call: ModelCallSample): void;
  /** Called after every outside call (http, mcp) a run of this process made (the server's metrics count them). */
  onOutboundCall(call: OutboundCallSample): void;
  /** Run a GraphQL operation inside the current transaction, as a call of `frame`. */
  runGraphql(
    request: { query: string; variables: Record<string, unknown> | null; operationName: string | null },
    frame: CallFrame,
  ): NestedGraphqlResult;
}
