// The bank teller's script, for examples/scripted-model/server.mjs: a deterministic stand-in for a
// model driving an agent named teller whose tools are
//   balance  {code}                       → {account_id, code, name, available}
//   transfer {transaction_id, to, amount} → {transaction_id, from_available, to_available}
// (`from` is fixed by the agent; the model never sends it). Not a model; never a default.
//
//   node examples/scripted-model/server.mjs --rules examples/bank/model/teller.mjs

import { createHash } from 'node:crypto';
import { lastUserText, toolResults } from '../../scripted-model/server.mjs';

const MOVE = /move\s+([0-9]+(?:\.[0-9]{1,2})?)\s+from\s+(\w+)\s+to\s+(\w+)/i;

const HELP = 'I can move money and look up balances. Try: move 25 from Alice to Bob.';

/** A v5-like UUID from the sha-1 of text: the same conversation always gets the same id. */
function uuidFrom(text) {
  const bytes = createHash('sha1').update(text).digest().subarray(0, 16);
  bytes[6] = (bytes[6] & 0x0f) | 0x50;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function parse(content) {
  try {
    const value = JSON.parse(content);
    return value && typeof value === 'object' ? value : null;
  } catch {
    return null;
  }
}

function errorMessage(result, parsed) {
  if (parsed) {
    if (typeof parsed.message === 'string') return parsed.message;
    if (typeof parsed.error === 'string') return parsed.error;
    if (parsed.error && typeof parsed.error.message === 'string') return parsed.error.message;
  }
  return result.content;
}

/** What the latest tool result is: {kind: 'balance'|'transfer'|'error'|'other', ...}, or null if none. */
function latestResult(request) {
  const results = toolResults(request);
  const result = results[results.length - 1];
  if (!result) return null;
  const parsed = parse(result.content);
  if (result.isError) return { kind: 'error', message: errorMessage(result, parsed) };
  if (parsed && typeof parsed.account_id === 'string') return { kind: 'balance', value: parsed };
  if (parsed && 'from_available' in parsed && 'to_available' in parsed) return { kind: 'transfer', value: parsed };
  if (parsed && ('code' in parsed || (parsed.error && typeof parsed.error === 'object')))
    return { kind: 'error', message: errorMessage(result, parsed) };
  return { kind: 'other' };
}

function userTexts(request) {
  return request.messages
    .filter((m) => m.role === 'user')
    .map((m) => m.text)
    .join('\n');
}

/** @type {import('../../scripted-model/server.d.mts').Rule[]} */
export default [
  // A move request, nothing looked up yet: look up the recipient.
  (request) => {
    if (toolResults(request).length > 0) return undefined;
    const move = MOVE.exec(lastUserText(request) ?? '');
    if (!move) return undefined;
    return { toolCalls: [{ name: 'balance', arguments: { code: move[3].toLowerCase() } }] };
  },
  // A tool failed: say so.
  (request) => {
    const latest = latestResult(request);
    if (latest?.kind !== 'error') return undefined;
    return { text: `I could not do that: ${latest.message}` };
  },
  // The recipient is known: transfer.
  (request) => {
    const latest = latestResult(request);
    const move = MOVE.exec(lastUserText(request) ?? '');
    if (latest?.kind !== 'balance' || !move) return undefined;
    return {
      toolCalls: [
        {
          name: 'transfer',
          arguments: { transaction_id: uuidFrom(userTexts(request)), to: latest.value.account_id, amount: move[1] },
        },
      ],
    };
  },
  // The transfer is done: report it.
  (request) => {
    const latest = latestResult(request);
    const move = MOVE.exec(lastUserText(request) ?? '');
    if (latest?.kind !== 'transfer' || !move) return undefined;
    const [, amount, from, to] = move;
    const { from_available: fromAvailable, to_available: toAvailable } = latest.value;
    return {
      text: `Moved ${amount} from ${from} to ${to}. ${from} now has ${fromAvailable} available, ${to} has ${toAvailable}.`,
    };
  },
  // Anything else.
  () => ({ text: HELP }),
];
