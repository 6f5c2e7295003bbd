import { beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';
import { createAccount, createTransferCode, POST } from '../helpers/ledger.js';
import { UNDO_MIGRATIONS_AFTER_9 } from '../helpers/migrations.js';

let engine: Engine;
beforeEach(async () => {
  engine = await newEngine();
});

const TRAN_CODE = `mutation($i: TranCodeInput!) { createTranCode(input: $i) { code } }`;
const entry = (direction: string, extra: Record<string, string> = {}) => ({
  accountId: `'${id(1)}'`,
  units: "decimal('1')",
  currency: "'USD'",
  direction,
  ...extra,
});

describe('hostile input is refused cleanly and writes nothing', () => {
  it('refuses __proto__ / constructor / prototype as vars keys and param names; evaluate keys cannot pollute prototypes', () => {
    for (const vars of [{ constructor: "'x'" }, { a: { prototype: "'x'" } }]) {
      const input = { tranCodeId: id(1), code: 'P', vars, transaction: {}, entries: [entry('DEBIT')] };
      expect(fails(engine, TRAN_CODE, { i: input }).code).toBe('TRAN_CODE_ERROR');
    }
    const raw = JSON.parse('{"__proto__": {"polluted": "\'yes\'"}}');
    expect(
      fails(engine, TRAN_CODE, {
        i: { tranCodeId: id(1), code: 'P', vars: raw, transaction: {}, entries: [entry('DEBIT')] },
      }).code,
    ).toBe('TRAN_CODE_ERROR');
    expect(
      fails(engine, TRAN_CODE, {
        i: {
          tranCodeId: id(1),
          code: 'P',
          params: [{ name: '__proto__' }],
          transaction: {},
          entries: [entry('DEBIT')],
        },
      }).code,
    ).toBe('TRAN_CODE_ERROR');
    const result = ok(engine, 'mutation($e: JSON) { evaluate(expressions: $e) }', {
      e: JSON.parse('{"__proto__": "1", "a": "2"}'),
    });
    expect(Object.getOwnPropertyNames(result.evaluate)).toEqual(['__proto__', 'a']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.hasOwn(Object.prototype, 'polluted')).toBe(false);
  });

  it('stops CEL values that double from key to key (celValueSizeMax) before they exhaust the process', () => {
    const expressions: Record<string, string> = { a: `[${Array.from({ length: 1000 }, (_, i) => i).join(',')}]` };
    for (let k = 0; k < 30; k++) expressions[`k${k}`] = k === 0 ? 'this.a + this.a' : `this.k${k - 1} + this.k${k - 1}`;
    const error = fails(engine, 'mutation($e: JSON) { evaluate(expressions: $e) }', { e: expressions });
    expect(error.code).toBe('LIMIT_EXCEEDED');
    expect(error.message).toContain('celValueSizeMax');
    expect(ok(engine, 'mutation { evaluate(expression: "1 + 1") }').evaluate).toBe(2);
  });

  it('refuses JSON nested deeper than jsonDepthMax in metadata, params and documents with LIMIT_EXCEEDED, not INTERNAL', () => {
    let deep: unknown = 'leaf';
    for (let i = 0; i < 10_000; i++) deep = { d: deep };
    const metadata = fails(
      engine,
      `mutation($m: JSON) { createAccount(input: {accountId: "${id(1)}", code: "A", name: "A", metadata: $m}) { code } }`,
      { m: deep },
    );
    expect(metadata.code).toBe('LIMIT_EXCEEDED');
    expect(metadata.message).toContain('jsonDepthMax');
    expect(fails(engine, 'mutation($d: JSON) { evaluate(expression: "1", document: $d) }', { d: deep }).code).toBe(
      'LIMIT_EXCEEDED',
    );
    expect(count(engine, 'accounts')).toBe(0);
  });

  it('cursors cannot be negative or replayed on another connection', () => {
    const a = createAccount(engine, 1);
    const b = createAccount(engine, 2);
    createTransferCode(engine);
    ok(engine, POST, {
      input: { transactionId: id(10), tranCode: 'TRANSFER', params: { from: a, to: b, amount: '1' } },
    });
    const negative = Buffer.from(JSON.stringify(['transaction-entries', -5])).toString('base64url');
    expect(
      fails(engine, `{ transaction(id: "${id(10)}") { entries(first: 5, after: "${negative}") { nodes { units } } } }`)
        .code,
    ).toBe('BAD_REQUEST');
    const accountsCursor = ok(engine, '{ accounts(first: 1) { pageInfo { endCursor } } }').accounts.pageInfo.endCursor;
    const replay = fails(engine, `{ transactions(first: 5, after: "${accountsCursor}") { nodes { transactionId } } }`);
    expect(replay.code).toBe('BAD_REQUEST');
    expect(replay.message).toContain('not a cursor this connection gave out');
  });

  it('refuses money units in another currency than the entry’s', () => {
    createAccount(engine, 1);
    createAccount(engine, 2);
    ok(engine, TRAN_CODE, {
      i: {
        tranCodeId: id(3),
        code: 'MIXED',
        transaction: {},
        entries: [
          { accountId: `'${id(1)}'`, units: "money('1', 'EUR')", currency: "'USD'", direction: 'DEBIT' },
          { accountId: `'${id(2)}'`, units: "decimal('1')", currency: "'USD'", direction: 'CREDIT' },
        ],
      },
    });
    const error = fails(engine, POST, { input: { transactionId: id(4), tranCode: 'MIXED' } });
    expect(error.code).toBe('TRAN_CODE_ERROR');
    expect(error.message).toContain('EUR');
    expect(count(engine, 'transactions')).toBe(0);
  });

  it('amounts: "-0" is zero, whitespace and non-finite numbers are refused with clear messages', () => {
    const a = createAccount(engine, 1);
    const b = createAccount(engine, 2);
    createTransferCode(engine);
    ok(engine, POST, {
      input: { transactionId: id(5), tranCode: 'TRANSFER', params: { from: a, to: b, amount: '-0' } },
    });
    for (const amount of [' 5 ', '5\n', '\t5']) {
      expect(
        fails(engine, POST, {
          input: { transactionId: id(6), tranCode: 'TRANSFER', params: { from: a, to: b, amount } },
        }).message,
      ).toContain('not a decimal');
    }
    const huge = fails(engine, POST, {
      // biome-ignore lint/correctness/noPrecisionLoss: the number JSON cannot hold exactly is the attack.
      input: { transactionId: id(6), tranCode: 'TRANSFER', params: { from: a, to: b, amount: 9007199254740993 } },
    });
    expect(huge.message).toContain('too large to be exact');
  });

  it('params: INTEGER beyond 64 bits and TIMESTAMP without an offset are refused', () => {
    createAccount(engine, 1);
    ok(engine, TRAN_CODE, {
      i: {
        tranCodeId: id(7),
        code: 'TYPED',
        params: [
          { name: 'n', type: 'INTEGER' },
          { name: 'at', type: 'TIMESTAMP' },
        ],
        transaction: {},
        entries: [entry('DEBIT'), entry('CREDIT')],
      },
    });
    expect(
      fails(engine, POST, {
        input: {
          transactionId: id(8),
          tranCode: 'TYPED',
          params: { n: '9999999999999999999', at: '2026-01-01T00:00:00Z' },
        },
      }).message,
    ).toContain('64-bit');
    expect(
      fails(engine, POST, {
        input: { transactionId: id(8), tranCode: 'TYPED', params: { n: 1, at: '2026-01-01T00:00' } },
      }).message,
    ).toContain('offset');
    ok(engine, POST, {
      input: { transactionId: id(8), tranCode: 'TYPED', params: { n: 1, at: '2026-01-01T00:00:00+02:00' } },
    });
    // Dates and times that do not exist are refused, not rolled over into the next month.
    for (const at of ['2026-02-30T00:00:00Z', '2026-04-31T12:00:00Z', '2026-01-01T24:00:00Z', '2026-01-01T12:60:00Z']) {
      expect(
        fails(engine, POST, { input: { transactionId: id(9), tranCode: 'TYPED', params: { n: 1, at } } }).code,
      ).toBe('TRAN_CODE_ERROR');
    }
    expect(
      fails(
        engine,
        'query($s: Timestamp) { actions { executions(first: 1, where: {since: $s}) { nodes { executionId } } } }',
        { s: '2026-02-30T00:00:00Z' },
      ).code,
    ).toBe('BAD_REQUEST');
    expect(count(engine, 'transactions')).toBe(1);
  });

  it('CEL arithmetic that would need more than 80 significant digits is refused, not rounded; limits keep amounts inside that', async () => {
    createAccount(engine, 1);
    createAccount(engine, 2);
    ok(engine, TRAN_CODE, {
      i: {
        tranCodeId: id(7),
        code: 'SCALE',
        params: [{ name: 'amount', type: 'DECIMAL' }],
        transaction: {},
        vars: { big: `decimal("1${'0'.repeat(70)}")`, units: '(params.amount + vars.big) - vars.big' },
        entries: [
          { accountId: `'${id(1)}'`, units: 'vars.units', currency: "'USD'", direction: 'DEBIT' },
          { accountId: `'${id(2)}'`, units: 'vars.units', currency: "'USD'", direction: 'CREDIT' },
        ],
      },
    });
    const error = fails(engine, POST, {
      input: { transactionId: id(8), tranCode: 'SCALE', params: { amount: '0.123456789012345678' } },
    });
    expect(error.code).toBe('TRAN_CODE_ERROR');
    expect(error.message).toContain('needs more than 80 digits');
    expect(count(engine, 'transactions')).toBe(0);
    // Within 80 digits the same arithmetic is exact.
    ok(engine, POST, { input: { transactionId: id(9), tranCode: 'SCALE', params: { amount: '0.12' } } });
    await expect(newEngine({ limits: { decimalIntegerDigitsMax: 60, decimalFractionDigitsMax: 30 } })).rejects.toThrow(
      'must be at most 60',
    );
  });

  it('a filter that rarely matches reads only what matches: an account’s entries of one currency are a chain of their own', async () => {
    engine = await newEngine({ limits: { pageSizeMax: 2 } });
    createAccount(engine, 1);
    createAccount(engine, 2);
    createTransferCode(engine);
    ok(engine, TRAN_CODE, {
      i: {
        tranCodeId: id(7),
        code: 'EURX',
        transaction: {},
        entries: [entry('DEBIT', { currency: "'EUR'" }), entry('CREDIT', { currency: "'EUR'" })],
      },
    });
    for (let i = 0; i < 300; i++)
      ok(engine, POST, {
        input: { transactionId: id(100 + i), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount: '1' } },
      });
    ok(engine, POST, { input: { transactionId: id(2000), tranCode: 'EURX', params: {} } });
    for (let i = 0; i < 300; i++)
      ok(engine, POST, {
        input: { transactionId: id(3000 + i), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount: '1' } },
      });
    // The EUR entries come at once, whatever surrounds them (the USD entries are not read at all).
    const page = ok(
      engine,
      `{ entries(first: 2, where: {accountId: "${id(1)}", currency: "EUR"}) { nodes { currency } pageInfo { hasNextPage } } }`,
    ).entries;
    expect(page).toEqual({ nodes: [{ currency: 'EUR' }, { currency: 'EUR' }], pageInfo: { hasNextPage: false } });
  });

  it('CEL cannot build huge numbers, put doubles into money, divide inexactly, or store what JSON cannot hold', () => {
    const evaluate = (expression: string) =>
      engine.graphql('mutation($e: Expression!) { evaluate(expression: $e) }', { e: expression });
    const code = (expression: string) => evaluate(expression).errors?.[0]?.extensions?.code;
    // 1e30 squared again and again has one significant digit but ever more zeros: refused early, in milliseconds.
    const started = Date.now();
    expect(code(`[decimal("1${'0'.repeat(30)}")]${'.map(a, a*a)'.repeat(27)}[0]`)).toBe('LIMIT_EXCEEDED');
    expect(Date.now() - started).toBeLessThan(2000);
    // Doubles are not amounts; exact integers are.
    expect(evaluate('decimal(0.1 + 0.2)').errors?.[0]?.message).toContain(
      'a double with a fraction, or beyond 2^53, is not taken as an amount',
    );
    expect(code(`decimal('1${'0'.repeat(200)}') + 0`)).toBe('LIMIT_EXCEEDED');
    expect(code("timestamp('9999-12-31T00:00:00Z') + duration('48h')")).toBe('CEL_ERROR');
    expect(evaluate('decimal(3.0)').data).toEqual({ evaluate: '3' });
    // Division is exact or refused; decimal.Quo rounds explicitly.
    expect(evaluate("decimal('1') / decimal('4')").data).toEqual({ evaluate: '0.25' });
    expect(evaluate("decimal('1') / decimal('3')").errors?.[0]?.message).toContain('has no exact decimal value');
    expect(evaluate("decimal.Quo(decimal('1'), decimal('3'), 2)").data).toEqual({ evaluate: '0.33' });
    // What JSON cannot hold is refused, not stored as text: NaN, types, optionals, out-of-range times.
    for (const expression of [
      '0.0 / 0.0',
      'type(1)',
      'optional.none()',
      'timestamp("2024-01-01T00:00:00Z") + duration("9000000000000s")',
    ]) {
      expect([expression, code(expression)]).toEqual([expression, 'CEL_ERROR']);
    }
    expect(evaluate("decimal.Round(decimal('1.25'), 'constructor', 1)").errors?.[0]?.message).toContain(
      'rounding mode "constructor" is not known',
    );
    // Bytes and map keys count towards celValueSizeMax.
    const doubling = Object.fromEntries(
      Array.from({ length: 20 }, (_, i) => [
        `a${i + 1}`,
        i === 0 ? `b"${'x'.repeat(100)}"` : `this.a${i} + this.a${i}`,
      ]),
    );
    expect(
      engine.graphql('mutation($m: JSON) { evaluate(expressions: $m) }', { m: doubling }).errors?.[0]?.extensions?.code,
    ).toBe('LIMIT_EXCEEDED');
    // A template whose int overflows is refused, and nothing is written.
    createAccount(engine, 1);
    ok(engine, TRAN_CODE, {
      i: {
        tranCodeId: id(7),
        code: 'OVER',
        transaction: {},
        entries: [
          entry('DEBIT', { units: '-9223372036854775808 / -1' }),
          entry('CREDIT', { units: '-9223372036854775808 / -1' }),
        ],
      },
    });
    expect(fails(engine, POST, { input: { transactionId: id(8), tranCode: 'OVER', params: {} } }).message).toContain(
      "outside CEL's 64-bit int range",
    );
    expect(count(engine, 'transactions')).toBe(0);
  });

  it('records keep their meaning: no flipped balance types, no control or broken characters, no Infinity', () => {
    createAccount(engine, 1);
    createAccount(engine, 2);
    createTransferCode(engine);
    const UPDATE =
      'mutation($id: UUID!, $i: AccountUpdateInput!) { updateAccount(id: $id, input: $i) { normalBalanceType } }';
    // Before any posting the type may change; after, it would flip every balance's sign.
    expect(ok(engine, UPDATE, { id: id(1), i: { normalBalanceType: 'DEBIT' } }).updateAccount.normalBalanceType).toBe(
      'DEBIT',
    );
    ok(engine, POST, {
      input: { transactionId: id(8), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount: '5' } },
    });
    expect(fails(engine, UPDATE, { id: id(2), i: { normalBalanceType: 'DEBIT' } }).message).toContain(
      'has postings; its normalBalanceType stays CREDIT',
    );
    for (const i of [{ externalId: 'a\u0000b' }, { name: 'a\ud800' }, { description: 'x\udc00' }]) {
      expect(fails(engine, UPDATE, { id: id(2), i }).code).toBe('BAD_REQUEST');
    }
    expect(
      ok(engine, UPDATE, { id: id(2), i: { description: 'two lines\nand a\ttab' } }).updateAccount.normalBalanceType,
    ).toBe('CREDIT');
    expect(fails(engine, UPDATE, { id: id(2), i: { metadata: { n: Infinity } } }).message).toContain(
      'holds the number Infinity',
    );
    // An explicit null currency is the default one, not an INTERNAL error.
    expect(ok(engine, `{ balance(accountId: "${id(2)}", currency: null) { currency } }`).balance.currency).toBe('USD');
  });

  it('a client cannot widen its own policies nor delete itself; the admin cannot be deleted; apiKey works in-process', () => {
    const CLIENT = 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }';
    const self = [
      {
        effect: 'ALLOW',
        actions: ['SELECT', 'UPDATE', 'DELETE'],
        resources: ['auth.Client'],
        assertions: { mine: 'context.document.principal == context.auth.claims.principal' },
      },
    ];
    const key = ok(engine, CLIENT, { i: { principal: 'selfsvc', name: 'Self', policies: self } }).auth.createClient
      .apiKey;
    const as = (query: string) => engine.graphql(query, null, { principal: 'selfsvc' });
    expect(
      as(
        'mutation { auth { updateClient(principal: "selfsvc", input: {policies: [{effect: ALLOW, actions: [SELECT, INSERT, UPDATE, DELETE], resources: ["*"]}]}) { client { version } } } }',
      ).errors?.[0]?.extensions?.code,
    ).toBe('ACCESS_DENIED');
    expect(
      as('mutation { auth { updateClient(principal: "selfsvc", input: {name: "Renamed"}) { client { version } } } }')
        .errors,
    ).toBeUndefined();
    expect(as('mutation { auth { deleteClient(principal: "selfsvc") { principal } } }').errors?.[0]?.message).toBe(
      'client selfsvc cannot be deleted by itself',
    );
    engine.ensureAdmin('tly_consistency-admin');
    expect(fails(engine, 'mutation { auth { deleteClient(principal: "admin") { principal } } }').message).toBe(
      'client admin cannot be deleted (it is the admin)',
    );
    // The key path of engine.graphql is the HTTP server's: bounded by the client's policies.
    expect(
      engine.graphql(
        `mutation { createAccount(input: {accountId: "${id(60)}", code: "X60", name: "x"}) { code } }`,
        null,
        { apiKey: key },
      ).errors?.[0]?.extensions?.code,
    ).toBe('ACCESS_DENIED');
    expect(
      engine.graphql('{ journal { name } }', null, { apiKey: 'tly_not-a-key' }).errors?.[0]?.extensions?.code,
    ).toBe('UNAUTHENTICATED');
  });

  it('list filters apply or are refused, never silently dropped; an empty correlation id is none', () => {
    createAccount(engine, 1);
    createAccount(engine, 2);
    createTransferCode(engine);
    ok(engine, POST, {
      input: { transactionId: id(8), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount: '1' } },
    });
    const entries = 'query($w: EntryFilter!) { entries(first: 10, where: $w) { nodes { entryId } } }';
    expect(fails(engine, entries, { w: { accountId: id(1), transactionId: id(8) } }).code).toBe('BAD_REQUEST');
    expect(fails(engine, entries, { w: { transactionId: id(8), currency: 'EUR' } }).code).toBe('BAD_REQUEST');
    expect(
      fails(
        engine,
        `{ transactions(first: 10, where: {correlationId: "${id(8)}", journalId: "${id(9)}"}) { nodes { transactionId } } }`,
      ).code,
    ).toBe('BAD_REQUEST');
    // A tran code whose correlation id template gives '' correlates the transaction with itself only.
    ok(engine, TRAN_CODE, {
      i: {
        tranCodeId: id(7),
        code: 'REF',
        params: [{ name: 'ref', type: 'STRING', default: "''" }],
        transaction: { correlationId: 'params.ref' },
        entries: [entry('DEBIT'), entry('CREDIT')],
      },
    });
    const posted = ok(
      engine,
      `mutation { postTransaction(input: {transactionId: "${id(10)}", tranCode: "REF", params: {}}) { correlationId correlated(first: 10) { nodes { transactionId } } } }`,
    );
    expect(posted.postTransaction).toEqual({
      correlationId: id(10),
      correlated: { nodes: [{ transactionId: id(10) }] },
    });
    expect(
      ok(engine, '{ transactions(first: 10, where: {correlationId: ""}) { nodes { transactionId } } }').transactions
        .nodes,
    ).toEqual([]);
  });

  it('empty correlation ids stored by earlier versions are none once the database is opened', async () => {
    const { mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const path = join(mkdtempSync(join(tmpdir(), 'tally-legacy-')), 'legacy.db');
    const old = await newEngine({ path });
    createAccount(old, 1);
    createAccount(old, 2);
    createTransferCode(old);
    for (const n of [10, 11])
      ok(old, POST, {
        input: { transactionId: id(n), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount: '1' } },
      });
    ok(old, `mutation { voidTransaction(id: "${id(11)}") { transactionId } }`);
    // What an earlier version wrote: '' as the correlation id (a void copied it), at schema version 4
    // (so without what migrations 6 to 9 add).
    old.db.exec(UNDO_MIGRATIONS_AFTER_9);
    old.db.exec(`UPDATE transactions SET correlation_id = ''; DROP TABLE settings; ALTER TABLE executions DROP COLUMN trigger_depth; ALTER TABLE executions DROP COLUMN transport;
      ALTER TABLE triggers DROP COLUMN previous_principal; DROP TABLE session_messages; DROP TABLE sessions; DROP TABLE approvals; DROP TABLE skill_versions; DROP TABLE skills; PRAGMA user_version = 4;`);
    old.close();
    const reopened = await newEngine({ path });
    const read = ok(
      reopened,
      `{ transaction(id: "${id(10)}") { correlationId correlated(first: 10) { nodes { transactionId } } } }`,
    );
    expect(read.transaction).toEqual({ correlationId: id(10), correlated: { nodes: [{ transactionId: id(10) }] } });
    // The void still correlates with the transaction it voids.
    const voided = ok(reopened, `{ transaction(id: "${id(11)}") { correlated(first: 10) { nodes { voidOf } } } }`);
    expect(voided.transaction.correlated.nodes).toEqual([{ voidOf: null }, { voidOf: id(11) }]);
    reopened.close();
  });

  it('refuses control characters in codes and names; a wrongly typed variable is BAD_REQUEST', () => {
    expect(
      fails(engine, `mutation { createAccount(input: {accountId: "${id(1)}", code: "A\\u0000B", name: "A"}) { code } }`)
        .code,
    ).toBe('BAD_REQUEST');
    const wrongType = fails(engine, 'query($n: Int!) { accounts(first: $n) { nodes { code } } }', { n: 'ten' });
    expect(wrongType.code).toBe('BAD_REQUEST');
    expect(fails(engine, 'query($n: Int!) { accounts(first: $n) { nodes { code } } }', {}).code).toBe('BAD_REQUEST');
  });
});
