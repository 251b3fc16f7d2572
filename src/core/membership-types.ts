// The vocabulary of cluster membership (core/membership.ts): member states and datum's event kinds,
// the updates and messages members exchange (typed objects; their wire encoding is the driver's),
// the events the core takes and the actions it gives, its configuration with the defaults from
// limits.ts, and the checks of what arrives from peers.

import { assert } from './assert.js';
import {
  MEMBERSHIP_AWARENESS_MAX_MULT,
  MEMBERSHIP_DISCOVERY_MS_MAX,
  MEMBERSHIP_DISCOVERY_RESEND_MS,
  MEMBERSHIP_DOWN_AFTER_MS_DEFAULT,
  MEMBERSHIP_GOSSIP_INTERVAL_MS,
  MEMBERSHIP_GOSSIP_NODES,
  MEMBERSHIP_INDIRECT_PROBES,
  MEMBERSHIP_JOIN_RETRY_MS,
  MEMBERSHIP_LEAVE_LINGER_MS,
  MEMBERSHIP_MEMBERS_MAX,
  MEMBERSHIP_PROBE_INTERVAL_MS,
  MEMBERSHIP_PROBE_TIMEOUT_MS,
  MEMBERSHIP_PUSH_PULL_INTERVAL_MS,
  MEMBERSHIP_RELAY_TIMEOUT_MS,
  MEMBERSHIP_REPORT_REFRESH_MS,
  MEMBERSHIP_REPORT_TTL_MS,
  MEMBERSHIP_RETRANSMIT_MULT,
  MEMBERSHIP_STALL_MS,
  MEMBERSHIP_SUSPICION_CONFIRMATIONS,
  MEMBERSHIP_SUSPICION_MAX_TIMEOUT_MULT,
  MEMBERSHIP_SUSPICION_MULT,
  MEMBERSHIP_UPDATES_PER_MESSAGE_MAX,
  NODE_ID_BYTES_MAX,
} from './limits.js';

export type MemberState = 'Joining' | 'Up' | 'Leaving' | 'Exiting' | 'Down' | 'Removed';
/** The states a member asserts about itself, in the order they follow each other. */
export type SelfState = 'Joining' | 'Up' | 'Leaving' | 'Exiting';
export const SELF_STATE_RANK: Record<SelfState, number> = { Joining: 0, Up: 1, Leaving: 2, Exiting: 3 };

/** datum's 11 member event kinds, with its wire names (datum §2.1). */
export type MemberEventKind =
  | 'Initialized'
  | 'MemberJoining'
  | 'MemberUp'
  | 'MemberUpdated'
  | 'MemberUnreachable'
  | 'MemberReachable'
  | 'MemberLeaving'
  | 'MemberExiting'
  | 'MemberDown'
  | 'MemberRemoved'
  | 'MemberRejoined';

export const STATE_EVENT: Record<MemberState, MemberEventKind> = {
  Joining: 'MemberJoining',
  Up: 'MemberUp',
  Leaving: 'MemberLeaving',
  Exiting: 'MemberExiting',
  Down: 'MemberDown',
  Removed: 'MemberRemoved',
};

/** What is persisted per member, and what a member list given at start holds. */
export interface MemberRecord {
  nodeId: string;
  address: string;
  incarnation: number;
  state: MemberState;
}

/**
 * Whether a node started with join seeds joins through them: unless the members it persisted name
 * another node (it joined before, or was a member all along), in which case the start is a restart
 * that rejoins them. A node killed mid-join persisted only itself, so it joins again.
 */
export function startsJoining(
  selfId: string,
  joinSeeds: number,
  persisted: readonly MemberRecord[],
): boolean {
  return joinSeeds > 0 && !persisted.some((r) => r.nodeId !== selfId);
}

/** A member as this node sees it. */
export interface MemberView extends MemberRecord {
  unreachable: boolean;
  suspect: boolean;
}

/** One fact about a member, gossiped. `reporter` is the node that observed it. */
export type MemberUpdate =
  | { kind: 'alive'; nodeId: string; address: string; incarnation: number; state: SelfState }
  | { kind: 'suspect'; nodeId: string; incarnation: number; reporter: string }
  | { kind: 'unreachable'; nodeId: string; incarnation: number; reporter: string }
  | { kind: 'down'; nodeId: string; incarnation: number; reporter: string }
  | { kind: 'removed'; nodeId: string; incarnation: number; reporter: string };

/** Messages between members; the wire encoding is the driver's. `from` is the sender's node id. */
export type MembershipMessage =
  | { kind: 'ping'; from: string; seq: number; target: string; updates: MemberUpdate[] }
  | { kind: 'ack'; from: string; seq: number; updates: MemberUpdate[] }
  | { kind: 'nack'; from: string; seq: number; updates: MemberUpdate[] }
  | { kind: 'ping-req'; from: string; seq: number; target: string; updates: MemberUpdate[] }
  | { kind: 'gossip'; from: string; updates: MemberUpdate[] }
  /** Push-pull: the sender's full state; `reply` asks for the receiver's in return. */
  | { kind: 'sync'; from: string; reply: boolean; members: MemberUpdate[] }
  | {
      kind: 'join-request';
      from: string;
      address: string;
      incarnation: number;
      /** The joiner holds none of the data an earlier run of its id may have held. */
      withoutData: boolean;
    }
  | { kind: 'join-accept'; from: string; members: MemberUpdate[] }
  /**
   * The receiver is not (or no longer) a member: a removed node, a duplicate id. With `retry`, only
   * not yet: its join waits for the cluster (its lost copies being dropped) and is asked again.
   */
  | { kind: 'refuse'; from: string; reason: string; retry?: boolean };

export type OperatorStatus = 'Ok' | 'BadRequest' | 'NotFound' | 'Conflict';

export type MembershipEvent =
  | { kind: 'tick'; nowMs: number }
  /** `remote`: where a datagram came from, when it came as one (a refusal answers there). */
  | { kind: 'message'; message: MembershipMessage; nowMs: number; remote?: string }
  /** Join the cluster through these seeds (ids proven by the handshake), tried in turn. */
  | { kind: 'join'; seeds: ReadonlyArray<{ nodeId: string; address: string }>; nowMs: number }
  /** The operator asks this node to leave: it becomes Leaving while its data is handed off. */
  | { kind: 'leave'; requestId: number; nowMs: number }
  /**
   * The operator cancels this node's leave while it is Leaving (a leave that cannot finish, or was
   * asked by mistake): Up again at a new incarnation, as CockroachDB's `node recommission`.
   */
  | { kind: 'cancel-leave'; requestId: number; nowMs: number }
  /** The leaving node's data is handed off: Exiting, then Removed, then `left`. */
  | { kind: 'exit'; requestId: number; nowMs: number }
  /** The operator removes a Down member (like `nodetool removenode`). */
  | { kind: 'remove'; nodeId: string; requestId: number; nowMs: number }
  /**
   * This node cannot take its place in the cluster (it came back without the copies the table lists
   * it for): it stops as a removed member does, with the reason.
   */
  | { kind: 'give-up'; reason: string; nowMs: number }
  /**
   * The peer connection to a member closed (a crash closes it at once): probe that member next,
   * without waiting for its turn, so a dead member is suspected within one probe timeout.
   */
  | { kind: 'connection-lost'; nodeId: string; nowMs: number }
  /**
   * Exchange the whole view with `nodeId` now (a push-pull out of turn): the placement coordinator
   * found one of the two views behind.
   */
  | { kind: 'sync-with'; nodeId: string; nowMs: number }
  /**
   * The members the placement table this node routes by lists (as replicas, a move's source or
   * target): a member held Down counts toward a Down decision's majority while the table lists it.
   * `onlyCopies`: those of them that hold some fragment's only whole copy (absent: none).
   */
  | { kind: 'placed'; members: readonly string[]; onlyCopies?: readonly string[]; nowMs: number };

export interface MemberEventRecord {
  /** From 1, per node, with no gaps. */
  sequence: number;
  kind: MemberEventKind;
  member: MemberView;
  atMs: number;
}

export type MembershipAction =
  | { kind: 'send'; to: string; address: string; message: MembershipMessage }
  /** Save before carrying out any later action: a reused incarnation could not refute. */
  | { kind: 'persist'; incarnation: number; members: MemberRecord[] }
  | { kind: 'member-event'; event: MemberEventRecord }
  | { kind: 'reply'; requestId: number; status: OperatorStatus; message: string }
  /** This node was refused (removed, or its join refused): the driver stops it with the reason. */
  | { kind: 'refused'; reason: string }
  /** The graceful leave is complete and gossiped: the driver may stop the node. */
  | { kind: 'left' }
  /**
   * A member's record of this node from an earlier run (an incarnation this run never held) reached
   * it: this node id was a member before this process started. Told once per run.
   */
  | { kind: 'earlier-run'; incarnation: number }
  /**
   * `member` asks this seed to join at `incarnation` without its earlier run's data while the table
   * lists it: the placement coordinator must drop its lost copies before it is admitted.
   */
  | { kind: 'lost-copies'; member: string; incarnation: number }
  | { kind: 'log'; level: 'info' | 'warn'; message: string };

export interface MembershipConfig {
  nodeId: string;
  /** host:peerPort others dial. */
  address: string;
  /** The incarnation persisted by the last run, or undefined on a first start. This start uses one more. */
  restoredIncarnation: number | undefined;
  /** Members known at start (--peers as Up at incarnation 0, or the persisted list); self is skipped. */
  members: readonly MemberRecord[];
  /**
   * 'Joining' for a node that will join through a seed; 'Up' for a static or one-member start;
   * 'Leaving' for a node whose last run began to leave and did not finish.
   */
  selfState: 'Joining' | 'Up' | 'Leaving';
  /**
   * This run holds none of the data an earlier run of this node id may have held (the memory store,
   * a new data directory): its join says so, and a seed whose table lists the id has the placement
   * coordinator drop its lost copies first (or refuses it, where it held a fragment's only copy).
   * Started 'Up' among members, it first asks them whether they knew its id (discovery): once one
   * shows a record of an earlier run it joins through them so; otherwise it is Up.
   */
  withoutData?: boolean;
  /** A self record persisted as Removed: the node starts refused. */
  selfRemoved: boolean;
  probeIntervalMs: number;
  probeTimeoutMs: number;
  indirectProbes: number;
  relayTimeoutMs: number;
  suspicionMult: number;
  suspicionConfirmations: number;
  suspicionMaxTimeoutMult: number;
  awarenessMaxMult: number;
  gossipIntervalMs: number;
  gossipNodes: number;
  retransmitMult: number;
  updatesPerMessageMax: number;
  pushPullIntervalMs: number;
  downAfterMs: number;
  reportRefreshMs: number;
  reportTtlMs: number;
  joinRetryMs: number;
  /** How long a start without data waits for its members to say whether they knew it (`discovery`). */
  discoveryMs: number;
  discoveryResendMs: number;
  leaveLingerMs: number;
  stallMs: number;
}

export const MEMBERSHIP_CONFIG_DEFAULTS: Omit<
  MembershipConfig,
  'nodeId' | 'address' | 'restoredIncarnation' | 'members' | 'selfState' | 'selfRemoved'
> = {
  probeIntervalMs: MEMBERSHIP_PROBE_INTERVAL_MS,
  probeTimeoutMs: MEMBERSHIP_PROBE_TIMEOUT_MS,
  indirectProbes: MEMBERSHIP_INDIRECT_PROBES,
  relayTimeoutMs: MEMBERSHIP_RELAY_TIMEOUT_MS,
  suspicionMult: MEMBERSHIP_SUSPICION_MULT,
  suspicionConfirmations: MEMBERSHIP_SUSPICION_CONFIRMATIONS,
  suspicionMaxTimeoutMult: MEMBERSHIP_SUSPICION_MAX_TIMEOUT_MULT,
  awarenessMaxMult: MEMBERSHIP_AWARENESS_MAX_MULT,
  gossipIntervalMs: MEMBERSHIP_GOSSIP_INTERVAL_MS,
  gossipNodes: MEMBERSHIP_GOSSIP_NODES,
  retransmitMult: MEMBERSHIP_RETRANSMIT_MULT,
  updatesPerMessageMax: MEMBERSHIP_UPDATES_PER_MESSAGE_MAX,
  pushPullIntervalMs: MEMBERSHIP_PUSH_PULL_INTERVAL_MS,
  downAfterMs: MEMBERSHIP_DOWN_AFTER_MS_DEFAULT,
  reportRefreshMs: MEMBERSHIP_REPORT_REFRESH_MS,
  reportTtlMs: MEMBERSHIP_REPORT_TTL_MS,
  joinRetryMs: MEMBERSHIP_JOIN_RETRY_MS,
  discoveryMs: MEMBERSHIP_DISCOVERY_MS_MAX,
  discoveryResendMs: MEMBERSHIP_DISCOVERY_RESEND_MS,
  leaveLingerMs: MEMBERSHIP_LEAVE_LINGER_MS,
  stallMs: MEMBERSHIP_STALL_MS,
};

/** The states whose members vote: count toward N and the majority that makes a member Down. */
export const VOTING: ReadonlySet<MemberState> = new Set(['Joining', 'Up', 'Leaving', 'Exiting']);

export function isValidNodeId(nodeId: unknown): nodeId is string {
  return (
    typeof nodeId === 'string' && nodeId.length > 0 && Buffer.byteLength(nodeId, 'utf8') <= NODE_ID_BYTES_MAX
  );
}

export function isIncarnation(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
}

export function isValidUpdate(u: MemberUpdate): boolean {
  if (!isValidNodeId(u.nodeId) || !isIncarnation(u.incarnation)) return false;
  if (u.kind === 'alive') return typeof u.address === 'string' && u.state in SELF_STATE_RANK;
  return isValidNodeId(u.reporter);
}

export function checkConfig(c: MembershipConfig): void {
  const positive = (n: number) => Number.isFinite(n) && n > 0;
  assert(isValidNodeId(c.nodeId), 'node id must be 1–255 UTF-8 bytes');
  assert(c.restoredIncarnation === undefined || isIncarnation(c.restoredIncarnation), 'bad incarnation');
  assert(c.members.length <= MEMBERSHIP_MEMBERS_MAX, 'more members than MEMBERSHIP_MEMBERS_MAX');
  assert(positive(c.probeIntervalMs) && positive(c.probeTimeoutMs), 'probe timing must be > 0');
  assert(c.probeTimeoutMs < c.probeIntervalMs, 'probe timeout must leave time for indirect probes');
  assert(
    positive(c.relayTimeoutMs) && c.relayTimeoutMs < c.probeIntervalMs - c.probeTimeoutMs,
    'a nack must reach the prober within its indirect wait',
  );
  assert(Number.isInteger(c.indirectProbes) && c.indirectProbes >= 0, 'indirectProbes must be ≥ 0');
  assert(
    c.suspicionMult > 0 && c.suspicionConfirmations >= 0 && c.suspicionMaxTimeoutMult >= 1,
    'suspicion multipliers',
  );
  assert(Number.isInteger(c.awarenessMaxMult) && c.awarenessMaxMult >= 1, 'awarenessMaxMult must be ≥ 1');
  assert(positive(c.gossipIntervalMs) && c.gossipNodes >= 1, 'gossip timing');
  assert(c.retransmitMult >= 1, 'retransmitMult must be ≥ 1');
  assert(
    c.updatesPerMessageMax >= 2 && c.updatesPerMessageMax <= MEMBERSHIP_UPDATES_PER_MESSAGE_MAX,
    'updatesPerMessageMax within its bound',
  );
  assert(positive(c.pushPullIntervalMs) && positive(c.downAfterMs), 'push-pull and down timing');
  assert(
    positive(c.joinRetryMs) &&
      positive(c.discoveryMs) &&
      positive(c.discoveryResendMs) &&
      positive(c.leaveLingerMs) &&
      positive(c.stallMs),
    'join, leave, stall timing',
  );
}
