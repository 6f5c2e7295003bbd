import { badInput, EngineError, limitExceeded, quote } from '../errors.js';
import { CACHE_TTL_MS_MAX, TOOL_TITLE_MAX } from '../limits.js';
import { parsePolicies } from '../policy/policy.js';
import { checkAliases, checkNotReserved, checkToolName } from './names.js';
import { checkHooks, checkOffered, checkReference } from './references.js';
import { isReadOnly } from './tool-access.js';
import {
  type ActionDeps,
  type ActionInput,
  type ActionKind,
  runsAfterCommit,
  type ActionVersionDocument,
  BACKOFF_MS_MAX,
  DEFAULT_EXECUTION,
  type ExecutionSettings,
  type SkillReference,
  type ToolDefinition,
} from './types.js';
import { deepFreeze } from './versions.js';

/*
 * The version document validator: buildDocument checks what a caller sent, field by field in a
 * fixed order (docs/reference/mutation-checks.md, createAction), over the version before it, and
 * returns the document to store. A model or agent config is checked by the deps' checkModelConfig.
 */

/** Build, validate and compile a version document; every problem names the field at fault. */
export function buildDocument(
  deps: ActionDeps,
  base: { actionId: string; name: string; version: number; created: string },
  input: ActionInput,
  previous: ActionVersionDocument | null,
): ActionVersionDocument {
  const kind = (input.kind ?? previous?.kind ?? 'tool') as ActionKind;
  if (!(['tool', 'graphql', 'model', 'agent', 'http', 'mcp'] as const).includes(kind)) {
    throw new EngineError('BAD_REQUEST', `kind ${quote(kind)} is not supported`, {
      hint: 'Use "tool" (a JavaScript program), "graphql" (the native GraphQL tool with narrower policies), "model" (one model call), "agent" (a model that calls the tools it declares), "http" (a request to an integration the operator configured) or "mcp" (a tool of an MCP server the operator configured, made by `tally mcp import`).',
    });
  }
  if (previous && kind !== previous.kind) {
    throw new EngineError('BAD_REQUEST', `an action cannot change kind (${previous.kind} → ${kind})`, {
      hint: 'Create a new action instead.',
    });
  }
  const config = (input.config ?? previous?.config ?? null) as Record<string, unknown> | null;
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw new EngineError('BAD_REQUEST', `config must be an object, got ${quote(config)}`, {
      hint:
        kind === 'tool'
          ? 'Send config: {runtime: "javascript", src: "function run(event) { ... }"}.'
          : kind === 'graphql'
            ? 'Send config: {version: 1}.'
            : kind === 'http'
              ? 'Send config: {integration: "<a configured integration>", method: "POST", path: "/payouts/{input.id}"}.'
              : kind === 'mcp'
                ? 'Import MCP tools with `tally mcp import <server>`.'
                : 'Send config: {provider: "<a configured provider>", model: "<one of its models>", instructions: "…"}.',
    });
  }
  const fileName = `${base.name}@${base.version}`;
  if (kind === 'tool') {
    if (config.runtime !== 'javascript') {
      throw new EngineError('BAD_REQUEST', `config.runtime ${quote(config.runtime)} is not supported`, {
        hint:
          config.runtime === 'starlark'
            ? 'Use runtime: "javascript": a Starlark program translates line by line (event["data"] stays, check=False becomes {check: false}, fail(m, hint=h) becomes fail(m, h)), as docs/coming-from-twisp.md shows.'
            : 'Use runtime: "javascript".',
      });
    }
    if (typeof config.src !== 'string' || config.src.trim() === '') {
      throw new EngineError('BAD_REQUEST', 'config.src must be the program text', {
        hint: 'Define function run(event) { ... }.',
      });
    }
    const bytes = Buffer.byteLength(config.src);
    if (bytes > deps.limits.programBytesMax) {
      throw limitExceeded(
        'programBytesMax',
        deps.limits.programBytesMax,
        bytes,
        `config.src is ${bytes} bytes; programBytesMax is ${deps.limits.programBytesMax}`,
      );
    }
    const problem = deps.checkProgram(fileName, config.src);
    if (problem) {
      const at =
        problem.line === undefined
          ? ''
          : ` at line ${problem.line}${problem.column === undefined ? '' : `, column ${problem.column}`}`;
      throw new EngineError('BAD_REQUEST', `the program of ${fileName} does not compile: ${problem.message}${at}`, {
        hint: 'Fix the syntax; the program must define function run(event).',
        details: { file: fileName, line: problem.line, column: problem.column },
      });
    }
  } else if (kind === 'model' || kind === 'agent') {
    deps.checkModelConfig(kind, config);
  } else if (kind === 'http' || kind === 'mcp') {
    deps.checkOutsideConfig(kind, config);
  } else if (config.version !== 1) {
    throw new EngineError(
      'BAD_REQUEST',
      `config.version ${quote(config.version)} is not a native graphql tool version`,
      { hint: 'Use config: {version: 1}.' },
    );
  }

  const toolIn = input.tool ?? null;
  const tool: ToolDefinition = {
    name: toolIn?.name ?? previous?.tool.name ?? base.name,
    description: toolIn?.description ?? previous?.tool.description ?? '',
    inputSchema: (toolIn?.inputSchema ??
      previous?.tool.inputSchema ??
      (kind === 'graphql' ? GRAPHQL_INPUT_SCHEMA : { type: 'object' })) as Record<string, unknown>,
    outputSchema: (toolIn?.outputSchema === undefined
      ? (previous?.tool.outputSchema ?? null)
      : toolIn.outputSchema) as Record<string, unknown> | null,
  };
  const title = toolIn?.title === undefined ? (previous?.tool.title ?? null) : toolIn.title;
  if (title !== null) {
    if (typeof title !== 'string') throw badInput('tool.title must be a string', title);
    if (title.length > TOOL_TITLE_MAX) {
      throw limitExceeded(
        'toolTitleMax',
        TOOL_TITLE_MAX,
        title.length,
        `tool.title ${quote(`${title.slice(0, 40)}…`)} is ${title.length} characters; at most ${TOOL_TITLE_MAX}`,
        { hint: 'A title is a short human name; put the rest in the description.' },
      );
    }
    tool.title = title;
  }
  const aliases = checkAliases(
    deps,
    base,
    toolIn?.aliases === undefined ? (previous?.tool.aliases ?? []) : (toolIn.aliases ?? []),
  );
  if (aliases.length > 0) tool.aliases = aliases;
  const metadata = toolIn?.metadata === undefined ? (previous?.tool.metadata ?? null) : toolIn.metadata;
  if (metadata !== null) {
    if (typeof metadata !== 'object' || Array.isArray(metadata)) {
      throw badInput(
        'tool.metadata must be a JSON object',
        metadata,
        'Send an object, e.g. {"owner": "payments"}, or null.',
      );
    }
    tool.metadata = metadata as Record<string, unknown>;
  }
  const sessionSchema = (
    toolIn?.sessionSchema === undefined ? (previous?.tool.sessionSchema ?? null) : toolIn.sessionSchema
  ) as Record<string, unknown> | null;
  if (sessionSchema !== null) {
    if (kind !== 'agent')
      throw new EngineError('BAD_REQUEST', `tool.sessionSchema is for agents; this is a ${kind}`, {
        hint: 'Leave sessionSchema out, or make the action an agent.',
      });
    deps.schemas.compile(sessionSchema, 'tool.sessionSchema');
    tool.sessionSchema = sessionSchema;
  }
  const internal = toolIn?.internal == null ? (previous?.tool.internal ?? false) : toolIn.internal;
  if (typeof internal !== 'boolean') throw badInput('tool.internal must be true or false', internal);
  if (internal) tool.internal = true;
  // An mcp action's fingerprint is its tool definition's, as imported (checked now it is built).
  if (kind === 'mcp') deps.checkOutsideConfig(kind, config, tool);
  checkToolName(tool.name, 'tool.name');
  checkNotReserved(base.name, 'action name');
  checkNotReserved(tool.name, 'tool.name');
  deps.schemas.compile(tool.inputSchema, 'tool.inputSchema');
  if (tool.outputSchema !== null) deps.schemas.compile(tool.outputSchema, 'tool.outputSchema');

  const tools =
    input.tools === undefined || input.tools === null
      ? (previous?.tools ?? [])
      : input.tools.map((ref, i) => checkReference(deps, ref, i, kind));
  if (tools.length > deps.limits.toolReferencesMax) {
    throw limitExceeded(
      'toolReferencesMax',
      deps.limits.toolReferencesMax,
      tools.length,
      `${tools.length} tool references; toolReferencesMax is ${deps.limits.toolReferencesMax}`,
    );
  }
  const seen = new Set<string>();
  for (const ref of tools) {
    if (seen.has(ref.name)) throw new EngineError('BAD_REQUEST', `tool ${quote(ref.name)} is referenced twice`);
    seen.add(ref.name);
  }
  const policies =
    input.policies === undefined || input.policies === null
      ? (previous?.policies ?? [])
      : parsePolicies(deps.cel, input.policies, deps.limits.policiesMax);
  const execution = checkExecution(deps, input.execution, previous?.execution ?? DEFAULT_EXECUTION, kind);
  if (kind === 'agent') checkOffered(deps, tools);
  if (kind === 'http') checkFollowUps(config, tools);
  const skillsIn = input.skills === undefined || input.skills === null ? (previous?.skills ?? []) : input.skills;
  if (skillsIn.length > 0 && kind !== 'agent')
    throw new EngineError('BAD_REQUEST', `skills are for agents; this is a ${kind}`, {
      hint: 'Leave skills out, or make the action an agent.',
    });
  if (skillsIn.length > deps.limits.toolReferencesMax)
    throw limitExceeded(
      'toolReferencesMax',
      deps.limits.toolReferencesMax,
      skillsIn.length,
      `${skillsIn.length} skills; toolReferencesMax is ${deps.limits.toolReferencesMax}`,
    );
  const skills: SkillReference[] = skillsIn.map((ref, i) => {
    const checked = { name: ref.name, version: ref.version ?? null };
    deps.checkSkill(checked, `skills[${i}]`);
    return checked;
  });
  if (new Set(skills.map((k) => k.name)).size !== skills.length)
    throw new EngineError('BAD_REQUEST', 'a skill is declared twice', { hint: 'Declare each skill once.' });
  const hooks =
    input.hooks === undefined
      ? (previous?.hooks ?? null)
      : input.hooks === null
        ? null
        : checkHooks(deps, base.name, kind, input.hooks);
  const document: ActionVersionDocument = {
    ...base,
    kind,
    config,
    tool,
    tools,
    ...(skills.length ? { skills } : {}),
    ...(hooks && (hooks.before || hooks.after) ? { hooks } : {}),
    policies,
    execution,
  };
  if (execution.cacheTtlMs != null && !isReadOnly(deps, { ...document, status: 'DRAFT', modified: base.created })) {
    throw new EngineError(
      'BAD_REQUEST',
      `execution.cacheTtlMs ${execution.cacheTtlMs}: ${base.name} is not read-only (its policies, or those of a tool it references, allow writes)`,
      {
        hint: 'a tool whose policies allow writes cannot cache: its result depends on what it changed',
      },
    );
  }
  // The program has its own bound; the rest (description, schemas, policies, references) this one.
  // A version no larger than the one before passes, so a tool made under a higher limit can still
  // get a new program.
  const restBytes = nonProgramBytes(document);
  if (restBytes > deps.limits.jsonBytesMax && (previous === null || restBytes > nonProgramBytes(previous))) {
    throw limitExceeded(
      'jsonBytesMax',
      deps.limits.jsonBytesMax,
      restBytes,
      `the action version besides its program is ${restBytes} bytes; jsonBytesMax is ${deps.limits.jsonBytesMax}`,
      {
        hint: 'Shorten the description, the schemas or the policies.',
      },
    );
  }
  return document;
}

function nonProgramBytes(document: ActionVersionDocument): number {
  return Buffer.byteLength(JSON.stringify({ ...document, config: { ...document.config, src: '' } }));
}

const GRAPHQL_INPUT_SCHEMA = deepFreeze({
  type: 'object',
  properties: { query: { type: 'string' }, variables: { type: 'object' }, operationName: { type: 'string' } },
  required: ['query'],
  additionalProperties: false,
});

function checkExecution(
  deps: ActionDeps,
  input: ActionInput['execution'],
  previous: ExecutionSettings,
  kind: ActionKind,
): ExecutionSettings {
  const limits = deps.limits;
  if (!input) return previous;
  /**
   * A positive integer at most `max`; past it, LIMIT_EXCEEDED naming the limit: `limit`, a key of
   * TALLY_CONFIG limits when `configurable` (the message and hint say how to raise it), else a fixed bound's name.
   */
  const positiveInt = (
    value: number | null | undefined,
    fallback: number,
    what: string,
    max: number,
    limit: string,
    configurable = false,
  ): number => {
    if (value == null) return fallback;
    if (!Number.isInteger(value) || value < 1) throw badInput(`execution.${what} must be a positive integer`, value);
    if (value > max) {
      throw limitExceeded(
        limit,
        max,
        value,
        `execution.${what} ${value} is over its maximum ${max}${configurable ? ` (${limit})` : ''}`,
        configurable
          ? { hint: `Ask for at most ${max}, or raise limits.${limit} in TALLY_CONFIG.`, details: { [limit]: max } }
          : {},
      );
    }
    return value;
  };
  const backoff = input.backoff ?? {};
  const multiplier = backoff.multiplier ?? previous.backoff.multiplier;
  if (typeof multiplier !== 'number' || !(multiplier >= 1) || multiplier > 10) {
    throw badInput('execution.backoff.multiplier must be between 1 and 10', multiplier);
  }
  return {
    maxAttempts: positiveInt(
      input.maxAttempts,
      previous.maxAttempts,
      'maxAttempts',
      limits.maxAttemptsMax,
      'maxAttemptsMax',
      true,
    ),
    backoff: {
      initialMs: positiveInt(
        backoff.initialMs,
        previous.backoff.initialMs,
        'backoff.initialMs',
        BACKOFF_MS_MAX,
        'backoffMsMax',
      ),
      multiplier,
      maxMs: positiveInt(backoff.maxMs, previous.backoff.maxMs, 'backoff.maxMs', BACKOFF_MS_MAX, 'backoffMsMax'),
    },
    timeoutMs:
      input.timeoutMs === undefined
        ? previous.timeoutMs
        : input.timeoutMs === null
          ? null
          : // A tool's attempt holds the write lock; an outside call's waits on the network, outside
            // any transaction, bounded as an agent run is.
            runsAfterCommit(kind)
            ? positiveInt(input.timeoutMs, 0, 'timeoutMs', limits.agentRunMsMax, 'agentRunMsMax', true)
            : positiveInt(input.timeoutMs, 0, 'timeoutMs', limits.toolTimeoutMsMax, 'toolTimeoutMsMax', true),
    retryIf: input.retryIf === undefined ? (previous.retryIf ?? null) : checkRetryIf(deps, input.retryIf),
    cacheTtlMs:
      input.cacheTtlMs === undefined
        ? (previous.cacheTtlMs ?? null)
        : input.cacheTtlMs === null
          ? null
          : positiveInt(input.cacheTtlMs, 0, 'cacheTtlMs', CACHE_TTL_MS_MAX, 'cacheTtlMsMax'),
  };
}

/** execution.retryIf: a CEL expression over error {code, message, attempt}, compiled now. */
function checkRetryIf(deps: ActionDeps, expression: string | null): string | null {
  if (expression === null) return null;
  if (typeof expression !== 'string' || expression.trim() === '')
    throw badInput('execution.retryIf must be a CEL expression', expression);
  try {
    deps.cel.compile(expression);
  } catch (error) {
    throw new EngineError('BAD_REQUEST', `execution.retryIf ${quote(expression)}: ${(error as Error).message}`, {
      hint: 'A CEL expression over error {code, message, attempt}, e.g. error.code == "TIMEOUT" && error.attempt < 3.',
    });
  }
  return expression;
}

/** An http tool's follow-ups (config.followUps) are tools it declares: the one door for what it may start. */
function checkFollowUps(config: Record<string, unknown>, tools: readonly { name: string }[]): void {
  const then = (config.followUps ?? {}) as Record<string, { tool?: unknown } | null>;
  for (const [which, followUp] of Object.entries(then)) {
    if (!followUp) continue;
    if (!tools.some((t) => t.name === followUp.tool))
      throw new EngineError(
        'BAD_REQUEST',
        `config.followUps.${which}.tool ${quote(followUp.tool)} is not one of the tools this action declares`,
        { hint: 'Add it to tools (with a version to pin it): a follow-up is a call of the tool, under its policies.' },
      );
  }
}
