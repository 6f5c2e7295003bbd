/**
 * Calculations: balances kept per custom dimensions (CEL over the entry, its transaction and its
 * account), maintained on posting in the same transaction as the entries, as the reference
 * ledger's calculations are.
 *
 * - A GLOBAL calculation counts every entry; a LOCAL one only where it is attached (an account or
 *   a set, in one journal). Balances are kept for the entry's account and for each set it rolled
 *   up into (Entry.parentAccountIds), where the calculation applies.
 * - `condition` must evaluate to true for an entry to count. An evaluation error there (a missing
 *   key, say) counts as not matching; an error in a dimension of a matching entry fails the posting.
 * - With `config.enableEffectiveBalances`, three child calculations (YYYY, YYYY_MM, YYYY_MM_DD, ids
 *   uuid.NewSHA1(parent, bytes(name))) keep the same balances per effective year, month and day of
 *   the transaction, with the dimensions year, month, day added. They are managed only through
 *   their parent. Cumulative and range reads sum year, month and day records (index range scans,
 *   bounded by the calendar, never by the number of entries).
 * - Creating a GLOBAL calculation, or attaching a LOCAL one, backfills the existing entries it
 *   covers in the same transaction (at most calculationBackfillEntriesMax).
 * - The ACTIVE definitions are kept in memory per engine and reloaded when the CacheEpoch moves
 *   (writes here bump it; so do rollbacks and other connections' commits): with no calculation,
 *   a posting costs one comparison.
 */
import { celError, checkCelValueSize } from '../cel/cel.js';
import { isBudgetError } from '../cel/cost.js';
import { celToJson } from '../cel/values.js';
import { addText, Dec, scaleOf, withScale } from '../decimal.js';
import { alreadyExists, EngineError, limitExceeded, notFound, quote } from '../errors.js';
import { nameBasedUuid } from '../ids.js';
import { isReservedKey } from '../json.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { CalculationBalanceRow, CalculationRow } from '../storage/statements/calculations.js';
import {
  BALANCE_COLUMNS,
  type BalanceColumn,
  balanceColumnIndex,
  type EntryRow,
  type TransactionRow,
} from '../storage/statements/ledger.js';
import { balanceOwner } from './account-sets.js';
import { ownersOf, type Posted } from './posted.js';
import { type Balance, toBalance } from './balances.js';
import { cachedAccount, type LedgerDeps } from './deps.js';
import {
  accountDocument,
  entryDocument,
  entryFields,
  lazyVars,
  transactionDocument,
  unionReads,
  type VarsRead,
  varsRead,
} from './documents.js';
import { chainSeqs } from './chains.js';
import { DEFAULT_JOURNAL_ID, getJournal } from './journals.js';

type Compiled = (context?: Record<string, unknown>) => unknown;

export type CalculationScope = 'GLOBAL' | 'LOCAL';
export type Granularity = 'YEAR' | 'MONTH' | 'DAY';

export interface Dimension {
  alias: string;
  value: string;
}

export interface Calculation {
  calculationId: string;
  code: string;
  description: string;
  scope: CalculationScope;
  dimensions: Dimension[];
  condition: string | null;
  config: { enableEffectiveBalances: boolean } | null;
  status: 'ACTIVE' | 'LOCKED';
  backfillStatus: 'COMPLETE' | 'IN_PROGRESS' | 'ERROR' | 'DETACHED';
  /** A child effective calculation's parent, and its granularity; null for others. */
  parentCalculationId: string | null;
  granularity: Granularity | null;
  version: number;
  created: string;
  modified: string;
}

export interface CalculationInput {
  calculationId: string;
  code: string;
  description: string;
  scope?: CalculationScope | null;
  dimensions: ReadonlyArray<{ alias: string; value: string } | null>;
  condition?: string | null;
  config?: { enableEffectiveBalances?: boolean | null } | null;
}

export interface AttachmentInput {
  accountId: string;
  calculationId: string;
  journalId?: string | null;
}

export interface Attachment {
  accountId: string;
  journalId: string;
  calculationId: string;
}

/** Dimension names the effective-date children add: refused as custom dimensions. */
export const RESERVED_DIMENSIONS = ['year', 'month', 'day'] as const;

/** The children of an effective calculation: the name their id is derived from, and what they add. */
const CHILDREN: ReadonlyArray<{ granularity: Granularity; name: string; dimensions: Dimension[] }> = [
  {
    granularity: 'YEAR',
    name: 'YYYY',
    dimensions: [{ alias: 'year', value: 'int(context.vars.transaction.effective.substring(0, 4))' }],
  },
  {
    granularity: 'MONTH',
    name: 'YYYY_MM',
    dimensions: [
      { alias: 'year', value: 'int(context.vars.transaction.effective.substring(0, 4))' },
      { alias: 'month', value: 'int(context.vars.transaction.effective.substring(5, 7))' },
    ],
  },
  {
    granularity: 'DAY',
    name: 'YYYY_MM_DD',
    dimensions: [
      { alias: 'year', value: 'int(context.vars.transaction.effective.substring(0, 4))' },
      { alias: 'month', value: 'int(context.vars.transaction.effective.substring(5, 7))' },
      { alias: 'day', value: 'int(context.vars.transaction.effective.substring(8, 10))' },
    ],
  },
];

/** The id of an effective calculation's child: uuid.NewSHA1(parent, bytes('YYYY' | 'YYYY_MM' | 'YYYY_MM_DD')). */
export function childCalculationId(parentId: string, granularity: Granularity): string {
  const child = CHILDREN.find((c) => c.granularity === granularity)!;
  return nameBasedUuid('sha1', 5, parentId.toLowerCase(), Buffer.from(child.name, 'utf8'));
}

const ALIAS = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

// ---------------------------------------------------------------------------------------------
// Records

export function toCalculation(row: CalculationRow): Calculation {
  return {
    calculationId: row.calculation_id,
    code: row.code,
    description: row.description,
    scope: row.scope,
    dimensions: JSON.parse(row.dimensions) as Dimension[],
    condition: row.condition,
    config: row.config === null ? null : (JSON.parse(row.config) as { enableEffectiveBalances: boolean }),
    status: row.status,
    backfillStatus: row.backfill_status,
    parentCalculationId: row.parent_id,
    granularity: row.granularity,
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

function calculationRow(deps: LedgerDeps, id: string): CalculationRow {
  const row = typeof id === 'string' ? deps.calc.byId.get(id.toLowerCase()) : undefined;
  if (!row) throw notFound('calculation', id, 'Create it with createCalculation, or check the id.');
  return row;
}

export function getCalculation(deps: LedgerDeps, id: string): Calculation {
  return toCalculation(calculationRow(deps, id));
}

/** Every calculation (children included) in creation order. */
export function listCalculations(deps: LedgerDeps, first: number, after?: string | null): Connection<Calculation> {
  const req = pageRequest<number>(first, after, deps.limits.pageSizeMax, 'number', 'calculations');
  const rows = deps.calc.page.all(req.after ?? 0, req.fetch);
  return toConnection(rows, req, (r) => r.rowid, toCalculation);
}

/** An effective calculation's children (YEAR, MONTH, DAY); none for others. */
export function childrenOf(deps: LedgerDeps, id: string): Calculation[] {
  return deps.calc.children.all(id).map(toCalculation);
}

function isEffective(row: CalculationRow): boolean {
  return (
    row.config !== null &&
    (JSON.parse(row.config) as { enableEffectiveBalances?: boolean }).enableEffectiveBalances === true
  );
}

// ---------------------------------------------------------------------------------------------
// Create, delete, attach, detach

function badRequest(message: string, hint?: string): EngineError {
  return new EngineError('BAD_REQUEST', message, hint ? { hint } : {});
}

function checkDimensionName(alias: string): void {
  if ((RESERVED_DIMENSIONS as readonly string[]).includes(alias)) {
    throw badRequest(
      `dimension '${alias}' is reserved for effective dates`,
      'Name the dimension something other than year, month or day: effective-date balances add those.',
    );
  }
}

export function createCalculation(deps: LedgerDeps, input: CalculationInput): Calculation {
  const id = String(input.calculationId).toLowerCase();
  const code = input.code;
  if (typeof code !== 'string' || code.trim() === '' || code.length > 256) {
    throw badRequest(`calculation code ${quote(code)} must be a non-empty string of at most 256 characters`);
  }
  if (typeof input.description !== 'string') throw badRequest('calculation description is required');
  const scope = input.scope ?? 'GLOBAL';
  if (scope !== 'GLOBAL' && scope !== 'LOCAL') throw badRequest(`scope ${quote(scope)} is not GLOBAL or LOCAL`);
  // Every active calculation is weighed against every posting it may cover: bound how many there are.
  const active = deps.calc.activeCount.get() ?? 0;
  if (active >= deps.limits.calculationsMax) {
    throw limitExceeded(
      'calculationsMax',
      deps.limits.calculationsMax,
      active + 1,
      `there are ${active} active calculations; calculationsMax is ${deps.limits.calculationsMax}`,
      {
        hint: 'Delete calculations no longer read (deleteCalculation), or combine them with more dimensions.',
      },
    );
  }
  const dims = input.dimensions ?? [];
  if (!Array.isArray(dims)) throw badRequest('dimensions must be a list of {alias, value}');
  if (dims.length > deps.limits.calculationDimensionsMax) {
    throw limitExceeded(
      'calculationDimensionsMax',
      deps.limits.calculationDimensionsMax,
      dims.length,
      `calculation ${code} declares ${dims.length} dimensions; calculationDimensionsMax is ${deps.limits.calculationDimensionsMax}`,
      {
        hint: 'Combine dimensions into fewer keys, or split the calculation.',
      },
    );
  }
  const dimensions: Dimension[] = [];
  const seen = new Set<string>();
  for (const dim of dims) {
    if (!dim || typeof dim.alias !== 'string' || typeof dim.value !== 'string')
      throw badRequest('each dimension needs an alias and a value (a CEL expression)');
    checkDimensionName(dim.alias);
    if (!ALIAS.test(dim.alias) || isReservedKey(dim.alias)) {
      throw badRequest(
        `dimension alias ${quote(dim.alias)} must be a name of letters, digits and _ (not starting with a digit, at most 64 characters)`,
      );
    }
    if (seen.has(dim.alias)) throw badRequest(`dimension alias ${quote(dim.alias)} is declared twice`);
    seen.add(dim.alias);
    deps.cel.compile(dim.value);
    dimensions.push({ alias: dim.alias, value: dim.value });
  }
  const condition = input.condition ?? null;
  if (condition !== null) deps.cel.compile(condition);
  const effective = input.config?.enableEffectiveBalances === true;
  const config = input.config == null ? null : { enableEffectiveBalances: effective };

  const rows: CalculationRow[] = [];
  const now = deps.clock.now().toISOString();
  const base = {
    description: input.description,
    scope,
    condition,
    config: config === null ? null : JSON.stringify(config),
    status: 'ACTIVE' as const,
  };
  rows.push({
    ...base,
    calculation_id: id,
    code,
    dimensions: JSON.stringify(dimensions),
    parent_id: null,
    granularity: null,
    backfill_status: 'COMPLETE',
    version: 1,
    created: now,
    modified: now,
  });
  if (effective) {
    for (const child of CHILDREN) {
      rows.push({
        ...base,
        calculation_id: childCalculationId(id, child.granularity),
        code: `${code}_${child.name}`,
        dimensions: JSON.stringify([...child.dimensions, ...dimensions]),
        parent_id: id,
        granularity: child.granularity,
        backfill_status: 'COMPLETE',
        version: 1,
        created: now,
        modified: now,
      });
    }
  }
  for (const row of rows) {
    if (deps.calc.byId.get(row.calculation_id)) {
      throw new EngineError('ALREADY_EXISTS', `calculation ${row.calculation_id} already exists`, {
        hint: 'Use another calculationId.',
      });
    }
    if (deps.calc.byCode.get(row.code)) {
      throw alreadyExists('a calculation with code', row.code, 'Use another code.');
    }
  }
  for (const row of rows) deps.calc.insert.run(row);
  deps.epoch.bump();
  if (scope === 'GLOBAL') backfill(deps, definitionOf(deps, rows[0]!, rows.slice(1)), { kind: 'all' });
  return getCalculation(deps, id);
}

function refuseChild(row: CalculationRow, operation: 'delete' | 'attach' | 'detach'): void {
  if (row.parent_id === null) return;
  throw badRequest(
    `${operation}Calculation cannot ${operation} child effective calculation - ${operation} parent instead`,
    `${row.calculation_id} is the ${row.granularity} child of ${row.parent_id}: ${operation} ${row.parent_id}, which ${operation}s its children too.`,
  );
}

/** Lock a calculation (and its children): it is no longer kept up to date; its balances stay readable. */
export function deleteCalculation(deps: LedgerDeps, id: string): Calculation {
  const row = calculationRow(deps, id);
  refuseChild(row, 'delete');
  if (row.status === 'LOCKED') return toCalculation(row);
  if (deps.calc.anyAttachment.get(row.calculation_id)) {
    throw badRequest(
      `calculation ${row.code} is still attached`,
      'Detach it from every account and set (detachCalculation) before deleting it.',
    );
  }
  deps.calc.setStatus.run('LOCKED', deps.clock.now().toISOString(), row.calculation_id, row.calculation_id);
  deps.epoch.bump();
  return getCalculation(deps, row.calculation_id);
}

/** Where an attachment lives: a set's own journal; for an account the given journal, or the default one. */
function attachmentTarget(deps: LedgerDeps, input: AttachmentInput): Attachment {
  const owner = balanceOwner(deps, String(input.accountId).toLowerCase());
  let journalId: string;
  if (owner.isSet) journalId = owner.journalId ?? DEFAULT_JOURNAL_ID;
  else {
    journalId = input.journalId ? String(input.journalId).toLowerCase() : DEFAULT_JOURNAL_ID;
    getJournal(deps, journalId);
  }
  return { accountId: owner.id, journalId, calculationId: String(input.calculationId).toLowerCase() };
}

export function attachCalculation(deps: LedgerDeps, input: AttachmentInput): Attachment {
  const row = calculationRow(deps, input.calculationId);
  refuseChild(row, 'attach');
  if (row.status !== 'ACTIVE')
    throw badRequest(`calculation ${row.code} is ${row.status} (deleted) and cannot be attached`);
  if (row.scope !== 'LOCAL') {
    throw badRequest(
      `calculation ${row.code} is GLOBAL: it already counts every entry`,
      'Only LOCAL calculations are attached; create one with scope: LOCAL.',
    );
  }
  const target = attachmentTarget(deps, input);
  if (deps.calc.attachment.get(target.accountId, target.journalId, row.calculation_id)) {
    throw new EngineError(
      'ALREADY_EXISTS',
      `calculation ${row.code} is already attached to ${target.accountId} in journal ${target.journalId}`,
    );
  }
  deps.calc.insertAttachment.run(
    target.accountId,
    target.journalId,
    row.calculation_id,
    deps.clock.now().toISOString(),
  );
  const children = deps.calc.children.all(row.calculation_id);
  backfill(deps, definitionOf(deps, row, children), {
    kind: 'owner',
    accountId: target.accountId,
    journalId: target.journalId,
  });
  if (row.backfill_status !== 'COMPLETE')
    deps.calc.setBackfillStatus.run('COMPLETE', deps.clock.now().toISOString(), row.calculation_id, row.calculation_id);
  deps.epoch.bump();
  return target;
}

/** Detach a LOCAL calculation: its balances there are dropped (attaching again backfills them anew). */
export function detachCalculation(deps: LedgerDeps, input: AttachmentInput): Attachment {
  const row = calculationRow(deps, input.calculationId);
  refuseChild(row, 'detach');
  const target = attachmentTarget(deps, input);
  if (!deps.calc.attachment.get(target.accountId, target.journalId, row.calculation_id)) {
    throw new EngineError(
      'NOT_FOUND',
      `calculation ${row.code} is not attached to ${target.accountId} in journal ${target.journalId}`,
    );
  }
  deps.calc.deleteAttachment.run(target.accountId, target.journalId, row.calculation_id);
  for (const id of [row.calculation_id, ...deps.calc.children.all(row.calculation_id).map((c) => c.calculation_id)]) {
    deps.calc.deleteBalancesOf.run(id, target.accountId, target.journalId);
  }
  if (!deps.calc.anyAttachment.get(row.calculation_id)) {
    deps.calc.setBackfillStatus.run('DETACHED', deps.clock.now().toISOString(), row.calculation_id, row.calculation_id);
  }
  deps.epoch.bump();
  return target;
}

// ---------------------------------------------------------------------------------------------
// Definitions in memory

interface Definition {
  id: string;
  code: string;
  scope: CalculationScope;
  condition: Compiled | null;
  conditionText: string | null;
  dimensions: Array<{ alias: string; text: string; run: Compiled }>;
  /** The effective-date children (none unless enabled). */
  children: Array<{ id: string; granularity: Granularity }>;
  /** What its condition and dimensions read of `context.vars`. */
  reads: VarsRead;
}

interface Definitions {
  list: Definition[];
  anyLocal: boolean;
  /** What all of them read of `context.vars`: an entry's vars are built once for the list. */
  reads: VarsRead;
}

function definitionOf(deps: LedgerDeps, row: CalculationRow, children: readonly CalculationRow[]): Definition {
  const condition = row.condition === null ? null : deps.cel.compile(row.condition);
  const dimensions = (JSON.parse(row.dimensions) as Dimension[]).map((d) => ({
    alias: d.alias,
    text: d.value,
    run: deps.cel.compile(d.value),
  }));
  return {
    id: row.calculation_id,
    code: row.code,
    scope: row.scope,
    condition,
    conditionText: row.condition,
    dimensions,
    children: children
      .filter((c) => c.granularity !== null)
      .map((c) => ({ id: c.calculation_id, granularity: c.granularity! })),
    reads: varsRead(
      [...(condition ? [condition] : []), ...dimensions.map((d) => d.run)].map(
        (run) => (run as unknown as { ast?: unknown }).ast,
      ),
    ),
  };
}

/** The ACTIVE calculations, from memory while the epoch has not moved. */
function activeCalculations(deps: LedgerDeps): Definitions {
  const memo = deps.calc.memo;
  if (deps.epoch.active && memo.epoch === deps.epoch.value && memo.definitions) return memo.definitions as Definitions;
  const rows = deps.calc.active.all();
  const children = new Map<string, CalculationRow[]>();
  for (const row of rows) {
    if (row.parent_id === null) continue;
    let list = children.get(row.parent_id);
    if (!list) children.set(row.parent_id, (list = []));
    list.push(row);
  }
  const list = rows
    .filter((r) => r.parent_id === null)
    .map((r) => definitionOf(deps, r, children.get(r.calculation_id) ?? []));
  const definitions: Definitions = {
    list,
    anyLocal: list.some((d) => d.scope === 'LOCAL'),
    reads: list.reduce<VarsRead>((reads, d) => unionReads(reads, d.reads), new Map()),
  };
  if (deps.epoch.active) {
    memo.epoch = deps.epoch.value;
    memo.definitions = definitions;
  } else {
    memo.epoch = -1;
    memo.definitions = null;
  }
  return definitions;
}

// ---------------------------------------------------------------------------------------------
// Applying entries

const COLUMNS = BALANCE_COLUMNS;
type Column = BalanceColumn;

/** Sums per calculation balance record, written with one upsert each. */
class Deltas {
  /** Each record's row, and the columns its sums touch (bit i for COLUMNS[i]), in the order first added. */
  private readonly sums: Array<{ row: Record<string, string>; mask: number }> = [];
  /**
   * The same by calculation, then account or set, then the rest of the key: a posting adds to a
   * few records many times, and the ids it holds are hashed once (a joined key would be a new
   * string, flattened and hashed, on every add).
   */
  private readonly byOwner = new Map<string, Map<string, Map<string, { row: Record<string, string>; mask: number }>>>();

  add(
    calculationId: string,
    accountId: string,
    journalId: string,
    currency: string,
    key: string,
    period: string,
    dimensions: string,
    index: number,
    units: string,
    entryId: string,
  ): void {
    let owners = this.byOwner.get(calculationId);
    if (!owners) this.byOwner.set(calculationId, (owners = new Map()));
    let records = owners.get(accountId);
    if (!records) owners.set(accountId, (records = new Map()));
    const id = `${journalId}\u0000${currency}\u0000${key}\u0000${period}`;
    let sum = records.get(id);
    if (!sum) {
      const row = {
        calculation_id: calculationId,
        account_id: accountId,
        journal_id: journalId,
        currency,
        dimension_key: key,
        period,
        dimensions,
        settled_dr: '0',
        settled_cr: '0',
        pending_dr: '0',
        pending_cr: '0',
        encumbrance_dr: '0',
        encumbrance_cr: '0',
        entry_id: entryId,
        modified: '',
      };
      sum = { row, mask: 0 };
      records.set(id, sum);
      this.sums.push(sum);
    }
    sum.mask |= 1 << index;
    const column = COLUMNS[index]!;
    const sofar = sum.row[column]!;
    sum.row[column] = sofar === '0' ? units : addText(sofar, units);
    sum.row.entry_id = entryId;
  }

  write(deps: LedgerDeps, modified: string): void {
    for (const { row, mask } of this.sums) {
      row.modified = modified;
      // The UPDATE adds to the changed columns only (one dec_add each); the INSERT writes all six.
      const args: unknown[] = [];
      for (let i = 0; i < COLUMNS.length; i++) if ((mask & (1 << i)) !== 0) args.push(row[COLUMNS[i]!]);
      args.push(
        row.entry_id,
        modified,
        row.calculation_id,
        row.account_id,
        row.journal_id,
        row.currency,
        row.dimension_key,
        row.period,
      );
      if (deps.calc.updateColumns(mask).run(args).changes === 0) deps.calc.insertBalance.run(row);
    }
  }
}

/**
 * The key of a balance's dimension values: each value's canonical JSON followed by \u0001, in the
 * calculation's order. JSON text never holds a raw \u0001, so the values of a leading subset of the
 * dimensions are exactly a key prefix.
 */
function dimensionKey(values: readonly unknown[]): string {
  return values.map((v) => `${canonicalValue(v)}\u0001`).join('');
}

function canonicalValue(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = Object.create(null);
    for (const key of Object.keys(value).sort()) out[key] = sortKeys((value as Record<string, unknown>)[key]);
    return out;
  }
  return value;
}

/** Which accounts and sets an entry counts for, for one calculation. */
type Scope =
  | { kind: 'posting'; attached: (ownerId: string, journalId: string) => ReadonlySet<string> }
  | { kind: 'all' }
  | { kind: 'owner'; accountId: string; journalId: string };

interface EntryContext {
  entry: EntryRow;
  transaction: TransactionRow;
  /** Where the entry's sets come from when it was just written (else its parent_account_ids). */
  posted: Pick<Posted, 'parents'>;
  /** What the definitions applied to it read of `context.vars`. */
  reads: VarsRead;
  vars: { context: { vars: Record<string, unknown> } } | null;
  /** The entry's account and the sets it rolled up into, once read. */
  owners?: string[];
}

function contextOf(deps: LedgerDeps, ec: EntryContext): { context: { vars: Record<string, unknown> } } {
  if (ec.vars) return ec.vars;
  const { entry, transaction, reads } = ec;
  // Entries reference their account (a foreign key): it exists.
  const builders = {
    entry: () => entryDocument(entry, transaction),
    transaction: () => transactionDocument(transaction),
    account: () => accountDocument(cachedAccount(deps, entry.account_id)!),
  };
  let vars: Record<string, unknown>;
  if (reads === null) vars = lazyVars(builders);
  else {
    // Only what the expressions read, built now: an entry's one or two fields rather than its
    // whole document (the transaction's and account's are cached per row).
    vars = {};
    for (const [name, fields] of reads) {
      if (name === 'entry') vars.entry = fields === null ? builders.entry() : entryFields(entry, transaction, fields);
      else if (name === 'transaction' || name === 'account') vars[name] = builders[name]();
    }
  }
  ec.vars = { context: { vars } };
  return ec.vars;
}

function applyEntry(deps: LedgerDeps, def: Definition, ec: EntryContext, scope: Scope, deltas: Deltas): void {
  const { entry, transaction } = ec;
  const candidates = (ec.owners ??= ownersOf(ec.posted, entry));
  let owners: readonly string[];
  if (scope.kind === 'all') owners = candidates;
  else if (scope.kind === 'owner')
    owners = entry.journal_id === scope.journalId && candidates.includes(scope.accountId) ? [scope.accountId] : [];
  else
    owners =
      def.scope === 'GLOBAL' ? candidates : candidates.filter((c) => scope.attached(c, entry.journal_id).has(def.id));
  if (owners.length === 0) return;

  const context = contextOf(deps, ec);
  if (def.condition) {
    let matched: unknown;
    try {
      matched = def.condition(context);
    } catch (error) {
      // A condition that cannot be evaluated for an entry does not count it; a budget spent is the posting's limit.
      if (isBudgetError(error)) throw error;
      matched = false;
    }
    if (matched !== true) return;
  }
  const values: unknown[] = [];
  const named: Record<string, unknown> = {};
  for (const dim of def.dimensions) {
    let value: unknown;
    try {
      value = dim.run(context);
      checkCelValueSize(value, deps.limits.celValueSizeMax, `dimension ${dim.alias}`);
      value = celToJson(value);
    } catch (error) {
      // A budget spent fails the posting (postingCelCostMax). A dimension that has no value for
      // this entry (a missing key, 1 / 0) counts it under null: one definition's mistake never
      // fails other clients' postings, and the entry stays visible in the calculation.
      if (isBudgetError(error) || (error instanceof EngineError && error.code === 'LIMIT_EXCEEDED')) {
        const cause = celError(dim.text, error);
        throw new EngineError(
          cause.code,
          `calculation ${def.code}: dimension ${dim.alias} failed on entry ${entry.entry_id}: ${cause.message}`,
          {
            hint: 'Write the dimension so it costs less (postingCelCostMax bounds what a posting spends on calculations, views and velocity controls).',
            details: cause.details,
          },
        );
      }
      value = null;
    }
    values.push(value);
    named[dim.alias] = value;
  }
  const key = dimensionKey(values);
  const column = balanceColumnIndex(entry.layer, entry.direction);
  const dims = JSON.stringify(named);
  const [year, month, day] = def.children.length > 0 ? transaction.effective.split('-') : [];
  const periods = def.children.map((child) => {
    const withDate: Record<string, unknown> = { ...named, year: Number(year) };
    let period = year!;
    if (child.granularity !== 'YEAR') {
      withDate.month = Number(month);
      period += `-${month}`;
    }
    if (child.granularity === 'DAY') {
      withDate.day = Number(day);
      period += `-${day}`;
    }
    return { id: child.id, period, dimensions: JSON.stringify(withDate) };
  });
  for (const owner of owners) {
    deltas.add(def.id, owner, entry.journal_id, entry.currency, key, '', dims, column, entry.units, entry.entry_id);
    for (const p of periods)
      deltas.add(
        p.id,
        owner,
        entry.journal_id,
        entry.currency,
        key,
        p.period,
        p.dimensions,
        column,
        entry.units,
        entry.entry_id,
      );
  }
}

/** Keep every calculation that applies to the posted entries up to date. */
export function applyCalculations(deps: LedgerDeps, posted: Posted): void {
  const definitions = activeCalculations(deps);
  if (definitions.list.length === 0) return;
  const attachedMemo = new Map<string, ReadonlySet<string>>();
  const scope: Scope = {
    kind: 'posting',
    attached: (ownerId, journalId) => {
      const memoKey = `${ownerId} ${journalId}`;
      let ids = attachedMemo.get(memoKey);
      if (!ids) attachedMemo.set(memoKey, (ids = new Set(deps.calc.attachedTo.all(ownerId, journalId))));
      return ids;
    },
  };
  const deltas = new Deltas();
  for (const entry of posted.entries) {
    const ec: EntryContext = { entry, transaction: posted.transaction, posted, reads: definitions.reads, vars: null };
    for (const def of definitions.list) applyEntry(deps, def, ec, scope, deltas);
  }
  deltas.write(deps, posted.transaction.modified);
}

/**
 * Apply the existing entries a new GLOBAL calculation (every entry) or a new attachment (the
 * entries of that account or set in that journal) covers, in posting order.
 */
function backfill(
  deps: LedgerDeps,
  def: Definition,
  scope: { kind: 'all' } | { kind: 'owner'; accountId: string; journalId: string },
): void {
  const max = deps.limits.calculationBackfillEntriesMax;
  const chunk = 1000;
  const tooMany = () =>
    limitExceeded(
      'calculationBackfillEntriesMax',
      max,
      null,
      `calculation ${def.code} would backfill more than calculationBackfillEntriesMax (${max}) entries`,
      {
        hint:
          scope.kind === 'all'
            ? 'Create it as a LOCAL calculation and attach it where it is needed, or raise calculationBackfillEntriesMax in the engine options.'
            : 'Attach it to an account or set with fewer entries, or raise calculationBackfillEntriesMax in the engine options.',
        details: { calculationBackfillEntriesMax: max },
      },
    );
  // An account's or set's entries are its chains, walked newest first: their seqs are gathered (at
  // most `max`), sorted, and read in posting order.
  const ownerSeqs =
    scope.kind === 'owner'
      ? chainSeqs(
          deps,
          { id: scope.accountId, isSet: balanceOwner(deps, scope.accountId).isSet },
          { journalId: scope.journalId },
          max,
          tooMany,
        )
      : null;
  const deltas = new Deltas();
  let transaction: TransactionRow | undefined;
  let after = 0;
  let read = 0;
  let modified = '';
  for (;;) {
    const rows = ownerSeqs
      ? deps.st.entriesBySeqs.all(JSON.stringify(ownerSeqs.slice(read, read + chunk)))
      : deps.calc.entriesPage.all(after, chunk);
    if (rows.length === 0) break;
    read += rows.length;
    if (read > max) throw tooMany();
    for (const entry of rows) {
      if (!transaction || transaction.transaction_id !== entry.transaction_id)
        transaction = deps.st.transactionById.get(entry.transaction_id)!;
      if (transaction.modified > modified) modified = transaction.modified;
      applyEntry(deps, def, { entry, transaction, posted: {}, reads: def.reads, vars: null }, scope, deltas);
    }
    after = rows.at(-1)!.seq;
    if (rows.length < chunk) break;
  }
  deltas.write(deps, modified || deps.clock.now().toISOString());
}

// ---------------------------------------------------------------------------------------------
// Reads

export interface CalculationBalanceQuery {
  accountId: string;
  journalId: string;
  currency: string;
  calculationId: string;
  dimension?: unknown;
  effective?: {
    period?: string | null;
    range?: { gte?: string | null; lte?: string | null } | null;
    cumulative?: string | null;
  } | null;
}

function toCalcBalance(
  row: CalculationBalanceRow,
  calculationId = row.calculation_id,
  dimensions?: Record<string, unknown>,
): Balance {
  // The same six layer columns, entry, version and times as an account's balance record.
  return {
    ...toBalance(row),
    calculationId,
    dimensions: dimensions ?? (JSON.parse(row.dimensions) as Record<string, unknown>),
  };
}

function emptyCalcBalance(
  q: { accountId: string; journalId: string; currency: string },
  calculationId: string,
  dimensions: Record<string, unknown>,
): Balance {
  const zero = () => ({ dr: '0', cr: '0' });
  return {
    accountId: q.accountId,
    journalId: q.journalId,
    currency: q.currency,
    layers: { SETTLED: zero(), PENDING: zero(), ENCUMBRANCE: zero() },
    entryId: null,
    version: 0,
    created: null,
    modified: null,
    calculationId,
    dimensions,
  };
}

/** The dimension values a read names, checked against the calculation's dimensions. */
function dimensionValues(
  row: CalculationRow,
  dimension: unknown,
  leadingSubset: boolean,
): { key: string; named: Record<string, unknown>; complete: boolean } {
  if (dimension != null && (typeof dimension !== 'object' || Array.isArray(dimension))) {
    throw badRequest(`dimension must be an object of dimension values, got ${quote(dimension)}`);
  }
  const given = (dimension ?? {}) as Record<string, unknown>;
  for (const name of Object.keys(given)) checkDimensionName(name);
  const declared = (JSON.parse(row.dimensions) as Dimension[])
    .map((d) => d.alias)
    .filter((a) => !(RESERVED_DIMENSIONS as readonly string[]).includes(a));
  for (const name of Object.keys(given)) {
    if (!declared.includes(name)) {
      throw badRequest(
        `calculation ${row.code} has no dimension ${quote(name)}`,
        declared.length ? `Its dimensions are ${declared.join(', ')}.` : 'It has no dimensions: leave dimension out.',
      );
    }
  }
  const values: unknown[] = [];
  const named: Record<string, unknown> = {};
  let missing: string | null = null;
  for (const alias of declared) {
    if (!Object.hasOwn(given, alias)) {
      missing ??= alias;
      continue;
    }
    if (missing !== null) {
      throw badRequest(
        `dimension gives ${alias} but not ${missing}, which comes before it in calculation ${row.code}`,
        `List balances by a leading subset of its dimensions, in order: ${declared.join(', ')}.`,
      );
    }
    values.push(given[alias]);
    named[alias] = given[alias];
  }
  if (missing !== null && !leadingSubset) {
    throw badRequest(
      `dimension has no value for ${quote(missing)} of calculation ${row.code}`,
      `Give a value for each of its dimensions: ${declared.join(', ')}.`,
    );
  }
  return { key: dimensionKey(values), named, complete: missing === null };
}

const PERIOD = /^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$/;

/** A "YYYY", "YYYY-MM" or "YYYY-MM-DD" text, checked to be a real date. */
function parsePeriod(text: unknown, what: string): { year: string; month?: string; day?: string } {
  const m = typeof text === 'string' ? PERIOD.exec(text) : null;
  const year = m?.[1];
  const month = m?.[2];
  const day = m?.[3];
  let valid = !!m;
  if (valid && month !== undefined) valid = Number(month) >= 1 && Number(month) <= 12;
  if (valid && day !== undefined) {
    const d = new Date(`${year}-${month}-${day}T00:00:00Z`);
    valid = !Number.isNaN(d.getTime()) && d.toISOString().slice(0, 10) === `${year}-${month}-${day}`;
  }
  if (!valid || year === '0000') {
    throw badRequest(
      `${what} ${quote(text)} is not a period YYYY, YYYY-MM or YYYY-MM-DD`,
      'Write e.g. "2024", "2024-02" or "2024-02-15".',
    );
  }
  return { year: year!, month, day };
}

/** A date for a range bound: a partial one means its first day. */
function boundDate(text: unknown, what: string): string {
  const p = parsePeriod(text, what);
  return `${p.year}-${p.month ?? '01'}-${p.day ?? '01'}`;
}

function daysIn(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

const pad = (n: number, width = 2) => String(n).padStart(width, '0');

/** Aggregated reads: the sum of the records read, each amount at the largest scale found among them. */
class Sum {
  rows = 0;
  private scale = 0;
  private readonly totals: Record<Column, Dec> = Object.fromEntries(COLUMNS.map((c) => [c, new Dec(0)])) as Record<
    Column,
    Dec
  >;
  private version = 0;
  private last: CalculationBalanceRow | null = null;
  private first: string | null = null;

  add(rows: readonly CalculationBalanceRow[]): void {
    for (const row of rows) {
      this.rows++;
      for (const c of COLUMNS) {
        this.scale = Math.max(this.scale, scaleOf(row[c]));
        this.totals[c] = this.totals[c].plus(row[c]);
      }
      this.version += row.version;
      if (!this.last || row.modified > this.last.modified) this.last = row;
      if (this.first === null || row.created < this.first) this.first = row.created;
    }
  }

  balance(
    q: { accountId: string; journalId: string; currency: string },
    calculationId: string,
    dimensions: Record<string, unknown>,
  ): Balance {
    if (this.rows === 0) return emptyCalcBalance(q, calculationId, dimensions);
    const t = (c: Column) => withScale(this.totals[c], this.scale);
    return {
      accountId: q.accountId,
      journalId: q.journalId,
      currency: q.currency,
      layers: {
        SETTLED: { dr: t('settled_dr'), cr: t('settled_cr') },
        PENDING: { dr: t('pending_dr'), cr: t('pending_cr') },
        ENCUMBRANCE: { dr: t('encumbrance_dr'), cr: t('encumbrance_cr') },
      },
      entryId: this.last!.entry_id,
      version: this.version,
      created: this.first,
      modified: this.last!.modified,
      calculationId,
      dimensions,
    };
  }
}

/** One calculation balance: the parent's running totals, one effective period, or a sum of periods. */
export function readCalculationBalance(deps: LedgerDeps, q: CalculationBalanceQuery): Balance {
  const row = calculationRow(deps, q.calculationId);
  const dims = dimensionValues(row, q.dimension, false);
  if (row.parent_id !== null) {
    throw badRequest(
      `calculation ${row.code} is the ${row.granularity} child of ${row.parent_id}`,
      `Read ${row.parent_id} with effective: {period: ...} instead.`,
    );
  }
  const base = [row.calculation_id, q.accountId, q.journalId, q.currency, dims.key] as const;
  const effective = q.effective;
  if (effective == null) {
    const found = deps.calc.balance.get(...base, '');
    return found ? toCalcBalance(found) : emptyCalcBalance(q, row.calculation_id, dims.named);
  }
  if (!isEffective(row)) {
    throw badRequest(
      'failed to resolve effective calculation: calculation does not have enable_effective set',
      `Calculation ${row.code} was created without config.enableEffectiveBalances: read it without effective, or create one with it.`,
    );
  }
  const given = (['period', 'range', 'cumulative'] as const).filter((k) => effective[k] != null);
  if (given.length !== 1)
    throw badRequest(
      `effective takes exactly one of period, range or cumulative, got ${given.length ? given.join(', ') : 'none'}`,
    );
  const childId = (g: Granularity) => childCalculationId(row.calculation_id, g);
  const key = (g: Granularity): [string, string, string, string, string] => [
    childId(g),
    q.accountId,
    q.journalId,
    q.currency,
    dims.key,
  ];

  if (effective.period != null) {
    const p = parsePeriod(effective.period, 'effective.period');
    const granularity: Granularity = p.day !== undefined ? 'DAY' : p.month !== undefined ? 'MONTH' : 'YEAR';
    const period = [p.year, p.month, p.day].filter((x) => x !== undefined).join('-');
    const found = deps.calc.balance.get(...key(granularity), period);
    if (found) return toCalcBalance(found);
    const named: Record<string, unknown> = { ...dims.named, year: Number(p.year) };
    if (p.month !== undefined) named.month = Number(p.month);
    if (p.day !== undefined) named.day = Number(p.day);
    return emptyCalcBalance(q, childId(granularity), named);
  }

  const sum = new Sum();
  /** The first string after period `d` (periods are digits and dashes; \u0001, since PostgreSQL's text cannot hold \u0000). */
  const next = (d: string) => `${d}\u0001`;
  /** Periods of one granularity in [from, to). */
  const scan = (g: Granularity, from: string, to: string) => {
    if (from < to) sum.add(deps.calc.periods.all(...key(g), from, to));
  };
  /** Every day in [a, b] (dates YYYY-MM-DD), as few records as the calendar allows. */
  const days = (a: string, b: string) => {
    if (a > b) return;
    const [ay, am] = [Number(a.slice(0, 4)), Number(a.slice(5, 7))];
    const [by, bm] = [Number(b.slice(0, 4)), Number(b.slice(5, 7))];
    if (ay === by && am === bm) return scan('DAY', a, next(b));
    scan('DAY', a, next(`${pad(ay, 4)}-${pad(am)}-${pad(daysIn(ay, am))}`));
    // Whole months after a's month and before b's month.
    const monthAfterA = am === 12 ? `${pad(ay + 1, 4)}-01` : `${pad(ay, 4)}-${pad(am + 1)}`;
    const bMonth = `${pad(by, 4)}-${pad(bm)}`;
    if (ay === by) scan('MONTH', monthAfterA, bMonth);
    else {
      scan('MONTH', monthAfterA, `${pad(ay, 4)}-13`);
      scan('YEAR', pad(ay + 1, 4), pad(by, 4));
      scan('MONTH', `${pad(by, 4)}-01`, bMonth);
    }
    scan('DAY', `${bMonth}-01`, next(b));
  };
  if (effective.cumulative != null) {
    const d = parsePeriod(effective.cumulative, 'effective.cumulative');
    if (d.day === undefined)
      throw badRequest(`effective.cumulative ${quote(effective.cumulative)} is not a date YYYY-MM-DD`);
    const date = `${d.year}-${d.month}-${d.day}`;
    scan('YEAR', '', d.year);
    scan('MONTH', `${d.year}-01`, `${d.year}-${d.month}`);
    scan('DAY', `${d.year}-${d.month}-01`, next(date));
  } else {
    const range = effective.range!;
    const from = range.gte == null ? '0001-01-01' : boundDate(range.gte, 'effective.range.gte');
    const to = range.lte == null ? '9999-12-31' : boundDate(range.lte, 'effective.range.lte');
    if (from > to)
      throw badRequest(`effective.range.gte ${quote(range.gte)} is after effective.range.lte ${quote(range.lte)}`);
    days(from, to);
  }
  return sum.balance(q, row.calculation_id, dims.named);
}

export interface CalculationBalancesQuery {
  calculationId: string;
  accountId: string;
  journalId: string;
  currency: string;
  dimension?: unknown;
  first: number;
  after?: string | null;
}

/**
 * A calculation's balance records of one account or set in one journal and currency, in dimension
 * order (and period order for a child), optionally those of a leading subset of its dimensions:
 * a primary-key range scan.
 */
export function listCalculationBalances(deps: LedgerDeps, q: CalculationBalancesQuery): Connection<Balance> {
  const row = calculationRow(deps, q.calculationId);
  const dims = dimensionValues(row, q.dimension, true);
  const req = pageRequest<string>(
    q.first,
    q.after,
    deps.limits.pageSizeMax,
    'string',
    `calculation-balances ${row.calculation_id}`,
  );
  const keyTo = `${dims.key}\u{10FFFF}`;
  let rows: CalculationBalanceRow[];
  if (req.after === undefined) {
    rows = deps.calc.balancesPage.all(
      row.calculation_id,
      q.accountId,
      q.journalId,
      q.currency,
      dims.key,
      keyTo,
      '',
      '',
      req.fetch,
    );
    // The cursor condition (key, period) > ('', '') skips the record of no dimensions and no period.
    if (dims.key === '') {
      const first = deps.calc.balance.get(row.calculation_id, q.accountId, q.journalId, q.currency, '', '');
      if (first) rows = [first, ...rows].slice(0, req.fetch);
    }
  } else {
    let cursor: [string, string];
    try {
      cursor = JSON.parse(req.after) as [string, string];
      if (!Array.isArray(cursor) || typeof cursor[0] !== 'string' || typeof cursor[1] !== 'string')
        throw new Error('shape');
    } catch {
      throw badRequest(
        `cursor ${quote(q.after)} is not a cursor this connection gave out`,
        'Pass pageInfo.endCursor from the previous page as `after`.',
      );
    }
    rows = deps.calc.balancesPage.all(
      row.calculation_id,
      q.accountId,
      q.journalId,
      q.currency,
      dims.key,
      keyTo,
      cursor[0],
      cursor[1],
      req.fetch,
    );
  }
  return toConnection(
    rows,
    req,
    (r) => JSON.stringify([r.dimension_key, r.period]),
    (r) => toCalcBalance(r),
  );
}
