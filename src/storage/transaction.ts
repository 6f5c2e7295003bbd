import type { Statement } from 'better-sqlite3';
import type { Db } from './database.js';
import { isConflict, mapDriverError } from './driver-errors.js';
import { assert, EngineError } from '../errors.js';
import type { CacheEpoch } from './record-cache.js';

/** What became of one unit of a batch (see TransactionManager.runBatch). */
export type BatchOutcome<T> =
  | { status: 'committed' | 'rolled-back'; value: T }
  /** It threw (its savepoint rolled back), or the batch's COMMIT failed (`commitFailed`). */
  | { status: 'failed'; error: unknown; commitFailed?: boolean }
  /** The batch stopped before it (its size or time bound): run it in a next batch. */
  | { status: 'not-run' };

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
  private readonly savepointStatements: Array<{
    open: Statement<[]>;
    release: Statement<[]>;
    rollbackTo: Statement<[]>;
  }> = [];

  /**
   * How often a transaction that lost a race with another process runs again (PostgreSQL:
   * limits.transactionRetriesMax). SQLite has one writer, so it never loses one.
   */
  retriesMax = 0;
  /**
   * The time a transaction and its runs again may take together (limits.requestDeadlineMs): past it
   * a lost race is not run again. On PostgreSQL the engine answers on the HTTP thread, which these
   * runs hold.
   */
  retryBudgetMs = Number.POSITIVE_INFINITY;
  /** Transactions run again after a lost race, since this manager was made (for the metrics and tests). */
  retried = 0;
  /**
   * The most units a group may run now (runBatch), below the caller's own bound: halved when a
   * group loses a race (PostgreSQL, other processes writing: every unit of a lost group runs again,
   * so a big group wastes more), grown by one with each group that commits. Unbounded until a race is lost.
   */
  groupMax = Number.POSITIVE_INFINITY;

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

  /**
   * PRAGMA data_version as the last BEGIN read it. After a write transaction it is still current:
   * no other connection commits while this one holds the write lock.
   */
  get dataVersionAtBegin(): number {
    return this.lastDataVersion;
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
    assert(!this.db.inTransaction, 'bug: a transaction is already open on this connection');
    const began = performance.now();
    for (let attempt = 0; ; attempt++) {
      try {
        return this.runOnce(mode, fn);
      } catch (error) {
        if (!this.again(error, attempt, began)) throw this.conflictError(error, attempt);
      }
    }
  }

  /**
   * Whether a transaction that failed with `error` runs again: it lost a race with another
   * process's transaction (PostgreSQL's serialization failure or deadlock) and has retries left.
   * A transaction is a deterministic function of its input and the database (model calls run
   * outside transactions), and everything it did rolled back, so running it again is safe. The
   * first run again follows at once (the race's winner has committed); later ones wait a little
   * first (a random 0–2^attempt ms, at most 64), so the racers part. Not past retryBudgetMs since `began`.
   */
  private again(error: unknown, attempt: number, began: number): boolean {
    if (!isConflict(error) || attempt >= this.retriesMax || performance.now() - began >= this.retryBudgetMs)
      return false;
    this.retried++;
    const ms = attempt === 0 ? 0 : Math.random() * Math.min(64, 2 ** attempt);
    if (ms >= 1) Atomics.wait(SLEEP, 0, 0, ms);
    return true;
  }

  /** The error of a transaction that lost its last race: BUSY (retryable) naming the limit. */
  private conflictError(error: unknown, attempt: number): unknown {
    if (!isConflict(error) || this.retriesMax === 0) return error;
    const cause = mapDriverError(error);
    const budget = Number.isFinite(this.retryBudgetMs) ? `, within requestDeadlineMs ${this.retryBudgetMs}` : '';
    return new EngineError(
      'BUSY',
      `the transaction lost a race with other transactions ${attempt + 1} times and was not run again (transactionRetriesMax ${this.retriesMax}${budget}): ${(cause as Error).message}`,
      {
        hint: 'Retry the request later: other requests are writing the same records right now.',
        cause,
      },
    );
  }

  /** The conflict that keeps the open transaction from committing (see PgConnection.doomed), or null. */
  private doomed(): unknown {
    return (this.db as { doomed?: unknown }).doomed ?? null;
  }

  private runOnce<T>(mode: 'read' | 'write', fn: () => { value: T; commit: boolean }): T {
    try {
      (mode === 'write' ? this.beginImmediate : this.begin).run();
      this.writesAtBegin = this.writes?.() ?? 0;
      this.noteOtherWriters();
    } catch (error) {
      this.rollbackQuietly();
      throw mapDriverError(error);
    }
    try {
      let outcome: { value: T; commit: boolean };
      try {
        outcome = fn();
      } catch (error) {
        const doomed = this.doomed();
        this.rollbackQuietly();
        throw mapDriverError(doomed ?? error);
      }
      // A conflict the work caught and answered (an error in its result) is still a lost race.
      const doomed = this.doomed();
      if (doomed) {
        this.rollbackQuietly();
        throw mapDriverError(doomed);
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
   * Group commit: run `units` in one write transaction, each under a SAVEPOINT of its own, and
   * commit once. A unit that throws, or returns `commit: false`, rolls back to its savepoint and
   * nothing else; the others' writes stay. Units run in order, so each sees the writes of those
   * before it, exactly as if they had committed one by one. Before each unit after the first,
   * `more()` may stop the batch (its size or time bound): the units not run are reported as not
   * run, for the caller to run in a next batch. When the COMMIT itself fails, everything rolls back
   * and every unit that ran is reported with that error. What units registered with afterCommit
   * runs after the COMMIT, in order, only for the units that kept their writes.
   */
  runBatch<T>(
    units: ReadonlyArray<() => { value: T; commit: boolean }>,
    more: (ran: number) => boolean = () => true,
  ): BatchOutcome<T>[] {
    assert(!this.db.inTransaction, 'bug: a transaction is already open on this connection');
    const began = performance.now();
    const outcomes = this.runBatchOnce(units, (ran) => ran < this.groupMax && more(ran));
    // A lost race (PostgreSQL) fails the whole group, at its COMMIT or at the unit that met it.
    // Run the units it ran again, each in a transaction of its own (with its own retries): a
    // group run again whole would meet the same races, and redo every unit for one unit's race.
    const conflict = outcomes.find((o) => o.status === 'failed' && o.commitFailed && isConflict(o.error));
    if (!conflict || this.retriesMax === 0) {
      if (this.groupMax !== Number.POSITIVE_INFINITY && !outcomes.some((o) => o.status === 'failed' && o.commitFailed))
        this.groupMax++;
      return outcomes;
    }
    this.retried++;
    const ran = outcomes.filter((o) => o.status !== 'not-run').length;
    this.groupMax = Math.max(1, Math.floor(ran / 2));
    return outcomes.map((outcome, i): BatchOutcome<T> => {
      if (outcome.status !== 'failed' || !outcome.commitFailed) return outcome;
      // Past the budget the rest are answered BUSY (retryable) rather than run one by one.
      if (performance.now() - began >= this.retryBudgetMs)
        return { status: 'failed', error: this.conflictError(outcome.error, 0), commitFailed: true };
      try {
        let keep = false;
        const value = this.run('write', () => {
          const result = units[i]!();
          keep = result.commit;
          return result;
        });
        return { status: keep ? 'committed' : 'rolled-back', value };
      } catch (error) {
        return { status: 'failed', error };
      }
    });
  }

  private runBatchOnce<T>(
    units: ReadonlyArray<() => { value: T; commit: boolean }>,
    more: (ran: number) => boolean,
  ): BatchOutcome<T>[] {
    const outcomes: BatchOutcome<T>[] = units.map(() => ({ status: 'not-run' }));
    if (units.length === 0) return outcomes;
    try {
      this.beginImmediate.run();
      this.writesAtBegin = this.writes?.() ?? 0;
      this.noteOtherWriters();
    } catch (error) {
      this.rollbackQuietly();
      const mapped = mapDriverError(error);
      return outcomes.map(() => ({ status: 'failed', error: mapped }));
    }
    let ran = 0;
    try {
      for (const [i, unit] of units.entries()) {
        if (i > 0 && !more(ran)) break;
        ran++;
        outcomes[i] = this.batchUnit(unit);
      }
      this.commit.run();
    } catch (error) {
      // The COMMIT (or a SAVEPOINT statement) failed: nothing of the batch was written.
      this.rollbackQuietly();
      if (this.epoch) this.epoch.active = false;
      const mapped = mapDriverError(error);
      for (let i = 0; i < ran; i++) outcomes[i] = { status: 'failed', error: mapped, commitFailed: true };
      return outcomes;
    }
    try {
      this.runCommitted();
    } finally {
      if (this.epoch) this.epoch.active = false;
    }
    return outcomes;
  }

  /** One unit of a batch under savepoint sp1 (see runBatch). */
  private batchUnit<T>(unit: () => { value: T; commit: boolean }): BatchOutcome<T> {
    const depth = ++this.savepointDepth;
    const sp = this.statementsFor(depth);
    const registered = this.committed.length;
    const writesBefore = this.writes?.() ?? 0;
    sp.open.run();
    let outcome: BatchOutcome<T>;
    let keep = false;
    try {
      const result = unit();
      keep = result.commit;
      outcome = { status: keep ? 'committed' : 'rolled-back', value: result.value };
    } catch (error) {
      outcome = { status: 'failed', error: mapDriverError(error) };
    } finally {
      this.savepointDepth--;
    }
    // SQLite ended the whole transaction (it does on some errors): the batch fails with that error.
    if (!this.db.inTransaction)
      throw outcome.status === 'failed' ? outcome.error : new Error('the transaction ended inside a unit of a batch');
    // The transaction lost a race (PostgreSQL): nothing of the batch can commit.
    const doomed = this.doomed();
    if (doomed) throw doomed;
    if (keep) {
      sp.release.run();
      return outcome;
    }
    this.undoSavepoint(sp, registered, writesBefore);
    return outcome;
  }

  /**
   * Run `fn` under a SAVEPOINT inside the open transaction: released when it returns, rolled back
   * to (and released) when it throws, so a failed call leaves no writes behind.
   */
  savepoint<T>(fn: () => T): T {
    assert(this.db.inTransaction, 'bug: savepoint outside a transaction');
    const doomed = this.doomed();
    if (doomed) throw doomed;
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
      this.undoSavepoint(sp, registered, writesBefore);
      throw error;
    } finally {
      this.savepointDepth--;
    }
  }

  /**
   * Undo a savepoint's work (its writes, unless SQLite already ended the transaction; what it
   * registered to run after commit; the caches that may have seen its writes) and release it.
   */
  private undoSavepoint(
    sp: { rollbackTo: Statement<[]>; release: Statement<[]> },
    registered: number,
    writesBefore: number,
  ): void {
    if (this.db.inTransaction) {
      sp.rollbackTo.run();
      sp.release.run();
    }
    this.committed.length = Math.min(this.committed.length, registered);
    this.epoch?.bump();
    if (this.writes && this.writes() !== writesBefore) this.onUndoneWrites?.();
  }

  /** Another connection committed since our last transaction: cached rows may be stale. */
  private noteOtherWriters(): void {
    if (!this.epoch) return;
    const version = this.dataVersion.get() as number;
    if (version !== this.lastDataVersion) {
      this.lastDataVersion = version;
      this.epoch.bump();
    }
    this.epoch.active = true;
  }

  private statementsFor(depth: number) {
    let sp = this.savepointStatements[depth];
    if (!sp) {
      const name = `sp${depth}`;
      sp = {
        open: this.db.prepare<[]>(`SAVEPOINT ${name}`),
        release: this.db.prepare<[]>(`RELEASE ${name}`),
        rollbackTo: this.db.prepare<[]>(`ROLLBACK TO ${name}`),
      };
      this.savepointStatements[depth] = sp;
    }
    return sp;
  }

  /**
   * Where an afterCommit callback that threw is reported. The work it followed is committed: a
   * callback (a log line, a listener) failing must not turn that into an error, nor skip the others.
   */
  reportCallbackError: (error: unknown) => void = (error) =>
    console.error('tally: an after-commit callback failed', error);

  private runCommitted(): void {
    const callbacks = this.committed;
    this.committed = [];
    for (const fn of callbacks) {
      try {
        fn();
      } catch (error) {
        this.reportCallbackError(error);
      }
    }
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

const SLEEP = new Int32Array(new SharedArrayBuffer(4));
