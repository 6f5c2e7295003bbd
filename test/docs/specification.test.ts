import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer } from '../helpers/server.js';

/*
 * DESIGN.md §4's canonical example, sent over HTTP as the specification writes it: CreateQueryTool,
 * CreateLockAccount and Lock, with only the runtime and the program's language changed (the
 * specification's program is Starlark; docs/coming-from-twisp.md translates it line by line).
 * lock_account's policies are exactly the specification's, financial.Account.* and nothing about
 * calls: its pinned open_case@2 runs because declaring a pinned version is the tool's consent
 * (src/execution/call-rules.ts consentingLayers), and everything open_case does is still checked
 * against every layer.
 */

const KEY = 'tly_spec_admin_key_0000000000000000';
const QUERY_TOOL = 'a0000000-0000-4000-8000-000000000001';
const LOCK_ACCOUNT = 'a0000000-0000-4000-8000-000000000002';
const OPEN_CASE = 'a0000000-0000-4000-8000-000000000003';
const ACCOUNT = '70eec1a6-eac1-47aa-a507-e18f2d486425';
const execution = (n: number) => `e0000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

const CREATE_QUERY_TOOL = `mutation CreateQueryTool($id: UUID!) {
  actions {
    createAction(id: $id, input: {
      name: "query", kind: "graphql", config: { version: 1 }
      tool: { name: "query", description: "Read the ledger with a GraphQL query." }
      policies: [{ effect: ALLOW, actions: [SELECT], resources: ["*"] }]
    }) { actionId version pending }
  }
}`;

/** DESIGN §4, verbatim. */
const CREATE_LOCK_ACCOUNT = `mutation CreateLockAccount($id: UUID!, $src: String!) {
  actions {
    createAction(id: $id, input: {
      name: "lock_account", kind: "tool"
      config: { runtime: "javascript", src: $src }
      tool: { name: "lock_account", description: "Lock an account so it blocks posting, and open a case for operations."
              inputSchema: { type: "object", properties: { account_id: { type: "string", format: "uuid" }, reason: { type: "string" } },
                             required: ["account_id", "reason"], additionalProperties: false } }
      tools: [{ name: "open_case", version: 2 }]
      policies: [{ effect: ALLOW, actions: [SELECT, INSERT, UPDATE], resources: ["financial.Account.*"] }]
    }) { actionId version pending }
  }
}`;

/** DESIGN §4's program, verbatim. */
const LOCK_ACCOUNT_SRC = `function run(event) {
  const data = event.data;
  graphql("mutation Lock($id: UUID!) { updateAccount(id: $id, input: {status: LOCKED}) { accountId } }",
          { id: data.account_id });
  const c = tools.open_case({ account_id: data.account_id, note: data.reason }, { check: false });
  return { locked: true, case_opened: c.ok };
}`;

/** DESIGN §4, verbatim. */
const LOCK = `mutation Lock($executionId: UUID!, $actionId: UUID!) {
  actions {
    invokeAction(id: $actionId, input: { executionId: $executionId, actionVersion: 1,
                 input: { account_id: "70eec1a6-eac1-47aa-a507-e18f2d486425", reason: "Card reported stolen" } }) {
      status
      invocation { output error { code message hint } }
    }
  }
}`;

/** open_case is not in the specification: version 1 opens nothing; version 2, the pinned one, notes the case on the account. */
const OPEN_CASE_V1 = 'function run() { return { case_opened: false }; }';
const OPEN_CASE_V2 = `function run(event) {
  const { account_id, note } = event.data;
  if (note === 'case system down') fail('the case system is unavailable', 'Open the case by hand.');
  graphql('mutation($id: UUID!, $m: JSON) { updateAccount(id: $id, input: {metadata: $m}) { version } }',
          { id: account_id, m: { case: note } });
  return { case_opened: true };
}`;
const OPEN_CASE_INPUT = {
  type: 'object',
  properties: { account_id: { type: 'string', format: 'uuid' }, note: { type: 'string' } },
  required: ['account_id', 'note'],
  additionalProperties: false,
};

let server: Awaited<ReturnType<typeof startServer>>;

async function gql(query: string, variables: Record<string, unknown> = {}, key = KEY): Promise<any> {
  const response = await fetch(server.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ query, variables }),
  });
  expect(response.status).toBe(200);
  return response.json();
}

async function data(query: string, variables: Record<string, unknown> = {}, key = KEY): Promise<any> {
  const body = await gql(query, variables, key);
  expect(body.errors).toBeUndefined();
  return body.data;
}

const ACCOUNT_STATE = `query($id: UUID!) { account(id: $id) { status metadata } }`;

beforeAll(async () => {
  server = await startServer(KEY);
  await data(
    'mutation($id: UUID!) { createAccount(input: {accountId: $id, code: "CARD.70EE", name: "Card 70ee", normalBalanceType: DEBIT}) { accountId } }',
    { id: ACCOUNT },
  );
  await data(
    `mutation($id: UUID!, $src: String!, $schema: JSON!) { actions {
      createAction(id: $id, input: { name: "open_case", kind: "tool", config: { runtime: "javascript", src: $src },
        tool: { name: "open_case", description: "Open a case for operations about an account.", inputSchema: $schema },
        policies: [{ effect: ALLOW, actions: [SELECT, UPDATE], resources: ["financial.Account"] }] }) { version } } }`,
    { id: OPEN_CASE, src: OPEN_CASE_V1, schema: OPEN_CASE_INPUT },
  );
  await data(
    `mutation($id: UUID!, $src: String!) { actions {
      updateAction(id: $id, input: { config: { runtime: "javascript", src: $src } }) { version } } }`,
    { id: OPEN_CASE, src: OPEN_CASE_V2 },
  );
});
afterAll(() => server?.stop());

describe("the specification's own example, sent over HTTP as written", () => {
  it('CreateQueryTool: a graphql-kind tool that reads, and refuses to write by its own policies', async () => {
    expect((await data(CREATE_QUERY_TOOL, { id: QUERY_TOOL })).actions.createAction).toEqual({
      actionId: QUERY_TOOL,
      version: 1,
      pending: false,
    });
    const INVOKE_QUERY = `mutation($e: UUID!, $q: String!) { actions { invokeAction(name: "query", input: {executionId: $e, actionVersion: 1, input: {query: $q}}) {
      status invocation { output error { code message } } } } }`;
    const read = (await data(INVOKE_QUERY, { e: execution(1), q: '{ journal { name } }' })).actions.invokeAction;
    expect(read).toEqual({
      status: 'SUCCEEDED',
      invocation: { output: { journal: { name: 'Default' } }, error: null },
    });
    const write = (
      await data(INVOKE_QUERY, {
        e: execution(2),
        q: 'mutation { createAccount(input: {accountId: "a0000000-0000-4000-8000-0000000000ff", code: "NOPE", name: "nope"}) { accountId } }',
      })
    ).actions.invokeAction;
    expect(write.status).toBe('FAILED');
    expect(write.invocation.error).toEqual({
      code: 'ACCESS_DENIED',
      message: 'INSERT on financial.Account refused by tool query@1: no policy allows it',
    });
  });

  it('CreateLockAccount and Lock, with exactly the policies given: locked, and the case opened', async () => {
    expect((await data(CREATE_LOCK_ACCOUNT, { id: LOCK_ACCOUNT, src: LOCK_ACCOUNT_SRC })).actions.createAction).toEqual(
      { actionId: LOCK_ACCOUNT, version: 1, pending: false },
    );
    const lock = (await data(LOCK, { executionId: execution(10), actionId: LOCK_ACCOUNT })).actions.invokeAction;
    expect(lock).toEqual({
      status: 'SUCCEEDED',
      invocation: { output: { locked: true, case_opened: true }, error: null },
    });
    expect((await data(ACCOUNT_STATE, { id: ACCOUNT })).account).toEqual({
      status: 'LOCKED',
      metadata: { case: 'Card reported stolen' },
    });
    // Both nested calls are children, open_case at the version pinned.
    const tree = await data(
      `query($id: UUID!) { actions { execution(executionId: $id) { children { kind actionName actionVersion status } } } }`,
      { id: execution(10) },
    );
    expect(tree.actions.execution.children).toEqual([
      { kind: 'GRAPHQL', actionName: 'graphql', actionVersion: null, status: 'SUCCEEDED' },
      { kind: 'TOOL', actionName: 'open_case', actionVersion: 2, status: 'SUCCEEDED' },
    ]);
    // The same executionId again is the same answer, not a second run.
    expect((await data(LOCK, { executionId: execution(10), actionId: LOCK_ACCOUNT })).actions.invokeAction).toEqual(
      lock,
    );
  });
});
