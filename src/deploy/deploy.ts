import { bug } from '../errors.js';
import { formatDrift } from './format.js';
import { count } from './plan-common.js';
import { type DeployResult, DeployError, type PlanItem, type PlanOptions } from './plan-item.js';
import { planDeploy } from './plan.js';
import type { Project } from './project.js';
import { RECORDS_PER_FIELD } from './reads.js';
import type { Target } from './target.js';

/*
 * A deploy: plan (plan.ts), then apply every change in one GraphQL request, so one transaction.
 * The module callers import: it re-exports the plan, its types and its rendering.
 */

export { formatDrift, formatPlan } from './format.js';
export { planDeploy } from './plan.js';
export type {
  Change,
  DeployedKind,
  DeployResult,
  PlanItem,
  PlanOptions,
  RecordWrite,
  Step,
} from './plan-item.js';
export { DeployError } from './plan-item.js';

/** Where a mutation lives in the schema's namespaces. */
function namespaceOf(item: PlanItem): 'root' | 'actions' | 'auth' {
  if (item.kind === 'tool' || item.kind === 'skill' || item.kind === 'trigger') return 'actions';
  if (item.kind === 'client') return 'auth';
  return 'root';
}

/**
 * Plan, then apply every change in one GraphQL request, so one transaction: a deploy that fails
 * leaves nothing half-done. With dryRun, the request runs with @dryRun: the server checks
 * everything (programs compile, schemas, references) and rolls it all back. A plan with a
 * conflict (a field changed both at runtime and in the files) is refused before anything is sent,
 * unless overwriteRuntimeChanges. What the deploy leaves is recorded first in the same request,
 * refused if a record it writes changed since it was read (RECORD_CHANGED).
 */
export async function deploy(
  project: Project,
  target: Target,
  options: { dryRun?: boolean; onProgress?: (done: number, total: number) => void } & PlanOptions = {},
): Promise<DeployResult> {
  const plan = await planDeploy(project, target, options.onProgress, {
    overwriteRuntimeChanges: options.overwriteRuntimeChanges,
  });
  const conflicts = plan.filter((item) => item.drift?.some((d) => d.outcome === 'conflict'));
  if (conflicts.length > 0) {
    const lines = conflicts.flatMap((item) => formatDrift(item).filter((l) => l.startsWith('! conflict')));
    throw new DeployError(
      `${count(lines.length, 'field')} changed both at runtime and in the project files since the last deploy:\n${lines.join('\n')}\nnothing was applied`,
      plan,
      'CONFLICT',
      "Put the value to keep in the file (the one it has now, to keep the runtime change), or deploy with --overwrite-runtime-changes to write the files' values over it.",
    );
  }
  const changes = plan.filter((item) => item.change !== 'unchanged');
  const records = plan.flatMap((item) => (item.record ? [item.record] : []));
  // Nothing to change and nothing new to record; a dry run records nothing anyway.
  if (changes.length === 0 && (records.length === 0 || options.dryRun)) return { plan, applied: false, keys: {} };

  const declarations: string[] = [];
  const variables: Record<string, unknown> = {};
  const groups: Record<'root' | 'actions' | 'auth', string[]> = { root: [], actions: [], auth: [] };
  // First what the deploy leaves (and the versions it planned from, checked before anything is written).
  const recordFields: string[] = [];
  for (let i = 0; i * RECORDS_PER_FIELD < records.length; i++) {
    declarations.push(`$d${i}: [DeployedRecordInput!]!`);
    variables[`d${i}`] = records.slice(i * RECORDS_PER_FIELD, (i + 1) * RECORDS_PER_FIELD);
    recordFields.push(`d${i}: recordDeployment(records: $d${i})`);
  }
  changes.forEach((item, i) => {
    if (item.field) {
      declarations.push(`$v${i}: ${item.variableType}`);
      variables[`v${i}`] = item.variable;
      let field = item.field.replace('$VAR', `$v${i}`);
      if (item.id) {
        declarations.push(`$i${i}: ${item.id.type}`);
        variables[`i${i}`] = item.id.value;
        field = field.replace('$ID', `$i${i}`);
      }
      groups[namespaceOf(item)].push(`c${i}: ${field}`);
    }
    // A change's further steps: aliased c<change>_<step>, their variables s<change>_<step>_<name>.
    (item.steps ?? []).forEach((step, j) => {
      const field = step.field.replace(/\$([A-Z]+)\b/g, (_, name: string) => {
        const arg = step.args[name];
        // planDeploy builds the steps and their arguments together: a missing one is a bug.
        if (!arg) throw bug(`step ${step.field} has no argument ${name}`);
        const variable = `s${i}_${j}_${name.toLowerCase()}`;
        if (!(variable in variables)) {
          declarations.push(`$${variable}: ${arg.type}`);
          variables[variable] = arg.value;
        }
        return `$${variable}`;
      });
      groups[namespaceOf(item)].push(`c${i}_${j}: ${field}`);
    });
  });
  // Fields of one mutation run in order: the records, ledger records, then skills, tools and triggers (in plan order), then clients.
  const body = [
    ...recordFields,
    ...groups.root,
    groups.actions.length ? `actions { ${groups.actions.join('\n')} }` : '',
    groups.auth.length ? `auth { ${groups.auth.join('\n')} }` : '',
  ].join('\n');
  // A deploy is an operator's work: it runs under the operator budget (operatorDeadlineMs), not the
  // standard request's, so a project of any ordinary size goes in one transaction.
  const document = `mutation Deploy(${declarations.join(', ')})${options.dryRun ? ' @dryRun' : ''} @budget(name: OPERATOR) {\n${body}\n}`;
  const result = await target.request(document, variables);
  const first = result.errors?.[0];
  if (first?.extensions?.code === 'TIMEOUT') {
    // Sent, but unanswered: it may have been applied. Saying "nothing was applied" could be false.
    throw new DeployError(
      `deploy: ${first.message}; the outcome is unknown.\nRun it again with --dry-run to see what is left to apply; clients it may have created have keys nobody has seen: rotate them (updateClient rotateKey).`,
      plan,
    );
  }
  if (first) throw new DeployError(describeFailure(first, changes), plan);

  const keys: Record<string, string> = {};
  const auth = (result.data as any)?.auth ?? {};
  // A dry run's clients were rolled back: their keys do not exist.
  if (!options.dryRun)
    changes.forEach((item, i) => {
      if (item.kind === 'client' && item.change === 'create' && auth[`c${i}`]?.apiKey)
        keys[item.name] = auth[`c${i}`].apiKey;
    });
  return { plan, applied: changes.length > 0 && !options.dryRun, keys };
}

/** Name the file (and for a program, the line and column) behind a server-side refusal. */
function describeFailure(
  error: { message: string; path?: ReadonlyArray<string | number>; extensions?: Record<string, unknown> },
  changes: PlanItem[],
): string {
  const alias = [...(error.path ?? [])].reverse().find((p) => typeof p === 'string' && /^c\d+(_\d+)?$/.test(p)) as
    | string
    | undefined;
  // A refused variable names its change by number: $v3 (its input), $i3 (its id) or $s3_0_member (a step's).
  const variable = /^Variable "\$(?:[vi](\d+)|s(\d+)_)/.exec(error.message);
  const index = alias ? Number(/^c(\d+)/.exec(alias)![1]) : variable ? Number(variable[1] ?? variable[2]) : undefined;
  const item = index === undefined ? undefined : changes[index];
  const details = error.extensions?.details as { line?: number; column?: number } | undefined;
  const where = item
    ? `${item.file}${details?.line ? `:${details.line}${details.column ? `:${details.column}` : ''}` : ''}`
    : 'deploy';
  const code = typeof error.extensions?.code === 'string' ? ` [${error.extensions.code}]` : '';
  return `${where}: ${error.message}${code}\nnothing was applied`;
}
