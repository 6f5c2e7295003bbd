import {
  type FieldNode,
  type FragmentDefinitionNode,
  type FragmentSpreadNode,
  getNamedType,
  type GraphQLField,
  type GraphQLNamedType,
  type GraphQLResolveInfo,
  type GraphQLSchema,
  isInterfaceType,
  isListType,
  isNonNullType,
  isObjectType,
  Kind,
  type OperationDefinitionNode,
  type SelectionNode,
  type SelectionSetNode,
  type ValueNode,
} from 'graphql';
import type { Limits } from '../limits.js';

/**
 * The cost of an operation, known before any resolver runs: every field selected costs 1, and the
 * fields below a list are counted once per item the list can hold. A connection holds `first`
 * items; a plain list holds what the limit behind it allows (see `listBounds`). So
 * `accounts(first: 100) { nodes { code entries(first: 10) { nodes { units } } } }` costs
 * 1 + 100 × (1 + 1 + 1 + 10 × (1 + 1)) = 2,401. This is graphql-query-complexity's
 * "child complexity × first" estimator, and GitHub's node limit counts the same products; aliases
 * and fragments count each time they select (a fragment's cost is computed once).
 */
export interface OperationCost {
  cost: number;
  /**
   * The cost depends on a variable: `first: $n` (costed as pageSizeMax while the variable is not
   * known, an upper bound), or `__type(name: $t)` (then left out: see `lowerBound`).
   */
  variables: boolean;
  /**
   * The cost may be larger: `__type`'s name was a variable not known yet, or counting stopped past
   * costMax (introspection is counted item by item).
   */
  lowerBound: boolean;
}

/** How many items a list field without `first` can hold, keyed by "Type.field". */
export interface ListBound {
  size: number;
  /**
   * The field lists the nodes of a tree that holds `size` nodes in all (an execution's calls): the
   * same field directly inside it adds no items, since every level together is within `size`.
   */
  tree?: boolean;
}

export interface CostOptions {
  pageSizeMax: number;
  lists: Readonly<Record<string, ListBound>>;
  /** Counting stops soon after the cost passes this: the answer is then only known to be larger. */
  costMax: number;
}

/**
 * The lists of schema.graphql that take no `first`, and the limit that bounds each. A list not named
 * here (Action.versions grows with every update) counts as a page of pageSizeMax. Lists of scalars
 * and enums select nothing below them and cost 1.
 */
export function listBounds(limits: Readonly<Limits>): Record<string, ListBound> {
  return {
    'Execution.children': { size: limits.callsPerExecutionMax, tree: true },
    'Execution.invocations': { size: limits.maxAttemptsMax },
    'Client.policies': { size: limits.policiesMax },
    'Action.policies': { size: limits.policiesMax },
    'Action.tools': { size: limits.toolReferencesMax },
    'TranCode.params': { size: limits.tranCodeParamsMax },
    'TranCode.entries': { size: limits.entriesPerTransactionMax },
    'Calculation.dimensions': { size: limits.calculationDimensionsMax + 3 },
    'Calculation.children': { size: 3 },
    'VelocityLimit.window': { size: limits.velocityWindowKeysMax },
    'VelocityLimit.params': { size: limits.tranCodeParamsMax },
    'VelocityLimitSpec.balance': { size: 6 },
    'VelocityControl.limits': { size: limits.velocityLimitsPerControlMax },
    // One row per limit of each control attached to the account or set, and per balance limit in it.
    'Query.velocity': { size: limits.velocityControlsPerAccountMax * limits.velocityLimitsPerControlMax * 6 },
    'Account.velocity': { size: limits.velocityControlsPerAccountMax * limits.velocityLimitsPerControlMax * 6 },
    'AccountSet.velocity': { size: limits.velocityControlsPerAccountMax * limits.velocityLimitsPerControlMax * 6 },
    // At most one exception per control, limit and account or set an entry reached.
    'Transaction.exceptions': { size: limits.velocityControlsPerAccountMax * limits.velocityLimitsPerControlMax },
  };
}

/**
 * The cost of one operation. `variables` null means "not known yet" (validation): a variable `first`
 * then counts as pageSizeMax. Linear in the document: each fragment is costed once per context.
 */
export function operationCost(
  schema: GraphQLSchema,
  fragments: ReadonlyMap<string, FragmentDefinitionNode>,
  operation: OperationDefinitionNode,
  variables: Readonly<Record<string, unknown>> | null,
  options: CostOptions,
): OperationCost {
  const walk = new CostWalk(schema, fragments, operation, variables, options);
  const root = operation.operation === 'mutation' ? schema.getMutationType() : schema.getQueryType();
  const cost = root ? walk.selectionSet(operation.selectionSet, root, '') : 0;
  return { cost, variables: walk.usesVariables, lowerBound: walk.lowerBound };
}

/** The context of a connection's own fields (nodes, edges, pageInfo). */
const PAGE = '#page';

class CostWalk {
  usesVariables = false;
  private unknownType = false;
  get lowerBound(): boolean {
    return this.unknownType || this.introspected > this.options.costMax;
  }
  private readonly memo = new Map<string, number>();
  private readonly defaults = new Map<string, ValueNode>();
  /** Introspection fields counted so far (against the schema itself, see `introspection`). */
  private introspected = 0;
  private readonly expansions = new Map<SelectionSetNode, FieldNode[]>();

  constructor(
    private readonly schema: GraphQLSchema,
    private readonly fragments: ReadonlyMap<string, FragmentDefinitionNode>,
    operation: OperationDefinitionNode,
    private readonly variables: Readonly<Record<string, unknown>> | null,
    private readonly options: CostOptions,
  ) {
    for (const definition of operation.variableDefinitions ?? []) {
      if (definition.defaultValue) this.defaults.set(definition.variable.name.value, definition.defaultValue);
    }
  }

  /**
   * The fields of a selection set on `type`. `enclosing` is what the set is inside, where that
   * changes how lists count: PAGE (a connection), a tree list's "Type.field", or ''. A fragment
   * spread twice in one set is collected once, as graphql-js executes it.
   */
  selectionSet(set: SelectionSetNode, type: GraphQLNamedType, enclosing: string): number {
    let total = 0;
    for (const field of collectFields(set, this.fragments)) {
      if (field.kind === Kind.FIELD) {
        total += this.field(field, type, enclosing);
      } else {
        const key = `${field.name.value}\0${enclosing}`;
        let cost = this.memo.get(key);
        if (cost === undefined) {
          const fragment = this.fragments.get(field.name.value);
          const on = fragment ? this.schema.getType(fragment.typeCondition.name.value) : undefined;
          cost = fragment && on ? this.selectionSet(fragment.selectionSet, on, enclosing) : 0;
          this.memo.set(key, cost);
        }
        total += cost;
      }
    }
    return total;
  }

  private field(node: FieldNode, parent: GraphQLNamedType, enclosing: string): number {
    const name = node.name.value;
    if (name === '__schema' || name === '__type') return this.introspection(node);
    if (!node.selectionSet || !(isObjectType(parent) || isInterfaceType(parent))) return 1;
    const field = parent.getFields()[name];
    if (!field) return 1;
    const key = `${parent.name}.${name}`;
    const firstArg = field.args.find((a) => a.name === 'first');
    const connection = firstArg !== undefined;
    const bound = this.options.lists[key];
    const children = this.selectionSet(
      node.selectionSet,
      getNamedType(field.type),
      connection ? PAGE : bound?.tree ? key : '',
    );
    const fallback = typeof firstArg?.defaultValue === 'number' ? firstArg.defaultValue : undefined;
    return 1 + (connection ? this.first(node, fallback) : this.itemsOf(field, bound, key, enclosing)) * children;
  }

  /** How many items a field without `first` selects its selection set on. */
  private itemsOf(
    field: GraphQLField<unknown, unknown>,
    bound: ListBound | undefined,
    key: string,
    enclosing: string,
  ): number {
    const type = isNonNullType(field.type) ? field.type.ofType : field.type;
    // A connection's nodes and edges are its page, counted by its `first` already.
    if (!isListType(type) || enclosing === PAGE) return 1;
    if (bound?.tree && enclosing === key) return 1;
    return bound?.size ?? this.options.pageSizeMax;
  }

  /** `first` (left out: the schema's default, if any), within [0, pageSizeMax] (a larger one is refused by the field itself). */
  private first(node: FieldNode, fallback?: number): number {
    const max = this.options.pageSizeMax;
    const value = node.arguments?.some((a) => a.name.value === 'first') ? this.argument(node, 'first') : fallback;
    return typeof value === 'number' && Number.isInteger(value) ? Math.min(Math.max(value, 0), max) : max;
  }

  /** A literal argument, or its variable's value (or default); undefined when not known. */
  private argument(node: FieldNode, name: string): unknown {
    const argument = node.arguments?.find((a) => a.name.value === name);
    if (!argument) return undefined;
    let value: ValueNode | undefined = argument.value;
    if (value.kind === Kind.VARIABLE) {
      this.usesVariables = true;
      const variable = value.name.value;
      if (this.variables === null) return undefined;
      if (this.variables[variable] !== undefined) return this.variables[variable];
      value = this.defaults.get(variable);
    }
    if (value?.kind === Kind.INT) return Number(value.value);
    if (value?.kind === Kind.STRING) return value.value;
    return undefined;
  }

  /**
   * Introspection is counted against the schema itself: its lists are as long as the schema makes
   * them (and graphql-js's MaxIntrospectionDepthRule stops them nesting deeper than 3), so the
   * GraphiQL query costs what it returns. Counting stops once past costMax.
   */
  private introspection(node: FieldNode): number {
    const start = this.introspected;
    if (node.name.value === '__schema') {
      this.count(node, this.schema.getType('__Schema'), this.schema);
    } else {
      this.introspected++;
      const name = this.argument(node, 'name');
      if (name === undefined) this.unknownType = true;
      const type = typeof name === 'string' ? this.schema.getType(name) : undefined;
      if (type && node.selectionSet) this.countAll(node.selectionSet, this.schema.getType('__Type'), type);
    }
    return this.introspected - start;
  }

  private count(node: FieldNode, type: GraphQLNamedType | undefined, value: unknown): void {
    this.introspected++;
    if (node.selectionSet && value != null) this.countAll(node.selectionSet, type, value);
  }

  private countAll(set: SelectionSetNode, type: GraphQLNamedType | undefined, value: unknown): void {
    if (!isObjectType(type)) return;
    const info = { schema: this.schema } as GraphQLResolveInfo;
    for (const node of this.expanded(set)) {
      if (this.introspected > this.options.costMax) return;
      const field = type.getFields()[node.name.value];
      if (!field?.resolve || !node.selectionSet) {
        this.introspected++;
        continue;
      }
      // includeDeprecated: true gives the longest answer (it is the only argument of these lists).
      const result: unknown = field.resolve(value, { includeDeprecated: true }, undefined, info);
      const itemType = getNamedType(field.type);
      this.introspected++;
      for (const item of Array.isArray(result) ? result : [result]) {
        if (this.introspected > this.options.costMax) return;
        if (item != null) this.countAll(node.selectionSet, itemType, item);
      }
    }
  }

  /** The fields of a selection set with its fragments expanded (each once), computed once per set. */
  private expanded(set: SelectionSetNode): FieldNode[] {
    let fields = this.expansions.get(set);
    if (fields) return fields;
    fields = [];
    const spread = new Set<string>();
    const visit = (selections: readonly SelectionNode[]): void => {
      for (const selection of selections) {
        if (selection.kind === Kind.FIELD) fields!.push(selection);
        else if (selection.kind === Kind.INLINE_FRAGMENT) visit(selection.selectionSet.selections);
        else if (!spread.has(selection.name.value)) {
          spread.add(selection.name.value);
          const fragment = this.fragments.get(selection.name.value);
          if (fragment) visit(fragment.selectionSet.selections);
        }
      }
    };
    visit(set.selections);
    this.expansions.set(set, fields);
    return fields;
  }
}

/**
 * The fields and fragment spreads of a selection set, inline fragments flattened in; each
 * fragment name once, as graphql-js's collectFields does (so spreading one fragment many times in
 * one set costs as much as once).
 */
function collectFields(
  set: SelectionSetNode,
  fragments: ReadonlyMap<string, FragmentDefinitionNode>,
): Array<FieldNode | FragmentSpreadNode> {
  const out: Array<FieldNode | FragmentSpreadNode> = [];
  const spread = new Set<string>();
  const visit = (selections: readonly SelectionNode[]): void => {
    for (const selection of selections) {
      if (selection.kind === Kind.FIELD) out.push(selection);
      else if (selection.kind === Kind.INLINE_FRAGMENT) visit(selection.selectionSet.selections);
      else if (!spread.has(selection.name.value) && fragments.has(selection.name.value)) {
        spread.add(selection.name.value);
        out.push(selection);
      }
    }
  };
  visit(set.selections);
  return out;
}
