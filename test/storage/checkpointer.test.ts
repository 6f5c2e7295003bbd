import { copyFileSync, existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import { id, newEngine, ok } from '../helpers/engine.js';
import { POST, twoAccountsAndTransfer } from '../helpers/ledger.js';

const PAGE = 4096;
const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function fileEngine(options: Parameters<typeof newEngine>[0]): Promise<{ engine: Engine; path: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'tally-ckpt-'));
  dirs.push(dir);
  const path = join(dir, 'tally.db');
  return { engine: await newEngine({ path, ...options }), path };
}

function postMany(engine: Engine, count: number, base = 0): void {
  for (let n = 0; n < count; n++) {
    ok(engine, POST, {
      input: {
        transactionId: id(100_000 + base + n),
        tranCode: 'TRANSFER',
        params: { from: id(1), to: id(2), amount: '1.25' },
      },
    });
  }
}

const size = (path: string) => statSync(path).size;

describe('WAL checkpoints', () => {
  it('the background thread copies committed pages into the database file while the writer does not', async () => {
    // The writer never checkpoints (walAutocheckpointPages 0): only the worker can grow the file.
    const { engine, path } = await fileEngine({ limits: { walAutocheckpointPages: 0 }, checkpointIntervalMs: 5 });
    twoAccountsAndTransfer(engine);
    const before = size(path);
    postMany(engine, 300);
    const deadline = Date.now() + 5000;
    while (size(path) <= before + 20 * PAGE && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(size(path)).toBeGreaterThan(before + 20 * PAGE);
    engine.close();
  });

  it('with the thread off and no automatic checkpoint, nothing reaches the database file (the control)', async () => {
    const { engine, path } = await fileEngine({ limits: { walAutocheckpointPages: 0 }, checkpointIntervalMs: 0 });
    twoAccountsAndTransfer(engine);
    const before = size(path);
    postMany(engine, 300);
    await new Promise((r) => setTimeout(r, 100));
    expect(size(path)).toBe(before);
    expect(size(`${path}-wal`)).toBeGreaterThan(300 * PAGE);
    engine.close();
  });

  it('walAutocheckpointPages bounds the log: the writer checkpoints and the log restarts', async () => {
    const { engine, path } = await fileEngine({ limits: { walAutocheckpointPages: 40 }, checkpointIntervalMs: 0 });
    twoAccountsAndTransfer(engine);
    postMany(engine, 300);
    // Each post appends a handful of pages; a restarted log never grows far past the bound.
    expect(size(`${path}-wal`)).toBeLessThan((40 + 20) * (PAGE + 24) + 32);
    ok(engine, `{ balance(accountId: "${id(2)}", currency: "USD") { settled { normalBalance { units } } } }`);
    engine.close();
  });

  it('close() leaves one complete database file: the log is checkpointed into it and removed', async () => {
    const { engine, path } = await fileEngine({ checkpointIntervalMs: 5 });
    twoAccountsAndTransfer(engine);
    postMany(engine, 400);
    engine.close();
    expect(existsSync(`${path}-wal`)).toBe(false);
    // The .db file alone (as a file backup would copy it) holds every transaction.
    const copy = `${path}.copy`;
    copyFileSync(path, copy);
    const db = new Database(copy, { readonly: true });
    expect((db.prepare('SELECT count(*) AS n FROM transactions').get() as { n: number }).n).toBe(400);
    db.close();
  });

  it('an engine closed at once opens nothing afterwards and reports nothing', async () => {
    const errors: unknown[] = [];
    const { engine, path } = await fileEngine({ checkpointIntervalMs: 5, logError: (e) => errors.push(e) });
    engine.close();
    rmSync(join(path, '..'), { recursive: true, force: true });
    await new Promise((r) => setTimeout(r, 200));
    expect(errors).toEqual([]);
  });

  it("without the thread the writer checkpoints at SQLite's 1000 pages, unless the limit is set", async () => {
    const off = await fileEngine({ checkpointIntervalMs: 0 });
    expect(off.engine.db.pragma('wal_autocheckpoint', { simple: true })).toBe(1000);
    off.engine.close();
    const set = await fileEngine({ checkpointIntervalMs: 0, limits: { walAutocheckpointPages: 300 } });
    expect(set.engine.db.pragma('wal_autocheckpoint', { simple: true })).toBe(300);
    set.engine.close();
    const on = await fileEngine({});
    expect(on.engine.db.pragma('wal_autocheckpoint', { simple: true })).toBe(10_000);
    on.engine.close();
  });
});
