// The worker's replica waits (src/workers/replica-waits.ts) for a write that waits for its
// replicas: the write is followed into its actor by a fence, and answered once its own reply and
// its replicas' acknowledgements are both in, in either order; a write that wrote nothing is
// answered at once; the deadline answers with the replicas reached.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { FragmentOp } from '../../src/core/fragment.js';
import { Durability, OpKind, Priority, Reply } from '../../src/core/ops.js';
import { AckLevel, type ReplicationSender } from '../../src/core/replication-sender.js';
import { ReplicaWaits } from '../../src/workers/replica-waits.js';
import { SimClock } from '../sim/sim-world.js';

const FRAGMENT = 3;
const PEERS = [1, 2];

function setup() {
  let nowMs = 1_000;
  const clock = new SimClock(() => nowMs);
  /** Through which position each peer acknowledged, at every level. */
  const acked = new Map<number, number>(PEERS.map((p) => [p, 0]));
  const answers: Array<{ reqId: number; reply: Reply; reached: number }> = [];
  const flushes: number[] = [];
  const waits = new ReplicaWaits({
    positionOf: () => 5,
    forEachSender: (_fragment, visit) => {
      for (const peer of PEERS) {
        const through = acked.get(peer)!;
        visit(peer, { ackedThrough: () => through, lostThrough: 0 } as unknown as ReplicationSender);
      }
    },
    flush: (_fragment, throughOps) => flushes.push(throughOps),
    answer: () => assert.fail('a write is answered as a write'),
    answerText: () => assert.fail('a write is answered as a write'),
    answerWrite: (write, reached) => answers.push({ reqId: write.reqId, reply: write.reply, reached }),
    clock,
  });
  const write = new FragmentOp(
    OpKind.Write,
    9,
    Priority.Default,
    Durability.Store,
    Buffer.from('k'),
    Buffer.alloc(0),
  );
  const fence = waits.admitWrite(write, FRAGMENT, { replicas: 2, level: AckLevel.Store, timeoutMs: 100 });
  /** The actor's reply to `op`, as the worker hands it over. */
  const reply = (op: FragmentOp, r: Reply) => {
    op.reply = r;
    op.sink!.onReply(op, r, '');
  };
  const ack = (peer: number, through: number) => {
    acked.set(peer, through);
    waits.onAcked(FRAGMENT);
  };
  return {
    write,
    fence,
    reply,
    ack,
    answers,
    flushes,
    clock,
    advance: (ms: number) => {
      nowMs += ms;
    },
  };
}

describe('a write that waits for its replicas, in the worker', () => {
  test('its fence follows it with the same id, and waits at the position it reached', () => {
    const { write, fence, reply, flushes, answers } = setup();
    assert.equal(fence.kind, OpKind.Fence);
    assert.equal(fence.reqId, write.reqId);
    assert.equal(fence.durabilityOnly, true);
    reply(fence, Reply.FenceReached);
    assert.deepEqual(flushes, [5], "the fragment's senders send what they hold at once");
    assert.deepEqual(answers, []);
  });

  test('answered once its own reply and both replicas are in: the reply first', () => {
    const { write, fence, reply, ack, answers } = setup();
    reply(fence, Reply.FenceReached);
    reply(write, Reply.Applied);
    ack(1, 5);
    assert.deepEqual(answers, [], 'one of two replicas');
    ack(2, 5);
    assert.deepEqual(answers, [{ reqId: 9, reply: Reply.Applied, reached: 2 }]);
    ack(2, 6);
    assert.equal(answers.length, 1, 'once');
  });

  test('answered once its own reply and both replicas are in: the replicas first', () => {
    const { write, fence, reply, ack, answers } = setup();
    reply(fence, Reply.FenceReached);
    ack(1, 5);
    ack(2, 7);
    assert.deepEqual(answers, [], 'not before the write is durable here');
    reply(write, Reply.Applied);
    assert.deepEqual(answers, [{ reqId: 9, reply: Reply.Applied, reached: 2 }]);
  });

  test('a write that wrote nothing is answered at once, and its fence then answers nobody', () => {
    const { write, fence, reply, ack, answers } = setup();
    reply(write, Reply.NotApplied);
    assert.deepEqual(answers, [{ reqId: 9, reply: Reply.NotApplied, reached: 0 }]);
    reply(fence, Reply.FenceReached);
    ack(1, 5);
    ack(2, 5);
    assert.equal(answers.length, 1);
  });

  test('at its deadline it is answered with the replicas reached', () => {
    const { write, fence, reply, ack, answers, clock, advance } = setup();
    reply(fence, Reply.FenceReached);
    reply(write, Reply.Applied);
    ack(1, 5);
    advance(99);
    assert.equal(clock.fireDue(), false);
    advance(1);
    assert.equal(clock.fireDue(), true);
    assert.deepEqual(answers, [{ reqId: 9, reply: Reply.Applied, reached: 1 }]);
  });

  test('a fence that fails counts as no replica reached', () => {
    const { write, fence, reply, answers } = setup();
    reply(fence, Reply.Backpressure);
    reply(write, Reply.Applied);
    assert.deepEqual(answers, [{ reqId: 9, reply: Reply.Applied, reached: 0 }]);
  });
});
