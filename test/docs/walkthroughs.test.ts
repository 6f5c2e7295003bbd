import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

/**
 * The README's walkthrough and examples/bank/README.md, run as a reader runs them: every command of
 * their ```sh blocks, as written and in order, with bash, from a fresh copy of the repository (no
 * data/), against the `npm start` the walkthrough itself says to run. The only change is the ports:
 * the servers get a free one (PORT=0) and ":4000" in the commands becomes it; the bank's stand-in
 * payout provider gets a free one too, and ":4100" and "--port 4100" in the commands, and the
 * copy's examples/bank/tally.config.json, name it.
 *
 * A block that runs `npm start` is the server's terminal; the other blocks of a walkthrough are the
 * reader's second terminal, one bash session. Comment lines directly under a command (no blank line
 * between) are its output: after normalising times, dates, durations, API keys and ids the server
 * makes, they must appear in that order among the lines the command printed ("# …" skips lines).
 * Every command must exit 0, and one that prints a GraphQL response without shown output must have
 * no errors in it.
 */

const ROOT = join(import.meta.dirname, '..', '..');
const run = promisify(execFile);

interface Command {
  line: string;
  expected: string[];
}

interface Walkthrough {
  server: string;
  commands: Command[];
}

/** The ```sh blocks of `markdown` from `from` to the next heading of the same level (or the end). */
function readWalkthrough(markdown: string, from?: string): Walkthrough {
  let text = markdown;
  if (from !== undefined) {
    const start = markdown.indexOf(from);
    const end = markdown.indexOf('\n## ', start + from.length);
    text = markdown.slice(start, end === -1 ? undefined : end);
  }
  const blocks = [...text.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
  const servers = blocks.filter((block) => /^npm start\b/m.test(block));
  expect(servers, 'one block starts the server with npm start').toHaveLength(1);
  const commands: Command[] = [];
  for (const block of blocks.filter((b) => b !== servers[0])) {
    let previous: Command | null = null;
    for (const line of block.split('\n')) {
      if (line.trim() === '') previous = null;
      else if (line.startsWith('#')) previous?.expected.push(line.replace(/^# ?/, ''));
      else {
        expect(line.endsWith('\\'), `one command per line: ${line}`).toBe(false);
        previous = { line, expected: [] };
        commands.push(previous);
      }
    }
  }
  return { server: servers[0]!, commands };
}

/** A fresh clone, as far as the walkthroughs can tell: the repository's files, no data/ folder. */
function freshCopy(providerPort: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'tally-walkthroughs-'));
  for (const name of readdirSync(ROOT)) {
    if (['.git', 'data', 'scratch', '.prof', 'examples'].includes(name)) continue;
    symlinkSync(join(ROOT, name), join(dir, name));
  }
  cpSync(join(ROOT, 'examples'), join(dir, 'examples'), { recursive: true });
  const config = join(dir, 'examples', 'bank', 'tally.config.json');
  const text = readFileSync(config, 'utf8');
  expect(text, 'the bank names the payout provider at 127.0.0.1:4100').toContain('127.0.0.1:4100/');
  writeFileSync(config, text.replaceAll('127.0.0.1:4100/', `127.0.0.1:${providerPort}/`));
  return dir;
}

/** A port nothing listens on now (the stand-in payout provider's, in place of 4100). */
function freePort(): Promise<string> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(String(port)));
    });
  });
}

const READER_ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? tmpdir() };
const servers: ChildProcess[] = [];

afterAll(async () => {
  await Promise.all(servers.map(stop));
});

/** Run the server block in its own process group; resolves with the port it serves on. */
function startServer(dir: string, block: string): Promise<string> {
  const child = spawn('bash', ['-c', block], {
    cwd: dir,
    env: { ...READER_ENV, PORT: '0' },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  servers.push(child);
  let output = '';
  return new Promise<string>((resolve, reject) => {
    const read = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /serving .* at http:\/\/127\.0\.0\.1:(\d+)\/graphql/.exec(output);
      if (match) resolve(match[1]!);
    };
    child.stdout!.on('data', read);
    child.stderr!.on('data', read);
    child.once('exit', (code) => reject(new Error(`the server block exited (${code}) before serving:\n${output}`)));
  });
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  process.kill(-child.pid!, 'SIGTERM'); // npm, its shell and the server: the group this test started
  await exited;
}

/** The ports of one walkthrough: its server's (":4000" as written) and the payout provider's (":4100"). */
interface Ports {
  server: string;
  provider: string;
}

function normalise(text: string, ports: Ports): string {
  return (
    text
      .replaceAll(`:${ports.server}/`, ':4000/')
      .replaceAll(`:${ports.provider}/`, ':4100/')
      .replace(/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z/g, '<time>')
      .replace(/\d{4}-\d{2}-\d{2}/g, '<date>')
      .replace(/\btly_[A-Za-z0-9_-]+/g, 'tly_…')
      .replace(/\b\d+ ms\b/g, 'N ms')
      // Ids a reader copies look like c0000000-0000-4000-8000-000000000001; others are the server's.
      .replace(
        /\b(?![0-9a-f]{8}-0000-4000-8000-)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/g,
        '<id>',
      )
      .replace(/[ \t]+$/gm, '')
  );
}

/** Run the reader's commands in one bash session; returns each command's output and exit status. */
async function runCommands(
  dir: string,
  commands: Command[],
  ports: Ports,
): Promise<Array<{ output: string; status: number }>> {
  const script = ['exec 2>&1', 'set -o pipefail'];
  commands.forEach((command, i) => {
    script.push(
      `printf '\\n@@@ %d\\n' ${i}`,
      command.line.replace(
        /(:|--port )(4000|4100)\b/g,
        (_, before, port) => `${before}${port === '4000' ? ports.server : ports.provider}`,
      ),
      `printf '\\n@@@ status %d\\n' $?`,
    );
  });
  const { stdout } = await run('bash', ['-c', script.join('\n')], {
    cwd: dir,
    env: READER_ENV,
    maxBuffer: 16 * 1024 * 1024,
    timeout: 120_000,
  });
  return commands.map((_, i) => {
    const start = stdout.indexOf(`\n@@@ ${i}\n`) + `\n@@@ ${i}\n`.length;
    const end = stdout.indexOf('\n@@@ status ', start);
    return {
      output: stdout.slice(start, end),
      status: Number(/^\d+/.exec(stdout.slice(end + '\n@@@ status '.length))![0]),
    };
  });
}

/** Each command exits 0 and prints what the markdown shows under it. */
function checkOutputs(commands: Command[], results: Array<{ output: string; status: number }>, ports: Ports): void {
  commands.forEach((command, i) => {
    const { output, status } = results[i]!;
    const what = `command ${i + 1}: ${command.line}\nprinted:\n${output}`;
    expect(status, what).toBe(0);
    const lines = normalise(output, ports).split('\n');
    if (command.expected.length === 0) {
      if (output.trimStart().startsWith('{"')) expect(JSON.parse(output).errors, what).toBeUndefined();
      return;
    }
    let at = 0;
    for (const expected of command.expected.map((line) => normalise(line, ports))) {
      if (expected === '…') continue;
      const found = lines.indexOf(expected, at);
      expect(found, `${what}\nshould print, in this order, the line:\n${expected}`).toBeGreaterThanOrEqual(0);
      at = found + 1;
    }
  });
}

describe('the walkthroughs run as written, on a fresh copy, in order', () => {
  const readme = readWalkthrough(readFileSync(join(ROOT, 'README.md'), 'utf8'), '## A first walkthrough');
  const bank = readWalkthrough(readFileSync(join(ROOT, 'examples', 'bank', 'README.md'), 'utf8'));

  it('each walkthrough starts the server on its own database, and no command needs a tool a fresh machine lacks', () => {
    expect(readme.server).toMatch(/^export TALLY_DB=\.\/data\/walkthrough\.db\b/m);
    expect(bank.server).toMatch(/^export TALLY_DB=\.\/data\/bank\.db\b/m);
    for (const { line } of [...readme.commands, ...bank.commands]) expect(line).not.toMatch(/uuidgen|<[a-zA-Z ]+>/);
  });

  it("the README's walkthrough runs the CLI as the docs say (npx tally) and shows the overdraft guard refusing", () => {
    const cli = readme.commands.filter(({ line }) => /\btally\b/.test(line) && !/^q /.test(line));
    expect(cli.length).toBeGreaterThan(0);
    for (const { line } of cli) expect(line).toMatch(/^npx tally /);
    const shown = readme.commands.flatMap(({ expected }) => expected);
    expect(shown).toContain('"code":"BALANCE_VELOCITY_EXCEEDED"');
  });

  it("the README's walkthrough, then the bank's, answer what they show", async () => {
    const provider = await freePort();
    const dir = freshCopy(provider);
    // Both servers start at once (each walkthrough has its own database); the commands run in order.
    const [readmePort, bankPort] = await Promise.all([startServer(dir, readme.server), startServer(dir, bank.server)]);
    const readmePorts = { server: readmePort, provider };
    const bankPorts = { server: bankPort, provider };
    checkOutputs(readme.commands, await runCommands(dir, readme.commands, readmePorts), readmePorts);
    checkOutputs(bank.commands, await runCommands(dir, bank.commands, bankPorts), bankPorts);
  }, 120_000);
});
