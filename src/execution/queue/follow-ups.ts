import { type ActionVersion, getVersion } from '../../actions/actions.js';
import { celToJson, jsonToCel } from '../../cel/values.js';
import { EngineError, type ErrorData, limitExceeded } from '../../errors.js';
import { canonicalJson, derivedId, fingerprint } from '../../ids.js';
import { referencedVersion, type VersionRef } from '../call-rules.js';
import { fixedInput, toEngineError, validate } from '../checks.js';
import type { ExecutionServices } from '../services.js';
import { enqueue } from './start.js';

/*
 * What an outside call starts when it ends (an http tool's config.followUps): on success `succeeded`, on
 * a final failure `failed` — settle, or release the hold — so that the ledger and the world outside
 * end consistent. It is started in the same transaction that records the call's outcome, with an id
 * derived from the call, so there is one follow-up per outcome however often the worker died.
 */

export interface Ended {
  version: ActionVersion;
  executionId: string;
  principal: string;
  /** The start stack the call ran under (its consent flags as recorded). */
  startStack: readonly VersionRef[];
  input: unknown;
  output: unknown;
  error: ErrorData | null;
  triggerDepth: number;
}

/** Start the follow-up `ended` asks for, if any; inside the caller's write transaction. Returns its id. */
export function startFollowUp(svc: ExecutionServices, ended: Ended): string | null {
  const { version } = ended;
  if (version.kind !== 'http') return null;
  const which = ended.error === null ? 'succeeded' : 'failed';
  // After a request went out, a failure leaves what the service did unknown unless its answer was
  // judged a refusal: attempts spent on timeouts, 5xx or broken connections, an answer not read
  // (too large, too deep) or one that said yes but could not be used (config.output, the output
  // schema). Nothing is started then (a release would undo a hold on money that may have left);
  // the FAILED execution, with its sends counted, is for a person to settle.
  // `failed` starts only when the service is known not to have acted: nothing was sent, or what it
  // answered was judged a refusal (details.outcome "refused").
  const outcome = (ended.error?.details as { outcome?: unknown } | null | undefined)?.outcome;
  if (ended.error !== null && outcome !== 'refused' && svc.queue.sendsOf.get(ended.executionId)) {
    svc.log.warn(
      { event: 'followUp', executionId: ended.executionId, code: ended.error.code },
      'an outside call failed after sending, its outcome unknown: no follow-up started',
    );
    return null;
  }
  const then = (version.config.followUps as Record<string, { tool: string; input?: string } | null> | undefined)?.[
    which
  ];
  if (!then) return null;
  const executionId = derivedId(svc.derivedIdKey, 'followUps', ended.executionId, which);
  if (svc.st.executionById.get(executionId)) return executionId;
  const reference = version.tools.find((r) => r.name === then.tool)!;
  const pinned = reference.version != null;
  // The call's tool declared the follow-up: pinned, it consents to it, and so do the tools above
  // it that consented to the call itself (a chain of pinned references); unpinned, none does.
  const startStack: VersionRef[] = [
    ...ended.startStack.map(({ actionId, version: v, consents }) => ({
      actionId,
      version: v,
      ...(pinned && consents ? { consents } : {}),
    })),
    { actionId: version.actionId, version: version.version, ...(pinned ? { consents: true as const } : {}) },
  ];
  let target: ActionVersion | null = null;
  let input: unknown = null;
  let failed: ErrorData | undefined;
  // A follow-up is one link further down a chain, as a trigger's start is: a tool whose follow-up
  // calls out again (itself, say) stops at triggerDepthMax instead of sending forever.
  const depth = ended.triggerDepth + 1;
  try {
    target = referencedVersion(svc.actions, reference);
    if (depth > svc.limits.triggerDepthMax)
      throw limitExceeded(
        'triggerDepthMax',
        svc.limits.triggerDepthMax,
        depth,
        `the ${which} follow-up of ${version.name} would be link ${depth} of a chain of follow-ups and triggers; triggerDepthMax is ${svc.limits.triggerDepthMax}`,
        { hint: 'A follow-up that calls out again starts another; break the loop in the tools.' },
      );
    const outcome = {
      input: ended.input,
      output: ended.output,
      error: ended.error,
      execution: { executionId: ended.executionId },
    };
    input = celToJson(svc.cel.evaluate(then.input ?? 'input', jsonToCel(outcome) as Record<string, unknown>));
    input = fixedInput(svc, reference, input, { event: outcome, toolInput: ended.input, executionInput: ended.input });
    validate(svc, target, 'input', input);
  } catch (error) {
    // Recorded FAILED, where a person looking for the settlement finds why there is none.
    failed = toEngineError(error).toData();
    target ??= version;
  }
  enqueue(svc, {
    executionId,
    version: target,
    input,
    inputFingerprint: fingerprint(canonicalJson({ target: `${target.actionId}@${target.version}`, input })),
    principal: ended.principal,
    triggerId: null,
    startStack,
    triggerDepth: depth,
    ...(failed ? { failed } : {}),
  });
  return executionId;
}

/**
 * A cancelled outside call: when it never sent a request, its `failed` follow-up starts (the hold
 * is released: nothing went out). When it sent one, whether the service acted on it is unknown, so
 * nothing is started: the execution (CANCELLED, its sends counted) is for a person to settle.
 */
export function startFollowUpOfCancelled(svc: ExecutionServices, executionId: string): string | null {
  const row = svc.queue.queuedById.get(executionId);
  if (row?.kind !== 'HTTP' || row.action_id === null || row.action_version === null) return null;
  if (svc.queue.sendsOf.get(executionId)) return null;
  return startFollowUp(svc, {
    version: getVersion(svc.actions, { id: row.action_id, version: row.action_version }),
    executionId,
    principal: row.principal ?? 'system',
    startStack: row.start_stack ? (JSON.parse(row.start_stack) as VersionRef[]) : [],
    input: JSON.parse(row.input) as unknown,
    output: null,
    error: new EngineError('TOOL_FAILED', `${row.action_name} was cancelled before it sent anything`, {
      details: { cancelled: true, retry: false },
    }).toData(),
    triggerDepth: row.trigger_depth,
  });
}
