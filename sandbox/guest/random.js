// @ts-check

// Math.random, reseeded from each call's event on first use in that call: the generator's
// position cannot carry anything from one execution into the next (xorshift128, not for secrets).
let pendingSeed = '';
let x0 = 1,
  x1 = 2,
  x2 = 3,
  x3 = 4;
/** @param {string} text */
function seed(text) {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  x0 = h | 1;
  x1 = Math.imul(h, 1597334677) | 1;
  x2 = Math.imul(h ^ 0x9e3779b9, 2246822507) | 1;
  x3 = Math.imul(h ^ 0x85ebca6b, 3266489909) | 1;
}
function random() {
  if (pendingSeed !== '') {
    seed(pendingSeed);
    pendingSeed = '';
  }
  const t = x0 ^ (x0 << 11);
  x0 = x1;
  x1 = x2;
  x2 = x3;
  x3 = x3 ^ (x3 >>> 19) ^ (t ^ (t >>> 8));
  return (x3 >>> 0) / 4294967296;
}
Object.defineProperty(Math, 'random', { value: random, writable: true, enumerable: false, configurable: true });
