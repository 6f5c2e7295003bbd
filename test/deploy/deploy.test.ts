import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { deploy, DeployError, formatPlan, planDeploy } from '../../src/deploy/deploy.js';
import { readProject } from '../../src/deploy/project.js';
import type { Target } from '../../src/deploy/target.js';
import type { Engine } from '../../src/engine.js';
import { createTransferCode } from '../helpers/ledger.js';
import { id, newEngine, ok } from '../helpers/engine.js';

/** account-sets.json and velocity.json: planned like the other kinds, applied in the one deploy transaction. */

let engine: Engine;
let target: Target;
let dir: string;

const WALLET = id(1);
const SAVINGS = id(2);
const OTHER = id(3);
const CASH = id(9);
const SET = id(100);
const OUTER = id(101);
const LIMIT = id(200);
const LIMIT_2 = id(201);
const CONTROL = id(300);

function write(files: Record<string, unknown>) {
  for (const [name, value] of Object.entries(files))
    writeFileSync(join(dir, name), typeof value === 'string' ? value : JSON.stringify(value, null, 2));
}

const accounts = [
  { accountId: WALLET, code: 'wallet', name: 'Wallet' },
  { accountId: SAVINGS, code: 'savings', name: 'Savings' },
  { accountId: OTHER, code: 'other', name: 'Other' },
  { accountId: CASH, code: 'cash', name: 'Cash', normalBalanceType: 'DEBIT' },
];
// The outer set is listed first and contains the inner one: deploy creates the inner one first.
const sets = () => [
  {
    accountSetId: OUTER,
    code: 'everyone',
    name: 'Everyone',
    members: [
      { memberType: 'ACCOUNT_SET', memberId: SET },
      { memberType: 'ACCOUNT', memberId: OTHER },
    ],
  },
  {
    accountSetId: SET,
    code: 'customer',
    name: 'Customer',
    description: 'wallet and savings',
    metadata: { tier: 'gold' },
    members: [
      { memberType: 'ACCOUNT', memberId: WALLET },
      { memberType: 'ACCOUNT', memberId: SAVINGS },
    ],
  },
];
const noOverdraft = (extra: Record<string, unknown> = {}) => ({
  velocityLimitId: LIMIT,
  name: 'no overdraft',
  limit: { balance: [{ layer: 'PENDING', amount: 'params.amount', normalBalanceType: 'DEBIT' }] },
  params: [{ name: 'amount', type: 'DECIMAL', default: '0' }],
  ...extra,
});
const velocity = (control: Record<string, unknown> = {}, limits: unknown[] = [noOverdraft()]) => ({
  limits,
  controls: [
    {
      velocityControlId: CONTROL,
      name: 'guard',
      enforcement: { action: 'REJECT' },
      velocityLimitIds: [LIMIT],
      attach: [{ accountId: SET }],
      ...control,
    },
  ],
});

const lines = async () => formatPlan(await planDeploy(readProject(dir), target)).split('\n');
const changes = async () => (await lines()).filter((l) => !l.startsWith('= '));
const post = (n: number, from: string, to: string, amount: string) =>
  engine.graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
    i: { transactionId: id(7000 + n), tranCode: 'TRANSFER', params: { from, to, amount } },
  });

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tally-deploy-ledger-'));
  engine = await newEngine({ path: join(dir, 'ledger.db') });
  target = {
    describe: 'in-process',
    request: async (q, v) => engine.graphql(q, v ?? null) as never,
    close: async () => {},
  };
  createTransferCode(engine);
  write({
    'tally.json': { name: 'ledger' },
    'accounts.json': accounts,
    'account-sets.json': sets(),
    'velocity.json': velocity(),
  });
});

describe('deploy: account sets and velocity controls', () => {
  it('creates sets (members that are sets first), limits, controls and attachments; the control then guards the set', async () => {
    const result = await deploy(readProject(dir), target);
    expect(formatPlan(result.plan).split('\n').slice(4)).toEqual([
      '+ create account set customer (2 members)',
      '+ create account set everyone (2 members)',
      '+ create velocity limit no overdraft',
      '+ create velocity control guard (1 limit)',
      '+ create velocity attachment guard on customer',
    ]);
    expect(result.plan.find((i) => i.kind === 'velocity control')?.file).toBe('velocity.json');
    expect(result.plan.find((i) => i.kind === 'account set')?.file).toBe('account-sets.json');
    const read = ok(
      engine,
      `{ accountSet(id: "${OUTER}") { members(first: 5) { nodes { ... on AccountSet { code } ... on Account { code } } } }
      customer: accountSet(id: "${SET}") { description metadata controls(first: 5) { nodes { velocityControl { name limits { name } } } } } }`,
    );
    expect(read.accountSet.members.nodes.map((n: any) => n.code).sort()).toEqual(['customer', 'other']);
    expect(read.customer).toEqual({
      description: 'wallet and savings',
      metadata: { tier: 'gold' },
      controls: { nodes: [{ velocityControl: { name: 'guard', limits: [{ name: 'no overdraft' }] } }] },
    });
    // The wallet may go below zero while the savings cover it; the set may not.
    expect(post(1, CASH, SAVINGS, '10').errors).toBeUndefined();
    expect(post(2, WALLET, CASH, '8').errors).toBeUndefined();
    expect(post(3, WALLET, CASH, '3').errors?.[0]?.extensions?.code).toBe('BALANCE_VELOCITY_EXCEEDED');
  });

  it('a second deploy of the same project plans everything unchanged and applies nothing', async () => {
    await deploy(readProject(dir), target);
    const again = await deploy(readProject(dir), target);
    expect(again.applied).toBe(false);
    expect(again.plan.map((i) => i.change)).toEqual(Array(9).fill('unchanged'));
    expect(formatPlan(again.plan).split('\n').slice(4)).toEqual([
      '= account set customer unchanged',
      '= account set everyone unchanged',
      '= velocity limit no overdraft unchanged',
      '= velocity control guard unchanged',
      '= velocity attachment guard on customer unchanged',
    ]);
  });

  it('updates: set fields and members, a limit, a control’s fields and limits, params attached again, attachments the file drops detached', async () => {
    await deploy(readProject(dir), target);
    const edited = sets();
    edited[1] = { ...edited[1]!, name: 'The customer', members: [{ memberType: 'ACCOUNT', memberId: WALLET }] };
    edited[0]!.members.push({ memberType: 'ACCOUNT', memberId: SAVINGS });
    write({
      'account-sets.json': edited,
      'velocity.json': velocity(
        {
          name: 'the guard',
          velocityLimitIds: [LIMIT_2],
          attach: [{ accountId: OUTER, params: { amount: '5' } }, { accountId: WALLET }],
        },
        [noOverdraft({ description: 'not below zero' }), noOverdraft({ velocityLimitId: LIMIT_2, name: 'second' })],
      ),
    });
    expect(await changes()).toEqual([
      '~ update account set customer (name, -1 member)',
      '~ update account set everyone (+1 member)',
      '~ update velocity limit no overdraft (description)',
      '+ create velocity limit second',
      '~ update velocity control the guard (name, +1 limit, -1 limit)',
      '- remove velocity attachment the guard on customer',
      '+ create velocity attachment the guard on everyone',
      '+ create velocity attachment the guard on wallet',
    ]);
    await deploy(readProject(dir), target);
    expect(await changes()).toEqual([]);
    const read = ok(
      engine,
      `{ accountSet(id: "${SET}") { name members(first: 5) { nodes { ... on Account { code } } } controls(first: 5) { nodes { velocityControlId } } }
      velocityLimit(id: "${LIMIT}") { description } velocityControl(id: "${CONTROL}") { name limits { name } }
      attachedControls(accountId: "${OUTER}", first: 5) { nodes { params } } }`,
    );
    expect(read).toEqual({
      accountSet: { name: 'The customer', members: { nodes: [{ code: 'wallet' }] }, controls: { nodes: [] } },
      velocityLimit: { description: 'not below zero' },
      velocityControl: { name: 'the guard', limits: [{ name: 'second' }] },
      attachedControls: { nodes: [{ params: { amount: '5' } }] },
    });
    // Other params: attached again; dropping a control's attach list detaches it everywhere.
    write({
      'velocity.json': velocity(
        { velocityLimitIds: [LIMIT_2], attach: [{ accountId: OUTER, params: { amount: '6' } }] },
        [noOverdraft(), noOverdraft({ velocityLimitId: LIMIT_2, name: 'second' })],
      ),
    });
    expect(await changes()).toEqual([
      '~ update velocity limit no overdraft (description)', // its description is gone
      '~ update velocity control guard (name)',
      '- remove velocity attachment guard on wallet',
      '~ update velocity attachment guard on everyone (journal or params changed)',
    ]);
    await deploy(readProject(dir), target);
    expect(
      ok(engine, `{ attachedControls(accountId: "${OUTER}", first: 5) { nodes { params } } }`).attachedControls.nodes,
    ).toEqual([{ params: { amount: '6' } }]);
    write({
      'velocity.json': velocity({ velocityLimitIds: [LIMIT_2], attach: [] }, [
        noOverdraft(),
        noOverdraft({ velocityLimitId: LIMIT_2, name: 'second' }),
      ]),
    });
    expect(await changes()).toEqual(['- remove velocity attachment guard on everyone']);
    await deploy(readProject(dir), target);
    expect(
      ok(engine, `{ attachedControls(accountId: "${OUTER}", first: 5) { nodes { params } } }`).attachedControls.nodes,
    ).toEqual([]);
    expect(await changes()).toEqual([]);
  });

  it('a refusal on the server names velocity.json or account-sets.json, and nothing of the deploy is applied', async () => {
    write({ 'velocity.json': velocity({ attach: [{ accountId: SET, params: { amount: 'lots' } }] }) });
    const error = await deploy(readProject(dir), target).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeployError);
    expect((error as Error).message).toMatch(/^velocity\.json: .*"lots".*\[BAD_REQUEST\]\nnothing was applied$/);
    expect(engine.graphql(`{ accountSet(id: "${SET}") { code } }`).errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    write({
      'velocity.json': velocity(),
      'account-sets.json': [
        {
          accountSetId: SET,
          code: 'customer',
          name: 'Customer',
          members: [{ memberType: 'ACCOUNT', memberId: id(404) }],
        },
      ],
    });
    expect(String(await deploy(readProject(dir), target).catch((e: unknown) => e))).toMatch(
      /account-sets\.json: .*does not exist.*\[NOT_FOUND\]\nnothing was applied/,
    );
    expect(engine.graphql(`{ account(id: "${WALLET}") { code } }`).errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
  });

  it('bad files are refused before anything is read from the target, naming the file and the field', () => {
    const refused = (files: Record<string, unknown>) => {
      write({ 'account-sets.json': sets(), 'velocity.json': velocity(), ...files });
      try {
        readProject(dir);
      } catch (error) {
        return (error as Error).message;
      }
      return 'accepted';
    };
    expect(refused({ 'account-sets.json': '{"x": 1}' })).toBe(
      'account-sets.json: must be a JSON array of account sets, got {"x":1}',
    );
    expect(refused({ 'account-sets.json': '[\n{,}]' })).toMatch(/^account-sets\.json:2:2: not valid JSON/);
    expect(refused({ 'account-sets.json': [{ accountSetId: 'set-1', code: 'c', name: 'n' }] })).toBe(
      'account-sets.json: [0].accountSetId must be a UUID, got "set-1"',
    );
    expect(refused({ 'account-sets.json': [{ accountSetId: SET, name: 'n' }] })).toBe(
      'account-sets.json: [0].code must be a non-empty string, got nothing',
    );
    expect(
      refused({
        'account-sets.json': [
          { accountSetId: SET, code: 'c', name: 'n', members: [{ memberType: 'WALLET', memberId: WALLET }] },
        ],
      }),
    ).toBe('account-sets.json: [0].members[0].memberType must be one of ACCOUNT, ACCOUNT_SET, got "WALLET"');
    expect(refused({ 'account-sets.json': [{ accountSetId: SET, code: 'c', name: 'n', member: [] }] })).toBe(
      'account-sets.json: [0].member is not a field here (fields: accountSetId, code, name, description, normalBalanceType, metadata, journalId, members)',
    );
    expect(
      refused({
        'account-sets.json': [
          { accountSetId: SET, code: 'a', name: 'n' },
          { accountSetId: SET, code: 'b', name: 'n' },
        ],
      }),
    ).toContain('[1].accountSetId is given to two sets');
    expect(
      refused({
        'account-sets.json': [
          { accountSetId: SET, code: 'a', name: 'n', members: [{ memberType: 'ACCOUNT_SET', memberId: OUTER }] },
          { accountSetId: OUTER, code: 'b', name: 'n', members: [{ memberType: 'ACCOUNT_SET', memberId: SET }] },
        ],
      }),
    ).toBe('accepted'); // a cycle is caught when planning
    expect(refused({ 'velocity.json': '[]' })).toBe('velocity.json: the file must be a JSON object, got []');
    expect(refused({ 'velocity.json': { limit: [] } })).toBe(
      'velocity.json: limit is not a field here (fields: limits, controls)',
    );
    expect(refused({ 'velocity.json': velocity({ enforcement: { action: 'DENY' } }) })).toBe(
      'velocity.json: controls[0].enforcement.action must be one of REJECT, VOID, WARN, got "DENY"',
    );
    expect(refused({ 'velocity.json': velocity({ attach: [{ accountId: 'customer' }] }) })).toBe(
      'velocity.json: controls[0].attach[0].accountId must be a UUID, got "customer"',
    );
    expect(refused({ 'velocity.json': velocity({ attach: [{ accountId: SET, params: 5 }] }) })).toBe(
      'velocity.json: controls[0].attach[0].params must be a JSON object, got 5',
    );
    expect(refused({ 'velocity.json': velocity({}, [noOverdraft({ limit: { balance: [] } })]) })).toBe(
      'velocity.json: limits[0].limit.balance needs at least one {layer, amount}, got []',
    );
    expect(
      refused({
        'velocity.json': velocity({}, [noOverdraft({ limit: { balance: [{ layer: 'PENDING', amount: 0 }] } })]),
      }),
    ).toBe('velocity.json: limits[0].limit.balance[0].amount must be a non-empty string, got 0');
    expect(refused({ 'velocity.json': velocity({ velocityLimitIds: [LIMIT, LIMIT] }) })).toContain(
      'controls[0].velocityLimitIds lists a limit twice',
    );
  });

  it('a cycle among the sets of the file, and a set moved to another journal, are refused naming account-sets.json', async () => {
    write({
      'account-sets.json': [
        { accountSetId: SET, code: 'a', name: 'n', members: [{ memberType: 'ACCOUNT_SET', memberId: OUTER }] },
        { accountSetId: OUTER, code: 'b', name: 'n', members: [{ memberType: 'ACCOUNT_SET', memberId: SET }] },
      ],
      'velocity.json': { limits: [] },
    });
    await expect(planDeploy(readProject(dir), target)).rejects.toThrow(
      'account-sets.json: account set a contains itself through its member sets',
    );
    write({ 'account-sets.json': sets() });
    await deploy(readProject(dir), target);
    const moved = sets();
    moved[1] = { ...moved[1]!, journalId: id(999) } as never;
    write({ 'account-sets.json': moved });
    await expect(planDeploy(readProject(dir), target)).rejects.toThrow(
      `account-sets.json: account set customer: journalId cannot change (it is in journal 00000000-0000-0000-0000-000000000000)`,
    );
  });
});

describe('deploy: reserved tool names', () => {
  // An action named load_skill replaced an agent's skill loader: graphql, cel and load_skill are
  // refused by the engine (the one check), and deploy reports its error naming the file, applying nothing.
  it.each(['load_skill', 'graphql', 'cel'])(
    'a tool file named %s is refused with the engine’s error, naming the file, and nothing is applied',
    async (name) => {
      mkdirSync(join(dir, 'tools'));
      writeFileSync(join(dir, 'tools', `${name}.js`), 'function run() { return 1; }');
      writeFileSync(join(dir, 'tools', `${name}.json`), JSON.stringify({ actionId: id(500), description: 'Mine' }));
      const error = await deploy(readProject(dir), target).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DeployError);
      expect((error as Error).message).toContain(
        `tools/${name}.js: action name "${name}" is a reserved tool name: graphql, cel and load_skill are the engine's own tools [ALREADY_EXISTS]`,
      );
      expect((error as Error).message).toMatch(/nothing was applied$/);
      expect(engine.graphql(`{ account(id: "${WALLET}") { code } }`).errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    },
  );
});

describe('deploy: members, limits and attachments the running system added are kept (issue 34)', () => {
  it('a member added to a set at runtime stays and the plan says so; a member the deploy added and the file drops goes', async () => {
    await deploy(readProject(dir), target);
    ok(
      engine,
      `mutation { addToAccountSet(id: "${SET}", member: {memberType: ACCOUNT, memberId: "${CASH}"}) { version } }`,
    );
    const again = await deploy(readProject(dir), target);
    expect(formatPlan(again.plan.filter((i) => i.name === 'customer'))).toBe(
      '= account set customer unchanged\n  keeps members ["cash"]: written since the last deploy, not declared in account-sets.json',
    );
    const members = () =>
      ok(engine, `{ accountSet(id: "${SET}") { members(first: 5) { nodes { ... on Account { code } } } } }`)
        .accountSet.members.nodes.map((n: any) => n.code)
        .sort();
    expect(members()).toEqual(['cash', 'savings', 'wallet']);
    const edited = sets();
    edited[1] = { ...edited[1]!, members: [{ memberType: 'ACCOUNT', memberId: WALLET }] };
    write({ 'account-sets.json': edited });
    expect(await changes()).toEqual(['~ update account set customer (-1 member)']);
    await deploy(readProject(dir), target);
    expect(members()).toEqual(['cash', 'wallet']);
    // A velocity control attached by someone else to a project account is not the deploy's to detach.
    ok(
      engine,
      `mutation { attachVelocityControl(velocityControlId: "${CONTROL}", accountId: "${OTHER}") { accountId } }`,
    );
    expect(await changes()).toEqual([]);
    expect(
      ok(engine, `{ attachedControls(accountId: "${OTHER}", first: 5) { nodes { velocityControlId } } }`)
        .attachedControls.nodes,
    ).toHaveLength(1);
  });
});

describe('deployed records: what a deploy recorded, on the server (issue 34)', () => {
  const RECORD = 'mutation($r: [DeployedRecordInput!]!) { recordDeployment(records: $r) }';
  const READ = 'query($k: [DeployedRecordKey!]!) { deployedRecords(keys: $k) { kind id state principal version } }';
  const codeOf = (result: { errors?: ReadonlyArray<{ extensions?: Record<string, unknown> }> }) =>
    result.errors?.[0]?.extensions?.code;

  it('records and reads back by kind and id; each deploy of a record counts one version', () => {
    expect(
      ok(engine, RECORD, { r: [{ kind: 'ACCOUNT', id: WALLET, state: { fields: { name: 'Wallet' } } }] })
        .recordDeployment,
    ).toBe(1);
    ok(engine, RECORD, { r: [{ kind: 'ACCOUNT', id: WALLET, state: { fields: { name: 'Purse' } } }] });
    expect(
      ok(engine, READ, {
        k: [
          { kind: 'ACCOUNT', id: WALLET },
          { kind: 'TOOL', id: 'none' },
        ],
      }).deployedRecords,
    ).toEqual([{ kind: 'ACCOUNT', id: WALLET, state: { fields: { name: 'Purse' } }, principal: 'system', version: 2 }]);
  });

  it('bad input is refused with a clear error and writes nothing: a state that is no object or too large, too many records, a kind that does not exist', async () => {
    const small = await newEngine({ path: join(dir, 'small.db'), limits: { pageSizeMax: 2, jsonBytesMax: 100 } });
    const one = { kind: 'ACCOUNT', id: WALLET, state: { fields: {} } };
    const refused = (r: unknown[]) => small.graphql(RECORD, { r });
    expect(refused([one, { ...one, id: SAVINGS, state: ['x'] }]).errors?.[0]).toMatchObject({
      message: `the state of account "${SAVINGS}" must be a JSON object, got ["x"]`,
      extensions: { code: 'BAD_REQUEST' },
    });
    expect(refused([{ ...one, state: { fields: { name: 'x'.repeat(200) } } }]).errors?.[0]).toMatchObject({
      message: expect.stringContaining('jsonBytesMax is 100'),
      extensions: { code: 'LIMIT_EXCEEDED' },
    });
    expect(refused([one, one, one]).errors?.[0]).toMatchObject({
      message: 'recordDeployment(records:) lists 3 records; pageSizeMax is 2',
      extensions: { code: 'LIMIT_EXCEEDED' },
    });
    expect(
      codeOf(
        small.graphql(READ, {
          k: [
            { kind: 'ACCOUNT', id: WALLET },
            { kind: 'ACCOUNT', id: SAVINGS },
            { kind: 'ACCOUNT', id: OTHER },
          ],
        }),
      ),
    ).toBe('LIMIT_EXCEEDED');
    expect(codeOf(refused([{ ...one, kind: 'WALLET' }]))).toBe('BAD_REQUEST');
    // The first record of a refused request went with it.
    expect(ok(small, READ, { k: [{ kind: 'ACCOUNT', id: WALLET }] }).deployedRecords).toEqual([]);
    small.close();
  });

  it('a record planned from an older version is RECORD_CHANGED; a client without deploy.Record, and a program, cannot write one', () => {
    ok(
      engine,
      `mutation { createAccount(input: {accountId: "${WALLET}", code: "wallet", name: "Wallet"}) { version } }`,
    );
    const stale = engine.graphql(RECORD, {
      r: [{ kind: 'ACCOUNT', id: WALLET, state: { fields: {} }, expectVersion: 2 }],
    });
    expect(stale.errors?.[0]).toMatchObject({
      message: `account "${WALLET}" is at version 1, not 2 as when the deploy was planned`,
      extensions: { code: 'RECORD_CHANGED', details: { expected: 2, actual: 1 } },
    });
    expect(
      ok(engine, RECORD, { r: [{ kind: 'ACCOUNT', id: WALLET, state: { fields: {} }, expectVersion: 1 }] })
        .recordDeployment,
    ).toBe(1);

    ok(
      engine,
      'mutation { auth { createClient(input: {principal: "ops", name: "ops", policies: [{effect: ALLOW, actions: [SELECT, INSERT, UPDATE], resources: ["financial.*", "actions.*"]}]}) { apiKey } } }',
    );
    expect(
      engine.graphql(READ, { k: [{ kind: 'ACCOUNT', id: WALLET }] }, { principal: 'ops' }).errors?.[0]?.message,
    ).toBe('SELECT on deploy.Record refused by client ops: no policy allows it');
    expect(
      codeOf(engine.graphql(RECORD, { r: [{ kind: 'ACCOUNT', id: SAVINGS, state: {} }] }, { principal: 'ops' })),
    ).toBe('ACCESS_DENIED');

    // A program allowed everything still cannot make its own writes look deployed.
    ok(
      engine,
      'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
      {
        id: id(500),
        input: {
          name: 'forge',
          kind: 'tool',
          tool: { name: 'forge', inputSchema: { type: 'object' } },
          config: {
            runtime: 'javascript',
            src: `function run() { return graphql('mutation($r: [DeployedRecordInput!]!) { recordDeployment(records: $r) }', { r: [{ kind: 'ACCOUNT', id: '${WALLET}', state: { fields: { name: 'forged' } } }] }); }`,
          },
          policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }],
        },
      },
    );
    const call = ok(
      engine,
      `mutation { actions { invokeAction(name: "forge", input: {executionId: "${id(501)}", actionVersion: 1, input: {}}) { status error { code message } } } }`,
    ).actions.invokeAction;
    expect(call.status).toBe('FAILED');
    expect(call.error.message).toContain('deployed records cannot be written from inside a tool call');
    expect(ok(engine, READ, { k: [{ kind: 'ACCOUNT', id: WALLET }] }).deployedRecords[0].state).toEqual({ fields: {} });
  });
});
