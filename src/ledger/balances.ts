import { Dec, ZERO } from '../decimal.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { BalanceColumn, BalanceRow } from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import type { Direction, Layer } from './records.js';

export interface LayerTotals {
  dr: Dec;
  cr: Dec;
}

/** One balance record: an account × journal × currency, with debit and credit totals per layer. */
export interface Balance {
  accountId: string;
  journalId: string;
  currency: string;
  layers: Record<Layer, LayerTotals>;
  entryId: string | null;
  version: number;
  created: string | null;
  modified: string | null;
}

export function toBalance(row: BalanceRow): Balance {
  return {
    accountId: row.account_id,
    journalId: row.journal_id,
    currency: row.currency,
    layers: {
      SETTLED: { dr: new Dec(row.settled_dr), cr: new Dec(row.settled_cr) },
      PENDING: { dr: new Dec(row.pending_dr), cr: new Dec(row.pending_cr) },
      ENCUMBRANCE: { dr: new Dec(row.encumbrance_dr), cr: new Dec(row.encumbrance_cr) },
    },
    entryId: row.entry_id,
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

export function emptyBalance(accountId: string, journalId: string, currency: string): Balance {
  const zero = () => ({ dr: ZERO, cr: ZERO });
  return {
    accountId,
    journalId,
    currency,
    layers: { SETTLED: zero(), PENDING: zero(), ENCUMBRANCE: zero() },
    entryId: null,
    version: 0,
    created: null,
    modified: null,
  };
}

/** O(1) whatever the number of entries: one primary-key read of the running totals. */
export function readBalance(deps: LedgerDeps, accountId: string, journalId: string, currency: string): Balance {
  const row = deps.st.balance.get(accountId, journalId, currency);
  return row ? toBalance(row) : emptyBalance(accountId, journalId, currency);
}

export function listBalances(deps: LedgerDeps, accountId: string, first: number, after?: string | null): Connection<Balance> {
  const req = pageRequest<string>(first, after, deps.limits.pageSizeMax, 'string', 'balances');
  const rows = deps.st.balancesByAccountPage.all(accountId, req.after ?? '', req.fetch);
  return toConnection(rows, req, (r) => `${r.journal_id} ${r.currency}`, toBalance);
}

/** Totals of one layer, or cumulative totals up to it (available). */
export function layerTotals(balance: Balance, layer: Layer, cumulative: boolean): LayerTotals {
  if (!cumulative) return balance.layers[layer];
  const order: Layer[] = ['SETTLED', 'PENDING', 'ENCUMBRANCE'];
  let dr = ZERO;
  let cr = ZERO;
  for (const l of order.slice(0, order.indexOf(layer) + 1)) {
    dr = dr.plus(balance.layers[l].dr);
    cr = cr.plus(balance.layers[l].cr);
  }
  return { dr, cr };
}

/** Debit-normal accounts (assets, expenses) count DR − CR; credit-normal ones CR − DR. */
export function normalBalance(totals: LayerTotals, normalBalanceType: Direction): Dec {
  return normalBalanceType === 'DEBIT' ? totals.dr.minus(totals.cr) : totals.cr.minus(totals.dr);
}

export interface BalanceDelta {
  accountId: string;
  journalId: string;
  currency: string;
  layer: Layer;
  direction: Direction;
  units: Dec;
  entryId: string;
}

/**
 * Apply a transaction's entries to the running balances: the entries are summed per balance record
 * and layer here, and each record gets one upsert that adds those sums to its stored totals.
 */
export function applyToBalances(deps: LedgerDeps, deltas: readonly BalanceDelta[], modified: string): void {
  const sums = new Map<string, { delta: BalanceDelta; totals: Record<string, Dec> }>();
  for (const delta of deltas) {
    const key = `${delta.accountId} ${delta.journalId} ${delta.currency}`;
    let sum = sums.get(key);
    if (!sum) {
      sum = { delta, totals: {} };
      sums.set(key, sum);
    }
    const column = `${delta.layer.toLowerCase()}_${delta.direction === 'DEBIT' ? 'dr' : 'cr'}`;
    sum.totals[column] = (sum.totals[column] ?? ZERO).plus(delta.units);
    sum.delta = delta;
  }
  for (const { delta, totals } of sums.values()) {
    const columns = Object.keys(totals);
    if (columns.length === 1) {
      const column = columns[0] as BalanceColumn;
      deps.st.addToBalanceColumn[column].run(delta.accountId, delta.journalId, delta.currency, totals[column]!.toFixed(), delta.entryId, modified, modified);
      continue;
    }
    const text = (column: string) => totals[column]?.toFixed() ?? '0';
    deps.st.addToBalance.run({
      account_id: delta.accountId,
      journal_id: delta.journalId,
      currency: delta.currency,
      settled_dr: text('settled_dr'),
      settled_cr: text('settled_cr'),
      pending_dr: text('pending_dr'),
      pending_cr: text('pending_cr'),
      encumbrance_dr: text('encumbrance_dr'),
      encumbrance_cr: text('encumbrance_cr'),
      entry_id: delta.entryId,
      modified,
    });
  }
}
