// Opens the KvStore a StoreLocation names, and holds the few rules every binding shares: how
// fragments, keys, writes and page limits are checked, and the stored form of the high-water mark.
//
// The bindings are imported lazily so a process loads only the native addon it uses (a node on
// LevelDB never maps LMDB, and the memory store loads neither).

import { assert } from '../core/assert.js';
import { invalidInput, storageError } from '../core/errors.js';
import {
  FRAGMENT_COUNT_MAX,
  HLC_WALL_MS_MAX,
  KEY_BYTES_MAX,
  SCAN_EXAMINED_KEYS_MAX,
} from '../core/limits.js';
import type { FragmentWrites, KvStore, PageStart, StoreLocation } from './kv-store.js';
import type { LmdbRecovery } from './lmdb-store.js';

export async function openStore(location: StoreLocation): Promise<KvStore> {
  switch (location.kind) {
    case 'lmdb': {
      const { openLmdbStore } = await import('./lmdb-store.js');
      return openLmdbStore(location);
    }
    case 'level': {
      const { openLevelStore } = await import('./level-store.js');
      return openLevelStore(location);
    }
    case 'memory': {
      const { openMemoryStore } = await import('./memory-store.js');
      return openMemoryStore(location);
    }
  }
}

/**
 * Where a reader of every group finds the lmdb store: the main thread's snapshot and the background
 * pool read all fragments beside the workers that write them.
 */
export function lmdbReaderLocation(
  dataDir: string,
  fragmentCount: number,
  groupCount: number,
): StoreLocation {
  return {
    kind: 'lmdb',
    dataDir,
    fragmentCount,
    groups: Array.from({ length: groupCount }, (_, g) => g),
    groupCount,
  };
}

/**
 * Readies a store after a crash or a power loss, before any worker opens it: for lmdb, creates each
 * group's env if new, removes a data file that never held a flushed state, replays the stable logs
 * an older version left behind and migrates a format 1 directory's one env into groups
 * (`singleLmdbEnv`; lmdb-store.ts, stable-log-file.ts). Undefined for the other kinds, which need
 * no recovery of ours.
 */
export async function recoverStore(
  location: StoreLocation,
  singleLmdbEnv = false,
): Promise<LmdbRecovery | undefined> {
  if (location.kind !== 'lmdb') return undefined;
  const { recoverLmdbStore } = await import('./lmdb-store.js');
  return recoverLmdbStore(location, singleLmdbEnv);
}

/**
 * Entries one `page()` returns at most: bounds the memory of one page. The largest caller is a
 * pattern-filtered scan, which examines up to SCAN_EXAMINED_KEYS_MAX keys per page.
 */
export const STORE_PAGE_ENTRIES_MAX = SCAN_EXAMINED_KEYS_MAX;

/** The high-water mark is stored as a u64 big-endian; wall-ms fit in its low 48 bits. */
export const HIGH_WATER_BYTES = 8;
const HIGH_WATER_UNUSED_BYTES = 2;

/** A fresh 8-byte buffer holding `wallMs` (a fresh one: LMDB reads a value buffer until commit). */
export function encodeHighWater(wallMs: number): Buffer {
  assert(
    Number.isInteger(wallMs) && wallMs >= 0 && wallMs <= HLC_WALL_MS_MAX,
    'high-water wall-ms out of range',
  );
  const out = Buffer.alloc(HIGH_WATER_BYTES);
  out.writeUIntBE(wallMs, HIGH_WATER_UNUSED_BYTES, HIGH_WATER_BYTES - HIGH_WATER_UNUSED_BYTES);
  return out;
}

/** Reads a stored high-water mark; anything but 8 bytes with the top two zero is on-disk corruption. */
export function decodeHighWater(bytes: Uint8Array | undefined, fragment: number): number {
  if (bytes === undefined) return 0;
  if (bytes.length !== HIGH_WATER_BYTES || bytes[0] !== 0 || bytes[1] !== 0) {
    throw storageError(`fragment ${fragment} has a malformed high-water mark (${bytes.length} bytes)`);
  }
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).readUIntBE(
    HIGH_WATER_UNUSED_BYTES,
    HIGH_WATER_BYTES - HIGH_WATER_UNUSED_BYTES,
  );
}

/** Checks what a worker was started with; a bad location is a bug in the caller, not an operating error. */
export function checkLocation(location: StoreLocation): void {
  const n = location.fragmentCount;
  assert(Number.isInteger(n) && n >= 1 && n <= FRAGMENT_COUNT_MAX, 'store fragment count out of range');
}

/** Fragment ids come from the router, which computed them from the same count. */
export function checkFragment(fragment: number, fragmentCount: number): void {
  assert(Number.isInteger(fragment) && fragment >= 0 && fragment < fragmentCount, 'fragment id out of range');
}

/** Keys are validated at the edge, but a store refuses an oversized one rather than mis-storing it. */
export function checkKey(key: Uint8Array): void {
  if (key.length > KEY_BYTES_MAX) {
    throw invalidInput(`key of ${key.length} bytes exceeds the ${KEY_BYTES_MAX}-byte limit`);
  }
}

/** Checks a whole batch before any of it is applied, so a bad key never leaves a batch half-staged. */
export function checkWrites(writes: FragmentWrites[], fragmentCount: number): void {
  for (const w of writes) {
    checkFragment(w.fragment, fragmentCount);
    assert(
      Number.isInteger(w.highWaterWallMs) && w.highWaterWallMs >= 0 && w.highWaterWallMs <= HLC_WALL_MS_MAX,
      'high-water wall-ms out of range',
    );
    for (const [key] of w.puts) checkKey(key);
    for (const key of w.deletes) checkKey(key);
  }
}

/** Page limits are counts the caller chose from its own bounds. */
/** Checks the arguments of `KvStore.page`. */
export function checkPageArgs(
  start: PageStart | undefined,
  end: Uint8Array | undefined,
  limit: number,
): void {
  checkPageLimit(limit);
  if (start !== undefined) checkKey(start.key);
  if (end !== undefined) checkKey(end);
}

export function checkPageLimit(limit: number): void {
  assert(Number.isInteger(limit) && limit >= 0 && limit <= STORE_PAGE_ENTRIES_MAX, 'page limit out of range');
}

export const closedError = (kind: string): Error => storageError(`the ${kind} store is closed`);
