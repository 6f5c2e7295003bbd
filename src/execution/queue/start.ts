import {
  getVersion,
  latestActiveVersion,
  NATIVE_TOOLS,
  type ActionVersion,
  findAction,
  executionKindOf,
} from '../../actions/actions.js';
import { EngineError, type ErrorData, quote } from '../../errors.js';
import { checkNotModelWritten, checkRunnable, consentingLayers, type VersionRef } from '../call-rules.js';
import type { AuthorityLayer } from '../../policy/policy.js';
import { canonicalJson, derivedId, fingerprint } from '../../ids.js';
import type { QueueStatements } from '../../storage/statements/actions.js';
import { type CallFrame, type CallNode, type Caller, rowToNode } from '../call-tree.js';
import { checkInputBytes, checkNewInTree, executionIdConflict, isStarted, validate } from '../checks.js';
import { checkOwner, checkReplay } from '../replay.js';
import type { ExecutionServices } from '../services.js';
import { needsSession } from '../../actions/needs-session.js';

export interface StartRequest {
  id?: string | null;
  name?: string | null;
  executionId: string;
  actionVersion?: number | null;
  input?: unknown;
}

/**
 * startAction: validate now, run later. The QUEUED row is written in the caller's transaction (an
 * outbox): a request that rolls back started nothing. Without actionVersion, the current ACTIVE
 * version is resolved now and recorded. Same idempotency rule as invoke.
 */
export function startAction(
  svc: ExecutionServices,
  caller: Caller,
  request: StartRequest,
  frame: CallFrame | null = null,
): CallNode {
  checkNotModelWritten(frame, `startAction of ${quote(request.name ?? request.id)}`);
  if (request.name && (NATIVE_TOOLS as readonly string[]).includes(request.name) && !request.id) {
    throw new EngineError('BAD_REQUEST', `the native ${request.name} tool cannot be started`, {
      hint: 'Invoke it, or start a tool that calls it.',
    });
  }
  const version = resolveStartVersion(svc, request);
  refuseWithoutSession(svc, version);
  const input = request.input ?? {};
  const inputFingerprint = fingerprint(
    canonicalJson({ target: `${version.actionId}@${request.actionVersion ?? 'active'}`, input }),
  );
  checkNewInTree(frame, request.executionId);
  const existing = svc.st.executionById.get(request.executionId);
  if (existing) {
    checkOwner(caller, existing);
    const same = existing.input_fingerprint === inputFingerprint;
    if (same && isStarted(existing)) {
      checkReplay(svc, caller, frame, existing);
      return rowToNode(existing);
    }
    throw executionIdConflict(request.executionId, existing.input_fingerprint, same ? 'invoked' : null);
  }
  checkInputBytes(svc, version.name, input);
  validate(
    svc,
    version,
    'input',
    input,
    'A started execution is validated when it is started; fix the input and start it again.',
  );
  const stack = startStackOf(frame);
  // Started by a trigger-started attempt: its changes are as deep in the trigger chain as the starter's.
  enqueue(svc, {
    executionId: request.executionId,
    version,
    input,
    inputFingerprint,
    principal: caller.principal,
    triggerId: null,
    startStack: stack.length ? stack : null,
    triggerDepth: svc.triggerDepth.current,
    // Started by the request itself (not by a tool in it): recorded with how the request came (MCP).
    transport: frame ? null : (caller.transport ?? null),
  });
  frame?.root.ids.add(request.executionId);
  return rowToNode(svc.st.executionById.get(request.executionId)!);
}

/**
 * What bounds an execution started from inside a tool: that tool and every one above it, the tools
 * that started its own execution first. `consenting`: the layers that consented to the started call
 * by declaring it pinned (consentingLayers), recorded so that its attempt decides it the same way.
 */
export function startStackOf(frame: CallFrame | null, consenting?: ReadonlySet<AuthorityLayer>): VersionRef[] {
  const stack: VersionRef[] = [];
  for (let f: CallFrame | null = frame; f; f = f.parent)
    if (f.version)
      stack.unshift({
        actionId: f.version.actionId,
        version: f.version.version,
        ...(f.layer && consenting?.has(f.layer) ? { consents: true as const } : {}),
      });
  if (frame) stack.unshift(...frame.root.outerRefs.map(({ actionId, version }) => ({ actionId, version })));
  return stack;
}

/**
 * A program's call of a tool that reaches outside (an http or mcp tool, runsAfterCommit): recorded
 * now as a started execution in the request's transaction (an outbox), run by the worker only after
 * that transaction commits, never for one that rolled back. Its id is derived from the call's, so
 * the call's record names it. The call has been authorized as any call is; its attempt decides it
 * again, with the same consent. Returns what the program's tools.x() gets: {executionId, status}.
 */
export function startAfterCommit(
  svc: ExecutionServices,
  frame: CallFrame,
  version: ActionVersion,
  input: unknown,
  pinned: boolean,
): { executionId: string; status: 'QUEUED' } {
  const caller = frame.parent!;
  const executionId = derivedId(svc.derivedIdKey, 'after-commit', frame.node.executionId);
  enqueue(svc, {
    executionId,
    version,
    input,
    inputFingerprint: fingerprint(canonicalJson({ target: `${version.actionId}@${version.version}`, input })),
    principal: frame.root.principal,
    triggerId: null,
    startStack: startStackOf(caller, consentingLayers(caller, pinned)),
    triggerDepth: svc.triggerDepth.current,
  });
  frame.root.ids.add(executionId);
  return { executionId, status: 'QUEUED' };
}

/** An agent that talks in sessions (a sessionSchema, or references reading session) runs only as a session's turn. */
export function refuseWithoutSession(svc: ExecutionServices, version: ActionVersion): void {
  if (!needsSession(svc.cel, version)) return;
  throw new EngineError(
    'BAD_REQUEST',
    `${version.name} runs only in a session (it has a sessionSchema or its references read session), so it cannot be started on its own`,
    {
      hint: 'Open a session with createSession, then sendMessage: each message starts a turn.',
    },
  );
}

export function resolveStartVersion(
  svc: ExecutionServices,
  ref: { id?: string | null; name?: string | null; actionVersion?: number | null },
): ActionVersion {
  if (ref.actionVersion != null) {
    const version = getVersion(svc.actions, { id: ref.id, name: ref.name, version: ref.actionVersion });
    checkRunnable(version);
    return version;
  }
  const action = findAction(svc.actions, { id: ref.id, name: ref.name });
  const active = latestActiveVersion(svc.actions, action.action_id);
  if (!active)
    throw new EngineError('VERSION_LOCKED', `${action.name} has no ACTIVE version`, {
      hint: 'Activate a version, or name one.',
    });
  return active;
}

export interface Enqueue {
  executionId: string;
  version: ActionVersion;
  input: unknown;
  inputFingerprint: string | null;
  principal: string;
  triggerId: string | null;
  startStack?: Array<{ actionId: string; version: number }> | null;
  /** Triggers fired one after another to start it (see Limits.triggerDepthMax); 0 when left out. */
  triggerDepth?: number;
  /** Record the execution as already FAILED (a trigger whose filter or input could not be evaluated). */
  failed?: ErrorData;
  /** How the request that started it reached the engine ('mcp'); null or left out: plain GraphQL, a trigger, a session. */
  transport?: string | null;
}

export function enqueue(svc: ExecutionServices, item: Enqueue): void {
  const now = svc.clock.now().toISOString();
  const q: QueueStatements = svc.queue;
  q.insertQueued.run({
    execution_id: item.executionId,
    action_id: item.version.actionId,
    action_name: item.version.name,
    action_version: item.version.version,
    kind: executionKindOf(item.version.kind),
    input: JSON.stringify(item.input ?? null),
    input_fingerprint: item.inputFingerprint,
    principal: item.principal,
    created: now,
    run_at: now,
    max_attempts: item.version.execution.maxAttempts,
    trigger_id: item.triggerId,
    start_stack: item.startStack ? JSON.stringify(item.startStack) : null,
    trigger_depth: item.triggerDepth ?? 0,
    transport: item.transport ?? null,
  });
  if (item.failed) {
    q.finishAttempt.run({
      execution_id: item.executionId,
      status: 'FAILED',
      attempt: 0,
      output: null,
      error: JSON.stringify(item.failed),
      started: now,
      finished: now,
      logs: null,
      run_at: null,
      lease_owner: null,
    });
    return;
  }
  svc.notifyStarted();
}
