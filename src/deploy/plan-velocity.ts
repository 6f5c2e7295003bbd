import { type DeployedState, type Flat, mergeFields } from './drift.js';
import { count, detailOf, hasWrites, plainWrites, recordOf, relabel } from './plan-common.js';
import type { DeployedKind, PlanItem, Step } from './plan-item.js';
import { type Project, VELOCITY } from './project.js';
import { current, everyPage, PAGE_INFO } from './reads.js';
import type { Target } from './target.js';

/*
 * The plan of velocity.json: limits, then controls (their limit lists matched), then each control's
 * attachments to accounts and sets, detached ones first.
 */

const LIMIT_FIELDS = `name description window { alias value type } condition currency
  limit { timestampSource balance { layer amount normalBalanceType start end } } params { name type default description }`;

/** A limit of velocity.json as the server reports it back. */
function normalizeLimit(l: Record<string, any>) {
  return {
    name: l.name,
    description: l.description ?? null,
    window: (l.window ?? []).map((k: any) => ({ alias: k.alias, value: k.value, type: k.type ?? null })),
    condition: l.condition ?? null,
    currency: l.currency ?? '',
    limit: {
      timestampSource: l.limit?.timestampSource ?? null,
      balance: (l.limit?.balance ?? []).map((b: any) => ({
        layer: b.layer,
        amount: b.amount,
        normalBalanceType: b.normalBalanceType ?? null,
        start: b.start ?? null,
        end: b.end ?? null,
      })),
    },
    params: (l.params ?? []).map((p: any) => ({
      name: p.name,
      type: p.type ?? 'STRING',
      default: p.default ?? null,
      description: p.description ?? null,
    })),
  };
}

const LIMIT_KEYS = ['name', 'description', 'window', 'condition', 'currency', 'limit', 'params'] as const;
const LIMIT_DEFAULTS: Flat = normalizeLimit({});

/** A limit as fields (normalized as the server reports them back): all of one read from the target, or those its entry declares. */
function limitFields(limit: Record<string, any>, declaredOnly: boolean): Flat {
  const normalized = normalizeLimit(limit);
  return Object.fromEntries(
    LIMIT_KEYS.filter((k) => !declaredOnly || (limit[k] !== undefined && limit[k] !== null)).map((k) => [
      k,
      normalized[k],
    ]),
  );
}

const CONTROL_DEFAULTS: Flat = { description: null, enforcement: { action: 'REJECT' }, condition: null };

/**
 * A control as fields: name, description, enforcement, condition, `limits.<id>` for each limit
 * it holds and `attach.<accountId>` ({journalId, params}) for each account or set it is attached to.
 */
function controlFields(
  control: Record<string, any>,
  limitIds: string[],
  attached: Array<{ accountId: string; journalId: string | null; params: unknown }>,
  declaredOnly: boolean,
): Flat {
  const fields: Flat = { name: control.name };
  for (const key of ['description', 'condition'] as const)
    if (!declaredOnly || (control[key] !== undefined && control[key] !== null)) fields[key] = control[key] ?? null;
  if (!declaredOnly || control.enforcement) fields.enforcement = { action: control.enforcement?.action ?? 'REJECT' };
  for (const id of limitIds) fields[`limits.${id}`] = true;
  for (const a of attached)
    fields[`attach.${a.accountId}`] = { journalId: a.journalId ?? null, params: a.params ?? null };
  return fields;
}

const inLimits = (field: string) =>
  field.startsWith('limits.') ? 'limits' : field.startsWith('attach.') ? 'attach' : null;

/**
 * Limits, then controls (their limit lists matched), then attachments: attached where the file
 * says, attached again where journal or params differ, and detached where the last deploy
 * attached a control of the file to an account or set that the file no longer lists for it (one
 * attached since by someone else stays).
 */
export async function planVelocity(
  project: Project,
  target: Target,
  plan: PlanItem[],
  tick: () => void,
  baseOf: (kind: DeployedKind, id: string) => DeployedState | null,
  overwrite: boolean,
  names: Map<string, string>,
): Promise<void> {
  const { limits, controls } = project.velocity;
  const limitNames = new Map(limits.map((l) => [String(l.velocityLimitId), String(l.name)]));
  for (const limit of limits) {
    const id = String(limit.velocityLimitId);
    const base = baseOf('VELOCITY_LIMIT', id);
    const item = { kind: 'velocity limit' as const, name: String(limit.name), file: VELOCITY };
    const existing = await current(
      target,
      `query($id: UUID!) { velocityLimit(id: $id) { ${LIMIT_FIELDS} version } }`,
      { id },
      (d) => d.velocityLimit,
    );
    const file = limitFields(limit, true);
    if (!existing)
      plan.push({
        ...item,
        change: 'create',
        field: 'createVelocityLimit(input: $VAR) { velocityLimitId }',
        variableType: 'VelocityLimitInput!',
        variable: limit,
        record: recordOf('VELOCITY_LIMIT', id, base, { fields: file }),
      });
    else {
      const merge = mergeFields(file, limitFields(existing, false), base, { overwrite, defaults: LIMIT_DEFAULTS });
      const drift = relabel(merge.drift, names);
      if (!hasWrites(merge))
        plan.push({ ...item, change: 'unchanged', drift, record: recordOf('VELOCITY_LIMIT', id, base, merge.state) });
      else {
        plan.push({
          ...item,
          change: 'update',
          detail: detailOf(merge.writes),
          drift,
          field: 'updateVelocityLimit(id: $ID, input: $VAR) { velocityLimitId }',
          id: { type: 'UUID!', value: id },
          variableType: 'VelocityLimitUpdateInput!',
          variable: merge.writes,
          record: recordOf('VELOCITY_LIMIT', id, base, merge.state, existing.version),
        });
      }
    }
    tick();
  }
  if (controls.length === 0) return;

  // What is attached now, per account or set (an id that does not exist has nothing).
  const attachedTo = new Map<string, Array<{ velocityControlId: string; journalId: string | null; params: unknown }>>();
  const attachedOf = async (accountId: string) => {
    if (!attachedTo.has(accountId)) {
      const nodes = await everyPage(
        target,
        `query($id: UUID!, $after: String) { attachedControls(accountId: $id, first: 500, after: $after) { nodes { velocityControlId journalId params } ${PAGE_INFO} } }`,
        { id: accountId },
        (d) => d.attachedControls,
      );
      attachedTo.set(accountId, nodes ?? []);
    }
    return attachedTo.get(accountId)!;
  };
  const named = (control: Record<string, any>, accountId: string) =>
    `${control.name} on ${names.get(accountId) ?? accountId}`;
  const attachField =
    'attachVelocityControl(velocityControlId: $CONTROL, accountId: $ACCOUNT, journalId: $JOURNAL, params: $PARAMS) { accountId }';
  const detached: PlanItem[] = [];
  const attachedItems: PlanItem[] = [];

  for (const { control, attach } of controls) {
    const id = String(control.velocityControlId);
    const base = baseOf('VELOCITY_CONTROL', id);
    const item = { kind: 'velocity control' as const, name: String(control.name), file: VELOCITY };
    const existing = await current(
      target,
      'query($id: UUID!) { velocityControl(id: $id) { name description enforcement { action } condition limits { velocityLimitId } version } }',
      { id },
      (d) => d.velocityControl,
    );
    const file = controlFields(control, control.velocityLimitIds, attach, true);
    // Where it is attached now, among the accounts and sets the file or the last deploy attached it to.
    const accounts = [
      ...new Set([
        ...attach.map((a) => a.accountId),
        ...Object.keys(base?.fields ?? {})
          .filter((f) => f.startsWith('attach.'))
          .map((f) => f.slice('attach.'.length)),
      ]),
    ];
    const attached = existing
      ? (
          await Promise.all(
            accounts.map(async (accountId) => ({
              accountId,
              found: (await attachedOf(accountId)).find((x) => x.velocityControlId === id),
            })),
          )
        ).flatMap(({ accountId, found }) =>
          found ? [{ accountId, journalId: found.journalId, params: found.params ?? null }] : [],
        )
      : [];
    const merge = existing
      ? mergeFields(
          file,
          controlFields(
            existing,
            existing.limits.map((l: any) => l.velocityLimitId),
            attached,
            false,
          ),
          base,
          { overwrite, defaults: CONTROL_DEFAULTS, group: inLimits },
        )
      : null;
    const writes = merge?.writes ?? Object.fromEntries(Object.entries(file).filter(([f]) => f.startsWith('attach.')));
    const controlWrites = Object.fromEntries(Object.entries(writes).filter(([f]) => !f.startsWith('attach.')));
    const drift = merge?.drift ?? [];
    const record = recordOf(
      'VELOCITY_CONTROL',
      id,
      base,
      merge?.state ?? { fields: file },
      existing && Object.keys(writes).length ? existing.version : undefined,
    );

    if (!existing) {
      plan.push({
        ...item,
        change: 'create',
        detail: count(control.velocityLimitIds.length, 'limit'),
        field: 'createVelocityControl(input: $VAR) { velocityControlId }',
        variableType: 'VelocityControlInput!',
        variable: control,
        record,
      });
    } else {
      const controlDrift = relabel(
        drift.filter((d) => !d.field.startsWith('attach')),
        limitNames,
      );
      const fields = plainWrites(controlWrites, ['limits']);
      const limitSteps = Object.entries(controlWrites)
        .filter(([f]) => f.startsWith('limits.'))
        .map(([f, v]) => ({ limitId: f.slice('limits.'.length), add: v !== null }));
      const step = (verb: string, limitId: string): Step => ({
        field: `${verb}(velocityControlId: $CONTROL, velocityLimitId: $LIMIT) { velocityControlId }`,
        args: { CONTROL: { type: 'UUID!', value: id }, LIMIT: { type: 'UUID!', value: limitId } },
      });
      if (Object.keys(controlWrites).length === 0)
        plan.push({ ...item, change: 'unchanged', drift: controlDrift, record });
      else {
        plan.push({
          ...item,
          change: 'update',
          detail: detailOf(controlWrites, { prefix: 'limits', noun: 'limit' }),
          drift: controlDrift,
          ...(Object.keys(fields).length
            ? {
                field: 'updateVelocityControl(id: $ID, input: $VAR) { velocityControlId }',
                id: { type: 'UUID!' as const, value: id },
                variableType: 'VelocityControlUpdateInput!',
                variable: fields,
              }
            : {}),
          steps: [
            ...limitSteps.filter((s) => !s.add).map((s) => step('removeLimitFromControl', s.limitId)),
            ...limitSteps.filter((s) => s.add).map((s) => step('addLimitToControl', s.limitId)),
          ],
          record,
        });
      }
    }
    tick();

    // Its attachments: one item each, for those the file lists and those it stopped listing.
    for (const accountId of accounts) {
      const field = `attach.${accountId}`;
      const listed = attach.find((a) => a.accountId === accountId);
      const base = { kind: 'velocity attachment' as const, name: named(control, accountId), file: VELOCITY };
      const attachDrift = drift.filter((d) => d.field === field).map((d) => ({ ...d, field: 'journal and params' }));
      const was = attached.some((a) => a.accountId === accountId);
      const driftOf = attachDrift.length ? { drift: attachDrift } : {};
      if (Object.hasOwn(writes, field) && writes[field] === null) {
        detached.push({
          ...base,
          change: 'remove',
          ...driftOf,
          steps: [
            {
              field: 'detachVelocityControl(velocityControlId: $CONTROL, accountId: $ACCOUNT) { accountId }',
              args: { CONTROL: { type: 'UUID!', value: id }, ACCOUNT: { type: 'UUID!', value: accountId } },
            },
          ],
        });
      } else if (Object.hasOwn(writes, field)) {
        const steps: Step[] = [
          {
            field: attachField,
            args: {
              CONTROL: { type: 'UUID!', value: id },
              ACCOUNT: { type: 'UUID!', value: accountId },
              JOURNAL: { type: 'UUID', value: listed!.journalId },
              PARAMS: { type: 'JSON', value: listed!.params },
            },
          },
        ];
        attachedItems.push(
          was
            ? { ...base, change: 'update', detail: 'journal or params changed', ...driftOf, steps }
            : { ...base, change: 'create', ...driftOf, steps },
        );
      } else if (listed || attachDrift.length) {
        attachedItems.push({ ...base, change: 'unchanged', ...driftOf });
      }
      if (listed) tick();
    }
  }
  // Detached first, so an account's slots (velocityControlsPerAccountMax) are free for what is attached.
  plan.push(...detached, ...attachedItems);
}
