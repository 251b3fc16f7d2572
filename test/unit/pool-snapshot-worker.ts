// The pool thread of pool-snapshot.test.ts: runs two scan tasks with the writer's commit between
// them and no turn of this thread's event loop in between (it blocks on an Atomics wait), as
// piscina may hand a thread two tasks back to back.

import { parentPort, workerData } from 'node:worker_threads';
import type { ScanTask } from '../../src/threads/messages.js';
import type { ScanPage } from '../../src/threads/op-codec.js';
import poolTask from '../../src/workers/scan-task.js';

const { task, signals } = workerData as { task: ScanTask; signals: SharedArrayBuffer };
const flags = new Int32Array(signals);

const keysOf = (page: ScanPage): string[] => page.entries.map((e) => Buffer.from(e.key).toString());
const before = keysOf((await poolTask(task)) as ScanPage);
// Tell the writer to commit, and wait for it here, inside this task's turn of the event loop.
Atomics.store(flags, 0, 1);
Atomics.notify(flags, 0);
Atomics.wait(flags, 1, 0, 30_000);
const after = keysOf((await poolTask(task)) as ScanPage);
parentPort?.postMessage({ before, after });
