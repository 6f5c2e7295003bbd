import { request as httpRequest } from 'node:http';
import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import Database from 'better-sqlite3';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  type CallToolResult,
  LATEST_PROTOCOL_VERSION,
  ToolListChangedNotificationSchema,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { jsonTextTooDeep, sanitizeInitialize } from '../../src/mcp/http.js';
import { id } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';
import { ALICE, bankDatabase, bankWithMemo, BIN, BOB, cli, settled, tx } from '../helpers/mcp.js';

const run = promisify(execFile);

const ADMIN = 'tly_mcp-http-admin-key';
const INITIALIZE = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: LATEST_PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
};

type Running = Awaited<ReturnType<typeof startServer>>;

async function connect(
  mcpUrl: string,
  key: string,
): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
  });
  const client = new Client({ name: 'test', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

interface RawResponse {
  status: number;
  headers: { get(name: string): string | null };
  text(): Promise<string>;
  json(): Promise<unknown>;
}

/**
 * A raw POST to /mcp, for what the SDK client would never send, each on a connection of its own: a
 * pooled keep-alive socket the server is closing (its keep-alive timer runs late after a test held
 * the event loop) resets the next request sent on it, which is the test's noise, not the server's.
 */
function post(mcpUrl: string, body: unknown, headers: Record<string, string> = {}): Promise<RawResponse> {
  const payload = typeof body === 'string' ? body : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      mcpUrl,
      {
        method: 'POST',
        agent: false,
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'content-length': String(Buffer.byteLength(payload)),
          ...headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        const ended = new Promise<string>((done) => {
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () => done(Buffer.concat(chunks).toString()));
        });
        const text = () => ended;
        resolve({
          status: res.statusCode ?? 0,
          headers: {
            get: (name: string) => {
              const value = res.headers[name.toLowerCase()];
              return value === undefined ? null : Array.isArray(value) ? value.join(', ') : value;
            },
          },
          text,
          json: async () => JSON.parse(await text()) as unknown,
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

async function allTools(client: Client): Promise<{ tools: Tool[]; pages: number }> {
  const tools: Tool[] = [];
  let cursor: string | undefined;
  let pages = 0;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    tools.push(...page.tools);
    cursor = page.nextCursor;
    pages++;
  } while (cursor);
  return { tools, pages };
}

function createClient(engine: Engine, principal: string): string {
  const result = engine.graphql(
    `mutation($p: String!) { auth { createClient(input: {principal: $p, name: $p, policies: [
      {effect: ALLOW, actions: [SELECT], resources: ["*"]}, {effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]}]}) { apiKey } } }`,
    { p: principal },
  );
  if (result.errors) throw new Error(JSON.stringify(result.errors));
  return (result.data as any).auth.createClient.apiKey;
}

describe('/mcp on tally serve: Streamable HTTP with the SDK client against a real server', () => {
  let running: Running;
  let mcpUrl: string;
  let path: string;
  let keys: Record<string, string>;

  beforeAll(async () => {
    ({ path, keys } = await bankDatabase());
    // Two actions a page: the five tools examples/bank offers outside take three pages (mcpToolsPageSize crossed).
    running = await startServer(ADMIN, { path, limits: { mcpToolsPageSize: 2 } });
    mcpUrl = running.url.replace('/graphql', '/mcp');
  }, 30_000);

  afterAll(async () => {
    await running?.stop();
  });

  it('lists the tools of examples/bank page by page (mcpToolsPageSize) and calls transfer once, recorded as an MCP call', async () => {
    const { client, transport } = await connect(mcpUrl, keys.operator!);
    expect(transport.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    const { tools, pages } = await allTools(client);
    expect(pages).toBe(3);
    expect(tools.map((t) => t.name)).toEqual(
      expect.arrayContaining(['cel', 'transfer', 'refund', 'lock_account', 'balance', 'teller']),
    );
    // The native graphql tool only when the operator offers it (TALLY_CONFIG mcp.graphqlTool); the bank's helpers are internal.
    expect(tools.map((t) => t.name)).not.toContain('graphql');
    expect(tools.map((t) => t.name)).not.toContain('receipt');
    const executionId = 'd0000000-0000-4000-8000-000000000101';
    const args = { transaction_id: tx(101), from: ALICE, to: BOB, amount: '25' };
    const result = (await client.callTool({
      name: 'transfer',
      arguments: args,
      _meta: { executionId },
    })) as CallToolResult;
    expect(result.structuredContent).toEqual({
      transaction_id: tx(101),
      from_available: '75.00',
      to_available: '25.00',
      receipt: '25.00 USD sent; the sender has 75.00 available',
    });
    const retry = (await client.callTool({
      name: 'transfer',
      arguments: args,
      _meta: { executionId },
    })) as CallToolResult;
    expect(retry.structuredContent).toEqual(result.structuredContent);
    expect(settled(path, 'alice')).toBe('75');
    expect(settled(path, 'bob')).toBe('25');
    expect(cli(['executions', '--db', path, '--action', 'transfer'])).toMatch(new RegExp(`${executionId}.*via mcp`));
    await client.close();
  });

  it('refuses a missing, malformed or wrong key with 401 and WWW-Authenticate', async () => {
    const attempts: Array<Record<string, string>> = [
      {},
      { authorization: 'Basic abc' },
      { authorization: 'Bearer tly_not-a-key' },
    ];
    for (const headers of attempts) {
      const response = await post(mcpUrl, INITIALIZE, headers);
      expect(response.status).toBe(401);
      expect(response.headers.get('www-authenticate')).toBe('Bearer realm="tally"');
    }
  });

  it('a key revoked while its session is open stops working on the next request', async () => {
    const key = createClient(running.engine, 'temp');
    const { client } = await connect(mcpUrl, key);
    expect((await client.listTools()).tools.length).toBeGreaterThan(0);
    const rotated = running.engine.graphql(
      'mutation { auth { updateClient(principal: "temp", input: {rotateKey: true}) { apiKey } } }',
    );
    expect(rotated.errors).toBeUndefined();
    await expect(client.listTools()).rejects.toThrow(/401|Unauthorized|UNAUTHENTICATED/);
    await client.close().catch(() => {});
  });

  it('a session is bound to the key that opened it: another client presenting its id gets 404 and sees nothing', async () => {
    const { client: victim, transport } = await connect(mcpUrl, keys.operator!);
    const attackerKey = createClient(running.engine, 'attacker');
    const call = {
      jsonrpc: '2.0',
      id: 2,
      method: 'tools/call',
      params: { name: 'transfer', arguments: { transaction_id: tx(102), from: ALICE, to: BOB, amount: '1' } },
    };
    const stolen = await post(mcpUrl, call, {
      authorization: `Bearer ${attackerKey}`,
      'mcp-session-id': transport.sessionId!,
      'mcp-protocol-version': LATEST_PROTOCOL_VERSION,
    });
    expect(stolen.status).toBe(404);
    expect(await stolen.text()).not.toContain('transfer');
    expect(settled(path, 'alice')).toBe('75');
    // The victim's session still works.
    expect((await victim.listTools()).tools.length).toBeGreaterThan(0);
    await victim.close();
  });

  it('checks Origin: a foreign origin gets 403, a loopback one is served', async () => {
    const foreign = await post(mcpUrl, INITIALIZE, {
      authorization: `Bearer ${keys.operator}`,
      origin: 'http://evil.example',
    });
    expect(foreign.status).toBe(403);
    const local = await post(mcpUrl, INITIALIZE, {
      authorization: `Bearer ${keys.operator}`,
      origin: 'http://localhost:6274',
    });
    expect(local.status).toBe(200);
    const id = local.headers.get('mcp-session-id')!;
    await fetch(mcpUrl, {
      method: 'DELETE',
      headers: {
        authorization: `Bearer ${keys.operator}`,
        'mcp-session-id': id,
        'mcp-protocol-version': LATEST_PROTOCOL_VERSION,
      },
    });
  });

  it('a request without a session id that is not initialize is refused; an unknown session id gets 404', async () => {
    const list = { jsonrpc: '2.0', id: 3, method: 'tools/list', params: {} };
    expect((await post(mcpUrl, list, { authorization: `Bearer ${keys.operator}` })).status).toBe(400);
    expect(
      (await post(mcpUrl, list, { authorization: `Bearer ${keys.operator}`, 'mcp-session-id': crypto.randomUUID() }))
        .status,
    ).toBe(404);
    expect((await post(mcpUrl, '{not json', { authorization: `Bearer ${keys.operator}` })).status).toBe(400);
  });

  it('a tally deploy during an open session sends notifications/tools/list_changed; the next list shows the new schema', async () => {
    const { client } = await connect(mcpUrl, keys.operator!);
    const before = (await allTools(client)).tools.find((t) => t.name === 'transfer')!;
    expect(before.inputSchema.properties).not.toHaveProperty('memo');
    const changed = new Promise<void>((resolve) =>
      client.setNotificationHandler(ToolListChangedNotificationSchema, () => resolve()),
    );
    // Give the client's standalone GET stream a moment to open before the change.
    await new Promise((r) => setTimeout(r, 200));
    // examples/bank with a memo on transfer's input, deployed to the server by `tally deploy` (another process).
    const project = bankWithMemo();
    const deployed = await run('node', [BIN, 'deploy', project, '--server', running.url, '--key', ADMIN]);
    expect(deployed.stdout).toMatch(/~ .*transfer/);
    await changed;
    const after = (await allTools(client)).tools.find((t) => t.name === 'transfer')!;
    expect(after.title).toBe('Transfer between wallets');
    expect(after.inputSchema.properties).toHaveProperty('memo');
    await client.close();
  });
});

describe('/mcp bounds: sessions, idle sessions and the request body', () => {
  let running: Running;
  let mcpUrl: string;

  beforeAll(async () => {
    running = await startServer(ADMIN, {
      limits: { mcpSessionsMax: 2, mcpSessionsPerClientMax: 1, mcpSessionIdleMs: 300, requestBodyBytesMax: 4096 },
    });
    mcpUrl = running.url.replace('/graphql', '/mcp');
  });

  afterAll(async () => {
    await running?.stop();
  });

  it('sessions past mcpSessionsPerClientMax (one client, even all at once) or mcpSessionsMax get 503; an idle one expires after mcpSessionIdleMs', async () => {
    const other = createClient(running.engine, 'other');
    const third = createClient(running.engine, 'third');
    // One client sends three initialize requests at once: one session opens (mcpSessionsPerClientMax 1).
    const burst = await Promise.all(
      [1, 2, 3].map(() => post(mcpUrl, INITIALIZE, { authorization: `Bearer ${ADMIN}` })),
    );
    expect(burst.map((r) => r.status).sort()).toEqual([200, 503, 503]);
    const refused = burst.find((r) => r.status === 503)!;
    expect(await refused.text()).toContain('mcpSessionsPerClientMax');
    const id = burst.find((r) => r.status === 200)!.headers.get('mcp-session-id')!;
    // Another client is not affected by the first one's bound; the third finds all sessions taken.
    expect((await post(mcpUrl, INITIALIZE, { authorization: `Bearer ${other}` })).status).toBe(200);
    const full = await post(mcpUrl, INITIALIZE, { authorization: `Bearer ${third}` });
    expect(full.status).toBe(503);
    expect(await full.text()).toContain('mcpSessionsMax');
    await new Promise((r) => setTimeout(r, 600));
    const stale = await post(
      mcpUrl,
      { jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} },
      { authorization: `Bearer ${ADMIN}`, 'mcp-session-id': id, 'mcp-protocol-version': LATEST_PROTOCOL_VERSION },
    );
    expect(stale.status).toBe(404);
    const { client } = await connect(mcpUrl, ADMIN);
    expect((await client.listTools()).tools.map((t) => t.name)).toEqual(['cel']);
    await client.close();
  });

  it('a body over requestBodyBytesMax gets 413', async () => {
    const big = {
      ...INITIALIZE,
      params: { ...INITIALIZE.params, clientInfo: { name: 'x'.repeat(5000), version: '1' } },
    };
    expect((await post(mcpUrl, big, { authorization: `Bearer ${ADMIN}` })).status).toBe(413);
  });
});

describe('/mcp resource bounds: hostile initialize bodies, list checks after commits, sessions of a dead key', () => {
  let running: Running;
  let mcpUrl: string;
  let path: string;

  beforeAll(async () => {
    path = join(mkdtempSync(join(tmpdir(), 'tally-mcp-bounds-')), 'tally.db');
    running = await startServer(ADMIN, { path });
    mcpUrl = running.url.replace('/graphql', '/mcp');
  });

  afterAll(async () => {
    await running?.stop();
  });

  it('an initialize keeps only the known fields: no experimental capabilities, bounded clientInfo', () => {
    const hostile = {
      ...INITIALIZE,
      params: {
        protocolVersion: LATEST_PROTOCOL_VERSION,
        capabilities: {
          experimental: { x: [[[]]] },
          roots: { listChanged: true, extra: [1] },
          sampling: { tools: {}, more: {} },
          unknown: {},
        },
        clientInfo: { name: 'n'.repeat(10_000), version: '1', title: 't', icons: [{ src: 'x' }] },
        _meta: { big: 'x' },
      },
    };
    const clean = sanitizeInitialize(hostile as never);
    expect(clean.params).toEqual({
      protocolVersion: LATEST_PROTOCOL_VERSION,
      capabilities: { roots: { listChanged: true }, sampling: { tools: {} } },
      clientInfo: { name: 'n'.repeat(256), version: '1', title: 't' },
    });
  });

  it('a body nested deeper than jsonDepthMax (plus the JSON-RPC envelope) is refused with 400 before it is parsed', async () => {
    const deep = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"${LATEST_PROTOCOL_VERSION}","clientInfo":{"name":"x","version":"1"},"capabilities":{"experimental":{"x":${'['.repeat(400_000)}${']'.repeat(400_000)}}}}}`;
    const response = await post(mcpUrl, deep, { authorization: `Bearer ${ADMIN}` });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { code: number } }).error.code).toBe(-32600);
    // 35 levels (jsonDepthMax 32 + 3) are fine, inside a string nothing counts.
    const ok = {
      ...INITIALIZE,
      params: { ...INITIALIZE.params, clientInfo: { name: '[[[[{{{{'.repeat(100), version: '1' } },
    };
    const okResponse = await post(mcpUrl, ok, { authorization: `Bearer ${ADMIN}` });
    expect(okResponse.status).toBe(200);
    expect(jsonTextTooDeep(`${'['.repeat(35)}${']'.repeat(35)}`, 35)).toBe(false);
    expect(jsonTextTooDeep(`${'['.repeat(36)}${']'.repeat(36)}`, 35)).toBe(true);
    await fetch(mcpUrl, {
      method: 'DELETE',
      headers: {
        authorization: `Bearer ${ADMIN}`,
        'mcp-session-id': okResponse.headers.get('mcp-session-id')!,
        'mcp-protocol-version': LATEST_PROTOCOL_VERSION,
      },
    });
  });

  it('sessions opened by hostile initialize bodies (250,000 {} in experimental) keep little heap', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const key = createClient(running.engine, 'wide');
    const body = JSON.stringify({
      ...INITIALIZE,
      params: {
        ...INITIALIZE.params,
        capabilities: { experimental: { x: Array.from({ length: 250_000 }, () => ({})) } },
      },
    });
    gc();
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < 4; i++) expect((await post(mcpUrl, body, { authorization: `Bearer ${key}` })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 100));
    gc();
    const kept = process.memoryUsage().heapUsed - before;
    // Unsanitized, each session kept 16 MB or more.
    expect(kept).toBeLessThan(12 * 1024 * 1024);
  });

  it('commits by another connection and mutations that change no action and no client make sessions read nothing; client changes are coalesced per key', async () => {
    const keys = [createClient(running.engine, 'reader-a'), createClient(running.engine, 'reader-b')];
    const clients = await Promise.all([0, 0, 0, 1, 1, 1].map((k) => connect(mcpUrl, keys[k]!)));
    // The first read of each key's list (the baseline) is done.
    await new Promise((r) => setTimeout(r, 1200));
    const engine = running.engine;
    // MCP sessions' requests run as any other (here, with no read pool, on this engine's execute), marked as MCP's.
    const original = engine.execute;
    let mcpCalls = 0;
    engine.execute = (request, options) => {
      if (options?.transport === 'mcp') mcpCalls++;
      return original(request, options);
    };
    const foreign = new Database(path);
    try {
      foreign.exec('CREATE TABLE IF NOT EXISTS foreign_noise (x INTEGER)');
      for (let n = 0; n < 30; n++) {
        foreign.prepare('INSERT INTO foreign_noise (x) VALUES (?)').run(n);
        const created = engine.graphql(
          `mutation { createAccount(input: {accountId: "${id(500 + n)}", code: "noise-${n}", name: "x"}) { code } }`,
        );
        expect(created.errors).toBeUndefined();
      }
      await new Promise((r) => setTimeout(r, 1200));
      expect(mcpCalls).toBe(0);
      // Thirty client changes at once: each key's list is read at most twice (now, and a second later).
      for (let n = 0; n < 30; n++) {
        expect(
          engine.graphql(
            `mutation { auth { updateClient(principal: "reader-a", input: {name: "a${n}"}) { __typename } } }`,
          ).errors,
        ).toBeUndefined();
      }
      await new Promise((r) => setTimeout(r, 1500));
      expect(mcpCalls).toBeGreaterThan(0);
      // Two keys × two checks × (one page + the native tools).
      expect(mcpCalls).toBeLessThanOrEqual(8);
    } finally {
      foreign.close();
      engine.execute = original;
      await Promise.all(clients.map(({ client }) => client.close()));
    }
  });

  it("sessions of a rotated key free their slots: the owner's new key opens one at once", async () => {
    const leaked = createClient(running.engine, 'leaky');
    const ids: string[] = [];
    for (let i = 0; i < 8; i++) {
      const response = await post(mcpUrl, INITIALIZE, { authorization: `Bearer ${leaked}` });
      expect(response.status).toBe(200);
      ids.push(response.headers.get('mcp-session-id')!);
    }
    expect((await post(mcpUrl, INITIALIZE, { authorization: `Bearer ${leaked}` })).status).toBe(503);
    const rotated = running.engine.graphql(
      'mutation { auth { updateClient(principal: "leaky", input: {rotateKey: true}) { apiKey } } }',
    );
    expect(rotated.errors).toBeUndefined();
    const fresh = (rotated.data as any).auth.updateClient.apiKey as string;
    expect((await post(mcpUrl, INITIALIZE, { authorization: `Bearer ${fresh}` })).status).toBe(200);
    // The old key's sessions are gone: its holder gets 401, the new key has all but one slot.
    const stale = await post(
      mcpUrl,
      { jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} },
      { authorization: `Bearer ${leaked}`, 'mcp-session-id': ids[0]!, 'mcp-protocol-version': LATEST_PROTOCOL_VERSION },
    );
    expect(stale.status).toBe(401);
    for (let i = 0; i < 7; i++)
      expect((await post(mcpUrl, INITIALIZE, { authorization: `Bearer ${fresh}` })).status).toBe(200);
  });
});
