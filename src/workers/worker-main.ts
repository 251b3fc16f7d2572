// Worker thread entry: opens the store and the fragments named in the startup message, reports the
// newest stored timestamp, then serves the request ring until told to close.

import { parentPort, workerData } from 'node:worker_threads';
import { asStorageError } from '../core/errors.js';
import { openStore } from '../native-bindings/open-store.js';
import type { WorkerEvent, WorkerInit } from '../threads/messages.js';
import { WorkerRuntime } from './worker-runtime.js';

const port = parentPort;
if (port === null) throw new Error('worker-main must run in a worker thread');

function post(event: WorkerEvent): void {
  port!.postMessage(event);
}

async function main(init: WorkerInit): Promise<void> {
  let runtime: WorkerRuntime;
  try {
    runtime = await WorkerRuntime.open(init, await openStore(init.store));
  } catch (err) {
    post({ kind: 'fatal', message: asStorageError(err).message });
    return;
  }
  runtime.start();
  post({ kind: 'ready', highWaterWallMs: runtime.highWaterWallMs() });
}

void main(workerData as WorkerInit);
