// A seeded simulator of one fragment replicated on every node of a small cluster (STYLE.md "Tests"):
// the fragment actors, the replication senders, the anti-entropy rounds and their responders and
// the hybrid logical clocks are the real cores from src/core; the network, the clock and the stores
// are simulated (sim-world.ts), in one thread, from one seed. What the worker's runtime and its
// replication driver do with the cores (src/workers/worker-runtime.ts, replication.ts) is done here
// the same way, message for message: client writes and replicated records go through the actor,
// its commits reach the store, the writes it applied go to the senders, and a replicated batch is
// acknowledged once its fence is reached. Every node takes client writes for every key, as replicas
// do in turn while the first ones are down, so writes to one key race between nodes; values get
// deadlines, and each node's TTL sweep retires what expired, as the cleaner does.
//
// The faults are the ones a TCP peer mesh has: a connection is FIFO with a random latency, and when
// it breaks every message in flight on it is lost; it comes back later. A node restarts — the whole
// process, whose connections break, or its worker, whose peers are told their sessions are gone —
// and loses its actor's and senders' state (whatever its peers had not acknowledged), while its
// store survives, as at `store` durability. A store refuses some commits, which the actor retries
// (a client write answered StorageFailed may or may not land; a batch whose fence fails is NACKed
// and sent again). Backlogs are kept small, so that an outage overflows them and anti-entropy has
// to repair what replication dropped.
//
// After the faults stop and every connection is back, every replica must hold the same record for
// every key: the newest write applied anywhere (tombstones included), or a newer one whose client
// was not told it held — each as it stands, its expiry tombstone once its deadline has passed. And
// every client write must be Applied: a node's clock has moved past every record it holds.

import { assert } from '../../src/core/assert.js';
import { type FragmentAction, FragmentCore, FragmentOp, type ReplySink } from '../../src/core/fragment.js';
import { HybridLogicalClock } from '../../src/core/hlc.js';
import {
  BACKGROUND_OPS_PER_SEC_DEFAULT,
  FLUSH_INTERVAL_MS_DEFAULT,
  FLUSH_PENDING_BYTES_MAX,
  FLUSH_PENDING_WRITES_MAX,
  QUEUE_OPS_MAX_DEFAULT,
  RECONCILE_PAGE_ITEMS_MAX,
  VALUE_BYTES_MAX_DEFAULT,
} from '../../src/core/limits.js';
import { Durability, OpKind, Priority, REPLY_NAMES, Reply } from '../../src/core/ops.js';
import {
  checkRecords,
  describePage,
  type KeyRecord,
  ReconcileResponder,
  ReconcileRound,
  type RecordCheck,
  type RoundStep,
} from '../../src/core/reconciler.js';
import {
  encodeRecord,
  expiresAtOf,
  expiryTombstoneOf,
  isExpiredValue,
  isTombstone,
  logicalOf,
  nodeIdOf,
  wallMsOf,
} from '../../src/core/record.js';
import {
  ReplicationSender,
  SENDER_CONFIG_DEFAULTS,
  type SenderAction,
  type SenderConfig,
} from '../../src/core/replication-sender.js';
import { NEXT_PAGE, readSpan } from '../../src/workers/reconcile-span.js';
import { referenceOrder } from '../unit/fixtures/lww-reference.js';
import { xorshift32 } from '../unit/fixtures/xorshift32.js';
import { Connection, fromWire, type Message, maxWallMsOf, SimStore, toWire } from './sim-world.js';

export interface SimOptions {
  seed: number;
  nodes: number;
  /**
   * Half the writes go to a few hot keys (so that writes to one key race across nodes), half to a
   * wide space of cold keys (most written once, so a lost write is a key missing on a replica).
   */
  hotKeys: number;
  coldKeys: number;
  /** Simulated ms of writes and faults, then of healing with neither. */
  faultMs: number;
  settleMs: number;
  /** Per simulated ms: a write somewhere; a connection breaking; a node restarting. */
  writeChance: number;
  /** Share of value writes given a deadline, up to `ttlMsMax` ahead; each node's TTL sweep period. */
  ttlChance: number;
  ttlMsMax: number;
  sweepIntervalMs: number;
  breakChance: number;
  restartChance: number;
  /** Per commit during the faults: the store refuses it (the actor retries; after three in a row it answers StorageFailed). */
  commitFailChance: number;
  /**
   * Ops a sender may hold for a peer. Small, so that outages overflow it and anti-entropy must
   * repair; unbounded with `antiEntropy` off, so that replication alone must deliver every write.
   */
  backlogOpsMax: number;
  /** Off: every round a sender starts is reported done at once, so nothing but replication repairs. */
  antiEntropy: boolean;
}

export const SIM_DEFAULTS: Omit<SimOptions, 'seed'> = {
  nodes: 3,
  hotKeys: 20,
  coldKeys: 5_000,
  faultMs: 8_000,
  settleMs: 12_000,
  writeChance: 0.3,
  ttlChance: 0.3,
  ttlMsMax: 3_000,
  sweepIntervalMs: 500,
  breakChance: 0.0004,
  restartChance: 0.0002,
  commitFailChance: 0.03,
  backlogOpsMax: 48,
  antiEntropy: true,
};

/**
 * Replication alone: connections break (the batch in flight must be replayed), nothing restarts
 * and no backlog overflows, and no anti-entropy round runs.
 */
export const REPLICATION_ONLY: Omit<SimOptions, 'seed'> = {
  ...SIM_DEFAULTS,
  restartChance: 0,
  backlogOpsMax: 1_000_000,
  antiEntropy: false,
};

/** The senders' timing, shortened so that a simulated minute sees many timeouts and rounds. */
const SENDER_TIMING: Omit<SenderConfig, 'fragment' | 'peer'> = {
  ...SENDER_CONFIG_DEFAULTS,
  batchOpsMax: 8,
  batchBytesMax: 4096,
  batchIntervalMs: 2,
  ackTimeoutMs: 300,
  retryFloorMs: 100,
  reconcileIntervalMs: 1_500,
  reconcileTimeoutMs: 1_000,
};
/** One-way latency of a message on a connection, and how long a broken one stays down. */
const LATENCY_MS_MAX = 15;
const DOWN_MS_MIN = 20;
const DOWN_MS_MAX = 1_500;
/**
 * Nodes' wall clocks differ by up to this much, in half the runs the first, in half the second (both
 * well inside the receivers' skew limit): a node then often stamps ahead of its own wall clock.
 */
const CLOCK_SKEW_MS_MAX = [40, 3_000];
const MAX_CLOCK_SKEW_MS = 300_000;
const EMPTY = Buffer.alloc(0);
/** Anti-entropy repairs are not awaited (as in the driver): LWW decides, and the next round retries. */
const IGNORE_REPLIES: ReplySink = { onReply() {} };

/** What a node keeps: its store survives every restart, its clock a worker's, the rest none. */
class SimNode {
  readonly store = new SimStore();
  clock = new HybridLogicalClock(MAX_CLOCK_SKEW_MS);
  core!: FragmentCore;
  /** Client writes waiting for their answer, by request id. */
  readonly writing = new Map<number, { key: string; record: Buffer }>();
  nextReqId = 1;
  senders: Array<ReplicationSender | undefined> = [];
  rounds = new Map<number, ReconcileRound>();
  responders = new Map<number, ReconcileResponder>();
  /** Peers whose connection this node sees up. */
  up: boolean[] = [];
  restarted = false;
  resetSent = new Set<number>();

  constructor(
    readonly index: number,
    readonly id: Buffer,
    readonly skewMs: number,
  ) {}
}

export interface SimReport {
  writes: number;
  breaks: number;
  restarts: number;
  messages: number;
  roundsDone: number;
  resets: number;
  /** Expired values handed to the actors by the TTL sweeps. */
  swept: number;
  /** Commits the stores refused, and client writes whose outcome was not known (StorageFailed, or lost unanswered). */
  commitsFailed: number;
  unsure: number;
  repaired: number;
  /** Keys written, each checked on every replica. */
  keys: number;
}

export function emptyReport(): SimReport {
  return {
    writes: 0,
    breaks: 0,
    restarts: 0,
    messages: 0,
    roundsDone: 0,
    resets: 0,
    swept: 0,
    commitsFailed: 0,
    unsure: 0,
    repaired: 0,
    keys: 0,
  };
}

export class ReplicationSim {
  private readonly random: () => number;
  private nowMs = 0;
  private readonly nodes: SimNode[] = [];
  private readonly connections: Connection[] = [];
  /** The newest write applied per key: what every replica must end with, or something newer. */
  private readonly newest = new Map<string, Buffer>();
  /** Per key, writes answered StorageFailed or lost with their actor unanswered. */
  private readonly unsure = new Map<string, Buffer[]>();
  private readonly ids = { next: (): number => 1 + (this.random() % (2 ** 31 - 1)) };
  private readonly report = emptyReport();

  constructor(private readonly options: SimOptions) {
    this.random = xorshift32(options.seed);
    const skewMax = CLOCK_SKEW_MS_MAX[this.below(CLOCK_SKEW_MS_MAX.length)];
    for (let i = 0; i < options.nodes; i++) {
      const skew = this.below(2 * skewMax + 1) - skewMax;
      this.nodes.push(new SimNode(i, Buffer.from(`n${i}`), skew));
    }
    for (let i = 0; i < options.nodes; i++)
      for (let j = i + 1; j < options.nodes; j++) this.connections.push(new Connection(i, j));
    for (const node of this.nodes) this.boot(node, true);
    for (const c of this.connections) c.upAtMs = 1 + this.below(DOWN_MS_MIN);
  }

  /** Runs the faults, then the healing; throws if a replica ends without some key's newest write. */
  async run(): Promise<SimReport> {
    const end = this.options.faultMs + this.options.settleMs;
    for (this.nowMs = 1; this.nowMs <= end; this.nowMs++) {
      const faults = this.nowMs <= this.options.faultMs;
      await this.deliver();
      this.reconnect(faults);
      if (faults) this.injectFaults();
      if (faults && this.chance(this.options.writeChance)) this.write();
      this.tick();
    }
    this.check();
    return this.report;
  }

  // --- the simulated world ------------------------------------------------------------------------

  private below(n: number): number {
    return this.random() % n;
  }

  private chance(p: number): boolean {
    return this.random() / 2 ** 32 < p;
  }

  private wallMs(node: SimNode): number {
    return 1_000_000 + this.nowMs + node.skewMs;
  }

  /** A node (re)starts: a fresh actor from its store, fresh senders, every peer seen down. */
  private boot(node: SimNode, wholeProcess: boolean): void {
    for (const sender of node.senders) this.report.resets += sender?.report(this.nowMs).resets ?? 0;
    node.senders = this.nodes.map((peer) =>
      peer === node
        ? undefined
        : new ReplicationSender(
            {
              ...SENDER_TIMING,
              bufferOpsMax: this.options.backlogOpsMax,
              bufferBytesMax: this.options.backlogOpsMax * 1024,
              fragment: 0,
              peer: peer.id.toString(),
            },
            this.ids,
          ),
    );
    node.rounds = new Map();
    node.responders = new Map();
    node.up = this.nodes.map(() => false);
    node.resetSent = new Set();
    for (const w of node.writing.values()) this.mayLand(w.key, w.record);
    node.writing.clear();
    const { highWaterWallMs } = node.store;
    node.core = new FragmentCore(
      {
        fragment: 0,
        replicates: true,
        valueBytesMax: VALUE_BYTES_MAX_DEFAULT,
        storedHighWaterWallMs: highWaterWallMs,
        queueOpsMax: QUEUE_OPS_MAX_DEFAULT,
        backgroundOpsPerSec: BACKGROUND_OPS_PER_SEC_DEFAULT,
        flushIntervalMs: FLUSH_INTERVAL_MS_DEFAULT,
        flushWritesMax: FLUSH_PENDING_WRITES_MAX,
        flushBytesMax: FLUSH_PENDING_BYTES_MAX,
      },
      node.store,
      this.wallMs(node),
    );
    // The clock is the main thread's: a process restart starts a new one; either way it is seeded
    // from the store's high-water mark, as a node is from each worker's when the worker is ready.
    if (wholeProcess) node.clock = new HybridLogicalClock(MAX_CLOCK_SKEW_MS);
    assert(node.clock.observeWallMs(highWaterWallMs, this.wallMs(node)), 'a stored stamp too far ahead');
  }

  private injectFaults(): void {
    for (const c of this.connections) {
      if (c.up && this.chance(this.options.breakChance)) {
        this.report.breaks++;
        this.breakConnection(c, DOWN_MS_MIN + this.below(DOWN_MS_MAX - DOWN_MS_MIN));
      }
    }
    for (const node of this.nodes) if (this.chance(this.options.restartChance)) this.restart(node);
  }

  /**
   * A process restart breaks the node's connections; a worker restart leaves them to the main
   * thread, and the new worker tells each peer it forgot their sessions.
   */
  private restart(node: SimNode): void {
    this.report.restarts++;
    const wholeProcess = this.chance(0.5);
    if (wholeProcess) {
      for (const c of this.connections)
        if (c.joins(node.index)) this.breakConnection(c, DOWN_MS_MIN + this.below(200));
    }
    this.boot(node, wholeProcess);
    node.restarted = true;
    if (wholeProcess) return;
    for (const c of this.connections)
      if (c.up && c.joins(node.index)) this.peerState(node, c.other(node.index), true);
  }

  private breakConnection(c: Connection, downMs: number): void {
    c.upAtMs = Math.max(c.upAtMs, this.nowMs + downMs);
    if (!c.up) return;
    c.drop();
    this.peerState(this.nodes[c.low], c.high, false);
    this.peerState(this.nodes[c.high], c.low, false);
  }

  /** Connections due back come up (all of them once the faults are over). */
  private reconnect(faults: boolean): void {
    for (const c of this.connections) {
      if (c.up || (faults && this.nowMs < c.upAtMs)) continue;
      c.up = true;
      this.peerState(this.nodes[c.low], c.high, true);
      this.peerState(this.nodes[c.high], c.low, true);
    }
  }

  private send(from: SimNode, to: number, message: Message): void {
    if (!from.up[to]) return;
    const c = this.connections.find((x) => x.joins(from.index) && x.joins(to))!;
    assert(c.up, 'a node sends only over a connection it sees up');
    c.push(from.index, to, toWire(message), this.nowMs + 1 + this.below(LATENCY_MS_MAX));
  }

  private async deliver(): Promise<void> {
    for (const c of this.connections) {
      for (const queue of c.queues) {
        while (c.up && queue.length > 0 && queue[0].atMs <= this.nowMs) {
          const { to, from, bytes } = queue.shift()!;
          this.report.messages++;
          await this.receive(this.nodes[to], from, fromWire(bytes));
        }
      }
    }
  }

  /** A client write at a random node: stamped by its clock, run by its actor at `store` durability. */
  private write(): void {
    const node = this.nodes[this.below(this.nodes.length)];
    const hot = this.chance(0.5);
    const name = hot ? `h${this.below(this.options.hotKeys)}` : `c${this.below(this.options.coldKeys)}`;
    const key = Buffer.from(name);
    const tombstone = this.chance(0.2);
    node.clock.tick(this.wallMs(node));
    const { wallMs, logical } = node.clock;
    const value = tombstone ? EMPTY : Buffer.from(`${node.id}@${wallMs}.${logical}`);
    const ttl = !tombstone && this.chance(this.options.ttlChance);
    const expiresAtMs = ttl ? this.wallMs(node) + 1 + this.below(this.options.ttlMsMax) : 0;
    const record = encodeRecord(tombstone, wallMs, logical, expiresAtMs, node.id, value);
    this.report.writes++;
    const reqId = node.nextReqId++;
    node.writing.set(reqId, { key: name, record });
    // As the worker hands a write over: directly when nothing is queued ahead of it, else as an op.
    const now = this.wallMs(node);
    if (!node.core.tryDirectWrite(reqId, Priority.Default, Durability.Store, key, record, now)) {
      const op = new FragmentOp(OpKind.Write, reqId, Priority.Default, Durability.Store, key, record);
      node.core.step({ kind: 'request', op });
    }
    this.runCore(node);
  }

  private tick(): void {
    for (const node of this.nodes) {
      node.core.step({ kind: 'tick', nowMs: this.wallMs(node) });
      this.runCore(node);
      if ((this.nowMs + node.index * 97) % this.options.sweepIntervalMs === 0) this.sweep(node);
      for (let peer = 0; peer < this.nodes.length; peer++) {
        node.senders[peer]?.step({ kind: 'tick', nowMs: this.nowMs });
        this.pump(node, peer);
      }
    }
  }

  // --- the worker runtime, as src/workers/worker-runtime.ts does it -------------------------------

  /** The TTL cleaner: the store's expired values go to the actor, which retires each still current. */
  private sweep(node: SimNode): void {
    const nowMs = this.wallMs(node);
    const entries: Array<{ key: Buffer; record: Buffer }> = [];
    for (const [key, record] of node.store.data)
      if (isExpiredValue(record, nowMs)) entries.push({ key: Buffer.from(key, 'latin1'), record });
    if (entries.length === 0) return;
    this.report.swept += entries.length;
    node.core.step({ kind: 'sweep', nowMs, entries });
    this.runCore(node);
  }

  /** One turn of a node's actor and all it asks for: answers, commits, the writes to replicate. */
  private runCore(node: SimNode): void {
    node.core.step({ kind: 'run', nowMs: this.wallMs(node), budget: QUEUE_OPS_MAX_DEFAULT });
    const actions: FragmentAction[] = [];
    for (node.core.takeActions(actions); actions.length > 0; node.core.takeActions(actions)) {
      for (const action of actions.splice(0)) {
        if (action instanceof FragmentOp) {
          if (action.sink !== undefined) action.sink.onReply(action, action.reply, action.text);
          else this.answered(node, action.reqId, action.reply);
        } else if (action.kind === 'acks') {
          for (const reqId of action.reqIds) this.answered(node, reqId, action.reply);
        } else if (action.kind === 'commit') {
          const { generation } = action;
          if (this.nowMs <= this.options.faultMs && this.chance(this.options.commitFailChance)) {
            this.report.commitsFailed++;
            node.core.step({ kind: 'commit-failed', generation, message: 'simulated store failure' });
            continue;
          }
          node.store.commit(action.puts, action.highWaterWallMs);
          node.core.step({ kind: 'committed', generation });
        } else {
          node.core.step({ kind: 'synced', generation: action.generation });
        }
      }
    }
    const log = node.core.takeReplicated();
    if (log.length === 0) return;
    for (let peer = 0; peer < this.nodes.length; peer++) {
      const sender = node.senders[peer];
      if (sender === undefined) continue;
      for (const [key, record] of log) sender.step({ kind: 'enqueue', key, record, nowMs: this.nowMs });
      this.pump(node, peer);
    }
  }

  /**
   * A client write's answer. Applied — never Superseded, since every record reaching a node moves its
   * clock past it — and then every replica must end with it or a newer write of its key; or
   * StorageFailed, after which it may or may not land.
   */
  private answered(node: SimNode, reqId: number, reply: Reply): void {
    const w = node.writing.get(reqId);
    assert(w !== undefined, `an answer to request ${reqId}, which is not waiting`);
    node.writing.delete(reqId);
    if (reply === Reply.StorageFailed) return this.mayLand(w.key, w.record);
    assert(reply === Reply.Applied, `a client write at n${node.index} answered ${REPLY_NAMES[reply]}`);
    const held = this.newest.get(w.key);
    if (held === undefined || newerVersion(w.record, held)) this.newest.set(w.key, w.record);
  }

  /** A write whose client was not told it held: a replica may end with it, or not. */
  private mayLand(key: string, record: Buffer): void {
    const list = this.unsure.get(key);
    if (list === undefined) this.unsure.set(key, [record]);
    else list.push(record);
  }

  // --- the replication driver, as src/workers/replication.ts does it ------------------------------

  private peerState(node: SimNode, peer: number, up: boolean): void {
    if (node.up[peer] === up) return;
    node.up[peer] = up;
    if (!up) {
      node.rounds.delete(peer);
      node.responders.delete(peer);
    }
    node.senders[peer]!.step({ kind: up ? 'connected' : 'disconnected', nowMs: this.nowMs });
    this.pump(node, peer);
    if (up && node.restarted && !node.resetSent.has(peer)) {
      node.resetSent.add(peer);
      this.send(node, peer, { kind: 'session-reset' });
    }
  }

  private pump(node: SimNode, peer: number): void {
    const sender = node.senders[peer];
    if (sender === undefined) return;
    const actions: SenderAction[] = [];
    sender.takeActions(actions);
    for (const action of actions) this.carryOut(node, peer, action);
  }

  private carryOut(node: SimNode, peer: number, action: SenderAction): void {
    switch (action.kind) {
      case 'session-start':
        return this.send(node, peer, { kind: 'session-start', sessionId: action.sessionId });
      case 'batch': {
        const { sessionId, batchSeq, requiredAck: level } = action;
        const ops = action.ops.map(([key, record]) => ({ key, record }));
        return this.send(node, peer, {
          kind: 'batch',
          sessionId,
          batchSeq,
          level,
          maxWallMs: maxWallMsOf(ops),
          ops,
        });
      }
      case 'start-round': {
        if (!this.options.antiEntropy) {
          const { sessionId, roundId } = action;
          node.senders[peer]!.step({ kind: 'round-done', sessionId, roundId, nowMs: this.nowMs });
          return this.pump(node, peer);
        }
        const round = new ReconcileRound(action.sessionId, action.roundId, this.wallMs(node));
        node.rounds.set(peer, round);
        void this.stepRound(node, peer, round, round.start());
        return;
      }
      case 'log':
        return;
    }
  }

  private responderOf(node: SimNode, peer: number): ReconcileResponder {
    let responder = node.responders.get(peer);
    if (responder === undefined) {
      responder = new ReconcileResponder();
      node.responders.set(peer, responder);
    }
    return responder;
  }

  private recordCheck(node: SimNode): RecordCheck {
    return { fragment: 0, fragmentOf: () => 0, nowMs: this.wallMs(node), maxClockSkewMs: MAX_CLOCK_SKEW_MS };
  }

  /** Records from a peer, merged through the actor as the replication driver submits them. */
  private submitReplicated(node: SimNode, entries: readonly KeyRecord[], sink: ReplySink): void {
    for (const e of entries) {
      const record = Buffer.from(e.record);
      const op = new FragmentOp(
        OpKind.Write,
        0,
        Priority.Default,
        Durability.Memory,
        Buffer.from(e.key),
        record,
      );
      op.replicated = true;
      op.sink = sink;
      node.core.step({ kind: 'request', op });
    }
  }

  /** A replicated batch: applied through the actor, acknowledged once its fence is reached. */
  private applyBatch(node: SimNode, peer: number, m: Extract<Message, { kind: 'batch' }>): void {
    if (node.responders.get(peer)?.sessionId !== m.sessionId || m.sessionId === 0) return;
    const { ops } = m;
    const invalid = checkRecords(ops, this.recordCheck(node));
    assert(invalid === undefined, `a replicated batch refused: ${invalid}`);
    const { sessionId, batchSeq, level } = m;
    // As BatchApply: acknowledged once its fence is reached, refused if an op or the fence failed.
    let failure = '';
    const batch: ReplySink = {
      onReply: (op, reply, text) => {
        const failed = reply === Reply.StorageFailed || reply === Reply.Backpressure;
        if (op.kind !== OpKind.Fence) {
          if (failed && failure === '') failure = text;
          return;
        }
        if (reply !== Reply.FenceReached && failure === '') failure = text || 'fence failed';
        if (failure === '') this.send(node, peer, { kind: 'ack', sessionId, batchSeq, level });
        else this.send(node, peer, { kind: 'nack', sessionId, batchSeq, error: failure });
      },
    };
    this.submitReplicated(node, ops, batch);
    const fence = new FragmentOp(OpKind.Fence, 0, Priority.Default, Durability.Store, EMPTY, EMPTY);
    fence.sink = batch;
    node.core.step({ kind: 'request', op: fence });
    this.runCore(node);
  }

  private async receive(node: SimNode, peer: number, m: Message): Promise<void> {
    const sender = node.senders[peer]!;
    // As the main thread does when such a frame arrives, before its worker sees it: later client
    // writes order after every record in it.
    if ((m.kind === 'batch' || m.kind === 'data') && m.maxWallMs > 0) {
      assert(node.clock.observeWallMs(m.maxWallMs, this.wallMs(node)), 'a frame too far ahead of the clock');
    }
    switch (m.kind) {
      case 'session-start':
        if (m.sessionId !== 0) this.responderOf(node, peer).onSessionStart(m.sessionId);
        return;
      case 'session-reset':
        if (!node.up[peer]) return;
        node.rounds.delete(peer);
        sender.step({ kind: 'disconnected', nowMs: this.nowMs });
        sender.step({ kind: 'connected', nowMs: this.nowMs });
        return this.pump(node, peer);
      case 'batch':
        return this.applyBatch(node, peer, m);
      case 'ack': {
        const { sessionId, batchSeq, level } = m;
        sender.step({ kind: 'ack', sessionId, batchSeq, level, nowMs: this.nowMs });
        return this.pump(node, peer);
      }
      case 'nack': {
        const { sessionId, batchSeq, error } = m;
        sender.step({ kind: 'nack', sessionId, batchSeq, error, nowMs: this.nowMs });
        return this.pump(node, peer);
      }
      case 'request':
        return this.serveSummaries(node, peer, m);
      case 'fetch': {
        const pages = this.responderOf(node, peer).onFetch(m.f, node.core);
        if (!Array.isArray(pages)) {
          assert(pages.kind !== 'violation', `responder: ${pages.kind === 'violation' ? pages.reason : ''}`);
          return;
        }
        for (const page of pages)
          this.send(node, peer, { kind: 'data', page, maxWallMs: maxWallMsOf(page.entries) });
        return;
      }
      case 'summaries': {
        const round = node.rounds.get(peer);
        if (round !== undefined)
          await this.stepRound(node, peer, round, round.onSummaries(m.page, node.core));
        return;
      }
      case 'data': {
        const round = node.rounds.get(peer);
        if (round === undefined) return;
        await this.stepRound(node, peer, round, round.onData(m.page, this.recordCheck(node)));
        return;
      }
    }
  }

  private async serveSummaries(node: SimNode, peer: number, m: Extract<Message, { kind: 'request' }>) {
    const responder = this.responderOf(node, peer);
    const serve = responder.onRequest(m.q);
    assert(serve.kind !== 'violation', `responder: ${serve.kind === 'violation' ? serve.reason : ''}`);
    if (serve.kind !== 'read-page') return;
    const span = await readSpan(node.store.read, serve.afterKey, m.q);
    if (node.responders.get(peer) !== responder) return;
    const page = responder.pageRead(m.q, span.entries, span.truncated);
    if (page !== undefined) this.send(node, peer, { kind: 'summaries', page });
  }

  private async stepRound(
    node: SimNode,
    peer: number,
    round: ReconcileRound,
    step: RoundStep,
  ): Promise<void> {
    const sender = node.senders[peer]!;
    const { sessionId, roundId, horizonMs } = round;
    switch (step.kind) {
      case 'request-page': {
        const mine = await readSpan(
          node.store.read,
          step.pageSeq === 0 ? undefined : step.afterKey,
          NEXT_PAGE,
        );
        if (node.rounds.get(peer) !== round) return;
        assert(mine.entries.length <= RECONCILE_PAGE_ITEMS_MAX, 'a page is at most a page of keys');
        const { ranges, openEnd } = describePage(mine.entries, horizonMs);
        const q = {
          sessionId,
          roundId,
          pageSeq: step.pageSeq,
          afterKey: step.afterKey,
          ranges,
          openEnd,
          horizonMs,
        };
        return this.send(node, peer, { kind: 'request', q });
      }
      case 'fetch': {
        sender.step({ kind: 'round-progress', sessionId, roundId, nowMs: this.nowMs });
        const f = { sessionId, roundId, chunkSeq: step.chunkSeq, keys: step.keys };
        return this.send(node, peer, { kind: 'fetch', f });
      }
      case 'merge':
        sender.step({ kind: 'round-progress', sessionId, roundId, nowMs: this.nowMs });
        this.report.repaired += step.entries.length;
        this.submitReplicated(node, step.entries, IGNORE_REPLIES);
        this.runCore(node);
        if (step.next !== undefined) await this.stepRound(node, peer, round, step.next);
        return;
      case 'done':
        node.rounds.delete(peer);
        this.report.roundsDone++;
        sender.step({ kind: 'round-done', sessionId, roundId, nowMs: this.nowMs });
        return this.pump(node, peer);
      case 'violation':
        assert(false, `anti-entropy violation: ${step.reason}`);
        return;
      case 'ignore':
        return;
    }
  }

  // --- the verdict --------------------------------------------------------------------------------

  private check(): void {
    const keys = new Set([...this.newest.keys(), ...this.unsure.keys()]);
    const first = this.nodes[0];
    for (const node of this.nodes) {
      assert(!node.core.hasUncommitted(), `n${node.index}'s actor still holds uncommitted writes`);
      for (const key of node.store.data.keys())
        assert(keys.has(key), `n${node.index} holds ${key}, which nobody wrote`);
      for (const key of keys) {
        const held = node.store.data.get(key);
        const reason = this.wrongRecord(node, key, held);
        if (reason !== undefined) throw new Error(`node n${node.index}, key ${key}: ${reason}`);
        const same =
          held === undefined
            ? first.store.data.get(key) === undefined
            : held.equals(first.store.data.get(key) ?? EMPTY);
        assert(same, `n${node.index} and n0 hold different records for ${key}`);
      }
      for (const sender of node.senders) {
        const r = sender?.report(this.nowMs);
        if (r === undefined) continue;
        assert(r.buffered === 0 && r.inFlight === 0, `n${node.index} → ${r.peer} still holds ops`);
        this.report.resets += r.resets;
      }
    }
    this.report.keys = keys.size;
    for (const list of this.unsure.values()) this.report.unsure += list.length;
  }

  /**
   * Why `held` is not what `node` may hold for `key` — the newest applied write, or a newer one
   * whose client was not told it held, each as it stands now (its expiry tombstone once its
   * deadline has passed); undefined when it is.
   */
  private wrongRecord(node: SimNode, key: string, held: Buffer | undefined): string | undefined {
    const now = this.wallMs(node);
    const asNow = (w: Buffer) => (isExpiredValue(w, now) ? expiryTombstoneOf(w) : w);
    const newest = this.newest.get(key);
    const allowed = (this.unsure.get(key) ?? []).filter(
      (w) => newest === undefined || newerVersion(w, newest),
    );
    if (newest !== undefined) allowed.push(newest);
    if (held === undefined) {
      if (newest === undefined) return undefined;
      return `holds nothing, not its newest write ${describeVersion(newest)}`;
    }
    if (allowed.some((w) => asNow(w).equals(held))) return undefined;
    const what =
      newest === undefined ? 'no write it may hold' : `not its newest write ${describeVersion(newest)}`;
    return `holds ${describeVersion(held)}, ${what}`;
  }
}

/** Whether `a` is a newer write than `b`, by the reference LWW order. */
function newerVersion(a: Buffer, b: Buffer): boolean {
  return referenceOrder(a, b) > 0;
}

function describeVersion(r: Buffer): string {
  const deadline = expiresAtOf(r) === 0 ? '' : ` expiring at ${expiresAtOf(r)}`;
  return `${isTombstone(r) ? 'tombstone' : 'value'} ${wallMsOf(r)}.${logicalOf(r)}/${Buffer.from(nodeIdOf(r))}${deadline}`;
}
