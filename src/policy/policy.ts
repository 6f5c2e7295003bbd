import type { Cel } from '../cel/cel.js';
import { jsonToCel } from '../cel/values.js';
import { EngineError, limitExceeded, quote } from '../errors.js';

export type PolicyEffect = 'ALLOW' | 'DENY';
export type PolicyAction = 'SELECT' | 'INSERT' | 'UPDATE' | 'DELETE';

export interface Policy {
  effect: PolicyEffect;
  actions: PolicyAction[];
  resources: string[];
  assertions: Record<string, string> | null;
}

/** One level of authority: a client, or a tool on the call stack. */
export interface AuthorityLayer {
  /** Named in denials: `client alice`, `tool lock_account@1`. */
  name: string;
  policies: readonly Policy[];
  /** The tool's name, for a tool's layer: what `context.tools` lists. */
  tool?: string;
}

/** An operation a resolver performs: `INSERT` on `financial.Transaction`, with the record. */
export interface Operation {
  action: PolicyAction;
  resource: string;
  document?: unknown;
}

/** An ALLOW that matched the action and resource, skipped because its assertions did not hold. */
export interface Unmet {
  /** 1-based, as refusals count policies. */
  policy: number;
  assertions: string[];
  /** An assertion reads the call stack (context.tools, context.tool): the hint says how to get beneath it. */
  readsStack: boolean;
}

export interface Decision {
  allowed: boolean;
  /** Refused for want of an ALLOW, though this one matched but for its assertions (named). */
  unmet?: Unmet;
  /** A DENY matched: nothing, not even a tool's consent (see authorize), lets it through. */
  denied: boolean;
  reason: string;
}

/** `*` matches any run of characters; `X.*` also matches `X` itself. */
export function resourceMatches(pattern: string, resource: string): boolean {
  if (pattern === '*' || pattern === resource) return true;
  if (pattern.endsWith('.*') && resource === pattern.slice(0, -2)) return true;
  if (!pattern.includes('*')) return false;
  return globMatch(pattern, resource);
}

/**
 * Wildcard match in O(pattern × text) with no backtracking blow-up (a regex built from
 * "*****…Q" would take exponential time): the classic greedy matcher that remembers the last star.
 * A `*` in the text is matched only by a `*` of the pattern, never by a literal character.
 */
export function globMatch(pattern: string, text: string): boolean {
  let p = 0;
  let t = 0;
  let star = -1;
  let mark = 0;
  while (t < text.length) {
    if (p < pattern.length && pattern[p] !== '*' && pattern[p] === text[t]) {
      p++;
      t++;
    } else if (p < pattern.length && pattern[p] === '*') {
      star = p++;
      mark = t;
    } else if (star !== -1) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.length && pattern[p] === '*') p++;
  return p === pattern.length;
}

/**
 * The chain rule for one layer: only policies matching the action and resource count; a policy
 * whose assertions are not all true is skipped (an assertion that fails to evaluate counts as
 * false); any DENY left blocks; otherwise at least one ALLOW is needed.
 */
export function decide(
  cel: Cel,
  layer: AuthorityLayer,
  operation: Operation,
  claims: Record<string, unknown>,
  /**
   * The tools on the call stack above the operation, outermost first: `context.tools`; the last of
   * them, the tool whose own code performs the operation, is `context.tool` (null for a client's
   * own request).
   */
  tools: readonly string[] = [],
): Decision {
  let allowedBy: number | null = null;
  /** The first ALLOW that matched but whose assertions did not hold: named in the refusal. */
  let unmet: Unmet | undefined;
  let context: Record<string, unknown> | null = null;
  for (let i = 0; i < layer.policies.length; i++) {
    const policy = layer.policies[i]!;
    if (!policy.actions.includes(operation.action)) continue;
    if (!policy.resources.some((pattern) => resourceMatches(pattern, operation.resource))) continue;
    if (policy.assertions) {
      context ??= {
        context: jsonToCel({
          auth: { claims },
          document: operation.document ?? null,
          tools,
          tool: tools.length > 0 ? tools[tools.length - 1] : null,
        }),
      };
      // Fail closed: an assertion that cannot be evaluated skips an ALLOW but still applies a DENY.
      if (!assertionsHold(cel, policy.assertions, context, policy.effect === 'DENY')) {
        if (policy.effect === 'ALLOW') {
          unmet ??= {
            policy: i + 1,
            assertions: Object.keys(policy.assertions),
            readsStack: Object.values(policy.assertions).some((e) => e.includes('context.tool')),
          };
        }
        continue;
      }
    }
    if (policy.effect === 'DENY') return { allowed: false, denied: true, reason: `policy ${i + 1} denies it` };
    allowedBy ??= i;
  }
  if (allowedBy !== null) return { allowed: true, denied: false, reason: `policy ${allowedBy + 1} allows it` };
  return unmet
    ? { allowed: false, denied: false, reason: 'no policy allows it', unmet }
    : { allowed: false, denied: false, reason: 'no policy allows it' };
}

function assertionsHold(
  cel: Cel,
  assertions: Record<string, string>,
  context: Record<string, unknown>,
  onError: boolean,
): boolean {
  for (const expression of Object.values(assertions)) {
    let verdict: unknown;
    try {
      verdict = cel.evaluate(expression, context);
    } catch {
      verdict = undefined;
    }
    // A value that is not a bool counts as a failed evaluation: it skips an ALLOW, applies a DENY.
    if (typeof verdict !== 'boolean') {
      if (!onError) return false;
    } else if (!verdict) {
      return false;
    }
  }
  return true;
}

/**
 * Every layer of the stack must allow the operation; the first that does not is named. A layer in
 * `consenting` has already said yes by what it declared (a tool calling a version it pins, see
 * call-rules.ts consentingLayers) as long as its own policies say nothing about this operation: a
 * DENY of its own, or an ALLOW whose assertions do not hold (a tool that calls payout only under
 * 100), still refuses there.
 */
export function authorize(
  cel: Cel,
  stack: readonly AuthorityLayer[],
  operation: Operation,
  claims: Record<string, unknown>,
  consenting?: ReadonlySet<AuthorityLayer>,
  tools: readonly string[] = [],
): void {
  for (const layer of stack) {
    const decision = decide(cel, layer, operation, claims, tools);
    if (decision.allowed) continue;
    if (consenting?.has(layer) && !decision.denied && !decision.unmet) continue;
    // Which of its policies nearly allowed it is the client's own business to hear; a tool's
    // policies are not for every caller to read (SELECT actions.Action), so a tool's refusal names none.
    const unmet = layer.tool === undefined ? decision.unmet : undefined;
    throw new EngineError(
      'ACCESS_DENIED',
      `${operation.action} on ${operation.resource} refused by ${layer.name}: ${decision.reason}`,
      {
        hint: unmet
          ? `Policy ${unmet.policy} of ${layer.name} allows ${operation.action} on ${operation.resource} only where its assertion ${unmet.assertions.join(' and ')} holds, and here it does not${unmet.readsStack ? ': it asks for a tool on the call stack (context.tools), so run that tool rather than doing this directly' : ''}.`
          : `Every layer must allow it: the client and each tool on the call stack. Add a policy allowing ${operation.action} on ${operation.resource} to ${layer.name}.`,
        details: {
          action: operation.action,
          resource: operation.resource,
          layer: layer.name,
          ...(unmet ? { unmet: { policy: unmet.policy, assertions: unmet.assertions } } : {}),
        },
      },
    );
  }
}

const POLICY_ACTIONS: readonly PolicyAction[] = ['SELECT', 'INSERT', 'UPDATE', 'DELETE'];

/** A policy as it comes from the wire, before parsePolicy checks it. */
export type PolicyInput = Parameters<typeof parsePolicy>[1];

/** Validate a list of policies from the wire: at most `policiesMax` of them. */
export function parsePolicies(cel: Cel, policies: readonly PolicyInput[], policiesMax: number): Policy[] {
  if (policies.length > policiesMax) {
    throw limitExceeded(
      'policiesMax',
      policiesMax,
      policies.length,
      `${policies.length} policies; policiesMax is ${policiesMax}`,
      {
        hint: 'Use wildcards in resources and fewer, broader policies.',
      },
    );
  }
  return policies.map((p, i) => parsePolicy(cel, p, `policies[${i}]`));
}

/** Validate a policy from the wire; assertions must compile. */
export function parsePolicy(
  cel: Cel,
  p: { effect: PolicyEffect; actions: PolicyAction[]; resources: string[]; assertions?: unknown },
  what: string,
): Policy {
  if (p.effect !== 'ALLOW' && p.effect !== 'DENY')
    throw new EngineError('BAD_REQUEST', `${what}.effect ${quote(p.effect)} must be ALLOW or DENY`);
  if (!Array.isArray(p.actions) || p.actions.length === 0 || p.actions.some((a) => !POLICY_ACTIONS.includes(a))) {
    throw new EngineError(
      'BAD_REQUEST',
      `${what}.actions ${quote(p.actions)} must list SELECT, INSERT, UPDATE or DELETE`,
    );
  }
  if (
    !Array.isArray(p.resources) ||
    p.resources.length === 0 ||
    p.resources.some((r) => typeof r !== 'string' || !/^[A-Za-z*][A-Za-z0-9_.*]*$/.test(r))
  ) {
    throw new EngineError('BAD_REQUEST', `${what}.resources ${quote(p.resources)} must list dotted resource names`, {
      hint: 'E.g. "financial.Account", "financial.*" or "*".',
    });
  }
  let assertions: Record<string, string> | null = null;
  if (p.assertions != null) {
    if (typeof p.assertions !== 'object' || Array.isArray(p.assertions))
      throw new EngineError('BAD_REQUEST', `${what}.assertions must map names to CEL expressions`);
    assertions = {};
    for (const [name, expression] of Object.entries(p.assertions as Record<string, unknown>)) {
      if (typeof expression !== 'string')
        throw new EngineError('BAD_REQUEST', `${what}.assertions.${name} must be a CEL expression string`);
      try {
        cel.compile(expression);
      } catch (error) {
        throw new EngineError('BAD_REQUEST', `${what}.assertions.${name}: ${(error as Error).message}`);
      }
      assertions[name] = expression;
    }
  }
  return { effect: p.effect, actions: [...p.actions], resources: [...p.resources], assertions };
}
