import { createHash } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import type { Worker } from '../../src/execution/queue/worker.js';
import { derivedId } from '../../src/ids.js';
import { balanceOf, createAccount, createTransferCode } from '../helpers/ledger.js';
import { count, id, newEngine, ok } from '../helpers/engine.js';
import { UNDO_MIGRATIONS_AFTER_9 } from '../helpers/migrations.js';

/**
 * Triggers attacked by a client who holds some rights on them (hostile review F2, F8, F13): a
 * trigger runs only as whoever last said what it does, its executions cannot be claimed in
 * advance, and it cannot re-fire itself forever. Each case is the attack as a client would make it.
 */

let engine: Engine;
let worker: Worker;

const ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const FIN = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] }];
const CREATE_ACTION =
  'mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { version } } }';
const CREATE_CLIENT = 'mutation($i: ClientInput!) { auth { createClient(input: $i) { client { principal } } } }';
const CREATE_TRIGGER = 'mutation($i: TriggerInput!) { actions { createTrigger(input: $i) { triggerId principal } } }';
const UPDATE_TRIGGER =
  'mutation($id: UUID!, $i: TriggerUpdateInput!) { actions { updateTrigger(id: $id, input: $i) { principal action { name } version } } }';
const OWNERS = 'query($id: UUID!) { actions { trigger(id: $id) { principal previousPrincipal } } }';
const POST = 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }';
const BY_TRIGGER = `{ actions { executions(first: 100) { nodes { executionId actionName status triggerId caller { principal } input error { code message } } } } }`;
const DEPTHS = `{ actions { executions(first: 100) { nodes { actionName status triggerId triggerDepth } } } }`;

/** A request as `principal` (the engine's own authority when left out). */
const as = (principal: string | undefined, query: string, variables?: Record<string, unknown>) =>
  engine.graphql(query, variables, principal === undefined ? {} : { principal });
function okAs<T = any>(principal: string | undefined, query: string, variables?: Record<string, unknown>): T {
  const result = as(principal, query, variables);
  if (result.errors) throw new Error(`unexpected errors: ${JSON.stringify(result.errors)}`);
  return result.data as T;
}
const codeOf = (result: { errors?: ReadonlyArray<{ extensions?: Record<string, unknown> }> }) =>
  result.errors?.[0]?.extensions?.code;

function tool(
  owner: string | undefined,
  n: number,
  name: string,
  src: string,
  policies: unknown[] = ALL,
  extra: Record<string, unknown> = {},
): string {
  okAs(owner, CREATE_ACTION, {
    id: id(n),
    i: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies, ...extra },
  });
  return id(n);
}
const client = (principal: string, policies: unknown[]) =>
  ok(engine, CREATE_CLIENT, { i: { principal, name: principal, policies } });
const transfer = (tx: number, amount: string, tranCode = 'TRANSFER', from = 1, to = 2) => ({
  i: { transactionId: id(tx), tranCode, params: { from: id(from), to: id(to), amount } },
});

/** Run due attempts until none is due: a queue that never idles fails the test instead of hanging it. */
function drain(max = 40): number {
  let n = 0;
  while (worker.runOnce())
    if (++n >= max) throw new Error(`the queue was still busy after ${max} attempts: a trigger loop`);
  return n;
}

/** Every top-level execution a trigger started, oldest first. */
function triggered(triggerId: string) {
  return ok(engine, BY_TRIGGER).actions.executions.nodes.filter((n: any) => n.triggerId === triggerId);
}
/** [status, triggerDepth] of every top-level execution of an action, oldest first. */
function depths(actionName: string) {
  return ok(engine, DEPTHS)
    .actions.executions.nodes.filter((n: any) => n.actionName === actionName)
    .map((n: any) => [n.status, n.triggerDepth]);
}

/** A new engine (limits as given) with accounts 1–3 and the TRANSFER and PAY tran codes. */
async function fresh(limits: Record<string, number> = {}): Promise<void> {
  engine = await newEngine({ clock: new ManualClock('2026-03-01T10:00:00.000Z'), random: () => 0.5, limits });
  worker = engine.createWorker({ owner: 'test' });
  engine.ensureAdmin();
  for (const n of [1, 2, 3]) createAccount(engine, n);
  createTransferCode(engine);
  createTransferCode(engine, 'PAY', id(9001));
}

beforeEach(() => fresh());
afterEach(() => engine.close());

describe('F2: updateTrigger re-owns the trigger to the updater', () => {
  it('ops points admin’s trigger at its own tool: the tool runs as ops, not as admin, and ops gains nothing', () => {
    tool('admin', 10, 'notify', 'function run() { return 1; }', []);
    okAs('admin', CREATE_TRIGGER, {
      i: { triggerId: id(20), name: 'on_post', on: ['transaction.inserted'], action: { name: 'notify' } },
    });
    client('ops', [
      { effect: 'ALLOW', actions: ['SELECT', 'UPDATE'], resources: ['actions.Trigger'] },
      { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Action'] },
      ...FIN,
    ]);
    tool(
      'ops',
      11,
      'pwn',
      `function run() {
      return graphql('mutation($p: [PolicyInput!]) { auth { updateClient(principal: "ops", input: {policies: $p}) { client { principal } } } }',
        { p: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }] });
    }`,
    );
    expect(codeOf(as('ops', '{ auth { client(principal: "admin") { principal } } }'))).toBe('ACCESS_DENIED');

    const updated = okAs('ops', UPDATE_TRIGGER, { id: id(20), i: { action: { name: 'pwn' } } }).actions.updateTrigger;
    okAs('ops', POST, transfer(21, '1'));
    drain();

    // ops' policies are unchanged: the execution ran as ops, who may not even start it.
    expect(codeOf(as('ops', '{ auth { client(principal: "admin") { principal } } }'))).toBe('ACCESS_DENIED');
    expect(triggered(id(20))).toMatchObject([
      { actionName: 'pwn', caller: { principal: 'ops' }, status: 'FAILED', error: { code: 'ACCESS_DENIED' } },
    ]);
    expect(updated).toEqual({ principal: 'ops', action: { name: 'pwn' }, version: 2 });
    // Who owned it before stays visible.
    expect(ok(engine, OWNERS, { id: id(20) }).actions.trigger).toEqual({
      principal: 'ops',
      previousPrincipal: 'admin',
    });
  });

  it('with only SELECT and UPDATE on triggers, ops cannot aim admin’s trigger at admin’s transfer tool to pay itself', () => {
    tool('admin', 10, 'notify', 'function run() { return 1; }', []);
    tool(
      'admin',
      12,
      'transfer',
      `function run(e) {
      graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }',
        { i: { transactionId: e.execution.executionId, tranCode: 'PAY', params: { from: e.data.from, to: e.data.to, amount: e.data.amount } } });
      return 'paid';
    }`,
      FIN,
    );
    okAs('admin', CREATE_TRIGGER, {
      i: {
        triggerId: id(20),
        name: 'on_transfer',
        on: ['transaction.inserted'],
        filter: "document.tranCode == 'TRANSFER'",
        action: { name: 'notify' },
      },
    });
    client('ops', [{ effect: 'ALLOW', actions: ['SELECT', 'UPDATE'], resources: ['actions.Trigger'] }]);
    client('teller', FIN);

    const input = { from: `'${id(1)}'`, to: `'${id(3)}'`, amount: "'250000'" };
    const updated = okAs('ops', UPDATE_TRIGGER, { id: id(20), i: { action: { name: 'transfer' }, input } }).actions
      .updateTrigger;
    okAs('teller', POST, transfer(21, '1')); // anyone's next posting
    drain();

    expect(balanceOf(engine, id(3)).settled.normalBalance.units).toBe('0');
    expect(triggered(id(20))).toMatchObject([
      { actionName: 'transfer', caller: { principal: 'ops' }, status: 'FAILED', error: { code: 'ACCESS_DENIED' } },
    ]);
    expect(updated.principal).toBe('ops');
  });

  it('the updater’s policies must allow the trigger as it will be: UPDATE limited to the notify trigger cannot retarget it', () => {
    tool('admin', 10, 'notify', 'function run() { return 1; }', []);
    tool('admin', 12, 'transfer', 'function run() { return 1; }', FIN);
    okAs('admin', CREATE_TRIGGER, {
      i: { triggerId: id(20), name: 'on_post', on: ['transaction.inserted'], action: { name: 'notify' } },
    });
    client('tuner', [
      {
        effect: 'ALLOW',
        actions: ['SELECT', 'UPDATE'],
        resources: ['actions.Trigger'],
        assertions: { notify_only: "context.document.action.name == 'notify'" },
      },
    ]);

    const retarget = as('tuner', UPDATE_TRIGGER, { id: id(20), i: { action: { name: 'transfer' } } });
    expect(codeOf(retarget)).toBe('ACCESS_DENIED');
    expect(ok(engine, `{ actions { trigger(id: "${id(20)}") { action { name } } } }`).actions.trigger.action.name).toBe(
      'notify',
    );
    // Tuning what the trigger is for is allowed (and makes it tuner's).
    expect(
      okAs('tuner', UPDATE_TRIGGER, { id: id(20), i: { filter: "document.tranCode == 'TRANSFER'" } }).actions
        .updateTrigger.principal,
    ).toBe('tuner');
  });

  it('a tool cannot update a trigger (as it cannot create one), whoever invokes it', () => {
    tool('admin', 10, 'notify', 'function run() { return 1; }', []);
    okAs('admin', CREATE_TRIGGER, {
      i: { triggerId: id(20), name: 'on_post', on: ['transaction.inserted'], action: { name: 'notify' } },
    });
    tool(
      'admin',
      13,
      'retarget',
      `function run() {
      try { graphql('mutation { actions { updateTrigger(id: "${id(20)}", input: {status: LOCKED}) { status } } }'); return 'updated'; }
      catch (e) { return e.code; }
    }`,
    );
    const run = okAs(
      'admin',
      `mutation { actions { invokeAction(name: "retarget", input: {executionId: "${id(30)}", actionVersion: 1}) { output } } }`,
    );
    expect(run.actions.invokeAction.output).toBe('ACCESS_DENIED');
    expect(ok(engine, `{ actions { trigger(id: "${id(20)}") { status principal } } }`).actions.trigger).toEqual({
      status: 'ACTIVE',
      principal: 'admin',
    });
  });

  it('the engine’s own authority (in-process, principal system) re-owns a trigger it updates to system', () => {
    tool('admin', 10, 'notify', 'function run() { return 1; }', []);
    okAs('admin', CREATE_TRIGGER, {
      i: { triggerId: id(20), name: 'on_post', on: ['transaction.inserted'], action: { name: 'notify' } },
    });
    expect(
      okAs(undefined, UPDATE_TRIGGER, { id: id(20), i: { status: 'LOCKED' } }).actions.updateTrigger.principal,
    ).toBe('system');
    expect(ok(engine, OWNERS, { id: id(20) }).actions.trigger).toEqual({
      principal: 'system',
      previousPrincipal: 'admin',
    });
  });
});

describe('F8: a trigger’s execution id cannot be claimed in advance', () => {
  /** The id as the engine derived it before: an unkeyed SHA-256 of public values, computable by anyone. */
  const unkeyed = (...parts: string[]) => {
    const h = createHash('sha256').update(parts.join('\0')).digest('hex');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-8${h.slice(13, 16)}-${((parseInt(h[16]!, 16) & 3) | 8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
  };

  function largeReview(): void {
    tool('admin', 10, 'review', 'function run(e) { return e.data; }', []);
    okAs('admin', CREATE_TRIGGER, {
      i: {
        triggerId: id(20),
        name: 'large_review',
        on: ['transaction.inserted'],
        filter: "decimal(document.params.amount) >= decimal('1000')",
        action: { name: 'review' },
        input: { tx: 'document.transactionId' },
      },
    });
    client('teller', [
      ...FIN,
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['actions.Trigger'] },
      {
        effect: 'ALLOW',
        actions: ['INSERT'],
        resources: ['actions.Execution'],
        assertions: { calc: "context.document.action == 'cel'" },
      },
    ]);
  }
  const claimAndPost = (claim: string, tx: number) =>
    as(
      'teller',
      `mutation($i: TransactionInput!) { actions { invokeAction(name: "cel", input: {executionId: "${claim}", input: {expression: "1"}}) { status } } postTransaction(input: $i) { transactionId } }`,
      transfer(tx, '5000'),
    );

  it('a teller who claims the id it computes from public values does not suppress the review of its large posting', () => {
    largeReview();
    okAs('teller', POST, transfer(30, '5000'));
    expect(claimAndPost(unkeyed('trigger', id(20), 'transaction.inserted', id(31), '1'), 31).errors).toBeUndefined();
    expect(triggered(id(20)).map((n: any) => [n.status, n.input.tx])).toEqual([
      ['QUEUED', id(30)],
      ['QUEUED', id(31)],
    ]);
  });

  it('ids are keyed per database: the same trigger and change give another id in another database', async () => {
    largeReview();
    okAs('teller', POST, transfer(30, '5000'));
    const first = triggered(id(20))[0].executionId;
    engine.close();
    await fresh();
    largeReview();
    okAs('teller', POST, transfer(30, '5000'));
    expect(triggered(id(20))[0].executionId).not.toBe(first);
  });

  it('should the key leak, a claimed id does not silence the trigger: the match is recorded as FAILED under a fresh id', () => {
    largeReview();
    // An insider's view of the database: the key is in no API answer.
    const key = engine.db.prepare("SELECT value FROM settings WHERE name = 'derived_id_key'").pluck().get() as string;
    const claim = derivedId(key, 'trigger', id(20), 'transaction.inserted', id(32), '1');
    expect(claimAndPost(claim, 32).errors).toBeUndefined();
    const runs = triggered(id(20));
    expect(runs).toHaveLength(1);
    expect(runs[0].executionId).not.toBe(claim);
    expect(runs[0]).toMatchObject({
      status: 'FAILED',
      caller: { principal: 'admin' },
      error: { code: 'EXECUTION_ID_CONFLICT', message: expect.stringContaining('trigger large_review') },
    });
    expect(runs[0].error.message).toContain(claim);
  });

  it('the key is made once per database by migration 6 (a database from before it included) and kept across restarts', async () => {
    const { mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const path = join(mkdtempSync(join(tmpdir(), 'tally-key-')), 'key.db');
    const keyOf = (e: Engine) =>
      e.db.prepare("SELECT value FROM settings WHERE name = 'derived_id_key'").pluck().get() as string;
    const old = await newEngine({ path });
    old.close();
    // What a version-5 database looks like: no settings, no trigger depth, no previous owner.
    const { default: Database } = await import('better-sqlite3');
    const raw = new Database(path);
    raw.exec(UNDO_MIGRATIONS_AFTER_9);
    raw.exec(
      'DROP TABLE session_messages; DROP TABLE sessions; DROP TABLE approvals; DROP TABLE skill_versions; DROP TABLE skills; DROP TABLE settings; ALTER TABLE executions DROP COLUMN trigger_depth; ALTER TABLE triggers DROP COLUMN previous_principal; ALTER TABLE executions DROP COLUMN transport; PRAGMA user_version = 5;',
    );
    raw.close();
    const migrated = await newEngine({ path });
    const key = keyOf(migrated);
    expect(key).toMatch(/^[0-9a-f]{64}$/);
    expect(key).not.toBe(keyOf(engine));
    migrated.close();
    const reopened = await newEngine({ path });
    expect(keyOf(reopened)).toBe(key);
    reopened.close();
  });

  it('still idempotent: the same change dispatched twice starts one execution', () => {
    largeReview();
    okAs('teller', POST, transfer(40, '5000'));
    okAs('teller', POST, transfer(40, '5000')); // a replay of the post: nothing new
    // The change announced again (its rows removed behind the engine's back, then posted anew).
    engine.db.prepare('DELETE FROM entries WHERE transaction_id = ?').run(id(40));
    engine.db.prepare('DELETE FROM transactions WHERE transaction_id = ?').run(id(40));
    okAs('teller', POST, transfer(40, '5000'));
    expect(triggered(id(20)).map((n: any) => n.status)).toEqual(['QUEUED']);
  });
});

describe('F13: triggers cannot loop (triggerDepthMax)', () => {
  const FEE = `function run(e) {
    graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }',
      { i: { transactionId: e.execution.executionId, tranCode: 'TRANSFER', params: { from: '${id(1)}', to: '${id(3)}', amount: '0.01' } } });
    return 'charged';
  }`;

  it('a trigger whose action posts stops at triggerDepthMax (default 4) with a FAILED LIMIT_EXCEEDED execution naming it', () => {
    tool('admin', 10, 'fee', FEE, FIN);
    okAs('admin', CREATE_TRIGGER, {
      i: { triggerId: id(20), name: 'fee_on_post', on: ['transaction.inserted'], action: { name: 'fee' } },
    });
    client('mallory', FIN);
    okAs('mallory', POST, transfer(21, '1'));
    expect(drain()).toBe(4);

    const runs = triggered(id(20));
    expect(runs.map((n: any) => n.status)).toEqual(['SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED', 'FAILED']);
    expect(runs[4].error).toMatchObject({
      code: 'LIMIT_EXCEEDED',
      message: expect.stringContaining('trigger fee_on_post'),
    });
    expect(runs[4].error.message).toContain('trigger depth 5, over triggerDepthMax (4)');
    expect(count(engine, 'transactions')).toBe(5);
    expect(balanceOf(engine, id(3)).settled.normalBalance.units).toBe('0.04');
    expect(depths('fee')).toEqual([
      ['SUCCEEDED', 1],
      ['SUCCEEDED', 2],
      ['SUCCEEDED', 3],
      ['SUCCEEDED', 4],
      ['FAILED', 5],
    ]);
    expect(engine.limits.triggerDepthMax).toBe(4);
  });

  it('crossing a lowered triggerDepthMax: one level, then the recorded stop', async () => {
    engine.close();
    await fresh({ triggerDepthMax: 1 });
    tool(undefined, 10, 'fee', FEE, FIN);
    ok(engine, CREATE_TRIGGER, {
      i: { triggerId: id(20), name: 'fee_on_post', on: ['transaction.inserted'], action: { name: 'fee' } },
    });
    ok(engine, POST, transfer(21, '1'));
    expect(drain()).toBe(1);
    const runs = triggered(id(20));
    expect(depths('fee')).toEqual([
      ['SUCCEEDED', 1],
      ['FAILED', 2],
    ]);
    expect(runs[1].error.message).toMatch(/^trigger fee_on_post: .* trigger depth 2, over triggerDepthMax \(1\)$/);
  });

  it('a loop through startAction is bounded too: what a triggered execution starts inherits its depth', async () => {
    engine.close();
    await fresh({ triggerDepthMax: 2 });
    tool(undefined, 10, 'fee', FEE, FIN);
    tool(
      undefined,
      11,
      'relay',
      `function run(e) {
      return graphql('mutation($e: UUID!) { actions { startAction(name: "fee", input: {executionId: $e}) { status } } }', { e: cel('uuid.New()') });
    }`,
    );
    ok(engine, CREATE_TRIGGER, {
      i: { triggerId: id(20), name: 'relay_on_post', on: ['transaction.inserted'], action: { name: 'relay' } },
    });
    ok(engine, POST, transfer(21, '1'));
    drain();
    expect(depths('relay')).toEqual([
      ['SUCCEEDED', 1],
      ['SUCCEEDED', 2],
      ['FAILED', 3],
    ]);
    expect(depths('fee')).toEqual([
      ['SUCCEEDED', 1],
      ['SUCCEEDED', 2],
    ]);
    expect(count(engine, 'transactions')).toBe(3);
  });
});
