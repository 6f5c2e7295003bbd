import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../src/errors.js';
import { DEFAULT_LIMITS } from '../../src/limits.js';

const ROOT = join(import.meta.dirname, '..', '..');

// The README's walkthrough (and examples/bank's) is run as written by test/docs/walkthroughs.test.ts.

/** The reference pages other parts of the build write: a link to one counts before it exists. */
const GENERATED = ['docs/reference/limits.md', 'docs/reference/errors.md', 'docs/reference/mutation-checks.md'];

describe('the reference lists', () => {
  it('docs/reference/limits.md lists every limit the engine has', () => {
    const limits = readFileSync(join(ROOT, 'docs', 'reference', 'limits.md'), 'utf8');
    const missing = Object.keys(DEFAULT_LIMITS).filter((name) => !limits.includes(`\`${name}\``));
    expect(missing).toEqual([]);
  });

  it('docs/reference/errors.md lists every error code the engine has', () => {
    const codes = readFileSync(join(ROOT, 'docs', 'reference', 'errors.md'), 'utf8');
    const missing = Object.keys(ERROR_CODES).filter((code) => !codes.includes(`\`${code}\``));
    expect(missing).toEqual([]);
  });
});

/** Every markdown file under docs/, as paths relative to the repository. */
function docsPages(dir = join(ROOT, 'docs')): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return docsPages(path);
    return name.endsWith('.md') ? [relative(ROOT, path)] : [];
  });
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M} _-]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors a markdown page has: one per heading (a repeated one gets -1, -2, … as on GitHub). */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  const text = markdown.replace(/^```[\s\S]*?^```/gm, '');
  for (const [, heading] of text.matchAll(/^#{1,6} (.+)$/gm)) {
    const base = slug(heading!);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    result.add(count === 0 ? base : `${base}-${count}`);
  }
  return result;
}

/** The relative links of a markdown page (outside code blocks and code spans): [text](target). */
function relativeLinks(markdown: string): string[] {
  const text = markdown.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)]
    .map((m) => m[1]!)
    .filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target));
}

describe('README and docs', () => {
  it('the README is a front page: at most 260 lines', () => {
    const lines = readFileSync(join(ROOT, 'README.md'), 'utf8').trimEnd().split('\n');
    expect(lines.length).toBeLessThanOrEqual(260);
  });

  it('every relative link in README.md and docs/ leads to a file there, and to a heading of it', () => {
    const pages = ['README.md', ...docsPages()];
    expect(pages.length).toBeGreaterThan(8);
    const broken: string[] = [];
    for (const page of pages) {
      const markdown = readFileSync(join(ROOT, page), 'utf8');
      const links = relativeLinks(markdown);
      for (const link of links) {
        const [path, anchor] = link.split('#') as [string, string | undefined];
        const target = path === '' ? page : relative(ROOT, resolve(dirname(join(ROOT, page)), path));
        if (target.startsWith('..')) {
          broken.push(`${page}: ${link} (outside the repository)`);
          continue;
        }
        if (GENERATED.includes(target) && !existsSync(join(ROOT, target))) continue;
        if (!existsSync(join(ROOT, target))) {
          broken.push(`${page}: ${link} (no file ${target})`);
          continue;
        }
        if (anchor !== undefined && target.endsWith('.md')) {
          if (!anchors(readFileSync(join(ROOT, target), 'utf8')).has(anchor))
            broken.push(`${page}: ${link} (no heading #${anchor} in ${target})`);
        }
      }
    }
    expect(broken).toEqual([]);
  });

  it('every command a page shows runs the CLI one way: npx tally, from the repository', () => {
    const other: string[] = [];
    for (const page of ['README.md', ...docsPages()]) {
      const markdown = readFileSync(join(ROOT, page), 'utf8');
      for (const [, block] of markdown.matchAll(/^```(?:sh|bash|shell)\n([\s\S]*?)^```/gm)) {
        for (const line of block!.split('\n')) {
          if (/^\s*#/.test(line)) continue;
          if (/(^|[;&|(]\s*)(tally|node\s+\S*bin\/tally\.mjs)\s/.test(line)) other.push(`${page}: ${line}`);
        }
      }
    }
    expect(other).toEqual([]);
  });

  it('the link check reads links outside code, and headings as GitHub anchors them', () => {
    expect(relativeLinks('see [a](x.md#y), `[b](c.md)`, [d](https://e.f)')).toEqual(['x.md#y']);
    expect(anchors('# The ledger\n## Posting, money and balances\n## Velocity controls\n## Velocity controls')).toEqual(
      new Set(['the-ledger', 'posting-money-and-balances', 'velocity-controls', 'velocity-controls-1']),
    );
    expect(slug('Many clients at once: group commit, reads beside writes, durability')).toBe(
      'many-clients-at-once-group-commit-reads-beside-writes-durability',
    );
    expect(slug('A project folder, and `tally deploy`')).toBe('a-project-folder-and-tally-deploy');
  });
});
