// The driver of one worker thread: it turns request records into events for its fragments' actors
// (FragmentCore) and carries out the actions they return. Its parts, each owning its state:
//   fragment-actors.ts  the fragments served and their actors (where a fragment is opened)
//   turn-reader.ts      a turn's records copied out of the request ring
//   commit-loop.ts      one store transaction per turn's commits, one fsync per gathered sync
//   result-writer.ts    replies and other records to the main thread, one publish per turn
//   ttl-sweeper.ts      the paced TTL sweep
//   pool-spans.ts       reads done in the background pool
//   replication.ts      the fragments' replication senders and the serving side of peers'
// This file keeps the turn itself: decode, run the active actors, carry out their actions, publish;
// and the placement the main thread changes at runtime: a fragment held (opened, its replica list
// set) or dropped (closed, its data removed), one change of a fragment at a time.

import { getHeapStatistics } from 'node:v8';
import pino, { type Logger } from 'pino';
import { assert } from '../core/assert.js';
import { readU32LE } from '../core/bytes.js';
import type { WallClock } from '../core/clock.js';
import {
  asStorageError,
  ErrorKind,
  internalError,
  invalidInput,
  storageError,
  TesseraError,
} from '../core/errors.js';
import {
  type CommitAction,
  type FragmentAction,
  type FragmentCore,
  FragmentOp,
  type LogAction,
} from '../core/fragment.js';
import { FRAGMENT_TURN_OPS_MIN, WORKER_TURN_OPS_MAX } from '../core/limits.js';
import { Durability, OpKind, Priority, Reply } from '../core/ops.js';
import type { PendingEntry } from '../core/pending-writes.js';
import { type AckLevel, isAckLevel } from '../core/replication-sender.js';
import type { KvStore } from '../native-bindings/kv-store.js';
import { SystemClock } from '../threads/driver-clock.js';
import { FragmentBoard } from '../threads/fragment-board.js';
import type { WorkerInit } from '../threads/messages.js';
import {
  controlFragment,
  controlPayloadAt,
  DRAINED_CONTINUOUS,
  isFragmentOpKind,
  type ModifyParams,
  PEER_HEADER_BYTES,
  type PeerWait,
  peerOf,
  peerStateUp,
  peerTakesFragmentAbsent,
  REQUEST_HEADER_BYTES,
  RequestKind,
  ResultKind,
  readHoldReplicas,
  readMembersRequest,
  readModifyParams,
  readPeerWait,
  readReplicaWaitParams,
  readScanRequest,
  reconcileIsUrgent,
  reconcileVerifies,
  requestDurability,
  requestForScan,
  requestFragment,
  requestHeaderOnly,
  requestId,
  requestKeyAndWaitBytes,
  requestKeyBytes,
  requestPriority,
  requestReplicaWait,
  requestWantsPrior,
  type ScanRequest,
} from '../threads/op-codec.js';
import { type DrainLoop, drainLoop, RingReader, RingWriter, ringWakeupsRecovered } from '../threads/ring.js';
import { RingOutbox } from '../threads/ring-outbox.js';
import { encodeWorkerHealth, type WorkerHealthReport } from '../threads/worker-health.js';
import { CommitLoop } from './commit-loop.js';
import { FragmentActors, fenced } from './fragment-actors.js';
import { PoolSpans } from './pool-spans.js';
import { ReplicaWaits } from './replica-waits.js';
import { WorkerReplication } from './replication.js';
import { DrainWaiters } from './replication-drain.js';
import { ResultWriter, writeOpReply } from './result-writer.js';
import { collectScanPage, withPending } from './scan-page.js';
import { TtlSweeper } from './ttl-sweeper.js';
import { type RecordDecoder, TurnReader } from './turn-reader.js';

const EMPTY_KEY = Buffer.alloc(0);
/** Fences a dropping fragment may need before its actor holds nothing (one, unless the store failed). */
const DROP_FENCES_MAX = 3;

export class WorkerRuntime implements RecordDecoder {
  private readonly actors: FragmentActors;
  private readonly turns: TurnReader;
  private readonly results: ResultWriter;
  private readonly commits: CommitLoop;
  private readonly sweeper: TtlSweeper;
  private readonly pool: PoolSpans | undefined;
  private readonly replication: WorkerReplication | undefined;
  private readonly drainWaiters: DrainWaiters;
  private readonly replicaWaits: ReplicaWaits;
  private drain: DrainLoop | undefined;
  /** Fragments that received requests this turn and must run. */
  private readonly active: FragmentCore[] = [];
  /** 1 for a fragment already in `active`: a per-operation check cheaper than a Set's. */
  private readonly activeMark: Uint8Array;
  /** The wall clock read at the start of the turn being decoded. */
  private turnNowMs = 0;
  /** Fragments whose uncommitted state may have changed since the board was last updated. */
  private readonly touched = new Set<FragmentCore>();
  private readonly board: FragmentBoard;
  private readonly actions: FragmentAction[] = [];
  private readonly requestEvent: { kind: 'request'; op: FragmentOp } = { kind: 'request', op: undefined! };
  /** Scans waiting for their fence (reqId → request). */
  private readonly scans = new Map<number, ScanRequest>();
  private wakeTimer: NodeJS.Timeout | undefined;
  private wakeAtMs = Number.POSITIVE_INFINITY;
  private immediatePending = false;
  private closing = false;
  private readonly logger: Logger;
  /** Per fragment, its last hold or drop, which the next one waits for. */
  private readonly placementTasks = new Map<number, Promise<void>>();

  /** Opens the worker's fragments over `store` and makes its driver; `start` then serves the ring. */
  static async open(
    init: WorkerInit,
    store: KvStore,
    clock: WallClock = new SystemClock(),
  ): Promise<WorkerRuntime> {
    const runtime = new WorkerRuntime(init, store, clock);
    const clustered = init.cluster !== undefined;
    for (const fragment of init.fragments) {
      // In a cluster every actor keeps its writes for the senders: its replica list may change.
      await runtime.actors.open(fragment, clustered);
      if (!clustered) continue;
      // A copy that cannot be read counts as held: its handoff is retried, a copy left out is lost.
      const page = await store.page(fragment, undefined, undefined, 1, true).catch(() => undefined);
      if (page === undefined || page.length > 0) runtime.stored.push(fragment);
    }
    // The store may hold what the last worker only logged (replayed at its opening): the main
    // thread renews its read snapshot.
    if (store.logsWrites) runtime.board.markCommitted();
    if (store.replayed !== undefined) runtime.logger.info(store.replayed, 'write-ahead log replayed');
    return runtime;
  }

  /** In a cluster, the fragments opened at the start that held a record then (a copy on disk). */
  readonly stored: number[] = [];

  private constructor(
    private readonly init: WorkerInit,
    private readonly store: KvStore,
    private readonly clock: WallClock,
  ) {
    this.turns = new TurnReader(new RingReader(init.requestRing));
    this.results = new ResultWriter(new RingOutbox(new RingWriter(init.resultRing)));
    this.board = new FragmentBoard(init.board, init.store.fragmentCount);
    // A restarted worker's memory store starts empty: the main thread's bound must see it so.
    this.board.setMemoryBytes(init.index, store.memoryBytes());
    this.activeMark = new Uint8Array(init.store.fragmentCount);
    this.logger = pino({ level: init.logLevel, base: { pid: process.pid, worker: init.index } });
    this.actors = new FragmentActors(init.fragment, store, clock, init.store.fragmentCount);
    this.commits = new CommitLoop(
      { worker: init.index, evictAboveBytes: init.evictAboveBytes },
      store,
      this.board,
      {
        core: (fragment) => this.actors.of(fragment),
        collect: (core) => this.collect(core),
        afterAsync: (fn) => this.afterAsync(fn),
      },
      this.logger,
      clock,
    );
    const pool = store.sharesReaders ? new PoolSpans(this.results) : undefined;
    this.pool = pool;
    this.sweeper = new TtlSweeper(
      init,
      store,
      pool,
      {
        fragments: () => this.actors.fragments(),
        core: (fragment) => this.actors.find(fragment),
        committed: (core) => this.fence(core, Durability.Store),
        sweepPage: (core, nowMs, entries) => {
          core.step({ kind: 'sweep', nowMs, entries });
          this.collect(core);
          this.carryOut();
        },
      },
      this.logger,
      clock,
    );
    this.replication =
      init.cluster === undefined
        ? undefined
        : new WorkerReplication(init.cluster, init.fragments, init.store.fragmentCount, init.restarted, {
            core: (fragment) => this.actors.find(fragment),
            submit: (core, op) => this.submit(core, op),
            sendFrame: (member, envelope) => this.results.peerFrame(member, envelope),
            closePeer: (member, reason) => this.results.peerClose(member, reason),
            pool,
            store,
            logger: this.logger,
            clock: new SystemClock(),
            roundEnded: (report) => this.results.roundReport(ResultKind.RoundReport, 0, report),
            roundAnswer: (reqId, report) => this.results.roundReport(ResultKind.RoundAnswer, reqId, report),
            roundProgress: (report) => this.results.roundReport(ResultKind.RoundProgress, 0, report),
          });
    const replication = this.replication;
    this.drainWaiters = new DrainWaiters(
      () => replication === undefined || replication.drained(),
      (reqId, drained, detail) => {
        this.results.ack(drained ? Reply.Applied : Reply.NotApplied, detail, reqId);
        this.results.publish();
      },
    );
    this.replicaWaits = new ReplicaWaits({
      positionOf: (fragment) => replication?.positionOf(fragment) ?? -1,
      forEachSender: (fragment, visit) => replication?.forEachSender(fragment, visit),
      flush: (fragment, throughOps, level) => replication?.flush(fragment, throughOps, level),
      answer: (reply, detail, reqId) => {
        this.results.ack(reply, detail, reqId);
        this.results.publish();
      },
      answerText: (reply, reqId, text) => {
        this.results.text(reply, 0, reqId, text);
        this.results.publish();
      },
      answerWrite: (write, reached) => {
        writeOpReply(write, this.results, reached);
        this.results.publish();
      },
      clock: new SystemClock(),
    });
    if (replication !== undefined)
      replication.ackListener = (fragment) => this.replicaWaits.onAcked(fragment);
  }

  /** Newest timestamp stored in any of this worker's fragments, to seed the node's clock. */
  highWaterWallMs(): number {
    return this.actors.highWaterWallMs();
  }

  start(): void {
    this.drain = drainLoop(this.turns.ring, () => this.onBatch());
    this.sweeper.start();
  }

  private onBatch(): void {
    const nowMs = this.clock.nowMs();
    this.turnNowMs = nowMs;
    this.turns.read(this);
    this.runActive(nowMs);
  }

  /** One request record of the turn (`buf` is the turn's own copy of it). */
  decode(buf: Buffer, at: number, length: number): void {
    const kind = buf[at];
    const reqId = requestId(buf, at);
    if (isFragmentOpKind(kind)) return this.decodeFragmentOp(buf, at, length, kind, reqId);
    switch (kind) {
      case RequestKind.Scan:
        return this.admitScan(buf, at, reqId);
      case RequestKind.Health:
        return this.results.text(ResultKind.Health, 0, reqId, encodeWorkerHealth(this.health()));
      case RequestKind.Crash:
        setImmediate(() => {
          throw new Error(`worker ${this.init.index} crashed on request (test hook)`);
        });
        return;
      case RequestKind.FailCommits:
        this.commits.failNextCommits(readU32LE(buf, controlPayloadAt(at)));
        return this.results.ack(Reply.Applied, 0, reqId);
      case RequestKind.Backup:
        return this.backup(reqId, buf.toString('utf8', controlPayloadAt(at), at + length));
      case RequestKind.Close:
        void this.close(reqId);
        return;
      case RequestKind.PeerFrame:
        this.replication?.onFrame(peerOf(buf, at), buf.subarray(at + PEER_HEADER_BYTES, at + length));
        return this.drainWaiters.check();
      case RequestKind.PeerState:
        this.replication?.onPeerState(
          peerOf(buf, at),
          peerStateUp(buf, at),
          peerTakesFragmentAbsent(buf, at),
        );
        return this.drainWaiters.check();
      case RequestKind.DrainReplication:
        return this.drainWaiters.add(reqId, readU32LE(buf, controlPayloadAt(at)));
      case RequestKind.PoolSpanResult:
        return this.pool?.onResult(reqId, buf, at, length);
      case RequestKind.HoldFragment:
        return this.changePlacement(reqId, controlFragment(buf, at), readHoldReplicas(buf, at));
      case RequestKind.DropFragment:
        return this.changePlacement(reqId, controlFragment(buf, at), undefined);
      case RequestKind.AddMembers: {
        const { first, nodeIds } = readMembersRequest(buf, at);
        this.replication?.addMembers(first, nodeIds);
        return this.results.ack(Reply.Applied, 0, reqId);
      }
      case RequestKind.ReconcileNow:
        return this.reconcileNow(
          reqId,
          controlFragment(buf, at),
          readPeerWait(buf, at),
          reconcileVerifies(buf, at),
          reconcileIsUrgent(buf, at),
        );
      case RequestKind.DrainedTo:
        return this.drainedTo(reqId, controlFragment(buf, at), readPeerWait(buf, at));
      default:
        assert(false, `unknown request kind ${kind}`);
    }
  }

  private decodeFragmentOp(buf: Buffer, at: number, length: number, kind: OpKind, reqId: number): void {
    const fragment = requestFragment(buf, at);
    const core = this.actors.find(fragment);
    if (core === undefined) {
      return this.results.error(
        ErrorKind.Internal,
        reqId,
        `fragment ${fragment} is not served by this worker`,
      );
    }
    // Key and record are views of the turn's copy.
    const keyBytes = requestKeyBytes(buf, at);
    const bodyAt = at + REQUEST_HEADER_BYTES;
    const bodyEnd = at + length;
    const key = this.turns.view(bodyAt, keyBytes);
    let recordAt = bodyAt + requestKeyAndWaitBytes(buf, at);
    let params: ModifyParams | undefined;
    if (kind === OpKind.Modify) {
      params = readModifyParams(buf.subarray(bodyAt, bodyEnd), recordAt - bodyAt);
      recordAt = bodyAt + params.end;
    }
    const record = recordAt < bodyEnd ? this.turns.view(recordAt, bodyEnd - recordAt) : EMPTY_KEY;
    const priority = requestPriority(buf, at);
    const durability = requestDurability(buf, at);
    const wantsPrior = requestWantsPrior(buf, at);
    const replicaWait = requestReplicaWait(buf, at);
    if (
      kind === OpKind.Write &&
      !wantsPrior &&
      !replicaWait &&
      core.tryDirectWrite(reqId, priority, durability, key, record, this.turnNowMs)
    ) {
      this.activate(core);
      return;
    }
    const op = new FragmentOp(kind, reqId, priority, durability, key, record);
    op.headerOnly = requestHeaderOnly(buf, at);
    op.wantsPrior = wantsPrior;
    if (kind === OpKind.Fence) {
      op.answersWhileFailing = requestForScan(buf, at);
      if (replicaWait) {
        op.durabilityOnly = true;
        this.replicaWaits.admit(op, fragment, readReplicaWaitParams(buf, at));
      }
    }
    if (params !== undefined) {
      op.modifier = params.modifier;
      op.flags = params.flags;
      op.arg = params.arg;
      op.operand = params.operand;
    }
    // A write's wait is a fence right behind it: the write is answered once both are in.
    const fence =
      replicaWait && kind !== OpKind.Fence
        ? this.replicaWaits.admitWrite(op, fragment, readReplicaWaitParams(buf, at))
        : undefined;
    this.requestEvent.op = op;
    core.step(this.requestEvent);
    if (fence !== undefined) {
      this.requestEvent.op = fence;
      core.step(this.requestEvent);
    }
    this.activate(core);
  }

  /** A scan first fences its fragment (commits pending writes), then reads the store in order. */
  private admitScan(buf: Buffer, at: number, reqId: number): void {
    const { scan, priority } = readScanRequest(buf, at);
    const core = this.actors.find(scan.fragment);
    if (core === undefined) {
      return this.results.error(
        ErrorKind.Internal,
        reqId,
        `fragment ${scan.fragment} is not served by this worker`,
      );
    }
    this.scans.set(reqId, scan);
    const fence = new FragmentOp(OpKind.Fence, reqId, priority, Durability.Store, EMPTY_KEY, EMPTY_KEY);
    fence.answersWhileFailing = true;
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

  /** Takes the actions `core` produced, to be carried out with the turn's. */
  private collect(core: FragmentCore): void {
    core.takeActions(this.actions);
    this.touched.add(core);
  }

  private runActive(nowMs: number): void {
    const active = this.active;
    const budget = Math.max(
      FRAGMENT_TURN_OPS_MIN,
      Math.floor(WORKER_TURN_OPS_MAX / Math.max(1, active.length)),
    );
    for (let i = 0; i < active.length; i++) {
      const core = active[i];
      core.step({ kind: 'run', nowMs, budget });
      this.collect(core);
    }
    this.replication?.afterRun(active);
    this.drainWaiters.check();
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
      const logs: LogAction[] = [];
      for (const action of this.actions) {
        if (action instanceof FragmentOp) this.sendReply(action);
        else if (action.kind === 'acks') this.answerDirect(action.reply, action.text, action.reqIds);
        else if (action.kind === 'commit') commits.push(action);
        else if (action.kind === 'log') logs.push(action);
        else this.commits.requestSync(action.fragment, action.generation);
      }
      this.actions.length = 0;
      // Logged before committed: a commit's writes are all in the log before it starts.
      if (logs.length > 0) this.commits.log(logs);
      if (commits.length > 0) {
        this.publish();
        this.commits.commit(commits);
      }
    }
    this.commits.startSyncIfIdle();
    this.publish();
  }

  /** Updates the board for every fragment touched since the last publish, then publishes. */
  private publish(): void {
    for (const core of this.touched) this.board.setDirty(core.fragment, core.hasUncommitted());
    this.touched.clear();
    this.results.publish();
  }

  /** Runs `fn` from a store callback, then carries out what it produced. */
  private afterAsync(fn: () => void): void {
    fn();
    this.carryOut();
    this.scheduleWake(this.clock.nowMs());
  }

  /** Sends the answer of direct writes (`FragmentCore.tryDirectWrite`). */
  private answerDirect(reply: Reply, text: string, reqIds: number[]): void {
    if (text === '') for (const reqId of reqIds) this.results.ack(reply, 0, reqId);
    else for (const reqId of reqIds) this.results.text(reply, 0, reqId, text);
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
        void this.runScan(op.reqId, scan, this.actors.of(scan.fragment).pendingRecords());
        return;
      }
    }
    writeOpReply(op, this.results);
  }

  /**
   * Reads one page of live entries from the (fenced) store, filtered by the pattern; `pending`: the
   * fragment's uncommitted writes, laid over an unfenced store.
   */
  private async runScan(reqId: number, scan: ScanRequest, pending?: PendingEntry[]): Promise<void> {
    try {
      const source = pending === undefined ? this.store : withPending(this.store, pending);
      const page = await collectScanPage(source, scan, this.clock.nowMs());
      this.results.scanPage(reqId, page.done, page.resumeKey, page.entries);
    } catch (err) {
      this.results.error(ErrorKind.Storage, reqId, asStorageError(err).message);
    }
    this.results.publish();
  }

  /** Copies this worker's part of the store into a backup (LevelDB: only its owner can read it). */
  private backup(reqId: number, targetDataDir: string): void {
    this.store.backup(targetDataDir).then(
      () => this.afterAsync(() => this.results.ack(Reply.Applied, 0, reqId)),
      (err: unknown) =>
        this.afterAsync(() => {
          const error = err instanceof TesseraError ? err : asStorageError(err);
          this.results.error(error.kind, reqId, error.message);
        }),
    );
  }

  /** Keeps one timer for the earliest fragment deadline, and an immediate when work is runnable now. */
  private scheduleWake(nowMs: number): void {
    if (this.closing) return;
    let wait = Number.POSITIVE_INFINITY;
    for (const f of this.actors.fragments()) {
      const core = this.actors.of(f);
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
    const nowMs = this.clock.nowMs();
    for (const f of this.actors.fragments()) {
      const core = this.actors.of(f);
      core.step({ kind: 'tick', nowMs });
      this.touched.add(core);
      if (core.runnable(nowMs)) this.activate(core);
      else core.takeActions(this.actions);
    }
    this.runActive(nowMs);
  }

  /**
   * Holds `fragment` with `replicas` (member indices), or drops it (`replicas` undefined), after
   * the fragment's change before; answers Applied, or the error.
   */
  private changePlacement(reqId: number, fragment: number, replicas: number[] | undefined): void {
    const before = this.placementTasks.get(fragment) ?? Promise.resolve();
    const task = before.then(() =>
      replicas === undefined ? this.drop(fragment) : this.hold(fragment, replicas),
    );
    const settled = task.then(
      () => this.afterAsync(() => this.results.ack(Reply.Applied, 0, reqId)),
      (err: unknown) =>
        this.afterAsync(() => {
          const error = err instanceof TesseraError ? err : asStorageError(err);
          this.results.error(error.kind, reqId, error.message);
        }),
    );
    this.placementTasks.set(fragment, settled);
    void settled.then(() => {
      if (this.placementTasks.get(fragment) === settled) this.placementTasks.delete(fragment);
    });
  }

  /** Opens the fragment unless it is open, and sets its replica list. The same call twice changes nothing. */
  private async hold(fragment: number, replicas: number[]): Promise<void> {
    if (this.closing) throw internalError(`worker ${this.init.index} is closing`);
    const replication = this.replication;
    if (replication !== undefined) {
      const self = this.init.cluster!.selfIndex;
      const count = replication.memberCount();
      if (!replicas.includes(self) || replicas.some((m) => m >= count))
        throw invalidInput(
          `replicas [${replicas.join(', ')}] of fragment ${fragment} must name this node (member ${self}) and known members only (${count})`,
        );
    }
    const gained = this.actors.find(fragment) === undefined;
    await this.actors.open(fragment, this.init.cluster !== undefined);
    replication?.setReplicas(fragment, replicas, gained);
    this.drainWaiters.check();
  }

  /**
   * Stops serving the fragment and removes its data. Operations for it are refused from now on;
   * its senders close at once (their backlog dropped); what its actor admitted before runs out
   * under a fence, so nothing of it is committed after its data is removed. A fragment the worker
   * does not hold has its data removed too (a drop the main thread repeats after a restart).
   */
  private async drop(fragment: number): Promise<void> {
    const core = this.actors.held(fragment);
    this.actors.leave(fragment);
    this.replication?.removeFragment(fragment);
    this.drainWaiters.check();
    if (core !== undefined) {
      for (let fences = 0; !core.idle(); fences++) {
        if (fences === DROP_FENCES_MAX)
          throw storageError(`fragment ${fragment} still holds writes after ${fences} fences; drop it again`);
        // Idle needs the commit (a `store` fence) and the sync (a `stable` one): over a write-ahead
        // log the second is reached before the first.
        await this.fence(core, Durability.Store);
        await this.fence(core);
      }
      this.actors.close(fragment);
    } else {
      await this.store.openFragment(fragment);
    }
    // Everything it admitted is committed now: a fragment whose store holds no key (one released at
    // the start, never written) has nothing to remove, and its removal would be a write transaction.
    const empty = (await this.store.page(fragment, undefined, undefined, 1, true)).length === 0;
    if (!empty) await this.store.dropFragment(fragment);
    this.board.setDirty(fragment, false);
    // The main thread renews its read snapshot: a read of this fragment there sees it empty.
    if (!empty) this.board.markCommitted();
  }

  /**
   * Resolves once everything `core` admitted is answered and at `durability` (rejects when the store
   * failed).
   */
  private fence(core: FragmentCore, durability: Durability = Durability.Stable): Promise<void> {
    const reached = fenced((fence) => this.submit(core, fence), Priority.Background, durability);
    this.scheduleWake(this.clock.nowMs());
    return reached;
  }

  /** Queues an op this worker issued itself into `core`'s actor, to run this turn. */
  private submit(core: FragmentCore, op: FragmentOp): void {
    this.requestEvent.op = op;
    core.step(this.requestEvent);
    this.activate(core);
  }

  /** The actor of `fragment` while this worker serves it (for its RESP port). */
  actorOf(fragment: number): FragmentCore | undefined {
    return this.actors.find(fragment);
  }

  /**
   * Queues an op from this worker's RESP port (its reply goes to `op.sink`); the actors run once
   * this turn's I/O is read, with everything else queued by then.
   */
  submitLocal(core: FragmentCore, op: FragmentOp): void {
    this.submit(core, op);
    if (this.localRunScheduled) return;
    this.localRunScheduled = true;
    setImmediate(this.runLocal);
  }

  private localRunScheduled = false;
  private readonly runLocal = (): void => {
    this.localRunScheduled = false;
    if (!this.closing) this.runActive(this.clock.nowMs());
  };

  /** The store this worker's fragments live in (a RESP port reads committed keys straight from it). */
  get kvStore(): KvStore {
    return this.store;
  }

  /** The node-wide fragment board (the memory store's size, for a RESP port's memory bound). */
  get fragmentBoard(): FragmentBoard {
    return this.board;
  }

  private reconcileNow(
    reqId: number,
    fragment: number,
    wait: PeerWait,
    verify: boolean,
    urgent: boolean,
  ): void {
    if (this.replication?.reconcileNow(reqId, fragment, wait.member, wait.timeoutMs, verify, urgent) !== true)
      this.results.error(ErrorKind.InvalidInput, reqId, noSender(fragment, wait.member));
  }

  /**
   * Answers once `fragment`'s sender toward the member is drained — of every write admitted before
   * the request too: those still queued at the actor are applied, and so handed to the sender,
   * before it is looked at. The answer's detail says whether the sender's continuity is the one the
   * request named (DRAINED_CONTINUOUS) when it is sent.
   */
  private drainedTo(reqId: number, fragment: number, wait: PeerWait): void {
    const replication = this.replication;
    if (replication?.drainedTo(fragment, wait.member) === undefined)
      return this.results.error(ErrorKind.InvalidInput, reqId, noSender(fragment, wait.member));
    const level = wait.level === 0 ? replication.requiredAck : wait.level;
    if (!isAckLevel(level))
      return this.results.error(
        ErrorKind.InvalidInput,
        reqId,
        `a drain at ACK level ${level} cannot be told`,
      );
    const core = this.actors.find(fragment);
    if (core === undefined) return this.waitDrained(reqId, fragment, level, wait);
    this.fence(core, Durability.Memory).then(
      () => this.waitDrained(reqId, fragment, level, wait),
      (err: Error) => {
        this.results.error(ErrorKind.Storage, reqId, err.message);
        this.results.publish();
      },
    );
  }

  /** DrainedTo, once the writes admitted before it were handed to the senders. */
  private waitDrained(reqId: number, fragment: number, level: AckLevel, wait: PeerWait): void {
    const { member } = wait;
    const replication = this.replication!;
    if (replication.drainedTo(fragment, member) === undefined) {
      this.results.error(ErrorKind.InvalidInput, reqId, noSender(fragment, member));
      return this.results.publish();
    }
    // What the sender holds goes now, asking for the level (above the one batches ask for, too).
    replication.flush(fragment, replication.positionOf(fragment), level, member);
    const continuous = (): number =>
      wait.continuity !== 0 && replication.continuityOf(fragment, member) === wait.continuity
        ? DRAINED_CONTINUOUS
        : 0;
    this.drainWaiters.add(
      reqId,
      wait.timeoutMs,
      () => replication.drainedTo(fragment, member, level),
      continuous,
    );
  }

  private health(): WorkerHealthReport {
    return {
      worker: this.init.index,
      store: this.store.kind,
      fragments: this.actors.fragments().map((f) => this.actors.of(f).stats()),
      syncInFlight: this.commits.syncInFlight,
      replication: this.replication?.reports() ?? [],
      heapUsedBytes: process.memoryUsage().heapUsed,
      heapLimitBytes: getHeapStatistics().heap_size_limit,
      evictedKeys: this.commits.evictedKeys,
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
    this.drainWaiters.close();
    this.replicaWaits.close();
    this.sweeper.close();
    this.commits.close();
    if (this.wakeTimer !== undefined) clearTimeout(this.wakeTimer);
    for (const f of this.actors.fragments()) {
      if (!this.actors.of(f).idle()) this.logger.warn({ fragment: f }, 'fragment not idle at close');
    }
    let message = '';
    try {
      await this.store.close();
    } catch (err) {
      message = asStorageError(err).message;
    }
    this.results.closed(reqId, message);
    this.results.publish();
  }
}

function noSender(fragment: number, member: number): string {
  return `fragment ${fragment} has no replication sender toward member ${member} on this worker`;
}
