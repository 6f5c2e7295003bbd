import type { Call } from './invoke.js';
import type { RunFailure } from '../../sandbox/sandbox.js';
import { type ActionVersion, versionKey } from '../actions/actions.js';
import { celToJson, jsonToCel } from '../cel/values.js';
import { callTimeout } from '../budgets.js';
import { EngineError, isErrorCode, quote, limitExceeded } from '../errors.js';
import { fingerprint } from '../ids.js';
import { checkJsonDepth } from '../json.js';
import { type CallFrame, type CallNode, rememberOutputText, type RootState } from './call-tree.js';
import type { CallTarget } from './call-rules.js';
import type { ExecutionServices } from './services.js';
import { CallBridge } from './host-bridge.js';

/*
 * What a call runs once it is admitted: a tool's program in the sandbox (its host bridge handed the
 * call's frame), a native cel() or graphql() call.
 */

/** What runs a program's child calls: runCall, handed in by it (so this module never imports invoke). */
export type RunChild = (svc: ExecutionServices, call: Call) => CallNode;

export function execute(
  svc: ExecutionServices,
  target: CallTarget,
  frame: CallFrame,
  inputText: string,
  runChild: RunChild,
): unknown {
  if (target.type === 'native')
    return target.name === 'cel' ? executeCel(svc, frame.node.input) : executeGraphql(svc, frame, frame.node.input);
  if (target.version.kind === 'graphql') return executeGraphql(svc, frame, frame.node.input);
  return executeProgram(svc, target.version, frame, inputText, runChild);
}

function executeProgram(
  svc: ExecutionServices,
  version: ActionVersion,
  frame: CallFrame,
  inputText: string,
  runChild: RunChild,
): unknown {
  const { node, root } = frame;
  const deadline = Math.min(
    root.deadline,
    version.execution.timeoutMs ? Date.now() + version.execution.timeoutMs : Number.POSITIVE_INFINITY,
  );
  const eventJson = `{"data":${inputText},"execution":${JSON.stringify((frame.event as { execution: unknown }).execution)},"caller":${JSON.stringify({ principal: root.principal })}}`;
  const bridge = new CallBridge(svc, frame, runChild);
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
    throw limitExceeded(
      'outputBytesMax',
      svc.limits.outputBytesMax,
      bytes,
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
      return limitExceeded(
        'sandboxMemoryBytesMax',
        svc.limits.sandboxMemoryBytesMax,
        null,
        `${name} ran out of memory (sandboxMemoryBytesMax is ${svc.limits.sandboxMemoryBytesMax} bytes)`,
        {
          hint: 'Hold less in memory at once.',
        },
      );
    case 'stack':
      return limitExceeded(
        'sandboxStackBytesMax',
        svc.limits.sandboxStackBytesMax,
        null,
        `${name} overflowed its stack (sandboxStackBytesMax is ${svc.limits.sandboxStackBytesMax} bytes)`,
        {
          hint: 'Look for unbounded recursion.',
        },
      );
    case 'crash':
      // The host failed under the call (very deep recursion inside a built-in): its stack, in effect.
      return limitExceeded(
        'sandboxStackBytesMax',
        svc.limits.sandboxStackBytesMax,
        null,
        `${name}: ${failure.message}`,
        {
          hint: failure.hint,
        },
      );
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

/** Thrown inside a savepoint to roll a successful @dryRun operation back while keeping its result. */
export class DryRunRollback extends Error {
  constructor(readonly output: unknown) {
    super('dry run');
  }
}
