import { type ActionVersion, runsOutsideTransactions, type ToolReference } from '../actions/actions.js';
import { celToJson, jsonToCel } from '../cel/values.js';
import { EngineError, limitExceeded } from '../errors.js';
import type { CallFrame, CallNode } from './call-tree.js';
import type { ExecutionRow } from '../storage/statements/actions.js';
import type { ExecutionServices } from './services.js';

/*
 * The checks and conversions every call's entry shares: an execution id new in its tree and not
 * taken, the input's size, defaults and schema, fixed input, and what counts as success.
 */

export interface InvokeRequest {
  id?: string | null;
  name?: string | null;
  executionId: string;
  actionVersion?: number | null;
  input?: unknown;
  /** The version, when the caller already loaded it (the resolver does, to check the policy). */
  version?: ActionVersion;
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
    throw limitExceeded(
      'inputBytesMax',
      svc.limits.inputBytesMax,
      bytes,
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
  if (version.kind === 'http' || version.kind === 'mcp')
    throw new EngineError(
      'BAD_REQUEST',
      `${version.name} is ${version.kind === 'http' ? 'an http tool' : "an MCP server's tool"}: it calls a service outside Tally, which never happens inside a request's transaction, so it cannot be invoked`,
      {
        hint: 'Start it with startAction (the worker sends it after your request commits, with an idempotency key) and wait with actions.execution(id:, waitMs:); a program that declares it starts it with tools.<name>(input); an agent calls it like any tool.',
      },
    );
  throw new EngineError(
    'BAD_REQUEST',
    `${version.name} is ${version.kind === 'agent' ? 'an agent' : 'a model'}: it calls a model over the network, which never runs inside a request's transaction, so it cannot be invoked or called by a program`,
    {
      hint: `Start it with startAction (it runs in the worker, each step in a short transaction of its own) and wait for it with actions.execution(id:, waitMs:)${version.kind === 'agent' ? '' : ', or have an agent call it'}.`,
    },
  );
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

/** A call that answered: it ran and succeeded, or a cached answer stood for it. */
export function succeeded(node: Pick<CallNode, 'status'>): boolean {
  return node.status === 'SUCCEEDED' || node.status === 'CACHED';
}

export function toEngineError(error: unknown): EngineError {
  if (error instanceof EngineError) return error;
  return new EngineError('INTERNAL', error instanceof Error ? error.message : String(error), { cause: error });
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
