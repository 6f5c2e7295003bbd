import { utcDate } from '../clock.js';
import { Dec } from '../decimal.js';
import { EngineError, quote } from '../errors.js';
import type { LedgerDeps } from './deps.js';
import type { ParamType } from './param-definitions.js';
import { expand } from './tran-code-expansion.js';
import type { CompiledField, CompiledTranCode } from './tran-codes.js';

/**
 * Refuse, when a tran code is created or changed, a template that can never post, in this order
 * (so a template with several faults always gets the same answer):
 * 1. a field reads `params.x` (or `params['x']`) for an undeclared param, or `vars.x` for a var that
 *    is not declared or not yet evaluated where it is read (a param default sees only the params
 *    declared before it, a var only the vars before it);
 * 2. fewer than two entries have no `condition` (`condition: "true"` counts as none): a posting
 *    needs two entries whatever the params;
 * 3. the entries are unbalanced for every input. Checked only when nothing structural depends on
 *    the input (no entry has a condition; currency, direction and layer read neither params nor
 *    vars); then each entry's units are a constant (an expression reading neither) or a term named
 *    by its expression's text, and debits − credits per currency and layer is a constant plus a sum
 *    of such terms. Units are never negative, so when every term and the constant lean the same
 *    way and they do not cancel, no input balances it except, at most, one where every amount is
 *    zero, which moves nothing; it is refused only if a posting with each param's default or a
 *    typed sample (DECIMAL 1, INTEGER 1, STRING 'x', BOOLEAN true, UUID, DATE today, TIMESTAMP
 *    now, JSON {}) is unbalanced too. Anything the sample cannot evaluate is left to posting.
 * Each refusal is TRAN_CODE_ERROR naming the field, with a hint.
 */
export function checkTranCodeCanPost(deps: LedgerDeps, compiled: CompiledTranCode): void {
  checkReferences(compiled);
  checkUnconditionalEntries(compiled);
  checkBalancedForSomeInput(deps, compiled);
}

type AstNode = { op?: unknown; args?: unknown };

/** Macros whose leading identifier arguments are variables bound inside their last argument. */
const BINDING_MACROS = new Set([
  'map',
  'filter',
  'all',
  'exists',
  'exists_one',
  'existsOne',
  'transformList',
  'transformMap',
  'bind',
]);

function astOf(field: CompiledField): unknown {
  return (field.evaluate as unknown as { ast?: unknown }).ast;
}

/** A `params`/`vars` read: the names selected after the root, e.g. vars.a.b → ['a', 'b']. */
interface Read {
  root: 'params' | 'vars';
  path: string[];
}

/**
 * Every `params.x` / `vars.x.y` the expression reads, outside `has(...)` (which only tests) and
 * outside macros that rebind the name. Unknown node shapes are walked through their args.
 */
function readsOf(ast: unknown): Read[] {
  const reads: Read[] = [];
  const walk = (node: unknown, shadowed: ReadonlySet<string>): void => {
    if (Array.isArray(node)) {
      for (const child of node) walk(child, shadowed);
      return;
    }
    if (node === null || typeof node !== 'object') return;
    const { op, args } = node as AstNode;
    const read = selection(node as AstNode, shadowed);
    if (read) {
      reads.push(read.read);
      walk(read.rest, shadowed);
      return;
    }
    if (op === 'call' && Array.isArray(args) && args[0] === 'has') return;
    if (op === 'rcall' && Array.isArray(args) && BINDING_MACROS.has(args[0] as string) && Array.isArray(args[2])) {
      const list = args[2] as unknown[];
      const bound = new Set(shadowed);
      let i = 0;
      for (; i < list.length - 1 && (list[i] as AstNode)?.op === 'id'; i++)
        bound.add((list[i] as AstNode).args as string);
      walk(args[1], shadowed);
      walk(list.slice(i, -1), shadowed); // cel.bind's initialiser
      walk(list.slice(-1), bound);
      return;
    }
    walk(args, shadowed);
  };
  walk(ast, new Set());
  return reads;
}

/** `params.a`, `params['a']`, `vars.a.b`: the read, and what is left to walk (index expressions). */
function selection(node: AstNode, shadowed: ReadonlySet<string>): { read: Read; rest: unknown[] } | null {
  const path: string[] = [];
  let current: AstNode = node;
  for (;;) {
    const args = current.args;
    if (!Array.isArray(args)) return null;
    if (current.op === '.' && typeof args[1] === 'string') path.unshift(args[1]);
    else if (
      current.op === '[]' &&
      typeof (args[1] as AstNode)?.args === 'string' &&
      (args[1] as AstNode).op === 'value'
    )
      path.unshift((args[1] as AstNode).args as string);
    else return null;
    const target = args[0] as AstNode;
    if (target?.op === 'id' && (target.args === 'params' || target.args === 'vars') && !shadowed.has(target.args)) {
      return { read: { root: target.args, path }, rest: [] };
    }
    if (!target || typeof target !== 'object') return null;
    current = target;
  }
}

/** The fields of a compiled tran code in evaluation order, each with what it may read. */
function fieldsInOrder(
  compiled: CompiledTranCode,
): Array<{ field: CompiledField; paramsBefore: number | null; varsBefore: number | null }> {
  const fields: Array<{ field: CompiledField; paramsBefore: number | null; varsBefore: number | null }> = [];
  compiled.params.forEach((p, i) => {
    if (p.defaultValue) fields.push({ field: p.defaultValue, paramsBefore: i, varsBefore: 0 });
  });
  compiled.vars.forEach((v, i) => fields.push({ field: v.field, paramsBefore: null, varsBefore: i }));
  for (const field of Object.values(compiled.transaction))
    if (field) fields.push({ field, paramsBefore: null, varsBefore: null });
  for (const entry of compiled.entries)
    for (const field of Object.values(entry)) if (field) fields.push({ field, paramsBefore: null, varsBefore: null });
  return fields;
}

function checkReferences(compiled: CompiledTranCode): void {
  const code = compiled.document.code;
  const paramNames = compiled.params.map((p) => p.definition.name);
  const varPaths = compiled.vars.map((v) => v.path);
  for (const { field, paramsBefore, varsBefore } of fieldsInOrder(compiled)) {
    for (const read of readsOf(astOf(field))) {
      const name = read.path[0]!;
      const where = `tran code ${code}: ${field.path} = ${quote(field.source)} reads ${read.root}.${read.path.join('.')}`;
      if (read.root === 'params') {
        const visible = paramsBefore === null ? paramNames : paramNames.slice(0, paramsBefore);
        if (visible.includes(name)) continue;
        if (paramNames.includes(name)) {
          throw refusal(
            field,
            `${where}, a param declared after it`,
            'A default sees only the params declared before it: move that param up.',
          );
        }
        throw refusal(field, `${where}, which is not a declared param`, hintFor(name, paramNames, 'param', 'params'));
      }
      const declared = declaredVar(varPaths, read.path);
      if (declared === null) {
        const tops = [...new Set(varPaths.map((p) => p[0]!))];
        throw refusal(field, `${where}, which is not a declared var`, hintFor(name, tops, 'var', 'vars'));
      }
      if (varsBefore !== null && declared !== -1 && declared >= varsBefore) {
        throw refusal(
          field,
          `${where}, which is evaluated ${declared === varsBefore ? 'as itself' : 'after it'}`,
          'Vars are evaluated in order: declare a var before the vars that read it.',
        );
      }
    }
  }
}

/**
 * Whether `path` names a declared var: the index of the leaf it reaches (the rest is a field of
 * that var's value), -1 for a map of vars, null when a name along the way is not declared.
 */
function declaredVar(varPaths: readonly string[][], path: readonly string[]): number | null {
  for (let depth = 1; depth <= path.length; depth++) {
    const prefix = path.slice(0, depth);
    const leaf = varPaths.findIndex((p) => p.length === depth && p.every((k, i) => k === prefix[i]));
    if (leaf !== -1) return leaf;
    if (!varPaths.some((p) => p.length > depth && prefix.every((k, i) => k === p[i]))) return null;
  }
  return -1;
}

function hintFor(name: string, declared: readonly string[], what: string, root: string): string {
  const near = declared.filter((d) => editDistance(d, name) <= Math.max(1, Math.floor(d.length / 3)));
  if (near.length > 0) return `Did you mean ${near.map((n) => `${root}.${n}`).join(' or ')}?`;
  return declared.length > 0
    ? `Declared ${what}s: ${declared.join(', ')}. Declare ${quote(name)} or fix the name.`
    : `The tran code declares no ${what}s: declare ${quote(name)}.`;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = row;
  }
  return previous[b.length]!;
}

function isUnconditional(entry: CompiledTranCode['entries'][number]): boolean {
  return !entry.condition || entry.condition.source.trim() === 'true';
}

function checkUnconditionalEntries(compiled: CompiledTranCode): void {
  const unconditional = compiled.entries.flatMap((entry, i) => (isUnconditional(entry) ? [`entries[${i}]`] : []));
  if (unconditional.length >= 2) return;
  const code = compiled.document.code;
  const total = compiled.entries.length;
  throw new EngineError(
    'TRAN_CODE_ERROR',
    `tran code ${code}: entries has ${unconditional.length} entr${unconditional.length === 1 ? 'y' : 'ies'} without a condition${unconditional.length ? ` (${unconditional.join(', ')})` : ''} of ${total}; a transaction needs at least 2 whatever the params`,
    {
      hint:
        total < 2
          ? 'Add the other side: every transaction has a debit and a credit entry that balance.'
          : 'Leave the condition off at least two entries; to vary a side with the params, compute its direction or units in CEL instead.',
      details: { field: 'entries', unconditional: unconditional.length },
    },
  );
}

const SAMPLE_UUID = '00000000-0000-4000-8000-000000000001';

function sampleOf(type: ParamType, now: Date): unknown {
  switch (type) {
    case 'STRING':
      return 'x';
    case 'INTEGER':
      return 1;
    case 'DECIMAL':
      return '1';
    case 'BOOLEAN':
      return true;
    case 'UUID':
      return SAMPLE_UUID;
    case 'DATE':
      return utcDate(now);
    case 'TIMESTAMP':
      return now.toISOString();
    case 'JSON':
      return {};
  }
}

/** Whether a field's value can differ between postings: it reads params or vars, or the clock or a fresh id. */
function readsInput(field: CompiledField): boolean {
  if (/\b(Now|Today|New)\s*\(/.test(field.source)) return true;
  const reads = (node: unknown): boolean => {
    if (Array.isArray(node)) return node.some(reads);
    if (node === null || typeof node !== 'object') return false;
    const { op, args } = node as AstNode;
    if (op === 'id') return args === 'params' || args === 'vars';
    return reads(args);
  };
  return reads(astOf(field));
}

function checkBalancedForSomeInput(deps: LedgerDeps, compiled: CompiledTranCode): void {
  const templates = compiled.entries;
  if (!templates.every((entry) => !entry.condition)) return;
  const structural = (entry: (typeof templates)[number]) => [
    entry.currency!,
    entry.direction!,
    ...(entry.layer ? [entry.layer] : []),
  ];
  if (templates.some((entry) => structural(entry).some(readsInput))) return;
  const now = deps.clock.now();
  const sample: Record<string, unknown> = {};
  for (const { definition, defaultValue } of compiled.params)
    if (!defaultValue) sample[definition.name] = sampleOf(definition.type, now);
  let planned: ReturnType<typeof expand>['entries'];
  try {
    planned = deps.cel.scope(`tran code ${compiled.document.code}`, () =>
      expand(deps, compiled, SAMPLE_UUID, sample),
    ).entries;
  } catch {
    return; // the sample does not fit the template; posting will judge real params
  }
  // Per currency and layer: debits − credits as a constant plus terms named by their expression.
  type Group = { constant: Dec; terms: Map<string, number>; entries: string[]; sample: Dec };
  const groups = new Map<string, Group>();
  planned.forEach((entry, i) => {
    const units = templates[i]!.units!;
    const key = `${entry.currency} ${entry.layer}`;
    const group: Group = groups.get(key) ?? { constant: new Dec(0), terms: new Map(), entries: [], sample: new Dec(0) };
    groups.set(key, group);
    const sign = entry.direction === 'DEBIT' ? 1 : -1;
    group.entries.push(`entries[${i}] ${entry.direction} ${units.source}`);
    const amount = new Dec(entry.units);
    group.sample = group.sample.plus(sign === 1 ? amount : amount.neg());
    if (readsInput(units)) {
      const term = units.source.replace(/\s+/g, '');
      group.terms.set(term, (group.terms.get(term) ?? 0) + sign);
    } else {
      group.constant = group.constant.plus(sign === 1 ? amount : amount.neg());
    }
  });
  for (const [key, group] of groups) {
    const coefficients = [...group.terms.values()].filter((c) => c !== 0);
    const constantSign = group.constant.isZero() ? 0 : group.constant.isNegative() ? -1 : 1;
    const signs = new Set([...coefficients.map(Math.sign), ...(constantSign ? [constantSign] : [])]);
    if (signs.size !== 1 || group.sample.isZero()) continue; // cancels, or can balance for some input
    const [currency, layer] = key.split(' ');
    throw new EngineError(
      'TRAN_CODE_ERROR',
      `tran code ${compiled.document.code}: entries are unbalanced for every input: ${currency} ${layer} has ${group.entries.join(', ')}` +
        ` (debits − credits = ${group.sample.toFixed()} with ${describeSample(compiled, sample)})`,
      {
        hint: 'Debits must equal credits per currency and layer: check the direction, currency, layer and units of these entries.',
        details: { field: 'entries', currency, layer, debitsMinusCredits: group.sample.toFixed() },
      },
    );
  }
}

function describeSample(compiled: CompiledTranCode, sample: Record<string, unknown>): string {
  const parts = compiled.params.map(({ definition }) =>
    Object.hasOwn(sample, definition.name)
      ? `${definition.name} = ${JSON.stringify(sample[definition.name])}`
      : `${definition.name} = its default`,
  );
  return parts.length ? parts.join(', ') : 'no params';
}

function refusal(field: CompiledField, message: string, hint: string): EngineError {
  return new EngineError('TRAN_CODE_ERROR', message, {
    hint,
    details: { field: field.path, expression: field.source },
  });
}
