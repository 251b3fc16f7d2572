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

import { randomInt } from 'node:crypto';
import type { Logger } from 'pino';
import { type FragmentCore, FragmentOp, type ReplySink } from '../core/fragment.js';
import { Keyspace } from '../core/keyspace.js';
import { KEY_BYTES_MAX, RECONCILE_PAGE_BYTES_MAX, RECONCILE_PAGE_ITEMS_MAX } from '../core/limits.js';
import { Durability, OpKind, Priority, Reply } from '../core/ops.js';
import { compareVersions, isWellFormedRecord, RECORD_HEADER_BYTES, wallMsOf } from '../core/record.js';
import {
  AckLevel,
  ReplicationSender,
  SENDER_CONFIG_DEFAULTS,
  type SenderAction,
  type SenderReport,
} from '../core/replication-sender.js';
import type { KvStore } from '../native-bindings/kv-store.js';
import type { ClusterInit } from '../threads/messages.js';
import {
  decodeEnvelope,
  type Envelope,
  encodeEnvelope,
  type ReplicatedOpMessage,
} from '../threads/peer-messages.js';

/** What the driver needs from the worker runtime. */
export interface ReplicationHost {
  core(fragment: number): FragmentCore | undefined;
  /** Queues an op the worker issued itself into its fragment's actor (run on the next turn). */
  submit(core: FragmentCore, op: FragmentOp): void;
  /** Sends an encoded envelope to peer `member`. */
  sendFrame(member: number, envelope: Uint8Array): void;
  /** Asks the main thread to close the connection to `member`, which broke the protocol. */
  closePeer(member: number, reason: string): void;
  readonly store: KvStore;
  readonly logger: Logger;
}

const EMPTY = Buffer.alloc(0);
const ACK_DURABILITY: Record<AckLevel, Durability> = {
  [AckLevel.Memory]: Durability.Memory,
  [AckLevel.Store]: Durability.Store,
  [AckLevel.Stable]: Durability.Stable,
};

/** A round this node runs against one peer: which summary page and fetch chunk it waits for. */
interface Round {
  sessionId: number;
  roundId: number;
  pageSeq: number;
  /** Last key of the current page: the next page starts after it. */
  lastKey: Buffer | undefined;
  pageDone: boolean;
  /** Fetch chunk awaited (0 = none). */
  chunkSeq: number;
  nextChunkSeq: number;
}

/** What this node serves one peer's round: the keys it may fetch and the page it may ask next. */
interface Served {
  roundId: number;
  nextPageSeq: number;
  advertised: Set<string>;
}

/** A replicated batch being applied: replies of its ops, then the fence that acknowledges it. */
class BatchApply implements ReplySink {
  failure = '';
  constructor(
    private readonly owner: WorkerReplication,
    private readonly member: number,
    readonly fragment: number,
    readonly sessionId: number,
    readonly batchSeq: number,
    readonly level: AckLevel,
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
  /** Inbound session per (member, fragment), set by SessionStart. */
  private readonly inbound = new Map<string, number>();
  private readonly rounds = new Map<string, Round>();
  private readonly served = new Map<string, Served>();
  private readonly actions: SenderAction[] = [];
  private readonly keyspace: Keyspace;
  private timer: NodeJS.Timeout | undefined;
  private timerAtMs = Number.POSITIVE_INFINITY;
  private readonly ids = { next: (): number => randomInt(1, 2 ** 31) };

  constructor(
    private readonly cluster: ClusterInit,
    fragments: readonly number[],
    fragmentCount: number,
    private readonly host: ReplicationHost,
  ) {
    this.keyspace = new Keyspace(fragmentCount);
    this.up = cluster.members.map(() => false);
    for (const f of fragments) {
      const peers = cluster.replicas[f].filter((m) => m !== cluster.selfIndex);
      if (peers.length === 0) continue;
      this.peersOf.set(f, peers);
      this.senders.set(
        f,
        peers.map((m) => ({
          fragment: f,
          member: m,
          sender: new ReplicationSender(
            {
              ...SENDER_CONFIG_DEFAULTS,
              fragment: f,
              peer: cluster.members[m],
              requiredAck: cluster.requiredAck as AckLevel,
              reconcileIntervalMs: cluster.antiEntropyIntervalMs,
            },
            this.ids,
          ),
        })),
      );
    }
  }

  /** True when fragment `f` has other replicas (its actor keeps writes for the senders). */
  replicates(fragment: number): boolean {
    return this.peersOf.has(fragment);
  }

  close(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** After the actors ran: hands every write they applied to the fragment's senders, then pumps. */
  afterRun(cores: Iterable<FragmentCore>): void {
    const nowMs = Date.now();
    for (const core of cores) {
      const senders = this.senders.get(core.fragment);
      if (senders === undefined) continue;
      const log = core.takeReplicated();
      for (const [key, record] of log) {
        for (const slot of senders) slot.sender.step({ kind: 'enqueue', key, record, nowMs });
      }
      if (log.length > 0) for (const slot of senders) this.pump(slot, nowMs);
    }
    this.schedule(nowMs);
  }

  onPeerState(member: number, up: boolean): void {
    if (this.up[member] === up) return;
    this.up[member] = up;
    const nowMs = Date.now();
    for (const [f, peers] of this.peersOf) {
      const i = peers.indexOf(member);
      if (i === -1) continue;
      const slot = this.senders.get(f)![i];
      if (!up) this.rounds.delete(roundKey(member, f));
      slot.sender.step({ kind: up ? 'connected' : 'disconnected', nowMs });
      this.pump(slot, nowMs);
    }
    if (!up) {
      for (const key of this.served.keys()) if (key.startsWith(`${member}/`)) this.served.delete(key);
      for (const key of this.inbound.keys()) if (key.startsWith(`${member}/`)) this.inbound.delete(key);
    }
    this.schedule(nowMs);
  }

  /** A frame from peer `member` about one of this worker's fragments. */
  onFrame(member: number, bytes: Uint8Array): void {
    let envelope: Envelope;
    try {
      envelope = decodeEnvelope(bytes);
    } catch (err) {
      return this.host.closePeer(member, `malformed frame: ${(err as Error).message}`);
    }
    const nowMs = Date.now();
    if (envelope.sessionStart !== undefined) {
      const { fragment, sessionId } = envelope.sessionStart;
      if (sessionId !== 0 && this.host.core(fragment) !== undefined) {
        this.inbound.set(roundKey(member, fragment), sessionId);
        this.served.delete(roundKey(member, fragment));
      }
    } else if (envelope.replicateBatch !== undefined) {
      this.applyBatch(member, envelope.replicateBatch, nowMs);
    } else if (envelope.batchAck !== undefined) {
      const a = envelope.batchAck;
      const slot = this.senderOf(a.fragment, member);
      if (slot !== undefined && a.level >= AckLevel.Memory && a.level <= AckLevel.Stable) {
        const level = a.level as AckLevel;
        slot.sender.step({ kind: 'ack', sessionId: a.sessionId, batchSeq: a.batchSeq, level, nowMs });
        this.pump(slot, nowMs);
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
        this.pump(slot, nowMs);
      }
    } else if (envelope.reconcileRequest !== undefined) {
      void this.serveSummaries(member, envelope.reconcileRequest);
    } else if (envelope.reconcileFetch !== undefined) {
      this.serveFetch(member, envelope.reconcileFetch);
    } else if (envelope.reconcileResponse !== undefined) {
      this.onSummaries(member, envelope.reconcileResponse, nowMs);
    } else if (envelope.reconcileData !== undefined) {
      this.onData(member, envelope.reconcileData, nowMs);
    }
    this.schedule(nowMs);
  }

  reports(): SenderReport[] {
    const nowMs = Date.now();
    const out: SenderReport[] = [];
    for (const senders of this.senders.values()) for (const s of senders) out.push(s.sender.report(nowMs));
    return out;
  }

  /** Called by a batch's fence reply: acknowledge the level reached, or refuse. */
  finishBatch(member: number, batch: BatchApply): void {
    if (!this.up[member]) return;
    const { fragment, sessionId, batchSeq } = batch;
    if (batch.failure !== '') {
      this.send(member, { batchNack: { fragment, sessionId, batchSeq, error: batch.failure } });
    } else {
      this.send(member, { batchAck: { fragment, sessionId, batchSeq, level: batch.level } });
    }
  }

  // --- sending ---------------------------------------------------------------------------------

  private pump(slot: SenderSlot, nowMs: number): void {
    slot.sender.takeActions(this.actions);
    for (const action of this.actions) this.carryOut(slot, action);
    this.actions.length = 0;
    void nowMs;
  }

  private carryOut(slot: SenderSlot, action: SenderAction): void {
    const { fragment, member } = slot;
    switch (action.kind) {
      case 'session-start':
        this.send(member, { sessionStart: { fragment, sessionId: action.sessionId } });
        return;
      case 'batch': {
        let maxWallMs = 0;
        const ops: ReplicatedOpMessage[] = [];
        for (const [key, record] of action.ops) {
          maxWallMs = Math.max(maxWallMs, wallMsOf(record));
          ops.push({ key, record });
        }
        this.send(member, {
          replicateBatch: {
            fragment,
            sessionId: action.sessionId,
            batchSeq: action.batchSeq,
            requiredAckLevel: action.requiredAck,
            maxWallMs,
            ops,
          },
        });
        return;
      }
      case 'start-round': {
        const round: Round = {
          sessionId: action.sessionId,
          roundId: action.roundId,
          pageSeq: 0,
          lastKey: undefined,
          pageDone: false,
          chunkSeq: 0,
          nextChunkSeq: 1,
        };
        this.rounds.set(roundKey(member, fragment), round);
        this.requestPage(member, fragment, round);
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
    return this.cluster.members[member] ?? `#${member}`;
  }

  /** One timer for the earliest sender deadline. */
  private schedule(nowMs: number): void {
    let at = Number.POSITIVE_INFINITY;
    for (const senders of this.senders.values()) {
      for (const s of senders) at = Math.min(at, s.sender.nextWakeMs(nowMs));
    }
    if (at === Number.POSITIVE_INFINITY || at >= this.timerAtMs) return;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timerAtMs = at;
    this.timer = setTimeout(() => this.tick(), Math.max(0, at - nowMs));
  }

  private tick(): void {
    this.timer = undefined;
    this.timerAtMs = Number.POSITIVE_INFINITY;
    const nowMs = Date.now();
    for (const senders of this.senders.values()) {
      for (const s of senders) {
        s.sender.step({ kind: 'tick', nowMs });
        this.pump(s, nowMs);
      }
    }
    this.schedule(nowMs);
  }

  // --- receiving replicated batches ---------------------------------------------------------------

  private applyBatch(member: number, b: Envelope['replicateBatch'] & object, nowMs: number): void {
    const key = roundKey(member, b.fragment);
    // A batch of a session that is not the current one is stale: ignored, not refused (spec A6).
    if (this.inbound.get(key) !== b.sessionId || b.sessionId === 0) return;
    const core = this.host.core(b.fragment);
    const level = b.requiredAckLevel as AckLevel;
    const refuse = (error: string) =>
      this.send(member, {
        batchNack: { fragment: b.fragment, sessionId: b.sessionId, batchSeq: b.batchSeq, error },
      });
    if (core === undefined) return refuse(`receiver does not host fragment ${b.fragment}`);
    if (!(level >= AckLevel.Memory && level <= AckLevel.Stable))
      return refuse('replication batch omitted a valid ACK requirement');
    const invalid = this.checkOps(b.fragment, b.ops, nowMs);
    if (invalid !== undefined) {
      this.host.logger.warn(
        { peer: this.name(member), fragment: b.fragment, reason: invalid },
        'batch refused',
      );
      return refuse(invalid);
    }
    const batch = new BatchApply(this, member, b.fragment, b.sessionId, b.batchSeq, level);
    for (const op of b.ops) this.submitReplicated(core, op, batch);
    const fence = new FragmentOp(OpKind.Fence, 0, Priority.Default, ACK_DURABILITY[level], EMPTY, EMPTY);
    fence.sink = batch;
    this.host.submit(core, fence);
  }

  /** Checks keys, records and timestamps before anything of a batch or page is applied. */
  private checkOps(fragment: number, ops: readonly ReplicatedOpMessage[], nowMs: number): string | undefined {
    for (const op of ops) {
      if (op.key.length > KEY_BYTES_MAX)
        return `replicated key of ${op.key.length} bytes exceeds ${KEY_BYTES_MAX}`;
      if (this.keyspace.fragmentOf(op.key) !== fragment)
        return `replicated key does not belong to declared fragment ${fragment}`;
      if (!isWellFormedRecord(op.record)) return 'malformed replicated record';
      const wallMs = wallMsOf(op.record);
      if (wallMs > nowMs + this.cluster.maxClockSkewMs)
        return `replicated timestamp ${wallMs} is ${wallMs - nowMs} ms ahead of this node's clock (max skew ${this.cluster.maxClockSkewMs} ms)`;
    }
    return undefined;
  }

  private submitReplicated(core: FragmentCore, op: ReplicatedOpMessage, sink: ReplySink): void {
    const write = new FragmentOp(
      OpKind.Write,
      0,
      Priority.Default,
      Durability.Memory,
      Buffer.from(op.key),
      Buffer.from(op.record),
    );
    write.replicated = true;
    write.sink = sink;
    this.host.submit(core, write);
  }

  // --- anti-entropy: the requesting side ----------------------------------------------------------

  private requestPage(member: number, fragment: number, round: Round): void {
    this.send(member, {
      reconcileRequest: {
        fragment,
        sessionId: round.sessionId,
        roundId: round.roundId,
        pageSeq: round.pageSeq,
        afterKey: round.lastKey ?? EMPTY,
      },
    });
  }

  private onSummaries(member: number, r: Envelope['reconcileResponse'] & object, nowMs: number): void {
    const key = roundKey(member, r.fragment);
    const round = this.rounds.get(key);
    if (round === undefined || round.sessionId !== r.sessionId || round.roundId !== r.roundId) return;
    if (r.pageSeq !== round.pageSeq || round.chunkSeq !== 0) {
      return this.host.closePeer(member, 'unexpected anti-entropy page');
    }
    if (r.summaries.length > RECONCILE_PAGE_ITEMS_MAX) {
      return this.host.closePeer(member, `anti-entropy page of ${r.summaries.length} summaries`);
    }
    this.senderOf(r.fragment, member)!.sender.step({
      kind: 'round-progress',
      sessionId: r.sessionId,
      roundId: r.roundId,
      nowMs,
    });
    const core = this.host.core(r.fragment)!;
    const wanted: Buffer[] = [];
    for (const s of r.summaries) {
      const k = Buffer.from(s.key);
      if (s.stamp.length < RECORD_HEADER_BYTES)
        return this.host.closePeer(member, 'malformed anti-entropy stamp');
      const local = core.current(k);
      if (local === undefined || compareVersions(s.stamp, local) > 0) wanted.push(k);
    }
    round.pageDone = r.done;
    if (r.summaries.length > 0) round.lastKey = Buffer.from(r.summaries[r.summaries.length - 1].key);
    if (wanted.length > 0) {
      round.chunkSeq = round.nextChunkSeq++;
      this.send(member, {
        reconcileFetch: {
          fragment: r.fragment,
          sessionId: round.sessionId,
          roundId: round.roundId,
          chunkSeq: round.chunkSeq,
          keys: wanted,
        },
      });
      return;
    }
    this.nextPage(member, r.fragment, round, nowMs);
  }

  private onData(member: number, d: Envelope['reconcileData'] & object, nowMs: number): void {
    const key = roundKey(member, d.fragment);
    const round = this.rounds.get(key);
    if (round === undefined || round.sessionId !== d.sessionId || round.roundId !== d.roundId) return;
    if (d.chunkSeq !== round.chunkSeq)
      return this.host.closePeer(member, 'unexpected anti-entropy data page');
    const invalid = this.checkOps(d.fragment, d.entries, nowMs);
    if (invalid !== undefined) return this.host.closePeer(member, invalid);
    this.senderOf(d.fragment, member)!.sender.step({
      kind: 'round-progress',
      sessionId: d.sessionId,
      roundId: d.roundId,
      nowMs,
    });
    const core = this.host.core(d.fragment)!;
    for (const entry of d.entries) this.submitReplicated(core, entry, ignoreReplies);
    if (!d.done) return;
    round.chunkSeq = 0;
    this.nextPage(member, d.fragment, round, nowMs);
  }

  private nextPage(member: number, fragment: number, round: Round, nowMs: number): void {
    const slot = this.senderOf(fragment, member)!;
    if (round.pageDone) {
      this.rounds.delete(roundKey(member, fragment));
      slot.sender.step({ kind: 'round-done', sessionId: round.sessionId, roundId: round.roundId, nowMs });
      this.pump(slot, nowMs);
      return;
    }
    round.pageSeq++;
    this.requestPage(member, fragment, round);
  }

  // --- anti-entropy: the serving side -------------------------------------------------------------

  /** One page of (key, version) summaries in key order, from the committed store. */
  private async serveSummaries(member: number, q: Envelope['reconcileRequest'] & object): Promise<void> {
    const key = roundKey(member, q.fragment);
    if (q.sessionId === 0 || q.roundId === 0 || this.inbound.get(key) !== q.sessionId) return;
    if (this.host.core(q.fragment) === undefined) return;
    let served = this.served.get(key);
    if (q.pageSeq === 0) {
      if (q.afterKey.length > 0) return this.host.closePeer(member, 'first anti-entropy page with a cursor');
      served = { roundId: q.roundId, nextPageSeq: 0, advertised: new Set() };
      this.served.set(key, served);
    } else if (served === undefined || served.roundId !== q.roundId || served.nextPageSeq !== q.pageSeq) {
      return this.host.closePeer(member, 'unexpected anti-entropy continuation');
    }
    const start = q.pageSeq === 0 ? undefined : { key: q.afterKey, inclusive: false };
    let entries: Awaited<ReturnType<KvStore['page']>>;
    try {
      entries = await this.host.store.page(q.fragment, start, undefined, RECONCILE_PAGE_ITEMS_MAX);
    } catch (err) {
      this.host.logger.warn(
        { fragment: q.fragment, err: (err as Error).message },
        'anti-entropy page failed',
      );
      return;
    }
    // The session may have changed while the store read.
    if (this.inbound.get(key) !== q.sessionId || this.served.get(key) !== served) return;
    served.nextPageSeq = q.pageSeq + 1;
    served.advertised = new Set(entries.map((e) => e.key.toString('latin1')));
    this.send(member, {
      reconcileResponse: {
        fragment: q.fragment,
        sessionId: q.sessionId,
        roundId: q.roundId,
        pageSeq: q.pageSeq,
        summaries: entries.map((e) => ({
          key: e.key,
          stamp: e.record.subarray(0, RECORD_HEADER_BYTES + e.record[15]),
        })),
        done: entries.length < RECONCILE_PAGE_ITEMS_MAX,
      },
    });
  }

  /** The records of advertised keys, freshest first (pending writes included), in byte-bounded pages. */
  private serveFetch(member: number, f: Envelope['reconcileFetch'] & object): void {
    const key = roundKey(member, f.fragment);
    if (f.sessionId === 0 || this.inbound.get(key) !== f.sessionId) return;
    const served = this.served.get(key);
    const core = this.host.core(f.fragment);
    if (served === undefined || core === undefined || served.roundId !== f.roundId) return;
    if (f.keys.length === 0 || f.keys.length > RECONCILE_PAGE_ITEMS_MAX) {
      return this.host.closePeer(member, `anti-entropy fetch of ${f.keys.length} keys`);
    }
    for (const k of f.keys) {
      if (!served.advertised.delete(Buffer.from(k).toString('latin1'))) {
        return this.host.closePeer(member, 'unadvertised or repeated anti-entropy fetch');
      }
    }
    let page: ReplicatedOpMessage[] = [];
    let pageBytes = 0;
    let pageSeq = 0;
    let maxWallMs = 0;
    const flush = (done: boolean) => {
      this.send(member, {
        reconcileData: {
          fragment: f.fragment,
          sessionId: f.sessionId,
          roundId: f.roundId,
          chunkSeq: f.chunkSeq,
          pageSeq: pageSeq++,
          entries: page,
          done,
          maxWallMs,
        },
      });
      page = [];
      pageBytes = 0;
      maxWallMs = 0;
    };
    for (const k of f.keys) {
      const view = core.current(Buffer.from(k));
      if (view === undefined) continue;
      const record = Buffer.from(view);
      const bytes = k.length + record.length;
      if (page.length > 0 && pageBytes + bytes > RECONCILE_PAGE_BYTES_MAX) flush(false);
      page.push({ key: k, record });
      pageBytes += bytes;
      maxWallMs = Math.max(maxWallMs, wallMsOf(record));
    }
    flush(true);
  }
}

function roundKey(member: number, fragment: number): string {
  return `${member}/${fragment}`;
}
