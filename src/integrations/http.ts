/**
 * The operator's HTTP integrations and the `http` tool kind (DESIGN §11). An integration is the
 * operator's (TALLY_CONFIG `integrations`): its origin, the methods and path prefixes tools may use,
 * credentials read from environment variables when a request is made (never stored), timeouts, size
 * bounds and concurrency. An http tool only fills in a request for it (method, a path template,
 * query, headers and body built from its input with CEL) and maps the answer to its output; it can
 * reach nothing the operator did not configure. Every request carries the call's idempotency key.
 */
import type { Cel } from '../cel/cel.js';
import { celToJson, jsonToCel } from '../cel/values.js';
import { EngineError, quote } from '../errors.js';
import { ANSWER_DEPTH_MAX } from '../limits.js';
import { redact } from '../models/http.js';
import { buildRequest, checkHttpConfig, evaluateText, type HttpToolConfig, inputError } from './http-tool.js';
import { Limiter } from './limiter.js';
import type { IntegrationConfig, OutboundCall } from './types.js';

import { HEADER_VALUE, INTEGRATION_DEFAULTS, METHODS } from './config.js';

export { parseIntegrations } from './config.js';

/** The integrations this process may call, by name, with their slots. */
export class Integrations {
  readonly #configs = new Map<string, IntegrationConfig>();
  readonly #limiters = new Map<string, Limiter>();
  /** Version configs already checked (keys are the immutable config objects of cached versions). */
  readonly #checked = new WeakMap<object, HttpToolConfig>();

  constructor(
    configs: IntegrationConfig[],
    private readonly env: NodeJS.ProcessEnv = process.env,
    private readonly fetchImpl: typeof fetch = globalThis.fetch,
  ) {
    for (const config of configs) {
      this.#configs.set(config.name, config);
      this.#limiters.set(
        config.name,
        new Limiter(`integration ${config.name}`, config.concurrency, config.perClientConcurrency),
      );
    }
  }

  names(): string[] {
    return [...this.#configs.keys()];
  }

  get(name: string): IntegrationConfig {
    const config = this.#configs.get(name);
    if (config) return config;
    const names = this.names();
    throw new EngineError('BAD_REQUEST', `no integration named ${quote(name)} is configured`, {
      hint:
        names.length === 0
          ? 'No integrations are configured: the operator adds an `integrations` block to the server configuration (TALLY_CONFIG).'
          : `Configured integrations: ${names.map((n) => quote(n)).join(', ')}.`,
      details: { integration: name, configured: names },
    });
  }

  limiter(name: string): Limiter {
    this.get(name);
    return this.#limiters.get(name)!;
  }

  /** The secret values of an integration's headers, as the environment has them now (for redaction). */
  secrets(config: IntegrationConfig): string[] {
    return Object.values(config.headers)
      .map((h) => this.env[h.env])
      .filter((v): v is string => typeof v === 'string' && v !== '');
  }

  /**
   * Throws unless `config` is an http tool config this process can run (createAction and updateAction).
   * An engine with no integrations at all (a deploy straight into a database file, a process that
   * only serves reads) cannot check the name, as with model providers: it checks everything else
   * against an integration that allows every method and path, and a run fails INTEGRATION_ERROR
   * until the process that runs it has the integration.
   */
  check(cel: Cel, config: Record<string, unknown>): HttpToolConfig {
    return checkHttpConfig(cel, config, (name) => (this.#configs.size === 0 ? unchecked(name) : this.get(name)));
  }

  /**
   * Send one call: build the request from the tool's config and input, take a slot, send it with
   * the idempotency key, read the answer (bounded), and judge it. Returns the output (before the
   * output schema); throws INTEGRATION_UNAVAILABLE (retry) or INTEGRATION_ERROR (final).
   */
  async send(cel: Cel, raw: Record<string, unknown>, input: unknown, call: OutboundCall): Promise<unknown> {
    // A version's config is an immutable object: checked once, not at every send.
    let tool = this.#checked.get(raw);
    if (tool === undefined) this.#checked.set(raw, (tool = this.check(cel, raw)));
    if (!this.#configs.has(tool.integration))
      throw new EngineError('INTEGRATION_ERROR', `no integration named ${quote(tool.integration)} is configured here`, {
        hint: 'The operator adds it to the `integrations` block of the server configuration (TALLY_CONFIG) and restarts the server.',
        details: { integration: tool.integration, configured: this.names(), retry: false },
      });
    const config = this.get(tool.integration);
    const secrets = this.secrets(config);
    const scrub = (text: string): string => secrets.reduce((t, s) => redact(t, s), text);
    const scope = jsonToCel({
      input,
      execution: { executionId: call.executionId, idempotencyKey: call.idempotencyKey },
    }) as Record<string, unknown>;
    const request = buildRequest(cel, config, tool, scope, input);
    // Everything is built and checked before anything is sent: a request that cannot be made is
    // refused, never half sent.
    const headers = new Headers();
    let headerBytes = 0;
    for (const [name, expression] of Object.entries(tool.headers)) {
      const value = evaluateText(cel, expression, scope, `config.headers.${name}`);
      if (!HEADER_VALUE.test(value))
        throw inputError(
          `config.headers.${name} gave a value that cannot be a header (a line break, a control character, or a character outside Latin-1)`,
        );
      headers.set(name, value);
      headerBytes += name.length + value.length;
    }
    for (const [name, secret] of Object.entries(config.headers)) {
      const value = this.env[secret.env];
      const failed = (why: string) =>
        new EngineError(
          'INTEGRATION_ERROR',
          `integration ${config.name}: the environment variable ${secret.env} (header ${name}) ${why}`,
          {
            hint: `Set ${secret.env} in the server's environment to the credential, on one line, and restart it.`,
            details: { integration: config.name, retry: false },
          },
        );
      if (value === undefined || value === '') throw failed('is not set');
      // Never echoed: the value is the secret.
      if (!HEADER_VALUE.test(`${secret.prefix}${value}`)) throw failed('holds a value that cannot be a header value');
      headers.set(name, `${secret.prefix}${value}`);
    }
    const requestBytes =
      request.url.length + headerBytes + (request.body === null ? 0 : Buffer.byteLength(request.body));
    if (requestBytes > config.requestBytesMax)
      throw new EngineError(
        'INPUT_INVALID',
        `the request (URL, headers and body) is ${requestBytes} bytes; integration ${config.name} takes at most ${config.requestBytesMax} (requestBytesMax)`,
        { hint: 'Send less, or ask the operator to raise requestBytesMax.', details: { limit: 'requestBytesMax' } },
      );
    headers.set(config.idempotencyHeader, call.idempotencyKey);
    if (request.body !== null) headers.set('content-type', 'application/json');
    headers.set('accept', 'application/json');
    const label = `integration ${config.name}: ${request.method} ${request.sent}`;
    call.authorize({ kind: 'http', name: config.name, method: request.method, path: request.path });

    const limiter = this.limiter(config.name);
    const release = await limiter.acquire(call.principal, call.signal, call.deadline);
    let status: number;
    let answerHeaders: Headers;
    let text: string;
    try {
      const left = call.deadline - Date.now();
      if (left <= 0)
        throw new EngineError('INTEGRATION_UNAVAILABLE', `${label}: the call's deadline passed before it was sent`);
      call.sending();
      const signal = AbortSignal.any([call.signal, AbortSignal.timeout(Math.min(config.timeoutMs, left))]);
      let response: Response;
      try {
        response = await this.fetchImpl(request.url, {
          method: request.method,
          headers,
          body: request.body,
          redirect: 'manual',
          signal,
        });
      } catch (error) {
        if (call.signal.aborted) throw call.signal.reason instanceof Error ? call.signal.reason : error;
        const timedOut = signal.aborted;
        const cause = (error as { cause?: { code?: string; message?: string } }).cause;
        throw new EngineError(
          'INTEGRATION_UNAVAILABLE',
          scrub(
            timedOut
              ? `${label} did not answer within ${Math.min(config.timeoutMs, left)} ms`
              : `${label} could not be reached: ${cause?.code ?? cause?.message ?? (error as Error).message}`,
          ),
          { details: { integration: config.name } },
        );
      }
      status = response.status;
      answerHeaders = response.headers;
      text = scrub(await readBounded(response, config.responseBytesMax, label, call.signal));
    } finally {
      release();
    }
    try {
      return this.judge(cel, tool, config, { status, headers: answerHeaders, text }, input, label, scrub);
    } catch (error) {
      // The service answered. Whatever went wrong past here, only an answer judged a refusal
      // (details.outcome "refused") says the service did not act; a failure a retry may mend (a
      // status config.retry accepts) stays retryable; anything else leaves what the service did
      // unknown, and starts no failed follow-up.
      const failure = error instanceof EngineError ? error : new EngineError('INTERNAL', (error as Error).message);
      const details = (failure.details ?? {}) as Record<string, unknown>;
      if (details.outcome !== undefined || failure.code === 'INTEGRATION_UNAVAILABLE') throw failure;
      throw new EngineError(
        'INTEGRATION_ERROR',
        `${label} answered HTTP ${status}, which could not be judged: ${failure.message}`,
        {
          hint: 'The service may have acted: this call is not sent again, and no failed follow-up starts. Fix the tool’s config, and settle this one by hand.',
          details: { integration: config.name, status, retry: false, outcome: 'unknown', code: failure.code },
        },
      );
    }
  }

  /** What an answer means: the output, or the refusal (outcome "refused"), or a retryable failure. */
  private judge(
    cel: Cel,
    tool: HttpToolConfig,
    config: IntegrationConfig,
    answered: { status: number; headers: Headers; text: string },
    input: unknown,
    label: string,
    scrub: (text: string) => string,
  ): unknown {
    const { status, headers: answerHeaders, text } = answered;
    let body: unknown = text;
    if (text !== '') {
      try {
        body = JSON.parse(text);
      } catch {
        body = text;
      }
    } else body = null;
    if (!withinDepth(body, ANSWER_DEPTH_MAX))
      throw new EngineError(
        'INTEGRATION_ERROR',
        `${label} answered JSON nested deeper than ${ANSWER_DEPTH_MAX} levels`,
        {
          details: { integration: config.name, status, retry: false, outcome: 'unknown' },
        },
      );
    const kept: Record<string, string> = {};
    for (const name of tool.responseHeaders) {
      const value = answerHeaders.get(name);
      if (value !== null) kept[name.toLowerCase()] = scrub(value);
    }
    const answer = { status, headers: kept, body };
    const answerScope = jsonToCel({ ...answer, input }) as Record<string, unknown>;
    const judge = (expression: string, what: string): boolean => {
      const verdict = cel.evaluate(expression, answerScope);
      if (typeof verdict !== 'boolean')
        throw new EngineError('INTEGRATION_ERROR', `${what} ${quote(expression)} gave ${quote(verdict)}, not a bool`, {
          details: { retry: false, outcome: 'unknown', status },
        });
      return verdict;
    };
    const snippet = cut(typeof body === 'string' ? body : JSON.stringify(body));
    if (!judge(tool.success, 'config.success')) {
      if (status >= 300 && status < 400)
        throw new EngineError(
          'INTEGRATION_ERROR',
          `${label} answered a redirect (HTTP ${status}${answerHeaders.get('location') ? ` to ${cut(scrub(answerHeaders.get('location')!), 120)}` : ''}): redirects are never followed`,
          {
            hint: 'Point the tool at the final path under the integration, or ask the operator to change its baseUrl. The service may have acted (a 303 after a POST often means it did): no failed follow-up starts.',
            details: { integration: config.name, status, retry: false, outcome: 'unknown' },
          },
        );
      const retry = judge(tool.retry, 'config.retry');
      throw new EngineError(
        retry ? 'INTEGRATION_UNAVAILABLE' : 'INTEGRATION_ERROR',
        `${label} answered HTTP ${status}${snippet ? `: ${snippet}` : ''}`,
        {
          ...(retry ? {} : { hint: 'The service refused the call; it is not retried. Read its answer.' }),
          details: { integration: config.name, status, ...(retry ? {} : { retry: false, outcome: 'refused' }) },
        },
      );
    }
    if (tool.output === null) return answer;
    try {
      return celToJson(cel.evaluate(tool.output, answerScope));
    } catch (error) {
      // The service did what was asked: this failure must not be taken for its refusal.
      throw new EngineError(
        'INTEGRATION_ERROR',
        `${label} succeeded (HTTP ${status}), but config.output could not map its answer: ${(error as Error).message}`,
        {
          hint: 'The call was done and is not sent again: fix config.output, and settle this one by hand.',
          details: { integration: config.name, status, retry: false, outcome: 'succeeded' },
        },
      );
    }
  }
}

/** The response body as text, failing once more than `max` bytes came in. */
async function readBounded(response: Response, max: number, label: string, signal: AbortSignal): Promise<string> {
  if (response.body === null) return '';
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let seen = 0;
  for (;;) {
    if (signal.aborted) {
      await reader.cancel().catch(() => undefined);
      throw signal.reason instanceof Error ? signal.reason : new Error('aborted');
    }
    let next: Awaited<ReturnType<typeof reader.read>>;
    try {
      next = await reader.read();
    } catch (error) {
      throw new EngineError('INTEGRATION_UNAVAILABLE', `${label}: the answer broke off: ${(error as Error).message}`);
    }
    if (next.done) break;
    seen += next.value.byteLength;
    if (seen > max) {
      await reader.cancel().catch(() => undefined);
      throw new EngineError(
        'INTEGRATION_ERROR',
        `${label}: the answer is larger than the integration's responseBytesMax (${max} bytes)`,
        {
          hint: 'Ask the service for less, or ask the operator to raise responseBytesMax.',
          // The service answered, and what it said was not read: whether it acted is unknown.
          details: { limit: 'responseBytesMax', max, retry: false, outcome: 'unknown' },
        },
      );
    }
    chunks.push(next.value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function cut(text: string, max = 300): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** What an http tool's config is checked against when no integration is configured at all. */
function unchecked(name: string): IntegrationConfig {
  return {
    name,
    baseUrl: 'http://unchecked.invalid',
    methods: [...METHODS],
    paths: ['/'],
    headers: {},
    idempotencyHeader: INTEGRATION_DEFAULTS.idempotencyHeader,
    timeoutMs: INTEGRATION_DEFAULTS.timeoutMs,
    requestBytesMax: INTEGRATION_DEFAULTS.requestBytesMax,
    responseBytesMax: INTEGRATION_DEFAULTS.responseBytesMax,
    concurrency: INTEGRATION_DEFAULTS.concurrency,
    perClientConcurrency: INTEGRATION_DEFAULTS.concurrency,
  };
}

/** Whether a parsed JSON value nests at most `max` levels (walked without recursion: the depth is the answer's). */
function withinDepth(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (node === null || typeof node !== 'object') continue;
    if (depth >= max) return false;
    for (const child of Array.isArray(node) ? node : Object.values(node)) stack.push([child, depth + 1]);
  }
  return true;
}
