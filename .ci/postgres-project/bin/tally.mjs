#!/usr/bin/env node
// The CLI as the reference suites' runner starts it (`serve --db <file>`), on PostgreSQL instead:
// the file's path is replaced by a fresh schema on TALLY_TEST_PG_URL's server, so each suite gets
// a database of its own there, as it does in SQLite. Used by .ci/reference-suites.mjs as the
// runner's --project; everything else is the checkout's own CLI.
import { randomBytes } from 'node:crypto';
import { register } from 'tsx/esm/api';

process.env.NODE_ENV ??= 'production';
register();
const url = process.env.TALLY_TEST_PG_URL;
if (!url) throw new Error('TALLY_TEST_PG_URL names the PostgreSQL server');
const at = process.argv.indexOf('--db');
if (at >= 0) {
  const { PgConnection } = await import('../../../src/storage/pg/connection.ts');
  const schema = `suite_${randomBytes(8).toString('hex')}`;
  const admin = new PgConnection(url);
  admin.exec(`CREATE SCHEMA ${schema}`);
  admin.close();
  process.argv[at + 1] = `${url}${url.includes('?') ? '&' : '?'}options=-c%20search_path%3D${schema}`;
}
await import('../../../src/cli/main.ts');
