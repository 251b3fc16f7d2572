// The memory binding: for tests and caches. Nothing outlives the process (`durable = false`), so
// both fences are reached as soon as a commit returns.
//
// A fragment is a Map from the key as a latin1 string (one char per byte, so string order is byte
// order) to a private copy of the record. Pages walk a sorted list of the keys, a snapshot: sorting
// tens of thousands of keys takes a worker ~100 ms here, so the list is brought up to date only for
// a scan that starts (a page from the first key, or from a range's start) after keys were added or
// removed — by sorting the keys added since and merging them in — never for a scan that resumes. A
// resumed page skips the keys deleted since and does not see those added since, which is what a
// scan promises (every key present for the whole iteration, at least once).
//
// The bytes the records take are counted as they are written (`memoryBytes`), so a node can bound
// them (`maxMemoryBytes`); on a node without peers a tombstone is not kept
// (`StoreLocation.dropTombstones`), and an eviction policy may remove the least recently used
// entries to make room (`evict`), approximately, as Redis does: each fragment keeps its candidate
// keys in a Map with the store's use clock at their last use (a read or a write stamps the key in
// place: moving it to the Map's end instead costs ~2 µs a use here, for the Map's deleted slots),
// and an eviction takes the oldest of EVICTION_SAMPLE_KEYS keys read at the fragments' hands, each
// a cursor that goes round its Map.

import { assert } from '../core/assert.js';
import { latin1 } from '../core/bytes.js';
import { invalidInput } from '../core/errors.js';
import {
  EVICTION_SAMPLE_KEYS,
  MEMORY_ENTRY_OVERHEAD_BYTES,
  MEMORY_RECENCY_ENTRY_BYTES,
} from '../core/limits.js';
import { expiresAtOf, isTombstone } from '../core/record.js';
import type {
  FragmentSize,
  FragmentWrites,
  KvStore,
  PageStart,
  StoredEntry,
  StoreLocation,
} from './kv-store.js';
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
  /**
   * The keys eviction may remove, each with the use clock's reading at its last use: every key
   * (`allkeys-lru`) or those with a deadline (`volatile-lru`); undefined without an eviction policy.
   */
  recency: Map<string, number> | undefined;
  /** Where eviction reads `recency` next (undefined: from its start). */
  hand: Iterator<[string, number]> | undefined;
  /** The keys in byte order as of its last update (a snapshot); undefined until a page needs it. */
  sorted: string[] | undefined;
  /** Keys added since `sorted` was updated, in no order (kept only while there is a snapshot). */
  added: string[];
  /** Keys removed since `sorted` was updated (still in it, skipped by pages). */
  removed: Set<string>;
  highWaterWallMs: number;
  /** Key, record and MEMORY_ENTRY_OVERHEAD_BYTES of each entry; MEMORY_RECENCY_ENTRY_BYTES of each in `recency`. */
  bytes: number;
}

export async function openMemoryStore(location: StoreLocation): Promise<KvStore> {
  checkLocation(location);
  const dropTombstones = location.dropTombstones === true;
  // An evicted key is simply absent: only where a delete is too (no tombstone is kept).
  assert(
    location.eviction === undefined || dropTombstones,
    'eviction needs a store that keeps no tombstones',
  );
  return new MemoryStore(location.fragmentCount, dropTombstones, location.eviction);
}

class MemoryStore implements KvStore {
  readonly kind = 'memory';
  readonly sharesReaders = false;
  readonly durable = false;
  /** Nothing outlives the process: no log. */
  readonly logsWrites = false;

  readonly #fragmentCount: number;
  /** StoreLocation.dropTombstones. */
  readonly #dropTombstones: boolean;
  /** StoreLocation.eviction. */
  readonly #eviction: StoreLocation['eviction'];
  readonly #fragments = new Map<number, MemoryFragment>();
  /** The sum of the fragments' `bytes`. */
  #bytes = 0;
  /** Counts uses (reads and writes), turning at USE_CLOCK_MASK + 1. */
  #useClock = 0;
  /** The fragment an eviction's sample starts at, in turn. */
  #evictTurn = 0;
  #closed = false;

  constructor(fragmentCount: number, dropTombstones: boolean, eviction: StoreLocation['eviction']) {
    this.#fragmentCount = fragmentCount;
    this.#dropTombstones = dropTombstones;
    this.#eviction = eviction;
  }

  async openFragment(fragment: number): Promise<void> {
    this.#checkOpen();
    checkFragment(fragment, this.#fragmentCount);
    if (this.#fragments.has(fragment)) return;
    this.#fragments.set(fragment, {
      records: new Map(),
      recency: this.#eviction === undefined ? undefined : new Map(),
      hand: undefined,
      sorted: undefined,
      added: [],
      removed: new Set(),
      highWaterWallMs: 0,
      bytes: 0,
    });
  }

  get(fragment: number, key: Uint8Array): Buffer | undefined {
    const f = this.#fragment(fragment);
    checkKey(key);
    const k = latin1(key);
    const record = f.records.get(k);
    if (record === undefined) return undefined;
    // A read is a use (of a key that is a candidate at all: under allkeys-lru every key held is).
    const recency = f.recency;
    if (recency !== undefined && (this.#eviction === 'allkeys-lru' || recency.has(k)))
      recency.set(k, this.#tick());
    return Buffer.from(record);
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
    const starting = start === undefined || start.inclusive;
    if (f.sorted === undefined || (starting && (f.added.length > 0 || f.removed.size > 0))) updateSorted(f);
    const sorted = f.sorted!;
    const endKey = end === undefined ? undefined : latin1(end);
    const out: StoredEntry[] = [];
    let i = start === undefined ? 0 : firstIndexFrom(sorted, latin1(start.key), start.inclusive);
    for (; i < sorted.length && out.length < limit; i++) {
      const key = sorted[i];
      if (endKey !== undefined && key >= endKey) break;
      const record = f.records.get(key);
      // Deleted since the snapshot was taken.
      if (record === undefined) continue;
      out.push({ key: Buffer.from(key, 'latin1'), record: Buffer.from(record) });
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
      for (const key of w.deletes) bytes -= this.#remove(f, latin1(key));
      for (const [key, record] of w.puts) {
        const k = latin1(key);
        if (this.#dropTombstones && isTombstone(record)) {
          bytes -= this.#remove(f, k);
          continue;
        }
        const held = f.records.get(k);
        if (held === undefined) noteAdded(f, k);
        else bytes -= entryBytes(key.length, held.length);
        f.records.set(k, Buffer.from(record));
        bytes += entryBytes(key.length, record.length);
        if (f.recency !== undefined) bytes += this.#used(f.recency, k, record, held === undefined);
      }
      this.#bytes += bytes - f.bytes;
      f.bytes = bytes;
      if (w.highWaterWallMs > f.highWaterWallMs) f.highWaterWallMs = w.highWaterWallMs;
    }
  }

  memoryBytes(): number {
    return this.#bytes;
  }

  evict(bytes: number): number {
    this.#checkOpen();
    if (this.#eviction === undefined) return 0;
    const fragments = [...this.#fragments.values()].filter((f) => f.recency!.size > 0);
    const keys: string[] = [];
    const stamps: number[] = [];
    const owners: MemoryFragment[] = [];
    let freed = 0;
    let evicted = 0;
    while (freed < bytes && fragments.length > 0) {
      // EVICTION_SAMPLE_KEYS keys, an even part from each fragment's hand (all of a small store's).
      keys.length = 0;
      stamps.length = 0;
      owners.length = 0;
      const each = Math.ceil(EVICTION_SAMPLE_KEYS / fragments.length);
      for (let n = 0; n < fragments.length && keys.length < EVICTION_SAMPLE_KEYS; n++) {
        const f = fragments[(this.#evictTurn + n) % fragments.length];
        const before = keys.length;
        this.#readAtHand(f, each, keys, stamps);
        for (let i = before; i < keys.length; i++) owners.push(f);
      }
      this.#evictTurn++;
      let oldest = 0;
      let oldestAge = -1;
      for (let i = 0; i < keys.length; i++) {
        // Modular: a key unused for a whole turn of the clock looks recent again (as Redis's LRU clock).
        const age = (this.#useClock - stamps[i]) & USE_CLOCK_MASK;
        if (age > oldestAge) {
          oldest = i;
          oldestAge = age;
        }
      }
      const f = owners[oldest];
      const removed = this.#remove(f, keys[oldest]);
      f.bytes -= removed;
      this.#bytes -= removed;
      freed += removed;
      evicted++;
      if (f.recency!.size === 0) fragments.splice(fragments.indexOf(f), 1);
    }
    return evicted;
  }

  /**
   * Up to `want` of the candidates at the fragment's hand, the hand moved past them (round its Map,
   * never past where it started): their keys and stamps appended to `keys` and `stamps`.
   */
  #readAtHand(f: MemoryFragment, want: number, keys: string[], stamps: number[]): void {
    const recency = f.recency!;
    const take = Math.min(want, recency.size);
    for (let taken = 0; taken < take; ) {
      f.hand ??= recency.entries();
      const next = f.hand.next();
      if (next.done === true) {
        f.hand = undefined;
        continue;
      }
      keys.push(next.value[0]);
      stamps.push(next.value[1]);
      taken++;
    }
  }

  /** The use clock's next reading. */
  #tick(): number {
    this.#useClock = (this.#useClock + 1) & USE_CLOCK_MASK;
    return this.#useClock;
  }

  /**
   * Stamps the written key `k` (`isNew`: the fragment did not hold it) as used, or takes it out of
   * the candidates (`volatile-lru`, and the record has no deadline); returns the change in bytes
   * they take.
   */
  #used(recency: Map<string, number>, k: string, record: Uint8Array, isNew: boolean): number {
    let candidate = !isNew;
    if (this.#eviction === 'volatile-lru') {
      if (expiresAtOf(record) === 0) return recency.delete(k) ? -MEMORY_RECENCY_ENTRY_BYTES : 0;
      candidate &&= recency.has(k);
    }
    recency.set(k, this.#tick());
    return candidate ? 0 : MEMORY_RECENCY_ENTRY_BYTES;
  }

  /** Removes the entry of `k` (a key as latin1), if any; returns the bytes it took. */
  #remove(f: MemoryFragment, k: string): number {
    const held = f.records.get(k);
    if (held === undefined) return 0;
    f.records.delete(k);
    noteRemoved(f, k);
    const recencyBytes = f.recency?.delete(k) === true ? MEMORY_RECENCY_ENTRY_BYTES : 0;
    return entryBytes(k.length, held.length) + recencyBytes;
  }

  /** This store keeps no write-ahead log (`logsWrites`). */
  log(): string {
    return 'this store keeps no write-ahead log';
  }

  async sync(): Promise<void> {
    this.#checkOpen();
  }

  highWaterWallMs(fragment: number): number {
    return this.#fragment(fragment).highWaterWallMs;
  }

  /** Exact: `bytes` less what each entry costs beyond its key and record (latin1: a char a byte). */
  async fragmentSize(fragment: number): Promise<FragmentSize> {
    const f = this.#fragment(fragment);
    const keys = f.records.size;
    const recencyBytes = (f.recency?.size ?? 0) * MEMORY_RECENCY_ENTRY_BYTES;
    return { keys, bytes: f.bytes - keys * MEMORY_ENTRY_OVERHEAD_BYTES - recencyBytes };
  }

  async backup(): Promise<void> {
    throw invalidInput('backups need a store on disk: the memory store keeps nothing there');
  }

  async dropFragment(fragment: number): Promise<void> {
    const f = this.#fragment(fragment);
    // The high-water mark stays, as in the durable stores: its timestamps were issued.
    f.records.clear();
    f.recency?.clear();
    f.hand = undefined;
    dropSorted(f);
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

/** The use clock turns at 2^30, so its readings stay small integers (V8 stores them unboxed). */
const USE_CLOCK_MASK = 2 ** 30 - 1;

function entryBytes(keyBytes: number, recordBytes: number): number {
  return MEMORY_ENTRY_OVERHEAD_BYTES + keyBytes + recordBytes;
}

/** Notes a new key for the snapshot's next update; past as many as it holds, a new sort is cheaper. */
function noteAdded(f: MemoryFragment, k: string): void {
  if (f.sorted === undefined) return;
  if (f.added.length >= f.sorted.length) return dropSorted(f);
  f.added.push(k);
}

/** Notes a removed key; once half the snapshot is dead it is let go rather than keep them alive. */
function noteRemoved(f: MemoryFragment, k: string): void {
  if (f.sorted === undefined) return;
  f.removed.add(k);
  if (f.removed.size > f.sorted.length / 2) dropSorted(f);
}

function dropSorted(f: MemoryFragment): void {
  f.sorted = undefined;
  f.added = [];
  f.removed.clear();
}

/**
 * Brings the snapshot up to date: without one, all keys are sorted; with one, the keys added since
 * are merged in and those removed since left out.
 */
function updateSorted(f: MemoryFragment): void {
  const old = f.sorted;
  // Default sort compares UTF-16 code units; latin1 chars are all < 0x100, so this is byte order.
  f.sorted = old === undefined ? [...f.records.keys()].sort() : mergeChanges(f, old);
  f.added = [];
  f.removed.clear();
}

/**
 * `old` with the fragment's keys added since, sorted, merged in and its keys removed since left
 * out, each found by binary search from the last: a few changed keys cost a few searches, and the
 * keys kept are copied without being read (their strings are scattered over the heap, and touching
 * each would miss the cache).
 */
function mergeChanges(f: MemoryFragment, old: string[]): string[] {
  const records = f.records;
  // Where the keys removed and not added again stand in `old`, ascending.
  const gone: number[] = [];
  let from = 0;
  for (const key of [...f.removed].sort()) {
    if (records.has(key)) continue;
    const at = firstIndexFrom(old, key, true, from);
    if (at < old.length && old[at] === key) gone.push(at);
    from = at;
  }
  const out: string[] = [];
  let next = 0;
  let g = 0;
  const copyKeptTo = (to: number): void => {
    for (; next < to; next++) {
      if (g < gone.length && gone[g] === next) g++;
      else out.push(old[next]);
    }
  };
  const fresh = f.added.sort();
  for (let j = 0; j < fresh.length; j++) {
    const key = fresh[j];
    if (j > 0 && fresh[j - 1] === key) continue;
    const at = firstIndexFrom(old, key, true, next);
    copyKeptTo(at);
    // A key removed and added again is still in `old`: it is copied from there.
    if ((at === old.length || old[at] !== key) && records.has(key)) out.push(key);
  }
  copyKeptTo(old.length);
  return out;
}

/** Index of the first key ≥ `key` (inclusive) or > `key` (exclusive) at or after `from`, by binary search. */
function firstIndexFrom(sorted: string[], key: string, inclusive: boolean, from = 0): number {
  let lo = from;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const before = inclusive ? sorted[mid] < key : sorted[mid] <= key;
    if (before) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
