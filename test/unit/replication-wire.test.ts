// The hand-built ReplicateBatch and ReconcileData codecs speak the same protobuf as protobufjs,
// both ways.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  encodeReconcileData,
  encodeReplicateBatch,
  type ReconcileDataView,
  type ReplicateBatchView,
  readReconcileData,
  readReplicateBatch,
} from '../../src/core/replication-wire.js';
import { decodeEnvelope, encodeEnvelope } from '../../src/threads/peer-messages.js';

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
      ops: x.ops.map((op) => ({ key: Buffer.from(op.key), record: Buffer.from(op.record) })),
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
    entries: x.entries.map((e) => ({ key: Buffer.from(e.key), record: Buffer.from(e.record) })),
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
