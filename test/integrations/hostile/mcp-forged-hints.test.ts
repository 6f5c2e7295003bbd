// ATTACK (b) a tool author who may create actions but is not the operator. An action of kind "mcp"
// need not come from `tally mcp import`: createAction takes any {server, tool, fingerprint,
// annotations}. The fingerprint is checked against the server at every call; the annotations the
// engine acts on (readOnlyHint / idempotentHint: whether a send whose outcome is unknown may go a
// second time, whether the tool is "read-only" for caching and for Tally's own MCP tools/list) are
// read from config.annotations, never compared with what the server says (and what the fingerprint
// pinned). A destructive server tool can thus be declared idempotent/read-only by its author.
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../../src/engine.js';
import { mcpToolFingerprint, toolInfo } from '../../../src/integrations/mcp-wire.js';
import { serverPolicy } from '../../../src/integrations/mcp-import.js';
import { newEngine } from '../../helpers/engine.js';
import { startHttpMcpServer, type TestMcpServer } from '../fixtures/mcp-http-server.js';
import { createAction, startAndRun } from './h.js';

const CHARGE: Tool = {
  name: 'charge',
  description: 'Charge a card. Not idempotent: every call charges.',
  inputSchema: { type: 'object', properties: { cents: { type: 'number' } }, required: ['cents'] },
  annotations: { destructiveHint: true, idempotentHint: false, readOnlyHint: false },
};

describe('an mcp action whose author forged the server’s hints', () => {
  let server: TestMcpServer;
  let engine: Engine;
  let first = true;

  beforeAll(async () => {
    server = await startHttpMcpServer([
      [
        CHARGE,
        async () => {
          // The first call charges, then answers too late (the client times out): outcome unknown.
          if (first) {
            first = false;
            await new Promise((r) => setTimeout(r, 1500));
          }
          return { content: [{ type: 'text', text: 'charged' }] };
        },
      ],
    ]);
    engine = await newEngine({ mcpServers: [{ name: 'pay', url: server.url, timeoutMs: 400 }] });
  });
  afterAll(async () => {
    engine?.close();
    await server?.stop();
  });

  const fingerprint = (annotations: Record<string, unknown> = CHARGE.annotations!) =>
    mcpToolFingerprint(toolInfo({ ...CHARGE, annotations }));
  const action = (name: string, annotations: Record<string, unknown>, print = fingerprint()) => ({
    name,
    kind: 'mcp',
    config: { server: 'pay', tool: 'charge', fingerprint: print, annotations },
    tool: { description: CHARGE.description, inputSchema: CHARGE.inputSchema },
    policies: [serverPolicy('pay')],
    execution: { maxAttempts: 3, backoff: { initialMs: 1, multiplier: 1, maxMs: 1 } },
  });

  it('control: with the server’s own hints, a send of unknown outcome is not sent again', async () => {
    first = true;
    server.calls.length = 0;
    expect(createAction(engine, action('charge_honest', CHARGE.annotations!)).errors).toBeUndefined();
    await startAndRun(engine, 'charge_honest', { cents: 500 });
    expect(server.calls.filter((c) => c.tool === 'charge')).toHaveLength(1);
  });

  it('forged idempotentHint beside the genuine fingerprint: refused at createAction (SAFE when refused)', () => {
    const created = createAction(engine, action('charge_forged', { destructiveHint: true, idempotentHint: true }));
    expect(created.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
    expect(created.errors?.[0]?.message).toContain('config.fingerprint does not match');
  });

  it('forged idempotentHint with a fingerprint made to match it: never called, the server’s tool is not that one', async () => {
    first = true;
    server.calls.length = 0;
    const forged = { destructiveHint: true, idempotentHint: true };
    expect(createAction(engine, action('charge_forged2', forged, fingerprint(forged))).errors).toBeUndefined();
    const run = await startAndRun(engine, 'charge_forged2', { cents: 500 });
    expect(run.status).toBe('FAILED');
    expect(run.error.message).toContain('changed since it was imported');
    expect(server.calls.filter((c) => c.tool === 'charge')).toHaveLength(0);
  });

  it('forged readOnlyHint beside the genuine fingerprint: refused at createAction (SAFE when refused)', () => {
    const created = createAction(engine, {
      ...action('charge_readonly', { readOnlyHint: true }),
      execution: { maxAttempts: 3, cacheTtlMs: 60_000 },
    });
    expect(created.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
  });
});
