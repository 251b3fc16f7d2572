// A worker's write path on one thread (worker-path.ts): a turn of request records through the
// worker's runtime — copy out of the ring, fragment actors, one lmdb transaction, replies — with no
// second thread, so the figure is the worker's own cost per write without wake-ups or a busy
// neighbour. The baseline is lmdb doing only the store's part: the same puts in one transaction.
//
//   node .build/bench/worker-path.bench.js [batch]     (default 2000 writes per turn)
//
// It runs in a worker thread with a node's worker heap settings (WORKER_YOUNG_GENERATION_MB).

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { open } from 'lmdb';
import { WORKER_YOUNG_GENERATION_MB } from '../src/core/limits.js';
import { type BenchRow, formatTable, isMain, runTasks } from './common.js';
import {
  openWorkerPath,
  WORKER_PATH_FRAGMENTS,
  WORKER_PATH_KEYS,
  WORKER_PATH_RECORD_BYTES,
} from './worker-path.js';

/** The two tasks take turns; each reports its median round (`runTasks`). */
const ROUNDS = 5;
/** The compiled tree this file belongs to. */
const OWN_ROOT = fileURLToPath(new URL('..', import.meta.url));

export async function workerPathBench(batch = 2000): Promise<BenchRow[]> {
  const path = await openWorkerPath(OWN_ROOT, batch);
  const { keys, fragmentOfKey } = path;
  const dir = mkdtempSync(join(tmpdir(), 'tessera-worker-path-raw-'));
  // The lmdb store's durability: overlapping sync, no write map, each transaction flushed.
  const env = open({
    path: dir,
    overlappingSync: true,
    eventTurnBatching: false,
    maxDbs: WORKER_PATH_FRAGMENTS + 1,
  });
  const dbs = Array.from({ length: WORKER_PATH_FRAGMENTS }, (_, f) =>
    env.openDB({ name: `f${f}`, encoding: 'binary', keyEncoding: 'binary' }),
  );
  const record = Buffer.alloc(WORKER_PATH_RECORD_BYTES, 42);
  let rawNext = 0;
  const rawTurn = () =>
    env.batch(() => {
      for (let i = 0; i < batch; i++) {
        const k = rawNext++ % WORKER_PATH_KEYS;
        dbs[fragmentOfKey[k]].put(keys[k], record);
      }
    });
  try {
    return await runTasks(
      'worker path',
      [
        { name: `lmdb put, ${batch} in one batch`, opsPerCall: batch, fn: rawTurn },
        {
          name: `worker turn of ${batch} writes @store`,
          opsPerCall: batch,
          fn: () => path.turn(),
          baseline: `lmdb put, ${batch} in one batch`,
        },
      ],
      ROUNDS,
    );
  } finally {
    await path.close();
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
