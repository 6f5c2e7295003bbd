import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { engineBackend } from '../../src/mcp/backend.js';
import { createMcpServer } from '../../src/mcp/server.js';
import { fails, id, newEngine, ok } from '../helpers/engine.js';

const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const UPDATE = `mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) { version } } }`;
const READ = `query($name: String!) { actions { action(name: $name) { name version
  tool { name title description aliases metadata readOnly } execution { maxAttempts timeoutMs retryIf cacheTtlMs } } } }`;
const SRC = 'function run(event) { return { echoed: event.data }; }';
const READS = { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] };
const WRITES = { effect: 'ALLOW', actions: ['SELECT', 'INSERT'], resources: ['financial.*'] };
const INVOKES = { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] };

function input(name: string, extra: Record<string, unknown> = {}, tool: Record<string, unknown> = {}) {
  return {
    name,
    kind: 'tool',
    config: { runtime: 'javascript', src: SRC },
    tool: { description: `The ${name} tool.`, ...tool },
    policies: [READS],
    ...extra,
  };
}

function create(
  engine: Engine,
  n: number,
  name: string,
  extra: Record<string, unknown> = {},
  tool: Record<string, unknown> = {},
) {
  return ok(engine, CREATE, { id: id(n), input: input(name, extra, tool) });
}

function refused(
  engine: Engine,
  n: number,
  name: string,
  extra: Record<string, unknown> = {},
  tool: Record<string, unknown> = {},
) {
  return fails(engine, CREATE, { id: id(n), input: input(name, extra, tool) });
}

const read = (engine: Engine, name: string) => ok(engine, READ, { name }).actions.action;

describe('action version fields: title, aliases, metadata, readOnly, retryIf, cacheTtlMs', () => {
  let engine: Engine;

  beforeAll(async () => {
    engine = await newEngine({ limits: { jsonBytesMax: 4096 } });
    create(
      engine,
      1,
      'balance',
      { execution: { retryIf: 'error.code == "TIMEOUT" && error.attempt < 3', cacheTtlMs: 60_000 } },
      {
        title: 'Wallet balance',
        aliases: ['account_balance', 'wallet_balance'],
        metadata: { owner: 'payments', tags: ['read'], nested: { n: 1 } },
      },
    );
    create(engine, 2, 'writer', { policies: [WRITES] });
    create(engine, 3, 'wrapper', { policies: [READS, INVOKES], tools: [{ name: 'writer' }] });
    create(engine, 4, 'plain');
  });

  afterAll(() => engine.close());

  it('stores each field and returns it as given; an older-style version reads the defaults', () => {
    expect(read(engine, 'balance')).toEqual({
      name: 'balance',
      version: 1,
      tool: {
        name: 'balance',
        title: 'Wallet balance',
        description: 'The balance tool.',
        aliases: ['account_balance', 'wallet_balance'],
        metadata: { owner: 'payments', tags: ['read'], nested: { n: 1 } },
        readOnly: true,
      },
      execution: {
        maxAttempts: 3,
        timeoutMs: null,
        retryIf: 'error.code == "TIMEOUT" && error.attempt < 3',
        cacheTtlMs: 60_000,
      },
    });
    expect(read(engine, 'plain').tool).toMatchObject({ title: null, aliases: [], metadata: null });
    expect(read(engine, 'plain').execution).toMatchObject({ retryIf: null, cacheTtlMs: null });
  });

  it('an update keeps the fields it does not send, and null clears them', () => {
    ok(engine, UPDATE, { id: id(4), input: { tool: { title: 'Plain', aliases: ['plain_two'], metadata: { a: 1 } } } });
    ok(engine, UPDATE, { id: id(4), input: { tool: { description: 'Still plain.' } } });
    expect(read(engine, 'plain').tool).toMatchObject({
      title: 'Plain',
      aliases: ['plain_two'],
      metadata: { a: 1 },
      description: 'Still plain.',
    });
    ok(engine, UPDATE, { id: id(4), input: { tool: { title: null, aliases: [], metadata: null } } });
    expect(read(engine, 'plain').tool).toMatchObject({ title: null, aliases: [], metadata: null });
    // The alias it gave up is still its own: its versions 2 and 3 answer to it (and any version can
    // be activated again), so no other action may take it, for the action's whole life.
    const taken = refused(engine, 5, 'plain_two');
    expect(taken).toMatchObject({ code: 'ALREADY_EXISTS', message: '"plain_two" is an alias of plain' });
    expect(taken.hint).toContain("for the action's whole life");
  });

  it('graphql, cel and load_skill are reserved: no action, version or alias takes them', () => {
    for (const name of ['graphql', 'cel', 'load_skill']) {
      const error = refused(engine, 52, name);
      expect(error).toMatchObject({
        code: 'ALREADY_EXISTS',
        message: `action name "${name}" is a reserved tool name: graphql, cel and load_skill are the engine's own tools`,
      });
      expect(error.hint).toContain(`my_${name}`);
      expect(fails(engine, UPDATE, { id: id(4), input: { tool: { aliases: [name] } } })).toMatchObject({
        code: 'ALREADY_EXISTS',
        message: expect.stringContaining(`tool.aliases: "${name}" is a reserved tool name`),
      });
    }
    expect(fails(engine, READ, { name: 'load_skill' }).code).toBe('NOT_FOUND');
  });

  it('refuses each bad value with its code, naming the value', () => {
    const cases: Array<[Record<string, unknown>, Record<string, unknown>, string, string]> = [
      [{}, { title: 'x'.repeat(201) }, 'LIMIT_EXCEEDED', 'tool.title'],
      [{}, { aliases: ['Bad.Name'] }, 'BAD_REQUEST', '"Bad.Name" is not a tool name'],
      [{}, { aliases: ['graphql'] }, 'ALREADY_EXISTS', 'tool.aliases: "graphql" is a reserved tool name'],
      [{}, { aliases: ['cel'] }, 'ALREADY_EXISTS', 'tool.aliases: "cel" is a reserved tool name'],
      [{}, { aliases: ['load_skill'] }, 'ALREADY_EXISTS', 'tool.aliases: "load_skill" is a reserved tool name'],
      [{}, { aliases: ['writer'] }, 'ALREADY_EXISTS', '"writer" of fresh is the name of another action (writer)'],
      [
        {},
        { aliases: ['account_balance'] },
        'ALREADY_EXISTS',
        '"account_balance" of fresh is already an alias of balance',
      ],
      [{}, { aliases: ['fresh'] }, 'BAD_REQUEST', '"fresh" is the action\'s own name'],
      [{}, { aliases: ['a_one', 'a_one'] }, 'BAD_REQUEST', '"a_one" is listed twice'],
      [
        {},
        { aliases: ['a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7', 'a8', 'a9'] },
        'LIMIT_EXCEEDED',
        'tool.aliases has 9 names; at most 8',
      ],
      [{}, { metadata: ['not', 'an', 'object'] }, 'BAD_REQUEST', 'tool.metadata must be a JSON object'],
      [{}, { metadata: 'text' }, 'BAD_REQUEST', 'tool.metadata must be a JSON object, got "text"'],
      [{}, { metadata: { blob: 'x'.repeat(5000) } }, 'LIMIT_EXCEEDED', 'jsonBytesMax is 4096'],
      [{ execution: { retryIf: 'error.code ==' } }, {}, 'BAD_REQUEST', 'execution.retryIf "error.code =="'],
      [{ execution: { cacheTtlMs: 3_600_001 } }, {}, 'LIMIT_EXCEEDED', 'execution.cacheTtlMs 3600001'],
      [{ execution: { cacheTtlMs: 0 } }, {}, 'BAD_REQUEST', 'execution.cacheTtlMs must be a positive integer, got 0'],
      [
        { policies: [WRITES], execution: { cacheTtlMs: 1000 } },
        {},
        'BAD_REQUEST',
        'execution.cacheTtlMs 1000: fresh is not read-only',
      ],
    ];
    for (const [extra, tool, code, message] of cases) {
      const error = refused(engine, 50, 'fresh', extra, tool);
      expect({ code: error.code, message: error.message }, JSON.stringify(tool)).toMatchObject({
        code,
        message: expect.stringContaining(message),
      });
    }
    // Nothing was made.
    expect(fails(engine, READ, { name: 'fresh' }).code).toBe('NOT_FOUND');
  });

  it('a name that is another action’s alias is taken; an alias kept on update is not a clash with itself', () => {
    const error = refused(engine, 51, 'account_balance');
    expect(error).toMatchObject({
      code: 'ALREADY_EXISTS',
      message: expect.stringContaining('"account_balance" is an alias of balance'),
    });
    ok(engine, UPDATE, { id: id(1), input: { tool: { aliases: ['account_balance', 'wallet_balance'] } } });
  });

  it('cacheTtlMs on a tool that writes (through a reference too) is refused, with the hint', () => {
    const own = fails(engine, UPDATE, { id: id(2), input: { execution: { cacheTtlMs: 1000 } } });
    expect(own).toMatchObject({
      code: 'BAD_REQUEST',
      hint: 'a tool whose policies allow writes cannot cache: its result depends on what it changed',
    });
    const through = fails(engine, UPDATE, { id: id(3), input: { execution: { cacheTtlMs: 1000 } } });
    expect(through).toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining('wrapper is not read-only'),
    });
    // A cached read-only tool that is given write policies later loses its cacheTtlMs check too.
    expect(fails(engine, UPDATE, { id: id(1), input: { policies: [WRITES] } })).toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining('execution.cacheTtlMs 60000'),
    });
  });

  it('readOnly: true for a SELECT-only tool, false for one that writes and for one that references it', () => {
    expect(read(engine, 'balance').tool.readOnly).toBe(true);
    expect(read(engine, 'writer').tool.readOnly).toBe(false);
    expect(read(engine, 'wrapper').tool.readOnly).toBe(false);
    // The same rule as access.readOnly (MCP's readOnlyHint).
    const access = ok(engine, '{ actions { action(name: "wrapper") { access { readOnly } } } }').actions.action.access;
    expect(access.readOnly).toBe(false);
  });

  it('invokeAction and startAction take an alias for the name; the execution records the action name', () => {
    const v = read(engine, 'balance').version;
    const invoked = ok(
      engine,
      `mutation { actions { invokeAction(name: "account_balance", input: {executionId: "${id(7001)}", actionVersion: ${v}, input: {code: "alice"}}) { status actionName output } } }`,
    ).actions.invokeAction;
    expect(invoked).toMatchObject({
      status: 'SUCCEEDED',
      actionName: 'balance',
      output: { echoed: { code: 'alice' } },
    });
    const started = ok(
      engine,
      `mutation { actions { startAction(name: "wallet_balance", input: {executionId: "${id(7002)}", input: {}}) { status actionName } } }`,
    ).actions.startAction;
    expect(started).toMatchObject({ actionName: 'balance' });
    expect(
      fails(
        engine,
        `mutation { actions { invokeAction(name: "no_such_alias", input: {executionId: "${id(7003)}", actionVersion: 1, input: {}}) { status } } }`,
      ).code,
    ).toBe('NOT_FOUND');
  });

  it('a policy on the action name holds when it is called by an alias', () => {
    const key = ok(
      engine,
      `mutation { auth { createClient(input: {principal: "limited", name: "l", policies: [
      {effect: ALLOW, actions: [SELECT, INSERT], resources: ["*"]},
      {effect: DENY, actions: [INSERT], resources: ["actions.Execution"], assertions: {balance: "context.document.action == 'balance'"}}]}) { apiKey } } }`,
    ).auth.createClient.apiKey;
    expect(key).toBeTruthy();
    const v = read(engine, 'balance').version;
    // Allowed when called by its name's other spelling only if the DENY on the name did not hold.
    const result = engine.graphql(
      `mutation { actions { invokeAction(name: "account_balance", input: {executionId: "${id(7004)}", actionVersion: ${v}, input: {}}) { status } } }`,
      null,
      { principal: 'limited' },
    );
    expect(result.errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
  });
});

describe('descriptions: an agent references only described tools; MCP lists only those', () => {
  let engine: Engine;

  beforeAll(async () => {
    process.env.TEST_FIELDS_KEY = 'k';
    engine = await newEngine({
      providers: [
        {
          name: 'local',
          format: 'openai',
          baseUrl: 'http://127.0.0.1:9/v1',
          models: ['m'],
          apiKeyEnv: 'TEST_FIELDS_KEY',
        },
      ],
    });
    create(engine, 1, 'described');
    create(engine, 2, 'undescribed', {}, { description: '' });
    ok(
      engine,
      `mutation { auth { reader: createClient(input: {principal: "reader", name: "r", policies: [{effect: ALLOW, actions: [SELECT, INSERT], resources: ["*"]}]}) { apiKey } } }`,
    );
  });

  afterAll(() => engine.close());

  const agent = (tools: unknown[]) => ({
    name: 'helper',
    kind: 'agent',
    config: { provider: 'local', model: 'm', instructions: 'Help.' },
    tool: { description: 'Helps.' },
    tools,
  });

  it('an agent whose tools include one without a description is refused, naming it, with the hint', () => {
    const error = fails(engine, CREATE, { id: id(10), input: agent([{ name: 'described' }, { name: 'undescribed' }]) });
    expect(error).toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining('"undescribed"'),
      hint: 'it is what the model reads; give it a description',
    });
    ok(engine, CREATE, { id: id(10), input: agent([{ name: 'described' }, { name: 'graphql' }]) });
    // Updating it to reference the undescribed tool is refused too; describing the tool lets it through.
    expect(fails(engine, UPDATE, { id: id(10), input: { tools: [{ name: 'undescribed' }] } }).code).toBe('BAD_REQUEST');
    ok(engine, UPDATE, { id: id(2), input: { tool: { description: 'Now described.' } } });
    ok(engine, UPDATE, { id: id(10), input: { tools: [{ name: 'undescribed' }] } });
    // A pinned version without a description is still refused.
    expect(
      fails(engine, UPDATE, { id: id(10), input: { tools: [{ name: 'undescribed', version: 1 }] } }).message,
    ).toContain('(version 1) has no description');
  });

  it('MCP tools/list skips a tool with an empty description', async () => {
    create(engine, 3, 'silent', {}, { description: '   ' });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await createMcpServer(engineBackend(engine, { principal: 'reader' }), {
      toolsPageSize: engine.limits.mcpToolsPageSize,
    }).connect(serverSide);
    const client = new Client({ name: 'test', version: '1' });
    await client.connect(clientSide);
    const { tools } = await client.listTools();
    await client.close();
    const names = tools.map((t) => t.name);
    expect(names).toContain('described');
    expect(names).not.toContain('silent');
  });
});

describe('tool.internal: a helper, hook or trigger target, versioned like the rest of a version', () => {
  let engine: Engine;
  const INVOKE = `mutation($n: String!, $e: UUID!, $v: Int!) { actions { invokeAction(name: $n, input: {executionId: $e, actionVersion: $v, input: {}}) {
    status output error { code message } children { actionName status } } } }`;
  const VERSIONS = `query($name: String!) { actions { action(name: $name) { versions { version tool { internal } } } } }`;

  beforeAll(async () => {
    process.env.TEST_FIELDS_KEY = 'k';
    engine = await newEngine({
      providers: [
        {
          name: 'local',
          format: 'openai',
          baseUrl: 'http://127.0.0.1:9/v1',
          models: ['m'],
          apiKeyEnv: 'TEST_FIELDS_KEY',
        },
      ],
    });
    ok(engine, CREATE, {
      id: id(1),
      input: {
        ...input('helper', {}, { internal: true }),
        config: { runtime: 'javascript', src: 'function run() { return {helped: true}; }' },
      },
    });
    ok(engine, CREATE, {
      id: id(2),
      input: {
        ...input('caller', { tools: [{ name: 'helper' }], policies: [READS, INVOKES] }),
        config: { runtime: 'javascript', src: 'function run() { return tools.helper({}); }' },
      },
    });
    ok(engine, CREATE, {
      id: id(3),
      input: {
        ...input('after_hook', {}, { internal: true }),
        config: { runtime: 'javascript', src: 'function run(event) { return {...event.data.output, hooked: true}; }' },
      },
    });
    ok(engine, CREATE, {
      id: id(4),
      input: {
        ...input('hooked', { hooks: { after: { name: 'after_hook' } }, policies: [READS, INVOKES] }),
        config: { runtime: 'javascript', src: 'function run() { return {ran: true}; }' },
      },
    });
  });
  afterAll(() => engine.close());

  it('is stored on the version, shown in GraphQL, kept by the next version unless changed', () => {
    expect(ok(engine, VERSIONS, { name: 'helper' }).actions.action.versions).toEqual([
      { version: 1, tool: { internal: true } },
    ]);
    ok(engine, UPDATE, { id: id(1), input: { tool: { description: 'Still a helper.' } } });
    ok(engine, UPDATE, { id: id(1), input: { tool: { internal: false } } });
    ok(engine, UPDATE, { id: id(1), input: { tool: { internal: true } } });
    expect(ok(engine, VERSIONS, { name: 'helper' }).actions.action.versions).toEqual([
      { version: 1, tool: { internal: true } },
      { version: 2, tool: { internal: true } },
      { version: 3, tool: { internal: false } },
      { version: 4, tool: { internal: true } },
    ]);
    expect(ok(engine, VERSIONS, { name: 'caller' }).actions.action.versions).toEqual([
      { version: 1, tool: { internal: false } },
    ]);
  });

  it('a tool that declares it calls it; it runs as a hook; its operator invokes it', () => {
    expect(ok(engine, INVOKE, { n: 'caller', e: id(100), v: 1 }).actions.invokeAction).toMatchObject({
      status: 'SUCCEEDED',
      output: { helped: true },
      children: [{ actionName: 'helper', status: 'SUCCEEDED' }],
    });
    expect(ok(engine, INVOKE, { n: 'hooked', e: id(101), v: 1 }).actions.invokeAction).toMatchObject({
      status: 'SUCCEEDED',
      output: { ran: true, hooked: true },
    });
    expect(ok(engine, INVOKE, { n: 'helper', e: id(102), v: 4 }).actions.invokeAction).toMatchObject({
      status: 'SUCCEEDED',
      output: { helped: true },
    });
  });

  it('an agent that references it is refused at creation (pinned or latest), naming it, with the hint', () => {
    const agent = (tools: unknown[]) => ({
      name: 'assistant',
      kind: 'agent',
      config: { provider: 'local', model: 'm', instructions: 'Help.' },
      tool: { description: 'Helps.' },
      tools,
    });
    const latest = fails(engine, CREATE, { id: id(10), input: agent([{ name: 'caller' }, { name: 'helper' }]) });
    expect(latest).toMatchObject({
      code: 'BAD_REQUEST',
      message: 'tool "helper" (version 4) is internal: no agent may offer it to its model',
      hint: "Call it from a tool the agent references (declare it in that tool's tools), or make a version of helper without tool.internal.",
    });
    expect(fails(engine, CREATE, { id: id(10), input: agent([{ name: 'helper', version: 1 }]) }).message).toContain(
      '(version 1) is internal',
    );
    // Version 3 is not internal: pinning it is allowed; the tool that calls the helper is too.
    ok(engine, CREATE, { id: id(10), input: agent([{ name: 'helper', version: 3 }, { name: 'caller' }]) });
    expect(fails(engine, UPDATE, { id: id(10), input: { tools: [{ name: 'after_hook' }] } }).message).toContain(
      'is internal',
    );
  });

  it('tool.internal must be a boolean', () => {
    const error = fails(engine, CREATE, { id: id(11), input: input('bad', {}, { internal: 'yes' }) });
    expect(error.code).toBe('BAD_REQUEST');
    expect(error.message).toContain('Boolean');
  });
});
