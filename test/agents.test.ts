import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deploy } from '../src/deploy/deploy.js';
import { readProject } from '../src/deploy/project.js';
import type { Engine } from '../src/engine.js';
import { type ScriptedModel, startScriptedModel } from '../examples/scripted-model/server.mjs';
import { newEngine } from './helpers.js';

const BANK = join(import.meta.dirname, '..', 'examples', 'bank');
const ALICE = 'b0000000-0000-4000-8000-000000000011';
const BOB = 'b0000000-0000-4000-8000-000000000012';
const tx = (n: number) => `c0000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

function ok(engine: Engine, query: string, variables: Record<string, unknown> = {}, principal?: string): any {
  const result = engine.graphql(query, variables, principal === undefined ? {} : { principal });
  if (result.errors) throw new Error(JSON.stringify(result.errors));
  return result.data;
}

const START = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { startAction(name: $n, input: {executionId: $e, input: $i}) { executionId status kind } } }`;
const TREE = `query($e: UUID!) { actions { execution(executionId: $e) { status kind output error { code message } attempt
  children { kind actionName status input output error { code message } model { provider model inputTokens outputTokens latencyMs httpAttempts stopReason }
    children { kind actionName actionVersion status input output error { code message hint } } } } } }`;

async function teller(format: 'openai' | 'anthropic') {
  const { default: rules } = (await import(join(BANK, 'model', 'teller.mjs'))) as { default: any[] };
  const model = await startScriptedModel({ rules, apiKey: 'sk-test-teller' });
  process.env.TEST_TELLER_KEY = 'sk-test-teller';
  const engine = await newEngine({
    path: join(mkdtempSync(join(tmpdir(), 'tally-teller-')), 'bank.db'),
    providers: [{ name: 'local', format, baseUrl: format === 'openai' ? `${model.url}/v1` : model.url, models: ['scripted-teller'], apiKeyEnv: 'TEST_TELLER_KEY' }],
  });
  await deploy(readProject(BANK), { describe: 'in-process', request: async (q, v) => engine.graphql(q, v ?? null) as never, close: async () => {} });
  ok(engine, 'mutation($a: TransactionInput!, $b: TransactionInput!) { a: postTransaction(input: $a) { transactionId } b: postTransaction(input: $b) { transactionId } }', {
    a: { transactionId: tx(1), tranCode: 'DEPOSIT', params: { account: ALICE, amount: '100' } },
    b: { transactionId: tx(2), tranCode: 'DEPOSIT', params: { account: BOB, amount: '50' } },
  });
  return { engine, model };
}

for (const format of ['openai', 'anthropic'] as const) {
  describe(`the bank's teller agent, over the ${format} wire format`, () => {
    let engine: Engine;
    let model: ScriptedModel;
    beforeAll(async () => {
      ({ engine, model } = await teller(format));
    });
    afterAll(async () => {
      engine.close();
      await model.close();
    });

    it('moves 25 from Alice to Bob once and answers with both balances; the tree shows each turn and each call', async () => {
      const started = ok(engine, START, { n: 'teller', e: tx(100), i: { account_id: ALICE, message: 'move 25 from Alice to Bob, then tell me both balances' } }, 'operator');
      expect(started.actions.startAction).toMatchObject({ status: 'QUEUED', kind: 'AGENT' });
      const worker = engine.createWorker();
      await worker.drainAll();
      const run = ok(engine, TREE, { e: tx(100) }).actions.execution;
      console.log(JSON.stringify(run, null, 1));
      expect(run).toMatchObject({ status: 'SUCCEEDED', kind: 'AGENT', output: { text: 'Moved 25 from Alice to Bob. Alice now has 75.00 available, Bob has 75.00.' } });
    });
  });
}
