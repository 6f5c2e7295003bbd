import { describe, expect, it } from 'vitest';
import { EngineError } from '../../src/errors.js';
import * as limitsModule from '../../src/limits.js';
import {
  DEFAULT_LIMITS,
  FIXED_LIMITS,
  LIMIT_GROUPS,
  LIMITS,
  PG_TOOL_TIMEOUT_MS_MAX,
  resolveLimits,
  TOOL_TIMEOUT_MS_CEILING,
} from '../../src/limits.js';

/** The error resolveLimits throws for `overrides`. */
function refusal(overrides: Record<string, unknown>): EngineError {
  try {
    resolveLimits(overrides as never);
  } catch (error) {
    expect(error).toBeInstanceOf(EngineError);
    return error as EngineError;
  }
  throw new Error(`resolveLimits took ${JSON.stringify(overrides)}`);
}

describe('the limits table', () => {
  it('DEFAULT_LIMITS is the table: every limit, its default, frozen', () => {
    expect(Object.keys(DEFAULT_LIMITS)).toEqual(Object.keys(LIMITS));
    for (const [name, spec] of Object.entries(LIMITS))
      expect(DEFAULT_LIMITS[name as keyof typeof LIMITS]).toBe(spec.default);
    expect(Object.isFrozen(DEFAULT_LIMITS)).toBe(true);
    expect(resolveLimits()).toEqual(DEFAULT_LIMITS);
  });

  it('every limit has a doc, a known group, and a default within its own bounds', () => {
    for (const [name, spec] of Object.entries(LIMITS) as [string, limitsModule.LimitSpec][]) {
      expect(spec.doc.length, name).toBeGreaterThan(10);
      expect(Object.keys(LIMIT_GROUPS), name).toContain(spec.group);
      expect(Number.isInteger(spec.default), name).toBe(true);
      expect(spec.default, name).toBeGreaterThanOrEqual(spec.min ?? 0);
      if (spec.max !== undefined) expect(spec.default, name).toBeLessThanOrEqual(spec.max);
      if (spec.postgres?.default !== undefined)
        expect(spec.postgres.default, name).toBeLessThanOrEqual(spec.max ?? Infinity);
      if (spec.postgres?.max !== undefined) expect(spec.default, name).toBeLessThanOrEqual(spec.postgres.max);
    }
  });

  it('each fixed bound is exported by its name, with its why', () => {
    for (const [name, spec] of Object.entries(FIXED_LIMITS)) {
      expect((limitsModule as Record<string, unknown>)[name], name).toBe(spec.value);
      expect(spec.why.length, name).toBeGreaterThan(10);
    }
  });

  it('PostgreSQL defaults toolTimeoutMsMax to 30 s; no backend lets it pass 5 minutes', () => {
    expect(PG_TOOL_TIMEOUT_MS_MAX).toBe(30_000);
    expect(TOOL_TIMEOUT_MS_CEILING).toBe(300_000);
    expect(resolveLimits({}, 'postgres').toolTimeoutMsMax).toBe(30_000);
    expect(resolveLimits({ toolTimeoutMsMax: 900 }, 'postgres').toolTimeoutMsMax).toBe(900);
    expect(resolveLimits({}).toolTimeoutMsMax).toBe(750);
    expect(refusal({ toolTimeoutMsMax: 300_001 }).message).toMatch(/toolTimeoutMsMax \(300001\) may be at most 300000/);
  });

  it('PostgreSQL refuses entriesPerTransactionMax past its block of seqs', () => {
    expect(resolveLimits({ entriesPerTransactionMax: 1024 }, 'postgres').entriesPerTransactionMax).toBe(1024);
    expect(resolveLimits({ entriesPerTransactionMax: 1025 }).entriesPerTransactionMax).toBe(1025);
    let error: unknown;
    try {
      resolveLimits({ entriesPerTransactionMax: 1025 }, 'postgres');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(EngineError);
    expect((error as EngineError).message).toBe(
      'limit entriesPerTransactionMax is 1025; on PostgreSQL it may be at most 1024',
    );
  });
});

describe('overrides are checked against the table', () => {
  it('a bad value is BAD_REQUEST naming the limit and the value, the range in the hint', () => {
    for (const value of [-1, 1.5, '5', null, Number.NaN, Number.POSITIVE_INFINITY]) {
      const error = refusal({ pageSizeMax: value });
      expect(error.code).toBe('BAD_REQUEST');
      expect(error.message).toBe(`limit pageSizeMax must be a non-negative integer, got ${JSON.stringify(value)}`);
      expect(error.hint).toContain('TALLY_CONFIG');
      expect(error.hint).toContain('limits.pageSizeMax');
      expect(error.hint).toContain('a non-negative integer');
      expect(error.details).toMatchObject({ limit: 'pageSizeMax', min: 0 });
    }
  });

  it('past its most, the hint gives the range', () => {
    const error = refusal({ toolTimeoutMsMax: 300_001 });
    expect(error.code).toBe('BAD_REQUEST');
    expect(error.hint).toContain('an integer from 0 to 300000');
    expect(error.details).toEqual({ limit: 'toolTimeoutMsMax', value: 300_001, min: 0, max: 300_000 });
  });

  it('an unknown name is BAD_REQUEST naming it; undefined leaves the default', () => {
    const error = refusal({ pageSizeMx: 5 });
    expect(error.code).toBe('BAD_REQUEST');
    expect(error.message).toBe('unknown limit "pageSizeMx"');
    expect(error.hint).toContain('docs/reference/limits.md');
    expect(refusal({ pageSizeMx: undefined }).message).toBe('unknown limit "pageSizeMx"');
    expect(resolveLimits({ pageSizeMax: undefined }).pageSizeMax).toBe(1000);
  });
});
