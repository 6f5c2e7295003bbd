import type { Cel } from '../cel/cel.js';
import type { Ledger } from '../ledger/ledger.js';
import type { Limits } from '../limits.js';

/** What every resolver of one request sees. Built per request by the engine. */
export interface RequestContext {
  ledger: Ledger;
  cel: Cel;
  limits: Readonly<Limits>;
}
