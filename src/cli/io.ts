/*
 * What every command is handed (its options, and an Io to talk through) and how commands show
 * things: a progress bar, an execution's error, a table.
 */

export interface Options {
  db?: string;
  server?: string;
  key?: string;
  project?: string;
  json?: boolean;
  [name: string]: string | boolean | string[] | undefined;
}

export interface Io {
  out(text: string): void;
  err(text: string): void;
  /** Whether stderr is a terminal (progress bars are drawn only there). */
  tty: boolean;
  env: Record<string, string | undefined>;
  /** Standard input, read whole (for `tally gql -`). */
  stdin?: () => Promise<string>;
}

/** A progress bar on stderr, redrawn in place; silent when stderr is not a terminal. */
export function progress(io: Io, label: string) {
  let last = '';
  return {
    update(done: number, total: number) {
      if (!io.tty || total === 0) return;
      const width = 30;
      const filled = Math.round((done / total) * width);
      const line = `\r${label} [${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${done}/${total}`;
      if (line !== last) io.err(line);
      last = line;
    },
    done() {
      if (io.tty && last) io.err('\n');
    },
  };
}

/** `code: message` and the hint under it, as every error of an execution is shown. */
export function formatError(error: { code: string; message: string; hint?: string | null }, indent = ''): string {
  return `${indent}${error.code}: ${error.message}${error.hint ? `\n${indent}  hint: ${error.hint}` : ''}\n`;
}

/** Columns padded to their widest cell; the columns named in `right` (amounts) aligned right. */
export function formatTable(header: string[], rows: string[][], right: number[] = []): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : right.includes(i) ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return `${[header, ...rows].map(line).join('\n')}\n`;
}
