// An engine for a test (SQLite in memory, or a fresh PostgreSQL schema under TALLY_TEST_BACKEND=postgres)
// and the requests run against it.
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

export function count(engine: Engine, table: string): number {
  return (engine.db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
}
