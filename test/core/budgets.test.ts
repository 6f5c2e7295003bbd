// Budgets by who asks and what it is (issue 34): every request runs under requestDeadlineMs; an
// operator's long work asks for operatorDeadlineMs with @budget(name: OPERATOR), which needs a
// policy allowing INSERT on budget.Operator. Every error of work that ran out of time names its
// budget (details.budget) and the TALLY_CONFIG key that raises it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { resolveLimits } from '../../src/limits.js';
import { count, fails, id, newEngine, ok, postgresTestDatabase } from '../helpers/engine.js';

const CREATE =
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }';
const CLIENT = 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }';
const EVERYTHING = [
  { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['financial.*', 'actions.*'] },
];
/** Busy for 120 ms of wall time: longer than the standard budget here (60 ms), far inside the operator's. */
const SLOW = 'function run() { const end = Date.now() + 120; while (Date.now() < end) {} return { done: true }; }';

let engine: Engine;
let seq = 0;
const eid = () => id(700_000 + ++seq);
const invokeSlow = (directive = '') =>
  `mutation${directive} { createAccount(input: {accountId: "${id(900 + ++seq)}", code: "budget-${seq}", name: "b"}) { code } actions { invokeAction(name: "slow", input: {executionId: "${eid()}", actionVersion: 1, input: {}}) { status output } } }`;

beforeAll(async () => {
  engine = await newEngine({
    limits: { requestDeadlineMs: 60, operatorDeadlineMs: 5000, toolTimeoutMs: 2000, toolTimeoutMsMax: 2000 },
  });
  ok(engine, CREATE, {
    id: id(1),
    input: { name: 'slow', kind: 'tool', config: { runtime: 'javascript', src: SLOW }, policies: EVERYTHING },
  });
  ok(engine, CLIENT, { i: { principal: 'teller', name: 'Teller', policies: EVERYTHING } });
  ok(engine, CLIENT, {
    i: {
      principal: 'deployer',
      name: 'Deployer',
      policies: [...EVERYTHING, { effect: 'ALLOW', actions: ['INSERT'], resources: ['budget.Operator'] }],
    },
  });
});
afterAll(() => engine.close());

describe('the standard budget (requestDeadlineMs)', () => {
  it('a request past it fails whole, naming requestDeadlineMs and how to raise it or ask for the operator budget', () => {
    const accounts = count(engine, 'accounts');
    const error = fails(engine, invokeSlow(), undefined, 'deployer');
    expect(error.code).toBe('TIMEOUT');
    expect(error.message).toMatch(
      /^slow ran past requestDeadlineMs \(60 ms, the request's deadline, shared by every call in it\)$/,
    );
    expect(error.result.errors![0]!.extensions).toMatchObject({
      details: { budget: 'requestDeadlineMs', requestDeadlineMs: 60 },
    });
    expect(error.hint).toContain('limits.requestDeadlineMs in TALLY_CONFIG');
    expect(error.hint).toContain('@budget(name: OPERATOR)');
    expect(count(engine, 'accounts')).toBe(accounts);
  });

  it('@budget(name: STANDARD) is the same budget, for anyone', () => {
    expect(fails(engine, invokeSlow(' @budget(name: STANDARD)'), undefined, 'teller').code).toBe('TIMEOUT');
  });
});

describe('the operator budget (operatorDeadlineMs)', () => {
  it('a client allowed INSERT on budget.Operator runs the same request to the end', () => {
    const data = ok(engine, invokeSlow(' @budget(name: OPERATOR)'), undefined, 'deployer');
    expect(data.actions.invokeAction).toMatchObject({ status: 'SUCCEEDED', output: { done: true } });
  });

  it('the engine itself (the CLI with --db) may use it', () => {
    expect(ok(engine, invokeSlow(' @budget(name: OPERATOR)')).actions.invokeAction.status).toBe('SUCCEEDED');
  });

  it('a client without that policy is refused before anything runs, naming the resource, and writes nothing', () => {
    const accounts = count(engine, 'accounts');
    const executions = count(engine, 'executions');
    const error = fails(engine, invokeSlow(' @budget(name: OPERATOR)'), undefined, 'teller');
    expect(error.code).toBe('ACCESS_DENIED');
    expect(error.message).toContain('teller may not run a request under the OPERATOR budget');
    expect(error.message).toContain('INSERT on budget.Operator');
    expect(error.hint).toContain('INSERT on budget.Operator');
    expect(count(engine, 'accounts')).toBe(accounts);
    expect(count(engine, 'executions')).toBe(executions);
  });

  it('past operatorDeadlineMs a request fails naming that budget', async () => {
    const tight = await newEngine({
      limits: { requestDeadlineMs: 20, operatorDeadlineMs: 60, toolTimeoutMs: 2000, toolTimeoutMsMax: 2000 },
    });
    ok(tight, CREATE, {
      id: id(1),
      input: { name: 'slow', kind: 'tool', config: { runtime: 'javascript', src: SLOW }, policies: EVERYTHING },
    });
    const error = fails(tight, invokeSlow(' @budget(name: OPERATOR)'));
    expect(error.message).toMatch(/ran past operatorDeadlineMs \(60 ms/);
    expect(error.result.errors![0]!.extensions).toMatchObject({
      details: { budget: 'operatorDeadlineMs', operatorDeadlineMs: 60 },
    });
    expect(error.hint).toContain('limits.operatorDeadlineMs in TALLY_CONFIG');
    tight.close();
  });

  it('a program cannot ask for it: @budget in a graphql() call is refused (the call runs inside its request)', () => {
    ok(engine, CREATE, {
      id: id(2),
      input: {
        name: 'stretch',
        kind: 'tool',
        policies: EVERYTHING,
        config: {
          runtime: 'javascript',
          src: 'function run() { return graphql("query @budget(name: OPERATOR) { journals(first: 1) { nodes { journalId } } }"); }',
        },
      },
    });
    const run = ok(
      engine,
      `mutation { actions { invokeAction(name: "stretch", input: {executionId: "${eid()}", actionVersion: 1, input: {}}) { status error { code message } } } }`,
      undefined,
      'deployer',
    );
    expect(run.actions.invokeAction).toMatchObject({ status: 'FAILED', error: { code: 'BAD_REQUEST' } });
    expect(run.actions.invokeAction.error.message).toContain("a graphql() call runs inside its request's");
  });

  it('the budget is named in the document, never by a variable; an unknown name is a validation error', () => {
    const byVariable = fails(
      engine,
      'query($b: RequestBudget!) @budget(name: $b) { journals(first: 1) { nodes { journalId } } }',
      { b: 'OPERATOR' },
      'deployer',
    );
    expect(byVariable).toMatchObject({
      code: 'BAD_REQUEST',
      message: '@budget(name:) takes a literal budget name, not a variable',
    });
    expect(
      fails(
        engine,
        'query @budget(name: FOREVER) { journals(first: 1) { nodes { journalId } } }',
        undefined,
        'deployer',
      ).message,
    ).toContain('FOREVER');
  });

  it('operatorDeadlineMs may not be shorter than requestDeadlineMs', () => {
    expect(() => resolveLimits({ requestDeadlineMs: 1000, operatorDeadlineMs: 500 })).toThrow(
      /operatorDeadlineMs \(500\) must be at least requestDeadlineMs \(1000\)/,
    );
  });
});

describe("a tool's own timeout", () => {
  it("names toolTimeoutMs, or the version's execution.timeoutMs, when it set the deadline", async () => {
    const own = await newEngine({ limits: { toolTimeoutMs: 50, requestDeadlineMs: 5000 } });
    const spin = 'function run() { while (true) {} }';
    ok(own, CREATE, {
      id: id(1),
      input: { name: 'spin', kind: 'tool', config: { runtime: 'javascript', src: spin }, policies: EVERYTHING },
    });
    ok(own, CREATE, {
      id: id(2),
      input: {
        name: 'spin_own',
        kind: 'tool',
        config: { runtime: 'javascript', src: spin },
        policies: EVERYTHING,
        execution: { timeoutMs: 40 },
      },
    });
    const byDefault = fails(
      own,
      `mutation { actions { invokeAction(name: "spin", input: {executionId: "${eid()}", actionVersion: 1, input: {}}) { status } } }`,
    );
    expect(byDefault.message).toBe('spin ran past toolTimeoutMs (50 ms)');
    expect(byDefault.result.errors![0]!.extensions).toMatchObject({
      code: 'TIMEOUT',
      details: { budget: 'toolTimeoutMs', toolTimeoutMs: 50 },
    });
    expect(byDefault.hint).toContain('limits.toolTimeoutMs in TALLY_CONFIG');
    const bySetting = fails(
      own,
      `mutation { actions { invokeAction(name: "spin_own", input: {executionId: "${eid()}", actionVersion: 1, input: {}}) { status } } }`,
    );
    expect(bySetting.message).toBe('spin_own ran past execution.timeoutMs (40 ms)');
    expect(bySetting.hint).toContain("raise the version's execution.timeoutMs");
    own.close();
  });
});

describe('how long a tool may ask for, by backend (toolTimeoutMsMax)', () => {
  const TEN_S = {
    name: 'long_report',
    kind: 'tool',
    config: { runtime: 'javascript', src: 'function run() { return 1; }' },
    policies: EVERYTHING,
    execution: { timeoutMs: 10_000 },
  };

  it('on SQLite a version may not ask past 750 ms by default: it would hold the one write lock', async () => {
    const sqlite = await newEngine({ path: ':memory:' });
    const error = fails(sqlite, CREATE, { id: id(1), input: TEN_S });
    expect(error.message).toContain('toolTimeoutMsMax');
    expect(error.message).toContain('750');
    expect(sqlite.limits.toolTimeoutMsMax).toBe(750);
    sqlite.close();
  });

  it.skipIf(!process.env.TALLY_TEST_PG_URL)(
    'on PostgreSQL it may ask up to 30 s, and a started run uses it',
    async () => {
      const pg = await newEngine({ path: postgresTestDatabase() });
      expect(pg.limits.toolTimeoutMsMax).toBe(30_000);
      // Busy for 1.2 s: past every budget of a request, inside its own timeout as a started run.
      ok(pg, CREATE, {
        id: id(1),
        input: { ...TEN_S, config: { runtime: 'javascript', src: SLOW.replace('120', '1200') } },
      });
      ok(
        pg,
        `mutation { actions { startAction(name: "long_report", input: {executionId: "${eid()}", input: {}}) { status } } }`,
      );
      const worker = pg.createWorker();
      await worker.drainAll();
      expect(pg.db.prepare("SELECT status FROM executions WHERE action_name = 'long_report'").all()).toEqual([
        { status: 'SUCCEEDED' },
      ]);
      pg.close();
    },
  );

  it('no backend lets it pass 5 minutes; the operator may set it lower or higher within that', () => {
    expect(() => resolveLimits({ toolTimeoutMsMax: 300_001 })).toThrow(
      /toolTimeoutMsMax \(300001\) may be at most 300000/,
    );
    expect(resolveLimits({ toolTimeoutMsMax: 300_000 }).toolTimeoutMsMax).toBe(300_000);
  });
});
