import { describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { balanceOf, createAccount } from '../helpers/ledger.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';

/**
 * Views: CEL documents materialised inside the posting transaction, read through their key.
 * Real engine, real SQLite; scenarios of our own (a shop's sales accounts rolled up into a set).
 */

const CREATE_VIEW =
  'mutation($i: CreateViewInput!) { schema { createView(input: $i) { name document { alias type } sort { alias type sort } } } }';
const DELETE_VIEW = 'mutation($n: String!) { schema { deleteView(name: $n) { name } } }';
const POST = 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }';
const VOID = 'mutation($id: UUID!) { voidTransaction(id: $id) { transactionId } }';
const READ = `query($n: String!, $w: ViewFilter, $first: Int!, $after: String) { view(name: $n, where: $w, first: $first, after: $after) {
  nodes { version document source { entity trigger new { ... on Entry { entryId amount { units } } ... on Transaction { transactionId voidedBy version } }
                                     old { ... on Entry { entryId } ... on Transaction { transactionId voidedBy version } } }
          history(first: 10) { nodes { version document } } }
  pageInfo { hasNextPage endCursor } } }`;

const SET = id(50);
const SALES = id(2);
const OTHER = id(3);

/** Accounts 1 (cash), 2 and 3 (sales, in set 50), and a SALE tran code: debit cash, credit `to`, with a tag in the metadata. */
async function shop(options: Parameters<typeof newEngine>[0] = {}): Promise<Engine> {
  const engine = await newEngine(options);
  ok(engine, 'mutation($i: AccountSetInput!) { createAccountSet(input: $i) { accountSetId } }', {
    i: { accountSetId: SET, name: 'sales' },
  });
  createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
  createAccount(engine, 2, { accountSetIds: [SET] });
  createAccount(engine, 3, { accountSetIds: [SET] });
  ok(engine, 'mutation($i: TranCodeInput!) { createTranCode(input: $i) { code } }', {
    i: {
      tranCodeId: id(9000),
      code: 'SALE',
      params: [
        { name: 'to', type: 'UUID' },
        { name: 'amount', type: 'DECIMAL' },
        { name: 'layer', type: 'STRING', default: "'SETTLED'" },
        { name: 'tag', type: 'STRING', default: "'none'" },
      ],
      transaction: { metadata: "{'tag': params.tag}" },
      entries: [
        {
          accountId: `'${id(1)}'`,
          units: 'params.amount',
          currency: "'USD'",
          direction: 'DEBIT',
          layer: 'params.layer',
          metadata: "{'tag': params.tag}",
        },
        {
          accountId: 'params.to',
          units: 'params.amount',
          currency: "'USD'",
          direction: 'CREDIT',
          layer: 'params.layer',
          metadata: "{'tag': params.tag}",
        },
      ],
    },
  });
  return engine;
}

const sale = (engine: Engine, n: number, amount: string, params: Record<string, unknown> = {}) =>
  ok(engine, POST, { i: { transactionId: id(n), tranCode: 'SALE', params: { to: SALES, amount, ...params } } });

/** Per account (and each set above it): entry count, net credit amount and the running mean of amounts. */
const STATS = {
  name: 'stats',
  description: 'per account and set',
  sources: [{ entity: 'Entry', triggers: ['OnInsert'] }],
  normalize: '[context.trigger.new.account_id] + context.trigger.new.parent_account_ids',
  document: [
    { alias: 'account', value: 'context.trigger.normalize', type: 'UUID' },
    { alias: 'currency', value: 'context.trigger.new.currency', type: 'String' },
    { alias: 'n', value: 'document.n + uint(1)', type: 'UInt' },
    {
      alias: 'net',
      value:
        'context.trigger.new.direction == CREDIT ? document.net + context.trigger.new.units : document.net - context.trigger.new.units',
      type: 'Decimal',
    },
    {
      alias: 'mean',
      value:
        "decimal.Round(decimal.Quo(decimal.Mul(document.mean, decimal(string(document.n))) + context.trigger.new.units, decimal(string(this.n)), uint(20)), 'half_even', 2)",
      type: 'Decimal',
    },
    { alias: 'last', value: 'context.trigger.new.created', type: 'Timestamp' },
  ],
  partition: [{ alias: 'account', value: 'document.account' }],
  sort: [{ alias: 'currency', value: 'document.currency', sort: 'ASC' }],
};

const byAccount = (account: string) => ({ index: { partition: [{ alias: 'account', value: { eq: account } }] } });

describe('views', () => {
  it('keeps a running count, net and mean per account and per set exact across posts and a void', async () => {
    const engine = await shop();
    const created = ok(engine, CREATE_VIEW, { i: STATS }).schema.createView;
    expect(created.document).toEqual(STATS.document.map(({ alias, type }) => ({ alias, type })));
    expect(created.sort).toEqual([{ alias: 'currency', type: 'String', sort: 'ASC' }]);

    sale(engine, 100, '10.00');
    sale(engine, 101, '20.5');
    ok(engine, VOID, { id: id(100) });

    for (const account of [SALES, SET]) {
      const [record] = ok(engine, READ, { n: 'stats', w: byAccount(account), first: 10 }).view.nodes;
      expect(record.version).toBe(3);
      // 10.00 + 20.5 − 10.00 (the void debits it back): scales kept, the uint counted as uint.
      expect(record.document).toMatchObject({ account, currency: 'USD', n: 3, net: '20.50' });
      expect(record.document.mean).toBe('13.50');
      expect(record.history.nodes.map((h: any) => [h.version, h.document.n, h.document.net])).toEqual([
        [3, 3, '20.50'],
        [2, 2, '30.50'],
        [1, 1, '10.00'],
      ]);
      expect(record.source.entity).toBe('Entry');
      expect(record.source.trigger).toBe('OnInsert');
      expect(record.source.old).toBeNull();
      expect(record.source.new.amount.units).toBe('10.00');
    }
    // The cash account has no set above it: one record of its own, nothing else.
    const cash = ok(engine, READ, { n: 'stats', w: byAccount(id(1)), first: 10 }).view.nodes;
    expect(cash).toHaveLength(1);
    expect(cash[0].document).toMatchObject({ n: 3, net: '-20.50' });
    expect(ok(engine, READ, { n: 'stats', w: byAccount(OTHER), first: 10 }).view.nodes).toEqual([]);
  });

  it('applies filters, and follows updates (a void) with old and new', async () => {
    const engine = await shop();
    ok(engine, CREATE_VIEW, {
      i: {
        name: 'pendingByTag',
        sources: [{ entity: 'Entry', triggers: ['OnInsert'] }],
        document: [
          { alias: 'tag', value: 'context.trigger.new.metadata.tag', type: 'String' },
          {
            alias: 'held',
            value:
              'document.held + (context.trigger.new.direction == CREDIT ? context.trigger.new.units : decimal("0"))',
            type: 'Decimal',
          },
        ],
        partition: [{ alias: 'tag', value: 'document.tag' }],
        filters: {
          pending: 'context.trigger.new.layer == PENDING',
          tagged: "has(context.trigger.new.metadata) && context.trigger.new.metadata.tag != 'none'",
        },
      },
    });
    ok(engine, CREATE_VIEW, {
      i: {
        name: 'voids',
        sources: [{ entity: 'Transaction', triggers: ['OnUpdate'] }],
        document: [
          { alias: 'journal', value: 'context.trigger.new.journal_id', type: 'UUID' },
          {
            alias: 'voided',
            value:
              'document.voided + (context.trigger.old.voided_by == "" && context.trigger.new.voided_by != "" ? 1 : 0)',
            type: 'Int',
          },
        ],
        partition: [{ alias: 'journal', value: 'document.journal' }],
      },
    });
    sale(engine, 100, '5', { layer: 'PENDING', tag: 'web' });
    sale(engine, 101, '7', { layer: 'SETTLED', tag: 'web' });
    sale(engine, 102, '1.25', { layer: 'PENDING' });
    sale(engine, 103, '2.50', { layer: 'PENDING', tag: 'web' });
    const [web] = ok(engine, READ, {
      n: 'pendingByTag',
      w: { index: { partition: [{ alias: 'tag', value: { eq: 'web' } }] } },
      first: 10,
    }).view.nodes;
    expect(web.document).toEqual({ tag: 'web', held: '7.50' });
    // Both entries of each tagged pending sale pass the filters (only the credit adds).
    expect(web.version).toBe(4);
    expect(
      ok(engine, READ, {
        n: 'pendingByTag',
        w: { index: { partition: [{ alias: 'tag', value: { eq: 'none' } }] } },
        first: 10,
      }).view.nodes,
    ).toEqual([]);

    const voidId = ok(engine, VOID, { id: id(101) }).voidTransaction.transactionId;
    const journal = '00000000-0000-0000-0000-000000000000';
    const [v] = ok(engine, READ, {
      n: 'voids',
      w: { index: { partition: [{ alias: 'journal', value: { eq: journal } }] } },
      first: 10,
    }).view.nodes;
    expect(v.document).toEqual({ journal, voided: 1 });
    expect(v.source).toMatchObject({ entity: 'Transaction', trigger: 'OnUpdate' });
    expect(v.source.old).toEqual({ transactionId: id(101), voidedBy: null, version: 1 });
    expect(v.source.new).toEqual({ transactionId: id(101), voidedBy: voidId, version: 2 });
  });

  it('reads through the key: eq, gte, like, between, descending sort and pagination; a missing partition is refused', async () => {
    const engine = await shop();
    ok(engine, CREATE_VIEW, {
      i: {
        name: 'amounts',
        sources: [{ entity: 'Entry', triggers: ['OnInsert'] }],
        document: [
          { alias: 'currency', value: 'context.trigger.new.currency', type: 'String' },
          { alias: 'units', value: 'context.trigger.new.units', type: 'Decimal' },
          { alias: 'account', value: 'context.trigger.new.account_id', type: 'UUID' },
          { alias: 'times', value: 'document.times + uint(1)', type: 'UInt' },
        ],
        partition: [{ alias: 'currency', value: 'document.currency' }],
        sort: [
          { alias: 'units', value: 'document.units', sort: 'DESC' },
          { alias: 'account', value: 'document.account', sort: 'ASC' },
        ],
        filters: { credits: 'context.trigger.new.direction == CREDIT' },
      },
    });
    sale(engine, 100, '5');
    sale(engine, 101, '100');
    sale(engine, 102, '20.5');
    sale(engine, 103, '20.50', { to: OTHER });
    sale(engine, 104, '0.75');
    sale(engine, 105, '5.0'); // the same key as 5 (5.0 = 5): a second version
    const usd = [{ alias: 'currency', value: { eq: 'USD' } }];
    const read = (sort: unknown[] = [], first = 10, after?: string) =>
      ok(engine, READ, { n: 'amounts', w: { index: { partition: usd, sort } }, first, after }).view;
    const units = (view: any) => view.nodes.map((n: any) => n.document.units);

    expect(units(read())).toEqual(['100', '20.5', '20.50', '5.0', '0.75']);
    expect(read().nodes[3].version).toBe(2);
    expect(units(read([{ alias: 'units', value: { gte: '20.5' } }]))).toEqual(['100', '20.5', '20.50']);
    expect(units(read([{ alias: 'units', value: { lt: '20.5' } }]))).toEqual(['5.0', '0.75']);
    expect(units(read([{ alias: 'units', value: { between: { begin: '1', end: '20.5' } } }]))).toEqual([
      '20.5',
      '20.50',
      '5.0',
    ]);
    expect(units(read([{ alias: 'units', value: { eq: '20.500' } }]))).toEqual(['20.5', '20.50']);
    expect(units(read([{ alias: 'account', value: { like: '%0003' } }]))).toEqual(['20.50']);
    expect(units(read([{ alias: 'units', value: { all: true } }]))).toHaveLength(5);

    // Pages of two, following endCursor, give every record once, in order.
    const seen: string[] = [];
    let after: string | undefined;
    for (;;) {
      const page = read([], 2, after);
      seen.push(...units(page));
      if (!page.pageInfo.hasNextPage) break;
      after = page.pageInfo.endCursor;
    }
    expect(seen).toEqual(['100', '20.5', '20.50', '5.0', '0.75']);

    const noPartition = fails(engine, READ, {
      n: 'amounts',
      w: { index: { sort: [{ alias: 'units', value: { gte: '1' } }] } },
      first: 10,
    });
    expect(noPartition.code).toBe('BAD_REQUEST');
    expect(noPartition.message).toContain('partition key currency needs an eq filter');
    expect(fails(engine, READ, { n: 'amounts', first: 10 }).code).toBe('BAD_REQUEST');
    expect(
      fails(engine, READ, {
        n: 'amounts',
        w: { index: { partition: [{ alias: 'currency', value: { gte: 'A' } }] } },
        first: 10,
      }).code,
    ).toBe('BAD_REQUEST');
    const two = fails(engine, READ, {
      n: 'amounts',
      w: { index: { partition: usd, sort: [{ alias: 'units', value: { gte: '1', lte: '5' } }] } },
      first: 10,
    });
    expect(two.message).toContain('exactly one of');
    expect(
      fails(engine, READ, {
        n: 'amounts',
        w: { index: { partition: usd, sort: [{ alias: 'units', value: { gte: 'ten' } }] } },
        first: 10,
      }).code,
    ).toBe('BAD_REQUEST');
    expect(fails(engine, READ, { n: 'nope', w: { index: { partition: usd } }, first: 10 }).code).toBe('NOT_FOUND');
  });

  it('refuses bad definitions clearly and writes nothing', async () => {
    const engine = await shop();
    const syntax = fails(engine, CREATE_VIEW, {
      i: {
        ...STATS,
        document: [
          ...STATS.document.slice(0, 4),
          { alias: 'mean', value: 'decimal.Quo(document.mean,', type: 'Decimal' },
        ],
      },
    });
    expect(syntax.code).toBe('CEL_ERROR');
    expect(syntax.message).toContain('view stats document field mean');
    const badType = engine.graphql(CREATE_VIEW, {
      i: { ...STATS, document: [{ alias: 'x', value: '1', type: 'Float' }] },
    });
    expect(badType.errors?.[0]?.message).toContain('Float');
    const alias = fails(engine, CREATE_VIEW, { i: { ...STATS, document: [STATS.document[0], STATS.document[0]] } });
    expect(alias.code).toBe('BAD_REQUEST');
    expect(alias.message).toContain('given twice');
    expect(
      fails(engine, CREATE_VIEW, { i: { ...STATS, sources: [{ entity: 'Account', triggers: ['OnInsert'] }] } }).code,
    ).toBe('BAD_REQUEST');
    expect(
      fails(engine, CREATE_VIEW, { i: { ...STATS, filters: { bad: 'context.trigger.new.layer ==' } } }).message,
    ).toContain('view stats filter bad');
    expect(count(engine, 'views')).toBe(0);
    ok(engine, CREATE_VIEW, { i: STATS });
    expect(fails(engine, CREATE_VIEW, { i: STATS }).code).toBe('ALREADY_EXISTS');
    expect(count(engine, 'views')).toBe(1);

    // A field returning the wrong type fails the posting (atomically), naming the field.
    ok(engine, CREATE_VIEW, {
      i: {
        ...STATS,
        name: 'wrong',
        document: [...STATS.document.slice(0, 2), { alias: 'n', value: '"three"', type: 'UInt' }],
      },
    });
    const wrong = fails(engine, POST, {
      i: { transactionId: id(100), tranCode: 'SALE', params: { to: SALES, amount: '1' } },
    });
    expect(wrong.code).toBe('CEL_ERROR');
    expect(wrong.message).toContain('view wrong document field n must be UInt');
    expect(balanceOf(engine, SALES).settled.normalBalance.units).toBe('0');
    ok(engine, DELETE_VIEW, { n: 'wrong' });
    sale(engine, 100, '1');
    ok(engine, DELETE_VIEW, { n: 'stats' });
    expect(count(engine, 'view_records') + count(engine, 'view_record_versions') + count(engine, 'views')).toBe(0);
  });

  it('reads definitions once, not on every posting, and lists them', async () => {
    const engine = await shop();
    const st = engine.ledger.deps.views;
    const all = st.allViews.all.bind(st.allViews);
    let reads = 0;
    st.allViews.all = ((...args: []) => {
      reads++;
      return all(...args);
    }) as typeof st.allViews.all;
    for (let i = 0; i < 5; i++) sale(engine, 100 + i, '1');
    expect(reads).toBeLessThanOrEqual(1);
    ok(engine, CREATE_VIEW, { i: STATS });
    reads = 0;
    for (let i = 0; i < 5; i++) sale(engine, 200 + i, '1');
    expect(reads).toBeLessThanOrEqual(1);
    const list = ok(
      engine,
      '{ schema { views(first: 10) { nodes { name normalize partition { alias type } config { enableConcurrentPosting } } } view(name: "stats") { description } } }',
    );
    expect(list.schema.views.nodes).toEqual([
      {
        name: 'stats',
        normalize: STATS.normalize,
        partition: [{ alias: 'account', type: 'UUID' }],
        config: { enableConcurrentPosting: false },
      },
    ]);
    expect(list.schema.view.description).toBe('per account and set');
  });

  it('limits: viewsMax, viewDocumentFieldsMax, viewRecordsPerSourceMax, indexKeysMax', async () => {
    const engine = await shop({
      limits: { viewsMax: 1, viewDocumentFieldsMax: 6, viewRecordsPerSourceMax: 1, indexKeysMax: 1 },
    });
    const fields = fails(engine, CREATE_VIEW, {
      i: { ...STATS, document: [...STATS.document, { alias: 'extra', value: '1', type: 'Int' }] },
    });
    expect(fields.code).toBe('LIMIT_EXCEEDED');
    expect(fields.message).toContain('viewDocumentFieldsMax is 6');
    const keys = fails(engine, CREATE_VIEW, {
      i: { ...STATS, sort: [STATS.sort[0], { alias: 'n', value: 'document.n', sort: 'ASC' }] },
    });
    expect(keys.message).toContain('indexKeysMax is 1');
    ok(engine, CREATE_VIEW, { i: STATS });
    const second = fails(engine, CREATE_VIEW, { i: { ...STATS, name: 'again' } });
    expect(second.code).toBe('LIMIT_EXCEEDED');
    expect(second.message).toContain('viewsMax is 1');
    // The sales account rolls up into a set: two records for one entry, over the limit of one.
    const many = fails(engine, POST, {
      i: { transactionId: id(100), tranCode: 'SALE', params: { to: SALES, amount: '1' } },
    });
    expect(many.code).toBe('LIMIT_EXCEEDED');
    expect(many.message).toContain('viewRecordsPerSourceMax is 1');
    expect(balanceOf(engine, SALES).settled.normalBalance.units).toBe('0');
  });

  it('a client without financial.View can neither create nor read views, and still posts', async () => {
    const engine = await shop();
    ok(engine, CREATE_VIEW, { i: STATS });
    const ledgerOnly = [
      {
        effect: 'ALLOW',
        actions: ['SELECT', 'INSERT', 'UPDATE'],
        resources: [
          'financial.Transaction',
          'financial.Entry',
          'financial.Balance',
          'financial.Account',
          'financial.TranCode',
          'financial.Journal',
        ],
      },
    ];
    ok(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { client { principal } } } }', {
      i: { principal: 'clerk', name: 'clerk', policies: ledgerOnly },
    });
    expect(fails(engine, CREATE_VIEW, { i: { ...STATS, name: 'mine' } }, 'clerk').code).toBe('ACCESS_DENIED');
    expect(fails(engine, READ, { n: 'stats', w: byAccount(SALES), first: 10 }, 'clerk').code).toBe('ACCESS_DENIED');
    expect(fails(engine, '{ schema { view(name: "stats") { name } } }', undefined, 'clerk').code).toBe('ACCESS_DENIED');
    expect(fails(engine, DELETE_VIEW, { n: 'stats' }, 'clerk').code).toBe('ACCESS_DENIED');
    expect(
      ok(engine, '{ schema { views(first: 10) { nodes { name } } } }', undefined, 'clerk').schema.views.nodes,
    ).toEqual([]);
    ok(engine, POST, { i: { transactionId: id(100), tranCode: 'SALE', params: { to: SALES, amount: '3' } } }, 'clerk');
    expect(ok(engine, READ, { n: 'stats', w: byAccount(SALES), first: 10 }).view.nodes[0].document.n).toBe(1);
  });

  it('a hostile view (expensive CEL) fails postings within postingCelCostMax, not after minutes', async () => {
    const engine = await shop();
    const expensive =
      '[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20].all(a, [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20].all(b, [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20].all(c, [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20].all(d, [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20].all(e, a + b + c + d + e > 0)))))';
    ok(engine, CREATE_VIEW, {
      i: {
        name: 'hostile',
        sources: [{ entity: 'Entry', triggers: ['OnInsert'] }],
        document: [
          { alias: 'k', value: 'context.trigger.new.currency', type: 'String' },
          { alias: 'slow', value: expensive, type: 'Boolean' },
        ],
        partition: [{ alias: 'k', value: 'document.k' }],
      },
    });
    const started = Date.now();
    const error = fails(engine, POST, {
      i: { transactionId: id(100), tranCode: 'SALE', params: { to: SALES, amount: '1' } },
    });
    expect(Date.now() - started).toBeLessThan(2000);
    expect(error.code).toBe('LIMIT_EXCEEDED');
    expect(error.message).toContain('postingCelCostMax');
    expect(balanceOf(engine, SALES).settled.normalBalance.units).toBe('0');
    ok(engine, DELETE_VIEW, { n: 'hostile' });
    sale(engine, 100, '1');
    expect(balanceOf(engine, SALES).settled.normalBalance.units).toBe('1');
  });
});
