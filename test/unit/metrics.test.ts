// The Prometheus text the admin face serves (src/main/admin/metrics.ts), checked against the
// exposition format's grammar and against the figures it was built from.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { COMMIT_ATTEMPTS_MAX } from '../../src/core/limits.js';
import { Membership, type MembershipCounters } from '../../src/core/membership.js';
import { MEMBERSHIP_CONFIG_DEFAULTS } from '../../src/core/membership-types.js';
import { prometheusText } from '../../src/main/admin/metrics.js';
import type { MemberReport } from '../../src/main/mesh/cluster.js';
import type { Health } from '../../src/main/node.js';

const fragment = (index: number, worker: number, writes: number, commitFailures = 0) => ({
  fragment: index,
  worker,
  queued: [1, 2, 3] as [number, number, number],
  shed: [0, 4, 0] as [number, number, number],
  unflushed: 0,
  committedGeneration: 0,
  syncedGeneration: 0,
  writes,
  reads: 1,
  expiredSwept: 0,
  commitFailures,
});

/** A membership core's counters as they start (all 0). */
function freshCounters(): MembershipCounters {
  const config = {
    ...MEMBERSHIP_CONFIG_DEFAULTS,
    nodeId: 'a',
    address: '127.0.0.1:7001',
    restoredIncarnation: undefined,
    members: [],
    selfState: 'Up' as const,
    selfRemoved: false,
  };
  return { ...new Membership(config, () => 0, 0).counters };
}

function member(nodeId: string, fields: Partial<MemberReport> = {}): MemberReport {
  return {
    nodeId,
    address: `127.0.0.1:700${nodeId.charCodeAt(0) - 96}`,
    incarnation: 2,
    state: 'Up',
    unreachable: false,
    suspect: false,
    self: false,
    connected: true,
    health: 'ok',
    reporters: [],
    ...fields,
  };
}

const health: Health = {
  nodeId: 'node "a"\\one',
  store: 'lmdb',
  durability: 'store',
  fragmentCount: 3,
  workers: [
    { index: 0, state: 'ready', restarts: 0, pending: 0, ringWakeupsRecovered: 3, evictedKeys: 7 },
    { index: 1, state: 'restarting', restarts: 2, pending: 5 },
  ],
  ringWakeupsRecovered: 1,
  snapshotReads: 55,
  memory: { usedBytes: 4096, maxBytes: 8192, policy: 'allkeys-lru', evictedKeys: 7 },
  fragments: [fragment(0, 0, 10), fragment(1, 1, 20), fragment(2, 0, 30, COMMIT_ATTEMPTS_MAX)],
  cluster: {
    members: ['a', 'b'],
    replicas: 2,
    coordinator: { id: 'a', incarnation: 1, role: 'coordinator', tableEpoch: 1 },
    state: 'ok',
    peers: [
      {
        id: 'b',
        connected: true,
        forwardsInFlight: 0,
        bytesSent: 100,
        replicationBytesSent: 60,
        antiEntropyBytesSent: 30,
      },
    ],
    senders: [0, 1, 2].map((f) => ({
      fragment: f,
      peer: 'b',
      state: 'connected' as const,
      connected: true,
      sessionId: 1,
      buffered: f,
      bufferedBytes: 0,
      inFlight: 1,
      lastAckLevel: 2 as const,
      ackDurabilityMismatch: false,
      reconcileRounds: 0,
      resets: 0,
      opsDropped: 0,
      batchesAcked: 0,
      opsAcked: 7,
      lagMs: 500 * f,
    })),
    antiEntropyPoolPages: 0,
    membership: {
      members: [
        member('a', { self: true }),
        member('b', { unreachable: true, suspect: true, health: 'pfail', reporters: ['a'] }),
        member('c', { state: 'Down', unreachable: true, connected: false, health: 'fail' }),
      ],
      localHealth: 3,
      traffic: {
        datagramsSent: 120,
        datagramBytesSent: 9000,
        envelopesSent: 4,
        envelopeBytesSent: 800,
        datagramsRefused: 2,
        unsent: 0,
        busyMs: 1.5,
      },
      counters: { ...freshCounters(), probes: 60, probesFailed: 5 },
    },
  },
};

/** Samples by `name{labels}`, after checking every line against the text format's grammar. */
function parse(text: string): Map<string, number> {
  assert.ok(text.endsWith('\n'));
  const samples = new Map<string, number>();
  const typed = new Set<string>();
  for (const line of text.slice(0, -1).split('\n')) {
    const meta = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$/.exec(line);
    if (meta !== null) {
      if (meta[1] === 'TYPE') {
        assert.match(meta[3], /^(counter|gauge)$/);
        assert.ok(!typed.has(meta[2]), `one TYPE per family: ${meta[2]}`);
        typed.add(meta[2]);
      }
      continue;
    }
    const sample =
      /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*",?)*\})? (-?[0-9.e+]+|NaN|[+-]Inf)$/.exec(
        line,
      );
    assert.ok(sample !== null, `not a sample line: ${line}`);
    assert.ok(typed.has(sample[1]), `sample before its TYPE: ${line}`);
    samples.set(`${sample[1]}${sample[2] ?? ''}`, Number(sample[3]));
  }
  return samples;
}

test('metrics follow the text format and add up the figures per worker and per peer', () => {
  const text = prometheusText({
    health,
    resp: {
      connectedClients: 3,
      blockedClients: 1,
      connectionsReceived: 9,
      rejectedConnections: 0,
      commandsProcessed: 1234,
      errorReplies: 5,
      keyspaceHits: 10,
      keyspaceMisses: 2,
      netInputBytes: 1000,
      netOutputBytes: 2000,
      keys: { keys: 42, expires: 7 },
      pubsubChannels: 4,
      pubsubPatterns: 2,
      pubsubShardChannels: 1,
      pubsubPeerMessagesDropped: 0,
    },
    process: { residentBytes: 1, heapUsedBytes: 2, uptimeSeconds: 3 },
  });
  const m = parse(text);
  assert.equal(m.get('tessera_node_info{node_id="node \\"a\\"\\\\one",store="lmdb",durability="store"}'), 1);
  assert.equal(m.get('tessera_worker_up{worker="0"}'), 1);
  assert.equal(m.get('tessera_worker_up{worker="1"}'), 0);
  assert.equal(m.get('tessera_worker_restarts_total{worker="1"}'), 2);
  assert.equal(m.get('tessera_ring_wakeups_recovered_total{thread="main"}'), 1);
  assert.equal(m.get('tessera_ring_wakeups_recovered_total{thread="worker-0"}'), 3);
  assert.equal(m.get('tessera_ring_wakeups_recovered_total{thread="worker-1"}'), 0);
  assert.equal(m.get('tessera_worker_writes_total{worker="0"}'), 40);
  assert.equal(m.get('tessera_snapshot_reads_total'), 55);
  assert.equal(m.get('tessera_worker_writes_total{worker="1"}'), 20);
  assert.equal(m.get('tessera_queued_operations{worker="0",priority="background"}'), 6);
  assert.equal(m.get('tessera_shed_operations_total{worker="1",priority="default"}'), 4);
  assert.equal(m.get('tessera_store_refusing_writes'), 1);
  assert.equal(m.get('tessera_store_memory_bytes'), 4096);
  assert.equal(m.get('tessera_store_memory_max_bytes'), 8192);
  assert.equal(m.get('tessera_evicted_keys_total{worker="0"}'), 7);
  assert.equal(m.get('tessera_evicted_keys_total{worker="1"}'), 0);
  assert.equal(m.get('tessera_commands_processed_total'), 1234);
  assert.equal(m.get('tessera_keyspace_misses_total'), 2);
  assert.equal(m.get('tessera_keys'), 42);
  assert.equal(m.get('tessera_pubsub_subscribed{kind="pattern"}'), 2);
  assert.equal(m.get('tessera_pubsub_subscribed{kind="shard_channel"}'), 1);
  assert.equal(m.get('tessera_peer_up{peer="b"}'), 1);
  assert.equal(m.get('tessera_peer_sent_bytes_total{peer="b",kind="other"}'), 10);
  assert.equal(m.get('tessera_replication_backlog_operations{peer="b"}'), 0 + 1 + 2 + 3);
  assert.equal(m.get('tessera_replication_lag_seconds{peer="b"}'), 1);
  assert.equal(m.get('tessera_replication_acked_operations_total{peer="b"}'), 21);
  assert.equal(m.get('tessera_cluster_members{state="Up"}'), 2);
  assert.equal(m.get('tessera_cluster_members{state="Down"}'), 1);
  assert.equal(m.get('tessera_cluster_members{state="Joining"}'), 0, 'every state has a sample');
  assert.equal(m.get('tessera_cluster_members{state="Removed"}'), 0);
  assert.equal(m.get('tessera_member_unreachable{peer="b"}'), 1);
  assert.equal(m.get('tessera_member_unreachable{peer="c"}'), 1);
  assert.ok(!m.has('tessera_member_unreachable{peer="a"}'), 'per peer: not this node');
  assert.equal(m.get('tessera_membership_local_health'), 3);
  assert.equal(m.get('tessera_membership_datagrams_sent_total'), 120);
  assert.equal(m.get('tessera_membership_datagrams_refused_total'), 2);
});

test('a node without a RESP server or peers has no client or replication series', () => {
  const m = parse(
    prometheusText({
      health: { ...health, cluster: undefined },
      resp: undefined,
      process: { residentBytes: 0, heapUsedBytes: 0, uptimeSeconds: 0 },
    }),
  );
  assert.ok(m.has('tessera_worker_up{worker="0"}'));
  assert.ok(
    ![...m.keys()].some((k) =>
      /^tessera_(commands_processed|peer_|cluster_members|member_|membership_)/.test(k),
    ),
  );
});
