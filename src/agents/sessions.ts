import { MESSAGE_ID_MAX } from '../limits.js';
import { type ActionVersion, getVersion } from '../actions/actions.js';
import { EngineError, limitExceeded, quote } from '../errors.js';
import { canonicalJson, derivedId, fingerprint } from '../ids.js';
import type { CallFrame, Caller } from '../execution/call-tree.js';
import { checkInputBytes, validate } from '../execution/checks.js';
import { cancelRun } from '../execution/executions.js';
import { enqueue, resolveStartVersion } from '../execution/queue/start.js';
import type { ExecutionServices } from '../execution/services.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { ApprovalRow, SessionMessageRow, SessionRow } from '../storage/statements/sessions.js';

export type { ApprovalRow, SessionMessageRow, SessionRow };

export type SessionStatus = 'OPEN' | 'CLOSED' | 'EXPIRED';

/** Sessions are a conversation with a person: a call (a tool's program) neither opens nor drives one. */
function refuseInsideCall(frame: CallFrame | null, what: string): void {
  if (frame) {
    throw new EngineError('ACCESS_DENIED', `${what} cannot be done from inside a tool call`, {
      hint: 'Sessions are conversations with a person: open and drive them as a client (GraphQL, tally chat).',
    });
  }
}

/**
 * An agent that needs a session: it has a sessionSchema, or a reference's fixed input reads the
 * `session` variable (the same AST check that refuses it in a tool's references; a string or a
 * field named session does not count). Such an agent is never started on its own.
 */
export function sessionStatus(svc: ExecutionServices, row: SessionRow): SessionStatus {
  if (row.status === 'CLOSED') return 'CLOSED';
  return Date.parse(row.last_active) + svc.limits.sessionIdleMs <= svc.clock.now().getTime() ? 'EXPIRED' : 'OPEN';
}

/** What a policy sees of a session (context.document). */
export function sessionDocument(svc: ExecutionServices, row: SessionRow) {
  return {
    sessionId: row.session_id,
    agent: row.action_name,
    agentVersion: row.action_version,
    input: JSON.parse(row.input) as unknown,
    principal: row.principal,
    status: sessionStatus(svc, row),
  };
}

/**
 * Open a conversation with an agent (its latest ACTIVE version, kept for the session) about one
 * subject: `input`, checked against the agent's sessionSchema. The same id with the same agent
 * and input by the same client returns the session (idempotent); anything else is a conflict.
 */
export function createSession(
  svc: ExecutionServices,
  caller: Caller,
  frame: CallFrame | null,
  request: { sessionId: string; agent: string; input: unknown },
): SessionRow {
  refuseInsideCall(frame, 'createSession');
  const version = resolveStartVersion(svc, { name: request.agent });
  if (version.kind !== 'agent')
    throw new EngineError('BAD_REQUEST', `${version.name} is a ${version.kind}; a session talks to an agent`, {
      hint: 'Name an action of kind agent.',
    });
  const input = request.input ?? {};
  const existing = svc.sessions.sessionById.get(request.sessionId);
  if (existing) {
    if (
      existing.principal === caller.principal &&
      existing.action_id === version.actionId &&
      existing.input === JSON.stringify(input)
    )
      return existing;
    throw new EngineError('ALREADY_EXISTS', `session ${request.sessionId} already exists`, {
      hint: 'Use a new sessionId for a new session.',
    });
  }
  checkInputBytes(svc, `the session of ${version.name}`, input);
  if (version.tool.sessionSchema) {
    const validator = svc.actions.schemas.compile(version.tool.sessionSchema, 'tool.sessionSchema');
    const problems = svc.actions.schemas.problems(validator, input);
    if (problems.length > 0) {
      throw new EngineError(
        'INPUT_INVALID',
        `session input of ${version.name}@${version.version} does not match its sessionSchema: ${problems.map((p) => `${p.pointer} ${p.message}`).join('; ')}`,
        {
          details: { problems },
        },
      );
    }
  }
  const now = svc.clock.now().toISOString();
  svc.sessions.insertSession.run({
    session_id: request.sessionId,
    action_id: version.actionId,
    action_name: version.name,
    action_version: version.version,
    input: JSON.stringify(input),
    principal: caller.principal,
    now,
  });
  return svc.sessions.sessionById.get(request.sessionId)!;
}

/** The one answer for a session a caller may not use, the same as for an id nobody used. */
function noSuchSession(sessionId: string): EngineError {
  return new EngineError('NOT_FOUND', `session ${sessionId} does not exist`, {
    hint: 'Open one with createSession; a session is seen and used only by the client that opened it.',
  });
}

/**
 * Whether `principal` may use the session: it is its own, and its policies allow the request
 * (`allows`, over the session's policy document; left out, for a turn, whose INSERT on
 * actions.Execution is checked instead). The one rule of every session read and write
 * (session, sessions, sendMessage, closeSession): another client's session is never usable,
 * whatever its policies allow, since a session id is not a capability.
 */
export function usable(
  svc: ExecutionServices,
  row: SessionRow,
  principal: string,
  allows?: (document: ReturnType<typeof sessionDocument>) => boolean,
): boolean {
  return row.principal === principal && (allows === undefined || allows(sessionDocument(svc, row)));
}

/** The session `sessionId` when `principal` may use it (see usable); otherwise NOT_FOUND, as an id nobody used. */
export function usableSession(
  svc: ExecutionServices,
  principal: string,
  sessionId: string,
  allows?: (document: ReturnType<typeof sessionDocument>) => boolean,
): SessionRow {
  const row = svc.sessions.sessionById.get(sessionId);
  if (!row || !usable(svc, row, principal, allows)) throw noSuchSession(sessionId);
  return row;
}

/**
 * A page of sessions, newest first, with those `principal` may not use (see usable) left out, and
 * those `where` does not match. The filter is applied to the page read, so a page may be short:
 * follow endCursor.
 */
export function listSessions(
  svc: ExecutionServices,
  principal: string,
  page: { first: number; after?: string | null },
  where: { status?: SessionStatus | null; agent?: string | null } | null | undefined,
  allows: (document: ReturnType<typeof sessionDocument>) => boolean,
): Connection<SessionRow> {
  const req = pageRequest<number>(page.first, page.after, svc.limits.pageSizeMax, 'number', 'sessions');
  const rows = svc.sessions.sessionsPage.all({
    after: req.after ?? Number.MAX_SAFE_INTEGER,
    limit: req.fetch,
  });
  const read = toConnection(
    rows,
    req,
    (r) => r.rowid,
    (r) => r,
  );
  const keep = (r: (typeof rows)[number]) =>
    (where?.status == null || sessionStatus(svc, r) === where.status) &&
    (where?.agent == null || r.action_name === where.agent) &&
    usable(svc, r, principal, allows);
  const edges = read.edges.filter((e) => keep(e.node));
  return { ...read, edges, nodes: edges.map((e) => e.node) };
}

/** A session's messages, oldest first (the newest sessionHistoryMax are kept). */
export function sessionMessages(svc: ExecutionServices, sessionId: string): SessionMessageRow[] {
  return svc.sessions.messages.all(sessionId);
}

/** The session as the caller may send to it: usable, and OPEN. */
function ownOpenSession(svc: ExecutionServices, caller: Caller, sessionId: string): SessionRow {
  const row = usableSession(svc, caller.principal, sessionId);
  const status = sessionStatus(svc, row);
  if (status !== 'OPEN') {
    throw new EngineError(
      'BAD_REQUEST',
      `session ${sessionId} is ${status}${status === 'EXPIRED' ? ` (unused for sessionIdleMs, ${svc.limits.sessionIdleMs} ms)` : ''}; it takes no more messages`,
      {
        hint: 'Open a new session.',
      },
    );
  }
  return row;
}

/** The agent version of a session, as the turn will run it. */
export function sessionAgent(svc: ExecutionServices, row: SessionRow): ActionVersion {
  return getVersion(svc.actions, { id: row.action_id, version: row.action_version });
}

/** A turn's input: the session's input with the person's message. */
export function turnInput(row: SessionRow, text: string): Record<string, unknown> {
  const sessionInput = JSON.parse(row.input) as unknown;
  return {
    ...(sessionInput !== null && typeof sessionInput === 'object' && !Array.isArray(sessionInput)
      ? (sessionInput as Record<string, unknown>)
      : {}),
    message: text,
  };
}

/**
 * The person's message, and the next turn started with it, in the caller's transaction. The turn is
 * an agent run (its id derived from the session and messageId) that sees the session's history;
 * the queue runs a session's turns one after another.
 */
export function sendMessage(
  svc: ExecutionServices,
  caller: Caller,
  frame: CallFrame | null,
  request: { sessionId: string; messageId: string; text: string },
): SessionMessageRow {
  refuseInsideCall(frame, 'sendMessage');
  const row = ownOpenSession(svc, caller, request.sessionId);
  if (request.messageId.length === 0 || request.messageId.length > MESSAGE_ID_MAX) {
    throw new EngineError(
      'BAD_REQUEST',
      `messageId must be 1 to ${MESSAGE_ID_MAX} characters, got ${request.messageId.length}`,
      { hint: 'Use a UUID.' },
    );
  }
  if (request.text.trim() === '')
    throw new EngineError('BAD_REQUEST', 'text is empty', { hint: 'Send what the person said.' });
  if (request.text.length > svc.limits.sessionMessageCharsMax) {
    throw limitExceeded(
      'sessionMessageCharsMax',
      svc.limits.sessionMessageCharsMax,
      request.text.length,
      `the message is ${request.text.length} characters; sessionMessageCharsMax is ${svc.limits.sessionMessageCharsMax}`,
      { hint: 'Send a shorter message.' },
    );
  }
  const existing = svc.sessions.messageByKey.get(request.sessionId, 'USER', request.messageId);
  if (existing) {
    if (existing.text === request.text) return existing;
    throw new EngineError(
      'EXECUTION_ID_CONFLICT',
      `message ${quote(request.messageId)} was sent to session ${request.sessionId} with another text`,
      { hint: 'Use a new messageId for each message.' },
    );
  }
  const executionId = derivedId(svc.derivedIdKey, 'session-turn', row.session_id, request.messageId);
  const sent = svc.st.executionById.get(executionId);
  if (sent) {
    // Sent before, and trimmed from the history since (sessionHistoryMax): the same turn answers.
    if ((JSON.parse(sent.input) as { message?: unknown }).message !== request.text) {
      throw new EngineError(
        'EXECUTION_ID_CONFLICT',
        `message ${quote(request.messageId)} was sent to session ${request.sessionId} with another text`,
        { hint: 'Use a new messageId for each message.' },
      );
    }
    return {
      seq: 0,
      session_id: row.session_id,
      message_id: request.messageId,
      role: 'USER',
      text: request.text,
      execution_id: executionId,
      created: sent.created,
    };
  }
  const version = sessionAgent(svc, row);
  if (version.status !== 'ACTIVE')
    throw new EngineError(
      'VERSION_LOCKED',
      `${version.name} version ${version.version}, the session's agent, is ${version.status}`,
      { hint: 'Open a new session.' },
    );
  const input = turnInput(row, request.text);
  checkInputBytes(svc, version.name, input);
  validate(
    svc,
    version,
    'input',
    input,
    "A session turn's input is the session's input with `message`: the agent's inputSchema must accept it.",
  );
  const now = svc.clock.now().toISOString();
  enqueue(svc, {
    executionId,
    version,
    input,
    inputFingerprint: fingerprint(canonicalJson({ target: `${version.actionId}@${version.version}`, input })),
    principal: caller.principal,
    triggerId: null,
  });
  svc.sessions.setSession.run(row.session_id, executionId);
  svc.sessions.insertMessage.run({
    session_id: row.session_id,
    message_id: request.messageId,
    role: 'USER',
    text: request.text,
    execution_id: executionId,
    created: now,
  });
  svc.sessions.touchSession.run(now, now, row.session_id);
  svc.sessions.trimMessages.run(row.session_id, row.session_id, svc.limits.sessionHistoryMax);
  return svc.sessions.messageByKey.get(row.session_id, 'USER', request.messageId)!;
}

/** Close a session: it takes no more messages, and its turns that have not run (or wait for an approval) are cancelled; a running one stops at its next step. */
export function closeSession(svc: ExecutionServices, frame: CallFrame | null, row: SessionRow): SessionRow {
  refuseInsideCall(frame, 'closeSession');
  const now = svc.clock.now().toISOString();
  svc.sessions.closeSession.run(now, row.session_id);
  for (const turn of svc.sessions.unfinishedTurns.all(row.session_id)) {
    if (turn.status === 'QUEUED') svc.queue.cancel.run(now, turn.execution_id);
    else cancelRun(svc, turn);
  }
  return svc.sessions.sessionById.get(row.session_id)!;
}

export function getApproval(svc: ExecutionServices, approvalId: string): ApprovalRow {
  const row = svc.sessions.approvalById.get(approvalId);
  if (!row)
    throw new EngineError('NOT_FOUND', `approval ${approvalId} does not exist`, {
      hint: 'List them with actions.approvals(where: {status: PENDING}).',
    });
  return row;
}

/** A page of approvals, oldest first, of one status or all; the caller keeps those its policies let it see. */
export function listApprovals(
  svc: ExecutionServices,
  page: { first: number; after?: string | null },
  status: string | null | undefined,
): Connection<ApprovalRow> {
  const req = pageRequest<number>(page.first, page.after, svc.limits.pageSizeMax, 'number', 'approvals');
  const rows = svc.sessions.approvalsPage.all({
    after: req.after ?? 0,
    limit: req.fetch,
    status: status ?? null,
  });
  return toConnection(
    rows,
    req,
    (r) => r.rowid,
    (r) => r,
  );
}

/** What a policy sees of an approval (context.document): requestedBy lets a policy forbid approving one's own calls. */
export function approvalDocument(row: ApprovalRow) {
  return {
    approvalId: row.approval_id,
    executionId: row.execution_id,
    tool: row.tool,
    toolVersion: row.tool_version,
    input: JSON.parse(row.input) as unknown,
    requestedBy: row.requested_by,
    status: row.status,
  };
}

/**
 * A person's decision on a PENDING call: recorded with who made it and why; the parked run becomes
 * due at once (the worker wakes after the commit) and replays to the call, which runs (approved,
 * under the starter's authority) or is reported to the model as rejected.
 */
export function decide(
  svc: ExecutionServices,
  caller: Caller,
  frame: CallFrame | null,
  row: ApprovalRow,
  status: 'APPROVED' | 'REJECTED',
  reason: string | null,
): ApprovalRow {
  if (frame)
    throw new EngineError('ACCESS_DENIED', 'a call cannot be approved or rejected from inside a tool call', {
      hint: 'A person decides, as a client (GraphQL, tally approve).',
    });
  if (reason !== null && reason.length > svc.limits.sessionMessageCharsMax)
    throw limitExceeded(
      'sessionMessageCharsMax',
      svc.limits.sessionMessageCharsMax,
      reason.length,
      `the reason is ${reason.length} characters; sessionMessageCharsMax is ${svc.limits.sessionMessageCharsMax}`,
    );
  const now = svc.clock.now();
  if (row.status !== 'PENDING')
    throw new EngineError(
      'BAD_REQUEST',
      `approval ${row.approval_id} is ${row.status}; only a PENDING one can be decided`,
      { hint: 'List the pending ones with actions.approvals(where: {status: PENDING}).' },
    );
  if (Date.parse(row.expires) <= now.getTime())
    throw new EngineError('BAD_REQUEST', `approval ${row.approval_id} expired at ${row.expires}`, {
      hint: 'The model is told it expired; the call will not run.',
    });
  svc.sessions.decideApproval.run({
    approval_id: row.approval_id,
    status,
    reason,
    decided_by: caller.principal,
    decided: now.toISOString(),
  });
  svc.sessions.wakeRun.run({ id: row.execution_id, now: now.toISOString() });
  svc.notifyStarted();
  return svc.sessions.approvalById.get(row.approval_id)!;
}
