import type { Statement } from 'better-sqlite3';
import type { Db } from './database.js';
import { mapDriverError } from './driver-errors.js';
import type { CacheEpoch } from './record-cache.js';

/**
 * One physical SQLite transaction at a time per connection, with savepoints nested inside it.
 * Everything is synchronous: a transaction opens, runs `fn` and closes within one turn of the
 * event loop, so no other request can interleave with it.
 */
export class TransactionManager {
  private readonly begin;
  private readonly beginImmediate;
  private readonly commit;
  private readonly rollback;
  private readonly dataVersion;
  private lastDataVersion = -1;
  private savepointDepth = 0;
  /** What to do once the open transaction commits (see afterCommit); dropped when it rolls back. */
  private committed: Array<() => void> = [];
  /** Counts data writes (see watchUndoneWrites); told when a rollback undid some. */
  private writes: (() => number) | null = null;
  private onUndoneWrites: (() => void) | null = null;
  private writesAtBegin = 0;
  /** SAVEPOINT / RELEASE / ROLLBACK TO statements by depth, prepared once. */
  private readonly savepointStatements: Array<{ open: Statement<[]>; release: Statement<[]>; rollbackTo: Statement<[]> }> = [];

  constructor(
    private readonly db: Db,
    private readonly epoch?: CacheEpoch,
  ) {
    this.dataVersion = db.prepare<[], number>('PRAGMA data_version').pluck();
    this.begin = db.prepare('BEGIN');
    this.beginImmediate = db.prepare('BEGIN IMMEDIATE');
    this.commit = db.prepare('COMMIT');
    this.rollback = db.prepare('ROLLBACK');
  }

  /**
   * Call `undone` whenever a rollback (of a transaction or a savepoint) undid data writes, as
   * `writes` counts them: what was computed from those writes (a cached result) must go.
   */
  watchUndoneWrites(writes: () => number, undone: () => void): void {
    this.writes = writes;
    this.onUndoneWrites = undone;
  }

  get inTransaction(): boolean {
    return this.db.inTransaction;
  }

  /**
   * Run `fn` after the open transaction commits, or now when none is open. Work rolled back (the
   * transaction, or the savepoint open when `fn` was registered) never calls it: a log line about a
   * change is written only for a change that happened.
   */
  afterCommit(fn: () => void): void {
    if (this.db.inTransaction) this.committed.push(fn);
    else fn();
  }

  /**
   * Run `fn` in a transaction. Writes take the write lock up front (BEGIN IMMEDIATE): a deferred
   * transaction that reads and then writes gets SQLITE_BUSY without waiting for the busy timeout.
   * `fn` returns whether to commit; throwing rolls back.
   */
  run<T>(mode: 'read' | 'write', fn: () => { value: T; commit: boolean }): T {
    if (this.db.inTransaction) throw new Error('bug: a transaction is already open on this connection');
    try {
      (mode === 'write' ? this.beginImmediate : this.begin).run();
      this.writesAtBegin = this.writes?.() ?? 0;
      if (this.epoch) {
        // Another connection committed since our last transaction: cached rows may be stale.
        const version = this.dataVersion.get() as number;
        if (version !== this.lastDataVersion) {
          this.lastDataVersion = version;
          this.epoch.bump();
        }
        this.epoch.active = true;
      }
    } catch (error) {
      this.rollbackQuietly();
      throw mapDriverError(error);
    }
    try {
      let outcome: { value: T; commit: boolean };
      try {
        outcome = fn();
      } catch (error) {
        this.rollbackQuietly();
        throw mapDriverError(error);
      }
      if (!outcome.commit) {
        this.rollbackQuietly();
        return outcome.value;
      }
      try {
        this.commit.run();
      } catch (error) {
        this.rollbackQuietly();
        throw mapDriverError(error);
      }
      this.runCommitted();
      return outcome.value;
    } finally {
      if (this.epoch) this.epoch.active = false;
    }
  }

  /**
   * Run `fn` under a SAVEPOINT inside the open transaction: released when it returns, rolled back
   * to (and released) when it throws, so a failed call leaves no writes behind.
   */
  savepoint<T>(fn: () => T): T {
    if (!this.db.inTransaction) throw new Error('bug: savepoint outside a transaction');
    const depth = ++this.savepointDepth;
    const sp = this.statementsFor(depth);
    sp.open.run();
    const registered = this.committed.length;
    const writesBefore = this.writes?.() ?? 0;
    try {
      const value = fn();
      sp.release.run();
      return value;
    } catch (error) {
      if (this.db.inTransaction) {
        sp.rollbackTo.run();
        sp.release.run();
      }
      this.committed.length = Math.min(this.committed.length, registered);
      this.epoch?.bump();
      if (this.writes && this.writes() !== writesBefore) this.onUndoneWrites?.();
      throw error;
    } finally {
      this.savepointDepth--;
    }
  }

  private statementsFor(depth: number) {
    let sp = this.savepointStatements[depth];
    if (!sp) {
      const name = `sp${depth}`;
      sp = { open: this.db.prepare<[]>(`SAVEPOINT ${name}`), release: this.db.prepare<[]>(`RELEASE ${name}`), rollbackTo: this.db.prepare<[]>(`ROLLBACK TO ${name}`) };
      this.savepointStatements[depth] = sp;
    }
    return sp;
  }

  private runCommitted(): void {
    const callbacks = this.committed;
    this.committed = [];
    for (const fn of callbacks) fn();
  }

  private rollbackQuietly(): void {
    this.savepointDepth = 0;
    this.committed = [];
    this.epoch?.bump();
    const undid = this.db.inTransaction && this.writes !== null && this.writes() !== this.writesAtBegin;
    if (this.db.inTransaction) this.rollback.run();
    if (undid) this.onUndoneWrites?.();
  }
}
