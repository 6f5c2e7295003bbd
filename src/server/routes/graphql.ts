import type { IncomingMessage } from 'node:http';
import type { OperationSummary, RequestOptions } from '../../engine.js';
import { EngineError, quote } from '../../errors.js';
import type { FormattedResult, GraphqlRequest } from '../../graphql/executor.js';
import { authenticate, sendUnauthenticated } from '../auth.js';
import { readBody, sendBodyRefused } from '../body.js';
import type { Runtime } from '../../runtime/runtime.js';
import { send, sendErrors } from '../reply.js';
import { type Exchange, traceOperation, untraceOperation } from '../trace.js';

const GRAPHQL_RESPONSE = 'application/graphql-response+json';

/** The client whose key a request carries, checked before its body is read. */
interface Client {
  apiKey: string;
  principal: string;
}

/**
 * GraphQL over HTTP at /graphql, following the GraphQL-over-HTTP spec: POST with a JSON body for
 * everything, GET with URL parameters for queries only (a browser's GET is the console's, see
 * routes/console.ts). The key is checked first, to refuse a bad key before reading the body; the
 * engine checks the key again inside the request's transaction (a key rotated meanwhile is refused).
 */
export async function serveGraphql(runtime: Runtime, exchange: Exchange, url: URL): Promise<void> {
  const { req, res, trace } = exchange;
  const mediaType = chooseMediaType(req.headers.accept ?? '');
  trace.graphql = true;
  const client = authenticate(runtime.engine, req.headers.authorization);
  if (client instanceof EngineError) {
    if (req.method === 'POST') req.resume();
    return sendUnauthenticated(exchange, mediaType, client);
  }
  trace.principal = client.principal;
  if (req.method === 'GET') return serveGet(runtime, exchange, url, mediaType, client);
  if (req.method !== 'POST') {
    res.setHeader('allow', 'GET, POST');
    return sendErrors(exchange, 405, mediaType, [
      new EngineError('BAD_REQUEST', `method ${req.method} is not allowed on /graphql`, {
        hint: 'Use POST (or GET for queries).',
      }),
    ]);
  }
  return servePost(runtime, exchange, mediaType, client);
}

/** GET: a query in the URL's parameters; a mutation is refused (405), as the spec asks. */
async function serveGet(
  runtime: Runtime,
  exchange: Exchange,
  url: URL,
  mediaType: string,
  client: Client,
): Promise<void> {
  const request = requestFromSearchParams(url.searchParams);
  if (request instanceof EngineError) return sendErrors(exchange, 400, mediaType, [request]);
  const operation = traceOperation(runtime.engine, exchange.trace, request);
  if (operation?.type === 'mutation') {
    exchange.res.setHeader('allow', 'POST');
    return sendErrors(exchange, 405, mediaType, [
      new EngineError('BAD_REQUEST', 'mutations must be sent with POST', { hint: 'POST the request as JSON.' }),
    ]);
  }
  const options = { apiKey: client.apiKey };
  const result = await runForExchange(runtime, exchange, request, operation, options, client.principal, 0);
  return sendResult(exchange, mediaType, result);
}

/** POST: a JSON body (415 for another type), read within requestBodyBytesMax. */
async function servePost(runtime: Runtime, exchange: Exchange, mediaType: string, client: Client): Promise<void> {
  const { req } = exchange;
  const contentType = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
  if (contentType !== 'application/json') {
    return sendErrors(exchange, 415, mediaType, [
      new EngineError('BAD_REQUEST', `content-type ${quote(req.headers['content-type'] ?? '')} is not supported`, {
        hint: 'Send the body as application/json.',
      }),
    ]);
  }
  const body = await readBody(req, runtime.engine.limits.requestBodyBytesMax);
  if (body instanceof EngineError) return sendBodyRefused(exchange, mediaType, body);
  const request = requestFromBody(body);
  if (request instanceof EngineError) return sendErrors(exchange, 400, mediaType, [request]);
  const operation = traceOperation(runtime.engine, exchange.trace, request);
  const options = { apiKey: client.apiKey, ...transportOf(req) };
  const result = await runForExchange(
    runtime,
    exchange,
    request,
    operation,
    options,
    client.principal,
    Buffer.byteLength(body),
  );
  return sendResult(exchange, mediaType, result);
}

/** `tally mcp --server` proxies MCP tool calls here and says so: its executions record the transport. */
function transportOf(req: IncomingMessage): { transport?: 'mcp' } {
  return req.headers['tally-transport'] === 'mcp' ? { transport: 'mcp' as const } : {};
}

/**
 * Runtime.run, for an HTTP request: the client going away ends its waits (its slot among
 * executionWaitersMax is freed at once) and drops it while it still waits for its turn; the waits
 * end in time to answer within requestTimeoutMs of the request's start (less a margin for the answer).
 */
async function runForExchange(
  runtime: Runtime,
  exchange: Exchange,
  request: GraphqlRequest,
  operation: OperationSummary | undefined,
  options: RequestOptions,
  principal: string,
  bytes: number,
): Promise<FormattedResult> {
  const { req, res } = exchange;
  const gone = new AbortController();
  const abort = () => gone.abort();
  res.once('close', abort);
  req.socket.once('close', abort);
  try {
    const timeoutMs = runtime.engine.limits.requestTimeoutMs;
    const margin = Math.min(1000, Math.floor(timeoutMs / 10));
    const waitMsMax =
      timeoutMs > 0
        ? Math.max(0, Math.floor(timeoutMs - margin - (performance.now() - exchange.trace.startedMs)))
        : undefined;
    // A mutation is never dropped: once sent, it is the client's to learn whether it was written.
    const signal = operation?.type === 'mutation' ? {} : { signal: gone.signal };
    return await runtime.run(request, operation, options, principal, bytes, {
      ...signal,
      ...(waitMsMax === undefined ? {} : { waitMsMax }),
    });
  } finally {
    res.off('close', abort);
    req.socket.off('close', abort);
  }
}

/** application/graphql-response+json when the client accepts it, otherwise application/json. */
function chooseMediaType(accept: string): string {
  return accept.includes(GRAPHQL_RESPONSE) ? GRAPHQL_RESPONSE : 'application/json';
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
    return new EngineError('BAD_REQUEST', `query must be a string, got ${quote(query)}`, {
      hint: 'Send {"query": "{ journal { name } }"}.',
    });
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
  return {
    query,
    variables: (variables as Record<string, unknown> | null) ?? null,
    operationName: (operationName as string | null) ?? null,
  };
}

/** The codes of a request stopped before it ran because its document did not parse, validate or fit the limits. */
const NOT_RUN = new Set(['GRAPHQL_PARSE_FAILED', 'GRAPHQL_VALIDATION_FAILED', 'LIMIT_EXCEEDED', 'BAD_REQUEST']);

/** The result's status: 401 for a key refused in the transaction, 503 for no room, and what the media type says. */
function sendResult(exchange: Exchange, mediaType: string, result: FormattedResult): void {
  const code = result.errors?.[0]?.extensions?.code;
  // Traced from its parse alone: it did not validate, so it ran as nothing.
  if (result.data === undefined && typeof code === 'string' && NOT_RUN.has(code)) untraceOperation(exchange.trace);
  if (result.data === undefined && result.errors?.[0]?.extensions?.code === 'UNAUTHENTICATED') {
    // The key stopped being valid between its first check and the request's transaction.
    exchange.res.setHeader('www-authenticate', 'Bearer realm="tally"');
    return send(exchange, 401, mediaType, result);
  }
  // Nothing ran because there was no room (a full write queue or read queue, the database busy): 503, try again shortly.
  if ((result.data === undefined || result.data === null) && result.errors?.[0]?.extensions?.code === 'BUSY') {
    exchange.res.setHeader('retry-after', '1');
    return send(exchange, 503, mediaType, result);
  }
  // application/graphql-response+json: a request that never executed (no `data`) is a 400.
  const status = mediaType === GRAPHQL_RESPONSE && result.data === undefined ? 400 : 200;
  send(exchange, status, mediaType, result);
}
