// Cluster options (DESIGN.md "Cluster"): the static member list, this node's peer listener, the
// replica count, the cluster secret and the replication ACK level — validated with messages that
// name the option, before anything starts.

import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { firstPlacement, type MoveLimits } from '../core/coordinator.js';
import { invalidInput } from '../core/errors.js';
import {
  ANTI_ENTROPY_INTERVAL_MS_DEFAULT,
  ANTI_ENTROPY_INTERVAL_MS_MAX,
  ANTI_ENTROPY_INTERVAL_MS_MIN,
  ANTI_ENTROPY_KEYS_PER_SEC_DEFAULT,
  ANTI_ENTROPY_KEYS_PER_SEC_MAX,
  ANTI_ENTROPY_KEYS_PER_SEC_MIN,
  CLUSTER_SECRET_BYTES_MIN,
  MEMBERSHIP_DOWN_AFTER_MS_DEFAULT,
  MEMBERSHIP_DOWN_AFTER_MS_MAX,
  MEMBERSHIP_DOWN_AFTER_MS_MIN,
  MOVE_RATE_BYTES_PER_SEC_DEFAULT,
  MOVE_RATE_BYTES_PER_SEC_MAX,
  MOVE_RATE_BYTES_PER_SEC_MIN,
  NODE_ID_BYTES_MAX,
  PLACEMENT_DRAIN_WARN_INTERVAL_MS_DEFAULT,
  PLACEMENT_MOVES_IN_PER_NODE_DEFAULT,
  PLACEMENT_MOVES_PER_NODE_MAX,
  REPLICAS_PER_FRAGMENT_MAX,
} from '../core/limits.js';
import { DURABILITY_NAMES, type DurabilityName, parseDurability } from '../core/ops.js';
import { type Placement, placementOf, REPLICAS_DEFAULT_MAX, sortMembers } from '../core/placement.js';
import { AckLevel } from '../core/replication-sender.js';

export interface PeerAddress {
  host: string;
  port: number;
}

/**
 * TLS for the peer mesh (Redis's `tls-cluster`), PEM: every node presents `cert` when it accepts a
 * peer and `clientCert` (default `cert`) when it dials one, and each side requires the other's to
 * chain to `ca`. Which member a peer is, is proven by the cluster secret's handshake inside TLS, so
 * a certificate's host names are not checked.
 */
export interface PeerTlsOptions {
  cert: string | Buffer;
  key: string | Buffer;
  ca: string | Buffer;
  clientCert?: string | Buffer;
  clientKey?: string | Buffer;
}

/** Cluster options of `Tessera.start` (all optional; `peers` turns cluster mode on). */
export interface ClusterOptions {
  /** Members as `id@host:port` (peer ports), comma-separated or as a list; may include this node. */
  peers?: string | string[];
  /**
   * Join a running cluster through any of these members' peer addresses (`host:port`,
   * comma-separated or a list) instead of naming every member in `peers`. Without either, a node
   * given `peerPort` starts as a one-member cluster that others can join.
   */
  join?: string | string[];
  /** Port this node listens on for peers (default: its own entry in `peers`). */
  peerPort?: number;
  /** Address the peer listener binds (default: this node's host in `peers`, else 127.0.0.1). */
  peerBind?: string;
  /** Replicas per fragment (default min(3, members)). */
  replicas?: number;
  /** Shared cluster secret, at least 32 bytes. */
  clusterSecret?: string;
  /** File holding the cluster secret (trailing newline ignored). */
  clusterSecretFile?: string;
  /** Allow peers on a non-loopback address without a secret. */
  insecure?: boolean;
  /** Level a replica must reach before it acknowledges a batch (default store). */
  replicationAck?: DurabilityName;
  /** Period of anti-entropy rounds per fragment and peer (default 60 s). */
  antiEntropyIntervalMs?: number;
  /**
   * Keys this node's routine anti-entropy rounds compare per second, shared evenly by its workers
   * (default 5 000; 0: unlimited). Catch-ups, copies' verifications and a session's first round
   * are not paced.
   */
  antiEntropyKeysPerSec?: number;
  /** RESP port this node tells peers (for CLUSTER SLOTS); set by the CLI. */
  clientPort?: number;
  /** Host clients should use to reach this node (default: its host in `peers`, else peerBind). */
  clientHost?: string;
  /** Encrypt the peer mesh with mutually verified TLS. */
  peerTls?: PeerTlsOptions;
  /**
   * How long a majority must find a member unreachable before it is Down (default 30 s). Routing
   * avoids an unreachable member at once; only Down would make placement replace its copies.
   */
  downAfterMs?: number;
  /** Replica moves a node takes part in at once, in and out each (default 2). */
  maxMovesPerNode?: number;
  /** How often a fragment whose handoff cannot complete is warned about (default 10 s). */
  drainWarnIntervalMs?: number;
  /**
   * Bytes per second this node's anti-entropy rounds pull at most — a move's copy, a returning
   * replica's repair — shared evenly by its workers (default 32 MiB/s; 0: unlimited).
   */
  moveRateBytesPerSec?: number;
  /**
   * What a node answers for a key whose slot another node serves (default `forward`): `forward`
   * serves it through that node, so any client works; `moved` answers `-MOVED slot host:port` as
   * Redis Cluster does, so cluster-mode clients go straight to the serving node and follow moves.
   */
  clusterRedirects?: ClusterRedirects;
}

export const CLUSTER_REDIRECTS = ['forward', 'moved'] as const;
export type ClusterRedirects = (typeof CLUSTER_REDIRECTS)[number];

export const CLUSTER_OPTION_NAMES = [
  'peers',
  'join',
  'peerPort',
  'peerBind',
  'replicas',
  'clusterSecret',
  'clusterSecretFile',
  'insecure',
  'replicationAck',
  'antiEntropyIntervalMs',
  'antiEntropyKeysPerSec',
  'clientPort',
  'clientHost',
  'peerTls',
  'downAfterMs',
  'maxMovesPerNode',
  'drainWarnIntervalMs',
  'moveRateBytesPerSec',
  'clusterRedirects',
] as const;

export interface ClusterConfig {
  selfId: string;
  members: string[];
  selfIndex: number;
  addresses: Array<PeerAddress | undefined>;
  /** Where the others dial this node: its entry in peers, else the peer listener's address. */
  selfAddress: PeerAddress;
  /** Seeds to join through (`join`); empty for a static or one-member start. */
  joinSeeds: PeerAddress[];
  peerPort: number;
  peerBind: string;
  placement: Placement;
  replicas: number;
  secret: Uint8Array | undefined;
  requiredAck: AckLevel;
  antiEntropyIntervalMs: number;
  /** Keys per second the node's routine anti-entropy rounds compare (0: unlimited). */
  antiEntropyKeysPerSec: number;
  clientPort: number;
  clientHost: string;
  downAfterMs: number;
  /** The planner's per-node limits on replica moves in flight. */
  moveLimits: MoveLimits;
  drainWarnIntervalMs: number;
  /** Bytes per second the node's anti-entropy rounds pull at most; 0: unlimited. */
  moveRateBytesPerSec: number;
  /** `moved`: a key another node serves is answered with `-MOVED`; `forward`: served through it. */
  redirectsMoved: boolean;
  /** TLS for the peer mesh; undefined for plain TCP. */
  tls: { cert: Buffer; key: Buffer; ca: Buffer; clientCert: Buffer; clientKey: Buffer } | undefined;
}

const ACK_OF_DURABILITY = [AckLevel.Memory, AckLevel.Store, AckLevel.Stable] as const;

/** Parses `id@host:port`; the host may be a name, an IPv4 address or `[IPv6]`. */
export function parsePeer(entry: string): { id: string; address: PeerAddress } {
  const at = entry.lastIndexOf('@');
  const hostPort = entry.slice(at + 1);
  if (at < 1 || hostPort.lastIndexOf(':') < 1) throw invalidInput(`peers: "${entry}" is not id@host:port`);
  const id = entry.slice(0, at);
  const address = parsePeerAddress(hostPort);
  if (address === undefined) throw invalidInput(`peers: "${entry}" has no valid port (1..65535)`);
  const bytes = Buffer.byteLength(id);
  if (bytes > NODE_ID_BYTES_MAX)
    throw invalidInput(`peers: node id "${id}" exceeds ${NODE_ID_BYTES_MAX} bytes`);
  return { id, address };
}

/** A list option given as comma-separated text or as a list, without empty entries. */
function optionList(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  return (Array.isArray(value) ? value : value.split(',')).map((p) => p.trim()).filter((p) => p !== '');
}

/** A member's address as membership carries it: `host:port`, an IPv6 host in brackets. */
export function formatPeerAddress(address: PeerAddress): string {
  return address.host.includes(':') ? `[${address.host}]:${address.port}` : `${address.host}:${address.port}`;
}

/** The inverse of formatPeerAddress; undefined when `text` is not host:port. */
export function parsePeerAddress(text: string): PeerAddress | undefined {
  const colon = text.lastIndexOf(':');
  if (colon < 1) return undefined;
  let host = text.slice(0, colon);
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  const port = Number(text.slice(colon + 1));
  if (host === '' || !Number.isInteger(port) || port < 1 || port > 65535) return undefined;
  return { host, port };
}

/** A host name or address that only this machine reaches. */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || (isIP(host) === 4 && host.startsWith('127.'));
}

function readSecret(options: ClusterOptions): Uint8Array | undefined {
  if (options.clusterSecret !== undefined && options.clusterSecretFile !== undefined) {
    throw invalidInput('give clusterSecret or clusterSecretFile, not both');
  }
  let secret = options.clusterSecret;
  if (options.clusterSecretFile !== undefined) {
    try {
      secret = readFileSync(options.clusterSecretFile, 'utf8').replace(/\r?\n$/, '');
    } catch (err) {
      throw invalidInput(`clusterSecretFile: ${(err as Error).message}`);
    }
  }
  if (secret === undefined) return undefined;
  const bytes = Buffer.from(secret, 'utf8');
  if (bytes.length < CLUSTER_SECRET_BYTES_MIN) {
    throw invalidInput(
      `the cluster secret must be at least ${CLUSTER_SECRET_BYTES_MIN} bytes, got ${bytes.length}`,
    );
  }
  return bytes;
}

/** A per-second rate option: 0 (unlimited) or an integer in min..max `unit` a second. */
function rateOrUnlimited(name: string, rate: number, min: number, max: number, unit: string): number {
  if (!Number.isInteger(rate) || (rate !== 0 && (rate < min || rate > max))) {
    throw invalidInput(
      `${name} must be 0 (unlimited) or an integer in ${min}..${max} ${unit} per second, got ${rate}`,
    );
  }
  return rate;
}

/** Validates cluster options; undefined when `peers` is absent (a single node). */
export function resolveClusterConfig(
  options: ClusterOptions,
  nodeId: string | undefined,
  fragments: number,
): ClusterConfig | undefined {
  const list = optionList(options.peers);
  const seeds = optionList(options.join).map((text) => {
    const address = parsePeerAddress(text);
    if (address === undefined) throw invalidInput(`join: "${text}" is not host:port`);
    return address;
  });
  if (list.length > 0 && seeds.length > 0) {
    throw invalidInput('give peers (every member) or join (a running cluster), not both');
  }
  if (list.length === 0 && seeds.length === 0 && options.peerPort === undefined) {
    // A secret or client address without peers is harmless (often set for every node by the
    // environment); the rest would silently do nothing.
    const harmless = new Set(['clientPort', 'clientHost', 'clusterSecret', 'clusterSecretFile']);
    for (const name of CLUSTER_OPTION_NAMES) {
      if (!harmless.has(name) && options[name] !== undefined)
        throw invalidInput(`${name} needs peers (the cluster's members), join or peerPort`);
    }
    return undefined;
  }
  if (nodeId === undefined) throw invalidInput('a cluster node needs nodeId (--node-id)');
  const parsed = list.map(parsePeer);
  const byId = new Map<string, PeerAddress>();
  for (const { id, address } of parsed) {
    if (byId.has(id)) throw invalidInput(`peers: node id "${id}" is listed twice`);
    byId.set(id, address);
  }
  const own = byId.get(nodeId);
  const peerPort = options.peerPort ?? own?.port;
  if (peerPort === undefined || !Number.isInteger(peerPort) || peerPort < 0 || peerPort > 65535) {
    throw invalidInput('peerPort (--peer-port) is required unless peers lists this node');
  }
  const peerBind = options.peerBind ?? own?.host ?? '127.0.0.1';
  const members = sortMembers([nodeId, ...byId.keys()]);
  const grows = list.length === 0;
  if (!grows && members.length < 2) throw invalidInput('peers names no node other than this one');
  // A cluster that grows by joins starts with one member; its replica count is what placement aims for.
  const replicasMax = grows ? REPLICAS_PER_FRAGMENT_MAX : members.length;
  const replicas =
    options.replicas ?? Math.min(REPLICAS_DEFAULT_MAX, grows ? REPLICAS_DEFAULT_MAX : members.length);
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > replicasMax) {
    throw invalidInput(
      `replicas must be an integer in 1..${replicasMax} (${grows ? 'REPLICAS_PER_FRAGMENT_MAX' : 'the members'}), got ${replicas}`,
    );
  }
  const secret = readSecret(options);
  if (secret === undefined && options.insecure !== true) {
    const exposed = [peerBind, ...parsed.map((p) => p.address.host)].filter((h) => !isLoopbackHost(h));
    if (exposed.length > 0) {
      throw invalidInput(
        `peers on ${exposed[0]} would talk in plaintext without authentication: give a cluster secret ` +
          '(--cluster-secret, TESSERA_CLUSTER_SECRET or --cluster-secret-file) or --insecure',
      );
    }
  }
  const ackName = options.replicationAck ?? 'store';
  const ack = parseDurability(ackName);
  if (ack === undefined) {
    throw invalidInput(
      `replicationAck must be one of ${DURABILITY_NAMES.join(', ')}, got ${JSON.stringify(ackName)}`,
    );
  }
  const antiEntropyIntervalMs = options.antiEntropyIntervalMs ?? ANTI_ENTROPY_INTERVAL_MS_DEFAULT;
  if (
    !Number.isInteger(antiEntropyIntervalMs) ||
    antiEntropyIntervalMs < ANTI_ENTROPY_INTERVAL_MS_MIN ||
    antiEntropyIntervalMs > ANTI_ENTROPY_INTERVAL_MS_MAX
  ) {
    throw invalidInput(
      `antiEntropyIntervalMs must be an integer in ${ANTI_ENTROPY_INTERVAL_MS_MIN}..${ANTI_ENTROPY_INTERVAL_MS_MAX}, got ${antiEntropyIntervalMs}`,
    );
  }
  const downAfterMs = options.downAfterMs ?? MEMBERSHIP_DOWN_AFTER_MS_DEFAULT;
  if (
    !Number.isInteger(downAfterMs) ||
    downAfterMs < MEMBERSHIP_DOWN_AFTER_MS_MIN ||
    downAfterMs > MEMBERSHIP_DOWN_AFTER_MS_MAX
  ) {
    throw invalidInput(
      `downAfterMs must be an integer in ${MEMBERSHIP_DOWN_AFTER_MS_MIN}..${MEMBERSHIP_DOWN_AFTER_MS_MAX} ms, got ${downAfterMs}`,
    );
  }
  const maxMoves = options.maxMovesPerNode ?? PLACEMENT_MOVES_IN_PER_NODE_DEFAULT;
  if (!Number.isInteger(maxMoves) || maxMoves < 1 || maxMoves > PLACEMENT_MOVES_PER_NODE_MAX) {
    throw invalidInput(
      `maxMovesPerNode must be an integer in 1..${PLACEMENT_MOVES_PER_NODE_MAX} (PLACEMENT_MOVES_PER_NODE_MAX), got ${maxMoves}`,
    );
  }
  const drainWarnIntervalMs = options.drainWarnIntervalMs ?? PLACEMENT_DRAIN_WARN_INTERVAL_MS_DEFAULT;
  if (!Number.isInteger(drainWarnIntervalMs) || drainWarnIntervalMs < 1) {
    throw invalidInput(`drainWarnIntervalMs must be a positive integer of ms, got ${drainWarnIntervalMs}`);
  }
  const moveRateBytesPerSec = rateOrUnlimited(
    'moveRateBytesPerSec',
    options.moveRateBytesPerSec ?? MOVE_RATE_BYTES_PER_SEC_DEFAULT,
    MOVE_RATE_BYTES_PER_SEC_MIN,
    MOVE_RATE_BYTES_PER_SEC_MAX,
    'bytes',
  );
  const antiEntropyKeysPerSec = rateOrUnlimited(
    'antiEntropyKeysPerSec',
    options.antiEntropyKeysPerSec ?? ANTI_ENTROPY_KEYS_PER_SEC_DEFAULT,
    ANTI_ENTROPY_KEYS_PER_SEC_MIN,
    ANTI_ENTROPY_KEYS_PER_SEC_MAX,
    'keys',
  );
  const redirects = options.clusterRedirects ?? 'forward';
  if (!CLUSTER_REDIRECTS.includes(redirects)) {
    throw invalidInput(
      `clusterRedirects must be one of ${CLUSTER_REDIRECTS.join(', ')}, got ${JSON.stringify(redirects)}`,
    );
  }
  const selfIndex = members.indexOf(nodeId);
  return {
    selfId: nodeId,
    members,
    selfIndex,
    addresses: members.map((id) => (id === nodeId ? undefined : byId.get(id))),
    selfAddress: own ?? { host: peerBind, port: peerPort },
    joinSeeds: seeds,
    peerPort,
    peerBind,
    // A joining node holds nothing until the cluster's table names it; a one-member start holds everything.
    placement:
      seeds.length > 0
        ? { members, replicas: Array.from({ length: fragments }, () => []) }
        : placementOf(members, firstPlacement(members, fragments, Math.min(replicas, members.length))),
    replicas,
    secret,
    requiredAck: ACK_OF_DURABILITY[ack],
    antiEntropyIntervalMs,
    antiEntropyKeysPerSec,
    clientPort: options.clientPort ?? 0,
    clientHost: options.clientHost ?? own?.host ?? peerBind,
    downAfterMs,
    moveLimits: { movesInPerNode: maxMoves, movesOutPerNode: maxMoves },
    drainWarnIntervalMs,
    moveRateBytesPerSec,
    redirectsMoved: redirects === 'moved',
    tls: resolvePeerTls(options.peerTls),
  };
}

function resolvePeerTls(tls: PeerTlsOptions | undefined): ClusterConfig['tls'] {
  if (tls === undefined) return undefined;
  const pem = (name: keyof PeerTlsOptions): Buffer | undefined => {
    const value = tls[name];
    if (value === undefined) return undefined;
    if (typeof value !== 'string' && !Buffer.isBuffer(value)) {
      throw invalidInput(`peerTls.${name} must be PEM text (a string or a Buffer)`);
    }
    if (value.length === 0) throw invalidInput(`peerTls.${name} is empty`);
    return Buffer.from(value);
  };
  const [cert, key, ca, clientCert, clientKey] = (
    ['cert', 'key', 'ca', 'clientCert', 'clientKey'] as const
  ).map(pem);
  if (cert === undefined || key === undefined || ca === undefined) {
    throw invalidInput('peerTls needs cert, key and ca: each peer verifies the other against the CA');
  }
  if ((clientCert === undefined) !== (clientKey === undefined)) {
    throw invalidInput('peerTls: give clientCert and clientKey together');
  }
  return { cert, key, ca, clientCert: clientCert ?? cert, clientKey: clientKey ?? key };
}
