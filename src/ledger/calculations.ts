/**
 * Calculations as records: their definitions and effective-date children, created, locked,
 * attached and detached. Keeping their balances is calculation-updates.ts (and -backfill.ts);
 * reading them, calculation-balances.ts.
 *
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
import { alreadyExists, EngineError, limitExceeded, notFound, quote } from '../errors.js';
import { nameBasedUuid } from '../ids.js';
import { isReservedKey } from '../json.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { CalculationRow } from '../storage/statements/calculations.js';
import { balanceOwner } from './account-sets.js';
import { backfill } from './calculation-backfill.js';
import { definitionOf } from './calculation-updates.js';
import type { LedgerDeps } from './deps.js';
import { DEFAULT_JOURNAL_ID, getJournal } from './journals.js';

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

export function calculationRow(deps: LedgerDeps, id: string): CalculationRow {
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

export function isEffective(row: CalculationRow): boolean {
  return (
    row.config !== null &&
    (JSON.parse(row.config) as { enableEffectiveBalances?: boolean }).enableEffectiveBalances === true
  );
}

// ---------------------------------------------------------------------------------------------
// Create, delete, attach, detach

export function badRequest(message: string, hint?: string): EngineError {
  return new EngineError('BAD_REQUEST', message, hint ? { hint } : {});
}

export function checkDimensionName(alias: string): void {
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
