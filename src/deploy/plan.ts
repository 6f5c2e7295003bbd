import { planAccount, planAccountSet, setsInOrder } from './plan-accounts.js';
import { planClient } from './plan-clients.js';
import type { DeployedKind, PlanItem, PlanOptions } from './plan-item.js';
import { byReferences, planSkill, planTool } from './plan-tools.js';
import { planTranCode } from './plan-tran-codes.js';
import { planTrigger } from './plan-triggers.js';
import { planVelocity } from './plan-velocity.js';
import type { Project } from './project.js';
import { deployedStates, stateKey } from './reads.js';
import type { Target } from './target.js';

/*
 * The plan: every record the project names, in the order a deploy applies them (accounts, sets,
 * velocity, tran codes, tools and skills, triggers, clients), each compared with the target and
 * with what the last deploy left. Reads only.
 */

/** The records a project names, by the identity the plan finds each with. */
function projectKeys(project: Project): Array<{ kind: DeployedKind; id: string }> {
  return [
    ...project.accounts.map((a) => ({ kind: 'ACCOUNT' as const, id: String(a.accountId).toLowerCase() })),
    ...project.accountSets.map((s) => ({ kind: 'ACCOUNT_SET' as const, id: s.accountSetId })),
    ...project.velocity.limits.map((l) => ({ kind: 'VELOCITY_LIMIT' as const, id: String(l.velocityLimitId) })),
    ...project.velocity.controls.map((c) => ({
      kind: 'VELOCITY_CONTROL' as const,
      id: String(c.control.velocityControlId),
    })),
    ...project.tranCodes.map((t) => ({ kind: 'TRAN_CODE' as const, id: String(t.definition.code) })),
    ...project.tools.map((t) => ({ kind: 'TOOL' as const, id: t.name })),
    ...project.skills.map((k) => ({ kind: 'SKILL' as const, id: k.name })),
    ...project.triggers.map((t) => ({ kind: 'TRIGGER' as const, id: String(t.definition.triggerId).toLowerCase() })),
    ...project.clients.map((c) => ({ kind: 'CLIENT' as const, id: String(c.principal) })),
  ];
}

/**
 * Compare the project with the target and list what a deploy would do. Reads only. Each record is
 * compared field by field with what it holds now and what the last deploy left (src/deploy/drift.ts):
 * a deploy writes only the fields the files declare, and what changed at runtime is kept, or a
 * conflict, never overwritten without options.overwriteRuntimeChanges.
 */
export async function planDeploy(
  project: Project,
  target: Target,
  onProgress?: (done: number, total: number) => void,
  options: PlanOptions = {},
): Promise<PlanItem[]> {
  const plan: PlanItem[] = [];
  const overwrite = options.overwriteRuntimeChanges === true;
  const attachments = project.velocity.controls.reduce((n, c) => n + c.attach.length, 0);
  const total =
    project.accounts.length +
    project.accountSets.length +
    project.velocity.limits.length +
    project.velocity.controls.length +
    attachments +
    project.tranCodes.length +
    project.tools.length +
    project.skills.length +
    project.triggers.length +
    project.clients.length;
  let done = 0;
  const tick = () => onProgress?.(++done, total);
  const states = await deployedStates(target, projectKeys(project));
  const baseOf = (kind: DeployedKind, id: string) => states.get(stateKey(kind, id)) ?? null;

  for (const account of project.accounts) {
    plan.push(
      await planAccount(target, account, baseOf('ACCOUNT', String(account.accountId).toLowerCase()), overwrite),
    );
    tick();
  }

  // What the plan calls accounts and sets by (a member, an attachment).
  const names = new Map<string, string>([
    ...project.accounts.map((a) => [String(a.accountId).toLowerCase(), String(a.code)] as const),
    ...project.accountSets.map((s) => [s.accountSetId, s.code] as const),
  ]);
  for (const set of setsInOrder(project.accountSets)) {
    plan.push(await planAccountSet(target, set, baseOf('ACCOUNT_SET', set.accountSetId), overwrite, names));
    tick();
  }
  await planVelocity(project, target, plan, tick, baseOf, overwrite, names);

  for (const { path, definition } of project.tranCodes) {
    plan.push(await planTranCode(target, path, definition, baseOf('TRAN_CODE', String(definition.code)), overwrite));
    tick();
  }

  for (const item of byReferences(project.tools, project.skills)) {
    if (item.kind === 'skill') {
      plan.push(await planSkill(target, item.skill, baseOf('SKILL', item.skill.name), overwrite));
      tick();
      continue;
    }
    plan.push(await planTool(target, item.tool, baseOf('TOOL', item.tool.name), overwrite));
    tick();
  }

  for (const { path, definition } of project.triggers) {
    plan.push(
      await planTrigger(
        target,
        path,
        definition,
        baseOf('TRIGGER', String(definition.triggerId).toLowerCase()),
        overwrite,
      ),
    );
    tick();
  }

  for (const client of project.clients) {
    plan.push(await planClient(target, client, baseOf('CLIENT', String(client.principal)), overwrite));
    tick();
  }
  return plan;
}
