import { type assetReader, consolePage } from '../console-page.js';
import type { Exchange } from '../trace.js';

/**
 * GET /graphql/assets/<name>: GraphiQL's files, from the installed packages. False for a name that
 * is not one of them (the router then answers 404).
 */
export function serveAsset(asset: ReturnType<typeof assetReader>, exchange: Exchange, url: URL): boolean {
  const found = asset(url.pathname.slice('/graphql/assets/'.length));
  if (!found) return false;
  exchange.res
    .writeHead(200, {
      'content-type': `${found.type}; charset=utf-8`,
      'cache-control': 'public, max-age=86400',
      'content-length': found.body.length,
    })
    .end(found.body);
  return true;
}

/**
 * GET /graphql from a browser (it accepts text/html, and asks no query): the GraphiQL console.
 * False for any other GET, which is GraphQL over HTTP.
 */
export function serveConsolePage(exchange: Exchange, url: URL): boolean {
  const accept = exchange.req.headers.accept ?? '';
  if (!accept.includes('text/html') || url.searchParams.has('query')) return false;
  // GraphiQL itself holds no data; its requests carry the key like any other.
  exchange.res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(consolePage());
  return true;
}

/** GET /: to the console (and GraphQL) at /graphql. */
export function redirectToConsole(exchange: Exchange): boolean {
  exchange.res.writeHead(302, { location: '/graphql' }).end();
  return true;
}
