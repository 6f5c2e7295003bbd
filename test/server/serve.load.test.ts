// Nothing cold on the request path (issue 34): a fresh `tally serve`'s first request is a chain of
// tools as deep as toolDepthMax allows, with a CPU hog busy on one of the machine's cores, and it
// succeeds within the default deadlines (every nesting level's sandbox runtime is made at start);
// then a fan-out of callsPerExecutionMax calls beneath one call does too, and one more is refused.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine.js';
import { id } from '../helpers/engine.js';
import { exited, serveProcess } from '../helpers/processes.js';

const KEY = 'tly_cold-admin-key-0123456789';
const CREATE =
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }';
const CALL_EVERYTHING = [{ effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] }];

describe('a fresh tally serve, with a CPU hog beside it', () => {
  let server: Awaited<ReturnType<typeof serveProcess>>;
  let hog: ChildProcess | undefined;
  const gql = async (query: string) => {
    const response = await fetch(server.endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ query }),
    });
    return (await response.json()) as any;
  };
  beforeAll(async () => {
    const db = join(mkdtempSync(join(tmpdir(), 'tally-cold-')), 'cold.db');
    // The tools are there before the server starts: its first request is the chain.
    const engine = await createEngine({ path: db });
    for (let level = 8; level >= 0; level--) {
      engine.graphql(CREATE, {
        id: id(100 + level),
        input: {
          name: `chain${level}`,
          kind: 'tool',
          policies: CALL_EVERYTHING,
          config: {
            runtime: 'javascript',
            src:
              level === 8
                ? 'function run() { return { depth: 8 }; }'
                : `function run() { return tools.chain${level + 1}({}); }`,
          },
          tools: level === 8 ? [] : [{ name: `chain${level + 1}`, version: 1 }],
        },
      });
    }
    engine.graphql(CREATE, {
      id: id(120),
      input: {
        name: 'fan_out',
        kind: 'tool',
        policies: CALL_EVERYTHING,
        config: {
          runtime: 'javascript',
          src: 'function run(event) { let n = 0; for (let i = 0; i < event.data.calls; i++) n += cel("1"); return n; }',
        },
      },
    });
    engine.close();
    // One hog on one core: its own, unless the run already has one beside it (scripts/with-hog.mjs).
    if (!process.env.TALLY_CPU_HOG) hog = spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' });
    server = await serveProcess(db, KEY);
  });
  afterAll(async () => {
    hog?.kill('SIGKILL');
    server?.child.kill('SIGTERM');
    if (server) await exited(server.child);
  });

  it('the first request is a 9-level chain, and it succeeds', async () => {
    const first = await gql(
      `mutation { actions { invokeAction(name: "chain0", input: {executionId: "${id(1000)}", actionVersion: 1, input: {}}) { status output error { code message } } } }`,
    );
    expect(first.errors, JSON.stringify(first)).toBeUndefined();
    expect(first.data.actions.invokeAction).toMatchObject({ status: 'SUCCEEDED', output: { depth: 8 } });
  });

  it("then 1,024 calls beneath one call succeed, and the 1,025th is LIMIT_EXCEEDED (the specification's limits, reachable by default)", async () => {
    const fan = (e: number, calls: number) =>
      gql(
        `mutation { actions { invokeAction(name: "fan_out", input: {executionId: "${id(e)}", actionVersion: 1, input: {calls: ${calls}}}) { status output error { code message } } } }`,
      );
    const fine = await fan(1001, 1024);
    expect(fine.errors, JSON.stringify(fine)).toBeUndefined();
    expect(fine.data.actions.invokeAction).toMatchObject({ status: 'SUCCEEDED', output: 1024 });
    const over = await fan(1002, 1025);
    expect(over.errors, JSON.stringify(over)).toBeUndefined();
    expect(over.data.actions.invokeAction).toMatchObject({ status: 'FAILED', error: { code: 'LIMIT_EXCEEDED' } });
    expect(over.data.actions.invokeAction.error.message).toContain('call 1025');
  });
});
