import type { DeployedState } from './drift.js';
import { type DeployedKind, DeployError } from './plan-item.js';
import type { GraphqlResponse, Target } from './target.js';

/*
 * What the plan reads from the target: one record's current state (null when it does not exist),
 * every node of a connection, and what the last deploys recorded of the project's records.
 */

async function query(target: Target, text: string, variables: Record<string, unknown>): Promise<GraphqlResponse> {
  return target.request(text, variables);
}

/** The current state of one thing on the target, or null when it does not exist. */
export async function current(
  target: Target,
  text: string,
  variables: Record<string, unknown>,
  pick: (data: any) => any,
): Promise<any | null> {
  const result = await query(target, text, variables);
  if (result.errors?.length) {
    if (result.errors[0]!.extensions?.code === 'NOT_FOUND') return null;
    const first = result.errors[0]!;
    const code = typeof first.extensions?.code === 'string' ? ` [${first.extensions.code}]` : '';
    const hint = typeof first.extensions?.hint === 'string' ? `\n${first.extensions.hint}` : '';
    throw new DeployError(`reading the target failed: ${first.message}${code}${hint}`);
  }
  return pick(result.data);
}

/** How many records one deployedRecords or recordDeployment field carries (the server takes at most pageSizeMax). */
export const RECORDS_PER_FIELD = 100;

export type States = Map<string, DeployedState>;
export const stateKey = (kind: DeployedKind, id: string) => `${kind} ${id}`;

/** What the last deploys recorded of the records the project names, one request per RECORDS_PER_FIELD. */
export async function deployedStates(target: Target, keys: Array<{ kind: DeployedKind; id: string }>): Promise<States> {
  const states: States = new Map();
  for (let i = 0; i < keys.length; i += RECORDS_PER_FIELD) {
    const found = await current(
      target,
      'query($k: [DeployedRecordKey!]!) { deployedRecords(keys: $k) { kind id state } }',
      { k: keys.slice(i, i + RECORDS_PER_FIELD) },
      (d) => d.deployedRecords,
    );
    for (const r of found ?? []) states.set(stateKey(r.kind, r.id), r.state as DeployedState);
  }
  return states;
}

export const PAGE_INFO = 'pageInfo { hasNextPage endCursor }';

/** Every node of a connection, page by page: `text` takes $after and puts `pageInfo` in `pick`'s result. */
export async function everyPage(
  target: Target,
  text: string,
  variables: Record<string, unknown>,
  pick: (data: any) => any,
): Promise<any[] | null> {
  const nodes: any[] = [];
  let after: string | null = null;
  for (;;) {
    const connection = await current(target, text, { ...variables, after }, pick);
    if (!connection) return null;
    nodes.push(...connection.nodes);
    if (!connection.pageInfo.hasNextPage) return nodes;
    after = connection.pageInfo.endCursor;
  }
}
