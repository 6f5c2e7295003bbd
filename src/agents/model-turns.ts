import { type ActionVersion, getVersion } from '../actions/actions.js';
import { EngineError, limitExceeded } from '../errors.js';
import type { ModelMessage, ModelResponse, ModelToolCall } from '../models/types.js';
import { type CallNode, type ModelCallRecord, persistTree } from '../execution/call-tree.js';
import { checkRunnable } from '../execution/call-rules.js';
import { toEngineError, validate } from '../execution/checks.js';
import { type ModelChoice, type ModelConfig, modelConfig, renderPrompt } from './config.js';
import {
  type OfferedTool,
  RETRY_PAUSE_MS,
  type RunContext,
  baseNode,
  checkDeadline,
  recorded,
  step,
  stepId,
} from './run-context.js';
import { CORRECTIONS_MAX } from '../limits.js';

/*
 * A model's turn inside a run: asked once, recorded before it is used, replayed after a crash;
 * a model run's final output checked against the output schema, with one corrective turn.
 */

/**
 * One model call, recorded as a MODEL execution under `parentId` with a derived id: a turn that
 * was recorded is read back; one that was not is asked (again). A failed call is recorded under a
 * fresh id (it is not the turn) and fails the attempt, which is retried from this turn.
 */
export async function modelTurn(
  ctx: RunContext,
  runId: string,
  turn: number,
  depth: number,
  request: {
    config: ModelConfig;
    messages: ModelMessage[];
    tools: OfferedTool[];
    instructions: string | null;
    responseSchema: { name: string; schema: Record<string, unknown> } | null;
  },
): Promise<ModelResponse> {
  const { svc } = ctx;
  const turnId = stepId(ctx, runId, 'turn', turn);
  const known = recorded(ctx, turnId);
  if (known) return answerOf(known);
  checkDeadline(ctx, `model turn ${turn}`);
  // lockAction stops a run in flight: no model turn of a version that is no longer ACTIVE.
  svc.transactions.run('read', () => ({
    value: checkRunnable(getVersion(svc.actions, { id: ctx.version.actionId, version: ctx.version.version })),
    commit: false,
  }));
  const bytes = Buffer.byteLength(JSON.stringify(request.messages));
  if (bytes > svc.limits.agentConversationBytesMax) {
    throw limitExceeded(
      'agentConversationBytesMax',
      svc.limits.agentConversationBytesMax,
      bytes,
      `the conversation of ${ctx.version.name} is ${bytes} bytes at turn ${turn}; agentConversationBytesMax is ${svc.limits.agentConversationBytesMax}`,
      {
        hint: 'Have the tools return less (ids and totals), or give the agent fewer turns.',
      },
    );
  }
  const { config } = request;
  const node = baseNode(ctx, {
    executionId: turnId,
    actionId: null,
    actionName: 'model',
    actionVersion: null,
    kind: 'MODEL',
    input: {
      turn,
      messages: request.messages.length,
      tools: request.tools.map((t) =>
        t.version ? { name: t.reference.name, version: t.version.version } : { name: t.reference.name },
      ),
      ...(request.tools.some((t) => t.skills)
        ? { skills: request.tools.find((t) => t.skills)!.skills!.map((k) => ({ name: k.name, version: k.version })) }
        : {}),
    },
    parentId: runId,
    rootId: ctx.executionId,
    depth,
  });
  // The provider and model, then each fallback while the one before is unavailable.
  const chain: ModelChoice[] = [{ provider: config.provider, model: config.model }, ...config.fallback];
  for (const [i, choice] of chain.entries()) {
    const startedMs = performance.now();
    let response: ModelResponse;
    try {
      response = await ask(ctx, choice, request);
    } catch (error) {
      if (ctx.signal.aborted) throw error;
      const failure = toEngineError(error);
      svc.onModelCall({
        provider: choice.provider,
        model: choice.model,
        outcome: failure.code,
        inputTokens: null,
        outputTokens: null,
        latencyMs: performance.now() - startedMs,
      });
      // Recorded under a fresh id: the turn is asked of the next in the chain, or again at the next attempt.
      step(ctx, () => {
        persistTree(svc.st, {
          ...node,
          executionId: svc.newId(),
          status: 'FAILED',
          error: failure.toData(),
          finished: svc.clock.now().toISOString(),
          model: {
            provider: choice.provider,
            model: choice.model,
            inputTokens: null,
            outputTokens: null,
            latencyMs: Math.round(performance.now() - startedMs),
            httpAttempts: (failure.details as { attempts?: number } | undefined)?.attempts ?? 1,
            stopReason: null,
          },
        });
      });
      // Only an unavailable provider falls back: never one that answered, refused the request, or ran out of time.
      if (failure.code === 'MODEL_UNAVAILABLE' && i + 1 < chain.length) {
        checkDeadline(ctx, `model turn ${turn} on ${chain[i + 1]!.provider}`);
        continue;
      }
      throw failure;
    }
    const call: ModelCallRecord = {
      provider: choice.provider,
      model: response.model || choice.model,
      inputTokens: response.usage.inputTokens,
      outputTokens: response.usage.outputTokens,
      latencyMs: Math.round(response.latencyMs),
      httpAttempts: response.httpAttempts,
      stopReason: response.stopReason,
    };
    svc.onModelCall({
      provider: choice.provider,
      model: choice.model,
      outcome: 'ok',
      inputTokens: call.inputTokens,
      outputTokens: call.outputTokens,
      latencyMs: response.latencyMs,
    });
    const answer = { text: response.text, toolCalls: response.toolCalls };
    step(ctx, () =>
      persistTree(svc.st, {
        ...node,
        status: 'SUCCEEDED',
        output: answer,
        finished: svc.clock.now().toISOString(),
        model: call,
      }),
    );
    return response;
  }
  throw new Error('unreachable: the chain has at least one entry');
}

/** One model call to `choice`: its provider configured here, bounded by its tries and the run's deadline. */
async function ask(
  ctx: RunContext,
  choice: ModelChoice,
  request: Parameters<typeof modelTurn>[4],
): Promise<ModelResponse> {
  const { svc } = ctx;
  const { config } = request;
  if (!svc.models)
    throw new EngineError(
      'MODEL_ERROR',
      `${ctx.version.name} uses provider ${JSON.stringify(choice.provider)}, and no model providers are configured here`,
      { hint: 'Configure the providers block of the server configuration (the file TALLY_CONFIG names).' },
    );
  if (!svc.models.has(choice.provider))
    throw new EngineError(
      'MODEL_ERROR',
      `${ctx.version.name} uses provider ${JSON.stringify(choice.provider)}, which is not configured here; configured: ${svc.models.names().join(', ')}`,
      { hint: 'Configure it in the server configuration, or update the action.' },
    );
  const provider = svc.models.get(choice.provider);
  // The SDK's timeout ends at the response headers: a body that stalls is ended by this one,
  // every try's timeout in a row, and never past the run's deadline.
  const { timeoutMs, maxRetries } = provider.config;
  const untilDeadline = ctx.deadline - Date.now();
  const bound = Math.max(1, Math.min(untilDeadline, (timeoutMs + RETRY_PAUSE_MS) * (maxRetries + 1)));
  const cut = new AbortController();
  const timer = setTimeout(
    () =>
      cut.abort(
        bound === untilDeadline
          ? new EngineError(
              'TIMEOUT',
              `${ctx.version.name} reached its whole-run deadline while provider ${choice.provider} (model ${choice.model}) was answering`,
              { details: { retry: false } },
            )
          : new EngineError(
              'TIMEOUT',
              `provider ${choice.provider} (model ${choice.model}) did not finish answering within ${bound} ms`,
            ),
      ),
    bound,
  );
  try {
    return await provider.complete({
      model: choice.model,
      instructions: request.instructions,
      messages: request.messages,
      tools: request.tools.map((t) => t.spec),
      temperature: config.temperature,
      maxTokens: config.maxTokens,
      responseSchema: request.responseSchema,
      signal: AbortSignal.any([ctx.signal, cut.signal]),
    });
  } finally {
    clearTimeout(timer);
  }
}

function answerOf(node: CallNode): ModelResponse {
  const output = node.output as { text: string | null; toolCalls: ModelToolCall[] };
  const call = node.model;
  return {
    text: output.text,
    toolCalls: output.toolCalls,
    stopReason: call?.stopReason ?? null,
    usage: { inputTokens: call?.inputTokens ?? null, outputTokens: call?.outputTokens ?? null },
    latencyMs: call?.latencyMs ?? 0,
    httpAttempts: call?.httpAttempts ?? 0,
    model: call?.model ?? '',
  };
}

/** The answer as the tool's output: `{text}` without an output schema, else the JSON it must be. */
export function finalOutput(
  ctx: RunContext,
  version: ActionVersion,
  text: string | null,
): { ok: true; output: unknown } | { ok: false; problem: string } {
  if (version.tool.outputSchema === null) return { ok: true, output: { text: text ?? '' } };
  let value: unknown;
  try {
    value = JSON.parse(stripFence(text ?? ''));
  } catch {
    return { ok: false, problem: `the answer is not JSON (it starts ${JSON.stringify((text ?? '').slice(0, 80))})` };
  }
  try {
    validate(ctx.svc, version, 'output', value);
  } catch (error) {
    return { ok: false, problem: (error as Error).message };
  }
  return { ok: true, output: value };
}

function stripFence(text: string): string {
  const fenced = /^\s*```(?:json)?\s*\n([\s\S]*?)\n\s*```\s*$/.exec(text);
  return fenced ? fenced[1]! : text;
}

export function schemaNote(version: ActionVersion): string {
  return `Give your final answer as JSON only (no prose, no code fence), matching this JSON schema: ${JSON.stringify(version.tool.outputSchema)}`;
}

export function joinInstructions(...parts: Array<string | null>): string | null {
  const kept = parts.filter((p): p is string => p !== null && p !== '');
  return kept.length ? kept.join('\n\n') : null;
}

/** A model tool: one call (structured output where the provider has it), and one corrective call if its answer does not fit. */
export async function runModel(
  ctx: RunContext,
  runId: string,
  version: ActionVersion,
  input: unknown,
  depth: number,
): Promise<unknown> {
  const config = modelConfig('model', version.config, ctx.svc.limits);
  const schema = version.tool.outputSchema;
  // Structured output only when every provider of the chain has it (a fallback gets the same request).
  const structured =
    schema !== null &&
    [config, ...config.fallback].every(
      (c) => ctx.svc.models?.has(c.provider) === true && ctx.svc.models.get(c.provider).config.structuredOutput,
    );
  const instructions = joinInstructions(
    config.instructions,
    schema !== null && !structured ? schemaNote(version) : null,
  );
  const messages: ModelMessage[] = [{ role: 'user', text: renderPrompt(config.prompt, input) }];
  for (let turn = 1; ; turn++) {
    const answer = await modelTurn(ctx, runId, turn, depth, {
      config,
      messages,
      tools: [],
      instructions,
      responseSchema: structured ? { name: version.name, schema: schema! } : null,
    });
    const result = finalOutput(ctx, version, answer.text);
    if (result.ok) return result.output;
    if (turn > CORRECTIONS_MAX) throw outputInvalid(version, result.problem);
    messages.push(
      { role: 'assistant', text: answer.text, toolCalls: [] },
      { role: 'user', text: correction(version, result.problem) },
    );
  }
}

export function correction(version: ActionVersion, problem: string): string {
  return `Your answer was not accepted: ${problem}. ${schemaNote(version)}`;
}

export function outputInvalid(version: ActionVersion, problem: string): EngineError {
  return new EngineError(
    'OUTPUT_INVALID',
    `the answer of ${version.name}@${version.version} does not match its output schema after ${CORRECTIONS_MAX} corrective turn: ${problem}`,
    {
      hint: 'Make the instructions clearer about the answer, or loosen the output schema.',
    },
  );
}
