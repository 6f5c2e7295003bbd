import { EngineError } from '../../errors.js';
import type { Balance } from '../../ledger/balances.js';
import * as calculations from '../../ledger/calculations.js';
import type { Calculation } from '../../ledger/calculations.js';
import { listCalculationBalances, readCalculationBalance } from '../../ledger/calculation-balances.js';
import { DEFAULT_JOURNAL_ID } from '../../ledger/journals.js';
import type { Direction } from '../../ledger/records.js';
import type { RequestContext } from '../context.js';
import { guard, visible } from './guard.js';

type Args = Record<string, any>;
type Resolver<P = unknown> = (parent: P, args: Args, ctx: RequestContext) => unknown;

const C = 'financial.Calculation';
const B = 'financial.Balance';

/** What the Balance type's resolvers take (see BalanceView in ./ledger.ts). */
export interface CalculationBalanceView {
  balance: Balance;
  normalBalanceType: Direction;
}

/** The account or set a calculation balance belongs to, and the journal it is read in. */
function ownerOf(ctx: RequestContext, accountId: string, journalId: string | null | undefined) {
  const owner = ctx.ledger.balanceOwner(accountId);
  if (journalId) ctx.ledger.getJournal(journalId);
  const journal = journalId ?? (owner.isSet ? (owner.journalId ?? DEFAULT_JOURNAL_ID) : DEFAULT_JOURNAL_ID);
  return { owner, journal };
}

/**
 * Query.balance with calculationId, dimension or effective (./ledger.ts delegates here): one
 * calculation balance, read under financial.Balance.
 */
export function calculationBalance(ctx: RequestContext, args: Args): CalculationBalanceView {
  const { accountId, journalId, currency, calculationId, dimension, effective } = args;
  if (!calculationId) {
    throw new EngineError(
      'BAD_REQUEST',
      `balance takes ${dimension != null ? 'dimension' : 'effective'} only with a calculationId`,
      {
        hint: 'Effective-date and dimensional balances are kept by calculations: create one (createCalculation) and pass its calculationId.',
      },
    );
  }
  const { owner, journal } = ownerOf(ctx, accountId, journalId);
  const cur = currency ?? 'USD';
  const deps = ctx.ledger.deps;
  guard(ctx, 'SELECT', B, {
    accountId: owner.id,
    journalId: journal,
    currency: cur,
    calculationId,
    dimension: dimension ?? null,
  });
  const balance = readCalculationBalance(deps, {
    accountId: owner.id,
    journalId: journal,
    currency: cur,
    calculationId,
    dimension,
    effective,
  });
  return { balance, normalBalanceType: owner.normalBalanceType };
}

const query: Record<string, Resolver> = {
  calculation: (_, { calculationId }, ctx) =>
    guard(ctx, 'SELECT', C, calculations.getCalculation(ctx.ledger.deps, calculationId)),
  calculations: (_, { first, after }, ctx) =>
    visible(ctx, C, calculations.listCalculations(ctx.ledger.deps, first, after)),
  balances: (_, { index, where, first, after }, ctx) => {
    if (index?.name !== 'CALCULATION')
      throw new EngineError('BAD_REQUEST', `balances index ${String(index?.name)} is not supported`, {
        hint: 'Use index: {name: CALCULATION}.',
      });
    if (!where.calculationId) {
      throw new EngineError('BAD_REQUEST', 'balances by the CALCULATION index need where.calculationId', {
        hint: "An account's own balances are Account.balances.",
      });
    }
    const { owner, journal } = ownerOf(ctx, where.accountId, where.journalId);
    const currency = where.currency ?? 'USD';
    const page = listCalculationBalances(ctx.ledger.deps, {
      calculationId: where.calculationId,
      accountId: owner.id,
      journalId: journal,
      currency,
      dimension: where.dimension,
      first,
      after,
    });
    const shown = visible(ctx, B, page, (b) => ({
      accountId: b.accountId,
      journalId: b.journalId,
      currency: b.currency,
      calculationId: b.calculationId,
      dimension: b.dimensions,
    }));
    const view = (balance: Balance): CalculationBalanceView => ({
      balance,
      normalBalanceType: owner.normalBalanceType,
    });
    return {
      ...shown,
      nodes: shown.nodes.map(view),
      edges: shown.edges.map((e) => ({ cursor: e.cursor, node: view(e.node) })),
    };
  },
};

const mutation: Record<string, Resolver> = {
  createCalculation: (_, { input }, ctx) =>
    calculations.createCalculation(ctx.ledger.deps, guard(ctx, 'INSERT', C, input)),
  deleteCalculation: (_, { id }, ctx) => {
    guard(ctx, 'DELETE', C, calculations.getCalculation(ctx.ledger.deps, id));
    return calculations.deleteCalculation(ctx.ledger.deps, id);
  },
  attachCalculation: (_, { input }, ctx) => {
    guard(ctx, 'UPDATE', C, {
      ...calculations.getCalculation(ctx.ledger.deps, input.calculationId),
      attachment: input,
    });
    return calculations.attachCalculation(ctx.ledger.deps, input);
  },
  detachCalculation: (_, { input }, ctx) => {
    guard(ctx, 'UPDATE', C, {
      ...calculations.getCalculation(ctx.ledger.deps, input.calculationId),
      attachment: input,
    });
    return calculations.detachCalculation(ctx.ledger.deps, input);
  },
};

export const calculationResolvers = {
  Query: query,
  Mutation: mutation,
  Calculation: {
    children: (c: Calculation, _: Args, ctx: RequestContext) =>
      calculations.childrenOf(ctx.ledger.deps, c.calculationId),
  },
  AttachedCalculation: {
    calculation: (a: calculations.Attachment, _: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', C, calculations.getCalculation(ctx.ledger.deps, a.calculationId)),
  },
};
