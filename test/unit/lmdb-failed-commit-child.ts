// The process of lmdb-failed-commit.test.ts, run under a file-size limit (RLIMIT_FSIZE, with
// SIGXFSZ ignored) so that LMDB's data file cannot grow: commits 64 KiB values until one fails,
// logs them until an append fails, then asks for a sync, and prints how each ended as one JSON line.

import { encodeRecord } from '../../src/core/record.js';
import type { StoreLocation } from '../../src/native-bindings/kv-store.js';
import { openStore, recoverStore } from '../../src/native-bindings/open-store.js';

const SYNC_WAIT_MS = 10_000;
const dataDir = process.argv[2] as string;
const location: StoreLocation = { kind: 'lmdb', dataDir, fragmentCount: 1, groups: [0], groupCount: 1 };
await recoverStore(location);
const store = await openStore({ ...location, writer: true });
await store.openFragment(0);
const value = Buffer.alloc(64 * 1024, 7);
let commitError: string | undefined;
let committed = 0;
for (let i = 0; i < 1000 && commitError === undefined; i++) {
  try {
    await store.commit([
      {
        fragment: 0,
        puts: [[Buffer.from(`k${i}`), encodeRecord(false, i + 1, 0, 0, Buffer.from('n1'), value)]],
        deletes: [],
        highWaterWallMs: 0,
      },
    ]);
    committed++;
  } catch (err) {
    commitError = err instanceof Error ? err.message : String(err);
  }
}
// The write-ahead log's segment grows to the limit too: an append that fails makes the next sync
// wait for the env's flush (those writes would be safe only in LMDB).
let logError: string | undefined;
for (let i = 0; i < 1000 && logError === undefined; i++) {
  logError = store.log([
    {
      fragment: 0,
      puts: [[Buffer.from(`w${i}`), encodeRecord(false, 5000 + i, 0, 0, Buffer.from('n1'), value)]],
      deletes: [],
      highWaterWallMs: 0,
    },
  ]);
}
const sync = await Promise.race([
  store.sync().then(
    () => 'resolved',
    (err: unknown) => `rejected: ${err instanceof Error ? err.message : String(err)}`,
  ),
  new Promise<string>((resolve) => setTimeout(() => resolve('still waiting'), SYNC_WAIT_MS)),
]);
process.stdout.write(`${JSON.stringify({ committed, commitError, logError, sync })}\n`);
// The env's failed transaction may keep lmdb-js from closing: the outcome is printed, so exit.
process.exit(0);
