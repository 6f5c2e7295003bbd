/**
 * Two source trees in one process, side by side: each tree's own modules (its bench/common.ts and
 * src/), one engine each, short interleaved rounds, the medians and the median of the per-round
 * ratio (the ratio of rounds run back to back is steadier on a noisy shared machine than the
 * ratio of two medians). For setting this commit beside an older one:
 *
 *   git worktree add /tmp/base 29237bd && ln -s "$PWD/node_modules" /tmp/base/node_modules
 *   TREES=/tmp/base:plain,$PWD:calc NODE_ENV=production npx tsx bench/trees.ts
 *
 * Each entry of TREES is `path:plain` (the TRANSFER posting alone), `path:calc` (with the sets,
 * the overdraft control and the calculation of bench:ledger; the tree must have addLedgerFeatures),
 * `path:invoke` (invokeAction of bench:invoke's transfer tool, whose program posts through graphql)
 * or `path:nested` (invokeAction of a tool calling transfer as tools.transfer()).
 * TREE_POSTS posts per round (500), TREE_ROUNDS rounds (30).
 */
import { join } from 'node:path';

const specs = (process.env.TREES ?? '').split(',').filter(Boolean);
if (specs.length < 2) throw new Error('TREES=path:plain|calc,path:plain|calc (two source trees and what each posts)');
const PER = Number(process.env.TREE_POSTS ?? 500);
const ROUNDS = Number(process.env.TREE_ROUNDS ?? 30);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

interface Side {
  name: string;
  post: (n: number) => void;
  wall: number[];
  cpu: number[];
}
const sides: Side[] = [];
for (const [i, spec] of specs.entries()) {
  const [tree, mode = 'plain'] = spec.split(':') as [string, string?];
  const common = await import(join(tree, 'bench/common.ts'));
  const engine = await common.setupEngine(join(common.benchDir().dir, `tree${i}.db`));
  if (mode === 'calc') {
    if (!common.addLedgerFeatures)
      throw new Error(`${tree} has no ledger features to add (addLedgerFeatures): post plain there`);
    common.addLedgerFeatures(engine, ['sets', 'control', 'calc']);
  } else if (mode === 'invoke' || mode === 'nested') {
    common.createTransferTool(engine, common.uuid(888_888));
    common.ok(
      engine,
      'mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }',
      {
        id: common.uuid(888_889),
        input: {
          name: 'pay',
          kind: 'tool',
          config: { runtime: 'javascript', src: 'function run(event) { return tools.transfer(event.data); }' },
          tools: [{ name: 'transfer', version: 1 }],
          policies: [
            { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['financial.*'] },
            { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] },
          ],
        },
      },
    );
  } else if (mode !== 'plain') throw new Error(`${spec}: the mode is plain, calc, invoke or nested`);
  const invoke = `mutation($e: UUID!, $input: JSON) { actions { invokeAction(id: "${common.uuid(mode === 'nested' ? 888_889 : 888_888)}", input: {executionId: $e, actionVersion: 1, input: $input}) { status } } }`;
  const post = (n: number) => {
    const [from, to] = common.pair(n);
    const amount = `${10 + (n % 5000)}.${n % 100}`;
    if (mode === 'invoke' || mode === 'nested') {
      const r = common.ok(engine, invoke, {
        e: common.uuid(n),
        input: { transaction_id: common.uuid(500_000_000 + n), from, to, amount },
      });
      if (r.actions.invokeAction.status !== 'SUCCEEDED') throw new Error(JSON.stringify(r));
      return;
    }
    common.ok(engine, common.POST, {
      input: { transactionId: common.uuid(n), tranCode: 'TRANSFER', params: { from, to, amount } },
    });
  };
  sides.push({ name: `${tree}:${mode}`, post, wall: [], cpu: [] });
}
let n = 1;
for (const side of sides) for (let i = 0; i < 3000; i++) side.post(n + i);
n += 3000;
for (let round = 0; round < ROUNDS; round++) {
  for (const side of round % 2 ? [...sides].reverse() : sides) {
    const t0 = process.hrtime.bigint();
    const c0 = process.cpuUsage();
    for (let i = 0; i < PER; i++) side.post(n + i);
    const cpu = process.cpuUsage(c0);
    side.wall.push(Number(process.hrtime.bigint() - t0) / 1e3 / PER);
    side.cpu.push((cpu.user + cpu.system) / PER);
  }
  n += PER;
}
for (const side of sides)
  console.log(
    `${side.name}: wall ${median(side.wall).toFixed(1)} µs, CPU ${median(side.cpu).toFixed(1)} µs a posting (median of ${ROUNDS} rounds of ${PER})`,
  );
const [first, ...rest] = sides;
for (const side of rest) {
  const ratio = (k: 'wall' | 'cpu') => median(side[k].map((v, i) => first![k][i]! / v)).toFixed(3);
  console.log(
    `${side.name} ÷ ${first!.name}, posts per second, median per-round ratio: wall ${ratio('wall')}, CPU ${ratio('cpu')}`,
  );
}
process.exit(0);
