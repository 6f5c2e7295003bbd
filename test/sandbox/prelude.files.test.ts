import { readdirSync, readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadQuickJS } from '../../sandbox/module.js';
import { GUEST_FILES, PRELUDE } from '../../sandbox/prelude.js';
import { Sandbox } from '../../sandbox/sandbox.js';
import { Cel } from '../../src/cel/cel.js';
import { programLibraryJson } from '../../src/cel/library.js';
import { systemClock } from '../../src/clock.js';

/**
 * The guest program lives in sandbox/guest/*.js; prelude.ts joins the files into the one program
 * every new context evaluates. These check that the joined program is the files as written, that it
 * evaluates in QuickJS, and that it leaves exactly the global scope it always left.
 */
const GUEST = new URL('../../sandbox/guest/', import.meta.url);

let sandbox: Sandbox;
const bridge = { call: () => '{"ok":true,"value":null}', log() {} };
beforeAll(async () => {
  // Making a sandbox evaluates the prelude in its first context (it throws if the prelude fails).
  sandbox = new Sandbox(await loadQuickJS(96 * 1024 * 1024), {
    memoryBytesMax: 64 << 20,
    stackBytesMax: 256 << 10,
    contextUsesMax: 1e9,
    contextPoolMax: 2,
    programsPerContextMax: 16,
    retainedBytesMax: 256 << 10,
    library: programLibraryJson(new Cel(systemClock, { celExpressionLengthMax: 4096, celCacheMax: 100 }).env),
  });
});

function run(source: string, data: unknown = null): unknown {
  const result = sandbox.run(
    { key: source, fileName: 'test', source },
    JSON.stringify({ data }),
    bridge,
    Date.now() + 10_000,
  );
  return result.ok ? JSON.parse(result.outputJson) : `${result.kind}: ${result.message}`;
}

/**
 * The global scope a program saw before the guest code moved out of prelude.ts's template literal,
 * and since issue 36 the CEL library's globals (date, duration, strings, time, timestamp, uuid).
 */
const GLOBALS = [
  'AggregateError',
  'Array',
  'ArrayBuffer',
  'BigInt',
  'BigInt64Array',
  'BigUint64Array',
  'Boolean',
  'DataView',
  'Date',
  'Error',
  'EvalError',
  'Float16Array',
  'Float32Array',
  'Float64Array',
  'Function',
  'Infinity',
  'Int16Array',
  'Int32Array',
  'Int8Array',
  'InternalError',
  'Iterator',
  'JSON',
  'Map',
  'Math',
  'NaN',
  'Number',
  'Object',
  'Promise',
  'Proxy',
  'RangeError',
  'ReferenceError',
  'Reflect',
  'RegExp',
  'Set',
  'SharedArrayBuffer',
  'String',
  'Symbol',
  'SyntaxError',
  'TypeError',
  'URIError',
  'Uint16Array',
  'Uint32Array',
  'Uint8Array',
  'Uint8ClampedArray',
  'WeakMap',
  'WeakSet',
  'cancelled',
  'cel',
  'console',
  'date',
  'decimal',
  'decodeURI',
  'decodeURIComponent',
  'duration',
  'encodeURI',
  'encodeURIComponent',
  'escape',
  'fail',
  'globalThis',
  'graphql',
  'isFinite',
  'isNaN',
  'money',
  'parseFloat',
  'parseInt',
  'status',
  'strings',
  'time',
  'timestamp',
  'tools',
  'undefined',
  'unescape',
  'uuid',
];

describe('the guest program files', () => {
  it('are joined in order, each exactly as written, inside one strict function that returns invoke', () => {
    const onDisk = readdirSync(GUEST).filter((name) => name.endsWith('.js'));
    expect([...GUEST_FILES].sort()).toEqual(onDisk.sort());
    let at = PRELUDE.indexOf("(function () {\n  'use strict';\n");
    expect(at).toBe(1);
    for (const name of GUEST_FILES) {
      const text = readFileSync(new URL(name, GUEST), 'utf8');
      expect(text.startsWith('// @ts-check\n'), name).toBe(true);
      const found = PRELUDE.indexOf(text, at);
      expect(found, `${name} follows the file before it`).toBeGreaterThan(at);
      at = found + text.length;
    }
    expect(PRELUDE.slice(at)).toBe('\n  return invoke;\n})();\n');
  });

  it('evaluate in QuickJS to the same global scope: the API frozen in place, the host function gone', () => {
    const scope = run(`function run() {
      const describe = (o, k) => {
        const d = Object.getOwnPropertyDescriptor(o, k);
        return d ? [typeof d.value, d.writable, d.enumerable, d.configurable].join(' ') : 'absent';
      };
      return {
        names: Object.getOwnPropertyNames(globalThis).sort(),
        api: ['graphql', 'cel', 'tools', 'fail', 'cancelled', 'status', 'decimal', 'money', 'console', 'uuid', 'date', 'time', 'timestamp', 'duration', 'strings'].map((k) => k + ': ' + describe(globalThis, k)),
        decimal: Object.getOwnPropertyNames(decimal).sort(),
        money: Object.getOwnPropertyNames(money).sort(),
        console: Object.keys(console),
        frozen: [globalThis, Object.prototype, Array.prototype, String.prototype, Math].every(Object.isFrozen),
        gone: ['__tally_host', '__tally_output_max', '__tally_depth_max', '__tally_library', 'WeakRef', 'FinalizationRegistry', 'eval', 'invoke'].filter((k) => k in globalThis),
      };
    }`);
    expect(scope).toEqual({
      names: GLOBALS,
      api: [
        'graphql: function false false false',
        'cel: function false false false',
        'tools: object false false false',
        'fail: function false false false',
        'cancelled: function false false false',
        'status: function false false false',
        'decimal: function false false false',
        'money: function false false false',
        'console: object false false false',
        'uuid: function false false false',
        'date: function false false false',
        'time: object false false false',
        'timestamp: function false false false',
        'duration: function false false false',
        'strings: object false false false',
      ],
      decimal: ['Abs', 'Add', 'Ceil', 'Cmp', 'Floor', 'Mul', 'Neg', 'Quo', 'Reduce', 'Round', 'Sub', 'length', 'name'],
      money: ['Add', 'Mul', 'Sub', 'length', 'name'],
      console: ['log', 'info', 'warn', 'error'],
      frozen: true,
      gone: [],
    });
    expect(run("function run() { return (function () {}).constructor('return 1'); }")).toBe(
      'error: EvalError: code cannot be made from text in a tool program (no eval, no new Function)',
    );
  });

  it('keep their escapes as written: "$`" in a replacement on the long-search path, \\d in the decimal pattern', () => {
    // Past SEARCH_WORK_MAX the guest replaces in JavaScript (string-guards.js), where '\x60' is the
    // backtick of "$`": the text before the match. Node's own replace is the reference.
    const text = `${'x'.repeat(2000)}${'P'.repeat(600)}tail`;
    const pattern = 'P'.repeat(600);
    expect(
      run('function run(e) { return e.data.text.replace(e.data.pattern, "[$`|$\'|$&|$$]").length; }', {
        text,
        pattern,
      }),
    ).toBe(text.replace(pattern, "[$`|$'|$&|$$]").length);
    expect(
      run('function run(e) { return e.data.text.replace(e.data.pattern, "<$`>") === e.data.expected; }', {
        text,
        pattern,
        expected: text.replace(pattern, '<$`>'),
      }),
    ).toBe(true);
    expect(
      run("function run() { return [decimal('-12.50').toString(), decimal(' 7 ').plus('0.25').toString()]; }"),
    ).toEqual(['-12.50', '7.25']);
    expect(run("function run() { return decimal('1e5').toString(); }")).toBe(
      'error: RangeError: decimal("1e5"): not a decimal number',
    );
  });
});
