// Tool names as MCP and the model providers have them ([A-Za-z0-9_-], a letter first, at most 64),
// unique in any case; every door that takes a name takes the same ones: createAction over HTTP,
// invokeAction, a program's tools['…'](), a deploy's tools/<name>.js, an MCP SDK client.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deploy } from '../../src/deploy/deploy.js';
import { readProject } from '../../src/deploy/project.js';
import type { Engine } from '../../src/engine.js';
import { engineBackend } from '../../src/mcp/backend.js';
import { createMcpServer } from '../../src/mcp/server.js';
import { id, newEngine, ok } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

const KEY = 'tly_names0123456789abcdef0123456789abcdef';
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const UPDATE = `mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) { version } } }`;
const INVOKE = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { invokeAction(name: $n, input: {executionId: $e, actionVersion: 1, input: $i}) { status output error { code message } } } }`;
const NAMES = `{ actions { actions(first: 100) { nodes { name } } } }`;
const ECHO = 'function run(event) { return { echoed: event.data }; }';

function tool(name: string, extra: Record<string, unknown> = {}, toolFields: Record<string, unknown> = {}) {
  return {
    name,
    kind: 'tool',
    config: { runtime: 'javascript', src: ECHO },
    tool: { description: `The ${name} tool.`, ...toolFields },
    policies: [],
    ...extra,
  };
}

describe('tool names: [A-Za-z0-9_-], unique in any case, over HTTP', () => {
  let server: Awaited<ReturnType<typeof startServer>>;
  let engine: Engine;
  let n = 0;
  async function gql(query: string, variables: Record<string, unknown>) {
    const response = await fetch(server.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ query, variables }),
    });
    return (await response.json()) as { data?: any; errors?: Array<{ message: string; extensions: any }> };
  }
  async function create(name: unknown, toolFields: Record<string, unknown> = {}) {
    return gql(CREATE, { id: id(++n), input: tool(name as string, {}, toolFields) });
  }
  async function refused(name: unknown, toolFields: Record<string, unknown> = {}) {
    const result = await create(name, toolFields);
    expect(result.errors, `${JSON.stringify(name)} was taken`).toBeDefined();
    return {
      code: result.errors![0]!.extensions.code,
      message: result.errors![0]!.message,
      hint: result.errors![0]!.extensions.hint,
    };
  }
  const names = async () =>
    ((await gql(NAMES, {})).data.actions.actions.nodes as Array<{ name: string }>).map((a) => a.name);

  beforeAll(async () => {
    server = await startServer(KEY);
    engine = server.engine;
  });
  afterAll(async () => {
    await server.stop();
  });

  it('takes capitals, digits, dashes and underscores, a letter first, up to 64 characters', async () => {
    for (const name of ['searchDocs', 'search-docs', 'Get-Balance_2', `a${'-'.repeat(63)}`]) {
      expect((await create(name)).errors, name).toBeUndefined();
    }
    expect(await names()).toEqual(expect.arrayContaining(['searchDocs', 'search-docs', 'Get-Balance_2']));
  });

  it('refuses anything else as BAD_REQUEST naming the value, and writes nothing', async () => {
    const before = await names();
    for (const name of ['9lives', '-flag', '_under', 'dotted.name', 'with space', 'ünï', `a${'b'.repeat(64)}`, '']) {
      expect(await refused(name), name).toMatchObject({
        code: 'BAD_REQUEST',
        message: `action name ${JSON.stringify(name)} is not a tool name`,
        hint: expect.stringContaining('letters, digits, _ and -'),
      });
    }
    expect(await names()).toEqual(before);
  });

  it('a name that differs only in case from a taken one is ALREADY_EXISTS, naming the one that holds it', async () => {
    expect(await refused('searchdocs')).toMatchObject({
      code: 'ALREADY_EXISTS',
      message: 'action name "searchdocs" differs only in case from "searchDocs", an action',
    });
    expect(await refused('SEARCH-DOCS')).toMatchObject({
      code: 'ALREADY_EXISTS',
      message: 'action name "SEARCH-DOCS" differs only in case from "search-docs", an action',
    });
    // The very same name: as before.
    expect((await refused('searchDocs')).code).toBe('ALREADY_EXISTS');
    // Two in one request: the second sees the first.
    const both = await gql(
      `mutation($a: ActionInput!, $b: ActionInput!) { actions { a: createAction(id: "${id(900)}", input: $a) { version } b: createAction(id: "${id(901)}", input: $b) { version } } }`,
      { a: tool('lookUp'), b: tool('LOOKUP') },
    );
    expect(both.errors?.[0]?.message).toBe('action name "LOOKUP" differs only in case from "lookUp", an action');
    expect(await names()).not.toContain('lookUp');
  });

  it('aliases are held in any case too: against other actions, the own name and each other', async () => {
    expect((await create('finder', { aliases: ['find-Docs'] })).errors).toBeUndefined();
    expect(await refused('FIND-DOCS')).toMatchObject({
      code: 'ALREADY_EXISTS',
      message: 'action name "FIND-DOCS" differs only in case from "find-Docs", an alias of finder',
    });
    expect(await refused('other', { aliases: ['Find-docs'] })).toMatchObject({
      code: 'ALREADY_EXISTS',
      message: 'tool.aliases: "Find-docs" of other differs only in case from "find-Docs", an alias of finder',
    });
    expect(await refused('other', { aliases: ['SearchDocs'] })).toMatchObject({
      code: 'ALREADY_EXISTS',
      message: 'tool.aliases: "SearchDocs" of other differs only in case from "searchDocs", an action',
    });
    expect(await refused('other', { aliases: ['OTHER'] })).toMatchObject({
      code: 'BAD_REQUEST',
      message: 'tool.aliases: "OTHER" is the action\'s own name (other) in another case',
    });
    expect(await refused('other', { aliases: ['look-up', 'Look-Up'] })).toMatchObject({
      code: 'BAD_REQUEST',
      message: 'tool.aliases: "Look-Up" and "look-up" differ only in case',
    });
    expect(await refused('other', { aliases: ['bad.alias'] })).toMatchObject({
      code: 'BAD_REQUEST',
      message: 'tool.aliases: "bad.alias" is not a tool name',
    });
    // updateAction checks the same way.
    const update = await gql(UPDATE, { id: id(1), input: { tool: { aliases: ['FINDER'] } } });
    expect(update.errors?.[0]).toMatchObject({
      message: 'tool.aliases: "FINDER" of searchDocs differs only in case from "finder", an action',
      extensions: { code: 'ALREADY_EXISTS' },
    });
  });

  it('the engine’s own tool names are refused in any case', async () => {
    for (const name of ['GraphQL', 'CEL', 'Load_Skill']) {
      expect(await refused(name), name).toMatchObject({
        code: 'ALREADY_EXISTS',
        message: expect.stringContaining(`action name "${name}" is a reserved tool name`),
      });
      expect(await refused('fresh', { aliases: [name] }), name).toMatchObject({
        code: 'ALREADY_EXISTS',
        message: expect.stringContaining(`tool.aliases: "${name}" is a reserved tool name`),
      });
    }
  });

  it('such a tool runs by its name through invokeAction, and a program calls it as tools["search-docs"]()', async () => {
    const direct = await gql(INVOKE, { n: 'search-docs', e: id(500), i: { q: 'a' } });
    expect(direct.data.actions.invokeAction).toMatchObject({ status: 'SUCCEEDED', output: { echoed: { q: 'a' } } });
    expect(
      (
        await gql(CREATE, {
          id: id(501),
          input: tool(
            'Caller-1',
            {
              config: {
                runtime: 'javascript',
                src: "function run(event) { return { a: tools['search-docs']({ q: 'b' }), b: tools.searchDocs({ q: 'c' }) }; }",
              },
              tools: [{ name: 'search-docs' }, { name: 'searchDocs' }],
              policies: [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }],
            },
            {},
          ),
        })
      ).errors,
    ).toBeUndefined();
    const nested = await gql(INVOKE, { n: 'Caller-1', e: id(502), i: {} });
    expect(nested.data.actions.invokeAction).toMatchObject({
      status: 'SUCCEEDED',
      output: { a: { echoed: { q: 'b' } }, b: { echoed: { q: 'c' } } },
    });
    // A name is looked up as written: another case is no tool.
    const other = await gql(INVOKE, { n: 'SEARCH-docs', e: id(503), i: {} });
    expect(other.errors?.[0]?.extensions.code).toBe('NOT_FOUND');
  });

  it('an MCP client lists and calls it by the same name', async () => {
    const mcp = createMcpServer(engineBackend(engine, { apiKey: KEY }), {
      toolsPageSize: engine.limits.mcpToolsPageSize,
    });
    const [a, b] = InMemoryTransport.createLinkedPair();
    const client = new Client({ name: 'names-test', version: '1.0.0' });
    await Promise.all([mcp.connect(a), client.connect(b)]);
    try {
      const listed = (await client.listTools()).tools.map((t) => t.name);
      expect(listed).toEqual(expect.arrayContaining(['search-docs', 'searchDocs', 'Get-Balance_2']));
      const called = await client.callTool({ name: 'search-docs', arguments: { q: 'mcp' } });
      expect(called.isError).toBeFalsy();
      expect(JSON.stringify(called.structuredContent ?? called.content)).toContain('mcp');
    } finally {
      await client.close();
    }
  });
});

describe('tool names in a deployed project: tools/<name>.js', () => {
  it('deploys tools named with capitals and dashes, and refuses a file whose name is no tool name', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tally-names-'));
    mkdirSync(join(dir, 'tools'));
    writeFileSync(join(dir, 'tally.json'), JSON.stringify({ name: 'names' }));
    for (const name of ['search-docs', 'getBalance']) {
      writeFileSync(join(dir, 'tools', `${name}.js`), ECHO);
      writeFileSync(
        join(dir, 'tools', `${name}.json`),
        JSON.stringify({ actionId: id(name === 'getBalance' ? 701 : 700), description: `The ${name} tool.` }),
      );
    }
    const engine = await newEngine();
    const target = {
      describe: 'in-process',
      request: async (q: string, v?: Record<string, unknown>) => engine.graphql(q, v ?? null) as never,
      close: async () => {},
    };
    await deploy(readProject(dir), target);
    expect(ok(engine, INVOKE, { n: 'getBalance', e: id(702), i: { x: 1 } }).actions.invokeAction).toMatchObject({
      status: 'SUCCEEDED',
    });
    writeFileSync(join(dir, 'tools', 'bad.name.js'), ECHO);
    writeFileSync(join(dir, 'tools', 'bad.name.json'), JSON.stringify({ actionId: id(703), description: 'Bad.' }));
    await expect(deploy(readProject(dir), target)).rejects.toThrow(/"bad\.name" is not a tool name/);
    engine.close();
  });
});
