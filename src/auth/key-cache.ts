import type { CacheEpoch } from '../storage/record-cache.js';
import { hashKey } from './clients.js';

/** How long a key seen valid is taken as valid by the checks outside a transaction (Engine.authenticate). */
export const KNOWN_KEY_MS = 1000;

/**
 * The principals of API keys seen valid, by key hash, for at most KNOWN_KEY_MS and until the cache
 * epoch moves (a client written here, or by another connection as seen at a transaction's start).
 * Only for the server's checks before a body is read and of /metrics: what a request may do is
 * decided by the check inside its own transaction. Holds hashes, never keys.
 */
export class KnownKeys {
  private readonly known = new Map<string, { principal: string; until: number }>();
  private seenEpoch = -1;

  constructor(
    private readonly epoch: CacheEpoch,
    private readonly sizeMax: number,
    /** The principal of a key as the database says now, or null. */
    private readonly lookup: (apiKey: string) => string | null,
  ) {}

  principal(apiKey: string): string | null {
    const hash = hashKey(apiKey);
    if (this.seenEpoch !== this.epoch.value) {
      this.known.clear();
      this.seenEpoch = this.epoch.value;
    }
    const now = performance.now();
    const known = this.known.get(hash);
    if (known !== undefined && known.until > now) return known.principal;
    const principal = this.lookup(apiKey);
    if (principal === null) this.known.delete(hash);
    else {
      if (this.known.size >= this.sizeMax) this.known.clear();
      this.known.set(hash, { principal, until: now + KNOWN_KEY_MS });
    }
    return principal;
  }
}
