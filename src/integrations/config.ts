/**
 * The operator's `integrations` block (TALLY_CONFIG): the HTTP APIs http tools may call, each with
 * its origin, methods, path prefixes, credentials named by environment variable (never stored),
 * timeouts, size bounds and concurrency. Every problem is a BAD_REQUEST naming the field path.
 */
import { EngineError, quote } from '../errors.js';
import { isRecord } from '../models/http.js';

export { isRecord };
import type { IntegrationConfig, SecretHeader } from './types.js';

/** The name of an integration or MCP server: lower_snake or kebab case. */
export const NAME = /^[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*$/;
/** An environment variable of the server that holds a credential. */
export const ENV_NAME = /^[A-Z_][A-Z0-9_]*$/;
/** An HTTP header name (RFC 9110 token). */
export const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;
/** What a header value may hold: visible Latin-1, spaces and tabs (no line break, no control character). */
export const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
export const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
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
export function isPlainPath(path: string): boolean {
  if (!path.startsWith('/')) return false;
  if (path === '/') return true;
  if (/[%?#\\\s\u0000-\u001f\u007f{}]/.test(path)) return false;
  // `;` starts path parameters, which some servers strip before routing ("/a/..;/b" is "/b" to
  // Tomcat, Jetty and Spring): refused, as is a segment that begins with "..".
  if (path.includes(';')) return false;
  const segments = path.replace(/\/$/, '').slice(1).split('/');
  return segments.every((s) => s !== '' && s !== '.' && !s.startsWith('..'));
}

/** One part of a path template: literal text, or a CEL expression whose value fills one segment (or part of one). */
