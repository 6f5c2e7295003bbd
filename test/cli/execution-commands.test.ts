import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { id, ok } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

/**
 * `tally invoke` as a person meets it: the CLI in a child process against a real server, with the
 * key of a client that may run one tool and nothing else. It needs what invokeAction(name:) and
 * MCP tools/call need (INSERT actions.Execution on that tool), not SELECT on actions.Action.
 */
const BIN = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');
const ADMIN = 'tly_cli-invoke-admin-key';
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;

function tally(args: string[]): Promise<{ status: number; out: string; err: string }> {
  const env = { ...process.env };
  for (const name of ['TALLY_SERVER', 'TALLY_API_KEY', 'TALLY_ADMIN_KEY', 'TALLY_DB', 'TALLY_CONFIG']) delete env[name];
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env }, (error, out, err) =>
      resolve({ status: error ? ((error as { code?: number }).code ?? 1) : 0, out, err }),
    );
  });
}

describe('tally invoke <tool>: the right to run it is enough', () => {
  let running: Awaited<ReturnType<typeof startServer>>;
  let runner: string;

  beforeAll(async () => {
    running = await startServer(ADMIN);
    const tool = (n: number, name: string, src: string, extra: Record<string, unknown> = {}) =>
      ok(running.engine, CREATE, {
        id: id(n),
        input: { name, kind: 'tool', config: { runtime: 'javascript', src }, ...extra },
      });
    tool(1, 'echo', 'function run(event) { return {v: 1, got: event.data}; }');
    // Version 2 is the latest ACTIVE one: invoke must run it, not version 1.
    ok(
      running.engine,
      `mutation { actions { updateAction(id: "${id(1)}", input: {config: {runtime: "javascript", src: "function run(event) { return {v: 2, got: event.data}; }"}}) { version } } }`,
    );
    tool(2, 'other', 'function run() { return {other: true}; }');
    // A helper, not offered outside (MCP, models): its operator still runs it from the CLI to test it.
    tool(3, 'helper', 'function run() { return {helped: true}; }', { tool: { internal: true } });
    const created = ok(
      running.engine,
      `mutation($pol: [PolicyInput!]!) { auth { createClient(input: {principal: "runner", name: "runs echo", policies: $pol}) { apiKey } } }`,
      {
        pol: [
          {
            effect: 'ALLOW',
            actions: ['INSERT'],
            resources: ['actions.Execution'],
            assertions: { only: "context.document.action == 'echo' || context.document.action == 'helper'" },
          },
        ],
      },
    );
    runner = created.auth.createClient.apiKey;
  });
  afterAll(() => running?.stop());

  it('a client that may only run echo (no SELECT on actions.Action) runs its latest ACTIVE version', async () => {
    const run = await tally([
      'invoke',
      'echo',
      '--input',
      '{"a": 1}',
      '--server',
      running.url,
      '--key',
      runner,
      '--json',
    ]);
    expect(run.err).toBe('');
    expect(run.status).toBe(0);
    const execution = JSON.parse(run.out);
    expect(execution).toMatchObject({
      actionName: 'echo',
      actionVersion: 2,
      status: 'SUCCEEDED',
      output: { v: 2, got: { a: 1 } },
    });
  });

  it('an internal tool it may run: run from the CLI (internal hides a tool from MCP and models, not from its operator)', async () => {
    const run = await tally(['invoke', 'helper', '--input', '{}', '--server', running.url, '--key', runner]);
    expect(run.status).toBe(0);
    expect(run.out).toContain('helper@1');
    expect(run.out).toContain('"helped": true');
  });

  it('a tool it may not run: refused as a name nobody used, and nothing runs', async () => {
    const refused = await tally(['invoke', 'other', '--input', '{}', '--server', running.url, '--key', runner]);
    const unknown = await tally(['invoke', 'no_such', '--input', '{}', '--server', running.url, '--key', runner]);
    expect(refused.status).toBe(1);
    expect(refused.err).toContain('NOT_FOUND');
    expect(refused.err.replace('"other"', '"<name>"')).toBe(unknown.err.replace('"no_such"', '"<name>"'));
    const runs = ok(running.engine, '{ actions { executions(first: 10) { nodes { actionName } } } }').actions.executions
      .nodes;
    expect(runs.map((n: { actionName: string }) => n.actionName)).not.toContain('other');
  });
});
