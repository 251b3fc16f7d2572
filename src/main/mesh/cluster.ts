// The node's place in the cluster, on the main thread: the mesh, membership and failure detection
// (membership-driver.ts, over datagrams on the peer port), a link per peer for forwarded operations,
// the placement coordinator and its assignment table (coordinator-driver.ts), and the routing of
// peer frames. Fragments are routed by the table (until one is accepted, by the static placement the
// node started with, coordinator.ts firstPlacement, which the first table records); the first serving
// replica of a fragment — the first in its list that is this node or a peer that is connected and
// not unreachable to membership — applies its writes and serves its reads. A peer that hangs keeps
// its connection open; membership's probes find it unreachable within seconds, and routing moves
// to the next replica at once, retrying what was forwarded to it. Frames about a fragment's replication and anti-entropy go
// to the worker that owns the fragment as bytes; only their routing fields are read here.
// Admin requests between nodes (changes forwarded to the coordinator, metrics samples) go through
// admin-exchange.ts.

import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import type { Logger } from 'pino';
import type { AssignmentTable, CoordinatorIdentity, ReplicaMove } from '../../core/assignment-table.js';
import { copyRange } from '../../core/bytes.js';
import {
  type MemberView as CoordinatorMemberView,
  configuredHolders,
  onlyCopyHolders,
  servingSuccessionSource,
  servingTransfers,
  tooFewEligible,
} from '../../core/coordinator.js';
import type { EpochPromise } from '../../core/coordinator-machine.js';
import { networkError, type TesseraError, unavailable } from '../../core/errors.js';
import { EventLog, type LoggedEvent } from '../../core/event-log.js';
import { type ForwardView, forwardStep } from '../../core/forwarding.js';
import {
  CAPABILITY_CLIENT_PORTS,
  CAPABILITY_FRAGMENT_ABSENT,
  CAPABILITY_LOST_COPIES,
} from '../../core/handshake.js';
import { leaveHandedOver, leaveRefusal, resumesLeave } from '../../core/leave.js';
import {
  ABSORB_TIMEOUT_MS,
  CLUSTER_EVENTS_KEPT,
  COORDINATOR_DIGEST_INTERVAL_MS,
  COORDINATOR_REPORT_RETRY_MS,
  FAILOVER_CATCH_UP_MS_MAX,
  FORWARD_DISAGREEMENT_WAIT_MS,
  FRAGMENT_COUNT_MAX,
  HANDOVER_VERIFY_WAIT_MS,
  MEMBERSHIP_DATAGRAM_BYTES_MAX,
  MEMBERSHIP_MEMBERS_MAX,
  MOVES_RECENT_MAX,
  PLACEMENT_PLAN_INTERVAL_MS,
  PLACEMENT_READY_RESEND_MS,
  PLACEMENT_RETRY_MS,
  PLACEMENT_SERVING_TRANSFERS_PER_PLAN_MAX,
  PLACEMENT_STEP_TIMEOUT_MS,
  ringRecordBytesMax,
  WORKER_COUNT_MAX,
} from '../../core/limits.js';
import type { MembershipCounters } from '../../core/membership.js';
import {
  isValidNodeId,
  MEMBERSHIP_CONFIG_DEFAULTS,
  type MemberEventRecord,
  type MemberRecord,
  type MemberState,
  type MemberView,
  type OperatorStatus,
  startsJoining,
} from '../../core/membership-types.js';
import { Durability, Priority } from '../../core/ops.js';
import {
  EnvelopeField,
  type EnvelopePeek,
  forEachField,
  isFragmentMessage,
  isMembershipMessage,
  ListFrameBuilder,
  maxWallMsField,
  peekFragment,
} from '../../core/peer-frame.js';
import { AckLevel } from '../../core/replication-sender.js';
import type { AdminAnswer } from '../../threads/admin-wire.js';
import { SystemClock } from '../../threads/driver-clock.js';
import { datagramKey } from '../../threads/membership-datagram.js';
import type { ClientEndpoint, ClusterInit } from '../../threads/messages.js';
import type { RoundReport } from '../../threads/op-codec.js';
import {
  checkRequest,
  encodeErrorResult,
  requestFragment,
  requestId,
  setResultId,
} from '../../threads/op-codec.js';
import { type ClientPortsMessage, decodeEnvelope, encodeEnvelope } from '../../threads/peer-messages.js';
import { type ClusterConfig, formatPeerAddress, parsePeerAddress } from '../cluster-config.js';
import type { ClusterRouter, Dispatcher, OpLink } from '../dispatcher.js';
import { bindDatagrams } from '../listen.js';
import { leftToPull } from '../pulled-counts.js';
import type { ResultHandler, WorkerLink } from '../worker-link.js';
import { AdminExchange } from './admin-exchange.js';
import { CoordinatorDriver } from './coordinator-driver.js';
import {
  type CatchUpCounters,
  FailoverCatchUp,
  type HandoverOutcome,
  type RoundEnd,
} from './failover-catch-up.js';
import { MembershipDriver, type MembershipTraffic } from './membership-driver.js';
import { Mesh } from './mesh.js';
import { GENERATION_FIELD, HOPS_FIELD, PeerLink, type PeerLinkHost, RESULTS_FIELD } from './peer-link.js';
import { PlacementDriver } from './placement-driver.js';
import { PubSubRelay } from './pubsub-relay.js';

/** A forwarded operation this node serves (or relays): whom to answer, under which request id. */
interface Origin {
  member: number;
  reqId: number;
}

const NO_BYTES = Buffer.alloc(0);

/** A forwarded operation on its way through this node; it is its own origin token. */
interface ForwardedOp extends Origin {
  fragment: number;
  /** The encoded request: in the frame it came in, until `owned` (a copy this node keeps). */
  op: Buffer;
  owned: boolean;
  hops: number;
  /** The generation the relaying sender routed it by (0: unknown, a first hop). */
  generation: number;
  /** Until when it may wait for this node's routing to change (0: it has not waited). */
  untilMs: number;
}

/** Fails every operation: no replica of the fragment is reachable. */
class UnreachableLink implements OpLink {
  readonly buffer = Buffer.alloc(0);
  readonly reqId = 0;
  constructor(private readonly error: TesseraError) {}
  canAccept(): boolean {
    return false;
  }
  refusal(): TesseraError {
    return this.error;
  }
  begin(): number {
    throw new Error('begin on an unreachable link');
  }
  end(): void {}
}

/**
 * The serving replicas a verifying round of a copy completed against, each with the continuity of
 * its replication here the round started under (a handover from one of them with that continuity
 * unchanged completes the copy: failover-catch-up.ts), and the rounds still running, by member.
 */
interface CopyVerification {
  under: Map<number, number>;
  running: Map<number, Promise<void>>;
}

/** Resolves once `work` settles or `ms` passes, whichever is first (its timer keeps no process alive). */
function settledWithin(work: Promise<unknown>, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    timer.unref();
    const done = (): void => {
      clearTimeout(timer);
      resolve();
    };
    work.then(done, done);
  });
}

/** How a member this node has no link to (not in its member list) stands in membership's view. */
function viewHealth(view: MemberView): MemberHealth {
  if (view.state === 'Down' || view.state === 'Removed') return 'fail';
  return view.unreachable ? 'pfail' : 'ok';
}

/**
 * What a cluster event (`GET /cluster/events`) carries: a member event (its type is the member
 * event kind) or a change of coordinator (type `CoordinatorChanged`).
 */
export type ClusterEventData =
  | {
      member: MemberView;
      /** The member event's own sequence number in this node's life (datum's). */
      memberSequence: number;
    }
  | {
      /** The coordinator this node names now; null when none is Up and reachable. */
      coordinator: CoordinatorIdentity | null;
      /** The table epoch it acts in (the one it opened, once it took over). */
      epoch: number;
    }
  /** This node started or stopped serving a fragment (`FragmentServing`, `FragmentNotServing`). */
  | { fragment: number; node: string }
  /** This node was asked to leave (`LeaveRequested`), or has left (`Left`). */
  | { node: string }
  /** A replica move in the table (`MoveStarted`, `MoveFinished`, `MoveCancelled`). */
  | { fragment: number; source: string | null; target: string; reason: string; generation: number }
  /** Serving handed to another replica with no move (`ServingChanged`): `rebalance` or `move` (a pin). */
  | { fragment: number; from: string; to: string; reason: 'rebalance' | 'move'; generation: number };

/** `GET /cluster/moves`: replica moves in flight and recent, and this node's part in them. */
export interface MovesReport {
  tableEpoch: number;
  /** Fragments short of replicas (Cluster.underReplicated). */
  underReplicated: number;
  /**
   * Why the planner cannot make some change now, as this node's view has it: too few eligible
   * members to hold a fragment's replicas (a leave or a re-replication that waits for a member to
   * join or come back). Empty when nothing blocks it.
   */
  blocked: string[];
  /** Moves in the table now: the target copies, the source leaves once the target is verified. */
  inFlight: Array<{
    fragment: number;
    source: string | null;
    target: string;
    reason: string;
    generation: number;
    since: string | null;
  }>;
  /** This node's fragments that are not simply served: copying, handing over. */
  here: Array<{
    fragment: number;
    state: string;
    generation: number;
    step: string | null;
    since: string;
    waiting: string;
    /** Bootstrapping: keys and bytes anti-entropy pulled into the copy since this node opened it; else null. */
    keysDone: number | null;
    bytesDone: number | null;
    /**
     * Bootstrapping: an estimate of what is left to pull (pulled-counts.ts `leftToPull`): the keys
     * the largest source said it holds less `keysDone`, and those keys at the average size of the
     * keys pulled so far (before any, the source's estimate of its bytes). Null until a source said
     * its size, and when not Bootstrapping.
     */
    keysLeft: number | null;
    bytesLeft: number | null;
  }>;
  /** `--move-rate`: bytes per second this node's anti-entropy rounds pull at most; 0: unlimited. */
  moveRateBytesPerSec: number;
  /**
   * Pairs of a fragment the table lists this node for and another replica it lists, whose copy
   * here no round that compared everything has verified against that replica's since this node
   * opened it: a handoff from that replica has this node pull the copy whole. Anti-entropy verifies
   * each pair once per run of the replica's replication here.
   */
  unverified: number;
  /** The latest replica-list changes, newest first. */
  recent: Array<{
    fragment: number;
    generation: number;
    from: string[];
    to: string[];
    reason: string;
    at: string;
  }>;
  coordinator: Record<string, number>;
  placement: Record<string, number>;
  /** Catch-ups of fragments this node took over by a failover (failover-catch-up.ts): how many, how long they held requests. */
  failover: CatchUpCounters & { inProgress: number };
}

/** What membership starts from: the data directory's cluster state, read at this start. */
export interface MembershipStart {
  /**
   * Why this run holds no data an earlier run of this node id may have held (the memory store; a new
   * data directory); undefined when it keeps what its earlier runs stored.
   */
  withoutData: string | undefined;
  /** The incarnation the last run used (undefined on a first start); this start uses one more. */
  restoredIncarnation: number | undefined;
  /** The members the last run knew (self included), from the data directory. */
  members: readonly MemberRecord[];
  /** Saves this node's incarnation and member list (the data directory's cluster state; undefined: kept nowhere). */
  persist(incarnation: number, members: MemberRecord[]): Promise<void> | undefined;
  /** The assignment table this node accepted last, and the epoch it promised last, from the data directory. */
  table: AssignmentTable | undefined;
  promise: EpochPromise | undefined;
  /** Saves the assignment table and the promise (undefined: kept nowhere). */
  persistTable(table: AssignmentTable, promise: EpochPromise | undefined): Promise<void> | undefined;
}

/** What a node starting among running peers still lacks before it serves (`readyAmongPeers`). */
export interface StartMissing {
  /** Members its view holds reachable that it is not connected to yet. */
  peers: string[];
  /** It joins and is not admitted yet. */
  admission: boolean;
  /** It joins and its table does not list every fragment yet. */
  table: boolean;
}

function startIncomplete(missing: StartMissing): boolean {
  return missing.peers.length > 0 || missing.admission || missing.table;
}

/** How a member stands in this node's view: reachable, unreachable to membership (`pfail`), Down. */
export type MemberHealth = 'ok' | 'pfail' | 'fail';

/** A member as the admin face shows it: membership's view, the peer connection, who reports it. */
export interface MemberReport extends MemberView {
  /** This node. */
  self: boolean;
  /** Connected over the peer mesh (TCP); true for this node. */
  connected: boolean;
  health: MemberHealth;
  /** The members that report it unreachable at its current incarnation. */
  reporters: string[];
}

/** Membership on this node: every member (this one included, sorted by id) and the detector's figures. */
export interface MembershipReport {
  members: MemberReport[];
  /** Lifeguard's local-health multiplier on probe intervals and timeouts (1: healthy). */
  localHealth: number;
  traffic: MembershipTraffic;
  counters: MembershipCounters;
}

export class Cluster implements ClusterRouter, PeerLinkHost {
  readonly mesh: Mesh;
  /** Pub/Sub messages to and from the peers. */
  readonly pubsub: PubSubRelay;
  /** Admin requests to and from the peers: changes forwarded to the coordinator, metrics samples. */
  readonly admin: AdminExchange;
  private readonly peerLinks: (PeerLink | undefined)[];
  private readonly unreachable: UnreachableLink[] = [];
  private readonly answerOrigin: ResultHandler<Origin>;
  private readonly frameBytesMax: number;
  private readonly fragmentOf = (key: Uint8Array): number => this.dispatcher.keyspace.fragmentOf(key);
  /** Results of forwarded operations, one frame per origin per event-loop turn. */
  private readonly results: ListFrameBuilder[];
  private resultsFlushScheduled = false;
  private readonly flushResultsTask = (): void => this.flushResults();
  /** Membership and failure detection; set by start. */
  private membershipDriver: MembershipDriver | undefined;
  /** The placement coordinator and its table; set by start. */
  private coordinatorDriver: CoordinatorDriver | undefined;
  /** What this node does about each fragment the table gives it or takes away; set by start. */
  private placementDriver: PlacementDriver | undefined;
  /** Per fragment, 1 while this node serves it itself (the placement driver says; at first, the placement it started with). */
  private readonly localServing: Uint8Array;
  /** Fragments this node took over by a failover, held until it caught up from the other replicas. */
  readonly failover: FailoverCatchUp;
  /** Per fragment, the move in flight in the table this node routes by (for the move events). */
  private readonly movesSeen: (ReplicaMove | null)[];
  /** Per fragment, the first replica of its settled list as the table last had it (none while moving). */
  private readonly servingSeen: (string | undefined)[];
  /** Who waits for this node to be ready among its peers (`readyAmongPeers`): woken by any change. */
  private readonly startWaiters = new Set<() => void>();
  /**
   * What a start waits for before the node serves: nothing (the first start of a cluster's initial
   * members, which start one by one), the peers' connections (a restart), or also the admission and
   * the cluster's table (a first start with --join).
   */
  private startWait: 'none' | 'peers' | 'join' = 'none';
  /** Set once this node asked to leave: it exits membership when it holds nothing more. */
  private leaving = false;
  private resolveLeft: () => void = () => {};
  /** Settles once this node has left the cluster (Removed after a graceful leave): it may stop then. */
  readonly left = new Promise<void>((resolve) => {
    this.resolveLeft = resolve;
  });
  private viewScheduled = false;
  private readonly viewTask = (): void => this.sendView();
  private catchUpCheckScheduled = false;
  private readonly catchUpCheckTask = (): void => {
    this.catchUpCheckScheduled = false;
    this.failover.check();
  };
  /** Per fragment, the replicas (member indices) requests are routed by: the table's, else the static placement. */
  private routing: number[][];
  /** Per fragment, the table generation `routing` follows (0: the static placement). */
  private readonly routedGeneration: Float64Array;
  /** The forwarded operation `forwardStep` decides now, and its wait check: no closure per operation. */
  private deciding: ForwardedOp | undefined;
  private readonly mayWaitDeciding = (): boolean => this.mayWait();
  /** Scratch for `forwardStep`: one per node, filled per forwarded operation. */
  private readonly forwardView: ForwardView = {
    serving: false,
    listedFirst: false,
    generation: 0,
    senderGeneration: 0,
    next: 'none',
    hops: 0,
  };
  private udp: UdpSocket | undefined;
  /** Per member index: not unreachable, Down or Removed in membership's view (true until it says so). */
  private readonly memberReachable: boolean[];
  private readonly memberStates: MemberState[];
  /** Per member index: wall-clock ms since when membership has not found it reachable; 0 while it does. */
  private readonly unreachableSinceMs: number[];
  /** Member events (and, later, coordinator changes and moves) for `GET /cluster/events`. */
  readonly events = new EventLog<ClusterEventData>(CLUSTER_EVENTS_KEPT);
  /** Set when the cluster refused this node (it was removed): it then serves nothing. */
  refusedReason: string | undefined;
  private refusedLink: UnreachableLink | undefined;
  /** Why this run holds none of an earlier run's data (`MembershipStart.withoutData`). */
  private withoutData: string | undefined;
  /** The incarnation of a record of this node id from before this process started, once one arrived. */
  private earlierRunIncarnation: number | undefined;
  /** This run started by joining through a seed (its placement before a table names nothing). */
  private startedJoining = false;
  /** This run rejoins through its members without its data, having found they knew its id (membership's discovery). */
  private rejoinsWithoutData = false;
  /** Membership held this node Joining at its last event about it: a MemberUp then admits it. */
  private selfJoining = false;
  /** Fragments this run took a verified copy of as a move's target: no earlier run's copy, never lost. */
  private readonly copiedThisRun = new Set<number>();
  /** Why a joiner's lost copies could not be dropped, as last logged. */
  private lostCopiesWait = '';
  /** Where each peer's workers serve clients, as it last told (ClientPorts); by member index. */
  private readonly peerWorkerPorts: (ClientPortsMessage | undefined)[] = [];
  /** Where this node's workers serve clients, once their ports are open. */
  private ownWorkerPorts: ClientPortsMessage | undefined;
  /** Members the node was started with (members admitted later are members once membership knows them). */
  private workerMembers = 0;
  /** What waits for this node's table or serving to change (`routingChange`). */
  private readonly routingWaiters = new Set<() => void>();
  /** Per fragment, how this node's copy was verified (`verifyCopy`); gone with the copy. */
  private readonly verification = new Map<number, CopyVerification>();
  /**
   * Per fragment this node handed over (`handOver`) and no longer holds: the replicas that proved
   * they took every write it held. A catch-up there that asks for a handover once the copy is gone
   * is answered covered (`serveHandover`). Forgotten when the node holds the fragment again.
   */
  private readonly handedOff = new Map<number, ReadonlySet<number>>();

  constructor(
    readonly config: ClusterConfig,
    private readonly dispatcher: Dispatcher,
    private readonly logger: Logger,
    valueBytesMax: number,
  ) {
    this.frameBytesMax = ringRecordBytesMax(valueBytesMax);
    this.routing = config.placement.replicas.map((r) => [...r]);
    this.routedGeneration = new Float64Array(config.placement.replicas.length);
    this.movesSeen = config.placement.replicas.map(() => null);
    this.servingSeen = config.placement.replicas.map(() => undefined);
    this.failover = new FailoverCatchUp({
      fragmentCount: config.placement.replicas.length,
      selfIndex: config.selfIndex,
      // A node the cluster refused serves nothing (routeOf): its worker ports must not either.
      firstServing: (f) => (this.refusedLink === undefined ? this.servingMember(f) : -1),
      isUp: (m) => this.isUp(m),
      memberName: (m) => this.config.members[m] ?? `#${m}`,
      peersOf: (f) => this.routing[f],
      reconcile: (f, m, timeoutMs) => this.catchUpRound(f, m, timeoutMs),
      handover: (f, m, timeoutMs) => this.askHandover(f, m, timeoutMs),
      resubmit: (f, request, handler, token) => this.resubmit(f, request, handler, token),
      after: (ms, fire) => {
        const timer = setTimeout(fire, ms);
        timer.unref(); // a catch-up does not keep a closing node alive
        return () => clearTimeout(timer);
      },
      nowMs: () => Date.now(),
      log: (level, fields, message) => this.logger[level](fields, message),
    });
    this.localServing = Uint8Array.from(config.placement.replicas, (r) =>
      r.includes(config.selfIndex) ? 1 : 0,
    );
    this.memberReachable = config.members.map(() => true);
    this.memberStates = config.members.map(() => 'Up');
    this.unreachableSinceMs = config.members.map(() => 0);
    this.peerLinks = config.members.map((id, m) =>
      m === config.selfIndex ? undefined : new PeerLink(m, id, this),
    );
    this.mesh = new Mesh(
      {
        selfId: config.selfId,
        members: config.members,
        addresses: config.addresses,
        bindHost: config.peerBind,
        port: config.peerPort,
        secret: config.secret,
        clientPort: config.clientPort,
        tls: config.tls,
        logger,
      },
      {
        admit: (peerId) => this.admit(peerId),
        onPeerUp: (m) => this.onPeerState(m, true),
        onPeerDown: (m) => this.onPeerState(m, false),
        onFrame: (m, peek, bytes) => this.onFrame(m, peek, bytes),
      },
    );
    this.workerMembers = config.members.length;
    this.pubsub = new PubSubRelay(this.mesh, config.members, logger);
    this.admin = new AdminExchange(
      config.selfId,
      {
        sendEnvelope: (nodeId, envelope) => {
          const m = config.members.indexOf(nodeId);
          return m !== -1 && this.mesh.send(m, envelope);
        },
      },
      new SystemClock(),
    );
    this.results = config.members.map(
      () => new ListFrameBuilder(EnvelopeField.ForwardedResults, RESULTS_FIELD),
    );
    this.answerOrigin = {
      onResult: (origin, buf, at, length) => this.answer(origin, buf, at, length),
      onFailure: (origin, error) => {
        const result = encodeErrorResult(error.kind, error.message);
        this.answer(origin, result, 0, result.length);
      },
    };
    dispatcher.watchRounds((report) => this.onRoundEnded(report));
  }

  /**
   * Any round that compared everything and completed under the peer's continuity verified this
   * copy against that peer (src/workers/replication.ts): anti-entropy verifies each replica against
   * each other one so, once per run of the peer's replication here, and a handoff or a handover from
   * a replica that stays needs no round of its own. Kept with the copy, as a verifying round's is;
   * a report of a copy dropped since (its drop still on the way) is not.
   */
  private onRoundEnded(report: RoundReport): void {
    if (!report.ok || !report.whole || report.continuity === 0) return;
    if (!this.dispatcher.keeps(report.fragment)) return;
    this.verificationOf(report.fragment).under.set(report.member, report.continuity);
  }

  /** How this node's copy of `fragment` was verified so far (an empty record the first time). */
  private verificationOf(fragment: number): CopyVerification {
    let verification = this.verification.get(fragment);
    if (verification === undefined) {
      verification = { under: new Map(), running: new Map() };
      this.verification.set(fragment, verification);
    }
    return verification;
  }

  /**
   * Listens for peers (TCP and, on the same port, membership datagrams), starts dialing and starts
   * membership; resolves with the peer port once listening.
   */
  async start(membership: MembershipStart): Promise<number> {
    const port = await this.mesh.start();
    const c = this.config;
    // Datagrams are tagged with the cluster secret; a TLS mesh without one keeps membership on TLS.
    const key = c.tls !== undefined && c.secret === undefined ? null : datagramKey(c.secret);
    if (key !== null) await this.listenForDatagrams(port);
    const restored = new Map(membership.members.map((r) => [r.nodeId, r]));
    const members: MemberRecord[] = c.members.flatMap((nodeId, m) => {
      if (m === c.selfIndex) return [];
      // The list given at start names the members; what the last run knew of them carries over.
      const known = restored.get(nodeId);
      return [
        {
          nodeId,
          address: formatPeerAddress(c.addresses[m]!),
          incarnation: known?.incarnation ?? 0,
          state: known?.state ?? 'Up',
        },
      ];
    });
    // A node that grows by joins (no --peers) rejoins the members it knew by itself.
    const listed = new Set(c.members);
    for (const record of membership.members) {
      if (!listed.has(record.nodeId) && record.nodeId !== c.selfId) members.push({ ...record });
    }
    const self = restored.get(c.selfId);
    // --join on a node whose data directory knows the cluster already is a restart: it rejoins the
    // members it knew, as a restart without --join does.
    const knowsOthers = membership.members.some((r) => r.nodeId !== c.selfId);
    const joining = startsJoining(c.selfId, c.joinSeeds.length, membership.members);
    this.startedJoining = joining;
    // A joiner whose data directory knows no other member was never admitted from it, so it holds
    // nothing the cluster placed: a restart while its join still waits is as empty as its first start.
    this.withoutData =
      membership.withoutData ?? (joining ? 'its data directory has not joined the cluster yet' : undefined);
    if (c.joinSeeds.length > 0 && !joining)
      this.logger.info(
        { members: membership.members.length },
        'the data directory knows the cluster: rejoining its members',
      );
    this.startWait = joining ? 'join' : membership.members.length > 0 ? 'peers' : 'none';
    const resuming = resumesLeave(self?.state);
    if (resuming) {
      this.leaving = true;
      this.logger.info({ state: self?.state }, 'resuming the leave the last run began');
    }
    this.membershipDriver = new MembershipDriver(
      {
        ...MEMBERSHIP_CONFIG_DEFAULTS,
        nodeId: c.selfId,
        address: formatPeerAddress({ host: c.selfAddress.host, port: c.selfAddress.port || port }),
        restoredIncarnation: membership.restoredIncarnation,
        withoutData: this.withoutData !== undefined,
        members,
        selfState: resuming ? 'Leaving' : joining ? 'Joining' : 'Up',
        selfRemoved: self?.state === 'Removed',
        downAfterMs: c.downAfterMs,
      },
      {
        sendDatagram: (address, datagram) => this.sendDatagram(address, datagram),
        sendEnvelope: (nodeId, envelope) => {
          const m = c.members.indexOf(nodeId);
          return m !== -1 && this.mesh.send(m, envelope);
        },
        persist: membership.persist,
        log: (level, fields, message) => this.logger[level](fields, message),
      },
      {
        onMemberEvent: (event) => this.onMemberEvent(event),
        onRefused: (reason) => this.refuse(reason),
        onEarlierRun: (incarnation) => {
          this.earlierRunIncarnation = incarnation;
          // Heard while it asks its members whether they knew it: it joins through them (membership).
          if (this.unadmitted() && !this.startedJoining) this.rejoinsWithoutData = true;
          this.giveUpLostCopies(this.coordinatorDriver?.table);
        },
        onLostCopies: (member, incarnation) => this.askToDropLostCopies(member, incarnation),
        onLeft: () => {
          this.logger.info({}, 'left the cluster');
          this.events.append('Left', Date.now(), { node: c.selfId });
          this.resolveLeft();
        },
      },
      new SystemClock(),
      key,
    );
    const initialPlacement = c.placement.replicas.map((list) => list.map((m) => c.members[m]));
    // Only the members a cluster started with bootstrap its first table: a node that joined (started
    // with --join, or alone and since joined by others) adopts the cluster's, even when it restarts
    // before it had it and sees no one else.
    const mayBootstrap = c.joinSeeds.length === 0 && !(c.members.length === 1 && knowsOthers);
    this.coordinatorDriver = new CoordinatorDriver(
      {
        selfId: c.selfId,
        fragmentCount: this.dispatcher.keyspace.fragmentCount,
        replicas: c.replicas,
        initialPlacement,
        initialMembers: c.members,
        mayBootstrap,
        restored: membership.table,
        restoredPromise: membership.promise,
        reportRetryMs: COORDINATOR_REPORT_RETRY_MS,
        digestIntervalMs: COORDINATOR_DIGEST_INTERVAL_MS,
        moves: c.moveLimits,
        planIntervalMs: PLACEMENT_PLAN_INTERVAL_MS,
      },
      {
        sendEnvelope: (nodeId, envelope) => {
          const m = c.members.indexOf(nodeId);
          return m !== -1 && this.mesh.send(m, envelope);
        },
        persist: membership.persistTable,
        log: (level, fields, message) => this.logger[level](fields, message),
        syncView: (nodeId) => this.membershipDriver?.syncWith(nodeId),
      },
      {
        onTableChanged: (table, fragments) => this.onTableChanged(table, fragments),
        onCoordinatorChanged: (coordinator, epoch) => this.onCoordinatorChanged(coordinator, epoch),
      },
      new SystemClock(),
    );
    // Until the first table, a static start judges a joiner back without its data by the placement
    // that table takes over: its id is a replica there too (its join waits, and the coordinator drops
    // its copies once it has the table).
    if (mayBootstrap && this.coordinatorDriver.table.entries().length === 0) {
      const { members: placed, onlyCopies } = configuredHolders(initialPlacement);
      this.membershipDriver.placed(placed, onlyCopies);
    }
    this.placementDriver = new PlacementDriver(
      {
        selfId: c.selfId,
        fragmentCount: this.routing.length,
        retryMs: PLACEMENT_RETRY_MS,
        readyResendMs: PLACEMENT_READY_RESEND_MS,
        drainWarnIntervalMs: c.drainWarnIntervalMs,
      },
      {
        hold: (fragment, replicas) => {
          this.handedOff.delete(fragment);
          return this.dispatcher.holdFragment(fragment, this.indicesOf(replicas));
        },
        verify: (fragment, sources) => this.verifyCopy(fragment, sources),
        drain: (fragment, targets, generation) => this.handOver(fragment, targets, generation),
        drop: (fragment) => {
          this.verification.delete(fragment);
          this.copiedThisRun.delete(fragment);
          return this.dispatcher.dropFragment(fragment);
        },
        ready: (fragment, generation) => {
          this.copiedThisRun.add(fragment);
          this.coordinatorDriver?.ready(fragment, generation);
        },
        serve: (fragment, serving) => this.onServing(fragment, serving),
        stepped: () => this.exitIfLeft(),
        log: (level, fields, message) => this.logger[level](fields, message),
      },
      new SystemClock(),
    );
    // A copy found on disk is held, and served, as those the table this node accepted last lists it
    // for are (before any table: those its configuration places here), until the table says
    // otherwise. A restarted node's start-up placement is stale: a fragment it places here but the
    // table moved away was dropped, and would be handed over again, empty, as if it held writes.
    const lastTable = membership.table;
    if (lastTable !== undefined) {
      for (const [f] of lastTable.entries())
        this.localServing[f] = lastTable.listsServing(f, c.selfId) ? 1 : 0;
    }
    for (const f of this.dispatcher.storedAtStart) this.localServing[f] = 1;
    this.releaseUnheld();
    this.placementDriver.start(this.heldAtStart());
    if (lastTable !== undefined) {
      this.onTableChanged(
        lastTable,
        lastTable.entries().map(([f]) => f),
      );
    }
    this.scheduleView();
    if (joining) this.joinThroughSeeds();
    // A leave resumed with no table restored (a member asked to leave before its first table came,
    // killed before it exited) has no table change to check it by: nothing lists it, so it exits now.
    this.exitIfLeft();
    return port;
  }

  /**
   * `--join`: dials the seeds until one proves the cluster secret and names itself, then asks it,
   * through membership, to admit this node (retried by membership across the seeds it knows).
   */
  private joinThroughSeeds(): void {
    const c = this.config;
    const seeds = c.joinSeeds.map((address) => this.mesh.dialSeed(address).then((m) => ({ m, address })));
    Promise.any(seeds).then(
      ({ m, address }) => {
        this.logger.info({ seed: c.members[m], address: formatPeerAddress(address) }, 'joining the cluster');
        this.membershipDriver?.join([{ nodeId: c.members[m], address: formatPeerAddress(address) }]);
      },
      () => {},
    );
  }

  async close(): Promise<void> {
    this.admin.close();
    this.failover.close();
    // Every driver's timer goes: a placement step still due (a retry, a ready resent, a drain
    // warning) would otherwise keep re-arming and keep the process from exiting.
    this.placementDriver?.close();
    this.coordinatorDriver?.close();
    this.membershipDriver?.close();
    const udp = this.udp;
    this.udp = undefined;
    if (udp !== undefined) await new Promise<void>((resolve) => udp.close(() => resolve()));
    for (const link of this.peerLinks) link?.close();
    await this.mesh.close();
  }

  /** Membership (undefined before start). */
  get membership(): MembershipDriver | undefined {
    return this.membershipDriver;
  }

  /** The placement coordinator and the table (undefined before start). */
  get coordinator(): CoordinatorDriver | undefined {
    return this.coordinatorDriver;
  }

  /** The replicas (member indices) `fragment` is routed by now, most preferred first. */
  replicasOf(fragment: number): readonly number[] {
    return this.routing[fragment];
  }

  /** What this node does about each fragment (undefined before start). */
  get placement(): PlacementDriver | undefined {
    return this.placementDriver;
  }

  /**
   * Fragments short of replicas: the table lists fewer than `--replicas` of them besides a move's
   * target, or lists one that is Down or Removed. Re-replication brings this to 0 once enough
   * members are Up.
   */
  underReplicated(): number {
    const table = this.coordinatorDriver?.table;
    if (table === undefined) return 0;
    let count = 0;
    for (let f = 0; f < this.routing.length; f++) if (this.isUnderReplicated(table, f)) count++;
    return count;
  }

  isUnderReplicated(table: AssignmentTable, fragment: number): boolean {
    const entry = table.active(fragment);
    if (entry === undefined) return false;
    const target = entry.moving?.target;
    let healthy = 0;
    for (const id of entry.replicas) {
      if (id === target) continue;
      const state = this.membershipDriver?.member(id)?.state;
      if (state !== 'Down' && state !== 'Removed') healthy++;
    }
    return healthy < this.config.replicas;
  }

  /** Fragments this node holds a copy of (`holds`), and of those the fragments it serves now. */
  fragmentsHere(): { held: number; serving: number } {
    let held = 0;
    let serving = 0;
    for (let f = 0; f < this.routing.length; f++) {
      if (this.holds(f)) held++;
      if (this.servingMember(f) === this.config.selfIndex) serving++;
    }
    return { held, serving };
  }

  /** Replica moves in flight in the table this node holds. */
  movesInFlight(): number {
    let count = 0;
    for (const [, entry] of this.coordinatorDriver?.table.entries() ?? [])
      if (entry.kind === 'active' && entry.moving !== null) count++;
    return count;
  }

  /** Moves in flight in the table, this node's fragments in transition, and the counters (`GET /cluster/moves`). */
  movesReport(): MovesReport {
    const table = this.coordinatorDriver?.table;
    const inFlight: MovesReport['inFlight'] = [];
    const recent: Array<Omit<MovesReport['recent'][number], 'at'> & { atMs: number }> = [];
    for (const [fragment, entry] of table?.entries() ?? []) {
      if (entry.kind !== 'active') continue;
      if (entry.moving !== null) {
        const started = entry.history.at(-1);
        inFlight.push({
          fragment,
          source: entry.moving.source,
          target: entry.moving.target,
          reason: entry.moving.reason,
          generation: entry.generation,
          since: started === undefined ? null : new Date(started.timestampMs).toISOString(),
        });
      }
      for (const h of entry.history) {
        if (h.reason === 'bootstrap') continue;
        recent.push({
          fragment,
          generation: h.generation,
          from: [...h.from],
          to: [...h.to],
          reason: h.reason,
          atMs: h.timestampMs,
        });
      }
    }
    recent.sort((x, y) => y.atMs - x.atMs);
    const placement = this.placementDriver;
    const tooFew =
      table === undefined ? undefined : tooFewEligible(this.coordinatorView(), this.config.replicas);
    return {
      tableEpoch: table?.epoch ?? 0,
      underReplicated: this.underReplicated(),
      blocked: tooFew === undefined ? [] : [tooFew],
      inFlight,
      here: (placement?.fragments() ?? [])
        .filter((f) => f.state !== 'Serving')
        .map((f) => {
          const copied = f.state === 'Bootstrapping' ? this.dispatcher.pulledInto(f.fragment) : undefined;
          const left = copied === undefined ? undefined : leftToPull(copied);
          return {
            fragment: f.fragment,
            state: f.state,
            generation: f.generation,
            step: f.step,
            since: new Date(f.sinceMs).toISOString(),
            waiting: f.waiting,
            keysDone: copied?.keys ?? null,
            bytesDone: copied?.bytes ?? null,
            keysLeft: left?.keys ?? null,
            bytesLeft: left?.bytes ?? null,
          };
        }),
      moveRateBytesPerSec: this.config.moveRateBytesPerSec,
      unverified: this.unverifiedPairs(table),
      recent: recent
        .slice(0, MOVES_RECENT_MAX)
        .map(({ atMs, ...h }) => ({ ...h, at: new Date(atMs).toISOString() })),
      coordinator: { ...(this.coordinatorDriver?.counters ?? {}) },
      placement: { ...(placement?.counters ?? {}) },
      failover: { ...this.failover.counters, inProgress: this.failover.inProgress() },
    };
  }

  /** MovesReport.unverified, by `table` (0 without one). */
  private unverifiedPairs(table: AssignmentTable | undefined): number {
    let count = 0;
    for (let fragment = 0; fragment < this.routing.length; fragment++) {
      const replicas = table?.active(fragment)?.replicas ?? [];
      if (!replicas.includes(this.config.selfId)) continue;
      const under = this.verification.get(fragment)?.under;
      for (const m of this.indicesOf(replicas))
        if (m !== this.config.selfIndex && under?.has(m) !== true) count++;
    }
    return count;
  }

  private onTableChanged(table: AssignmentTable, fragments: readonly number[]): void {
    this.giveUpLostCopies(table);
    this.recordMoves(table, fragments);
    this.verifySuccessions(table, fragments);
    this.verifyTransfers(table);
    this.routeByTable(table);
    this.routingChanged();
    if (!this.unadmitted()) this.placementDriver?.onTable(table, fragments);
    this.membershipDriver?.placed(table.members(), onlyCopyHolders(table));
    this.exitIfLeft();
    this.wakeStartWaiters();
  }

  /**
   * A node id the cluster knew before this process started, now running without that run's data (the
   * memory store; a new data directory), is still listed by the table as a replica of the copies it
   * lost: serving them, or a failover to it, would answer acknowledged writes as missing, and its
   * place in their lists would leave them a replica short without a word. It gives up before it
   * serves any (the refused state: it serves nothing, and its members find it unreachable, then
   * Down), as Cassandra refuses a node that comes back empty under the address of one that owned
   * data. Started again with --join, its seed has the coordinator drop its lost copies before it
   * admits it, and it takes copies anew (a join through a seed of an earlier version, which admits
   * it as it is, ends here too: the operator removes it and starts it under a new id).
   */
  private giveUpLostCopies(table: AssignmentTable | undefined): void {
    if (this.withoutData === undefined || this.earlierRunIncarnation === undefined) return;
    // A joiner's seed has its lost copies dropped before it admits it: judged once admitted.
    if (this.refusedReason !== undefined || this.unadmitted()) return;
    const self = this.config.selfId;
    let listed = 0;
    if (table !== undefined) {
      for (const [f] of table.entries())
        if (table.listsServing(f, self) && !this.copiedThisRun.has(f)) listed++;
    } else if (!this.startedJoining) {
      // Before any table: the placement its configuration gives it (--peers), which it routes by.
      for (const replicas of this.routing) if (replicas.includes(this.config.selfIndex)) listed++;
    }
    if (listed === 0) return;
    const reason =
      `the cluster knew node id ${self} before this process started (a member holds it at incarnation ` +
      `${this.earlierRunIncarnation}) and lists it as a replica of ${listed} fragments, but ` +
      `${this.withoutData}: serving them would answer acknowledged writes as missing. ` +
      (this.startedJoining || this.rejoinsWithoutData
        ? `Once the cluster holds ${self} Down, remove it (tessera cluster remove ${self}) and start this node with a new --node-id`
        : `Restart it while its members run (it asks them at its start whether they knew it, then joins ` +
          `through them without its data), or with --join <a member's peer address>: the cluster then ` +
          `drops its lost copies and it takes new ones`);
    this.logger.error({ fragments: listed, earlierIncarnation: this.earlierRunIncarnation }, reason);
    this.refuse(reason);
    // Membership stops after the step under way (this may run inside one of its callbacks).
    queueMicrotask(() => this.membershipDriver?.giveUp(reason));
  }

  /**
   * A joiner without its earlier run's data asked this node to admit it while the table lists it:
   * the coordinator drops its lost copies (asked again at each attempt). A coordinator of an earlier
   * version would not know the message: the join then waits, said once.
   */
  private askToDropLostCopies(member: string, incarnation: number): void {
    const coordinator = this.coordinatorDriver?.coordinator;
    if (coordinator === undefined) return;
    const m = this.config.members.indexOf(coordinator.id);
    if (coordinator.id !== this.config.selfId && (m === -1 || !this.peerTakes(m, CAPABILITY_LOST_COPIES))) {
      const line = `the join of ${member} waits: coordinator ${coordinator.id} cannot drop its lost copies (an earlier version)`;
      if (line !== this.lostCopiesWait) this.logger.warn({ member, coordinator: coordinator.id }, line);
      this.lostCopiesWait = line;
      return;
    }
    this.coordinatorDriver?.lostCopies(member, incarnation);
  }

  /**
   * A joiner no seed has admitted yet holds and serves nothing the table lists for it: a table can
   * reach it before then (its members may hold its earlier run reachable for a while), still listing
   * the copies its earlier run held, which its seed has dropped before it admits it. A node still
   * asking its members whether they knew it (membership's discovery), which may turn joiner, is not
   * admitted either: its placement driver waits, and it serves only what its start-up placement puts
   * first on it, each fragment once caught up from the other replicas, as after any start.
   */
  private unadmitted(): boolean {
    return this.membershipDriver?.member(this.config.selfId)?.state === 'Joining';
  }

  /** Admitted: what the table lists for this node now applies to it. */
  private onAdmitted(): void {
    const table = this.coordinatorDriver?.table;
    if (table === undefined || table.entries().length === 0) return;
    this.giveUpLostCopies(table);
    if (this.refusedReason !== undefined) return;
    this.placementDriver?.onTable(
      table,
      table.entries().map(([fragment]) => fragment),
    );
  }

  /** The cluster refused this node (removed, its join refused) or it gave up: it serves nothing from now on. */
  private refuse(reason: string): void {
    if (this.refusedReason !== undefined) return;
    this.refusedReason = reason;
    this.refusedLink = new UnreachableLink(networkError(`this node was refused by the cluster (${reason})`));
    this.failover.check();
  }

  /**
   * The table or this node's serving changed who serves some fragments: what waits for it goes on,
   * and the catch-ups are checked once per burst (failover-catch-up.ts).
   */
  private routingChanged(): void {
    for (const waiter of this.routingWaiters) waiter();
    if (this.catchUpCheckScheduled) return;
    this.catchUpCheckScheduled = true;
    queueMicrotask(this.catchUpCheckTask);
  }

  /** A move that started, finished or was given up in the changed entries: a cluster event each. */
  private recordMoves(table: AssignmentTable, fragments: readonly number[]): void {
    const nowMs = Date.now();
    for (const fragment of fragments) {
      const entry = table.active(fragment);
      const before = this.movesSeen[fragment];
      const now = entry?.moving ?? null;
      if (before !== null && (now === null || now.target !== before.target)) {
        const finished = entry?.replicas.includes(before.target) === true;
        this.events.append(finished ? 'MoveFinished' : 'MoveCancelled', nowMs, {
          fragment,
          ...before,
          generation: entry?.generation ?? 0,
        });
      }
      if (now !== null && (before === null || now.target !== before.target)) {
        this.events.append('MoveStarted', nowMs, { fragment, ...now, generation: entry!.generation });
      }
      this.movesSeen[fragment] = now;
      // Serving handed to another replica with no move (a serving transfer, a pin): a move's finish
      // says so as MoveFinished.
      const first = entry !== undefined && now === null ? entry.replicas[0] : undefined;
      const was = this.servingSeen[fragment];
      if (before === null && first !== undefined && was !== undefined && first !== was) {
        this.events.append('ServingChanged', nowMs, {
          fragment,
          from: was,
          to: first,
          reason: entry!.pinnedTo === first ? 'move' : 'rebalance',
          generation: entry!.generation,
        });
      }
      this.servingSeen[fragment] = first;
    }
  }

  /**
   * Routes by the table's replica lists, without a move's target: it copies and is verified before
   * the coordinator lists it as a serving replica. Whether this node serves a fragment itself is
   * the placement driver's word (`localServing`).
   */
  private routeByTable(table: AssignmentTable): void {
    const c = this.config;
    for (let f = 0; f < this.routing.length; f++) {
      const entry = table.active(f);
      if (entry === undefined) continue;
      const target = entry.moving?.target;
      const list = entry.replicas
        .filter((id) => id !== target)
        .map((id) => c.members.indexOf(id))
        .filter((m) => m !== -1);
      if (list.length === 0) continue;
      this.routing[f] = list;
      this.routedGeneration[f] = entry.generation;
    }
  }

  /**
   * The workers opened every fragment of their stores at start (to find the copies on disk): those
   * this node does not hold are closed, with their senders, before the placement driver starts, so
   * a later hold of one (a gain) comes after its release. Kept open, each pulled a copy from the
   * replicas of its start-up placement and kept it in step, unlisted: with R below the member count
   * every node held every fragment. Empty, a release removes nothing from the store.
   */
  private releaseUnheld(): void {
    for (let f = 0; f < this.localServing.length; f++) {
      if (this.localServing[f] === 1) continue;
      this.dispatcher.dropFragment(f).catch((err: Error) => {
        this.logger.warn(
          { fragment: f, err: err.message },
          'could not release a fragment this node does not hold',
        );
      });
    }
  }

  /**
   * What this node holds as it starts: the copies the table it accepted last lists it for (before
   * any table, those its configuration places here), and every other copy its workers found on disk
   * (marked served at start): one gained by a move, or one whose handoff a crash cut short, may hold
   * writes no other replica has, and is handed over when the table lists this node nowhere.
   */
  private heldAtStart(): number[] {
    const held: number[] = [];
    for (let f = 0; f < this.localServing.length; f++) if (this.localServing[f] === 1) held.push(f);
    return held;
  }

  private onServing(fragment: number, serving: boolean): void {
    this.localServing[fragment] = serving ? 1 : 0;
    this.routingChanged();
    this.events.append(serving ? 'FragmentServing' : 'FragmentNotServing', Date.now(), {
      fragment,
      node: this.config.selfId,
    });
  }

  private indicesOf(ids: readonly string[]): number[] {
    return ids.map((id) => this.config.members.indexOf(id)).filter((m) => m !== -1);
  }

  /**
   * A gained copy is verified by a complete anti-entropy round against a serving replica this node
   * reaches, started once that replica replicates the fragment here (each pulls what that replica
   * holds); one is enough. The round against the first in the table's order starts at once, those
   * against the others once it ended: started together, each would list and send every key of an
   * empty copy, and the copy would pull it from each, its move rate spent on the same bytes twice.
   * After the first they find the copy holding what they hold, and compare digests. Each round
   * that completes is kept with the continuity it started under, those that end after the first
   * too (a handover from that replica waits for its round: `askHandover`).
   */
  private async verifyCopy(fragment: number, sources: readonly string[]): Promise<void> {
    const members = this.indicesOf(sources).filter((m) => this.isUp(m));
    if (members.length === 0) throw new Error(`no serving replica of fragment ${fragment} is reachable`);
    const verification = this.verificationOf(fragment);
    const { under, running } = verification;
    const roundAgainst = async (m: number) => {
      const report = await this.dispatcher.reconcileNow(fragment, m, PLACEMENT_STEP_TIMEOUT_MS, true);
      this.logger.info(
        {
          fragment,
          against: this.config.members[m],
          ok: report.ok,
          continuity: report.continuity,
          keysPulled: report.keysPulled,
          reason: report.reason,
        },
        'verifying round of a copy ended',
      );
      if (!report.ok) throw new Error(report.reason);
      // Rounds that end after the first are kept too, unless the copy went meanwhile.
      if (this.verification.get(fragment) === verification) under.set(m, report.continuity);
    };
    const first = roundAgainst(members[0]);
    const firstEnded = first.catch(() => {});
    const rounds = [first, ...members.slice(1).map((m) => firstEnded.then(() => roundAgainst(m)))];
    members.forEach((m, i) => {
      const round = rounds[i].catch(() => {});
      running.set(m, round);
      round.then(() => {
        if (running.get(m) === round) running.delete(m);
      });
    });
    await Promise.any(rounds).catch((err: AggregateError) => {
      const reasons = err.errors.map((e: Error) => e.message);
      throw new Error(`no round completed: ${reasons.join('; ')}`);
    });
  }

  /**
   * A move whose finish will hand this node the serving of a fragment it already holds a copy of
   * (`servingSuccessionSource`): the copy is verified against the serving source now, as a gained
   * copy is, so the handover at the finish completes it without a round. Once per change of the
   * entry (the move's start; a new coordinator's copy of it), not while one runs: the last round
   * is the one the handover names, under the source's replication as it is now. A failed round
   * only costs the handover its round.
   */
  private verifySuccessions(table: AssignmentTable, fragments: readonly number[]): void {
    for (const fragment of fragments) {
      const entry = table.active(fragment);
      if (entry === undefined || this.localServing[fragment] !== 1) continue;
      const source = servingSuccessionSource(entry, this.config.selfId);
      if (source !== null) this.verifyAhead(fragment, source, 'succession', true);
    }
  }

  /**
   * The next batch of serving transfers the coordinator makes once the table settled
   * (`servingTransfers`, over this node's view, which a settled cluster's coordinator shares): those
   * handing a fragment to this node have it verify its copy against the replica serving it now, as
   * a successor does, so the handover completes without a round while the fragment's requests wait.
   * The coordinator gives each batch a plan interval for these rounds; one that fails, or is not
   * done in time, only costs the handover its round. A copy verified against that replica already
   * is not verified again (the handover names the continuity it was verified under).
   */
  private verifyTransfers(table: AssignmentTable): void {
    const batch = servingTransfers(table, this.coordinatorView(), PLACEMENT_SERVING_TRANSFERS_PER_PLAN_MAX);
    for (const { fragment, from, to } of batch) {
      if (to === this.config.selfId && this.localServing[fragment] === 1)
        this.verifyAhead(fragment, from, 'transfer', false);
    }
  }

  /**
   * Verifies this node's copy of `fragment` against `source` ahead of a handover from it (a
   * succession or a serving transfer), unless a round against it runs — or, `again` false, one
   * completed already. A failed round only costs the handover its round.
   */
  private verifyAhead(
    fragment: number,
    source: string,
    ahead: 'succession' | 'transfer',
    again: boolean,
  ): void {
    const m = this.config.members.indexOf(source);
    const verification = this.verification.get(fragment);
    if (m === -1 || verification?.running.has(m) || (!again && verification?.under.has(m) === true)) return;
    this.verifyCopy(fragment, [source]).catch((err: Error) =>
      this.logger.info(
        { fragment, against: source, ahead, reason: err.message },
        'could not verify the copy ahead of the handover: the handover runs a round',
      ),
    );
  }

  /**
   * A catch-up's round against `member`. The fragment's worker replicates with it for the round
   * (`beginPull`), as a handoff's target does: a replica that handed its serving over as the table
   * dropped it (a leave, a move away) is no longer one the worker replicates with, and holds writes
   * this copy may lack until its handoff has this node pull its copy whole.
   */
  private async catchUpRound(fragment: number, member: number, timeoutMs: number): Promise<RoundEnd> {
    if (!(await this.dispatcher.beginPull(fragment, member)))
      return { ok: false, reason: 'this node holds no copy of the fragment' };
    try {
      return await this.dispatcher.reconcileNow(fragment, member, timeoutMs, false, true);
    } finally {
      await this.dispatcher.endPull(fragment, member).catch(() => {});
    }
  }

  /**
   * Asks `member`, which served `fragment` until the table put this node first, to hand it over
   * (`serveHandover` there), naming the continuity this copy was verified against it under — once
   * this copy's verifying round against it ended, when one still runs (HANDOVER_VERIFY_WAIT_MS at
   * most).
   */
  private async askHandover(fragment: number, member: number, timeoutMs: number): Promise<HandoverOutcome> {
    const generation = this.coordinatorDriver?.table.active(fragment)?.generation;
    const nodeId = this.config.members[member];
    if (generation === undefined || nodeId === undefined) return 'failed';
    const continuity = await this.verifiedUnder(
      fragment,
      member,
      Math.min(timeoutMs, HANDOVER_VERIFY_WAIT_MS),
    );
    const answer = await this.admin.ask(
      nodeId,
      { kind: 'handover', fragment, generation, continuity },
      timeoutMs,
      nodeId,
    );
    if (answer.status !== 'Ok') return 'failed';
    return answer.result.covered === true ? 'covered' : 'drained';
  }

  /**
   * The continuity this node's copy of `fragment` was verified against `member` under (0: it was
   * not), once a verifying round against it that still runs ends (`waitMs` at most): the copy held
   * then, as one dropped meanwhile takes its verification along.
   */
  private async verifiedUnder(fragment: number, member: number, waitMs: number): Promise<number> {
    const running = this.verification.get(fragment)?.running.get(member);
    if (running !== undefined) await settledWithin(running, waitMs);
    return this.verification.get(fragment)?.under.get(member) ?? 0;
  }

  /**
   * A peer the table put first for `fragment` asks this node, which served it before, to hand it
   * over: once this node's table is at `generation` (it routes the fragment to that peer from then
   * on, so it takes no write for it any more), it answers when the peer acknowledged every write it
   * took — those still queued at its worker included, as they come before the drain. `covered`
   * when its replication to the peer is still in `continuity` (the peer's copy was verified
   * against this node under it): the peer then holds every write this node took. `covered` too
   * when this node handed its copy off to the peer (`handedOff`) and dropped it.
   */
  async serveHandover(
    from: string,
    fragment: number,
    generation: number,
    continuity: number,
  ): Promise<AdminAnswer> {
    const member = this.config.members.indexOf(from);
    if (member === -1 || fragment >= this.routing.length)
      return { status: 'BadRequest', message: `no fragment ${fragment} to hand over to ${from}`, result: {} };
    // The copy went after a handoff the asker took part in: it proved then it holds every write
    // this node took (its catch-up began as the handoff ended, or the copy went meanwhile).
    const handedOffAnswer = (): AdminAnswer | undefined => {
      if (this.dispatcher.keeps(fragment) || this.handedOff.get(fragment)?.has(member) !== true)
        return undefined;
      this.logger.info({ fragment, to: from, covered: true }, 'handing over a fragment handed off already');
      return {
        status: 'Ok',
        message: `fragment ${fragment} was handed off to ${from} before this node dropped its copy`,
        result: { covered: true },
      };
    };
    const before = handedOffAnswer();
    if (before !== undefined) return before;
    const startedMs = Date.now();
    if (!(await this.tableAt(fragment, generation, FAILOVER_CATCH_UP_MS_MAX)))
      return {
        status: 'Failed',
        message: `this node's table did not reach generation ${generation} of fragment ${fragment} in time`,
        result: {},
      };
    // Writes this node's worker took before its table routed the fragment away may still wait in
    // the fragment's actor: they reach the senders only once applied, so a fence behind them comes
    // first, then the drain. At Background priority, behind every queue: a fence at Default would
    // pass the writes an embedded caller queued at Background (a full Background queue runs out in
    // seconds at the background rate; the asking node's catch-up waits 5 s at most meanwhile).
    await this.dispatcher.fenced(fragment, Durability.Memory, true, Priority.Background).catch(() => {});
    const drained = await this.dispatcher
      .drainedUnder(fragment, member, FAILOVER_CATCH_UP_MS_MAX, continuity)
      .catch(() => ({ drained: false, continuous: false }));
    if (!drained.drained) {
      const meanwhile = handedOffAnswer();
      if (meanwhile !== undefined) return meanwhile;
    }
    this.logger.info(
      {
        fragment,
        to: from,
        drained: drained.drained,
        covered: drained.continuous,
        continuity,
        tookMs: Date.now() - startedMs,
      },
      'handing over a fragment',
    );
    return drained.drained
      ? {
          status: 'Ok',
          message: `fragment ${fragment} handed over to ${from}`,
          result: { covered: drained.continuous },
        }
      : {
          status: 'Failed',
          message: `${from} did not acknowledge every write of fragment ${fragment} in time`,
          result: {},
        };
  }

  /**
   * A node hands over its copy of `fragment`, which the table at `generation` no longer lists it
   * for, and asks this node, a replica there, to pull it whole (`handOver`). This node replicates
   * with it meanwhile, runs a complete round against it (no horizon, as a gained copy's
   * verification), and fences what the round merged at `stable` before it answers.
   * `verifiedSuffices`: a copy verified against that node (a gain's or a succession's round,
   * `verifyCopy`, once the one running ends) runs no round; the answer names the continuity it was
   * verified under, and the asker's drain proves the copy complete only while its replication here
   * still has it.
   */
  async serveAbsorb(
    from: string,
    fragment: number,
    generation: number,
    verifiedSuffices: boolean,
  ): Promise<AdminAnswer> {
    const member = this.config.members.indexOf(from);
    if (member === -1 || member === this.config.selfIndex || fragment >= this.routing.length)
      return { status: 'BadRequest', message: `no fragment ${fragment} to absorb from ${from}`, result: {} };
    if (!(await this.tableAt(fragment, generation, PLACEMENT_STEP_TIMEOUT_MS)))
      return {
        status: 'Failed',
        message: `this node's table did not reach generation ${generation} of fragment ${fragment} in time`,
        result: {},
      };
    const replicas = this.coordinatorDriver?.table.active(fragment)?.replicas ?? [];
    if (!replicas.includes(this.config.selfId) || replicas.includes(from))
      return {
        status: 'Conflict',
        message: `the table lists [${replicas.join(', ')}] for fragment ${fragment}: nothing to absorb from ${from}`,
        result: {},
      };
    const startedMs = Date.now();
    // A move's source hands its copy over as soon as the move finishes, which the copy's first
    // verifying round allows: a round against that source may still run. It is the complete round
    // this absorb would run, so it is waited for.
    const verifiedUnder = verifiedSuffices
      ? await this.verifiedUnder(fragment, member, PLACEMENT_STEP_TIMEOUT_MS)
      : 0;
    if (verifiedUnder !== 0) {
      // What the verifying round merged is on disk before the copy handed over may go.
      try {
        await this.dispatcher.fenced(fragment, Durability.Stable, true);
      } catch (err) {
        return { status: 'Failed', message: (err as Error).message, result: {} };
      }
      this.logger.info(
        { fragment, from, verifiedUnder, tookMs: Date.now() - startedMs },
        'a copy handed over was verified against it already: no round',
      );
      return {
        status: 'Ok',
        message: `fragment ${fragment} was verified against ${from} under continuity ${verifiedUnder}`,
        result: { verifiedUnder },
      };
    }
    if (!(await this.dispatcher.beginPull(fragment, member)))
      return { status: 'Conflict', message: `this node holds no copy of fragment ${fragment}`, result: {} };
    try {
      const report = await this.dispatcher.reconcileNow(fragment, member, PLACEMENT_STEP_TIMEOUT_MS, true);
      if (!report.ok)
        return {
          status: 'Failed',
          message: `the round against ${from} did not complete: ${report.reason}`,
          result: {},
        };
      await this.dispatcher.fenced(fragment, Durability.Stable, true);
      this.logger.info(
        { fragment, from, keysPulled: report.keysPulled, tookMs: Date.now() - startedMs },
        'pulled a copy handed over whole',
      );
      // A catch-up from `from` waits no more: its copy is here, and goes once this answer is in.
      this.failover.absorbed(fragment, member);
      return {
        status: 'Ok',
        message: `fragment ${fragment} pulled whole from ${from}`,
        result: { keysPulled: report.keysPulled },
      };
    } catch (err) {
      return { status: 'Failed', message: (err as Error).message, result: {} };
    } finally {
      await this.dispatcher.endPull(fragment, member).catch(() => {});
    }
  }

  /**
   * Resolves, with what is still missing (empty once ready), once this node may serve among running
   * peers, or after `timeoutMs`: a node that joins is admitted and holds the cluster's table, and a
   * node that joins or restarts is connected to every other member its view holds reachable. A
   * request for a fragment only they serve is then forwarded from the first one on, instead of
   * refused as unserved while the node learns the cluster. The first start of a cluster's initial
   * members waits for nothing: they start one by one.
   */
  async readyAmongPeers(timeoutMs: number): Promise<StartMissing> {
    const untilMs = Date.now() + timeoutMs;
    for (;;) {
      const missing = this.startMissing();
      const leftMs = untilMs - Date.now();
      if (!startIncomplete(missing) || leftMs <= 0) return missing;
      await new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer);
          this.startWaiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, leftMs);
        timer.unref();
        this.startWaiters.add(done);
      });
    }
  }

  private startMissing(): StartMissing {
    if (this.startWait === 'none') return { peers: [], admission: false, table: false };
    const joins = this.startWait === 'join';
    return {
      peers: this.config.members.filter(
        (_, m) => m !== this.config.selfIndex && this.memberReachable[m] && !this.mesh.isUp(m),
      ),
      admission: joins && this.membershipDriver?.member(this.config.selfId)?.state === 'Joining',
      table: joins && !(this.coordinatorDriver?.table.listsEveryFragment() ?? false),
    };
  }

  private wakeStartWaiters(): void {
    for (const waiter of this.startWaiters) waiter();
  }

  /** Resolves at this node's next table or serving change, or after `timeoutMs`. */
  private routingChange(timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.routingWaiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, timeoutMs));
      timer.unref();
      this.routingWaiters.add(done);
    });
  }

  /** Resolves true once this node's table holds `fragment` at `generation` or later; false after `timeoutMs`. */
  private async tableAt(fragment: number, generation: number, timeoutMs: number): Promise<boolean> {
    const untilMs = Date.now() + timeoutMs;
    while ((this.coordinatorDriver?.table.active(fragment)?.generation ?? 0) < generation) {
      const leftMs = untilMs - Date.now();
      if (leftMs <= 0) return false;
      await this.routingChange(leftMs);
    }
    return true;
  }

  /**
   * The handoff of a copy this node no longer serves: it replicates to the table's replicas only;
   * every one of them pulls the whole copy onto its disk (`serveAbsorb` there, its table at
   * `generation` or later), and acknowledges at `stable` every write this node holds for it, before
   * the copy may go. The whole copy: it may hold writes that no sender queued for them — taken here
   * before a crash and never sent, or on the side of a partition the others marked this node Down
   * from. A replica whose copy was verified against this one (it gained the fragment while this
   * node served it) pulls nothing when this node's replication to it still has the continuity it
   * was verified under: it then holds every write this node took, as a serving handover's
   * `covered` copy does (src/core/replication-sender.ts); else it pulls the whole copy after all.
   */
  private async handOver(fragment: number, targets: readonly string[], generation: number): Promise<void> {
    const members = this.indicesOf(targets);
    await this.dispatcher.holdFragment(fragment, [this.config.selfIndex, ...members]);
    const absorbed = await Promise.all(members.map((m) => this.absorbedBy(fragment, m, generation)));
    const refused = absorbed.filter((why) => why !== '');
    if (refused.length > 0) throw new Error(refused.join('; '));
    this.handedOff.set(fragment, new Set(members));
  }

  /**
   * One replica's part in a handoff (`handOver`): '' once it holds the whole copy and acknowledged
   * every write at `stable`, else why not.
   */
  private async absorbedBy(fragment: number, member: number, generation: number): Promise<string> {
    const id = this.config.members[member]!;
    const absorb = (verifiedSuffices: boolean) =>
      this.admin.ask(id, { kind: 'absorb', fragment, generation, verifiedSuffices }, ABSORB_TIMEOUT_MS);
    let answer = await absorb(true);
    if (answer.status !== 'Ok') return `the copy is not pulled whole by ${id}: ${answer.message}`;
    const verifiedUnder = answer.result.verifiedUnder;
    if (typeof verifiedUnder === 'number' && verifiedUnder !== 0) {
      const drained = await this.dispatcher.drainedUnder(
        fragment,
        member,
        PLACEMENT_STEP_TIMEOUT_MS,
        verifiedUnder,
        AckLevel.Stable,
      );
      if (!drained.drained) return `not every write is acknowledged by ${id}`;
      if (drained.continuous) return '';
      this.logger.info(
        { fragment, to: id, verifiedUnder },
        'replication to a replica verified against this copy started over since: it pulls the copy whole',
      );
      answer = await absorb(false);
      if (answer.status !== 'Ok') return `the copy is not pulled whole by ${id}: ${answer.message}`;
    }
    const drained = await this.dispatcher.drainedTo(
      fragment,
      member,
      PLACEMENT_STEP_TIMEOUT_MS,
      AckLevel.Stable,
    );
    return drained ? '' : `not every write is acknowledged by ${id}`;
  }

  /**
   * Graceful leave: membership marks this node Leaving, the coordinator moves its replicas away,
   * and once the table lists it nowhere and it holds no copy, it exits membership (Exiting, then
   * Removed).
   */
  async leave(): Promise<{ status: OperatorStatus; message: string }> {
    const membership = this.membershipDriver;
    const table = this.coordinatorDriver?.table;
    if (membership === undefined || table === undefined)
      return { status: 'Conflict', message: 'the node is starting' };
    const refusal = leaveRefusal(this.config.selfId, table, this.coordinatorView(), this.config.replicas);
    if (refusal !== undefined) return { status: 'Conflict', message: refusal };
    const reply = await membership.leave();
    if (reply.status === 'Ok') {
      this.leaving = true;
      this.events.append('LeaveRequested', Date.now(), { node: this.config.selfId });
      this.exitIfLeft();
    }
    return reply;
  }

  /** Cancels this node's leave while it is Leaving: Up again; replicas moved away stay moved. */
  async cancelLeave(): Promise<{ status: OperatorStatus; message: string }> {
    const membership = this.membershipDriver;
    if (membership === undefined) return { status: 'Conflict', message: 'the node is starting' };
    const reply = await membership.cancelLeave();
    if (reply.status === 'Ok') {
      this.leaving = false;
      this.logger.info({}, 'leave cancelled: Up again');
      this.events.append('LeaveCancelled', Date.now(), { node: this.config.selfId });
    }
    return reply;
  }

  private exitIfLeft(): void {
    if (!this.leaving) return;
    const table = this.coordinatorDriver?.table;
    const held = this.placementDriver?.fragments().length ?? 0;
    if (table === undefined || !leaveHandedOver(this.config.selfId, table, held)) return;
    this.leaving = false;
    this.logger.info({}, 'every fragment handed over: leaving membership');
    // A coordinator that has not heard this node leave may still name it a move's target.
    this.placementDriver?.exit();
    this.membershipDriver?.exit().then(
      (reply) => this.logger.info({ status: reply.status }, reply.message),
      () => {},
    );
  }

  private onCoordinatorChanged(coordinator: CoordinatorIdentity | undefined, epoch: number): void {
    this.logger.info(
      { coordinator: coordinator?.id ?? null, incarnation: coordinator?.incarnation, epoch },
      'coordinator changed',
    );
    this.events.append('CoordinatorChanged', Date.now(), { coordinator: coordinator ?? null, epoch });
  }

  /** The coordinator's view of the members: membership's states, reachable when requests may go there. */
  coordinatorView(): CoordinatorMemberView[] {
    const view = this.membershipDriver?.view() ?? [];
    const c = this.config;
    return view.map((v) => {
      const m = c.members.indexOf(v.nodeId);
      const reachable = m === c.selfIndex || (m !== -1 && this.isUp(m));
      return { id: v.nodeId, state: v.state, reachable, incarnation: v.incarnation };
    });
  }

  /** Tells the coordinator the view changed, once per burst of member events and connection changes. */
  private scheduleView(): void {
    if (this.viewScheduled) return;
    this.viewScheduled = true;
    queueMicrotask(this.viewTask);
  }

  private sendView(): void {
    this.viewScheduled = false;
    this.coordinatorDriver?.onView(this.coordinatorView());
    this.failover.check();
  }

  /** How `member` stands in this node's view. */
  memberHealth(member: number): MemberHealth {
    if (member === this.config.selfIndex) return 'ok';
    const state = this.memberStates[member];
    if (state === 'Down' || state === 'Removed') return 'fail';
    return this.isUp(member) ? 'ok' : 'pfail';
  }

  private async listenForDatagrams(port: number): Promise<void> {
    const host = this.config.peerBind;
    const udp = createSocket({ type: host.includes(':') ? 'udp6' : 'udp4' });
    udp.on('message', (datagram, remote) => {
      this.membershipDriver?.onDatagram(datagram, `${remote.address}:${remote.port}`);
    });
    await bindDatagrams(udp, port, host);
    udp.on('error', (err) => this.logger.warn({ err: err.message }, 'membership datagram socket error'));
    this.udp = udp;
  }

  private sendDatagram(address: string, datagram: Buffer): void {
    const to = parsePeerAddress(address);
    if (to === undefined || this.udp === undefined || datagram.length > MEMBERSHIP_DATAGRAM_BYTES_MAX) return;
    // A failed send is a lost datagram, which the detector expects; the socket's error handler logs.
    this.udp.send(datagram, to.port, to.host);
  }

  private onMemberEvent(event: MemberEventRecord): void {
    let m = this.config.members.indexOf(event.member.nodeId);
    if (m === -1 && event.member.state !== 'Removed') m = this.addMember(event.member.nodeId);
    if (m !== -1 && m !== this.config.selfIndex && this.config.addresses[m] === undefined) {
      const address = parsePeerAddress(event.member.address);
      if (address !== undefined) this.mesh.addressKnown(m, address);
    }
    if (m !== -1 && m !== this.config.selfIndex) {
      const v = event.member;
      const wasServing = this.isUp(m);
      const wasReachable = this.memberReachable[m];
      this.memberStates[m] = v.state;
      this.memberReachable[m] = !v.unreachable && v.state !== 'Down' && v.state !== 'Removed';
      if (wasReachable && !this.memberReachable[m]) this.unreachableSinceMs[m] = event.atMs;
      else if (this.memberReachable[m]) this.unreachableSinceMs[m] = 0;
      // What was forwarded to a member that stopped answering goes to the next replica now.
      if (wasServing && !this.isUp(m)) this.peerLinks[m]?.onDisconnect();
    }
    if (event.member.nodeId === this.config.selfId) {
      const admitted = event.kind === 'MemberUp' && this.selfJoining;
      this.selfJoining = event.member.state === 'Joining';
      if (admitted) this.onAdmitted();
    }
    this.scheduleView();
    this.wakeStartWaiters();
    if (event.kind !== 'Initialized') {
      const level = event.kind === 'MemberUnreachable' || event.kind === 'MemberDown' ? 'warn' : 'info';
      this.logger[level](
        {
          event: event.kind,
          member: event.member.nodeId,
          state: event.member.state,
          unreachable: event.member.unreachable,
          incarnation: event.member.incarnation,
        },
        'member event',
      );
    }
    this.events.append(event.kind, event.atMs, { member: event.member, memberSequence: event.sequence });
  }

  /**
   * A peer that proved the cluster secret but is not in the member list: a node joining through
   * this one, a member this node has not heard of yet, or the seed this node dials to join. A
   * member membership holds Removed is refused until it is wiped and joins with a new id.
   */
  private admit(peerId: string): number | string {
    if (!isValidNodeId(peerId)) return 'not a valid node id';
    const known = this.membershipDriver?.member(peerId);
    if (known?.state === 'Removed')
      return 'this node id was removed from the cluster; wipe the node and join with a new id';
    if (this.config.members.length >= MEMBERSHIP_MEMBERS_MAX)
      return 'the cluster has as many members as it may';
    return this.addMember(peerId);
  }

  /** Appends a member slot (indices never change) and makes room for it everywhere. */
  private addMember(nodeId: string): number {
    const c = this.config;
    const m = c.members.length;
    c.members.push(nodeId);
    c.addresses.push(undefined);
    this.memberReachable.push(true);
    this.memberStates.push('Joining');
    this.unreachableSinceMs.push(0);
    this.peerLinks.push(new PeerLink(m, nodeId, this));
    this.results.push(new ListFrameBuilder(EnvelopeField.ForwardedResults, RESULTS_FIELD));
    this.mesh.memberAdded(m);
    void this.dispatcher.memberAdded(m, nodeId);
    this.dispatcher.clientEndpointsChanged();
    this.logger.info({ member: nodeId, index: m }, 'member admitted');
    return m;
  }

  /** Cluster events after sequence `after` (for `GET /cluster/events`). */
  eventsSince(after: number): { events: Array<LoggedEvent<ClusterEventData>>; lost: number } {
    return this.events.since(after);
  }

  /** Member index of the fragment's first serving replica (-1 when none is reachable). */
  servingMember(fragment: number): number {
    return this.firstRouted(fragment, this.localServing[fragment] === 1);
  }

  /**
   * The first replica `routing` lists that is up, or this node where `selfCounts` (it serves the
   * fragment; or, asking whether the table puts it first, whether or not it serves); -1 when none.
   */
  private firstRouted(fragment: number, selfCounts: boolean): number {
    const self = this.config.selfIndex;
    for (const member of this.routing[fragment])
      if (member === self ? selfCounts : this.isUp(member)) return member;
    return -1;
  }

  /** Connected and not unreachable, Down or Removed to membership: requests may go to it. */
  isUp(member: number): boolean {
    return this.mesh.isUp(member) && this.memberReachable[member];
  }

  /** Wall-clock ms since when `member` has been disconnected; undefined while connected (or self). */
  downSinceOf(member: number): number | undefined {
    return this.mesh.downSinceOf(member);
  }

  /**
   * Wall-clock ms since when `member` has not been up (`isUp`): disconnected, or unreachable, Down
   * or Removed to membership, whichever began first of those that still hold; undefined while up
   * (or self).
   */
  notUpSinceOf(member: number): number | undefined {
    if (member === this.config.selfIndex || this.isUp(member)) return undefined;
    const disconnectedMs = this.mesh.downSinceOf(member);
    const unreachableMs = this.memberReachable[member] ? undefined : this.unreachableSinceMs[member];
    if (disconnectedMs === undefined) return unreachableMs;
    return unreachableMs === undefined ? disconnectedMs : Math.min(disconnectedMs, unreachableMs);
  }

  /** Membership's view with each member's connection, health and reporters (undefined before start). */
  membershipReport(): MembershipReport | undefined {
    const driver = this.membershipDriver;
    if (driver === undefined) return undefined;
    const members = driver.view().map((view): MemberReport => {
      const m = this.config.members.indexOf(view.nodeId);
      const self = m === this.config.selfIndex;
      return {
        ...view,
        self,
        connected: self || (m !== -1 && this.mesh.isUp(m)),
        health: m !== -1 ? this.memberHealth(m) : viewHealth(view),
        reporters: driver.reportersOf(view.nodeId),
      };
    });
    return {
      members,
      localHealth: driver.healthMultiplier(),
      traffic: { ...driver.traffic },
      counters: { ...driver.counters },
    };
  }

  /** Members this node reaches: itself and every connected peer. */
  reachableMembers(): number {
    let n = 0;
    for (let m = 0; m < this.config.members.length; m++) {
      if (this.isMember(m) && (m === this.config.selfIndex || this.isUp(m))) n++;
    }
    return n;
  }

  /** Members that count (majorities, reports, CLUSTER NODES): not Removed, and known to membership. */
  memberCount(): number {
    let n = 0;
    for (let m = 0; m < this.config.members.length; m++) if (this.isMember(m)) n++;
    return n;
  }

  /**
   * Whether member slot `m` is a member: one the node started with or membership knows, and not
   * Removed. A peer admitted by the handshake that never joined has a slot, but is not a member.
   */
  isMember(m: number): boolean {
    if (this.memberStates[m] === 'Removed') return false;
    return m < this.workerMembers || this.membershipDriver?.member(this.config.members[m]) !== undefined;
  }

  /**
   * 'ok' when this node reaches a majority of the members (itself included) and every fragment has
   * a reachable serving replica, as Redis Cluster's rule: a node cut off from the majority says
   * 'fail' even while it holds a copy of everything, so two islands never both say 'ok'.
   */
  state(): 'ok' | 'fail' {
    if (this.refusedReason !== undefined) return 'fail';
    if (this.reachableMembers() <= this.memberCount() / 2) return 'fail';
    for (let f = 0; f < this.routing.length; f++) {
      if (this.servingMember(f) === -1) return 'fail';
    }
    return 'ok';
  }

  /** Bytes sent to `member`: all, replication (sessions, batches, ACKs), anti-entropy. */
  trafficTo(member: number): {
    bytesSent: number;
    replicationBytesSent: number;
    antiEntropyBytesSent: number;
  } {
    const b = this.mesh.bytesSentTo(member);
    const sum = (from: number, to: number) => {
      let n = 0;
      for (let f = from; f <= to; f++) n += b[f];
      return n;
    };
    return {
      bytesSent: sum(0, 15),
      replicationBytesSent: sum(EnvelopeField.SessionStart, EnvelopeField.BatchNack),
      antiEntropyBytesSent: sum(EnvelopeField.ReconcileRequest, EnvelopeField.ReconcileData),
    };
  }

  /** Operations forwarded to `member` and not yet answered. */
  forwardsInFlight(member: number): number {
    return this.peerLinks[member]?.pending ?? 0;
  }

  // --- ClusterRouter -----------------------------------------------------------------------------

  routeOf(fragment: number): OpLink | undefined {
    // A node the cluster refused (removed) serves nothing: its copies are no longer the cluster's.
    if (this.refusedLink !== undefined) return this.refusedLink;
    const member = this.servingMember(fragment);
    if (member === this.config.selfIndex) return this.failover.link(fragment);
    if (member === -1) {
      this.unreachable[fragment] ??= new UnreachableLink(unavailable(fragment));
      return this.unreachable[fragment];
    }
    return this.peerLinks[member];
  }

  get servingStamp(): number {
    return this.failover.servingStamp;
  }

  get servingTable(): SharedArrayBuffer {
    return this.failover.published.buffer as SharedArrayBuffer;
  }

  get selfIndex(): number {
    return this.config.selfIndex;
  }

  clientEndpoints(): ClientEndpoint[] {
    return this.config.members.map((_, m) => {
      const workers = this.peerWorkerPorts[m];
      return {
        host: this.config.addresses[m]?.host ?? '',
        port: m === this.config.selfIndex ? this.config.clientPort : this.mesh.clientPortOf(m),
        workerPorts: workers?.workerPorts ?? [],
        workerGroups: workers?.workerGroups ?? 0,
      };
    });
  }

  /**
   * This node's workers serve clients on `ports` (empty: no longer): told to every peer that takes
   * it now, and to each that connects later.
   */
  announceWorkerPorts(ports: readonly number[], groups: number): void {
    this.ownWorkerPorts = { workerPorts: [...ports], workerGroups: groups };
    for (let m = 0; m < this.config.members.length; m++) this.sendWorkerPorts(m);
  }

  private sendWorkerPorts(member: number): void {
    const own = this.ownWorkerPorts;
    if (own === undefined || member === this.config.selfIndex) return;
    if (!this.peerTakes(member, CAPABILITY_CLIENT_PORTS)) return;
    this.mesh.send(member, encodeEnvelope({ clientPorts: own }));
  }

  /** A peer's ClientPorts: where its workers serve clients from now on. */
  private onClientPorts(member: number, bytes: Buffer): string | undefined {
    let message: ClientPortsMessage | undefined;
    try {
      message = decodeEnvelope(bytes).clientPorts;
    } catch (err) {
      return `malformed ClientPorts: ${(err as Error).message}`;
    }
    if (message === undefined) return 'malformed ClientPorts';
    const { workerPorts, workerGroups } = message;
    if (
      workerPorts.length > WORKER_COUNT_MAX ||
      workerPorts.some((p) => p > 65535) ||
      (workerPorts.length > 0 && (workerGroups < 1 || workerGroups > FRAGMENT_COUNT_MAX))
    )
      return `ClientPorts out of range: ${workerPorts.length} ports, ${workerGroups} groups`;
    this.peerWorkerPorts[member] = workerPorts.length === 0 ? undefined : { workerPorts, workerGroups };
    this.dispatcher.clientEndpointsChanged();
    return undefined;
  }

  servingChangedAt(fragment: number): number {
    return this.failover.servingChangedAt(fragment);
  }

  /** This node holds a copy it may answer from: one it serves, or one it is handing over. */
  holds(fragment: number): boolean {
    if (this.localServing[fragment] === 1) return true;
    return this.placementDriver?.fragment(fragment)?.state === 'Draining';
  }

  workerInit(): ClusterInit {
    const c = this.config;
    return {
      members: c.members,
      selfIndex: c.selfIndex,
      replicas: c.placement.replicas.map((r) => [...r]),
      requiredAck: c.requiredAck,
      antiEntropyIntervalMs: c.antiEntropyIntervalMs,
      maxClockSkewMs: this.dispatcher.maxClockSkewMs,
      // Each worker pulls an even share of the node's rate (0 stays unlimited).
      pullBytesPerSec: Math.ceil(c.moveRateBytesPerSec / this.dispatcher.workerCount),
      compareKeysPerSec: Math.ceil(c.antiEntropyKeysPerSec / this.dispatcher.workerCount),
    };
  }

  onPeerFrame(member: number, buf: Buffer, start: number, end: number): void {
    // The envelope goes out framed; the copy leaves ring memory free for the worker.
    this.mesh.send(member, buf.subarray(start, end));
  }

  onPeerClose(member: number, reason: string): void {
    this.logger.warn({ peer: this.config.members[member], reason }, 'closing peer connection');
    this.mesh.drop(member, reason);
  }

  onWorkerServing(link: WorkerLink, fragments: readonly number[]): void {
    // A worker that restarted may have lost what its rounds merged and had not committed, and its
    // peers' runs of replication go on where it had acknowledged nothing (replication-sender.ts):
    // its copies' verification goes with it. (Its reports of rounds before came ahead of this.)
    for (const fragment of fragments) this.verification.delete(fragment);
    for (let m = 0; m < this.config.members.length; m++)
      if (this.mesh.isUp(m)) link.sendPeerState(m, true, this.takesFragmentAbsent(m));
  }

  // --- PeerLinkHost ------------------------------------------------------------------------------

  sendFrame(member: number, frame: Buffer): boolean {
    return this.mesh.sendFrame(member, frame);
  }

  resubmit(fragment: number, request: Buffer, handler: ResultHandler<unknown>, token: unknown): void {
    if (this.failover.link(fragment) !== undefined) {
      // This node took the fragment over and is catching up: the request waits with the others.
      this.failover.holdForwarded(
        fragment,
        () => this.resubmit(fragment, request, handler, token),
        (error) => handler.onFailure(token, error),
      );
      return;
    }
    const link = this.routeOf(fragment);
    if (link === undefined) {
      const error = this.dispatcher.submitEncoded(fragment, request, handler, token);
      if (error !== undefined) handler.onFailure(token, error);
    } else if (link instanceof PeerLink) {
      link.forward(request, 0, 0, handler, token);
    } else {
      handler.onFailure(token, link.refusal());
    }
  }

  // --- inbound -----------------------------------------------------------------------------------

  private takesFragmentAbsent(member: number): boolean {
    return this.peerTakes(member, CAPABILITY_FRAGMENT_ABSENT);
  }

  /** Whether the peer's connection advertised `capability`. */
  private peerTakes(member: number, capability: number): boolean {
    return (this.mesh.capabilitiesOf(member) & capability) !== 0;
  }

  private onPeerState(member: number, up: boolean): void {
    // Workers learn every member slot (Dispatcher.memberAdded), so a replica list may name a joined one.
    const takesAbsent = this.takesFragmentAbsent(member);
    for (const link of this.dispatcher.links) link.sendPeerState(member, up, takesAbsent);
    // A peer's worker ports are told again on each connection (they may differ after its restart).
    if (up) {
      this.sendWorkerPorts(member);
      this.wakeStartWaiters();
    } else {
      this.peerWorkerPorts[member] = undefined;
    }
    this.dispatcher.clientEndpointsChanged();
    if (!up) {
      // Fragments this node takes over start their catch-up before the requests in flight to the
      // lost peer come back to be sent again: those wait for it rather than read a stale copy.
      this.failover.check();
      this.peerLinks[member]?.onDisconnect();
      this.membershipDriver?.connectionLost(this.config.members[member]);
      this.admin.connectionLost(this.config.members[member]);
    }
    this.scheduleView();
  }

  private onFrame(member: number, peek: EnvelopePeek, bytes: Buffer): void {
    if (isFragmentMessage(peek.field)) return this.routeFragmentFrame(member, peek, bytes);
    if (peek.field === EnvelopeField.ForwardedOps) return this.serveForwarded(member, bytes, peek);
    if (peek.field === EnvelopeField.ForwardedResults) {
      const link = this.peerLinks[member];
      if (link?.onResults(bytes, peek.start, peek.end)) return;
      return this.mesh.drop(member, 'malformed forwarded results');
    }
    if (peek.field === EnvelopeField.Placement) {
      const reason = this.coordinatorDriver?.onEnvelope(bytes, this.dispatcher.keyspace.fragmentCount);
      if (reason !== undefined) this.mesh.drop(member, reason);
      return;
    }
    if (peek.field === EnvelopeField.ClientPorts) {
      const reason = this.onClientPorts(member, bytes);
      if (reason !== undefined) this.mesh.drop(member, reason);
      return;
    }
    if (peek.field === EnvelopeField.Admin) {
      const reason = this.admin.onEnvelope(this.config.members[member], bytes);
      if (reason !== undefined) this.mesh.drop(member, reason);
      return;
    }
    if (isMembershipMessage(peek.field)) {
      const reason = this.membershipDriver?.onEnvelope(bytes);
      if (reason !== undefined) this.mesh.drop(member, reason);
      return;
    }
    if (peek.field === EnvelopeField.PublishBatch) {
      if (this.pubsub.receive(bytes)) return;
      return this.mesh.drop(member, 'malformed or oversized Pub/Sub batch');
    }
    this.mesh.drop(member, `unexpected message (field ${peek.field})`);
  }

  /** Replication and anti-entropy frames go, as bytes, to the worker owning their fragment. */
  private routeFragmentFrame(member: number, peek: EnvelopePeek, bytes: Buffer): void {
    const fields = peekFragment(bytes, peek.start, peek.end, maxWallMsField(peek.field));
    if (fields === undefined) return this.mesh.drop(member, 'malformed fragment message');
    if (fields.fragment >= this.dispatcher.keyspace.fragmentCount) {
      return this.mesh.drop(member, `fragment ${fields.fragment} out of range`);
    }
    if (bytes.length > this.frameBytesMax) {
      return this.mesh.drop(
        member,
        `replication frame of ${bytes.length} bytes exceeds ${this.frameBytesMax}`,
      );
    }
    // The clock must order later local writes after what arrives, and must never take a timestamp
    // too far ahead (spec §2.3): such a peer is cut off, its frame never applied.
    if (fields.maxWallMs > 0 && !this.dispatcher.observeRemote(fields.maxWallMs)) {
      return this.mesh.drop(member, `timestamp ${fields.maxWallMs} is too far ahead of this node's clock`);
    }
    this.dispatcher.workerLinkOf(fields.fragment).sendPeerFrame(member, bytes);
  }

  /** Runs forwarded operations here (or passes them on when this node holds no copy). */
  private serveForwarded(member: number, bytes: Buffer, peek: EnvelopePeek): void {
    let hops = 0;
    let generation = 0;
    const ops: Array<[number, number]> = [];
    const wellFormed = forEachField(
      bytes,
      peek.start,
      peek.end,
      2,
      (start, end) => ops.push([start, end]),
      (field, value) => {
        if (field === HOPS_FIELD) hops = value;
        else if (field === GENERATION_FIELD) generation = value;
      },
    );
    if (!wellFormed) return this.mesh.drop(member, 'malformed forwarded operations');
    const fragmentCount = this.dispatcher.keyspace.fragmentCount;
    for (const [start, end] of ops) {
      const op = bytes.subarray(start, end);
      const reason = checkRequest(op, fragmentCount, this.fragmentOf);
      if (reason !== undefined) return this.mesh.drop(member, `forwarded operation refused: ${reason}`);
      const fragment = requestFragment(op, 0);
      const reqId = requestId(op, 0);
      this.serveForwardedOp({ member, reqId, fragment, op, owned: false, hops, generation, untilMs: 0 });
    }
  }

  /**
   * Only the fragment's first serving replica, as this node's table has it, applies what was
   * forwarded to it (once caught up, after a failover): a copy that is still copying or is being
   * handed over, or a serving one the table has put after another (a sender whose table is older
   * still sends here), passes it on — two copies taking writes at once would make one of them lose.
   * Where the nodes disagree for a moment, the one behind waits (src/core/forwarding.ts).
   */
  private serveForwardedOp(forwarded: ForwardedOp): void {
    const fragment = forwarded.fragment;
    const next = this.routeOf(fragment);
    const view = this.forwardView;
    view.serving = this.localServing[fragment] === 1;
    view.listedFirst = this.firstRouted(fragment, true) === this.config.selfIndex;
    view.generation = this.routedGeneration[fragment];
    view.senderGeneration = forwarded.generation;
    view.next = !(next instanceof PeerLink)
      ? next === undefined || next === this.failover.link(fragment)
        ? 'self'
        : 'none'
      : next.member === forwarded.member
        ? 'sender'
        : 'other';
    view.hops = forwarded.hops;
    this.deciding = forwarded;
    switch (forwardStep(view, this.mayWaitDeciding)) {
      case 'wait':
        return this.park(forwarded);
      case 'refuse':
        return this.refuseForwarded(forwarded);
      case 'relay': {
        const op = forwarded.op;
        forwarded.op = NO_BYTES; // the link keeps its own copy
        const answer = this.answerOrigin as ResultHandler<unknown>;
        return (next as PeerLink).forward(op, forwarded.hops + 1, view.generation, answer, forwarded);
      }
      case 'serve':
        break;
    }
    if (next !== undefined) {
      this.own(forwarded);
      this.failover.holdForwarded(
        fragment,
        () => this.serveForwardedOp(forwarded),
        (error) => this.answerOrigin.onFailure(forwarded, error),
      );
      return;
    }
    const error = this.dispatcher.submitForwarded(fragment, forwarded.op, this.answerOrigin, forwarded);
    forwarded.op = NO_BYTES; // copied into the ring: the token must not keep the frame alive
    if (error !== undefined) this.answerOrigin.onFailure(forwarded, error);
  }

  private refuseForwarded(forwarded: ForwardedOp): void {
    const { fragment, hops } = forwarded;
    const entry = this.coordinatorDriver?.table.active(fragment);
    this.logger.warn(
      {
        fragment,
        hops,
        from: this.config.members[forwarded.member],
        generation: this.routedGeneration[fragment],
        senderGeneration: forwarded.generation,
        replicas: entry?.replicas ?? null,
        serving: this.localServing[fragment] === 1,
      },
      'forwarded operation refused: no replica to pass it on to',
    );
    this.answerOrigin.onFailure(
      forwarded,
      networkError(
        `node ${this.config.selfId} does not serve fragment ${fragment} and cannot forward it (hops ${hops}); ` +
          'check that every node has the same --peers and --replicas',
      ),
    );
  }

  /** Whether the operation being decided may still wait here (its wait starts at the first ask). */
  private mayWait(): boolean {
    const forwarded = this.deciding!;
    const nowMs = Date.now();
    if (forwarded.untilMs === 0) forwarded.untilMs = nowMs + FORWARD_DISAGREEMENT_WAIT_MS;
    return nowMs < forwarded.untilMs;
  }

  /** Waits for this node's table or serving to change (until the operation's deadline), then tries again. */
  private park(forwarded: ForwardedOp): void {
    this.own(forwarded);
    void this.routingChange(forwarded.untilMs - Date.now()).then(() => this.serveForwardedOp(forwarded));
  }

  /** The frame's bytes are not ours past this turn: an operation that waits keeps a copy. */
  private own(forwarded: ForwardedOp): void {
    if (forwarded.owned) return;
    forwarded.op = Buffer.from(forwarded.op);
    forwarded.owned = true;
  }

  /** Queues a result for its origin, under the origin's request id. */
  private answer(origin: Origin, buf: Buffer, at: number, length: number): void {
    const batch = this.results[origin.member];
    const p = batch.reserve(length);
    copyRange(buf, at, at + length, batch.buffer, p);
    setResultId(batch.buffer, p, origin.reqId);
    if (!this.resultsFlushScheduled) {
      this.resultsFlushScheduled = true;
      queueMicrotask(this.flushResultsTask);
    }
  }

  private flushResults(): void {
    this.resultsFlushScheduled = false;
    for (const [member, batch] of this.results.entries()) {
      // An origin that went away retries elsewhere; its results are dropped with the frame.
      if (batch.count > 0) this.mesh.sendFrame(member, batch.finish());
    }
  }
}
