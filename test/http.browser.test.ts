import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { auditServer } from 'graphql-http';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer } from './helpers.js';

const KEY = 'tly_browser-test-key';
const CHROMIUM = '/usr/bin/chromium';
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
      fetch(input, { ...init, headers: { ...(init.headers as Record<string, string>), authorization: `Bearer ${KEY}` } });
    const results = await auditServer({ url, fetchFn });
    expect(results.length).toBeGreaterThan(50);
    const notOk = results.filter((r) => r.status !== 'ok').map((r) => `${r.status} ${r.id} ${r.name}`);
    expect(notOk).toEqual([]);
  });
});

describe('GraphiQL in a real browser', () => {
  it('loads GraphiQL with the key pre-filled from ?key=, runs a query and shows the result', async () => {
    expect(existsSync(CHROMIUM), 'Debian chromium is installed (.ci/run installs it)').toBe(true);
    const browser = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'tally-chromium-')), {
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    try {
      const page = await browser.newPage();
      await page.goto(`${url}?key=${KEY}&q=${encodeURIComponent('{ journal { code name } }')}`);
      await page.waitForSelector('.graphiql-execute-button', { timeout: 20_000 });
      expect(await page.title()).toBe('Tally GraphQL');
      await page.click('.graphiql-execute-button');
      await page.waitForFunction('document.querySelector(".result-window")?.textContent?.includes("DEFAULT")', null, { timeout: 20_000 });
      const result = await page.textContent('.result-window');
      expect(result).toContain('"name": "Default"');
      // The key went in the headers editor, and requests without it are refused.
      const headersTab = await page.evaluate('sessionStorage.getItem("tally.key")');
      expect(headersTab).toBe(KEY);
    } finally {
      await browser.close();
    }
  }, 60_000);
});
