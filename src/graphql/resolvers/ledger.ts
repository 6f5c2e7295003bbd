import { EngineError } from '../../errors.js';
import { type Balance, layerTotals, normalBalance } from '../../ledger/balances.js';
import { DEFAULT_JOURNAL_ID } from '../../ledger/journals.js';
import type { Account, AccountSet, Direction, Entry, Layer, Transaction } from '../../ledger/records.js';
import type { TranCode } from '../../ledger/tran-codes.js';
import type { WriteKind, Writer } from '../../ledger/velocity-gate.js';
import { entriesByIndex, transactionsByIndex } from '../../ledger/indexes.js';
import { getIndex } from '../../ledger/views.js';
import { evaluateCel, evaluateDocument } from '../evaluate.js';
import { calculationBalance } from './calculations.js';
import { guard, visible } from './guard.js';
import type { RequestContext } from '../context.js';

type Args = Record<string, any>;
type Resolver<P = unknown> = (parent: P, args: Args, ctx: RequestContext) => unknown;

/** A balance together with the normal side of its account, which normalBalance needs. */
interface BalanceView {
  balance: Balance;
  normalBalanceType: Direction;
}

/** Amounts as stored: exact text with the scale they were posted with (see scaleOf in src/decimal.ts). */
function money(units: string, currency: string) {
  return { units, currency };
}

function amounts(view: BalanceView, layer: Layer, cumulative: boolean) {
  const totals = layerTotals(view.balance, layer, cumulative);
  const currency = view.balance.currency;
  return {
    drBalance: money(totals.dr, currency),
    crBalance: money(totals.cr, currency),
    normalBalance: money(normalBalance(totals, view.normalBalanceType), currency),
  };
}

function balanceOf(
  ctx: RequestContext,
  account: Account,
  journalId: string | null | undefined,
  currencyArg: string | null,
  asOf?: string | null,
): BalanceView {
  // An explicit null means the default, as leaving it out does.
  const currency = currencyArg ?? 'USD';
  const journal = journalId ?? DEFAULT_JOURNAL_ID;
  if (journalId) ctx.ledger.getJournal(journalId);
  guard(ctx, 'SELECT', 'financial.Balance', balanceDocument({ account }, journal, currency));
  const balance = asOf
    ? ctx.ledger.balanceAsOf({ id: account.accountId, isSet: false }, journal, currency, asOf)
    : ctx.ledger.readBalance(account.accountId, journal, currency);
  return { balance, normalBalanceType: account.normalBalanceType };
}

/** A set's rolled-up balance: in its own journal unless another is named (where it has none). */
function setBalanceOf(
  ctx: RequestContext,
  set: AccountSet,
  journalId: string | null | undefined,
  currencyArg: string | null,
  asOf?: string | null,
): BalanceView {
  const currency = currencyArg ?? 'USD';
  const journal = journalId ?? set.journalId;
  if (journalId) ctx.ledger.getJournal(journalId);
  guard(ctx, 'SELECT', 'financial.Balance', balanceDocument({ accountSet: set }, journal, currency));
  const balance = asOf
    ? ctx.ledger.balanceAsOf({ id: set.accountSetId, isSet: true }, journal, currency, asOf)
    : ctx.ledger.readBalance(set.accountSetId, journal, currency);
  return { balance, normalBalanceType: set.normalBalanceType };
}

function balancesPage(
  ctx: RequestContext,
  id: string,
  normalBalanceType: Direction,
  first: number,
  after: string | null | undefined,
  owner: Record<string, unknown>,
) {
  const page = visible(ctx, 'financial.Balance', ctx.ledger.listBalances(id, first, after), (b) => ({
    accountId: b.accountId,
    journalId: b.journalId,
    currency: b.currency,
    ...owner,
  }));
  const view = (balance: Balance): BalanceView => ({ balance, normalBalanceType });
  return {
    ...page,
    nodes: page.nodes.map(view),
    edges: page.edges.map((e) => ({ cursor: e.cursor, node: view(e.node) })),
  };
}

const AS = 'financial.AccountSet';
const ASM = 'financial.AccountSetMember';

/** UPDATE on a set's member as it is: an account (financial.Account) or a set (financial.AccountSet). */
function guardMember(ctx: RequestContext, member: { memberType?: string; memberId?: string } | null | undefined): void {
  if (!member?.memberId) return;
  const owner = ctx.ledger.balanceOwner(member.memberId);
  if (owner.isSet) guard(ctx, 'UPDATE', AS, ctx.ledger.getAccountSet(member.memberId));
  else guard(ctx, 'UPDATE', 'financial.Account', ctx.ledger.getAccount({ id: member.memberId }));
}

/** The same UPDATE on whatever account or set a velocity control is attached to, exported for its resolvers. */
export const guardAccountOrSet = (ctx: RequestContext, accountId: string) => guardMember(ctx, { memberId: accountId });

const J = 'financial.Journal';
const A = 'financial.Account';
const TC = 'financial.TranCode';
const T = 'financial.Transaction';
const E = 'financial.Entry';

/** Posting writes entries and balances too: the stack must allow those writes as well. */
function postingGuard(ctx: RequestContext) {
  return (
    entries: ReadonlyArray<{
      accountId: string;
      journalId: string;
      currency: string;
      layer: string;
      direction: string;
      units: string;
    }>,
  ) => {
    const balances = new Set<string>();
    for (const entry of entries) {
      guard(ctx, 'INSERT', E, entry);
      const key = `${entry.accountId} ${entry.journalId} ${entry.currency}`;
      if (!balances.has(key)) {
        balances.add(key);
        guard(ctx, 'UPDATE', 'financial.Balance', {
          accountId: entry.accountId,
          journalId: entry.journalId,
          currency: entry.currency,
        });
      }
    }
  };
}

const query: Record<string, Resolver> = {
  journal: (_, { id }, ctx) => guard(ctx, 'SELECT', J, ctx.ledger.getJournal(id ?? DEFAULT_JOURNAL_ID)),
  journals: (_, { first, after }, ctx) => visible(ctx, J, ctx.ledger.listJournals(first, after)),
  account: (_, { id, code }, ctx) => {
    if (id && code)
      throw new EngineError('BAD_REQUEST', 'account takes an id or a code, not both', { hint: 'Pass one of them.' });
    return guard(ctx, 'SELECT', A, ctx.ledger.getAccount({ id, code }));
  },
  accounts: (_, { first, after, where }, ctx) =>
    visible(ctx, A, ctx.ledger.listAccounts({ first, after, status: where?.status })),
  tranCode: (_, { id, code, version }, ctx) => guard(ctx, 'SELECT', TC, ctx.ledger.getTranCode({ id, code, version })),
  tranCodes: (_, { first, after }, ctx) => visible(ctx, TC, ctx.ledger.listTranCodes(first, after)),
  transaction: (_, { id }, ctx) => guard(ctx, 'SELECT', T, ctx.ledger.getTransaction(id)),
  transactions: (_, { first, after, where }, ctx) => {
    if (where?.custom) {
      if (where.correlationId != null || where.journalId != null) {
        throw new EngineError('BAD_REQUEST', 'transactions takes where.custom alone', {
          hint: 'Put the other conditions in the custom index (partition, sort, constraints).',
        });
      }
      guard(ctx, 'SELECT', 'financial.Index', getIndex(ctx.ledger.deps, where.custom.index, 'Transaction'));
      return visible(ctx, T, transactionsByIndex(ctx.ledger.deps, where.custom, first, after));
    }
    return visible(
      ctx,
      T,
      ctx.ledger.listTransactions({ first, after, correlationId: where?.correlationId, journalId: where?.journalId }),
    );
  },
  entry: (_, { id }, ctx) => guard(ctx, 'SELECT', E, ctx.ledger.getEntry(id)),
  entries: (_, { first, after, where }, ctx) => {
    if (where.custom) {
      if (where.accountId || where.transactionId || where.journalId || where.currency) {
        throw new EngineError('BAD_REQUEST', 'entries takes where.custom alone', {
          hint: 'Put the other conditions in the custom index (partition, sort, constraints).',
        });
      }
      guard(ctx, 'SELECT', 'financial.Index', getIndex(ctx.ledger.deps, where.custom.index, 'Entry'));
      return visible(ctx, E, entriesByIndex(ctx.ledger.deps, where.custom, first, after));
    }
    if (where.accountId && where.transactionId) {
      throw new EngineError('BAD_REQUEST', 'entries takes where.accountId or where.transactionId, not both', {
        hint: "Read the transaction's entries, and keep those of the account.",
      });
    }
    if (where.transactionId && (where.journalId || where.currency)) {
      throw new EngineError('BAD_REQUEST', 'entries of a transaction cannot be filtered by journalId or currency', {
        hint: 'A transaction has at most entriesPerTransactionMax entries: filter them on the client.',
      });
    }
    if (where.accountId) {
      return visible(
        ctx,
        E,
        ctx.ledger.entriesOfAccount({
          accountId: where.accountId,
          first,
          after,
          journalId: where.journalId,
          currency: where.currency,
        }),
      );
    }
    if (where.transactionId) return visible(ctx, E, ctx.ledger.entriesOfTransaction(where.transactionId, first, after));
    throw new EngineError('BAD_REQUEST', 'entries needs where.accountId or where.transactionId', {
      hint: 'Entries are read through an account or a transaction index.',
    });
  },
  balance: (_, args, ctx) => {
    const { accountId, journalId, currency } = args;
    if (args.calculationId != null || args.dimension != null || args.effective != null)
      return calculationBalance(ctx, args);
    const owner = ctx.ledger.balanceOwner(accountId);
    return owner.isSet
      ? setBalanceOf(ctx, ctx.ledger.getAccountSet(accountId), journalId, currency)
      : balanceOf(ctx, ctx.ledger.getAccount({ id: accountId }), journalId, currency);
  },
  accountSet: (_, { id }, ctx) => guard(ctx, 'SELECT', AS, ctx.ledger.getAccountSet(id)),
  accountSets: (_, { first, after }, ctx) => visible(ctx, AS, ctx.ledger.listAccountSets(first, after)),
};

const mutation: Record<string, Resolver> = {
  queries: () => ({}),
  createJournal: (_, { input }, ctx) => ctx.ledger.createJournal(guard(ctx, 'INSERT', J, input)),
  updateJournal: (_, { id, input }, ctx) => {
    guard(ctx, 'UPDATE', J, ctx.ledger.getJournal(id));
    return ctx.ledger.updateJournal(id, input);
  },
  createAccount: (_, { input }, ctx) => {
    guard(ctx, 'INSERT', A, input);
    for (const setId of input.accountSetIds ?? [])
      guard(ctx, 'INSERT', ASM, { accountSetId: setId, memberId: input.accountId, memberType: 'ACCOUNT' });
    return ctx.ledger.createAccount(input);
  },
  updateAccount: (_, { id, input }, ctx) => {
    // The record as it is decides (an assertion on context.document sees its current metadata).
    guard(ctx, 'UPDATE', A, ctx.ledger.getAccount({ id }));
    return ctx.ledger.updateAccount(id, input);
  },
  createAccountSet: (_, { input }, ctx) => {
    guard(ctx, 'INSERT', AS, input);
    for (const parent of input.accountSetIds ?? [])
      guard(ctx, 'INSERT', ASM, { accountSetId: parent, memberId: input.accountSetId, memberType: 'ACCOUNT_SET' });
    return ctx.ledger.createAccountSet(input);
  },
  updateAccountSet: (_, { id, input }, ctx) => {
    guard(ctx, 'UPDATE', AS, ctx.ledger.getAccountSet(id));
    return ctx.ledger.updateAccountSet(id, input);
  },
  deleteAccountSet: (_, { id }, ctx) => {
    guard(ctx, 'DELETE', AS, ctx.ledger.getAccountSet(id));
    return ctx.ledger.deleteAccountSet(id);
  },
  // Membership changes what the member rolls up into (its balance shows in the set, the set's
  // velocity controls then limit its postings): the stack must be allowed to change the member too.
  addToAccountSet: (_, { id, member }, ctx) => {
    guard(ctx, 'INSERT', ASM, { accountSetId: id, ...member, accountSet: ctx.ledger.getAccountSet(id) });
    guardMember(ctx, member);
    return gated(ctx, 'membership', (writer) => ctx.ledger.addToAccountSet(id, member, writer));
  },
  removeFromAccountSet: (_, { id, member }, ctx) => {
    guard(ctx, 'DELETE', ASM, { accountSetId: id, ...member, accountSet: ctx.ledger.getAccountSet(id) });
    guardMember(ctx, member);
    return gated(ctx, 'membership', (writer) => ctx.ledger.removeFromAccountSet(id, member, writer));
  },
  createTranCode: (_, { input }, ctx) => ctx.ledger.createTranCode(guard(ctx, 'INSERT', TC, input)),
  updateTranCode: (_, { id, input }, ctx) => {
    guard(ctx, 'UPDATE', TC, ctx.ledger.getTranCode({ id }));
    return ctx.ledger.updateTranCode(id, input);
  },
  lockTranCode: (_, { id }, ctx) => {
    guard(ctx, 'UPDATE', TC, ctx.ledger.getTranCode({ id }));
    return ctx.ledger.lockTranCode(id);
  },
  postTransaction: (_, { input }, ctx) => {
    guard(ctx, 'INSERT', T, input);
    guardOverride(ctx, input?.properties, { transactionId: input.transactionId, tranCode: input.tranCode });
    return gated(ctx, 'post', (writer) => ctx.ledger.postTransaction(input, postingGuard(ctx), writer));
  },
  voidTransaction: (_, { id, properties }, ctx) => {
    const original = ctx.ledger.getTransaction(id);
    guard(ctx, 'UPDATE', T, original);
    guard(ctx, 'INSERT', T, original);
    guardOverride(ctx, properties, { transactionId: id, voidOf: id });
    return gated(ctx, 'void', (writer) => ctx.ledger.voidTransaction(id, postingGuard(ctx), { properties, writer }));
  },
  evaluate: (_, args, ctx) => {
    // Running CEL is running the native cel tool: the same policy allows (or refuses) both.
    guard(ctx, 'INSERT', 'actions.Execution', evaluateDocument(args));
    return evaluateCel(ctx.cel, args as Parameters<typeof evaluateCel>[1], ctx.limits.celValueSizeMax);
  },
};

/**
 * Lowering every velocity control of a write (an override, or an exception that posts and voids) is
 * a power over the controls, not over the write: UPDATE on financial.VelocityControl, whatever the
 * write (a post, a void).
 */
function guardOverride(
  ctx: RequestContext,
  properties: { overrideVelocityEnforcement?: unknown; exception?: unknown } | null | undefined,
  document: Record<string, unknown>,
): void {
  if (properties?.overrideVelocityEnforcement != null || properties?.exception != null) {
    guard(ctx, 'UPDATE', 'financial.VelocityControl', { ...document, properties });
  }
}

/**
 * Every write a client (or a tool, a trigger) sends that moves a balance: the posting gate judges it
 * (src/ledger/velocity-gate.ts decide) knowing who writes (may they read the balances, is it a dry
 * run); a refusal is logged (who asked, which control on which account or set; never a balance)
 * and shows the violating balance only to a stack that may read it.
 */
function gated<T>(ctx: RequestContext, write: WriteKind, run: (writer: Writer) => T): T {
  const writer: Writer = {
    dryRun: ctx.dryRun,
    mayRead: (accountId, journalId, currency) => mayReadBalance(ctx, accountId, journalId, currency),
  };
  try {
    return run(writer);
  } catch (error) {
    if (!(error instanceof EngineError) || error.code !== 'BALANCE_VELOCITY_EXCEEDED') throw error;
    const detail = ((error.exception as { detail?: Record<string, unknown> } | undefined)?.detail ?? {}) as Record<
      string,
      unknown
    >;
    ctx.services.log.warn(
      {
        event: 'velocity',
        write,
        principal: ctx.principal,
        accountId: detail.accountId ?? null,
        velocityControlId: detail.velocityControlId ?? null,
        velocityLimitId: detail.velocityLimitId ?? null,
        dryRun: ctx.dryRun,
        judged: detail.judged !== false,
        balanceReadable: mayReadBalance(ctx, detail.accountId),
      },
      `velocity control refused a ${write === 'post' ? 'posting' : write === 'void' ? 'void' : 'membership change'}`,
    );
    throw redactVelocityError(ctx, error);
  }
}

/**
 * A velocity exception names the balance that broke the limit, of any account or set the posting
 * reached (the counterparty's too): shown only to a stack that may read that balance. The same
 * question decides whether a dry run is judged (see gated).
 */
function mayReadBalance(ctx: RequestContext, accountId: unknown, journalId?: string, currency?: string): boolean {
  if (typeof accountId !== 'string') return true;
  const owner = ctx.ledger.balanceOwner(accountId);
  const record = owner.isSet
    ? { accountSet: ctx.ledger.getAccountSet(accountId) }
    : { account: ctx.ledger.getAccount({ id: accountId }) };
  const document = balanceDocument(record, journalId ?? owner.journalId ?? DEFAULT_JOURNAL_ID, currency ?? null);
  return ctx.authority.allows({ action: 'SELECT', resource: 'financial.Balance', document });
}

/**
 * The document SELECT on financial.Balance is judged by, whatever asks: a balance read, a dry run
 * judged, a refusal or an exception showing the violating balance. The same fields for all, so a
 * policy's assertion over the owner (`context.document.account.code`) decides them all alike.
 */
function balanceDocument(
  owner: { account: Account } | { accountSet: AccountSet },
  journalId: string,
  currency: string | null,
): Record<string, unknown> {
  const accountId = 'account' in owner ? owner.account.accountId : owner.accountSet.accountSetId;
  return { accountId, journalId, ...(currency === null ? {} : { currency }), ...owner };
}

function redactException<T extends { message: string; detail: Record<string, unknown> | null }>(
  ctx: RequestContext,
  exception: T,
): T {
  const detail = exception.detail ?? {};
  if (
    !('violatingBalance' in detail) ||
    mayReadBalance(ctx, detail.accountId, undefined, currencyOf(detail.violatingBalance))
  )
    return exception;
  return {
    ...exception,
    message: exception.message.replace(/, balance is .*$/, ''),
    detail: { ...detail, violatingBalance: null },
  };
}

/** The currency of a violating balance ("12.50 USD"). */
function currencyOf(violating: unknown): string | undefined {
  return typeof violating === 'string' ? violating.slice(violating.lastIndexOf(' ') + 1) : undefined;
}

function redactVelocityError(ctx: RequestContext, error: unknown): unknown {
  if (!(error instanceof EngineError) || error.code !== 'BALANCE_VELOCITY_EXCEEDED') return error;
  const exception = error.exception as { errorMessage: string; detail: Record<string, unknown> };
  if (mayReadBalance(ctx, exception.detail?.accountId, undefined, currencyOf(exception.detail?.violatingBalance)))
    return error;
  const message = error.message.replace(/, balance is .*$/, '');
  return new EngineError('BALANCE_VELOCITY_EXCEEDED', message, {
    hint: error.hint,
    exception: { ...exception, errorMessage: message, detail: { ...exception.detail, violatingBalance: null } },
  });
}

export const ledgerResolvers = {
  Query: query,
  Mutation: mutation,
  Account: {
    balance: (a: Account, { journalId, currency, asOf }: Args, ctx: RequestContext) =>
      balanceOf(ctx, a, journalId, currency, asOf),
    balances: (a: Account, { first, after }: Args, ctx: RequestContext) =>
      balancesPage(ctx, a.accountId, a.normalBalanceType, first, after, { account: a }),
    sets: (a: Account, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, AS, ctx.ledger.setsOf(a.accountId, first, after)),
    entries: (a: Account, { first, after, where }: Args, ctx: RequestContext) =>
      visible(
        ctx,
        E,
        ctx.ledger.entriesOfAccount({
          accountId: a.accountId,
          first,
          after,
          journalId: where?.journalId,
          currency: where?.currency,
        }),
      ),
    history: (a: Account, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, A, ctx.ledger.accountHistory(a.accountId, first, after)),
  },
  AccountSet: {
    journal: (set: AccountSet, _: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', J, ctx.ledger.getJournal(set.journalId)),
    balance: (set: AccountSet, { currency, asOf }: Args, ctx: RequestContext) =>
      setBalanceOf(ctx, set, null, currency, asOf),
    balances: (set: AccountSet, { first, after }: Args, ctx: RequestContext) =>
      balancesPage(ctx, set.accountSetId, set.normalBalanceType, first, after, { accountSet: set }),
    entries: (set: AccountSet, { first, after, where }: Args, ctx: RequestContext) =>
      visible(ctx, E, ctx.ledger.setEntries(set.accountSetId, first, after, where?.currency)),
    members: (set: AccountSet, { first, after }: Args, ctx: RequestContext) => {
      const page = visible(ctx, ASM, ctx.ledger.setMembers(set.accountSetId, first, after), (m) => ({
        accountSetId: m.account_set_id,
        memberId: m.member_id,
        memberType: m.member_type,
      }));
      const node = (m: { member_id: string; member_type: string }) =>
        m.member_type === 'ACCOUNT_SET'
          ? guard(ctx, 'SELECT', AS, ctx.ledger.getAccountSet(m.member_id))
          : guard(ctx, 'SELECT', A, ctx.ledger.getAccount({ id: m.member_id }));
      return {
        pageInfo: page.pageInfo,
        nodes: page.nodes.map(node),
        edges: page.edges.map((e) => ({ cursor: e.cursor, node: node(e.node) })),
      };
    },
    sets: (set: AccountSet, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, AS, ctx.ledger.setsOf(set.accountSetId, first, after)),
    history: (set: AccountSet, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, AS, ctx.ledger.accountHistory(set.accountSetId, first, after)),
  },
  AccountSetMember: {
    __resolveType: (node: { accountSetId?: string }) => (node.accountSetId === undefined ? 'Account' : 'AccountSet'),
  },
  TranCode: {
    history: (t: TranCode, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, TC, ctx.ledger.tranCodeHistory(t.tranCodeId, first, after)),
  },
  Transaction: {
    exceptions: (t: Transaction, _: Args, ctx: RequestContext) => t.exceptions.map((e) => redactException(ctx, e)),
    properties: (t: Transaction) => t.properties ?? { overrideVelocityEnforcement: null },
    tranCode: (t: Transaction, _: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', TC, ctx.ledger.getTranCode({ id: t.tranCodeId, version: t.tranCodeVersion })),
    journal: (t: Transaction, _: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', J, ctx.ledger.getJournal(t.journalId)),
    entries: (t: Transaction, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, E, ctx.ledger.entriesOfTransaction(t.transactionId, first, after)),
    correlated: (t: Transaction, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, T, ctx.ledger.listTransactions({ first, after, correlationId: t.correlationId })),
  },
  Entry: {
    units: (e: Entry) => e.units,
    description: (e: Entry) => e.description ?? '',
    amount: (e: Entry) => money(e.units, e.currency),
    transaction: (e: Entry, _: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', T, ctx.ledger.getTransaction(e.transactionId)),
    account: (e: Entry, _: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', A, ctx.ledger.getAccount({ id: e.accountId })),
  },
  Balance: {
    accountId: (v: BalanceView) => v.balance.accountId,
    journalId: (v: BalanceView) => v.balance.journalId,
    currency: (v: BalanceView) => v.balance.currency,
    entryId: (v: BalanceView) => v.balance.entryId,
    version: (v: BalanceView) => v.balance.version,
    created: (v: BalanceView) => v.balance.created,
    modified: (v: BalanceView) => v.balance.modified,
    account: (v: BalanceView, _: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', A, ctx.ledger.getAccount({ id: v.balance.accountId })),
    journal: (v: BalanceView, _: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', J, ctx.ledger.getJournal(v.balance.journalId)),
    settled: (v: BalanceView) => amounts(v, 'SETTLED', false),
    pending: (v: BalanceView) => amounts(v, 'PENDING', false),
    encumbrance: (v: BalanceView) => amounts(v, 'ENCUMBRANCE', false),
    available: (v: BalanceView, { layer }: Args) => amounts(v, layer as Layer, true),
    history: (v: BalanceView, { first, after }: Args, ctx: RequestContext) => {
      const { accountId, journalId, currency } = v.balance;
      if ((v.balance as { calculationId?: string | null }).calculationId) {
        throw new EngineError('BAD_REQUEST', 'the history of a calculation balance is not kept', {
          hint: 'Read it by effective period instead, or read the history of the account balance.',
        });
      }
      const page = ctx.ledger.balanceHistory(ctx.ledger.balanceOwner(accountId), journalId, currency, first, after);
      const view = (balance: Balance): BalanceView => ({ balance, normalBalanceType: v.normalBalanceType });
      return {
        ...page,
        nodes: page.nodes.map(view),
        edges: page.edges.map((e) => ({ cursor: e.cursor, node: view(e.node) })),
      };
    },
    // A set's balance is behind the entries that rolled up into it (a set has no entries of its own).
    entries: (v: BalanceView, { first, after }: Args, ctx: RequestContext) =>
      visible(
        ctx,
        E,
        ctx.ledger.balanceOwner(v.balance.accountId).isSet
          ? ctx.ledger.setEntries(v.balance.accountId, first, after, v.balance.currency)
          : ctx.ledger.entriesOfAccount({
              accountId: v.balance.accountId,
              journalId: v.balance.journalId,
              currency: v.balance.currency,
              first,
              after,
              newestFirst: true,
            }),
      ),
    calculationId: (v: BalanceView) => v.balance.calculationId ?? null,
    dimensions: (v: BalanceView) => v.balance.dimensions ?? null,
  },
};
