import type { Cel } from '../cel/cel.js';
import { type AuthorityLayer, authorize, decide, type Operation, type Policy } from './policy.js';

/** A frame of the call stack, as far as authority is concerned. */
export interface AuthorityFrame {
  parent: AuthorityFrame | null;
  /** The policies of the tool running at this frame; null for a native call (it adds no layer). */
  layer: AuthorityLayer | null;
}

/**
 * Who is asking and under which layers: [client, tool 1, tool 2, …]. Every layer must allow an
 * operation. The engine itself (in-process, no principal) has no client layer: only the tools
 * on its stack bound it.
 */
export class Authority {
  readonly stack: readonly AuthorityLayer[];
  /**
   * The tools on the call stack, outermost first (an agent, the tool it called, the tool that
   * called, …): `context.tools` in a policy's assertions, so a client's policy can say "this write
   * only beneath transfer". Names, not aliases; a tool's name belongs to its action for good.
   */
  readonly tools: readonly string[];

  constructor(
    private readonly cel: Cel,
    readonly principal: string,
    readonly claims: Record<string, unknown>,
    client: { principal: string; policies: readonly Policy[] } | null,
    frame: AuthorityFrame | null,
    /** Layers between the client and the frames: the tools that started this execution. */
    outer: readonly AuthorityLayer[] = [],
  ) {
    const layers: AuthorityLayer[] = [];
    for (let f = frame; f; f = f.parent) if (f.layer) layers.push(f.layer);
    layers.reverse();
    layers.unshift(...outer);
    this.tools = layers.flatMap((layer) => (layer.tool === undefined ? [] : [layer.tool]));
    if (client) layers.unshift({ name: `client ${client.principal}`, policies: client.policies });
    this.stack = layers;
  }

  /**
   * Throws ACCESS_DENIED naming the action, the resource and the layer that refused. Layers in
   * `consenting` (a tool calling a version it pins) need no ALLOW of their own, only no DENY.
   */
  check(operation: Operation, consenting?: ReadonlySet<AuthorityLayer>): void {
    if (this.stack.length > 0) authorize(this.cel, this.stack, operation, this.claims, consenting, this.tools);
  }

  allows(operation: Operation): boolean {
    return this.stack.every((layer) => decide(this.cel, layer, operation, this.claims, this.tools).allowed);
  }
}
