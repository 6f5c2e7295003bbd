// A scripted model server: a real HTTP server that speaks the OpenAI chat-completions and the
// Anthropic Messages wire formats and answers from a script (rules, then a FIFO of replies).
// It is test and example infrastructure, not a model, and never a default. Node built-ins only.
//
//   import { startScriptedModel } from './server.mjs';
//   const model = await startScriptedModel({ rules: [(req) => ({ text: 'hello' })] });
//   // point an OpenAI client at `${model.url}/v1`, an Anthropic client at model.url
//   await model.close();
//
// CLI: node examples/scripted-model/server.mjs [--port N] [--host H] [--rules path/to/rules.mjs]

import { createServer } from 'node:http';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const MAX_BODY_BYTES = 10 * 1024 * 1024;

const OPENAI_ERROR_TYPES = {
  400: ['invalid_request_error', 'invalid_request'],
  401: ['invalid_request_error', 'invalid_api_key'],
  403: ['invalid_request_error', 'permission_denied'],
  404: ['invalid_request_error', 'not_found'],
  405: ['invalid_request_error', 'method_not_allowed'],
  413: ['invalid_request_error', 'request_too_large'],
  429: ['rate_limit_error', 'rate_limit_exceeded'],
};

const ANTHROPIC_ERROR_TYPES = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  405: 'invalid_request_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  529: 'overloaded_error',
};

/** The wire-format error body for a status. */
function errorBody(format, status, message) {
  if (format === 'anthropic') {
    return { type: 'error', error: { type: ANTHROPIC_ERROR_TYPES[status] ?? 'api_error', message } };
  }
  const [type, code] = OPENAI_ERROR_TYPES[status] ?? ['server_error', 'server_error'];
  return { error: { message, type, code } };
}

function send(res, status, body, headers = {}) {
  if (res.headersSent || res.destroyed) return;
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), String(v)]));
  res.writeHead(status, { 'content-type': 'application/json', ...lower, 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function sendError(res, format, status, message, headers) {
  send(res, status, errorBody(format, status, message), headers);
}

// ---------------------------------------------------------------------------------------------
// Normalization

function partsText(content) {
  if (content === undefined || content === null) return null;
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    const texts = content
      .filter(
        (p) => p && typeof p === 'object' && typeof p.text === 'string' && (p.type === 'text' || p.type === undefined),
      )
      .map((p) => p.text);
    return texts.length > 0 ? texts.join('') : null;
  }
  return String(content);
}

function parseArguments(raw) {
  if (typeof raw !== 'string') return raw;
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

function invalid(message) {
  const err = new Error(message);
  err.status = 400;
  return err;
}

function checkCommon(body) {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw invalid('request body must be a JSON object');
  if (typeof body.model !== 'string' || body.model === '') throw invalid('model: a non-empty string is required');
  if (!Array.isArray(body.messages)) throw invalid('messages: an array is required');
  body.messages.forEach((m, i) => {
    if (!m || typeof m !== 'object' || typeof m.role !== 'string')
      throw invalid(`messages[${i}]: an object with a role is required`);
  });
}

function normalizeOpenAI(body) {
  checkCommon(body);
  const systems = [];
  const messages = [];
  for (const m of body.messages) {
    if (m.role === 'system' || m.role === 'developer') {
      const text = partsText(m.content);
      if (text !== null) systems.push(text);
    } else if (m.role === 'user') {
      messages.push({ role: 'user', text: partsText(m.content) ?? '' });
    } else if (m.role === 'assistant') {
      const toolCalls = (Array.isArray(m.tool_calls) ? m.tool_calls : []).map((c) => ({
        id: c?.id,
        name: c?.function?.name,
        arguments: parseArguments(c?.function?.arguments),
      }));
      messages.push({ role: 'assistant', text: partsText(m.content), toolCalls });
    } else if (m.role === 'tool') {
      messages.push({ role: 'tool', toolCallId: m.tool_call_id, content: partsText(m.content) ?? '', isError: false });
    } else {
      throw invalid(`unknown message role ${JSON.stringify(m.role)}`);
    }
  }
  const tools = (Array.isArray(body.tools) ? body.tools : [])
    .filter((t) => t && t.type === 'function' && t.function)
    .map((t) => ({
      name: t.function.name,
      description: t.function.description ?? '',
      inputSchema: t.function.parameters ?? null,
    }));
  const rf = body.response_format;
  const responseSchema = rf && rf.type === 'json_schema' ? (rf.json_schema?.schema ?? null) : null;
  const tc = body.tool_choice;
  const forcedTool = tc && typeof tc === 'object' && tc.type === 'function' ? (tc.function?.name ?? null) : null;
  return {
    format: 'openai',
    model: body.model,
    system: systems.length > 0 ? systems.join('\n') : null,
    messages,
    tools,
    responseSchema,
    forcedTool,
    temperature: body.temperature ?? null,
    maxTokens: body.max_completion_tokens ?? body.max_tokens ?? null,
  };
}

function normalizeAnthropic(body) {
  checkCommon(body);
  const messages = [];
  for (const m of body.messages) {
    if (m.role === 'user') {
      if (!Array.isArray(m.content)) {
        messages.push({ role: 'user', text: partsText(m.content) ?? '' });
        continue;
      }
      const texts = [];
      for (const block of m.content) {
        if (block?.type === 'tool_result') {
          messages.push({
            role: 'tool',
            toolCallId: block.tool_use_id,
            content: partsText(block.content) ?? '',
            isError: block.is_error === true,
          });
        } else if (block?.type === 'text' && typeof block.text === 'string') {
          texts.push(block.text);
        }
      }
      if (texts.length > 0) messages.push({ role: 'user', text: texts.join('') });
    } else if (m.role === 'assistant') {
      if (!Array.isArray(m.content)) {
        messages.push({ role: 'assistant', text: partsText(m.content), toolCalls: [] });
        continue;
      }
      const texts = [];
      const toolCalls = [];
      for (const block of m.content) {
        if (block?.type === 'text' && typeof block.text === 'string') texts.push(block.text);
        else if (block?.type === 'tool_use') {
          toolCalls.push({ id: block.id, name: block.name, arguments: parseArguments(block.input) });
        }
      }
      messages.push({ role: 'assistant', text: texts.length > 0 ? texts.join('') : null, toolCalls });
    } else {
      throw invalid(`messages: role must be user or assistant, not ${JSON.stringify(m.role)}`);
    }
  }
  const tools = (Array.isArray(body.tools) ? body.tools : [])
    .filter((t) => t && typeof t.name === 'string')
    .map((t) => ({ name: t.name, description: t.description ?? '', inputSchema: t.input_schema ?? null }));
  const tc = body.tool_choice;
  const forcedTool = tc && typeof tc === 'object' && tc.type === 'tool' ? (tc.name ?? null) : null;
  const responseSchema = forcedTool ? (tools.find((t) => t.name === forcedTool)?.inputSchema ?? null) : null;
  return {
    format: 'anthropic',
    model: body.model,
    system: body.system === undefined || body.system === null ? null : partsText(body.system),
    messages,
    tools,
    responseSchema,
    forcedTool,
    temperature: body.temperature ?? null,
    maxTokens: body.max_tokens ?? null,
  };
}

// ---------------------------------------------------------------------------------------------
// Helpers for rules

/** The last normalized message of the request, or undefined if there is none. */
export function lastMessage(request) {
  return request.messages[request.messages.length - 1];
}

/** The text of the last user message that has text, or null. */
export function lastUserText(request) {
  for (let i = request.messages.length - 1; i >= 0; i--) {
    const m = request.messages[i];
    if (m.role === 'user' && typeof m.text === 'string' && m.text !== '') return m.text;
  }
  return null;
}

/** The tool results after the last assistant message (all of them if there is no assistant message). */
export function toolResults(request) {
  let start = 0;
  for (let i = request.messages.length - 1; i >= 0; i--) {
    if (request.messages[i].role === 'assistant') {
      start = i + 1;
      break;
    }
  }
  return request.messages.slice(start).filter((m) => m.role === 'tool');
}

function summarize(message) {
  if (!message) return 'no messages';
  let text;
  if (message.role === 'tool')
    text = `${message.isError ? 'error ' : ''}result for ${message.toolCallId}: ${message.content}`;
  else if (message.role === 'assistant') {
    text = message.text ?? '';
    if (message.toolCalls.length > 0) text += ` [calls ${message.toolCalls.map((c) => c.name).join(', ')}]`;
  } else text = message.text;
  text = String(text).replace(/\s+/g, ' ').trim();
  if (text.length > 200) text = `${text.slice(0, 200)}…`;
  return `${message.role}: ${text}`;
}

// ---------------------------------------------------------------------------------------------
// Replies

function roughTokens(value) {
  const text = typeof value === 'string' ? value : (JSON.stringify(value) ?? '');
  return Math.max(1, Math.ceil(text.length / 4));
}

function openAIResponse(state, request, reply, rawLength) {
  const toolCalls = (reply.toolCalls ?? []).map((c) => ({
    id: c.id ?? `call_${++state.toolCallCounter}`,
    type: 'function',
    function: {
      name: c.name,
      arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments ?? {}),
    },
  }));
  let content = reply.json !== undefined ? JSON.stringify(reply.json) : (reply.text ?? null);
  if (content === null && toolCalls.length === 0) content = '';
  const message = { role: 'assistant', content };
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  const promptTokens = reply.usage?.inputTokens ?? Math.max(1, Math.ceil(rawLength / 4));
  const completionTokens = reply.usage?.outputTokens ?? roughTokens(message);
  return {
    id: `chatcmpl-scripted${++state.responseCounter}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: request.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: toolCalls.length > 0 ? 'tool_calls' : 'stop' }],
    usage: {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
    },
  };
}

function anthropicInput(args) {
  if (typeof args !== 'string') return args ?? {};
  // A string is sent as given: if it parses to an object that object is the input, otherwise the
  // raw string is (which is not a valid tool_use input: it is there to test a client's handling).
  try {
    const parsed = JSON.parse(args);
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed;
  } catch {
    // fall through
  }
  return args;
}

function anthropicResponse(state, request, reply, rawLength) {
  const content = [];
  let text = reply.text;
  let forced = null;
  if (reply.json !== undefined) {
    if (request.forcedTool) forced = { name: request.forcedTool, input: reply.json };
    else text = JSON.stringify(reply.json);
  }
  if (typeof text === 'string' && text !== '') content.push({ type: 'text', text });
  if (forced)
    content.push({ type: 'tool_use', id: `toolu_${++state.toolCallCounter}`, name: forced.name, input: forced.input });
  for (const c of reply.toolCalls ?? []) {
    content.push({
      type: 'tool_use',
      id: c.id ?? `toolu_${++state.toolCallCounter}`,
      name: c.name,
      input: anthropicInput(c.arguments),
    });
  }
  if (content.length === 0) content.push({ type: 'text', text: '' });
  const usesTool = content.some((b) => b.type === 'tool_use');
  return {
    id: `msg_scripted${++state.responseCounter}`,
    type: 'message',
    role: 'assistant',
    model: request.model,
    content,
    stop_reason: usesTool ? 'tool_use' : 'end_turn',
    stop_sequence: null,
    usage: {
      input_tokens: reply.usage?.inputTokens ?? Math.max(1, Math.ceil(rawLength / 4)),
      output_tokens: reply.usage?.outputTokens ?? roughTokens(content),
    },
  };
}

/** Wait ms, resolving early (with false) if the signal fires. Never blocks other requests. */
function wait(ms, signal) {
  return new Promise((resolveWait) => {
    if (signal.aborted) return resolveWait(false);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolveWait(true);
    }, ms);
    function onAbort() {
      clearTimeout(timer);
      resolveWait(false);
    }
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

// ---------------------------------------------------------------------------------------------
// The server

function readBody(req) {
  return new Promise((resolveBody, rejectBody) => {
    const chunks = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (chunk) => {
      if (tooLarge) return; // drain without keeping
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        tooLarge = true;
        chunks.length = 0;
      } else chunks.push(chunk);
    });
    req.on('end', () => resolveBody(tooLarge ? null : Buffer.concat(chunks)));
    req.on('error', rejectBody);
  });
}

function authorized(format, headers, apiKey) {
  if (apiKey === undefined || apiKey === null || apiKey === '') return true;
  if (format === 'openai') return headers.authorization === `Bearer ${apiKey}`;
  return headers['x-api-key'] === apiKey;
}

/**
 * Start a scripted model server.
 * @param {import('./server.d.mts').ScriptedModelOptions} [options]
 * @returns {Promise<import('./server.d.mts').ScriptedModel>}
 */
export async function startScriptedModel(options = {}) {
  const state = {
    rules: [...(options.rules ?? [])],
    script: [...(options.script ?? [])],
    requests: [],
    toolCallCounter: 0,
    responseCounter: 0,
  };
  const apiKey = options.apiKey;

  async function handle(req, res) {
    const path = (req.url ?? '/').split('?')[0].replace(/\/+$/, '');
    const format = path === '/v1/chat/completions' ? 'openai' : path === '/v1/messages' ? 'anthropic' : null;
    if (format === null) {
      req.resume();
      return sendError(
        res,
        path.endsWith('/messages') ? 'anthropic' : 'openai',
        404,
        `no route for ${req.method} ${path || '/'}`,
      );
    }
    if (req.method !== 'POST') {
      req.resume();
      return sendError(res, format, 405, `${req.method} is not allowed on ${path}; use POST`, { allow: 'POST' });
    }
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > MAX_BODY_BYTES) {
      req.resume();
      return sendError(res, format, 413, `request body is over ${MAX_BODY_BYTES} bytes`, { connection: 'close' });
    }
    if (!authorized(format, req.headers, apiKey)) {
      req.resume();
      const message =
        format === 'openai'
          ? 'missing or invalid API key: send authorization: Bearer <key>'
          : 'missing or invalid x-api-key header';
      return sendError(res, format, 401, message);
    }
    const raw = await readBody(req);
    if (raw === null) return sendError(res, format, 413, `request body is over ${MAX_BODY_BYTES} bytes`);
    let body;
    try {
      body = JSON.parse(raw.toString('utf8'));
    } catch (err) {
      return sendError(res, format, 400, `request body is not valid JSON: ${err.message}`);
    }
    let request;
    try {
      request = format === 'openai' ? normalizeOpenAI(body) : normalizeAnthropic(body);
    } catch (err) {
      return sendError(res, format, err.status ?? 400, err.message);
    }
    request.headers = { ...req.headers };
    request.turn = 1 + request.messages.filter((m) => m.role === 'assistant').length;
    request.body = body;
    state.requests.push(request);

    // A client that goes away ends any wait.
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });

    let reply;
    try {
      for (const rule of state.rules) {
        reply = await rule(request);
        if (reply !== undefined && reply !== null) break;
      }
    } catch (err) {
      return sendError(res, format, 500, `scripted model rule threw: ${err?.message ?? String(err)}`);
    }
    if (reply === undefined || reply === null) reply = state.script.shift();
    if (reply === undefined || reply === null) {
      return sendError(
        res,
        format,
        500,
        `scripted model has no reply for this request (last message: ${summarize(lastMessage(request))})`,
      );
    }

    if (reply.delayMs && reply.delayMs > 0) {
      const waited = await wait(reply.delayMs, gone.signal);
      if (!waited) return;
    }
    if (gone.signal.aborted) return;

    const headers = reply.headers ?? {};
    if (reply.rawBody !== undefined) return send(res, reply.status ?? 200, reply.rawBody, headers);
    if (reply.status !== undefined && reply.status >= 400) {
      return sendError(res, format, reply.status, reply.text ?? `scripted error ${reply.status}`, headers);
    }
    const response =
      format === 'openai'
        ? openAIResponse(state, request, reply, raw.length)
        : anthropicResponse(state, request, reply, raw.length);
    return send(res, reply.status ?? 200, response, headers);
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err) => {
      if (!res.headersSent) sendError(res, 'openai', 500, `scripted model failed: ${err?.message ?? String(err)}`);
      else res.destroy();
    });
  });

  await new Promise((resolveListen, rejectListen) => {
    server.once('error', rejectListen);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      server.off('error', rejectListen);
      resolveListen();
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  const host = options.host ?? '127.0.0.1';
  const urlHost = host.includes(':') ? `[${host}]` : host;

  let closing = null;
  return {
    url: `http://${urlHost}:${port}`,
    port,
    requests: state.requests,
    close() {
      closing ??= new Promise((resolveClose) => {
        server.close(() => resolveClose());
        server.closeAllConnections();
      });
      return closing;
    },
    setRules(rules) {
      state.rules = [...(rules ?? [])];
    },
    push(...replies) {
      state.script.push(...replies);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// CLI

async function main(argv) {
  let port = 0;
  let host = '127.0.0.1';
  let rulesPath = null;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${arg} needs a value`);
      return v;
    };
    if (arg === '--port') port = Number(value());
    else if (arg === '--host') host = value();
    else if (arg === '--rules') rulesPath = value();
    else if (arg === '--help' || arg === '-h') {
      process.stdout.write(
        'usage: node examples/scripted-model/server.mjs [--port N] [--host H] [--rules path/to/rules.mjs]\n',
      );
      return;
    } else throw new Error(`unknown argument ${arg}`);
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error('--port must be an integer 0..65535');
  let rules = [];
  if (rulesPath) {
    const mod = await import(pathToFileURL(resolve(rulesPath)).href);
    rules = typeof mod.default === 'function' ? await mod.default() : mod.default;
    if (!Array.isArray(rules))
      throw new Error(`${rulesPath}: export default must be an array of rules, or a function returning one`);
  }
  const model = await startScriptedModel({ port, host, rules });
  process.stdout.write(`scripted model listening on ${model.url}\n`);
  const stop = () => {
    model.close().then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).catch((err) => {
    process.stderr.write(`scripted model: ${err?.message ?? String(err)}\n`);
    process.exit(1);
  });
}
