import { celError, checkCelValueSize } from '../cel/cel.js';
import { isBudgetError } from '../cel/cost.js';
import { celToJson } from '../cel/values.js';
import { addText } from '../decimal.js';
import { EngineError } from '../errors.js';
import type { CalculationRow } from '../storage/statements/calculations.js';
import {
  BALANCE_COLUMNS,
  balanceColumnIndex,
  type EntryRow,
  type TransactionRow,
} from '../storage/statements/ledger.js';
import type { CalculationScope, Dimension, Granularity } from './calculations.js';
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
import { ownersOf, type Posted } from './posted.js';

/**
 * Calculation balances kept up to date entry by entry: the ACTIVE definitions compiled and held for
 * the cache epoch, each entry's dimension values and key, and the sums written with one upsert per
 * balance record. A posting applies its entries here (applyCalculations); so does a backfill.
 */

type Compiled = (context?: Record<string, unknown>) => unknown;

export interface Definition {
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

export function definitionOf(deps: LedgerDeps, row: CalculationRow, children: readonly CalculationRow[]): Definition {
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

/** Sums per calculation balance record, written with one upsert each. */
export class Deltas {
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
export function dimensionKey(values: readonly unknown[]): string {
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

export function applyEntry(deps: LedgerDeps, def: Definition, ec: EntryContext, scope: Scope, deltas: Deltas): void {
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
