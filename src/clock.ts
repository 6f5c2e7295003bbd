/** The engine's only source of time, so tests can control it. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** A clock a test moves by hand. */
export class ManualClock implements Clock {
  private ms: number;
  constructor(start: Date | string = '2026-01-01T00:00:00.000Z') {
    this.ms = new Date(start).getTime();
  }
  now(): Date {
    return new Date(this.ms);
  }
  advance(ms: number): void {
    this.ms += ms;
  }
  set(at: Date | string): void {
    this.ms = new Date(at).getTime();
  }
}

/** UTC calendar date (YYYY-MM-DD) of an instant. */
export function utcDate(at: Date): string {
  return at.toISOString().slice(0, 10);
}
