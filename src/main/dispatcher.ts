// The node's routing core on the main thread: key → slot → fragment → the owning worker's ring. It
// stamps every write once with the node's hybrid logical clock, encodes requests straight into ring
// memory, serves reads of fully committed fragments from an lmdb snapshot on this thread, and owns
// the workers' lifecycle. The embedded API (node.ts) and the RESP server both submit through it;
// results come back to a ResultHandler, so neither pays a closure or a promise per operation.

import { getHeapStatistics } from 'node:v8';
import type { Logger } from 'pino';
import { assert } from '../core/assert.js';
import { copyBytes, writeU32LE } from '../core/bytes.js';
import { internalError, invalidInput, outOfMemory, storageError, type TesseraError } from '../core/errors.js';
import { HybridLogicalClock, sharedClockCell } from '../core/hlc.js';
import { Keyspace } from '../core/keyspace.js';
import { KEY_BYTES_MAX, ringBytesFor, WORKER_HEAP_HEADROOM_MB } from '../core/limits.js';
import { Durability, OpKind, Priority, Reply } from '../core/ops.js';
import {
  expiresAtOf,
  isLive,
  isTombstone,
  logicalOf,
  recordBytes,
  valueBytesOf,
  wallMsOf,
  writeRecordHeader,
} from '../core/record.js';
import { AckLevel } from '../core/replication-sender.js';
import { type BackupReport, backupDataDir } from '../native-bindings/backup.js';
import type { KvStore, StoreLocation } from '../native-bindings/kv-store.js';
import { groupsOfWorker, workerOfFragment } from '../native-bindings/manifest.js';
import { lmdbReaderLocation, openStore } from '../native-bindings/open-store.js';
import { BOARD_MEMORY_UNIT_BYTES, FragmentBoard } from '../threads/fragment-board.js';
import type {
  ClientEndpoint,
  ClusterInit,
  PortCommandStats,
  RelayReply,
  RelayRequest,
  WorkerInit,
  WorkerPortEvent,
  WorkerRespInit,
} from '../threads/messages.js';
import {
  CONTROL_HEADER_BYTES,
  DRAINED_CONTINUOUS,
  DRAINED_TO_REQUEST_BYTES,
  holdRequestBytes,
  MODIFY_PARAMS_BYTES,
  membersRequestBytes,
  poolSpanTaskIdOf,
  RECONCILE_NOW_REQUEST_BYTES,
  REPLICA_WAIT_PARAMS_BYTES,
  RESULT_HEADER_BYTES,
  type ReplicaWaitParams,
  RequestFlag,
  RequestKind,
  ResultKind,
  type RoundReport,
  readRoundReport,
  requestBytes,
  requestFlags,
  requestStampAt,
  resultDetail,
  resultStatus,
  type ScanRequest,
  scanRequestBytes,
  setRequestId,
  writeControlHeader,
  writeDrainedToRequest,
  writeDropRequest,
  writeHoldRequest,
  writeMembersRequest,
  writeModifyParams,
  writeReconcileNowRequest,
  writeReplicaWaitParams,
  writeRequestHeader,
  writeResultHeader,
  writeScanRequest,
} from '../threads/op-codec.js';
import { PortCounters } from '../threads/port-counters.js';
import { decodeWorkerHealth, type WorkerHealthReport } from '../threads/worker-health.js';
import type { NodeConfig } from './config.js';
import { type KeyRouter, NOT_LOCAL, type WriteSpec } from './key-router.js';
import { PulledCounts, type PulledInto } from './pulled-counts.js';
import { GatedWrite, gatedWriteHandler } from './replica-waiter.js';
import { resultError } from './result-error.js';
import { TurnClock } from './turn-clock.js';
import { type ResultHandler, WorkerLink } from './worker-link.js';

/** How the workers' RESP ports listen (`openWorkerPorts`). */
export interface WorkerPortOptions {
  /** Worker i listens on base + i; 0: each on any free port. */
  base: number;
  bind: string;
  /** The host `-MOVED` names. */
  host: string;
  password: string | undefined;
}

/** What the main thread does for the workers' RESP ports (RespServer's relayed commands and sessions). */
export interface WorkerPortRelay {
  /** Runs a command a worker port hands over; resolves with its reply; a session's pushes go to `push`. */
  run(request: RelayRequest, push: (bytes: Uint8Array) => void): Promise<RelayReply>;
  endSession(worker: number, session: number): void;
  endSessionsOf(worker: number): void;
  /** Shows the node's MONITOR clients what a worker port ran. */
  monitor(lines: readonly string[]): void;
}

/** Runs a worker's PoolSpan record in the background pool; resolves with the PoolSpanResult record. */
export type PoolSpanRunner = (request: Uint8Array) => Promise<Uint8Array>;

/** Where operations of a fragment go: its worker here, a peer, or nowhere reachable. */
export interface OpLink {
  readonly buffer: Buffer;
  readonly reqId: number;
  canAccept(): boolean;
  refusal(): TesseraError;
  begin<T>(handler: ResultHandler<T>, token: T, bytes: number): number;
  end(): void;
}

/** Routing by placement, when the node is part of a cluster (src/main/mesh/cluster.ts). */
export interface ClusterRouter {
  /** The link of the fragment's first serving replica; undefined when that is this node. */
  routeOf(fragment: number): OpLink | undefined;
  /** True when this node is one of the fragment's replicas. */
  holds(fragment: number): boolean;
  /** What the workers need to know of the cluster. */
  workerInit(): ClusterInit;
  onPeerFrame(member: number, buf: Buffer, start: number, end: number): void;
  onPeerClose(member: number, reason: string): void;
  /** A worker (re)started and serves `fragments` (those it owns). */
  onWorkerServing(link: WorkerLink, fragments: readonly number[]): void;
  /** Grows each time some fragment's serving replica, as routing picks it, changes. */
  readonly servingStamp: number;
  /** The `servingStamp` the fragment's serving replica last changed at (0: never). */
  servingChangedAt(fragment: number): number;
  /** Per fragment, the member serving it as the workers' RESP ports route by (FailoverCatchUp.published). */
  readonly servingTable: SharedArrayBuffer;
  /** Where each member serves clients (its main RESP port): where a worker port sends another member's keys. */
  clientEndpoints(): ClientEndpoint[];
  readonly selfIndex: number;
}

const WORKER_ENTRY = new URL('../workers/worker-main.js', import.meta.url);
const EMPTY = Buffer.alloc(0);

export class Dispatcher implements KeyRouter {
  readonly keyspace: Keyspace;
  readonly links: WorkerLink[] = [];
  private readonly nodeIdBytes: Buffer;
  private readonly clock: HybridLogicalClock;
  /** Link index per fragment. */
  private readonly linkOfFragment: Uint16Array;
  /** Fragment state the workers publish for snapshot reads. */
  private readonly board: FragmentBoard;
  /** This thread's read-only use of the store, when the store allows a second reader (lmdb). */
  private snapshot: KvStore | undefined;
  /** Commit epoch the snapshot was last renewed at. */
  private snapshotEpoch = -1;
  private cluster: ClusterRouter | undefined;
  /** The wall clock of stamps and expiry checks on request paths. */
  readonly turnClock = new TurnClock();
  /** Reads this thread answered from its lmdb snapshot, without a worker (`readLocal`). */
  snapshotReads = 0;
  /**
   * Per fragment, 1 while this node's worker holds it: every fragment at start, then as
   * `holdFragment` and `dropFragment` change it. What a restarted worker opens.
   */
  private readonly kept: Uint8Array;
  /**
   * Per fragment, 1 while its worker has confirmed it holds it: only then may this thread read it
   * from its snapshot. Cleared before a drop is sent, so a dropped copy is never read here.
   */
  private readonly heldHere: Uint8Array;
  /** Per fragment, the replica list `holdFragment` set last; undefined: the placement the node started with. */
  private readonly heldReplicas: (number[] | undefined)[];
  /**
   * Per fragment, members its worker replicates with for now beside `heldReplicas` (`beginPull`),
   * each with the number of pulls that asked for it.
   */
  private readonly pullSources: (Map<number, number> | undefined)[];
  /** The result a fence of a fragment not held here is answered with at once. */
  private readonly fenceReached = Buffer.alloc(RESULT_HEADER_BYTES);
  /** Who hears how anti-entropy rounds end (`watchRounds`). */
  private readonly roundWatchers = new Set<(report: RoundReport) => void>();
  /** What anti-entropy rounds pulled into each fragment held here (`pulledInto`). */
  private readonly pulled = new PulledCounts();
  /** The fragment of the last write submitted: what a connection tracks for WAIT, without hashing the key again. */
  lastWriteFragment = 0;
  /** Fragments a worker found a copy of on disk when it started (`WorkerEvent` ready). */
  readonly storedAtStart = new Set<number>();
  /** What the workers' RESP ports count, for INFO (kept after they close: the counts run from the start). */
  portCounters: PortCounters | undefined;
  /** The workers' RESP ports while they are open (`openWorkerPorts`). */
  private workerPorts: { template: WorkerRespInit; ports: number[]; relay: WorkerPortRelay } | undefined;
  /** Per worker, who waits for its answer to a port command. */
  private readonly portWaiters: (((event: WorkerPortEvent) => void) | undefined)[] = [];
  /** Int32: the node's MONITOR clients, which the worker ports read (WorkerRespInit.monitors). */
  private readonly monitorCount = new Int32Array(new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT));
  /** Each worker port's command figures as it last published them (INFO adds them up). */
  private readonly portStats: (PortCommandStats | undefined)[] = [];

  constructor(
    private readonly config: NodeConfig,
    nodeId: string,
    private readonly logger: Logger,
    /** The store's group count (manifest.ts): which worker owns which fragment, and the envs to open. */
    readonly groupCount: number,
  ) {
    this.nodeIdBytes = Buffer.from(nodeId);
    this.keyspace = new Keyspace(config.fragments);
    this.clock = new HybridLogicalClock(config.maxClockSkewMs);
    this.linkOfFragment = new Uint16Array(config.fragments);
    this.kept = new Uint8Array(config.fragments).fill(1);
    this.heldHere = new Uint8Array(config.fragments).fill(1);
    this.heldReplicas = new Array<number[] | undefined>(config.fragments).fill(undefined);
    this.pullSources = new Array<Map<number, number> | undefined>(config.fragments).fill(undefined);
    this.board = FragmentBoard.create(config.fragments, config.workers);
    const ringBytes = ringBytesFor(config.valueBytesMax);
    const oldGenerationMb = workerOldGenerationMb(config);
    for (const [worker, fragments] of assignFragments(config, groupCount)) {
      const linkIndex = this.links.length;
      for (const f of fragments) this.linkOfFragment[f] = linkIndex;
      const location: StoreLocation = {
        kind: config.store,
        dataDir: config.dataDir,
        fragmentCount: config.fragments,
        groups: groupsOfWorker(worker, groupCount, config.workers),
        groupCount,
        dropTombstones: config.store === 'memory' && config.cluster === undefined,
        eviction: config.maxMemoryPolicy === 'noeviction' ? undefined : config.maxMemoryPolicy,
        walSegmentBytes: config.walSegmentBytes,
      };
      this.links.push(
        new WorkerLink(linkIndex, {
          ringBytes,
          oldGenerationMb,
          entry: WORKER_ENTRY,
          logger,
          makeInit: (index, requestRing, resultRing, restarted) =>
            this.workerInit(index, requestRing, resultRing, location, fragments, restarted),
          onReady: (index, highWaterWallMs, stored) => {
            for (const f of stored) this.storedAtStart.add(f);
            return this.observeStored(index, highWaterWallMs);
          },
          onPeerFrame: (member, buf, start, end) => this.cluster?.onPeerFrame(member, buf, start, end),
          onPeerClose: (member, reason) => this.cluster?.onPeerClose(member, reason),
          onServing: (index) => {
            // A worker that (re)started has no clients yet: the sessions of those it had end.
            this.workerPorts?.relay.endSessionsOf(index);
            this.cluster?.onWorkerServing(this.links[index], fragments);
          },
          onPoolSpan: (index, buf, at, recordBytes) =>
            this.runPoolSpan(this.links[index], buf, at, recordBytes),
          onRoundReport: (buf, at, length) => this.onRoundReport(buf, at, length),
          onPortEvent: (index, event) => this.onPortEvent(index, event),
        }),
      );
    }
  }

  /** Starts every worker, then (lmdb) the main thread's snapshot; on failure stops what started. */
  async start(): Promise<void> {
    const started = await Promise.allSettled(this.links.map((link) => link.start()));
    const failure = started.find((r) => r.status === 'rejected');
    try {
      if (failure !== undefined) throw failure.reason;
      await this.openSnapshot();
    } catch (err) {
      await Promise.allSettled(this.links.map((link) => link.close()));
      throw err;
    }
  }

  /** Closes the workers (each closes its store) and the snapshot. */
  async close(): Promise<void> {
    const snapshot = this.snapshot;
    this.snapshot = undefined;
    const closed = await Promise.allSettled(this.links.map((link) => link.close()));
    await snapshot?.close();
    const failure = closed.find((r) => r.status === 'rejected');
    if (failure !== undefined) throw failure.reason;
  }

  /** Resolves once no request is in flight to any worker. */
  async whenIdle(): Promise<void> {
    await Promise.all(this.links.map((link) => link.whenIdle()));
  }

  fragmentOf(key: Uint8Array): number {
    return this.keyspace.fragmentOf(key);
  }

  /** Reads anti-entropy spans in the background pool (set by the node, which owns the pool). */
  poolSpanRunner: PoolSpanRunner | undefined;

  /** Joins a cluster: operations route by placement from now on. Call before `start`. */
  attachCluster(cluster: ClusterRouter): void {
    this.cluster = cluster;
  }

  /** The worker here that owns `fragment` (whether or not this node serves it now). */
  workerLinkOf(fragment: number): WorkerLink {
    return this.links[this.linkOfFragment[fragment]];
  }

  /** Where operations on `fragment` go now: this node's worker or the first serving replica. */
  linkOf(fragment: number): OpLink {
    return this.cluster?.routeOf(fragment) ?? this.links[this.linkOfFragment[fragment]];
  }

  /** Grows each time some fragment's serving replica changes (always 0 outside a cluster). */
  get servingStamp(): number {
    return this.cluster?.servingStamp ?? 0;
  }

  /** The `servingStamp` the fragment's serving replica last changed at (0: never). */
  servingChangedAt(fragment: number): number {
    return this.cluster?.servingChangedAt(fragment) ?? 0;
  }

  /** True when this node holds a copy of `fragment` (always, outside a cluster, unless dropped). */
  holds(fragment: number): boolean {
    return this.heldHere[fragment] === 1 && (this.cluster === undefined || this.cluster.holds(fragment));
  }

  /** True when this node serves `fragment` itself (always, outside a cluster). */
  servesHere(fragment: number): boolean {
    return this.cluster === undefined || this.cluster.routeOf(fragment) === undefined;
  }

  /**
   * Sends an encoded request (from a peer, or one being retried) to this node's worker for its
   * fragment; the request's id is replaced with the link's own.
   */
  submitEncoded<T>(
    fragment: number,
    request: Uint8Array,
    handler: ResultHandler<T>,
    token: T,
  ): TesseraError | undefined {
    const link = this.workerLinkOf(fragment);
    if (!link.canAccept()) return link.refusal();
    const at = link.begin(handler, token, request.length);
    copyBytes(link.buffer, at, request);
    setRequestId(link.buffer, at, link.reqId);
    link.end();
    return undefined;
  }

  /**
   * Runs an operation another node forwarded here, the serving replica of its fragment. The stamp of
   * a write is observed, so what this node stamps later orders after it. A modification is stamped
   * again, by this node: the serving replica sequences a key's read-modify-writes, and a stamp from
   * a node whose clock runs behind would lose to the modification applied before it (Superseded)
   * although it came after it — Redis users expect INCR from any node to count.
   */
  submitForwarded<T>(
    fragment: number,
    request: Buffer,
    handler: ResultHandler<T>,
    token: T,
  ): TesseraError | undefined {
    const stampAt = requestStampAt(request);
    if (stampAt === -1) return this.submitEncoded(fragment, request, handler, token);
    const stamp = request.subarray(stampAt);
    const wallMs = wallMsOf(stamp);
    const nowMs = this.turnClock.nowMs();
    if (!this.clock.observe(wallMs, logicalOf(stamp), nowMs)) {
      return invalidInput(
        `forwarded timestamp ${wallMs} is more than maxClockSkewMs=${this.config.maxClockSkewMs} ahead of this node's clock`,
      );
    }
    if (request[0] !== OpKind.Modify) return this.submitEncoded(fragment, request, handler, token);
    const link = this.workerLinkOf(fragment);
    if (!link.canAccept()) return link.refusal();
    this.clock.tick(nowMs);
    const value = valueBytesOf(stamp);
    const at = link.begin(handler, token, stampAt + recordBytes(this.nodeIdBytes.length, value.length));
    const buf = link.buffer;
    request.copy(buf, at, 0, stampAt);
    setRequestId(buf, at, link.reqId);
    const p = writeRecordHeader(
      buf,
      at + stampAt,
      isTombstone(stamp),
      this.clock.wallMs,
      this.clock.logical,
      expiresAtOf(stamp),
      this.nodeIdBytes,
    );
    copyBytes(buf, p, value);
    link.end();
    return undefined;
  }

  /**
   * Stamps and sends a write or modification; the result reaches `handler`. Returns an error instead
   * when the owning worker cannot take it (gone, or too far behind). The caller has checked the
   * key and value sizes.
   */
  submitWrite<T>(spec: WriteSpec, handler: ResultHandler<T>, token: T): TesseraError | undefined {
    if (spec.replicaAcks === 0 || this.cluster === undefined)
      return this.encodeWrite(spec, handler, token, undefined);
    // Answered only once `spec.replicaAcks` other replicas acknowledged it: the write carries its
    // wait to its serving replica, which answers once both are in.
    const gate = new GatedWrite(this, handler, token, {
      replicas: spec.replicaAcks,
      level: this.replicationAck,
      priority: spec.priority,
      timeoutMs: this.config.replicaAckTimeoutMs,
    });
    const error = this.encodeWrite(spec, gatedWriteHandler, gate, gate.params);
    gate.fragment = this.lastWriteFragment;
    return error;
  }

  /** Encodes a write (waiting for its replicas when `wait` is given) into its fragment's link. */
  private encodeWrite<T>(
    spec: WriteSpec,
    handler: ResultHandler<T>,
    token: T,
    wait: ReplicaWaitParams | undefined,
  ): TesseraError | undefined {
    assert(spec.key.length <= KEY_BYTES_MAX, 'key longer than KEY_BYTES_MAX reached the dispatcher');
    const valueBytes = spec.value?.length ?? 0;
    assert(valueBytes <= this.config.valueBytesMax, 'value larger than valueBytesMax reached the dispatcher');
    const fragment = this.keyspace.fragmentOf(spec.key);
    this.lastWriteFragment = fragment;
    const link = this.linkOf(fragment);
    if (!link.canAccept()) return link.refusal();
    this.clock.tick(this.turnClock.nowMs());
    const modify = spec.kind === OpKind.Modify;
    const paramBytes = modify ? MODIFY_PARAMS_BYTES + (spec.operand?.length ?? 0) : 0;
    const waitBytes = wait === undefined ? 0 : REPLICA_WAIT_PARAMS_BYTES;
    const bytes = requestBytes(
      spec.key.length,
      waitBytes + paramBytes + recordBytes(this.nodeIdBytes.length, valueBytes),
    );
    const at = link.begin(handler, token, bytes);
    const buf = link.buffer;
    const flags =
      requestFlags(spec.priority, spec.durability) |
      (spec.wantsPrior ? RequestFlag.WantsPrior : 0) |
      (wait === undefined ? 0 : RequestFlag.ReplicaWait);
    let p = writeRequestHeader(buf, at, spec.kind, flags, fragment, link.reqId, spec.key);
    if (wait !== undefined) p = writeReplicaWaitParams(buf, p, wait);
    if (modify) p = writeModifyParams(buf, p, spec.modifier, spec.flags, spec.arg, spec.operand);
    const tombstone = !modify && spec.value === undefined;
    p = writeRecordHeader(
      buf,
      p,
      tombstone,
      this.clock.wallMs,
      this.clock.logical,
      spec.expiresAtMs,
      this.nodeIdBytes,
    );
    if (valueBytes > 0) copyBytes(buf, p, spec.value!);
    link.end();
    return undefined;
  }

  /**
   * The key's live record straight from this thread's lmdb snapshot — a view valid until the next
   * read — or undefined when absent; NOT_LOCAL when the fragment holds writes not yet committed (or
   * the store has no shared readers), so the read must go through the worker.
   * (src/threads/fragment-board.ts says why this is safe.)
   */
  readLocal(fragment: number, key: Uint8Array, replica = false): Uint8Array | undefined | typeof NOT_LOCAL {
    const snapshot = this.snapshot;
    if (snapshot === undefined || this.heldHere[fragment] === 0 || !this.board.isClean(fragment))
      return NOT_LOCAL;
    if (!(replica && this.holds(fragment)) && !this.servesHere(fragment)) return NOT_LOCAL;
    const epoch = this.board.epoch();
    if (epoch !== this.snapshotEpoch) {
      snapshot.refreshReads();
      this.snapshotEpoch = epoch;
    }
    this.snapshotReads++;
    const record = snapshot.get(fragment, key);
    return record !== undefined && isLive(record, this.turnClock.nowMs()) ? record : undefined;
  }

  /**
   * Sends a read to the fragment's serving replica; `headerOnly` skips the value (TTL queries);
   * `replica` reads this node's copy when it holds one (READONLY), even if another replica serves.
   */
  submitRead<T>(
    fragment: number,
    key: Uint8Array,
    priority: Priority,
    headerOnly: boolean,
    handler: ResultHandler<T>,
    token: T,
    replica = false,
  ): TesseraError | undefined {
    const link = replica && this.holds(fragment) ? this.workerLinkOf(fragment) : this.linkOf(fragment);
    if (!link.canAccept()) return link.refusal();
    const at = link.begin(handler, token, requestBytes(key.length, 0));
    const flags = requestFlags(priority, Durability.Memory) | (headerOnly ? RequestFlag.HeaderOnly : 0);
    writeRequestHeader(link.buffer, at, OpKind.Read, flags, fragment, link.reqId, key);
    link.end();
    return undefined;
  }

  /**
   * Asks the fragment's serving replica (`here`: this node's worker) to answer once everything
   * admitted before has reached `durability`; `forScan`: a scan's fence, answered at once while the
   * store keeps failing (the scan then reads the writes it could not take laid over it).
   */
  submitFence<T>(
    fragment: number,
    durability: Durability,
    priority: Priority,
    handler: ResultHandler<T>,
    token: T,
    { here = false, forScan = false }: { here?: boolean; forScan?: boolean } = {},
  ): TesseraError | undefined {
    // A fragment dropped here has nothing to fence in this node's workers (close fences them all).
    if (here && this.kept[fragment] === 0) {
      writeResultHeader(this.fenceReached, 0, Reply.FenceReached, 0, 0);
      handler.onResult(token, this.fenceReached, 0, RESULT_HEADER_BYTES);
      return undefined;
    }
    const link = here ? this.workerLinkOf(fragment) : this.linkOf(fragment);
    if (!link.canAccept()) return link.refusal();
    const at = link.begin(handler, token, requestBytes(0, 0));
    writeRequestHeader(
      link.buffer,
      at,
      OpKind.Fence,
      requestFlags(priority, durability) | (forScan ? RequestFlag.ForScan : 0),
      fragment,
      link.reqId,
      EMPTY,
    );
    link.end();
    return undefined;
  }

  /**
   * Asks the fragment's serving replica to answer once everything admitted before has reached
   * `durability` there and `params.replicas` other replicas acknowledged it at `params.level`, or
   * after `params.timeoutMs`: FenceReached, its detail byte the replicas reached.
   */
  submitReplicaWait<T>(
    fragment: number,
    params: ReplicaWaitParams,
    durability: Durability,
    priority: Priority,
    handler: ResultHandler<T>,
    token: T,
  ): TesseraError | undefined {
    const link = this.linkOf(fragment);
    if (!link.canAccept()) return link.refusal();
    const at = link.begin(handler, token, requestBytes(0, REPLICA_WAIT_PARAMS_BYTES));
    const flags = requestFlags(priority, durability) | RequestFlag.ReplicaWait;
    const p = writeRequestHeader(link.buffer, at, OpKind.Fence, flags, fragment, link.reqId, EMPTY);
    writeReplicaWaitParams(link.buffer, p, params);
    link.end();
    return undefined;
  }

  /** The level replicas acknowledge at (`--replication-ack`); Store outside a cluster. */
  get replicationAck(): AckLevel {
    return this.config.cluster?.requiredAck ?? AckLevel.Store;
  }

  /** Other replicas each fragment has (`--replicas` − 1); 0 outside a cluster. */
  get otherReplicas(): number {
    const cluster = this.config.cluster;
    return cluster === undefined ? 0 : Math.max(0, Math.min(cluster.replicas, cluster.members.length) - 1);
  }

  /** Sends one scan page request to the fragment's worker. */
  submitScan<T>(
    request: ScanRequest,
    priority: Priority,
    handler: ResultHandler<T>,
    token: T,
  ): TesseraError | undefined {
    const link = this.linkOf(request.fragment);
    if (!link.canAccept()) return link.refusal();
    const at = link.begin(handler, token, scanRequestBytes(request));
    writeScanRequest(link.buffer, at, link.reqId, priority, request);
    link.end();
    return undefined;
  }

  get maxClockSkewMs(): number {
    return this.config.maxClockSkewMs;
  }

  /** Bytes of memory the workers' stores hold, as each published at its last commit (0 on disk). */
  memoryBytes(): number {
    return this.board.memoryBytes();
  }

  /**
   * The OutOfMemory error a write that adds data gets while the memory store holds more than
   * `maxMemoryBytes`; undefined while it may. Writes that only remove (DEL, expiry) are never refused.
   */
  memoryRefusal(): TesseraError | undefined {
    return this.memoryFull() ? outOfMemory(this.board.memoryBytes(), this.config.maxMemoryBytes) : undefined;
  }

  /** True while the memory store holds more than `maxMemoryBytes` (never without a bound). */
  memoryFull(): boolean {
    const max = this.config.maxMemoryBytes;
    return max !== 0 && this.board.memoryBytes() > max;
  }

  /**
   * A worker's PoolSpan request: run it in the pool and answer the same worker. The record goes to
   * the pool as the worker wrote it, and the pool's answer comes back as the worker reads it: this
   * thread copies both and decodes neither.
   */
  private runPoolSpan(link: WorkerLink, buf: Buffer, at: number, recordBytes: number): void {
    const taskId = poolSpanTaskIdOf(buf, at);
    const runner = this.poolSpanRunner;
    if (runner === undefined) return link.sendPoolSpanFailed(taskId);
    const request = Buffer.allocUnsafeSlow(recordBytes);
    buf.copy(request, 0, at, at + recordBytes);
    // A worker that restarted meanwhile does not know the task id and ignores the answer.
    runner(request).then(
      (record) => link.sendPoolSpanRecord(record),
      () => link.sendPoolSpanFailed(taskId),
    );
  }

  /** Observes the newest wall ms of a peer's frame; false when it is too far ahead of this node's clock. */
  observeRemote(wallMs: number): boolean {
    return this.clock.observeWallMs(wallMs, this.turnClock.nowMs());
  }

  /** Asks a worker for its fragments' state (undefined when it is not running). */
  workerHealth(link: WorkerLink): Promise<WorkerHealthReport | undefined> {
    if (link.state !== 'ready') return Promise.resolve(undefined);
    return new Promise((resolve, reject) => {
      const at = link.begin(healthHandler, { resolve, reject }, CONTROL_HEADER_BYTES);
      writeControlHeader(link.buffer, at, RequestKind.Health, link.reqId);
      link.end();
    });
  }

  /**
   * Resolves true once every replication sender of the worker has its backlog acknowledged, false
   * when `timeoutMs` passes first or the worker is not running.
   */
  replicationDrained(link: WorkerLink, timeoutMs: number): Promise<boolean> {
    if (link.state !== 'ready') return Promise.resolve(false);
    return new Promise((resolve) => {
      const at = link.begin(drainedHandler, resolve, CONTROL_HEADER_BYTES + 4);
      writeU32LE(
        link.buffer,
        writeControlHeader(link.buffer, at, RequestKind.DrainReplication, link.reqId),
        timeoutMs,
      );
      link.end();
    });
  }

  // --- runtime placement: the primitives a placement driver calls ------------------------------

  /**
   * Has this node's worker for `fragment` hold it: opened if it was not (empty, or with what its
   * store kept), with `replicas` (member indices, this node's included) as the members its writes
   * replicate to — a sender toward each other one, and only those; a new sender's session starts
   * with an anti-entropy round that pulls what that peer holds. Idempotent. Outside a cluster the
   * replica list is not used.
   */
  async holdFragment(fragment: number, replicas: readonly number[]): Promise<void> {
    this.checkFragment(fragment);
    const link = this.workerLinkOf(fragment);
    if (!link.canAccept()) throw link.refusal();
    this.kept[fragment] = 1;
    this.heldReplicas[fragment] = [...replicas];
    const sources = this.pullSources[fragment];
    const members = sources === undefined ? replicas : [...new Set([...replicas, ...sources.keys()])];
    await new Promise<void>((resolve, reject) => {
      const at = link.begin(appliedHandler, { resolve, reject }, holdRequestBytes(members));
      writeHoldRequest(link.buffer, at, link.reqId, fragment, members);
      link.end();
    });
    // A drop sent meanwhile wins: it cleared `kept` after this hold was sent.
    if (this.kept[fragment] === 1) this.heldHere[fragment] = 1;
  }

  /**
   * Has this node's worker stop serving `fragment` and remove its data: its senders close (their
   * backlog dropped: drain them first with `drainedTo`), operations still queued for it run out,
   * later ones are refused. This thread stops reading it from its snapshot before the drop is sent.
   */
  async dropFragment(fragment: number): Promise<void> {
    this.checkFragment(fragment);
    const link = this.workerLinkOf(fragment);
    this.heldHere[fragment] = 0;
    this.kept[fragment] = 0;
    this.pullSources[fragment] = undefined;
    this.pulled.forget(fragment);
    if (!link.canAccept()) throw link.refusal();
    return new Promise((resolve, reject) => {
      const at = link.begin(appliedHandler, { resolve, reject }, CONTROL_HEADER_BYTES);
      writeDropRequest(link.buffer, at, link.reqId, fragment);
      link.end();
    });
  }

  /**
   * Has `fragment`'s worker also replicate with `member` (a sender toward it, so a round can pull
   * its copy: `reconcileNow`), beside the replicas `holdFragment` set, until `endPull`. False when
   * this node does not hold the fragment.
   */
  async beginPull(fragment: number, member: number): Promise<boolean> {
    this.checkFragment(fragment);
    if (this.kept[fragment] !== 1) return false;
    let sources = this.pullSources[fragment];
    if (sources === undefined) {
      sources = new Map();
      this.pullSources[fragment] = sources;
    }
    sources.set(member, (sources.get(member) ?? 0) + 1);
    await this.holdFragment(fragment, this.replicasHeld(fragment));
    return true;
  }

  /**
   * True from `holdFragment` until `dropFragment`: the fragment's worker keeps (or is opening) a
   * copy of it. What the worker reports of a copy dropped since comes before the drop's answer.
   */
  keeps(fragment: number): boolean {
    return this.kept[fragment] === 1;
  }

  /** Ends a `beginPull`: the worker replicates with `member` no more, unless another pull wants it. */
  async endPull(fragment: number, member: number): Promise<void> {
    const sources = this.pullSources[fragment];
    const pulls = sources?.get(member);
    if (sources === undefined || pulls === undefined) return;
    if (pulls > 1) return void sources.set(member, pulls - 1);
    sources.delete(member);
    if (sources.size === 0) this.pullSources[fragment] = undefined;
    if (this.kept[fragment] === 1) await this.holdFragment(fragment, this.replicasHeld(fragment));
  }

  /** The replica list the fragment's worker holds it with: `holdFragment`'s, else the one it started with. */
  private replicasHeld(fragment: number): number[] {
    return this.heldReplicas[fragment] ?? this.cluster?.workerInit().replicas[fragment] ?? [];
  }

  /**
   * Resolves once what the fragment's serving replica (`here`: this node's worker, at once when it
   * does not hold the fragment) took before has reached `durability`. A fence runs in its
   * priority's queue: at `Priority.High` (the default) it passes operations still queued at lower
   * priorities; at `Priority.Background` it runs after everything queued before it.
   */
  fenced(
    fragment: number,
    durability: Durability,
    here = false,
    priority: Priority = Priority.High,
  ): Promise<void> {
    return new Promise((resolve, reject) => {
      const token = { resolve, reject };
      const error = this.submitFence(fragment, durability, priority, fenceReachedHandler, token, {
        here,
      });
      if (error !== undefined) reject(error);
    });
  }

  /**
   * Starts an anti-entropy round of `fragment`'s sender toward `member` now; resolves with the
   * outcome of the first round that starts after the call (a round running already may have missed
   * what was written just before), failed when none starts within `timeoutMs` (once one runs, it
   * answers when it ends: the sender abandons a round that stops progressing). `verify`: the round
   * verifies a gained copy — it starts once `member` replicates the fragment here and compares
   * everything (src/workers/replication.ts). `urgent`: clients' requests wait for it (a catch-up
   * before serving), so both nodes read its pages in their workers rather than their background
   * pools, whose threads yield the cores to serving. Rejects when this node has no such sender.
   */
  async reconcileNow(
    fragment: number,
    member: number,
    timeoutMs: number,
    verify = false,
    urgent = false,
  ): Promise<RoundReport> {
    this.checkFragment(fragment);
    const link = this.workerLinkOf(fragment);
    if (!link.canAccept()) throw link.refusal();
    return new Promise((resolve, reject) => {
      const at = link.begin(roundHandler, { resolve, reject }, RECONCILE_NOW_REQUEST_BYTES);
      const limitMs = checkTimeoutMs(timeoutMs);
      writeReconcileNowRequest(link.buffer, at, link.reqId, fragment, member, limitMs, verify, urgent);
      link.end();
    });
  }

  /**
   * Resolves true once `fragment`'s sender toward `member` has no write that peer has not
   * acknowledged — at `level` (0: the level the senders ask for; a higher one is asked for on
   * demand) —
   * false when `timeoutMs` passes first or the sender closes. Rejects when there is no such sender.
   */
  async drainedTo(
    fragment: number,
    member: number,
    timeoutMs: number,
    level: AckLevel | 0 = 0,
  ): Promise<boolean> {
    return (await this.drainedUnder(fragment, member, timeoutMs, 0, level)).drained;
  }

  /**
   * `drainedTo`, also telling whether the sender's continuity was still `continuity` when it
   * answered (src/core/replication-sender.ts): a copy verified under it then holds every write.
   */
  async drainedUnder(
    fragment: number,
    member: number,
    timeoutMs: number,
    continuity: number,
    level: AckLevel | 0 = 0,
  ): Promise<Drained> {
    this.checkFragment(fragment);
    const link = this.workerLinkOf(fragment);
    if (!link.canAccept()) throw link.refusal();
    return new Promise((resolve, reject) => {
      const at = link.begin(drainedToHandler, { resolve, reject }, DRAINED_TO_REQUEST_BYTES);
      const limitMs = checkTimeoutMs(timeoutMs);
      writeDrainedToRequest(link.buffer, at, link.reqId, fragment, member, level, limitMs, continuity);
      link.end();
    });
  }

  /**
   * Member slot `index` was appended for `nodeId` (src/main/mesh/cluster.ts addMember): every
   * worker learns it, so a replica list may name it and its connection's state reaches them.
   * Failures are logged: a worker that restarts learns the members from its startup message.
   */
  async memberAdded(index: number, nodeId: string): Promise<void> {
    const added = this.links.map((link) => {
      if (!link.canAccept()) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const at = link.begin(appliedHandler, { resolve, reject }, membersRequestBytes([nodeId]));
        writeMembersRequest(link.buffer, at, link.reqId, index, [nodeId]);
        link.end();
      });
    });
    for (const result of await Promise.allSettled(added)) {
      if (result.status === 'rejected')
        this.logger.warn(
          { member: nodeId, index, err: (result.reason as Error).message },
          'a worker did not learn a member',
        );
    }
  }

  /** Calls `watcher` with every anti-entropy round's end, from every worker; returns its removal. */
  watchRounds(watcher: (report: RoundReport) => void): () => void {
    this.roundWatchers.add(watcher);
    return () => this.roundWatchers.delete(watcher);
  }

  /**
   * Keys and bytes anti-entropy rounds pulled into this node's copy of `fragment` since it opened
   * it, and how big the largest copy they pulled from said it is.
   */
  pulledInto(fragment: number): PulledInto {
    return this.pulled.of(fragment);
  }

  /** Worker threads the node runs (each pulls its share of `--move-rate`). */
  get workerCount(): number {
    return this.links.length;
  }

  private onRoundReport(buf: Buffer, at: number, length: number): void {
    const report = readRoundReport(buf, at, length);
    this.pulled.add(report);
    if (resultStatus(buf, at) !== ResultKind.RoundReport) return;
    for (const watcher of this.roundWatchers) watcher(report);
  }

  private checkFragment(fragment: number): void {
    if (!Number.isInteger(fragment) || fragment < 0 || fragment >= this.config.fragments)
      throw invalidInput(`fragment ${fragment} outside 0..${this.config.fragments - 1}`);
  }

  /** Test hook: makes worker `index` throw an uncaught error, as a crash would. */
  crashWorker(index: number): void {
    this.linkAt(index).crash();
  }

  /** Test hook: the next `count` store commits of worker `index` fail with a storage error. */
  failCommits(index: number, count: number): void {
    const link = this.linkAt(index);
    if (!Number.isInteger(count) || count < 0 || count > 0xffff_ffff)
      throw invalidInput(`commit failure count must be an integer in 0..${0xffff_ffff}, got ${count}`);
    link.failCommits(count);
  }

  /** The link of worker `index`, for the test hooks. */
  private linkAt(index: number): WorkerLink {
    const link = this.links[index];
    if (link === undefined) throw invalidInput(`no worker ${index}`);
    return link;
  }

  /**
   * Backs the data directory up into `targetDir` while the workers go on writing: lmdb from this
   * thread's view (one read snapshot per group's env), LevelDB by each worker for the groups it owns
   * (one snapshot per group). What is committed when the copy starts is in it.
   */
  backup(targetDir: string): Promise<BackupReport> {
    const snapshot = this.snapshot;
    if (snapshot !== undefined)
      return backupDataDir((t) => snapshot.backup(t), this.config.dataDir, targetDir);
    if (this.config.store === 'memory') {
      return Promise.reject(
        invalidInput('backups need a store on disk: the memory store keeps nothing there'),
      );
    }
    const copy = async (target: string): Promise<void> => {
      await Promise.all(this.links.map((link) => this.workerBackup(link, target)));
    };
    return backupDataDir(copy, this.config.dataDir, targetDir);
  }

  /** Asks a worker to copy its part of the store into the data directory `target`. */
  private workerBackup(link: WorkerLink, target: string): Promise<void> {
    if (link.state !== 'ready') {
      return Promise.reject(
        storageError(`worker ${link.index} is not running (${link.state}); try the backup again`),
      );
    }
    return new Promise((resolve, reject) => {
      const bytes = Buffer.byteLength(target);
      const at = link.begin(appliedHandler, { resolve, reject }, CONTROL_HEADER_BYTES + bytes);
      const payloadAt = writeControlHeader(link.buffer, at, RequestKind.Backup, link.reqId);
      link.buffer.write(target, payloadAt, bytes, 'utf8');
      link.end();
    });
  }

  private async openSnapshot(): Promise<void> {
    if (this.config.store !== 'lmdb') return;
    const snapshot = await openStore(
      lmdbReaderLocation(this.config.dataDir, this.config.fragments, this.groupCount),
    );
    for (let f = 0; f < this.config.fragments; f++) await snapshot.openFragment(f);
    this.snapshot = snapshot;
  }

  private workerInit(
    index: number,
    requestRing: SharedArrayBuffer,
    resultRing: SharedArrayBuffer,
    store: StoreLocation,
    fragments: number[],
    restarted: boolean,
  ): WorkerInit {
    const c = this.config;
    return {
      index,
      requestRing,
      resultRing,
      store,
      board: this.board.buffer,
      fragments: fragments.filter((f) => this.kept[f] === 1),
      fragment: {
        valueBytesMax: c.valueBytesMax,
        queueOpsMax: c.queueOpsMax,
        backgroundOpsPerSec: c.backgroundOpsPerSec,
        flushIntervalMs: c.flushIntervalMs,
        flushWritesMax: c.flushWritesMax,
        flushBytesMax: c.flushBytesMax,
      },
      cleanIntervalMs: c.cleanIntervalMs,
      cleanKeysPerSec: c.cleanKeysPerSec,
      evictAboveBytes:
        store.eviction === undefined || c.maxMemoryBytes === 0
          ? undefined
          : evictionShareBytes(c, fragments.length),
      logLevel: this.logger.level,
      cluster: this.withHeldReplicas(this.cluster?.workerInit()),
      restarted,
      resp: this.workerPorts === undefined ? undefined : this.portInit(index),
    };
  }

  // --- the workers' RESP ports -------------------------------------------------------------------

  /**
   * Has every worker serve RESP on its own port (`base` + its index; base 0: any free port each),
   * for the keys of the fragments it owns; `relay` runs on this thread the commands a worker port
   * hands over (CommandSpec.needs). From now on this thread and the workers stamp writes from one
   * shared clock. Resolves with the ports, by worker index; a worker restarted later reopens its own.
   */
  async openWorkerPorts(options: WorkerPortOptions, relay: WorkerPortRelay): Promise<number[]> {
    assert(this.workerPorts === undefined, 'worker ports are open already');
    const clockCell = sharedClockCell();
    const portCounters = this.portCounters ?? PortCounters.create(this.links.length);
    this.portCounters = portCounters;
    this.clock.shareWith(clockCell);
    const c = this.config;
    const template: WorkerRespInit = {
      port: 0,
      bind: options.bind,
      host: options.host,
      ports: this.links.map(() => 0),
      workerOfFragment: Array.from(this.linkOfFragment),
      password: options.password,
      nodeId: this.nodeIdBytes.toString(),
      clockCell,
      maxClockSkewMs: c.maxClockSkewMs,
      durability: c.durability,
      replicaAcks: c.replicaAcks,
      fragments: c.fragments,
      valueBytesMax: c.valueBytesMax,
      maxMemoryBytes: c.maxMemoryBytes,
      counters: portCounters.buffer,
      stats: undefined,
      monitors: this.monitorCount.buffer as SharedArrayBuffer,
      cluster:
        this.cluster === undefined
          ? undefined
          : {
              selfIndex: this.cluster.selfIndex,
              serving: this.cluster.servingTable,
              endpoints: this.cluster.clientEndpoints(),
            },
    };
    const ports = this.links.map((_, i) => (options.base === 0 ? 0 : options.base + i));
    this.workerPorts = { template, ports, relay };
    const opened = await Promise.allSettled(
      this.links.map((link) =>
        this.portRequest(link, { kind: 'resp-listen', resp: this.portInit(link.index) }),
      ),
    );
    const failure = opened.find((r) => r.status === 'rejected');
    if (failure !== undefined) {
      await this.closeWorkerPorts();
      throw failure.reason;
    }
    for (const [i, r] of opened.entries())
      if (r.status === 'fulfilled' && r.value.kind === 'resp-listening') ports[i] = r.value.port;
    for (const link of this.links) link.post({ kind: 'resp-ports', ports });
    return [...ports];
  }

  /** Closes the workers' RESP ports (their clients too); resolves once every worker has. */
  async closeWorkerPorts(): Promise<void> {
    if (this.workerPorts === undefined) return;
    this.workerPorts = undefined;
    await Promise.allSettled(this.links.map((link) => this.portRequest(link, { kind: 'resp-close' })));
  }

  /** A member's client endpoint changed (it connected, or joined): the worker ports learn it. */
  clientEndpointsChanged(): void {
    const open = this.workerPorts;
    if (open === undefined || this.cluster === undefined || open.template.cluster === undefined) return;
    const endpoints = this.cluster.clientEndpoints();
    open.template = { ...open.template, cluster: { ...open.template.cluster, endpoints } };
    for (const link of this.links) link.post({ kind: 'resp-endpoints', endpoints });
  }

  /** The node's MONITOR clients changed: while there are any, the worker ports send what they run. */
  monitorsChanged(count: number): void {
    Atomics.store(this.monitorCount, 0, count);
  }

  /** What each worker port last published of its commands (INFO commandstats, latencystats, errorstats). */
  get workerPortStats(): readonly PortCommandStats[] {
    return this.portStats.filter((s) => s !== undefined);
  }

  /** The workers' RESP ports by worker index, while they are open. */
  get workerPortList(): readonly number[] | undefined {
    return this.workerPorts?.ports;
  }

  private portInit(index: number): WorkerRespInit {
    const open = this.workerPorts!;
    return {
      ...open.template,
      port: open.ports[index],
      ports: [...open.ports],
      stats: this.portStats[index],
    };
  }

  /** Sends a worker a port command and waits for its answer (one at a time per worker). */
  private portRequest(
    link: WorkerLink,
    command: { kind: 'resp-listen'; resp: WorkerRespInit } | { kind: 'resp-close' },
  ): Promise<WorkerPortEvent> {
    return new Promise((resolve, reject) => {
      if (!link.post(command)) {
        if (command.kind === 'resp-close') resolve({ kind: 'resp-closed' });
        else reject(internalError(`worker ${link.index} is not running: its RESP port cannot open`));
        return;
      }
      this.portWaiters[link.index] = (event) => {
        if (event.kind === 'resp-listen-failed') reject(invalidInput(event.message));
        else resolve(event);
      };
    });
  }

  private onPortEvent(index: number, event: WorkerPortEvent): void {
    if (event.kind === 'relay') return this.relay(index, event);
    if (event.kind === 'relay-end') return this.workerPorts?.relay.endSession(index, event.session);
    if (event.kind === 'monitor-lines') return this.workerPorts?.relay.monitor(event.lines);
    if (event.kind === 'resp-stats') {
      this.portStats[index] = event.stats;
      return;
    }
    const waiter = this.portWaiters[index];
    if (waiter !== undefined) {
      this.portWaiters[index] = undefined;
      return waiter(event);
    }
    // A restarted worker reopened its port by itself (WorkerInit.resp).
    if (event.kind === 'resp-listen-failed')
      this.logger.error(
        { worker: index, err: event.message },
        'a restarted worker could not reopen its RESP port',
      );
  }

  private relay(index: number, request: RelayRequest): void {
    const open = this.workerPorts;
    const link = this.links[index];
    const answer = (reply: RelayReply) => link.post({ kind: 'relay-reply', id: request.id, reply });
    const fail = (message: string) =>
      answer({
        bytes: Buffer.from(`-ERR ${message.replace(/[\r\n]+/g, ' ')}\r\n`),
        written: request.written,
        writtenSinceStamp: request.writtenSinceStamp,
        pubsubMode: false,
        monitoring: false,
      });
    if (open === undefined) fail('the worker ports are closing');
    else {
      const push = (bytes: Uint8Array) => link.post({ kind: 'relay-push', session: request.session, bytes });
      open.relay.run(request, push).then(answer, (err: Error) => fail(err.message));
    }
  }

  /** The cluster's startup message with the replica lists `holdFragment` set since. */
  private withHeldReplicas(init: ClusterInit | undefined): ClusterInit | undefined {
    if (init === undefined) return undefined;
    const replicas = init.replicas.map((list, f) => this.heldReplicas[f] ?? list);
    return { ...init, replicas };
  }

  /** Seeds the clock with a worker's newest stored timestamp; refuses one too far in the future. */
  private observeStored(index: number, highWaterWallMs: number): TesseraError | undefined {
    const nowMs = this.turnClock.nowMs();
    if (highWaterWallMs > 0 && !this.clock.observeWallMs(highWaterWallMs, nowMs)) {
      return storageError(
        `worker ${index}: a stored timestamp (${highWaterWallMs}) is ${highWaterWallMs - nowMs} ms ahead of ` +
          `the wall clock, more than maxClockSkewMs=${this.config.maxClockSkewMs}; check the system clock`,
      );
    }
    return undefined;
  }
}

const MIB = 1024 * 1024;

/**
 * A memory store's worker may hold all of `maxMemoryBytes` (fragments are not spread evenly by
 * size), plus its working room: its heap limit is raised to that where V8's default is lower, so
 * the bound, not the heap limit, is what a growing data set meets first.
 */
function workerOldGenerationMb(config: NodeConfig): number | undefined {
  if (config.store !== 'memory' || config.maxMemoryBytes === 0) return undefined;
  const needMb = Math.ceil(config.maxMemoryBytes / MIB) + WORKER_HEAP_HEADROOM_MB;
  const defaultMb = Math.floor(getHeapStatistics().heap_size_limit / MIB);
  return needMb > defaultMb ? needMb : undefined;
}

/**
 * The memory a worker's store keeps under an eviction policy: its fragments' share of
 * `maxMemoryBytes`, in whole units of the board's figures, so that the shares' sum — the figure
 * the bound is checked against — never passes it while every worker keeps to its own.
 */
function evictionShareBytes(config: NodeConfig, workerFragments: number): number {
  const unit = BOARD_MEMORY_UNIT_BYTES;
  return Math.floor((config.maxMemoryBytes * workerFragments) / config.fragments / unit) * unit;
}

/** Groups fragments by owning worker, skipping workers that own none (fewer store groups than workers). */
function assignFragments(config: NodeConfig, groupCount: number): Map<number, number[]> {
  const owned = new Map<number, number[]>();
  for (let f = 0; f < config.fragments; f++) {
    const w = workerOfFragment(f, groupCount, config.workers);
    const list = owned.get(w);
    if (list === undefined) owned.set(w, [f]);
    else list.push(f);
  }
  return new Map([...owned.entries()].sort(([a], [b]) => a - b));
}

/** A control request answered Applied, or with the error that stopped it. */
const appliedHandler: ResultHandler<{ resolve: () => void; reject: (error: Error) => void }> = {
  onResult(token, buf, at, length) {
    if (resultStatus(buf, at) === Reply.Applied) token.resolve();
    else token.reject(resultError(buf, at, length));
  },
  onFailure: (token, error) => token.reject(error),
};

const fenceReachedHandler: ResultHandler<{ resolve: () => void; reject: (error: Error) => void }> = {
  onResult(token, buf, at, length) {
    if (resultStatus(buf, at) === Reply.FenceReached) token.resolve();
    else token.reject(resultError(buf, at, length));
  },
  onFailure: (token, error) => token.reject(error),
};

/** The answer to DrainedTo: drained or not, or an error (no such sender, or a level it cannot tell). */
/** How a DrainedTo request was answered. */
export interface Drained {
  drained: boolean;
  /** The sender's continuity was the one asked about when it answered. */
  continuous: boolean;
}

const drainedToHandler: ResultHandler<{ resolve(drained: Drained): void; reject(error: Error): void }> = {
  onResult(token, buf, at, length) {
    const status = resultStatus(buf, at);
    if (status === ResultKind.Error) token.reject(resultError(buf, at, length));
    else
      token.resolve({
        drained: status === Reply.Applied,
        continuous: resultDetail(buf, at) === DRAINED_CONTINUOUS,
      });
  },
  onFailure: (token, error) => token.reject(error),
};

/** The answer to ReconcileNow: how the round awaited ended, or an error (no such sender). */
const roundHandler: ResultHandler<{ resolve(report: RoundReport): void; reject(error: Error): void }> = {
  onResult(token, buf, at, length) {
    if (resultStatus(buf, at) === ResultKind.RoundAnswer) token.resolve(readRoundReport(buf, at, length));
    else token.reject(resultError(buf, at, length));
  },
  onFailure: (token, error) => token.reject(error),
};

/** A wait's time limit, as the u32 of its request. */
function checkTimeoutMs(timeoutMs: number): number {
  if (!Number.isInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > 0xffff_ffff)
    throw invalidInput(`timeoutMs must be an integer in 0..${0xffff_ffff}, got ${timeoutMs}`);
  return timeoutMs;
}

const drainedHandler: ResultHandler<(drained: boolean) => void> = {
  onResult: (resolve, buf, at) => resolve(resultStatus(buf, at) === Reply.Applied),
  onFailure: (resolve) => resolve(false),
};

/** A worker's health report; a worker that stopped meanwhile has none (undefined). */
const healthHandler: ResultHandler<{
  resolve(report: WorkerHealthReport | undefined): void;
  reject(err: Error): void;
}> = {
  onResult(token, buf, at, length) {
    if (resultStatus(buf, at) !== ResultKind.Health) return token.reject(resultError(buf, at, length));
    try {
      token.resolve(decodeWorkerHealth(buf.toString('utf8', at + RESULT_HEADER_BYTES, at + length)));
    } catch (err) {
      token.reject(err as Error);
    }
  },
  onFailure: (token) => token.resolve(undefined),
};
