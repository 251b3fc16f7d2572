// The fragment actor's rules as a state machine (DESIGN.md "Worker threads", spec §2.6–2.9, §3, §8.1).
// One instance per fragment, driven by the worker (src/workers/worker-runtime.ts), which turns ring
// records into `request` events, runs store commits and fsyncs for `commit` / `sync` actions and
// reports them back. The only I/O it sees is the injected synchronous `RecordReader` (as etcd's raft
// reads its Storage), so golden tests drive it with a Map and scripted time.
//
// Write path: a write merges (LWW) over the freshest record — unflushed, then flushing, then store —
// and lands in `unflushed`. Commits move `unflushed` to `flushing` as generation g; a reply that needs
// `store` waits for committed ≥ g, one that needs `stable` for synced ≥ g. One commit is in flight at
// a time; at most one sync request is outstanding, so fsyncs group every stable write waiting.
// Over a store with a write-ahead log (`logsWrites`, lmdb) a due generation is first sealed into
// `logged` and handed to the log (a `log` action): a `store` reply waits for the log's append and a
// `stable` one for its fsync, not for the store's transaction, which takes every logged generation
// not yet committed at once while the next ones are logged. Fences still wait for the commit: what
// a fence orders (a scan, a backup, a verified round) reads the store's pages.
// Most client writes carry a version newer than everything the fragment holds and need no read: when
// nothing is queued ahead of one, the driver hands it over without an op (`tryDirectWrite`, a
// `direct` event), and it is answered by request id. Ops and direct writes wait for their durability
// level in the same queues, so each fence reached or failed answers both alike.

import { assert } from './assert.js';
import { latin1 } from './bytes.js';
import {
  COMMIT_ATTEMPTS_MAX,
  COMMIT_RETRY_DELAY_MS_MAX,
  COMMIT_RETRY_DELAY_MS_MIN,
  HLC_LOGICAL_MAX,
  LOGGED_PENDING_BYTES_MAX,
} from './limits.js';
import {
  decodeKeys,
  decodePairs,
  Modifier,
  ModifyAnswer,
  ModifyFlag,
  type ModifyPlan,
  type ModifyRequest,
  planModify,
  planWithOtherKeys,
  readsOtherKeys,
} from './modify.js';
import { BoundedQueue, TokenBucket } from './op-queue.js';
import { Durability, OpKind, Priority, REPLY_NAMES, Reply } from './ops.js';
import { HASH_UNKNOWN, keyHash, type PendingEntry, PendingWrites } from './pending-writes.js';
import {
  ApplyOutcome,
  compareVersions,
  describeRecord,
  encodeRecord,
  expiresAtOf,
  expiryTombstoneOf,
  isExpiredValue,
  isExpiringValue,
  isLive,
  logicalOf,
  mergeOutcome,
  nodeIdOf,
  valueBytesOf,
  wallMsOf,
} from './record.js';

/** Synchronous point reads of committed records; a result is valid until the next read. */
export interface RecordReader {
  get(fragment: number, key: Uint8Array): Uint8Array | undefined;
}

/** One queued operation, built by the driver from a ring record. */
export class FragmentOp implements ModifyRequest {
  private keyHashCache = HASH_UNKNOWN;
  /** Read: reply with the record header only (TTL queries need no value). */
  headerOnly = false;
  /** Write: report whether a live value existed before (DEL's count); costs a store read. */
  wantsPrior = false;
  /** Modify: which read-modify-write, its flags, SETRANGE offset and INCRBY operand. */
  modifier: Modifier = Modifier.Set;
  flags = 0;
  arg = 0;
  operand: Uint8Array | undefined = undefined;
  /**
   * Write: the record came from a replica (replication or anti-entropy), so it is not replicated
   * again from here.
   */
  replicated = false;
  /**
   * Fence: reached once everything before it is at its durability level, as a write is (over a
   * write-ahead log, logged is `store` enough), not once the store's pages hold it all — a
   * replication batch's acknowledgement, a client's wait for its writes, but not a scan or a backup.
   */
  durabilityOnly = false;
  /**
   * Fence: a scan's, which reads the pending writes over the store when it fails — so while the
   * store keeps failing it is answered StorageFailed at once, not at the next commit retry.
   */
  answersWhileFailing = false;
  /** Where the reply goes when the worker itself issued the op (replication), instead of the ring. */
  sink: ReplySink | undefined = undefined;
  /**
   * The op's answer, set when the actor decides it: the op itself is then the reply action (no
   * second object per operation). `replyRecord`: Found, the live record; Superseded, the winner.
   * `prior`: writes, whether a live value existed before. `text`: Integer / Text, the answer;
   * Refused, Backpressure, StorageFailed, the error message. `generation`: held back until this
   * generation reaches the op's durability level.
   */
  reply: Reply = Reply.Applied;
  replyRecord: Uint8Array | undefined = undefined;
  prior = false;
  text = '';
  generation = 0;

  constructor(
    readonly kind: OpKind,
    readonly reqId: number,
    readonly priority: Priority,
    readonly durability: Durability,
    /** Key bytes the op owns (copied out of the ring). */
    readonly key: Uint8Array,
    /**
     * Write: the record to merge. Modify: the stamp (version, node, deadline) and, for SET, APPEND
     * and SETRANGE, the value bytes.
     */
    readonly record: Uint8Array,
  ) {}

  /** `keyHash(key)`, the key's slot in the pending writes, computed on first use. */
  get keyHash(): number {
    if (this.keyHashCache === HASH_UNKNOWN) this.keyHashCache = keyHash(this.key);
    return this.keyHashCache;
  }

  /** `keyHash` if a lookup computed it already, else HASH_UNKNOWN: a write needs it only if indexed. */
  get knownKeyHash(): number {
    return this.keyHashCache;
  }
}

/** Receives the replies of ops the worker issued itself (a replicated batch and its fence). */
export interface ReplySink {
  onReply(op: FragmentOp, reply: Reply, text: string): void;
}

export interface FragmentConfig {
  fragment: number;
  /** The fragment has other replicas: keep the writes this actor applies for its senders. */
  replicates?: boolean;
  /** Largest value a modification (APPEND, SETRANGE) may produce. */
  valueBytesMax: number;
  /** Newest wall-ms the store holds for this fragment (its persisted high-water mark). */
  storedHighWaterWallMs: number;
  queueOpsMax: number;
  backgroundOpsPerSec: number;
  flushIntervalMs: number;
  flushWritesMax: number;
  flushBytesMax: number;
  /** The store keeps a write-ahead log (KvStore.logsWrites): `store` and `stable` wait for it. */
  logsWrites?: boolean;
}

export type FragmentEvent =
  | { kind: 'request'; op: FragmentOp }
  // A client write handed over without an op (`tryDirectWrite`, which steps one reused event).
  | {
      kind: 'direct';
      reqId: number;
      priority: Priority;
      durability: Durability;
      key: Uint8Array;
      record: Uint8Array;
      nowMs: number;
    }
  | { kind: 'run'; nowMs: number; budget: number }
  | { kind: 'tick'; nowMs: number }
  | { kind: 'committed'; generation: number }
  | { kind: 'commit-failed'; generation: number; message: string }
  | { kind: 'logged'; generation: number }
  | { kind: 'log-failed'; generation: number }
  | { kind: 'synced'; generation: number }
  | { kind: 'sync-failed'; generation: number; message: string }
  | { kind: 'sweep'; nowMs: number; entries: ReadonlyArray<{ key: Buffer; record: Buffer }> };

/**
 * What the actor asks its driver to do: answer an op (the op itself, its reply set), answer direct
 * writes (`tryDirectWrite`) by request id, log (then report `logged` or `log-failed`), commit or sync.
 */
export type FragmentAction =
  | FragmentOp
  | { kind: 'acks'; reply: Reply; text: string; reqIds: number[] }
  | {
      kind: 'commit';
      fragment: number;
      generation: number;
      puts: Array<[key: Uint8Array, record: Uint8Array]>;
      highWaterWallMs: number;
    }
  | { kind: 'log'; fragment: number; generation: number; puts: Array<[key: Uint8Array, record: Uint8Array]> }
  | { kind: 'sync'; fragment: number; generation: number };

export type LogAction = Extract<FragmentAction, { kind: 'log' }>;
export type CommitAction = Extract<FragmentAction, { kind: 'commit' }>;
type DirectWriteEvent = Extract<FragmentEvent, { kind: 'direct' }>;
type AcksAction = Extract<FragmentAction, { kind: 'acks' }>;

export interface FragmentStats {
  fragment: number;
  queued: [high: number, normal: number, background: number];
  shed: [high: number, normal: number, background: number];
  unflushed: number;
  committedGeneration: number;
  syncedGeneration: number;
  writes: number;
  reads: number;
  expiredSwept: number;
  /** Commits failed in a row (0 when the last one succeeded); COMMIT_ATTEMPTS_MAX or more: writes are refused. */
  commitFailures: number;
}

export class FragmentCore {
  readonly fragment: number;
  private readonly queues: BoundedQueue<FragmentOp>[];
  private readonly backgroundTokens: TokenBucket;
  private outbox: FragmentAction[] = [];
  private nowMs: number;

  private unflushed = new PendingWrites();
  /** When the oldest unflushed write arrived; the flush interval counts from it. */
  private unflushedSinceMs = 0;
  /** Waiters attached to the unflushed generation: a reason to commit now. */
  private unflushedWaiters = 0;
  private flushing = new PendingWrites();
  /**
   * Log mode: generations sealed and handed to the log, not yet to the store; they go to the store
   * together once no commit is in flight. `loggedPendingGeneration` is the newest of them.
   */
  private logged = new PendingWrites();
  private loggedPendingGeneration = 0;
  /** The generation whose `log` action is not yet reported (0: none); the next waits for it. */
  private logInFlightGeneration = 0;
  /** Every generation up to this one is logged or committed (log mode). */
  private loggedGeneration = 0;
  /** The newest generation reported logged. */
  private loggedMaxGeneration = 0;
  /** The newest generation whose log append failed until a commit covers it (0: none). */
  private logFailedGeneration = 0;
  /** Newest version (wall, logical) stored or pending in this fragment; node ids are not tracked. */
  private highWaterWallMs: number;
  private highWaterLogical: number;

  /** Generation the next commit will carry; `flushingGeneration` is 0 when no commit is in flight. */
  private unflushedGeneration = 1;
  private flushingGeneration = 0;
  private committedGeneration = 0;
  private syncedGeneration = 0;
  private syncInFlightGeneration = 0;
  /** Commits failed in a row (0 after a success), and when the pending writes may be retried. */
  private commitFailures = 0;
  private commitRetryAtMs = 0;
  /** The last failed commit's error, told to writes refused while the store keeps failing. */
  private commitError = '';
  /** Answers (ops' and direct writes') waiting for their generation to be committed / synced. */
  private readonly commitWaiters = new DurabilityWaiters();
  private readonly stableWaiters = new DurabilityWaiters();
  /** Log mode: fences waiting for their generation to be in the store's pages. */
  private readonly visibleWaiters = new DurabilityWaiters();
  /** The event `tryDirectWrite` steps, filled anew for each write: a direct write allocates nothing. */
  private readonly directEvent: DirectWriteEvent = {
    kind: 'direct',
    reqId: 0,
    priority: Priority.Default,
    durability: Durability.Memory,
    key: NO_BYTES,
    record: NO_BYTES,
    nowMs: 0,
  };
  /** Whether the last `direct` event was taken: `tryDirectWrite`'s answer. */
  private directTaken = false;

  /** Writes applied from clients since the driver last took them, for the replication senders. */
  private replicationLog: Array<[key: Uint8Array, record: Uint8Array]> = [];
  private readonly shed: [number, number, number] = [0, 0, 0];
  private writes = 0;
  private reads = 0;
  private expiredSwept = 0;
  /** Values with a deadline staged (written, replicated or merged) since the actor opened. */
  private expiringWrites = 0;

  constructor(
    private readonly config: FragmentConfig,
    private readonly reader: RecordReader,
    nowMs: number,
  ) {
    this.fragment = config.fragment;
    this.queues = [
      new BoundedQueue(config.queueOpsMax),
      new BoundedQueue(config.queueOpsMax),
      new BoundedQueue(config.queueOpsMax),
    ];
    const rate = config.backgroundOpsPerSec;
    this.backgroundTokens = new TokenBucket(rate, Math.max(1, Math.ceil(rate / 10)), nowMs);
    this.nowMs = nowMs;
    // Only the wall ms is persisted: assume any logical counter within that millisecond is taken.
    this.highWaterWallMs = config.storedHighWaterWallMs;
    this.highWaterLogical = config.storedHighWaterWallMs > 0 ? HLC_LOGICAL_MAX : 0;
  }

  step(event: FragmentEvent): void {
    switch (event.kind) {
      case 'request':
        return this.admit(event.op);
      case 'direct':
        return this.applyDirect(event);
      case 'run':
        this.nowMs = Math.max(this.nowMs, event.nowMs);
        this.runQueues(event.budget);
        return this.maybeCommit();
      case 'tick':
        this.nowMs = Math.max(this.nowMs, event.nowMs);
        return this.maybeCommit();
      case 'committed':
        return this.onCommitted(event.generation);
      case 'commit-failed':
        return this.onCommitFailed(event.generation, event.message);
      case 'synced':
        return this.onSynced(event.generation);
      case 'sync-failed':
        return this.onSyncFailed(event.generation, event.message);
      case 'logged':
        return this.onLogged(event.generation);
      case 'log-failed':
        return this.onLogFailed(event.generation);
      case 'sweep':
        this.nowMs = Math.max(this.nowMs, event.nowMs);
        for (const entry of event.entries) this.sweepOne(entry.key, entry.record);
        return this.maybeCommit();
    }
  }

  /** Moves the actions produced so far into `into`, leaving the outbox empty. */
  takeActions(into: FragmentAction[]): void {
    for (const action of this.outbox) into.push(action);
    this.outbox.length = 0;
  }

  /** True when `run` would execute something at `nowMs`. */
  runnable(nowMs: number): boolean {
    if (this.queues[Priority.High].length > 0 || this.queues[Priority.Default].length > 0) return true;
    return this.queues[Priority.Background].length > 0 && this.backgroundTokens.waitMs(nowMs) === 0;
  }

  /** Milliseconds until this fragment needs a `tick` or `run` (Infinity when idle). */
  nextWakeMs(nowMs: number): number {
    let wait = Number.POSITIVE_INFINITY;
    if (this.config.logsWrites === true) {
      if (
        this.unflushed.size > 0 &&
        this.logInFlightGeneration === 0 &&
        this.logged.bytes < LOGGED_PENDING_BYTES_MAX
      )
        wait = Math.max(0, this.unflushedSinceMs + this.config.flushIntervalMs - nowMs);
      if (this.logged.size > 0 && this.flushingGeneration === 0 && this.commitFailures > 0)
        wait = Math.min(wait, Math.max(0, this.commitRetryAtMs - nowMs));
    } else if (this.unflushed.size > 0 && this.flushingGeneration === 0) {
      const dueAtMs =
        this.commitFailures > 0 ? this.commitRetryAtMs : this.unflushedSinceMs + this.config.flushIntervalMs;
      wait = Math.max(0, dueAtMs - nowMs);
    }
    if (this.queues[Priority.Background].length > 0)
      wait = Math.min(wait, this.backgroundTokens.waitMs(nowMs));
    return wait;
  }

  /** True after COMMIT_ATTEMPTS_MAX failed commits in a row, until a commit succeeds. */
  private storeFailing(): boolean {
    return this.commitFailures >= COMMIT_ATTEMPTS_MAX;
  }

  /** What an op refused while the store keeps failing is told. */
  private failingMessage(): string {
    return `store is failing: ${this.commitError}`;
  }

  /** True while the fragment holds writes not yet committed to the store. */
  hasUncommitted(): boolean {
    return this.unflushed.size > 0 || this.logged.size > 0 || this.flushing.size > 0;
  }

  /** True when nothing is queued, unflushed, in flight or waiting. */
  idle(): boolean {
    return (
      this.queues.every((q) => q.length === 0) &&
      this.unflushed.size === 0 &&
      this.logged.size === 0 &&
      this.logInFlightGeneration === 0 &&
      this.flushingGeneration === 0 &&
      this.commitWaiters.length === 0 &&
      this.stableWaiters.length === 0 &&
      this.visibleWaiters.length === 0
    );
  }

  stats(): FragmentStats {
    return {
      fragment: this.fragment,
      queued: [this.queues[0].length, this.queues[1].length, this.queues[2].length],
      shed: [this.shed[0], this.shed[1], this.shed[2]],
      unflushed: this.unflushed.size,
      committedGeneration: this.committedGeneration,
      syncedGeneration: this.syncedGeneration,
      writes: this.writes,
      reads: this.reads,
      expiredSwept: this.expiredSwept,
      commitFailures: this.commitFailures,
    };
  }

  /** The freshest record of a key: unflushed, then flushing, then the store. */
  lookup(op: FragmentOp): Uint8Array | undefined {
    if (this.unflushed.size > 0 || this.logged.size > 0 || this.flushing.size > 0) {
      const pending = this.pendingOf(op.key, op.keyHash);
      if (pending !== undefined) return pending[1];
    }
    return this.reader.get(this.fragment, op.key);
  }

  private lookupKey(key: Uint8Array, hash: number): Uint8Array | undefined {
    const pending = this.pendingOf(key, hash);
    return pending !== undefined ? pending[1] : this.reader.get(this.fragment, key);
  }

  /** The key's newest write not yet committed: unflushed, then logged, then flushing. */
  private pendingOf(key: Uint8Array, hash: number): PendingEntry | undefined {
    return this.unflushed.get(key, hash) ?? this.logged.get(key, hash) ?? this.flushing.get(key, hash);
  }

  /**
   * A client write applied at its arrival, without an op or a queue (the `direct` event), when that
   * changes nothing a queued write would do: nothing of its priority or higher is queued (it would
   * run next), its version is newer than everything the fragment holds (so the merge reads nothing
   * and applies), it has not expired, and nobody asked what it replaced (the caller's part). Its
   * answer, Applied, goes out by request id in an `acks` action once its durability level covers
   * it. Returns false, having changed nothing, when a condition does not hold: the driver then
   * admits it as an op (`request`).
   */
  tryDirectWrite(
    reqId: number,
    priority: Priority,
    durability: Durability,
    key: Uint8Array,
    record: Uint8Array,
    nowMs: number,
  ): boolean {
    const event = this.directEvent;
    event.reqId = reqId;
    event.priority = priority;
    event.durability = durability;
    event.key = key;
    event.record = record;
    event.nowMs = nowMs;
    this.step(event);
    return this.directTaken;
  }

  /** Applies a direct write when it changes nothing a queued write would do (`tryDirectWrite`). */
  private applyDirect(event: DirectWriteEvent): void {
    const { priority, record } = event;
    this.directTaken = false;
    if (priority === Priority.Background || this.storeFailing()) return;
    if (this.queues[Priority.High].length > 0) return;
    if (priority === Priority.Default && this.queues[Priority.Default].length > 0) return;
    if (!this.newerThanHighWater(record)) return;
    const nowMs = Math.max(this.nowMs, event.nowMs);
    if (mergeOutcome(undefined, record, nowMs) !== ApplyOutcome.Applied) return;
    this.directTaken = true;
    this.nowMs = nowMs;
    this.writes++;
    this.putPending(event.key, HASH_UNKNOWN, record, true);
    this.logForReplicas(false, event.key, record);
    this.awaitDurability(undefined, event.reqId, event.durability);
  }

  private admit(op: FragmentOp): void {
    // While commits keep failing, writes are refused rather than held in memory without end; reads
    // and fences go on (a fence is answered by the next commit, or its failure; a scan's at once).
    if (this.storeFailing() && (op.kind === OpKind.Write || op.kind === OpKind.Modify)) {
      return this.reply(op, Reply.StorageFailed, undefined, false, this.failingMessage());
    }
    if (this.queues[op.priority].push(op)) return;
    this.shed[op.priority]++;
    this.reply(op, Reply.Backpressure, undefined, false, 'fragment queue is full');
  }

  private runQueues(budget: number): void {
    let done = 0;
    for (const priority of [Priority.High, Priority.Default] as const) {
      const queue = this.queues[priority];
      while (done < budget && queue.length > 0) {
        this.execute(queue.shift()!);
        done++;
      }
    }
    const background = this.queues[Priority.Background];
    while (done < budget && background.length > 0 && this.backgroundTokens.tryTake(this.nowMs)) {
      this.execute(background.shift()!);
      done++;
    }
  }

  private execute(op: FragmentOp): void {
    switch (op.kind) {
      case OpKind.Read:
        return this.executeRead(op);
      case OpKind.Write:
        return this.executeWrite(op, op.record);
      case OpKind.Modify:
        return this.executeModify(op);
      case OpKind.Fence:
        if (op.answersWhileFailing && this.storeFailing())
          return this.reply(op, Reply.StorageFailed, undefined, false, this.failingMessage());
        return this.await(op, Reply.FenceReached, false);
    }
  }

  private executeRead(op: FragmentOp): void {
    this.reads++;
    const current = this.lookup(op);
    // The store's result is only valid until its next read: the reply keeps a copy.
    if (current !== undefined && isLive(current, this.nowMs))
      this.reply(op, Reply.Found, Buffer.from(current), false, '');
    else this.reply(op, Reply.NotFound, undefined, false, '');
  }

  /** A read-modify-write: plan it over the live record, then merge its write (if any) under LWW. */
  private executeModify(op: FragmentOp): void {
    if (op.modifier === Modifier.SetAllIfNone) return this.executeSetAllIfNone(op);
    if (op.modifier === Modifier.Rename || op.modifier === Modifier.Copy) return this.executeTransfer(op);
    // Commands over several keys read the others first: each lookup invalidates the previous one's buffer.
    const others = readsOtherKeys(op.modifier) ? this.otherValues(op) : undefined;
    if (others === null) return this.reply(op, Reply.Refused, undefined, false, 'ERR malformed key list');
    this.writes++;
    const current = this.lookup(op);
    const live = current !== undefined && isLive(current, this.nowMs) ? current : undefined;
    const valueBytesMax = this.config.valueBytesMax;
    const plan: ModifyPlan =
      others === undefined
        ? planModify(op, live, valueBytesMax)
        : planWithOtherKeys(op, live, others, valueBytesMax);
    // The plan's record is a view of the store's read buffer: copy what the reply keeps.
    const record = plan.record === undefined ? undefined : Buffer.from(plan.record);
    const reply = MODIFY_REPLIES[plan.answer];
    if (plan.write === undefined) return this.reply(op, reply, record, live !== undefined, plan.text);
    switch (mergeOutcome(current, plan.write, this.nowMs)) {
      case ApplyOutcome.Superseded:
        return this.reply(op, Reply.Superseded, Buffer.from(current!), live !== undefined, '');
      case ApplyOutcome.Expired:
        // A deadline in the past deletes the key (EXPIRE with a past time, GETEX EXAT in the past).
        this.putPending(op.key, op.keyHash, expiryTombstoneOf(plan.write));
        this.logForReplicas(op.replicated, op.key, plan.write);
        break;
      default:
        this.putPending(op.key, op.keyHash, plan.write);
        this.logForReplicas(op.replicated, op.key, plan.write);
    }
    this.await(op, reply, live !== undefined, record, plan.text);
  }

  /** The live values of the keys in the operand (undefined: missing), in order; null if malformed. */
  private otherValues(op: FragmentOp): Array<Buffer | undefined> | null {
    const keys = decodeKeys(op.operand);
    if (keys === undefined) return null;
    return keys.map((key) => {
      const found = this.lookupKey(key, keyHash(key));
      // The store's read result is valid until its next read: keep a copy.
      return found !== undefined && isLive(found, this.nowMs) ? Buffer.from(valueBytesOf(found)) : undefined;
    });
  }

  /** MSETNX: writes every pair only if none of the keys holds a live value (all keys are ours). */
  private executeSetAllIfNone(op: FragmentOp): void {
    const others = decodePairs(op.operand);
    if (others === undefined)
      return this.reply(op, Reply.Refused, undefined, false, 'ERR malformed MSETNX pairs');
    const stamp = op.record;
    const pairs: Array<[Uint8Array, Uint8Array]> = [[op.key, stamp]];
    for (const [key, value] of others) {
      pairs.push([
        Buffer.from(key),
        encodeRecord(false, wallMsOf(stamp), logicalOf(stamp), 0, nodeIdOf(stamp), value),
      ]);
    }
    const hashes = pairs.map(([key]) => keyHash(key));
    for (let i = 0; i < pairs.length; i++) {
      const current = this.lookupKey(pairs[i][0], hashes[i]);
      if (current !== undefined && isLive(current, this.nowMs))
        return this.reply(op, Reply.Integer, undefined, true, '0');
    }
    for (let i = 0; i < pairs.length; i++) {
      const [key, record] = pairs[i];
      const hash = hashes[i];
      const current = this.lookupKey(key, hash);
      // A newer tombstone or expired value may still be there: LWW decides as for any write.
      if (mergeOutcome(current, record, this.nowMs) !== ApplyOutcome.Superseded) {
        this.putPending(key, hash, record);
        this.logForReplicas(op.replicated, key, record);
      }
      this.writes++;
    }
    this.await(op, Reply.Integer, false, undefined, '1');
  }

  /**
   * RENAME / RENAMENX / COPY: the live value and its deadline are written to the target key (the
   * operand, ours too) under the stamp's version, and RENAME gives the key a tombstone — all or
   * nothing: if a record already there is newer than the stamp, nothing is written. Flag Nx: only
   * if the target holds no live value.
   */
  private executeTransfer(op: FragmentOp): void {
    const copy = op.modifier === Modifier.Copy;
    const found = this.lookup(op);
    if (found === undefined || !isLive(found, this.nowMs)) {
      if (copy) return this.reply(op, Reply.NotApplied, undefined, false, '');
      return this.reply(op, Reply.Refused, undefined, false, 'ERR no such key');
    }
    const onlyIfNone = (op.flags & ModifyFlag.Nx) !== 0;
    const target = op.operand === undefined ? Buffer.alloc(0) : Buffer.from(op.operand);
    if (target.equals(op.key)) {
      if (copy) return this.reply(op, Reply.Refused, undefined, true, SAME_OBJECT);
      return this.reply(op, onlyIfNone ? Reply.NotApplied : Reply.Applied, undefined, true, '');
    }
    // The store's read result is valid until its next read: keep a copy across the second lookup.
    const source = Buffer.from(found);
    const targetHash = keyHash(target);
    const existing = this.lookupKey(target, targetHash);
    if (onlyIfNone && existing !== undefined && isLive(existing, this.nowMs))
      return this.reply(op, Reply.NotApplied, undefined, true, '');
    const stamp = op.record;
    const wallMs = wallMsOf(stamp);
    const logical = logicalOf(stamp);
    const nodeId = nodeIdOf(stamp);
    const written = encodeRecord(false, wallMs, logical, expiresAtOf(source), nodeId, valueBytesOf(source));
    const removed = copy ? undefined : encodeRecord(true, wallMs, logical, 0, nodeId, undefined);
    if (removed !== undefined && compareVersions(removed, source) <= 0)
      return this.reply(op, Reply.Superseded, source, true, '');
    if (existing !== undefined && compareVersions(written, existing) <= 0)
      return this.reply(op, Reply.Superseded, Buffer.from(existing), true, '');
    if (removed !== undefined) {
      this.writes++;
      this.putPending(op.key, op.keyHash, removed);
      this.logForReplicas(op.replicated, op.key, removed);
    }
    this.writes++;
    this.putPending(target, targetHash, written);
    this.logForReplicas(op.replicated, target, written);
    this.await(op, Reply.Applied, true);
  }

  private executeWrite(op: FragmentOp, incoming: Uint8Array): void {
    this.writes++;
    // A version newer than everything this fragment ever stored or queued beats whatever is there:
    // the merge needs no read unless the caller wants to know what was there.
    const newer = this.newerThanHighWater(incoming);
    const current = newer && !op.wantsPrior ? undefined : this.lookup(op);
    const prior = current !== undefined && isLive(current, this.nowMs);
    switch (mergeOutcome(current, incoming, this.nowMs)) {
      case ApplyOutcome.Superseded:
        return this.reply(op, Reply.Superseded, Buffer.from(current!), prior, '');
      case ApplyOutcome.AlreadyPresent:
        // A retried write: the replicas may still lack it (spec §5.2 replicates it again).
        this.logForReplicas(op.replicated, op.key, incoming);
        return this.await(op, Reply.AlreadyPresent, prior);
      case ApplyOutcome.Expired:
        // The deadline passed before the write arrived: install its expiry tombstone so no older
        // replica can bring the key back, and report Expired (spec §2.4).
        this.putPending(op.key, op.knownKeyHash, expiryTombstoneOf(incoming));
        this.logForReplicas(op.replicated, op.key, incoming);
        return this.reply(op, Reply.Expired, undefined, prior, '');
      case ApplyOutcome.Applied:
        this.putPending(op.key, op.knownKeyHash, incoming, newer);
        this.logForReplicas(op.replicated, op.key, incoming);
        return this.await(op, Reply.Applied, prior);
    }
  }

  private sweepOne(key: Buffer, stored: Buffer): void {
    const hash = keyHash(key);
    // A pending write is newer than (or the same as) what the store holds; the sweep of a later
    // page or pass will see it once it is committed.
    if (this.pendingOf(key, hash) !== undefined) return;
    if (!isExpiredValue(stored, this.nowMs)) return;
    this.putPending(key, hash, expiryTombstoneOf(stored));
    this.expiredSwept++;
  }

  /**
   * Keeps a client write for the replication senders (`replicated`: it came from a replica, and is
   * not sent on). Replicas receive the record as written (an expired one becomes their own expiry
   * tombstone by the same rule).
   */
  private logForReplicas(replicated: boolean, key: Uint8Array, record: Uint8Array): void {
    if (this.config.replicates === true && !replicated) this.replicationLog.push([key, record]);
  }

  /** Moves the writes kept for the replication senders into the caller's hands. */
  takeReplicated(): Array<[key: Uint8Array, record: Uint8Array]> {
    const log = this.replicationLog;
    if (log.length > 0) this.replicationLog = [];
    return log;
  }

  /**
   * The freshest record of every key with a write not yet committed, in no order: what a reader of
   * the store must lay over it while commits fail (a scan cannot wait for its fence then).
   */
  pendingRecords(): PendingEntry[] {
    const out: PendingEntry[] = [];
    const seen = new Set<string>();
    for (const set of [this.unflushed, this.logged, this.flushing]) {
      for (const [key] of set.entries()) {
        const id = latin1(key);
        if (seen.has(id)) continue;
        seen.add(id);
        out.push([key, this.pendingOf(key, HASH_UNKNOWN)![1]]);
      }
    }
    return out;
  }

  /** Values with a deadline this actor has staged since it opened (the TTL sweep skips a fragment without). */
  get expiringWritten(): number {
    return this.expiringWrites;
  }

  /** The freshest record of `key` — pending, then stored — a view valid until the next read. */
  current(key: Buffer): Uint8Array | undefined {
    return this.lookupKey(key, keyHash(key));
  }

  /** `hash`: the key's hash or HASH_UNKNOWN; `newer`: whether `record` is newer than the high-water mark. */
  private putPending(
    key: Uint8Array,
    hash: number,
    record: Uint8Array,
    newer = this.newerThanHighWater(record),
  ): void {
    if (this.unflushed.size === 0) this.unflushedSinceMs = this.nowMs;
    if (isExpiringValue(record)) this.expiringWrites++;
    this.unflushed.set(key, hash, record);
    if (newer) {
      this.highWaterWallMs = wallMsOf(record);
      this.highWaterLogical = logicalOf(record);
    }
  }

  /**
   * A write back from a failed commit, for the retry: staged before, so the high-water mark and the
   * count of values with a deadline hold it already.
   */
  private restage(key: Uint8Array, record: Uint8Array): void {
    if (this.unflushed.size === 0) this.unflushedSinceMs = this.nowMs;
    this.unflushed.set(key, HASH_UNKNOWN, record);
  }

  /** True when `record`'s timestamp is strictly newer than every version this fragment holds. */
  private newerThanHighWater(record: Uint8Array): boolean {
    const wallMs = wallMsOf(record);
    return (
      wallMs > this.highWaterWallMs ||
      (wallMs === this.highWaterWallMs && logicalOf(record) > this.highWaterLogical)
    );
  }

  /** Replies now, or once the op's durability level covers everything admitted so far. */
  private await(op: FragmentOp, reply: Reply, prior: boolean, record?: Uint8Array, text = ''): void {
    this.answer(op, reply, record, prior, text);
    this.awaitDurability(op, op.reqId, op.durability);
  }

  /**
   * Sends an answer now, or once `durability` covers everything admitted so far: an op's (set on
   * it), or with no op the direct write `reqId`'s Applied.
   */
  private awaitDurability(op: FragmentOp | undefined, reqId: number, durability: Durability): void {
    if (durability === Durability.Memory) return this.send(op, reqId);
    let generation = this.committedGeneration;
    if (this.unflushed.size > 0) generation = this.unflushedGeneration;
    else if (this.logged.size > 0 || this.logInFlightGeneration !== 0)
      generation = this.loggedPendingGeneration;
    else if (this.flushingGeneration !== 0) generation = this.flushingGeneration;
    if (
      durability === Durability.Store &&
      this.config.logsWrites === true &&
      op?.kind === OpKind.Fence &&
      !op.durabilityOnly
    ) {
      if (generation <= this.committedGeneration) return this.send(op, reqId);
      this.visibleWaiters.push(op, reqId, generation);
    } else if (durability === Durability.Store) {
      if (generation <= this.storeFence()) return this.send(op, reqId);
      this.commitWaiters.push(op, reqId, generation);
    } else {
      if (generation <= this.syncedGeneration) return this.send(op, reqId);
      this.stableWaiters.push(op, reqId, generation);
      this.maybeSync();
    }
    if (generation === this.unflushedGeneration) this.unflushedWaiters++;
  }

  /** The newest generation at `store`: committed, or in log mode logged with every one before it. */
  private storeFence(): number {
    return Math.max(this.committedGeneration, this.loggedGeneration);
  }

  /** True when the unflushed generation should be sealed now (waited for, full, or old enough). */
  private unflushedDue(): boolean {
    return (
      this.unflushedWaiters > 0 ||
      this.unflushed.size >= this.config.flushWritesMax ||
      this.unflushed.bytes >= this.config.flushBytesMax ||
      this.nowMs - this.unflushedSinceMs >= this.config.flushIntervalMs
    );
  }

  private maybeCommit(): void {
    if (this.config.logsWrites === true) {
      // A commit started first makes room under LOGGED_PENDING_BYTES_MAX for the generation logged next.
      this.maybeCommitLogged();
      this.maybeLog();
      return this.maybeCommitLogged();
    }
    if (this.flushingGeneration !== 0 || this.unflushed.size === 0) return;
    // After a failure the pending writes (the failed ones among them) go at the retry time, and not before.
    if (this.commitFailures > 0 && this.nowMs < this.commitRetryAtMs) return;
    if (this.commitFailures === 0 && !this.unflushedDue()) return;
    const layer = this.unflushed;
    this.unflushed = new PendingWrites();
    this.unflushedWaiters = 0;
    this.startCommit(layer, this.unflushedGeneration++);
  }

  /** Hands `layer` to the store as generation `generation`'s commit: it is `flushing` until then. */
  private startCommit(layer: PendingWrites, generation: number): void {
    this.flushing = layer;
    this.flushingGeneration = generation;
    this.outbox.push({
      kind: 'commit',
      fragment: this.fragment,
      generation,
      puts: layer.entries(),
      highWaterWallMs: this.highWaterWallMs,
    });
  }

  /**
   * Log mode: seals the unflushed generation into `logged` and asks for it to be logged. One append
   * is reported at a time: until then `logged` is not changed under the action's entries.
   */
  private maybeLog(): void {
    if (this.unflushed.size === 0 || this.logInFlightGeneration !== 0 || !this.unflushedDue()) return;
    // The store is behind: the next commit's completion logs this generation.
    if (this.logged.bytes >= LOGGED_PENDING_BYTES_MAX) return;
    const generation = this.unflushedGeneration++;
    const puts = this.unflushed.entries();
    if (this.logged.size === 0) this.logged = this.unflushed;
    else for (const [key, record] of puts) this.logged.set(key, HASH_UNKNOWN, record);
    this.unflushed = new PendingWrites();
    this.unflushedWaiters = 0;
    this.loggedPendingGeneration = generation;
    this.logInFlightGeneration = generation;
    this.outbox.push({ kind: 'log', fragment: this.fragment, generation, puts });
  }

  /** Log mode: hands every logged generation to the store in one commit, when none is in flight. */
  private maybeCommitLogged(): void {
    if (this.flushingGeneration !== 0 || this.logged.size === 0) return;
    if (this.commitFailures > 0 && this.nowMs < this.commitRetryAtMs) return;
    const layer = this.logged;
    this.logged = new PendingWrites();
    this.startCommit(layer, this.loggedPendingGeneration);
  }

  private onLogged(generation: number): void {
    assert(generation === this.logInFlightGeneration, `logged generation ${generation} is not in flight`);
    this.logInFlightGeneration = 0;
    this.loggedMaxGeneration = generation;
    if (this.logFailedGeneration === 0) this.loggedGeneration = generation;
    this.settle(this.commitWaiters, this.storeFence(), undefined);
    this.maybeSync();
    this.maybeCommit();
  }

  /** The append failed: the generation's `store` replies wait for its commit instead (its `stable` ones, the store's flush). */
  private onLogFailed(generation: number): void {
    assert(generation === this.logInFlightGeneration, `failed log ${generation} is not in flight`);
    this.logInFlightGeneration = 0;
    this.logFailedGeneration = generation;
    this.maybeCommit();
  }

  private maybeSync(): void {
    if (this.syncInFlightGeneration !== 0) return;
    const fence = this.storeFence();
    if (this.stableWaiters.oldest > fence) return;
    this.syncInFlightGeneration = fence;
    this.outbox.push({ kind: 'sync', fragment: this.fragment, generation: fence });
  }

  private onCommitted(generation: number): void {
    assert(generation === this.flushingGeneration, `committed generation ${generation} is not in flight`);
    this.flushing = new PendingWrites();
    this.flushingGeneration = 0;
    this.committedGeneration = generation;
    this.commitFailures = 0;
    if (this.logFailedGeneration !== 0 && generation >= this.logFailedGeneration) {
      // Every generation whose append failed is in the store now.
      this.logFailedGeneration = 0;
      this.loggedGeneration = this.loggedMaxGeneration;
    }
    this.settle(this.commitWaiters, this.storeFence(), undefined);
    this.settle(this.visibleWaiters, generation, undefined);
    this.maybeSync();
    this.maybeCommit();
  }

  private onCommitFailed(generation: number, message: string): void {
    assert(generation === this.flushingGeneration, `failed generation ${generation} is not in flight`);
    // Keep the writes for the next commit: entries already superseded in `unflushed` stay newer.
    // (Decided before any is put back: a key may appear twice in the list, the later entry newer.)
    if (this.config.logsWrites === true) {
      // Logged already: back to `logged`, for the next commit, unless `logged` holds a newer write.
      // One only `unflushed` holds newer goes back too: the next commit, of `logged`, answers this
      // generation's waiters, so it must hold their writes.
      const kept = this.flushing
        .entries()
        .filter(([key]) => this.logged.get(key, HASH_UNKNOWN) === undefined);
      for (const [key, record] of kept) this.logged.set(key, HASH_UNKNOWN, record);
      this.loggedPendingGeneration = Math.max(this.loggedPendingGeneration, generation);
    } else {
      const kept = this.flushing
        .entries()
        .filter(([key]) => this.unflushed.get(key, HASH_UNKNOWN) === undefined);
      for (const [key, record] of kept) this.restage(key, record);
    }
    this.flushing = new PendingWrites();
    this.flushingGeneration = 0;
    this.commitFailures++;
    this.commitError = message;
    this.commitRetryAtMs =
      this.nowMs +
      Math.min(COMMIT_RETRY_DELAY_MS_MAX, COMMIT_RETRY_DELAY_MS_MIN * 2 ** (this.commitFailures - 1));
    // Until COMMIT_ATTEMPTS_MAX failures in a row, the waiters wait for the retry: their writes are
    // in its generation (or superseded there), and a commit answers every waiter of an older one.
    if (!this.storeFailing()) return;
    this.settle(this.commitWaiters, generation, message);
    this.settle(this.stableWaiters, generation, message);
    this.settle(this.visibleWaiters, generation, message);
  }

  private onSynced(generation: number): void {
    assert(generation === this.syncInFlightGeneration, `synced generation ${generation} was not requested`);
    this.syncInFlightGeneration = 0;
    this.syncedGeneration = generation;
    this.settle(this.stableWaiters, generation, undefined);
    this.maybeSync();
  }

  private onSyncFailed(generation: number, message: string): void {
    assert(generation === this.syncInFlightGeneration, `failed sync ${generation} was not requested`);
    this.syncInFlightGeneration = 0;
    this.settle(this.stableWaiters, generation, message);
    this.maybeSync();
  }

  /**
   * Answers the waiters whose generation is ≤ `generation`: with the answer each holds, or, given
   * the store's `failure`, with StorageFailed and it. The ops first, then the direct writes in one
   * `acks` action.
   */
  private settle(waiters: DurabilityWaiters, generation: number, failure: string | undefined): void {
    const n = waiters.opsUpTo(generation);
    for (let i = 0; i < n; i++) {
      const op = waiters.opAt(i);
      if (failure === undefined) this.outbox.push(op);
      else this.reply(op, Reply.StorageFailed, undefined, false, failure);
    }
    waiters.dropOps(n);
    const reqIds = waiters.takeDirect(generation);
    if (reqIds === undefined) return;
    const reply = failure === undefined ? Reply.Applied : Reply.StorageFailed;
    this.outbox.push({ kind: 'acks', reply, text: failure ?? '', reqIds });
  }

  /** Sends an op's answer (the op itself is the action), or with no op the direct write `reqId`'s Applied. */
  private send(op: FragmentOp | undefined, reqId: number): void {
    if (op !== undefined) this.outbox.push(op);
    else this.acksAction(Reply.Applied, '').reqIds.push(reqId);
  }

  /**
   * The `acks` action that direct writes answered `reply` (`text`) join: the one at the end of the
   * outbox when it carries the same answer, so a run of direct writes costs one action, else a new one.
   */
  private acksAction(reply: Reply, text: string): AcksAction {
    const outbox = this.outbox;
    const last = outbox.length > 0 ? outbox[outbox.length - 1] : undefined;
    if (last !== undefined && last.kind === 'acks' && last.reply === reply && last.text === text) return last;
    const acks: AcksAction = { kind: 'acks', reply, text, reqIds: [] };
    outbox.push(acks);
    return acks;
  }

  private reply(op: FragmentOp, reply: Reply, record: Uint8Array | undefined, prior: boolean, text: string) {
    this.answer(op, reply, record, prior, text);
    this.outbox.push(op);
  }

  /** Sets the op's answer; it is sent when the op reaches the outbox. */
  private answer(op: FragmentOp, reply: Reply, record: Uint8Array | undefined, prior: boolean, text: string) {
    op.reply = reply;
    op.replyRecord = record;
    op.prior = prior;
    op.text = text;
  }

  /** Canonical text of the state, for golden tests. */
  describe(): string {
    const pending = (m: PendingWrites) =>
      m
        .entries()
        .map(([k, r]) => `${JSON.stringify(latin1(k))}=${describeRecord(r)}`)
        .join(' ');
    const lines = [
      `queued high=${this.queues[0].length} default=${this.queues[1].length} background=${this.queues[2].length}` +
        ` shed=${this.shed.join('/')}`,
      `unflushed gen=${this.unflushedGeneration} [${pending(this.unflushed)}]`,
      ...(this.config.logsWrites === true
        ? [
            `logged gen=${this.loggedPendingGeneration} [${pending(this.logged)}] in-flight=${this.logInFlightGeneration}` +
              ` logged=${this.loggedGeneration}${this.logFailedGeneration !== 0 ? ` log-failed=${this.logFailedGeneration}` : ''}`,
          ]
        : []),
      `flushing gen=${this.flushingGeneration} [${pending(this.flushing)}]`,
      `committed=${this.committedGeneration} synced=${this.syncedGeneration} sync-in-flight=${this.syncInFlightGeneration}` +
        ` waiting store=${this.commitWaiters.length} stable=${this.stableWaiters.length}` +
        (this.visibleWaiters.length > 0 ? ` visible=${this.visibleWaiters.length}` : '') +
        (this.commitFailures > 0
          ? ` commit-failures=${this.commitFailures} retry-at=${this.commitRetryAtMs}`
          : ''),
    ];
    return lines.join('\n');
  }
}

/**
 * Answers waiting for a generation to reach a durability level: ops, their answers set on them, and
 * direct writes, of which only the request id is kept (parallel arrays: no object per write). Each
 * kind is in arrival order, which is generation order.
 */
class DurabilityWaiters {
  private readonly ops: FragmentOp[] = [];
  private directReqIds: number[] = [];
  private readonly directGenerations: number[] = [];

  get length(): number {
    return this.ops.length + this.directReqIds.length;
  }

  /** The generation the oldest waits for; Infinity when none waits. */
  get oldest(): number {
    const op = this.ops.length > 0 ? this.ops[0].generation : Number.POSITIVE_INFINITY;
    return this.directGenerations.length > 0 ? Math.min(op, this.directGenerations[0]) : op;
  }

  /** Adds `op`, or with no op the direct write `reqId`, waiting for `generation`. */
  push(op: FragmentOp | undefined, reqId: number, generation: number): void {
    if (op !== undefined) {
      op.generation = generation;
      this.ops.push(op);
    } else {
      this.directReqIds.push(reqId);
      this.directGenerations.push(generation);
    }
  }

  /** How many ops, from the oldest, wait for generations ≤ `generation`. */
  opsUpTo(generation: number): number {
    const ops = this.ops;
    let n = 0;
    while (n < ops.length && ops[n].generation <= generation) n++;
    return n;
  }

  opAt(index: number): FragmentOp {
    return this.ops[index];
  }

  /** Removes the `n` oldest ops (moving the rest down: no array is allocated). */
  dropOps(n: number): void {
    if (n === 0) return;
    if (n < this.ops.length) this.ops.copyWithin(0, n);
    this.ops.length -= n;
  }

  /** Removes and returns the ids of direct writes waiting for generations ≤ `generation`, if any. */
  takeDirect(generation: number): number[] | undefined {
    const generations = this.directGenerations;
    let n = 0;
    while (n < generations.length && generations[n] <= generation) n++;
    if (n === 0) return undefined;
    if (n < generations.length) {
      generations.copyWithin(0, n);
      generations.length -= n;
      return this.directReqIds.splice(0, n);
    }
    // All of them (the usual case): their array becomes the action's.
    generations.length = 0;
    const all = this.directReqIds;
    this.directReqIds = [];
    return all;
  }
}

/** A key or record of no bytes, for the direct event before its first write. */
const NO_BYTES = new Uint8Array(0);

/** COPY onto itself, in Redis's words. */
export const SAME_OBJECT = 'ERR source and destination objects are the same';

const MODIFY_REPLIES: Record<ModifyAnswer, Reply> = {
  [ModifyAnswer.Done]: Reply.Applied,
  [ModifyAnswer.NotDone]: Reply.NotApplied,
  [ModifyAnswer.Missing]: Reply.NotFound,
  [ModifyAnswer.Integer]: Reply.Integer,
  [ModifyAnswer.Text]: Reply.Text,
  [ModifyAnswer.Refused]: Reply.Refused,
};

/** Canonical text of one action, for golden tests. */
export function describeAction(action: FragmentAction): string {
  if (action instanceof FragmentOp) {
    const extra = action.replyRecord !== undefined ? ` ${describeRecord(action.replyRecord)}` : '';
    const message = action.text ? ` (${action.text})` : '';
    return `reply req=${action.reqId} ${REPLY_NAMES[action.reply]}${action.prior ? ' prior' : ''}${extra}${message}`;
  }
  switch (action.kind) {
    case 'acks':
      return `acks ${REPLY_NAMES[action.reply]} req=${action.reqIds.join(',')}${action.text ? ` (${action.text})` : ''}`;
    case 'commit': {
      const keys = action.puts.map(([k, r]) => `${JSON.stringify(latin1(k))}=${describeRecord(r)}`);
      return `commit gen=${action.generation} high-water=${action.highWaterWallMs} [${keys.join(' ')}]`;
    }
    case 'log': {
      const keys = action.puts.map(([k, r]) => `${JSON.stringify(latin1(k))}=${describeRecord(r)}`);
      return `log gen=${action.generation} [${keys.join(' ')}]`;
    }
    case 'sync':
      return `sync gen=${action.generation}`;
  }
}
