import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine.js';
import { EngineError } from '../../src/errors.js';
import { LIMIT_RELATIONS, type Limits, resolveLimits } from '../../src/limits.js';

/**
 * Every relation between limits (LIMIT_RELATIONS) is asserted when an engine starts: a
 * configuration that breaks one is refused with BAD_REQUEST naming both limits and their values.
 * Each relation has a configuration here that crosses it by one.
 */
const BROKEN: Record<string, { limits: Partial<Limits>; named: string[] }> = {
  'decimalIntegerDigitsMax + decimalFractionDigitsMax ≤ 60': {
    limits: { decimalIntegerDigitsMax: 40, decimalFractionDigitsMax: 21 },
    named: ['decimalIntegerDigitsMax', 'decimalFractionDigitsMax', '40', '21'],
  },
  'requestDeadlineMs ≤ operatorDeadlineMs': {
    limits: { requestDeadlineMs: 2001, operatorDeadlineMs: 2000 },
    named: ['requestDeadlineMs (2001)', 'operatorDeadlineMs (2000)'],
  },
  'connectionsPerAddressMax ≤ connectionsMax': {
    limits: { connectionsPerAddressMax: 11, connectionsMax: 10 },
    named: ['connectionsPerAddressMax (11)', 'connectionsMax (10)'],
  },
  'mcpSessionsPerClientMax ≤ mcpSessionsMax': {
    limits: { mcpSessionsPerClientMax: 5, mcpSessionsMax: 4 },
    named: ['mcpSessionsPerClientMax (5)', 'mcpSessionsMax (4)'],
  },
  'writeQueuePerClientMax ≤ writeQueueMax': {
    limits: { writeQueuePerClientMax: 9, writeQueueMax: 8 },
    named: ['writeQueuePerClientMax (9)', 'writeQueueMax (8)'],
  },
  'writeQueuePerClientBytesMax ≤ writeQueueBytesMax': {
    limits: { writeQueuePerClientBytesMax: 4097, writeQueueBytesMax: 4096 },
    named: ['writeQueuePerClientBytesMax (4097)', 'writeQueueBytesMax (4096)'],
  },
  'agentRunsPerClientMax ≤ agentRunsConcurrentMax': {
    limits: { agentRunsPerClientMax: 3, agentRunsConcurrentMax: 2 },
    named: ['agentRunsPerClientMax (3)', 'agentRunsConcurrentMax (2)'],
  },
  'executionWaitersPerClientMax ≤ executionWaitersMax': {
    limits: { executionWaitersPerClientMax: 33, executionWaitersMax: 32 },
    named: ['executionWaitersPerClientMax (33)', 'executionWaitersMax (32)'],
  },
};

const ruleOf = (rule: string) => rule.replaceAll('`', '');

/** The error createEngine rejects with. */
async function refusal(limits: Partial<Limits>, path?: string): Promise<EngineError> {
  const error = await createEngine({ limits, ...(path === undefined ? {} : { path }) }).then(
    (engine) => {
      engine.close();
      throw new Error(`createEngine took ${JSON.stringify(limits)}`);
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(EngineError);
  return error as EngineError;
}

describe('relations between limits, asserted at start-up', () => {
  it('every relation has a configuration here that breaks it', () => {
    expect(LIMIT_RELATIONS.map((r) => ruleOf(r.rule)).sort()).toEqual(Object.keys(BROKEN).sort());
  });

  it("the shipped defaults keep every relation, on SQLite and with PostgreSQL's defaults", () => {
    for (const backend of ['sqlite', 'postgres'] as const) {
      const limits = resolveLimits({}, backend);
      for (const relation of LIMIT_RELATIONS)
        expect(relation.holds(limits), `${relation.rule} on ${backend}`).toBe(true);
    }
  });

  for (const [rule, { limits, named }] of Object.entries(BROKEN)) {
    it(`${rule}: a configuration crossing it is refused at engine creation, naming both limits`, async () => {
      const error = await refusal(limits);
      expect(error.code).toBe('BAD_REQUEST');
      for (const text of named) expect(error.message).toContain(text);
      expect(error.hint).toContain('TALLY_CONFIG');
      expect(error.details).toMatchObject({ relation: rule, ...limits });
      // At the bound it holds: one less on the side that broke it is taken.
      const [first] = Object.keys(limits) as (keyof Limits)[];
      const fixed = { ...limits, [first!]: (limits[first!] as number) - 1 };
      const engine = await createEngine({ limits: fixed });
      try {
        expect(engine.limits).toMatchObject(fixed);
      } finally {
        engine.close();
      }
    });
  }

  it('is refused before a PostgreSQL engine connects, too', async () => {
    const error = await refusal(
      BROKEN['writeQueuePerClientMax ≤ writeQueueMax']!.limits,
      'postgres://127.0.0.1:1/none',
    );
    expect(error.code).toBe('BAD_REQUEST');
    expect(error.message).toContain('writeQueuePerClientMax (9) must be at most writeQueueMax (8)');
  });

  it("a per-client limit set above its total's default is refused as well", async () => {
    const error = await refusal({ writeQueuePerClientMax: 2000 });
    expect(error.message).toBe(
      "writeQueuePerClientMax (2000) must be at most writeQueueMax (1024): one client's waiting requests are some of the write queue's",
    );
  });

  it('a per-client limit left out follows its total down when the total is set below it', async () => {
    const engine = await createEngine({ limits: { writeQueueMax: 0, executionWaitersMax: 1, connectionsMax: 100 } });
    try {
      expect(engine.limits.writeQueuePerClientMax).toBe(0);
      expect(engine.limits.executionWaitersPerClientMax).toBe(1);
      expect(engine.limits.connectionsPerAddressMax).toBe(100);
      // Totals above the per-client default leave it alone.
      expect(engine.limits.mcpSessionsPerClientMax).toBe(8);
      expect(resolveLimits({ writeQueueMax: 5000 }).writeQueuePerClientMax).toBe(256);
    } finally {
      engine.close();
    }
  });
});
