/** A request the stand-in payout provider received. */
export interface ProviderRequest {
  method: string;
  path: string;
  key: string | null;
  body: unknown;
  authorization: string | null;
}

export interface PayoutProvider {
  url: string;
  requests: ProviderRequest[];
  payouts: Map<string, Record<string, unknown>>;
  failNext(count: number, status?: number): void;
  close(): Promise<void>;
}

export declare function startPayoutProvider(options?: {
  port?: number;
  token?: string | null;
  delayMs?: number;
}): Promise<PayoutProvider>;
