// A set of fragment numbers as a bitmap, for what a hot path records per operation (a connection's
// written fragments, for WAIT): adding one is a word read and write, never an allocation once the
// bitmap exists (it is allocated at the first add, one bit per fragment of the cluster).

import { assert } from './assert.js';

export class FragmentSet {
  private words: Uint32Array | undefined;
  private count = 0;

  constructor(private readonly fragmentCount: number) {
    assert(Number.isInteger(fragmentCount) && fragmentCount >= 1, `fragment count ${fragmentCount}`);
  }

  add(fragment: number): void {
    let words = this.words;
    if (words === undefined) words = this.words = new Uint32Array((this.fragmentCount + 31) >>> 5);
    const at = fragment >>> 5;
    const bit = 1 << (fragment & 31);
    if ((words[at] & bit) !== 0) return;
    words[at] |= bit;
    this.count++;
  }

  has(fragment: number): boolean {
    const words = this.words;
    return words !== undefined && (words[fragment >>> 5] & (1 << (fragment & 31))) !== 0;
  }

  get size(): number {
    return this.count;
  }

  delete(fragment: number): void {
    const words = this.words;
    if (words === undefined) return;
    const at = fragment >>> 5;
    const bit = 1 << (fragment & 31);
    if ((words[at] & bit) === 0) return;
    words[at] &= ~bit;
    this.count--;
  }

  clear(): void {
    if (this.count === 0) return;
    this.words?.fill(0);
    this.count = 0;
  }

  /** The fragments in the set, ascending. */
  toArray(): number[] {
    const out: number[] = [];
    const words = this.words;
    if (words === undefined) return out;
    for (let at = 0; at < words.length && out.length < this.count; at++) {
      let word = words[at];
      while (word !== 0) {
        const low = word & -word;
        out.push((at << 5) + 31 - Math.clz32(low));
        word ^= low;
      }
    }
    return out;
  }
}
