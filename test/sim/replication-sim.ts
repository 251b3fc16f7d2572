// A seeded simulator of one fragment replicated on every node of a small cluster (STYLE.md "Tests"):
// the fragment actors, the hybrid logical clocks and the worker's replication driver
// (src/workers/replication.ts, with the senders, anti-entropy rounds and responders it runs) are the
// real code; the network, the clock and timers, and the stores are simulated (sim-world.ts), in one
// thread, from one seed. What the worker's runtime does around them (src/workers/worker-runtime.ts)
// is done here the same way: client writes and the records the driver submits go through the actor,
// its commits reach the store, and after each run the driver takes the writes it applied. Every
// node takes client writes for every key, as replicas do in turn while the first ones are down, so
// writes to one key race between nodes; values get deadlines, and each node's TTL sweep retires what
// expired, as the cleaner does.
//
// The faults are the ones a TCP peer mesh has: a connection is FIFO with a random latency, and when
// it breaks every message in flight on it is lost; it comes back later. A node restarts — the whole
// process, whose connections break, or its worker, whose peers are told their sessions are gone —
// and loses its actor's and driver's state (whatever its peers had not acknowledged), while its
// store survives, as at `store` durability. A store refuses some commits, which the actor retries
// (a client write answered StorageFailed may or may not land; a batch whose fence fails is NACKed
// and sent again). Backlogs are kept small, so that an outage overflows them and anti-entropy has
// to repair what replication dropped. Nodes not numbered a multiple of 3 work out their anti-entropy
// pages as the background pool does (src/workers/scan-task.ts), so two of them also compare with each
// other that way; the others work them out in the worker, as LevelDB's do.
//
// After the faults stop and every connection is back, every replica must hold the same record for
// every key: the newest write applied anywhere (tombstones included), or a newer one whose client
// was not told it held — each as it stands, its expiry tombstone once its deadline has passed. And
// every client write must be Applied: a node's clock has moved past every record it holds. On the
// way, no driver may close a peer's connection (every frame is well formed and every page in
// order), and a batch may be refused only for a failed commit, never for its records.

import { setImmediate as macrotask } from 'node:timers/promises';
import pino from 'pino';
import { assert } from '../../src/core/assert.js';
import { type FragmentAction, type FragmentCore, FragmentOp } from '../../src/core/fragment.js';
import { HybridLogicalClock } from '../../src/core/hlc.js';
import { ANTI_ENTROPY_KEYS_PER_SEC_DEFAULT, QUEUE_OPS_MAX_DEFAULT } from '../../src/core/limits.js';
import { Durability, OpKind, Priority, REPLY_NAMES, Reply } from '../../src/core/ops.js';
import {
  EnvelopeField,
  isFragmentMessage,
  maxWallMsField,
  peekEnvelope,
  peekFragment,
} from '../../src/core/peer-frame.js';
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
import { AckLevel, SENDER_CONFIG_DEFAULTS } from '../../src/core/replication-sender.js';
import type { KvStore } from '../../src/native-bindings/kv-store.js';
import type { ClusterInit } from '../../src/threads/messages.js';
import { decodeEnvelope } from '../../src/threads/peer-messages.js';
import { answerSpan, describeSpan, type PageReader } from '../../src/workers/reconcile-span.js';
import {
  type ReplicationHost,
  type SenderTuning,
  type SpanPool,
  WorkerReplication,
} from '../../src/workers/replication.js';
import { referenceOrder } from '../unit/fixtures/lww-reference.js';
import { xorshift32 } from '../unit/fixtures/xorshift32.js';
import { Connection, replicatingActor, SimClock, SimStore } from './sim-world.js';

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
  /** Off: anti-entropy reads no keys, so every round ends with nothing to repair and only replication delivers. */
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
const SENDER_TIMING: SenderTuning['config'] = {
  ...SENDER_CONFIG_DEFAULTS,
  batchOpsMax: 8,
  batchBytesMax: 4096,
  batchIntervalMs: 2,
  ackTimeoutMs: 300,
  retryFloorMs: 100,
  reconcileTimeoutMs: 1_000,
};
/** A routine anti-entropy round this long after the last (the cluster's setting). */
const RECONCILE_INTERVAL_MS = 1_500;
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
/** Why a simulated commit fails: the only reason a replica may refuse a batch. */
const COMMIT_FAILURE = 'simulated store failure';
/** What anti-entropy reads with `antiEntropy` off: no keys, so every round ends with nothing to repair. */
const NO_KEYS: SimStoreReads = { page: async () => [], fragmentSize: async () => ({ keys: 0, bytes: 0 }) };
const SILENT = pino({ level: 'silent' });
/** What anti-entropy reads of a node's store. */
type SimStoreReads = Pick<KvStore, 'page' | 'fragmentSize'>;

/**
 * One incarnation of a node's worker: its actor and the real replication driver, and what the worker
 * runtime does for the driver. A restart replaces it; what the old one still had under way (a store
 * read of anti-entropy) then sends nothing.
 */
class SimWorker implements ReplicationHost {
  readonly replication: WorkerReplication;
  /** False once the worker is replaced. */
  alive = true;
  /** Ops the driver submitted since the actor last ran; in total, to count repairs. */
  submitted = 0;
  submittedTotal = 0;
  readonly logger = SILENT;
  /** The background pool's work on spans, read from the same store (scan-task.ts), when the node has one. */
  readonly pool: SpanPool | undefined;

  constructor(
    readonly actor: FragmentCore,
    readonly clock: SimClock,
    readonly store: SimStoreReads,
    cluster: ClusterInit,
    restarted: boolean,
    tuning: SenderTuning,
    /** Puts a frame on the connection to `member`. */
    private readonly transmit: (member: number, envelope: Uint8Array) => void,
    /** Records a broken rule: the run fails with it. */
    private readonly fail: (reason: string) => void,
    /** Called for each page worked out as the pool does; none, when the node has no pool. */
    onPoolPage: (() => void) | undefined,
  ) {
    const read: PageReader = (start, limit) => store.page(0, start, undefined, limit, true);
    this.pool =
      onPoolPage === undefined
        ? undefined
        : {
            describe: (_fragment, afterKey, q, horizonMs) => {
              onPoolPage();
              return describeSpan(read, afterKey, q, horizonMs);
            },
            answer: (_fragment, afterKey, q, work) => {
              onPoolPage();
              return answerSpan(read, afterKey, q, work);
            },
          };
    this.replication = new WorkerReplication(cluster, [0], 1, restarted, this, tuning);
  }

  core(fragment: number): FragmentCore | undefined {
    return fragment === 0 ? this.actor : undefined;
  }

  submit(core: FragmentCore, op: FragmentOp): void {
    core.step({ kind: 'request', op });
    this.submitted++;
    this.submittedTotal++;
  }

  sendFrame(member: number, envelope: Uint8Array): void {
    if (this.alive) this.transmit(member, envelope);
  }

  closePeer(member: number, reason: string): void {
    if (this.alive) this.fail(`closed its connection to n${member}: ${reason}`);
  }
}

/** What a node keeps: its store survives every restart, its clock a worker's, the rest none. */
class SimNode {
  readonly store = new SimStore();
  clock = new HybridLogicalClock(MAX_CLOCK_SKEW_MS);
  /** The current incarnation (boot). */
  worker!: SimWorker;
  /** Client writes waiting for their answer, by request id. */
  readonly writing = new Map<number, { key: string; record: Buffer }>();
  nextReqId = 1;

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
  /** Records anti-entropy merged through the actors. */
  repaired: number;
  /** Anti-entropy pages worked out as the background pool does (nodes not numbered a multiple of 3). */
  poolPages: number;
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
    poolPages: 0,
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
  private readonly tuning: SenderTuning;
  private readonly report = emptyReport();
  /** Anti-entropy's store reads so far, and as of the last settle. */
  private readsStarted = 0;
  private readsSettled = 0;
  /** The first broken rule, thrown at the end of the ms it happened in. */
  private failure: string | undefined;

  constructor(private readonly options: SimOptions) {
    this.random = xorshift32(options.seed);
    this.tuning = {
      config: {
        ...SENDER_TIMING,
        bufferOpsMax: options.backlogOpsMax,
        bufferBytesMax: options.backlogOpsMax * 1024,
      },
      ids: { next: (): number => 1 + (this.random() % (2 ** 31 - 1)) },
    };
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
      this.deliver();
      this.reconnect(faults);
      if (faults) this.injectFaults();
      if (faults && this.chance(this.options.writeChance)) this.write();
      this.tick();
      await this.settle();
      if (this.failure !== undefined) throw new Error(`at ${this.nowMs} ms: ${this.failure}`);
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

  /**
   * A node (re)starts: a fresh actor from its store and a fresh driver, every peer seen down. When
   * only its worker restarted, the new driver tells each peer so.
   */
  private boot(node: SimNode, wholeProcess: boolean): void {
    const old = node.worker as SimWorker | undefined;
    if (old !== undefined) {
      this.countSenders(old);
      old.alive = false;
      old.replication.close();
    }
    for (const w of node.writing.values()) this.mayLand(w.key, w.record);
    node.writing.clear();
    const { highWaterWallMs } = node.store;
    const actor = replicatingActor(node.store, 0, highWaterWallMs, this.wallMs(node));
    const cluster: ClusterInit = {
      members: this.nodes.map((n) => n.id.toString()),
      selfIndex: node.index,
      replicas: [this.nodes.map((n) => n.index)],
      requiredAck: AckLevel.Store,
      antiEntropyIntervalMs: RECONCILE_INTERVAL_MS,
      maxClockSkewMs: MAX_CLOCK_SKEW_MS,
      pullBytesPerSec: 0,
      // The node's routine rounds paced as by default (one worker holds the whole rate).
      compareKeysPerSec: ANTI_ENTROPY_KEYS_PER_SEC_DEFAULT,
    };
    node.worker = new SimWorker(
      actor,
      new SimClock(() => this.wallMs(node)),
      this.readsOf(this.options.antiEntropy ? node.store : NO_KEYS),
      cluster,
      !wholeProcess,
      this.tuning,
      (member, envelope) => this.send(node, member, envelope),
      (reason) => this.fail(`n${node.index} ${reason}`),
      node.index % 3 !== 0 ? () => this.report.poolPages++ : undefined,
    );
    // The clock is the main thread's: a process restart starts a new one; either way it is seeded
    // from the store's high-water mark, as a node is from each worker's when the worker is ready.
    if (wholeProcess) node.clock = new HybridLogicalClock(MAX_CLOCK_SKEW_MS);
    assert(node.clock.observeWallMs(highWaterWallMs, this.wallMs(node)), 'a stored stamp too far ahead');
  }

  /** The store as anti-entropy reads it, each read counted (settle). */
  private readsOf(store: SimStoreReads): SimStoreReads {
    return {
      page: (fragment, start, end, limit) => {
        this.readsStarted++;
        return store.page(fragment, start, end, limit);
      },
      // Read beside a page, never alone: the page's count covers it.
      fragmentSize: (fragment) => store.fragmentSize(fragment),
    };
  }

  /** Adds a driver's sender counters to the report (once, when it goes). */
  private countSenders(worker: SimWorker): void {
    for (const r of worker.replication.reports()) {
      this.report.resets += r.resets;
      this.report.roundsDone += r.reconcileRounds;
    }
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
   * thread, which tells the new worker which peers are up, and the new worker tells each peer it
   * forgot their sessions.
   */
  private restart(node: SimNode): void {
    this.report.restarts++;
    const wholeProcess = this.chance(0.5);
    if (wholeProcess) {
      for (const c of this.connections)
        if (c.joins(node.index)) this.breakConnection(c, DOWN_MS_MIN + this.below(200));
    }
    this.boot(node, wholeProcess);
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

  /** The main thread tells the worker a peer's connection came up or went down (every node takes FragmentAbsent). */
  private peerState(node: SimNode, peer: number, up: boolean): void {
    node.worker.replication.onPeerState(peer, up, true);
    this.runIfSubmitted(node);
  }

  /**
   * A frame the driver sent: it sends only to peers it was told are up. (Called from the driver's
   * store-read continuations too, where a throw would not reach the run: a broken rule is recorded.)
   */
  private send(from: SimNode, to: number, envelope: Uint8Array): void {
    const c = this.connections.find((x) => x.joins(from.index) && x.joins(to))!;
    if (!c.up) return this.fail(`n${from.index} sent to n${to} over a connection that is down`);
    c.push(from.index, to, envelope, this.nowMs + 1 + this.below(LATENCY_MS_MAX));
  }

  /** Records the first broken rule; the run throws it at the end of this ms. */
  private fail(reason: string): void {
    this.failure ??= reason;
  }

  private deliver(): void {
    for (const c of this.connections) {
      for (const queue of c.queues) {
        while (c.up && queue.length > 0 && queue[0].atMs <= this.nowMs) {
          const { to, from, bytes } = queue.shift()!;
          this.report.messages++;
          this.receive(this.nodes[to], from, bytes);
        }
      }
    }
  }

  /**
   * A frame arrives: the main thread routes it by its fragment and moves the clock past its newest
   * record (src/main/mesh/cluster.ts), then the worker's driver takes it.
   */
  private receive(node: SimNode, peer: number, bytes: Uint8Array): void {
    const peek = peekEnvelope(bytes);
    assert(peek !== undefined && isFragmentMessage(peek.field), 'a frame that is not a fragment message');
    const fields = peekFragment(bytes, peek.start, peek.end, maxWallMsField(peek.field));
    assert(fields?.fragment === 0, 'a frame about a fragment nobody holds');
    if (fields.maxWallMs > 0) {
      assert(
        node.clock.observeWallMs(fields.maxWallMs, this.wallMs(node)),
        'a frame too far ahead of the clock',
      );
    }
    if (peek.field === EnvelopeField.BatchNack) {
      const { error } = decodeEnvelope(bytes).batchNack!;
      assert(error.includes(COMMIT_FAILURE), `n${node.index}: n${peer} refused a batch: ${error}`);
    }
    const worker = node.worker;
    const submittedBefore = worker.submittedTotal;
    worker.replication.onFrame(peer, bytes);
    // A data page's records are the only ops a frame other than a batch makes the driver submit.
    if (peek.field === EnvelopeField.ReconcileData)
      this.report.repaired += worker.submittedTotal - submittedBefore;
    this.runIfSubmitted(node);
  }

  /**
   * Lets what the drivers started on the stores finish. Their reads answer at once, so by the next
   * macrotask every continuation ran, the reads it started in turn included.
   */
  private async settle(): Promise<void> {
    if (this.readsStarted === this.readsSettled) return;
    await macrotask();
    this.readsSettled = this.readsStarted;
    for (const node of this.nodes) this.runIfSubmitted(node);
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
    const actor = node.worker.actor;
    if (!actor.tryDirectWrite(reqId, Priority.Default, Durability.Store, key, record, now)) {
      const op = new FragmentOp(OpKind.Write, reqId, Priority.Default, Durability.Store, key, record);
      actor.step({ kind: 'request', op });
    }
    this.runCore(node);
  }

  /** Each node's actor ticks and runs, its TTL sweep when due, and its driver's timer when due. */
  private tick(): void {
    for (const node of this.nodes) {
      node.worker.actor.step({ kind: 'tick', nowMs: this.wallMs(node) });
      this.runCore(node);
      if ((this.nowMs + node.index * 97) % this.options.sweepIntervalMs === 0) this.sweep(node);
      if (node.worker.clock.fireDue()) this.runIfSubmitted(node);
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
    node.worker.actor.step({ kind: 'sweep', nowMs, entries });
    this.runCore(node);
  }

  private runIfSubmitted(node: SimNode): void {
    if (node.worker.submitted > 0) this.runCore(node);
  }

  /**
   * One turn of a node's actor and all it asks for: the driver takes the writes it applied, then
   * the answers (a batch's fence reply is its acknowledgement) and commits are carried out.
   */
  private runCore(node: SimNode): void {
    const worker = node.worker;
    const actor = worker.actor;
    worker.submitted = 0;
    actor.step({ kind: 'run', nowMs: this.wallMs(node), budget: QUEUE_OPS_MAX_DEFAULT });
    worker.replication.afterRun([actor]);
    const actions: FragmentAction[] = [];
    for (actor.takeActions(actions); actions.length > 0; actor.takeActions(actions)) {
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
            actor.step({ kind: 'commit-failed', generation, message: COMMIT_FAILURE });
            continue;
          }
          node.store.commit(action.puts, action.highWaterWallMs);
          actor.step({ kind: 'committed', generation });
        } else {
          actor.step({ kind: 'synced', generation: action.generation });
        }
      }
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

  // --- the verdict --------------------------------------------------------------------------------

  private check(): void {
    const keys = new Set([...this.newest.keys(), ...this.unsure.keys()]);
    const first = this.nodes[0];
    for (const node of this.nodes) {
      assert(!node.worker.actor.hasUncommitted(), `n${node.index}'s actor still holds uncommitted writes`);
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
      for (const r of node.worker.replication.reports())
        assert(r.buffered === 0 && r.inFlight === 0, `n${node.index} → ${r.peer} still holds ops`);
      this.countSenders(node.worker);
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
