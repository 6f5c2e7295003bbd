import type { Cel } from '../cel/cel.js';
import type { CallFrame } from '../execution/call-tree.js';
import type { ExecutionServices } from '../execution/services.js';
import type { Ledger } from '../ledger/ledger.js';
import type { ClientDeps } from '../auth/clients.js';
import type { Limits } from '../limits.js';
import type { Authority } from '../policy/authority.js';
import type { Caller } from '../execution/call-tree.js';

/** What every resolver of one request (or of one GraphQL call a program makes) sees. */
export interface RequestContext {
  ledger: Ledger;
  cel: Cel;
  limits: Readonly<Limits>;
  services: ExecutionServices;
  clients: ClientDeps;
  /** Who is asking. */
  principal: string;
  caller: Caller;
  /** The authority stack of this operation: the client and every tool on the call stack. */
  authority: Authority;
  /** The call this operation runs inside; null for a client's own request. */
  frame: CallFrame | null;
}
