// The worker's waits for replica acknowledgements (src/core/replica-acks.ts): a fence with the
// replica-wait flag first passes through its fragment's actor like any fence — so every write
// admitted before it has been handed to the replication senders when it is answered — then waits
// here until `replicas` peers acknowledged the fragment's position at that moment, or its time is
// up; its answer's detail byte is the number of peers reached. The senders' progress is reported to
// the tracker only for fragments something waits on, so writes that ask for nothing pay nothing.
// A wait flushes its fragment's senders: what they hold goes at once, not after the batch interval,
// and asks for the wait's level (WAITAOF's `stable` under the default `--replication-ack store`).
// A write that waits for its replicas (--replica-acks) is followed into its actor by such a fence,
// and answered once both are in: one request per write on the ring and between nodes, not two.

import type { DriverClock } from '../core/clock.js';
import { FragmentOp, type ReplySink } from '../core/fragment.js';
import { Durability, isWriteRefusal, OpKind, Reply } from '../core/ops.js';
import { type AckTrackerAction, ReplicaAckTracker } from '../core/replica-acks.js';
import { AckLevel, type ReplicationSender } from '../core/replication-sender.js';
import type { ReplicaWaitParams } from '../threads/op-codec.js';

const NO_BYTES = new Uint8Array(0);

/** What the waits need from the worker: its senders and its result ring. */
export interface ReplicaWaitHost {
  /**
   * The fragment's position (writes handed to its senders) and each peer's sender; -1 and none when
   * the fragment has no other replica here.
   */
  positionOf(fragment: number): number;
  forEachSender(fragment: number, visit: (member: number, sender: ReplicationSender) => void): void;
  /** Has the fragment's senders send its writes through `throughOps` now, asking for `level`. */
  flush(fragment: number, throughOps: number, level: AckLevel): void;
  /** Sends a header-only answer to request `reqId` and publishes it. */
  answer(reply: Reply, detail: number, reqId: number): void;
  /** Sends a text answer (a failed fence's message) and publishes it. */
  answerText(reply: Reply, reqId: number, text: string): void;
  /** Sends a write's own reply, with the number of replicas it reached, and publishes it. */
  answerWrite(write: FragmentOp, reached: number): void;
  readonly clock: DriverClock;
}

interface Asked extends ReplicaWaitParams {
  fragment: number;
}

export class ReplicaWaits implements ReplySink {
  private readonly tracker = new ReplicaAckTracker();
  private readonly actions: AckTrackerAction[] = [];
  /** What each fence still in its actor asks, by request id. */
  private readonly asked = new Map<number, Asked>();
  /** Writes waiting for their replicas, by request id (their fence's). */
  private readonly writes = new Map<number, WriteWait>();
  /** The one progress event `report` fills for each sender: the tracker copies what it reads. */
  private readonly acked = [0, 0, 0, 0];
  private readonly progress = {
    kind: 'progress' as const,
    fragment: 0,
    peer: 0,
    ackedThroughOps: this.acked,
    lostThroughOps: 0,
  };
  private readonly reportSender = (peer: number, sender: ReplicationSender): void => {
    for (let level = AckLevel.Memory; level <= AckLevel.Stable; level++)
      this.acked[level] = sender.ackedThrough(level);
    this.progress.peer = peer;
    this.progress.lostThroughOps = sender.lostThrough;
    this.tracker.step(this.progress);
  };
  private timerAtMs = Number.POSITIVE_INFINITY;
  private readonly onTimer = (): void => {
    this.timerAtMs = Number.POSITIVE_INFINITY;
    this.tracker.step({ kind: 'tick', nowMs: this.host.clock.nowMs() });
    this.flush();
  };

  constructor(private readonly host: ReplicaWaitHost) {}

  /** Routes the reply of `fence` (a fragment op about to be submitted) here. */
  admit(fence: FragmentOp, fragment: number, params: ReplicaWaitParams): void {
    fence.sink = this;
    this.asked.set(fence.reqId, { fragment, ...params });
  }

  /**
   * Routes the reply of `write` (a write or modification about to be submitted) here, and returns
   * the fence to submit right behind it: the write is answered once both replied.
   */
  admitWrite(write: FragmentOp, fragment: number, params: ReplicaWaitParams): FragmentOp {
    const fence = new FragmentOp(
      OpKind.Fence,
      write.reqId,
      write.priority,
      Durability.Memory,
      NO_BYTES,
      NO_BYTES,
    );
    fence.durabilityOnly = true;
    const wait = new WriteWait(this.host, write);
    write.sink = wait;
    this.writes.set(write.reqId, wait);
    this.admit(fence, fragment, params);
    return fence;
  }

  /** The fence went through its actor: wait for the fragment's position, now. */
  onReply(op: FragmentOp, reply: Reply, text: string): void {
    const asked = this.asked.get(op.reqId);
    if (asked === undefined) return;
    this.asked.delete(op.reqId);
    if (reply !== Reply.FenceReached) return this.settle(op.reqId, reply, 0, text || 'fence failed');
    const position = this.host.positionOf(asked.fragment);
    if (position === -1) return this.settle(op.reqId, Reply.FenceReached, 0, '');
    this.report(asked.fragment);
    const nowMs = this.host.clock.nowMs();
    this.tracker.step({
      kind: 'wait',
      id: op.reqId,
      fragment: asked.fragment,
      throughOps: position,
      level: asked.level,
      replicas: asked.replicas,
      deadlineMs: nowMs + asked.timeoutMs,
      nowMs,
    });
    if (this.tracker.watching(asked.fragment)) this.host.flush(asked.fragment, position, asked.level);
    this.flush();
  }

  /** A peer acknowledged a batch of `fragment`. */
  onAcked(fragment: number): void {
    if (!this.tracker.watching(fragment)) return;
    this.report(fragment);
    this.flush();
  }

  /** The worker is closing: every wait answers with what it reached. */
  close(): void {
    this.host.clock.clearTimer();
    this.tracker.step({ kind: 'close' });
    this.flush();
  }

  private report(fragment: number): void {
    this.progress.fragment = fragment;
    this.host.forEachSender(fragment, this.reportSender);
  }

  /** Answers wait `id`: its fence, or the write it follows (which counts a failed wait as none reached). */
  private settle(id: number, reply: Reply, reached: number, text: string): void {
    const write = this.writes.get(id);
    if (write !== undefined) {
      this.writes.delete(id);
      write.replicated(reply === Reply.FenceReached ? reached : 0);
    } else if (text !== '') this.host.answerText(reply, id, text);
    else this.host.answer(reply, reached, id);
  }

  private flush(): void {
    this.tracker.takeActions(this.actions);
    for (const a of this.actions) {
      if (a.full) this.settle(a.id, Reply.Backpressure, 0, 'too many waits for replica acknowledgements');
      else this.settle(a.id, Reply.FenceReached, a.reached, '');
    }
    this.actions.length = 0;
    const at = this.tracker.nextWakeMs();
    if (at === Number.POSITIVE_INFINITY || at >= this.timerAtMs) return;
    this.timerAtMs = at;
    this.host.clock.setTimer(at, this.onTimer);
  }
}

/** A write and its fence: the write's reply goes out once both are in, or at once if it wrote nothing. */
class WriteWait implements ReplySink {
  private reached = -1;
  private replied = false;
  private answered = false;

  constructor(
    private readonly host: ReplicaWaitHost,
    private readonly write: FragmentOp,
  ) {}

  /** The write's own reply (its durability reached, or a refusal). */
  onReply(_op: FragmentOp, reply: Reply): void {
    this.replied = true;
    if (isWriteRefusal(reply)) this.answer(0);
    else if (this.reached !== -1) this.answer(this.reached);
  }

  /** Its fence's answer: the replicas reached. */
  replicated(reached: number): void {
    this.reached = reached;
    if (this.replied) this.answer(reached);
  }

  private answer(reached: number): void {
    if (this.answered) return;
    this.answered = true;
    this.host.answerWrite(this.write, reached);
  }
}
