import { EngineError } from './errors.js';

/*
 * Every bound the engine enforces, in one table: its default, what it bounds and why, the group it
 * belongs to, and the values it may take. The `Limits` type, DEFAULT_LIMITS, the validation of
 * overrides and docs/reference/limits.md are all derived from it (`npx tsx scripts/docs-limits.ts`
 * writes the page). Every configurable limit can be overridden through `createEngine({ limits })`
 * or TALLY_CONFIG's "limits", and each has a test that crosses it. The bounds that are not
 * configurable are in FIXED_LIMITS below; the relations between limits are in LIMIT_RELATIONS.
 */

/** The groups of the table, in the order the reference lists them. */
/**
 * PostgreSQL: the entry seqs one posting takes at once (the increment of the sequence
 * tally_entry_seq_blocks, src/storage/backend.ts). A storage format constant, and so the most
 * entries one posting may have there (entriesPerTransactionMax's PostgreSQL bound).
 */
export const ENTRY_SEQ_BLOCK = 1024;

export const LIMIT_GROUPS = {
  graphql: 'GraphQL documents and results',
  http: 'HTTP server',
  mcp: 'MCP',
  cel: 'CEL',
  ledger: 'Ledger',
  views: 'Views and indexes',
  calls: 'Actions, tool calls and the sandbox',
  budgets: 'Budgets: deadlines and timeouts',
  executions: 'Waiting for executions',
  agents: 'Models, agents, sessions and skills',
  concurrency: 'Write lock, group commit, queues and threads',
} as const;

export type LimitGroup = keyof typeof LIMIT_GROUPS;

/** One configurable limit. */
export interface LimitSpec {
  readonly default: number;
  /** What it bounds and why: the reference's text. */
  readonly doc: string;
  readonly group: LimitGroup;
  /** What a value counts; a plain number (items, levels, tokens, ...) when left out. */
  readonly unit?: 'ms' | 'bytes' | 'characters';
  /** The least value an override may set (0 when left out). */
  readonly min?: number;
  /** The most an override may set, on either backend; `maxWhy` says why. */
  readonly max?: number;
  readonly maxWhy?: string;
  /** Where PostgreSQL differs: its default (when the operator leaves the limit out) or its own most. */
  readonly postgres?: { readonly default?: number; readonly max?: number; readonly why: string };
}

export const LIMITS = {
  pageSizeMax: {
    default: 1000,
    group: 'graphql',
    doc:
      'Largest `first` a connection accepts: pages must stay small enough to answer in one request. An ' +
      "account's or a set's entries are read through their chains (one per journal and currency) and listed " +
      'across at most this many chains together; past it, ask for one currency or journal at a time (LIMIT_EXCEEDED).',
  },
  documentBytesMax: {
    default: 100_000,
    group: 'graphql',
    unit: 'bytes',
    doc: 'Largest GraphQL document (query text); parsing is linear but validation is not cheap.',
  },
  queryDepthMax: {
    default: 12,
    group: 'graphql',
    doc:
      'Deepest selection nesting in a GraphQL document (fragments included); stops exponential fan-out ' +
      'through relations. Introspection (`__schema`, `__type` and below) is not counted: it reads only the ' +
      "schema, and graphql-js's MaxIntrospectionDepthRule and queryCostMax bound it (GraphiQL's query is 15 deep).",
  },
  documentCacheMax: {
    default: 1000,
    group: 'graphql',
    doc: 'Parsed and validated documents kept in the cache (keyed by source text).',
  },
  documentTokensMax: {
    default: 10_000,
    group: 'graphql',
    doc:
      'Lexical tokens in a GraphQL document. Parsing stops at the bound, and every later step (the ' +
      'validation rules, the cost, the cached AST: up to ~110 bytes a token) is linear in it. The GraphiQL ' +
      "introspection query has ~160 tokens; `tally import`'s batch of 100 postings ~1,700.",
  },
  documentFieldsMax: {
    default: 2000,
    group: 'graphql',
    doc:
      'Field selections written in a GraphQL document (aliases count). The validation rules and the cost ' +
      'are linear in it, and each field holds ~240 bytes in the document cache.',
  },
  fieldComparisonsMax: {
    default: 10_000,
    group: 'graphql',
    doc:
      "Field comparisons graphql-js's OverlappingFieldsCanBeMerged may make, estimated before it runs (see " +
      'countFieldComparisons): fields under one response name in one selection set are compared pairwise, ' +
      'with everything beneath them, so repeated fields and aliases, and fragments side by side, are ' +
      'quadratic. 10,000 validate in ~10 ms; 500 repeated `journal { name }` (250,000) took ~0.3-0.7 s. ' +
      'Documents that select each field once cost ~0.',
  },
  documentCacheBytesMax: {
    default: 32 * 1024 * 1024,
    group: 'graphql',
    unit: 'bytes',
    doc:
      'Heap the document cache may hold, estimated per document from its tokens, fields and source (see ' +
      'estimateDocumentBytes: ~120 B a token + 160 B a field + the source); the least recently used ' +
      'documents are evicted first. The largest document the other bounds let through is estimated at ' +
      '~1.7 MB, a typical query at ~12 KB.',
  },
  queryCostMax: {
    default: 100_000,
    group: 'graphql',
    doc:
      'Largest cost of one operation, computed before any resolver runs: every field costs 1, and the ' +
      'fields below a connection count once per `first` (a plain list: per item its limit allows). So ' +
      'nested connections multiply, and one short query cannot ask for millions of rows. The costliest ' +
      "query the repo sends (`tally execution`: seven levels of an execution's calls, with model turns) " +
      "costs 98,412, GraphiQL's introspection ~7,200; with full pages a unit is ~10-40 µs of work, so " +
      '~1-4 s at the bound. Over it: LIMIT_EXCEEDED with `details: {cost, queryCostMax}`.',
  },
  resultBytesMax: {
    default: 16 * 1024 * 1024,
    group: 'graphql',
    unit: 'bytes',
    doc:
      'Largest result (JSON, counted in characters) a request may build; over it the request fails and a ' +
      'mutation rolls back. The second line behind queryCostMax, for large JSON values.',
  },
  requestBodyBytesMax: {
    default: 1_048_576,
    group: 'http',
    unit: 'bytes',
    doc: 'Largest HTTP request body (413 above).',
  },
  mcpToolsPageSize: {
    default: 50,
    group: 'mcp',
    doc:
      'Tools per MCP tools/list page (those the client may call; actions it may not are skipped, and shown ' +
      'in no count or cursor: follow `nextCursor`). A model reads every tool it is offered: a page stays a ' +
      'short read.',
  },
  mcpSessionsMax: {
    default: 64,
    group: 'mcp',
    doc:
      'Open MCP sessions on /mcp, all clients together: each holds a server and a transport in memory ' +
      'until it is closed or idle for mcpSessionIdleMs. A new one past the bound gets 503.',
  },
  mcpSessionsPerClientMax: {
    default: 8,
    group: 'mcp',
    doc:
      'Of mcpSessionsMax, the open MCP sessions of one client: one client opening sessions in a loop cannot ' +
      "take them all. Past it that client's new session gets 503 (the others' are unaffected).",
  },
  mcpSessionIdleMs: {
    default: 10 * 60_000,
    group: 'mcp',
    unit: 'ms',
    doc:
      'An MCP session nobody used for this long is closed (a client that vanished never says DELETE); its ' +
      'id then gets 404.',
  },
  requestTimeoutMs: {
    default: 30_000,
    group: 'http',
    unit: 'ms',
    doc: 'HTTP request timeout: a client that does not send its whole request (its body too) in time is cut off.',
  },
  headersTimeoutMs: {
    default: 10_000,
    group: 'http',
    unit: 'ms',
    doc:
      "How long a connection may take to send a request's headers: from its opening to its first request " +
      "(a socket that sends nothing is closed), and from a request's first byte to the end of its headers " +
      '(408). No key is needed to open a connection, so this is what an unknown peer can hold one for; ' +
      'headers are a few hundred bytes, sent at once by every client.',
  },
  keepAliveTimeoutMs: {
    default: 5000,
    group: 'http',
    unit: 'ms',
    doc:
      'How long a keep-alive connection may stay open with no request after a response (then it is closed; ' +
      'Node allows a second more).',
  },
  responseStallMs: {
    default: 10_000,
    group: 'http',
    unit: 'ms',
    doc:
      'How long a response may wait on a peer that reads none of it (its output has not moved) before the ' +
      'connection is closed; a stalled connection also makes room for a new one at once, as an idle one ' +
      'does. A slow reader that reads at all is never stalled. 0: never.',
  },
  connectionsMax: {
    default: 512,
    group: 'http',
    doc:
      'Open HTTP connections, all peers together: each holds a file descriptor (a server at `ulimit -n` 1024 ' +
      'refuses every connection past its descriptors: keep this well under it). A connection past it closes ' +
      'the connection longest open with no request in flight (one that never sent a request first); when ' +
      'every connection has a request in flight, the new one is closed at once.',
  },
  connectionsPerAddressMax: {
    default: 128,
    group: 'http',
    doc:
      "Of connectionsMax, those from one peer address, made room for in the same way (that address's idle " +
      'connections first), so one peer cannot take every place. Every connection from a reverse proxy has ' +
      "the proxy's address: behind one, raise this to connectionsMax and bound peers there.",
  },
  celExpressionLengthMax: {
    default: 4096,
    group: 'cel',
    unit: 'characters',
    doc: 'Longest CEL expression.',
  },
  celCacheMax: {
    default: 10_000,
    group: 'cel',
    doc: 'Compiled CEL expressions kept in the cache.',
  },
  celCostMax: {
    default: 1_000_000,
    group: 'cel',
    doc:
      'Cost budget of one CEL evaluation (one `evaluate` call; one unit ≈ one sub-expression evaluated; ' +
      'list elements, string characters and regex work are charged too, see src/cel/cost.ts). Nested ' +
      'macros over an input multiply: without a bound a short expression runs for minutes while holding ' +
      "the write lock. 1,000,000 is Kubernetes' per-expression limit and stops the worst expression here " +
      'within about 0.1 s.',
  },
  regexSizeMax: {
    default: 5000,
    group: 'cel',
    doc:
      'Largest regular expression (CEL `matches`, JSON Schema `pattern`/`patternProperties`), as the ' +
      'estimated instructions of its RE2 program once counted repetitions are expanded, checked before ' +
      'compiling. RE2 is linear in the text but also in the program, which counted repetitions make large ' +
      'from a short pattern (`(?:.{1000}){4}`); compiling costs about as much.',
  },
  recordCacheMax: {
    default: 1000,
    group: 'ledger',
    doc:
      'Rows kept by each record cache (journals by id, tran codes by code, active triggers, action ' +
      'versions and their parsed documents).',
  },
  entriesPerTransactionMax: {
    default: 500,
    group: 'ledger',
    doc: 'Entries one transaction may write (tran code entry templates, and entries after conditions).',
    postgres: {
      max: ENTRY_SEQ_BLOCK,
      why: `each posting's entries take a block of ${ENTRY_SEQ_BLOCK} seqs there`,
    },
  },
  tranCodeParamsMax: {
    default: 64,
    group: 'ledger',
    doc: 'Params one tran code (or velocity limit) may declare.',
  },
  jsonBytesMax: {
    default: 65_536,
    group: 'ledger',
    unit: 'bytes',
    doc:
      'Largest metadata, params or vars JSON; and an action version besides its program (description, ' +
      'schemas, policies).',
  },
  jsonDepthMax: {
    default: 32,
    group: 'ledger',
    doc: 'Deepest nesting of any JSON value sent in (metadata, params, documents, tool input), and of tool outputs.',
  },
  celValueSizeMax: {
    default: 100_000,
    group: 'cel',
    doc:
      'Largest value (list elements + string characters + map entries, summed) a CEL evaluation (a var or ' +
      'an evaluate key) may build.',
  },
  decimalIntegerDigitsMax: {
    default: 30,
    group: 'ledger',
    doc:
      'Digits before the decimal point of any amount. 30 covers every fiat and crypto supply with room. ' +
      'With decimalFractionDigitsMax at most 60 together: arithmetic is exact to 80 digits, and CEL ' +
      'arithmetic that would need more is refused.',
  },
  decimalFractionDigitsMax: {
    default: 18,
    group: 'ledger',
    doc: 'Digits after the decimal point of any amount. 18 is what ETH-style tokens need.',
  },
  accountSetDepthMax: {
    default: 10,
    group: 'ledger',
    doc: 'Longest chain of nested account sets (a set in a set in a set: 3).',
  },
  accountSetAncestorsMax: {
    default: 50,
    group: 'ledger',
    doc: 'Sets one account may roll up into (directly or through other sets): each posting updates each of them.',
  },
  calculationBackfillEntriesMax: {
    default: 100_000,
    group: 'ledger',
    doc:
      'Entries one calculation backfill may read: creating a GLOBAL calculation, or attaching a LOCAL one, ' +
      "applies the existing entries it covers inside the request's transaction (holding the write lock). " +
      'Past it the request fails and nothing is written.',
  },
  calculationDimensionsMax: {
    default: 16,
    group: 'ledger',
    doc: 'Custom dimensions of one calculation: each is one CEL evaluation per entry and set it counts.',
  },
  calculationsMax: {
    default: 64,
    group: 'ledger',
    doc: 'Active calculations (children not counted): each GLOBAL one is evaluated for every entry posted.',
  },
  postingCelCostMax: {
    default: 100_000,
    group: 'ledger',
    doc:
      "CEL budget (celCostMax's units) of everything a posting evaluates beyond its tran code: the " +
      'calculations, views, indexes and velocity controls it reaches, together. Whoever defines them, each ' +
      'posting pays at most this (~10 ms); past it the posting fails with LIMIT_EXCEEDED naming it.',
  },
  velocityControlsPerAccountMax: {
    default: 16,
    group: 'ledger',
    doc:
      'Velocity controls attached to one account or set: each posting checks every one of its accounts ' +
      'and their sets.',
  },
  velocityLimitsPerControlMax: {
    default: 16,
    group: 'ledger',
    doc: 'Limits in one velocity control.',
  },
  velocityWindowKeysMax: {
    default: 8,
    group: 'ledger',
    doc: 'Window keys of one velocity limit.',
  },
  busyTimeoutMs: {
    default: 5000,
    group: 'concurrency',
    unit: 'ms',
    doc:
      "How long a writer waits for SQLite's write lock before failing with BUSY. On PostgreSQL a lock wait " +
      'ends at 100 ms (LOCK_WAIT_MS) or this, the lesser, and the transaction runs again.',
  },
  transactionRetriesMax: {
    default: 16,
    group: 'concurrency',
    doc:
      "PostgreSQL: how many times one transaction (a request, a group of requests, a worker's attempts) runs " +
      'again after losing a race with another process (a serialization failure or a deadlock, every ' +
      'transaction being SERIALIZABLE). Past it the request fails with BUSY (retryable): the contention is ' +
      "the client's to back off from. SQLite never needs it (one writer).",
  },
  writeBatchMax: {
    default: 64,
    group: 'concurrency',
    doc:
      'Group commit: the most write requests one SQLite transaction (one COMMIT) takes, each under a ' +
      'savepoint of its own. The server groups the mutations that are ready together; 1 turns it off (a ' +
      'COMMIT per mutation).',
  },
  writeBatchWaitMs: {
    default: 10,
    group: 'concurrency',
    unit: 'ms',
    doc:
      'Group commit: once a group has run this long, it commits with what it has and the requests left go ' +
      "first in the next group, so a group's first request is not held behind many.",
  },
  workerBatchMax: {
    default: 16,
    group: 'concurrency',
    doc:
      'Group commit of the queue worker: the most due attempts one transaction runs (each under its ' +
      'savepoint, stopping at writeBatchWaitMs and before a model or agent run); 1 turns it off.',
  },
  writeQueueMax: {
    default: 1024,
    group: 'concurrency',
    doc:
      "Requests the server holds waiting for the writer (mutations, MCP's included; queries when no read " +
      'thread takes them); past it a request is answered BUSY (HTTP 503, `Retry-After: 1`).',
  },
  writeQueuePerClientMax: {
    default: 256,
    group: 'concurrency',
    doc:
      'Of writeQueueMax, the most one client may hold (it has one of them at the writer at a time), so a ' +
      "flood from one client leaves room for the others: past it that client's request gets BUSY (503), " +
      "the others' still get in. Left out, it is writeQueueMax when that is lower.",
  },
  writeQueueBytesMax: {
    default: 32 * 1024 * 1024,
    group: 'concurrency',
    unit: 'bytes',
    doc:
      'Bytes of request bodies the write queue holds, all clients together (a parsed body can take ~20× ' +
      'its size in memory): past it a mutation is answered BUSY (503).',
  },
  writeQueuePerClientBytesMax: {
    default: 8 * 1024 * 1024,
    group: 'concurrency',
    unit: 'bytes',
    doc:
      "Of writeQueueBytesMax, the most one client's waiting bodies may hold; past it BUSY (503). Left out, " +
      'it is writeQueueBytesMax when that is lower.',
  },
  readinessWaitMs: {
    default: 100,
    group: 'http',
    unit: 'ms',
    doc:
      'How long /readyz keeps trying the write lock while another process holds it (trying again every few ' +
      'milliseconds, never blocking other requests); held longer, the database is reported not ready.',
  },
  metricsLabelValuesMax: {
    default: 100,
    group: 'http',
    doc:
      'Distinct operation names, and action names, that /metrics labels one by one; the rest are counted ' +
      'under "other". Operation names are chosen by clients: without a cap, each new name would be a new ' +
      'series in the scraper for ever.',
  },
  walAutocheckpointPages: {
    default: 10_000,
    group: 'concurrency',
    doc:
      'WAL pages (~4 KiB each) after which the committing request checkpoints the log itself. The ' +
      'background checkpointer (EngineOptions.checkpointIntervalMs) copies pages long before; this bounds ' +
      "the log when a steady stream of writes never lets it restart. Without the background thread: SQLite's " +
      '1000 unless set.',
  },

  programBytesMax: {
    default: 262_144,
    group: 'calls',
    unit: 'bytes',
    doc: 'Largest tool program (config.src).',
  },
  toolReferencesMax: {
    default: 64,
    group: 'calls',
    doc: 'Tool references one action version may declare.',
  },
  policiesMax: {
    default: 64,
    group: 'calls',
    doc: 'Policies one client or one action version may hold (each is checked on every guarded operation).',
  },
  maxAttemptsMax: {
    default: 100,
    group: 'calls',
    doc: 'Largest execution.maxAttempts a version may ask for.',
  },
  toolTimeoutMs: {
    default: 750,
    group: 'budgets',
    unit: 'ms',
    doc:
      'Deadline of a top-level call and its whole tree when its version sets no timeoutMs (1,024 calls beneath ' +
      'one took 275–445 ms in `tally serve` beside a CPU hog: 500 ms, as this was, is too close).',
  },
  toolTimeoutMsMax: {
    default: 750,
    group: 'budgets',
    unit: 'ms',
    max: 300_000,
    maxWhy: "5 minutes; longer work is a started execution's attempts, or an agent's run",
    postgres: {
      default: 30_000,
      why: "a running tool holds only its rows' locks there: 30 s is what agent frameworks give a tool",
    },
    doc:
      'Largest execution.timeoutMs a version may ask for; at most TOOL_TIMEOUT_MS_CEILING (5 minutes, on ' +
      'either backend). A running tool holds its process (the engine is synchronous): the thread that ' +
      'answers HTTP when `tally serve` runs it, so long tools belong on `tally worker` processes (`tally ' +
      "serve --no-worker`). On SQLite it also holds the one write lock: every other client's writes wait, " +
      "and other processes' writers fail BUSY past busyTimeoutMs, so the default is 750 ms there. On " +
      "PostgreSQL it holds only its rows' locks: the default there is PG_TOOL_TIMEOUT_MS_MAX (30 s, what " +
      "agent frameworks give a tool). A call inside a request stops at the request's deadline all the same.",
  },
  requestDeadlineMs: {
    default: 750,
    group: 'budgets',
    unit: 'ms',
    doc:
      'How long one whole request may run: every tool call it makes (invokes one after another, their ' +
      'nested calls) shares a deadline this long after the request began, and every resolver that does ' +
      'work checks it too (LIMIT_EXCEEDED, a mutation rolls back). The engine is synchronous, so this is ' +
      "the longest any request (or a started execution's attempt, under its own timeout) holds the " +
      "process, and a mutation the write lock: below a second, so another client's request on the same " +
      'server always answers within one.',
  },
  operatorDeadlineMs: {
    default: 30_000,
    group: 'budgets',
    unit: 'ms',
    doc:
      'The deadline of a request sent under the operator budget (`@budget(name: OPERATOR)`, allowed by a ' +
      'policy with INSERT on `budget.Operator`): a deploy, an import batch, a backfill, work an operator ' +
      "starts on purpose. On SQLite the request holds the single writer all that time: other clients' " +
      "mutations wait behind it (reads go on from the read pool), and other processes' writers wait " +
      'busyTimeoutMs, then fail BUSY (retryable). Never shorter than requestDeadlineMs.',
  },
  sandboxMemoryBytesMax: {
    default: 64 * 1024 * 1024,
    group: 'calls',
    unit: 'bytes',
    doc: 'QuickJS heap per sandbox; the WASM memory is capped a little (32 MiB) above it, which bounds typed arrays too.',
  },
  sandboxStackBytesMax: {
    default: 256 * 1024,
    group: 'calls',
    unit: 'bytes',
    doc: 'QuickJS stack: deep recursion fails with LIMIT_EXCEEDED before it can threaten the host stack.',
  },
  inputBytesMax: {
    default: 262_144,
    group: 'calls',
    unit: 'bytes',
    doc: 'Largest tool input (JSON).',
  },
  outputBytesMax: {
    default: 1_048_576,
    group: 'calls',
    unit: 'bytes',
    doc:
      'Largest tool output (JSON); an output past it is refused inside the sandbox as its JSON is made ' +
      '(LIMIT_EXCEEDED, not a TIMEOUT of copying it out).',
  },
  logBytesMax: {
    default: 16_384,
    group: 'calls',
    unit: 'bytes',
    doc: 'console.log output kept per call; the rest is cut with a marker.',
  },
  statusMessagesPerCallMax: {
    default: 100,
    group: 'calls',
    doc:
      "Progress messages one call may say (a program's `status(text)`), each recorded on its execution and " +
      'streamed to its caller: past it `status()` throws LIMIT_EXCEEDED (the program may catch it) and nothing ' +
      'is recorded. Every call of a tree (and every tool an agent calls) counts its own.',
  },
  statusBytesMax: {
    default: 1024,
    group: 'calls',
    unit: 'bytes',
    min: 1,
    doc:
      'Longest progress message (UTF-8) a `status(text)` may say: a longer one throws LIMIT_EXCEEDED and is ' +
      'not recorded.',
  },
  toolDepthMax: {
    default: 8,
    group: 'calls',
    doc:
      'Tool levels below the first call. The sandbox makes a runtime for each of these levels (and the ' +
      'first) when the engine starts, so a chain that deep costs its first caller what it costs the hundredth.',
  },
  callsPerExecutionMax: {
    default: 1024,
    group: 'calls',
    doc: 'Calls (tool, graphql, cel) beneath one top-level call.',
  },
  triggerDepthMax: {
    default: 4,
    group: 'calls',
    doc:
      'Triggers fired one after another: a change made by a trigger-started execution (or by one it ' +
      'started) fires triggers one level deeper, up to this depth. Past it the match is recorded as a ' +
      'FAILED execution (LIMIT_EXCEEDED): a trigger whose action posts cannot re-fire itself forever.',
  },
  contextUsesMax: {
    default: 10_000,
    group: 'calls',
    doc: 'A sandbox context is replaced after this many calls.',
  },
  contextPoolMax: {
    default: 16,
    group: 'calls',
    doc: 'Idle sandbox contexts kept warm (per nesting level).',
  },
  sandboxRetainedBytesMax: {
    default: 256 * 1024,
    group: 'calls',
    unit: 'bytes',
    doc:
      'Memory the calls of programs that can pin private fields on shared objects (their source has a `#`) ' +
      'may leave held in one sandbox runtime, summed over calls; past it the runtime is freed.',
  },
  modelResponseBytesMax: {
    default: 1_048_576,
    group: 'agents',
    unit: 'bytes',
    doc:
      'Largest answer body a model provider may send (read as it streams in; past it the turn fails ' +
      'LIMIT_EXCEEDED, never retried).',
  },
  agentTurnsMax: {
    default: 32,
    group: 'agents',
    doc: "Model turns in one agent run: an agent's `maxTurns` may not be higher.",
  },
  agentToolCallsMax: {
    default: 64,
    group: 'agents',
    doc: "Tool calls in one agent run (an invented name counts): an agent's `maxToolCalls` may not be higher.",
  },
  agentToolRetryWaitMsMax: {
    default: 10_000,
    group: 'agents',
    unit: 'ms',
    doc:
      "Backoff one tool call of an agent run may wait in all between its attempts (the tool's " +
      "`execution.backoff`): a retry that would wait past it, or past the run's deadline, is not made, and " +
      "the model gets the last failure. Each attempt also counts as one of the run's tool calls.",
  },
  modelFallbacksMax: {
    default: 4,
    group: 'agents',
    doc:
      "Entries of a model or agent's `config.fallback`: the providers and models tried in turn when the " +
      'one before answers MODEL_UNAVAILABLE.',
  },
  agentRunMsMax: {
    default: 15 * 60_000,
    group: 'agents',
    unit: 'ms',
    doc: "Longest whole agent run, from its first attempt: an agent's `runTimeoutMs` may not be higher.",
  },
  agentRunsConcurrentMax: {
    default: 16,
    group: 'agents',
    doc:
      'Model and agent runs one worker keeps in flight at once (each mostly waits on its provider); past ' +
      'it, due runs wait while ordinary attempts go on.',
  },
  agentRunsPerClientMax: {
    default: 4,
    group: 'agents',
    doc:
      'Of agentRunsConcurrentMax, the runs of one client (starter): its further due runs wait while other ' +
      "clients' runs are taken, so one client starting many slow runs cannot hold every slot. Left out, it " +
      'is agentRunsConcurrentMax when that is lower.',
  },
  agentLeaseMs: {
    default: 30_000,
    group: 'agents',
    unit: 'ms',
    doc:
      'How long a worker holds a claimed model or agent run without a step; a run whose worker died is ' +
      'picked up again after it. Renewed at every step and every leaseMs / 3 while a model answers.',
  },
  agentConversationBytesMax: {
    default: 1_048_576,
    group: 'agents',
    unit: 'bytes',
    doc:
      'The conversation an agent run sends to its model, as JSON: past it the run fails LIMIT_EXCEEDED ' +
      'before sending.',
  },
  approvalTimeoutMsMax: {
    default: 24 * 3_600_000,
    group: 'agents',
    unit: 'ms',
    doc: "Longest an approval may wait for a decision (a reference's approval.timeoutMs; its default too).",
  },
  sessionIdleMs: {
    default: 24 * 3_600_000,
    group: 'agents',
    unit: 'ms',
    doc: 'A session unused this long expires (EXPIRED): it takes no more messages.',
  },
  sessionHistoryMax: {
    default: 100,
    group: 'agents',
    doc:
      'Messages a session keeps (both sides); older ones are dropped, from the record and from what its ' +
      'turns send the model.',
  },
  sessionMessageCharsMax: {
    default: 8000,
    group: 'agents',
    unit: 'characters',
    doc: "One session message (and an approval's reason).",
  },
  skillBodyCharsMax: {
    default: 65_536,
    group: 'agents',
    unit: 'characters',
    doc: "One skill's body (its markdown guidance).",
  },
  executionWaitMsMax: {
    default: 30_000,
    group: 'executions',
    unit: 'ms',
    doc:
      'Longest one wait of `actions.execution(executionId:, waitMs:)` (a long-poll over HTTP and MCP): the ' +
      'request answers when the execution is terminal or after waitMs. Over HTTP it is also cut short to ' +
      "answer within requestTimeoutMs of the request's start.",
  },
  executionWaitPollMs: {
    default: 250,
    group: 'executions',
    unit: 'ms',
    doc:
      "How often a waiting request reads the execution's status (one indexed SELECT, outside any " +
      'transaction), for a worker in another process; one in this process wakes the wait at once.',
  },
  executionWaitersMax: {
    default: 256,
    group: 'executions',
    doc:
      'Waits in flight in one process (each holds a timer and a listener, never a transaction; under ' +
      '`tally serve`, all on the HTTP thread). Past it a wait returns at once and the field answers the ' +
      "execution's current state.",
  },
  executionWaitersPerClientMax: {
    default: 16,
    group: 'executions',
    doc:
      "Of executionWaitersMax, the waits of one client: past it that client's further waits answer at once, " +
      "the others' are unaffected. Left out, it is executionWaitersMax when that is lower.",
  },
  mcpCallWaitMs: {
    default: 120_000,
    group: 'mcp',
    unit: 'ms',
    doc:
      'How long MCP tools/call of a model or agent tool (started, then waited for) waits in total; past it ' +
      'the call answers with the execution id and status, to be read later.',
  },

  viewsMax: {
    default: 32,
    group: 'views',
    doc: 'Views (schema.createView): every posting evaluates each view whose sources it touches.',
  },
  viewDocumentFieldsMax: {
    default: 32,
    group: 'views',
    doc: 'Document fields of one view: each is one CEL evaluation per record a posting updates.',
  },
  viewRecordsPerSourceMax: {
    default: 64,
    group: 'views',
    doc:
      "Records one source record may update in one view: the length of the view's normalize list (an " +
      "entry's account and its sets: accountSetAncestorsMax + 1 by default). Longer lists fail the posting.",
  },
  indexesMax: {
    default: 32,
    group: 'views',
    doc:
      'Custom indexes (schema.createIndex), all record types together: each posting maintains each one on ' +
      'its record type.',
  },
  indexKeysMax: {
    default: 4,
    group: 'views',
    doc: 'Partition keys, and sort keys, of one view or index (each list): sort keys are stored in fixed columns.',
  },
  indexRowsPerRecordMax: {
    default: 64,
    group: 'views',
    doc: 'Index rows one record may have in one index: the length of a list a partition expression returns.',
  },
  indexBackfillMax: {
    default: 10_000,
    group: 'views',
    doc:
      'Records createIndex indexes at once (the records that exist when it is created, in its own ' +
      'transaction): past it the index is refused, so creating one never holds the write lock for long.',
  },

  readPoolThreads: {
    default: 2,
    group: 'concurrency',
    doc:
      'Threads of the read pool (src/runtime/read-pool.ts): each has its own read-only connection and ' +
      'engine, and answers queries from a WAL snapshot beside the writer: a read runs while a mutation or ' +
      "a tool holds the write lock and the writer's thread, and the writer never waits for a read. Each " +
      'holds a page cache and a sandbox module (some tens of MB); more threads than the cores left beside ' +
      'the writer buy nothing.',
  },
  writerThreads: {
    default: 1,
    group: 'concurrency',
    doc:
      '1: `tally serve` runs its writer (mutations, tools, the queue worker) on a thread of its own, so a ' +
      'running tool never holds the HTTP thread and reads and probes never wait for one. 0: on the HTTP ' +
      'thread (one thread hop less per request: more throughput on a machine with few cores, but every ' +
      'reply waits while a tool runs).',
  },
  readQueueMax: {
    default: 256,
    group: 'concurrency',
    doc:
      'Queries waiting for a read thread, all clients together. Past it a query gets BUSY (retryable) at ' +
      'once; and when it is full, a query of a client holding fewer of its places than the client holding ' +
      "most takes the latter's newest place (that query gets BUSY): one client flooding the pool fills it " +
      "with its own queries and cannot keep the others' out.",
  },
} as const satisfies Record<string, LimitSpec>;

export type LimitName = keyof typeof LIMITS;

/** The value of every configurable limit, by name (the shape of `createEngine({ limits })`, all set). */
export type Limits = { -readonly [K in keyof typeof LIMITS]: number };

const LIMIT_ENTRIES = Object.entries(LIMITS) as [LimitName, LimitSpec][];

export const DEFAULT_LIMITS: Readonly<Limits> = Object.freeze(
  Object.fromEntries(LIMIT_ENTRIES.map(([name, spec]) => [name, spec.default])) as Limits,
);

/** toolTimeoutMsMax's default on PostgreSQL (see LIMITS.toolTimeoutMsMax). */
export const PG_TOOL_TIMEOUT_MS_MAX: number = LIMITS.toolTimeoutMsMax.postgres.default;
/** The most toolTimeoutMsMax may be set to, on either backend: a tool is a step, not a job. */
export const TOOL_TIMEOUT_MS_CEILING: number = LIMITS.toolTimeoutMsMax.max;

/** One non-configurable bound: its value, the module that enforces it, and why it is what it is. */
export interface FixedLimitSpec {
  readonly value: number;
  readonly unit?: 'ms' | 'bytes' | 'characters';
  readonly where: string;
  readonly why: string;
}

/**
 * The bounds no operator sets: each is enforced by the module named in `where`, which imports it
 * from here by name.
 */
export const FIXED_LIMITS = {
  CONFIG_BYTES_MAX: {
    value: 1_048_576,
    unit: 'bytes',
    where: 'src/server/config.ts',
    why: 'The TALLY_CONFIG file, refused past it before it is parsed: its providers and limits take a few KB.',
  },
  TOOL_TITLE_MAX: {
    value: 200,
    unit: 'characters',
    where: 'src/actions/document.ts',
    why: "A tool's title: a human label shown in tool lists, not a description.",
  },
  TOOL_ALIASES_MAX: {
    value: 8,
    where: 'src/actions/names.ts',
    why: "Aliases of one tool: each is a name no other action may take, checked against every action's versions.",
  },
  CACHE_TTL_MS_MAX: {
    value: 3_600_000,
    unit: 'ms',
    where: 'src/actions/document.ts',
    why: 'The longest execution.cacheTtlMs a version may set: one hour.',
  },
  TEMPLATE_TEXT_MAX: {
    value: 4096,
    unit: 'characters',
    where: 'src/ledger/post-transaction.ts',
    why:
      "A text a tran code's template evaluates to (correlationId, externalId, descriptions, entry types): " +
      'each is stored on every transaction or entry it writes.',
  },
  PLAIN_JSON_DEPTH_MAX: {
    value: 32,
    where: 'src/ledger/records.ts',
    why: 'Nesting past which isPlainJson gives up: the caller then takes the general path (the JSON text parsed back).',
  },
  OUTSIDE_STOP_GRACE_MS: {
    value: 10_000,
    unit: 'ms',
    where: 'src/agents/runner.ts',
    why: "How long a stopping worker lets an outside call in flight (an http or MCP tool's request) finish and record its outcome before it aborts it: the integration's default timeoutMs. Aborted, the request's fate is unknown.",
  },
  ANSWER_DEPTH_MAX: {
    value: 64,
    where: 'src/integrations/http.ts',
    why: "How deep an outside service's JSON answer may nest: an http tool's answer is read with CEL, which walks it; deeper is refused (INTEGRATION_ERROR, outcome unknown) rather than overflowing the stack.",
  },
  MESSAGE_ID_MAX: {
    value: 128,
    unit: 'characters',
    where: 'src/agents/sessions.ts',
    why: "A session message's id, 1 to this many characters (a UUID, as the hint asks, is 36).",
  },
  MAX_TOKENS_MAX: {
    value: 200_000,
    where: 'src/agents/config.ts',
    why: 'The largest maxTokens a model or agent config may ask for: the largest answer a model may give.',
  },
  TEXT_BYTES_MAX: {
    value: 32_768,
    unit: 'bytes',
    where: 'src/agents/config.ts',
    why: "A model or agent config's instructions or prompt: text sent to the model.",
  },
  NAME_SHOWN_MAX: {
    value: 64,
    unit: 'characters',
    where: 'src/execution/invoke.ts, src/agents/runner.ts',
    why:
      'A tool name a caller or a model sent, cut to this in messages and records: a name is at most 64 ' +
      'characters, so a longer one is invented, and need not be shown whole.',
  },
  NAMES_LISTED_MAX: {
    value: 20,
    where: 'src/execution/invoke.ts, src/agents/runner.ts',
    why: 'Tool names listed to a caller or a model that asked for one it does not have; the rest are counted.',
  },
  CORRECTIONS_MAX: {
    value: 1,
    where: 'src/agents/runner.ts',
    why: 'Corrective turns after a model answer that does not match the output schema: one retry, then it fails.',
  },
  CLIENT_INFO_CHARS_MAX: {
    value: 256,
    unit: 'characters',
    where: 'src/mcp/http.ts',
    why:
      "Each string of an MCP initialize's clientInfo and its protocolVersion: the SDK keeps them for the " +
      "session's life.",
  },
  LIST_PAGES_READ_MAX: {
    value: 10,
    where: 'src/mcp/server.ts',
    why:
      'Pages of tools read to name the available tools (an unknown tool) or to notice a change ' +
      '(list_changed): mcpToolsPageSize × 10 actions, so one MCP request stays a bounded number of reads.',
  },
  SKILL_DESCRIPTION_CHARS_MAX: {
    value: 1000,
    unit: 'characters',
    where: 'src/skills/skills.ts',
    why: "A skill's description: the model reads it in every run that declares the skill.",
  },
  PROVIDER_TIMEOUT_MS_MAX: {
    value: 600_000,
    unit: 'ms',
    where: 'src/models/providers.ts (TIMEOUT_MAX)',
    why: "The longest timeoutMs a model provider's config (TALLY_CONFIG providers) may set: 10 minutes.",
  },
  PROVIDER_RETRIES_MAX: {
    value: 10,
    where: 'src/models/providers.ts (RETRIES_MAX)',
    why: "The most maxRetries a model provider's config (TALLY_CONFIG providers) may set.",
  },
  PROVIDER_DETAIL_MAX: {
    value: 300,
    unit: 'characters',
    where: 'src/models/http.ts (DETAIL_MAX)',
    why: "A provider's words kept in an error: the key taken out first, whitespace collapsed, then cut to this.",
  },
  DOCUMENT_HASHES_MAX: {
    value: 1024,
    where: 'src/storage/statements/actions.ts',
    why: "Query texts' sha256 remembered per engine (a program runs the same few documents); cleared when full.",
  },
  DOCUMENT_HASHED_CHARS_MAX: {
    value: 4096,
    unit: 'characters',
    where: 'src/storage/statements/actions.ts',
    why: 'Query texts longer than this are hashed each time rather than kept as a key of that cache.',
  },
  PROJECT_FILE_BYTES_MAX: {
    value: 16 * 1024 * 1024,
    unit: 'bytes',
    where: 'src/deploy/project.ts',
    why: "A project file `tally deploy` reads, refused before it is read (the server's limits are far smaller).",
  },
} as const satisfies Record<string, FixedLimitSpec>;

export const CONFIG_BYTES_MAX: number = FIXED_LIMITS.CONFIG_BYTES_MAX.value;
export const TOOL_TITLE_MAX: number = FIXED_LIMITS.TOOL_TITLE_MAX.value;
export const TOOL_ALIASES_MAX: number = FIXED_LIMITS.TOOL_ALIASES_MAX.value;
export const CACHE_TTL_MS_MAX: number = FIXED_LIMITS.CACHE_TTL_MS_MAX.value;
export const TEMPLATE_TEXT_MAX: number = FIXED_LIMITS.TEMPLATE_TEXT_MAX.value;
export const PLAIN_JSON_DEPTH_MAX: number = FIXED_LIMITS.PLAIN_JSON_DEPTH_MAX.value;
export const ANSWER_DEPTH_MAX: number = FIXED_LIMITS.ANSWER_DEPTH_MAX.value;
export const OUTSIDE_STOP_GRACE_MS: number = FIXED_LIMITS.OUTSIDE_STOP_GRACE_MS.value;
export const MESSAGE_ID_MAX: number = FIXED_LIMITS.MESSAGE_ID_MAX.value;
export const MAX_TOKENS_MAX: number = FIXED_LIMITS.MAX_TOKENS_MAX.value;
export const TEXT_BYTES_MAX: number = FIXED_LIMITS.TEXT_BYTES_MAX.value;
export const NAME_SHOWN_MAX: number = FIXED_LIMITS.NAME_SHOWN_MAX.value;
export const NAMES_LISTED_MAX: number = FIXED_LIMITS.NAMES_LISTED_MAX.value;
export const CORRECTIONS_MAX: number = FIXED_LIMITS.CORRECTIONS_MAX.value;
export const CLIENT_INFO_CHARS_MAX: number = FIXED_LIMITS.CLIENT_INFO_CHARS_MAX.value;
export const LIST_PAGES_READ_MAX: number = FIXED_LIMITS.LIST_PAGES_READ_MAX.value;
export const SKILL_DESCRIPTION_CHARS_MAX: number = FIXED_LIMITS.SKILL_DESCRIPTION_CHARS_MAX.value;
export const PROVIDER_TIMEOUT_MS_MAX: number = FIXED_LIMITS.PROVIDER_TIMEOUT_MS_MAX.value;
export const PROVIDER_RETRIES_MAX: number = FIXED_LIMITS.PROVIDER_RETRIES_MAX.value;
export const PROVIDER_DETAIL_MAX: number = FIXED_LIMITS.PROVIDER_DETAIL_MAX.value;
export const DOCUMENT_HASHES_MAX: number = FIXED_LIMITS.DOCUMENT_HASHES_MAX.value;
export const DOCUMENT_HASHED_CHARS_MAX: number = FIXED_LIMITS.DOCUMENT_HASHED_CHARS_MAX.value;
export const PROJECT_FILE_BYTES_MAX: number = FIXED_LIMITS.PROJECT_FILE_BYTES_MAX.value;

/**
 * A rule two or more limits must keep together, checked at start-up by resolveLimits (as
 * TigerBeetle's constants.zig asserts its own). Only what the shipped defaults keep on both backends
 * and the engine relies on is here.
 */
export interface LimitRelation {
  /** The rule, as the reference shows it. */
  readonly rule: string;
  readonly limits: readonly LimitName[];
  readonly why: string;
  holds(limits: Readonly<Limits>): boolean;
  /** The error message when it does not hold: it names every limit and its value. */
  refusal(limits: Readonly<Limits>): string;
  /**
   * A part bounded by its whole: when the operator leaves the part out and sets the whole below the
   * part's default, the part is the whole (a lower whole bounds the part the same way either way).
   */
  readonly partOf?: { readonly part: LimitName; readonly whole: LimitName };
}

/** `part` counts some of what `whole` counts (one client's, one address's): it cannot be larger. */
function partOf(part: LimitName, whole: LimitName, why: string): LimitRelation {
  return {
    rule: `\`${part}\` ≤ \`${whole}\``,
    limits: [part, whole],
    why,
    holds: (limits) => limits[part] <= limits[whole],
    refusal: (limits) => `${part} (${limits[part]}) must be at most ${whole} (${limits[whole]}): ${why}`,
    partOf: { part, whole },
  };
}

/** Digits an amount may have in all: arithmetic is exact to 80 significant digits (see src/decimal.ts). */
const DECIMAL_DIGITS_MAX = 60;

export const LIMIT_RELATIONS: readonly LimitRelation[] = [
  {
    rule: `\`decimalIntegerDigitsMax\` + \`decimalFractionDigitsMax\` ≤ ${DECIMAL_DIGITS_MAX}`,
    limits: ['decimalIntegerDigitsMax', 'decimalFractionDigitsMax'],
    why: 'sums of amounts and balances are exact to 80 significant digits: amounts stay well inside that',
    holds: (l) => l.decimalIntegerDigitsMax + l.decimalFractionDigitsMax <= DECIMAL_DIGITS_MAX,
    refusal: (l) =>
      `decimalIntegerDigitsMax + decimalFractionDigitsMax must be at most ${DECIMAL_DIGITS_MAX} (arithmetic is exact to 80 digits), got ${l.decimalIntegerDigitsMax} + ${l.decimalFractionDigitsMax}`,
  },
  {
    rule: '`requestDeadlineMs` ≤ `operatorDeadlineMs`',
    limits: ['requestDeadlineMs', 'operatorDeadlineMs'],
    why: 'the operator budget is the larger one',
    holds: (l) => l.requestDeadlineMs <= l.operatorDeadlineMs,
    refusal: (l) =>
      `operatorDeadlineMs (${l.operatorDeadlineMs}) must be at least requestDeadlineMs (${l.requestDeadlineMs}): the operator budget is the larger one`,
  },
  partOf('connectionsPerAddressMax', 'connectionsMax', "one address's connections are some of all the connections"),
  partOf('mcpSessionsPerClientMax', 'mcpSessionsMax', "one client's MCP sessions are some of all the sessions"),
  partOf('writeQueuePerClientMax', 'writeQueueMax', "one client's waiting requests are some of the write queue's"),
  partOf(
    'writeQueuePerClientBytesMax',
    'writeQueueBytesMax',
    "one client's waiting bodies are some of the write queue's bytes",
  ),
  partOf('agentRunsPerClientMax', 'agentRunsConcurrentMax', "one client's runs are some of a worker's runs in flight"),
  partOf(
    'executionWaitersPerClientMax',
    'executionWaitersMax',
    "one client's waits are some of the waits in flight in the process",
  ),
];

/** The backend the engine runs on: where a limit's default or bound differs (LimitSpec.postgres). */
export type LimitsBackend = 'sqlite' | 'postgres';

function badRequest(message: string, hint: string, details: Record<string, unknown>): EngineError {
  return new EngineError('BAD_REQUEST', message, { hint, details });
}

const WHERE_SET = 'TALLY_CONFIG\'s "limits" (or createEngine\'s limits)';

/** An override of one limit, checked against its row of the table (an undefined one leaves the default). */
function checkOverride(name: string, value: unknown): asserts value is number | undefined {
  if (!Object.hasOwn(LIMITS, name)) {
    throw badRequest(
      `unknown limit ${JSON.stringify(name)}`,
      `Check the key in ${WHERE_SET}: docs/reference/limits.md lists every limit by name.`,
      { limit: name },
    );
  }
  if (value === undefined) return;
  const spec: LimitSpec = LIMITS[name as LimitName];
  const min = spec.min ?? 0;
  const range =
    spec.max !== undefined
      ? `an integer from ${min} to ${spec.max}`
      : min === 0
        ? 'a non-negative integer'
        : `an integer of at least ${min}`;
  const hint = `Set limits.${name} in ${WHERE_SET} to ${range} (its default is ${spec.default}).`;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
    const what = min === 0 ? 'a non-negative integer' : `an integer of at least ${min}`;
    throw badRequest(`limit ${name} must be ${what}, got ${JSON.stringify(value)}`, hint, {
      limit: name,
      value,
      min,
      ...(spec.max === undefined ? {} : { max: spec.max }),
    });
  }
  if (spec.max !== undefined && value > spec.max) {
    throw badRequest(`${name} (${value}) may be at most ${spec.max}${spec.maxWhy ? ` (${spec.maxWhy})` : ''}`, hint, {
      limit: name,
      value,
      min,
      max: spec.max,
    });
  }
}

/**
 * The limits an engine runs with: the defaults (the backend's where it has its own), the overrides
 * over them, each checked against its row of the table, and then every relation checked. A bad
 * override is BAD_REQUEST naming the limit and the value, with the valid range in the hint.
 */
export function resolveLimits(overrides: Partial<Limits> = {}, backend: LimitsBackend = 'sqlite'): Readonly<Limits> {
  const limits: Limits = { ...DEFAULT_LIMITS };
  if (backend === 'postgres') {
    for (const [name, spec] of LIMIT_ENTRIES) {
      if (spec.postgres?.default !== undefined) limits[name] = spec.postgres.default;
    }
  }
  for (const [name, value] of Object.entries(overrides)) {
    checkOverride(name, value);
    if (value !== undefined) limits[name as LimitName] = value;
  }
  const given = (name: LimitName) => overrides[name] !== undefined;
  for (const relation of LIMIT_RELATIONS) {
    const follows = relation.partOf;
    if (follows && !given(follows.part) && limits[follows.part] > limits[follows.whole]) {
      limits[follows.part] = limits[follows.whole];
    }
  }
  for (const relation of LIMIT_RELATIONS) {
    if (relation.holds(limits)) continue;
    throw badRequest(
      relation.refusal(limits),
      `Set ${relation.limits.map((name) => `limits.${name}`).join(' and ')} in ${WHERE_SET} so that ${relation.rule.replaceAll('`', '')}.`,
      {
        relation: relation.rule.replaceAll('`', ''),
        ...Object.fromEntries(relation.limits.map((n) => [n, limits[n]])),
      },
    );
  }
  if (backend === 'postgres') checkPostgres(limits);
  return Object.freeze(limits);
}

/** The bounds PostgreSQL adds (LimitSpec.postgres.max). */
function checkPostgres(limits: Readonly<Limits>): void {
  for (const [name, spec] of LIMIT_ENTRIES) {
    const max = spec.postgres?.max;
    if (max === undefined || limits[name] <= max) continue;
    throw badRequest(
      `limit ${name} is ${limits[name]}; on PostgreSQL it may be at most ${max}`,
      `Set ${name} to ${max} or less (${spec.postgres?.why}).`,
      { limit: name, value: limits[name], max },
    );
  }
}

/** 1048576 → "1 048 576": the reference's numbers, digits grouped. */
function grouped(n: number): string {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ' ');
}

/** A value with its unit, and in a larger unit where it is a round one: "33 554 432 (32 MiB)". */
function shown(value: number, unit: LimitSpec['unit']): string {
  const plain = grouped(value);
  if (unit === 'bytes' && value >= 1024 && value % 1024 === 0) {
    const mib = value % (1024 * 1024) === 0;
    return `${plain} (${mib ? `${value / 1024 / 1024} MiB` : `${value / 1024} KiB`})`;
  }
  if (unit === 'ms' && value >= 1000 && value % 1000 === 0) {
    const s = value / 1000;
    const larger = s % 3600 === 0 ? `${s / 3600} h` : s % 60 === 0 ? `${s / 60} min` : `${s} s`;
    return `${plain} (${larger})`;
  }
  return plain;
}

function cell(text: string): string {
  return text.replaceAll('|', '\\|').replaceAll('\n', ' ');
}

/**
 * docs/reference/limits.md, generated from LIMITS, LIMIT_RELATIONS and FIXED_LIMITS
 * (`npx tsx scripts/docs-limits.ts` writes it; test/core/limits.docs.test.ts checks it is current).
 */
export function limitsMarkdown(): string {
  const lines = [
    '# Limits',
    '',
    '<!-- Generated from src/limits.ts by `npx tsx scripts/docs-limits.ts`: edit the table there, not this file. -->',
    '',
    'Every bound the engine enforces, with its default and the reason for it. Each limit below can be set',
    'in the `"limits"` object of the TALLY_CONFIG file, or with `createEngine({ limits: { … } })`, to a',
    'non-negative integer within its bounds; each has a test that crosses it. A bad value, an unknown',
    'name or a broken relation is refused when the engine starts (`BAD_REQUEST`, naming the limit and',
    'the value). Units: `ms` milliseconds, `bytes`, `characters`; a count otherwise.',
    '',
    '## Relations',
    '',
    'Checked when the engine starts; a configuration that breaks one is refused, naming both limits and',
    'their values. A per-client (or per-address) limit left out is lowered to its total when the total is',
    'set below it.',
    '',
    '| rule | why |',
    '|---|---|',
    ...LIMIT_RELATIONS.map((r) => `| ${cell(r.rule)} | ${cell(r.why)} |`),
    '',
  ];
  for (const [group, title] of Object.entries(LIMIT_GROUPS)) {
    lines.push(
      `## ${title}`,
      '',
      '| limit | default | unit | bounds | what it bounds, and why |',
      '|---|---:|---|---|---|',
    );
    for (const [name, spec] of LIMIT_ENTRIES) {
      if (spec.group !== group) continue;
      const pg = spec.postgres;
      const fallback = shown(spec.default, spec.unit);
      const defaults =
        pg?.default === undefined ? fallback : `${fallback} on SQLite, ${shown(pg.default, spec.unit)} on PostgreSQL`;
      const bounds = [
        spec.max === undefined ? `≥ ${spec.min ?? 0}` : `${spec.min ?? 0} to ${grouped(spec.max)}`,
        ...(pg?.max === undefined ? [] : [`at most ${grouped(pg.max)} on PostgreSQL`]),
      ].join('; ');
      const notes = [spec.doc, ...(spec.maxWhy ? [`At most ${grouped(spec.max!)}: ${spec.maxWhy}.`] : [])];
      if (pg) notes.push(`PostgreSQL: ${pg.why}.`);
      lines.push(`| \`${name}\` | ${defaults} | ${spec.unit ?? ''} | ${bounds} | ${cell(notes.join(' '))} |`);
    }
    lines.push('');
  }
  lines.push(
    '## Fixed bounds',
    '',
    'Not configurable: each is enforced where `where` says, and defined in `FIXED_LIMITS` (src/limits.ts).',
    '',
    '| name | value | unit | where | why |',
    '|---|---:|---|---|---|',
  );
  for (const [name, spec] of Object.entries(FIXED_LIMITS) as [string, FixedLimitSpec][]) {
    lines.push(
      `| \`${name}\` | ${shown(spec.value, spec.unit)} | ${spec.unit ?? ''} | ${spec.where} | ${cell(spec.why)} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}
