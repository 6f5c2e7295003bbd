import { getIntrospectionQuery } from 'graphql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine.js';
import type { FormattedResult } from '../../src/graphql/executor.js';
import { DocumentCache } from '../../src/graphql/executor.js';
import { buildSchema } from '../../src/graphql/schema.js';
import { DEFAULT_LIMITS, resolveLimits } from '../../src/limits.js';
import { createAccount, createTransferCode, POST } from '../helpers/ledger.js';
import { fails, id, newEngine, ok } from '../helpers/engine.js';
import { startServer } from '../helpers/server.js';

// The attacks come from a client with no policies, or with SELECT only: every bound here holds
// before any policy is checked or any resolver runs.
const READER = [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['financial.*', 'actions.*'] }];

function createClient(engine: Engine, principal: string, policies: unknown[]): string {
  const input = { principal, name: principal, policies };
  return ok(engine, 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }', { i: input }).auth
    .createClient.apiKey;
}

/** Accounts 1-3, the TRANSFER tran code and `postings` transfers between them. */
function smallLedger(engine: Engine, postings = 6): void {
  for (let a = 1; a <= 3; a++) createAccount(engine, a);
  createTransferCode(engine);
  for (let i = 0; i < postings; i++) {
    ok(engine, POST, {
      input: {
        transactionId: id(100 + i),
        tranCode: 'TRANSFER',
        params: { from: id(1 + (i % 3)), to: id(1 + ((i + 1) % 3)), amount: '1' },
      },
    });
  }
}

/** The first error of a request that must fail with LIMIT_EXCEEDED, with a hint. */
function limitExceeded(result: FormattedResult) {
  expect(result.errors, `expected LIMIT_EXCEEDED, got ${JSON.stringify(result.data)?.slice(0, 200)}`).toBeDefined();
  const error = result.errors![0]!;
  expect(error.extensions?.code, error.message).toBe('LIMIT_EXCEEDED');
  expect(error.extensions?.hint).toBeTruthy();
  return {
    message: error.message,
    hint: error.extensions!.hint as string,
    details: error.extensions!.details as Record<string, number> | undefined,
  };
}

/** Review case 3: `fragment Fi { name ...Fi+1 ...Fi+1 }`, 2^k walks for the old depth rule. */
function doubledFragments(k: number, body = (i: number) => `name ...F${i + 1} ...F${i + 1}`): string {
  let fragments = '';
  for (let i = 0; i < k; i++) fragments += ` fragment F${i} on Journal { ${body(i)} }`;
  return `{ journal { ...F0 } }${fragments} fragment F${k} on Journal { name }`;
}

/** Case 3 made deep: each level is one connection further down, each spread twice. */
function doubledDeepFragments(k: number): string {
  let fragments = '';
  for (let i = 0; i < k; i++)
    fragments += ` fragment E${i} on Entry { transaction { entries(first: 1) { nodes { ...E${i + 1} ...E${i + 1} } } } }`;
  return `{ entries(first: 1, where: {accountId: "${id(1)}"}) { nodes { ...E0 } } }${fragments} fragment E${k} on Entry { units }`;
}

/** Review case 4: 99 KB of 8,000 `__typename` aliases (~4.7 MB of heap each, cached). */
function aliases99KB(i: number): string {
  let q = `query Q${i} { ${Array.from({ length: 8200 }, (_, j) => `a${j}: __typename`).join(' ')}`;
  q = q.slice(0, 98990);
  return `${q.slice(0, q.lastIndexOf(' a'))} }`;
}

/** Case 4 at the bounds: 1,990 aliases (just under documentFieldsMax), ~1.1 MB estimated (~0.55 MB measured). */
function aliasesAtTheBounds(i: number): string {
  return `query B${i} { ${Array.from({ length: 1990 }, (_, j) => `a${j}: __typename`).join(' ')} }`;
}

/** Review case 5: accounts → entries → transaction → entries → account → entries (175 bytes). */
function fanOut(a: number, b: number, c: number, accounts = 1000): string {
  return `{ accounts(first: ${accounts}) { nodes { entries(first: ${a}) { nodes { transaction { entries(first: ${b}) { nodes { account { entries(first: ${c}) { nodes { units } } } } } } } } } } }`;
}

/** The same field with a selection, `n` times in one selection set: n² / 2 comparisons. */
function repeatedField(n: number): string {
  return `{ ${'journal { name } '.repeat(n)}}`;
}

/** `a: queries { … } a: queries { … }` nested d deep: every pair compares everything beneath it. */
function binaryAliases(d: number): string {
  const level = (n: number): string =>
    n === 0 ? 'journal { name }' : `a: queries { ${level(n - 1)} } a: queries { ${level(n - 1)} }`;
  return `mutation { ${level(d)} }`;
}

/** Fragments with the same field, spread side by side: each pair of them is compared. */
function fragmentsSideBySide(n: number): string {
  let query = `{ journal { ${Array.from({ length: n }, (_, i) => `...F${i}`).join(' ')} } }`;
  for (let i = 0; i < n; i++) query += ` fragment F${i} on Journal { name }`;
  return query;
}

/** `__schema` selected n times: introspection is counted against the schema itself. */
function introspectionAliases(n: number): string {
  return `{ ${Array.from({ length: n }, (_, i) => `s${i}: __schema { types { fields { name args { name } } } }`).join(' ')} }`;
}

/** `tally tree`'s query (src/cli/execution-commands.ts, TREE_DEPTH 6): the costliest query the repo sends. */
function cliTree(depth: number): string {
  const own = 'executionId kind actionName actionVersion status error { code message } invocation { durationMs }';
  return depth === 0 ? own : `${own} children { ${cliTree(depth - 1)} }`;
}

describe('validation is linear in the document (review case 3)', () => {
  let engine: Engine;
  let nobody: string;
  beforeAll(async () => {
    engine = await newEngine();
    nobody = createClient(engine, 'nobody', []);
  });
  afterAll(() => engine.close());

  it('answers 1.2 KB of fragments spread twice per level (k = 26: 2^26 walks before) at once, for any key', () => {
    const query = doubledFragments(26);
    expect(query.length).toBe(1248);
    expect(ok(engine, query).journal.name).toBe('Default');
    // The client with no policies gets its answer (no access) instead of freezing the server.
    expect(engine.graphql(query, null, { apiKey: nobody }).errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
    expect(ok(engine, doubledFragments(60)).journal.name).toBe('Default');
  });

  it('the same through inline fragments; made deep, it is refused by queryDepthMax at once', () => {
    const inline = doubledFragments(40, (i) => `name ... on Journal { ...F${i + 1} } ... { ...F${i + 1} }`);
    expect(ok(engine, inline).journal.name).toBe('Default');
    expect(limitExceeded(engine.graphql(doubledDeepFragments(30), null, { apiKey: nobody })).message).toBe(
      'the operation is nested 93 levels deep; queryDepthMax is 12',
    );
  });
});

describe('the document bounds and the document cache (review case 4)', () => {
  it('refuses the 99 KB document of 8,000 aliases while parsing it (documentTokensMax), and caches nothing', async () => {
    const engine = await newEngine();
    const nobody = createClient(engine, 'nobody', []);
    const cached = engine.stats().documentCacheSize;
    for (let i = 0; i < 3; i++) {
      const error = limitExceeded(engine.graphql(aliases99KB(i), null, { apiKey: nobody }));
      expect(error.message).toBe(
        `the GraphQL document has more than ${DEFAULT_LIMITS.documentTokensMax} tokens; documentTokensMax is ${DEFAULT_LIMITS.documentTokensMax}`,
      );
    }
    expect(engine.stats().documentCacheSize).toBe(cached);
    engine.close();
  });

  it('documentCacheBytesMax: documents at the other bounds fill the cache to its bytes and no further', async () => {
    const documentCacheBytesMax = 3 * 1024 * 1024;
    const engine = await newEngine({ limits: { documentCacheBytesMax } });
    const nobody = createClient(engine, 'nobody', []);
    for (let i = 0; i < 12; i++) {
      expect(engine.graphql(aliasesAtTheBounds(i), null, { apiKey: nobody }).data).toBeDefined();
      expect(engine.stats().documentCacheBytes).toBeLessThanOrEqual(documentCacheBytesMax);
    }
    expect(engine.stats().documentCacheSize).toBeGreaterThanOrEqual(2);
    expect(engine.stats().documentCacheSize).toBeLessThan(6);
    engine.close();
  });

  it('evicts the least recently used document first', () => {
    const cache = new DocumentCache(buildSchema(DEFAULT_LIMITS), resolveLimits({ documentCacheBytesMax: 64 * 1024 }));
    const doc = (i: number) => `query Q${i} { journal { name description status code version } }`;
    const kept = cache.prepare(doc(0));
    const early = cache.prepare(doc(1));
    for (let i = 2; i < 100; i++) {
      expect(cache.prepare(doc(0))).toBe(kept); // used each time: never the least recently used
      cache.prepare(doc(i));
      expect(cache.bytes).toBeLessThanOrEqual(64 * 1024);
    }
    expect(cache.size).toBeGreaterThan(2);
    expect(cache.size).toBeLessThan(100);
    expect(cache.prepare(doc(1))).not.toBe(early); // evicted, prepared again
  });

  it('documentTokensMax and documentFieldsMax: each refused with its name just over; at the bound it runs', async () => {
    const engine = await newEngine({ limits: { documentTokensMax: 8, documentFieldsMax: 3 } });
    expect(ok(engine, '{ journal { name code } }').journal.name).toBe('Default'); // 6 tokens, 3 fields
    expect(limitExceeded(engine.graphql('{ journal { name code status } }')).message).toBe(
      'the GraphQL document selects 4 fields; documentFieldsMax is 3',
    );
    expect(limitExceeded(engine.graphql('{ journal { name } journal { code } }')).message).toBe(
      'the GraphQL document has more than 8 tokens; documentTokensMax is 8',
    );
    engine.close();
  });

  it('fieldComparisonsMax: repeated fields, nested repeated aliases and fragments side by side are refused before validation', async () => {
    const engine = await newEngine();
    const nobody = createClient(engine, 'nobody', []);
    for (const query of [repeatedField(500), binaryAliases(8), fragmentsSideBySide(400)]) {
      expect(limitExceeded(engine.graphql(query, null, { apiKey: nobody })).message).toContain('(fieldComparisonsMax)');
    }
    // A field selected directly and through a fragment is the usual overlap: a handful of comparisons.
    ok(engine, `{ journal { name ...J ... on Journal { name code } } } fragment J on Journal { name code }`);
    ok(engine, repeatedField(20));
    const strict = await newEngine({ limits: { fieldComparisonsMax: 6 } });
    ok(strict, repeatedField(3)); // 3 pairs of journal, each with 1 × 1 beneath
    expect(limitExceeded(strict.graphql(repeatedField(4))).message).toBe(
      'validating the GraphQL document would compare more than 6 pairs of fields (fieldComparisonsMax)',
    );
    engine.close();
    strict.close();
  });

  it('syntax and validation errors still say where; a document nested too deep to parse is LIMIT_EXCEEDED', async () => {
    const engine = await newEngine();
    const syntax = engine.graphql('{ journal { name }');
    expect(syntax.errors?.[0]).toMatchObject({
      extensions: { code: 'GRAPHQL_PARSE_FAILED' },
      locations: [{ line: 1, column: 19 }],
    });
    const invalid = engine.graphql('{ journal {\n  nope } }');
    expect(invalid.errors?.[0]).toMatchObject({
      extensions: { code: 'GRAPHQL_VALIDATION_FAILED' },
      locations: [{ line: 2, column: 3 }],
    });
    const nested = `mutation { evaluate(expression: "1", document: ${'['.repeat(4000)}1${']'.repeat(4000)}) }`;
    expect(limitExceeded(engine.graphql(nested)).message).toBe('the GraphQL document is nested too deeply to parse');
    engine.close();
  });
});

describe('a cost budget, computed before any resolver runs (review case 5)', () => {
  let engine: Engine;
  let reader: string;
  beforeAll(async () => {
    engine = await newEngine();
    smallLedger(engine);
    reader = createClient(engine, 'reader', READER);
  });
  afterAll(() => engine.close());

  it('refuses the 175-byte fan-out from a SELECT-only client, with its cost and the limit', () => {
    const query = fanOut(1000, 10, 100);
    expect(query.length).toBe(175);
    const error = limitExceeded(engine.graphql(query, null, { apiKey: reader }));
    // 1 + 1000 × (1 + 1 + 1000 × (1 + 1 + 1 + 1 + 10 × (1 + 1 + 1 + 1 + 100 × (1 + 1))))
    expect(error.details).toEqual({
      limit: 'queryCostMax',
      max: DEFAULT_LIMITS.queryCostMax,
      actual: 2_033_002_001,
      cost: 2_033_002_001,
      queryCostMax: DEFAULT_LIMITS.queryCostMax,
    });
    expect(error.message).toBe(`the operation costs 2033002001; queryCostMax is ${DEFAULT_LIMITS.queryCostMax}`);
    expect(error.hint).toContain('smaller `first`');
    expect(limitExceeded(engine.graphql(fanOut(1000, 10, 1000), null, { apiKey: reader })).details!.cost).toBe(
      20_033_002_001,
    );
    // The same shape with small pages is an ordinary query.
    expect(engine.graphql(fanOut(10, 2, 10, 10), null, { apiKey: reader }).errors).toBeUndefined();
  });

  it('connections nested other ways, aliases, fragments and inline fragments multiply too', () => {
    const attacks = {
      'account → entries → account → balances': `{ account(id: "${id(1)}") { entries(first: 1000) { nodes { account { balances(first: 1000) { nodes { currency } } } } } } }`,
      'transactions → entries → transaction → correlated': `{ transactions(first: 1000) { nodes { entries(first: 1000) { nodes { transaction { correlated(first: 1000) { nodes { transactionId } } } } } } } }`,
      'account history → entries': `{ account(id: "${id(1)}") { history(first: 1000) { nodes { entries(first: 1000) { nodes { units } } } } } }`,
      'tran code history → entries templates': `{ tranCodes(first: 1000) { nodes { history(first: 1000) { nodes { entries { units } } } } } }`,
      'executions → children → parent → children': `{ actions { executions(first: 1000) { nodes { children { parent { children { status } } } } } } }`,
      'action versions → versions → versions': `{ actions { action(name: "x") { versions { versions { versions { version } } } } } }`,
      '40 aliases of one page': `{ ${Array.from({ length: 40 }, (_, i) => `a${i}: accounts(first: 1000) { nodes { code name status } }`).join(' ')} }`,
      'a fragment spread in nested pages': `{ accounts(first: 1000) { nodes { entries(first: 1000) { nodes { ...E } } } } } fragment E on Entry { units currency direction }`,
      'inline fragments around the pages': `{ accounts(first: 1000) { ... on AccountConnection { nodes { ... on Account { entries(first: 1000) { nodes { units } } } } } } }`,
      'edges instead of nodes': `{ accounts(first: 1000) { edges { node { entries(first: 1000) { edges { node { units } } } } } } }`,
      'inside a mutation': `mutation { queries { accounts(first: 1000) { nodes { entries(first: 1000) { nodes { units } } } } } }`,
    };
    for (const [name, query] of Object.entries(attacks)) {
      const error = limitExceeded(engine.graphql(query, null, { apiKey: reader }));
      expect(error.details!.cost, name).toBeGreaterThan(DEFAULT_LIMITS.queryCostMax);
    }
  });

  it('a variable `first` is costed with each request’s value (pageSizeMax when unknown)', () => {
    const query =
      'query($n: Int!) { accounts(first: $n) { nodes { entries(first: $n) { nodes { transaction { entries(first: $n) { nodes { units } } } } } } } }';
    expect(engine.graphql(query, { n: 10 }, { apiKey: reader }).errors).toBeUndefined();
    expect(limitExceeded(engine.graphql(query, { n: 1000 }, { apiKey: reader })).details).toEqual({
      limit: 'queryCostMax',
      max: DEFAULT_LIMITS.queryCostMax,
      actual: 2_003_002_001,
      cost: 2_003_002_001,
      queryCostMax: DEFAULT_LIMITS.queryCostMax,
    });
    expect(limitExceeded(engine.graphql(query, { n: 'many' }, { apiKey: reader })).details!.cost).toBe(2_003_002_001);
    expect(engine.graphql(query, { n: 10 }, { apiKey: reader }).errors).toBeUndefined(); // the same prepared document
    const withDefault =
      'query($n: Int! = 1000) { accounts(first: $n) { nodes { entries(first: $n) { nodes { units } } } } }';
    expect(limitExceeded(engine.graphql(withDefault, {}, { apiKey: reader })).details!.cost).toBe(2_002_001);
    expect(engine.graphql(withDefault, { n: 5 }, { apiKey: reader }).errors).toBeUndefined();
  });

  it('queryCostMax: a cost at the bound runs, one over it is refused', async () => {
    const strict = await newEngine({ limits: { queryCostMax: 11 } });
    ok(strict, '{ accounts(first: 5) { nodes { code } } }'); // 1 + 5 × (1 + 1)
    expect(limitExceeded(strict.graphql('{ accounts(first: 6) { nodes { code } } }')).details).toEqual({
      limit: 'queryCostMax',
      max: 11,
      actual: 13,
      cost: 13,
      queryCostMax: 11,
    });
    // A `first` over pageSizeMax is the connection's own error, not a cost.
    expect(fails(engine, '{ accounts(first: 1001) { nodes { code } } }').message).toContain('pageSizeMax (1000)');
    strict.close();
  });

  it('the repo’s own queries and GraphiQL’s introspection pass; introspection is counted against the schema', async () => {
    ok(engine, 'query($f: Int!) { accounts(first: $f) { nodes { accountId code name status normalBalanceType } } }', {
      f: 1000,
    });
    ok(
      engine,
      '{ actions { executions(first: 1000) { nodes { executionId status actionName actionVersion attempt output error { code message hint } created } } } }',
    );
    // `tally tree`: each level of children is within the same 1,024 calls, so it costs 66,573.
    expect(fails(engine, `{ actions { execution(executionId: "${id(1)}") { ${cliTree(6)} } } }`).code).toBe(
      'NOT_FOUND',
    );
    // GraphiQL's query is 15 levels deep (introspection does not count against queryDepthMax); its cost is what it returns.
    const deep = await newEngine();
    const nobody = createClient(deep, 'nobody', []);
    for (const query of [
      getIntrospectionQuery(),
      getIntrospectionQuery({
        descriptions: true,
        inputValueDeprecation: true,
        schemaDescription: true,
        specifiedByUrl: true,
      }),
    ]) {
      const schema = deep.graphql(query, null, { apiKey: nobody });
      expect(schema.errors).toBeUndefined();
      expect((schema.data as any).__schema.types.length).toBeGreaterThan(100);
    }
    expect(
      deep.graphql('{ __type(name: "Account") { fields { name type { name } } } }', null, { apiKey: nobody }).errors,
    ).toBeUndefined();
    const error = limitExceeded(deep.graphql(introspectionAliases(200), null, { apiKey: nobody }));
    expect(error.details!.cost).toBeGreaterThan(DEFAULT_LIMITS.queryCostMax);
    // `__type(name: $t)` is counted with each request's type.
    const byName = `query($t: String!) { ${Array.from({ length: 250 }, (_, i) => `t${i}: __type(name: $t) { ...T }`).join(' ')} }
      fragment T on __Type { fields { name type { name fields { name } ofType { name fields { name type { name } } } } } }`;
    expect(deep.graphql(byName, { t: 'Money' }, { apiKey: nobody }).errors).toBeUndefined();
    // 250 × 533 in all; counting stops once past the limit.
    const overByName = limitExceeded(deep.graphql(byName, { t: 'Mutation' }, { apiKey: nobody }));
    expect(overByName.details!.cost).toBeGreaterThan(DEFAULT_LIMITS.queryCostMax);
    expect(overByName.message).toMatch(/^the operation costs more than \d+; queryCostMax is 100000$/);
    deep.close();
  });
});

describe('introspection under the default limits (GraphiQL’s Docs pane and autocomplete)', () => {
  let engine: Engine;
  let nobody: string;
  beforeAll(async () => {
    engine = await newEngine();
    nobody = createClient(engine, 'nobody', []);
  });
  afterAll(() => engine.close());

  it('answers getIntrospectionQuery() (15 levels deep) for a client with no policies: the schema is public', () => {
    for (const query of [
      getIntrospectionQuery(),
      getIntrospectionQuery({
        descriptions: true,
        inputValueDeprecation: true,
        schemaDescription: true,
        specifiedByUrl: true,
      }),
    ]) {
      const result = engine.graphql(query, null, { apiKey: nobody });
      expect(result.errors).toBeUndefined();
      const schema = (result.data as any).__schema;
      expect([schema.queryType.name, schema.mutationType.name]).toEqual(['Query', 'Mutation']);
      const root = schema.types.find((t: { name: string }) => t.name === 'Query');
      expect(root.fields.map((f: { name: string }) => f.name)).toContain('balance');
    }
    // Below Mutation.queries (the query type) too: 11 levels of ofType under one field.
    const wrapped = `mutation { queries { __schema { types { fields { type { ${'ofType { '.repeat(8)}name ${'} '.repeat(8)}} } } } } }`;
    expect(engine.graphql(wrapped, null, { apiKey: nobody }).errors).toBeUndefined();
    // Only what is below the meta fields is exempt: the client still reads no data.
    const mixed = engine.graphql('{ __schema { queryType { name } } journal { name } }', null, { apiKey: nobody });
    expect(mixed.errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
  });

  it('still refuses a deep query that is not introspection, and one that goes deeper beside __schema', () => {
    const children = (n: number): string => (n === 0 ? 'executionId' : `executionId children { ${children(n - 1)} }`);
    const deep = `{ actions { executions(first: 1) { nodes { ${children(11)} } } } }`;
    expect(limitExceeded(engine.graphql(deep, null, { apiKey: nobody })).message).toBe(
      'the operation is nested 15 levels deep; queryDepthMax is 12',
    );
    const beside = `{ __schema { queryType { name } } actions { executions(first: 1) { nodes { ${children(11)} } } } }`;
    expect(limitExceeded(engine.graphql(beside, null, { apiKey: nobody })).message).toBe(
      'the operation is nested 15 levels deep; queryDepthMax is 12',
    );
    // Through a fragment on Query too.
    const viaFragment = `{ ...Q } fragment Q on Query { __typename actions { executions(first: 1) { nodes { ${children(11)} } } } }`;
    expect(limitExceeded(engine.graphql(viaFragment, null, { apiKey: nobody })).message).toContain(
      'queryDepthMax is 12',
    );
  });

  it('keeps introspection’s own bounds: MaxIntrospectionDepthRule, documentFieldsMax, queryCostMax', () => {
    // `fields` nested three times is graphql-js's MaxIntrospectionDepthRule's to refuse.
    const cyclic = engine.graphql(
      '{ __schema { types { fields { type { fields { type { fields { name } } } } } } } }',
      null,
      { apiKey: nobody },
    );
    expect(cyclic.errors?.[0]?.message).toBe('Maximum introspection depth exceeded');
    // `ofType` is not a way back to a type (it ends in null within a few levels); a long chain is bounded by the document bounds.
    const chain = (n: number): string => `{ __type(name: "Query") { ${'ofType { '.repeat(n)}name ${'} '.repeat(n)}} }`;
    expect(engine.graphql(chain(500), null, { apiKey: nobody }).errors).toBeUndefined();
    expect(limitExceeded(engine.graphql(chain(2000), null, { apiKey: nobody })).message).toContain(
      'documentFieldsMax is 2000',
    );
    expect(
      limitExceeded(engine.graphql(introspectionAliases(200), null, { apiKey: nobody })).details!.cost,
    ).toBeGreaterThan(DEFAULT_LIMITS.queryCostMax);
  });
});

describe('resultBytesMax: the result is bounded too, behind the cost', () => {
  it('refuses a read whose result is over it, and rolls back a mutation whose result is over it', async () => {
    const engine = await newEngine({ limits: { resultBytesMax: 2000 } });
    const metadata = { note: 'x'.repeat(3000) };
    const create = 'mutation($i: AccountInput!) { createAccount(input: $i) { accountId metadata } }';
    const error = limitExceeded(
      engine.graphql(create, { i: { accountId: id(1), code: 'BIG', name: 'big', metadata } }),
    );
    expect(error.message).toBe('the result is over 2000 bytes; resultBytesMax is 2000');
    expect(error.details).toEqual({ limit: 'resultBytesMax', max: 2000, actual: null, resultBytesMax: 2000 });
    expect(fails(engine, `{ account(id: "${id(1)}") { code } }`).code).toBe('NOT_FOUND');
    // Selecting less, the same mutation commits; reading the large value back is refused.
    ok(engine, 'mutation($i: AccountInput!) { createAccount(input: $i) { accountId } }', {
      i: { accountId: id(1), code: 'BIG', name: 'big', metadata },
    });
    expect(ok(engine, `{ account(id: "${id(1)}") { code } }`).account.code).toBe('BIG');
    limitExceeded(engine.graphql(`{ account(id: "${id(1)}") { code metadata } }`));
    engine.close();
  });
});

describe('over HTTP: no attack holds up another client', () => {
  const KEY = 'tly_graphql-limits-admin-key';
  let running: Awaited<ReturnType<typeof startServer>>;
  let nobody: string;
  let reader: string;
  beforeAll(async () => {
    running = await startServer(KEY);
    smallLedger(running.engine);
    nobody = createClient(running.engine, 'nobody', []);
    reader = createClient(running.engine, 'reader', READER);
  });
  afterAll(() => running.stop());

  const post = async (key: string, query: string) => {
    const res = await fetch(running.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ query }),
    });
    return { status: res.status, body: (await res.json()) as FormattedResult };
  };

  /** While `attack` is being answered, an admin read on its own connection answers within a second. */
  async function whileAttacking(key: string, query: string): Promise<FormattedResult> {
    const attack = post(key, query);
    const started = performance.now();
    const probe = await post(KEY, '{ journal { name } }');
    const elapsedMs = performance.now() - started;
    expect(probe.body).toEqual({ data: { journal: { name: 'Default' } } });
    expect(elapsedMs, `admin read took ${Math.round(elapsedMs)} ms`).toBeLessThan(1000);
    return (await attack).body;
  }

  it('each review attack and its variants gets LIMIT_EXCEEDED with a hint, quickly, and the server stays up', async () => {
    const attacks: Array<[string, string, string]> = [
      ['case 3 made deep', nobody, doubledDeepFragments(30)],
      ['case 4: 99 KB of aliases', nobody, aliases99KB(1)],
      ['case 4 again, another document', nobody, aliases99KB(2)],
      ['case 5: the fan-out', reader, fanOut(1000, 10, 100)],
      ['case 5, FAN=1000,10,1000', reader, fanOut(1000, 10, 1000)],
      [
        'executions → children → parent → children',
        reader,
        '{ actions { executions(first: 1000) { nodes { children { parent { children { status } } } } } } }',
      ],
      ['one field repeated 500 times', nobody, repeatedField(500)],
      ['nested repeated aliases', nobody, binaryAliases(8)],
      ['400 fragments side by side', nobody, fragmentsSideBySide(400)],
      ['200 introspections', nobody, introspectionAliases(200)],
    ];
    for (const [name, key, query] of attacks) {
      const answer = await whileAttacking(key, query);
      expect(answer.errors?.[0]?.extensions?.code, name).toBe('LIMIT_EXCEEDED');
      expect(answer.errors?.[0]?.extensions?.hint, name).toBeTruthy();
    }
    // Case 3 itself is cheap now: answered (no access for a client without policies).
    expect((await whileAttacking(nobody, doubledFragments(26))).errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
    // Documents at the bounds are answered, and the cache stays within its bytes.
    for (let i = 0; i < 45; i++) expect((await post(nobody, aliasesAtTheBounds(i))).body.data).toBeDefined();
    expect(running.engine.stats().documentCacheBytes).toBeLessThanOrEqual(DEFAULT_LIMITS.documentCacheBytesMax);
    expect(running.engine.stats().documentCacheSize).toBeLessThan(45);
    expect((await post(KEY, '{ journal { name } }')).body).toEqual({ data: { journal: { name: 'Default' } } });
  }, 60_000);
});
