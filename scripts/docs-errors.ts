// Writes docs/reference/errors.md from ERROR_CODES (src/errors.ts): npx tsx scripts/docs-errors.ts
// test/core/errors.docs.test.ts fails when the file is not what this writes.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { errorCodesMarkdown } from '../src/errors.js';

const path = join(dirname(fileURLToPath(import.meta.url)), '..', 'docs', 'reference', 'errors.md');
mkdirSync(dirname(path), { recursive: true });
writeFileSync(path, errorCodesMarkdown());
console.log(`wrote ${path}`);
