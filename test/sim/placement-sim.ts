// A seeded simulator of fragments that move while clients write: the membership simulator's world
// (membership-sim.ts: 5–7 nodes on a simulated network and clock, the real membership and
// coordinator drivers, partitions, loss, kills, restarts, pauses, skewed clocks) with the
// coordinator planning moves (MOVE_LIMITS_DEFAULT), new nodes joining through a seed, killed nodes
// restarting on a lost store (rejoining under their id through a seed, which has the coordinator
// drop the copies the table still lists on them; what only the lost store held is lost), members asked
// to leave (never below R members staying; a restart resumes a leave its last run persisted, one it
// had not persisted is asked again), fragments pinned to a member by an operator (some while their
// serving replica moves away, to a replica they keep), serving evened out across the members by the
// coordinator once the table settles, and the real PlacementDriver (src/main/mesh/placement-driver.ts)
// on every node, fed the table the node routes by. A leaving node exits membership by the node's
// rule (src/core/leave.ts): once its table lists it nowhere and its placement driver holds no
// fragment; once Removed it stops for good.
//
// Behind its PlacementIo is an abstract data model, not the data plane:
// - a copy of a fragment is a map key → version; versions come from one counter (as timestamps
//   would), a merge keeps the higher one; copies are the node's disk: a killed node keeps them;
// - a client write goes, as the issuing node routes by its table, to the first listed replica other
//   than a move's target that is the node itself serving it, or a peer its membership view reaches;
//   each node it reaches decides by the node's rule (src/core/forwarding.ts, from its own table,
//   serving and view): it applies it (the write is acknowledged then), waits (re-deciding each step,
//   until its deadline), passes it on (a message, delivered while the link is up), or refuses it;
// - a node's real FailoverCatchUp (src/main/mesh/failover-catch-up.ts) holds the writes of a
//   fragment whose serving moved to it until it caught up: a round merges a peer's copy; a handover
//   waits for the source's table to route the fragment away, then delivers what the source queued
//   for it (it cannot when the source does not replicate to it), and covers the copy when it was
//   verified against the source under the continuity the source's replication to it still has;
// - replication is asynchronous: a per (fragment, peer) backlog in memory (lost when the node dies),
//   delivered while the link is up; every `antiEntropyIntervalMs` each replica pulls the others'
//   copies (what a kill lost from a backlog comes back this way), which verifies its copy against
//   each one that replicates to it, under that continuity (as anti-entropy's rounds do);
// - hold opens the copy and sets the peers it replicates to (a peer added starts a new continuity);
//   verify copies a serving source that replicates to it as that source was when the round started
//   (failing when none is reachable and replicates to it, or the source is lost before the end);
//   drain merges the whole copy into every target (each pulls it whole: cluster.ts handOver), or
//   only what the source queued for it into a target verified against the source under the
//   continuity the source's replication to it still has,
//   failing when one is unreachable or has no copy open; drop deletes the copy. Each step takes
//   5–300 ms, so tables change mid-step; holds and drops sometimes fail, as a store may.
// Checks:
// - no copy is dropped while it served since its last successful drain (a copy that never served,
//   a cancelled gain, may go at once), and none is dropped holding an acknowledged write at a
//   version no other copy (on any node's disk) holds;
// - a fragment is never without a serving replica for longer than `servingGapGraceMs` (5 s: a hold
//   after the step in flight, failed holds retried every second) while a replica is running, reached
//   by a majority and listed by its own table as a serving replica (not a move's target). A replica
//   without the table cannot know: how long fragments go unserved while a replica of the newest
//   entry is up is reported (`maxUnservedMs`); it is bounded (`tablePropagationBoundMs`) only while
//   the coordinator that wrote the entry acts and reaches such a replica whose view names it (a
//   takeover that fails closed while a member is unreachable but not Down is the design's wait);
// - in a calm cluster (the join and the leave after the faults), no forwarded write is refused:
//   tables and serving that disagree while a move ends are waited out; and the replica that applies
//   a write holds every write acknowledged before (each serving change there is a handover);
// - a leaving node holds no copy when it exits membership (each dropped after its handoff, above),
//   ends Removed in every view, and the table settles without it;
// - the world's: no table epoch has two coordinators, no (epoch, fragment, generation) two contents,
//   no Down while a majority reaches the member, only a majority's coordinator changes the table;
// - once the faults stop, within `settleBoundMs`: membership and tables converge, every fragment has
//   R replicas and no move in flight, the planner wants no move, serving is even (no transfer left),
//   every listed replica serves and no other node holds a copy; then every acknowledged write is on
//   every replica at its acknowledged version or later;
// - a join in a calm cluster: the replica moves it causes, against the optimum R·F/(N+1); a leave
//   from a calm cluster: it completes, and the moves it causes against the replicas it held.

import { setImmediate as macrotask } from 'node:timers/promises';
import { assert } from '../../src/core/assert.js';
import type { AssignmentTable } from '../../src/core/assignment-table.js';
import {
  eligibleMembers,
  floorReplicas,
  MOVE_LIMITS_DEFAULT,
  onlyCopiesOn,
  planMoves,
  servingSuccessionSource,
  servingTransfers,
} from '../../src/core/coordinator.js';
import type { CoordinatorCounters } from '../../src/core/coordinator-machine.js';
import { type ForwardView, forwardStep } from '../../src/core/forwarding.js';
import { leaveHandedOver } from '../../src/core/leave.js';
import {
  COORDINATOR_DIGEST_INTERVAL_MS,
  FAILOVER_CATCH_UP_MS_MAX,
  FORWARD_DISAGREEMENT_WAIT_MS,
  PLACEMENT_DRAIN_WARN_INTERVAL_MS_DEFAULT,
  PLACEMENT_READY_RESEND_MS,
  PLACEMENT_RETRY_MS,
  PLACEMENT_SERVING_TRANSFERS_PER_PLAN_MAX,
} from '../../src/core/limits.js';
import type { CoordinatorDriver } from '../../src/main/mesh/coordinator-driver.js';
import {
  type CatchUpHost,
  FailoverCatchUp,
  type HandoverOutcome,
  type RoundEnd,
} from '../../src/main/mesh/failover-catch-up.js';
import { PlacementDriver, type PlacementIo } from '../../src/main/mesh/placement-driver.js';
import {
  FRAGMENTS,
  MEMBERSHIP_SIM_DEFAULTS,
  MembershipSim,
  type MembershipSimOptions,
  REPLICAS,
  type SimNode,
  type SimTimer,
} from './membership-sim.js';

export interface PlacementSimOptions extends MembershipSimOptions {
  /** New nodes joining during the chaos, at most. */
  joinsMax: number;
  /** Members asked to leave during the chaos, at most (never below R members staying). */
  leavesMax: number;
  /** Client writes issued per simulated second (each at a random node, fragment and key). */
  writesPerSecond: number;
  keysPerFragment: number;
  antiEntropyIntervalMs: number;
  servingGapGraceMs: number;
  /**
   * How long a fragment may go unserved while the coordinator that wrote its newest entry acts and
   * reaches a replica of it whose view names that coordinator: the table's propagation to it.
   */
  tablePropagationBoundMs: number;
  /** From the end of the faults (or a calm join) until placement and the data have settled. */
  settleBoundMs: number;
  /**
   * Of the restarts of a killed node, the share whose store was lost (a memory-store node, a replaced
   * disk): it starts on nothing and joins through a running member (as with --join).
   */
  wipeChance: number;
}

export const PLACEMENT_SIM_DEFAULTS: Omit<PlacementSimOptions, 'seed'> = {
  ...MEMBERSHIP_SIM_DEFAULTS,
  chaosMs: 120_000,
  moves: MOVE_LIMITS_DEFAULT,
  joinsMax: 2,
  leavesMax: 2,
  writesPerSecond: 50,
  keysPerFragment: 8,
  antiEntropyIntervalMs: 2_000,
  // A hold (≤ 300 ms) after the step in flight, failed holds retried every second.
  servingGapGraceMs: 5_000,
  // A member that missed changes (a cut link) pulls on the next digest; one that refused them
  // (its view named another coordinator) pulls as soon as its view names this one. Then a hold.
  tablePropagationBoundMs: COORDINATOR_DIGEST_INTERVAL_MS + 5_000,
  // Membership converges within 75 s of the heal; the moves that follow run 2 in and 2 out per node.
  settleBoundMs: 120_000,
  wipeChance: 0.3,
};

export interface PlacementSimReport {
  nodes: number;
  joins: number;
  /** Members asked to leave, and those that left (exited membership once they held nothing). */
  leaves: number;
  departures: number;
  kills: number;
  partitions: number;
  /** Restarts on a lost store, the acknowledged writes only the lost store held (asynchronous replication's loss), and the replicas the coordinator dropped for them. */
  wipes: number;
  /** Of those, restarts under the member list (--peers) rather than with --join. */
  wipesAmongPeers: number;
  writesLostToWipes: number;
  lostCopiesDropped: number;
  writesAcked: number;
  writesRefused: number;
  /** Writes forwarded by the node a client wrote through, and how they ended when not applied. */
  forwarded: number;
  forwardedRefused: number;
  forwardedLost: number;
  /** Decisions to wait, and the most nodes one forwarded write passed through. */
  forwardWaits: number;
  forwardHopsMax: number;
  /** Handovers whose drain completed the copy (no round after it). */
  handoversCovered: number;
  /** Catch-ups that ended when the replica handing the fragment over had its copy pulled here whole. */
  catchUpsAbsorbed: number;
  /** Copies anti-entropy verified against a replica, in a run of its replication not verified in before. */
  routineVerifications: number;
  /** Verifying rounds a successor started before the move that hands it the serving finished. */
  successionRounds: number;
  /** Fragments an operator pinned to a member (`tessera cluster move`). */
  pins: number;
  /** Fragments whose serving the coordinator handed to another replica to even out who serves. */
  servingTransfers: number;
  /** Verifying rounds a member started for a serving transfer it foresaw (the node's verifyTransfers). */
  transferRounds: number;
  movesStarted: number;
  movesFinished: number;
  movesCancelled: number;
  drains: number;
  /** Targets of a drain that took only the writes queued for them: verified under the continuity still held. */
  handoffsVerified: number;
  drops: number;
  stepsFailed: number;
  /** Keys anti-entropy brought to a replica that lacked their version. */
  repaired: number;
  /** The longest time a fragment went without a serving replica while one could have served. */
  maxServingGapMs: number;
  /** The longest time a fragment went unserved while a replica in its newest entry was up, with the table or not. */
  maxUnservedMs: number;
  /** The longest of those while the entry's coordinator acted and reached such a replica naming it. */
  maxPropagationMs: number;
  /** From the end of the faults until placement settled. */
  settleMs: number;
  /** Replica moves (finished) after one join to a calm cluster of `joinMembers` members. */
  joinMembers: number;
  joinMoves: number;
  /** R·F/(N+1): the replicas the new node must take for an even spread. */
  joinMovesOptimum: number;
  /** Replica moves (finished) after one leave from a calm cluster, against the replicas the leaver held. */
  leaveMoves: number;
  leaveMovesOptimum: number;
}

/** A step the simulated store or network could not complete: the driver hears it failed. */
class StepFailed extends Error {}

type Copy = Map<string, number>;

/** What a node keeps for placement, beside its membership and coordinator drivers. */
interface Holder {
  driver: PlacementDriver | undefined;
  timer: SimTimer | undefined;
  /** The node's catch-up before it serves a fragment that moved to it, and its deadlines. */
  catchUp: FailoverCatchUp | undefined;
  catchUpTimers: Array<{ atMs: number; fire: () => void; cancelled: boolean }>;
  /** Its copies on disk, by fragment: they survive a kill. */
  readonly copies: Map<number, Copy>;
  /** In memory: per fragment, the peers it replicates to, and per (fragment, peer) what is not delivered yet. */
  replicateTo: Map<number, readonly string[]>;
  backlogs: Map<number, Map<string, Copy>>;
  /**
   * In memory: per `fragment/peer` it replicates to, the run in which it dropped nothing queued for
   * that peer (ReplicationSender's continuity): new when the peer is added, gone when it is removed.
   */
  continuity: Map<string, number>;
  /** In memory: per fragment, the sources a verifying round completed against, with the continuity it started under. */
  verifiedUnder: Map<number, Map<string, number>>;
  /** In memory: the successions and foreseen serving transfers (`fragment/source`) whose verifying round runs. */
  successionRounds: Set<string>;
  /** In memory: per fragment handed over (a drain that succeeded), the targets that took it (cluster.ts handedOff). */
  handedOff: Map<number, ReadonlySet<string>>;
  /** Fragments whose copy served since its last successful drain (a copy found at start served before). */
  readonly served: Set<number>;
  /** This life asked membership to exit (Exiting, then Removed): its leave handed everything over. */
  exited: boolean;
  /** Counts the node's lives: a step or message of an earlier life does nothing. */
  life: number;
}

interface PendingStep {
  atMs: number;
  node: string;
  life: number;
  finish: () => void;
}

/** A client write on its way between nodes (cluster.ts serveForwardedOp). */
interface ForwardedWrite {
  fragment: number;
  key: string;
  /** The node it is at, the node that sent it there, and that node's life when it sent it. */
  at: string;
  life: number;
  sender: string;
  senderGeneration: number;
  hops: number;
  /** Until when it may wait at `at` (0: it has not waited there). */
  untilMs: number;
  /** Sent: it reaches `at` at the next step. */
  inFlight: boolean;
}

/** A catch-up's ask to the replica that served a fragment before (cluster.ts serveHandover). */
interface PendingHandover {
  node: string;
  life: number;
  from: string;
  fragment: number;
  /** The asker's generation of the fragment: the source hands over once its table has it. */
  generation: number;
  untilMs: number;
  resolve: (outcome: HandoverOutcome) => void;
}

interface PendingReady {
  node: string;
  life: number;
  fragment: number;
  generation: number;
}

/** How long placement must stay settled to count as settled: two probe intervals. */
const SETTLED_FOR_MS = 2_000;

const COUNTERS: ReadonlyArray<keyof CoordinatorCounters> = [
  'movesStarted',
  'movesFinished',
  'movesCancelled',
  'servingTransfers',
  'lostCopiesDropped',
];

export class PlacementSim extends MembershipSim {
  private readonly holders = new Map<string, Holder>();
  private pending: PendingStep[] = [];
  /** A ready travels as a message, even to the coordinator on the same node. */
  private readies: PendingReady[] = [];
  /** `fragment/key` → the highest version acknowledged to a client. */
  private readonly acked = new Map<string, number>();
  private version = 0;
  private writing = true;
  /** The faults are over and the cluster settled: no forwarded write may be refused. */
  private calm = false;
  private forwards: ForwardedWrite[] = [];
  private handovers: PendingHandover[] = [];
  /** The last continuity id handed out (each new one is the next). */
  private continuities = 0;
  /** Member indices for the catch-up (its host speaks in indices, as the node's cluster does). */
  private readonly memberIndex = new Map<string, number>();
  private readonly memberIds: string[] = [];
  private nextAntiEntropyMs = 0;
  /** Per fragment, since when no replica serves it while one could; undefined while one serves. */
  private readonly gapSinceMs: (number | undefined)[] = new Array(FRAGMENTS).fill(undefined);
  /** Per fragment, since when no replica serves it while one in its newest entry is up (table or not). */
  private readonly unservedSinceMs: (number | undefined)[] = new Array(FRAGMENTS).fill(undefined);
  /** Per fragment, since when it is unserved while its newest entry's coordinator acts and reaches a replica naming it. */
  private readonly propagationSinceMs: (number | undefined)[] = new Array(FRAGMENTS).fill(undefined);
  /** The move counters of coordinators that died (a restart starts its counters anew). */
  private readonly retired: Record<string, number> = {
    movesStarted: 0,
    movesFinished: 0,
    movesCancelled: 0,
    servingTransfers: 0,
    lostCopiesDropped: 0,
  };
  private readonly stats: PlacementSimReport;
  /** Nodes restarted on a lost store that were not admitted yet (Joining, or dead since). */
  private readonly wipedJoining = new Set<string>();

  constructor(private readonly sim: PlacementSimOptions) {
    super(sim);
    this.stats = {
      nodes: this.nodes.length,
      joins: 0,
      leaves: 0,
      departures: 0,
      kills: 0,
      partitions: 0,
      wipes: 0,
      wipesAmongPeers: 0,
      writesLostToWipes: 0,
      lostCopiesDropped: 0,
      writesAcked: 0,
      writesRefused: 0,
      forwarded: 0,
      forwardedRefused: 0,
      forwardedLost: 0,
      forwardWaits: 0,
      forwardHopsMax: 0,
      handoversCovered: 0,
      catchUpsAbsorbed: 0,
      routineVerifications: 0,
      successionRounds: 0,
      pins: 0,
      servingTransfers: 0,
      transferRounds: 0,
      movesStarted: 0,
      movesFinished: 0,
      movesCancelled: 0,
      drains: 0,
      handoffsVerified: 0,
      drops: 0,
      stepsFailed: 0,
      repaired: 0,
      maxServingGapMs: 0,
      maxUnservedMs: 0,
      maxPropagationMs: 0,
      settleMs: 0,
      joinMembers: 0,
      joinMoves: 0,
      joinMovesOptimum: 0,
      leaveMoves: 0,
      leaveMovesOptimum: 0,
    };
  }

  async runMoves(): Promise<PlacementSimReport> {
    this.startAll();
    await this.chaosWithJoins();
    this.healAll();
    const healedMs = this.nowMs;
    this.stats.settleMs = (await this.awaitSettled('after the faults healed')) - healedMs;
    this.calm = true;
    await this.calmJoin();
    await this.calmLeave();
    this.stats.nodes = this.nodes.length;
    this.stats.departures = this.departed.size;
    this.stats.kills = this.report.kills;
    this.stats.partitions = this.report.partitions;
    Object.assign(this.stats, this.moveCounters());
    for (const holder of this.holders.values())
      this.stats.catchUpsAbsorbed += holder.catchUp?.counters.absorbed ?? 0;
    return this.stats;
  }

  // ---- Phases ----

  private async chaosWithJoins(): Promise<void> {
    const endMs = this.nowMs + this.options.chaosMs;
    let nextFaultMs = this.nowMs + 2_000;
    while (this.nowMs < endMs) {
      if (this.nowMs >= nextFaultMs) {
        const r = this.random();
        if (this.stats.joins < this.sim.joinsMax && r < 0.1) this.join();
        else if (this.stats.leaves < this.sim.leavesMax && r < 0.2) this.leave();
        else if (r < 0.3) this.pin();
        else this.randomFault();
        nextFaultMs = this.nowMs + 1_000 + Math.floor(this.random() * 8_000);
      }
      await this.tick();
    }
  }

  /**
   * One more node joins through a live member, which may be joining itself: a joiner that sees
   * only itself Up must not bootstrap a table of its own (mayBootstrap).
   */
  private join(): void {
    const seeds = this.nodes.filter((n) => n.core !== undefined && !n.leaving);
    if (seeds.length === 0) return;
    const seed = seeds[Math.floor(this.random() * seeds.length)]!;
    this.stats.joins++;
    this.addJoiner(`n${this.byId.size + 1}`, seed.id);
  }

  /**
   * An operator pins a fragment to a member (`tessera cluster move`), asked of the acting
   * coordinator: half the time one whose serving replica is moving away (pinSuccessor), otherwise
   * any fragment, to any member staying.
   */
  private pin(): void {
    if (this.random() < 0.5 && this.pinSuccessor(undefined)) return;
    const coordinator = this.actingCoordinator();
    if (coordinator === undefined) return;
    const staying = this.nodes.filter((n) => !n.leaving);
    const fragment = Math.floor(this.random() * FRAGMENTS);
    this.askPin(coordinator, fragment, staying[Math.floor(this.random() * staying.length)]!.id);
  }

  private askPin(coordinator: CoordinatorDriver, fragment: number, node: string): boolean {
    this.stats.pins++;
    const answer = coordinator.pin(fragment, node);
    this.trace(`pin fragment ${fragment} to ${node}: ${answer.status} ${answer.message}`);
    return answer.status === 'Ok';
  }

  /**
   * Pins a fragment whose serving replica (`source`, when given) is moving away to one of the
   * replicas it keeps, which then succeeds the source at the finish: it verifies its copy while the
   * move runs. False when no such move runs.
   */
  private pinSuccessor(source: string | undefined): boolean {
    const coordinator = this.actingCoordinator();
    if (coordinator === undefined) return false;
    const candidates: Array<{ fragment: number; node: string }> = [];
    for (const [fragment, entry] of coordinator.table.entries()) {
      const moving = entry.kind === 'active' ? entry.moving : null;
      if (entry.kind !== 'active' || moving === null || entry.replicas[0] !== moving.source) continue;
      if (source !== undefined && moving.source !== source) continue;
      for (const id of entry.replicas)
        if (id !== moving.source && id !== moving.target) candidates.push({ fragment, node: id });
    }
    if (candidates.length === 0) return false;
    const { fragment, node } = candidates[Math.floor(this.random() * candidates.length)]!;
    return this.askPin(coordinator, fragment, node);
  }

  /** The coordinator of a running, unpaused node that acts as such. */
  private actingCoordinator(): CoordinatorDriver | undefined {
    return this.nodes.find(
      (n) => n.core !== undefined && n.pausedUntilMs <= this.nowMs && n.coordinator?.role === 'coordinator',
    )?.coordinator;
  }

  /** A random live member is asked to leave, if more than R members would stay. */
  private leave(): void {
    const staying = this.nodes.filter((n) => !n.leaving);
    const live = staying.filter((n) => n.core !== undefined);
    if (staying.length <= REPLICAS || live.length === 0) return;
    this.stats.leaves++;
    this.askToLeave(live[Math.floor(this.random() * live.length)]!);
  }

  /**
   * The node's rule (cluster.ts exitIfLeft): a leaving node exits membership once its table lists
   * it nowhere and its placement driver holds no fragment. Every copy must be gone from its disk
   * then, each dropped only after its handoff (checkDrop).
   */
  private exitIfLeft(node: SimNode): void {
    const holder = this.holders.get(node.id)!;
    if (!node.leaving || holder.exited || holder.driver === undefined || node.core === undefined) return;
    // The node's own flag: Leaving, asked in this life or resumed at start; a node that restarted
    // Removed (killed once it had left, before this world saw it go) has nothing to exit.
    if (node.core.member(node.id)?.state !== 'Leaving') return;
    if (!leaveHandedOver(node.id, node.coordinator!.table, holder.driver.fragments().length)) return;
    holder.exited = true;
    assert(
      holder.copies.size === 0,
      `${node.id} exits membership holding fragments [${[...holder.copies.keys()]}] (at ${this.nowMs} ms)`,
    );
    this.trace(`${node.id} handed everything over: exits membership`);
    holder.driver.exit();
    void node.core.exit();
    const state = node.core.member(node.id)?.state;
    assert(state === 'Exiting', `${node.id} could not exit membership: it is ${state}`);
  }

  /** A join to a settled cluster, under the write load: the moves it causes against the optimum. */
  private async calmJoin(): Promise<void> {
    const members = this.nodes.length;
    const before = this.moveCounters().movesFinished;
    this.writing = true;
    this.join();
    await this.awaitSettled('after a calm join');
    this.stats.joinMembers = members;
    this.stats.joinMoves = this.moveCounters().movesFinished - before;
    this.stats.joinMovesOptimum = (REPLICAS * FRAGMENTS) / (members + 1);
  }

  /**
   * A leave from a settled cluster, under the write load: the node drains every replica it held,
   * exits and is Removed everywhere; the moves it causes, against the replicas it held.
   */
  private async calmLeave(): Promise<void> {
    const staying = this.nodes.filter((n) => !n.leaving);
    if (staying.length <= REPLICAS) return;
    const node = staying[Math.floor(this.random() * staying.length)]!;
    const table = node.coordinator!.table;
    const held = table.entries().filter(([, e]) => e.kind === 'active' && e.replicas.includes(node.id));
    const before = this.moveCounters().movesFinished;
    const deadlineMs = this.nowMs + this.sim.settleBoundMs;
    this.writing = true;
    this.stats.leaves++;
    this.askToLeave(node);
    // The operator pins one of the fragments the leaver serves, while its move runs, to a replica
    // it keeps: a succession in every run.
    while (!this.departed.has(node.id) && !this.pinSuccessor(node.id) && this.nowMs < deadlineMs)
      await this.tick();
    await this.awaitSettled(`after ${node.id} left a calm cluster`);
    assert(this.departed.has(node.id), `${node.id} has not left after a calm leave`);
    this.stats.leaveMoves = this.moveCounters().movesFinished - before;
    this.stats.leaveMovesOptimum = held.length;
  }

  /**
   * Placement settles within the bound (writes go on), then the writes stop and the data must
   * converge. Returns when placement settled.
   */
  private async awaitSettled(when: string): Promise<number> {
    const deadlineMs = this.nowMs + this.sim.settleBoundMs;
    // A step first: a node whose pause the heal just ended has not run since, and still shows the
    // view and health it had before the pause (its loop finds the stall when its timer fires).
    // Settled means settled for SETTLED_FOR_MS: a node restarted by the heal is first seen
    // reachable before the probes of its new life have all been answered.
    let settledSinceMs: number | undefined;
    do {
      await this.tick();
      if (this.unsettled() !== undefined) settledSinceMs = undefined;
      else settledSinceMs ??= this.nowMs;
    } while (
      this.nowMs < deadlineMs &&
      (settledSinceMs === undefined || this.nowMs - settledSinceMs < SETTLED_FOR_MS)
    );
    assert(
      this.unsettled() === undefined,
      `placement did not settle within ${this.sim.settleBoundMs} ms ${when}: ${this.unsettled()}`,
    );
    const imbalance = this.imbalance();
    assert(imbalance === undefined, `placement settled unbalanced ${when}: ${imbalance}`);
    this.writing = false;
    // Backlogs deliver at once and anti-entropy runs every interval: three rounds are plenty.
    const dataDeadlineMs = this.nowMs + 3 * this.sim.antiEntropyIntervalMs;
    while (this.nowMs < dataDeadlineMs && this.missingWrite() !== undefined) await this.tick();
    assert(
      this.missingWrite() === undefined,
      `an acknowledged write was lost ${when}: ${this.missingWrite()}`,
    );
    assert(this.unsettled() === undefined, `placement moved again ${when}: ${this.unsettled()}`);
    return settledSinceMs!;
  }

  // ---- The world's hooks ----

  /** A killed node restarts; sometimes on a lost store (`wipeChance`). */
  protected override start(node: SimNode): void {
    const seed = this.wipeSeedFor(node);
    if (seed !== undefined) this.wipe(node, seed);
    super.start(node);
  }

  /**
   * The running member a restart on a lost store joins through, or undefined when this restart keeps
   * its store: a first start, a leaver, a node that holds some fragment's only whole copy in a table
   * a running node holds (its seed would refuse it), or no running member to join through.
   */
  private wipeSeedFor(node: SimNode): SimNode | undefined {
    if (node.persisted === undefined || node.leaving || this.random() >= this.sim.wipeChance)
      return undefined;
    // One lost store at a time: two of a small table's members back on nothing at once may leave the
    // rest without a majority to drop their copies — placement stays frozen then, by design.
    for (const id of this.wipedJoining) {
      const core = this.byId.get(id)?.core;
      if (core !== undefined && core.view().find((m) => m.nodeId === id)?.state !== 'Joining')
        this.wipedJoining.delete(id);
    }
    if (this.wipedJoining.size > 0) return undefined;
    const running = this.nodes.filter((n) => n !== node && n.core !== undefined && !n.leaving);
    if (running.some((n) => onlyCopiesOn(n.coordinator!.table, node.id).length > 0)) return undefined;
    return running.length === 0 ? undefined : running[Math.floor(this.random() * running.length)];
  }

  /**
   * The node's store is lost: its copies, and what it persisted. An acknowledged write only that store
   * held (its replication was still queued when the node died) is lost with it, as asynchronous
   * replication loses it: what is acknowledged from then on is the newest version another copy holds.
   */
  private wipe(node: SimNode, seed: SimNode): void {
    this.stats.wipes++;
    const holder = this.holders.get(node.id);
    for (const [fragment, copy] of holder?.copies ?? []) {
      for (const [key, version] of copy) {
        const ackedKey = `${fragment}/${key}`;
        const acked = this.acked.get(ackedKey);
        if (acked === undefined || version < acked) continue;
        let elsewhere = 0;
        for (const [id, h] of this.holders)
          if (id !== node.id) elsewhere = Math.max(elsewhere, h.copies.get(fragment)?.get(key) ?? 0);
        if (elsewhere >= acked) continue;
        this.stats.writesLostToWipes++;
        if (elsewhere === 0) this.acked.delete(ackedKey);
        else this.acked.set(ackedKey, elsewhere);
      }
    }
    holder?.copies.clear();
    holder?.served.clear();
    node.persisted = undefined;
    node.persistedTable = undefined;
    node.persistedPromise = undefined;
    // One of the cluster's first members restarts under its member list (--peers) half the time: it
    // asks its members whether they knew it, and joins through them; otherwise with --join.
    const amongPeers = node.joinSeed === undefined && this.random() < 0.5;
    if (amongPeers) this.stats.wipesAmongPeers++;
    else node.joinSeed = seed.id;
    this.trace(
      `${node.id} lost its store: it joins ${amongPeers ? 'through its members' : `through ${seed.id}`}`,
    );
    node.wiped = true;
    this.wipedJoining.add(node.id);
  }

  protected override onNodeStarted(node: SimNode): void {
    let holder = this.holders.get(node.id);
    if (holder === undefined) {
      holder = {
        driver: undefined,
        timer: undefined,
        catchUp: undefined,
        catchUpTimers: [],
        copies: new Map(),
        replicateTo: new Map(),
        backlogs: new Map(),
        continuity: new Map(),
        verifiedUnder: new Map(),
        successionRounds: new Set(),
        handedOff: new Map(),
        served: new Set(),
        exited: false,
        life: 0,
      };
      this.holders.set(node.id, holder);
    }
    const h = holder;
    h.life++;
    h.exited = false;
    h.timer = undefined;
    h.catchUpTimers = [];
    h.catchUp = new FailoverCatchUp(this.catchUpHost(node, h));
    h.driver = new PlacementDriver(
      {
        selfId: node.id,
        fragmentCount: FRAGMENTS,
        retryMs: PLACEMENT_RETRY_MS,
        readyResendMs: PLACEMENT_READY_RESEND_MS,
        drainWarnIntervalMs: PLACEMENT_DRAIN_WARN_INTERVAL_MS_DEFAULT,
      },
      this.placementIo(node, h),
      {
        nowMs: () => this.localMs(node),
        setTimer: (atMs, fire) => {
          h.timer = { atMs, fire };
        },
        clearTimer: () => {
          h.timer = undefined;
        },
      },
    );
    // The copies on disk are served as before the restart, until the table says otherwise.
    const held = [...h.copies.keys()];
    for (const fragment of held) h.served.add(fragment);
    h.driver.start(held);
    const table = node.coordinator!.table;
    if (table.entries().length > 0) {
      h.driver.onTable(
        table,
        Array.from({ length: FRAGMENTS }, (_, f) => f),
      );
    }
    // As the node at the end of its start (cluster.ts start): a leave its last run had all but
    // finished (it exited, then was killed before others saw it go), or one resumed with no table
    // (a joiner no member answered), exits again at once. Nothing else may change to make it check.
    this.exitIfLeft(node);
  }

  /** As the node (cluster.ts leave): a leave is checked as soon as it is accepted. */
  protected override onLeaving(node: SimNode): void {
    this.exitIfLeft(node);
  }

  protected override onNodeStopped(node: SimNode): void {
    const holder = this.holders.get(node.id)!;
    holder.driver?.close();
    holder.driver = undefined;
    holder.timer = undefined;
    // Its catch-ups and the writes they hold end with it (their rounds of this life never end).
    this.stats.catchUpsAbsorbed += holder.catchUp?.counters.absorbed ?? 0;
    holder.catchUp = undefined;
    holder.catchUpTimers = [];
    holder.replicateTo = new Map();
    holder.backlogs = new Map();
    holder.continuity = new Map();
    holder.verifiedUnder = new Map();
    holder.successionRounds = new Set();
    holder.handedOff = new Map();
    const counters = node.coordinator!.counters;
    for (const key of COUNTERS) this.retired[key] += counters[key];
  }

  protected override onRoutingTable(
    node: SimNode,
    table: AssignmentTable,
    fragments: readonly number[],
  ): void {
    const holder = this.holders.get(node.id);
    if (holder?.driver !== undefined) {
      this.verifySuccessions(node, holder, table, fragments);
      this.verifyTransfers(node, holder, table);
    }
    holder?.driver?.onTable(table, fragments);
    this.exitIfLeft(node);
  }

  /** As the node (cluster.ts verifySuccessions): a successor's copy is verified against the source before the move finishes. */
  private verifySuccessions(
    node: SimNode,
    holder: Holder,
    table: AssignmentTable,
    fragments: readonly number[],
  ): void {
    for (const fragment of fragments) {
      const entry = table.active(fragment);
      if (entry === undefined || !holder.served.has(fragment)) continue;
      const source = servingSuccessionSource(entry, node.id);
      if (source !== null && this.verifyAhead(node, holder, fragment, source)) this.stats.successionRounds++;
    }
  }

  /** As the node (cluster.ts verifyTransfers): a copy serving goes to next is verified against its serving replica first. */
  private verifyTransfers(node: SimNode, holder: Holder, table: AssignmentTable): void {
    const batch = servingTransfers(table, this.memberView(node), PLACEMENT_SERVING_TRANSFERS_PER_PLAN_MAX);
    for (const { fragment, from, to } of batch) {
      if (to !== node.id || !holder.served.has(fragment) || holder.verifiedUnder.get(fragment)?.has(from))
        continue;
      if (this.verifyAhead(node, holder, fragment, from)) this.stats.transferRounds++;
    }
  }

  /** As the node (cluster.ts verifyAhead): a round against `source` unless one runs; whether it started. */
  private verifyAhead(node: SimNode, holder: Holder, fragment: number, source: string): boolean {
    const key = `${fragment}/${source}`;
    const rounds = holder.successionRounds;
    if (rounds.has(key)) return false;
    rounds.add(key);
    const ended = (): void => {
      rounds.delete(key);
    };
    this.verifyCopy(node, holder, fragment, [source]).then(ended, ended);
    return true;
  }

  // ---- One step of simulated time ----

  private async tick(): Promise<void> {
    this.advance();
    if (this.writing && this.random() < this.sim.writesPerSecond / 100) this.write();
    this.forwardWrites();
    this.deliverReadies();
    this.firePlacementTimers();
    const caughtUp = this.stepCatchUps();
    this.replicate();
    if (this.nowMs >= this.nextAntiEntropyMs) {
      this.antiEntropy();
      this.nextAntiEntropyMs = this.nowMs + this.sim.antiEntropyIntervalMs;
    }
    const finished = this.finishSteps();
    this.checkServing();
    // The drivers hear a step's outcome in a promise callback: let those run before going on.
    if (finished || caughtUp) await macrotask();
  }

  private finishSteps(): boolean {
    const due = this.pending.filter((s) => s.atMs <= this.nowMs);
    if (due.length === 0) return false;
    let finished = false;
    this.pending = this.pending.filter((s) => s.atMs > this.nowMs);
    for (const step of due) {
      const node = this.byId.get(step.node)!;
      if (this.holders.get(step.node)!.life !== step.life || node.core === undefined) continue;
      if (!this.running(node)) {
        this.pending.push(step); // a paused node finishes it once it resumes
        continue;
      }
      step.finish();
      finished = true;
    }
    return finished;
  }

  private deliverReadies(): void {
    const readies = this.readies;
    this.readies = [];
    for (const r of readies) {
      const node = this.byId.get(r.node)!;
      if (this.holders.get(r.node)!.life !== r.life || node.coordinator === undefined) continue;
      if (!this.running(node)) this.readies.push(r);
      else node.coordinator.ready(r.fragment, r.generation);
    }
  }

  private firePlacementTimers(): void {
    for (const node of this.nodes) {
      const holder = this.holders.get(node.id)!;
      const timer = holder.timer;
      if (timer === undefined || !this.running(node) || this.localMs(node) < timer.atMs) continue;
      holder.timer = undefined;
      timer.fire();
    }
  }

  /**
   * Each running node looks at its catch-ups (the node does on every view, table or serving
   * change), their deadlines fire and handovers go on; true when a promise may have settled.
   */
  private stepCatchUps(): boolean {
    let settled = false;
    for (const node of this.nodes) {
      const holder = this.holders.get(node.id)!;
      if (holder.catchUp === undefined || node.core === undefined || !this.running(node)) continue;
      holder.catchUp.check();
      const nowMs = this.localMs(node);
      const due = holder.catchUpTimers.filter((t) => !t.cancelled && nowMs >= t.atMs);
      holder.catchUpTimers = holder.catchUpTimers.filter((t) => !t.cancelled && nowMs < t.atMs);
      for (const timer of due) timer.fire();
      settled ||= due.length > 0;
    }
    const handovers = this.handovers;
    this.handovers = [];
    for (const handover of handovers) settled = this.stepHandover(handover) || settled;
    return settled;
  }

  /**
   * The source hands the fragment over once its table has the asker's generation (it routes the
   * fragment to the asker from then on): every write it queued for the asker is delivered, and the
   * copy is covered when it was verified against the source under the continuity the source's
   * replication to it still has. It cannot when it does not replicate the fragment to the asker;
   * past the deadline, or dead, it answers nothing (the ask fails).
   */
  private stepHandover(handover: PendingHandover): boolean {
    const holder = this.holders.get(handover.node)!;
    if (holder.life !== handover.life) return false; // gone with the asker's life
    const source = this.byId.get(handover.from)!;
    const sourceHolder = this.holders.get(handover.from)!;
    if (source.core === undefined || this.nowMs >= handover.untilMs) {
      handover.resolve('failed');
      return true;
    }
    const generation = source.coordinator!.table.active(handover.fragment)?.generation ?? 0;
    if (
      !this.running(this.byId.get(handover.node)!) ||
      !this.running(source) ||
      !this.reaches(handover.from, handover.node) ||
      generation < handover.generation
    ) {
      this.handovers.push(handover);
      return false;
    }
    const copy = holder.copies.get(handover.fragment);
    // The source handed its copy off to the asker and dropped it: the asker took every write it held.
    if (
      copy !== undefined &&
      !sourceHolder.copies.has(handover.fragment) &&
      sourceHolder.handedOff.get(handover.fragment)?.has(handover.node) === true
    ) {
      handover.resolve('covered');
      return true;
    }
    const replicates = sourceHolder.replicateTo.get(handover.fragment)?.includes(handover.node) ?? false;
    if (copy === undefined || !replicates) {
      handover.resolve('failed');
      return true;
    }
    const backlogs = sourceHolder.backlogs.get(handover.fragment);
    const backlog = backlogs?.get(handover.node);
    if (backlog !== undefined) merge(copy, backlog);
    backlogs?.delete(handover.node);
    const covered = this.covered(handover.fragment, handover.from, handover.node);
    if (covered) this.stats.handoversCovered++;
    handover.resolve(covered ? 'covered' : 'drained');
    return true;
  }

  /**
   * Whether `target`'s copy of `fragment` was verified against `source` under the continuity the
   * source's replication to it still has: it then holds every write the source took.
   */
  private covered(fragment: number, source: string, target: string): boolean {
    const verified = this.holders.get(target)!.verifiedUnder.get(fragment)?.get(source) ?? 0;
    const now = this.holders.get(source)!.continuity.get(`${fragment}/${target}`) ?? 0;
    return verified !== 0 && verified === now;
  }

  private memberIndexOf(id: string): number {
    let index = this.memberIndex.get(id);
    if (index === undefined) {
      index = this.memberIds.length;
      this.memberIds.push(id);
      this.memberIndex.set(id, index);
    }
    return index;
  }

  /** The node's catch-up host: routing and view from the node, rounds and handovers from the data model. */
  private catchUpHost(node: SimNode, holder: Holder): CatchUpHost {
    return {
      fragmentCount: FRAGMENTS,
      selfIndex: this.memberIndexOf(node.id),
      firstServing: (fragment) => {
        const route = this.routeAt(node, fragment);
        return route === undefined ? -1 : this.memberIndexOf(route);
      },
      isUp: (member) => this.upAt(node, this.memberIds[member]!),
      memberName: (member) => this.memberIds[member]!,
      peersOf: (fragment) => this.routingAt(node, fragment).map((id) => this.memberIndexOf(id)),
      reconcile: (fragment, member) =>
        new Promise<RoundEnd>((resolve) => {
          const peer = this.memberIds[member]!;
          this.pending.push({
            atMs: this.nowMs + 5 + Math.floor(this.random() * 295),
            node: node.id,
            life: holder.life,
            finish: () => {
              // The node replicates with the peer for the round (cluster.ts catchUpRound), listed
              // or not: it needs a copy of its own, and the peer's.
              const mine = holder.copies.get(fragment);
              const theirs = this.holders.get(peer)!.copies.get(fragment);
              const complete = mine !== undefined && theirs !== undefined && this.reaches(node.id, peer);
              if (complete) merge(mine, theirs);
              resolve({ ok: complete, reason: complete ? '' : 'a copy is missing or the peer is cut off' });
            },
          });
        }),
      handover: (fragment, member) =>
        new Promise<HandoverOutcome>((resolve) => {
          this.handovers.push({
            node: node.id,
            life: holder.life,
            from: this.memberIds[member]!,
            fragment,
            generation: node.coordinator!.table.active(fragment)?.generation ?? 0,
            untilMs: this.nowMs + FAILOVER_CATCH_UP_MS_MAX,
            resolve,
          });
        }),
      resubmit: () => {
        throw new Error('the simulator holds writes with holdForwarded only');
      },
      nowMs: () => this.localMs(node),
      after: (ms, fire) => {
        const timer = { atMs: this.localMs(node) + ms, fire, cancelled: false };
        holder.catchUpTimers.push(timer);
        return () => {
          timer.cancelled = true;
        };
      },
      log: (level, fields, message) =>
        this.trace(`${node.id} catch-up ${level}: ${message} ${JSON.stringify(fields)}`),
    };
  }

  // ---- The data model behind PlacementIo ----

  private placementIo(node: SimNode, holder: Holder): PlacementIo {
    return {
      hold: (fragment, replicas) =>
        this.later(node, holder, 'hold', fragment, () => {
          if (this.random() < 0.05) throw new StepFailed('the store could not open the fragment');
          holder.handedOff.delete(fragment);
          if (!holder.copies.has(fragment)) holder.copies.set(fragment, new Map());
          this.replicateOnly(
            holder,
            fragment,
            replicas.filter((id) => id !== node.id),
          );
        }),
      verify: (fragment, sources) => this.verifyCopy(node, holder, fragment, sources),
      drain: (fragment, targets, generation) =>
        this.later(node, holder, 'drain', fragment, () => {
          for (const target of targets) {
            if (!this.reaches(node.id, target) || !this.holders.get(target)!.copies.has(fragment))
              throw new StepFailed(`${target} cannot take the handoff`);
            // A target pulls the copy once its own table has the generation handed over at
            // (cluster.ts serveAbsorb waits for it): the table that ends its copy's move here.
            const at = this.byId.get(target)!;
            if ((at.coordinator?.table.active(fragment)?.generation ?? 0) < generation)
              throw new StepFailed(`${target}'s table is not at generation ${generation} yet`);
          }
          // A target verified against this copy under the continuity its replication here still
          // has takes the writes queued for it; any other pulls the whole copy.
          const copy = this.copyOf(node.id, fragment);
          const backlogs = holder.backlogs.get(fragment);
          for (const target of targets) {
            if (this.covered(fragment, node.id, target)) {
              const backlog = backlogs?.get(target);
              if (backlog !== undefined) merge(this.copyOf(target, fragment), backlog);
              this.stats.handoffsVerified++;
            } else {
              merge(this.copyOf(target, fragment), copy);
              // The target's catch-up from this node, if one runs, ends here (cluster.ts serveAbsorb).
              this.holders.get(target)!.catchUp?.absorbed(fragment, this.memberIndexOf(node.id));
            }
          }
          holder.backlogs.delete(fragment);
          this.replicateOnly(holder, fragment, targets);
          holder.served.delete(fragment);
          holder.handedOff.set(fragment, new Set(targets));
          this.stats.drains++;
        }),
      drop: (fragment) =>
        this.later(node, holder, 'drop', fragment, () => {
          if (this.random() < 0.05) throw new StepFailed('the store could not remove the fragment');
          // A copy never opened (its hold failed) is nothing to remove.
          if (holder.copies.has(fragment)) this.checkDrop(node.id, holder, fragment);
          holder.copies.delete(fragment);
          holder.verifiedUnder.delete(fragment);
          holder.replicateTo.delete(fragment);
          holder.backlogs.delete(fragment);
          this.stats.drops++;
        }),
      ready: (fragment, generation) => {
        this.readies.push({ node: node.id, life: holder.life, fragment, generation });
      },
      serve: (fragment, serving) => {
        if (serving) holder.served.add(fragment);
        this.trace(`${node.id} ${serving ? 'serves' : 'stops serving'} fragment ${fragment}`);
      },
      stepped: () => this.exitIfLeft(node),
      log: (level, fields, message) =>
        this.trace(`${node.id} placement ${level}: ${message} ${JSON.stringify(fields)}`),
    };
  }

  /** `work` runs 5–300 ms from now, as the step's end; a StepFailed it throws fails the step. */
  private later(
    node: SimNode,
    holder: Holder,
    step: string,
    fragment: number,
    work: () => void,
  ): Promise<void> {
    this.trace(`${node.id} ${step} fragment ${fragment} starts`);
    return new Promise((resolve, reject) => {
      this.pending.push({
        atMs: this.nowMs + 5 + Math.floor(this.random() * 295),
        node: node.id,
        life: holder.life,
        finish: () => {
          try {
            work();
          } catch (error) {
            if (!(error instanceof StepFailed)) throw error;
            this.stats.stepsFailed++;
            return reject(error);
          }
          this.trace(`${node.id} ${step} fragment ${fragment} done`);
          resolve();
        },
      });
    });
  }

  /**
   * A verifying round of the node's copy (cluster.ts verifyCopy): it starts once the source
   * replicates the fragment here, and copies the source as it was then; later writes come by
   * replication. It counts under the continuity it started in. The node rounds against every
   * serving source and a handover waits for the round against the replica that hands over
   * (cluster.ts): modelled as the round against the replica that serves the fragment as this node
   * routes it, when it can be.
   */
  private verifyCopy(
    node: SimNode,
    holder: Holder,
    fragment: number,
    sources: readonly string[],
  ): Promise<void> {
    const usable = (id: string): boolean =>
      this.reaches(node.id, id) &&
      this.serves(id, fragment) &&
      this.holders.get(id)!.replicateTo.get(fragment)?.includes(node.id) === true;
    const serving = this.routeAt(node, fragment);
    const source =
      serving !== undefined && sources.includes(serving) && usable(serving) ? serving : sources.find(usable);
    const snapshot = source === undefined ? undefined : new Map(this.copyOf(source, fragment));
    const continuity =
      source === undefined ? 0 : (this.holders.get(source)!.continuity.get(`${fragment}/${node.id}`) ?? 0);
    const copy = holder.copies.get(fragment);
    return this.later(node, holder, 'verify', fragment, () => {
      if (source === undefined || snapshot === undefined)
        throw new StepFailed(`no serving source among ${sources.join(',')} replicates here`);
      if (!this.reaches(node.id, source)) throw new StepFailed(`lost ${source} during the round`);
      merge(this.copyOf(node.id, fragment), snapshot);
      if (holder.copies.get(fragment) !== copy) return; // dropped and opened again meanwhile
      let under = holder.verifiedUnder.get(fragment);
      if (under === undefined) holder.verifiedUnder.set(fragment, (under = new Map()));
      under.set(source, continuity);
    });
  }

  /**
   * Replicates the fragment to `peers` from now on: what was owed to any other peer is forgotten
   * (its continuity ends); a peer added starts a new continuity.
   */
  private replicateOnly(holder: Holder, fragment: number, peers: readonly string[]): void {
    const before = holder.replicateTo.get(fragment) ?? [];
    for (const peer of before) if (!peers.includes(peer)) holder.continuity.delete(`${fragment}/${peer}`);
    for (const peer of peers)
      if (!before.includes(peer)) holder.continuity.set(`${fragment}/${peer}`, ++this.continuities);
    holder.replicateTo.set(fragment, peers);
    const backlogs = holder.backlogs.get(fragment);
    if (backlogs === undefined) return;
    for (const peer of backlogs.keys()) if (!peers.includes(peer)) backlogs.delete(peer);
  }

  /** A client write at a random running node, routed as that node's table says (see the file header). */
  private write(): void {
    const issuers = this.nodes.filter((n) => this.running(n));
    if (issuers.length === 0) return;
    const issuer = issuers[Math.floor(this.random() * issuers.length)]!;
    const fragment = Math.floor(this.random() * FRAGMENTS);
    const key = `k${Math.floor(this.random() * this.sim.keysPerFragment)}`;
    this.submitAt(issuer, fragment, key);
  }

  /** The write at the node a client sent it to: applied there, or forwarded (see the file header). */
  private submitAt(issuer: SimNode, fragment: number, key: string): void {
    const server = this.routeAt(issuer, fragment);
    if (server === issuer.id)
      return this.serveAt(issuer, fragment, key, () => this.submitAt(issuer, fragment, key));
    if (server === undefined || !this.reaches(issuer.id, server)) {
      this.stats.writesRefused++;
      return;
    }
    this.stats.forwarded++;
    this.forwards.push({
      fragment,
      key,
      at: server,
      life: this.holders.get(server)!.life,
      sender: issuer.id,
      senderGeneration: 0,
      hops: 0,
      untilMs: 0,
      inFlight: true,
    });
  }

  /**
   * Where `node` routes the fragment: the first replica its table lists (not a move's target) that
   * is the node itself serving it, or a peer its view has reachable and it is connected to.
   */
  private routeAt(node: SimNode, fragment: number): string | undefined {
    return this.routingAt(node, fragment).find((id) =>
      id === node.id ? this.serves(id, fragment) : this.upAt(node, id),
    );
  }

  private routingAt(node: SimNode, fragment: number): string[] {
    const entry = node.coordinator!.table.active(fragment);
    return entry?.replicas.filter((id) => id !== entry.moving?.target) ?? [];
  }

  private upAt(node: SimNode, id: string): boolean {
    const seen = node.core!.view().find((v) => v.nodeId === id);
    return seen !== undefined && !seen.unreachable && this.connected(node.id, id);
  }

  /** Each forwarded write takes one step where it is: arrives, is applied, waits, moves on or ends. */
  private forwardWrites(): void {
    const going = this.forwards;
    this.forwards = [];
    for (const write of going) {
      const node = this.byId.get(write.at)!;
      const holder = this.holders.get(write.at)!;
      if (holder.life !== write.life || node.core === undefined) {
        this.stats.forwardedLost++; // the node died with it: the client's request times out
        continue;
      }
      if (!this.running(node)) {
        this.forwards.push(write); // a paused node takes it up once it resumes
        continue;
      }
      if (write.inFlight) {
        write.inFlight = false;
        if (!this.reaches(write.sender, write.at)) {
          this.stats.forwardedLost++; // the link broke under it
          continue;
        }
      }
      this.forwardStepAt(node, write);
    }
  }

  private forwardStepAt(node: SimNode, write: ForwardedWrite): void {
    const { fragment } = write;
    const route = this.routeAt(node, fragment);
    const first = this.routingAt(node, fragment).find((id) => id === node.id || this.upAt(node, id));
    const view: ForwardView = {
      serving: this.serves(node.id, fragment),
      listedFirst: first === node.id,
      generation: node.coordinator!.table.active(fragment)?.generation ?? 0,
      senderGeneration: write.senderGeneration,
      next:
        route === undefined
          ? 'none'
          : route === node.id
            ? 'self'
            : route === write.sender
              ? 'sender'
              : 'other',
      hops: write.hops,
    };
    const step = forwardStep(view, () => {
      if (write.untilMs === 0) write.untilMs = this.nowMs + FORWARD_DISAGREEMENT_WAIT_MS;
      return this.nowMs < write.untilMs;
    });
    switch (step) {
      case 'serve':
        return this.serveAt(node, fragment, write.key, () => this.forwardStepAt(node, write));
      case 'wait':
        this.stats.forwardWaits++;
        this.forwards.push(write);
        return;
      case 'relay':
        write.sender = node.id;
        write.senderGeneration = view.generation;
        write.at = route!;
        write.life = this.holders.get(route!)!.life;
        write.hops++;
        write.untilMs = 0;
        write.inFlight = true;
        this.stats.forwardHopsMax = Math.max(this.stats.forwardHopsMax, write.hops);
        this.forwards.push(write);
        return;
      case 'refuse':
        this.stats.forwardedRefused++;
        this.trace(
          `${node.id} refuses a forwarded write of fragment ${fragment} from ${write.sender}: ${JSON.stringify(view)}`,
        );
        assert(
          !this.calm,
          `${node.id} refused a write of fragment ${fragment} forwarded by ${write.sender} in a calm cluster (at ${this.nowMs} ms): ${JSON.stringify(view)}`,
        );
        return;
    }
  }

  /**
   * A write the node serves: applied now, or — while the node catches the fragment up (the real
   * FailoverCatchUp) — held, and decided again once the catch-up ends.
   */
  private serveAt(node: SimNode, fragment: number, key: string, again: () => void): void {
    const holder = this.holders.get(node.id)!;
    const catchUp = holder.catchUp!;
    // The node looks at its catch-ups as soon as its table, serving or view changed (a microtask
    // after the change): before any later request.
    catchUp.check();
    if (catchUp.link(fragment) === undefined) return this.apply(node.id, fragment, key);
    catchUp.holdForwarded(fragment, again, () => {
      this.stats.writesRefused++; // too many held: TRYAGAIN
    });
  }

  /** The write applied at `server`, which serves the fragment: acknowledged, and queued to its replicas. */
  private apply(server: string, fragment: number, key: string): void {
    const holder = this.holders.get(server)!;
    const copy = holder.copies.get(fragment);
    assert(copy !== undefined, `${server} serves fragment ${fragment} without a copy`);
    if (this.calm) {
      // Every serving change in a calm cluster is a handover from a replica that is up: the new
      // serving replica holds every write acknowledged before it serves (a read through it sees them).
      for (let i = 0; i < this.sim.keysPerFragment; i++) {
        const acked = this.acked.get(`${fragment}/k${i}`);
        const held = copy.get(`k${i}`) ?? 0;
        assert(
          acked === undefined || held >= acked,
          `${server} serves fragment ${fragment} without its acknowledged write k${i}@${acked} (it holds @${held}) in a calm cluster (at ${this.nowMs} ms)`,
        );
      }
    }
    const version = ++this.version;
    this.trace(`${server} applies ${fragment}/${key}@${version}`);
    copy.set(key, version);
    this.acked.set(`${fragment}/${key}`, version);
    this.stats.writesAcked++;
    for (const peer of holder.replicateTo.get(fragment) ?? []) {
      let backlogs = holder.backlogs.get(fragment);
      if (backlogs === undefined) holder.backlogs.set(fragment, (backlogs = new Map()));
      let backlog = backlogs.get(peer);
      if (backlog === undefined) backlogs.set(peer, (backlog = new Map()));
      backlog.set(key, version);
    }
  }

  /** Each backlog is delivered while its link is up and the peer has the fragment open (about every other step). */
  private replicate(): void {
    for (const [id, holder] of this.holders) {
      for (const [fragment, backlogs] of holder.backlogs) {
        for (const [peer, backlog] of backlogs) {
          const copy = this.holders.get(peer)!.copies.get(fragment);
          if (copy === undefined || !this.reaches(id, peer) || this.random() < 0.5) continue;
          merge(copy, backlog);
          backlogs.delete(peer);
        }
      }
    }
  }

  /**
   * Every running replica pulls what it lacks from each other listed replica it reaches. A round
   * compares everything (until one completed in the peer's run of replication here: replication.ts),
   * so one with a peer that replicates here verifies the copy against it under that run.
   */
  private antiEntropy(): void {
    for (const node of this.nodes) {
      const holder = this.holders.get(node.id)!;
      if (!this.running(node)) continue;
      for (const [fragment, copy] of holder.copies) {
        const replicas = node.coordinator!.table.active(fragment)?.replicas ?? [];
        if (!replicas.includes(node.id)) continue;
        for (const peer of replicas) {
          const theirs = this.holders.get(peer)?.copies.get(fragment);
          if (peer === node.id || theirs === undefined || !this.reaches(node.id, peer)) continue;
          this.stats.repaired += merge(copy, theirs);
          const run = this.holders.get(peer)!.continuity.get(`${fragment}/${node.id}`) ?? 0;
          if (run === 0) continue;
          let under = holder.verifiedUnder.get(fragment);
          if (under === undefined) holder.verifiedUnder.set(fragment, (under = new Map()));
          if (under.get(peer) !== run) this.stats.routineVerifications++;
          under.set(peer, run);
        }
      }
    }
  }

  // ---- Checks ----

  /** A copy goes only once handed over (or never served), and never with an acknowledged write no other copy holds. */
  private checkDrop(id: string, holder: Holder, fragment: number): void {
    assert(
      !holder.served.has(fragment),
      `${id} dropped fragment ${fragment}, which served since its last handoff (at ${this.nowMs} ms)`,
    );
    for (const [key, version] of this.copyOf(id, fragment)) {
      const acked = this.acked.get(`${fragment}/${key}`);
      if (acked === undefined || version < acked) continue;
      const elsewhere = [...this.holders].some(
        ([other, h]) => other !== id && (h.copies.get(fragment)?.get(key) ?? 0) >= acked,
      );
      assert(
        elsewhere,
        `${id} dropped the only copy of fragment ${fragment} key ${key} at acknowledged version ${acked} (at ${this.nowMs} ms)`,
      );
    }
  }

  /**
   * No fragment goes without a serving replica past the grace while a replica that could serve it
   * knows it should: running, reached by a majority, and listed (not as a move's target) by its own
   * table. How long fragments go unserved while a replica in the newest entry is up but lacks the
   * table (its propagation) is measured, not bounded.
   */
  private checkServing(): void {
    for (let fragment = 0; fragment < FRAGMENTS; fragment++) {
      const served = this.nodes.some((n) => this.running(n) && this.serves(n.id, fragment));
      const entry = this.newestEntry(fragment);
      const up = (id: string): boolean =>
        this.running(this.byId.get(id)!) && this.majorityReachSinceMs.get(id) !== undefined;
      const unserved =
        !served && (entry?.replicas.some((id) => id !== entry.moving?.target && up(id)) ?? false);
      const knowing = this.nodes.filter((n) => up(n.id) && this.listsAsServing(n, fragment)).map((n) => n.id);
      const since = (this.unservedSinceMs[fragment] = unserved
        ? (this.unservedSinceMs[fragment] ?? this.nowMs)
        : undefined);
      if (since !== undefined)
        this.stats.maxUnservedMs = Math.max(this.stats.maxUnservedMs, this.nowMs - since);
      const propagating =
        unserved &&
        entry!.replicas.some(
          (id) => id !== entry!.moving?.target && up(id) && this.toldBy(entry!, fragment, id),
        );
      const propagatingSince = (this.propagationSinceMs[fragment] = propagating
        ? (this.propagationSinceMs[fragment] ?? this.nowMs)
        : undefined);
      if (propagatingSince !== undefined) {
        const propagationMs = this.nowMs - propagatingSince;
        this.stats.maxPropagationMs = Math.max(this.stats.maxPropagationMs, propagationMs);
        assert(
          propagationMs <= this.sim.tablePropagationBoundMs,
          `fragment ${fragment} has gone unserved for ${propagationMs} ms (since ${propagatingSince} ms) while its coordinator ${entry!.fence.coordinatorId} acts and reaches a replica that names it`,
        );
      }
      if (served || knowing.length === 0) {
        this.gapSinceMs[fragment] = undefined;
        continue;
      }
      const gapSince = (this.gapSinceMs[fragment] ??= this.nowMs);
      const gapMs = this.nowMs - gapSince;
      this.stats.maxServingGapMs = Math.max(this.stats.maxServingGapMs, gapMs);
      assert(
        gapMs <= this.sim.servingGapGraceMs,
        `fragment ${fragment} has had no serving replica for ${gapMs} ms (since ${gapSince} ms) while [${knowing}] know they should serve it`,
      );
    }
  }

  /**
   * The coordinator that wrote `entry` acts with it (running, reached by a majority, coordinating at
   * that incarnation with the entry in its table), reaches replica `id`, and `id`'s view names it.
   */
  private toldBy(
    entry: NonNullable<ReturnType<AssignmentTable['active']>>,
    fragment: number,
    id: string,
  ): boolean {
    const owner = this.byId.get(entry.fence.coordinatorId);
    const named = this.byId.get(id)?.coordinator?.coordinator;
    return (
      owner?.coordinator?.role === 'coordinator' &&
      this.running(owner) &&
      this.majorityReachSinceMs.get(owner.id) !== undefined &&
      owner.core!.member(owner.id)?.incarnation === entry.fence.incarnation &&
      owner.coordinator.table.active(fragment)?.generation === entry.generation &&
      this.reaches(owner.id, id) &&
      named?.id === owner.id &&
      named.incarnation === entry.fence.incarnation
    );
  }

  /** The node's own table lists it as a serving replica of the fragment (not a move's target). */
  private listsAsServing(node: SimNode, fragment: number): boolean {
    const entry = node.coordinator?.table.active(fragment);
    return (entry?.replicas.includes(node.id) ?? false) && entry?.moving?.target !== node.id;
  }

  /** The fragment's entry at the highest generation any live node holds. */
  private newestEntry(fragment: number) {
    let newest: ReturnType<AssignmentTable['active']>;
    for (const node of this.nodes) {
      const entry = node.coordinator?.table.active(fragment);
      if (entry !== undefined && (newest === undefined || entry.generation > newest.generation))
        newest = entry;
    }
    return newest;
  }

  /** Undefined once placement has settled (see the file header); else why not. */
  private unsettled(): string | undefined {
    const converged = this.converged();
    if (converged !== undefined) return converged;
    for (const id of this.departed) {
      const copies = [...this.holders.get(id)!.copies.keys()];
      assert(copies.length === 0, `${id} left the cluster holding fragments [${copies}]`);
    }
    const coordinator = this.nodes.find((n) => n.coordinator!.role === 'coordinator')!;
    const table = coordinator.coordinator!.table;
    const replicas = Math.min(REPLICAS, this.nodes.length);
    for (let fragment = 0; fragment < FRAGMENTS; fragment++) {
      const entry = table.active(fragment);
      if (entry === undefined) return `fragment ${fragment} has no active entry`;
      if (entry.moving !== null)
        return `fragment ${fragment} is moving ${entry.moving.source} -> ${entry.moving.target}`;
      if (entry.replicas.length !== replicas) return `fragment ${fragment} has replicas [${entry.replicas}]`;
      for (const node of this.nodes) {
        const listed = entry.replicas.includes(node.id);
        if (listed && !this.serves(node.id, fragment))
          return `${node.id} does not serve fragment ${fragment}`;
        const state = this.holders.get(node.id)!.driver!.fragment(fragment)?.state;
        if (
          !listed &&
          (this.holders.get(node.id)!.copies.has(fragment) || (state ?? 'Stopped') !== 'Stopped')
        )
          return `${node.id} still holds fragment ${fragment} (${state})`;
      }
    }
    const view = this.memberView(coordinator);
    const plan = planMoves(table, view, REPLICAS, this.options.moves);
    if (plan.moves.length > 0 || plan.cancellations.length > 0)
      return `the planner wants ${plan.moves.length} moves and ${plan.cancellations.length} cancellations`;
    const transfer = servingTransfers(table, view, 1)[0];
    if (transfer !== undefined)
      return `serving is uneven: fragment ${transfer.fragment} would go from ${transfer.from} to ${transfer.to}`;
    return undefined;
  }

  /**
   * An eligible member holding more replicas than the cap or fewer than an even share (rounded
   * down) in the settled table; undefined when none.
   */
  private imbalance(): string | undefined {
    const coordinator = this.nodes.find((n) => n.coordinator!.role === 'coordinator')!;
    const view = this.memberView(coordinator);
    const table = coordinator.coordinator!.table;
    const eligible = eligibleMembers(view);
    const cap = planMoves(table, view, REPLICAS, this.options.moves).capReplicas;
    const floor = floorReplicas(FRAGMENTS, REPLICAS, eligible.length);
    const held = new Map(eligible.map((id) => [id, 0]));
    for (const [, entry] of table.entries()) {
      if (entry.kind !== 'active') continue;
      for (const id of entry.replicas) if (held.has(id)) held.set(id, held.get(id)! + 1);
    }
    for (const [id, n] of held)
      if (n > cap || n < floor) return `${id} holds ${n} replicas, outside ${floor}..${cap}`;
    return undefined;
  }

  /** The first acknowledged write some replica of the settled table lacks; undefined when none. */
  private missingWrite(): string | undefined {
    const table = this.nodes[0]!.coordinator!.table;
    for (const [where, acked] of this.acked) {
      const [fragment, key] = where.split('/') as [string, string];
      for (const id of table.active(Number(fragment))!.replicas) {
        const version = this.holders.get(id)!.copies.get(Number(fragment))?.get(key);
        if (version === undefined || version < acked)
          return `${id} holds fragment ${fragment} key ${key} at ${version}, acknowledged at ${acked}`;
      }
    }
    return undefined;
  }

  // ---- Helpers ----

  private moveCounters(): Record<(typeof COUNTERS)[number], number> {
    const sum = { ...this.retired } as Record<(typeof COUNTERS)[number], number>;
    for (const node of this.nodes) {
      const counters = node.coordinator?.counters;
      if (counters !== undefined) for (const key of COUNTERS) sum[key] += counters[key];
    }
    return sum;
  }

  /** `from` can reach `to` now: both alive, the link up, `to` not paused. */
  private reaches(from: string, to: string): boolean {
    return from === to || (this.connected(from, to) && this.running(this.byId.get(to)!));
  }

  private serves(id: string, fragment: number): boolean {
    return this.holders.get(id)?.driver?.serves(fragment) === true;
  }

  private copyOf(id: string, fragment: number): Copy {
    const copy = this.holders.get(id)!.copies.get(fragment);
    assert(copy !== undefined, `${id} has no copy of fragment ${fragment} open`);
    return copy;
  }
}

/** Merges `from` into `into` by the higher version; how many keys it raised. */
function merge(into: Copy, from: ReadonlyMap<string, number>): number {
  let raised = 0;
  for (const [key, version] of from) {
    if ((into.get(key) ?? 0) >= version) continue;
    into.set(key, version);
    raised++;
  }
  return raised;
}
