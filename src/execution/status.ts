/** Statuses an execution never leaves by itself: it is over (CACHED: a call answered from an earlier one). */
export const FINISHED_STATUSES: ReadonlySet<string> = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'CACHED']);

/**
 * Where a wait for an execution ends: it is over, or it waits for a person (WAITING_APPROVAL), who
 * must act before it can go on. Every waiter (the long-poll, MCP, the CLI) stops at these.
 */
export const WAIT_ENDS: ReadonlySet<string> = new Set([...FINISHED_STATUSES, 'WAITING_APPROVAL']);
