// The memory binding: for tests and caches. Nothing outlives the process (`durable = false`), so
// both fences are reached as soon as a commit returns.
//
// A fragment is a Map from the key as a latin1 string (one char per byte, so string order is byte
// order) to a private copy of the record. Pages walk a sorted key list, rebuilt lazily: only when
// the fragment changed since the last page. The bytes the records take are counted as they are
// written (`memoryBytes`), so a node can bound them (`maxMemoryBytes`); on a node without peers a
// tombstone is not kept (`StoreLocation.dropTombstones`).

import { assert } from '../core/assert.js';
import { latin1 } from '../core/bytes.js';
import { invalidInput } from '../core/errors.js';
import { MEMORY_ENTRY_OVERHEAD_BYTES } from '../core/limits.js';
import { isTombstone } from '../core/record.js';
import type { FragmentWrites, KvStore, PageStart, StoredEntry, StoreLocation } from './kv-store.js';
import {
  checkFragment,
  checkKey,
  checkLocation,
  checkPageArgs,
  checkWrites,
  closedError,
} from './open-store.js';

interface MemoryFragment {
  records: Map<string, Buffer>;
  /** The keys in byte order when `dirty` is false; stale otherwise. */
  sorted: string[];
  /** True when a key was added or removed since `sorted` was built. */
  dirty: boolean;
  highWaterWallMs: number;
  /** Key, record and MEMORY_ENTRY_OVERHEAD_BYTES of each entry held. */
  bytes: number;
}

export async function openMemoryStore(location: StoreLocation): Promise<KvStore> {
  checkLocation(location);
  return new MemoryStore(location.fragmentCount, location.dropTombstones === true);
}

class MemoryStore implements KvStore {
  readonly kind = 'memory';
  readonly sharesReaders = false;
  readonly durable = false;

  readonly #fragmentCount: number;
  /** StoreLocation.dropTombstones. */
  readonly #dropTombstones: boolean;
  readonly #fragments = new Map<number, MemoryFragment>();
  /** The sum of the fragments' `bytes`. */
  #bytes = 0;
  #closed = false;

  constructor(fragmentCount: number, dropTombstones: boolean) {
    this.#fragmentCount = fragmentCount;
    this.#dropTombstones = dropTombstones;
  }

  async openFragment(fragment: number): Promise<void> {
    this.#checkOpen();
    checkFragment(fragment, this.#fragmentCount);
    if (this.#fragments.has(fragment)) return;
    this.#fragments.set(fragment, {
      records: new Map(),
      sorted: [],
      dirty: false,
      highWaterWallMs: 0,
      bytes: 0,
    });
  }

  get(fragment: number, key: Uint8Array): Buffer | undefined {
    const f = this.#fragment(fragment);
    checkKey(key);
    const record = f.records.get(latin1(key));
    return record === undefined ? undefined : Buffer.from(record);
  }

  /** Reads always see the latest commit. */
  refreshReads(): void {}

  async page(
    fragment: number,
    start: PageStart | undefined,
    end: Uint8Array | undefined,
    limit: number,
  ): Promise<StoredEntry[]> {
    const f = this.#fragment(fragment);
    checkPageArgs(start, end, limit);
    const sorted = sortedKeys(f);
    const endKey = end === undefined ? undefined : latin1(end);
    const out: StoredEntry[] = [];
    let i = start === undefined ? 0 : firstIndexFrom(sorted, latin1(start.key), start.inclusive);
    for (; i < sorted.length && out.length < limit; i++) {
      const key = sorted[i];
      if (endKey !== undefined && key >= endKey) break;
      out.push({ key: Buffer.from(key, 'latin1'), record: Buffer.from(f.records.get(key)!) });
    }
    return out;
  }

  commit(writes: FragmentWrites[]): void {
    this.#checkOpen();
    checkWrites(writes, this.#fragmentCount);
    for (const w of writes) this.#fragment(w.fragment);
    // Nothing below can fail, so the batch applies whole.
    for (const w of writes) {
      const f = this.#fragments.get(w.fragment)!;
      let bytes = f.bytes;
      for (const key of w.deletes) bytes -= this.#remove(f, key);
      for (const [key, record] of w.puts) {
        if (this.#dropTombstones && isTombstone(record)) {
          bytes -= this.#remove(f, key);
          continue;
        }
        const k = latin1(key);
        const held = f.records.get(k);
        if (held === undefined) f.dirty = true;
        else bytes -= entryBytes(key.length, held.length);
        f.records.set(k, Buffer.from(record));
        bytes += entryBytes(key.length, record.length);
      }
      this.#bytes += bytes - f.bytes;
      f.bytes = bytes;
      if (w.highWaterWallMs > f.highWaterWallMs) f.highWaterWallMs = w.highWaterWallMs;
    }
  }

  memoryBytes(): number {
    return this.#bytes;
  }

  /** Removes the key's entry, if any; returns the bytes it took. */
  #remove(f: MemoryFragment, key: Uint8Array): number {
    const k = latin1(key);
    const held = f.records.get(k);
    if (held === undefined) return 0;
    f.records.delete(k);
    f.dirty = true;
    return entryBytes(key.length, held.length);
  }

  async sync(): Promise<void> {
    this.#checkOpen();
  }

  highWaterWallMs(fragment: number): number {
    return this.#fragment(fragment).highWaterWallMs;
  }

  async backup(): Promise<void> {
    throw invalidInput('backups need a store on disk: the memory store keeps nothing there');
  }

  async dropFragment(fragment: number): Promise<void> {
    const f = this.#fragment(fragment);
    // The high-water mark stays, as in the durable stores: its timestamps were issued.
    f.records.clear();
    f.sorted = [];
    f.dirty = false;
    this.#bytes -= f.bytes;
    f.bytes = 0;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#fragments.clear();
    this.#bytes = 0;
  }

  #fragment(fragment: number): MemoryFragment {
    this.#checkOpen();
    checkFragment(fragment, this.#fragmentCount);
    const f = this.#fragments.get(fragment);
    assert(f !== undefined, 'fragment used before openFragment');
    return f;
  }

  #checkOpen(): void {
    if (this.#closed) throw closedError('memory');
  }
}

function entryBytes(keyBytes: number, recordBytes: number): number {
  return MEMORY_ENTRY_OVERHEAD_BYTES + keyBytes + recordBytes;
}

function sortedKeys(f: MemoryFragment): string[] {
  if (f.dirty) {
    // Default sort compares UTF-16 code units; latin1 chars are all < 0x100, so this is byte order.
    f.sorted = [...f.records.keys()].sort();
    f.dirty = false;
  }
  return f.sorted;
}

/** Index of the first key ≥ `key` (inclusive) or > `key` (exclusive), by binary search. */
function firstIndexFrom(sorted: string[], key: string, inclusive: boolean): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const before = inclusive ? sorted[mid] < key : sorted[mid] <= key;
    if (before) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
