/** A request the stand-in payout provider received. */
export interface ProviderRequest {
  method: string;
  path: string;
  key: string | null;
  body: unknown;
  authorization: string | null;
}

/** A first answer written whole and held open (holdNext): the caller has all of it but not its end. */
export interface HeldAnswer {
  /** The Idempotency-Key it answers. */
  key: string;
  payoutId: unknown;
  status: number;
  body: Record<string, unknown>;
  /** Resolves when the connection is gone (the caller closed it, or died). */
  closed: Promise<void>;
  /** Send the last chunk: the answer is complete. */
  end(): void;
  /** Break the connection without completing the answer. */
  destroy(): void;
}

export interface PayoutProvider {
  url: string;
  requests: ProviderRequest[];
  payouts: Map<string, Record<string, unknown>>;
  failNext(count: number, status?: number): void;
  /** The next `count` first answers are stored and written whole, but not ended (see nextHeld). */
  holdNext(count?: number): void;
  /** Resolves with the next held answer once it is written. */
  nextHeld(): Promise<HeldAnswer>;
  close(): Promise<void>;
}

export declare function startPayoutProvider(options?: {
  port?: number;
  token?: string | null;
  delayMs?: number;
}): Promise<PayoutProvider>;
