import { type ActionVersion, findAction, getVersion } from '../../actions/actions.js';
import { celToJson, jsonToCel } from '../../cel/values.js';
import { EngineError, type ErrorData, quote, limitExceeded } from '../../errors.js';
import { derivedId } from '../../ids.js';
import { requiredText } from '../../ledger/records.js';
import { type Connection, pageRequest, toConnection } from '../../paging.js';
import type { QueueRow, TriggerRow } from '../../storage/statements/actions.js';
import type { ExecutionServices } from '../services.js';
import { enqueue, refuseWithoutSession, resolveStartVersion } from './start.js';

import {
  LEDGER_EVENTS as TRIGGER_EVENTS,
  type LedgerChange,
  type LedgerEvent as TriggerEvent,
} from '../../ledger/deps.js';

export { TRIGGER_EVENTS };
export type { TriggerEvent };

export interface Trigger {
  triggerId: string;
  name: string;
  on: TriggerEvent[];
  filter: string | null;
  action: { name: string; version: number | null };
  input: Record<string, string> | null;
  /** Its executions run under this principal's authority: whoever created or last updated it. */
  principal: string;
  /** The owner it had before it last changed hands (null if it never did). */
  previousPrincipal: string | null;
  status: 'ACTIVE' | 'LOCKED';
  version: number;
  created: string;
  modified: string;
}

export interface TriggerInput {
  triggerId?: string;
  name?: string | null;
  on?: string[] | null;
  filter?: string | null;
  action?: { name: string; version?: number | null } | null;
  input?: unknown;
  status?: 'ACTIVE' | 'LOCKED' | null;
}

function toTrigger(row: TriggerRow): Trigger {
  return {
    triggerId: row.trigger_id,
    name: row.name,
    on: JSON.parse(row.events) as TriggerEvent[],
    filter: row.filter,
    action: { name: row.action_name, version: row.action_version },
    input: row.input === null ? null : (JSON.parse(row.input) as Record<string, string>),
    principal: row.principal,
    previousPrincipal: row.previous_principal,
    status: row.status as Trigger['status'],
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

function check(svc: ExecutionServices, input: TriggerInput, previous: Trigger | null) {
  const on = input.on ?? previous?.on;
  if (!on || on.length === 0 || on.some((e) => !(TRIGGER_EVENTS as readonly string[]).includes(e))) {
    throw new EngineError('BAD_REQUEST', `on ${quote(on)} must list events among ${TRIGGER_EVENTS.join(', ')}`);
  }
  const filter = input.filter === undefined ? (previous?.filter ?? null) : input.filter;
  if (filter !== null) compile(svc, filter, 'filter');
  const action = input.action ?? previous?.action;
  if (!action) throw new EngineError('BAD_REQUEST', 'a trigger needs action: {name, version?}');
  findAction(svc.actions, { name: action.name });
  if (action.version != null) resolveStartVersion(svc, { name: action.name, actionVersion: action.version });
  let map = previous?.input ?? null;
  if (input.input !== undefined) {
    if (input.input !== null && (typeof input.input !== 'object' || Array.isArray(input.input))) {
      throw new EngineError('BAD_REQUEST', 'input must map input properties to CEL expressions');
    }
    map = input.input === null ? null : {};
    for (const [prop, expression] of Object.entries((input.input ?? {}) as Record<string, unknown>)) {
      if (typeof expression !== 'string')
        throw new EngineError('BAD_REQUEST', `input.${prop} must be a CEL expression string`);
      compile(svc, expression, `input.${prop}`);
      map![prop] = expression;
    }
  }
  return {
    on: [...on] as TriggerEvent[],
    filter,
    action: { name: action.name, version: action.version ?? null },
    input: map,
  };
}

function compile(svc: ExecutionServices, expression: string, what: string): void {
  try {
    svc.cel.compile(expression);
  } catch (error) {
    throw new EngineError('BAD_REQUEST', `${what}: ${(error as Error).message}`);
  }
}

export function createTrigger(
  svc: ExecutionServices,
  principal: string,
  input: TriggerInput & { triggerId: string; name: string },
): Trigger {
  if (svc.queue.triggerById.get(input.triggerId))
    throw new EngineError('ALREADY_EXISTS', `trigger ${input.triggerId} already exists`);
  const name = requiredText(input.name, 'name', 128);
  if (svc.queue.triggerByName.get(name))
    throw new EngineError('ALREADY_EXISTS', `a trigger named ${quote(name)} already exists`);
  const checked = check(svc, input, null);
  const now = svc.clock.now().toISOString();
  svc.queue.insertTrigger.run({
    trigger_id: input.triggerId,
    name,
    events: JSON.stringify(checked.on),
    filter: checked.filter,
    action_name: checked.action.name,
    action_version: checked.action.version,
    input: checked.input === null ? null : JSON.stringify(checked.input),
    principal,
    status: input.status ?? 'ACTIVE',
    created: now,
    modified: now,
  });
  return getTrigger(svc, input.triggerId);
}

/**
 * Update a trigger, and re-own it to the updater: its executions run under the authority of whoever
 * last said what it does. (Kept with its creator, UPDATE on triggers let a client point another's
 * trigger at its own tool and run it as them.) `authorize` sees the trigger as it will be, before
 * anything is written.
 */
export function updateTrigger(
  svc: ExecutionServices,
  principal: string,
  triggerId: string,
  input: TriggerInput,
  authorize?: (next: Trigger) => void,
): Trigger {
  const current = getTrigger(svc, triggerId);
  const checked = check(svc, input, current);
  const next: Trigger = {
    ...current,
    ...checked,
    name: input.name == null ? current.name : requiredText(input.name, 'name', 128),
    principal,
    previousPrincipal: principal === current.principal ? current.previousPrincipal : current.principal,
    status: input.status ?? current.status,
    version: current.version + 1,
    modified: svc.clock.now().toISOString(),
  };
  authorize?.(next);
  svc.queue.updateTrigger.run({
    trigger_id: triggerId,
    name: next.name,
    events: JSON.stringify(next.on),
    filter: next.filter,
    action_name: next.action.name,
    action_version: next.action.version,
    input: next.input === null ? null : JSON.stringify(next.input),
    status: next.status,
    principal: next.principal,
    previous_principal: next.previousPrincipal,
    modified: next.modified,
  });
  return getTrigger(svc, triggerId);
}

export function deleteTrigger(svc: ExecutionServices, triggerId: string): Trigger {
  const current = getTrigger(svc, triggerId);
  svc.queue.deleteTrigger.run(triggerId);
  return current;
}

export function getTrigger(svc: ExecutionServices, triggerId: string): Trigger {
  const row = svc.queue.triggerById.get(triggerId);
  if (!row) throw new EngineError('NOT_FOUND', `trigger ${quote(triggerId)} does not exist`);
  return toTrigger(row);
}

export function listTriggers(svc: ExecutionServices, first: number, after?: string | null): Connection<Trigger> {
  const req = pageRequest<number>(first, after, svc.limits.pageSizeMax, 'number', 'triggers');
  return toConnection(svc.queue.triggersPage.all(req.after ?? 0, req.fetch), req, (r) => r.rowid, toTrigger);
}

/**
 * Start the action of every active trigger listening to this change whose filter holds, in the
 * same transaction as the change. A match that cannot start (a filter or input that fails to
 * evaluate, triggerDepthMax crossed, its execution id taken) does not block the change: it is
 * recorded as a FAILED execution, where it can be seen.
 */
export function dispatchChange(svc: ExecutionServices, change: LedgerChange): void {
  const triggers = svc.activeTriggers.get('active', () => svc.queue.activeTriggers.all())!;
  if (triggers.length === 0) return;
  // Every filter and input of every trigger on one change shares one CEL budget (celCostMax): what
  // triggers cost a change is bounded whatever their number; those past it are recorded FAILED.
  svc.cel.scope(`the triggers on ${change.event}`, () => dispatchToTriggers(svc, change, triggers));
}

function dispatchToTriggers(svc: ExecutionServices, change: LedgerChange, triggers: readonly TriggerRow[]): void {
  // A change made by a trigger-started attempt (or by one it started) fires triggers one level deeper.
  const depth = svc.triggerDepth.current + 1;
  let bindings: Record<string, unknown> | null = null;
  for (const row of triggers) {
    const trigger = toTrigger(row);
    if (!trigger.on.includes(change.event)) continue;
    // One execution per trigger, event and record version: an account and a transaction may share an id.
    const executionId = derivedId(
      svc.derivedIdKey,
      'trigger',
      trigger.triggerId,
      change.event,
      change.recordId,
      String(change.recordVersion),
    );
    const taken = svc.st.executionById.get(executionId) as QueueRow | undefined;
    // This trigger's execution for this change exists already: it was dispatched before.
    if (taken?.trigger_id === trigger.triggerId) continue;
    bindings ??= jsonToCel({ document: change.document(), previous: change.previous ?? null }) as Record<
      string,
      unknown
    >;
    const input: Record<string, unknown> = {};
    try {
      if (trigger.filter !== null) {
        const verdict = svc.cel.evaluate(trigger.filter, bindings);
        if (typeof verdict !== 'boolean') {
          throw new EngineError(
            'CEL_ERROR',
            `filter ${quote(trigger.filter)} evaluated to ${quote(celToJson(verdict))}, not a bool`,
            { hint: 'Write the filter as a condition, e.g. document.status == "LOCKED".' },
          );
        }
        if (!verdict) continue;
      }
      if (taken) {
        // Only a holder of the database's key can compute the id, so this is not a client's doing.
        throw new EngineError(
          'EXECUTION_ID_CONFLICT',
          `its execution id ${executionId} for ${change.event} of ${change.recordId} is taken by an execution of ${taken.action_name}`,
        );
      }
      if (depth > svc.limits.triggerDepthMax) {
        throw limitExceeded(
          'triggerDepthMax',
          svc.limits.triggerDepthMax,
          depth,
          `${change.event} of ${change.recordId} was made at trigger depth ${depth - 1}; starting ${trigger.action.name} would be trigger depth ${depth}, over triggerDepthMax (${svc.limits.triggerDepthMax})`,
          {
            hint: 'A trigger’s action made a change that fires triggers again (itself, or in a cycle): narrow the filter so the action’s own changes do not match.',
          },
        );
      }
      for (const [prop, expression] of Object.entries(trigger.input ?? {}))
        input[prop] = celToJson(svc.cel.evaluate(expression, bindings));
      const version = resolveStartVersion(svc, { name: trigger.action.name, actionVersion: trigger.action.version });
      refuseWithoutSession(svc, version);
      enqueue(svc, {
        executionId,
        version,
        input,
        inputFingerprint: null,
        principal: trigger.principal,
        triggerId: trigger.triggerId,
        triggerDepth: depth,
      });
      const fields = {
        event: 'trigger',
        trigger: trigger.name,
        on: change.event,
        executionId,
        action: `${version.name}@${version.version}`,
        triggerDepth: depth,
      };
      svc.transactions.afterCommit(() => svc.log.info(fields, 'trigger started an execution'));
    } catch (error) {
      // A taken id cannot hold the record: the failure gets a fresh one.
      recordFailedStart(svc, trigger, taken ? svc.newId() : executionId, depth, error as EngineError);
    }
  }
}

/**
 * The trigger matched but its execution cannot start (its input failed to evaluate, its action has
 * no ACTIVE version): recorded as FAILED, where it can be seen, and the change goes through.
 */
function recordFailedStart(
  svc: ExecutionServices,
  trigger: Trigger,
  executionId: string,
  triggerDepth: number,
  e: EngineError,
): void {
  let version: ActionVersion;
  try {
    version = getVersion(svc.actions, { name: trigger.action.name, version: trigger.action.version });
  } catch (error) {
    // Not even a version to name: nothing to record the failure against.
    svc.logError(error);
    return;
  }
  const failed: ErrorData = { code: e.code ?? 'CEL_ERROR', message: `trigger ${trigger.name}: ${e.message}` };
  if (e.hint) failed.hint = e.hint;
  enqueue(svc, {
    executionId,
    version,
    input: {},
    inputFingerprint: null,
    principal: trigger.principal,
    triggerId: trigger.triggerId,
    triggerDepth,
    failed,
  });
  const fields = {
    event: 'trigger',
    trigger: trigger.name,
    executionId,
    action: `${version.name}@${version.version}`,
    triggerDepth,
    outcome: 'FAILED',
    code: failed.code,
  };
  svc.transactions.afterCommit(() => svc.log.warn(fields, 'trigger matched but its execution could not start'));
}
