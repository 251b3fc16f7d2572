// A seeded simulator of cluster membership: 5–7 nodes run the real
// Membership core (src/core/membership.ts) under its real driver (src/main/mesh/membership-driver.ts)
// over a simulated network and clock, in one thread, from one seed: the datagrams on the simulated
// wire are the ones the node sends, tagged and encoded. Messages take 1–30 ms, may be lost, and are
// cut by partitions; nodes are killed and
// restarted (from what they persisted, so the restart bumps their incarnation), paused (a paused
// node does not step, its messages wait as in a socket buffer, and its clock has jumped when it
// resumes), and every node's clock runs at its own offset and rate.
//
// Every node also runs the placement coordinator under its real driver
// (src/main/mesh/coordinator-driver.ts), fed this node's membership view; its messages travel over a
// simulated peer connection (not lost, but not sent across a cut link or to a dead node).
//
// Phases and what each checks:
// - chaos: random partitions, loss, kills, restarts and pauses. Safety throughout: no member is
//   declared Down while a majority of the nodes has reached it for `refuteGraceMs` (enough for a
//   claim to reach it and its refutation to spread).
//   The coordinator throughout: no two coordinators ever hold one table epoch, no two tables hold
//   different replicas for one (epoch, fragment, generation), and a node changes the table as
//   coordinator only while it reaches a majority (or lost it less than the detection bound ago:
//   the gate reads its membership view).
// - heal: every link up, every node alive. Liveness: every node's view converges (same members,
//   states, incarnations; all Up and reachable), and every node holds the same table, the lowest
//   id acting as its coordinator.
// - kill: one node dies for good. Every survivor marks it unreachable within the detection bound,
//   and Down no sooner than `downAfterMs` after the kill and within `downBoundMs` past it.
// - pause: another node stops for less than `downAfterMs`. No node ever declares it Down, and the
//   views converge again once it resumes.
//
// A simulator built on this world may ask members to leave (askToLeave): a node whose membership says
// it left (Removed, after its linger) stops for good and drops out of `nodes`; the views converge
// with it Removed in every one.

import { assert } from '../../src/core/assert.js';
import { type AssignmentTable, decodeTable, encodeTable } from '../../src/core/assignment-table.js';
import type { DriverClock } from '../../src/core/clock.js';
import {
  configuredHolders,
  firstPlacement,
  type MemberView,
  type MoveLimits,
  onlyCopyHolders,
} from '../../src/core/coordinator.js';
import { CoordinatorMachine, type EpochPromise } from '../../src/core/coordinator-machine.js';
import { resumesLeave } from '../../src/core/leave.js';
import {
  COORDINATOR_DIGEST_INTERVAL_MS,
  COORDINATOR_REPORT_RETRY_MS,
  PLACEMENT_PLAN_INTERVAL_MS,
} from '../../src/core/limits.js';
import {
  MEMBERSHIP_CONFIG_DEFAULTS,
  type MemberRecord,
  startsJoining,
} from '../../src/core/membership-types.js';
import { CoordinatorDriver } from '../../src/main/mesh/coordinator-driver.js';
import { MembershipDriver } from '../../src/main/mesh/membership-driver.js';
import { datagramKey } from '../../src/threads/membership-datagram.js';
import { seededFractions } from '../unit/fixtures/xorshift32.js';

export interface MembershipSimOptions {
  seed: number;
  /** The coordinator's move limits; undefined: it plans no moves (the table stays as bootstrapped). */
  moves?: MoveLimits;
  chaosMs: number;
  /** Time a message to a reachable member may take to produce a refutation seen everywhere. */
  refuteGraceMs: number;
  /** Past the detection bound (`unreachableBoundMs`): gossip's spread and the clocks' rates. */
  detectionSlackMs: number;
  downBoundMs: number;
  convergeBoundMs: number;
}

export const MEMBERSHIP_SIM_DEFAULTS: Omit<MembershipSimOptions, 'seed'> = {
  chaosMs: 180_000,
  refuteGraceMs: 15_000,
  detectionSlackMs: 1_000,
  downBoundMs: 10_000,
  // Push-pull runs every 30 s; two rounds and the gossip after them.
  convergeBoundMs: 75_000,
};

export interface MembershipSimReport {
  nodes: number;
  messages: number;
  lost: number;
  partitions: number;
  kills: number;
  pauses: number;
  downs: number;
  unreachableMarks: number;
  maxUnreachableMs: number;
  maxDownMs: number;
  takeovers: number;
  tableChanges: number;
}

export const STEP_MS = 10;
export const FRAGMENTS = 16;
export const REPLICAS = 3;
const TRACE = process.env.TESSERA_SIM_TRACE !== undefined;
/** Longer than any run: a start without data waits for its members' answer (see start). */
const DISCOVERY_UNBOUNDED_MS = 24 * 3_600_000;

const DATAGRAM_KEY = datagramKey(Buffer.from('the simulated cluster secret, 32 bytes or more'));

export interface SimTimer {
  atMs: number;
  fire: () => void;
}

export interface SimNode {
  id: string;
  /** The member it joins through when started without persisted members; undefined for a founding member. */
  joinSeed: string | undefined;
  /** An operator asked it to leave: asked again when it restarts (a restart forgets a leave, as the node does). */
  leaving: boolean;
  /** The node's membership driver; undefined while the node is dead. */
  core: MembershipDriver | undefined;
  /** The node's coordinator driver, fed its membership view; undefined while the node is dead. */
  coordinator: CoordinatorDriver | undefined;
  /** The membership view changed since the coordinator last heard it. */
  viewDirty: boolean;
  /** The timers the drivers keep (one each), on the node's local clock. */
  timer: SimTimer | undefined;
  coordinatorTimer: SimTimer | undefined;
  /** What it persisted last: a restart starts from it. */
  persisted: { incarnation: number; members: MemberRecord[] } | undefined;
  /**
   * Its store was lost before this start (what it persisted too): it starts at its local clock's
   * milliseconds, as a node on a new data directory does, and joins through `joinSeed`.
   */
  wiped: boolean;
  /** The table it persisted last, as the data directory holds it (JSON text), and its promise. */
  persistedTable: string | undefined;
  persistedPromise: EpochPromise | undefined;
  pausedUntilMs: number;
  /** How long its last pause lasted. */
  lastPauseMs: number;
  held: InFlight[];
  offsetMs: number;
  rate: number;
}

interface InFlight {
  atMs: number;
  from: string;
  to: string;
  /** A membership datagram, or a coordinator envelope on the simulated peer connection. */
  channel: 'datagram' | 'connection';
  datagram: Buffer;
}

export class MembershipSim {
  protected readonly random: () => number;
  protected readonly nodes: SimNode[] = [];
  protected readonly byId = new Map<string, SimNode>();
  private inFlight: InFlight[] = [];
  protected readonly cut = new Set<string>();
  private lossRate = 0;
  /** A partition holds until then: long ones (past downAfterMs) let a majority down the minority. */
  private partitionUntilMs = 0;
  protected nowMs = 0;
  /**
   * Since when each node has been reached by a majority of its coordinator gate's voters (its
   * table's members; alive, running, links up); undefined when not.
   */
  protected readonly majorityReachSinceMs = new Map<string, number | undefined>();
  /**
   * Since when each node has been reached by a majority of every node in the cluster (joined or
   * joining, alive or not): membership's own majority, which counts members the table may not list
   * yet, so it is not the gate's. A correct membership downs no node reached this way.
   */
  private readonly clusterReachSinceMs = new Map<string, number | undefined>();
  /** The lives (`id@incarnation`) some node has held Down. */
  private readonly downLives = new Set<string>();
  /** When each node last reached each member (`x>y` → ms), itself included while it runs. */
  private readonly lastReachedMs = new Map<string, number>();
  /**
   * The highest local-health multiplier among running nodes, each time it changed (oldest first,
   * pruned past the longest detection bound): Lifeguard stretches every prober's interval by it.
   */
  private readonly healthPeaks: { atMs: number; multiplier: number }[] = [];
  /** Table epoch → the coordinator (id@incarnation) that opened it, across every node's table. */
  private readonly epochOwners = new Map<number, string>();
  /** `epoch/fragment/generation` → the replicas written there, across every node's table. */
  private readonly writtenEntries = new Map<string, string>();
  private readonly initialPlacement: string[][];
  /** The founding members, as each of them was started with. */
  private readonly initialMembers: string[];
  /** Nodes that left the cluster (Removed, then stopped for good), out of `nodes`. */
  protected readonly departed = new Set<string>();
  /** Nodes whose membership said they left, stopped after the step that said it. */
  private leavers: SimNode[] = [];
  /** Observers that hold each node unreachable (or Down), for the kill phase. */
  private onEvent: ((observer: string, kind: string, about: string) => void) | undefined;
  protected readonly report: MembershipSimReport;
  private readonly downAfterMs = MEMBERSHIP_CONFIG_DEFAULTS.downAfterMs;

  constructor(protected readonly options: MembershipSimOptions) {
    this.random = seededFractions(options.seed);
    const count = 5 + Math.floor(this.random() * 3);
    for (let i = 1; i <= count; i++) this.addNode(`n${i}`, undefined);
    this.report = {
      nodes: count,
      messages: 0,
      lost: 0,
      partitions: 0,
      kills: 0,
      pauses: 0,
      downs: 0,
      unreachableMarks: 0,
      maxUnreachableMs: 0,
      maxDownMs: 0,
      takeovers: 0,
      tableChanges: 0,
    };
    // As the nodes a cluster starts with compute it (cluster-config.ts).
    this.initialPlacement = firstPlacement(
      this.nodes.map((n) => n.id),
      FRAGMENTS,
      REPLICAS,
    );
    this.initialMembers = this.nodes.map((n) => n.id);
  }

  run(): MembershipSimReport {
    this.startAll();
    this.chaos();
    this.heal();
    this.killPhase();
    this.pausePhase();
    return this.report;
  }

  /** Starts the founding members (after construction, so a subclass's hooks see its own fields). */
  protected startAll(): void {
    for (const node of this.nodes) this.start(node);
    this.updateReach();
  }

  /** A new node `id` that joins through `seed` (a member), started now. */
  protected addJoiner(id: string, seed: string): SimNode {
    const node = this.addNode(id, seed);
    this.trace(`join ${id} through ${seed}`);
    this.start(node);
    this.updateReach();
    return node;
  }

  /** A node not started yet, with its own clock offset and rate. */
  private addNode(id: string, joinSeed: string | undefined): SimNode {
    const node: SimNode = {
      id,
      joinSeed,
      leaving: false,
      core: undefined,
      coordinator: undefined,
      viewDirty: false,
      timer: undefined,
      coordinatorTimer: undefined,
      persisted: undefined,
      wiped: false,
      persistedTable: undefined,
      persistedPromise: undefined,
      pausedUntilMs: 0,
      lastPauseMs: 0,
      held: [],
      offsetMs: Math.floor((this.random() - 0.5) * 4_000),
      rate: 1 + (this.random() - 0.5) * 0.002,
    };
    this.nodes.push(node);
    this.byId.set(id, node);
    return node;
  }

  // ---- Hooks: what a simulator built on this world adds to each node ----

  /** The node was started (or restarted), its drivers created but not yet fed a view. */
  protected onNodeStarted(_node: SimNode): void {}

  /** The node is about to stop (killed, or gone after leaving): its drivers are still there. */
  protected onNodeStopped(_node: SimNode): void {}

  /** The node routes by `table` from now on (`fragments`: the entries that changed). */
  protected onRoutingTable(_node: SimNode, _table: AssignmentTable, _fragments: readonly number[]): void {}

  // ---- Phases ----

  private chaos(): void {
    const endMs = this.nowMs + this.options.chaosMs;
    let nextFaultMs = this.nowMs + 2_000;
    while (this.nowMs < endMs) {
      if (this.nowMs >= nextFaultMs) {
        this.randomFault();
        nextFaultMs = this.nowMs + 1_000 + Math.floor(this.random() * 8_000);
      }
      this.advance();
    }
  }

  protected randomFault(): void {
    const r = this.random();
    const node = this.nodes[Math.floor(this.random() * this.nodes.length)]!;
    const partitioned = this.nowMs < this.partitionUntilMs;
    if (r < 0.25) {
      if (!partitioned) this.partition();
    } else if (r < 0.4) {
      if (!partitioned) this.healLinks();
    } else if (r < 0.5) this.lossRate = this.random() < 0.5 ? 0 : this.random() * 0.1;
    else if (r < 0.65) {
      if (node.core !== undefined) this.kill(node);
      else this.start(node);
    } else if (r < 0.8) {
      if (node.core !== undefined && node.pausedUntilMs <= this.nowMs) {
        this.report.pauses++;
        node.pausedUntilMs = this.nowMs + 500 + Math.floor(this.random() * 25_000);
        node.lastPauseMs = node.pausedUntilMs - this.nowMs;
        this.trace(`pause ${node.id} until ${node.pausedUntilMs / 1000}s`);
      }
    } else {
      const other = this.nodes[Math.floor(this.random() * this.nodes.length)]!;
      if (other !== node) this.setLink(node.id, other.id, false);
      if (other !== node) this.trace(`cut ${node.id}-${other.id}`);
    }
    this.updateReach();
  }

  private heal(): void {
    this.healAll();
    this.awaitConvergence('after the faults healed');
  }

  /** The faults stop: every link up, no loss, every node alive and running. */
  protected healAll(): void {
    this.healLinks();
    this.lossRate = 0;
    for (const node of this.nodes) {
      if (node.core === undefined) this.start(node);
      node.pausedUntilMs = Math.min(node.pausedUntilMs, this.nowMs);
    }
    this.updateReach();
  }

  private killPhase(): void {
    const victim = this.nodes[Math.floor(this.random() * this.nodes.length)]!;
    const survivors = this.nodes.filter((n) => n !== victim).map((n) => n.id);
    const killedMs = this.nowMs;
    const unreachableAt = new Map<string, number>();
    const downAt = new Map<string, number>();
    this.onEvent = (observer, kind, about) => {
      if (about !== victim.id) return;
      if (kind === 'MemberUnreachable' && !unreachableAt.has(observer))
        unreachableAt.set(observer, this.nowMs);
      if (kind === 'MemberDown' && !downAt.has(observer)) downAt.set(observer, this.nowMs);
    };
    this.kill(victim);
    this.trace(`health ${this.nodes.map((n) => `${n.id}×${n.core?.healthMultiplier()}`).join(' ')}`);
    this.updateReach();
    const boundMs = this.unreachableBoundMs();
    const deadlineMs = killedMs + this.downAfterMs + boundMs + this.options.downBoundMs;
    while (this.nowMs < deadlineMs && downAt.size < survivors.length) this.advance();
    this.onEvent = undefined;
    for (const id of survivors) {
      const unreachableMs = (unreachableAt.get(id) ?? Number.POSITIVE_INFINITY) - killedMs;
      const downMs = (downAt.get(id) ?? Number.POSITIVE_INFINITY) - killedMs;
      this.report.maxUnreachableMs = Math.max(this.report.maxUnreachableMs, unreachableMs);
      this.report.maxDownMs = Math.max(this.report.maxDownMs, downMs);
      assert(
        unreachableMs <= boundMs,
        `${id} marked killed ${victim.id} unreachable after ${unreachableMs} ms (bound ${boundMs})`,
      );
      assert(
        downMs >= this.downAfterMs,
        `${id} marked ${victim.id} Down ${downMs} ms after the kill, before downAfterMs`,
      );
      assert(
        downMs <= this.downAfterMs + this.options.downBoundMs,
        `${id} marked killed ${victim.id} Down after ${downMs} ms (bound downAfterMs + ${this.options.downBoundMs})`,
      );
    }
    this.start(victim);
    this.awaitConvergence('after the killed node restarted');
  }

  private pausePhase(): void {
    const victim = this.nodes[Math.floor(this.random() * this.nodes.length)]!;
    const pauseMs = 1_000 + Math.floor(this.random() * (this.downAfterMs - 1_001));
    let downs = 0;
    this.onEvent = (observer, kind, about) => {
      if (about === victim.id && kind === 'MemberDown') downs++;
      assert(
        downs === 0,
        `${observer} declared ${victim.id} Down during a ${pauseMs} ms pause (< downAfterMs)`,
      );
    };
    this.report.pauses++;
    victim.pausedUntilMs = this.nowMs + pauseMs;
    victim.lastPauseMs = pauseMs;
    this.updateReach();
    const endMs = this.nowMs + pauseMs + 10_000;
    while (this.nowMs < endMs) this.advance();
    this.awaitConvergence(`after ${victim.id} resumed from a ${pauseMs} ms pause`);
    this.onEvent = undefined;
  }

  private awaitConvergence(when: string): void {
    const deadlineMs = this.nowMs + this.options.convergeBoundMs;
    while (this.nowMs < deadlineMs) {
      // Steps first: a node whose pause the heal just ended has not run since, and still shows the
      // view and health it had before the pause (its loop finds the stall when its timer fires).
      for (let i = 0; i < 10; i++) this.advance();
      if (this.converged() === undefined) return;
    }
    assert(
      false,
      `views did not converge within ${this.options.convergeBoundMs} ms ${when}: ${this.converged()}`,
    );
  }

  /** Undefined when every node sees every node Up and reachable at one incarnation; else why not. */
  protected converged(): string | undefined {
    let reference: string | undefined;
    for (const node of this.nodes) {
      const core = node.core;
      if (core === undefined) return `${node.id} is down`;
      const gone = core.view().find((v) => this.departed.has(v.nodeId) && v.state !== 'Removed');
      if (gone !== undefined) return `${node.id} sees ${gone.nodeId}, which left, as ${gone.state}`;
      const view = core
        .view()
        .filter((v) => !this.departed.has(v.nodeId))
        .map(
          (v) =>
            `${v.nodeId}:${v.state}:${v.incarnation}${v.unreachable ? ':unreachable' : ''}${v.suspect ? ':suspect' : ''}`,
        )
        .join(' ');
      if (reference === undefined) reference = view;
      else if (view !== reference)
        return `${node.id} sees [${view}], ${this.nodes[0]!.id} sees [${reference}]`;
      if (/:unreachable|:suspect|:Down|:Removed|:Joining|:Leaving|:Exiting/.test(view))
        return `not all Up: [${view}]`;
      // Calm, too: a detector still wary from the faults (Lifeguard's score) probes slower.
      if (core.healthMultiplier() !== 1) return `${node.id}'s local health is ×${core.healthMultiplier()}`;
    }
    const lowest = [...this.nodes].map((n) => n.id).sort()[0];
    const digests = new Set(this.nodes.map((n) => CoordinatorMachine.digestOf(n.coordinator!.table)));
    if (digests.size !== 1) return `tables differ: ${[...digests].join(' | ')}`;
    const acting = this.nodes.filter((n) => n.coordinator!.role === 'coordinator').map((n) => n.id);
    if (acting.length !== 1 || acting[0] !== lowest)
      return `acting coordinators [${acting}], expected ${lowest}`;
    const owner = this.nodes[0]!.coordinator!.table.epochCoordinator;
    if (
      owner?.id !== lowest ||
      owner.incarnation !== this.byId.get(lowest)!.core!.member(lowest)!.incarnation
    )
      return `the table's epoch belongs to ${owner?.id}@${owner?.incarnation}, not ${lowest}'s current incarnation`;
    return undefined;
  }

  // ---- The world ----

  protected advance(): void {
    this.nowMs += STEP_MS;
    this.updateReach();
    this.recordHealth();
    const due = this.inFlight.filter((m) => m.atMs <= this.nowMs);
    if (due.length > 0) this.inFlight = this.inFlight.filter((m) => m.atMs > this.nowMs);
    for (const node of this.nodes) {
      if (node.core === undefined) continue;
      if (node.pausedUntilMs > this.nowMs) continue;
      const local = this.localMs(node);
      if (node.held.length > 0) {
        // Resumed: the timers fire first (the clock has jumped), then the socket buffers are read.
        this.fireTimer(node, true);
        this.fireCoordinatorTimer(node);
        const held = node.held;
        node.held = [];
        for (const m of held) this.deliver(node, m);
      } else {
        if (node.timer !== undefined && local >= node.timer.atMs) this.fireTimer(node, false);
        this.fireCoordinatorTimer(node);
      }
      this.feedView(node);
    }
    for (const m of due) {
      const node = this.byId.get(m.to)!;
      if (node.core === undefined) continue;
      if (node.pausedUntilMs > this.nowMs) node.held.push(m);
      else {
        this.deliver(node, m);
        this.feedView(node);
      }
    }
    const leavers = this.leavers;
    this.leavers = [];
    for (const node of leavers) this.depart(node);
  }

  private fireCoordinatorTimer(node: SimNode): void {
    const timer = node.coordinatorTimer;
    if (timer === undefined || this.localMs(node) < timer.atMs) return;
    node.coordinatorTimer = undefined;
    timer.fire();
  }

  /** The coordinator hears the node's membership view after whatever changed it, as the node's microtask would. */
  private feedView(node: SimNode): void {
    if (!node.viewDirty || node.coordinator === undefined || node.core === undefined) return;
    node.viewDirty = false;
    node.coordinator.onView(this.memberView(node));
  }

  /** The node's membership view as its coordinator hears it (the node must be alive). */
  protected memberView(node: SimNode): MemberView[] {
    return node.core!.view().map((v) => ({
      id: v.nodeId,
      state: v.state,
      // Requests may go to it: membership reaches it and its peer connection is up.
      reachable: v.nodeId === node.id || (!v.unreachable && this.connected(node.id, v.nodeId)),
      incarnation: v.incarnation,
    }));
  }

  /** The simulated peer connection between two nodes is up: both alive and the link not cut. */
  protected connected(a: string, b: string): boolean {
    return (
      this.byId.get(b)?.core !== undefined &&
      this.byId.get(a)?.core !== undefined &&
      !this.cut.has(linkKey(a, b))
    );
  }

  /** Fires the node's timer (`always`: even before it is due, as a resumed loop's first turn does). */
  private fireTimer(node: SimNode, always: boolean): void {
    const timer = node.timer;
    if (timer === undefined || (!always && this.localMs(node) < timer.atMs)) return;
    node.timer = undefined;
    timer.fire();
  }

  private deliver(node: SimNode, m: InFlight): void {
    if (m.channel === 'datagram') node.core?.onDatagram(m.datagram, `${m.from}:7000`);
    else {
      const reason = node.coordinator?.onEnvelope(m.datagram, FRAGMENTS);
      assert(reason === undefined, `${node.id} refused a placement message from ${m.from}: ${reason}`);
    }
  }

  private onMemberEvent(observer: string, kind: string, about: string, incarnation: number): void {
    this.trace(`${observer}: ${kind} ${about}`);
    this.byId.get(observer)!.viewDirty = true;
    if (kind === 'MemberUnreachable') this.report.unreachableMarks++;
    if (kind === 'MemberDown') {
      this.report.downs++;
      // A Down about an earlier life of the member (killed, since restarted) is old news, not a decision
      // now; so is one of a life some node held Down before, which this one adopts from gossip (it
      // may reach others only once a partition heals, long after the decision).
      const current = this.byId.get(about)!.core?.member(about)?.incarnation ?? 0;
      const life = `${about}@${incarnation}`;
      const adopted = this.downLives.has(life);
      this.downLives.add(life);
      const since = incarnation < current || adopted ? undefined : this.clusterReachSinceMs.get(about);
      assert(
        since === undefined || this.nowMs - since < this.options.refuteGraceMs,
        `${observer} declared ${about} Down at ${this.nowMs} ms while a majority has reached it since ${since} ms`,
      );
    }
    this.onEvent?.(observer, kind, about);
  }

  private send(from: string, address: string, datagram: Buffer): void {
    this.report.messages++;
    const to = address.slice(0, address.indexOf(':'));
    if (!this.byId.has(to) || this.cut.has(linkKey(from, to)) || this.random() < this.lossRate) {
      this.report.lost++;
      return;
    }
    const latencyMs = 1 + Math.floor(this.random() * 30);
    // A copy, as the wire would make: no state may be shared between nodes.
    this.inFlight.push({
      atMs: this.nowMs + latencyMs,
      from,
      to,
      channel: 'datagram',
      datagram: Buffer.from(datagram),
    });
  }

  /** A coordinator envelope: sent only while the peer connection is up, then never lost (TCP). */
  private sendEnvelope(from: string, to: string, envelope: Uint8Array): boolean {
    if (!this.connected(from, to)) return false;
    const latencyMs = 1 + Math.floor(this.random() * 30);
    this.inFlight.push({
      atMs: this.nowMs + latencyMs,
      from,
      to,
      channel: 'connection',
      datagram: Buffer.from(envelope),
    });
    return true;
  }

  /** The checks of every table a node routes by (see the file header). */
  private onTableChanged(node: SimNode, table: AssignmentTable): void {
    this.report.tableChanges++;
    const owner = table.epochCoordinator;
    if (owner !== undefined) {
      const key = `${owner.id}@${owner.incarnation}`;
      const known = this.epochOwners.get(table.epoch);
      assert(
        known === undefined || known === key,
        `table epoch ${table.epoch} is held by two coordinators: ${known} and ${key} (at ${node.id})`,
      );
      this.epochOwners.set(table.epoch, key);
    }
    for (const [fragment, entry] of table.entries()) {
      const key = `${entry.fence.epoch}/${fragment}/${entry.generation}`;
      const content = entry.kind === 'active' ? entry.replicas.join(',') : 'tombstone';
      const known = this.writtenEntries.get(key);
      assert(
        known === undefined || known === content,
        `fragment ${fragment} generation ${entry.generation} at epoch ${entry.fence.epoch} is [${known}] and [${content}] (at ${node.id})`,
      );
      this.writtenEntries.set(key, content);
    }
    if (node.coordinator?.role === 'coordinator') {
      // The gate reads the node's view, which learns that a member is out of reach within the
      // detection bound — at the local health the probers had meanwhile, and with a suspicion that
      // may lack its confirmations under loss — and a node resumed from a pause acts on its view
      // from before it first. So a majority of the table's members must each have been reached
      // that recently. Promised epochs keep the table safe meanwhile (checked above); this bounds
      // how stale the gate may be.
      const staleMs = this.staleViewBoundMs() + node.lastPauseMs;
      const voters = this.voters(node);
      const recent = voters.filter(
        (id) =>
          this.nowMs - (this.lastReachedMs.get(linkKey(node.id, id)) ?? Number.NEGATIVE_INFINITY) <= staleMs,
      );
      assert(
        recent.length * 2 > voters.length,
        `${node.id} changed the table as coordinator at ${this.nowMs} ms reaching only ${recent.join(',')} of ${voters.join(',')} within ${staleMs} ms`,
      );
    }
  }

  protected start(node: SimNode): void {
    this.trace(`start ${node.id}`);
    const restored = node.persisted;
    const wiped = node.wiped;
    node.wiped = false;
    // A joiner starts knowing itself only; restarted, it rejoins the members it persisted, or joins
    // again when it persisted only itself (killed mid-join), as the node decides.
    const joining = startsJoining(node.id, node.joinSeed === undefined ? 0 : 1, restored?.members ?? []);
    // A leave the last run persisted goes on by itself (the node's rule); one it was asked for and
    // never persisted is asked again.
    const resuming = resumesLeave(restored?.members.find((m) => m.nodeId === node.id)?.state);
    const members: MemberRecord[] =
      restored?.members ??
      (node.joinSeed !== undefined ? [node.id] : this.initialMembers).map((id) => ({
        nodeId: id,
        address: `${id}:7000`,
        incarnation: 0,
        state: 'Up' as const,
      }));
    node.pausedUntilMs = 0;
    node.held = [];
    node.timer = undefined;
    const clock: DriverClock = {
      nowMs: () => this.localMs(node),
      setTimer: (atMs, fire) => {
        node.timer = { atMs, fire };
      },
      clearTimer: () => {
        node.timer = undefined;
      },
    };
    node.core = new MembershipDriver(
      {
        ...MEMBERSHIP_CONFIG_DEFAULTS,
        nodeId: node.id,
        address: `${node.id}:7000`,
        restoredIncarnation: restored?.incarnation ?? (wiped ? this.localMs(node) : undefined),
        // As the node: a new data directory, or one whose join was never answered, holds no data.
        withoutData: restored === undefined || joining,
        // A start without data waits for a member's answer however long a fault lasts: once its wait
        // ends unanswered the node gives up on hearing of an earlier run (cluster.ts), which is not
        // simulated here.
        discoveryMs: DISCOVERY_UNBOUNDED_MS,
        members,
        selfState: resuming ? 'Leaving' : joining ? 'Joining' : 'Up',
        // Restarted after its leave completed: membership refuses it at once (the node's rule).
        selfRemoved: restored?.members.find((m) => m.nodeId === node.id)?.state === 'Removed',
      },
      {
        sendDatagram: (address, datagram) => this.send(node.id, address, datagram),
        // Every message of 5–7 members fits a datagram.
        sendEnvelope: () => assert(false, 'a membership message too large for a datagram') as never,
        persist: (incarnation, members) => {
          node.persisted = { incarnation, members };
          return undefined;
        },
        log: (_level, _fields, message) => this.trace(`${node.id} membership: ${message}`),
      },
      {
        onMemberEvent: (event) =>
          this.onMemberEvent(node.id, event.kind, event.member.nodeId, event.member.incarnation),
        // Only a node that left is ever Removed here (no operator removes a Down member).
        onRefused: (reason) => {
          assert(node.leaving, `${node.id} was refused though it did not leave: ${reason}`);
          this.leavers.push(node);
        },
        // Each node keeps its incarnation across restarts here: what it hears of earlier runs says nothing.
        onEarlierRun: () => {},
        // As the node (cluster.ts askToDropLostCopies): every node here takes the message.
        onLostCopies: (member, incarnation) => node.coordinator?.lostCopies(member, incarnation),
        onLeft: () => {
          assert(node.leaving, `${node.id} left though no one asked it to`);
          this.leavers.push(node);
        },
      },
      clock,
      DATAGRAM_KEY,
      seededFractions((this.random() * 2 ** 32) >>> 0),
    );
    node.coordinatorTimer = undefined;
    node.coordinator = new CoordinatorDriver(
      {
        selfId: node.id,
        fragmentCount: FRAGMENTS,
        replicas: REPLICAS,
        // A joiner was started with no placement and itself as its only member (--join).
        initialPlacement: node.joinSeed === undefined ? this.initialPlacement : [],
        initialMembers: node.joinSeed === undefined ? this.initialMembers : [node.id],
        // As the node: a node that joined (or joins) a cluster never bootstraps a table of its own.
        mayBootstrap: node.joinSeed === undefined,
        restored:
          node.persistedTable === undefined ? undefined : decodeTable(JSON.parse(node.persistedTable)),
        restoredPromise: node.persistedPromise,
        reportRetryMs: COORDINATOR_REPORT_RETRY_MS,
        digestIntervalMs: COORDINATOR_DIGEST_INTERVAL_MS,
        moves: this.options.moves,
        planIntervalMs: PLACEMENT_PLAN_INTERVAL_MS,
      },
      {
        sendEnvelope: (to, envelope) => this.sendEnvelope(node.id, to, envelope),
        persist: (table, promise) => {
          node.persistedTable = JSON.stringify(encodeTable(table));
          node.persistedPromise = promise;
          return undefined;
        },
        log: (level, _fields, message) => this.trace(`${node.id} coordinator ${level}: ${message}`),
        syncView: (to) => node.core?.syncWith(to),
      },
      {
        onTableChanged: (table, fragments) => {
          this.onTableChanged(node, table);
          // As the node (cluster.ts onTableChanged): membership hears which members the table lists.
          node.core?.placed(table.members(), onlyCopyHolders(table));
          this.onRoutingTable(node, table, fragments);
        },
        onCoordinatorChanged: (coordinator, epoch) => {
          if (coordinator?.id === node.id && node.coordinator?.role === 'coordinator')
            this.report.takeovers++;
          this.trace(`${node.id}: coordinator ${coordinator?.id}@${coordinator?.incarnation} epoch ${epoch}`);
        },
      },
      {
        nowMs: () => this.localMs(node),
        setTimer: (atMs, fire) => {
          node.coordinatorTimer = { atMs, fire };
        },
        clearTimer: () => {
          node.coordinatorTimer = undefined;
        },
      },
    );
    // As the node at start, which routes by its restored table as by a changed one; before any
    // table, a static start judges joiners by the placement the first table takes over.
    if (node.joinSeed === undefined && node.coordinator.table.entries().length === 0) {
      const { members, onlyCopies } = configuredHolders(this.initialPlacement);
      node.core.placed(members, onlyCopies);
    } else node.core.placed(node.coordinator.table.members(), onlyCopyHolders(node.coordinator.table));
    this.onNodeStarted(node);
    this.connectionsChanged();
    this.feedView(node);
    if (joining) node.core.join([{ nodeId: node.joinSeed!, address: `${node.joinSeed}:7000` }]);
    if (resuming) {
      assert(node.leaving, `${node.id} resumed a leave no one asked for`);
      this.trace(`${node.id} resumes its leave`);
    } else if (node.leaving) {
      this.askToLeave(node);
    }
  }

  /** An operator asks the node to leave (again after a restart that had not persisted it). */
  protected askToLeave(node: SimNode): void {
    this.trace(`leave ${node.id}`);
    node.leaving = true;
    void node.core!.leave().then((reply) => {
      this.trace(`${node.id} leave: ${reply.status} ${reply.message}`);
      if (reply.status === 'Ok') this.onLeaving(node);
      // Refused (a joiner no member answered yet): the node stays, and no one asks again.
      else node.leaving = false;
    });
  }

  /** The node's leave was accepted (cluster.ts leave): a simulator built on this world may check it at once. */
  protected onLeaving(_node: SimNode): void {}

  protected kill(node: SimNode): void {
    this.trace(`kill ${node.id}`);
    this.report.kills++;
    this.stop(node);
  }

  /** A node that left stops for good: out of `nodes`, never started again. */
  private depart(node: SimNode): void {
    if (node.core === undefined) return;
    this.trace(`${node.id} left the cluster`);
    this.stop(node);
    this.nodes.splice(this.nodes.indexOf(node), 1);
    this.departed.add(node.id);
    this.majorityReachSinceMs.delete(node.id);
    this.clusterReachSinceMs.delete(node.id);
    this.updateReach();
  }

  private stop(node: SimNode): void {
    this.onNodeStopped(node);
    node.core = undefined;
    node.timer = undefined;
    node.coordinator = undefined;
    node.coordinatorTimer = undefined;
    node.held = [];
    this.connectionsChanged();
    this.inFlight = this.inFlight.filter((m) => m.to !== node.id);
  }

  private partition(): void {
    this.report.partitions++;
    this.healLinks();
    this.partitionUntilMs = this.nowMs + 5_000 + Math.floor(this.random() * 55_000);
    const side = new Set(this.nodes.filter(() => this.random() < 0.5).map((n) => n.id));
    this.trace(`partition [${[...side]}]`);
    for (const a of this.nodes) {
      for (const b of this.nodes)
        if (a.id < b.id && side.has(a.id) !== side.has(b.id)) this.setLink(a.id, b.id, false);
    }
  }

  private healLinks(): void {
    this.trace('links healed');
    this.cut.clear();
    this.connectionsChanged();
  }

  /** Peer connections came up or went down: every node's coordinator hears its view again. */
  private connectionsChanged(): void {
    for (const node of this.nodes) node.viewDirty = true;
  }

  private setLink(a: string, b: string, up: boolean): void {
    this.connectionsChanged();
    if (up) {
      this.cut.delete(linkKey(a, b));
      this.cut.delete(linkKey(b, a));
    } else {
      this.cut.add(linkKey(a, b));
      this.cut.add(linkKey(b, a));
    }
  }

  /**
   * Recomputed at every step: faults start and pauses end between steps. Two majorities: of the
   * members the node's coordinator gate counts (its table's members, the members it started with
   * before it holds a table, as members that moved out of the table no longer vote), and of every
   * node in the cluster, as membership counts its voters (which include members a table does not list
   * yet: a joiner, before a move gives it a copy).
   */
  protected updateReach(): void {
    const byId = new Map(this.nodes.map((n) => [n.id, n]));
    const everyNode = [...byId.keys()];
    for (const x of this.nodes) {
      if (this.running(x)) {
        // Every member, voter or not: a table change may make one a voter.
        for (const y of this.nodes) {
          if (this.running(y) && (y === x || !this.cut.has(linkKey(x.id, y.id))))
            this.lastReachedMs.set(linkKey(x.id, y.id), this.nowMs);
        }
      }
      const reachedBy = (ids: readonly string[]): boolean => {
        let reached = 0;
        if (this.running(x)) {
          for (const id of ids) {
            const y = byId.get(id);
            if (y === undefined || !this.running(y)) continue;
            if (y === x || !this.cut.has(linkKey(x.id, y.id))) reached++;
          }
        }
        return reached >= Math.floor(ids.length / 2) + 1;
      };
      this.markReach(this.majorityReachSinceMs, x.id, reachedBy(this.voters(x)));
      this.markReach(this.clusterReachSinceMs, x.id, reachedBy(everyNode));
    }
  }

  private markReach(sinceMs: Map<string, number | undefined>, id: string, now: boolean): void {
    if (!now) sinceMs.set(id, undefined);
    else if (sinceMs.get(id) === undefined) sinceMs.set(id, this.nowMs);
  }

  /**
   * How long the survivors may take to mark a member that died unreachable, at calm local health.
   * Each of the N − 1 others probes it once per round of N − 1 intervals, and all may have done so
   * just before it died (the issue's 5 s goal is for three nodes); the first failed probe then ends
   * an interval later (its timeout and indirect wait fit in one), and a suspicion that others
   * confirm lasts its floor (suspicionMult intervals, × log10 N past 10 members).
   */
  private unreachableBoundMs(): number {
    return this.detectionBoundMs(1, 1);
  }

  /**
   * How long a running node's view may hold a member Up after it stopped reaching it, under chaos:
   * the detection bound at the highest local-health multiplier any prober had within the longest
   * such bound (Lifeguard scales probe intervals by it), with a suspicion that waited its longest
   * (its confirmations lost or cut off).
   */
  private staleViewBoundMs(): number {
    const { awarenessMaxMult, suspicionMaxTimeoutMult } = MEMBERSHIP_CONFIG_DEFAULTS;
    const sinceMs = this.nowMs - this.detectionBoundMs(awarenessMaxMult, suspicionMaxTimeoutMult);
    let multiplier = 1;
    for (let i = this.healthPeaks.length - 1; i >= 0; i--) {
      const peak = this.healthPeaks[i]!;
      multiplier = Math.max(multiplier, peak.multiplier);
      if (peak.atMs <= sinceMs) break;
    }
    return this.detectionBoundMs(multiplier, suspicionMaxTimeoutMult);
  }

  /** The detection bound with probe intervals stretched `healthMultiplier` times and suspicions `suspicionStretch` times. */
  private detectionBoundMs(healthMultiplier: number, suspicionStretch: number): number {
    const n = this.nodes.length;
    const { probeIntervalMs, suspicionMult } = MEMBERSHIP_CONFIG_DEFAULTS;
    const suspicionMs = suspicionMult * Math.max(1, Math.log10(n)) * probeIntervalMs;
    return (
      n * probeIntervalMs * healthMultiplier + suspicionMs * suspicionStretch + this.options.detectionSlackMs
    );
  }

  /** Notes the highest local-health multiplier among running nodes when it changed. */
  private recordHealth(): void {
    let multiplier = 1;
    for (const node of this.nodes)
      if (node.core !== undefined && this.running(node))
        multiplier = Math.max(multiplier, node.core.healthMultiplier());
    const last = this.healthPeaks[this.healthPeaks.length - 1];
    if (last?.multiplier === multiplier) return;
    this.healthPeaks.push({ atMs: this.nowMs, multiplier });
    const { awarenessMaxMult, suspicionMaxTimeoutMult } = MEMBERSHIP_CONFIG_DEFAULTS;
    const keepMs = this.detectionBoundMs(awarenessMaxMult, suspicionMaxTimeoutMult);
    // Keep the last peak at or before the window's start: it was in force then.
    while (this.healthPeaks.length > 2 && this.healthPeaks[1]!.atMs <= this.nowMs - keepMs)
      this.healthPeaks.shift();
  }

  /** The members a node's coordinator gate counts: its table's (the initial ones before it holds a table). */
  private voters(node: SimNode): string[] {
    const tableMembers = node.coordinator?.table.members() ?? [];
    return tableMembers.length > 0 ? tableMembers : this.initialMembers;
  }

  /** TESSERA_SIM_TRACE=1 prints the run's member events and faults, to read a failing seed. */
  protected trace(line: string): void {
    if (TRACE) console.log(`${(this.nowMs / 1000).toFixed(2)}s ${line}`);
  }

  protected running(node: SimNode): boolean {
    return node.core !== undefined && node.pausedUntilMs <= this.nowMs;
  }

  protected localMs(node: SimNode): number {
    return Math.floor(1_000_000 + this.nowMs * node.rate + node.offsetMs);
  }
}

function linkKey(a: string, b: string): string {
  return `${a}>${b}`;
}
