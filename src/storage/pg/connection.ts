import { createRequire } from 'node:module';
import { EngineError } from '../../errors.js';
import { isConflictSqlState } from '../driver-errors.js';
import { type Binding, toPostgres } from './dialect.js';

/**
 * A synchronous PostgreSQL connection shaped like the part of better-sqlite3's Database the engine
 * uses (issue 19): `prepare(sql)` → a statement with `run / get / all / iterate / pluck`, `exec`,
 * `transaction`, `inTransaction`, `close`. The engine is synchronous by design (a sandboxed tool's
 * graphql() runs inside the caller's transaction), so this is libpq's blocking API through
 * node-libpq (pg-native's binding): the calling thread waits in libpq for each answer. Measured
 * against an asynchronous `pg` client on a worker thread (`npm run bench:pg-driver`): a prepared
 * primary-key SELECT 64 µs against 148 µs, a 7-statement posting 493 µs against 1 100 µs.
 *
 * Statements are written in SQLite's dialect and translated (./dialect.ts); each is prepared on
 * the server once, when first run, under a name of its own. Values come back as better-sqlite3
 * gives them: integers as numbers, booleans as 1/0, text as strings, bytea as Buffers; numeric
 * as its exact text.
 */

/** node-libpq's PQ: the calls used here, all synchronous. */
interface Libpq {
  connectSync(conninfo: string): void;
  exec(text: string): void;
  prepare(name: string, text: string, nParams: number): void;
  execPrepared(name: string, values: Array<string | null>): void;
  resultStatus(): string;
  resultErrorMessage(): string;
  resultErrorFields(): Record<string, string> | undefined;
  errorMessage(): string;
  ntuples(): number;
  nfields(): number;
  fname(i: number): string;
  ftype(i: number): number;
  getvalue(row: number, column: number): string;
  getisnull(row: number, column: number): boolean;
  cmdTuples(): string;
  transactionStatus(): number;
  finish(): void;
  // The asynchronous side, for LISTEN (PgListener): libuv tells when the socket has input.
  on(event: 'readable', listener: () => void): void;
  startReader(): void;
  stopReader(): void;
  consumeInput(): boolean;
  notifies(): { relname: string; extra: string; be_pid: number } | undefined;
}

let Libpq: (new () => Libpq) | null | undefined;

/**
 * Every libpq connection object not yet released. node-libpq keeps a libuv poll handle inside the
 * object (made at connect, even for blocking use): libuv touches that handle until its close
 * completes, on a later turn of the event loop after finish(), and an open one for as long as it is
 * open. Were the object collected before, libuv would touch freed memory (a crash: "uv__finish_close:
 * Assertion failed"). So each is held here while open, and for one turn after it is finished.
 */
const alive = new Set<Libpq>();

function release(pq: Libpq): void {
  pq.finish();
  setImmediate(() => alive.delete(pq));
}

function loadLibpq(): new () => Libpq {
  if (Libpq === undefined) {
    try {
      Libpq = createRequire(import.meta.url)('libpq') as new () => Libpq;
    } catch {
      Libpq = null;
    }
  }
  if (!Libpq) {
    throw new EngineError(
      'BAD_REQUEST',
      'PostgreSQL support is not installed: the libpq binding (pg-native, an optional dependency) did not build',
      {
        hint: "Install PostgreSQL's client library (apt-get install libpq-dev) and run npm install again.",
      },
    );
  }
  return Libpq;
}

/** A PostgreSQL error, with its SQLSTATE as `code` (`PG_23505`: unique_violation), as mapDriverError reads it. */
export class PgError extends Error {
  constructor(
    message: string,
    readonly sqlState: string,
    readonly detail?: string,
  ) {
    super(message);
    this.name = 'PgError';
  }

  get code(): string {
    return `PG_${this.sqlState}`;
  }
}

// Type OIDs (pg_type) whose text is converted.
const INT2 = 21,
  INT4 = 23,
  INT8 = 20,
  OID = 26,
  FLOAT4 = 700,
  FLOAT8 = 701,
  BOOL = 16,
  BYTEA = 17;

function parseValue(type: number, text: string): unknown {
  switch (type) {
    case INT2:
    case INT4:
    case OID:
    case FLOAT4:
    case FLOAT8:
      return Number(text);
    case INT8: {
      const n = Number(text);
      // better-sqlite3 without safeIntegers answers a number, and fails on one it cannot hold exactly.
      if (!Number.isSafeInteger(n)) throw new PgError(`integer ${text} is out of JavaScript's safe range`, '22003');
      return n;
    }
    case BOOL:
      return text === 't' ? 1 : 0;
    case BYTEA:
      return Buffer.from(text.slice(2), 'hex');
    default:
      return text;
  }
}

function toParam(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  switch (typeof value) {
    case 'string':
      // libpq passes values as C strings: one with U+0000 would arrive cut short.
      if (value.includes('\u0000'))
        throw new PgError('a text value holds U+0000, which PostgreSQL text cannot hold', '22021');
      return value;
    case 'number':
    case 'bigint':
      return String(value);
    case 'boolean':
      return value ? '1' : '0';
    default:
      if (Buffer.isBuffer(value)) return `\\x${value.toString('hex')}`;
      throw new TypeError(
        `a statement parameter must be a string, number, bigint, boolean, Buffer or null, got ${typeof value}`,
      );
  }
}

export interface RunResult {
  changes: number;
  lastInsertRowid: number;
}

export class PgStatement<Params extends unknown[] = unknown[], Row = unknown> {
  readonly reader: boolean;
  private readonly text: string;
  private readonly bindings: Binding[];
  private name: string | null = null;
  private plucked = false;

  /** The table a write statement writes (for PgConnection.watchWrites), or null. */
  private readonly writes: string | null;

  constructor(
    private readonly connection: PgConnection,
    readonly source: string,
  ) {
    const translated = toPostgres(pragmaQuery(source) ?? source);
    this.bindings = translated.bindings;
    this.reader = translated.returnsRows;
    const write = /^\s*(INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE|DELETE\s+FROM)\s+"?(\w+)"?/i.exec(source);
    this.writes = write?.[2] ?? null;
    // better-sqlite3's run() reports the rowid an INSERT gave its row: here the insert returns it.
    const reportsRowid = !this.reader && /^INSERT/i.test(write?.[1] ?? '') && connection.rowidTables.has(this.writes!);
    this.text = reportsRowid ? `${translated.text.trimEnd().replace(/;$/, '')} RETURNING rowid` : translated.text;
  }

  /** Answer the first column of each row instead of the row (better-sqlite3's pluck). */
  pluck(on = true): this {
    this.plucked = on;
    return this;
  }

  run(...args: Params): RunResult {
    const { changes, rows } = this.execute(args);
    const first = rows[0] as Record<string, unknown> | undefined;
    return { changes, lastInsertRowid: typeof first?.rowid === 'number' ? first.rowid : 0 };
  }

  get(...args: Params): Row | undefined {
    this.mustRead('get');
    return this.execute(args).rows[0] as Row | undefined;
  }

  all(...args: Params): Row[] {
    this.mustRead('all');
    return this.execute(args).rows as Row[];
  }

  iterate(...args: Params): IterableIterator<Row> {
    return this.all(...args)[Symbol.iterator]();
  }

  private mustRead(call: string): void {
    if (!this.reader) throw new TypeError(`${call}() on a statement that returns no rows: ${this.source.slice(0, 80)}`);
  }

  /** Prepare the statement on the server now (it is otherwise prepared when first run): PostgreSQL checks its names and types. */
  prepareOnServer(): this {
    if (this.name !== null) return this;
    const name = this.connection.nextStatementName();
    this.connection.pq.prepare(name, this.text, this.bindings.length);
    this.connection.check(this.text);
    this.name = name;
    return this;
  }

  private execute(args: unknown[]): { changes: number; rows: unknown[] } {
    const values = this.values(args);
    const pq = this.connection.pq;
    this.connection.refuseIfDoomed(this.text);
    this.prepareOnServer();
    pq.execPrepared(this.name!, values);
    this.connection.check(this.text);
    const rows: unknown[] = [];
    const fields = pq.nfields();
    if (fields > 0) {
      const names: string[] = [];
      const types: number[] = [];
      for (let c = 0; c < fields; c++) {
        names.push(pq.fname(c));
        types.push(pq.ftype(c));
      }
      const count = pq.ntuples();
      for (let r = 0; r < count; r++) {
        if (this.plucked) {
          rows.push(pq.getisnull(r, 0) ? null : parseValue(types[0]!, pq.getvalue(r, 0)));
          continue;
        }
        const row: Record<string, unknown> = {};
        for (let c = 0; c < fields; c++)
          row[names[c]!] = pq.getisnull(r, c) ? null : parseValue(types[c]!, pq.getvalue(r, c));
        rows.push(row);
      }
    }
    const changes = Number(pq.cmdTuples() || 0);
    if (changes > 0 && this.writes !== null) this.connection.wrote(this.writes);
    return { changes, rows };
  }

  /** The values of $1, $2, … from positional arguments and/or one object of named ones (better-sqlite3's calling forms). */
  private values(args: unknown[]): Array<string | null> {
    let named: Record<string, unknown> | undefined;
    const positional: unknown[] = [];
    for (const arg of args) {
      if (arg !== null && typeof arg === 'object' && !Buffer.isBuffer(arg) && !Array.isArray(arg))
        named = arg as Record<string, unknown>;
      else if (Array.isArray(arg)) positional.push(...arg);
      else positional.push(arg);
    }
    return this.bindings.map((b) => {
      if (b.kind === 'positional') {
        if (b.index >= positional.length)
          throw new RangeError(
            `too few parameter values were provided (${positional.length}) for: ${this.source.slice(0, 80)}`,
          );
        return toParam(positional[b.index]);
      }
      if (!named || !Object.hasOwn(named, b.name))
        throw new RangeError(`missing named parameter "${b.name}" for: ${this.source.slice(0, 80)}`);
      return toParam(named[b.name]);
    });
  }
}

export class PgConnection {
  readonly pq: Libpq;
  private statements = 0;
  /** Tables with a rowid column (see schema.ts): an INSERT into one reports the row's rowid, as SQLite's does. */
  rowidTables = new Set<string>();
  private readonly watchers = new Map<string, Array<() => void>>();
  private open_ = true;
  private depth = 0;
  /**
   * The serialization failure (40001) or deadlock (40P01) that ended this transaction's chance to
   * commit, until it rolls back. PostgreSQL lets a savepoint roll back past such an error, but the
   * transaction's snapshot is the one that lost the race: whatever it did next would be decided on
   * stale reads. So every later statement but a rollback fails with the same error, and
   * TransactionManager runs the whole transaction again (see retryableConflict).
   */
  private doomed_: PgError | null = null;
  /** Which database this connection speaks to: statements whose SQL differs by dialect ask. */
  readonly dialect = 'postgres';

  constructor(readonly url: string) {
    const Pq = loadLibpq();
    this.pq = new Pq();
    alive.add(this.pq);
    try {
      this.pq.connectSync(url);
    } catch (error) {
      // connectSync finished the connection already: hold the object for the handle's close.
      setImmediate(() => alive.delete(this.pq));
      throw new EngineError(
        'BAD_REQUEST',
        `cannot connect to PostgreSQL at ${redact(url)}: ${(error as Error).message.trim()}`,
        {
          hint: 'Check the URL (postgres://user@host:port/database), that the server runs and accepts this user (scripts/pg.sh start runs one for development).',
        },
      );
    }
    // Notices (an IF NOT EXISTS that found the table) are not errors: libpq would print them.
    this.exec('SET client_min_messages = warning');
    // Every transaction is SERIALIZABLE: two processes posting to the same accounts can never both
    // act on a balance the other changed; the loser fails with 40001 and runs again (see doomed).
    this.exec('SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE');
  }

  /** This transaction lost a serialization race (see doomed_), or null. Cleared when it ends. */
  get doomed(): PgError | null {
    if (this.doomed_ && !this.inTransaction) this.doomed_ = null;
    return this.doomed_;
  }

  /** @internal Refuse a statement of a transaction that cannot commit (anything but ending it or a savepoint's undo). */
  refuseIfDoomed(text: string): void {
    const doomed = this.doomed;
    if (doomed && !/^\s*(ROLLBACK|RELEASE)\b/i.test(text))
      throw new PgError(doomed.message, doomed.sqlState, doomed.detail);
  }

  get open(): boolean {
    return this.open_;
  }

  /** Whether a transaction is open (libpq's transaction status: in a block, or in a failed one). */
  get inTransaction(): boolean {
    const status = this.pq.transactionStatus();
    return status === 2 || status === 3;
  }

  prepare<Params extends unknown[] = unknown[], Row = unknown>(sql: string): PgStatement<Params, Row> {
    return new PgStatement<Params, Row>(this, sql);
  }

  /** Run SQL text (one or more statements, no parameters), translated. */
  exec(sql: string): this {
    this.refuseIfDoomed(sql);
    this.pq.exec(toPostgres(sql).text);
    this.check(sql);
    return this;
  }

  /**
   * better-sqlite3's transaction(fn): the returned function runs `fn` in a transaction (BEGIN …
   * COMMIT), or, inside one, in a savepoint; a throw rolls back and rethrows.
   */
  transaction<A extends unknown[], T>(fn: (...args: A) => T): (...args: A) => T {
    return (...args: A) => {
      const savepoint = this.inTransaction ? `tally_sp_${++this.depth}` : null;
      this.exec(savepoint ? `SAVEPOINT ${savepoint}` : 'BEGIN');
      try {
        const value = fn(...args);
        this.exec(savepoint ? `RELEASE SAVEPOINT ${savepoint}` : 'COMMIT');
        return value;
      } catch (error) {
        if (savepoint) {
          this.exec(`ROLLBACK TO SAVEPOINT ${savepoint}`);
          this.exec(`RELEASE SAVEPOINT ${savepoint}`);
        } else if (this.inTransaction) this.exec('ROLLBACK');
        throw error;
      } finally {
        if (savepoint) this.depth--;
      }
    };
  }

  /**
   * better-sqlite3's pragma(): what the engine reads and sets through it. `data_version` (another
   * connection committed a change to a cached table) is the counter the schema's triggers keep;
   * `busy_timeout` is how long a statement waits for a lock (lock_timeout). SQLite's storage
   * settings (WAL, checkpoints, page cache) have no meaning here and change nothing.
   */
  pragma(source: string, options?: { simple?: boolean }): unknown {
    const [, name, value] = /^\s*(\w+)\s*(?:=\s*(.+?))?\s*$/.exec(source) ?? [];
    const query = pragmaQuery(`PRAGMA ${name}`);
    if (query && value === undefined) {
      const result = this.prepare(query).get() as Record<string, unknown> | undefined;
      return options?.simple ? Object.values(result ?? {})[0] : [result];
    }
    if (name === 'busy_timeout' && value !== undefined && /^\d+$/.test(value)) {
      this.exec(`SET lock_timeout = ${Math.min(Number(value), LOCK_WAIT_MS)}`);
      return options?.simple ? Number(value) : [{ timeout: Number(value) }];
    }
    if (
      name === 'wal_autocheckpoint' ||
      name === 'journal_size_limit' ||
      name === 'foreign_keys' ||
      name === 'cache_size' ||
      name === 'temp_store'
    )
      return options?.simple ? 0 : [];
    throw new Error(`PRAGMA ${source} has no PostgreSQL equivalent here`);
  }

  /**
   * better-sqlite3's function(): SQL functions the engine registers in JavaScript. On PostgreSQL
   * the ones the statements call are SQL functions of the schema (dec_add); any other is refused.
   */
  function(name: string): this {
    if (name !== 'dec_add') throw new Error(`the SQL function ${name} is not available on PostgreSQL`);
    return this;
  }

  /**
   * Call `onWrite` whenever this connection's statements change rows of one of `tables` (what
   * SQLite's TEMP triggers do for record-cache.ts): every write goes through a statement, so the
   * statement that wrote tells.
   */
  watchWrites(tables: readonly string[], onWrite: () => void): void {
    for (const table of tables) {
      let list = this.watchers.get(table);
      if (!list) this.watchers.set(table, (list = []));
      list.push(onWrite);
    }
  }

  /** @internal A statement changed rows of `table`. */
  wrote(table: string): void {
    for (const onWrite of this.watchers.get(table) ?? []) onWrite();
  }

  close(): void {
    if (!this.open_) return;
    this.open_ = false;
    release(this.pq);
  }

  /** @internal A name for the next server-side prepared statement. */
  nextStatementName(): string {
    return `tally_${++this.statements}`;
  }

  /** @internal Throw the last command's error, if it failed, as a PgError with its SQLSTATE. */
  check(text: string): void {
    const status = this.pq.resultStatus();
    if (status !== 'PGRES_FATAL_ERROR' && status !== 'PGRES_NONFATAL_ERROR' && status !== 'PGRES_BAD_RESPONSE') {
      if (status) return;
      const message = this.pq.errorMessage();
      if (!message) return;
      throw new PgError(message.trim(), '08006');
    }
    const fields = this.pq.resultErrorFields() ?? {};
    const message = (this.pq.resultErrorMessage() || this.pq.errorMessage()).trim();
    const error = new PgError(
      `${message}${fields.sqlState ? '' : ` (in: ${text.slice(0, 120)})`}`,
      fields.sqlState ?? 'XX000',
      fields.messageDetail,
    );
    if (isConflictSqlState(error.sqlState) && this.inTransaction) this.doomed_ = error;
    throw error;
  }
}

/**
 * A connection that LISTENs on one channel and calls `onNotify` for each notification, on the event
 * loop (libpq's socket watched by libuv; nothing blocks). The queue's workers wake on it when another
 * process starts an execution (engine: NOTIFY after the commit). Where the server has no
 * LISTEN/NOTIFY, or the connection drops, it says so through `onError` and the workers poll.
 */
export class PgListener {
  private readonly pq: Libpq;
  private closed = false;

  constructor(url: string, channel: string, onNotify: () => void, onError: (error: Error) => void) {
    if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`bad channel name ${JSON.stringify(channel)}`);
    const Pq = loadLibpq();
    this.pq = new Pq();
    alive.add(this.pq);
    try {
      this.pq.connectSync(url);
      this.pq.exec(`LISTEN ${channel}`);
      const status = this.pq.resultStatus();
      if (status !== 'PGRES_COMMAND_OK') throw new Error(this.pq.resultErrorMessage().trim() || status);
    } catch (error) {
      release(this.pq);
      throw new EngineError(
        'BAD_REQUEST',
        `cannot LISTEN on PostgreSQL at ${redact(url)}: ${(error as Error).message.trim()}`,
      );
    }
    this.pq.on('readable', () => {
      if (this.closed) return;
      if (!this.pq.consumeInput()) {
        onError(new Error(`the LISTEN connection failed: ${this.pq.errorMessage().trim()}`));
        this.close();
        return;
      }
      let woke = false;
      while (this.pq.notifies()) woke = true;
      if (woke) onNotify();
    });
    this.pq.startReader();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.pq.stopReader();
    release(this.pq);
  }
}

/** The query that answers a PRAGMA the engine reads, or undefined (not a PRAGMA, or not one of those). */
function pragmaQuery(source: string): string | undefined {
  const name = /^\s*PRAGMA\s+(\w+)\s*$/i.exec(source)?.[1]?.toLowerCase();
  if (name === 'data_version') return 'SELECT version AS data_version FROM tally_data_version';
  if (name === 'user_version') return "SELECT version AS user_version FROM schema_version WHERE name = 'tally'";
  return undefined;
}

/**
 * The longest a statement waits for a row another transaction holds (lock_timeout). Every
 * transaction is SERIALIZABLE, so waiting buys little: when the holder commits a change to the
 * row, the waiter fails anyway and runs again. A short wait also ends, in a tenth of a second
 * rather than deadlock_timeout's second, a wait in a cycle between two processes' groups of
 * requests (each holding rows the other's next posting needs).
 */
export const LOCK_WAIT_MS = 100;

/** Whether `path` names a PostgreSQL database (a postgres:// or postgresql:// URL) rather than a SQLite file. */
export function isPostgresUrl(path: string): boolean {
  return /^postgres(ql)?:\/\//i.test(path);
}

/** A database path or URL as it may be printed: a URL without its password (a file path is unchanged). */
export function redact(url: string): string {
  return url.replace(/(\/\/[^:/@]+):[^@]*@/, '$1:***@');
}
