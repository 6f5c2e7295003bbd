import type { ActionVersion } from '../actions/actions.js';
import { EngineError } from '../errors.js';
import { authorityOf } from '../execution/call-rules.js';
import { validate } from '../execution/checks.js';
import { derivedId } from '../ids.js';
import type { OutboundCall } from '../integrations/types.js';
import { type RunContext, checkDeadline, step } from './run-context.js';

/*
 * A version of kind http or mcp, run outside any transaction like a model call: a started execution
 * the worker claimed, or an agent's tool call. The request carries an idempotency key derived from
 * the execution (the same on every retry and after a crash), and each send is counted first, in a
 * short transaction of its own that checks the run's lease, so a call resumed after its worker died
 * knows a request went out before it.
 */

/** The idempotency key of an outside call: derived from its execution id with the database's secret. */
export function idempotencyKeyOf(ctx: Pick<RunContext, 'svc'>, executionId: string): string {
  return derivedId(ctx.svc.derivedIdKey, 'idempotency-key', executionId);
}

/** Run an http or mcp version as the call `runId`; its output (checked against the output schema). */
export async function runOutside(
  ctx: RunContext,
  runId: string,
  version: ActionVersion,
  input: unknown,
): Promise<unknown> {
  const { svc } = ctx;
  checkDeadline(ctx, `the call of ${version.name}`);
  const idempotencyKey = idempotencyKeyOf(ctx, runId);
  const call: OutboundCall = {
    executionId: runId,
    idempotencyKey,
    principal: ctx.principal,
    signal: ctx.signal,
    deadline: ctx.deadline,
    authorize: (document) =>
      svc.transactions.run('read', () => {
        const caller = svc.callerOf(ctx.principal);
        if (!caller)
          throw new EngineError('ACCESS_DENIED', `the starter ${JSON.stringify(ctx.principal)} no longer exists`, {
            details: { retry: false },
          });
        authorityOf(svc.cel, caller, null, ctx.outer.layers).check({
          action: 'INSERT',
          resource: 'actions.Integration',
          document,
        });
        return { value: undefined, commit: false };
      }),
    sending: () =>
      step(
        ctx,
        () =>
          svc.queue.recordSend.get({
            execution_id: runId,
            idempotency_key: idempotencyKey,
            now: svc.clock.now().toISOString(),
          })!.sends - 1,
      ),
  };
  let output: unknown;
  const began = performance.now();
  const sample = (outcome: string) =>
    svc.onOutboundCall({
      kind: version.kind === 'http' ? 'http' : 'mcp',
      name: String(version.kind === 'http' ? version.config.integration : version.config.server),
      outcome,
      latencyMs: performance.now() - began,
    });
  try {
    if (version.kind === 'http') {
      output = await svc.outside.integrations.send(svc.cel, version.config, input, call);
    } else {
      if (!svc.outside.mcp)
        throw new EngineError('INTEGRATION_ERROR', `${version.name} calls an MCP server, and none is configured here`, {
          hint: 'The operator adds an `mcpServers` block to the server configuration (TALLY_CONFIG) and restarts it.',
          details: { retry: false },
        });
      output = await svc.outside.mcp.call(version.config, input, call);
    }
  } catch (error) {
    sample(error instanceof EngineError ? error.code : 'INTERNAL');
    throw error;
  }
  sample('ok');
  try {
    validate(svc, version, 'output', output);
  } catch (error) {
    // The service answered, and the answer is not what the tool promised: trying again sends the
    // same request, so it is final.
    const refused = error as EngineError;
    throw new EngineError(refused.code, refused.message, {
      hint: 'The service answered something the tool’s outputSchema does not allow: fix config.output or the schema.',
      details: { ...(refused.details as object), retry: false, outcome: 'succeeded' },
    });
  }
  return output;
}
