/**
 * The \`http\` tool kind: what a version's config says (checkHttpConfig, at createAction) and the
 * request it builds from an input (buildRequest, before each send). A tool only fills in a request
 * for an integration the operator configured: a path template whose {…} values are percent-encoded
 * into the path, a query, headers that are not the operator's, a body; the URL it makes is checked
 * whole, again, to stay under the integration's origin and path prefixes.
 */
import type { Cel } from '../cel/cel.js';
import { celToJson } from '../cel/values.js';
import { EngineError, quote } from '../errors.js';
import { HEADER_NAME, isPlainPath, isRecord, METHODS } from './config.js';

function bad(message: string, hint: string): EngineError {
  return new EngineError('BAD_REQUEST', message, { hint });
}
import type { IntegrationConfig } from './types.js';

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
/**
 * Headers that ask a server or a proxy in front of it to route the request elsewhere than its method
 * and path say (a method override, an original or rewritten URL, forwarding): a tool may set none,
 * or the operator's methods and paths, and the policy document of the call, would not be what runs.
 */
const ROUTING_HEADERS =
  /^(x-http-method(-override)?|x-method-override|x-original-|x-rewrite-|x-forwarded-|forwarded$|via$|x-real-ip$|x-host$|x-proxy-)/i;

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
export function inputError(message: string): EngineError {
  return new EngineError('INPUT_INVALID', message, {
    hint: 'Fix the input (or the tool’s config) so that the request it builds is one the integration allows.',
  });
}

export function evaluateText(cel: Cel, expression: string, scope: Record<string, unknown>, what: string): string {
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
): { url: string; path: string; sent: string; method: string; body: string | null } {
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
  // `path`: below the integration's baseUrl, as the tool's template and the policies name it;
  // `sent`: the path as sent, for messages.
  return {
    url: url.toString(),
    path: `${path}${url.search}`,
    sent: `${url.pathname}${url.search}`,
    method: tool.method,
    body,
  };
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
          ROUTING_HEADERS.test(lower) ||
          lower === target.idempotencyHeader.toLowerCase() ||
          Object.keys(target.headers).some((h) => h.toLowerCase() === lower)
        )
          throw new EngineError('BAD_REQUEST', `${what}.${name}: a tool may not set the ${name} header`, {
            hint: 'Credentials, the idempotency key, the transport headers and headers that reroute a request (method overrides, original URLs, forwarding) are the integration’s, set by the operator.',
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
