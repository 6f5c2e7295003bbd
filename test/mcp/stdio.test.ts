import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { type CallToolResult, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer } from '../helpers/server.js';
import { ALICE, bankDatabase, bankWithMemo, BIN, BOB, cli, settled, tx } from '../helpers/mcp.js';

async function connect(
  path: string,
  principal: string,
  env: Record<string, string> = {},
): Promise<{ client: Client; stderr: () => string }> {
  const transport = new StdioClientTransport({
    command: 'node',
    args: [BIN, 'mcp', '--db', path, '--as', principal],
    stderr: 'pipe',
    env: { ...(process.env as Record<string, string>), TALLY_CONFIG: '', ...env },
  });
  let stderr = '';
  transport.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const client = new Client({ name: 'test', version: '1.0.0' });
  await client.connect(transport);
  return { client, stderr: () => stderr };
}

const text = (result: CallToolResult) => (result.content[0] as { text: string }).text;

describe('tally mcp over stdio, in-process as one client (the SDK Client spawning the CLI)', () => {
  let path: string;
  let operator: Client;
  let reader: Client;
  let operatorErr: () => string;

  beforeAll(async () => {
    ({ path } = await bankDatabase());
    ({ client: operator, stderr: operatorErr } = await connect(path, 'operator'));
    ({ client: reader } = await connect(path, 'reader'));
  }, 30_000);

  afterAll(async () => {
    await operator?.close();
    await reader?.close();
  });

  it('lists the tools of examples/bank with their schemas and annotations derived from their policies', async () => {
    const { tools } = await operator.listTools();
    const names = tools.map((t) => t.name).sort();
    expect(names).toEqual(expect.arrayContaining(['cel', 'lock_account', 'transfer']));
    // No graphql tool unless the operator offers it; no internal helper (receipt, open_case, notify_large).
    for (const internal of ['graphql', 'receipt', 'open_case', 'notify_large']) expect(names).not.toContain(internal);
    const transfer = tools.find((t) => t.name === 'transfer')!;
    expect(transfer.inputSchema).toMatchObject({
      type: 'object',
      required: ['transaction_id', 'from', 'to', 'amount'],
    });
    expect(transfer.outputSchema).toMatchObject({
      type: 'object',
      required: ['transaction_id', 'from_available', 'to_available'],
    });
    expect(transfer.title).toBe('Transfer between wallets');
    expect(transfer.annotations).toEqual({
      title: 'Transfer between wallets',
      readOnlyHint: false,
      destructiveHint: true,
      idempotentHint: true,
      openWorldHint: false,
    });
    expect(operatorErr()).toContain('serving as operator over stdio');
  });

  it('calls transfer: structured output, balances change exactly once, the execution is recorded as an MCP call', async () => {
    const executionId = 'd0000000-0000-4000-8000-000000000001';
    const args = { transaction_id: tx(2), from: ALICE, to: BOB, amount: '30' };
    const first = (await operator.callTool({
      name: 'transfer',
      arguments: args,
      _meta: { executionId },
    })) as CallToolResult;
    expect(first.isError).toBeFalsy();
    expect(first.structuredContent).toEqual({
      transaction_id: tx(2),
      from_available: '70.00',
      to_available: '30.00',
      receipt: '30.00 USD sent; the sender has 70.00 available',
    });
    expect(JSON.parse(text(first))).toEqual(first.structuredContent);
    // The same execution id again (an idempotent retry): the recorded result, no second posting.
    const again = (await operator.callTool({
      name: 'transfer',
      arguments: args,
      _meta: { executionId },
    })) as CallToolResult;
    expect(again.structuredContent).toEqual(first.structuredContent);
    expect(settled(path, 'bob')).toBe('30');
    expect(settled(path, 'alice')).toBe('70');
    const executions = cli(['executions', '--db', path, '--action', 'transfer']);
    expect(executions.match(new RegExp(executionId, 'g'))).toHaveLength(1);
    expect(executions).toContain('via mcp');
    expect(cli(['execution', executionId, '--db', path])).toContain('by operator over mcp');
  });

  it('a call without _meta gets a fresh execution id each time', async () => {
    const a = (await operator.callTool({ name: 'cel', arguments: { expression: '1 + 2' } })) as CallToolResult;
    const b = (await operator.callTool({ name: 'cel', arguments: { expression: '1 + 2' } })) as CallToolResult;
    expect(text(a)).toBe('3');
    expect(a._meta?.executionId).not.toEqual(b._meta?.executionId);
  });

  it('a bad input is isError INPUT_INVALID with the JSON pointer of each problem', async () => {
    const result = (await operator.callTool({
      name: 'transfer',
      arguments: { transaction_id: 'nope', from: ALICE, to: BOB, amount: '1.234' },
    })) as CallToolResult;
    expect(result.isError).toBe(true);
    expect(text(result)).toMatch(/^INPUT_INVALID: /);
    expect(text(result)).toContain('/transaction_id');
    expect(text(result)).toContain('/amount');
  });

  it('an unknown tool name is isError listing the names the client may call', async () => {
    const result = (await operator.callTool({ name: 'transfre', arguments: {} })) as CallToolResult;
    expect(result.isError).toBe(true);
    expect(text(result)).toMatch(/^NOT_FOUND: /);
    expect(text(result)).toMatch(/Available tools: .*transfer/);
  });

  it('a read-only client sees only readOnlyHint tools; calling transfer by name is refused naming the client layer', async () => {
    const { tools } = await reader.listTools();
    expect(tools.length).toBeGreaterThan(0);
    expect(tools.every((t) => t.annotations?.readOnlyHint === true)).toBe(true);
    expect(tools.map((t) => t.name)).not.toContain('transfer');
    const result = (await reader.callTool({
      name: 'transfer',
      arguments: { transaction_id: tx(3), from: ALICE, to: BOB, amount: '5' },
    })) as CallToolResult;
    expect(result.isError).toBe(true);
    expect(text(result)).toMatch(/^ACCESS_DENIED: INSERT on financial.Transaction refused by client reader/);
    // Nothing moved: Alice still has 70.
    expect(settled(path, 'alice')).toBe('70');
  });

  it('offers each account as a resource through the tally://accounts/{code} template, its balances as JSON', async () => {
    const { resourceTemplates } = await operator.listResourceTemplates();
    expect(resourceTemplates).toEqual([
      expect.objectContaining({ uriTemplate: 'tally://accounts/{code}', mimeType: 'application/json' }),
    ]);
    const { contents } = await operator.readResource({ uri: 'tally://accounts/alice' });
    const account = JSON.parse((contents[0] as { text: string }).text);
    expect(account).toMatchObject({ code: 'alice', accountId: ALICE });
    expect(account.balances.nodes[0]).toMatchObject({
      currency: 'USD',
      settled: { normalBalance: { units: settled(path, 'alice') } },
    });
    await expect(operator.readResource({ uri: 'tally://accounts/nobody' })).rejects.toThrow(/NOT_FOUND/);
    await expect(operator.readResource({ uri: 'tally://journals/x' })).rejects.toThrow(/tally:\/\/accounts\/\{code\}/);
  });

  it('stdout carries only protocol: a usage error goes to stderr', () => {
    let failed: { stdout: string; stderr: string; status: number } | null = null;
    try {
      execFileSync('node', [BIN, 'mcp', '--db', path], { encoding: 'utf8', stdio: 'pipe' });
    } catch (error) {
      failed = error as { stdout: string; stderr: string; status: number };
    }
    expect(failed?.status).toBe(2);
    expect(failed?.stdout).toBe('');
    expect(failed?.stderr).toContain('--as');
  });

  it('a tally deploy by another process on the same file sends notifications/tools/list_changed; the next list shows it', async () => {
    const changed = new Promise<void>((resolve) =>
      operator.setNotificationHandler(ToolListChangedNotificationSchema, () => resolve()),
    );
    const project = bankWithMemo();
    expect(cli(['deploy', project, '--db', path])).toMatch(/~ .*transfer/);
    await changed;
    const transfer = (await operator.listTools()).tools.find((t) => t.name === 'transfer')!;
    expect(transfer.title).toBe('Transfer between wallets');
    expect(transfer.inputSchema.properties).toHaveProperty('memo');
  });
});

describe('tally mcp --server URL --key KEY: a proxy to a running server, which authorizes every call', () => {
  it("lists and calls transfer through the server's GraphQL API as the key's client; the execution is an MCP call", async () => {
    const { path, keys } = await bankDatabase();
    const running = await startServer('tly_mcp-proxy-admin-key', { path });
    const server = running.url.replace('/graphql', '');
    const transport = new StdioClientTransport({
      command: 'node',
      args: [BIN, 'mcp', '--server', server, '--key', keys.operator!],
      stderr: 'pipe',
    });
    const client = new Client({ name: 'test', version: '1.0.0' });
    try {
      await client.connect(transport);
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('transfer');
      const executionId = 'd0000000-0000-4000-8000-000000000201';
      const result = (await client.callTool({
        name: 'transfer',
        arguments: { transaction_id: tx(201), from: ALICE, to: BOB, amount: '10' },
        _meta: { executionId },
      })) as CallToolResult;
      expect(result.structuredContent, JSON.stringify(result)).toMatchObject({
        from_available: '90.00',
        to_available: '10.00',
      });
      expect(cli(['execution', executionId, '--db', path])).toContain('by operator over mcp');
      // A key the server does not know: every tool call fails as UNAUTHENTICATED, reported to the model.
      const stranger = new Client({ name: 'test', version: '1.0.0' });
      await stranger.connect(
        new StdioClientTransport({
          command: 'node',
          args: [BIN, 'mcp', '--server', server, '--key', 'tly_wrong'],
          stderr: 'pipe',
        }),
      );
      const refused = (await stranger.callTool({ name: 'transfer', arguments: {} })) as CallToolResult;
      expect(refused.isError).toBe(true);
      expect(text(refused)).toMatch(/^UNAUTHENTICATED: /);
      await stranger.close();
    } finally {
      await client.close();
      await running.stop();
    }
  }, 30_000);
});

describe('the native graphql tool is the operator\'s to offer: TALLY_CONFIG {"mcp": {"graphqlTool": true}}', () => {
  let path: string;
  let config: string;

  beforeAll(async () => {
    ({ path } = await bankDatabase());
    config = join(mkdtempSync(join(tmpdir(), 'tally-mcp-config-')), 'tally.json');
  }, 30_000);

  it('unset: not listed, and calling it is the answer for a name nobody used', async () => {
    const { client } = await connect(path, 'operator');
    expect((await client.listTools()).tools.map((t) => t.name)).not.toContain('graphql');
    const called = (await client.callTool({
      name: 'graphql',
      arguments: { query: '{ journal { name } }' },
    })) as CallToolResult;
    const unknown = (await client.callTool({ name: 'no_such_tool', arguments: {} })) as CallToolResult;
    expect(called.isError).toBe(true);
    expect(text(called).replace('"graphql"', '"<name>"')).toBe(text(unknown).replace('"no_such_tool"', '"<name>"'));
    await client.close();
  });

  it("offered: listed first and called under the client's policies", async () => {
    writeFileSync(config, JSON.stringify({ mcp: { graphqlTool: true } }));
    const { client } = await connect(path, 'operator', { TALLY_CONFIG: config });
    expect((await client.listTools()).tools.map((t) => t.name).slice(0, 2)).toEqual(['graphql', 'cel']);
    const called = (await client.callTool({
      name: 'graphql',
      arguments: { query: '{ journal { name } }' },
    })) as CallToolResult;
    expect(called.structuredContent).toEqual({ journal: { name: 'Default' } });
    await client.close();
  });

  it('a wrong setting is refused at start, naming the file and the field', () => {
    writeFileSync(config, JSON.stringify({ mcp: { graphqlTool: 'yes' } }));
    let stderr = '';
    try {
      execFileSync('node', [BIN, 'mcp', '--db', path, '--as', 'operator'], {
        env: { ...process.env, TALLY_CONFIG: config },
        stdio: ['ignore', 'pipe', 'pipe'],
        encoding: 'utf8',
      });
    } catch (error) {
      stderr = (error as { stderr: string }).stderr;
    }
    expect(stderr).toContain(`the configuration ${config}: mcp.graphqlTool must be true or false, got "yes"`);
  });
});
