/**
 * The one closed list of error codes. Every failure that leaves the engine carries one of these,
 * with a message that names the offending value and, where there is one, a hint saying what to do.
 * `retryable` says whether repeating the same request unchanged can succeed; `when` says what
 * raises the code (docs/reference/errors.md is generated from this list: errorCodesMarkdown).
 */
export const ERROR_CODES = {
  BAD_REQUEST: {
    when: 'malformed request: bad JSON, bad UUID/decimal/date, wrong shape, a program that does not compile (with line and column)',
    retryable: false,
    hint: 'Check the request against schema.graphql.',
  },
  UNAUTHENTICATED: {
    when: 'missing or wrong API key (HTTP 401)',
    retryable: false,
    hint: 'Send `Authorization: Bearer <api key>`.',
  },
  ACCESS_DENIED: {
    when: 'a layer of the authority stack refused; names the action, resource and layer',
    retryable: false,
    hint: 'Ask an administrator for a policy that allows it.',
  },
  NOT_FOUND: {
    when: 'an id, code, version, or undeclared tool',
    retryable: false,
    hint: 'Check the id; it may not have been created yet.',
  },
  ALREADY_EXISTS: {
    when: 'a duplicate id, code, name or externalId',
    retryable: false,
    hint: 'Use another id or code, or update the existing record.',
  },
  TRANSACTION_ID_CONFLICT: {
    when: 'an idempotency key re-sent with a different input',
    retryable: false,
    hint: 'A transactionId is an idempotency key: re-send the same input, or use a new transactionId.',
  },
  EXECUTION_ID_CONFLICT: {
    when: 'an idempotency key re-sent with a different input',
    retryable: false,
    hint: 'An executionId is an idempotency key: re-send the same input, or use a new executionId.',
  },
  INPUT_INVALID: {
    when: 'tool input does not match its schema (JSON pointers in `details`)',
    retryable: false,
    hint: 'Fix the input so it matches the tool input schema.',
  },
  OUTPUT_INVALID: {
    when: 'tool output does not match its schema (JSON pointers in `details`)',
    retryable: false,
    hint: 'The tool returned output that does not match its output schema.',
  },
  TRAN_CODE_ERROR: {
    when: 'a template that does not compile or evaluate; a missing or mistyped param',
    retryable: false,
    hint: 'Check the tran code templates and the params sent.',
  },
  UNBALANCED: {
    when: 'debits ≠ credits for some currency and layer',
    retryable: false,
    hint: 'Debits must equal credits for every currency and layer.',
  },
  BALANCE_VELOCITY_EXCEEDED: {
    when: 'a velocity control refused the posting, void or membership change (it would take a guarded balance further past its limit), or a `@dryRun` write it does not judge for this caller (`detail.judged: false`): `extensions.exception` names the control, limit, account or set, layer and violating balance (null for a caller that may not read it); nothing was written',
    retryable: false,
    hint: 'A velocity control attached to an account or set refused the posting: see extensions.exception for the limit and the balance.',
  },
  ACCOUNT_LOCKED: {
    when: 'posting to (or voiding under) a LOCKED account',
    retryable: false,
    hint: 'Unlock the account (updateAccount status: ACTIVE) before posting.',
  },
  JOURNAL_LOCKED: {
    when: 'posting to (or voiding under) a LOCKED journal',
    retryable: false,
    hint: 'Unlock the journal (updateJournal status: ACTIVE) before posting.',
  },
  TRAN_CODE_LOCKED: {
    when: 'posting with a LOCKED tran code',
    retryable: false,
    hint: 'Use an active tran code, or unlock this one.',
  },
  ALREADY_VOIDED: {
    when: 'voiding a transaction twice',
    retryable: false,
    hint: 'A transaction can be voided once; read voidedBy for its reversal.',
  },
  CEL_ERROR: {
    when: 'a CEL expression that does not parse or evaluate (with its position)',
    retryable: false,
    hint: 'Check the CEL expression at the position shown.',
  },
  SCRIPT_ERROR: {
    when: 'an uncaught exception (stack in `details`, file `<action>@<version>`): a bug in the program fails the same way every time, so the queue does not retry it (call `fail()` to ask for a retry)',
    retryable: false,
    hint: 'Read the stack in the error details.',
  },
  TOOL_FAILED: {
    when: 'the program called `fail()`; retryable unless it passed `{retry: false}`',
    retryable: true,
    hint: 'The tool reported a failure; see its message.',
  },
  TIMEOUT: {
    when: "the execution's deadline passed; fails the whole request (no `check: false` catches it)",
    retryable: true,
    hint: 'The call ran past its deadline; raise timeoutMs or do less work per call.',
  },
  LIMIT_EXCEEDED: {
    when: 'a limit was crossed (the message names it, and `details` holds `{limit, max, actual}`): memory, stack, depth, calls, sizes',
    retryable: false,
    hint: 'Stay within the limit named in the message, or raise it in the engine options.',
  },
  VERSION_LOCKED: {
    when: 'running a LOCKED or DRAFT version',
    retryable: false,
    hint: 'Use an ACTIVE version.',
  },
  RECORD_CHANGED: {
    when: 'a record `recordDeployment` expects at the version a deploy planned from was written since (`details`: kind, id, expected, actual); nothing of the request was applied: plan again',
    retryable: false,
    hint: 'The record changed since it was read; read it again and decide anew.',
  },
  GRAPHQL_PARSE_FAILED: {
    when: 'the document does not parse',
    retryable: false,
    hint: 'Fix the GraphQL syntax at the location shown.',
  },
  GRAPHQL_VALIDATION_FAILED: {
    when: 'the document does not validate',
    retryable: false,
    hint: 'Check the document against schema.graphql.',
  },
  BUSY: {
    when: "the database write lock was not free within `busyTimeoutMs`; the server's write or read queue had no room (HTTP 503 with `Retry-After: 1`); the COMMIT a request shared with others in a group commit failed (nothing of the group was written); PostgreSQL: the request lost its race with other processes' writes `transactionRetriesMax` times over",
    retryable: true,
    hint: 'The database was busy; retry the request.',
  },
  APPROVAL_REJECTED: {
    when: "an agent's call a person rejected: the call did not run (the model reads it as the call's result)",
    retryable: false,
    hint: 'A person rejected the call; it did not run.',
  },
  APPROVAL_EXPIRED: {
    when: "an agent's call nobody approved in time: the call did not run (the model reads it as the call's result)",
    retryable: false,
    hint: 'Nobody approved the call in time; it did not run.',
  },
  MODEL_UNAVAILABLE: {
    when: "a model provider timed out at the connection, answered 408/409/429/5xx, or could not be reached, after its client's retries (the run resumes at that turn)",
    retryable: true,
    hint: 'The model provider was unreachable, overloaded or rate-limited after its retries; the run is retried with backoff.',
  },
  MODEL_ERROR: {
    when: 'a model provider refused the request (4xx: a bad key, an unknown model) or answered outside its wire format; a provider not configured here',
    retryable: false,
    hint: 'The model provider refused the request or answered outside its wire format; check the provider configuration and the action config.',
  },
  INTEGRATION_UNAVAILABLE: {
    when: "an outside call (an http tool, an MCP server's tool) could not be sent or answered in time, or the service answered a status its tool retries (by default 408, 425, 429, 5xx); no free slot before the deadline",
    retryable: true,
    hint: 'The outside service was unreachable, overloaded or slow; the call is retried with backoff and the same idempotency key.',
  },
  INTEGRATION_ERROR: {
    when: 'an outside service answered a final failure (a status its tool neither accepts nor retries, an MCP tool error), an answer over the integration\'s responseBytesMax, a successful answer its tool could not map to its output (details.outcome "succeeded"), an MCP tool changed since import, an integration not configured here, or a call whose outcome is unknown and which may not be sent twice',
    retryable: false,
    hint: 'The outside service refused the call or answered what the tool cannot use; read the message (details.outcome says when the service may have acted), fix the input or the tool, and start it again.',
  },
  INTERNAL: {
    when: 'a bug; the server log has it',
    retryable: true,
    hint: 'This is a bug in Tally; the server log has the details.',
  },
} as const satisfies Record<string, { when: string; retryable: boolean; hint: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** The plain-data shape of an error: the same on the GraphQL wire, on an execution and in the queue. */
export interface ErrorData {
  code: ErrorCode;
  message: string;
  hint?: string;
  details?: unknown;
}

export class EngineError extends Error {
  readonly code: ErrorCode;
  readonly hint: string | undefined;
  readonly details: unknown;

  /** The reference ledger's `extensions.exception` (a velocity control's refusal). */
  readonly exception: unknown;

  constructor(
    code: ErrorCode,
    message: string,
    options: { hint?: string; details?: unknown; cause?: unknown; exception?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'EngineError';
    this.code = code;
    this.hint = options.hint ?? ERROR_CODES[code].hint;
    this.details = options.details;
    this.exception = options.exception;
  }

  get retryable(): boolean {
    return ERROR_CODES[this.code].retryable;
  }

  /** graphql-js copies `extensions` of an original error onto the GraphQLError it wraps it in. */
  get extensions(): Record<string, unknown> {
    // retriableError is the reference ledger's name for the same fact (what its @retry looks at).
    const ext: Record<string, unknown> = { code: this.code, retryable: this.retryable, retriableError: this.retryable };
    if (this.hint !== undefined) ext.hint = this.hint;
    if (this.details !== undefined) ext.details = this.details;
    if (this.exception !== undefined) ext.exception = this.exception;
    return ext;
  }

  toData(): ErrorData {
    const data: ErrorData = { code: this.code, message: this.message };
    if (this.hint !== undefined) data.hint = this.hint;
    if (this.details !== undefined) data.details = this.details;
    return data;
  }
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.hasOwn(ERROR_CODES, value);
}

/** Quote a user value for a message: short, JSON-ish, never multi-line. */
export function quote(value: unknown, max = 80): string {
  let text: string;
  if (typeof value === 'string') text = JSON.stringify(value);
  else if (typeof value === 'bigint') text = value.toString();
  else {
    try {
      text = JSON.stringify(value) ?? String(value);
    } catch {
      text = String(value);
    }
  }
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/*
 * Factories for the common errors, so that each kind is built one way: the same message shape,
 * the same data. Each returns the error (callers `throw` it), so a factory can also be handed
 * around as a value (`tooMany: () => limitExceeded(...)`).
 */

/** What a LIMIT_EXCEEDED carries in `details`, always (plus whatever the site adds). */
export interface LimitDetails {
  /**
   * The limit crossed: its key in TALLY_CONFIG's `limits` (e.g. 'inputBytesMax'); a fixed bound
   * by its constant's name in camelCase (TOOL_TITLE_MAX: 'toolTitleMax'); a bound derived from a
   * limit by the limit it is derived from.
   */
  limit: string;
  /** The bound that was crossed; null only where the site cannot know it (a deadline set by its caller). */
  max: number | null;
  /**
   * The value that crossed it, as far as it was counted: a count that stops once past the bound
   * gives what it had reached (a lower bound of the whole); null when it was not counted.
   */
  actual: number | null;
}

/**
 * LIMIT_EXCEEDED naming the limit crossed in data as well as in words: `details` is
 * `{limit, max, actual}` and any further fields the site keeps (e.g. `{[limit]: max}`, the shape
 * older clients read, or `{budget}`). The message is the caller's: it names the limit and quotes
 * the offending value.
 */
export function limitExceeded(
  limit: string,
  max: number | null,
  actual: number | null,
  message: string,
  options: {
    hint?: string;
    details?: Record<string, unknown> & Partial<Record<keyof LimitDetails, never>>;
    cause?: unknown;
  } = {},
): EngineError {
  const details: LimitDetails & Record<string, unknown> = { limit, max, actual, ...options.details };
  return new EngineError('LIMIT_EXCEEDED', message, { hint: options.hint, details, cause: options.cause });
}

/** The `{limit, max, actual}` of a LIMIT_EXCEEDED built by limitExceeded (undefined for any other error). */
export function limitDetails(error: unknown): LimitDetails | undefined {
  if (!(error instanceof EngineError) || error.code !== 'LIMIT_EXCEEDED') return undefined;
  const details = error.details as Partial<LimitDetails> | undefined;
  if (typeof details?.limit !== 'string') return undefined;
  return { limit: details.limit, max: details.max ?? null, actual: details.actual ?? null };
}

/** NOT_FOUND for a record looked up by id, code or name: "<kind> <quoted id> does not exist". */
export function notFound(kind: string, id: unknown, hint?: string): EngineError {
  return new EngineError('NOT_FOUND', `${kind} ${quote(id)} does not exist`, { hint });
}

/** ALREADY_EXISTS for a record whose key is taken: "<kind> <quoted key> already exists". */
export function alreadyExists(kind: string, key: unknown, hint?: string): EngineError {
  return new EngineError('ALREADY_EXISTS', `${kind} ${quote(key)} already exists`, { hint });
}

/**
 * Input the engine refuses for its shape: "<what>, got <quoted value>", where `what` says what was
 * expected ('tool.title must be a string'). BAD_REQUEST for a request's own fields, INPUT_INVALID
 * for a tool's input.
 */
export function badInput(
  what: string,
  value: unknown,
  hint?: string,
  code: 'BAD_REQUEST' | 'INPUT_INVALID' = 'BAD_REQUEST',
): EngineError {
  return new EngineError(code, `${what}, got ${quote(value)}`, { hint });
}

/** INTERNAL: an invariant of the engine's own broke (never a user's mistake: those have codes of their own). */
export function bug(message: string): EngineError {
  return new EngineError('INTERNAL', message);
}

/** Check an invariant of the engine's own; when it is false, throw `bug(message)`. */
export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw bug(message);
}

/** The command that writes docs/reference/errors.md (the test that checks the file names it). */
export const ERRORS_DOC_COMMAND = 'npx tsx scripts/docs-errors.ts';

/** docs/reference/errors.md: the closed list as a table (generated: see ERRORS_DOC_COMMAND). */
export function errorCodesMarkdown(): string {
  const cell = (text: string) => text.replaceAll('|', '\\|').replaceAll('\n', ' ');
  const rows = Object.entries(ERROR_CODES).map(
    ([code, { when, retryable, hint }]) =>
      `| \`${code}\` | ${cell(when)} | ${retryable ? 'yes' : 'no'} | ${cell(hint)} |`,
  );
  return [
    '# Error codes',
    '',
    `<!-- Generated from ERROR_CODES in src/errors.ts by \`${ERRORS_DOC_COMMAND}\`; do not edit by hand. -->`,
    '',
    'Every error carries `extensions.code` from one closed list (`src/errors.ts`), a `hint`, and',
    "`retryable` (whether sending the same request again can succeed; also as the reference ledger's",
    '`retriableError`). Messages quote the offending value. A failed execution carries the same',
    '`{code, message, hint, details}`. The hint below is the default; many errors carry a more',
    'specific one.',
    '',
    'A `LIMIT_EXCEEDED` error says which limit it crossed in `details`: `limit` (the key in',
    "TALLY_CONFIG's `limits`, or for a fixed bound its name, e.g. `toolTitleMax`), `max` (the bound) and",
    '`actual` (the value that crossed it, as far as it was counted before the check stopped). A deadline',
    'that ran out also names its budget in `details.budget`.',
    '',
    'When a request has several faults, the checks run in a fixed order, so it always gets the same',
    'error: see [mutation-checks.md](mutation-checks.md).',
    '',
    '| code | when | retryable | default hint |',
    '|---|---|---|---|',
    ...rows,
    '',
    "The CLI adds its own, outside the engine's list: `USAGE` (a command used wrongly; exit 2),",
    '`UNAVAILABLE` (the server cannot be reached), `BAD_RESPONSE` (the answer is not GraphQL) and `FAILED`',
    '(anything else, e.g. a deploy refused), `CONFLICT` (a deploy refused because a field changed both',
    'at runtime and in the files; nothing was sent); and `TIMEOUT` also when the server gave no answer in',
    'time (it may have run the request).',
    '',
  ].join('\n');
}
