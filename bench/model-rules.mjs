// The bench agent's script (examples/scripted-model/server.mjs --rules bench/model-rules.mjs): the
// first turn asks for one transfer, the second answers. Not a model.
import { toolResults } from '../examples/scripted-model/server.mjs';

export default [
  (request) => {
    if (toolResults(request).length > 0) return { text: 'done', usage: { inputTokens: 100, outputTokens: 2 } };
    const n = Number(/run (\d+)/.exec(JSON.stringify(request.messages))?.[1] ?? 0);
    return { toolCalls: [{ name: 'post', arguments: { n } }], usage: { inputTokens: 80, outputTokens: 12 } };
  },
];
