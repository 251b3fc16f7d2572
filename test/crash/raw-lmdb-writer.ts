// Child process of the power-loss simulator (power-loss.ts): lmdb-js alone, in the mode the lmdb
// store ran before it took overlapping sync — `noSync` with a write map — writing a seeded workload
// (history.ts) in transactions of RAW_TXN_WRITES, with an env sync (msync of the map, the old
// store's checkpoint and its only power-loss fence) after every RAW_SYNC_TXNS transactions. Prints
// `ready`, then `ack <seq> <ns>` for each committed write and `stable <seq> <ns>` once a sync covers
// every write up to seq. It shows the simulator finds the damage that mode allows.
//
//   node raw-lmdb-writer.js <dir> <seed> <keys> <writes>

import { open } from 'lmdb';
import { workload, writtenValue } from './history.js';

const RAW_TXN_WRITES = 50;
const RAW_SYNC_TXNS = 8;
/** The old store's env options (lmdb-store.ts before overlapping sync). */
export const RAW_WRITEMAP_OPTIONS = { noSync: true, useWritemap: true, mapSize: 64 * 1024 * 1024 };

/** lmdb-js has `sync(callback)` (an fsync of the env on the libuv pool) but does not type it. */
interface EnvSync {
  sync(callback: (error?: Error | null) => void): void;
}

if (process.argv[1]?.endsWith('raw-lmdb-writer.js')) {
  const [dir, seed, keys, writes] = process.argv.slice(2);
  const plan = workload(Number(seed), Number(keys), Number(writes));
  const root = open<string, string>(dir, RAW_WRITEMAP_OPTIONS);
  process.stdout.write('ready\n');
  for (let at = 0, txns = 0; at < plan.length; at += RAW_TXN_WRITES) {
    const batch = plan.slice(at, at + RAW_TXN_WRITES);
    root.transactionSync(() => {
      for (const w of batch) {
        if (w.kind === 'set') root.putSync(w.key, writtenValue(w.key, w.seq));
        else root.removeSync(w.key);
      }
    });
    const committedNs = process.hrtime.bigint();
    process.stdout.write(batch.map((w) => `ack ${w.seq} ${committedNs}\n`).join(''));
    if (++txns % RAW_SYNC_TXNS === 0) {
      await new Promise<void>((resolve, reject) =>
        (root as unknown as EnvSync).sync((error) => (error ? reject(error) : resolve())),
      );
      process.stdout.write(`stable ${batch[batch.length - 1].seq} ${process.hrtime.bigint()}\n`);
    }
  }
  process.stdout.write('done\n');
  await root.close();
}
