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
