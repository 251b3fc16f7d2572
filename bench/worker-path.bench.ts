// A worker's write path on one thread: request records are encoded into a request ring as the main
// thread would, then the worker's runtime runs one turn over them (copy out of the ring, fragment
// actors, one lmdb transaction, replies into the result ring), with no second thread, so the figure
// is the worker's own cost per write without wake-ups or a busy neighbour. The baseline is lmdb
// doing only the store's part: the same puts in one transaction per batch.
//
//   node .build/bench/worker-path.bench.js [batch]     (default 2000 writes per turn)
//
// It runs in a worker thread with a node's worker heap settings (WORKER_YOUNG_GENERATION_MB).

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { open } from 'lmdb';
import { Keyspace } from '../src/core/keyspace.js';
import {
  BACKGROUND_OPS_PER_SEC_DEFAULT,
  FLUSH_INTERVAL_MS_DEFAULT,
  FLUSH_PENDING_BYTES_MAX,
  FLUSH_PENDING_WRITES_MAX,
  HLC_LOGICAL_MAX,
  QUEUE_OPS_MAX_DEFAULT,
  VALUE_BYTES_MAX_DEFAULT,
  WORKER_YOUNG_GENERATION_MB,
} from '../src/core/limits.js';
import { Durability, OpKind, Priority } from '../src/core/ops.js';
import { recordBytes, writeRecordHeader } from '../src/core/record.js';
import type { StoreLocation } from '../src/native-bindings/kv-store.js';
import { openStore } from '../src/native-bindings/open-store.js';
import { FragmentBoard } from '../src/threads/fragment-board.js';
import type { WorkerInit } from '../src/threads/messages.js';
import { requestBytes, writeRequestHeader } from '../src/threads/op-codec.js';
import { createRing, RingReader, RingWriter } from '../src/threads/ring.js';
import { WorkerRuntime } from '../src/workers/worker-runtime.js';
import { type BenchRow, formatTable, isMain, runTasks } from './common.js';

const FRAGMENTS = 16;
const KEYS = 100_000;
const RING_BYTES = 1 << 24;
const VALUE = Buffer.alloc(100, 42);
const NODE_ID = Buffer.from('node-bench-1');
/** The two tasks take turns; each reports its median round (`runTasks`). */
const ROUNDS = 5;

export async function workerPathBench(batch = 2000): Promise<BenchRow[]> {
  const dir = mkdtempSync(join(tmpdir(), 'tessera-worker-path-'));
  const fragments = Array.from({ length: FRAGMENTS }, (_, f) => f);
  const location: StoreLocation = {
    kind: 'lmdb',
    dataDir: join(dir, 'tessera'),
    fragmentCount: FRAGMENTS,
    levelGroups: [],
    levelGroupCount: 0,
    stableLog: 0,
  };
  const store = await openStore(location);
  for (const f of fragments) await store.openFragment(f);
  const requestRing = createRing(RING_BYTES);
  const resultRing = createRing(RING_BYTES);
  const init: WorkerInit = {
    index: 0,
    requestRing,
    resultRing,
    store: location,
    board: FragmentBoard.create(FRAGMENTS).buffer,
    fragments,
    fragment: {
      valueBytesMax: VALUE_BYTES_MAX_DEFAULT,
      queueOpsMax: QUEUE_OPS_MAX_DEFAULT,
      backgroundOpsPerSec: BACKGROUND_OPS_PER_SEC_DEFAULT,
      flushIntervalMs: FLUSH_INTERVAL_MS_DEFAULT,
      flushWritesMax: FLUSH_PENDING_WRITES_MAX,
      flushBytesMax: FLUSH_PENDING_BYTES_MAX,
    },
    cleanIntervalMs: 3_600_000,
    logLevel: 'silent',
    cluster: undefined,
    restarted: false,
  };
  // The turn is private to the runtime: the bench drives it as the drain loop would.
  const runtime = new WorkerRuntime(init, store) as unknown as { onBatch(): void };
  const requests = new RingWriter(requestRing);
  const results = new RingReader(resultRing);
  const keyspace = new Keyspace(FRAGMENTS);
  const keys = Array.from({ length: KEYS }, (_, i) => Buffer.from(`key:${String(i).padStart(8, '0')}`));
  const fragmentOfKey = keys.map((k) => keyspace.fragmentOf(k));
  let next = 0;
  let wallMs = Date.now();
  let logical = 0;

  const turn = () => {
    for (let i = 0; i < batch; i++) {
      const k = next++ % KEYS;
      const at = requests.reserve(requestBytes(keys[k].length, recordBytes(NODE_ID.length, VALUE.length)));
      const buf = requests.bytes;
      if (++logical > HLC_LOGICAL_MAX) {
        logical = 0;
        wallMs++;
      }
      let p = writeRequestHeader(
        buf,
        at,
        OpKind.Write,
        Priority.Default,
        Durability.Store,
        false,
        fragmentOfKey[k],
        i,
        keys[k],
      );
      p = writeRecordHeader(buf, p, false, wallMs, logical, 0, NODE_ID);
      buf.set(VALUE, p);
      requests.commit();
    }
    requests.publish();
    runtime.onBatch();
    let replies = 0;
    while (results.next() !== -1) replies++;
    results.release();
    if (replies !== batch) throw new Error(`${replies} replies to ${batch} writes`);
  };

  const env = open({ path: join(dir, 'raw'), noSync: true, useWritemap: true, maxDbs: FRAGMENTS + 1 });
  const dbs = fragments.map((f) => env.openDB({ name: `f${f}`, encoding: 'binary', keyEncoding: 'binary' }));
  const record = Buffer.alloc(recordBytes(NODE_ID.length, VALUE.length), 42);
  let rawNext = 0;
  const rawTurn = () => {
    env.transactionSync(() => {
      for (let i = 0; i < batch; i++) {
        const k = rawNext++ % KEYS;
        dbs[fragmentOfKey[k]].putSync(keys[k], record);
      }
    });
  };
  try {
    return await runTasks(
      'worker path',
      [
        { name: `lmdb putSync, ${batch} in one transaction`, opsPerCall: batch, fn: rawTurn },
        {
          name: `worker turn of ${batch} writes @store`,
          opsPerCall: batch,
          fn: turn,
          baseline: `lmdb putSync, ${batch} in one transaction`,
        },
      ],
      ROUNDS,
    );
  } finally {
    await store.close();
    await env.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Runs the suite in a worker thread with a worker's heap settings, as the runtime runs in a node. */
export function workerPathBenchInWorker(batch = 2000): Promise<BenchRow[]> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL(import.meta.url), {
      workerData: batch,
      resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB },
    });
    worker.once('message', resolve);
    worker.once('error', reject);
  });
}

if (!isMainThread) parentPort!.postMessage(await workerPathBench(workerData as number));
else if (isMain(import.meta.url)) {
  console.log(formatTable(await workerPathBenchInWorker(Number(process.argv[2] ?? 2000))));
}
