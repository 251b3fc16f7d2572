// The hand-built ReplicateBatch codec speaks the same protobuf as protobufjs, both ways.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  encodeReplicateBatch,
  type ReplicateBatchView,
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
