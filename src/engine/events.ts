import type { AttemptOutcome } from '../execution/queue/attempt.js';
import type { ModelCallSample, OutboundCallSample } from '../execution/services.js';

/** What an engine tells the process it runs in (see Engine.onStarted and the rest). */
export interface EngineEventMap {
  /** A transaction that started executions committed: workers wake. */
  started: [];
  /** A write committed that may have changed actions or clients: MCP sessions look at their tool list. */
  actionsChanged: [];
  /** An attempt of a started execution ended, in a worker of this engine. */
  attempt: [outcome: AttemptOutcome];
  /** A model or agent run of this engine's workers made a model call. */
  modelCall: [call: ModelCallSample];
  /** A run of this engine's workers made an outside call (http, mcp). */
  outboundCall: [call: OutboundCallSample];
  /** A group commit (or its failure) ran this many requests. */
  batch: [size: number];
  /** A transaction that recorded progress messages (status(text)) committed: waits on these executions look again. */
  progress: [executionIds: readonly string[]];
}

/**
 * One typed emitter for everything an engine tells its listeners. A listener runs after the work
 * it hears about is done (committed, for the writes); one that throws is reported to `report`,
 * never turned into an error of that work, and never keeps the next listener from hearing it.
 */
export class EngineEvents {
  private readonly listeners: { [E in keyof EngineEventMap]: Array<(...args: EngineEventMap[E]) => void> } = {
    started: [],
    actionsChanged: [],
    attempt: [],
    modelCall: [],
    outboundCall: [],
    batch: [],
    progress: [],
  };

  constructor(private readonly report: (error: unknown) => void) {}

  on<E extends keyof EngineEventMap>(event: E, listener: (...args: EngineEventMap[E]) => void): void {
    this.listeners[event].push(listener);
  }

  emit<E extends keyof EngineEventMap>(event: E, ...args: EngineEventMap[E]): void {
    for (const listener of this.listeners[event]) {
      try {
        listener(...args);
      } catch (error) {
        this.report(error);
      }
    }
  }
}
