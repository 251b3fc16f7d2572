// The embedded API: `Tessera.start(options)` starts a node in this process — worker threads that own
// the fragments, a background pool for pattern scans — and routes every operation by key → slot →
// fragment → worker ring. Writes are stamped here, once, with the node's hybrid logical clock.

import pino, { type Logger } from 'pino';
import { asBuffer, latin1 } from '../core/bytes.js';
import type { WallClock } from '../core/clock.js';
import {
  asStorageError,
  internalError,
  invalidInput,
  networkError,
  replicaTimeout,
  shuttingDown,
  TesseraError,
} from '../core/errors.js';
import type { FragmentStats } from '../core/fragment.js';
import { slotRange } from '../core/keyspace.js';
import {
  BATCH_ITEMS_MAX,
  DELETE_ALL_PAGE_KEYS,
  EXPIRES_AT_MS_MAX,
  KEY_BYTES_MAX,
  PEERS_AT_START_WAIT_MS,
  PUBSUB_PAYLOAD_BYTES_MAX,
  REPLICA_ACKS_MAX,
  TIMER_DELAY_MS_MAX,
} from '../core/limits.js';
import type { MemberState } from '../core/membership-types.js';
import { Modifier } from '../core/modify.js';
import {
  DURABILITY_NAMES,
  Durability,
  OpKind,
  PRIORITY_NAMES,
  Priority,
  parseDurability,
  parsePriority,
  Reply,
} from '../core/ops.js';
import { SubscriptionKind } from '../core/pubsub.js';
import { expiresAtOf, logicalOf, nodeIdOf, valueOffsetOf, wallMsOf } from '../core/record.js';
import type { SenderReport } from '../core/replication-sender.js';
import type { BackupReport } from '../native-bindings/backup.js';
import { ClusterStateWriter, startIncarnation } from '../native-bindings/cluster-state-file.js';
import { DataDirLock } from '../native-bindings/data-dir-lock.js';
import type { EvictionPolicy } from '../native-bindings/kv-store.js';
import { bindStore, STORE_FORMAT_VERSION } from '../native-bindings/manifest.js';
import { recoverStore } from '../native-bindings/open-store.js';
import { RESULT_HEADER_BYTES, resultHadPrior, resultStatus } from '../threads/op-codec.js';
import { ringWakeupsRecovered } from '../threads/ring.js';
import { servePeerRequests } from './admin/cluster-changes.js';
import { type NodeConfig, resolveConfig, type TesseraOptions } from './config.js';
import { Dispatcher } from './dispatcher.js';
import { blankWriteSpec, NOT_LOCAL, releaseWriteSpec } from './key-router.js';
import { Cluster, type MembershipReport, type MembershipStart } from './mesh/cluster.js';
import { ListenerClient, PubSubHub, type PubSubMessage } from './pubsub.js';
import { waitForReplicas } from './replica-waiter.js';
import { resultError } from './result-error.js';
import { Scanner, type ScanOptions, type ScanResult } from './scanner.js';
import type { ResultHandler } from './worker-link.js';

export type Key = string | Uint8Array;
export type Value = string | Uint8Array;

/** What `subscribe` listens to; names are strings (UTF-8) or bytes. */
export interface SubscribeTo {
  channels?: readonly Key[];
  /** Redis glob patterns over channel names (not shard channels). */
  patterns?: readonly Key[];
  /** Shard channels (Redis's SSUBSCRIBE): a namespace apart from the plain channels. */
  shardChannels?: readonly Key[];
}

export interface WriteOptions {
  /** Time to live in milliseconds (a positive integer). */
  ttlMs?: number;
  /** Absolute expiry deadline, wall-clock milliseconds since the epoch (Redis EXAT/PXAT). */
  expiresAtMs?: number;
  priority?: (typeof PRIORITY_NAMES)[number];
  durability?: (typeof DURABILITY_NAMES)[number];
  /**
   * Other replicas that must acknowledge the write (at the cluster's `replicationAck`) before it
   * resolves (default: the node's `replicaAcks`, 0 unless set). Past `replicaAckTimeoutMs` the write
   * rejects with TESSERA_REPLICA_TIMEOUT: applied at the serving replica, not yet replicated.
   */
  replicaAcks?: number;
}

export interface ReadOptions {
  priority?: (typeof PRIORITY_NAMES)[number];
}

/** A stored value with its LWW version and deadline. */
export interface Entry {
  value: Buffer;
  /** Hybrid logical clock timestamp of the write: wall milliseconds and logical counter. */
  wallMs: number;
  logical: number;
  /** The node that wrote it. */
  nodeId: string;
  /** Absolute deadline in wall-clock ms, or 0 for none. */
  expiresAtMs: number;
}

/** One position of a batch result. */
export type Settled<T> = { ok: true; value: T } | { ok: false; error: TesseraError };

/** A fragment's queues, shed counts and commit progress, and the worker that owns it. */
export type FragmentHealth = FragmentStats & { worker: number };

export interface Health {
  nodeId: string;
  store: string;
  durability: string;
  fragmentCount: number;
  workers: Array<{
    index: number;
    state: string;
    restarts: number;
    pending: number;
    heapUsedBytes?: number;
    heapLimitBytes?: number;
    /** Keys its memory store evicted under `maxMemoryPolicy` (since that worker started). */
    evictedKeys?: number;
    /** Ring waits whose wake-up never came, ended by the worker's watchdog (since it started). */
    ringWakeupsRecovered?: number;
  }>;
  /** The same on the main thread. */
  ringWakeupsRecovered: number;
  /** Reads the main thread answered from its lmdb read snapshot, without a worker (since the start). */
  snapshotReads: number;
  /**
   * Bytes of memory the stores hold (the memory store's records; 0 on disk), the bound (0: none),
   * what is done there, and the keys evicted (by the workers running now, since each started).
   */
  memory: { usedBytes: number; maxBytes: number; policy: EvictionPolicy; evictedKeys: number };
  fragments: FragmentHealth[];
  /** Set when the node is part of a cluster. */
  cluster?: ClusterHealth;
}

export interface ClusterHealth {
  members: string[];
  replicas: number;
  /** The placement coordinator this node names, its own role, and the table epoch it holds. */
  coordinator: {
    id: string | null;
    incarnation: number | null;
    role: 'follower' | 'taking-over' | 'coordinator';
    tableEpoch: number;
  };
  /** CLUSTER INFO's cluster_state: 'ok' when this node reaches a majority and every slot is served. */
  state: 'ok' | 'fail';
  peers: Array<{
    id: string;
    /** Connected over the peer mesh (TCP). */
    connected: boolean;
    /**
     * Since when requests cannot go to it (ISO 8601): disconnected (since this node's start if it
     * never connected), or connected but unreachable, Down or Removed to membership; absent while up.
     */
    downSince?: string;
    /** How membership sees it (absent only before membership starts). */
    membership?: { state: MemberState; unreachable: boolean; incarnation: number };
    forwardsInFlight: number;
    /** Bytes this node sent the peer: all of them, replication's, and anti-entropy's. */
    bytesSent: number;
    replicationBytesSent: number;
    antiEntropyBytesSent: number;
  }>;
  /** One per (fragment, peer) this node replicates to: state, backlog, lag. */
  senders: SenderReport[];
  /** Anti-entropy pages read by the background pool (the rest were read in the workers). */
  antiEntropyPoolPages: number;
  /** Membership's view of every member and its detector's figures (absent only before it starts). */
  membership?: MembershipReport;
}

/** Where one fragment lives (static placement). */
export interface FragmentPlacement {
  fragment: number;
  /** Redis Cluster slots it covers, inclusive. */
  slots: [first: number, last: number];
  /** Replica node ids, most preferred first. */
  replicas: string[];
  /** The first replica serving now (this node's view), or undefined when none is reachable. */
  serving: string | undefined;
  /** This node holds a copy. */
  local: boolean;
  /** The assignment table's entry (absent until this node accepted a table). */
  generation?: number;
  /** The coordinator, incarnation and table epoch the entry was written under. */
  fence?: { coordinatorId: string; incarnation: number; epoch: number };
  /** The entry's changes, oldest first: generation, replicas before and after, reason, when. */
  history?: Array<{ generation: number; from: string[]; to: string[]; reason: string; at: string }>;
  /** A replica move in flight: the target copies (not serving yet), the source leaves once it is verified. */
  moving?: { source: string | null; target: string; reason: string } | null;
  /** Fewer than `--replicas` healthy replicas (Down or Removed ones do not count). */
  underReplicated?: boolean;
  /** This node's part: Serving, Bootstrapping (copying), Draining (handing over); absent when none. */
  state?: string;
}

/** Test and operations hooks; not part of the stable API. */
export interface DebugHooks {
  /** Makes worker `index` throw an uncaught error, as a crash would. */
  crashWorker(index: number): void;
  /** Makes the next `count` store commits of worker `index` fail with a storage error, as a failing disk's would. */
  failCommits(index: number, count: number): void;
  /** Index of the worker that owns `key`. */
  workerOf(key: Key): number;
  readonly workerCount: number;
}

export interface CloseOptions {
  /**
   * Before the local shutdown, wait up to `timeoutMs` for every write this node replicates to be
   * acknowledged by its replicas; `close` rejects (after shutting down) if some were not.
   */
  drainReplication?: { timeoutMs: number };
}

/** A promise whose settlement is driven by a ResultHandler. */
class Deferred<T> {
  resolve!: (value: T) => void;
  reject!: (error: TesseraError) => void;
  readonly promise = new Promise<T>((resolve, reject) => {
    this.resolve = resolve;
    this.reject = reject;
  });
}

export class Tessera {
  readonly nodeId: string;
  readonly debug: DebugHooks;
  /** The routing core; the RESP server submits through it directly. */
  readonly dispatcher: Dispatcher;
  private readonly scanner: Scanner;
  /** This node's place in its cluster; undefined for a single node. */
  readonly cluster: Cluster | undefined;
  /** Pub/Sub subscriptions and delivery (RESP's SUBSCRIBE and PUBLISH, and the embedded API's). */
  readonly pubsub = new PubSubHub();
  private closing = false;
  private closed: Promise<void> | undefined;
  /** The data directory, held for this process until close (none for the memory store). */
  private dataDirLock: DataDirLock | undefined;
  private admittedTasks = 0;
  /** The spec `write` fills and submits synchronously: one object, not one per write. */
  private readonly writeSpec = blankWriteSpec();
  /** The result handler of each read shape, reading TTLs by this node's clock. */
  private readonly readHandlers: ReadHandlers;
  private tasksIdle: Array<() => void> = [];

  private constructor(
    private readonly config: NodeConfig,
    nodeId: string,
    private readonly logger: Logger,
    groupCount: number,
  ) {
    this.nodeId = nodeId;
    this.dispatcher = new Dispatcher(config, nodeId, logger, groupCount);
    this.readHandlers = readHandlers(this.dispatcher.turnClock);
    if (config.cluster !== undefined) {
      this.cluster = new Cluster(config.cluster, this.dispatcher, logger, config.valueBytesMax);
      this.dispatcher.attachCluster(this.cluster);
      servePeerRequests(this, undefined);
      const relay = this.cluster.pubsub;
      this.pubsub.forward = (shard, channel, message) => relay.publish(shard, channel, message);
      relay.onPublished = (shard, channel, message) => this.pubsub.deliver(shard, channel, message);
    }
    this.scanner = new Scanner(config, this.dispatcher);
    if (config.store === 'lmdb') this.dispatcher.poolSpanRunner = (task) => this.scanner.poolSpan(task);
    this.debug = {
      crashWorker: (index) => this.dispatcher.crashWorker(index),
      failCommits: (index, count) => this.dispatcher.failCommits(index, count),
      workerOf: (key) => this.dispatcher.workerLinkOf(this.dispatcher.fragmentOf(toBytes(key))).index,
      workerCount: this.dispatcher.links.length,
    };
  }

  /** Validates the options, binds the data directory and starts the workers. */
  static async start(options: TesseraOptions = {}): Promise<Tessera> {
    const config = resolveConfig(options);
    const logger = options.logger ?? pino({ level: 'silent' });
    const lock = config.store === 'memory' ? undefined : await DataDirLock.acquire(config.dataDir);
    try {
      const node = await Tessera.startLocked(config, logger);
      node.dataDirLock = lock;
      return node;
    } catch (err) {
      await lock?.release();
      throw err;
    }
  }

  private static async startLocked(config: NodeConfig, logger: Logger): Promise<Tessera> {
    const binding = await bindStore({
      kind: config.store,
      dataDir: config.dataDir,
      nodeId: config.nodeId,
      fragmentCount: config.fragments,
      workerCount: config.workers,
      defaulted: config.defaulted,
    });
    const recovery = await recoverStore(
      {
        kind: config.store,
        dataDir: config.dataDir,
        fragmentCount: config.fragments,
        groups: [],
        groupCount: binding.groupCount,
      },
      binding.singleLmdbEnv,
    );
    if (binding.upgradedFrom !== undefined)
      logger.info(
        { dataDir: config.dataDir, from: binding.upgradedFrom, to: STORE_FORMAT_VERSION },
        'data directory format upgraded: the lmdb store keeps write-ahead logs, so older versions refuse it',
      );
    if (recovery !== undefined && recovery.replay.files > 0)
      logger.info(recovery.replay, 'stable logs replayed');
    if (recovery?.migrated !== undefined) {
      logger.info(
        { dataDir: config.dataDir, ...recovery.migrated },
        'lmdb store migrated from one environment to one per group',
      );
    }
    if (recovery?.finishedMigration !== undefined) {
      logger.info(
        { dataDir: config.dataDir, ...recovery.finishedMigration },
        'lmdb store migration finished (it was interrupted after it took effect)',
      );
    }
    if (binding.groupCount > 0 && binding.groupCount < config.workers) {
      logger.warn(
        { dataDir: config.dataDir, groups: binding.groupCount, workers: config.workers },
        'the data directory has fewer groups than --workers (one per worker at its creation): the workers without one are not started',
      );
    }
    const node = new Tessera(config, binding.nodeId, logger, binding.groupCount);
    await node.dispatcher.start();
    if (node.cluster !== undefined) {
      let membership: MembershipStart;
      try {
        membership = await membershipStart(config, node.nodeId);
      } catch (err) {
        await node.dispatcher.close();
        throw err;
      }
      try {
        const peerPort = await node.cluster.start(membership);
        logger.info(
          {
            nodeId: node.nodeId,
            peerPort,
            members: config.cluster!.members,
            replicas: config.cluster!.replicas,
          },
          'peer mesh listening',
        );
        // A restart waits for the peers it knew to be running; a join also for its admission and table.
        const missing = await node.cluster.readyAmongPeers(PEERS_AT_START_WAIT_MS);
        if (missing.admission || missing.table)
          logger.info(
            { ...missing, waitedMs: PEERS_AT_START_WAIT_MS },
            'serving before the join completed: requests are refused as unserved until the cluster admits this node and its table arrives',
          );
        else if (missing.peers.length > 0)
          logger.info(
            { missing: missing.peers, waitedMs: PEERS_AT_START_WAIT_MS },
            'serving before every peer connected: requests for fragments only they serve are refused until they connect',
          );
      } catch (err) {
        await node.cluster.close();
        await node.dispatcher.close();
        throw invalidInput(`cannot listen for peers: ${(err as Error).message}`);
      }
    }
    logger.info(
      {
        nodeId: node.nodeId,
        store: config.store,
        dataDir: config.store === 'memory' ? undefined : config.dataDir,
        fragments: config.fragments,
        workers: node.dispatcher.links.length,
        durability: DURABILITY_NAMES[config.durability],
      },
      'node started',
    );
    return node;
  }

  /** Options the node runs with (resolved defaults included). */
  get settings(): Readonly<NodeConfig> {
    return this.config;
  }

  /** Bytes of memory the stores hold, as of their last commits (the memory store's; 0 on disk). */
  memoryBytes(): number {
    return this.dispatcher.memoryBytes();
  }

  /** True while writes that add data are refused (`maxMemoryBytes`). */
  memoryFull(): boolean {
    return this.dispatcher.memoryFull();
  }

  /** False once `close()` has been called: operations fail with ShuttingDown. */
  get admitting(): boolean {
    return !this.closing;
  }

  // ---- writes -------------------------------------------------------------------------------------

  /** Stores `value` under `key`. Resolves once applied at the requested durability. */
  put(key: Key, value: Value, options?: WriteOptions): Promise<void> {
    return this.write(key, value, options, writeHandler, false) as Promise<unknown> as Promise<void>;
  }

  /** Deletes `key` (writes a tombstone). Resolves to whether a live value existed. */
  delete(key: Key, options?: WriteOptions): Promise<boolean> {
    return this.write(key, undefined, options, deleteHandler, true);
  }

  /**
   * Deletes every key live when it starts — a tombstone each, stamped and replicated like any delete
   * — and resolves to how many it deleted. O(keys), a page of keys at a time. Not atomic: a key
   * written while it runs may survive it.
   */
  async deleteAll(options?: Omit<WriteOptions, 'ttlMs' | 'expiresAtMs'>): Promise<number> {
    let deleted = 0;
    let cursor: string | undefined;
    do {
      const page = await this.scan({ cursor, limit: DELETE_ALL_PAGE_KEYS, keysOnly: true });
      const existed = await Promise.all(page.entries.map((e) => this.delete(e.key, options)));
      for (const live of existed) if (live) deleted++;
      cursor = page.cursor;
    } while (cursor !== undefined);
    return deleted;
  }

  /** Sets a key's time to live; resolves false when the key does not exist. */
  expire(key: Key, ttlMs: number, options?: Omit<WriteOptions, 'ttlMs' | 'expiresAtMs'>): Promise<boolean> {
    return this.write(key, undefined, { ...options, ttlMs }, expireHandler, false, Modifier.Expire);
  }

  /** Stores many entries; one result per input, in input order. */
  async putMany(entries: Iterable<readonly [Key, Value]>, options?: WriteOptions): Promise<Settled<void>[]> {
    const items = [...entries];
    if (items.length > BATCH_ITEMS_MAX)
      throw invalidInput(`putMany takes at most ${BATCH_ITEMS_MAX} entries`);
    const replicaAcks = this.replicaAcksOf(options);
    if (replicaAcks === 0 || this.cluster === undefined)
      return this.settleAll(items.map(([key, value]) => this.put(key, value, options)));
    // The whole batch waits for its replicas once: every write first, then one wait per fragment
    // written, sent behind them.
    const fragments = new Set<number>();
    const puts = items.map(([key, value]) => {
      const put = this.put(key, value, { ...options, replicaAcks: 0 });
      fragments.add(this.dispatcher.lastWriteFragment);
      return put;
    });
    const replicated = waitForReplicas(this.dispatcher, {
      fragments: [...fragments],
      replicas: replicaAcks,
      level: this.dispatcher.replicationAck,
      durability: Durability.Memory,
      priority: priorityOf(options?.priority),
      timeoutMs: this.config.replicaAckTimeoutMs,
      idleReached: 0,
    });
    const [settled, { reached }] = await Promise.all([this.settleAll(puts), replicated]);
    if (reached >= replicaAcks) return settled;
    const error = replicaTimeout(reached, replicaAcks, this.config.replicaAckTimeoutMs);
    return settled.map((r) => (r.ok ? { ok: false, error } : r));
  }

  // ---- reads --------------------------------------------------------------------------------------

  /** The live value of `key`, or undefined. */
  get(key: Key, options?: ReadOptions): Promise<Buffer | undefined> {
    return this.read(key, options, false, valueShape);
  }

  /** The live value of `key` with its version and deadline, or undefined. */
  getEntry(key: Key, options?: ReadOptions): Promise<Entry | undefined> {
    return this.read(key, options, false, entryShape);
  }

  /** Milliseconds until `key` expires; -1 when it has no expiry, -2 when it does not exist (Redis PTTL). */
  ttl(key: Key, options?: ReadOptions): Promise<number> {
    return this.read(key, options, true, ttlShape);
  }

  /** Reads many keys; one result per input, in input order. */
  async getMany(keys: Iterable<Key>, options?: ReadOptions): Promise<Settled<Buffer | undefined>[]> {
    const list = [...keys];
    if (list.length > BATCH_ITEMS_MAX) throw invalidInput(`getMany takes at most ${BATCH_ITEMS_MAX} keys`);
    return this.settleAll(list.map((key) => this.get(key, options)));
  }

  /**
   * One page of live entries, fragment by fragment (keys ascend within a fragment). Pass the returned
   * `cursor` to continue; it is undefined after the last page. Every key that exists for the whole
   * iteration is returned at least once.
   */
  scan(options: ScanOptions = {}): Promise<ScanResult> {
    return this.task(() => this.scanner.scan(options));
  }

  // ---- node ---------------------------------------------------------------------------------------

  /** Commits and fsyncs every fragment: everything acknowledged so far is on disk when it resolves. */
  flush(): Promise<void> {
    return this.task(() => this.fenceSyncedAndCommitted());
  }

  /**
   * Copies the data directory into `targetDir` (new or empty) while the node serves: every write
   * acknowledged before the call is in the copy (lmdb only). Start a node on the copy to restore.
   */
  backup(targetDir: string): Promise<BackupReport> {
    return this.task(async () => {
      if (typeof targetDir !== 'string' || targetDir.length === 0)
        throw invalidInput('backup needs a target directory');
      // Commit what is acknowledged but not yet committed here (memory durability, a flush interval).
      await this.fenceAll(Durability.Store, true);
      return this.dispatcher.backup(targetDir);
    });
  }

  /** Per-worker and per-fragment state. */
  health(): Promise<Health> {
    return this.task(async () => {
      const links = this.dispatcher.links;
      const reports = await Promise.all(links.map((link) => this.dispatcher.workerHealth(link)));
      const fragments: FragmentHealth[] = [];
      const workers: Health['workers'] = [];
      links.forEach((link, index) => {
        const report = reports[index];
        workers.push({
          index,
          state: link.state,
          restarts: link.restarts,
          pending: link.pending,
          heapUsedBytes: report?.heapUsedBytes,
          heapLimitBytes: report?.heapLimitBytes,
          evictedKeys: report?.evictedKeys,
          ringWakeupsRecovered: report?.ringWakeupsRecovered,
        });
        for (const f of report?.fragments ?? []) fragments.push({ ...f, worker: index });
      });
      fragments.sort((a, b) => a.fragment - b.fragment);
      const cluster = this.cluster;
      return {
        nodeId: this.nodeId,
        store: this.config.store,
        durability: DURABILITY_NAMES[this.config.durability],
        fragmentCount: this.config.fragments,
        workers,
        ringWakeupsRecovered: ringWakeupsRecovered(),
        snapshotReads: this.dispatcher.snapshotReads,
        memory: {
          usedBytes: this.dispatcher.memoryBytes(),
          maxBytes: this.config.maxMemoryBytes,
          policy: this.config.maxMemoryPolicy,
          evictedKeys: workers.reduce((n, w) => n + (w.evictedKeys ?? 0), 0),
        },
        fragments,
        cluster:
          cluster === undefined
            ? undefined
            : {
                members: cluster.config.members.filter((_, m) => cluster.isMember(m)),
                replicas: cluster.config.replicas,
                coordinator: {
                  id: cluster.coordinator?.coordinator?.id ?? null,
                  incarnation: cluster.coordinator?.coordinator?.incarnation ?? null,
                  role: cluster.coordinator?.role ?? 'follower',
                  tableEpoch: cluster.coordinator?.table.epoch ?? 0,
                },
                state: cluster.state(),
                peers: cluster.config.members.flatMap((id, m) => {
                  if (m === cluster.config.selfIndex || !cluster.isMember(m)) return [];
                  const notUpSinceMs = cluster.notUpSinceOf(m);
                  const view = cluster.membership?.member(id);
                  return [
                    {
                      id,
                      connected: cluster.mesh.isUp(m),
                      downSince:
                        notUpSinceMs === undefined ? undefined : new Date(notUpSinceMs).toISOString(),
                      membership:
                        view === undefined
                          ? undefined
                          : {
                              state: view.state,
                              unreachable: view.unreachable,
                              incarnation: view.incarnation,
                            },
                      forwardsInFlight: cluster.forwardsInFlight(m),
                      ...cluster.trafficTo(m),
                    },
                  ];
                }),
                senders: reports.flatMap((r) => r?.replication ?? []),
                antiEntropyPoolPages: this.scanner.spansServed,
                membership: cluster.membershipReport(),
              },
      };
    });
  }

  /** Where every fragment lives and which replica serves it now (one entry per fragment). */
  placementReport(): FragmentPlacement[] {
    const out: FragmentPlacement[] = [];
    for (let f = 0; f < this.config.fragments; f++) {
      const [first, end] = slotRange(f, this.config.fragments);
      const cluster = this.cluster;
      if (cluster === undefined) {
        out.push({
          fragment: f,
          slots: [first, end - 1],
          replicas: [this.nodeId],
          serving: this.nodeId,
          local: true,
        });
        continue;
      }
      const { members } = cluster.config;
      const serving = cluster.servingMember(f);
      const entry = cluster.coordinator?.table.active(f);
      const state = cluster.placement?.fragment(f)?.state;
      out.push({
        fragment: f,
        slots: [first, end - 1],
        replicas: cluster.replicasOf(f).map((m) => members[m]),
        serving: serving === -1 ? undefined : members[serving],
        local: cluster.holds(f),
        ...(entry === undefined
          ? {}
          : {
              generation: entry.generation,
              fence: { ...entry.fence },
              history: entry.history.map((h) => ({
                generation: h.generation,
                from: [...h.from],
                to: [...h.to],
                reason: h.reason,
                at: new Date(h.timestampMs).toISOString(),
              })),
              moving: entry.moving === null ? null : { ...entry.moving },
              underReplicated: cluster.isUnderReplicated(cluster.coordinator!.table, f),
            }),
        ...(state === undefined ? {} : { state }),
      });
    }
    return out;
  }

  /**
   * Stops admitting operations (they fail with ShuttingDown), finishes the admitted ones, commits and
   * fsyncs every fragment, closes the stores and ends the threads. Idempotent.
   */
  close(options: CloseOptions = {}): Promise<void> {
    if (this.closed === undefined) this.closed = this.shutdown(options);
    return this.closed;
  }

  private async shutdown(options: CloseOptions): Promise<void> {
    this.closing = true;
    await this.whenTasksIdle();
    await this.dispatcher.whenIdle();
    let drainError: TesseraError | undefined;
    if (this.cluster !== undefined) {
      const timeoutMs = options.drainReplication?.timeoutMs;
      if (timeoutMs !== undefined) drainError = await this.drainReplication(timeoutMs);
      await this.cluster.close();
    }
    let fenceError: unknown;
    try {
      // A commit that keeps failing leaves its writes to the log, replayed at the next start, and is reported.
      await this.fenceSyncedAndCommitted(true);
    } catch (err) {
      fenceError = err;
    }
    let closeError: unknown;
    try {
      await this.dispatcher.close();
    } catch (err) {
      closeError = err;
    }
    await this.scanner.close();
    await this.dataDirLock?.release();
    this.logger.info({ nodeId: this.nodeId }, 'node closed');
    if (fenceError !== undefined) throw fenceError;
    if (closeError !== undefined) throw closeError;
    if (drainError !== undefined) throw drainError;
  }

  /**
   * Waits until every replication sender has its backlog acknowledged (spec §8.7); the error says
   * what was left when `timeoutMs` ran out.
   */
  private async drainReplication(timeoutMs: number): Promise<TesseraError | undefined> {
    if (!Number.isInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > TIMER_DELAY_MS_MAX) {
      return invalidInput(
        `drainReplication.timeoutMs must be an integer in 0..${TIMER_DELAY_MS_MAX}, got ${timeoutMs}`,
      );
    }
    const links = this.dispatcher.links;
    const drained = await Promise.all(
      links.map((link) => this.dispatcher.replicationDrained(link, timeoutMs)),
    );
    if (drained.every(Boolean)) return undefined;
    // What was left, for the error (a worker that stopped meanwhile has nothing left to send).
    const pending = (await this.senderReports()).filter((s) => s.buffered + s.inFlight > 0);
    if (pending.length === 0) return undefined;
    const ops = pending.reduce((n, s) => n + s.buffered + s.inFlight, 0);
    const peers = [...new Set(pending.map((s) => s.peer))].join(', ');
    return networkError(
      `replication drain timed out after ${timeoutMs} ms: ${ops} writes not acknowledged by ${peers}`,
    );
  }

  private async senderReports(): Promise<SenderReport[]> {
    const reports = await Promise.all(
      this.dispatcher.links.map((link) => this.dispatcher.workerHealth(link)),
    );
    return reports.flatMap((r) => r?.replication ?? []);
  }

  // ---- Pub/Sub ------------------------------------------------------------------------------------

  /**
   * Publishes `message` on `channel` (a shard channel with `shard`, Redis's SPUBLISH) to this node's
   * subscribers — RESP clients and `subscribe` listeners — and, in a cluster, to every connected
   * peer's. At most once: nothing is stored or retried. Returns the number of local receivers, as
   * PUBLISH answers.
   */
  publish(channel: Key, message: Value, options?: { shard?: boolean }): number {
    const refused = this.admit();
    if (refused !== undefined) throw refused;
    const c = asBuffer(toBytes(channel));
    const m = asBuffer(toBytes(message));
    if (c.length + m.length > PUBSUB_PAYLOAD_BYTES_MAX) {
      throw invalidInput(
        `channel and message are ${c.length + m.length} bytes; the limit is ${PUBSUB_PAYLOAD_BYTES_MAX}`,
      );
    }
    return this.pubsub.publish(options?.shard === true, c, m);
  }

  /**
   * Calls `listener` with every message published on `channels`, on channels matching `patterns`
   * (Redis globs) or on `shardChannels` — at this node or at a peer — until the returned function
   * is called. The listener runs in a microtask of its own with copies of the bytes; an error it
   * throws is the application's, as an event listener's is.
   */
  subscribe(to: SubscribeTo, listener: (message: PubSubMessage) => void): () => void {
    const refused = this.admit();
    if (refused !== undefined) throw refused;
    const registry = this.pubsub.registry;
    const client = new ListenerClient(listener);
    const kinds = [
      [SubscriptionKind.Channel, to.channels],
      [SubscriptionKind.Pattern, to.patterns],
      [SubscriptionKind.Shard, to.shardChannels],
    ] as const;
    // Every name is checked before any is subscribed: a bad one leaves no partial subscription.
    const names = kinds.map(([kind, list]) => [kind, (list ?? []).map((n) => latin1(toBytes(n)))] as const);
    for (const [kind, list] of names) for (const name of list) registry.subscribe(client, kind, name);
    return () => registry.unsubscribeAll(client);
  }

  // ---- internals ----------------------------------------------------------------------------------

  private admit(): TesseraError | undefined {
    return this.closing ? shuttingDown() : undefined;
  }

  /** Runs a multi-step operation under admission control, so close() waits for it. */
  private async task<T>(run: () => Promise<T>): Promise<T> {
    const refused = this.admit();
    if (refused !== undefined) throw refused;
    this.admittedTasks++;
    try {
      return await run();
    } finally {
      if (--this.admittedTasks === 0) {
        const waiters = this.tasksIdle;
        this.tasksIdle = [];
        for (const wake of waiters) wake();
      }
    }
  }

  private whenTasksIdle(): Promise<void> {
    if (this.admittedTasks === 0) return Promise.resolve();
    return new Promise((resolve) => this.tasksIdle.push(resolve));
  }

  private write<T>(
    key: Key,
    value: Value | undefined,
    options: WriteOptions | undefined,
    handler: ResultHandler<Deferred<T>>,
    wantsPrior: boolean,
    modifier?: Modifier,
  ): Promise<T> {
    const refused = this.admit() ?? (value === undefined ? undefined : this.dispatcher.memoryRefusal());
    if (refused !== undefined) return Promise.reject(refused);
    const spec = this.writeSpec;
    try {
      spec.kind = modifier === undefined ? OpKind.Write : OpKind.Modify;
      spec.key = checkKey(key);
      spec.value = value === undefined ? undefined : this.checkValue(value);
      spec.expiresAtMs = deadlineOf(options, modifier === Modifier.Expire, this.dispatcher.turnClock);
      spec.priority = priorityOf(options?.priority);
      spec.durability =
        options?.durability === undefined ? this.config.durability : durabilityOf(options.durability);
      spec.wantsPrior = wantsPrior;
      spec.modifier = modifier ?? Modifier.Set;
      spec.replicaAcks = this.replicaAcksOf(options);
    } catch (err) {
      return Promise.reject(err);
    }
    const deferred = new Deferred<T>();
    const error = this.dispatcher.submitWrite(spec, handler, deferred);
    releaseWriteSpec(spec);
    if (error !== undefined) deferred.reject(error);
    return deferred.promise;
  }

  /** The replica acknowledgements a write asks for: its own option, else the node's default. */
  private replicaAcksOf(options: WriteOptions | undefined): number {
    const n = options?.replicaAcks;
    if (n === undefined) return this.config.replicaAcks;
    if (!Number.isInteger(n) || n < 0 || n > REPLICA_ACKS_MAX)
      throw invalidInput(`replicaAcks must be an integer in 0..${REPLICA_ACKS_MAX}, got ${n}`);
    return n;
  }

  private read<T>(
    key: Key,
    options: ReadOptions | undefined,
    headerOnly: boolean,
    shape: ReadShape<T>,
  ): Promise<T> {
    const refused = this.admit();
    if (refused !== undefined) return Promise.reject(refused);
    let keyBytes: Uint8Array;
    let priority: Priority;
    try {
      keyBytes = checkKey(key);
      priority = priorityOf(options?.priority);
    } catch (err) {
      return Promise.reject(err);
    }
    const fragment = this.dispatcher.fragmentOf(keyBytes);
    if (priority !== Priority.Background) {
      try {
        const local = this.dispatcher.readLocal(fragment, keyBytes);
        if (local !== NOT_LOCAL)
          return Promise.resolve(
            local === undefined ? shape.absent : shape.fromRecord(local, this.dispatcher.turnClock),
          );
      } catch (err) {
        return Promise.reject(asStorageError(err));
      }
    }
    const deferred = new Deferred<T>();
    const handler = this.readHandlers.get(shape as ReadShape<unknown>) as ResultHandler<Deferred<T>>;
    const error = this.dispatcher.submitRead(fragment, keyBytes, priority, headerOnly, handler, deferred);
    if (error !== undefined) deferred.reject(error);
    return deferred.promise;
  }

  private async settleAll<T>(promises: Promise<T>[]): Promise<Settled<T>[]> {
    const settled = await Promise.allSettled(promises);
    return settled.map((r) =>
      r.status === 'fulfilled'
        ? { ok: true, value: r.value }
        : { ok: false, error: asTesseraError(r.reason) },
    );
  }

  private checkValue(value: Value): Uint8Array {
    const bytes = toBytes(value);
    if (bytes.length > this.config.valueBytesMax) {
      throw invalidInput(
        `value is ${bytes.length} bytes; the limit is ${this.config.valueBytesMax} (valueBytesMax)`,
      );
    }
    return bytes;
  }

  /** Fences every fragment at its serving replica, or (`here`) every fragment in this node's workers. */
  /**
   * Every fragment's acknowledged writes on disk, then in the store's pages: over lmdb's
   * write-ahead log a stable fence is reached once the log is fsynced, before the commit, which
   * the store fence then waits for.
   */
  private async fenceSyncedAndCommitted(here = false): Promise<void> {
    await this.fenceAll(Durability.Stable, here);
    await this.fenceAll(Durability.Store, here);
  }

  private async fenceAll(durability: Durability, here = false): Promise<void> {
    const fences: Promise<void>[] = [];
    for (let f = 0; f < this.config.fragments; f++) fences.push(this.dispatcher.fenced(f, durability, here));
    await Promise.all(fences);
  }
}

export function toBytes(v: Key): Uint8Array {
  if (typeof v === 'string') return Buffer.from(v, 'utf8');
  if (v instanceof Uint8Array) return v;
  throw invalidInput('keys and values must be strings or Uint8Arrays');
}

function checkKey(key: Key): Uint8Array {
  const bytes = toBytes(key);
  if (bytes.length > KEY_BYTES_MAX)
    throw invalidInput(`key is ${bytes.length} bytes; the limit is ${KEY_BYTES_MAX}`);
  return bytes;
}

function priorityOf(name: string | undefined): Priority {
  if (name === undefined) return Priority.Default;
  const p = parsePriority(name);
  if (p === undefined)
    throw invalidInput(`priority must be one of ${PRIORITY_NAMES.join(', ')}, got ${JSON.stringify(name)}`);
  return p;
}

function durabilityOf(name: string): Durability {
  const d = parseDurability(name);
  if (d === undefined) {
    throw invalidInput(
      `durability must be one of ${DURABILITY_NAMES.join(', ')}, got ${JSON.stringify(name)}`,
    );
  }
  return d;
}

/**
 * Where membership starts: a node with a data directory bumps and saves its incarnation there before
 * it speaks (cluster-state-file.ts) and saves what membership learns; a memory-store node keeps
 * nothing, so it starts at the wall clock's milliseconds, above any incarnation its earlier lives used.
 */
async function membershipStart(config: NodeConfig, nodeId: string): Promise<MembershipStart> {
  if (config.store === 'memory') {
    return {
      withoutData: 'the memory store keeps nothing across restarts',
      restoredIncarnation: Date.now(),
      members: [],
      persist: () => undefined,
      table: undefined,
      promise: undefined,
      persistTable: () => undefined,
    };
  }
  const started = await startIncarnation(config.dataDir, { nodeId, fragmentCount: config.fragments });
  const writer = new ClusterStateWriter(config.dataDir, started);
  return {
    withoutData: started.firstStart ? `its data directory ${config.dataDir} is new` : undefined,
    restoredIncarnation: started.incarnation - 1,
    members: started.members,
    persist: (incarnation, members) => writer.update({ incarnation, members }),
    table: started.table ?? undefined,
    promise: started.promise ?? undefined,
    persistTable: (table, promise) => writer.update({ table, promise: promise ?? null }),
  };
}

/** The absolute deadline a write carries (0 = none; a TTL counts from `clock`); `required` for EXPIRE. */
function deadlineOf(options: WriteOptions | undefined, required: boolean, clock: WallClock): number {
  const ttlMs = options?.ttlMs;
  const expiresAtMs = options?.expiresAtMs;
  if (ttlMs !== undefined && expiresAtMs !== undefined)
    throw invalidInput('give ttlMs or expiresAtMs, not both');
  if (ttlMs !== undefined) {
    const nowMs = clock.nowMs();
    if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0 || nowMs + ttlMs > EXPIRES_AT_MS_MAX) {
      throw invalidInput(
        `ttlMs must be a positive integer number of milliseconds (got ${ttlMs}); omit it for no expiry`,
      );
    }
    return nowMs + ttlMs;
  }
  if (expiresAtMs !== undefined) {
    if (!Number.isSafeInteger(expiresAtMs) || expiresAtMs <= 0 || expiresAtMs > EXPIRES_AT_MS_MAX) {
      throw invalidInput(
        `expiresAtMs must be a positive integer wall-clock time in milliseconds (got ${expiresAtMs})`,
      );
    }
    return expiresAtMs;
  }
  if (required) throw invalidInput('a time to live is required');
  return 0;
}

function asTesseraError(err: unknown): TesseraError {
  return err instanceof TesseraError ? err : internalError(err instanceof Error ? err.message : String(err));
}

function writeOutcome(buf: Buffer, at: number): boolean | undefined {
  const status = resultStatus(buf, at);
  return status === Reply.Applied || status === Reply.AlreadyPresent ? resultHadPrior(buf, at) : undefined;
}

const writeHandler: ResultHandler<Deferred<unknown>> = {
  onResult(d, buf, at, length) {
    if (writeOutcome(buf, at) !== undefined) d.resolve(undefined);
    else d.reject(resultError(buf, at, length));
  },
  onFailure: (d, error) => d.reject(error),
};

const deleteHandler: ResultHandler<Deferred<boolean>> = {
  onResult(d, buf, at, length) {
    const prior = writeOutcome(buf, at);
    if (prior !== undefined) d.resolve(prior);
    else d.reject(resultError(buf, at, length));
  },
  onFailure: (d, error) => d.reject(error),
};

const expireHandler: ResultHandler<Deferred<boolean>> = {
  onResult(d, buf, at, length) {
    if (resultStatus(buf, at) === Reply.Integer) d.resolve(buf[at + RESULT_HEADER_BYTES] === 0x31);
    else d.reject(resultError(buf, at, length));
  },
  onFailure: (d, error) => d.reject(error),
};

/** What a read returns, built from the live record it found (a view, valid only during the call). */
interface ReadShape<T> {
  fromRecord(record: Uint8Array, clock: WallClock): T;
  readonly absent: T;
}

const valueShape: ReadShape<Buffer | undefined> = {
  fromRecord: (r) => Buffer.from(r.subarray(valueOffsetOf(r))),
  absent: undefined,
};

const entryShape: ReadShape<Entry | undefined> = {
  fromRecord(view) {
    const r = Buffer.from(view);
    return {
      value: r.subarray(valueOffsetOf(r)),
      wallMs: wallMsOf(r),
      logical: logicalOf(r),
      nodeId: Buffer.from(nodeIdOf(r)).toString('utf8'),
      expiresAtMs: expiresAtOf(r),
    };
  },
  absent: undefined,
};

const ttlShape: ReadShape<number> = {
  fromRecord(r, clock) {
    const expiresAt = expiresAtOf(r);
    return expiresAt === 0 ? -1 : Math.max(0, expiresAt - clock.nowMs());
  },
  absent: -2,
};

function readHandler<T>(shape: ReadShape<T>, clock: WallClock): ResultHandler<Deferred<T>> {
  return {
    onResult(d, buf, at, length) {
      const status = resultStatus(buf, at);
      if (status === Reply.Found)
        d.resolve(shape.fromRecord(buf.subarray(at + RESULT_HEADER_BYTES, at + length), clock));
      else if (status === Reply.NotFound) d.resolve(shape.absent);
      else d.reject(resultError(buf, at, length));
    },
    onFailure: (d, error) => d.reject(error),
  };
}

type ReadHandlers = Map<ReadShape<unknown>, ResultHandler<Deferred<unknown>>>;

function readHandlers(clock: WallClock): ReadHandlers {
  return new Map(
    [valueShape, entryShape, ttlShape].map((shape) => [
      shape as ReadShape<unknown>,
      readHandler(shape as ReadShape<unknown>, clock),
    ]),
  );
}
