// put, get and page per store binding, through the KvStore interface a worker uses: one commit of a
// batch of records, point reads of stored keys, and ordered pages as a scan reads them. Writes come
// in three spreads over the same stored keys: in key order (neighbouring puts share a B-tree page),
// at random among the first HOT_KEYS keys (a few pages, all in cache), and at random among all KEYS,
// as `redis-benchmark -r` sends them — where LMDB copies a page for nearly every put (its
// copy-on-write B-tree).

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { encodeRecord } from '../src/core/record.js';
import { type PageStart, STORE_KINDS } from '../src/native-bindings/kv-store.js';
import { openStore } from '../src/native-bindings/open-store.js';
import { STORE_PAGE_KEYS_MAX } from '../src/workers/scan-page.js';
import { type BenchRow, formatTable, isMain, runTasks } from './common.js';

const BATCH = 1000;
const KEYS = 50_000;
const HOT_KEYS = 1_000;
/** Random key indices drawn once (a fixed-seed generator), so every store sees the same writes. */
const RANDOM_DRAWS = 1 << 16;

/** RANDOM_DRAWS indices in [0, range) from a 32-bit xorshift generator. */
function randomIndices(range: number): Int32Array {
  const out = new Int32Array(RANDOM_DRAWS);
  let x = 0x9e3779b9;
  for (let i = 0; i < RANDOM_DRAWS; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = (x >>> 0) % range;
  }
  return out;
}

export async function storeBench(): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const keys = Array.from({ length: KEYS }, (_, i) => Buffer.from(`key:${String(i).padStart(8, '0')}`));
  const hot = randomIndices(HOT_KEYS);
  const all = randomIndices(KEYS);
  const record = encodeRecord(false, 1_800_000_000_000, 0, 0, Buffer.from('n1'), Buffer.alloc(100, 3));
  for (const kind of STORE_KINDS) {
    const dir = mkdtempSync(join(tmpdir(), `tessera-store-bench-${kind}-`));
    const store = await openStore({
      kind,
      dataDir: dir,
      fragmentCount: 1,
      groups: [0],
      groupCount: 1,
    });
    await store.openFragment(0);
    let n = 0;
    let drawn = 0;
    const commit = (keyOf: () => Uint8Array) => {
      const puts: Array<[Uint8Array, Uint8Array]> = [];
      for (let i = 0; i < BATCH; i++) puts.push([keyOf(), record]);
      return store.commit([{ fragment: 0, puts, deletes: [], highWaterWallMs: 0 }]);
    };
    const inOrder = () => keys[n++ % KEYS];
    const fromHot = () => keys[hot[drawn++ & (RANDOM_DRAWS - 1)]];
    const fromAll = () => keys[all[drawn++ & (RANDOM_DRAWS - 1)]];
    const sequential = `${kind} commit of ${BATCH} puts`;
    let pageStart: PageStart | undefined;
    for (let i = 0; i < KEYS / BATCH; i++) await commit(inOrder);
    try {
      rows.push(
        ...(await runTasks('store', [
          { name: sequential, opsPerCall: BATCH, fn: () => commit(inOrder) },
          {
            name: `${kind} commit of ${BATCH} puts, random of ${HOT_KEYS.toLocaleString('en-US')} keys`,
            opsPerCall: BATCH,
            fn: () => commit(fromHot),
            baseline: sequential,
          },
          {
            name: `${kind} commit of ${BATCH} puts, random of ${KEYS.toLocaleString('en-US')} keys`,
            opsPerCall: BATCH,
            fn: () => commit(fromAll),
            baseline: sequential,
          },
          {
            name: `${kind} get`,
            opsPerCall: BATCH,
            fn: () => {
              for (let i = 0; i < BATCH; i++) store.get(0, keys[n++ % KEYS]);
            },
          },
          {
            name: `${kind} pages of ${STORE_PAGE_KEYS_MAX} entries in key order`,
            opsPerCall: BATCH,
            fn: async () => {
              for (let read = 0; read < BATCH; ) {
                const page = await store.page(0, pageStart, undefined, STORE_PAGE_KEYS_MAX);
                read += page.length;
                // Past the last key: start over.
                pageStart =
                  page.length < STORE_PAGE_KEYS_MAX
                    ? undefined
                    : { key: page[page.length - 1].key, inclusive: false };
              }
            },
          },
        ])),
      );
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }
  return rows;
}

if (isMain(import.meta.url)) console.log(formatTable(await storeBench()));
