// The main thread's link to a worker at the edges of the worker's life: results the worker published
// just before it exited reach their handlers (its exit may be seen before the wake-up for them), and
// close() settles — when the worker ends on its own after answering Close, and when it is closed
// while a crashed worker's restart is pending. The worker is a stand-in (fixtures/exiting-worker.ts)
// that answers one request and exits without waking the main thread.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import pino from 'pino';
import { ERROR_CODES, ErrorKind, type TesseraError } from '../../src/core/errors.js';
import * as limits from '../../src/core/limits.js';
import { OpKind, Reply } from '../../src/core/ops.js';
import { type ResultHandler, WorkerLink } from '../../src/main/worker-link.js';
import { resultStatus } from '../../src/threads/op-codec.js';
import { eventually } from '../integration/helpers.js';
import { oneFragmentWorkerInit } from './fixtures/worker-init.js';

/** Longer than any of these steps takes: a close that never settles fails the test instead of hanging it. */
const SETTLE_MS = 5_000;

function newLink(): WorkerLink {
  return new WorkerLink(0, {
    ringBytes: limits.RING_BYTES_MIN,
    entry: new URL('./fixtures/exiting-worker.js', import.meta.url),
    makeInit: (_index, requestRing, resultRing, restarted) =>
      oneFragmentWorkerInit(requestRing, resultRing, restarted),
    onReady: () => undefined,
    logger: pino({ level: 'silent' }),
  });
}

/** Sends a request the stand-in answers Applied before it crashes; resolves to what the handler saw. */
function sendWrite(link: WorkerLink): Promise<string> {
  return new Promise((resolve) => {
    const handler: ResultHandler<undefined> = {
      onResult: (_token, buf, at) => resolve(`result ${resultStatus(buf, at)}`),
      onFailure: (_token, error: TesseraError) => resolve(`failed ${error.code}`),
    };
    const at = link.begin(handler, undefined, 8);
    link.buffer[at] = OpKind.Write;
    link.buffer.writeUInt32LE(link.reqId, at + 4);
    link.end();
  });
}

function withinSettle<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${SETTLE_MS} ms`)), SETTLE_MS);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

test('a result published just before the worker crashed reaches its handler; close after the restart settles', async () => {
  const link = newLink();
  await link.start();
  assert.equal(await withinSettle(sendWrite(link), 'the write'), `result ${Reply.Applied}`);
  await eventually(() => link.state === 'ready' && link.restarts === 1);
  // The stand-in answers Closed and exits without a wake-up: close learns of the answer from the exit.
  await withinSettle(link.close(), 'close');
  assert.equal(link.state, 'closed');
});

test('close while a crashed worker waits for its restart settles, and fails what waited for it', async () => {
  const link = newLink();
  await link.start();
  await withinSettle(sendWrite(link), 'the write');
  await eventually(() => link.state === 'restarting');
  const waiting = sendWrite(link);
  await withinSettle(link.close(), 'close');
  assert.equal(await waiting, `failed ${ERROR_CODES[ErrorKind.ShuttingDown]}`);
});
