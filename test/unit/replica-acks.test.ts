// Waits for replica acknowledgements (src/core/replica-acks.ts): the worker's tracker answers a
// wait once enough peers acknowledged its position, whatever order their acknowledgements come in,
// or at its deadline with the count reached; a reset's lost writes never count. The main thread's
// WaitRound answers the fewest replicas over the fragments a connection wrote, forwarded or not.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type AckTrackerAction, ReplicaAckTracker, WaitRound } from '../../src/core/replica-acks.js';
import { AckLevel, ReplicationSender, SENDER_CONFIG_DEFAULTS } from '../../src/core/replication-sender.js';

const FOREVER = Number.POSITIVE_INFINITY;

function tracker() {
  const t = new ReplicaAckTracker();
  const answers: AckTrackerAction[] = [];
  const drain = () => {
    const out: AckTrackerAction[] = [];
    t.takeActions(out);
    answers.push(...out);
    return out.map((a) => `#${a.id}=${a.reached}${a.full ? ' full' : ''}`);
  };
  /** `store`: through which position the peer acknowledged at store (memory too). */
  const acked = (fragment: number, peer: number, store: number, stable = 0, lost = 0) =>
    t.step({
      kind: 'progress',
      fragment,
      peer,
      ackedThroughOps: [0, Math.max(store, stable), Math.max(store, stable), stable],
      lostThroughOps: lost,
    });
  const wait = (
    id: number,
    fragment: number,
    throughOps: number,
    replicas: number,
    deadlineMs = FOREVER,
    level: AckLevel = AckLevel.Store,
  ) => t.step({ kind: 'wait', id, fragment, throughOps, level, replicas, deadlineMs, nowMs: 0 });
  return { t, drain, acked, wait, answers };
}

test('a wait is answered once enough peers acknowledged its position, acknowledgements in any order', () => {
  const { t, drain, acked, wait } = tracker();
  acked(3, 1, 0);
  acked(3, 2, 0);
  wait(10, 3, 5, 2);
  wait(11, 3, 2, 1);
  assert.deepEqual(drain(), [], 'nothing acknowledged yet');
  assert.equal(t.watching(3), true);
  // Peer 2 is ahead of peer 1: the later position's first acknowledgement comes from it.
  acked(3, 2, 7);
  assert.deepEqual(drain(), ['#11=1'], 'one peer is enough for #11; #10 needs two');
  acked(3, 1, 4);
  assert.deepEqual(drain(), [], 'peer 1 is still short of position 5');
  acked(3, 1, 6);
  assert.deepEqual(drain(), ['#10=2']);
  assert.equal(t.watching(3), false, 'nothing waits: the fragment is forgotten');
});

test('an acknowledgement that arrives before the wait counts at once', () => {
  const { drain, acked, wait } = tracker();
  acked(1, 1, 9);
  acked(1, 2, 3);
  wait(1, 1, 4, 1);
  assert.deepEqual(drain(), ['#1=1']);
  acked(1, 1, 9);
  acked(1, 2, 9);
  wait(2, 1, 4, 1);
  assert.deepEqual(drain(), ['#2=2'], 'the answer counts every peer that reached it');
});

test('a peer that disconnects mid-wait stops counting: the wait answers at its deadline with what it reached', () => {
  const { t, drain, acked, wait } = tracker();
  acked(0, 1, 0);
  acked(0, 2, 0);
  wait(1, 0, 3, 2, 1_000);
  acked(0, 1, 3);
  assert.deepEqual(drain(), []);
  // Peer 2 went away: no more progress from it.
  assert.equal(t.nextWakeMs(), 1_000);
  t.step({ kind: 'tick', nowMs: 999 });
  assert.deepEqual(drain(), [], 'before the deadline');
  t.step({ kind: 'tick', nowMs: 1_000 });
  assert.deepEqual(drain(), ['#1=1']);
  assert.equal(t.nextWakeMs(), FOREVER);
});

test('writes a reset dropped are never acknowledged by that peer, even when later ones are', () => {
  const { t, drain, acked, wait } = tracker();
  wait(1, 0, 4, 1, 500);
  wait(2, 0, 8, 1, 500);
  // The sender dropped its backlog through position 5, then had 6..8 acknowledged.
  acked(0, 1, 8, 0, 5);
  assert.deepEqual(drain(), ['#2=1'], 'position 8 was sent and acknowledged; 4 was lost');
  t.step({ kind: 'tick', nowMs: 500 });
  assert.deepEqual(drain(), ['#1=0']);
});

test('a stable wait counts only acknowledgements at stable', () => {
  const { drain, acked, wait } = tracker();
  wait(1, 0, 2, 1, FOREVER, AckLevel.Stable);
  acked(0, 1, 5);
  assert.deepEqual(drain(), [], 'acknowledged at store only');
  acked(0, 1, 5, 2);
  assert.deepEqual(drain(), ['#1=1']);
});

test('a wait past its deadline already, or at position 0, answers at once', () => {
  const { t, drain, acked } = tracker();
  acked(0, 1, 0);
  acked(0, 2, 0);
  t.step({
    kind: 'wait',
    id: 1,
    fragment: 0,
    throughOps: 0,
    level: AckLevel.Store,
    replicas: 2,
    deadlineMs: 10,
    nowMs: 0,
  });
  t.step({
    kind: 'wait',
    id: 2,
    fragment: 0,
    throughOps: 1,
    level: AckLevel.Store,
    replicas: 1,
    deadlineMs: 10,
    nowMs: 10,
  });
  assert.deepEqual(drain(), ['#1=2', '#2=0']);
});

test('close answers every wait with what it reached', () => {
  const { t, drain, acked, wait } = tracker();
  wait(1, 0, 2, 2);
  wait(2, 5, 1, 1);
  acked(0, 1, 2);
  t.step({ kind: 'close' });
  assert.deepEqual(drain().sort(), ['#1=1', '#2=0']);
});

test('the sender reports positions: acknowledged through the batch ACKed, lost through a reset', () => {
  let id = 0;
  const sender = new ReplicationSender(
    {
      ...SENDER_CONFIG_DEFAULTS,
      fragment: 0,
      peer: 'b',
      batchIntervalMs: 0,
      bufferOpsMax: 4,
      batchOpsMax: 2,
    },
    { next: () => ++id },
  );
  const key = new Uint8Array([1]);
  const enqueue = () => sender.step({ kind: 'enqueue', key, record: new Uint8Array(8), nowMs: 0 });
  sender.step({ kind: 'connected', nowMs: 0 });
  const actions: Parameters<typeof sender.takeActions>[0] = [];
  // The first op leaves at once (no batch interval); two more wait behind it.
  enqueue();
  enqueue();
  enqueue();
  assert.equal(sender.enqueuedThroughOps, 3);
  sender.takeActions(actions);
  const batch = actions.find((a) => a.kind === 'batch');
  assert.ok(batch !== undefined && batch.kind === 'batch');
  assert.equal(batch.ops.length, 1);
  sender.step({
    kind: 'ack',
    sessionId: batch.sessionId,
    batchSeq: batch.batchSeq,
    level: AckLevel.Store,
    nowMs: 2,
  });
  assert.equal(sender.ackedThrough(AckLevel.Store), 1);
  assert.equal(sender.ackedThrough(AckLevel.Memory), 1);
  assert.equal(sender.ackedThrough(AckLevel.Stable), 0, 'an ACK at store says nothing of stable');
  // Two in flight now; the backlog holds four at most: the fifth drops everything.
  for (let i = 0; i < 3; i++) enqueue();
  assert.equal(sender.lostThrough, 6, 'everything through the op that did not fit was dropped');
  assert.equal(sender.enqueuedThroughOps, 6);
});

test('a wait round answers the fewest replicas over its fragments, asking again those short of the goal', () => {
  const round = new WaitRound(3, 2, 1_000, 2);
  assert.equal(round.answer(2, true, 10), false, 'fragment a reached the goal');
  assert.equal(round.answer(1, true, 20), true, 'fragment b is short and there is time: ask again');
  assert.equal(round.answer(2, true, 30), false, 'fragment b, asked again');
  assert.equal(round.done, false);
  // Fragment c was forwarded and its serving node went away.
  round.fail();
  assert.equal(round.done, true);
  assert.equal(round.reached, 0);
  assert.equal(round.localReached, false);
});

test('a wait round settles a short fragment at its deadline, and answers the idle count when nothing was written', () => {
  const round = new WaitRound(1, 2, 1_000, 2);
  assert.equal(round.answer(1, true, 1_000), false);
  assert.equal(round.reached, 1);
  assert.equal(round.localReached, true);
  const idle = new WaitRound(0, 1, FOREVER, 2);
  assert.equal(idle.done, true);
  assert.equal(idle.reached, 2);
  assert.equal(new WaitRound(1, 1, FOREVER, 0).askMs(0, 2_000), 2_000);
  assert.equal(new WaitRound(1, 1, 500, 0).askMs(100, 2_000), 400);
});
