export type {
  ModelFormat,
  ModelMessage,
  ModelProvider,
  ModelRequest,
  ModelResponse,
  ModelToolCall,
  ModelToolResult,
  ModelToolSpec,
  ProviderConfig,
} from './types.js';
export { AnthropicProvider, RESPOND_TOOL, toAnthropicRequest, toolUseInput } from './anthropic.js';
export { OpenAiProvider, toOpenAiRequest } from './openai.js';
export { ModelProviders, parseProviders, PROVIDER_DEFAULTS } from './providers.js';
export { boundedCountingFetch, redact, type HttpCallState } from './http.js';
