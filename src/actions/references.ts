import { badInput, EngineError, limitExceeded, quote } from '../errors.js';
import {
  type ActionDeps,
  type ActionInput,
  type ActionKind,
  type ActionVersionDocument,
  NATIVE_TOOLS,
  runsOutsideTransactions,
  type ToolReference,
} from './types.js';
import { versionOfRow } from './versions.js';

/*
 * What a version refers to: the tools it references (fixed input, an agent's approvals), its
 * before/after hooks, and that an agent's tools are described for its model.
 */

/** Does a parsed CEL expression name this identifier anywhere (as a variable, not a field)? */
export function readsIdentifier(ast: unknown, name: string): boolean {
  const stack: unknown[] = [ast];
  while (stack.length > 0) {
    const node = stack.pop();
    if (Array.isArray(node)) {
      stack.push(...node);
    } else if (node !== null && typeof node === 'object') {
      const { op, args } = node as { op?: unknown; args?: unknown };
      if (op === 'id' && args === name) return true;
      stack.push(args);
    }
  }
  return false;
}

/**
 * An action's before/after hooks: tool or graphql actions that exist (a pinned version too), never
 * the action itself, never a model or agent (a hook runs inside the call's transaction).
 */
export function checkHooks(
  deps: ActionDeps,
  name: string,
  kind: ActionKind,
  hooks: NonNullable<ActionInput['hooks']>,
): NonNullable<ActionVersionDocument['hooks']> {
  if (runsOutsideTransactions(kind))
    throw new EngineError('BAD_REQUEST', `hooks are for tools; this is a ${kind}`, {
      hint: 'Hook the tools the agent calls instead.',
    });
  const one = (
    ref: { name: string; version?: number | null } | null | undefined,
    phase: 'before' | 'after',
  ): ToolReference | null => {
    if (ref == null) return null;
    const what = `hooks.${phase}`;
    if ((NATIVE_TOOLS as readonly string[]).includes(ref.name))
      throw new EngineError('BAD_REQUEST', `${what} cannot be the native ${ref.name} tool`, {
        hint: 'Hook a tool of your own.',
      });
    if (ref.name === name)
      throw new EngineError('BAD_REQUEST', `${what} cannot be ${name} itself`, { hint: 'A hook is another tool.' });
    const target = deps.st.actionByName.get(ref.name);
    if (!target)
      throw new EngineError('NOT_FOUND', `${what} refers to tool ${quote(ref.name)}, which does not exist`, {
        hint: 'Create the hook tool first.',
      });
    const version = deps.st.version.get(target.action_id, ref.version ?? target.latest_version);
    if (!version)
      throw new EngineError(
        'NOT_FOUND',
        `${what} pins ${ref.name} version ${ref.version}; its latest is ${target.latest_version}`,
      );
    const hookKind = (JSON.parse(version.document) as ActionVersionDocument).kind;
    if (runsOutsideTransactions(hookKind))
      throw new EngineError(
        'BAD_REQUEST',
        `${what} refers to ${ref.name}, a ${hookKind}: a hook runs inside the call's transaction`,
        { hint: 'Use a tool or graphql action as a hook.' },
      );
    return { name: ref.name, version: ref.version ?? null, input: null };
  };
  return { before: one(hooks.before, 'before'), after: one(hooks.after, 'after') };
}

export function checkReference(
  deps: ActionDeps,
  ref: {
    name: string;
    version?: number | null;
    input?: unknown;
    approval?: { when?: string | null; timeoutMs?: number | null } | null;
  },
  i: number,
  kind: ActionKind,
): ToolReference {
  const what = `tools[${i}]`;
  if (!(NATIVE_TOOLS as readonly string[]).includes(ref.name)) {
    const target = deps.st.actionByName.get(ref.name);
    if (!target) {
      throw new EngineError('NOT_FOUND', `${what} refers to tool ${quote(ref.name)}, which does not exist`, {
        hint: 'Create that tool first, or fix the name.',
      });
    }
    if (ref.version != null && !deps.st.version.get(target.action_id, ref.version)) {
      throw new EngineError(
        'NOT_FOUND',
        `${what} pins ${ref.name} version ${ref.version}; its latest is ${target.latest_version}`,
      );
    }
  }
  let input: Record<string, string> | null = null;
  if (ref.input != null) {
    if (typeof ref.input !== 'object' || Array.isArray(ref.input)) {
      throw new EngineError('BAD_REQUEST', `${what}.input must map input properties to CEL expressions`);
    }
    input = {};
    for (const [prop, expression] of Object.entries(ref.input as Record<string, unknown>)) {
      if (typeof expression !== 'string')
        throw badInput(`${what}.input.${prop} must be a CEL expression string`, expression);
      let compiled: unknown;
      try {
        compiled = deps.cel.compile(expression);
      } catch (error) {
        throw new EngineError('BAD_REQUEST', `${what}.input.${prop}: ${(error as Error).message}`);
      }
      if (kind !== 'agent' && readsIdentifier((compiled as { ast?: unknown }).ast, 'session')) {
        throw new EngineError(
          'BAD_REQUEST',
          `${what}.input.${prop} reads session (${quote(expression)}): only an agent's references run in a session`,
          {
            hint: 'Reference input of a tool sees event, tool.input and execution.input; take the value from one of those.',
          },
        );
      }
      input[prop] = expression;
    }
  }
  let approval: ToolReference['approval'] = null;
  if (ref.approval != null) {
    if (kind !== 'agent')
      throw new EngineError('BAD_REQUEST', `${what}.approval is for an agent's references; this is a ${kind}`, {
        hint: 'A person approves calls an agent’s model asks for.',
      });
    const when = ref.approval.when ?? null;
    if (when !== null) {
      try {
        deps.cel.compile(when);
      } catch (error) {
        throw new EngineError('BAD_REQUEST', `${what}.approval.when: ${(error as Error).message}`, {
          hint: 'A CEL expression over input, e.g. "decimal(input.amount) > decimal(\\"1000\\")".',
        });
      }
    }
    // Stored as written (null: approvalTimeoutMsMax when the call is asked), so a redeploy of the same file is unchanged.
    const timeoutMs = ref.approval.timeoutMs ?? null;
    if (timeoutMs !== null && (!Number.isInteger(timeoutMs) || timeoutMs < 1))
      throw badInput(`${what}.approval.timeoutMs must be a positive integer`, timeoutMs);
    if (timeoutMs !== null && timeoutMs > deps.limits.approvalTimeoutMsMax)
      throw limitExceeded(
        'approvalTimeoutMsMax',
        deps.limits.approvalTimeoutMsMax,
        timeoutMs,
        `${what}.approval.timeoutMs ${timeoutMs} is over approvalTimeoutMsMax (${deps.limits.approvalTimeoutMsMax})`,
      );
    approval = { when, timeoutMs };
  }
  return { name: ref.name, version: ref.version ?? null, input, ...(approval ? { approval } : {}) };
}
/**
 * What an agent offers its model, every action it references (the pinned version, or the latest
 * ACTIVE one): described, since the model reads the description to decide when to call it, and
 * not internal, since an internal tool is offered to no model.
 */
export function checkOffered(deps: ActionDeps, tools: readonly ToolReference[]): void {
  for (const ref of tools) {
    if ((NATIVE_TOOLS as readonly string[]).includes(ref.name)) continue;
    const action = deps.st.actionByName.get(ref.name);
    if (!action) continue;
    const row =
      ref.version != null
        ? deps.st.version.get(action.action_id, ref.version)
        : deps.st.latestActiveVersion.get(action.action_id);
    if (!row) continue;
    const { tool } = versionOfRow(deps, row);
    if (tool.internal) {
      throw new EngineError(
        'BAD_REQUEST',
        `tool ${quote(ref.name)} (version ${row.version}) is internal: no agent may offer it to its model`,
        {
          hint: `Call it from a tool the agent references (declare it in that tool's tools), or make a version of ${ref.name} without tool.internal.`,
          details: { tool: ref.name, version: row.version },
        },
      );
    }
    if (tool.description.trim() === '') {
      throw new EngineError('BAD_REQUEST', `tool ${quote(ref.name)} (version ${row.version}) has no description`, {
        hint: 'it is what the model reads; give it a description',
        details: { tool: ref.name, version: row.version },
      });
    }
  }
}
