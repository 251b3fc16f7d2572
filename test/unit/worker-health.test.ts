// The worker health report crosses the result ring through one encoder and one decoder; a report
// that does not fit the type is an error naming the field, not a cast.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  decodeWorkerHealth,
  encodeWorkerHealth,
  type WorkerHealthReport,
} from '../../src/threads/worker-health.js';

const REPORT: WorkerHealthReport = {
  worker: 1,
  store: 'lmdb',
  syncInFlight: false,
  heapUsedBytes: 12_345_678,
  heapLimitBytes: 4_294_967_296,
  evictedKeys: 3,
  ringWakeupsRecovered: 0,
  fragments: [
    {
      fragment: 5,
      queued: [0, 2, 1],
      shed: [0, 0, 4],
      unflushed: 7,
      committedGeneration: 10,
      syncedGeneration: 9,
      writes: 100,
      reads: 50,
      expiredSwept: 2,
      commitFailures: 0,
    },
  ],
  replication: [
    {
      fragment: 5,
      peer: 'node-b',
      state: 'connected',
      connected: true,
      sessionId: 77,
      buffered: 3,
      bufferedBytes: 300,
      inFlight: 1,
      lastAckLevel: 2,
      ackDurabilityMismatch: false,
      reconcileRounds: 4,
      resets: 0,
      opsDropped: 0,
      batchesAcked: 12,
      opsAcked: 99,
      lagMs: 15,
    },
  ],
};

test('a health report decodes to what was encoded', () => {
  assert.deepEqual(decodeWorkerHealth(encodeWorkerHealth(REPORT)), REPORT);
});

test('a report missing a field, or with one of the wrong type, is refused naming the field', () => {
  const { evictedKeys: _, ...missing } = REPORT;
  assert.throws(() => decodeWorkerHealth(JSON.stringify(missing)), /report\.evictedKeys is not a number/);
  const badFragment = { ...REPORT, fragments: [{ ...REPORT.fragments[0], queued: [0, 'x', 1] }] };
  assert.throws(
    () => decodeWorkerHealth(JSON.stringify(badFragment)),
    /fragments\[0\]\.queued is not a list of numbers/,
  );
  const badSender = { ...REPORT, replication: [{ ...REPORT.replication[0], peer: 7 }] };
  assert.throws(
    () => decodeWorkerHealth(JSON.stringify(badSender)),
    /replication\[0\]\.peer is not a string/,
  );
  assert.throws(
    () => decodeWorkerHealth(JSON.stringify({ ...REPORT, replication: {} })),
    /replication is not a list/,
  );
});

test('text that is not JSON is refused as an internal error', () => {
  assert.throws(
    () => decodeWorkerHealth('{"worker":'),
    (err: Error & { kind?: number }) => /not JSON/.test(err.message) && err.name === 'TesseraError',
  );
});
