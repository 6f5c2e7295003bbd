import { type ActionDeps, type ActionVersion, getVersion, latestActiveVersion } from '../actions/actions.js';
import type { Cel } from '../cel/cel.js';
import { EngineError } from '../errors.js';
import { Authority } from '../policy/authority.js';
import type { AuthorityLayer } from '../policy/policy.js';
import type { CallFrame, Caller } from './call-tree.js';

/*
 * What every call entry decides, decided once (DESIGN principle 9): which version runs (pinned,
 * resolved once per execution, or the latest ACTIVE; only an ACTIVE one runs), the authority stack
 * it runs under and the right to call it, and the gate for what a model can cause. The entries
 * themselves are beginCall (entry.ts) for a call with no calling frame, and runCall (invoke.ts)
 * for a program's tools.x() and a hook. Nothing else builds an Authority.
 */

/** A tool version as a layer of the authority stack. */
export interface VersionRef {
  actionId: string;
  version: number;
  /**
   * This tool consented to the started execution's call by declaring it pinned (consentingLayers,
   * recorded when a program's call of an outside tool was started, or a follow-up): its layer needs
   * no call policy for that one call, as it would not in the request.
   */
  consents?: true;
}

/** What is above a call that has no calling frame: the tools that started it (or the agent calling it). */
export interface Outer {
  layers: AuthorityLayer[];
  refs: VersionRef[];
  /** The layers that consented to the started call itself (never to what it calls in turn). */
  consenting?: ReadonlySet<AuthorityLayer>;
}

export const NO_OUTER: Outer = Object.freeze({ layers: [], refs: [] }) as unknown as Outer;

/** A tool version's policies as one layer of the stack. */
export function layerOf(version: ActionVersion): AuthorityLayer {
  return { name: `tool ${version.name}@${version.version}`, policies: version.policies, tool: version.name };
}

/** The layers of a recorded start stack (the tools that started an execution), read now. */
export function outerOf(actions: ActionDeps, refs: readonly VersionRef[]): Outer {
  const layers = refs.map((ref) => layerOf(getVersion(actions, { id: ref.actionId, version: ref.version })));
  const consenting = new Set(layers.filter((_, i) => refs[i]!.consents === true));
  return {
    layers,
    refs: refs.map(({ actionId, version }) => ({ actionId, version })),
    ...(consenting.size > 0 ? { consenting } : {}),
  };
}

/** The same with one more tool on top (an agent, for its tool calls). */
export function outerWith(outer: Outer, version: ActionVersion): Outer {
  // Consent was to the started call: what it calls in turn is decided without it.
  return {
    layers: [...outer.layers, layerOf(version)],
    refs: [...outer.refs, { actionId: version.actionId, version: version.version }],
  };
}

/**
 * The authority of a caller at a frame: [client, the tools that started the execution, the tools
 * on the call stack]. Every layer must allow an operation. The only place an Authority is built.
 */
export function authorityOf(
  cel: Cel,
  caller: Pick<Caller, 'principal' | 'client'>,
  frame: CallFrame | null,
  outer: readonly AuthorityLayer[] = frame?.root.outerLayers ?? [],
): Authority {
  return new Authority(cel, caller.principal, { principal: caller.principal }, caller.client, frame, outer);
}

/**
 * Calling action `name` is INSERT on actions.Execution with {action, version, input} as the
 * document, whatever path the call takes. `consenting`: the tools whose declarations already said
 * yes to this call (consentingLayers); each still refuses it by a DENY of its own.
 */
export function checkMayCall(
  authority: Authority,
  name: string,
  version: number | null,
  input: unknown,
  consenting?: ReadonlySet<AuthorityLayer>,
): void {
  authority.check(
    { action: 'INSERT', resource: 'actions.Execution', document: { action: name, version, input } },
    consenting,
  );
}

/**
 * Which tools on the stack consented to a nested call by declaring it (DESIGN §4's lock_account,
 * whose policies name only financial.Account.*, calls its pinned open_case@2). A tool that pins the
 * version it calls has agreed to exactly that immutable program: its layer needs no policy of its
 * own allowing INSERT on actions.Execution for it, and neither does each tool above it that reached
 * it through pinned references all the way down. An unpinned reference runs whatever version is
 * latest when the execution starts, which whoever may update that tool decides: there the calling
 * tool's policies decide, as they always did. Nothing widens: the client's layer and every other
 * layer still decide the call, a DENY in a consenting layer still refuses it, and every operation
 * the called tool performs is checked against every layer, the consenting ones included.
 */
export function consentingLayers(frame: CallFrame, pinned: boolean): ReadonlySet<AuthorityLayer> | undefined {
  if (!pinned) return undefined;
  const layers = new Set<AuthorityLayer>();
  for (let f: CallFrame | null = frame; f && pinned; f = f.parent) {
    if (f.layer) layers.add(f.layer);
    pinned = f.pinned === true;
  }
  return layers;
}

/** One rule for what runs, for every caller: an ACTIVE version. A LOCKED one is stopped; a DRAFT has not started. */
export function checkRunnable(version: ActionVersion): void {
  if (version.status === 'ACTIVE') return;
  if (version.status === 'LOCKED') {
    throw new EngineError('VERSION_LOCKED', `${version.name} version ${version.version} is LOCKED`, {
      hint: 'Call an ACTIVE version (lockAction stops every caller of a locked one).',
    });
  }
  throw new EngineError('VERSION_LOCKED', `${version.name} version ${version.version} is a DRAFT`, {
    hint: 'Activate it first with activateAction.',
  });
}

/**
 * The version a reference names: the pinned one exactly; otherwise the one this execution
 * resolved before (`resolved`, by name), otherwise the latest ACTIVE one. Whether it may run is
 * checkRunnable's, where it runs.
 */
export function referencedVersion(
  actions: ActionDeps,
  ref: { name: string; version?: number | null },
  resolved?: Map<string, ActionVersion>,
  what = ref.name,
): ActionVersion {
  if (ref.version != null) return getVersion(actions, { name: ref.name, version: ref.version });
  let version = resolved?.get(ref.name);
  if (version) {
    // The version may have been created by a call that then rolled back: read it again (a cache
    // hit unless something changed) and resolve afresh if it is gone.
    try {
      return getVersion(actions, { id: version.actionId, version: version.version });
    } catch (error) {
      if (!(error instanceof EngineError && error.code === 'NOT_FOUND')) throw error;
      version = undefined;
    }
  }
  const action = getVersion(actions, { name: ref.name });
  const active = latestActiveVersion(actions, action.actionId);
  if (!active)
    throw new EngineError('VERSION_LOCKED', `${what} has no ACTIVE version`, {
      hint: 'Activate a version, or pin one.',
    });
  resolved?.set(ref.name, active);
  return active;
}

/**
 * The gate for what a model can cause: a GraphQL operation a model wrote (the native graphql
 * tool, or a graphql-kind action, handed the model's answer as an agent's tool call or a hook of
 * one) begins no call and changes no tool. The model calls a tool only as the agent's tool, through
 * the agent's reference to it: its pinned version, its fixed input and its approval.
 * invokeAction and startAction, the GraphQL doors to a call, the writes of actions (which later
 * calls would run), and createClient and key rotation (a key would call any tool the agent's
 * policies allow, directly, past every reference) ask here.
 */
export function checkNotModelWritten(frame: CallFrame | null, what: string): void {
  if (!frame?.modelWritten) return;
  const agent = frame.root.model!.agent;
  throw new EngineError(
    'ACCESS_DENIED',
    `${what} refused: the GraphQL operation was written by the model of ${agent}, and a model's GraphQL neither calls tools, changes them, nor makes API keys`,
    {
      hint: `A model calls a tool as one of ${agent}'s tools, by its own name: its reference's pinned version, fixed input and approval apply there. To let the model call it, add it to the agent's tools.`,
      details: { agent },
    },
  );
}

/**
 * What changes what later callers get is made by a client, never from inside a call: a skill, a
 * deploy's records. Each such mutation asks here (sessions, triggers and approvals ask their own
 * rule, with their own reasons; clients and keys may be made by a call, within what every layer
 * of its stack holds, but not by a model's GraphQL: checkNotModelWritten).
 */
export function checkOutsideCall(frame: CallFrame | null, refusal: string, hint: string): void {
  if (!frame) return;
  throw new EngineError('ACCESS_DENIED', `${refusal} from inside a tool call`, { hint });
}

/** What a call runs: a tool version (program or graphql kind), or a native tool. */
export type CallTarget = { type: 'version'; version: ActionVersion } | { type: 'native'; name: 'graphql' | 'cel' };

export function targetName(target: CallTarget): string {
  return target.type === 'native' ? target.name : target.version.name;
}
