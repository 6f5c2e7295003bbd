#!/usr/bin/env node
// The reference ledger's published example suites, run against this checkout (they live beside it,
// in ../shared, and are never copied in). Prints the score on every run and fails when a step fails
// with --relaxed-errors (error responses compared by path, code and exception), or when a step that
// expects data (not an error) fails strictly. TALLY_REFERENCE_SUITES names the runner elsewhere.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const project = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const runner = process.env.TALLY_REFERENCE_SUITES ?? resolve(project, '..', 'shared', 'tools', 'reference-suites.mjs');
if (!existsSync(runner)) {
  console.log(`reference suites: runner not found at ${runner}; skipped (set TALLY_REFERENCE_SUITES to run them)`);
  process.exit(0);
}
const suites = join(dirname(runner), '..', 'reference', 'twisp-suites', 'example-suites');

function run(args) {
  const out = spawnSync(process.execPath, [runner, '--project', project, ...args], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  const text = `${out.stdout ?? ''}${out.stderr ?? ''}`;
  const failed = [...text.matchAll(/^FAIL (\S+)/gm)].map((m) => m[1]);
  const score = /(\d+) passed, (\d+) failed/.exec(text);
  return { text, failed, passed: score ? Number(score[1]) : 0, total: score ? Number(score[1]) + Number(score[2]) : 0, status: out.status };
}

/** Run both ways and print the score; whether it passes (every step relaxed, every data step strictly). */
function score(label, extra) {
  const relaxed = run(['--relaxed-errors', ...extra]);
  const strict = run(extra);
  const strictDataFailures = strict.failed.filter(expectsData);
  console.log(`reference suites${label}: ${relaxed.passed}/${relaxed.total} with --relaxed-errors; ${strict.passed}/${strict.total} strict` +
    ` (${strict.failed.length - strictDataFailures.length} strict failures are error steps compared by message text)`);
  if (relaxed.total === 0 || relaxed.failed.length > 0 || strictDataFailures.length > 0) {
    console.log(relaxed.text);
    if (strictDataFailures.length > 0) console.log(`steps expecting data that fail strictly: ${strictDataFailures.join(', ')}`);
    return { ok: false, strict };
  }
  return { ok: true, strict };
}

const expectsData = (step) => {
  const file = join(suites, step, 'response.json');
  return existsSync(file) && !('errors' in JSON.parse(readFileSync(file, 'utf8')));
};
const sqlite = score('', []);
// The same suites with the server on PostgreSQL (issue 19), when CI names a server: the same result.
let postgres = { ok: true, strict: sqlite.strict };
if (process.env.TALLY_TEST_PG_URL) {
  postgres = score(' on PostgreSQL', ['--project', join(project, '.ci', 'postgres-project')]);
  if (postgres.ok && postgres.strict.failed.join() !== sqlite.strict.failed.join()) {
    console.log(`the strict results differ: SQLite fails ${sqlite.strict.failed.join(', ')}; PostgreSQL fails ${postgres.strict.failed.join(', ')}`);
    postgres.ok = false;
  }
}
if (!sqlite.ok || !postgres.ok) process.exit(1);
