import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer } from '../helpers/server.js';

/*
 * docs/coming-from-twisp.md, run as written. Its GraphQL is the specification's own (DESIGN.md §4):
 * CreateQueryTool, CreateLockAccount and Lock, sent over HTTP with only the runtime and the
 * program's language changed, answering what the specification says. lock_account's policies are
 * exactly the specification's, financial.Account.* and nothing about calls: its pinned open_case@2
 * runs because declaring a pinned version is the tool's consent (src/execution/call-rules.ts
 * consentingLayers). Every JavaScript program on the page runs with the input its comment gives and
 * answers the output its comment shows; each has its Starlark beside it.
 */

const GUIDE = readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'coming-from-twisp.md'), 'utf8');
const blocks = [...GUIDE.matchAll(/^```(\w+)\n([\s\S]*?)^```$/gm)].map(([, lang, text]) => ({
  lang: lang!,
  text: text!,
}));
const programs = blocks.filter((b) => b.lang === 'js');
const starlark = blocks.filter((b) => b.lang === 'python');
/** A GraphQL document of the page, by its operation name. */
function document(name: string): string {
  const found = blocks.filter((b) => b.lang === 'graphql' && new RegExp(`^(mutation|query) ${name}\\b`).test(b.text));
  expect(found, `the page shows ${name} once`).toHaveLength(1);
  return found[0]!.text;
}
/** The value of a `// key: …` comment line of a program. */
const comment = (program: string, key: string) => new RegExp(`^// ${key}: (.*)$`, 'm').exec(program)?.[1];

const KEY = 'tly_spec_admin_key_0000000000000000';
const QUERY_TOOL = 'a0000000-0000-4000-8000-000000000001';
const LOCK_ACCOUNT = 'a0000000-0000-4000-8000-000000000002';
const OPEN_CASE = 'a0000000-0000-4000-8000-000000000003';
const ACCOUNT = '70eec1a6-eac1-47aa-a507-e18f2d486425';
const execution = (n: number) => `e0000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

const CREATE_QUERY_TOOL = document('CreateQueryTool');
const CREATE_LOCK_ACCOUNT = document('CreateLockAccount');
const LOCK = document('Lock');
const LOCK_ACCOUNT_SRC = programs.find((p) => comment(p.text, 'tool') === 'lock_account')!.text;

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

describe("the specification's own example, sent over HTTP as the page shows it", () => {
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

describe('every program on the page', () => {
  it('has its Starlark beside it, and says what it is called with and answers', () => {
    expect(programs.length).toBeGreaterThanOrEqual(2);
    expect(starlark).toHaveLength(programs.length);
    for (const program of programs) expect(comment(program.text, 'tool'), program.text).toMatch(/^[a-z_]+$/);
  });

  it('runs as written and answers what its comment shows', async () => {
    let n = 100;
    for (const program of programs) {
      const input = comment(program.text, 'input');
      if (input === undefined) continue; // lock_account: run above, by the specification's own Lock
      const name = comment(program.text, 'tool')!;
      await data(
        `mutation($id: UUID!, $name: String!, $src: String!) { actions { createAction(id: $id, input: {
          name: $name, kind: "tool", config: { runtime: "javascript", src: $src },
          tool: { name: $name, description: "from docs/coming-from-twisp.md" },
          policies: [{ effect: ALLOW, actions: [SELECT], resources: ["*"] }] }) { version } } }`,
        { id: execution(++n), name, src: program.text },
      );
      const ran = await data(
        `mutation($name: String!, $e: UUID!, $input: JSON) { actions { invokeAction(name: $name, input: {executionId: $e, actionVersion: 1, input: $input}) {
          status output error { code message } } } }`,
        { name, e: execution(++n), input: JSON.parse(input) },
      );
      expect(ran.actions.invokeAction, name).toEqual({
        status: 'SUCCEEDED',
        output: JSON.parse(comment(program.text, 'output')!),
        error: null,
      });
    }
  });

  it('runtime "starlark" is refused with a hint naming the page', async () => {
    const starlarkDocument = CREATE_LOCK_ACCOUNT.replace('runtime: "javascript"', 'runtime: "starlark"').replaceAll(
      '"lock_account"',
      '"lock_starlark"',
    );
    const refused = await gql(starlarkDocument, {
      id: execution(200),
      src: 'def run(event):\n    return {}\n',
    });
    expect(refused.errors[0].message).toBe('config.runtime "starlark" is not supported');
    expect(refused.errors[0].extensions.hint).toContain('docs/coming-from-twisp.md');
  });
});
