import { statSync } from 'node:fs';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Engine } from '../engine.js';
import type { AttemptOutcome } from '../execution/queue/attempt.js';
import type { ReadPoolStats } from '../runtime/read-pool.js';
import { engineExecutor, type Executor } from '../runtime/writer-thread.js';
import type { WriterSnapshot } from '../runtime/writer-worker.js';

/** What one GraphQL request contributes to /metrics. */
export interface RequestSample {
  type: 'query' | 'mutation' | 'unknown';
  operation: string | null;
  /** 'ok', or the first error's code. */
  outcome: string;
  durationMs: number;
}

/**
 * Label values chosen outside the server (operation names, action names): the first `max`
 * distinct values keep their own label, every later one is "other", so the number of series
 * stays bounded whatever clients send.
 */
export class BoundedLabels {
  private readonly seen = new Set<string>();

  constructor(private readonly max: number) {}

  label(value: string): string {
    if (this.seen.has(value)) return value;
    if (this.seen.size >= this.max || value.length > 64) return 'other';
    this.seen.add(value);
    return value;
  }
}

const LATENCY_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
/** A model call takes from tens of milliseconds (a local model) to minutes. */
const MODEL_BUCKETS_S = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

/**
 * The server's Prometheus registry (its own, so two servers in one process do not share series).
 * Counters move as requests and attempts finish; gauges (queue, sandbox, caches, file sizes) are
 * read from the engine when /metrics is scraped.
 */
export class ServerMetrics {
  readonly registry = new Registry();
  private readonly operations: BoundedLabels;
  private readonly actions: BoundedLabels;
  private readonly requests: Counter<'type' | 'operation' | 'outcome'>;
  private readonly requestSeconds: Histogram<'type' | 'operation'>;
  private readonly attempts: Counter<'action' | 'status'>;
  private readonly attemptSeconds: Histogram<'action'>;
  private readonly modelCalls: Counter<'provider' | 'model' | 'outcome'>;
  private readonly modelTokens: Counter<'provider' | 'model' | 'direction'>;
  private readonly modelSeconds: Histogram<'provider' | 'model'>;
  private readonly models: BoundedLabels;
  private readonly outboundCalls: Counter<'kind' | 'name' | 'outcome'>;
  private readonly outboundSeconds: Histogram<'kind' | 'name'>;

  /** `executor`: where requests run (the engine, or the writer thread): its events and caches. Queue figures are read from the database by `engine`. */
  constructor(
    engine: Engine,
    executor: Executor = engineExecutor(engine),
    reads: () => ReadPoolStats | undefined = () => undefined,
  ) {
    const registers = [this.registry];
    this.operations = new BoundedLabels(engine.limits.metricsLabelValuesMax);
    this.actions = new BoundedLabels(engine.limits.metricsLabelValuesMax);
    collectDefaultMetrics({ register: this.registry });
    this.requests = new Counter({
      name: 'tally_graphql_requests_total',
      help: 'GraphQL requests by operation type, operation name (capped; others "other") and outcome ("ok" or the error code).',
      labelNames: ['type', 'operation', 'outcome'],
      registers,
    });
    this.requestSeconds = new Histogram({
      name: 'tally_graphql_request_duration_seconds',
      help: 'Time from a GraphQL request arriving to its response being written, by operation type and name.',
      labelNames: ['type', 'operation'],
      buckets: LATENCY_BUCKETS_S,
      registers,
    });
    this.attempts = new Counter({
      name: 'tally_execution_attempts_total',
      help: 'Attempts of started executions run by this process, by action and the status they left the execution in (QUEUED: it will be retried).',
      labelNames: ['action', 'status'],
      registers,
    });
    this.attemptSeconds = new Histogram({
      name: 'tally_execution_attempt_duration_seconds',
      help: 'Time one attempt of a started execution ran, by action.',
      labelNames: ['action'],
      buckets: LATENCY_BUCKETS_S,
      registers,
    });
    executor.onAttempt((outcome) => this.recordAttempt(outcome));
    // Provider and model names come from the operator's configuration; bounded all the same.
    this.models = new BoundedLabels(engine.limits.metricsLabelValuesMax);
    this.modelCalls = new Counter({
      name: 'tally_model_calls_total',
      help: 'Model calls made by model and agent runs of this process, by provider, model and outcome ("ok" or the error code).',
      labelNames: ['provider', 'model', 'outcome'],
      registers,
    });
    this.modelTokens = new Counter({
      name: 'tally_model_tokens_total',
      help: 'Tokens the providers reported, by provider, model and direction (input or output).',
      labelNames: ['provider', 'model', 'direction'],
      registers,
    });
    this.modelSeconds = new Histogram({
      name: 'tally_model_call_duration_seconds',
      help: 'Wall time of one model call, its client retries included, by provider and model.',
      labelNames: ['provider', 'model'],
      buckets: MODEL_BUCKETS_S,
      registers,
    });
    executor.onModelCall((call) => {
      const labels = { provider: this.models.label(call.provider), model: this.models.label(call.model) };
      this.modelCalls.inc({ ...labels, outcome: call.outcome });
      this.modelSeconds.observe(labels, call.latencyMs / 1000);
      if (call.inputTokens !== null) this.modelTokens.inc({ ...labels, direction: 'input' }, call.inputTokens);
      if (call.outputTokens !== null) this.modelTokens.inc({ ...labels, direction: 'output' }, call.outputTokens);
    });

    // Integration and MCP server names come from the operator's configuration; bounded all the same.
    this.outboundCalls = new Counter({
      name: 'tally_outbound_calls_total',
      help: 'Outside calls (http tools, MCP servers\' tools) made by runs of this process, by kind, integration or server, and outcome ("ok" or the error code).',
      labelNames: ['kind', 'name', 'outcome'],
      registers,
    });
    this.outboundSeconds = new Histogram({
      name: 'tally_outbound_call_duration_seconds',
      help: 'Wall time of one outside call (waiting for a slot, the request and reading the answer), by kind and integration or server.',
      labelNames: ['kind', 'name'],
      buckets: MODEL_BUCKETS_S,
      registers,
    });
    executor.onOutboundCall((call) => {
      const labels = { kind: call.kind, name: this.models.label(call.name) };
      this.outboundCalls.inc({ ...labels, outcome: call.outcome });
      this.outboundSeconds.observe(labels, call.latencyMs / 1000);
    });

    // Group commit: requests per COMMIT is the ratio of the two counters.
    const batches = new Counter({
      name: 'tally_write_batches_total',
      help: 'Group commits: SQLite transactions that ran one or more write requests (each under its own savepoint).',
      registers,
    });
    const batchRequests = new Counter({
      name: 'tally_write_batch_requests_total',
      help: 'Write requests run in group commits; divided by tally_write_batches_total, the mean group size.',
      registers,
    });
    executor.onBatch((size) => {
      batches.inc();
      batchRequests.inc(size);
    });

    // PostgreSQL: transactions run again after losing a race with another process (0 on SQLite).
    let retriesSeen = 0;
    new Counter({
      name: 'tally_transaction_retries_total',
      help: 'Transactions run again after losing a race with another process (PostgreSQL: serialization failure or deadlock; see transactionRetriesMax). Always 0 on SQLite.',
      registers,
      collect() {
        const now = engine.transactionRetries;
        if (now > retriesSeen) this.inc(now - retriesSeen);
        retriesSeen = now;
      },
    });
    const gauge = (name: string, help: string, read: () => number) =>
      new Gauge({
        name,
        help,
        registers,
        collect() {
          this.set(read());
        },
      });
    gauge(
      'tally_queue_depth',
      'Started executions waiting to run (QUEUED), due or not.',
      () => engine.queueStats().queued,
    );
    gauge('tally_queue_due', 'QUEUED executions whose run time has come.', () => engine.queueStats().due);
    gauge(
      'tally_queue_oldest_due_age_seconds',
      'How long the oldest due execution has waited past its run time (0 when none is due).',
      () => engine.queueStats().oldestDueAgeMs / 1000,
    );
    // The engine that runs requests: a message away under tally serve, so read once per scrape.
    let scrape: Promise<WriterSnapshot> | null = null;
    const snapshot = () =>
      (scrape ??= Promise.resolve(executor.snapshot()).finally(() => setImmediate(() => (scrape = null))));
    const fromSnapshot = (name: string, help: string, read: (s: WriterSnapshot) => number | null) =>
      new Gauge({
        name,
        help,
        registers,
        async collect() {
          const value = read(await snapshot());
          if (value !== null) this.set(value);
        },
      });
    const pool = (name: string, help: string, read: (s: ReadPoolStats) => number) =>
      new Gauge({
        name,
        help,
        registers,
        collect() {
          const stats = reads();
          if (stats) this.set(read(stats));
        },
      });
    pool(
      'tally_read_pool_threads_ready',
      'Read pool threads started and answering (absent until the pool starts).',
      (s) => s.ready,
    );
    pool('tally_read_pool_queued', 'Queries waiting for a read thread.', (s) => s.queued);
    pool(
      'tally_read_pool_refused',
      'Queries the read pool answered BUSY because its queue was full, since it started.',
      (s) => s.refused,
    );
    pool(
      'tally_read_pool_wal_holds',
      'Times the read pool held new queries so that a checkpoint could restart the WAL, since it started.',
      (s) => s.walHolds,
    );
    fromSnapshot('tally_sandbox_ready', '1 when the sandbox is loaded, 0 while it is replaced after a crash.', (s) =>
      s.sandbox === null ? 1 : 0,
    );
    fromSnapshot(
      'tally_sandbox_idle_contexts',
      'Warm sandbox contexts in the pool, ready for the next call.',
      (s) => s.stats?.idleSandboxContexts ?? null,
    );
    fromSnapshot(
      'tally_document_cache_entries',
      'Parsed and validated GraphQL documents cached.',
      (s) => s.stats?.documentCacheSize ?? null,
    );
    fromSnapshot(
      'tally_document_cache_bytes',
      'Estimated heap of the cached GraphQL documents.',
      (s) => s.stats?.documentCacheBytes ?? null,
    );
    fromSnapshot('tally_cel_cache_entries', 'Compiled CEL expressions cached.', (s) => s.stats?.celCacheSize ?? null);
    new Gauge({
      name: 'tally_database_bytes',
      help: 'Size of the SQLite database file and of its write-ahead log.',
      labelNames: ['file'],
      registers,
      collect() {
        const path = engine.db.name;
        if (path === ':memory:' || path === '') return;
        this.set({ file: 'db' }, fileSize(path));
        this.set({ file: 'wal' }, fileSize(`${path}-wal`));
      },
    });
  }

  recordRequest(sample: RequestSample): void {
    const operation = sample.operation === null ? 'anonymous' : this.operations.label(sample.operation);
    this.requests.inc({ type: sample.type, operation, outcome: sample.outcome });
    this.requestSeconds.observe({ type: sample.type, operation }, sample.durationMs / 1000);
  }

  private recordAttempt(outcome: AttemptOutcome): void {
    const action = this.actions.label(outcome.action);
    this.attempts.inc({ action, status: outcome.status });
    this.attemptSeconds.observe({ action }, outcome.durationMs / 1000);
  }
}

function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}
