import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type Metafile } from 'esbuild';
import { beforeAll, describe, expect, it } from 'vitest';

/*
 * The house rules, checked over the code as it is (TigerBeetle's tidy.zig, in spirit): the import
 * graph has no cycle, each part imports only the parts below it (DESIGN §2), resolvers reach the
 * domain through facades, and files stay a size one can read. The graph is the one that runs:
 * esbuild resolves every import of src/ and sandbox/ and drops the imports only types use, as the
 * TypeScript compiler does.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** What each part may import (besides itself and the leaf modules at the top of src/). */
const MAY_IMPORT: Record<string, readonly string[]> = {
  leaf: [],
  storage: [],
  cel: [],
  models: [],
  sandbox: [],
  // The world outside (DESIGN §11): the operator's integrations and MCP servers, and what one call is handed.
  integrations: ['cel', 'models', 'actions'],
  policy: ['cel'],
  ledger: ['cel', 'storage', 'policy'],
  actions: ['cel', 'storage', 'policy'],
  skills: ['actions', 'storage'],
  auth: ['cel', 'policy', 'storage', 'ledger'],
  // Execution runs what actions define; the kinds that run outside transactions (agents) are
  // handed to it by the composition root, never imported (see execution/queue/outside-runs.ts).
  execution: ['cel', 'policy', 'storage', 'ledger', 'actions', 'skills', 'auth', 'sandbox', 'models', 'integrations'],
  agents: ['cel', 'policy', 'storage', 'ledger', 'actions', 'skills', 'auth', 'execution', 'models', 'integrations'],
  graphql: ['cel', 'policy', 'storage', 'ledger', 'actions', 'skills', 'auth', 'execution', 'agents', 'deploy'],
  engine: [
    'cel',
    'policy',
    'storage',
    'ledger',
    'actions',
    'skills',
    'auth',
    'execution',
    'agents',
    'graphql',
    'models',
    'integrations',
    'sandbox',
  ],
  runtime: ['engine', 'execution', 'graphql', 'storage', 'auth'],
  mcp: ['engine', 'runtime', 'execution', 'graphql', 'auth'],
  server: ['engine', 'runtime', 'graphql', 'mcp', 'auth', 'models', 'integrations', 'execution', 'storage'],
  deploy: ['engine', 'runtime', 'actions', 'storage', 'server'],
  cli: ['engine', 'runtime', 'server', 'mcp', 'deploy', 'execution', 'storage', 'graphql', 'auth', 'integrations'],
};

/**
 * Files past FILE_LINES_MAX, each with why it is one file, and the length it may not grow past
 * (a ratchet: shrink the number when the file shrinks).
 */
const FILE_LINES_MAX = 600;
const LONG_FILES: Record<string, { lines: number; why: string }> = {
  'src/limits.ts': {
    lines: 1275,
    why: 'the one table of every limit (default, doc, group, bounds) and the fixed bounds: one table by design, mostly doc text',
  },
  'src/storage/migrations.ts': {
    lines: 812,
    why: 'twenty-two migrations as the SQL text each version applied: frozen history, read top to bottom (numbered files per dialect come with the PostgreSQL adapter, issue 39)',
  },
  'src/runtime/read-pool.ts': {
    lines: 675,
    why: 'one class: a pool of read threads with client turns, restarts and WAL-drain holds, whose parts share the slots and the queue',
  },
};

/** The part a file belongs to: its folder under src/ (src/engine.ts is the engine's), or sandbox. */
function partOf(file: string): string {
  const parts = file.split('/');
  if (parts[0] === 'sandbox') return 'sandbox';
  if (parts.length === 2) return parts[1] === 'engine.ts' ? 'engine' : 'leaf';
  return parts[1]!;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(join(ROOT, path)).isDirectory()) return name === 'guest' ? [] : sourceFiles(path);
    return /\.(ts|mjs)$/.test(name) && !name.endsWith('.d.ts') ? [path] : [];
  });
}

/** Every file's imports that run (type-only ones dropped), as paths from the project root. */
async function importGraph(): Promise<Map<string, string[]>> {
  const entryPoints = [...sourceFiles('src'), ...sourceFiles('sandbox')];
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints,
    bundle: true,
    write: false,
    metafile: true,
    platform: 'node',
    format: 'esm',
    packages: 'external',
    outdir: 'tidy-out',
    logLevel: 'silent',
    loader: { '.graphql': 'text' },
  });
  const inputs: Metafile['inputs'] = result.metafile.inputs;
  const graph = new Map<string, string[]>();
  for (const [file, input] of Object.entries(inputs)) {
    graph.set(
      file,
      input.imports.filter((i) => !i.external).map((i) => i.path),
    );
  }
  return graph;
}

/** The strongly connected components of more than one file (Tarjan): each is an import cycle. */
function cycles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1) found.push(component.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

describe('the house rules', () => {
  let graph: Map<string, string[]>;
  beforeAll(async () => {
    graph = await importGraph();
  });

  it('no import cycle among the modules of src/ and sandbox/', () => {
    expect(graph.size).toBeGreaterThan(100);
    expect(cycles(graph)).toEqual([]);
  });

  it('each part imports only the parts below it (DESIGN §2); execution never imports agents', () => {
    const wrong: string[] = [];
    for (const [file, imports] of graph) {
      const from = partOf(file);
      const allowed = MAY_IMPORT[from];
      if (!allowed) {
        wrong.push(`${file}: part ${from} is not in MAY_IMPORT`);
        continue;
      }
      for (const target of imports) {
        const to = partOf(target);
        if (to !== from && to !== 'leaf' && !allowed.includes(to))
          wrong.push(`${file} (${from}) imports ${target} (${to})`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('the leaf modules at the top of src/ import no part', () => {
    const wrong = [...graph]
      .filter(([file]) => partOf(file) === 'leaf')
      .flatMap(([file, imports]) => imports.filter((t) => partOf(t) !== 'leaf').map((t) => `${file} imports ${t}`));
    expect(wrong).toEqual([]);
  });

  it('resolvers reach the domain through facades: no resolver runs a storage module, imports one, or reads statements', () => {
    const resolvers = sourceFiles('src/graphql/resolvers');
    expect(resolvers).toContain('src/graphql/resolvers/actions.ts');
    const wrong = [...graph]
      .filter(([file]) => file.startsWith('src/graphql/resolvers/'))
      .flatMap(([file, imports]) => imports.filter((t) => partOf(t) === 'storage').map((t) => `${file} runs ${t}`));
    // Even for a type, and the statements the executions, sessions and deployments facades own.
    for (const file of resolvers) {
      for (const [i, line] of readFileSync(join(ROOT, file), 'utf8').split('\n').entries()) {
        if (/from '(\.\.\/)+storage\//.test(line) || /\bservices\.(st|queue|sessions|deployments)\b/.test(line))
          wrong.push(`${file}:${i + 1}: ${line.trim()}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it(`engine.ts is wiring (at most 250 lines), and no file of src/ passes ${FILE_LINES_MAX} lines without a reason`, () => {
    const lines = (file: string) => readFileSync(join(ROOT, file), 'utf8').split('\n').length;
    expect(lines('src/engine.ts')).toBeLessThanOrEqual(250);
    const wrong: string[] = [];
    for (const file of [...sourceFiles('src'), ...sourceFiles('sandbox')]) {
      const n = lines(file);
      const known = LONG_FILES[file];
      if (known ? n > known.lines : n > FILE_LINES_MAX)
        wrong.push(`${file}: ${n} lines (${known ? `its ratchet is ${known.lines}` : `past ${FILE_LINES_MAX}`})`);
    }
    for (const file of Object.keys(LONG_FILES)) {
      try {
        statSync(join(ROOT, file));
      } catch {
        wrong.push(`${file} is listed in LONG_FILES but does not exist`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('the checks can fail: a cycle and a wrong import are found', () => {
    const made = new Map([
      ['src/execution/a.ts', ['src/agents/b.ts']],
      ['src/agents/b.ts', ['src/execution/a.ts']],
    ]);
    expect(cycles(made)).toEqual([['src/agents/b.ts', 'src/execution/a.ts']]);
    expect(MAY_IMPORT.execution).not.toContain(partOf('src/agents/b.ts'));
    expect(relative(ROOT, join(ROOT, 'src'))).toBe('src');
  });
});
