// The replication sender for one (fragment, peer) as a pure state machine (spec B13, A §5.3, §6).
// The worker that owns the fragment feeds it writes, connection changes, ACKs/NACKs, reconcile
// round outcomes and ticks; it carries out the actions: SessionStart and ReplicateBatch frames, and
// anti-entropy rounds. No sockets, timers or clock: time arrives as `nowMs` on every event, and
// session and round ids come from the injected `ids` source.
//
// Rules (the seed's, simplified to one batch in flight so order needs no reordering buffer):
// - Ops queue in enqueue order. The in-flight batch is the front of the same queue, so a batch that
//   must be replayed (disconnect, NACK, ACK timeout) is "put back" by forgetting that it was sent.
// - A replay carries exactly the ops it carried before, in the current session with a new seq.
// - Every session starts with SessionStart, then drains the backlog it inherited (the replay first),
//   then runs an anti-entropy round. A round also starts on `reconcile-now` and every
//   `reconcileIntervalMs`; it waits for the batch in flight, and batches keep flowing while it runs.
// - A NACK, a failed round and a round without progress for `reconcileTimeoutMs` start a retry
//   floor: no batch and no round before it ends, across reconnects too. An ACK timeout rotates the
//   session and replays at once (seed test 97): the timeout is long, so the retry is rare already.
// - The backlog (buffered + in flight) is bounded in ops and bytes; an op that would pass a bound
//   drops everything ("buffer reset") and anti-entropy repairs what was lost.

import { assert } from './assert.js';
import {
  ANTI_ENTROPY_INTERVAL_MS_DEFAULT,
  ANTI_ENTROPY_ROUND_TIMEOUT_MS,
  ERROR_MESSAGE_BYTES_MAX,
  FRAME_BYTES_MAX,
  REPLICATION_ACK_TIMEOUT_MS,
  REPLICATION_BATCH_BYTES_MAX,
  REPLICATION_BATCH_INTERVAL_MS,
  REPLICATION_BATCH_OPS_CEILING,
  REPLICATION_BATCH_OPS_MAX,
  REPLICATION_BUFFER_BYTES_MAX,
  REPLICATION_BUFFER_OPS_MAX,
  REPLICATION_RETRY_FLOOR_MS,
} from './limits.js';

/** ACK levels, numbered as on the wire (ReplicationAckLevel). */
export const AckLevel = { Memory: 1, Store: 2, Stable: 3 } as const;
export type AckLevel = (typeof AckLevel)[keyof typeof AckLevel];

const ACK_LEVEL_NAMES: Record<AckLevel, string> = { 1: 'memory', 2: 'store', 3: 'stable' };

/**
 * A batch holds either one op (which fits a frame on its own: records are capped below
 * FRAME_BYTES_MAX) or at most batchBytesMax bytes; half a frame leaves room for per-op framing.
 */
export const REPLICATION_BATCH_BYTES_CEILING = FRAME_BYTES_MAX / 2;

assert(REPLICATION_BATCH_OPS_MAX <= REPLICATION_BATCH_OPS_CEILING, 'batch ops over ceiling');
assert(REPLICATION_BATCH_BYTES_MAX <= REPLICATION_BATCH_BYTES_CEILING, 'batch bytes over ceiling');
assert(REPLICATION_BUFFER_OPS_MAX >= REPLICATION_BATCH_OPS_MAX, 'buffer must hold a batch');
assert(REPLICATION_BUFFER_BYTES_MAX >= FRAME_BYTES_MAX, 'buffer must hold the largest op');

export interface SenderConfig {
  fragment: number;
  /** Peer node id (for reports and logs). */
  peer: string;
  /** Level each batch asks for. */
  requiredAck: AckLevel;
  /** Ops per ReplicateBatch. */
  batchOpsMax: number;
  /** Key+record bytes per batch (soft: one op may exceed it alone). */
  batchBytesMax: number;
  /** A non-full batch waits at most this long after its first op arrived. */
  batchIntervalMs: number;
  /** Backlog bound (ops buffered + in flight) and bytes; past either the buffer is dropped. */
  bufferOpsMax: number;
  bufferBytesMax: number;
  /** In-flight batch without a satisfying ACK for this long → rotate the session and replay. */
  ackTimeoutMs: number;
  /** After a NACK, a failed or timed-out round, nothing is sent for this long; survives reconnects. */
  retryFloorMs: number;
  /** A routine anti-entropy round this long after the last one ended, while connected. */
  reconcileIntervalMs: number;
  /** A round without progress for this long → rotate the session and retry after the floor. */
  reconcileTimeoutMs: number;
}

/** Defaults for every field but the identity ones. */
export const SENDER_CONFIG_DEFAULTS: Omit<SenderConfig, 'fragment' | 'peer'> = {
  requiredAck: AckLevel.Store,
  batchOpsMax: REPLICATION_BATCH_OPS_MAX,
  batchBytesMax: REPLICATION_BATCH_BYTES_MAX,
  batchIntervalMs: REPLICATION_BATCH_INTERVAL_MS,
  bufferOpsMax: REPLICATION_BUFFER_OPS_MAX,
  bufferBytesMax: REPLICATION_BUFFER_BYTES_MAX,
  ackTimeoutMs: REPLICATION_ACK_TIMEOUT_MS,
  retryFloorMs: REPLICATION_RETRY_FLOOR_MS,
  reconcileIntervalMs: ANTI_ENTROPY_INTERVAL_MS_DEFAULT,
  reconcileTimeoutMs: ANTI_ENTROPY_ROUND_TIMEOUT_MS,
};

export type SenderEvent =
  /** A local write to replicate. The sender keeps `key` and `record`: the caller must not reuse them. */
  | { kind: 'enqueue'; key: Uint8Array; record: Uint8Array; nowMs: number }
  /** Peer connection established or re-established (an implicit disconnect if already connected). */
  | { kind: 'connected'; nowMs: number }
  | { kind: 'disconnected'; nowMs: number }
  | { kind: 'tick'; nowMs: number }
  | { kind: 'ack'; sessionId: number; batchSeq: number; level: AckLevel; nowMs: number }
  | { kind: 'nack'; sessionId: number; batchSeq: number; error: string; nowMs: number }
  | { kind: 'reconcile-now'; nowMs: number }
  /** The driver saw a valid reply page of the round. */
  | { kind: 'round-progress'; sessionId: number; roundId: number; nowMs: number }
  | { kind: 'round-done'; sessionId: number; roundId: number; nowMs: number }
  | { kind: 'round-failed'; sessionId: number; roundId: number; reason: string; nowMs: number };

export type SenderAction =
  | { kind: 'session-start'; sessionId: number }
  | {
      kind: 'batch';
      sessionId: number;
      batchSeq: number;
      requiredAck: AckLevel;
      ops: ReadonlyArray<readonly [key: Uint8Array, record: Uint8Array]>;
    }
  /** Run one anti-entropy round (a pull of the peer's newer keys) correlated by these ids. */
  | { kind: 'start-round'; sessionId: number; roundId: number }
  /** Rare, for the driver's logger. */
  | { kind: 'log'; level: 'info' | 'warn'; message: string };

export interface SenderReport {
  fragment: number;
  peer: string;
  /** Precedence: buffer_reset (until a round started after the reset completes), disconnected, backoff, reconciling, connected. */
  state: 'disconnected' | 'connected' | 'buffer_reset' | 'reconciling' | 'backoff';
  connected: boolean;
  /** Current (or, while disconnected, last) session; 0 before the first connection. */
  sessionId: number;
  /** Ops and bytes waiting to be sent (the in-flight batch excluded). */
  buffered: number;
  bufferedBytes: number;
  /** Ops in the batch in flight (0 or that batch's length). */
  inFlight: number;
  lastAckLevel: AckLevel | 0;
  ackDurabilityMismatch: boolean;
  reconcileRounds: number;
  resets: number;
  /** Ops thrown away by resets, in total. */
  opsDropped: number;
  batchesAcked: number;
  opsAcked: number;
  /** ms since the oldest op not yet ACKed was enqueued (0 when none): replication lag. */
  lagMs: number;
}

/**
 * The backlog in enqueue order: parallel arrays used as a circular buffer that doubles when full
 * (bounded, since the sender never holds more than bufferOpsMax ops). With a batch in flight:
 *
 *   head                                              head + length
 *    │ in flight (inFlightOps) │ buffered, not yet sent │
 */
class OpQueue {
  private keys: (Uint8Array | undefined)[] = new Array(16);
  private records: (Uint8Array | undefined)[] = new Array(16);
  private arrivals: number[] = new Array<number>(16).fill(0);
  private head = 0;
  length = 0;
  bytes = 0;

  push(key: Uint8Array, record: Uint8Array, nowMs: number): void {
    if (this.length === this.keys.length) this.grow();
    const slot = (this.head + this.length) & (this.keys.length - 1);
    this.keys[slot] = key;
    this.records[slot] = record;
    this.arrivals[slot] = nowMs;
    this.length++;
    this.bytes += key.byteLength + record.byteLength;
  }

  keyAt(index: number): Uint8Array {
    return this.keys[this.slot(index)]!;
  }

  recordAt(index: number): Uint8Array {
    return this.records[this.slot(index)]!;
  }

  bytesAt(index: number): number {
    const slot = this.slot(index);
    return this.keys[slot]!.byteLength + this.records[slot]!.byteLength;
  }

  arrivalMsAt(index: number): number {
    return this.arrivals[this.slot(index)]!;
  }

  dropFront(count: number): void {
    assert(count <= this.length, 'dropping more ops than queued');
    for (let i = 0; i < count; i++) {
      const slot = this.head;
      this.bytes -= this.keys[slot]!.byteLength + this.records[slot]!.byteLength;
      this.keys[slot] = undefined;
      this.records[slot] = undefined;
      this.head = (this.head + 1) & (this.keys.length - 1);
    }
    this.length -= count;
  }

  clear(): void {
    this.dropFront(this.length);
    this.head = 0;
  }

  private slot(index: number): number {
    assert(index >= 0 && index < this.length, 'op index out of range');
    return (this.head + index) & (this.keys.length - 1);
  }

  private grow(): void {
    const capacity = this.keys.length * 2;
    const keys = new Array<Uint8Array | undefined>(capacity);
    const records = new Array<Uint8Array | undefined>(capacity);
    const arrivals = new Array<number>(capacity).fill(0);
    for (let i = 0; i < this.length; i++) {
      const slot = (this.head + i) & (this.keys.length - 1);
      keys[i] = this.keys[slot];
      records[i] = this.records[slot];
      arrivals[i] = this.arrivals[slot]!;
    }
    this.keys = keys;
    this.records = records;
    this.arrivals = arrivals;
    this.head = 0;
  }
}

function isAckLevel(level: number): level is AckLevel {
  return level === AckLevel.Memory || level === AckLevel.Store || level === AckLevel.Stable;
}

function checkConfig(c: SenderConfig): void {
  const positive = (n: number) => Number.isFinite(n) && n > 0;
  assert(isAckLevel(c.requiredAck), 'requiredAck must be an AckLevel');
  assert(Number.isInteger(c.batchOpsMax) && c.batchOpsMax >= 1, 'batchOpsMax must be ≥ 1');
  assert(c.batchOpsMax <= REPLICATION_BATCH_OPS_CEILING, 'batchOpsMax over REPLICATION_BATCH_OPS_CEILING');
  assert(positive(c.batchBytesMax), 'batchBytesMax must be > 0');
  assert(c.batchBytesMax <= REPLICATION_BATCH_BYTES_CEILING, 'batchBytesMax over its ceiling');
  assert(Number.isFinite(c.batchIntervalMs) && c.batchIntervalMs >= 0, 'batchIntervalMs must be ≥ 0');
  assert(Number.isInteger(c.bufferOpsMax) && c.bufferOpsMax >= c.batchOpsMax, 'buffer must hold a batch');
  assert(c.bufferBytesMax >= c.batchBytesMax, 'buffer bytes must hold a batch');
  assert(positive(c.ackTimeoutMs) && positive(c.retryFloorMs), 'timeouts and floors must be > 0');
  assert(positive(c.reconcileIntervalMs) && positive(c.reconcileTimeoutMs), 'reconcile timing must be > 0');
}

export class ReplicationSender {
  private readonly outbox: SenderAction[] = [];
  private nowMs = 0;
  private connected = false;
  private sessionId = 0;
  /** Seq of the last batch cut in this session; the next is +1 (so the first is 1). */
  private lastBatchSeq = 0;

  private readonly ops = new OpQueue();
  /** The front `inFlightOps` ops form the batch `inFlightSeq`, sent at `inFlightSentMs`. */
  private inFlightOps = 0;
  private inFlightBytes = 0;
  private inFlightSeq = 0;
  private inFlightSentMs = 0;
  /** The front `replayOps` ops were sent and not ACKed: the next batch is exactly them. 0 while in flight. */
  private replayOps = 0;
  /** The front `barrierOps` ops predate the session: they must be ACKed before its round starts. */
  private barrierOps = 0;
  /** No batch and no round before this (retry floor). */
  private floorUntilMs = 0;

  private roundWanted = false;
  /** The running round, or 0. */
  private roundId = 0;
  private roundProgressMs = 0;
  private nextRoutineRoundMs = Number.POSITIVE_INFINITY;
  /** Set by a reset; cleared when `resetRoundId`, a round started after the reset, completes. */
  private resetPending = false;
  private resetRoundId = 0;
  private droppedOpsUnlogged = 0;

  private lastAckLevel: AckLevel | 0 = 0;
  private ackDurabilityMismatch = false;
  private reconcileRounds = 0;
  private resets = 0;
  private opsDropped = 0;
  private batchesAcked = 0;
  private opsAcked = 0;
  /**
   * Positions (replica-acks.ts): the nth op ever enqueued is at position n. `ackedThroughOps[level]`:
   * every op up to it was acknowledged at `level` or above, or dropped by a reset; those dropped are
   * the ones up to `lostThroughOps`, never acknowledged. An ACK of batch k covers the ops before it
   * too: they were ACKed before it, and the receiver's fence covers everything it applied before.
   */
  private enqueuedOps = 0;
  private readonly ackedThroughOps = [0, 0, 0, 0];
  private lostThroughOps = 0;

  constructor(
    private readonly config: SenderConfig,
    /** Fresh non-zero ids for sessions and rounds. */
    private readonly ids: { next(): number },
  ) {
    checkConfig(config);
  }

  step(event: SenderEvent): void {
    this.nowMs = Math.max(this.nowMs, event.nowMs);
    switch (event.kind) {
      case 'enqueue':
        this.onEnqueue(event.key, event.record);
        break;
      case 'connected':
        if (this.connected) this.onDisconnected();
        this.connected = true;
        this.rotateSession();
        break;
      case 'disconnected':
        this.onDisconnected();
        break;
      case 'tick':
        break;
      case 'ack':
        this.onAck(event.sessionId, event.batchSeq, event.level);
        break;
      case 'nack':
        this.onNack(event.sessionId, event.batchSeq, event.error);
        break;
      case 'reconcile-now':
        this.roundWanted = true;
        break;
      case 'round-progress':
        if (this.isCurrentRound(event.sessionId, event.roundId)) this.roundProgressMs = this.nowMs;
        break;
      case 'round-done':
        if (this.isCurrentRound(event.sessionId, event.roundId)) this.onRoundDone();
        break;
      case 'round-failed':
        if (this.isCurrentRound(event.sessionId, event.roundId)) this.failRound(event.reason);
        break;
    }
    this.checkTimers();
    this.pump();
  }

  /** Moves the actions produced so far into `into`, leaving the outbox empty. */
  takeActions(into: SenderAction[]): void {
    for (const action of this.outbox) into.push(action);
    this.outbox.length = 0;
  }

  /** Earliest time (absolute ms, ≥ nowMs) a 'tick' is needed, or Infinity. */
  nextWakeMs(nowMs: number): number {
    if (!this.connected) return Number.POSITIVE_INFINITY;
    const now = Math.max(this.nowMs, nowMs);
    let wake = Number.POSITIVE_INFINITY;
    if (this.inFlightOps > 0) wake = this.inFlightSentMs + this.config.ackTimeoutMs;
    if (this.roundId !== 0) wake = Math.min(wake, this.roundProgressMs + this.config.reconcileTimeoutMs);
    else if (!this.roundWanted) wake = Math.min(wake, this.nextRoutineRoundMs);
    const waiting = this.ops.length > 0 || (this.roundWanted && this.roundId === 0);
    if (this.inFlightOps === 0 && waiting) {
      if (now < this.floorUntilMs) wake = Math.min(wake, this.floorUntilMs);
      else if (this.ops.length > 0)
        wake = Math.min(wake, this.ops.arrivalMsAt(0) + this.config.batchIntervalMs);
    }
    return wake === Number.POSITIVE_INFINITY ? wake : Math.max(now, wake);
  }

  report(nowMs: number): SenderReport {
    const c = this.config;
    return {
      fragment: c.fragment,
      peer: c.peer,
      state: this.stateAt(nowMs),
      connected: this.connected,
      sessionId: this.sessionId,
      buffered: this.ops.length - this.inFlightOps,
      bufferedBytes: this.ops.bytes - this.inFlightBytes,
      inFlight: this.inFlightOps,
      lastAckLevel: this.lastAckLevel,
      ackDurabilityMismatch: this.ackDurabilityMismatch,
      reconcileRounds: this.reconcileRounds,
      resets: this.resets,
      opsDropped: this.opsDropped,
      batchesAcked: this.batchesAcked,
      opsAcked: this.opsAcked,
      lagMs: this.ops.length > 0 ? Math.max(0, nowMs - this.ops.arrivalMsAt(0)) : 0,
    };
  }

  /**
   * A sender added to a fragment that replicates to others already counts positions from theirs:
   * the ops before `position` were never given to it, so its peer never acknowledges them (lost).
   */
  startAtPosition(position: number): void {
    assert(this.enqueuedOps === 0 && position >= 0, 'a sender starts at a position before its first op');
    this.enqueuedOps = position;
    this.lostThroughOps = position;
    this.ackedThroughOps.fill(position);
  }

  /** Ops enqueued so far: the position of the last one. */
  get enqueuedThroughOps(): number {
    return this.enqueuedOps;
  }

  /** The position through which every op was acknowledged at `level` (or lost: `lostThrough`). */
  ackedThrough(level: AckLevel): number {
    return this.ackedThroughOps[level];
  }

  /** The position through which a reset dropped ops; those are never acknowledged by this peer. */
  get lostThrough(): number {
    return this.lostThroughOps;
  }

  /** True when nothing is buffered or in flight (used by shutdown drain). */
  drained(): boolean {
    return this.ops.length === 0;
  }

  /** Canonical one-line state for golden tests and debugging. */
  describe(): string {
    const round =
      this.roundId !== 0 ? `round=${this.roundId}` : this.roundWanted ? 'round=wanted' : 'round=-';
    return (
      `${this.connected ? 'connected' : 'disconnected'} session=${this.sessionId} seq=${this.lastBatchSeq}` +
      ` queued=${this.ops.length} in-flight=${this.inFlightOps} replay=${this.replayOps} barrier=${this.barrierOps}` +
      ` floor-until=${this.floorUntilMs} ${round}${this.resetPending ? ' reset-pending' : ''}`
    );
  }

  private stateAt(nowMs: number): SenderReport['state'] {
    if (this.resetPending) return 'buffer_reset';
    if (!this.connected) return 'disconnected';
    if (nowMs < this.floorUntilMs) return 'backoff';
    return this.roundId !== 0 ? 'reconciling' : 'connected';
  }

  private onEnqueue(key: Uint8Array, record: Uint8Array): void {
    const bytes = key.byteLength + record.byteLength;
    const c = this.config;
    this.enqueuedOps++;
    if (this.ops.length + 1 > c.bufferOpsMax || this.ops.bytes + bytes > c.bufferBytesMax) {
      this.resetBuffer();
      return;
    }
    this.ops.push(key, record, this.nowMs);
  }

  /**
   * Drops the whole backlog, the in-flight batch (its ACK will no longer match) and the op that did
   * not fit. The peer's own sender toward us pulls what we hold in its rounds, so the loss is repaired
   * by anti-entropy; our next round is requested too, and the report says `buffer_reset` until one
   * started after the reset completes.
   */
  private resetBuffer(): void {
    const dropped = this.ops.length + 1;
    this.ops.clear();
    this.clearInFlight();
    this.replayOps = 0;
    this.barrierOps = 0;
    this.resets++;
    this.opsDropped += dropped;
    this.droppedOpsUnlogged += dropped;
    this.resetPending = true;
    this.resetRoundId = 0;
    this.lostThroughOps = this.enqueuedOps;
    this.roundWanted = true;
  }

  private onDisconnected(): void {
    if (!this.connected) return;
    this.connected = false;
    this.requeueInFlight();
    this.roundId = 0;
  }

  /** A new session: SessionStart, the inherited backlog first, then a round. Abandons the running round. */
  private rotateSession(): void {
    this.requeueInFlight();
    const id = this.ids.next();
    assert(
      Number.isSafeInteger(id) && id !== 0 && id !== this.sessionId,
      'session ids must be fresh and non-zero',
    );
    this.sessionId = id;
    this.lastBatchSeq = 0;
    this.roundId = 0;
    this.roundWanted = true;
    this.barrierOps = this.ops.length;
    this.outbox.push({ kind: 'session-start', sessionId: id });
  }

  private requeueInFlight(): void {
    if (this.inFlightOps === 0) return;
    this.replayOps = this.inFlightOps;
    this.clearInFlight();
  }

  private clearInFlight(): void {
    this.inFlightOps = 0;
    this.inFlightBytes = 0;
    this.inFlightSeq = 0;
  }

  private isCurrentBatch(sessionId: number, batchSeq: number): boolean {
    return (
      this.connected && this.inFlightOps > 0 && sessionId === this.sessionId && batchSeq === this.inFlightSeq
    );
  }

  private isCurrentRound(sessionId: number, roundId: number): boolean {
    return this.connected && this.roundId !== 0 && sessionId === this.sessionId && roundId === this.roundId;
  }

  private onAck(sessionId: number, batchSeq: number, level: number): void {
    if (!this.isCurrentBatch(sessionId, batchSeq) || !isAckLevel(level)) return;
    this.lastAckLevel = level;
    if (level < this.config.requiredAck) {
      // Keep it in flight: the ACK timeout rotates the session and replays it.
      if (!this.ackDurabilityMismatch) {
        this.log(
          'warn',
          `batch ${batchSeq} ACKed at ${ACK_LEVEL_NAMES[level]}, below the ${ACK_LEVEL_NAMES[this.config.requiredAck]} it asked for`,
        );
      }
      this.ackDurabilityMismatch = true;
      return;
    }
    this.ackDurabilityMismatch = false;
    const count = this.inFlightOps;
    this.ops.dropFront(count);
    this.barrierOps = Math.max(0, this.barrierOps - count);
    this.batchesAcked++;
    this.opsAcked += count;
    this.clearInFlight();
    const through = this.enqueuedOps - this.ops.length;
    for (let l = AckLevel.Memory; l <= level; l++)
      this.ackedThroughOps[l] = Math.max(this.ackedThroughOps[l], through);
  }

  private onNack(sessionId: number, batchSeq: number, error: string): void {
    if (!this.isCurrentBatch(sessionId, batchSeq)) return;
    this.requeueInFlight();
    this.floorUntilMs = this.nowMs + this.config.retryFloorMs;
    const reason = error.slice(0, ERROR_MESSAGE_BYTES_MAX);
    this.log('warn', `batch ${batchSeq} refused (${reason}); replaying in ${this.config.retryFloorMs} ms`);
  }

  private onRoundDone(): void {
    this.reconcileRounds++;
    if (this.resetPending && this.resetRoundId === this.roundId) this.resetPending = false;
    this.roundId = 0;
    this.nextRoutineRoundMs = this.nowMs + this.config.reconcileIntervalMs;
  }

  private failRound(reason: string): void {
    this.log(
      'warn',
      `reconcile round ${this.roundId} failed (${reason.slice(0, ERROR_MESSAGE_BYTES_MAX)}); new session, retry in ${this.config.retryFloorMs} ms`,
    );
    this.floorUntilMs = this.nowMs + this.config.retryFloorMs;
    this.rotateSession();
  }

  private checkTimers(): void {
    if (!this.connected) return;
    const c = this.config;
    // The reconcile timeout first: it sets the floor, and its rotation also requeues the batch.
    if (this.roundId !== 0 && this.nowMs >= this.roundProgressMs + c.reconcileTimeoutMs) {
      this.failRound(`no progress for ${c.reconcileTimeoutMs} ms`);
    }
    if (this.inFlightOps > 0 && this.nowMs >= this.inFlightSentMs + c.ackTimeoutMs) {
      this.log(
        'warn',
        `batch ${this.inFlightSeq} not ACKed within ${c.ackTimeoutMs} ms; new session, replaying`,
      );
      this.rotateSession();
    }
    if (this.roundId === 0 && !this.roundWanted && this.nowMs >= this.nextRoutineRoundMs)
      this.roundWanted = true;
  }

  /** Emits whatever is due: nothing while disconnected or inside the retry floor. */
  private pump(): void {
    if (!this.connected) return;
    if (this.droppedOpsUnlogged > 0) {
      this.log(
        'warn',
        `replication buffer full: dropped ${this.droppedOpsUnlogged} ops (resets ${this.resets}); anti-entropy repairs them`,
      );
      this.droppedOpsUnlogged = 0;
    }
    if (this.nowMs < this.floorUntilMs) return;
    if (this.roundWanted && this.roundId === 0 && this.inFlightOps === 0 && this.replayOps === 0) {
      if (this.barrierOps === 0) this.startRound();
    }
    this.maybeSendBatch();
  }

  private startRound(): void {
    const id = this.ids.next();
    assert(Number.isSafeInteger(id) && id !== 0, 'round ids must be non-zero');
    this.roundId = id;
    this.roundWanted = false;
    this.roundProgressMs = this.nowMs;
    this.nextRoutineRoundMs = this.nowMs + this.config.reconcileIntervalMs;
    if (this.resetPending && this.resetRoundId === 0) this.resetRoundId = id;
    this.outbox.push({ kind: 'start-round', sessionId: this.sessionId, roundId: id });
  }

  private maybeSendBatch(): void {
    if (this.inFlightOps > 0 || this.ops.length === 0) return;
    const c = this.config;
    let count = this.replayOps;
    if (count === 0) {
      const due =
        this.barrierOps > 0 ||
        this.ops.length >= c.batchOpsMax ||
        this.ops.bytes >= c.batchBytesMax ||
        this.nowMs >= this.ops.arrivalMsAt(0) + c.batchIntervalMs;
      if (!due) return;
      count = this.batchLength();
    }
    const batchOps = new Array<readonly [Uint8Array, Uint8Array]>(count);
    let bytes = 0;
    for (let i = 0; i < count; i++) {
      batchOps[i] = [this.ops.keyAt(i), this.ops.recordAt(i)];
      bytes += this.ops.bytesAt(i);
    }
    this.replayOps = 0;
    this.inFlightOps = count;
    this.inFlightBytes = bytes;
    this.inFlightSeq = ++this.lastBatchSeq;
    this.inFlightSentMs = this.nowMs;
    this.outbox.push({
      kind: 'batch',
      sessionId: this.sessionId,
      batchSeq: this.inFlightSeq,
      requiredAck: c.requiredAck,
      ops: batchOps,
    });
  }

  /** Ops from the front that make one batch: at most batchOpsMax, within batchBytesMax unless alone. */
  private batchLength(): number {
    const c = this.config;
    let count = 0;
    let bytes = 0;
    while (count < this.ops.length && count < c.batchOpsMax) {
      const next = this.ops.bytesAt(count);
      if (count > 0 && bytes + next > c.batchBytesMax) break;
      bytes += next;
      count++;
    }
    return count;
  }

  private log(level: 'info' | 'warn', message: string): void {
    this.outbox.push({
      kind: 'log',
      level,
      message: `replication to ${this.config.peer} fragment ${this.config.fragment}: ${message}`,
    });
  }
}

/** One line per action, for golden tests and logs. */
export function describeAction(action: SenderAction): string {
  switch (action.kind) {
    case 'session-start':
      return `session-start session=${action.sessionId}`;
    case 'batch': {
      const keys = action.ops.map(([k]) => JSON.stringify(Buffer.from(k).toString('latin1')));
      return `batch session=${action.sessionId} seq=${action.batchSeq} ack=${ACK_LEVEL_NAMES[action.requiredAck]} [${keys.join(' ')}]`;
    }
    case 'start-round':
      return `start-round session=${action.sessionId} round=${action.roundId}`;
    case 'log':
      return `log ${action.level} ${action.message}`;
  }
}
