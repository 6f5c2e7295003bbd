import type { IncomingMessage } from 'node:http';
import { EngineError, limitExceeded } from '../errors.js';
import { sendErrors } from './reply.js';
import type { Exchange } from './trace.js';

/**
 * A request's body as text, read within bytesMax: a declared Content-Length over it is refused
 * before any byte is read, and a body that grows past it is refused as soon as it does (the rest
 * is drained, not kept). LIMIT_EXCEEDED then, or BAD_REQUEST when the body could not be read.
 */
export function readBody(req: IncomingMessage, bytesMax: number): Promise<string | EngineError> {
  return new Promise((resolve) => {
    const declared = Number(req.headers['content-length'] ?? '0');
    if (declared > bytesMax) {
      req.resume();
      resolve(
        limitExceeded(
          'requestBodyBytesMax',
          bytesMax,
          declared,
          `the request body is ${declared} bytes; requestBodyBytesMax is ${bytesMax}`,
        ),
      );
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
        resolve(
          limitExceeded(
            'requestBodyBytesMax',
            bytesMax,
            size,
            `the request body is over requestBodyBytesMax (${bytesMax} bytes)`,
          ),
        );
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

/** A body readBody refused: 413 over the limit (400 otherwise), and the connection closed after the answer. */
export function sendBodyRefused(exchange: Exchange, mediaType: string, error: EngineError): void {
  exchange.res.setHeader('connection', 'close');
  sendErrors(exchange, error.code === 'LIMIT_EXCEEDED' ? 413 : 400, mediaType, [error]);
}
