import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EngineError } from '../../src/errors.js';
import type { Db } from '../../src/storage/database.js';
import { mapDriverError } from '../../src/storage/driver-errors.js';
import { PgConnection } from '../../src/storage/pg/connection.js';
import { toPostgres } from '../../src/storage/pg/dialect.js';
import { MIGRATIONS, POSTGRES_FIRST } from '../../src/storage/migrations.js';
import { migratePostgres, POSTGRES_BASELINE } from '../../src/storage/pg/schema.js';
import { actionStatements, queueStatements } from '../../src/storage/statements/actions.js';
import { authStatements } from '../../src/storage/statements/auth.js';
import { calculationStatements } from '../../src/storage/statements/calculations.js';
import { type ByNumber, ledgerStatements } from '../../src/storage/statements/ledger.js';
import { sessionStatements } from '../../src/storage/statements/sessions.js';
import { skillStatements } from '../../src/storage/statements/skills.js';
import { velocityStatements } from '../../src/storage/statements/velocity.js';
import { viewStatements } from '../../src/storage/statements/views.js';
import { createAccount, createTransferCode, POST } from '../helpers/ledger.js';
import { id, newEngine, ok } from '../helpers/engine.js';
import { UNDO_MIGRATION_18 } from '../helpers/migrations.js';
import { exited, serveProcess } from '../helpers/processes.js';

/**
 * The PostgreSQL storage driver (issue 19), against a real server: TALLY_TEST_PG_URL names one
 * (.ci/run starts a throwaway cluster with scripts/pg.sh and sets it; locally `npm run pg:start`,
 * then TALLY_TEST_PG_URL=$(scripts/pg.sh url)). Each run works in a schema of its own.
 */
const URL = process.env.TALLY_TEST_PG_URL;
const schema = `t_${randomBytes(6).toString('hex')}`;

function connect(): PgConnection {
  const connection = new PgConnection(URL!);
  connection.exec(`CREATE SCHEMA IF NOT EXISTS ${schema}; SET search_path TO ${schema}`);
  return connection;
}

describe('SQLite statements in PostgreSQL’s dialect', () => {
  it('numbers parameters in order of first use, keeps literals, comments and casts, rewrites INSERT OR IGNORE', () => {
    expect(
      toPostgres("SELECT * FROM t WHERE a = ? AND b = @b AND c = ? AND d = @b AND e = '?' -- ?\n AND f::text = :f"),
    ).toEqual({
      text: "SELECT * FROM t WHERE a = $1 AND b = $2 AND c = $3 AND d = $2 AND e = '?' -- ?\n AND f::text = $4",
      bindings: [
        { kind: 'positional', index: 0 },
        { kind: 'named', name: 'b' },
        { kind: 'positional', index: 1 },
        { kind: 'named', name: 'f' },
      ],
      returnsRows: true,
    });
    expect(toPostgres('INSERT OR IGNORE INTO t (a) VALUES (?) RETURNING a').text).toBe(
      'INSERT INTO t (a) VALUES ($1) ON CONFLICT DO NOTHING RETURNING a',
    );
    expect(toPostgres('INSERT OR IGNORE INTO t (a) VALUES (?)')).toMatchObject({
      text: 'INSERT INTO t (a) VALUES ($1) ON CONFLICT DO NOTHING',
      returnsRows: false,
    });
    expect(toPostgres("SELECT ifnull(a, 'ifnull(')")).toMatchObject({ text: "SELECT coalesce(a, 'ifnull(')" });
    expect(toPostgres('WITH x AS (SELECT 1) UPDATE t SET a = 1').returnsRows).toBe(false);
    expect(toPostgres('WITH RECURSIVE x(n) AS (SELECT 1) SELECT n FROM x').returnsRows).toBe(true);
    expect(toPostgres('UPDATE t SET a = 1 RETURNING a').returnsRows).toBe(true);
    expect(
      toPostgres("SELECT CAST(e.links -> @set ->> 0 AS BIGINT), links -> ? ->> 2, '{\"a\":1}' -> 'a' FROM e").text,
    ).toBe(
      "SELECT CAST(CAST(e.links AS json) -> $1 ->> 0 AS BIGINT), CAST(links AS json) -> $2 ->> 2, '{\"a\":1}' -> 'a' FROM e",
    );
  });
});

describe('the PostgreSQL schema’s migrations', () => {
  it('every migration after the first PostgreSQL schema has a PostgreSQL twin (a database made by an older Tally is brought up by them)', () => {
    const later = MIGRATIONS.filter((m) => m.version > POSTGRES_FIRST);
    expect(later.length).toBeGreaterThan(0);
    expect(later.filter((m) => !m.postgres?.trim()).map((m) => m.version)).toEqual([]);
    expect(POSTGRES_BASELINE).toBe(MIGRATIONS.at(-1)!.version);
  });
});

describe.skipIf(!URL)('the PostgreSQL driver, on a real server', () => {
  let db: PgConnection;
  beforeAll(() => {
    db = connect();
  });
  afterAll(() => {
    db?.exec(`DROP SCHEMA ${schema} CASCADE`);
    db?.close();
  });

  it('runs statements written for better-sqlite3: positional and named values, get, all, pluck, run, INSERT OR IGNORE', () => {
    db.exec('CREATE TABLE kv (k TEXT PRIMARY KEY, n BIGINT, flag BOOLEAN, amount NUMERIC, data BYTEA)');
    const insert = db.prepare('INSERT INTO kv (k, n, flag, amount, data) VALUES (?, ?, ?, ?, ?)');
    expect(insert.run('a', 1, true, '1.50', Buffer.from([1, 2]))).toEqual({ changes: 1, lastInsertRowid: 0 });
    expect(db.prepare('SELECT * FROM kv WHERE k = @k').get({ k: 'a' })).toEqual({
      k: 'a',
      n: 1,
      flag: 1,
      amount: '1.50',
      data: Buffer.from([1, 2]),
    });
    expect(db.prepare('SELECT k FROM kv WHERE k = ?').get('none')).toBeUndefined();
    const ignore = db.prepare('INSERT OR IGNORE INTO kv (k, n) VALUES (?, ?)');
    expect(ignore.run('a', 2).changes).toBe(0);
    expect(ignore.run('b', 2).changes).toBe(1);
    expect(db.prepare('SELECT k FROM kv ORDER BY k').pluck().all()).toEqual(['a', 'b']);
    expect(db.prepare('UPDATE kv SET n = n + 1 WHERE n >= ?').run(1).changes).toBe(2);
    expect(() => db.prepare('SELECT k FROM kv WHERE k = ? AND n = ?').get('a')).toThrow(/too few parameter values/);
    expect(() => db.prepare('SELECT k FROM kv WHERE k = @k').get({})).toThrow(/missing named parameter "k"/);
    expect(() => db.prepare('UPDATE kv SET n = 0').get()).toThrow(/returns no rows/);
    // libpq would cut a value at U+0000: refused instead, as a bad value.
    const nul = (() => {
      try {
        insert.run('c\u0000d', 1, false, '0', null);
      } catch (error) {
        return mapDriverError(error);
      }
    })() as EngineError;
    expect(nul.code).toBe('BAD_REQUEST');
    expect(db.prepare('SELECT count(*) AS n FROM kv').get()).toEqual({ n: 2 });
  });

  it('transactions nest as savepoints; a throw rolls back its own level only', () => {
    db.exec('CREATE TABLE t (n BIGINT PRIMARY KEY)');
    const insert = db.prepare('INSERT INTO t (n) VALUES (?)');
    const inner = db.transaction((n: number) => {
      insert.run(n);
      throw new Error('inner fails');
    });
    db.transaction(() => {
      insert.run(1);
      expect(db.inTransaction).toBe(true);
      expect(() => inner(2)).toThrow('inner fails');
      insert.run(3);
    })();
    expect(db.inTransaction).toBe(false);
    expect(() =>
      db.transaction(() => {
        insert.run(4);
        throw new Error('outer fails');
      })(),
    ).toThrow('outer fails');
    expect(db.prepare('SELECT n FROM t ORDER BY n').pluck().all()).toEqual([1, 3]);
  });

  it('errors carry their SQLSTATE and map to the engine’s codes; a bad URL names the server without its password', () => {
    db.exec(
      'CREATE TABLE parent (id TEXT PRIMARY KEY); CREATE TABLE child (id TEXT PRIMARY KEY, parent TEXT REFERENCES parent(id))',
    );
    db.prepare('INSERT INTO parent (id) VALUES (?)').run('p');
    const duplicate = (() => {
      try {
        db.prepare('INSERT INTO parent (id) VALUES (?)').run('p');
      } catch (error) {
        return mapDriverError(error);
      }
    })();
    expect(duplicate).toBeInstanceOf(EngineError);
    expect((duplicate as EngineError).code).toBe('ALREADY_EXISTS');
    const orphan = (() => {
      try {
        db.prepare('INSERT INTO child (id, parent) VALUES (?, ?)').run('c', 'nope');
      } catch (error) {
        return mapDriverError(error);
      }
    })();
    expect((orphan as EngineError).code).toBe('NOT_FOUND');
    const bad = (() => {
      try {
        new PgConnection('postgres://tally:s3cret@127.0.0.1:1/none');
      } catch (error) {
        return error;
      }
    })() as EngineError;
    expect(bad.code).toBe('BAD_REQUEST');
    expect(bad.message).toContain('postgres://tally:***@127.0.0.1:1/none');
    expect(bad.message).not.toContain('s3cret');
  });

  it('creates the schema at the baseline once, and refuses a database newer than this Tally, or older than any PostgreSQL schema', () => {
    const fresh = connect();
    fresh.exec(`CREATE SCHEMA ${schema}_m; SET search_path TO ${schema}_m`);
    try {
      expect(migratePostgres(fresh)).toEqual([POSTGRES_BASELINE]);
      expect(migratePostgres(fresh)).toEqual([]);
      expect(fresh.prepare("SELECT dec_add('1.50', '2.125') AS sum").get()).toEqual({ sum: '3.625' });
      fresh.prepare("UPDATE schema_version SET version = ? WHERE name = 'tally'").run(POSTGRES_BASELINE + 1);
      expect(() => migratePostgres(fresh)).toThrow(/newer than this Tally/);
      // Older than the first PostgreSQL schema: no twins to bring it up, never run against it.
      fresh.prepare("UPDATE schema_version SET version = ? WHERE name = 'tally'").run(POSTGRES_FIRST - 1);
      expect(() => migratePostgres(fresh)).toThrow(/older than any PostgreSQL schema of Tally/);
    } finally {
      fresh.exec(`DROP SCHEMA ${schema}_m CASCADE`);
      fresh.close();
    }
  });

  it('a database of an older Tally (schema 16: a set’s entries as rows of set_entry_log, an account’s in an index) is brought up by the migrations’ twins: the schema a new one has, every read the same', async () => {
    const name = `${schema}_up`;
    const admin = connect();
    admin.exec(`CREATE SCHEMA ${name}; SET search_path TO ${name}`);
    const url = `${URL}${URL!.includes('?') ? '&' : '?'}options=-c%20search_path%3D${name}`;
    const SET = id(50);
    const TOP = id(51);
    const page = `entries(first: 200) { nodes { entryId } }`;
    const reads = (e: Awaited<ReturnType<typeof newEngine>>) =>
      ok(
        e,
        `{ s: accountSet(id: "${SET}") { ${page} usd: balance(currency: "USD") { version history(first: 200) { nodes { version settled { normalBalance { units } } } } }
        eur: balance(currency: "EUR") { history(first: 200) { nodes { version settled { normalBalance { units } } } } } }
        t: accountSet(id: "${TOP}") { ${page} balance(currency: "USD") { history(first: 200) { nodes { version } } } } }`,
      );
    try {
      let engine = await newEngine({ path: url });
      createTransferCode(engine);
      createAccount(engine, 1, { normalBalanceType: 'DEBIT' });
      createAccount(engine, 2);
      ok(engine, `mutation { createAccountSet(input: {accountSetId: "${TOP}", name: "top"}) { version } }`);
      ok(
        engine,
        `mutation { createAccountSet(input: {accountSetId: "${SET}", name: "S", accountSetIds: ["${TOP}"]}) { version } }`,
      );
      ok(
        engine,
        `mutation { addToAccountSet(id: "${SET}", member: {memberType: ACCOUNT, memberId: "${id(2)}"}) { version } }`,
      );
      const post = (from: number, to: number) => {
        for (let n = from; n <= to; n++)
          ok(engine, POST, {
            input: {
              transactionId: id(10_000 + n),
              tranCode: 'TRANSFER',
              params: { from: id(1), to: id(2), amount: `${n}.5`, currency: n % 4 ? 'USD' : 'EUR' },
            },
          });
      };
      post(1, 90);
      const before = reads(engine);
      const links = () =>
        (
          admin.prepare('SELECT seq, set_links FROM entries WHERE set_links IS NOT NULL ORDER BY seq').all() as Array<{
            seq: number;
            set_links: string;
          }>
        ).map((l) => ({ seq: Number(l.seq), links: JSON.parse(l.set_links) }));
      const written = links();
      expect(written.length).toBe(90);
      const chains = () =>
        admin
          .prepare('SELECT seq, account_prev FROM entries ORDER BY seq')
          .all()
          .map((r) => ({ ...(r as object) }));
      const accountChains = chains();
      const heads = () =>
        admin
          .prepare('SELECT account_id, journal_id, currency, log_head, log_count FROM balances ORDER BY 1, 2, 3')
          .all();
      const headsBefore = heads();
      engine.close();
      // What schema 16 kept: entries by account in an index, a row per entry and set, nothing in the entries.
      admin.exec(
        `${UNDO_MIGRATION_18} ALTER TABLE set_entry_marks RENAME CONSTRAINT entry_marks_pkey TO set_entry_marks_pkey;`,
      );
      admin.exec(`CREATE TABLE set_entry_log (seq BIGINT NOT NULL, account_set_id TEXT NOT NULL, prev_seq BIGINT, balance_version BIGINT, balance_after TEXT, PRIMARY KEY (seq, account_set_id));
        INSERT INTO set_entry_log SELECT e.seq, l.key, (l.value ->> 0)::bigint, (l.value ->> 1)::bigint, l.value ->> 2 FROM entries e, json_each(e.set_links::json) l WHERE e.set_links IS NOT NULL;
        ALTER TABLE entries DROP COLUMN set_links;
        UPDATE schema_version SET version = 16 WHERE name = 'tally'`);
      engine = await newEngine({ path: url });
      expect(admin.prepare("SELECT version FROM schema_version WHERE name = 'tally'").pluck().get()).toBe(
        POSTGRES_BASELINE,
      );
      expect(
        admin
          .prepare(
            "SELECT count(*) FROM pg_class WHERE relname = 'set_entry_log' AND relnamespace = current_schema()::regnamespace",
          )
          .pluck()
          .get(),
      ).toBe(0);
      expect(links()).toEqual(written);
      expect(chains()).toEqual(accountChains);
      expect(heads()).toEqual(headsBefore);
      expect(
        admin
          .prepare(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'entries_by_account' AND schemaname = current_schema()",
          )
          .pluck()
          .get(),
      ).toBe(0);
      expect(reads(engine)).toEqual(before);
      post(91, 130);
      const after = reads(engine);
      expect(after.s.entries.nodes.length).toBe(130);
      expect(after.s.usd.history.nodes.map((v: { version: number }) => v.version)).toEqual(
        Array.from({ length: after.s.usd.version }, (_, i) => after.s.usd.version - i),
      );
      engine.close();
      // The same tables and columns (names and types) as a database made new.
      const columns = (of: string) =>
        admin
          .prepare(
            'SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = ? ORDER BY table_name, column_name',
          )
          .all(of);
      const fresh = `${schema}_new`;
      admin.exec(`CREATE SCHEMA ${fresh}; SET search_path TO ${fresh}`);
      migratePostgres(admin);
      expect(columns(name)).toEqual(columns(fresh));
      const indexes = (of: string) =>
        admin.prepare('SELECT tablename, indexname FROM pg_indexes WHERE schemaname = ? ORDER BY 1, 2').all(of);
      expect(indexes(name)).toEqual(indexes(fresh));
      admin.exec(`DROP SCHEMA ${fresh} CASCADE`);
    } finally {
      admin.exec(`DROP SCHEMA ${name} CASCADE`);
      admin.close();
    }
  });

  it('every statement of the statements modules, in PostgreSQL’s dialect, prepares against the schema (PostgreSQL checks names and types)', () => {
    const fresh = connect();
    fresh.exec(`CREATE SCHEMA ${schema}_s; SET search_path TO ${schema}_s`);
    try {
      migratePostgres(fresh);
      const as = fresh as unknown as Db;
      const groups = {
        ledger: ledgerStatements(as),
        vel: velocityStatements(as),
        calc: calculationStatements(as),
        views: viewStatements(as),
        actions: actionStatements(as),
        queue: queueStatements(as),
        auth: authStatements(as),
        sessions: sessionStatements(as),
        skills: skillStatements(as),
      };
      const failures: string[] = [];
      let prepared = 0;
      const visit = (value: unknown, name: string) => {
        if (value && typeof value === 'object' && 'prepareOnServer' in value) {
          try {
            (value as { prepareOnServer(): unknown }).prepareOnServer();
            prepared++;
          } catch (error) {
            failures.push(`${name}: ${(error as Error).message.split('\n')[0]}`);
          }
        } else if (typeof value === 'function' && 'all' in value) {
          // Statements by a number (byColumns, byRows), prepared on first use: every one.
          (value as ByNumber<unknown>).all().forEach((statement, i) => visit(statement, `${name}(${i + 1})`));
        } else if (value && typeof value === 'object')
          for (const [k, v] of Object.entries(value)) visit(v, `${name}.${k}`);
      };
      visit(groups, 'st');
      expect(failures).toEqual([]);
      expect(prepared).toBeGreaterThan(250);
    } finally {
      fresh.exec(`DROP SCHEMA ${schema}_s CASCADE`);
      fresh.close();
    }
  });

  it('tally migrate, deploy and serve take a postgres:// --db: one engine answers over HTTP, and the URL is printed without its password', async () => {
    const fresh = connect();
    fresh.exec(`CREATE SCHEMA ${schema}_cli`);
    fresh.close();
    // The cluster trusts local users: the password is not needed, only never shown.
    const url = `${URL!.replace('postgres://postgres@', 'postgres://postgres:s3cret@')}?options=-c%20search_path%3D${schema}_cli`;
    const bin = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');
    const migrated = execFileSync(process.execPath, [bin, 'migrate', '--db', url], { encoding: 'utf8' });
    expect(migrated).toContain(`is at schema version ${POSTGRES_BASELINE}`);
    expect(migrated).toContain('postgres://postgres:***@');
    expect(migrated).not.toContain('s3cret');
    // tally deploy --db takes the URL too: the bank example's tools and ledger, into that schema.
    const bank = join(import.meta.dirname, '..', '..', 'examples', 'bank');
    const deployed = execFileSync(process.execPath, [bin, 'deploy', bank, '--db', url, '--json'], { encoding: 'utf8' });
    expect(JSON.parse(deployed).applied).toBe(true);
    expect(deployed).not.toContain('s3cret');
    const key = 'tly_pg-serve-test-key';
    const { child, endpoint, output } = await serveProcess(url, key);
    try {
      expect(output()).not.toContain('s3cret');
      const post = async (query: string) =>
        (await (
          await fetch(endpoint, {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
            body: JSON.stringify({ query }),
          })
        ).json()) as { data: any; errors?: unknown };
      expect(
        (
          await post(
            'mutation { createAccount(input: {accountId: "00000000-0000-4000-8000-000000000001", code: "A1", name: "A"}) { code } }',
          )
        ).data,
      ).toEqual({ createAccount: { code: 'A1' } });
      expect((await post('{ account(code: "A1") { code } }')).data).toEqual({ account: { code: 'A1' } });
      // The accounts are in the schema of the URL.
      const check = connect();
      check.exec(`SET search_path TO ${schema}_cli`);
      expect(check.prepare('SELECT code FROM accounts WHERE code = ?').pluck().all('A1')).toEqual(['A1']);
      expect(check.prepare('SELECT count(*) FROM actions').pluck().get()).toBeGreaterThan(0);
      check.exec(`DROP SCHEMA ${schema}_cli CASCADE`);
      check.close();
    } finally {
      child.kill('SIGTERM');
      await exited(child);
    }
  }, 60_000);
});
