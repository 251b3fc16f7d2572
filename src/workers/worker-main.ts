// Worker thread entry: opens the store and the fragments named in the startup message, reports the
// newest stored timestamp, then serves the request ring until told to close — and, while the node's
// worker ports are open, its own RESP port.

import { parentPort, workerData } from 'node:worker_threads';
import pino from 'pino';
import { asStorageError } from '../core/errors.js';
import { openStore } from '../native-bindings/open-store.js';
import {
  isWorkerPortCommand,
  type WorkerEvent,
  type WorkerInit,
  type WorkerPortEvent,
  type WorkerRespInit,
} from '../threads/messages.js';
import { WorkerRespPort } from './resp-port.js';
import { WorkerRuntime } from './worker-runtime.js';

const port = parentPort;
if (port === null) throw new Error('worker-main must run in a worker thread');

function post(event: WorkerEvent | WorkerPortEvent): void {
  port!.postMessage(event);
}

async function main(init: WorkerInit): Promise<void> {
  let runtime: WorkerRuntime;
  try {
    // The worker writes its groups: it replays their write-ahead logs and keeps them.
    runtime = await WorkerRuntime.open(init, await openStore({ ...init.store, writer: true }));
  } catch (err) {
    post({ kind: 'fatal', message: asStorageError(err).message });
    return;
  }
  runtime.start();
  post({ kind: 'ready', highWaterWallMs: runtime.highWaterWallMs(), stored: runtime.stored });
  const logger = pino({ level: init.logLevel, base: { pid: process.pid, worker: init.index } });
  let resp: WorkerRespPort | undefined;
  const listen = async (respInit: WorkerRespInit): Promise<void> => {
    const opened = new WorkerRespPort(init.index, runtime, respInit, post, logger);
    try {
      const bound = await opened.listen();
      resp = opened;
      logger.info({ port: bound }, 'worker RESP port listening');
      post({ kind: 'resp-listening', port: bound });
    } catch (err) {
      post({ kind: 'resp-listen-failed', message: `worker ${init.index}: ${(err as Error).message}` });
    }
  };
  port!.on('message', (message: unknown) => {
    if (!isWorkerPortCommand(message)) return;
    switch (message.kind) {
      case 'resp-listen':
        if (resp === undefined) void listen(message.resp);
        else
          post({
            kind: 'resp-listen-failed',
            message: `worker ${init.index}: its RESP port is open already`,
          });
        return;
      case 'resp-ports':
        resp?.setPorts(message.ports);
        return;
      case 'resp-endpoints':
        resp?.setEndpoints(message.endpoints);
        return;
      case 'relay-reply':
        resp?.onRelayReply(message.id, message.reply);
        return;
      case 'relay-push':
        resp?.onRelayPush(message.session, message.bytes);
        return;
      case 'resp-close': {
        const closing = resp;
        resp = undefined;
        void (closing?.close() ?? Promise.resolve()).then(() => post({ kind: 'resp-closed' }));
        return;
      }
    }
  });
  // A worker restarted while the ports are open reopens its own.
  if (init.resp !== undefined) await listen(init.resp);
}

void main(workerData as WorkerInit);
