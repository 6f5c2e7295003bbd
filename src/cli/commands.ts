import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { databaseTarget, type GraphqlResponse, serverTarget, type Target } from '../deploy/target.js';
import type { Engine } from '../engine.js';
import { isPostgresUrl } from '../storage/pg/connection.js';
import { WAIT_ENDS } from '../execution/status.js';
import { EXIT, OperationError, UsageError } from './errors.js';

export interface Options {
  db?: string;
  server?: string;
  key?: string;
  project?: string;
  json?: boolean;
  [name: string]: string | boolean | string[] | undefined;
}

export interface Io {
  out(text: string): void;
  err(text: string): void;
  /** Whether stderr is a terminal (progress bars are drawn only there). */
  tty: boolean;
  env: Record<string, string | undefined>;
  /** Standard input, read whole (for `tally gql -`). */
  stdin?: () => Promise<string>;
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
function operationError(result: GraphqlResponse): OperationError | null {
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

/** The text of a file named on the command line; a missing one is said plainly. */
function readArgFile(path: string, what: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT')
      throw new OperationError(
        `${what} ${JSON.stringify(path)}: no such file`,
        'NOT_FOUND',
        'Check the path (it is relative to the current folder).',
      );
    throw new OperationError(`${what} ${JSON.stringify(path)}: cannot be read: ${code ?? (error as Error).message}`);
  }
}

/** A JSON option: the text itself, or @file. */
export function parseJsonOption(value: string | boolean | string[] | undefined, name: string): unknown {
  if (value === undefined) return undefined;
  const text = String(value).startsWith('@') ? readArgFile(String(value).slice(1), `--${name}`) : String(value);
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new UsageError(`--${name} is not valid JSON: ${(error as Error).message}`);
  }
}

export function positiveInt(value: string | boolean | string[] | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1)
    throw new UsageError(`--${name} must be a positive integer, got ${JSON.stringify(value)}`);
  return n;
}

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function requireUuid(value: string | undefined, what: string): string {
  if (value === undefined) throw new UsageError(`say which ${what}`);
  if (!UUID.test(value)) throw new UsageError(`${what} ${JSON.stringify(value)} is not a UUID`);
  return value;
}

/** At most one positional argument, the one a command names. */
export function onlyArg(args: string[], what: string): string | undefined {
  if (args.length > 1)
    throw new UsageError(`one ${what}, got ${args.length}: ${args.map((a) => JSON.stringify(a)).join(' ')}`);
  return args[0];
}

export async function deployCommand(args: string[], options: Options, io: Io): Promise<number> {
  const dir = resolve(onlyArg(args, 'project folder') ?? '.');
  const { deploy, DeployError, formatPlan } = await import('../deploy/deploy.js');
  const { ProjectError, readProject } = await import('../deploy/project.js');
  let project;
  try {
    project = readProject(dir);
  } catch (error) {
    if (error instanceof ProjectError) throw new OperationError(error.message, 'BAD_REQUEST');
    throw error;
  }
  // A dry run against a database that does not exist yet checks against an empty one, in memory,
  // and leaves no file behind.
  const dryRun = options['dry-run'] === true;
  const overwriteRuntimeChanges = options['overwrite-runtime-changes'] === true;
  const fresh = options.db !== undefined && !existsSync(String(options.db));
  const target = await openTarget(dryRun && fresh ? { ...options, db: ':memory:' } : options, io, project.server, true);
  const bar = progress(io, 'planning');
  try {
    const result = await deploy(project, target, { dryRun, overwriteRuntimeChanges, onProgress: bar.update });
    bar.done();
    if (options.json)
      io.out(
        `${JSON.stringify({ applied: result.applied, plan: result.plan.map(({ kind, name, change, version, drift }) => ({ kind, name, change, version, ...(drift ? { drift } : {}) })), keys: result.keys }, null, 2)}\n`,
      );
    else {
      io.out(`${formatPlan(result.plan)}\n`);
      const changes = result.plan.filter((p) => p.change !== 'unchanged').length;
      io.out(
        changes === 0
          ? 'nothing to do\n'
          : result.applied
            ? `applied ${changes} change(s) to ${target.describe} in one transaction\n`
            : `dry run: ${changes} change(s) checked and rolled back\n`,
      );
      for (const [principal, key] of Object.entries(result.keys))
        io.out(`API key of client ${principal} (shown once): ${key}\n`);
    }
    return EXIT.ok;
  } catch (error) {
    bar.done();
    // A refused plan is shown whole: what would have been done, and each conflict under its record.
    if (error instanceof DeployError && error.code === 'CONFLICT' && !options.json)
      io.out(`${formatPlan(error.plan)}\n`);
    if (error instanceof DeployError) throw new OperationError(error.message, error.code ?? 'FAILED', error.hint);
    if (error instanceof ProjectError) throw new OperationError(error.message);
    throw error;
  } finally {
    await target.close();
  }
}

const EXECUTION_FIELDS = `executionId status actionName actionVersion attempt output error { code message hint }`;

async function latestVersion(target: Target, name: string): Promise<number> {
  const data = await call(
    target,
    'query($n: String!) { actions { action(name: $n) { version versions { version status } } } }',
    { n: name },
  );
  const active = (data.actions.action.versions as Array<{ version: number; status: string }>)
    .filter((v) => v.status === 'ACTIVE')
    .at(-1);
  if (!active) throw new OperationError(`${name} has no ACTIVE version`, 'NOT_FOUND');
  return active.version;
}

/** `code: message` and the hint under it, as every error of an execution is shown. */
export function formatError(error: { code: string; message: string; hint?: string | null }, indent = ''): string {
  return `${indent}${error.code}: ${error.message}${error.hint ? `\n${indent}  hint: ${error.hint}` : ''}\n`;
}

/** How long `tally start --wait` waits by default, in seconds. */
const WAIT_TIMEOUT_S = 120;
/** One long-poll's waitMs: under the server's executionWaitMsMax (30 s by default) and its requestTimeoutMs. */
const WAIT_POLL_MS = 25_000;
const WAIT_QUERY = `query($e: UUID!, $w: Int) { actions { execution(executionId: $e, waitMs: $w) { ${EXECUTION_FIELDS} } } }`;

/**
 * Wait for a started execution until it is terminal or timeoutMs passed; returns it as last read.
 * A server: long-polls (`execution(waitMs:)`). A database file: nothing else may be running its
 * queue, so this process runs a worker (drainAll) until the execution ends or time runs out.
 */
async function waitForExecution(
  target: Target,
  execution: Record<string, any>,
  timeoutMs: number,
): Promise<Record<string, any>> {
  const end = Date.now() + timeoutMs;
  const read = async (waitMs: number) =>
    (await call(target, WAIT_QUERY, { e: execution.executionId, w: waitMs })).actions.execution as Record<string, any>;
  if (!('engine' in target)) {
    while (!WAIT_ENDS.has(execution.status)) {
      const left = end - Date.now();
      if (left <= 0) break;
      execution = await read(Math.min(WAIT_POLL_MS, left));
    }
    return execution;
  }
  const worker = (target as Target & { engine: Engine }).engine.createWorker({ owner: `cli-${process.pid}` });
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>(
    (resolve) => (timer = setTimeout(() => resolve('timeout'), Math.max(0, end - Date.now()))),
  );
  try {
    while (!WAIT_ENDS.has(execution.status) && Date.now() < end) {
      if ((await Promise.race([worker.drainAll(), timedOut])) === 'timeout') break;
      execution = await read(0);
      // Not due yet (a retry's backoff): look again shortly.
      if (!WAIT_ENDS.has(execution.status))
        await Promise.race([new Promise((resolve) => setTimeout(resolve, 250)), timedOut]);
    }
    execution = await read(0);
  } finally {
    clearTimeout(timer);
    // A run still in flight goes back to the queue, due at once, for the next worker.
    await worker.stop();
  }
  return execution;
}

export async function runCommand(verb: 'invoke' | 'start', args: string[], options: Options, io: Io): Promise<number> {
  const name = onlyArg(args, 'tool');
  if (!name) throw new UsageError('say which tool');
  // A tool run with no input at all is almost always a forgotten flag, and it would record a failure.
  if (options.input === undefined)
    throw new UsageError("--input is required (--input '{}' for a tool that takes no input)");
  const input = parseJsonOption(options.input, 'input');
  const version = positiveInt(options.version, 'version');
  const executionId =
    options['execution-id'] === undefined
      ? randomUUID()
      : requireUuid(String(options['execution-id']), '--execution-id');
  const wait = options.wait === true;
  if (options.timeout !== undefined && !wait) throw new UsageError('--timeout applies to --wait');
  const timeoutMs = (positiveInt(options.timeout, 'timeout') ?? WAIT_TIMEOUT_S) * 1000;
  const target = await openTarget(options, io);
  try {
    const actionVersion = version ?? (verb === 'invoke' ? await latestVersion(target, name) : undefined);
    const field = verb === 'invoke' ? 'invokeAction' : 'startAction';
    const data = await call(
      target,
      `mutation($n: String!, $i: InvokeInput!) { actions { ${field}(name: $n, input: $i) { ${EXECUTION_FIELDS} } } }`,
      {
        n: name,
        i: { executionId, actionVersion: actionVersion ?? null, input },
      },
    );
    let execution = data.actions[field];
    let waitedOut = false;
    if (verb === 'start' && wait && !WAIT_ENDS.has(execution.status)) {
      execution = await waitForExecution(target, execution, timeoutMs);
      waitedOut = !WAIT_ENDS.has(execution.status);
    }
    if (options.json) io.out(`${JSON.stringify(execution, null, 2)}\n`);
    else {
      io.out(`${execution.actionName}@${execution.actionVersion} ${execution.executionId} ${execution.status}\n`);
      if (execution.output !== null && execution.output !== undefined)
        io.out(`${JSON.stringify(execution.output, null, 2)}\n`);
      if (execution.error)
        io.out(
          `${formatError(execution.error)}  (tally execution ${execution.executionId} shows the stack, logs and attempts)\n`,
        );
    }
    if (waitedOut) {
      io.err(
        `still ${execution.status} after ${timeoutMs / 1000} s; tally execution ${execution.executionId} shows it\n`,
      );
      return EXIT.failed;
    }
    if (execution.status === 'WAITING_APPROVAL') {
      io.err(
        `waiting for a person to approve a call: tally approvals, then tally approve <id> (or reject); tally execution ${execution.executionId} shows the run\n`,
      );
      return EXIT.failed;
    }
    return execution.status === 'FAILED' ? EXIT.failed : EXIT.ok;
  } finally {
    await target.close();
  }
}

const STATUSES = ['QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'];

/** tally executions: newest first, a page at a time; the last line gives the next page's cursor. */
export async function executionsCommand(args: string[], options: Options, io: Io): Promise<number> {
  if (args.length > 0)
    throw new UsageError(`unexpected argument ${JSON.stringify(args[0])} (tally execution <id> shows one execution)`);
  const where: Record<string, unknown> = {};
  if (options.status !== undefined) {
    const status = String(options.status).toUpperCase();
    if (!STATUSES.includes(status))
      throw new UsageError(`--status ${JSON.stringify(options.status)} is not one of ${STATUSES.join(', ')}`);
    where.status = status;
  }
  if (options.since !== undefined) {
    const since = new Date(String(options.since));
    if (Number.isNaN(since.getTime()))
      throw new UsageError(
        `--since ${JSON.stringify(options.since)} is not an ISO time (2026-11-30T12:00:00Z or 2026-11-30)`,
      );
    where.since = since.toISOString();
  }
  const first = positiveInt(options.limit, 'limit') ?? positiveInt(options.first, 'first') ?? 20;
  const target = await openTarget(options, io);
  try {
    if (options.action !== undefined) {
      where.actionId = (
        await call(target, 'query($n: String!) { actions { action(name: $n) { actionId } } }', {
          n: String(options.action),
        })
      ).actions.action.actionId;
    }
    const data = await call(
      target,
      `query($w: ExecutionFilter, $f: Int!, $a: String) { actions { executions(first: $f, after: $a, where: $w, order: NEWEST_FIRST) { nodes { ${EXECUTION_FIELDS} created caller { principal transport } } pageInfo { hasNextPage endCursor } } } }`,
      { w: where, f: first, a: options.after === undefined ? null : String(options.after) },
    );
    const { nodes, pageInfo } = data.actions.executions as {
      nodes: Array<Record<string, any>>;
      pageInfo: { hasNextPage: boolean; endCursor: string | null };
    };
    const next = pageInfo.hasNextPage ? pageInfo.endCursor : null;
    if (options.json) io.out(`${JSON.stringify({ executions: nodes, next }, null, 2)}\n`);
    else {
      if (nodes.length === 0) io.out('no executions\n');
      for (const n of nodes)
        io.out(
          `${n.created}  ${n.executionId}  ${String(n.status).padEnd(9)} ${n.actionName}@${n.actionVersion ?? '-'}  attempt ${n.attempt}${n.error ? `  ${n.error.code}` : ''}${n.caller?.transport ? `  via ${n.caller.transport}` : ''}\n`,
        );
      if (next) io.out(`more… --after ${next}\n`);
    }
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

const TREE_DEPTH = 6;
function treeFields(depth: number): string {
  const own =
    'executionId kind actionName actionVersion status error { code message } invocation { durationMs } model { model inputTokens outputTokens latencyMs }';
  return depth === 0 ? own : `${own} children { ${treeFields(depth - 1)} }`;
}

/** The call tree, one line per call: status, duration, error code. */
export function drawTree(node: Record<string, any>, prefix = '', last = true, root = true): string {
  const model = node.model as
    | { model: string; inputTokens: number | null; outputTokens: number | null; latencyMs: number }
    | null
    | undefined;
  const name =
    node.kind === 'TOOL' || node.kind === 'AGENT' || (node.kind === 'MODEL' && node.actionVersion !== null)
      ? `${node.actionName}@${node.actionVersion ?? '?'}`
      : node.actionName;
  const tokens =
    model && (model.inputTokens !== null || model.outputTokens !== null)
      ? ` ${model.inputTokens ?? '?'}→${model.outputTokens ?? '?'} tokens`
      : '';
  const label = `${name}${model ? ` ${model.model}` : ''} ${node.status}${tokens}`;
  const ms = node.invocation?.durationMs ?? model?.latencyMs;
  const line = `${root ? '' : `${prefix}${last ? '└─ ' : '├─ '}`}${label}${ms === null || ms === undefined ? '' : ` ${ms} ms`}${node.error ? ` ${node.error.code}` : ''}\n`;
  const children = (node.children ?? []) as Array<Record<string, any>>;
  const childPrefix = root ? '' : `${prefix}${last ? '   ' : '│  '}`;
  return line + children.map((c, i) => drawTree(c, childPrefix, i === children.length - 1, false)).join('');
}

const ERROR_FIELDS = 'error { code message hint details }';
const DETAIL_FIELDS = `input output created runAt triggerId caller { principal transport } ${ERROR_FIELDS}
  invocations { attempt status started finished durationMs logs ${ERROR_FIELDS} }`;

/** An error's stack (details.stack), indented under it. */
function formatStack(error: { details?: unknown }, indent: string): string {
  const stack = (error.details as { stack?: unknown } | null | undefined)?.stack;
  return typeof stack === 'string'
    ? `${indent}stack:\n${stack
        .split('\n')
        .filter((l) => l.trim() !== '')
        .map((l) => `${indent}  ${l.trim()}`)
        .join('\n')}\n`
    : '';
}

/** What `tally execution <id>` prints under the call tree. */
function formatExecution(e: Record<string, any>): string {
  let text = `\nexecution  ${e.executionId}\ncreated    ${e.created} by ${e.caller.principal}${e.caller.transport ? ` over ${e.caller.transport}` : ''}${e.triggerId ? ` (trigger ${e.triggerId})` : ''}\n`;
  if (e.status === 'QUEUED' && e.runAt) text += `due        ${e.runAt}\n`;
  text += `input      ${JSON.stringify(e.input)}\n`;
  if (e.output !== null && e.output !== undefined) text += `output     ${JSON.stringify(e.output)}\n`;
  if (e.error)
    text += `error      ${formatError(e.error, '').trimEnd().replace(/\n/g, '\n           ')}\n${formatStack(e.error, '           ')}`;
  const attempts = (e.invocations ?? []) as Array<Record<string, any>>;
  text += `attempts   ${attempts.length}\n`;
  for (const a of attempts) {
    text += `  #${a.attempt} ${a.status} ${a.started}${a.durationMs === null ? '' : ` ${a.durationMs} ms`}\n`;
    if (a.error) text += formatError(a.error, '     ') + formatStack(a.error, '     ');
    for (const log of a.logs as string[]) text += `     log: ${log}\n`;
  }
  return text;
}

export async function executionCommand(args: string[], options: Options, io: Io): Promise<number> {
  const id = requireUuid(onlyArg(args, 'execution id'), 'execution id');
  const target = await openTarget(options, io);
  try {
    const data = await call(
      target,
      `query($e: UUID!) { actions { execution(executionId: $e) { ${treeFields(TREE_DEPTH)} ${DETAIL_FIELDS} } } }`,
      { e: id },
    );
    const execution = data.actions.execution;
    io.out(options.json ? `${JSON.stringify(execution, null, 2)}\n` : drawTree(execution) + formatExecution(execution));
    return execution.status === 'FAILED' ? EXIT.failed : EXIT.ok;
  } finally {
    await target.close();
  }
}

export async function accountsCommand(args: string[], options: Options, io: Io): Promise<number> {
  if (args.length > 0)
    throw new UsageError(`unexpected argument ${JSON.stringify(args[0])} (tally balance <account> shows one account)`);
  const first = positiveInt(options.limit, 'limit') ?? positiveInt(options.first, 'first') ?? 100;
  const currency = options.currency === undefined ? 'USD' : String(options.currency);
  const target = await openTarget(options, io);
  try {
    const data = await call(
      target,
      `query($f: Int!, $c: CurrencyCode) { accounts(first: $f) { nodes { accountId code name status normalBalanceType
        balance(currency: $c) { settled { normalBalance { units } } available(layer: PENDING) { normalBalance { units } } } } pageInfo { hasNextPage } } }`,
      { f: first, c: currency },
    );
    const nodes = data.accounts.nodes as Array<Record<string, any>>;
    if (options.json)
      io.out(
        `${JSON.stringify(
          nodes.map(({ balance, ...a }) => ({
            ...a,
            currency,
            settled: balance.settled.normalBalance.units,
            available: balance.available.normalBalance.units,
          })),
          null,
          2,
        )}\n`,
      );
    else {
      const rows = nodes.map(
        (a) =>
          [
            a.code,
            a.accountId,
            a.status,
            a.normalBalanceType,
            a.balance.settled.normalBalance.units,
            a.balance.available.normalBalance.units,
            a.name,
          ] as string[],
      );
      const header = ['code', 'accountId', 'status', 'normal', `settled ${currency}`, 'available', 'name'];
      io.out(formatTable(header, rows, [4, 5]));
      if (data.accounts.pageInfo.hasNextPage) io.out(`more… (--limit ${first} reached)\n`);
    }
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

/** Columns padded to their widest cell; the columns named in `right` (amounts) aligned right. */
export function formatTable(header: string[], rows: string[][], right: number[] = []): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : right.includes(i) ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return `${[header, ...rows].map(line).join('\n')}\n`;
}

export async function balanceCommand(args: string[], options: Options, io: Io): Promise<number> {
  const ref = onlyArg(args, 'account');
  if (!ref) throw new UsageError('say which account (its code or id)');
  const target = await openTarget(options, io);
  try {
    const byId = UUID.test(ref);
    const data = await call(
      target,
      `query($id: UUID, $code: String, $c: CurrencyCode) { account(id: $id, code: $code) { code balance(currency: $c) {
      currency settled { normalBalance { units } } pending { normalBalance { units } } encumbrance { normalBalance { units } }
      available(layer: PENDING) { normalBalance { units } } } } }`,
      { id: byId ? ref : null, code: byId ? null : ref, c: options.currency ? String(options.currency) : 'USD' },
    );
    const b = data.account.balance;
    if (options.json) io.out(`${JSON.stringify({ account: data.account.code, ...b }, null, 2)}\n`);
    else {
      io.out(`${data.account.code} (${b.currency})\n`);
      io.out(
        `  settled      ${b.settled.normalBalance.units}\n  pending      ${b.pending.normalBalance.units}\n  encumbrance  ${b.encumbrance.normalBalance.units}\n  available    ${b.available.normalBalance.units}\n`,
      );
    }
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

const TRANSACTION_FIELDS = 'transactionId effective description voidOf voidedBy tranCode { code } tranCodeVersion';

/** tally transactions: in posting order; with --account, that account's entries with their transaction. */
export async function transactionsCommand(args: string[], options: Options, io: Io): Promise<number> {
  if (args.length > 0)
    throw new UsageError(`unexpected argument ${JSON.stringify(args[0])} (--account A lists one account's)`);
  const first = positiveInt(options.limit, 'limit') ?? 20;
  const target = await openTarget(options, io);
  try {
    if (options.account === undefined) {
      const data = await call(
        target,
        `query($f: Int!) { transactions(first: $f) { nodes { ${TRANSACTION_FIELDS} } pageInfo { hasNextPage } } }`,
        { f: first },
      );
      const nodes = data.transactions.nodes as Array<Record<string, any>>;
      if (options.json) io.out(`${JSON.stringify(nodes, null, 2)}\n`);
      else {
        if (nodes.length === 0) io.out('no transactions\n');
        for (const t of nodes)
          io.out(
            `${t.effective}  ${t.transactionId}  ${`${t.tranCode.code}@${t.tranCodeVersion}`.padEnd(14)} ${t.description ?? ''}${t.voidOf ? `  (voids ${t.voidOf})` : ''}${t.voidedBy ? `  (voided by ${t.voidedBy})` : ''}\n`,
          );
        if (data.transactions.pageInfo.hasNextPage) io.out(`more… (--limit ${first} reached)\n`);
      }
      return EXIT.ok;
    }
    const ref = String(options.account);
    const byId = UUID.test(ref);
    const data = await call(
      target,
      `query($id: UUID, $code: String, $f: Int!) { account(id: $id, code: $code) { code entries(first: $f) {
        nodes { direction layer units currency transaction { ${TRANSACTION_FIELDS} } } pageInfo { hasNextPage } } } }`,
      { id: byId ? ref : null, code: byId ? null : ref, f: first },
    );
    const entries = data.account.entries.nodes as Array<Record<string, any>>;
    if (options.json) io.out(`${JSON.stringify(entries, null, 2)}\n`);
    else {
      if (entries.length === 0) io.out(`no entries on ${data.account.code}\n`);
      for (const e of entries) {
        const t = e.transaction;
        io.out(
          `${t.effective}  ${t.transactionId}  ${`${t.tranCode.code}@${t.tranCodeVersion}`.padEnd(14)} ${String(e.direction).padEnd(6)} ${String(e.units).padStart(12)} ${e.currency} ${String(e.layer).padEnd(11)} ${t.description ?? ''}\n`,
        );
      }
      if (data.account.entries.pageInfo.hasNextPage) io.out(`more… (--limit ${first} reached)\n`);
    }
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

/** `--param k=v` (repeated) as the tran code's params; values stay strings (decimals travel as strings). */
function parseParams(values: string | boolean | string[] | undefined): Record<string, string> {
  const list = values === undefined ? [] : Array.isArray(values) ? values : [String(values)];
  const params: Record<string, string> = {};
  for (const item of list) {
    const eq = item.indexOf('=');
    if (eq < 1) throw new UsageError(`--param ${JSON.stringify(item)} is not name=value`);
    params[item.slice(0, eq)] = item.slice(eq + 1);
  }
  return params;
}

export async function postCommand(args: string[], options: Options, io: Io): Promise<number> {
  const tranCode = onlyArg(args, 'tran code');
  if (!tranCode) throw new UsageError('say which tran code (its code, e.g. DEPOSIT)');
  const params = parseParams(options.param);
  const transactionId =
    options['transaction-id'] === undefined
      ? randomUUID()
      : requireUuid(String(options['transaction-id']), '--transaction-id');
  const version = positiveInt(options.version, 'version');
  const target = await openTarget(options, io);
  try {
    const data = await call(
      target,
      `mutation($i: TransactionInput!) { postTransaction(input: $i) { ${TRANSACTION_FIELDS} entries(first: 100) { nodes { direction layer units currency account { code } } } } }`,
      { i: { transactionId, tranCode, tranCodeVersion: version ?? null, params } },
    );
    const t = data.postTransaction;
    if (options.json) io.out(`${JSON.stringify(t, null, 2)}\n`);
    else {
      io.out(
        `posted ${t.transactionId} ${t.tranCode.code}@${t.tranCodeVersion} effective ${t.effective}${t.description ? `: ${t.description}` : ''}\n`,
      );
      for (const e of t.entries.nodes)
        io.out(
          `  ${String(e.direction).padEnd(6)} ${String(e.account.code).padEnd(16)} ${String(e.units).padStart(12)} ${e.currency} ${e.layer}\n`,
        );
    }
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

export async function voidCommand(args: string[], options: Options, io: Io): Promise<number> {
  const id = requireUuid(onlyArg(args, 'transaction id'), 'transaction id');
  const target = await openTarget(options, io);
  try {
    const data = await call(target, `mutation($id: UUID!) { voidTransaction(id: $id) { ${TRANSACTION_FIELDS} } }`, {
      id,
    });
    const t = data.voidTransaction;
    io.out(
      options.json
        ? `${JSON.stringify(t, null, 2)}\n`
        : `voided ${id}: its entries are reversed by ${t.transactionId}\n`,
    );
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

/** tally gql <file|->: the whole GraphQL response, as the server gave it; exit 1 when it has errors. */
export async function gqlCommand(args: string[], options: Options, io: Io): Promise<number> {
  const source = onlyArg(args, 'document');
  if (!source) throw new UsageError('say which document: a file, or - to read it from standard input');
  const variables = parseJsonOption(options.variables, 'variables');
  if (variables !== undefined && (variables === null || typeof variables !== 'object' || Array.isArray(variables)))
    throw new UsageError('--variables must be a JSON object');
  const document = source === '-' ? await (io.stdin ?? readStdin)() : readArgFile(source, 'document');
  if (document.trim() === '')
    throw new UsageError(`the document ${source === '-' ? 'on standard input' : JSON.stringify(source)} is empty`);
  const target = await openTarget(options, io);
  try {
    const result = await target.request(document, variables as Record<string, unknown> | undefined);
    io.out(`${JSON.stringify(result, null, 2)}\n`);
    return result.errors?.length ? EXIT.failed : EXIT.ok;
  } finally {
    await target.close();
  }
}

async function readStdin(): Promise<string> {
  let text = '';
  for await (const chunk of process.stdin) text += String(chunk);
  return text;
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
  const file = onlyArg(args, 'file');
  if (!file) throw new UsageError('say which CSV file');
  const lines = readArgFile(file, 'import')
    .split(/\r?\n/)
    .filter((l) => l.trim() !== '');
  const header = csvFields(lines[0] ?? '');
  if (!header.includes('transactionId') || !header.includes('tranCode'))
    throw new UsageError(`${file}:1: the header needs transactionId and tranCode columns`);
  const rows = lines.slice(1).map((line, i) => {
    const values = csvFields(line);
    if (values.length !== header.length)
      throw new UsageError(`${file}:${i + 2}: ${values.length} fields, the header has ${header.length}`);
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
      const error = operationError(result);
      if (error) {
        const path = result.errors![0]!.path?.[0];
        const row = typeof path === 'string' ? start + Number(path.slice(1)) + 2 : undefined;
        bar.done();
        throw new OperationError(
          `${file}${row ? `:${row}` : ''}: ${error.code}: ${error.message}${error.hint ? `\n  hint: ${error.hint}` : ''}\nrows ${start + 2}-${start + batch.length + 1} were not imported (rows before them were)`,
          error.code,
        );
      }
      bar.update(Math.min(rows.length, start + BATCH), rows.length);
    }
    bar.done();
    io.out(
      options.json ? `${JSON.stringify({ imported: rows.length })}\n` : `imported ${rows.length} transaction(s)\n`,
    );
    return EXIT.ok;
  } finally {
    await target.close();
  }
}
