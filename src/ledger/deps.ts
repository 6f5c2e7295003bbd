import type { Cel } from '../cel/cel.js';
import type { Clock } from '../clock.js';
import type { Limits } from '../limits.js';
import type { CacheEpoch, RecordCache } from '../storage/record-cache.js';
import type { CalculationStatements } from '../storage/statements/calculations.js';
import type { AccountRow, JournalRow, LedgerStatements, TranCodeRow } from '../storage/statements/ledger.js';
import type { VelocityStatements } from '../storage/statements/velocity.js';
import type { ViewStatements } from '../storage/statements/views.js';

/** The changes a trigger can listen to. */
export const LEDGER_EVENTS = ['transaction.inserted', 'account.inserted', 'account.updated'] as const;
export type LedgerEvent = (typeof LEDGER_EVENTS)[number];

/** A change to a ledger record, reported inside the transaction that makes it. */
export interface LedgerChange {
  event: LedgerEvent;
  /** The record's id and version: with a trigger's id they name the execution it starts. */
  recordId: string;
  recordVersion: number;
  /** The record, built on demand (only when a trigger listens to the event). */
  document: () => unknown;
  previous: unknown;
}

/** What every ledger operation needs; built once per engine. */
export interface LedgerDeps {
  st: LedgerStatements;
  /** Calculations and their balances (src/ledger/calculations.ts, calculation-*.ts). */
  calc: CalculationStatements;
  /** Velocity limits and controls (src/ledger/velocity.ts, velocity-*.ts). */
  vel: VelocityStatements;
  /** Views and custom indexes (src/ledger/views.ts, view-updates.ts, indexes.ts). */
  views: ViewStatements;
  cel: Cel;
  clock: Clock;
  limits: Readonly<Limits>;
  /** Time-ordered ids for records the engine names (entries, reversals). */
  newId: () => string;
  /** Moves when cached rows may be stale (see CacheEpoch). */
  epoch: CacheEpoch;
  /** Rows every posting reads: the journal by id, the tran code by code. */
  cache: {
    journals: RecordCache<JournalRow>;
    tranCodesByCode: RecordCache<TranCodeRow>;
    /** Account and set rows by id, as postings read them (never mutate one: it is shared). */
    accounts: RecordCache<AccountRow>;
    /** The sets above an account in a journal, by `${accountId} ${journalId}`. */
    setsAbove: RecordCache<string[]>;
    /** Anything else a posting consults and that changes only with the cached tables (see velocity-totals.ts, velocity-limits.ts). */
    posting: RecordCache<unknown>;
  };
  /** Told of every change, in the same transaction (triggers start executions from here). */
  onChange?: (change: LedgerChange) => void;
}

/** An account or set row by id: from the epoch cache inside the engine's transactions. */
export function cachedAccount(deps: LedgerDeps, accountId: string): AccountRow | undefined {
  return deps.cache.accounts.get(accountId, (id) => deps.st.accountById.get(id));
}
