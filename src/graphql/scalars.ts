import { GraphQLScalarType, Kind, type ValueNode } from 'graphql';
import { parseCurrency } from '../decimal.js';
import { EngineError, quote } from '../errors.js';
import { parseUuid } from '../ids.js';
import { checkJsonDepth, setOwn } from '../json.js';
import { isDate, isTimestamp } from '../ledger/params.js';

function stringScalar(name: string, description: string, parse: (value: unknown) => string): GraphQLScalarType {
  return new GraphQLScalarType({
    name,
    description,
    serialize: (value) => value,
    parseValue: parse,
    parseLiteral(ast: ValueNode) {
      if (ast.kind !== Kind.STRING) {
        throw new EngineError(
          'BAD_REQUEST',
          `${name} must be a string literal, got ${ast.kind === Kind.INT || ast.kind === Kind.FLOAT ? ast.value : ast.kind}`,
          {
            hint: name === 'Decimal' ? 'Write amounts as strings, e.g. "10.25".' : `Quote the ${name} value.`,
          },
        );
      }
      return parse(ast.value);
    },
  });
}

const DECIMAL = /^[+-]?\d+(\.\d+)?$/;

export const scalars = {
  UUID: stringScalar('UUID', 'A UUID', (v) => parseUuid(v, 'UUID')),
  Decimal: stringScalar('Decimal', 'An exact decimal string', (v) => {
    if (typeof v !== 'string' || !DECIMAL.test(v)) {
      throw new EngineError('BAD_REQUEST', `Decimal ${quote(v)} is not a decimal string`, {
        hint: 'Send decimals as strings, e.g. "10.25".',
      });
    }
    return v;
  }),
  Date: stringScalar('Date', 'YYYY-MM-DD', (v) => {
    if (!isDate(v)) throw new EngineError('BAD_REQUEST', `Date ${quote(v)} is not a date`, { hint: 'Use YYYY-MM-DD.' });
    return v;
  }),
  Timestamp: stringScalar('Timestamp', 'RFC 3339', (v) => {
    if (!isTimestamp(v)) {
      throw new EngineError('BAD_REQUEST', `Timestamp ${quote(v)} is not an RFC 3339 timestamp`, {
        hint: 'Use e.g. "2026-01-31T12:00:00Z".',
      });
    }
    return new Date(v).toISOString();
  }),
  CurrencyCode: stringScalar('CurrencyCode', 'Currency code', (v) => parseCurrency(v, 'CurrencyCode')),
  Expression: expressionScalar(),
};

/**
 * CEL text. A number or boolean literal is taken as its text (`default: 0` is the expression "0"),
 * as the reference ledger takes it; anything else must be a string.
 */
function expressionScalar(): GraphQLScalarType {
  const parse = (v: unknown): string => {
    if (typeof v === 'string') return v;
    if (typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v))) return String(v);
    throw new EngineError('BAD_REQUEST', `Expression must be a string, got ${quote(v)}`, {
      hint: 'Quote the Expression value.',
    });
  };
  return new GraphQLScalarType({
    name: 'Expression',
    description: 'CEL',
    serialize: (value) => value,
    parseValue: parse,
    parseLiteral(ast: ValueNode) {
      if (ast.kind === Kind.STRING || ast.kind === Kind.INT || ast.kind === Kind.FLOAT) return ast.value;
      if (ast.kind === Kind.BOOLEAN) return String(ast.value);
      throw new EngineError('BAD_REQUEST', `Expression must be a string literal, got ${ast.kind}`, {
        hint: 'Quote the Expression value.',
      });
    },
  });
}

/** The JSON scalar, bounded in depth (a deep value would overflow recursive code further on). */
export function jsonScalar(depthMax: number): GraphQLScalarType {
  return new GraphQLScalarType({
    name: 'JSON',
    description: 'Any JSON value',
    serialize: (value) => value,
    parseValue: (value) => {
      checkJsonDepth(value, depthMax, 'a JSON value');
      return value;
    },
    parseLiteral: (ast, variables) => {
      const value = literalToJson(ast, variables);
      checkJsonDepth(value, depthMax, 'a JSON value');
      return value;
    },
  });
}

function literalToJson(ast: ValueNode, variables: Record<string, unknown> | null | undefined): unknown {
  switch (ast.kind) {
    case Kind.STRING:
    case Kind.BOOLEAN:
      return ast.value;
    case Kind.INT:
    case Kind.FLOAT: {
      const n = Number(ast.value);
      // An integer literal too large for a double would silently change: keep its digits.
      return Number.isSafeInteger(n) || ast.kind === Kind.FLOAT ? n : ast.value;
    }
    case Kind.NULL:
      return null;
    case Kind.ENUM:
      return ast.value;
    case Kind.LIST:
      return ast.values.map((v) => literalToJson(v, variables));
    case Kind.OBJECT: {
      const out: Record<string, unknown> = {};
      for (const field of ast.fields) setOwn(out, field.name.value, literalToJson(field.value, variables));
      return out;
    }
    case Kind.VARIABLE:
      return variables?.[ast.name.value];
  }
}
