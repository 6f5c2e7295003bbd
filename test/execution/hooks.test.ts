import { describe, expect, it } from 'vitest';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';
import { createAccount, createTransferCode } from '../helpers/ledger.js';

const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;

describe('before and after hooks', () => {
  it('a before hook that redacts an input field and an after hook that adds an output field, both children in the tree', async () => {
    const engine = await newEngine();
    ok(engine, CREATE, {
      id: id(1),
      input: {
        name: 'redact',
        config: {
          runtime: 'javascript',
          src: 'function run(event) { const { card, ...rest } = event.data; return { ...rest, card: card.slice(-4) }; }',
        },
      },
    });
    ok(engine, CREATE, {
      id: id(2),
      input: {
        name: 'stamp',
        config: {
          runtime: 'javascript',
          src: 'function run(event) { return { ...event.data.output, seen_card: event.data.input.card }; }',
        },
      },
    });
    ok(engine, CREATE, {
      id: id(3),
      input: {
        name: 'charge',
        config: { runtime: 'javascript', src: 'function run(event) { return { charged: event.data.card }; }' },
        tool: {
          description: 'Charges a card.',
          inputSchema: {
            type: 'object',
            properties: { card: { type: 'string' }, amount: { type: 'string' } },
            required: ['card'],
          },
        },
        hooks: { before: { name: 'redact', version: 1 }, after: { name: 'stamp' } },
        policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
      },
    });
    const run = ok(
      engine,
      `mutation { actions { invokeAction(name: "charge", input: {executionId: "${id(100)}", actionVersion: 1, input: {card: "4111111111111111", amount: "5"}}) {
      status input output children { actionName status input output } } } }`,
    ).actions.invokeAction;
    // The program saw only the last four digits, and the execution records what it saw.
    expect(run).toMatchObject({
      status: 'SUCCEEDED',
      input: { card: '1111', amount: '5' },
      output: { charged: '1111', seen_card: '1111' },
    });
    expect(run.children.map((c: any) => [c.actionName, c.status])).toEqual([
      ['redact', 'SUCCEEDED'],
      ['stamp', 'SUCCEEDED'],
    ]);
    expect(run.children[0].input).toEqual({ card: '4111111111111111', amount: '5' });
    expect(
      ok(engine, `{ actions { action(name: "charge") { hooks { before { name version } after { name version } } } } }`)
        .actions.action.hooks,
    ).toEqual({ before: { name: 'redact', version: 1 }, after: { name: 'stamp', version: null } });
    engine.close();
  });

  it('a before hook that refuses fails the call with its reason; its own writes roll back, the caller’s stay', async () => {
    const engine = await newEngine();
    createAccount(engine, 1);
    createAccount(engine, 2);
    createTransferCode(engine);
    const post = (n: number) =>
      `graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', { i: { transactionId: '${id(n)}', tranCode: 'TRANSFER', params: { from: '${id(1)}', to: '${id(2)}', amount: '1' } } });`;
    const money = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }];
    ok(engine, CREATE, {
      id: id(10),
      input: {
        name: 'limit_check',
        config: {
          runtime: 'javascript',
          src: `function run(event) { ${post(501)} if (Number(event.data.amount) > 100) fail('over the limit of 100', 'Ask for less.', { retry: false }); return null; }`,
        },
        policies: money,
      },
    });
    ok(engine, CREATE, {
      id: id(11),
      input: {
        name: 'pay',
        config: {
          runtime: 'javascript',
          src: `function run(event) { ${post(502)} return { paid: event.data.amount }; }`,
        },
        hooks: { before: { name: 'limit_check' } },
        policies: [...money, { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
      },
    });
    ok(engine, CREATE, {
      id: id(12),
      input: {
        name: 'caller',
        config: {
          runtime: 'javascript',
          src: `function run(event) { ${post(503)} const r = tools.pay({ amount: event.data.amount }, { check: false }); return { ok: r.ok, error: r.error }; }`,
        },
        tools: [{ name: 'pay', version: 1 }],
        policies: [...money, { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
      },
    });
    const run = ok(
      engine,
      `mutation { actions { invokeAction(name: "caller", input: {executionId: "${id(200)}", actionVersion: 1, input: {amount: "500"}}) {
      status output children { actionName status error { code message } children { actionName status } } } } }`,
    ).actions.invokeAction;
    expect(run.status).toBe('SUCCEEDED');
    expect(run.output).toMatchObject({
      ok: false,
      error: {
        code: 'TOOL_FAILED',
        message: 'the before hook limit_check refused the call: over the limit of 100',
        hint: 'Ask for less.',
      },
    });
    const pay = run.children.find((c: any) => c.actionName === 'pay');
    expect(pay).toMatchObject({ status: 'FAILED', children: [{ actionName: 'limit_check', status: 'FAILED' }] });
    // The caller's own posting stays; the hook's and pay's never happened.
    expect(count(engine, 'transactions')).toBe(1);
    expect(ok(engine, `{ transaction(id: "${id(503)}") { transactionId } }`).transaction.transactionId).toBe(id(503));
    // Under the limit the hook lets it through (returning null: the input unchanged).
    expect(
      ok(
        engine,
        `mutation { actions { invokeAction(name: "pay", input: {executionId: "${id(201)}", actionVersion: 1, input: {amount: "5"}}) { status output } } }`,
      ).actions.invokeAction,
    ).toMatchObject({ status: 'SUCCEEDED', output: { paid: '5' } });
    engine.close();
  });

  it('hooks are checked when the version is made: existing tools, not itself, not native, not a model or agent', async () => {
    const engine = await newEngine();
    const make = (hooks: unknown) =>
      fails(engine, CREATE, {
        id: id(20 + Math.floor(Math.random() * 1000)),
        input: {
          name: `h${Math.floor(Math.random() * 1e6)}`,
          config: { runtime: 'javascript', src: 'function run() { return {}; }' },
          hooks,
        },
      });
    expect(make({ before: { name: 'nope' } }).code).toBe('NOT_FOUND');
    expect(make({ after: { name: 'graphql' } }).message).toContain('native graphql');
    ok(engine, CREATE, {
      id: id(30),
      input: { name: 'selfish', config: { runtime: 'javascript', src: 'function run() { return {}; }' } },
    });
    expect(
      fails(
        engine,
        `mutation { actions { updateAction(id: "${id(30)}", input: {hooks: {before: {name: "selfish"}}}) { version } } }`,
      ).message,
    ).toContain('itself');
    engine.close();
  });
});
