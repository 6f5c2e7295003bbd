import { randomBytes } from 'node:crypto';
import { expect } from 'vitest';
import { createEngine, type Engine, type EngineOptions } from '../../src/engine.js';
import { PgConnection } from '../../src/storage/pg/connection.js';

/** A deterministic UUID for test fixtures: id(1) = 00000000-0000-4000-8000-000000000001. */
export function id(n: number | string): string {
  return `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
}

export function newEngine(options: EngineOptions = {}): Promise<Engine> {
  const path = options.path ?? (ON_POSTGRES ? postgresTestDatabase() : undefined);
  return createEngine({ logError: () => {}, ...options, ...(path === undefined ? {} : { path }) });
}

/** Whether this run's engines are on PostgreSQL (TALLY_TEST_BACKEND=postgres): tests of SQLite's own machinery skip then. */
export const ON_POSTGRES = process.env.TALLY_TEST_BACKEND === 'postgres';

/**
 * TALLY_TEST_BACKEND=postgres (with TALLY_TEST_PG_URL): an engine without a path gets a fresh
 * PostgreSQL schema of its own on that server instead of an in-memory SQLite database.
 */
export function postgresTestDatabase(): string {
  const url = process.env.TALLY_TEST_PG_URL;
  if (!url) throw new Error('TALLY_TEST_BACKEND=postgres needs TALLY_TEST_PG_URL (scripts/pg.sh start prints one)');
  const schema = `test_${randomBytes(8).toString('hex')}`;
  const admin = new PgConnection(url);
  try {
    admin.exec(`CREATE SCHEMA ${schema}`);
  } finally {
    admin.close();
  }
  return `${url}${url.includes('?') ? '&' : '?'}options=-c%20search_path%3D${schema}`;
}

/** Run a request that must succeed (as `principal`, or the engine itself); returns its data. */
export function ok<T = any>(engine: Engine, query: string, variables?: Record<string, unknown>, principal?: string): T {
  const result = engine.graphql(query, variables, principal === undefined ? {} : { principal });
  if (result.errors) throw new Error(`unexpected errors: ${JSON.stringify(result.errors, null, 2)}`);
  return result.data as T;
}

/** Run a request that must fail (as `principal`, or the engine itself); returns its first error (message and extensions). */
export function fails(engine: Engine, query: string, variables?: Record<string, unknown>, principal?: string) {
  const result = engine.graphql(query, variables, principal === undefined ? {} : { principal });
  expect(result.errors, `expected errors, got ${JSON.stringify(result.data)}`).toBeDefined();
  const error = result.errors![0]!;
  return {
    message: error.message,
    code: error.extensions?.code as string,
    hint: error.extensions?.hint as string | undefined,
    result,
  };
}

/**
 * `count` TRANSFER postings between accounts 1–3 (see createAccount, createTransferCode), 100 per
 * request, with transaction ids from id(firstTransaction) on.
 */
export function postTransfers(engine: Engine, count: number, firstTransaction = 100_000): void {
  for (let batch = 0; batch < count / 100; batch++) {
    const posts = Array.from({ length: 100 }, (_, i) => {
      const n = batch * 100 + i;
      return `p${i}: postTransaction(input: {transactionId: "${id(firstTransaction + n)}", tranCode: "TRANSFER", params: {from: "${id(1 + (n % 3))}", to: "${id(1 + ((n + 1) % 3))}", amount: "1"}}) { transactionId }`;
    });
    ok(engine, `mutation { ${posts.join(' ')} }`);
  }
}

export const CREATE_ACCOUNT = `mutation($input: AccountInput!) { createAccount(input: $input) { accountId code status version } }`;
export const POST = `mutation($input: TransactionInput!) { postTransaction(input: $input) { transactionId correlationId effective voidedBy } }`;
export const BALANCE = `query($a: UUID!, $c: CurrencyCode) { balance(accountId: $a, currency: $c) {
  settled { drBalance { units } crBalance { units } normalBalance { units currency } }
  pending { normalBalance { units } }
  encumbrance { normalBalance { units } }
  available(layer: ENCUMBRANCE) { normalBalance { units } } } }`;

export function createAccount(engine: Engine, n: number, extra: Record<string, unknown> = {}): string {
  ok(engine, CREATE_ACCOUNT, { input: { accountId: id(n), code: `ACC-${n}`, name: `Account ${n}`, ...extra } });
  return id(n);
}

/** A TRANSFER tran code: debit `from`, credit `to`, `amount` in `currency` (default USD) on `layer`. */
export function createTransferCode(engine: Engine, code = 'TRANSFER', tranCodeId = id(9000)): string {
  ok(engine, `mutation($input: TranCodeInput!) { createTranCode(input: $input) { version } }`, {
    input: {
      tranCodeId,
      code,
      params: [
        { name: 'from', type: 'UUID' },
        { name: 'to', type: 'UUID' },
        { name: 'amount', type: 'DECIMAL' },
        { name: 'currency', type: 'STRING', default: "'USD'" },
        { name: 'layer', type: 'STRING', default: "'SETTLED'" },
      ],
      transaction: { effective: 'date.Today()', description: "'transfer ' + string(params.amount)" },
      entries: [
        {
          accountId: 'params.from',
          units: 'params.amount',
          currency: 'params.currency',
          direction: 'DEBIT',
          layer: 'params.layer',
        },
        {
          accountId: 'params.to',
          units: 'params.amount',
          currency: 'params.currency',
          direction: 'CREDIT',
          layer: 'params.layer',
        },
      ],
    },
  });
  return tranCodeId;
}

/** Accounts 1 and 2 and the TRANSFER tran code. */
export function twoAccountsAndTransfer(engine: Engine): void {
  createAccount(engine, 1);
  createAccount(engine, 2);
  createTransferCode(engine);
}

export function balanceOf(engine: Engine, accountId: string, currency = 'USD') {
  return ok(engine, BALANCE, { a: accountId, c: currency }).balance;
}

export function count(engine: Engine, table: string): number {
  return (engine.db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
}

/** An engine with an admin key behind a real HTTP server on a free port. */
export async function startServer(
  key: string,
  options: EngineOptions = {},
  serverOptions: import('../../src/server/http.js').ServerOptions = {},
) {
  const { createServer } = await import('../../src/server/http.js');
  const engine = await newEngine(options);
  engine.ensureAdmin(key);
  const server = createServer(engine, serverOptions);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    engine,
    server,
    url: `http://127.0.0.1:${port}/graphql`,
    async stop() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      engine.close();
    },
  };
}

/**
 * SQL that takes a database of today's schema back to schema version 17: an account's entries
 * through entries_by_account, no chains of accounts (the caller sets user_version).
 */
export const UNDO_MIGRATION_18 = `
  CREATE INDEX entries_by_account ON entries (account_id, seq);
  DELETE FROM entry_marks WHERE account_id IN (SELECT account_id FROM accounts WHERE is_account_set = 0);
  ALTER TABLE entry_marks RENAME COLUMN account_id TO account_set_id;
  ALTER TABLE entry_marks RENAME TO set_entry_marks;
  UPDATE balances SET log_head = NULL, log_prev = NULL, log_count = NULL WHERE account_id IN (SELECT account_id FROM accounts WHERE is_account_set = 0);
  ALTER TABLE entries DROP COLUMN account_prev;
`;

/**
 * SQL that takes a database of schema version 17 back to schema version 16: a set's entries as rows
 * of set_entry_log, one per entry and set (the links of sets since deleted were deleted with them),
 * none in the entries (the caller sets user_version).
 */
export const UNDO_MIGRATION_17 = `
  CREATE TABLE set_entry_log (seq INTEGER NOT NULL, account_set_id TEXT NOT NULL, prev_seq INTEGER, balance_version INTEGER, balance_after TEXT, PRIMARY KEY (seq, account_set_id)) WITHOUT ROWID;
  INSERT INTO set_entry_log SELECT e.seq, l.key, l.value ->> 0, l.value ->> 1, l.value ->> 2 FROM entries e, json_each(e.set_links) l
    WHERE e.set_links IS NOT NULL AND l.key IN (SELECT account_id FROM accounts) ORDER BY e.seq, l.key;
  ALTER TABLE entries DROP COLUMN set_links;
`;

/**
 * SQL that takes a database of today's schema back to schema version 15: a set's entries in
 * set_entries keyed by (set, seq), no log, marks or heads (the caller sets user_version).
 */
export const UNDO_MIGRATIONS_AFTER_15 = `${UNDO_MIGRATION_18}${UNDO_MIGRATION_17}
  CREATE TABLE set_entries (account_set_id TEXT NOT NULL, seq INTEGER NOT NULL, balance_version INTEGER, balance_after TEXT, PRIMARY KEY (account_set_id, seq)) WITHOUT ROWID;
  INSERT INTO set_entries SELECT account_set_id, seq, balance_version, balance_after FROM set_entry_log;
  DROP TABLE set_entry_log; DROP TABLE set_entry_marks;
  ALTER TABLE balances DROP COLUMN log_count; ALTER TABLE balances DROP COLUMN log_prev; ALTER TABLE balances DROP COLUMN log_head;
`;

/**
 * SQL that takes a database of today's schema back to schema version 9 (before account sets and their entry log,
 * velocity controls, calculations, views, balance history and lean call records: the compact
 * calls of migration 15 are dropped, not turned back into rows), for tests that rebuild an older
 * database: the caller drops the rest and sets user_version.
 */
export const UNDO_MIGRATIONS_AFTER_9 = `${UNDO_MIGRATIONS_AFTER_15}
  DROP TABLE set_entries;
  DROP TABLE call_ids; DROP TABLE documents; ALTER TABLE executions DROP COLUMN calls;
  CREATE INDEX executions_by_created ON executions (created) WHERE parent_id IS NULL;
  DROP TABLE custom_index_rows; DROP TABLE custom_indexes; DROP TABLE view_record_versions; DROP TABLE view_records; DROP TABLE views;
  DROP TABLE calculation_balances; DROP TABLE calculation_attachments; DROP TABLE calculations;
  DROP TABLE velocity_balances; DROP TABLE velocity_attachments; DROP TABLE velocity_control_limits; DROP TABLE velocity_controls; DROP TABLE velocity_limits;
  DROP TABLE account_set_members;
  ALTER TABLE transactions DROP COLUMN exceptions;
  ALTER TABLE entries DROP COLUMN balance_after; ALTER TABLE entries DROP COLUMN balance_version; ALTER TABLE entries DROP COLUMN parent_account_ids;
  ALTER TABLE accounts DROP COLUMN enable_concurrent_posting; ALTER TABLE accounts DROP COLUMN journal_id; ALTER TABLE accounts DROP COLUMN is_account_set;
`;
