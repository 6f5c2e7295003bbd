import { invalidKey } from '../auth/clients.js';
import type { Engine } from '../engine.js';
import { EngineError } from '../errors.js';
import { sendErrors } from './reply.js';
import type { Exchange } from './trace.js';

/**
 * The API key of `Authorization: Bearer <api key>` and its client's principal, or UNAUTHENTICATED.
 * Routes check it before reading a body, so a bad key costs no more than its headers; the engine
 * checks the key again inside the request's transaction (a key rotated meanwhile is refused).
 */
export function authenticate(
  engine: Engine,
  header: string | undefined,
): { apiKey: string; principal: string } | EngineError {
  if (!header) {
    return new EngineError('UNAUTHENTICATED', 'the request has no Authorization header', {
      hint: 'Send `Authorization: Bearer <api key>`.',
    });
  }
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match) {
    return new EngineError('UNAUTHENTICATED', 'the Authorization header is not `Bearer <api key>`', {
      hint: 'Send `Authorization: Bearer <api key>`.',
    });
  }
  const principal = engine.authenticate(match[1]!);
  if (!principal) return invalidKey();
  return { apiKey: match[1]!, principal };
}

/** 401 with the challenge RFC 6750 asks for. */
export function sendUnauthenticated(exchange: Exchange, mediaType: string, error: EngineError): void {
  exchange.res.setHeader('www-authenticate', 'Bearer realm="tally"');
  sendErrors(exchange, 401, mediaType, [error]);
}
