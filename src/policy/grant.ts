import type { Cel } from '../cel/cel.js';
import { EngineError } from '../errors.js';
import { type AuthorityLayer, globMatch, type Policy, type PolicyAction, resourceMatches } from './policy.js';

/*
 * What a client may grant. Whoever creates a client or sets its policies hands its authority on,
 * so it may hand on only what it holds itself, like PostgreSQL's GRANT … WITH GRANT OPTION: for
 * every ALLOW granted, each action and resource pattern it lists must be held by every layer of
 * the granter's stack (the client and each tool on the call stack). The check is on the policies'
 * text, so it errs towards refusing: when containment cannot be shown, the grant is refused.
 */

/**
 * Whether every resource `inner` matches is matched by `outer` too. Sufficient, not exact: the
 * stars of `inner` may only be consumed by stars of `outer` (so `financial.*` covers
 * `financial.Account.*`, `*` covers everything, `*.Account` does not cover `financial.*`), and
 * the extra resource `X` that `X.*` matches must be matched by `outer`.
 */
export function patternCovers(outer: string, inner: string): boolean {
  if (outer === '*' || outer === inner) return true;
  if (!inner.includes('*')) return resourceMatches(outer, inner);
  if (!globMatch(outer, inner)) return false;
  return !inner.endsWith('.*') || resourceMatches(outer, inner.slice(0, -2));
}

/**
 * Whether some resource may match both patterns. Answers true unless the two are shown disjoint
 * (different fixed text before the first star or after the last), which is the safe side when
 * looking for DENYs that could apply.
 */
export function patternsOverlap(a: string, b: string): boolean {
  if (globsOverlap(a, b)) return true;
  const exactA = a.endsWith('.*') ? a.slice(0, -2) : null;
  const exactB = b.endsWith('.*') ? b.slice(0, -2) : null;
  if (exactB !== null && globMatch(a, exactB)) return true;
  if (exactA !== null && globMatch(b, exactA)) return true;
  return exactA !== null && exactA === exactB;
}

function globsOverlap(a: string, b: string): boolean {
  const starA = a.indexOf('*');
  const starB = b.indexOf('*');
  if (starA === -1) return starB === -1 ? a === b : globMatch(b, a);
  if (starB === -1) return globMatch(a, b);
  const prefixA = a.slice(0, starA);
  const prefixB = b.slice(0, starB);
  const suffixA = a.slice(a.lastIndexOf('*') + 1);
  const suffixB = b.slice(b.lastIndexOf('*') + 1);
  return (
    (prefixA.startsWith(prefixB) || prefixB.startsWith(prefixA)) &&
    (suffixA.endsWith(suffixB) || suffixB.endsWith(suffixA))
  );
}

/**
 * Whether a CEL assertion reads nothing but `context.document`: every use of `context` in its
 * syntax tree is `context.document`. An assertion about `context.auth` means something else for
 * another principal, so it cannot carry over to the grantee. Anything not recognised counts as
 * reading more (the safe answer).
 */
export function readsOnlyDocument(cel: Cel, expression: string): boolean {
  let ast: unknown;
  try {
    ast = (cel.compile(expression) as unknown as { ast?: unknown }).ast;
  } catch {
    return false;
  }
  return ast !== undefined && !readsBeyondDocument(ast);
}

function readsBeyondDocument(node: unknown): boolean {
  if (Array.isArray(node)) return node.some(readsBeyondDocument);
  if (node === null || typeof node !== 'object') return false;
  const { op, args } = node as { op?: unknown; args?: unknown };
  if (op === 'id') return args === 'context';
  if (op === '.' && Array.isArray(args) && args[1] === 'document') {
    const target = args[0] as { op?: unknown; args?: unknown } | undefined;
    if (target?.op === 'id' && target.args === 'context') return false;
  }
  return readsBeyondDocument(args);
}

/** The reason a layer does not let `granted` (an ALLOW of the grant) carry `action` on `resource`, or null. */
type Gap = { reason: string } | null;

/**
 * Refuse the grant unless every layer of `granter` holds every ALLOW in `granted`. Per ALLOW, per
 * action and resource pattern, per layer:
 * - an ALLOW of the layer lists the action and a pattern covering the resource, and either has no
 *   assertions or has assertions that read only `context.document` and that the granted policy
 *   repeats word for word (it may add more: they only narrow it);
 * - every DENY of the layer that lists the action with a pattern that could overlap the resource
 *   is repeated in the grant: a granted DENY listing the action, with a pattern covering the DENY's
 *   (or the granted resource), and no assertions or only some of the DENY's, reading only
 *   `context.document` (otherwise the grantee would escape a restriction the granter is under).
 * DENYs granted only narrow, so they need nothing. An empty stack is the engine itself: unbounded.
 */
export function checkGrant(
  cel: Cel,
  granter: readonly AuthorityLayer[],
  granted: readonly Policy[],
  what = 'policies',
): void {
  if (granter.length === 0) return;
  const documentOnly = memo((expression: string) => readsOnlyDocument(cel, expression));
  for (let i = 0; i < granted.length; i++) {
    const policy = granted[i]!;
    if (policy.effect !== 'ALLOW') continue;
    for (const action of policy.actions) {
      for (const resource of policy.resources) {
        for (const layer of granter) {
          const gap =
            allowGap(layer, policy, action, resource, documentOnly) ??
            denyGap(layer, granted, action, resource, documentOnly);
          if (gap) throw grantRefused(what, i, action, resource, layer, gap.reason);
        }
      }
    }
  }
}

function allowGap(
  layer: AuthorityLayer,
  granted: Policy,
  action: PolicyAction,
  resource: string,
  documentOnly: (e: string) => boolean,
): Gap {
  let conditional: number | null = null;
  for (let j = 0; j < layer.policies.length; j++) {
    const held = layer.policies[j]!;
    if (
      held.effect !== 'ALLOW' ||
      !held.actions.includes(action) ||
      !held.resources.some((pattern) => patternCovers(pattern, resource))
    )
      continue;
    const required = Object.values(held.assertions ?? {});
    const repeated = Object.values(granted.assertions ?? {});
    if (required.every((expression) => repeated.includes(expression) && documentOnly(expression))) return null;
    conditional ??= j;
  }
  if (conditional !== null) {
    return {
      reason: `its policy ${conditional + 1} allows it only under assertions the granted policy does not repeat (or that read more than context.document)`,
    };
  }
  return { reason: `none of its policies allows ${action} on a pattern covering ${resource}` };
}

function denyGap(
  layer: AuthorityLayer,
  granted: readonly Policy[],
  action: PolicyAction,
  resource: string,
  documentOnly: (e: string) => boolean,
): Gap {
  for (let j = 0; j < layer.policies.length; j++) {
    const deny = layer.policies[j]!;
    if (deny.effect !== 'DENY' || !deny.actions.includes(action)) continue;
    const conditions = Object.values(deny.assertions ?? {});
    for (const pattern of deny.resources) {
      if (!patternsOverlap(pattern, resource)) continue;
      const repeated = granted.some(
        (g) =>
          g.effect === 'DENY' &&
          g.actions.includes(action) &&
          g.resources.some((p) => patternCovers(p, pattern) || patternCovers(p, resource)) &&
          Object.values(g.assertions ?? {}).every(
            (expression) => conditions.includes(expression) && documentOnly(expression),
          ),
      );
      if (!repeated)
        return {
          reason: `its policy ${j + 1} denies ${action} on ${pattern}, and the granted policies do not repeat that DENY`,
        };
    }
  }
  return null;
}

function grantRefused(
  what: string,
  index: number,
  action: PolicyAction,
  resource: string,
  layer: AuthorityLayer,
  reason: string,
): EngineError {
  return new EngineError(
    'ACCESS_DENIED',
    `${what}[${index}] would grant ${action} on ${resource}, which ${layer.name} does not hold: ${reason}`,
    {
      hint:
        'A client can grant only what it holds: every layer of its stack (the client and each tool on the call stack) needs an ALLOW ' +
        'covering each granted action and resource, without assertions or with assertions on context.document that the granted policy ' +
        `repeats, and the grant must repeat the layer's DENYs that could apply. Narrow ${what}[${index}], or have a client that holds it grant it.`,
      details: { policy: index, action, resource, layer: layer.name },
    },
  );
}

function memo(f: (key: string) => boolean): (key: string) => boolean {
  const known = new Map<string, boolean>();
  return (key) => {
    let value = known.get(key);
    if (value === undefined) {
      value = f(key);
      known.set(key, value);
    }
    return value;
  };
}
