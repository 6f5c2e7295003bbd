/**
 * Writes test/helpers/decimal-vectors.json: `node test/helpers/decimal-vectors.mjs && npx biome format --write
 * test/helpers/decimal-vectors.json`.
 *
 * The expected values come from the reference arithmetic below (scaled BigInts, rounding decided on
 * the magnitude of the exact remainder), written for this file and sharing no code with any decimal
 * of the project; the hand-written vectors' results, worked out by hand, are checked against it too.
 * test/core/decimal.vectors.test.ts runs every vector against every implementation.
 */
import { writeFileSync } from 'node:fs';

const MODES = ['half_even', 'half_up', 'half_down', 'up', 'down', 'ceiling', 'floor'];

/** text -> { c, s }: value = c / 10^s. */
function read(text) {
  const m = /^([+-]?)(\d+)(?:\.(\d+))?$/.exec(text);
  if (!m) throw new Error(`reference: ${text} is not a decimal`);
  const frac = m[3] ?? '';
  const c = BigInt(m[2] + frac);
  return { c: m[1] === '-' ? -c : c, s: frac.length };
}

/** { c, s } -> text with exactly s fraction digits; zero is never negative. */
function write(c, s) {
  const negative = c < 0n;
  const digits = (negative ? -c : c).toString().padStart(s + 1, '0');
  const text = s === 0 ? digits : `${digits.slice(0, digits.length - s)}.${digits.slice(digits.length - s)}`;
  return negative ? `-${text}` : text;
}

const ten = (n) => 10n ** BigInt(n);

function align(a, b) {
  const s = Math.max(a.s, b.s);
  return [a.c * ten(s - a.s), b.c * ten(s - b.s), s];
}

/** The integer nearest num / den in `mode`, decided on |num| / |den| and the sign. */
function roundRational(num, den, mode) {
  if (den === 0n) throw new Error('reference: division by zero');
  const sign = num < 0n === den < 0n ? 1n : -1n;
  const n = num < 0n ? -num : num;
  const d = den < 0n ? -den : den;
  const q = n / d;
  const r = n % d;
  let up = false;
  if (r !== 0n) {
    if (mode === 'up') up = true;
    else if (mode === 'down') up = false;
    else if (mode === 'ceiling') up = sign > 0n;
    else if (mode === 'floor') up = sign < 0n;
    else if (mode === 'half_up') up = 2n * r >= d;
    else if (mode === 'half_down') up = 2n * r > d;
    else if (mode === 'half_even') up = 2n * r > d || (2n * r === d && q % 2n === 1n);
    else throw new Error(`reference: mode ${mode}`);
  }
  return sign * (up ? q + 1n : q);
}

const reference = {
  add: (a, b) => {
    const [x, y, s] = align(read(a), read(b));
    return write(x + y, s);
  },
  sub: (a, b) => {
    const [x, y, s] = align(read(a), read(b));
    return write(x - y, s);
  },
  mul: (a, b) => {
    const x = read(a);
    const y = read(b);
    return write(x.c * y.c, x.s + y.s);
  },
  quo: (a, b, places, mode) => {
    const x = read(a);
    const y = read(b);
    return write(roundRational(x.c * ten(y.s + places), y.c * ten(x.s), mode), places);
  },
  round: (a, places, mode) => {
    const x = read(a);
    if (places >= x.s) return write(x.c * ten(places - x.s), places);
    return write(roundRational(x.c, ten(x.s - places), mode), places);
  },
  cmp: (a, b) => {
    const [x, y] = align(read(a), read(b));
    return x < y ? -1 : x > y ? 1 : 0;
  },
  reduce: (a) => {
    let { c, s } = read(a);
    while (s > 0 && c % 10n === 0n) {
      c /= 10n;
      s--;
    }
    return write(c, s);
  },
  neg: (a) => {
    const x = read(a);
    return write(-x.c, x.s);
  },
  abs: (a) => {
    const x = read(a);
    return write(x.c < 0n ? -x.c : x.c, x.s);
  },
  // Surrounding whitespace is trimmed (where an implementation refuses it, the vector says so).
  parse: (a) => {
    const x = read(a.trim());
    return write(x.c, x.s);
  },
  /** Exact division: the quotient when it has a finite decimal expansion, reduced; null otherwise. */
  div: (a, b) => {
    const x = read(a);
    const y = read(b);
    let num = x.c * ten(y.s);
    let den = y.c * ten(x.s);
    if (den < 0n) {
      num = -num;
      den = -den;
    }
    // A finite expansion needs den (in lowest terms) to have no prime factors but 2 and 5.
    const gcd = (p, q) => (q === 0n ? (p < 0n ? -p : p) : gcd(q, p % q));
    const g = gcd(num, den);
    const d = den / g;
    let rest = d;
    let twos = 0;
    let fives = 0;
    while (rest % 2n === 0n) {
      rest /= 2n;
      twos++;
    }
    while (rest % 5n === 0n) {
      rest /= 5n;
      fives++;
    }
    if (rest !== 1n) return null;
    const s = Math.max(twos, fives);
    return reference.reduce(write((num / g) * (ten(s) / d), s));
  },
};

const vectors = [];
const seen = new Set();
function add(op, args, extra = {}) {
  const key = JSON.stringify([op, args]);
  if (seen.has(key)) return;
  seen.add(key);
  const vector = { op, args, ...extra };
  if (!('error' in extra)) {
    const expected = reference[op](...args);
    if ('result' in extra && extra.result !== expected) {
      throw new Error(
        `hand-worked ${key} = ${JSON.stringify(extra.result)}, reference says ${JSON.stringify(expected)}`,
      );
    }
    if (expected === null) vector.error = 'inexact';
    else vector.result = expected;
  }
  vectors.push(vector);
}

// --- add and subtract: worked by hand, then scale differences, signs, carries, many digits ---
const hand = [
  ['add', ['1.50', '2'], '3.50'],
  ['add', ['0', '21.00'], '21.00'],
  ['add', ['0.00', '0'], '0.00'],
  ['add', ['0', '0'], '0'],
  ['add', ['140567', '1.0'], '140568.0'],
  ['add', ['999999999999999', '1'], '1000000000000000'],
  ['add', ['99999999999999.9', '0.1'], '100000000000000.0'],
  ['add', ['0.000000000000001', '0.000000000000009'], '0.000000000000010'],
  ['add', ['-1.5', '2.25'], '0.75'],
  ['add', ['-1.5', '1.5'], '0.0'],
  ['add', ['-3', '1'], '-2'],
  ['add', ['1.5', '-0.25'], '1.25'],
  ['add', ['0.1', '0.2'], '0.3'],
  ['add', ['1234567890123456', '1'], '1234567890123457'],
  ['add', ['0.1234567890123456', '1'], '1.1234567890123456'],
  ['sub', ['10.50', '0.50'], '10.00'],
  ['sub', ['0', '5'], '-5'],
  ['sub', ['5', '5.000'], '0.000'],
  ['sub', ['0.3', '0.1'], '0.2'],
  ['sub', ['-2', '-2'], '0'],
  ['sub', ['1', '0.000000000000000001'], '0.999999999999999999'],
  ['sub', ['1000000000000000', '1'], '999999999999999'],
  ['sub', ['100', '100.01'], '-0.01'],
  ['mul', ['1.50', '2.0'], '3.000'],
  ['mul', ['0.1', '0.1'], '0.01'],
  ['mul', ['-2.5', '4'], '-10.0'],
  ['mul', ['-2.5', '-0.4'], '1.00'],
  ['mul', ['0', '-7.25'], '0.00'],
  ['mul', ['123456789', '987654321'], '121932631112635269'],
  ['quo', ['1', '3', 4, 'half_even'], '0.3333'],
  ['quo', ['2', '3', 4, 'half_even'], '0.6667'],
  ['quo', ['1', '1', 2, 'half_even'], '1.00'],
  ['quo', ['-1', '3', 2, 'floor'], '-0.34'],
  ['quo', ['-1', '3', 2, 'ceiling'], '-0.33'],
  ['quo', ['10', '4', 0, 'half_even'], '2'],
  ['quo', ['14', '4', 0, 'half_even'], '4'],
  ['quo', ['10', '4', 0, 'half_up'], '3'],
  ['quo', ['10', '4', 0, 'half_down'], '2'],
  ['quo', ['1.00', '0.3', 3, 'down'], '3.333'],
  ['quo', ['1.00', '0.3', 3, 'up'], '3.334'],
  ['round', ['2.5', 0, 'half_even'], '2'],
  ['round', ['3.5', 0, 'half_even'], '4'],
  ['round', ['-2.5', 0, 'half_even'], '-2'],
  ['round', ['-2.5', 0, 'half_up'], '-3'],
  ['round', ['-2.5', 0, 'half_down'], '-2'],
  ['round', ['-2.1', 0, 'up'], '-3'],
  ['round', ['-2.9', 0, 'down'], '-2'],
  ['round', ['-2.1', 0, 'ceiling'], '-2'],
  ['round', ['-2.1', 0, 'floor'], '-3'],
  ['round', ['1.005', 2, 'half_up'], '1.01'],
  ['round', ['1.005', 2, 'half_even'], '1.00'],
  ['round', ['2', 2, 'half_even'], '2.00'],
  ['round', ['0.004', 2, 'half_up'], '0.00'],
  ['round', ['-0.004', 2, 'half_up'], '0.00'],
  ['round', ['-0.004', 2, 'floor'], '-0.01'],
  ['round', ['9.999', 2, 'half_up'], '10.00'],
  ['cmp', ['1.0', '1'], 0],
  ['cmp', ['-0', '0'], 0],
  ['cmp', ['-0.00', '0'], 0],
  ['cmp', ['0.1', '0.10000000000000000001'], -1],
  ['cmp', ['-1', '-2'], 1],
  ['cmp', ['100', '99.999999999999999999'], 1],
  ['reduce', ['1.500'], '1.5'],
  ['reduce', ['100'], '100'],
  ['reduce', ['100.000'], '100'],
  ['reduce', ['0.000'], '0'],
  ['reduce', ['-0.10'], '-0.1'],
  ['neg', ['0.00'], '0.00'],
  ['neg', ['-1.50'], '1.50'],
  ['abs', ['-0.50'], '0.50'],
  ['abs', ['7'], '7'],
  ['div', ['1', '4'], '0.25'],
  ['div', ['1', '8'], '0.125'],
  ['div', ['-3', '0.2'], '-15'],
  ['div', ['10.50', '2'], '5.25'],
  ['div', ['1', '3'], null],
  ['div', ['2', '7'], null],
];
for (const [op, args, result] of hand) {
  if (result === null) add(op, args, { error: 'inexact' });
  else add(op, args, { result });
}

// Negative zero: '-0' is zero, and prints without a sign.
for (const z of ['-0', '-0.00', '+0']) {
  add('parse', [z]);
  add('add', [z, '0']);
  add('sub', ['0', z.replace('+', '')]);
  add('neg', [z.replace('+', '')]);
  add('mul', [z.replace('+', ''), '5']);
}
add('add', ['-0.5', '0.5']);
add('mul', ['-1', '0']);
add('round', ['-0.4', 0, 'half_even']);
add('quo', ['-1', '1000', 2, 'half_even']);

// Scale differences, both ways round, and signs.
const scaled = ['1', '1.0', '1.00', '0.001', '12.3456', '-7.5', '-0.000000000000000001', '999999.99'];
for (const a of scaled) {
  for (const b of ['2', '0.25', '-3.125', '0.000000000000000009']) {
    add('add', [a, b]);
    add('sub', [a, b]);
    add('sub', [b, a]);
  }
}
for (const [a, b] of [
  ['1.1', '1.10'],
  ['2.50', '2.5'],
  ['-3', '-3.000'],
  ['0.00', '-0.01'],
  ['123456789012345678901234567890', '123456789012345678901234567891'],
  ['-0.000000000000000001', '0'],
]) {
  add('cmp', [a, b]);
  add('cmp', [b, a]);
}

// Many digits: 30 integer and 18 fraction digits (the ledger's largest amount), and carries across.
const big = '999999999999999999999999999999.999999999999999999';
const small = '0.000000000000000001';
add('add', ['999999999999999999999999999998.999999999999999999', small]);
add('add', ['123456789012345678901234567890.123456789012345678', '876543210987654321098765432109.876543210987654321']);
add('sub', [big, big]);
add('sub', ['0', big]);
add('sub', [small, '1']);
add('add', [`-${big}`, '1']);
add('add', ['100000000000000000000000000000', `-${small}`]);
add('mul', ['99999999999999999999', '99999999999999999999']);
add('mul', ['0.000000001', '0.000000001']);
add('mul', ['123456789.123456789', '-987654321.987654321']);
add('quo', ['1', '7', 18, 'half_even']);
add('quo', ['22', '7', 30, 'half_even']);
add('quo', ['-100', '3', 18, 'half_up']);
add('quo', ['123456789012345678901234567890', '0.000000000000000003', 0, 'half_even']);
add('reduce', ['1000000.000000000000000000']);
add('parse', [big]);
add('parse', [`-${small}`]);
add('parse', ['0000123.4500']);

// Every rounding mode on the cases that tell them apart: halves (odd and even), just past and just
// short of a half, negatives, and values already at the scale.
for (const x of ['2.5', '3.5', '-2.5', '-3.5', '2.51', '2.49', '-2.51', '0.05', '-0.05', '7']) {
  for (const mode of MODES) add('round', [x, 0, mode]);
}
for (const x of ['1.2345', '-1.2345', '1.2355', '0.00005']) {
  for (const mode of MODES) add('round', [x, 3, mode]);
}
for (const [a, b] of [
  ['1', '8'],
  ['-1', '8'],
  ['5', '-8'],
  ['2', '3'],
]) {
  for (const mode of MODES) add('quo', [a, b, 2, mode]);
}

// Past the working precision of decimal.js (80 digits): a quotient whose exact value is a hair
// above a half must still round up (rounding the 80-digit quotient first would land on the half).
// 5·10^79 + 1 over 2·10^79 is 2.5 + 5·10^-80: 81 significant digits.
add('quo', [`5${'0'.repeat(78)}1`, `2${'0'.repeat(79)}`, 0, 'half_even']);
add('quo', [`-5${'0'.repeat(78)}1`, `2${'0'.repeat(79)}`, 0, 'half_even']);
add('quo', [`5${'0'.repeat(78)}1`, `2${'0'.repeat(78)}`, 0, 'half_even']);

// Parsing: what is a decimal, and what is not (each implementation throws its own error).
for (const text of ['1e5', '.5', '5.', '', '-', '1.2.3', '0x10', '1,5', 'NaN', 'Infinity', '- 1', '++1']) {
  add('parse', [text], { error: 'syntax' });
}
// Whitespace around the digits: decimal() in CEL and in tool programs trims it; the wire does not.
add('parse', [' 1.5 '], { result: '1.5', except: { host: { error: 'syntax' } } });

// The digit limits: the ledger's amounts (decimalIntegerDigitsMax 30, decimalFractionDigitsMax 18),
// CEL's working precision (80 digits), and the tool programs' decimals (1,000 digits).
add('parse', [`1${'0'.repeat(29)}`], { result: `1${'0'.repeat(29)}` });
add('parse', [`1${'0'.repeat(30)}`], { result: `1${'0'.repeat(30)}`, except: { host: { error: 'digits' } } });
add('parse', [`0.${'1'.repeat(18)}`], { result: `0.${'1'.repeat(18)}` });
add('parse', [`0.${'1'.repeat(19)}`], { result: `0.${'1'.repeat(19)}`, except: { host: { error: 'digits' } } });
add('parse', ['9'.repeat(80)], { result: '9'.repeat(80), except: { host: { error: 'digits' } } });
add('parse', ['9'.repeat(81)], {
  result: '9'.repeat(81),
  except: { host: { error: 'digits' }, cel: { error: 'digits' } },
});
add('parse', ['9'.repeat(1000)], {
  result: '9'.repeat(1000),
  except: { host: { error: 'digits' }, cel: { error: 'digits' } },
});
add('parse', [`1${'0'.repeat(1000)}`], { error: 'digits' });
add('parse', [`0.${'0'.repeat(999)}1`], {
  result: `0.${'0'.repeat(999)}1`,
  except: { host: { error: 'digits' }, cel: { error: 'digits' } },
});
add('parse', [`0.${'0'.repeat(1000)}1`], { error: 'digits' });
// Arithmetic past 80 digits is the tool programs' alone (the others' domains end before).
add('add', ['9'.repeat(500), '1']);
add('mul', ['9'.repeat(500), '9'.repeat(499)]);
// (10^500 - 1)^2 has 1,000 digits, the most a decimal holds; 10^500 squared has 1,001.
add('mul', ['9'.repeat(500), '9'.repeat(500)]);
add('mul', [`1${'0'.repeat(500)}`, `1${'0'.repeat(500)}`], { error: 'digits' });
add('sub', [`0.${'0'.repeat(998)}1`, `0.${'0'.repeat(999)}1`]);

// Division by zero, in every form of zero.
for (const zero of ['0', '0.00', '-0']) add('quo', ['1', zero, 2, 'half_even'], { error: 'division by zero' });
add('div', ['1', '0'], { error: 'division by zero' });

writeFileSync(
  new URL('./decimal-vectors.json', import.meta.url),
  `${JSON.stringify(
    {
      '//': 'Generated by test/helpers/decimal-vectors.mjs (expected values from its own BigInt reference); run by test/core/decimal.vectors.test.ts against every decimal implementation.',
      vectors,
    },
    null,
    1,
  )}\n`,
);
console.log(`${vectors.length} vectors`);
