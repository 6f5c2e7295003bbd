import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { onlyArg } from './args.js';
import { openTarget } from './connect.js';
import { EXIT, OperationError } from './errors.js';
import { type Io, type Options, progress } from './io.js';

/*
 * tally deploy: read the project, plan against the target, apply in one transaction (or check and
 * roll back with --dry-run), and print the plan.
 */

export async function deployCommand(args: string[], options: Options, io: Io): Promise<number> {
  const dir = resolve(onlyArg(args, 'project folder') ?? '.');
  const { deploy, DeployError, formatPlan } = await import('../deploy/deploy.js');
  const { ProjectError, readProject } = await import('../deploy/project.js');
  let project;
  try {
    project = readProject(dir);
  } catch (error) {
    if (error instanceof ProjectError) throw new OperationError(error.message, 'BAD_REQUEST');
    throw error;
  }
  // A dry run against a database that does not exist yet checks against an empty one, in memory,
  // and leaves no file behind.
  const dryRun = options['dry-run'] === true;
  const overwriteRuntimeChanges = options['overwrite-runtime-changes'] === true;
  const fresh = options.db !== undefined && !existsSync(String(options.db));
  const target = await openTarget(dryRun && fresh ? { ...options, db: ':memory:' } : options, io, project.server, true);
  const bar = progress(io, 'planning');
  try {
    const result = await deploy(project, target, { dryRun, overwriteRuntimeChanges, onProgress: bar.update });
    bar.done();
    if (options.json)
      io.out(
        `${JSON.stringify({ applied: result.applied, plan: result.plan.map(({ kind, name, change, version, drift }) => ({ kind, name, change, version, ...(drift ? { drift } : {}) })), keys: result.keys }, null, 2)}\n`,
      );
    else {
      io.out(`${formatPlan(result.plan)}\n`);
      const changes = result.plan.filter((p) => p.change !== 'unchanged').length;
      io.out(
        changes === 0
          ? 'nothing to do\n'
          : result.applied
            ? `applied ${changes} change(s) to ${target.describe} in one transaction\n`
            : `dry run: ${changes} change(s) checked and rolled back\n`,
      );
      for (const [principal, key] of Object.entries(result.keys))
        io.out(`API key of client ${principal} (shown once): ${key}\n`);
    }
    return EXIT.ok;
  } catch (error) {
    bar.done();
    // A refused plan is shown whole: what would have been done, and each conflict under its record.
    if (error instanceof DeployError && error.code === 'CONFLICT' && !options.json)
      io.out(`${formatPlan(error.plan)}\n`);
    if (error instanceof DeployError) throw new OperationError(error.message, error.code ?? 'FAILED', error.hint);
    if (error instanceof ProjectError) throw new OperationError(error.message);
    throw error;
  } finally {
    await target.close();
  }
}
