// The worker's group commit and sync. A turn's commit actions, from every fragment that ran, become
// one store transaction (and over a store that logs, its log actions one append before it, and the
// transaction waits until LOGGED_COMMIT_GAP_MS after the last one ended, taking the commits of every
// turn meanwhile, unless the store is failing); every
// stable write waiting when a sync starts shares its one fsync, and those arriving meanwhile wait
// for the next. The outcome goes back to each fragment's actor as an
// event; a failing store is logged at a bounded rate.

import type { Logger } from 'pino';
import type { WallClock } from '../core/clock.js';
import { asStorageError } from '../core/errors.js';
import type { CommitAction, FragmentCore, LogAction } from '../core/fragment.js';
import { LOGGED_COMMIT_GAP_MS, STORAGE_FAILURE_LOG_INTERVAL_MS } from '../core/limits.js';
import type { FragmentWrites, KvStore } from '../native-bindings/kv-store.js';
import type { FragmentBoard } from '../threads/fragment-board.js';

export interface CommitLoopHost {
  core(fragment: number): FragmentCore;
  /** Takes the actions `core` produced, to be carried out with the turn's. */
  collect(core: FragmentCore): void;
  /** Runs `fn` from a store callback, then carries out what it produced. */
  afterAsync(fn: () => void): void;
}

export interface CommitLoopConfig {
  /** The worker's index: its slot on the board for the store's memory figure. */
  worker: number;
  /** Under an eviction policy: the memory the store may keep after a commit before it evicts. */
  evictAboveBytes: number | undefined;
}

export class CommitLoop {
  /** Keys the store evicted to keep to `evictAboveBytes`, since the worker started. */
  evictedKeys = 0;
  private syncRequests: Array<{ core: FragmentCore; generation: number }> = [];
  private syncing = false;
  /** Test hook (RequestKind.FailCommits): this many next commits fail without reaching the store. */
  private commitFailuresToInject = 0;
  private readonly failureLog: StorageFailureLog;
  /** Over a logging store: when the last transaction ended, and the commits held for the next. */
  private lastEndMs = Number.NEGATIVE_INFINITY;
  /**
   * The last transaction or log append failed (a full disk): commits start as they come, each
   * turn's alone, as without a log. Held, the writes would pile up into transactions that no
   * longer fit while the log keeps the space; and writes that the log could not take are
   * acknowledged only once committed.
   */
  private failing = false;
  private held: CommitAction[] = [];
  private heldTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly config: CommitLoopConfig,
    private readonly store: KvStore,
    private readonly board: FragmentBoard,
    private readonly host: CommitLoopHost,
    logger: Logger,
    private readonly clock: WallClock,
  ) {
    this.failureLog = new StorageFailureLog(logger, clock);
  }

  /** A group fsync is running. */
  get syncInFlight(): boolean {
    return this.syncing;
  }

  /** Test hook: the next `count` commits fail as a failing disk's would. */
  failNextCommits(count: number): void {
    this.commitFailuresToInject = count;
  }

  /**
   * Commits the writes of `commits` in one store transaction; over a logging store, in the next one
   * due (LOGGED_COMMIT_GAP_MS), with the commits held until then.
   */
  commit(commits: CommitAction[]): void {
    if (this.store.logsWrites && !this.failing) {
      // Bounded by the gap: a wall clock set back must not hold the writes for longer.
      const waitMs = Math.min(
        LOGGED_COMMIT_GAP_MS,
        this.lastEndMs + LOGGED_COMMIT_GAP_MS - this.clock.nowMs(),
      );
      if (waitMs > 0 || this.heldTimer !== undefined) {
        for (const c of commits) this.held.push(c);
        this.heldTimer ??= setTimeout(this.startHeld, Math.max(0, waitMs));
        return;
      }
    }
    this.start(commits);
  }

  /** Stops the timer of held commits (their writes are in the log: a start replays them). */
  close(): void {
    if (this.heldTimer !== undefined) clearTimeout(this.heldTimer);
    this.heldTimer = undefined;
  }

  private readonly startHeld = (): void => {
    this.heldTimer = undefined;
    const commits = this.held;
    this.held = [];
    this.host.afterAsync(() => this.start(commits));
  };

  private start(commits: CommitAction[]): void {
    if (this.commitFailuresToInject > 0) {
      this.commitFailuresToInject--;
      return this.committed(commits, new Error('commit failed on request (test hook)'));
    }
    const writes: FragmentWrites[] = commits.map((c) => ({
      fragment: c.fragment,
      puts: c.puts,
      deletes: [],
      highWaterWallMs: c.highWaterWallMs,
      generation: c.generation,
    }));
    let result: void | Promise<void>;
    try {
      result = this.store.commit(writes);
    } catch (err) {
      return this.committed(commits, err);
    }
    if (result === undefined) return this.committed(commits, undefined);
    result.then(
      () => this.host.afterAsync(() => this.committed(commits, undefined)),
      (err: unknown) => this.host.afterAsync(() => this.committed(commits, err)),
    );
  }

  /**
   * Appends the writes of `logs` to the store's write-ahead log, synchronously, and tells each actor
   * whether its generation is logged.
   */
  log(logs: LogAction[]): void {
    const writes: FragmentWrites[] = logs.map((l) => ({
      fragment: l.fragment,
      puts: l.puts,
      deletes: [],
      highWaterWallMs: 0,
      generation: l.generation,
    }));
    const failure = this.store.log(writes);
    const logged = failure === undefined;
    // A log that cannot append (a full disk) holds nothing: its writes wait for their commits.
    if (!logged) this.failing = true;
    if (!logged)
      this.failureLog.log(
        'write-ahead log append failed; these writes are acknowledged once committed',
        logs.map((l) => l.fragment),
        failure,
      );
    for (const l of logs) {
      const core = this.host.core(l.fragment);
      core.step(
        logged
          ? { kind: 'logged', generation: l.generation }
          : { kind: 'log-failed', generation: l.generation },
      );
      this.host.collect(core);
    }
  }

  /** A fragment's stable writes up to `generation` wait for a sync. */
  requestSync(fragment: number, generation: number): void {
    this.syncRequests.push({ core: this.host.core(fragment), generation });
  }

  /** Starts a sync for the requests gathered so far, unless one is running (they wait for the next). */
  startSyncIfIdle(): void {
    if (this.syncRequests.length === 0 || this.syncing) return;
    const batch = this.syncRequests;
    this.syncRequests = [];
    this.syncing = true;
    const done = (err: unknown) =>
      this.host.afterAsync(() => {
        this.syncing = false;
        const message = err === undefined ? '' : asStorageError(err).message;
        if (err !== undefined)
          this.failureLog.log(
            'store sync failed; the stable writes waiting for it get the error',
            batch.map((b) => b.core.fragment),
            message,
          );
        for (const { core, generation } of batch) {
          if (err === undefined) core.step({ kind: 'synced', generation });
          else core.step({ kind: 'sync-failed', generation, message });
          this.host.collect(core);
        }
      });
    this.store.sync().then(() => done(undefined), done);
  }

  private committed(commits: CommitAction[], err: unknown): void {
    this.lastEndMs = this.clock.nowMs();
    this.failing = err !== undefined;
    const message = err === undefined ? '' : asStorageError(err).message;
    if (err === undefined) {
      this.evictOverShare();
      // Before the replies: a client that saw its write acknowledged sees the memory it took.
      this.board.setMemoryBytes(this.config.worker, this.store.memoryBytes());
      this.board.markCommitted();
    } else
      this.failureLog.log(
        'store commit failed; its writes stay pending and are retried',
        commits.map((c) => c.fragment),
        message,
      );
    for (const c of commits) {
      const core = this.host.core(c.fragment);
      if (err === undefined) core.step({ kind: 'committed', generation: c.generation });
      else core.step({ kind: 'commit-failed', generation: c.generation, message });
      this.host.collect(core);
    }
  }

  /**
   * Under an eviction policy, brings the store back within the worker's share of the bound after a
   * commit took it over, before the commit's figure is published: a write is refused only when
   * nothing is left to evict (`volatile-lru` with no key that has a deadline).
   */
  private evictOverShare(): void {
    const share = this.config.evictAboveBytes;
    if (share === undefined) return;
    const over = this.store.memoryBytes() - share;
    if (over > 0) this.evictedKeys += this.store.evict(over);
  }
}

/**
 * Logs a failed commit or sync at most once per STORAGE_FAILURE_LOG_INTERVAL_MS (a full disk fails
 * every turn's commit), with how many failures went unlogged since the last line.
 */
class StorageFailureLog {
  private loggedAtMs = Number.NEGATIVE_INFINITY;
  private unlogged = 0;

  constructor(
    private readonly logger: Logger,
    private readonly clock: WallClock,
  ) {}

  log(msg: string, fragments: number[], message: string): void {
    const nowMs = this.clock.nowMs();
    if (nowMs - this.loggedAtMs < STORAGE_FAILURE_LOG_INTERVAL_MS) {
      this.unlogged++;
      return;
    }
    this.logger.error({ fragments, err: message, unlogged: this.unlogged }, msg);
    this.loggedAtMs = nowMs;
    this.unlogged = 0;
  }
}
