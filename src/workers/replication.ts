// The worker's side of replication and anti-entropy (DESIGN.md "Cluster", spec §5–6). For each
// fragment the worker owns and each other replica of it, a ReplicationSender (src/core) decides when
// to open sessions, cut batches, replay and run anti-entropy rounds; this driver carries out its
// actions as peer frames (sent through the result ring; the main thread writes them to the socket)
// and serves what peers send: replicated batches, which it applies through the fragment actor and
// acknowledges at the level reached, and anti-entropy pages from the store.
//
// Anti-entropy pulls: a sender's round asks the peer for summaries of what it holds and fetches the
// keys where the peer is newer. The peer's own sender toward us pulls what we hold, so both converge
// to the LWW winner.
//
// The replica lists change at runtime (setReplicas, removeFragment): a sender exists toward every
// other replica of a fragment the worker holds, and only toward those. A sender closed drops its
// backlog (anti-entropy repairs what it held); a sender opened starts a session, whose first round
// pulls what the peer holds. How each round ends goes to the main thread (round-ledger.ts).
//
// A round that verifies a copy (`reconcileNow` with `verify`: a gained fragment before it may
// serve) starts only once the peer replicates the fragment here — its SessionStart came — and
// compares everything, with no horizon: what the peer took before it began replicating here is in
// the round, whatever the clocks, and what it took since comes by replication. The round's report
// names the peer's continuity heard when it started, so a later handover from that peer can tell
// whether its drain completes the copy (src/core/replication-sender.ts).
//
// Any round compares everything, too, until one has completed in the peer's current run of its
// replication here (heard before the round started): so each replica of a fragment is verified
// against each other one once per run, by the rounds anti-entropy runs anyway, and a handoff or a
// handover from a replica that stayed in the table finds the copy verified (the main thread keeps
// what the reports say: cluster.ts). Runs end rarely (a restart, a dropped backlog), and a round
// with no horizon costs only the fetch of the writes replication is still carrying.
//
// Pulls are rate-limited (`--move-rate`, this worker's share in ClusterInit.pullBytesPerSec) so a
// move's copy, or the repair of a replica that was away, leaves clients their latency: every round
// is, as a healthy fragment's periodic round pulls next to nothing. The bytes of each page pulled are
// spent from a token bucket, into debt; a round's next fetch waits while the bucket is in debt. So
// the worker pulls at most its rate over time, plus the bucket's burst and one fetch per round
// running at once (a fetch's pages come whole).
//
// Routine rounds (those that took a turn: neither asked for nor a session's first) are paced too
// (`--anti-entropy-rate`, this worker's share in ClusterInit.compareKeysPerSec): each page spends
// the keys it describes from a second bucket, and the next page waits while it is in debt. A
// routine round compares every key of its fragment on both replicas, so on a large node they would
// otherwise run back to back and keep cores busy; a round asked for replaces one in flight
// (replication-sender.ts), so nobody waits on the pace.
//
// The first summary page of each round served says how big this node's copy of the fragment is
// (KvStore.fragmentSize, read beside the page's span), and the requester's round reports carry what
// it heard, so the main thread can show how much a copy has left to pull (`GET /cluster/moves`).
//
// Time comes through a DriverClock (the wall clock and one timer in a worker, simulated time in
// test/sim/), and session and round ids from the tuning's source, so a simulator can run this driver
// as it is and replay a run from its seed.

import { randomInt } from 'node:crypto';
import type { Logger } from 'pino';
import { assert } from '../core/assert.js';
import { asBuffer } from '../core/bytes.js';
import type { DriverClock } from '../core/clock.js';
import { type FragmentCore, FragmentOp, type ReplySink } from '../core/fragment.js';
import { Keyspace } from '../core/keyspace.js';
import {
  ANTI_ENTROPY_ROUTINE_ROUNDS_MAX,
  MOVE_RATE_BURST_MS,
  RECONCILE_PAGE_RECORDS_MAX,
} from '../core/limits.js';
import { TokenBucket } from '../core/op-queue.js';
import { Durability, OpKind, Priority, Reply } from '../core/ops.js';
import { EnvelopeField, peekEnvelope } from '../core/peer-frame.js';
import {
  checkRecords,
  type PageAnswer,
  type RangeDigest,
  ReconcileResponder,
  ReconcileRound,
  type RecordCheck,
  type RoundStep,
  rangeKeysOf,
  recordsTakenBy,
} from '../core/reconciler.js';
import { type BatchAnswer, BatchReceiver } from '../core/replication-receiver.js';
import {
  AckLevel,
  ReplicationSender,
  RoundSlots,
  SENDER_CONFIG_DEFAULTS,
  type SenderAction,
  type SenderConfig,
  type SenderReport,
} from '../core/replication-sender.js';
import {
  encodeReconcileData,
  encodeReconcileResponse,
  encodeReplicateBatch,
  newestWallMs,
  type ReconcileDataView,
  type ReconcileResponseView,
  type ReplicateBatchView,
  type ReplicatedOpView,
  readReconcileData,
  readReconcileResponse,
  readReplicateBatch,
} from '../core/replication-wire.js';
import type { FragmentSize, KvStore } from '../native-bindings/kv-store.js';
import type { ClusterInit } from '../threads/messages.js';
import type { RoundReport, SpanWork } from '../threads/op-codec.js';
import { decodeEnvelope, type Envelope, encodeEnvelope } from '../threads/peer-messages.js';
import { fenced } from './fragment-actors.js';
import {
  answerSpan,
  describeSpan,
  nextPage,
  type PageReader,
  type SpanQuery,
  spanQueryOf,
} from './reconcile-span.js';
import { RoundLedger } from './round-ledger.js';

/** A horizon the pool's request carries (u48 wall ms); a peer's other value is compared here. */
function isPoolHorizon(horizonMs: number): boolean {
  return Number.isSafeInteger(horizonMs) && horizonMs >= 0 && horizonMs < 2 ** 48;
}

/** Anti-entropy's pages worked out in the background pool (src/workers/pool-spans.ts). */
export interface SpanPool {
  /** This node's page of `fragment` that `q` asks for, as range digests (reconciler.ts `describePage`). */
  describe(
    fragment: number,
    afterKey: Uint8Array | undefined,
    q: SpanQuery,
    horizonMs: number,
  ): Promise<{ ranges: RangeDigest[]; openEnd: boolean }>;
  /** This node's answer to a peer's page (reconciler.ts `answerPage`) over the span `q` asks for. */
  answer(
    fragment: number,
    afterKey: Uint8Array | undefined,
    q: SpanQuery,
    work: SpanWork & { kind: 'answer' },
  ): Promise<PageAnswer>;
}

/** What the driver needs from the worker runtime. */
export interface ReplicationHost {
  core(fragment: number): FragmentCore | undefined;
  /** Queues an op the worker issued itself into its fragment's actor (run on the next turn). */
  submit(core: FragmentCore, op: FragmentOp): void;
  /** Sends an encoded envelope to peer `member`. */
  sendFrame(member: number, envelope: Uint8Array): void;
  /** Asks the main thread to close the connection to `member`, which broke the protocol. */
  closePeer(member: number, reason: string): void;
  /**
   * Reads anti-entropy's spans in the background pool and works out what a page says there, so the
   * fragment's actor keeps serving while it is compared and only the outcome crosses to this thread;
   * undefined when the store has one owner (LevelDB, memory). Its calls reject when the pool cannot
   * take them.
   */
  pool: SpanPool | undefined;
  /** Anti-entropy's spans when there is no pool, and the size of a fragment a peer pulls from here. */
  readonly store: Pick<KvStore, 'page' | 'fragmentSize'>;
  readonly logger: Logger;
  /** The wall clock and the one timer this driver keeps (its senders' earliest deadline). */
  readonly clock: DriverClock;
  /** An anti-entropy round of a sender ended (RoundReport). */
  roundEnded?(report: RoundReport): void;
  /** The answer to a `reconcileNow` request. */
  roundAnswer?(reqId: number, report: RoundReport): void;
  /** A running round pulled a page: its counts so far (RoundProgress). */
  roundProgress?(report: RoundReport): void;
}

/**
 * The senders' timing and bounds (the cluster's settings decide the ACK level and the anti-entropy
 * interval) and the source of their session and round ids: a simulator shortens the one and seeds
 * the other.
 */
export interface SenderTuning {
  config: Omit<SenderConfig, 'fragment' | 'peer' | 'requiredAck' | 'reconcileIntervalMs'>;
  ids: { next(): number };
}

/** A worker's: the default limits, and random ids. */
export const WORKER_SENDER_TUNING: SenderTuning = {
  config: SENDER_CONFIG_DEFAULTS,
  ids: { next: (): number => randomInt(1, 2 ** 31) },
};

const EMPTY = Buffer.alloc(0);
const ACK_DURABILITY: Record<AckLevel, Durability> = {
  [AckLevel.Memory]: Durability.Memory,
  [AckLevel.Store]: Durability.Store,
  [AckLevel.Stable]: Durability.Stable,
};

/** A replicated batch being applied: replies of its ops, then the fence that acknowledges it. */
class BatchApply implements ReplySink {
  failure = '';
  constructor(
    private readonly owner: WorkerReplication,
    private readonly member: number,
    readonly receiver: BatchReceiver,
    readonly fragment: number,
    readonly sessionId: number,
    readonly batchSeq: number,
  ) {}

  onReply(op: FragmentOp, reply: Reply, text: string): void {
    if (op.kind === OpKind.Fence) {
      if (reply !== Reply.FenceReached && this.failure === '') this.failure = text || 'fence failed';
      this.owner.finishBatch(this.member, this);
    } else if (reply === Reply.Backpressure || reply === Reply.StorageFailed) {
      if (this.failure === '') this.failure = text;
    }
  }
}

/** Replies of anti-entropy repairs are not awaited: LWW decides, and a lost one is repaired next round. */
const ignoreReplies: ReplySink = { onReply() {} };

/**
 * A round's step held back while a bucket of the worker is in debt: a fetch (the pull bucket,
 * `--move-rate`), or a routine round's page (the compare bucket, `--anti-entropy-rate`).
 */
interface HeldStep {
  member: number;
  fragment: number;
  round: ReconcileRound;
  step: RoundStep & { kind: 'fetch' | 'request-page' };
  bucket: TokenBucket;
  /** When to look again: once the bucket is out of debt, or sooner to tell the sender the round lives. */
  wakeMs: number;
}

/** One sender and whom it sends to. */
interface SenderSlot {
  sender: ReplicationSender;
  fragment: number;
  member: number;
}

export class WorkerReplication {
  private readonly senders = new Map<number, SenderSlot[]>();
  private readonly peersOf = new Map<number, number[]>();
  private readonly up: boolean[];
  /** Per member: it takes FragmentAbsent answers (told with its connection's state). */
  private readonly takesAbsent: boolean[] = [];
  /**
   * Per (member, fragment): the session of this node's sender that the peer answered FragmentAbsent
   * (it holds no copy). A round in that session cannot complete, so none is waited for.
   */
  private readonly absentSessions = new Map<string, number>();
  /** Per fragment not held here: the members this node told so (FragmentAbsent), reset when it is gained. */
  private readonly absentTold = new Map<number, Set<number>>();
  /** Rounds this node runs, and the serving side of peers' rounds, per (member, fragment). */
  private readonly rounds = new Map<string, ReconcileRound>();
  private readonly responders = new Map<string, ReconcileResponder>();
  /** Per (member, fragment): the continuity of the peer's latest session heard here. */
  private readonly continuities = new Map<string, number>();
  /** (member, fragment) whose verifying rounds wait for the peer's first session. */
  private readonly verifyPending = new Set<string>();
  /** (member, fragment) whose next round compares everything (no horizon). */
  private readonly wholeRounds = new Set<string>();
  /**
   * Per (member, fragment): the peer's continuity a complete round that compared everything started
   * under — this copy was verified against the peer in that run of its replication here. Until one
   * has, in the run heard now, each round compares everything (see the file header).
   */
  private readonly verifiedRuns = new Map<string, number>();
  /** The turns of this worker's routine rounds (ANTI_ENTROPY_ROUTINE_ROUNDS_MAX at once). */
  private readonly routineSlots = new RoundSlots(ANTI_ENTROPY_ROUTINE_ROUNDS_MAX);
  /** Bytes pulled per second (undefined: unlimited), and the fetches waiting on it, per (member, fragment). */
  private readonly pullTokens: TokenBucket | undefined;
  /** Keys per second routine rounds compare (undefined: unlimited), and the rounds that are routine. */
  private readonly compareTokens: TokenBucket | undefined;
  private readonly pacedRounds = new WeakSet<ReconcileRound>();
  /** (member, fragment) whose next round clients wait for (reconcileNow `urgent`), and such rounds. */
  private readonly urgentRounds = new Set<string>();
  private readonly urgentRunning = new WeakSet<ReconcileRound>();
  /** Steps waiting on a bucket, per (member, fragment): a round waits on one at a time. */
  private readonly heldSteps = new Map<string, HeldStep>();
  /** The batches of peers' sessions, per (member, fragment): applied in order, answered in order. */
  private readonly receivers = new Map<string, BatchReceiver>();
  private readonly answers: BatchAnswer[] = [];
  private readonly actions: SenderAction[] = [];
  private readonly keyspace: Keyspace;
  /** When the clock's timer fires; Infinity while none is set. */
  private timerAtMs = Number.POSITIVE_INFINITY;
  private readonly onTimer = (): void => this.tick();
  /** Peers told of this worker's restart. */
  private readonly resetSent = new Set<number>();
  /** Member node ids by index (slots are appended as members join: `addMembers`). */
  private readonly members: string[];
  private readonly ledger: RoundLedger;
  /** Told after a peer acknowledged a batch of a fragment (replica-waits.ts). */
  ackListener: ((fragment: number) => void) | undefined = undefined;

  constructor(
    private readonly cluster: ClusterInit,
    fragments: readonly number[],
    fragmentCount: number,
    /** This worker replaces one that died: each peer is told, once, to reopen its sessions. */
    private readonly restarted: boolean,
    private readonly host: ReplicationHost,
    private readonly tuning: SenderTuning = WORKER_SENDER_TUNING,
  ) {
    this.keyspace = new Keyspace(fragmentCount);
    this.members = [...cluster.members];
    this.up = cluster.members.map(() => false);
    this.ledger = new RoundLedger(
      (report) => host.roundEnded?.(report),
      (reqId, report) => host.roundAnswer?.(reqId, report),
      (report) => host.roundProgress?.(report),
    );
    const rate = cluster.pullBytesPerSec;
    this.pullTokens =
      rate === 0
        ? undefined
        : new TokenBucket(rate, Math.max(1, (rate * MOVE_RATE_BURST_MS) / 1000), host.clock.nowMs());
    const compareRate = cluster.compareKeysPerSec;
    this.compareTokens =
      compareRate === 0
        ? undefined
        : new TokenBucket(compareRate, Math.max(1, compareRate), host.clock.nowMs());
    for (const f of fragments) {
      // A fragment whose replicas leave this node out is not held here (the main thread releases it
      // at the start): a sender toward each replica would pull their copies.
      if (!cluster.replicas[f].includes(cluster.selfIndex)) continue;
      const peers = cluster.replicas[f].filter((m) => m !== cluster.selfIndex);
      if (peers.length === 0) continue;
      this.peersOf.set(f, peers);
      this.senders.set(
        f,
        peers.map((m) => this.newSlot(f, m)),
      );
    }
  }

  private newSlot(fragment: number, member: number): SenderSlot {
    const sender = new ReplicationSender(
      {
        ...this.tuning.config,
        fragment,
        peer: this.name(member),
        requiredAck: this.cluster.requiredAck as AckLevel,
        reconcileIntervalMs: this.cluster.antiEntropyIntervalMs,
      },
      this.tuning.ids,
      this.routineSlots,
    );
    return { fragment, member, sender };
  }

  /** Member slots from index `first` on are `nodeIds` (appended; a slot known already is kept). */
  addMembers(first: number, nodeIds: readonly string[]): void {
    for (let i = 0; i < nodeIds.length; i++) {
      const m = first + i;
      if (m < this.members.length) continue;
      assert(m === this.members.length, 'member slots are appended in order');
      this.members.push(nodeIds[i]);
      // Its connection's state may have come first.
      this.up[m] ??= false;
    }
  }

  /** Member slots the worker knows. */
  memberCount(): number {
    return this.members.length;
  }

  /** The ACK level batches ask for, unless a flush asks for more. */
  get requiredAck(): AckLevel {
    return this.cluster.requiredAck as AckLevel;
  }

  /**
   * Sets the replicas of a fragment the worker holds (member indices, this node's ignored): a
   * sender toward each other replica, kept if it exists, opened otherwise (a session, then a
   * round, when the peer is connected); a sender toward a member no longer listed is closed, its
   * backlog dropped. `gained`: the fragment was just opened here, so each peer is told to reopen
   * its session toward it (it ignored or refused what it sent while the fragment was not here).
   */
  setReplicas(fragment: number, replicas: readonly number[], gained: boolean): void {
    const self = this.cluster.selfIndex;
    const peers = replicas.filter((m, i) => m !== self && replicas.indexOf(m) === i);
    const before = this.senders.get(fragment) ?? [];
    for (const slot of before) {
      if (!peers.includes(slot.member)) this.closeSlot(slot, 'replica removed from the list');
    }
    const nowMs = this.host.clock.nowMs();
    const position = before.length > 0 ? before[0].sender.enqueuedThroughOps : 0;
    const slots = peers.map((m) => {
      const kept = before.find((slot) => slot.member === m);
      if (kept !== undefined) return kept;
      const slot = this.newSlot(fragment, m);
      // Every sender of a fragment counts the same positions (replica-waits.ts reads the first's).
      slot.sender.startAtPosition(position);
      if (this.up[m]) {
        // A copy gained here pulls in its verifying rounds, one source after another (the main
        // thread asks for them): a first round toward every source at once pulled the copy from each.
        slot.sender.step({ kind: 'connected', nowMs, firstRound: !gained });
        this.pump(slot);
      }
      return slot;
    });
    if (peers.length === 0) {
      this.peersOf.delete(fragment);
      this.senders.delete(fragment);
    } else {
      this.peersOf.set(fragment, peers);
      this.senders.set(fragment, slots);
    }
    if (gained) {
      // So are the members told this node held no copy, listed here or not yet: their sessions
      // toward it wait for no timeout.
      const told = this.absentTold.get(fragment);
      this.absentTold.delete(fragment);
      for (const m of new Set([...peers, ...(told ?? [])])) this.send(m, { sessionReset: { fragment } });
    }
    this.schedule(nowMs);
  }

  /** The fragment is no longer held here: its senders close, and peers' sessions toward it end. */
  removeFragment(fragment: number): void {
    for (const slot of this.senders.get(fragment) ?? []) this.closeSlot(slot, 'fragment dropped');
    this.peersOf.delete(fragment);
    this.senders.delete(fragment);
    const suffix = `/${fragment}`;
    for (const keyed of [
      this.responders,
      this.receivers,
      this.continuities,
      this.verifyPending,
      this.wholeRounds,
      this.verifiedRuns,
      this.absentSessions,
      this.urgentRounds,
    ])
      for (const key of [...keyed.keys()]) if (key.endsWith(suffix)) keyed.delete(key);
  }

  private closeSlot(slot: SenderSlot, reason: string): void {
    slot.sender.close();
    this.rounds.delete(roundKey(slot.member, slot.fragment));
    this.ledger.closed(slot.fragment, slot.member, `sender closed: ${reason}`);
  }

  /**
   * Starts a round of `fragment`'s sender toward `member` at once (after the batch in flight);
   * request `reqId` is answered when a round started from now on ends. `verify`: the round starts
   * once `member` replicates the fragment here, and compares everything (see the file header).
   * `urgent`: clients' requests wait for it, so its pages are read here and the peer is asked to
   * read its own in its worker too, not in the background pool (whose threads yield the cores).
   * False when there is no such sender.
   */
  reconcileNow(
    reqId: number,
    fragment: number,
    member: number,
    timeoutMs: number,
    verify = false,
    urgent = false,
  ): boolean {
    const slot = this.senderOf(fragment, member);
    if (slot === undefined) return false;
    const k = roundKey(member, fragment);
    if (urgent) this.urgentRounds.add(k);
    const replicatesHere = this.continuities.has(k);
    this.ledger.wait(reqId, fragment, member, timeoutMs, !verify || replicatesHere);
    if (verify && !replicatesHere && this.absentSessions.get(k) === slot.sender.currentSessionId) {
      this.ledger.refused(fragment, member, absentReason(this.name(member), fragment));
      return true;
    }
    if (verify && !replicatesHere) {
      this.verifyPending.add(k);
      return true;
    }
    this.startRoundNow(slot, verify);
    return true;
  }

  /** A round of the slot's sender, at once; `whole`: with no horizon. */
  private startRoundNow(slot: SenderSlot, whole: boolean): void {
    if (whole) this.wholeRounds.add(roundKey(slot.member, slot.fragment));
    const nowMs = this.host.clock.nowMs();
    slot.sender.step({ kind: 'reconcile-now', nowMs });
    this.pump(slot);
    this.schedule(nowMs);
  }

  /** The continuity of `fragment`'s sender toward `member`; undefined when there is no such sender. */
  continuityOf(fragment: number, member: number): number | undefined {
    return this.senderOf(fragment, member)?.sender.continuityId;
  }

  /**
   * True when `fragment`'s sender toward `member` has no write the peer has not acknowledged at
   * `level` (0: the level batches ask for); undefined when there is no such sender (any more).
   */
  drainedTo(fragment: number, member: number, level: AckLevel | 0 = 0): boolean | undefined {
    const sender = this.senderOf(fragment, member)?.sender;
    if (sender === undefined) return undefined;
    return level === 0 ? sender.drained() : sender.drainedAt(level);
  }

  /**
   * Something waits for `fragment`'s writes through position `throughOps` to reach `level` at its
   * peers (all, or `member` alone): its senders cut and send them now instead of after the batch
   * interval, asking for that level.
   */
  flush(fragment: number, throughOps: number, level: AckLevel, member = -1): void {
    const nowMs = this.host.clock.nowMs();
    for (const slot of this.senders.get(fragment) ?? []) {
      if (member !== -1 && slot.member !== member) continue;
      slot.sender.step({ kind: 'flush', throughOps, level, nowMs });
      this.pump(slot);
    }
    this.schedule(nowMs);
  }

  /** True when no sender has a write its peer has not acknowledged. */
  drained(): boolean {
    for (const senders of this.senders.values())
      for (const s of senders) if (!s.sender.drained()) return false;
    return true;
  }

  /** Writes of `fragment` handed to its senders so far (the same for each), or -1 without peers. */
  positionOf(fragment: number): number {
    return this.senders.get(fragment)?.[0].sender.enqueuedThroughOps ?? -1;
  }

  forEachSender(fragment: number, visit: (member: number, sender: ReplicationSender) => void): void {
    for (const s of this.senders.get(fragment) ?? []) visit(s.member, s.sender);
  }

  /** True when fragment `f` has other replicas (its actor keeps writes for the senders). */
  replicates(fragment: number): boolean {
    return this.peersOf.has(fragment);
  }

  close(): void {
    this.host.clock.clearTimer();
    this.ledger.close();
  }

  /** After the actors ran: hands every write they applied to the fragment's senders, then pumps. */
  afterRun(cores: Iterable<FragmentCore>): void {
    const nowMs = this.host.clock.nowMs();
    for (const core of cores) {
      // Taken even with no sender: a fragment's replicas change, so its actor always keeps the log.
      const log = core.takeReplicated();
      const senders = this.senders.get(core.fragment);
      if (senders === undefined) continue;
      for (const [key, record] of log) {
        for (const slot of senders) slot.sender.step({ kind: 'enqueue', key, record, nowMs });
      }
      if (log.length > 0) for (const slot of senders) this.pump(slot);
    }
    this.schedule(nowMs);
  }

  onPeerState(member: number, up: boolean, takesAbsent = false): void {
    this.takesAbsent[member] = up && takesAbsent;
    if (this.up[member] === up) return;
    this.up[member] = up;
    const nowMs = this.host.clock.nowMs();
    for (const [f, peers] of this.peersOf) {
      const i = peers.indexOf(member);
      if (i === -1) continue;
      const slot = this.senders.get(f)![i];
      if (!up) {
        this.rounds.delete(roundKey(member, f));
        this.ledger.ended(f, member, false, 'peer disconnected');
      }
      slot.sender.step({ kind: up ? 'connected' : 'disconnected', nowMs });
      this.pump(slot);
    }
    if (!up) {
      for (const key of this.responders.keys()) if (key.startsWith(`${member}/`)) this.responders.delete(key);
      for (const key of this.receivers.keys()) if (key.startsWith(`${member}/`)) this.receivers.delete(key);
      for (const key of this.absentSessions.keys())
        if (key.startsWith(`${member}/`)) this.absentSessions.delete(key);
      // It forgets what it was told too: its next session is answered afresh.
      for (const told of this.absentTold.values()) told.delete(member);
    } else if (this.restarted && !this.resetSent.has(member)) {
      this.resetSent.add(member);
      for (const [f, peers] of this.peersOf) {
        if (peers.includes(member)) this.send(member, { sessionReset: { fragment: f } });
      }
    }
    this.schedule(nowMs);
  }

  /** A frame from peer `member` about one of this worker's fragments. */
  onFrame(member: number, bytes: Uint8Array): void {
    // The messages whose size grows with the write rate and with a copy's bytes are read by hand
    // (src/core/replication-wire.ts).
    const field = peekEnvelope(bytes)?.field;
    if (field === EnvelopeField.ReplicateBatch) {
      const batch = readReplicateBatch(bytes);
      if (batch === undefined) return this.host.closePeer(member, 'malformed replication batch');
      const nowMs = this.host.clock.nowMs();
      this.applyBatch(member, batch, nowMs);
      return this.schedule(nowMs);
    }
    if (field === EnvelopeField.ReconcileData) {
      const page = readReconcileData(bytes);
      if (page === undefined) return this.host.closePeer(member, 'malformed anti-entropy data page');
      const nowMs = this.host.clock.nowMs();
      this.onData(member, page, nowMs);
      return this.schedule(nowMs);
    }
    if (field === EnvelopeField.ReconcileResponse) {
      const page = readReconcileResponse(bytes);
      if (page === undefined) return this.host.closePeer(member, 'malformed anti-entropy page');
      this.onSummaries(member, page);
      return this.schedule(this.host.clock.nowMs());
    }
    let envelope: Envelope;
    try {
      envelope = decodeEnvelope(bytes);
    } catch (err) {
      return this.host.closePeer(member, `malformed frame: ${(err as Error).message}`);
    }
    const nowMs = this.host.clock.nowMs();
    if (envelope.sessionStart !== undefined) {
      const { fragment, sessionId, continuity = 0 } = envelope.sessionStart;
      if (sessionId !== 0 && this.host.core(fragment) === undefined)
        this.sayAbsent(member, fragment, sessionId);
      else if (sessionId !== 0) {
        this.absentSessions.delete(roundKey(member, fragment));
        this.responderOf(member, fragment).onSessionStart(sessionId);
        this.onReplicatedHere(member, fragment, continuity);
      }
    } else if (envelope.sessionReset !== undefined) {
      // The peer's worker restarted and forgot our session, or it gained the fragment: open a new
      // one (replaying what it lacks).
      this.absentSessions.delete(roundKey(member, envelope.sessionReset.fragment));
      const slot = this.senderOf(envelope.sessionReset.fragment, member);
      if (slot !== undefined && this.up[member]) {
        this.rounds.delete(roundKey(member, slot.fragment));
        slot.sender.step({ kind: 'peer-reset', nowMs });
        this.pump(slot);
      }
    } else if (envelope.batchAck !== undefined) {
      const a = envelope.batchAck;
      const slot = this.senderOf(a.fragment, member);
      if (slot !== undefined && a.level >= AckLevel.Memory && a.level <= AckLevel.Stable) {
        const level = a.level as AckLevel;
        slot.sender.step({ kind: 'ack', sessionId: a.sessionId, batchSeq: a.batchSeq, level, nowMs });
        this.pump(slot);
        this.ackListener?.(a.fragment);
      }
    } else if (envelope.batchNack !== undefined) {
      const n = envelope.batchNack;
      const slot = this.senderOf(n.fragment, member);
      if (slot !== undefined) {
        this.host.logger.warn(
          { fragment: n.fragment, peer: this.name(member), error: n.error },
          'batch refused',
        );
        slot.sender.step({
          kind: 'nack',
          sessionId: n.sessionId,
          batchSeq: n.batchSeq,
          error: n.error,
          nowMs,
        });
        this.pump(slot);
      }
    } else if (envelope.fragmentAbsent !== undefined) {
      this.onAbsent(member, envelope.fragmentAbsent.fragment, envelope.fragmentAbsent.sessionId);
    } else if (envelope.reconcileRequest !== undefined) {
      void this.serveSummaries(member, envelope.reconcileRequest);
    } else if (envelope.reconcileFetch !== undefined) {
      this.serveFetch(member, envelope.reconcileFetch);
    }
    this.schedule(nowMs);
  }

  reports(): SenderReport[] {
    const nowMs = this.host.clock.nowMs();
    const out: SenderReport[] = [];
    for (const senders of this.senders.values()) for (const s of senders) out.push(s.sender.report(nowMs));
    return out;
  }

  /** Called by a batch's fence reply: acknowledge the level reached, or refuse, in seq order. */
  finishBatch(member: number, batch: BatchApply): void {
    const { fragment, receiver } = batch;
    // The peer went away, or the fragment, since: the receiver was dropped with its sessions.
    if (!this.up[member] || this.receivers.get(roundKey(member, fragment)) !== receiver) return;
    receiver.finished(batch.sessionId, batch.batchSeq, batch.failure);
    this.sendAnswers(member, fragment, receiver);
  }

  private sendAnswers(member: number, fragment: number, receiver: BatchReceiver): void {
    receiver.takeAnswers(this.answers);
    for (const { sessionId, batchSeq, level, error } of this.answers) {
      if (error !== '') this.send(member, { batchNack: { fragment, sessionId, batchSeq, error } });
      else this.send(member, { batchAck: { fragment, sessionId, batchSeq, level } });
    }
    this.answers.length = 0;
  }

  // --- sending ---------------------------------------------------------------------------------

  private pump(slot: SenderSlot): void {
    slot.sender.takeActions(this.actions);
    for (const action of this.actions) this.carryOut(slot, action);
    this.actions.length = 0;
  }

  private carryOut(slot: SenderSlot, action: SenderAction): void {
    const { fragment, member } = slot;
    switch (action.kind) {
      case 'session-start':
        // A new session abandons the round of the last one.
        this.ledger.ended(fragment, member, false, 'abandoned by a new session');
        this.send(member, {
          sessionStart: { fragment, sessionId: action.sessionId, continuity: action.continuity },
        });
        return;
      case 'batch': {
        const ops: ReplicatedOpView[] = [];
        for (const [key, record] of action.ops) ops.push({ key, record });
        if (!this.up[member]) return;
        const { sessionId, batchSeq, requiredAck: requiredAckLevel } = action;
        const maxWallMs = newestWallMs(ops);
        this.host.sendFrame(
          member,
          encodeReplicateBatch({ fragment, sessionId, batchSeq, requiredAckLevel, maxWallMs, ops }),
        );
        return;
      }
      case 'start-round': {
        const k = roundKey(member, fragment);
        const heard = this.continuities.get(k) ?? 0;
        const whole = this.wholeRounds.delete(k) || (heard !== 0 && this.verifiedRuns.get(k) !== heard);
        const horizonMs = whole ? 0 : this.host.clock.nowMs();
        const urgent = this.urgentRounds.delete(k);
        const pagesRead = !urgent && this.poolFor(horizonMs) !== undefined ? 'pool' : 'inline';
        const round = new ReconcileRound(
          action.sessionId,
          action.roundId,
          horizonMs,
          RECONCILE_PAGE_RECORDS_MAX,
          pagesRead,
        );
        this.rounds.set(k, round);
        if (action.routine) this.pacedRounds.add(round);
        if (urgent) this.urgentRunning.add(round);
        this.ledger.started(fragment, member, action.roundId, heard, whole);
        this.step(member, fragment, round, round.start());
        return;
      }
      case 'log':
        this.host.logger[action.level]({ fragment, peer: this.name(member) }, action.message);
        return;
    }
  }

  private send(member: number, envelope: Envelope): void {
    if (member < 0 || !this.up[member]) return;
    this.host.sendFrame(member, encodeEnvelope(envelope));
  }

  private senderOf(fragment: number, member: number): SenderSlot | undefined {
    const peers = this.peersOf.get(fragment);
    const i = peers?.indexOf(member) ?? -1;
    return i === -1 ? undefined : this.senders.get(fragment)![i];
  }

  private name(member: number): string {
    return this.members[member] ?? `#${member}`;
  }

  /** One timer for the earliest sender deadline. */
  private schedule(nowMs: number): void {
    let at = Number.POSITIVE_INFINITY;
    for (const senders of this.senders.values()) {
      for (const s of senders) at = Math.min(at, s.sender.nextWakeMs(nowMs));
    }
    for (const held of this.heldSteps.values()) at = Math.min(at, held.wakeMs);
    if (at === Number.POSITIVE_INFINITY || at >= this.timerAtMs) return;
    this.timerAtMs = at;
    this.host.clock.setTimer(at, this.onTimer);
  }

  private tick(): void {
    this.timerAtMs = Number.POSITIVE_INFINITY;
    const nowMs = this.host.clock.nowMs();
    this.releaseHeld(nowMs);
    for (const senders of this.senders.values()) {
      for (const s of senders) {
        s.sender.step({ kind: 'tick', nowMs });
        this.pump(s);
      }
    }
    this.schedule(nowMs);
  }

  // --- receiving replicated batches ---------------------------------------------------------------

  private applyBatch(member: number, b: ReplicateBatchView, nowMs: number): void {
    const key = roundKey(member, b.fragment);
    // A batch of a session that is not the current one is stale: ignored, not refused (spec A6).
    if (this.responders.get(key)?.sessionId !== b.sessionId || b.sessionId === 0) return;
    const core = this.host.core(b.fragment);
    const level = b.requiredAckLevel as AckLevel;
    const refuse = (error: string) =>
      this.send(member, {
        batchNack: { fragment: b.fragment, sessionId: b.sessionId, batchSeq: b.batchSeq, error },
      });
    if (core === undefined) return refuse(`receiver does not host fragment ${b.fragment}`);
    const receiver = this.receiverOf(key);
    const verdict = receiver.admit(b.sessionId, b.batchSeq, level);
    if (verdict.kind === 'ignore') return;
    if (verdict.kind === 'refuse') {
      this.host.logger.warn(
        { peer: this.name(member), fragment: b.fragment, reason: verdict.error },
        'batch refused',
      );
      return refuse(verdict.error);
    }
    const invalid =
      level >= AckLevel.Memory && level <= AckLevel.Stable
        ? checkRecords(b.ops, this.recordCheck(b.fragment, nowMs))
        : 'replication batch omitted a valid ACK requirement';
    if (invalid !== undefined) {
      this.host.logger.warn(
        { peer: this.name(member), fragment: b.fragment, reason: invalid },
        'batch refused',
      );
      receiver.finished(b.sessionId, b.batchSeq, invalid);
      return this.sendAnswers(member, b.fragment, receiver);
    }
    const batch = new BatchApply(this, member, receiver, b.fragment, b.sessionId, b.batchSeq);
    for (const op of b.ops) this.submitReplicated(core, op, batch);
    const fence = new FragmentOp(OpKind.Fence, 0, Priority.Default, ACK_DURABILITY[level], EMPTY, EMPTY);
    fence.durabilityOnly = true;
    fence.sink = batch;
    this.host.submit(core, fence);
  }

  private receiverOf(key: string): BatchReceiver {
    let receiver = this.receivers.get(key);
    if (receiver === undefined) {
      receiver = new BatchReceiver(this.tuning.config.windowBatches);
      this.receivers.set(key, receiver);
    }
    return receiver;
  }

  private recordCheck(fragment: number, nowMs: number): RecordCheck {
    return {
      fragment,
      fragmentOf: (key) => this.keyspace.fragmentOf(key),
      nowMs,
      maxClockSkewMs: this.cluster.maxClockSkewMs,
    };
  }

  /**
   * Merges a record from a peer through the fragment's actor. Key and record stay views into the
   * frame, which this worker copied out of its ring and keeps for as long as the op needs it.
   */
  private submitReplicated(core: FragmentCore, op: ReplicatedOpView, sink: ReplySink): void {
    const write = new FragmentOp(
      OpKind.Write,
      0,
      Priority.Default,
      Durability.Memory,
      asBuffer(op.key),
      asBuffer(op.record),
    );
    write.replicated = true;
    write.sink = sink;
    this.host.submit(core, write);
  }

  // --- anti-entropy: the requesting side ----------------------------------------------------------

  /** `member` replicates `fragment` here, in run `continuity` (0: it did not say): verifying rounds may start. */
  private onReplicatedHere(member: number, fragment: number, continuity: number): void {
    const k = roundKey(member, fragment);
    this.continuities.set(k, continuity);
    if (!this.verifyPending.delete(k)) return;
    const slot = this.senderOf(fragment, member);
    if (slot === undefined) return;
    this.ledger.arm(fragment, member);
    this.startRoundNow(slot, true);
  }

  /**
   * `member` holds no copy of `fragment` for this node's session `sessionId`: the round running in
   * it ends now, failed (its sender starts the next when it is due), and so do the verifying rounds
   * waiting for the peer to replicate here, which it never will.
   */
  private onAbsent(member: number, fragment: number, sessionId: number): void {
    const slot = this.senderOf(fragment, member);
    if (slot === undefined || sessionId === 0 || slot.sender.currentSessionId !== sessionId) return;
    const k = roundKey(member, fragment);
    this.absentSessions.set(k, sessionId);
    const reason = absentReason(this.name(member), fragment);
    if (this.verifyPending.delete(k)) this.ledger.refused(fragment, member, reason);
    const round = this.rounds.get(k);
    if (round === undefined || round.sessionId !== sessionId) return;
    this.rounds.delete(k);
    this.ledger.ended(fragment, member, false, reason);
    const nowMs = this.host.clock.nowMs();
    slot.sender.step({ kind: 'round-refused', sessionId, roundId: round.roundId, reason, nowMs });
    this.pump(slot);
    this.schedule(nowMs);
  }

  private responderOf(member: number, fragment: number): ReconcileResponder {
    const key = roundKey(member, fragment);
    let responder = this.responders.get(key);
    if (responder === undefined) {
      responder = new ReconcileResponder();
      this.responders.set(key, responder);
    }
    return responder;
  }

  /** Carries out one step of a round this node runs. */
  private step(member: number, fragment: number, round: ReconcileRound, step: RoundStep): void {
    const { sessionId, roundId } = round;
    const nowMs = this.host.clock.nowMs();
    switch (step.kind) {
      case 'request-page': {
        // A page answered is progress, whether or not it differed: replicas that agree page
        // through a large fragment for longer than the round timeout without fetching a key.
        this.progress(member, fragment, round, 'round-progress', nowMs);
        // Its answer may carry records, a copy's bytes: it waits out --move-rate's debt as a fetch does.
        if (this.pullTokens !== undefined && this.hold(member, fragment, round, step, this.pullTokens, nowMs))
          return;
        const bucket = this.pacedRounds.has(round) ? this.compareTokens : undefined;
        if (bucket !== undefined) {
          if (this.hold(member, fragment, round, step, bucket, nowMs)) return;
          bucket.spend(step.keys, nowMs);
        }
        void this.requestPage(member, fragment, round, step);
        return;
      }
      case 'fetch':
        this.progress(member, fragment, round, 'round-progress', nowMs);
        if (this.pullTokens !== undefined && this.hold(member, fragment, round, step, this.pullTokens, nowMs))
          return;
        this.send(member, {
          reconcileFetch: { fragment, sessionId, roundId, chunkSeq: step.chunkSeq, keys: step.keys },
        });
        return;
      case 'merge': {
        this.progress(member, fragment, round, 'round-progress', nowMs);
        const core = this.host.core(fragment)!;
        let bytes = 0;
        for (const entry of step.entries) {
          bytes += entry.key.length + entry.record.length;
          this.submitReplicated(core, entry, ignoreReplies);
        }
        this.pullTokens?.spend(bytes, nowMs);
        this.ledger.pulled(fragment, member, step.entries.length, bytes);
        if (step.next !== undefined) this.step(member, fragment, round, step.next);
        return;
      }
      case 'done': {
        const k = roundKey(member, fragment);
        this.rounds.delete(k);
        const report = this.ledger.ended(fragment, member, true, '');
        if (report?.whole === true && report.continuity !== 0) this.verifiedRuns.set(k, report.continuity);
        this.progress(member, fragment, round, 'round-done', nowMs);
        return;
      }
      case 'violation':
        this.ledger.ended(fragment, member, false, step.reason);
        this.host.closePeer(member, step.reason);
        return;
      case 'ignore':
        return;
    }
  }

  /** Holds a round's step while `bucket` is in debt: true when held (`releaseHeld` carries it out). */
  private hold(
    member: number,
    fragment: number,
    round: ReconcileRound,
    step: HeldStep['step'],
    bucket: TokenBucket,
    nowMs: number,
  ): boolean {
    const waitMs = bucket.waitMs(nowMs);
    if (waitMs === 0) return false;
    const wakeMs = this.heldWakeMs(nowMs, waitMs);
    this.heldSteps.set(roundKey(member, fragment), { member, fragment, round, step, bucket, wakeMs });
    return true;
  }

  /** Carries out the held steps their buckets allow now; a round still waiting tells its sender it lives. */
  private releaseHeld(nowMs: number): void {
    for (const [key, held] of this.heldSteps) {
      if (held.wakeMs > nowMs) continue;
      // The round ended or was replaced while its step waited.
      if (this.rounds.get(key) !== held.round) {
        this.heldSteps.delete(key);
        continue;
      }
      const waitMs = held.bucket.waitMs(nowMs);
      if (waitMs > 0) {
        this.progress(held.member, held.fragment, held.round, 'round-progress', nowMs);
        held.wakeMs = this.heldWakeMs(nowMs, waitMs);
        continue;
      }
      this.heldSteps.delete(key);
      this.step(held.member, held.fragment, held.round, held.step);
    }
  }

  /**
   * When a held step is looked at again: once its bucket is out of debt, or within half the
   * sender's round timeout, since a throttled round is not a stuck one.
   */
  private heldWakeMs(nowMs: number, waitMs: number): number {
    return nowMs + Math.min(waitMs, this.tuning.config.reconcileTimeoutMs / 2);
  }

  private progress(
    member: number,
    fragment: number,
    round: ReconcileRound,
    kind: 'round-progress' | 'round-done',
    nowMs: number,
  ): void {
    const slot = this.senderOf(fragment, member);
    if (slot === undefined) return;
    slot.sender.step({ kind, sessionId: round.sessionId, roundId: round.roundId, nowMs });
    if (kind !== 'round-done') return;
    this.pump(slot);
    // The round's turn is free: a sender waiting for it starts at the next tick.
    this.schedule(nowMs);
  }

  private onSummaries(member: number, page: ReconcileResponseView): void {
    const round = this.rounds.get(roundKey(member, page.fragment));
    const core = this.host.core(page.fragment);
    if (round === undefined || core === undefined) return;
    const step = round.onSummaries(page, core, this.recordCheck(page.fragment, this.host.clock.nowMs()));
    if (round.sourceSize !== undefined) this.ledger.sized(page.fragment, member, round.sourceSize);
    this.step(member, page.fragment, round, step);
  }

  private onData(member: number, page: ReconcileDataView, nowMs: number): void {
    const round = this.rounds.get(roundKey(member, page.fragment));
    if (round === undefined) return;
    this.step(member, page.fragment, round, round.onData(page, this.recordCheck(page.fragment, nowMs)));
  }

  /** Describes this node's next page of keys as range digests and asks the peer for its differences. */
  private async requestPage(
    member: number,
    fragment: number,
    round: ReconcileRound,
    { pageSeq, afterKey, keys }: RoundStep & { kind: 'request-page' },
  ): Promise<void> {
    const { sessionId, roundId, horizonMs, recordsMax } = round;
    const urgent = this.urgentRunning.has(round);
    let described: { ranges: RangeDigest[]; openEnd: boolean };
    try {
      const from = pageSeq === 0 ? undefined : afterKey;
      described = await this.describeOwnPage(fragment, from, keys, horizonMs, urgent);
    } catch (err) {
      this.host.logger.warn({ fragment, err: (err as Error).message }, 'anti-entropy page failed');
      return;
    }
    if (this.rounds.get(roundKey(member, fragment)) !== round) return;
    const { ranges, openEnd } = described;
    this.send(member, {
      reconcileRequest: {
        fragment,
        sessionId,
        roundId,
        pageSeq,
        afterKey,
        ranges,
        openEnd,
        horizonMs,
        recordsMax,
        rangeKeys: rangeKeysOf(keys),
        urgent,
      },
    });
  }

  /**
   * This node's next `keys` keys of `fragment` as range digests, worked out where `inPoolOr` says
   * (here for an urgent round).
   */
  private describeOwnPage(
    fragment: number,
    afterKey: Uint8Array | undefined,
    keys: number,
    horizonMs: number,
    urgent: boolean,
  ): Promise<{ ranges: RangeDigest[]; openEnd: boolean }> {
    const q = nextPage(keys);
    return this.inPoolOr(
      fragment,
      urgent ? undefined : this.poolFor(horizonMs),
      (pool) => pool.describe(fragment, afterKey, q, horizonMs),
      () => describeSpan(this.storeReader(fragment), afterKey, q, horizonMs),
    );
  }

  /** This node's answer to a peer's page, worked out where `inPoolOr` says (here when it is urgent). */
  private answerOf(
    fragment: number,
    afterKey: Uint8Array | undefined,
    q: Envelope['reconcileRequest'] & object,
  ): Promise<PageAnswer> {
    const span = spanQueryOf(q);
    const work = {
      kind: 'answer' as const,
      horizonMs: q.horizonMs,
      recordsMax: recordsTakenBy(q),
      ranges: q.ranges,
    };
    return this.inPoolOr(
      fragment,
      q.urgent ? undefined : this.poolFor(q.horizonMs),
      (pool) => pool.answer(fragment, afterKey, span, work),
      () => answerSpan(this.storeReader(fragment), afterKey, span, work),
    );
  }

  /**
   * A page's work: in the background pool when the store allows a second reader (lmdb), so the
   * fragment's actor keeps serving; here otherwise (`pool` undefined: no pool, a horizon the pool's
   * request cannot carry, or an urgent round), or when the pool cannot take it.
   */
  private inPoolOr<T>(
    fragment: number,
    pool: SpanPool | undefined,
    pooled: (pool: SpanPool) => Promise<T>,
    here: () => Promise<T>,
  ): Promise<T> {
    if (pool === undefined) return here();
    return pooled(pool).catch((err: Error) => {
      this.host.logger.debug({ fragment, err: err.message }, 'anti-entropy page read in the worker');
      return here();
    });
  }

  /** The pool that works out pages compared as of `horizonMs`; undefined where they are read here. */
  private poolFor(horizonMs: number): SpanPool | undefined {
    return isPoolHorizon(horizonMs) ? this.host.pool : undefined;
  }

  /** Reads this node's keys and versions of `fragment` here. */
  private storeReader(fragment: number): PageReader {
    const store = this.host.store;
    return (start, limit) => store.page(fragment, start, undefined, limit, true);
  }

  /** Answers a page: digests this node's keys over the requester's ranges, lists those that differ. */
  private async serveSummaries(member: number, q: Envelope['reconcileRequest'] & object): Promise<void> {
    if (this.host.core(q.fragment) === undefined) return this.sayAbsent(member, q.fragment, q.sessionId);
    const responder = this.responderOf(member, q.fragment);
    const step = responder.onRequest(q);
    if (step.kind === 'violation') return this.host.closePeer(member, step.reason);
    if (step.kind !== 'read-page') return;
    let answer: PageAnswer;
    let sourceSize: FragmentSize | undefined;
    try {
      // A round with no horizon verifies a copy: what this node applied before it began replicating
      // there (before the round's first page came) must be in the round, so its first page waits
      // until those writes are committed — the store's pages hold them then.
      if (q.pageSeq === 0 && q.horizonMs === 0) {
        const core = this.host.core(q.fragment);
        if (core === undefined) return this.sayAbsent(member, q.fragment, q.sessionId);
        await fenced((fence) => this.host.submit(core, fence), Priority.Default, Durability.Store);
      }
      // The size as of the round's start, on its first page: what the round compares is as of then.
      [answer, sourceSize] = await Promise.all([
        this.answerOf(q.fragment, step.afterKey, q),
        q.pageSeq === 0 ? this.fragmentSize(q.fragment) : undefined,
      ]);
    } catch (err) {
      this.host.logger.warn(
        { fragment: q.fragment, err: (err as Error).message },
        'anti-entropy page failed',
      );
      return;
    }
    // The peer may have gone, or opened another session, while the store read.
    if (this.responders.get(roundKey(member, q.fragment)) !== responder) return;
    const core = this.host.core(q.fragment);
    if (core === undefined) return this.sayAbsent(member, q.fragment, q.sessionId);
    const page = responder.pageAnswered(q, answer, core);
    if (page !== undefined && this.up[member]) {
      const maxWallMs = newestWallMs(page.records);
      this.host.sendFrame(
        member,
        encodeReconcileResponse({ fragment: q.fragment, ...page, sourceSize, maxWallMs }),
      );
    }
  }

  /** This node's copy of a fragment, for a peer pulling it; undefined when the store cannot say. */
  private async fragmentSize(fragment: number): Promise<FragmentSize | undefined> {
    try {
      return await this.host.store.fragmentSize(fragment);
    } catch (err) {
      this.host.logger.debug({ fragment, err: (err as Error).message }, 'fragment size unknown');
      return undefined;
    }
  }

  /** Tells a peer that takes it that this node holds no copy of `fragment` for its session `sessionId`. */
  private sayAbsent(member: number, fragment: number, sessionId: number): void {
    if (this.takesAbsent[member] !== true) return;
    let told = this.absentTold.get(fragment);
    if (told === undefined) {
      told = new Set();
      this.absentTold.set(fragment, told);
    }
    told.add(member);
    this.send(member, { fragmentAbsent: { fragment, sessionId } });
  }

  /** The records of advertised keys, freshest first (pending writes included), in byte-bounded pages. */
  private serveFetch(member: number, f: Envelope['reconcileFetch'] & object): void {
    const core = this.host.core(f.fragment);
    if (core === undefined) return this.sayAbsent(member, f.fragment, f.sessionId);
    const pages = this.responderOf(member, f.fragment).onFetch(f, core);
    if (!Array.isArray(pages)) {
      if (pages.kind === 'violation') this.host.closePeer(member, pages.reason);
      return;
    }
    if (!this.up[member]) return;
    for (const [pageSeq, page] of pages.entries()) {
      const maxWallMs = newestWallMs(page.entries);
      this.host.sendFrame(member, encodeReconcileData({ fragment: f.fragment, pageSeq, ...page, maxWallMs }));
    }
  }
}

function absentReason(peer: string, fragment: number): string {
  return `${peer} holds no copy of fragment ${fragment}`;
}

function roundKey(member: number, fragment: number): string {
  return `${member}/${fragment}`;
}
