import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedModel, type ScriptedModel } from '../../examples/scripted-model/server.mjs';
import { EngineError } from '../../src/errors.js';
import { resolveLimits, type Limits } from '../../src/limits.js';
import {
  AnthropicProvider,
  ModelProviders,
  OpenAiProvider,
  parseProviders,
  redact,
  type ModelFormat,
  type ModelProvider,
  type ModelRequest,
  type ProviderConfig,
} from '../../src/models/index.js';

const KEY = 'sk-test-Zq81secretKEY0042';
const ENV = { TEST_MODEL_KEY: KEY };
const LOOKUP = {
  name: 'lookup',
  description: 'Find an account by id.',
  inputSchema: { type: 'object', properties: { id: { type: 'integer' } }, required: ['id'] },
};

let model: ScriptedModel;

beforeEach(async () => {
  model = await startScriptedModel({ apiKey: KEY });
});
afterEach(async () => {
  await model.close();
});

function config(format: ModelFormat, overrides: Partial<ProviderConfig> = {}): ProviderConfig {
  return {
    name: `test-${format}`,
    format,
    baseUrl: format === 'openai' ? `${model.url}/v1` : model.url,
    models: ['scripted-1'],
    apiKeyEnv: 'TEST_MODEL_KEY',
    timeoutMs: 10_000,
    maxRetries: 0,
    structuredOutput: true,
    ...overrides,
  };
}

function provider(
  format: ModelFormat,
  overrides: Partial<ProviderConfig> = {},
  limits: Partial<Limits> = {},
  env: NodeJS.ProcessEnv = ENV,
): ModelProvider {
  const c = config(format, overrides);
  const l = resolveLimits(limits);
  return format === 'openai' ? new OpenAiProvider(c, l, env) : new AnthropicProvider(c, l, env);
}

function request(overrides: Partial<ModelRequest> = {}): ModelRequest {
  return {
    model: 'scripted-1',
    instructions: 'You are a bookkeeper.',
    messages: [{ role: 'user', text: 'What is in account 7?' }],
    tools: [],
    temperature: null,
    maxTokens: 256,
    responseSchema: null,
    ...overrides,
  };
}

async function failure(promise: Promise<unknown>): Promise<EngineError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(EngineError);
    return error as EngineError;
  }
  throw new Error('expected the call to fail');
}

function expectNoKey(error: EngineError): void {
  expect(error.message).not.toContain(KEY);
  expect(error.hint ?? '').not.toContain(KEY);
  expect(JSON.stringify(error.details ?? null)).not.toContain(KEY);
  expect(JSON.stringify(error.toData())).not.toContain(KEY);
}

/** The text with `\uXXXX` and `%XX` escapes read as the characters they stand for. */
function unescaped(text: string): string {
  return text
    .replace(/\\+u([0-9a-fA-F]{4})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16)))
    .replace(/%([0-9a-fA-F]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

/** No run of 8 or more consecutive characters of the key, plain or escaped, anywhere in the error. */
function expectNoKeyRun(error: EngineError): void {
  expectNoKey(error);
  const seen = JSON.stringify(error.toData());
  for (const text of [seen, unescaped(seen), unescaped(seen).replace(/\\/g, '')]) {
    for (let i = 0; i + 8 <= KEY.length; i++) expect(text).not.toContain(KEY.slice(i, i + 8));
  }
}

// The openai SDK honours retry-after 0; the anthropic SDK ignores a zero wait, so retry-after-ms 1 too.
const retryNow = { 'retry-after': '0', 'retry-after-ms': '1' };

describe.each(['openai', 'anthropic'] as const)('%s provider', (format) => {
  it('round trip with tools: the request is in the wire format, the answer is normalized', async () => {
    model.push({ toolCalls: [{ name: 'lookup', arguments: { id: 7 } }], usage: { inputTokens: 11, outputTokens: 5 } });
    const answer = await provider(format).complete(request({ tools: [LOOKUP], temperature: 0.2 }));

    expect(model.requests).toHaveLength(1);
    const seen = model.requests[0]!;
    expect(seen.format).toBe(format);
    expect(seen.model).toBe('scripted-1');
    expect(seen.system).toBe('You are a bookkeeper.');
    expect(seen.messages).toEqual([{ role: 'user', text: 'What is in account 7?' }]);
    expect(seen.tools).toEqual([LOOKUP]);
    expect(seen.temperature).toBe(0.2);
    expect(seen.maxTokens).toBe(256);
    expect(seen.responseSchema).toBeNull();
    if (format === 'openai') {
      expect(seen.headers.authorization).toBe(`Bearer ${KEY}`);
      expect(seen.body.max_tokens).toBe(256);
    } else {
      expect(seen.headers['x-api-key']).toBe(KEY);
    }

    expect(answer.toolCalls).toHaveLength(1);
    const call = answer.toolCalls[0]!;
    expect(call.name).toBe('lookup');
    expect(call.id).toMatch(/\S/);
    expect(JSON.parse(call.arguments)).toEqual({ id: 7 });
    expect(answer.usage).toEqual({ inputTokens: 11, outputTokens: 5 });
    expect(answer.stopReason).toBe(format === 'openai' ? 'tool_calls' : 'tool_use');
    expect(answer.httpAttempts).toBe(1);
    expect(answer.latencyMs).toBeGreaterThan(0);
    expect(answer.model).toBe('scripted-1');
  });

  it('a plain text answer, without instructions or temperature', async () => {
    model.push({ text: 'Account 7 holds 12.50 EUR.' });
    const answer = await provider(format).complete(request({ instructions: null }));
    expect(answer.text).toBe('Account 7 holds 12.50 EUR.');
    expect(answer.toolCalls).toEqual([]);
    expect(answer.stopReason).toBe(format === 'openai' ? 'stop' : 'end_turn');
    const seen = model.requests[0]!;
    expect(seen.system).toBeNull();
    expect(seen.temperature).toBeNull();
    expect('temperature' in seen.body).toBe(false);
    expect('tools' in seen.body).toBe(false);
  });

  it('a conversation with assistant tool calls and tool results', async () => {
    model.push({ text: 'done' });
    await provider(format).complete(
      request({
        tools: [LOOKUP],
        messages: [
          { role: 'user', text: 'Look up 7 and 8.' },
          { role: 'user', text: 'Quickly.' },
          {
            role: 'assistant',
            text: 'Looking them up.',
            toolCalls: [
              { id: 'call_a', name: 'lookup', arguments: '{"id":7}' },
              { id: 'call_b', name: 'lookup', arguments: '{"id": 8' },
            ],
          },
          {
            role: 'tool',
            results: [
              { toolCallId: 'call_a', name: 'lookup', content: '{"balance":"12.50"}', isError: false },
              { toolCallId: 'call_b', name: 'lookup', content: '{"error":"arguments are not JSON"}', isError: true },
            ],
          },
          { role: 'assistant', text: null, toolCalls: [{ id: 'call_c', name: 'lookup', arguments: '{"id":8}' }] },
          {
            role: 'tool',
            results: [{ toolCallId: 'call_c', name: 'lookup', content: '{"balance":"3.00"}', isError: false }],
          },
          { role: 'user', text: 'And the total?' },
        ],
      }),
    );
    const seen = model.requests[0]!;
    const body = seen.body;
    if (format === 'openai') {
      expect(body.messages.map((m: { role: string }) => m.role)).toEqual([
        'system',
        'user',
        'user',
        'assistant',
        'tool',
        'tool',
        'assistant',
        'tool',
        'user',
      ]);
      expect(body.messages[3]).toEqual({
        role: 'assistant',
        content: 'Looking them up.',
        tool_calls: [
          { id: 'call_a', type: 'function', function: { name: 'lookup', arguments: '{"id":7}' } },
          { id: 'call_b', type: 'function', function: { name: 'lookup', arguments: '{"id": 8' } },
        ],
      });
      expect(body.messages[4]).toEqual({ role: 'tool', tool_call_id: 'call_a', content: '{"balance":"12.50"}' });
      expect(body.messages[5]).toEqual({
        role: 'tool',
        tool_call_id: 'call_b',
        content: '{"error":"arguments are not JSON"}',
      });
      expect(body.messages[6].content).toBeNull();
      expect(seen.messages).toEqual([
        { role: 'user', text: 'Look up 7 and 8.' },
        { role: 'user', text: 'Quickly.' },
        {
          role: 'assistant',
          text: 'Looking them up.',
          toolCalls: [
            { id: 'call_a', name: 'lookup', arguments: { id: 7 } },
            { id: 'call_b', name: 'lookup', arguments: '{"id": 8' },
          ],
        },
        { role: 'tool', toolCallId: 'call_a', content: '{"balance":"12.50"}', isError: false },
        { role: 'tool', toolCallId: 'call_b', content: '{"error":"arguments are not JSON"}', isError: false },
        { role: 'assistant', text: null, toolCalls: [{ id: 'call_c', name: 'lookup', arguments: { id: 8 } }] },
        { role: 'tool', toolCallId: 'call_c', content: '{"balance":"3.00"}', isError: false },
        { role: 'user', text: 'And the total?' },
      ]);
    } else {
      // Roles alternate: the two user turns are one message, the tool results and the next user
      // text are one user message.
      expect(body.messages.map((m: { role: string }) => m.role)).toEqual([
        'user',
        'assistant',
        'user',
        'assistant',
        'user',
      ]);
      expect(body.system).toBe('You are a bookkeeper.');
      expect(body.messages[0].content).toEqual([
        { type: 'text', text: 'Look up 7 and 8.' },
        { type: 'text', text: 'Quickly.' },
      ]);
      expect(body.messages[1].content).toEqual([
        { type: 'text', text: 'Looking them up.' },
        { type: 'tool_use', id: 'call_a', name: 'lookup', input: { id: 7 } },
        { type: 'tool_use', id: 'call_b', name: 'lookup', input: { _unparsed: '{"id": 8' } },
      ]);
      expect(body.messages[2].content).toEqual([
        { type: 'tool_result', tool_use_id: 'call_a', content: '{"balance":"12.50"}', is_error: false },
        { type: 'tool_result', tool_use_id: 'call_b', content: '{"error":"arguments are not JSON"}', is_error: true },
      ]);
      expect(body.messages[3].content).toEqual([{ type: 'tool_use', id: 'call_c', name: 'lookup', input: { id: 8 } }]);
      expect(body.messages[4].content).toEqual([
        { type: 'tool_result', tool_use_id: 'call_c', content: '{"balance":"3.00"}', is_error: false },
        { type: 'text', text: 'And the total?' },
      ]);
      expect(seen.messages.filter((m) => m.role === 'tool').map((m) => m.role === 'tool' && m.isError)).toEqual([
        false,
        true,
        false,
      ]);
    }
  });

  it('structured output: the schema is sent and the answer comes back as JSON text', async () => {
    const schema = { type: 'object', properties: { total: { type: 'string' } }, required: ['total'] };
    model.push({ json: { total: '15.50' } });
    const answer = await provider(format).complete(request({ responseSchema: { name: 'summary', schema } }));
    const seen = model.requests[0]!;
    expect(seen.responseSchema).toEqual(schema);
    if (format === 'openai') {
      expect(seen.body.response_format).toEqual({
        type: 'json_schema',
        json_schema: { name: 'summary', schema, strict: false },
      });
    } else {
      expect(seen.forcedTool).toBe('respond');
      expect(seen.body.tool_choice).toEqual({ type: 'tool', name: 'respond' });
      expect(seen.tools.map((t) => t.name)).toEqual(['respond']);
    }
    expect(answer.text).not.toBeNull();
    expect(JSON.parse(answer.text!)).toEqual({ total: '15.50' });
    expect(answer.toolCalls).toEqual([]);
  });

  it('structured output is not asked for when the provider lacks it, or when tools are offered', async () => {
    const schema = { type: 'object' };
    model.push({ text: '{}' }, { text: '{}' });
    await provider(format, { structuredOutput: false }).complete(request({ responseSchema: { name: 's', schema } }));
    await provider(format).complete(request({ tools: [LOOKUP], responseSchema: { name: 's', schema } }));
    for (const seen of model.requests) {
      expect(seen.responseSchema).toBeNull();
      expect(seen.forcedTool).toBeNull();
      expect('response_format' in seen.body).toBe(false);
    }
  });

  it('429 twice, then an answer: three HTTP attempts with maxRetries 2', async () => {
    model.push({ status: 429, headers: retryNow }, { status: 429, headers: retryNow }, { text: 'finally' });
    const answer = await provider(format, { maxRetries: 2 }).complete(request());
    expect(answer.text).toBe('finally');
    expect(answer.httpAttempts).toBe(3);
    expect(model.requests).toHaveLength(3);
  });

  it('500 past maxRetries is MODEL_UNAVAILABLE', async () => {
    model.push(
      { status: 500, text: 'the GPUs are on fire', headers: retryNow },
      { status: 500, text: 'the GPUs are on fire', headers: retryNow },
      { text: 'too late' },
    );
    const error = await failure(provider(format, { maxRetries: 1 }).complete(request()));
    expect(error.code).toBe('MODEL_UNAVAILABLE');
    expect(error.retryable).toBe(true);
    expect(error.message).toContain('HTTP 500');
    expect(error.message).toContain('the GPUs are on fire');
    expect(error.message).toContain(`provider test-${format}`);
    expect(error.details).toEqual({ provider: `test-${format}`, model: 'scripted-1', status: 500, attempts: 2 });
    expect(model.requests).toHaveLength(2);
  });

  it('400 is MODEL_ERROR and is not retried', async () => {
    model.push({ status: 400, text: 'max_tokens is too large' }, { text: 'never sent' });
    const error = await failure(provider(format, { maxRetries: 2 }).complete(request()));
    expect(error.code).toBe('MODEL_ERROR');
    expect(error.retryable).toBe(false);
    expect(error.message).toContain('max_tokens is too large');
    expect(error.details).toMatchObject({ status: 400, attempts: 1 });
    expect(model.requests).toHaveLength(1);
  });

  it("the provider's error message is cut to 300 characters", async () => {
    model.push({ status: 400, text: `bad ${'y'.repeat(1000)}` });
    const error = await failure(provider(format).complete(request()));
    expect(error.message.length).toBeLessThan(500);
    expect(error.message).toContain('…');
  });

  it('an answer slower than timeoutMs is TIMEOUT', async () => {
    model.push({ text: 'slow', delayMs: 3000 });
    const started = Date.now();
    const error = await failure(provider(format, { timeoutMs: 200, maxRetries: 0 }).complete(request()));
    expect(error.code).toBe('TIMEOUT');
    expect(error.message).toBe(`provider test-${format} (model scripted-1) did not answer within 200 ms (1 try)`);
    expect(error.details).toEqual({ provider: `test-${format}`, model: 'scripted-1', attempts: 1 });
    expect(Date.now() - started).toBeLessThan(2500);
  });

  it('an answer larger than modelResponseBytesMax is LIMIT_EXCEEDED', async () => {
    model.push({ text: 'x'.repeat(10_000) });
    const error = await failure(provider(format, {}, { modelResponseBytesMax: 2000 }).complete(request()));
    expect(error.code).toBe('LIMIT_EXCEEDED');
    expect(error.message).toContain(`provider test-${format}`);
    expect(error.message).toContain('modelResponseBytesMax (2000 bytes)');
  });

  it('an error answer larger than modelResponseBytesMax is LIMIT_EXCEEDED too, and is not retried', async () => {
    model.push({ status: 500, text: 'z'.repeat(10_000), headers: retryNow });
    const error = await failure(
      provider(format, { maxRetries: 0 }, { modelResponseBytesMax: 2000 }).complete(request()),
    );
    expect(error.code).toBe('LIMIT_EXCEEDED');
    model.push({ text: 'y'.repeat(10_000) });
    const again = await failure(
      provider(format, { maxRetries: 3 }, { modelResponseBytesMax: 2000 }).complete(request()),
    );
    expect(again.code).toBe('LIMIT_EXCEEDED');
    expect(model.requests).toHaveLength(2);
  });

  it('a server that echoes the key: the key appears nowhere in the error', async () => {
    model.push({ status: 400, text: `invalid request from key ${KEY} (${KEY})` });
    const refused = await failure(provider(format).complete(request()));
    expect(refused.code).toBe('MODEL_ERROR');
    expect(refused.message).toContain('[redacted]');
    expectNoKey(refused);

    model.push({ status: 503, text: `overloaded; your key ${KEY}`, headers: retryNow });
    const unavailable = await failure(provider(format).complete(request()));
    expect(unavailable.code).toBe('MODEL_UNAVAILABLE');
    expectNoKey(unavailable);

    model.push({
      status: 502,
      rawBody: `<html>bad gateway for ${KEY}</html>`,
      headers: { 'content-type': 'text/html' },
    });
    const raw = await failure(provider(format).complete(request()));
    expect(raw.code).toBe('MODEL_UNAVAILABLE');
    expect(raw.message).toContain('bad gateway for [redacted]');
    expectNoKey(raw);

    model.push({ status: 401, rawBody: JSON.stringify({ error: { message: `key ${JSON.stringify(KEY)} revoked` } }) });
    const revoked = await failure(provider(format).complete(request()));
    expect(revoked.code).toBe('MODEL_ERROR');
    expectNoKey(revoked);
  });

  // Was a finding (H05, low): the provider's text was cut to 300 characters before the key was
  // redacted, so a key that straddled the cut was never matched whole and its first characters
  // reached the execution's error.
  it('a key that straddles the 300-character cut leaves no run of 8 of its characters', async () => {
    for (const at of [280, 290, 295, 299]) {
      model.push({
        status: 401,
        rawBody: JSON.stringify({ error: { message: `${'n'.repeat(at)}${KEY} and ${'m'.repeat(300)}` } }),
      });
      const refused = await failure(provider(format).complete(request()));
      expect(refused.code).toBe('MODEL_ERROR');
      expect(refused.message).toContain('…');
      expectNoKeyRun(refused);
    }
  });

  it('an echoed key is redacted in every encoding, and so is a fragment of it', async () => {
    const unicode = [...KEY].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
    const texts = [
      `json ${JSON.stringify(JSON.stringify({ key: KEY }))}`,
      `unicode "${unicode}"`,
      `percent ${encodeURIComponent(KEY).replace(/-/g, '%2D')}`,
      `fragment ${KEY.slice(3, 15)} end`,
    ];
    for (const text of texts) {
      model.push({
        status: 400,
        rawBody: `{"error":{"message":${JSON.stringify(text)}}}`,
        headers: { 'content-type': 'application/json' },
      });
      const refused = await failure(provider(format).complete(request()));
      expect(refused.message).toContain('[redacted]');
      expectNoKeyRun(refused);
    }
  });

  it('an answer outside the wire format is MODEL_ERROR', async () => {
    model.push({ rawBody: format === 'openai' ? '{"id":"x","choices":[]}' : '{"id":"x","content":"nope"}' });
    const error = await failure(provider(format).complete(request()));
    expect(error.code).toBe('MODEL_ERROR');
    expect(error.message).toMatch(format === 'openai' ? /no choices/ : /no content/);
    model.push({ rawBody: 'not json at all', headers: { 'content-type': 'application/json' } });
    const garbled = await failure(provider(format).complete(request()));
    expect(garbled.code).toBe('MODEL_ERROR');
  });

  it('apiKeyEnv unset: MODEL_ERROR naming the variable, and no request is sent', async () => {
    const p = provider(format, { apiKeyEnv: 'NOT_SET_MODEL_KEY' }, {}, {});
    const error = await failure(p.complete(request()));
    expect(error.code).toBe('MODEL_ERROR');
    expect(error.message).toBe(`provider test-${format}: the environment variable NOT_SET_MODEL_KEY is not set`);
    expect(model.requests).toHaveLength(0);
  });

  it('a provider without apiKeyEnv sends a placeholder key', async () => {
    const open = await startScriptedModel({ script: [{ text: 'hi' }] });
    try {
      const c = { ...config(format, { apiKeyEnv: null }), baseUrl: format === 'openai' ? `${open.url}/v1` : open.url };
      const p =
        format === 'openai'
          ? new OpenAiProvider(c, resolveLimits(), {})
          : new AnthropicProvider(c, resolveLimits(), {});
      const answer = await p.complete(request());
      expect(answer.text).toBe('hi');
      const headers = open.requests[0]!.headers;
      expect(format === 'openai' ? headers.authorization : headers['x-api-key']).toBe(
        format === 'openai' ? 'Bearer none' : 'none',
      );
    } finally {
      await open.close();
    }
  });

  it("an aborted call throws the signal's reason", async () => {
    model.push({ text: 'slow', delayMs: 3000 });
    const controller = new AbortController();
    const reason = new EngineError('TIMEOUT', 'the run ran past its deadline');
    setTimeout(() => controller.abort(reason), 100);
    await expect(provider(format).complete(request({ signal: controller.signal }))).rejects.toBe(reason);

    const plain = new AbortController();
    plain.abort();
    const error = await failure(provider(format).complete(request({ signal: plain.signal })));
    expect(error.code).toBe('TIMEOUT');
    expect(error.message).toBe(`the call to provider test-${format} (model scripted-1) was cancelled`);
    expect(error.details).toEqual({ provider: `test-${format}`, model: 'scripted-1', attempts: 0 });

    model.push({ text: 'slow', delayMs: 3000 });
    const timedOut = await failure(provider(format).complete(request({ signal: AbortSignal.timeout(100) })));
    expect(timedOut.code).toBe('TIMEOUT');
    expect(timedOut.details).toMatchObject({ attempts: 1 });
  });

  it('a connection refused is MODEL_UNAVAILABLE', async () => {
    const gone = await startScriptedModel();
    const url = gone.url;
    await gone.close();
    const c = { ...config(format), baseUrl: format === 'openai' ? `${url}/v1` : url };
    const p =
      format === 'openai'
        ? new OpenAiProvider(c, resolveLimits(), ENV)
        : new AnthropicProvider(c, resolveLimits(), ENV);
    const error = await failure(p.complete(request()));
    expect(error.code).toBe('MODEL_UNAVAILABLE');
    expect(error.details).toMatchObject({ attempts: 1 });
  });
});

describe('parseProviders', () => {
  const good = { name: 'local-llama', format: 'openai', baseUrl: 'http://localhost:11434/v1', models: ['llama3.2'] };

  it('fills the defaults', () => {
    expect(
      parseProviders([
        good,
        {
          name: 'claude_main',
          format: 'anthropic',
          baseUrl: 'https://api.anthropic.com',
          models: ['claude-x'],
          apiKeyEnv: 'ANTHROPIC_API_KEY',
          timeoutMs: 120_000,
          maxRetries: 0,
          structuredOutput: false,
        },
      ]),
    ).toEqual([
      { ...good, apiKeyEnv: null, timeoutMs: 60_000, maxRetries: 2, structuredOutput: true },
      {
        name: 'claude_main',
        format: 'anthropic',
        baseUrl: 'https://api.anthropic.com',
        models: ['claude-x'],
        apiKeyEnv: 'ANTHROPIC_API_KEY',
        timeoutMs: 120_000,
        maxRetries: 0,
        structuredOutput: false,
      },
    ]);
    expect(parseProviders(undefined)).toEqual([]);
    expect(parseProviders([{ ...good, apiKeyEnv: null }])[0]!.apiKeyEnv).toBeNull();
  });

  const cases: [string, unknown, RegExp][] = [
    ['not an array', { openai: good }, /^providers .* is not an array/],
    ['an entry that is not an object', [good, 'openai'], /^providers\[1\] "openai" is not an object/],
    [
      'a name in camelCase',
      [{ ...good, name: 'LocalLlama' }],
      /^providers\[0\]\.name "LocalLlama" is not a provider name/,
    ],
    ['a missing name', [{ ...good, name: undefined }], /^providers\[0\]\.name/],
    ['a duplicate name', [good, good], /^providers\[1\]\.name "local-llama" is already used/],
    [
      'an unknown format',
      [{ ...good, format: 'gemini' }],
      /^providers\[0\]\.format "gemini" is not one of "openai", "anthropic"/,
    ],
    [
      'an ftp baseUrl',
      [good, { ...good, name: 'b', baseUrl: 'ftp://x' }],
      /^providers\[1\]\.baseUrl "ftp:\/\/x" is not an http\(s\) URL/,
    ],
    ['a baseUrl that is no URL', [{ ...good, baseUrl: 'localhost:11434' }], /^providers\[0\]\.baseUrl/],
    [
      'a baseUrl with credentials',
      [{ ...good, baseUrl: 'https://user:pw@example.com/v1' }],
      /^providers\[0\]\.baseUrl has credentials/,
    ],
    ['no models', [{ ...good, models: [] }], /^providers\[0\]\.models \[\] is not a non-empty array/],
    ['models not an array', [{ ...good, models: 'llama' }], /^providers\[0\]\.models/],
    [
      'an empty model name',
      [{ ...good, models: ['a', ''] }],
      /^providers\[0\]\.models\[1\] "" is not a non-empty string/,
    ],
    [
      'a lower-case apiKeyEnv',
      [{ ...good, apiKeyEnv: 'openai_key' }],
      /^providers\[0\]\.apiKeyEnv "openai_key" is not an environment variable name/,
    ],
    [
      'a number apiKeyEnv',
      [{ ...good, apiKeyEnv: 42 }],
      /^providers\[0\]\.apiKeyEnv is not an environment variable name/,
    ],
    ['timeoutMs 0', [{ ...good, timeoutMs: 0 }], /^providers\[0\]\.timeoutMs 0 is not an integer from 1 to 600000/],
    ['timeoutMs too large', [{ ...good, timeoutMs: 600_001 }], /^providers\[0\]\.timeoutMs 600001/],
    ['timeoutMs not an integer', [{ ...good, timeoutMs: 1.5 }], /^providers\[0\]\.timeoutMs 1.5/],
    ['maxRetries 11', [{ ...good, maxRetries: 11 }], /^providers\[0\]\.maxRetries 11 is not an integer from 0 to 10/],
    ['maxRetries negative', [{ ...good, maxRetries: -1 }], /^providers\[0\]\.maxRetries -1/],
    [
      'structuredOutput a string',
      [{ ...good, structuredOutput: 'yes' }],
      /^providers\[0\]\.structuredOutput "yes" is not a boolean/,
    ],
    ['an unknown field', [{ ...good, timeout: 5 }], /^providers\[0\]\.timeout is not a provider field/],
  ];
  it.each(cases)('refuses %s', (_what, value, message) => {
    let caught: unknown;
    try {
      parseProviders(value);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(EngineError);
    const error = caught as EngineError;
    expect(error.code).toBe('BAD_REQUEST');
    expect(error.message).toMatch(message);
    expect(error.hint).toBeTruthy();
  });

  it('refuses a literal API key, and says to name the environment variable instead', () => {
    for (const field of ['apiKey', 'api_key', 'key', 'token']) {
      let caught: unknown;
      try {
        parseProviders([{ ...good, [field]: KEY }]);
      } catch (error) {
        caught = error;
      }
      const error = caught as EngineError;
      expect(error).toBeInstanceOf(EngineError);
      expect(error.code).toBe('BAD_REQUEST');
      expect(error.message).toContain(`providers[0].${field}`);
      expect(error.message).toContain('never written in configuration');
      expect(error.hint).toContain('apiKeyEnv');
      expectNoKey(error);
    }
    // A key put in apiKeyEnv is not echoed either.
    let caught: unknown;
    try {
      parseProviders([{ ...good, apiKeyEnv: KEY }]);
    } catch (error) {
      caught = error;
    }
    expect((caught as EngineError).code).toBe('BAD_REQUEST');
    expectNoKey(caught as EngineError);
  });
});

describe('ModelProviders', () => {
  const configs = parseProviders([
    { name: 'local', format: 'openai', baseUrl: 'http://127.0.0.1:1/v1', models: ['llama3.2', 'qwen'] },
    {
      name: 'claude',
      format: 'anthropic',
      baseUrl: 'http://127.0.0.1:1',
      models: ['claude-x'],
      apiKeyEnv: 'UNSET_KEY_VAR',
    },
  ]);
  let providers: ModelProviders;
  beforeAll(async () => {
    providers = await ModelProviders.create(configs, resolveLimits(), {});
  });

  it('lists, gets and checks providers and models', () => {
    expect(providers.names()).toEqual(['local', 'claude']);
    expect(providers.has('local')).toBe(true);
    expect(providers.has('nope')).toBe(false);
    expect(providers.get('local')).toBeInstanceOf(OpenAiProvider);
    expect(providers.get('claude')).toBeInstanceOf(AnthropicProvider);
    expect(providers.get('claude').config.apiKeyEnv).toBe('UNSET_KEY_VAR');
    expect(() => providers.checkModel('local', 'qwen')).not.toThrow();
  });

  it('an unknown provider is NOT_FOUND listing the configured names', () => {
    let caught: unknown;
    try {
      providers.get('openai');
    } catch (error) {
      caught = error;
    }
    const error = caught as EngineError;
    expect(error.code).toBe('NOT_FOUND');
    expect(error.message).toContain('"openai"');
    expect(error.hint).toContain('"local", "claude"');
    expect(() => providers.checkModel('openai', 'x')).toThrow(/no model provider named "openai"/);
  });

  it('a model the provider does not offer is BAD_REQUEST naming its models', () => {
    let caught: unknown;
    try {
      providers.checkModel('local', 'gpt-5');
    } catch (error) {
      caught = error;
    }
    const error = caught as EngineError;
    expect(error.code).toBe('BAD_REQUEST');
    expect(error.message).toBe('model "gpt-5" is not offered by provider "local"');
    expect(error.hint).toContain('"llama3.2", "qwen"');
  });

  it('a provider whose key variable is unset is listed, and its calls fail naming the variable', async () => {
    const error = await failure(providers.get('claude').complete(request({ model: 'claude-x' })));
    expect(error.code).toBe('MODEL_ERROR');
    expect(error.message).toBe('provider claude: the environment variable UNSET_KEY_VAR is not set');
  });
});

describe('redact', () => {
  const key = 'sk-"odd\\key/ü-0123456789';
  it('takes out the key plain, JSON-escaped, \\u-escaped, percent-encoded, and any run of 8 of its characters', () => {
    const forms = [
      key,
      JSON.stringify(key).slice(1, -1),
      JSON.stringify(JSON.stringify(key)).slice(3, -3),
      [...key].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join(''),
      encodeURIComponent(key),
      key.slice(5, 13),
      key.slice(-9),
    ];
    for (const form of forms) {
      const out = redact(`before ${form} after`, key);
      expect(out).toBe('before [redacted] after');
    }
  });
  it('leaves a run of fewer than 8 characters, and text without the key, as it is', () => {
    expect(redact(`a ${key.slice(0, 7)} b`, key)).toBe(`a ${key.slice(0, 7)} b`);
    expect(redact('nothing \\u0041 here %41', key)).toBe('nothing \\u0041 here %41');
    expect(redact('x', null)).toBe('x');
  });
  it('a key shorter than 8 characters is taken out whole', () => {
    expect(redact('k=abc12 and abc1', 'abc12')).toBe('k=[redacted] and abc1');
  });
});
