#!/usr/bin/env node
// Runs the TypeScript CLI directly through tsx's loader.
import { register } from 'tsx/esm/api';

// graphql-js skips its development-only checks in production (~10 % of a small request); it reads
// this once, when it loads, which is below.
process.env.NODE_ENV ??= 'production';
register();
await import('../src/cli/main.ts');
