// A fragment's uncommitted writes by key (one generation: unflushed or flushing). Looked up and set
// once per write, so keys are found by a number hashed from their bytes in JavaScript rather than by
// a string made from them (a native call and a string hash per write); the rare keys whose hash
// another key already holds are kept by their exact bytes, as latin1 strings.

import { latin1 } from './bytes.js';

export type PendingEntry = [key: Uint8Array, record: Uint8Array];

/** 31-bit FNV-1a of the key bytes: a small integer, so the map's own hashing of it is cheap. */
export function keyHash(key: Uint8Array): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key[i], 0x01000193);
  return h >>> 1;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export class PendingWrites {
  private readonly byHash = new Map<number, PendingEntry>();
  /** Entries whose key hashes like another key's in `byHash`, by the key as a latin1 string. */
  private collided: Map<string, PendingEntry> | undefined;
  /** Key and record bytes of the entries held. */
  bytes = 0;

  /** Distinct keys held. */
  get size(): number {
    return this.byHash.size + (this.collided === undefined ? 0 : this.collided.size);
  }

  /** The entry of `key` (`hash` is `keyHash(key)`), if any. */
  get(key: Uint8Array, hash: number): PendingEntry | undefined {
    const entry = this.byHash.get(hash);
    if (entry === undefined || sameBytes(entry[0], key)) return entry;
    return this.collided?.get(latin1(key));
  }

  /** Holds `record` as the key's pending write, replacing any held before. */
  set(key: Uint8Array, hash: number, record: Uint8Array): void {
    const held = this.byHash.get(hash);
    if (held === undefined || sameBytes(held[0], key)) {
      if (held !== undefined) this.bytes -= held[0].length + held[1].length;
      this.byHash.set(hash, [key, record]);
    } else {
      this.collided ??= new Map();
      const id = latin1(key);
      const previous = this.collided.get(id);
      if (previous !== undefined) this.bytes -= previous[0].length + previous[1].length;
      this.collided.set(id, [key, record]);
    }
    this.bytes += key.length + record.length;
  }

  /** Every entry, each key once: first by first arrival, then the keys whose hash collided. */
  entries(): PendingEntry[] {
    const out = Array.from(this.byHash.values());
    if (this.collided !== undefined) for (const entry of this.collided.values()) out.push(entry);
    return out;
  }
}
