import { NATIVE_TOOLS, type SkillReference } from '../actions/actions.js';
import type { Clock } from '../clock.js';
import { alreadyExists, badInput, EngineError, limitExceeded, notFound, quote } from '../errors.js';
import type { Limits } from '../limits.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import type { ActionStatements } from '../storage/statements/actions.js';
import type { SkillRow, SkillStatements, SkillVersionRow } from '../storage/statements/skills.js';

/**
 * Skills: versioned guidance documents (markdown) an agent declares. The model sees each declared
 * skill's name and description, and loads its body with the built-in load_skill tool. A skill is
 * created as version 1; every update makes the next version (fields left out are kept); versions
 * are immutable. An agent pins a version or follows the latest, resolved when a run starts.
 */

/** One immutable version of a skill, as GraphQL's Skill shows it. */
export interface Skill {
  skillId: string;
  name: string;
  version: number;
  description: string;
  /** Markdown. */
  body: string;
  /** The tools it concerns (names of actions or native tools). */
  tools: string[];
  /** When this version was made. */
  created: string;
}

export interface SkillInput {
  name?: string | null;
  description?: string | null;
  body?: string | null;
  tools?: string[] | null;
}

/** What an agent run offers its model for one declared skill (the body is loaded on demand). */
export interface ResolvedSkill {
  name: string;
  version: number;
  description: string;
  tools: string[];
}

/** A skill version as load_skill returns it. */
export interface SkillDocument {
  name: string;
  version: number;
  description: string;
  body: string;
  tools: string[];
}

export interface SkillDeps {
  st: SkillStatements;
  /** The action statements: a skill's tools must name existing actions (or native tools). */
  actions: ActionStatements;
  clock: Clock;
  limits: Readonly<Limits>;
}

/** What the execution layer (the agent runner's load_skill) uses; `deps` is for the resolvers. */
export interface SkillServices {
  deps: SkillDeps;
  /** The declared skills, each pinned or the latest; throws NOT_FOUND for one that is gone. */
  resolve(refs: readonly SkillReference[]): ResolvedSkill[];
  /** One version of a skill, or null when there is no such skill or version. */
  read(name: string, version: number): SkillDocument | null;
}

export function skillServices(deps: SkillDeps): SkillServices {
  return {
    deps,
    resolve: (refs) => resolveSkills(deps, refs),
    read: (name, version) => readSkill(deps, name, version),
  };
}

/** Skill names are tool names: lower_snake_case, a letter first, at most 64. */
const NAME_PATTERN = /^[a-z][a-z0-9_]{0,63}$/;
/** Characters of a skill's description (the model reads it in every run that declares the skill). */
export const SKILL_DESCRIPTION_CHARS_MAX = 1000;

function toSkill(row: SkillRow, version: SkillVersionRow): Skill {
  return {
    skillId: row.skill_id,
    name: row.name,
    version: version.version,
    description: version.description,
    body: version.body,
    tools: JSON.parse(version.tools) as string[],
    created: version.created,
  };
}

function checkName(name: unknown): string {
  if (typeof name !== 'string' || !NAME_PATTERN.test(name)) {
    throw new EngineError('BAD_REQUEST', `skill name ${quote(name)} is not a skill name`, {
      hint: 'Use lower_snake_case like a tool name: a letter, then letters, digits and _ (at most 64).',
    });
  }
  return name;
}

function checkDescription(description: unknown): string {
  if (typeof description !== 'string' || description.trim() === '') {
    throw badInput(
      "a skill's description must be non-empty text",
      description,
      'Say in a sentence what the skill is for: the model reads it to decide whether to load the skill.',
    );
  }
  if (description.length > SKILL_DESCRIPTION_CHARS_MAX) {
    throw limitExceeded(
      'skillDescriptionCharsMax',
      SKILL_DESCRIPTION_CHARS_MAX,
      description.length,
      `the skill's description is ${description.length} characters; at most ${SKILL_DESCRIPTION_CHARS_MAX}`,
      {
        hint: 'Keep the description to a sentence or two; the guidance goes in the body.',
      },
    );
  }
  return description;
}

function checkBody(body: unknown, limits: Readonly<Limits>): string {
  if (typeof body !== 'string' || body.trim() === '') {
    throw badInput(
      "a skill's body must be non-empty markdown",
      body,
      'Write the guidance the model loads with load_skill.',
    );
  }
  if (body.length > limits.skillBodyCharsMax) {
    throw limitExceeded(
      'skillBodyCharsMax',
      limits.skillBodyCharsMax,
      body.length,
      `the skill's body is ${body.length} characters; skillBodyCharsMax is ${limits.skillBodyCharsMax}`,
      {
        hint: 'Shorten the body, or split it into several skills.',
        details: { skillBodyCharsMax: limits.skillBodyCharsMax },
      },
    );
  }
  return body;
}

function checkTools(deps: SkillDeps, tools: unknown): string[] {
  if (!Array.isArray(tools))
    throw badInput(
      "a skill's tools must be a list of tool names",
      tools,
      'Send tools: ["balance", "transfer"], or [].',
    );
  if (tools.length > deps.limits.toolReferencesMax) {
    throw limitExceeded(
      'toolReferencesMax',
      deps.limits.toolReferencesMax,
      tools.length,
      `${tools.length} tools; toolReferencesMax is ${deps.limits.toolReferencesMax}`,
      { hint: 'List only the tools the guidance is about.' },
    );
  }
  const seen = new Set<string>();
  tools.forEach((name: unknown, i) => {
    if (typeof name !== 'string')
      throw badInput(`tools[${i}] must be a tool name`, name, 'List tool names as strings.');
    if (!(NATIVE_TOOLS as readonly string[]).includes(name) && !deps.actions.actionByName.get(name)) {
      throw new EngineError('NOT_FOUND', `tools[${i}] names tool ${quote(name)}, which does not exist`, {
        hint: 'Create that tool first, or fix the name.',
      });
    }
    if (seen.has(name))
      throw new EngineError('BAD_REQUEST', `tools[${i}]: tool ${quote(name)} is listed twice`, {
        hint: 'List each tool once.',
      });
    seen.add(name);
  });
  return tools as string[];
}

function insertVersion(
  deps: SkillDeps,
  row: SkillRow,
  version: number,
  fields: { description: string; body: string; tools: string[] },
  now: string,
): Skill {
  const stored: SkillVersionRow = {
    skill_id: row.skill_id,
    version,
    description: fields.description,
    body: fields.body,
    tools: JSON.stringify(fields.tools),
    created: now,
  };
  deps.st.insertVersion.run(stored);
  return toSkill({ ...row, latest_version: version, modified: now }, stored);
}

/** Create a skill and its version 1. */
export function createSkill(deps: SkillDeps, skillId: string, input: SkillInput): Skill {
  if (deps.st.skillById.get(skillId)) {
    throw new EngineError('ALREADY_EXISTS', `skill ${skillId} already exists`, {
      hint: 'Use updateSkill to make its next version.',
    });
  }
  const name = checkName(input.name);
  if (deps.st.skillByName.get(name)) {
    throw alreadyExists('a skill named', name, 'Choose another name, or update that skill with updateSkill.');
  }
  const description = checkDescription(input.description);
  const body = checkBody(input.body, deps.limits);
  const tools = checkTools(deps, input.tools ?? []);
  const now = deps.clock.now().toISOString();
  const row: SkillRow = { skill_id: skillId, name, latest_version: 1, created: now, modified: now };
  deps.st.insertSkill.run(row);
  return insertVersion(deps, row, 1, { description, body, tools }, now);
}

/** Make the next version of a skill; fields left out are kept (an update that changes nothing still makes one). */
export function updateSkill(deps: SkillDeps, skillId: string, input: SkillInput): Skill {
  const row = deps.st.skillById.get(skillId);
  if (!row) throw notFound('skill', skillId, 'Create it with createSkill, or check the id.');
  if (input.name != null && input.name !== row.name) {
    throw new EngineError('BAD_REQUEST', `a skill cannot be renamed (${row.name} → ${quote(input.name)})`, {
      hint: 'Leave name out, or create a new skill.',
    });
  }
  const previous = toSkill(row, deps.st.version.get(skillId, row.latest_version)!);
  const description = checkDescription(input.description ?? previous.description);
  const body = checkBody(input.body ?? previous.body, deps.limits);
  const tools = input.tools == null ? previous.tools : checkTools(deps, input.tools);
  const now = deps.clock.now().toISOString();
  const version = row.latest_version + 1;
  deps.st.updateSkillLatest.run(version, now, skillId);
  return insertVersion(deps, row, version, { description, body, tools }, now);
}

/** A skill by name: the version asked for, or the latest. Throws NOT_FOUND naming what is missing. */
export function getSkill(deps: SkillDeps, name: string, version?: number | null): Skill {
  const row = deps.st.skillByName.get(name);
  if (!row)
    throw notFound('skill', name, 'Create it with createSkill (or skills/<name>.md in a project), or check the name.');
  const wanted = version ?? row.latest_version;
  const stored = deps.st.version.get(row.skill_id, wanted);
  if (!stored) {
    throw new EngineError(
      'NOT_FOUND',
      `skill ${row.name} has no version ${quote(wanted)}; its latest is ${row.latest_version}`,
      { hint: `Ask for a version from 1 to ${row.latest_version}, or leave version out for the latest.` },
    );
  }
  return toSkill(row, stored);
}

/** Skills, each as its latest version, in the order they were created. */
export function listSkills(deps: SkillDeps, first: number, after?: string | null): Connection<Skill> {
  const req = pageRequest<number>(first, after, deps.limits.pageSizeMax, 'number', 'skills');
  const rows = deps.st.skillsPage.all(req.after ?? 0, req.fetch);
  return toConnection(
    rows,
    req,
    (r) => r.rowid,
    (r) => toSkill(r, deps.st.version.get(r.skill_id, r.latest_version)!),
  );
}

/**
 * The check an agent's version makes of each skill it declares (ActionDeps.checkSkill): the skill
 * exists, and so does a pinned version. `what` names the reference (`skills[0]`).
 */
export function checkSkillReference(deps: SkillDeps, ref: SkillReference, what: string): void {
  const row = deps.st.skillByName.get(ref.name);
  if (!row) {
    throw new EngineError('NOT_FOUND', `${what} refers to skill ${quote(ref.name)}, which does not exist`, {
      hint: 'Create the skill first (createSkill, or skills/<name>.md in a project), or fix the name.',
    });
  }
  if (ref.version !== null) {
    if (!Number.isInteger(ref.version) || ref.version < 1 || !deps.st.version.get(row.skill_id, ref.version)) {
      throw new EngineError(
        'NOT_FOUND',
        `${what} pins skill ${row.name} version ${quote(ref.version)}, which does not exist; its latest is ${row.latest_version}`,
        {
          hint: `Pin a version from 1 to ${row.latest_version}, or leave version out to follow the latest.`,
        },
      );
    }
  }
}

/** The skills an agent declares, each as the pinned version or the latest now (for a run's start). */
export function resolveSkills(deps: SkillDeps, refs: readonly SkillReference[]): ResolvedSkill[] {
  return refs.map((ref, i) => {
    checkSkillReference(deps, ref, `skills[${i}]`);
    const skill = getSkill(deps, ref.name, ref.version);
    return { name: skill.name, version: skill.version, description: skill.description, tools: skill.tools };
  });
}

/** One version of a skill (what load_skill returns), or null when the skill or the version does not exist. */
export function readSkill(deps: SkillDeps, name: string, version: number): SkillDocument | null {
  const row = deps.st.skillByName.get(name);
  if (!row || !Number.isInteger(version)) return null;
  const stored = deps.st.version.get(row.skill_id, version);
  if (!stored) return null;
  const { skillId: _id, created: _created, ...document } = toSkill(row, stored);
  return document;
}
