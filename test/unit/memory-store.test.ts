// The memory store's own rules beyond the KvStore contract: what it counts, tombstones dropped on a
// node without peers (StoreLocation.dropTombstones), and eviction of the least recently used
// (StoreLocation.eviction; exact in stores this small, where the sample is every key).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { MEMORY_ENTRY_OVERHEAD_BYTES, MEMORY_RECENCY_ENTRY_BYTES } from '../../src/core/limits.js';
import { encodeRecord } from '../../src/core/record.js';
import type { KvStore, StoreLocation } from '../../src/native-bindings/kv-store.js';
import { openStore } from '../../src/native-bindings/open-store.js';

const NODE_ID = Buffer.from('n1');
const value = (text: string, wallMs = 1000) => encodeRecord(false, wallMs, 0, 0, NODE_ID, Buffer.from(text));
const tombstone = (wallMs: number) => encodeRecord(true, wallMs, 0, 0, NODE_ID, undefined);
const volatile = (text: string, expiresAtMs: number) =>
  encodeRecord(false, 1000, 0, expiresAtMs, NODE_ID, Buffer.from(text));

/** Runs `body` on a fresh two-fragment memory store, closed after it. */
async function withMemoryStore(
  dropTombstones: boolean,
  eviction: StoreLocation['eviction'],
  body: (store: KvStore) => Promise<void>,
): Promise<void> {
  const store = await openStore({
    kind: 'memory',
    dataDir: '',
    fragmentCount: 2,
    groups: [],
    groupCount: 0,
    dropTombstones,
    eviction,
  });
  try {
    await store.openFragment(0);
    await store.openFragment(1);
    await body(store);
  } finally {
    await store.close();
  }
}

const put = (store: KvStore, key: string, record: Uint8Array, fragment = 0) =>
  store.commit([{ fragment, puts: [[Buffer.from(key), record]], deletes: [], highWaterWallMs: 0 }]);

const keyNames = (entries: Array<{ key: Buffer }>) => entries.map((e) => e.key.toString());
const keysOf = async (store: KvStore, fragment: number) =>
  keyNames(await store.page(fragment, undefined, undefined, 100));

test('on a node without peers a tombstone removes the entry and all the memory it took', () =>
  withMemoryStore(true, undefined, async (store) => {
    await put(store, 'kept', value('x'));
    const kept = store.memoryBytes();
    await put(store, 'gone', value('a value'));
    await put(store, 'gone', tombstone(2000));
    assert.equal(store.get(0, Buffer.from('gone')), undefined);
    assert.equal(store.memoryBytes(), kept);
    assert.deepEqual(
      (await store.page(0, undefined, undefined, 10)).map((e) => e.key.toString()),
      ['kept'],
    );
    // A tombstone of a key never stored takes nothing either.
    await put(store, 'never', tombstone(3000));
    assert.equal(store.memoryBytes(), kept);
    assert.equal(kept, MEMORY_ENTRY_OVERHEAD_BYTES + 'kept'.length + value('x').length);
  }));

test('in a cluster a tombstone is kept, as every store keeps it, and counted', () =>
  withMemoryStore(false, undefined, async (store) => {
    await put(store, 'gone', value('a value'));
    await put(store, 'gone', tombstone(2000));
    assert.deepEqual(store.get(0, Buffer.from('gone')), tombstone(2000));
    assert.equal(store.memoryBytes(), MEMORY_ENTRY_OVERHEAD_BYTES + 'gone'.length + tombstone(2000).length);
  }));

test('allkeys-lru evicts the least recently used keys first: a read or a write is a use', () =>
  withMemoryStore(true, 'allkeys-lru', async (store) => {
    for (const key of ['a', 'b', 'c', 'd']) await put(store, key, value(key));
    const entry = MEMORY_ENTRY_OVERHEAD_BYTES + MEMORY_RECENCY_ENTRY_BYTES + 1 + value('a').length;
    assert.equal(store.memoryBytes(), 4 * entry);
    assert.ok(store.get(0, Buffer.from('a')) !== undefined); // a is now the most recent
    await put(store, 'b', value('B')); // and then b
    // One byte over: one entry goes, the oldest (c).
    assert.equal(store.evict(1), 1);
    assert.deepEqual(await keysOf(store, 0), ['a', 'b', 'd']);
    assert.equal(store.memoryBytes(), 3 * entry);
    assert.equal(store.evict(entry + 1), 2); // d, then a
    assert.deepEqual(await keysOf(store, 0), ['b']);
    // A read of a key not held, and evicting more than is held, are harmless.
    assert.equal(store.get(0, Buffer.from('c')), undefined);
    assert.equal(store.evict(10 * entry), 1);
    assert.equal(store.memoryBytes(), 0);
    assert.equal(store.evict(1), 0);
  }));

test('eviction takes the least recently used key of all fragments, and a deleted key is no candidate', () =>
  withMemoryStore(true, 'allkeys-lru', async (store) => {
    for (const key of ['a1', 'a2', 'a3']) await put(store, key, value(key), 0);
    for (const key of ['b1', 'b2']) await put(store, key, value(key), 1);
    await put(store, 'a1', tombstone(2000)); // deleted: not a candidate any more
    store.get(0, Buffer.from('a2')); // a3, b1, b2, a2 from the oldest
    const entry = MEMORY_ENTRY_OVERHEAD_BYTES + MEMORY_RECENCY_ENTRY_BYTES + 2 + value('a1').length;
    assert.equal(store.memoryBytes(), 4 * entry);
    assert.equal(store.evict(2 * entry), 2);
    assert.deepEqual(await keysOf(store, 0), ['a2']);
    assert.deepEqual(await keysOf(store, 1), ['b2']);
  }));

test('in a store larger than the sample, eviction takes keys from the least recently used half', () =>
  withMemoryStore(true, 'allkeys-lru', async (store) => {
    const KEYS = 2000;
    const keyOf = (n: number) => Buffer.from(`key:${String(n).padStart(5, '0')}`);
    for (let f = 0; f < 2; f++) {
      const puts: Array<[Buffer, Buffer]> = [];
      for (let n = f; n < KEYS; n += 2) puts.push([keyOf(n), value('x')]);
      await store.commit([{ fragment: f, puts, deletes: [], highWaterWallMs: 0 }]);
    }
    // Every key read once, in a shuffled order (a fixed seed): its place in it is its recency.
    let seed = 12345;
    const order = Array.from({ length: KEYS }, (_, n) => n);
    for (let i = KEYS - 1; i > 0; i--) {
      seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff;
      const j = seed % (i + 1);
      [order[i], order[j]] = [order[j], order[i]];
    }
    const usedAt = new Map<number, number>();
    order.forEach((n, at) => {
      assert.ok(store.get(n % 2, keyOf(n)) !== undefined);
      usedAt.set(n, at);
    });
    const entry =
      MEMORY_ENTRY_OVERHEAD_BYTES + MEMORY_RECENCY_ENTRY_BYTES + keyOf(0).length + value('x').length;
    assert.equal(store.evict(200 * entry), 200);
    const kept = new Set<number>();
    for (let f = 0; f < 2; f++) {
      for (const e of await store.page(f, undefined, undefined, KEYS))
        kept.add(Number(e.key.toString().slice(4)));
    }
    assert.equal(kept.size, KEYS - 200);
    for (let n = 0; n < KEYS; n++) {
      if (!kept.has(n)) assert.ok(usedAt.get(n)! < KEYS / 2, `key ${n}, used at ${usedAt.get(n)}, evicted`);
    }
  }));

test('volatile-lru evicts only keys with a deadline, and stops when none is left', () =>
  withMemoryStore(true, 'volatile-lru', async (store) => {
    await put(store, 'v1', volatile('x', 10_000));
    await put(store, 'p1', value('x'));
    await put(store, 'v2', volatile('x', 20_000));
    await put(store, 'v3', volatile('x', 30_000));
    await put(store, 'v3', value('y')); // persisted: no longer a candidate
    await put(store, 'p2', volatile('x', 40_000));
    await put(store, 'p2', value('z'));
    const plain = MEMORY_ENTRY_OVERHEAD_BYTES + 2 + value('x').length;
    const timed = MEMORY_ENTRY_OVERHEAD_BYTES + MEMORY_RECENCY_ENTRY_BYTES + 2 + volatile('x', 1).length;
    assert.equal(store.memoryBytes(), 3 * plain + 2 * timed);
    store.get(0, Buffer.from('v1')); // v1 is now the most recent with a deadline
    assert.equal(store.evict(1), 1);
    assert.deepEqual(await keysOf(store, 0), ['p1', 'p2', 'v1', 'v3']);
    // Asked for more than the keys with a deadline hold: v1 goes, the others stay.
    assert.equal(store.evict(10 * plain), 1);
    assert.deepEqual(await keysOf(store, 0), ['p1', 'p2', 'v3']);
    assert.equal(store.memoryBytes(), 3 * plain);
    assert.equal(store.evict(1), 0);
  }));

test('without an eviction policy nothing is evicted', () =>
  withMemoryStore(true, undefined, async (store) => {
    await put(store, 'a', value('a'));
    assert.equal(store.evict(1_000_000), 0);
    assert.deepEqual(await keysOf(store, 0), ['a']);
    assert.equal(store.memoryBytes(), MEMORY_ENTRY_OVERHEAD_BYTES + 1 + value('a').length);
  }));

test('a scan that starts reads every key committed before it; one that resumes reads the snapshot it started with, less the keys deleted since', () =>
  withMemoryStore(true, undefined, async (store) => {
    for (const key of ['a', 'b', 'c', 'd']) await put(store, key, value(key));
    assert.deepEqual(keyNames(await store.page(0, undefined, undefined, 2)), ['a', 'b']);
    await store.commit([
      {
        fragment: 0,
        puts: [
          [Buffer.from('bb'), value('new')],
          [Buffer.from('e'), value('new')],
          [Buffer.from('d'), value('D')],
        ],
        deletes: [Buffer.from('c')],
        highWaterWallMs: 0,
      },
    ]);
    // Resumed after 'b': c is gone, d has its new record, the keys added since are not in the snapshot.
    const resumed = await store.page(0, { key: Buffer.from('b'), inclusive: false }, undefined, 10);
    assert.deepEqual(keyNames(resumed), ['d']);
    assert.deepEqual(resumed[0].record, value('D'));
    // A scan that starts, from the first key or from a range's start, sees them all.
    assert.deepEqual(keyNames(await store.page(0, undefined, undefined, 10)), ['a', 'b', 'bb', 'd', 'e']);
    await put(store, 'ba', value('x'));
    assert.deepEqual(
      keyNames(await store.page(0, { key: Buffer.from('b'), inclusive: true }, Buffer.from('c'), 10)),
      ['b', 'ba', 'bb'],
    );
  }));

// A model of the fragment's keys against the store's pages, writes interleaved with scans: a scan
// returns, in ascending order and once each, every key present for its whole iteration and only
// keys present when their page was read, each with its record of that moment; a scan with no write
// during it returns exactly the keys held.
test('scans under random writes and deletes keep what a scan promises', async () => {
  const keyOf = (n: number) => `k${String(n).padStart(3, '0')}`;
  // Most writes anywhere in the key space, some among a few keys (added, deleted, added again).
  const keyArb = fc.oneof(fc.integer({ min: 0, max: 299 }), fc.integer({ min: 0, max: 9 })).map(keyOf);
  const stepArb = fc.oneof(
    fc.record({ kind: fc.constant('put' as const), keys: fc.array(keyArb, { maxLength: 3 }) }),
    fc.record({ kind: fc.constant('delete' as const), keys: fc.array(keyArb, { maxLength: 3 }) }),
    fc.record({ kind: fc.constant('page' as const), limit: fc.integer({ min: 1, max: 60 }) }),
    fc.record({ kind: fc.constant('restart' as const) }),
  );
  await fc.assert(
    fc.asyncProperty(fc.array(stepArb, { maxLength: 80, size: 'max' }), (steps) =>
      withMemoryStore(true, undefined, async (store) => {
        const model = new Map<string, Buffer>();
        let version = 0;
        // Half the key space held and scanned first, so that the snapshot is updated by merging
        // (a few keys changed among many) as well as rebuilt.
        const preload: Array<[Buffer, Buffer]> = [];
        for (let n = 0; n < 300; n += 2) {
          const record = value(`v${++version}`);
          preload.push([Buffer.from(keyOf(n)), record]);
          model.set(keyOf(n), record);
        }
        await store.commit([{ fragment: 0, puts: preload, deletes: [], highWaterWallMs: 0 }]);
        assert.equal((await store.page(0, undefined, undefined, 1000)).length, 150);
        // The scan in progress: keys returned, keys present throughout so far, where it resumes.
        let returned: string[] = [];
        let throughout = new Set<string>();
        let resumeAfter: string | undefined;
        let wroteDuring = false;
        const startScan = () => {
          returned = [];
          throughout = new Set(model.keys());
          resumeAfter = undefined;
          wroteDuring = false;
        };
        startScan();
        for (const step of steps) {
          if (step.kind === 'put' || step.kind === 'delete') {
            const puts: Array<[Buffer, Buffer]> = [];
            const deletes: Buffer[] = [];
            for (const key of step.keys) {
              if (step.kind === 'put') {
                const record = value(`v${++version}`);
                puts.push([Buffer.from(key), record]);
                model.set(key, record);
              } else {
                deletes.push(Buffer.from(key));
                model.delete(key);
                throughout.delete(key);
              }
            }
            await store.commit([{ fragment: 0, puts, deletes, highWaterWallMs: 0 }]);
            wroteDuring ||= step.keys.length > 0;
            continue;
          }
          if (step.kind === 'restart') {
            startScan();
            continue;
          }
          const start =
            resumeAfter === undefined ? undefined : { key: Buffer.from(resumeAfter), inclusive: false };
          const page = await store.page(0, start, undefined, step.limit);
          for (const e of page) {
            const key = e.key.toString('latin1');
            assert.ok(model.has(key), `${key} returned but deleted`);
            assert.deepEqual(e.record, model.get(key));
            if (returned.length > 0) assert.ok(returned[returned.length - 1] < key, 'ascending, once each');
            returned.push(key);
          }
          if (page.length < step.limit) {
            const got = new Set(returned);
            for (const key of throughout) assert.ok(got.has(key), `${key} present throughout, not returned`);
            if (!wroteDuring) assert.deepEqual(returned, [...model.keys()].sort());
            startScan();
          } else resumeAfter = page[page.length - 1].key.toString('latin1');
        }
      }),
    ),
    { numRuns: 300 },
  );
});
