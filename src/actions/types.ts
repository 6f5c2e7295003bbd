import type { Cel } from '../cel/cel.js';
import type { Clock } from '../clock.js';
import type { Limits } from '../limits.js';
import type { Policy, PolicyAction, PolicyEffect } from '../policy/policy.js';
import type { RecordCache } from '../storage/record-cache.js';
import type { ActionStatements } from '../storage/statements/actions.js';
import type { SchemaCache } from './schemas.js';

/*
 * What an action is: its kinds, a stored version's document, what a caller sends to make one
 * (ActionInput), the names and bounds a version is checked against, and what every actions module
 * is handed (ActionDeps). Types and constants only: the other actions modules import this one.
 */

export type { Policy, PolicyAction, PolicyEffect };

export type ActionKind = 'tool' | 'graphql' | 'model' | 'agent' | 'http' | 'mcp';

/**
 * Kinds that call over the network (a model; an operator's integration; an operator's MCP server):
 * they run only in the worker, never inside a transaction.
 */
export function runsOutsideTransactions(kind: ActionKind): boolean {
  return kind === 'model' || kind === 'agent' || kind === 'http' || kind === 'mcp';
}

/**
 * Kinds that reach outside Tally (DESIGN §11): a program that calls one starts it, to run after
 * its transaction commits (an outbox), rather than being refused as for a model.
 */
export function runsAfterCommit(kind: ActionKind): boolean {
  return kind === 'http' || kind === 'mcp';
}

/** The kind of execution a call of a version of `kind` is recorded as. */
export function executionKindOf(kind: ActionKind): 'TOOL' | 'GRAPHQL' | 'MODEL' | 'AGENT' | 'HTTP' | 'MCP' {
  switch (kind) {
    case 'graphql':
      return 'GRAPHQL';
    case 'model':
      return 'MODEL';
    case 'agent':
      return 'AGENT';
    case 'http':
      return 'HTTP';
    case 'mcp':
      return 'MCP';
    default:
      return 'TOOL';
  }
}

/** The action kind of an execution kind (CEL and GRAPHQL calls, and tools, are all in-transaction). */
export function actionKindOfExecution(kind: string): ActionKind {
  return kind === 'AGENT'
    ? 'agent'
    : kind === 'MODEL'
      ? 'model'
      : kind === 'HTTP'
        ? 'http'
        : kind === 'MCP'
          ? 'mcp'
          : 'tool';
}
export type VersionStatus = 'ACTIVE' | 'LOCKED' | 'DRAFT';

export interface ToolReference {
  name: string;
  version: number | null;
  /** Top-level input properties fixed by CEL over event, tool.input and execution.input (an agent's: session too). */
  input: Record<string, string> | null;
  /** An agent's reference: a person approves each call (when `when`, CEL over `input`, is true) before it runs. */
  approval?: { when: string | null; timeoutMs: number | null } | null;
}

/** A skill an agent declares: pinned, or the latest version when a run starts. */
export interface SkillReference {
  name: string;
  version: number | null;
}

export interface ExecutionSettings {
  maxAttempts: number;
  backoff: { initialMs: number; multiplier: number; maxMs: number };
  timeoutMs: number | null;
  /** CEL over `error` {code, message, attempt}: retry a failed attempt only when true (null: every retryable failure). Absent in older versions. */
  retryIf?: string | null;
  /** Keep a read-only tool's result this long for the same input (null: no caching). Absent in older versions. */
  cacheTtlMs?: number | null;
}

export interface ToolDefinition {
  name: string;
  /** A short human name (absent in older versions: null). */
  title?: string | null;
  description: string;
  /** Other names the tool answers to, unique across all actions (absent in older versions: none). */
  aliases?: string[];
  /** Free JSON object, returned as it is (absent in older versions: null). */
  metadata?: Record<string, unknown> | null;
  inputSchema: Record<string, unknown>;
  outputSchema: Record<string, unknown> | null;
  /** An agent's: the schema of its sessions' input; an agent with one runs only in sessions. */
  sessionSchema?: Record<string, unknown> | null;
  /**
   * Not offered outside: MCP clients neither list nor call it, and no agent may reference it (so
   * no model is offered it). Tools that declare it, hooks and triggers still call it. Stored only
   * when true (absent in older versions: false).
   */
  internal?: boolean;
}

/** One immutable version of an action, as stored. */
export interface ActionVersionDocument {
  actionId: string;
  name: string;
  version: number;
  kind: ActionKind;
  config: Record<string, unknown>;
  tool: ToolDefinition;
  tools: ToolReference[];
  /** An agent's skills (absent in versions made before skills). */
  skills?: SkillReference[];
  /** Tools run before a call (may change its input, or refuse it) and after it (may change its output). */
  hooks?: { before?: ToolReference | null; after?: ToolReference | null };
  policies: Policy[];
  execution: ExecutionSettings;
  created: string;
}

export interface ActionVersion extends ActionVersionDocument {
  status: VersionStatus;
  modified: string;
}

export interface ActionInput {
  name?: string | null;
  kind?: string | null;
  config?: unknown;
  tool?: {
    name?: string | null;
    title?: string | null;
    description?: string | null;
    aliases?: string[] | null;
    metadata?: unknown;
    inputSchema?: unknown;
    outputSchema?: unknown;
    sessionSchema?: unknown;
    internal?: boolean | null;
  } | null;
  tools?: Array<{
    name: string;
    version?: number | null;
    input?: unknown;
    approval?: { when?: string | null; timeoutMs?: number | null } | null;
  }> | null;
  skills?: Array<{ name: string; version?: number | null }> | null;
  hooks?: {
    before?: { name: string; version?: number | null } | null;
    after?: { name: string; version?: number | null } | null;
  } | null;
  policies?: Array<{ effect: PolicyEffect; actions: PolicyAction[]; resources: string[]; assertions?: unknown }> | null;
  execution?: {
    maxAttempts?: number | null;
    backoff?: { initialMs?: number | null; multiplier?: number | null; maxMs?: number | null } | null;
    timeoutMs?: number | null;
    retryIf?: string | null;
    cacheTtlMs?: number | null;
  } | null;
  draft?: boolean | null;
}

/** Names of the native tools every tenant has (a program's graphql() and cel()). */
export const NATIVE_TOOLS = ['graphql', 'cel'] as const;
/** The agent runner's built-in tool that loads a declared skill's body (offered under this name in src/agents/agent-loop.ts). */
export const LOAD_SKILL_TOOL = 'load_skill';
/**
 * Tool names the engine keeps for its own tools: no action's name, tool.name or alias may be one
 * (an action called load_skill would stand in for an agent's skill loader).
 */
export const RESERVED_TOOL_NAMES: readonly string[] = [...NATIVE_TOOLS, LOAD_SKILL_TOOL];
/** The longest execution.backoff.initialMs and maxMs: one day. */
export const BACKOFF_MS_MAX = 86_400_000;

export const DEFAULT_EXECUTION: ExecutionSettings = {
  maxAttempts: 3,
  backoff: { initialMs: 1000, multiplier: 2, maxMs: 60_000 },
  timeoutMs: null,
  retryIf: null,
  cacheTtlMs: null,
};

export interface ActionDeps {
  st: ActionStatements;
  /**
   * Parsed version documents by actionId@version, with the stored text they were parsed from: a
   * version number can stand for another document after a rollback (and another connection's
   * commit), so a parse is reused only for the same text.
   */
  documents: Map<string, { text: string; document: ActionVersionDocument }>;
  /** Whole versions (document and status) by actionId@version, dropped when the epoch moves. */
  versions: RecordCache<ActionVersion>;
  schemas: SchemaCache;
  cel: Cel;
  clock: Clock;
  limits: Readonly<Limits>;
  /**
   * Throws unless a model or agent config is one the operator's providers can run (the composition
   * root hands in src/agents/config.ts's checkModelConfig: actions never import agents).
   */
  checkModelConfig(kind: 'model' | 'agent', config: Record<string, unknown>): void;
  /**
   * Throws unless an http or mcp config names an integration or MCP server this process has, and
   * is well formed (the composition root hands in src/integrations' checks).
   */
  checkOutsideConfig(
    kind: 'http' | 'mcp',
    config: Record<string, unknown>,
    tool?: Pick<ToolDefinition, 'description' | 'inputSchema' | 'outputSchema'>,
  ): void;
  /** Throws NOT_FOUND unless the skill (and the pinned version) exists (src/skills). */
  checkSkill(ref: SkillReference, what: string): void;
  /** Compile-checks a program; returns a problem with line and column, or null. */
  checkProgram(fileName: string, source: string): { message: string; line?: number; column?: number } | null;
}

export function versionKey(actionId: string, version: number): string {
  return `${actionId}@${version}`;
}
