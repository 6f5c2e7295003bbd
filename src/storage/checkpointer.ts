import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { Worker } from 'node:worker_threads';

/** How long close() waits for the thread to close its connection before going on without it. */
const STOP_WAIT_MS = 2000;

/** Flags shared with the thread: STOP asks it to stop; CLOSED says its connection is closed. */
const STOP = 0;
const CLOSED = 1;

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
 *
 * `stop()` waits until the thread has closed its connection, so that the engine's own connection,
 * closed next, is the last one: SQLite then checkpoints everything, syncs and removes the log, as
 * it would without this thread.
 */
export class Checkpointer {
  private readonly worker: Worker;
  private readonly flags = new Int32Array(new SharedArrayBuffer(8));
  private stopped = false;
  private reported = false;

  /** `onGone` is called if the thread ends by itself (the writer must then checkpoint alone). */
  constructor(path: string, intervalMs: number, onError: (error: unknown) => void, onGone: () => void = () => {}) {
    const driver = createRequire(import.meta.url).resolve('better-sqlite3');
    this.worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { driver, path: resolve(path), intervalMs, flags: this.flags.buffer },
    });
    const report = (error: unknown) => {
      if (this.stopped || this.reported) return;
      this.reported = true;
      onError(error);
    };
    this.worker.on('message', (message: { error?: string }) => {
      if (message.error) report(new Error(`background checkpoint failed: ${message.error}`));
    });
    this.worker.on('error', report);
    this.worker.on('exit', () => {
      if (!this.stopped) onGone();
    });
    // The thread must not keep the process alive on its own.
    this.worker.unref();
  }

  /** Stop the thread and wait (a bounded time) until its connection is closed. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    Atomics.store(this.flags, STOP, 1);
    this.worker.postMessage('stop');
    Atomics.wait(this.flags, CLOSED, 0, STOP_WAIT_MS);
  }
}

/**
 * The thread: CommonJS, so it needs no loader. A checkpoint that finds the log busy (another
 * checkpoint running) returns at once and is tried again next tick; other errors are reported.
 * It opens nothing once a stop was asked for, and says when its connection is closed.
 */
const WORKER_SOURCE = `
(function main() {
  const { parentPort, workerData } = require('node:worker_threads');
  const flags = new Int32Array(workerData.flags);
  const closed = () => { Atomics.store(flags, ${CLOSED}, 1); Atomics.notify(flags, ${CLOSED}); };
  if (Atomics.load(flags, ${STOP}) === 1) return closed();
  let db;
  try {
    const Database = require(workerData.driver);
    db = new Database(workerData.path, { fileMustExist: true });
    db.pragma('busy_timeout = 0');
  } catch (error) {
    parentPort.postMessage({ error: String(error && error.message || error) });
    return closed();
  }
  const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
  let timer = null;
  const stop = () => {
    if (timer === null) return;
    clearInterval(timer);
    timer = null;
    try { db.close(); } finally { closed(); parentPort.close(); }
  };
  timer = setInterval(() => {
    if (Atomics.load(flags, ${STOP}) === 1) return stop();
    try {
      checkpoint.get();
    } catch (error) {
      if (error && error.code === 'SQLITE_BUSY') return;
      // Anything else will not get better: say so and stop; the writer checkpoints alone.
      parentPort.postMessage({ error: String(error && error.message || error) });
      stop();
    }
  }, workerData.intervalMs);
  parentPort.on('message', (message) => { if (message === 'stop') stop(); });
})();
`;
