import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { deploy, DeployError, formatPlan } from '../deploy/deploy.js';
import { ProjectError, readProject } from '../deploy/project.js';
import { databaseTarget, type GraphqlResponse, serverTarget, type Target } from '../deploy/target.js';

/** Exit codes that mean something: 0 ok, 1 the operation or execution failed, 2 usage. */
export const EXIT = { ok: 0, failed: 1, usage: 2 } as const;

export class UsageError extends Error {}

export interface Options {
  db?: string;
  server?: string;
  key?: string;
  json?: boolean;
  [name: string]: string | boolean | undefined;
}

export interface Io {
  out(text: string): void;
  err(text: string): void;
  /** Whether stderr is a terminal (progress bars are drawn only there). */
  tty: boolean;
  env: Record<string, string | undefined>;
}

/** A progress bar on stderr, redrawn in place; silent when stderr is not a terminal. */
export function progress(io: Io, label: string) {
  let last = '';
  return {
    update(done: number, total: number) {
      if (!io.tty || total === 0) return;
      const width = 30;
      const filled = Math.round((done / total) * width);
      const line = `\r${label} [${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${done}/${total}`;
      if (line !== last) io.err(line);
      last = line;
    },
    done() {
      if (io.tty && last) io.err('\n');
    },
  };
}

/** A database path that must exist already: only serve, deploy and migrate create one, elsewhere a missing one is a typo. */
export function requireDatabase(path: string): void {
  if (path === '' || (path !== ':memory:' && !existsSync(path))) {
    throw new OperationError(`no database at ${JSON.stringify(path)}; \`tally serve --db\` or \`tally deploy --db\` creates one`);
  }
}

/** Where to send GraphQL. */
async function openTarget(options: Options, io: Io, projectServer?: string | null, createDb = false): Promise<Target> {
  if (options.db) {
    const path = String(options.db);
    if (path === '' || !createDb) requireDatabase(path);
    return databaseTarget(path);
  }
  const server = options.server ?? io.env.TALLY_SERVER ?? projectServer;
  if (!server) throw new UsageError('say where: --server URL (with --key or TALLY_API_KEY), or --db PATH');
  return serverTarget(String(server), options.key ? String(options.key) : io.env.TALLY_API_KEY);
}

function firstError(result: GraphqlResponse): string | null {
  const error = result.errors?.[0];
  if (!error) return null;
  const code = error.extensions?.code ? `${String(error.extensions.code)}: ` : '';
  const hint = typeof error.extensions?.hint === 'string' ? `\n  hint: ${error.extensions.hint}` : '';
  return `${code}${error.message}${hint}`;
}

async function call(target: Target, query: string, variables?: Record<string, unknown>): Promise<Record<string, any>> {
  const result = await target.request(query, variables);
  const error = firstError(result);
  if (error) throw new OperationError(error);
  return result.data as Record<string, any>;
}

export class OperationError extends Error {}

function parseInput(value: string | boolean | undefined): unknown {
  if (value === undefined || value === true) return {};
  const text = String(value).startsWith('@') ? readFileSync(String(value).slice(1), 'utf8') : String(value);
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new UsageError(`--input is not valid JSON: ${(error as Error).message}`);
  }
}

function positiveInt(value: string | boolean | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`--${name} must be a positive integer, got ${JSON.stringify(value)}`);
  return n;
}

export async function deployCommand(args: string[], options: Options, io: Io): Promise<number> {
  const dir = resolve(args[0] ?? '.');
  let project;
  try {
    project = readProject(dir);
  } catch (error) {
    if (error instanceof ProjectError) {
      io.err(`tally: ${error.message}\n`);
      return EXIT.failed;
    }
    throw error;
  }
  // A dry run against a database that does not exist yet checks against an empty one, in memory,
  // and leaves no file behind.
  const dryRun = options['dry-run'] === true;
  const fresh = options.db !== undefined && !existsSync(String(options.db));
  const target = await openTarget(dryRun && fresh ? { ...options, db: ':memory:' } : options, io, project.server, true);
  const bar = progress(io, 'planning');
  try {
    const result = await deploy(project, target, { dryRun, onProgress: bar.update });
    bar.done();
    if (options.json) io.out(`${JSON.stringify({ applied: result.applied, plan: result.plan.map(({ kind, name, change, version }) => ({ kind, name, change, version })), keys: result.keys }, null, 2)}\n`);
    else {
      io.out(`${formatPlan(result.plan)}\n`);
      const changes = result.plan.filter((p) => p.change !== 'unchanged').length;
      io.out(changes === 0 ? 'nothing to do\n' : result.applied ? `applied ${changes} change(s) to ${target.describe} in one transaction\n` : `dry run: ${changes} change(s) checked and rolled back\n`);
      for (const [principal, key] of Object.entries(result.keys)) io.out(`API key of client ${principal} (shown once): ${key}\n`);
    }
    return EXIT.ok;
  } catch (error) {
    bar.done();
    if (error instanceof DeployError || error instanceof ProjectError) {
      io.err(`tally: ${error.message}\n`);
      return EXIT.failed;
    }
    throw error;
  } finally {
    await target.close();
  }
}

const EXECUTION_FIELDS = `executionId status actionName actionVersion attempt output error { code message hint }`;

async function latestVersion(target: Target, name: string): Promise<number> {
  const data = await call(target, 'query($n: String!) { actions { action(name: $n) { version versions { version status } } } }', { n: name });
  const active = (data.actions.action.versions as Array<{ version: number; status: string }>).filter((v) => v.status === 'ACTIVE').at(-1);
  if (!active) throw new OperationError(`${name} has no ACTIVE version`);
  return active.version;
}

export async function runCommand(verb: 'invoke' | 'start', args: string[], options: Options, io: Io): Promise<number> {
  const name = args[0];
  if (!name) throw new UsageError(`tally ${verb} <tool> --input JSON|@file [--version N] [--execution-id ID]`);
  const target = await openTarget(options, io);
  try {
    const version = positiveInt(options.version, 'version') ?? (verb === 'invoke' ? await latestVersion(target, name) : undefined);
    const executionId = options['execution-id'] ? String(options['execution-id']) : randomUUID();
    const field = verb === 'invoke' ? 'invokeAction' : 'startAction';
    const data = await call(target, `mutation($n: String!, $i: InvokeInput!) { actions { ${field}(name: $n, input: $i) { ${EXECUTION_FIELDS} } } }`, {
      n: name,
      i: { executionId, actionVersion: version ?? null, input: parseInput(options.input) },
    });
    const execution = data.actions[field];
    if (options.json) io.out(`${JSON.stringify(execution, null, 2)}\n`);
    else {
      io.out(`${execution.actionName}@${execution.actionVersion} ${execution.executionId} ${execution.status}\n`);
      if (execution.output !== null && execution.output !== undefined) io.out(`${JSON.stringify(execution.output, null, 2)}\n`);
      if (execution.error) io.out(`${execution.error.code}: ${execution.error.message}${execution.error.hint ? `\n  hint: ${execution.error.hint}` : ''}\n`);
    }
    return execution.status === 'FAILED' ? EXIT.failed : EXIT.ok;
  } finally {
    await target.close();
  }
}

export async function executionsCommand(options: Options, io: Io): Promise<number> {
  const target = await openTarget(options, io);
  try {
    const where: Record<string, unknown> = {};
    if (options.status) where.status = String(options.status).toUpperCase();
    if (options.action) {
      where.actionId = (await call(target, 'query($n: String!) { actions { action(name: $n) { actionId } } }', { n: String(options.action) })).actions.action.actionId;
    }
    const data = await call(target, `query($w: ExecutionFilter, $f: Int!) { actions { executions(first: $f, where: $w) { nodes { ${EXECUTION_FIELDS} created } } } }`, {
      w: where,
      f: positiveInt(options.first, 'first') ?? 50,
    });
    const nodes = data.actions.executions.nodes as Array<Record<string, any>>;
    if (options.json) io.out(`${JSON.stringify(nodes, null, 2)}\n`);
    else for (const n of nodes) io.out(`${n.created}  ${n.executionId}  ${String(n.status).padEnd(9)} ${n.actionName}@${n.actionVersion ?? '-'}  attempt ${n.attempt}${n.error ? `  ${n.error.code}` : ''}\n`);
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

const TREE_DEPTH = 6;
function treeFields(depth: number): string {
  const own = 'executionId kind actionName actionVersion status error { code message } invocation { durationMs }';
  return depth === 0 ? own : `${own} children { ${treeFields(depth - 1)} }`;
}

/** The call tree, one line per call: status, duration, error code. */
export function drawTree(node: Record<string, any>, prefix = '', last = true, root = true): string {
  const label = `${node.kind === 'TOOL' ? `${node.actionName}@${node.actionVersion ?? '?'}` : node.actionName} ${node.status}`;
  const ms = node.invocation?.durationMs;
  const line = `${root ? '' : `${prefix}${last ? '└─ ' : '├─ '}`}${label}${ms === null || ms === undefined ? '' : ` ${ms} ms`}${node.error ? ` ${node.error.code}` : ''}\n`;
  const children = (node.children ?? []) as Array<Record<string, any>>;
  const childPrefix = root ? '' : `${prefix}${last ? '   ' : '│  '}`;
  return line + children.map((c, i) => drawTree(c, childPrefix, i === children.length - 1, false)).join('');
}

export async function executionCommand(args: string[], options: Options, io: Io): Promise<number> {
  if (!args[0]) throw new UsageError('tally execution <execution id>');
  const target = await openTarget(options, io);
  try {
    const data = await call(target, `query($e: UUID!) { actions { execution(executionId: $e) { ${treeFields(TREE_DEPTH)} } } }`, { e: args[0] });
    const execution = data.actions.execution;
    io.out(options.json ? `${JSON.stringify(execution, null, 2)}\n` : drawTree(execution));
    return execution.status === 'FAILED' ? EXIT.failed : EXIT.ok;
  } finally {
    await target.close();
  }
}

export async function accountsCommand(options: Options, io: Io): Promise<number> {
  const target = await openTarget(options, io);
  try {
    const data = await call(target, 'query($f: Int!) { accounts(first: $f) { nodes { accountId code name status normalBalanceType } } }', { f: positiveInt(options.first, 'first') ?? 100 });
    const nodes = data.accounts.nodes as Array<{ accountId: string; code: string; name: string; status: string; normalBalanceType: string }>;
    if (options.json) io.out(`${JSON.stringify(nodes, null, 2)}\n`);
    else for (const a of nodes) io.out(`${a.code.padEnd(16)} ${a.accountId}  ${a.status.padEnd(8)} ${a.normalBalanceType.padEnd(6)} ${a.name}\n`);
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

export async function balanceCommand(args: string[], options: Options, io: Io): Promise<number> {
  const ref = args[0];
  if (!ref) throw new UsageError('tally balance <account code or id> [--currency USD]');
  const target = await openTarget(options, io);
  try {
    const byId = /^[0-9a-f-]{36}$/i.test(ref);
    const data = await call(target, `query($id: UUID, $code: String, $c: CurrencyCode) { account(id: $id, code: $code) { code balance(currency: $c) {
      currency settled { normalBalance { units } } pending { normalBalance { units } } encumbrance { normalBalance { units } }
      available(layer: PENDING) { normalBalance { units } } } } }`, { id: byId ? ref : null, code: byId ? null : ref, c: options.currency ? String(options.currency) : 'USD' });
    const b = data.account.balance;
    if (options.json) io.out(`${JSON.stringify({ account: data.account.code, ...b }, null, 2)}\n`);
    else {
      io.out(`${data.account.code} (${b.currency})\n`);
      io.out(`  settled      ${b.settled.normalBalance.units}\n  pending      ${b.pending.normalBalance.units}\n  encumbrance  ${b.encumbrance.normalBalance.units}\n  available    ${b.available.normalBalance.units}\n`);
    }
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

/** A CSV line split on commas, with "quoted, fields" and "" escapes. */
export function csvFields(line: string): string[] {
  const fields: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i]!;
    if (quoted) {
      if (ch === '"' && line[i + 1] === '"') {
        field += '"';
        i++;
      } else if (ch === '"') quoted = false;
      else field += ch;
    } else if (ch === '"') quoted = true;
    else if (ch === ',') {
      fields.push(field);
      field = '';
    } else field += ch;
  }
  fields.push(field);
  return fields;
}

/**
 * tally import <file.csv>: the header names transactionId, tranCode and the params; each row is a
 * postTransaction. Rows go in batches of 100 per request (one transaction each); transactionIds make
 * a re-run after a failure safe (posted rows return as they were).
 */
export async function importCommand(args: string[], options: Options, io: Io): Promise<number> {
  const file = args[0];
  if (!file || !existsSync(file)) throw new UsageError('tally import <file.csv>   (header: transactionId,tranCode,<param>,...)');
  const lines = readFileSync(file, 'utf8').split(/\r?\n/).filter((l) => l.trim() !== '');
  const header = csvFields(lines[0] ?? '');
  if (!header.includes('transactionId') || !header.includes('tranCode')) throw new UsageError(`${file}:1: the header needs transactionId and tranCode columns`);
  const rows = lines.slice(1).map((line, i) => {
    const values = csvFields(line);
    if (values.length !== header.length) throw new UsageError(`${file}:${i + 2}: ${values.length} fields, the header has ${header.length}`);
    const record: Record<string, string> = {};
    header.forEach((h, j) => (record[h] = values[j]!));
    const { transactionId, tranCode, ...params } = record;
    return { transactionId, tranCode, params };
  });
  const target = await openTarget(options, io);
  const bar = progress(io, 'importing');
  const BATCH = 100;
  try {
    for (let start = 0; start < rows.length; start += BATCH) {
      const batch = rows.slice(start, start + BATCH);
      const declarations = batch.map((_, i) => `$t${i}: TransactionInput!`).join(', ');
      const fields = batch.map((_, i) => `r${i}: postTransaction(input: $t${i}) { transactionId }`).join('\n');
      const variables = Object.fromEntries(batch.map((row, i) => [`t${i}`, row]));
      const result = await target.request(`mutation Import(${declarations}) {\n${fields}\n}`, variables);
      if (result.errors?.length) {
        const path = result.errors[0]!.path?.[0];
        const row = typeof path === 'string' ? start + Number(path.slice(1)) + 2 : undefined;
        bar.done();
        io.err(`tally: ${file}${row ? `:${row}` : ''}: ${firstError(result)}\nrows ${start + 2}-${start + batch.length + 1} were not imported (rows before them were)\n`);
        return EXIT.failed;
      }
      bar.update(Math.min(rows.length, start + BATCH), rows.length);
    }
    bar.done();
    io.out(options.json ? `${JSON.stringify({ imported: rows.length })}\n` : `imported ${rows.length} transaction(s)\n`);
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

