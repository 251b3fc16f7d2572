// A seeded simulator of one fragment replicated on every node of a small cluster (STYLE.md "Tests"):
// the replication senders, the anti-entropy rounds and their responders, the record merge and the
// hybrid logical clock are the real cores from src/core; the network, the clock and the stores are
// simulated, in one thread, from one seed. What the worker's replication driver does with them
// (src/workers/replication.ts) is done here the same way, message for message.
//
// The faults are the ones a TCP peer mesh has: a connection is FIFO with a random latency, and when
// it breaks every message in flight on it is lost; it comes back later. A node restarts: its
// senders' backlog (whatever its peers had not acknowledged) is gone, while its store survives, as
// at `store` durability. Backlogs are kept small, so that an outage overflows them and anti-entropy
// has to repair what replication dropped. After the faults stop and every connection is back, each
// replica must hold, for every key, the newest write made anywhere — tombstones included.

import { assert } from '../../src/core/assert.js';
import { HybridLogicalClock } from '../../src/core/hlc.js';
import { RECONCILE_PAGE_ITEMS_MAX } from '../../src/core/limits.js';
import {
  checkRecords,
  type DataPage,
  describePage,
  type FetchRequest,
  type PageRequest,
  ReconcileResponder,
  ReconcileRound,
  type RecordCheck,
  type RoundStep,
  type SummaryPage,
  type VersionReader,
} from '../../src/core/reconciler.js';
import {
  ApplyOutcome,
  encodeRecord,
  isTombstone,
  logicalOf,
  mergeOutcome,
  nodeIdOf,
  wallMsOf,
} from '../../src/core/record.js';
import {
  type AckLevel,
  ReplicationSender,
  SENDER_CONFIG_DEFAULTS,
  type SenderAction,
  type SenderConfig,
} from '../../src/core/replication-sender.js';
import { NEXT_PAGE, type PageReader, readSpan } from '../../src/workers/reconcile-span.js';
import { xorshift32 } from '../unit/fixtures/xorshift32.js';

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
  breakChance: number;
  restartChance: number;
}

export const SIM_DEFAULTS: Omit<SimOptions, 'seed'> = {
  nodes: 3,
  hotKeys: 20,
  coldKeys: 5_000,
  faultMs: 8_000,
  settleMs: 12_000,
  writeChance: 0.3,
  breakChance: 0.0004,
  restartChance: 0.0002,
};

/** The senders' timing, shortened so that a simulated minute sees many timeouts and rounds. */
const SENDER_TIMING: Omit<SenderConfig, 'fragment' | 'peer'> = {
  ...SENDER_CONFIG_DEFAULTS,
  batchOpsMax: 8,
  batchBytesMax: 4096,
  batchIntervalMs: 2,
  bufferOpsMax: 48,
  bufferBytesMax: 64 * 1024,
  ackTimeoutMs: 300,
  retryFloorMs: 100,
  reconcileIntervalMs: 1_500,
  reconcileTimeoutMs: 1_000,
};
/** One-way latency of a message on a connection, and how long a broken one stays down. */
const LATENCY_MS_MAX = 15;
const DOWN_MS_MIN = 20;
const DOWN_MS_MAX = 1_500;
/** Nodes' wall clocks differ by up to this much (well inside the receivers' skew limit). */
const CLOCK_SKEW_MS_MAX = 40;
const MAX_CLOCK_SKEW_MS = 300_000;

type Message =
  | { kind: 'session-start'; sessionId: number }
  | { kind: 'session-reset' }
  | { kind: 'batch'; sessionId: number; batchSeq: number; level: AckLevel; ops: Array<[Buffer, Buffer]> }
  | { kind: 'ack'; sessionId: number; batchSeq: number; level: AckLevel }
  | { kind: 'request'; q: PageRequest }
  | { kind: 'summaries'; page: SummaryPage }
  | { kind: 'fetch'; f: FetchRequest }
  | { kind: 'data'; page: DataPage };

/** One node's copy of the fragment: what its store holds, merged by LWW, with its keys in order. */
class SimStore implements VersionReader {
  readonly data = new Map<string, Buffer>();
  private readonly sorted: Buffer[] = [];

  current(key: Buffer): Uint8Array | undefined {
    return this.data.get(key.toString('latin1'));
  }

  merge(key: Uint8Array, record: Uint8Array): void {
    const k = Buffer.from(key).toString('latin1');
    const held = this.data.get(k);
    if (mergeOutcome(held, record, 0) === ApplyOutcome.Superseded) return;
    if (held === undefined) this.sorted.splice(this.firstAtOrAfter(Buffer.from(key)), 0, Buffer.from(key));
    this.data.set(k, Buffer.from(record));
  }

  readonly read: PageReader = async (start, limit) => {
    let at = start === undefined ? 0 : this.firstAtOrAfter(Buffer.from(start.key));
    if (
      start !== undefined &&
      !start.inclusive &&
      at < this.sorted.length &&
      this.sorted[at].equals(start.key)
    )
      at++;
    return this.sorted
      .slice(at, at + limit)
      .map((key) => ({ key, record: this.data.get(key.toString('latin1'))! }));
  };

  private firstAtOrAfter(key: Buffer): number {
    let lo = 0;
    let hi = this.sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (Buffer.compare(this.sorted[mid], key) < 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/** A connection between two nodes: FIFO each way, everything in flight lost when it breaks. */
class Connection {
  up = false;
  upAtMs = 0;
  readonly queues: Array<Array<{ atMs: number; to: number; from: number; message: Message }>> = [[], []];

  constructor(
    readonly low: number,
    readonly high: number,
  ) {}

  queueTo(to: number) {
    return this.queues[to === this.low ? 0 : 1];
  }
}

/** What the driver keeps per node; all of it but the store and the clock is lost in a restart. */
class SimNode {
  readonly store = new SimStore();
  readonly clock = new HybridLogicalClock(MAX_CLOCK_SKEW_MS);
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
  repaired: number;
  /** Keys written, each checked on every replica. */
  keys: number;
}

export function emptyReport(): SimReport {
  return { writes: 0, breaks: 0, restarts: 0, messages: 0, roundsDone: 0, resets: 0, repaired: 0, keys: 0 };
}

export class ReplicationSim {
  private readonly random: () => number;
  private nowMs = 0;
  private readonly nodes: SimNode[] = [];
  private readonly connections: Connection[] = [];
  /** Every write made, the newest per key: what every replica must end with. */
  private readonly newest = new Map<string, Buffer>();
  private readonly ids = { next: (): number => 1 + (this.random() % (2 ** 31 - 1)) };
  private readonly report = emptyReport();

  constructor(private readonly options: SimOptions) {
    this.random = xorshift32(options.seed);
    for (let i = 0; i < options.nodes; i++) {
      const skew = this.below(2 * CLOCK_SKEW_MS_MAX + 1) - CLOCK_SKEW_MS_MAX;
      this.nodes.push(new SimNode(i, Buffer.from(`n${i}`), skew));
    }
    for (let i = 0; i < options.nodes; i++)
      for (let j = i + 1; j < options.nodes; j++) this.connections.push(new Connection(i, j));
    for (const node of this.nodes) this.boot(node);
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

  private connection(a: number, b: number): Connection {
    const low = Math.min(a, b);
    const high = Math.max(a, b);
    return this.connections.find((c) => c.low === low && c.high === high)!;
  }

  /** A node (re)starts: fresh senders, rounds and responders, every peer seen down. */
  private boot(node: SimNode): void {
    for (const sender of node.senders) this.report.resets += sender?.report(this.nowMs).resets ?? 0;
    node.senders = this.nodes.map((peer) =>
      peer === node
        ? undefined
        : new ReplicationSender({ ...SENDER_TIMING, fragment: 0, peer: peer.id.toString() }, this.ids),
    );
    node.rounds = new Map();
    node.responders = new Map();
    node.up = this.nodes.map(() => false);
    node.resetSent = new Set();
    // As a worker seeds its clock from the store: later stamps order after everything it holds.
    for (const record of node.store.data.values())
      node.clock.observe(wallMsOf(record), logicalOf(record), this.wallMs(node));
  }

  private injectFaults(): void {
    for (const c of this.connections) {
      if (c.up && this.chance(this.options.breakChance)) {
        this.report.breaks++;
        this.breakConnection(c, DOWN_MS_MIN + this.below(DOWN_MS_MAX - DOWN_MS_MIN));
      }
    }
    for (const node of this.nodes) {
      if (!this.chance(this.options.restartChance)) continue;
      this.report.restarts++;
      const processRestart = this.chance(0.5);
      // A process restart breaks its connections; a worker restart leaves them to the main thread,
      // and the new worker tells each peer it forgot their sessions.
      if (processRestart) {
        for (const c of this.connections)
          if (c.low === node.index || c.high === node.index)
            this.breakConnection(c, DOWN_MS_MIN + this.below(200));
      }
      this.boot(node);
      node.restarted = true;
      if (!processRestart) {
        for (const c of this.connections) {
          if (!c.up || (c.low !== node.index && c.high !== node.index)) continue;
          this.peerState(node, c.low === node.index ? c.high : c.low, true);
        }
      }
    }
  }

  private breakConnection(c: Connection, downMs: number): void {
    c.upAtMs = Math.max(c.upAtMs, this.nowMs + downMs);
    if (!c.up) return;
    c.up = false;
    c.queues[0].length = 0;
    c.queues[1].length = 0;
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
    const c = this.connection(from.index, to);
    assert(c.up, 'a node sends only over a connection it sees up');
    const queue = c.queueTo(to);
    const last = queue.length > 0 ? queue[queue.length - 1].atMs : 0;
    queue.push({
      atMs: Math.max(last, this.nowMs + 1 + this.below(LATENCY_MS_MAX)),
      to,
      from: from.index,
      message,
    });
  }

  private async deliver(): Promise<void> {
    for (const c of this.connections) {
      for (const queue of c.queues) {
        while (c.up && queue.length > 0 && queue[0].atMs <= this.nowMs) {
          const { to, from, message } = queue.shift()!;
          this.report.messages++;
          await this.receive(this.nodes[to], from, message);
        }
      }
    }
  }

  private write(): void {
    const node = this.nodes[this.below(this.nodes.length)];
    const hot = this.chance(0.5);
    const key = Buffer.from(
      hot ? `h${this.below(this.options.hotKeys)}` : `c${this.below(this.options.coldKeys)}`,
    );
    const tombstone = this.chance(0.2);
    node.clock.tick(this.wallMs(node));
    const { wallMs, logical } = node.clock;
    const value = tombstone ? Buffer.alloc(0) : Buffer.from(`${node.id}@${wallMs}.${logical}`);
    const record = encodeRecord(tombstone, wallMs, logical, 0, node.id, value);
    this.report.writes++;
    const k = key.toString('latin1');
    const held = this.newest.get(k);
    if (held === undefined || newerVersion(record, held)) this.newest.set(k, record);
    node.store.merge(key, record);
    for (let peer = 0; peer < this.nodes.length; peer++) {
      const sender = node.senders[peer];
      if (sender === undefined) continue;
      sender.step({ kind: 'enqueue', key, record, nowMs: this.nowMs });
      this.pump(node, peer);
    }
  }

  private tick(): void {
    for (const node of this.nodes) {
      for (let peer = 0; peer < this.nodes.length; peer++) {
        node.senders[peer]?.step({ kind: 'tick', nowMs: this.nowMs });
        this.pump(node, peer);
      }
    }
  }

  // --- the driver, as src/workers/replication.ts does it --------------------------------------------

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
      case 'batch':
        return this.send(node, peer, {
          kind: 'batch',
          sessionId: action.sessionId,
          batchSeq: action.batchSeq,
          level: action.requiredAck,
          ops: action.ops.map(([k, r]) => [Buffer.from(k), Buffer.from(r)]),
        });
      case 'start-round': {
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

  /** A record from a peer: observed by the clock (as the real receiver's skew check does), then merged. */
  private mergeRemote(node: SimNode, key: Uint8Array, record: Uint8Array): void {
    assert(
      node.clock.observe(wallMsOf(record), logicalOf(record), this.wallMs(node)),
      'a record too far ahead',
    );
    node.store.merge(key, record);
  }

  private async receive(node: SimNode, peer: number, m: Message): Promise<void> {
    const sender = node.senders[peer]!;
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
      case 'batch': {
        if (node.responders.get(peer)?.sessionId !== m.sessionId || m.sessionId === 0) return;
        const ops = m.ops.map(([key, record]) => ({ key, record }));
        const invalid = checkRecords(ops, this.recordCheck(node));
        assert(invalid === undefined, `a replicated batch refused: ${invalid}`);
        for (const op of ops) this.mergeRemote(node, op.key, op.record);
        return this.send(node, peer, {
          kind: 'ack',
          sessionId: m.sessionId,
          batchSeq: m.batchSeq,
          level: m.level,
        });
      }
      case 'ack':
        sender.step({
          kind: 'ack',
          sessionId: m.sessionId,
          batchSeq: m.batchSeq,
          level: m.level,
          nowMs: this.nowMs,
        });
        return this.pump(node, peer);
      case 'request': {
        const responder = this.responderOf(node, peer);
        const serve = responder.onRequest(m.q);
        assert(serve.kind !== 'violation', `responder: ${serve.kind === 'violation' ? serve.reason : ''}`);
        if (serve.kind !== 'read-page') return;
        const span = await readSpan(node.store.read, serve.afterKey, m.q);
        if (node.responders.get(peer) !== responder) return;
        const page = responder.pageRead(m.q, span.entries, span.truncated);
        if (page !== undefined) this.send(node, peer, { kind: 'summaries', page });
        return;
      }
      case 'fetch': {
        const pages = this.responderOf(node, peer).onFetch(m.f, node.store);
        if (!Array.isArray(pages)) {
          assert(pages.kind !== 'violation', `responder: ${pages.kind === 'violation' ? pages.reason : ''}`);
          return;
        }
        for (const page of pages) this.send(node, peer, { kind: 'data', page });
        return;
      }
      case 'summaries': {
        const round = node.rounds.get(peer);
        if (round !== undefined)
          await this.stepRound(node, peer, round, round.onSummaries(m.page, node.store));
        return;
      }
      case 'data': {
        const round = node.rounds.get(peer);
        if (round !== undefined)
          await this.stepRound(node, peer, round, round.onData(m.page, this.recordCheck(node)));
        return;
      }
    }
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
        const afterKey = step.pageSeq === 0 ? undefined : step.afterKey;
        const mine = await readSpan(node.store.read, afterKey, NEXT_PAGE);
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
      case 'fetch':
        sender.step({ kind: 'round-progress', sessionId, roundId, nowMs: this.nowMs });
        return this.send(node, peer, {
          kind: 'fetch',
          f: { sessionId, roundId, chunkSeq: step.chunkSeq, keys: step.keys },
        });
      case 'merge':
        sender.step({ kind: 'round-progress', sessionId, roundId, nowMs: this.nowMs });
        this.report.repaired += step.entries.length;
        for (const e of step.entries) this.mergeRemote(node, e.key, e.record);
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
    for (const node of this.nodes) {
      for (const [key, record] of this.newest) {
        const held = node.store.data.get(key);
        if (held === undefined || !held.equals(record)) {
          throw new Error(
            `node n${node.index} holds ${held === undefined ? 'nothing' : describeVersion(held)} for ${key}, ` +
              `not its newest write ${describeVersion(record)}`,
          );
        }
      }
      assert(node.store.data.size === this.newest.size, `node n${node.index} holds keys nobody wrote`);
      for (const sender of node.senders) {
        const r = sender?.report(this.nowMs);
        if (r === undefined) continue;
        assert(r.buffered === 0 && r.inFlight === 0, `n${node.index} → ${r.peer} still holds ops`);
        this.report.resets += r.resets;
      }
    }
    this.report.keys = this.newest.size;
  }
}

/** The reference LWW order, written out: wall ms, then logical counter, then writer id. */
function newerVersion(a: Buffer, b: Buffer): boolean {
  if (wallMsOf(a) !== wallMsOf(b)) return wallMsOf(a) > wallMsOf(b);
  if (logicalOf(a) !== logicalOf(b)) return logicalOf(a) > logicalOf(b);
  return Buffer.compare(nodeIdOf(a), nodeIdOf(b)) > 0;
}

function describeVersion(r: Buffer): string {
  return `${isTombstone(r) ? 'tombstone' : 'value'} ${wallMsOf(r)}.${logicalOf(r)}/${Buffer.from(nodeIdOf(r))}`;
}
