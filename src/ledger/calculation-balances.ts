import { Dec, scaleOf, withScale } from '../decimal.js';
import { quote } from '../errors.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { CalculationBalanceRow, CalculationRow } from '../storage/statements/calculations.js';
import { BALANCE_COLUMNS, type BalanceColumn } from '../storage/statements/ledger.js';
import { type Balance, toBalance } from './balances.js';
import { dimensionKey } from './calculation-updates.js';
import {
  badRequest,
  calculationRow,
  checkDimensionName,
  childCalculationId,
  type Dimension,
  type Granularity,
  isEffective,
  RESERVED_DIMENSIONS,
} from './calculations.js';
import type { LedgerDeps } from './deps.js';

/**
 * Reading calculation balances: one record (the running totals, or one effective period), a sum of
 * effective periods (a range, or cumulative to a date) as few records as the calendar allows, and
 * a page of records by a leading subset of the dimensions.
 */

const COLUMNS = BALANCE_COLUMNS;
type Column = BalanceColumn;

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
