import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mcpImportCommand } from '../../src/cli/mcp-import-command.js';
import type { Io } from '../../src/cli/io.js';
import { createEngine } from '../../src/engine.js';
import { EngineError } from '../../src/errors.js';
import {
  type ExistingAction,
  importPlan,
  type McpImportItem,
  mcpActionName,
  serverPolicy,
} from '../../src/integrations/mcp-import.js';
import {
  McpServers,
  type McpToolInfo,
  mcpToolFingerprint,
  parseMcpServers,
} from '../../src/integrations/mcp-servers.js';
import { startHttpMcpServer, type TestMcpServer } from './fixtures/mcp-http-server.js';

/**
 * `tally mcp import`: an MCP server's tools (listed from a real server the test starts with the
 * SDK) as the createAction / updateAction inputs of actions of kind "mcp"; a changed tool is a new
 * version, an unchanged one is left alone.
 */

const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });
const SEARCH: Tool = {
  name: 'search',
  title: 'Search',
  description: 'Searches the docs.',
  inputSchema: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
  outputSchema: { type: 'object', properties: { hits: { type: 'array' } } },
  annotations: { readOnlyHint: true },
};
const UPSERT: Tool = {
  name: 'upsert.record',
  inputSchema: { type: 'object', properties: { id: { type: 'string' } } },
  annotations: { idempotentHint: true, destructiveHint: false },
};
const SEND: Tool = { name: 'send_mail', description: '', inputSchema: { type: 'object' } };

let web: TestMcpServer;
let servers: McpServers;

beforeAll(async () => {
  web = await startHttpMcpServer([
    [SEARCH, () => ({ structuredContent: { hits: [] }, content: [] })],
    [UPSERT, () => text('ok')],
    [SEND, () => text('sent')],
  ]);
  servers = McpServers.create(parseMcpServers([{ name: 'docs', url: web.url }]), {});
});

afterAll(async () => {
  await servers.close();
  await web.stop();
});

/** The latest version of each action a plan made, as `existing` answers it to the next plan. */
function applied(items: McpImportItem[], before = new Map<string, ExistingAction>()): Map<string, ExistingAction> {
  const after = new Map(before);
  for (const item of items) {
    if (item.change === 'unchanged') continue;
    const previous = after.get(item.name);
    after.set(item.name, {
      actionId: item.actionId,
      version: item.change === 'create' ? 1 : item.version,
      kind: 'mcp',
      config: { ...(previous?.config ?? {}), ...(item.input.config as Record<string, unknown>) },
    });
  }
  return after;
}

describe('importPlan', () => {
  it('creates one action of kind mcp per tool, pinning its fingerprint; retries only a tool that may be sent twice', async () => {
    const tools = await servers.listTools('docs');
    const plan = importPlan('docs', tools, () => null, { newId: () => 'id-1' });
    expect(plan.map((i) => [i.change, i.name, i.tool])).toEqual([
      ['create', 'search', 'search'],
      ['create', 'upsert_record', 'upsert.record'],
      ['create', 'send_mail', 'send_mail'],
    ]);
    const search = tools.find((t) => t.name === 'search')!;
    expect(plan[0]).toEqual({
      change: 'create',
      tool: 'search',
      name: 'search',
      actionId: 'id-1',
      fingerprint: mcpToolFingerprint(search),
      input: {
        name: 'search',
        kind: 'mcp',
        config: {
          server: 'docs',
          tool: 'search',
          fingerprint: mcpToolFingerprint(search),
          annotations: { readOnlyHint: true },
        },
        tool: {
          name: 'search',
          title: 'Search',
          description: 'Searches the docs.',
          inputSchema: SEARCH.inputSchema,
          outputSchema: SEARCH.outputSchema,
        },
        policies: [serverPolicy('docs')],
        execution: { maxAttempts: 3 },
      },
    });
    const [, upsert, send] = plan as Array<Extract<McpImportItem, { change: 'create' }>>;
    expect(upsert!.input.execution).toEqual({ maxAttempts: 3 });
    expect(upsert!.input.tool?.description).toBe('Tool upsert.record of MCP server docs');
    expect(send!.input.execution).toEqual({ maxAttempts: 1 });
    expect(send!.input.tool?.description).toBe('Tool send_mail of MCP server docs');
    expect(send!.input.config).toMatchObject({ annotations: null });
  });

  it('updates a tool whose schema changed on the server to a new version, and leaves the unchanged ones alone', async () => {
    const first = importPlan('docs', await servers.listTools('docs'), () => null);
    const existing = applied(first);
    const again = importPlan('docs', await servers.listTools('docs'), (name) => existing.get(name) ?? null);
    expect(again.map((i) => i.change)).toEqual(['unchanged', 'unchanged', 'unchanged']);

    await web.setTool(
      { ...SEARCH, inputSchema: { type: 'object', properties: { q: { type: 'string' }, limit: { type: 'integer' } } } },
      () => ({ structuredContent: { hits: [] }, content: [] }),
    );
    // Read afresh (the kept list is dropped by list_changed, which may not have arrived yet).
    const fresh = McpServers.create(parseMcpServers([{ name: 'docs', url: web.url }]), {});
    const tools = await fresh.listTools('docs').finally(() => fresh.close());
    const changed = importPlan('docs', tools, (name) => existing.get(name) ?? null);
    expect(changed.map((i) => [i.change, i.name])).toEqual([
      ['update', 'search'],
      ['unchanged', 'upsert_record'],
      ['unchanged', 'send_mail'],
    ]);
    const update = changed[0] as Extract<McpImportItem, { change: 'update' }>;
    expect(update.version).toBe(2);
    expect(update.actionId).toBe(existing.get('search')!.actionId);
    expect(update.previous).toBe(existing.get('search')!.config.fingerprint);
    expect(update.fingerprint).not.toBe(update.previous);
    expect(update.input).not.toHaveProperty('name');
    expect(update.input.config).toMatchObject({ fingerprint: update.fingerprint });
    expect(update.input.tool?.inputSchema).toEqual(tools[0]!.inputSchema);
  });

  const tool = (name: string): McpToolInfo => ({
    name,
    title: null,
    description: null,
    inputSchema: { type: 'object' },
    outputSchema: null,
    annotations: null,
  });
  const refused = (f: () => unknown): EngineError => {
    try {
      f();
    } catch (error) {
      expect(error).toBeInstanceOf(EngineError);
      return error as EngineError;
    }
    throw new Error('accepted');
  };

  it('names actions <prefix><tool>, with characters outside [A-Za-z0-9_-] as _', () => {
    expect(mcpActionName('search.docs v2', 'crm_')).toBe('crm_search_docs_v2');
    expect(importPlan('docs', [tool('a.b')], () => null, { prefix: 'x-' }).map((i) => i.name)).toEqual(['x-a_b']);
  });

  it('refuses names that are not tool names, collisions and reserved names, before anything is sent', () => {
    expect(refused(() => importPlan('docs', [tool('a.b'), tool('a_b')], () => null)).message).toBe(
      'tools "a.b" and "a_b" of MCP server "docs" would both be the action "a_b" (names differ only in characters outside [A-Za-z0-9_-] or in case)',
    );
    expect(refused(() => importPlan('docs', [tool('Find'), tool('find')], () => null)).message).toMatch(
      /would both be/,
    );
    const digit = refused(() => importPlan('docs', [tool('3d_render')], () => null));
    expect(digit.message).toMatch(/would be the action "3d_render", which is not a tool name/);
    expect(digit.hint).toMatch(/--prefix/);
    expect(importPlan('docs', [tool('3d_render')], () => null, { prefix: 'mcp_' })[0]!.name).toBe('mcp_3d_render');
    expect(refused(() => importPlan('docs', [tool('x'.repeat(65))], () => null)).hint).toMatch(/too long/);
    expect(refused(() => importPlan('docs', [tool('graphql')], () => null)).message).toMatch(/a reserved tool name/);
    expect(refused(() => importPlan('docs', [tool('a')], () => null, { prefix: '1_' })).message).toMatch(
      /prefix "1_" is not the start of a tool name/,
    );
  });

  it("refuses a name held by another kind of action, or by another server's import", () => {
    const program: ExistingAction = { actionId: 'a1', version: 4, kind: 'tool', config: { runtime: 'javascript' } };
    const taken = refused(() => importPlan('docs', [tool('search')], () => program));
    expect(taken.code).toBe('ALREADY_EXISTS');
    expect(taken.message).toBe(
      'the action name "search" for tool "search" of MCP server "docs" is taken by an action of kind "tool"',
    );
    const other: ExistingAction = {
      actionId: 'a2',
      version: 1,
      kind: 'mcp',
      config: { server: 'crm', tool: 'search' },
    };
    expect(refused(() => importPlan('docs', [tool('search')], () => other)).message).toMatch(
      /is taken by the import of tool "search" of MCP server "crm"/,
    );
  });
});

describe('tally mcp import', () => {
  let scratch: string;
  let db: string;
  let configFile: string;
  const configBefore = process.env.TALLY_CONFIG;

  beforeAll(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'tally-mcp-import-'));
    db = join(scratch, 'tally.db');
    configFile = join(scratch, 'tally.config.json');
    writeFileSync(configFile, JSON.stringify({ mcpServers: [{ name: 'docs', url: web.url }] }));
    // The --db target's engine reads the same file (databaseTarget: readServerConfig()).
    process.env.TALLY_CONFIG = configFile;
    const engine = await createEngine({ path: db });
    engine.graphql(
      'mutation($src: String!) { actions { createAction(id: "00000000-0000-4000-8000-0000000000a1", input: {name: "taken_send_mail", kind: "tool", config: {runtime: "javascript", src: $src}}) { version } } }',
      { src: 'function run() { return {}; }' },
    );
    engine.close();
  });
  afterAll(() => {
    if (configBefore === undefined) delete process.env.TALLY_CONFIG;
    else process.env.TALLY_CONFIG = configBefore;
    rmSync(scratch, { recursive: true, force: true });
  });

  function io(): Io & { output(): string } {
    let out = '';
    return {
      out: (t) => void (out += t),
      err: () => undefined,
      tty: false,
      env: { TALLY_CONFIG: configFile },
      output: () => out,
    };
  }
  it('--dry-run reads the target and says what each tool would become, changing nothing', async () => {
    const run = io();
    expect(await mcpImportCommand(['docs'], { db, 'dry-run': true }, run)).toBe(0);
    expect(run.output()).toBe(
      [
        'search: would be created, version 1 (tool search)',
        'upsert_record: would be created, version 1 (tool upsert.record)',
        'send_mail: would be created, version 1 (tool send_mail)',
        '',
      ].join('\n'),
    );
  });

  it('refuses a name an action of another kind holds, naming it', async () => {
    const error = await mcpImportCommand(['docs'], { db, 'dry-run': true, prefix: 'taken_' }, io()).then(
      () => null,
      (e: unknown) => e as Error & { code: string },
    );
    expect(error?.code).toBe('ALREADY_EXISTS');
    expect(error?.message).toMatch(/"taken_send_mail" .* is taken by an action of kind "tool"/);
  });

  it('names the configured servers for a server it does not know', async () => {
    const error = await mcpImportCommand(['crm'], { db }, io()).then(
      () => null,
      (e: unknown) => e as Error & { code: string; hint: string },
    );
    expect(error?.code).toBe('NOT_FOUND');
    expect(error?.hint).toBe('Configured MCP servers: "docs".');
  });

  // Un-skip once the engine takes its mcpServers (createEngine's outside.mcp = mcpTools(McpServers.create(...)), and
  // databaseTarget passes readServerConfig().mcpServers to createEngine): createAction then checks kind "mcp".
  it('creates the actions, finds them unchanged, and makes a changed tool version 2', async () => {
    const first = io();
    expect(await mcpImportCommand(['docs'], { db }, first)).toBe(0);
    expect(first.output()).toMatch(/^search: created, version 1 \(tool search\)$/m);
    const second = io();
    expect(await mcpImportCommand(['docs'], { db }, second)).toBe(0);
    expect(second.output()).toMatch(/^search: unchanged, version 1 \(tool search\)$/m);
    await web.setTool({ ...SEARCH, description: 'Searches the docs, newest first.' }, () => ({
      structuredContent: { hits: [] },
      content: [],
    }));
    const third = io();
    expect(await mcpImportCommand(['docs'], { db }, third)).toBe(0);
    expect(third.output()).toMatch(/^search: updated to version 2: the tool changed \(tool search\)$/m);
    expect(third.output()).toMatch(/^send_mail: unchanged, version 1 \(tool send_mail\)$/m);
  });
});
