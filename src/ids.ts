import { createHash, createHmac, hash, randomUUID } from 'node:crypto';
import { EngineError, quote } from './errors.js';

const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(value: unknown): value is string {
  return typeof value === 'string' && UUID_PATTERN.test(value);
}

/** Validate and canonicalise (lower-case) a UUID from the wire. */
export function parseUuid(value: unknown, what = 'id'): string {
  if (!isUuid(value)) {
    throw new EngineError('BAD_REQUEST', `${what} ${quote(value)} is not a UUID`, {
      hint: 'Use the 8-4-4-4-12 hex form, e.g. "70eec1a6-eac1-47aa-a507-e18f2d486425".',
    });
  }
  return value.toLowerCase();
}

export function newId(): string {
  return randomUUID();
}

/**
 * A generator of time-ordered UUIDs (version 7: 48-bit milliseconds, a 12-bit counter, random
 * bits), strictly increasing per generator (one per engine). Ids that increase append to their
 * index instead of dirtying a random page per insert.
 */
export function orderedIds(): () => string {
  let lastMs = 0;
  let counter = 0;
  return () => {
    const now = Date.now();
    if (now > lastMs) {
      lastMs = now;
      counter = 0;
    } else if (++counter > 0xfff) {
      lastMs += 1;
      counter = 0;
    }
    const ms = lastMs.toString(16).padStart(12, '0');
    const rand = randomUUID();
    const variant = ((parseInt(rand[19] ?? '0', 16) & 0x3) | 0x8).toString(16);
    return `${ms.slice(0, 8)}-${ms.slice(8, 12)}-7${counter.toString(16).padStart(3, '0')}-${variant}${rand.slice(20, 23)}-${rand.slice(24, 36)}`;
  };
}

/**
 * A UUID derived from names, so that the same inputs always give the same id (an execution started
 * by a trigger for a record version). Keyed (HMAC-SHA-256) with a secret of the database: the names
 * are public, so an unkeyed digest would let a client compute the id and claim it first. Shaped as a
 * version-8 UUID.
 */
export function derivedId(key: string, ...parts: string[]): string {
  const hex = createHmac('sha256', key).update(parts.join('\u0000')).digest('hex');
  const variant = ((parseInt(hex[16] ?? '0', 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/** sha256 of a string, hex; used to fingerprint idempotent inputs. */
export function fingerprint(text: string): string {
  return hash('sha256', text, 'hex');
}

/**
 * JSON with object keys sorted, so equal values always give equal text: JSON.stringify of the value
 * with every plain object's keys in order. Plain JSON values (what parsing JSON gives) are written
 * directly, without a sorted copy; anything else (a toJSON, a Date, a class instance) takes the copy.
 */
export function canonicalJson(value: unknown): string {
  const direct = writeCanonical(value);
  return direct !== undefined ? direct : JSON.stringify(sortKeys(value));
}

/** A string that needs no escape in JSON (no quote, backslash, control character or surrogate). */
const PLAIN_STRING = /^[^"\\\u0000-\u001f\ud800-\udfff]*$/;

function quoted(text: string): string {
  return PLAIN_STRING.test(text) ? `"${text}"` : JSON.stringify(text);
}

const INDEX = /^(?:0|[1-9]\d{0,9})$/;

function isIndex(key: string): boolean {
  return INDEX.test(key) && Number(key) < 4294967295;
}

function byIndexFirst(a: string, b: string): number {
  const ia = isIndex(a);
  const ib = isIndex(b);
  if (ia && ib) return Number(a) - Number(b);
  if (ia !== ib) return ia ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The canonical text of a plain JSON value, or undefined when it holds anything else. */
function writeCanonical(value: unknown): string | undefined {
  switch (typeof value) {
    case 'string':
      return quoted(value);
    case 'number':
      return Number.isFinite(value) ? JSON.stringify(value) : undefined;
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object': {
      if (value === null) return 'null';
      if (Array.isArray(value)) {
        if (Object.getPrototypeOf(value) !== Array.prototype) return undefined;
        let text = '[';
        for (let i = 0; i < value.length; i++) {
          const item = value[i];
          const part = item === undefined ? undefined : writeCanonical(item);
          if (part === undefined) return undefined;
          text += i === 0 ? part : `,${part}`;
        }
        return `${text}]`;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return undefined;
      const keys = Object.keys(value).sort();
      // The sorted copy enumerates as any object does: array-index keys first, in numeric order.
      if (keys.length > 0 && isIndex(keys[0]!)) keys.sort(byIndexFirst);
      let text = '{';
      let first = true;
      for (const key of keys) {
        const item = (value as Record<string, unknown>)[key];
        // JSON.stringify leaves out an undefined property; a function or symbol takes the copy.
        // The copy's __proto__ assignment never made a property: it is left out as well.
        if (item === undefined || key === '__proto__') continue;
        const part = writeCanonical(item);
        if (part === undefined) return undefined;
        text += first ? `${quoted(key)}:${part}` : `,${quoted(key)}:${part}`;
        first = false;
      }
      return `${text}}`;
    }
    default:
      return undefined;
  }
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value).sort()) out[key] = sortKeys((value as Record<string, unknown>)[key]);
    return out;
  }
  return value;
}

/**
 * RFC 4122 name-based UUIDs (version 3 with MD5, version 5 with SHA-1), as Go's uuid.NewMD5/NewSHA1.
 * `namespace` is a UUID in canonical text (CEL's uuid.NewSHA1 checks it first).
 */
export function nameBasedUuid(algorithm: 'md5' | 'sha1', version: number, namespace: string, name: Uint8Array): string {
  const digest = createHash(algorithm)
    .update(Buffer.from(namespace.replace(/-/g, ''), 'hex'))
    .update(name)
    .digest();
  digest[6] = (digest[6]! & 0x0f) | (version << 4);
  digest[8] = (digest[8]! & 0x3f) | 0x80;
  const hex = digest.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
