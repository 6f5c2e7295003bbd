/**
 * A small, self-contained query console for browsers (no external assets: this machine and many
 * deployments have no CDN access). Sends the API key, if given, as a Bearer token.
 */
export function consolePage(): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Tally GraphQL</title>
<style>
  body { font: 14px system-ui, sans-serif; margin: 0; display: grid; grid-template-rows: auto 1fr; height: 100vh; }
  header { padding: 8px 12px; background: #1d2733; color: #fff; display: flex; gap: 12px; align-items: center; }
  header input { flex: 1; max-width: 420px; }
  main { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; padding: 8px; min-height: 0; }
  textarea, pre { font: 13px ui-monospace, monospace; margin: 0; border: 1px solid #ccd; padding: 8px; overflow: auto; }
  section { display: grid; grid-template-rows: 2fr 1fr; gap: 8px; min-height: 0; }
</style>
</head>
<body>
<header>
  <strong>Tally</strong>
  <label>API key <input id="key" type="password" autocomplete="off"></label>
  <button id="run" type="button">Run (Ctrl+Enter)</button>
</header>
<main>
  <section>
    <textarea id="query" spellcheck="false" aria-label="query">{
  journal { journalId name status }
}</textarea>
    <textarea id="variables" spellcheck="false" aria-label="variables">{}</textarea>
  </section>
  <pre id="result" aria-label="result"></pre>
</main>
<script>
  const params = new URLSearchParams(location.search);
  const keyInput = document.getElementById('key');
  keyInput.value = params.get('key') || sessionStorage.getItem('tally.key') || '';
  async function run() {
    sessionStorage.setItem('tally.key', keyInput.value);
    const headers = { 'content-type': 'application/json', accept: 'application/graphql-response+json, application/json' };
    if (keyInput.value) headers.authorization = 'Bearer ' + keyInput.value;
    let variables = {};
    try { variables = JSON.parse(document.getElementById('variables').value || '{}'); }
    catch (e) { document.getElementById('result').textContent = 'variables: ' + e.message; return; }
    const response = await fetch(location.pathname, { method: 'POST', headers,
      body: JSON.stringify({ query: document.getElementById('query').value, variables }) });
    document.getElementById('result').textContent = JSON.stringify(await response.json(), null, 2);
  }
  document.getElementById('run').addEventListener('click', run);
  document.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) run(); });
</script>
</body>
</html>`;
}
