import { EngineError } from '../errors.js';
import { authorityOf } from './call-rules.js';
import type { ExecutionRow } from '../storage/statements/actions.js';
import { type CallFrame, type Caller, rowToNode } from './call-tree.js';
import type { ExecutionServices } from './services.js';

/**
 * An idempotent replay (the same executionId, action and input) answers with the recorded
 * execution only the principal that made the call, and only when the stack asking may read it:
 * SELECT on actions.Execution with the record as document, as `execution(executionId:)` checks.
 * An execution id is not a capability. Ids are unique across principals, so another principal
 * sending the same id and input is a conflict: the id names someone else's call, whose output
 * was computed under their authority.
 */
export function checkReplay(svc: ExecutionServices, caller: Caller, frame: CallFrame | null, row: ExecutionRow): void {
  checkOwner(caller, row);
  authorityOf(svc.cel, caller, frame).check({
    action: 'SELECT',
    resource: 'actions.Execution',
    document: rowToNode(row),
  });
}

/**
 * An id another principal recorded is a conflict, answered the same whatever the input sent: the
 * answer must not tell a guess of someone else's input from a wrong one. Checked before the input.
 */
export function checkOwner(caller: Caller, row: Pick<ExecutionRow, 'execution_id' | 'principal'>): void {
  if ((row.principal ?? null) !== caller.principal) {
    throw new EngineError(
      'EXECUTION_ID_CONFLICT',
      `execution ${row.execution_id} was recorded for another caller; an id names one call`,
      {
        hint: 'Use a new executionId for each call; to read an execution, query actions.execution.',
        details: { executionId: row.execution_id },
      },
    );
  }
}
