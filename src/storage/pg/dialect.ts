/**
 * SQLite's dialect, as the statements modules write it, to PostgreSQL's (issue 19). The statements
 * stay written once where the two dialects agree (most of them: SELECT, UPDATE … RETURNING,
 * INSERT … ON CONFLICT DO UPDATE, window functions, recursive CTEs); this module rewrites what
 * differs mechanically, and a statement whose meaning differs has its PostgreSQL twin beside it.
 *
 * What is rewritten:
 * - parameters: `?` (positional) and `@name`, `:name`, `$name` (better-sqlite3's named forms) become
 *   `$1`, `$2`, … in order of first use; `bind` lists, for each, where its value comes from;
 * - `INSERT OR IGNORE INTO …` becomes `INSERT INTO … ON CONFLICT DO NOTHING`;
 * - `ifnull(` becomes `coalesce(`;
 * - `BEGIN IMMEDIATE` / `BEGIN DEFERRED` become `BEGIN` (the write lock is PostgreSQL's row locks);
 * - `WITHOUT ROWID` (DDL) goes;
 * - the column `window` (lower case; the keyword is written WINDOW) is quoted;
 * - `json_each(?)`, a JSON array parameter as a table of its values, is json_array_elements_text;
 * - `column -> ? ->> n` (a TEXT column's member by a parameter's key, then its n-th element) casts
 *   the column to json.
 * Text inside string literals, quoted identifiers and comments is never rewritten.
 */

/** Where the value of `$n` comes from: the n-th positional argument, or a key of the named-argument object. */
export type Binding = { kind: 'positional'; index: number } | { kind: 'named'; name: string };

export interface Translated {
  text: string;
  bindings: Binding[];
  /** Whether the statement returns rows (a query, or a write with RETURNING). */
  returnsRows: boolean;
}

/** The spans of `sql` that are code (not literals, quoted identifiers or comments), as [start, end) pairs. */
function codeSpans(sql: string): Array<[number, number]> {
  const spans: Array<[number, number]> = [];
  let start = 0;
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    if (c === "'" || c === '"') {
      spans.push([start, i]);
      i++;
      while (i < sql.length) {
        if (sql[i] === c) {
          if (sql[i + 1] === c) i += 2;
          else break;
        } else i++;
      }
      i++;
      start = i;
    } else if (c === '-' && sql[i + 1] === '-') {
      spans.push([start, i]);
      while (i < sql.length && sql[i] !== '\n') i++;
      start = i;
    } else if (c === '/' && sql[i + 1] === '*') {
      spans.push([start, i]);
      const end = sql.indexOf('*/', i + 2);
      i = end === -1 ? sql.length : end + 2;
      start = i;
    } else i++;
  }
  spans.push([start, sql.length]);
  return spans.filter(([a, b]) => b > a);
}

/** Rewrite the code parts of `sql` with `rewrite`, leaving literals, quoted identifiers and comments as they are. */
function mapCode(sql: string, rewrite: (code: string) => string): string {
  let out = '';
  let at = 0;
  for (const [a, b] of codeSpans(sql)) {
    out += sql.slice(at, a) + rewrite(sql.slice(a, b));
    at = b;
  }
  return out + sql.slice(at);
}

export function toPostgres(sql: string): Translated {
  const bindings: Binding[] = [];
  const named = new Map<string, number>();
  let positional = 0;
  let text = mapCode(sql, (code) =>
    code
      .replace(/\bINSERT\s+OR\s+IGNORE\s+INTO\b/gi, 'INSERT /*or ignore*/ INTO')
      .replace(/\bifnull\s*\(/gi, 'coalesce(')
      .replace(/\bBEGIN\s+(IMMEDIATE|DEFERRED)\b/gi, 'BEGIN')
      .replace(/\bWITHOUT\s+ROWID\b/gi, '')
      // Positional and named parameters, in the order they appear.
      .replace(/\?|(?<![:\w])[@:$][A-Za-z_]\w*/g, (token) => {
        if (token === '?') {
          bindings.push({ kind: 'positional', index: positional++ });
          return `$${bindings.length}`;
        }
        const name = token.slice(1);
        let n = named.get(name);
        if (n === undefined) {
          bindings.push({ kind: 'named', name });
          n = bindings.length;
          named.set(name, n);
        }
        return `$${n}`;
      })
      // velocity_balances.window: a column in SQLite, a keyword in PostgreSQL (the statements write
      // the keyword WINDOW in capitals; a parameter @window is numbered above).
      .replace(/\bwindow\b/g, '"window"')
      // A JSON array parameter read as a table of its values (`SELECT value FROM json_each(?)`).
      .replace(/\bjson_each\((\$\d+)\)/g, 'json_array_elements_text(CAST($1 AS json))')
      // A JSON column's member by a parameter's key (`column -> @key ->> n`): SQLite reads the
      // text as JSON, PostgreSQL needs it cast.
      .replace(/\b([A-Za-z_][\w.]*)\s*->\s*(\$\d+)\s*->>/g, 'CAST($1 AS json) -> $2 ->>'),
  );
  if (text.includes('/*or ignore*/')) {
    text = text.replace('/*or ignore*/ ', '');
    const returning = /\bRETURNING\b/i.exec(text);
    text = returning
      ? `${text.slice(0, returning.index)}ON CONFLICT DO NOTHING ${text.slice(returning.index)}`
      : `${text.trimEnd().replace(/;$/, '')} ON CONFLICT DO NOTHING`;
  }
  const code = codeSpans(text)
    .map(([a, b]) => text.slice(a, b))
    .join(' ');
  const head = /^\s*(\w+)/.exec(code)?.[1]?.toUpperCase();
  const returnsRows =
    /\bRETURNING\b/i.test(code) ||
    head === 'SELECT' ||
    head === 'VALUES' ||
    head === 'SHOW' ||
    // A WITH whose statement is a write (without RETURNING) returns nothing.
    (head === 'WITH' && !/\)\s*(INSERT|UPDATE|DELETE)\b/i.test(code));
  return { text, bindings, returnsRows };
}
