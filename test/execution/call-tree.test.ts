import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { Statement } from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { actionStatements, queueStatements } from '../../src/storage/statements/actions.js';
import { sessionStatements } from '../../src/storage/statements/sessions.js';
import { count, fails, id, newEngine, ok, ON_POSTGRES } from '../helpers/engine.js';
import { createAccount } from '../helpers/ledger.js';
import { UNDO_MIGRATIONS_AFTER_15 } from '../helpers/migrations.js';

/**
 * Lean call records (migration 15): a program's own graphql() and cel() calls are compact entries
 * of their holder row, not rows; every call still reads through the API exactly as it ran.
 */

const ALLOW_ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const CREATE = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
/** Everything the schema says about one call, but its children. */
const FIELDS = `executionId actionId actionName actionVersion kind status input output error { code message hint details }
  attempt runAt triggerId triggerDepth caller { principal transport } parent { executionId } sessionId cancelRequested cachedFrom created
  invocation { attempt status output error { code message hint } started finished durationMs logs } invocations { attempt status }`;
const TREE = `${FIELDS} children { ${FIELDS} children { ${FIELDS} children { ${FIELDS} children { ${FIELDS} } } } }`;
const INVOKE = `mutation($id: UUID!, $e: UUID!, $input: JSON) { actions { invokeAction(id: $id, input: {executionId: $e, actionVersion: 1, input: $input}) { ${TREE} } } }`;
const READ = `query($e: UUID!) { actions { execution(executionId: $e) { ${TREE} } } }`;

function tool(engine: Engine, n: number, name: string, src: string): string {
  ok(engine, CREATE, {
    id: id(n),
    input: { name, kind: 'tool', config: { runtime: 'javascript', src }, policies: ALLOW_ALL },
  });
  return id(n);
}

/** Every call of a tree, flattened (depth first). */
function calls(node: any): any[] {
  return [node, ...(node.children ?? []).flatMap(calls)];
}

const OUTER = `function run(event) {
  const account = graphql('query Q($id: UUID!) { account(id: $id) { code } }', { id: event.data.account });
  const three = cel('a + b', { a: 1, b: 2 });
  const inner = tools.inner({ n: 4 });
  let code = null;
  try { graphql('mutation { postTransaction(input: {}) { transactionId } }', {}); } catch (e) { code = e.code; }
  const via = graphql('mutation($id: UUID!, $e: UUID!) { actions { invokeAction(id: $id, input: {executionId: $e, actionVersion: 1, input: {n: 5}}) { status output } } }',
    { id: event.data.inner, e: event.data.e2 });
  const nativeUnder = graphql('mutation($e: UUID!) { actions { invokeAction(name: "cel", input: {executionId: $e, input: {expression: "6 * 7"}}) { output } } }', { e: event.data.e3 });
  console.log('done');
  return { code: account.account.code, three, inner, failed: code, via: via.actions.invokeAction.output, native: nativeUnder.actions.invokeAction.output, last: cel('x', { x: 'é"\\\\' }) };
}`;
const INNER = `function run(event) { return { v: cel('n * 10', { n: event.data.n }), q: graphql('{ journals(first: 1) { nodes { code } } }').journals.nodes[0].code }; }`;

/** Whole trees in one read cost more than a client's default budget. */
const LIMITS = { limits: { queryCostMax: 100_000_000 } };

async function fixture() {
  const engine = await newEngine(LIMITS);
  createAccount(engine, 1);
  tool(engine, 11, 'inner', INNER);
  ok(engine, CREATE, {
    id: id(10),
    input: {
      name: 'outer',
      kind: 'tool',
      config: { runtime: 'javascript', src: OUTER },
      policies: ALLOW_ALL,
      tools: [{ name: 'inner', version: 1 }],
    },
  });
  return engine;
}

describe('compact call records', () => {
  it('a stored tree reads exactly as the call returned it: every field, every level, each call by its own id', async () => {
    const engine = await fixture();
    const ran = ok(engine, INVOKE, {
      id: id(10),
      e: id(500),
      input: { account: id(1), inner: id(11), e2: id(501), e3: id(502) },
    }).actions.invokeAction;
    expect(ran.status).toBe('SUCCEEDED');
    expect(ran.output).toEqual({
      code: 'ACC-1',
      three: 3,
      inner: { v: 40, q: 'DEFAULT' },
      failed: 'GRAPHQL_VALIDATION_FAILED',
      via: { v: 50, q: 'DEFAULT' },
      native: 42,
      last: 'é"\\',
    });
    const all = calls(ran);
    expect(all.map((c) => `${c.kind}:${c.actionName}:${c.status}`)).toEqual([
      'TOOL:outer:SUCCEEDED',
      'GRAPHQL:graphql:SUCCEEDED',
      'CEL:cel:SUCCEEDED',
      'TOOL:inner:SUCCEEDED',
      'CEL:cel:SUCCEEDED',
      'GRAPHQL:graphql:SUCCEEDED',
      'GRAPHQL:graphql:FAILED',
      'GRAPHQL:graphql:SUCCEEDED',
      'TOOL:inner:SUCCEEDED',
      'CEL:cel:SUCCEEDED',
      'GRAPHQL:graphql:SUCCEEDED',
      'GRAPHQL:graphql:SUCCEEDED',
      'CEL:cel:SUCCEEDED',
      'CEL:cel:SUCCEEDED',
    ]);
    // As stored: the same tree, field for field.
    const stored = ok(engine, READ, { e: id(500) }).actions.execution;
    expect(stored).toEqual(ran);
    // Each call read by its own id is the node in the tree (its children included).
    for (const call of all) {
      const one = ok(engine, READ, { e: call.executionId }).actions.execution;
      expect(one).toEqual(call);
    }
    // Rows only for what is not a program's own native call: outer, inner (twice), and the cel
    // call invoked by name with its own executionId (it has a fingerprint: it can be replayed).
    expect(count(engine, 'executions')).toBe(4);
    expect(count(engine, 'call_ids')).toBe(10);
    // The query texts are stored once each, by sha256.
    expect(count(engine, 'documents')).toBe(5);
    ok(engine, INVOKE, { id: id(10), e: id(510), input: { account: id(1), inner: id(11), e2: id(511), e3: id(512) } });
    expect(count(engine, 'documents')).toBe(5);
    engine.close();
  });

  it('a compact call’s id is taken: invoking or starting with it is a conflict, as before', async () => {
    const engine = await fixture();
    const ran = ok(engine, INVOKE, {
      id: id(10),
      e: id(520),
      input: { account: id(1), inner: id(11), e2: id(521), e3: id(522) },
    }).actions.invokeAction;
    const celChild = ran.children[1];
    expect(celChild.kind).toBe('CEL');
    const again = fails(
      engine,
      `mutation($e: UUID!) { actions { invokeAction(name: "cel", input: {executionId: $e, input: {expression: "1"}}) { status } } }`,
      { e: celChild.executionId },
    );
    expect(again.code).toBe('EXECUTION_ID_CONFLICT');
    const started = fails(
      engine,
      `mutation($e: UUID!) { actions { startAction(name: "inner", input: {executionId: $e, input: {n: 1}}) { status } } }`,
      { e: celChild.executionId },
    );
    expect(started.code).toBe('EXECUTION_ID_CONFLICT');
    // The native call invoked with its own id replays.
    const replay = ok(
      engine,
      `mutation($e: UUID!) { actions { invokeAction(name: "cel", input: {executionId: $e, input: {expression: "6 * 7"}}) { status output } } }`,
      { e: id(522) },
    );
    expect(replay.actions.invokeAction).toEqual({ status: 'SUCCEEDED', output: 42 });
    engine.close();
  });

  it('a request that rolls back leaves no record of its calls', async () => {
    const engine = await fixture();
    const before = [count(engine, 'executions'), count(engine, 'call_ids'), count(engine, 'documents')];
    const result = engine.graphql(
      `mutation($e: UUID!, $input: JSON) {
      a: actions { invokeAction(id: "${id(10)}", input: {executionId: $e, actionVersion: 1, input: $input}) { status } }
      b: postTransaction(input: {transactionId: "${id(9)}", tranCode: "NOPE"}) { transactionId } }`,
      { e: id(530), input: { account: id(1), inner: id(11), e2: id(531), e3: id(532) } },
    );
    expect(result.errors).toBeDefined();
    expect([count(engine, 'executions'), count(engine, 'call_ids'), count(engine, 'documents')]).toEqual(before);
    expect(engine.graphql(READ, { e: id(530) }).errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    engine.close();
  });

  it('a started execution’s calls are appended to its row, attempt by attempt', async () => {
    const engine = await fixture();
    const worker = engine.createWorker({ owner: 'test' });
    ok(
      engine,
      `mutation($input: JSON) { actions { startAction(name: "inner", input: {executionId: "${id(540)}", input: $input}) { status } } }`,
      { input: { n: 2 } },
    );
    expect(worker.drain()).toBe(1);
    const stored = ok(engine, READ, { e: id(540) }).actions.execution;
    expect(stored.status).toBe('SUCCEEDED');
    expect(stored.output).toEqual({ v: 20, q: 'DEFAULT' });
    expect(
      stored.children.map((c: any) => [
        c.kind,
        c.status,
        c.output,
        c.parent.executionId,
        c.attempt,
        c.caller.principal,
      ]),
    ).toEqual([
      ['CEL', 'SUCCEEDED', 20, id(540), 1, stored.caller.principal],
      ['GRAPHQL', 'SUCCEEDED', { journals: { nodes: [{ code: 'DEFAULT' }] } }, id(540), 1, stored.caller.principal],
    ]);
    expect(stored.children[0].input).toEqual({ expression: 'n * 10', bindings: { n: 2 } });
    expect(stored.children[1].input).toEqual({ query: '{ journals(first: 1) { nodes { code } } }', variables: {} });
    for (const child of stored.children)
      expect(ok(engine, READ, { e: child.executionId }).actions.execution).toEqual(child);
    expect(count(engine, 'executions')).toBe(1);

    // Two attempts: the first one's calls are kept (its writes undone), under attempt 1.
    ok(engine, CREATE, {
      id: id(12),
      input: {
        name: 'flaky',
        kind: 'tool',
        policies: ALLOW_ALL,
        execution: { maxAttempts: 2, backoff: { initialMs: 1, maxMs: 1 } },
        config: {
          runtime: 'javascript',
          src: `function run(event) { const v = cel('a * 2', { a: event.execution.attempt }); if (event.execution.attempt === 1) fail('again'); return { v }; }`,
        },
      },
    });
    ok(
      engine,
      `mutation { actions { startAction(name: "flaky", input: {executionId: "${id(541)}", input: {}}) { status } } }`,
    );
    let attempts = worker.drain();
    await new Promise((resolve) => setTimeout(resolve, 20));
    attempts += worker.drain();
    expect(attempts).toBe(2);
    const flaky = ok(engine, READ, { e: id(541) }).actions.execution;
    expect([flaky.status, flaky.attempt, flaky.output]).toEqual(['SUCCEEDED', 2, { v: 4 }]);
    expect(flaky.children.map((c: any) => [c.kind, c.attempt, c.output, c.input])).toEqual([
      ['CEL', 1, 2, { expression: 'a * 2', bindings: { a: 1 } }],
      ['CEL', 2, 4, { expression: 'a * 2', bindings: { a: 2 } }],
    ]);
    for (const child of flaky.children)
      expect(ok(engine, READ, { e: child.executionId }).actions.execution).toEqual(child);
    engine.close();
  });

  it('migration 15 turns the native rows of an older database into entries that read the same', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'tally-calls-')), 'calls.db');
    const engine = await newEngine({ path });
    engine.close();
    // The database as version 14 wrote it: one row per call.
    const raw = new Database(path);
    raw.exec(`${UNDO_MIGRATIONS_AFTER_15} DROP TABLE call_ids; DROP TABLE documents; ALTER TABLE executions DROP COLUMN calls;
      CREATE INDEX executions_by_created ON executions (created) WHERE parent_id IS NULL; PRAGMA user_version = 14;`);
    const insert =
      raw.prepare(`INSERT INTO executions (execution_id, action_id, action_name, action_version, kind, status, input, input_fingerprint, output, error,
      principal, parent_id, root_id, depth, attempt, started, finished, logs, created, modified) VALUES
      (@id, @actionId, @name, @version, @kind, @status, @input, @fp, @output, @error, 'p1', @parent, '${id(1)}', @depth, 1, @t, @t, NULL, @t, @t)`);
    const row = (n: number, parent: number | null, kind: string, extra: Record<string, unknown> = {}) =>
      insert.run({
        id: id(n),
        actionId: kind === 'TOOL' ? id(90) : null,
        name: kind === 'TOOL' ? 't' : kind.toLowerCase(),
        version: kind === 'TOOL' ? 1 : null,
        kind,
        status: 'SUCCEEDED',
        input: '{}',
        fp: null,
        output: null,
        error: null,
        parent: parent === null ? null : id(parent),
        depth: n === 1 ? 0 : 1,
        t: `2026-01-01T00:00:0${n}.000Z`,
        ...extra,
      });
    row(1, null, 'TOOL', { fp: 'f', output: '{"ok":true}', depth: 0 });
    row(2, 1, 'GRAPHQL', { input: '{"query":"{ x }","variables":{"v":1}}', output: '{"x":1}', depth: 0 });
    row(3, 1, 'TOOL', { input: '{"n":1}', output: '{"v":10}' });
    row(4, 3, 'CEL', { input: '{"expression":"n*10","bindings":{"n":1}}', output: '10' });
    row(5, 1, 'GRAPHQL', {
      status: 'FAILED',
      input: '{"query":"mutation { y }"}',
      error: '{"code":"BAD_REQUEST","message":"no y"}',
      depth: 0,
    });
    row(6, 5, 'TOOL', { input: '{"n":2}', output: '{"v":20}' });
    row(7, 5, 'CEL', { input: '{"expression":"1"}', output: '1', depth: 0 });
    row(8, 1, 'CEL', { input: '{"expression":"2"}', output: '2', depth: 0 });
    raw.close();

    const migrated = await newEngine({ path, ...LIMITS });
    expect(count(migrated, 'executions')).toBe(3);
    expect(count(migrated, 'call_ids')).toBe(5);
    const tree = ok(migrated, READ, { e: id(1) }).actions.execution;
    const shape = (c: any): unknown => [
      c.executionId.slice(-2),
      c.kind,
      c.status,
      c.input,
      c.output,
      c.error?.code ?? null,
      c.parent?.executionId.slice(-2) ?? null,
      c.depth ?? c.caller.principal,
      c.created,
      c.children.map(shape),
    ];
    expect(shape(tree)).toEqual([
      '01',
      'TOOL',
      'SUCCEEDED',
      {},
      { ok: true },
      null,
      null,
      'p1',
      '2026-01-01T00:00:01.000Z',
      [
        [
          '02',
          'GRAPHQL',
          'SUCCEEDED',
          { query: '{ x }', variables: { v: 1 } },
          { x: 1 },
          null,
          '01',
          'p1',
          '2026-01-01T00:00:02.000Z',
          [],
        ],
        [
          '03',
          'TOOL',
          'SUCCEEDED',
          { n: 1 },
          { v: 10 },
          null,
          '01',
          'p1',
          '2026-01-01T00:00:03.000Z',
          [
            [
              '04',
              'CEL',
              'SUCCEEDED',
              { expression: 'n*10', bindings: { n: 1 } },
              10,
              null,
              '03',
              'p1',
              '2026-01-01T00:00:04.000Z',
              [],
            ],
          ],
        ],
        [
          '05',
          'GRAPHQL',
          'FAILED',
          { query: 'mutation { y }' },
          null,
          'BAD_REQUEST',
          '01',
          'p1',
          '2026-01-01T00:00:05.000Z',
          [
            ['06', 'TOOL', 'SUCCEEDED', { n: 2 }, { v: 20 }, null, '05', 'p1', '2026-01-01T00:00:06.000Z', []],
            ['07', 'CEL', 'SUCCEEDED', { expression: '1' }, 1, null, '05', 'p1', '2026-01-01T00:00:07.000Z', []],
          ],
        ],
        ['08', 'CEL', 'SUCCEEDED', { expression: '2' }, 2, null, '01', 'p1', '2026-01-01T00:00:08.000Z', []],
      ],
    ]);
    for (const n of [2, 4, 5, 7, 8]) {
      const one = ok(
        migrated,
        `query($e: UUID!) { actions { execution(executionId: $e) { executionId kind attempt invocation { started finished durationMs } } } }`,
        { e: id(n) },
      ).actions.execution;
      expect(one).toEqual({
        executionId: id(n),
        kind: n === 2 || n === 5 ? 'GRAPHQL' : 'CEL',
        attempt: 1,
        invocation: { started: `2026-01-01T00:00:0${n}.000Z`, finished: `2026-01-01T00:00:0${n}.000Z`, durationMs: 0 },
      });
    }
    migrated.close();
  });
});

/** The executions reads, each through an index (see test/storage/statements.plans.test.ts). */
const WHOLE_TABLE: Record<string, string> = {
  // Counts an operator's dashboard asks for: every FAILED top-level execution, and the queue's QUEUED ones.
  failedCount:
    'a count of every FAILED top-level execution needs them all (no index by a finished status: a finished call pays for none)',
  activeTriggers: 'the trigger list is small and read whole, then cached',
  // Left as it was (a metrics gauge, read per scrape): executions_due does not serve status = 'QUEUED' alone.
  queueStats: 'counts every QUEUED execution; a known scan, read by /metrics',
};

function statementsOf(group: Record<string, unknown>, prefix: string): Array<[string, Statement]> {
  const out: Array<[string, Statement]> = [];
  for (const [name, value] of Object.entries(group)) {
    if (value && typeof value === 'object' && 'source' in value && 'reader' in value)
      out.push([`${prefix}${name}`, value as Statement]);
    else if (value && typeof value === 'object' && !(value instanceof Map))
      out.push(...statementsOf(value as Record<string, unknown>, `${prefix}${name}.`));
  }
  return out;
}

describe('executions query plans', () => {
  // SQLite's query plans (EXPLAIN QUERY PLAN); PostgreSQL plans its own.
  it.skipIf(ON_POSTGRES)(
    'every read of executions, call_ids and documents uses an index, and every executions index serves a read',
    async () => {
      const engine = await newEngine();
      const st = actionStatements(engine.db);
      // The listing statements are made per filter: make each.
      for (const actionId of [null, id(1)])
        for (const status of [null, 'FAILED'])
          for (const since of [null, '2026'])
            for (const newest of [false, true]) st.executionsWhere({ actionId, status, since }, 0, 1, newest);
      const groups = { st, queue: queueStatements(engine.db), sessions: sessionStatements(engine.db) };
      const statements = statementsOf(groups as unknown as Record<string, unknown>, '');
      // The prepared listing statements live in a closure: read their plans from the same SQL.
      const scans: string[] = [];
      const used = new Set<string>();
      let checked = 0;
      const plan = (name: string, source: string) => {
        const positional = (source.match(/\?/g) ?? []).length;
        const named = [...new Set(source.match(/[@:$][A-Za-z_]\w*/g) ?? [])];
        const explain = engine.db.prepare(`EXPLAIN QUERY PLAN ${source}`);
        const rows = (
          named.length
            ? explain.all(Object.fromEntries(named.map((n) => [n.slice(1), null])))
            : explain.all(...new Array(positional).fill(null))
        ) as Array<{ detail: string }>;
        checked++;
        for (const { detail } of rows) {
          for (const m of detail.matchAll(/USING (?:COVERING )?INDEX (\w+)/g)) used.add(m[1]!);
          if (/^SCAN (executions|call_ids|documents)\b(?! USING)/.test(detail) && !WHOLE_TABLE[name.split('.').at(-1)!])
            scans.push(`${name}: ${detail}`);
        }
      };
      for (const [name, statement] of statements) {
        const source = statement.source.trim();
        if (/^(SELECT|WITH)/i.test(source) && /executions|call_ids|documents/.test(source)) plan(name, source);
      }
      for (const actionId of [null, 'a'])
        for (const status of [null, 's'])
          for (const since of [null, 'c'])
            for (const newest of [false, true]) {
              const conditions = [actionId === null ? 'parent_id IS NULL' : 'action_id = @actionId'];
              if (status !== null) conditions.push('status = @status');
              if (since !== null) conditions.push('created >= @since');
              plan(
                `executionsWhere(${conditions.join(' AND ')})`,
                `SELECT * FROM executions WHERE ${conditions.join(' AND ')} AND ${newest ? 'seq < @after ORDER BY seq DESC' : 'seq > @after ORDER BY seq'} LIMIT @limit`,
              );
            }
      expect(checked).toBeGreaterThan(20);
      expect(scans).toEqual([]);
      const indexes = (
        engine.db
          .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'executions' AND sql IS NOT NULL",
          )
          .pluck()
          .all() as string[]
      ).sort();
      expect(indexes).toEqual([
        'executions_active_by_status',
        'executions_by_action',
        'executions_by_parent',
        'executions_by_session',
        'executions_due',
      ]);
      expect(indexes.filter((name) => !used.has(name))).toEqual([]);
      engine.close();
    },
  );
});
