import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');
const KEY = 'tly_process-test-key';

describe('tally serve as a process', () => {
  it('requires the admin key from TALLY_ADMIN_KEY, and on SIGTERM finishes the request in flight before exiting 0', async () => {
    const db = join(mkdtempSync(join(tmpdir(), 'tally-serve-')), 'serve.db');
    const child = spawn(process.execPath, [BIN, 'serve', '--db', db, '--port', '0'], {
      env: { ...process.env, TALLY_ADMIN_KEY: KEY },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        const match = /at (http:\/\/[^\s]+\/graphql)/.exec(output);
        if (match) resolve(match[1]!);
      });
      child.once('exit', () => reject(new Error(`serve exited: ${output}`)));
    });
    const post = (query: string, key = KEY) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify({ query }),
      });
    expect((await post('{ journal { name } }', 'tly_wrong')).status).toBe(401);
    // A tool that keeps the request busy for ~300 ms inside its transaction.
    const created =
      await post(`mutation { actions { createAction(id: "00000000-0000-4000-8000-000000000001", input: {name: "slow", kind: "tool",
      config: {runtime: "javascript", src: "function run() { const end = Date.now() + 300; while (Date.now() < end) {} return 'done'; }"},
      policies: [{effect: ALLOW, actions: [SELECT], resources: ["*"]}]}) { version } } }`);
    expect(((await created.json()) as any).data.actions.createAction.version).toBe(1);
    const inFlight = post(
      'mutation { actions { invokeAction(name: "slow", input: {executionId: "00000000-0000-4000-8000-000000000002", actionVersion: 1}) { status output } } }',
    );
    await new Promise((r) => setTimeout(r, 50));
    child.kill('SIGTERM');
    const response = await inFlight;
    expect(response.status).toBe(200);
    expect(((await response.json()) as any).data.actions.invokeAction).toEqual({ status: 'SUCCEEDED', output: 'done' });
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(0);
    expect(output).toContain('SIGTERM, shutting down');
  }, 30_000);

  it('on a port in use, says so and what to do, exits 1, and leaves no database (so no admin key to show)', async () => {
    const { createServer } = await import('node:net');
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const { port } = blocker.address() as { port: number };
    const db = join(mkdtempSync(join(tmpdir(), 'tally-serve-')), 'busy.db');
    const env = { ...process.env };
    delete env.TALLY_ADMIN_KEY;
    const child = spawn(process.execPath, [BIN, 'serve', '--db', db, '--port', String(port)], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    blocker.close();
    expect(code).toBe(1);
    expect(err).toContain(`cannot serve on 127.0.0.1:${port}: the port is in use`);
    expect(err).toContain('--port N or PORT=N');
    expect(err).not.toContain('    at ');
    expect(out).not.toContain('API key');
    expect(existsSync(db)).toBe(false);
  }, 30_000);
});
