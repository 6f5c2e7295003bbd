import type { QuickJSContext, QuickJSHandle, QuickJSRuntime, QuickJSWASMModule } from 'quickjs-emscripten-core';
import { PRELUDE } from './prelude.js';

/**
 * The QuickJS runtime as a self-contained component. It knows nothing of ledgers or GraphQL: the
 * engine hands it a host bridge per call. One runtime per nesting level of calls; in each, a pool
 * of hardened contexts (deep-frozen intrinsics and globals, API installed) reused across calls,
 * each caching the compiled wrapper of the programs it ran. See run() for how nothing one call
 * leaves behind reaches the next.
 */

export interface SandboxLimits {
  /** QuickJS heap limit for the runtime (the WASM memory cap bounds it too). */
  memoryBytesMax: number;
  /** QuickJS stack limit: deep recursion fails cleanly long before the host stack is at risk. */
  stackBytesMax: number;
  /** A context is disposed and replaced after this many calls, as hygiene. */
  contextUsesMax: number;
  /** Idle contexts kept warm. */
  contextPoolMax: number;
  /** Compiled programs cached per context. */
  programsPerContextMax: number;
  /**
   * Memory a call may leave held in its context (private fields pinned on frozen objects) before
   * the context is thrown away rather than reused.
   */
  retainedBytesMax: number;
  /**
   * Nesting levels made when the sandbox is made, each runtime with one idle context (~10 ms
   * each): a chain of tools that deep costs its first caller what it costs the hundredth. Deeper
   * levels, and levels thrown away after a call, are made on first use.
   */
  warmLevels?: number;
  /**
   * The largest output a call may return (JSON bytes): the prelude refuses a longer one as it is
   * made, before it is copied out of the sandbox. The engine checks the exact byte count after.
   */
  outputBytesMax?: number;
  /**
   * How deep a value leaving a call may nest (the root is level 1): the prelude refuses a deeper
   * one (LIMIT_EXCEEDED) as it is written out, before the rest of it is made and copied.
   */
  jsonDepthMax?: number;
  /**
   * The CEL library a program calls directly (uuid.New(), date(t), strings.ToUpper(s)...): JSON of
   * `{name: [[param types], ...]}`, as the engine's CEL environment lists it (src/cel/library.ts).
   * The prelude makes a wrapper of each name, calling the host's op 'fn'; without it a program has
   * none of them.
   */
  library?: string;
}

/** The engine's side of a call: every guest capability goes through here. */
export interface HostBridge {
  /** op is 'graphql' | 'cel' (query or expression, JSON of variables or bindings), 'tool' (name, JSON of input, JSON of options), 'fn' (a CEL library function's name, JSON of its arguments), 'cancelled' (none) or 'status' (the text): only the strings the operation takes. Returns the envelope JSON {ok, value} | {ok: false, error}. */
  call(op: string, args: string[]): string;
  log(line: string): void;
}

export interface Program {
  /** Identifies the immutable program text (e.g. actionId@version); compiled once per context. */
  key: string;
  /** Shown in stacks: `<action>@<version>`. */
  fileName: string;
  source: string;
}

export type RunFailure = {
  ok: false;
  /** fail: the program called fail(); error: an uncaught exception; timeout; memory; stack; crash: the host failed under it. */
  kind: 'fail' | 'error' | 'timeout' | 'memory' | 'stack' | 'crash';
  message: string;
  hint?: string;
  stack?: string;
  /** The `code` of an uncaught error that carried one (an error a host call threw). */
  code?: string;
  /** fail(message, hint, {retry: false}): the tool says retrying cannot help. */
  retry?: false;
};

export type RunResult = { ok: true; outputJson: string } | RunFailure;

export interface SyntaxProblem {
  message: string;
  line: number | undefined;
  column: number | undefined;
}

interface PooledContext {
  ctx: QuickJSContext;
  invoke: QuickJSHandle;
  programs: Map<string, QuickJSHandle>;
  uses: number;
  bridge: HostBridge | null;
}

/**
 * One runtime per nesting level of calls: a call at level n runs in runtime n, so the promise jobs
 * an outer call queued (in its own runtime) can never run inside a nested call, under the nested
 * call's savepoint; each call drains its own runtime's queue before it returns, so a call always
 * starts with an empty queue.
 */
interface Level {
  runtime: QuickJSRuntime;
  idle: PooledContext[];
  /** Memory the calls of `#` programs left held in this runtime so far (summed: pins add up). */
  pinned: number;
}

/** Jobs run per host round-trip while a call drains its queue (the deadline is checked between). */
const JOBS_PER_BATCH = 256;
/**
 * How long past the deadline a call may go on draining its queue (each job is interrupted soon
 * after it starts, so an ordinary queue empties at once) before the queue is thrown away.
 */
const DRAIN_PAST_DEADLINE_MS = 50;
/** Programs whose "can pin" answer is remembered (cleared whole when full). */
const PINNING_CACHE_MAX = 4096;

export class Sandbox {
  private readonly levels: Array<Level | undefined> = [];
  private deadline = Number.POSITIVE_INFINITY;
  private active = 0;
  private poisoned = false;
  /** While the host builds a context (prelude, freezing), the deadline does not interrupt it. */
  private building = false;
  private readonly pinning = new Map<string, boolean>();

  constructor(
    private readonly module: QuickJSWASMModule,
    private readonly limits: SandboxLimits,
  ) {
    for (let depth = 0; depth < Math.max(1, limits.warmLevels ?? 1); depth++) {
      const level = this.level(depth);
      level.idle.push(this.createContext(level));
    }
  }

  /**
   * Check that `source` is a valid program body without running it. The body must parse as a
   * function body on its own, so it cannot close the wrapper it runs in.
   */
  checkSyntax(program: Pick<Program, 'fileName' | 'source'>): SyntaxProblem | null {
    if (this.poisoned) return { message: POISONED.message, line: undefined, column: undefined };
    // The level a nested call would use now: its queue is empty, and compiling queues nothing.
    const level = this.level(this.active);
    const pooled = this.acquire(level);
    let healthy = true;
    try {
      return compileCheck(pooled.ctx, program);
    } catch (error) {
      // The host failed under QuickJS's parser (a source nested deeper than the host stack: its
      // stack pointer is not restored), exactly as in run(): the whole sandbox is replaced.
      this.poison();
      healthy = false;
      return {
        message: `the program cannot be compiled: it nests too deeply (${error instanceof Error ? error.message : String(error)})`,
        line: undefined,
        column: undefined,
      };
    } finally {
      this.release(level, pooled, healthy);
    }
  }

  /**
   * Run one call. `deadline` (epoch ms) is honoured by the interrupt handler; a nested call may
   * only tighten it. Returns the output JSON text or a failure; never throws for guest behaviour.
   *
   * Isolation: the context is pooled (building one costs ~10 ms), so what a call could leave in it
   * is closed path by path. Globals and every intrinsic are deep-frozen; nothing the GC calls back
   * exists (no WeakRef, no FinalizationRegistry); no code is made from text (no eval, no Function
   * constructors); the call's promise jobs run before it returns, in its own level's runtime; and a
   * program that can attach private fields to frozen objects (its text has a `#`) is measured, and
   * its context thrown away when it kept memory alive (the fields are unreadable by other code,
   * but the memory would be another caller's to lose).
   */
  run(program: Program, eventJson: string, bridge: HostBridge, deadline: number): RunResult {
    if (this.poisoned) return POISONED;
    const outerDeadline = this.deadline;
    this.deadline = Math.min(outerDeadline, deadline);
    const depth = this.active++;
    let level: Level | undefined;
    let pooled: PooledContext | undefined;
    let healthy = true;
    let retainedBefore = -1;
    let freeRuntime = false;
    try {
      level = this.level(depth);
      if (level.runtime.hasPendingJob()) throw new Error(`jobs were left queued at level ${depth}`);
      pooled = this.acquire(level);
      pooled.bridge = bridge;
      if (this.canPin(program)) retainedBefore = this.memoryUsed(level, pooled);
      const fn = this.compiled(pooled, program);
      if ('ok' in fn) {
        freeRuntime = fn.kind === 'memory';
        healthy = !freeRuntime;
        return fn;
      }
      const { ctx } = pooled;
      const event = ctx.newString(eventJson);
      const result = ctx.callFunction(pooled.invoke, ctx.undefined, fn, event);
      event.dispose();
      // Promise jobs the call queued run now, inside the call (its deadline, its savepoint, its
      // bridge), before anything else can run in this runtime.
      const drained = this.drainJobs(level);
      if (drained === 'discard') {
        // A queue that keeps refilling long past the deadline (QuickJS samples its interrupt, so
        // a job can queue two more before it is stopped). QuickJS cannot free a runtime with jobs
        // still queued, so the whole sandbox is replaced, as after a crash: nothing queued here
        // can ever run again. Reaching this takes a program built to do it.
        this.poison();
        healthy = false;
        return {
          ...TIMED_OUT,
          message: `${TIMED_OUT.message}, and its promise jobs kept queueing more; the sandbox is being replaced`,
        };
      }
      if (result.error || drained !== null) {
        let failure: RunFailure;
        if (result.error) {
          failure = this.escaped(ctx.dump(result.error));
          result.error.dispose();
        } else {
          failure = drained as RunFailure;
          result.value.dispose();
        }
        healthy = false;
        // Out of memory: the garbage of this call (cycles QuickJS collects on its own schedule)
        // must not be the next caller's to run out of; freeing the runtime collects it all.
        freeRuntime = failure.kind === 'memory';
        return failure;
      }
      // A native operation the interrupt cannot stop may have run past the deadline and returned:
      // the call still timed out. (Checked before the host copies the result out: that is not the
      // program's time.)
      if (this.deadlinePassed()) {
        result.value.dispose();
        return TIMED_OUT;
      }
      const text = ctx.getString(result.value);
      result.value.dispose();
      return outcome(text);
    } catch (error) {
      // The host itself failed under the guest (its stack overflowed inside WASM, a trap): the
      // runtime may be corrupt. Poison this sandbox: no call runs in it again.
      this.poison();
      healthy = false;
      return {
        ...POISONED,
        message: `${POISONED.message} (${error instanceof Error ? error.message : String(error)})`,
      };
    } finally {
      if (pooled && level) {
        pooled.bridge = null;
        if (!this.poisoned && healthy && retainedBefore >= 0)
          level.pinned += Math.max(0, this.memoryUsed(level, pooled) - retainedBefore);
        if (!this.poisoned && (freeRuntime || level.pinned > this.limits.retainedBytesMax)) {
          // Disposing the context alone would leave its objects to a collection that allocating
          // strings never triggers: the whole level's runtime goes (freeing a runtime collects).
          // Out of memory, the runtimes of deeper levels go too (idle now, they share the WASM
          // memory, and what they hold may be why this call ran out).
          disposeContext(pooled);
          const deepest = freeRuntime ? this.levels.length - 1 : depth;
          for (let d = deepest; d >= depth; d--) this.discardLevel(d);
        } else {
          this.release(level, pooled, healthy);
        }
      }
      this.active--;
      this.deadline = this.poisoned
        ? Number.NEGATIVE_INFINITY
        : this.active === 0
          ? Number.POSITIVE_INFINITY
          : outerDeadline;
    }
  }

  /** True once the host failed under a guest: the engine replaces this sandbox. */
  get isPoisoned(): boolean {
    return this.poisoned;
  }

  private poison(): void {
    this.poisoned = true;
    // Interrupt whatever guest code is still on the stack (an outer call) as soon as it runs.
    this.deadline = Number.NEGATIVE_INFINITY;
  }

  /** Has the deadline of the running call passed? Host functions check it before doing work. */
  deadlinePassed(): boolean {
    return Date.now() > this.deadline;
  }

  get idleContexts(): number {
    return this.levels[0]?.idle.length ?? 0;
  }

  dispose(): void {
    if (this.poisoned) {
      // Disposing into a corrupt runtime can abort; let the garbage collector take the module.
      this.levels.length = 0;
      return;
    }
    for (const level of this.levels.splice(0)) if (level) disposeLevel(level);
  }

  /**
   * Run every job the call queued. A job can queue more (a promise chain), so this loops until the
   * queue is empty, checking the deadline between batches: past it, each job is interrupted as soon
   * as it runs. A queue that still refills long past the deadline is to be thrown away ('discard').
   * Returns the failure of a job that did not complete (interrupt, memory, stack), if any.
   */
  private drainJobs(level: Level): RunFailure | null | 'discard' {
    const runtime = level.runtime;
    let failure: RunFailure | null = null;
    while (runtime.hasPendingJob()) {
      const jobs = runtime.executePendingJobs(JOBS_PER_BATCH);
      if (jobs.error) {
        const error = jobs.error;
        failure ??= this.escaped(error.context.dump(error));
        error.dispose();
      }
      if (Date.now() > this.deadline + DRAIN_PAST_DEADLINE_MS && runtime.hasPendingJob()) return 'discard';
    }
    return failure;
  }

  /** Throw a level's runtime away, with its contexts (none may be in use, no job queued in it). */
  private discardLevel(depth: number): void {
    const level = this.levels[depth];
    this.levels[depth] = undefined;
    try {
      if (level) disposeLevel(level);
    } catch {
      // QuickJS refused to free it (an object still alive): replace the whole sandbox instead.
      this.poison();
    }
  }

  /**
   * Can this program attach private fields to objects it did not make (is there a `#` anywhere in
   * its text)? With no code made from text, the source is all the code there is. Remembered per
   * program key (the text is up to programBytesMax).
   */
  private canPin(program: Program): boolean {
    let pins = this.pinning.get(program.key);
    if (pins === undefined) {
      if (this.pinning.size >= PINNING_CACHE_MAX) this.pinning.clear();
      pins = program.source.includes('#');
      this.pinning.set(program.key, pins);
    }
    return pins;
  }

  /** Bytes QuickJS holds in this level's runtime now (~100 µs: it walks the heap). */
  private memoryUsed(level: Level, pooled: PooledContext): number {
    const usage = level.runtime.computeMemoryUsage();
    const used = pooled.ctx.getProp(usage, 'memory_used_size');
    const bytes = pooled.ctx.getNumber(used);
    used.dispose();
    usage.dispose();
    return bytes;
  }

  private compiled(pooled: PooledContext, program: Program): QuickJSHandle | RunFailure {
    const cached = pooled.programs.get(program.key);
    if (cached) return cached;
    const problem = compileCheck(pooled.ctx, program);
    if (problem) return { ok: false, kind: 'error', message: problem.message };
    const result = pooled.ctx.evalCode(wrap(program.source), program.fileName);
    if (result.error) {
      const failure = this.compileFailure(pooled.ctx.dump(result.error));
      result.error.dispose();
      return failure;
    }
    if (pooled.programs.size >= this.limits.programsPerContextMax) {
      const [oldestKey, oldest] = pooled.programs.entries().next().value as [string, QuickJSHandle];
      oldest.dispose();
      pooled.programs.delete(oldestKey);
    }
    pooled.programs.set(program.key, result.value);
    return result.value;
  }

  /**
   * An exception that got past the prelude's invoke(): only QuickJS's own (interrupt, out of
   * memory, stack overflow) can. A timeout counts only if the host's deadline really passed.
   */
  private escaped(error: unknown): RunFailure {
    if (this.deadlinePassed()) return TIMED_OUT;
    if (error === null || error === undefined) return { ok: false, kind: 'memory', message: 'out of memory' };
    const e = (typeof error === 'object' ? error : {}) as { name?: unknown; message?: unknown; stack?: unknown };
    const message = typeof e.message === 'string' ? e.message : String(error);
    if (message === 'out of memory') return { ok: false, kind: 'memory', message: 'out of memory' };
    if (message === 'string too long') return { ok: false, kind: 'memory', message: 'out of memory (string too long)' };
    if (message === 'stack overflow') return { ok: false, kind: 'stack', message: 'stack overflow' };
    const failure: RunFailure = {
      ok: false,
      kind: 'error',
      message: `${typeof e.name === 'string' ? e.name : 'Error'}: ${message}`,
    };
    if (typeof e.stack === 'string') failure.stack = e.stack;
    return failure;
  }

  private compileFailure(error: unknown): RunFailure {
    const e = (error ?? {}) as { name?: unknown; message?: unknown };
    return { ok: false, kind: 'error', message: `${String(e.name ?? 'Error')}: ${String(e.message ?? error)}` };
  }

  /** The runtime for calls at this nesting level, made on first use. */
  private level(depth: number): Level {
    let level = this.levels[depth];
    if (!level) {
      const runtime = this.module.newRuntime();
      runtime.setMemoryLimit(this.limits.memoryBytesMax);
      runtime.setMaxStackSize(this.limits.stackBytesMax);
      // One handler for the runtime's life; the deadline it reads is set per top-level call and
      // cleared after, so an expired deadline never fires into the next call.
      runtime.setInterruptHandler(() => !this.building && Date.now() > this.deadline);
      level = { runtime, idle: [], pinned: 0 };
      this.levels[depth] = level;
    }
    return level;
  }

  private acquire(level: Level): PooledContext {
    const pooled = level.idle.pop() ?? this.createContext(level);
    pooled.uses++;
    return pooled;
  }

  private release(level: Level, pooled: PooledContext, healthy: boolean): void {
    if (this.poisoned) return; // its runtime is gone for good; nothing is disposed into it
    if (this.levels.indexOf(level) === -1) return; // discarded with its runtime
    if (healthy && pooled.uses < this.limits.contextUsesMax && level.idle.length < this.limits.contextPoolMax) {
      level.idle.push(pooled);
    } else {
      disposeContext(pooled);
    }
  }

  private createContext(level: Level): PooledContext {
    const ctx = level.runtime.newContext();
    const pooled: PooledContext = { ctx, invoke: ctx.undefined, programs: new Map(), uses: 0, bridge: null };
    // Only the prelude calls this (it is gone from the global scope before any program runs), and
    // it passes strings only: read them as they are.
    const hostFn = ctx.newFunction('__tally_host', (opHandle, ...argHandles) => {
      const op = ctx.getString(opHandle);
      const args = argHandles.map((h) => ctx.getString(h));
      const bridge = pooled.bridge;
      if (!bridge) throw new Error('no call is running in this context');
      if (op === 'log') {
        bridge.log(args[0] ?? '');
        return ctx.undefined;
      }
      return ctx.newString(bridge.call(op, args));
    });
    ctx.setProp(ctx.global, '__tally_host', hostFn);
    hostFn.dispose();
    if (this.limits.outputBytesMax !== undefined) {
      const max = ctx.newNumber(this.limits.outputBytesMax);
      ctx.setProp(ctx.global, '__tally_output_max', max);
      max.dispose();
    }
    if (this.limits.library !== undefined) {
      const library = ctx.newString(this.limits.library);
      ctx.setProp(ctx.global, '__tally_library', library);
      library.dispose();
    }
    if (this.limits.jsonDepthMax !== undefined) {
      const max = ctx.newNumber(this.limits.jsonDepthMax);
      ctx.setProp(ctx.global, '__tally_depth_max', max);
      max.dispose();
    }
    this.building = true;
    let prelude;
    try {
      prelude = ctx.evalCode(PRELUDE, 'tally:prelude');
    } finally {
      this.building = false;
    }
    if (prelude.error) {
      const dumped = ctx.dump(prelude.error);
      prelude.error.dispose();
      ctx.dispose();
      throw new Error(`sandbox prelude failed: ${JSON.stringify(dumped)}`);
    }
    // The prelude evaluates to invoke(): kept by the host, reachable from no guest code.
    pooled.invoke = prelude.value;
    return pooled;
  }
}

function disposeLevel(level: Level): void {
  for (const pooled of level.idle.splice(0)) disposeContext(pooled);
  level.runtime.dispose();
}

const TIMED_OUT: RunFailure = { ok: false, kind: 'timeout', message: 'the call ran past its deadline' };

const POISONED: RunFailure = {
  ok: false,
  kind: 'crash',
  message: 'the sandbox failed under this call and is being replaced',
  hint: 'Something in the program exhausted the host (very deep recursion inside a built-in such as JSON.stringify); make it shallower.',
};

/** The text the prelude's invoke() returns: an output, a fail(), or an error it caught. */
function outcome(text: string): RunResult {
  // An output (the usual case) is kept as the guest's JSON text, unparsed: the engine parses it once.
  // The prelude writes '{"output":' + text + '}'; a fail or an error starts otherwise.
  if (text.startsWith(OUTPUT_PREFIX)) return { ok: true, outputJson: text.slice(OUTPUT_PREFIX.length, -1) };
  const parsed = JSON.parse(text) as {
    output?: unknown;
    fail?: { message: string; hint?: string; retry?: false };
    error?: { message: string; stack?: string; code?: string; hint?: string };
  };
  if (parsed.fail) {
    const failure: RunFailure = { ok: false, kind: 'fail', message: parsed.fail.message };
    if (parsed.fail.hint !== undefined && parsed.fail.hint !== null) failure.hint = parsed.fail.hint;
    if (parsed.fail.retry === false) failure.retry = false;
    return failure;
  }
  if (parsed.error) {
    const failure: RunFailure = { ok: false, kind: 'error', message: parsed.error.message };
    if (parsed.error.stack) failure.stack = parsed.error.stack;
    if (parsed.error.code) failure.code = parsed.error.code;
    if (parsed.error.hint) failure.hint = parsed.error.hint;
    return failure;
  }
  // Keep the guest's JSON text of the output as it is.
  return { ok: true, outputJson: text.slice(OUTPUT_PREFIX.length, -1) };
}

const OUTPUT_PREFIX = '{"output":';

function disposeContext(pooled: PooledContext): void {
  for (const handle of pooled.programs.values()) handle.dispose();
  pooled.programs.clear();
  pooled.invoke.dispose();
  pooled.ctx.dispose();
}

/**
 * The program text sits on the wrapper's first line, so its line numbers are the file's. Its
 * top-level declarations are locals of the wrapper: they are created afresh on every call.
 */
const WRAPPER_PREFIX = '(function (__tally_event_json) { "use strict"; ';

function wrap(source: string): string {
  return `${WRAPPER_PREFIX}${source}
;if (typeof run !== 'function') throw new TypeError('a tool program must define function run(event)');
return run(JSON.parse(__tally_event_json));
})`;
}

/**
 * The program must compile on its own, as a strict script: its braces then balance, so it cannot
 * close the wrapper it runs in (text like `}); (function () {` fails here). It must also compile
 * inside the wrapper. Nothing runs.
 */
function compileCheck(ctx: QuickJSContext, program: Pick<Program, 'fileName' | 'source'>): SyntaxProblem | null {
  for (const code of [`"use strict"; ${program.source}`, wrap(program.source)]) {
    const result = ctx.evalCode(code, program.fileName, { compileOnly: true });
    if (result.error) {
      const problem = syntaxProblem(ctx.dump(result.error), code === program.source ? 0 : code.indexOf(program.source));
      result.error.dispose();
      return problem;
    }
    result.value.dispose();
  }
  return null;
}

function syntaxProblem(error: unknown, firstLineOffset: number): SyntaxProblem {
  const e = (error ?? {}) as {
    name?: string;
    message?: string;
    lineNumber?: number;
    columnNumber?: number;
    stack?: string;
  };
  let line = typeof e.lineNumber === 'number' ? e.lineNumber : undefined;
  let column = typeof e.columnNumber === 'number' ? e.columnNumber : undefined;
  const m = typeof e.stack === 'string' ? /:(\d+):(\d+)/.exec(e.stack) : null;
  if (m) {
    line ??= Number(m[1]);
    column ??= Number(m[2]);
  }
  if (line === 1 && column !== undefined) column = Math.max(1, column - firstLineOffset);
  return { message: `${e.name ?? 'SyntaxError'}: ${e.message ?? String(error)}`, line, column };
}
