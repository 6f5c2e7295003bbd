import type { DeployedState, Drift } from './drift.js';

/*
 * What a deploy plans and reports: one PlanItem per record (what changes, the mutation that does it,
 * the drift it found, the deployed state it records), the result of a deploy, and its error.
 */

/** `remove` undoes what the project no longer lists (a velocity control's attachment). */
export type Change = 'create' | 'update' | 'unchanged' | 'remove';

export interface PlanItem {
  kind:
    | 'account'
    | 'account set'
    | 'velocity limit'
    | 'velocity control'
    | 'velocity attachment'
    | 'tran code'
    | 'skill'
    | 'tool'
    | 'trigger'
    | 'client';
  name: string;
  change: Change;
  /** For versioned things: the version the deploy makes, or keeps. */
  version?: number;
  /** What else changes with it, for the plan: "name, metadata.tier", "2 members", "+1 member, -1 limit". */
  detail?: string;
  /**
   * The mutation that applies it (alias-free field text, `$VAR` for its input and `$ID` for the id
   * it names) and their variables: values from project files never become query text.
   */
  field?: string;
  variableType?: string;
  variable?: unknown;
  id?: { type: 'UUID!' | 'String!'; value: unknown };
  /**
   * Further mutations of the same change, run after `field` (or alone when there is none): a set's
   * members, a control's limits. `$NAME` in a step's field stands for args.NAME.
   */
  steps?: Step[];
  /** Fields whose value now is not what the last deploy left, and what this deploy does with each (src/deploy/drift.ts). */
  drift?: Drift[];
  /** What the deploy records of the record, first in its transaction (see recordDeployment). */
  record?: RecordWrite;
  /** Where it comes from, for error messages. */
  file: string;
}

export interface Step {
  field: string;
  args: Record<string, { type: string; value: unknown }>;
}

/** The kinds of record the server keeps a deployed state of (schema.graphql DeployedKind). */
export type DeployedKind =
  | 'ACCOUNT'
  | 'ACCOUNT_SET'
  | 'VELOCITY_LIMIT'
  | 'VELOCITY_CONTROL'
  | 'TRAN_CODE'
  | 'TOOL'
  | 'SKILL'
  | 'TRIGGER'
  | 'CLIENT';

/** A DeployedRecordInput: the state this deploy leaves, and the version it planned from when it writes the record. */
export interface RecordWrite {
  kind: DeployedKind;
  id: string;
  state: DeployedState;
  expectVersion?: number;
}

export interface DeployResult {
  plan: PlanItem[];
  applied: boolean;
  /** API keys of clients created by this deploy (shown once). */
  keys: Record<string, string>;
}

export interface PlanOptions {
  /** Write the files' values over fields changed at runtime since the last deploy (tally deploy --overwrite-runtime-changes). */
  overwriteRuntimeChanges?: boolean;
}

export class DeployError extends Error {
  constructor(
    message: string,
    readonly plan: PlanItem[] = [],
    /** CONFLICT: fields changed both at runtime and in the files; nothing was sent. */
    readonly code?: 'CONFLICT',
    readonly hint?: string,
  ) {
    super(message);
  }
}
