// How close KvStore.fragmentSize comes on each real store (src/native-bindings) to the keys and the
// bytes of keys and records of a fragment, in the unit a pull counts (src/workers/replication.ts),
// past what the contract checks (kv-store-contract.test.ts): lmdb counts keys exactly and estimates
// bytes from its pages within the bounds its comment states; LevelDB estimates a fragment larger
// than its sample from its table files; memory is exact, whatever eviction keeps beside the records.

import assert from 'node:assert/strict';
import { describe, it, test } from 'node:test';
import { encodeRecord } from '../../src/core/record.js';
import type { FragmentSize, KvStore, StoreLocation } from '../../src/native-bindings/kv-store.js';
import { openStore } from '../../src/native-bindings/open-store.js';
import { tempDir } from '../integration/helpers.js';
import { xorshift32 } from './fixtures/xorshift32.js';

const NODE_ID = Buffer.from('n1');
/** LevelDB's sample (level-store.ts LEVEL_SIZE_SAMPLE_ENTRIES): a fragment this large is estimated. */
const LEVEL_SAMPLE_ENTRIES = 256;

/** Key `i` of a fragment, of one length: `key:000042`. */
const keyOf = (i: number): Buffer => Buffer.from(`key:${String(i).padStart(6, '0')}`);

/** A record whose value is `valueBytes` bytes that do not compress (seeded by `i`). */
function recordOf(i: number, valueBytes: number): Buffer {
  const next = xorshift32(i + 1);
  const value = Buffer.allocUnsafe(valueBytes);
  for (let j = 0; j < valueBytes; j++) value[j] = next() >>> 24;
  return encodeRecord(false, 1_000, 0, 0, NODE_ID, value);
}

/** A store of two fragments, both open, on `dataDir`; a memory store with `memory`'s options. */
async function openTwoFragments(
  kind: KvStore['kind'],
  dataDir: string,
  memory?: Pick<StoreLocation, 'dropTombstones' | 'eviction'>,
): Promise<KvStore> {
  const onDisk = kind !== 'memory';
  const groups = { groups: onDisk ? [0] : [], groupCount: onDisk ? 1 : 0 };
  const store = await openStore({ kind, dataDir, fragmentCount: 2, ...groups, ...memory });
  await Promise.all([store.openFragment(0), store.openFragment(1)]);
  return store;
}

/**
 * Puts keys 0..count-1 into fragment 0, `valueBytes` a value, in a scattered order (a fixed
 * permutation, as clients' writes land); returns their size as a pull counts it.
 */
async function fill(store: KvStore, count: number, valueBytes: number): Promise<FragmentSize> {
  const step = 7_919; // prime, so i·step mod count visits every key once
  let bytes = 0;
  for (let from = 0; from < count; from += 100) {
    const puts: Array<[Buffer, Buffer]> = [];
    for (let i = from; i < Math.min(count, from + 100); i++) {
      const n = (i * step) % count;
      puts.push([keyOf(n), recordOf(n, valueBytes)]);
      bytes += puts[puts.length - 1][0].length + puts[puts.length - 1][1].length;
    }
    await store.commit([{ fragment: 0, puts, deletes: [], highWaterWallMs: 1_000 }]);
  }
  return { keys: count, bytes };
}

/** `actual` within the fractions `below` and `above` of `expected`. */
function assertWithin(actual: number, expected: number, below: number, above: number, what: string): void {
  assert.ok(
    actual >= expected * (1 - below) && actual <= expected * (1 + above),
    `${what}: ${actual} for ${expected} (-${below * 100} %..+${above * 100} % allowed)`,
  );
}

describe('lmdb counts keys exactly and estimates bytes from its pages, -20 %..+45 %', () => {
  for (const [count, valueBytes] of [
    [100, 50],
    [5_000, 300],
    [3_000, 1_000],
    [20_000, 20],
    [50, 100_000],
  ]) {
    it(`${count} records of ${valueBytes}-byte values`, async () => {
      const dir = await tempDir('size-lmdb');
      const store = await openTwoFragments('lmdb', dir.path);
      try {
        const held = await fill(store, count, valueBytes);
        const size = await store.fragmentSize(0);
        assert.equal(size.keys, held.keys);
        assertWithin(size.bytes, held.bytes, 0.2, 0.45, 'bytes');
      } finally {
        await store.close();
        await dir.cleanup();
      }
    });
  }
});

test('LevelDB estimates a fragment past its sample from its table files, none of its memtable', async () => {
  const dir = await tempDir('size-level');
  let store = await openTwoFragments('level', dir.path);
  try {
    const held = await fill(store, 5_000, 300);
    // Still in the memtable: the table files hold none of it, so the estimate is what the sample
    // read, short of the truth (as the store's comment says).
    const unflushed = await store.fragmentSize(0);
    assert.ok(
      unflushed.keys >= LEVEL_SAMPLE_ENTRIES && unflushed.keys < held.keys,
      JSON.stringify(unflushed),
    );
    assert.ok(unflushed.bytes > 0 && unflushed.bytes < held.bytes, JSON.stringify(unflushed));
    // Reopened, LevelDB wrote its log into a table: records that do not compress come within a few
    // per cent (the table's own indexes and checksums, less the key prefixes its blocks share).
    await store.close();
    store = await openTwoFragments('level', dir.path);
    const flushed = await store.fragmentSize(0);
    assertWithin(flushed.bytes, held.bytes, 0.05, 0.1, 'bytes');
    assertWithin(flushed.keys, held.keys, 0.05, 0.1, 'keys');
    assert.deepEqual(await store.fragmentSize(1), { keys: 0, bytes: 0 }, 'fragment 1 is apart');
  } finally {
    await store.close();
    await dir.cleanup();
  }
});

test('memory is exact, whatever its eviction keeps beside the records', async () => {
  const store = await openTwoFragments('memory', '', { dropTombstones: true, eviction: 'allkeys-lru' });
  try {
    const held = await fill(store, 300, 120);
    assert.deepEqual(await store.fragmentSize(0), held);
    assert.ok(store.memoryBytes() > held.bytes, 'the memory it takes counts more than the records');
    assert.equal(store.evict(1), 1);
    assert.deepEqual(await store.fragmentSize(0), {
      keys: held.keys - 1,
      bytes: held.bytes - (keyOf(0).length + recordOf(0, 120).length),
    });
  } finally {
    await store.close();
  }
});
