import { EngineError, quote, limitExceeded } from '../errors.js';
import { type Limits, MAX_TOKENS_MAX, TEXT_BYTES_MAX } from '../limits.js';
import type { ModelProviders } from '../models/providers.js';

/** `config` of a `model` action: one model call. */
export interface ModelConfig {
  provider: string;
  model: string;
  /** Tried in turn, after provider and model, when the one before answers MODEL_UNAVAILABLE (and only then). */
  fallback: ModelChoice[];
  /** The system prompt. */
  instructions: string | null;
  /**
   * The user message, with `{{path}}` replaced by the input's value at that dotted path (strings as
   * they are, anything else as JSON). Left out: the input as JSON.
   */
  prompt: string | null;
  temperature: number | null;
  maxTokens: number;
}

/** A provider and one of its models. */
export interface ModelChoice {
  provider: string;
  model: string;
}

/** `config` of an `agent` action: a loop of model turns and the tool calls they ask for. */
export interface AgentConfig extends ModelConfig {
  maxTurns: number;
  maxToolCalls: number;
  /** The whole run, from when it was started (queue time and retries included). */
  runTimeoutMs: number;
}

export const MODEL_DEFAULTS = { maxTokens: 1024 } as const;
export const AGENT_DEFAULTS = { maxTurns: 8, maxToolCalls: 16, runTimeoutMs: 120_000 } as const;

const MODEL_FIELDS = ['provider', 'model', 'fallback', 'instructions', 'prompt', 'temperature', 'maxTokens'];
const AGENT_FIELDS = [...MODEL_FIELDS, 'maxTurns', 'maxToolCalls', 'runTimeoutMs'];

/**
 * Check a model or agent config when a version is made: known fields only, the provider and
 * model configured by the operator (a version naming another is refused now, not at its first run).
 * Actions call it as ActionDeps.checkModelConfig, wired in src/engine/domain.ts: actions never import agents.
 */
export function checkModelConfig(
  kind: 'model' | 'agent',
  config: Record<string, unknown>,
  providers: ModelProviders | null,
  limits: Readonly<Limits>,
): ModelConfig | AgentConfig {
  const fields = kind === 'agent' ? AGENT_FIELDS : MODEL_FIELDS;
  for (const key of Object.keys(config)) {
    if (!fields.includes(key)) {
      throw new EngineError('BAD_REQUEST', `config.${key} is not a field of a ${kind} config`, {
        hint:
          key === 'apiKey' || key === 'baseUrl' || key === 'key'
            ? 'Providers, their URLs and keys are configured by the operator (the server configuration’s providers block), never in an action.'
            : `A ${kind} config has: ${fields.join(', ')}.`,
      });
    }
  }
  const provider = text(config.provider, 'provider', true)!;
  // An engine with no providers at all (a deploy straight into a database file, say) cannot check
  // the names: it takes the version, and a run fails with MODEL_ERROR until the server has them.
  if (!providers) return modelConfig(kind, config, limits);
  if (!providers.has(provider)) {
    throw new EngineError(
      'BAD_REQUEST',
      `config.provider ${quote(provider)} is not a configured provider; configured: ${providers.names().join(', ')}`,
      {
        hint: 'Name one of the providers in the server configuration.',
      },
    );
  }
  const model = text(config.model, 'model', true)!;
  providers.checkModel(provider, model);
  const checked = modelConfig(kind, config, limits);
  for (const [i, choice] of checked.fallback.entries()) {
    if (!providers.has(choice.provider)) {
      throw new EngineError(
        'BAD_REQUEST',
        `config.fallback[${i}].provider ${quote(choice.provider)} is not a configured provider; configured: ${providers.names().join(', ')}`,
        { hint: 'Name one of the providers in the server configuration.' },
      );
    }
    providers.checkModel(choice.provider, choice.model);
  }
  return checked;
}

/**
 * A stored model or agent config with its defaults filled in. A version stores the config as it
 * was written (so a deploy of the same file finds it unchanged); runs read it through this.
 */
export function modelConfig(
  kind: 'model' | 'agent',
  config: Record<string, unknown>,
  limits: Readonly<Limits>,
): ModelConfig | AgentConfig {
  const provider = text(config.provider, 'provider', true)!;
  const model = text(config.model, 'model', true)!;
  const temperature = config.temperature ?? null;
  if (temperature !== null && (typeof temperature !== 'number' || !(temperature >= 0 && temperature <= 2))) {
    throw new EngineError('BAD_REQUEST', `config.temperature must be a number from 0 to 2, got ${quote(temperature)}`);
  }
  const base: ModelConfig = {
    provider,
    model,
    fallback: fallbackOf(config.fallback, { provider, model }, limits),
    instructions: text(config.instructions, 'instructions', false),
    prompt: text(config.prompt, 'prompt', false),
    temperature,
    maxTokens: integer(
      config.maxTokens,
      'maxTokens',
      MODEL_DEFAULTS.maxTokens,
      MAX_TOKENS_MAX,
      'the largest answer a model may give',
    ),
  };
  if (base.prompt !== null) checkTemplate(base.prompt);
  if (kind === 'model') return base;
  return {
    ...base,
    maxTurns: integer(config.maxTurns, 'maxTurns', AGENT_DEFAULTS.maxTurns, limits.agentTurnsMax, 'agentTurnsMax'),
    maxToolCalls: integer(
      config.maxToolCalls,
      'maxToolCalls',
      AGENT_DEFAULTS.maxToolCalls,
      limits.agentToolCallsMax,
      'agentToolCallsMax',
    ),
    runTimeoutMs: integer(
      config.runTimeoutMs,
      'runTimeoutMs',
      Math.min(AGENT_DEFAULTS.runTimeoutMs, limits.agentRunMsMax),
      limits.agentRunMsMax,
      'agentRunMsMax',
    ),
  };
}

/**
 * `config.fallback`: [{provider, model}, …], at most modelFallbacksMax, none the same as the
 * provider and model before it in the chain. Whether each is configured is checked at creation
 * (checkModelConfig), like provider and model.
 */
function fallbackOf(value: unknown, first: ModelChoice, limits: Readonly<Limits>): ModelChoice[] {
  if (value === undefined || value === null) return [];
  const hint = 'config.fallback is a list of {provider, model}, tried in turn when the one before is unavailable.';
  if (!Array.isArray(value))
    throw new EngineError('BAD_REQUEST', `config.fallback must be a list, got ${quote(value)}`, { hint });
  if (value.length > limits.modelFallbacksMax)
    throw limitExceeded(
      'modelFallbacksMax',
      limits.modelFallbacksMax,
      value.length,
      `config.fallback has ${value.length} entries; modelFallbacksMax is ${limits.modelFallbacksMax}`,
      { hint: 'Keep the few providers worth trying.' },
    );
  const seen = [first];
  return value.map((entry: unknown, i): ModelChoice => {
    const at = `config.fallback[${i}]`;
    if (entry === null || typeof entry !== 'object' || Array.isArray(entry))
      throw new EngineError('BAD_REQUEST', `${at} must be {provider, model}, got ${quote(entry)}`, { hint });
    const extra = Object.keys(entry).find((k) => k !== 'provider' && k !== 'model');
    if (extra !== undefined)
      throw new EngineError('BAD_REQUEST', `${at}.${extra} is not a field of a fallback`, { hint });
    const { provider, model } = entry as Record<string, unknown>;
    if (typeof provider !== 'string' || provider.trim() === '')
      throw new EngineError('BAD_REQUEST', `${at}.provider must be a string, got ${quote(provider)}`, { hint });
    if (typeof model !== 'string' || model.trim() === '')
      throw new EngineError('BAD_REQUEST', `${at}.model must be a string, got ${quote(model)}`, { hint });
    if (seen.some((c) => c.provider === provider && c.model === model))
      throw new EngineError('BAD_REQUEST', `${at} (${provider}, ${model}) is already in the chain`, {
        hint: 'List each provider and model once: a provider retries its own calls (its maxRetries).',
      });
    seen.push({ provider, model });
    return { provider, model };
  });
}

function text(value: unknown, field: string, required: boolean): string | null {
  if (value === undefined || value === null) {
    if (required)
      throw new EngineError('BAD_REQUEST', `config.${field} is required`, {
        hint: 'A model or agent config names provider and model.',
      });
    return null;
  }
  if (typeof value !== 'string' || (required && value.trim() === ''))
    throw new EngineError('BAD_REQUEST', `config.${field} must be a string, got ${quote(value)}`);
  if (Buffer.byteLength(value) > TEXT_BYTES_MAX)
    throw limitExceeded(
      'textBytesMax',
      TEXT_BYTES_MAX,
      Buffer.byteLength(value),
      `config.${field} is ${Buffer.byteLength(value)} bytes; at most ${TEXT_BYTES_MAX}`,
    );
  return value;
}

function integer(value: unknown, field: string, fallback: number, max: number, bound: string): number {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new EngineError('BAD_REQUEST', `config.${field} must be a positive integer, got ${quote(value)}`);
  }
  if (value > max)
    throw limitExceeded(bound, max, value, `config.${field} ${value} is over ${max} (${bound})`, {
      hint: `Use at most ${max}.`,
    });
  return value;
}

const PLACEHOLDER = /\{\{\s*([^{}]*?)\s*\}\}/g;
const PATH = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$/;

function checkTemplate(template: string): void {
  for (const match of template.matchAll(PLACEHOLDER)) {
    if (!PATH.test(match[1]!)) {
      throw new EngineError(
        'BAD_REQUEST',
        `config.prompt placeholder ${quote(match[0])} is not a dotted path into the input`,
        { hint: 'Write {{field}} or {{field.inner}}.' },
      );
    }
  }
}

/** The user message of a run: the prompt template filled from the input, or the input as JSON. */
export function renderPrompt(template: string | null, input: unknown): string {
  if (template === null) return JSON.stringify(input ?? {});
  return template.replace(PLACEHOLDER, (_, path: string) => {
    let value: unknown = input;
    for (const key of path.split('.')) {
      value =
        value !== null && typeof value === 'object' && !Array.isArray(value) && Object.hasOwn(value, key)
          ? (value as Record<string, unknown>)[key]
          : undefined;
    }
    if (value === undefined) {
      throw new EngineError('INPUT_INVALID', `the prompt reads input.${path}, which the input does not have`, {
        hint: 'Require the field in the input schema, or change the prompt.',
      });
    }
    return typeof value === 'string' ? value : JSON.stringify(value);
  });
}
