#!/usr/bin/env node
// The browser test (test/http.browser.test.ts) drives Debian's chromium. `npm test` runs this first
// (the "pretest" script) so a machine without it hears so before the suite starts, not from a stack
// trace at the end; the browser test fails with the same message. Node only, no dependencies.
import { accessSync, constants } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const CHROMIUM = '/usr/bin/chromium';

export const CHROMIUM_MISSING =
  `Debian chromium is not installed at ${CHROMIUM}; test/http.browser.test.ts (GraphiQL in a real browser) needs it and fails without it.\n` +
  'Install it, then run the tests again:  apt-get update && apt-get install -y chromium  (as root; otherwise with sudo)';

/** Whether chromium is there and executable. */
export function chromiumInstalled() {
  try {
    accessSync(CHROMIUM, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url) && !chromiumInstalled()) {
  process.stderr.write(`\nwarning: ${CHROMIUM_MISSING}\n\n`);
}
