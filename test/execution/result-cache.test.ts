import { describe, expect, it } from 'vitest';
import { createAccount, createTransferCode } from '../helpers/ledger.js';
import { fails, id, newEngine, ok, ON_POSTGRES, postgresTestDatabase } from '../helpers/engine.js';

const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const INVOKE = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { invokeAction(name: $n, input: {executionId: $e, actionVersion: 1, input: $i}) {
  executionId status output cachedFrom children { kind status } } } }`;

describe('result caching for read-only tools (execution.cacheTtlMs)', () => {
  // PostgreSQL keeps no result cache (see engine.ts: another process's posting could not expire it).
  it.skipIf(ON_POSTGRES)(
    'the same version and input answer from the recorded output until a write commits or the TTL passes; each reuse is a CACHED execution',
    async () => {
      const engine = await newEngine();
      createAccount(engine, 1);
      createAccount(engine, 2);
      createTransferCode(engine);
      ok(engine, CREATE, {
        id: id(1),
        input: {
          name: 'count_transactions',
          config: {
            runtime: 'javascript',
            src: 'function run(event) { return { n: graphql("{ transactions(first: 1000) { nodes { transactionId } } }").transactions.nodes.length }; }',
          },
          tool: {
            description: 'Counts transactions.',
            inputSchema: { type: 'object', properties: { tag: { type: 'string' } } },
          },
          policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] }],
          execution: { cacheTtlMs: 300 },
        },
      });
      let n = 0;
      const call = (input: unknown = {}) =>
        ok(engine, INVOKE, { n: 'count_transactions', e: id(1000 + ++n), i: input }).actions.invokeAction;
      const first = call();
      expect(first).toMatchObject({ status: 'SUCCEEDED', output: { n: 0 }, cachedFrom: null });
      expect(first.children).toHaveLength(1);
      // Again, nothing written since: the recorded output, without running the program.
      const second = call();
      expect(second).toMatchObject({ status: 'CACHED', output: { n: 0 }, cachedFrom: first.executionId, children: [] });
      // Another input is another entry.
      expect(call({ tag: 'x' }).status).toBe('SUCCEEDED');
      // A write commits: the next call runs the program again and sees it.
      ok(engine, 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
        i: { transactionId: id(500), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount: '1' } },
      });
      const third = call();
      expect(third).toMatchObject({ status: 'SUCCEEDED', output: { n: 1 }, cachedFrom: null });
      expect(call()).toMatchObject({ status: 'CACHED', cachedFrom: third.executionId });
      // The TTL passes: it runs again.
      await new Promise((r) => setTimeout(r, 350));
      expect(call().status).toBe('SUCCEEDED');
      engine.close();
    },
  );

  it('a write by another connection to the same database is seen: SQLite expires the entry (data_version), PostgreSQL caches nothing', async () => {
    const { mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const path = ON_POSTGRES ? postgresTestDatabase() : join(mkdtempSync(join(tmpdir(), 'tally-cache-')), 'cache.db');
    const engine = await newEngine({ path });
    createAccount(engine, 1);
    createAccount(engine, 2);
    createTransferCode(engine);
    ok(engine, CREATE, {
      id: id(2),
      input: {
        name: 'count_accounts',
        config: {
          runtime: 'javascript',
          src: 'function run() { return { n: graphql("{ accounts(first: 1000) { nodes { accountId } } }").accounts.nodes.length, t: graphql("{ transactions(first: 1000) { nodes { transactionId } } }").transactions.nodes.length }; }',
        },
        policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] }],
        execution: { cacheTtlMs: 60_000 },
      },
    });
    const call = (n: number) =>
      ok(engine, INVOKE, { n: 'count_accounts', e: id(2000 + n), i: {} }).actions.invokeAction;
    expect(call(1).output).toEqual({ n: 2, t: 0 });
    expect(call(2).status).toBe(ON_POSTGRES ? 'SUCCEEDED' : 'CACHED');
    const other = await newEngine({ path });
    createAccount(other, 3);
    expect(call(3)).toMatchObject({ status: 'SUCCEEDED', output: { n: 3, t: 0 } });
    expect(call(4).status).toBe(ON_POSTGRES ? 'SUCCEEDED' : 'CACHED');
    // A posting (no cached table moves) by the other connection is seen too.
    ok(other, 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
      i: { transactionId: id(501), tranCode: 'TRANSFER', params: { from: id(1), to: id(2), amount: '1' } },
    });
    other.close();
    expect(call(5)).toMatchObject({ status: 'SUCCEEDED', output: { n: 3, t: 1 } });
    engine.close();
  });

  it('a tool whose policies allow writes cannot cache', async () => {
    const engine = await newEngine();
    const refused = fails(engine, CREATE, {
      id: id(3),
      input: {
        name: 'writes',
        config: { runtime: 'javascript', src: 'function run() { return {}; }' },
        policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT'], resources: ['financial.*'] }],
        execution: { cacheTtlMs: 1000 },
      },
    });
    expect(refused.code).toBe('BAD_REQUEST');
    expect(refused.message).toContain('cacheTtlMs');
    engine.close();
  });
});

describe('a cached answer is never another client’s', () => {
  it.skipIf(ON_POSTGRES)(
    'the same read-only tool and input, asked by two clients whose policies see different rows, answer each their own',
    async () => {
      const engine = await newEngine();
      createAccount(engine, 1);
      createAccount(engine, 2);
      ok(engine, CREATE, {
        id: id(4),
        input: {
          name: 'my_accounts',
          config: {
            runtime: 'javascript',
            src: 'function run() { return { codes: graphql("{ accounts(first: 100) { nodes { code } } }").accounts.nodes.map((a) => a.code) }; }',
          },
          policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] }],
          execution: { cacheTtlMs: 60_000 },
        },
      });
      const client = (principal: string, code: string) =>
        ok(
          engine,
          `mutation($p: [PolicyInput!]!) { auth { createClient(input: {principal: "${principal}", name: "${principal}", policies: $p}) { apiKey } } }`,
          {
            p: [
              { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
              {
                effect: 'ALLOW',
                actions: ['SELECT'],
                resources: ['financial.Account'],
                assertions: { own: `context.document.code == '${code}'` },
              },
            ],
          },
        );
      client('alice', 'ACC-1');
      client('mallory', 'ACC-2');
      const call = (principal: string, n: number) =>
        ok(engine, INVOKE, { n: 'my_accounts', e: id(3000 + n), i: {} }, principal).actions.invokeAction;
      expect(call('alice', 1)).toMatchObject({ status: 'SUCCEEDED', output: { codes: ['ACC-1'] } });
      expect(call('mallory', 2)).toMatchObject({ status: 'SUCCEEDED', output: { codes: ['ACC-2'] } });
      expect(call('alice', 3)).toMatchObject({ status: 'CACHED', output: { codes: ['ACC-1'] } });
      expect(call('mallory', 4)).toMatchObject({ status: 'CACHED', output: { codes: ['ACC-2'] } });
      engine.close();
    },
  );
});
