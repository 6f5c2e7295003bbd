#!/usr/bin/env node
// Run a command with a CPU hog beside it: another process that keeps one core busy for as long as
// the command runs (issue 34: the test suite must hold on a busy machine, not only a quiet one).
//
//   node scripts/with-hog.mjs npx vitest run test/server/serve.load.test.ts
//   npm run test:hog                 (the timing-sensitive test files, as CI runs them)
//   npm run test:hog -- npm test     (the whole suite)
//
// Exits with the command's exit code; the hog is killed whatever happens.
import { spawn } from 'node:child_process';

const command = process.argv.slice(2);
if (command.length === 0) {
  process.stderr.write('usage: node scripts/with-hog.mjs <command> [args...]\n');
  process.exit(2);
}
const hog = spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' });
const stopHog = () => hog.kill('SIGKILL');
process.on('exit', stopHog);
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(130));
const started = Date.now();
// TALLY_CPU_HOG tells a test that brings a hog of its own (test/server/serve.load.test.ts) that one runs.
const child = spawn(command[0], command.slice(1), { stdio: 'inherit', env: { ...process.env, TALLY_CPU_HOG: '1' } });
child.on('exit', (code, signal) => {
  stopHog();
  process.stderr.write(
    `with-hog: ${command.join(' ')} took ${((Date.now() - started) / 1000).toFixed(1)} s beside a CPU hog\n`,
  );
  process.exit(code ?? (signal ? 1 : 0));
});
