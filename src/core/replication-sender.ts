// The replication sender for one (fragment, peer) as a pure state machine (spec B13, A §5.3, §6).
// The worker that owns the fragment feeds it writes, connection changes, ACKs/NACKs, reconcile
// round outcomes and ticks; it carries out the actions: SessionStart and ReplicateBatch frames, and
// anti-entropy rounds. No sockets, timers or clock: time arrives as `nowMs` on every event, and
// session and round ids come from the injected `ids` source.
//
// Rules (the seed's, with a window of batches in flight):
// - Ops queue in enqueue order. The batches in flight are the front of the same queue, cut in order
//   (the window: at most `windowBatches`, `windowOpsMax` ops and `windowBytesMax` bytes).
// - The receiver applies a session's batches in seq order and answers them in that order, so an
//   ACK of batch k at level L says every op through k reached L: it retires, in order, every batch
//   up to k that asked for L or less (a batch that asked for more waits for its own ACK).
// - A disconnect, a NACK and an ACK timeout put the window back: the batches are kept as they were
//   cut and replayed, oldest first, each with exactly the ops it carried before, in a new session
//   (a NACK and an ACK timeout rotate it: the receiver ignores the rest of a session that failed).
// - Every session starts with SessionStart, then drains the backlog it inherited (the replays
//   first), then runs an anti-entropy round. A round also starts on `reconcile-now` and about every
//   `reconcileIntervalMs` (spread around it, so the rounds a connect started together drift apart);
//   it waits for the window to empty (no batch is cut meanwhile), and batches keep flowing while it
//   runs. A round asked for (`reconcile-now`: a failover's catch-up, a copy's verification) replaces
//   a running one that nobody asked for: it compares all that one would, and on a large fragment
//   the wait for a routine round to end held a failover for seconds.
// - A routine round takes a turn from the worker's RoundSlots when it is due, and gives it back
//   when it ends (or its connection does): a due round without one waits (no wake-up, no round
//   wanted, so batches keep flowing) until the driver's next tick finds it first in line.
// - A NACK, a failed round and a round without progress for `reconcileTimeoutMs` start a retry
//   floor: no batch and no round before it ends, across reconnects too. A round the peer refused
//   (`round-refused`: it holds no copy) ends with no retry: the next is the routine one, or one
//   asked for. An ACK timeout rotates the
//   session and replays at once (seed test 97): the timeout is long, so the retry is rare already.
// - `flush` (a client waits for the peer: replica-acks.ts) makes the ops through a position due at
//   once instead of after `batchIntervalMs`, and asks for a level: batches ask for it until one that
//   asked for it covers the position, an empty batch when every op was sent already (the receiver's
//   fence covers what it applied before, so WAITAOF and a `stable` drain need no other message).
// - The backlog (buffered + in flight) is bounded in ops and bytes; an op that would pass a bound
//   drops everything ("buffer reset") and anti-entropy repairs what was lost.
// - A continuity id names a run in which every write enqueued reached the peer or still waits to:
//   a session opened with none takes its own id as the continuity; a buffer reset and a peer that
//   says it lost its sessions (`peer-reset`: what it acknowledged from memory may be gone) end it
//   (0 until the next session) — a peer-reset before the peer acknowledged anything in the run
//   does not (a replica that has just opened the fragment asks so for what it ignored while
//   closed): nothing it acknowledged can be gone, and what was sent is replayed. Every
//   SessionStart carries it. A copy verified by a round that started after the peer heard the id,
//   and drained while the id is unchanged, holds every write this sender's replica took (a
//   handover's proof).

import { assert } from './assert.js';
import {
  ANTI_ENTROPY_INTERVAL_MS_DEFAULT,
  ANTI_ENTROPY_INTERVAL_SPREAD,
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
  REPLICATION_WINDOW_BATCHES,
  REPLICATION_WINDOW_BYTES_MAX,
  REPLICATION_WINDOW_OPS_MAX,
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
  /** Level each batch asks for (a `flush` may ask for more). */
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
  /** Batches in flight at once, and their ops and bytes (one batch may exceed those alone). */
  windowBatches: number;
  windowOpsMax: number;
  windowBytesMax: number;
  /** Oldest batch in flight without a satisfying ACK for this long → rotate the session and replay. */
  ackTimeoutMs: number;
  /** After a NACK, a failed or timed-out round, nothing is sent for this long; survives reconnects. */
  retryFloorMs: number;
  /**
   * A routine anti-entropy round about this long after the last one ended, while connected (spread
   * by ANTI_ENTROPY_INTERVAL_SPREAD, so a node's rounds do not all run at once).
   */
  reconcileIntervalMs: number;
  /** A round without progress for this long → rotate the session and retry after the floor. */
  reconcileTimeoutMs: number;
}

/**
 * Turns for routine rounds, shared by a worker's senders (ANTI_ENTROPY_ROUTINE_ROUNDS_MAX): a
 * sender due for a round takes one when one is free and no sender has waited longer, else queues.
 */
export class RoundSlots {
  private held = 0;
  /** Senders due and waiting, the longest first. */
  private readonly waiting: object[] = [];

  constructor(readonly max: number) {
    assert(max >= 1, 'at least one routine round at a time');
  }

  /** True when `who` may take a turn now. */
  mayTake(who: object): boolean {
    return this.held < this.max && (this.waiting.length === 0 || this.waiting[0] === who);
  }

  /** Takes a turn for `who`; false (and `who` queued, once) when it must wait. */
  tryTake(who: object): boolean {
    if (this.mayTake(who)) {
      if (this.waiting[0] === who) this.waiting.shift();
      this.held++;
      return true;
    }
    if (!this.waiting.includes(who)) this.waiting.push(who);
    return false;
  }

  release(): void {
    assert(this.held > 0, 'a turn given back was taken');
    this.held--;
  }

  /** `who` no longer waits (its connection or the sender went). */
  forget(who: object): void {
    const i = this.waiting.indexOf(who);
    if (i !== -1) this.waiting.splice(i, 1);
  }

  /** Turns taken now, and senders waiting for one. */
  get counts(): { held: number; waiting: number } {
    return { held: this.held, waiting: this.waiting.length };
  }
}

/** Defaults for every field but the identity ones. */
export const SENDER_CONFIG_DEFAULTS: Omit<SenderConfig, 'fragment' | 'peer'> = {
  requiredAck: AckLevel.Store,
  batchOpsMax: REPLICATION_BATCH_OPS_MAX,
  batchBytesMax: REPLICATION_BATCH_BYTES_MAX,
  batchIntervalMs: REPLICATION_BATCH_INTERVAL_MS,
  bufferOpsMax: REPLICATION_BUFFER_OPS_MAX,
  bufferBytesMax: REPLICATION_BUFFER_BYTES_MAX,
  windowBatches: REPLICATION_WINDOW_BATCHES,
  windowOpsMax: REPLICATION_WINDOW_OPS_MAX,
  windowBytesMax: REPLICATION_WINDOW_BYTES_MAX,
  ackTimeoutMs: REPLICATION_ACK_TIMEOUT_MS,
  retryFloorMs: REPLICATION_RETRY_FLOOR_MS,
  reconcileIntervalMs: ANTI_ENTROPY_INTERVAL_MS_DEFAULT,
  reconcileTimeoutMs: ANTI_ENTROPY_ROUND_TIMEOUT_MS,
};

export type SenderEvent =
  /** A local write to replicate. The sender keeps `key` and `record`: the caller must not reuse them. */
  | { kind: 'enqueue'; key: Uint8Array; record: Uint8Array; nowMs: number }
  /**
   * Peer connection established or re-established (an implicit disconnect if already connected).
   * `firstRound` false: the session starts without its round (a sender opened for a copy being
   * gained here, whose rounds the copy's verification asks for one source at a time).
   */
  | { kind: 'connected'; nowMs: number; firstRound?: boolean }
  | { kind: 'disconnected'; nowMs: number }
  /**
   * The peer lost its sessions toward this fragment (its worker restarted, or it opened the
   * fragment just now): a new session, and a new continuity once it acknowledged something.
   */
  | { kind: 'peer-reset'; nowMs: number }
  | { kind: 'tick'; nowMs: number }
  | { kind: 'ack'; sessionId: number; batchSeq: number; level: AckLevel; nowMs: number }
  | { kind: 'nack'; sessionId: number; batchSeq: number; error: string; nowMs: number }
  | { kind: 'reconcile-now'; nowMs: number }
  /** Send the ops through position `throughOps` now, and have the peer acknowledge them at `level` at least. */
  | { kind: 'flush'; throughOps: number; level: AckLevel; nowMs: number }
  /** The driver saw a valid reply page of the round. */
  | { kind: 'round-progress'; sessionId: number; roundId: number; nowMs: number }
  | { kind: 'round-done'; sessionId: number; roundId: number; nowMs: number }
  | { kind: 'round-failed'; sessionId: number; roundId: number; reason: string; nowMs: number }
  /** The peer holds no copy of the fragment: the round ends, not retried until the next is due. */
  | { kind: 'round-refused'; sessionId: number; roundId: number; reason: string; nowMs: number };

export type SenderAction =
  | { kind: 'session-start'; sessionId: number; continuity: number }
  | {
      kind: 'batch';
      sessionId: number;
      batchSeq: number;
      requiredAck: AckLevel;
      ops: ReadonlyArray<readonly [key: Uint8Array, record: Uint8Array]>;
    }
  /**
   * Run one anti-entropy round (a pull of the peer's newer keys) correlated by these ids; `routine`
   * when it took a turn (neither asked for nor a session's first), which the driver paces.
   */
  | { kind: 'start-round'; sessionId: number; roundId: number; routine: boolean }
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
  /** Ops and bytes waiting to be sent (the batches in flight excluded). */
  buffered: number;
  bufferedBytes: number;
  /** Ops in the batches in flight. */
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
 * (bounded, since the sender never holds more than bufferOpsMax ops). With batches cut:
 *
 *   head                                                                  head + length
 *    │ batch 0 │ batch 1 │ … (BatchWindow: sent, then awaiting replay) │ not cut yet │
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

/** A batch cut from the backlog: the ops after the batches before it. */
interface CutBatch {
  opCount: number;
  bytes: number;
  /** Its seq in the current session; 0 while it waits to be replayed. */
  seq: number;
  sentMs: number;
  /** The level it asked for when sent. */
  level: AckLevel;
}

/**
 * The batches cut from the front of the backlog, oldest first, in a ring of `windowBatches` slots:
 * the first `sent` went out in the current session, with consecutive seqs; the rest went out in an
 * earlier one and wait to be replayed, in order, as they were cut.
 */
class BatchWindow {
  private readonly slots: (CutBatch | undefined)[];
  private head = 0;
  length = 0;
  sent = 0;
  /** Ops and bytes of all the batches, and of the sent ones. */
  ops = 0;
  bytes = 0;
  sentOps = 0;
  sentBytes = 0;

  constructor(capacity: number) {
    this.slots = new Array(capacity);
  }

  at(index: number): CutBatch {
    assert(index >= 0 && index < this.length, 'batch index out of range');
    return this.slots[(this.head + index) % this.slots.length]!;
  }

  /** A batch cut from the ops after the last one; it is the next to send. */
  cut(opCount: number, bytes: number): void {
    assert(this.length < this.slots.length && this.sent === this.length, 'cut with a full window or replays');
    this.slots[(this.head + this.length) % this.slots.length] = {
      opCount,
      bytes,
      seq: 0,
      sentMs: 0,
      level: AckLevel.Memory,
    };
    this.length++;
    this.ops += opCount;
    this.bytes += bytes;
  }

  /** The next batch went out as `seq`. */
  markSent(seq: number, sentMs: number, level: AckLevel): CutBatch {
    const batch = this.at(this.sent);
    batch.seq = seq;
    batch.sentMs = sentMs;
    batch.level = level;
    this.sent++;
    this.sentOps += batch.opCount;
    this.sentBytes += batch.bytes;
    return batch;
  }

  /** Retires the oldest batch, which was sent. */
  retireFront(): CutBatch {
    assert(this.sent > 0, 'retiring a batch never sent');
    const batch = this.at(0);
    this.slots[this.head] = undefined;
    this.head = (this.head + 1) % this.slots.length;
    this.length--;
    this.sent--;
    this.ops -= batch.opCount;
    this.bytes -= batch.bytes;
    this.sentOps -= batch.opCount;
    this.sentBytes -= batch.bytes;
    return batch;
  }

  /** Every batch sent waits to be replayed. */
  unsend(): void {
    for (let i = 0; i < this.sent; i++) this.at(i).seq = 0;
    this.sent = 0;
    this.sentOps = 0;
    this.sentBytes = 0;
  }

  clear(): void {
    this.slots.fill(undefined);
    this.head = 0;
    this.length = 0;
    this.sent = 0;
    this.ops = 0;
    this.bytes = 0;
    this.sentOps = 0;
    this.sentBytes = 0;
  }
}

export function isAckLevel(level: number): level is AckLevel {
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
  assert(Number.isInteger(c.windowBatches) && c.windowBatches >= 1, 'windowBatches must be ≥ 1');
  assert(
    c.windowOpsMax >= c.batchOpsMax && c.windowBytesMax >= c.batchBytesMax,
    'a window must hold a batch',
  );
  assert(positive(c.ackTimeoutMs) && positive(c.retryFloorMs), 'timeouts and floors must be > 0');
  assert(positive(c.reconcileIntervalMs) && positive(c.reconcileTimeoutMs), 'reconcile timing must be > 0');
}

export class ReplicationSender {
  private readonly outbox: SenderAction[] = [];
  private nowMs = 0;
  private connected = false;
  private sessionId = 0;
  /** Seq of the last batch sent in this session; the next is +1 (so the first is 1). */
  private lastBatchSeq = 0;

  private readonly ops = new OpQueue();
  private readonly window: BatchWindow;
  /** Per level, the highest seq of this session the peer ACKed at that level or above. */
  private readonly ackedSeqs = [0, 0, 0, 0];
  /** The front `barrierOps` ops predate the session: they must be ACKed before its round starts. */
  private barrierOps = 0;
  /** No batch and no round before this (retry floor). */
  private floorUntilMs = 0;

  /** The run of writes with none dropped (see the file header); 0 before a session opens one. */
  private continuity = 0;
  /** The peer acknowledged a batch in the current run: a peer-reset ends the run. */
  private ackedInRun = false;
  private roundWanted = false;
  /** A `reconcile-now` came since the last round started: the next round is asked for. */
  private roundAsked = false;
  /** The running round, or 0. */
  private roundId = 0;
  /** The running round was asked for (a request waits for its end): nothing replaces it. */
  private roundIsAsked = false;
  /** A routine round's turn (RoundSlots) is held, from when it was due until it ends. */
  private holdsTurn = false;
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
   * too: the receiver answers in order, and its fence covers everything it applied before.
   */
  private enqueuedOps = 0;
  private readonly ackedThroughOps = [0, 0, 0, 0];
  private lostThroughOps = 0;
  /**
   * Per level, the position a `flush` asked to reach it, and the position through which a batch
   * sent in this session (or acknowledged) asked for it: while the first is ahead, batches ask for
   * that level, and the ops through it are due at once.
   */
  private readonly wantedThroughOps = [0, 0, 0, 0];
  private readonly requestedThroughOps = [0, 0, 0, 0];

  constructor(
    private readonly config: SenderConfig,
    /** Fresh non-zero ids for sessions and rounds. */
    private readonly ids: { next(): number },
    /** The worker's turns for routine rounds; unlimited for a sender on its own. */
    private readonly routineSlots = new RoundSlots(Number.POSITIVE_INFINITY),
  ) {
    checkConfig(config);
    this.window = new BatchWindow(config.windowBatches);
  }

  step(event: SenderEvent): void {
    this.nowMs = Math.max(this.nowMs, event.nowMs);
    switch (event.kind) {
      case 'enqueue':
        this.onEnqueue(event.key, event.record);
        break;
      case 'connected':
        this.reopenSession();
        if (event.firstRound === false) this.roundWanted = false;
        break;
      case 'disconnected':
        this.onDisconnected();
        break;
      case 'peer-reset':
        if (!this.connected) break;
        if (this.ackedInRun) this.continuity = 0;
        this.reopenSession();
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
        this.roundAsked = true;
        if (this.roundId !== 0 && !this.roundIsAsked) this.abandonRound();
        break;
      case 'flush':
        this.onFlush(event.throughOps, event.level);
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
      case 'round-refused':
        if (this.isCurrentRound(event.sessionId, event.roundId)) this.refuseRound(event.reason);
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
    const w = this.window;
    let wake = Number.POSITIVE_INFINITY;
    if (w.sent > 0) wake = w.at(0).sentMs + this.config.ackTimeoutMs;
    if (this.roundId !== 0) wake = Math.min(wake, this.roundProgressMs + this.config.reconcileTimeoutMs);
    // A due round waiting for its turn needs no wake-up: the tick after a turn is given back comes.
    else if (!this.roundWanted && !(this.routineRoundDue() && !this.routineSlots.mayTake(this)))
      wake = Math.min(wake, this.nextRoutineRoundMs);
    const waiting = w.length > w.sent || this.ops.length > w.ops || (this.roundWanted && this.roundId === 0);
    if (w.sent < this.config.windowBatches && waiting) {
      if (now < this.floorUntilMs) wake = Math.min(wake, this.floorUntilMs);
      else if (this.mayCut())
        wake = Math.min(wake, this.ops.arrivalMsAt(w.ops) + this.config.batchIntervalMs);
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
      buffered: this.ops.length - this.window.sentOps,
      bufferedBytes: this.ops.bytes - this.window.sentBytes,
      inFlight: this.window.sentOps,
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
    this.requestedThroughOps.fill(position);
  }

  /** The session open toward the peer; 0 while none is. */
  get currentSessionId(): number {
    return this.sessionId;
  }

  /** The current continuity id (see the file header); 0 while none is open. */
  get continuityId(): number {
    return this.continuity;
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

  /**
   * True when the peer acknowledged every op at `level` or above, or a reset dropped it (at the
   * level batches ask for, the same as `drained`; a higher one needs a `flush` asking for it).
   */
  drainedAt(level: AckLevel): boolean {
    return Math.max(this.ackedThroughOps[level], this.lostThroughOps) >= this.enqueuedOps;
  }

  /** Canonical one-line state for golden tests and debugging. */
  describe(): string {
    const round =
      this.roundId !== 0 ? `round=${this.roundId}` : this.roundWanted ? 'round=wanted' : 'round=-';
    const w = this.window;
    return (
      `${this.connected ? 'connected' : 'disconnected'} session=${this.sessionId} seq=${this.lastBatchSeq}` +
      ` queued=${this.ops.length} in-flight=${w.sentOps}/${w.sent} replay=${w.ops - w.sentOps}/${w.length - w.sent}` +
      ` barrier=${this.barrierOps} floor-until=${this.floorUntilMs} ${round}${this.resetPending ? ' reset-pending' : ''}` +
      ` acked=${this.ackedThroughOps.slice(1).join('/')}`
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

  private onFlush(throughOps: number, level: number): void {
    assert(isAckLevel(level) && throughOps >= 0, 'a flush names a level and a position');
    const through = Math.min(throughOps, this.enqueuedOps);
    this.wantedThroughOps[level] = Math.max(this.wantedThroughOps[level], through);
  }

  /**
   * Drops the whole backlog, the batches in flight (their ACKs will no longer match) and the op that
   * did not fit. The peer's own sender toward us pulls what we hold in its rounds, so the loss is
   * repaired by anti-entropy; our next round is requested too, and the report says `buffer_reset`
   * until one started after the reset completes.
   */
  private resetBuffer(): void {
    const dropped = this.ops.length + 1;
    this.ops.clear();
    this.window.clear();
    this.barrierOps = 0;
    this.resets++;
    this.continuity = 0;
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
    this.requeueSent();
    this.roundId = 0;
    this.giveBackTurn();
  }

  /** The sender is dropped (its peer left the replica list, or the fragment went): its turn too. */
  close(): void {
    this.giveBackTurn();
    this.connected = false;
  }

  private giveBackTurn(): void {
    this.routineSlots.forget(this);
    if (!this.holdsTurn) return;
    this.holdsTurn = false;
    this.routineSlots.release();
  }

  /** A connection (re)established: what was sent is replayed in a new session. */
  private reopenSession(): void {
    if (this.connected) this.onDisconnected();
    this.connected = true;
    this.rotateSession();
  }

  /** A new session: SessionStart, the inherited backlog first, then a round. Abandons the running round. */
  private rotateSession(): void {
    this.requeueSent();
    const id = this.ids.next();
    assert(
      Number.isSafeInteger(id) && id !== 0 && id !== this.sessionId,
      'session ids must be fresh and non-zero',
    );
    this.sessionId = id;
    if (this.continuity === 0) {
      this.continuity = id;
      this.ackedInRun = false;
    }
    this.lastBatchSeq = 0;
    this.roundId = 0;
    this.roundWanted = true;
    this.barrierOps = this.ops.length;
    this.outbox.push({ kind: 'session-start', sessionId: id, continuity: this.continuity });
  }

  /** The batches sent wait to be replayed; what they asked the peer for is asked again. */
  private requeueSent(): void {
    this.window.unsend();
    this.ackedSeqs.fill(0);
    for (let l = AckLevel.Memory; l <= AckLevel.Stable; l++)
      this.requestedThroughOps[l] = this.ackedThroughOps[l];
  }

  /** Index in the window of the sent batch `batchSeq` of session `sessionId`, or -1. */
  private sentIndexOf(sessionId: number, batchSeq: number): number {
    const w = this.window;
    if (!this.connected || sessionId !== this.sessionId || w.sent === 0) return -1;
    const index = batchSeq - w.at(0).seq;
    return Number.isInteger(index) && index >= 0 && index < w.sent ? index : -1;
  }

  private isCurrentRound(sessionId: number, roundId: number): boolean {
    return this.connected && this.roundId !== 0 && sessionId === this.sessionId && roundId === this.roundId;
  }

  private onAck(sessionId: number, batchSeq: number, level: number): void {
    const index = this.sentIndexOf(sessionId, batchSeq);
    if (index === -1 || !isAckLevel(level)) return;
    this.ackedInRun = true;
    const w = this.window;
    const asked = w.at(index).level;
    this.lastAckLevel = level;
    if (level < asked) {
      // It stays in flight: the ACK timeout rotates the session and replays it.
      if (!this.ackDurabilityMismatch) {
        this.log(
          'warn',
          `batch ${batchSeq} ACKed at ${ACK_LEVEL_NAMES[level]}, below the ${ACK_LEVEL_NAMES[asked]} it asked for`,
        );
      }
      this.ackDurabilityMismatch = true;
    } else this.ackDurabilityMismatch = false;
    let through = this.enqueuedOps - this.ops.length;
    for (let i = 0; i <= index; i++) through += w.at(i).opCount;
    for (let l = AckLevel.Memory; l <= level; l++) {
      this.ackedSeqs[l] = Math.max(this.ackedSeqs[l], batchSeq);
      this.ackedThroughOps[l] = Math.max(this.ackedThroughOps[l], through);
      this.requestedThroughOps[l] = Math.max(this.requestedThroughOps[l], through);
    }
    // In order: a batch that asked for more than what covers it waits, and so do those after it.
    while (w.sent > 0 && w.at(0).seq <= this.ackedSeqs[w.at(0).level]) {
      const batch = w.retireFront();
      this.ops.dropFront(batch.opCount);
      this.barrierOps = Math.max(0, this.barrierOps - batch.opCount);
      this.batchesAcked++;
      this.opsAcked += batch.opCount;
    }
  }

  private onNack(sessionId: number, batchSeq: number, error: string): void {
    if (this.sentIndexOf(sessionId, batchSeq) === -1) return;
    this.floorUntilMs = this.nowMs + this.config.retryFloorMs;
    const reason = error.slice(0, ERROR_MESSAGE_BYTES_MAX);
    this.log(
      'warn',
      `batch ${batchSeq} refused (${reason}); new session, replaying in ${this.config.retryFloorMs} ms`,
    );
    this.rotateSession();
  }

  private onRoundDone(): void {
    this.reconcileRounds++;
    if (this.resetPending && this.resetRoundId === this.roundId) this.resetPending = false;
    this.nextRoutineRoundMs = this.nowMs + this.routineDelayMs(this.roundId);
    this.roundId = 0;
    this.giveBackTurn();
  }

  /**
   * The wait for the next routine round, spread around the interval by the round id that ended
   * (random, as every id: the sender draws nothing more, so a simulation replays as before).
   */
  private routineDelayMs(roundId: number): number {
    // A multiplicative hash: ids drawn at random stay uniform, ids counted up still spread.
    const fraction = (Math.imul(roundId, 0x9e3779b1) >>> 0) / 2 ** 32;
    const spread = ANTI_ENTROPY_INTERVAL_SPREAD * (fraction - 0.5);
    return Math.max(1, Math.round(this.config.reconcileIntervalMs * (1 + spread)));
  }

  /**
   * A retry would be refused as this round was, until the peer holds the fragment (it then resets
   * the session): the next round is the routine one. A reset still waits for a round that completes.
   */
  private refuseRound(reason: string): void {
    this.log('info', `reconcile round ${this.roundId} refused (${reason.slice(0, ERROR_MESSAGE_BYTES_MAX)})`);
    this.nextRoutineRoundMs = this.nowMs + this.routineDelayMs(this.roundId);
    this.abandonRound();
  }

  private failRound(reason: string): void {
    this.log(
      'warn',
      `reconcile round ${this.roundId} failed (${reason.slice(0, ERROR_MESSAGE_BYTES_MAX)}); new session, retry in ${this.config.retryFloorMs} ms`,
    );
    this.floorUntilMs = this.nowMs + this.config.retryFloorMs;
    this.rotateSession();
  }

  private routineRoundDue(): boolean {
    return this.roundId === 0 && !this.roundWanted && this.nowMs >= this.nextRoutineRoundMs;
  }

  private checkTimers(): void {
    if (!this.connected) return;
    const c = this.config;
    // The reconcile timeout first: it sets the floor, and its rotation also requeues the window.
    if (this.roundId !== 0 && this.nowMs >= this.roundProgressMs + c.reconcileTimeoutMs) {
      this.failRound(`no progress for ${c.reconcileTimeoutMs} ms`);
    }
    const w = this.window;
    if (w.sent > 0 && this.nowMs >= w.at(0).sentMs + c.ackTimeoutMs) {
      this.log('warn', `batch ${w.at(0).seq} not ACKed within ${c.ackTimeoutMs} ms; new session, replaying`);
      this.rotateSession();
    }
    if (this.routineRoundDue() && this.routineSlots.tryTake(this)) {
      this.holdsTurn = true;
      this.roundWanted = true;
    }
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
    if (this.roundWanted && this.roundId === 0 && this.window.length === 0 && this.barrierOps === 0)
      this.startRound();
    this.sendBatches();
  }

  /**
   * Drops the running round (for one asked for, or one the peer refused): the driver's next
   * `start-round` supersedes it (its replies no longer match), and a reset waits for a later round.
   */
  private abandonRound(): void {
    if (this.resetRoundId === this.roundId) this.resetRoundId = 0;
    this.roundId = 0;
    this.giveBackTurn();
  }

  private startRound(): void {
    const id = this.ids.next();
    assert(Number.isSafeInteger(id) && id !== 0, 'round ids must be non-zero');
    this.roundId = id;
    this.roundIsAsked = this.roundAsked;
    this.roundAsked = false;
    this.roundWanted = false;
    this.roundProgressMs = this.nowMs;
    this.nextRoutineRoundMs = this.nowMs + this.config.reconcileIntervalMs;
    if (this.resetPending && this.resetRoundId === 0) this.resetRoundId = id;
    const routine = this.holdsTurn && !this.roundIsAsked;
    this.outbox.push({ kind: 'start-round', sessionId: this.sessionId, roundId: id, routine });
  }

  /** Fills the window: the replays first, then new batches as they are due. */
  private sendBatches(): void {
    const w = this.window;
    while (w.sent < this.config.windowBatches) {
      if (w.sent < w.length) {
        this.sendNext();
        continue;
      }
      if (this.mayCut()) {
        if (!this.cutDue()) return;
        const [count, bytes] = this.batchLength();
        w.cut(count, bytes);
      } else if (this.ops.length === w.ops && this.wantedLevel() !== 0 && !this.roundHeld()) {
        // Every op went out already, below the level a flush asks: an empty batch asks for it.
        w.cut(0, 0);
      } else return;
      this.sendNext();
    }
  }

  /** A round waits for the window to empty: no batch is cut past the backlog its session inherited. */
  private roundHeld(): boolean {
    return this.roundWanted && this.roundId === 0 && this.window.ops >= this.barrierOps;
  }

  /** True when the next uncut op may go in a new batch now, were it due. */
  private mayCut(): boolean {
    const w = this.window;
    if (w.length > w.sent || w.sent >= this.config.windowBatches || this.ops.length === w.ops) return false;
    if (this.roundHeld()) return false;
    if (w.sent === 0) return true;
    return (
      w.sentOps < this.config.windowOpsMax &&
      w.sentBytes + this.ops.bytesAt(w.ops) <= this.config.windowBytesMax
    );
  }

  /**
   * The ops not cut yet make a batch now: full, old enough, flushed, inherited by the session, or
   * carrying a level a flush asks for.
   */
  private cutDue(): boolean {
    const c = this.config;
    const w = this.window;
    const uncut = this.ops.length - w.ops;
    const firstPosition = this.enqueuedOps - uncut + 1;
    return (
      w.ops < this.barrierOps ||
      uncut >= c.batchOpsMax ||
      this.ops.bytes - w.bytes >= c.batchBytesMax ||
      this.nowMs >= this.ops.arrivalMsAt(w.ops) + c.batchIntervalMs ||
      firstPosition <=
        Math.max(this.wantedThroughOps[1], this.wantedThroughOps[2], this.wantedThroughOps[3]) ||
      this.wantedLevel() !== 0
    );
  }

  /**
   * The ops after the window that make one batch, and their bytes: at most batchOpsMax, within
   * batchBytesMax unless alone, and within what the window has room for (an empty window takes one).
   */
  private batchLength(): [count: number, bytes: number] {
    const c = this.config;
    const w = this.window;
    const opsMax = Math.min(c.batchOpsMax, this.ops.length - w.ops, c.windowOpsMax - w.sentOps);
    const bytesMax = Math.min(c.batchBytesMax, c.windowBytesMax - w.sentBytes);
    let count = 0;
    let bytes = 0;
    while (count < opsMax) {
      const next = this.ops.bytesAt(w.ops + count);
      if (count > 0 && bytes + next > bytesMax) break;
      bytes += next;
      count++;
    }
    return [count, bytes];
  }

  /** The highest level a flush asks for that no batch sent asks for yet, or 0. */
  private wantedLevel(): AckLevel | 0 {
    for (let l = AckLevel.Stable; l >= AckLevel.Memory; l--)
      if (this.wantedThroughOps[l] > this.requestedThroughOps[l]) return l;
    return 0;
  }

  /** Sends the oldest batch not sent in this session: a replay, or the one just cut. */
  private sendNext(): void {
    const w = this.window;
    const first = w.sentOps;
    const level = Math.max(this.config.requiredAck, this.wantedLevel()) as AckLevel;
    const batch = w.markSent(++this.lastBatchSeq, this.nowMs, level);
    const batchOps = new Array<readonly [Uint8Array, Uint8Array]>(batch.opCount);
    for (let i = 0; i < batch.opCount; i++)
      batchOps[i] = [this.ops.keyAt(first + i), this.ops.recordAt(first + i)];
    const through = this.enqueuedOps - this.ops.length + w.sentOps;
    for (let l = AckLevel.Memory; l <= level; l++)
      this.requestedThroughOps[l] = Math.max(this.requestedThroughOps[l], through);
    this.outbox.push({
      kind: 'batch',
      sessionId: this.sessionId,
      batchSeq: batch.seq,
      requiredAck: level,
      ops: batchOps,
    });
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
