import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ScriptedModel, startScriptedModel, toolResults } from '../../examples/scripted-model/server.mjs';
import { exited, running } from '../helpers/processes.js';
import { createAccount, createTransferCode } from '../helpers/ledger.js';
import { id, newEngine, ok } from '../helpers/engine.js';

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');
const RUNS = 50;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The agent asks for two transfers in its first turn and answers in its second. Each transfer is a
 * tool that posts under a fresh random transaction id (cel('uuid.New()')): a tool call run twice
 * would post twice, so the count of transactions is the count of tool calls that ran.
 */
/** A database file with accounts 1 and 2, TRANSFER, and post_random; and a TALLY_CONFIG file naming the scripted model. */
async function ledgerWithPostRandom(
  dir: string,
  model: ScriptedModel,
): Promise<{ path: string; config: string; engine: Awaited<ReturnType<typeof newEngine>> }> {
  const path = join(dir, 'agents.db');
  const config = join(dir, 'tally.config.json');
  const providers = [{ name: 'local', format: 'openai', baseUrl: `${model.url}/v1`, models: ['mover'] }];
  writeFileSync(config, JSON.stringify({ providers, limits: { agentLeaseMs: 1000 } }));
  const engine = await newEngine({ path, providers });
  createAccount(engine, 1);
  createAccount(engine, 2);
  createTransferCode(engine);
  ok(engine, CREATE_ACTION, {
    id: id(1),
    input: {
      name: 'post_random',
      config: {
        runtime: 'javascript',
        src: `function run(event) {
  const tx = cel('uuid.New()');
  graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }',
    { i: { transactionId: tx, tranCode: 'TRANSFER', params: { from: '${id(1)}', to: '${id(2)}', amount: event.data.amount } } });
  return { tx };
}`,
      },
      tool: {
        description: 'Move an amount from account 1 to account 2.',
        inputSchema: { type: 'object', properties: { amount: { type: 'string' } }, required: ['amount'] },
      },
      policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }],
    },
  });
  return { path, config, engine };
}

const CREATE_ACTION = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;

async function prepare(dir: string, model: ScriptedModel): Promise<{ path: string; config: string }> {
  const { path, config, engine } = await ledgerWithPostRandom(dir, model);
  const create = CREATE_ACTION;
  ok(engine, create, {
    id: id(2),
    input: {
      name: 'mover',
      kind: 'agent',
      config: { provider: 'local', model: 'mover', instructions: 'Make the two transfers asked for, then say done.' },
      tool: {
        description: 'Makes two transfers.',
        inputSchema: { type: 'object', properties: { n: { type: 'integer' } } },
      },
      tools: [{ name: 'post_random', version: 1 }],
      policies: [
        { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
        { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
      ],
      execution: { maxAttempts: 50, backoff: { initialMs: 10, multiplier: 1, maxMs: 10 } },
    },
  });
  for (let i = 0; i < RUNS; i++) {
    ok(
      engine,
      `mutation($e: UUID!, $n: Int!) { actions { startAction(name: "mover", input: {executionId: $e, input: {n: $n}}) { status } } }`,
      { e: id(10_000 + i), n: i },
    );
  }
  engine.close();
  return { path, config };
}

function worker(path: string, config: string): ChildProcess {
  return spawn(process.execPath, [BIN, 'worker', '--db', path, '--log-level', 'silent'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TALLY_CONFIG: config },
  });
}

function facts(path: string) {
  const db = new Database(path, { readonly: true });
  const result = {
    statuses: Object.fromEntries(
      (
        db
          .prepare(
            "SELECT status, count(*) AS n FROM executions WHERE parent_id IS NULL AND kind = 'AGENT' GROUP BY status",
          )
          .all() as Array<{ status: string; n: number }>
      ).map((r) => [r.status, r.n]),
    ),
    transactions: (db.prepare('SELECT count(*) AS n FROM transactions').get() as { n: number }).n,
    toolCalls: (
      db
        .prepare("SELECT count(*) AS n FROM executions WHERE action_name = 'post_random' AND status = 'SUCCEEDED'")
        .get() as { n: number }
    ).n,
    turns: (
      db.prepare("SELECT count(*) AS n FROM executions WHERE kind = 'MODEL' AND status = 'SUCCEEDED'").get() as {
        n: number;
      }
    ).n,
    reclaimed: (
      db.prepare("SELECT count(*) AS n FROM executions WHERE kind = 'AGENT' AND attempt > 1").get() as { n: number }
    ).n,
    balance: db.prepare('SELECT settled_dr, settled_cr FROM balances WHERE account_id = ?').get(id(1)) as {
      settled_dr: string;
      settled_cr: string;
    },
  };
  db.close();
  return result;
}

describe('agent runs survive kill -9 of their worker at any point', () => {
  let model: ScriptedModel;
  beforeAll(async () => {
    model = await startScriptedModel({
      rules: [
        (request) => {
          const results = toolResults(request);
          // A little latency, so kills land while a model call is in flight too.
          const delayMs = 20 + Math.floor(Math.random() * 130);
          if (results.length === 0) {
            return {
              delayMs,
              toolCalls: [
                { name: 'post_random', arguments: { amount: '1.00' } },
                { name: 'post_random', arguments: { amount: '2.00' } },
              ],
            };
          }
          return { delayMs, text: `done: ${results.filter((r) => !r.isError).length} transfers` };
        },
      ],
    });
  });
  afterAll(() => model.close());

  it('50 runs of two transfers each, the worker killed 8 times at random: every run finishes and there are exactly 100 transfers', async () => {
    const { path, config } = await prepare(mkdtempSync(join(tmpdir(), 'tally-agent-crash-')), model);
    let kills = 0;
    for (; kills < 8; kills++) {
      const child = worker(path, config);
      await running(child);
      await sleep(50 + Math.random() * 350);
      child.kill('SIGKILL');
      await exited(child);
      if (facts(path).statuses.SUCCEEDED === RUNS) break;
    }
    // The last worker runs undisturbed until every run has finished.
    const last = worker(path, config);
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline && (facts(path).statuses.SUCCEEDED ?? 0) < RUNS) await sleep(200);
    last.kill('SIGTERM');
    await exited(last);

    const after = facts(path);
    expect(after.statuses).toEqual({ SUCCEEDED: RUNS });
    expect(after.transactions).toBe(2 * RUNS);
    expect(after.toolCalls).toBe(2 * RUNS);
    expect(after.turns).toBe(2 * RUNS);
    expect(after.balance).toEqual({ settled_dr: '150.00', settled_cr: '0' });
    // The kills landed mid-run: some runs were claimed again after their worker died.
    expect(after.reclaimed).toBeGreaterThan(0);
    console.log(`kills: ${kills}, runs claimed again after a kill: ${after.reclaimed}`);
  }, 120_000);
});

describe('a call waiting for approval survives kill -9 of the worker', () => {
  it('parked, killed, approved, killed again while it resumes: the call runs exactly once', async () => {
    const model = await startScriptedModel({
      rules: [
        (request) =>
          toolResults(request).length === 0
            ? { delayMs: 100, toolCalls: [{ name: 'post_random', arguments: { amount: '500.00' } }] }
            : { delayMs: 100, text: 'paid' },
      ],
    });
    try {
      const { path, config, engine } = await ledgerWithPostRandom(
        mkdtempSync(join(tmpdir(), 'tally-approval-crash-')),
        model,
      );
      const create = CREATE_ACTION;
      ok(engine, create, {
        id: id(2),
        input: {
          name: 'careful',
          kind: 'agent',
          config: { provider: 'local', model: 'mover' },
          tool: { description: 'Pays after a yes.', inputSchema: { type: 'object' } },
          tools: [{ name: 'post_random', version: 1, approval: { timeoutMs: 600_000 } }],
          policies: [
            { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
            { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
          ],
          execution: { maxAttempts: 20 },
        },
      });
      ok(
        engine,
        `mutation { actions { startAction(name: "careful", input: {executionId: "${id(777)}", input: {}}) { status } } }`,
      );
      const status = () =>
        (engine.db.prepare('SELECT status FROM executions WHERE execution_id = ?').get(id(777)) as { status: string })
          .status;
      const first = worker(path, config);
      await running(first);
      for (let i = 0; i < 500 && status() !== 'WAITING_APPROVAL'; i++) await sleep(20);
      first.kill('SIGKILL');
      await exited(first);
      expect(status()).toBe('WAITING_APPROVAL');
      const approval = engine.db.prepare("SELECT approval_id FROM approvals WHERE status = 'PENDING'").get() as {
        approval_id: string;
      };
      ok(
        engine,
        `mutation { actions { approveCall(approvalId: "${approval.approval_id}", reason: "ok") { status } } }`,
      );
      // Killed again at once after it resumes, then left to finish.
      const second = worker(path, config);
      await running(second);
      await sleep(150);
      second.kill('SIGKILL');
      await exited(second);
      const last = worker(path, config);
      for (let i = 0; i < 600 && status() !== 'SUCCEEDED'; i++) await sleep(50);
      last.kill('SIGTERM');
      await exited(last);
      expect(status()).toBe('SUCCEEDED');
      expect((engine.db.prepare('SELECT count(*) AS n FROM transactions').get() as { n: number }).n).toBe(1);
      engine.close();
    } finally {
      await model.close();
    }
  }, 90_000);
});
