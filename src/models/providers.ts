/**
 * The operator's `providers` block: validated once (parseProviders), then one ModelProvider per
 * entry (ModelProviders). API keys are never in configuration: an entry names the environment
 * variable that holds its key (apiKeyEnv), read when the providers are built.
 */
import { EngineError, quote } from '../errors.js';
import type { Limits } from '../limits.js';
import { isRecord } from './http.js';
import type { ModelFormat, ModelProvider, ProviderConfig } from './types.js';

const NAME = /^[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*$/;
const ENV_NAME = /^[A-Z_][A-Z0-9_]*$/;
const FORMATS: readonly ModelFormat[] = ['openai', 'anthropic'];
const FIELDS = new Set([
  'name',
  'format',
  'baseUrl',
  'models',
  'apiKeyEnv',
  'timeoutMs',
  'maxRetries',
  'structuredOutput',
]);
/** Field names that look like a literal key: refused with a hint of their own. */
const KEY_FIELDS = /^(api[-_]?key|key|token|secret|auth(orization)?|bearer|password)$/i;

export const PROVIDER_DEFAULTS = Object.freeze({ timeoutMs: 60_000, maxRetries: 2, structuredOutput: true });
const TIMEOUT_MAX = 600_000;
const RETRIES_MAX = 10;

const HINT =
  'Each provider is {name, format: "openai"|"anthropic", baseUrl, models: [...], apiKeyEnv?, timeoutMs?, maxRetries?, structuredOutput?}.';

function bad(message: string, hint = HINT): EngineError {
  return new EngineError('BAD_REQUEST', message, { hint });
}

function integerIn(path: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw bad(`${path} ${quote(value)} is not an integer from ${min} to ${max}`);
  }
  return value;
}

/** Validate the `providers` block; every problem is a BAD_REQUEST naming the field path. */
export function parseProviders(value: unknown, env: NodeJS.ProcessEnv = process.env): ProviderConfig[] {
  void env; // Keys are read when the providers are built (ModelProviders); an unset variable is not a configuration error.
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw bad(`providers ${quote(value)} is not an array`);
  const seen = new Set<string>();
  return value.map((entry: unknown, index): ProviderConfig => {
    const at = `providers[${index}]`;
    if (!isRecord(entry)) throw bad(`${at} ${quote(entry)} is not an object`);
    for (const field of Object.keys(entry)) {
      if (FIELDS.has(field)) continue;
      if (KEY_FIELDS.test(field)) {
        throw bad(
          `${at}.${field} is not a provider field: API keys are never written in configuration`,
          `Put the key in an environment variable of the server and name that variable in apiKeyEnv, e.g. "apiKeyEnv": "OPENAI_API_KEY".`,
        );
      }
      throw bad(`${at}.${field} is not a provider field (known: ${[...FIELDS].join(', ')})`);
    }

    const name = entry.name;
    if (typeof name !== 'string' || !NAME.test(name) || name.length > 64) {
      throw bad(
        `${at}.name ${quote(name)} is not a provider name (lower_snake or kebab case, e.g. "openai" or "local-llama")`,
      );
    }
    if (seen.has(name))
      throw bad(`${at}.name ${quote(name)} is already used by another provider`, 'Give each provider its own name.');
    seen.add(name);

    const format = entry.format;
    if (typeof format !== 'string' || !(FORMATS as readonly string[]).includes(format)) {
      throw bad(`${at}.format ${quote(format)} is not one of ${FORMATS.map((f) => `"${f}"`).join(', ')}`);
    }

    const baseUrl = entry.baseUrl;
    let url: URL | null = null;
    if (typeof baseUrl === 'string') {
      try {
        url = new URL(baseUrl);
      } catch {
        url = null;
      }
    }
    if (typeof baseUrl !== 'string' || url === null || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
      throw bad(
        `${at}.baseUrl ${quote(baseUrl)} is not an http(s) URL`,
        format === 'openai'
          ? 'Give the URL before /chat/completions, e.g. "https://api.openai.com/v1" or "http://localhost:11434/v1".'
          : 'Give the URL before /v1/messages, e.g. "https://api.anthropic.com".',
      );
    }
    if (url.username !== '' || url.password !== '') {
      throw bad(
        `${at}.baseUrl has credentials in it: API keys are never written in configuration`,
        'Remove the user:password part, put the key in an environment variable and name it in apiKeyEnv.',
      );
    }

    const models = entry.models;
    if (!Array.isArray(models) || models.length === 0) {
      throw bad(`${at}.models ${quote(models)} is not a non-empty array of model names`);
    }
    models.forEach((model: unknown, i) => {
      if (typeof model !== 'string' || model.trim() === '') {
        throw bad(`${at}.models[${i}] ${quote(model)} is not a non-empty string`);
      }
    });

    const apiKeyEnv = entry.apiKeyEnv ?? null;
    if (apiKeyEnv !== null && (typeof apiKeyEnv !== 'string' || !ENV_NAME.test(apiKeyEnv))) {
      // Do not echo a value that may be the key itself.
      const shown =
        typeof apiKeyEnv === 'string' && apiKeyEnv.length <= 64 && /^[A-Za-z0-9_]*$/.test(apiKeyEnv)
          ? `${quote(apiKeyEnv)} `
          : '';
      throw bad(
        `${at}.apiKeyEnv ${shown}is not an environment variable name (upper case letters, digits and _)`,
        'apiKeyEnv names the environment variable that holds the key (e.g. "OPENAI_API_KEY"), never the key itself; use null for servers that need none.',
      );
    }

    const timeoutMs =
      entry.timeoutMs === undefined
        ? PROVIDER_DEFAULTS.timeoutMs
        : integerIn(`${at}.timeoutMs`, entry.timeoutMs, 1, TIMEOUT_MAX);
    const maxRetries =
      entry.maxRetries === undefined
        ? PROVIDER_DEFAULTS.maxRetries
        : integerIn(`${at}.maxRetries`, entry.maxRetries, 0, RETRIES_MAX);
    const structuredOutput = entry.structuredOutput ?? PROVIDER_DEFAULTS.structuredOutput;
    if (typeof structuredOutput !== 'boolean') {
      throw bad(`${at}.structuredOutput ${quote(structuredOutput)} is not a boolean`);
    }

    return {
      name,
      format: format as ModelFormat,
      baseUrl,
      models: [...(models as string[])],
      apiKeyEnv: apiKeyEnv as string | null,
      timeoutMs,
      maxRetries,
      structuredOutput,
    };
  });
}

/** The configured providers, by name. */
export class ModelProviders {
  readonly #providers = new Map<string, ModelProvider>();

  /**
   * The SDK of each wire format is loaded only when a provider uses it (~0.5 s of start-up for
   * both): a process without providers never loads either.
   */
  static async create(
    configs: ProviderConfig[],
    limits: Readonly<Limits>,
    env: NodeJS.ProcessEnv = process.env,
  ): Promise<ModelProviders> {
    const formats = new Set(configs.map((c) => c.format));
    const openai = formats.has('openai') ? (await import('./openai.js')).OpenAiProvider : null;
    const anthropic = formats.has('anthropic') ? (await import('./anthropic.js')).AnthropicProvider : null;
    return new ModelProviders(configs, (config) =>
      config.format === 'openai' ? new openai!(config, limits, env) : new anthropic!(config, limits, env),
    );
  }

  private constructor(configs: ProviderConfig[], make: (config: ProviderConfig) => ModelProvider) {
    for (const config of configs) {
      if (this.#providers.has(config.name))
        throw bad(`provider ${quote(config.name)} is configured twice`, 'Give each provider its own name.');
      this.#providers.set(config.name, make(config));
    }
  }

  get(name: string): ModelProvider {
    const provider = this.#providers.get(name);
    if (provider === undefined) {
      const names = this.names();
      throw new EngineError('NOT_FOUND', `no model provider named ${quote(name)}`, {
        hint:
          names.length === 0
            ? 'No providers are configured: add a `providers` block to the server configuration.'
            : `Configured providers: ${names.map((n) => quote(n)).join(', ')}.`,
        details: { provider: name, configured: names },
      });
    }
    return provider;
  }

  has(name: string): boolean {
    return this.#providers.has(name);
  }

  names(): string[] {
    return [...this.#providers.keys()];
  }

  /** BAD_REQUEST unless the provider exists (else NOT_FOUND) and offers the model. */
  checkModel(provider: string, model: string): void {
    const { config } = this.get(provider);
    if (!config.models.includes(model)) {
      throw new EngineError('BAD_REQUEST', `model ${quote(model)} is not offered by provider ${quote(provider)}`, {
        hint: `Use one of its models: ${config.models.map((m) => quote(m)).join(', ')} (or add the model to the provider's models).`,
        details: { provider, model, models: [...config.models] },
      });
    }
  }
}
