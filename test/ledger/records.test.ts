import { beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { DEFAULT_JOURNAL_ID } from '../../src/ledger/journals.js';
import { balanceOf, CREATE_ACCOUNT, createAccount, POST } from '../helpers/ledger.js';
import { fails, id, newEngine, ok } from '../helpers/engine.js';

let engine: Engine;
beforeEach(async () => {
  engine = await newEngine();
});

const CREATE_TRAN_CODE = `mutation($i: TranCodeInput!) { createTranCode(input: $i) { tranCodeId code version status params { name type default } } }`;

describe('journals', () => {
  it('has a default journal, creates others, pages them, and refuses posting into a LOCKED one', async () => {
    expect(ok(engine, '{ journal { journalId code status } }').journal).toEqual({
      journalId: DEFAULT_JOURNAL_ID,
      code: 'DEFAULT',
      status: 'ACTIVE',
    });
    ok(
      engine,
      `mutation { createJournal(input: {journalId: "${id(5)}", name: "EUR book", code: "EUR"}) { journalId } }`,
    );
    const page1 = ok(engine, '{ journals(first: 1) { nodes { code } pageInfo { hasNextPage endCursor } } }').journals;
    expect(page1.nodes).toEqual([{ code: 'DEFAULT' }]);
    const page2 = ok(
      engine,
      `{ journals(first: 1, after: "${page1.pageInfo.endCursor}") { nodes { code } pageInfo { hasNextPage } } }`,
    ).journals;
    expect(page2).toEqual({ nodes: [{ code: 'EUR' }], pageInfo: { hasNextPage: false } });
    expect(
      fails(
        engine,
        `mutation { createJournal(input: {journalId: "${id(6)}", name: "dup", code: "EUR"}) { journalId } }`,
      ).code,
    ).toBe('ALREADY_EXISTS');
    expect(
      fails(engine, `mutation { updateJournal(id: "${DEFAULT_JOURNAL_ID}", input: {status: LOCKED}) { status } }`).code,
    ).toBe('BAD_REQUEST');

    const a = createAccount(engine, 1);
    const b = createAccount(engine, 2);
    ok(engine, `mutation($i: TranCodeInput!) { createTranCode(input: $i) { code } }`, {
      i: {
        tranCodeId: id(700),
        code: 'BOOK',
        params: [{ name: 'journal', type: 'UUID' }],
        transaction: { journalId: 'params.journal' },
        entries: [
          { accountId: `'${a}'`, units: "decimal('1')", currency: "'EUR'", direction: 'DEBIT' },
          { accountId: `'${b}'`, units: "decimal('1')", currency: "'EUR'", direction: 'CREDIT' },
        ],
      },
    });
    ok(engine, POST, { input: { transactionId: id(1), tranCode: 'BOOK', params: { journal: id(5) } } });
    const eur = ok(
      engine,
      `{ account(id: "${b}") { balance(journalId: "${id(5)}", currency: "EUR") { settled { normalBalance { units } } } } }`,
    );
    expect(eur.account.balance.settled.normalBalance.units).toBe('1');
    expect(balanceOf(engine, b, 'EUR').settled.normalBalance.units).toBe('0');
    ok(engine, `mutation { updateJournal(id: "${id(5)}", input: {status: LOCKED}) { status } }`);
    expect(
      fails(engine, POST, { input: { transactionId: id(2), tranCode: 'BOOK', params: { journal: id(5) } } }).code,
    ).toBe('JOURNAL_LOCKED');
    expect(
      fails(engine, POST, { input: { transactionId: id(3), tranCode: 'BOOK', params: { journal: id(55) } } }).code,
    ).toBe('NOT_FOUND');
  });
});

describe('accounts', () => {
  it('creates, updates (new version each time), keeps history, finds by code, and pages', async () => {
    ok(engine, CREATE_ACCOUNT, {
      input: { accountId: id(1), code: 'CASH', name: 'Cash', metadata: { tier: 'gold' }, externalId: 'ext-1' },
    });
    const updated = ok(
      engine,
      `mutation { updateAccount(id: "${id(1)}", input: {name: "Cash at bank", status: LOCKED}) { name status version metadata } }`,
    );
    expect(updated.updateAccount).toEqual({
      name: 'Cash at bank',
      status: 'LOCKED',
      version: 2,
      metadata: { tier: 'gold' },
    });
    const history = ok(engine, `{ account(code: "CASH") { history(first: 10) { nodes { version name status } } } }`)
      .account.history.nodes;
    expect(history).toEqual([
      { version: 2, name: 'Cash at bank', status: 'LOCKED' },
      { version: 1, name: 'Cash', status: 'ACTIVE' },
    ]);
    for (let n = 2; n <= 5; n++) createAccount(engine, n);
    const locked = ok(engine, '{ accounts(first: 10, where: {status: LOCKED}) { nodes { code } } }').accounts.nodes;
    expect(locked).toEqual([{ code: 'CASH' }]);
    const codes: string[] = [];
    let after: string | null = null;
    for (;;) {
      const page: any = ok(
        engine,
        'query($after: String) { accounts(first: 2, after: $after) { nodes { code } pageInfo { hasNextPage endCursor } } }',
        { after },
      ).accounts;
      codes.push(...page.nodes.map((n: any) => n.code));
      if (!page.pageInfo.hasNextPage) break;
      after = page.pageInfo.endCursor;
    }
    expect(codes).toEqual(['CASH', 'ACC-2', 'ACC-3', 'ACC-4', 'ACC-5']);
  });

  it('refuses duplicates, bad ids, bad enums, unknown fields and non-object metadata, naming the value', async () => {
    createAccount(engine, 1);
    expect(fails(engine, CREATE_ACCOUNT, { input: { accountId: id(1), code: 'X', name: 'X' } }).code).toBe(
      'ALREADY_EXISTS',
    );
    const dupCode = fails(engine, CREATE_ACCOUNT, { input: { accountId: id(2), code: 'ACC-1', name: 'X' } });
    expect(dupCode.code).toBe('ALREADY_EXISTS');
    expect(dupCode.message).toContain('"ACC-1"');
    const badId = fails(engine, CREATE_ACCOUNT, { input: { accountId: 'abc', code: 'X', name: 'X' } });
    expect(badId.code).toBe('BAD_REQUEST');
    expect(badId.message).toContain('"abc"');
    expect(
      fails(engine, CREATE_ACCOUNT, { input: { accountId: id(3), code: 'X', name: 'X', status: 'FROZEN' } }).message,
    ).toContain('FROZEN');
    expect(
      fails(engine, CREATE_ACCOUNT, { input: { accountId: id(3), code: 'X', name: 'X', colour: 'red' } }).message,
    ).toContain('colour');
    expect(
      fails(engine, CREATE_ACCOUNT, { input: { accountId: id(3), code: 'X', name: 'X', metadata: [1, 2] } }).message,
    ).toContain('metadata must be a JSON object');
    expect(fails(engine, CREATE_ACCOUNT, { input: { accountId: id(3), code: ' ', name: 'X' } }).code).toBe(
      'BAD_REQUEST',
    );
    expect(fails(engine, `{ account { code } }`).code).toBe('BAD_REQUEST');
    expect(fails(engine, `{ account(code: "nope") { code } }`).code).toBe('NOT_FOUND');
    expect(fails(engine, `{ accounts(first: 1, after: "garbage") { nodes { code } } }`).message).toContain('"garbage"');
    expect(fails(engine, `{ accounts(first: 0) { nodes { code } } }`).code).toBe('BAD_REQUEST');
  });
});

describe('tran codes', () => {
  it('creates version 1, makes a new version on each template change, keeps history, and locks', async () => {
    const created = ok(engine, CREATE_TRAN_CODE, {
      i: {
        tranCodeId: id(1),
        code: 'DEPOSIT',
        params: [
          { name: 'account', type: 'UUID' },
          { name: 'amount', type: 'DECIMAL', default: "decimal('1.00')" },
        ],
        transaction: { effective: 'date.Today()' },
        entries: [
          {
            accountId: "'00000000-0000-4000-8000-000000000001'",
            units: 'params.amount',
            currency: "'USD'",
            direction: 'DEBIT',
          },
          { accountId: 'params.account', units: 'params.amount', currency: "'USD'", direction: 'CREDIT' },
        ],
      },
    }).createTranCode;
    expect(created).toMatchObject({
      version: 1,
      status: 'ACTIVE',
      params: [
        { name: 'account', type: 'UUID', default: null },
        { name: 'amount', type: 'DECIMAL', default: "decimal('1.00')" },
      ],
    });
    const v2 = ok(
      engine,
      `mutation { updateTranCode(id: "${id(1)}", input: {description: "money in"}) { version description entries { units } } }`,
    );
    expect(v2.updateTranCode).toEqual({
      version: 2,
      description: 'money in',
      entries: [{ units: 'params.amount' }, { units: 'params.amount' }],
    });
    const statusOnly = ok(engine, `mutation { lockTranCode(id: "${id(1)}") { version status } }`);
    expect(statusOnly.lockTranCode).toEqual({ version: 2, status: 'LOCKED' });
    const history = ok(engine, `{ tranCode(code: "DEPOSIT") { history(first: 5) { nodes { version description } } } }`)
      .tranCode.history.nodes;
    expect(history).toEqual([
      { version: 2, description: 'money in' },
      { version: 1, description: null },
    ]);
    expect(ok(engine, `{ tranCode(id: "${id(1)}", version: 1) { version description } }`).tranCode).toEqual({
      version: 1,
      description: null,
    });
    expect(ok(engine, '{ tranCodes(first: 5) { nodes { code } } }').tranCodes.nodes).toEqual([{ code: 'DEPOSIT' }]);
  });

  it('refuses a template with a CEL syntax error, naming the field and the position', async () => {
    const error = fails(engine, CREATE_TRAN_CODE, {
      i: {
        tranCodeId: id(1),
        code: 'BAD',
        transaction: {},
        entries: [
          { accountId: "'x'", units: 'params.amount +', currency: "'USD'", direction: 'DEBIT' },
          { accountId: "'x'", units: '1', currency: "'USD'", direction: 'CREDIT' },
        ],
      },
    });
    expect(error.code).toBe('TRAN_CODE_ERROR');
    expect(error.message).toContain('entries[0].units');
    expect(error.message).toMatch(/position \d+/);
    expect(ok(engine, '{ tranCodes(first: 5) { nodes { code } } }').tranCodes.nodes).toEqual([]);
  });

  it('refuses bad definitions: duplicate params, bad names, missing entry fields, unknown fields, bad code', async () => {
    const base = {
      tranCodeId: id(1),
      code: 'X',
      transaction: {},
      entries: [{ accountId: "'a'", units: '1', currency: "'USD'", direction: 'DEBIT' }],
    };
    expect(
      fails(engine, CREATE_TRAN_CODE, { i: { ...base, params: [{ name: 'a' }, { name: 'a' }] } }).message,
    ).toContain('declared twice');
    expect(fails(engine, CREATE_TRAN_CODE, { i: { ...base, params: [{ name: 'a b' }] } }).message).toContain(
      'not an identifier',
    );
    expect(
      fails(engine, CREATE_TRAN_CODE, {
        i: { ...base, entries: [{ accountId: "'a'", units: '1', currency: "'USD'" }] },
      }).message,
    ).toContain('direction');
    expect(fails(engine, CREATE_TRAN_CODE, { i: { ...base, entries: [] } }).message).toContain('no entries');
    expect(fails(engine, CREATE_TRAN_CODE, { i: { ...base, code: '9lives' } }).code).toBe('BAD_REQUEST');
    expect(fails(engine, CREATE_TRAN_CODE, { i: { ...base, vars: { x: 5 } } }).message).toContain('vars.x');
  });

  it('accepts params of every ParamDataType with defaults, vars (nested, in order), conditions and integer enum forms', async () => {
    const a = createAccount(engine, 1);
    const b = createAccount(engine, 2);
    const fees = createAccount(engine, 3);
    ok(engine, CREATE_TRAN_CODE, {
      i: {
        tranCodeId: id(10),
        code: 'EVERYTHING',
        params: [
          { name: 'from', type: 'UUID' },
          { name: 'to', type: 'UUID' },
          { name: 'amount', type: 'DECIMAL' },
          { name: 'fee', type: 'DECIMAL', default: "decimal('0')" },
          { name: 'count', type: 'INTEGER', default: '2' },
          { name: 'memo', type: 'STRING', default: "'none'" },
          { name: 'urgent', type: 'BOOLEAN', default: 'false' },
          { name: 'day', type: 'DATE', default: "'2026-01-15'" },
          { name: 'at', type: 'TIMESTAMP', default: "timestamp('2026-01-15T10:00:00Z')" },
          { name: 'extra', type: 'JSON', default: "{'k': 'v'}" },
        ],
        vars: {
          total: 'params.amount + params.fee',
          labels: { memo: 'strings.ToUpper(params.memo)', both: "vars.labels.memo + '/' + string(params.count * 2)" },
        },
        transaction: {
          effective: 'params.day',
          description: 'vars.labels.both',
          metadata: "{'urgent': params.urgent, 'extra': params.extra, 'hour': params.at.getHours()}",
        },
        entries: [
          { accountId: 'params.from', units: 'vars.total', currency: "'USD'", direction: '0', layer: '0' },
          { accountId: 'params.to', units: 'params.amount', currency: "'USD'", direction: '1', layer: 'SETTLED' },
          {
            accountId: `'${fees}'`,
            units: 'params.fee',
            currency: "'USD'",
            direction: "'CREDIT'",
            condition: 'params.fee > decimal("0")',
            entryType: "'FEE'",
          },
        ],
      },
    });
    const t1 = ok(
      engine,
      `mutation { postTransaction(input: {transactionId: "${id(1)}", tranCode: "EVERYTHING", params: {from: "${a}", to: "${b}", amount: "10", fee: "0.25", count: 21, memo: "rent", urgent: true}}) {
      effective description metadata entries(first: 10) { nodes { entryType direction layer units } } } }`,
    ).postTransaction;
    expect(t1.effective).toBe('2026-01-15');
    expect(t1.description).toBe('RENT/42');
    expect(t1.metadata).toEqual({ urgent: true, extra: { k: 'v' }, hour: 10 });
    expect(t1.entries.nodes).toEqual([
      { entryType: 'EVERYTHING_DR', direction: 'DEBIT', layer: 'SETTLED', units: '10.25' },
      { entryType: 'EVERYTHING_CR', direction: 'CREDIT', layer: 'SETTLED', units: '10' },
      { entryType: 'FEE', direction: 'CREDIT', layer: 'SETTLED', units: '0.25' },
    ]);
    const t2 = ok(
      engine,
      `mutation { postTransaction(input: {transactionId: "${id(2)}", tranCode: "EVERYTHING", params: {from: "${a}", to: "${b}", amount: "5"}}) {
      entries(first: 10) { nodes { entryType } } } }`,
    ).postTransaction;
    expect(t2.entries.nodes).toHaveLength(2);
    expect(balanceOf(engine, fees).settled.normalBalance.units).toBe('0.25');
    const badType = fails(
      engine,
      `mutation { postTransaction(input: {transactionId: "${id(3)}", tranCode: "EVERYTHING", params: {from: "${a}", to: "${b}", amount: "5", count: "many"}}) { effective } }`,
    );
    expect(badType.message).toContain('"count"');
    expect(badType.message).toContain('integer');
    expect(
      fails(
        engine,
        `mutation { postTransaction(input: {transactionId: "${id(3)}", tranCode: "EVERYTHING", params: {from: "${a}", to: "${b}", amount: "5", day: "2026-02-30"}}) { effective } }`,
      ).message,
    ).toContain('date');
  });

  it('reports a template that evaluates to the wrong type, naming the field and the value', async () => {
    const a = createAccount(engine, 1);
    ok(engine, CREATE_TRAN_CODE, {
      i: {
        tranCodeId: id(11),
        code: 'WRONG',
        params: [{ name: 'dir', type: 'STRING' }],
        transaction: {},
        entries: [
          { accountId: `'${a}'`, units: '1.5', currency: "'USD'", direction: 'params.dir' },
          { accountId: `'${a}'`, units: "decimal('1.5')", currency: "'USD'", direction: 'CREDIT' },
        ],
      },
    });
    const wrongDirection = fails(engine, POST, {
      input: { transactionId: id(1), tranCode: 'WRONG', params: { dir: 'SIDEWAYS' } },
    });
    expect(wrongDirection.message).toContain('"SIDEWAYS"');
    expect(wrongDirection.message).toContain('entries[0].direction');
    const double = fails(engine, POST, {
      input: { transactionId: id(1), tranCode: 'WRONG', params: { dir: 'DEBIT' } },
    });
    expect(double.message).toContain('double');
    expect(double.hint).toContain('decimal("1.5")');
  });
});

describe('reads', () => {
  it('entry(id), transactions by journal, Account.balances / entries (filtered), Transaction.correlated and journal, Entry.account', () => {
    const a = createAccount(engine, 1);
    const b = createAccount(engine, 2);
    ok(engine, `mutation { createJournal(input: {journalId: "${id(5)}", name: "Second"}) { journalId } }`);
    ok(engine, `mutation($i: TranCodeInput!) { createTranCode(input: $i) { code } }`, {
      i: {
        tranCodeId: id(800),
        code: 'MOVE',
        params: [
          { name: 'journal', type: 'UUID' },
          { name: 'currency', type: 'STRING' },
          { name: 'corr', type: 'STRING' },
        ],
        transaction: { journalId: 'params.journal', correlationId: 'params.corr' },
        entries: [
          { accountId: `'${a}'`, units: "decimal('2')", currency: 'params.currency', direction: 'DEBIT' },
          { accountId: `'${b}'`, units: "decimal('2')", currency: 'params.currency', direction: 'CREDIT' },
        ],
      },
    });
    const move = (n: number, journal: string, currency: string, corr: string) =>
      ok(engine, POST, { input: { transactionId: id(n), tranCode: 'MOVE', params: { journal, currency, corr } } });
    move(10, id(5), 'EUR', 'c1');
    move(11, DEFAULT_JOURNAL_ID, 'USD', 'c1');
    move(12, id(5), 'USD', 'c2');
    const byJournal = ok(
      engine,
      `{ transactions(first: 10, where: {journalId: "${id(5)}"}) { nodes { transactionId journal { name } } } }`,
    ).transactions.nodes;
    expect(byJournal).toEqual([
      { transactionId: id(10), journal: { name: 'Second' } },
      { transactionId: id(12), journal: { name: 'Second' } },
    ]);
    const correlated = ok(
      engine,
      `{ transaction(id: "${id(10)}") { correlated(first: 10) { nodes { transactionId } } entries(first: 1) { nodes { entryId } pageInfo { hasNextPage endCursor } } } }`,
    ).transaction;
    expect(correlated.correlated.nodes.map((n: any) => n.transactionId)).toEqual([id(10), id(11)]);
    expect(correlated.entries.pageInfo.hasNextPage).toBe(true);
    const entryId = correlated.entries.nodes[0].entryId;
    const entry = ok(
      engine,
      `{ entry(id: "${entryId}") { direction units currency account { code } transaction { transactionId } } }`,
    ).entry;
    expect(entry).toEqual({
      direction: 'DEBIT',
      units: '2',
      currency: 'EUR',
      account: { code: 'ACC-1' },
      transaction: { transactionId: id(10) },
    });
    const next = ok(
      engine,
      `{ transaction(id: "${id(10)}") { entries(first: 5, after: "${correlated.entries.pageInfo.endCursor}") { nodes { direction } } } }`,
    ).transaction.entries.nodes;
    expect(next).toEqual([{ direction: 'CREDIT' }]);
    const account = ok(
      engine,
      `{ account(id: "${b}") {
      balances(first: 10) { nodes { journalId currency settled { normalBalance { units } } } }
      usd: entries(first: 10, where: {currency: "USD"}) { nodes { transactionId } }
      second: entries(first: 10, where: {journalId: "${id(5)}"}) { nodes { transactionId } } } }`,
    ).account;
    expect(
      account.balances.nodes
        .map((n: any) => [
          n.journalId === DEFAULT_JOURNAL_ID ? 'default' : 'second',
          n.currency,
          n.settled.normalBalance.units,
        ])
        .sort(),
    ).toEqual([
      ['default', 'USD', '2'],
      ['second', 'EUR', '2'],
      ['second', 'USD', '2'],
    ]);
    expect(account.usd.nodes.map((n: any) => n.transactionId)).toEqual([id(11), id(12)]);
    expect(account.second.nodes.map((n: any) => n.transactionId)).toEqual([id(10), id(12)]);
    expect(fails(engine, `{ entry(id: "${id(999)}") { units } }`).code).toBe('NOT_FOUND');
    expect(fails(engine, '{ entries(first: 5, where: {currency: "USD"}) { nodes { units } } }').code).toBe(
      'BAD_REQUEST',
    );
  });
});

describe('evaluate (CEL REPL)', () => {
  it('evaluates one expression or a map where later keys see earlier ones, with a document', async () => {
    expect(
      ok(engine, `mutation { evaluate(expression: "decimal('0.1') + decimal('0.2') == decimal('0.3')") }`).evaluate,
    ).toBe(true);
    const map = ok(
      engine,
      `mutation($d: JSON) { evaluate(expressions: {a: "decimal(document.amount) * 2", b: {c: "this.a + decimal('1')"}}, document: $d) }`,
      { d: { amount: '2.50' } },
    );
    // Decimals keep their scale: 2.50 × 2 is 5.00 (scales add), and + takes the larger scale.
    expect(map.evaluate).toEqual({ a: '5.00', b: { c: '6.00' } });
    expect(
      ok(engine, `mutation { evaluate(expression: "decimal.Round(decimal('1.005'), 'half_up', 2)") }`).evaluate,
    ).toBe('1.01');
    expect(ok(engine, `mutation { evaluate(expression: "money('1.5', 'USD') + money('2', 'USD')") }`).evaluate).toEqual(
      { units: '3.50', currency: 'USD' },
    );
    expect(ok(engine, `mutation { evaluate(expression: "document.n + 1", document: {n: 41}) }`).evaluate).toBe(42);
  });

  it('reports a CEL error with the expression and position', async () => {
    const error = fails(engine, `mutation { evaluate(expression: "1 + + ") }`);
    expect(error.code).toBe('CEL_ERROR');
    expect(error.message).toContain('"1 + + "');
    expect(error.message).toMatch(/position \d/);
    expect(fails(engine, `mutation { evaluate(expression: "money('1','USD') + money('1','EUR')") }`).message).toContain(
      'USD and EUR',
    );
    expect(fails(engine, 'mutation { evaluate }').code).toBe('BAD_REQUEST');
  });
});
