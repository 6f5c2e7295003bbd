import { limitExceeded } from './errors.js';

/** Keys that would reach an object's prototype if assigned with `obj[key] = ...`. */
const RESERVED_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

export function isReservedKey(key: string): boolean {
  return RESERVED_KEYS.has(key);
}

/** Assign an own property, whatever its name (`__proto__` included), without touching prototypes. */
export function setOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  if (RESERVED_KEYS.has(key))
    Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  else target[key] = value;
}

/**
 * Refuse JSON nested deeper than `depthMax`: recursive code further on (serialisers, CEL) would
 * otherwise overflow the host stack. Iterative, so the check itself cannot overflow.
 */
export function checkJsonDepth(value: unknown, depthMax: number, what: string): void {
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (node === null || typeof node !== 'object') continue;
    if (depth > depthMax) {
      throw limitExceeded(
        'jsonDepthMax',
        depthMax,
        depth,
        `${what} is nested more than ${depthMax} levels deep (jsonDepthMax)`,
        {
          hint: 'Flatten the structure.',
        },
      );
    }
    for (const child of Array.isArray(node) ? node : Object.values(node)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
    }
  }
}
