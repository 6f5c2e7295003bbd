import type { Connection } from '../../paging.js';
import type { PolicyAction } from '../../policy/policy.js';
import type { RequestContext } from '../context.js';

/**
 * Every resolver declares the operation it performs, and checks it against the request's
 * authority stack before doing it (writes) or before handing the record out (reads).
 */
export function guard<T>(ctx: RequestContext, action: PolicyAction, resource: string, document: T): T {
  ctx.authority.check({ action, resource, document });
  return document;
}

/**
 * Reads of lists keep only the records the stack may see (row-level): a policy with an assertion
 * on `context.document` then hides the records it does not allow instead of failing the page.
 */
export function visible<T>(
  ctx: RequestContext,
  resource: string,
  page: Connection<T>,
  documentOf: (node: T) => unknown = (n) => n,
): Connection<T> {
  if (ctx.authority.stack.length === 0) return page;
  const edges = page.edges.filter((edge) =>
    ctx.authority.allows({ action: 'SELECT', resource, document: documentOf(edge.node) }),
  );
  if (edges.length === page.edges.length) return page;
  return { ...page, edges, nodes: edges.map((e) => e.node) };
}
