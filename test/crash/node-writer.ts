// Child process of the power-loss simulator (power-loss.ts): a Tessera node writing a seeded
// workload (history.ts) into a data directory on the recording mount, `WRITER_IN_FLIGHT` writes at
// a time, at one durability level. Prints `ready`, then `ack <seq> <ns>` as each write is
// acknowledged (ns: process.hrtime.bigint(), CLOCK_MONOTONIC, comparable with the recorder's
// timestamps), and `done` after the last. The simulator kills it with SIGKILL wherever it is.
//
//   node node-writer.js <store> <dataDir> <durability> <seed> <keys> <writes>

import { WAL_SEGMENT_BYTES_MIN } from '../../src/core/limits.js';
import { Tessera } from '../../src/main/node.js';
import type { StoreKind } from '../../src/native-bindings/kv-store.js';
import { NODE_FRAGMENTS, workload, writtenValue } from './history.js';

/** Writes in flight at once: enough for commits to group several writes, as a loaded node's do. */
const WRITER_IN_FLIGHT = 32;
/**
 * Two workers: the store has two groups (two LMDB environments, two LevelDB databases), each
 * committed and flushed on its own, and the node restarted on a crash state opens both with one
 * worker (state-checker.ts).
 */
const WRITER_WORKERS = 2;

/**
 * lmdb, odd seeds: the smallest write-ahead log segments, so a recording (a few hundred KiB per
 * group) crosses several rotations and removals of segments; even seeds keep the default, which a
 * recording never fills.
 */
const walSegmentBytes = (store: string, seed: number) =>
  store === 'lmdb' && seed % 2 === 1 ? WAL_SEGMENT_BYTES_MIN : undefined;

const [store, dataDir, durability, seed, keys, writes] = process.argv.slice(2);
const plan = workload(Number(seed), Number(keys), Number(writes));
const node = await Tessera.start({
  store: store as StoreKind,
  dataDir,
  durability: durability as 'memory' | 'store' | 'stable',
  workers: WRITER_WORKERS,
  fragments: NODE_FRAGMENTS,
  walSegmentBytes: walSegmentBytes(store, Number(seed)),
});
process.stdout.write('ready\n');
let next = 0;
async function writer(): Promise<void> {
  while (next < plan.length) {
    const w = plan[next++];
    if (w.kind === 'set') await node.put(w.key, writtenValue(w.key, w.seq));
    else await node.delete(w.key);
    process.stdout.write(`ack ${w.seq} ${process.hrtime.bigint()}\n`);
  }
}
await Promise.all(Array.from({ length: WRITER_IN_FLIGHT }, writer));
process.stdout.write('done\n');
await node.close();
