import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import type { FormattedResult } from '../../src/graphql/executor.js';
import { createAccount, createTransferCode, postTransfers } from '../helpers/ledger.js';
import { id, newEngine, ok } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

/**
 * No request, from any valid key, holds the process for long (hostile review F10): a tool runs at
 * most toolTimeoutMsMax, a whole request at most requestDeadlineMs, whatever the tools and rows in
 * it cost. The engine is synchronous, so this is what keeps another client's read under a second.
 */

const ALL = [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'] }];
const CREATE =
  'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }';

/** Accounts 1-3 and `postings` transfers between them, 100 per request. */
function ledger(engine: Engine, postings: number): void {
  for (let a = 1; a <= 3; a++) createAccount(engine, a);
  createTransferCode(engine);
  postTransfers(engine, postings);
}

/** Under cost limits (69,000 of 100,000) yet a row lookup per entry: the deadline is what stops it. */
const HEAVY_READ =
  '{ accounts(first: 3) { nodes { entries(first: 1000) { nodes { transaction { description entries(first: 5) { nodes { units account { code } } } } } } } } }';

describe('requestDeadlineMs bounds a whole request, tools and resolvers alike', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tally-deadline-'));
  const path = join(dir, 'ledger.db');
  /** A ledger of 3,000 postings, written once with the default deadline, opened with a 20 ms one. */
  let built = false;
  async function tightEngine(): Promise<Engine> {
    if (!built) {
      const setup = await newEngine({ path, checkpointIntervalMs: 0 });
      ledger(setup, 3000);
      setup.close();
      built = true;
    }
    return newEngine({ path, checkpointIntervalMs: 0, limits: { requestDeadlineMs: 20 } });
  }
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('a read under the cost limit that takes longer than the deadline fails with LIMIT_EXCEEDED and the deadline in details', async () => {
    const engine = await tightEngine();
    const result = engine.graphql(HEAVY_READ);
    expect(result.data ?? null).toBeNull();
    expect(result.errors).toHaveLength(1);
    expect(result.errors![0]!.extensions).toMatchObject({ code: 'LIMIT_EXCEEDED', details: { requestDeadlineMs: 20 } });
    expect(result.errors![0]!.message).toMatch(/^the request ran past requestDeadlineMs \(20 ms\) at \w+\.\w+$/);
    expect(result.errors![0]!.extensions!.hint).toContain('smaller first');
    // With room, the same read answers: the deadline is what stopped it. (Room is 30 s, not the default:
    // how long the read takes is the machine's business, and a busy CI box once took 750 ms over it.)
    const roomy = await newEngine({ limits: { requestDeadlineMs: 30_000 } });
    ledger(roomy, 300);
    expect(roomy.graphql(HEAVY_READ).errors).toBeUndefined();
    engine.close();
    roomy.close();
  });

  it('CEL stops at it too: a page whose policy assertion runs per row fails whole, never answers with rows silently hidden', async () => {
    const engine = await tightEngine();
    // ~40,000 units an entry: within celCostMax each time, 3,000 entries would take seconds.
    const heavy = `[${Array.from({ length: 200 }, (_, i) => i).join(',')}]`;
    const assertion = `${heavy}.all(a, ${heavy}.all(b, a + b >= 0)) && context.document.units != ''`;
    const key = ok(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', {
      i: {
        principal: 'auditor',
        name: 'auditor',
        policies: [
          { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
          {
            effect: 'DENY',
            actions: ['SELECT'],
            resources: ['financial.Entry'],
            assertions: { heavy: `!(${assertion})` },
          },
        ],
      },
    }).auth.createClient.apiKey;
    const result = engine.graphql(`{ account(id: "${id(1)}") { entries(first: 1000) { nodes { units } } } }`, null, {
      apiKey: key,
    });
    expect(result.data ?? null).toBeNull();
    expect(result.errors).toHaveLength(1);
    expect(result.errors![0]!.extensions?.code).toBe('LIMIT_EXCEEDED');
    expect(result.errors![0]!.message).toMatch(/ran past (the request's deadline|requestDeadlineMs)/);
    engine.close();
  });

  it('every CEL evaluation inside a request stops once its deadline has passed, and says so once', async () => {
    const { Cel } = await import('../../src/cel/cel.js');
    const { DEFAULT_LIMITS } = await import('../../src/limits.js');
    const cel = new Cel({ now: () => new Date() }, DEFAULT_LIMITS);
    const list = `[${Array.from({ length: 300 }, (_, i) => i).join(',')}]`;
    const slow = `${list}.all(a, ${list}.all(b, a + b >= 0))`;
    expect(cel.evaluate(slow)).toBe(true);
    const run = cel.withDeadline(Date.now() + 2, () => {
      const outcomes: string[] = [];
      for (let i = 0; i < 50; i++) {
        try {
          cel.evaluate(slow);
          outcomes.push('ran');
        } catch (error) {
          outcomes.push((error as { code: string }).code);
        }
      }
      return outcomes;
    });
    expect(run.value.at(-1)).toBe('LIMIT_EXCEEDED');
    expect(run.overran?.message).toContain("ran past the request's deadline (requestDeadlineMs)");
    // Outside the request, the same expression runs again.
    expect(cel.evaluate(slow)).toBe(true);
  });

  it('a mutation that runs past it rolls back whole', async () => {
    const engine = await tightEngine();
    const result = engine.graphql(
      `mutation { createAccount(input: {accountId: "${id(9)}", code: "LATE", name: "late"}) { accountId } queries { ${HEAVY_READ.slice(1, -1)} } }`,
    );
    expect(result.errors?.[0]?.extensions?.code).toBe('LIMIT_EXCEEDED');
    expect(engine.graphql(`{ account(id: "${id(9)}") { code } }`).errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    engine.close();
  });
});

describe('over HTTP: a tool at its ceiling does not hold up another client (review case 10)', () => {
  const KEY = 'tly_server-deadline-admin-key';
  let running: Awaited<ReturnType<typeof startServer>>;
  let hostile: string;
  beforeAll(async () => {
    running = await startServer(KEY);
    ledger(running.engine, 300);
    hostile = ok(running.engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', {
      i: {
        principal: 'hostile',
        name: 'hostile',
        policies: [
          { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
          { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*'] },
        ],
      },
    }).auth.createClient.apiKey;
    const max = running.engine.limits.toolTimeoutMsMax;
    ok(running.engine, CREATE, {
      id: id(1),
      input: {
        name: 'spin',
        kind: 'tool',
        config: { runtime: 'javascript', src: 'function run() { for (;;) {} }' },
        policies: ALL,
        execution: { timeoutMs: max },
      },
    });
    ok(running.engine, CREATE, {
      id: id(2),
      input: {
        name: 'busy',
        kind: 'tool',
        config: {
          runtime: 'javascript',
          src: 'function run() { const end = Date.now() + 200; while (Date.now() < end) {} return 1; }',
        },
        policies: ALL,
      },
    });
  });
  afterAll(() => running.stop());

  const post = async (key: string, query: string) => {
    const res = await fetch(running.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ query }),
    });
    return (await res.json()) as FormattedResult;
  };

  /** While `attack` is being answered, an admin read on its own connection answers within a second. */
  async function whileAttacking(query: string): Promise<FormattedResult> {
    const attack = post(hostile, query);
    const started = performance.now();
    const probe = await post(KEY, `{ account(id: "${id(1)}") { code } }`);
    const elapsedMs = performance.now() - started;
    expect(probe).toEqual({ data: { account: { code: 'ACC-1' } } });
    expect(elapsedMs, `admin read took ${Math.round(elapsedMs)} ms`).toBeLessThan(1000);
    return attack;
  }

  it('spin at toolTimeoutMsMax, many tools in one request, and a heavy read: each ends with a clear code and the probe answers in under a second', async () => {
    let n = 0;
    const invoke = (name: string) =>
      `i${n}: invokeAction(name: "${name}", input: {executionId: "${id(500 + n++)}", actionVersion: 1, input: {}}) { status }`;
    for (let round = 0; round < 3; round++) {
      const spun = await whileAttacking(`mutation { actions { ${invoke('spin')} } }`);
      expect(spun.errors?.[0]?.extensions).toMatchObject({ code: 'TIMEOUT' });
      const many = await whileAttacking(
        `mutation { actions { ${[1, 2, 3, 4, 5, 6].map(() => invoke('busy')).join(' ')} } }`,
      );
      expect(many.errors?.[0]?.extensions).toMatchObject({ code: 'TIMEOUT' });
      expect(many.errors?.[0]?.message).toContain('requestDeadlineMs');
      const read = await whileAttacking(HEAVY_READ);
      expect(read.errors === undefined || read.errors[0]!.extensions!.code === 'LIMIT_EXCEEDED').toBe(true);
    }
    expect((await post(KEY, '{ journal { name } }')).data).toEqual({ journal: { name: 'Default' } });
  });
});
