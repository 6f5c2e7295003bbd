import type { ChildProcess } from 'node:child_process';

/** Resolves once a `tally worker` process says it runs (its signal handlers are installed from then on). */
export function running(child: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('running executions')) resolve();
    });
    child.once('exit', () => reject(new Error(`worker exited before running: ${out}`)));
  });
}

/** Resolves with the exit code once the process has exited (at once if it already has). */
export function exited(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode);
    else child.once('exit', (code) => resolve(code));
  });
}

/**
 * `tally serve --db <db> --port 0` as a child process, with `key` as its admin key; resolves once
 * it listens, with its GraphQL endpoint.
 */
export async function serveProcess(
  db: string,
  key: string,
  args: string[] = [],
): Promise<{ child: import('node:child_process').ChildProcess; endpoint: string; output: () => string }> {
  const { spawn } = await import('node:child_process');
  const { join } = await import('node:path');
  const bin = join(import.meta.dirname, '..', '..', 'bin', 'tally.mjs');
  const child = spawn(process.execPath, [bin, 'serve', '--db', db, '--port', '0', ...args], {
    env: { ...process.env, TALLY_ADMIN_KEY: key },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const endpoint = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const match = /at (http:\/\/[^\s]+\/graphql)/.exec(output);
      if (match) resolve(match[1]!);
    });
    child.once('exit', () => reject(new Error(`serve exited: ${output}`)));
  });
  return { child, endpoint, output: () => output };
}
