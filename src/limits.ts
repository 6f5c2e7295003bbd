/**
 * Every bound the engine enforces, with its default and the reason for it. Each one can be
 * overridden through `createEngine({ limits })`, and each has a test that crosses it.
 */
export interface Limits {
  /** Largest `first` a connection accepts. Pages must stay small enough to answer in one request. */
  pageSizeMax: number;
  /** Largest GraphQL document (query text) in bytes; parsing is linear but validation is not cheap. */
  documentBytesMax: number;
  /**
   * Deepest selection nesting in a GraphQL document; stops exponential fan-out through relations.
   * Introspection (`__schema`, `__type` and below) is not counted: it reads only the schema, and
   * graphql-js's MaxIntrospectionDepthRule and queryCostMax bound it (GraphiQL's query is 15 deep).
   */
  queryDepthMax: number;
  /** Parsed and validated documents kept in the cache (keyed by source text). */
  documentCacheMax: number;
  /**
   * Lexical tokens in a GraphQL document. Parsing stops at the bound, and every later step (the
   * validation rules, the cost, the cached AST: up to ~110 bytes a token) is linear in it. The
   * GraphiQL introspection query has ~160 tokens; `tally import`'s batch of 100 postings ~1,700.
   */
  documentTokensMax: number;
  /**
   * Field selections written in a GraphQL document (aliases count). The validation rules and the
   * cost are linear in it, and each field holds ~240 bytes in the document cache.
   */
  documentFieldsMax: number;
  /**
   * Field comparisons graphql-js's OverlappingFieldsCanBeMerged may make, estimated before it runs
   * (see countFieldComparisons): fields under one response name in one selection set are compared
   * pairwise, with everything beneath them. 10,000 validate in ~10 ms; 500 repeated
   * `journal { name }` (250,000) took ~0.3-0.7 s. Documents that select each field once cost ~0.
   */
  fieldComparisonsMax: number;
  /**
   * Heap the document cache may hold, estimated per document from its tokens, fields and source
   * (see estimateDocumentBytes); the least recently used documents are evicted first. The largest
   * document the other bounds let through is estimated at ~1.7 MB, a typical query at ~12 KB.
   */
  documentCacheBytesMax: number;
  /**
   * Largest cost of one operation, computed before any resolver runs: every field costs 1, and the
   * fields below a connection count once per `first` (a plain list: per item its limit allows). So
   * nested connections multiply, and one short query cannot ask for millions of rows. The costliest
   * query the repo sends (`tally execution`: seven levels of an execution's calls, with model turns) costs 98,412, GraphiQL's
   * introspection ~7,200; with full pages a unit is ~10-40 µs of work, so ~1-4 s at the bound.
   */
  queryCostMax: number;
  /**
   * Largest result (JSON, counted in characters) a request may build; over it the request fails
   * and a mutation rolls back. The second line behind queryCostMax, for large JSON values.
   */
  resultBytesMax: number;
  /** Largest HTTP request body in bytes. */
  requestBodyBytesMax: number;
  /**
   * Tools per MCP tools/list page (those the client may call; actions it may not are skipped, and
   * shown in no count or cursor). A model reads every tool it is offered: a page stays a short read.
   */
  mcpToolsPageSize: number;
  /**
   * Open MCP sessions on /mcp, all clients together: each holds a server and a transport in
   * memory until it is closed or idle for mcpSessionIdleMs. A new one past the bound gets 503.
   */
  mcpSessionsMax: number;
  /** Open MCP sessions of one client: one client opening sessions in a loop cannot take them all. */
  mcpSessionsPerClientMax: number;
  /** An MCP session nobody used for this long is closed (a client that vanished never says DELETE). */
  mcpSessionIdleMs: number;
  /** HTTP request timeout: a client that does not finish sending its body in time is cut off. */
  requestTimeoutMs: number;
  /**
   * How long a connection may take to send a request's headers: from its opening to its first
   * request (a socket that sends nothing is closed), and from a request's first byte to the end of
   * its headers (408). No key is needed to open a connection, so this is what an unknown peer can
   * hold one for; headers are a few hundred bytes, sent at once by every client.
   */
  headersTimeoutMs: number;
  /** How long a keep-alive connection may stay open with no request after a response (then it is closed). */
  keepAliveTimeoutMs: number;
  /**
   * How long a response may wait on a peer that reads none of it (its output has not moved) before
   * the connection is closed; a stalled connection also makes room for a new one, as an idle one
   * does. A slow reader that reads at all is never stalled. 0: never.
   */
  responseStallMs: number;
  /**
   * Open HTTP connections, all peers together: each holds a file descriptor (a server at `ulimit
   * -n` 1024 refuses every connection past its descriptors). A connection past it closes the
   * connection longest open with no request in flight (one that never sent a request first); when
   * every connection has a request in flight, the new one is closed at once.
   */
  connectionsMax: number;
  /**
   * Of connectionsMax, those from one peer address, made room for in the same way (that address's
   * idle connections first), so one peer cannot take every place. Every connection from a reverse
   * proxy has the proxy's address: behind one, raise this to connectionsMax and bound peers there.
   */
  connectionsPerAddressMax: number;
  /** Longest CEL expression in characters. */
  celExpressionLengthMax: number;
  /** Compiled CEL expressions kept in the cache. */
  celCacheMax: number;
  /**
   * Cost budget of one CEL evaluation (one unit ≈ one sub-expression evaluated; list elements,
   * string characters and regex work are charged too, see src/cel/cost.ts). Nested macros over an
   * input multiply: without a bound a short expression runs for minutes while holding the write lock.
   * 1,000,000 is Kubernetes' per-expression limit and stops the worst expression here within about 0.1 s.
   */
  celCostMax: number;
  /**
   * Largest regular expression (CEL matches, JSON Schema pattern), as the estimated instructions of
   * its RE2 program. RE2 is linear in the text but also in the program, which counted repetitions
   * make large from a short pattern (`(?:.{1000}){4}`); compiling costs about as much.
   */
  regexSizeMax: number;
  /** Rows kept by each record cache (journals by id, tran codes by code, active triggers). */
  recordCacheMax: number;
  /** Entries one transaction may write (tran code entry templates, and entries after conditions). */
  entriesPerTransactionMax: number;
  /** Params one tran code may declare. */
  tranCodeParamsMax: number;
  /** Largest metadata or params JSON in bytes. */
  jsonBytesMax: number;
  /** Deepest nesting of any JSON value sent in (metadata, params, documents, tool input and output). */
  jsonDepthMax: number;
  /** Largest value (list elements + string characters + map entries, summed) a CEL evaluation may build. */
  celValueSizeMax: number;
  /** Digits before the decimal point of any amount. 30 covers every fiat and crypto supply with room. */
  decimalIntegerDigitsMax: number;
  /** Digits after the decimal point of any amount. 18 is what ETH-style tokens need. */
  decimalFractionDigitsMax: number;
  /** Longest chain of nested account sets (a set in a set in a set: 3). */
  accountSetDepthMax: number;
  /** Sets one account may roll up into (directly or through other sets): each posting updates each of them. */
  accountSetAncestorsMax: number;
  /**
   * Entries one calculation backfill may read: creating a GLOBAL calculation, or attaching a LOCAL
   * one, applies the existing entries it covers inside the request's transaction (holding the
   * write lock). Past it the request fails and nothing is written.
   */
  calculationBackfillEntriesMax: number;
  /** Custom dimensions of one calculation: each is one CEL evaluation per entry and set it counts. */
  calculationDimensionsMax: number;
  /** Active calculations (children not counted): each GLOBAL one is evaluated for every entry posted. */
  calculationsMax: number;
  /**
   * CEL budget (celCostMax's units) of everything a posting evaluates beyond its tran code: the
   * calculations, views, indexes and velocity controls it reaches, together. Whoever defines them,
   * each posting pays at most this (~10 ms); past it the posting fails with LIMIT_EXCEEDED.
   */
  postingCelCostMax: number;
  /** Velocity controls attached to one account or set: each posting checks every one of its accounts and their sets. */
  velocityControlsPerAccountMax: number;
  /** Limits in one velocity control. */
  velocityLimitsPerControlMax: number;
  /** Window keys of one velocity limit. */
  velocityWindowKeysMax: number;
  /** How long a writer waits for SQLite's write lock before failing with BUSY. */
  busyTimeoutMs: number;
  /**
   * PostgreSQL: how many times one transaction (a request, a group of requests, a worker's
   * attempts) runs again after losing a race with another process (a serialization failure or a
   * deadlock, every transaction being SERIALIZABLE). Past it the request fails with BUSY
   * (retryable): the contention is the client's to back off from. SQLite never needs it (one writer).
   */
  transactionRetriesMax: number;
  /**
   * Group commit: the most write requests one SQLite transaction (one COMMIT) takes, each under a
   * savepoint of its own. The server groups the mutations that are ready together; 1 turns it off.
   */
  writeBatchMax: number;
  /**
   * Group commit: once a group has run this long (ms), it commits with what it has and the
   * requests left wait for the next group, so a group's first request is not held behind many.
   */
  writeBatchWaitMs: number;
  /** Group commit of the queue worker: the most due attempts one transaction runs (each under its savepoint); 1 turns it off. */
  workerBatchMax: number;
  /** Mutations the server holds waiting for the database; past it a mutation is answered BUSY (503). */
  writeQueueMax: number;
  /** Of writeQueueMax, the most one client may hold, so a flood from one client leaves room for the others. */
  writeQueuePerClientMax: number;
  /**
   * Bytes of request bodies the write queue holds, all clients together (a parsed body can take
   * ~20× its size in memory): past it a mutation is answered BUSY (503).
   */
  writeQueueBytesMax: number;
  /** Of writeQueueBytesMax, the most one client's waiting bodies may hold. */
  writeQueuePerClientBytesMax: number;
  /**
   * How long /readyz keeps trying the write lock while another process holds it (trying again
   * every few milliseconds, never blocking other requests); held longer, the database is reported
   * not ready.
   */
  readinessWaitMs: number;
  /**
   * Distinct operation names, and action names, that /metrics labels one by one; the rest are
   * counted under "other". Operation names are chosen by clients: without a cap, each new name
   * would be a new series in the scraper for ever.
   */
  metricsLabelValuesMax: number;
  /**
   * WAL pages after which the committing request checkpoints the log itself. The background
   * checkpointer (EngineOptions.checkpointIntervalMs) copies pages long before; this bounds the
   * log (~4 KiB a page) when a steady stream of writes never lets it restart.
   */
  walAutocheckpointPages: number;

  /** Largest tool program (config.src) in bytes. */
  programBytesMax: number;
  /** Tool references one action version may declare. */
  toolReferencesMax: number;
  /** Policies one client or one action version may hold (each is checked on every guarded operation). */
  policiesMax: number;
  /** Largest execution.maxAttempts a version may ask for. */
  maxAttemptsMax: number;
  /** Wall-clock deadline of a top-level call when its version sets no timeoutMs; nested calls share it. */
  toolTimeoutMs: number;
  /**
   * Largest execution.timeoutMs a version may ask for; at most TOOL_TIMEOUT_MS_CEILING. A running
   * tool holds its process (the engine is synchronous): the thread that answers HTTP when `tally
   * serve` runs it, so long tools belong on `tally worker` processes (`tally serve --no-worker`).
   * On SQLite it also holds the one write lock: every other client's writes wait, and other
   * processes' writers fail BUSY past busyTimeoutMs, so the default is 750 ms there. On PostgreSQL
   * it holds only its rows' locks: the default there is PG_TOOL_TIMEOUT_MS_MAX (30 s, what agent
   * frameworks give a tool). A call inside a request stops at the request's deadline all the same.
   */
  toolTimeoutMsMax: number;
  /**
   * How long one whole request may run: every tool call it makes (invokes one after another, their
   * nested calls) shares a deadline this long after the request began, and every resolver that does
   * work checks it too. The engine is synchronous, so this is the longest any request (or a started
   * execution's attempt, under its own timeout) holds the process, and a mutation the write lock:
   * below a second, so another client's request on the same server always answers within one.
   */
  requestDeadlineMs: number;
  /**
   * The deadline of a request sent under the operator budget (`@budget(name: OPERATOR)`, allowed by
   * a policy with INSERT on `budget.Operator`): a deploy, an import batch, a backfill, work an
   * operator starts on purpose. On SQLite the request holds the single writer all that time:
   * other clients' mutations wait behind it (reads go on from the read pool), and other
   * processes' writers wait busyTimeoutMs, then fail BUSY (retryable). Never shorter than
   * requestDeadlineMs.
   */
  operatorDeadlineMs: number;
  /** QuickJS heap per sandbox; the WASM memory is capped a little above it, which bounds typed arrays too. */
  sandboxMemoryBytesMax: number;
  /** QuickJS stack: deep recursion fails with LIMIT_EXCEEDED before it can threaten the host stack. */
  sandboxStackBytesMax: number;
  /** Largest tool input (JSON) in bytes. */
  inputBytesMax: number;
  /** Largest tool output (JSON) in bytes. */
  outputBytesMax: number;
  /** console.log output kept per call, in bytes; the rest is cut with a marker. */
  logBytesMax: number;
  /** Tool levels below the first call. */
  toolDepthMax: number;
  /** Calls (tool, graphql, cel) beneath one top-level call. */
  callsPerExecutionMax: number;
  /**
   * Triggers fired one after another: a change made by a trigger-started execution (or by one it
   * started) fires triggers one level deeper, up to this depth. Past it the match is recorded as a
   * FAILED execution (LIMIT_EXCEEDED): a trigger whose action posts cannot re-fire itself forever.
   */
  triggerDepthMax: number;
  /** A sandbox context is replaced after this many calls. */
  contextUsesMax: number;
  /** Idle sandbox contexts kept warm (per nesting level). */
  contextPoolMax: number;
  /**
   * Memory the calls of programs that can pin private fields on shared objects (their source has a
   * `#`) may leave held in one sandbox runtime, summed over calls; past it the runtime is freed.
   */
  sandboxRetainedBytesMax: number;
  /** Largest answer body a model provider may send (read as it streams in; past it the turn fails). */
  modelResponseBytesMax: number;
  /** Model turns in one agent run: an agent's `maxTurns` may not be higher. */
  agentTurnsMax: number;
  /** Tool calls in one agent run (an invented name counts): an agent's `maxToolCalls` may not be higher. */
  agentToolCallsMax: number;
  /** Longest whole agent run (ms), from its first attempt: an agent's `timeoutMs` may not be higher. */
  agentRunMsMax: number;
  /** Model and agent runs one worker keeps in flight at once (each mostly waits on its provider). */
  agentRunsConcurrentMax: number;
  /**
   * Of those, the runs of one client (starter): its further due runs wait while other clients'
   * runs are taken, so one client starting many slow runs cannot hold every slot.
   */
  agentRunsPerClientMax: number;
  /**
   * How long a worker holds a claimed model or agent run without a step; a run whose worker died is
   * picked up again after it. Renewed at every step and every leaseMs / 3 while a model answers.
   */
  agentLeaseMs: number;
  /** The conversation an agent run sends to its model, in bytes of JSON: past it the run fails. */
  agentConversationBytesMax: number;
  /** Longest an approval may wait for a decision (a reference's approval.timeoutMs; its default too). */
  approvalTimeoutMsMax: number;
  /** A session unused this long expires: it takes no more messages. */
  sessionIdleMs: number;
  /** Messages a session keeps (both sides); older ones are dropped, from the record and from what its turns send the model. */
  sessionHistoryMax: number;
  /** Characters of one session message. */
  sessionMessageCharsMax: number;
  /** Characters of one skill's body (its markdown guidance). */
  skillBodyCharsMax: number;
  /**
   * Longest one wait of `actions.execution(executionId:, waitMs:)` (a long-poll over HTTP and MCP):
   * the request answers when the execution is terminal or after waitMs. Over HTTP it is also cut
   * short to answer within requestTimeoutMs of the request's start.
   */
  executionWaitMsMax: number;
  /**
   * How often a waiting request reads the execution's status (one indexed SELECT, outside any
   * transaction), for a worker in another process; one in this process wakes the wait at once.
   */
  executionWaitPollMs: number;
  /**
   * Waits in flight in one process (each holds a timer and a listener, never a transaction). Past
   * it a wait returns at once and the field answers the execution's current state.
   */
  executionWaitersMax: number;
  /** Of those, the waits of one client: past it that client's further waits answer at once, the others' are unaffected. */
  executionWaitersPerClientMax: number;
  /**
   * How long MCP tools/call of a model or agent tool (started, then waited for) waits in total;
   * past it the call answers with the execution id and status, to be read later.
   */
  mcpCallWaitMs: number;

  /** Views (schema.createView): every posting evaluates each view whose sources it touches. */
  viewsMax: number;
  /** Document fields of one view: each is one CEL evaluation per record a posting updates. */
  viewDocumentFieldsMax: number;
  /**
   * Records one source record may update in one view: the length of the view's normalize list
   * (an entry's account and its sets: accountSetAncestorsMax + 1 by default). Longer lists fail the posting.
   */
  viewRecordsPerSourceMax: number;
  /** Custom indexes (schema.createIndex), all record types together: each posting maintains each one on its record type. */
  indexesMax: number;
  /** Partition keys, and sort keys, of one view or index (each list): sort keys are stored in fixed columns. */
  indexKeysMax: number;
  /** Index rows one record may have in one index: the length of a list a partition expression returns. */
  indexRowsPerRecordMax: number;
  /**
   * Records createIndex indexes at once (the records that exist when it is created, in its own
   * transaction): past it the index is refused, so creating one never holds the write lock for long.
   */
  indexBackfillMax: number;

  /**
   * Threads of the read pool (src/runtime/read-pool.ts): each has its own read-only connection and
   * engine, and answers queries from a WAL snapshot beside the writer: a read runs while a mutation
   * or a tool holds the write lock and the writer's thread, and the writer never waits for a read.
   * Each holds a page cache and a sandbox module (some tens of MB); more threads than the cores
   * left beside the writer buy nothing.
   */
  readPoolThreads: number;
  /**
   * 1: `tally serve` runs its writer (mutations, tools, the queue worker) on a thread of its own, so
   * a running tool never holds the HTTP thread and reads never wait for one. 0: on the HTTP thread
   * (one thread hop less per request: more throughput on a machine with few cores, but every reply
   * waits while a tool runs).
   */
  writerThreads: number;
  /**
   * Queries waiting for a read thread, all clients together. Past it a query gets BUSY (retryable)
   * at once; and when it is full, a query of a client holding fewer of its places than the client
   * holding most takes the latter's newest place (that query gets BUSY): one client flooding
   * the pool fills it with its own queries and cannot keep the others' out.
   */
  readQueueMax: number;
}

export const DEFAULT_LIMITS: Readonly<Limits> = Object.freeze({
  pageSizeMax: 1000,
  documentBytesMax: 100_000,
  queryDepthMax: 12,
  documentCacheMax: 1000,
  documentTokensMax: 10_000,
  documentFieldsMax: 2000,
  fieldComparisonsMax: 10_000,
  documentCacheBytesMax: 32 * 1024 * 1024,
  queryCostMax: 100_000,
  resultBytesMax: 16 * 1024 * 1024,
  requestBodyBytesMax: 1_048_576,
  mcpToolsPageSize: 50,
  mcpSessionsMax: 64,
  mcpSessionsPerClientMax: 8,
  mcpSessionIdleMs: 10 * 60_000,
  requestTimeoutMs: 30_000,
  headersTimeoutMs: 10_000,
  keepAliveTimeoutMs: 5000,
  responseStallMs: 10_000,
  connectionsMax: 512,
  connectionsPerAddressMax: 128,
  celExpressionLengthMax: 4096,
  celCacheMax: 10_000,
  celCostMax: 1_000_000,
  regexSizeMax: 5000,
  recordCacheMax: 1000,
  entriesPerTransactionMax: 500,
  tranCodeParamsMax: 64,
  jsonBytesMax: 65_536,
  jsonDepthMax: 32,
  celValueSizeMax: 100_000,
  decimalIntegerDigitsMax: 30,
  decimalFractionDigitsMax: 18,
  accountSetDepthMax: 10,
  accountSetAncestorsMax: 50,
  calculationBackfillEntriesMax: 100_000,
  calculationDimensionsMax: 16,
  calculationsMax: 64,
  postingCelCostMax: 100_000,
  velocityControlsPerAccountMax: 16,
  velocityLimitsPerControlMax: 16,
  velocityWindowKeysMax: 8,
  busyTimeoutMs: 5000,
  transactionRetriesMax: 16,
  writeBatchMax: 64,
  writeBatchWaitMs: 10,
  workerBatchMax: 16,
  writeQueueMax: 1024,
  writeQueuePerClientMax: 256,
  writeQueueBytesMax: 32 * 1024 * 1024,
  writeQueuePerClientBytesMax: 8 * 1024 * 1024,
  readinessWaitMs: 100,
  metricsLabelValuesMax: 100,
  walAutocheckpointPages: 10_000,

  programBytesMax: 262_144,
  toolReferencesMax: 64,
  policiesMax: 64,
  maxAttemptsMax: 100,
  toolTimeoutMs: 500,
  toolTimeoutMsMax: 750,
  requestDeadlineMs: 750,
  operatorDeadlineMs: 30_000,
  sandboxMemoryBytesMax: 64 * 1024 * 1024,
  sandboxStackBytesMax: 256 * 1024,
  inputBytesMax: 262_144,
  outputBytesMax: 1_048_576,
  logBytesMax: 16_384,
  toolDepthMax: 8,
  callsPerExecutionMax: 1024,
  triggerDepthMax: 4,
  contextUsesMax: 10_000,
  contextPoolMax: 16,
  sandboxRetainedBytesMax: 256 * 1024,
  modelResponseBytesMax: 1_048_576,
  agentTurnsMax: 32,
  agentToolCallsMax: 64,
  agentRunMsMax: 15 * 60_000,
  agentRunsConcurrentMax: 16,
  agentRunsPerClientMax: 4,
  agentLeaseMs: 30_000,
  agentConversationBytesMax: 1_048_576,
  approvalTimeoutMsMax: 24 * 3_600_000,
  sessionIdleMs: 24 * 3_600_000,
  sessionHistoryMax: 100,
  sessionMessageCharsMax: 8000,
  skillBodyCharsMax: 65_536,
  executionWaitMsMax: 30_000,
  executionWaitPollMs: 250,
  executionWaitersMax: 256,
  executionWaitersPerClientMax: 16,
  mcpCallWaitMs: 120_000,

  viewsMax: 32,
  viewDocumentFieldsMax: 32,
  viewRecordsPerSourceMax: 64,
  indexesMax: 32,
  indexKeysMax: 4,
  indexRowsPerRecordMax: 64,
  indexBackfillMax: 10_000,

  readPoolThreads: 2,
  writerThreads: 1,
  readQueueMax: 256,
});

/** toolTimeoutMsMax's default on PostgreSQL (see Limits.toolTimeoutMsMax). */
export const PG_TOOL_TIMEOUT_MS_MAX = 30_000;
/** The most toolTimeoutMsMax may be set to, on either backend: a tool is a step, not a job. */
export const TOOL_TIMEOUT_MS_CEILING = 300_000;

export function resolveLimits(overrides: Partial<Limits> = {}): Readonly<Limits> {
  const limits = { ...DEFAULT_LIMITS };
  for (const [name, value] of Object.entries(overrides)) {
    if (!Object.hasOwn(DEFAULT_LIMITS, name)) throw new Error(`unknown limit ${JSON.stringify(name)}`);
    if (value === undefined) continue;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) {
      throw new Error(`limit ${name} must be a non-negative integer, got ${JSON.stringify(value)}`);
    }
    (limits as Record<string, number>)[name] = value;
  }
  // Sums of amounts and balances are exact to 80 significant digits: keep amounts well inside that.
  if (limits.decimalIntegerDigitsMax + limits.decimalFractionDigitsMax > 60) {
    throw new Error(
      `decimalIntegerDigitsMax + decimalFractionDigitsMax must be at most 60 (arithmetic is exact to 80 digits), got ${limits.decimalIntegerDigitsMax} + ${limits.decimalFractionDigitsMax}`,
    );
  }
  if (limits.toolTimeoutMsMax > TOOL_TIMEOUT_MS_CEILING) {
    throw new Error(
      `toolTimeoutMsMax (${limits.toolTimeoutMsMax}) may be at most ${TOOL_TIMEOUT_MS_CEILING} (5 minutes): longer work is a started execution's attempts, or an agent's run`,
    );
  }
  if (limits.operatorDeadlineMs < limits.requestDeadlineMs) {
    throw new Error(
      `operatorDeadlineMs (${limits.operatorDeadlineMs}) must be at least requestDeadlineMs (${limits.requestDeadlineMs}): the operator budget is the larger one`,
    );
  }
  return Object.freeze(limits);
}
