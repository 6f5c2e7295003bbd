// Types for server.mjs: a scripted model server (test and example infrastructure, never a default).

export type WireFormat = 'openai' | 'anthropic';

export interface NormalizedToolCall {
  id: string;
  name: string;
  /** The parsed arguments, or the raw string if they do not parse as JSON. */
  arguments: unknown;
}

export interface NormalizedUserMessage {
  role: 'user';
  text: string;
}

export interface NormalizedAssistantMessage {
  role: 'assistant';
  text: string | null;
  toolCalls: NormalizedToolCall[];
}

export interface NormalizedToolMessage {
  role: 'tool';
  toolCallId: string;
  content: string;
  /** Anthropic's is_error; always false for OpenAI. */
  isError: boolean;
}

export type NormalizedMessage = NormalizedUserMessage | NormalizedAssistantMessage | NormalizedToolMessage;

export interface NormalizedTool {
  name: string;
  description: string;
  inputSchema: Record<string, unknown> | null;
}

export interface NormalizedRequest {
  format: WireFormat;
  model: string;
  system: string | null;
  messages: NormalizedMessage[];
  tools: NormalizedTool[];
  /** OpenAI: response_format.json_schema.schema. Anthropic: the input_schema of the tool forced by tool_choice. */
  responseSchema: Record<string, unknown> | null;
  /** The tool named by tool_choice ({type:'tool', name} / {type:'function', function:{name}}), or null. */
  forcedTool: string | null;
  temperature: number | null;
  maxTokens: number | null;
  /** Request headers, names lower-cased. */
  headers: Record<string, string | string[] | undefined>;
  /** 1 + the number of assistant messages. */
  turn: number;
  /** The parsed raw request body. */
  body: any;
}

export interface ReplyToolCall {
  name: string;
  /** An object is sent as JSON; a string is sent verbatim (to test invalid JSON). */
  arguments: Record<string, unknown> | string;
  /** Generated (call_<n> / toolu_<n>) unless given. */
  id?: string;
}

export interface Reply {
  text?: string;
  toolCalls?: ReplyToolCall[];
  /** Structured output: OpenAI content JSON; Anthropic a tool_use of the forced tool, else text JSON. */
  json?: unknown;
  usage?: { inputTokens?: number; outputTokens?: number };
  /** Wait this long before answering, without blocking other requests; stops if the client goes. */
  delayMs?: number;
  /** Answer with this HTTP error status and a wire-format error body (message: text, if given). */
  status?: number;
  headers?: Record<string, string>;
  /** Send exactly this body, with status (default 200). */
  rawBody?: string;
}

export type Rule = (request: NormalizedRequest) => Reply | undefined | null | Promise<Reply | undefined | null>;

export interface ScriptedModelOptions {
  /** Default 0: an ephemeral port. */
  port?: number;
  /** Default '127.0.0.1'. */
  host?: string;
  rules?: Rule[];
  /** Replies used in order when no rule answers (a FIFO consumed across requests). */
  script?: Reply[];
  /** When set, require authorization: Bearer <key> (OpenAI) or x-api-key: <key> (Anthropic). */
  apiKey?: string;
}

export interface ScriptedModel {
  /** e.g. http://127.0.0.1:PORT, no trailing slash. OpenAI base URL is `${url}/v1`. */
  url: string;
  port: number;
  /** Every well-formed, authorized request received, in order. */
  requests: NormalizedRequest[];
  close(): Promise<void>;
  setRules(rules: Rule[]): void;
  push(...replies: Reply[]): void;
}

export declare function startScriptedModel(options?: ScriptedModelOptions): Promise<ScriptedModel>;
export declare function lastMessage(request: NormalizedRequest): NormalizedMessage | undefined;
export declare function lastUserText(request: NormalizedRequest): string | null;
export declare function toolResults(request: NormalizedRequest): NormalizedToolMessage[];
