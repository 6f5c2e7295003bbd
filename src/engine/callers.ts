import {
  authenticate,
  type Client,
  type ClientDeps,
  hashKey,
  invalidKey,
  lookupClient,
  SYSTEM_PRINCIPAL,
} from '../auth/clients.js';
import type { RequestDeadline } from '../budgets.js';
import type { Cel } from '../cel/cel.js';
import { EngineError } from '../errors.js';
import type { Caller } from '../execution/call-tree.js';
import { authorityOf } from '../execution/call-rules.js';
import type { RequestBudget } from '../graphql/executor.js';
import type { Limits } from '../limits.js';
import type { RecordCache } from '../storage/record-cache.js';
import type { RequestOptions } from './types.js';

/**
 * Who a request acts as, read inside its transaction, and the budget it may run under. The one
 * place a request's caller is made from a principal or an API key.
 */
export class Callers {
  constructor(
    private readonly clients: ClientDeps,
    private readonly cel: Cel,
    private readonly limits: Pick<Limits, 'requestDeadlineMs' | 'operatorDeadlineMs'>,
    /** Clients by key hash, of this cache epoch (any write to clients empties it). */
    private readonly byKey: RecordCache<Client>,
  ) {}

  /** The caller of a request: a known client, or the engine itself. */
  of(principal: string | undefined): Caller | EngineError {
    if (principal === undefined) return { principal: SYSTEM_PRINCIPAL, client: null };
    const client = lookupClient(this.clients, principal);
    if (!client)
      return new EngineError('UNAUTHENTICATED', `no client has principal ${JSON.stringify(principal)}`, {
        hint: 'Create the client first with auth.createClient.',
      });
    return asCaller(client);
  }

  /**
   * The caller of a request, read inside its transaction: what it may do is what was committed when
   * it began. The client of a key comes from a cache of this epoch (any write to clients, here or by
   * another connection, empties it), so the HTTP server's check before the body and this one cost
   * one lookup between them, and a key rotated in between is still refused.
   */
  ofRequest(options: RequestOptions): Caller | EngineError {
    if (options.apiKey === undefined) return this.of(options.principal);
    const apiKey = options.apiKey;
    // Cached by the key's hash, as the database holds it: the cache never holds a key.
    const client = this.byKey.get(hashKey(apiKey), () => authenticate(this.clients, apiKey) ?? undefined);
    return client ? asCaller(client) : invalidKey();
  }

  /**
   * The budget a request runs under (see @budget): STANDARD for anyone, OPERATOR for the engine
   * itself and for a client whose policies allow INSERT on budget.Operator.
   */
  budget(caller: Caller, name: RequestBudget): RequestDeadline | EngineError {
    if (name === 'STANDARD') return { name: 'requestDeadlineMs', ms: this.limits.requestDeadlineMs };
    try {
      authorityOf(this.cel, caller, null).check({ action: 'INSERT', resource: 'budget.Operator' });
    } catch (error) {
      if (!(error instanceof EngineError)) throw error;
      return new EngineError(
        'ACCESS_DENIED',
        `${caller.principal} may not run a request under the OPERATOR budget: ${error.message}`,
        {
          hint: "The operator budget (operatorDeadlineMs) is for an operator's long work: give the client a policy allowing INSERT on budget.Operator, or leave out @budget.",
          details: { budget: 'OPERATOR', resource: 'budget.Operator' },
        },
      );
    }
    return { name: 'operatorDeadlineMs', ms: this.limits.operatorDeadlineMs };
  }
}

function asCaller(client: Client): Caller {
  return { principal: client.principal, client: { principal: client.principal, policies: client.policies } };
}
