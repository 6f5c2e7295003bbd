import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { deploy, DeployError, formatPlan, planDeploy } from '../../src/deploy/deploy.js';
import { ProjectError, readProject } from '../../src/deploy/project.js';
import type { Target } from '../../src/deploy/target.js';
import type { Engine } from '../../src/engine.js';
import { id, newEngine, ok } from '../helpers/engine.js';

// `tally deploy` of a tool of kind http: a manifest with no program beside it, as a model's or an
// agent's, whose config names one of the operator's integrations (TALLY_CONFIG `integrations`).

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');
const run = promisify(execFile);

const INTEGRATION = {
  name: 'payouts',
  baseUrl: 'http://127.0.0.1:9/v1',
  methods: ['POST'],
  paths: ['/payouts'],
  headers: { Authorization: { env: 'DEPLOY_TEST_PAYOUTS_TOKEN', prefix: 'Bearer ' } },
};

const payout = (config: Record<string, unknown> = {}) => ({
  actionId: id(501),
  kind: 'http',
  description: 'Ask the provider to pay out',
  internal: true,
  config: {
    integration: 'payouts',
    method: 'POST',
    path: '/payouts',
    body: "{'payout_id': input.payout_id, 'amount': input.amount}",
    followUps: { failed: { tool: 'release', input: "{'payout_id': input.payout_id}" } },
    ...config,
  },
  inputSchema: { type: 'object', properties: { payout_id: { type: 'string' }, amount: { type: 'string' } } },
  tools: [{ name: 'release', version: 1 }],
  policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.Account'] }],
  execution: { maxAttempts: 5 },
});

let dir: string;
let engine: Engine;
let target: Target;

function write(name: string, value: unknown): void {
  writeFileSync(join(dir, name), typeof value === 'string' ? value : JSON.stringify(value, null, 2));
}

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tally-deploy-http-'));
  engine = await newEngine({ path: join(dir, 'ledger.db'), integrations: [INTEGRATION] });
  target = {
    describe: 'in-process',
    request: async (q, v) => engine.graphql(q, v ?? null) as never,
    close: async () => {},
  };
  mkdirSync(join(dir, 'tools'));
  write('tally.json', { name: 'payouts' });
  write('tools/release.js', 'function run(event) { return { released: event.data.payout_id }; }');
  write('tools/release.json', { actionId: id(502), description: 'Release a hold', internal: true });
  write('tools/payout.json', payout());
});

afterEach(() => {
  engine.close();
  rmSync(dir, { recursive: true, force: true });
});

const ACTION = `query($n: String!) { actions { action(name: $n) { kind version config tools { name version } } } }`;

describe('deploy: tools of kind http', () => {
  it('creates an http tool from its manifest alone, after the tool its follow-up declares; a second deploy changes nothing', async () => {
    const result = await deploy(readProject(dir), target);
    expect(formatPlan(result.plan).split('\n').slice(-2)).toEqual([
      '+ create tool release (version 1)',
      '+ create tool payout (version 1)',
    ]);
    const action = ok(engine, ACTION, { n: 'payout' }).actions.action;
    expect(action).toMatchObject({ kind: 'http', version: 1, tools: [{ name: 'release', version: 1 }] });
    expect(action.config).toEqual(payout().config);
    const again = await planDeploy(readProject(dir), target);
    expect(again.map((item) => item.change)).toEqual(['unchanged', 'unchanged']);
  });

  it('a changed config is a new version of the http tool, and only of it', async () => {
    await deploy(readProject(dir), target);
    write('tools/payout.json', payout({ path: '/payouts/{input.payout_id}' }));
    const result = await deploy(readProject(dir), target);
    expect(result.plan.filter((item) => item.change !== 'unchanged').map((item) => formatPlan([item]))).toEqual([
      expect.stringContaining('~ new version 2 of tool payout'),
    ]);
    expect(ok(engine, ACTION, { n: 'payout' }).actions.action).toMatchObject({
      kind: 'http',
      version: 2,
      config: { path: '/payouts/{input.payout_id}' },
    });
  });

  it('a program beside an http manifest, or a manifest without config, is refused naming the file', () => {
    write('tools/payout.js', 'function run() { return 1; }');
    expect(() => readProject(dir)).toThrow(ProjectError);
    expect(() => readProject(dir)).toThrow(
      'tools/payout.json: is an http tool, which has no program: remove tools/payout.js or the kind',
    );
    rmSync(join(dir, 'tools', 'payout.js'));
    const { config: _, ...bare } = payout();
    write('tools/payout.json', bare);
    expect(() => readProject(dir)).toThrow(
      'tools/payout.json: an http tool needs "config": {integration, method, path, …}',
    );
  });

  it('an integration the server does not have, a method it does not allow or a path that could leave it is the engine’s refusal naming the file; nothing is applied', async () => {
    for (const [config, message] of [
      [{ integration: 'ledger_api' }, 'no integration named "ledger_api" is configured [BAD_REQUEST]'],
      [{ method: 'DELETE' }, 'integration payouts does not allow DELETE [BAD_REQUEST]'],
      [{ path: '/payouts/../admin' }, 'config.path "/payouts/../admin" is not a path the tool may send [BAD_REQUEST]'],
    ] as const) {
      write('tools/payout.json', payout(config));
      const error = await deploy(readProject(dir), target).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DeployError);
      expect((error as Error).message).toContain(`tools/payout.json: ${message}`);
      expect((error as Error).message).toMatch(/nothing was applied$/);
      expect(engine.graphql('{ actions { action(name: "release") { version } } }').errors?.[0]?.extensions?.code).toBe(
        'NOT_FOUND',
      );
    }
  });
});

describe('tally deploy --db: the integrations of TALLY_CONFIG', () => {
  // Both halves fail unless the file's integrations reach the in-process engine: with none, the
  // unknown name would pass (it is checked only where integrations are configured) or the known one fail.
  it('checks an http tool against the integrations the configuration names', async () => {
    const config = join(dir, 'tally.config.json');
    write('tally.config.json', { integrations: [INTEGRATION] });
    const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? tmpdir(), TALLY_CONFIG: config };
    const db = join(dir, 'cli.db');
    write('tools/payout.json', payout({ integration: 'ledger_api' }));
    const refused = await run('node', [BIN, 'deploy', dir, '--db', db], { env }).catch((e: unknown) => e);
    expect((refused as { code?: number }).code).toBe(1);
    expect((refused as { stderr: string }).stderr).toContain(
      'tools/payout.json: no integration named "ledger_api" is configured [BAD_REQUEST]',
    );
    write('tools/payout.json', payout());
    const { stdout } = await run('node', [BIN, 'deploy', dir, '--db', db], { env });
    expect(stdout).toContain('+ create tool payout (version 1)');
    expect(stdout).toMatch(/applied 2 change\(s\) to .*cli\.db in one transaction/);
  }, 30_000);
});
