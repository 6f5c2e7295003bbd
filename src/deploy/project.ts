import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, join, relative } from 'node:path';

/**
 * A Tally project on disk:
 *
 *   tally.json                 {"name": "bank", "server": "http://127.0.0.1:4000/graphql"}
 *   accounts.json              the chart of accounts: [{accountId, code, name, normalBalanceType, ...}]
 *   tran-codes/<CODE>.json     one tran code each: {tranCodeId, code, params, transaction, entries, ...}
 *   tools/<name>.js            a tool's program: function run(event) { ... }
 *   tools/<name>.json          beside it, the rest: {actionId, description, inputSchema, outputSchema,
 *                              tools, policies, execution}
 *   triggers/<name>.json       {triggerId, name, on, filter, action: {name, version?}, input}
 *   clients.json               [{principal, name, policies}]
 *
 * The program stays a plain .js file (reviewable, lintable, typed with sandbox/tally.d.ts); what
 * the engine needs to know about it sits in the JSON beside it.
 */
export interface ToolFile {
  name: string;
  /** Paths relative to the project, for messages. */
  programPath: string;
  manifestPath: string;
  src: string;
  manifest: Record<string, any>;
}

export interface Project {
  dir: string;
  name: string;
  server: string | null;
  accounts: Array<Record<string, any>>;
  tranCodes: Array<{ path: string; definition: Record<string, any> }>;
  tools: ToolFile[];
  triggers: Array<{ path: string; definition: Record<string, any> }>;
  clients: Array<Record<string, any>>;
}

export class ProjectError extends Error {
  constructor(
    message: string,
    readonly file: string,
    readonly line?: number,
    readonly column?: number,
  ) {
    super(`${file}${line === undefined ? '' : `:${line}${column === undefined ? '' : `:${column}`}`}: ${message}`);
  }
}

function readJson(dir: string, path: string): any {
  const text = readFileSync(join(dir, path), 'utf8');
  try {
    return JSON.parse(text);
  } catch (error) {
    const message = (error as Error).message;
    const position = /position (\d+)/.exec(message);
    if (position) {
      const before = text.slice(0, Number(position[1]));
      const line = before.split('\n').length;
      const column = before.length - before.lastIndexOf('\n');
      throw new ProjectError(`not valid JSON: ${message}`, path, line, column);
    }
    throw new ProjectError(`not valid JSON: ${message}`, path);
  }
}

function listJson(dir: string, folder: string): string[] {
  const full = join(dir, folder);
  if (!existsSync(full)) return [];
  return readdirSync(full).filter((f) => f.endsWith('.json')).sort().map((f) => join(folder, f));
}

export function readProject(dir: string): Project {
  if (!existsSync(join(dir, 'tally.json'))) {
    throw new ProjectError('no tally.json here: is this a Tally project folder?', relative(process.cwd(), join(dir, 'tally.json')) || 'tally.json');
  }
  const meta = readJson(dir, 'tally.json');
  const accounts = existsSync(join(dir, 'accounts.json')) ? readJson(dir, 'accounts.json') : [];
  if (!Array.isArray(accounts)) throw new ProjectError('must be a JSON array of accounts', 'accounts.json');
  const clients = existsSync(join(dir, 'clients.json')) ? readJson(dir, 'clients.json') : [];
  if (!Array.isArray(clients)) throw new ProjectError('must be a JSON array of clients', 'clients.json');

  const tools: ToolFile[] = [];
  const toolDir = join(dir, 'tools');
  if (existsSync(toolDir)) {
    for (const file of readdirSync(toolDir).filter((f) => f.endsWith('.js')).sort()) {
      const name = basename(file, '.js');
      const programPath = join('tools', file);
      const manifestPath = join('tools', `${name}.json`);
      if (!existsSync(join(dir, manifestPath))) throw new ProjectError(`has no ${manifestPath} beside it (description, schemas, policies)`, programPath);
      tools.push({ name, programPath, manifestPath, src: readFileSync(join(dir, programPath), 'utf8'), manifest: readJson(dir, manifestPath) });
    }
  }
  return {
    dir,
    name: String(meta.name ?? basename(dir)),
    server: typeof meta.server === 'string' ? meta.server : null,
    accounts,
    tranCodes: listJson(dir, 'tran-codes').map((path) => ({ path, definition: readJson(dir, path) })),
    tools,
    triggers: listJson(dir, 'triggers').map((path) => ({ path, definition: readJson(dir, path) })),
    clients,
  };
}
