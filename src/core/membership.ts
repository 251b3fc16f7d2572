// Cluster membership and failure detection as a pure state machine (datum §2).
// SWIM with Lifeguard's defences, after hashicorp/memberlist: no sockets, timers, clock or
// randomness here. Time arrives as `nowMs` on every event, randomness from the injected `random`;
// the driver delivers messages and ticks (at `nextWakeMs()`), and carries out the actions: messages
// to members, persisting this node's incarnation and member list (before the messages after it),
// member events for the operator's stream, and replies to operator requests. An event that comes
// more than `stallMs` after the wake-up asked for means this node's loop stalled (see onStall).
//
// Rules:
// - Members carry datum's states: Joining, Up, Leaving, Exiting (each asserted by the member itself;
//   at one incarnation a later one wins), Down and Removed (decided by others), and `unreachable` as
//   a separate flag. Every start bumps this node's incarnation; so does refuting a claim about it.
// - Failure detection: one probe per interval, round-robin over a random order kept across rounds
//   (each member probed once per round, N − 1 intervals apart); no ack within the
//   probe timeout → `indirectProbes` members probe for us and answer ack or nack (Lifeguard); still
//   nothing by the end of the interval → suspect. Members that hear a suspicion probe its target
//   next, so it is confirmed or refuted within a probe interval. A suspicion lasts between a floor
//   and a ceiling, shrinking on a log scale as independent members confirm it (Lifeguard's dynamic
//   suspicion); once it runs out the member is unreachable here, at once, and routing avoids it.
//   A probe of a member held non-alive carries the claim, so a live member always hears it and
//   refutes with a higher incarnation, which clears every claim at lower ones.
// - Local health (Lifeguard): missed nacks, failed probes, refutations and stalls of our own event
//   loop raise a score that multiplies the probe timeout and interval; acks lower it.
// - Unreachable is not Down. A node that marks a member unreachable while its own last probe of it
//   failed reports it (the report, with the reporter's id, is gossiped). Down needs reports from a
//   majority of the voting members and of those held Down that the placement table still lists
//   (the mark may be stale; the member itself counted, so a minority side of a partition can
//   never down the majority, even one that holds members of the majority Down), counting only
//   reports renewed within `reportTtlMs` (reporters renew every `reportRefreshMs` while they
//   still fail to reach it) from reporters this node still reaches, so a node cut off with stale
//   reports cannot decide;
//   the majority must hold for `downAfterMs`. Down is gossiped and accepted as decided; only a higher
//   incarnation (the member restarted or refuted) brings a Down member back, as MemberRejoined.
// - Updates ride on every probe-family message (bounded per message, each sent RetransmitMult ×
//   ⌈log10(N+1)⌉ times, fewest-sent first), on gossip rounds, and full state is pushed and pulled
//   with one random member every `pushPullIntervalMs`, so views converge after partitions heal.
// - Join: a node started to join sends a join request to a seed; the seed admits it as Joining and
//   answers with its full state; the joiner is then Up, and tells no member of itself before (a
//   member that heard its incarnation would take it for admitted). Graceful leave: Leaving (the operator may
//   cancel it: Up at a new incarnation), Exiting (once its data is handed off), Removed; the node stops once a majority of the others confirmed they heard
//   its Removed (they refuse its messages), so a partition does not swallow the news; until then it
//   persists itself Exiting, so a crash does not either (the restart resumes the leave). An Exiting
//   member that would be Down is Removed instead: its leave is done, only its Removed was lost. An
//   operator removes only a Down member. Removed is final: the
//   member's messages and joins are answered with a refusal until it is wiped and given a new id.
// - A node without its earlier run's data (the memory store, a lost data directory) says so: while
//   the seed's table lists its id its join waits (`refuse` with `retry`), and the seed asks the
//   placement coordinator to drop its lost copies (`lost-copies`); it is refused where it held a
//   fragment's only copy. Started without a join among members it knows (--peers), it first asks
//   them for their view, telling none of itself (discovery): a record of its id from an earlier run
//   that comes back makes it join through them so; a member's view without one, or every member
//   starting as it does, makes it Up. Unanswered until `discoveryMs`, it is Up, and a record of an
//   earlier run heard later is told to the node (`earlier-run`), which gives up (`give-up`).
// - Bad input is counted and dropped: a message from an unknown member (unless it carries that
//   member's own record), a stale incarnation, an update list over its bound, an invalid update.

import { assert } from './assert.js';
import { GossipQueue } from './gossip-queue.js';
import {
  MEMBERSHIP_BROADCAST_QUEUE_MAX,
  MEMBERSHIP_LEAVE_CONFIRM_MAX_MS,
  MEMBERSHIP_MEMBERS_MAX,
  MEMBERSHIP_PROBE_INTERVAL_MS,
  MEMBERSHIP_PROBE_TIMEOUT_MS,
  MEMBERSHIP_RELAYS_MAX,
  MEMBERSHIP_STALL_SYNC_MS,
  MEMBERSHIP_SUSPICION_CONFIRMATIONS,
  MEMBERSHIP_SUSPICION_MAX_TIMEOUT_MULT,
  MEMBERSHIP_SUSPICION_MULT,
  MEMBERSHIP_UPDATES_PER_MESSAGE_MAX,
} from './limits.js';
import {
  checkConfig,
  isIncarnation,
  isValidNodeId,
  isValidUpdate,
  type MemberEventKind,
  type MemberRecord,
  type MemberState,
  type MembershipAction,
  type MembershipConfig,
  type MembershipEvent,
  type MembershipMessage,
  type MemberUpdate,
  type MemberView,
  type OperatorStatus,
  SELF_STATE_RANK,
  type SelfState,
  STATE_EVENT,
  VOTING,
} from './membership-types.js';

/** Why a node that finds itself removed stops, and what its operator does about it. */
const REMOVED_SELF =
  'this node was removed from the cluster; wipe its data directory and join with a new node id';

assert(
  MEMBERSHIP_PROBE_TIMEOUT_MS < MEMBERSHIP_PROBE_INTERVAL_MS,
  'indirect probes need part of the interval',
);
assert(
  MEMBERSHIP_SUSPICION_MULT >= 1 && MEMBERSHIP_SUSPICION_CONFIRMATIONS >= 1,
  'suspicion floor and confirmations',
);
assert(MEMBERSHIP_SUSPICION_MAX_TIMEOUT_MULT >= 1, 'the suspicion ceiling is at least its floor');
assert(MEMBERSHIP_UPDATES_PER_MESSAGE_MAX >= 2, 'a message must carry a claim and a refutation');
assert(MEMBERSHIP_BROADCAST_QUEUE_MAX >= MEMBERSHIP_MEMBERS_MAX, 'one pending update per member fits');

/** Counts of refused input and of the detector's work, for metrics and tests. */
export interface MembershipCounters {
  fromUnknown: number;
  fromRemoved: number;
  staleUpdates: number;
  invalidUpdates: number;
  oversizedMessages: number;
  wrongTarget: number;
  probes: number;
  probesFailed: number;
  indirectProbes: number;
  refutations: number;
  stalls: number;
}

/** A suspicion in progress (Lifeguard): its deadline shrinks as independent members confirm it. */
interface Suspicion {
  startMs: number;
  /** Members that suspect it, the first included; confirmations are the others. */
  confirmers: Set<string>;
  /** Confirmations that bring the timeout down to its floor: min(suspicionConfirmations, N − 2). */
  expected: number;
  minMs: number;
  maxMs: number;
}

interface Member {
  nodeId: string;
  address: string;
  incarnation: number;
  state: MemberState;
  unreachable: boolean;
  suspicion: Suspicion | undefined;
  /** Nodes that reported it unreachable at `incarnation` (their own probes failed), with when we heard it last. */
  reporters: Map<string, number>;
  /** Incarnation at which this node's last probe of it failed; -1 after an ack. */
  probeFailedIncarnation: number;
  /** Since when reporters have been a majority while it is unreachable; undefined when not. */
  majoritySinceMs: number | undefined;
}

interface Probe {
  target: string;
  seq: number;
  indirect: boolean;
  /** Direct timeout, then end of the indirect wait. */
  deadlineMs: number;
  nacksExpected: number;
  nacks: number;
}

interface Relay {
  origin: string;
  originSeq: number;
  target: string;
  deadlineMs: number;
}

export class Membership {
  private readonly outbox: MembershipAction[] = [];
  private persistPending = false;
  private nowMs: number;
  /** The wake-up this node asked for last; a later event past it by stallMs means a stall. */
  private wakeDueMs = 0;

  private incarnation: number;
  /** The incarnation this run started at. */
  private readonly startIncarnation: number;
  /** A record of this node from an earlier run that reached it (0: none yet). */
  private earlierRunIncarnation = 0;
  private selfState: MemberState;
  private readonly members = new Map<string, Member>();
  private eventSequence = 0;

  private probeOrder: string[] = [];
  /** Members others suspect, probed next so our view confirms or refutes the suspicion promptly. */
  private readonly urgentProbes = new Set<string>();
  /** Members whose peer connection closed: probed next, whatever their state. */
  private readonly probeNext = new Set<string>();
  /** When each member held non-alive was last told our claim about it (`tellClaim`). */
  private readonly claimToldMs = new Map<string, number>();
  private probeIndex = 0;
  private probe: Probe | undefined;
  private nextProbeMs: number;
  private seq = 0;
  private readonly relays = new Map<number, Relay>();
  /** Lifeguard's local health score, 0 … awarenessMaxMult − 1; timeouts scale by score + 1. */
  private awareness = 0;

  private readonly queue = new GossipQueue();
  private nextGossipMs: number;
  private nextPushPullMs: number;

  private seeds: Array<{ nodeId: string; address: string }> = [];
  private seedIndex = 0;
  private joinRetryMs = Number.POSITIVE_INFINITY;
  /** Graceful leave: when Exiting turns Removed, and when Removed turns `left`. */
  private removeSelfAtMs = Number.POSITIVE_INFINITY;
  private leftAtMs = Number.POSITIVE_INFINITY;
  /** Removed by its own leave: the members that confirmed they heard it, how many must, and until when. */
  private readonly leaveHeardBy = new Set<string>();
  private leaveHeardNeeded = 0;
  private leaveConfirmUntilMs = Number.POSITIVE_INFINITY;
  private stopped = false;
  /** The members this node's placement table lists (`placed`); undefined before the first table. */
  private placed: ReadonlySet<string> | undefined;
  /** Those of them that hold some fragment's only whole copy. */
  private onlyCopies: ReadonlySet<string> = new Set();
  /** Why the last join attempt was asked to wait (logged once until it changes). */
  private joinWait = '';
  /** A start without data asking its members whether they knew it (`discover`); undefined once decided. */
  private discovery: { untilMs: number; resendAtMs: number; answered: Set<string> } | undefined;

  readonly counters: MembershipCounters = {
    fromUnknown: 0,
    fromRemoved: 0,
    staleUpdates: 0,
    invalidUpdates: 0,
    oversizedMessages: 0,
    wrongTarget: 0,
    probes: 0,
    probesFailed: 0,
    indirectProbes: 0,
    refutations: 0,
    stalls: 0,
  };

  constructor(
    private readonly config: MembershipConfig,
    /** Fractions in [0, 1): the shuffle and the choice of indirect and gossip targets. */
    private readonly random: () => number,
    nowMs: number,
  ) {
    checkConfig(config);
    this.nowMs = nowMs;
    this.incarnation = (config.restoredIncarnation ?? 0) + 1;
    this.startIncarnation = this.incarnation;
    this.selfState = config.selfRemoved ? 'Removed' : config.selfState;
    for (const record of config.members) {
      if (record.nodeId === config.nodeId) continue;
      assert(isValidNodeId(record.nodeId) && isIncarnation(record.incarnation), 'bad member record');
      this.members.set(record.nodeId, newMember(record));
    }
    if (config.withoutData === true && this.selfState === 'Up' && this.members.size > 0) this.discover();
    this.nextProbeMs = nowMs + config.probeIntervalMs;
    this.nextGossipMs = nowMs + config.gossipIntervalMs;
    // The first push-pull one probe interval after start: a node that restarts holds the view it
    // persisted, and what changed while it was down (a leave, a Down, a join) spread by gossip it
    // no longer hears — as memberlist pushes and pulls with its seeds on start.
    this.nextPushPullMs = nowMs + config.probeIntervalMs;
    this.emitEvent('Initialized', this.selfView());
    for (const m of this.members.values()) this.emitEvent('Initialized', viewOf(m));
    this.persistPending = true;
    if (this.selfState === 'Removed') {
      this.stopped = true;
      this.outbox.push({ kind: 'refused', reason: REMOVED_SELF });
    } else {
      this.enqueue(this.selfAlive());
    }
    this.wakeDueMs = this.nextWakeMs();
  }

  step(event: MembershipEvent): void {
    if (event.nowMs > this.wakeDueMs + this.config.stallMs) this.onStall(event.nowMs - this.wakeDueMs);
    this.nowMs = Math.max(this.nowMs, event.nowMs);
    if (!this.stopped) {
      switch (event.kind) {
        case 'tick':
          break;
        case 'message':
          this.onMessage(event.message, event.remote);
          break;
        case 'join':
          this.onJoin(event.seeds);
          break;
        case 'leave':
          this.onLeave(event.requestId);
          break;
        case 'cancel-leave':
          this.onCancelLeave(event.requestId);
          break;
        case 'exit':
          this.onExit(event.requestId);
          break;
        case 'remove':
          this.onRemove(event.nodeId, event.requestId);
          break;
        case 'give-up':
          this.refuseSelf(event.reason);
          break;
        case 'connection-lost':
          this.onConnectionLost(event.nodeId);
          break;
        case 'sync-with':
          this.syncWith(event.nodeId);
          break;
        case 'placed':
          this.placed = new Set(event.members);
          this.onlyCopies = new Set(event.onlyCopies);
          break;
      }
      this.runTimers();
    }
    this.wakeDueMs = this.nextWakeMs();
  }

  /** Moves the actions produced so far into `into` (a persist first), leaving the outbox empty. */
  takeActions(into: MembershipAction[]): void {
    if (this.persistPending) {
      into.push({ kind: 'persist', incarnation: this.incarnation, members: this.records() });
      this.persistPending = false;
    }
    for (const action of this.outbox) into.push(action);
    this.outbox.length = 0;
  }

  /** Earliest time (absolute ms) a 'tick' is needed. */
  nextWakeMs(): number {
    if (this.stopped) return Number.POSITIVE_INFINITY;
    let wake = Math.min(this.joinRetryMs, this.removeSelfAtMs, this.leftAtMs);
    if (this.discovery !== undefined)
      wake = Math.min(wake, this.discovery.untilMs, this.discovery.resendAtMs);
    if (this.probing()) {
      wake = Math.min(wake, this.nextPushPullMs);
      wake = Math.min(wake, this.probe !== undefined ? this.probe.deadlineMs : this.nextProbeMs);
    }
    if (this.queue.length > 0) wake = Math.min(wake, this.nextGossipMs);
    for (const relay of this.relays.values()) wake = Math.min(wake, relay.deadlineMs);
    for (const m of this.members.values()) {
      if (m.suspicion !== undefined) wake = Math.min(wake, suspicionDeadlineMs(m.suspicion));
      const reportedMs = m.reporters.get(this.config.nodeId);
      if (reportedMs !== undefined) wake = Math.min(wake, reportedMs + this.config.reportRefreshMs);
      if (m.majoritySinceMs !== undefined) wake = Math.min(wake, m.majoritySinceMs + this.config.downAfterMs);
    }
    return Math.max(this.nowMs, wake);
  }

  /** Every member, this node included, sorted by node id. */
  view(): MemberView[] {
    const views = [this.selfView(), ...[...this.members.values()].map(viewOf)];
    return views.sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
  }

  member(nodeId: string): MemberView | undefined {
    if (nodeId === this.config.nodeId) return this.selfView();
    const m = this.members.get(nodeId);
    return m === undefined ? undefined : viewOf(m);
  }

  /** Reporters of `nodeId`'s unreachability at its current incarnation (tests, status). */
  reportersOf(nodeId: string): string[] {
    return [...(this.members.get(nodeId)?.reporters.keys() ?? [])].sort();
  }

  /** The local-health multiplier on probe timeout and interval (1 = healthy). */
  healthMultiplier(): number {
    return this.awareness + 1;
  }

  /** Canonical text of this node's view for golden tests and debugging. */
  describe(): string {
    const lines = [`self=${this.config.nodeId} health=×${this.awareness + 1}`];
    for (const v of this.view()) {
      const flags = `${v.unreachable ? ' unreachable' : ''}${v.suspect ? ' suspect' : ''}`;
      lines.push(`${v.nodeId} ${v.state} inc=${v.incarnation}${flags}`);
    }
    return lines.join('\n');
  }

  // ---- Messages ----

  private onMessage(message: MembershipMessage, remote: string | undefined): void {
    if (!isValidNodeId(message.from) || message.from === this.config.nodeId) {
      this.counters.invalidUpdates++;
      return;
    }
    if (message.kind === 'join-request') return this.onJoinRequest(message);
    if (message.kind === 'refuse') return this.onRefuse(message.from, message.reason, message.retry === true);
    const updates =
      message.kind === 'sync' || message.kind === 'join-accept' ? message.members : message.updates;
    const updatesMax =
      message.kind === 'sync' || message.kind === 'join-accept'
        ? MEMBERSHIP_MEMBERS_MAX
        : this.config.updatesPerMessageMax;
    if (!Array.isArray(updates) || updates.length > updatesMax) {
      this.counters.oversizedMessages++;
      this.log('warn', `membership message from ${message.from} dropped: over ${updatesMax} updates`);
      return;
    }
    // A joiner takes the acceptance of the join it asked for whatever the seed's own record says: a
    // seed that left since it was asked (Removed, lingering) still admits it and sends the members;
    // dropped, the joiner would know no member to ask again.
    const ourAcceptance = message.kind === 'join-accept' && this.joinAsked();
    if (!ourAcceptance && !this.admitSender(message.from, updates, remote)) return;
    for (const update of updates) this.applyUpdate(update);
    if (this.discovery !== undefined && this.discovered(message)) return;
    // It learns the members, and answers none (`unadmitted`).
    if (this.unadmitted() && message.kind !== 'join-accept') return;
    switch (message.kind) {
      case 'ping':
        return this.onPing(message.from, message.seq, message.target);
      case 'ack':
        return this.onAck(message.seq);
      case 'nack':
        if (this.probe?.seq === message.seq) this.probe.nacks++;
        return;
      case 'ping-req':
        return this.onPingReq(message.from, message.seq, message.target);
      case 'sync':
        if (message.reply)
          this.sendTo(message.from, {
            kind: 'sync',
            from: this.config.nodeId,
            reply: false,
            members: this.fullState(),
          });
        return;
      case 'join-accept':
        return this.onJoinAccept();
      case 'gossip':
        return this.tellClaim(message.from);
    }
  }

  /**
   * Gossip from a member we hold Down, unreachable or suspect is proof it lives: tell it the claim
   * (at most once a probe interval), so it refutes now. Otherwise it hears of the claim only from a
   * probe — which Lifeguard slows after a partition, and a Down member's peers may not send it for
   * long — or by push-pull, while our stale claim spreads by push-pull to members that saw it alive.
   */
  private tellClaim(nodeId: string): void {
    const m = this.members.get(nodeId);
    const claim = m === undefined ? undefined : this.claimAbout(m);
    if (claim === undefined) return;
    const toldMs = this.claimToldMs.get(nodeId);
    if (toldMs !== undefined && this.nowMs - toldMs < this.config.probeIntervalMs) return;
    this.claimToldMs.set(nodeId, this.nowMs);
    this.sendTo(nodeId, { kind: 'gossip', from: this.config.nodeId, updates: [claim] });
  }

  /**
   * A sender must be a member. An unknown one is learned from its own record on the message (it
   * joined and the news has not reached us yet); a removed one is told so, and dropped. The refusal
   * goes where the message came from when known: a member this node only heard of as Removed (it
   * was away for the member's whole life) has no address here, and a leaver lingers until a
   * majority refuses it.
   */
  private admitSender(from: string, updates: readonly MemberUpdate[], remote: string | undefined): boolean {
    const sender = this.members.get(from);
    if (sender?.state === 'Removed') {
      this.counters.fromRemoved++;
      this.sendTo(
        from,
        { kind: 'refuse', from: this.config.nodeId, reason: 'removed from the cluster' },
        remote ?? sender.address,
      );
      return false;
    }
    if (sender !== undefined) return true;
    const own = updates.find((u) => u.kind === 'alive' && u.nodeId === from);
    if (own !== undefined && isValidUpdate(own)) return true;
    this.counters.fromUnknown++;
    this.log('warn', `membership message from unknown member ${from} dropped`);
    return false;
  }

  private onPing(from: string, seq: number, target: string): void {
    if (target !== this.config.nodeId) {
      this.counters.wrongTarget++;
      return;
    }
    const updates = this.piggyback();
    // A member we hold Down, unreachable or suspect is plainly alive: tell it, so it refutes at once
    // rather than when the claim reaches it by gossip or push-pull (the ping's own records came first).
    const sender = this.members.get(from);
    const claim = sender === undefined ? undefined : this.claimAbout(sender);
    if (claim !== undefined) {
      if (updates.length >= this.config.updatesPerMessageMax) updates.pop();
      updates.unshift(claim);
    }
    this.sendTo(from, { kind: 'ack', from: this.config.nodeId, seq, updates });
  }

  private onAck(seq: number): void {
    const relay = this.relays.get(seq);
    if (relay !== undefined) {
      this.relays.delete(seq);
      this.sendTo(relay.origin, {
        kind: 'ack',
        from: this.config.nodeId,
        seq: relay.originSeq,
        updates: this.piggyback(),
      });
      return;
    }
    const probe = this.probe;
    if (probe === undefined || probe.seq !== seq) return;
    this.probe = undefined;
    this.adjustAwareness(-1);
    const target = this.members.get(probe.target);
    if (target === undefined) return;
    // We reach it: our report is withdrawn here; elsewhere it lapses with the TTL.
    target.probeFailedIncarnation = -1;
    target.reporters.delete(this.config.nodeId);
  }

  private onPingReq(from: string, originSeq: number, targetId: string): void {
    const target = this.members.get(targetId);
    if (target === undefined || target.state === 'Removed' || this.relays.size >= MEMBERSHIP_RELAYS_MAX) {
      this.sendTo(from, {
        kind: 'nack',
        from: this.config.nodeId,
        seq: originSeq,
        updates: this.piggyback(),
      });
      return;
    }
    const seq = ++this.seq;
    this.relays.set(seq, {
      origin: from,
      originSeq,
      target: targetId,
      deadlineMs: this.nowMs + this.config.relayTimeoutMs,
    });
    this.sendPing(target, seq);
  }

  // ---- Updates ----

  private applyUpdate(u: MemberUpdate): void {
    if (!isValidUpdate(u)) {
      this.counters.invalidUpdates++;
      return;
    }
    if (u.nodeId === this.config.nodeId) return this.applyAboutSelf(u);
    const m = this.members.get(u.nodeId);
    if (m === undefined) return this.applyAboutNew(u);
    if (m.state === 'Removed') return;
    // Removed is final for the id, at any incarnation (the member itself accepts it so): a member
    // Removed elsewhere may restart into a later life here (resuming its leave, unaware) and die.
    if (u.kind === 'removed') return this.markRemoved(m, Math.max(u.incarnation, m.incarnation), u.reporter);
    if (u.incarnation < m.incarnation) {
      this.counters.staleUpdates++;
      return;
    }
    switch (u.kind) {
      case 'alive':
        return this.applyAlive(m, u);
      case 'suspect':
        return this.applySuspect(m, u.incarnation, u.reporter);
      case 'unreachable':
        return this.applyUnreachable(m, u.incarnation, u.reporter);
      case 'down':
        return this.markDown(m, u.incarnation, u.reporter);
    }
  }

  private applyAboutNew(u: MemberUpdate): void {
    if (u.kind !== 'alive' && u.kind !== 'removed') return; // claims about members we never saw
    if (this.members.size >= MEMBERSHIP_MEMBERS_MAX) {
      this.log('warn', `member ${u.nodeId} not admitted: ${MEMBERSHIP_MEMBERS_MAX} members known`);
      return;
    }
    const state: MemberState = u.kind === 'alive' ? u.state : 'Removed';
    const address = u.kind === 'alive' ? u.address : '';
    const m = newMember({ nodeId: u.nodeId, address, incarnation: u.incarnation, state });
    this.members.set(u.nodeId, m);
    this.persistPending = true;
    this.emitEvent(STATE_EVENT[state], viewOf(m));
    this.enqueue(u);
  }

  private applyAlive(m: Member, u: Extract<MemberUpdate, { kind: 'alive' }>): void {
    if (u.incarnation === m.incarnation) {
      // Same life: only a later self-asserted state is news; liveness claims at it still stand.
      if (m.state === 'Down' || !(m.state in SELF_STATE_RANK)) return;
      if (SELF_STATE_RANK[u.state] <= SELF_STATE_RANK[m.state as SelfState]) return;
      m.state = u.state;
      this.persistPending = true;
      this.emitEvent(STATE_EVENT[u.state], viewOf(m));
      this.enqueue(u);
      return;
    }
    const rejoined = m.state === 'Down';
    const wasUnreachable = m.unreachable;
    const stateChanged = m.state !== u.state;
    m.incarnation = u.incarnation;
    m.address = u.address;
    m.state = u.state;
    clearLiveness(m);
    this.persistPending = true;
    if (rejoined) this.emitEvent('MemberRejoined', viewOf(m));
    else if (wasUnreachable) this.emitEvent('MemberReachable', viewOf(m));
    if (stateChanged) this.emitEvent(STATE_EVENT[u.state], viewOf(m));
    else if (!rejoined && !wasUnreachable) this.emitEvent('MemberUpdated', viewOf(m));
    this.enqueue(u);
  }

  private applySuspect(m: Member, incarnation: number, reporter: string): void {
    if (m.state === 'Down') return;
    if (incarnation > m.incarnation) this.newIncarnation(m, incarnation);
    if (m.unreachable) return; // already past suspicion at this incarnation
    if (m.suspicion !== undefined) {
      if (m.suspicion.confirmers.has(reporter)) return;
      m.suspicion.confirmers.add(reporter);
    } else {
      m.suspicion = this.newSuspicion(reporter);
      if (reporter !== this.config.nodeId) {
        this.urgentProbes.add(m.nodeId);
        this.nextProbeMs = Math.min(this.nextProbeMs, this.nowMs);
      }
    }
    this.enqueue({ kind: 'suspect', nodeId: m.nodeId, incarnation: m.incarnation, reporter });
  }

  private applyUnreachable(m: Member, incarnation: number, reporter: string): void {
    if (m.state === 'Down') return;
    if (incarnation > m.incarnation) this.newIncarnation(m, incarnation);
    this.markUnreachable(m);
    // Our own report echoed back (or from an earlier life) is not news about our view.
    if (reporter === this.config.nodeId) return;
    const heardMs = m.reporters.get(reporter);
    m.reporters.set(reporter, this.nowMs);
    // Pass a renewal on once per half refresh: enough to keep it alive everywhere, no storm.
    if (heardMs !== undefined && this.nowMs - heardMs < this.config.reportRefreshMs / 2) return;
    this.enqueue({ kind: 'unreachable', nodeId: m.nodeId, incarnation: m.incarnation, reporter });
  }

  /** A claim at a newer incarnation than we knew: the member lived on, so older claims are void. */
  private newIncarnation(m: Member, incarnation: number): void {
    const wasUnreachable = m.unreachable;
    m.incarnation = incarnation;
    clearLiveness(m);
    this.persistPending = true;
    if (wasUnreachable) this.emitEvent('MemberReachable', viewOf(m));
  }

  private markUnreachable(m: Member): void {
    m.suspicion = undefined;
    if (m.unreachable) return;
    m.unreachable = true;
    this.emitEvent('MemberUnreachable', viewOf(m));
    this.reportIfProbeFailed(m);
  }

  /** Our own last probe of it failed at this incarnation: our view counts toward Down, renewed. */
  private reportIfProbeFailed(m: Member): void {
    const self = this.config.nodeId;
    if (!m.unreachable || m.probeFailedIncarnation !== m.incarnation) return;
    const reportedMs = m.reporters.get(self);
    if (reportedMs !== undefined && this.nowMs - reportedMs < this.config.reportRefreshMs) return;
    m.reporters.set(self, this.nowMs);
    this.enqueue({ kind: 'unreachable', nodeId: m.nodeId, incarnation: m.incarnation, reporter: self });
  }

  private markDown(m: Member, incarnation: number, reporter: string): void {
    if (m.state === 'Down' && incarnation <= m.incarnation) return;
    // An Exiting member handed everything over and is going: gone, its leave is done. Down would
    // keep it in every view until an operator removed it (its Removed was lost to a partition).
    if (m.state === 'Exiting' && incarnation === m.incarnation)
      return this.markRemoved(m, incarnation, reporter);
    m.incarnation = incarnation;
    m.state = 'Down';
    clearLiveness(m);
    m.unreachable = true;
    this.persistPending = true;
    this.emitEvent('MemberDown', viewOf(m));
    this.enqueue({ kind: 'down', nodeId: m.nodeId, incarnation, reporter });
  }

  private markRemoved(m: Member, incarnation: number, reporter: string): void {
    m.incarnation = incarnation;
    m.state = 'Removed';
    clearLiveness(m);
    this.persistPending = true;
    this.emitEvent('MemberRemoved', viewOf(m));
    this.enqueue({ kind: 'removed', nodeId: m.nodeId, incarnation, reporter });
  }

  /** A claim about this node: refute a non-alive one, outbid a stale life, or accept removal. */
  private applyAboutSelf(u: MemberUpdate): void {
    if (this.selfState === 'Removed') return;
    if (u.kind === 'removed') {
      if (u.reporter === this.config.nodeId) return; // our own leave, echoed
      // Others found us gone while Exiting (our Removed did not reach them): the leave completes.
      if (this.selfState === 'Exiting') return this.removeSelf();
      return this.refuseSelf(REMOVED_SELF);
    }
    // This run holds incarnations from its first on; 0 is a configured member never heard from.
    if (
      this.earlierRunIncarnation === 0 &&
      u.incarnation !== 0 &&
      (u.incarnation < this.startIncarnation || u.incarnation > this.incarnation)
    ) {
      this.earlierRunIncarnation = u.incarnation;
      this.outbox.push({ kind: 'earlier-run', incarnation: u.incarnation });
    }
    if (u.kind === 'alive' && u.incarnation <= this.incarnation) return;
    if (u.incarnation < this.incarnation) {
      // A claim we refuted already reached someone who missed the refutation: send it again.
      this.enqueue(this.selfAlive());
      return;
    }
    if (u.kind !== 'alive') {
      this.counters.refutations++;
      this.adjustAwareness(1); // Lifeguard: being suspected hints at our own slowness
    }
    this.incarnation = u.incarnation + 1;
    this.persistPending = true;
    this.emitEvent('MemberUpdated', this.selfView());
    this.enqueue(this.selfAlive());
  }

  private onConnectionLost(nodeId: string): void {
    const m = this.members.get(nodeId);
    if (m === undefined || m.state === 'Removed' || m.state === 'Down' || m.unreachable) return;
    this.probeNext.add(nodeId);
    // Start that probe now unless one is in flight (it then goes next, at the end of this one).
    if (this.probe === undefined) this.nextProbeMs = Math.min(this.nextProbeMs, this.nowMs);
  }

  // ---- Join, leave, removal ----

  private onJoin(seeds: ReadonlyArray<{ nodeId: string; address: string }>): void {
    if (this.selfState !== 'Joining' || seeds.length === 0) return;
    this.seeds = seeds.filter((s) => isValidNodeId(s.nodeId) && s.nodeId !== this.config.nodeId);
    this.seedIndex = 0;
    this.sendJoinRequest();
  }

  /**
   * Asks the next seed, then the next member heard of since, in turn: a seed may leave, or be away,
   * after it admitted this node and before its acceptance arrived (a partition); the members that
   * probe a joiner they admitted would never accept it again.
   */
  private sendJoinRequest(): void {
    const heard = [...this.members.values()].filter(
      (m) =>
        m.nodeId !== this.config.nodeId &&
        m.state === 'Up' &&
        !m.unreachable &&
        !this.seeds.some((s) => s.nodeId === m.nodeId),
    );
    const asked = [...this.seeds, ...heard];
    const seed = asked[this.seedIndex++ % asked.length];
    if (seed === undefined) return;
    const message: MembershipMessage = {
      kind: 'join-request',
      from: this.config.nodeId,
      address: this.config.address,
      incarnation: this.incarnation,
      withoutData: this.config.withoutData === true,
    };
    this.outbox.push({ kind: 'send', to: seed.nodeId, address: seed.address, message });
    this.joinRetryMs = this.nowMs + this.config.joinRetryMs;
  }

  /**
   * A start without its earlier run's data among members it knows (no join seeds: --peers, a memory
   * store) must not be taken for the replica the table may still list it as: it first asks each member
   * for its view, as a joiner telling none of them of itself. A record of an earlier run of its id
   * that comes back makes it join through them without data (its lost copies dropped first, as for a
   * joiner); a member's view without one, or every member starting as it does (a new cluster), makes
   * it Up; so does the end of `discoveryMs` with no answer (the node then gives up should it hear
   * of an earlier run later: `earlier-run`).
   */
  private discover(): void {
    this.selfState = 'Joining';
    this.discovery = {
      untilMs: this.nowMs + this.config.discoveryMs,
      resendAtMs: this.nowMs + this.config.discoveryResendMs,
      answered: new Set(),
    };
    this.askWhetherKnown();
  }

  private askWhetherKnown(): void {
    for (const m of this.members.values())
      if (!this.discovery?.answered.has(m.nodeId)) this.sendEmptyView(m.nodeId, true);
  }

  /** A view naming no member, not even this node: a question (`reply`), or the answer of one that knows nothing yet. */
  private sendEmptyView(to: string, reply: boolean): void {
    this.sendTo(to, { kind: 'sync', from: this.config.nodeId, reply, members: [] });
  }

  /**
   * A message reached a node still asking whether its members knew it (its updates applied): whether
   * it was a discovery's answer, handled here.
   */
  private discovered(message: MembershipMessage): boolean {
    if (this.selfState !== 'Joining') return false; // refused meanwhile: its id was removed
    if (this.earlierRunIncarnation !== 0) {
      this.rejoinWithoutData(message.from);
      return false;
    }
    if (message.kind !== 'sync') return false;
    // A member's view names the member itself; a member that starts as this one does knows nothing
    // yet, and says so with an empty view.
    if (message.members.length > 0) {
      this.endDiscovery(`${message.from} holds no record of an earlier run of this node`);
      return false;
    }
    if (message.reply) this.sendEmptyView(message.from, false);
    const discovery = this.discovery!;
    discovery.answered.add(message.from);
    if (discovery.answered.size >= this.members.size)
      this.endDiscovery('every member starts without data too');
    return true;
  }

  private endDiscovery(why: string, level: 'info' | 'warn' = 'info'): void {
    this.discovery = undefined;
    this.log(level, `starting as a member: ${why}`);
    this.setSelfState('Up');
  }

  /**
   * The wait is over with some members silent (not started, or out of reach). Where none answered,
   * a run before this one could not be ruled out: said at warn, with what follows if one did.
   */
  private endDiscoveryUnanswered(): void {
    const answered = this.discovery!.answered;
    const silent = [...this.members.keys()].filter((id) => !answered.has(id)).sort();
    const why = `${silent.join(', ')} did not answer within ${this.config.discoveryMs} ms whether they knew this node before`;
    if (answered.size > 0) return this.endDiscovery(`${why}; the others start without data too`);
    this.endDiscovery(
      `${why}; should one hold a record of an earlier run of this node, it gives up on hearing it`,
      'warn',
    );
  }

  /** Members knew this node id before this run: it joins through them, as a joiner without data. */
  private rejoinWithoutData(informant: string): void {
    this.discovery = undefined;
    this.log(
      'info',
      `${informant} knew node id ${this.config.nodeId} before this run (at incarnation ${this.earlierRunIncarnation}): it joins through its members without its earlier run's data`,
    );
    const members = [...this.members.values()].filter((m) => m.state !== 'Removed');
    this.seeds = members
      .sort((a, b) => Number(b.nodeId === informant) - Number(a.nodeId === informant))
      .map((m) => ({ nodeId: m.nodeId, address: m.address }));
    this.seedIndex = 0;
    this.sendJoinRequest();
  }

  private onJoinRequest(request: Extract<MembershipMessage, { kind: 'join-request' }>): void {
    // Not a member yet itself: its accept would tell the joiner, and through it the members, of this
    // node. The joiner asks its next seed.
    if (this.unadmitted()) return;
    const existing = this.members.get(request.from);
    const refusal = this.joinRefusal(request, existing);
    if (refusal === undefined && this.losesCopies(request)) {
      // Admitted once the coordinator dropped its lost copies from the table; it asks again meanwhile.
      this.outbox.push({ kind: 'lost-copies', member: request.from, incarnation: request.incarnation });
      const reason =
        `node id ${request.from} is a replica in the cluster's table and this node starts without its ` +
        `earlier run's data: the placement coordinator drops its lost copies, then it is admitted empty`;
      const wait: MembershipMessage = { kind: 'refuse', from: this.config.nodeId, reason, retry: true };
      this.outbox.push({ kind: 'send', to: request.from, address: request.address, message: wait });
      return;
    }
    if (refusal !== undefined) {
      const refuse: MembershipMessage = { kind: 'refuse', from: this.config.nodeId, reason: refusal };
      this.outbox.push({ kind: 'send', to: request.from, address: request.address, message: refuse });
      this.log('warn', `join of ${request.from} refused: ${refusal}`);
      return;
    }
    this.applyUpdate({
      kind: 'alive',
      nodeId: request.from,
      address: request.address,
      incarnation: request.incarnation,
      state: 'Joining',
    });
    const accept: MembershipMessage = {
      kind: 'join-accept',
      from: this.config.nodeId,
      members: this.fullState(),
    };
    this.outbox.push({ kind: 'send', to: request.from, address: request.address, message: accept });
  }

  private joinRefusal(
    request: Extract<MembershipMessage, { kind: 'join-request' }>,
    existing: Member | undefined,
  ): string | undefined {
    if (!isIncarnation(request.incarnation) || typeof request.address !== 'string')
      return 'malformed join request';
    if (existing === undefined)
      return this.members.size >= MEMBERSHIP_MEMBERS_MAX
        ? 'the cluster has as many members as it may'
        : undefined;
    if (existing.state === 'Removed')
      return 'this node id was removed from the cluster; wipe the node and join with a new id';
    // No other replica holds what it held: only the operator may accept that loss.
    if (request.withoutData && this.onlyCopies.has(request.from))
      return (
        `node id ${request.from} held the only copy of some fragments in the cluster's table and this ` +
        `node starts without its earlier run's data, so that data is lost; once the cluster holds ` +
        `${request.from} Down, remove it (tessera cluster remove ${request.from}) and join with a new --node-id`
      );
    const live = existing.state !== 'Down' && !existing.unreachable;
    if (live && existing.address !== request.address)
      return `node id ${request.from} is in use by a live member at ${existing.address}`;
    // Otherwise a lower incarnation is no reason to refuse: the accept carries our record of the
    // member, which the joiner outbids or refutes with a higher one.
    return undefined;
  }

  /**
   * A joiner without its earlier run's data whose id the table still lists (past joinRefusal, so each
   * of its copies is held whole elsewhere too): served, or failed over to, its empty copies would
   * answer acknowledged writes as missing, so it waits until the coordinator has dropped them
   * (coordinator.ts dropLostCopies).
   */
  private losesCopies(request: Extract<MembershipMessage, { kind: 'join-request' }>): boolean {
    return request.withoutData && this.placed?.has(request.from) === true;
  }

  private onJoinAccept(): void {
    if (!this.joinAsked()) return;
    this.joinRetryMs = Number.POSITIVE_INFINITY;
    this.setSelfState('Up');
  }

  /**
   * A refusal ends a join; from a member we know it means we were removed (Removed is final for an
   * id, and only the cluster's members get past the handshake), so this node stops too.
   */
  private onRefuse(from: string, reason: string, retry: boolean): void {
    if (this.selfState === 'Removed') {
      // Our own leave: a member refusing us has heard we are Removed.
      if (this.leaveConfirmUntilMs !== Number.POSITIVE_INFINITY && this.members.has(from)) {
        this.leaveHeardBy.add(from);
      }
      return;
    }
    if (this.joinAsked()) {
      if (!retry) return this.refuseSelf(`join refused by ${from}: ${String(reason)}`);
      // Not yet: the join is asked again at its next attempt.
      const wait = `join waits at ${from}: ${String(reason)}`;
      if (wait !== this.joinWait) this.log('info', wait);
      this.joinWait = wait;
      return;
    }
    // A wait is for a joiner only: a member told it is no refusal.
    if (retry) return;
    const sender = this.members.get(from);
    if (sender === undefined || sender.state === 'Removed') return;
    this.refuseSelf(`refused by member ${from}: ${String(reason)}`);
  }

  private refuseSelf(reason: string): void {
    this.selfState = 'Removed';
    this.stopped = true;
    this.probe = undefined;
    this.persistPending = true;
    this.emitEvent('MemberRemoved', this.selfView());
    this.outbox.push({ kind: 'refused', reason });
  }

  private onLeave(requestId: number): void {
    // A node whose join no member answered yet cannot tell the members it leaves (it knows none),
    // and one may have admitted it: leaving silently would leave it Joining there, then Down.
    if (this.selfState === 'Joining') {
      return this.reply(
        requestId,
        'Conflict',
        'this node has not joined yet (no member answered its join): stop it instead; if a member admitted it meanwhile, remove it there once it is Down',
      );
    }
    if (this.selfState !== 'Up') {
      return this.reply(requestId, 'Conflict', `this node is ${this.selfState}, it cannot leave`);
    }
    this.setSelfState('Leaving');
    this.reply(requestId, 'Ok', 'leaving');
  }

  private onCancelLeave(requestId: number): void {
    if (this.selfState !== 'Leaving') {
      return this.reply(
        requestId,
        'Conflict',
        `this node is ${this.selfState}, not Leaving: no leave to cancel`,
      );
    }
    // At one incarnation a later self-asserted state wins, so Leaving would stand in every view:
    // Up at a new incarnation replaces it.
    this.incarnation++;
    this.setSelfState('Up');
    this.reply(requestId, 'Ok', 'the leave is cancelled: Up');
  }

  private onExit(requestId: number): void {
    if (this.selfState !== 'Leaving') {
      return this.reply(requestId, 'Conflict', `this node is ${this.selfState}, not Leaving`);
    }
    this.setSelfState('Exiting');
    this.removeSelfAtMs = this.nowMs + this.config.leaveLingerMs;
    this.reply(requestId, 'Ok', 'exiting');
  }

  private onRemove(nodeId: string, requestId: number): void {
    if (nodeId === this.config.nodeId)
      return this.reply(requestId, 'BadRequest', 'a node cannot remove itself; ask it to leave');
    const m = this.members.get(nodeId);
    if (m === undefined || m.state === 'Removed')
      return this.reply(requestId, 'NotFound', `no member ${nodeId}`);
    if (m.state !== 'Down') {
      return this.reply(
        requestId,
        'Conflict',
        `member ${nodeId} is ${m.state}: only a Down member can be removed; ask it to leave`,
      );
    }
    this.markRemoved(m, m.incarnation, this.config.nodeId);
    this.reply(requestId, 'Ok', `member ${nodeId} removed`);
  }

  private setSelfState(state: SelfState): void {
    this.selfState = state;
    this.persistPending = true;
    this.emitEvent(STATE_EVENT[state], this.selfView());
    this.enqueue(this.selfAlive());
  }

  // ---- Timers ----

  private runTimers(): void {
    const now = this.nowMs;
    if (this.discovery !== undefined && now >= this.discovery.untilMs) this.endDiscoveryUnanswered();
    if (this.discovery !== undefined && now >= this.discovery.resendAtMs) {
      this.discovery.resendAtMs = now + this.config.discoveryResendMs;
      this.askWhetherKnown();
    }
    if (now >= this.joinRetryMs) this.sendJoinRequest();
    if (now >= this.removeSelfAtMs) this.removeSelf();
    if (now >= this.leftAtMs) {
      if (this.leaveHeardBy.size < this.leaveHeardNeeded && now < this.leaveConfirmUntilMs) {
        this.announceRemoval();
        this.leftAtMs = Math.min(now + this.config.gossipIntervalMs, this.leaveConfirmUntilMs);
        return;
      }
      if (this.leaveHeardBy.size < this.leaveHeardNeeded) {
        this.log(
          'warn',
          `left after ${MEMBERSHIP_LEAVE_CONFIRM_MAX_MS} ms with ${this.leaveHeardBy.size} of the ${this.leaveHeardNeeded} members needed confirming: those that did not hear it may show this node Down until it is removed`,
        );
      }
      this.stopped = true;
      this.persistPending = true; // Removed now, as the last record of this node
      this.outbox.push({ kind: 'left' });
      return;
    }
    for (const [seq, relay] of this.relays) {
      if (now < relay.deadlineMs) continue;
      this.relays.delete(seq);
      this.sendTo(relay.origin, {
        kind: 'nack',
        from: this.config.nodeId,
        seq: relay.originSeq,
        updates: this.piggyback(),
      });
    }
    if (this.probing()) this.runProbe();
    this.checkSuspicionsAndDown();
    if (now >= this.nextGossipMs) this.gossipRound();
    if (now >= this.nextPushPullMs && this.probing()) this.pushPull();
  }

  /**
   * A joining node tells no member of itself (no gossip, no answer) until a seed admits it: a member
   * that heard its new incarnation would take it for admitted — as one of the table's replicas when
   * it rejoins under its id, before its seed had the coordinator drop its lost copies.
   */
  private unadmitted(): boolean {
    return this.selfState === 'Joining';
  }

  /** A join request of this node's is out (not one still asking whether its members knew it). */
  private joinAsked(): boolean {
    return this.selfState === 'Joining' && this.joinRetryMs !== Number.POSITIVE_INFINITY;
  }

  /** A joining node waits for the seed's state; a removed one only lingers to gossip its leave. */
  private probing(): boolean {
    return this.selfState !== 'Removed' && this.selfState !== 'Joining';
  }

  private removeSelf(): void {
    this.removeSelfAtMs = Number.POSITIVE_INFINITY;
    this.selfState = 'Removed';
    this.probe = undefined;
    this.persistPending = true;
    this.emitEvent('MemberRemoved', this.selfView());
    const self = this.config.nodeId;
    this.enqueue({ kind: 'removed', nodeId: self, incarnation: this.incarnation, reporter: self });
    this.leftAtMs = this.nowMs + this.config.leaveLingerMs;
    let others = 0;
    for (const m of this.members.values()) if (VOTING.has(m.state)) others++;
    this.leaveHeardNeeded = others === 0 ? 0 : Math.floor(others / 2) + 1;
    this.leaveConfirmUntilMs = this.nowMs + MEMBERSHIP_LEAVE_CONFIRM_MAX_MS;
  }

  /** Removed by its own leave, and not stopped yet: it waits for a majority to hear it (`removeSelf`). */
  private awaitingLeaveHeard(): boolean {
    return (
      this.selfState === 'Removed' && !this.stopped && this.leaveConfirmUntilMs !== Number.POSITIVE_INFINITY
    );
  }

  /**
   * Tells a few members that have not confirmed it that this node left: each applies it, or refuses
   * us. Those it holds Down too: it counted them when it left, and a view it no longer probes (a
   * partition's) may hold Down members that are up — left out, they could never confirm.
   */
  private announceRemoval(): void {
    const self = this.config.nodeId;
    const removed: MemberUpdate = {
      kind: 'removed',
      nodeId: self,
      incarnation: this.incarnation,
      reporter: self,
    };
    const unconfirmed = (m: Member) => m.state !== 'Removed' && !this.leaveHeardBy.has(m.nodeId);
    for (const m of this.randomMembers(this.config.gossipNodes, unconfirmed)) {
      this.sendTo(m.nodeId, { kind: 'gossip', from: self, updates: [removed] });
    }
  }

  private runProbe(): void {
    const probe = this.probe;
    if (probe !== undefined && this.nowMs >= probe.deadlineMs) {
      if (!probe.indirect) this.goIndirect(probe);
      else this.probeFailed(probe);
    }
    if (this.probe === undefined && this.nowMs >= this.nextProbeMs) this.startProbe();
  }

  private startProbe(): void {
    this.nextProbeMs = this.nowMs + this.scaled(this.config.probeIntervalMs);
    const target = this.nextProbeTarget();
    if (target === undefined) return;
    const seq = ++this.seq;
    const deadlineMs = this.nowMs + this.scaled(this.config.probeTimeoutMs);
    this.probe = { target: target.nodeId, seq, indirect: false, deadlineMs, nacksExpected: 0, nacks: 0 };
    this.counters.probes++;
    this.sendPing(target, seq);
  }

  /** Members others suspect first; then round-robin over this node's random order (`nextProbeRound`). */
  private nextProbeTarget(): Member | undefined {
    for (const nodeId of this.probeNext) {
      this.probeNext.delete(nodeId);
      const m = this.members.get(nodeId);
      if (m !== undefined && m.state !== 'Removed' && m.state !== 'Down') return m;
    }
    for (const nodeId of this.urgentProbes) {
      this.urgentProbes.delete(nodeId);
      const m = this.members.get(nodeId);
      if (m?.suspicion !== undefined) return m;
    }
    for (let attempts = 0; attempts <= this.probeOrder.length; attempts++) {
      if (this.probeIndex >= this.probeOrder.length) {
        this.nextProbeRound();
        if (this.probeOrder.length === 0) return undefined;
      }
      const m = this.members.get(this.probeOrder[this.probeIndex++]!);
      if (m !== undefined && m.state !== 'Removed') return m;
    }
    return undefined;
  }

  /**
   * The next round keeps the last one's order and puts members new to it at random places, so a
   * member is probed once every N − 1 intervals. memberlist reshuffles every round, which lets two
   * probes of one member fall up to two rounds apart: with six survivors that left a killed member
   * unprobed by all of them for 5 s and more. Each node's order is its own random one, so the
   * survivors' next probes of a member that just died are spread over a round.
   */
  private nextProbeRound(): void {
    const order = this.probeOrder.filter((id) => {
      const m = this.members.get(id);
      return m !== undefined && m.state !== 'Removed';
    });
    const placed = new Set(order);
    for (const m of this.members.values()) {
      if (m.state === 'Removed' || placed.has(m.nodeId)) continue;
      order.splice(Math.floor(this.random() * (order.length + 1)), 0, m.nodeId);
    }
    this.probeOrder = order;
    this.probeIndex = 0;
  }

  /** A ping; to a member held non-alive it carries the claim, so a live one hears it and refutes. */
  private sendPing(target: Member, seq: number): void {
    const updates = this.piggyback();
    const claim = this.claimAbout(target);
    if (claim !== undefined) {
      if (updates.length >= this.config.updatesPerMessageMax) updates.pop();
      updates.unshift(claim);
    }
    // Its own record too, where there is room (news never gives way to it): a member that never
    // heard of this node (its admission was lost with the member that admitted it) learns it from
    // the ping instead of dropping it as from a stranger. Not once Removed (it only relays then).
    const self = this.config.nodeId;
    if (
      this.selfState !== 'Removed' &&
      updates.length < this.config.updatesPerMessageMax &&
      !updates.some((u) => u.nodeId === self)
    ) {
      updates.push(this.selfAlive());
    }
    const message: MembershipMessage = {
      kind: 'ping',
      from: this.config.nodeId,
      seq,
      target: target.nodeId,
      updates,
    };
    this.outbox.push({ kind: 'send', to: target.nodeId, address: target.address, message });
  }

  private claimAbout(m: Member): MemberUpdate | undefined {
    const base = { nodeId: m.nodeId, incarnation: m.incarnation, reporter: this.config.nodeId };
    if (m.state === 'Down') return { kind: 'down', ...base };
    if (m.unreachable) return { kind: 'unreachable', ...base };
    if (m.suspicion !== undefined) return { kind: 'suspect', ...base };
    return undefined;
  }

  private goIndirect(probe: Probe): void {
    const helpers = this.randomMembers(
      this.config.indirectProbes,
      (m) => m.nodeId !== probe.target && isHealthy(m),
    );
    for (const helper of helpers) {
      const message: MembershipMessage = {
        kind: 'ping-req',
        from: this.config.nodeId,
        seq: probe.seq,
        target: probe.target,
        updates: this.piggyback(),
      };
      this.outbox.push({ kind: 'send', to: helper.nodeId, address: helper.address, message });
    }
    this.counters.indirectProbes += helpers.length;
    probe.indirect = true;
    probe.nacksExpected = helpers.length;
    probe.deadlineMs = this.nowMs + this.scaled(this.config.probeIntervalMs - this.config.probeTimeoutMs);
  }

  private probeFailed(probe: Probe): void {
    this.probe = undefined;
    this.counters.probesFailed++;
    // Lifeguard: helpers that did not even nack suggest our own network or loop is the problem.
    this.adjustAwareness(probe.nacksExpected > 0 ? Math.max(0, probe.nacksExpected - probe.nacks) : 1);
    const m = this.members.get(probe.target);
    if (m === undefined || m.state === 'Removed' || m.state === 'Down') return;
    m.probeFailedIncarnation = m.incarnation;
    if (m.unreachable) return this.reportIfProbeFailed(m);
    this.applySuspect(m, m.incarnation, this.config.nodeId);
  }

  private checkSuspicionsAndDown(): void {
    const majority = Math.floor(this.downVoters() / 2) + 1;
    for (const m of this.members.values()) {
      if (m.suspicion !== undefined && this.nowMs >= suspicionDeadlineMs(m.suspicion))
        this.markUnreachable(m);
      if (!m.unreachable || m.state === 'Down' || m.state === 'Removed') continue;
      this.reportIfProbeFailed(m);
      if (this.liveReports(m) < majority) {
        m.majoritySinceMs = undefined;
        continue;
      }
      m.majoritySinceMs ??= this.nowMs;
      if (this.nowMs - m.majoritySinceMs >= this.config.downAfterMs) {
        this.log(
          'info',
          `member ${m.nodeId} ${m.state === 'Exiting' ? 'Removed (it was Exiting)' : 'Down'}: unreachable from a majority for ${this.config.downAfterMs} ms`,
        );
        this.markDown(m, m.incarnation, this.config.nodeId);
      }
    }
  }

  /**
   * Reports that still count: renewed within the TTL, and ours or those of reporters we reach (a
   * stale minority view does not count).
   */
  private liveReports(m: Member): number {
    let count = 0;
    for (const [reporter, heardMs] of m.reporters) {
      if (this.nowMs - heardMs > this.config.reportTtlMs) continue;
      if (reporter === this.config.nodeId) count += VOTING.has(this.selfState) ? 1 : 0;
      else {
        const r = this.members.get(reporter);
        if (r !== undefined && isHealthy(r)) count++;
      }
    }
    return count;
  }

  /**
   * The members a Down decision needs a majority of: the voting members, and those held Down that
   * the placement table still lists (all of them before a table is known). A Down mark here may be
   * stale — its member restarted on the other side of a partition, unheard of here — so such
   * members must not shrink the majority: three nodes that hold three others Down would otherwise
   * be a majority of the four left and down a seventh that the other four reach. Once the table
   * lists a Down member nowhere (its replicas were replaced, by a coordinator that reached a
   * majority), it no longer counts, so members lost for good do not keep a cluster from downing
   * the next. As Redis Cluster counts a failed master in its quorum while it still owns slots.
   */
  private downVoters(): number {
    let listedDown = 0;
    for (const m of this.members.values())
      if (m.state === 'Down' && (this.placed === undefined || this.placed.has(m.nodeId))) listedDown++;
    return this.votingMembers() + listedDown;
  }

  private votingMembers(): number {
    let count = VOTING.has(this.selfState) ? 1 : 0;
    for (const m of this.members.values()) if (VOTING.has(m.state)) count++;
    return count;
  }

  private gossipRound(): void {
    this.nextGossipMs = this.nowMs + this.config.gossipIntervalMs;
    if (this.queue.length === 0 || this.unadmitted()) return;
    for (const m of this.randomMembers(this.config.gossipNodes, (m) => m.state !== 'Removed')) {
      const updates = this.piggyback();
      if (updates.length === 0) return;
      this.sendTo(m.nodeId, { kind: 'gossip', from: this.config.nodeId, updates });
    }
  }

  private pushPull(): void {
    this.nextPushPullMs = this.nowMs + this.config.pushPullIntervalMs;
    const [peer] = this.randomMembers(1, isHealthy);
    if (peer === undefined) return;
    this.syncWith(peer.nodeId);
  }

  /** Sends `nodeId` this node's whole view, asking for its own back (a member this node knows). */
  private syncWith(nodeId: string): void {
    if (nodeId === this.config.nodeId || !this.members.has(nodeId) || this.unadmitted()) return;
    this.sendTo(nodeId, {
      kind: 'sync',
      from: this.config.nodeId,
      reply: true,
      members: this.fullState(),
    });
  }

  /**
   * Our loop did not run for `lateMs` (a pause, a long GC): nothing we failed to hear in that time
   * is evidence against others. The probe in flight is dropped unjudged, suspicion and Down clocks
   * shift by the gap, and our health score rises so our next timeouts are longer (Lifeguard).
   */
  private onStall(lateMs: number): void {
    this.counters.stalls++;
    this.adjustAwareness(1);
    this.probe = undefined;
    for (const m of this.members.values()) {
      if (m.suspicion !== undefined) m.suspicion.startMs += lateMs;
      if (m.majoritySinceMs !== undefined) m.majoritySinceMs += lateMs;
    }
    // What was gossiped meanwhile may have passed it by, as for a restart: a push-pull now.
    if (lateMs >= MEMBERSHIP_STALL_SYNC_MS) this.nextPushPullMs = Math.min(this.nextPushPullMs, this.nowMs);
    this.log('warn', `membership loop stalled ${lateMs} ms; local health ×${this.awareness + 1}`);
  }

  /** Queues `u` for gossip, dropping queued updates it makes obsolete. */
  private enqueue(u: MemberUpdate): void {
    this.queue.push(u);
  }

  /** Updates for one message: the gossip queue's fewest-sent, each sent its retransmit limit dropped. */
  private piggyback(): MemberUpdate[] {
    if (this.queue.length === 0) return [];
    const limit = this.config.retransmitMult * Math.ceil(Math.log10(this.votingMembers() + 1));
    return this.queue.take(this.config.updatesPerMessageMax, limit);
  }

  /** The state of every member, self included, as updates (join replies and push-pull). */
  private fullState(): MemberUpdate[] {
    const self = this.config.nodeId;
    const updates: MemberUpdate[] = [
      this.selfState === 'Removed'
        ? { kind: 'removed', nodeId: self, incarnation: this.incarnation, reporter: self }
        : this.selfAlive(),
    ];
    for (const m of this.members.values()) {
      const base = { nodeId: m.nodeId, incarnation: m.incarnation, reporter: this.config.nodeId };
      if (m.state === 'Removed') updates.push({ kind: 'removed', ...base });
      else if (m.state === 'Down') updates.push({ kind: 'down', ...base });
      else
        updates.push({
          kind: 'alive',
          nodeId: m.nodeId,
          address: m.address,
          incarnation: m.incarnation,
          state: m.state,
        });
    }
    return updates;
  }

  // ---- Small helpers ----

  private newSuspicion(firstReporter: string): Suspicion {
    const n = this.votingMembers();
    const minMs =
      this.config.suspicionMult * Math.max(1, Math.log10(Math.max(1, n))) * this.config.probeIntervalMs;
    return {
      startMs: this.nowMs,
      confirmers: new Set([firstReporter]),
      expected: Math.max(0, Math.min(this.config.suspicionConfirmations, n - 2)),
      minMs,
      maxMs: minMs * this.config.suspicionMaxTimeoutMult,
    };
  }

  private scaled(ms: number): number {
    return ms * (this.awareness + 1);
  }

  private adjustAwareness(delta: number): void {
    this.awareness = Math.max(0, Math.min(this.config.awarenessMaxMult - 1, this.awareness + delta));
  }

  private randomMembers(count: number, eligible: (m: Member) => boolean): Member[] {
    const pool = [...this.members.values()].filter(eligible);
    this.shuffle(pool);
    return pool.slice(0, count);
  }

  /** Fisher–Yates with the injected source. */
  private shuffle<T>(items: T[]): void {
    for (let i = items.length - 1; i > 0; i--) {
      const j = Math.floor(this.random() * (i + 1));
      const swap = items[i]!;
      items[i] = items[j]!;
      items[j] = swap;
    }
  }

  private sendTo(to: string, message: MembershipMessage, address?: string): void {
    const addr = address ?? this.members.get(to)?.address ?? '';
    this.outbox.push({ kind: 'send', to, address: addr, message });
  }

  private selfAlive(): MemberUpdate {
    const state = this.selfState as SelfState;
    return {
      kind: 'alive',
      nodeId: this.config.nodeId,
      address: this.config.address,
      incarnation: this.incarnation,
      state,
    };
  }

  private selfView(): MemberView {
    const { nodeId, address } = this.config;
    return {
      nodeId,
      address,
      incarnation: this.incarnation,
      state: this.selfState,
      unreachable: false,
      suspect: false,
    };
  }

  private records(): MemberRecord[] {
    // Removed by its own leave and still waiting for a majority to hear it: persisted Exiting, so a
    // node killed meanwhile resumes its leave when it restarts (resumesLeave) and announces it again.
    // Persisted Removed, it would restart refused and silent, and members that never heard of its
    // leave would hold it Down for good.
    const selfState = this.awaitingLeaveHeard() ? 'Exiting' : this.selfState;
    return this.view().map(({ nodeId, address, incarnation, state }) => ({
      nodeId,
      address,
      incarnation,
      state: nodeId === this.config.nodeId ? selfState : state,
    }));
  }

  private emitEvent(kind: MemberEventKind, member: MemberView): void {
    this.outbox.push({
      kind: 'member-event',
      event: { sequence: ++this.eventSequence, kind, member, atMs: this.nowMs },
    });
  }

  private reply(requestId: number, status: OperatorStatus, message: string): void {
    this.outbox.push({ kind: 'reply', requestId, status, message });
  }

  private log(level: 'info' | 'warn', message: string): void {
    this.outbox.push({ kind: 'log', level, message });
  }
}

function newMember(record: MemberRecord): Member {
  return {
    nodeId: record.nodeId,
    address: record.address,
    incarnation: record.incarnation,
    state: record.state,
    unreachable: record.state === 'Down',
    suspicion: undefined,
    reporters: new Map(),
    probeFailedIncarnation: -1,
    majoritySinceMs: undefined,
  };
}

function clearLiveness(m: Member): void {
  m.unreachable = false;
  m.suspicion = undefined;
  m.reporters.clear();
  m.probeFailedIncarnation = -1;
  m.majoritySinceMs = undefined;
}

function viewOf(m: Member): MemberView {
  return {
    nodeId: m.nodeId,
    address: m.address,
    incarnation: m.incarnation,
    state: m.state,
    unreachable: m.unreachable,
    suspect: m.suspicion !== undefined,
  };
}

/** Reachable as far as we know: a helper for indirect probes, a reporter whose view still counts. */
function isHealthy(m: Member): boolean {
  return VOTING.has(m.state) && !m.unreachable && m.suspicion === undefined;
}

/**
 * Lifeguard's dynamic suspicion (memberlist suspicion.go): from the ceiling down to the floor on a
 * log scale as confirmations c reach the expected k: max − (max − min)·log(c + 1)/log(k + 1).
 */
export function suspicionTimeoutMs(
  confirmations: number,
  expected: number,
  minMs: number,
  maxMs: number,
): number {
  if (expected < 1) return minMs;
  const fraction = Math.log(confirmations + 1) / Math.log(expected + 1);
  return Math.max(minMs, Math.floor(maxMs - fraction * (maxMs - minMs)));
}

function suspicionDeadlineMs(s: Suspicion): number {
  return s.startMs + suspicionTimeoutMs(s.confirmers.size - 1, s.expected, s.minMs, s.maxMs);
}
