import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../src/errors.js';
import { DEFAULT_LIMITS } from '../src/limits.js';

const ROOT = join(import.meta.dirname, '..');

/** The README's curl walkthrough, run as written against `tally serve` (on a free port). */
describe('README walkthrough', () => {
  it('works as written: every step answers what the README says', async () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('## A first walkthrough (curl)'));
    const blocks = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
    const key = /export TALLY_ADMIN_KEY=(\S+)/.exec(blocks[0]!)![1]!;
    const script = blocks[1]!;
    const db = join(mkdtempSync(join(tmpdir(), 'tally-readme-')), 'readme.db');
    const child = spawn(process.execPath, [join(ROOT, 'bin', 'tally.mjs'), 'serve', '--db', db, '--port', '0'], {
      env: { ...process.env, TALLY_ADMIN_KEY: key },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      let output = '';
      const port = await new Promise<string>((resolve, reject) => {
        child.stdout.on('data', (chunk: Buffer) => {
          output += chunk.toString();
          const match = /127\.0\.0\.1:(\d+)\/graphql/.exec(output);
          if (match) resolve(match[1]!);
        });
        child.once('exit', () => reject(new Error(output)));
      });
      const lines = execFileSync('bash', ['-c', script.replaceAll('localhost:4000', `localhost:${port}`)], { encoding: 'utf8' }).trim().split('\n');
      const expected = [...script.matchAll(/^# (\{"data".*)$/gm)].map((m) => m[1]!);
      expect(lines).toHaveLength(6);
      for (const line of lines) expect(JSON.parse(line).errors).toBeUndefined();
      // Each "# {...}" line in the README is the answer to the request just above it.
      expect(expected).toEqual([lines[3], lines[5]]);
    } finally {
      child.kill('SIGTERM');
    }
  }, 60_000);
});

describe('README tables', () => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const section = (title: string) => readme.slice(readme.indexOf(`## ${title}`), readme.indexOf('\n## ', readme.indexOf(`## ${title}`) + 3));

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
