import type { HostBridge, RunFailure } from '../../sandbox/sandbox.js';
import {
  type ActionVersion,
  getVersion,
  NATIVE_TOOLS,
  runsOutsideTransactions,
  type ToolReference,
  versionKey,
} from '../actions/actions.js';
import { celToJson, jsonToCel } from '../cel/values.js';
import { callTimeout } from '../budgets.js';
import { EngineError, type ErrorData, isErrorCode, quote } from '../errors.js';
import { fingerprint } from '../ids.js';
import { checkJsonDepth } from '../json.js';
import {
  type CallFrame,
  type CallNode,
  type ExecutionKind,
  outputText,
  rememberInputText,
  rememberOutputText,
  type RootState,
} from './call-tree.js';
import { authorityOf, type CallTarget, checkMayCall, checkRunnable, layerOf, referencedVersion } from './call-rules.js';
import type { ExecutionRow } from '../storage/statements/actions.js';
import { cacheable, ResultCache } from './result-cache.js';
import type { ExecutionServices } from './services.js';

/** Names longer than this are cut in messages and records; at most NAMES_LISTED_MAX names are listed. */
const NAME_SHOWN_MAX = 64;
const NAMES_LISTED_MAX = 20;

export interface InvokeRequest {
  id?: string | null;
  name?: string | null;
  executionId: string;
  actionVersion?: number | null;
  input?: unknown;
  /** The version, when the caller already loaded it (the resolver does, to check the policy). */
  version?: ActionVersion;
}

/** Thrown inside a savepoint to roll a successful @dryRun operation back while keeping its result. */
class DryRunRollback extends Error {
  constructor(readonly output: unknown) {
    super('dry run');
  }
}

/** An execution id names one call: one already used in this call tree cannot name another. */
export function checkNewInTree(parent: CallFrame | null, executionId: string): void {
  if (parent?.root.ids.has(executionId)) {
    throw new EngineError('EXECUTION_ID_CONFLICT', `execution ${executionId} was already used in this call tree`, {
      hint: 'Use a new executionId for each call.',
    });
  }
}

/**
 * The id is taken by a recorded execution that does not match the call. A record without a
 * fingerprint is a nested call, or a call undone with the call that made it: its id is spent.
 */
export function executionIdConflict(
  executionId: string,
  recordedFingerprint: string | null,
  other: 'started' | 'invoked' | null = null,
): EngineError {
  const message =
    other !== null
      ? `execution ${executionId} was ${other} with this action and input; an id names one call, invoked or started`
      : recordedFingerprint === null
        ? `execution ${executionId} is recorded without an input fingerprint (a nested call, a trigger's, or a call undone with the call that made it); it cannot run again under this id`
        : `execution ${executionId} already exists with a different action or input`;
  return new EngineError('EXECUTION_ID_CONFLICT', message, {
    hint: 'Use a new executionId for each call (a retried attempt too).',
    details: { executionId },
  });
}

/** The input as JSON text, when it is within inputBytesMax (invoked or started alike). `text`: that text, when the caller has it. */
export function checkInputBytes(
  svc: ExecutionServices,
  actionName: string,
  input: unknown,
  text: string = JSON.stringify(input),
): string {
  const bytes = Buffer.byteLength(text ?? '');
  if (bytes > svc.limits.inputBytesMax) {
    throw new EngineError(
      'LIMIT_EXCEEDED',
      `the input of ${actionName} is ${bytes} bytes; inputBytesMax is ${svc.limits.inputBytesMax}`,
      {
        hint: 'Pass ids and amounts, and let the tool read the rest from the ledger.',
      },
    );
  }
  return text;
}

/** A started execution (a queue row, with its attempts budget) rather than an invoked one. */
export function isStarted(row: ExecutionRow): boolean {
  return (row as { max_attempts?: number | null }).max_attempts != null;
}

/**
 * A model or agent calls a model over the network, which takes seconds: it never runs inside a
 * database transaction, so it cannot be invoked (or called by a program), only started.
 */
export function checkInvocable(version: ActionVersion): void {
  if (!runsOutsideTransactions(version.kind)) return;
  throw new EngineError(
    'BAD_REQUEST',
    `${version.name} is ${version.kind === 'agent' ? 'an agent' : 'a model'}: it calls a model over the network, which never runs inside a request's transaction, so it cannot be invoked or called by a program`,
    {
      hint: `Start it with startAction (it runs in the worker, each step in a short transaction of its own) and wait for it with actions.execution(id:, waitMs:)${version.kind === 'agent' ? '' : ', or have an agent call it'}.`,
    },
  );
}

interface Call {
  target: CallTarget;
  input: unknown;
  executionId: string;
  parent: CallFrame | null;
  root: RootState;
  inputFingerprint: string | null;
  /** The attempt of a started execution (1 for an invoke). */
  attempt?: number;
  /** Checked once the call is counted, before it runs: a nested tools.x() call must be allowed like invoking x. */
  authorize?: () => void;
  /** A top-level call that belongs under a recorded execution (a tool call of an agent run, under its model turn). */
  attach?: { parentId: string; rootId: string; depth: number };
  /** The input is a model's answer (or made from one by a hook's caller): see CallFrame.modelInput. */
  modelInput?: boolean;
  /** `JSON.stringify(input)`, when the caller made it; for a native graphql call also the text without its query. */
  inputText?: string;
  inputRest?: string;
}

/** Run one call of any kind under its own savepoint and return its node, FAILED or SUCCEEDED. */
export function runCall(svc: ExecutionServices, call: Call): CallNode {
  const { target, parent, root } = call;
  const now = svc.clock.now().toISOString();
  const isTool = target.type === 'version' && target.version.kind === 'tool';
  const depth = parent ? parent.node.depth + (isTool ? 1 : 0) : (call.attach?.depth ?? 0);
  const node: CallNode = {
    executionId: call.executionId,
    actionId: target.type === 'version' ? target.version.actionId : null,
    actionName: target.type === 'version' ? target.version.name : target.name,
    actionVersion: target.type === 'version' ? target.version.version : null,
    kind: kindOf(target),
    status: 'RUNNING',
    input: call.input,
    inputFingerprint: call.inputFingerprint,
    output: null,
    error: null,
    principal: root.principal,
    parentId: parent?.node.executionId ?? call.attach?.parentId ?? null,
    rootId: parent?.node.rootId ?? call.attach?.rootId ?? call.executionId,
    depth,
    attempt: call.attempt ?? parent?.node.attempt ?? 1,
    started: now,
    finished: null,
    logs: [],
    logBytes: 0,
    created: now,
    children: [],
  };
  parent?.node.children.push(node);
  root.ids.add(node.executionId);
  const frame: CallFrame = {
    parent,
    // A tool or graphql-kind action narrows authority with its own policies; native calls add nothing.
    layer: target.type === 'version' ? layerOf(target.version) : null,
    // Its input is the model's answer (an agent's tool call, or a hook handed that call's input):
    // run as GraphQL (the native graphql tool, a graphql-kind action), it is the model's text.
    modelInput: call.modelInput === true,
    modelWritten:
      call.modelInput === true &&
      (target.type === 'native' ? target.name === 'graphql' : target.version.kind === 'graphql'),
    node,
    root,
    version: target.type === 'version' ? target.version : null,
    event: {
      data: call.input,
      execution: {
        executionId: call.executionId,
        actionId: node.actionId,
        actionVersion: node.actionVersion,
        attempt: node.attempt,
      },
      caller: { principal: root.principal },
    },
  };
  try {
    checkBounds(svc, node, parent, root);
    call.authorize?.();
    if (target.type === 'version') {
      // Whoever began the call and however its version was found (pinned, resolved at an agent's
      // first turn, approved hours ago): only a version ACTIVE as stored now runs.
      checkRunnable(getVersion(svc.actions, { id: target.version.actionId, version: target.version.version }));
      checkInvocable(target.version);
    }
    let inputText = checkInputBytes(svc, node.actionName, call.input, call.inputText);
    rememberInputText(node, call.input, inputText, call.inputRest);
    if (target.type === 'version') {
      // The program receives (and the execution records) the input with its schema's defaults.
      const input = inputWithDefaults(svc, target.version, call.input);
      if (input !== call.input) {
        node.input = input;
        (frame.event as { data: unknown }).data = input;
        inputText = checkInputBytes(svc, node.actionName, input);
        rememberInputText(node, input, inputText);
      }
    }
    // A read-only tool with cacheTtlMs answers from an earlier call while nothing has written since.
    const ttl =
      target.type === 'version'
        ? ((target.version.execution as { cacheTtlMs?: number | null }).cacheTtlMs ?? null)
        : null;
    const cacheKey =
      ttl !== null && target.type === 'version'
        ? ResultCache.key(target.version, node.input, root.principal, authorityStack(frame), root.input)
        : null;
    const hit = cacheKey !== null ? svc.results.get(cacheKey) : null;
    if (hit) {
      node.status = 'CACHED';
      node.output = hit.output;
      node.cachedFrom = hit.executionId;
      return node;
    }
    let output: unknown;
    try {
      output = underSavepoint(svc, target, () => {
        const hooks = target.type === 'version' ? hooksOf(target.version) : null;
        if (hooks?.before && target.type === 'version') {
          // The before hook sees the input and may change it (its output, unless null) or refuse the call.
          const changed = runHook(svc, frame, hooks.before, 'before', node.input);
          if (changed !== null) {
            const input = inputWithDefaults(svc, target.version, changed);
            node.input = input;
            (frame.event as { data: unknown }).data = input;
            inputText = checkInputBytes(svc, node.actionName, input);
            rememberInputText(node, input, inputText);
          }
        }
        let result = execute(svc, target, frame, inputText);
        if (target.type === 'version') validate(svc, target.version, 'output', result);
        if (result instanceof DryRunRollback) throw result;
        if (hooks?.after && target.type === 'version') {
          // The after hook sees {input, output} and may change the output (its output, unless null).
          const changed = runHook(svc, frame, hooks.after, 'after', { input: node.input, output: result });
          if (changed !== null) {
            validate(svc, target.version, 'output', changed);
            result = changed;
          }
        }
        return result;
      });
    } catch (error) {
      if (!(error instanceof DryRunRollback)) throw error;
      output = error.output;
      node.undone = true;
    }
    node.status = 'SUCCEEDED';
    node.output = output;
    if (cacheKey !== null && !node.undone && target.type === 'version' && cacheable(svc.actions, target.version))
      svc.results.set(cacheKey, node.executionId, output, ttl!);
  } catch (error) {
    const failure = toEngineError(error);
    if (failure.code === 'INTERNAL') svc.logError(error);
    node.status = 'FAILED';
    node.error = failure.toData();
    if (failure.code === 'TIMEOUT' || failure.code === 'BUSY') root.fatal ??= failure;
  } finally {
    node.finished = svc.clock.now().toISOString();
  }
  return node;
}

/**
 * A call's work under its own savepoint, so that a failure undoes its writes. The native cel tool
 * performs no operation and writes nothing: it has nothing to undo, and goes without (on
 * PostgreSQL a savepoint and its release are two round trips, most of what a cel() call costs).
 */
function underSavepoint<T>(svc: ExecutionServices, target: CallTarget, fn: () => T): T {
  return target.type === 'native' && target.name === 'cel' ? fn() : svc.transactions.savepoint(fn);
}

/** The tools whose policies bound a call: those that started its execution, then those calling it. */
function authorityStack(frame: CallFrame): string[] {
  const stack = frame.root.outerRefs.map((ref) => versionKey(ref.actionId, ref.version));
  const calling: string[] = [];
  for (let f = frame.parent; f; f = f.parent)
    if (f.version) calling.unshift(versionKey(f.version.actionId, f.version.version));
  return [...stack, ...calling];
}

/** An action's before/after hooks: tool references (absent in versions made before hooks). */
function hooksOf(version: ActionVersion): { before?: ToolReference | null; after?: ToolReference | null } | null {
  return (version as { hooks?: { before?: ToolReference | null; after?: ToolReference | null } | null }).hooks ?? null;
}

/**
 * A hook: a child call of the call it hooks (in its tree, under its savepoint and the same
 * authority chain, counted and bounded like any call), authorized like a tools.x() call of it.
 * Returns its output (null: no change); a hook that fails fails the call with its reason.
 */
function runHook(
  svc: ExecutionServices,
  frame: CallFrame,
  reference: ToolReference,
  phase: 'before' | 'after',
  input: unknown,
): unknown {
  const { root } = frame;
  const version = referencedVersion(
    svc.actions,
    reference,
    root.resolved,
    `${reference.name}, the ${phase} hook of ${frame.node.actionName},`,
  );
  const target: CallTarget = { type: 'version', version };
  const node = runCall(svc, {
    // A hook sees the hooked call's input: a model's answer stays the model's in it.
    target,
    input,
    executionId: svc.newId(),
    parent: frame,
    root,
    inputFingerprint: null,
    modelInput: frame.modelInput === true,
    authorize: () => checkMayCall(authorityOf(svc.cel, root.caller, frame), reference.name, version.version, input),
  });
  if (root.fatal) throw root.fatal;
  if (!succeeded(node)) {
    const error = node.error!;
    throw new EngineError(
      error.code === 'TOOL_FAILED' || error.code === 'INPUT_INVALID' ? 'TOOL_FAILED' : error.code,
      `the ${phase} hook ${reference.name} refused the call: ${error.message}`,
      {
        hint: error.hint ?? `See the ${phase} hook's execution in the call tree.`,
        details: {
          hook: reference.name,
          phase,
          ...(error.code === 'TOOL_FAILED' ? { retry: (error.details as { retry?: unknown } | undefined)?.retry } : {}),
        },
      },
    );
  }
  return node.output ?? null;
}

function kindOf(target: CallTarget): ExecutionKind {
  if (target.type === 'native') return target.name === 'graphql' ? 'GRAPHQL' : 'CEL';
  const kind = target.version.kind;
  return kind === 'graphql' ? 'GRAPHQL' : kind === 'model' ? 'MODEL' : kind === 'agent' ? 'AGENT' : 'TOOL';
}

function checkBounds(svc: ExecutionServices, node: CallNode, parent: CallFrame | null, root: RootState): void {
  if (parent) {
    root.calls++;
    if (root.calls > svc.limits.callsPerExecutionMax) {
      throw new EngineError(
        'LIMIT_EXCEEDED',
        `call ${root.calls} beneath one execution is over callsPerExecutionMax (${svc.limits.callsPerExecutionMax})`,
        {
          hint: 'Do the work in fewer calls (batch it in one graphql operation), or start it as separate executions.',
        },
      );
    }
  }
  if (node.depth > svc.limits.toolDepthMax) {
    throw new EngineError(
      'LIMIT_EXCEEDED',
      `${node.actionName} would run at tool depth ${node.depth}; toolDepthMax is ${svc.limits.toolDepthMax}`,
      {
        hint: 'Flatten the chain of tools calling tools.',
      },
    );
  }
  if (Date.now() > root.deadline) {
    throw new EngineError('TIMEOUT', `the execution's deadline passed before ${node.actionName} could run`);
  }
}

/** Whether an input schema (a frozen, cached document object) has a `default` anywhere: most have none, and skip the copy. */
const schemasWithDefaults = new WeakMap<object, boolean>();

/**
 * A call's input checked against its version's input schema, with the schema's `default`s filled
 * in (the caller's value itself is left as it was); INPUT_INVALID with JSON pointers.
 */
export function inputWithDefaults(svc: ExecutionServices, version: ActionVersion, value: unknown): unknown {
  const schema = version.tool.inputSchema;
  let defaults = schemasWithDefaults.get(schema);
  if (defaults === undefined)
    schemasWithDefaults.set(schema, (defaults = JSON.stringify(schema).includes('"default"')));
  if (!defaults) {
    validate(svc, version, 'input', value);
    return value;
  }
  const { value: filled, problems } = svc.actions.schemas.withDefaults(schema, value, 'tool.inputSchema');
  if (problems.length > 0) {
    throw new EngineError(
      'INPUT_INVALID',
      `input of ${version.name}@${version.version} does not match its schema: ${problems.map((p) => `${p.pointer} ${p.message}`).join('; ')}`,
      { details: { problems } },
    );
  }
  return filled;
}

/** Check a value against a version's input or output schema; INPUT_INVALID / OUTPUT_INVALID with JSON pointers. */
export function validate(
  svc: ExecutionServices,
  version: ActionVersion,
  which: 'input' | 'output',
  value: unknown,
  hint?: string,
): void {
  const schema = which === 'input' ? version.tool.inputSchema : version.tool.outputSchema;
  if (schema === null) return;
  const validator = svc.actions.schemas.compile(schema, `tool.${which}Schema`);
  const problems = svc.actions.schemas.problems(validator, value);
  if (problems.length === 0) return;
  const summary = problems.map((p) => `${p.pointer} ${p.message}`).join('; ');
  throw new EngineError(
    which === 'input' ? 'INPUT_INVALID' : 'OUTPUT_INVALID',
    `${which} of ${version.name}@${version.version} does not match its schema: ${summary}`,
    { details: { problems }, ...(hint === undefined ? {} : { hint }) },
  );
}

function execute(svc: ExecutionServices, target: CallTarget, frame: CallFrame, inputText: string): unknown {
  if (target.type === 'native')
    return target.name === 'cel' ? executeCel(svc, frame.node.input) : executeGraphql(svc, frame, frame.node.input);
  if (target.version.kind === 'graphql') return executeGraphql(svc, frame, frame.node.input);
  return executeProgram(svc, target.version, frame, inputText);
}

function executeProgram(svc: ExecutionServices, version: ActionVersion, frame: CallFrame, inputText: string): unknown {
  const { node, root } = frame;
  const deadline = Math.min(
    root.deadline,
    version.execution.timeoutMs ? Date.now() + version.execution.timeoutMs : Number.POSITIVE_INFINITY,
  );
  const eventJson = `{"data":${inputText},"execution":${JSON.stringify((frame.event as { execution: unknown }).execution)},"caller":${JSON.stringify({ principal: root.principal })}}`;
  const bridge = new CallBridge(svc, frame);
  const sandbox = svc.sandbox();
  const result = sandbox.run(
    {
      key: programKey(svc, version),
      fileName: `${version.name}@${version.version}`,
      source: String(version.config.src),
    },
    eventJson,
    bridge,
    deadline,
  );
  if (!result.ok && result.kind === 'crash') root.fatal ??= failureToError(svc, node.actionName, result, root);
  if (root.fatal) throw root.fatal;
  if (!result.ok) throw failureToError(svc, node.actionName, result, root);
  const bytes = Buffer.byteLength(result.outputJson);
  if (bytes > svc.limits.outputBytesMax) {
    throw new EngineError(
      'LIMIT_EXCEEDED',
      `the output of ${node.actionName} is ${bytes} bytes; outputBytesMax is ${svc.limits.outputBytesMax}`,
      {
        hint: 'Return less: ids and totals, not whole documents.',
      },
    );
  }
  const output: unknown = JSON.parse(result.outputJson);
  checkJsonDepth(output, svc.limits.jsonDepthMax, `the output of ${node.actionName}`);
  // The guest's text is JSON.stringify of this value: the record keeps it rather than make it again.
  rememberOutputText(node, output, result.outputJson);
  return output;
}

/**
 * Compiled programs are cached per sandbox context by this key: the version plus a digest of the
 * source, so a version re-created with other text (after a rolled-back request) never hits a stale
 * compilation. The digest is computed once per document object.
 */
function programKey(svc: ExecutionServices, version: ActionVersion): string {
  const config = version.config;
  let key = svc.programKeys.get(config);
  if (!key) {
    key = `${versionKey(version.actionId, version.version)}:${fingerprint(String(config.src))}`;
    svc.programKeys.set(config, key);
  }
  return key;
}

function failureToError(svc: ExecutionServices, name: string, failure: RunFailure, root: RootState): EngineError {
  switch (failure.kind) {
    case 'fail':
      return new EngineError('TOOL_FAILED', failure.message, {
        ...(failure.hint === undefined ? {} : { hint: failure.hint }),
        ...(failure.retry === false ? { details: { retry: false } } : {}),
      });
    case 'timeout':
      return callTimeout(name, root.budget, root.requestBound === true);
    case 'memory':
      return new EngineError(
        'LIMIT_EXCEEDED',
        `${name} ran out of memory (sandboxMemoryBytesMax is ${svc.limits.sandboxMemoryBytesMax} bytes)`,
        {
          hint: 'Hold less in memory at once.',
        },
      );
    case 'stack':
      return new EngineError(
        'LIMIT_EXCEEDED',
        `${name} overflowed its stack (sandboxStackBytesMax is ${svc.limits.sandboxStackBytesMax} bytes)`,
        {
          hint: 'Look for unbounded recursion.',
        },
      );
    case 'crash':
      return new EngineError('LIMIT_EXCEEDED', `${name}: ${failure.message}`, { hint: failure.hint });
    case 'error': {
      // An error a nested call threw (a ToolError) keeps that call's code; anything else is SCRIPT_ERROR.
      const code = failure.code !== undefined && isErrorCode(failure.code) ? failure.code : 'SCRIPT_ERROR';
      return new EngineError(code, failure.message, {
        hint: failure.hint ?? 'Read the stack in details.',
        details: failure.stack === undefined ? undefined : { stack: failure.stack },
      });
    }
  }
}

function executeCel(svc: ExecutionServices, input: unknown): unknown {
  const { expression, bindings } = (input ?? {}) as { expression?: unknown; bindings?: unknown };
  if (typeof expression !== 'string') {
    throw new EngineError('INPUT_INVALID', `cel needs {expression: string, bindings?: object}, got ${quote(input)}`);
  }
  if (bindings != null && (typeof bindings !== 'object' || Array.isArray(bindings))) {
    throw new EngineError('INPUT_INVALID', `cel bindings must be an object, got ${quote(bindings)}`);
  }
  return celToJson(svc.cel.evaluate(expression, jsonToCel(bindings ?? {}) as Record<string, unknown>));
}

function executeGraphql(svc: ExecutionServices, frame: CallFrame, input: unknown): unknown {
  const { query, variables, operationName } = (input ?? {}) as {
    query?: unknown;
    variables?: unknown;
    operationName?: unknown;
  };
  if (typeof query !== 'string')
    throw new EngineError('INPUT_INVALID', `graphql needs {query: string, variables?: object}, got ${quote(input)}`);
  if (variables != null && (typeof variables !== 'object' || Array.isArray(variables))) {
    throw new EngineError('INPUT_INVALID', `graphql variables must be an object, got ${quote(variables)}`);
  }
  const result = svc.runGraphql(
    {
      query,
      variables: (variables as Record<string, unknown>) ?? null,
      operationName: typeof operationName === 'string' ? operationName : null,
    },
    frame,
  );
  const first = result.errors[0];
  if (first) {
    throw new EngineError(first.code, first.message, {
      hint: first.hint,
      details: result.errors.length > 1 ? { errors: result.errors } : first.details,
    });
  }
  return result.dryRun ? new DryRunRollback(result.data) : result.data;
}

/** A call that answered: it ran and succeeded, or a cached answer stood for it. */
export function succeeded(node: Pick<CallNode, 'status'>): boolean {
  return node.status === 'SUCCEEDED' || node.status === 'CACHED';
}

export function toEngineError(error: unknown): EngineError {
  if (error instanceof EngineError) return error;
  return new EngineError('INTERNAL', error instanceof Error ? error.message : String(error), { cause: error });
}

/**
 * The host side of a running program: graphql(), cel() and tools.<name>() each run as a child call
 * under its own savepoint, and come back as an envelope the guest turns into a value or a throw.
 */
class CallBridge implements HostBridge {
  constructor(
    private readonly svc: ExecutionServices,
    private readonly frame: CallFrame,
  ) {}

  call(op: string, args: string[]): string {
    const root = this.frame.root;
    if (root.calls > this.svc.limits.callsPerExecutionMax && op !== 'cancelled') {
      // Past the budget, further calls are refused without a record each (a loop catching the
      // refusal must not write a row per turn; the first refused call is recorded), and without
      // work: one answer, made once, before the arguments are even read.
      root.calls++;
      return (root.overBudget ??= JSON.stringify({
        ok: false,
        error: new EngineError(
          'LIMIT_EXCEEDED',
          `call ${root.calls} and every later call beneath one execution are over callsPerExecutionMax (${this.svc.limits.callsPerExecutionMax})`,
          {
            hint: 'Do the work in fewer calls (batch it in one graphql operation), or start it as separate executions.',
            details: { limit: 'callsPerExecutionMax', callsPerExecutionMax: this.svc.limits.callsPerExecutionMax },
          },
        ).toData(),
      }));
    }
    try {
      if (op === 'graphql') {
        const [query, variablesText] = args;
        const variables = parseArg(variablesText, 'variables', this.svc.limits.jsonDepthMax);
        if (typeof query !== 'string')
          return envelope(this.child({ type: 'native', name: 'graphql' }, { query, variables }));
        // The guest's variables text is JSON.stringify of what it parsed to: the input's text is built from it.
        const rest = variablesText === undefined || variablesText === '' ? '{}' : `{"variables":${variablesText}}`;
        const text =
          rest === '{}' ? `{"query":${JSON.stringify(query)}}` : `{"query":${JSON.stringify(query)},${rest.slice(1)}`;
        return envelope(this.child({ type: 'native', name: 'graphql' }, { query, variables }, undefined, text, rest));
      }
      if (op === 'cel') {
        return envelope(
          this.child(
            { type: 'native', name: 'cel' },
            { expression: args[0], bindings: parseArg(args[1], 'bindings', this.svc.limits.jsonDepthMax) },
          ),
        );
      }
      if (op === 'tool')
        return this.tool(
          args[0] ?? '',
          parseArg(args[1], 'input', this.svc.limits.jsonDepthMax),
          parseArg(args[2], 'options', this.svc.limits.jsonDepthMax),
        );
      if (op === 'cancelled')
        return JSON.stringify({ ok: true, value: this.svc.st.cancelRequested.get(this.frame.node.rootId) === 1 });
      throw new EngineError('BAD_REQUEST', `unknown host operation ${quote(op)}`);
    } catch (error) {
      return JSON.stringify({ ok: false, error: toEngineError(error).toData() });
    }
  }

  log(line: string): void {
    const node = this.frame.node;
    if (node.logBytes >= this.svc.limits.logBytesMax) return;
    const room = this.svc.limits.logBytesMax - node.logBytes;
    const bytes = Buffer.from(line);
    node.logs.push(
      bytes.length <= room
        ? line
        : `${bytes.subarray(0, room).toString()}… [logs cut at logBytesMax ${this.svc.limits.logBytesMax}]`,
    );
    node.logBytes += Math.min(bytes.length, room);
  }

  private child(
    target: CallTarget,
    input: unknown,
    authorize?: () => void,
    inputText?: string,
    inputRest?: string,
  ): CallNode {
    return runCall(this.svc, {
      target,
      input,
      executionId: this.svc.newId(),
      parent: this.frame,
      root: this.frame.root,
      inputFingerprint: null,
      ...(authorize ? { authorize } : {}),
      ...(inputText === undefined ? {} : { inputText, inputRest }),
    });
  }

  /**
   * Calling tools.x() is invoking x: INSERT on actions.Execution with the document an invoke is
   * checked with, against the client and every tool on the stack, this calling one included.
   */
  private authorizeCall(name: string, target: CallTarget, input: unknown): void {
    checkMayCall(
      authorityOf(this.svc.cel, this.frame.root.caller, this.frame),
      name,
      target.type === 'version' ? target.version.version : null,
      input,
    );
  }

  private tool(name: string, input: unknown, options: unknown): string {
    const version = this.frame.version;
    const references = version?.tools ?? [];
    const check = !(
      options !== null &&
      typeof options === 'object' &&
      (options as { check?: unknown }).check === false
    );
    const reference = references.find((r) => r.name === name) ?? this.byAlias(references, name);
    if (!reference) {
      // A name it does not declare is still a call: recorded as FAILED in the tree and counted
      // toward callsPerExecutionMax (a loop over made-up names stops like any other).
      const declared = references.map((r) => r.name);
      const list =
        declared.length === 0
          ? 'it declares none'
          : `declared: ${declared.slice(0, NAMES_LISTED_MAX).join(', ')}${declared.length > NAMES_LISTED_MAX ? `, … (${declared.length} in all)` : ''}`;
      const shown =
        name.length > NAME_SHOWN_MAX ? `${name.slice(0, NAME_SHOWN_MAX)}… (${name.length} characters)` : name;
      const refusal = new EngineError(
        'NOT_FOUND',
        `tools.${shown} is not declared by ${version?.name ?? 'this call'}; ${list}`,
        {
          hint: 'Add it to the action’s tools list (with a version to pin it) and deploy a new version.',
        },
      );
      try {
        this.count();
      } catch (error) {
        // Past the budget: refused without a record (a loop catching it must not write a row a turn).
        if (check) throw error;
        return JSON.stringify({ ok: true, value: { ok: false, output: null, error: toEngineError(error).toData() } });
      }
      const node = this.failedChild(name.slice(0, NAME_SHOWN_MAX), input, refusal);
      return check
        ? envelope(node)
        : JSON.stringify({ ok: true, value: { ok: false, output: null, error: node.error } });
    }
    let node: CallNode;
    try {
      const target = this.resolveReference(reference);
      const fixed = this.fixedInput(reference, input);
      node = this.child(target, fixed, () => this.authorizeCall(reference.name, target, fixed));
    } catch (error) {
      // The call could not start (a locked pinned version, a fixed input that failed): it is
      // still a call of this tool, recorded as FAILED, and check: false still catches it.
      node = this.failedChild(reference.name, input, toEngineError(error));
    }
    if (!check) {
      return JSON.stringify({
        ok: true,
        value: { ok: succeeded(node), output: node.output ?? null, error: node.error },
      });
    }
    return envelope(node);
  }

  /** A declared tool that answers to `name` as one of its aliases (tool.aliases of the version it resolves to). */
  private byAlias(references: readonly ToolReference[], name: string): ToolReference | undefined {
    for (const reference of references) {
      if ((NATIVE_TOOLS as readonly string[]).includes(reference.name)) continue;
      try {
        const target = this.resolveReference(reference);
        if (target.type === 'version' && ((target.version.tool as { aliases?: string[] }).aliases ?? []).includes(name))
          return reference;
      } catch {
        // A reference that cannot resolve answers to no alias.
      }
    }
    return undefined;
  }

  /** Count a call that never reaches runCall (an undeclared name) against callsPerExecutionMax. */
  private count(): void {
    const root = this.frame.root;
    root.calls++;
    if (root.calls > this.svc.limits.callsPerExecutionMax) {
      throw new EngineError(
        'LIMIT_EXCEEDED',
        `call ${root.calls} beneath one execution is over callsPerExecutionMax (${this.svc.limits.callsPerExecutionMax})`,
        {
          hint: 'Do the work in fewer calls (batch it in one graphql operation), or start it as separate executions.',
        },
      );
    }
  }

  private failedChild(name: string, input: unknown, error: EngineError): CallNode {
    const now = this.svc.clock.now().toISOString();
    const parent = this.frame.node;
    const node: CallNode = {
      executionId: this.svc.newId(),
      actionId: null,
      actionName: name,
      actionVersion: null,
      kind: 'TOOL',
      status: 'FAILED',
      input,
      inputFingerprint: null,
      output: null,
      error: error.toData(),
      principal: parent.principal,
      parentId: parent.executionId,
      rootId: parent.rootId,
      depth: parent.depth + 1,
      attempt: 1,
      started: now,
      finished: now,
      logs: [],
      logBytes: 0,
      created: now,
      children: [],
    };
    parent.children.push(node);
    return node;
  }

  /** A pinned version always; otherwise the latest ACTIVE one, resolved once per execution (runCall checks it may run). */
  private resolveReference(reference: ToolReference): CallTarget {
    if ((NATIVE_TOOLS as readonly string[]).includes(reference.name))
      return { type: 'native', name: reference.name as 'graphql' | 'cel' };
    return { type: 'version', version: referencedVersion(this.svc.actions, reference, this.frame.root.resolved) };
  }

  private fixedInput(reference: ToolReference, input: unknown): unknown {
    return fixedInput(this.svc, reference, input, {
      event: this.frame.event,
      toolInput: this.frame.node.input,
      executionInput: this.frame.root.input,
    });
  }
}

/** Fixed input: each reference.input property is CEL over event, tool.input, execution.input, and replaces the caller's value. */
export function fixedInput(
  svc: ExecutionServices,
  reference: ToolReference,
  input: unknown,
  scope: {
    event: unknown;
    toolInput: unknown;
    executionInput: unknown;
    session?: { id: string; input: unknown } | null;
  },
): unknown {
  if (!reference.input) return input;
  const base =
    input !== null && typeof input === 'object' && !Array.isArray(input)
      ? { ...(input as Record<string, unknown>) }
      : {};
  // An agent's references also see session (null outside a session).
  const bindings = jsonToCel({
    event: scope.event,
    tool: { input: scope.toolInput },
    execution: { input: scope.executionInput },
    session: scope.session ?? null,
  }) as Record<string, unknown>;
  for (const [prop, expression] of Object.entries(reference.input)) {
    base[prop] = celToJson(svc.cel.evaluate(expression, bindings));
  }
  return base;
}

/** A value a program passed to a host call, as bounded as a client's: at most jsonDepthMax deep. */
function parseArg(text: string | undefined, what: string, depthMax: number): unknown {
  if (text === undefined || text === '') return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new EngineError('BAD_REQUEST', `${what} is not JSON-serialisable`);
  }
  checkJsonDepth(value, depthMax, `the ${what} a program passed`);
  return value;
}

/** The answer to the guest; the output's text is the one the record keeps. */
function envelope(node: CallNode): string {
  if (succeeded(node))
    return `{"ok":true,"value":${node.output === undefined || node.output === null ? 'null' : outputText(node)!}}`;
  return JSON.stringify({ ok: false, error: node.error as ErrorData });
}
