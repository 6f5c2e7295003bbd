import { isReadOnly } from '../actions/tool-access.js';
import type { ActionVersion } from '../actions/actions.js';
import { canonicalJson, fingerprint } from '../ids.js';
import type { Db } from '../storage/database.js';

interface Entry {
  executionId: string;
  output: unknown;
  /** This connection's data writes and the database's data_version when it was computed. */
  writes: number;
  dataVersion: number;
  expires: number;
}

/**
 * Outputs of read-only tools with `execution.cacheTtlMs`, by version and input. An entry answers
 * while nothing has written since it was computed — no write of this connection to a data table
 * (TEMP triggers: exact, and committed or not) and no commit of another connection (SQLite's
 * data_version) — and its TTL has not passed, and the execution it came from is recorded. The call
 * records themselves (executions, invocations) do not count as writes. At most `entriesMax`
 * entries, the oldest dropped first.
 */
export class ResultCache {
  private readonly entries = new Map<string, Entry>();
  private readonly dataVersion;
  private readonly recorded;

  constructor(
    db: Db,
    private readonly data: { readonly writes: number },
    private readonly entriesMax: number,
  ) {
    this.dataVersion = db.prepare<[], number>('PRAGMA data_version').pluck();
    this.recorded = db.prepare<[string], number>('SELECT 1 FROM executions WHERE execution_id = ?').pluck();
  }

  /**
   * What a cached answer is keyed by: the version and input, and who asked under which authority —
   * the principal (a change to its policies is a write to clients, which empties the cache) and the
   * tools above the call (their versions' policies). A read-only tool's output depends on what its
   * caller may see: one client's answer is never another's. And on the execution's input, which its
   * references' fixed inputs read (`execution.input`): one subject's answer is never another's.
   */
  static key(
    version: ActionVersion,
    input: unknown,
    principal: string,
    stack: readonly string[],
    executionInput: unknown,
  ): string {
    return `${version.actionId}@${version.version}:${fingerprint(canonicalJson({ input: input ?? null, principal, stack, executionInput: executionInput ?? null }))}`;
  }

  get(key: string): { executionId: string; output: unknown } | null {
    const entry = this.entries.get(key);
    if (!entry) return null;
    if (
      entry.expires <= Date.now() ||
      entry.writes !== this.data.writes ||
      entry.dataVersion !== this.dataVersion.get() ||
      this.recorded.get(entry.executionId) === undefined
    ) {
      this.entries.delete(key);
      return null;
    }
    return { executionId: entry.executionId, output: entry.output };
  }

  set(key: string, executionId: string, output: unknown, ttlMs: number): void {
    if (this.entriesMax === 0) return;
    if (this.entries.size >= this.entriesMax) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, {
      executionId,
      output,
      writes: this.data.writes,
      dataVersion: this.dataVersion.get() as number,
      expires: Date.now() + ttlMs,
    });
  }

  /** Everything goes (a rollback undid writes some entry may have seen). */
  clear(): void {
    this.entries.clear();
  }

  get size(): number {
    return this.entries.size;
  }
}

/**
 * A version may cache only while it (and every tool it reaches) can write nothing: checked when it
 * is made, and again whenever it stores (an unpinned reference may have come to write since).
 */
export function cacheable(deps: Parameters<typeof isReadOnly>[0], version: ActionVersion): boolean {
  return isReadOnly(deps, version);
}
