// @ts-check

// Nothing the garbage collector calls back may exist: a FinalizationRegistry callback runs
// whenever a collection happens, which can be inside another caller's execution; WeakRef lets a
// program observe collections caused by others. Neither can be made safe, so neither exists.
// @ts-expect-error: the language declares it; this context must not have it.
delete globalThis.WeakRef;
// @ts-expect-error: the same.
delete globalThis.FinalizationRegistry;
// No code is made from text: no eval, no Function, GeneratorFunction, AsyncFunction or
// AsyncGeneratorFunction constructor (reachable through any function's .constructor). A
// program's code is exactly its source, which the sandbox can inspect before it runs.
// @ts-expect-error: the same.
// biome-ignore lint/security/noGlobalEval: removing eval is the point.
delete globalThis.eval;
// biome-ignore lint/suspicious/noShadowRestrictedNames: named so its stack frames read as the Function it stands in for.
const noCodeFromText = function Function() {
  throw new EvalError('code cannot be made from text in a tool program (no eval, no new Function)');
};
for (const make of [
  () => function () {},
  () => function* () {},
  () => async function () {},
  () => async function* () {},
]) {
  const proto = Object.getPrototypeOf(make());
  const tamed = function () {
    return noCodeFromText();
  };
  Object.defineProperty(tamed, 'prototype', { value: proto, writable: false, enumerable: false, configurable: false });
  Object.defineProperty(proto, 'constructor', {
    value: tamed,
    writable: false,
    enumerable: false,
    configurable: false,
  });
}
Object.defineProperty(globalThis, 'Function', {
  value: Function.prototype.constructor,
  writable: false,
  enumerable: false,
  configurable: false,
});

// invoke() is the host's alone: it is the prelude's result, never a global (a program that could
// call it would skip the reseed of Math.random and read the state the previous caller left).
/** @type {Record<string, unknown>} */
const api = { graphql, cel, tools, fail, cancelled, status, decimal, money, console, ...libraryGlobals };
for (const name of Object.keys(api)) {
  Object.defineProperty(globalThis, name, {
    value: api[name],
    writable: false,
    enumerable: false,
    configurable: false,
  });
}

// Deep-freeze everything reachable from the global object, and the intrinsics only reachable
// through instances (iterator, generator and async prototypes).
const seen = new Set();
/** @type {unknown[]} */
const stack = [globalThis, Decimal, Money, Timestamp, Duration];
// Intrinsics reachable only through instances: generators, async functions, every kind of iterator.
const instances = [
  () => function* () {},
  () => async function () {},
  () => async function* () {},
  () => (function* () {})(),
  () => (async function* () {})(),
  () => [][Symbol.iterator](),
  () => ''[Symbol.iterator](),
  () => new Map().entries(),
  () => new Set().values(),
  () => /x/[Symbol.matchAll](''),
  () => [].values().map((x) => x),
  () => [].values().filter(() => true),
  () => [].values().take(0),
  () => [].values().drop(0),
  () => [].values().flatMap((x) => [x]),
  () =>
    Iterator.from(
      /** @type {Iterator<unknown>} */ ({
        next() {
          return { done: true };
        },
      }),
    ),
  () => Iterator.concat([]),
  () => Promise.resolve(),
  () => new Proxy({}, {}),
  () => new ArrayBuffer(1),
  () => new DataView(new ArrayBuffer(1)),
  () => new Uint8Array(1),
  () => Object.getPrototypeOf(Uint8Array),
  () => new AggregateError([]),
  () => Symbol(),
];
for (const make of instances) {
  try {
    const value = make();
    stack.push(value, Object.getPrototypeOf(value), Object.getPrototypeOf(Object.getPrototypeOf(value)));
  } catch {
    // A feature this build lacks has nothing to freeze.
  }
}
while (stack.length > 0) {
  const o = stack.pop();
  if (o === null || (typeof o !== 'object' && typeof o !== 'function') || seen.has(o)) continue;
  seen.add(o);
  for (const key of Reflect.ownKeys(o)) {
    const d = Object.getOwnPropertyDescriptor(o, key);
    if (d === undefined) continue;
    if ('value' in d) stack.push(d.value);
    else {
      stack.push(d.get);
      stack.push(d.set);
    }
  }
  stack.push(Object.getPrototypeOf(o));
  try {
    Object.freeze(o);
  } catch {
    // A typed array instance made above to reach its prototypes cannot be frozen; it is garbage.
  }
}
