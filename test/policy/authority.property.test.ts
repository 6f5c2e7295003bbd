import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cel } from '../../src/cel/cel.js';
import { systemClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { checkGrant, patternCovers, patternsOverlap, readsOnlyDocument } from '../../src/policy/grant.js';
import {
  type AuthorityLayer,
  decide,
  type Operation,
  type Policy,
  type PolicyAction,
  resourceMatches,
} from '../../src/policy/policy.js';
import { id, newEngine, ok } from '../helpers/engine.js';
import { type ScriptedModel, startScriptedModel, toolResults } from '../../examples/scripted-model/server.mjs';

/*
 * Authority never widens. Random principals with random policies grant to each other (directly
 * and through a tool), invoke tools and call tools from tools; after every accepted grant, every
 * probe operation the grantee may do was possible for the granting stack at grant time, and a
 * nested call succeeds only when the same caller could have invoked the tool directly.
 */

const ACTIONS: readonly PolicyAction[] = ['SELECT', 'INSERT', 'UPDATE', 'DELETE'];
const PATTERNS = [
  '*',
  'financial.*',
  'financial.Account',
  'financial.Account.*',
  'financial.Entry',
  'fin*',
  '*.Account',
  'f*l.*',
  '*.*',
  'actions.*',
  'actions.Execution',
  'auth.Client',
  'auth.*',
  'a*',
];
const PROBE_RESOURCES = [
  'financial.Account',
  'financial.Entry',
  'financial.Transaction',
  'financial',
  'fin',
  'actions.Execution',
  'actions.Action',
  'auth.Client',
  'a.b.Account',
  'audit',
];
const PRINCIPALS_AT_START = 3;
const OUTERS = 2;

/** An assertion, named by what it reads; rendered with the run's names. */
type Assertion =
  | { kind: 'tier'; tier: 'gold' | 'silver' }
  | { kind: 'calls'; tool: 'inner' | 'outer0' }
  | { kind: 'me'; principal: number };
interface PolicySpec {
  effect: 'ALLOW' | 'DENY';
  actions: PolicyAction[];
  resources: string[];
  assertions: Assertion[];
}

const assertion: fc.Arbitrary<Assertion> = fc.oneof(
  fc.record({ kind: fc.constant('tier' as const), tier: fc.constantFrom('gold' as const, 'silver' as const) }),
  fc.record({ kind: fc.constant('calls' as const), tool: fc.constantFrom('inner' as const, 'outer0' as const) }),
  fc.record({ kind: fc.constant('me' as const), principal: fc.nat(PRINCIPALS_AT_START + 2) }),
);
const policySpec: fc.Arbitrary<PolicySpec> = fc.record({
  effect: fc.constantFrom('ALLOW' as const, 'ALLOW' as const, 'ALLOW' as const, 'DENY' as const),
  actions: fc.subarray([...ACTIONS], { minLength: 1 }),
  resources: fc.subarray(PATTERNS, { minLength: 1, maxLength: 3 }),
  assertions: fc.oneof(
    { weight: 3, arbitrary: fc.constant<Assertion[]>([]) },
    { weight: 2, arbitrary: fc.array(assertion, { minLength: 1, maxLength: 2 }) },
  ),
});
const policySet = fc.array(policySpec, { maxLength: 5 });
/** The rights on clients and executions a principal or tool starts with, so that grants and calls happen often. */
type Right = 'clients' | 'invoke' | 'invoke inner only' | 'deny inner';
const weighted = <T>(value: T, percent: number): fc.Arbitrary<T[]> =>
  fc.oneof(
    { weight: percent, arbitrary: fc.constant<T[]>([value]) },
    { weight: 100 - percent, arbitrary: fc.constant<T[]>([]) },
  );
const extraRights = fc
  .tuple(
    weighted('clients', 70),
    fc.constantFrom(['invoke'], ['invoke'], ['invoke inner only'], []),
    weighted('deny inner', 20),
  )
  .map((parts) => parts.flat() as Right[]);

type Step =
  | {
      kind: 'grant';
      granter: number;
      target: number | 'new';
      via: 'client' | 'tool';
      narrow: boolean;
      policies: PolicySpec[];
      seed: number;
    }
  | { kind: 'invoke'; caller: number; outer: number };

const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('grant' as const),
      granter: fc.nat(9),
      target: fc.oneof(fc.constant('new' as const), fc.nat(9)),
      via: fc.constantFrom('client' as const, 'client' as const, 'tool' as const),
      narrow: fc.boolean(),
      policies: policySet,
      seed: fc.nat(),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant('invoke' as const), caller: fc.nat(9), outer: fc.nat(OUTERS - 1) }),
  },
);

const scenario = fc.record({
  principals: fc.array(fc.record({ policies: policySet, rights: extraRights }), {
    minLength: PRINCIPALS_AT_START,
    maxLength: PRINCIPALS_AT_START,
  }),
  grantTool: fc.record({ policies: policySet, rights: extraRights }),
  outers: fc.array(fc.record({ policies: policySet, rights: extraRights }), { minLength: OUTERS, maxLength: OUTERS }),
  steps: fc.array(step, { minLength: 1, maxLength: 8 }),
});

/** The names of one run: principals and tools are namespaced so that one engine serves every run. */
class Run {
  readonly principals: string[];
  readonly inner: string;
  readonly outers: string[];
  readonly grantTool: string;

  constructor(readonly n: number) {
    this.principals = Array.from({ length: PRINCIPALS_AT_START }, (_, i) => `r${n}_p${i}`);
    this.inner = `inner_r${n}`;
    this.outers = Array.from({ length: OUTERS }, (_, k) => `outer_r${n}_${k}`);
    this.grantTool = `grant_r${n}`;
  }

  expression(a: Assertion): string {
    switch (a.kind) {
      case 'tier':
        return `context.document.tier == '${a.tier}'`;
      case 'calls':
        return `context.document.action == '${a.tool === 'inner' ? this.inner : this.outers[0]}'`;
      case 'me':
        return `context.auth.claims.principal == 'r${this.n}_p${a.principal}'`;
    }
  }

  render(spec: PolicySpec): Record<string, unknown> {
    const assertions = Object.fromEntries(spec.assertions.map((a, i) => [`a${i}`, this.expression(a)]));
    return {
      effect: spec.effect,
      actions: spec.actions,
      resources: spec.resources,
      ...(spec.assertions.length ? { assertions } : {}),
    };
  }

  rights(rights: readonly Right[]): Record<string, unknown>[] {
    const calls = (tool: string) => ({ call: `context.document.action == '${tool}'` });
    return rights.map((r) => {
      if (r === 'clients') return { effect: 'ALLOW', actions: ['INSERT', 'UPDATE'], resources: ['auth.Client'] };
      if (r === 'invoke') return { effect: 'ALLOW', actions: ['INSERT'], resources: ['actions.Execution'] };
      if (r === 'invoke inner only')
        return {
          effect: 'ALLOW',
          actions: ['INSERT'],
          resources: ['actions.Execution'],
          assertions: calls(this.inner),
        };
      return { effect: 'DENY', actions: ['INSERT'], resources: ['actions.*'], assertions: calls(this.inner) };
    });
  }

  /** Documents the probes carry: records with a tier, and the executions of each tool. */
  documents(): unknown[] {
    const execution = (action: string) => ({ action, version: 1, input: {} });
    return [
      { tier: 'gold' },
      { tier: 'silver' },
      {},
      execution(this.inner),
      execution(this.outers[0]!),
      execution(this.outers[1]!),
    ];
  }
}

/** A narrower copy of a policy set: a subset of its ALLOWs, narrowed, and every DENY. */
function narrowed(policies: readonly Policy[], seed: number): Record<string, unknown>[] {
  let state = seed >>> 0;
  const random = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const NARROWER: Record<string, string[]> = {
    '*': ['*', 'financial.*', 'financial.Account', 'auth.Client'],
    'financial.*': ['financial.*', 'financial.Account', 'financial.Account.*'],
    'fin*': ['fin*', 'financial.*', 'financial.Entry'],
    'actions.*': ['actions.*', 'actions.Execution'],
    'auth.*': ['auth.*', 'auth.Client'],
    'a*': ['a*', 'auth.Client', 'actions.*'],
  };
  const out: Record<string, unknown>[] = [];
  for (const p of policies) {
    if (p.effect === 'DENY') {
      out.push({ ...p, assertions: p.assertions ?? undefined });
      continue;
    }
    if (random() < 0.3) continue;
    const actions = p.actions.filter(() => random() < 0.7);
    out.push({
      effect: 'ALLOW',
      actions: actions.length ? actions : [p.actions[0]!],
      resources: p.resources.map((r) => pick(NARROWER[r] ?? [r])),
      assertions: { ...(p.assertions ?? {}), ...(random() < 0.3 ? { extra: "context.document.tier == 'gold'" } : {}) },
    });
  }
  return out;
}

const CREATE_CLIENT = `mutation($i: ClientInput!) { auth { createClient(input: $i) { client { principal } } } }`;
const UPDATE_CLIENT = `mutation($p: String!, $i: ClientUpdateInput!) { auth { updateClient(principal: $p, input: $i) { client { principal } } } }`;
const READ_POLICIES = `query($p: String!) { auth { client(principal: $p) { policies { effect actions resources assertions } } } }`;
const CREATE_ACTION = `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`;
const INVOKE = `mutation($name: String!, $e: UUID!, $input: JSON) { actions { invokeAction(name: $name, input: {executionId: $e, actionVersion: 1, input: $input}) { status output error { code message } } } }`;
/** The grant tool runs the mutation it is given, as a call of its own: its policies are a layer of the granting stack. */
const GRANT_SRC = `function run(e) { return graphql(e.data.query, e.data.variables); }`;

let engine: Engine;
let cel: Cel;
let runs = 0;
let executionSeq = 0;
const totals = { grants: 0, accepted: 0, nestedOk: 0, nestedRefused: 0 };

beforeAll(async () => {
  engine = await newEngine();
  cel = new Cel(systemClock, { celExpressionLengthMax: 4096, celCacheMax: 1000 });
});
afterAll(() => engine?.close());

function storedPolicies(principal: string): Policy[] {
  return ok(engine, READ_POLICIES, { p: principal }).auth.client.policies.map((p: Policy) => ({
    ...p,
    assertions: p.assertions ?? null,
  }));
}

function allows(stack: readonly AuthorityLayer[], operation: Operation, principal: string): boolean {
  return stack.every((layer) => decide(cel, layer, operation, { principal }).allowed);
}

type Scenario = typeof scenario extends fc.Arbitrary<infer S> ? S : never;
type GrantStep = Extract<Step, { kind: 'grant' }>;
type InvokeStep = Extract<Step, { kind: 'invoke' }>;

/** One run's engine-side state, as the test knows it: who exists, with which policies, and the tools' layers. */
interface World {
  run: Run;
  principals: string[];
  policiesOf: Map<string, Policy[]>;
  grantLayer: AuthorityLayer;
  outerLayers: AuthorityLayer[];
  probes: Operation[];
}

function setUp(s: Scenario): World {
  const run = new Run(++runs);
  const principals = [...run.principals];
  const policiesOf = new Map<string, Policy[]>();
  s.principals.forEach((p, i) => {
    ok(engine, CREATE_CLIENT, {
      i: {
        principal: principals[i],
        name: principals[i],
        policies: [...p.policies.map((x) => run.render(x)), ...run.rights(p.rights)],
      },
    });
    policiesOf.set(principals[i]!, storedPolicies(principals[i]!));
  });
  const createTool = (
    k: number,
    name: string,
    src: string,
    spec: { policies: PolicySpec[]; rights: readonly Right[] },
    tools: unknown[] = [],
  ): AuthorityLayer => {
    const actionId = id(`${run.n}`.padStart(6, '0') + String(k).padStart(6, '0'));
    ok(engine, CREATE_ACTION, {
      id: actionId,
      input: {
        name,
        kind: 'tool',
        config: { runtime: 'javascript', src },
        tools,
        policies: [...spec.policies.map((x) => run.render(x)), ...run.rights(spec.rights)],
      },
    });
    const policies = ok(
      engine,
      `{ actions { action(id: "${actionId}") { policies { effect actions resources assertions } } } }`,
    ).actions.action.policies;
    return {
      name: `tool ${name}@1`,
      policies: policies.map((p: Policy) => ({ ...p, assertions: p.assertions ?? null })),
    };
  };
  createTool(0, run.inner, 'function run() { return 1; }', { policies: [], rights: [] });
  const grantLayer = createTool(1, run.grantTool, GRANT_SRC, s.grantTool);
  const callInner = `function run() { const r = tools.${run.inner}({}, { check: false }); return { ok: r.ok, code: r.error ? r.error.code : null }; }`;
  const outerLayers = s.outers.map((o, k) => createTool(2 + k, run.outers[k]!, callInner, o, [{ name: run.inner }]));
  const probes: Operation[] = [];
  for (const action of ACTIONS)
    for (const resource of PROBE_RESOURCES)
      for (const document of run.documents()) probes.push({ action, resource, document });
  return { run, principals, policiesOf, grantLayer, outerLayers, probes };
}

/** A grant, directly or through the grant tool; when accepted, the grantee may do nothing the granting stack could not. */
function grant(w: World, st: GrantStep): void {
  const granter = w.principals[st.granter % w.principals.length]!;
  const target =
    st.target === 'new' ? `r${w.run.n}_p${w.principals.length}` : w.principals[st.target % w.principals.length]!;
  const granted = st.narrow ? narrowed(w.policiesOf.get(granter)!, st.seed) : st.policies.map((x) => w.run.render(x));
  const [query, variables] =
    st.target === 'new'
      ? [CREATE_CLIENT, { i: { principal: target, name: target, policies: granted } }]
      : [UPDATE_CLIENT, { p: target, i: { policies: granted } }];
  const granterStack: AuthorityLayer[] = [
    { name: `client ${granter}`, policies: w.policiesOf.get(granter)! },
    ...(st.via === 'tool' ? [w.grantLayer] : []),
  ];
  const accepted =
    st.via === 'client'
      ? engine.graphql(query, variables, { principal: granter }).errors === undefined
      : (
          engine.graphql(
            INVOKE,
            { name: w.run.grantTool, e: id(++executionSeq), input: { query, variables } },
            { principal: granter },
          ).data as any
        )?.actions?.invokeAction?.status === 'SUCCEEDED';
  totals.grants++;
  if (!accepted) return;
  totals.accepted++;
  expect(target, 'a client never changes its own policies').not.toBe(granter);
  if (st.target === 'new') w.principals.push(target);
  const now = storedPolicies(target);
  w.policiesOf.set(target, now);
  for (const probe of w.probes) {
    if (allows([{ name: `client ${target}`, policies: now }], probe, target)) {
      expect(
        allows(granterStack, probe, granter),
        `${target} may ${probe.action} ${probe.resource} ${JSON.stringify(probe.document)}, which ${granter}'s stack could not`,
      ).toBe(true);
    }
  }
}

/** A client invokes an outer tool that calls inner: the nested call succeeds exactly when the client and outer both allow invoking inner. */
function invoke(w: World, st: InvokeStep): void {
  const caller = w.principals[st.caller % w.principals.length]!;
  const callerLayer: AuthorityLayer = { name: `client ${caller}`, policies: w.policiesOf.get(caller)! };
  const outer = w.run.outers[st.outer]!;
  const execution = (action: string): Operation => ({
    action: 'INSERT',
    resource: 'actions.Execution',
    document: { action, version: 1, input: {} },
  });
  const result = engine.graphql(INVOKE, { name: outer, e: id(++executionSeq), input: {} }, { principal: caller });
  expect(result.errors === undefined).toBe(allows([callerLayer], execution(outer), caller));
  if (result.errors) return;
  const nested = (result.data as any).actions.invokeAction.output as { ok: boolean; code: string | null };
  const direct =
    engine.graphql(INVOKE, { name: w.run.inner, e: id(++executionSeq), input: {} }, { principal: caller }).errors ===
    undefined;
  if (nested.ok) expect(direct, `${caller} reached ${w.run.inner} through ${outer} but may not invoke it`).toBe(true);
  expect(nested.ok).toBe(allows([callerLayer, w.outerLayers[st.outer]!], execution(w.run.inner), caller));
  if (!nested.ok) expect(nested.code).toBe('ACCESS_DENIED');
  totals[nested.ok ? 'nestedOk' : 'nestedRefused']++;
}

function runScenario(s: Scenario): void {
  const world = setUp(s);
  for (const st of s.steps) {
    if (st.kind === 'grant') grant(world, st);
    else invoke(world, st);
  }
}

describe('authority never widens', () => {
  it('a granted client can do nothing its granting stack could not; a nested call needs what a direct invoke needs', () => {
    fc.assert(fc.property(scenario, runScenario), { numRuns: 40 });
    // The runs must exercise both outcomes, or the property says nothing.
    expect(totals.accepted).toBeGreaterThan(2);
    expect(totals.grants - totals.accepted).toBeGreaterThan(5);
    expect(totals.nestedOk).toBeGreaterThan(0);
    expect(totals.nestedRefused).toBeGreaterThan(0);
  });

  it('patternCovers is sound: whatever the inner pattern matches, the outer matches', () => {
    const text = (chars: string[], max: number) =>
      fc.array(fc.constantFrom(...chars), { maxLength: max }).map((cs) => cs.join(''));
    const pattern = text(['a', 'b', '.', '*'], 6).filter((p) => p.length > 0);
    const resource = text(['a', 'b', '.'], 6);
    fc.assert(
      fc.property(
        pattern,
        pattern,
        fc.nat(6),
        fc.nat(6),
        fc.boolean(),
        fc.array(resource, { minLength: 20, maxLength: 20 }),
        (other, inner, i, j, derive, fills) => {
          // Half the time the outer pattern is the inner one with a slice starred out: near misses of containment.
          const outer = derive ? `${inner.slice(0, Math.min(i, j))}*${inner.slice(Math.max(i, j))}` : other;
          expect(patternCovers(inner, inner)).toBe(true);
          // Resources the inner pattern matches (each star filled in, and X for X.*), and others.
          const resources = [
            ...fills,
            ...fills.map((fill) => inner.split('*').join(fill)),
            ...(inner.endsWith('.*') ? [inner.slice(0, -2)] : []),
          ];
          if (patternCovers(outer, inner)) {
            for (const r of resources)
              if (resourceMatches(inner, r))
                expect(resourceMatches(outer, r), `${outer} ⊇ ${inner} but not for ${r}`).toBe(true);
          }
          if (!patternsOverlap(outer, inner)) {
            for (const r of resources)
              expect(
                resourceMatches(outer, r) && resourceMatches(inner, r),
                `${outer} and ${inner} both match ${r}`,
              ).toBe(false);
          }
        },
      ),
      { numRuns: 3000 },
    );
  });
});

describe('containment of resource patterns', () => {
  it('patternCovers: every resource the inner pattern matches, the outer matches too', () => {
    const covers: Array<[string, string]> = [
      ['*', 'anything.at.all'],
      ['*', '*'],
      ['financial.*', 'financial.Account'],
      ['financial.*', 'financial.Account.*'],
      ['financial.*', 'financial.*'],
      ['financial.*', 'financial'],
      ['fin*', 'financial.*'],
      ['f*l.*', 'financial.Account'],
      ['*.Account', 'financial.Account'],
      ['a*', 'a*b*c'],
      ['*.*', 'financial.Account'],
      ['financial.Account', 'financial.Account'],
    ];
    const doesNot: Array<[string, string]> = [
      ['financial.Account', 'financial.*'],
      ['financial.Account.*', 'financial.*'],
      ['*.Account', 'financial.*'],
      ['financial.*', '*'],
      ['f*l.*', 'financial.*'],
      ['*.*', 'financial.*'],
      ['financial.*', 'financialX'],
      ['a*b', 'a*'],
      ['financial.Account', 'financial.Entry'],
      ['auth.*', 'a*'],
      ['*.Client', '*'],
    ];
    for (const [outer, inner] of covers) expect(patternCovers(outer, inner), `${outer} covers ${inner}`).toBe(true);
    for (const [outer, inner] of doesNot)
      expect(patternCovers(outer, inner), `${outer} does not cover ${inner}`).toBe(false);
  });

  it('patternsOverlap says false only for patterns no resource matches both of', () => {
    expect(patternsOverlap('financial.Entry', 'financial.*')).toBe(true);
    expect(patternsOverlap('financial.*', 'financial')).toBe(true);
    expect(patternsOverlap('*.Entry', 'financial.*')).toBe(true);
    expect(patternsOverlap('financial.Entry', 'financial.Account')).toBe(false);
    expect(patternsOverlap('auth.*', 'financial.*')).toBe(false);
    expect(patternsOverlap('*.Entry', '*.Account')).toBe(false);
  });

  it('readsOnlyDocument accepts only assertions whose every use of context is context.document', () => {
    expect(readsOnlyDocument(cel, "context.document.principal.startsWith('viewer_')")).toBe(true);
    expect(readsOnlyDocument(cel, 'has(context.document.x) && context.document.x > 1')).toBe(true);
    expect(readsOnlyDocument(cel, "context.auth.claims.principal == 'x'")).toBe(false);
    expect(readsOnlyDocument(cel, "context['au' + 'th'].claims.principal == 'x'")).toBe(false);
    expect(readsOnlyDocument(cel, 'context.document == context')).toBe(false);
    expect(readsOnlyDocument(cel, '[1].all(context, context > 0)')).toBe(false);
  });

  it('accepts 64 granted policies, each held by every one of 9 layers of 64 policies, and names the one that is not', () => {
    const held: Policy[] = Array.from({ length: 64 }, (_, i) => ({
      effect: 'ALLOW',
      actions: [...ACTIONS],
      resources: [`r${i}.*`, `s${i}.x.*`],
      assertions: null,
    }));
    const layers: AuthorityLayer[] = Array.from({ length: 9 }, (_, i) => ({ name: `tool t${i}@1`, policies: held }));
    const granted: Policy[] = Array.from({ length: 64 }, (_, i) => ({
      effect: 'ALLOW',
      actions: [...ACTIONS],
      resources: [`r${63 - i}.a.*`, `s${i}.x.y`],
      assertions: null,
    }));
    expect(() => checkGrant(cel, layers, granted)).not.toThrow();
    expect(() =>
      checkGrant(cel, layers, [...granted.slice(1), { ...granted[0]!, resources: ['r0.*', 'q.*'] }]),
    ).toThrow('policies[63] would grant SELECT on q.*, which tool t0@1 does not hold');
  });
});

/*
 * What a model can cause is what its agent's references allow. Random agents declare random
 * references (pinned or not, a fixed input or not, an approval or not) to two tools with random
 * version statuses, and list the native graphql and cel tools or not; a scripted model (over real
 * HTTP) answers with random calls: by reference, through graphql's invokeAction and startAction
 * with any version and input, to names not declared. Whatever the model asks, every call of the
 * tools that runs is a call its reference would have made: under the model's own turn, at the
 * pinned (or latest ACTIVE) version, which is ACTIVE, with the fixed input, approved when asked.
 */
describe('agents: no model answer makes a call its reference would not have made', () => {
  type VersionStatus = 'ACTIVE' | 'LOCKED' | 'DRAFT' | 'absent';
  interface RefSpec {
    declared: boolean;
    pinned: 1 | 2 | null;
    fixed: boolean;
    approval: boolean;
  }
  type ModelCall =
    | { via: 'reference'; tool: 0 | 1; who: string }
    | { via: 'graphql'; verb: 'invokeAction' | 'startAction'; tool: 0 | 1; version: 1 | 2; who: string }
    | { via: 'cel' }
    | { via: 'undeclared' };
  const refSpec = fc.record({
    declared: fc.boolean(),
    pinned: fc.constantFrom(null, 1 as const, 2 as const),
    fixed: fc.boolean(),
    approval: fc.boolean(),
  });
  const modelCall: fc.Arbitrary<ModelCall> = fc.oneof(
    {
      weight: 3,
      arbitrary: fc.record({
        via: fc.constant('reference' as const),
        tool: fc.constantFrom(0 as const, 1 as const),
        who: fc.constantFrom('me', 'bob'),
      }),
    },
    {
      weight: 3,
      arbitrary: fc.record({
        via: fc.constant('graphql' as const),
        verb: fc.constantFrom('invokeAction' as const, 'startAction' as const),
        tool: fc.constantFrom(0 as const, 1 as const),
        version: fc.constantFrom(1 as const, 2 as const),
        who: fc.constantFrom('me', 'bob'),
      }),
    },
    { weight: 1, arbitrary: fc.record({ via: fc.constant('cel' as const) }) },
    { weight: 1, arbitrary: fc.record({ via: fc.constant('undeclared' as const) }) },
  );
  const agentScenario = fc.record({
    tools: fc.tuple(
      fc.record({
        v1: fc.constantFrom<VersionStatus>('ACTIVE', 'ACTIVE', 'LOCKED'),
        v2: fc.constantFrom<VersionStatus>('absent', 'ACTIVE', 'DRAFT', 'LOCKED'),
      }),
      fc.record({
        v1: fc.constantFrom<VersionStatus>('ACTIVE', 'ACTIVE', 'LOCKED'),
        v2: fc.constantFrom<VersionStatus>('absent', 'ACTIVE', 'DRAFT', 'LOCKED'),
      }),
    ),
    refs: fc.tuple(refSpec, refSpec),
    graphql: fc.boolean(),
    cel: fc.boolean(),
    calls: fc.array(modelCall, { minLength: 1, maxLength: 5 }),
    approve: fc.boolean(),
  });

  type AgentScenario = typeof agentScenario extends fc.Arbitrary<infer T> ? T : never;
  let agentEngine: Engine;
  let model: ScriptedModel;
  let script: (request: any) => unknown = () => ({ text: 'done' });
  let n = 0;
  const seen = { calls: 0, ranByReference: 0, refusedGraphql: 0, approvals: 0 };
  beforeAll(async () => {
    model = await startScriptedModel({ rules: [(request: any) => script(request) as any] });
    agentEngine = await newEngine({
      providers: [{ name: 'local', format: 'openai', baseUrl: `${model.url}/v1`, models: ['m'], maxRetries: 0 }],
    });
    ok(
      agentEngine,
      `mutation($pol: [PolicyInput!]!) { auth { createClient(input: {principal: "starter", name: "starter", policies: $pol}) { apiKey } } }`,
      {
        pol: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['*'] }],
      },
    );
  });
  afterAll(async () => {
    agentEngine?.close();
    await model?.close();
  });

  async function runAgentScenario(s: AgentScenario): Promise<void> {
    const r = ++n;
    const e = agentEngine;
    const tool = (k: number) => `a${r}_t${k}`;
    const statusOf: Array<Record<number, VersionStatus>> = [];
    for (const [k, spec] of s.tools.entries()) {
      const actionId = id(`${70_000 + r * 10 + k}`);
      const define = (version: number, draft: boolean) => ({
        name: tool(k),
        kind: 'tool',
        draft,
        config: {
          runtime: 'javascript',
          src: `function run(e) { return { version: ${version}, who: e.data.who ?? null }; }`,
        },
        tool: { description: 't', inputSchema: { type: 'object', properties: { who: { type: 'string' } } } },
        policies: [],
      });
      ok(
        e,
        `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`,
        { id: actionId, input: define(1, false) },
      );
      if (spec.v2 !== 'absent')
        ok(
          e,
          `mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) { version } } }`,
          { id: actionId, input: define(2, spec.v2 === 'DRAFT') },
        );
      if (spec.v2 === 'LOCKED')
        ok(e, `mutation($id: UUID!) { actions { lockAction(id: $id, version: 2) { version } } }`, { id: actionId });
      if (spec.v1 === 'LOCKED')
        ok(e, `mutation($id: UUID!) { actions { lockAction(id: $id, version: 1) { version } } }`, { id: actionId });
      statusOf.push({ 1: spec.v1, 2: spec.v2 });
    }
    const references = s.refs.flatMap((ref: RefSpec, k: number) =>
      ref.declared && !(ref.pinned === 2 && s.tools[k]!.v2 === 'absent')
        ? [
            {
              name: tool(k),
              ...(ref.pinned ? { version: ref.pinned } : {}),
              ...(ref.fixed ? { input: { who: "'fixed'" } } : {}),
              ...(ref.approval ? { approval: {} } : {}),
            },
          ]
        : [],
    );
    const natives = [...(s.graphql ? [{ name: 'graphql' }] : []), ...(s.cel ? [{ name: 'cel' }] : [])];
    const agent = `a${r}_agent`;
    ok(
      e,
      `mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { version } } }`,
      {
        id: id(`${80_000 + r}`),
        input: {
          name: agent,
          kind: 'agent',
          config: { provider: 'local', model: 'm', prompt: '{{m}}', maxTurns: 3, maxToolCalls: 8 },
          tool: {
            description: 'a',
            inputSchema: { type: 'object', properties: { m: { type: 'string' } }, required: ['m'] },
          },
          tools: [...references, ...natives],
          // As wide as it gets: only the references' gates stand between the model and the tools.
          policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['*'] }],
        },
      },
    );
    let c = 0;
    const toolCalls = s.calls.map((call: ModelCall) => {
      c++;
      if (call.via === 'reference') return { name: tool(call.tool), arguments: { who: call.who } };
      if (call.via === 'cel') return { name: 'cel', arguments: { expression: '1 + 1' } };
      if (call.via === 'undeclared') return { name: `a${r}_nothing`, arguments: {} };
      const executionId = id(`${90_000_000 + r * 100 + c}`);
      return {
        name: 'graphql',
        arguments: {
          query: `mutation { actions { ${call.verb}(name: "${tool(call.tool)}", input: {executionId: "${executionId}", actionVersion: ${call.version}, input: {who: "${call.who}"}}) { status } } }`,
        },
      };
    });
    script = (request: any) => (toolResults(request).length === 0 ? { toolCalls } : { text: 'done' });
    const run = id(`${95_000_000 + r}`);
    ok(
      e,
      `mutation($e: UUID!, $n: String!) { actions { startAction(name: $n, input: {executionId: $e, input: {m: "go"}}) { status } } }`,
      { e: run, n: agent },
      'starter',
    );
    const worker = e.createWorker();
    for (let round = 0; round < 20; round++) {
      await worker.drainAll();
      const status = (
        e.db.prepare('SELECT status FROM executions WHERE execution_id = ?').get(run) as { status: string }
      ).status;
      if (status === 'SUCCEEDED' || status === 'FAILED') break;
      if (status === 'WAITING_APPROVAL') {
        const pending = e.db
          .prepare(`SELECT approval_id FROM approvals WHERE execution_id = ? AND status = 'PENDING'`)
          .all(run) as Array<{ approval_id: string }>;
        for (const { approval_id } of pending) {
          seen.approvals++;
          ok(
            e,
            `mutation($a: UUID!) { actions { ${s.approve ? 'approveCall' : 'rejectCall'}(approvalId: $a) { status } } }`,
            { a: approval_id },
          );
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    await worker.drainAll();

    // Every call of the tools that exists: a turn's own call, as its reference would make it.
    const rows = e.db
      .prepare(
        `SELECT x.execution_id, x.action_name, x.action_version, x.input, x.status, p.kind AS parent_kind FROM executions x LEFT JOIN executions p ON p.execution_id = x.parent_id WHERE x.action_name IN (?, ?)`,
      )
      .all(tool(0), tool(1)) as Array<{
      execution_id: string;
      action_name: string;
      action_version: number | null;
      input: string;
      status: string;
      parent_kind: string | null;
    }>;
    for (const row of rows) {
      seen.calls++;
      const k = row.action_name === tool(0) ? 0 : 1;
      const ref = references.find((x: { name: string }) => x.name === row.action_name) as
        | { version?: number; input?: unknown; approval?: unknown }
        | undefined;
      const ran = row.status === 'SUCCEEDED';
      if (!ran) continue;
      seen.ranByReference++;
      expect(ref, `${row.action_name} ran without a reference`).toBeDefined();
      expect(row.parent_kind, `${row.action_name} ran under a ${row.parent_kind}, not the model's turn`).toBe('MODEL');
      const expected = ref!.version ?? (statusOf[k]![2] === 'ACTIVE' ? 2 : 1);
      expect(row.action_version).toBe(expected);
      expect(statusOf[k]![row.action_version!]).toBe('ACTIVE');
      if (ref!.input) expect(JSON.parse(row.input).who).toBe('fixed');
      if (ref!.approval) {
        const approved = e.db.prepare(`SELECT status FROM approvals WHERE call_id = ?`).get(row.execution_id) as
          | { status: string }
          | undefined;
        expect(approved?.status).toBe('APPROVED');
      }
    }
    // Nothing the model wrote as GraphQL began a call: no execution is a child of a GRAPHQL call, none was queued.
    const underGraphql = e.db
      .prepare(
        `SELECT count(*) AS n FROM executions x JOIN executions p ON p.execution_id = x.parent_id WHERE p.kind = 'GRAPHQL' AND p.root_id = ?`,
      )
      .get(run) as { n: number };
    expect(underGraphql.n).toBe(0);
    const queued = e.db
      .prepare(`SELECT count(*) AS n FROM executions WHERE action_name IN (?, ?) AND parent_id IS NULL`)
      .get(tool(0), tool(1)) as { n: number };
    expect(queued.n).toBe(0);
    seen.refusedGraphql += s.calls.filter((x: ModelCall) => x.via === 'graphql').length;
  }

  it('random agents, references and injected answers', async () => {
    await fc.assert(fc.asyncProperty(agentScenario, runAgentScenario), { numRuns: 100 });
    console.log('agents property:', JSON.stringify(seen));
    // The property saw calls run through references and approvals decided, not only refusals.
    expect(seen.ranByReference).toBeGreaterThan(0);
    expect(seen.approvals).toBeGreaterThan(0);
    expect(seen.refusedGraphql).toBeGreaterThan(0);
  }, 120_000);
});
