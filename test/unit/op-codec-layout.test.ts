// The ring records' headers have one owner, src/threads/op-codec.ts: every writer and reader of a
// header field goes through its accessors. These tests write each header with its writer and read
// every field back with the readers the rest of the code uses, so a field moved in one and not the
// other fails here. The byte positions are checked too: forwarded operations and their results
// cross the network between nodes, so the layout documented in op-codec.ts is a wire format.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readU16LE, readU32LE } from '../../src/core/bytes.js';
import { ErrorKind } from '../../src/core/errors.js';
import { Durability, OpKind, Priority, Reply } from '../../src/core/ops.js';
import { encodeRecord, RECORD_HEADER_BYTES, stampOf, valueOffsetOf } from '../../src/core/record.js';
import {
  acksCount,
  acksReply,
  CONTROL_HEADER_BYTES,
  checkResult,
  controlPayloadAt,
  encodeErrorResult,
  PEER_HEADER_BYTES,
  PeerStateFlag,
  peerOf,
  peerStateUp,
  peerTakesFragmentAbsent,
  REQUEST_HEADER_BYTES,
  RESULT_HEADER_BYTES,
  RequestFlag,
  RequestKind,
  ResultKind,
  readScanRequest,
  requestDurability,
  requestFlags,
  requestFragment,
  requestHeaderOnly,
  requestId,
  requestKeyBytes,
  requestKind,
  requestPriority,
  requestWantsPrior,
  resultDetail,
  resultId,
  resultRecordBytes,
  resultStatus,
  setRequestId,
  setResultId,
  writeAcksHeader,
  writeControlHeader,
  writePeerHeader,
  writeRequestHeader,
  writeResultHeader,
  writeScanRequest,
} from '../../src/threads/op-codec.js';

/** Records are written at an offset inside ring memory: test at one that is not 0. */
const AT = 13;

test('a fragment op header reads back field for field, at the documented offsets', () => {
  const buf = Buffer.alloc(64, 0xee);
  const key = Buffer.from('key-1');
  const flags =
    requestFlags(Priority.Background, Durability.Stable) | RequestFlag.HeaderOnly | RequestFlag.WantsPrior;
  const after = writeRequestHeader(buf, AT, OpKind.Write, flags, 0x1234, 0xdeadbeef, key);
  assert.equal(after, AT + REQUEST_HEADER_BYTES + key.length);
  assert.equal(requestKind(buf, AT), OpKind.Write);
  assert.equal(requestPriority(buf, AT), Priority.Background);
  assert.equal(requestDurability(buf, AT), Durability.Stable);
  assert.equal(requestHeaderOnly(buf, AT), true);
  assert.equal(requestWantsPrior(buf, AT), true);
  assert.equal(requestFragment(buf, AT), 0x1234);
  assert.equal(requestId(buf, AT), 0xdeadbeef);
  assert.equal(requestKeyBytes(buf, AT), key.length);
  assert.deepEqual(buf.subarray(AT + REQUEST_HEADER_BYTES, after), key);
  // The wire positions (op-codec.ts's layout comment).
  assert.equal(buf[AT], OpKind.Write);
  assert.equal(readU16LE(buf, AT + 2), 0x1234);
  assert.equal(readU32LE(buf, AT + 4), 0xdeadbeef);
  assert.equal(readU16LE(buf, AT + 8), key.length);
  assert.equal(REQUEST_HEADER_BYTES, 10);
});

test('a request passed on under another id keeps every other field', () => {
  const buf = Buffer.alloc(64);
  const key = Buffer.from('k');
  writeRequestHeader(buf, AT, OpKind.Read, requestFlags(Priority.High, Durability.Memory), 7, 1, key);
  const before = Buffer.from(buf);
  setRequestId(buf, AT, 0x01020304);
  assert.equal(requestId(buf, AT), 0x01020304);
  const changed = [...buf.keys()].filter((i) => buf[i] !== before[i]);
  assert.ok(
    changed.every((i) => i >= AT + 4 && i < AT + 8),
    `bytes ${changed} changed`,
  );
  assert.equal(requestFragment(buf, AT), 7);
  assert.equal(requestKeyBytes(buf, AT), 1);
});

test('a control request carries its kind and id, and its payload after the header', () => {
  const buf = Buffer.alloc(32, 0xee);
  const payloadAt = writeControlHeader(buf, AT, RequestKind.FailCommits, 99);
  assert.equal(payloadAt, controlPayloadAt(AT));
  assert.equal(payloadAt, AT + CONTROL_HEADER_BYTES);
  assert.equal(requestKind(buf, AT), RequestKind.FailCommits);
  assert.equal(requestId(buf, AT), 99);
  assert.equal(buf[AT + 1], 0);
});

test('a scan request shares the common header: its id and fragment read with the request readers', () => {
  const buf = Buffer.alloc(128);
  const scan = {
    fragment: 300,
    start: Buffer.from('a'),
    startInclusive: true,
    end: undefined,
    limit: 10,
    byteLimit: 1000,
    examineLimit: 50,
    pattern: Buffer.from('a*'),
    keysOnly: true,
    stampsOnly: false,
  };
  writeScanRequest(buf, AT, 4242, Priority.Background, scan);
  assert.equal(requestKind(buf, AT), RequestKind.Scan);
  assert.equal(requestId(buf, AT), 4242);
  assert.equal(requestFragment(buf, AT), 300);
  setRequestId(buf, AT, 5);
  const back = readScanRequest(buf, AT);
  assert.equal(requestId(buf, AT), 5);
  assert.equal(back.priority, Priority.Background);
  assert.deepEqual(back.scan, scan);
});

test('a result header reads back, and a result passed back under its origin id keeps the rest', () => {
  const buf = Buffer.alloc(32, 0xee);
  const payloadAt = writeResultHeader(buf, AT, Reply.Found, 1, 0xcafe);
  assert.equal(payloadAt, AT + RESULT_HEADER_BYTES);
  assert.equal(resultStatus(buf, AT), Reply.Found);
  assert.equal(resultDetail(buf, AT), 1);
  assert.equal(resultId(buf, AT), 0xcafe);
  assert.equal(readU32LE(buf, AT + 4), 0xcafe);
  setResultId(buf, AT, 77);
  assert.equal(resultId(buf, AT), 77);
  assert.equal(resultStatus(buf, AT), Reply.Found);
  assert.equal(resultDetail(buf, AT), 1);
});

test('an acks header carries its reply, detail and count', () => {
  const buf = Buffer.alloc(32);
  writeAcksHeader(buf, AT, Reply.Applied, 1, 3);
  assert.equal(resultStatus(buf, AT), ResultKind.Acks);
  assert.equal(resultDetail(buf, AT), 1);
  assert.equal(acksReply(buf, AT), Reply.Applied);
  assert.equal(acksCount(buf, AT), 3);
});

test('a peer record names its member and, for a peer state, whether it is up and takes FragmentAbsent', () => {
  const buf = Buffer.alloc(32);
  assert.equal(
    writePeerHeader(buf, AT, RequestKind.PeerState, PeerStateFlag.Up, 513),
    AT + PEER_HEADER_BYTES,
  );
  assert.equal(requestKind(buf, AT), RequestKind.PeerState);
  assert.equal(peerOf(buf, AT), 513);
  assert.equal(peerStateUp(buf, AT), true);
  assert.equal(peerTakesFragmentAbsent(buf, AT), false);
  writePeerHeader(buf, AT, RequestKind.PeerState, PeerStateFlag.Up | PeerStateFlag.TakesFragmentAbsent, 513);
  assert.equal(peerStateUp(buf, AT), true);
  assert.equal(peerTakesFragmentAbsent(buf, AT), true);
  writePeerHeader(buf, AT, RequestKind.PeerState, 0, 2);
  assert.equal(peerStateUp(buf, AT), false);
  assert.equal(peerTakesFragmentAbsent(buf, AT), false);
});

test('an error result as the mesh builds one is what a worker writes and a peer accepts', () => {
  const result = encodeErrorResult(ErrorKind.Network, 'peer went away', 12);
  assert.equal(checkResult(result, 0, result.length), undefined);
  assert.equal(resultStatus(result, 0), ResultKind.Error);
  assert.equal(resultDetail(result, 0), ErrorKind.Network);
  assert.equal(resultId(result, 0), 12);
  assert.equal(result.toString('utf8', RESULT_HEADER_BYTES), 'peer went away');
});

test("a record's stamp and a header-only result end where the value starts", () => {
  const nodeId = Buffer.from('node-abc');
  const record = encodeRecord(false, 1_700_000_000_000, 3, 0, nodeId, Buffer.from('value'));
  assert.equal(valueOffsetOf(record), RECORD_HEADER_BYTES + nodeId.length);
  assert.equal(stampOf(record).length, valueOffsetOf(record));
  assert.equal(resultRecordBytes(record, true), valueOffsetOf(record));
  assert.equal(resultRecordBytes(record, false), record.length);
});
