import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { id } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

let running: Awaited<ReturnType<typeof startServer>>;
let server: Server;
let url: string;
const KEY = 'tly_http-test-admin-key';
const auth = { authorization: `Bearer ${KEY}` };

beforeAll(async () => {
  running = await startServer(KEY, { limits: { requestBodyBytesMax: 4096, requestTimeoutMs: 500 } });
  server = running.server;
  url = running.url;
});

afterAll(() => running.stop());

const postJson = (body: unknown, headers: Record<string, string> = {}) =>
  fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
const get = (query: string, headers: Record<string, string> = {}) =>
  fetch(`${url}?query=${encodeURIComponent(query)}`, { headers: { ...auth, ...headers } });

describe('GraphQL over HTTP', () => {
  it('walks the ledger over real HTTP: create accounts and a tran code, post, read the balance', async () => {
    const setup = await postJson({
      query: `mutation($a: UUID!, $b: UUID!) {
        a: createAccount(input: {accountId: $a, code: "cash", name: "Cash", normalBalanceType: DEBIT}) { accountId }
        b: createAccount(input: {accountId: $b, code: "alice", name: "Alice"}) { accountId }
        createTranCode(input: {tranCodeId: "${id(50)}", code: "DEPOSIT", params: [{name: "account", type: UUID}, {name: "amount", type: DECIMAL}],
          transaction: {effective: "date.Today()"},
          entries: [{accountId: "'${id(1)}'", units: "params.amount", currency: "'USD'", direction: "DEBIT", layer: "SETTLED"},
                    {accountId: "params.account", units: "params.amount", currency: "'USD'", direction: "CREDIT", layer: "SETTLED"}]}) { version } }`,
      variables: { a: id(1), b: id(2) },
    });
    expect(setup.status).toBe(200);
    expect(((await setup.json()) as any).errors).toBeUndefined();
    const posted = await postJson({
      query: `mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }`,
      variables: { i: { transactionId: id(100), tranCode: 'DEPOSIT', params: { account: id(2), amount: '50' } } },
    });
    expect(((await posted.json()) as any).data.postTransaction.transactionId).toBe(id(100));
    const balance = await get(
      `{ balance(accountId: "${id(2)}", currency: "USD") { settled { normalBalance { units currency } } } }`,
    );
    expect(balance.headers.get('content-type')).toContain('application/json');
    expect((await balance.json()) as any).toEqual({
      data: { balance: { settled: { normalBalance: { units: '50', currency: 'USD' } } } },
    });
  });

  it('answers malformed JSON, a non-object body, a missing query and wrong variable types with 400 and a code', async () => {
    for (const body of [
      '{"query":',
      '[1,2]',
      '{"variables": {}}',
      '{"query": "{ journal { name } }", "variables": [1]}',
    ]) {
      const res = await postJson(body);
      expect(res.status, body).toBe(400);
      const json: any = await res.json();
      expect(json.errors[0].extensions.code).toBe('BAD_REQUEST');
      expect(json.errors[0].extensions.hint).toBeTruthy();
    }
  });

  it('uses application/graphql-response+json when asked: 400 for a document that does not parse or validate', async () => {
    const accept = { accept: 'application/graphql-response+json' };
    const parseError = await postJson({ query: '{ journal {' }, accept);
    expect(parseError.status).toBe(400);
    expect(parseError.headers.get('content-type')).toContain('application/graphql-response+json');
    expect(((await parseError.json()) as any).errors[0].extensions.code).toBe('GRAPHQL_PARSE_FAILED');
    const unknownField = await postJson({ query: '{ journal { colour } }' }, accept);
    expect(unknownField.status).toBe(400);
    expect(((await unknownField.json()) as any).errors[0].message).toContain('colour');
    const executionError = await postJson({ query: `{ account(id: "${id(404)}") { code } }` }, accept);
    expect(executionError.status).toBe(200);
    // With plain application/json the same validation failure is a 200, as the spec allows.
    expect((await postJson({ query: '{ journal { colour } }' })).status).toBe(200);
  });

  it('refuses mutations over GET (405), other methods (405), other content types (415) and unknown paths (404)', async () => {
    const mutation = await get('mutation { evaluate(expression: "1") }');
    expect(mutation.status).toBe(405);
    expect(mutation.headers.get('allow')).toBe('POST');
    expect((await fetch(url, { method: 'PUT', headers: auth })).status).toBe(405);
    expect(
      (await fetch(url, { method: 'POST', headers: { 'content-type': 'text/plain', ...auth }, body: '{}' })).status,
    ).toBe(415);
    expect((await fetch(url.replace('/graphql', '/nope'))).status).toBe(404);
  });

  it('refuses a body over requestBodyBytesMax with 413 LIMIT_EXCEEDED, and keeps serving', async () => {
    const res = await postJson({ query: `{ journal { name } }`, variables: { pad: 'x'.repeat(5000) } });
    expect(res.status).toBe(413);
    expect(((await res.json()) as any).errors[0].extensions.code).toBe('LIMIT_EXCEEDED');
    expect((await postJson({ query: '{ journal { name } }' })).status).toBe(200);
  });

  it('cuts off a client that does not finish its body within requestTimeoutMs', async () => {
    const { port } = server.address() as AddressInfo;
    const socket = connect(port, '127.0.0.1');
    let response = '';
    socket.on('data', (chunk) => (response += chunk.toString()));
    socket.write(
      `POST /graphql HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${KEY}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"query":`,
    );
    const closed = await new Promise<boolean>((resolve) => {
      socket.on('close', () => resolve(true));
      setTimeout(() => resolve(false), 5000);
    });
    expect(closed).toBe(true);
    expect(response).toMatch(/^HTTP\/1.1 408|^$/);
  });

  it('answers a request target that is not a valid URL path with 400 BAD_REQUEST, and keeps serving', async () => {
    const { port } = new URL(url);
    for (const target of ['//%%%', 'http://[::1']) {
      const socket = connect(Number(port), '127.0.0.1');
      let response = '';
      socket.on('data', (chunk) => (response += chunk.toString()));
      socket.write(`GET ${target} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`);
      await new Promise((resolve) => socket.on('close', resolve));
      expect(response).toMatch(/^HTTP\/1.1 400/);
      expect(response).toContain('"code":"BAD_REQUEST"');
    }
    expect((await get('{ journal { name } }')).status).toBe(200);
  });

  it('refuses a missing, malformed or wrong API key with 401 UNAUTHENTICATED', async () => {
    for (const headers of [{}, { authorization: 'Basic abc' }, { authorization: 'Bearer tly_wrong' }] as Array<
      Record<string, string>
    >) {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: '{"query": "{ journal { name } }"}',
      });
      expect(res.status).toBe(401);
      expect(res.headers.get('www-authenticate')).toContain('Bearer');
      expect(((await res.json()) as any).errors[0].extensions.code).toBe('UNAUTHENTICATED');
    }
  });

  it('a client allowed only SELECT can read but not write over HTTP; a deleted client’s key stops working', async () => {
    const created = await postJson({
      query: `mutation { auth { createClient(input: {principal: "auditor", name: "Auditor", policies: [{effect: ALLOW, actions: [SELECT], resources: ["financial.*"]}]}) { apiKey client { principal } } } }`,
    });
    const key = ((await created.json()) as any).data.auth.createClient.apiKey as string;
    expect(key).toMatch(/^tly_/);
    const asAuditor = { authorization: `Bearer ${key}` };
    expect(
      ((await (await postJson({ query: '{ journal { name } }' }, asAuditor)).json()) as any).data.journal.name,
    ).toBe('Default');
    const write = (await (
      await postJson(
        { query: `mutation { createAccount(input: {accountId: "${id(77)}", code: "x", name: "x"}) { code } }` },
        asAuditor,
      )
    ).json()) as any;
    expect(write.errors[0].extensions.code).toBe('ACCESS_DENIED');
    expect(write.errors[0].message).toBe('INSERT on financial.Account refused by client auditor: no policy allows it');
    await postJson({ query: 'mutation { auth { deleteClient(principal: "auditor") { principal } } }' });
    expect((await postJson({ query: '{ journal { name } }' }, asAuditor)).status).toBe(401);
  });

  it('serves the query console to a browser GET', async () => {
    const res = await fetch(url, { headers: { accept: 'text/html' } });
    expect(res.status).toBe(200);
    expect(await res.text()).toContain('<title>Tally GraphQL</title>');
  });
});

/**
 * The attacker needs no key: anyone who can reach the port opens connections. Each holds a file
 * descriptor, so connections are bounded in time (headersTimeoutMs to send a request's headers,
 * keepAliveTimeoutMs idle after a response) and in number (connectionsMax, connectionsPerAddressMax):
 * a connection past a bound closes an idle one (a connection that never sent a request first), or
 * is itself closed when every one has a request in flight. Loopback's 127.0.0.2 and .3 are other peers.
 */
describe('connections without a key hold nothing for long, and only so many', () => {
  let bounded: Awaited<ReturnType<typeof startServer>>;
  let port: number;
  const sockets: Socket[] = [];
  beforeAll(async () => {
    bounded = await startServer(KEY, {
      limits: {
        headersTimeoutMs: 400,
        keepAliveTimeoutMs: 300,
        requestTimeoutMs: 20_000,
        connectionsMax: 6,
        connectionsPerAddressMax: 4,
        responseStallMs: 1500,
      },
    });
    port = (bounded.server.address() as AddressInfo).port;
  });
  afterEach(() => {
    for (const socket of sockets.splice(0)) socket.destroy();
  });
  afterAll(() => bounded.stop());

  /** A connection from `from` (127.0.0.x), once it is open. */
  const open = (from = '127.0.0.1') =>
    new Promise<Socket>((resolve, reject) => {
      const socket = connect({ port, host: '127.0.0.1', localAddress: from }, () => resolve(socket));
      socket.on('error', reject);
      sockets.push(socket);
    });
  /** Resolves when the server closes `socket`, with how long that took; 'open' if it did not within `ms`. */
  const closedWithin = (socket: Socket, ms: number) =>
    new Promise<number | 'open'>((resolve) => {
      const t0 = performance.now();
      if (socket.destroyed) return resolve(0);
      const timer = setTimeout(() => resolve('open'), ms);
      socket.once('close', () => {
        clearTimeout(timer);
        resolve(performance.now() - t0);
      });
    });
  /** A connection with a request in flight: a POST whose body never comes (it holds its place until requestTimeoutMs). */
  const busy = async (from = '127.0.0.1') => {
    const socket = await open(from);
    socket.write(
      `POST /graphql HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${KEY}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"query":`,
    );
    return socket;
  };
  /** A GET /healthz on a new connection from `from`: its status line, or how it failed. */
  const healthz = (from = '127.0.0.1') =>
    new Promise<string>((resolve) => {
      const socket = connect({ port, host: '127.0.0.1', localAddress: from });
      sockets.push(socket);
      let response = '';
      socket.on('connect', () => socket.write('GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n'));
      socket.on('data', (chunk) => (response += chunk.toString()));
      socket.on('error', () => {});
      socket.on('close', () => resolve(response.split('\r\n')[0] || 'closed without an answer'));
      setTimeout(() => resolve(`no answer in 3 s (${response.split('\r\n')[0]})`), 3000);
    });
  const settle = () => new Promise((r) => setTimeout(r, 100));

  it('a connection that sends nothing is closed after headersTimeoutMs; one that sends half its headers gets 408', async () => {
    const silent = await open();
    const half = await open();
    let answer = '';
    half.on('data', (chunk) => (answer += chunk.toString()));
    half.write('GET /healthz HTTP/1.1\r\nhost: x\r\n');
    const [silentAfter, halfAfter] = await Promise.all([closedWithin(silent, 3000), closedWithin(half, 3000)]);
    expect(silentAfter).not.toBe('open');
    expect(silentAfter).toBeGreaterThan(300);
    expect(halfAfter).not.toBe('open');
    expect(answer).toMatch(/^HTTP\/1.1 408|^$/);
  });

  it('a keep-alive connection with no request after its response is closed after keepAliveTimeoutMs', async () => {
    const socket = await open();
    let answer = '';
    const answered = new Promise<void>((resolve) =>
      socket.on('data', (chunk) => ((answer += chunk.toString()), answer.includes('"ok"') && resolve())),
    );
    socket.write('GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n');
    await answered;
    expect(answer).toMatch(/^HTTP\/1.1 200/);
    const after = await closedWithin(socket, 3000);
    expect(after).not.toBe('open');
    expect(after).toBeLessThan(2000);
  });

  it('connectionsPerAddressMax: a peer at its bound gets in by closing its own oldest idle connection; with all of them busy it is refused, and another peer is served', async () => {
    const idle = [await open(), await open(), await open(), await open()];
    await settle();
    expect(await healthz()).toBe('HTTP/1.1 200 OK');
    // The oldest idle one made room.
    expect(await closedWithin(idle[0]!, 1000)).not.toBe('open');
    for (const socket of idle.slice(1)) expect(socket.destroyed).toBe(false);
    for (const socket of idle) socket.destroy();
    await settle();
    const held = [await busy(), await busy(), await busy(), await busy()];
    await settle();
    expect(await healthz()).toBe('closed without an answer');
    expect(await healthz('127.0.0.2')).toBe('HTTP/1.1 200 OK');
    for (const socket of held) expect(socket.destroyed).toBe(false);
  });

  it('connectionsMax: past it, a new peer gets in by closing the oldest idle connection of any peer; with all of them busy it is refused', async () => {
    const idle = [
      await open('127.0.0.1'),
      await open('127.0.0.1'),
      await open('127.0.0.1'),
      await open('127.0.0.2'),
      await open('127.0.0.2'),
      await open('127.0.0.2'),
    ];
    await settle();
    expect(await healthz('127.0.0.3')).toBe('HTTP/1.1 200 OK');
    expect(await closedWithin(idle[0]!, 1000)).not.toBe('open');
    for (const socket of idle) socket.destroy();
    await settle();
    const held = [
      await busy('127.0.0.1'),
      await busy('127.0.0.1'),
      await busy('127.0.0.1'),
      await busy('127.0.0.2'),
      await busy('127.0.0.2'),
      await busy('127.0.0.2'),
    ];
    await settle();
    expect(await healthz('127.0.0.3')).toBe('closed without an answer');
    for (const socket of held) expect(socket.destroyed).toBe(false);
    for (const socket of held) socket.destroy();
    await settle();
    expect(await healthz('127.0.0.3')).toBe('HTTP/1.1 200 OK');
  });

  // Was a finding (second review of issue 33, H1): a peer with no key that asked for the GraphiQL
  // bundle (3.5 MB) and read none of it held its connection busy forever (no request timeout covers
  // a response), so six such connections from two addresses closed every later connection at once.
  it('responses nobody reads: their connections make room for a new peer at once, and are closed after responseStallMs', async () => {
    const stalled: Socket[] = [];
    for (const from of ['127.0.0.1', '127.0.0.1', '127.0.0.1', '127.0.0.2', '127.0.0.2', '127.0.0.2']) {
      const socket = await open(from);
      socket.write('GET /graphql/assets/graphiql.js HTTP/1.1\r\nhost: x\r\n\r\n'.repeat(3));
      socket.pause();
      stalled.push(socket);
    }
    // Past two sweeps: their output has stopped moving.
    await new Promise((r) => setTimeout(r, 1200));
    expect(stalled.filter((s) => !s.destroyed)).toHaveLength(6);
    expect(await healthz('127.0.0.3')).toBe('HTTP/1.1 200 OK');
    // The server closes its side (the peer, reading nothing, does not see it): its connections go.
    const connections = () => new Promise<number>((resolve) => bounded.server.getConnections((_, n) => resolve(n)));
    expect(await connections()).toBeGreaterThan(0);
    for (const end = Date.now() + 3000; Date.now() < end && (await connections()) > 0; ) await settle();
    expect(await connections()).toBe(0);
  });
});
