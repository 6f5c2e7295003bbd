import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deploy } from '../../src/deploy/deploy.js';
import { readProject } from '../../src/deploy/project.js';
import { newEngine } from './engine.js';

/** What the MCP tests share: examples/bank deployed into a fresh file, and the CLI to check it. */
export const BANK = join(import.meta.dirname, '..', '..', 'examples', 'bank');
export const BIN = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');
export const ALICE = 'b0000000-0000-4000-8000-000000000011';
export const BOB = 'b0000000-0000-4000-8000-000000000012';
export const tx = (n: number) => `c0000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

/** examples/bank in a fresh file, Alice with 100, and a read-only client `reader` that may invoke. */
export async function bankDatabase(): Promise<{ path: string; keys: Record<string, string> }> {
  const path = join(mkdtempSync(join(tmpdir(), 'tally-mcp-')), 'bank.db');
  const engine = await newEngine({ path });
  const result = await deploy(readProject(BANK), {
    describe: 'in-process',
    request: async (q, v) => engine.graphql(q, v ?? null) as never,
    close: async () => {},
  });
  const reader = engine.graphql(
    `mutation { auth { createClient(input: {principal: "reader", name: "Read-only agent", policies: [
      {effect: ALLOW, actions: [SELECT], resources: ["*"]}, {effect: ALLOW, actions: [INSERT], resources: ["actions.Execution"]}]}) { apiKey } } }`,
  );
  if (reader.errors) throw new Error(JSON.stringify(reader.errors));
  const deposit = engine.graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
    i: { transactionId: tx(1), tranCode: 'DEPOSIT', params: { account: ALICE, amount: '100' } },
  });
  if (deposit.errors) throw new Error(JSON.stringify(deposit.errors));
  engine.close();
  return { path, keys: { ...result.keys, reader: (reader.data as any).auth.createClient.apiKey } };
}

/** A copy of examples/bank whose transfer takes a `memo` too: deploying it makes transfer@2. */
export function bankWithMemo(): string {
  const project = join(mkdtempSync(join(tmpdir(), 'tally-mcp-deploy-')), 'bank');
  cpSync(BANK, project, { recursive: true });
  const file = join(project, 'tools', 'transfer.json');
  const definition = JSON.parse(readFileSync(file, 'utf8'));
  definition.inputSchema.properties.memo = { type: 'string' };
  writeFileSync(file, JSON.stringify(definition));
  return project;
}

export function cli(args: string[]): string {
  return execFileSync('node', [BIN, ...args], { encoding: 'utf8' });
}

/** An account's settled balance, as `tally balance --json` shows it. */
export function settled(path: string, code: string): string {
  return JSON.parse(cli(['balance', code, '--db', path, '--json'])).settled.normalBalance.units;
}
