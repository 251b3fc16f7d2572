// The ring records of runtime placement (src/threads/op-codec.ts: HoldFragment, DropFragment,
// AddMembers, ReconcileNow, DrainedTo requests; RoundReport and RoundAnswer results): each written
// with its writer reads back field for field with the readers the worker and the main thread use,
// and takes exactly the bytes its size function reserved.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  CONTROL_HEADER_BYTES,
  controlFragment,
  DRAINED_TO_REQUEST_BYTES,
  holdRequestBytes,
  membersRequestBytes,
  RECONCILE_NOW_REQUEST_BYTES,
  RequestKind,
  ResultKind,
  type RoundReport,
  readHoldReplicas,
  readMembersRequest,
  readPeerWait,
  readRoundReport,
  reconcileIsUrgent,
  reconcileVerifies,
  requestId,
  requestKind,
  resultId,
  resultStatus,
  roundReportBytes,
  writeDrainedToRequest,
  writeDropRequest,
  writeHoldRequest,
  writeMembersRequest,
  writeReconcileNowRequest,
  writeRoundReport,
} from '../../src/threads/op-codec.js';

/** A buffer with a record written at offset 3 (not 0: offsets must be honoured) and a guard byte after. */
function written(bytes: number, write: (buf: Buffer, at: number) => void): Buffer {
  const buf = Buffer.alloc(3 + bytes + 1, 0xee);
  write(buf, 3);
  assert.equal(buf[3 + bytes], 0xee, 'the record stays within the bytes reserved for it');
  return buf;
}

test('HoldFragment carries its fragment, id and replica list; DropFragment its fragment and id', () => {
  const replicas = [2, 0, 65535];
  const hold = written(holdRequestBytes(replicas), (buf, at) => writeHoldRequest(buf, at, 77, 513, replicas));
  assert.equal(requestKind(hold, 3), RequestKind.HoldFragment);
  assert.equal(requestId(hold, 3), 77);
  assert.equal(controlFragment(hold, 3), 513);
  assert.deepEqual(readHoldReplicas(hold, 3), replicas);
  assert.deepEqual(
    readHoldReplicas(
      written(holdRequestBytes([]), (b, at) => writeHoldRequest(b, at, 1, 0, [])),
      3,
    ),
    [],
  );

  const drop = written(CONTROL_HEADER_BYTES, (buf, at) => writeDropRequest(buf, at, 9, 4));
  assert.equal(requestKind(drop, 3), RequestKind.DropFragment);
  assert.equal(requestId(drop, 3), 9);
  assert.equal(controlFragment(drop, 3), 4);
});

test('AddMembers carries the first slot and the node ids, UTF-8 included', () => {
  const nodeIds = ['n-3', 'nœud-4'];
  const buf = written(membersRequestBytes(nodeIds), (b, at) => writeMembersRequest(b, at, 5, 3, nodeIds));
  assert.equal(requestKind(buf, 3), RequestKind.AddMembers);
  assert.equal(requestId(buf, 3), 5);
  assert.deepEqual(readMembersRequest(buf, 3), { first: 3, nodeIds });
});

test('ReconcileNow and DrainedTo carry fragment, member, level, time limit, whether to verify or hurry, and the continuity', () => {
  const now = written(RECONCILE_NOW_REQUEST_BYTES, (b, at) =>
    writeReconcileNowRequest(b, at, 11, 7, 300, 0xffff_ffff, false),
  );
  assert.equal(requestKind(now, 3), RequestKind.ReconcileNow);
  assert.equal(requestId(now, 3), 11);
  assert.equal(controlFragment(now, 3), 7);
  assert.equal(reconcileVerifies(now, 3), false);
  assert.deepEqual(readPeerWait(now, 3), { member: 300, level: 0, timeoutMs: 0xffff_ffff, continuity: 0 });
  const verify = written(RECONCILE_NOW_REQUEST_BYTES, (b, at) =>
    writeReconcileNowRequest(b, at, 11, 7, 300, 10, true),
  );
  assert.equal(reconcileVerifies(verify, 3), true);
  assert.equal(reconcileIsUrgent(verify, 3), false);
  assert.equal(controlFragment(verify, 3), 7);
  const urgent = written(RECONCILE_NOW_REQUEST_BYTES, (b, at) =>
    writeReconcileNowRequest(b, at, 11, 7, 300, 10, false, true),
  );
  assert.deepEqual([reconcileVerifies(urgent, 3), reconcileIsUrgent(urgent, 3)], [false, true]);
  assert.equal(reconcileIsUrgent(now, 3), false);

  const drained = written(DRAINED_TO_REQUEST_BYTES, (b, at) =>
    writeDrainedToRequest(b, at, 12, 8, 2, 3, 5_000, 2 ** 32 - 1),
  );
  assert.equal(requestKind(drained, 3), RequestKind.DrainedTo);
  assert.equal(requestId(drained, 3), 12);
  assert.equal(controlFragment(drained, 3), 8);
  assert.deepEqual(readPeerWait(drained, 3), {
    member: 2,
    level: 3,
    timeoutMs: 5_000,
    continuity: 2 ** 32 - 1,
  });
});

test('a round report reads back whole, as news (RoundReport, RoundProgress) or as an answer (RoundAnswer)', () => {
  const failed: RoundReport = {
    fragment: 1023,
    member: 4,
    roundSeq: 17,
    roundId: 2 ** 31 - 1,
    ok: false,
    keysPulled: 123_456,
    // Past 32 bits: a round may pull more than 4 GiB.
    bytesPulled: 2 ** 40 + 12_345,
    sourceSize: { keys: 2 ** 33 + 7, bytes: 2 ** 47 + 99 },
    continuity: 2 ** 32 - 1,
    whole: true,
    reason: 'peer disconnected',
  };
  const news = written(roundReportBytes(failed), (b, at) =>
    writeRoundReport(b, at, ResultKind.RoundReport, 0, failed),
  );
  assert.equal(resultStatus(news, 3), ResultKind.RoundReport);
  assert.deepEqual(readRoundReport(news, 3, roundReportBytes(failed)), failed);

  // An empty source is a size all the same: it reads back as said, not as unknown.
  const emptySource: RoundReport = { ...failed, sourceSize: { keys: 0, bytes: 0 }, reason: '' };
  const progress = written(roundReportBytes(emptySource), (b, at) =>
    writeRoundReport(b, at, ResultKind.RoundProgress, 0, emptySource),
  );
  assert.equal(resultStatus(progress, 3), ResultKind.RoundProgress);
  assert.deepEqual(readRoundReport(progress, 3, roundReportBytes(emptySource)), emptySource);

  // Before the peer said its size, none is reported.
  const ok: RoundReport = { ...failed, ok: true, sourceSize: undefined, whole: false, reason: '' };
  const answer = written(roundReportBytes(ok), (b, at) =>
    writeRoundReport(b, at, ResultKind.RoundAnswer, 42, ok),
  );
  assert.equal(resultStatus(answer, 3), ResultKind.RoundAnswer);
  assert.equal(resultId(answer, 3), 42);
  assert.deepEqual(readRoundReport(answer, 3, roundReportBytes(ok)), ok);
});
