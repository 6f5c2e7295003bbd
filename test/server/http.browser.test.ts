import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { auditServer } from 'graphql-http';
import { chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM, CHROMIUM_MISSING, chromiumInstalled } from '../helpers/chromium.mjs';
import { startServer } from '../helpers/server.js';

const KEY = 'tly_browser-test-key';
/** Set TALLY_SCREENSHOTS=<dir> to keep what the browser showed at each step. */
const SCREENSHOTS = process.env.TALLY_SCREENSHOTS;
let running: Awaited<ReturnType<typeof startServer>>;
let url: string;

beforeAll(async () => {
  running = await startServer(KEY);
  url = running.url;
});

afterAll(() => running.stop());

describe('GraphQL over HTTP conformance', () => {
  it('passes every audit of the graphql-http suite (serverAudits) against the live server', async () => {
    const fetchFn = (input: string | URL | Request, init: RequestInit = {}) =>
      fetch(input, {
        ...init,
        headers: { ...(init.headers as Record<string, string>), authorization: `Bearer ${KEY}` },
      });
    const results = await auditServer({ url, fetchFn });
    expect(results.length).toBeGreaterThan(50);
    const notOk = results.filter((r) => r.status !== 'ok').map((r) => `${r.status} ${r.id} ${r.name}`);
    expect(notOk).toEqual([]);
  });
});

describe('GraphiQL in a real browser', () => {
  it('loads the schema (Docs lists Query and Mutation, `{ bal` suggests balance), runs a query, and takes the key out of the address', async () => {
    if (!chromiumInstalled()) {
      // The message alone, as `npm test` printed it before the suite started: no stack to read past.
      const missing = new Error(CHROMIUM_MISSING);
      missing.stack = `Error: ${CHROMIUM_MISSING}`;
      throw missing;
    }
    const browser = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'tally-chromium-')), {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1280, height: 800 },
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    try {
      const page = await browser.newPage();
      const responses: string[] = [];
      page.on('response', (response) => {
        if (response.request().method() === 'POST') responses.push(response.url());
      });
      await page.goto(`${url}?key=${KEY}&q=${encodeURIComponent('{ journal { code name } }')}`);
      await page.waitForSelector('.graphiql-execute-button', { timeout: 20_000 });
      expect(await page.title()).toBe('Tally GraphQL');
      // The key went to the headers editor (and the tab's sessionStorage) and left the address; ?q= stays.
      const address = new URL(page.url());
      expect([address.pathname, address.searchParams.has('key'), address.searchParams.get('q')]).toEqual([
        '/graphql',
        false,
        '{ journal { code name } }',
      ]);
      expect(await page.evaluate('sessionStorage.getItem("tally.key")')).toBe(KEY);

      // The Docs pane: the schema loaded (GraphiQL's introspection query was answered).
      await page.click('.graphiql-sidebar button[aria-label="Show Documentation Explorer"]');
      await page.waitForSelector('.graphiql-doc-explorer-root-type', { timeout: 20_000 });
      const docs = await page.textContent('.graphiql-doc-explorer');
      expect(docs).not.toContain('Error fetching schema');
      expect(docs).toMatch(/query:\s*Query/);
      expect(docs).toMatch(/mutation:\s*Mutation/);
      // Nothing on first paint: the result pane used to show the refused introspection query.
      expect(await page.textContent('.result-window')).not.toContain('errors');
      await screenshot(page, 'docs');

      // Autocomplete from the schema: typing `{ bal` suggests `balance`.
      await page.click('.graphiql-query-editor .CodeMirror');
      await page.keyboard.press('Control+A');
      await page.keyboard.press('Backspace');
      await page.keyboard.type('{ bal');
      await page.waitForSelector('.CodeMirror-hints .CodeMirror-hint', { timeout: 20_000 });
      const hints = await page.$$eval('.CodeMirror-hints .CodeMirror-hint', (items) =>
        items.map((item) => item.textContent?.trim()),
      );
      expect(hints).toContain('balance');
      await screenshot(page, 'autocomplete');
      await page.keyboard.press('Escape');

      // A query runs with the key from the headers editor, and its result is shown.
      await page.click('.graphiql-query-editor .CodeMirror');
      await page.keyboard.press('Control+A');
      await page.keyboard.press('Backspace');
      await page.keyboard.insertText('{ journal { code name } }');
      await page.click('.graphiql-execute-button');
      await page.waitForFunction('document.querySelector(".result-window")?.textContent?.includes("DEFAULT")', null, {
        timeout: 20_000,
      });
      const result = await page.textContent('.result-window');
      expect(result).toContain('"name": "Default"');
      expect(result).not.toContain('errors');
      await screenshot(page, 'result');
      expect(responses.length).toBeGreaterThanOrEqual(2); // the introspection query and ours
      expect(responses.every((address) => !address.includes(KEY))).toBe(true);
      expect(page.url()).not.toContain(KEY);
    } finally {
      await browser.close();
    }
  }, 60_000);
});

async function screenshot(page: Page, step: string): Promise<void> {
  if (SCREENSHOTS) await page.screenshot({ path: join(SCREENSHOTS, `graphiql-${step}.png`) });
}
