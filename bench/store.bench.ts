// put and get per store binding, through the KvStore interface a worker uses: one commit of a batch
// of records, and point reads of stored keys.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { encodeRecord } from '../src/core/record.js';
import { STORE_KINDS } from '../src/native-bindings/kv-store.js';
import { openStore } from '../src/native-bindings/open-store.js';
import { type BenchRow, formatTable, isMain, runTasks } from './common.js';

const BATCH = 1000;
const KEYS = 50_000;

export async function storeBench(): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const keys = Array.from({ length: KEYS }, (_, i) => Buffer.from(`key:${String(i).padStart(8, '0')}`));
  const record = encodeRecord(false, 1_800_000_000_000, 0, 0, Buffer.from('n1'), Buffer.alloc(100, 3));
  for (const kind of STORE_KINDS) {
    const dir = mkdtempSync(join(tmpdir(), `tessera-store-bench-${kind}-`));
    const store = await openStore({
      kind,
      dataDir: dir,
      fragmentCount: 1,
      levelGroups: [0],
      levelGroupCount: 1,
    });
    await store.openFragment(0);
    let n = 0;
    const batch = () => {
      const puts: Array<[Uint8Array, Uint8Array]> = [];
      for (let i = 0; i < BATCH; i++) puts.push([keys[n++ % KEYS], record]);
      return store.commit([{ fragment: 0, puts, deletes: [], highWaterWallMs: 0 }]);
    };
    for (let i = 0; i < KEYS / BATCH; i++) await batch();
    try {
      rows.push(
        ...(await runTasks('store', [
          { name: `${kind} commit of ${BATCH} puts`, opsPerCall: BATCH, fn: batch },
          {
            name: `${kind} get`,
            opsPerCall: BATCH,
            fn: () => {
              for (let i = 0; i < BATCH; i++) store.get(0, keys[n++ % KEYS]);
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
