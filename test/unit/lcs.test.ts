// LCS (src/core/lcs.ts): Redis's documentation example, and properties every answer must have.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  formatLcsRanges,
  type LcsOptions,
  lcsTableBytes,
  longestCommonSubsequence,
  parseLcsRanges,
} from '../../src/core/lcs.js';

const ALL: LcsOptions = { length: false, ranges: true, withRangeLength: true, minRangeLength: 0 };
const b = (s: string) => Buffer.from(s);

test('Redis documentation example: ohmytext and mynewtext', () => {
  const result = longestCommonSubsequence(b('ohmytext'), b('mynewtext'), ALL);
  assert.equal(result.subsequence?.toString(), 'mytext');
  assert.equal(result.length, 6);
  assert.deepEqual(result.ranges, [
    [4, 7, 5, 8, 4],
    [2, 3, 0, 1, 2],
  ]);
  const long = longestCommonSubsequence(b('ohmytext'), b('mynewtext'), { ...ALL, minRangeLength: 4 });
  assert.deepEqual(long.ranges, [[4, 7, 5, 8, 4]]);
  const onlyLength = longestCommonSubsequence(b('ohmytext'), b('mynewtext'), {
    ...ALL,
    length: true,
    ranges: false,
  });
  assert.equal(onlyLength.length, 6);
  assert.equal(onlyLength.subsequence, undefined, 'LEN alone does not walk the table');
});

test('ranges travel as text and back', () => {
  const result = longestCommonSubsequence(b('ohmytext'), b('mynewtext'), ALL);
  assert.deepEqual(parseLcsRanges(formatLcsRanges(result, true)), { length: 6, ranges: result.ranges });
  assert.deepEqual(parseLcsRanges(formatLcsRanges(result, false)).ranges, [
    [4, 7, 5, 8],
    [2, 3, 0, 1],
  ]);
  assert.equal(lcsTableBytes(2, 3), 48);
});

/** The LCS length by the textbook recurrence, memoised. */
function lcsLength(a: Uint8Array, c: Uint8Array): number {
  let row = new Array<number>(c.length + 1).fill(0);
  for (let i = 1; i <= a.length; i++) {
    const next = [0];
    for (let j = 1; j <= c.length; j++)
      next[j] = a[i - 1] === c[j - 1] ? row[j - 1] + 1 : Math.max(row[j], next[j - 1]);
    row = next;
  }
  return row[c.length];
}

const isSubsequence = (s: Uint8Array, of: Uint8Array) => {
  let k = 0;
  for (let i = 0; i < of.length && k < s.length; i++) if (of[i] === s[k]) k++;
  return k === s.length;
};

test('property: the answer is a common subsequence of the longest length; its ranges match and cover it', () => {
  const text = fc.uint8Array({ maxLength: 24 }).map((u) => Buffer.from(u.map((x) => 0x61 + (x % 3))));
  fc.assert(
    fc.property(text, text, (a, c) => {
      const result = longestCommonSubsequence(a, c, ALL);
      assert.equal(result.length, lcsLength(a, c));
      assert.equal(result.subsequence?.length, result.length);
      assert.ok(isSubsequence(result.subsequence!, a) && isSubsequence(result.subsequence!, c));
      let covered = 0;
      for (const [a0, a1, c0, c1, n] of result.ranges) {
        assert.equal(n, a1 - a0 + 1);
        assert.equal(c1 - c0, a1 - a0);
        assert.deepEqual(a.subarray(a0, a1 + 1), c.subarray(c0, c1 + 1));
        covered += n;
      }
      assert.equal(covered, result.length, 'without MINMATCHLEN the ranges hold the whole subsequence');
    }),
  );
});
