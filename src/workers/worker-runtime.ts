// The driver of one worker thread: it owns the worker's store and fragment actors (FragmentCore),
// turns request records into events, carries out the actions — one store transaction for all the
// commits of a drained batch, one fsync for every stable write waiting (group commit) — and writes
// results back through the result ring, one publish (one wake-up of the main thread) per batch.

import { getHeapStatistics } from 'node:v8';
import pino, { type Logger } from 'pino';
import { assert } from '../core/assert.js';
import { copyBytes, copyRange, writeU32LE } from '../core/bytes.js';
import { asStorageError, ErrorKind, TesseraError, truncateErrorMessage } from '../core/errors.js';
import { type CommitAction, type FragmentAction, FragmentCore, FragmentOp } from '../core/fragment.js';
import {
  CLEAN_PAGE_KEYS_MAX,
  CLEAN_POOL_PAGE_KEYS,
  RESULT_ACKS_MAX,
  WORKER_TURN_OPS_MAX,
} from '../core/limits.js';
import { TokenBucket } from '../core/op-queue.js';
import { Durability, OpKind, Reply } from '../core/ops.js';
import type { PendingEntry } from '../core/pending-writes.js';
import { isExpiredValue } from '../core/record.js';
import type { FragmentWrites, KvStore, PageStart } from '../native-bindings/kv-store.js';
import { FragmentBoard } from '../threads/fragment-board.js';
import type { WorkerInit } from '../threads/messages.js';
import {
  isFragmentOpKind,
  type ModifyParams,
  PEER_HEADER_BYTES,
  peerOf,
  poolSpanRequestBytes,
  REQUEST_HEADER_BYTES,
  RESULT_HEADER_BYTES,
  RequestKind,
  ResultKind,
  readModifyParams,
  readPoolSpanResult,
  readScanRequest,
  requestDurability,
  requestFragment,
  requestHeaderOnly,
  requestId,
  requestKeyBytes,
  requestPriority,
  requestWantsPrior,
  resultRecordBytes,
  type ScanRequest,
  scanPageBytes,
  writeAcksHeader,
  writePeerHeader,
  writePoolSpanRequest,
  writeResultHeader,
  writeScanPage,
} from '../threads/op-codec.js';
import { type DrainLoop, drainLoop, RingReader, RingWriter, ringWakeupsRecovered } from '../threads/ring.js';
import { RingOutbox } from '../threads/ring-outbox.js';
import { SystemClock } from './driver-clock.js';
import { NEXT_PAGE, type Span, type SpanQuery } from './reconcile-span.js';
import { WorkerReplication } from './replication.js';
import { collectScanPage, withPending } from './scan-page.js';

const EMPTY_KEY = Buffer.alloc(0);
/** Records up to this size are copied out of the ring together with their neighbours (`takeTurn`). */
const SHARED_COPY_RECORD_BYTES_MAX = 16 * 1024;
/** Alignment at which shared memory copies word by word (`copyRun`). */
const SHARED_COPY_ALIGN = 8;
/** A failing store is logged at most once per this interval; the lines between are counted. */
const STORAGE_FAILURE_LOG_INTERVAL_MS = 5_000;

export class WorkerRuntime {
  private readonly cores: (FragmentCore | undefined)[] = [];
  private readonly fragments: number[];
  private readonly reader: RingReader;
  private readonly outbox: RingOutbox;
  private drain: DrainLoop | undefined;
  /** Fragments that received requests this batch and must run. */
  private readonly active: FragmentCore[] = [];
  /** 1 for a fragment already in `active`: a per-operation check cheaper than a Set's. */
  private readonly activeMark: Uint8Array;
  /** This turn's records (takeTurn): ring offset and length. */
  private readonly turnAt = new Int32Array(WORKER_TURN_OPS_MAX);
  private readonly turnBytes = new Int32Array(WORKER_TURN_OPS_MAX);
  /**
   * This turn's copies (copyRun), one per run of neighbouring records: the copy, the index past the
   * run's last record, and what turns a record's ring offset into its offset in the copy. Kept per
   * run, not per record: storing a new copy into this long-lived array costs a write barrier.
   */
  private readonly runCopies: (Buffer | undefined)[] = [];
  private readonly runEnds = new Int32Array(WORKER_TURN_OPS_MAX);
  private readonly runShifts = new Int32Array(WORKER_TURN_OPS_MAX);
  private runCount = 0;
  /** The memory of the copy being decoded and where the copy starts in it. */
  private copyMemory: ArrayBufferLike = new ArrayBuffer(0);
  private copyByteOffset = 0;
  /** The wall clock read at the start of the turn being decoded. */
  private turnNowMs = 0;
  /** Fragments whose uncommitted state may have changed since the board was last updated. */
  private readonly touched = new Set<FragmentCore>();
  private readonly board: FragmentBoard;
  private readonly actions: FragmentAction[] = [];
  private readonly requestEvent: { kind: 'request'; op: FragmentOp } = { kind: 'request', op: undefined! };
  /** Scans waiting for their fence (reqId → request). */
  private readonly scans = new Map<number, ScanRequest>();
  private syncRequests: Array<{ core: FragmentCore; generation: number }> = [];
  private syncInFlight = false;
  private storageFailureLoggedAtMs = Number.NEGATIVE_INFINITY;
  private storageFailuresUnlogged = 0;
  /** Test hook (RequestKind.FailCommits): this many next commits fail without reaching the store. */
  private commitFailuresToInject = 0;
  /** Keys the store evicted to keep to `init.evictAboveBytes`, since the worker started. */
  private evictedKeys = 0;
  private wakeTimer: NodeJS.Timeout | undefined;
  private wakeAtMs = Number.POSITIVE_INFINITY;
  private immediatePending = false;
  private cleanTimer: NodeJS.Timeout | undefined;
  private sweeping = false;
  /** Keys the cleaner may examine (`cleanKeysPerSec`); an idle spell saves up none. */
  private readonly sweepKeys: TokenBucket;
  /** Ends the cleaner's wait for its next page early (at close). */
  private sweepPaceWake: (() => void) | undefined;
  private closing = false;
  private readonly logger: Logger;
  private readonly replication: WorkerReplication | undefined;
  private publishScheduled = false;
  private nextPoolTask = 1;
  private readonly poolTasks = new Map<number, { resolve(span: Span): void; reject(err: Error): void }>();
  private readonly publishTask = (): void => {
    this.publishScheduled = false;
    this.publishResults();
  };
  /** Header-only replies not yet written: one status and detail, their reqIds (`ack`). */
  private readonly ackIds = new Array<number>(RESULT_ACKS_MAX).fill(0);
  private ackCount = 0;
  private ackReply: Reply = Reply.Applied;
  private ackDetail = 0;

  constructor(
    private readonly init: WorkerInit,
    private readonly store: KvStore,
  ) {
    this.fragments = init.fragments;
    this.reader = new RingReader(init.requestRing);
    this.outbox = new RingOutbox(new RingWriter(init.resultRing));
    this.board = new FragmentBoard(init.board, init.store.fragmentCount);
    // A restarted worker's memory store starts empty: the main thread's bound must see it so.
    this.board.setMemoryBytes(init.index, store.memoryBytes());
    this.activeMark = new Uint8Array(init.store.fragmentCount);
    this.logger = pino({ level: init.logLevel, base: { pid: process.pid, worker: init.index } });
    const nowMs = Date.now();
    this.sweepKeys = new TokenBucket(init.cleanKeysPerSec, 1, nowMs);
    const replication =
      init.cluster === undefined
        ? undefined
        : new WorkerReplication(init.cluster, init.fragments, init.store.fragmentCount, init.restarted, {
            core: (fragment) => this.cores[fragment],
            submit: (core, op) => {
              this.requestEvent.op = op;
              core.step(this.requestEvent);
              this.activate(core);
            },
            sendFrame: (member, envelope) => this.sendPeerFrame(member, envelope),
            closePeer: (member, reason) => this.closePeer(member, reason),
            poolSpan: store.sharesReaders ? (f, afterKey, q) => this.poolSpan(f, afterKey, q) : undefined,
            store,
            logger: this.logger,
            clock: new SystemClock(),
          });
    this.replication = replication;
    for (const fragment of init.fragments) {
      const storedHighWaterWallMs = store.highWaterWallMs(fragment);
      const replicates = replication?.replicates(fragment) ?? false;
      this.cores[fragment] = new FragmentCore(
        { ...init.fragment, fragment, storedHighWaterWallMs, replicates },
        store,
        nowMs,
      );
    }
  }

  /** Newest timestamp stored in any of this worker's fragments, to seed the node's clock. */
  highWaterWallMs(): number {
    let max = 0;
    for (const f of this.fragments) max = Math.max(max, this.store.highWaterWallMs(f));
    return max;
  }

  start(): void {
    this.drain = drainLoop(this.reader, () => this.onBatch());
    this.cleanTimer = setInterval(() => void this.sweepAll(), this.init.cleanIntervalMs);
  }

  private onBatch(): void {
    const nowMs = Date.now();
    this.turnNowMs = nowMs;
    this.takeTurn();
    const at = this.turnAt;
    const bytes = this.turnBytes;
    const copies = this.runCopies;
    let i = 0;
    for (let r = 0; r < this.runCount; r++) {
      const copy = copies[r]!;
      copies[r] = undefined;
      // Views of the copy are made from its memory directly: a Buffer's `buffer` and `byteOffset`
      // are calls into the runtime, once per copy here instead of twice per view.
      this.copyMemory = copy.buffer;
      this.copyByteOffset = copy.byteOffset;
      const shift = this.runShifts[r];
      for (const end = this.runEnds[r]; i < end; i++) this.decode(copy, at[i] + shift, bytes[i]);
    }
    this.runActive(nowMs);
  }

  /**
   * Reads up to a turn's records, copies them out of the ring and releases its space. The requests
   * then own their bytes (lmdb keeps pointers to written buffers until commit; peer frames are
   * served asynchronously). Neighbouring records share one copy; a large one gets its own, so a small
   * record kept long (in a replication backlog) never holds a large one's memory.
   */
  private takeTurn(): void {
    const reader = this.reader;
    const at = this.turnAt;
    const bytes = this.turnBytes;
    let count = 0;
    let next: number;
    while (count < WORKER_TURN_OPS_MAX && (next = reader.next()) !== -1) {
      at[count] = next;
      bytes[count] = reader.recordBytes;
      count++;
    }
    this.runCount = 0;
    let run = 0;
    for (let i = 0; i < count; i++) {
      const large = bytes[i] > SHARED_COPY_RECORD_BYTES_MAX;
      // A record before its predecessor: the ring wrapped, and the run cannot continue across it.
      if (i > run && (large || at[i] < at[i - 1])) {
        this.copyRun(run, i);
        run = i;
      }
      if (large) {
        this.copyRun(i, i + 1);
        run = i + 1;
      }
    }
    if (run < count) this.copyRun(run, count);
    reader.release();
  }

  /** One copy of the ring bytes from record `first` to the end of record `end - 1`. */
  private copyRun(first: number, end: number): void {
    const start = this.turnAt[first];
    const stop = this.turnAt[end - 1] + this.turnBytes[end - 1];
    const ring = this.reader.bytes;
    // A run shorter than NATIVE_COPY_BYTES_MIN is copied by V8, which moves shared memory 8 bytes at
    // a time only between addresses equal mod 8 (byte by byte otherwise, ~8× slower): the copy
    // starts at the ring bytes' own alignment. Longer runs are one memcpy either way.
    const copy = Buffer.allocUnsafe(stop - start + SHARED_COPY_ALIGN - 1);
    const skew = (ring.byteOffset + start - copy.byteOffset) & (SHARED_COPY_ALIGN - 1);
    copyRange(ring, start, stop, copy, skew);
    const r = this.runCount++;
    this.runCopies[r] = copy;
    this.runEnds[r] = end;
    this.runShifts[r] = skew - start;
  }

  private decode(buf: Buffer, at: number, length: number): void {
    const kind = buf[at];
    const reqId = requestId(buf, at);
    if (isFragmentOpKind(kind)) return this.decodeFragmentOp(buf, at, length, kind, reqId);
    switch (kind) {
      case RequestKind.Scan:
        return this.admitScan(buf, at, reqId);
      case RequestKind.Health:
        return this.text(ResultKind.Health, 0, reqId, JSON.stringify(this.health()));
      case RequestKind.Crash:
        setImmediate(() => {
          throw new Error(`worker ${this.init.index} crashed on request (test hook)`);
        });
        return;
      case RequestKind.FailCommits:
        this.commitFailuresToInject = buf.readUInt32LE(at + 8);
        return this.ack(Reply.Applied, 0, reqId);
      case RequestKind.Backup:
        return this.backup(reqId, buf.toString('utf8', at + 8, at + length));
      case RequestKind.Close:
        void this.close(reqId);
        return;
      case RequestKind.PeerFrame:
        this.replication?.onFrame(peerOf(buf, at), buf.subarray(at + PEER_HEADER_BYTES, at + length));
        return;
      case RequestKind.PeerState:
        this.replication?.onPeerState(peerOf(buf, at), buf[at + 1] === 1);
        return;
      case RequestKind.PoolSpanResult:
        return this.onPoolSpan(reqId, buf, at, length);
      default:
        assert(false, `unknown request kind ${kind}`);
    }
  }

  private decodeFragmentOp(buf: Buffer, at: number, length: number, kind: OpKind, reqId: number): void {
    const fragment = requestFragment(buf, at);
    const core = this.cores[fragment];
    if (core === undefined) {
      return this.error(ErrorKind.Internal, reqId, `fragment ${fragment} is not served by this worker`);
    }
    // `buf` is this turn's own copy (takeTurn): key and record are views of it.
    const keyBytes = requestKeyBytes(buf, at);
    const bodyAt = at + REQUEST_HEADER_BYTES;
    const bodyEnd = at + length;
    // Plain views: cheaper to make than Buffers, and neither needs Buffer methods.
    const memory = this.copyMemory;
    const base = this.copyByteOffset;
    const key = new Uint8Array(memory, base + bodyAt, keyBytes);
    let recordAt = bodyAt + keyBytes;
    let params: ModifyParams | undefined;
    if (kind === OpKind.Modify) {
      params = readModifyParams(buf.subarray(bodyAt, bodyEnd), keyBytes);
      recordAt = bodyAt + params.end;
    }
    const record =
      recordAt < bodyEnd ? new Uint8Array(memory, base + recordAt, bodyEnd - recordAt) : EMPTY_KEY;
    const priority = requestPriority(buf, at);
    const durability = requestDurability(buf, at);
    const wantsPrior = requestWantsPrior(buf, at);
    if (
      kind === OpKind.Write &&
      !wantsPrior &&
      core.tryDirectWrite(reqId, priority, durability, key, record, this.turnNowMs)
    ) {
      this.activate(core);
      return;
    }
    const op = new FragmentOp(kind, reqId, priority, durability, key, record);
    op.headerOnly = requestHeaderOnly(buf, at);
    op.wantsPrior = wantsPrior;
    if (params !== undefined) {
      op.modifier = params.modifier;
      op.flags = params.flags;
      op.arg = params.arg;
      op.operand = params.operand;
    }
    this.requestEvent.op = op;
    core.step(this.requestEvent);
    this.activate(core);
  }

  /** A scan first fences its fragment (commits pending writes), then reads the store in order. */
  private admitScan(buf: Buffer, at: number, reqId: number): void {
    const { scan, priority } = readScanRequest(buf, at);
    const core = this.cores[scan.fragment];
    if (core === undefined) {
      return this.error(ErrorKind.Internal, reqId, `fragment ${scan.fragment} is not served by this worker`);
    }
    this.scans.set(reqId, scan);
    const fence = new FragmentOp(OpKind.Fence, reqId, priority, Durability.Store, EMPTY_KEY, EMPTY_KEY);
    this.requestEvent.op = fence;
    core.step(this.requestEvent);
    this.activate(core);
  }

  /** Marks `core` to run this turn. */
  private activate(core: FragmentCore): void {
    if (this.activeMark[core.fragment] === 1) return;
    this.activeMark[core.fragment] = 1;
    this.active.push(core);
  }

  private runActive(nowMs: number): void {
    const active = this.active;
    const budget = Math.max(64, Math.floor(WORKER_TURN_OPS_MAX / Math.max(1, active.length)));
    for (let i = 0; i < active.length; i++) {
      const core = active[i];
      core.step({ kind: 'run', nowMs, budget });
      core.takeActions(this.actions);
      this.touched.add(core);
    }
    this.replication?.afterRun(active);
    for (const core of active) this.activeMark[core.fragment] = 0;
    active.length = 0;
    this.carryOut();
    this.scheduleWake(nowMs);
  }

  /**
   * Carries out actions until none are left: replies, commits (one transaction), sync requests.
   * The replies written before a commit are shown before it runs: a `memory` acknowledgement does
   * not wait for the transaction. The board is brought up to date before each publish: an
   * acknowledged write that is not committed must keep the main thread from reading its fragment
   * from the store.
   */
  private carryOut(): void {
    while (this.actions.length > 0) {
      const commits: CommitAction[] = [];
      for (const action of this.actions) {
        if (action instanceof FragmentOp) this.sendReply(action);
        else if (action.kind === 'acks') this.answerDirect(action.reply, action.text, action.reqIds);
        else if (action.kind === 'commit') commits.push(action);
        else this.syncRequests.push({ core: this.cores[action.fragment]!, generation: action.generation });
      }
      this.actions.length = 0;
      if (commits.length > 0) {
        this.publish();
        this.commit(commits);
      }
    }
    if (this.syncRequests.length > 0 && !this.syncInFlight) this.startSync();
    this.publish();
  }

  /** Updates the board for every fragment touched since the last publish, then publishes. */
  private publish(): void {
    for (const core of this.touched) this.board.setDirty(core.fragment, core.hasUncommitted());
    this.touched.clear();
    this.publishResults();
  }

  private commit(commits: CommitAction[]): void {
    if (this.commitFailuresToInject > 0) {
      this.commitFailuresToInject--;
      return this.committed(commits, new Error('commit failed on request (test hook)'));
    }
    const writes: FragmentWrites[] = commits.map((c) => ({
      fragment: c.fragment,
      puts: c.puts,
      deletes: [],
      highWaterWallMs: c.highWaterWallMs,
    }));
    let result: void | Promise<void>;
    try {
      result = this.store.commit(writes);
    } catch (err) {
      return this.committed(commits, err);
    }
    if (result === undefined) return this.committed(commits, undefined);
    result.then(
      () => this.afterAsync(() => this.committed(commits, undefined)),
      (err: unknown) => this.afterAsync(() => this.committed(commits, err)),
    );
  }

  private committed(commits: CommitAction[], err: unknown): void {
    const message = err === undefined ? '' : asStorageError(err).message;
    if (err === undefined) {
      this.evictOverShare();
      // Before the replies: a client that saw its write acknowledged sees the memory it took.
      this.board.setMemoryBytes(this.init.index, this.store.memoryBytes());
      this.board.markCommitted();
    } else
      this.logStorageFailure(
        'store commit failed; its writes stay pending and are retried',
        commits.map((c) => c.fragment),
        message,
      );
    for (const c of commits) {
      const core = this.cores[c.fragment]!;
      this.touched.add(core);
      if (err === undefined) core.step({ kind: 'committed', generation: c.generation });
      else core.step({ kind: 'commit-failed', generation: c.generation, message });
      core.takeActions(this.actions);
    }
  }

  /**
   * Under an eviction policy, brings the store back within the worker's share of the bound after a
   * commit took it over, before the commit's figure is published: a write is refused only when
   * nothing is left to evict (`volatile-lru` with no key that has a deadline).
   */
  private evictOverShare(): void {
    const share = this.init.evictAboveBytes;
    if (share === undefined) return;
    const over = this.store.memoryBytes() - share;
    if (over > 0) this.evictedKeys += this.store.evict(over);
  }

  /** One fsync for every sync request gathered so far; requests arriving meanwhile wait for the next. */
  private startSync(): void {
    const batch = this.syncRequests;
    this.syncRequests = [];
    this.syncInFlight = true;
    const done = (err: unknown) =>
      this.afterAsync(() => {
        this.syncInFlight = false;
        const message = err === undefined ? '' : asStorageError(err).message;
        if (err !== undefined)
          this.logStorageFailure(
            'store sync failed; the stable writes waiting for it get the error',
            batch.map((b) => b.core.fragment),
            message,
          );
        for (const { core, generation } of batch) {
          if (err === undefined) core.step({ kind: 'synced', generation });
          else core.step({ kind: 'sync-failed', generation, message });
          core.takeActions(this.actions);
        }
      });
    this.store.sync().then(() => done(undefined), done);
  }

  /**
   * Logs a failed commit or sync, at most once per STORAGE_FAILURE_LOG_INTERVAL_MS (a full disk
   * fails every turn's commit), with how many failures went unlogged since the last line.
   */
  private logStorageFailure(msg: string, fragments: number[], message: string): void {
    const nowMs = Date.now();
    if (nowMs - this.storageFailureLoggedAtMs < STORAGE_FAILURE_LOG_INTERVAL_MS) {
      this.storageFailuresUnlogged++;
      return;
    }
    this.logger.error({ fragments, err: message, unlogged: this.storageFailuresUnlogged }, msg);
    this.storageFailureLoggedAtMs = nowMs;
    this.storageFailuresUnlogged = 0;
  }

  /** Runs `fn` from a store callback, then carries out what it produced. */
  /** Copies this worker's part of the store into a backup (LevelDB: only its owner can read it). */
  private backup(reqId: number, targetDataDir: string): void {
    this.store.backup(targetDataDir).then(
      () => this.afterAsync(() => this.ack(Reply.Applied, 0, reqId)),
      (err: unknown) =>
        this.afterAsync(() => {
          const error = err instanceof TesseraError ? err : asStorageError(err);
          this.error(error.kind, reqId, error.message);
        }),
    );
  }

  private afterAsync(fn: () => void): void {
    fn();
    this.carryOut();
    this.scheduleWake(Date.now());
  }

  /** Sends the answer of direct writes (`FragmentCore.tryDirectWrite`). */
  private answerDirect(reply: Reply, text: string, reqIds: number[]): void {
    if (text === '') for (const reqId of reqIds) this.ack(reply, 0, reqId);
    else for (const reqId of reqIds) this.text(reply, 0, reqId, text);
  }

  /** Sends the reply the actor set on `op`. */
  private sendReply(op: FragmentOp): void {
    const reply = op.reply;
    if (op.sink !== undefined) return op.sink.onReply(op, reply, op.text);
    const scan = op.kind === OpKind.Fence ? this.scans.get(op.reqId) : undefined;
    if (scan !== undefined) {
      this.scans.delete(op.reqId);
      if (reply === Reply.FenceReached) {
        void this.runScan(op.reqId, scan);
        return;
      }
      // The store is failing (a full disk): read it with the writes it could not take laid over
      // it, so SCAN, DBSIZE and INFO go on answering.
      if (reply === Reply.StorageFailed) {
        void this.runScan(op.reqId, scan, this.cores[scan.fragment]!.pendingRecords());
        return;
      }
    }
    const detail = op.prior ? 1 : 0;
    const record = op.replyRecord;
    if (record !== undefined) {
      const headerOnly = op.headerOnly || reply === Reply.Superseded;
      const n = resultRecordBytes(record, headerOnly);
      const at = this.outbox.reserve(RESULT_HEADER_BYTES + n);
      const buf = this.outbox.buffer;
      const p = writeResultHeader(buf, at, reply, detail, op.reqId);
      copyRange(record, 0, n, buf, p);
      this.outbox.commit();
    } else if (op.text !== '') {
      this.text(reply, detail, op.reqId, op.text);
    } else {
      this.ack(reply, detail, op.reqId);
    }
  }

  /**
   * A header-only reply: gathered with the ones before it of the same status and detail into one
   * Acks record, written when the status changes, the record is full, or results are published.
   */
  private ack(reply: Reply, detail: number, reqId: number): void {
    if (this.ackCount > 0 && (reply !== this.ackReply || detail !== this.ackDetail)) this.writeAcks();
    this.ackReply = reply;
    this.ackDetail = detail;
    this.ackIds[this.ackCount++] = reqId;
    if (this.ackCount === RESULT_ACKS_MAX) this.writeAcks();
  }

  private writeAcks(): void {
    const count = this.ackCount;
    if (count === 0) return;
    this.ackCount = 0;
    const ids = this.ackIds;
    if (count === 1) {
      const at = this.outbox.reserve(RESULT_HEADER_BYTES);
      writeResultHeader(this.outbox.buffer, at, this.ackReply, this.ackDetail, ids[0]);
      this.outbox.commit();
      return;
    }
    const at = this.outbox.reserve(RESULT_HEADER_BYTES + 4 * count);
    const buf = this.outbox.buffer;
    let p = writeAcksHeader(buf, at, this.ackReply, this.ackDetail, count);
    for (let i = 0; i < count; i++, p += 4) writeU32LE(buf, p, ids[i]);
    this.outbox.commit();
  }

  /** Writes the gathered replies, then makes every result written visible to the main thread. */
  private publishResults(): void {
    this.writeAcks();
    this.outbox.publish();
  }

  /**
   * Reads one page of live entries from the (fenced) store, filtered by the pattern; `pending`: the
   * fragment's uncommitted writes, laid over an unfenced store.
   */
  private async runScan(reqId: number, scan: ScanRequest, pending?: PendingEntry[]): Promise<void> {
    try {
      const source = pending === undefined ? this.store : withPending(this.store, pending);
      const page = await collectScanPage(source, scan, Date.now());
      const n = scanPageBytes(page.entries, page.resumeKey);
      const at = this.outbox.reserve(RESULT_HEADER_BYTES + n);
      const buf = this.outbox.buffer;
      const p = writeResultHeader(buf, at, ResultKind.ScanPage, 0, reqId);
      writeScanPage(buf, p, page.done, page.resumeKey, page.entries);
      this.outbox.commit();
    } catch (err) {
      this.error(ErrorKind.Storage, reqId, truncateErrorMessage(asStorageError(err).message));
    }
    this.publishResults();
  }

  /**
   * Offers every stored record to the cleaner, fragment by fragment, a page per event-loop turn at
   * most and `cleanKeysPerSec` keys a second: a pass over many keys takes longer instead of costing
   * more. A pass still running when the next interval comes is not started again.
   */
  private async sweepAll(): Promise<void> {
    if (this.sweeping || this.closing) return;
    this.sweeping = true;
    try {
      for (const fragment of this.fragments) {
        if (this.store.sharesReaders && (await this.sweepFromPool(fragment))) continue;
        let start: PageStart | undefined;
        for (;;) {
          await this.paceSweep();
          if (this.closing) return;
          const entries = await this.store.page(fragment, start, undefined, CLEAN_PAGE_KEYS_MAX);
          this.sweepKeys.spend(entries.length, Date.now());
          if (entries.length === 0) break;
          this.sweepPage(this.cores[fragment]!, Date.now(), entries);
          start = { key: entries[entries.length - 1].key, inclusive: false };
        }
      }
    } catch (err) {
      this.logger.error({ err: asStorageError(err).message }, 'TTL sweep failed; retrying next interval');
    } finally {
      this.sweeping = false;
    }
  }

  /** Offers a page of stored records to the fragment's cleaner and carries out what it decides. */
  private sweepPage(
    core: FragmentCore,
    nowMs: number,
    entries: Array<{ key: Buffer; record: Buffer }>,
  ): void {
    core.step({ kind: 'sweep', nowMs, entries });
    core.takeActions(this.actions);
    this.touched.add(core);
    this.carryOut();
  }

  /**
   * A fragment's TTL sweep with the reading done in the background pool (lmdb): the pool examines
   * a page of keys from a read-only view and sends back only those expired at the time asked
   * (expired-span.ts); this thread checks each against its current record (it may have changed
   * since the pool read it). False when the pool would not take a page: the caller then sweeps in
   * this thread.
   */
  private async sweepFromPool(fragment: number): Promise<boolean> {
    const core = this.cores[fragment]!;
    let afterKey: Uint8Array | undefined;
    for (;;) {
      await this.paceSweep();
      if (this.closing) return true;
      let span: Span;
      try {
        span = await this.poolSpan(fragment, afterKey, NEXT_PAGE, Date.now());
      } catch {
        return false;
      }
      if (this.closing) return true;
      // A short last page is counted in full: the pool does not say how many keys it examined.
      this.sweepKeys.spend(CLEAN_POOL_PAGE_KEYS, Date.now());
      const nowMs = Date.now();
      const entries: Array<{ key: Buffer; record: Buffer }> = [];
      for (const e of span.entries) {
        const current = core.current(e.key);
        if (current !== undefined && isExpiredValue(current, nowMs)) {
          entries.push({ key: e.key, record: Buffer.from(current) });
        }
      }
      if (entries.length > 0) this.sweepPage(core, nowMs, entries);
      if (!span.truncated || span.entries.length === 0) return true;
      afterKey = span.entries[span.entries.length - 1].key;
    }
  }

  /** Waits until the cleaner may examine its next page: the next event-loop turn at the soonest. */
  private paceSweep(): Promise<void> {
    const waitMs = this.sweepKeys.waitMs(Date.now());
    return new Promise<void>((resolve) => {
      if (waitMs === 0) return setImmediate(resolve);
      const timer = setTimeout(() => {
        this.sweepPaceWake = undefined;
        resolve();
      }, waitMs);
      this.sweepPaceWake = () => {
        clearTimeout(timer);
        this.sweepPaceWake = undefined;
        resolve();
      };
    });
  }

  /** Keeps one timer for the earliest fragment deadline, and an immediate when work is runnable now. */
  private scheduleWake(nowMs: number): void {
    if (this.closing) return;
    let wait = Number.POSITIVE_INFINITY;
    for (const f of this.fragments) {
      const core = this.cores[f]!;
      if (core.runnable(nowMs)) {
        wait = 0;
        break;
      }
      wait = Math.min(wait, core.nextWakeMs(nowMs));
    }
    if (wait === 0) {
      if (!this.immediatePending) {
        this.immediatePending = true;
        setImmediate(() => {
          this.immediatePending = false;
          this.tickAll();
        });
      }
      return;
    }
    if (wait === Number.POSITIVE_INFINITY || nowMs + wait >= this.wakeAtMs) return;
    if (this.wakeTimer !== undefined) clearTimeout(this.wakeTimer);
    this.wakeAtMs = nowMs + wait;
    this.wakeTimer = setTimeout(() => {
      this.wakeTimer = undefined;
      this.wakeAtMs = Number.POSITIVE_INFINITY;
      this.tickAll();
    }, wait);
  }

  private tickAll(): void {
    const nowMs = Date.now();
    for (const f of this.fragments) {
      const core = this.cores[f]!;
      core.step({ kind: 'tick', nowMs });
      this.touched.add(core);
      if (core.runnable(nowMs)) this.activate(core);
      else core.takeActions(this.actions);
    }
    this.runActive(nowMs);
  }

  private sendPeerFrame(member: number, envelope: Uint8Array): void {
    const at = this.outbox.reserve(PEER_HEADER_BYTES + envelope.length);
    const buf = this.outbox.buffer;
    copyBytes(buf, writePeerHeader(buf, at, ResultKind.PeerFrame, 0, member), envelope);
    this.outbox.commit();
    this.schedulePublish();
  }

  /** Asks the main thread to read a span in the background pool; the answer comes as PoolSpanResult. */
  private poolSpan(
    fragment: number,
    afterKey: Uint8Array | undefined,
    q: SpanQuery,
    expiredAtMs?: number,
  ): Promise<Span> {
    const taskId = this.nextPoolTask++;
    const lastKey = q.ranges.length > 0 ? q.ranges[q.ranges.length - 1].lastKey : undefined;
    const request = { fragment, afterKey, lastKey, openEnd: q.openEnd, expiredAtMs };
    const at = this.outbox.reserve(poolSpanRequestBytes(request));
    writePoolSpanRequest(this.outbox.buffer, at, taskId, request);
    this.outbox.commit();
    this.schedulePublish();
    return new Promise<Span>((resolve, reject) => this.poolTasks.set(taskId, { resolve, reject }));
  }

  private onPoolSpan(taskId: number, buf: Buffer, at: number, length: number): void {
    const task = this.poolTasks.get(taskId);
    if (task === undefined) return;
    this.poolTasks.delete(taskId);
    const span = readPoolSpanResult(buf, at, at + length);
    if (span === undefined) task.reject(new Error('background pool could not read the span'));
    else task.resolve(span);
  }

  private closePeer(member: number, reason: string): void {
    const text = truncateErrorMessage(reason);
    const n = Buffer.byteLength(text);
    const at = this.outbox.reserve(PEER_HEADER_BYTES + n);
    const buf = this.outbox.buffer;
    buf.write(text, writePeerHeader(buf, at, ResultKind.PeerClose, 0, member), n, 'utf8');
    this.outbox.commit();
    this.schedulePublish();
  }

  /** Frames produced outside a ring batch (timers, store callbacks) still leave promptly. */
  private schedulePublish(): void {
    if (this.publishScheduled) return;
    this.publishScheduled = true;
    queueMicrotask(this.publishTask);
  }

  /** A result whose payload is UTF-8 text (an error message, or health JSON). */
  private text(status: number, detail: number, reqId: number, text: string): void {
    const n = Buffer.byteLength(text);
    const at = this.outbox.reserve(RESULT_HEADER_BYTES + n);
    const buf = this.outbox.buffer;
    buf.write(text, writeResultHeader(buf, at, status, detail, reqId), n, 'utf8');
    this.outbox.commit();
  }

  private error(kind: ErrorKind, reqId: number, message: string): void {
    this.text(ResultKind.Error, kind, reqId, truncateErrorMessage(message));
  }

  private health(): object {
    return {
      worker: this.init.index,
      store: this.store.kind,
      fragments: this.fragments.map((f) => this.cores[f]!.stats()),
      syncInFlight: this.syncInFlight,
      replication: this.replication?.reports() ?? [],
      heapUsedBytes: process.memoryUsage().heapUsed,
      heapLimitBytes: getHeapStatistics().heap_size_limit,
      evictedKeys: this.evictedKeys,
      ringWakeupsRecovered: ringWakeupsRecovered(),
    };
  }

  /**
   * Closes the store. The main thread sends Close only after every fragment has been fenced at
   * `stable` with no operation admitted since, so nothing is left to commit.
   */
  private async close(reqId: number): Promise<void> {
    this.closing = true;
    this.drain?.stop();
    this.replication?.close();
    if (this.cleanTimer !== undefined) clearInterval(this.cleanTimer);
    this.sweepPaceWake?.();
    if (this.wakeTimer !== undefined) clearTimeout(this.wakeTimer);
    for (const f of this.fragments) {
      if (!this.cores[f]!.idle()) this.logger.warn({ fragment: f }, 'fragment not idle at close');
    }
    let message = '';
    try {
      await this.store.close();
    } catch (err) {
      message = asStorageError(err).message;
    }
    // Every reply goes out before the Closed result.
    this.writeAcks();
    if (message === '') {
      const at = this.outbox.reserve(RESULT_HEADER_BYTES);
      writeResultHeader(this.outbox.buffer, at, ResultKind.Closed, 0, reqId);
      this.outbox.commit();
    } else {
      this.error(ErrorKind.Storage, reqId, message);
    }
    this.publishResults();
  }
}
