// A background-pool scan page reads a snapshot of the store taken when its task starts: a write the
// fragment's writer committed before the task is in it, even when the pool thread read an older
// snapshot moments before, within the same turn of its event loop (lmdb-js renews a thread's read
// snapshot only at its next timer phase). Without that, KEYS after FLUSHALL listed deleted keys.

import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { Worker } from 'node:worker_threads';
import { encodeRecord } from '../../src/core/record.js';
import type { FragmentWrites, StoreLocation } from '../../src/native-bindings/kv-store.js';
import { openStore, recoverStore } from '../../src/native-bindings/open-store.js';
import type { ScanTask } from '../../src/threads/messages.js';
import { eventually } from '../integration/helpers.js';

const dirs: string[] = [];
after(async () => {
  for (const dir of dirs) await fs.rm(dir, { recursive: true, force: true });
});

const NODE = Buffer.from('n1');
const put = (key: string, record: Buffer): FragmentWrites => ({
  fragment: 0,
  puts: [[Buffer.from(key), record]],
  deletes: [],
  highWaterWallMs: 0,
});

test('a pool scan task sees what was committed before it, after reading an older snapshot in the same turn', async () => {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-pool-snapshot-'));
  dirs.push(dataDir);
  const location: StoreLocation = { kind: 'lmdb', dataDir, fragmentCount: 1, groups: [0], groupCount: 1 };
  await recoverStore(location);
  const writer = await openStore({ ...location, writer: true });
  await writer.openFragment(0);
  await writer.commit([put('kept', encodeRecord(false, 1, 0, 0, NODE, Buffer.from('v')))]);
  await writer.commit([put('deleted', encodeRecord(false, 1, 0, 0, NODE, Buffer.from('v')))]);

  const task: ScanTask = {
    dataDir,
    fragmentCount: 1,
    groupCount: 1,
    request: {
      fragment: 0,
      start: undefined,
      startInclusive: true,
      end: undefined,
      limit: 100,
      byteLimit: 1 << 20,
      examineLimit: 1000,
      pattern: undefined,
      keysOnly: true,
      stampsOnly: false,
    },
  };
  const signals = new SharedArrayBuffer(8);
  const flags = new Int32Array(signals);
  const worker = new Worker(new URL('./pool-snapshot-worker.js', import.meta.url), {
    workerData: { task, signals },
  });
  try {
    const result = new Promise<{ before: string[]; after: string[] }>((resolve, reject) => {
      // (Its first message is the pool thread's word that lmdb's addon is loaded.)
      worker.on('message', (message: { before?: string[]; after: string[] }) => {
        if (message.before !== undefined) resolve({ before: message.before, after: message.after });
      });
      worker.once('error', reject);
    });
    // The pool thread has read its first page and waits: delete a key, then let it read again.
    await eventually(() => Atomics.load(flags, 0) === 1, 30_000);
    await writer.commit([put('deleted', encodeRecord(true, 2, 0, 0, NODE, Buffer.alloc(0)))]);
    Atomics.store(flags, 1, 1);
    Atomics.notify(flags, 1);
    const { before, after: afterCommit } = await result;
    assert.deepEqual(before.sort(), ['deleted', 'kept']);
    assert.deepEqual(afterCommit, ['kept'], 'the page after the commit lists the deleted key no more');
  } finally {
    await worker.terminate();
    await writer.close();
  }
});
