import type { Cel } from '../cel/cel.js';
import type { Clock } from '../clock.js';
import type { Limits } from '../limits.js';
import type { LedgerStatements } from '../storage/statements/ledger.js';

/** What every ledger operation needs; built once per engine. */
export interface LedgerDeps {
  st: LedgerStatements;
  cel: Cel;
  clock: Clock;
  limits: Readonly<Limits>;
}
