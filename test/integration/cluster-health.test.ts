// Health that tells the truth in a cluster, on real processes on 127.0.0.1:
// CLUSTER INFO's cluster_state (a majority of the members reachable and every slot served),
// /health's degraded state with the peers down and since when, the status page's highlight,
// `tessera status`'s exit status, and the handshake failure log of nodes whose secrets differ.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { freePorts } from '../../bench/ports.js';
import { CLUSTER_SECRET, logged, NodeProcess, startCluster } from './cluster-helpers.js';
import { eventually, tempDir } from './helpers.js';
import { newClient } from './resp-helpers.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
/** Generous: a peer's loss shows within a connection's close, a handshake's within its 5 s deadline. */
const CONDITION_MS_MAX = 30_000;

interface HealthBody {
  state: 'healthy' | 'degraded' | 'unhealthy';
  healthy: boolean;
  peersDown: Array<{ id: string; downSince: string }>;
  cluster: { state: 'ok' | 'fail'; peers: Array<{ id: string; connected: boolean; downSince?: string }> };
}

async function healthOf(node: NodeProcess): Promise<{ status: number; body: HealthBody }> {
  const response = await fetch(`http://127.0.0.1:${node.adminPort}/health`);
  return { status: response.status, body: (await response.json()) as HealthBody };
}

/** CLUSTER INFO as a map of its fields. */
async function clusterInfoOf(node: NodeProcess): Promise<Map<string, string>> {
  const redis = newClient(node.respPort);
  try {
    const text = String(await redis.call('CLUSTER', 'INFO'));
    return new Map(
      text
        .split('\r\n')
        .filter((l) => l !== '')
        .map((l) => l.split(':') as [string, string]),
    );
  } finally {
    redis.disconnect();
  }
}

async function clusterNodesOf(node: NodeProcess): Promise<string[]> {
  const redis = newClient(node.respPort);
  try {
    return String(await redis.call('CLUSTER', 'NODES'))
      .trim()
      .split('\n');
  } finally {
    redis.disconnect();
  }
}

/** `tessera status` against the node's admin port. */
function status(node: NodeProcess): { code: number | null; stdout: string } {
  const run = spawnSync(process.execPath, [MAIN, 'status', '--admin-port', String(node.adminPort)], {
    encoding: 'utf8',
  });
  return { code: run.status, stdout: run.stdout };
}

/** Whether `node` reports exactly `down` (ids) as its peers down, degraded, with `clusterState`. */
async function reportsDown(node: NodeProcess, down: string[], clusterState: 'ok' | 'fail'): Promise<boolean> {
  const { status: code, body } = await healthOf(node);
  return (
    code === 200 &&
    body.state === 'degraded' &&
    body.cluster.state === clusterState &&
    body.peersDown.map((p) => p.id).join() === down.join() &&
    (await clusterInfoOf(node)).get('cluster_state') === clusterState
  );
}

describe('two nodes started with different cluster secrets', () => {
  test('both report cluster_state:fail and /health degraded, and log that the secret differs', async () => {
    const dir = await tempDir('health-secrets');
    const ports = await freePorts(4);
    const peers = `a@127.0.0.1:${ports[1]},b@127.0.0.1:${ports[3]}`;
    const nodes = ['a', 'b'].map(
      (id, i) =>
        new NodeProcess(id, ports[2 * i], ports[2 * i + 1], `${dir.path}/${id}`, [
          '--peers',
          peers,
          '--workers',
          '1',
          '--fragments',
          '4',
          '--admin-port',
          '0',
          '--log-level',
          'info',
        ]),
    );
    const startedMs = Date.now();
    try {
      await Promise.all(nodes.map((n) => n.start({ TESSERA_CLUSTER_SECRET: `${CLUSTER_SECRET}/${n.id}` })));
      for (const [node, other] of [nodes, [...nodes].reverse()]) {
        await eventually(
          () =>
            logged(
              node,
              0,
              'peer handshake failed',
              (l) =>
                l.peer === other.id &&
                l.differs === 'cluster secret differs' &&
                /^127\.0\.0\.1:[0-9]+$/.test(String(l.remote)),
            ),
          CONDITION_MS_MAX,
        );
        assert.ok(!node.log.includes('undefined:undefined'), `${node.id} logs no address as undefined`);
        await eventually(() => reportsDown(node, [other.id], 'fail'), CONDITION_MS_MAX);
        const { body } = await healthOf(node);
        const since = Date.parse(body.peersDown[0].downSince);
        // Never connected: down since the node started.
        assert.ok(since >= startedMs && since <= Date.now(), `down since ${body.peersDown[0].downSince}`);
        const nodesLines = await clusterNodesOf(node);
        assert.ok(
          // fail? (PFAIL): this node's own view; two islands never make a majority that says Down.
          nodesLines.some((l) => l.includes(`,${other.id} master,fail? `) && l.includes(' disconnected')),
          nodesLines.join('\n'),
        );
      }
    } finally {
      await Promise.all(nodes.map((n) => n.stop('SIGKILL')));
      await dir.cleanup();
    }
  });
});

describe('a three-node cluster losing nodes', () => {
  test('ok with all three; degraded but ok with two (the lost peer and since when); fail alone', async () => {
    const cluster = await startCluster('health-three', ['a', 'b', 'c'], ['--admin-port', '0']);
    try {
      const [a, b, c] = cluster.nodes;
      for (const node of cluster.nodes) {
        const { status: code, body } = await healthOf(node);
        assert.equal(code, 200);
        assert.equal(body.state, 'healthy');
        assert.deepEqual(body.peersDown, []);
        const info = await clusterInfoOf(node);
        assert.equal(info.get('cluster_state'), 'ok');
        assert.equal(info.get('cluster_known_nodes'), '3');
        // cluster_size: the members CLUSTER NODES shows serving at least one slot range.
        const serving = (await clusterNodesOf(node)).filter((l) => l.split(' ').length > 8);
        assert.equal(info.get('cluster_size'), String(serving.length));
        assert.equal(status(node).code, 0);
      }

      const killedMs = Date.now();
      await c.stop('SIGKILL');
      for (const node of [a, b]) {
        await eventually(() => reportsDown(node, ['c'], 'ok'), CONDITION_MS_MAX);
        const { body } = await healthOf(node);
        const since = Date.parse(body.peersDown[0].downSince);
        assert.ok(since >= killedMs && since <= Date.now(), `c down since ${body.peersDown[0].downSince}`);
        assert.equal(body.cluster.peers.find((p) => p.id === 'c')?.downSince, body.peersDown[0].downSince);
        const nodesLines = await clusterNodesOf(node);
        // fail? until the survivors agree for --down-after that it is Down (then fail).
        assert.ok(
          nodesLines.some((l) => /,c master,fail\??\s/.test(l) && l.includes(' disconnected')),
          nodesLines.join('\n'),
        );

        const page = await (await fetch(`http://127.0.0.1:${node.adminPort}/`)).text();
        assert.match(
          page,
          /<p id="degraded" class="degraded"><strong>Degraded<\/strong>: peers down: c since /,
        );
        assert.match(page, /<a href="\/cluster">cluster<\/a>/);
        assert.match(page, /\.degraded\{background:/);

        const asked = status(node);
        assert.equal(asked.code, 1, asked.stdout);
        assert.match(asked.stdout, /^node [ab]: DEGRADED /);
        assert.match(
          asked.stdout,
          /\n {2}peers down: c since \d{4}-\d\d-\d\dT[0-9:.]+Z \(cluster state ok\)\n/,
        );
      }

      await b.stop('SIGKILL');
      await eventually(() => reportsDown(a, ['b', 'c'], 'fail'), CONDITION_MS_MAX);
      assert.equal(status(a).code, 1);
    } finally {
      await cluster.stop();
    }
  });
});
