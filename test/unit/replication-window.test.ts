// The replication sender's window (spec §5.3; replication-sender.ts "Rules"): batches pipelined per
// (fragment, peer), retired in order, replayed from the oldest unacknowledged one; `flush` and the
// level asked on demand. Scripted time and ids counting from 1; then a seeded property: a sender and
// a receiver (replication-receiver.ts) over a FIFO link that breaks, delays and refuses, checked
// against the plain sequence of ops.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { BatchReceiver } from '../../src/core/replication-receiver.js';
import {
  AckLevel,
  describeAction,
  ReplicationSender,
  type SenderAction,
  type SenderConfig,
  type SenderEvent,
} from '../../src/core/replication-sender.js';

const WINDOW: SenderConfig = {
  fragment: 0,
  peer: 'node-b',
  requiredAck: AckLevel.Store,
  batchOpsMax: 2,
  batchBytesMax: 1000,
  batchIntervalMs: 10,
  bufferOpsMax: 100,
  bufferBytesMax: 100_000,
  windowBatches: 3,
  windowOpsMax: 100,
  windowBytesMax: 100_000,
  ackTimeoutMs: 1000,
  retryFloorMs: 500,
  reconcileIntervalMs: 3_600_000,
  reconcileTimeoutMs: 5000,
};

type Batch = Extract<SenderAction, { kind: 'batch' }>;
const bytes = (s: string) => new Uint8Array(Buffer.from(s, 'latin1'));

/** A sender past its first session's round; `sent` keeps every batch by seq of the current session. */
class Harness {
  readonly sender: ReplicationSender;
  nowMs = 0;
  private nextId = 0;
  readonly logs: string[] = [];
  readonly sent = new Map<number, Batch>();
  session = 0;

  constructor(overrides: Partial<SenderConfig> = {}) {
    this.sender = new ReplicationSender({ ...WINDOW, ...overrides }, { next: () => ++this.nextId });
    assert.deepEqual(this.step({ kind: 'connected' }), [
      'session-start session=1',
      'start-round session=1 round=2',
    ]);
    this.step({ kind: 'round-done', sessionId: 1, roundId: 2 });
  }

  step(event: Record<string, unknown> & { kind: SenderEvent['kind'] }, atMs = this.nowMs): string[] {
    this.nowMs = atMs;
    this.sender.step({ ...event, nowMs: atMs } as SenderEvent);
    const actions: SenderAction[] = [];
    this.sender.takeActions(actions);
    const out: string[] = [];
    for (const a of actions) {
      if (a.kind === 'log') {
        this.logs.push(a.message);
        continue;
      }
      if (a.kind === 'session-start') {
        this.session = a.sessionId;
        this.sent.clear();
      }
      if (a.kind === 'batch') this.sent.set(a.batchSeq, a);
      out.push(describeAction(a));
    }
    return out;
  }

  enqueue(keys: string, atMs = this.nowMs): string[] {
    const out: string[] = [];
    for (const key of keys.split(' '))
      out.push(...this.step({ kind: 'enqueue', key: bytes(key), record: bytes('v') }, atMs));
    return out;
  }
  ack(batchSeq: number, level: AckLevel = AckLevel.Store, atMs = this.nowMs): string[] {
    return this.step({ kind: 'ack', sessionId: this.session, batchSeq, level }, atMs);
  }
  flush(level: AckLevel, atMs = this.nowMs): string[] {
    return this.step({ kind: 'flush', throughOps: this.sender.enqueuedThroughOps, level }, atMs);
  }
  report() {
    return this.sender.report(this.nowMs);
  }
  acked(): string {
    return [AckLevel.Memory, AckLevel.Store, AckLevel.Stable]
      .map((l) => this.sender.ackedThrough(l))
      .join('/');
  }
}

test('§5.3: full batches go without waiting for ACKs, up to the window', () => {
  const h = new Harness();
  assert.deepEqual(h.enqueue('a b c d e f g h'), [
    'batch session=1 seq=1 ack=store ["a" "b"]',
    'batch session=1 seq=2 ack=store ["c" "d"]',
    'batch session=1 seq=3 ack=store ["e" "f"]',
  ]);
  assert.equal(h.report().inFlight, 6);
  assert.deepEqual(h.ack(1), ['batch session=1 seq=4 ack=store ["g" "h"]'], 'a slot freed: the next goes');
  assert.match(h.sender.describe(), /in-flight=6\/3 replay=0\/0/);
});

test('§5.3: an ACK of batch k retires every batch up to k, in order; a late ACK of one retired changes nothing', () => {
  const h = new Harness();
  h.enqueue('a b c d e f');
  assert.deepEqual(h.ack(2), []);
  let r = h.report();
  assert.deepEqual([r.batchesAcked, r.opsAcked, r.inFlight], [2, 4, 2]);
  assert.equal(h.acked(), '4/4/0', 'positions through batch 2 at store and below');
  assert.deepEqual(h.ack(1), []);
  assert.equal(h.report().batchesAcked, 2);
  assert.deepEqual(h.ack(7), [], 'a batch never sent');
  h.ack(3, AckLevel.Stable);
  r = h.report();
  assert.deepEqual([r.batchesAcked, r.opsAcked, r.inFlight], [3, 6, 0]);
  assert.equal(h.acked(), '6/6/6');
  assert.ok(h.sender.drained());
});

test('§5.3: the window bounds ops and bytes in flight too; an empty window takes a batch over them', () => {
  const h = new Harness({ batchOpsMax: 4, windowOpsMax: 5, batchBytesMax: 400, windowBytesMax: 400 });
  assert.deepEqual(h.enqueue('a b c d e f g h'), [
    'batch session=1 seq=1 ack=store ["a" "b" "c" "d"]',
    'batch session=1 seq=2 ack=store ["e"]',
  ]);
  assert.deepEqual(h.step({ kind: 'tick' }, 100), [], 'the window is full of ops: f, g and h wait');
  assert.equal(h.sender.nextWakeMs(100), 1000, 'and no tick is asked for them before the ACK timeout');
  assert.deepEqual(h.ack(1), ['batch session=1 seq=3 ack=store ["f" "g" "h"]']);
});

test('§5.3: a disconnect replays the window from its oldest batch: the same ops in the same batches, in order', () => {
  const h = new Harness();
  h.enqueue('a b c d e f g');
  h.ack(1);
  h.step({ kind: 'disconnected' }, 5);
  assert.match(h.sender.describe(), /in-flight=0\/0 replay=4\/2/);
  assert.deepEqual(h.step({ kind: 'connected' }, 6), [
    'session-start session=3',
    'batch session=3 seq=1 ack=store ["c" "d"]',
    'batch session=3 seq=2 ack=store ["e" "f"]',
    'batch session=3 seq=3 ack=store ["g"]',
  ]);
  assert.deepEqual(h.ack(3), ['start-round session=3 round=4'], 'the inherited backlog ACKed: the round');
  assert.equal(h.report().opsAcked, 7);
});

test('§5.3: a NACK of a batch in the window replays from the oldest unacknowledged one in a new session', () => {
  const h = new Harness();
  h.enqueue('a b c d e f');
  h.ack(1);
  assert.deepEqual(h.step({ kind: 'nack', sessionId: 1, batchSeq: 3, error: 'disk full' }, 10), [
    'session-start session=3',
  ]);
  assert.match(h.logs.at(-1)!, /batch 3 refused \(disk full\); new session, replaying in 500 ms/);
  assert.deepEqual(h.step({ kind: 'ack', sessionId: 1, batchSeq: 2, level: AckLevel.Store }, 11), []);
  assert.equal(h.report().opsAcked, 2, 'an ACK of the old session is stale');
  assert.deepEqual(h.step({ kind: 'tick' }, 510), [
    'batch session=3 seq=1 ack=store ["c" "d"]',
    'batch session=3 seq=2 ack=store ["e" "f"]',
  ]);
});

test('§5.3: the ACK timeout runs from the oldest batch in flight', () => {
  const h = new Harness();
  h.enqueue('a b', 0);
  h.enqueue('c d', 400);
  h.ack(1, AckLevel.Store, 450);
  assert.equal(h.sender.nextWakeMs(450), 1400);
  assert.deepEqual(h.step({ kind: 'tick' }, 1400), [
    'session-start session=3',
    'batch session=3 seq=1 ack=store ["c" "d"]',
  ]);
});

test('a round waits for the window to empty: nothing is cut meanwhile', () => {
  const h = new Harness();
  h.enqueue('a b c');
  h.step({ kind: 'reconcile-now' });
  assert.deepEqual(h.step({ kind: 'tick' }, 10), [], 'c is due but held for the round');
  assert.equal(h.sender.nextWakeMs(10), 1000, 'no tick for it either');
  assert.deepEqual(h.ack(1, AckLevel.Store, 11), [
    'start-round session=1 round=3',
    'batch session=1 seq=2 ack=store ["c"]',
  ]);
});

test('flush: the ops through the position go at once, not after the batch interval', () => {
  const h = new Harness();
  assert.deepEqual(h.enqueue('a'), []);
  assert.deepEqual(h.flush(AckLevel.Store), ['batch session=1 seq=1 ack=store ["a"]']);
  h.enqueue('b');
  assert.deepEqual(h.step({ kind: 'tick' }, 5), [], 'a later op waits for its interval');
  assert.deepEqual(h.step({ kind: 'tick' }, 10), ['batch session=1 seq=2 ack=store ["b"]']);
});

test('a flush asks for a level above the batches’: the batches that cover it ask for it', () => {
  const h = new Harness();
  h.enqueue('a b c');
  assert.deepEqual(h.flush(AckLevel.Stable), ['batch session=1 seq=2 ack=stable ["c"]']);
  h.enqueue('d');
  assert.deepEqual(h.step({ kind: 'tick' }, 10), ['batch session=1 seq=3 ack=store ["d"]'], 'past it: store');
  // The receiver answers in order; a store ACK of 3 retires 1 but not 2, which asked for stable.
  assert.deepEqual(h.ack(3, AckLevel.Store), []);
  assert.deepEqual([h.report().batchesAcked, h.acked()], [1, '4/4/0']);
  h.ack(2, AckLevel.Stable);
  assert.deepEqual([h.report().batchesAcked, h.acked()], [3, '4/4/3']);
  assert.ok(h.sender.drained());
  assert.ok(h.sender.drainedAt(AckLevel.Store) && !h.sender.drainedAt(AckLevel.Stable));
});

test('a flush for a level when every op went out already sends an empty batch that asks for it', () => {
  const h = new Harness();
  h.enqueue('a b');
  h.ack(1);
  assert.equal(h.acked(), '2/2/0');
  assert.deepEqual(h.flush(AckLevel.Stable), ['batch session=1 seq=2 ack=stable []']);
  assert.deepEqual(h.flush(AckLevel.Stable), [], 'asked once');
  h.ack(2, AckLevel.Stable);
  assert.equal(h.acked(), '2/2/2');
  assert.ok(h.sender.drainedAt(AckLevel.Stable));
  assert.deepEqual(h.flush(AckLevel.Stable), [], 'reached already');
});

test('a level asked for is asked again after a replay, by the first batch replayed', () => {
  const h = new Harness();
  assert.deepEqual(h.enqueue('a b'), ['batch session=1 seq=1 ack=store ["a" "b"]']);
  assert.deepEqual(h.flush(AckLevel.Stable), ['batch session=1 seq=2 ack=stable []']);
  h.step({ kind: 'disconnected' });
  assert.deepEqual(h.step({ kind: 'connected' }), [
    'session-start session=3',
    'batch session=3 seq=1 ack=stable ["a" "b"]',
    'batch session=3 seq=2 ack=store []',
  ]);
});

// --- Property: a sender and a receiver over a faulty link --------------------------------------------

/** A seeded xorshift32 for fast-check's seeds. */
function prng(seed: number): () => number {
  let x = seed | 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

interface Frame {
  atMs: number;
  session: number;
  /** To the receiver: a session start or a batch; back: an answer. */
  batch?: Batch;
  answer?: { batchSeq: number; level: AckLevel; error: string };
}

/**
 * One run: ops enqueued at random, a FIFO link each way with random latency that sometimes breaks
 * (everything on it lost), a receiver whose fences finish in random order and sometimes fail, and
 * flushes at random levels. Checks: the receiver applies the ops in enqueue order, each exactly once
 * per session it sees them in, with no op skipped; every ACKed position was applied at the receiver;
 * and once the faults stop, everything is acknowledged at every level a flush asked for.
 */
function runLink(seed: number): void {
  const random = prng(seed);
  const config: SenderConfig = { ...WINDOW, windowBatches: 4, batchOpsMax: 3, bufferOpsMax: 10_000 };
  let nextId = 0;
  const sender = new ReplicationSender(config, { next: () => ++nextId });
  const receiver = new BatchReceiver(config.windowBatches);
  let nowMs = 0;
  let up = true;
  let session = 0;
  let toReceiver: Frame[] = [];
  let toSender: Frame[] = [];
  /** Batches applied, awaiting their fence, in any order. */
  const fences: { session: number; batch: Batch }[] = [];
  /**
   * The receiver's store: the longest prefix of enqueue order applied, and of ops whose batch's fence
   * was reached (an ACK must never claim more than that).
   */
  let appliedThrough = 0;
  const fenced: boolean[] = [];
  let fencedThrough = 0;
  let enqueued = 0;
  let wantedStable = 0;
  const actions: SenderAction[] = [];
  const latency = () => 1 + Math.floor(random() * 20);
  const step = (event: SenderEvent) => {
    sender.step(event);
    sender.takeActions(actions);
    for (const a of actions) {
      if (a.kind === 'session-start') session = a.sessionId;
      if (a.kind === 'start-round')
        sender.step({ kind: 'round-done', sessionId: a.sessionId, roundId: a.roundId, nowMs });
      if (a.kind === 'batch' && up) toReceiver.push({ atMs: nowMs + latency(), session, batch: a });
    }
    actions.length = 0;
    // Positions ACKed never run ahead of what the receiver fenced.
    assert.ok(sender.ackedThrough(AckLevel.Memory) <= Math.max(fencedThrough, sender.lostThrough));
  };
  const deliver = (faults: boolean) => {
    while (toReceiver.length > 0 && toReceiver[0]!.atMs <= nowMs) {
      const { session: s, batch } = toReceiver.shift()!;
      const verdict = receiver.admit(s, batch!.batchSeq, batch!.requiredAck);
      if (verdict.kind === 'refuse') {
        toSender.push({
          atMs: nowMs + latency(),
          session: s,
          answer: { batchSeq: batch!.batchSeq, level: batch!.requiredAck, error: verdict.error },
        });
      } else if (verdict.kind === 'apply') {
        for (const [key] of batch!.ops) {
          const index = Number(Buffer.from(key).toString('latin1'));
          if (index === appliedThrough + 1) appliedThrough = index;
          assert.ok(index <= appliedThrough, `op ${index} applied before op ${appliedThrough + 1}`);
        }
        fences.push({ session: s, batch: batch! });
      }
    }
    // Fences finish in any order (a stable one may take longer); some fail.
    while (fences.length > 0 && random() < 0.6) {
      const [{ session: s, batch }] = fences.splice(Math.floor(random() * fences.length), 1);
      const error = faults && random() < 0.03 ? 'disk full' : '';
      receiver.finished(s, batch!.batchSeq, error);
      if (error !== '') continue;
      for (const [key] of batch!.ops) fenced[Number(Buffer.from(key).toString('latin1'))] = true;
      while (fenced[fencedThrough + 1] === true) fencedThrough++;
    }
    const answers: { sessionId: number; batchSeq: number; level: AckLevel; error: string }[] = [];
    receiver.takeAnswers(answers);
    for (const a of answers) toSender.push({ atMs: nowMs + latency(), session: a.sessionId, answer: a });
    while (toSender.length > 0 && toSender[0]!.atMs <= nowMs) {
      const { session: s, answer } = toSender.shift()!;
      if (answer!.error !== '')
        step({ kind: 'nack', sessionId: s, batchSeq: answer!.batchSeq, error: answer!.error, nowMs });
      else step({ kind: 'ack', sessionId: s, batchSeq: answer!.batchSeq, level: answer!.level, nowMs });
    }
  };
  step({ kind: 'connected', nowMs });
  for (let ms = 0; ms < 3000; ms++) {
    nowMs = ms;
    if (random() < 0.3) step({ kind: 'enqueue', key: bytes(String(++enqueued)), record: bytes('v'), nowMs });
    if (random() < 0.02) {
      const level = random() < 0.5 ? AckLevel.Store : AckLevel.Stable;
      if (level === AckLevel.Stable) wantedStable = enqueued;
      step({ kind: 'flush', throughOps: enqueued, level, nowMs });
    }
    if (up && random() < 0.002) {
      up = false;
      toReceiver = [];
      toSender = [];
      step({ kind: 'disconnected', nowMs });
    } else if (!up && random() < 0.02) {
      up = true;
      step({ kind: 'connected', nowMs });
    }
    deliver(true);
    step({ kind: 'tick', nowMs });
  }
  if (!up) {
    up = true;
    step({ kind: 'connected', nowMs });
  }
  wantedStable = enqueued;
  step({ kind: 'flush', throughOps: enqueued, level: AckLevel.Stable, nowMs });
  for (let ms = 3000; ms < 20_000 && !sender.drainedAt(AckLevel.Stable); ms++) {
    nowMs = ms;
    deliver(false);
    step({ kind: 'tick', nowMs });
  }
  assert.ok(sender.drained() && sender.drainedAt(AckLevel.Stable), `drained: ${sender.describe()}`);
  assert.equal(sender.ackedThrough(AckLevel.Stable), wantedStable);
  assert.equal(appliedThrough, enqueued, 'every op reached the receiver, in order');
  assert.equal(sender.report(nowMs).opsAcked, enqueued);
}

test('fast-check: over a link that breaks, delays and refuses, ops apply in order and ACKs never run ahead', () => {
  fc.assert(fc.property(fc.integer({ min: 1, max: 2 ** 31 - 1 }), runLink), {
    numRuns: 60,
    seed: 20261204,
  });
});
