import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES, ERRORS_DOC_COMMAND, errorCodesMarkdown } from '../../src/errors.js';

// docs/reference/errors.md is generated from ERROR_CODES: a code, a hint or a `when` changed in
// src/errors.ts without regenerating the file fails here.
const DOC = new URL('../../docs/reference/errors.md', import.meta.url);

describe('docs/reference/errors.md', () => {
  it('is what ERROR_CODES generates', () => {
    const written = readFileSync(DOC, 'utf8');
    expect(written === errorCodesMarkdown(), `docs/reference/errors.md is out of date: run ${ERRORS_DOC_COMMAND}`).toBe(
      true,
    );
  });

  it('lists every code once, with whether it is retryable and its default hint', () => {
    const rows = errorCodesMarkdown()
      .split('\n')
      .filter((line) => line.startsWith('| `'));
    expect(rows.map((row) => /^\| `([A-Z_]+)`/.exec(row)?.[1])).toEqual(Object.keys(ERROR_CODES));
    for (const [code, { retryable, hint }] of Object.entries(ERROR_CODES)) {
      const row = rows.find((r) => r.startsWith(`| \`${code}\` |`))!;
      expect(row, code).toContain(`| ${retryable ? 'yes' : 'no'} |`);
      expect(row, code).toContain(hint.replaceAll('|', '\\|'));
    }
  });
});
