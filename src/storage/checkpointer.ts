import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/**
 * Moves WAL checkpoints off the request thread.
 *
 * In WAL mode a commit appends pages to the log; a checkpoint copies them back into the database
 * file and syncs it. SQLite's automatic checkpoint runs inside the commit that crosses the
 * threshold, so one request in every ~100 pays two fsyncs and a thousand page copies: measured here
 * at 4–6 ms, ~60 µs of every commit on average and most of a small commit's cost.
 *
 * A worker thread with its own connection runs PASSIVE checkpoints every `intervalMs`. A PASSIVE
 * checkpoint never blocks the writer: the request thread keeps committing while pages are copied and
 * synced on the other core. The log restarts from its beginning at the first write after it has been
 * copied completely; under a sustained stream of writes that moment may not come, so the writer's
 * own automatic checkpoint stays on at a larger threshold (`walAutocheckpointPages`) as the bound
 * on the log's size. Durability is unchanged: `synchronous = NORMAL` in WAL mode never syncs on
 * commit; checkpoints sync before they overwrite the database file, whichever thread runs them.
 */
export class Checkpointer {
  private readonly worker: Worker;
  private failed: string | null = null;

  constructor(path: string, intervalMs: number, onError: (error: unknown) => void) {
    const driver = createRequire(import.meta.url).resolve('better-sqlite3');
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { driver, path, intervalMs } });
    this.worker.on('message', (message: { error?: string }) => {
      if (message.error && this.failed === null) {
        this.failed = message.error;
        onError(new Error(`background checkpoint failed: ${message.error}`));
      }
    });
    this.worker.on('error', onError);
    // The worker must not keep the process alive on its own.
    this.worker.unref();
  }

  /** Stop the thread: it closes its connection and exits; the writer's own checkpoints take over. */
  stop(): void {
    this.worker.postMessage('stop');
  }
}

/**
 * The worker: CommonJS, so it needs no loader. A checkpoint that finds the log busy (another
 * checkpoint running) returns at once and is tried again next tick; errors are reported once.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.path, { fileMustExist: true });
db.pragma('busy_timeout = 0');
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
let reported = false;
const timer = setInterval(() => {
  try {
    checkpoint.get();
  } catch (error) {
    if (error && error.code === 'SQLITE_BUSY') return;
    if (!reported) parentPort.postMessage({ error: String(error && error.message || error) });
    reported = true;
  }
}, workerData.intervalMs);
parentPort.on('message', (message) => {
  if (message !== 'stop') return;
  clearInterval(timer);
  db.close();
  parentPort.close();
});
`;
