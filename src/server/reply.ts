import type { EngineError } from '../errors.js';
import type { Exchange } from './trace.js';

/** Answer with `errors` alone (a request refused before it ran). */
export function sendErrors(exchange: Exchange, status: number, mediaType: string, errors: EngineError[]): void {
  send(exchange, status, mediaType, { errors: errors.map((e) => ({ message: e.message, extensions: e.extensions })) });
}

/** Answer with a JSON body; the request's trace takes its outcome from the body's first error code. */
export function send(
  exchange: Exchange,
  status: number,
  mediaType: string,
  body: { errors?: ReadonlyArray<{ extensions?: Record<string, unknown> }> } | object,
): void {
  const { res, trace } = exchange;
  const code = 'errors' in body ? body.errors?.[0]?.extensions?.code : undefined;
  trace.outcome = typeof code === 'string' ? code : 'ok';
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': `${mediaType}; charset=utf-8`, 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
