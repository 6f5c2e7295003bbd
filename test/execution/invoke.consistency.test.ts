import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { id, newEngine, ok } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

/**
 * What a request acts on and as is what is committed, not a copy held in memory: versions undone by
 * a rollback, objects an in-process caller changes after handing them over, clients changed by
 * another process or after a request arrived.
 */
const dir = mkdtempSync(join(tmpdir(), 'tally-consistency-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ALLOW_ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const CREATE =
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }';
const UPDATE =
  'mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) { version } } }';
const INVOKE = `mutation($id: UUID!, $e: UUID!, $input: JSON) { actions { invokeAction(id: $id, input: {executionId: $e, actionVersion: 1, input: $input}) {
  status output error { code message } children { actionName actionVersion status output } } } }`;
const CREATE_CLIENT = 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }';
const account = (n: number, code: string) =>
  `mutation { createAccount(input: {accountId: "${id(n)}", code: "${code}", name: "x"}) { code } }`;

describe('consistency of what a request runs and runs as', () => {
  it('an unpinned tool version created by a call that rolled back is not run again by the same execution', async () => {
    const engine = await newEngine();
    const tool = (n: number, name: string, src: string, extra: Record<string, unknown> = {}) =>
      ok(engine, CREATE, {
        id: id(n),
        input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies: ALLOW_ALL, ...extra },
      });
    tool(1, 'b', "function run() { return 'b v1'; }");
    // c makes b version 2, calls it (resolving the unpinned reference), then fails: all of it rolls back.
    tool(
      2,
      'c',
      `function run() {
      graphql(${JSON.stringify(UPDATE)}, { id: '${id(1)}', input: { config: { runtime: 'javascript', src: "function run() { return 'b v2'; }" } } });
      const ran = tools.b({});
      fail('c fails after running ' + ran);
    }`,
      { tools: [{ name: 'b' }] },
    );
    tool(
      3,
      'a',
      'function run() { const c = tools.c({}, { check: false }); return { c: c.error.message, b: tools.b({}) }; }',
      { tools: [{ name: 'c' }, { name: 'b' }] },
    );
    const a = ok(engine, INVOKE, { id: id(3), e: id(10), input: {} }).actions.invokeAction;
    expect(a.output).toEqual({ c: 'c fails after running b v2', b: 'b v1' });
    expect(
      a.children.map((c: { actionName: string; actionVersion: number }) => `${c.actionName}@${c.actionVersion}`),
    ).toEqual(['c@1', 'b@1']);
    expect(engine.db.prepare('SELECT version FROM action_versions WHERE action_id = ?').pluck().all(id(1))).toEqual([
      1,
    ]);
    engine.close();
  });

  it('objects an in-process caller handed over or was handed back cannot change a stored version', async () => {
    const engine = await newEngine();
    // Created from an object the caller changes and reuses afterwards.
    const config = { runtime: 'javascript', src: "function run() { return 'first'; }" };
    ok(engine, CREATE, { id: id(1), input: { name: 'first', kind: 'tool', config } });
    config.src = "function run() { return 'second'; }";
    ok(engine, CREATE, { id: id(2), input: { name: 'second', kind: 'tool', config } });
    expect(ok(engine, INVOKE, { id: id(1), e: id(10), input: {} }).actions.invokeAction.output).toBe('first');
    // Read back, then edited by the caller (to draft a next version, say): refused, and the version is unchanged.
    const read = ok(engine, `{ actions { action(id: "${id(1)}", version: 1) { config } } }`).actions.action;
    expect(() => {
      read.config.src = "function run() { return 'edited'; }";
    }).toThrow(TypeError);
    expect(ok(engine, INVOKE, { id: id(1), e: id(11), input: {} }).actions.invokeAction.output).toBe('first');
    // The default input schema of graphql-kind actions is shared: a caller cannot change it for the next one.
    ok(engine, CREATE, { id: id(3), input: { name: 'g_one', kind: 'graphql', config: { version: 1 } } });
    const schema = ok(engine, `{ actions { action(id: "${id(3)}") { tool { inputSchema } } } }`).actions.action.tool
      .inputSchema;
    expect(() => schema.required.push('operationName')).toThrow(TypeError);
    ok(engine, CREATE, { id: id(4), input: { name: 'g_two', kind: 'graphql', config: { version: 1 } } });
    const stored = JSON.parse(
      engine.db.prepare('SELECT document FROM action_versions WHERE action_id = ?').pluck().get(id(4)) as string,
    );
    expect(stored.tool.inputSchema.required).toEqual(['query']);
    engine.close();
  });

  it("a client's policies are read inside the request's transaction: a revocation committed while it waited for the lock holds", async () => {
    const path = join(dir, 'revoke.db');
    const engine = await newEngine({ path });
    ok(engine, CREATE_CLIENT, { i: { principal: 'alice', name: 'Alice', policies: ALLOW_ALL } });
    // Another process takes the write lock, revokes alice's policies and commits 300 ms later.
    const child = spawn(
      process.execPath,
      [
        '-e',
        `
      const Database = require(${JSON.stringify(join(process.cwd(), 'node_modules/better-sqlite3'))});
      const db = new Database(${JSON.stringify(path)});
      db.pragma('busy_timeout = 5000');
      db.exec('BEGIN IMMEDIATE');
      db.prepare("UPDATE clients SET policies = '[]', version = version + 1 WHERE principal = 'alice'").run();
      console.log('locked');
      setTimeout(() => { db.exec('COMMIT'); db.close(); }, 300);
    `,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    await new Promise<void>((resolve) => child.stdout.on('data', (d) => String(d).includes('locked') && resolve()));
    const r = engine.graphql(account(55, 'AFTER-REVOKE'), null, { principal: 'alice' });
    await new Promise((resolve) => child.on('exit', resolve));
    expect(r.errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
    expect(engine.db.prepare("SELECT count(*) FROM accounts WHERE code = 'AFTER-REVOKE'").pluck().get()).toBe(0);
    engine.close();
  });

  it('an API key rotated, or its client deleted, while a request was arriving is refused with 401', async () => {
    const running = await startServer('tly_consistency-admin-key');
    const { engine, url } = running;
    const { port } = new URL(url);
    const keyOf = () =>
      ok(engine, CREATE_CLIENT, { i: { principal: 'alice', name: 'Alice', policies: ALLOW_ALL } }).auth.createClient
        .apiKey as string;
    /** Send the headers and the first bytes, run `meanwhile`, then the rest of the body. */
    const slowPost = (key: string, query: string, meanwhile: () => void) =>
      new Promise<{ status: number; body: any }>((resolve, reject) => {
        const payload = JSON.stringify({ query });
        const req = request(
          {
            host: '127.0.0.1',
            port,
            path: '/graphql',
            method: 'POST',
            headers: {
              authorization: `Bearer ${key}`,
              'content-type': 'application/json',
              'content-length': Buffer.byteLength(payload),
            },
          },
          (res) => {
            let text = '';
            res.on('data', (c) => (text += c));
            res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
          },
        );
        req.on('error', reject);
        req.write(payload.slice(0, 10));
        setTimeout(() => {
          meanwhile();
          req.end(payload.slice(10));
        }, 100);
      });
    const rotated = await slowPost(keyOf(), account(77, 'ROTATED'), () =>
      ok(engine, 'mutation { auth { updateClient(principal: "alice", input: {rotateKey: true}) { apiKey } } }'),
    );
    expect(rotated.status).toBe(401);
    expect(rotated.body.errors[0].extensions.code).toBe('UNAUTHENTICATED');
    ok(engine, 'mutation { auth { deleteClient(principal: "alice") { principal } } }');
    const deleted = await slowPost(keyOf(), account(78, 'DELETED'), () => {
      // Deleted and created again under the same name: a different client with its own key.
      ok(engine, 'mutation { auth { deleteClient(principal: "alice") { principal } } }');
      ok(engine, CREATE_CLIENT, { i: { principal: 'alice', name: 'Someone else', policies: ALLOW_ALL } });
    });
    expect(deleted.status).toBe(401);
    expect(engine.db.prepare("SELECT count(*) FROM accounts WHERE code IN ('ROTATED', 'DELETED')").pluck().get()).toBe(
      0,
    );
    await running.stop();
  });
});
