import type { Cel } from '../cel/cel.js';
import { readsIdentifier } from './references.js';
import type { ActionVersion } from './types.js';

/**
 * Whether a version runs only as a session's turn: an agent with a sessionSchema, or whose tool
 * references read `session`. A property of the version, so the queue (which refuses to start it
 * alone) and the sessions (which run its turns) ask the same question here.
 */
export function needsSession(cel: Cel, version: ActionVersion): boolean {
  if (version.kind !== 'agent') return false;
  if (version.tool.sessionSchema) return true;
  return version.tools.some((ref) =>
    Object.values(ref.input ?? {}).some((expression) =>
      readsIdentifier((cel.compile(expression) as { ast?: unknown }).ast, 'session'),
    ),
  );
}
