import { randomUUID } from 'node:crypto';
import { onlyArg, positiveInt, readArgFile, requireUuid, UUID } from './args.js';
import { call, openTarget, operationError } from './connect.js';
import { EXIT, OperationError, UsageError } from './errors.js';
import { formatTable, type Io, type Options, progress } from './io.js';

/*
 * The ledger's commands: tally accounts, balance, transactions, post, void, and import (a CSV file
 * of postings, in batches of one transaction each).
 */

export async function accountsCommand(args: string[], options: Options, io: Io): Promise<number> {
  if (args.length > 0)
    throw new UsageError(`unexpected argument ${JSON.stringify(args[0])} (tally balance <account> shows one account)`);
  const first = positiveInt(options.limit, 'limit') ?? positiveInt(options.first, 'first') ?? 100;
  const currency = options.currency === undefined ? 'USD' : String(options.currency);
  const target = await openTarget(options, io);
  try {
    const data = await call(
      target,
      `query($f: Int!, $c: CurrencyCode) { accounts(first: $f) { nodes { accountId code name status normalBalanceType
        balance(currency: $c) { settled { normalBalance { units } } available(layer: PENDING) { normalBalance { units } } } } pageInfo { hasNextPage } } }`,
      { f: first, c: currency },
    );
    const nodes = data.accounts.nodes as Array<Record<string, any>>;
    if (options.json)
      io.out(
        `${JSON.stringify(
          nodes.map(({ balance, ...a }) => ({
            ...a,
            currency,
            settled: balance.settled.normalBalance.units,
            available: balance.available.normalBalance.units,
          })),
          null,
          2,
        )}\n`,
      );
    else {
      const rows = nodes.map(
        (a) =>
          [
            a.code,
            a.accountId,
            a.status,
            a.normalBalanceType,
            a.balance.settled.normalBalance.units,
            a.balance.available.normalBalance.units,
            a.name,
          ] as string[],
      );
      const header = ['code', 'accountId', 'status', 'normal', `settled ${currency}`, 'available', 'name'];
      io.out(formatTable(header, rows, [4, 5]));
      if (data.accounts.pageInfo.hasNextPage) io.out(`more… (--limit ${first} reached)\n`);
    }
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

export async function balanceCommand(args: string[], options: Options, io: Io): Promise<number> {
  const ref = onlyArg(args, 'account');
  if (!ref) throw new UsageError('say which account (its code or id)');
  const target = await openTarget(options, io);
  try {
    const byId = UUID.test(ref);
    const data = await call(
      target,
      `query($id: UUID, $code: String, $c: CurrencyCode) { account(id: $id, code: $code) { code balance(currency: $c) {
      currency settled { normalBalance { units } } pending { normalBalance { units } } encumbrance { normalBalance { units } }
      available(layer: PENDING) { normalBalance { units } } } } }`,
      { id: byId ? ref : null, code: byId ? null : ref, c: options.currency ? String(options.currency) : 'USD' },
    );
    const b = data.account.balance;
    if (options.json) io.out(`${JSON.stringify({ account: data.account.code, ...b }, null, 2)}\n`);
    else {
      io.out(`${data.account.code} (${b.currency})\n`);
      io.out(
        `  settled      ${b.settled.normalBalance.units}\n  pending      ${b.pending.normalBalance.units}\n  encumbrance  ${b.encumbrance.normalBalance.units}\n  available    ${b.available.normalBalance.units}\n`,
      );
    }
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

const TRANSACTION_FIELDS = 'transactionId effective description voidOf voidedBy tranCode { code } tranCodeVersion';

/** tally transactions: in posting order; with --account, that account's entries with their transaction. */
export async function transactionsCommand(args: string[], options: Options, io: Io): Promise<number> {
  if (args.length > 0)
    throw new UsageError(`unexpected argument ${JSON.stringify(args[0])} (--account A lists one account's)`);
  const first = positiveInt(options.limit, 'limit') ?? 20;
  const target = await openTarget(options, io);
  try {
    if (options.account === undefined) {
      const data = await call(
        target,
        `query($f: Int!) { transactions(first: $f) { nodes { ${TRANSACTION_FIELDS} } pageInfo { hasNextPage } } }`,
        { f: first },
      );
      const nodes = data.transactions.nodes as Array<Record<string, any>>;
      if (options.json) io.out(`${JSON.stringify(nodes, null, 2)}\n`);
      else {
        if (nodes.length === 0) io.out('no transactions\n');
        for (const t of nodes)
          io.out(
            `${t.effective}  ${t.transactionId}  ${`${t.tranCode.code}@${t.tranCodeVersion}`.padEnd(14)} ${t.description ?? ''}${t.voidOf ? `  (voids ${t.voidOf})` : ''}${t.voidedBy ? `  (voided by ${t.voidedBy})` : ''}\n`,
          );
        if (data.transactions.pageInfo.hasNextPage) io.out(`more… (--limit ${first} reached)\n`);
      }
      return EXIT.ok;
    }
    const ref = String(options.account);
    const byId = UUID.test(ref);
    const data = await call(
      target,
      `query($id: UUID, $code: String, $f: Int!) { account(id: $id, code: $code) { code entries(first: $f) {
        nodes { direction layer units currency transaction { ${TRANSACTION_FIELDS} } } pageInfo { hasNextPage } } } }`,
      { id: byId ? ref : null, code: byId ? null : ref, f: first },
    );
    const entries = data.account.entries.nodes as Array<Record<string, any>>;
    if (options.json) io.out(`${JSON.stringify(entries, null, 2)}\n`);
    else {
      if (entries.length === 0) io.out(`no entries on ${data.account.code}\n`);
      for (const e of entries) {
        const t = e.transaction;
        io.out(
          `${t.effective}  ${t.transactionId}  ${`${t.tranCode.code}@${t.tranCodeVersion}`.padEnd(14)} ${String(e.direction).padEnd(6)} ${String(e.units).padStart(12)} ${e.currency} ${String(e.layer).padEnd(11)} ${t.description ?? ''}\n`,
        );
      }
      if (data.account.entries.pageInfo.hasNextPage) io.out(`more… (--limit ${first} reached)\n`);
    }
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

/** `--param k=v` (repeated) as the tran code's params; values stay strings (decimals travel as strings). */
function parseParams(values: string | boolean | string[] | undefined): Record<string, string> {
  const list = values === undefined ? [] : Array.isArray(values) ? values : [String(values)];
  const params: Record<string, string> = {};
  for (const item of list) {
    const eq = item.indexOf('=');
    if (eq < 1) throw new UsageError(`--param ${JSON.stringify(item)} is not name=value`);
    params[item.slice(0, eq)] = item.slice(eq + 1);
  }
  return params;
}

export async function postCommand(args: string[], options: Options, io: Io): Promise<number> {
  const tranCode = onlyArg(args, 'tran code');
  if (!tranCode) throw new UsageError('say which tran code (its code, e.g. DEPOSIT)');
  const params = parseParams(options.param);
  const transactionId =
    options['transaction-id'] === undefined
      ? randomUUID()
      : requireUuid(String(options['transaction-id']), '--transaction-id');
  const version = positiveInt(options.version, 'version');
  const target = await openTarget(options, io);
  try {
    const data = await call(
      target,
      `mutation($i: TransactionInput!) { postTransaction(input: $i) { ${TRANSACTION_FIELDS} entries(first: 100) { nodes { direction layer units currency account { code } } } } }`,
      { i: { transactionId, tranCode, tranCodeVersion: version ?? null, params } },
    );
    const t = data.postTransaction;
    if (options.json) io.out(`${JSON.stringify(t, null, 2)}\n`);
    else {
      io.out(
        `posted ${t.transactionId} ${t.tranCode.code}@${t.tranCodeVersion} effective ${t.effective}${t.description ? `: ${t.description}` : ''}\n`,
      );
      for (const e of t.entries.nodes)
        io.out(
          `  ${String(e.direction).padEnd(6)} ${String(e.account.code).padEnd(16)} ${String(e.units).padStart(12)} ${e.currency} ${e.layer}\n`,
        );
    }
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

export async function voidCommand(args: string[], options: Options, io: Io): Promise<number> {
  const id = requireUuid(onlyArg(args, 'transaction id'), 'transaction id');
  const target = await openTarget(options, io);
  try {
    const data = await call(target, `mutation($id: UUID!) { voidTransaction(id: $id) { ${TRANSACTION_FIELDS} } }`, {
      id,
    });
    const t = data.voidTransaction;
    io.out(
      options.json
        ? `${JSON.stringify(t, null, 2)}\n`
        : `voided ${id}: its entries are reversed by ${t.transactionId}\n`,
    );
    return EXIT.ok;
  } finally {
    await target.close();
  }
}

/** A CSV line split on commas, with "quoted, fields" and "" escapes. */
export function csvFields(line: string): string[] {
  const fields: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i]!;
    if (quoted) {
      if (ch === '"' && line[i + 1] === '"') {
        field += '"';
        i++;
      } else if (ch === '"') quoted = false;
      else field += ch;
    } else if (ch === '"') quoted = true;
    else if (ch === ',') {
      fields.push(field);
      field = '';
    } else field += ch;
  }
  fields.push(field);
  return fields;
}

/**
 * tally import <file.csv>: the header names transactionId, tranCode and the params; each row is a
 * postTransaction. Rows go in batches of 100 per request (one transaction each); transactionIds make
 * a re-run after a failure safe (posted rows return as they were).
 */
export async function importCommand(args: string[], options: Options, io: Io): Promise<number> {
  const file = onlyArg(args, 'file');
  if (!file) throw new UsageError('say which CSV file');
  const lines = readArgFile(file, 'import')
    .split(/\r?\n/)
    .filter((l) => l.trim() !== '');
  const header = csvFields(lines[0] ?? '');
  if (!header.includes('transactionId') || !header.includes('tranCode'))
    throw new UsageError(`${file}:1: the header needs transactionId and tranCode columns`);
  const rows = lines.slice(1).map((line, i) => {
    const values = csvFields(line);
    if (values.length !== header.length)
      throw new UsageError(`${file}:${i + 2}: ${values.length} fields, the header has ${header.length}`);
    const record: Record<string, string> = {};
    header.forEach((h, j) => (record[h] = values[j]!));
    const { transactionId, tranCode, ...params } = record;
    return { transactionId, tranCode, params };
  });
  const target = await openTarget(options, io);
  const bar = progress(io, 'importing');
  const BATCH = 100;
  try {
    for (let start = 0; start < rows.length; start += BATCH) {
      const batch = rows.slice(start, start + BATCH);
      const declarations = batch.map((_, i) => `$t${i}: TransactionInput!`).join(', ');
      const fields = batch.map((_, i) => `r${i}: postTransaction(input: $t${i}) { transactionId }`).join('\n');
      const variables = Object.fromEntries(batch.map((row, i) => [`t${i}`, row]));
      const result = await target.request(`mutation Import(${declarations}) {\n${fields}\n}`, variables);
      const error = operationError(result);
      if (error) {
        const path = result.errors![0]!.path?.[0];
        const row = typeof path === 'string' ? start + Number(path.slice(1)) + 2 : undefined;
        bar.done();
        throw new OperationError(
          `${file}${row ? `:${row}` : ''}: ${error.code}: ${error.message}${error.hint ? `\n  hint: ${error.hint}` : ''}\nrows ${start + 2}-${start + batch.length + 1} were not imported (rows before them were)`,
          error.code,
        );
      }
      bar.update(Math.min(rows.length, start + BATCH), rows.length);
    }
    bar.done();
    io.out(
      options.json ? `${JSON.stringify({ imported: rows.length })}\n` : `imported ${rows.length} transaction(s)\n`,
    );
    return EXIT.ok;
  } finally {
    await target.close();
  }
}
