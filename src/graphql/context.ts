import type { Cel } from '../cel/cel.js';
import type { CallFrame } from '../execution/call-tree.js';
import type { ExecutionServices } from '../execution/services.js';
import type { Ledger } from '../ledger/ledger.js';
import type { Limits } from '../limits.js';

/** What every resolver of one request (or of one GraphQL call a program makes) sees. */
export interface RequestContext {
  ledger: Ledger;
  cel: Cel;
  limits: Readonly<Limits>;
  services: ExecutionServices;
  /** Who is asking. */
  principal: string;
  /** The call this operation runs inside; null for a client's own request. */
  frame: CallFrame | null;
}
