import {
  type DocumentNode,
  type FieldNode,
  type FragmentDefinitionNode,
  Kind,
  type OperationDefinitionNode,
  print,
  type SelectionNode,
  type SelectionSetNode,
  visit,
} from 'graphql';

/** Field selections written in the document (aliases count; a fragment's fields count once). */
export function countFields(document: DocumentNode): number {
  let fields = 0;
  const sets: SelectionSetNode[] = [];
  for (const definition of document.definitions) {
    if (definition.kind === Kind.OPERATION_DEFINITION || definition.kind === Kind.FRAGMENT_DEFINITION)
      sets.push(definition.selectionSet);
  }
  for (let set = sets.pop(); set; set = sets.pop()) {
    for (const selection of set.selections) {
      if (selection.kind === Kind.FIELD) fields++;
      if (selection.kind !== Kind.FRAGMENT_SPREAD && selection.selectionSet) sets.push(selection.selectionSet);
    }
  }
  return fields;
}

/**
 * An upper bound on the work of graphql-js's OverlappingFieldsCanBeMerged, in field comparisons:
 * in every selection set, two fields under one response name are compared, and so are the fields
 * beneath them, pairwise (1 + n1 × n2 for fields with n1 and n2 fields beneath); a fragment spread
 * adds its fields to the set's (the rule compares them with the set's, and fragments pairwise;
 * pairs within one fragment are counted once, where it is defined).
 * Without a bound the rule is quadratic in the document: 766 fields nested as
 * `a: queries { … } a: queries { … }` took ~260 ms, 500 repeated `journal { name }` ~660 ms.
 * One linear pass; it stops soon after passing `comparisonsMax`.
 */
export function countFieldComparisons(document: DocumentNode, comparisonsMax = Infinity): number {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions) {
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  }
  const walk = new ComparisonWalk(fragments, comparisonsMax);
  const sets: SelectionSetNode[] = [];
  for (const definition of document.definitions) {
    if (definition.kind === Kind.OPERATION_DEFINITION || definition.kind === Kind.FRAGMENT_DEFINITION)
      sets.push(definition.selectionSet);
  }
  for (let set = sets.pop(); set && walk.comparisons <= comparisonsMax; set = sets.pop()) {
    const { groups, spreads, withinFragments } = walk.groupsOf(set);
    walk.comparisons += pairs(groups) - withinFragments + (spreads * (spreads - 1)) / 2;
    const written = (selections: readonly SelectionNode[]): void => {
      for (const selection of selections) {
        if (selection.kind === Kind.INLINE_FRAGMENT) written(selection.selectionSet.selections);
        else if (selection.kind === Kind.FIELD && selection.selectionSet) sets.push(selection.selectionSet);
      }
    };
    written(set.selections);
  }
  return walk.comparisons;
}

/** Fields under one response name in one selection set: how many, and Σ n, Σ n² of the fields beneath each. */
interface Group {
  count: number;
  sum: number;
  squares: number;
}

/** The comparisons among the fields of each group: 1 + n1 × n2 for each pair. */
function pairs(groups: ReadonlyMap<string, Group>): number {
  let total = 0;
  for (const { count, sum, squares } of groups.values()) total += (count * (count - 1)) / 2 + (sum * sum - squares) / 2;
  return total;
}

interface SetGroups {
  groups: Map<string, Group>;
  /** Distinct fragments spread in the set (compared pairwise). */
  spreads: number;
  /** Pairs within one spread fragment: compared where the fragment is defined, not here. */
  withinFragments: number;
}

class ComparisonWalk {
  comparisons = 0;
  private readonly groups = new Map<SelectionSetNode, SetGroups>();
  private readonly sizes = new Map<SelectionSetNode, number>();
  private readonly fragmentGroups = new Map<string, Map<string, Group>>();
  private readonly inProgress = new Set<string>();

  constructor(
    private readonly fragments: ReadonlyMap<string, FragmentDefinitionNode>,
    private readonly comparisonsMax: number,
  ) {}

  /** The set's fields by response name, inline fragments flattened and fragments spread in; memoised. */
  groupsOf(set: SelectionSetNode): SetGroups {
    const known = this.groups.get(set);
    if (known) return known;
    const groups = new Map<string, Group>();
    const spread = new Set<string>();
    let withinFragments = 0;
    const add = (name: string, count: number, sum: number, squares: number): void => {
      const group = groups.get(name);
      if (group) {
        group.count += count;
        group.sum += sum;
        group.squares += squares;
      } else {
        groups.set(name, { count, sum, squares });
      }
    };
    const collect = (selections: readonly SelectionNode[]): void => {
      for (const selection of selections) {
        if (selection.kind === Kind.INLINE_FRAGMENT) {
          collect(selection.selectionSet.selections);
        } else if (selection.kind === Kind.FIELD) {
          const n = selection.selectionSet ? this.sizeOf(selection.selectionSet) : 0;
          add(selection.alias?.value ?? selection.name.value, 1, n, n * n);
        } else if (!spread.has(selection.name.value)) {
          spread.add(selection.name.value);
          const fragment = this.groupsOfFragment(selection.name.value);
          // Comparing with a fragment walks its field map: that is work too.
          this.comparisons += fragment.size;
          withinFragments += pairs(fragment);
          for (const [name, g] of fragment) add(name, g.count, g.sum, g.squares);
        }
      }
    };
    collect(set.selections);
    const result = { groups, spreads: spread.size, withinFragments };
    this.groups.set(set, result);
    return result;
  }

  private groupsOfFragment(name: string): Map<string, Group> {
    const known = this.fragmentGroups.get(name);
    if (known) return known;
    const fragment = this.fragments.get(name);
    // A cycle is NoFragmentCyclesRule's to report; past the bound the answer is known already.
    if (!fragment || this.inProgress.has(name) || this.comparisons > this.comparisonsMax) return new Map();
    this.inProgress.add(name);
    const { groups } = this.groupsOf(fragment.selectionSet);
    this.inProgress.delete(name);
    this.fragmentGroups.set(name, groups);
    return groups;
  }

  /** Fields beneath a selection set, fragments expanded; memoised. */
  private sizeOf(set: SelectionSetNode): number {
    let size = this.sizes.get(set);
    if (size !== undefined) return size;
    size = 0;
    for (const group of this.groupsOf(set).groups.values()) size += group.count + group.sum;
    this.sizes.set(set, size);
    return size;
  }
}

/** Mutation fields that can run for long: a tool's program, or a backfill over existing rows. */
const LONG_FIELDS = new Set(['invokeAction', 'createCalculation', 'attachCalculation', 'createIndex']);

/** What the server needs to know of an operation before it runs it (see operationTraits). */
export interface OperationTraits {
  /** A field takes `waitMs` (it may wait on an execution: see waitProbe). */
  waits: boolean;
  /** A field may run long (LONG_FIELDS): in a group commit it goes first, never behind others' replies. */
  long: boolean;
}

const traitsOf = new WeakMap<OperationDefinitionNode, OperationTraits>();

/**
 * The traits of one operation of a (validated) document, from its selections and the fragments
 * they spread, each fragment once; remembered per operation node (documents are cached).
 */
export function operationTraits(document: DocumentNode, operation: OperationDefinitionNode): OperationTraits {
  const known = traitsOf.get(operation);
  if (known) return known;
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions) {
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  }
  const traits: OperationTraits = { waits: false, long: false };
  const seen = new Set<string>();
  const sets: SelectionSetNode[] = [operation.selectionSet];
  for (let set = sets.pop(); set; set = sets.pop()) {
    for (const selection of set.selections) {
      if (selection.kind === Kind.FIELD) {
        if (LONG_FIELDS.has(selection.name.value)) traits.long = true;
        if (selection.arguments?.some((argument) => argument.name.value === 'waitMs')) traits.waits = true;
      }
      if (selection.kind === Kind.FRAGMENT_SPREAD) {
        const name = selection.name.value;
        const fragment = fragments.get(name);
        if (fragment && !seen.has(name)) {
          seen.add(name);
          sets.push(fragment.selectionSet);
        }
      } else if (selection.selectionSet) sets.push(selection.selectionSet);
    }
  }
  traitsOf.set(operation, traits);
  return traits;
}

const probes = new WeakMap<OperationDefinitionNode, string | null>();

/** `__typename`: what the probe selects of each execution it keeps. */
const TYPENAME: FieldNode = { kind: Kind.FIELD, name: { kind: Kind.NAME, value: '__typename' } };

/**
 * The wait fields of a query, alone: a document of the operation's `actions { execution(…, waitMs:)
 * }` fields (aliases, arguments and @include/@skip kept, `__typename` selected), through the
 * fragments that hold them (each once: a fragment spread many times stays one fragment), with the
 * variables they use. Running it records the same waits as running the query (the execution
 * resolver decides, see actions.ts) for the cost of a few primary-key reads, so a query that waits
 * runs once, after its waits, instead of once before and once after. Null when the operation has
 * no such field. Remembered per operation node (documents are cached).
 */
export function waitProbe(document: DocumentNode, operation: OperationDefinitionNode): string | null {
  const known = probes.get(operation);
  if (known !== undefined) return known;
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions) {
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  }
  // Each fragment pruned once (null while pruning it: validated documents have no cycles anyway).
  const pruned = new Map<string, FragmentDefinitionNode | null>();
  const fragment = (name: string): FragmentDefinitionNode | null => {
    if (pruned.has(name)) return pruned.get(name)!;
    pruned.set(name, null);
    const definition = fragments.get(name);
    const level = definition?.typeCondition.name.value;
    if (!definition || (level !== 'Query' && level !== 'ActionsQuery')) return null;
    const selections = prune(definition.selectionSet, level);
    const kept: FragmentDefinitionNode | null =
      selections.length > 0 ? { ...definition, selectionSet: { kind: Kind.SELECTION_SET, selections } } : null;
    pruned.set(name, kept);
    return kept;
  };
  // `actions` fields on Query, `execution(waitMs:)` fields on ActionsQuery (the only field that waits).
  const prune = (set: SelectionSetNode, level: 'Query' | 'ActionsQuery'): SelectionNode[] => {
    const kept: SelectionNode[] = [];
    for (const selection of set.selections) {
      if (selection.kind === Kind.FIELD) {
        if (level === 'Query' && selection.name.value === 'actions' && selection.selectionSet) {
          const selections = prune(selection.selectionSet, 'ActionsQuery');
          if (selections.length > 0)
            kept.push({ ...selection, selectionSet: { kind: Kind.SELECTION_SET, selections } });
        } else if (
          level === 'ActionsQuery' &&
          selection.name.value === 'execution' &&
          selection.arguments?.some((a) => a.name.value === 'waitMs')
        ) {
          kept.push({ ...selection, selectionSet: { kind: Kind.SELECTION_SET, selections: [TYPENAME] } });
        }
      } else if (selection.kind === Kind.INLINE_FRAGMENT) {
        if (selection.typeCondition && selection.typeCondition.name.value !== level) continue;
        const selections = prune(selection.selectionSet, level);
        if (selections.length > 0) kept.push({ ...selection, selectionSet: { kind: Kind.SELECTION_SET, selections } });
      } else if (fragment(selection.name.value)) {
        kept.push(selection);
      }
    }
    return kept;
  };
  let probe: string | null = null;
  const selections = operation.operation === 'query' ? prune(operation.selectionSet, 'Query') : [];
  if (selections.length > 0) {
    const used = [...pruned.values()].filter((f): f is FragmentDefinitionNode => f !== null);
    const body: OperationDefinitionNode = { ...operation, selectionSet: { kind: Kind.SELECTION_SET, selections } };
    // Only the variables the kept fields use (graphql-js refuses a document with unused ones).
    const names = new Set<string>();
    visit(
      { kind: Kind.DOCUMENT, definitions: [{ ...body, variableDefinitions: [] }, ...used] },
      { Variable: (node) => void names.add(node.name.value) },
    );
    const variableDefinitions = (operation.variableDefinitions ?? []).filter((definition) =>
      names.has(definition.variable.name.value),
    );
    probe = print({ kind: Kind.DOCUMENT, definitions: [{ ...body, variableDefinitions }, ...used] });
  }
  probes.set(operation, probe);
  return probe;
}
