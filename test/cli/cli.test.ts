import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMMANDS } from '../../src/cli/usage.js';

/**
 * The CLI as a person meets it: `node bin/tally.mjs` in a child process, in a fresh folder, against
 * one shared server (started here on a fresh database) or fresh databases of its own.
 */
const ROOT = join(import.meta.dirname, '..', '..');
const BIN = join(ROOT, 'bin', 'tally.mjs');
const BANK = join(ROOT, 'examples', 'bank');
const ADMIN_KEY = 'tly_cli-test-admin-key';
const ALICE = 'b0000000-0000-4000-8000-000000000011';
const id = (n: number) => `c0000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

/** The environment of a person who has set nothing Tally reads. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of ['TALLY_SERVER', 'TALLY_API_KEY', 'TALLY_ADMIN_KEY', 'TALLY_DB', 'PORT', 'HOST']) delete env[name];
  return { ...env, ...extra };
}

interface Run {
  status: number | null;
  out: string;
  err: string;
}

function tally(
  args: string[],
  options: { cwd?: string; env?: Record<string, string>; stdin?: string } = {},
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: options.cwd ?? scratch,
      env: cleanEnv(options.env),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.stdin.end(options.stdin ?? '');
    child.once('error', reject);
    child.once('close', (status) => resolve({ status, out, err }));
  });
}

/** `tally serve`, resolved with the child and its port once it prints that it serves, or with how it exited. */
function serve(
  args: string[],
  env: Record<string, string>,
): Promise<{
  child: ChildProcessWithoutNullStreams;
  port: number | null;
  status: number | null;
  out: string;
  err: string;
}> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, 'serve', ...args], { cwd: scratch, env: cleanEnv(env) });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /serving .* at http:\/\/127\.0\.0\.1:(\d+)\/graphql/.exec(out);
      if (match) resolve({ child, port: Number(match[1]), status: null, out, err });
    });
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.once('exit', (status) => resolve({ child, port: null, status, out, err }));
  });
}

async function stop(child: ChildProcessWithoutNullStreams): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}

let scratch: string;
let project: string;
let server: Awaited<ReturnType<typeof serve>>;
/** Commands run in the project folder, as a person with TALLY_API_KEY set would: the server comes from tally.json. */
const inProject = (...args: string[]) => tally(args, { cwd: project, env: { TALLY_API_KEY: ADMIN_KEY } });

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'tally-cli-'));
  project = join(scratch, 'bank');
  cpSync(BANK, project, { recursive: true });
  // A tool with a typo: it logs, then fails with a ReferenceError (a stack, a hint).
  writeFileSync(
    join(project, 'tools', 'broken.js'),
    'function run(event) {\n  console.log(`about to fail on ${event.data.note}`);\n  return { value: availble };\n}\n',
  );
  writeFileSync(
    join(project, 'tools', 'broken.json'),
    JSON.stringify({
      actionId: 'b0000000-0000-4000-8000-0000000000f1',
      description: 'Fails, as a typo would.',
      inputSchema: { type: 'object' },
    }),
  );
  // A tool that fails in a way that can pass, so a started run of it is retried (twice in all, at once).
  writeFileSync(
    join(project, 'tools', 'flaky.js'),
    'function run(event) {\n  console.log(`try ${event.data.n}`);\n  fail("the bank did not answer", "Try again later.", { retry: true });\n}\n',
  );
  writeFileSync(
    join(project, 'tools', 'flaky.json'),
    JSON.stringify({
      actionId: 'b0000000-0000-4000-8000-0000000000f2',
      description: 'Fails, retryably.',
      inputSchema: { type: 'object' },
      execution: { maxAttempts: 2, backoff: { initialMs: 1, multiplier: 1, maxMs: 10 } },
    }),
  );
  server = await serve(['--db', join(scratch, 'shared.db'), '--port', '0'], { TALLY_ADMIN_KEY: ADMIN_KEY });
  expect(server.port, server.err).not.toBeNull();
  writeFileSync(
    join(project, 'tally.json'),
    JSON.stringify({ name: 'bank', server: `http://127.0.0.1:${server.port}/graphql` }),
  );
  const deployed = await inProject('deploy', '--json');
  expect(deployed.status, `${deployed.err}${deployed.out}`).toBe(0);
  expect(JSON.parse(deployed.out).applied).toBe(true);
}, 60_000);

afterAll(async () => {
  if (server?.child) await stop(server.child);
});

describe('help and version', () => {
  it('every command answers --help with its usage and at least one example, exit 0', async () => {
    const names = Object.keys(COMMANDS);
    const runs = await Promise.all(names.map((name) => tally([name, '--help'])));
    names.forEach((name, i) => {
      const run = runs[i]!;
      expect(run.status, `${name} --help`).toBe(0);
      expect(run.out.startsWith(`usage: tally ${name} `), run.out).toBe(true);
      expect(run.out).toMatch(new RegExp(`\\nexamples:\\n  tally ${name}\\b`));
      expect(run.err).toBe('');
    });
  });

  it("tally --help lists every command; tally help <command> is <command> --help; --version is package.json's", async () => {
    const [help, helpInvoke, version, none] = await Promise.all([
      tally(['--help']),
      tally(['help', 'invoke']),
      tally(['--version']),
      tally([]),
    ]);
    expect(help.status).toBe(0);
    for (const name of Object.keys(COMMANDS)) expect(help.out).toMatch(new RegExp(`^  ${name} `, 'm'));
    expect(helpInvoke).toMatchObject({
      status: 0,
      out: expect.stringContaining('usage: tally invoke <tool> --input JSON|@file'),
    });
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    expect(version).toMatchObject({ status: 0, out: `tally ${pkg.version}\n` });
    // No command at all is a usage error: the list goes to stderr.
    expect(none).toMatchObject({ status: 2, out: '', err: expect.stringContaining('usage: tally <command>') });
  });
});

describe('usage errors', () => {
  // One wrong use of each command: exit 2, the message, then that command's usage only.
  const cases: Array<[string, string[], string]> = [
    ['serve', ['serve', '--port', 'abc'], '--port "abc" is not a port number (0 to 65535)'],
    ['worker', ['worker', 'extra'], 'unexpected argument "extra"'],
    ['migrate', ['migrate', '--bogus'], 'unknown option --bogus'],
    ['deploy', ['deploy', 'a', 'b'], 'one project folder, got 2: "a" "b"'],
    ['invoke', ['invoke'], 'say which tool'],
    ['start', ['start', 'transfer', '--input', '{'], '--input is not valid JSON'],
    [
      'executions',
      ['executions', '--status', 'BOGUS'],
      '--status "BOGUS" is not one of QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED',
    ],
    ['execution', ['execution', 'abc'], 'execution id "abc" is not a UUID'],
    ['chat', ['chat'], 'say which agent (or --session ID to resume a session)'],
    [
      'approvals',
      ['approvals', '--status', 'BOGUS'],
      '--status "BOGUS" is not one of PENDING, APPROVED, REJECTED, EXPIRED, CANCELLED or ALL',
    ],
    ['approve', ['approve', 'abc'], 'approval id "abc" is not a UUID'],
    ['reject', ['reject'], 'say which approval id'],
    ['accounts', ['accounts', '--limit', '0'], '--limit must be a positive integer, got "0"'],
    ['balance', ['balance'], 'say which account'],
    ['transactions', ['transactions', '--account'], '--account needs a value'],
    ['post', ['post', 'DEPOSIT', '--param', 'amount'], '--param "amount" is not name=value'],
    ['void', ['void', 'nope'], 'transaction id "nope" is not a UUID'],
    ['gql', ['gql'], 'say which document'],
    ['import', ['import'], 'say which CSV file'],
    ['mcp', ['mcp'], 'give --db PATH --as PRINCIPAL, or --server URL --key KEY'],
  ];

  it('cover every command', () => {
    expect(cases.map(([name]) => name).sort()).toEqual(Object.keys(COMMANDS).sort());
  });

  it("print the message and that command's usage, exit 2", async () => {
    const runs = await Promise.all(cases.map(([, args]) => tally(args)));
    cases.forEach(([name, , message], i) => {
      const run = runs[i]!;
      const lines = run.err.trimEnd().split('\n');
      expect(run.status, run.err).toBe(2);
      expect(lines[0]!.startsWith(`tally: ${message}`), lines[0]).toBe(true);
      expect(lines[1]!.startsWith(`usage: tally ${name} `)).toBe(true);
      expect(lines.filter((l) => l.startsWith('usage: '))).toHaveLength(1);
      expect(lines.at(-1)).toBe(`(tally ${name} --help for more, with examples)`);
      expect(lines.length).toBeLessThanOrEqual(10);
      expect(run.out).toBe('');
    });
  });

  it('invoke without --input is a usage error, and runs nothing', async () => {
    const run = await inProject('invoke', 'transfer');
    expect(run.status).toBe(2);
    expect(run.err.split('\n')[0]).toBe("tally: --input is required (--input '{}' for a tool that takes no input)");
    const executions = JSON.parse((await inProject('executions', '--action', 'transfer', '--json')).out);
    expect(executions.executions).toEqual([]);
  });

  it("--key with --db is refused (the file runs with the engine's own authority), and mcp --as checks the principal exists", async () => {
    const db = join(mkdtempSync(join(scratch, 'keyed-')), 'keyed.db');
    expect((await tally(['migrate', '--db', db])).status).toBe(0);
    const keyed = await tally(['accounts', '--db', db, '--key', 'tly_some-client-key']);
    expect(keyed.status).toBe(2);
    expect(keyed.err.split('\n')[0]).toBe(
      'tally: --key applies to --server: with --db the command runs as the engine itself (whoever holds the database file may do anything)',
    );
    const stranger = await tally(['mcp', '--db', db, '--as', 'nobody_here']);
    expect(stranger.status).toBe(1);
    expect(stranger.err).toContain('no client has principal "nobody_here"');
    expect(stranger.out).toBe('');
  });

  it('an unknown command names itself and points at --help', async () => {
    const run = await tally(['bogus']);
    expect(run).toMatchObject({ status: 2, err: 'tally: unknown command "bogus"\ntally --help lists the commands\n' });
  });
});

describe('--json errors', () => {
  it('are one JSON object on stdout: {"error": {code, message, hint}}', async () => {
    const [usage, notFound, noDb] = await Promise.all([
      inProject('invoke', 'transfer', '--json'),
      inProject('balance', 'nobody', '--json'),
      tally(['accounts', '--db', join(scratch, 'typo.db'), '--json']),
    ]);
    expect(usage.status).toBe(2);
    expect(JSON.parse(usage.out)).toEqual({
      error: {
        code: 'USAGE',
        message: "--input is required (--input '{}' for a tool that takes no input)",
        hint: 'tally invoke --help shows its options and examples',
      },
    });
    expect(notFound.status).toBe(1);
    expect(JSON.parse(notFound.out).error).toMatchObject({
      code: 'NOT_FOUND',
      message: expect.stringContaining('nobody'),
      hint: expect.any(String),
    });
    expect(noDb.status).toBe(1);
    expect(JSON.parse(noDb.out).error).toMatchObject({
      code: 'NOT_FOUND',
      message: `no database at ${JSON.stringify(join(scratch, 'typo.db'))}`,
    });
    expect(existsSync(join(scratch, 'typo.db'))).toBe(false);
    for (const run of [usage, notFound, noDb]) expect(run.err).toBe('');
  });
});

describe('where the server is', () => {
  it('comes from tally.json in the current folder, or --project DIR; with neither, the usage says how', async () => {
    const [here, elsewhere, nowhere, badProject] = await Promise.all([
      inProject('balance', 'alice', '--json'),
      tally(['balance', 'alice', '--project', project, '--json'], { env: { TALLY_API_KEY: ADMIN_KEY } }),
      tally(['balance', 'alice'], { env: { TALLY_API_KEY: ADMIN_KEY } }),
      tally(['balance', 'alice', '--project', scratch]),
    ]);
    expect(here.status, here.err).toBe(0);
    expect(JSON.parse(here.out)).toMatchObject({ account: 'alice', currency: 'USD' });
    expect(elsewhere.status, elsewhere.err).toBe(0);
    expect(nowhere.status).toBe(2);
    expect(nowhere.err).toContain('tally.json');
    expect(badProject).toMatchObject({
      status: 2,
      err: expect.stringContaining(`--project ${JSON.stringify(scratch)}: there is no tally.json in that folder`),
    });
  });
});

describe('ledger verbs', () => {
  it('post, accounts with balances, transactions, void, each against the server of tally.json', async () => {
    const posted = await inProject(
      'post',
      'DEPOSIT',
      '--param',
      `account=${ALICE}`,
      '--param',
      'amount=100',
      '--transaction-id',
      id(1),
    );
    expect(posted.status, posted.err).toBe(0);
    expect(posted.out).toMatch(new RegExp(`^posted ${id(1)} DEPOSIT@1 effective \\d{4}-\\d\\d-\\d\\d`));
    expect(posted.out).toMatch(/CREDIT +alice +100 USD SETTLED/);
    const [again, accounts, accountsJsonRun, transactions] = await Promise.all([
      // The same id and params again is the same transaction (the id is the idempotency key).
      inProject(
        'post',
        'DEPOSIT',
        '--param',
        `account=${ALICE}`,
        '--param',
        'amount=100',
        '--transaction-id',
        id(1),
        '--json',
      ),
      inProject('accounts'),
      inProject('accounts', '--json'),
      inProject('transactions', '--account', 'alice'),
    ]);
    expect(JSON.parse(again.out).transactionId).toBe(id(1));
    expect(accounts.status, accounts.err).toBe(0);
    expect(accounts.out.split('\n')[0]).toMatch(/^code +accountId +status +normal +settled USD +available +name$/);
    expect(accounts.out).toMatch(new RegExp(`^alice +${ALICE} +ACTIVE +CREDIT +100 +100 +Alice`, 'm'));
    const accountsJson = JSON.parse(accountsJsonRun.out) as Array<Record<string, string>>;
    expect(accountsJson.find((a) => a.code === 'alice')).toMatchObject({
      accountId: ALICE,
      currency: 'USD',
      settled: '100',
      available: '100',
    });
    expect(transactions.status, transactions.err).toBe(0);
    expect(transactions.out).toMatch(new RegExp(`${id(1)}  DEPOSIT@1 +CREDIT +100 USD SETTLED`));

    const voided = await inProject('void', id(1));
    expect(voided.status, voided.err).toBe(0);
    expect(voided.out).toMatch(new RegExp(`^voided ${id(1)}: its entries are reversed by [0-9a-f-]{36}\\n$`));
    const [allRun, balanceRun] = await Promise.all([
      inProject('transactions', '--json'),
      inProject('balance', 'alice', '--json'),
    ]);
    const all = JSON.parse(allRun.out) as Array<Record<string, any>>;
    expect(all.find((t) => t.transactionId === id(1))).toMatchObject({ voidedBy: expect.any(String) });
    expect(all.find((t) => t.voidOf === id(1))).toBeDefined();
    const balance = JSON.parse(balanceRun.out);
    expect(balance.settled.normalBalance.units).toBe('0');
  });

  it('gql runs a document from a file (variables as JSON or @file) or from stdin; a failing one exits 1', async () => {
    writeFileSync(join(project, 'q.graphql'), 'query($code: String) { account(code: $code) { accountId } }');
    writeFileSync(join(project, 'vars.json'), '{"code": "alice"}');
    const [fromFile, fromVarsFile, fromStdin, failing, missing] = await Promise.all([
      inProject('gql', 'q.graphql', '--variables', '{"code": "alice"}'),
      inProject('gql', 'q.graphql', '--variables', '@vars.json'),
      tally(['gql', '-'], { cwd: project, env: { TALLY_API_KEY: ADMIN_KEY }, stdin: '{ journal { name } }' }),
      inProject('gql', 'q.graphql', '--variables', '{"code": "nobody"}'),
      inProject('gql', 'nothing.graphql'),
    ]);
    expect(fromFile.status, fromFile.err).toBe(0);
    expect(JSON.parse(fromFile.out)).toEqual({ data: { account: { accountId: ALICE } } });
    expect(JSON.parse(fromVarsFile.out)).toEqual({ data: { account: { accountId: ALICE } } });
    expect(fromStdin.status, fromStdin.err).toBe(0);
    expect(JSON.parse(fromStdin.out).data.journal.name).toEqual(expect.any(String));
    expect(failing.status).toBe(1);
    expect(JSON.parse(failing.out).errors[0].extensions.code).toBe('NOT_FOUND');
    expect(missing).toMatchObject({
      status: 1,
      err: expect.stringContaining('document "nothing.graphql": no such file'),
    });
  });
});

describe('deploy keeps what the running system wrote (issue 34)', () => {
  it('deploy, lock Alice, deploy again: the plan says what it keeps; a conflict exits 1 with nothing written, a mistyped flag is a usage error, --overwrite-runtime-changes lets the file win', async () => {
    const dir = join(mkdtempSync(join(scratch, 'redeploy-')), 'bank');
    cpSync(BANK, dir, { recursive: true });
    const db = join(dir, '..', 'bank.db');
    const run = (...args: string[]) => tally(args, { cwd: dir });
    const gql = (document: string, variables: unknown = {}) =>
      tally(['gql', '-', '--db', db, '--variables', JSON.stringify(variables)], { cwd: dir, stdin: document });
    const alice = async () =>
      JSON.parse((await gql(`{ account(id: "${ALICE}") { status metadata } }`)).out).data.account;
    expect((await run('deploy', '.', '--db', db)).status).toBe(0);
    const locked = await run(
      'invoke',
      'lock_account',
      '--db',
      db,
      '--input',
      JSON.stringify({ account_id: ALICE, reason: 'Card reported stolen' }),
    );
    expect(locked.status, locked.err).toBe(0);
    const CASE = { note: 'Card reported stolen', opened_by: 'system' };

    const again = await run('deploy', '.', '--db', db);
    expect(again.status, again.err).toBe(0);
    expect(again.out).toContain(
      `= account alice unchanged\n  keeps metadata.case ${JSON.stringify(CASE)}, status "LOCKED": written since the last deploy, not declared in accounts.json\n`,
    );
    expect(await alice()).toEqual({ status: 'LOCKED', metadata: { tier: 'gold', case: CASE } });

    // Both the file and the running system change Alice's tier.
    expect(
      (
        await gql(`mutation($m: JSON) { updateAccount(id: "${ALICE}", input: {metadata: $m}) { version } }`, {
          m: { tier: 'silver', case: CASE },
        })
      ).status,
    ).toBe(0);
    const accounts = JSON.parse(readFileSync(join(dir, 'accounts.json'), 'utf8'));
    accounts.find((a: { code: string }) => a.code === 'alice').metadata = { tier: 'platinum' };
    writeFileSync(join(dir, 'accounts.json'), JSON.stringify(accounts));
    const refused = await run('deploy', '.', '--db', db);
    expect(refused.status).toBe(1);
    expect(refused.out).toContain(
      '= account alice unchanged\n! conflict account alice metadata.tier: deployed "gold", now "silver", file "platinum"\n',
    );
    expect(refused.err.split('\n').slice(0, 3)).toEqual([
      'tally: 1 field changed both at runtime and in the project files since the last deploy:',
      '! conflict account alice metadata.tier: deployed "gold", now "silver", file "platinum"',
      'nothing was applied',
    ]);
    expect(refused.err).toContain('hint: Put the value to keep in the file');
    const json = await run('deploy', '.', '--db', db, '--json');
    expect(json.status).toBe(1);
    expect(JSON.parse(json.out).error).toMatchObject({
      code: 'CONFLICT',
      hint: expect.stringContaining('--overwrite-runtime-changes'),
    });
    expect((await alice()).metadata.tier).toBe('silver');

    const typo = await run('deploy', '.', '--db', db, '--overwrite-runtime-change');
    expect(typo).toMatchObject({ status: 2, out: '' });
    expect(typo.err.split('\n')[0]).toBe('tally: unknown option --overwrite-runtime-change');
    expect((await alice()).metadata.tier).toBe('silver');

    const forced = await run('deploy', '.', '--db', db, '--overwrite-runtime-changes');
    expect(forced.status, forced.err).toBe(0);
    expect(forced.out).toContain(
      '~ update account alice (metadata.tier)\n! overwrite account alice metadata.tier: deployed "gold", now "silver", file "platinum" (the file wins: --overwrite-runtime-changes)\n',
    );
    expect(forced.out).toContain('applied 1 change(s)');
    expect(await alice()).toEqual({ status: 'LOCKED', metadata: { tier: 'platinum', case: CASE } });
  }, 120_000);
});

describe('executions and execution', () => {
  it('executions are newest first, --limit pages with a "more…" cursor, --after follows it, --since bounds them', async () => {
    // Three executions in one request, in order (mutation fields run one after another).
    const invoke = (n: number) =>
      `e${n}: invokeAction(name: "notify_large", input: {executionId: "${id(100 + n)}", actionVersion: 1, input: {transaction_id: "t${n}", amount: "1"}}) { status }`;
    const ran = await tally(['gql', '-'], {
      cwd: project,
      env: { TALLY_API_KEY: ADMIN_KEY },
      stdin: `mutation { actions { ${[1, 2, 3].map(invoke).join(' ')} } }`,
    });
    expect(ran.status, ran.out).toBe(0);

    const page1 = await inProject('executions', '--action', 'notify_large', '--limit', '2');
    expect(page1.status, page1.err).toBe(0);
    const lines = page1.out.trimEnd().split('\n');
    expect(lines.slice(0, 2).map((l) => l.split(/\s+/)[1])).toEqual([id(103), id(102)]);
    expect(lines[0]).toMatch(/^\S+Z {2}\S+ {2}SUCCEEDED +notify_large@1 {2}attempt 1$/);
    const more = /^more… --after (\S+)$/.exec(lines[2]!);
    expect(more, page1.out).not.toBeNull();
    const page2 = JSON.parse(
      (await inProject('executions', '--action', 'notify_large', '--limit', '2', '--after', more![1]!, '--json')).out,
    );
    expect(page2.executions.map((e: any) => e.executionId)).toEqual([id(101)]);
    expect(page2.next).toBeNull();

    const created = page2.executions[0].created as string;
    const [later, sinceThen] = await Promise.all([
      inProject('executions', '--since', new Date(Date.now() + 60_000).toISOString()),
      inProject('executions', '--since', created, '--json'),
    ]);
    expect(later).toMatchObject({ status: 0, out: 'no executions\n' });
    const recent = JSON.parse(sinceThen.out).executions as Array<{ executionId: string; created: string }>;
    expect(recent.map((e) => e.executionId)).toEqual(expect.arrayContaining([id(101), id(102), id(103)]));
    expect(recent.every((e) => e.created >= created)).toBe(true);
    expect([...recent].sort((a, b) => b.created.localeCompare(a.created)).map((e) => e.created)).toEqual(
      recent.map((e) => e.created),
    );
  });

  it('execution <id> of a failed tool shows its input, the error message, hint and stack, its logs and every attempt', async () => {
    const invoked = await inProject('invoke', 'broken', '--input', '{"note": "purpose"}', '--execution-id', id(200));
    expect(invoked.status).toBe(1);
    expect(invoked.out).toContain(`broken@1 ${id(200)} FAILED`);
    expect(invoked.out).toContain("SCRIPT_ERROR: ReferenceError: 'availble' is not defined");
    expect(invoked.out).toContain(`(tally execution ${id(200)} shows the stack, logs and attempts)`);

    const shown = await inProject('execution', id(200));
    expect(shown.status).toBe(1);
    const text = shown.out;
    expect(text.split('\n')[0]).toMatch(/^broken@1 FAILED \d+ ms SCRIPT_ERROR$/);
    expect(text).toContain(`execution  ${id(200)}`);
    expect(text).toContain('input      {"note":"purpose"}');
    expect(text).toContain("error      SCRIPT_ERROR: ReferenceError: 'availble' is not defined");
    expect(text).toMatch(/\n {11} {2}hint: \S/);
    expect(text).toMatch(/stack:\n +.*at run \(broken@1:3/);
    expect(text).toContain('attempts   1');
    expect(text).toMatch(/\n {2}#1 FAILED \S+Z \d+ ms\n {5}SCRIPT_ERROR: ReferenceError/);
    expect(text).toContain('     log: about to fail on purpose');

    const json = JSON.parse((await inProject('execution', id(200), '--json')).out);
    expect(json.error).toMatchObject({
      code: 'SCRIPT_ERROR',
      hint: expect.any(String),
      details: { stack: expect.stringContaining('at run') },
    });
    expect(json.invocations).toEqual([
      expect.objectContaining({ attempt: 1, status: 'FAILED', logs: ['about to fail on purpose'] }),
    ]);
  });

  it('execution <id> of a started tool that was retried shows every attempt with its error and logs', async () => {
    const started = await inProject('start', 'flaky', '--input', '{"n": 1}', '--execution-id', id(300));
    expect(started.status, started.err).toBe(0);
    expect(started.out).toContain(`${id(300)} QUEUED`);
    // The server's worker runs both attempts; wait for the last one.
    const status = async () => {
      const response = await fetch(`http://127.0.0.1:${server.port}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_KEY}` },
        body: JSON.stringify({ query: `{ actions { execution(executionId: "${id(300)}") { status } } }` }),
      });
      return ((await response.json()) as any).data.actions.execution.status as string;
    };
    for (let i = 0; i < 200 && (await status()) !== 'FAILED'; i++)
      await new Promise((resolve) => setTimeout(resolve, 100));
    const shown = await inProject('execution', id(300));
    expect(shown.status).toBe(1);
    expect(shown.out).toContain('attempts   2');
    expect(shown.out).toMatch(
      /\n {2}#1 FAILED \S+Z \d+ ms\n {5}TOOL_FAILED: the bank did not answer\n {7}hint: Try again later\.\n {5}log: try 1\n {2}#2 FAILED \S+Z \d+ ms\n {5}TOOL_FAILED: the bank did not answer\n/,
    );
  });
});

describe('import', () => {
  it('says plainly when the file is missing', async () => {
    const run = await inProject('import', 'missing.csv');
    expect(run.status).toBe(1);
    expect(run.err).toBe(
      'tally: import "missing.csv": no such file\n  hint: Check the path (it is relative to the current folder).\n',
    );
  });
});

describe('tally serve: the admin key and the first start', () => {
  const url = (port: number) => `http://127.0.0.1:${port}/graphql`;
  const whoami = async (port: number, key: string) =>
    (
      await fetch(url(port), {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: '{"query":"{ journal { name } }"}',
      })
    ).status;

  it('refuses a different TALLY_ADMIN_KEY on an existing database unless --rotate-admin-key; that rotates it and says so', async () => {
    const db = join(mkdtempSync(join(scratch, 'keys-')), 'keys.db');
    const first = await serve(['--db', db, '--port', '0'], { TALLY_ADMIN_KEY: 'tly_first-key' });
    expect(first.port, first.err).not.toBeNull();
    expect(first.out).toContain('created the admin client');
    expect(first.out).not.toContain('set TALLY_ADMIN_KEY');
    await stop(first.child);

    const refused = await serve(['--db', db, '--port', '0'], { TALLY_ADMIN_KEY: 'tly_second-key' });
    expect(refused.status).toBe(1);
    expect(refused.err).toContain(`tally: ${db} already has an admin key, and TALLY_ADMIN_KEY is a different one`);
    expect(refused.err).toContain('--rotate-admin-key');

    const same = await serve(['--db', db, '--port', '0'], { TALLY_ADMIN_KEY: 'tly_first-key' });
    expect(same.port, same.err).not.toBeNull();
    expect(same.out).not.toContain('admin');
    expect(await whoami(same.port!, 'tly_first-key')).toBe(200);
    await stop(same.child);

    const rotated = await serve(['--db', db, '--port', '0', '--rotate-admin-key'], {
      TALLY_ADMIN_KEY: 'tly_second-key',
    });
    expect(rotated.port, rotated.err).not.toBeNull();
    expect(rotated.out).toContain(
      'tally: rotated the admin key: TALLY_ADMIN_KEY is the admin key now, the previous one no longer works',
    );
    expect(await whoami(rotated.port!, 'tly_second-key')).toBe(200);
    expect(await whoami(rotated.port!, 'tly_first-key')).toBe(401);
    await stop(rotated.child);
  }, 60_000);

  it('a bad key or a busy port says what to do, exits 1, and creates no database file (nor its folder)', async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const { port } = blocker.address() as { port: number };
    const existing = mkdtempSync(join(scratch, 'busy-'));
    mkdirSync(join(existing, 'data'));
    const [badKey, busy] = await Promise.all([
      serve(['--db', join(scratch, 'fresh', 'bad.db'), '--port', '0'], { TALLY_ADMIN_KEY: 'mysecret' }),
      serve(['--db', join(existing, 'data', 'busy.db'), '--port', String(port)], {}),
    ]);
    blocker.close();
    expect(badKey.status).toBe(1);
    expect(badKey.err).toBe(
      'tally: TALLY_ADMIN_KEY must start with tly_\n  hint: Generate one, e.g. export TALLY_ADMIN_KEY=tly_$(openssl rand -hex 32), or unset it to have one generated.\n',
    );
    expect(existsSync(join(scratch, 'fresh'))).toBe(false);
    expect(busy.status).toBe(1);
    expect(busy.err).toContain(
      `tally: cannot serve on 127.0.0.1:${port}: the port is in use\n  hint: Stop what serves on port ${port}`,
    );
    expect(busy.err).toContain('--port N or PORT=N');
    expect(busy.err).not.toContain('    at ');
    expect(busy.out).not.toContain('API key');
    expect(existsSync(join(existing, 'data', 'busy.db'))).toBe(false);
    expect(existsSync(join(existing, 'data'))).toBe(true);
  }, 30_000);
});
