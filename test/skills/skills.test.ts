import { cpSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { deploy, formatPlan } from '../../src/deploy/deploy.js';
import { ProjectError, parseSkill, readProject } from '../../src/deploy/project.js';
import type { Target } from '../../src/deploy/target.js';
import { systemClock } from '../../src/clock.js';
import type { Engine } from '../../src/engine.js';
import { resolveLimits } from '../../src/limits.js';
import { skillServices } from '../../src/skills/skills.js';
import { actionStatements } from '../../src/storage/statements/actions.js';
import { skillStatements } from '../../src/storage/statements/skills.js';
import { fails, id, newEngine, ok } from '../helpers/engine.js';

const CREATE = `mutation($id: UUID!, $i: SkillInput!) { actions { createSkill(id: $id, input: $i) { skillId name version description body tools created } } }`;
const UPDATE = `mutation($id: UUID!, $i: SkillInput!) { actions { updateSkill(id: $id, input: $i) { skillId name version description body tools } } }`;
const SKILL = `query($n: String!, $v: Int) { actions { skill(name: $n, version: $v) { skillId name version description body tools } } }`;
const CREATE_ACTION = `mutation($id: UUID!, $i: ActionInput!) { actions { createAction(id: $id, input: $i) { name version skills { name version } } } }`;
/** Deploy straight into an in-process engine (as the system principal). */
const engineTarget = (engine: Engine): Target => ({
  describe: 'in-process',
  request: async (q, v) => engine.graphql(q, v ?? null) as never,
  close: async () => {},
});
const CREATE_CLIENT = 'mutation($i: ClientInput!) { auth { createClient(input: $i) { apiKey } } }';

const PROGRAM = { runtime: 'javascript', src: 'function run(event) { return event.input; }' };
const AGENT_CONFIG = { provider: 'local', model: 'scripted', instructions: 'Help.' };

function createTool(engine: Engine, n: number, name: string, src = PROGRAM.src, policies: unknown[] = []) {
  return ok(engine, CREATE_ACTION, {
    id: id(n),
    i: { name, config: { runtime: 'javascript', src }, tool: { description: `The ${name} tool.` }, policies },
  }).actions.createAction;
}

function createSkill(engine: Engine, n: number, input: Record<string, unknown>) {
  return ok(engine, CREATE, {
    id: id(n),
    i: { description: 'How to do it.', body: '# Steps\n\n1. Do it.', tools: [], ...input },
  }).actions.createSkill;
}

function createAgent(engine: Engine, n: number, name: string, skills: unknown) {
  return engine.graphql(CREATE_ACTION, {
    id: id(n),
    i: { name, kind: 'agent', config: AGENT_CONFIG, tools: [{ name: 'balance' }], skills },
  });
}

describe('skills over GraphQL', () => {
  let engine: Engine;
  beforeEach(async () => {
    engine = await newEngine();
    createTool(engine, 100, 'balance');
    createTool(engine, 101, 'transfer');
  });

  it('creates version 1, updates to the next (fields left out kept), reads any version, and lists the latest', () => {
    const created = createSkill(engine, 1, {
      name: 'transfers',
      description: 'Moving money.',
      body: '# Transfers\n\nCheck first.',
      tools: ['balance', 'transfer', 'cel'],
    });
    expect(created).toMatchObject({
      skillId: id(1),
      name: 'transfers',
      version: 1,
      description: 'Moving money.',
      body: '# Transfers\n\nCheck first.',
      tools: ['balance', 'transfer', 'cel'],
    });
    expect(typeof created.created).toBe('string');

    const v2 = ok(engine, UPDATE, { id: id(1), i: { body: '# Transfers\n\nCheck balances first.' } }).actions
      .updateSkill;
    expect(v2).toMatchObject({
      version: 2,
      description: 'Moving money.',
      body: '# Transfers\n\nCheck balances first.',
      tools: ['balance', 'transfer', 'cel'],
    });
    // Unchanged input still makes a version (like updateAction).
    expect(ok(engine, UPDATE, { id: id(1), i: {} }).actions.updateSkill.version).toBe(3);
    const v4 = ok(engine, UPDATE, {
      id: id(1),
      i: { name: 'transfers', tools: ['balance'], description: 'Moving money, briefly.' },
    }).actions.updateSkill;
    expect(v4).toMatchObject({ version: 4, tools: ['balance'], description: 'Moving money, briefly.' });

    expect(ok(engine, SKILL, { n: 'transfers' }).actions.skill.version).toBe(4);
    expect(ok(engine, SKILL, { n: 'transfers', v: 1 }).actions.skill).toMatchObject({
      version: 1,
      body: '# Transfers\n\nCheck first.',
      tools: ['balance', 'transfer', 'cel'],
    });

    createSkill(engine, 2, { name: 'refunds' });
    createSkill(engine, 3, { name: 'holds' });
    const page1 = ok(
      engine,
      '{ actions { skills(first: 2) { nodes { name version } pageInfo { hasNextPage endCursor } } } }',
    ).actions.skills;
    expect(page1.nodes).toEqual([
      { name: 'transfers', version: 4 },
      { name: 'refunds', version: 1 },
    ]);
    expect(page1.pageInfo.hasNextPage).toBe(true);
    const page2 = ok(
      engine,
      'query($a: String) { actions { skills(first: 2, after: $a) { nodes { name } pageInfo { hasNextPage } } } }',
      { a: page1.pageInfo.endCursor },
    ).actions.skills;
    expect(page2).toEqual({ nodes: [{ name: 'holds' }], pageInfo: { hasNextPage: false } });
  });

  it('an agent declares skills, pinned or latest; Action.skills shows them ([] for a tool); the services resolve and read them', () => {
    createSkill(engine, 1, { name: 'transfers', tools: ['transfer'] });
    ok(engine, UPDATE, { id: id(1), i: { body: 'v2 body' } });
    createSkill(engine, 2, { name: 'refunds' });
    const agent = createAgent(engine, 200, 'teller', [{ name: 'transfers', version: 1 }, { name: 'refunds' }]);
    expect(agent.errors).toBeUndefined();
    expect((agent.data as any).actions.createAction.skills).toEqual([
      { name: 'transfers', version: 1 },
      { name: 'refunds', version: null },
    ]);
    expect(ok(engine, '{ actions { action(name: "balance") { skills { name } } } }').actions.action.skills).toEqual([]);

    // What the agent runner uses (ExecutionServices.skills), over the same database.
    const skills = skillServices({
      st: skillStatements(engine.db),
      actions: actionStatements(engine.db),
      clock: systemClock,
      limits: resolveLimits(),
    });
    expect(
      skills.resolve([
        { name: 'transfers', version: null },
        { name: 'transfers', version: 1 },
        { name: 'refunds', version: null },
      ]),
    ).toEqual([
      { name: 'transfers', version: 2, description: 'How to do it.', tools: ['transfer'] },
      { name: 'transfers', version: 1, description: 'How to do it.', tools: ['transfer'] },
      { name: 'refunds', version: 1, description: 'How to do it.', tools: [] },
    ]);
    expect(skills.read('transfers', 1)).toEqual({
      name: 'transfers',
      version: 1,
      description: 'How to do it.',
      body: '# Steps\n\n1. Do it.',
      tools: ['transfer'],
    });
    expect(skills.read('transfers', 2)?.body).toBe('v2 body');
    expect(skills.read('transfers', 9)).toBeNull();
    expect(skills.read('ghost', 1)).toBeNull();
    expect(() => skills.resolve([{ name: 'transfers', version: 9 }])).toThrow(
      'skills[0] pins skill transfers version 9, which does not exist; its latest is 2',
    );
  });

  it('refuses each bad input with its code, naming the value', async () => {
    const bad = (input: Record<string, unknown>, n = 50) =>
      fails(engine, CREATE, { id: id(n), i: { name: 'ok_name', description: 'd', body: 'b', tools: [], ...input } });

    let e = bad({ name: 'Bad-Name' });
    expect(e.code).toBe('BAD_REQUEST');
    expect(e.message).toContain('"Bad-Name"');
    expect(e.hint).toBeTruthy();

    e = bad({ description: '   ' });
    expect(e.code).toBe('BAD_REQUEST');
    expect(e.message).toContain('description');
    e = bad({ description: 'x'.repeat(1001) });
    expect(e.code).toBe('LIMIT_EXCEEDED');
    expect(e.message).toContain('1001');

    e = bad({ tools: ['balance', 'nope'] });
    expect(e.code).toBe('NOT_FOUND');
    expect(e.message).toContain('"nope"');
    expect(e.message).toContain('tools[1]');

    createSkill(engine, 1, { name: 'transfers' });
    e = bad({ name: 'transfers' });
    expect(e.code).toBe('ALREADY_EXISTS');
    expect(e.message).toContain('"transfers"');
    e = bad({ name: 'other' }, 1);
    expect(e.code).toBe('ALREADY_EXISTS');
    expect(e.message).toContain(id(1));

    e = fails(engine, UPDATE, { id: id(1), i: { name: 'renamed' } });
    expect(e.code).toBe('BAD_REQUEST');
    expect(e.message).toContain('"renamed"');
    e = fails(engine, UPDATE, { id: id(77), i: {} });
    expect(e.code).toBe('NOT_FOUND');
    expect(e.message).toContain(id(77));

    e = fails(engine, SKILL, { n: 'missing' });
    expect(e.code).toBe('NOT_FOUND');
    expect(e.message).toContain('"missing"');
    e = fails(engine, SKILL, { n: 'transfers', v: 5 });
    expect(e.code).toBe('NOT_FOUND');
    expect(e.message).toContain('5');
    expect(e.message).toContain('latest is 1');

    // An agent's skills: an unknown one, and a pinned version that does not exist.
    let r = createAgent(engine, 200, 'teller', [{ name: 'ghost' }]);
    expect(r.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    expect(r.errors?.[0]?.message).toContain('"ghost"');
    expect(r.errors?.[0]?.message).toContain('skills[0]');
    expect(r.errors?.[0]?.extensions?.hint).toBeTruthy();
    r = createAgent(engine, 200, 'teller', [{ name: 'transfers', version: 3 }]);
    expect(r.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    expect(r.errors?.[0]?.message).toContain('version 3');
    expect(r.errors?.[0]?.message).toContain('latest is 1');

    // The body's limit, with a small override.
    const small = await newEngine({ limits: { skillBodyCharsMax: 100 } });
    const over = fails(small, CREATE, {
      id: id(1),
      i: { name: 'long', description: 'd', body: 'x'.repeat(101), tools: [] },
    });
    expect(over.code).toBe('LIMIT_EXCEEDED');
    expect(over.message).toContain('101');
    expect(over.message).toContain('skillBodyCharsMax');
    expect(
      ok(small, CREATE, { id: id(1), i: { name: 'long', description: 'd', body: 'x'.repeat(100), tools: [] } }).actions
        .createSkill.version,
    ).toBe(1);
    const empty = fails(small, CREATE, { id: id(2), i: { name: 'empty', description: 'd', body: '' } });
    expect(empty.code).toBe('BAD_REQUEST');
  });

  it('authority: SELECT to read, INSERT to create, UPDATE to update on actions.Skill; never from inside a tool call', () => {
    createSkill(engine, 1, { name: 'transfers' });
    ok(engine, CREATE_CLIENT, {
      i: {
        principal: 'blind',
        name: 'no skills',
        policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['actions.Action'] }],
      },
    });
    ok(engine, CREATE_CLIENT, {
      i: {
        principal: 'reader',
        name: 'reads skills',
        policies: [{ effect: 'ALLOW', actions: ['SELECT'], resources: ['actions.Skill'] }],
      },
    });
    ok(engine, CREATE_CLIENT, {
      i: {
        principal: 'author',
        name: 'writes skills',
        policies: [{ effect: 'ALLOW', actions: ['SELECT', 'INSERT'], resources: ['actions.Skill'] }],
      },
    });
    const as = (principal: string, query: string, variables: Record<string, unknown>) =>
      engine.graphql(query, variables, { principal });

    expect(as('blind', SKILL, { n: 'transfers' }).errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');
    expect(
      (as('blind', '{ actions { skills(first: 10) { nodes { name } } } }', {}).data as any).actions.skills.nodes,
    ).toEqual([]);
    expect((as('reader', SKILL, { n: 'transfers' }).data as any).actions.skill.name).toBe('transfers');
    expect(
      as('reader', CREATE, { id: id(2), i: { name: 'refunds', description: 'd', body: 'b' } }).errors?.[0]?.extensions
        ?.code,
    ).toBe('ACCESS_DENIED');
    const made = as('author', CREATE, { id: id(2), i: { name: 'refunds', description: 'd', body: 'b' } });
    expect(made.errors).toBeUndefined();
    expect(as('author', UPDATE, { id: id(2), i: { body: 'b2' } }).errors?.[0]?.extensions?.code).toBe('ACCESS_DENIED');

    // A program's graphql() cannot create or update one, whatever its policies.
    const src = `function run() {
  const codes = [];
  try { graphql('mutation { actions { createSkill(id: "${id(3)}", input: {name: "sneaky", description: "d", body: "b"}) { version } } }'); } catch (e) { codes.push(e.code); }
  try { graphql('mutation { actions { updateSkill(id: "${id(1)}", input: {body: "hijacked"}) { version } } }'); } catch (e) { codes.push(e.code); }
  return codes;
}`;
    createTool(engine, 300, 'sneak', src, [
      { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE'], resources: ['actions.*'] },
    ]);
    const run = ok(
      engine,
      `mutation { actions { invokeAction(name: "sneak", input: {executionId: "${id(400)}", actionVersion: 1, input: {}}) { status output } } }`,
    ).actions.invokeAction;
    expect(run).toEqual({ status: 'SUCCEEDED', output: ['ACCESS_DENIED', 'ACCESS_DENIED'] });
    expect(fails(engine, SKILL, { n: 'sneaky' }).code).toBe('NOT_FOUND');
    expect(ok(engine, SKILL, { n: 'transfers' }).actions.skill.version).toBe(1);
  });
});

describe('skills in a project folder', () => {
  const PROJECT_TOOL = { actionId: id(100), description: 'A balance.', inputSchema: { type: 'object' } };

  function project() {
    const dir = join(mkdtempSync(join(tmpdir(), 'tally-skills-')), 'shop');
    mkdirSync(join(dir, 'tools'), { recursive: true });
    mkdirSync(join(dir, 'skills'));
    writeFileSync(join(dir, 'tally.json'), JSON.stringify({ name: 'shop' }));
    writeFileSync(join(dir, 'tools', 'balance.js'), 'function run(event) { return {}; }\n');
    writeFileSync(join(dir, 'tools', 'balance.json'), JSON.stringify(PROJECT_TOOL));
    writeFileSync(
      join(dir, 'tools', 'helper.json'),
      JSON.stringify({
        actionId: id(101),
        kind: 'agent',
        config: AGENT_CONFIG,
        tools: [{ name: 'balance' }],
        skills: [{ name: 'lookups' }],
      }),
    );
    writeFileSync(
      join(dir, 'skills', 'lookups.md'),
      `---\ndescription: "How to look balances up: by code"\ntools: [balance]\nskillId: ${id(1)}\n---\n\n# Lookups\n\nUse the code.\n`,
    );
    return dir;
  }

  it('creates the skill (after the tools it lists, before the agent that declares it), then leaves it unchanged, then makes a new version of an edited one', async () => {
    const engine = await newEngine();
    const dir = project();
    const first = await deploy(readProject(dir), engineTarget(engine));
    expect(formatPlan(first.plan).split('\n')).toEqual([
      '+ create tool balance (version 1)',
      '+ create skill lookups (version 1)',
      '+ create tool helper (version 1)',
    ]);
    expect(ok(engine, SKILL, { n: 'lookups' }).actions.skill).toMatchObject({
      skillId: id(1),
      version: 1,
      description: 'How to look balances up: by code',
      body: '# Lookups\n\nUse the code.',
      tools: ['balance'],
    });
    expect(
      ok(engine, '{ actions { action(name: "helper") { skills { name version } } } }').actions.action.skills,
    ).toEqual([{ name: 'lookups', version: null }]);

    const again = await deploy(readProject(dir), engineTarget(engine));
    expect(again.applied).toBe(false);
    expect(again.plan.every((item) => item.change === 'unchanged')).toBe(true);

    const file = join(dir, 'skills', 'lookups.md');
    writeFileSync(file, readFileSync(file, 'utf8').replace('Use the code.', 'Use the code, upper case.'));
    const edited = await deploy(readProject(dir), engineTarget(engine));
    expect(edited.plan.filter((item) => item.change !== 'unchanged').map((i) => formatPlan([i]))).toEqual([
      '~ new version 2 of skill lookups',
    ]);
    expect(ok(engine, SKILL, { n: 'lookups' }).actions.skill).toMatchObject({
      version: 2,
      body: '# Lookups\n\nUse the code, upper case.',
    });
  });

  it('a skill without a skillId cannot be created; a bad front matter line is named with its file and line; the server refuses a bad skill naming the file', async () => {
    const engine = await newEngine();
    const dir = project();
    writeFileSync(join(dir, 'skills', 'lookups.md'), '---\ndescription: d\ntools: [balance]\n---\nbody\n');
    await expect(deploy(readProject(dir), engineTarget(engine))).rejects.toThrow(
      /skills\/lookups\.md: needs a "skillId:"/,
    );

    writeFileSync(
      join(dir, 'skills', 'lookups.md'),
      `---\ndescription: d\ncolour: blue\nskillId: ${id(1)}\n---\nbody\n`,
    );
    expect(() => readProject(dir)).toThrow(ProjectError);
    expect(() => readProject(dir)).toThrow('skills/lookups.md:3: unknown key "colour"');
    expect(() => parseSkill('skills/x.md', 'no front matter')).toThrow('skills/x.md:1:');
    expect(() => parseSkill('skills/x.md', '---\ndescription: d\n')).toThrow('no closing "---"');
    expect(() => parseSkill('skills/x.md', '---\ntools: balance\n---\nb')).toThrow(
      'skills/x.md:2: tools must be a list in brackets',
    );
    expect(() => parseSkill('skills/x.md', '---\ndescription: a\ndescription: b\n---\nb')).toThrow(
      'skills/x.md:3: description is given twice',
    );
    expect(parseSkill('skills/x.md', '---\r\ndescription: d\r\ntools: []\r\n---\r\nline one\r\nline two\r\n')).toEqual({
      name: 'x',
      path: 'skills/x.md',
      skillId: null,
      description: 'd',
      tools: [],
      body: 'line one\nline two',
    });

    writeFileSync(
      join(dir, 'skills', 'lookups.md'),
      `---\ndescription: d\ntools: [balance, nope]\nskillId: ${id(1)}\n---\nbody\n`,
    );
    await expect(deploy(readProject(dir), engineTarget(engine))).rejects.toThrow(
      /skills\/lookups\.md: tools\[1\] names tool "nope", which does not exist \[NOT_FOUND\]\nnothing was applied/,
    );
    expect(fails(engine, '{ actions { action(name: "balance") { version } } }').code).toBe('NOT_FOUND');
  });

  it('the bank example deploys with its skill, and the teller declares it', async () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'tally-bank-skills-')), 'bank');
    cpSync(join(import.meta.dirname, '..', '..', 'examples', 'bank'), dir, { recursive: true });
    const engine = await newEngine();
    const result = await deploy(readProject(dir), engineTarget(engine));
    expect(result.plan.filter((item) => item.kind === 'skill').map((i) => formatPlan([i]))).toEqual([
      '+ create skill transfers (version 1)',
    ]);
    const skill = ok(engine, SKILL, { n: 'transfers' }).actions.skill;
    expect(skill).toMatchObject({
      skillId: 'b0000000-0000-4000-8000-0000000000b1',
      version: 1,
      tools: ['balance', 'transfer'],
    });
    expect(skill.description).toBe(
      "How to move money for a customer: check balances first, use the customer's own wallet, amounts as strings with two decimals",
    );
    expect(
      ok(engine, '{ actions { action(name: "teller") { skills { name version } } } }').actions.action.skills,
    ).toEqual([{ name: 'transfers', version: 1 }]);
  });
});
