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
  /** This operation is `@dryRun`, or runs inside one: whatever it writes is rolled back. */
  dryRun: boolean;
  /**
   * Where `actions.execution(waitMs:)` records a wait, for a request run by engine.executeAsync
   * (HTTP, MCP): it waits after the transaction ends and runs the request again. Absent for
   * in-process requests and calls made by programs, which answer at once.
   */
  waits?: ExecutionWait[];
}

/** A client's request to be answered when an execution is terminal, or after waitMs. */
export interface ExecutionWait {
  executionId: string;
  waitMs: number;
  /** Who waits: one client holds at most executionWaitersPerClientMax waits. */
  principal: string;
  /** The wait also ends when the execution has a progress message newer than this seq. */
  progressAfter?: number;
}
