/**
 * The fetch both SDKs are given (one per model call), and what the providers share around a call:
 * the API key from the environment, and the mapping of SDK errors to EngineErrors with the key
 * redacted.
 *
 * The fetch does two things and nothing else (it never logs):
 *  - it counts the HTTP requests the SDK makes for the call, so `httpAttempts` is exact (1 + the
 *    SDK's retries);
 *  - it bounds the answer: the body is handed to the SDK as a stream that errors once more than
 *    `modelResponseBytesMax` bytes came in. The error is recorded on the call's state too, because
 *    the SDK may wrap or swallow it (an error body is read with `.catch()`); the provider re-throws
 *    the recorded error whenever the SDK call fails.
 * The body is streamed after the SDK's retry decision, so a too-large answer is never retried.
 */
import { EngineError, limitExceeded } from '../errors.js';
import type { ProviderConfig } from './types.js';

export interface HttpCallState {
  /** HTTP requests started for this call. */
  attempts: number;
  /** Set when an answer crossed the byte bound. */
  limitError: EngineError | null;
}

export type FetchLike = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** Statuses whose Response may not carry a body (the Response constructor refuses one). */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

export function boundedCountingFetch(
  provider: string,
  maxBytes: number,
  state: HttpCallState,
  inner: FetchLike = globalThis.fetch,
): FetchLike {
  const limitError = (seen: number): EngineError =>
    (state.limitError ??= limitExceeded(
      'modelResponseBytesMax',
      maxBytes,
      seen,
      `provider ${provider}: the answer is larger than modelResponseBytesMax (${maxBytes} bytes)`,
      {
        hint: 'Ask for a shorter answer (lower maxTokens), or raise modelResponseBytesMax in the engine limits.',
        details: { provider },
      },
    ));

  return async (input, init) => {
    state.attempts += 1;
    const response = await inner(input, init);
    const source = response.body;
    if (source === null || NULL_BODY_STATUSES.has(response.status)) return response;
    const reader = source.getReader();
    let seen = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const { done, value } = await reader.read();
        if (done) {
          controller.close();
          return;
        }
        seen += value.byteLength;
        if (seen > maxBytes) {
          const error = limitError(seen);
          controller.error(error);
          await reader.cancel(error).catch(() => undefined);
          return;
        }
        controller.enqueue(value);
      },
      cancel(reason) {
        return reader.cancel(reason);
      },
    });
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}

/** The key a provider sends, or the name of the variable that should hold it but is unset. */
export interface ApiKey {
  /** The key read from the environment; null when the provider needs none or the variable is unset. */
  value: string | null;
  /** Set when config.apiKeyEnv names a variable that is unset (or empty). */
  missingEnv: string | null;
}

export function readApiKey(config: ProviderConfig, env: NodeJS.ProcessEnv): ApiKey {
  if (config.apiKeyEnv === null) return { value: null, missingEnv: null };
  const value = env[config.apiKeyEnv];
  if (value === undefined || value === '') return { value: null, missingEnv: config.apiKeyEnv };
  return { value, missingEnv: null };
}

/** The key the SDKs require when the server needs none (Ollama, llama.cpp). */
export const PLACEHOLDER_KEY = 'none';

export function missingKeyError(config: ProviderConfig, model: string, variable: string): EngineError {
  return new EngineError('MODEL_ERROR', `provider ${config.name}: the environment variable ${variable} is not set`, {
    hint: `Set ${variable} in the server's environment to the provider's API key, and restart the server.`,
    details: { provider: config.name, model, attempts: 0 },
  });
}

/**
 * A successful answer with the key taken out of everything a record keeps (its text, tool names
 * and arguments): a provider, or a proxy before it, that echoes its request headers cannot put the
 * key into an execution the starter reads.
 */
export function redactResponse<
  T extends { text: string | null; toolCalls: Array<{ id: string; name: string; arguments: string }>; model: string },
>(response: T, key: string | null): T {
  if (key === null || key === '') return response;
  return {
    ...response,
    text: response.text === null ? null : redact(response.text, key),
    toolCalls: response.toolCalls.map((call) => ({
      id: redact(call.id, key),
      name: redact(call.name, key),
      arguments: redact(call.arguments, key),
    })),
    model: redact(response.model, key),
  };
}

/** The shortest run of the key's characters that is taken out (the whole key when it is shorter). */
export const KEY_RUN_MIN = 8;

/**
 * The text with the key taken out: every run of KEY_RUN_MIN or more consecutive characters of the
 * key (the whole key when it is shorter) is replaced with `[redacted]`, whether it is written
 * plainly or escaped: JSON (`\"`, `\\`, `\/`, at any depth of nesting), `\uXXXX`, or percent-encoded
 * (`%XX`), or any mix of these. This is the one redaction every path that records a provider's text
 * goes through (errors, answers, tool calls), and it runs on the raw text, before anything is cut.
 */
export function redact(text: string, key: string | null): string {
  if (key === null || key === '' || text === '') return text;
  const run = Math.min(KEY_RUN_MIN, key.length);
  const runs = new Set<string>();
  for (let i = 0; i + run <= key.length; i++) runs.add(key.slice(i, i + run));
  const inKey = new Set(key);
  // The text as the characters it stands for: plain[k] is read from text[starts[k], starts[k + 1]).
  // Text without escapes is read as it is.
  const escaped = text.includes('\\') || text.includes('%');
  let plain = text;
  let starts: Int32Array | null = null;
  if (escaped) {
    // Decoding never lengthens the text (an escape is wider than what it stands for).
    const at = new Int32Array(text.length + 1);
    let n = 0;
    let read = '';
    let copied = 0;
    for (let p = 0; p < text.length; ) {
      const c = text.charCodeAt(p);
      if (c !== 0x5c && c !== 0x25) {
        at[n++] = p;
        p += 1;
        continue;
      }
      const [decoded, width] = decodedAt(text, p);
      read += text.slice(copied, p) + decoded;
      // An escape that stands for two UTF-16 units (a percent-encoded emoji) is read as both; the
      // second is given no characters of its own, so the escape goes wherever its first unit goes.
      for (let u = 0; u < decoded.length; u++) at[n++] = u === 0 ? p : p + width;
      p += width;
      copied = p;
    }
    at[n] = text.length;
    plain = read + text.slice(copied);
    starts = at;
  }
  // Mark every character inside a window of `run` characters that is a run of the key. A window
  // whose last character is not in the key cannot be one, nor can the run - 1 windows after it.
  const covered = new Uint8Array(plain.length);
  let any = false;
  for (let k = 0; k + run <= plain.length; ) {
    if (!inKey.has(plain[k + run - 1]!)) {
      k += run;
      continue;
    }
    if (runs.has(plain.slice(k, k + run))) {
      covered.fill(1, k, k + run);
      any = true;
    }
    k += 1;
  }
  if (!any) return text;
  const from = (k: number): number => (starts === null ? k : starts[k]!);
  let out = '';
  let copied = 0;
  for (let k = 0; k < plain.length; ) {
    if (covered[k] === 0) {
      k += 1;
      continue;
    }
    out += text.slice(copied, from(k));
    while (k < plain.length && covered[k] === 1) k += 1;
    out += '[redacted]';
    copied = from(k);
  }
  return out + text.slice(copied);
}

const HEX4 = /^[0-9a-fA-F]{4}$/;
const HEX2 = /^[0-9a-fA-F]{2}$/;

/** A percent-encoded UTF-8 character at text[p] (`%41`, `%C3%BC`) and its width, else the `%` itself. */
function percentAt(text: string, p: number): [string, number] {
  const byte = (i: number): number => {
    const hex = text.slice(p + 3 * i + 1, p + 3 * i + 3);
    return text[p + 3 * i] === '%' && HEX2.test(hex) ? parseInt(hex, 16) : -1;
  };
  const lead = byte(0);
  const length =
    lead < 0
      ? 0
      : lead < 0x80
        ? 1
        : lead >= 0xc2 && lead < 0xe0
          ? 2
          : lead >= 0xe0 && lead < 0xf0
            ? 3
            : lead >= 0xf0 && lead < 0xf5
              ? 4
              : 0;
  if (length === 0) return ['%', 1];
  const bytes = [lead];
  for (let i = 1; i < length; i++) {
    const next = byte(i);
    if (next < 0x80 || next > 0xbf) return ['%', 1];
    bytes.push(next);
  }
  const decoded = UTF8.decode(Uint8Array.from(bytes));
  return decoded.includes('\ufffd') ? ['%', 1] : [decoded, 3 * length];
}

const UTF8 = new TextDecoder('utf-8', { fatal: false });
const JSON_ESCAPES: Record<string, string> = { '"': '"', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

/** The character an escape at text[p] stands for and how many characters it takes, else text[p] itself. */
function decodedAt(text: string, p: number): [string, number] {
  const c = text[p]!;
  if (c === '%') return percentAt(text, p);
  if (c !== '\\') return [c, 1];
  // A run of backslashes (one per level of JSON nesting), then what it escapes.
  let q = p;
  while (text[q] === '\\') q += 1;
  const next = text[q];
  if (next === 'u' && HEX4.test(text.slice(q + 1, q + 5)))
    return [String.fromCharCode(parseInt(text.slice(q + 1, q + 5), 16)), q + 5 - p];
  if (next !== undefined && next in JSON_ESCAPES) return [JSON_ESCAPES[next]!, q + 1 - p];
  // Backslashes that escape nothing above stand for one backslash.
  return ['\\', q - p];
}

function redactValue(value: unknown, key: string | null): unknown {
  if (typeof value === 'string') return redact(value, key);
  if (Array.isArray(value)) return value.map((v) => redactValue(v, key));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[redact(k, key)] = redactValue(v, key);
    return out;
  }
  return value;
}

/** An EngineError with the key taken out of its message, hint and details (no cause is kept). */
export function redactError(error: EngineError, key: string | null): EngineError {
  if (key === null || key === '') return error;
  const out = new EngineError(error.code, redact(error.message, key), {
    hint: error.hint === undefined ? undefined : redact(error.hint, key),
    details: redactValue(error.details, key),
  });
  return out;
}

/** The error classes one SDK throws (openai and @anthropic-ai/sdk have the same hierarchy). */
export interface SdkErrorClasses {
  APIError: abstract new (...args: never[]) => Error & { status: number | undefined; error: unknown };
  APIUserAbortError: abstract new (...args: never[]) => Error;
  APIConnectionError: abstract new (...args: never[]) => Error;
  APIConnectionTimeoutError: abstract new (...args: never[]) => Error;
}

export interface CallContext {
  config: ProviderConfig;
  model: string;
  key: string | null;
  state: HttpCallState;
  signal: AbortSignal | undefined;
}

const DETAIL_MAX = 300;

/**
 * A provider's words as an error keeps them: the key taken out of the raw text first, then the
 * whitespace collapsed and the text cut to DETAIL_MAX characters (a cut never splits a key the
 * redaction has yet to find).
 */
function cut(text: string, key: string | null, max = DETAIL_MAX): string {
  const flat = redact(text, key).replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** The provider's own words from an APIError: the `error.message` of its JSON body, else the SDK's message. */
function providerMessage(error: { error: unknown; message: string }): string {
  const body = error.error;
  if (body !== null && typeof body === 'object') {
    const record = body as Record<string, unknown>;
    if (typeof record.message === 'string') return record.message;
    const inner = record.error;
    if (inner !== null && typeof inner === 'object' && typeof (inner as Record<string, unknown>).message === 'string') {
      return (inner as Record<string, unknown>).message as string;
    }
  }
  return error.message;
}

function tries(n: number): string {
  return n === 1 ? '1 try' : `${n} tries`;
}

/** Map whatever a failed SDK call threw to the EngineError the ModelProvider contract promises. */
export function mapCallError(error: unknown, ctx: CallContext, classes: SdkErrorClasses): Error {
  const { config, model, key, state, signal } = ctx;
  const attempts = state.attempts;
  const who = `provider ${config.name} (model ${model})`;
  if (state.limitError !== null) return redactError(state.limitError, key);
  if (signal?.aborted) {
    // The caller's own reason (a cancelled or expired run), as it is; the DOMException a bare
    // abort() or AbortSignal.timeout() leaves is not one: that is the TIMEOUT below.
    const reason: unknown = signal.reason;
    const generic = reason instanceof DOMException && (reason.name === 'AbortError' || reason.name === 'TimeoutError');
    if (reason instanceof Error && !generic) return reason;
    return new EngineError('TIMEOUT', `the call to ${who} was cancelled`, {
      details: { provider: config.name, model, attempts },
    });
  }
  let out: EngineError;
  if (error instanceof EngineError) {
    out = error;
  } else if (error instanceof classes.APIConnectionTimeoutError) {
    out = new EngineError('TIMEOUT', `${who} did not answer within ${config.timeoutMs} ms (${tries(attempts)})`, {
      hint: "Raise the provider's timeoutMs, ask for less (maxTokens), or check that the server is up.",
      details: { provider: config.name, model, attempts },
    });
  } else if (error instanceof classes.APIUserAbortError) {
    out = new EngineError('TIMEOUT', `the call to ${who} was cancelled`, {
      details: { provider: config.name, model, attempts },
    });
  } else if (error instanceof classes.APIConnectionError) {
    const cause = (error as Error & { cause?: unknown }).cause;
    const why = cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
    out = new EngineError('MODEL_UNAVAILABLE', `${who} could not be reached (${tries(attempts)}): ${cut(why, key)}`, {
      details: { provider: config.name, model, attempts },
    });
  } else if (error instanceof classes.APIError && typeof error.status === 'number') {
    const status = error.status;
    const retryable = status === 408 || status === 409 || status === 429 || status >= 500;
    const message = cut(providerMessage(error), key);
    out = new EngineError(
      retryable ? 'MODEL_UNAVAILABLE' : 'MODEL_ERROR',
      `${who} answered HTTP ${status} (${tries(attempts)}): ${message}`,
      {
        hint: retryable
          ? undefined
          : status === 401 || status === 403
            ? `Check the API key in ${config.apiKeyEnv ?? "the provider's apiKeyEnv"} and that it may use this model.`
            : undefined,
        details: { provider: config.name, model, status, attempts },
      },
    );
  } else {
    const message = error instanceof Error ? error.message : String(error);
    out = new EngineError('MODEL_ERROR', `${who} answered outside its wire format: ${cut(message, key)}`, {
      details: { provider: config.name, model, attempts },
    });
  }
  return redactError(out, key);
}

/** A MODEL_ERROR for an answer that parsed as JSON but is not the provider's response shape. */
export function wireFormatError(ctx: CallContext, what: string): EngineError {
  return redactError(
    new EngineError(
      'MODEL_ERROR',
      `provider ${ctx.config.name} (model ${ctx.model}) answered outside its wire format: ${cut(what, ctx.key)}`,
      {
        details: { provider: ctx.config.name, model: ctx.model, attempts: ctx.state.attempts },
      },
    ),
    ctx.key,
  );
}

/** Wall time in whole milliseconds, at least 1 once any time has passed. */
export function elapsedMs(start: number): number {
  return Math.ceil(performance.now() - start);
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** A token count as the provider reported it, or null when it reported none. */
export function count(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}
