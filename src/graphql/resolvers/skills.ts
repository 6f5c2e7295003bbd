import type { ActionVersion } from '../../actions/actions.js';
import { EngineError } from '../../errors.js';
import { checkOutsideCall } from '../../execution/call-rules.js';
import * as skills from '../../skills/skills.js';
import type { RequestContext } from '../context.js';
import { guard, visible } from './guard.js';

const AS = 'actions.Skill';

type Args = Record<string, any>;

/**
 * Skills: reading one is SELECT on actions.Skill, creating INSERT, updating UPDATE. Neither write
 * can be done from inside a tool call: a skill outlives the call and steers every agent that
 * declares it, beyond the calling tools' limits.
 */
export const skillResolvers = {
  ActionsQuery: {
    skill: (_: unknown, { name, version }: Args, ctx: RequestContext) =>
      guard(ctx, 'SELECT', AS, skills.getSkill(ctx.services.skills.deps, name, version)),
    skills: (_: unknown, { first, after }: Args, ctx: RequestContext) =>
      visible(ctx, AS, skills.listSkills(ctx.services.skills.deps, first, after)),
  },
  ActionsMutation: {
    createSkill: (_: unknown, { id, input }: Args, ctx: RequestContext) => {
      checkOutsideCall(
        ctx.frame,
        'skills cannot be created',
        'Create skills as a client (createSkill, or skills/<name>.md with tally deploy).',
      );
      guard(ctx, 'INSERT', AS, { skillId: id, ...input });
      return skills.createSkill(ctx.services.skills.deps, id, input);
    },
    updateSkill: (_: unknown, { id, input }: Args, ctx: RequestContext) => {
      checkOutsideCall(
        ctx.frame,
        'skills cannot be updated',
        'Update skills as a client (updateSkill, or skills/<name>.md with tally deploy).',
      );
      const deps = ctx.services.skills.deps;
      const row = deps.st.skillById.get(id);
      if (!row)
        throw new EngineError('NOT_FOUND', `skill ${id} does not exist`, {
          hint: 'Create it with createSkill, or check the id.',
        });
      guard(ctx, 'UPDATE', AS, skills.getSkill(deps, row.name));
      return skills.updateSkill(deps, id, input);
    },
  },
  Action: {
    skills: (v: ActionVersion) => v.skills ?? [],
  },
};
