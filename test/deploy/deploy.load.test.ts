// A deploy is an operator's work (issue 34): a project ten times the bank's size (accounts, tran
// codes, tools) goes to a running `tally serve` over HTTP with default settings, in one request
// and one transaction, under the operator budget; one bad file in it and nothing is applied.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deploy } from '../../src/deploy/deploy.js';
import { readProject } from '../../src/deploy/project.js';
import { serverTarget, type Target } from '../../src/deploy/target.js';
import { exited, serveProcess } from '../helpers/processes.js';
import { bankTimes, removeProject } from '../helpers/projects.js';

const KEY = 'tly_deploy-size-admin-key-0123456789';
const COPIES = 10;

/** The target, counting the mutations it sends (a deploy's writes are one mutation). */
function counting(target: Target): Target & { mutations: () => number } {
  let mutations = 0;
  return {
    ...target,
    request: (query, variables) => {
      if (query.trimStart().startsWith('mutation')) mutations++;
      return target.request(query, variables);
    },
    mutations: () => mutations,
  };
}

describe(`tally deploy of a project ${COPIES} times the bank's size, over HTTP, default settings`, () => {
  let server: Awaited<ReturnType<typeof serveProcess>>;
  let project: string;
  beforeAll(async () => {
    project = bankTimes(COPIES);
    server = await serveProcess(join(mkdtempSync(join(tmpdir(), 'tally-deploy-size-')), 'big.db'), KEY);
  });
  afterAll(async () => {
    server?.child.kill('SIGTERM');
    if (server) await exited(server.child);
    removeProject(project);
  });

  const gql = async (query: string) => {
    const response = await fetch(server.endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ query }),
    });
    return (await response.json()) as any;
  };
  const sizes = async () => {
    const { data } = await gql(
      '{ accounts(first: 1000) { nodes { code } } tranCodes(first: 1000) { nodes { code } } actions { actions(first: 1000) { nodes { name } } } }',
    );
    return {
      accounts: data.accounts.nodes.length,
      tranCodes: data.tranCodes.nodes.length,
      tools: data.actions.actions.nodes.length,
    };
  };

  it('one bad file among them: refused, nothing applied', async () => {
    const broken = bankTimes(COPIES);
    writeFileSync(
      join(broken, 'tran-codes', 'ZZ_BROKEN.json'),
      JSON.stringify({
        code: 'ZZ_BROKEN',
        transaction: { effective: 'date.Today()' },
        entries: [{ accountId: "'not-a-uuid'", units: "decimal('1')", currency: "'USD'", direction: 'DEBIT' }],
      }),
    );
    const target = counting(serverTarget(server.endpoint, KEY));
    const error = await deploy(readProject(broken), target).catch((e: unknown) => e);
    removeProject(broken);
    expect(String(error)).toContain('nothing was applied');
    expect(await sizes()).toEqual({ accounts: 0, tranCodes: 0, tools: 0 });
  });

  it(`succeeds: every account, tran code and tool of the ${COPIES} copies, in one mutation`, async () => {
    const target = counting(serverTarget(server.endpoint, KEY));
    const result = await deploy(readProject(project), target);
    expect(result.applied).toBe(true);
    expect(target.mutations()).toBe(1);
    // The bank: 8 accounts and 2 account sets (accounts lists both), 6 tran codes, 10 program tools,
    // 1 agent and 1 http tool; each copy adds the accounts, sets, tran codes and program tools again.
    expect(await sizes()).toEqual({ accounts: 10 * COPIES, tranCodes: 6 * COPIES, tools: 10 * COPIES + 2 });
    // The copies run: a tool of the last copy posts with that copy's tran code.
    const last = COPIES - 1;
    const deposit = await gql(
      `mutation { postTransaction(input: {transactionId: "c0000000-0000-4000-8000-000000000001", tranCode: "DEPOSIT_${last}", params: {account: "b00000${String(last).padStart(2, '0')}-0000-4000-8000-000000000011", amount: "10"}}) { transactionId } }`,
    );
    expect(deposit.errors, JSON.stringify(deposit.errors)).toBeUndefined();
  });
});
