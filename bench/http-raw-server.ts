/**
 * The raw HTTP anchor of `npm run bench:http`: a minimal node:http server that reads a JSON body
 * and does bench/common.ts's raw posting (txn + 2 entries + 2 balance upserts, integer amounts,
 * one BEGIN IMMEDIATE…COMMIT per request, the engine's pragmas and background checkpointing),
 * then answers a small JSON. Nothing else: no auth, no GraphQL, no logging.
 *
 *   node --import tsx bench/http-raw-server.ts <db> <port>     (port 0 picks a free one)
 *
 * Started as a plain `node` process (not through the tsx CLI, which would put a second process in
 * between) so that the bench reads this server's own CPU time from /proc/<pid>/stat. It prints
 * `raw: serving <db> at http://127.0.0.1:<port>/` when it listens. A GET answers `{"requests": n}`,
 * the postings done so far.
 *
 * The body is whatever the bench sends Tally (a GraphQL postTransaction or invokeAction request,
 * same bytes): parsed, checked to be an object, and not otherwise read. The posting itself is
 * rawPoster's `post(n)` with n counting up from 1, so its ids are unique and its accounts are
 * common.ts's `pair(n)` spread over the same 1,000 accounts.
 *
 * BENCH_DURABILITY=full: every commit fsyncs (`synchronous = FULL`), as `tally serve --durability
 * full` does. rawPoster (common.ts, shared by every bench) sets NORMAL on its connection and has no
 * option for it, so this process rewrites that one pragma as rawPoster sets it, and refuses to
 * serve if the rewrite did not happen.
 */
import { createServer } from 'node:http';
import Database from 'better-sqlite3';
import { rawPoster } from './common.js';

const [path, portText = '0'] = process.argv.slice(2);
if (!path) {
  process.stderr.write('usage: node --import tsx bench/http-raw-server.ts <db> <port>\n');
  process.exit(2);
}
const durability = process.env.BENCH_DURABILITY ?? 'normal';
if (durability !== 'normal' && durability !== 'full') {
  process.stderr.write(`raw: BENCH_DURABILITY must be normal or full, got ${JSON.stringify(durability)}\n`);
  process.exit(2);
}

let fullApplied = false;
if (durability === 'full') {
  const pragma = Database.prototype.pragma;
  Database.prototype.pragma = function (this: Database.Database, source: string, options?: Database.PragmaOptions) {
    if (/^\s*synchronous\s*=\s*NORMAL\s*$/i.test(source)) {
      fullApplied = true;
      return pragma.call(this, 'synchronous = FULL', options);
    }
    return pragma.call(this, source, options);
  } as typeof pragma;
}

const raw = rawPoster(path, { checkpointed: true });
if (durability === 'full' && !fullApplied) {
  raw.close();
  process.stderr.write('raw: rawPoster no longer sets synchronous = NORMAL; cannot make it FULL\n');
  process.exit(1);
}

let n = 0;
const server = createServer((req, res) => {
  // GET: how many postings this server has done (the bench divides its CPU time by it).
  if (req.method === 'GET') {
    req.resume();
    const reply = `{"requests":${n}}`;
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(reply) }).end(reply);
    return;
  }
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    let status = 200;
    let reply: string;
    try {
      const body: unknown = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (body === null || typeof body !== 'object') throw new Error('the body is not a JSON object');
      raw.post(++n);
      reply = `{"data":{"ok":true,"n":${n}}}`;
    } catch (error) {
      status = 500;
      reply = JSON.stringify({ errors: [{ message: (error as Error).message }] });
    }
    res
      .writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(reply) })
      .end(reply);
  });
});

server.listen(Number(portText), '127.0.0.1', () => {
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : Number(portText);
  process.stdout.write(
    `raw: serving ${path} at http://127.0.0.1:${port}/ (synchronous = ${durability.toUpperCase()})\n`,
  );
});

const stop = () => {
  server.close();
  server.closeAllConnections();
  raw.close();
  process.exit(0);
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
