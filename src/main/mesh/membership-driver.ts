// The main thread's driver of the membership core (core/membership.ts): it feeds the core what
// arrives — datagrams, membership envelopes from peer connections, operator requests — and the time,
// keeps the one timer the core asks for, and carries out its actions. Sockets, files and the logger
// are behind MembershipIo, so a test drives this very class message for message.
//
// Transport (DESIGN.md "Cluster"; README "Cluster"): a message whose envelope fits a datagram goes by UDP to the
// member's peer port, so a probe never waits behind replication bytes queued on a peer connection
// (memberlist's split: probes by UDP, full-state syncs by TCP); a larger one — a sync, a join
// reply — takes the peer connection. Without datagrams (a TLS mesh with no cluster secret to tag
// them with) everything takes the peer connections.
//
// A persist that raises this node's incarnation is written before any later action leaves: a
// refutation sent and then lost to a crash could otherwise be reused by the next life. An operator's
// request (leave, exit, remove) is answered once what it changed is on disk: a leave acknowledged
// survives a crash (the next start resumes it), one that crashed first was never acknowledged.

import type { DriverClock } from '../../core/clock.js';
import { Membership } from '../../core/membership.js';
import type {
  MemberEventRecord,
  MemberRecord,
  MembershipAction,
  MembershipConfig,
  MembershipEvent,
  MembershipMessage,
  MemberView,
  OperatorStatus,
} from '../../core/membership-types.js';
import {
  DATAGRAM_ENVELOPE_BYTES_MAX,
  encodeDatagram,
  openDatagram,
} from '../../threads/membership-datagram.js';
import { decodeMembershipMessage, encodeMembershipMessage } from '../../threads/membership-wire.js';

/** What the driver needs from the node around it. */
export interface MembershipIo {
  /** Sends a datagram to a member's `host:port` (its peer port). */
  sendDatagram(address: string, datagram: Buffer): void;
  /** Sends an envelope on the peer connection to `nodeId`; false when none is open. */
  sendEnvelope(nodeId: string, envelope: Uint8Array): boolean;
  /**
   * Writes this node's incarnation and member list durably (the data directory's cluster state);
   * undefined when it is done already (a store that keeps nothing, a simulator's).
   */
  persist(incarnation: number, members: MemberRecord[]): Promise<void> | undefined;
  log(level: 'info' | 'warn' | 'error', fields: Record<string, unknown>, message: string): void;
}

/** What the driver tells the node. */
export interface MembershipListener {
  /** A member event, in sequence order (also after the member's view changed). */
  onMemberEvent(event: MemberEventRecord): void;
  /** This node was refused by the cluster (removed, or its join refused): it must stop serving. */
  onRefused(reason: string): void;
  /** A graceful leave completed and was gossiped. */
  onLeft(): void;
  /** A member's record of this node id from before this process started reached it (once a run). */
  onEarlierRun(incarnation: number): void;
  /**
   * `member` asks to join at `incarnation` through this node without its earlier run's data, while
   * the table lists it: the placement coordinator must drop its lost copies first.
   */
  onLostCopies(member: string, incarnation: number): void;
}

export interface OperatorReply {
  status: OperatorStatus;
  message: string;
}

/** Counts of the driver's traffic, for metrics and the detection benchmark. */
export interface MembershipTraffic {
  datagramsSent: number;
  datagramBytesSent: number;
  envelopesSent: number;
  envelopeBytesSent: number;
  datagramsRefused: number;
  /** Messages that had no way out (no datagrams and no connection to the member). */
  unsent: number;
  /** Main-thread time spent in the core and in encoding and decoding, in ms. */
  busyMs: number;
}

export class MembershipDriver {
  private readonly core: Membership;
  /** Set while a raised incarnation is being written: later actions wait in `held`. */
  private holding = false;
  private held: MembershipAction[] = [];
  private persisting: Promise<void> | undefined;
  /** The latest persist asked for while one was being written: only the newest state matters. */
  private nextPersist: { incarnation: number; members: MemberRecord[] } | undefined;
  /** Operator replies waiting for the writes in flight to end. */
  private repliesAfterPersist: Array<() => void> = [];
  private persistedIncarnation: number;
  private readonly replies = new Map<number, (reply: OperatorReply) => void>();
  private nextRequestId = 1;
  private closed = false;
  private readonly datagramKey: Buffer | undefined;
  private readonly useDatagrams: boolean;
  readonly traffic: MembershipTraffic = {
    datagramsSent: 0,
    datagramBytesSent: 0,
    envelopesSent: 0,
    envelopeBytesSent: 0,
    datagramsRefused: 0,
    unsent: 0,
    busyMs: 0,
  };
  private readonly wake = (): void => this.step({ kind: 'tick', nowMs: this.clock.nowMs() });

  constructor(
    config: MembershipConfig,
    private readonly io: MembershipIo,
    private readonly listener: MembershipListener,
    private readonly clock: DriverClock,
    /** The datagram tag key (membership-datagram.ts); null: no datagrams, peer connections only. */
    datagramKey: Buffer | undefined | null,
    random: () => number = Math.random,
  ) {
    this.datagramKey = datagramKey ?? undefined;
    this.useDatagrams = datagramKey !== null;
    // The node wrote this start's incarnation before it spoke (cluster-state-file.ts's startIncarnation).
    this.persistedIncarnation = (config.restoredIncarnation ?? 0) + 1;
    this.core = new Membership(config, random, clock.nowMs());
    this.drain();
  }

  /** Every member, this node included, sorted by node id. */
  view(): MemberView[] {
    return this.core.view();
  }

  member(nodeId: string): MemberView | undefined {
    return this.core.member(nodeId);
  }

  reportersOf(nodeId: string): string[] {
    return this.core.reportersOf(nodeId);
  }

  healthMultiplier(): number {
    return this.core.healthMultiplier();
  }

  get counters(): Membership['counters'] {
    return this.core.counters;
  }

  /** A datagram from the peer port's UDP socket. */
  onDatagram(datagram: Buffer, remote: string): void {
    const opened = openDatagram(this.datagramKey, datagram);
    if (opened.kind === 'refused') {
      this.traffic.datagramsRefused++;
      // Each refusal is logged: a flood of them is an operator's problem to see (a wrong secret).
      this.io.log('warn', { remote, reason: opened.reason }, 'membership datagram refused');
      return;
    }
    const reason = this.onEnvelope(opened.envelope, remote);
    if (reason !== undefined) {
      this.traffic.datagramsRefused++;
      this.io.log('warn', { remote, reason }, 'membership datagram refused');
    }
  }

  /**
   * A membership envelope (from a datagram or a peer connection). Returns why it was refused when
   * malformed (a peer connection is then closed with that reason), undefined when taken.
   */
  onEnvelope(envelope: Uint8Array, remote?: string): string | undefined {
    const started = performance.now();
    const decoded = decodeMembershipMessage(envelope);
    this.traffic.busyMs += performance.now() - started;
    if (decoded.kind === 'malformed') return decoded.reason;
    this.step({ kind: 'message', message: decoded.message, nowMs: this.clock.nowMs(), remote });
    return undefined;
  }

  /** The peer connection to `nodeId` closed: membership probes it next. */
  connectionLost(nodeId: string): void {
    this.step({ kind: 'connection-lost', nodeId, nowMs: this.clock.nowMs() });
  }

  /** This node cannot take its place in the cluster: it stops as a removed member does, with `reason`. */
  giveUp(reason: string): void {
    this.step({ kind: 'give-up', reason, nowMs: this.clock.nowMs() });
  }

  /** Exchanges the whole view with `nodeId` now (the placement coordinator found a view behind). */
  syncWith(nodeId: string): void {
    this.step({ kind: 'sync-with', nodeId, nowMs: this.clock.nowMs() });
  }

  /**
   * The members the placement table this node routes by lists (Down ones count toward Down while
   * listed), and those holding some fragment's only whole copy. An empty list is no table yet (none
   * written), which says nothing.
   */
  placed(members: readonly string[], onlyCopies: readonly string[]): void {
    if (members.length === 0) return;
    this.step({ kind: 'placed', members, onlyCopies, nowMs: this.clock.nowMs() });
  }

  /** Joins the cluster through these seeds (their ids proven by the peer handshake). */
  join(seeds: ReadonlyArray<{ nodeId: string; address: string }>): void {
    this.step({ kind: 'join', seeds, nowMs: this.clock.nowMs() });
  }

  /** Graceful leave of this node (Leaving; `exit` once its data is handed off). */
  leave(): Promise<OperatorReply> {
    return this.request((requestId, nowMs) => ({ kind: 'leave', requestId, nowMs }));
  }

  cancelLeave(): Promise<OperatorReply> {
    return this.request((requestId, nowMs) => ({ kind: 'cancel-leave', requestId, nowMs }));
  }

  /** This leaving node's data is handed off: Exiting, then Removed. */
  exit(): Promise<OperatorReply> {
    return this.request((requestId, nowMs) => ({ kind: 'exit', requestId, nowMs }));
  }

  /** Removes a Down member (like `nodetool removenode`). */
  remove(nodeId: string): Promise<OperatorReply> {
    return this.request((requestId, nowMs) => ({ kind: 'remove', nodeId, requestId, nowMs }));
  }

  /** Stops the timer; what arrives later is ignored. */
  close(): void {
    this.closed = true;
    this.clock.clearTimer();
    for (const resolve of this.replies.values())
      resolve({ status: 'Conflict', message: 'the node is shutting down' });
    this.replies.clear();
  }

  private request(make: (requestId: number, nowMs: number) => MembershipEvent): Promise<OperatorReply> {
    if (this.closed) return Promise.resolve({ status: 'Conflict', message: 'the node is shutting down' });
    const requestId = this.nextRequestId++;
    const reply = new Promise<OperatorReply>((resolve) => this.replies.set(requestId, resolve));
    this.step(make(requestId, this.clock.nowMs()));
    return reply;
  }

  private step(event: MembershipEvent): void {
    if (this.closed) return;
    const started = performance.now();
    this.core.step(event);
    this.traffic.busyMs += performance.now() - started;
    this.drain();
  }

  /** Carries out the core's actions and sets the timer for its next wake-up. */
  private drain(): void {
    // Its own list: an action may step the core again (a listener that reaches back), whose drain
    // must not carry out this one's actions a second time.
    const actions: MembershipAction[] = [];
    this.core.takeActions(actions);
    for (const action of actions) this.dispatch(action);
    if (!this.closed) {
      const wakeMs = this.core.nextWakeMs();
      if (Number.isFinite(wakeMs)) this.clock.setTimer(wakeMs, this.wake);
      else this.clock.clearTimer();
    }
  }

  private dispatch(action: MembershipAction): void {
    if (this.holding) this.held.push(action);
    else this.carryOut(action);
  }

  private carryOut(action: MembershipAction): void {
    switch (action.kind) {
      case 'send':
        return this.send(action.to, action.address, action.message);
      case 'persist': {
        // What follows a raised incarnation waits until it is on disk (see the file header).
        if (action.incarnation > this.persistedIncarnation) this.holding = true;
        return this.persist(action.incarnation, action.members);
      }
      case 'member-event':
        return this.listener.onMemberEvent(action.event);
      case 'reply': {
        const resolve = this.replies.get(action.requestId);
        this.replies.delete(action.requestId);
        const answer = () => resolve?.({ status: action.status, message: action.message });
        // The persist of what the request changed came first (the core's order): answer once it is written.
        if (this.persisting !== undefined) this.repliesAfterPersist.push(answer);
        else answer();
        return;
      }
      case 'refused':
        this.io.log('error', { reason: action.reason }, 'this node was refused by the cluster');
        return this.listener.onRefused(action.reason);
      case 'left':
        return this.listener.onLeft();
      case 'earlier-run':
        return this.listener.onEarlierRun(action.incarnation);
      case 'lost-copies':
        return this.listener.onLostCopies(action.member, action.incarnation);
      case 'log':
        return this.io.log(action.level, {}, action.message);
    }
  }

  private send(to: string, address: string, message: MembershipMessage): void {
    const started = performance.now();
    const envelope = encodeMembershipMessage(message);
    if (this.useDatagrams && envelope.length <= DATAGRAM_ENVELOPE_BYTES_MAX) {
      const datagram = encodeDatagram(this.datagramKey, envelope);
      this.traffic.busyMs += performance.now() - started;
      this.traffic.datagramsSent++;
      this.traffic.datagramBytesSent += datagram.length;
      this.io.sendDatagram(address, datagram);
      return;
    }
    this.traffic.busyMs += performance.now() - started;
    if (this.io.sendEnvelope(to, envelope)) {
      this.traffic.envelopesSent++;
      this.traffic.envelopeBytesSent += envelope.length;
    } else {
      // Lost like a dropped datagram: the core retries or times out as it would for one.
      this.traffic.unsent++;
    }
  }

  private persist(incarnation: number, members: MemberRecord[]): void {
    if (this.persisting !== undefined) {
      this.nextPersist = { incarnation, members };
      return;
    }
    const written = this.io.persist(incarnation, members);
    if (written === undefined) {
      this.persistedIncarnation = Math.max(this.persistedIncarnation, incarnation);
      return this.release();
    }
    this.persisting = written
      .then(
        () => {
          this.persistedIncarnation = Math.max(this.persistedIncarnation, incarnation);
        },
        (err: Error) =>
          this.io.log('error', { err: err.message }, 'cannot save the cluster state; membership goes on'),
      )
      .finally(() => {
        this.persisting = undefined;
        const next = this.nextPersist;
        this.nextPersist = undefined;
        if (next !== undefined) return this.persist(next.incarnation, next.members);
        for (const answer of this.repliesAfterPersist.splice(0)) answer();
        this.release();
      });
  }

  /** The incarnation is on disk: what waited for it goes out, in order (until another raise). */
  private release(): void {
    this.holding = false;
    const held = this.held;
    this.held = [];
    for (const [i, action] of held.entries()) {
      if (this.closed) return;
      if (this.holding) {
        this.held.push(...held.slice(i));
        return;
      }
      this.carryOut(action);
    }
  }
}
