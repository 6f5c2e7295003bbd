import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);

/**
 * GraphiQL, served from the installed packages (no CDN: this machine and many deployments have no
 * outside network). The API key comes from `?key=` or a prompt, and is pre-filled in the headers
 * editor as `Authorization: Bearer <key>`; `?q=` pre-fills the query. The key is then taken out of
 * the address (history.replaceState), so it does not stay in the address bar, the history or a
 * shared link; the tab keeps it in sessionStorage for a reload.
 */
export const ASSETS: Record<string, { pkg: string; file: string; type: string }> = {
  'react.js': { pkg: 'react', file: 'umd/react.production.min.js', type: 'text/javascript' },
  'react-dom.js': { pkg: 'react-dom', file: 'umd/react-dom.production.min.js', type: 'text/javascript' },
  'graphiql.js': { pkg: 'graphiql', file: 'graphiql.min.js', type: 'text/javascript' },
  'graphiql.css': { pkg: 'graphiql', file: 'graphiql.min.css', type: 'text/css' },
};

/** The GraphiQL files, read once per server. */
export function assetReader(): (name: string) => { body: Buffer; type: string } | null {
  const cache = new Map<string, Buffer>();
  return (name) => {
    const entry = Object.hasOwn(ASSETS, name) ? ASSETS[name] : undefined;
    if (!entry) return null;
    let body = cache.get(name);
    if (!body) {
      // Package "exports" maps hide these files from require.resolve; find them from the package root.
      body = readFileSync(join(dirname(require.resolve(`${entry.pkg}/package.json`)), entry.file));
      cache.set(name, body);
    }
    return { body, type: entry.type };
  };
}

export function consolePage(): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Tally GraphQL</title>
<link rel="stylesheet" href="/graphql/assets/graphiql.css">
<style>html, body, #graphiql { height: 100%; margin: 0; }</style>
</head>
<body>
<div id="graphiql">Loading GraphiQL…</div>
<script src="/graphql/assets/react.js"></script>
<script src="/graphql/assets/react-dom.js"></script>
<script src="/graphql/assets/graphiql.js"></script>
<script>
  const params = new URLSearchParams(location.search);
  let key = params.get('key') || sessionStorage.getItem('tally.key');
  if (!key) key = window.prompt('Tally API key (Authorization: Bearer …)') || '';
  sessionStorage.setItem('tally.key', key);
  if (params.has('key')) {
    params.delete('key');
    const search = params.toString();
    history.replaceState(history.state, '', location.pathname + (search ? '?' + search : '') + location.hash);
  }
  const fetcher = GraphiQL.createFetcher({ url: location.origin + location.pathname });
  ReactDOM.createRoot(document.getElementById('graphiql')).render(
    React.createElement(GraphiQL, {
      fetcher,
      headers: JSON.stringify({ Authorization: 'Bearer ' + key }, null, 2),
      defaultQuery: params.get('q') || '{\\n  journal { journalId name status }\\n}\\n',
      isHeadersEditorEnabled: true,
      shouldPersistHeaders: false,
    }),
  );
</script>
</body>
</html>`;
}
