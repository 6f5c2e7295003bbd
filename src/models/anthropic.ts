/**
 * The Anthropic messages wire format (api.anthropic.com, and servers that speak it), through the
 * `@anthropic-ai/sdk` SDK.
 */
import Anthropic, {
  APIConnectionError,
  APIConnectionTimeoutError,
  APIError,
  APIUserAbortError,
} from '@anthropic-ai/sdk';
import type { MessageCreateParamsNonStreaming } from '@anthropic-ai/sdk/resources/messages';
import type { Limits } from '../limits.js';
import {
  boundedCountingFetch,
  elapsedMs,
  mapCallError,
  missingKeyError,
  PLACEHOLDER_KEY,
  readApiKey,
  wireFormatError,
  type ApiKey,
  type CallContext,
  type HttpCallState,
  type SdkErrorClasses,
  redactResponse,
  isRecord,
  count,
} from './http.js';
import type { ModelProvider, ModelRequest, ModelResponse, ModelToolCall, ProviderConfig } from './types.js';

const ERRORS: SdkErrorClasses = { APIError, APIUserAbortError, APIConnectionError, APIConnectionTimeoutError };

/** The name of the forced tool that carries a structured answer. */
export const RESPOND_TOOL = 'respond';

type Block =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> }
  | { type: 'tool_result'; tool_use_id: string; content: string; is_error: boolean };

interface WireMessage {
  role: 'user' | 'assistant';
  content: string | Block[];
}

export interface AnthropicRequestBody {
  model: string;
  max_tokens: number;
  messages: WireMessage[];
  system?: string;
  temperature?: number;
  tools?: { name: string; description: string; input_schema: Record<string, unknown> }[];
  tool_choice?: { type: 'tool'; name: string };
}

/**
 * tool_use.input must be an object. The stored arguments are the model's raw text: when they do
 * not parse as a JSON object (the model sent broken JSON, and was told so by the tool result), they
 * are sent as `{"_unparsed": "<raw text>"}`, so the conversation still shows the model what it sent.
 */
export function toolUseInput(raw: string): Record<string, unknown> {
  try {
    const parsed: unknown = JSON.parse(raw);
    if (isRecord(parsed)) return parsed;
  } catch {
    // fall through
  }
  return { _unparsed: raw };
}

/** Whether a structured answer is asked for through the forced respond tool. */
function wantsRespondTool(config: ProviderConfig, request: ModelRequest): boolean {
  return request.responseSchema !== null && request.tools.length === 0 && config.structuredOutput;
}

/** The messages request body for a ModelRequest (exported for tests). */
export function toAnthropicRequest(config: ProviderConfig, request: ModelRequest): AnthropicRequestBody {
  // Each turn as blocks first; consecutive turns of one role are merged (the API wants alternation).
  const turns: { role: 'user' | 'assistant'; blocks: Block[] }[] = [];
  const push = (role: 'user' | 'assistant', blocks: Block[]): void => {
    if (blocks.length === 0) return;
    const last = turns[turns.length - 1];
    if (last !== undefined && last.role === role) last.blocks.push(...blocks);
    else turns.push({ role, blocks: [...blocks] });
  };
  for (const message of request.messages) {
    switch (message.role) {
      case 'user':
        push('user', [{ type: 'text', text: message.text }]);
        break;
      case 'assistant': {
        const blocks: Block[] = [];
        // The API refuses empty text blocks.
        if (message.text !== null && message.text !== '') blocks.push({ type: 'text', text: message.text });
        for (const call of message.toolCalls) {
          blocks.push({ type: 'tool_use', id: call.id, name: call.name, input: toolUseInput(call.arguments) });
        }
        push('assistant', blocks);
        break;
      }
      case 'tool':
        push(
          'user',
          message.results.map((result) => ({
            type: 'tool_result' as const,
            tool_use_id: result.toolCallId,
            content: result.content,
            is_error: result.isError,
          })),
        );
        break;
    }
  }
  const messages: WireMessage[] = turns.map(({ role, blocks }) => {
    const only = blocks[0];
    // A turn that is one text block is sent as a plain string.
    if (blocks.length === 1 && only !== undefined && only.type === 'text') return { role, content: only.text };
    return { role, content: blocks };
  });
  const body: AnthropicRequestBody = { model: request.model, max_tokens: request.maxTokens, messages };
  if (request.instructions !== null) body.system = request.instructions;
  if (request.temperature !== null) body.temperature = request.temperature;
  if (request.tools.length > 0) {
    body.tools = request.tools.map((tool) => ({
      name: tool.name,
      description: tool.description,
      input_schema: tool.inputSchema,
    }));
  } else if (wantsRespondTool(config, request) && request.responseSchema !== null) {
    body.tools = [
      {
        name: RESPOND_TOOL,
        description: `Give your answer (${request.responseSchema.name}) as this tool's input, matching its schema.`,
        input_schema: request.responseSchema.schema,
      },
    ];
    body.tool_choice = { type: 'tool', name: RESPOND_TOOL };
  }
  return body;
}

export class AnthropicProvider implements ModelProvider {
  readonly config: ProviderConfig;
  readonly #limits: Readonly<Limits>;
  readonly #key: ApiKey;

  constructor(config: ProviderConfig, limits: Readonly<Limits>, env: NodeJS.ProcessEnv = process.env) {
    this.config = config;
    this.#limits = limits;
    this.#key = readApiKey(config, env);
  }

  async complete(request: ModelRequest): Promise<ModelResponse> {
    const { config } = this;
    if (this.#key.missingEnv !== null) throw missingKeyError(config, request.model, this.#key.missingEnv);
    const start = performance.now();
    const state: HttpCallState = { attempts: 0, limitError: null };
    const ctx: CallContext = { config, model: request.model, key: this.#key.value, state, signal: request.signal };
    // One client per call: its fetch counts this call's HTTP attempts.
    const key = this.#key.value ?? PLACEHOLDER_KEY;
    const client = new Anthropic({
      // Given explicitly, so the SDK reads no credential from the environment or its config files.
      apiKey: key,
      // The key goes in x-api-key, the header the Messages API documents and every server speaking
      // it accepts; this SDK version would send it as `Authorization: Bearer`, which is removed.
      defaultHeaders: { 'x-api-key': key, authorization: null },
      baseURL: config.baseUrl,
      timeout: config.timeoutMs,
      maxRetries: config.maxRetries,
      fetch: boundedCountingFetch(config.name, this.#limits.modelResponseBytesMax, state),
      logLevel: 'off',
      openTelemetry: false,
    });
    const respond = wantsRespondTool(config, request);
    let answer: unknown;
    try {
      answer = await client.messages.create(
        toAnthropicRequest(config, request) as unknown as MessageCreateParamsNonStreaming,
        request.signal === undefined ? {} : { signal: request.signal },
      );
    } catch (error) {
      throw mapCallError(error, ctx, ERRORS);
    }
    if (state.limitError !== null) throw mapCallError(state.limitError, ctx, ERRORS);
    if (!isRecord(answer)) throw wireFormatError(ctx, 'the answer is not a JSON object');
    if (!Array.isArray(answer.content)) throw wireFormatError(ctx, 'the answer has no content array');
    const texts: string[] = [];
    const toolCalls: ModelToolCall[] = [];
    let structured: string | null = null;
    for (const block of answer.content as unknown[]) {
      if (!isRecord(block)) throw wireFormatError(ctx, 'a content block is not an object');
      if (block.type === 'text') {
        if (typeof block.text !== 'string') throw wireFormatError(ctx, 'a text block has no text');
        texts.push(block.text);
      } else if (block.type === 'tool_use') {
        if (typeof block.name !== 'string') throw wireFormatError(ctx, 'a tool_use block has no name');
        const input = block.input === undefined ? {} : block.input;
        if (respond && block.name === RESPOND_TOOL && structured === null) {
          structured = JSON.stringify(input);
          continue;
        }
        toolCalls.push({
          id: typeof block.id === 'string' && block.id !== '' ? block.id : `toolu_${toolCalls.length}`,
          name: block.name,
          arguments: JSON.stringify(input),
        });
      }
      // Other blocks (thinking, redacted_thinking, server tools) are not part of the turn we record.
    }
    const usage = isRecord(answer.usage) ? answer.usage : {};
    return redactResponse(
      {
        text: structured ?? (texts.length > 0 ? texts.join('') : null),
        toolCalls: respond ? [] : toolCalls,
        stopReason: typeof answer.stop_reason === 'string' ? answer.stop_reason : null,
        usage: { inputTokens: count(usage.input_tokens), outputTokens: count(usage.output_tokens) },
        latencyMs: elapsedMs(start),
        httpAttempts: state.attempts,
        model: typeof answer.model === 'string' && answer.model !== '' ? answer.model : request.model,
      },
      this.#key.value,
    );
  }
}
