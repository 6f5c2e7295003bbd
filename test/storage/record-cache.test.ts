import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/storage/database.js';
import { CacheEpoch, RecordCache, watchCachedTables } from '../../src/storage/record-cache.js';
import { TransactionManager } from '../../src/storage/transaction.js';
import { createAccount, createTransferCode, POST, twoAccountsAndTransfer } from '../helpers/ledger.js';
import { fails, id, newEngine, ok } from '../helpers/engine.js';

/**
 * Postings read the tran code and the journal from caches. A cached row must never outlive the row:
 * changes by this engine, changes undone by a rollback, and changes committed by another connection
 * are all seen by the next posting.
 */
const dir = mkdtempSync(join(tmpdir(), 'tally-cache-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const post = (n: number, tranCode = 'TRANSFER') => ({
  input: { transactionId: id(1000 + n), tranCode, params: { from: id(1), to: id(2), amount: '1.00' } },
});
const LOCK_CODE = `mutation { lockTranCode(id: "${id(9000)}") { status } }`;

describe('record caches', () => {
  it('a tran code locked by another connection is refused at the next posting', async () => {
    const path = join(dir, 'other.db');
    const engine = await newEngine({ path });
    twoAccountsAndTransfer(engine);
    ok(engine, POST, post(1)); // the tran code row is now cached
    const other = new Database(path);
    other.prepare("UPDATE tran_codes SET status = 'LOCKED' WHERE code = 'TRANSFER'").run();
    expect(fails(engine, POST, post(2)).code).toBe('TRAN_CODE_LOCKED');
    other.prepare("UPDATE tran_codes SET status = 'ACTIVE' WHERE code = 'TRANSFER'").run();
    ok(engine, POST, post(3));
    // A journal locked elsewhere, too.
    other.prepare("UPDATE journals SET status = 'LOCKED'").run();
    expect(fails(engine, POST, post(4)).code).toBe('JOURNAL_LOCKED');
    other.close();
    engine.close();
  });

  it('a lock in the same request is seen by a posting after it; a rolled-back lock is forgotten', async () => {
    const engine = await newEngine();
    twoAccountsAndTransfer(engine);
    ok(engine, POST, post(1));
    // Lock, then post in one document: the posting sees the lock (and the request rolls back).
    const both = engine.graphql(
      `mutation($input: TransactionInput!) { lockTranCode(id: "${id(9000)}") { status } postTransaction(input: $input) { transactionId } }`,
      post(2),
    );
    expect(both.errors?.[0]?.extensions?.code).toBe('TRAN_CODE_LOCKED');
    // The lock was rolled back with the request: posting works again.
    ok(engine, POST, post(3));
    // A @dryRun lock leaves nothing behind either.
    ok(engine, `mutation @dryRun { lockTranCode(id: "${id(9000)}") { status } }`);
    ok(engine, POST, post(4));
    // A real lock is seen at once.
    ok(engine, LOCK_CODE);
    expect(fails(engine, POST, post(5)).code).toBe('TRAN_CODE_LOCKED');
    engine.close();
  });

  it('a lock undone by a failed tool call (savepoint rollback) is forgotten', async () => {
    const engine = await newEngine();
    twoAccountsAndTransfer(engine);
    ok(engine, POST, post(1));
    ok(
      engine,
      'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
      {
        id: id(7000),
        input: {
          name: 'lock_then_fail',
          kind: 'tool',
          // Lock, then post: the failing post caches the LOCKED row before the call is rolled back.
          config: {
            runtime: 'javascript',
            src: `function run() {
            graphql('mutation { lockTranCode(id: "${id(9000)}") { status } }');
            graphql('mutation($input: TransactionInput!) { postTransaction(input: $input) { transactionId } }', ${JSON.stringify(post(9))});
          }`,
          },
          policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }],
        },
      },
    );
    const r = ok(
      engine,
      `mutation($input: TransactionInput!) {
      actions { invokeAction(id: "${id(7000)}", input: {executionId: "${id(7001)}", actionVersion: 1, input: {}}) { status invocation { error { code } } } }
      postTransaction(input: $input) { transactionId } }`,
      post(2),
    );
    expect(r.actions.invokeAction).toEqual({ status: 'FAILED', invocation: { error: { code: 'TRAN_CODE_LOCKED' } } });
    expect(r.postTransaction.transactionId).toBe(id(1002));
    engine.close();
  });

  it('a new tran code with a code seen before as missing is found', async () => {
    const engine = await newEngine();
    createAccount(engine, 1);
    createAccount(engine, 2);
    expect(fails(engine, POST, post(1, 'LATER')).code).toBe('NOT_FOUND');
    createTransferCode(engine, 'LATER', id(9100));
    ok(engine, POST, post(1, 'LATER'));
    engine.close();
  });

  it('a version seen only inside a rolled-back request is not reused once another connection commits that number', async () => {
    const path = join(dir, 'versions.db');
    const engine = await newEngine({ path });
    twoAccountsAndTransfer(engine);
    const update = (units: string, dryRun: boolean) =>
      `mutation($input: TransactionInput!) ${dryRun ? '@dryRun ' : ''}{
        updateTranCode(id: "${id(9000)}", input: {entries: [
          {accountId: "params.from", units: "${units}", currency: "'USD'", direction: "DEBIT"},
          {accountId: "params.to", units: "${units}", currency: "'USD'", direction: "CREDIT"}]}) { version }
        postTransaction(input: $input) { transactionId } }`;
    // Version 2 (amount × 100) is compiled and used inside a @dryRun, then rolled back.
    ok(engine, update('params.amount * decimal(\\"100\\")', true), post(1));
    // Another engine on the file commits a different version 2 (amount × 1).
    const other = await newEngine({ path, checkpointIntervalMs: 0 });
    ok(other, update('params.amount', false), post(2));
    other.close();
    const posted = ok(
      engine,
      `mutation { postTransaction(input: {transactionId: "${id(1003)}", tranCode: "TRANSFER", tranCodeVersion: 2,
      params: {from: "${id(1)}", to: "${id(2)}", amount: "1.00"}}) { entries(first: 2) { nodes { amount { units } } } } }`,
    );
    expect(posted.postTransaction.entries.nodes.map((n: { amount: { units: string } }) => n.amount.units)).toEqual([
      '1.00',
      '1.00',
    ]);
    engine.close();
  });

  it("writes and rollbacks made on the connection outside the engine's transactions are seen too", async () => {
    const engine = await newEngine();
    twoAccountsAndTransfer(engine);
    ok(engine, LOCK_CODE);
    expect(fails(engine, POST, post(1)).code).toBe('TRAN_CODE_LOCKED');
    // A caller's own transaction around ledger calls: unlock, post, then roll back.
    expect(() =>
      engine.db.transaction(() => {
        engine.ledger.updateTranCode(id(9000), { status: 'ACTIVE' });
        engine.ledger.postTransaction(post(2).input);
        throw new Error('roll back');
      })(),
    ).toThrow('roll back');
    expect(fails(engine, POST, post(3)).code).toBe('TRAN_CODE_LOCKED');
    // A write straight on the connection (no engine transaction) is seen by the next request.
    engine.db.prepare("UPDATE tran_codes SET status = 'ACTIVE'").run();
    ok(engine, POST, post(4));
    engine.db.prepare("UPDATE journals SET status = 'LOCKED'").run();
    expect(fails(engine, POST, post(5)).code).toBe('JOURNAL_LOCKED');
    engine.close();
  });

  it('a write to a cached table straight on the connection, inside a transaction, is seen at once', () => {
    const db = openDatabase({ path: ':memory:', busyTimeoutMs: 100 });
    const epoch = new CacheEpoch();
    watchCachedTables(db, epoch);
    const transactions = new TransactionManager(db, epoch);
    const journals = new RecordCache<string>(epoch, 10);
    const status = db.prepare<[], string>("SELECT status FROM journals WHERE code = 'DEFAULT'").pluck();
    const read = () => journals.get('DEFAULT', () => status.get() as string);
    const seen = transactions.run('write', () => {
      const before = read();
      db.prepare("UPDATE journals SET status = 'LOCKED' WHERE code = 'DEFAULT'").run();
      return { value: [before, read()], commit: true };
    });
    expect(seen).toEqual(['ACTIVE', 'LOCKED']);
    db.close();
  });

  it('an action version locked by another connection, in the same request, or in a rolled-back request is seen as it stands', async () => {
    const path = join(dir, 'actions.db');
    const engine = await newEngine({ path });
    ok(
      engine,
      'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
      {
        id: id(7100),
        input: {
          name: 'echo',
          kind: 'tool',
          config: { runtime: 'javascript', src: 'function run(e) { return e.data; }' },
        },
      },
    );
    const invoke = (n: number) =>
      `actions { invokeAction(id: "${id(7100)}", input: {executionId: "${id(7200 + n)}", actionVersion: 1, input: {n: ${n}}}) { status } }`;
    const lock = `actions { lockAction(id: "${id(7100)}", version: 1) { version } }`;
    expect(ok(engine, `mutation { ${invoke(1)} }`).actions.invokeAction.status).toBe('SUCCEEDED'); // the version is cached
    // Locked by another connection: refused at the next invoke.
    const other = new Database(path);
    other.prepare("UPDATE action_versions SET status = 'LOCKED'").run();
    expect(fails(engine, `mutation { ${invoke(2)} }`).code).toBe('VERSION_LOCKED');
    other.prepare("UPDATE action_versions SET status = 'ACTIVE'").run();
    other.close();
    expect(ok(engine, `mutation { ${invoke(3)} }`).actions.invokeAction.status).toBe('SUCCEEDED');
    // Locked earlier in the same request: the invoke after it is refused (and the request rolls back).
    const both = engine.graphql(`mutation { a: ${lock} b: ${invoke(4)} }`);
    expect(both.errors?.[0]?.extensions?.code).toBe('VERSION_LOCKED');
    // That lock was rolled back with the request: the version runs again.
    expect(ok(engine, `mutation { ${invoke(5)} }`).actions.invokeAction.status).toBe('SUCCEEDED');
    ok(engine, `mutation { ${lock} }`);
    expect(fails(engine, `mutation { ${invoke(6)} }`).code).toBe('VERSION_LOCKED');
    engine.close();
  });

  it('a version number first seen in a rolled-back request runs the program another connection committed under it', async () => {
    const path = join(dir, 'redo.db');
    const engine = await newEngine({ path });
    const create = (src: string) => ({
      id: id(7300),
      input: {
        name: 'which',
        kind: 'tool',
        config: { runtime: 'javascript', src: `function run() { return '${src}'; }` },
      },
    });
    const CREATE =
      'mutation($id: UUID!, $input: ActionInput!) @dryRun { actions { createAction(id: $id, input: $input) { version } } }';
    ok(engine, CREATE, create('dry run'));
    const other = await newEngine({ path });
    ok(other, CREATE.replace(' @dryRun', ''), create('committed'));
    other.close();
    const r = ok(
      engine,
      `mutation { actions { invokeAction(id: "${id(7300)}", input: {executionId: "${id(7301)}", actionVersion: 1, input: {}}) { status invocation { output } } } }`,
    );
    expect(r.actions.invokeAction).toEqual({ status: 'SUCCEEDED', invocation: { output: 'committed' } });
    engine.close();
  });

  it('a version number first seen in a rolled-back request validates with the schema another connection committed under it', async () => {
    const path = join(dir, 'schema.db');
    const engine = await newEngine({ path });
    const create = (property: string, type: string) => ({
      id: id(7400),
      input: {
        name: 'checked',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run(e) { return 1; }' },
        tool: {
          description: 'x',
          inputSchema: {
            type: 'object',
            properties: { [property]: { type } },
            required: [property],
            additionalProperties: false,
          },
        },
      },
    });
    const CREATE =
      'mutation($id: UUID!, $input: ActionInput!) @dryRun { actions { createAction(id: $id, input: $input) { version } } }';
    ok(engine, CREATE, create('a', 'string'));
    const other = await newEngine({ path });
    ok(other, CREATE.replace(' @dryRun', ''), create('b', 'number'));
    other.close();
    const r = ok(
      engine,
      `mutation { actions { invokeAction(id: "${id(7400)}", input: {executionId: "${id(7401)}", actionVersion: 1, input: {b: 1}}) { status invocation { output error { message } } } } }`,
    );
    expect(r.actions.invokeAction).toEqual({ status: 'SUCCEEDED', invocation: { output: 1, error: null } });
    engine.close();
  });

  it('a tool schema is compiled once, however its version is reached (pinned, unpinned, started)', async () => {
    const { Ajv } = await import('ajv');
    const compile = Ajv.prototype.compile;
    let compiles = 0;
    Ajv.prototype.compile = function (this: InstanceType<typeof Ajv>, ...args: Parameters<typeof compile>) {
      compiles++;
      return compile.apply(this, args);
    } as typeof compile;
    try {
      const engine = await newEngine();
      const schema = { type: 'object', properties: { n: { type: 'integer' } } };
      ok(
        engine,
        'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
        {
          id: id(7500),
          input: {
            name: 'callee',
            kind: 'tool',
            config: { runtime: 'javascript', src: 'function run(e) { return e.data.n; }' },
            tool: { description: 'x', inputSchema: schema },
          },
        },
      );
      ok(
        engine,
        'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
        {
          id: id(7501),
          input: {
            name: 'caller',
            kind: 'tool',
            config: { runtime: 'javascript', src: 'function run(e) { return tools.callee({ n: e.data.n }); }' },
            tools: [{ name: 'callee' }],
          },
        },
      );
      const before = compiles;
      for (let n = 0; n < 20; n++) {
        ok(
          engine,
          `mutation { actions { invokeAction(id: "${id(7501)}", input: {executionId: "${id(7600 + n)}", actionVersion: 1, input: {n: ${n}}}) { status } } }`,
        );
        ok(
          engine,
          `mutation { actions { startAction(id: "${id(7500)}", input: {executionId: "${id(7700 + n)}", input: {n: ${n}}}) { status } } }`,
        );
      }
      // The stored documents are parsed once each: one compile per schema object (the caller's default schema, the callee's).
      expect(compiles - before).toBeLessThanOrEqual(2);
      engine.close();
    } finally {
      Ajv.prototype.compile = compile;
    }
  });
});
