// A fragment's uncommitted writes (one generation: unflushed or flushing), in arrival order. Most
// generations are only written and then committed — a write newer than everything the fragment holds
// needs no lookup — so the writes are a list, and the index by key is built on the first lookup and
// kept from then on. Until then a key written again is held twice (the later write wins when the
// list is applied in order), except right after itself (a hot key), which replaces in place. Keys
// are indexed by a number hashed from their bytes in JavaScript rather than by a string made from
// them (a native call and a string hash per write); the rare keys whose hash another key already
// holds are indexed by their exact bytes, as latin1 strings.

import { latin1 } from './bytes.js';

export type PendingEntry = [key: Uint8Array, record: Uint8Array];

/** A key hash not computed yet (`PendingWrites.set`). */
export const HASH_UNKNOWN = -1;

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
  private readonly list: PendingEntry[] = [];
  /** The hash of each entry's key, or HASH_UNKNOWN until the index needs it. */
  private readonly hashes: number[] = [];
  /** Position in `list` of each key's entry, by hash; undefined until the first lookup. */
  private byHash: Map<number, number> | undefined;
  /** Positions of the keys whose hash another key in `byHash` holds, by the key as a latin1 string. */
  private collided: Map<string, number> | undefined;
  /** Key and record bytes of the entries held. */
  bytes = 0;

  /** Entries held: each key once after the first lookup, before it a key written apart twice counts twice. */
  get size(): number {
    return this.list.length;
  }

  /** The entry of `key` (`hash` is `keyHash(key)`, or HASH_UNKNOWN), if any. */
  get(key: Uint8Array, hash: number): PendingEntry | undefined {
    if (this.list.length === 0) return undefined;
    if (this.byHash === undefined) this.buildIndex();
    const at = this.positionOf(key, hash === HASH_UNKNOWN ? keyHash(key) : hash);
    return at === -1 ? undefined : this.list[at];
  }

  /** Holds `record` as the key's pending write, replacing any held before (`hash` as for `get`). */
  set(key: Uint8Array, hash: number, record: Uint8Array): void {
    const list = this.list;
    this.bytes += key.length + record.length;
    if (this.byHash === undefined) {
      const last = list.length - 1;
      if (last >= 0 && sameBytes(list[last][0], key)) return this.replace(last, record);
      list.push([key, record]);
      this.hashes.push(hash);
      return;
    }
    const h = hash === HASH_UNKNOWN ? keyHash(key) : hash;
    const at = this.positionOf(key, h);
    if (at !== -1) return this.replace(at, record);
    this.index(key, h, list.length);
    list.push([key, record]);
    this.hashes.push(h);
  }

  /**
   * Every entry, in arrival order (a key's place is its first arrival). Once indexed, each key
   * appears once; before, a key may appear again later, and the later entry is its write. The array
   * is the holder's own: take it only from a generation that is done.
   */
  entries(): PendingEntry[] {
    return this.list;
  }

  private replace(at: number, record: Uint8Array): void {
    const entry = this.list[at];
    this.bytes -= entry[0].length + entry[1].length;
    entry[1] = record;
  }

  private positionOf(key: Uint8Array, hash: number): number {
    const at = this.byHash!.get(hash);
    if (at === undefined) return -1;
    if (sameBytes(this.list[at][0], key)) return at;
    return this.collided?.get(latin1(key)) ?? -1;
  }

  private index(key: Uint8Array, hash: number, at: number): void {
    if (!this.byHash!.has(hash)) this.byHash!.set(hash, at);
    else (this.collided ??= new Map()).set(latin1(key), at);
  }

  /** Indexes the list, folding each key's later entries into its first. */
  private buildIndex(): void {
    this.byHash = new Map();
    const list = this.list;
    const hashes = this.hashes;
    let kept = 0;
    for (let i = 0; i < list.length; i++) {
      const entry = list[i];
      const hash = hashes[i] === HASH_UNKNOWN ? keyHash(entry[0]) : hashes[i];
      const at = this.positionOf(entry[0], hash);
      if (at !== -1) {
        this.replace(at, entry[1]);
        continue;
      }
      this.index(entry[0], hash, kept);
      list[kept] = entry;
      hashes[kept++] = hash;
    }
    list.length = kept;
    hashes.length = kept;
  }
}
