// A node that comes back under its old id without that run's data — the memory store keeps none
// across restarts, a data directory can be lost — would be listed by the table as a replica of copies
// it no longer holds: serving them, or a failover to it, would answer acknowledged writes as
// missing. On real processes on 127.0.0.1: such a node rejoining with --join is refused by the seed;
// one started with --peers on a new data directory gives up once it hears of its earlier run. Either
// serves nothing (a clear refusal, never a missing key) while the others serve every acknowledged
// write; removed once Down, a node under a new id joins and takes every copy anew. A cluster that
// starts on new data directories, or on the memory store, is not refused.

import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import {
  adminPost,
  type ClusterFixture,
  JoiningNodes,
  keepLogs,
  localValues,
  type NodeProcess,
  settledWithin,
  startCluster,
} from './cluster-helpers.js';
import { eventually } from './helpers.js';

const TOKEN = 'an-admin-token-for-the-lost-data-tests';
/** Deadline of every condition waited for: a loaded 2-core machine is slow, not wrong. */
const CONDITION_MS_MAX = 30_000;
const KEYS = 300;
const GAVE_UP = /this node was refused by the cluster/;

const keys = Array.from({ length: KEYS }, (_, i) => `lost-data-${i}`);
const values = keys.map((_, i) => `v${i}`);

/** Writes every key through `node`, each confirmed on `replicas` other replicas. */
async function writeAll(node: NodeProcess, replicas: number): Promise<void> {
  const client = await node.client();
  for (let i = 0; i < KEYS; i++) await client.set(keys[i], values[i]);
  assert.equal(await client.call('WAIT', String(replicas), '10000'), replicas);
}

/** Every key reads back through `node` (forwarded where another serves it). */
async function readsEverything(node: NodeProcess): Promise<boolean> {
  const client = await node.client();
  try {
    const got = await client.mget(...keys);
    return got.every((v, i) => v === values[i]);
  } catch {
    return false;
  }
}

/** Runs `body`; when it fails, the nodes' logs are kept and the failure says where. */
async function keepingLogs(
  label: string,
  nodes: () => NodeProcess[],
  body: () => Promise<void>,
): Promise<void> {
  try {
    await body();
  } catch (err) {
    const kept = await keepLogs(label, nodes());
    throw new Error(`${(err as Error).message} (node logs kept in ${kept})`, { cause: err });
  }
}

async function membersAt(node: NodeProcess): Promise<Array<{ nodeId: string; state: string }>> {
  const response = await fetch(`http://127.0.0.1:${node.adminPort}/cluster/members`);
  return ((await response.json()) as { members: Array<{ nodeId: string; state: string }> }).members;
}

async function stateOf(node: NodeProcess, id: string): Promise<string | undefined> {
  return (await membersAt(node)).find((m) => m.nodeId === id)?.state;
}

describe('a node back without its data', () => {
  let joining: JoiningNodes;

  before(async () => {
    joining = await JoiningNodes.create('cluster-lost-data', 8, TOKEN, [
      '--store',
      'memory',
      '--workers',
      '1',
    ]);
  });

  after(async () => {
    await joining.stop();
  });

  test('memory store: rejoining under its id it is refused; removed, a new id joins and takes every copy', () =>
    keepingLogs(
      'lost-data-memory',
      () => joining.nodes,
      async () => {
        const a = joining.node('a', 0, []);
        await a.start();
        const seed = joining.joinVia(0);
        const b = joining.node('b', 1, seed);
        const c = joining.node('c', 2, seed);
        await Promise.all([b.start(), c.start()]);
        const running = () => joining.nodes.filter((n) => n.running);
        await settledWithin(running, ['a', 'b', 'c'], async () => a, TOKEN, CONDITION_MS_MAX);
        for (const n of [a, b, c]) assert.doesNotMatch(n.log, GAVE_UP, `${n.id} started on the memory store`);
        await writeAll(a, 2);

        // b dies and comes back at once, under its id, on an empty memory store.
        await b.stop('SIGKILL');
        const from = b.log.length;
        await b.start();
        assert.match(
          b.log.slice(from),
          /node id b is a replica in the cluster's table and this node starts without its earlier run's data/,
        );
        const viaB = await b.client();
        await assert.rejects(viaB.get(keys[0]), GAVE_UP);
        assert.match(a.log, /join of b refused/);
        // The others serve every acknowledged write meanwhile.
        for (const n of [a, c]) await eventually(() => readsEverything(n), CONDITION_MS_MAX);

        // Down, removed; a node under a new id joins and takes every copy anew (R = 3 of 3 members).
        await eventually(async () => (await stateOf(a, 'b')) === 'Down', CONDITION_MS_MAX);
        const removed = await adminPost<{ status: string }>(a, '/cluster/remove', { node: 'b' }, TOKEN);
        assert.equal(removed.status, 'Ok');
        await b.stop();
        const d = joining.node('d', 3, seed);
        await d.start();
        await settledWithin(running, ['a', 'c', 'd'], async () => a, TOKEN, CONDITION_MS_MAX);
        assert.deepEqual(await localValues(d, keys), values, 'd holds its own copy of every key');
        assert.equal(await readsEverything(d), true);
        assert.doesNotMatch(d.log, GAVE_UP);
      },
    ));
});

describe('a node on a new data directory under --peers', () => {
  let cluster: ClusterFixture;

  before(async () => {
    cluster = await startCluster('cluster-lost-dir', ['a', 'b', 'c'], ['--down-after', '2s']);
  });

  after(async () => {
    await cluster.stop();
  });

  test('a cluster starting on new directories serves; a node whose directory was lost gives up', () =>
    keepingLogs(
      'lost-data-dir',
      () => cluster.nodes,
      async () => {
        const [a, b, c] = cluster.nodes;
        for (const n of cluster.nodes)
          assert.doesNotMatch(n.log, GAVE_UP, `${n.id} started on a new directory`);
        await writeAll(a, 2);

        await b.stop('SIGKILL');
        await rm(b.dataDir, { recursive: true, force: true });
        const from = b.log.length;
        await b.start();
        await eventually(() => GAVE_UP.test(b.log.slice(from)), CONDITION_MS_MAX);
        assert.match(b.log.slice(from), /the cluster knew node id b before this process started/);
        assert.match(b.log.slice(from), /its data directory .* is new/);
        const viaB = await b.client();
        await assert.rejects(viaB.get(keys[0]), GAVE_UP);
        for (const n of [a, c]) await eventually(() => readsEverything(n), CONDITION_MS_MAX);
      },
    ));
});
