import type { DeployedRecordRow, DeploymentStatements } from '../storage/statements/deployments.js';

/**
 * What `tally deploy` recorded of each record it manages (migration 19), read and written for the
 * GraphQL resolvers (src/graphql/resolvers/deployments.ts), which check the policies on
 * deploy.Record around each call. Runs inside the caller's transaction.
 */
export interface RecordDeps {
  deployments: DeploymentStatements;
}

/** A deployed record as the API gives it (DeployedRecord in schema.graphql). */
export interface DeployedRecord {
  kind: string;
  id: string;
  state: unknown;
  principal: string;
  version: number;
  deployed: string;
}

function toRecord(row: DeployedRecordRow): DeployedRecord {
  return {
    kind: row.kind,
    id: row.record_id,
    state: JSON.parse(row.state),
    principal: row.principal,
    version: row.version,
    deployed: row.modified,
  };
}

/** What was recorded of the record `kind`/`id`, or null when a deploy never recorded it. */
export function deployedRecord(deps: RecordDeps, kind: string, id: string): DeployedRecord | null {
  const row = deps.deployments.recordByKey.get(kind, id);
  return row ? toRecord(row) : null;
}

/**
 * Record what a deploy left of one record: `state` is its JSON object text. A first record is
 * version 1; each later one replaces the state and principal and counts the version up.
 */
export function writeRecord(
  deps: RecordDeps,
  record: { kind: string; id: string; state: string },
  principal: string,
  now: string,
): void {
  deps.deployments.upsertRecord.run({
    kind: record.kind,
    record_id: record.id,
    state: record.state,
    principal,
    created: now,
    modified: now,
  });
}
