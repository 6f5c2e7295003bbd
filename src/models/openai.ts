/**
 * The OpenAI chat-completions wire format (api.openai.com, and the servers that speak it: Ollama,
 * llama.cpp, vLLM, LM Studio, …), through the `openai` SDK.
 */
import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai';
import type {
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionMessageParam,
  ChatCompletionTool,
} from 'openai/resources/chat/completions';
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

/** The chat.completions request body for a ModelRequest (exported for tests and logs of the shape). */
export function toOpenAiRequest(config: ProviderConfig, request: ModelRequest): ChatCompletionCreateParamsNonStreaming {
  const messages: ChatCompletionMessageParam[] = [];
  if (request.instructions !== null) messages.push({ role: 'system', content: request.instructions });
  for (const message of request.messages) {
    switch (message.role) {
      case 'user':
        messages.push({ role: 'user', content: message.text });
        break;
      case 'assistant':
        messages.push({
          role: 'assistant',
          content: message.text ?? null,
          // An empty tool_calls array is refused by some servers: it is left out instead.
          ...(message.toolCalls.length > 0
            ? {
                tool_calls: message.toolCalls.map((call) => ({
                  id: call.id,
                  type: 'function' as const,
                  function: { name: call.name, arguments: call.arguments },
                })),
              }
            : {}),
        });
        break;
      case 'tool':
        for (const result of message.results) {
          messages.push({ role: 'tool', tool_call_id: result.toolCallId, content: result.content });
        }
        break;
    }
  }
  const body: ChatCompletionCreateParamsNonStreaming = {
    model: request.model,
    messages,
    max_tokens: request.maxTokens,
  };
  if (request.tools.length > 0) {
    body.tools = request.tools.map(
      (tool): ChatCompletionTool => ({
        type: 'function',
        function: { name: tool.name, description: tool.description, parameters: tool.inputSchema },
      }),
    );
  }
  if (request.temperature !== null) body.temperature = request.temperature;
  if (request.responseSchema !== null && request.tools.length === 0 && config.structuredOutput) {
    body.response_format = {
      type: 'json_schema',
      json_schema: { name: request.responseSchema.name, schema: request.responseSchema.schema, strict: false },
    };
  }
  return body;
}

export class OpenAiProvider implements ModelProvider {
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
    const client = new OpenAI({
      apiKey: this.#key.value ?? PLACEHOLDER_KEY,
      // Given explicitly, so no OPENAI_* credential or account of the server's environment is sent
      // to a provider it was not configured for.
      adminAPIKey: null,
      organization: null,
      project: null,
      webhookSecret: null,
      baseURL: config.baseUrl,
      timeout: config.timeoutMs,
      maxRetries: config.maxRetries,
      fetch: boundedCountingFetch(config.name, this.#limits.modelResponseBytesMax, state),
      logLevel: 'off',
    });
    let completion: unknown;
    try {
      completion = await client.chat.completions.create(
        toOpenAiRequest(config, request),
        request.signal === undefined ? {} : { signal: request.signal },
      );
    } catch (error) {
      throw mapCallError(error, ctx, ERRORS);
    }
    if (state.limitError !== null) throw mapCallError(state.limitError, ctx, ERRORS);
    if (!isRecord(completion)) throw wireFormatError(ctx, 'the answer is not a JSON object');
    const choices = completion.choices;
    if (!Array.isArray(choices) || choices.length === 0) throw wireFormatError(ctx, 'the answer has no choices');
    const choice: unknown = choices[0];
    if (!isRecord(choice) || !isRecord(choice.message)) throw wireFormatError(ctx, 'the first choice has no message');
    const message = choice.message;
    const toolCalls: ModelToolCall[] = [];
    if (message.tool_calls !== undefined && message.tool_calls !== null) {
      if (!Array.isArray(message.tool_calls)) throw wireFormatError(ctx, 'tool_calls is not an array');
      for (const call of message.tool_calls as unknown[]) {
        if (!isRecord(call) || !isRecord(call.function)) throw wireFormatError(ctx, 'a tool call has no function');
        const fn = call.function;
        if (typeof fn.name !== 'string') throw wireFormatError(ctx, 'a tool call has no function name');
        const args = fn.arguments;
        toolCalls.push({
          id: typeof call.id === 'string' && call.id !== '' ? call.id : `call_${toolCalls.length}`,
          name: fn.name,
          arguments: typeof args === 'string' ? args : args === undefined || args === null ? '' : JSON.stringify(args),
        });
      }
    }
    const usage = isRecord(completion.usage) ? completion.usage : {};
    return redactResponse(
      {
        text: typeof message.content === 'string' ? message.content : null,
        toolCalls,
        stopReason: typeof choice.finish_reason === 'string' ? choice.finish_reason : null,
        usage: { inputTokens: count(usage.prompt_tokens), outputTokens: count(usage.completion_tokens) },
        latencyMs: elapsedMs(start),
        httpAttempts: state.attempts,
        model: typeof completion.model === 'string' && completion.model !== '' ? completion.model : request.model,
      },
      this.#key.value,
    );
  }
}
