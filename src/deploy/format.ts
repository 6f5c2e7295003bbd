import { type Drift, shown } from './drift.js';
import type { PlanItem } from './plan-item.js';

/*
 * A plan as `tally deploy` prints it: one line per item, then what the deploy does with each field
 * changed at runtime since the last deploy.
 */

/** Render a plan the way `tally deploy` prints it: each item, then what it does with fields changed at runtime. */
export function formatPlan(plan: PlanItem[]): string {
  return plan
    .flatMap((item) => {
      const what = `${item.kind} ${item.name}`;
      const detail = item.detail ? ` (${item.detail})` : '';
      let line: string;
      if (item.change === 'create') line = `+ create ${what}${item.version ? ` (version ${item.version})` : detail}`;
      else if (item.change === 'update')
        line = item.version ? `~ new version ${item.version} of ${what}` : `~ update ${what}${detail}`;
      else if (item.change === 'remove') line = `- remove ${what}`;
      else line = `= ${what}${item.version ? ` (version ${item.version})` : ''} unchanged`;
      return [line, ...formatDrift(item, what)];
    })
    .join('\n');
}

/**
 * The lines under an item: `! conflict`, `! overwrite` and `! keep` for each field it declares that
 * changed at runtime, then one line for what it keeps that the files do not declare.
 */
export function formatDrift(item: PlanItem, what = `${item.kind} ${item.name}`): string[] {
  const lines: string[] = [];
  const drift = item.drift ?? [];
  const value = (d: Drift, v: unknown) => (d.field === 'version' && typeof v === 'string' ? v : shown(v));
  const deployed = (d: Drift) =>
    d.deployed === undefined ? 'never (no deploy of it is recorded)' : value(d, d.deployed);
  for (const d of drift) {
    const values = `deployed ${deployed(d)}, now ${value(d, d.now)}`;
    if (d.outcome === 'conflict') lines.push(`! conflict ${what} ${d.field}: ${values}, file ${value(d, d.file)}`);
    else if (d.outcome === 'overwrite')
      lines.push(
        `! overwrite ${what} ${d.field}: ${values}, file ${value(d, d.file)} (the file wins: --overwrite-runtime-changes)`,
      );
    else if (d.outcome === 'keep')
      lines.push(
        `! keep ${what} ${d.field}: ${values}; changed at runtime, the file still says ${value(d, d.file)} (--overwrite-runtime-changes restores it)`,
      );
    else if (d.outcome === 'release')
      lines.push(`! keep ${what} ${d.field}: ${values}; changed at runtime, no longer in ${item.file}`);
  }
  const kept = drift.filter((d) => d.outcome === 'undeclared');
  if (kept.length > 0) {
    const list = kept.map((d) => `${d.field} ${d.now === undefined ? '(removed)' : shown(d.now)}`).join(', ');
    lines.push(`  keeps ${list}: written since the last deploy, not declared in ${item.file}`);
  }
  return lines;
}
