// How close the memory store's sampled LRU (`allkeys-lru`: the oldest of EVICTION_SAMPLE_KEYS keys
// read at the fragments' hands) comes to exact LRU: a cache of CAPACITY entries in front of KEYS keys,
// read in a zipfian order (θ 0.99, the popular ranks scattered over the key space); a miss writes the
// key and evicts what passes the bound. The exact LRU is a Map in order of use, the same size in
// entries. Prints each capacity's hit rates; the store runs alone in this process (no worker).
//
//   node .build/bench/eviction-hit-rate.js [capacity ...]

import { encodeRecord } from '../src/core/record.js';
import { openStore } from '../src/native-bindings/open-store.js';
import { isMain } from './common.js';
import { Random } from './load/random.js';
import { ZipfianGenerator } from './load/zipfian.js';

const KEYS = 100_000;
const ACCESSES = 1_000_000;
const FRAGMENTS = 16;
const CAPACITIES_DEFAULT = [1_000, 10_000, 30_000];
const SEED = 7;

export async function evictionHitRates(capacity: number): Promise<{ sampled: number; exact: number }> {
  const record = encodeRecord(false, 1000, 0, 0, Buffer.from('n1'), Buffer.alloc(100, 1));
  const keys = Array.from({ length: KEYS }, (_, i) => Buffer.from(`key:${String(i).padStart(8, '0')}`));
  const store = await openStore({
    kind: 'memory',
    dataDir: '',
    fragmentCount: FRAGMENTS,
    groups: [],
    groupCount: 0,
    dropTombstones: true,
    eviction: 'allkeys-lru',
  });
  try {
    for (let f = 0; f < FRAGMENTS; f++) await store.openFragment(f);
    const put = (n: number) =>
      store.commit([{ fragment: n % FRAGMENTS, puts: [[keys[n], record]], deletes: [], highWaterWallMs: 0 }]);
    // Every entry takes the same bytes: measure one.
    await put(0);
    const capacityBytes = capacity * store.memoryBytes();
    await store.dropFragment(0);
    const zipfian = new ZipfianGenerator(new Random(SEED), KEYS, 0.99);
    const exact = new Map<number, true>();
    let sampledHits = 0;
    let exactHits = 0;
    for (let i = 0; i < ACCESSES; i++) {
      // Knuth's multiplicative hash scatters the popular ranks, as they would be in a real key space.
      const n = Math.imul(zipfian.next(), 2654435761) >>> 0;
      const key = n % KEYS;
      if (store.get(key % FRAGMENTS, keys[key]) !== undefined) sampledHits++;
      else {
        await put(key);
        const over = store.memoryBytes() - capacityBytes;
        if (over > 0) store.evict(over);
      }
      if (exact.delete(key)) exactHits++;
      exact.set(key, true);
      if (exact.size > capacity) exact.delete(exact.keys().next().value!);
    }
    return { sampled: sampledHits / ACCESSES, exact: exactHits / ACCESSES };
  } finally {
    await store.close();
  }
}

if (isMain(import.meta.url)) {
  const capacities = process.argv.slice(2).map(Number);
  console.log('| capacity (entries) | keys | hit rate, sampled LRU | hit rate, exact LRU |');
  console.log('|--:|--:|--:|--:|');
  for (const capacity of capacities.length > 0 ? capacities : CAPACITIES_DEFAULT) {
    const { sampled, exact } = await evictionHitRates(capacity);
    console.log(`| ${capacity} | ${KEYS} | ${sampled.toFixed(4)} | ${exact.toFixed(4)} |`);
  }
}
