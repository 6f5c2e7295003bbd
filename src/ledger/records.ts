import { badInput, EngineError, limitExceeded, quote } from '../errors.js';
import { PLAIN_JSON_DEPTH_MAX } from '../limits.js';

export type Status = 'ACTIVE' | 'LOCKED';
export type AccountStatus = 'ACTIVE' | 'LOCKED' | 'INACTIVE';
export type Direction = 'DEBIT' | 'CREDIT';
export type Layer = 'SETTLED' | 'PENDING' | 'ENCUMBRANCE';
export const LAYERS: readonly Layer[] = ['SETTLED', 'PENDING', 'ENCUMBRANCE'];
export type JsonObject = Record<string, unknown>;

export interface Journal {
  journalId: string;
  name: string;
  description: string | null;
  status: Status;
  code: string | null;
  version: number;
  created: string;
  modified: string;
}

export interface Account {
  accountId: string;
  code: string;
  name: string;
  externalId: string | null;
  description: string | null;
  status: AccountStatus;
  normalBalanceType: Direction;
  metadata: JsonObject | null;
  config: { enableConcurrentPosting: boolean; isAccountSet: boolean };
  version: number;
  created: string;
  modified: string;
}

/** A set of accounts and other sets of one journal, whose balances roll up theirs. */
export interface AccountSet {
  accountSetId: string;
  journalId: string;
  code: string;
  name: string;
  description: string | null;
  normalBalanceType: Direction;
  metadata: JsonObject | null;
  config: { enableConcurrentPosting: boolean };
  version: number;
  created: string;
  modified: string;
}

/** The reference ledger's Transaction.properties: the enforcement sent to override every control's own. */
export interface TransactionProperties {
  overrideVelocityEnforcement: { action: string } | null;
}

export interface Transaction {
  transactionId: string;
  tranCodeId: string;
  tranCodeVersion: number;
  journalId: string;
  correlationId: string;
  externalId: string | null;
  effective: string;
  description: string | null;
  metadata: JsonObject | null;
  voidOf: string | null;
  voidedBy: string | null;
  /** Velocity exceptions the posting recorded (WARN, VOID, or an exception sent with it). */
  exceptions: Array<{ type: string; message: string; detail: Record<string, unknown> }>;
  /** What the posting (or void) was sent with that changed how it was judged; absent when nothing was. */
  properties?: TransactionProperties;
  version: number;
  created: string;
  modified: string;
}

export interface Entry {
  entryId: string;
  transactionId: string;
  accountId: string;
  journalId: string;
  sequence: number;
  entryType: string;
  layer: Layer;
  direction: Direction;
  units: string;
  currency: string;
  description: string | null;
  metadata: JsonObject | null;
  /** The sets the account rolled up into (in this journal) when the entry was posted. */
  parentAccountIds: string[];
  created: string;
}

/** Parse a JSON column written by the engine itself. */
export function readJson(text: string | null): JsonObject | null {
  return text === null ? null : (JSON.parse(text) as JsonObject);
}

/**
 * Validate a metadata-like value from the wire: a JSON object (or null), within jsonBytesMax.
 * Returns the text to store.
 */
export function jsonObjectText(value: unknown, what: string, jsonBytesMax: number): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw badInput(`${what} must be a JSON object`, value, 'Send an object such as {"tier": "gold"}.');
  }
  // A replacer makes JSON.stringify take its slow path: only values that are not plain JSON need one.
  const text = isPlainJson(value)
    ? JSON.stringify(value)
    : JSON.stringify(value, (_key, v: unknown) => {
        if (typeof v === 'number' && !Number.isFinite(v)) {
          throw new EngineError('BAD_REQUEST', `${what} holds the number ${v}, which JSON cannot store`, {
            hint: 'Send a finite number, or a string.',
          });
        }
        return v;
      });
  if (Buffer.byteLength(text) > jsonBytesMax) {
    throw limitExceeded(
      'jsonBytesMax',
      jsonBytesMax,
      Buffer.byteLength(text),
      `${what} is ${Buffer.byteLength(text)} bytes; jsonBytesMax is ${jsonBytesMax}`,
      {
        hint: 'Keep metadata small; store large documents elsewhere and reference them.',
      },
    );
  }
  return text;
}

/**
 * Whether `value` is JSON as JSON.parse makes it: strings, finite numbers, booleans, null, arrays
 * and plain objects of them (no undefined, no toJSON, no other prototypes). For such a value,
 * JSON.parse(JSON.stringify(value)) has the same keys and values, so the text need not be parsed
 * back, and JSON.stringify needs no replacer to refuse what JSON cannot store.
 */
export function isPlainJson(value: unknown, depth = 0): boolean {
  if (value === null) return true;
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return Number.isFinite(value);
    case 'object': {
      if (depth >= PLAIN_JSON_DEPTH_MAX) return false;
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) if (!isPlainJson(value[i], depth + 1)) return false;
        return true;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return false;
      for (const key in value) {
        if (!Object.hasOwn(value, key)) return false;
        if (!isPlainJson((value as Record<string, unknown>)[key], depth + 1)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

/** A required, trimmed, non-empty string of bounded length. */
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;

export function requiredText(value: unknown, what: string, max = 256): string {
  if (typeof value !== 'string' || value.trim() === '') {
    throw badInput(`${what} must be a non-empty string`, value);
  }
  checkCharacters(value, what);
  if (value.length > max) {
    throw limitExceeded('textCharsMax', max, value.length, `${what} is ${value.length} characters; the most is ${max}`);
  }
  return value.trim();
}

// Free text (descriptions, external ids) may hold tabs and line breaks, nothing else below U+0020.
// eslint-disable-next-line no-control-regex
const CONTROL_BUT_WHITESPACE = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/;

/** No control characters, and well-formed Unicode (a lone surrogate reads back as U+FFFD). */
function checkCharacters(value: string, what: string, freeText = false): void {
  if ((freeText ? CONTROL_BUT_WHITESPACE : CONTROL).test(value)) {
    throw new EngineError('BAD_REQUEST', `${what} ${quote(value)} contains a control character`, {
      hint: 'Use printable characters only.',
    });
  }
  if (!(value as string & { isWellFormed(): boolean }).isWellFormed()) {
    throw new EngineError('BAD_REQUEST', `${what} ${quote(value)} is not well-formed Unicode (a lone surrogate)`, {
      hint: 'Send valid UTF-16 text.',
    });
  }
}

export function optionalText(value: unknown, what: string, max = 4096): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') throw badInput(`${what} must be a string`, value);
  checkCharacters(value, what, true);
  if (value.length > max) {
    throw limitExceeded('textCharsMax', max, value.length, `${what} is ${value.length} characters; the most is ${max}`);
  }
  return value;
}
