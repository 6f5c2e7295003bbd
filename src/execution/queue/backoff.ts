import type { ExecutionSettings } from '../../actions/actions.js';

/**
 * Delay before attempt n + 1, after attempt n (n ≥ 1) failed:
 *
 *   base(n)  = min(maxMs, initialMs × multiplier^(n − 1))
 *   delay(n) = base(n) × (1 − JITTER × u),  u uniform in [0, 1)
 *
 * so each delay lies in (base × 0.8, base]: exponential, capped, and spread so that executions
 * failing together do not retry together. With the defaults (1 s, ×2, cap 60 s): 1 s, 2 s, 4 s,
 * 8 s, 16 s, 32 s, 60 s, 60 s … (each up to 20 % less).
 */
export const JITTER = 0.2;

export function backoffBaseMs(settings: ExecutionSettings['backoff'], attempt: number): number {
  return Math.min(settings.maxMs, settings.initialMs * settings.multiplier ** (attempt - 1));
}

export function backoffDelayMs(settings: ExecutionSettings['backoff'], attempt: number, random: () => number): number {
  return Math.round(backoffBaseMs(settings, attempt) * (1 - JITTER * random()));
}
