import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { databaseTarget, type GraphqlResponse, serverTarget, type Target } from '../deploy/target.js';
import { isPostgresUrl } from '../storage/pg/connection.js';
import { OperationError, UsageError } from './errors.js';
import type { Io, Options } from './io.js';

/*
 * Where a command sends GraphQL (--db, --server, $TALLY_SERVER or the project's tally.json), and
 * a request whose first error becomes the command's OperationError.
 */

/** A database path that must exist already: only serve, deploy and migrate create one, elsewhere a missing one is a typo. */
export function requireDatabase(path: string): void {
  // A PostgreSQL URL names a server: whether its schema is Tally's, opening it says.
  if (path === '' || (path !== ':memory:' && !isPostgresUrl(path) && !existsSync(path))) {
    throw new OperationError(
      `no database at ${JSON.stringify(path)}`,
      'NOT_FOUND',
      '`tally serve --db` or `tally deploy --db` creates one.',
    );
  }
}

/**
 * The "server" of a project's tally.json: the folder --project names, else the current folder (where
 * a missing tally.json is no error; the server may come from elsewhere).
 */
function projectServer(options: Options): string | null {
  const dir = options.project === undefined ? process.cwd() : String(options.project);
  const file = join(dir, 'tally.json');
  if (!existsSync(file)) {
    if (options.project !== undefined)
      throw new UsageError(`--project ${JSON.stringify(dir)}: there is no tally.json in that folder`);
    return null;
  }
  let meta: unknown;
  try {
    meta = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new OperationError(`${file}: not valid JSON: ${(error as Error).message}`, 'BAD_REQUEST');
  }
  const server = (meta as { server?: unknown } | null)?.server;
  return typeof server === 'string' ? server : null;
}

/**
 * Where to send GraphQL, the first that is given: --db, --server, $TALLY_SERVER, "server" of
 * tally.json (deploy's project folder, else --project or the current folder).
 */
export async function openTarget(
  options: Options,
  io: Io,
  deployServer?: string | null,
  createDb = false,
): Promise<Target> {
  if (options.db !== undefined) {
    if (options.key !== undefined) {
      // With the file in hand the engine runs with its own authority: a key there would only
      // look like a restriction that is not applied.
      throw new UsageError(
        '--key applies to --server: with --db the command runs as the engine itself (whoever holds the database file may do anything)',
      );
    }
    const path = String(options.db);
    if (path === '' || !createDb) requireDatabase(path);
    return databaseTarget(path);
  }
  const server =
    options.server ?? io.env.TALLY_SERVER ?? (deployServer === undefined ? projectServer(options) : deployServer);
  if (!server) {
    throw new UsageError(
      'say where: --db PATH, or --server URL with --key KEY (or $TALLY_SERVER and $TALLY_API_KEY), or run it in a folder whose tally.json has "server" (or --project DIR)',
    );
  }
  return serverTarget(String(server), options.key ? String(options.key) : io.env.TALLY_API_KEY);
}

/** The first GraphQL error as an OperationError (code, message, hint). */
export function operationError(result: GraphqlResponse): OperationError | null {
  const error = result.errors?.[0];
  if (!error) return null;
  const code = error.extensions?.code ? String(error.extensions.code) : 'FAILED';
  const hint = typeof error.extensions?.hint === 'string' ? error.extensions.hint : undefined;
  return new OperationError(error.message, code, hint, error.extensions?.code !== undefined);
}

export async function call(
  target: Target,
  query: string,
  variables?: Record<string, unknown>,
): Promise<Record<string, any>> {
  const result = await target.request(query, variables);
  const error = operationError(result);
  if (error) throw error;
  return result.data as Record<string, any>;
}
