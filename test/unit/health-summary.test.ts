// The node's state as /health, the status page and `tessera status` name it
// (src/main/health-summary.ts): unhealthy before degraded, degraded while any peer is down.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { COMMIT_ATTEMPTS_MAX } from '../../src/core/limits.js';
import { describePeersDown, healthState, peersDown } from '../../src/main/health-summary.js';
import type { ClusterHealth, Health } from '../../src/main/node.js';

const peer = (id: string, downSince?: string): ClusterHealth['peers'][number] => ({
  id,
  connected: downSince === undefined,
  downSince,
  forwardsInFlight: 0,
  bytesSent: 0,
  replicationBytesSent: 0,
  antiEntropyBytesSent: 0,
});

function healthOf(options: {
  workerState?: string;
  commitFailures?: number;
  peers?: ClusterHealth['peers'];
}): Health {
  return {
    nodeId: 'a',
    store: 'memory',
    durability: 'memory',
    fragmentCount: 1,
    workers: [{ index: 0, state: options.workerState ?? 'ready', restarts: 0, pending: 0 }],
    ringWakeupsRecovered: 0,
    snapshotReads: 0,
    memory: { usedBytes: 0, maxBytes: 0, policy: 'noeviction', evictedKeys: 0 },
    fragments: [
      {
        fragment: 0,
        worker: 0,
        queued: [0, 0, 0],
        shed: [0, 0, 0],
        unflushed: 0,
        committedGeneration: 0,
        syncedGeneration: 0,
        writes: 0,
        reads: 0,
        expiredSwept: 0,
        commitFailures: options.commitFailures ?? 0,
      },
    ],
    cluster:
      options.peers === undefined
        ? undefined
        : {
            members: ['a', 'b', 'c'],
            replicas: 3,
            coordinator: { id: 'a', incarnation: 1, role: 'coordinator', tableEpoch: 1 },
            state: 'ok',
            peers: options.peers,
            senders: [],
            antiEntropyPoolPages: 0,
          },
  };
}

const SINCE = '2026-01-02T03:04:05.678Z';

test('healthState: unhealthy, then degraded, then healthy', () => {
  const rows: Array<[string, Parameters<typeof healthOf>[0], string]> = [
    ['a node without peers', {}, 'healthy'],
    ['every peer connected', { peers: [peer('b'), peer('c')] }, 'healthy'],
    ['a peer down', { peers: [peer('b'), peer('c', SINCE)] }, 'degraded'],
    [
      'a peer connected but unreachable to membership',
      { peers: [peer('b'), { ...peer('c', SINCE), connected: true }] },
      'degraded',
    ],
    ['a worker restarting', { workerState: 'restarting', peers: [peer('b')] }, 'unhealthy'],
    [
      'refusing writes with a peer down',
      { commitFailures: COMMIT_ATTEMPTS_MAX, peers: [peer('b', SINCE)] },
      'unhealthy',
    ],
  ];
  for (const [name, options, state] of rows) assert.equal(healthState(healthOf(options)), state, name);
});

test('peersDown lists the disconnected peers in member order, and one line says since when', () => {
  const down = peersDown(healthOf({ peers: [peer('b', SINCE), peer('c'), peer('d', SINCE)] }));
  assert.deepEqual(down, [
    { id: 'b', downSince: SINCE },
    { id: 'd', downSince: SINCE },
  ]);
  assert.equal(describePeersDown(down), `peers down: b since ${SINCE}, d since ${SINCE}`);
});
