import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import type { Target } from '../deploy/target.js';
import type { Engine } from '../engine.js';
import { onlyArg, parseJsonOption, positiveInt, requireUuid } from './args.js';
import { call, openTarget } from './connect.js';
import { EXIT, OperationError, UsageError } from './errors.js';
import { formatError, formatTable, type Io, type Options } from './io.js';
import { FINISHED_STATUSES } from '../execution/status.js';

/**
 * `tally chat`, `tally approvals`, `tally approve` and `tally reject`: a conversation with an agent
 * (a session), and the people's side of the calls an agent may make only once someone approves them.
 */

const TERMINAL = FINISHED_STATUSES;
/** How often a turn's tree is read while it runs (and how long one long-poll waits on a server). */
const POLL_MS = 200;
const APPROVAL_STATUSES = ['PENDING', 'APPROVED', 'REJECTED', 'EXPIRED', 'CANCELLED'];
const APPROVAL_FIELDS =
  'approvalId executionId tool toolVersion input requestedBy status reason decidedBy decided expires created';

/** The lines a person types: a terminal with a prompt, or a pipe read line by line. */
interface Lines {
  /** The next line, or null at the end of input; `prompt` is shown first on a terminal only. */
  next(prompt: string): Promise<string | null>;
  tty: boolean;
  close(): void;
}

function stdinLines(): Lines {
  const tty = process.stdin.isTTY === true && process.stdout.isTTY === true;
  // On a pipe readline has no output: nothing is echoed, no prompt is drawn.
  const rl = createInterface({
    input: process.stdin,
    ...(tty ? { output: process.stdout, terminal: true } : { terminal: false }),
  });
  // Ctrl+C on a terminal is /quit: the input ends, the session is closed.
  rl.on('SIGINT', () => rl.close());
  const iterator = rl[Symbol.asyncIterator]();
  let ended = false;
  return {
    tty,
    async next(prompt) {
      if (ended) return null;
      if (tty) {
        rl.setPrompt(prompt);
        rl.prompt();
      }
      const { value, done } = await iterator.next();
      if (done) {
        ended = true;
        return null;
      }
      return String(value);
    },
    close: () => rl.close(),
  };
}

/** Who runs the turns: the server's workers, or (with --db) a worker in this process for as long as the chat lasts. */
function startLocalWorker(target: Target): { stop(): Promise<void> } | null {
  if (!('engine' in target)) return null;
  const engine = (target as Target & { engine: Engine }).engine;
  const worker = engine.createWorker({ owner: `cli-chat-${process.pid}`, pollMs: POLL_MS });
  engine.onStarted(() => worker.wake());
  worker.start();
  return { stop: () => worker.stop() };
}

const SESSION_FIELDS =
  'sessionId agent agentVersion input status expires messages { messageId role text created execution { executionId status } }';
const TURN_NODE = 'executionId kind actionName actionVersion status input output error { code message hint }';
/** The turn, its model turns and their tool calls, and the progress its tools said after $p (a new one ends the long-poll). */
const TURN_QUERY = `query($e: UUID!, $w: Int, $p: Int!) { actions { execution(executionId: $e, waitMs: $w, progressAfter: $p) { ${TURN_NODE} progress(after: $p) { seq text executionId actionName } children { ${TURN_NODE} children { ${TURN_NODE} children { executionId children { executionId } } } } } } }`;

/** A JSON value on one line, cut to `max` characters. */
function compact(value: unknown, max = 200): string {
  const text = value === undefined ? '' : (JSON.stringify(value) ?? '');
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** The text of an agent's answer: `{text}` without an output schema, else the JSON. */
function answerText(output: unknown): string {
  if (
    output &&
    typeof output === 'object' &&
    !Array.isArray(output) &&
    typeof (output as { text?: unknown }).text === 'string' &&
    Object.keys(output).length === 1
  ) {
    return (output as { text: string }).text;
  }
  return JSON.stringify(output);
}

function allIds(node: Record<string, any>, into = new Set<string>()): Set<string> {
  into.add(node.executionId);
  for (const child of (node.children ?? []) as Array<Record<string, any>>) allIds(child, into);
  return into;
}

export async function chatCommand(args: string[], options: Options, io: Io): Promise<number> {
  const agentArg = onlyArg(args, 'agent');
  const resume = options.session === undefined ? undefined : requireUuid(String(options.session), '--session');
  if (!agentArg && !resume) throw new UsageError('say which agent (or --session ID to resume a session)');
  if (resume && options.input !== undefined)
    throw new UsageError("--input is the session's, fixed when it was opened: leave it out with --session");
  const input = parseJsonOption(options.input, 'input');
  const json = options.json === true;
  /** One transcript line: text, or under --json one JSON object per event. */
  const say = (event: Record<string, unknown>, text: string) =>
    io.out(json ? `${JSON.stringify(event)}\n` : `${text}\n`);
  const target = await openTarget(options, io);
  const lines = stdinLines();
  const worker = startLocalWorker(target);
  try {
    let session: Record<string, any>;
    if (resume) {
      session = (
        await call(target, `query($s: UUID!) { actions { session(sessionId: $s) { ${SESSION_FIELDS} } } }`, {
          s: resume,
        })
      ).actions.session;
      if (agentArg && agentArg !== session.agent)
        throw new OperationError(
          `session ${resume} is with ${session.agent}, not ${agentArg}`,
          'BAD_REQUEST',
          `tally chat ${session.agent} --session ${resume}`,
        );
      say(
        {
          event: 'session',
          session: {
            sessionId: session.sessionId,
            agent: session.agent,
            agentVersion: session.agentVersion,
            status: session.status,
            input: session.input,
          },
        },
        `session ${session.sessionId} with ${session.agent}@${session.agentVersion} (${session.status}), ${session.messages.length} message(s) so far`,
      );
      for (const m of session.messages as Array<Record<string, any>>) {
        say({ event: 'history', message: m }, `${m.role === 'USER' ? 'you' : session.agent}> ${m.text}`);
      }
      if (session.status !== 'OPEN')
        throw new OperationError(
          `session ${resume} is ${session.status}: it takes no more messages`,
          'BAD_REQUEST',
          `Open a new one: tally chat ${session.agent} --input …`,
        );
    } else {
      const data = await call(
        target,
        `mutation($s: UUID!, $a: String!, $i: JSON) { actions { createSession(sessionId: $s, agent: $a, input: $i) { ${SESSION_FIELDS} } } }`,
        {
          s: randomUUID(),
          a: agentArg,
          i: input ?? null,
        },
      );
      session = data.actions.createSession;
      say(
        {
          event: 'session',
          session: {
            sessionId: session.sessionId,
            agent: session.agent,
            agentVersion: session.agentVersion,
            status: session.status,
            input: session.input,
          },
        },
        `session ${session.sessionId} with ${session.agent}@${session.agentVersion} (/quit or end of input closes it; tally chat --session ${session.sessionId} resumes it)`,
      );
    }
    const chat = { target, io, lines, say, agent: String(session.agent), json };
    // A turn a previous chat left running (or waiting for an approval) is followed first.
    const last = (session.messages as Array<Record<string, any>>).at(-1);
    if (last?.role === 'USER' && last.execution && !TERMINAL.has(last.execution.status)) {
      if (!(await followTurn(chat, last.execution.executionId))) return await closeSession(chat, session.sessionId);
    }
    for (;;) {
      const line = await lines.next('you> ');
      if (line === null || line.trim() === '/quit') break;
      const text = line.trim();
      if (text === '') continue;
      const data = await call(
        target,
        'mutation($s: UUID!, $m: String!, $t: String!) { actions { sendMessage(sessionId: $s, messageId: $m, text: $t) { messageId role text created execution { executionId status } } } }',
        {
          s: session.sessionId,
          m: randomUUID(),
          t: text,
        },
      );
      const message = data.actions.sendMessage;
      if (json) say({ event: 'message', message }, '');
      if (!message.execution) continue;
      if (!(await followTurn(chat, message.execution.executionId))) break;
    }
    return await closeSession(chat, session.sessionId);
  } finally {
    lines.close();
    await worker?.stop();
    await target.close();
  }
}

interface Chat {
  target: Target;
  io: Io;
  lines: Lines;
  say: (event: Record<string, unknown>, text: string) => void;
  agent: string;
  json: boolean;
}

async function closeSession(chat: Chat, sessionId: string): Promise<number> {
  const data = await call(
    chat.target,
    'mutation($s: UUID!) { actions { closeSession(sessionId: $s) { sessionId status } } }',
    { s: sessionId },
  );
  chat.say(
    { event: 'closed', session: data.actions.closeSession },
    `session ${sessionId} ${String(data.actions.closeSession.status).toLowerCase()}`,
  );
  return EXIT.ok;
}

/**
 * Follow one turn until it ends: print each tool call its model turns make as it appears (→ name(args)),
 * what it said with status(text) (· name: text, as its call commits), and how it ended (← name:
 * result), ask about a call that waits for approval, then print the answer.
 * Returns false when the input ended while a decision was asked for (the chat stops there).
 */
async function followTurn(chat: Chat, executionId: string): Promise<boolean> {
  const { target, say } = chat;
  const local = 'engine' in target;
  const shown = new Map<string, string>();
  /** Approvals this chat already asked about (an approval it could not decide is not asked again). */
  const asked = new Set<string>();
  let waitingSaid = false;
  let progressAfter = 0;
  for (;;) {
    const run = (await call(target, TURN_QUERY, { e: executionId, w: local ? null : POLL_MS, p: progressAfter }))
      .actions.execution as Record<string, any>;
    const said = (run.progress ?? []) as Array<Record<string, any>>;
    if (said.length > 0) progressAfter = said.at(-1)!.seq;
    // A full page (Execution.progress's default first): more may follow, read before the answer.
    const more = said.length === 100;
    /** The messages said by `ids` (every one left, without), each printed once. */
    const sayProgress = (ids?: Set<string>) => {
      for (let i = 0; i < said.length; i++) {
        const m = said[i]!;
        if (ids && !ids.has(m.executionId)) continue;
        say(
          { event: 'status', status: { seq: m.seq, executionId: m.executionId, tool: m.actionName, text: m.text } },
          `  · ${m.actionName}: ${m.text}`,
        );
        said.splice(i--, 1);
      }
    };
    for (const turn of (run.children ?? []) as Array<Record<string, any>>) {
      if (turn.kind !== 'MODEL') continue;
      for (const c of (turn.children ?? []) as Array<Record<string, any>>) {
        const state = shown.get(c.executionId);
        if (state === undefined) {
          say(
            { event: 'call', call: { executionId: c.executionId, tool: c.actionName, input: c.input } },
            `  → ${c.actionName}(${compact(c.input)})`,
          );
          shown.set(c.executionId, 'called');
        }
        sayProgress(allIds(c));
        if (TERMINAL.has(c.status) && shown.get(c.executionId) !== 'done') {
          const result =
            c.status === 'SUCCEEDED' || c.status === 'CACHED'
              ? compact(c.output)
              : c.error
                ? `${c.status} ${c.error.code}: ${c.error.message}`
                : c.status;
          say(
            {
              event: 'result',
              call: {
                executionId: c.executionId,
                tool: c.actionName,
                status: c.status,
                output: c.output,
                error: c.error,
              },
            },
            `  ← ${c.actionName}: ${result}`,
          );
          shown.set(c.executionId, 'done');
        }
      }
    }
    sayProgress();
    if (more) continue;
    if (TERMINAL.has(run.status)) {
      if (run.status === 'SUCCEEDED')
        say(
          { event: 'answer', executionId, status: run.status, output: run.output },
          `${chat.agent}> ${answerText(run.output)}`,
        );
      else
        say(
          { event: 'answer', executionId, status: run.status, error: run.error },
          `${chat.agent}! ${run.status}${run.error ? ` ${formatError(run.error).trimEnd()}` : ''}\n  (tally execution ${executionId} shows the turn)`,
        );
      return true;
    }
    if (run.status === 'WAITING_APPROVAL') {
      const approval = await pendingApproval(target, allIds(run));
      if (approval && !asked.has(approval.approvalId)) {
        asked.add(approval.approvalId);
        const decided = await askApproval(chat, approval);
        if (decided === null) return false;
        waitingSaid = false;
        continue;
      }
      if (!waitingSaid) {
        say(
          { event: 'waiting', executionId, approval: approval ?? null },
          `  … waiting for someone who may decide (tally approvals; tally approve <id>)`,
        );
        waitingSaid = true;
      }
    }
    // A server answers the long-poll at once when the run ends; in-process, read again shortly.
    if (local || run.status === 'WAITING_APPROVAL')
      await new Promise((resolve) => setTimeout(resolve, local ? POLL_MS : POLL_MS * 2));
  }
}

/** The PENDING approval of this run (or of a run inside it), or null when there is none the caller may read. */
async function pendingApproval(target: Target, runIds: Set<string>): Promise<Record<string, any> | null> {
  let after: string | null = null;
  for (let page = 0; page < 20; page++) {
    const result = await target.request(
      `query($a: String) { actions { approvals(first: 100, after: $a, where: {status: PENDING}) { nodes { ${APPROVAL_FIELDS} } pageInfo { hasNextPage endCursor } } } }`,
      { a: after },
    );
    // A caller who may not read approvals waits for someone who may.
    if (result.errors?.length || !result.data) return null;
    const { nodes, pageInfo } = result.data.actions.approvals as {
      nodes: Array<Record<string, any>>;
      pageInfo: { hasNextPage: boolean; endCursor: string | null };
    };
    const mine = nodes.find((a) => runIds.has(a.executionId));
    if (mine) return mine;
    if (!pageInfo.hasNextPage) return null;
    after = pageInfo.endCursor;
  }
  return null;
}

/**
 * Show a pending approval and ask for a decision: interactively on a terminal, else the next line
 * of input (`y reason…` approves, anything else rejects). Returns whether it was decided here, or
 * null at the end of input (the approval stays PENDING).
 */
async function askApproval(chat: Chat, approval: Record<string, any>): Promise<boolean | null> {
  const { target, say, lines } = chat;
  say(
    { event: 'approval', approval },
    `  ? ${approval.tool}${approval.toolVersion ? `@${approval.toolVersion}` : ''}(${compact(approval.input, 500)}) needs approval ${approval.approvalId}, expires ${approval.expires}`,
  );
  const prompt = 'approve? [y/N] reason: ';
  const answer = await lines.next(prompt);
  if (answer === null) {
    say(
      { event: 'undecided', approvalId: approval.approvalId },
      `${lines.tty ? '\n' : ''}  (end of input: approval ${approval.approvalId} stays PENDING; tally approve ${approval.approvalId} decides it)`,
    );
    return null;
  }
  // On a pipe nothing was echoed: the transcript shows the question with its answer.
  if (!lines.tty && !chat.json) chat.io.out(`${prompt}${answer.trim()}\n`);
  const match = /^\s*(\S*)\s*(.*)$/.exec(answer)!;
  const approve = /^(y|yes)$/i.test(match[1]!);
  const reason = match[2]!.trim() === '' ? null : match[2]!.trim();
  const field = approve ? 'approveCall' : 'rejectCall';
  const result = await target.request(
    `mutation($id: UUID!, $r: String) { actions { ${field}(approvalId: $id, reason: $r) { ${APPROVAL_FIELDS} } } }`,
    { id: approval.approvalId, r: reason },
  );
  const error = result.errors?.[0];
  if (error) {
    const code = String(error.extensions?.code ?? 'FAILED');
    const hint = typeof error.extensions?.hint === 'string' ? error.extensions.hint : null;
    say(
      { event: 'decision', approvalId: approval.approvalId, error: { code, message: error.message, hint } },
      `  ${formatError({ code, message: error.message, hint }).trimEnd()}`,
    );
    return false;
  }
  const decided = result.data!.actions[field];
  say(
    { event: 'decision', approval: decided },
    `  ${decided.status === 'APPROVED' ? '✓ approved' : '✗ rejected'}${decided.reason ? `: ${decided.reason}` : ''}`,
  );
  return true;
}

/** tally approvals: oldest first, PENDING unless --status says otherwise (ALL for every one). */
export async function approvalsCommand(args: string[], options: Options, io: Io): Promise<number> {
  if (args.length > 0)
    throw new UsageError(
      `unexpected argument ${JSON.stringify(args[0])} (tally approve <id> or tally reject <id> decides one)`,
    );
  const statusOption = options.status === undefined ? 'PENDING' : String(options.status).toUpperCase();
  if (statusOption !== 'ALL' && !APPROVAL_STATUSES.includes(statusOption))
    throw new UsageError(
      `--status ${JSON.stringify(options.status)} is not one of ${APPROVAL_STATUSES.join(', ')} or ALL`,
    );
  const first = positiveInt(options.limit, 'limit') ?? 20;
  const target = await openTarget(options, io);
  try {
    const data = await call(
      target,
      `query($f: Int!, $a: String, $w: ApprovalFilter) { actions { approvals(first: $f, after: $a, where: $w) { nodes { ${APPROVAL_FIELDS} } pageInfo { hasNextPage endCursor } } } }`,
      {
        f: first,
        a: options.after === undefined ? null : String(options.after),
        w: statusOption === 'ALL' ? null : { status: statusOption },
      },
    );
    const { nodes, pageInfo } = data.actions.approvals as {
      nodes: Array<Record<string, any>>;
      pageInfo: { hasNextPage: boolean; endCursor: string | null };
    };
    const next = pageInfo.hasNextPage ? pageInfo.endCursor : null;
    if (options.json) io.out(`${JSON.stringify({ approvals: nodes, next }, null, 2)}\n`);
    else {
      if (nodes.length === 0) io.out(statusOption === 'ALL' ? 'no approvals\n' : `no ${statusOption} approvals\n`);
      else {
        const rows = nodes.map(
          (a) =>
            [
              a.approvalId,
              a.status,
              `${a.tool}${a.toolVersion ? `@${a.toolVersion}` : ''}`,
              a.requestedBy,
              a.created,
              a.expires,
              compact(a.input),
            ] as string[],
        );
        io.out(formatTable(['approvalId', 'status', 'tool', 'requested by', 'created', 'expires', 'input'], rows));
      }
      if (next) io.out(`more… --after ${next}\n`);
    }
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

/** tally approve <id> / tally reject <id>: decide a PENDING call; exit 1 when it is refused. */
export async function decideCommand(
  verb: 'approve' | 'reject',
  args: string[],
  options: Options,
  io: Io,
): Promise<number> {
  const id = requireUuid(onlyArg(args, 'approval id'), 'approval id');
  const reason = options.reason === undefined ? null : String(options.reason);
  const field = verb === 'approve' ? 'approveCall' : 'rejectCall';
  const target = await openTarget(options, io);
  try {
    const data = await call(
      target,
      `mutation($id: UUID!, $r: String) { actions { ${field}(approvalId: $id, reason: $r) { ${APPROVAL_FIELDS} } } }`,
      { id, r: reason },
    );
    const a = data.actions[field] as Record<string, any>;
    const expected = verb === 'approve' ? 'APPROVED' : 'REJECTED';
    if (options.json) io.out(`${JSON.stringify(a, null, 2)}\n`);
    else {
      io.out(
        `${a.status.toLowerCase()} ${a.approvalId}: ${a.tool}${a.toolVersion ? `@${a.toolVersion}` : ''}(${compact(a.input, 500)}) requested by ${a.requestedBy}\n`,
      );
      if (a.decidedBy)
        io.out(`  decided by ${a.decidedBy}${a.decided ? ` at ${a.decided}` : ''}${a.reason ? `: ${a.reason}` : ''}\n`);
      io.out(
        `  the run ${a.executionId} ${a.status === 'APPROVED' ? 'resumes and the call runs' : a.status === 'REJECTED' ? 'resumes; the model is told the call was rejected' : 'was not changed'} (tally execution ${a.executionId} shows it)\n`,
      );
    }
    if (a.status !== expected) {
      if (!options.json) io.err(`tally: approval ${a.approvalId} is ${a.status}, not ${expected}\n`);
      return EXIT.failed;
    }
    return EXIT.ok;
  } finally {
    await target.close();
  }
}
