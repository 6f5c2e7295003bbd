// ATTACK (a) one client against another through a shared MCP stdio connection: client A asks a
// read-only tool for an answer over MCP_MESSAGE_BYTES_MAX; the connection is closed, and client B's
// payment call, in flight on the same connection (already sent and acted on by the server), ends
// with A's INTEGRATION_ERROR "wrote a message over … bytes" (retry: false): a final failure for a
// call that succeeded, caused by another client.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { EngineError } from '../../../src/errors.js';
import {
  McpServers,
  MCP_MESSAGE_BYTES_MAX,
  mcpToolFingerprint,
  parseMcpServers,
} from '../../../src/integrations/mcp-servers.js';
import type { OutboundCall } from '../../../src/integrations/types.js';

const FIXTURE = join(import.meta.dirname, 'fixtures', 'stdio-pay.mjs');
const LOG = join(mkdtempSync(join(tmpdir(), 'h37-')), 'paid.log');
writeFileSync(LOG, '');
process.env.H37_PAID_LOG = LOG;

function outbound(principal: string): OutboundCall {
  return {
    executionId: randomUUID(),
    idempotencyKey: `idem-${randomUUID()}`,
    principal,
    signal: new AbortController().signal,
    deadline: Date.now() + 20_000,
    authorize() {},
    sending: () => 0,
  };
}

const servers = McpServers.create(
  parseMcpServers(
    [
      {
        name: 'local',
        command: process.execPath,
        args: [FIXTURE],
        env: { PAID_LOG: { env: 'H37_PAID_LOG' } },
        timeoutMs: 10_000,
      },
    ],
    process.env,
  ),
  process.env,
);
afterAll(() => servers.close());

describe('a shared stdio connection', () => {
  it('client A’s oversized answer leaves client B’s in-flight payment unknown and retryable, never a final failure of its own', async () => {
    const tools = await servers.listTools('local');
    const pin = (name: string) => {
      const t = tools.find((x) => x.name === name)!;
      return { fingerprint: mcpToolFingerprint(t), readOnly: t.annotations?.readOnlyHint === true, idempotent: false };
    };
    const bob = servers.call('local', 'pay', { to: 'bob-vendor', cents: 5000 }, outbound('bob'), pin('pay')).then(
      (v) => ({ ok: v }),
      (e: EngineError) => ({ error: e }),
    );
    await new Promise((r) => setTimeout(r, 100)); // Bob's call is on the wire, the server acting on it
    const alice = servers
      .call('local', 'huge', { bytes: MCP_MESSAGE_BYTES_MAX + 1024 }, outbound('alice'), pin('huge'))
      .then(
        (v) => ({ ok: v }),
        (e: EngineError) => ({ error: e }),
      );
    const [, b] = await Promise.all([alice, bob]);
    const paid = readFileSync(LOG, 'utf8').trim().split('\n').filter(Boolean);
    expect(paid).toHaveLength(1); // the server acted on Bob's call
    // Bob's answer was lost with the connection: his call fails as one a retry may mend (and a resumed
    // call of a tool that may not be sent twice finds its send and stops), never as his tool's refusal.
    expect('error' in b && b.error.code).toBe('INTEGRATION_UNAVAILABLE');
    expect('error' in b && (b.error.details as { retry?: unknown }).retry).not.toBe(false);
  });
});
