// ATTACK (d) a hostile MCP server that never answers a tools/call. SAFE if the call ends within the
// server's timeoutMs (progress notifications cannot stretch it: Tally sends no progressToken).
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../../src/engine.js';
import { mcpToolFingerprint, toolInfo } from '../../../src/integrations/mcp-wire.js';
import { serverPolicy } from '../../../src/integrations/mcp-import.js';
import { newEngine } from '../../helpers/engine.js';
import { startHttpMcpServer, type TestMcpServer } from '../fixtures/mcp-http-server.js';
import { createAction, startAndRun } from './h.js';

const HANG: Tool = {
  name: 'hang',
  description: 'Never answers.',
  inputSchema: { type: 'object' },
  annotations: { readOnlyHint: true },
};

describe('an MCP server that stalls', () => {
  let server: TestMcpServer;
  let engine: Engine;
  beforeAll(async () => {
    server = await startHttpMcpServer([[HANG, () => new Promise(() => undefined)]]);
    engine = await newEngine({ mcpServers: [{ name: 'slow', url: server.url, timeoutMs: 400 }] });
    for (const t of [HANG])
      expect(
        createAction(engine, {
          name: `m_${t.name}`,
          kind: 'mcp',
          config: {
            server: 'slow',
            tool: t.name,
            fingerprint: mcpToolFingerprint(toolInfo(t)),
            annotations: t.annotations,
          },
          tool: { description: t.description, inputSchema: t.inputSchema },
          policies: [serverPolicy('slow')],
          execution: { maxAttempts: 1 },
        }).errors,
      ).toBeUndefined();
  });
  afterAll(async () => {
    engine?.close();
    await server?.stop();
  });

  it('a tools/call that never answers ends within timeoutMs 400 (plus connecting)', async () => {
    const began = Date.now();
    const run = await Promise.race([
      startAndRun(engine, 'm_hang', {}),
      new Promise<null>((r) => setTimeout(() => r(null), 8_000)),
    ]);
    const took = Date.now() - began;
    expect(run).not.toBeNull();
    expect(run!.status).toBe('FAILED');
    expect(took).toBeLessThan(3_000);
  });
});
