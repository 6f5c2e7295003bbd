import { type DeployedState, type Flat, mergeFields } from './drift.js';
import { detailOf, hasWrites, recordOf, relabel } from './plan-common.js';
import type { PlanItem } from './plan-item.js';
import { current } from './reads.js';
import type { Target } from './target.js';

/*
 * The plan of a trigger of triggers/: its fields merged with what it holds now.
 */

const TRIGGER_DEFAULTS: Flat = { filter: null, input: null, status: 'ACTIVE' };

/** A trigger as fields: one read from the target (every field), or those its file declares. */
function triggerFields(t: Record<string, any>, declaredOnly: boolean): Flat {
  const normalized: Flat = {
    name: t.name,
    on: t.on,
    filter: t.filter ?? null,
    action: { name: t.action?.name, version: t.action?.version ?? null },
    input: t.input ?? null,
    status: t.status ?? 'ACTIVE',
  };
  return Object.fromEntries(Object.entries(normalized).filter(([k]) => !declaredOnly || t[k] !== undefined));
}

export async function planTrigger(
  target: Target,
  path: string,
  definition: Record<string, any>,
  base: DeployedState | null,
  overwrite: boolean,
): Promise<PlanItem> {
  const id = String(definition.triggerId).toLowerCase();
  const item = { kind: 'trigger' as const, name: String(definition.name), file: path };
  const file = triggerFields(definition, true);
  const existing = await current(
    target,
    'query($id: UUID!) { actions { trigger(id: $id) { name on filter action { name version } input status version } } }',
    { id: definition.triggerId },
    (d) => d.actions.trigger,
  );
  if (!existing)
    return {
      ...item,
      change: 'create',
      field: 'createTrigger(input: $VAR) { triggerId }',
      variableType: 'TriggerInput!',
      variable: definition,
      record: recordOf('TRIGGER', id, base, { fields: file }),
    };
  const merge = mergeFields(file, triggerFields(existing, false), base, { overwrite, defaults: TRIGGER_DEFAULTS });
  const drift = relabel(merge.drift, new Map());
  if (!hasWrites(merge))
    return { ...item, change: 'unchanged', drift, record: recordOf('TRIGGER', id, base, merge.state) };
  return {
    ...item,
    change: 'update',
    detail: detailOf(merge.writes),
    drift,
    field: 'updateTrigger(id: $ID, input: $VAR) { triggerId }',
    id: { type: 'UUID!', value: definition.triggerId },
    variableType: 'TriggerUpdateInput!',
    variable: merge.writes,
    record: recordOf('TRIGGER', id, base, merge.state, existing.version),
  };
}
