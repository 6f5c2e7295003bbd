import type { ChildProcess } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { PgConnection } from '../../src/storage/pg/connection.js';
import { id, postgresTestDatabase } from '../helpers/engine.js';
import { exited, serveProcess } from '../helpers/processes.js';

/**
 * Many Tally processes on one PostgreSQL database (issue 19): four `tally serve` processes,
 * clients posting conflicting transfers to three hot accounts through all of them, one process
 * killed -9 mid-stream and started again. Every post a client saw acknowledged is there exactly
 * once; every balance equals its entries; debits equal credits per currency and layer.
 */
const URL = process.env.TALLY_TEST_PG_URL;
const KEY = 'tly_pg-processes-admin-key';
const HOT = [1, 2, 3].map(id);
const CURRENCIES = ['USD', 'EUR'];

interface Server {
  child: ChildProcess;
  endpoint: string;
}

async function gql(
  endpoint: string,
  query: string,
  variables?: Record<string, unknown>,
): Promise<{ data?: any; errors?: Array<{ message: string; extensions?: { code?: string } }> }> {
  const response = await fetch(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ query, variables }),
  });
  return (await response.json()) as never;
}

const POST = 'mutation($input: TransactionInput!) { postTransaction(input: $input) { transactionId } }';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(!URL)('four tally serve processes on one PostgreSQL database', () => {
  it('conflicting transfers to three hot accounts, one process killed -9 and restarted: every acknowledged post once, balances equal entries, debits equal credits', async () => {
    const db = postgresTestDatabase();
    // Started together on a new database: they race to create its schema, too.
    const servers: Server[] = await Promise.all([0, 1, 2, 3].map(() => serveProcess(db, KEY)));
    try {
      const setup = servers[0]!.endpoint;
      for (const [i, accountId] of HOT.entries()) {
        expect(
          (
            await gql(
              setup,
              'mutation($a: UUID!, $c: String!) { createAccount(input: {accountId: $a, code: $c, name: $c}) { code } }',
              { a: accountId, c: `HOT-${i}` },
            )
          ).errors,
        ).toBeUndefined();
      }
      const code = await gql(
        setup,
        `mutation { createTranCode(input: {tranCodeId: "${id(9000)}", code: "TRANSFER",
        params: [{name: "from", type: UUID}, {name: "to", type: UUID}, {name: "amount", type: DECIMAL}, {name: "currency", type: STRING}],
        transaction: {effective: "date.Today()"},
        entries: [{accountId: "params.from", units: "params.amount", currency: "params.currency", direction: "DEBIT", layer: "SETTLED"},
                  {accountId: "params.to", units: "params.amount", currency: "params.currency", direction: "CREDIT", layer: "SETTLED"}]}) { code } }`,
      );
      expect(code.errors).toBeUndefined();

      const CLIENTS = 8;
      const PER_CLIENT = 50;
      const acknowledged = new Set<string>();
      let failedAttempts = 0;
      let sent = 0;
      const client = async (c: number) => {
        for (let n = 0; n < PER_CLIENT; n++) {
          const transactionId = id(1_000_000 + c * 1000 + n);
          const from = HOT[(c + n) % 3]!;
          const to = HOT[(c + n + 1 + (n % 2)) % 3]!;
          const input = {
            transactionId,
            tranCode: 'TRANSFER',
            params: {
              from,
              to,
              amount: `${1 + ((c * 7 + n * 13) % 997)}.${String(n % 100).padStart(2, '0')}`,
              currency: CURRENCIES[n % 2],
            },
          };
          sent++;
          // Until acknowledged: the same request (the transaction id is its idempotency key) to the next process.
          for (let attempt = 0; ; attempt++) {
            const server = servers[(c + n + attempt) % servers.length]!;
            try {
              const answer = await gql(server.endpoint, POST, { input });
              if (answer.data?.postTransaction?.transactionId === transactionId) {
                acknowledged.add(transactionId);
                break;
              }
              // Only a retryable refusal is expected here (BUSY: the conflict outlasted its retries).
              expect(answer.errors?.[0]?.extensions?.code, JSON.stringify(answer.errors)).toBe('BUSY');
            } catch (error) {
              if (error instanceof Error && error.name === 'AssertionError') throw error;
              // The process was killed under this request (or is starting again): another one answers.
            }
            failedAttempts++;
            expect(attempt, 'a post that never got through').toBeLessThan(200);
            await sleep(20);
          }
        }
      };
      const killer = async () => {
        while (sent < (CLIENTS * PER_CLIENT) / 3) await sleep(10);
        const victim = servers[1]!;
        victim.child.kill('SIGKILL');
        await exited(victim.child);
        await sleep(300);
        servers[1] = await serveProcess(db, KEY);
      };
      await Promise.all([killer(), ...Array.from({ length: CLIENTS }, (_, c) => client(c))]);
      expect(acknowledged.size).toBe(CLIENTS * PER_CLIENT);

      // The database, read directly.
      const check = new PgConnection(db);
      try {
        const posted = new Set(check.prepare<[], string>('SELECT transaction_id FROM transactions').pluck().all());
        for (const t of acknowledged) expect(posted.has(t), t).toBe(true);
        // Nothing but the clients' posts, each with its two entries.
        expect(posted.size).toBe(acknowledged.size);
        expect(check.prepare('SELECT count(*) AS n FROM entries').get()).toEqual({ n: 2 * acknowledged.size });
        // Every balance record equals the sum of its entries, per layer and direction.
        const mismatched = check
          .prepare(
            `SELECT b.account_id, b.currency FROM balances b
               LEFT JOIN (SELECT account_id, currency,
                   sum(CASE WHEN direction = 'DEBIT' THEN units::numeric ELSE 0 END) AS dr,
                   sum(CASE WHEN direction = 'CREDIT' THEN units::numeric ELSE 0 END) AS cr
                 FROM entries WHERE layer = 'SETTLED' GROUP BY account_id, currency) e
                 ON e.account_id = b.account_id AND e.currency = b.currency
             WHERE b.settled_dr::numeric <> coalesce(e.dr, 0) OR b.settled_cr::numeric <> coalesce(e.cr, 0)`,
          )
          .all();
        expect(mismatched).toEqual([]);
        expect(check.prepare('SELECT count(*) AS n FROM balances').get()).toEqual({
          n: HOT.length * CURRENCIES.length,
        });
        // Debits equal credits per currency and layer.
        const unbalanced = check
          .prepare(
            "SELECT currency, layer FROM entries GROUP BY currency, layer HAVING sum(CASE WHEN direction = 'DEBIT' THEN units::numeric ELSE -units::numeric END) <> 0",
          )
          .all();
        expect(unbalanced).toEqual([]);
      } finally {
        check.close();
      }
      // The kill was felt: some requests had to go to another process.
      expect(failedAttempts).toBeGreaterThan(0);
    } finally {
      for (const s of servers) s.child.kill('SIGKILL');
      await Promise.all(servers.map((s) => exited(s.child)));
    }
  }, 180_000);
});
