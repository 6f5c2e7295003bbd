import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  lastMessage,
  lastUserText,
  type Rule,
  type ScriptedModel,
  startScriptedModel,
  toolResults,
} from '../../examples/scripted-model/server.mjs';

const TELLER = pathToFileURL(join(import.meta.dirname, '..', '..', 'examples', 'bank', 'model', 'teller.mjs')).href;

async function loadTeller(): Promise<Rule[]> {
  const specifier: string = TELLER; // a variable: the rules module is plain JS, with no declarations
  const mod = (await import(specifier)) as { default: Rule[] };
  return mod.default;
}

type Json = any;

async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: Json = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, headers: res.headers, text, json };
}

const openai = (model: ScriptedModel, body: unknown, headers?: Record<string, string>) =>
  post(`${model.url}/v1/chat/completions`, body, headers);
const anthropic = (model: ScriptedModel, body: unknown, headers?: Record<string, string>) =>
  post(`${model.url}/v1/messages`, body, headers);

const BALANCE_TOOL = {
  name: 'balance',
  description: 'Look up an account by code',
  schema: { type: 'object', properties: { code: { type: 'string' } }, required: ['code'] },
};

describe('scripted model server', () => {
  let model: ScriptedModel;
  beforeAll(async () => {
    model = await startScriptedModel();
  });
  afterAll(async () => {
    await model.close();
  });

  it('listens on an ephemeral port with a url without a trailing slash', () => {
    expect(model.port).toBeGreaterThan(0);
    expect(model.url).toBe(`http://127.0.0.1:${model.port}`);
  });

  it('normalizes an openai request and answers tool_calls in the openai shape', async () => {
    model.setRules([
      (req) =>
        req.format === 'openai' && lastUserText(req) === 'what does bob have?'
          ? {
              toolCalls: [
                { name: 'balance', arguments: { code: 'bob' } },
                { name: 'balance', arguments: '{not json', id: 'mine' },
              ],
            }
          : undefined,
    ]);
    const before = model.requests.length;
    const r = await openai(
      model,
      {
        model: 'gpt-test',
        temperature: 0.2,
        max_completion_tokens: 100,
        messages: [
          { role: 'system', content: 'You are a teller.' },
          { role: 'user', content: 'hi' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              { id: 'c0', type: 'function', function: { name: 'balance', arguments: '{"code":"alice"}' } },
              { id: 'c1', type: 'function', function: { name: 'balance', arguments: 'broken' } },
            ],
          },
          { role: 'tool', tool_call_id: 'c0', content: '{"available":"1.00"}' },
          { role: 'user', content: [{ type: 'text', text: 'what does bob have?' }] },
        ],
        tools: [
          {
            type: 'function',
            function: {
              name: BALANCE_TOOL.name,
              description: BALANCE_TOOL.description,
              parameters: BALANCE_TOOL.schema,
            },
          },
        ],
      },
      { 'X-Trace': 'abc' },
    );
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({
      object: 'chat.completion',
      model: 'gpt-test',
      choices: [
        {
          index: 0,
          finish_reason: 'tool_calls',
          message: {
            role: 'assistant',
            content: null,
            tool_calls: [
              { type: 'function', function: { name: 'balance', arguments: '{"code":"bob"}' } },
              { id: 'mine', type: 'function', function: { name: 'balance', arguments: '{not json' } },
            ],
          },
        },
      ],
    });
    expect(r.json.id).toMatch(/^chatcmpl-/);
    expect(r.json.choices[0].message.tool_calls[0].id).toMatch(/^call_\d+$/);
    expect(typeof r.json.created).toBe('number');
    const u = r.json.usage;
    expect(u.prompt_tokens).toBeGreaterThan(0);
    expect(u.total_tokens).toBe(u.prompt_tokens + u.completion_tokens);

    expect(model.requests.length).toBe(before + 1);
    const req = model.requests.at(-1)!;
    expect(req).toMatchObject({
      format: 'openai',
      model: 'gpt-test',
      system: 'You are a teller.',
      temperature: 0.2,
      maxTokens: 100,
      turn: 2,
      responseSchema: null,
      forcedTool: null,
      tools: [{ name: 'balance', description: BALANCE_TOOL.description, inputSchema: BALANCE_TOOL.schema }],
      messages: [
        { role: 'user', text: 'hi' },
        {
          role: 'assistant',
          text: null,
          toolCalls: [
            { id: 'c0', name: 'balance', arguments: { code: 'alice' } },
            { id: 'c1', name: 'balance', arguments: 'broken' },
          ],
        },
        { role: 'tool', toolCallId: 'c0', content: '{"available":"1.00"}', isError: false },
        { role: 'user', text: 'what does bob have?' },
      ],
    });
    expect(req.headers['x-trace']).toBe('abc');
    expect(req.body.max_completion_tokens).toBe(100);
    expect(lastMessage(req)).toEqual({ role: 'user', text: 'what does bob have?' });
    // The tool messages after the last assistant message, even with a user message after them.
    expect(toolResults(req)).toEqual([
      { role: 'tool', toolCallId: 'c0', content: '{"available":"1.00"}', isError: false },
    ]);
  });

  it('normalizes an anthropic request (tool_result, is_error) and answers tool_use blocks', async () => {
    model.setRules([
      (req) =>
        req.format === 'anthropic'
          ? { text: 'Checking.', toolCalls: [{ name: 'balance', arguments: { code: 'carol' } }] }
          : undefined,
    ]);
    const r = await anthropic(model, {
      model: 'claude-test',
      max_tokens: 256,
      system: [{ type: 'text', text: 'You are a teller.' }],
      tools: [{ name: BALANCE_TOOL.name, description: BALANCE_TOOL.description, input_schema: BALANCE_TOOL.schema }],
      messages: [
        { role: 'user', content: 'check alice and bob' },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Looking.' },
            { type: 'tool_use', id: 'toolu_a', name: 'balance', input: { code: 'alice' } },
            { type: 'tool_use', id: 'toolu_b', name: 'balance', input: { code: 'bob' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_a', content: '{"available":"5.00"}' },
            {
              type: 'tool_result',
              tool_use_id: 'toolu_b',
              content: [
                { type: 'text', text: 'no such ' },
                { type: 'text', text: 'account' },
              ],
              is_error: true,
            },
          ],
        },
      ],
    });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({
      type: 'message',
      role: 'assistant',
      model: 'claude-test',
      stop_reason: 'tool_use',
      stop_sequence: null,
      content: [
        { type: 'text', text: 'Checking.' },
        { type: 'tool_use', name: 'balance', input: { code: 'carol' } },
      ],
    });
    expect(r.json.id).toMatch(/^msg_/);
    expect(r.json.content[1].id).toMatch(/^toolu_\d+$/);
    expect(r.json.usage.input_tokens).toBeGreaterThan(0);
    expect(r.json.usage.output_tokens).toBeGreaterThan(0);

    const req = model.requests.at(-1)!;
    expect(req).toMatchObject({
      format: 'anthropic',
      model: 'claude-test',
      system: 'You are a teller.',
      maxTokens: 256,
      temperature: null,
      turn: 2,
      forcedTool: null,
      responseSchema: null,
      tools: [{ name: 'balance', description: BALANCE_TOOL.description, inputSchema: BALANCE_TOOL.schema }],
      messages: [
        { role: 'user', text: 'check alice and bob' },
        {
          role: 'assistant',
          text: 'Looking.',
          toolCalls: [
            { id: 'toolu_a', name: 'balance', arguments: { code: 'alice' } },
            { id: 'toolu_b', name: 'balance', arguments: { code: 'bob' } },
          ],
        },
        { role: 'tool', toolCallId: 'toolu_a', content: '{"available":"5.00"}', isError: false },
        { role: 'tool', toolCallId: 'toolu_b', content: 'no such account', isError: true },
      ],
    });
    expect(toolResults(req).map((t) => t.toolCallId)).toEqual(['toolu_a', 'toolu_b']);
    expect(lastUserText(req)).toBe('check alice and bob');
  });

  it('answers json replies as structured output in both formats', async () => {
    const schema = { type: 'object', properties: { verdict: { type: 'string' } }, required: ['verdict'] };
    model.setRules([() => ({ json: { verdict: 'ok' } })]);

    const o = await openai(model, {
      model: 'gpt-test',
      messages: [{ role: 'user', content: 'judge' }],
      response_format: { type: 'json_schema', json_schema: { name: 'verdict', schema, strict: true } },
    });
    expect(o.status).toBe(200);
    expect(o.json.choices[0].finish_reason).toBe('stop');
    expect(JSON.parse(o.json.choices[0].message.content)).toEqual({ verdict: 'ok' });
    expect(model.requests.at(-1)!.responseSchema).toEqual(schema);

    const a = await anthropic(model, {
      model: 'claude-test',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'judge' }],
      tools: [{ name: 'verdict', description: 'the answer', input_schema: schema }],
      tool_choice: { type: 'tool', name: 'verdict' },
    });
    expect(a.status).toBe(200);
    expect(a.json.stop_reason).toBe('tool_use');
    expect(a.json.content).toEqual([
      { type: 'tool_use', id: expect.stringMatching(/^toolu_/), name: 'verdict', input: { verdict: 'ok' } },
    ]);
    expect(model.requests.at(-1)).toMatchObject({ forcedTool: 'verdict', responseSchema: schema });

    const plain = await anthropic(model, {
      model: 'claude-test',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'judge' }],
    });
    expect(plain.json.stop_reason).toBe('end_turn');
    expect(JSON.parse(plain.json.content[0].text)).toEqual({ verdict: 'ok' });
  });

  it('answers an error status with headers in the wire format', async () => {
    model.setRules([() => ({ status: 429, headers: { 'retry-after': '0' }, text: 'slow down' })]);
    const o = await openai(model, { model: 'm', messages: [{ role: 'user', content: 'x' }] });
    expect(o.status).toBe(429);
    expect(o.headers.get('retry-after')).toBe('0');
    expect(o.json).toEqual({ error: { message: 'slow down', type: 'rate_limit_error', code: 'rate_limit_exceeded' } });
    const a = await anthropic(model, { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] });
    expect(a.status).toBe(429);
    expect(a.headers.get('retry-after')).toBe('0');
    expect(a.json).toEqual({ type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } });
  });

  it('sends a rawBody verbatim', async () => {
    model.setRules([() => ({ rawBody: '{"choices": [' })]);
    const r = await openai(model, { model: 'm', messages: [{ role: 'user', content: 'x' }] });
    expect(r.status).toBe(200);
    expect(r.text).toBe('{"choices": [');
    model.setRules([() => ({ rawBody: 'upstream exploded', status: 502, headers: { 'content-type': 'text/plain' } })]);
    const b = await anthropic(model, { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] });
    expect(b.status).toBe(502);
    expect(b.text).toBe('upstream exploded');
    expect(b.headers.get('content-type')).toBe('text/plain');
  });

  it('uses the script FIFO when no rule answers, then a 500 naming the last message', async () => {
    model.setRules([() => undefined]);
    model.push({ text: 'one' }, { text: 'two' });
    const body = { model: 'm', messages: [{ role: 'user', content: 'count please' }] };
    expect((await openai(model, body)).json.choices[0].message.content).toBe('one');
    expect((await anthropic(model, { ...body, max_tokens: 5 })).json.content).toEqual([{ type: 'text', text: 'two' }]);
    const none = await openai(model, body);
    expect(none.status).toBe(500);
    expect(none.json.error.message).toContain('scripted model has no reply for this request');
    expect(none.json.error.message).toContain('count please');
    const noneA = await anthropic(model, { ...body, max_tokens: 5 });
    expect(noneA.status).toBe(500);
    expect(noneA.json).toMatchObject({ type: 'error', error: { type: 'api_error' } });
  });

  it('rejects bad requests and unknown paths in the wire format', async () => {
    const notJson = await openai(model, '{nope');
    expect(notJson.status).toBe(400);
    expect(notJson.json.error.type).toBe('invalid_request_error');
    const noModel = await anthropic(model, { messages: [] });
    expect(noModel.status).toBe(400);
    expect(noModel.json).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    const noMessages = await openai(model, { model: 'm' });
    expect(noMessages.status).toBe(400);
    const unknown = await post(`${model.url}/v2/whatever`, {});
    expect(unknown.status).toBe(404);
    const huge = await openai(model, JSON.stringify({ model: 'm', messages: [], pad: 'x'.repeat(10 * 1024 * 1024) }));
    expect(huge.status).toBe(413);
  });

  it('is understood by the official OpenAI and Anthropic SDKs', async () => {
    model.setRules([() => ({ toolCalls: [{ name: 'balance', arguments: { code: 'bob' } }] })]);
    const o = new OpenAI({ baseURL: `${model.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const oc = await o.chat.completions.create({ model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }] });
    const call = oc.choices[0]!.message.tool_calls![0]!;
    expect(call.type === 'function' && JSON.parse(call.function.arguments)).toEqual({ code: 'bob' });
    const a = new Anthropic({ baseURL: model.url, apiKey: 'unused', maxRetries: 0 });
    const am = await a.messages.create({
      model: 'claude-test',
      max_tokens: 10,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(am.stop_reason).toBe('tool_use');
    expect(am.content[0]).toMatchObject({ type: 'tool_use', name: 'balance', input: { code: 'bob' } });
    model.setRules([() => ({ status: 429, headers: { 'retry-after': '0' } })]);
    await expect(
      a.messages.create({ model: 'claude-test', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }),
    ).rejects.toMatchObject({ status: 429 });
  });

  it('delayMs does not block a concurrent request', async () => {
    model.setRules([
      (req) => (lastUserText(req) === 'slow' ? { text: 'slow done', delayMs: 1500 } : { text: 'fast done' }),
    ]);
    const started = Date.now();
    const slow = openai(model, { model: 'm', messages: [{ role: 'user', content: 'slow' }] }).then((r) => ({
      r,
      at: Date.now(),
    }));
    await new Promise((r) => setTimeout(r, 50));
    const fast = await openai(model, { model: 'm', messages: [{ role: 'user', content: 'fast' }] });
    const fastAt = Date.now();
    expect(fast.json.choices[0].message.content).toBe('fast done');
    expect(fastAt - started).toBeLessThan(1000);
    const done = await slow;
    expect(done.r.json.choices[0].message.content).toBe('slow done');
    expect(done.at - started).toBeGreaterThanOrEqual(1400);
  });
});

describe('scripted model apiKey', () => {
  it('requires the key (401 without, 200 with) and never echoes it', async () => {
    const key = 'sk-scripted-secret-123';
    const model = await startScriptedModel({ apiKey: key, rules: [() => ({ text: 'ok' })] });
    try {
      const body = { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] };
      const o401 = await openai(model, body);
      expect(o401.status).toBe(401);
      expect(o401.json.error).toBeTruthy();
      const oWrong = await openai(model, body, { authorization: 'Bearer nope' });
      expect(oWrong.status).toBe(401);
      expect(oWrong.text).not.toContain(key);
      const o200 = await openai(model, body, { authorization: `Bearer ${key}` });
      expect(o200.status).toBe(200);
      expect(o200.text).not.toContain(key);

      const a401 = await anthropic(model, body, { authorization: `Bearer ${key}` });
      expect(a401.status).toBe(401);
      expect(a401.json).toMatchObject({ type: 'error', error: { type: 'authentication_error' } });
      const a200 = await anthropic(model, body, { 'x-api-key': key });
      expect(a200.status).toBe(200);
      expect(a200.json.content[0].text).toBe('ok');
    } finally {
      await model.close();
    }
  });
});

describe('the bank teller rules', () => {
  const BOB = '00000000-0000-4000-8000-000000000b0b';

  it('drive balance → transfer → final text over openai', async () => {
    const model = await startScriptedModel({ rules: await loadTeller() });
    try {
      const messages: Json[] = [
        { role: 'system', content: 'You are the teller.' },
        { role: 'user', content: 'Please move 25.50 from Alice to Bob' },
      ];
      const ask = async () => {
        const r = await openai(model, { model: 'teller', messages });
        expect(r.status).toBe(200);
        return r.json.choices[0];
      };

      const first = await ask();
      expect(first.finish_reason).toBe('tool_calls');
      const balanceCall = first.message.tool_calls[0];
      expect(balanceCall.function.name).toBe('balance');
      expect(JSON.parse(balanceCall.function.arguments)).toEqual({ code: 'bob' });
      messages.push(first.message, {
        role: 'tool',
        tool_call_id: balanceCall.id,
        content: JSON.stringify({ account_id: BOB, code: 'bob', name: 'Bob', available: '10.00' }),
      });

      const second = await ask();
      expect(second.finish_reason).toBe('tool_calls');
      const transferCall = second.message.tool_calls[0];
      expect(transferCall.function.name).toBe('transfer');
      const args = JSON.parse(transferCall.function.arguments);
      expect(args).toEqual({
        transaction_id: expect.stringMatching(/^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/),
        to: BOB,
        amount: '25.50',
      });
      messages.push(second.message, {
        role: 'tool',
        tool_call_id: transferCall.id,
        content: JSON.stringify({
          transaction_id: args.transaction_id,
          from_available: '74.50',
          to_available: '35.50',
        }),
      });

      const third = await ask();
      expect(third.finish_reason).toBe('stop');
      expect(third.message.content).toBe(
        'Moved 25.50 from Alice to Bob. Alice now has 74.50 available, Bob has 35.50.',
      );
      expect(model.requests.map((r) => r.turn)).toEqual([1, 2, 3]);

      // The same conversation gets the same transaction id (deterministic), and help otherwise.
      const again = await openai(model, { model: 'teller', messages: messages.slice(0, 4) });
      expect(JSON.parse(again.json.choices[0].message.tool_calls[0].function.arguments).transaction_id).toBe(
        args.transaction_id,
      );
      const help = await openai(model, { model: 'teller', messages: [{ role: 'user', content: 'hello' }] });
      expect(help.json.choices[0].message.content).toBe(
        'I can move money and look up balances. Try: move 25 from Alice to Bob.',
      );
    } finally {
      await model.close();
    }
  });

  it('drive balance → transfer → final text over anthropic, and report tool errors', async () => {
    const model = await startScriptedModel({ rules: await loadTeller() });
    try {
      const messages: Json[] = [{ role: 'user', content: 'move 7 from Carol to Bob' }];
      const ask = async () => {
        const r = await anthropic(model, { model: 'teller', max_tokens: 512, system: 'You are the teller.', messages });
        expect(r.status).toBe(200);
        return r.json;
      };

      const first = await ask();
      expect(first.stop_reason).toBe('tool_use');
      const balanceUse = first.content.find((b: Json) => b.type === 'tool_use');
      expect(balanceUse).toMatchObject({ name: 'balance', input: { code: 'bob' } });
      messages.push(
        { role: 'assistant', content: first.content },
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: balanceUse.id,
              content: [
                {
                  type: 'text',
                  text: JSON.stringify({ account_id: BOB, code: 'bob', name: 'Bob', available: '1.00' }),
                },
              ],
            },
          ],
        },
      );

      const second = await ask();
      const transferUse = second.content.find((b: Json) => b.type === 'tool_use');
      expect(transferUse).toMatchObject({ name: 'transfer', input: { to: BOB, amount: '7' } });
      expect(transferUse.input).not.toHaveProperty('from');
      const errorMessages = [
        ...messages,
        { role: 'assistant', content: second.content },
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: transferUse.id,
              is_error: true,
              content: JSON.stringify({ code: 'SCRIPT_ERROR', message: 'insufficient funds: 7 needed' }),
            },
          ],
        },
      ];
      messages.push(
        { role: 'assistant', content: second.content },
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: transferUse.id,
              content: JSON.stringify({
                transaction_id: transferUse.input.transaction_id,
                from_available: '3.00',
                to_available: '8.00',
              }),
            },
          ],
        },
      );

      const third = await ask();
      expect(third.stop_reason).toBe('end_turn');
      expect(third.content).toEqual([
        { type: 'text', text: 'Moved 7 from Carol to Bob. Carol now has 3.00 available, Bob has 8.00.' },
      ]);

      const failed = await anthropic(model, { model: 'teller', max_tokens: 512, messages: errorMessages });
      expect(failed.json.content[0].text).toBe('I could not do that: insufficient funds: 7 needed');
    } finally {
      await model.close();
    }
  });
});
