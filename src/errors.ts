/**
 * The one closed list of error codes. Every failure that leaves the engine carries one of these,
 * with a message that names the offending value and, where there is one, a hint saying what to do.
 * `retryable` says whether repeating the same request unchanged can succeed.
 */
export const ERROR_CODES = {
  BAD_REQUEST: { retryable: false, hint: 'Check the request against schema.graphql.' },
  UNAUTHENTICATED: { retryable: false, hint: 'Send `Authorization: Bearer <api key>`.' },
  ACCESS_DENIED: { retryable: false, hint: 'Ask an administrator for a policy that allows it.' },
  NOT_FOUND: { retryable: false, hint: 'Check the id; it may not have been created yet.' },
  ALREADY_EXISTS: { retryable: false, hint: 'Use another id or code, or update the existing record.' },
  TRANSACTION_ID_CONFLICT: {
    retryable: false,
    hint: 'A transactionId is an idempotency key: re-send the same input, or use a new transactionId.',
  },
  EXECUTION_ID_CONFLICT: {
    retryable: false,
    hint: 'An executionId is an idempotency key: re-send the same input, or use a new executionId.',
  },
  INPUT_INVALID: { retryable: false, hint: 'Fix the input so it matches the tool input schema.' },
  OUTPUT_INVALID: { retryable: false, hint: 'The tool returned output that does not match its output schema.' },
  TRAN_CODE_ERROR: { retryable: false, hint: 'Check the tran code templates and the params sent.' },
  UNBALANCED: { retryable: false, hint: 'Debits must equal credits for every currency and layer.' },
  BALANCE_VELOCITY_EXCEEDED: {
    retryable: false,
    hint: 'A velocity control attached to an account or set refused the posting: see extensions.exception for the limit and the balance.',
  },
  ACCOUNT_LOCKED: { retryable: false, hint: 'Unlock the account (updateAccount status: ACTIVE) before posting.' },
  JOURNAL_LOCKED: { retryable: false, hint: 'Unlock the journal (updateJournal status: ACTIVE) before posting.' },
  TRAN_CODE_LOCKED: { retryable: false, hint: 'Use an active tran code, or unlock this one.' },
  ALREADY_VOIDED: { retryable: false, hint: 'A transaction can be voided once; read voidedBy for its reversal.' },
  CEL_ERROR: { retryable: false, hint: 'Check the CEL expression at the position shown.' },
  SCRIPT_ERROR: { retryable: false, hint: 'Read the stack in the error details.' },
  TOOL_FAILED: { retryable: true, hint: 'The tool reported a failure; see its message.' },
  TIMEOUT: { retryable: true, hint: 'The call ran past its deadline; raise timeoutMs or do less work per call.' },
  LIMIT_EXCEEDED: {
    retryable: false,
    hint: 'Stay within the limit named in the message, or raise it in the engine options.',
  },
  VERSION_LOCKED: { retryable: false, hint: 'Use an ACTIVE version.' },
  RECORD_CHANGED: { retryable: false, hint: 'The record changed since it was read; read it again and decide anew.' },
  GRAPHQL_PARSE_FAILED: { retryable: false, hint: 'Fix the GraphQL syntax at the location shown.' },
  GRAPHQL_VALIDATION_FAILED: { retryable: false, hint: 'Check the document against schema.graphql.' },
  BUSY: { retryable: true, hint: 'The database was busy; retry the request.' },
  APPROVAL_REJECTED: { retryable: false, hint: 'A person rejected the call; it did not run.' },
  APPROVAL_EXPIRED: { retryable: false, hint: 'Nobody approved the call in time; it did not run.' },
  MODEL_UNAVAILABLE: {
    retryable: true,
    hint: 'The model provider was unreachable, overloaded or rate-limited after its retries; the run is retried with backoff.',
  },
  MODEL_ERROR: {
    retryable: false,
    hint: 'The model provider refused the request or answered outside its wire format; check the provider configuration and the action config.',
  },
  INTERNAL: { retryable: true, hint: 'This is a bug in Tally; the server log has the details.' },
} as const satisfies Record<string, { retryable: boolean; hint: string }>;

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
