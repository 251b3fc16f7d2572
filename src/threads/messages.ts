// The typed control messages between the main thread and a worker (postMessage; never on the hot
// path, which uses the rings). One startup message goes to each worker, as piscina does.

import type { FragmentConfig } from '../core/fragment.js';
import type { Durability } from '../core/ops.js';
import type { CommandStatsRow } from '../main/resp/command-stats.js';
import type { StoreLocation } from '../native-bindings/kv-store.js';
import type { ScanRequest } from './op-codec.js';

export interface WorkerInit {
  index: number;
  /** Requests main → worker. */
  requestRing: SharedArrayBuffer;
  /** Results worker → main. */
  resultRing: SharedArrayBuffer;
  store: StoreLocation;
  /** Node-wide fragment board (src/threads/fragment-board.ts). */
  board: SharedArrayBuffer;
  fragments: number[];
  fragment: Omit<FragmentConfig, 'fragment' | 'storedHighWaterWallMs'>;
  cleanIntervalMs: number;
  cleanKeysPerSec: number;
  /**
   * Under an eviction policy (StoreLocation.eviction): the memory the worker's store may keep after
   * a commit before it evicts, its share of `maxMemoryBytes`; undefined: it never evicts.
   */
  evictAboveBytes?: number;
  /** pino level of the node's logger; the worker logs JSON lines at the same level. */
  logLevel: string;
  /** Set when the node is part of a cluster: whom the worker's fragments replicate to. */
  cluster: ClusterInit | undefined;
  /** A replacement for a worker that died: peers' sessions toward it are gone and must be reopened. */
  restarted: boolean;
  /** Set while the node's worker ports are open: the worker serves RESP on its own port. */
  resp?: WorkerRespInit;
}

/** What a worker's RESP port needs (src/workers/resp-port.ts). */
export interface WorkerRespInit {
  /** The port to listen on (0: any free one, reported back in `resp-listening`). */
  port: number;
  bind: string;
  /** The host `-MOVED` names. */
  host: string;
  /** Every worker's port, by worker index (0: not known yet): where `-MOVED` sends a client. */
  ports: number[];
  /** Per fragment, the index of the worker that owns it. */
  workerOfFragment: number[];
  password: string | undefined;
  nodeId: string;
  /** The node's hybrid logical clock, shared with the main thread (src/core/hlc.ts). */
  clockCell: SharedArrayBuffer;
  maxClockSkewMs: number;
  durability: Durability;
  replicaAcks: number;
  fragments: number;
  valueBytesMax: number;
  maxMemoryBytes: number;
  /** In a cluster: what a worker port routes by. */
  cluster: WorkerPortCluster | undefined;
  /** Where the ports publish their INFO counters (src/threads/port-counters.ts). */
  counters: SharedArrayBuffer;
  /** Int32: MONITOR clients on the node now (the main thread keeps it); while > 0 a port sends what it runs. */
  monitors: SharedArrayBuffer;
  /** What this port last published of its commands (`resp-stats`): a restarted worker counts on from it. */
  stats: PortCommandStats | undefined;
}

/** A worker port's INFO commandstats, latencystats and errorstats figures, since the node started. */
export interface PortCommandStats {
  commands: CommandStatsRow[];
  /** Error replies by code. */
  errors: Array<[code: string, count: number]>;
}

/** What a worker port needs of the cluster: who serves each fragment, and where members serve clients. */
export interface WorkerPortCluster {
  selfIndex: number;
  /**
   * Int32 per fragment: the serving member, -1 none, -2 caught up here first; then the serving
   * stamp (FailoverCatchUp.published).
   */
  serving: SharedArrayBuffer;
  /** Where each member serves clients, by member index. */
  endpoints: ClientEndpoint[];
}

/** Where a member serves clients, as `-MOVED` and the slot map name it. */
export interface ClientEndpoint {
  host: string;
  /** Its main RESP port (0: not known yet). */
  port: number;
  /** Its workers' ports, by worker index (empty: none open, or not told). */
  workerPorts: number[];
  /** Its store's group count: its worker for fragment f is (f mod groups) mod workerPorts.length. */
  workerGroups: number;
}

/** A command a worker port has the main thread run (CommandSpec.needs), and the connection's state. */
export interface RelayRequest {
  kind: 'relay';
  id: number;
  /** The worker whose port the client is on. */
  worker: number;
  /** The client's session on the main thread (CommandSpec.needs `session`), 0: none. */
  session: number;
  args: Uint8Array[];
  protocol: 2 | 3;
  authenticated: boolean;
  name: string;
  /** The connection's write acknowledgement (TESSERA.DURABILITY): a relayed FLUSHALL writes with it. */
  durability: Durability;
  replicaAcks: number;
  /** The fragments the connection wrote since its last WAIT saw them all acknowledged, and since when. */
  written: number[];
  writtenSinceStamp: number;
  /** The client's address, for MONITOR and the slow log. */
  remoteIp: string | undefined;
  remotePort: number | undefined;
}

/** A relayed command's reply, and what it left of the connection's written fragments (WAIT forgets them). */
export interface RelayReply {
  bytes: Uint8Array;
  written: number[];
  writtenSinceStamp: number;
  /** Whether the connection is subscribed (RESP2 then takes only the subscription commands). */
  pubsubMode: boolean;
  /** Whether the connection is a MONITOR (it then runs no keyspace command). */
  monitoring: boolean;
}

/** Control messages about a worker's RESP port, worker → main. */
export type WorkerPortEvent =
  | RelayRequest
  | { kind: 'resp-listening'; port: number }
  | { kind: 'resp-listen-failed'; message: string }
  | { kind: 'resp-closed' }
  /** What this port ran while a MONITOR client is connected: the lines the monitors are shown. */
  | { kind: 'monitor-lines'; lines: string[] }
  /** The port's command figures moved (sent at most every PORT_STATS_PUBLISH_INTERVAL_MS, and at close). */
  | { kind: 'resp-stats'; stats: PortCommandStats }
  /** The client of a session went away: its connection on the main thread closes. */
  | { kind: 'relay-end'; session: number };

/** Control messages about a worker's RESP port, main → worker. */
export type WorkerPortCommand =
  | { kind: 'resp-listen'; resp: WorkerRespInit }
  | { kind: 'resp-ports'; ports: number[] }
  | { kind: 'resp-endpoints'; endpoints: ClientEndpoint[] }
  | { kind: 'resp-close' }
  | { kind: 'relay-reply'; id: number; reply: RelayReply }
  /** A push (a Pub/Sub message) for a session's client. */
  | { kind: 'relay-push'; session: number; bytes: Uint8Array };

const WORKER_PORT_EVENTS = new Set([
  'relay',
  'relay-end',
  'resp-listening',
  'resp-listen-failed',
  'resp-closed',
  'resp-stats',
  'monitor-lines',
]);
const WORKER_PORT_COMMANDS = new Set([
  'resp-listen',
  'resp-ports',
  'resp-endpoints',
  'resp-close',
  'relay-reply',
  'relay-push',
]);

export function isWorkerPortEvent(value: unknown): value is WorkerPortEvent {
  return (
    typeof value === 'object' && value !== null && WORKER_PORT_EVENTS.has((value as { kind?: string }).kind!)
  );
}

export function isWorkerPortCommand(value: unknown): value is WorkerPortCommand {
  return (
    typeof value === 'object' &&
    value !== null &&
    WORKER_PORT_COMMANDS.has((value as { kind?: string }).kind!)
  );
}

/** What a worker knows of the cluster (static placement, src/core/placement.ts). */
export interface ClusterInit {
  /** Member node ids, sorted: peers are named by their index here. */
  members: string[];
  selfIndex: number;
  /** Per fragment (all of them), its replica member indices, most preferred first. */
  replicas: number[][];
  /** ACK level replication batches ask for (src/core/replication-sender.ts AckLevel). */
  requiredAck: number;
  antiEntropyIntervalMs: number;
  maxClockSkewMs: number;
  /** This worker's share of `--move-rate`: bytes per second its anti-entropy rounds pull (0: unlimited). */
  pullBytesPerSec: number;
  /** This worker's share of `--anti-entropy-rate`: keys per second its routine rounds compare (0: unlimited). */
  compareKeysPerSec: number;
}

export type WorkerEvent =
  /**
   * Stores are open; `highWaterWallMs` is the newest timestamp any of its fragments has stored;
   * `stored`, the fragments it opened that hold a record (a copy on disk, whatever the placement).
   */
  | { kind: 'ready'; highWaterWallMs: number; stored: number[] }
  /** The worker could not start or hit an unrecoverable store error. */
  | { kind: 'fatal'; message: string }
  /** Stores closed after a Close request; the worker is exiting. */
  | { kind: 'closed' };

export function isWorkerEvent(value: unknown): value is WorkerEvent {
  if (typeof value !== 'object' || value === null) return false;
  const kind = (value as { kind?: unknown }).kind;
  return kind === 'ready' || kind === 'fatal' || kind === 'closed';
}

/**
 * What a background-pool thread posts once its task module — and with it lmdb's native addon — is
 * loaded: the pool is not ended before (src/main/scanner.ts says why).
 */
export interface PoolThreadLoaded {
  kind: 'pool-thread-loaded';
  threadId: number;
}

export function isPoolThreadLoaded(value: unknown): value is PoolThreadLoaded {
  if (typeof value !== 'object' || value === null) return false;
  return (value as { kind?: unknown }).kind === 'pool-thread-loaded';
}

/** A background-pool task (src/workers/scan-task.ts): one pattern-filtered scan page of a fragment. */
export interface ScanTask {
  kind?: 'scan';
  dataDir: string;
  fragmentCount: number;
  /** The lmdb store's group count (manifest.ts). */
  groupCount: number;
  request: ScanRequest;
}

/**
 * A background-pool task: an anti-entropy span, keys after `afterKey` (undefined: from the first)
 * per readSpan's rules, or a TTL cleaner's page. The worker's request travels as the worker wrote
 * it into the ring (op-codec.ts `writePoolSpanRequest`), moved to the pool thread: the main thread
 * only forwards it, and cloning its ranges one by one cost more than the page's work.
 */
export interface SpanTask {
  kind: 'span';
  dataDir: string;
  fragmentCount: number;
  /** The lmdb store's group count (manifest.ts). */
  groupCount: number;
  /** The worker's PoolSpan record, whole (op-codec.ts `readPoolSpanRequest` reads it). */
  request: Uint8Array;
}
