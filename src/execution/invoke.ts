import { DryRunRollback } from './programs.js';
import {
  type ActionVersion,
  executionKindOf,
  getVersion,
  runsAfterCommit,
  type ToolReference,
  versionKey,
} from '../actions/actions.js';
import { startAfterCommit } from './queue/start.js';
import { EngineError, limitExceeded } from '../errors.js';
import { type CallFrame, type CallNode, type ExecutionKind, rememberInputText, type RootState } from './call-tree.js';
import {
  authorityOf,
  type CallTarget,
  checkMayCall,
  checkRunnable,
  consentingLayers,
  layerOf,
  referencedVersion,
} from './call-rules.js';
import { cacheable, ResultCache } from './result-cache.js';
import type { ExecutionServices } from './services.js';
import { checkInputBytes, checkInvocable, inputWithDefaults, succeeded, toEngineError, validate } from './checks.js';
import { execute } from './programs.js';

export interface Call {
  target: CallTarget;
  input: unknown;
  executionId: string;
  parent: CallFrame | null;
  root: RootState;
  inputFingerprint: string | null;
  /** The attempt of a started execution (1 for an invoke). */
  attempt?: number;
  /** Checked once the call is counted, before it runs: a nested tools.x() call must be allowed like invoking x. */
  authorize?: () => void;
  /** Its caller's reference pins the version it runs (see consentingLayers). */
  pinned?: boolean;
  /** A top-level call that belongs under a recorded execution (a tool call of an agent run, under its model turn). */
  attach?: { parentId: string; rootId: string; depth: number };
  /** The input is a model's answer (or made from one by a hook's caller): see CallFrame.modelInput. */
  modelInput?: boolean;
  /** `JSON.stringify(input)`, when the caller made it; for a native graphql call also the text without its query. */
  inputText?: string;
  inputRest?: string;
}

/** Run one call of any kind under its own savepoint and return its node, FAILED or SUCCEEDED. */
export function runCall(svc: ExecutionServices, call: Call): CallNode {
  const { target, parent, root } = call;
  const now = svc.clock.now().toISOString();
  const isTool = target.type === 'version' && target.version.kind === 'tool';
  const depth = parent ? parent.node.depth + (isTool ? 1 : 0) : (call.attach?.depth ?? 0);
  const node: CallNode = {
    executionId: call.executionId,
    actionId: target.type === 'version' ? target.version.actionId : null,
    actionName: target.type === 'version' ? target.version.name : target.name,
    actionVersion: target.type === 'version' ? target.version.version : null,
    kind: kindOf(target),
    status: 'RUNNING',
    input: call.input,
    inputFingerprint: call.inputFingerprint,
    output: null,
    error: null,
    principal: root.principal,
    parentId: parent?.node.executionId ?? call.attach?.parentId ?? null,
    rootId: parent?.node.rootId ?? call.attach?.rootId ?? call.executionId,
    depth,
    attempt: call.attempt ?? parent?.node.attempt ?? 1,
    started: now,
    finished: null,
    logs: [],
    logBytes: 0,
    created: now,
    children: [],
  };
  parent?.node.children.push(node);
  root.ids.add(node.executionId);
  const frame: CallFrame = {
    parent,
    // A tool or graphql-kind action narrows authority with its own policies; native calls add nothing.
    layer: target.type === 'version' ? layerOf(target.version) : null,
    // Its input is the model's answer (an agent's tool call, or a hook handed that call's input):
    // run as GraphQL (the native graphql tool, a graphql-kind action), it is the model's text.
    modelInput: call.modelInput === true,
    modelWritten:
      call.modelInput === true &&
      (target.type === 'native' ? target.name === 'graphql' : target.version.kind === 'graphql'),
    node,
    root,
    pinned: call.pinned === true,
    version: target.type === 'version' ? target.version : null,
    event: {
      data: call.input,
      execution: {
        executionId: call.executionId,
        actionId: node.actionId,
        actionVersion: node.actionVersion,
        attempt: node.attempt,
      },
      caller: { principal: root.principal },
    },
  };
  try {
    checkBounds(svc, node, parent, root);
    call.authorize?.();
    if (target.type === 'version') {
      // Whoever began the call and however its version was found (pinned, resolved at an agent's
      // first turn, approved hours ago): only a version ACTIVE as stored now runs.
      checkRunnable(getVersion(svc.actions, { id: target.version.actionId, version: target.version.version }));
      // A program's call of an outside tool is started, to run after the request commits.
      if (parent === null || !runsAfterCommit(target.version.kind)) checkInvocable(target.version);
    }
    let inputText = checkInputBytes(svc, node.actionName, call.input, call.inputText);
    rememberInputText(node, call.input, inputText, call.inputRest);
    if (target.type === 'version') {
      // The program receives (and the execution records) the input with its schema's defaults.
      const input = inputWithDefaults(svc, target.version, call.input);
      if (input !== call.input) {
        node.input = input;
        (frame.event as { data: unknown }).data = input;
        inputText = checkInputBytes(svc, node.actionName, input);
        rememberInputText(node, input, inputText);
      }
    }
    // A read-only tool with cacheTtlMs answers from an earlier call while nothing has written since.
    const ttl =
      target.type === 'version'
        ? ((target.version.execution as { cacheTtlMs?: number | null }).cacheTtlMs ?? null)
        : null;
    const cacheKey =
      ttl !== null && target.type === 'version'
        ? ResultCache.key(target.version, node.input, root.principal, authorityStack(frame), root.input)
        : null;
    const hit = cacheKey !== null ? svc.results.get(cacheKey) : null;
    if (hit) {
      node.status = 'CACHED';
      node.output = hit.output;
      node.cachedFrom = hit.executionId;
      return node;
    }
    let output: unknown;
    try {
      output = underSavepoint(svc, target, () => {
        const hooks = target.type === 'version' ? hooksOf(target.version) : null;
        if (hooks?.before && target.type === 'version') {
          // The before hook sees the input and may change it (its output, unless null) or refuse the call.
          const changed = runHook(svc, frame, hooks.before, 'before', node.input);
          if (changed !== null) {
            const input = inputWithDefaults(svc, target.version, changed);
            node.input = input;
            (frame.event as { data: unknown }).data = input;
            inputText = checkInputBytes(svc, node.actionName, input);
            rememberInputText(node, input, inputText);
          }
        }
        if (target.type === 'version' && runsAfterCommit(target.version.kind))
          return startAfterCommit(svc, frame, target.version, node.input, call.pinned === true);
        let result = execute(svc, target, frame, inputText, runCall);
        if (target.type === 'version') validate(svc, target.version, 'output', result);
        if (result instanceof DryRunRollback) throw result;
        if (hooks?.after && target.type === 'version') {
          // The after hook sees {input, output} and may change the output (its output, unless null).
          const changed = runHook(svc, frame, hooks.after, 'after', { input: node.input, output: result });
          if (changed !== null) {
            validate(svc, target.version, 'output', changed);
            result = changed;
          }
        }
        return result;
      });
    } catch (error) {
      if (!(error instanceof DryRunRollback)) throw error;
      output = error.output;
      node.undone = true;
    }
    node.status = 'SUCCEEDED';
    node.output = output;
    if (cacheKey !== null && !node.undone && target.type === 'version' && cacheable(svc.actions, target.version))
      svc.results.set(cacheKey, node.executionId, output, ttl!);
  } catch (error) {
    const failure = toEngineError(error);
    if (failure.code === 'INTERNAL') svc.logError(error);
    node.status = 'FAILED';
    node.error = failure.toData();
    if (failure.code === 'TIMEOUT' || failure.code === 'BUSY') root.fatal ??= failure;
  } finally {
    node.finished = svc.clock.now().toISOString();
  }
  return node;
}

/**
 * A call's work under its own savepoint, so that a failure undoes its writes. The native cel tool
 * performs no operation and writes nothing: it has nothing to undo, and goes without (on
 * PostgreSQL a savepoint and its release are two round trips, most of what a cel() call costs).
 */
function underSavepoint<T>(svc: ExecutionServices, target: CallTarget, fn: () => T): T {
  return target.type === 'native' && target.name === 'cel' ? fn() : svc.transactions.savepoint(fn);
}

/** The tools whose policies bound a call: those that started its execution, then those calling it. */
function authorityStack(frame: CallFrame): string[] {
  const stack = frame.root.outerRefs.map((ref) => versionKey(ref.actionId, ref.version));
  const calling: string[] = [];
  for (let f = frame.parent; f; f = f.parent)
    if (f.version) calling.unshift(versionKey(f.version.actionId, f.version.version));
  return [...stack, ...calling];
}

/** An action's before/after hooks: tool references (absent in versions made before hooks). */
function hooksOf(version: ActionVersion): { before?: ToolReference | null; after?: ToolReference | null } | null {
  return (version as { hooks?: { before?: ToolReference | null; after?: ToolReference | null } | null }).hooks ?? null;
}

/**
 * A hook: a child call of the call it hooks (in its tree, under its savepoint and the same
 * authority chain, counted and bounded like any call), authorized like a tools.x() call of it.
 * Returns its output (null: no change); a hook that fails fails the call with its reason.
 */
function runHook(
  svc: ExecutionServices,
  frame: CallFrame,
  reference: ToolReference,
  phase: 'before' | 'after',
  input: unknown,
): unknown {
  const { root } = frame;
  const version = referencedVersion(
    svc.actions,
    reference,
    root.resolved,
    `${reference.name}, the ${phase} hook of ${frame.node.actionName},`,
  );
  const target: CallTarget = { type: 'version', version };
  const node = runCall(svc, {
    // A hook sees the hooked call's input: a model's answer stays the model's in it.
    target,
    input,
    executionId: svc.newId(),
    parent: frame,
    root,
    inputFingerprint: null,
    modelInput: frame.modelInput === true,
    pinned: reference.version != null,
    authorize: () =>
      checkMayCall(
        authorityOf(svc.cel, root.caller, frame),
        reference.name,
        version.version,
        input,
        consentingLayers(frame, reference.version != null),
      ),
  });
  if (root.fatal) throw root.fatal;
  if (!succeeded(node)) {
    const error = node.error!;
    throw new EngineError(
      error.code === 'TOOL_FAILED' || error.code === 'INPUT_INVALID' ? 'TOOL_FAILED' : error.code,
      `the ${phase} hook ${reference.name} refused the call: ${error.message}`,
      {
        hint: error.hint ?? `See the ${phase} hook's execution in the call tree.`,
        details: {
          hook: reference.name,
          phase,
          ...(error.code === 'TOOL_FAILED' ? { retry: (error.details as { retry?: unknown } | undefined)?.retry } : {}),
        },
      },
    );
  }
  return node.output ?? null;
}

function kindOf(target: CallTarget): ExecutionKind {
  if (target.type === 'native') return target.name === 'graphql' ? 'GRAPHQL' : 'CEL';
  return executionKindOf(target.version.kind);
}

function checkBounds(svc: ExecutionServices, node: CallNode, parent: CallFrame | null, root: RootState): void {
  if (parent) {
    root.calls++;
    if (root.calls > svc.limits.callsPerExecutionMax) {
      throw limitExceeded(
        'callsPerExecutionMax',
        svc.limits.callsPerExecutionMax,
        root.calls,
        `call ${root.calls} beneath one execution is over callsPerExecutionMax (${svc.limits.callsPerExecutionMax})`,
        {
          hint: 'Do the work in fewer calls (batch it in one graphql operation), or start it as separate executions.',
        },
      );
    }
  }
  if (node.depth > svc.limits.toolDepthMax) {
    throw limitExceeded(
      'toolDepthMax',
      svc.limits.toolDepthMax,
      node.depth,
      `${node.actionName} would run at tool depth ${node.depth}; toolDepthMax is ${svc.limits.toolDepthMax}`,
      {
        hint: 'Flatten the chain of tools calling tools.',
      },
    );
  }
  if (Date.now() > root.deadline) {
    throw new EngineError('TIMEOUT', `the execution's deadline passed before ${node.actionName} could run`);
  }
}
