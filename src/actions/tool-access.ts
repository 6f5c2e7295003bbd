import type { Policy, PolicyAction } from '../policy/policy.js';
import { resourceMatches } from '../policy/policy.js';
import type { ActionDeps, ActionVersion } from './types.js';
import { findAction, getVersion, latestActiveVersion } from './versions.js';

/** What an agent is told about a tool before calling it (MCP tools/list annotations). */
export interface ToolAccess {
  /** Its policies, and those of every tool it references transitively, allow only reads. */
  readOnly: boolean;
  /** They allow UPDATE or DELETE somewhere. */
  destructive: boolean;
}

/** A write a tool's policies allow: an action other than SELECT on a resource pattern. */
export interface ToolWrite {
  action: PolicyAction;
  resource: string;
}

/**
 * What toolWrites learnt in one request, by version (actionId@version): each version's own writes
 * and resolved references, and each walked tool's transitive writes. A listing of many tools that
 * reference each other reads each version once instead of once per tool that reaches it.
 */
export interface ToolWritesMemo {
  own: Map<string, { writes: ToolWrite[]; references: Array<ActionVersion | null> }>;
  total: Map<string, ToolWrite[]>;
}

export function toolWritesMemo(): ToolWritesMemo {
  return { own: new Map(), total: new Map() };
}

/**
 * Every write the tool's ALLOW policies permit, with those of the tools it references (pinned, or
 * their latest ACTIVE version), transitively. Invoking another tool (INSERT on actions.Execution)
 * is not a write of its own: the referenced tool's writes are counted instead. Each distinct write
 * is listed once. Pass one memo for a whole request (a fresh one otherwise).
 */
export function toolWrites(
  deps: ActionDeps,
  version: ActionVersion,
  memo: ToolWritesMemo = toolWritesMemo(),
): ToolWrite[] {
  const rootKey = `${version.actionId}@${version.version}`;
  const known = memo.total.get(rootKey);
  if (known) return known;
  const writes = new Map<string, ToolWrite>();
  const add = (list: readonly ToolWrite[]) => {
    for (const w of list) writes.set(`${w.action} ${w.resource}`, w);
  };
  const seen = new Set<string>();
  const pending: ActionVersion[] = [version];
  while (pending.length > 0) {
    const current = pending.pop()!;
    const key = `${current.actionId}@${current.version}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const total = memo.total.get(key);
    if (total) {
      // Everything it reaches is in its total already.
      add(total);
      continue;
    }
    let own = memo.own.get(key);
    if (!own) {
      own = {
        writes: policyWrites(current.policies),
        references: current.tools.map((r) => resolveReference(deps, r.name, r.version)),
      };
      memo.own.set(key, own);
    }
    add(own.writes);
    for (const referenced of own.references) if (referenced) pending.push(referenced);
  }
  const result = [...writes.values()];
  memo.total.set(rootKey, result);
  return result;
}

/** The writes a caller's policies could allow, ignoring assertions (null: no client, all allowed). */
export function policyWrites(policies: readonly Policy[]): ToolWrite[] {
  const writes: ToolWrite[] = [];
  for (const policy of policies) {
    if (policy.effect !== 'ALLOW') continue;
    for (const action of policy.actions) {
      if (action === 'SELECT') continue;
      for (const resource of policy.resources) {
        if (action === 'INSERT' && resource === 'actions.Execution') continue;
        writes.push({ action, resource });
      }
    }
  }
  return writes;
}

/** A write of the tool that some ALLOW policy of the caller also covers (pattern against pattern). */
export function overlaps(tool: ToolWrite, caller: readonly ToolWrite[]): boolean {
  return caller.some(
    (c) =>
      c.action === tool.action &&
      (resourceMatches(c.resource, tool.resource) || resourceMatches(tool.resource, c.resource)),
  );
}

/**
 * The access an agent is told about, under the caller's policies (null: the engine itself). A tool
 * whose writes the caller may not make at all is `hidden`: a call would be refused when it writes.
 */
export function toolAccess(
  deps: ActionDeps,
  version: ActionVersion,
  callerPolicies: readonly Policy[] | null,
  memo?: ToolWritesMemo,
): ToolAccess & { hidden: boolean } {
  const hinted = serverHints(version);
  if (hinted) return { ...hinted, hidden: false };
  const writes = toolWrites(deps, version, memo);
  const callerWrites = callerPolicies === null ? null : policyWrites(callerPolicies);
  const usable = callerWrites === null ? writes : writes.filter((w) => overlaps(w, callerWrites));
  return {
    // isReadOnly's rule, on the writes already walked.
    readOnly: writes.length === 0,
    destructive: usable.some((w) => w.action === 'UPDATE' || w.action === 'DELETE'),
    hidden: writes.length > 0 && usable.length === 0,
  };
}

/**
 * Whether a version only reads: no ALLOW policy of its own, or of a tool it references
 * (transitively), allows a write. The rule MCP's readOnlyHint and Action.tool.readOnly show, and
 * execution.cacheTtlMs requires.
 */
export function isReadOnly(deps: ActionDeps, version: ActionVersion, memo?: ToolWritesMemo): boolean {
  return serverHints(version)?.readOnly ?? toolWrites(deps, version, memo).length === 0;
}

/**
 * An imported MCP tool does nothing to Tally: what it does is its server's, as the server's own
 * annotations say (recorded at import; MCP's defaults: not read-only, and then destructive unless
 * it says otherwise). Null for every other kind.
 */
function serverHints(version: ActionVersion): ToolAccess | null {
  if (version.kind !== 'mcp') return null;
  const annotations = (version.config.annotations ?? null) as {
    readOnlyHint?: unknown;
    destructiveHint?: unknown;
  } | null;
  const readOnly = annotations?.readOnlyHint === true;
  return { readOnly, destructive: !readOnly && annotations?.destructiveHint !== false };
}

function resolveReference(deps: ActionDeps, name: string, version: number | null): ActionVersion | null {
  try {
    if (version !== null) return getVersion(deps, { name, version });
    return latestActiveVersion(deps, findAction(deps, { name }).action_id);
  } catch {
    // A reference to a tool that does not exist (yet) fails at call time; it writes nothing now.
    return null;
  }
}

/** What the caller's own policies allow (the native graphql tool runs under them alone). */
export function callerAccess(callerPolicies: readonly Policy[] | null): ToolAccess {
  if (callerPolicies === null) return { readOnly: false, destructive: true };
  const writes = policyWrites(callerPolicies);
  return {
    readOnly: writes.length === 0,
    destructive: writes.some((w) => w.action === 'UPDATE' || w.action === 'DELETE'),
  };
}
