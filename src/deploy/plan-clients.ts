import { type DeployedState, type Flat, mergeFields } from './drift.js';
import { detailOf, hasWrites, recordOf, relabel } from './plan-common.js';
import type { PlanItem } from './plan-item.js';
import { current } from './reads.js';
import type { Target } from './target.js';

/*
 * The plan of a client of clients.json: its name and policies merged with what it holds now (a
 * client created by the deploy gets an API key, shown once).
 */

const policiesOf = (policies: any[] | undefined | null) =>
  (policies ?? []).map((p: any) => ({
    effect: p.effect,
    actions: p.actions,
    resources: p.resources,
    assertions: p.assertions ?? null,
  }));

export async function planClient(
  target: Target,
  client: Record<string, any>,
  base: DeployedState | null,
  overwrite: boolean,
): Promise<PlanItem> {
  const principal = String(client.principal);
  const item = { kind: 'client' as const, name: principal, file: 'clients.json' };
  const file: Flat = {
    ...(client.name !== undefined ? { name: client.name } : {}),
    ...(client.policies !== undefined ? { policies: policiesOf(client.policies) } : {}),
  };
  const existing = await current(
    target,
    'query($p: String!) { auth { client(principal: $p) { name policies { effect actions resources assertions } version } } }',
    { p: client.principal },
    (d) => d.auth.client,
  );
  if (!existing)
    return {
      ...item,
      change: 'create',
      field: 'createClient(input: $VAR) { apiKey client { principal } }',
      variableType: 'ClientInput!',
      variable: client,
      record: recordOf('CLIENT', principal, base, { fields: file }),
    };
  const merge = mergeFields(file, { name: existing.name, policies: policiesOf(existing.policies) }, base, {
    overwrite,
    defaults: { policies: [] },
  });
  const drift = relabel(merge.drift, new Map());
  if (!hasWrites(merge))
    return { ...item, change: 'unchanged', drift, record: recordOf('CLIENT', principal, base, merge.state) };
  // Policies go as the file wrote them (the server parses them); dropped from the file: none.
  const variable = {
    ...(Object.hasOwn(merge.writes, 'name') ? { name: merge.writes.name } : {}),
    ...(Object.hasOwn(merge.writes, 'policies') ? { policies: client.policies ?? [] } : {}),
  };
  return {
    ...item,
    change: 'update',
    detail: detailOf(merge.writes),
    drift,
    field: 'updateClient(principal: $ID, input: $VAR) { client { principal } }',
    id: { type: 'String!', value: client.principal },
    variableType: 'ClientUpdateInput!',
    variable,
    record: recordOf('CLIENT', principal, base, merge.state, existing.version),
  };
}
