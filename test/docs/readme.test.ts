import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../src/errors.js';
import { DEFAULT_LIMITS } from '../../src/limits.js';

const ROOT = join(import.meta.dirname, '..', '..');

// The README's walkthrough (and examples/bank's) is run as written by test/walkthroughs.test.ts.

describe('README tables', () => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const section = (title: string) =>
    readme.slice(readme.indexOf(`## ${title}`), readme.indexOf('\n## ', readme.indexOf(`## ${title}`) + 3));

  it('lists every limit the engine has', () => {
    const limits = section('Limits');
    const missing = Object.keys(DEFAULT_LIMITS).filter((name) => !limits.includes(`\`${name}\``));
    expect(missing).toEqual([]);
  });

  it('lists every error code the engine has', () => {
    const codes = section('Error codes');
    const missing = Object.keys(ERROR_CODES).filter((code) => !codes.includes(`\`${code}\``));
    expect(missing).toEqual([]);
  });
});
