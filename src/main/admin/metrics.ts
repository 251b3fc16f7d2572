// The node's metrics in Prometheus's text exposition format (version 0.0.4), built from one health
// report and the RESP server's counters. Series are per node, per worker and per peer — never per
// fragment or per (fragment, peer) sender, which would be up to 16 384 series each; those details
// are in /health.

import { COMMIT_ATTEMPTS_MAX } from '../../core/limits.js';
import { type MemberState, STATE_EVENT } from '../../core/membership-types.js';
import {
  type HealthState,
  healthState,
  type PeerSummary,
  peerSummaries,
  refusesWrites,
  type WorkerSummary,
  workerSummaries,
} from '../health-summary.js';
import type { Health } from '../node.js';
import type { RespStatsSnapshot } from '../resp/server.js';

export interface MetricsInput {
  health: Health;
  /** The RESP server's counters; absent for a node without one (embedded). */
  resp: RespStatsSnapshot | undefined;
  process: { residentBytes: number; heapUsedBytes: number; uptimeSeconds: number };
}

/** The process's own figures, read now. */
export function processFigures(): MetricsInput['process'] {
  const memory = process.memoryUsage();
  return {
    residentBytes: memory.rss,
    heapUsedBytes: memory.heapUsed,
    uptimeSeconds: Math.floor(process.uptime()),
  };
}

/**
 * One node's sample as `GET /cluster/metrics` gathers it from every member: what /metrics exposes,
 * summed per worker and per peer as the status page and `tessera status` sum it, as JSON.
 */
export interface MetricsSample {
  nodeId: string;
  /** When the sample was taken (ISO 8601). */
  at: string;
  state: HealthState;
  process: MetricsInput['process'];
  memory: Health['memory'];
  snapshotReads: number;
  workers: WorkerSummary[];
  peers: PeerSummary[];
  /** The RESP server's counters; absent on a node without one, or asked through a node without an admin port. */
  resp?: RespStatsSnapshot;
}

export function metricsSample(input: MetricsInput): MetricsSample {
  const { health } = input;
  return {
    nodeId: health.nodeId,
    at: new Date().toISOString(),
    state: healthState(health),
    process: input.process,
    memory: health.memory,
    snapshotReads: health.snapshotReads,
    workers: workerSummaries(health),
    peers: health.cluster === undefined ? [] : peerSummaries(health.cluster),
    ...(input.resp === undefined ? {} : { resp: input.resp }),
  };
}

type Labels = Record<string, string | number>;

class Exposition {
  private readonly lines: string[] = [];

  family(name: string, type: 'counter' | 'gauge', help: string, samples: Array<[Labels, number]>): void {
    this.lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, value] of samples)
      this.lines.push(`${name}${labelText(labels)} ${formatValue(value)}`);
  }

  one(name: string, type: 'counter' | 'gauge', help: string, value: number): void {
    this.family(name, type, help, [[{}, value]]);
  }

  text(): string {
    return `${this.lines.join('\n')}\n`;
  }
}

function labelText(labels: Labels): string {
  const pairs = Object.entries(labels);
  if (pairs.length === 0) return '';
  // Label values escape backslash, double quote and newline (the exposition format's rules).
  const escaped = (v: string) => v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
  return `{${pairs.map(([k, v]) => `${k}="${escaped(String(v))}"`).join(',')}}`;
}

function formatValue(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Number.POSITIVE_INFINITY) return '+Inf';
  if (value === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(value);
}

const PRIORITIES = ['high', 'default', 'background'] as const;
/** Every member state, so each has a sample (0 included) and a dashboard's series never vanish. */
const MEMBER_STATES = Object.keys(STATE_EVENT) as MemberState[];

export function prometheusText(input: MetricsInput): string {
  const { health, resp } = input;
  const out = new Exposition();
  out.family('tessera_node_info', 'gauge', 'The node: id, store and default durability (always 1).', [
    [{ node_id: health.nodeId, store: health.store, durability: health.durability }, 1],
  ]);
  out.one(
    'tessera_uptime_seconds',
    'gauge',
    'Seconds since the process started.',
    input.process.uptimeSeconds,
  );
  out.one(
    'tessera_resident_memory_bytes',
    'gauge',
    'Resident set size of the process.',
    input.process.residentBytes,
  );
  out.one(
    'tessera_heap_used_bytes',
    'gauge',
    "The main thread's V8 heap in use.",
    input.process.heapUsedBytes,
  );
  out.one(
    'tessera_store_memory_bytes',
    'gauge',
    "Memory the stores' records take (the memory store's; 0 for stores on disk).",
    health.memory.usedBytes,
  );
  out.one(
    'tessera_store_memory_max_bytes',
    'gauge',
    'The bound of the memory store (maxMemoryBytes; 0: none).',
    health.memory.maxBytes,
  );
  out.one('tessera_fragments', 'gauge', 'Fragments the keyspace is cut into.', health.fragmentCount);

  const workers = workerSummaries(health);
  const perWorker = (pick: (w: WorkerSummary) => number): Array<[Labels, number]> =>
    workers.map((w) => [{ worker: w.index }, pick(w)]);
  const perPriority = (pick: (w: WorkerSummary) => number[]): Array<[Labels, number]> =>
    workers.flatMap((w) =>
      PRIORITIES.map((priority, p): [Labels, number] => [{ worker: w.index, priority }, pick(w)[p]]),
    );
  out.family(
    'tessera_worker_up',
    'gauge',
    'Whether a worker is ready (1) or starting, restarting or stopped (0).',
    perWorker((w) => (w.state === 'ready' ? 1 : 0)),
  );
  out.family(
    'tessera_ring_wakeups_recovered_total',
    'counter',
    'Ring waits whose wake-up never came, ended by the thread’s watchdog.',
    [
      [{ thread: 'main' }, health.ringWakeupsRecovered],
      ...health.workers.map((w): [Labels, number] => [
        { thread: `worker-${w.index}` },
        w.ringWakeupsRecovered ?? 0,
      ]),
    ],
  );
  out.family(
    'tessera_worker_restarts_total',
    'counter',
    'Times a worker died and was restarted.',
    perWorker((w) => w.restarts),
  );
  out.family(
    'tessera_worker_pending_requests',
    'gauge',
    'Requests sent to a worker and not yet answered.',
    perWorker((w) => w.pending),
  );
  out.family(
    'tessera_worker_writes_total',
    'counter',
    "Writes applied by a worker's fragments.",
    perWorker((w) => w.writes),
  );
  out.family(
    'tessera_worker_reads_total',
    'counter',
    "Reads served by a worker's fragments.",
    perWorker((w) => w.reads),
  );
  out.one(
    'tessera_snapshot_reads_total',
    'counter',
    'Reads the main thread served from its lmdb read snapshot, without a worker.',
    health.snapshotReads,
  );
  out.family(
    'tessera_expired_keys_total',
    'counter',
    'Expired values the TTL cleaner replaced with tombstones.',
    perWorker((w) => w.expiredSwept),
  );
  out.family(
    'tessera_evicted_keys_total',
    'counter',
    'Keys the memory store evicted to keep within maxMemoryBytes (maxMemoryPolicy), since the worker started.',
    health.workers.map((w): [Labels, number] => [{ worker: w.index }, w.evictedKeys ?? 0]),
  );
  out.family(
    'tessera_unflushed_writes',
    'gauge',
    'Writes applied and not yet committed to the store.',
    perWorker((w) => w.unflushed),
  );
  out.family(
    'tessera_queued_operations',
    'gauge',
    'Operations waiting in fragment queues.',
    perPriority((w) => w.queued),
  );
  out.family(
    'tessera_shed_operations_total',
    'counter',
    'Operations refused with Backpressure because their queue was full.',
    perPriority((w) => w.shed),
  );
  out.one(
    'tessera_store_commit_failures_in_a_row',
    'gauge',
    'The most store commits failed in a row on any fragment (0 when the last ones succeeded).',
    workers.reduce((n, w) => Math.max(n, w.commitFailures), 0),
  );
  out.one(
    'tessera_store_refusing_writes',
    'gauge',
    `1 while some fragment refuses writes after ${COMMIT_ATTEMPTS_MAX} failed commits in a row.`,
    refusesWrites(health) ? 1 : 0,
  );

  if (resp !== undefined) {
    out.one('tessera_connected_clients', 'gauge', 'Redis-protocol clients connected.', resp.connectedClients);
    out.one('tessera_blocked_clients', 'gauge', 'Clients blocked in WAIT.', resp.blockedClients);
    out.one(
      'tessera_connections_received_total',
      'counter',
      'Redis-protocol connections accepted.',
      resp.connectionsReceived,
    );
    out.one(
      'tessera_rejected_connections_total',
      'counter',
      'Connections refused at the client limit.',
      resp.rejectedConnections,
    );
    out.one(
      'tessera_commands_processed_total',
      'counter',
      'Redis-protocol commands run.',
      resp.commandsProcessed,
    );
    out.one('tessera_error_replies_total', 'counter', 'Error replies written.', resp.errorReplies);
    out.one(
      'tessera_keyspace_hits_total',
      'counter',
      'Key reads that found a live value.',
      resp.keyspaceHits,
    );
    out.one('tessera_keyspace_misses_total', 'counter', 'Key reads that found none.', resp.keyspaceMisses);
    out.one(
      'tessera_net_input_bytes_total',
      'counter',
      'Bytes read from Redis-protocol clients.',
      resp.netInputBytes,
    );
    out.one(
      'tessera_net_output_bytes_total',
      'counter',
      'Bytes written to Redis-protocol clients.',
      resp.netOutputBytes,
    );
    out.family(
      'tessera_pubsub_subscribed',
      'gauge',
      'Pub/Sub channels and patterns with a subscriber here.',
      [
        [{ kind: 'channel' }, resp.pubsubChannels],
        [{ kind: 'pattern' }, resp.pubsubPatterns],
        [{ kind: 'shard_channel' }, resp.pubsubShardChannels],
      ],
    );
    out.one(
      'tessera_pubsub_peer_messages_dropped_total',
      'counter',
      'Pub/Sub messages not sent to a peer that had fallen behind.',
      resp.pubsubPeerMessagesDropped,
    );
    if (resp.keys !== undefined) {
      out.one('tessera_keys', 'gauge', 'Live keys at the last count (INFO keyspace).', resp.keys.keys);
      out.one('tessera_keys_with_deadline', 'gauge', 'Of those, keys with a deadline.', resp.keys.expires);
    }
  }

  const cluster = health.cluster;
  if (cluster !== undefined) {
    const membership = cluster.membership;
    if (membership !== undefined) {
      out.family(
        'tessera_cluster_members',
        'gauge',
        "Members of the cluster in membership's view, this node included, by state.",
        MEMBER_STATES.map((state): [Labels, number] => [
          { state },
          membership.members.filter((m) => m.state === state).length,
        ]),
      );
      out.family(
        'tessera_member_unreachable',
        'gauge',
        'Whether membership finds a peer unreachable (its probes failed; a Down peer stays so).',
        membership.members
          .filter((m) => !m.self)
          .map((m): [Labels, number] => [{ peer: m.nodeId }, m.unreachable ? 1 : 0]),
      );
      out.one(
        'tessera_membership_local_health',
        'gauge',
        "Lifeguard's local-health multiplier on probe intervals and timeouts (1: healthy; more: this node is slow).",
        membership.localHealth,
      );
      out.one(
        'tessera_membership_datagrams_sent_total',
        'counter',
        'Membership datagrams sent (probes, acks, gossip).',
        membership.traffic.datagramsSent,
      );
      out.one(
        'tessera_membership_datagrams_refused_total',
        'counter',
        'Membership datagrams received and refused: tagged with another cluster secret, or malformed.',
        membership.traffic.datagramsRefused,
      );
    }
    const peers = peerSummaries(cluster);
    const perPeer = (pick: (p: PeerSummary) => number): Array<[Labels, number]> =>
      peers.map((p) => [{ peer: p.id }, pick(p)]);
    out.family(
      'tessera_peer_up',
      'gauge',
      'Whether the connection to a peer is up.',
      perPeer((p) => (p.connected ? 1 : 0)),
    );
    out.family(
      'tessera_peer_sent_bytes_total',
      'counter',
      'Bytes sent to a peer, by what they carried.',
      peers.flatMap(
        (p): Array<[Labels, number]> => [
          [{ peer: p.id, kind: 'replication' }, p.replicationBytesSent],
          [{ peer: p.id, kind: 'anti_entropy' }, p.antiEntropyBytesSent],
          [
            { peer: p.id, kind: 'other' },
            Math.max(0, p.bytesSent - p.replicationBytesSent - p.antiEntropyBytesSent),
          ],
        ],
      ),
    );
    out.family(
      'tessera_replication_backlog_operations',
      'gauge',
      'Writes waiting to reach a peer (buffered and in flight), over all fragments.',
      perPeer((p) => p.backlog),
    );
    out.family(
      'tessera_replication_lag_seconds',
      'gauge',
      'Age of the oldest write a peer has not acknowledged, over all fragments.',
      perPeer((p) => p.lagMs / 1000),
    );
    out.family(
      'tessera_replication_acked_operations_total',
      'counter',
      'Writes a peer acknowledged.',
      perPeer((p) => p.acked),
    );
    out.family(
      'tessera_replication_buffer_resets_total',
      'counter',
      'Times a backlog overflowed and was dropped for anti-entropy to repair.',
      perPeer((p) => p.resets),
    );
  }
  return out.text();
}
