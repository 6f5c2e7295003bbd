#!/usr/bin/env node
// A STAND-IN payout provider, for the bank example and Tally's tests: it is not a real provider's API.
// It does what a real one does that matters to Tally: it pays out once per Idempotency-Key (the same
// key gets the first answer again), it checks a bearer token, and it can be told to fail.
//
//   node examples/payout-provider/provider.mjs [--port 4100] [--token secret]
//
//   POST /v1/payouts          {payout_id, account, amount, currency}  → 201 {id, status: "paid", ...}
//   GET  /v1/payouts/:id                                              → 200 the payout, or 404
//   POST /v1/control/fail     {count, status}   the next `count` payouts answer `status` (default 500)
//   GET  /v1/control/requests                  every request received (method, path, key, body)
//
// An amount of "13.13" is refused for good (422), to show a final failure.
//
// For crash tests (from JavaScript only): `holdNext(count)` makes the next `count` first answers
// (a key not seen before, paid or refused) be stored and written whole, body included, without
// ending the response: chunked, so the caller has every byte of the answer but waits for its end.
// `nextHeld()` resolves once such an answer is written, with `end()` and `destroy()` to finish or
// break the response and `closed`, which resolves when the connection is gone (the caller died).
// An answer sent again for a key already seen is never held.
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';

/**
 * Start the stand-in on 127.0.0.1; resolves to {url, requests, payouts, failNext(count, status),
 * holdNext(count), nextHeld(), close()}.
 */
export async function startPayoutProvider({ port = 0, token = null, delayMs = 0 } = {}) {
  const requests = [];
  const payouts = new Map(); // payout id → payout
  const byKey = new Map(); // idempotency key → {status, body}
  const failures = [];
  let holds = 0;
  const held = []; // answers written and held open, not yet taken by nextHeld()
  const heldWaiters = [];
  const send = (res, status, body) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  /** A first answer: stored for its key, then sent, or written whole and held open (holdNext). */
  const answerFirst = (res, key, payoutId, answer) => {
    byKey.set(key, answer);
    if (holds === 0) return send(res, answer.status, answer.body);
    holds--;
    const closed = new Promise((resolve) => res.once('close', resolve));
    // No content-length: chunked, so the answer is complete only when the last chunk is sent (end()).
    res.writeHead(answer.status, { 'content-type': 'application/json' });
    res.write(JSON.stringify(answer.body), () => {
      const hold = {
        key,
        payoutId,
        status: answer.status,
        body: answer.body,
        closed,
        end: () => res.end(),
        destroy: () => res.destroy(),
      };
      const waiter = heldWaiters.shift();
      if (waiter) waiter(hold);
      else held.push(hold);
    });
  };
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const text = Buffer.concat(chunks).toString('utf8');
    let body = null;
    try {
      body = text === '' ? null : JSON.parse(text);
    } catch {
      body = text;
    }
    const url = new URL(req.url, 'http://provider');
    const key = req.headers['idempotency-key'] ?? null;
    if (!url.pathname.startsWith('/v1/control/'))
      requests.push({
        method: req.method,
        path: url.pathname,
        key,
        body,
        authorization: req.headers.authorization ?? null,
      });
    if (url.pathname === '/v1/control/fail' && req.method === 'POST') {
      for (let i = 0; i < (body?.count ?? 1); i++) failures.push(body?.status ?? 500);
      return send(res, 200, { queued: failures.length });
    }
    if (url.pathname === '/v1/control/requests') return send(res, 200, requests);
    if (token !== null && req.headers.authorization !== `Bearer ${token}`)
      return send(res, 401, { error: 'unauthorized' });
    if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
    if (url.pathname === '/v1/payouts' && req.method === 'POST') {
      if (key === null) return send(res, 400, { error: 'an Idempotency-Key header is required' });
      const seen = byKey.get(key);
      if (seen) return send(res, seen.status, seen.body);
      if (failures.length > 0) {
        const status = failures.shift();
        return send(res, status, { error: `the provider is failing on purpose (${status})` });
      }
      if (String(body?.amount) === '13.13')
        return answerFirst(res, key, body?.payout_id, {
          status: 422,
          body: { error: 'amount refused by the card network' },
        });
      const payout = {
        id: `po_${randomUUID()}`,
        status: 'paid',
        payout_id: body?.payout_id,
        amount: body?.amount,
        currency: body?.currency,
        account: body?.account,
      };
      payouts.set(payout.id, payout);
      return answerFirst(res, key, body?.payout_id, { status: 201, body: payout });
    }
    const match = /^\/v1\/payouts\/([^/]+)$/.exec(url.pathname);
    if (match && req.method === 'GET') {
      const payout = payouts.get(decodeURIComponent(match[1]));
      return payout ? send(res, 200, payout) : send(res, 404, { error: 'no such payout' });
    }
    return send(res, 404, { error: `no route ${req.method} ${url.pathname}` });
  });
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  const { port: bound } = server.address();
  return {
    url: `http://127.0.0.1:${bound}`,
    requests,
    payouts,
    failNext(count, status = 500) {
      for (let i = 0; i < count; i++) failures.push(status);
    },
    holdNext(count = 1) {
      holds += count;
    },
    nextHeld: () => {
      const ready = held.shift();
      return ready ? Promise.resolve(ready) : new Promise((resolve) => heldWaiters.push(resolve));
    },
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name, fallback) => {
    const at = process.argv.indexOf(`--${name}`);
    return at === -1 ? fallback : process.argv[at + 1];
  };
  const provider = await startPayoutProvider({ port: Number(arg('port', 4100)), token: arg('token', null) });
  console.log(`stand-in payout provider on ${provider.url} (not a real provider)`);
}
