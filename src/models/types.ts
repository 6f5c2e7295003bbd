/**
 * One interface over the model providers (src/models/openai.ts, anthropic.ts): a conversation in,
 * one assistant turn out. Provider-neutral, so an agent run is recorded and resumed the same way
 * whatever wire format its provider speaks.
 */

export type ModelFormat = 'openai' | 'anthropic';

/** An operator-configured provider (the `providers` block of the server's configuration). */
export interface ProviderConfig {
  /** How actions name it: `config.provider`. */
  name: string;
  format: ModelFormat;
  /**
   * The API's base URL: for openai the URL before `/chat/completions` (`https://api.openai.com/v1`,
   * `http://localhost:11434/v1`); for anthropic the URL before `/v1/messages` (`https://api.anthropic.com`).
   */
  baseUrl: string;
  /** The model names actions may use with it (an action naming another is refused). */
  models: string[];
  /** The environment variable that holds the API key; null for servers that need none (Ollama). */
  apiKeyEnv: string | null;
  /** One HTTP request's timeout (ms); each retry gets its own. */
  timeoutMs: number;
  /** Retries after a 408/409/429/5xx or a connection error, with exponential backoff (the SDK's, honouring Retry-After). */
  maxRetries: number;
  /**
   * The server accepts a JSON schema for the answer (openai: response_format json_schema; anthropic:
   * a forced `respond` tool). When false, the schema is put in the instructions and the answer is
   * parsed and validated, with one corrective turn.
   */
  structuredOutput: boolean;
}

/** A tool offered to the model: its name, what it does, and the JSON schema of its arguments. */
export interface ModelToolSpec {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
}

/** A tool call the model asked for. `arguments` is the raw JSON text it sent (it may not parse). */
export interface ModelToolCall {
  id: string;
  name: string;
  arguments: string;
}

export interface ModelToolResult {
  toolCallId: string;
  name: string;
  /** What the model reads: the tool's output, or its error, as JSON text. */
  content: string;
  isError: boolean;
}

export type ModelMessage =
  | { role: 'user'; text: string }
  | { role: 'assistant'; text: string | null; toolCalls: ModelToolCall[] }
  | { role: 'tool'; results: ModelToolResult[] };

export interface ModelRequest {
  model: string;
  /** The system prompt. */
  instructions: string | null;
  messages: ModelMessage[];
  tools: ModelToolSpec[];
  temperature: number | null;
  maxTokens: number;
  /**
   * Ask for an answer matching this schema (only when `tools` is empty and the provider has
   * structuredOutput). The answer comes back as JSON text in `text`.
   */
  responseSchema: { name: string; schema: Record<string, unknown> } | null;
  /** Aborts the request (and its retries): a cancelled or expired run. */
  signal?: AbortSignal;
}

export interface ModelResponse {
  text: string | null;
  toolCalls: ModelToolCall[];
  /** The provider's reason ('stop', 'tool_calls', 'end_turn', 'tool_use', 'length', 'max_tokens', …). */
  stopReason: string | null;
  usage: { inputTokens: number | null; outputTokens: number | null };
  /** Wall time of the whole call, retries included. */
  latencyMs: number;
  /** HTTP requests made (1 + retries). */
  httpAttempts: number;
  /** The model the provider says answered. */
  model: string;
}

export interface ModelProvider {
  readonly config: ProviderConfig;
  /**
   * One assistant turn. Throws an EngineError: TIMEOUT (every try timed out), MODEL_UNAVAILABLE
   * (429/5xx/connection errors after maxRetries; retryable), MODEL_ERROR (the provider refused the
   * request: 4xx, or an answer that is not its wire format; not retryable), LIMIT_EXCEEDED (an answer
   * over modelResponseBytesMax). No message ever contains the API key.
   */
  complete(request: ModelRequest): Promise<ModelResponse>;
}
