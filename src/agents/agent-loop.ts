import { type ActionVersion, LOAD_SKILL_TOOL, NATIVE_TOOLS, type ToolReference } from '../actions/actions.js';
import { limitExceeded } from '../errors.js';
import type { ModelMessage, ModelToolResult } from '../models/types.js';
import { referencedVersion } from '../execution/call-rules.js';
import { succeeded } from '../execution/checks.js';
import { type AgentConfig, modelConfig, renderPrompt } from './config.js';
import { correction, finalOutput, joinInstructions, modelTurn, outputInvalid, schemaNote } from './model-turns.js';
import { toolCall } from './tool-calls.js';
import { type OfferedTool, type RunContext, recorded, stepId } from './run-context.js';
import { CORRECTIONS_MAX } from '../limits.js';

/*
 * The agent loop: the tools and skills an agent offers its model, and the turns until the model
 * answers without asking for a tool.
 */

/** The tools an agent offers its model: pinned versions, or the latest ACTIVE one (as recorded at turn 1, when the run resumes). */
function offeredTools(ctx: RunContext, agent: ActionVersion, runId: string): OfferedTool[] {
  const { svc } = ctx;
  const first = recorded(ctx, stepId(ctx, runId, 'turn', 1));
  const offered = new Map(
    ((first?.input as { tools?: Array<{ name: string; version?: number }> } | null)?.tools ?? []).map((t) => [
      t.name,
      t.version,
    ]),
  );
  return svc.transactions.run('read', () => ({
    value: agent.tools
      .map((reference): OfferedTool => {
        if ((NATIVE_TOOLS as readonly string[]).includes(reference.name)) {
          const native = reference.name as 'graphql' | 'cel';
          return { reference, version: null, native, spec: { name: native, ...NATIVE_SPECS[native] } };
        }
        // Pinned, or as recorded at turn 1, or the latest ACTIVE: whether it may run is checked where it runs.
        const version = referencedVersion(
          svc.actions,
          { name: reference.name, version: reference.version ?? offered.get(reference.name) ?? null },
          undefined,
          `${reference.name}, a tool of ${agent.name},`,
        );
        return {
          reference,
          version,
          native: null,
          spec: {
            name: reference.name,
            description: version.tool.description,
            inputSchema: withoutFixed(version.tool.inputSchema, reference),
          },
        };
      })
      // VISIBILITY (issue 36): an internal tool is offered to no model, even when a reference made
      // before the tool became internal resolves to such a version; the model calling it is told
      // there is no such tool.
      .filter((tool) => tool.version?.tool.internal !== true),
    commit: false,
  }));
}

/**
 * The built-in load_skill tool, when the agent declares skills: pinned versions, or the latest
 * (as recorded at turn 1 when the run resumes). The model sees each skill's name and description.
 */
function offeredSkills(ctx: RunContext, agent: ActionVersion, runId: string): OfferedTool | null {
  const declared = agent.skills ?? [];
  if (declared.length === 0) return null;
  const first = recorded(ctx, stepId(ctx, runId, 'turn', 1));
  const recordedVersions = new Map(
    ((first?.input as { skills?: Array<{ name: string; version: number }> } | null)?.skills ?? []).map((k) => [
      k.name,
      k.version,
    ]),
  );
  const refs = declared.map((ref) => ({
    name: ref.name,
    version: ref.version ?? recordedVersions.get(ref.name) ?? null,
  }));
  const skills = ctx.svc.transactions.run('read', () => ({ value: ctx.svc.skills.resolve(refs), commit: false }));
  return {
    reference: { name: LOAD_SKILL, version: null, input: null },
    version: null,
    native: null,
    skills,
    spec: {
      name: LOAD_SKILL,
      description:
        'Load the guidance of one of your skills (its markdown body) by name, before doing what it is about.',
      inputSchema: {
        type: 'object',
        properties: { name: { type: 'string', enum: skills.map((k) => k.name) } },
        required: ['name'],
        additionalProperties: false,
      },
    },
  };
}

export const LOAD_SKILL = LOAD_SKILL_TOOL;

const NATIVE_SPECS = {
  graphql: {
    description: 'Run one GraphQL operation against the ledger (reads, and writes the agent’s policies allow).',
    inputSchema: {
      type: 'object',
      properties: { query: { type: 'string' }, variables: { type: 'object' } },
      required: ['query'],
      additionalProperties: false,
    },
  },
  cel: {
    description: 'Evaluate a CEL expression (exact decimal arithmetic); performs no operation.',
    inputSchema: {
      type: 'object',
      properties: { expression: { type: 'string' }, bindings: { type: 'object' } },
      required: ['expression'],
      additionalProperties: false,
    },
  },
} as const;

/** The schema the model sees: fixed properties are removed (the model cannot set them; the reference does). */
function withoutFixed(schema: Record<string, unknown>, reference: ToolReference): Record<string, unknown> {
  if (!reference.input) return schema;
  const fixed = new Set(Object.keys(reference.input));
  const properties = schema.properties as Record<string, unknown> | undefined;
  const required = schema.required as string[] | undefined;
  return {
    ...schema,
    ...(properties
      ? { properties: Object.fromEntries(Object.entries(properties).filter(([k]) => !fixed.has(k))) }
      : {}),
    ...(required ? { required: required.filter((k) => !fixed.has(k)) } : {}),
  };
}

/** An agent run: model turn → the tool calls it asked for → their results → the next turn, until an answer. */
export async function runAgent(
  ctx: RunContext,
  runId: string,
  agent: ActionVersion,
  input: unknown,
  depth: number,
): Promise<unknown> {
  const config = modelConfig('agent', agent.config, ctx.svc.limits) as AgentConfig;
  const tools = offeredTools(ctx, agent, runId);
  const skills = offeredSkills(ctx, agent, runId);
  if (skills) tools.push(skills);
  const instructions = joinInstructions(
    config.instructions,
    skills
      ? `Skills you can load with load_skill before you act (name: what it is for):\n${skills.skills!.map((k) => `- ${k.name}: ${k.description}`).join('\n')}`
      : null,
    agent.tool.outputSchema !== null ? schemaNote(agent) : null,
  );
  // A session's turn sees the session's history first (its own run at the top level only).
  const history: ModelMessage[] =
    ctx.session && runId === ctx.executionId
      ? ctx.session.history.map((m) =>
          m.role === 'USER' ? { role: 'user', text: m.text } : { role: 'assistant', text: m.text, toolCalls: [] },
        )
      : [];
  const messages: ModelMessage[] = [...history, { role: 'user', text: renderPrompt(config.prompt, input) }];
  const scope = {
    event: {
      data: input,
      execution: {
        executionId: runId,
        actionId: agent.actionId,
        actionVersion: agent.version,
        attempt: ctx.claim.attempt,
      },
      caller: { principal: ctx.principal },
    },
    toolInput: input,
    executionInput: ctx.input,
    session: ctx.session ? { id: ctx.session.id, input: ctx.session.input } : null,
  };
  let toolCalls = 0;
  let corrections = 0;
  for (let turn = 1; ; turn++) {
    if (turn > config.maxTurns) {
      throw limitExceeded(
        'config.maxTurns',
        config.maxTurns,
        turn,
        `${agent.name} did not answer within maxTurns (${config.maxTurns}) model turns`,
        { hint: 'Raise config.maxTurns (at most agentTurnsMax), or make the task smaller.' },
      );
    }
    const answer = await modelTurn(ctx, runId, turn, depth, {
      config,
      messages,
      tools,
      instructions,
      responseSchema: null,
    });
    messages.push({ role: 'assistant', text: answer.text, toolCalls: answer.toolCalls });
    if (answer.toolCalls.length === 0) {
      const result = finalOutput(ctx, agent, answer.text);
      if (result.ok) return result.output;
      if (corrections++ >= CORRECTIONS_MAX) throw outputInvalid(agent, result.problem);
      messages.push({ role: 'user', text: correction(agent, result.problem) });
      continue;
    }
    const turnId = stepId(ctx, runId, 'turn', turn);
    const results: ModelToolResult[] = [];
    for (const [index, call] of answer.toolCalls.entries()) {
      toolCalls++;
      if (toolCalls > config.maxToolCalls) {
        throw limitExceeded(
          'config.maxToolCalls',
          config.maxToolCalls,
          toolCalls,
          `${agent.name} asked for tool call ${toolCalls}; its maxToolCalls is ${config.maxToolCalls}`,
          {
            hint: 'Raise config.maxToolCalls (at most agentToolCallsMax), or give the agent tools that do more per call.',
          },
        );
      }
      const { node, attempts } = await toolCall(ctx, {
        runId,
        turnId,
        index,
        call,
        tools,
        scope,
        depth,
        callsLeft: config.maxToolCalls - toolCalls + 1,
      });
      // A retried call's further attempts were tool calls too.
      toolCalls += attempts - 1;
      results.push({
        toolCallId: call.id,
        name: call.name,
        content: JSON.stringify(
          succeeded(node)
            ? (node.output ?? null)
            : { error: { code: node.error?.code, message: node.error?.message, hint: node.error?.hint } },
        ),
        isError: !succeeded(node),
      });
    }
    messages.push({ role: 'tool', results });
  }
}
