/**
 * Writes docs/reference/limits.md from the table in src/limits.ts:
 *   npx tsx scripts/docs-limits.ts
 * test/core/limits.docs.test.ts fails while the file differs from what this would write.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { limitsMarkdown } from '../src/limits.js';

const path = join(import.meta.dirname, '..', 'docs', 'reference', 'limits.md');
writeFileSync(path, limitsMarkdown());
console.log(`wrote ${path}`);
