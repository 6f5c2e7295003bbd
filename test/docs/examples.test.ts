import { execFileSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import Database from 'better-sqlite3';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type PayoutProvider, startPayoutProvider } from '../../examples/payout-provider/provider.mjs';
import { deploy, DeployError, formatPlan } from '../../src/deploy/deploy.js';
import { readProject } from '../../src/deploy/project.js';
import { serverTarget, type Target } from '../../src/deploy/target.js';
import type { Engine } from '../../src/engine.js';
import { newEngine } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

const BANK = join(import.meta.dirname, '..', '..', 'examples', 'bank');
const BIN = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');
const ALICE = 'b0000000-0000-4000-8000-000000000011';
const BOB = 'b0000000-0000-4000-8000-000000000012';
const FEES = 'b0000000-0000-4000-8000-000000000002';
const MERCHANTS = 'b0000000-0000-4000-8000-000000000004';
const SAVINGS = 'b0000000-0000-4000-8000-000000000013';
const ALICE_SET = 'b0000000-0000-4000-8000-000000000021';
const tx = (n: number) => `c0000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

function engineTarget(engine: Engine): Target {
  return {
    describe: 'in-process',
    request: async (q, v) => engine.graphql(q, v ?? null) as never,
    close: async () => {},
  };
}

function ok(engine: Engine, query: string, variables: Record<string, unknown> = {}, principal?: string): any {
  const result = engine.graphql(query, variables, principal === undefined ? {} : { principal });
  if (result.errors) throw new Error(JSON.stringify(result.errors));
  return result.data;
}

const INVOKE = `mutation($n: String!, $e: UUID!, $i: JSON) { actions { invokeAction(name: $n, input: {executionId: $e, actionVersion: 1, input: $i}) {
  executionId status output error { code message hint } children { kind actionName status } } } }`;
const invoke = (engine: Engine, name: string, n: number, input: unknown, principal = 'operator') =>
  ok(engine, INVOKE, { n: name, e: tx(9000 + n), i: input }, principal).actions.invokeAction;
const available = (engine: Engine, account: string) =>
  ok(
    engine,
    `{ balance(accountId: "${account}") { settled { normalBalance { units } } available(layer: PENDING) { normalBalance { units } } } }`,
  ).balance;
const post = (engine: Engine, n: number, tranCode: string, params: Record<string, unknown>) =>
  ok(engine, 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
    i: { transactionId: tx(n), tranCode, params },
  });

describe('examples/bank, deployed into a fresh database, walked through', () => {
  let engine: Engine;
  let keys: Record<string, string>;

  beforeAll(async () => {
    engine = await newEngine({ path: join(mkdtempSync(join(tmpdir(), 'tally-bank-')), 'bank.db') });
    const result = await deploy(readProject(BANK), engineTarget(engine));
    expect(result.plan.every((item) => item.change === 'create')).toBe(true);
    // 8 accounts, 2 sets, the overdraft guard (a limit, a control, 2 attachments), 6 tran codes, 12 tools, a skill, a trigger, 3 clients.
    expect(result.plan).toHaveLength(37);
    keys = result.keys;
  });

  it('gave the three clients keys, once', () => {
    expect(Object.keys(keys).sort()).toEqual(['auditor', 'operator', 'teller']);
    expect(engine.authenticate(keys.operator!)).toBe('operator');
  });

  it('deposits, then transfers with a fee behind a condition; the overdraft guard refuses what the sender lacks', () => {
    post(engine, 1, 'DEPOSIT', { account: ALICE, amount: '100' });
    const transfer = invoke(engine, 'transfer', 1, {
      transaction_id: tx(2),
      from: ALICE,
      to: BOB,
      amount: '30',
      fee: '1.50',
    });
    expect(transfer).toMatchObject({
      status: 'SUCCEEDED',
      output: { transaction_id: tx(2), from_available: '68.50', to_available: '30.00' },
    });
    expect(available(engine, FEES).settled.normalBalance.units).toBe('1.50');
    const noFee = invoke(engine, 'transfer', 2, { transaction_id: tx(3), from: BOB, to: ALICE, amount: '5' });
    expect(noFee.output).toMatchObject({ from_available: '25.00', to_available: '73.50' });
    expect(
      ok(engine, `{ transaction(id: "${tx(3)}") { entries(first: 5) { nodes { entryType } } } }`).transaction.entries
        .nodes,
    ).toHaveLength(2);
    const tooMuch = invoke(engine, 'transfer', 3, { transaction_id: tx(4), from: BOB, to: ALICE, amount: '1000' });
    expect(tooMuch).toMatchObject({
      status: 'FAILED',
      error: { code: 'TOOL_FAILED', message: "insufficient funds: 1000.00 needed, 25.00 available in Bob's accounts" },
    });
  });

  it('the overdraft guard: Alice may overdraw her wallet while her savings cover it, never her accounts together', () => {
    // Alice: 68.50 + 5 in her wallet (above), 100 into savings.
    post(engine, 5, 'DEPOSIT', { account: SAVINGS, amount: '100' });
    const covered = invoke(engine, 'transfer', 5, { transaction_id: tx(6), from: ALICE, to: BOB, amount: '150' });
    expect(covered).toMatchObject({
      status: 'SUCCEEDED',
      output: { from_available: '-76.50', to_available: '175.00' },
    });
    const set = () =>
      ok(
        engine,
        `{ accountSet(id: "${ALICE_SET}") { balance { available(layer: PENDING) { normalBalance { units } } } } }`,
      ).accountSet.balance.available.normalBalance.units;
    expect(set()).toBe('23.50');
    // Past her total: the posting itself is refused, and nothing is written.
    const transactions = () =>
      ok(engine, '{ transactions(first: 100) { nodes { transactionId } } }').transactions.nodes.length;
    const before = transactions();
    const refused = engine.graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
      i: { transactionId: tx(7), tranCode: 'TRANSFER', params: { from: SAVINGS, to: BOB, amount: '23.51' } },
    });
    expect(refused.data).toBeNull();
    expect(refused.errors?.[0]).toMatchObject({
      message: 'velocity 0 USD exceeded, balance is 0.01 USD',
      extensions: { code: 'BALANCE_VELOCITY_EXCEEDED', exception: { detail: { accountId: ALICE_SET } } },
    });
    expect(transactions()).toBe(before);
    // Through the tool: its failure says so, in her words, and the balances are as they were.
    const tooMuch = invoke(engine, 'transfer', 6, {
      transaction_id: tx(7),
      from: ALICE,
      to: BOB,
      amount: '23.00',
      fee: '0.51',
    });
    expect(tooMuch).toMatchObject({
      status: 'FAILED',
      error: {
        code: 'TOOL_FAILED',
        message: "insufficient funds: 23.51 needed, 23.50 available in Alice's accounts",
        hint: expect.stringContaining('may not go below zero'),
      },
    });
    expect(transactions()).toBe(before);
    expect([
      set(),
      available(engine, ALICE).available.normalBalance.units,
      available(engine, SAVINGS).available.normalBalance.units,
    ]).toEqual(['23.50', '-76.50', '100']);
    // Exactly all of it is fine; then Alice's accounts are at zero together.
    expect(
      invoke(engine, 'transfer', 7, { transaction_id: tx(8), from: ALICE, to: BOB, amount: '23.00', fee: '0.50' })
        .status,
    ).toBe('SUCCEEDED');
    expect(set()).toBe('0.00');
  });

  it('a transfer over 10,000 starts notify_large through the trigger; the worker runs it', () => {
    post(engine, 10, 'DEPOSIT', { account: ALICE, amount: '20000' });
    invoke(engine, 'transfer', 10, { transaction_id: tx(11), from: ALICE, to: BOB, amount: '15000' });
    invoke(engine, 'transfer', 11, { transaction_id: tx(12), from: ALICE, to: BOB, amount: '10' });
    const worker = engine.createWorker();
    expect(worker.drain()).toBe(1);
    const runs = ok(
      engine,
      '{ actions { executions(first: 10, where: {status: SUCCEEDED}) { nodes { actionName output invocation { logs } } } } }',
    ).actions.executions.nodes.filter((n: any) => n.actionName === 'notify_large');
    expect(runs).toEqual([
      {
        actionName: 'notify_large',
        output: { notified: true, transaction_id: tx(11), amount: '15000' },
        invocation: { logs: [`large transfer ${tx(11)}: 15000 USD`] },
      },
    ]);
  });

  it('a card HOLD reserves funds on PENDING; CAPTURE settles it in one request with the void of the hold', () => {
    const before = available(engine, BOB);
    post(engine, 20, 'HOLD', { account: BOB, amount: '40', hold_id: 'card-auth-1' });
    const held = available(engine, BOB);
    expect(Number(held.available.normalBalance.units)).toBe(Number(before.available.normalBalance.units) - 40);
    expect(held.settled.normalBalance.units).toBe(before.settled.normalBalance.units);
    ok(
      engine,
      `mutation { voidTransaction(id: "${tx(20)}") { transactionId }
      postTransaction(input: {transactionId: "${tx(21)}", tranCode: "CAPTURE", params: {account: "${BOB}", amount: "40", hold_id: "card-auth-1"}}) { transactionId } }`,
    );
    const after = available(engine, BOB);
    expect(Number(after.settled.normalBalance.units)).toBe(Number(before.settled.normalBalance.units) - 40);
    expect(after.available.normalBalance.units).toBe(after.settled.normalBalance.units);
    expect(available(engine, MERCHANTS).settled.normalBalance.units).toBe('40');
    expect(
      ok(engine, '{ transactions(first: 10, where: {correlationId: "card-auth-1"}) { nodes { transactionId } } }')
        .transactions.nodes,
    ).toHaveLength(3);
  });

  it('refund voids a transfer and restores balances exactly; a second refund fails', () => {
    const before = available(engine, FEES).settled.normalBalance.units;
    const refund = invoke(engine, 'refund', 30, { transaction_id: tx(2) });
    expect(refund).toMatchObject({ status: 'SUCCEEDED', output: { refunded: tx(2) } });
    expect(Number(available(engine, FEES).settled.normalBalance.units)).toBe(Number(before) - 1.5);
    expect(invoke(engine, 'refund', 31, { transaction_id: tx(2) }).error.code).toBe('ALREADY_VOIDED');
  });

  it('the teller desk moves money only through transfer: posting directly is refused, transfer (and its receipt hook) runs', () => {
    const POST = 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }';
    const params = { from: BOB, to: ALICE, amount: '2', fee: '0' };
    // The attack: the teller's own postTransaction, skipping the tool (its fee, its refusal in words).
    const direct = engine.graphql(
      POST,
      { i: { transactionId: tx(60), tranCode: 'TRANSFER', params } },
      { principal: 'teller' },
    );
    expect(direct.errors?.[0]).toMatchObject({
      message: 'INSERT on financial.Transaction refused by client teller: no policy allows it',
      extensions: { code: 'ACCESS_DENIED', details: { unmet: { policy: 3, assertions: ['only_through_transfer'] } } },
    });
    expect(engine.graphql(`{ transaction(id: "${tx(60)}") { transactionId } }`).errors).toBeDefined();
    // Nor through a tool that is not transfer, whatever it may do itself.
    const refund = engine.graphql(
      INVOKE,
      { n: 'refund', e: tx(9061), i: { transaction_id: tx(2) } },
      { principal: 'teller' },
    );
    expect(refund.errors?.[0]?.message).toBe(
      'INSERT on actions.Execution refused by client teller: no policy allows it',
    );
    const through = invoke(
      engine,
      'transfer',
      62,
      { transaction_id: tx(62), from: BOB, to: ALICE, amount: '2' },
      'teller',
    );
    expect(through).toMatchObject({ status: 'SUCCEEDED', output: { transaction_id: tx(62) } });
    expect(through.output.receipt).toContain('2.00 USD sent');
  });

  it('lock_account locks and opens a case; when open_case fails, the lock stays and the case is gone', () => {
    const locked = invoke(engine, 'lock_account', 40, { account_id: ALICE, reason: 'Card reported stolen' });
    expect(locked).toMatchObject({ status: 'SUCCEEDED', output: { locked: true, case_opened: true } });
    expect(locked.children.map((c: any) => `${c.kind} ${c.actionName} ${c.status}`)).toEqual([
      'GRAPHQL graphql SUCCEEDED',
      'TOOL open_case SUCCEEDED',
    ]);
    expect(ok(engine, `{ account(id: "${ALICE}") { status metadata } }`).account).toEqual({
      status: 'LOCKED',
      metadata: { tier: 'gold', case: { note: 'Card reported stolen', opened_by: 'operator' } },
    });
    expect(
      invoke(engine, 'transfer', 41, { transaction_id: tx(41), from: ALICE, to: BOB, amount: '1' }).error.code,
    ).toBe('ACCOUNT_LOCKED');
    const outage = invoke(engine, 'lock_account', 42, { account_id: BOB, reason: 'test outage' });
    expect(outage.output).toEqual({ locked: true, case_opened: false });
    expect(ok(engine, `{ account(id: "${BOB}") { status metadata } }`).account).toEqual({
      status: 'LOCKED',
      metadata: { tier: 'standard' },
    });
  });

  it('the auditor reads everything and can invoke nothing', () => {
    expect(
      ok(engine, `{ balance(accountId: "${FEES}") { settled { normalBalance { units } } } }`, {}, 'auditor').balance,
    ).toBeDefined();
    const refused = engine.graphql(INVOKE, { n: 'transfer', e: tx(50), i: {} }, { principal: 'auditor' });
    expect(refused.errors?.[0]?.message).toBe(
      'INSERT on actions.Execution refused by client auditor: no policy allows it',
    );
  });

  it('the CLI draws an execution’s call tree', () => {
    const id = tx(9040);
    const drawn = execFileSync(process.execPath, [BIN, 'execution', id, '--db', (engine.db as { name: string }).name], {
      encoding: 'utf8',
    });
    expect(drawn.split('\n')[0]).toMatch(/^lock_account@1 SUCCEEDED \d+ ms$/);
    expect(drawn).toMatch(/├─ graphql SUCCEEDED \d+ ms\n└─ open_case@1 SUCCEEDED \d+ ms\n {3}├─ graphql SUCCEEDED/);
    // Under the tree: the input, the output and every attempt.
    expect(drawn).toContain(`input      {"account_id":"${ALICE}","reason":"Card reported stolen"}`);
    expect(drawn).toContain('output     {"locked":true,"case_opened":true}');
    expect(drawn).toMatch(/\nattempts {3}1\n {2}#1 SUCCEEDED \S+Z \d+ ms\n/);
  });
});

describe('examples/bank pays out to outside accounts through the stand-in provider (a real HTTP server)', () => {
  const TOKEN = 'stand-in-payouts-token-for-examples';
  const PAYOUTS_CLEARING = 'b0000000-0000-4000-8000-000000000005';
  const IBAN = 'GB33BUKB20201555555555';
  let provider: PayoutProvider;
  let engine: Engine;

  beforeAll(async () => {
    process.env.EXAMPLES_PAYOUTS_TOKEN = TOKEN;
    provider = await startPayoutProvider({ token: TOKEN });
    // examples/bank/tally.config.json's integration, pointed at this provider and this test's variable.
    const [integration] = JSON.parse(readFileSync(join(BANK, 'tally.config.json'), 'utf8')).integrations;
    engine = await newEngine({
      path: join(mkdtempSync(join(tmpdir(), 'tally-bank-payouts-')), 'bank.db'),
      integrations: [
        {
          ...integration,
          baseUrl: `${provider.url}/v1`,
          headers: { Authorization: { env: 'EXAMPLES_PAYOUTS_TOKEN', prefix: 'Bearer ' } },
        },
      ],
    });
    await deploy(readProject(BANK), engineTarget(engine));
    post(engine, 300, 'DEPOSIT', { account: BOB, amount: '500' });
  });
  afterAll(async () => {
    engine?.close();
    await provider?.close();
  });

  /** Run the worker until nothing is due or running: payouts, their retries (backoff from 250 ms) and follow-ups. */
  async function drain(): Promise<void> {
    const worker = engine.createWorker();
    for (let i = 0; i < 400; i++) {
      await worker.drainAll();
      const left = engine.db
        .prepare("SELECT count(*) AS n FROM executions WHERE status IN ('QUEUED', 'RUNNING') AND parent_id IS NULL")
        .get() as { n: number };
      if (left.n === 0) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error('the queue did not drain');
  }

  const requestsFor = (payoutId: string) =>
    provider.requests.filter((r) => (r.body as { payout_id?: string } | null)?.payout_id === payoutId);
  const payOut = (n: number, amount: string, principal = 'operator') =>
    invoke(engine, 'payout_out', n, { payout_id: tx(n), account: BOB, amount, destination: IBAN }, principal);
  const execution = (executionId: string) =>
    ok(
      engine,
      'query($id: UUID!) { actions { execution(executionId: $id) { kind status attempt output error { code message } } } }',
      { id: executionId },
    ).actions.execution;
  const runsOf = (name: string) =>
    ok(
      engine,
      '{ actions { executions(first: 100) { nodes { actionName status input output error { code message } } } } }',
    ).actions.executions.nodes.filter((n: any) => n.actionName === name);
  const correlated = (payoutId: string) =>
    ok(
      engine,
      'query($c: String!) { transactions(first: 10, where: {correlationId: $c}) { nodes { transactionId tranCode { code } voidOf } } }',
      { c: payoutId },
    ).transactions.nodes.map(
      (t: any) => `${t.tranCode.code}${t.voidOf ? ` void of ${t.voidOf}` : ''} ${t.transactionId}`,
    );

  it('payout_out holds the money and starts payout; only after the commit the worker sends it, once, and settle_payout settles it', async () => {
    const started = payOut(310, '120');
    expect(started).toMatchObject({
      status: 'SUCCEEDED',
      output: { payout_id: tx(310), status: 'QUEUED', execution_id: expect.stringMatching(/^[0-9a-f-]{36}$/) },
    });
    const runId = started.output.execution_id;
    // Committed and held; nothing sent yet.
    expect(requestsFor(tx(310))).toHaveLength(0);
    expect(available(engine, BOB)).toEqual({
      settled: { normalBalance: { units: '500' } },
      available: { normalBalance: { units: '380' } },
    });
    await drain();
    const sent = requestsFor(tx(310));
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({
      method: 'POST',
      path: '/v1/payouts',
      key: expect.stringMatching(/^[0-9a-f-]{36}$/),
      authorization: `Bearer ${TOKEN}`,
      body: { payout_id: tx(310), account: IBAN, amount: '120', currency: 'USD' },
    });
    expect(sent[0]!.key).not.toBe(runId);
    expect(execution(runId)).toMatchObject({
      kind: 'HTTP',
      status: 'SUCCEEDED',
      attempt: 1,
      output: { status: 201, headers: {}, body: { id: expect.stringMatching(/^po_/), status: 'paid', amount: '120' } },
    });
    const providerId = execution(runId).output.body.id;
    expect(runsOf('settle_payout')).toEqual([
      {
        actionName: 'settle_payout',
        status: 'SUCCEEDED',
        input: { payout_id: tx(310), account: BOB, amount: '120', settle_id: runId, provider_id: providerId },
        output: { payout_id: tx(310), settled: runId, provider_id: providerId },
        error: null,
      },
    ]);
    expect(available(engine, BOB)).toEqual({
      settled: { normalBalance: { units: '380' } },
      available: { normalBalance: { units: '380' } },
    });
    expect(available(engine, PAYOUTS_CLEARING).settled.normalBalance.units).toBe('120');
    expect(correlated(tx(310))).toEqual([
      `PAYOUT_HOLD ${tx(310)}`,
      expect.stringMatching(new RegExp(`^PAYOUT_HOLD void of ${tx(310)} `)),
      `PAYOUT ${runId}`,
    ]);
    // The token is the server's: in no record.
    expect(JSON.stringify(engine.db.prepare('SELECT * FROM executions').all())).not.toContain(TOKEN);
  });

  it('a request that rolls back holds nothing and sends nothing', async () => {
    const rolledBack = engine.graphql(
      `mutation { actions { invokeAction(name: "payout_out", input: {executionId: "${tx(9320)}", actionVersion: 1,
        input: {payout_id: "${tx(320)}", account: "${BOB}", amount: "10", destination: "${IBAN}"}}) { status } }
        postTransaction(input: {transactionId: "${tx(321)}", tranCode: "NO_SUCH_CODE", params: {}}) { transactionId } }`,
      {},
      { principal: 'operator' },
    );
    expect(rolledBack.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    await drain();
    expect(requestsFor(tx(320))).toHaveLength(0);
    expect(correlated(tx(320))).toEqual([]);
    expect(available(engine, BOB).available.normalBalance.units).toBe('380');
  });

  it('the provider failing three times (HTTP 500): retried with one key, paid once, settled once', async () => {
    provider.failNext(3, 500);
    const runId = payOut(330, '50').output.execution_id;
    await drain();
    const sent = requestsFor(tx(330));
    expect(sent).toHaveLength(4);
    expect(new Set(sent.map((r) => r.key)).size).toBe(1);
    expect(execution(runId)).toMatchObject({ status: 'SUCCEEDED', attempt: 4 });
    expect(runsOf('settle_payout').filter((r: any) => r.input.payout_id === tx(330))).toHaveLength(1);
    expect(available(engine, BOB)).toEqual({
      settled: { normalBalance: { units: '330' } },
      available: { normalBalance: { units: '330' } },
    });
  });

  it('13.13, refused for good (HTTP 422): not retried, FAILED, and release_payout voids the hold', async () => {
    const runId = payOut(340, '13.13').output.execution_id;
    await drain();
    expect(requestsFor(tx(340))).toHaveLength(1);
    expect(execution(runId)).toMatchObject({
      status: 'FAILED',
      attempt: 1,
      error: {
        code: 'INTEGRATION_ERROR',
        message:
          'integration payouts: POST /v1/payouts answered HTTP 422: {"error":"amount refused by the card network"}',
      },
    });
    expect(runsOf('release_payout')).toEqual([
      expect.objectContaining({
        status: 'SUCCEEDED',
        input: { payout_id: tx(340), why: expect.stringContaining('HTTP 422') },
      }),
    ]);
    expect(correlated(tx(340))).toEqual([
      `PAYOUT_HOLD ${tx(340)}`,
      expect.stringMatching(new RegExp(`^PAYOUT_HOLD void of ${tx(340)} `)),
    ]);
    expect(Number(available(engine, BOB).available.normalBalance.units)).toBe(330);
  });

  it('a payout_id is paid once: payout_out again with it is refused; more than the wallet holds is refused; neither holds nor sends', async () => {
    const again = invoke(engine, 'payout_out', 350, {
      payout_id: tx(310),
      account: BOB,
      amount: '120',
      destination: IBAN,
    });
    expect(again).toMatchObject({
      status: 'FAILED',
      error: { code: 'TOOL_FAILED', message: `payout ${tx(310)} was already asked for` },
    });
    const tooMuch = payOut(351, '330.01');
    expect(tooMuch).toMatchObject({
      status: 'FAILED',
      error: { code: 'TOOL_FAILED', message: 'insufficient funds: 330.01 cannot be held' },
    });
    await drain();
    expect(requestsFor(tx(310))).toHaveLength(1);
    expect(requestsFor(tx(351))).toHaveLength(0);
    expect(correlated(tx(351))).toEqual([]);
    expect(payOut(352, '330').status).toBe('SUCCEEDED');
    await drain();
    expect(Number(available(engine, BOB).available.normalBalance.units)).toBe(0);
  });

  it('authority: the teller cannot pay out, the operator cannot start payout itself, and each tool may write only the payout’s postings', async () => {
    post(engine, 360, 'DEPOSIT', { account: BOB, amount: '100' });
    const teller = engine.graphql(
      INVOKE,
      { n: 'payout_out', e: tx(9361), i: { payout_id: tx(361), account: BOB, amount: '1', destination: IBAN } },
      { principal: 'teller' },
    );
    expect(teller.errors?.[0]).toMatchObject({
      message: 'INSERT on actions.Execution refused by client teller: no policy allows it',
      extensions: { code: 'ACCESS_DENIED' },
    });
    // Started directly, payout would pay with no hold: the operator's DENY allows it only beneath payout_out.
    const direct = engine.graphql(
      `mutation($i: JSON) { actions { startAction(name: "payout", input: {executionId: "${tx(9362)}", input: $i}) { status } } }`,
      { i: { payout_id: tx(362), wallet: BOB, amount: '1', currency: 'USD', destination: IBAN } },
      { principal: 'operator' },
    );
    expect(direct.errors?.[0]).toMatchObject({
      message: 'INSERT on actions.Execution refused by client operator: policy 3 denies it',
      extensions: { code: 'ACCESS_DENIED' },
    });
    await drain();
    expect(requestsFor(tx(362))).toHaveLength(0);
    // The follow-ups void a payout's hold and nothing else: not a deposit, even for the operator.
    for (const [n, name, input] of [
      [363, 'release_payout', { payout_id: tx(360), why: 'test' }],
      [364, 'settle_payout', { payout_id: tx(360), account: BOB, amount: '1', settle_id: tx(364), provider_id: 'x' }],
    ] as const) {
      const refused = invoke(engine, name, n, input);
      expect(refused.status, name).toBe('FAILED');
      expect(refused.error.code, name).toBe('ACCESS_DENIED');
    }
    expect(ok(engine, `{ transaction(id: "${tx(360)}") { voidedBy } }`).transaction.voidedBy).toBeNull();
    // A version of payout_out whose program posts a TRANSFER: its policies refuse it.
    const { version } = ok(
      engine,
      'mutation($src: String!) { actions { updateAction(id: "b0000000-0000-4000-8000-0000000000a9", input: {config: {runtime: "javascript", src: $src}}) { version } } }',
      {
        src: `function run(event) { graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', { i: { transactionId: '${tx(365)}', tranCode: 'TRANSFER', params: { from: '${BOB}', to: '${ALICE}', amount: '1' } } }); return {}; }`,
      },
    ).actions.updateAction;
    const wider = ok(
      engine,
      `mutation($i: JSON) { actions { invokeAction(name: "payout_out", input: {executionId: "${tx(9365)}", actionVersion: ${version}, input: $i}) { status error { code message } } } }`,
      { i: { payout_id: tx(365), account: BOB, amount: '1', destination: IBAN } },
      'operator',
    ).actions.invokeAction;
    expect(wider).toMatchObject({ status: 'FAILED', error: { code: 'ACCESS_DENIED' } });
    expect(wider.error.message).toContain('payout_out');
  });

  it('a wallet locked between the hold and the answer: the provider paid, settle_payout fails ACCOUNT_LOCKED and is recorded FAILED', async () => {
    const runId = payOut(370, '10').output.execution_id;
    ok(engine, `mutation { updateAccount(id: "${BOB}", input: {status: LOCKED}) { status } }`);
    await drain();
    expect(execution(runId).status).toBe('SUCCEEDED');
    expect(runsOf('settle_payout').filter((r: any) => r.input.payout_id === tx(370))).toEqual([
      expect.objectContaining({ status: 'FAILED', error: expect.objectContaining({ code: 'ACCOUNT_LOCKED' }) }),
    ]);
    expect(correlated(tx(370))).toEqual([`PAYOUT_HOLD ${tx(370)}`]);
  });
});

describe('tally deploy', () => {
  async function fresh() {
    const dir = join(mkdtempSync(join(tmpdir(), 'tally-project-')), 'bank');
    cpSync(BANK, dir, { recursive: true });
    const engine = await newEngine({ path: join(dir, '..', 'bank.db') });
    return { dir, engine, target: engineTarget(engine) };
  }

  it('a second deploy changes nothing; editing one tool makes exactly one new version', async () => {
    const { dir, engine, target } = await fresh();
    await deploy(readProject(dir), target);
    const again = await deploy(readProject(dir), target);
    expect(again.applied).toBe(false);
    expect(again.plan.every((item) => item.change === 'unchanged')).toBe(true);
    const src = join(dir, 'tools', 'refund.js');
    writeFileSync(src, readFileSync(src, 'utf8').replace('every entry reversed', 'every entry reversed (edited)'));
    const edited = await deploy(readProject(dir), target);
    expect(edited.plan.filter((item) => item.change !== 'unchanged').map((i) => formatPlan([i]))).toEqual([
      '~ new version 2 of tool refund',
    ]);
    expect(ok(engine, '{ actions { action(name: "refund") { version } } }').actions.action.version).toBe(2);
    expect(ok(engine, '{ actions { action(name: "transfer") { version } } }').actions.action.version).toBe(1);
  });

  it('a broken tool file is refused with its file, line and column, and nothing of that deploy is applied', async () => {
    const { dir, engine, target } = await fresh();
    await deploy(readProject(dir), target);
    const accounts = JSON.parse(readFileSync(join(dir, 'accounts.json'), 'utf8'));
    accounts.push({ accountId: 'b0000000-0000-4000-8000-000000000099', code: 'carol', name: "Carol's wallet" });
    writeFileSync(join(dir, 'accounts.json'), JSON.stringify(accounts));
    const file = join(dir, 'tools', 'transfer.js');
    writeFileSync(
      file,
      readFileSync(file, 'utf8').replace('const least = spendable(from);', 'const least = spendable(from;'),
    );
    const error = await deploy(readProject(dir), target).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeployError);
    expect((error as Error).message).toMatch(
      /^tools\/transfer\.js:33:\d+: the program of transfer@2 does not compile: SyntaxError/,
    );
    expect((error as Error).message).toContain('nothing was applied');
    expect(engine.graphql('{ account(code: "carol") { code } }').errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    expect(ok(engine, '{ actions { action(name: "transfer") { version } } }').actions.action.version).toBe(1);
  });

  it('tally import posts a CSV of transactions in batches; a bad row is named and its batch is not applied', async () => {
    const { dir, engine } = await fresh();
    await deploy(readProject(dir), engineTarget(engine));
    const db = (engine.db as { name: string }).name;
    engine.close();
    const rows = [
      'transactionId,tranCode,account,amount',
      ...Array.from(
        { length: 250 },
        (_, i) => `${tx(100_000 + i)},DEPOSIT,${ALICE},"1.${String(i % 100).padStart(2, '0')}"`,
      ),
    ];
    writeFileSync(join(dir, 'deposits.csv'), `${rows.join('\n')}\n`);
    const out = execFileSync(process.execPath, [BIN, 'import', join(dir, 'deposits.csv'), '--db', db, '--json'], {
      encoding: 'utf8',
    });
    expect(JSON.parse(out)).toEqual({ imported: 250 });
    const bad = [rows[0], `${tx(200_000)},DEPOSIT,${ALICE},2`, `${tx(200_001)},DEPOSIT,${ALICE},1.5e3`].join('\n');
    writeFileSync(join(dir, 'bad.csv'), bad);
    let failed: { status: number; stderr: string } | null = null;
    try {
      execFileSync(process.execPath, [BIN, 'import', join(dir, 'bad.csv'), '--db', db], {
        encoding: 'utf8',
        stdio: 'pipe',
      });
    } catch (e) {
      failed = e as { status: number; stderr: string };
    }
    expect(failed?.status).toBe(1);
    expect(failed?.stderr).toContain('bad.csv:3: TRAN_CODE_ERROR');
    const check = await newEngine({ path: db });
    expect(check.graphql(`{ transaction(id: "${tx(200_000)}") { transactionId } }`).errors?.[0]?.extensions?.code).toBe(
      'NOT_FOUND',
    );
    expect(
      ok(check, `{ balance(accountId: "${ALICE}") { settled { normalBalance { units } } } }`).balance.settled
        .normalBalance.units,
    ).toBe(String((250 + [...Array(250).keys()].reduce((a, i) => a + (i % 100), 0) / 100).toFixed(2)));
    check.close();
  });

  it('a JSON file that does not parse is named with its line and column; the CLI exits 1 and prints the plan otherwise', async () => {
    const { dir } = await fresh();
    writeFileSync(join(dir, 'tran-codes', 'DEPOSIT.json'), '{\n  "code": "DEPOSIT",\n  oops\n}');
    let failed: { status: number; stderr: string } | null = null;
    try {
      execFileSync(process.execPath, [BIN, 'deploy', dir, '--db', join(dir, '..', 'cli.db')], {
        encoding: 'utf8',
        stdio: 'pipe',
      });
    } catch (e) {
      failed = e as { status: number; stderr: string };
    }
    expect(failed?.status).toBe(1);
    expect(failed?.stderr).toMatch(/tran-codes\/DEPOSIT\.json:3:3: not valid JSON/);
  });

  it('project files cannot inject GraphQL, leave the folder, or be skipped; malformed ones are named', async () => {
    const { dir, engine, target } = await fresh();
    ok(
      engine,
      'mutation { auth { createClient(input: {principal: "auditor2", name: "a", policies: [{effect: ALLOW, actions: [SELECT], resources: ["financial.*"]}]}) { apiKey } } }',
    );
    const manifest = join(dir, 'tools', 'hello.json');
    writeFileSync(join(dir, 'tools', 'hello.js'), 'function run() { return 1; }');
    const injected =
      'c0000000-0000-4000-8000-0000000000ee", input: $v0) { version } } auth { pwn: updateClient(principal: "auditor2", input: {policies: [{effect: ALLOW, actions: [SELECT, INSERT, UPDATE, DELETE], resources: ["*"]}]}) { client { principal } } } #';
    writeFileSync(manifest, JSON.stringify({ actionId: injected, description: 'x' }));
    await expect(deploy(readProject(dir), target)).rejects.toThrow(
      /tools\/hello\.json: needs an "actionId" that is a UUID/,
    );
    expect(
      ok(engine, '{ auth { client(principal: "auditor2") { policies { actions } } } }').auth.client.policies,
    ).toEqual([{ actions: ['SELECT'] }]);
    // A manifest without its program, a program that leads outside the project, malformed manifests.
    writeFileSync(manifest, JSON.stringify({ actionId: 'c0000000-0000-4000-8000-0000000000ee', description: 'x' }));
    rmSync(join(dir, 'tools', 'hello.js'));
    expect(() => readProject(dir)).toThrow('tools/hello.json: has no tools/hello.js beside it');
    const outside = join(dir, '..', 'outside.js');
    writeFileSync(outside, 'function run() { return "not in the project"; }');
    symlinkSync(outside, join(dir, 'tools', 'hello.js'));
    expect(() => readProject(dir)).toThrow('tools/hello.js: leads outside the project folder');
    rmSync(join(dir, 'tools', 'hello.js'));
    writeFileSync(join(dir, 'tools', 'hello.js'), 'function run() { return 1; }');
    // A file over the project-file bound is refused before it is read (a sparse file: no 17 MiB written).
    truncateSync(join(dir, 'tools', 'hello.js'), 17 * 1024 * 1024);
    expect(() => readProject(dir)).toThrow(/tools\/hello\.js: is 17825792 bytes; project files are at most 16777216/);
    writeFileSync(join(dir, 'tools', 'hello.js'), 'function run() { return 1; }');
    writeFileSync(manifest, JSON.stringify({ actionId: 'c0000000-0000-4000-8000-0000000000ee', tools: 'transfer' }));
    expect(() => readProject(dir)).toThrow('tools/hello.json: "tools" must be a JSON array of objects');
    writeFileSync(manifest, 'null');
    expect(() => readProject(dir)).toThrow('tools/hello.json: must be a JSON object');
    writeFileSync(join(dir, 'accounts.json'), '[1, null]');
    expect(() => readProject(dir)).toThrow('accounts.json: item 0 must be a JSON object');
  });

  it('the CLI refuses databases it does not own and paths that do not exist; a dry run leaves no file', async () => {
    const { dir } = await fresh();
    const run = (...args: string[]) => {
      try {
        return {
          status: 0,
          out: execFileSync(process.execPath, [BIN, ...args], { encoding: 'utf8', stdio: 'pipe' }),
          err: '',
        };
      } catch (e) {
        const failed = e as { status: number; stdout: string; stderr: string };
        return { status: failed.status, out: failed.stdout, err: failed.stderr };
      }
    };
    const typo = join(dir, '..', 'typo.db');
    expect(run('accounts', '--db', typo)).toMatchObject({ status: 1, err: expect.stringContaining('no database at') });
    expect(run('worker', '--db', typo, '--drain')).toMatchObject({
      status: 1,
      err: expect.stringContaining('no database at'),
    });
    expect(existsSync(typo)).toBe(false);
    const dry = join(dir, '..', 'dry.db');
    expect(run('deploy', dir, '--db', dry, '--dry-run')).toMatchObject({
      status: 0,
      out: expect.stringContaining('dry run'),
    });
    expect(existsSync(dry)).toBe(false);
    const foreign = join(dir, '..', 'foreign.db');
    const other = new Database(foreign);
    other.exec('CREATE TABLE accounts (x)');
    other.close();
    expect(run('accounts', '--db', foreign)).toMatchObject({
      status: 1,
      err: expect.stringContaining('a SQLite database of another program'),
    });
    const check = new Database(foreign);
    expect(check.pragma('journal_mode', { simple: true })).toBe('delete');
    expect(check.prepare("SELECT count(*) FROM sqlite_master WHERE type = 'table'").pluck().get()).toBe(1);
    check.close();
  });

  it('a server that never answers, or is not there, is reported with the reason; a dry run shows no keys', async () => {
    const { createServer } = await import('node:net');
    const silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as { port: number };
    const { serverTarget } = await import('../../src/deploy/target.js');
    const mute = await serverTarget(`http://127.0.0.1:${port}/graphql`, 'tly_x', 200).request('{ journal { name } }');
    expect(mute.errors?.[0]).toMatchObject({
      message: expect.stringContaining('no answer within 0.2 s'),
      extensions: { code: 'TIMEOUT' },
    });
    silent.close();
    await new Promise((resolve) => setTimeout(resolve, 50));
    const gone = await serverTarget(`http://127.0.0.1:${port}/graphql`, 'tly_x', 200).request('{ journal { name } }');
    expect(gone.errors?.[0]?.message).toContain('ECONNREFUSED');
    const { dir, engine, target } = await fresh();
    const dry = await deploy(readProject(dir), target, { dryRun: true });
    expect(dry.keys).toEqual({});
    // A server that applies the deploy but answers too late: the outcome is reported as unknown.
    const { createServer: createHttpServer } = await import('node:http');
    const late = createHttpServer((req, res) => {
      let body = '';
      req.on('data', (chunk) => (body += chunk));
      req.on('end', () => {
        const { query, variables } = JSON.parse(body);
        const result = JSON.stringify(engine.graphql(query, variables));
        setTimeout(
          () => res.writeHead(200, { 'content-type': 'application/json' }).end(result),
          query.startsWith('mutation Deploy') ? 600 : 0,
        );
      });
    });
    await new Promise<void>((resolve) => late.listen(0, '127.0.0.1', resolve));
    const latePort = (late.address() as { port: number }).port;
    const error = await deploy(
      readProject(dir),
      serverTarget(`http://127.0.0.1:${latePort}/graphql`, 'tly_x', 300),
    ).catch((e: unknown) => e);
    expect((error as Error).message).toContain('the outcome is unknown');
    expect((error as Error).message).not.toContain('nothing was applied');
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(ok(engine, '{ account(code: "alice") { code } }').account.code).toBe('alice');
    late.closeAllConnections();
    late.close();
  });
});

describe('tally deploy keeps what the running system wrote (issue 34)', () => {
  const CASE = { note: 'Card reported stolen', opened_by: 'operator' };
  const readAlice = (engine: Engine) => ok(engine, `{ account(id: "${ALICE}") { name status metadata } }`).account;
  const setMetadata = (engine: Engine, account: string, change: Record<string, unknown>) => {
    // As a tool would: read the metadata, change a key, write it back (open_case does the same).
    const { metadata } = ok(engine, `{ account(id: "${account}") { metadata } }`).account;
    ok(engine, 'mutation($id: UUID!, $m: JSON) { updateAccount(id: $id, input: {metadata: $m}) { version } }', {
      id: account,
      m: { ...metadata, ...change },
    });
  };
  const editAccounts = (dir: string, edit: (accounts: Array<Record<string, any>>) => void) => {
    const accounts = JSON.parse(readFileSync(join(dir, 'accounts.json'), 'utf8'));
    edit(accounts);
    writeFileSync(join(dir, 'accounts.json'), JSON.stringify(accounts));
  };
  const linesOf = (plan: Awaited<ReturnType<typeof deploy>>['plan'], kind: string, name: string) =>
    formatPlan(plan.filter((i) => i.kind === kind && i.name === name)).split('\n');

  /** The bank in a fresh folder and database, deployed through the engine in-process or through a real HTTP server. */
  async function deployed(how: 'in process' | 'over HTTP') {
    const dir = join(mkdtempSync(join(tmpdir(), 'tally-redeploy-')), 'bank');
    cpSync(BANK, dir, { recursive: true });
    let engine: Engine;
    let target: Target;
    let stop = async () => {};
    if (how === 'in process') {
      engine = await newEngine({ path: join(dir, '..', 'bank.db') });
      target = engineTarget(engine);
    } else {
      // A deploy is one request: a deadline that fits it (issue 34's budgets are another change).
      const running = await startServer('tly_redeploy-admin-key', {
        path: join(dir, '..', 'bank.db'),
        limits: { requestDeadlineMs: 20_000 },
      });
      engine = running.engine;
      target = serverTarget(running.url, 'tly_redeploy-admin-key');
      stop = running.stop;
    }
    const first = await deploy(readProject(dir), target);
    expect(first.plan.every((i) => i.change === 'create')).toBe(true);
    return { dir, engine, target, stop };
  }

  for (const how of ['in process', 'over HTTP'] as const) {
    it(`${how}: deploy the bank, lock Alice through lock_account, deploy again: her case and her lock stay, and the plan says why`, async () => {
      const { dir, engine, target, stop } = await deployed(how);
      try {
        expect(
          invoke(engine, 'lock_account', 60, { account_id: ALICE, reason: 'Card reported stolen' }).output,
        ).toEqual({ locked: true, case_opened: true });
        const again = await deploy(readProject(dir), target);
        expect(readAlice(engine)).toEqual({
          name: "Alice's wallet",
          status: 'LOCKED',
          metadata: { tier: 'gold', case: CASE },
        });
        expect(again.applied).toBe(false);
        expect(again.plan.every((i) => i.change === 'unchanged')).toBe(true);
        expect(linesOf(again.plan, 'account', 'alice')).toEqual([
          '= account alice unchanged',
          '  keeps metadata.case {"note":"Card reported stolen","opened_by":"operator"}, status "LOCKED": written since the last deploy, not declared in accounts.json',
        ]);
        // Said once: the deploy recorded what it saw, so the next one has nothing new to say.
        const third = await deploy(readProject(dir), target);
        expect(
          formatPlan(third.plan)
            .split('\n')
            .filter((l) => !l.startsWith('= ')),
        ).toEqual([]);
        // A field the file changed that nothing changed at runtime is written; only that field.
        editAccounts(dir, (accounts) => (accounts.find((a) => a.code === 'alice')!.name = "Alice's card wallet"));
        const renamed = await deploy(readProject(dir), target);
        expect(linesOf(renamed.plan, 'account', 'alice')).toEqual(['~ update account alice (name)']);
        expect(readAlice(engine)).toEqual({
          name: "Alice's card wallet",
          status: 'LOCKED',
          metadata: { tier: 'gold', case: CASE },
        });
      } finally {
        await stop();
      }
    });

    it(`${how}: a field changed at runtime and in the file is a conflict: refused, nothing written; --overwrite-runtime-changes lets the file win`, async () => {
      const { dir, engine, target, stop } = await deployed(how);
      try {
        invoke(engine, 'lock_account', 61, { account_id: ALICE, reason: 'Card reported stolen' });
        setMetadata(engine, ALICE, { tier: 'silver' });
        editAccounts(dir, (accounts) => {
          accounts.find((a) => a.code === 'alice')!.metadata = { tier: 'platinum' };
          accounts.push({ accountId: 'b0000000-0000-4000-8000-000000000099', code: 'carol', name: "Carol's wallet" });
        });
        const refused = await deploy(readProject(dir), target).catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(DeployError);
        expect((refused as DeployError).code).toBe('CONFLICT');
        expect((refused as Error).message).toBe(
          [
            '1 field changed both at runtime and in the project files since the last deploy:',
            '! conflict account alice metadata.tier: deployed "gold", now "silver", file "platinum"',
            'nothing was applied',
          ].join('\n'),
        );
        expect((refused as DeployError).hint).toContain('--overwrite-runtime-changes');
        expect(readAlice(engine).metadata).toEqual({ tier: 'silver', case: CASE });
        expect(engine.graphql('{ account(code: "carol") { code } }').errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
        // A dry run refuses it the same way.
        await expect(deploy(readProject(dir), target, { dryRun: true })).rejects.toMatchObject({ code: 'CONFLICT' });

        const forced = await deploy(readProject(dir), target, { overwriteRuntimeChanges: true });
        expect(forced.applied).toBe(true);
        expect(linesOf(forced.plan, 'account', 'alice')).toEqual([
          '~ update account alice (metadata.tier)',
          '! overwrite account alice metadata.tier: deployed "gold", now "silver", file "platinum" (the file wins: --overwrite-runtime-changes)',
          '  keeps metadata.case {"note":"Card reported stolen","opened_by":"operator"}, status "LOCKED": written since the last deploy, not declared in accounts.json',
        ]);
        // The file wins where it declares; what it does not declare is still kept.
        expect(readAlice(engine)).toEqual({
          name: "Alice's wallet",
          status: 'LOCKED',
          metadata: { tier: 'platinum', case: CASE },
        });
        expect(ok(engine, '{ account(code: "carol") { code } }').account.code).toBe('carol');
        expect((await deploy(readProject(dir), target)).plan.every((i) => i.change === 'unchanged' && !i.drift)).toBe(
          true,
        );
      } finally {
        await stop();
      }
    });
  }

  it('a declared field changed at runtime while the file stayed the same is kept, and said so on every deploy until the flag restores it', async () => {
    const { dir, engine, target } = await deployed('in process');
    setMetadata(engine, BOB, { tier: 'vip' });
    const keep =
      '! keep account bob metadata.tier: deployed "standard", now "vip"; changed at runtime, the file still says "standard" (--overwrite-runtime-changes restores it)';
    for (let i = 0; i < 2; i++) {
      const again = await deploy(readProject(dir), target);
      expect(linesOf(again.plan, 'account', 'bob')).toEqual(['= account bob unchanged', keep]);
      expect(ok(engine, `{ account(id: "${BOB}") { metadata } }`).account.metadata).toEqual({ tier: 'vip' });
    }
    const restored = await deploy(readProject(dir), target, { overwriteRuntimeChanges: true });
    expect(linesOf(restored.plan, 'account', 'bob')[0]).toBe('~ update account bob (metadata.tier)');
    expect(ok(engine, `{ account(id: "${BOB}") { metadata } }`).account.metadata).toEqual({ tier: 'standard' });
    // A key the file stops declaring goes, when nothing changed it since the deploy wrote it.
    editAccounts(dir, (accounts) => delete accounts.find((a) => a.code === 'bob')!.metadata);
    expect(linesOf((await deploy(readProject(dir), target)).plan, 'account', 'bob')).toEqual([
      '~ update account bob (metadata.tier)',
    ]);
    expect(ok(engine, `{ account(id: "${BOB}") { metadata } }`).account.metadata).toBeNull();
  });

  it('a record written between the plan and the apply refuses the deploy (RECORD_CHANGED): the runtime write stays, nothing of the deploy is applied', async () => {
    const { dir, engine, target } = await deployed('in process');
    editAccounts(dir, (accounts) => (accounts.find((a) => a.code === 'alice')!.name = 'Alice W.'));
    // A tool writes Alice's metadata while the deploy is on its way: after the plan read her, before the apply.
    const racing: Target = {
      ...target,
      request: async (q, v) => {
        if (q.startsWith('mutation Deploy'))
          invoke(engine, 'lock_account', 62, { account_id: ALICE, reason: 'Card reported stolen' });
        return target.request(q, v);
      },
    };
    const error = await deploy(readProject(dir), racing).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(
      /^deploy: account "b0000000-0000-4000-8000-000000000011" is at version 3, not 1 as when the deploy was planned \[RECORD_CHANGED\]\nnothing was applied$/,
    );
    expect(readAlice(engine)).toEqual({
      name: "Alice's wallet",
      status: 'LOCKED',
      metadata: { tier: 'gold', case: CASE },
    });
    // Planned again from the record as it is now: only the name is written.
    await deploy(readProject(dir), target);
    expect(readAlice(engine)).toEqual({ name: 'Alice W.', status: 'LOCKED', metadata: { tier: 'gold', case: CASE } });
  });

  it('tools, tran codes and triggers: a version made outside the deploy is kept (a conflict once the file changes too), a trigger paused at runtime stays paused', async () => {
    const { dir, engine, target } = await deployed('in process');
    const refund = ok(engine, '{ actions { action(name: "refund") { actionId config } } }').actions.action;
    ok(
      engine,
      'mutation($id: UUID!, $c: JSON) { actions { updateAction(id: $id, input: {config: $c}) { version } } }',
      { id: refund.actionId, c: { ...refund.config, src: `${refund.config.src}\n// hotfix` } },
    );
    const trigger = JSON.parse(readFileSync(join(dir, 'triggers', 'notify-large.json'), 'utf8'));
    ok(
      engine,
      `mutation { actions { updateTrigger(id: "${trigger.triggerId}", input: {status: LOCKED}) { version } } }`,
    );
    const again = await deploy(readProject(dir), target);
    expect(again.applied).toBe(false);
    expect(linesOf(again.plan, 'tool', 'refund')).toEqual([
      '= tool refund (version 2) unchanged',
      '! keep tool refund version: deployed version 1, now version 2; changed at runtime, the file still says version 1 (--overwrite-runtime-changes restores it)',
    ]);
    expect(linesOf(again.plan, 'trigger', trigger.name)).toEqual([
      `= trigger ${trigger.name} unchanged`,
      '  keeps status "LOCKED": written since the last deploy, not declared in triggers/notify-large.json',
    ]);
    expect(ok(engine, `{ actions { trigger(id: "${trigger.triggerId}") { status } } }`).actions.trigger.status).toBe(
      'LOCKED',
    );

    const src = join(dir, 'tools', 'refund.js');
    writeFileSync(src, readFileSync(src, 'utf8').replace('every entry reversed', 'every entry reversed (edited)'));
    const refused = await deploy(readProject(dir), target).catch((e: unknown) => e);
    expect((refused as Error).message).toContain(
      '! conflict tool refund version: deployed version 1, now version 2, file version 3',
    );
    expect(ok(engine, '{ actions { action(name: "refund") { version } } }').actions.action.version).toBe(2);
    const forced = await deploy(readProject(dir), target, { overwriteRuntimeChanges: true });
    expect(linesOf(forced.plan, 'tool', 'refund')[0]).toBe('~ new version 3 of tool refund');
    expect(ok(engine, '{ actions { action(name: "refund") { version } } }').actions.action.version).toBe(3);
  });
});
