import type { ActionVersion } from '../actions/actions.js';
import type { EngineError, ErrorData } from '../errors.js';
import type { AuthorityFrame } from '../policy/authority.js';
import type { AuthorityLayer, Policy } from '../policy/policy.js';
import type { ActionStatements, ExecutionRow } from '../storage/statements/actions.js';

export type ExecutionKind = 'TOOL' | 'GRAPHQL' | 'CEL' | 'MODEL' | 'AGENT';

/** A MODEL execution's call, as the provider answered it. */
export interface ModelCallRecord {
  provider: string;
  model: string;
  inputTokens: number | null;
  outputTokens: number | null;
  latencyMs: number;
  httpAttempts: number;
  stopReason: string | null;
}
export type ExecutionStatus = 'QUEUED' | 'RUNNING' | 'WAITING_APPROVAL' | 'SUCCEEDED' | 'FAILED' | 'CANCELLED' | 'CACHED';

/**
 * One call, as it ran. A call tree is built in memory while it runs and written in one go when its
 * root finishes, after the root's savepoint is released or rolled back: so the records of failed
 * calls survive their rollback, and the tree is recorded exactly as it ran.
 */
export interface CallNode {
  executionId: string;
  actionId: string | null;
  actionName: string;
  actionVersion: number | null;
  kind: ExecutionKind;
  status: ExecutionStatus;
  input: unknown;
  inputFingerprint: string | null;
  output: unknown;
  error: ErrorData | null;
  principal: string;
  parentId: string | null;
  rootId: string;
  /** Tool levels below the first call (graphql and cel calls share their caller's level). */
  depth: number;
  attempt: number;
  started: string;
  finished: string | null;
  logs: string[];
  logBytes: number;
  created: string;
  children: CallNode[];
  /** Its writes were rolled back although it succeeded (a @dryRun operation): so were its children's. */
  undone?: boolean;
  /** For a started execution: when it is due, the trigger that started it, and the trigger depth it runs at. */
  runAt?: string | null;
  triggerId?: string | null;
  triggerDepth?: number;
  /** How the top-level call reached the engine, when not plain GraphQL ('mcp'). */
  transport?: string | null;
  /** A MODEL execution: the provider call it made. */
  model?: ModelCallRecord | null;
  /** An agent run that is a session's turn. */
  sessionId?: string | null;
  cancelRequested?: boolean;
  /** A CACHED call: the execution whose recorded output it returned. */
  cachedFrom?: string | null;
}

/** The caller at the root of a tree: its principal and (for an API client) its policies. */
export interface Caller {
  principal: string;
  client: { principal: string; policies: readonly Policy[] } | null;
  /** The whole request's deadline (epoch ms, requestDeadlineMs after it began): every call in it shares it. */
  deadline?: number;
  /** Set by the first resolver that found the deadline passed: the request fails with it alone. */
  overran?: EngineError;
  /** How the request reached the engine, when not plain GraphQL: 'mcp' (recorded on its top-level executions). */
  transport?: string;
}

/** What every call of one tree shares: one deadline, one call budget, references resolved once. */
export interface RootState {
  deadline: number;
  /** The deadline is the request's (requestDeadlineMs), not the tool's own timeout. */
  requestBound?: boolean;
  calls: number;
  principal: string;
  caller: Caller;
  /** A failure no caller may catch (deadline, write conflict): set once, fails the whole tree. */
  fatal: Error | null;
  /** Unpinned references resolve to the latest ACTIVE version once per execution, then stay. */
  resolved: Map<string, ActionVersion>;
  input: unknown;
  /** Execution ids used in this tree so far: an id names one call. */
  ids: Set<string>;
  /** For a started execution: the tools on the starter's stack, whose policies still bound it. */
  outerLayers: AuthorityLayer[];
  /** The same tools as version references, to pass on when this execution starts another. */
  outerRefs: Array<{ actionId: string; version: number }>;
}

/** The call a piece of code runs inside: a tool's program, or a GraphQL operation it made. */
export interface CallFrame extends AuthorityFrame {
  parent: CallFrame | null;
  layer: AuthorityLayer | null;
  node: CallNode;
  root: RootState;
  /** The tool version running at this frame (null for a native call). */
  version: ActionVersion | null;
  /** The event this frame's program received. */
  event: unknown;
}

export function nodeToRow(node: CallNode): Omit<ExecutionRow, 'seq'> {
  return {
    execution_id: node.executionId,
    action_id: node.actionId,
    action_name: node.actionName,
    action_version: node.actionVersion,
    kind: node.kind,
    status: node.status,
    input: JSON.stringify(node.input ?? null),
    input_fingerprint: node.inputFingerprint,
    output: node.output === undefined ? null : JSON.stringify(node.output),
    error: node.error ? JSON.stringify(node.error) : null,
    principal: node.principal,
    parent_id: node.parentId,
    root_id: node.rootId,
    depth: node.depth,
    attempt: node.attempt,
    started: node.started,
    finished: node.finished,
    logs: node.logs.length ? JSON.stringify(node.logs) : null,
    created: node.created,
    modified: node.finished ?? node.created,
    transport: node.transport ?? null,
    model: node.model ? JSON.stringify(node.model) : null,
    cached_from: node.cachedFrom ?? null,
  };
}

export function rowToNode(row: ExecutionRow): CallNode {
  return {
    executionId: row.execution_id,
    actionId: row.action_id,
    actionName: row.action_name,
    actionVersion: row.action_version,
    kind: row.kind as ExecutionKind,
    status: row.status as ExecutionStatus,
    input: JSON.parse(row.input),
    inputFingerprint: row.input_fingerprint,
    output: row.output === null ? null : JSON.parse(row.output),
    error: row.error === null ? null : (JSON.parse(row.error) as ErrorData),
    principal: row.principal ?? 'anonymous',
    parentId: row.parent_id,
    rootId: row.root_id,
    depth: row.depth,
    attempt: row.attempt,
    started: row.started ?? row.created,
    finished: row.finished,
    logs: row.logs === null ? [] : (JSON.parse(row.logs) as string[]),
    logBytes: 0,
    created: row.created,
    children: [],
    runAt: (row as { run_at?: string | null }).run_at ?? null,
    triggerId: (row as { trigger_id?: string | null }).trigger_id ?? null,
    triggerDepth: (row as { trigger_depth?: number }).trigger_depth ?? 0,
    transport: row.transport ?? null,
    model: row.model ? (JSON.parse(row.model) as ModelCallRecord) : null,
    sessionId: row.session_id ?? null,
    cancelRequested: row.cancel_requested === 1,
    cachedFrom: row.cached_from ?? null,
  };
}

/**
 * Write a finished tree, parents before children. `undone`: the tree's writes were rolled back (a
 * failed attempt). A call whose writes were undone with a caller's is recorded as it ran but
 * without its input fingerprint: its id can never answer an idempotent retry as if it had happened.
 */
export function persistTree(st: ActionStatements, root: CallNode, undone = false): void {
  const stack: Array<[CallNode, boolean]> = [[root, undone]];
  while (stack.length > 0) {
    const [node, nodeUndone] = stack.pop()!;
    const r = nodeToRow(node);
    st.insertExecution.run(
      r.execution_id, r.action_id, r.action_name, r.action_version, r.kind, r.status, r.input, nodeUndone ? null : r.input_fingerprint, r.output, r.error,
      r.principal, r.parent_id, r.root_id, r.depth, r.attempt, r.started, r.finished, r.logs, r.created, r.modified, r.transport ?? null, r.model ?? null, r.cached_from ?? null,
    );
    const childrenUndone = nodeUndone || node.status !== 'SUCCEEDED' || node.undone === true;
    for (let i = node.children.length - 1; i >= 0; i--) stack.push([node.children[i]!, childrenUndone]);
  }
}
