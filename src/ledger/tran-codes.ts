import { alreadyExists, EngineError, limitExceeded, notFound, quote } from '../errors.js';
import { isReservedKey } from '../json.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { TranCodeRow, TranCodeVersionRow } from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import { insertUnique } from './journals.js';
import { compileParams, type ParamDefinition, type ParamType } from './param-definitions.js';
import { checkTranCodeCanPost } from './tran-code-checks.js';
import { type JsonObject, jsonObjectText, optionalText, requiredText, type Status } from './records.js';

export const TRANSACTION_FIELDS = [
  'effective',
  'journalId',
  'correlationId',
  'externalId',
  'description',
  'metadata',
] as const;
export type TransactionField = (typeof TRANSACTION_FIELDS)[number];
export type TranCodeTransaction = Partial<Record<TransactionField, string | null>>;

export const ENTRY_FIELDS = [
  'accountId',
  'units',
  'currency',
  'direction',
  'entryType',
  'layer',
  'description',
  'metadata',
  'condition',
] as const;
export type EntryField = (typeof ENTRY_FIELDS)[number];
const REQUIRED_ENTRY_FIELDS: readonly EntryField[] = ['accountId', 'units', 'currency', 'direction'];
export type TranCodeEntry = Partial<Record<EntryField, string | null>>;

/** One immutable version of a tran code, as stored. */
export interface TranCodeDocument {
  tranCodeId: string;
  code: string;
  version: number;
  description: string | null;
  params: ParamDefinition[];
  vars: JsonObject | null;
  transaction: TranCodeTransaction;
  entries: TranCodeEntry[];
  metadata: JsonObject | null;
  created: string;
}

/** A version plus the tran code's current status. */
export interface TranCode extends TranCodeDocument {
  status: Status;
  modified: string;
}

export interface TranCodeInput {
  tranCodeId: string;
  code: string;
  description?: string | null;
  params?: Array<{
    name: string;
    type?: ParamType | null;
    default?: string | null;
    description?: string | null;
  }> | null;
  vars?: unknown;
  transaction: TranCodeTransaction;
  entries: TranCodeEntry[];
  metadata?: unknown;
  status?: Status | null;
}

export type TranCodeUpdate = Partial<Omit<TranCodeInput, 'tranCodeId' | 'code'>>;

/** A compiled CEL field, with the path used in error messages (`entries[1].units`). */
export interface CompiledField {
  path: string;
  source: string;
  evaluate: (context: Record<string, unknown>) => unknown;
}

export interface CompiledTranCode {
  document: TranCodeDocument;
  params: Array<{ definition: ParamDefinition; defaultValue: CompiledField | null }>;
  vars: Array<{ path: string[]; field: CompiledField }>;
  transaction: Partial<Record<TransactionField, CompiledField>>;
  entries: Array<Partial<Record<EntryField, CompiledField>>>;
}

const CODE_PATTERN = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/;
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

function tranCodeError(message: string, hint?: string): EngineError {
  return new EngineError('TRAN_CODE_ERROR', message, hint === undefined ? {} : { hint });
}

/** Validate a tran code definition and compile every CEL field; throws TRAN_CODE_ERROR naming the field. */
export function compileTranCode(deps: LedgerDeps, document: TranCodeDocument): CompiledTranCode {
  const compileField = (path: string, source: unknown): CompiledField => {
    if (typeof source !== 'string' || source.trim() === '') {
      throw tranCodeError(`${path} must be a CEL expression string, got ${quote(source)}`);
    }
    try {
      const fn = deps.cel.compile(source);
      return { path, source, evaluate: fn };
    } catch (error) {
      const e = error as EngineError;
      throw new EngineError(
        e.code === 'LIMIT_EXCEEDED' ? 'LIMIT_EXCEEDED' : 'TRAN_CODE_ERROR',
        `tran code ${document.code}: ${path}: ${e.message}`,
        {
          hint: e.hint,
          details: e.details,
        },
      );
    }
  };

  const params = compileParams(deps, document.params, 'tran code', compileField, tranCodeError);

  const vars: CompiledTranCode['vars'] = [];
  const walkVars = (node: unknown, path: string[]): void => {
    if (typeof node === 'string') {
      vars.push({ path, field: compileField(`vars.${path.join('.')}`, node) });
      return;
    }
    if (node === null || typeof node !== 'object' || Array.isArray(node)) {
      throw tranCodeError(
        `vars.${path.join('.')} must be a CEL expression string or a map of them, got ${quote(node)}`,
      );
    }
    for (const [key, value] of Object.entries(node)) {
      if (!IDENTIFIER.test(key) || isReservedKey(key))
        throw tranCodeError(`vars key ${quote(key)} is not an identifier, or is reserved`);
      walkVars(value, [...path, key]);
    }
  };
  if (document.vars) walkVars(document.vars, []);

  const transaction: CompiledTranCode['transaction'] = {};
  for (const [key, value] of Object.entries(document.transaction ?? {})) {
    if (!(TRANSACTION_FIELDS as readonly string[]).includes(key)) {
      throw tranCodeError(`transaction.${key} is not a transaction field`, `Use ${TRANSACTION_FIELDS.join(', ')}.`);
    }
    if (value != null) transaction[key as TransactionField] = compileField(`transaction.${key}`, value);
  }

  if (!Array.isArray(document.entries) || document.entries.length === 0) {
    throw tranCodeError(
      `tran code ${document.code} has no entries`,
      'A transaction needs at least two entries that balance.',
    );
  }
  if (document.entries.length > deps.limits.entriesPerTransactionMax) {
    throw limitExceeded(
      'entriesPerTransactionMax',
      deps.limits.entriesPerTransactionMax,
      document.entries.length,
      `tran code has ${document.entries.length} entries; entriesPerTransactionMax is ${deps.limits.entriesPerTransactionMax}`,
    );
  }
  const entries = document.entries.map((template, i) => {
    const compiled: Partial<Record<EntryField, CompiledField>> = {};
    for (const [key, value] of Object.entries(template)) {
      if (!(ENTRY_FIELDS as readonly string[]).includes(key)) {
        throw tranCodeError(`entries[${i}].${key} is not an entry field`, `Use ${ENTRY_FIELDS.join(', ')}.`);
      }
      if (value != null) compiled[key as EntryField] = compileField(`entries[${i}].${key}`, value);
    }
    for (const required of REQUIRED_ENTRY_FIELDS) {
      if (!compiled[required]) throw tranCodeError(`entries[${i}].${required} is required`);
    }
    return compiled;
  });
  return { document, params, vars, transaction, entries };
}

export function toTranCode(document: TranCodeDocument, row: TranCodeRow): TranCode {
  return { ...document, status: row.status as Status, modified: row.modified };
}

function buildDocument(
  deps: LedgerDeps,
  base: { tranCodeId: string; code: string; version: number; created: string },
  input: Omit<TranCodeUpdate, 'status'>,
  previous: TranCodeDocument | null,
): TranCodeDocument {
  const params =
    input.params === undefined || input.params === null
      ? (previous?.params ?? [])
      : input.params.map((p, i) => ({
          name: requiredText(p.name, `params[${i}].name`, 64),
          type: (p.type ?? 'STRING') as ParamType,
          default: p.default ?? null,
          description: optionalText(p.description, `params[${i}].description`),
        }));
  let vars = previous?.vars ?? null;
  if (input.vars !== undefined) {
    vars =
      input.vars === null
        ? null
        : (JSON.parse(jsonObjectText(input.vars, 'vars', deps.limits.jsonBytesMax) ?? 'null') as JsonObject);
  }
  return {
    ...base,
    description:
      input.description === undefined
        ? (previous?.description ?? null)
        : optionalText(input.description, 'description'),
    params,
    vars,
    transaction: input.transaction ?? previous?.transaction ?? {},
    entries: input.entries ?? previous?.entries ?? [],
    metadata:
      input.metadata === undefined
        ? (previous?.metadata ?? null)
        : (JSON.parse(
            jsonObjectText(input.metadata, 'metadata', deps.limits.jsonBytesMax) ?? 'null',
          ) as JsonObject | null),
  };
}

export function createTranCode(deps: LedgerDeps, input: TranCodeInput): TranCode {
  if (deps.st.tranCodeById.get(input.tranCodeId)) {
    throw alreadyExists('tran code', input.tranCodeId, 'Use updateTranCode to make a new version.');
  }
  const code = requiredText(input.code, 'code', 64);
  if (!CODE_PATTERN.test(code)) {
    throw new EngineError('BAD_REQUEST', `tran code code ${quote(code)} is not valid`, {
      hint: 'Start with a letter; use letters, digits, _, . and - (UPPER_SNAKE by convention, e.g. "ACH_CREDIT").',
    });
  }
  const now = deps.clock.now().toISOString();
  const document = buildDocument(deps, { tranCodeId: input.tranCodeId, code, version: 1, created: now }, input, null);
  checkTranCodeCanPost(deps, compileTranCode(deps, document)); // refuses a template that does not compile, or can never post
  const row: TranCodeRow = {
    tran_code_id: input.tranCodeId,
    code,
    status: input.status ?? 'ACTIVE',
    version: 1,
    created: now,
    modified: now,
  };
  insertUnique(() => deps.st.insertTranCode.run(row), `tran code code ${quote(code)}`);
  deps.st.insertTranCodeVersion.run(row.tran_code_id, 1, JSON.stringify(document), now);
  return toTranCode(document, row);
}

/** A template change makes a new version; a status change alone does not. */
export function updateTranCode(deps: LedgerDeps, tranCodeId: string, input: TranCodeUpdate): TranCode {
  const current = findTranCodeRow(deps, { id: tranCodeId });
  const now = deps.clock.now().toISOString();
  const templateChanged = (['description', 'params', 'vars', 'transaction', 'entries', 'metadata'] as const).some(
    (key) => input[key] !== undefined,
  );
  let document = loadDocument(deps, current.tran_code_id, current.version);
  const row: TranCodeRow = { ...current, status: input.status ?? current.status, modified: now };
  if (templateChanged) {
    const version = current.version + 1;
    document = buildDocument(deps, { tranCodeId, code: current.code, version, created: now }, input, document);
    checkTranCodeCanPost(deps, compileTranCode(deps, document)); // refuses a template that does not compile, or can never post
    row.version = version;
    deps.st.insertTranCodeVersion.run(tranCodeId, version, JSON.stringify(document), now);
  }
  deps.st.updateTranCode.run(row);
  return toTranCode(document, row);
}

export function lockTranCode(deps: LedgerDeps, tranCodeId: string): TranCode {
  return updateTranCode(deps, tranCodeId, { status: 'LOCKED' });
}

export function findTranCodeRow(deps: LedgerDeps, ref: { id?: string | null; code?: string | null }): TranCodeRow {
  let row: TranCodeRow | undefined;
  if (ref.id) row = deps.st.tranCodeById.get(ref.id);
  else if (ref.code) row = deps.st.tranCodeByCode.get(ref.code);
  else throw new EngineError('BAD_REQUEST', 'tranCode needs an id or a code');
  if (!row) {
    throw notFound(
      'tran code',
      ref.id ?? ref.code,
      'Create it with createTranCode, or check the spelling (codes are case-sensitive).',
    );
  }
  return row;
}

export function loadDocument(deps: LedgerDeps, tranCodeId: string, version: number): TranCodeDocument {
  const row = deps.st.tranCodeVersion.get(tranCodeId, version);
  if (!row) throw new EngineError('NOT_FOUND', `tran code ${quote(tranCodeId)} has no version ${version}`);
  return JSON.parse(row.document) as TranCodeDocument;
}

export function getTranCode(
  deps: LedgerDeps,
  ref: { id?: string | null; code?: string | null; version?: number | null },
): TranCode {
  const row = findTranCodeRow(deps, ref);
  const version = ref.version ?? row.version;
  if (version < 1 || version > row.version) {
    throw new EngineError('NOT_FOUND', `tran code ${row.code} has no version ${version}; its latest is ${row.version}`);
  }
  return toTranCode(loadDocument(deps, row.tran_code_id, version), row);
}

export function listTranCodes(deps: LedgerDeps, first: number, after?: string | null): Connection<TranCode> {
  const req = pageRequest<number>(first, after, deps.limits.pageSizeMax, 'number', 'tran-codes');
  const rows = deps.st.tranCodesPage.all(req.after ?? 0, req.fetch);
  return toConnection(
    rows,
    req,
    (r) => r.rowid,
    (r) => toTranCode(loadDocument(deps, r.tran_code_id, r.version), r),
  );
}

export function tranCodeHistory(
  deps: LedgerDeps,
  tranCodeId: string,
  first: number,
  after?: string | null,
): Connection<TranCode> {
  const req = pageRequest<number>(first, after, deps.limits.pageSizeMax, 'number', 'tran-code-history');
  const row = findTranCodeRow(deps, { id: tranCodeId });
  const rows = deps.st.tranCodeVersionsPage.all(tranCodeId, req.after ?? Number.MAX_SAFE_INTEGER, req.fetch);
  return toConnection(
    rows,
    req,
    (r: TranCodeVersionRow) => r.version,
    (r) => toTranCode(JSON.parse(r.document) as TranCodeDocument, row),
  );
}

/**
 * Compiled tran code versions, by id@version. A version is immutable once committed, but the cache
 * can see one that is not: a version written by a request that then rolled back (a @dryRun update),
 * whose number another connection may later commit with other templates. So an entry is trusted
 * only within the cache epoch it was checked in (see CacheEpoch); after the epoch moves, the stored
 * document text is read again (one primary-key read) and the entry is kept only if it is the same.
 * Entries are compiled on first use, from the database. At most `limits.recordCacheMax` entries.
 */
export class TranCodeCache {
  private readonly compiled = new Map<string, { compiled: CompiledTranCode; text: string; epoch: number }>();

  get size(): number {
    return this.compiled.size;
  }

  get(deps: LedgerDeps, tranCodeId: string, version: number): CompiledTranCode {
    const key = `${tranCodeId}@${version}`;
    const entry = this.compiled.get(key);
    if (entry && deps.epoch.active && entry.epoch === deps.epoch.value) return entry.compiled;
    const row = deps.st.tranCodeVersion.get(tranCodeId, version);
    if (!row) {
      throw new EngineError('NOT_FOUND', `tran code ${quote(tranCodeId)} has no version ${version}`, {
        hint: 'Leave tranCodeVersion out to use the latest version.',
      });
    }
    if (entry && entry.text === row.document) {
      entry.epoch = deps.epoch.value;
      return entry.compiled;
    }
    const compiled = compileTranCode(deps, JSON.parse(row.document) as TranCodeDocument);
    if (deps.limits.recordCacheMax === 0) return compiled;
    if (this.compiled.size >= deps.limits.recordCacheMax) this.compiled.clear();
    this.compiled.set(key, { compiled, text: row.document, epoch: deps.epoch.value });
    return compiled;
  }
}
