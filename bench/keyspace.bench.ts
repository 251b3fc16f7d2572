// Slot hashing: CRC16 of a key (with the hash-tag scan) and the slot → fragment lookup, per key.

import { Keyspace, slotOf } from '../src/core/keyspace.js';
import { type BenchRow, formatTable, isMain, runTasks } from './common.js';

const BATCH = 1000;

export async function keyspaceBench(): Promise<BenchRow[]> {
  const plain = Array.from({ length: BATCH }, (_, i) =>
    Buffer.from(`user:${String(i).padStart(8, '0')}:profile`),
  );
  const tagged = Array.from({ length: BATCH }, (_, i) => Buffer.from(`{user${i}}.followers`));
  const keyspace = new Keyspace(16);
  let sink = 0;
  const rows = await runTasks('keyspace', [
    {
      name: 'slotOf, 21-byte key',
      opsPerCall: BATCH,
      fn: () => {
        for (const k of plain) sink += slotOf(k);
      },
    },
    {
      name: 'slotOf, hash-tagged key',
      opsPerCall: BATCH,
      fn: () => {
        for (const k of tagged) sink += slotOf(k);
      },
    },
    {
      name: 'fragmentOf (slot + table lookup)',
      opsPerCall: BATCH,
      fn: () => {
        for (const k of plain) sink += keyspace.fragmentOf(k);
      },
    },
  ]);
  if (sink === -1) console.log(sink);
  return rows;
}

if (isMain(import.meta.url)) console.log(formatTable(await keyspaceBench()));
