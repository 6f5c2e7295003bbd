import { beforeEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { count, id, newEngine, ok } from '../helpers/engine.js';
import { createAccount } from '../helpers/ledger.js';

let engine: Engine;
let seq = 0;
const eid = () => id(700_000 + ++seq);

const EVERYTHING = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const ADMIN_KEY = 'tly_authority-grant-admin';
const CREATE_CLIENT = `mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey client { principal } } } }`;
const UPDATE_CLIENT = `mutation($p: String!, $i: ClientUpdateInput!) { auth { updateClient(principal: $p, input: $i) { apiKey client { principal } } } }`;
const CREATE_ACTION = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const INVOKE = `mutation($name: String!, $e: UUID!, $input: JSON) { actions { invokeAction(name: $name, input: {executionId: $e, actionVersion: 1, input: $input}) {
  status output error { code message }
  children { actionName actionVersion status error { code message } } } } }`;

/** A request as a client (by API key, as an attacker over HTTP would send it); errors are returned, not thrown. */
function as(apiKey: string, query: string, variables?: Record<string, unknown>) {
  const result = engine.graphql(query, variables, { apiKey });
  const error = result.errors?.[0];
  return {
    data: result.data as any,
    code: error?.extensions?.code as string | undefined,
    message: error?.message,
    hint: error?.extensions?.hint as string | undefined,
    details: (error?.extensions as any)?.details,
  };
}

/** Created by the engine itself (a deploy): returns the new client's key. */
function client(principal: string, policies: unknown[]): string {
  return ok(engine, CREATE_CLIENT, { i: { principal, name: principal, policies } }).auth.createClient.apiKey;
}

function tool(n: number, name: string, src: string, policies: unknown[], extra: Record<string, unknown> = {}): void {
  ok(engine, CREATE_ACTION, {
    id: id(n),
    input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies, ...extra },
  });
}

function invokeAs(apiKey: string | undefined, name: string, input: unknown = {}) {
  const result = engine.graphql(INVOKE, { name, e: eid(), input }, apiKey === undefined ? {} : { apiKey });
  if (result.errors)
    return {
      status: 'REFUSED',
      error: { code: result.errors[0]!.extensions?.code, message: result.errors[0]!.message },
    } as any;
  return (result.data as any).actions.invokeAction;
}

/** Whether the admin's key still opens the admin client. */
const adminKeyWorks = () =>
  engine.graphql('{ auth { whoami { principal } } }', null, { apiKey: ADMIN_KEY }).data !== null &&
  engine.authenticate(ADMIN_KEY) === 'admin';

beforeEach(async () => {
  engine = await newEngine();
  engine.ensureAdmin(ADMIN_KEY);
});

describe('a client grants only what its whole stack holds (review F7, case 7)', () => {
  it('a helpdesk allowed to create only viewer_* clients cannot mint one with * and take over the admin', () => {
    const helpdesk = client('helpdesk', [
      {
        effect: 'ALLOW',
        actions: ['INSERT'],
        resources: ['auth.Client'],
        assertions: { viewers: "context.document.principal.startsWith('viewer_')" },
      },
    ]);
    // The attack: a "viewer" with every right, then its key rotates the admin's.
    const minted = as(helpdesk, CREATE_CLIENT, { i: { principal: 'viewer_x', name: 'x', policies: EVERYTHING } });
    const viewerKey: string | undefined = minted.data?.auth?.createClient?.apiKey;
    if (viewerKey) as(viewerKey, UPDATE_CLIENT, { p: 'admin', i: { rotateKey: true } });

    expect(adminKeyWorks(), 'the admin key still opens the admin client').toBe(true);
    expect(minted.code).toBe('ACCESS_DENIED');
    expect(minted.message).toBe(
      'policies[0] would grant SELECT on *, which client helpdesk does not hold: none of its policies allows SELECT on a pattern covering *',
    );
    expect(minted.hint).toContain('A client can grant only what it holds');
    expect(minted.details).toEqual({ policy: 0, action: 'SELECT', resource: '*', layer: 'client helpdesk' });
    expect(viewerKey).toBeUndefined();
    expect(
      engine.graphql('{ auth { client(principal: "viewer_x") { principal } } }').errors?.[0]?.extensions?.code,
    ).toBe('NOT_FOUND');
    // Even its own right (INSERT on auth.Client) cannot be handed on without its condition.
    const insertOnly = as(helpdesk, CREATE_CLIENT, {
      i: {
        principal: 'viewer_y',
        name: 'y',
        policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['auth.Client'] }],
      },
    });
    expect(insertOnly.message).toContain(
      'its policy 1 allows it only under assertions the granted policy does not repeat',
    );
    // The assertion is still enforced: no other principal at all.
    expect(as(helpdesk, CREATE_CLIENT, { i: { principal: 'root2', name: 'r', policies: [] } }).message).toBe(
      'INSERT on auth.Client refused by client helpdesk: no policy allows it',
    );
  });

  it('UPDATE on clients other than admin cannot give one * plus rotateKey, nor take the key of a wider client', () => {
    const desk = client('desk', [
      {
        effect: 'ALLOW',
        actions: ['SELECT', 'UPDATE'],
        resources: ['auth.Client'],
        assertions: { notAdmin: "context.document.principal != 'admin'" },
      },
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
    ]);
    client('victim', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.Account'] }]);
    client('ops', EVERYTHING);
    // The attack: widen another client, take its new key, rotate the admin's with it.
    const widened = as(desk, UPDATE_CLIENT, { p: 'victim', i: { policies: EVERYTHING, rotateKey: true } });
    const stolenKey: string | undefined = widened.data?.auth?.updateClient?.apiKey;
    if (stolenKey) as(stolenKey, UPDATE_CLIENT, { p: 'admin', i: { rotateKey: true } });
    // Or take over a client that already holds more: rotating its key hands its authority over.
    const taken = as(desk, UPDATE_CLIENT, { p: 'ops', i: { rotateKey: true } });
    const opsKey: string | undefined = taken.data?.auth?.updateClient?.apiKey;
    if (opsKey) as(opsKey, UPDATE_CLIENT, { p: 'admin', i: { rotateKey: true } });

    expect(adminKeyWorks(), 'the admin key still opens the admin client').toBe(true);
    expect(widened.code).toBe('ACCESS_DENIED');
    expect(widened.message).toContain('policies[0] would grant SELECT on *, which client desk does not hold');
    expect(stolenKey).toBeUndefined();
    expect(taken.code).toBe('ACCESS_DENIED');
    expect(taken.message).toContain('rotateKey hands over the policies of client ops');
    expect(opsKey).toBeUndefined();
    expect(
      ok(engine, '{ auth { client(principal: "victim") { policies { resources } version } } }').auth.client,
    ).toEqual({ policies: [{ resources: ['financial.Account'] }], version: 1 });
    // What desk does hold it may still do: rename, rotate the key of a client within its authority, narrow.
    expect(
      as(desk, UPDATE_CLIENT, { p: 'victim', i: { name: 'Victim', rotateKey: true } }).data.auth.updateClient.apiKey,
    ).toMatch(/^tly_/);
    expect(
      as(desk, UPDATE_CLIENT, {
        p: 'ops',
        i: { policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.Entry'] }] },
      }).code,
    ).toBeUndefined();
    expect(as(desk, UPDATE_CLIENT, { p: 'admin', i: { name: 'x' } }).message).toBe(
      'UPDATE on auth.Client refused by client desk: no policy allows it',
    );
  });

  it('a helpdesk holding SELECT on financial.* creates viewer clients with SELECT on financial.Account, and nothing more', () => {
    createAccount(engine, 1);
    const helpdesk = client('helpdesk', [
      {
        effect: 'ALLOW',
        actions: ['INSERT'],
        resources: ['auth.Client'],
        assertions: { viewers: "context.document.principal.startsWith('viewer_')" },
      },
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
      { effect: 'DENY', actions: ['SELECT'], resources: ['financial.Entry'] },
    ]);
    const made = as(helpdesk, CREATE_CLIENT, {
      i: {
        principal: 'viewer_a',
        name: 'A',
        policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.Account', 'financial.Balance.*'] }],
      },
    });
    expect(made.code).toBeUndefined();
    expect(as(made.data.auth.createClient.apiKey, `{ account(id: "${id(1)}") { code } }`).data).toEqual({
      account: { code: 'ACC-1' },
    });
    // A narrower condition of its own is fine (assertions only narrow an ALLOW).
    const conditional = [
      {
        effect: 'ALLOW',
        actions: ['SELECT'],
        resources: ['financial.Account'],
        assertions: { mine: "context.document.code == 'ACC-1'" },
      },
    ];
    expect(
      as(helpdesk, CREATE_CLIENT, { i: { principal: 'viewer_b', name: 'B', policies: conditional } }).code,
    ).toBeUndefined();
    // The whole of financial.* would escape its DENY on entries, unless the grant repeats it.
    const wide = as(helpdesk, CREATE_CLIENT, {
      i: {
        principal: 'viewer_c',
        name: 'C',
        policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] }],
      },
    });
    expect(wide.message).toBe(
      'policies[0] would grant SELECT on financial.*, which client helpdesk does not hold: its policy 3 denies SELECT on financial.Entry, and the granted policies do not repeat that DENY',
    );
    const repeated = [
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
      { effect: 'DENY', actions: ['SELECT'], resources: ['financial.Entry'] },
    ];
    expect(
      as(helpdesk, CREATE_CLIENT, { i: { principal: 'viewer_c', name: 'C', policies: repeated } }).code,
    ).toBeUndefined();
    // Writing, or reading what it may not read, is refused; DENYs alone are always fine.
    expect(
      as(helpdesk, CREATE_CLIENT, {
        i: {
          principal: 'viewer_d',
          name: 'D',
          policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT'], resources: ['financial.Account'] }],
        },
      }).details,
    ).toEqual({
      policy: 0,
      action: 'INSERT',
      resource: 'financial.Account',
      layer: 'client helpdesk',
    });
    expect(
      as(helpdesk, CREATE_CLIENT, {
        i: {
          principal: 'viewer_e',
          name: 'E',
          policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['actions.Execution'] }],
        },
      }).code,
    ).toBe('ACCESS_DENIED');
    expect(
      as(helpdesk, CREATE_CLIENT, {
        i: { principal: 'viewer_f', name: 'F', policies: [{ effect: 'DENY', actions: ['DELETE'], resources: ['*'] }] },
      }).code,
    ).toBeUndefined();
  });

  it('an assertion about context.auth cannot be handed on: it would mean something else for the new client', () => {
    const desk = client('desk', [
      { effect: 'ALLOW', actions: ['INSERT'], resources: ['auth.Client'] },
      {
        effect: 'ALLOW',
        actions: ['SELECT'],
        resources: ['financial.*'],
        assertions: { me: "context.auth.claims.principal == 'desk'" },
      },
    ]);
    const repeated = [
      {
        effect: 'ALLOW',
        actions: ['SELECT'],
        resources: ['financial.*'],
        assertions: { me: "context.auth.claims.principal == 'desk'" },
      },
    ];
    expect(as(desk, CREATE_CLIENT, { i: { principal: 'v', name: 'v', policies: repeated } }).message).toContain(
      'or that read more than context.document',
    );
  });

  it('every tool on the stack bounds the grant: a client with * creating clients through a narrow tool', () => {
    const admin2 = client('admin2', EVERYTHING);
    tool(
      10,
      'onboard',
      `function run(e) {
      return graphql('mutation($i: ClientInput!) { auth { createClient(input: $i) { client { principal } } } }', { i: e.data }).auth.createClient.client.principal;
    }`,
      [
        { effect: 'ALLOW', actions: ['INSERT'], resources: ['auth.Client'] },
        { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
      ],
    );
    const reader = invokeAs(admin2, 'onboard', {
      principal: 'reader',
      name: 'r',
      policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.Account'] }],
    });
    expect(reader).toMatchObject({ status: 'SUCCEEDED', output: 'reader' });
    const writer = invokeAs(admin2, 'onboard', {
      principal: 'writer',
      name: 'w',
      policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['financial.Account'] }],
    });
    expect(writer.error).toEqual({
      code: 'ACCESS_DENIED',
      message: expect.stringContaining('which tool onboard@1 does not hold'),
    });
    expect(count(engine, 'clients')).toBe(3);
  });

  it('the engine itself and the admin grant anything; a client still cannot change its own policies or delete itself, nor anyone the admin', () => {
    expect(client('any', EVERYTHING)).toMatch(/^tly_/);
    expect(
      as(ADMIN_KEY, CREATE_CLIENT, { i: { principal: 'ops', name: 'ops', policies: EVERYTHING } }).code,
    ).toBeUndefined();
    const ops = as(ADMIN_KEY, UPDATE_CLIENT, { p: 'ops', i: { rotateKey: true } }).data.auth.updateClient
      .apiKey as string;
    expect(as(ops, UPDATE_CLIENT, { p: 'ops', i: { policies: [] } }).message).toBe(
      'client ops cannot change its own policies',
    );
    expect(as(ops, 'mutation { auth { deleteClient(principal: "ops") { principal } } }').message).toBe(
      'client ops cannot be deleted by itself',
    );
    expect(as(ops, 'mutation { auth { deleteClient(principal: "admin") { principal } } }').message).toBe(
      'client admin cannot be deleted (it is the admin)',
    );
    // Its own key it may rotate: that hands over nothing it does not hold.
    expect(as(ops, UPDATE_CLIENT, { p: 'ops', i: { rotateKey: true } }).data.auth.updateClient.apiKey).toMatch(/^tly_/);
  });
});

describe('a nested tools.x() call is authorized like invoking x (conformance T35)', () => {
  const INNER = `function run() {
    graphql('mutation { createAccount(input: {accountId: "${id(77)}", code: "inner-ran", name: "inner ran"}) { code } }');
    return 'inner ran';
  }`;

  beforeEach(() => {
    tool(20, 'inner', INNER, EVERYTHING);
    tool(21, 'outer', 'function run() { return tools.inner({}); }', EVERYTHING, { tools: [{ name: 'inner' }] });
    tool(
      22,
      'outer_catch',
      'function run() { const r = tools.inner({}, { check: false }); return { ok: r.ok, code: r.error && r.error.code }; }',
      EVERYTHING,
      { tools: [{ name: 'inner' }] },
    );
    tool(
      23,
      'outer2',
      'function run() { return tools.inner({}); }',
      [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }],
      { tools: [{ name: 'inner' }] },
    );
  });

  it('dave, denied inner, is refused directly and through outer alike', () => {
    const dave = client('dave', [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['*'] },
      {
        effect: 'DENY',
        actions: ['INSERT'],
        resources: ['actions.Execution'],
        assertions: { inner: "context.document.action == 'inner'" },
      },
    ]);
    expect(invokeAs(dave, 'inner').error).toEqual({
      code: 'ACCESS_DENIED',
      message: 'INSERT on actions.Execution refused by client dave: policy 2 denies it',
    });
    // The attack: the same tool one level down.
    const through = invokeAs(dave, 'outer');
    expect(through.status).toBe('FAILED');
    expect(through.error).toEqual({
      code: 'ACCESS_DENIED',
      message: 'INSERT on actions.Execution refused by client dave: policy 2 denies it',
    });
    // The refused call is in the tree, with the version it would have run.
    expect(through.children).toEqual([
      { actionName: 'inner', actionVersion: 1, status: 'FAILED', error: through.error },
    ]);
    // check: false catches it like any failed call.
    expect(invokeAs(dave, 'outer_catch')).toMatchObject({
      status: 'SUCCEEDED',
      output: { ok: false, code: 'ACCESS_DENIED' },
    });
    expect(count(engine, 'accounts')).toBe(0);
    // Someone allowed to run inner reaches it both ways.
    expect(invokeAs(ADMIN_KEY, 'outer')).toMatchObject({ status: 'SUCCEEDED', output: 'inner ran' });
  });

  it('outer2, whose policies allow only SELECT, cannot call tools.inner whoever invokes it', () => {
    for (const caller of [undefined, ADMIN_KEY]) {
      const result = invokeAs(caller, 'outer2');
      expect(result.status).toBe('FAILED');
      expect(result.error).toEqual({
        code: 'ACCESS_DENIED',
        message: 'INSERT on actions.Execution refused by tool outer2@1: no policy allows it',
      });
    }
    expect(count(engine, 'accounts')).toBe(0);
  });

  it('a tool may call only the tools its policies name; graphql() and cel() are not tool calls and need nothing', () => {
    tool(
      24,
      'picky',
      `function run() {
      const ok = tools.inner({});
      const other = tools.outer({}, { check: false });
      const sum = cel('1 + 2');
      const journal = graphql('{ journal { name } }').journal.name;
      const native = tools.cel({ expression: '2 * 3' }, { check: false });
      return { ok, other: other.error.code, sum, journal, native: native.error.code };
    }`,
      [
        { effect: 'ALLOW', actions: ['SELECT', 'INSERT'], resources: ['financial.*'] },
        {
          effect: 'ALLOW',
          actions: ['INSERT'],
          resources: ['actions.Execution'],
          assertions: { inner: "context.document.action == 'inner' && context.document.version == 1" },
        },
      ],
      { tools: [{ name: 'inner' }, { name: 'outer' }, { name: 'cel' }] },
    );
    expect(invokeAs(ADMIN_KEY, 'picky')).toMatchObject({
      status: 'SUCCEEDED',
      output: { ok: 'inner ran', other: 'ACCESS_DENIED', sum: 3, journal: 'Default', native: 'ACCESS_DENIED' },
    });
  });
});
