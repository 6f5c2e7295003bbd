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
import { redact } from '../models/http.js';
import { Limiter } from './limiter.js';
import type { IntegrationConfig, OutboundCall, SecretHeader } from './types.js';

const NAME = /^[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*$/;
const ENV_NAME = /^[A-Z_][A-Z0-9_]*$/;
const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
const FIELDS = new Set([
  'name',
  'baseUrl',
  'methods',
  'paths',
  'headers',
  'idempotencyHeader',
  'timeoutMs',
  'requestBytesMax',
  'responseBytesMax',
  'concurrency',
  'perClientConcurrency',
]);
const SECRET_FIELDS = /^(api[-_]?key|key|token|secret|auth(orization)?|bearer|password|credentials?)$/i;
/** Headers no tool may set: the transport's own, the credentials' and the idempotency key's. */
const RESERVED_HEADERS = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'upgrade',
  'te',
  'trailer',
  'keep-alive',
  'proxy-authorization',
  'proxy-connection',
  'authorization',
  'cookie',
]);

export const INTEGRATION_DEFAULTS = Object.freeze({
  idempotencyHeader: 'Idempotency-Key',
  timeoutMs: 10_000,
  requestBytesMax: 65_536,
  responseBytesMax: 1_048_576,
  concurrency: 16,
});
const BOUNDS = {
  timeoutMs: [1, 600_000],
  requestBytesMax: [1, 16_777_216],
  responseBytesMax: [1, 16_777_216],
  concurrency: [1, 1024],
} as const;

const HINT =
  'Each integration is {name, baseUrl, methods: ["POST", ...], paths: ["/payouts", ...], headers?: {"Authorization": {env: "VAR", prefix?: "Bearer "}}, idempotencyHeader?, timeoutMs?, requestBytesMax?, responseBytesMax?, concurrency?, perClientConcurrency?}.';

function bad(message: string, hint = HINT): EngineError {
  return new EngineError('BAD_REQUEST', message, { hint });
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function integerIn(path: string, value: unknown, [min, max]: readonly [number, number]): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
    throw bad(`${path} ${quote(value)} is not an integer from ${min} to ${max}`);
  return value;
}

/** `{Header: {env, prefix?}}`: credentials named by environment variable, never written in configuration. */
export function parseSecretHeaders(at: string, value: unknown, what = 'header'): Record<string, SecretHeader> {
  if (value === undefined || value === null) return {};
  if (!isRecord(value)) throw bad(`${at} ${quote(value)} is not an object of ${what}s`);
  const out: Record<string, SecretHeader> = {};
  for (const [name, spec] of Object.entries(value)) {
    if (what === 'header' && !HEADER_NAME.test(name)) throw bad(`${at}: ${quote(name)} is not a header name`);
    if (!isRecord(spec) || typeof spec.env !== 'string') {
      throw bad(
        `${at}.${name} must be {env: "VARIABLE"}: values are never written in configuration`,
        `Put the value in an environment variable of the server and name it, e.g. {"env": "PAYOUTS_TOKEN", "prefix": "Bearer "}.`,
      );
    }
    for (const field of Object.keys(spec))
      if (field !== 'env' && field !== 'prefix') throw bad(`${at}.${name}.${field} is not a field (env, prefix)`);
    if (!ENV_NAME.test(spec.env))
      throw bad(`${at}.${name}.env is not an environment variable name (upper case letters, digits and _)`);
    const prefix = spec.prefix ?? '';
    if (typeof prefix !== 'string' || /[\r\n]/.test(prefix))
      throw bad(`${at}.${name}.prefix must be a one-line string`);
    out[name] = { env: spec.env, prefix };
  }
  return out;
}

/** Validate the `integrations` block; every problem is a BAD_REQUEST naming the field path. */
export function parseIntegrations(value: unknown): IntegrationConfig[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw bad(`integrations ${quote(value)} is not an array`);
  const seen = new Set<string>();
  return value.map((entry: unknown, index): IntegrationConfig => {
    const at = `integrations[${index}]`;
    if (!isRecord(entry)) throw bad(`${at} ${quote(entry)} is not an object`);
    for (const field of Object.keys(entry)) {
      if (FIELDS.has(field)) continue;
      if (SECRET_FIELDS.test(field))
        throw bad(
          `${at}.${field} is not an integration field: credentials are never written in configuration`,
          'Send them as a header whose value comes from an environment variable: "headers": {"Authorization": {"env": "PAYOUTS_TOKEN", "prefix": "Bearer "}}.',
        );
      throw bad(`${at}.${field} is not an integration field (known: ${[...FIELDS].join(', ')})`);
    }
    const name = entry.name;
    if (typeof name !== 'string' || !NAME.test(name) || name.length > 64)
      throw bad(`${at}.name ${quote(name)} is not an integration name (lower_snake or kebab case, e.g. "payouts")`);
    if (seen.has(name)) throw bad(`${at}.name ${quote(name)} is already used by another integration`);
    seen.add(name);

    let url: URL | null = null;
    try {
      url = typeof entry.baseUrl === 'string' ? new URL(entry.baseUrl) : null;
    } catch {
      url = null;
    }
    if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:'))
      throw bad(`${at}.baseUrl ${quote(entry.baseUrl)} is not an http(s) URL`);
    if (url.username !== '' || url.password !== '')
      throw bad(
        `${at}.baseUrl has credentials in it: they are never written in configuration`,
        'Remove the user:password part and send credentials as a header from an environment variable.',
      );
    if (url.search !== '' || url.hash !== '') throw bad(`${at}.baseUrl must not have a query or fragment`);
    const basePath = url.pathname.replace(/\/+$/, '');

    const methods = entry.methods;
    if (!Array.isArray(methods) || methods.length === 0)
      throw bad(`${at}.methods ${quote(methods)} is not a non-empty array of HTTP methods`);
    const methodSet = methods.map((m: unknown, i) => {
      if (typeof m !== 'string' || !(METHODS as readonly string[]).includes(m.toUpperCase()))
        throw bad(`${at}.methods[${i}] ${quote(m)} is not one of ${METHODS.join(', ')}`);
      return m.toUpperCase();
    });

    const paths = entry.paths;
    if (!Array.isArray(paths) || paths.length === 0)
      throw bad(`${at}.paths ${quote(paths)} is not a non-empty array of path prefixes, e.g. ["/payouts"]`);
    const prefixes = paths.map((p: unknown, i) => {
      if (typeof p !== 'string' || !isPlainPath(p))
        throw bad(
          `${at}.paths[${i}] ${quote(p)} is not a path prefix`,
          'A prefix starts with "/", below baseUrl\'s path, with no "..", "//", "%", "?" or "#" ("/" allows every path).',
        );
      return p === '/' ? '/' : p.replace(/\/+$/, '');
    });

    const headers = parseSecretHeaders(`${at}.headers`, entry.headers);
    const idempotencyHeader = entry.idempotencyHeader ?? INTEGRATION_DEFAULTS.idempotencyHeader;
    if (typeof idempotencyHeader !== 'string' || !HEADER_NAME.test(idempotencyHeader))
      throw bad(`${at}.idempotencyHeader ${quote(idempotencyHeader)} is not a header name`);
    const number = (field: keyof typeof BOUNDS) =>
      entry[field] === undefined
        ? INTEGRATION_DEFAULTS[field]
        : integerIn(`${at}.${field}`, entry[field], BOUNDS[field]);
    const concurrency = number('concurrency');
    const perClientConcurrency =
      entry.perClientConcurrency === undefined
        ? Math.max(1, Math.floor(concurrency / 2))
        : integerIn(`${at}.perClientConcurrency`, entry.perClientConcurrency, [1, concurrency]);
    return {
      name,
      baseUrl: `${url.origin}${basePath}`,
      methods: methodSet,
      paths: prefixes,
      headers,
      idempotencyHeader,
      timeoutMs: number('timeoutMs'),
      requestBytesMax: number('requestBytesMax'),
      responseBytesMax: number('responseBytesMax'),
      concurrency,
      perClientConcurrency,
    };
  });
}

/** A literal path: starts with "/", no empty, "." or ".." segment, no escapes, query, fragment, backslash, space or control. */
function isPlainPath(path: string): boolean {
  if (!path.startsWith('/')) return false;
  if (path === '/') return true;
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this refuses
  if (/[%?#\\\s\u0000-\u001f\u007f{}]/.test(path)) return false;
  const segments = path.replace(/\/$/, '').slice(1).split('/');
  return segments.every((s) => s !== '' && s !== '.' && s !== '..');
}

/** One part of a path template: literal text, or a CEL expression whose value fills one segment (or part of one). */
type PathPart = { text: string } | { expression: string };

/** "/payouts/{input.id}/cancel" → its parts; a BAD_REQUEST naming the template when it could reach anywhere else. */
export function parsePathTemplate(template: string, what = 'config.path'): PathPart[] {
  const parts: PathPart[] = [];
  let literal = '';
  for (let i = 0; i < template.length; ) {
    const open = template.indexOf('{', i);
    const close = template.indexOf('}', i);
    if (close !== -1 && (open === -1 || close < open))
      throw bad(`${what} ${quote(template)} has a "}" with no "{" before it`, PATH_HINT);
    if (open === -1) {
      literal += template.slice(i);
      parts.push({ text: template.slice(i) });
      break;
    }
    const end = template.indexOf('}', open);
    if (end === -1) throw bad(`${what} ${quote(template)} has a "{" with no "}"`, PATH_HINT);
    const expression = template.slice(open + 1, end).trim();
    if (expression === '' || expression.includes('{'))
      throw bad(`${what} ${quote(template)}: each {…} holds one CEL expression without braces`, PATH_HINT);
    if (open > i) parts.push({ text: template.slice(i, open) });
    literal += `${template.slice(i, open)}x`;
    parts.push({ expression });
    i = end + 1;
  }
  if (!isPlainPath(literal))
    throw bad(
      `${what} ${quote(template)} is not a path the tool may send`,
      `${PATH_HINT} The literal parts may not hold "..", "//", "%", "?", "#", "\\\\" or spaces: the query goes in config.query.`,
    );
  return parts;
}

const PATH_HINT =
  'Write a path below the integration\'s baseUrl, e.g. "/payouts/{input.payout_id}": each {…} is CEL over input, and its value is percent-encoded into the path.';

/** What an http tool's version config holds, checked (see checkHttpConfig). */
export interface HttpToolConfig {
  integration: string;
  method: string;
  path: string;
  query: Record<string, string>;
  headers: Record<string, string>;
  /** CEL giving the JSON body; null: the input, for POST/PUT/PATCH; none for the rest. */
  body: string | null;
  responseHeaders: string[];
  /** CEL over {status, headers, body}: the call succeeded. */
  success: string;
  /** CEL over {status, headers, body}: try again later (with the same idempotency key). */
  retry: string;
  /** CEL over {status, headers, body, input}: the output; null: {status, headers, body}. */
  output: string | null;
  /** Started after the call ends: on success, and on a final failure (settle, or release). */
  followUps: { succeeded: FollowUp | null; failed: FollowUp | null };
}

/** A tool started when an outside call ends: one the calling tool declares, its input CEL over the outcome. */
export interface FollowUp {
  tool: string;
  input: string;
}

const CONFIG_FIELDS = new Set([
  'integration',
  'method',
  'path',
  'query',
  'headers',
  'body',
  'responseHeaders',
  'success',
  'retry',
  'output',
  'followUps',
]);
export const DEFAULT_SUCCESS = 'status >= 200 && status < 300';
export const DEFAULT_RETRY = 'status == 408 || status == 425 || status == 429 || status >= 500';
const CONFIG_HINT =
  'An http tool\'s config is {integration, method, path: "/payouts/{input.id}", query?: {name: CEL}, headers?: {name: CEL}, body?: CEL, responseHeaders?: [...], success?: CEL, retry?: CEL, output?: CEL, followUps?: {succeeded?: {tool, input: CEL}, failed?: {tool, input: CEL}}}.';

/** The integrations this process may call, by name, with their slots. */
export class Integrations {
  readonly #configs = new Map<string, IntegrationConfig>();
  readonly #limiters = new Map<string, Limiter>();

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

  /** Throws unless `config` is an http tool config this process can run (createAction and updateAction). */
  check(cel: Cel, config: Record<string, unknown>): HttpToolConfig {
    return checkHttpConfig(cel, config, (name) => this.get(name));
  }

  /**
   * Send one call: build the request from the tool's config and input, take a slot, send it with
   * the idempotency key, read the answer (bounded), and judge it. Returns the output (before the
   * output schema); throws INTEGRATION_UNAVAILABLE (retry) or INTEGRATION_ERROR (final).
   */
  async send(cel: Cel, raw: Record<string, unknown>, input: unknown, call: OutboundCall): Promise<unknown> {
    const tool = this.check(cel, raw);
    const config = this.get(tool.integration);
    const secrets = this.secrets(config);
    const scrub = (text: string): string => secrets.reduce((t, s) => redact(t, s), text);
    const scope = jsonToCel({
      input,
      execution: { executionId: call.executionId, idempotencyKey: call.idempotencyKey },
    }) as Record<string, unknown>;
    const request = buildRequest(cel, config, tool, scope, input);
    const headers = new Headers();
    for (const [name, expression] of Object.entries(tool.headers)) {
      const value = evaluateText(cel, expression, scope, `config.headers.${name}`);
      if (/[\r\n]/.test(value)) throw inputError(`config.headers.${name} gave a value with a line break`);
      headers.set(name, value);
    }
    for (const [name, secret] of Object.entries(config.headers)) {
      const value = this.env[secret.env];
      if (value === undefined || value === '')
        throw new EngineError(
          'INTEGRATION_ERROR',
          `integration ${config.name}: the environment variable ${secret.env} (header ${name}) is not set`,
          {
            hint: `Set ${secret.env} in the server's environment and restart it.`,
            details: { integration: config.name, retry: false },
          },
        );
      headers.set(name, `${secret.prefix}${value}`);
    }
    headers.set(config.idempotencyHeader, call.idempotencyKey);
    if (request.body !== null) headers.set('content-type', 'application/json');
    headers.set('accept', 'application/json');
    const label = `integration ${config.name}: ${request.method} ${request.path}`;
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
    let body: unknown = text;
    if (text !== '') {
      try {
        body = JSON.parse(text);
      } catch {
        body = text;
      }
    } else body = null;
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
          details: { retry: false },
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
            hint: 'Point the tool at the final path under the integration, or ask the operator to change its baseUrl.',
            details: { integration: config.name, status, retry: false },
          },
        );
      const retry = judge(tool.retry, 'config.retry');
      throw new EngineError(
        retry ? 'INTEGRATION_UNAVAILABLE' : 'INTEGRATION_ERROR',
        `${label} answered HTTP ${status}${snippet ? `: ${snippet}` : ''}`,
        {
          ...(retry ? {} : { hint: 'The service refused the call; it is not retried. Read its answer.' }),
          details: { integration: config.name, status, ...(retry ? {} : { retry: false }) },
        },
      );
    }
    if (tool.output === null) return answer;
    return celToJson(cel.evaluate(tool.output, answerScope));
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
          details: { limit: 'responseBytesMax', max, retry: false },
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

function inputError(message: string): EngineError {
  return new EngineError('INPUT_INVALID', message, {
    hint: 'Fix the input (or the tool’s config) so that the request it builds is one the integration allows.',
  });
}

function evaluateText(cel: Cel, expression: string, scope: Record<string, unknown>, what: string): string {
  const value = celToJson(cel.evaluate(expression, scope));
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  throw inputError(`${what} gave ${quote(value)}: a string or number is needed`);
}

/** The request a call sends: URL (checked to be under the integration), method and body. */
export function buildRequest(
  cel: Cel,
  config: IntegrationConfig,
  tool: HttpToolConfig,
  scope: Record<string, unknown>,
  input: unknown,
): { url: string; path: string; method: string; body: string | null } {
  let path = '';
  for (const part of parsePathTemplate(tool.path)) {
    if ('text' in part) {
      path += part.text;
      continue;
    }
    const value = evaluateText(cel, part.expression, scope, `config.path {${part.expression}}`);
    if (value === '' || value === '.' || value === '..')
      throw inputError(`config.path {${part.expression}} gave ${quote(value)}, which cannot be a part of a path`);
    path += encodeURIComponent(value);
  }
  const base = new URL(config.baseUrl);
  const basePath = base.pathname.replace(/\/+$/, '');
  const url = new URL(`${base.origin}${basePath}${path}`);
  for (const [name, expression] of Object.entries(tool.query))
    url.searchParams.append(name, evaluateText(cel, expression, scope, `config.query.${name}`));
  // What the URL parser made of it must be exactly what was built (no dot segments it resolved, no
  // other origin), and under one of the integration's prefixes.
  const expected = `${basePath}${path}`;
  if (url.origin !== base.origin || url.pathname !== expected)
    throw inputError(`the path ${quote(path)} does not stay under integration ${config.name}`);
  const under = config.paths.some((prefix) => {
    const full = `${basePath}${prefix === '/' ? '' : prefix}`;
    return prefix === '/' || url.pathname === full || url.pathname.startsWith(`${full}/`);
  });
  if (!under)
    throw new EngineError(
      'ACCESS_DENIED',
      `integration ${config.name} does not allow the path ${quote(path)} (allowed: ${config.paths.join(', ')})`,
      { hint: 'Use a path under one of the prefixes the operator configured for the integration.' },
    );
  if (!config.methods.includes(tool.method))
    throw new EngineError('ACCESS_DENIED', `integration ${config.name} does not allow ${tool.method}`, {
      hint: `Allowed methods: ${config.methods.join(', ')}.`,
    });
  let body: string | null = null;
  if (tool.body !== null) body = JSON.stringify(celToJson(cel.evaluate(tool.body, scope)));
  else if (tool.method === 'POST' || tool.method === 'PUT' || tool.method === 'PATCH') body = JSON.stringify(input);
  if (body !== null && Buffer.byteLength(body) > config.requestBytesMax)
    throw new EngineError(
      'INPUT_INVALID',
      `the request body is ${Buffer.byteLength(body)} bytes; integration ${config.name} takes at most ${config.requestBytesMax} (requestBytesMax)`,
      { hint: 'Send less, or ask the operator to raise requestBytesMax.', details: { limit: 'requestBytesMax' } },
    );
  return { url: url.toString(), path: `${url.pathname}${url.search}`, method: tool.method, body };
}

/** Check an http tool's config: fields, the integration, method, path template and every CEL expression. */
export function checkHttpConfig(
  cel: Cel,
  config: Record<string, unknown>,
  integration: (name: string) => IntegrationConfig,
): HttpToolConfig {
  const fail = (message: string) => new EngineError('BAD_REQUEST', message, { hint: CONFIG_HINT });
  for (const field of Object.keys(config))
    if (!CONFIG_FIELDS.has(field))
      throw fail(`config.${field} is not an http tool field (known: ${[...CONFIG_FIELDS].join(', ')})`);
  if (typeof config.integration !== 'string')
    throw fail(`config.integration ${quote(config.integration)} is not a name`);
  const target = integration(config.integration);
  const method = typeof config.method === 'string' ? config.method.toUpperCase() : null;
  if (method === null || !(METHODS as readonly string[]).includes(method))
    throw fail(`config.method ${quote(config.method)} is not one of ${METHODS.join(', ')}`);
  if (!target.methods.includes(method))
    throw new EngineError('BAD_REQUEST', `integration ${target.name} does not allow ${method}`, {
      hint: `Its methods: ${target.methods.join(', ')}.`,
    });
  if (typeof config.path !== 'string') throw fail(`config.path ${quote(config.path)} is not a path template`);
  const parts = parsePathTemplate(config.path);
  const compile = (expression: unknown, what: string): string => {
    if (typeof expression !== 'string' || expression.trim() === '')
      throw fail(`${what} ${quote(expression)} is not a CEL expression`);
    try {
      cel.compile(expression);
    } catch (error) {
      throw new EngineError(
        'BAD_REQUEST',
        `${what} ${quote(expression)} does not compile: ${(error as Error).message}`,
        {
          hint: CONFIG_HINT,
        },
      );
    }
    return expression;
  };
  for (const part of parts) if ('expression' in part) compile(part.expression, `config.path {${part.expression}}`);
  // What the template fixes before its first {…} must be able to fall under one of the prefixes
  // (the whole path, when it has none); the request is checked again, whole, before it is sent.
  const first = parts.findIndex((p) => 'expression' in p);
  const fixed = parts
    .slice(0, first === -1 ? parts.length : first)
    .map((p) => ('text' in p ? p.text : ''))
    .join('');
  const fits = target.paths.some((prefix) =>
    prefix === '/'
      ? true
      : first === -1
        ? fixed === prefix || fixed.startsWith(`${prefix}/`)
        : fixed.startsWith(`${prefix}/`) || fixed === prefix || `${prefix}/`.startsWith(fixed),
  );
  if (!fits)
    throw new EngineError(
      'BAD_REQUEST',
      `config.path ${quote(config.path)} is not under the paths integration ${target.name} allows (${target.paths.join(', ')})`,
      { hint: 'Use a path under one of the prefixes the operator configured for the integration.' },
    );
  const map = (value: unknown, what: string, headers = false): Record<string, string> => {
    if (value === undefined || value === null) return {};
    if (!isRecord(value)) throw fail(`${what} must map names to CEL expressions`);
    const out: Record<string, string> = {};
    for (const [name, expression] of Object.entries(value)) {
      if (headers) {
        if (!HEADER_NAME.test(name)) throw fail(`${what}: ${quote(name)} is not a header name`);
        const lower = name.toLowerCase();
        if (
          RESERVED_HEADERS.has(lower) ||
          lower === target.idempotencyHeader.toLowerCase() ||
          Object.keys(target.headers).some((h) => h.toLowerCase() === lower)
        )
          throw new EngineError('BAD_REQUEST', `${what}.${name}: a tool may not set the ${name} header`, {
            hint: 'Credentials, the idempotency key and the transport headers are the integration’s, set by the operator.',
          });
      }
      out[name] = compile(expression, `${what}.${name}`);
    }
    return out;
  };
  const query = map(config.query, 'config.query');
  const headers = map(config.headers, 'config.headers', true);
  const optional = (field: string) =>
    config[field] === undefined || config[field] === null ? null : compile(config[field], `config.${field}`);
  const body = optional('body');
  if (body !== null && (method === 'GET' || method === 'HEAD'))
    throw fail(`config.body is for a method that sends a body; this tool's method is ${method}`);
  const responseHeaders = config.responseHeaders ?? [];
  if (
    !Array.isArray(responseHeaders) ||
    responseHeaders.some((h) => typeof h !== 'string' || !HEADER_NAME.test(h)) ||
    responseHeaders.length > 32
  )
    throw fail('config.responseHeaders must be a list of at most 32 header names');
  const then = config.followUps ?? {};
  if (!isRecord(then)) throw fail('config.followUps must be {succeeded?: {tool, input}, failed?: {tool, input}}');
  const followUp = (key: string): FollowUp | null => {
    const value = then[key];
    if (value === undefined || value === null) return null;
    if (!isRecord(value) || typeof value.tool !== 'string')
      throw fail(`config.followUps.${key} must be {tool: "<a tool this one declares>", input: "<CEL>"}`);
    for (const field of Object.keys(value))
      if (field !== 'tool' && field !== 'input')
        throw fail(`config.followUps.${key}.${field} is not a field (tool, input)`);
    return { tool: value.tool, input: compile(value.input ?? 'input', `config.followUps.${key}.input`) };
  };
  for (const key of Object.keys(then))
    if (key !== 'succeeded' && key !== 'failed') throw fail(`config.followUps.${key} is not succeeded or failed`);
  return {
    integration: target.name,
    method,
    path: config.path,
    query,
    headers,
    body,
    responseHeaders: responseHeaders as string[],
    success: optional('success') ?? DEFAULT_SUCCESS,
    retry: optional('retry') ?? DEFAULT_RETRY,
    output: optional('output'),
    followUps: { succeeded: followUp('succeeded'), failed: followUp('failed') },
  };
}
