// LCS: the longest common subsequence of two values, by Redis 7.0's method — the full dynamic
// programming table, then one walk back from its corner — so that where several subsequences are
// equally long, the one returned, and its matching ranges, are the ones Redis returns.

/** What LCS answers: the subsequence, its length, or its matching ranges (IDX). */
export interface LcsOptions {
  /** LEN: only the length. */
  length: boolean;
  /** IDX: the matching ranges, longest-last order as Redis walks them, and the length. */
  ranges: boolean;
  /** WITHMATCHLEN: each range also carries its length. */
  withRangeLength: boolean;
  /** MINMATCHLEN: ranges shorter than this are left out (0: none). */
  minRangeLength: number;
}

/** One matching range: [aStart, aEnd, bStart, bEnd, length] (inclusive byte offsets). */
export type LcsRange = [number, number, number, number, number];

export interface LcsResult {
  length: number;
  /** The subsequence itself (unless only the length was asked for). */
  subsequence: Buffer | undefined;
  ranges: LcsRange[];
}

/** Bytes the table takes, as Redis counts them (4 per cell); compared with the value limit. */
export function lcsTableBytes(aLength: number, bLength: number): number {
  return (aLength + 1) * (bLength + 1) * 4;
}

export function longestCommonSubsequence(a: Uint8Array, b: Uint8Array, options: LcsOptions): LcsResult {
  const columns = b.length + 1;
  // table[i * columns + j]: the LCS length of a[0..i) and b[0..j).
  const table = new Uint32Array((a.length + 1) * columns);
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const at = i * columns + j;
      if (a[i - 1] === b[j - 1]) table[at] = table[at - columns - 1] + 1;
      else {
        const up = table[at - columns];
        const left = table[at - 1];
        table[at] = Math.max(up, left);
      }
    }
  }
  const length = table[a.length * columns + b.length];
  const ranges: LcsRange[] = [];
  if (options.length && !options.ranges) return { length, subsequence: undefined, ranges };

  const subsequence = Buffer.allocUnsafe(length);
  let left = length;
  // The range being grown backwards; aStart === a.length means none.
  let aStart = a.length;
  let aEnd = 0;
  let bStart = 0;
  let bEnd = 0;
  let i = a.length;
  let j = b.length;
  while (i > 0 && j > 0) {
    let emit = false;
    if (a[i - 1] === b[j - 1]) {
      subsequence[left - 1] = a[i - 1];
      if (aStart === a.length) {
        aStart = aEnd = i - 1;
        bStart = bEnd = j - 1;
      } else if (aStart === i && bStart === j) {
        aStart--;
        bStart--;
      } else {
        emit = true;
      }
      // A match with the first byte of either value ends the walk: emit now.
      if (aStart === 0 || bStart === 0) emit = true;
      left--;
      i--;
      j--;
    } else {
      if (table[(i - 1) * columns + j] > table[i * columns + j - 1]) i--;
      else j--;
      if (aStart !== a.length) emit = true;
    }
    if (emit) {
      const rangeLength = aEnd - aStart + 1;
      if (options.minRangeLength === 0 || rangeLength >= options.minRangeLength) {
        ranges.push([aStart, aEnd, bStart, bEnd, rangeLength]);
      }
      aStart = a.length;
    }
  }
  return { length, subsequence, ranges };
}

/** IDX's answer as text for the result ring: "length" then ";aStart,aEnd,bStart,bEnd[,length]" each. */
export function formatLcsRanges(result: LcsResult, withRangeLength: boolean): string {
  let text = String(result.length);
  for (const r of result.ranges) text += `;${(withRangeLength ? r : r.slice(0, 4)).join(',')}`;
  return text;
}

/** Reads `formatLcsRanges`' text back: the length and the ranges as number lists. */
export function parseLcsRanges(text: string): { length: number; ranges: number[][] } {
  const [length, ...ranges] = text.split(';');
  return { length: Number(length), ranges: ranges.map((r) => r.split(',').map(Number)) };
}
