import fc from 'fast-check';
import { beforeEach, describe, expect, it } from 'vitest';
import { Cel } from '../../src/cel/cel.js';
import { systemClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { type AuthorityLayer, decide, type Operation, type Policy, resourceMatches } from '../../src/policy/policy.js';
import { balanceOf, createAccount, createTransferCode, POST } from '../helpers/ledger.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';

let engine: Engine;
let seq = 0;
const eid = () => id(900_000 + ++seq);

const ALL = ['SELECT', 'INSERT', 'UPDATE', 'DELETE'];
const ALLOW_ALL = [{ effect: 'ALLOW', actions: ALL, resources: ['*'] }];
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const INVOKE = `mutation($id: UUID, $name: String, $e: UUID!, $input: JSON) { actions { invokeAction(id: $id, name: $name, input: {executionId: $e, actionVersion: 1, input: $input}) {
  status output error { code message } } } }`;
const CREATE_CLIENT = `mutation($input: ClientInput!) { auth { createClient(input: $input) { apiKey client { principal policies { effect actions resources } } } } }`;

function tool(
  n: number,
  name: string,
  src: string,
  policies: unknown[] = ALLOW_ALL,
  extra: Record<string, unknown> = {},
): string {
  ok(engine, CREATE, {
    id: id(n),
    input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies, ...extra },
  });
  return id(n);
}

function client(principal: string, policies: unknown[]): void {
  ok(engine, CREATE_CLIENT, { input: { principal, name: principal, policies } });
}

/** Invoke as a client; returns the execution (or throws with the GraphQL error). */
function invokeAs(principal: string | undefined, actionId: string, input: unknown = {}) {
  const result = engine.graphql(
    INVOKE,
    { id: actionId, e: eid(), input },
    principal === undefined ? {} : { principal },
  );
  if (result.errors)
    return { status: 'ERROR', error: { code: result.errors[0]!.extensions?.code, message: result.errors[0]!.message } };
  return (result.data as any).actions.invokeAction;
}

const POSTER = `function run(event) {
  return graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }',
    { i: { transactionId: event.data.tx, tranCode: 'TRANSFER', params: { from: event.data.from, to: event.data.to, amount: '5' } } });
}`;

beforeEach(async () => {
  engine = await newEngine();
  createAccount(engine, 1);
  createAccount(engine, 2);
  createTransferCode(engine);
});

describe('the policy chain', () => {
  it('a client allowed only SELECT cannot write through any tool, however permissive the tool’s policies', () => {
    client('reader', [
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] },
      { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
    ]);
    const poster = tool(10, 'poster', POSTER);
    const result = invokeAs('reader', poster, { tx: id(100), from: id(1), to: id(2) });
    expect(result.status).toBe('FAILED');
    expect(result.error.code).toBe('ACCESS_DENIED');
    expect(result.error.message).toBe('INSERT on financial.Transaction refused by client reader: no policy allows it');
    expect(count(engine, 'transactions')).toBe(0);
    // Reading through the same tool is fine.
    const reader = tool(
      11,
      'reader_tool',
      `function run() { return graphql('{ account(id: "${id(1)}") { code } }').account.code; }`,
    );
    expect(invokeAs('reader', reader).output).toBe('ACC-1');
  });

  it('a tool without INSERT on financial.Transaction cannot post, whoever calls it', () => {
    client('admin2', ALLOW_ALL);
    const narrow = tool(12, 'narrow_poster', POSTER, [
      { effect: 'ALLOW', actions: ['SELECT', 'UPDATE'], resources: ['financial.*'] },
    ]);
    for (const principal of ['admin2', undefined]) {
      const result = invokeAs(principal, narrow, { tx: id(101), from: id(1), to: id(2) });
      expect(result.error.code).toBe('ACCESS_DENIED');
      expect(result.error.message).toBe(
        'INSERT on financial.Transaction refused by tool narrow_poster@1: no policy allows it',
      );
    }
    const none = tool(13, 'no_policies', POSTER, []);
    expect(invokeAs(undefined, none, { tx: id(102), from: id(1), to: id(2) }).error.message).toContain(
      'refused by tool no_policies@1',
    );
    expect(count(engine, 'transactions')).toBe(0);
    // With INSERT on financial.* it posts (entries and balances included).
    const wide = tool(14, 'wide_poster', POSTER, [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
    ]);
    expect(invokeAs('admin2', wide, { tx: id(103), from: id(1), to: id(2) }).status).toBe('SUCCEEDED');
    expect(balanceOf(engine, id(2)).settled.normalBalance.units).toBe('5');
  });

  it('a DENY anywhere on the stack wins: in the client, in the tool, or in a nested tool', () => {
    const denyTransactions = { effect: 'DENY', actions: ['INSERT'], resources: ['financial.Transaction'] };
    client('denied', [...ALLOW_ALL, denyTransactions]);
    const poster = tool(15, 'poster2', POSTER);
    expect(invokeAs('denied', poster, { tx: id(104), from: id(1), to: id(2) }).error.message).toBe(
      'INSERT on financial.Transaction refused by client denied: policy 2 denies it',
    );
    const toolDeny = tool(16, 'self_denying', POSTER, [...ALLOW_ALL, denyTransactions]);
    expect(invokeAs(undefined, toolDeny, { tx: id(105), from: id(1), to: id(2) }).error.message).toContain(
      'refused by tool self_denying@1: policy 2 denies it',
    );
    // The outer tool allows everything; the nested one denies: the nested write is refused.
    tool(17, 'inner_deny', POSTER, [...ALLOW_ALL, denyTransactions]);
    const outer = tool(18, 'outer_allow', 'function run(e) { return tools.inner_deny(e.data); }', ALLOW_ALL, {
      tools: [{ name: 'inner_deny' }],
    });
    expect(invokeAs(undefined, outer, { tx: id(106), from: id(1), to: id(2) }).error.message).toContain(
      'refused by tool inner_deny@1',
    );
    // And the other way round: the outer tool lacks the right, so the nested (permissive) tool cannot post either.
    const permissiveInner = tool(19, 'inner_allow', POSTER);
    const narrowOuter = tool(
      20,
      'outer_narrow',
      'function run(e) { return tools.inner_allow(e.data); }',
      [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }],
      { tools: [{ name: 'inner_allow' }] },
    );
    expect(invokeAs(undefined, narrowOuter, { tx: id(107), from: id(1), to: id(2) }).error.message).toContain(
      'refused by tool outer_narrow@1',
    );
    expect(permissiveInner).toBeDefined();
    expect(count(engine, 'transactions')).toBe(0);
  });

  it('an assertion on context.document allows some records and refuses others', () => {
    ok(
      engine,
      `mutation { a: updateAccount(id: "${id(1)}", input: {metadata: {tier: "gold"}}) { version } b: updateAccount(id: "${id(2)}", input: {metadata: {tier: "silver"}}) { version } }`,
    );
    client('gold_desk', [
      {
        effect: 'ALLOW',
        actions: ['SELECT', 'UPDATE'],
        resources: ['financial.Account'],
        assertions: { gold: 'context.document.metadata.tier == "gold"' },
      },
    ]);
    const asDesk = (query: string) => engine.graphql(query, null, { principal: 'gold_desk' });
    expect(asDesk(`mutation { updateAccount(id: "${id(1)}", input: {name: "Gold one"}) { name } }`).data).toEqual({
      updateAccount: { name: 'Gold one' },
    });
    const silver = asDesk(`mutation { updateAccount(id: "${id(2)}", input: {name: "Silver one"}) { name } }`);
    expect(silver.errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
    expect(asDesk(`{ account(id: "${id(2)}") { code } }`).errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
    // Lists show only the records the assertion allows.
    expect((asDesk('{ accounts(first: 10) { nodes { code } } }').data as any).accounts.nodes).toEqual([
      { code: 'ACC-1' },
    ]);
    // Claims are visible to assertions too.
    client('named', [
      {
        effect: 'ALLOW',
        actions: ['SELECT'],
        resources: ['financial.Journal'],
        assertions: { me: 'context.auth.claims.principal == "named"' },
      },
    ]);
    expect(engine.graphql('{ journal { name } }', null, { principal: 'named' }).errors).toBeUndefined();
  });

  it('an assertion that is not a bool skips an ALLOW and applies a DENY (fails closed)', () => {
    const all = { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] };
    client('odd_deny', [
      all,
      { effect: 'DENY', actions: ['SELECT'], resources: ['financial.Journal'], assertions: { odd: '1' } },
    ]);
    expect(engine.graphql('{ journal { name } }', null, { principal: 'odd_deny' }).errors?.[0]?.extensions?.code).toBe(
      'ACCESS_DENIED',
    );
    client('odd_allow', [{ ...all, assertions: { odd: '"yes"' } }]);
    expect(engine.graphql('{ journal { name } }', null, { principal: 'odd_allow' }).errors?.[0]?.extensions?.code).toBe(
      'ACCESS_DENIED',
    );
    client('plain', [
      all,
      { effect: 'DENY', actions: ['SELECT'], resources: ['financial.Journal'], assertions: { never: 'false' } },
    ]);
    expect(engine.graphql('{ journal { name } }', null, { principal: 'plain' }).errors).toBeUndefined();
  });

  it('invoking action X is INSERT on actions.Execution with context.document.action == "X"', () => {
    const allowed = tool(21, 'allowed_tool', 'function run() { return "ran"; }');
    const other = tool(22, 'other_tool', 'function run() { return "ran"; }');
    client('operator', [
      {
        effect: 'ALLOW',
        actions: ['INSERT'],
        resources: ['actions.Execution'],
        assertions: { only: 'context.document.action == "allowed_tool"' },
      },
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] },
    ]);
    expect(invokeAs('operator', allowed).output).toBe('ran');
    const refused = invokeAs('operator', other);
    expect(refused.status).toBe('ERROR');
    expect(refused.error.message).toBe('INSERT on actions.Execution refused by client operator: no policy allows it');
  });

  it('a graphql-kind action is the native graphql tool under its own name with narrower policies', () => {
    ok(engine, CREATE, {
      id: id(30),
      input: {
        name: 'query',
        kind: 'graphql',
        config: { version: 1 },
        tool: { name: 'query', description: 'Read ledger records' },
        policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] }],
      },
    });
    const read = invokeAs(undefined, id(30), { query: `{ account(id: "${id(1)}") { code } }` });
    expect(read).toMatchObject({ status: 'SUCCEEDED', output: { account: { code: 'ACC-1' } } });
    const write = invokeAs(undefined, id(30), {
      query: `mutation { updateAccount(id: "${id(1)}", input: {name: "x"}) { name } }`,
    });
    expect(write.error).toEqual({
      code: 'ACCESS_DENIED',
      message: 'UPDATE on financial.Account refused by tool query@1: no policy allows it',
    });
    expect(invokeAs(undefined, id(30), { nope: 1 }).error.code).toBe('INPUT_INVALID');
    // A tool can reference it and is bounded by it.
    const caller = tool(
      31,
      'uses_query',
      `function run() { return tools.query({ query: '{ journal { name } }' }); }`,
      ALLOW_ALL,
      { tools: [{ name: 'query' }] },
    );
    expect(invokeAs(undefined, caller).output).toEqual({ journal: { name: 'Default' } });
  });
});

describe('clients', () => {
  it('creates, lists, updates (replacing policies), rotates keys and deletes clients; keys are stored hashed', () => {
    const created = ok(engine, CREATE_CLIENT, {
      input: {
        principal: 'alice',
        name: 'Alice',
        policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] }],
      },
    }).auth.createClient;
    expect(created.apiKey).toMatch(/^tly_[A-Za-z0-9_-]{43}$/);
    const stored = engine.db.prepare('SELECT key_hash FROM clients WHERE principal = ?').get('alice') as {
      key_hash: string;
    };
    expect(stored.key_hash).not.toContain(created.apiKey);
    expect(engine.authenticate(created.apiKey)).toBe('alice');
    expect(engine.authenticate('tly_not-a-key')).toBeNull();
    const rotated = ok(
      engine,
      `mutation { auth { updateClient(principal: "alice", input: {rotateKey: true, policies: []}) { apiKey client { policies { effect } version } } } }`,
    ).auth.updateClient;
    expect(rotated.client).toEqual({ policies: [], version: 2 });
    expect(engine.authenticate(created.apiKey)).toBeNull();
    expect(engine.authenticate(rotated.apiKey)).toBe('alice');
    expect(ok(engine, '{ auth { clients(first: 10) { nodes { principal } } } }').auth.clients.nodes).toEqual([
      { principal: 'alice' },
    ]);
    expect(fails(engine, CREATE_CLIENT, { input: { principal: 'alice', name: 'again' } }).code).toBe('ALREADY_EXISTS');
    expect(
      fails(engine, CREATE_CLIENT, {
        input: {
          principal: 'bob',
          name: 'Bob',
          policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['x'], assertions: { bad: '1 +' } }],
        },
      }).code,
    ).toBe('BAD_REQUEST');
    ok(engine, 'mutation { auth { deleteClient(principal: "alice") { principal } } }');
    expect(engine.authenticate(rotated.apiKey)).toBeNull();
    expect(engine.graphql('{ journal { name } }', null, { principal: 'alice' }).errors?.[0]?.extensions?.code).toBe(
      'UNAUTHENTICATED',
    );
  });

  it('ensureAdmin creates the admin client once (a generated key, or TALLY_ADMIN_KEY) and whoami shows the stack', () => {
    const generated = engine.ensureAdmin();
    expect(generated).toMatch(/^tly_/);
    expect(engine.ensureAdmin()).toBeNull();
    expect(engine.authenticate(generated!)).toBe('admin');
    engine.ensureAdmin('tly_chosen-key');
    expect(engine.authenticate('tly_chosen-key')).toBe('admin');
    expect(engine.authenticate(generated!)).toBeNull();
    expect(ok(engine, '{ auth { whoami { principal stack } } }')).toEqual({
      auth: { whoami: { principal: 'system', stack: [] } },
    });
    const asAdmin = engine.graphql('{ auth { whoami { principal stack } } }', null, { principal: 'admin' });
    expect(asAdmin.data).toEqual({ auth: { whoami: { principal: 'admin', stack: ['client admin'] } } });
  });

  it('a SELECT-only client cannot create clients, actions or tran codes', () => {
    client('ro', [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['*'] }]);
    const as = (q: string) => engine.graphql(q, null, { principal: 'ro' }).errors?.[0]?.message;
    expect(
      as(
        'mutation { auth { createClient(input: {principal: "x", name: "x", policies: [{effect: ALLOW, actions: [SELECT, INSERT, UPDATE, DELETE], resources: ["*"]}]}) { apiKey } } }',
      ),
    ).toBe('INSERT on auth.Client refused by client ro: no policy allows it');
    expect(
      as(
        `mutation { actions { createAction(id: "${id(40)}", input: {name: "x", kind: "tool", config: {runtime: "javascript", src: "function run() {}"}}) { version } } }`,
      ),
    ).toContain('INSERT on actions.Action');
    expect(
      as(
        POST.replace(
          '$input: TransactionInput!',
          `$input: TransactionInput = {transactionId: "${id(41)}", tranCode: "TRANSFER"}`,
        ),
      ),
    ).toContain('INSERT on financial.Transaction');
  });
});

describe('authority only narrows (property)', () => {
  const cel = new Cel(systemClock, { celExpressionLengthMax: 4096, celCacheMax: 1000 });
  const RESOURCES = [
    'financial.Account',
    'financial.Transaction',
    'financial.Entry',
    'actions.Execution',
    'auth.Client',
  ];
  const PATTERNS = [
    '*',
    'financial.*',
    'financial.Account',
    'financial.Account.*',
    'actions.*',
    'auth.Client',
    'financial.Trans*',
  ];
  const policy: fc.Arbitrary<Policy> = fc.record({
    effect: fc.constantFrom('ALLOW' as const, 'ALLOW' as const, 'DENY' as const),
    actions: fc.subarray(['SELECT', 'INSERT', 'UPDATE', 'DELETE'] as const, { minLength: 1 }).map((a) => [...a]),
    resources: fc.subarray(PATTERNS, { minLength: 1 }).map((r) => [...r]),
    assertions: fc.option(
      fc.constantFrom<Record<string, string>>(
        { gold: 'context.document.tier == "gold"' },
        { mine: 'context.auth.claims.principal == "p"' },
        { broken: 'context.document.missing.field == 1' },
      ),
      { nil: null },
    ),
  });
  const layer: fc.Arbitrary<AuthorityLayer> = fc
    .array(policy, { maxLength: 4 })
    .map((policies) => ({ name: 'layer', policies }));
  const operation: fc.Arbitrary<Operation> = fc.record({
    action: fc.constantFrom('SELECT' as const, 'INSERT' as const, 'UPDATE' as const, 'DELETE' as const),
    resource: fc.constantFrom(...RESOURCES),
    document: fc.constantFrom({ tier: 'gold' }, { tier: 'silver' }, {}),
  });

  it('for random policy sets and stacks, what a stack allows is always allowed by each of its layers', () => {
    fc.assert(
      fc.property(
        fc.array(layer, { minLength: 1, maxLength: 5 }),
        operation,
        fc.constantFrom('p', 'q'),
        (stack, op, principal) => {
          const claims = { principal };
          const stackAllows = stack.every((l) => decide(cel, l, op, claims).allowed);
          if (stackAllows) for (const l of stack) expect(decide(cel, l, op, claims).allowed).toBe(true);
          // And adding a layer never widens: stack + extra allows ⇒ stack allows.
          const extended = [...stack, stack[0]!];
          if (extended.every((l) => decide(cel, l, op, claims).allowed)) expect(stackAllows).toBe(true);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('resource patterns: * matches anything, X.* matches X and below, exact names match only themselves', () => {
    expect(resourceMatches('*', 'auth.Client')).toBe(true);
    expect(resourceMatches('financial.*', 'financial.Account')).toBe(true);
    expect(resourceMatches('financial.Account.*', 'financial.Account')).toBe(true);
    expect(resourceMatches('financial.Account', 'financial.AccountSet')).toBe(false);
    expect(resourceMatches('financial.*', 'actions.Execution')).toBe(false);
    expect(resourceMatches('financial.Trans*', 'financial.Transaction')).toBe(true);
  });
});
