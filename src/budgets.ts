import { EngineError, limitExceeded } from './errors.js';

/*
 * Budgets: how long a piece of work may hold the engine, by who asks and what it is (docs/guides/operations.md,
^ * "Budgets"). A request runs under requestDeadlineMs, or operatorDeadlineMs when it asks for the
 * OPERATOR budget and may; a call within it under its tool's timeout (the version's
 * execution.timeoutMs, else toolTimeoutMs), never past its request's. Every error of work that ran
 * out says which budget it ran out of, in `details.budget`, and how to raise it.
 */

/** What set a deadline: the limit (its key in TALLY_CONFIG "limits") or a version's own setting, and its length. */
export interface Budget {
  name: 'requestDeadlineMs' | 'operatorDeadlineMs' | 'toolTimeoutMs' | 'execution.timeoutMs' | 'agent.runTimeoutMs';
  ms: number;
}

/** A request's budget: the limit that set its deadline. */
export type RequestDeadline = Budget & { name: 'requestDeadlineMs' | 'operatorDeadlineMs' };

/** How to get more of a budget, said in every error of work that ran out of it. */
export function raiseHint(budget: Budget): string {
  switch (budget.name) {
    case 'requestDeadlineMs':
      return (
        'Ask for less per request: smaller first, fewer nested connections, fewer operations, and page through the rest with after; split tool calls over several requests, or start them (startAction). ' +
        "An operator's long work (a deploy, an import) can ask for the operator budget with @budget(name: OPERATOR) (a policy allowing INSERT on budget.Operator); or raise limits.requestDeadlineMs in TALLY_CONFIG."
      );
    case 'operatorDeadlineMs':
      return 'Send the work in several requests, or raise limits.operatorDeadlineMs in TALLY_CONFIG (on SQLite the request holds the writer all that time).';
    case 'toolTimeoutMs':
      return "Do less per call, or set the version's execution.timeoutMs (at most toolTimeoutMsMax); the default for versions without one is limits.toolTimeoutMs in TALLY_CONFIG.";
    case 'execution.timeoutMs':
      return "Do less per call, or raise the version's execution.timeoutMs (at most toolTimeoutMsMax, in TALLY_CONFIG limits).";
    case 'agent.runTimeoutMs':
      return "Raise the agent's runTimeoutMs (at most agentRunMsMax, in TALLY_CONFIG limits), or ask it for less.";
  }
}

/**
 * Work that ran past its deadline, found by the resolver `at` (the request fails, a mutation rolls
 * back): the request's budget, or within a call the call's.
 */
export function overrun(budget: Budget, at: string): EngineError {
  const who = budget.name === 'requestDeadlineMs' || budget.name === 'operatorDeadlineMs' ? 'the request' : 'the call';
  return limitExceeded(budget.name, budget.ms, null, `${who} ran past ${budget.name} (${budget.ms} ms) at ${at}`, {
    hint: raiseHint(budget),
    details: { budget: budget.name, [budget.name]: budget.ms },
  });
}

/** A call that ran past its deadline: TIMEOUT, naming the budget that set it. */
export function callTimeout(name: string, budget: Budget, shared: boolean): EngineError {
  const whose = shared ? ", the request's deadline, shared by every call in it" : '';
  return new EngineError('TIMEOUT', `${name} ran past ${budget.name} (${budget.ms} ms${whose})`, {
    hint: raiseHint(budget),
    details: { budget: budget.name, [budget.name]: budget.ms },
  });
}
