import { alreadyExists, EngineError, notFound, quote } from '../errors.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import { DEFAULT_JOURNAL_ID } from '../storage/migrations.js';
import type { JournalRow } from '../storage/statements/ledger.js';
import type { LedgerDeps } from './deps.js';
import { type Journal, optionalText, requiredText, type Status } from './records.js';

export { DEFAULT_JOURNAL_ID };

export interface JournalInput {
  journalId: string;
  name: string;
  description?: string | null;
  status?: Status | null;
  code?: string | null;
}

export function toJournal(row: JournalRow): Journal {
  return {
    journalId: row.journal_id,
    name: row.name,
    description: row.description,
    status: row.status as Status,
    code: row.code,
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

export function getJournal(deps: LedgerDeps, journalId: string): Journal {
  const row = deps.st.journalById.get(journalId);
  if (!row) {
    throw notFound('journal', journalId, `Leave journalId out to use the default journal (${DEFAULT_JOURNAL_ID}).`);
  }
  return toJournal(row);
}

export function createJournal(deps: LedgerDeps, input: JournalInput): Journal {
  const existing = deps.st.journalById.get(input.journalId);
  // The default journal exists from the start; creating it by its id (as a client written against
  // the reference ledger does first) names it, once, while it is still the version the ledger made.
  if (existing && input.journalId === DEFAULT_JOURNAL_ID && existing.version === 1) {
    return updateJournal(deps, input.journalId, {
      name: input.name,
      description: input.description ?? null,
      status: input.status ?? 'ACTIVE',
      code: input.code ?? existing.code,
    });
  }
  if (existing) {
    throw alreadyExists('journal', input.journalId);
  }
  const now = deps.clock.now().toISOString();
  const row: JournalRow = {
    journal_id: input.journalId,
    name: requiredText(input.name, 'name'),
    description: optionalText(input.description, 'description'),
    status: input.status ?? 'ACTIVE',
    code: input.code == null ? null : requiredText(input.code, 'code', 64),
    version: 1,
    created: now,
    modified: now,
  };
  insertUnique(() => deps.st.insertJournal.run(row), `journal code ${quote(row.code)}`);
  return toJournal(row);
}

export function updateJournal(
  deps: LedgerDeps,
  journalId: string,
  input: Partial<Omit<JournalInput, 'journalId'>>,
): Journal {
  const current = deps.st.journalById.get(journalId);
  if (!current) return getJournal(deps, journalId);
  const row: JournalRow = {
    ...current,
    name: input.name === undefined || input.name === null ? current.name : requiredText(input.name, 'name'),
    description: input.description === undefined ? current.description : optionalText(input.description, 'description'),
    status: input.status ?? current.status,
    code: input.code === undefined ? current.code : input.code === null ? null : requiredText(input.code, 'code', 64),
    version: current.version + 1,
    modified: deps.clock.now().toISOString(),
  };
  if (journalId === DEFAULT_JOURNAL_ID && row.status !== 'ACTIVE') {
    throw new EngineError('BAD_REQUEST', 'the default journal cannot be locked', {
      hint: 'Create another journal for books that need locking.',
    });
  }
  insertUnique(() => deps.st.updateJournal.run(row), `journal code ${quote(row.code)}`);
  return toJournal(row);
}

export function listJournals(deps: LedgerDeps, first: number, after?: string | null): Connection<Journal> {
  const req = pageRequest<number>(first, after, deps.limits.pageSizeMax, 'number', 'journals');
  const rows = deps.st.journalsPage.all(req.after ?? 0, req.fetch);
  return toConnection(rows, req, (r) => r.rowid, toJournal);
}

/** Run an insert or update whose only expected failure is a unique key, and name the key. */
export function insertUnique(write: () => unknown, what: string): void {
  try {
    write();
  } catch (error) {
    if ((error as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE') {
      throw new EngineError('ALREADY_EXISTS', `${what} is already taken`, { hint: 'Choose another value.' });
    }
    throw error;
  }
}
