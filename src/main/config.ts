// Options of a node: defaults, and validation that names the option and what it accepts. Every
// option is checked here, before any thread starts or any file is touched.

import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import type { Logger } from 'pino';
import { invalidInput } from '../core/errors.js';
import {
  BACKGROUND_OPS_PER_SEC_DEFAULT,
  CLEAN_INTERVAL_MS_DEFAULT,
  CLEAN_KEYS_PER_SEC_DEFAULT,
  FLUSH_INTERVAL_MS_DEFAULT,
  FLUSH_PENDING_BYTES_MAX,
  FLUSH_PENDING_WRITES_MAX,
  FRAGMENT_COUNT_DEFAULT,
  FRAGMENT_COUNT_MAX,
  INTERVAL_MS_MAX,
  MAX_CLOCK_SKEW_MS_DEFAULT,
  MAX_MEMORY_BYTES_CEILING,
  NODE_ID_BYTES_MAX,
  POOL_TASKS_PER_SEC_DEFAULT,
  QUEUE_OPS_MAX_DEFAULT,
  REPLICA_ACK_TIMEOUT_MS_DEFAULT,
  REPLICA_ACKS_MAX,
  VALUE_BYTES_MAX_CEILING,
  VALUE_BYTES_MAX_DEFAULT,
  WAL_SEGMENT_BYTES_DEFAULT,
  WAL_SEGMENT_BYTES_MAX,
  WAL_SEGMENT_BYTES_MIN,
  WORKER_COUNT_MAX,
} from '../core/limits.js';
import { DURABILITY_NAMES, type Durability, type DurabilityName, parseDurability } from '../core/ops.js';
import {
  EVICTION_POLICIES,
  type EvictionPolicy,
  STORE_KINDS,
  type StoreKind,
} from '../native-bindings/kv-store.js';
import {
  CLUSTER_OPTION_NAMES,
  type ClusterConfig,
  type ClusterOptions,
  resolveClusterConfig,
} from './cluster-config.js';

/** Options of `Tessera.start`. Everything is optional; `peers` makes the node part of a cluster. */
export interface TesseraOptions extends ClusterOptions {
  /** Where lmdb / level keep data (default `./data`); unused by the memory store. */
  dataDir?: string;
  /** Storage engine (default `lmdb`). */
  store?: StoreKind;
  /** Fragments the keyspace is cut into, 1..16384 (default 16); fixed at first start. */
  fragments?: number;
  /** Worker threads (default: available cores − 1, between 1 and WORKERS_DEFAULT_MAX). */
  workers?: number;
  /** Default acknowledgement level of writes (default `store`). */
  durability?: DurabilityName;
  /**
   * Other replicas that must acknowledge a write (at `replicationAck`) before it is answered, by
   * default (0, the default: answered once the serving replica has it; replication follows).
   */
  replicaAcks?: number;
  /** How long a write waits for `replicaAcks` before it fails with TESSERA_REPLICA_TIMEOUT (default 5 s). */
  replicaAckTimeoutMs?: number;
  /** This node's id, 1–255 bytes (default: kept in the data directory, generated at first start). */
  nodeId?: string;
  /** Largest value in bytes (default 4 MiB, at most 15 MiB). */
  valueBytesMax?: number;
  /** How far a stored or remote timestamp may be ahead of the wall clock (default 5 min). */
  maxClockSkewMs?: number;
  /** Period of the TTL cleaner that turns expired values into tombstones (default 30 s). */
  cleanIntervalMs?: number;
  /** Keys the TTL cleaner examines per second in each worker (default 100 000). */
  cleanKeysPerSec?: number;
  /** Longest time `memory`-durability writes stay uncommitted (default 0: committed with the worker turn that applied them). */
  flushIntervalMs?: number;
  /** lmdb: bytes of a write-ahead log segment before the next starts (default 64 MiB). */
  walSegmentBytes?: number;
  /** Queued operations per fragment per priority before Backpressure (default 8192). */
  queueOpsMax?: number;
  /** Background-priority operations per fragment per second (default 1000). */
  backgroundOpsPerSec?: number;
  /** Threads of the background pool for pattern scans (default 1). */
  poolThreads?: number;
  /** Background-pool tasks started per second (default 200). */
  poolTasksPerSec?: number;
  /**
   * The memory store only: the bytes its records may take (Redis's `maxmemory`); past it, writes that
   * add data are refused with OutOfMemory, or keys are evicted (`maxMemoryPolicy`). 0 (the
   * default): no bound.
   */
  maxMemoryBytes?: number;
  /**
   * What the memory store does at `maxMemoryBytes` (Redis's `maxmemory-policy`): `noeviction` (the
   * default) refuses writes that add data; `allkeys-lru` removes the least recently used keys to
   * make room, `volatile-lru` the least recently used of those with a TTL (and refuses once none is
   * left). Evicting needs a node without peers.
   */
  maxMemoryPolicy?: EvictionPolicy;
  /** Structured logger (default: silent). */
  logger?: Logger;
}

export interface NodeConfig {
  dataDir: string;
  store: StoreKind;
  fragments: number;
  /** Of `store` and `fragments`, those taken from their defaults (a data directory's refusal says so). */
  defaulted: ReadonlySet<'store' | 'fragments'>;
  workers: number;
  durability: Durability;
  /** Replica acknowledgements a write waits for by default (0: none). */
  replicaAcks: number;
  replicaAckTimeoutMs: number;
  nodeId: string | undefined;
  valueBytesMax: number;
  maxClockSkewMs: number;
  cleanIntervalMs: number;
  cleanKeysPerSec: number;
  flushIntervalMs: number;
  walSegmentBytes: number;
  queueOpsMax: number;
  backgroundOpsPerSec: number;
  poolThreads: number;
  poolTasksPerSec: number;
  flushWritesMax: number;
  flushBytesMax: number;
  /** 0: no bound (`TesseraOptions.maxMemoryBytes`). */
  maxMemoryBytes: number;
  maxMemoryPolicy: EvictionPolicy;
  /** Set when the node is part of a cluster. */
  cluster: ClusterConfig | undefined;
}

const KNOWN_OPTIONS = new Set([
  'dataDir',
  'store',
  'fragments',
  'workers',
  'durability',
  'replicaAcks',
  'replicaAckTimeoutMs',
  'nodeId',
  'valueBytesMax',
  'maxClockSkewMs',
  'cleanIntervalMs',
  'cleanKeysPerSec',
  'flushIntervalMs',
  'walSegmentBytes',
  'queueOpsMax',
  'backgroundOpsPerSec',
  'poolThreads',
  'poolTasksPerSec',
  'maxMemoryBytes',
  'maxMemoryPolicy',
  'logger',
  ...CLUSTER_OPTION_NAMES,
]);

/**
 * The most worker threads a node starts with unless told otherwise. Every request crosses the one
 * main thread, which wakes each worker it has work for once per turn: with more workers a turn's
 * requests split into smaller batches and the main thread spends more per request. On 16 cores SET
 * throughput peaked at two workers and fell by 1.8× (memory store) and 2.5× (lmdb, then one env
 * for the node, whose write lock the workers' commits queued on) at fifteen (bench/RESULTS.md
 * "Worker scaling on 16 cores").
 */
export const WORKERS_DEFAULT_MAX = 2;

/** Available cores − 1 (the main thread keeps one), at least 1 and at most WORKERS_DEFAULT_MAX. */
export function defaultWorkerCount(): number {
  return Math.max(1, Math.min(WORKERS_DEFAULT_MAX, availableParallelism() - 1));
}

function integerIn(name: string, value: unknown, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalidInput(`${name} must be an integer in ${min}..${max}, got ${JSON.stringify(value)}`);
  }
  return value;
}

export function resolveConfig(options: TesseraOptions = {}): NodeConfig {
  if (typeof options !== 'object' || options === null) throw invalidInput('options must be an object');
  for (const name of Object.keys(options)) {
    if (!KNOWN_OPTIONS.has(name)) throw invalidInput(`unknown option "${name}"`);
  }
  const store = options.store ?? 'lmdb';
  if (!STORE_KINDS.includes(store)) {
    throw invalidInput(`store must be one of ${STORE_KINDS.join(', ')}, got ${JSON.stringify(store)}`);
  }
  const durabilityName = options.durability ?? 'store';
  const durability = parseDurability(durabilityName);
  if (durability === undefined) {
    throw invalidInput(
      `durability must be one of ${DURABILITY_NAMES.join(', ')}, got ${JSON.stringify(durabilityName)}`,
    );
  }
  if (options.dataDir !== undefined && (typeof options.dataDir !== 'string' || options.dataDir === '')) {
    throw invalidInput('dataDir must be a non-empty path');
  }
  const nodeId = options.nodeId;
  if (nodeId !== undefined) validateNodeId(nodeId);
  const flushIntervalMs = integerIn(
    'flushIntervalMs',
    options.flushIntervalMs,
    0,
    INTERVAL_MS_MAX,
    FLUSH_INTERVAL_MS_DEFAULT,
  );
  const walSegmentBytes = integerIn(
    'walSegmentBytes',
    options.walSegmentBytes,
    WAL_SEGMENT_BYTES_MIN,
    WAL_SEGMENT_BYTES_MAX,
    WAL_SEGMENT_BYTES_DEFAULT,
  );
  if (options.walSegmentBytes !== undefined && store !== 'lmdb') {
    throw invalidInput(
      `walSegmentBytes sizes the lmdb store's write-ahead log; the ${store} store keeps none`,
    );
  }
  const fragments = integerIn('fragments', options.fragments, 1, FRAGMENT_COUNT_MAX, FRAGMENT_COUNT_DEFAULT);
  const maxMemoryBytes = integerIn('maxMemoryBytes', options.maxMemoryBytes, 0, MAX_MEMORY_BYTES_CEILING, 0);
  if (maxMemoryBytes > 0 && store !== 'memory') {
    throw invalidInput(
      `maxMemoryBytes bounds the memory store; the ${store} store keeps its data on disk (its pages in memory are the OS's cache)`,
    );
  }
  const cluster = resolveClusterConfig(options, nodeId, fragments);
  const maxMemoryPolicy = evictionPolicyOf(options.maxMemoryPolicy, store, cluster !== undefined);
  return {
    cluster,
    dataDir: resolve(options.dataDir ?? './data'),
    store,
    fragments,
    defaulted: new Set([
      ...(options.store === undefined ? (['store'] as const) : []),
      ...(options.fragments === undefined ? (['fragments'] as const) : []),
    ]),
    workers: integerIn('workers', options.workers, 1, WORKER_COUNT_MAX, defaultWorkerCount()),
    durability,
    replicaAcks: integerIn('replicaAcks', options.replicaAcks, 0, REPLICA_ACKS_MAX, 0),
    replicaAckTimeoutMs: integerIn(
      'replicaAckTimeoutMs',
      options.replicaAckTimeoutMs,
      1,
      INTERVAL_MS_MAX,
      REPLICA_ACK_TIMEOUT_MS_DEFAULT,
    ),
    nodeId,
    valueBytesMax: integerIn(
      'valueBytesMax',
      options.valueBytesMax,
      1,
      VALUE_BYTES_MAX_CEILING,
      VALUE_BYTES_MAX_DEFAULT,
    ),
    maxClockSkewMs: integerIn(
      'maxClockSkewMs',
      options.maxClockSkewMs,
      0,
      24 * INTERVAL_MS_MAX,
      MAX_CLOCK_SKEW_MS_DEFAULT,
    ),
    cleanIntervalMs: integerIn(
      'cleanIntervalMs',
      options.cleanIntervalMs,
      1,
      INTERVAL_MS_MAX,
      CLEAN_INTERVAL_MS_DEFAULT,
    ),
    cleanKeysPerSec: integerIn(
      'cleanKeysPerSec',
      options.cleanKeysPerSec,
      1,
      1_000_000_000,
      CLEAN_KEYS_PER_SEC_DEFAULT,
    ),
    flushIntervalMs,
    queueOpsMax: integerIn('queueOpsMax', options.queueOpsMax, 1, 1 << 20, QUEUE_OPS_MAX_DEFAULT),
    backgroundOpsPerSec: integerIn(
      'backgroundOpsPerSec',
      options.backgroundOpsPerSec,
      1,
      1_000_000_000,
      BACKGROUND_OPS_PER_SEC_DEFAULT,
    ),
    poolThreads: integerIn('poolThreads', options.poolThreads, 1, WORKER_COUNT_MAX, 1),
    poolTasksPerSec: integerIn(
      'poolTasksPerSec',
      options.poolTasksPerSec,
      1,
      1_000_000,
      POOL_TASKS_PER_SEC_DEFAULT,
    ),
    flushWritesMax: FLUSH_PENDING_WRITES_MAX,
    flushBytesMax: FLUSH_PENDING_BYTES_MAX,
    maxMemoryBytes,
    maxMemoryPolicy,
    walSegmentBytes,
  };
}

/** Redis's policies Tessera does not offer, named so a client's setting gets a clear refusal. */
const UNSUPPORTED_EVICTION_POLICIES = [
  'allkeys-lfu',
  'volatile-lfu',
  'allkeys-random',
  'volatile-random',
  'volatile-ttl',
];

function evictionPolicyOf(value: unknown, store: StoreKind, clustered: boolean): EvictionPolicy {
  if (value === undefined || value === 'noeviction') return 'noeviction';
  if (!EVICTION_POLICIES.includes(value as EvictionPolicy)) {
    const why = UNSUPPORTED_EVICTION_POLICIES.includes(value as string) ? 'is not supported' : 'is unknown';
    throw invalidInput(
      `maxMemoryPolicy ${JSON.stringify(value)} ${why}; it must be one of ${EVICTION_POLICIES.join(', ')}`,
    );
  }
  if (store !== 'memory') {
    throw invalidInput(
      `maxMemoryPolicy evicts from the memory store; the ${store} store keeps its data on disk`,
    );
  }
  if (clustered) {
    throw invalidInput(
      'maxMemoryPolicy evicts only on a node without peers: a key evicted here would come back from its other replicas',
    );
  }
  return value as EvictionPolicy;
}

export function validateNodeId(nodeId: unknown): asserts nodeId is string {
  if (typeof nodeId !== 'string') throw invalidInput('nodeId must be a string');
  const bytes = Buffer.byteLength(nodeId);
  if (bytes < 1 || bytes > NODE_ID_BYTES_MAX) {
    throw invalidInput(`nodeId must be 1..${NODE_ID_BYTES_MAX} bytes, got ${bytes}`);
  }
}

/** The durability name of a level, for logs and health. */
export function durabilityName(d: Durability): DurabilityName {
  return DURABILITY_NAMES[d];
}
