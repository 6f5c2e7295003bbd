import { RE2JS } from 're2js';
import { quote } from '../errors.js';

/**
 * Regular expressions on RE2 (the pure-JavaScript port re2js): matching time is linear in the text
 * for a given pattern, so no pattern and no input can make a match backtrack for seconds as
 * JavaScript's RegExp does on `^(a+)+$`. The price is RE2's syntax: backreferences (`\1`) and
 * lookaround (`(?=`, `(?!`, `(?<=`, `(?<!`) do not exist and are refused when the pattern is
 * compiled. CEL's `matches` is specified with RE2 syntax, so this is also what CEL means.
 *
 * Linear is per pattern: a match can cost up to the text's length times the pattern's compiled
 * size, and compiling costs about its size. The size is estimated from the pattern text before it
 * is compiled (one unit per literal, class and operator, counted repetitions multiply what they
 * repeat), so that a short pattern such as `(?:.{1000}){9}` is refused before it is expanded.
 */
export interface Regex {
  readonly pattern: string;
  /** The estimated size of the compiled program. */
  readonly size: number;
  /** Whether the pattern matches anywhere in `text` (an unanchored search, like RegExp.test). */
  test(text: string): boolean;
}

/** A pattern RE2 cannot compile, or one larger than the size allowed; says which and why. */
export class RegexRefused extends Error {
  constructor(
    readonly pattern: string,
    readonly reason: string,
    readonly hint: string,
  ) {
    super(`the pattern ${quote(pattern)} ${reason}`);
    this.name = 'RegexRefused';
  }
}

const SYNTAX_HINT =
  'Patterns use RE2 syntax: backreferences (\\1) and lookaround ((?=, (?!, (?<=, (?<!) are not supported; ' +
  'match the parts separately, or check the value another way.';

/** Compile `pattern` with RE2, refusing it when its estimated size is over `sizeMax`. */
export function compileRegex(pattern: string, sizeMax: number): Regex {
  const size = estimateRegexSize(pattern);
  if (size > sizeMax) {
    throw new RegexRefused(
      pattern,
      `is too large: about ${size} instructions once its repetitions are expanded; regexSizeMax is ${sizeMax}`,
      'Use smaller counted repetitions ({n,m}), or check lengths with size() / maxLength instead.',
    );
  }
  let compiled: RE2JS;
  try {
    compiled = RE2JS.compile(pattern);
  } catch (error) {
    const message = error instanceof Error ? error.message.replace(/^error parsing regexp: /, '') : String(error);
    throw new RegexRefused(pattern, `is not an RE2 regular expression: ${message}`, SYNTAX_HINT);
  }
  return { pattern, size, test: (text) => compiled.test(text) };
}

/**
 * An upper estimate of the instructions RE2 compiles `pattern` into: literals, classes, anchors
 * and escapes count 1, each alternative and each `*`, `+`, `?` adds a branch, a group adds 2, and
 * `{n,m}` repeats what precedes it up to max(n, m) times (n + 1 for `{n,}`). It only reads the text;
 * whether the syntax is valid is RE2's to say.
 */
export function estimateRegexSize(pattern: string): number {
  interface Frame {
    done: number; // the closed alternatives
    branch: number; // the alternative being read
    alternatives: number;
  }
  const stack: Frame[] = [{ done: 0, branch: 0, alternatives: 1 }];
  let frame = stack[0]!;
  let last = 0; // the size of the last atom, which a quantifier repeats
  const atom = (size: number) => {
    frame.branch += size;
    last = size;
  };
  let i = 0;
  while (i < pattern.length) {
    const c = pattern[i]!;
    if (c === '\\') {
      const d = pattern[i + 1];
      if (d === 'Q') {
        // \Q...\E quotes literally.
        const end = pattern.indexOf('\\E', i + 2);
        const stop = end < 0 ? pattern.length : end;
        for (let j = i + 2; j < stop; j++) atom(1);
        i = end < 0 ? stop : end + 2;
        continue;
      }
      if ((d === 'p' || d === 'P' || d === 'x') && pattern[i + 2] === '{') {
        const end = pattern.indexOf('}', i + 3);
        i = end < 0 ? pattern.length : end + 1;
      } else if (d === 'p' || d === 'P') {
        i += 3;
      } else if (d === 'x') {
        i += 4;
      } else {
        i += 2;
      }
      atom(1);
      continue;
    }
    if (c === '[') {
      i = classEnd(pattern, i);
      atom(1);
      continue;
    }
    if (c === '(') {
      if (pattern[i + 1] === '?') {
        // (?flags) sets flags and is no group; (?:...), (?P<name>...), (?<name>...) open one.
        let j = i + 2;
        while (j < pattern.length && /[a-zA-Z-]/.test(pattern[j]!)) j++;
        if (pattern[j] === ')') {
          i = j + 1;
          continue;
        }
        if (pattern[j] === '<' || pattern[j] === 'P') {
          const end = pattern.indexOf('>', j);
          i = end < 0 ? pattern.length : end + 1;
        } else {
          i = j + 1;
        }
      } else {
        i += 1;
      }
      frame = { done: 0, branch: 0, alternatives: 1 };
      stack.push(frame);
      continue;
    }
    if (c === ')') {
      i += 1;
      if (stack.length === 1) {
        atom(1);
        continue;
      }
      const closed = stack.pop()!;
      frame = stack[stack.length - 1]!;
      atom(closed.done + closed.branch + (closed.alternatives - 1) + 2);
      continue;
    }
    if (c === '|') {
      frame.done += frame.branch;
      frame.branch = 0;
      frame.alternatives += 1;
      last = 0;
      i += 1;
      continue;
    }
    if (c === '*' || c === '+' || c === '?') {
      frame.branch += 1;
      last += 1;
      i += pattern[i + 1] === '?' ? 2 : 1;
      continue;
    }
    if (c === '{') {
      const repeat = /^\{(\d+)(?:(,)(\d*))?\}/.exec(pattern.slice(i, i + 24));
      if (repeat) {
        const min = Number(repeat[1]);
        const max = repeat[2] === undefined ? min : repeat[3] === '' ? min + 1 : Number(repeat[3]);
        const times = Math.max(min, max, 1);
        // The atom is already counted once: add the other copies and one branch per copy.
        frame.branch += last * (times - 1) + times;
        last = last * times + times;
        i += repeat[0].length + (pattern[i + repeat[0].length] === '?' ? 1 : 0);
        continue;
      }
    }
    const code = pattern.codePointAt(i)!;
    i += code > 0xffff ? 2 : 1;
    atom(1);
  }
  // Groups left open (RE2 will refuse the pattern) are closed here so the estimate stays whole.
  while (stack.length > 1) {
    const closed = stack.pop()!;
    frame = stack[stack.length - 1]!;
    frame.branch += closed.done + closed.branch + closed.alternatives + 1;
  }
  return frame.done + frame.branch + (frame.alternatives - 1) + 1;
}

/** The index just past the `]` closing the class that opens at `start`. */
function classEnd(pattern: string, start: number): number {
  let i = start + 1;
  if (pattern[i] === '^') i++;
  if (pattern[i] === ']') i++; // a leading ] is a literal
  while (i < pattern.length && pattern[i] !== ']') {
    if (pattern[i] === '\\') {
      const braced =
        (pattern[i + 1] === 'p' || pattern[i + 1] === 'P' || pattern[i + 1] === 'x') && pattern[i + 2] === '{';
      const end = braced ? pattern.indexOf('}', i + 3) : -1;
      i = end < 0 ? i + 2 : end + 1;
    } else if (pattern[i] === '[' && pattern[i + 1] === ':') {
      const end = pattern.indexOf(':]', i + 2);
      i = end < 0 ? i + 1 : end + 2;
    } else {
      i++;
    }
  }
  return i + 1;
}
