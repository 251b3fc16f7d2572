// Replication sender state machine (spec B13, tests 92–99; A §5.3, §6): scripted time, a counter for
// ids, and the actions read back as text. Ends with a fast-check property over random interleavings.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  AckLevel,
  describeAction,
  ReplicationSender,
  RoundSlots,
  type SenderAction,
  type SenderConfig,
  type SenderEvent,
} from '../../src/core/replication-sender.js';
import { seededFractions } from './fixtures/xorshift32.js';

type Event = SenderEvent extends infer E ? (E extends SenderEvent ? Omit<E, 'nowMs'> : never) : never;

const BASE: SenderConfig = {
  fragment: 0,
  peer: 'node-b',
  requiredAck: AckLevel.Memory,
  batchOpsMax: 4,
  batchBytesMax: 1000,
  batchIntervalMs: 10,
  bufferOpsMax: 100,
  bufferBytesMax: 100_000,
  // One batch in flight unless a test opens the window: the tests below it read one batch at a time.
  windowBatches: 1,
  windowOpsMax: 100,
  windowBytesMax: 100_000,
  ackTimeoutMs: 1000,
  retryFloorMs: 1000,
  reconcileIntervalMs: 3_600_000,
  reconcileTimeoutMs: 5000,
};

const bytes = (s: string) => new Uint8Array(Buffer.from(s, 'latin1'));

/** A sender with scripted time; ids count up from 1, so they are easy to read. */
class Harness {
  readonly sender: ReplicationSender;
  nowMs = 0;
  private nextId = 0;
  readonly logs: string[] = [];
  /** The last batch sent, for ack/nack helpers. */
  lastBatch: Extract<SenderAction, { kind: 'batch' }> | undefined;
  lastRound: Extract<SenderAction, { kind: 'start-round' }> | undefined;
  session = 0;

  constructor(
    overrides: Partial<SenderConfig> = {},
    ids = { next: () => ++this.nextId },
    slots?: RoundSlots,
  ) {
    this.sender = new ReplicationSender({ ...BASE, ...overrides }, ids, slots);
  }

  step(event: Event, atMs = this.nowMs): string[] {
    this.nowMs = atMs;
    this.sender.step({ ...event, nowMs: atMs } as SenderEvent);
    return this.frames();
  }

  /** Actions since the last call, logs set aside. */
  frames(): string[] {
    const actions: SenderAction[] = [];
    this.sender.takeActions(actions);
    const out: string[] = [];
    for (const a of actions) {
      if (a.kind === 'log') {
        this.logs.push(a.message);
        continue;
      }
      if (a.kind === 'batch') this.lastBatch = a;
      if (a.kind === 'start-round') this.lastRound = a;
      if (a.kind === 'session-start') this.session = a.sessionId;
      out.push(describeAction(a));
    }
    return out;
  }

  enqueue(key: string, atMs = this.nowMs, record = 'v'): string[] {
    return this.step({ kind: 'enqueue', key: bytes(key), record: bytes(record) }, atMs);
  }
  tick(atMs: number): string[] {
    return this.step({ kind: 'tick' }, atMs);
  }
  ack(level: AckLevel = AckLevel.Memory, atMs = this.nowMs): string[] {
    const b = this.lastBatch!;
    return this.step({ kind: 'ack', sessionId: b.sessionId, batchSeq: b.batchSeq, level }, atMs);
  }
  nack(atMs = this.nowMs): string[] {
    const b = this.lastBatch!;
    return this.step(
      { kind: 'nack', sessionId: b.sessionId, batchSeq: b.batchSeq, error: 'injected rejection' },
      atMs,
    );
  }
  /** The end of round `roundId` (the last started) of the last round's session. */
  roundDone(atMs = this.nowMs, roundId = this.lastRound!.roundId): string[] {
    return this.step({ kind: 'round-done', sessionId: this.lastRound!.sessionId, roundId }, atMs);
  }
  report() {
    return this.sender.report(this.nowMs);
  }
}

/** Connected, first round finished: the steady state most tests start from. Session 1, round 2. */
function connectedIdle(overrides: Partial<SenderConfig> = {}): Harness {
  const h = new Harness(overrides);
  assert.deepEqual(h.step({ kind: 'connected' }), [
    'session-start session=1',
    'start-round session=1 round=2',
  ]);
  assert.deepEqual(h.roundDone(), []);
  assert.equal(h.report().reconcileRounds, 1);
  return h;
}

test('B13 #92: an ACK for an old session is ignored after a reconnect', () => {
  const h = connectedIdle();
  h.enqueue('k', 0);
  assert.deepEqual(h.tick(10), ['batch session=1 seq=1 ack=memory ["k"]']);
  const old = h.lastBatch!;
  h.step({ kind: 'disconnected' });
  assert.deepEqual(h.step({ kind: 'disconnected' }), [], 'a second disconnect is a no-op');
  assert.equal(h.report().state, 'disconnected');
  assert.deepEqual(h.step({ kind: 'connected' }), [
    'session-start session=3',
    'batch session=3 seq=1 ack=memory ["k"]',
  ]);
  assert.deepEqual(
    h.step({ kind: 'ack', sessionId: old.sessionId, batchSeq: old.batchSeq, level: AckLevel.Stable }),
    [],
  );
  assert.equal(h.report().inFlight, 1);
  assert.equal(h.report().opsAcked, 0);
  assert.deepEqual(h.ack(), ['start-round session=3 round=4']);
  assert.equal(h.report().opsAcked, 1);
  assert.equal(h.report().state, 'reconciling');
});

test('a connect while connected replaces the session (the new connection wins)', () => {
  const h = connectedIdle();
  h.enqueue('k', 0);
  h.tick(10);
  assert.deepEqual(h.step({ kind: 'connected' }), [
    'session-start session=3',
    'batch session=3 seq=1 ack=memory ["k"]',
  ]);
  assert.equal(h.report().sessionId, 3);
  assert.equal(h.report().state, 'connected');
});

test('B13 #93: buffer overflow while disconnected → buffer_reset, then session-start and a round', () => {
  const h = new Harness({ bufferOpsMax: 4, batchOpsMax: 4, batchIntervalMs: 3_600_000 });
  for (let i = 0; i < 4; i++) assert.deepEqual(h.enqueue(`k${i}`), []);
  assert.equal(h.report().buffered, 4);
  assert.deepEqual(h.enqueue('k4'), [], 'nothing is emitted while disconnected');
  let r = h.report();
  assert.equal(r.state, 'buffer_reset');
  assert.equal(r.sessionId, 0);
  assert.equal(r.resets, 1);
  assert.equal(r.opsDropped, 5);
  assert.equal(r.buffered, 0);
  assert.equal(h.logs.length, 0);
  assert.deepEqual(h.step({ kind: 'connected' }, 100), [
    'session-start session=1',
    'start-round session=1 round=2',
  ]);
  assert.equal(h.logs.length, 1, 'the drop is logged once connected');
  assert.match(h.logs[0]!, /dropped 5 ops/);
  r = h.report();
  assert.equal(r.state, 'buffer_reset', 'until a round after the reset completes');
  assert.notEqual(r.sessionId, 0);
  h.roundDone();
  assert.equal(h.report().state, 'connected');
});

test('a reset drops the batch in flight: its ACK no longer matches, the next batch is seq 2', () => {
  const h = connectedIdle({ bufferOpsMax: 4 });
  h.enqueue('a', 0);
  h.tick(10);
  const dropped = h.lastBatch!;
  for (const k of ['b', 'c', 'd']) h.enqueue(k, 10);
  assert.equal(h.report().buffered + h.report().inFlight, 4);
  assert.deepEqual(h.enqueue('e', 10), ['start-round session=1 round=3']);
  assert.equal(h.report().inFlight, 0);
  assert.equal(h.report().state, 'buffer_reset');
  h.step({ kind: 'ack', sessionId: dropped.sessionId, batchSeq: dropped.batchSeq, level: AckLevel.Stable });
  assert.equal(h.report().opsAcked, 0);
  h.enqueue('f', 20);
  assert.deepEqual(h.tick(30), ['batch session=1 seq=2 ack=memory ["f"]']);
  h.roundDone();
  assert.equal(h.report().state, 'connected');
});

test('the continuity: opened by the first session, kept through replays, ended by a buffer reset or a peer that lost what it acknowledged', () => {
  const h = new Harness({ bufferOpsMax: 4 });
  const starts: Array<Extract<SenderAction, { kind: 'session-start' }>> = [];
  let lastBatch: Extract<SenderAction, { kind: 'batch' }> | undefined;
  const sessionStarts = (): void => {
    const actions: SenderAction[] = [];
    h.sender.takeActions(actions);
    for (const a of actions) if (a.kind === 'session-start') starts.push(a);
    for (const a of actions) if (a.kind === 'batch') lastBatch = a;
  };
  assert.equal(h.sender.continuityId, 0, 'none before a session');
  h.sender.step({ kind: 'enqueue', key: bytes('a'), record: bytes('v'), nowMs: 0 });
  h.sender.step({ kind: 'connected', nowMs: 0 });
  sessionStarts();
  assert.deepEqual(
    starts.map((a) => [a.sessionId, a.continuity]),
    [[1, 1]],
    'the first session opens it, and says it',
  );
  // A reconnect and an ACK timeout replay what was sent: nothing is dropped, the run goes on.
  h.sender.step({ kind: 'tick', nowMs: 10 });
  h.sender.step({ kind: 'disconnected', nowMs: 20 });
  h.sender.step({ kind: 'connected', nowMs: 30 });
  h.sender.step({ kind: 'tick', nowMs: 30 + BASE.ackTimeoutMs });
  sessionStarts();
  assert.deepEqual(
    starts.slice(1).map((a) => a.continuity),
    [1, 1],
  );
  assert.equal(h.sender.continuityId, 1);
  // The peer says it holds none of our sessions before it acknowledged anything in the run (a
  // replica that has just opened the fragment, and ignored what came before): what was sent is
  // replayed in a new session, and the run goes on — nothing it acknowledged can be gone.
  h.sender.step({ kind: 'peer-reset', nowMs: 1_100 });
  h.sender.step({ kind: 'tick', nowMs: 1_200 });
  sessionStarts();
  assert.equal(starts.at(-1)!.continuity, 1);
  assert.equal(h.sender.continuityId, 1);
  // Acknowledged, then lost (its worker restarted): what it acknowledged from memory may be gone,
  // so a new run starts with the new session.
  assert.ok(lastBatch !== undefined && lastBatch.sessionId === starts.at(-1)!.sessionId, 'a replay sent');
  h.sender.step({
    kind: 'ack',
    sessionId: lastBatch.sessionId,
    batchSeq: lastBatch.batchSeq,
    level: AckLevel.Memory,
    nowMs: 1_300,
  });
  h.sender.step({ kind: 'peer-reset', nowMs: 2_000 });
  sessionStarts();
  const afterReset = starts.at(-1)!;
  assert.equal(afterReset.continuity, afterReset.sessionId);
  assert.notEqual(afterReset.continuity, 1);
  assert.equal(h.sender.continuityId, afterReset.continuity);
  // A buffer reset drops writes: the run ends at once, and the next session opens a new one.
  for (const k of ['b', 'c', 'd', 'e', 'f'])
    h.sender.step({ kind: 'enqueue', key: bytes(k), record: bytes('v'), nowMs: 2_000 });
  assert.equal(h.report().resets, 1);
  assert.equal(h.sender.continuityId, 0);
  h.sender.step({ kind: 'connected', nowMs: 2_100 });
  sessionStarts();
  const reopened = starts.at(-1)!;
  assert.equal(reopened.continuity, reopened.sessionId);
  assert.ok(!starts.slice(0, -1).some((a) => a.continuity === reopened.continuity), 'a fresh id');
  // A peer-reset while disconnected changes nothing: the connection's return opens a session.
  h.sender.step({ kind: 'disconnected', nowMs: 2_200 });
  h.sender.step({ kind: 'peer-reset', nowMs: 2_200 });
  sessionStarts();
  assert.equal(h.sender.continuityId, reopened.continuity);
});

test('the byte bound resets too, and a long outage keeps memory bounded', () => {
  const h = new Harness({ bufferOpsMax: 100, bufferBytesMax: 1000 });
  for (let i = 0; i < 1000; i++) h.enqueue(`key-${i}`, i, 'x'.repeat(90));
  const r = h.report();
  assert.ok(r.bufferedBytes <= 1000);
  assert.ok(r.buffered <= 10);
  assert.equal(r.resets, Math.floor(1000 / 11));
  assert.equal(r.opsDropped + r.buffered, 1000);
});

test('a session opened for a copy being gained starts without its round: the copy asks for its rounds; a reconnect starts with one', () => {
  const h = new Harness();
  assert.deepEqual(h.step({ kind: 'connected', firstRound: false }), ['session-start session=1']);
  assert.deepEqual(h.tick(1), [], 'no round until one is asked for (or the routine one is due)');
  assert.deepEqual(h.step({ kind: 'reconcile-now' }, 2), ['start-round session=1 round=2']);
  h.roundDone(3);
  assert.deepEqual(h.step({ kind: 'disconnected' }, 4), []);
  assert.deepEqual(h.step({ kind: 'connected' }, 5), [
    'session-start session=3',
    'start-round session=3 round=4',
  ]);
});

test('B13 #94: a disconnect during a round sends the buffer before the next round', () => {
  const h = new Harness();
  assert.deepEqual(h.step({ kind: 'connected' }), [
    'session-start session=1',
    'start-round session=1 round=2',
  ]);
  // A round asked for replaces the session's first, which nobody asked for; then one at a time.
  assert.deepEqual(h.step({ kind: 'reconcile-now' }), ['start-round session=1 round=3']);
  assert.deepEqual(h.step({ kind: 'reconcile-now' }), [], 'one round at a time');
  h.enqueue('buffered-during-reconcile', 1);
  assert.deepEqual(h.step({ kind: 'disconnected' }, 2), []);
  assert.equal(h.report().state, 'disconnected');
  assert.equal(h.report().buffered, 1);
  assert.deepEqual(h.step({ kind: 'connected' }, 3), [
    'session-start session=4',
    'batch session=4 seq=1 ack=memory ["buffered-during-reconcile"]',
  ]);
  assert.deepEqual(h.tick(103), [], 'no round while the backlog is unacknowledged');
  assert.deepEqual(h.ack(), ['start-round session=4 round=5']);
});

test('B13 #95: the batch in flight is replayed first after a reconnect (same ops, new session)', () => {
  const h = connectedIdle({ requiredAck: AckLevel.Store });
  h.enqueue('k17', 100);
  assert.deepEqual(h.tick(110), ['batch session=1 seq=1 ack=store ["k17"]']);
  const first = h.lastBatch!;
  assert.deepEqual(h.step({ kind: 'reconcile-now' }), [], 'the round waits for the batch in flight');
  assert.deepEqual(h.step({ kind: 'disconnected' }), []);
  assert.equal(h.report().buffered, 1);
  assert.equal(h.report().inFlight, 0);
  assert.deepEqual(h.step({ kind: 'connected' }, 120), [
    'session-start session=3',
    'batch session=3 seq=1 ack=store ["k17"]',
  ]);
  const replay = h.lastBatch!;
  assert.deepEqual(replay.ops, first.ops);
  assert.equal(replay.requiredAck, first.requiredAck);
  assert.deepEqual(h.tick(220), []);
  assert.deepEqual(h.ack(AckLevel.Store), ['start-round session=3 round=4']);
});

test('a replay carries exactly the batch it replaces, even when more ops arrived', () => {
  const h = connectedIdle();
  for (const k of ['a', 'b']) h.enqueue(k, 0);
  assert.deepEqual(h.tick(10), ['batch session=1 seq=1 ack=memory ["a" "b"]']);
  for (const k of ['c', 'd', 'e']) h.enqueue(k, 11);
  h.step({ kind: 'disconnected' }, 12);
  assert.deepEqual(h.step({ kind: 'connected' }, 13), [
    'session-start session=3',
    'batch session=3 seq=1 ack=memory ["a" "b"]',
  ]);
  assert.deepEqual(
    h.ack(),
    ['batch session=3 seq=2 ack=memory ["c" "d" "e"]'],
    'the backlog drains without waiting',
  );
  assert.deepEqual(h.ack(), ['start-round session=3 round=4']);
});

test('B13 #96: a NACKed batch is replayed after the floor, in a new session, before the round', () => {
  const h = connectedIdle();
  h.enqueue('k31', 0);
  h.tick(10);
  h.step({ kind: 'reconcile-now' }, 20);
  // The receiver ignores the rest of a session whose batch failed: the replay opens another.
  assert.deepEqual(h.nack(100), ['session-start session=3']);
  assert.match(h.logs.at(-1)!, /injected rejection/);
  let r = h.report();
  assert.equal(r.buffered, 1);
  assert.equal(r.inFlight, 0);
  assert.equal(r.state, 'backoff');
  assert.equal(h.sender.nextWakeMs(100), 1100);
  assert.deepEqual(h.tick(1099), []);
  assert.deepEqual(h.tick(1100), ['batch session=3 seq=1 ack=memory ["k31"]']);
  assert.deepEqual(h.tick(1200), []);
  assert.deepEqual(h.ack(AckLevel.Memory), ['start-round session=3 round=4']);
  r = h.report();
  assert.equal(r.batchesAcked, 1);
  assert.equal(r.state, 'reconciling');
});

test('B13 #97: a weaker ACK flags a mismatch; the ACK timeout rotates the session and replays', () => {
  const h = connectedIdle({ requiredAck: AckLevel.Store, ackTimeoutMs: 1000 });
  h.enqueue('k41', 0);
  assert.deepEqual(h.tick(10), ['batch session=1 seq=1 ack=store ["k41"]']);
  h.step({ kind: 'reconcile-now' }, 20);
  assert.deepEqual(h.ack(AckLevel.Memory, 30), []);
  let r = h.report();
  assert.equal(r.inFlight, 1);
  assert.equal(r.ackDurabilityMismatch, true);
  assert.equal(r.lastAckLevel, AckLevel.Memory);
  assert.equal(h.sender.nextWakeMs(30), 1010);
  assert.deepEqual(h.tick(1009), []);
  assert.deepEqual(h.tick(1010), ['session-start session=3', 'batch session=3 seq=1 ack=store ["k41"]']);
  assert.deepEqual(h.tick(1110), []);
  assert.deepEqual(h.ack(AckLevel.Store), ['start-round session=3 round=4']);
  r = h.report();
  assert.equal(r.ackDurabilityMismatch, false);
  assert.equal(r.lastAckLevel, AckLevel.Store);
  assert.equal(r.opsAcked, 1);
});

test('B13 #98: the NACK floor survives a reconnect', () => {
  const h = connectedIdle();
  h.enqueue('k43', 0);
  h.tick(10);
  const t0 = 100;
  assert.deepEqual(h.nack(t0), ['session-start session=3']);
  h.step({ kind: 'disconnected' }, t0 + 10);
  assert.deepEqual(h.step({ kind: 'connected' }, t0 + 20), ['session-start session=4']);
  assert.deepEqual(h.tick(t0 + 800), []);
  assert.equal(h.sender.nextWakeMs(t0 + 800), t0 + 1000);
  assert.deepEqual(h.tick(t0 + 1000), ['batch session=4 seq=1 ack=memory ["k43"]']);
  assert.deepEqual(h.ack(), ['start-round session=4 round=5']);
});

test('B13 #99: the reconcile-timeout floor survives a reconnect', () => {
  const h = new Harness({ batchIntervalMs: 3_600_000, reconcileTimeoutMs: 50 });
  const t0 = 0;
  assert.deepEqual(h.step({ kind: 'connected' }, t0), [
    'session-start session=1',
    'start-round session=1 round=2',
  ]);
  assert.equal(h.sender.nextWakeMs(t0), t0 + 50);
  assert.deepEqual(h.tick(t0 + 50), ['session-start session=3']);
  assert.match(h.logs.at(-1)!, /no progress/);
  assert.equal(h.report().state, 'backoff');
  h.step({ kind: 'disconnected' }, t0 + 60);
  assert.deepEqual(h.step({ kind: 'connected' }, t0 + 70), ['session-start session=4']);
  assert.deepEqual(h.tick(t0 + 800), []);
  assert.equal(h.sender.nextWakeMs(t0 + 800), t0 + 1050);
  assert.deepEqual(h.tick(t0 + 1050), ['start-round session=4 round=5']);
});

test('round progress defers the timeout; a failed round rotates the session and waits the floor', () => {
  const h = new Harness({ reconcileTimeoutMs: 50 });
  h.step({ kind: 'connected' }, 0);
  h.frames();
  h.step({ kind: 'round-progress', sessionId: 1, roundId: 2 }, 40);
  assert.deepEqual(h.tick(80), []);
  assert.equal(h.sender.nextWakeMs(80), 90);
  h.step({ kind: 'round-done', sessionId: 1, roundId: 99 }, 85);
  assert.equal(h.report().reconcileRounds, 0, 'a stale round id is ignored');
  assert.deepEqual(h.step({ kind: 'round-failed', sessionId: 1, roundId: 2, reason: 'peer closed' }, 86), [
    'session-start session=3',
  ]);
  h.enqueue('k', 87);
  assert.deepEqual(h.tick(1085), [], 'nothing inside the floor');
  assert.deepEqual(h.tick(1086), ['start-round session=3 round=4', 'batch session=3 seq=1 ack=memory ["k"]']);
});

test('a round the peer refused ends in the same session with no retry: the next is the routine one, or one asked for', () => {
  const h = new Harness({ reconcileIntervalMs: 1000, reconcileTimeoutMs: 50 });
  h.step({ kind: 'connected' }, 0);
  h.frames();
  const refused = { kind: 'round-refused', sessionId: 1, reason: 'n1 holds no copy of fragment 0' } as const;
  assert.deepEqual(h.step({ ...refused, roundId: 99 }, 5), [], 'a stale round id is ignored');
  assert.deepEqual(h.step({ ...refused, roundId: 2 }, 10), [], 'no new session');
  assert.match(h.logs.at(-1)!, /round 2 refused \(n1 holds no copy of fragment 0\)/);
  assert.equal(h.report().reconcileRounds, 0, 'not counted as done');
  // No round runs, so no round timeout either; batches flow in the session.
  h.enqueue('k', 20);
  assert.deepEqual(h.tick(20 + BASE.batchIntervalMs), ['batch session=1 seq=1 ack=memory ["k"]']);
  const nextAtMs = h.sender.nextWakeMs(h.nowMs);
  assert.ok(nextAtMs >= 10 + 500 && nextAtMs <= 10 + 1500, `next round at ${nextAtMs}`);
  assert.deepEqual(h.ack(), []);
  assert.deepEqual(h.step({ kind: 'reconcile-now' }, 100), ['start-round session=1 round=3']);
});

test('routine rounds run about every reconcileIntervalMs after the last one ended, spread around it', () => {
  const h = new Harness({ reconcileIntervalMs: 1000 });
  h.step({ kind: 'connected' }, 0);
  h.frames();
  h.roundDone(10);
  const nextAtMs = h.sender.nextWakeMs(10);
  assert.ok(nextAtMs >= 10 + 500 && nextAtMs <= 10 + 1500, `next round at ${nextAtMs}`);
  assert.deepEqual(h.tick(nextAtMs - 1), []);
  assert.deepEqual(h.tick(nextAtMs), ['start-round session=1 round=3']);
  // A round asked for replaces the routine one at once…
  assert.deepEqual(h.step({ kind: 'reconcile-now' }, nextAtMs + 10), ['start-round session=1 round=4']);
  assert.deepEqual(
    h.roundDone(nextAtMs + 15, 3),
    [],
    'the routine round is gone: its end counts for nothing',
  );
  // …and one asked for during an asked round waits for it to end.
  assert.deepEqual(h.step({ kind: 'reconcile-now' }, nextAtMs + 20), []);
  assert.deepEqual(
    h.roundDone(nextAtMs + 30),
    ['start-round session=1 round=5'],
    'reconcile-now during a round asked for queues another',
  );
  assert.equal(h.report().reconcileRounds, 2);
});

test('routine rounds take turns: one due without a turn waits, batches still flowing, and starts when a turn is given back', () => {
  const slots = new RoundSlots(1);
  const [a, b, c] = [0, 1, 2].map(() => new Harness({ reconcileIntervalMs: 1000 }, undefined, slots));
  for (const h of [a, b, c]) {
    h.step({ kind: 'connected' }, 0);
    h.frames();
    // The sessions' first rounds take no turn, and the driver does not pace them.
    assert.equal(h.lastRound?.routine, false);
    h.roundDone(0);
  }
  const dueMs = Math.max(...[a, b, c].map((h) => h.sender.nextWakeMs(0)));
  assert.deepEqual(a.tick(dueMs), ['start-round session=1 round=3']);
  assert.equal(a.lastRound?.routine, true, 'a round that took a turn is routine: the driver paces it');
  assert.deepEqual(b.tick(dueMs), [], 'a turn is taken');
  assert.deepEqual(c.tick(dueMs), []);
  assert.deepEqual(slots.counts, { held: 1, waiting: 2 });
  assert.equal(b.sender.nextWakeMs(dueMs), Number.POSITIVE_INFINITY, 'no wake-up while waiting');
  assert.deepEqual(b.enqueue('k', dueMs + 1), [], 'a write waits its batch interval only, not the round');
  assert.deepEqual(b.tick(dueMs + 1 + BASE.batchIntervalMs), ['batch session=1 seq=1 ack=memory ["k"]']);
  assert.deepEqual(b.ack(AckLevel.Memory, dueMs + 20), []);
  // The turn given back goes to the sender that waited longest, b, not c.
  a.roundDone(dueMs + 50);
  assert.equal(c.sender.nextWakeMs(dueMs + 50), Number.POSITIVE_INFINITY, 'c waits behind b');
  assert.equal(b.sender.nextWakeMs(dueMs + 50), dueMs + 50, 'b wakes at once');
  assert.deepEqual(c.tick(dueMs + 50), []);
  assert.deepEqual(b.tick(dueMs + 50), ['start-round session=1 round=3']);
  // A sender that closes gives back its turn; one disconnected leaves the line.
  c.step({ kind: 'disconnected' }, dueMs + 60);
  assert.deepEqual(slots.counts, { held: 1, waiting: 0 });
  b.sender.close();
  assert.deepEqual(slots.counts, { held: 0, waiting: 0 });
  // A round asked for needs no turn.
  assert.deepEqual(slots.tryTake(slots), true);
  assert.deepEqual(a.step({ kind: 'reconcile-now' }, dueMs + 70), ['start-round session=1 round=4']);
  assert.equal(a.lastRound?.routine, false, 'nor is it paced');
  // One asked for while a routine round is due and holds its turn is not paced either.
  const d = new Harness({ reconcileIntervalMs: 1000 });
  d.step({ kind: 'connected' }, 0);
  d.frames();
  d.roundDone(0);
  const dDueMs = d.sender.nextWakeMs(0);
  d.tick(dDueMs);
  assert.equal(d.lastRound?.routine, true);
  d.step({ kind: 'reconcile-now' }, dDueMs + 1);
  assert.equal(d.lastRound?.routine, false);
});

test('the rounds a connect started together spread over the interval after it', () => {
  // 64 senders (a node's fragments and peers) connect at once, each with its own random ids.
  const delays: number[] = [];
  const random = seededFractions(7);
  for (let i = 0; i < 64; i++) {
    const h = new Harness(
      { reconcileIntervalMs: 60_000 },
      { next: () => 1 + Math.floor(random() * (2 ** 31 - 2)) },
    );
    h.step({ kind: 'connected' }, 0);
    h.roundDone(0);
    delays.push(h.sender.nextWakeMs(0));
  }
  delays.sort((x, y) => x - y);
  assert.ok(delays[0]! >= 30_000 && delays[63]! <= 90_000, `${delays[0]}..${delays[63]}`);
  // Spread, not bunched: each sixth of the span holds some of them.
  for (let sixth = 0; sixth < 6; sixth++) {
    const from = 30_000 + sixth * 10_000;
    assert.ok(
      delays.some((d) => d >= from && d < from + 10_000),
      `none in ${from}..${from + 10_000}: ${delays}`,
    );
  }
});

test('batches are cut by count', () => {
  const h = connectedIdle({ batchOpsMax: 4 });
  for (const k of ['a', 'b', 'c']) assert.deepEqual(h.enqueue(k, 0), []);
  assert.deepEqual(h.enqueue('d', 0), ['batch session=1 seq=1 ack=memory ["a" "b" "c" "d"]']);
  for (const k of ['e', 'f', 'g', 'h', 'i']) assert.deepEqual(h.enqueue(k, 1), [], 'one batch in flight');
  assert.deepEqual(h.ack(AckLevel.Memory, 2), ['batch session=1 seq=2 ack=memory ["e" "f" "g" "h"]']);
  assert.deepEqual(h.ack(AckLevel.Memory, 3), []);
  assert.deepEqual(h.tick(11), ['batch session=1 seq=3 ack=memory ["i"]']);
});

test('batches are cut by bytes; one op larger than the target goes alone', () => {
  const h = connectedIdle({ batchBytesMax: 100 });
  const v = 'x'.repeat(39); // 40 bytes with its 1-byte key
  assert.deepEqual(h.enqueue('a', 0, v), []);
  assert.deepEqual(h.enqueue('b', 0, v), []);
  assert.deepEqual(h.enqueue('c', 0, v), ['batch session=1 seq=1 ack=memory ["a" "b"]']);
  assert.equal(h.report().buffered, 1);
  assert.equal(h.report().bufferedBytes, 40);
  h.enqueue('d', 1, 'y'.repeat(249));
  assert.deepEqual(h.ack(), ['batch session=1 seq=2 ack=memory ["c"]']);
  assert.deepEqual(h.ack(), ['batch session=1 seq=3 ack=memory ["d"]']);
  assert.equal(h.lastBatch!.ops[0]![1].byteLength, 249);
});

test('a non-full batch waits batchIntervalMs from its oldest op', () => {
  const h = connectedIdle({ batchIntervalMs: 10 });
  h.enqueue('a', 100);
  h.enqueue('b', 105);
  assert.equal(h.sender.nextWakeMs(105), 110);
  assert.deepEqual(h.tick(109), []);
  assert.deepEqual(h.tick(110), ['batch session=1 seq=1 ack=memory ["a" "b"]']);
  h.enqueue('c', 111);
  assert.equal(h.sender.nextWakeMs(111), 1110, 'while in flight only the ACK timeout wakes');
  assert.deepEqual(
    h.ack(AckLevel.Memory, 130),
    ['batch session=1 seq=2 ack=memory ["c"]'],
    'c is overdue already',
  );
});

test('order is preserved across many batches, reconnects and NACKs', () => {
  const h = connectedIdle({ batchOpsMax: 7, batchIntervalMs: 5, retryFloorMs: 20, bufferOpsMax: 10_000 });
  const sent: string[] = [];
  const acked: string[] = [];
  let t = 0;
  for (let i = 0; i < 500; i++) {
    h.enqueue(`k${i}`, t);
    sent.push(`k${i}`);
    t += 1;
    h.tick(t);
    if (i % 50 === 25) {
      h.step({ kind: 'disconnected' }, t);
      h.step({ kind: 'connected' }, t);
    }
    if (h.report().inFlight > 0) {
      const keys = h.lastBatch!.ops.map(([k]) => Buffer.from(k).toString('latin1'));
      if (i % 37 === 0) h.nack(t);
      else {
        h.ack(AckLevel.Memory, t);
        acked.push(...keys);
      }
    }
  }
  for (let guard = 0; guard < 1000 && !h.sender.drained(); guard++) {
    t = Math.max(t + 1, h.sender.nextWakeMs(t));
    h.tick(t);
    if (h.report().inFlight > 0) {
      acked.push(...h.lastBatch!.ops.map(([k]) => Buffer.from(k).toString('latin1')));
      h.ack(AckLevel.Memory, t);
    }
  }
  assert.ok(h.sender.drained());
  assert.deepEqual(acked, sent);
  assert.equal(h.report().opsAcked, 500);
});

test('nextWakeMs: Infinity when disconnected or idle, otherwise the earliest deadline', () => {
  const h = new Harness({ reconcileIntervalMs: 10_000, reconcileTimeoutMs: 500, ackTimeoutMs: 300 });
  h.enqueue('a', 0);
  assert.equal(h.sender.nextWakeMs(0), Number.POSITIVE_INFINITY, 'disconnected: nothing to time');
  h.step({ kind: 'connected' }, 5);
  h.frames();
  assert.equal(h.sender.nextWakeMs(5), 305, 'backlog batch in flight: its ACK timeout');
  h.ack(AckLevel.Memory, 6);
  assert.equal(h.sender.nextWakeMs(6), 506, 'round running: its progress timeout');
  h.roundDone(7);
  const routineAtMs = h.sender.nextWakeMs(7);
  assert.ok(routineAtMs >= 5_007 && routineAtMs <= 15_007, 'idle: the routine round');
  h.enqueue('b', 8);
  assert.equal(h.sender.nextWakeMs(8), 18, 'a buffered op: the batch interval');
  assert.equal(h.sender.nextWakeMs(50), 50, 'never in the past');
});

test('report: lag, buffered, in flight and drained', () => {
  const h = connectedIdle({ batchOpsMax: 2 });
  let r = h.report();
  assert.deepEqual([r.lagMs, r.buffered, r.inFlight, r.bufferedBytes], [0, 0, 0, 0]);
  assert.ok(h.sender.drained());
  h.enqueue('a', 100, 'vv');
  h.enqueue('b', 120, 'vv');
  h.enqueue('c', 130, 'vv');
  h.nowMs = 150;
  r = h.report();
  assert.deepEqual([r.lagMs, r.buffered, r.inFlight, r.bufferedBytes], [50, 1, 2, 3]);
  assert.equal(r.fragment, 0);
  assert.equal(r.peer, 'node-b');
  assert.equal(r.sessionId, 1);
  assert.ok(!h.sender.drained());
  h.ack(AckLevel.Memory, 160);
  h.tick(200);
  r = h.report();
  assert.deepEqual([r.lagMs, r.buffered, r.inFlight, r.batchesAcked, r.opsAcked], [70, 0, 1, 1, 2]);
  h.ack(AckLevel.Memory, 210);
  assert.ok(h.sender.drained());
  assert.equal(h.report().lagMs, 0);
});

test('the config is checked at construction', () => {
  const ids = { next: () => 1 };
  assert.throws(() => new ReplicationSender({ ...BASE, batchOpsMax: 0 }, ids));
  assert.throws(() => new ReplicationSender({ ...BASE, bufferOpsMax: 2, batchOpsMax: 4 }, ids));
  assert.throws(() => new ReplicationSender({ ...BASE, requiredAck: 7 as AckLevel }, ids));
});

// --- Property: random interleavings ------------------------------------------------------------

type Step =
  | { kind: 'enqueue' }
  | { kind: 'connected' }
  | { kind: 'disconnected' }
  | { kind: 'ack'; level: AckLevel; stale: boolean }
  | { kind: 'nack' }
  | { kind: 'tick'; advanceMs: number }
  | { kind: 'reconcile-now' }
  | { kind: 'round-done' };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 6, arbitrary: fc.constant<Step>({ kind: 'enqueue' }) },
  { weight: 1, arbitrary: fc.constant<Step>({ kind: 'connected' }) },
  { weight: 1, arbitrary: fc.constant<Step>({ kind: 'disconnected' }) },
  {
    weight: 4,
    arbitrary: fc
      .record({
        level: fc.constantFrom(AckLevel.Memory, AckLevel.Store, AckLevel.Stable),
        stale: fc.constantFrom(false, false, false, true),
      })
      .map((a): Step => ({ kind: 'ack', ...a })),
  },
  { weight: 1, arbitrary: fc.constant<Step>({ kind: 'nack' }) },
  {
    weight: 3,
    arbitrary: fc.integer({ min: 0, max: 1500 }).map((advanceMs): Step => ({ kind: 'tick', advanceMs })),
  },
  { weight: 1, arbitrary: fc.constant<Step>({ kind: 'reconcile-now' }) },
  { weight: 1, arbitrary: fc.constant<Step>({ kind: 'round-done' }) },
);

function runScenario(bufferOpsMax: number, steps: Step[]): void {
  const sender = new ReplicationSender(
    { ...BASE, requiredAck: AckLevel.Store, batchOpsMax: 3, bufferOpsMax, ackTimeoutMs: 2000 },
    {
      next: (() => {
        let id = 0;
        return () => ++id;
      })(),
    },
  );
  let now = 0;
  let enqueued = 0;
  let connected = false;
  let session = 0;
  let expectedSeq = 0;
  let batch: Extract<SenderAction, { kind: 'batch' }> | undefined;
  let round: Extract<SenderAction, { kind: 'start-round' }> | undefined;
  let lastRetired = -1;
  const retired: number[] = [];
  const apply = (event: SenderEvent) => {
    const before = sender.report(now);
    const acking = batch; // the batch in flight, if any: an ACK may send the next one in the same step
    sender.step(event);
    const after = sender.report(now);
    const actions: SenderAction[] = [];
    sender.takeActions(actions);
    if (!connected) assert.equal(actions.length, 0, 'nothing is emitted while disconnected');
    for (const a of actions) {
      if (a.kind === 'session-start') {
        assert.notEqual(a.sessionId, session);
        session = a.sessionId;
        expectedSeq = 1;
      } else if (a.kind === 'batch') {
        assert.equal(a.sessionId, session);
        assert.equal(a.batchSeq, expectedSeq++);
        assert.ok(a.ops.length >= 1 && a.ops.length <= 3);
        batch = a;
      } else if (a.kind === 'start-round') {
        assert.equal(a.sessionId, session);
        round = a;
      }
    }
    const newlyAcked = after.opsAcked - before.opsAcked;
    if (newlyAcked > 0) {
      assert.equal(event.kind, 'ack');
      assert.equal(newlyAcked, acking!.ops.length);
      for (const [key] of acking!.ops) {
        const index = Number(Buffer.from(key).toString('latin1'));
        assert.ok(index > lastRetired, 'retired in enqueue order, never twice');
        lastRetired = index;
        retired.push(index);
      }
    }
    assert.ok(after.buffered + after.inFlight <= bufferOpsMax, 'the backlog is bounded');
  };
  for (const s of steps) {
    switch (s.kind) {
      case 'enqueue':
        apply({ kind: 'enqueue', key: bytes(String(enqueued++)), record: bytes('v'), nowMs: now });
        break;
      case 'connected':
        connected = true;
        apply({ kind: 'connected', nowMs: now });
        break;
      case 'disconnected':
        connected = false;
        apply({ kind: 'disconnected', nowMs: now });
        break;
      case 'ack':
        if (batch === undefined) break;
        apply({
          kind: 'ack',
          sessionId: s.stale ? batch.sessionId + 1000 : batch.sessionId,
          batchSeq: batch.batchSeq,
          level: s.level,
          nowMs: now,
        });
        break;
      case 'nack':
        if (batch !== undefined)
          apply({
            kind: 'nack',
            sessionId: batch.sessionId,
            batchSeq: batch.batchSeq,
            error: 'no',
            nowMs: now,
          });
        break;
      case 'tick':
        now += s.advanceMs;
        apply({ kind: 'tick', nowMs: now });
        break;
      case 'reconcile-now':
        apply({ kind: 'reconcile-now', nowMs: now });
        break;
      case 'round-done':
        if (round !== undefined)
          apply({ kind: 'round-done', sessionId: round.sessionId, roundId: round.roundId, nowMs: now });
        break;
    }
  }
  const r = sender.report(now);
  assert.equal(
    r.opsAcked + r.opsDropped + r.buffered + r.inFlight,
    enqueued,
    'every op is accounted for once',
  );
  if (r.resets === 0) {
    // Nothing dropped: what was retired is exactly the first ops enqueued, and the rest is still held.
    assert.deepEqual(
      retired,
      Array.from({ length: retired.length }, (_, i) => i),
    );
    assert.equal(r.buffered + r.inFlight, enqueued - retired.length);
    assert.equal(sender.drained(), enqueued === retired.length);
  }
}

test('fast-check: ops retire in enqueue order, never twice; without a reset, as an exact prefix', () => {
  fc.assert(
    fc.property(
      fc.constantFrom(6, 20, 1000),
      fc.array(stepArb, { minLength: 20, maxLength: 300 }),
      runScenario,
    ),
    {
      numRuns: 400,
    },
  );
});
