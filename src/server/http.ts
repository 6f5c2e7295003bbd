import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { invalidKey } from '../auth/clients.js';
import type { Engine } from '../engine.js';
import { EngineError, quote } from '../errors.js';
import type { FormattedResult, GraphqlRequest } from '../graphql/executor.js';
import { assetReader, consolePage } from './console-page.js';

const GRAPHQL_RESPONSE = 'application/graphql-response+json';

export interface ServerOptions {
  /** Print one line per request. */
  log?: (line: string) => void;
}

/**
 * GraphQL over HTTP at /graphql, following the GraphQL-over-HTTP spec: POST with a JSON body for
 * everything, GET with URL parameters for queries only. A browser's GET shows a query console.
 */
export function createServer(engine: Engine, options: ServerOptions = {}): Server {
  const limits = engine.limits;
  // Node checks request timeouts on an interval (30 s by default); check often enough to honour ours.
  const connectionsCheckingInterval = Math.max(50, Math.min(1000, Math.floor(limits.requestTimeoutMs / 4)));
  const asset = assetReader();
  const server = createHttpServer({ connectionsCheckingInterval }, (req, res) => {
    handle(engine, asset, req, res).catch((error: unknown) => {
      options.log?.(`tally: request failed: ${String(error)}`);
      if (!res.headersSent) sendErrors(res, 500, 'application/json', [new EngineError('INTERNAL', 'the request failed')]);
      else res.end();
    });
  });
  server.requestTimeout = limits.requestTimeoutMs;
  server.headersTimeout = Math.min(limits.requestTimeoutMs, 60_000);
  return server;
}

async function handle(engine: Engine, asset: ReturnType<typeof assetReader>, req: IncomingMessage, res: ServerResponse): Promise<void> {
  let url: URL;
  try {
    url = new URL(req.url ?? '/', 'http://localhost');
  } catch {
    req.resume();
    return sendErrors(res, 400, 'application/json', [new EngineError('BAD_REQUEST', `the request target ${quote(req.url ?? '')} is not a valid URL path`, { hint: 'Send requests to /graphql.' })]);
  }
  if (req.method === 'GET' && url.pathname.startsWith('/graphql/assets/')) {
    const found = asset(url.pathname.slice('/graphql/assets/'.length));
    if (found) {
      res.writeHead(200, { 'content-type': `${found.type}; charset=utf-8`, 'cache-control': 'public, max-age=86400', 'content-length': found.body.length }).end(found.body);
      return;
    }
  }
  if (url.pathname !== '/graphql') {
    if (url.pathname === '/' && req.method === 'GET') {
      res.writeHead(302, { location: '/graphql' }).end();
      return;
    }
    sendErrors(res, 404, 'application/json', [new EngineError('NOT_FOUND', `no route ${quote(url.pathname)}`, { hint: 'GraphQL is served at /graphql.' })]);
    return;
  }
  const accept = req.headers.accept ?? '';
  const mediaType = chooseMediaType(accept);

  if (req.method === 'GET' && accept.includes('text/html') && !url.searchParams.has('query')) {
    // GraphiQL itself holds no data; its requests carry the key like any other.
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(consolePage());
    return;
  }
  // Checked now, to refuse a bad key before reading the body; the engine checks the key again
  // inside the request's transaction (a key rotated meanwhile is refused).
  const apiKey = authenticate(engine, req.headers.authorization);
  if (apiKey instanceof EngineError) {
    if (req.method === 'POST') req.resume();
    return sendUnauthenticated(res, mediaType, apiKey);
  }

  if (req.method === 'GET') {
    const request = requestFromSearchParams(url.searchParams);
    if (request instanceof EngineError) return sendErrors(res, 400, mediaType, [request]);
    if (isMutation(engine, request)) {
      res.setHeader('allow', 'POST');
      return sendErrors(res, 405, mediaType, [new EngineError('BAD_REQUEST', 'mutations must be sent with POST', { hint: 'POST the request as JSON.' })]);
    }
    return sendResult(res, mediaType, engine.execute(request, { apiKey }));
  }

  if (req.method !== 'POST') {
    res.setHeader('allow', 'GET, POST');
    return sendErrors(res, 405, mediaType, [new EngineError('BAD_REQUEST', `method ${req.method} is not allowed on /graphql`, { hint: 'Use POST (or GET for queries).' })]);
  }
  const contentType = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
  if (contentType !== 'application/json') {
    return sendErrors(res, 415, mediaType, [
      new EngineError('BAD_REQUEST', `content-type ${quote(req.headers['content-type'] ?? '')} is not supported`, { hint: 'Send the body as application/json.' }),
    ]);
  }
  const body = await readBody(req, engine.limits.requestBodyBytesMax);
  if (body instanceof EngineError) {
    res.setHeader('connection', 'close');
    return sendErrors(res, body.code === 'LIMIT_EXCEEDED' ? 413 : 400, mediaType, [body]);
  }
  const request = requestFromBody(body);
  if (request instanceof EngineError) return sendErrors(res, 400, mediaType, [request]);
  return sendResult(res, mediaType, engine.execute(request, { apiKey }));
}

/** The API key of `Authorization: Bearer <api key>` when it belongs to a client, or UNAUTHENTICATED. */
function authenticate(engine: Engine, header: string | undefined): string | EngineError {
  if (!header) {
    return new EngineError('UNAUTHENTICATED', 'the request has no Authorization header', { hint: 'Send `Authorization: Bearer <api key>`.' });
  }
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match) {
    return new EngineError('UNAUTHENTICATED', 'the Authorization header is not `Bearer <api key>`', { hint: 'Send `Authorization: Bearer <api key>`.' });
  }
  if (!engine.authenticate(match[1]!)) return invalidKey();
  return match[1]!;
}

/** application/graphql-response+json when the client accepts it, otherwise application/json. */
function chooseMediaType(accept: string): string {
  return accept.includes(GRAPHQL_RESPONSE) ? GRAPHQL_RESPONSE : 'application/json';
}

function isMutation(engine: Engine, request: GraphqlRequest): boolean {
  return engine.operationType(request) === 'mutation';
}

function readBody(req: IncomingMessage, bytesMax: number): Promise<string | EngineError> {
  return new Promise((resolve) => {
    const declared = Number(req.headers['content-length'] ?? '0');
    if (declared > bytesMax) {
      req.resume();
      resolve(new EngineError('LIMIT_EXCEEDED', `the request body is ${declared} bytes; requestBodyBytesMax is ${bytesMax}`));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    req.on('data', (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > bytesMax) {
        done = true;
        req.resume();
        resolve(new EngineError('LIMIT_EXCEEDED', `the request body is over requestBodyBytesMax (${bytesMax} bytes)`));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (!done) resolve(Buffer.concat(chunks).toString('utf8'));
    });
    req.on('error', (error) => {
      if (!done) resolve(new EngineError('BAD_REQUEST', `the request body could not be read: ${error.message}`));
    });
  });
}

function requestFromBody(body: string): GraphqlRequest | EngineError {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch (error) {
    return new EngineError('BAD_REQUEST', `the request body is not valid JSON: ${(error as Error).message}`, {
      hint: 'Send {"query": "...", "variables": {...}}.',
    });
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    return new EngineError('BAD_REQUEST', `the request body must be a JSON object, got ${quote(parsed)}`, {
      hint: 'Send {"query": "...", "variables": {...}}; batched requests are not supported.',
    });
  }
  return checkRequest(parsed as Record<string, unknown>);
}

function requestFromSearchParams(params: URLSearchParams): GraphqlRequest | EngineError {
  const raw: Record<string, unknown> = { query: params.get('query'), operationName: params.get('operationName') };
  for (const key of ['variables', 'extensions']) {
    const text = params.get(key);
    if (text === null) continue;
    try {
      raw[key] = JSON.parse(text);
    } catch {
      return new EngineError('BAD_REQUEST', `the ${key} parameter is not valid JSON: ${quote(text)}`);
    }
  }
  return checkRequest(raw);
}

function checkRequest(raw: Record<string, unknown>): GraphqlRequest | EngineError {
  const { query, variables, operationName, extensions } = raw;
  if (typeof query !== 'string') {
    return new EngineError('BAD_REQUEST', `query must be a string, got ${quote(query)}`, { hint: 'Send {"query": "{ journal { name } }"}.' });
  }
  if (variables != null && (typeof variables !== 'object' || Array.isArray(variables))) {
    return new EngineError('BAD_REQUEST', `variables must be a JSON object, got ${quote(variables)}`);
  }
  if (operationName != null && typeof operationName !== 'string') {
    return new EngineError('BAD_REQUEST', `operationName must be a string, got ${quote(operationName)}`);
  }
  if (extensions != null && (typeof extensions !== 'object' || Array.isArray(extensions))) {
    return new EngineError('BAD_REQUEST', `extensions must be a JSON object, got ${quote(extensions)}`);
  }
  return { query, variables: (variables as Record<string, unknown> | null) ?? null, operationName: (operationName as string | null) ?? null };
}

function sendResult(res: ServerResponse, mediaType: string, result: FormattedResult): void {
  if (result.data === undefined && result.errors?.[0]?.extensions?.code === 'UNAUTHENTICATED') {
    // The key stopped being valid between its first check and the request's transaction.
    res.setHeader('www-authenticate', 'Bearer realm="tally"');
    return send(res, 401, mediaType, result);
  }
  // application/graphql-response+json: a request that never executed (no `data`) is a 400.
  const status = mediaType === GRAPHQL_RESPONSE && result.data === undefined ? 400 : 200;
  send(res, status, mediaType, result);
}

function sendUnauthenticated(res: ServerResponse, mediaType: string, error: EngineError): void {
  res.setHeader('www-authenticate', 'Bearer realm="tally"');
  sendErrors(res, 401, mediaType, [error]);
}

function sendErrors(res: ServerResponse, status: number, mediaType: string, errors: EngineError[]): void {
  send(res, status, mediaType, { errors: errors.map((e) => ({ message: e.message, extensions: e.extensions })) });
}

function send(res: ServerResponse, status: number, mediaType: string, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': `${mediaType}; charset=utf-8`, 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
