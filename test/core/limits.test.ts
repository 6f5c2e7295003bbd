import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS, resolveLimits } from '../../src/limits.js';
import { createAccount, createTransferCode, POST } from '../helpers/ledger.js';
import { fails, id, newEngine, ok } from '../helpers/engine.js';

const TRAN_CODE = `mutation($i: TranCodeInput!) { createTranCode(input: $i) { code } }`;

describe('limits: each is named, defaulted, configurable and enforced', () => {
  it('refuses unknown or invalid limit overrides', async () => {
    expect(() => resolveLimits({ nope: 1 } as never)).toThrow(/unknown limit "nope"/);
    expect(() => resolveLimits({ pageSizeMax: -1 })).toThrow(/non-negative integer/);
    expect(resolveLimits({}).pageSizeMax).toBe(DEFAULT_LIMITS.pageSizeMax);
  });

  it('pageSizeMax', async () => {
    const engine = await newEngine({ limits: { pageSizeMax: 10 } });
    ok(engine, '{ accounts(first: 10) { nodes { code } } }');
    const error = fails(engine, '{ accounts(first: 11) { nodes { code } } }');
    expect(error.code).toBe('LIMIT_EXCEEDED');
    expect(error.message).toContain('pageSizeMax (10)');
  });

  it('documentBytesMax', async () => {
    const engine = await newEngine({ limits: { documentBytesMax: 200 } });
    const error = fails(engine, `{ journal { name } } # ${'x'.repeat(300)}`);
    expect(error.code).toBe('LIMIT_EXCEEDED');
    expect(error.message).toContain('documentBytesMax is 200');
  });

  it('queryDepthMax, through fragments too', async () => {
    const engine = await newEngine({ limits: { queryDepthMax: 3 } });
    ok(engine, '{ journals(first: 1) { nodes { name } } }');
    const deep = `{ transactions(first: 1) { nodes { entries(first: 1) { nodes { account { code } } } } } }`;
    expect(fails(engine, deep).code).toBe('LIMIT_EXCEEDED');
    const viaFragment = `{ journals(first: 1) { ...J } } fragment J on JournalConnection { nodes { name } edges { node { name } } }`;
    expect(fails(engine, viaFragment).message).toContain('queryDepthMax is 3');
  });

  it('documentCacheMax and celCacheMax bound their caches', async () => {
    const engine = await newEngine({ limits: { documentCacheMax: 3, celCacheMax: 3 } });
    for (let i = 0; i < 10; i++) ok(engine, `mutation { evaluate(expression: "${i} + 1") }`);
    expect(engine.stats().documentCacheSize).toBe(3);
    expect(engine.stats().celCacheSize).toBe(3);
  });

  it('recordCacheMax bounds the record caches (tran codes by code, journals, action versions)', async () => {
    const engine = await newEngine({ limits: { recordCacheMax: 2 } });
    createAccount(engine, 1);
    createAccount(engine, 2);
    for (let i = 0; i < 5; i++) createTransferCode(engine, `T${i}`, id(9000 + i));
    for (let i = 0; i < 5; i++) {
      ok(engine, POST, {
        input: { transactionId: id(100 + i), tranCode: `T${i}`, params: { from: id(1), to: id(2), amount: '1' } },
      });
      expect(engine.stats().recordCacheSize).toBeLessThanOrEqual(2);
    }
    expect(engine.stats().recordCacheSize).toBeGreaterThan(0);
    // Action versions (and their parsed documents) too.
    for (let i = 0; i < 5; i++) {
      ok(
        engine,
        'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
        {
          id: id(8000 + i),
          input: {
            name: `echo_${i}`,
            kind: 'tool',
            config: { runtime: 'javascript', src: 'function run(e) { return e.data; }' },
          },
        },
      );
      ok(
        engine,
        `mutation { actions { invokeAction(id: "${id(8000 + i)}", input: {executionId: "${id(8100 + i)}", actionVersion: 1, input: {}}) { status } } }`,
      );
      expect(engine.stats().recordCacheSize).toBeLessThanOrEqual(2);
    }
  });

  it('celExpressionLengthMax', async () => {
    const engine = await newEngine({ limits: { celExpressionLengthMax: 20 } });
    ok(engine, 'mutation { evaluate(expression: "1 + 2") }');
    const error = fails(engine, `mutation { evaluate(expression: "${'1 + '.repeat(10)}1") }`);
    expect(error.code).toBe('LIMIT_EXCEEDED');
    expect(error.message).toContain('celExpressionLengthMax (20)');
  });

  it('entriesPerTransactionMax, at definition and at posting', async () => {
    const engine = await newEngine({ limits: { entriesPerTransactionMax: 2 } });
    const entry = { accountId: `'${id(1)}'`, units: '1', currency: "'USD'", direction: 'DEBIT' };
    const error = fails(engine, TRAN_CODE, {
      i: { tranCodeId: id(1), code: 'BIG', transaction: {}, entries: [entry, entry, entry] },
    });
    expect(error.code).toBe('LIMIT_EXCEEDED');
    expect(error.message).toContain('entriesPerTransactionMax is 2');
  });

  it('tranCodeParamsMax', async () => {
    const engine = await newEngine({ limits: { tranCodeParamsMax: 2 } });
    const entry = { accountId: `'${id(1)}'`, units: '1', currency: "'USD'", direction: 'DEBIT' };
    const params = [{ name: 'a' }, { name: 'b' }, { name: 'c' }];
    expect(
      fails(engine, TRAN_CODE, { i: { tranCodeId: id(1), code: 'P', params, transaction: {}, entries: [entry] } })
        .message,
    ).toContain('tranCodeParamsMax is 2');
  });

  it('jsonBytesMax, for metadata and for params', async () => {
    const engine = await newEngine({ limits: { jsonBytesMax: 100 } });
    const error = fails(
      engine,
      `mutation($m: JSON) { createAccount(input: {accountId: "${id(1)}", code: "A", name: "A", metadata: $m}) { code } }`,
      {
        m: { note: 'x'.repeat(200) },
      },
    );
    expect(error.code).toBe('LIMIT_EXCEEDED');
    expect(error.message).toContain('jsonBytesMax is 100');
    createAccount(engine, 2);
    createAccount(engine, 3);
    createTransferCode(engine);
    expect(
      fails(engine, POST, {
        input: {
          transactionId: id(9),
          tranCode: 'TRANSFER',
          params: { from: id(2), to: id(3), amount: '1', memo: 'y'.repeat(200) },
        },
      }).code,
    ).toBe('LIMIT_EXCEEDED');
  });

  it("jsonBytesMax bounds an action version besides its program; policiesMax its policies and a client's", async () => {
    const engine = await newEngine({ limits: { jsonBytesMax: 2000, policiesMax: 3 } });
    const CREATE_ACTION =
      'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }';
    const action = (n: number, extra: Record<string, unknown>) => ({
      id: id(n),
      input: {
        name: `a${n}`,
        kind: 'tool',
        config: { runtime: 'javascript', src: `function run() { return '${'p'.repeat(3000)}'; }` },
        ...extra,
      },
    });
    // A program longer than jsonBytesMax is fine (programBytesMax bounds it); a long description is not.
    ok(engine, CREATE_ACTION, action(1, { tool: { description: 'short' } }));
    const long = fails(engine, CREATE_ACTION, action(2, { tool: { description: 'd'.repeat(3000) } }));
    expect(long).toMatchObject({ code: 'LIMIT_EXCEEDED', message: expect.stringContaining('besides its program') });
    const policy = { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] };
    ok(engine, CREATE_ACTION, action(3, { policies: [policy, policy, policy] }));
    expect(fails(engine, CREATE_ACTION, action(4, { policies: [policy, policy, policy, policy] })).message).toBe(
      '4 policies; policiesMax is 3',
    );
    const CLIENT = 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }';
    expect(
      fails(engine, CLIENT, { i: { principal: 'many', name: 'm', policies: [policy, policy, policy, policy] } }).code,
    ).toBe('LIMIT_EXCEEDED');
    expect(
      ok(engine, CLIENT, { i: { principal: 'few', name: 'f', policies: [policy] } }).auth.createClient.apiKey,
    ).toMatch(/^tly_/);
    expect(engine.db.prepare('SELECT count(*) FROM actions').pluck().get()).toBe(2);
    // A tool made under a higher limit can still get a new program, but cannot grow.
    const { mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const path = join(mkdtempSync(join(tmpdir(), 'tally-limits-')), 'grown.db');
    const roomy = await newEngine({ path });
    ok(roomy, CREATE_ACTION, action(5, { tool: { description: 'd'.repeat(3000) } }));
    roomy.close();
    const strict = await newEngine({ path, limits: { jsonBytesMax: 2000 } });
    const UPDATE_ACTION =
      'mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) { version } } }';
    expect(
      ok(strict, UPDATE_ACTION, {
        id: id(5),
        input: { config: { runtime: 'javascript', src: 'function run() { return 2; }' } },
      }).actions.updateAction.version,
    ).toBe(2);
    expect(fails(strict, UPDATE_ACTION, { id: id(5), input: { tool: { description: 'd'.repeat(3500) } } }).code).toBe(
      'LIMIT_EXCEEDED',
    );
    strict.close();
  });

  it('decimalFractionDigitsMax and decimalIntegerDigitsMax', async () => {
    const engine = await newEngine({ limits: { decimalFractionDigitsMax: 4, decimalIntegerDigitsMax: 6 } });
    createAccount(engine, 1);
    createAccount(engine, 2);
    createTransferCode(engine);
    const post = (amount: string) =>
      engine.graphql(POST, {
        input: { transactionId: id(9), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount } },
      });
    expect(post('0.12345').errors?.[0]?.message).toContain('decimalFractionDigitsMax is 4');
    expect(post('1234567').errors?.[0]?.message).toContain('decimalIntegerDigitsMax is 6');
    expect(post('123456.1234').errors).toBeUndefined();
  });

  it('busyTimeoutMs: a writer that cannot get the lock in time fails with BUSY (retryable) and writes nothing', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'tally-busy-')), 'busy.db');
    const engine = await newEngine({ path, limits: { busyTimeoutMs: 50 } });
    const other = new Database(path);
    other.exec('BEGIN IMMEDIATE');
    const started = Date.now();
    const result = engine.graphql(
      `mutation { createAccount(input: {accountId: "${id(1)}", code: "A", name: "A"}) { code } }`,
    );
    expect(result.errors?.[0]?.extensions).toMatchObject({ code: 'BUSY', retryable: true });
    expect(Date.now() - started).toBeGreaterThanOrEqual(40);
    other.exec('ROLLBACK');
    other.close();
    ok(engine, `mutation { createAccount(input: {accountId: "${id(1)}", code: "A", name: "A"}) { code } }`);
    engine.close();
  });
});
