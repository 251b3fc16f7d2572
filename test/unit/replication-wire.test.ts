// The hand-built ReplicateBatch, ReconcileData and ReconcileResponse codecs speak the same
// protobuf as protobufjs, both ways.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  encodeReconcileData,
  encodeReconcileResponse,
  encodeReplicateBatch,
  type ReconcileDataView,
  type ReconcileResponseView,
  type ReplicateBatchView,
  type ReplicatedOpView,
  readReconcileData,
  readReconcileResponse,
  readReplicateBatch,
} from '../../src/core/replication-wire.js';
import { decodeEnvelope, encodeEnvelope } from '../../src/threads/peer-messages.js';

/** Ops as Buffers of their own, comparable whatever memory the decoder viewed them in. */
const plainOps = (ops: readonly ReplicatedOpView[]) =>
  ops.map((op) => ({ key: Buffer.from(op.key), record: Buffer.from(op.record) }));

const batches = [
  {
    fragment: 9,
    sessionId: 123456789,
    batchSeq: 42,
    requiredAckLevel: 2,
    maxWallMs: 1_764_500_000_123,
    ops: [
      { key: Buffer.from('user:1'), record: Buffer.alloc(300, 7) },
      { key: Buffer.alloc(0), record: Buffer.from('r') },
    ],
  },
  { fragment: 0, sessionId: 1, batchSeq: 0, requiredAckLevel: 1, maxWallMs: 0, ops: [] },
];

test('what it encodes, protobufjs decodes; what protobufjs encodes, it reads', () => {
  for (const b of batches) {
    const plain = (x: ReplicateBatchView) => ({
      ...x,
      ops: plainOps(x.ops),
    });
    assert.deepEqual(plain(decodeEnvelope(encodeReplicateBatch(b)).replicateBatch!), plain(b));
    assert.deepEqual(plain(readReplicateBatch(encodeEnvelope({ replicateBatch: b }))!), plain(b));
  }
});

test('other messages and malformed bytes are not a batch', () => {
  assert.equal(
    readReplicateBatch(encodeEnvelope({ sessionStart: { fragment: 1, sessionId: 2 } })),
    undefined,
  );
  const good = encodeReplicateBatch(batches[0]);
  assert.equal(readReplicateBatch(good.subarray(0, good.length - 5)), undefined);
  // An op whose one field has an invalid wire type.
  assert.equal(readReplicateBatch(Buffer.from([0x32, 0x04, 0x32, 0x02, 0x0f, 0x00])), undefined);
});

const dataPages: ReconcileDataView[] = [
  {
    fragment: 15,
    sessionId: 2 ** 32 - 1,
    roundId: 77,
    chunkSeq: 3,
    pageSeq: 2,
    entries: [
      { key: Buffer.from('k'), record: Buffer.alloc(1039, 9) },
      { key: Buffer.alloc(0), record: Buffer.from('tomb') },
    ],
    done: true,
    maxWallMs: 1_764_500_000_456,
  },
  { fragment: 0, sessionId: 1, roundId: 1, chunkSeq: 1, pageSeq: 0, entries: [], done: false, maxWallMs: 0 },
];

test('a data page: what it encodes, protobufjs decodes; what protobufjs encodes, it reads', () => {
  const plain = (x: ReconcileDataView) => ({
    ...x,
    entries: plainOps(x.entries),
  });
  for (const d of dataPages) {
    assert.deepEqual(plain(decodeEnvelope(encodeReconcileData(d)).reconcileData!), plain(d));
    assert.deepEqual(plain(readReconcileData(encodeEnvelope({ reconcileData: d }))!), plain(d));
  }
});

test('a batch is not a data page, nor a data page a batch; a cut data page is malformed', () => {
  assert.equal(readReconcileData(encodeReplicateBatch(batches[0])), undefined);
  assert.equal(readReplicateBatch(encodeReconcileData(dataPages[0])), undefined);
  const good = encodeReconcileData(dataPages[0]);
  assert.equal(readReconcileData(good.subarray(0, good.length - 7)), undefined);
});

const summaryPages: ReconcileResponseView[] = [
  {
    fragment: 11,
    sessionId: 2 ** 32 - 1,
    roundId: 5,
    pageSeq: 300,
    summaries: [
      { key: Buffer.from('a'), stamp: Buffer.alloc(22, 1) },
      { key: Buffer.alloc(0), stamp: Buffer.from('s') },
    ],
    done: true,
    nextAfterKey: Buffer.from('user:9'),
    sourceSize: { keys: 86_000, bytes: 2 ** 40 + 3 },
    records: [
      { key: Buffer.from('user:10'), record: Buffer.alloc(1100, 4) },
      { key: Buffer.from('user:11'), record: Buffer.from('tomb') },
    ],
    maxWallMs: 1_764_000_000_123,
  },
  // A later page: no size, no cursor, nothing listed or sent; and a size of zeros.
  {
    fragment: 0,
    sessionId: 1,
    roundId: 1,
    pageSeq: 1,
    summaries: [],
    done: false,
    nextAfterKey: Buffer.alloc(0),
    sourceSize: null,
    records: [],
    maxWallMs: 0,
  },
  {
    fragment: 3,
    sessionId: 8,
    roundId: 2,
    pageSeq: 0,
    summaries: [],
    done: true,
    nextAfterKey: Buffer.alloc(0),
    sourceSize: { keys: 0, bytes: 0 },
    records: [{ key: Buffer.from('k'), record: Buffer.alloc(0) }],
    maxWallMs: 5,
  },
];

test('an anti-entropy page: what it encodes, protobufjs decodes; what protobufjs encodes, it reads', () => {
  const plain = (x: ReconcileResponseView) => ({
    ...x,
    summaries: x.summaries.map((e) => ({ key: Buffer.from(e.key), stamp: Buffer.from(e.stamp) })),
    nextAfterKey: Buffer.from(x.nextAfterKey),
    records: plainOps(x.records),
  });
  for (const r of summaryPages) {
    assert.deepEqual(plain(decodeEnvelope(encodeReconcileResponse(r)).reconcileResponse!), plain(r));
    assert.deepEqual(plain(readReconcileResponse(encodeEnvelope({ reconcileResponse: r }))!), plain(r));
    assert.deepEqual(plain(readReconcileResponse(encodeReconcileResponse(r))!), plain(r));
  }
});

test('a page is not a data page, nor a batch a page; a cut page or a malformed record in it is malformed', () => {
  assert.equal(readReconcileResponse(encodeReconcileData(dataPages[0])), undefined);
  assert.equal(readReconcileData(encodeReconcileResponse(summaryPages[0])), undefined);
  assert.equal(readReconcileResponse(encodeReplicateBatch(batches[0])), undefined);
  const good = encodeReconcileResponse(summaryPages[0]);
  assert.equal(readReconcileResponse(good.subarray(0, good.length - 7)), undefined);
  // Envelope { reconcile_response { records { key: a field of an invalid wire type } } }.
  assert.equal(readReconcileResponse(Buffer.from([0x62, 0x04, 0x4a, 0x02, 0x0f, 0x00])), undefined);
  // ... and { source_size: a double cut short }.
  assert.equal(readReconcileResponse(Buffer.from([0x62, 0x04, 0x42, 0x02, 0x09, 0x00])), undefined);
});
