import { PgListener } from './pg/connection.js';

/**
 * Wake `wake` whenever a process commits a start on this PostgreSQL database (NOTIFY
 * tally_executions). Returns what stops listening. A server without LISTEN (or a dropped
 * connection) leaves the worker polling: said once on stderr, nothing fails.
 */
export function listenForStarts(url: string, wake: () => void): () => void {
  let listener: PgListener | null = null;
  const polling = (error: Error) =>
    process.stderr.write(`tally: workers poll for started executions (${error.message})\n`);
  try {
    listener = new PgListener(url, 'tally_executions', wake, polling);
  } catch (error) {
    polling(error as Error);
  }
  return () => listener?.close();
}
