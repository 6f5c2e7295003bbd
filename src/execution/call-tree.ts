import type { ActionVersion } from '../actions/actions.js';
import type { Budget } from '../budgets.js';
import type { EngineError, ErrorData } from '../errors.js';
import type { AuthorityFrame } from '../policy/authority.js';
import type { AuthorityLayer, Policy } from '../policy/policy.js';
import {
  type ActionStatements,
  type ExecutionRow,
  HELD,
  type HeldCalls,
  heldEntries,
} from '../storage/statements/actions.js';

export type ExecutionKind = 'TOOL' | 'GRAPHQL' | 'CEL' | 'MODEL' | 'AGENT' | 'HTTP' | 'MCP';

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
export type ExecutionStatus =
  | 'QUEUED'
  | 'RUNNING'
  | 'WAITING_APPROVAL'
  | 'SUCCEEDED'
  | 'FAILED'
  | 'CANCELLED'
  | 'CACHED';

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
  /** What its program said with status(text), in order: written beside its record (persistProgress). */
  progress?: ProgressMessage[];
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

/** A progress message a call said (status(text)): when, what, and its place among its tree's (RootState.said). */
export interface ProgressMessage {
  text: string;
  at: string;
  n: number;
}

/** The caller at the root of a tree: its principal and (for an API client) its policies. */
export interface Caller {
  principal: string;
  client: { principal: string; policies: readonly Policy[] } | null;
  /** The whole request's deadline (epoch ms, its budget's length after it began): every call in it shares it. */
  deadline?: number;
  /** The budget that set the deadline (a request's, or within a call the call's), named in the error of work that runs past it. */
  budget?: Budget;
  /** Set by the first resolver that found the deadline passed: the request fails with it alone. */
  overran?: EngineError;
  /** How the request reached the engine, when not plain GraphQL: 'mcp' (recorded on its top-level executions). */
  transport?: string;
  /** The request is a `@dryRun` mutation: everything in it, nested calls included, is rolled back. */
  dryRun?: boolean;
}

/** What every call of one tree shares: one deadline, one call budget, references resolved once. */
export interface RootState {
  deadline: number;
  /** The deadline is the request's (requestDeadlineMs), not the tool's own timeout. */
  requestBound?: boolean;
  /** The budget that set the deadline, named in the TIMEOUT of a call that runs past it. */
  budget: Budget;
  calls: number;
  principal: string;
  caller: Caller;
  /** A failure no caller may catch (deadline, write conflict): set once, fails the whole tree. */
  fatal: Error | null;
  /** The answer to every call past callsPerExecutionMax after the first (envelope JSON), made once. */
  overBudget?: string;
  /** Unpinned references resolve to the latest ACTIVE version once per execution, then stay. */
  resolved: Map<string, ActionVersion>;
  input: unknown;
  /** Progress messages said in this tree so far (each numbered by it: the order they are written in). */
  said?: number;
  /** Execution ids used in this tree so far: an id names one call. */
  ids: Set<string>;
  /** For a started execution: the tools on the starter's stack, whose policies still bound it. */
  outerLayers: AuthorityLayer[];
  /** The same tools as version references, to pass on when this execution starts another. */
  outerRefs: Array<{ actionId: string; version: number }>;
  /** An agent's tool call: the agent whose model asked for it (what its GraphQL runs is the model's text). */
  model: { agent: string } | null;
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
  /** Its input is a model's answer: an agent's tool call, or a hook of one handed its input. */
  modelInput?: boolean;
  /** The GraphQL this frame runs is a model's text (see checkNotModelWritten): it begins no call. */
  modelWritten?: boolean;
  /** Its caller's reference pins the version it runs (see consentingLayers). */
  pinned?: boolean;
}

/** JSON texts already made of a node's input and output: each counts only while the value is the one it was made from. */
const TEXTS = Symbol('json texts');
interface Texts {
  input?: { of: unknown; text: string; rest?: string };
  output?: { of: unknown; text: string };
}

function textsOf(node: CallNode): Texts {
  let texts = (node as { [TEXTS]?: Texts })[TEXTS];
  if (!texts) {
    texts = {};
    // Not enumerable: no spread, policy document or JSON of a node carries it.
    Object.defineProperty(node, TEXTS, { value: texts, enumerable: false });
  }
  return texts;
}

/**
 * Remember the JSON text of the node's input (`JSON.stringify(input)`), so the record reuses it.
 * `rest`: for a native graphql call, the text of the input without its leading query property.
 */
export function rememberInputText(node: CallNode, input: unknown, text: string, rest?: string): void {
  textsOf(node).input = rest === undefined ? { of: input, text } : { of: input, text, rest };
}

/** Remember the JSON text of an output (`JSON.stringify(output)`). */
export function rememberOutputText(node: CallNode, output: unknown, text: string): void {
  textsOf(node).output = { of: output, text };
}

function inputText(node: CallNode): string {
  const known = (node as { [TEXTS]?: Texts })[TEXTS]?.input;
  return known !== undefined && known.of === node.input ? known.text : JSON.stringify(node.input ?? null);
}

/** The output as JSON text (null: none), made once. */
export function outputText(node: CallNode): string | null {
  if (node.output === undefined) return null;
  const known = (node as { [TEXTS]?: Texts })[TEXTS]?.output;
  if (known !== undefined && known.of === node.output) return known.text;
  const text = JSON.stringify(node.output);
  rememberOutputText(node, node.output, text);
  return text;
}

export function nodeToRow(node: CallNode): Omit<ExecutionRow, 'seq'> {
  return {
    execution_id: node.executionId,
    action_id: node.actionId,
    action_name: node.actionName,
    action_version: node.actionVersion,
    kind: node.kind,
    status: node.status,
    input: inputText(node),
    input_fingerprint: node.inputFingerprint,
    output: outputText(node),
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
  const node: CallNode = {
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
  // Where its compact calls (and, for a compact call, its siblings) are: read by childrenOf.
  const held = (row as { [HELD]?: HeldCalls })[HELD] ?? (row.calls ? { holder: row } : undefined);
  if (held) Object.defineProperty(node, HELD, { value: held, enumerable: false });
  return node;
}

/**
 * The calls an execution made, in order: its in-memory children when it has just run, otherwise
 * its child rows with its compact calls placed among them.
 */
export function childrenOf(st: ActionStatements, node: CallNode): CallNode[] {
  if (node.children.length > 0) return node.children;
  const rows = st.executionChildren.all(node.executionId).map(rowToNode);
  const held = (node as { [HELD]?: HeldCalls })[HELD];
  if (!held) return rows;
  const own = heldEntries(held).filter((e) => (e.p ?? held.holder.execution_id) === node.executionId);
  if (own.length === 0) return rows;
  const out: CallNode[] = [];
  let r = 0;
  for (const entry of own) {
    while (r < entry.n && r < rows.length) out.push(rows[r++]!);
    out.push(rowToNode(st.compactRow(held, entry)));
  }
  while (r < rows.length) out.push(rows[r++]!);
  return out;
}

/**
 * A program's own graphql() or cel() call, with nothing a row alone could hold: recorded as a
 * compact entry of its holder (see CompactCall), not as a row of its own.
 */
function isCompact(node: CallNode): boolean {
  return (
    node.parentId !== null &&
    node.actionId === null &&
    node.actionVersion === null &&
    node.inputFingerprint === null &&
    ((node.kind === 'GRAPHQL' && node.actionName === 'graphql') ||
      (node.kind === 'CEL' && node.actionName === 'cel')) &&
    (node.status === 'SUCCEEDED' || node.status === 'FAILED') &&
    node.logs.length === 0 &&
    !node.progress?.length &&
    !node.model &&
    !node.transport &&
    !node.cachedFrom &&
    !node.sessionId &&
    !node.runAt &&
    !node.triggerId &&
    !node.triggerDepth &&
    !node.cancelRequested
  );
}

/** What an entry's fields are compared with (written only where they differ). */
interface Holder {
  id: string;
  rootId: string;
  principal: string | null;
  depth: number;
  attempt: number;
}

/** The JSON text of a compact call's entry (see CompactCall). */
function entryText(st: ActionStatements, node: CallNode, holder: Holder, parentId: string, slot: number): string {
  let text = `{"id":${JSON.stringify(node.executionId)}`;
  if (parentId !== holder.id) text += `,"p":${JSON.stringify(parentId)}`;
  text += `,"n":${slot},"k":"${node.actionName}","s":"${node.status}"`;
  const input = node.input as Record<string, unknown> | null;
  let query: string | undefined;
  if (
    node.kind === 'GRAPHQL' &&
    input !== null &&
    typeof input === 'object' &&
    !Array.isArray(input) &&
    typeof input.query === 'string'
  ) {
    for (const key in input) {
      // Only when query is its first property: the input reads back as {query, ...rest}, in its order.
      if (key === 'query') query = input.query;
      break;
    }
  }
  if (query !== undefined) {
    text += `,"d":"${st.documentHash(query, node.created)}"`;
    const known = (node as { [TEXTS]?: Texts })[TEXTS]?.input;
    let rest = known !== undefined && known.of === node.input ? known.rest : undefined;
    if (rest === undefined) {
      const { query: _, ...others } = input!;
      rest = JSON.stringify(others);
    }
    text += `,"i":${rest}`;
  } else {
    text += `,"i":${inputText(node)}`;
  }
  const output = outputText(node);
  if (output !== null && output !== 'null') text += `,"o":${output}`;
  if (node.error) text += `,"e":${JSON.stringify(node.error)}`;
  text += `,"t":${JSON.stringify(node.started)}`;
  if (node.finished !== null) text += `,"f":${JSON.stringify(node.finished)}`;
  if (node.created !== node.started) text += `,"c":${JSON.stringify(node.created)}`;
  if (node.rootId !== holder.rootId) text += `,"r":${JSON.stringify(node.rootId)}`;
  if (node.principal !== holder.principal) text += `,"u":${JSON.stringify(node.principal)}`;
  if (node.depth !== holder.depth) text += `,"dp":${node.depth}`;
  if (node.attempt !== holder.attempt) text += `,"at":${node.attempt}`;
  return `${text}}`;
}

/**
 * The compact calls beneath `parent` (down through compact calls, not through rows) as entries of
 * `holder`, in call order; the rows met on the way go to `rows`, in call order, with whether their
 * writes were undone. `first`: rows among parent's children already recorded.
 */
function gather(
  st: ActionStatements,
  holder: Holder,
  parent: CallNode,
  undone: boolean,
  entries: string[],
  ids: string[],
  rows: Array<[CallNode, boolean]>,
  first = 0,
): void {
  let slot = first;
  for (const child of parent.children) {
    if (isCompact(child)) {
      entries.push(entryText(st, child, holder, parent.executionId, slot));
      ids.push(child.executionId);
      gather(st, holder, child, undone || child.status !== 'SUCCEEDED' || child.undone === true, entries, ids, rows);
    } else {
      slot++;
      rows.push([child, undone]);
    }
  }
}

/**
 * Write a finished tree, parents before children. `undone`: the tree's writes were rolled back (a
 * failed attempt). A call whose writes were undone with a caller's is recorded as it ran but
 * without its input fingerprint: its id can never answer an idempotent retry as if it had happened.
 * A program's graphql() and cel() calls are entries of their holder row (see CompactCall). Then
 * the progress messages said in it (persistProgress), unless `progress` is false.
 */
export function persistTree(st: ActionStatements, root: CallNode, undone = false, progress = true): void {
  const stack: Array<[CallNode, boolean]> = [];
  if (!(isCompact(root) && appendToHolder(st, root, undone, stack))) stack.push([root, undone]);
  const entries: string[] = [];
  const ids: string[] = [];
  const below: Array<[CallNode, boolean]> = [];
  while (stack.length > 0) {
    const [node, nodeUndone] = stack.pop()!;
    const r = nodeToRow(node);
    entries.length = 0;
    ids.length = 0;
    below.length = 0;
    const childrenUndone = nodeUndone || node.status !== 'SUCCEEDED' || node.undone === true;
    if (node.children.length > 0) {
      // A row that has not ended may run again (a later attempt): its entries then keep their own attempt.
      const attempt =
        node.status === 'SUCCEEDED' || node.status === 'FAILED' || node.status === 'CACHED' ? node.attempt : -1;
      gather(
        st,
        { id: node.executionId, rootId: node.rootId, principal: node.principal, depth: node.depth, attempt },
        node,
        childrenUndone,
        entries,
        ids,
        below,
      );
    }
    const seq = st.insertExecution.run(
      r.execution_id,
      r.action_id,
      r.action_name,
      r.action_version,
      r.kind,
      r.status,
      r.input,
      nodeUndone ? null : r.input_fingerprint,
      r.output,
      r.error,
      r.principal,
      r.parent_id,
      r.root_id,
      r.depth,
      r.attempt,
      r.started,
      r.finished,
      r.logs,
      r.created,
      r.modified,
      r.transport ?? null,
      r.model ?? null,
      r.cached_from ?? null,
      entries.length > 0 ? `[${entries.join(',')}]` : null,
    ).lastInsertRowid as number;
    st.insertCallIds(ids, seq);
    for (let i = below.length - 1; i >= 0; i--) stack.push(below[i]!);
  }
  if (progress) persistProgress(st, root);
}

/**
 * The progress messages said beneath `root` (itself included), written with their records (in the
 * same transaction: a failed call's survive its rollback, as its logs do) in the order they were
 * said, each under the root of its tree, so seq order is the order said.
 */
export function persistProgress(st: ActionStatements, root: CallNode): void {
  const said: Array<[CallNode, ProgressMessage]> = [];
  const stack = [root];
  while (stack.length > 0) {
    const node = stack.pop()!;
    for (const message of node.progress ?? []) said.push([node, message]);
    stack.push(...node.children);
  }
  said.sort((a, b) => a[1].n - b[1].n);
  for (const [node, message] of said) st.insertProgress.run(node.rootId, node.executionId, message.text, message.at);
}

/**
 * A compact call recorded on its own (a started execution's attempt records the calls of its
 * recorded row one by one): appended to its parent's row, or to the holder of its compact parent.
 * Its rows go to `stack`. False: no such parent (it is then written as a row, as before).
 */
function appendToHolder(
  st: ActionStatements,
  node: CallNode,
  undone: boolean,
  stack: Array<[CallNode, boolean]>,
): boolean {
  const parentId = node.parentId!;
  const row = st.holderById.get(parentId) ?? st.holderOfCall.get(parentId);
  if (!row) return false;
  // Its row may run again (a started execution's next attempt): the entries keep their own attempt.
  const holder: Holder = {
    id: row.execution_id,
    rootId: row.root_id,
    principal: row.principal,
    depth: row.depth,
    attempt: -1,
  };
  const slot = st.childRowCount.get(parentId) ?? 0;
  const entries = [entryText(st, node, holder, parentId, slot)];
  const ids = [node.executionId];
  const below: Array<[CallNode, boolean]> = [];
  gather(st, holder, node, undone || node.status !== 'SUCCEEDED' || node.undone === true, entries, ids, below);
  const joined = entries.join(',');
  st.setCalls.run(row.calls ? `${row.calls.slice(0, -1)},${joined}]` : `[${joined}]`, row.seq);
  st.insertCallIds(ids, row.seq);
  for (let i = below.length - 1; i >= 0; i--) stack.push(below[i]!);
  return true;
}
