// How a worker turn's replies reach the result ring: header-only replies of one status and detail
// travel together in an Acks record, a reply with a record or text on its own, and every request
// gets exactly one reply. Drives a WorkerRuntime turn directly over a memory store.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as limits from '../../src/core/limits.js';
import { Durability, OpKind, Priority, Reply } from '../../src/core/ops.js';
import { recordBytes, writeRecordHeader } from '../../src/core/record.js';
import { openStore } from '../../src/native-bindings/open-store.js';
import {
  acksCount,
  acksReply,
  RESULT_HEADER_BYTES,
  RequestFlag,
  ResultKind,
  requestBytes,
  requestFlags,
  resultDetail,
  resultId,
  resultStatus,
  writeRequestHeader,
} from '../../src/threads/op-codec.js';
import { createRing, RingReader, RingWriter } from '../../src/threads/ring.js';
import { WorkerRuntime } from '../../src/workers/worker-runtime.js';
import { MEMORY_STORE_LOCATION, oneFragmentWorkerInit } from './fixtures/worker-init.js';

const RING_BYTES = limits.RING_BYTES_MIN;
const NODE_ID = Buffer.from('n1');
const VALUE = Buffer.from('value');

interface Sent {
  reqId: number;
  key: string;
  wallMs: number;
  wantsPrior?: boolean;
}

async function openRuntime() {
  const store = await openStore(MEMORY_STORE_LOCATION);
  const requestRing = createRing(RING_BYTES);
  const resultRing = createRing(RING_BYTES);
  const init = oneFragmentWorkerInit(requestRing, resultRing);
  // The turn is private to the runtime: this drives it as the drain loop would.
  const runtime = (await WorkerRuntime.open(init, store)) as unknown as { onBatch(): void };
  const requests = new RingWriter(requestRing);
  const results = new RingReader(resultRing);

  /** Sends the writes as one turn; returns each result record as [status, detail, reqIds…]. */
  const turn = (writes: Sent[]): number[][] => {
    for (const w of writes) {
      const key = Buffer.from(w.key);
      const at = requests.reserve(requestBytes(key.length, recordBytes(NODE_ID.length, VALUE.length)));
      const buf = requests.bytes;
      let p = writeRequestHeader(
        buf,
        at,
        OpKind.Write,
        requestFlags(Priority.Default, Durability.Store) | (w.wantsPrior ? RequestFlag.WantsPrior : 0),
        0,
        w.reqId,
        key,
      );
      p = writeRecordHeader(buf, p, false, w.wallMs, 0, 0, NODE_ID);
      buf.set(VALUE, p);
      requests.commit();
    }
    requests.publish();
    runtime.onBatch();
    const out: number[][] = [];
    for (let at: number; (at = results.next()) !== -1; ) {
      const buf = results.bytes;
      if (resultStatus(buf, at) === ResultKind.Acks) {
        const ids: number[] = [];
        for (let i = 0; i < acksCount(buf, at); i++)
          ids.push(buf.readUInt32LE(at + RESULT_HEADER_BYTES + 4 * i));
        assert.equal(
          results.recordBytes,
          RESULT_HEADER_BYTES + 4 * ids.length,
          'an Acks record holds its ids only',
        );
        out.push([ResultKind.Acks, acksReply(buf, at), resultDetail(buf, at), ...ids]);
      } else {
        out.push([resultStatus(buf, at), resultDetail(buf, at), resultId(buf, at)]);
      }
    }
    results.release();
    return out;
  };
  return { turn, close: () => store.close() };
}

test('header-only replies of one status and detail share an Acks record; others come on their own', async () => {
  const worker = await openRuntime();
  try {
    const now = Date.now();
    // Stamps increase, as the node's clock issues them: each write is newer than all before it, so
    // the actor applies it directly (FragmentCore.tryDirectWrite).
    const first = Array.from({ length: 5 }, (_, i) => ({ reqId: 10 + i, key: `k${i}`, wallMs: now + i }));
    assert.deepEqual(worker.turn(first), [[ResultKind.Acks, Reply.Applied, 0, 10, 11, 12, 13, 14]]);

    const second: Sent[] = [
      { reqId: 20, key: 'k0', wallMs: now + 10, wantsPrior: true }, // Applied, a value existed
      { reqId: 21, key: 'k1', wallMs: now + 11, wantsPrior: true },
      { reqId: 22, key: 'k1', wallMs: now - 1 }, // older than what k1 holds: Superseded, with the winner
      { reqId: 23, key: 'fresh-a', wallMs: now + 12 },
      { reqId: 24, key: 'fresh-b', wallMs: now + 13 },
      { reqId: 25, key: 'k2', wallMs: now + 14, wantsPrior: true },
      { reqId: 26, key: 'fresh-c', wallMs: now + 15 },
    ];
    // The first asks what it replaced, so it is queued as an op, and every write after it in the turn
    // queues behind it: replies in arrival order, grouped while status and detail stay the same.
    assert.deepEqual(worker.turn(second), [
      [Reply.Superseded, 1, 22],
      [ResultKind.Acks, Reply.Applied, 1, 20, 21],
      [ResultKind.Acks, Reply.Applied, 0, 23, 24],
      [Reply.Applied, 1, 25],
      [Reply.Applied, 0, 26],
    ]);

    // Direct writes of a commit are answered after its queued ops.
    const third: Sent[] = [
      { reqId: 30, key: 'fresh-d', wallMs: now + 20 },
      { reqId: 31, key: 'k3', wallMs: now + 21, wantsPrior: true },
      { reqId: 32, key: 'fresh-e', wallMs: now + 22 },
    ];
    // 30 is applied directly; 31 asks what it replaced (k3 held a value), so it queues, and 32 behind it.
    assert.deepEqual(worker.turn(third), [
      [Reply.Applied, 1, 31],
      [ResultKind.Acks, Reply.Applied, 0, 32, 30],
    ]);
  } finally {
    await worker.close();
  }
});

test('an Acks record holds at most RESULT_ACKS_MAX replies; every write gets one reply', async () => {
  const worker = await openRuntime();
  try {
    const now = Date.now();
    const n = limits.RESULT_ACKS_MAX + 3;
    const writes = Array.from({ length: n }, (_, i) => ({ reqId: i, key: `key:${i}`, wallMs: now + i }));
    const records = worker.turn(writes);
    assert.equal(records.length, 2);
    assert.deepEqual(records[0].slice(0, 3), [ResultKind.Acks, Reply.Applied, 0]);
    assert.equal(records[0].length - 3, limits.RESULT_ACKS_MAX);
    assert.deepEqual(records[1], [ResultKind.Acks, Reply.Applied, 0, n - 3, n - 2, n - 1]);
    const ids = records.flatMap((r) => (r[0] === ResultKind.Acks ? r.slice(3) : [r[2]]));
    assert.deepEqual(
      ids.sort((a, b) => a - b),
      writes.map((w) => w.reqId),
    );
  } finally {
    await worker.close();
  }
});
