import { badInput, EngineError, limitExceeded, quote } from './errors.js';

export interface PageInfo {
  hasNextPage: boolean;
  hasPreviousPage: boolean;
  startCursor: string | null;
  endCursor: string | null;
}

export interface Connection<T> {
  nodes: T[];
  edges: Array<{ cursor: string; node: T }>;
  pageInfo: PageInfo;
}

export interface PageRequest<K> {
  /** Cursors carry the connection they came from, so one cannot be replayed on another. */
  kind: string;
  /** Rows to fetch: one more than the page, to learn whether there is a next page. */
  fetch: number;
  first: number;
  after: K | undefined;
}

/** Check `first` against pageSizeMax and decode `after`. */
export function pageRequest<K extends string | number>(
  first: number,
  after: string | null | undefined,
  pageSizeMax: number,
  keyType: 'string' | 'number',
  kind: string = keyType,
): PageRequest<K> {
  if (!Number.isInteger(first) || first < 1) {
    throw badInput('first must be a positive integer', first, `Ask for between 1 and ${pageSizeMax} records.`);
  }
  if (first > pageSizeMax) {
    throw limitExceeded(
      'pageSizeMax',
      pageSizeMax,
      first,
      `first ${first} is larger than pageSizeMax (${pageSizeMax})`,
      {
        hint: `Ask for at most ${pageSizeMax} records and follow pageInfo.endCursor.`,
      },
    );
  }
  return {
    kind,
    first,
    fetch: first + 1,
    after: after == null ? undefined : (decodeCursor(after, keyType, kind) as K),
  };
}

export function encodeCursor(kind: string, key: string | number): string {
  return Buffer.from(JSON.stringify([kind, key])).toString('base64url');
}

function decodeCursor(cursor: string, keyType: 'string' | 'number', kind: string): string | number {
  let key: unknown;
  try {
    const parsed: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    key = Array.isArray(parsed) && parsed.length === 2 && parsed[0] === kind ? parsed[1] : undefined;
  } catch {
    key = undefined;
  }
  if (typeof key !== keyType || (typeof key === 'number' && (!Number.isSafeInteger(key) || key < 0))) {
    throw new EngineError('BAD_REQUEST', `cursor ${quote(cursor)} is not a cursor this connection gave out`, {
      hint: 'Pass pageInfo.endCursor from the previous page as `after`.',
    });
  }
  return key as string | number;
}

/** Build a connection from up to `fetch` rows. */
export function toConnection<R, T>(
  rows: R[],
  request: { kind: string; first: number; after: unknown },
  cursorOf: (row: R) => string | number,
  toNode: (row: R) => T,
): Connection<T> {
  const page = rows.slice(0, request.first);
  const edges = page.map((row) => ({ cursor: encodeCursor(request.kind, cursorOf(row)), node: toNode(row) }));
  return {
    nodes: edges.map((e) => e.node),
    edges,
    pageInfo: {
      hasNextPage: rows.length > request.first,
      hasPreviousPage: request.after !== undefined,
      startCursor: edges[0]?.cursor ?? null,
      endCursor: edges.at(-1)?.cursor ?? null,
    },
  };
}
