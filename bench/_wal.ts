/** WAL frames a commit writes, by table and index: NODE_ENV=production tsx bench/_wal.ts */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { addLedgerFeatures, benchDir, ok, pair, POST, setupEngine, uuid } from './common.js';
const { dir } = benchDir();
for (const mode of ['plain', 'sets', 'calc']) {
  const path = join(dir, `${mode}.db`);
  const e = await setupEngine(path, { checkpointIntervalMs: 0, limits: { walAutocheckpointPages: 1_000_000 } });
  addLedgerFeatures(e, mode === 'plain' ? [] : mode === 'sets' ? ['sets'] : ['sets', 'control', 'calc']);
  const post = (n: number) => {
    const [from, to] = pair(n);
    ok(e, POST, {
      input: {
        transactionId: uuid(n),
        tranCode: 'TRANSFER',
        params: { from, to, amount: `${10 + (n % 5000)}.${n % 100}` },
      },
    });
  };
  for (let n = 1; n < 5000; n++) post(n);
  const N = 40;
  const start = statSync(`${path}-wal`).size;
  for (let n = 5000; n < 5000 + N; n++) post(n);
  const size = statSync(`${path}-wal`).size;
  if (size <= start) {
    console.log(mode, 'the log restarted during the run: run again');
    continue;
  }
  const wal = readFileSync(`${path}-wal`).subarray(start - 32);
  const pages = new Map<number, number>();
  for (let off = 32; off + 24 <= wal.length; off += 4096 + 24) {
    const pg = wal.readUInt32BE(off);
    pages.set(pg, (pages.get(pg) ?? 0) + 1);
  }
  const names = new Map<number, string>();
  for (const r of e.db.prepare('SELECT name, pageno FROM dbstat').all() as Array<{ name: string; pageno: number }>)
    names.set(r.pageno, r.name);
  const byName = new Map<string, number>();
  for (const [pg, c] of pages) {
    const n = names.get(pg) ?? `page ${pg}`;
    byName.set(n, (byName.get(n) ?? 0) + c);
  }
  console.log(
    [...byName]
      .sort((a, b) => b[1] - a[1])
      .map(([n, c]) => `${n} ${(c / N).toFixed(2)}`)
      .join('\n'),
  );
  console.log(mode, 'frames per commit', ((size - start) / 4120 / N).toFixed(2));
  e.close();
}
