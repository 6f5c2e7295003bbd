import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const RESOLVERS = join(import.meta.dirname, '..', '..', 'src', 'graphql', 'resolvers');

/**
 * The resolvers reach executions, sessions, approvals and deployed records through their facades
 * (src/execution/executions.ts, src/agents/sessions.ts, src/deploy/records.ts), as the ledger's
 * reach it through `ctx.ledger`: never through the statements those facades own, nor storage.
 */
describe('GraphQL resolvers and the facades', () => {
  const files = readdirSync(RESOLVERS).filter((name) => name.endsWith('.ts'));

  it('finds the resolvers', () => {
    expect(files).toContain('actions.ts');
    expect(files).toContain('deployments.ts');
  });

  it('no resolver runs the statements of executions, the queue, sessions or deployed records', () => {
    const found = files.flatMap((name) =>
      readFileSync(join(RESOLVERS, name), 'utf8')
        .split('\n')
        .map((line, i) => ({ at: `${name}:${i + 1}`, line }))
        .filter(({ line }) => /\bservices\.(st|queue|sessions|deployments)\b/.test(line))
        .map(({ at, line }) => `${at}: ${line.trim()}`),
    );
    expect(found).toEqual([]);
  });

  it('no resolver imports from src/storage', () => {
    const found = files.flatMap((name) =>
      readFileSync(join(RESOLVERS, name), 'utf8')
        .split('\n')
        .map((line, i) => ({ at: `${name}:${i + 1}`, line }))
        .filter(({ line }) => /from '(\.\.\/)+storage\//.test(line))
        .map(({ at, line }) => `${at}: ${line.trim()}`),
    );
    expect(found).toEqual([]);
  });
});
