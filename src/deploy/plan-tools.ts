import { DEFAULT_EXECUTION } from '../actions/actions.js';
import { isUuid } from '../ids.js';
import { createdVersion, type DeployedState, mergeVersion } from './drift.js';
import { recordOf, versionedItem } from './plan-common.js';
import type { PlanItem } from './plan-item.js';
import { isProgramless, ProjectError, type SkillFile, type ToolFile } from './project.js';
import { current } from './reads.js';
import type { Target } from './target.js';

/*
 * The plan of tools and skills: each after what it needs from the project (byReferences), and
 * each a new version when what its files declare changed.
 */

const ACTION_FIELDS = `version config tool { name title description aliases metadata inputSchema outputSchema internal } tools { name version input approval { when timeoutMs } } skills { name version } hooks { before { name version } after { name version } }
  policies { effect actions resources assertions } execution { maxAttempts backoff { initialMs multiplier maxMs } timeoutMs retryIf cacheTtlMs }`;

function toolDesired(tool: ToolFile) {
  const m = tool.manifest;
  return {
    config: isProgramless(m) ? m.config : { runtime: 'javascript', src: tool.src },
    tool: {
      name: tool.name,
      title: m.title ?? null,
      description: m.description ?? '',
      aliases: m.aliases ?? [],
      metadata: m.metadata ?? null,
      inputSchema: m.inputSchema ?? { type: 'object' },
      outputSchema: m.outputSchema ?? null,
      internal: m.internal === true,
    },
    tools: (m.tools ?? []).map((r: any) => ({
      name: r.name,
      version: r.version ?? null,
      input: r.input ?? null,
      approval: r.approval ? { when: r.approval.when ?? null, timeoutMs: r.approval.timeoutMs ?? null } : null,
    })),
    skills: (m.skills ?? []).map((r: any) => ({ name: r.name, version: r.version ?? null })),
    hooks: m.hooks ? { before: hookOf(m.hooks.before), after: hookOf(m.hooks.after) } : null,
    policies: (m.policies ?? []).map((p: any) => ({
      effect: p.effect,
      actions: p.actions,
      resources: p.resources,
      assertions: p.assertions ?? null,
    })),
    execution: {
      maxAttempts: m.execution?.maxAttempts ?? DEFAULT_EXECUTION.maxAttempts,
      backoff: { ...DEFAULT_EXECUTION.backoff, ...(m.execution?.backoff ?? {}) },
      timeoutMs: m.execution?.timeoutMs ?? null,
      retryIf: m.execution?.retryIf ?? null,
      cacheTtlMs: m.execution?.cacheTtlMs ?? null,
    },
  };
}

const hookOf = (ref: any) => (ref ? { name: ref.name, version: ref.version ?? null } : null);

export type Versioned = { kind: 'tool'; tool: ToolFile } | { kind: 'skill'; skill: SkillFile };

/**
 * Order tools and skills so that each comes after what it needs from the project: a tool after the
 * tools it references and the skills it declares, a skill after the tools it lists. Tools keep
 * their order otherwise; a skill no tool declares comes last.
 */
export function byReferences(tools: ToolFile[], skills: SkillFile[] = []): Versioned[] {
  const toolsByName = new Map(tools.map((t) => [t.name, t]));
  const skillsByName = new Map(skills.map((k) => [k.name, k]));
  const ordered: Versioned[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (item: Versioned) => {
    const key = item.kind === 'tool' ? `tool:${item.tool.name}` : `skill:${item.skill.name}`;
    if (state.get(key) === 'done') return;
    if (state.get(key) === 'visiting') {
      throw new ProjectError(
        item.kind === 'tool'
          ? 'tools (and the skills they declare) reference each other in a cycle'
          : 'a skill lists a tool that declares it, directly or through other tools',
        item.kind === 'tool' ? item.tool.manifestPath : item.skill.path,
      );
    }
    state.set(key, 'visiting');
    if (item.kind === 'tool') {
      for (const ref of item.tool.manifest.skills ?? []) {
        const dep = skillsByName.get(ref?.name);
        if (dep) visit({ kind: 'skill', skill: dep });
      }
      for (const ref of [
        ...(item.tool.manifest.tools ?? []),
        item.tool.manifest.hooks?.before,
        item.tool.manifest.hooks?.after,
      ]) {
        const dep = toolsByName.get(ref?.name);
        if (dep) visit({ kind: 'tool', tool: dep });
      }
    } else {
      for (const name of item.skill.tools) {
        const dep = toolsByName.get(name);
        if (dep) visit({ kind: 'tool', tool: dep });
      }
    }
    state.set(key, 'done');
    ordered.push(item);
  };
  tools.forEach((tool) => visit({ kind: 'tool', tool }));
  skills.forEach((skill) => visit({ kind: 'skill', skill }));
  return ordered;
}

export async function planSkill(
  target: Target,
  skill: SkillFile,
  base: DeployedState | null,
  overwrite: boolean,
): Promise<PlanItem> {
  const existing = await current(
    target,
    'query($name: String!) { actions { skill(name: $name) { skillId version description body tools } } }',
    { name: skill.name },
    (d) => d.actions.skill,
  );
  const desired = { description: skill.description, body: skill.body, tools: skill.tools };
  const item = { kind: 'skill' as const, name: skill.name, file: skill.path };
  if (!existing) {
    if (!isUuid(skill.skillId))
      throw new ProjectError(
        `needs a "skillId:" that is a UUID in its front matter to create the skill, got ${JSON.stringify(skill.skillId)}`,
        skill.path,
      );
    return {
      ...item,
      change: 'create',
      version: 1,
      field: 'createSkill(id: $ID, input: $VAR) { version }',
      id: { type: 'UUID!', value: skill.skillId },
      variableType: 'SkillInput!',
      variable: { name: skill.name, ...desired },
      record: recordOf('SKILL', skill.name, base, createdVersion(desired)),
    };
  }
  const { skillId, version, ...have } = existing;
  const merge = mergeVersion(have, version, desired, base, overwrite);
  return versionedItem(item, merge, version, 'SKILL', skill.name, base, {
    field: 'updateSkill(id: $ID, input: $VAR) { version }',
    id: { type: 'UUID!', value: skillId },
    variableType: 'SkillInput!',
    variable: desired,
  });
}

/** A tool (its manifest and program): created, or a new version when what the files declare changed. */
export async function planTool(
  target: Target,
  tool: ToolFile,
  base: DeployedState | null,
  overwrite: boolean,
): Promise<PlanItem> {
  const existing = await current(
    target,
    `query($name: String!) { actions { action(name: $name) { actionId ${ACTION_FIELDS} } } }`,
    { name: tool.name },
    (d) => d.actions.action,
  );
  const desired = toolDesired(tool);
  if (!existing && !isUuid(tool.manifest.actionId))
    throw new ProjectError(
      `needs an "actionId" that is a UUID to create the tool, got ${JSON.stringify(tool.manifest.actionId ?? null)}`,
      tool.manifestPath,
    );
  const planned = { kind: 'tool' as const, name: tool.name, file: tool.programPath };
  if (!existing) {
    return {
      ...planned,
      change: 'create',
      version: 1,
      field: 'createAction(id: $ID, input: $VAR) { version }',
      id: { type: 'UUID!', value: tool.manifest.actionId },
      variableType: 'ActionInput!',
      variable: {
        name: tool.name,
        kind: isProgramless(tool.manifest) ? tool.manifest.kind : 'tool',
        ...desired,
      },
      record: recordOf('TOOL', tool.name, base, createdVersion(desired)),
    };
  }
  const { actionId, version, ...have } = existing;
  return versionedItem(
    planned,
    mergeVersion(have, version, desired, base, overwrite),
    version,
    'TOOL',
    tool.name,
    base,
    {
      field: 'updateAction(id: $ID, input: $VAR) { version }',
      id: { type: 'UUID!', value: actionId },
      variableType: 'ActionInput!',
      variable: desired,
    },
  );
}
