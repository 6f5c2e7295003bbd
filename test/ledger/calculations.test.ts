import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { nameBasedUuid } from '../../src/ids.js';
import { count, fails, id, newEngine, ok } from '../helpers/engine.js';
import { createAccount } from '../helpers/ledger.js';

/**
 * Calculations: balances per custom dimensions, kept on posting, with effective-date children.
 * Scenario: a shop books sales (credit SALES, debit CASH) tagged with a region and a channel.
 */
const CASH = id(1);
const SALES = id(2);
const OTHER = id(3);

const CREATE = `mutation($i: CreateCalculationInput!) { createCalculation(input: $i) {
  calculationId code scope status backfillStatus config { enableEffectiveBalances } dimensions { alias value }
  children { calculationId code granularity parentCalculationId } } }`;
const ATTACH = `mutation($i: AttachCalculationInput!) { attachCalculation(input: $i) { accountId journalId calculationId calculation { code } } }`;
const DETACH = `mutation($i: DetachCalculationInput!) { detachCalculation(input: $i) { accountId journalId calculationId } }`;
const DELETE = `mutation($id: UUID!) { deleteCalculation(id: $id) { calculationId status } }`;
const READ = `query($a: UUID!, $c: UUID, $d: JSON, $e: EffectiveInput, $cur: CurrencyCode) {
  balance(accountId: $a, calculationId: $c, dimension: $d, effective: $e, currency: $cur) {
    calculationId dimensions settled { drBalance { units } crBalance { units } normalBalance { units } }
    available(layer: PENDING) { normalBalance { units } } } }`;

let engine: Engine;
let clock: ManualClock;

function setup(options: Parameters<typeof newEngine>[0] = {}) {
  return newEngine({ clock, ...options }).then((e) => {
    engine = e;
    createAccount(engine, 1, { normalBalanceType: 'DEBIT', code: 'CASH' });
    createAccount(engine, 2, { code: 'SALES' });
    createAccount(engine, 3, { code: 'OTHER' });
    ok(engine, `mutation($input: TranCodeInput!) { createTranCode(input: $input) { version } }`, {
      input: {
        tranCodeId: id(9001),
        code: 'SALE',
        params: [
          { name: 'to', type: 'UUID', default: `uuid('${SALES}')` },
          { name: 'amount', type: 'DECIMAL' },
          { name: 'effective', type: 'DATE' },
          { name: 'region', type: 'STRING', default: "''" },
          { name: 'channel', type: 'STRING', default: "'web'" },
          { name: 'layer', type: 'STRING', default: "'SETTLED'" },
        ],
        transaction: { effective: 'params.effective' },
        entries: [
          {
            accountId: `uuid('${CASH}')`,
            units: 'params.amount',
            currency: "'USD'",
            direction: 'DEBIT',
            layer: 'params.layer',
            entryType: "'SALE_DR'",
            metadata: "params.region == '' ? {} : {'region': params.region, 'channel': params.channel}",
          },
          {
            accountId: 'params.to',
            units: 'params.amount',
            currency: "'USD'",
            direction: 'CREDIT',
            layer: 'params.layer',
            entryType: "'SALE_CR'",
            metadata: "params.region == '' ? {} : {'region': params.region, 'channel': params.channel}",
          },
        ],
      },
    });
  });
}

let txn = 0;
function sale(amount: string, effective: string, region = '', extra: Record<string, unknown> = {}): string {
  const transactionId = id(50_000 + ++txn);
  ok(engine, `mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }`, {
    i: { transactionId, tranCode: 'SALE', params: { amount, effective, region, ...extra } },
  });
  return transactionId;
}

const BY_REGION = {
  calculationId: id(700),
  code: 'BY_REGION',
  description: 'sales by region',
  dimensions: [{ alias: 'region', value: 'context.vars.entry.metadata.region' }],
  condition: "has(context.vars.entry.metadata) && 'region' in context.vars.entry.metadata",
  config: { enableEffectiveBalances: true },
};

function read(accountId: string, calculationId: string | null, dimension?: unknown, effective?: unknown) {
  return ok(engine, READ, { a: accountId, c: calculationId, d: dimension, e: effective }).balance;
}
const settled = (b: any) => ({
  dr: b.settled.drBalance.units,
  cr: b.settled.crBalance.units,
  normal: b.settled.normalBalance.units,
});

beforeEach(async () => {
  clock = new ManualClock(new Date('2025-06-30T12:00:00Z'));
  txn = 0;
  await setup();
});
afterEach(() => engine.close());

describe('calculations: definitions', () => {
  it('creates a calculation with effective children, whose ids derive from the parent', () => {
    const c = ok(engine, CREATE, { i: BY_REGION }).createCalculation;
    expect(c).toMatchObject({
      calculationId: id(700),
      code: 'BY_REGION',
      scope: 'GLOBAL',
      status: 'ACTIVE',
      backfillStatus: 'COMPLETE',
      config: { enableEffectiveBalances: true },
    });
    const dims = (calc: string) =>
      ok(engine, `{ calculation(calculationId: "${calc}") { dimensions { alias } } }`)
        .calculation.dimensions.map((d: any) => d.alias)
        .join(',');
    expect(c.children.map((k: any) => [k.code, k.granularity, k.parentCalculationId, dims(k.calculationId)])).toEqual([
      ['BY_REGION_YYYY', 'YEAR', id(700), 'year,region'],
      ['BY_REGION_YYYY_MM', 'MONTH', id(700), 'year,month,region'],
      ['BY_REGION_YYYY_MM_DD', 'DAY', id(700), 'year,month,day,region'],
    ]);
    expect(c.children[0].calculationId).toBe(nameBasedUuid('sha1', 5, id(700), Buffer.from('YYYY')));
    // The same derivation as CEL's uuid.NewSHA1.
    const viaCel = ok(
      engine,
      `mutation { evaluate(expression: "uuid.NewSHA1(uuid('${id(700)}'), bytes('YYYY_MM'))") }`,
    ).evaluate;
    expect(c.children[1].calculationId).toBe(viaCel);
    // The year/month/day expressions the children show compute what the engine stores.
    const effective = ok(
      engine,
      `mutation($d: JSON) { evaluate(expressions: {y: "int(document.effective.substring(0, 4))", m: "int(document.effective.substring(5, 7))"}, document: $d) }`,
      { d: { effective: '2024-02-15' } },
    ).evaluate;
    expect(effective).toEqual({ y: 2024, m: 2 });

    // Without config: config is null and there are no children; listing shows all four plus it.
    const plain = ok(engine, CREATE, {
      i: { calculationId: id(701), code: 'PLAIN', description: 'p', dimensions: [] },
    }).createCalculation;
    expect(plain).toMatchObject({ config: null, children: [] });
    const page = ok(engine, '{ calculations(first: 10) { nodes { code } pageInfo { hasNextPage } } }').calculations;
    expect(page.nodes.map((n: any) => n.code)).toEqual([
      'BY_REGION',
      'BY_REGION_YYYY',
      'BY_REGION_YYYY_MM',
      'BY_REGION_YYYY_MM_DD',
      'PLAIN',
    ]);
    expect(
      ok(engine, `{ calculation(calculationId: "${c.children[2].calculationId}") { code granularity } }`).calculation,
    ).toEqual({ code: 'BY_REGION_YYYY_MM_DD', granularity: 'DAY' });
  });

  it('refuses bad definitions with a clear error and writes nothing', () => {
    const bad = (patch: Record<string, unknown>) => fails(engine, CREATE, { i: { ...BY_REGION, ...patch } });
    let e = bad({ dimensions: [{ alias: 'year', value: "'x'" }] });
    expect([e.code, e.message]).toEqual(['BAD_REQUEST', "dimension 'year' is reserved for effective dates"]);
    e = bad({
      dimensions: [
        { alias: 'r', value: "'x'" },
        { alias: 'r', value: "'y'" },
      ],
    });
    expect(e.code).toBe('BAD_REQUEST');
    expect(e.message).toContain('declared twice');
    e = bad({ dimensions: [{ alias: 'bad alias', value: "'x'" }] });
    expect(e.code).toBe('BAD_REQUEST');
    e = bad({ condition: 'context.vars.entry.units >' });
    expect(e.code).toBe('CEL_ERROR');
    e = bad({ dimensions: Array.from({ length: 17 }, (_, i) => ({ alias: `d${i}`, value: "'x'" })) });
    expect([e.code, e.message]).toEqual([
      'LIMIT_EXCEEDED',
      'calculation BY_REGION declares 17 dimensions; calculationDimensionsMax is 16',
    ]);
    expect(count(engine, 'calculations')).toBe(0);

    ok(engine, CREATE, { i: BY_REGION });
    expect(bad({ code: 'OTHER' }).code).toBe('ALREADY_EXISTS');
    const code = bad({ calculationId: id(702) });
    expect([code.code, code.message]).toEqual(['ALREADY_EXISTS', 'a calculation with code "BY_REGION" already exists']);
    // A child's code is taken too: its parent would clash.
    expect(bad({ calculationId: id(703), code: 'BY_REGION_YYYY', config: null }).code).toBe('ALREADY_EXISTS');
    expect(count(engine, 'calculations')).toBe(4);
  });

  it('children are managed only through their parent', () => {
    ok(engine, CREATE, { i: { ...BY_REGION, scope: 'LOCAL' } });
    const child = nameBasedUuid('sha1', 5, id(700), Buffer.from('YYYY_MM_DD'));
    const del = fails(engine, DELETE, { id: child });
    expect([del.code, del.message, del.result.data]).toEqual([
      'BAD_REQUEST',
      'deleteCalculation cannot delete child effective calculation - delete parent instead',
      { deleteCalculation: null },
    ]);
    const att = fails(engine, ATTACH, { i: { accountId: SALES, calculationId: child } });
    expect([att.code, att.message, att.result.data]).toEqual([
      'BAD_REQUEST',
      'attachCalculation cannot attach child effective calculation - attach parent instead',
      null,
    ]);
    const det = fails(engine, DETACH, { i: { accountId: SALES, calculationId: child } });
    expect([det.code, det.message]).toEqual([
      'BAD_REQUEST',
      'detachCalculation cannot detach child effective calculation - detach parent instead',
    ]);
    expect(count(engine, 'calculation_attachments')).toBe(0);
  });
});

describe('calculations: balances on posting', () => {
  it('keeps balances per dimension and per effective year, month and day; reads periods, ranges and cumulative totals exactly', () => {
    ok(engine, CREATE, { i: BY_REGION });
    sale('10.00', '2024-01-05', 'north');
    sale('2.5', '2024-01-31', 'north');
    sale('7.000', '2024-02-29', 'north');
    sale('1.00', '2024-03-01', 'north');
    sale('100.00', '2024-02-10', 'south');
    sale('40.00', '2023-12-31', 'north');
    sale('99.00', '2024-02-10'); // no region: the condition is false, not counted

    const north = { region: 'north' };
    expect(settled(read(SALES, id(700), north))).toEqual({ dr: '0', cr: '60.500', normal: '60.500' });
    expect(settled(read(CASH, id(700), north))).toEqual({ dr: '60.500', cr: '0', normal: '60.500' });
    const y = read(SALES, id(700), north, { period: '2024' });
    expect([y.calculationId, y.dimensions, settled(y).cr]).toEqual([
      nameBasedUuid('sha1', 5, id(700), Buffer.from('YYYY')),
      { region: 'north', year: 2024 },
      '20.500',
    ]);
    const m = read(SALES, id(700), north, { period: '2024-01' });
    expect([m.dimensions, settled(m)]).toEqual([
      { region: 'north', year: 2024, month: 1 },
      { dr: '0', cr: '12.50', normal: '12.50' },
    ]);
    const d = read(SALES, id(700), north, { period: '2024-02-29' });
    expect([d.dimensions, settled(d).cr]).toEqual([{ region: 'north', year: 2024, month: 2, day: 29 }, '7.000']);
    // A period nothing was posted in: zero, with its dimensions.
    const none = read(SALES, id(700), north, { period: '2022-07' });
    expect([none.dimensions, settled(none)]).toEqual([
      { region: 'north', year: 2022, month: 7 },
      { dr: '0', cr: '0', normal: '0' },
    ]);

    // Cumulative: 2023 year + January + February days up to the 29th; amounts at the largest scale summed.
    const cum = read(SALES, id(700), north, { cumulative: '2024-02-29' });
    expect([cum.calculationId, cum.dimensions, settled(cum)]).toEqual([
      id(700),
      { region: 'north' },
      { dr: '0.000', cr: '59.500', normal: '59.500' },
    ]);
    expect(settled(read(SALES, id(700), north, { cumulative: '2024-02-28' })).cr).toBe('52.50');
    expect(settled(read(SALES, id(700), north, { cumulative: '2023-12-30' }))).toEqual({
      dr: '0',
      cr: '0',
      normal: '0',
    });
    // Ranges: partial dates mean their first day; both ends included.
    expect(settled(read(SALES, id(700), north, { range: { gte: '2024-01', lte: '2024-03' } })).cr).toBe('20.500');
    expect(settled(read(SALES, id(700), north, { range: { gte: '2023-12-31', lte: '2024-01-31' } })).cr).toBe('52.50');
    expect(settled(read(SALES, id(700), north, { range: { gte: '2024-01-06', lte: '2024-02-28' } })).cr).toBe('2.5');
    expect(settled(read(SALES, id(700), north, { range: { gte: '2020', lte: '2030-12-31' } })).cr).toBe('60.500');
    expect(settled(read(SALES, id(700), north, { range: { gte: '2024-02' } })).cr).toBe('8.000');
    expect(settled(read(SALES, id(700), { region: 'south' }, { range: { lte: '2024-02-10' } })).cr).toBe('100.00');
  });

  it('cumulative and range reads are bounded by the calendar, not by the number of entries', () => {
    ok(engine, CREATE, { i: BY_REGION });
    for (let i = 0; i < 60; i++) sale('1.00', '2024-05-17', 'east');
    const deps = engine.ledger.deps;
    let rowsRead = 0;
    const periods = deps.calc.periods;
    const spy = {
      all: (...args: any[]) => {
        const rows = (periods.all as any)(...args);
        rowsRead += rows.length;
        return rows;
      },
    };
    (deps.calc as any).periods = spy;
    try {
      expect(settled(read(SALES, id(700), { region: 'east' }, { cumulative: '2024-12-31' })).cr).toBe('60.00');
    } finally {
      (deps.calc as any).periods = periods;
    }
    expect(rowsRead).toBe(1); // one month record (May) summed
  });

  it('a set’s calculation balance counts its members’ entries', () => {
    ok(
      engine,
      `mutation { createAccountSet(input: {accountSetId: "${id(100)}", name: "Revenue", normalBalanceType: CREDIT}) { accountSetId } }`,
    );
    ok(
      engine,
      `mutation { addToAccountSet(id: "${id(100)}", member: {memberType: ACCOUNT, memberId: "${SALES}"}) { accountSetId } }`,
    );
    ok(
      engine,
      `mutation { addToAccountSet(id: "${id(100)}", member: {memberType: ACCOUNT, memberId: "${OTHER}"}) { accountSetId } }`,
    );
    ok(engine, CREATE, { i: BY_REGION });
    sale('5.00', '2024-04-01', 'west');
    sale('6.00', '2024-04-02', 'west', { to: OTHER });
    expect(settled(read(id(100), id(700), { region: 'west' }))).toEqual({ dr: '0', cr: '11.00', normal: '11.00' });
    expect(settled(read(id(100), id(700), { region: 'west' }, { period: '2024-04' })).cr).toBe('11.00');
    expect(settled(read(OTHER, id(700), { region: 'west' })).cr).toBe('6.00');
  });

  it('a void reverses the calculation balances (at the void’s effective date)', () => {
    ok(engine, CREATE, { i: BY_REGION });
    sale('8.00', '2024-01-10', 'north');
    const t = sale('3.00', '2024-01-11', 'north', { layer: 'PENDING' });
    expect(read(SALES, id(700), { region: 'north' }).available.normalBalance.units).toBe('11.00');
    ok(engine, `mutation { voidTransaction(id: "${t}") { transactionId } }`);
    const after = read(SALES, id(700), { region: 'north' });
    expect(after.available.normalBalance.units).toBe('8.00');
    // The reversal is dated the day of the void (the clock's date): its period carries it.
    expect(read(SALES, id(700), { region: 'north' }, { period: '2025-06-30' }).available.normalBalance.units).toBe(
      '-3.00',
    );
    expect(read(SALES, id(700), { region: 'north' }, { cumulative: '2025-06-30' }).available.normalBalance.units).toBe(
      '8.00',
    );
  });

  it("a dimension with no value for an entry counts it under null (one definition never fails others' postings); a condition that fails counts as false", () => {
    ok(engine, CREATE, {
      i: {
        calculationId: id(710),
        code: 'STRICT',
        description: 's',
        dimensions: [{ alias: 'channel', value: 'context.vars.entry.metadata.channel' }],
      },
    });
    ok(
      engine,
      `mutation { postTransaction(input: {transactionId: "${id(60_001)}", tranCode: "SALE", params: {amount: "1.00", effective: "2024-01-01"}}) { transactionId } }`,
    );
    expect(count(engine, 'transactions')).toBe(1);
    expect(settled(read(SALES, id(710), { channel: null })).cr).toBe('1.00');
    ok(engine, DELETE, { id: id(710) });
    // The condition reads a key the entry lacks: the entry is not counted, the posting goes through.
    ok(engine, CREATE, {
      i: {
        calculationId: id(711),
        code: 'LOOSE',
        description: 'l',
        dimensions: [],
        condition: "context.vars.entry.metadata.channel == 'web'",
      },
    });
    sale('1.00', '2024-01-01');
    sale('2.00', '2024-01-01', 'north');
    expect(settled(read(SALES, id(711), {})).cr).toBe('2.00');
    // A LOCKED (deleted) calculation is no longer kept up to date; its balances stay readable.
    ok(engine, DELETE, { id: id(711) });
    sale('4.00', '2024-01-01', 'north');
    expect(settled(read(SALES, id(711))).cr).toBe('2.00');
  });

  it('a dimension thousands of terms long (one level of the parsed tree each) is weighed and counted like any other', () => {
    // What a calculation reads of the entry is found by walking its parsed expressions: the walk
    // must not run out of stack on a long chain the parser accepts (it once failed every posting).
    const value = `context.vars.entry.sequence${'+1'.repeat(2000)}`;
    expect(value.length).toBeLessThan(4096);
    ok(engine, CREATE, {
      i: { calculationId: id(712), code: 'LONG', description: 'l', dimensions: [{ alias: 'n', value }] },
    });
    sale('1.00', '2024-01-01');
    expect(settled(read(SALES, id(712), { n: 2002 })).cr).toBe('1.00');
  });

  it('with no calculation, posting reads no calculation definitions once they are in memory', () => {
    const deps = engine.ledger.deps;
    const active = deps.calc.active;
    let loads = 0;
    (deps.calc as any).active = {
      all: () => {
        loads++;
        return active.all();
      },
    };
    try {
      for (let i = 0; i < 5; i++) sale('1.00', '2024-01-01', 'north');
      expect(loads).toBeLessThanOrEqual(1);
      ok(engine, CREATE, { i: BY_REGION });
      loads = 0;
      sale('1.00', '2024-01-01', 'north');
      sale('1.00', '2024-01-01', 'north');
      expect(loads).toBe(1); // reloaded once after the change, then kept
    } finally {
      (deps.calc as any).active = active;
    }
    expect(settled(read(SALES, id(700), { region: 'north' })).cr).toBe('7.00');
  });
});

describe('calculations: scope, attachment and backfill', () => {
  it('a GLOBAL calculation backfills the entries posted before it', () => {
    sale('4.00', '2024-01-01', 'north');
    sale('6.00', '2024-02-01', 'north');
    ok(engine, CREATE, { i: BY_REGION });
    expect(settled(read(SALES, id(700), { region: 'north' }))).toEqual({ dr: '0', cr: '10.00', normal: '10.00' });
    expect(settled(read(SALES, id(700), { region: 'north' }, { period: '2024-02' })).cr).toBe('6.00');
  });

  it('a LOCAL calculation counts only where attached; attach backfills, detach drops, delete needs detach first', () => {
    const LOCAL = { ...BY_REGION, scope: 'LOCAL' };
    ok(engine, CREATE, { i: LOCAL });
    sale('4.00', '2024-01-01', 'north');
    sale('5.00', '2024-01-02', 'north', { to: OTHER });
    expect(settled(read(SALES, id(700), { region: 'north' })).cr).toBe('0');
    const attached = ok(engine, ATTACH, { i: { accountId: SALES, calculationId: id(700) } }).attachCalculation;
    expect(attached).toEqual({
      accountId: SALES,
      journalId: '00000000-0000-0000-0000-000000000000',
      calculationId: id(700),
      calculation: { code: 'BY_REGION' },
    });
    sale('1.00', '2024-01-03', 'north');
    expect(settled(read(SALES, id(700), { region: 'north' })).cr).toBe('5.00');
    expect(settled(read(SALES, id(700), { region: 'north' }, { period: '2024-01-01' })).cr).toBe('4.00');
    expect(settled(read(OTHER, id(700), { region: 'north' })).cr).toBe('0');
    expect(settled(read(CASH, id(700), { region: 'north' })).dr).toBe('0');

    expect(fails(engine, ATTACH, { i: { accountId: SALES, calculationId: id(700) } }).code).toBe('ALREADY_EXISTS');
    const del = fails(engine, DELETE, { id: id(700) });
    expect([del.code, del.message]).toEqual(['BAD_REQUEST', 'calculation BY_REGION is still attached']);

    ok(engine, DETACH, { i: { accountId: SALES, calculationId: id(700) } });
    expect(settled(read(SALES, id(700), { region: 'north' })).cr).toBe('0');
    expect(
      ok(engine, `{ calculation(calculationId: "${id(700)}") { backfillStatus children { backfillStatus } } }`)
        .calculation,
    ).toEqual({
      backfillStatus: 'DETACHED',
      children: [{ backfillStatus: 'DETACHED' }, { backfillStatus: 'DETACHED' }, { backfillStatus: 'DETACHED' }],
    });
    expect(fails(engine, DETACH, { i: { accountId: SALES, calculationId: id(700) } }).code).toBe('NOT_FOUND');
    // Attaching again backfills anew, exactly once.
    ok(engine, ATTACH, { i: { accountId: SALES, calculationId: id(700) } });
    expect(settled(read(SALES, id(700), { region: 'north' })).cr).toBe('5.00');
    ok(engine, DETACH, { i: { accountId: SALES, calculationId: id(700) } });

    const deleted = ok(engine, DELETE, { id: id(700) }).deleteCalculation;
    expect(deleted).toEqual({ calculationId: id(700), status: 'LOCKED' });
    expect(
      ok(
        engine,
        `{ calculation(calculationId: "${id(700)}") { status children { status } } }`,
      ).calculation.children.map((c: any) => c.status),
    ).toEqual(['LOCKED', 'LOCKED', 'LOCKED']);
    expect(fails(engine, ATTACH, { i: { accountId: SALES, calculationId: id(700) } }).code).toBe('BAD_REQUEST');
  });

  it('a LOCAL calculation attached to a set counts the entries that roll up into it, in the set’s journal', () => {
    ok(
      engine,
      `mutation { createAccountSet(input: {accountSetId: "${id(100)}", name: "Revenue", normalBalanceType: CREDIT}) { accountSetId } }`,
    );
    ok(
      engine,
      `mutation { addToAccountSet(id: "${id(100)}", member: {memberType: ACCOUNT, memberId: "${SALES}"}) { accountSetId } }`,
    );
    ok(engine, CREATE, { i: { ...BY_REGION, scope: 'LOCAL', config: null } });
    sale('2.00', '2024-01-01', 'north');
    ok(engine, ATTACH, { i: { accountId: id(100), calculationId: id(700) } });
    sale('3.00', '2024-01-01', 'north');
    expect(settled(read(id(100), id(700), { region: 'north' })).cr).toBe('5.00');
    expect(settled(read(SALES, id(700), { region: 'north' })).cr).toBe('0');
  });

  it('GLOBAL calculations are not attached; unknown ids are NOT_FOUND', () => {
    ok(engine, CREATE, { i: BY_REGION });
    expect(fails(engine, ATTACH, { i: { accountId: SALES, calculationId: id(700) } }).code).toBe('BAD_REQUEST');
    expect(fails(engine, ATTACH, { i: { accountId: SALES, calculationId: id(799) } }).code).toBe('NOT_FOUND');
    ok(engine, CREATE, { i: { ...BY_REGION, calculationId: id(701), code: 'L', scope: 'LOCAL' } });
    expect(fails(engine, ATTACH, { i: { accountId: id(999), calculationId: id(701) } }).code).toBe('NOT_FOUND');
    expect(fails(engine, ATTACH, { i: { accountId: SALES, calculationId: id(701), journalId: id(998) } }).code).toBe(
      'NOT_FOUND',
    );
    expect(fails(engine, DELETE, { id: id(799) }).code).toBe('NOT_FOUND');
    expect(count(engine, 'calculation_attachments')).toBe(0);
  });
});

describe('calculations: backfill limit', () => {
  it('refuses a backfill over calculationBackfillEntriesMax and writes nothing', async () => {
    engine.close();
    await setup({ limits: { calculationBackfillEntriesMax: 3 } });
    sale('1.00', '2024-01-01', 'north');
    sale('1.00', '2024-01-02', 'north'); // 4 entries
    const e = fails(engine, CREATE, { i: BY_REGION });
    expect([e.code, e.message]).toEqual([
      'LIMIT_EXCEEDED',
      'calculation BY_REGION would backfill more than calculationBackfillEntriesMax (3) entries',
    ]);
    expect(e.hint).toContain('LOCAL');
    expect(count(engine, 'calculations')).toBe(0);
    expect(count(engine, 'calculation_balances')).toBe(0);
    // A LOCAL one attached to an account with 2 entries fits.
    ok(engine, CREATE, { i: { ...BY_REGION, scope: 'LOCAL' } });
    ok(engine, ATTACH, { i: { accountId: SALES, calculationId: id(700) } });
    expect(settled(read(SALES, id(700), { region: 'north' })).cr).toBe('2.00');
    sale('1.00', '2024-01-03', 'north', { to: OTHER });
    sale('1.00', '2024-01-04', 'north', { to: OTHER });
    sale('1.00', '2024-01-05', 'north', { to: OTHER });
    sale('1.00', '2024-01-06', 'north', { to: OTHER });
    const over = fails(engine, ATTACH, { i: { accountId: OTHER, calculationId: id(700) } });
    expect(over.code).toBe('LIMIT_EXCEEDED');
    expect(count(engine, 'calculation_attachments')).toBe(1);
  });
});

describe('calculations: calculationsMax', () => {
  it('bounds the active calculations every posting is weighed against; children do not count', async () => {
    engine.close();
    await setup({ limits: { calculationsMax: 2 } });
    ok(engine, CREATE, {
      i: {
        calculationId: id(710),
        code: 'ONE',
        description: 'one',
        dimensions: [],
        config: { enableEffectiveBalances: true },
      },
    });
    ok(engine, CREATE, { i: { calculationId: id(711), code: 'TWO', description: 'two', dimensions: [] } });
    const e = fails(engine, CREATE, {
      i: { calculationId: id(712), code: 'THREE', description: 'three', dimensions: [] },
    });
    expect([e.code, e.message]).toEqual(['LIMIT_EXCEEDED', 'there are 2 active calculations; calculationsMax is 2']);
    // A deleted one frees its place.
    ok(engine, DELETE, { id: id(711) });
    ok(engine, CREATE, { i: { calculationId: id(712), code: 'THREE', description: 'three', dimensions: [] } });
  });
});

describe('calculations: reads', () => {
  it('refuses bad reads with a clear code and message', () => {
    ok(engine, CREATE, { i: BY_REGION });
    ok(engine, CREATE, { i: { calculationId: id(701), code: 'PLAIN', description: 'p', dimensions: [] } });
    const bad = (accountId: string, calc: string | null, dimension?: unknown, effective?: unknown) => {
      const e = fails(engine, READ, { a: accountId, c: calc, d: dimension, e: effective });
      expect(e.result.data).toEqual({ balance: null });
      return [e.code, e.message];
    };
    expect(bad(SALES, id(700), { year: '2024', region: 'n' }, { period: '2024' })).toEqual([
      'BAD_REQUEST',
      "dimension 'year' is reserved for effective dates",
    ]);
    expect(bad(SALES, id(700), { regoin: 'n' })).toEqual([
      'BAD_REQUEST',
      'calculation BY_REGION has no dimension "regoin"',
    ]);
    expect(bad(SALES, id(700), {})).toEqual([
      'BAD_REQUEST',
      'dimension has no value for "region" of calculation BY_REGION',
    ]);
    expect(bad(SALES, id(700), { region: 'n' }, { period: '2024-13' })).toEqual([
      'BAD_REQUEST',
      'effective.period "2024-13" is not a period YYYY, YYYY-MM or YYYY-MM-DD',
    ]);
    expect(bad(SALES, id(700), { region: 'n' }, { period: '2023-02-29' })[0]).toBe('BAD_REQUEST');
    expect(bad(SALES, id(700), { region: 'n' }, { period: '24' })[0]).toBe('BAD_REQUEST');
    expect(bad(SALES, id(700), { region: 'n' }, { period: '2024', cumulative: '2024-01-01' })).toEqual([
      'BAD_REQUEST',
      'effective takes exactly one of period, range or cumulative, got period, cumulative',
    ]);
    expect(bad(SALES, id(700), { region: 'n' }, { range: { gte: '2024-03', lte: '2024-01' } })[0]).toBe('BAD_REQUEST');
    expect(bad(SALES, id(701), {}, { period: '2024' })).toEqual([
      'BAD_REQUEST',
      'failed to resolve effective calculation: calculation does not have enable_effective set',
    ]);
    expect(bad(SALES, null, undefined, { period: '2024' })).toEqual([
      'BAD_REQUEST',
      'balance takes effective only with a calculationId',
    ]);
    expect(bad(SALES, id(799), {})[0]).toBe('NOT_FOUND');
    expect(bad(id(999), id(700), { region: 'n' })[0]).toBe('NOT_FOUND');
    const child = nameBasedUuid('sha1', 5, id(700), Buffer.from('YYYY'));
    expect(bad(SALES, child, { region: 'n' })[0]).toBe('BAD_REQUEST');
    // The plain balance still reads as before, without calculation fields.
    expect(
      ok(engine, `{ balance(accountId: "${SALES}") { calculationId dimensions settled { normalBalance { units } } } }`)
        .balance,
    ).toEqual({ calculationId: null, dimensions: null, settled: { normalBalance: { units: '0' } } });
  });

  it('lists a calculation’s balance records through the CALCULATION index, by a leading subset of its dimensions', () => {
    ok(engine, CREATE, {
      i: {
        ...BY_REGION,
        dimensions: [...BY_REGION.dimensions, { alias: 'channel', value: 'context.vars.entry.metadata.channel' }],
      },
    });
    sale('1.00', '2024-01-01', 'north', { channel: 'web' });
    sale('2.00', '2024-01-01', 'north', { channel: 'shop' });
    sale('4.00', '2024-01-01', 'south', { channel: 'web' });
    const LIST = `query($w: BalanceFilterInput!, $after: String) { balances(index: {name: CALCULATION}, where: $w, first: 2, after: $after) {
      nodes { calculationId dimensions settled { crBalance { units } } } pageInfo { hasNextPage endCursor } } }`;
    const first = ok(engine, LIST, { w: { accountId: SALES, calculationId: id(700) } }).balances;
    expect(first.nodes.map((n: any) => [n.dimensions, n.settled.crBalance.units])).toEqual([
      [{ region: 'north', channel: 'shop' }, '2.00'],
      [{ region: 'north', channel: 'web' }, '1.00'],
    ]);
    const second = ok(engine, LIST, {
      w: { accountId: SALES, calculationId: id(700) },
      after: first.pageInfo.endCursor,
    }).balances;
    expect([second.nodes.map((n: any) => n.dimensions), second.pageInfo.hasNextPage]).toEqual([
      [{ region: 'south', channel: 'web' }],
      false,
    ]);
    const north = ok(engine, LIST, {
      w: { accountId: SALES, calculationId: id(700), dimension: { region: 'south' } },
    }).balances;
    expect(north.nodes.map((n: any) => n.settled.crBalance.units)).toEqual(['4.00']);
    const months = ok(engine, LIST, {
      w: {
        accountId: SALES,
        calculationId: nameBasedUuid('sha1', 5, id(700), Buffer.from('YYYY_MM')),
        dimension: { region: 'north', channel: 'web' },
      },
    }).balances;
    expect(months.nodes.map((n: any) => n.dimensions)).toEqual([
      { year: 2024, month: 1, region: 'north', channel: 'web' },
    ]);
    const skip = fails(engine, LIST, {
      w: { accountId: SALES, calculationId: id(700), dimension: { channel: 'web' } },
    });
    expect([skip.code, skip.message]).toEqual([
      'BAD_REQUEST',
      'dimension gives channel but not region, which comes before it in calculation BY_REGION',
    ]);
  });
});

describe('calculations: authority', () => {
  it('needs financial.Calculation to define and financial.Balance to read', () => {
    ok(engine, CREATE, { i: BY_REGION });
    const client = (principal: string, policies: unknown[]) =>
      ok(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', {
        i: { principal, name: principal, policies },
      });
    client('balances-only', [
      { effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.Balance', 'financial.Account'] },
    ]);
    client('calcs-only', [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['financial.Calculation'] },
    ]);
    expect(
      fails(engine, CREATE, { i: { ...BY_REGION, calculationId: id(705), code: 'X' } }, 'balances-only').code,
    ).toBe('ACCESS_DENIED');
    expect(fails(engine, DELETE, { id: id(700) }, 'balances-only').code).toBe('ACCESS_DENIED');
    expect(
      fails(engine, `{ calculation(calculationId: "${id(700)}") { code } }`, undefined, 'balances-only').code,
    ).toBe('ACCESS_DENIED');
    expect(fails(engine, READ, { a: SALES, c: id(700), d: { region: 'n' } }, 'calcs-only').code).toBe('ACCESS_DENIED');
    expect(
      ok(engine, READ, { a: SALES, c: id(700), d: { region: 'n' } }, 'balances-only').balance.settled.crBalance.units,
    ).toBe('0');
    expect(count(engine, 'calculations')).toBe(4);
  });
});
