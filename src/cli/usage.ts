import { readFileSync } from 'node:fs';

/**
 * Every command of the CLI as data: its arguments, options (node:util parseArgs descriptors with a
 * line of help each) and examples. `tally <command> --help` prints one entry whole; a usage error
 * prints its usage line and options only. Adding an option to a command is one line here (parseArgs
 * refuses options a command does not list).
 */
export interface OptionSpec {
  type: 'string' | 'boolean';
  short?: string;
  multiple?: boolean;
  /** How the value is written in help (`N`, `PATH`); none for a flag. */
  value?: string;
  help: string;
}

export interface CommandSpec {
  name: string;
  /** The arguments after the command name, as the usage line shows them. */
  args: string;
  summary: string;
  options: Record<string, OptionSpec>;
  examples: string[];
  /** Talks to a server or a database file: takes --db, --server, --key and --project. */
  target?: boolean;
}

const json: Record<string, OptionSpec> = {
  json: { type: 'boolean', help: 'print JSON (errors too: {"error": {"code", "message", "hint"}})' },
};

const logLevel: Record<string, OptionSpec> = {
  'log-level': {
    type: 'string',
    value: 'LEVEL',
    help: 'debug, info (default; $TALLY_LOG_LEVEL), warn, error or silent: one JSON line per request and attempt (readable on a terminal)',
  },
};

const localDb: Record<string, OptionSpec> = {
  db: {
    type: 'string',
    value: 'PATH',
    help: 'the database: a file, or a postgres:// URL (default $TALLY_DATABASE_URL, $TALLY_DB or ./data/tally.db)',
  },
};

/** Where a client command sends its GraphQL: the first of these that is given. */
export const TARGET_OPTIONS: Record<string, OptionSpec> = {
  db: { type: 'string', value: 'PATH', help: "open this database file in-process (the engine's own authority)" },
  server: {
    type: 'string',
    value: 'URL',
    help: 'a server\'s /graphql (default $TALLY_SERVER, then "server" of tally.json)',
  },
  key: { type: 'string', value: 'KEY', help: 'the API key for --server (default $TALLY_API_KEY)' },
  project: {
    type: 'string',
    value: 'DIR',
    help: 'the folder whose tally.json names the server (default: the current folder)',
  },
};

const durability: OptionSpec = {
  type: 'string',
  value: 'MODE',
  help: 'normal (default, or $TALLY_DURABILITY): a power cut can lose the last commits; full: every commit is synced to disk first',
};

const limit = (what: string, dflt: number): OptionSpec => ({
  type: 'string',
  value: 'N',
  help: `show at most N ${what} (default ${dflt})`,
});

export const COMMANDS: Record<string, CommandSpec> = {
  serve: {
    name: 'serve',
    args: '[--db PATH] [--port N] [--host H] [--no-worker] [--rotate-admin-key] [--durability normal|full]',
    summary:
      'Serve GraphQL at /graphql (GraphiQL for browsers) and run started executions in-process.\n' +
      'On first start it creates the admin client: its key is TALLY_ADMIN_KEY (tly_…) or a generated one, printed once.\n' +
      'A database that has an admin key refuses a different TALLY_ADMIN_KEY unless --rotate-admin-key is given.',
    options: {
      ...localDb,
      port: { type: 'string', value: 'N', help: 'the port (default $PORT or 4000; 0 picks a free one)' },
      host: { type: 'string', value: 'H', help: 'the address to listen on (default $HOST or 127.0.0.1)' },
      'no-worker': { type: 'boolean', help: 'do not run started executions here (run `tally worker` beside it)' },
      'rotate-admin-key': {
        type: 'boolean',
        help: 'replace the admin key of an existing database with TALLY_ADMIN_KEY',
      },
      durability,
      ...logLevel,
    },
    examples: [
      'tally serve',
      'TALLY_ADMIN_KEY=tly_my-admin-key tally serve --db ./data/dev.db --port 4001',
      'TALLY_ADMIN_KEY=tly_new-admin-key tally serve --rotate-admin-key',
    ],
  },
  worker: {
    name: 'worker',
    args: '[--db PATH] [--drain] [--durability normal|full]',
    summary: 'Run started executions beside a server (or a deploy), from the same database file.',
    options: {
      ...localDb,
      drain: { type: 'boolean', help: 'run what is due now, then exit' },
      durability,
      ...logLevel,
    },
    examples: ['tally worker --db ./data/tally.db', 'tally worker --drain'],
  },
  migrate: {
    name: 'migrate',
    args: '[--db PATH]',
    summary: 'Create or upgrade the database, then exit.',
    options: { ...localDb },
    examples: ['tally migrate --db ./data/tally.db'],
  },
  deploy: {
    name: 'deploy',
    args: '[DIR] [--dry-run] [--overwrite-runtime-changes]',
    summary:
      'Create what a project folder defines and new versions of what changed, in one transaction.\n' +
      'It writes only the fields the files declare; a field changed at runtime since the last deploy is kept (`! keep`),\n' +
      'or, when the files changed it too, a conflict (`! conflict`) that refuses the deploy.\n' +
      'The server is "server" of DIR/tally.json unless --server, $TALLY_SERVER or --db says otherwise.',
    options: {
      'dry-run': { type: 'boolean', help: 'check the plan and roll it back' },
      'overwrite-runtime-changes': {
        type: 'boolean',
        help: "write the files' values over fields changed at runtime since the last deploy (conflicts and kept changes)",
      },
    },
    examples: [
      'tally deploy examples/bank',
      'tally deploy examples/bank --db ./data/bank.db --dry-run',
      'tally deploy examples/bank --overwrite-runtime-changes',
    ],
    target: true,
  },
  invoke: {
    name: 'invoke',
    args: '<tool> --input JSON|@file [--version N] [--execution-id ID]',
    summary: 'Run a tool now, in one request transaction, and print its output (exit 1 when it fails).',
    options: {
      input: { type: 'string', value: 'JSON|@file', help: "the tool's input, as JSON or @ a JSON file (required)" },
      version: { type: 'string', value: 'N', help: 'the tool version (default: the latest ACTIVE one)' },
      'execution-id': { type: 'string', value: 'ID', help: 'the idempotency key (default: a new UUID)' },
    },
    examples: [
      'tally invoke transfer --input \'{"transaction_id": "c0000000-0000-4000-8000-000000000002", "from": "…", "to": "…", "amount": "30"}\'',
      'tally invoke lock_account --input @lock.json --json',
    ],
    target: true,
  },
  start: {
    name: 'start',
    args: '<tool> --input JSON|@file [--version N] [--execution-id ID] [--wait [--timeout SECONDS]]',
    summary:
      'Queue a tool to run later (a worker runs it, with retries); prints the QUEUED execution.\n' +
      'With --wait, waits for it to end (model and agent tools too) and prints it as invoke does (exit 1 when it FAILED\n' +
      'or is still running at the timeout); with --db the command runs the worker itself while it waits.',
    options: {
      input: { type: 'string', value: 'JSON|@file', help: "the tool's input, as JSON or @ a JSON file (required)" },
      version: { type: 'string', value: 'N', help: 'the tool version (default: the latest when it runs)' },
      'execution-id': { type: 'string', value: 'ID', help: 'the idempotency key (default: a new UUID)' },
      wait: { type: 'boolean', help: 'wait until the execution ends and print its output' },
      timeout: { type: 'string', value: 'SECONDS', help: 'with --wait: how long to wait (default 120)' },
    },
    examples: [
      'tally start notify_large --input \'{"transaction_id": "c0000000-0000-4000-8000-000000000011", "amount": "15000"}\'',
      'tally start teller --input \'{"account_id": "b0000000-0000-4000-8000-000000000011", "message": "what is my balance?"}\' --wait --timeout 60',
    ],
    target: true,
  },
  executions: {
    name: 'executions',
    args: '[--status S] [--action NAME] [--since TIME] [--limit N] [--after CURSOR]',
    summary:
      'Top-level executions, newest first (with --action: every execution of that tool).\n' +
      'When there are more, the last line is "more… --after CURSOR".',
    options: {
      status: { type: 'string', value: 'S', help: 'QUEUED, RUNNING, SUCCEEDED, FAILED or CANCELLED' },
      action: { type: 'string', value: 'NAME', help: 'executions of this tool only' },
      since: { type: 'string', value: 'TIME', help: 'created at or after this ISO time (2026-11-30T12:00:00Z)' },
      limit: limit('executions', 20),
      first: { type: 'string', value: 'N', help: 'the same as --limit' },
      after: { type: 'string', value: 'CURSOR', help: 'the page after the "more…" line of the previous one' },
    },
    examples: [
      'tally executions',
      'tally executions --status FAILED --since 2026-11-30T00:00:00Z',
      'tally executions --action transfer --limit 5 --after WyJleGVjdXRpb25zIiw0Ml0',
    ],
    target: true,
  },
  execution: {
    name: 'execution',
    args: '<id>',
    summary: 'One execution: the call tree, input, output, error (message, hint, stack), every attempt and its logs.',
    options: {},
    examples: [
      'tally execution c0000000-0000-4000-8000-000000009040',
      'tally execution c0000000-0000-4000-8000-000000009040 --json',
    ],
    target: true,
  },
  chat: {
    name: 'chat',
    args: '<agent> [--input JSON|@file] [--session ID]',
    summary:
      'Talk with an agent in a session: each line of standard input is a message, each answer is printed.\n' +
      'Opens a session (or resumes one, printing its history first); during a turn its tool calls are printed as they\n' +
      'happen (→ call, ← result), then the answer.\n' +
      'A call that needs approval is shown with "approve? [y/N] reason:"; on a pipe the next line is the answer\n' +
      '("y looks fine" approves, "n too much" or an empty line rejects). /quit or the end of input closes the session.\n' +
      'With --db the command runs the turns itself (an in-process worker) while the chat lasts.',
    options: {
      input: {
        type: 'string',
        value: 'JSON|@file',
        help: "the session's input (what it is about), as JSON or @ a JSON file; fixed for the session",
      },
      session: {
        type: 'string',
        value: 'ID',
        help: 'resume this session (its history is printed first) instead of opening one',
      },
    },
    examples: [
      'tally chat teller --input \'{"account_id": "b0000000-0000-4000-8000-000000000011"}\'',
      'tally chat teller --session c0000000-0000-4000-8000-000000000500',
      "printf 'move 25 to bob\\ny looks fine\\n' | tally chat teller --input @session.json --db ./data/tally.db",
    ],
    target: true,
  },
  approvals: {
    name: 'approvals',
    args: '[--status S] [--limit N] [--after CURSOR]',
    summary:
      "Calls agents asked for that wait for a person's decision, oldest first (--status for decided ones).\n" +
      'When there are more, the last line is "more… --after CURSOR".',
    options: {
      status: { type: 'string', value: 'S', help: 'PENDING (default), APPROVED, REJECTED, EXPIRED, CANCELLED, or ALL' },
      limit: limit('approvals', 20),
      after: { type: 'string', value: 'CURSOR', help: 'the page after the "more…" line of the previous one' },
    },
    examples: ['tally approvals', 'tally approvals --status ALL --limit 50 --json'],
    target: true,
  },
  approve: {
    name: 'approve',
    args: '<approvalId> [--reason TEXT]',
    summary:
      "Approve a PENDING call: the waiting run resumes and the call runs under its starter's authority.\n" +
      'Prints the decided approval; exit 1 when it is refused (not PENDING any more, or not yours to decide).',
    options: { reason: { type: 'string', value: 'TEXT', help: 'why, recorded with the decision' } },
    examples: ['tally approve c0000000-0000-4000-8000-000000000700 --reason "checked with the customer"'],
    target: true,
  },
  reject: {
    name: 'reject',
    args: '<approvalId> [--reason TEXT]',
    summary:
      'Reject a PENDING call: the waiting run resumes, the model is told, and the call never runs.\n' +
      'Prints the decided approval; exit 1 when it is refused (not PENDING any more, or not yours to decide).',
    options: { reason: { type: 'string', value: 'TEXT', help: 'why, recorded with the decision' } },
    examples: ['tally reject c0000000-0000-4000-8000-000000000700 --reason "over the daily limit"'],
    target: true,
  },
  accounts: {
    name: 'accounts',
    args: '[--currency C] [--limit N]',
    summary: 'Accounts with their balances (settled and available) in one currency.',
    options: {
      currency: { type: 'string', value: 'C', help: 'the balance currency (default USD)' },
      limit: limit('accounts', 100),
      first: { type: 'string', value: 'N', help: 'the same as --limit' },
    },
    examples: ['tally accounts', 'tally accounts --currency EUR --json'],
    target: true,
  },
  balance: {
    name: 'balance',
    args: '<account code or id> [--currency C]',
    summary: 'The layered balance of one account: settled, pending, encumbrance, available.',
    options: { currency: { type: 'string', value: 'C', help: 'the currency (default USD)' } },
    examples: ['tally balance alice', 'tally balance b0000000-0000-4000-8000-000000000011 --currency USD --json'],
    target: true,
  },
  transactions: {
    name: 'transactions',
    args: '[--account A] [--limit N]',
    summary: 'Transactions in posting order; with --account, the entries of that account with their transaction.',
    options: {
      account: { type: 'string', value: 'A', help: 'an account code or id' },
      limit: limit('transactions', 20),
    },
    examples: ['tally transactions', 'tally transactions --account alice --limit 5'],
    target: true,
  },
  post: {
    name: 'post',
    args: '<TRAN_CODE> --param k=v ... [--transaction-id ID] [--version N]',
    summary:
      'Post a transaction from a tran code.\n' +
      'The transaction id is the idempotency key: posting the same id and params again returns the same transaction.',
    options: {
      param: { type: 'string', multiple: true, value: 'k=v', help: 'a param of the tran code (repeat for each)' },
      'transaction-id': { type: 'string', value: 'ID', help: 'the idempotency key (default: a new UUID)' },
      version: { type: 'string', value: 'N', help: 'pin a tran code version (default: the latest)' },
    },
    examples: [
      'tally post DEPOSIT --param account=b0000000-0000-4000-8000-000000000011 --param amount=100 --transaction-id c0000000-0000-4000-8000-000000000001',
    ],
    target: true,
  },
  void: {
    name: 'void',
    args: '<transactionId>',
    summary: 'Void a transaction: reverse every entry of it in a new transaction.',
    options: {},
    examples: ['tally void c0000000-0000-4000-8000-000000000001'],
    target: true,
  },
  gql: {
    name: 'gql',
    args: '<file|-> [--variables JSON|@file]',
    summary: 'Run a GraphQL document (a file, or - for stdin) and print the whole response (exit 1 with errors).',
    options: { variables: { type: 'string', value: 'JSON|@file', help: 'the variables, as JSON or @ a JSON file' } },
    examples: [
      'tally gql query.graphql --variables \'{"code": "alice"}\'',
      "echo '{ journal { name } }' | tally gql -",
    ],
    target: true,
  },
  mcp: {
    name: 'mcp',
    args: '(--db PATH --as PRINCIPAL | --server URL --key KEY) | import <SERVER> [--prefix P] [--dry-run]',
    summary:
      'Serve the tools a client may call to an MCP client (Claude Desktop, Claude Code, the MCP Inspector) over stdio.\n' +
      "In-process (--db, --as: that client's policies bound every call) or as a proxy to a running server (--server, --key:\n" +
      'the server authorizes). stdout carries only protocol messages; logs go to stderr. `tally serve` also serves MCP at /mcp.\n' +
      "`tally mcp import SERVER` makes each tool of an MCP server in TALLY_CONFIG's mcpServers an action of kind mcp (--db or\n" +
      '--server, --key: the caller needs INSERT and UPDATE on actions.Action): created, updated to a new version when the tool\n' +
      'changed on the server, or left unchanged.',
    options: {
      db: { type: 'string', value: 'PATH', help: 'open this database file in-process (default $TALLY_DB)' },
      as: { type: 'string', value: 'PRINCIPAL', help: 'the client whose policies bound every call (with --db)' },
      server: { type: 'string', value: 'URL', help: 'a running server (default $TALLY_SERVER)' },
      key: { type: 'string', value: 'KEY', help: 'the API key for --server (default $TALLY_API_KEY)' },
      prefix: { type: 'string', value: 'P', help: 'import: written before every action name (e.g. crm_)' },
      'dry-run': { type: 'boolean', help: 'import: say what would change, change nothing' },
    },
    examples: [
      'tally mcp --db ./data/tally.db --as operator',
      'TALLY_API_KEY=tly_… tally mcp --server http://127.0.0.1:4000',
      'TALLY_CONFIG=tally.config.json tally mcp import crm --prefix crm_ --db ./data/tally.db --dry-run',
    ],
  },
  import: {
    name: 'import',
    args: '<file.csv>',
    summary:
      'Post a CSV of transactions in batches of 100 (header: transactionId,tranCode,<param>,...).\n' +
      'A re-run after a failure is safe: posted rows return as they were.',
    options: {},
    examples: ['tally import deposits.csv --db ./data/tally.db'],
    target: true,
  },
};

/** The options parseArgs gets for a command: its own, the target ones, --json and --help. */
export function parseOptions(
  spec: CommandSpec,
): Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }> {
  const all = {
    ...(spec.target ? TARGET_OPTIONS : {}),
    ...spec.options,
    ...json,
    help: { type: 'boolean', short: 'h', help: '' } as OptionSpec,
  };
  return Object.fromEntries(
    Object.entries(all).map(([name, o]) => [
      name,
      { type: o.type, ...(o.short ? { short: o.short } : {}), ...(o.multiple ? { multiple: true } : {}) },
    ]),
  );
}

function optionLines(options: Record<string, OptionSpec>): string[] {
  const rows = Object.entries(options).map(
    ([name, o]) => [`--${name}${o.value ? ` ${o.value}` : ''}`, o.help] as const,
  );
  const width = Math.max(...rows.map(([left]) => left.length));
  return rows.map(([left, help]) => `  ${left.padEnd(width)}  ${help}`);
}

function usageLine(spec: CommandSpec): string {
  return `usage: tally ${spec.name} ${spec.args}${spec.target ? ' [--db PATH | --server URL --key KEY | --project DIR]' : ''} [--json]`;
}

/** What a usage error prints after its message: the usage line and the options, no examples. */
export function formatUsage(spec: CommandSpec): string {
  const lines = [usageLine(spec)];
  if (Object.keys(spec.options).length > 0) lines.push(...optionLines(spec.options));
  lines.push(`(tally ${spec.name} --help for more, with examples)`);
  return lines.join('\n');
}

/** `tally <command> --help`. */
export function formatHelp(spec: CommandSpec): string {
  const lines = [usageLine(spec), '', spec.summary];
  if (Object.keys(spec.options).length > 0) lines.push('', 'options:', ...optionLines(spec.options));
  if (spec.target)
    lines.push(
      '',
      'where (the first given; --server needs a key):',
      ...optionLines(TARGET_OPTIONS),
      '  ($TALLY_SERVER and $TALLY_API_KEY stand for --server and --key)',
    );
  lines.push('', 'examples:', ...spec.examples.map((e) => `  ${e}`));
  return lines.join('\n');
}

/** `tally --help`: one line per command. */
export function formatCommandList(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((n) => n.length));
  return [
    'usage: tally <command> [options]        tally <command> --help for its options and examples',
    '',
    ...Object.values(COMMANDS).map((c) => `  ${c.name.padEnd(width)}  ${c.summary.split('\n')[0]}`),
    '',
    'where:     --db PATH (in-process), or --server URL with --key KEY ($TALLY_SERVER, $TALLY_API_KEY),',
    '           or "server" of tally.json in the current folder (or --project DIR)',
    'output:    --json on every command, for scripts',
    'exit code: 0 ok, 1 the operation or execution failed, 2 usage',
    'version:   tally --version',
  ].join('\n');
}

/** The version in package.json, read when asked. */
export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}
