import { randomUUID } from 'node:crypto';
import type { Target } from '../deploy/target.js';
import type { Engine } from '../engine.js';
import { WAIT_ENDS } from '../execution/status.js';
import { onlyArg, parseJsonOption, positiveInt, requireUuid } from './args.js';
import { call, openTarget } from './connect.js';
import { EXIT, UsageError } from './errors.js';
import { formatError, type Io, type Options } from './io.js';

/*
 * The commands of tools and their executions: tally invoke and start (--wait), tally executions
 * (a page of them) and tally execution (one, with its call tree, attempts and logs).
 */

const EXECUTION_FIELDS = `executionId status actionName actionVersion attempt output error { code message hint }`;

/**
 * The version invoke runs: the latest ACTIVE one, read as `actions.tool`, which needs only the right
 * to run the tool (INSERT actions.Execution on it, as invokeAction itself), not SELECT on
 * actions.Action. An internal tool too: its operator runs it here to test it.
 */
async function latestVersion(target: Target, name: string): Promise<number> {
  const data = await call(target, 'query($n: String!) { actions { tool(name: $n, internal: true) { version } } }', {
    n: name,
  });
  return data.actions.tool.version as number;
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
