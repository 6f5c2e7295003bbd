import { getVersion, NATIVE_TOOLS, versionKey } from '../actions/actions.js';
import type { Budget } from '../budgets.js';
import { EngineError, quote } from '../errors.js';
import { canonicalJson, fingerprint } from '../ids.js';
import { type CallFrame, type CallNode, type Caller, persistTree, type RootState, rowToNode } from './call-tree.js';
import {
  authorityOf,
  type CallTarget,
  checkMayCall,
  checkNotModelWritten,
  checkRunnable,
  NO_OUTER,
  type Outer,
  targetName,
} from './call-rules.js';
import { runCall } from './invoke.js';
import { checkInvocable, checkNewInTree, executionIdConflict, type InvokeRequest, isStarted } from './checks.js';
import { checkOwner, checkReplay } from './replay.js';
import type { ExecutionServices } from './services.js';

/*
 * The one entry of every call with no calling frame (DESIGN principle 9): a request's
 * invokeAction (and MCP tools/call, which is one), a started attempt (a trigger's too), an agent's
 * tool call. beginCall builds its root state — the deadline, the call budget, the references
 * resolved once, the authority above it, the trigger depth, whether a model wrote what it runs —
 * and runs it with runCall, the one run of every call, nested ones included. Nothing else builds a
 * RootState.
 */

/** A call with no calling frame, as it begins: who asks, what runs, what is above it. */
export interface CallEntry {
  caller: Caller;
  target: CallTarget;
  input: unknown;
  executionId: string;
  inputFingerprint: string | null;
  /** The tools that started the execution, or the agent whose tool call this is. */
  outer?: Outer;
  /** Check now that the caller and every outer layer may call the target (INSERT actions.Execution). */
  authorize?: boolean;
  /** The attempt of a started execution (1 otherwise). */
  attempt?: number;
  /** The recorded execution it belongs under (an agent's tool call, under its model turn). */
  attach?: { parentId: string; rootId: string; depth: number };
  /** The trigger depth its changes are made at (a trigger-started attempt's, an agent run's). */
  triggerDepth?: number;
  /** No later than this (epoch ms): an agent run's own deadline. */
  deadlineCap?: number;
  /** What `execution.input` is for its references (the run's input, for an agent's tool call). */
  executionInput?: unknown;
  /** The call is an agent's tool call: GraphQL it runs was written by this agent's model. */
  model?: { agent: string };
  inputText?: string;
}

/**
 * A call that ended: its node, the failure no caller may catch (the deadline, a busy database)
 * that must fail whatever holds it, and a resolver or CEL evaluation that ran past the deadline.
 */
export interface BegunCall {
  node: CallNode;
  fatal: Error | null;
  overran: EngineError | null;
}

/**
 * Begin a call with no calling frame: its root state (one deadline — the target's timeout, no later
 * than the request's and `deadlineCap` — one call budget, references resolved once), its authority
 * (the caller, then `outer`), its trigger depth; then run it (runCall). The caller holds the
 * transaction; what it does with a fatal failure is its own (a request fails, an attempt is retried,
 * an agent tells its model).
 */
export function beginCall(svc: ExecutionServices, entry: CallEntry): BegunCall {
  const { caller, target } = entry;
  const outer = entry.outer ?? NO_OUTER;
  const timeoutMs = (target.type === 'version' ? target.version.execution.timeoutMs : null) ?? svc.limits.toolTimeoutMs;
  const now = Date.now();
  const capped = entry.deadlineCap !== undefined && entry.deadlineCap < now + timeoutMs;
  const own = capped ? entry.deadlineCap! : now + timeoutMs;
  const requestBound = caller.deadline !== undefined && caller.deadline < own;
  const deadline = requestBound ? caller.deadline! : own;
  // What set the deadline, named when something runs past it.
  const budget: Budget = requestBound
    ? (caller.budget ?? { name: 'requestDeadlineMs', ms: svc.limits.requestDeadlineMs })
    : capped
      ? { name: 'agent.runTimeoutMs', ms: Math.max(0, own - now) }
      : {
          name:
            target.type === 'version' && target.version.execution.timeoutMs ? 'execution.timeoutMs' : 'toolTimeoutMs',
          ms: timeoutMs,
        };
  // Resolvers under the call stop at its deadline; what overran is told to the caller too.
  const callCaller: Caller = { ...caller, deadline, budget, overran: undefined };
  const root: RootState = {
    deadline,
    requestBound,
    budget,
    calls: 0,
    principal: caller.principal,
    caller: callCaller,
    fatal: null,
    resolved: new Map(),
    input: entry.executionInput ?? entry.input,
    ids: new Set(),
    outerLayers: outer.layers,
    outerRefs: outer.refs,
    model: entry.model ?? null,
  };
  const authorize = entry.authorize
    ? () =>
        checkMayCall(
          authorityOf(svc.cel, caller, null, outer.layers),
          targetName(target),
          target.type === 'version' ? target.version.version : null,
          entry.input,
          outer.consenting,
        )
    : undefined;
  const depthBefore = svc.triggerDepth.current;
  if (entry.triggerDepth !== undefined) svc.triggerDepth.current = entry.triggerDepth;
  try {
    const ran = svc.cel.withDeadline(deadline, () =>
      runCall(svc, {
        target,
        input: entry.input,
        executionId: entry.executionId,
        parent: null,
        root,
        inputFingerprint: entry.inputFingerprint,
        modelInput: entry.model !== undefined,
        ...(authorize ? { authorize } : {}),
        ...(entry.attempt === undefined ? {} : { attempt: entry.attempt }),
        ...(entry.attach ? { attach: entry.attach } : {}),
        ...(entry.inputText === undefined ? {} : { inputText: entry.inputText }),
      }),
    );
    const overran = callCaller.overran ?? ran.overran;
    if (overran) caller.overran ??= overran;
    return { node: ran.value, fatal: root.fatal, overran };
  } finally {
    svc.triggerDepth.current = depthBefore;
  }
}

/**
 * invokeAction: one call made by a client (MCP tools/call is one), or through graphql() by a
 * program. Resolve the version (required, and runnable) → idempotency by executionId → run the
 * call under its own savepoint (validate input, run, validate output; roll back on any failure) →
 * record the tree. A failed call is a FAILED execution, not an error; only a failure no caller may
 * catch (the deadline) escapes, and fails the whole request.
 */
export function invokeAction(
  svc: ExecutionServices,
  caller: Caller,
  parent: CallFrame | null,
  request: InvokeRequest,
): CallNode {
  checkNotModelWritten(parent, `invokeAction of ${quote(request.name ?? request.id)}`);
  const target = resolveInvokeTarget(svc, request);
  const input = request.input ?? {};
  // canonicalJson({target, input}), written directly (its keys sorted: input, then target).
  const canonicalInput = canonicalJson(input);
  const inputFingerprint = fingerprint(`{"input":${canonicalInput},"target":${JSON.stringify(targetKey(target))}}`);
  checkNewInTree(parent, request.executionId);
  const existing = svc.st.fingerprintOfExecution.get(request.executionId);
  if (existing !== undefined) {
    checkOwner(caller, svc.st.executionById.get(request.executionId)!);
    const row = existing === inputFingerprint ? svc.st.executionById.get(request.executionId)! : null;
    if (row && !isStarted(row)) {
      checkReplay(svc, caller, parent, row);
      return rowToNode(row);
    }
    throw executionIdConflict(request.executionId, existing, row ? 'started' : null);
  }
  const inputText = canonicalIsPlain(input, canonicalInput) ? { inputText: canonicalInput } : {};
  if (parent) {
    const node = runCall(svc, {
      target,
      input,
      executionId: request.executionId,
      parent,
      root: parent.root,
      inputFingerprint,
      ...inputText,
    });
    if (parent.root.fatal) throw parent.root.fatal;
    return node;
  }
  const { node, fatal } = beginCall(svc, {
    caller,
    target,
    input,
    executionId: request.executionId,
    inputFingerprint,
    ...inputText,
  });
  if (fatal) throw fatal;
  if (caller.transport !== undefined) node.transport = caller.transport;
  persistTree(svc.st, node);
  return node;
}

function resolveInvokeTarget(svc: ExecutionServices, request: InvokeRequest): CallTarget {
  if (request.id == null && request.name != null && (NATIVE_TOOLS as readonly string[]).includes(request.name)) {
    return { type: 'native', name: request.name as 'graphql' | 'cel' };
  }
  if (request.actionVersion == null) {
    throw new EngineError('BAD_REQUEST', 'invokeAction needs input.actionVersion', {
      hint: 'Name the exact version to run (invoke never picks one for you); startAction can default to the current ACTIVE one.',
    });
  }
  const version =
    request.version ?? getVersion(svc.actions, { id: request.id, name: request.name, version: request.actionVersion });
  checkRunnable(version);
  checkInvocable(version);
  return { type: 'version', version };
}

function targetKey(target: CallTarget): string {
  return target.type === 'native' ? target.name : versionKey(target.version.actionId, target.version.version);
}

/** Whether canonical JSON of the input is also its plain JSON.stringify (every object's keys already in order). */
function canonicalIsPlain(value: unknown, canonical: string): boolean {
  return keysInOrder(value) && canonical.length > 0;
}

function keysInOrder(value: unknown): boolean {
  if (value === null || typeof value !== 'object') return true;
  if (Array.isArray(value)) {
    for (const item of value) if (!keysInOrder(item)) return false;
    return true;
  }
  let previous: string | null = null;
  for (const key in value) {
    // canonicalJson leaves an own __proto__ out, JSON.stringify does not.
    if ((previous !== null && !(previous < key)) || key === '__proto__') return false;
    if (!keysInOrder((value as Record<string, unknown>)[key])) return false;
    previous = key;
  }
  return true;
}
