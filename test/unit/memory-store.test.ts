// The memory store's own rules beyond the KvStore contract: what it counts, and tombstones dropped
// on a node without peers (StoreLocation.dropTombstones).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MEMORY_ENTRY_OVERHEAD_BYTES } from '../../src/core/limits.js';
import { encodeRecord } from '../../src/core/record.js';
import type { KvStore } from '../../src/native-bindings/kv-store.js';
import { openStore } from '../../src/native-bindings/open-store.js';

const NODE_ID = Buffer.from('n1');
const value = (text: string, wallMs = 1000) => encodeRecord(false, wallMs, 0, 0, NODE_ID, Buffer.from(text));
const tombstone = (wallMs: number) => encodeRecord(true, wallMs, 0, 0, NODE_ID, undefined);

async function memoryStore(dropTombstones: boolean): Promise<KvStore> {
  const store = await openStore({
    kind: 'memory',
    dataDir: '',
    fragmentCount: 2,
    levelGroups: [],
    levelGroupCount: 0,
    dropTombstones,
  });
  await store.openFragment(0);
  await store.openFragment(1);
  return store;
}

const put = (store: KvStore, key: string, record: Uint8Array) =>
  store.commit([{ fragment: 0, puts: [[Buffer.from(key), record]], deletes: [], highWaterWallMs: 0 }]);

test('on a node without peers a tombstone removes the entry and all the memory it took', async () => {
  const store = await memoryStore(true);
  try {
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
  } finally {
    await store.close();
  }
});

test('in a cluster a tombstone is kept, as every store keeps it, and counted', async () => {
  const store = await memoryStore(false);
  try {
    await put(store, 'gone', value('a value'));
    await put(store, 'gone', tombstone(2000));
    assert.deepEqual(store.get(0, Buffer.from('gone')), tombstone(2000));
    assert.equal(store.memoryBytes(), MEMORY_ENTRY_OVERHEAD_BYTES + 'gone'.length + tombstone(2000).length);
  } finally {
    await store.close();
  }
});
