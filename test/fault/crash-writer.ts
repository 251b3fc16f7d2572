// Child process of the crash test: writes keys as fast as it can at the given durability and prints
// "ack <i>" once each write is acknowledged. The parent kills it with SIGKILL mid-stream.

import { Tessera } from '../../src/main/node.js';
import type { StoreKind } from '../../src/native-bindings/kv-store.js';

const [store, dataDir, durability] = process.argv.slice(2) as [StoreKind, string, 'store' | 'stable'];
const IN_FLIGHT = 64;

const node = await Tessera.start({ store, dataDir, durability, workers: 2, fragments: 16 });
process.stdout.write('ready\n');
let next = 0;
async function writer(): Promise<void> {
  for (;;) {
    const i = next++;
    await node.put(`key-${i}`, `value-${i}`);
    process.stdout.write(`ack ${i}\n`);
  }
}
await Promise.all(Array.from({ length: IN_FLIGHT }, writer));
