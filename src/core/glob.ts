// Redis-style glob patterns over bytes (KEYS, SCAN MATCH): `*` any run, `?` one byte, `[abc]`,
// `[^a-z]` classes with ranges, `\x` a literal x. Matching backtracks only to the last `*`, so it
// runs in O(pattern × key) at worst, never exponentially.

const STAR = 0x2a;
const QUESTION = 0x3f;
const OPEN = 0x5b;
const CLOSE = 0x5d;
const CARET = 0x5e;
const DASH = 0x2d;
const BACKSLASH = 0x5c;

/** Matches one pattern element at `p` against byte `c`; returns the index after the element, or -1. */
function matchOne(pattern: Uint8Array, p: number, c: number): number {
  const ch = pattern[p];
  if (ch === QUESTION) return p + 1;
  if (ch === BACKSLASH && p + 1 < pattern.length) return pattern[p + 1] === c ? p + 2 : -1;
  if (ch !== OPEN) return ch === c ? p + 1 : -1;
  let i = p + 1;
  const negate = pattern[i] === CARET;
  if (negate) i++;
  let matched = false;
  while (i < pattern.length && pattern[i] !== CLOSE) {
    if (pattern[i] === BACKSLASH && i + 1 < pattern.length) {
      if (pattern[i + 1] === c) matched = true;
      i += 2;
    } else if (i + 2 < pattern.length && pattern[i + 1] === DASH && pattern[i + 2] !== CLOSE) {
      let lo = pattern[i];
      let hi = pattern[i + 2];
      if (lo > hi) [lo, hi] = [hi, lo];
      if (c >= lo && c <= hi) matched = true;
      i += 3;
    } else {
      if (pattern[i] === c) matched = true;
      i++;
    }
  }
  // An unterminated class runs to the end of the pattern, as in Redis.
  const next = i < pattern.length ? i + 1 : i;
  return matched !== negate ? next : -1;
}

export function globMatch(pattern: Uint8Array, key: Uint8Array): boolean {
  let p = 0;
  let k = 0;
  let starP = -1;
  let starK = 0;
  while (k < key.length) {
    if (p < pattern.length && pattern[p] === STAR) {
      while (p < pattern.length && pattern[p] === STAR) p++;
      starP = p;
      starK = k;
      continue;
    }
    const next = p < pattern.length ? matchOne(pattern, p, key[k]) : -1;
    if (next !== -1) {
      p = next;
      k++;
    } else if (starP !== -1) {
      p = starP;
      k = ++starK;
    } else {
      return false;
    }
  }
  while (p < pattern.length && pattern[p] === STAR) p++;
  return p === pattern.length;
}

/** The literal prefix of a pattern (bytes before its first special character), to narrow a scan. */
export function literalPrefix(pattern: Uint8Array): Uint8Array {
  let i = 0;
  while (i < pattern.length) {
    const ch = pattern[i];
    if (ch === STAR || ch === QUESTION || ch === OPEN || ch === BACKSLASH) break;
    i++;
  }
  return pattern.subarray(0, i);
}
