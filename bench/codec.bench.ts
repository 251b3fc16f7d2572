// The record codec: encoding a write request (header + versioned record) into ring memory, and
// decoding the fields the worker reads back out; a large value's copy into shared ring memory; and
// the replication batch, encoded and read by hand (src/core/replication-wire.ts) against
// protobufjs on the same bytes.

import { copyBytes } from '../src/core/bytes.js';
import { Durability, OpKind, Priority } from '../src/core/ops.js';
import { RECORD_HEADER_BYTES, recordBytes, wallMsOf, writeRecordHeader } from '../src/core/record.js';
import { encodeReplicateBatch, readReplicateBatch } from '../src/core/replication-wire.js';
import {
  requestBytes,
  requestFlags,
  requestFragment,
  requestId,
  requestKeyBytes,
  writeRequestHeader,
} from '../src/threads/op-codec.js';
import { decodeEnvelope, encodeEnvelope } from '../src/threads/peer-messages.js';
import { type BenchRow, formatTable, isMain, runTasks } from './common.js';

const BATCH = 1000;
const LARGE_VALUE_BYTES = 4096;
/**
 * The replication-batch tasks allocate ~80 KiB a call, so a garbage collection landing in one
 * task's single window swung its figure 6× between runs: they take turns in rounds instead
 * (`runTasks`), each reporting its median round.
 */
const BATCH_ROUNDS = 5;

export async function codecBench(): Promise<BenchRow[]> {
  const key = Buffer.from('user:000123456');
  const value = Buffer.alloc(100, 7);
  const nodeId = Buffer.from('n-0123456789ab');
  const bytes = requestBytes(key.length, recordBytes(nodeId.length, value.length));
  const ring = Buffer.alloc(bytes * BATCH);
  const encode = () => {
    for (let i = 0, at = 0; i < BATCH; i++, at += bytes) {
      const p = writeRequestHeader(
        ring,
        at,
        OpKind.Read,
        requestFlags(Priority.Default, Durability.Store),
        7,
        i,
        key,
      );
      const v = writeRecordHeader(ring, p, false, 1_800_000_000_000 + i, i & 0xffff, 0, nodeId);
      ring.set(value, v);
    }
  };
  encode();
  let sink = 0;
  const decode = () => {
    for (let i = 0, at = 0; i < BATCH; i++, at += bytes) {
      const k = requestKeyBytes(ring, at);
      sink +=
        requestFragment(ring, at) +
        requestId(ring, at) +
        wallMsOf(ring.subarray(at + 10 + k, at + 10 + k + RECORD_HEADER_BYTES));
    }
  };
  const json = () => {
    for (let i = 0; i < BATCH; i++) {
      const s = JSON.stringify({
        kind: 1,
        fragment: 7,
        reqId: i,
        key: key.toString('latin1'),
        value: value.toString('base64'),
      });
      sink += (JSON.parse(s) as { reqId: number }).reqId;
    }
  };
  // A 4 KiB value from a socket read, copied into ring memory at an offset that differs from its
  // own mod 8 (a record's value lands wherever its key length puts it).
  const sharedRing = Buffer.from(new SharedArrayBuffer(LARGE_VALUE_BYTES * BATCH + 8));
  const largeValue = Buffer.alloc(LARGE_VALUE_BYTES + 3, 9).subarray(3);
  const copyWithSet = () => {
    for (let i = 0, at = 1; i < BATCH; i++, at += LARGE_VALUE_BYTES) sharedRing.set(largeValue, at);
  };
  const copyWithCopyBytes = () => {
    for (let i = 0, at = 1; i < BATCH; i++, at += LARGE_VALUE_BYTES) copyBytes(sharedRing, at, largeValue);
  };
  const rows = await runTasks('codec', [
    {
      name: 'encode write request (100 B value)',
      opsPerCall: BATCH,
      fn: encode,
      baseline: 'JSON encode+decode',
    },
    { name: 'decode request header', opsPerCall: BATCH, fn: decode, baseline: 'JSON encode+decode' },
    { name: 'JSON encode+decode', opsPerCall: BATCH, fn: json },
    {
      name: 'copy 4 KiB value into the ring (copyBytes)',
      opsPerCall: BATCH,
      fn: copyWithCopyBytes,
      baseline: 'copy 4 KiB value into the ring (typed-array set)',
    },
    { name: 'copy 4 KiB value into the ring (typed-array set)', opsPerCall: BATCH, fn: copyWithSet },
  ]);
  // A full replication batch: 512 writes of a 16-byte key and a 130-byte record (ops/s = writes).
  const ops = Array.from({ length: 512 }, (_, i) => ({
    key: Buffer.from(`user:${String(i).padStart(11, '0')}`),
    record: Buffer.alloc(130, i),
  }));
  const batch = {
    fragment: 3,
    sessionId: 5,
    batchSeq: 9,
    requiredAckLevel: 2,
    maxWallMs: 1_800_000_000_000,
    ops,
  };
  const encoded = encodeReplicateBatch(batch);
  rows.push(
    ...(await runTasks(
      'replication batch',
      [
        {
          name: 'encode by hand',
          opsPerCall: ops.length,
          fn: () => encodeReplicateBatch(batch),
          baseline: 'encode with protobufjs',
        },
        {
          name: 'encode with protobufjs',
          opsPerCall: ops.length,
          fn: () => encodeEnvelope({ replicateBatch: batch }),
        },
        {
          name: 'read by hand',
          opsPerCall: ops.length,
          fn: () => readReplicateBatch(encoded),
          baseline: 'decode with protobufjs',
        },
        { name: 'decode with protobufjs', opsPerCall: ops.length, fn: () => decodeEnvelope(encoded) },
      ],
      BATCH_ROUNDS,
    )),
  );
  if (sink === -1) console.log(sink);
  return rows;
}

if (isMain(import.meta.url)) console.log(formatTable(await codecBench()));
