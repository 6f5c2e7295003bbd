import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { FIXED_LIMITS, LIMITS, limitsMarkdown } from '../../src/limits.js';

const PATH = join(import.meta.dirname, '..', '..', 'docs', 'reference', 'limits.md');

describe('docs/reference/limits.md', () => {
  it('is what the table in src/limits.ts makes of it', () => {
    const written = readFileSync(PATH, 'utf8');
    const current = limitsMarkdown();
    if (written !== current) {
      expect.fail(
        'docs/reference/limits.md is out of date with src/limits.ts: run `npx tsx scripts/docs-limits.ts` and commit the file',
      );
    }
  });

  it('lists every limit with its default, and every fixed bound with its value', () => {
    const page = limitsMarkdown();
    for (const name of Object.keys(LIMITS)) expect(page, name).toMatch(new RegExp(`\\| \`${name}\` \\| [0-9]`));
    for (const name of Object.keys(FIXED_LIMITS)) expect(page, name).toMatch(new RegExp(`\\| \`${name}\` \\| [0-9]`));
    // The backend-specific default and bound.
    expect(page).toContain('| `toolTimeoutMsMax` | 750 on SQLite, 30 000 (30 s) on PostgreSQL |');
    expect(page).toMatch(/\| `entriesPerTransactionMax` \| 500 \|[^\n]*at most 1 024 on PostgreSQL/);
  });
});
